//! GET /accessibility: the AT-SPI tree as OSWorld's XML. The walk is done by a small Python program with
//! pyatspi (the binding OSWorld's server uses too), so the guest itself carries no D-Bus client. It runs
//! with the guest's own identity and environment: in a session the guest, the buses and the desktop's
//! applications are all the desktop user's (drums-desktop starts them so), and a session bus admits only
//! its own user.

use super::exec::{self, RunError, Spec};
use super::user::Account;
use super::Guest;
use std::time::Duration;

const SCRIPT: &str = include_str!("a11y.py");
pub const TIMEOUT: Duration = Duration::from_secs(60);

pub async fn tree(g: &Guest) -> Result<String, String> {
    walk(g, &[]).await
}

/// GET /terminal: the text of the focused terminal in the active window of a terminal application (a
/// VTE terminal: gnome-terminal as OSWorld reads it, or another of a11y.py's TERMINAL_APPS), found in the
/// same AT-SPI tree; None when there is no such terminal, as OSWorld answers.
pub async fn terminal(g: &Guest) -> Result<Option<String>, String> {
    let out = walk(g, &["terminal"]).await?;
    let v: serde_json::Value = serde_json::from_str(&out).map_err(|e| format!("the terminal reader printed no JSON ({e}): {out}"))?;
    Ok(v["output"].as_str().map(str::to_string))
}

async fn walk(g: &Guest, args: &[&str]) -> Result<String, String> {
    let me = Account::current();
    let mut argv: Vec<String> = vec!["/usr/bin/python3".into(), "-c".into(), SCRIPT.into()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let spec = Spec {
        argv,
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
