//! drums-sweep: destroy the sessions named on input, or (with no input) find and remove orphans.
use drums::destroy::{self, DestroyOptions};
use drums::error::Error;
use drums_sweep::cli::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

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
            if rep.left > 0 {
                let what = if a.dry_run { "would be removed" } else { "could not be removed (see the report)" };
                return Err(Error::CheckFailed(format!("{} thing(s) {what}", rep.left)));
            }
            return Ok(());
        }
        let _lock = destroy::sweep::lock(false, !a.dry_run)?;
        let mut left = 0;
        for (i, d) in dirs.iter().enumerate() {
            drums::cli::progress("drums-sweep", &format!("destroying {}/{}: {}", i + 1, dirs.len(), d.display()));
            let rep = destroy::destroy(d, &opts);
            drums::cli::progress_done();
            let rep = rep?;
            if !rep.clean() || (a.dry_run && !rep.planned.is_empty()) {
                left += 1;
            }
            drums::cli::emit(&rep)?;
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
