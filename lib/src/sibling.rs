//! Usable siblings, written once: restore a checkpoint into a sibling, make it unique again (clone
//! hygiene) and check it agent-ready, destroying it when any step fails. drums-restore (`--ready`, and
//! its `--count N` siblings, all at once), the warm pool's filler, pipelines/restore.sh and the Python
//! around the tools (benchlib, the Ray node) all make their siblings through here.
//!
//! The ledger discipline is restore_one's: a sibling's ledger line comes before any resource it names,
//! and a sibling that fails its restore is destroyed there; one that fails a later step (reseed, ready,
//! a stop request) is destroyed here, from its ledger, under the sweep lock as drums-sweep does.

use crate::error::{Error, Result};
use crate::ready::ReadyOptions;
use crate::record::{Checkpoint, Session};
use crate::reseed::ReseedOptions;
use crate::restore::RestoreOptions;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub struct SiblingOptions<'a> {
    pub restore: &'a RestoreOptions,
    /// Clone hygiene after the restore; None: the sibling stays a clone of its source (drums-restore
    /// without --ready, whose records a drums-reseed downstream may take).
    pub reseed: Option<ReseedOptions>,
    /// The agent-ready check after the reseed; None: not checked.
    pub ready: Option<ReadyOptions>,
}

/// drums-ready's defaults (drums-ready(1)) with `timeout`: the rule every usable sibling is checked by,
/// when parked, when taken and when drums-restore --ready prints it.
pub fn ready_defaults(timeout: Duration) -> ReadyOptions {
    ReadyOptions { threshold: 0.10, title: None, timeout, interval: Duration::from_millis(20), png: None, blank: [0, 0, 0] }
}

/// A sibling made, and how long its steps took, seconds.
pub struct Made {
    pub session: Session,
    /// The restore (drums-restore's part).
    pub restore_s: f64,
    /// Reseed and ready check together.
    pub reseed_ready_s: f64,
}

/// Restore one sibling of `c`, then reseed and check it as `o` says. `stop` is asked between the steps
/// (the pool's filler stops there on SIGTERM); an error from it fails the sibling. Whatever fails, the
/// sibling is destroyed before the error is returned, and a destroy that leaves something is reported
/// with it.
pub fn make(c: &Checkpoint, o: &SiblingOptions<'_>, stop: &dyn Fn() -> Result<()>) -> Result<Made> {
    let t0 = Instant::now();
    let mut s = crate::restore::restore_one(c, o.restore)?;
    let restore_s = t0.elapsed().as_secs_f64();
    match make_usable(&mut s, o, stop) {
        Ok(()) => Ok(Made { session: s, restore_s, reseed_ready_s: t0.elapsed().as_secs_f64() - restore_s }),
        Err(e) => Err(e.with_cleanup(crate::destroy::destroy_session(&s.id))),
    }
}

fn make_usable(s: &mut Session, o: &SiblingOptions<'_>, stop: &dyn Fn() -> Result<()>) -> Result<()> {
    stop()?;
    if let Some(r) = &o.reseed {
        crate::reseed::reseed(s, r)?;
        stop()?;
    }
    if let Some(r) = &o.ready {
        require_ready(s, r)?;
    }
    Ok(())
}

/// Check `s` agent-ready by `o` and record the check in it; CheckFailed, naming what failed, when it is
/// not (a sibling being made, and a parked one being taken).
pub fn require_ready(s: &mut Session, o: &ReadyOptions) -> Result<()> {
    let ready = crate::ready::check(s, o)?;
    if !ready.ready {
        return Err(Error::CheckFailed(format!("{}: not agent-ready ({})", s.id, ready.failed.join(", "))));
    }
    s.ready = Some(ready);
    Ok(())
}

/// How many siblings of one request are made at the same time, at most. The density benchmark restored
/// 16 at once on two cores with every sibling ready within 5.8 s, a fifth of the ready check's 30 s, and
/// the time per sibling below a lone restore's (docs/benchmarks.md, "Bursts"); a burst is bounded by CPU,
/// so more at once would only stretch each sibling's own time to ready towards its deadline.
pub const MAX_AT_ONCE: u32 = 16;

/// Make `count` siblings of `c` concurrently (at most `MAX_AT_ONCE` at a time), each as `make` does.
/// `done` gets each sibling's outcome as soon as it is known, in the order they finish, on the calling
/// thread; an error from `done` stops the making of further siblings (those in progress finish and are
/// handed to `done`'s caller no more: they are destroyed). Returns how many failed.
pub fn make_many(c: &Checkpoint, count: u32, o: &SiblingOptions<'_>, mut done: impl FnMut(Result<Made>) -> Result<()>) -> Result<u32> {
    let next = AtomicU32::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<Result<Made>>();
    let stopped = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        for _ in 0..count.clamp(1, MAX_AT_ONCE) {
            let tx = tx.clone();
            let (next, stopped) = (&next, &stopped);
            // Each sibling's CRIU runs as a child of the worker thread that restores it, and dies with that
            // thread (PR_SET_PDEATHSIG): the thread lives until its last restore has finished.
            sc.spawn(move || {
                while !stopped.load(Ordering::SeqCst) {
                    if next.fetch_add(1, Ordering::SeqCst) >= count {
                        break;
                    }
                    let stop = || if stopped.load(Ordering::SeqCst) { Err(Error::failed("stopped before the sibling was ready")) } else { Ok(()) };
                    if tx.send(make(c, o, &stop)).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut failed = 0;
        let mut first_err = None;
        for r in rx {
            if first_err.is_some() {
                // Nobody takes it any more: destroy what was made.
                if let Ok(m) = r {
                    let _ = crate::destroy::destroy_session(&m.session.id);
                }
                continue;
            }
            if r.is_err() {
                failed += 1;
            }
            if let Err(e) = done(r) {
                stopped.store(true, Ordering::SeqCst);
                first_err = Some(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(failed),
        }
    })
}
