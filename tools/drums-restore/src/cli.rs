//! drums-restore's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS
//! of man/drums-restore.1 from it without running the tool (README, "Adding a tool").
use clap::Parser;
use drums::cli;
use std::path::PathBuf;

/// Restore --count siblings from the checkpoint record on stdin (or --checkpoint ID), all running at
/// once, each with its own ledger, overlay, network namespace, veth, address, MAC and cgroups (the
/// default limits of drums-cgroup unless --cgroup or --no-cgroup). Prints one session record per sibling.
/// A sibling that fails is destroyed; the others stay.
#[derive(Parser)]
#[command(name = "drums-restore", version = cli::VERSION_TEXT)]
pub struct Args {
    /// How many siblings.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub count: u32,
    /// The checkpoint's id (its record is read from its directory); default: a record on stdin.
    #[arg(long, value_name = "ID")]
    pub checkpoint: Option<String>,
    /// Size limit of each sibling's writable tmpfs, e.g. 512M, 2G.
    ///
    /// The size is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = drums::cli::parse_bytes)]
    pub size: u64,
    /// Time to live of each sibling in whole seconds (90, 90s, 2m).
    ///
    /// The duration is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "TIME", value_parser = drums::cli::parse_seconds)]
    pub ttl: Option<u64>,
    /// Per-sibling cgroup limits, as drums-cgroup takes them: CPUS,MEMORY,PIDS (e.g. 2,4G,4096; any
    /// subset, the rest default). Default: drums-cgroup's defaults.
    ///
    /// A subset is named, for example pids=1024. The defaults are those of drums-cgroup(1) create
    /// (drums(7), "Default limits").
    #[arg(long, value_name = "CPUS,MEMORY,PIDS")]
    pub cgroup: Option<String>,
    /// No cgroups for the siblings: no limits, no freezer (a pool cannot park them frozen).
    ///
    /// The opt-out of the default limits; a warm pool parks such siblings running.
    #[arg(long, conflicts_with = "cgroup")]
    pub no_cgroup: bool,
    /// Make every restored process mergeable by KSM (opt-in: KSM merges across tenants, a known side
    /// channel, and costs a scanning thread; /sys/kernel/mm/ksm/run must be 1 for merging to happen).
    ///
    /// CRIU runs under PR_SET_MEMORY_MERGE, which the restored processes inherit, so KSM may merge
    /// identical pages between siblings.
    #[arg(long)]
    pub ksm: bool,
    /// Restore each sibling in a user namespace of its own (drums(7), "Its own user namespace").
    ///
    /// Each sibling takes a host id range of 65536 ids (written to its ledger first, record field
    /// id_range; the band is $DRUMS_ID_BAND) and its restored processes run in a user namespace that maps
    /// ids 0-65535 to it, so root and `user` inside are unprivileged host ids and the kernel's per-user
    /// counts (inotify, message queues, pending signals, processes) are the sibling's own. The checkpoint
    /// is an ordinary one (of a session made without --userns); CRIU runs as root of the sibling's user
    /// namespace and the layers are shown through idmapped mounts. drums-ckpt refuses such a sibling.
    #[arg(long)]
    pub userns: bool,
    #[command(flatten)]
    pub net: cli::NetArgs,
    /// Checkpoint record file (default: stdin).
    #[arg(value_name = "RECORD")]
    pub input: Option<PathBuf>,
}
