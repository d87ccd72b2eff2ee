//! The repository's layout, checked against what its documentation says: every raw result under
//! docs/results is indexed by the page that explains it.

use drums_tests::{closing_brace, repo_root, split_top_level};
use std::collections::BTreeSet;

/// `{a,b}` alternatives expanded: `x-{1,2}.json` is `x-1.json` and `x-2.json`.
fn expand_braces(name: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (name.find('{'), name.find('}')) else { return vec![name.to_string()] };
    if close < open {
        return vec![name.to_string()];
    }
    name[open + 1..close].split(',').flat_map(|alt| expand_braces(&format!("{}{alt}{}", &name[..open], &name[close + 1..]))).collect()
}

/// Every name written in backquotes on the pages that index results, braces expanded, without a
/// leading `docs/results/` and a trailing `/`.
fn indexed_names() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for page in ["docs/benchmarks.md", "docs/osworld.md", "docs/ray.md"] {
        let text = std::fs::read_to_string(repo_root().join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        for (i, quoted) in text.split('`').enumerate() {
            if i % 2 == 1 {
                for n in expand_braces(quoted) {
                    names.insert(n.trim_start_matches("docs/results/").trim_end_matches('/').to_string());
                }
            }
        }
    }
    names
}

#[test]
fn every_raw_result_is_indexed() {
    let indexed = indexed_names();
    let dir = repo_root().join("docs/results");
    let mut missing = vec![];
    for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !indexed.contains(&name) {
            missing.push(name);
        }
    }
    missing.sort();
    assert!(missing.is_empty(), "raw results under docs/results that docs/benchmarks.md (or osworld.md, ray.md) does not name in `backquotes`: {missing:#?}");
    // Nothing but pages and the results folder in docs/.
    let stray: Vec<String> = std::fs::read_dir(repo_root().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "results" && !n.ends_with(".md") && !n.ends_with(".png"))
        .collect();
    assert!(stray.is_empty(), "raw files in docs/ belong in docs/results/: {stray:?}");
}

#[test]
fn brace_expansion() {
    assert_eq!(expand_braces("a-{1,2}-{x,y}.json"), ["a-1-x.json", "a-1-y.json", "a-2-x.json", "a-2-y.json"]);
    assert_eq!(expand_braces("plain.json"), ["plain.json"]);
}

/// `code` without the items `#[cfg(test)]` marks (a `mod tests { .. }`, a `mod tests;`, a helper):
/// tests may use anything. Only the marked item goes, so code after it is still read.
fn without_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let mut item = &rest[i + "#[cfg(test)]".len()..];
        // Further attributes of the same item.
        while let Some(a) = item.trim_start().strip_prefix("#[") {
            item = &a[a.find(']').map_or(a.len(), |e| e + 1)..];
        }
        let end = match (item.find(';'), item.find('{')) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => b + 1 + closing_brace(&item[b + 1..]) + 1,
            (None, None) => item.len(),
        };
        rest = &item[end.min(item.len())..];
    }
    out.push_str(rest);
    out
}

/// The library's modules, by path (`net`, `net::egress`), each with its file, and the files that hold
/// only tests (declared `#[cfg(test)] mod x;`), which are left out.
fn library_modules() -> std::collections::BTreeMap<String, std::path::PathBuf> {
    let src = repo_root().join("lib/src");
    let mut modules = std::collections::BTreeMap::new();
    // (module path, its file, the directory of its children)
    let mut todo = vec![(String::new(), src.join("lib.rs"), src.clone())];
    while let Some((path, file, dir)) = todo.pop() {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for line in without_test_items(&text).lines() {
            let l = line.trim();
            let l = l.strip_prefix("pub ").or_else(|| l.strip_prefix("pub(crate) ")).unwrap_or(l);
            let Some(name) = l.strip_prefix("mod ").and_then(|n| n.strip_suffix(';')) else { continue };
            let child = if path.is_empty() { name.to_string() } else { format!("{path}::{name}") };
            let f = dir.join(format!("{name}.rs"));
            let f = if f.exists() { f } else { dir.join(name).join("mod.rs") };
            modules.insert(child.clone(), f.clone());
            todo.push((child, f, dir.join(name)));
        }
    }
    modules
}

