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

/// The library's modules (the top-level `mod`s of lib/src/lib.rs; a module's submodules are part of it)
/// and, for each, the other modules its code names through `crate::` (tests inside a file, after
/// `#[cfg(test)]`, are left out: they may use anything).
fn module_graph() -> std::collections::BTreeMap<String, std::collections::BTreeMap<String, BTreeSet<String>>> {
    let src = repo_root().join("lib/src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let modules: BTreeSet<String> = lib.lines().filter_map(|l| l.trim().strip_prefix("pub mod ").or_else(|| l.trim().strip_prefix("mod ")).map(|m| m.trim_end_matches(';').to_string())).collect();
    let mut graph = std::collections::BTreeMap::new();
    for m in &modules {
        let mut files = vec![src.join(format!("{m}.rs"))];
        let mut dirs = vec![src.join(m)];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    files.push(p);
                }
            }
        }
        let mut uses: std::collections::BTreeMap<String, BTreeSet<String>> = std::collections::BTreeMap::new();
        for f in files.iter().filter(|f| f.exists()) {
            let text = std::fs::read_to_string(f).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            let rel = f.strip_prefix(&src).unwrap().display().to_string();
            for name in crate_paths(code) {
                if name != *m && modules.contains(&name) {
                    uses.entry(name).or_default().insert(rel.clone());
                }
            }
        }
        graph.insert(m.clone(), uses);
    }
    graph
}

/// The first segment of every `crate::` path in `code`, including those in `use crate::{a, b::c}`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = vec![];
    let code: String = code.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = closing_brace(group);
            for item in split_top_level(&group[..end]) {
                let n = ident(item.trim());
                if !n.is_empty() {
                    out.push(n);
                }
            }
        } else {
            out.push(ident(rest));
        }
    }
    out
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
    let graph = module_graph();
    assert!(graph.len() > 20, "the library's modules were not found: {:?}", graph.keys());
    let found = cycles(&graph);
    let explain = |comp: &Vec<String>| -> String {
        let mut lines = vec![format!("cycle of {} modules: {}", comp.len(), comp.join(", "))];
        for a in comp {
            for (b, files) in &graph[a] {
                if comp.contains(b) {
                    lines.push(format!("  {a} -> {b} (in {})", files.iter().cloned().collect::<Vec<_>>().join(", ")));
                }
            }
        }
        lines.join("\n")
    };
    assert!(found.is_empty(), "lib/src has import cycles (docs/architecture.md: a module names only modules of lower layers):\n{}", found.iter().map(explain).collect::<Vec<_>>().join("\n"));
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
    assert_eq!(crate_paths("use crate::{a::X, b, c::{d, e}};\nlet x = crate::f::g();"), ["a", "b", "c", "f"]);
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
