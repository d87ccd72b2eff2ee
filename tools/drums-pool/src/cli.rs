//! drums-pool's command line (drums-pool(1)): the definition its --help prints and its man page's
//! options follow.
use clap::Subcommand;
use drums::cli;
use std::path::PathBuf;
use std::time::Duration;

drums::subcommand_args! {
    /// Warm pools: fill a checkpoint's pool with parked siblings, take one, drain the pool, show it.
    "drums-pool"
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Restore, reseed, check and freeze siblings until each pool holds --depth of them.
    Fill {
        /// A checkpoint whose pool to fill (its record is read from its directory); repeatable. Default: the
        /// checkpoint records on input.
        #[arg(long = "checkpoint", value_name = "ID")]
        checkpoints: Vec<String>,
        /// Parked siblings to keep in each pool.
        #[arg(long, value_name = "N", default_value_t = 4)]
        depth: usize,
        /// Keep the depth until stopped (SIGTERM or SIGINT: a sibling not yet parked is destroyed), looking
        /// again every TIME (such as 1s; more than zero).
        ///
        /// The duration is read as drums(7), "Sizes and durations", says.
        #[arg(long = "loop", value_name = "TIME", value_parser = cli::parse_positive_duration)]
        every: Option<Duration>,
        /// Count ceiling: make at most N siblings per pool in this run, then stop that pool.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Count ceiling: restore nothing while the machine has N or more Drums sessions (directories under
        /// $DRUMS_STATE_DIR/sessions: parked, taken or other).
        #[arg(long, value_name = "N", default_value_t = 32)]
        max_sessions: usize,
        /// Memory ceiling: restore nothing while MemAvailable in /proc/meminfo is below SIZE.
        ///
        /// The size is read as drums(7), "Sizes and durations", says.
        #[arg(long, value_name = "SIZE", default_value = "2G", value_parser = cli::parse_bytes)]
        min_available: u64,
        /// Destroy parked siblings older than this, such as 10m.
        ///
        /// The duration is read as drums(7), "Sizes and durations", says.
        #[arg(long, value_name = "TIME", value_parser = cli::parse_duration)]
        max_age: Option<Duration>,
        /// Each sibling's cgroup limits as drums-restore --cgroup takes them (CPUS,MEMORY,PIDS); none:
        /// no cgroups, and siblings are parked running. Default: the default limits of drums-cgroup(1).
        #[arg(long, value_name = "CPUS,MEMORY,PIDS|none")]
        cgroup: Option<String>,
        /// Park siblings running rather than frozen.
        #[arg(long)]
        no_freeze: bool,
        /// Restore as drums-restore --ksm does: KSM may merge the identical pages of parked siblings while
        /// /sys/kernel/mm/ksm/run is 1. Opt-in, for the reasons drums-restore(1) gives (a known
        /// cross-tenant side channel, a scanning thread).
        #[arg(long)]
        ksm: bool,
        #[command(flatten)]
        identity: cli::IdentityArgs,
        #[command(flatten)]
        net: cli::NetArgs,
        /// Size limit of each sibling's writable tmpfs, as drums-restore --size.
        ///
        /// The size is read as drums(7), "Sizes and durations", says.
        #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = cli::parse_bytes)]
        size: u64,
        /// Bind the pool to its owner ($DRUMS_OWNER, else the process that started drums-pool): the
        /// siblings are the owner's and are never handed to the sweep's keeping as parked; once the owner
        /// is gone the filler stops and drains the pool, and what a killed filler left the sweep destroys.
        /// --max-sessions then counts the owner's sessions only. With $DRUMS_POOL_DIR the pool's spool is
        /// the owner's own.
        #[arg(long)]
        bound: bool,
        /// File of checkpoint records (default: stdin).
        input: Option<PathBuf>,
    },
    /// Claim the oldest parked sibling, thaw it, check it again, print its record: the caller owns it.
    Take {
        /// The pool's checkpoint; default: the checkpoint record on input.
        #[arg(long, value_name = "ID")]
        checkpoint: Option<String>,
        /// When the pool is empty, wait this long for a sibling, such as 30s (default: no wait).
        ///
        /// The duration is read as drums(7), "Sizes and durations", says.
        #[arg(long, value_name = "TIME", default_value = "0", value_parser = cli::parse_duration)]
        wait: Duration,
        /// Refuse (and destroy) siblings parked longer ago, such as 10m.
        ///
        /// The duration is read as drums(7), "Sizes and durations", says.
        #[arg(long, value_name = "TIME", value_parser = cli::parse_duration)]
        max_age: Option<Duration>,
        /// The re-check's timeout.
        ///
        /// The duration is read as drums(7), "Sizes and durations", says.
        #[arg(long, value_name = "TIME", default_value = "5s", value_parser = cli::parse_duration)]
        ready_timeout: Duration,
        /// File holding the checkpoint record (default: stdin).
        input: Option<PathBuf>,
    },
    /// Destroy every parked sibling, then remove the spool when nothing in it is left.
    Drain {
        /// The pool's checkpoint; default: the checkpoint record on input.
        #[arg(long, value_name = "ID")]
        checkpoint: Option<String>,
        /// File holding the checkpoint record (default: stdin).
        input: Option<PathBuf>,
    },
    /// One record per pool (or the pool of --checkpoint): what is parked, taken, being made, the filler.
    Status {
        /// Only the pool of this checkpoint; default: every spool.
        #[arg(long, value_name = "ID")]
        checkpoint: Option<String>,
    },
}