/// The module paths `code` (of the module `at`) names: `crate::a::b`, `super::b`, `self::c` and a bare
/// `c::` of a child `c`, each taken as far as it names a module of `modules`.
fn named_modules(code: &str, at: &str, modules: &std::collections::BTreeMap<String, std::path::PathBuf>) -> BTreeSet<String> {
    let code: String = code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    let segs = |p: &str| -> Vec<String> { if p.is_empty() { vec![] } else { p.split("::").map(String::from).collect() } };
    let at_segs = segs(at);
    let mut out = BTreeSet::new();
    // The deepest module that `base` followed by `path`'s segments names.
    let resolve = |base: &[String], path: &str| -> Option<String> {
        let mut cur = base.to_vec();
        let mut best = None;
        for s in path.split("::").map(str::trim) {
            if s == "super" {
                cur.pop();
                continue;
            }
            if s == "self" {
                continue;
            }
            cur.push(s.to_string());
            let p = cur.join("::");
            if modules.contains_key(&p) {
                best = Some(p);
            } else {
                break;
            }
        }
        best
    };
    for (root, base) in [("crate::", vec![]), ("super::", at_segs.clone()), ("self::", at_segs.clone())] {
        for (i, _) in code.match_indices(root) {
            let before = code[..i].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            // `super::` counts its own step; crate:: and self:: start where they stand.
            let start = if root == "crate::" { i + root.len() } else { i };
            for p in expand_path(&code[start..]) {
                if let Some(m) = resolve(&base, &p) {
                    out.insert(m);
                }
            }
        }
    }
    // Bare paths into a child module (`use files::CgroupFs;` in cgroup.rs).
    let prefix = if at.is_empty() { String::new() } else { format!("{at}::") };
    for child in modules.keys().filter_map(|m| m.strip_prefix(&prefix)).filter(|c| !c.contains("::")) {
        let needle = format!("{child}::");
        for (i, _) in code.match_indices(&needle) {
            let before = code[..i].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            for p in expand_path(&code[i..]) {
                if let Some(m) = resolve(&at_segs, &p) {
                    out.insert(m);
                }
            }
        }
    }
    out.remove(at);
    out
}

/// The paths a `use` tree at the start of `s` spells: `a::{b, c::d}` is `a::b` and `a::c::d`.
fn expand_path(s: &str) -> Vec<String> {
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').count();
    let mut head = String::new();
    let mut rest = s.trim_start();
    loop {
        let n = ident(rest);
        if n == 0 {
            if let Some(group) = rest.strip_prefix('{') {
                let end = closing_brace(group);
                let mut out = vec![];
                for item in split_top_level(&group[..end]) {
                    for p in expand_path(item.trim()) {
                        out.push(format!("{head}{p}"));
                    }
                }
                if out.is_empty() {
                    out.push(head.trim_end_matches("::").to_string());
                }
                return out;
            }
            return vec![head.trim_end_matches("::").to_string()];
        }
        head.push_str(&rest[..n]);
        rest = &rest[n..];
        match rest.strip_prefix("::") {
            Some(r) => {
                head.push_str("::");
                rest = r;
            }
            None => return vec![head],
        }
    }
}

/// Every module's uses, collapsed to the children of `parent` (`""`: the top-level modules): for each
/// child of `parent`, the other children whose code (or their submodules' code) its code (or its
/// submodules' code) names, with the files that name them.
fn graph_under(parent: &str) -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, BTreeSet<String>>> {
    let modules = library_modules();
    let src = repo_root().join("lib/src");
    let prefix = if parent.is_empty() { String::new() } else { format!("{parent}::") };
    let child_of = |m: &str| -> Option<String> { m.strip_prefix(&prefix).map(|r| format!("{prefix}{}", r.split("::").next().unwrap())) };
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeMap<String, BTreeSet<String>>> = std::collections::BTreeMap::new();
    for m in modules.keys() {
        if let Some(c) = child_of(m) {
            if c == *m {
                graph.entry(c.strip_prefix(&prefix).unwrap().to_string()).or_default();
            }
        }
    }
    for (m, file) in &modules {
        let Some(from) = child_of(m) else { continue };
        let text = std::fs::read_to_string(file).unwrap();
        let rel = file.strip_prefix(&src).unwrap().display().to_string();
        for used in named_modules(&without_test_items(&text), m, &modules) {
            let Some(to) = child_of(&used) else { continue };
            if to != from {
                let (f, t) = (from.strip_prefix(&prefix).unwrap().to_string(), to.strip_prefix(&prefix).unwrap().to_string());
                graph.entry(f).or_default().entry(t).or_default().insert(rel.clone());
            }
        }
    }
    graph
}

/// The library's top-level modules (of lib/src/lib.rs; a module's submodules are part of it) and, for
/// each, the other top-level modules its code names.
fn module_graph() -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, BTreeSet<String>>> {
    graph_under("")
}

/// Strongly connected components of more than one module (Tarjan).
fn cycles(graph: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a std::collections::BTreeMap<String, std::collections::BTreeMap<String, BTreeSet<String>>>,
        index: std::collections::HashMap<&'a str, usize>,
        low: std::collections::HashMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g[v].keys() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = vec![];
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T { g: graph, index: Default::default(), low: Default::default(), stack: vec![], on: BTreeSet::new(), next: 0, out: vec![] };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v.as_str());
        }
    }
    t.out
}

