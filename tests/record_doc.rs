//! docs/record.md against the record types: for every record the doc's tables describe, the member paths
//! the Rust types declare and the paths the tables document must be the same set. The types are read
//! from the library's source with syn (not from instances), so optional members, members skipped when
//! empty and flattened structs all count. Starts no session.
//!
//! What the types declare: every named field of a record's struct (its serde `rename`, the container's
//! `rename_all`; `skip` members are none), recursively through Option, Box, Vec and sets (a list's members
//! are written `name[]` in the doc, `name` here) into the library's structs and internally tagged enums
//! (the tag and every variant's fields). A `#[serde(flatten)]` struct's members are the parent's; a
//! flattened `extra: Map<String, Value>` keeps unknown members and declares none; the figures of a
//! flattened map of figures (cgroup::Figures) are the names its sources `put` (FIGURES). A map, a
//! `serde_json::Value` and any type not in the library is one member: what the doc lists below it (keys)
//! is not checked.
//!
//! What the doc documents: the backquoted paths of a table row's first column (`a.b`, `.c` for a
//! sibling of the first, `x.{p,q}`, `list[]`; `<...>` ends a path: `times.<step>_s` is `times`), routed to
//! a record and a member prefix by TABLES, and the members of a `{a, b: ..., c[]: {d}}` list that opens
//! the row's type column (or its meaning column); in the ledger's tables, the tag's value and the
//! variant's members. Those must all be members of the types. The other way, a member is documented by a
//! row of its own, by a row of a member below it, by being named in backquotes in its parent's row, or by
//! a row above it that names (in backquotes) another member of the same type ("as in
//! `overlay.runtime`"): then it is documented if its place there is. A row naming its own member (or one
//! above it) documents nothing by that. `drums` and `type` are documented for every record by the doc's
//! first paragraph; the ledger's `v` by its section's text (TABLES.prose).

use drums_tests::{closing_brace, repo_root, split_top_level};
use std::collections::{BTreeMap, BTreeSet};
use syn::visit::Visit;

/// A record type: the key TABLES use, the file that defines it and its name there.
struct Record {
    key: &'static str,
    file: &'static str,
    ty: &'static str,
}

/// A table of docs/record.md: its section (the heading after `## ` starts with `heading`), which of the
/// section's tables (0: the first), and where its rows go: `(group, doc prefix, record, member prefix)`.
/// A path starting with the doc prefix (or equal to it without its dot) is the record's member prefix and
/// the rest. `group` is the record a row names before the rows that follow it (the pool reports' table:
/// `pool_parked`, then its members); "" for a table without such rows.
struct Table {
    heading: &'static str,
    table: usize,
    routes: &'static [(&'static str, &'static str, &'static str, &'static str)],
    /// A table of an internally tagged enum: `(tag, object)`: its first column names a value of the tag
    /// member of the object (`op` of a ledger line, `kind` of its `res`), its second the members of that
    /// variant (`owner` `{pid, start_time}`: with the members of an object).
    tag: Option<(&'static str, &'static str)>,
    /// Members the section's text documents outside its tables, each named there in backquotes.
    prose: &'static [&'static str],
}

