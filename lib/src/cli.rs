//! What makes every tool behave alike: argument parsing, reading and writing records, errors on stderr
//! as one JSON object, exit codes, progress lines.

use crate::error::{exit, Error, Result};
use serde::Serialize;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

/// Parse arguments, run the tool, and turn its result into an exit code. `--help` and `--version` go to
/// stdout and exit 0; a usage error is a JSON error on stderr with exit 2.
pub fn run<C: clap::Parser>(tool: &str, body: impl FnOnce(C) -> Result<()>) -> ! {
    let code = match C::try_parse() {
        Ok(args) => match body(args) {
            Ok(()) => exit::OK,
            Err(e) => report(tool, &e),
        },
        Err(e) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                print!("{e}");
                let _ = std::io::stdout().flush();
                exit::OK
            }
            _ => report(tool, &Error::Usage(e.to_string().trim().replace('\n', " "))),
        },
    };
    std::process::exit(code)
}

/// Print an error as one JSON line on stderr; returns its exit code.
pub fn report(tool: &str, e: &Error) -> i32 {
    let line = serde_json::to_string(&e.to_json(tool)).unwrap_or_else(|_| "{}".into());
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    e.exit_code()
}

/// Read JSON lines from a file argument or stdin ("-" or None), skipping blank lines.
pub fn read_lines(input: Option<&Path>) -> Result<Vec<String>> {
    match input {
        Some(p) if p != Path::new("-") => {
            let f = std::fs::File::open(p).map_err(|e| input_error("open", &p.display().to_string(), e))?;
            lines_of(std::io::BufReader::new(f), &p.display().to_string())
        }
        _ => lines_of(std::io::stdin().lock(), "stdin"),
    }
}

fn lines_of(r: impl BufRead, name: &str) -> Result<Vec<String>> {
    let mut lines = vec![];
    for (i, l) in r.lines().enumerate() {
        let l = l.map_err(|e| input_error("read", &format!("{name}: line {}", i + 1), e))?;
        if !l.trim().is_empty() {
            lines.push(l);
        }
    }
    Ok(lines)
}

/// An input that does not exist, is a directory or is not text is the caller's mistake (bad input, and
/// nothing was done); any other I/O error is a failure of this machine.
fn input_error(what: &str, name: &str, e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::bad_input(format!("{name}: no such input file")),
        std::io::ErrorKind::InvalidData => Error::bad_input(format!("{name}: not UTF-8 text (records are JSON Lines)")),
        _ if e.raw_os_error() == Some(libc::EISDIR) => Error::bad_input(format!("{name}: a directory, not a file of records")),
        _ => Error::io(what, name, e),
    }
}

/// Read session records, refusing the whole input if any line is bad (nothing is acted on).
pub fn read_sessions(input: Option<&Path>) -> Result<Vec<crate::Session>> {
    let lines = read_lines(input)?;
    if lines.is_empty() {
        return Err(Error::bad_input("no record on input (expected one session record per line)"));
    }
    lines.iter().enumerate().map(|(i, l)| crate::Session::parse(l).map_err(|e| at_line(e, i + 1))).collect()
}

/// Read exactly one session record.
pub fn read_session(input: Option<&Path>) -> Result<crate::Session> {
    let mut v = read_sessions(input)?;
    if v.len() != 1 {
        return Err(Error::bad_input(format!("{} records on input, this command takes exactly one", v.len())));
    }
    Ok(v.remove(0))
}

fn at_line(e: Error, n: usize) -> Error {
    match e {
        Error::BadInput { msg, field } => Error::BadInput { msg: format!("line {n}: {msg}"), field },
        other => other,
    }
}

/// Write one record as one line with a single write and a flush: a record that did not reach stdout
/// (a closed pipe) is a failure.
pub fn emit(rec: &impl Serialize) -> Result<()> {
    let mut line = serde_json::to_vec(rec).map_err(|e| Error::failed(format!("serialize record: {e}")))?;
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    out.write_all(&line).and_then(|_| out.flush()).map_err(|e| Error::failed(format!("write record to stdout: {e}")))
}

/// A human-friendly progress line on stderr, only when stderr is a terminal.
pub fn progress(tool: &str, msg: &str) {
    let err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err.lock(), "\r\x1b[K{tool}: {msg}");
    }
}
pub fn progress_done() {
    let err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err.lock(), "\r\x1b[K");
    }
}

/// Refuse to run without root: every Drums tool that touches the kernel needs it.
pub fn require_root() -> Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::env("this tool needs root (namespaces, mounts, cgroups)"));
    }
    Ok(())
}

/// The clap `long_version` every tool shows.
pub const VERSION_TEXT: &str = concat!(env!("CARGO_PKG_VERSION"), " (record format 1)");

/// Parse a byte size: a number with an optional K, M, G or T suffix (powers of 1024).
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K') | Some('k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') | Some('m') => (&s[..s.len() - 1], 1 << 20),
        Some('G') | Some('g') => (&s[..s.len() - 1], 1 << 30),
        Some('T') | Some('t') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().and_then(|n| n.checked_mul(mult)).ok_or_else(|| format!("`{s}` is not a size (like 512M or 4G)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit_of(r: Result<Vec<String>>) -> i32 {
        r.expect_err("an error").exit_code()
    }

    #[test]
    fn input_that_is_not_text_or_not_there_is_bad_input() {
        assert_eq!(exit_of(lines_of(&b"{\"drums\":1}\n\xff\xfe\n"[..], "stdin")), exit::BAD_INPUT);
        assert_eq!(exit_of(read_lines(Some(Path::new("/nonexistent/records.jsonl")))), exit::BAD_INPUT);
        assert_eq!(exit_of(read_lines(Some(Path::new("/")))), exit::BAD_INPUT);
        assert_eq!(lines_of(&b"a\n\n  \nb\n"[..], "stdin").unwrap(), vec!["a", "b"], "blank lines are skipped");
    }
}
