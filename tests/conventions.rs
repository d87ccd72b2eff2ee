//! Every tool behaves alike: --help, --version, usage errors, bad input, and its man page.

use drums_tests::*;
use std::collections::BTreeSet;

#[test]
fn help_goes_to_stdout_and_exits_zero() {
    for t in TOOLS {
        let o = run(t, &["--help"], "");
        assert_eq!(o.status.code(), Some(0), "{t} --help");
        assert!(text(&o.stdout).contains("Usage"), "{t} --help prints usage on stdout");
        assert!(o.stderr.is_empty(), "{t} --help writes nothing on stderr");
    }
}

#[test]
fn version_goes_to_stdout_and_exits_zero() {
    for t in TOOLS {
        let o = run(t, &["--version"], "");
        assert_eq!(o.status.code(), Some(0), "{t} --version");
        assert!(text(&o.stdout).starts_with(t), "{t} --version names the tool");
    }
}

/// The error object of a failed run (its `type` is checked by decoding it), after checking it is the
/// one error it should be.
fn assert_json_error(t: &str, o: &std::process::Output, code: i32, kind: &str) -> drums::error::ErrorRecord {
    assert_eq!(o.status.code(), Some(code), "{t}: exit code; stderr: {}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "{t}: stdout must stay empty on error, got {}", text(&o.stdout));
    let v = error_record(&o.stderr);
    assert_eq!(v.kind, kind, "{t}: {}", json(&v));
    assert_eq!(v.exit, code, "{t}");
    assert_eq!(v.tool, *t, "{t}");
    v
}

#[test]
fn unknown_option_is_a_usage_error() {
    for t in TOOLS {
        let o = run(t, &["--no-such-option"], "");
        assert_json_error(t, &o, 2, "usage");
    }
}

/// Tools that read records refuse a malformed one with the bad-input code, before touching anything.
#[test]
fn malformed_input_is_refused() {
    for (t, args) in record_readers() {
        let o = run(t, args, "{\n");
        assert_json_error(t, &o, 3, "bad_input");
    }
}

#[test]
fn wrong_version_and_missing_fields_are_named() {
    let rec = r#"{"drums":99,"type":"session","id":"d-1"}"#;
    for (t, args) in record_readers() {
        let o = run(t, args, rec);
        let v = assert_json_error(t, &o, 3, "bad_input");
        assert_eq!(v.field.as_deref(), Some("drums"), "{t}: {}", json(&v));
    }
}

/// Input that is not there or not text is bad input too, not a failure of the tool.
#[test]
fn a_missing_input_file_and_non_utf8_input_are_bad_input() {
    for (t, args) in record_readers() {
        // Every record reader takes its records from a file argument as well, except `drums-ns exec`.
        if args.contains(&"exec") {
            continue;
        }
        let mut with_file: Vec<&str> = args.to_vec();
        with_file.push("/nonexistent/records.jsonl");
        assert_json_error(t, &run(t, &with_file, ""), 3, "bad_input");
        let o = run_bytes(t, args, b"{\"drums\":1,\"type\":\"session\",\"id\":\"d-\xff\"}\n");
        assert_json_error(t, &o, 3, "bad_input");
    }
}

/// A tool whose work is all in subcommands refuses to run without one, at once: it does not wait for a
/// record on a standard input that is left open (a terminal, say).
#[test]
fn no_subcommand_is_a_usage_error_without_reading_stdin() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    for t in ["drums-ns", "drums-overlay", "drums-desktop", "drums-cgroup", "drums-pool", "drums-view"] {
        let mut child = Command::new(tool(t)).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        // Held open, never written: a tool reading stdin would block until the deadline.
        let stdin = child.stdin.take();
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{t} with no subcommand waited on stdin");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(stdin);
        assert_json_error(t, &child.wait_with_output().unwrap(), 2, "usage");
    }
}

/// Run a tool with raw bytes on stdin.
fn run_bytes(t: &str, args: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new(tool(t)).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let _ = child.stdin.take().unwrap().write_all(input);
    child.wait_with_output().unwrap()
}

/// (tool, arguments) of every command that reads session or checkpoint records on stdin.
fn record_readers() -> Vec<(&'static str, &'static [&'static str])> {
    let spec = std::fs::read_to_string(repo_root().join("tests/record-readers.txt")).unwrap();
    spec.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let mut words = l.split_whitespace().map(|w| &*Box::leak(w.to_string().into_boxed_str()));
            let t = words.next().unwrap();
            let args: Vec<&'static str> = words.collect();
            (t, &*Box::leak(args.into_boxed_slice()))
        })
        .collect()
}

