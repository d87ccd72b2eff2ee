//! drums-restore: restore isolated siblings from a checkpoint.
use clap::Parser;
use drums::cli;
use std::path::PathBuf;

/// Restore --count siblings from the checkpoint record on stdin (or --checkpoint ID), all running at
/// once, each with its own ledger, overlay, network namespace, veth, address, MAC and cgroups (the
/// default limits of drums-cgroup unless --cgroup or --no-cgroup). Prints one session record per sibling.
/// A sibling that fails is destroyed; the others stay.
#[derive(Parser)]
#[command(name = "drums-restore", version = cli::VERSION_TEXT)]
struct Args {
    /// How many siblings.
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// The checkpoint's id (its record is read from its directory); default: a record on stdin.
    #[arg(long)]
    checkpoint: Option<String>,
    /// Size limit of each sibling's writable tmpfs, e.g. 512M, 2G.
    #[arg(long, default_value = "1G", value_parser = drums::cli::parse_bytes)]
    size: u64,
    /// Time to live of each sibling in seconds.
    #[arg(long)]
    ttl: Option<u64>,
    /// Per-sibling cgroup limits, as drums-cgroup takes them: CPUS,MEMORY,PIDS (e.g. 2,4G,4096; any
    /// subset, the rest default). Default: drums-cgroup's defaults.
    #[arg(long, value_name = "CPUS,MEMORY,PIDS")]
    cgroup: Option<String>,
    /// No cgroups for the siblings: no limits, no freezer (a pool cannot park them frozen).
    #[arg(long, conflicts_with = "cgroup")]
    no_cgroup: bool,
    /// Make every restored process mergeable by KSM (opt-in: KSM merges across tenants, a known side
    /// channel, and costs a scanning thread; /sys/kernel/mm/ksm/run must be 1 for merging to happen).
    #[arg(long)]
    ksm: bool,
    /// Record file (default: stdin).
    input: Option<PathBuf>,
}

fn main() {
    cli::run("drums-restore", |a: Args| {
        let c = match &a.checkpoint {
            Some(id) => drums::ckpt::load(id)?,
            None => {
                let lines = cli::read_lines(a.input.as_deref())?;
                match lines.as_slice() {
                    [one] => drums::record::Checkpoint::parse(one)?,
                    [] => return Err(drums::Error::bad_input("no checkpoint record on input")),
                    _ => return Err(drums::Error::bad_input(format!("{} records on input, this command takes one checkpoint", lines.len()))),
                }
            }
        };
        if a.count == 0 {
            return Err(drums::Error::Usage("--count must be at least 1".into()));
        }
        let limits = match (&a.cgroup, a.no_cgroup) {
            (_, true) => None,
            (Some(spec), false) => Some(drums::cgroup::Limits::parse_spec(spec)?),
            (None, false) => Some(drums::cgroup::Limits::default()),
        };
        cli::require_root()?;
        drums::restore::check_checkpoint(&c)?;
        let o = drums::restore::RestoreOptions { tmpfs_bytes: a.size, ttl_s: a.ttl, limits, ksm: a.ksm };
        let mut first_err = None;
        for i in 0..a.count {
            cli::progress("drums-restore", &format!("sibling {}/{}", i + 1, a.count));
            match drums::restore::restore_one(&c, &o) {
                Ok(s) => drums::session_io::emit_session(&s)?,
                Err(e) => {
                    cli::report("drums-restore", &e);
                    first_err.get_or_insert(e);
                }
            }
        }
        cli::progress_done();
        match first_err {
            None => Ok(()),
            Some(e) => Err(drums::Error::failed(format!("at least one sibling failed; the first: {e}"))),
        }
    })
}
