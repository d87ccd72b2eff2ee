//! drums-cgroup: per-session cgroup limits and telemetry, cgroup v1 and v2. Parses arguments and calls
//! drums::cgroup; see drums-cgroup(1).
use clap::{Parser, Subcommand};
use drums::{cgroup, cli, Error, Result};
use std::path::PathBuf;

/// Per-session cgroups: limits read back from the kernel, telemetry, freeze and thaw, removal.
#[derive(Parser)]
#[command(name = "drums-cgroup", version = drums::cli::VERSION_TEXT)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the session's cgroups, apply and read back the limits, move its processes in.
    Create {
        /// CPU time per period, in CPUs (cpu.cfs_quota_us / cpu.max over a 100 ms period).
        #[arg(long, default_value_t = cgroup::DEFAULT_CPUS)]
        cpus: f64,
        /// Memory limit, swap included (64M, 4G, bytes).
        #[arg(long, default_value_t = cgroup::DEFAULT_MEMORY_BYTES, value_parser = drums::cli::parse_bytes)]
        memory: u64,
        /// Most tasks (processes and threads) the session may hold.
        #[arg(long, default_value_t = cgroup::DEFAULT_PIDS)]
        pids: u64,
        /// Input session record (default: stdin).
        input: Option<PathBuf>,
    },
    /// Put one more process (host PID) into the session's cgroups.
    Enter {
        /// Host PID of the process.
        #[arg(long)]
        pid: i32,
        input: Option<PathBuf>,
    },
    /// Telemetry as JSON Lines on stdout until the session's init is gone.
    Watch {
        /// Time between samples (1s, 200ms).
        #[arg(long, default_value = "1s")]
        interval: String,
        /// Stop after this many samples.
        #[arg(long)]
        samples: Option<u64>,
        input: Option<PathBuf>,
    },
    /// Freeze every process of the session and wait until the kernel says frozen.
    Freeze { input: Option<PathBuf> },
    /// Thaw a frozen session.
    Thaw { input: Option<PathBuf> },
    /// Remove the session's cgroups in every hierarchy.
    Remove { input: Option<PathBuf> },
}

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
            let every = drums::cli::parse_duration(&interval).map_err(|m| Error::Usage(format!("--interval: {m}")))?;
            let s = cli::read_session(input.as_deref())?;
            cgroup::watch(&s, every, samples, cli::emit).map(|_| ())
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
