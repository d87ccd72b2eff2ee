//! drums-sweep: destroy the sessions named on input, or (with no input) find and remove orphans.
use clap::Parser;
use drums::destroy::{self, DestroyOptions};
use drums::error::Error;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

/// Destroy sessions from their ledgers; with no session on input, sweep away orphaned sessions and
/// unledgered leftovers that carry Drums' names. Prints a JSON report; exits 1 when something was left.
#[derive(Parser)]
#[command(name = "drums-sweep", version = drums::cli::VERSION_TEXT)]
struct Args {
    /// Session records to destroy (default: stdin). No records (empty input, a terminal): sweep orphans.
    input: Option<PathBuf>,
    /// Destroy the session with this id (repeatable); stdin is not read.
    #[arg(long = "session", value_name = "ID")]
    sessions: Vec<String>,
    /// Destroy the session whose state directory is DIR (repeatable); stdin is not read.
    #[arg(long = "state-dir", value_name = "DIR")]
    state_dirs: Vec<PathBuf>,
    /// Sweep orphans without reading stdin (what the cron job runs).
    #[arg(long)]
    orphans: bool,
    /// Print the plan and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also remove checkpoint images listed in the ledgers (kept by default).
    #[arg(long)]
    remove_images: bool,
    /// Remove the root images and runtime layers nothing uses (no session, no checkpoint, no image
    /// name), and nothing else; never part of the orphan sweep.
    #[arg(long, conflicts_with_all = ["input", "sessions", "state_dirs", "orphans", "remove_images"])]
    prune_root_images: bool,
    /// Grace period: leave alone sessions and unledgered objects younger than this (seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    older_than: u64,
    /// Time to live for sessions whose ledger sets none (seconds); default: no limit.
    #[arg(long, value_name = "SECONDS")]
    ttl: Option<u64>,
    /// How long to wait for a killed session's processes to go (seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    kill_wait: u64,
}

fn main() {
    drums::cli::run("drums-sweep", |a: Args| {
        drums::cli::require_root()?;
        if a.prune_root_images {
            return drums::cli::emit(&drums::image::prune(a.dry_run)?);
        }
        let opts = DestroyOptions {
            remove_images: a.remove_images,
            dry_run: a.dry_run,
            kill_wait: Duration::from_secs(a.kill_wait),
            ..DestroyOptions::default()
        };
        // Every directory is checked before any is acted on: exit 3 means nothing was touched.
        for d in &a.state_dirs {
            destroy::check_state_dir(d).map_err(|e| match e {
                Error::BadInput { msg, field } => Error::BadInput { msg: format!("--state-dir: {msg}"), field },
                o => o,
            })?;
        }
        let mut dirs: Vec<PathBuf> = a.state_dirs.clone();
        for id in &a.sessions {
            drums::state::check_session_id(id).map_err(|m| Error::bad_input(format!("--session: {m}")))?;
            dirs.push(drums::state::session_dir(id));
        }
        if dirs.is_empty() && !a.orphans {
            let from_terminal = a.input.is_none() && std::io::stdin().is_terminal();
            if !from_terminal {
                let lines = drums::cli::read_lines(a.input.as_deref())?;
                if !lines.is_empty() {
                    dirs = parse_all(&lines)?
                        .into_iter()
                        .map(|s| s.state_dir)
                        .collect();
                }
            }
        }
        if dirs.is_empty() {
            let rep = destroy::sweep::sweep(&destroy::sweep::SweepOptions {
                destroy: opts,
                older_than: Duration::from_secs(a.older_than),
                ttl: a.ttl,
            })?;
            drums::cli::emit(&rep)?;
            if rep.refused > 0 {
                return Err(Error::NotUnderstood(format!("{} orphan(s) refused: their ledgers hold lines this version does not understand (see the report)", rep.refused)));
            }
            if rep.left > 0 {
                let what = if a.dry_run { "would be removed" } else { "could not be removed (see the report)" };
                return Err(Error::CheckFailed(format!("{} thing(s) {what}", rep.left)));
            }
            return Ok(());
        }
        let _lock = destroy::sweep::lock(false, !a.dry_run)?;
        let mut left = 0;
        let mut refused = None;
        for (i, d) in dirs.iter().enumerate() {
            drums::cli::progress("drums-sweep", &format!("destroying {}/{}: {}", i + 1, dirs.len(), d.display()));
            let rep = destroy::destroy(d, &opts);
            drums::cli::progress_done();
            let rep = match rep {
                Err(e @ Error::NotUnderstood(_)) => {
                    drums::cli::emit(&destroy::DestroyReport::refused(d, &e))?;
                    refused.get_or_insert(e);
                    continue;
                }
                r => r?,
            };
            if !rep.clean() || (a.dry_run && !rep.planned.is_empty()) {
                left += 1;
            }
            drums::cli::emit(&rep)?;
        }
        if let Some(e) = refused {
            return Err(e);
        }
        if left > 0 {
            let what = if a.dry_run { "would be destroyed" } else { "left something behind (see the report)" };
            return Err(Error::CheckFailed(format!("{left} of {} session(s) {what}", dirs.len())));
        }
        Ok(())
    })
}

/// Parse every line before acting on any: one bad record refuses the whole input.
fn parse_all(lines: &[String]) -> drums::Result<Vec<drums::Session>> {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            drums::Session::parse(l).map_err(|e| match e {
                Error::BadInput { msg, field } => Error::BadInput { msg: format!("line {}: {msg}", i + 1), field },
                o => o,
            })
        })
        .collect()
}
