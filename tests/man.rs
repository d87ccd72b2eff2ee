//! The OPTIONS of every man/drums-*.1 page are generated from the tool's command line (its crate's
//! `cli` module, through clap_mangen); everything else in the page is written by hand. This test fails,
//! naming the page, when a page's generated part is not what the definition gives now, so a flag or its
//! help text cannot change without its page. `DRUMS_WRITE_MAN=1` rewrites the generated parts instead
//! (README, "Adding a tool").

use drums_tests::*;

const BEGIN: &str = ".\\\" BEGIN GENERATED OPTIONS";
const END: &str = ".\\\" END GENERATED OPTIONS";
const REGENERATE: &str = "DRUMS_WRITE_MAN=1 cargo test --release -p drums-tests --test man";

#[test]
fn every_page_options_are_generated_from_its_tool_definition() {
    let write = std::env::var_os("DRUMS_WRITE_MAN").is_some_and(|v| v == "1");
    let mut stale = vec![];
    let named: Vec<&str> = commands().iter().map(|(t, _)| *t).collect();
    assert_eq!(named, TOOLS, "tests/support.rs: commands() must name every tool of TOOLS, in its order");
    for (t, cmd) in commands() {
        assert_every_argument_has_help(t, &cmd);
        let path = repo_root().join(format!("man/{t}.1"));
        let page = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("man/{t}.1: {e}"));
        let spliced = splice(&page, &generated(t, cmd)).unwrap_or_else(|m| panic!("man/{t}.1: {m}"));
        if spliced == page {
            continue;
        }
        if write {
            std::fs::write(&path, &spliced).unwrap_or_else(|e| panic!("man/{t}.1: {e}"));
        } else {
            stale.push(format!("man/{t}.1 (first difference at line {})", first_difference(&page, &spliced)));
        }
    }
    assert!(
        stale.is_empty(),
        "stale OPTIONS, not what tools/*/src/cli.rs defines now: {}.\nRegenerate with `{REGENERATE}` and review the diff.",
        stale.join(", ")
    );
}

/// The generated block of a tool's page: its own options, then each visible subcommand's under a
/// subsection named by the command line that reaches it.
fn generated(tool: &str, cmd: clap::Command) -> String {
    let mut out = format!("{BEGIN} from tools/{tool}/src/cli.rs; regenerate: {REGENERATE}\n{APOSTROPHE}");
    out += &options(cmd.clone());
    subcommand_options(tool, &cmd, &mut out);
    out + END + "\n"
}

fn subcommand_options(path: &str, cmd: &clap::Command, out: &mut String) {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let path = format!("{path} {}", sub.get_name());
        // -h is said once, at the top: every subcommand has it.
        let sub_cmd = sub.clone().disable_help_flag(true);
        if sub_cmd.get_arguments().any(|a| !a.is_hide_set()) {
            *out += &format!(".SS {}\n", path.replace('-', "\\-"));
            *out += &options(sub_cmd);
        }
        subcommand_options(&path, sub, out);
    }
}

/// clap_mangen's OPTIONS section without its heading (the page has one), with the blank line between
/// two paragraphs of a long help text as an indented paragraph, which keeps the item's indentation.
fn options(cmd: clap::Command) -> String {
    let mut buf = vec![];
    clap_mangen::Man::new(cmd).render_options_section(&mut buf).unwrap();
    let text = String::from_utf8(buf).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| *l != ".SH OPTIONS" && !is_apostrophe_preamble(l)).collect();
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        if *l == ".br" && out.ends_with(".br\n") {
            // clap_mangen breaks twice before a list of possible values; mandoc warns of the second.
            continue;
        } else if !l.is_empty() {
            out += &format!("{l}\n");
        } else if lines.get(i + 1).is_some_and(|n| !n.is_empty() && !n.starts_with('.')) {
            out += ".IP\n";
        }
    }
    out
}

/// The apostrophe string every clap_mangen render starts by defining (help texts are full of
/// apostrophes, written `\*(Aq`): the block defines it once, at its top.
const APOSTROPHE: &str = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";

fn is_apostrophe_preamble(l: &str) -> bool {
    APOSTROPHE.lines().any(|p| p == l)
}

fn splice(page: &str, block: &str) -> Result<String, String> {
    let start = page.find(&format!("\n{BEGIN}")).map(|i| i + 1).ok_or(format!("no `{BEGIN}` line (in its OPTIONS section)"))?;
    let end = page[start..].find(&format!("\n{END}\n")).map(|i| start + i + END.len() + 2).ok_or(format!("no `{END}` line after `{BEGIN}`"))?;
    Ok(format!("{}{block}{}", &page[..start], &page[end..]))
}

fn first_difference(a: &str, b: &str) -> usize {
    a.lines().zip(b.lines()).take_while(|(x, y)| x == y).count() + 1
}

/// An option without a help text would be a bare name in its page.
fn assert_every_argument_has_help(path: &str, cmd: &clap::Command) {
    for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        assert!(a.get_help().is_some(), "{path}: argument {} has no help text (a `///` comment in its cli.rs)", a.get_id());
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        assert_every_argument_has_help(&format!("{path} {}", sub.get_name()), sub);
    }
}