/// The figures of a flattened map of figures: (record, the map's object path, [(file, function)]): the
/// string literals those functions give to `put`, `null` or a `put_*` helper.
type FigureSource = (&'static str, &'static str, &'static [(&'static str, &'static str)]);

struct Config {
    records: &'static [Record],
    tables: &'static [Table],
    figures: &'static [FigureSource],
    /// Sections whose tables are no record's members, with why.
    not_records: &'static [(&'static str, &'static str)],
}

const RECORDS: &[Record] = &[
    Record { key: "session", file: "lib/src/record.rs", ty: "Session" },
    Record { key: "checkpoint", file: "lib/src/record.rs", ty: "Checkpoint" },
    Record { key: "cgroup_sample", file: "lib/src/cgroup/telemetry.rs", ty: "Sample" },
    // `drums-overlay image list`'s line: the image record (image.json) with `current` and `used_by`.
    Record { key: "image", file: "lib/src/image.rs", ty: "Listed" },
    Record { key: "process", file: "lib/src/ns.rs", ty: "ProcessRecord" },
    Record { key: "error", file: "lib/src/error.rs", ty: "ErrorRecord" },
    Record { key: "destroy", file: "lib/src/destroy.rs", ty: "DestroyReport" },
    Record { key: "sweep", file: "lib/src/destroy/sweep.rs", ty: "SweepReport" },
    Record { key: "host_inventory", file: "lib/src/destroy/inventory.rs", ty: "Inventory" },
    Record { key: "audit", file: "lib/src/audit.rs", ty: "Report" },
    Record { key: "pool_parked", file: "lib/src/pool.rs", ty: "ParkedReport" },
    Record { key: "pool_fill", file: "lib/src/pool.rs", ty: "FillReport" },
    Record { key: "pool_drain", file: "lib/src/pool.rs", ty: "DrainReport" },
    Record { key: "pool_status", file: "lib/src/pool.rs", ty: "StatusReport" },
    Record { key: "ledger", file: "lib/src/ledger.rs", ty: "Line" },
    Record { key: "net_status", file: "lib/src/record/egress.rs", ty: "Status" },
    Record { key: "net_audit", file: "lib/src/record/egress.rs", ty: "AuditEntry" },
    Record { key: "vnc", file: "lib/src/view.rs", ty: "Vnc" },
    Record { key: "image_verify", file: "lib/src/image.rs", ty: "Verified" },
    Record { key: "image_digest", file: "lib/src/image.rs", ty: "DigestReport" },
    Record { key: "image_prune", file: "lib/src/image.rs", ty: "PruneReport" },
    Record { key: "checkpoint_check", file: "lib/src/record/bundle.rs", ty: "Check" },
    Record { key: "checkpoint_bundle", file: "lib/src/record/bundle.rs", ty: "Bundle" },
    Record { key: "checkpoint_export", file: "lib/src/record/bundle.rs", ty: "Export" },
];

const TABLES: &[Table] = &[
    Table { heading: "Session record", table: 0, routes: &[("", "", "session", "")], tag: None, prose: &[] },
    Table { heading: "The `cgroup` section of a session", table: 0, routes: &[("", "", "session", "")], tag: None, prose: &[] },
    Table { heading: "cgroup telemetry", table: 0, routes: &[("", "", "cgroup_sample", "")], tag: None, prose: &[] },
    Table { heading: "The `restore` section of a session", table: 0, routes: &[("", "", "session", "restore.")], tag: None, prose: &[] },
    Table { heading: "The `reseed` section of a session", table: 0, routes: &[("", "", "session", "reseed.")], tag: None, prose: &[] },
    Table { heading: "The `pool` section of a session", table: 0, routes: &[("", "", "session", "")], tag: None, prose: &[] },
    Table {
        heading: "The `pool` section of a session",
        table: 1,
        routes: &[
            ("pool_parked", "", "pool_parked", ""),
            ("pool_fill", "", "pool_fill", ""),
            ("pool_drain", "", "pool_drain", ""),
            ("pool_status", "", "pool_status", ""),
        ],
        tag: None,
        prose: &[],
    },
    Table { heading: "Checkpoint record", table: 0, routes: &[("", "", "checkpoint", "")], tag: None, prose: &[] },
    Table { heading: "Root images", table: 0, routes: &[("", "", "image", "")], tag: None, prose: &["current", "used_by"] },
    Table { heading: "Process record", table: 0, routes: &[("", "", "process", "")], tag: None, prose: &[] },
    Table { heading: "Error object", table: 0, routes: &[("", "", "error", "")], tag: None, prose: &[] },
    Table { heading: "The ledger", table: 0, routes: &[("", "", "ledger", "")], tag: Some(("op", "")), prose: &["v"] },
    Table { heading: "The ledger", table: 1, routes: &[("", "", "ledger", "")], tag: Some(("kind", "res")), prose: &[] },
    Table { heading: "Sweep reports", table: 0, routes: &[("", "destroy.", "destroy", ""), ("", "sweep.", "sweep", "")], tag: None, prose: &[] },
    Table {
        heading: "Moving a checkpoint",
        table: 0,
        routes: &[("", "check.", "checkpoint_check", ""), ("", "bundle.", "checkpoint_bundle", ""), ("", "export.", "checkpoint_export", "")],
        tag: None,
        prose: &[],
    },
    Table { heading: "Host inventory", table: 0, routes: &[("", "", "host_inventory", "")], tag: None, prose: &[] },
    Table { heading: "Network status", table: 0, routes: &[("", "", "net_status", "")], tag: None, prose: &[] },
    Table { heading: "Connection audit log", table: 0, routes: &[("", "", "net_audit", "")], tag: None, prose: &[] },
    Table { heading: "VNC record", table: 0, routes: &[("", "", "vnc", "")], tag: None, prose: &[] },
    Table {
        heading: "Image reports",
        table: 0,
        routes: &[("", "image_verify.", "image_verify", ""), ("", "image_digest.", "image_digest", ""), ("", "image_prune.", "image_prune", "")],
        tag: None,
        prose: &["drums", "type"],
    },
    Table { heading: "The audit report", table: 0, routes: &[("", "", "audit", "")], tag: None, prose: &[] },
];

const FIGURES: &[FigureSource] = &[
    ("session", "cgroup.read_back", &[("lib/src/cgroup/v1.rs", "read_back"), ("lib/src/cgroup/v2.rs", "read_back")]),
    (
        "cgroup_sample",
        "",
        &[("lib/src/cgroup/v1.rs", "sample"), ("lib/src/cgroup/v2.rs", "sample"), ("lib/src/cgroup/telemetry.rs", "sample_counted")],
    ),
];

const CONFIG: Config = Config { records: RECORDS, tables: TABLES, figures: FIGURES, not_records: &[] };

// ---------------------------------------------------------------------------------------------------
// The types.

/// What a member is: a value, a map (its keys are data), or an object of a library type (`ty`:
/// `file::Name`) with the types flattened into it.
#[derive(Clone, Debug, PartialEq)]
enum Shape {
    Leaf,
    Map,
    Object { ty: String, flat: Vec<String> },
}

#[derive(Clone, Debug)]
struct Member {
    shape: Shape,
    /// `Type.field`, for messages.
    declared: String,
}

type Tree = BTreeMap<String, Member>;

fn join(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    }
}

struct Sources {
    files: Vec<(String, syn::File)>,
}

/// A field's or container's serde attributes that change its members.
#[derive(Default)]
struct Serde {
    rename: Option<String>,
    rename_all: Option<String>,
    tag: Option<String>,
    skip: bool,
    flatten: bool,
}

fn serde_of(attrs: &[syn::Attribute]) -> Serde {
    let mut s = Serde::default();
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        a.parse_nested_meta(|m| {
            let key = m.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
            match key.as_str() {
                "rename" | "rename_all" | "tag" if m.input.peek(syn::Token![=]) => {
                    let v: syn::LitStr = m.value()?.parse()?;
                    match key.as_str() {
                        "rename" => s.rename = Some(v.value()),
                        "rename_all" => s.rename_all = Some(v.value()),
                        _ => s.tag = Some(v.value()),
                    }
                }
                "skip" => s.skip = true,
                "flatten" => s.flatten = true,
                _ if m.input.peek(syn::Token![=]) => {
                    let _: syn::Expr = m.value()?.parse()?;
                }
                _ if m.input.peek(syn::token::Paren) => {
                    m.parse_nested_meta(|n| {
                        if n.input.peek(syn::Token![=]) {
                            let _: syn::Expr = n.value()?.parse()?;
                        }
                        Ok(())
                    })?;
                }
                _ => {}
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("a serde attribute this test cannot read: {e}"));
    }
    s
}

/// A field name under a container's `rename_all`.
fn renamed(ident: &str, rule: Option<&str>) -> String {
    let words: Vec<&str> = ident.split('_').filter(|w| !w.is_empty()).collect();
    match rule {
        None | Some("snake_case") | Some("lowercase") => ident.to_string(),
        Some("kebab-case") => words.join("-"),
        Some("camelCase") => words
            .iter()
            .enumerate()
            .map(|(i, w)| if i == 0 { w.to_string() } else { w[..1].to_uppercase() + &w[1..] })
            .collect(),
        Some(other) => panic!("rename_all = {other:?} on a struct: teach this test the rule"),
    }
}

/// What a field's type is, Option, Box and lists unwrapped.
enum Kind<'a> {
    Leaf,
    Map,
    Type { file: &'a str, item: &'a syn::Item },
}

