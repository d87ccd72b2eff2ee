//! What drums-sweep does with its arguments: destroy the sessions it was named (by id, by state directory
//! or by record on input), or, named none, sweep orphans. Reports go to standard output, one per line.

use super::{sweep, DestroyOptions};
use crate::error::{Error, Result};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

/// The sessions asked for and how to destroy them.
pub struct Request {
    /// Session records to destroy (None: stdin), read only when no session is named otherwise.
    pub input: Option<PathBuf>,
    pub session_ids: Vec<String>,
    pub state_dirs: Vec<PathBuf>,
    /// Sweep orphans without reading any input.
    pub orphans: bool,
    pub destroy: DestroyOptions,
    /// The orphan sweep's grace period and default time to live (seconds).
    pub older_than: Duration,
    pub ttl: Option<u64>,
}

/// Carry out `r`: every named directory and id is checked before any is acted on (exit 3 means nothing
/// was touched), then each session is destroyed, or, with none named, orphans are swept. Fails with
/// CheckFailed (exit 1) when something was left behind (dry run: when something would be removed), and
/// with NotUnderstood (exit 8, which wins) when a session's ledger holds a line this version cannot read.
pub fn run(r: &Request) -> Result<()> {
    for d in &r.state_dirs {
        super::check_state_dir(d).map_err(|e| prefixed(e, "--state-dir: "))?;
    }
    let mut dirs: Vec<PathBuf> = r.state_dirs.clone();
    for id in &r.session_ids {
        crate::state::check_session_id(id).map_err(|m| Error::bad_input(format!("--session: {m}")))?;
        dirs.push(crate::state::session_dir(id));
    }
    if dirs.is_empty() && !r.orphans {
        let from_terminal = r.input.is_none() && std::io::stdin().is_terminal();
        if !from_terminal {
            let lines = crate::cli::read_lines(r.input.as_deref())?;
            dirs = parse_all(&lines)?.into_iter().map(|s| s.state_dir).collect();
        }
    }
    let dry_run = r.destroy.dry_run;
    if dirs.is_empty() {
        let rep = sweep::sweep(&sweep::SweepOptions { destroy: r.destroy.clone(), older_than: r.older_than, ttl: r.ttl })?;
        crate::cli::emit(&rep)?;
        if rep.refused > 0 {
            return Err(Error::NotUnderstood(format!("{} orphan(s) refused: their ledgers hold lines this version does not understand (see the report)", rep.refused)));
        }
        if rep.left > 0 {
            let what = if dry_run { "would be removed" } else { "could not be removed (see the report)" };
            return Err(Error::CheckFailed(format!("{} thing(s) {what}", rep.left)));
        }
        return Ok(());
    }
    let _lock = sweep::lock(false, !dry_run)?;
    let mut left = 0;
    let mut refused = None;
    for (i, d) in dirs.iter().enumerate() {
        crate::cli::progress("drums-sweep", &format!("destroying {}/{}: {}", i + 1, dirs.len(), d.display()));
        let rep = super::destroy(d, &r.destroy);
        crate::cli::progress_done();
        let rep = match rep {
            // A session this version cannot read whole is reported and kept; the others are still destroyed.
            Err(e @ Error::NotUnderstood(_)) => {
                crate::cli::emit(&super::DestroyReport::refused(d, &e))?;
                refused.get_or_insert(e);
                continue;
            }
            r => r?,
        };
        if !rep.clean() || (dry_run && !rep.planned.is_empty()) {
            left += 1;
        }
        crate::cli::emit(&rep)?;
    }
    if let Some(e) = refused {
        return Err(e);
    }
    if left > 0 {
        let what = if dry_run { "would be destroyed" } else { "left something behind (see the report)" };
        return Err(Error::CheckFailed(format!("{left} of {} session(s) {what}", dirs.len())));
    }
    Ok(())
}

/// Parse every line before acting on any: one bad record refuses the whole input.
fn parse_all(lines: &[String]) -> Result<Vec<crate::Session>> {
    lines.iter().enumerate().map(|(i, l)| crate::Session::parse(l).map_err(|e| prefixed(e, &format!("line {}: ", i + 1)))).collect()
}

/// A bad-input error with `prefix` before its message; any other error as it is.
fn prefixed(e: Error, prefix: &str) -> Error {
    match e {
        Error::BadInput { msg, field } => Error::BadInput { msg: format!("{prefix}{msg}"), field },
        o => o,
    }
}