#[test]
fn the_library_has_no_module_cycle() {
    let modules = library_modules();
    assert!(modules.len() > 60, "the library's modules were not found: {:?}", modules.keys());
    // The top-level modules, and the submodules of each module among themselves (net::audit and
    // net::egress may not name each other either).
    let parents: BTreeSet<String> = std::iter::once(String::new()).chain(modules.keys().filter_map(|m| m.rsplit_once("::").map(|(p, _)| p.to_string()))).collect();
    let mut found = vec![];
    for parent in &parents {
        let graph = graph_under(parent);
        let within = if parent.is_empty() { "lib/src".to_string() } else { format!("{parent}'s submodules") };
        for comp in cycles(&graph) {
            let mut lines = vec![format!("cycle of {} modules in {within}: {}", comp.len(), comp.join(", "))];
            for a in &comp {
                for (b, files) in &graph[a] {
                    if comp.contains(b) {
                        lines.push(format!("  {a} -> {b} (in {})", files.iter().cloned().collect::<Vec<_>>().join(", ")));
                    }
                }
            }
            found.push(lines.join("\n"));
        }
    }
    assert!(found.is_empty(), "lib/src has import cycles (docs/architecture.md: a module names only modules of lower layers):\n{}", found.join("\n"));
}

#[test]
fn the_cycle_check_sees_cycles() {
    let mut g = std::collections::BTreeMap::new();
    let edge = |to: &str| std::collections::BTreeMap::from([(to.to_string(), BTreeSet::from(["x.rs".to_string()]))]);
    g.insert("a".to_string(), edge("b"));
    g.insert("b".to_string(), edge("c"));
    g.insert("c".to_string(), edge("a"));
    g.insert("d".to_string(), edge("a"));
    assert_eq!(cycles(&g), vec![vec!["a".to_string(), "b".to_string(), "c".to_string()]]);
    assert_eq!(expand_path("a::{b::X, c, d::{e, f}};"), ["a::b::X", "a::c", "a::d::e", "a::d::f"]);
    let modules: std::collections::BTreeMap<String, std::path::PathBuf> =
        ["a", "b", "b::x", "b::y", "c", "c::files"].iter().map(|m| (m.to_string(), Default::default())).collect();
    let code = "use crate::{a::X, b::x::f};\nuse super::y::Z;\nlet q = crate::c::g();\n// crate::c::files::h\n";
    assert_eq!(named_modules(code, "b::x", &modules), BTreeSet::from(["a".to_string(), "b::y".to_string(), "c".to_string()]));
    assert_eq!(named_modules("use files::Fs;\nfn f() { self::files::g() }", "c", &modules), BTreeSet::from(["c::files".to_string()]));
}

#[test]
fn test_items_are_left_out_and_nothing_after_them() {
    // A file that declares its tests first and its uses after them (cgroup.rs does) is read whole.
    let code = "mod a;\n#[cfg(test)]\nmod tests;\nuse crate::b::X;\n#[cfg(test)]\n#[allow(unused)]\nfn helper() { crate::c::y({ 1 }) }\nfn f() { crate::d::z() }\n#[cfg(test)]\nmod t { use crate::e::W; }\n";
    let kept = without_test_items(code);
    assert!(kept.contains("crate::b::X") && kept.contains("crate::d::z"), "{kept}");
    assert!(!kept.contains("crate::c") && !kept.contains("crate::e") && !kept.contains("mod tests"), "{kept}");
}

/// The layer of each module as docs/architecture.md's table gives it (`| N name | `a`, `b` | ... |`).
fn documented_layers() -> std::collections::BTreeMap<String, u32> {
    let text = std::fs::read_to_string(repo_root().join("docs/architecture.md")).unwrap();
    let mut layers = std::collections::BTreeMap::new();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(n) = cells.get(1).and_then(|c| c.split(' ').next()).and_then(|n| n.parse::<u32>().ok()) else { continue };
        for (i, m) in cells[2].split('`').enumerate() {
            if i % 2 == 1 {
                assert!(layers.insert(m.to_string(), n).is_none(), "docs/architecture.md places `{m}` twice");
            }
        }
    }
    layers
}

#[test]
fn every_module_names_only_its_own_layer_and_lower_ones() {
    let graph = module_graph();
    let layers = documented_layers();
    let unplaced: Vec<&String> = graph.keys().filter(|m| !layers.contains_key(*m)).collect();
    assert!(unplaced.is_empty(), "modules docs/architecture.md does not place in a layer: {unplaced:?}");
    let gone: Vec<&String> = layers.keys().filter(|m| !graph.contains_key(*m)).collect();
    assert!(gone.is_empty(), "docs/architecture.md places modules the library does not have: {gone:?}");
    let mut upward = vec![];
    for (m, uses) in &graph {
        for (used, files) in uses {
            if layers[used] > layers[m] {
                upward.push(format!("{m} (layer {}) -> {used} (layer {}) in {}", layers[m], layers[used], files.iter().cloned().collect::<Vec<_>>().join(", ")));
            }
        }
    }
    assert!(upward.is_empty(), "modules that name a higher layer (docs/architecture.md):\n{}", upward.join("\n"));
}