impl Sources {
    fn parse(sources: &[(String, String)]) -> Sources {
        let files = sources
            .iter()
            .map(|(name, text)| (name.clone(), syn::parse_file(text).unwrap_or_else(|e| panic!("{name}: syn cannot parse it: {e}"))))
            .collect();
        Sources { files }
    }

    /// The struct or enum `name`, as named from `from` (`qual`: the module it was named through).
    fn find(&self, name: &str, qual: Option<&str>, from: &str) -> Option<(&str, &syn::Item)> {
        let mut found: Vec<(&str, &syn::Item)> = vec![];
        for (file, f) in &self.files {
            for item in &f.items {
                let ident = match item {
                    syn::Item::Struct(s) => &s.ident,
                    syn::Item::Enum(e) => &e.ident,
                    _ => continue,
                };
                if ident == name {
                    found.push((file.as_str(), item));
                }
            }
        }
        if qual.is_none() {
            if let Some(here) = found.iter().copied().find(|(f, _)| *f == from) {
                return Some(here);
            }
        }
        let qual = qual.map(str::to_string).or_else(|| self.imported_from(name, from));
        if let Some(q) = qual {
            let by_module: Vec<_> = found.iter().copied().filter(|(f, _)| f.ends_with(&format!("/{q}.rs")) || f.ends_with(&format!("/{q}/mod.rs"))).collect();
            if !by_module.is_empty() {
                found = by_module;
            }
        }
        assert!(found.len() <= 1, "`{name}` (named in {from}) is defined in several files: {:?}; name it with its module", found.iter().map(|f| f.0).collect::<Vec<_>>());
        found.pop()
    }

    /// The module `from` imports `name` from (`use scan::Kind`, `use super::{A, B}`: the module of
    /// `from`'s parent directory), if it does.
    fn imported_from(&self, name: &str, from: &str) -> Option<String> {
        fn walk(t: &syn::UseTree, module: Option<String>, name: &str) -> Option<Option<String>> {
            match t {
                syn::UseTree::Path(p) => walk(&p.tree, Some(p.ident.to_string()), name),
                syn::UseTree::Name(n) if n.ident == name => Some(module),
                syn::UseTree::Rename(r) if r.rename == name => Some(module),
                syn::UseTree::Group(g) => g.items.iter().find_map(|i| walk(i, module.clone(), name)),
                _ => None,
            }
        }
        let (_, f) = self.files.iter().find(|(n, _)| n == from)?;
        let module = f.items.iter().find_map(|i| match i {
            syn::Item::Use(u) => walk(&u.tree, None, name),
            _ => None,
        })??;
        let dir = |file: &str| file.rsplit_once('/').map(|(d, _)| d.to_string()).unwrap_or_default();
        Some(match module.as_str() {
            // lib/src/cgroup/telemetry.rs's parent is the module cgroup.
            "super" => dir(from).rsplit('/').next().unwrap_or("").to_string(),
            _ => module,
        })
    }

    fn kind<'a>(&'a self, ty: &'a syn::Type, from: &'a str) -> Kind<'a> {
        match ty {
            syn::Type::Reference(r) => self.kind(&r.elem, from),
            syn::Type::Paren(p) => self.kind(&p.elem, from),
            syn::Type::Group(g) => self.kind(&g.elem, from),
            syn::Type::Path(p) => {
                let segs = &p.path.segments;
                let last = segs.last().expect("a path has a segment");
                let name = last.ident.to_string();
                let first_arg = || match &last.arguments {
                    syn::PathArguments::AngleBracketed(a) => a.args.iter().find_map(|g| match g {
                        syn::GenericArgument::Type(t) => Some(t),
                        _ => None,
                    }),
                    _ => None,
                };
                match name.as_str() {
                    "Option" | "Box" | "Vec" | "VecDeque" | "BTreeSet" | "HashSet" | "Arc" | "Rc" => {
                        first_arg().map(|t| self.kind(t, from)).unwrap_or(Kind::Leaf)
                    }
                    "BTreeMap" | "HashMap" | "Map" | "Value" => Kind::Map,
                    _ => {
                        let qual = (segs.len() > 1).then(|| segs[segs.len() - 2].ident.to_string());
                        match self.find(&name, qual.as_deref(), from) {
                            Some((file, item)) => match item {
                                syn::Item::Enum(e) if serde_of(&e.attrs).tag.is_none() => Kind::Leaf,
                                _ => Kind::Type { file, item },
                            },
                            None => Kind::Leaf,
                        }
                    }
                }
            }
            _ => Kind::Leaf,
        }
    }
}

fn item_name(item: &syn::Item) -> String {
    match item {
        syn::Item::Struct(s) => s.ident.to_string(),
        syn::Item::Enum(e) => e.ident.to_string(),
        _ => unreachable!("only structs and enums are looked up"),
    }
}

/// Walks a record's types into its member tree.
struct Walker<'a> {
    src: &'a Sources,
    /// Object path -> the figures its flattened map holds.
    figures: BTreeMap<String, Vec<String>>,
    /// A type's own tree (for references) has no figure sources: its flattened maps are then silent.
    standalone: bool,
    problems: Vec<String>,
}

