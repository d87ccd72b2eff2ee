//! The repository's layout, checked against what its documentation says: every raw result under
//! docs/results is indexed by the page that explains it.

use drums_tests::repo_root;
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
