//! The agent-ready rule of the source report: a screenshot differs from a blank desktop in more than a
//! threshold fraction of pixels AND the expected page title is present among the window titles.

use crate::error::{Error, Result};
use crate::record::{Ready, Session};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub struct ReadyOptions {
    pub threshold: f64,
    /// Expected window title; default: the record's desktop.title.
    pub title: Option<String>,
    pub timeout: Duration,
    pub interval: Duration,
    pub png: Option<PathBuf>,
    /// The blank desktop's colour (Xvfb -br: black).
    pub blank: [u8; 3],
}

/// The blank desktop's colour from its RRGGBB spelling (drums-ready --blank); a usage error otherwise.
pub fn parse_blank(text: &str, option: &str) -> Result<[u8; 3]> {
    let rgb = u32::from_str_radix(text, 16).ok().filter(|_| text.len() == 6).ok_or_else(|| Error::Usage(format!("{option} {text}: expected RRGGBB")))?;
    Ok([(rgb >> 16) as u8, (rgb >> 8) as u8, rgb as u8])
}

/// A threshold the rule can meet: a fraction in [0, 1); a usage error otherwise.
pub fn check_threshold(threshold: f64, option: &str) -> Result<()> {
    if (0.0..1.0).contains(&threshold) {
        Ok(())
    } else {
        Err(Error::Usage(format!("{option} must be in [0, 1)")))
    }
}

/// The desktop processes whose exit makes the session not ready at once: without its X server or its
/// browser the page cannot come (drums-desktop(1) names them so).
const WATCHED_ROLES: &[&str] = &["xvfb", "chromium"];

/// Whether the desktop process `p` still runs: its host PID is a live process in the session's PID
/// namespace with `p`'s PID there (so a reused PID is not taken for it). A record without the host PID
/// (an older tool's) says nothing, and counts as running.
fn runs_in(p: &crate::record::SessionProcess, pidns: u64) -> bool {
    let Some(host) = p.host_pid else { return true };
    !matches!(crate::proc::state(host), Some('Z') | Some('X') | None) && crate::proc::ns_inode(host, "pid").ok() == Some(pidns) && crate::proc::ns_pid(host) == Some(p.pid)
}

/// Poll the session's display until ready or timeout. The calling thread joins the session's network
/// namespace. Returns the `ready` section; `ready.ready` false on timeout.
pub fn check(session: &Session, opts: &ReadyOptions) -> Result<Ready> {
    // The poll runs on a thread of its own that joins the session's network namespace, so one process
    // can check several sessions.
    std::thread::scope(|sc| sc.spawn(|| check_here(session, opts)).join()).map_err(|_| Error::failed("the readiness thread panicked"))?
}

fn check_here(session: &Session, opts: &ReadyOptions) -> Result<Ready> {
    let ns = session.ns()?;
    let desktop = session.desktop()?;
    let title = opts.title.clone().unwrap_or_else(|| desktop.title.clone());
    crate::nsenter::join(ns.init_pid, crate::nsenter::Kind::Net)?;
    let start = Instant::now();
    // Every X call of the check ends by then, even when the X server stops answering (crate::x11).
    let deadline = start + opts.timeout;
    let mut polls = 0;
    let mut display = None;
    let mut last_fraction = None;
    let mut last_titles = vec![];
    let mut failed: Vec<String> = vec![];
    let mut last_shot = None;
    let mut last_rows = None;
    // The desktop's X server and browser as the record names them: one that has exited ends the check at
    // once (`failed` names it), instead of a wait for a window that cannot come.
    let watched: Vec<&crate::record::SessionProcess> = desktop.processes.iter().filter(|p| WATCHED_ROLES.contains(&p.role.as_str())).collect();
    // With --png the whole screen is read at every poll, to be saved; otherwise only until more than
    // the threshold of it is found changed.
    let look = |d: &crate::x11::Display| -> Result<(f64, u16, Option<crate::x11::Shot>)> {
        let total = d.width as usize * d.height as usize;
        if opts.png.is_some() {
            let shot = d.screenshot()?;
            Ok((shot.changed_fraction(opts.blank), d.height, Some(shot)))
        } else {
            let (changed, rows) = d.count_changed(opts.blank, (opts.threshold * total as f64).floor() as usize)?;
            Ok((changed as f64 / total.max(1) as f64, rows, None))
        }
    };
    loop {
        polls += 1;
        let before = std::mem::take(&mut failed);
        let gone: Vec<String> = watched.iter().filter(|p| !runs_in(p, ns.inodes.pid)).map(|p| p.role.clone()).collect();
        if !gone.is_empty() {
            failed = gone;
            break;
        }
        if display.is_none() {
            display = crate::x11::connect(desktop.display, deadline).ok();
        }
        match &display {
            None => failed.push("display".to_string()),
            // Titles first: the screenshot is then at least as late as the title it is judged with.
            Some(d) => match d.client_titles().and_then(|t| Ok((look(d)?, t))) {
                Ok(((f, rows, shot), titles)) => {
                    last_fraction = Some(f);
                    last_rows = Some(rows);
                    if f <= opts.threshold {
                        failed.push("pixels".into());
                    }
                    if !titles.iter().any(|t| *t == title) {
                        failed.push("title".into());
                    }
                    last_titles = titles;
                    if shot.is_some() {
                        last_shot = shot;
                    }
                }
                // An X call cut short by the check's own deadline says nothing about the display: the
                // reasons of the poll before stand (a page with another title reported as "display").
                _ if Instant::now() >= deadline && !before.is_empty() && !before.iter().any(|r| r == "display") => {
                    failed = before;
                    display = None;
                }
                _ => {
                    failed.push("display".into());
                    display = None;
                }
            },
        }
        if failed.is_empty() || start.elapsed() >= opts.timeout {
            break;
        }
        if polls % 25 == 0 {
            crate::cli::progress("drums-ready", &format!("{}: waiting for {} ({:.1} s)", session.id, failed.join(" and "), start.elapsed().as_secs_f64()));
        }
        std::thread::sleep(opts.interval.min(deadline.saturating_duration_since(Instant::now())));
    }
    let ready = failed.is_empty();
    if let (Some(p), Some(shot)) = (&opts.png, &last_shot) {
        shot.save_png(p)?;
    }
    if opts.png.is_some() && last_shot.is_none() {
        return Err(Error::failed("no screenshot could be taken, so none was saved"));
    }
    Ok(Ready {
        ready,
        ready_s: ready.then(|| start.elapsed().as_secs_f64()),
        changed_fraction: last_fraction,
        rows_read: last_rows,
        threshold: opts.threshold,
        title_expected: title,
        titles_seen: last_titles,
        polls,
        png: opts.png.clone(),
        failed,
        checked_at: crate::state::now(),
    })
}