impl Walker<'_> {
    /// The members of `item` (defined in `file`) into `out`, under the object at `at`; returns the types
    /// flattened into it.
    fn expand(&mut self, file: &str, item: &syn::Item, at: &str, out: &mut Tree, depth: usize) -> Vec<String> {
        assert!(depth < 16, "the types nest deeper than 16 at `{at}`: a recursive type?");
        let owner = item_name(item);
        let mut flat = vec![];
        match item {
            syn::Item::Struct(s) => {
                let rule = serde_of(&s.attrs).rename_all;
                for f in s.fields.iter() {
                    let Some(ident) = &f.ident else { continue };
                    self.field(file, &owner, &ident.to_string(), &f.attrs, &f.ty, rule.as_deref(), at, out, depth, &mut flat);
                }
            }
            syn::Item::Enum(e) => {
                let attrs = serde_of(&e.attrs);
                let tag = attrs.tag.expect("only internally tagged enums are objects");
                out.insert(join(at, &tag), Member { shape: Shape::Leaf, declared: format!("{owner} (tag)") });
                for v in &e.variants {
                    match &v.fields {
                        syn::Fields::Named(n) => {
                            for f in &n.named {
                                let ident = f.ident.as_ref().expect("named").to_string();
                                self.field(file, &owner, &ident, &f.attrs, &f.ty, None, at, out, depth, &mut flat);
                            }
                        }
                        syn::Fields::Unnamed(u) if u.unnamed.len() == 1 => {
                            if let Kind::Type { file: f2, item: i2 } = self.src.kind(&u.unnamed[0].ty, file) {
                                flat.push(format!("{f2}::{}", item_name(i2)));
                                flat.extend(self.expand(f2, i2, at, out, depth + 1));
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => unreachable!(),
        }
        flat
    }

    #[allow(clippy::too_many_arguments)]
    fn field(&mut self, file: &str, owner: &str, ident: &str, attrs: &[syn::Attribute], ty: &syn::Type, rule: Option<&str>, at: &str, out: &mut Tree, depth: usize, flat: &mut Vec<String>) {
        let s = serde_of(attrs);
        if s.skip {
            return;
        }
        let ident = ident.trim_start_matches("r#");
        if s.flatten {
            match self.src.kind(ty, file) {
                // Unknown members, kept as they are: no member of this version.
                Kind::Map if ident == "extra" => {}
                Kind::Map => match self.figures.get(at) {
                    Some(names) => {
                        for n in names.clone() {
                            out.insert(join(at, &n), Member { shape: Shape::Leaf, declared: format!("{owner}.{ident} (a figure)") });
                        }
                    }
                    None if self.standalone => {}
                    None => self.problems.push(format!(
                        "{owner}.{ident}: a flattened map at `{at}` that is not `extra`: name the sources of its members in FIGURES"
                    )),
                },
                Kind::Type { file: f2, item: i2 } => {
                    flat.push(format!("{f2}::{}", item_name(i2)));
                    flat.extend(self.expand(f2, i2, at, out, depth + 1));
                }
                Kind::Leaf => self.problems.push(format!("{owner}.{ident}: flattens a type this test does not know")),
            }
            return;
        }
        let name = s.rename.unwrap_or_else(|| renamed(ident, rule));
        let path = join(at, &name);
        let shape = match self.src.kind(ty, file) {
            Kind::Leaf => Shape::Leaf,
            Kind::Map => Shape::Map,
            Kind::Type { file: f2, item: i2 } => {
                let flat = self.expand(f2, i2, &path, out, depth + 1);
                Shape::Object { ty: format!("{f2}::{}", item_name(i2)), flat }
            }
        };
        out.insert(path, Member { shape, declared: format!("{owner}.{ident}") });
    }
}

/// The string literals `put`, `null` or a `put_*` function are given: the names of figures.
struct FigureNames(BTreeSet<String>);

impl<'ast> Visit<'ast> for FigureNames {
    fn visit_expr_method_call(&mut self, m: &'ast syn::ExprMethodCall) {
        if m.method == "put" || m.method == "null" {
            if let Some(syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. })) = m.args.first() {
                self.0.insert(s.value());
            }
        }
        syn::visit::visit_expr_method_call(self, m);
    }
    fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
        if let syn::Expr::Path(p) = &*c.func {
            if p.path.segments.last().is_some_and(|s| s.ident.to_string().starts_with("put")) {
                for a in &c.args {
                    if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = a {
                        self.0.insert(s.value());
                    }
                }
            }
        }
        syn::visit::visit_expr_call(self, c);
    }
}

fn figure_names(src: &Sources, fns: &[(&str, &str)]) -> Result<Vec<String>, String> {
    let mut v = FigureNames(BTreeSet::new());
    for (file, name) in fns {
        let (_, f) = src.files.iter().find(|(n, _)| n == file).ok_or(format!("FIGURES names {file}, which is not a source"))?;
        let mut seen = false;
        for item in &f.items {
            match item {
                syn::Item::Fn(func) if func.sig.ident == name => {
                    seen = true;
                    v.visit_block(&func.block);
                }
                syn::Item::Impl(imp) => {
                    for ii in &imp.items {
                        if let syn::ImplItem::Fn(func) = ii {
                            if func.sig.ident == name {
                                seen = true;
                                v.visit_block(&func.block);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if !seen {
            return Err(format!("FIGURES: {file} has no function `{name}`"));
        }
    }
    if v.0.is_empty() {
        return Err(format!("FIGURES: no figure names in {fns:?}"));
    }
    Ok(v.0.into_iter().collect())
}

// ---------------------------------------------------------------------------------------------------
// The doc.

struct Row {
    /// Index into Doc::headings.
    section: usize,
    table: usize,
    group: String,
    cells: Vec<String>,
    line: usize,
}

struct Doc {
    headings: Vec<String>,
    /// Tables per heading.
    tables: Vec<usize>,
    /// The text of each section outside its tables.
    prose: Vec<String>,
    rows: Vec<Row>,
}

/// The cells of a table line: split at `|` but not at `\|`, which is a `|` in the cell.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').filter(|s| !s.ends_with('\\')).unwrap_or(inner);
    let mut out = vec![String::new()];
    let mut prev = ' ';
    for c in inner.chars() {
        if c == '|' && prev != '\\' {
            out.push(String::new());
        } else {
            if c == '|' {
                out.last_mut().unwrap().pop();
            }
            out.last_mut().unwrap().push(c);
        }
        prev = c;
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

/// The backquoted parts of a cell.
fn spans(s: &str) -> Vec<String> {
    s.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

fn parse_doc(text: &str) -> Doc {
    let mut doc = Doc { headings: vec!["(before the first heading)".into()], tables: vec![0], prose: vec![String::new()], rows: vec![] };
    let mut in_table = false;
    let mut header_rows = 0;
    let mut group = String::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(h) = line.strip_prefix("## ") {
            doc.headings.push(h.trim().to_string());
            doc.tables.push(0);
            doc.prose.push(String::new());
            in_table = false;
            continue;
        }
        if !line.trim_start().starts_with('|') {
            in_table = false;
            let p = doc.prose.last_mut().unwrap();
            p.push_str(line);
            p.push('\n');
            continue;
        }
        let section = doc.headings.len() - 1;
        if !in_table {
            in_table = true;
            header_rows = 0;
            group.clear();
            doc.tables[section] += 1;
        }
        if header_rows < 2 {
            header_rows += 1;
            continue;
        }
        let c = cells(line);
        // A row naming a record, its other cells empty: the rows below are that record's.
        let outside: String = c[0].split('`').step_by(2).collect();
        if c[1..].iter().all(String::is_empty) && outside.chars().any(|ch| ch.is_alphabetic()) {
            group = spans(&c[0]).first().cloned().unwrap_or_default();
            continue;
        }
        doc.rows.push(Row { section, table: doc.tables[section] - 1, group: group.clone(), cells: c, line: i + 1 });
    }
    doc
}

/// `{a,b}` alternatives expanded.
fn expand_braces(s: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (s.find('{'), s.find('}')) else { return vec![s.to_string()] };
    if close < open {
        return vec![s.to_string()];
    }
    s[open + 1..close].split(',').flat_map(|alt| expand_braces(&format!("{}{}{}", &s[..open], alt.trim(), &s[close + 1..]))).collect()
}

fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(|f| f.is_ascii_lowercase() || f == '_') && c.all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || x == '_')
}

/// A doc path as member paths: braces expanded, `[]` dropped, cut at a `<...>` segment. None: not a path.
fn norm(p: &str) -> Option<Vec<String>> {
    let mut out = vec![];
    for alt in expand_braces(p) {
        let mut segs = vec![];
        for seg in alt.split('.') {
            if seg.contains('<') {
                break;
            }
            let seg = seg.trim_end_matches("[]");
            if !is_name(seg) {
                return None;
            }
            segs.push(seg);
        }
        if segs.is_empty() {
            return None;
        }
        out.push(segs.join("."));
    }
    Some(out)
}

/// The paths a row's first column names: `.c` after `a.b` is `a.c`.
fn row_paths(cell: &str) -> Result<Vec<String>, String> {
    let mut out = vec![];
    let mut base: Option<String> = None;
    for sp in spans(cell) {
        let full = match (sp.strip_prefix('.'), &base) {
            (Some(rest), Some(b)) => match b.rfind('.') {
                Some(i) => format!("{}.{rest}", &b[..i]),
                None => rest.to_string(),
            },
            (Some(_), None) => return Err(format!("`{sp}` has no path before it to be relative to")),
            (None, _) => {
                base = Some(sp.clone());
                sp.clone()
            }
        };
        out.extend(norm(&full).ok_or_else(|| format!("`{sp}` is not a member path"))?);
    }
    Ok(out)
}

/// The members of a `{a, b: ..., c[]: {d, e}}` list, relative.
fn brace_members(s: &str) -> Vec<String> {
    let s = s.trim();
    let Some(inner) = s.strip_prefix('{') else { return vec![] };
    let inner = &inner[..closing_brace(inner)];
    let mut out = vec![];
    for item in split_top_level(inner) {
        let item = item.trim();
        let name: String = item.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        if !is_name(&name) {
            continue;
        }
        out.push(name.clone());
        let rest = item[name.len()..].trim_start_matches("[]").trim_start();
        if let Some(nested) = rest.strip_prefix(':').map(str::trim_start).filter(|r| r.starts_with('{')) {
            out.extend(brace_members(nested).into_iter().map(|m| format!("{name}.{m}")));
        }
    }
    out
}


/// The member list of a row: the first backquoted part of its type column (a table of three or more
/// columns) or of its meaning column, when the column opens with it and it is a `{...}` list.
fn row_list(row: &Row) -> Vec<String> {
    let cols: Vec<&String> = if row.cells.len() >= 3 { vec![&row.cells[1], row.cells.last().unwrap()] } else { row.cells.last().into_iter().collect() };
    for c in cols {
        if c.starts_with("`{") {
            return brace_members(&spans(c)[0]);
        }
    }
    vec![]
}

// ---------------------------------------------------------------------------------------------------
// The comparison.

struct Checked<'a> {
    cfg: &'a Config,
    doc: &'a Doc,
    trees: BTreeMap<&'static str, Tree>,
    /// What the tables document: record -> member path -> rows.
    documented: BTreeMap<&'static str, BTreeMap<String, Vec<usize>>>,
    /// What sections' texts document: record -> member paths.
    prose: BTreeMap<&'static str, BTreeSet<String>>,
}

impl Checked<'_> {
    fn table_of(&self, row: &Row) -> Option<&'static Table> {
        let h = &self.doc.headings[row.section];
        let tables: &'static [Table] = self.cfg.tables;
        tables.iter().find(|t| h.starts_with(t.heading) && t.table == row.table)
    }

    /// A doc path of a row of `table` as (record, member path).
    fn route(table: &Table, group: &str, p: &str) -> Option<(&'static str, String)> {
        table
            .routes
            .iter()
            .filter(|(g, pre, _, _)| *g == group && (p.starts_with(pre) || p == pre.trim_end_matches('.')))
            .max_by_key(|(_, pre, _, _)| pre.len())
            .map(|(_, pre, rec, mpre)| (*rec, format!("{mpre}{}", p.get(pre.len()..).unwrap_or("")).trim_end_matches('.').to_string()))
    }

    /// What a backquoted path in a row refers to: a member of this table's record, else of any table's.
    fn resolve(&self, table: &Table, group: &str, p: &str) -> Option<(&'static str, String, &Member)> {
        let found = |(r, m): (&'static str, String)| self.trees.get(r).and_then(|t| t.get(&m)).map(|x| (r, m, x));
        Self::route(table, group, p).and_then(found).or_else(|| {
            self.cfg.tables.iter().flat_map(|t| t.routes.iter()).find_map(|(_, pre, rec, mpre)| {
                (p.starts_with(pre) || p == pre.trim_end_matches('.'))
                    .then(|| (*rec, format!("{mpre}{}", p.get(pre.len()..).unwrap_or("")).trim_end_matches('.').to_string()))
                    .and_then(found)
            })
        })
    }
}

/// Every difference between the doc's tables and the types, as messages.
fn check(doc_text: &str, sources: &[(String, String)], cfg: &Config) -> Vec<String> {
    let src = Sources::parse(sources);
    let doc = parse_doc(doc_text);
    let mut problems = vec![];

    // The types' trees.
    let mut trees = BTreeMap::new();
    for r in cfg.records {
        let Some((file, item)) = src.find(r.ty, None, r.file).filter(|(f, _)| *f == r.file) else {
            problems.push(format!("RECORDS: {} has no type {}", r.file, r.ty));
            continue;
        };
        let mut figures = BTreeMap::new();
        for (_, at, fns) in cfg.figures.iter().filter(|f| f.0 == r.key) {
            match figure_names(&src, fns) {
                Ok(n) => {
                    figures.insert(at.to_string(), n);
                }
                Err(e) => problems.push(e),
            }
        }
        let mut w = Walker { src: &src, figures, standalone: false, problems: vec![] };
        let mut t = Tree::new();
        let flat = w.expand(file, item, "", &mut t, 0);
        t.insert(String::new(), Member { shape: Shape::Object { ty: format!("{file}::{}", r.ty), flat }, declared: r.ty.to_string() });
        problems.extend(w.problems);
        trees.insert(r.key, t);
    }

    // `drums` and `type`, members of every record, are documented once, before the first section.
    for m in ["`drums`", "`type`"] {
        if !doc.prose[0].contains(m) {
            problems.push(format!("docs/record.md: the text before the first section does not name {m}, which every record has"));
        }
    }
    // Every section with a table is mapped, or said not to be a record.
    for (i, h) in doc.headings.iter().enumerate() {
        for n in 0..doc.tables[i] {
            let mapped = cfg.tables.iter().any(|t| h.starts_with(t.heading) && t.table == n);
            if !mapped && !cfg.not_records.iter().any(|(nr, _)| h.starts_with(nr)) {
                problems.push(format!("docs/record.md, \"{h}\": table {n} is mapped to no record type (TABLES) nor said to be none"));
            }
        }
    }
    for t in cfg.tables {
        if !doc.headings.iter().enumerate().any(|(i, h)| h.starts_with(t.heading) && doc.tables[i] > t.table) {
            problems.push(format!("TABLES: docs/record.md has no table {} in a section \"{}\"", t.table, t.heading));
        }
    }

    let mut c = Checked { cfg, doc: &doc, trees, documented: BTreeMap::new(), prose: BTreeMap::new() };

    // What the doc documents: record -> path -> rows.
    let mut documented: BTreeMap<&'static str, BTreeMap<String, Vec<usize>>> = BTreeMap::new();
    for (ri, row) in doc.rows.iter().enumerate() {
        let Some(table) = c.table_of(row) else { continue };
        let where_ = format!("docs/record.md:{} (\"{}\")", row.line, doc.headings[row.section]);
        if let Some((tag, object)) = table.tag {
            // A variant's row: the tag's value, then the variant's members.
            let Some((rec, at)) = Checked::route(table, &row.group, &join(object, tag)).map(|(r, m)| (r, m.rsplit_once('.').map(|x| x.0.to_string()).unwrap_or_default())) else {
                problems.push(format!("{where_}: goes to no record (TABLES)"));
                continue;
            };
            let mut names = vec![join(&at, tag)];
            let mut last: Option<String> = None;
            for sp in spans(row.cells.get(1).map(String::as_str).unwrap_or("")) {
                if sp.starts_with('{') {
                    if let Some(l) = &last {
                        names.extend(brace_members(&sp).into_iter().map(|m| join(&join(&at, l), &m)));
                    }
                } else if let Some(n) = norm(&sp) {
                    names.extend(n.iter().map(|n| join(&at, n)));
                    last = n.into_iter().next();
                } else {
                    problems.push(format!("{where_}: `{sp}` is not a member path"));
                }
            }
            for m in names {
                documented.entry(rec).or_default().entry(m).or_default().push(ri);
            }
            continue;
        }
        let paths = match row_paths(&row.cells[0]) {
            Ok(p) if !p.is_empty() => p,
            Ok(_) => {
                problems.push(format!("{where_}: the row names no member in backquotes"));
                continue;
            }
            Err(e) => {
                problems.push(format!("{where_}: {e}"));
                continue;
            }
        };
        let list = row_list(row);
        for p in paths {
            let Some((rec, m)) = Checked::route(table, &row.group, &p) else {
                problems.push(format!("{where_}: `{p}` goes to no record (TABLES: no route for group {:?})", row.group));
                continue;
            };
            let all = std::iter::once(m.clone()).chain(list.iter().map(|l| join(&m, l)));
            for m in all {
                documented.entry(rec).or_default().entry(m).or_default().push(ri);
            }
        }
    }
    // Members a section's text names outside its tables.
    let mut prose_documented: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    for t in cfg.tables {
        for name in t.prose {
            let said = doc.headings.iter().zip(&doc.prose).any(|(h, text)| h.starts_with(t.heading) && text.contains(&format!("`{name}`")));
            if !said {
                problems.push(format!("docs/record.md, \"{}\": `{name}` is not named in its text (TABLES.prose)", t.heading));
            }
            for (_, _, rec, mpre) in t.routes {
                prose_documented.entry(rec).or_default().insert(format!("{mpre}{name}"));
            }
        }
    }

    for r in cfg.records {
        if !documented.contains_key(r.key) {
            problems.push(format!("RECORDS: {} ({}) is documented by no table (TABLES)", r.key, r.ty));
        }
    }
    // Documented, not in the types.
    for (rec, paths) in &documented {
        let tree = &c.trees[rec];
        let ty = cfg.records.iter().find(|r| r.key == *rec).map(|r| r.ty).unwrap_or("?");
        for (p, rows) in paths {
            if tree.contains_key(p) {
                continue;
            }
            // Below a map: keys, which are data.
            let under_map = p.match_indices('.').any(|(i, _)| tree.get(&p[..i]).is_some_and(|m| m.shape == Shape::Map));
            if !under_map {
                let row = &doc.rows[rows[0]];
                problems.push(format!(
                    "docs/record.md:{} (\"{}\"): `{p}` is documented but {ty} ({rec}) has no such member",
                    row.line, doc.headings[row.section]
                ));
            }
        }
    }

    // In the types, not documented.
    c.documented = documented;
    c.prose = prose_documented;
    let empty = BTreeMap::new();
    for r in cfg.records {
        let Some(tree) = c.trees.get(r.key) else { continue };
        let docd = c.documented.get(r.key).unwrap_or(&empty);
        for (p, member) in tree {
            if c.is_documented(r.key, p, 0) {
                continue;
            }
            // The section: the one documenting the member nearest to it.
            let common = |k: &str| k.split('.').zip(p.split('.')).take_while(|(a, b)| a == b).count();
            let section = docd
                .iter()
                .max_by_key(|(k, _)| (common(k), std::cmp::Reverse((*k).clone())))
                .map(|(_, rows)| doc.headings[doc.rows[rows[0]].section].clone())
                .unwrap_or_else(|| "(no section)".into());
            // The path as the section writes it.
            let shown = cfg
                .tables
                .iter()
                .flat_map(|t| t.routes.iter())
                .filter(|(_, _, rec, mpre)| *rec == r.key && p.starts_with(mpre))
                .max_by_key(|(_, _, _, mpre)| mpre.len())
                .map(|(_, pre, _, mpre)| format!("{pre}{}", &p[mpre.len()..]))
                .unwrap_or_else(|| p.clone());
            problems.push(format!("\"{section}\": `{shown}` ({}) is in the types but not documented", member.declared));
        }
    }
    problems
}

impl Checked<'_> {
    /// Whether member `p` of record `rec` is documented: by a row of its own or of a member below it, by
    /// the section's text, or by a row above it (`covered`).
    fn is_documented(&self, rec: &str, p: &str, depth: usize) -> bool {
        let Some(docd) = self.documented.get(rec) else { return false };
        if p.is_empty() || (!p.contains('.') && (p == "drums" || p == "type")) || self.prose.get(rec).is_some_and(|s| s.contains(p)) {
            return true;
        }
        let below = format!("{p}.");
        docd.contains_key(p) || docd.range(below.clone()..).next().is_some_and(|(k, _)| k.starts_with(&below)) || (depth < 8 && self.covered(rec, p, depth))
    }

    /// Whether a row above `p` documents it: by naming it (its parent's row), or by naming another
    /// documented member of a type that holds it, where it is documented too ("as in `overlay.runtime`").
    fn covered(&self, rec: &str, p: &str, depth: usize) -> bool {
        let (Some(docd), Some(tree)) = (self.documented.get(rec), self.trees.get(rec)) else { return false };
        let segs: Vec<&str> = p.split('.').collect();
        for n in (1..segs.len()).rev() {
            let a = segs[..n].join(".");
            let Some(rows) = docd.get(&a) else { continue };
            for &ri in rows {
                let row = &self.doc.rows[ri];
                let text = row.cells[1..].join(" | ");
                let quoted = spans(&text);
                // Named in its parent's row.
                if n + 1 == segs.len() && quoted.iter().any(|q| q.split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_')).any(|w| w == segs[n])) {
                    return true;
                }
                // Another member named in the row, of a type that holds `p` at an object between the
                // row's member and `p`: `p` is documented if its place there is.
                let Some(table) = self.table_of(row) else { continue };
                for q in &quoted {
                    for rp in norm(q).unwrap_or_default() {
                        let Some((rrec, rpath, Member { shape: Shape::Object { ty: rty, flat: rflat }, .. })) = self.resolve(table, &row.group, &rp) else { continue };
                        // A row naming the member itself, or one above it, says nothing of what it holds.
                        if rrec == rec && (rpath == p || p.starts_with(&format!("{rpath}."))) {
                            continue;
                        }
                        for e in n..=segs.len() {
                            let at = segs[..e].join(".");
                            let Some(Member { shape: Shape::Object { ty, flat }, .. }) = tree.get(&at) else { continue };
                            let same = std::iter::once(ty).chain(flat).any(|t| t == rty || rflat.contains(t));
                            if same && self.is_documented(rrec, &join(&rpath, &segs[e..].join(".")), depth + 1) {
                                return true;
                            }
                        }
                    }
                }
            }
        }
        false
    }
}

// ---------------------------------------------------------------------------------------------------

fn library_sources() -> Vec<(String, String)> {
    let root = repo_root();
    let mut out = vec![];
    let mut dirs = vec![root.join("lib/src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())).flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                out.push((rel, std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_record_doc_documents_every_member_of_the_types_and_no_other() {
    let doc = std::fs::read_to_string(repo_root().join("docs/record.md")).expect("docs/record.md");
    let problems = check(&doc, &library_sources(), &CONFIG);
    assert!(problems.is_empty(), "docs/record.md and the record types differ ({}):\n{}", problems.len(), problems.join("\n"));
}

/// The real doc with `f` applied to its text: the problems found against the real sources.
fn problems_with_doc(f: impl Fn(&str) -> String) -> Vec<String> {
    let doc = std::fs::read_to_string(repo_root().join("docs/record.md")).expect("docs/record.md");
    let changed = f(&doc);
    assert_ne!(changed, doc, "the change applies");
    check(&changed, &library_sources(), &CONFIG)
}

/// The real sources with `f` applied to `file`: the problems found against the real doc.
fn problems_with_source(file: &str, f: impl Fn(&str) -> String) -> Vec<String> {
    let doc = std::fs::read_to_string(repo_root().join("docs/record.md")).expect("docs/record.md");
    let mut sources = library_sources();
    let (_, text) = sources.iter_mut().find(|(n, _)| n == file).unwrap_or_else(|| panic!("no source {file}"));
    let changed = f(text);
    assert_ne!(&changed, text, "the change applies");
    *text = changed;
    check(&doc, &sources, &CONFIG)
}

fn one_problem(problems: &[String], wanted: &[&str]) {
    assert_eq!(problems.len(), 1, "one problem expected, naming {wanted:?}: {problems:#?}");
    for w in wanted {
        assert!(problems[0].contains(w), "the problem names {w:?}: {}", problems[0]);
    }
}

#[test]
fn a_member_documented_but_not_in_the_types_fails() {
    // A row of a member no type has, in a section's own path form (restore's are relative).
    let p = problems_with_doc(|d| d.replace("| `ksm` | bool |", "| `fake_member` | bool | a member no type has |\n| `ksm` | bool |"));
    one_problem(&p, &["`restore.fake_member` is documented", "Session (session)", "\"The `restore` section of a session"]);
    // A sibling in the shorthand, and a member of a `{...}` list.
    let p = problems_with_doc(|d| d.replace("`desktop.width`, `.height`, `.depth`", "`desktop.width`, `.height`, `.depth`, `.fake_member`"));
    one_problem(&p, &["`desktop.fake_member` is documented"]);
    let p = problems_with_doc(|d| d.replace("`{role, pid, host_pid}`", "`{role, pid, host_pid, fake_member}`"));
    one_problem(&p, &["`desktop.processes.fake_member` is documented"]);
}

#[test]
fn a_member_in_the_types_but_not_documented_fails() {
    // A row removed from the doc.
    let p = problems_with_doc(|d| d.replace("| `ready.polls` | count | | screenshots taken |\n", ""));
    one_problem(&p, &["`ready.polls`", "Ready.polls", "in the types but not documented", "\"Session record"]);
    // A member added to a type, optional and skipped when absent: it counts all the same.
    let p = problems_with_source("lib/src/record.rs", |t| {
        t.replacen("pub struct Ready {\n", "pub struct Ready {\n    #[serde(default, skip_serializing_if = \"Option::is_none\")]\n    pub fake_member: Option<u32>,\n", 1)
    });
    one_problem(&p, &["`ready.fake_member`", "Ready.fake_member", "in the types but not documented"]);
    // A member of a flattened struct (the checkpoint's boundary[] flattens record::boundary::Boundary).
    let p = problems_with_source("lib/src/record/boundary.rs", |t| t.replacen("    pub no_new_privs: bool,\n", "    pub no_new_privs: bool,\n    pub fake_member: u8,\n", 1));
    one_problem(&p, &["`boundary.fake_member`", "Boundary.fake_member", "\"Checkpoint record"]);
    // A figure of the cgroup section's read-back put by a backend.
    let p = problems_with_source("lib/src/cgroup/v2.rs", |t| t.replacen("put_max(self.fs, &mut f, \"pids_max\"", "f.null(\"fake_figure\", \"x\");\n        put_max(self.fs, &mut f, \"pids_max\"", 1));
    one_problem(&p, &["`cgroup.read_back.fake_figure`", "a figure"]);
}

/// The rules on a small doc and small types.
mod rules {
    use super::*;

    const SRC: &str = r#"
        pub struct Rec {
            pub drums: u32,
            #[serde(rename = "type")]
            pub kind: RecType,
            #[serde(rename = "renamed")]
            pub plain: u32,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub opt: Option<Inner>,
            pub list: Vec<Inner>,
            pub keyed: BTreeMap<String, Inner>,
            pub twin: Inner,
            #[serde(skip)]
            pub hidden: u32,
            #[serde(flatten)]
            pub flat: Flat,
            #[serde(flatten)]
            pub extra: Map<String, Value>,
            pub res: Res,
        }
        pub struct Inner { pub x: u32, pub y: Option<u32> }
        pub struct Flat { pub z: bool }
        #[serde(tag = "kind", rename_all = "snake_case")]
        pub enum Res { A { path: String }, B { name: String, n: u32 } }
    "#;

    const RECORDS: &[Record] = &[Record { key: "rec", file: "lib/src/rec.rs", ty: "Rec" }];
    const TABLES: &[Table] = &[Table { heading: "Rec", table: 0, routes: &[("", "", "rec", "")], tag: None, prose: &[] }];
    const CONFIG: Config = Config { records: RECORDS, tables: TABLES, figures: &[], not_records: &[("Not", "prose")] };

    const DOC: &str = "# x\n\nEvery record has `drums` and `type`.\n\n## Rec record\n\n| field | type | meaning |\n|---|---|---|\n\
        | `renamed` | integer | |\n\
        | `opt.x`, `.y` | integer | |\n\
        | `list[]` | `{x, y}` | |\n\
        | `keyed` | `{k: object}` | by a key |\n\
        | `twin` | object | as `opt` |\n\
        | `z` | bool | |\n\
        | `res` | object | its `kind`, `path`, `name` and `n` |\n\
        \n## Not a record\n\n| a | b |\n|---|---|\n| x | y |\n";

    fn run(doc: &str, src: &str) -> Vec<String> {
        check(doc, &[("lib/src/rec.rs".to_string(), src.to_string())], &CONFIG)
    }

    #[test]
    fn the_small_doc_matches_its_types() {
        assert_eq!(run(DOC, SRC), Vec::<String>::new());
    }

    #[test]
    fn each_way_fails_and_names_the_member() {
        // Undocumented: a row gone, a sibling gone (and with it what `twin`, "as `opt`", holds), a list's
        // member gone, a flattened member gone.
        let cases: [(&str, &str, &[&str]); 4] = [
            ("| `renamed` | integer | |\n", "", &["`renamed`"]),
            ("`opt.x`, `.y`", "`opt.x`", &["`opt.y`", "`twin.y`"]),
            ("`{x, y}`", "`{x}`", &["`list.y`"]),
            ("| `z` | bool | |\n", "", &["`z`"]),
        ];
        for (from, to, gone) in cases {
            let p = run(&DOC.replace(from, to), SRC);
            assert_eq!(p.len(), gone.len(), "{p:#?}");
            for (m, g) in p.iter().zip(gone) {
                assert!(m.contains(g) && m.contains("in the types but not documented"), "{m} names {g}");
            }
        }
        // Not in the types: a row, a member of a list; keys below a map are data and not checked.
        one_problem(&run(&DOC.replace("| `z` |", "| `w` | x | |\n| `z` |"), SRC), &["`w` is documented but Rec"]);
        one_problem(&run(&DOC.replace("`{x, y}`", "`{x, y, w}`"), SRC), &["`list.w` is documented"]);
        assert_eq!(run(&DOC.replace("`{k: object}`", "`{k: object, j}`"), SRC), Vec::<String>::new());
        // A member added to a type, or to a type a member refers to.
        one_problem(&run(DOC, &SRC.replace("pub z: bool", "pub z: bool, pub w: u8")), &["`w`", "Flat.w"]);
        let p = run(DOC, &SRC.replace("pub y: Option<u32> }", "pub y: Option<u32>, pub w: u8 }"));
        assert!(["`opt.w`", "`list.w`", "`twin.w`"].iter().all(|w| p.iter().any(|m| m.contains(w))) && p.len() == 3, "{p:#?}");
        // A variant's member.
        one_problem(&run(DOC, &SRC.replace("n: u32 }", "n: u32, m: u8 }")), &["`res.m`"]);
    }

    #[test]
    fn a_row_naming_itself_refers_to_nothing() {
        let p = run(&DOC.replace("as `opt`", "as `twin`"), SRC);
        assert!(p.len() == 2 && p[0].contains("`twin.x`") && p[1].contains("`twin.y`"), "{p:#?}");
    }

    #[test]
    fn a_table_mapped_to_no_record_fails() {
        let p = check(DOC, &[("lib/src/rec.rs".to_string(), SRC.to_string())], &Config { not_records: &[], ..CONFIG });
        one_problem(&p, &["\"Not a record\"", "mapped to no record"]);
    }
}
