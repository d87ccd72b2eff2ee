//! drums-restore's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS
//! of man/drums-restore.1 from it without running the tool (README, "Adding a tool").
use clap::Parser;
use drums::cli;
use std::path::PathBuf;

/// Restore --count siblings from the checkpoint record on stdin (or --checkpoint ID), all running at
/// once, each with its own ledger, overlay, network namespace, veth, address, MAC and cgroups (the
/// default limits of drums-cgroup unless --cgroup or --no-cgroup). With --ready each is also reseeded and
/// checked agent-ready. Prints one session record per sibling, in the order they finish. A sibling that
/// fails is destroyed; the others stay.
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
    #[command(flatten)]
    pub identity: cli::IdentityArgs,
    #[command(flatten)]
    pub net: cli::NetArgs,
    /// Print only usable siblings: reseed each (drums-reseed) and check it agent-ready (drums-ready)
    /// before printing it; one that fails either is destroyed. What pipelines/restore.sh runs.
    ///
    /// The siblings of one call are made concurrently, at most 16 at a time, each restored, reseeded and
    /// checked on its own; a record carries the `reseed` and `ready` sections the two tools would have
    /// added. The --ready-* options are drums-ready's options of the same name, and --no-browser is
    /// drums-reseed's.
    #[arg(long)]
    pub ready: bool,
    /// With --ready: leave the browser alone in the reseed (drums-reseed --no-browser).
    #[arg(long, requires = "ready")]
    pub no_browser: bool,
    #[command(flatten)]
    pub ready_args: ReadyArgs,
    /// Checkpoint record file (default: stdin).
    #[arg(value_name = "RECORD")]
    pub input: Option<PathBuf>,
}

/// drums-ready's options, for the check of --ready (drums-ready(1) says what each does).
#[derive(clap::Args)]
pub struct ReadyArgs {
    /// With --ready: fraction of pixels that must differ from the blank desktop (drums-ready --threshold).
    #[arg(long, value_name = "F", default_value_t = 0.10, requires = "ready")]
    pub ready_threshold: f64,
    /// With --ready: expected window title (drums-ready --title; default: the record's desktop.title).
    #[arg(long, value_name = "TITLE", requires = "ready")]
    pub ready_title: Option<String>,
    /// With --ready: give up on a sibling's check after this long (drums-ready --timeout).
    ///
    /// The duration is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "TIME", default_value = "30s", value_parser = cli::parse_duration, requires = "ready")]
    pub ready_timeout: std::time::Duration,
    /// With --ready: time between polls (drums-ready --interval).
    ///
    /// The duration is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "TIME", default_value = "20ms", value_parser = cli::parse_duration, requires = "ready")]
    pub ready_interval: std::time::Duration,
    /// With --ready: colour of the blank desktop as RRGGBB (drums-ready --blank).
    #[arg(long, value_name = "RRGGBB", default_value = "000000", requires = "ready")]
    pub ready_blank: String,
}
