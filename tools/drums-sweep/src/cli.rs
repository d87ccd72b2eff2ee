//! drums-sweep's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS of
//! man/drums-sweep.1 from it without running the tool (README, "Adding a tool").
use clap::Parser;
use std::path::PathBuf;

/// Destroy sessions from their ledgers; with no session on input, sweep away orphaned sessions and
/// unledgered leftovers that carry Drums' names. Prints a JSON report; exits 1 when something was left.
#[derive(Parser)]
#[command(name = "drums-sweep", version = drums::cli::VERSION_TEXT)]
pub struct Args {
    /// Session records to destroy (default: stdin). No records (empty input, a terminal): sweep orphans.
    #[arg(value_name = "RECORDS")]
    pub input: Option<PathBuf>,
    /// Destroy the session with this id (repeatable); stdin is not read.
    #[arg(long = "session", value_name = "ID")]
    pub sessions: Vec<String>,
    /// Destroy the session whose state directory is DIR (repeatable); stdin is not read.
    ///
    /// DIR must be STATE_ROOT/sessions/ID with ID a session id. Anything else is refused with exit 3,
    /// also a directory below the state or checkpoint root (a checkpoint, /run/drums/slots, the sessions
    /// root itself) or a symbolic link named like a session: a directory without a ledger is removed
    /// whole. Every DIR is checked before any session is touched.
    #[arg(long = "state-dir", value_name = "DIR")]
    pub state_dirs: Vec<PathBuf>,
    /// Sweep orphans without reading stdin (what the cron job runs).
    #[arg(long)]
    pub orphans: bool,
    /// Print the plan and change nothing.
    ///
    /// The reports' member planned says what would be done; no process is signalled, nothing is
    /// unmounted or removed, no ledger or seen file is written.
    #[arg(long)]
    pub dry_run: bool,
    /// Also remove checkpoint images listed in the ledgers (kept by default).
    #[arg(long)]
    pub remove_images: bool,
    /// Remove the root images and runtime layers nothing uses (no session, no checkpoint, no image
    /// name), and nothing else; never part of the orphan sweep.
    ///
    /// With --dry-run, only say which. Not with session records, --session, --state-dir, --orphans or
    /// --remove-images.
    #[arg(long, conflicts_with_all = ["input", "sessions", "state_dirs", "orphans", "remove_images"])]
    pub prune_root_images: bool,
    /// Print one host_inventory record, what Drums holds on this host (sessions and their ledgers,
    /// processes, mounts, cgroups, links, nftables tables, slots, checkpoints, mapped files, root images,
    /// pools), and change nothing.
    ///
    /// It takes no lock and judges nothing. Not with any other option but --help.
    #[arg(long, conflicts_with_all = ["input", "sessions", "state_dirs", "orphans", "remove_images", "prune_root_images", "dry_run", "ttl"])]
    pub report: bool,
    /// Grace period: leave alone sessions and unledgered objects younger than this, such as 60s or 0.
    ///
    /// The duration is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "TIME", default_value = "60s", value_parser = drums::cli::parse_duration)]
    pub older_than: std::time::Duration,
    /// Time to live for sessions whose ledger sets none, in whole seconds (90, 90s, 2m); default: no
    /// limit.
    ///
    /// The duration is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "TIME", value_parser = drums::cli::parse_seconds)]
    pub ttl: Option<u64>,
    /// How long to wait for a killed session's processes to go before the session is reported as left.
    ///
    /// The duration is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "TIME", default_value = "10s", value_parser = drums::cli::parse_duration)]
    pub kill_wait: std::time::Duration,
}