/// Every long option of every tool, its subcommands' included, is an option of its page: the tag line
/// of a `.TP` item names it as a whole token, so `--name` is not found inside `--name-prefix` or in
/// the prose.
#[test]
fn every_tool_has_a_man_page_naming_every_long_option() {
    for (t, cmd) in commands() {
        let page = std::fs::read_to_string(repo_root().join(format!("man/{t}.1"))).unwrap_or_else(|e| panic!("{t}: man/{t}.1: {e}"));
        let tags = option_tags(&page);
        let mut longs = BTreeSet::new();
        collect_long_options(&cmd, &mut longs);
        assert!(!longs.is_empty(), "{t}: no long option found in its definition");
        for l in longs {
            assert!(tags.contains(&l), "{t}: option {l} is not an option of man/{t}.1 (no .TP item whose tag names it)");
        }
    }
}

/// Every option a page's SYNOPSIS names is an option of the tool (of the subcommand that line starts
/// with), and where it takes a value the SYNOPSIS shows the value under the name the definition gives
/// it (the one OPTIONS shows): a renamed or retyped flag makes the hand-written SYNOPSIS stale.
#[test]
fn every_synopsis_names_real_options_with_their_value_names() {
    for (t, cmd) in commands() {
        let page = std::fs::read_to_string(repo_root().join(format!("man/{t}.1"))).unwrap();
        let words = synopsis_words(&page);
        assert!(!words.is_empty(), "{t}: man/{t}.1 has no SYNOPSIS");
        let mut scope = &cmd;
        for (i, w) in words.iter().enumerate() {
            if w == t {
                scope = words.get(i + 1).and_then(|sub| cmd.find_subcommand(sub)).unwrap_or(&cmd);
                continue;
            }
            let Some(long) = w.strip_prefix("--").filter(|l| !l.is_empty()) else { continue };
            let arg = scope
                .get_arguments()
                .find(|a| a.get_long() == Some(long))
                .unwrap_or_else(|| panic!("{t}: SYNOPSIS names {w}, which `{t} {}` does not have", scope.get_name()));
            if !arg.get_action().takes_values() {
                continue;
            }
            let name = arg.get_value_names().and_then(|n| n.first()).map(|n| n.as_str().to_string()).unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
            let shown = words.get(i + 1).map(String::as_str).unwrap_or("");
            // A value from a closed set may be shown as the set itself (`--rule literal | revision-2a`).
            let one_of_its_values = arg.get_possible_values().iter().any(|v| v.get_name() == shown);
            assert!(shown == name.split('|').next().unwrap() || one_of_its_values, "{t}: SYNOPSIS shows {w} {shown}, its definition names the value {name}");
        }
    }
}

/// The words of a page's SYNOPSIS with the macros, font escapes, quotes, brackets, bars and ellipses
/// taken out: `drums-sweep --kill-wait TIME RECORDS ...`.
fn synopsis_words(page: &str) -> Vec<String> {
    let section = page.split("\n.SH ").find(|s| s.starts_with("SYNOPSIS")).unwrap_or("");
    section
        .lines()
        .skip(1)
        .flat_map(|l| {
            let l = l.strip_prefix('.').map(|m| m.split_once(' ').map_or("", |(_, rest)| rest)).unwrap_or(l);
            l.replace("\\-", "-").replace("\\fB", " ").replace("\\fI", " ").replace("\\fR", " ").replace('"', " ").split_whitespace().map(str::to_string).collect::<Vec<_>>()
        })
        .map(|w| w.trim_matches(|c| matches!(c, '[' | ']' | '.')).to_string())
        .filter(|w| !w.is_empty() && w != "|")
        .collect()
}

fn collect_long_options(cmd: &clap::Command, out: &mut BTreeSet<String>) {
    out.extend(cmd.get_arguments().filter(|a| !a.is_hide_set()).filter_map(|a| a.get_long()).map(|l| format!("--{l}")));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect_long_options(sub, out);
    }
}

/// The long options named by the tag lines (the line after `.TP`) of a page, font escapes removed.
fn option_tags(page: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = page.lines().collect();
    let mut out = BTreeSet::new();
    for w in lines.windows(2).filter(|w| w[0] == ".TP") {
        let tag = w[1].replace("\\-", "-").replace("\\fB", " ").replace("\\fI", " ").replace("\\fR", " ");
        out.extend(tag.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).filter(|w| w.starts_with("--") && w.len() > 2).map(str::to_string));
    }
    out
}

#[test]
fn man_pages_lint_clean() {
    let pages: Vec<_> = std::fs::read_dir(repo_root().join("man"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("1") | Some("7")))
        .collect();
    assert!(!pages.is_empty(), "no man pages");
    let o = std::process::Command::new("mandoc")
        .args(["-T", "lint", "-W", "warning"])
        .args(&pages)
        .output()
        .expect("mandoc is not installed (pipelines/setup.sh installs it)");
    assert!(o.status.success() && o.stdout.is_empty(), "mandoc -T lint:\n{}{}", text(&o.stdout), text(&o.stderr));
}
