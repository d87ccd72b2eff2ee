//! drums-audit: do sibling sessions share any kernel object? Check C3 of the source report, literal and
//! revision 2a (drums-audit(1)).
use drums::audit::Options;
use drums::cli;
use drums_audit::cli::Args;

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
