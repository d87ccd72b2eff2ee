//! drums-cgroup's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS of
//! man/drums-cgroup.1 from it without running the tool (README, "Adding a tool").
use clap::Subcommand;
use drums::cgroup;
use std::path::PathBuf;

drums::subcommand_args! {
    /// Per-session cgroups: limits read back from the kernel, telemetry, freeze and thaw, removal.
    "drums-cgroup"
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Create the session's cgroups, apply and read back the limits, move its processes in.
    Create {
        /// CPU time per 100 ms period, in CPUs; may be fractional.
        ///
        /// v1 cpu.cfs_quota_us over cpu.cfs_period_us, v2 cpu.max. The default is the shape of the source
        /// report's sessions. The kernel refuses a quota below 1 ms per period.
        #[arg(long, value_name = "N", default_value_t = cgroup::DEFAULT_CPUS)]
        cpus: f64,
        /// Memory limit, swap included: bytes, or with a binary unit (K, M, G, T).
        ///
        /// The default is what OSWorld's own desktop VMs have (drums(7), "Default limits", says what a
        /// session uses). Swap is not allowed beyond it: on v1 memory.memsw.limit_in_bytes is set to the
        /// same value where the kernel accounts swap; on v2 memory.swap.max is 0. A session that exceeds
        /// it meets the kernel's OOM killer inside its own cgroup.
        ///
        /// The size is read as drums(7), "Sizes and durations", says.
        #[arg(long, value_name = "SIZE", default_value = cgroup::DEFAULT_MEMORY, value_parser = drums::cli::parse_bytes)]
        memory: u64,
        /// Most tasks (processes and threads) the session may hold (pids.max).
        ///
        /// drums(7), "Default limits", says why the default. A fork beyond it fails with EAGAIN inside
        /// the session.
        #[arg(long, value_name = "N", default_value_t = cgroup::DEFAULT_PIDS)]
        pids: u64,
        /// Session record file (default: stdin).
        #[arg(value_name = "RECORD")]
        input: Option<PathBuf>,
    },
    /// Put one more process (host PID) into the session's cgroups.
    Enter {
        /// Host PID of the process to move.
        #[arg(long, value_name = "PID")]
        pid: i32,
        /// Session record file (default: stdin).
        #[arg(value_name = "RECORD")]
        input: Option<PathBuf>,
    },
    /// Telemetry as JSON Lines on stdout until the session's init is gone.
    Watch {
        /// Time between samples, such as 1s or 200ms.
        ///
        /// The duration is read as drums(7), "Sizes and durations", says.
        #[arg(long, value_name = "TIME", default_value = "1s", value_parser = drums::cli::parse_positive_duration)]
        interval: std::time::Duration,
        /// Stop after this many samples.
        #[arg(long, value_name = "N")]
        samples: Option<u64>,
        /// Session record file (default: stdin).
        #[arg(value_name = "RECORD")]
        input: Option<PathBuf>,
    },
    /// Freeze every process of the session and wait until the kernel says frozen.
    Freeze {
        /// Session record file (default: stdin).
        #[arg(value_name = "RECORD")]
        input: Option<PathBuf>,
    },
    /// Thaw a frozen session.
    Thaw {
        /// Session record file (default: stdin).
        #[arg(value_name = "RECORD")]
        input: Option<PathBuf>,
    },
    /// Remove the session's cgroups in every hierarchy.
    Remove {
        /// Session record file (default: stdin).
        #[arg(value_name = "RECORD")]
        input: Option<PathBuf>,
    },
}
