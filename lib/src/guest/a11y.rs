//! GET /accessibility: the AT-SPI tree as OSWorld's XML. The walk is done by a small Python program with
//! pyatspi (the binding OSWorld's server uses too), so the guest itself carries no D-Bus client. It runs
//! with the guest's own identity and environment: the session's buses and the desktop's applications are
//! the guest's (root's), and a session bus admits only its own user.

use super::exec::{self, RunError, Spec};
use super::user::Account;
use super::Guest;
use std::time::Duration;

const SCRIPT: &str = include_str!("a11y.py");
const TIMEOUT: Duration = Duration::from_secs(60);

pub async fn tree(g: &Guest) -> Result<String, String> {
    let me = Account::current();
    let spec = Spec {
        argv: vec!["/usr/bin/python3".into(), "-c".into(), SCRIPT.into()],
        acct: &me,
        display: &g.display,
        cwd: None,
        merge_stderr: false,
        timeout: TIMEOUT,
        max_output: usize::try_from(g.bounds.max_output).unwrap_or(usize::MAX),
    };
    match exec::run(spec).await {
        // Cut XML is no tree: say so rather than answer a part of it.
        Ok(o) if o.code == 0 && o.stdout_dropped > 0 => {
            Err(format!("the accessibility tree is larger than --max-output ({} bytes; {} more)", o.stdout.len(), o.stdout_dropped))
        }
        Ok(o) if o.code == 0 => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(format!("the AT-SPI walk failed (exit {}): {}", o.code, String::from_utf8_lossy(&o.stderr).trim())),
        Err(RunError::Timeout) => Err(format!("the AT-SPI walk took longer than {} s", TIMEOUT.as_secs())),
        Err(RunError::Spawn(e)) => Err(format!("/usr/bin/python3: {e}")),
    }
}
