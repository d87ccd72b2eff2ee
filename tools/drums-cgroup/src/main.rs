//! drums-cgroup: per-session cgroup limits and telemetry, cgroup v1 and v2. Parses arguments and calls
//! drums::cgroup; see drums-cgroup(1).
use drums::{cgroup, cli, Error, Result};
use drums_cgroup::cli::{Args, Cmd};
use std::path::PathBuf;

fn main() {
    cli::run("drums-cgroup", |a: Args| match a.cmd {
        Cmd::Create { cpus, memory, pids, input } => {
            let limits = cgroup::Limits::new(cpus, memory, pids)?;
            let mut s = cli::read_session(input.as_deref())?;
            cli::require_root()?;
            cgroup::create(&mut s, &limits)?;
            // Also beside the ledger: `drums-ns exec --session ID` reads that copy to join the cgroups.
            drums::session_io::emit_session(&s)
        }
        Cmd::Enter { pid, input } => {
            let s = cli::read_session(input.as_deref())?;
            cli::require_root()?;
            if cgroup::section(&s)?.is_none() {
                return Err(Error::bad_field(cgroup::SECTION, "missing: run drums-cgroup create first"));
            }
            cgroup::enter(&s, pid)?;
            cli::emit(&s)
        }
        Cmd::Watch { interval, samples, input } => {
            let s = cli::read_session(input.as_deref())?;
            cgroup::watch(&s, interval, samples, cli::emit).map(|_| ())
        }
        Cmd::Freeze { input } => with_session(input, |s| cgroup::freeze(s)),
        Cmd::Thaw { input } => with_session(input, |s| cgroup::thaw(s)),
        Cmd::Remove { input } => {
            let mut s = cli::read_session(input.as_deref())?;
            cli::require_root()?;
            cgroup::remove(&mut s)?;
            save_if_live(&s)?;
            cli::emit(&s)
        }
    })
}

/// Keep the copy beside the ledger current, while the session's state directory exists (a removal may
/// come after a destroy).
fn save_if_live(s: &drums::Session) -> Result<()> {
    if s.state_dir.is_dir() {
        drums::session_io::save(s)?;
    }
    Ok(())
}

fn with_session(input: Option<PathBuf>, f: impl FnOnce(&drums::Session) -> Result<()>) -> Result<()> {
    let s = cli::read_session(input.as_deref())?;
    cli::require_root()?;
    f(&s)?;
    cli::emit(&s)
}
