//! drums-audit's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS of
//! man/drums-audit.1 from it without running the tool (README, "Adding a tool").
use clap::Parser;
use drums::audit::Rule;
use drums::cli;
use std::path::PathBuf;

/// Inspect two or more live sessions through /proc and report, as one JSON object, every kernel object
/// they share: processes, namespaces, pipes, sockets, eventfds, anonymous inodes, writable files and
/// shared mappings, devices, locks, the X server's sockets. Gives the literal C3 verdict and the
/// revision-2a verdict; exits 0 when --rule passes, 1 when it fails, 6 when the audit is incomplete.
#[derive(Parser)]
#[command(name = "drums-audit", version = cli::VERSION_TEXT)]
pub struct Args {
    /// The rule the exit status follows (both verdicts are always reported).
    #[arg(long, value_enum, default_value = "literal")]
    pub rule: Rule,
    /// Also audit this cold pair of live sessions (two ids, comma-separated) in the same pass, as the
    /// control revision 2a needs.
    ///
    /// Their latest records are read from their state directories. They may be the audited sessions
    /// themselves.
    #[arg(long, value_name = "A,B")]
    pub control: Option<String>,
    /// Run the whole audit up to this many times while processes start or exit during it (200 ms apart).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub attempts: u32,
    /// Session records, one per line (default: stdin).
    #[arg(value_name = "RECORDS")]
    pub input: Option<PathBuf>,
}
