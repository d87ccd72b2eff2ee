//! drums-audit: do sibling sessions share any kernel object? Check C3 of the source report, literal and
//! revision 2a (drums-audit(1)).
use clap::Parser;
use drums::audit::{Options, Rule};
use drums::cli;
use std::path::PathBuf;

/// Inspect two or more live sessions through /proc and report, as one JSON object, every kernel object
/// they share: processes, namespaces, pipes, sockets, eventfds, anonymous inodes, writable files and
/// shared mappings, devices, locks, the X server's sockets. Gives the literal C3 verdict and the
/// revision-2a verdict; exits 0 when --rule passes, 1 when it fails, 6 when the audit is incomplete.
#[derive(Parser)]
#[command(name = "drums-audit", version = cli::VERSION_TEXT)]
struct Args {
    /// The rule the exit status follows (both verdicts are always reported).
    #[arg(long, value_enum, default_value = "literal")]
    rule: Rule,
    /// Also audit this cold pair of live sessions (two ids, comma-separated) in the same pass, as the
    /// control revision 2a needs.
    #[arg(long, value_name = "A,B")]
    control: Option<String>,
    /// Run the whole audit up to this many times while processes start or exit during it.
    #[arg(long, default_value_t = 3)]
    attempts: u32,
    /// Session records, one per line (default: stdin).
    input: Option<PathBuf>,
}

fn main() {
    cli::run("drums-audit", |a: Args| {
        let control_ids = match a.control.as_deref() {
            None => None,
            Some(c) => {
                let ids: Vec<&str> = c.split(',').map(str::trim).collect();
                if ids.len() != 2 || ids.iter().any(|i| i.is_empty()) {
                    return Err(drums::Error::Usage(format!("--control {c}: expected two session ids, A,B")));
                }
                Some([ids[0], ids[1]])
            }
        };
        if a.attempts == 0 {
            return Err(drums::Error::Usage("--attempts must be at least 1".into()));
        }
        let sessions = cli::read_sessions(a.input.as_deref())?;
        cli::require_root()?;
        let control = match control_ids {
            None => None,
            Some([x, y]) => Some([control_session(x)?, control_session(y)?]),
        };
        let opts = Options { rule: a.rule, attempts: a.attempts, retry_pause: std::time::Duration::from_millis(200) };
        let report = drums::audit::audit(&sessions, control, &opts)?;
        cli::emit(&report)?;
        report.outcome()
    })
}

/// A control session by id. One that is gone leaves the audit incomplete, as an audited session that is
/// gone does: the verdict cannot be given, and that is not a fault of the input.
fn control_session(id: &str) -> drums::Result<drums::Session> {
    drums::session_io::find(id)?.ok_or_else(|| drums::Error::Incomplete(format!("--control: session {id} is gone (no record in its state directory)")))
}
