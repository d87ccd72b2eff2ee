//! The warm pool (drums-pool(7), drums-pool(1)): siblings of a checkpoint restored, reseeded, checked and
//! frozen ahead of demand, their records parked in a spool; a taker claims one, thaws it, checks it again
//! and becomes its owner.
//!
//! The spool of a checkpoint is `<pools root>/<checkpoint id>/`, laid out like a maildir: `tmp/` (records
//! being written), `ready/` (parked siblings, `<parked at, ms>.<session id>.json`, so a sorted listing is
//! oldest first; a record appears there only by rename from `tmp/`), `taken/` (records of siblings handed
//! out) and `fill.lock` (held by the one filler at work). The one atomic step is a claim: a ledger phase
//! appended only if the last phase allows it (`Ledger::append_phase_if`), so of concurrent takers exactly
//! one wins a sibling.

use crate::error::{Error, IoContext, Result};
use crate::flock::{Flock, Mode};
use crate::ledger::{Ledger, PhaseCas};
use crate::record::{Checkpoint, Owner, Session};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};
pub use crate::record::pool::{FillTimes, Section};
pub use crate::spool::{parked_record, ParkedFile, Spool};



impl Section {
    pub fn validate(&self) -> Result<()> {
        crate::state::check_checkpoint_id(&self.checkpoint).map_err(|m| Error::bad_field("pool.checkpoint", m))?;
        let want = crate::state::pools_root().join(&self.checkpoint);
        if self.spool != want {
            return Err(Error::bad_field("pool.spool", format!("{} is not {} (checkpoint {}'s pool)", self.spool.display(), want.display(), self.checkpoint)));
        }
        Ok(())
    }
}

fn now_ms() -> u64 {
    (crate::state::now() * 1000.0) as u64
}

/// Append `phase` by `by` to session `id`'s ledger if its last phase is one of `allowed`.
fn claim(id: &str, phase: &str, by: &Owner, allowed: &[&str]) -> Result<PhaseCas> {
    match Ledger::open(&crate::state::session_dir(id)) {
        Ok(l) => l.append_phase_if(phase, by, allowed),
        Err(_) => Ok(PhaseCas::Gone),
    }
}

/// The fill lock of a spool, held until dropped.
struct FillLock {
    _l: Flock<File>,
}

impl FillLock {
    /// Take it, waiting at most `wait`; None when another process held it all that time.
    fn take(spool: &Spool, wait: Duration) -> Result<Option<FillLock>> {
        let path = spool.lock_path();
        let f = std::fs::OpenOptions::new().write(true).create(true).truncate(false).open(&path).ctx("open fill lock", &path)?;
        Ok(Flock::try_for(f, &path, Mode::Exclusive, wait)?.map(|l| FillLock { _l: l }))
    }
}

/// The pid holding a spool's fill lock, from /proc/locks (looking does not take the lock, so it never
/// turns a filler away).
/// Read by hand, not through procfs: procfs 0.18's `locks()` does not know a waiter's `->` lines, which
/// would shift its fields.
fn filler_pid(spool: &Spool) -> Option<i32> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(spool.lock_path()).ok()?;
    let (major, minor) = (libc::major(m.dev()), libc::minor(m.dev()));
    let want = format!("{major:02x}:{minor:02x}:{}", m.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    // "1: FLOCK  ADVISORY  WRITE 1234 00:19:5678 0 EOF"; a process waiting for the lock has "->" after
    // the number, and is no holder.
    locks.lines().filter(|l| !l.contains("->")).find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        (w.get(1) == Some(&"FLOCK") && w.get(5) == Some(&want.as_str())).then(|| w.get(4)?.parse().ok()).flatten()
    })
}

// ---- take -----------------------------------------------------------------------------------------

pub struct TakeOptions {
    /// How long to wait for a sibling when the pool is empty.
    pub wait: Duration,
    /// Refuse (and destroy) siblings parked longer ago.
    pub max_age: Option<Duration>,
    /// The re-check's timeout.
    pub ready_timeout: Duration,
    /// When the take started (Unix seconds): written to `pool.take_started_at`.
    pub started_at: f64,
}

/// Take the oldest parked sibling of the pool, with `taker` as its new owner. CheckFailed when none
/// could be had in `o.wait`.
pub fn take(spool: &Spool, taker: &Owner, o: &TakeOptions) -> Result<Session> {
    let deadline = Instant::now() + o.wait;
    let mut refused = 0;
    loop {
        for f in spool.parked() {
            // Another taker may have renamed it away since the listing.
            let Ok(text) = std::fs::read_to_string(&f.path) else { continue };
            let expired = o.max_age.is_some_and(|m| now_ms().saturating_sub(f.parked_ms) > m.as_millis() as u64);
            // The claim: `taken` by the taker, only if still parked (or published and not yet marked).
            match claim(&f.session, "taken", taker, &["parked", "live"])? {
                PhaseCas::Appended => {}
                PhaseCas::Gone => {
                    let _ = std::fs::remove_file(&f.path);
                    continue;
                }
                PhaseCas::Other(_) => continue,
            }
            let taken = spool.taken().join(f.path.file_name().expect("a file name"));
            let _ = std::fs::rename(&f.path, &taken);
            let handed = if expired { Err(Error::CheckFailed("older than --max-age".into())) } else { hand_out(&text, taker, o) };
            match handed {
                Ok(s) => return Ok(s),
                Err(_) => {
                    // Ours now, and not fit to hand out: destroyed, whatever was wrong with it.
                    let _ = crate::destroy::destroy_session(&f.session);
                    let _ = std::fs::remove_file(&taken);
                    refused += 1;
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(Error::CheckFailed(format!("pool {}: no ready sibling (waited {} s; refused {refused})", spool.dir.display(), o.wait.as_secs_f64())));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A claimed sibling made the taker's: thawed, its record's owner and pool section set, checked again.
fn hand_out(text: &str, taker: &Owner, o: &TakeOptions) -> Result<Session> {
    let mut s = Session::parse(text.trim())?;
    let pool = s.pool.as_mut().ok_or_else(|| Error::bad_field("pool", "missing: not a parked sibling's record"))?;
    if pool.frozen {
        crate::cgroup::thaw(&s)?;
    }
    let pool = s.pool.as_mut().expect("checked above");
    pool.frozen = false;
    pool.take_started_at = Some(o.started_at);
    pool.taken_at = Some(crate::state::now());
    pool.taker = Some(taker.clone());
    s.owner = taker.clone();
    crate::sibling::require_ready(&mut s, &crate::sibling::ready_defaults(o.ready_timeout))?;
    Ok(s)
}

// ---- fill -----------------------------------------------------------------------------------------

pub struct FillOptions {
    /// Parked siblings to keep per pool.
    pub depth: usize,
    /// Keep the depth, looking again this often; None: fill once and return.
    pub every: Option<Duration>,
    /// Make at most this many siblings per pool in this run.
    pub count: Option<u64>,
    /// Restore nothing while the machine has this many sessions.
    pub max_sessions: usize,
    /// Restore nothing while MemAvailable is below this, bytes.
    pub min_available: u64,
    /// Destroy parked siblings older than this.
    pub max_age: Option<Duration>,
    pub restore: crate::restore::RestoreOptions,
    pub freeze: bool,
    /// The pool is bound to this owner (`drums-pool fill --bound`): its siblings are the owner's and stay
    /// `live` (never `parked`, which the sweep would keep without an owner), and once the owner is gone
    /// the filler stops and drains the pool.
    pub bound: Option<Owner>,
}

impl FillOptions {
    /// How the filler makes a sibling: clone hygiene with the browser, then drums-ready's rule (its
    /// deadline scaled as every tool's is).
    fn sibling(&self) -> crate::sibling::SiblingOptions<'_> {
        crate::sibling::SiblingOptions {
            restore: &self.restore,
            reseed: Some(crate::reseed::ReseedOptions { hostname: None, browser: true }),
            ready: Some(crate::sibling::ready_defaults(crate::state::scaled(Duration::from_secs(30)))),
        }
    }
}

crate::record_type!(ParkedType = "pool_parked");

/// One parked sibling, as the filler reports it.
#[derive(Debug, Serialize, Deserialize)]
pub struct ParkedReport {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: ParkedType,
    pub pool: PathBuf,
    pub session: String,
    pub file: PathBuf,
    pub frozen: bool,
    pub fill_s: FillTimes,
}

crate::record_type!(FillType = "pool_fill");

/// What a filler did to one pool.
#[derive(Debug, Serialize, Deserialize)]
pub struct FillReport {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: FillType,
    pub pool: PathBuf,
    pub made: u64,
    pub failed: u64,
    /// Parked siblings when it stopped; null when another filler holds the pool.
    pub depth: Option<usize>,
    pub elapsed_s: f64,
    pub stopped: String,
    #[serde(skip)]
    pub failed_in_a_row: u32,
}

/// Consecutive failed siblings that stop a pool's filling.
pub const FAILURES_IN_A_ROW: u32 = 3;

static STOP: AtomicBool = AtomicBool::new(false);
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(sig: libc::c_int) {
    STOP_SIGNAL.store(sig, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// From now on SIGTERM and SIGINT ask the filler to stop between two steps instead of killing it midway.
/// SA_RESTART: the system calls of a restore in progress carry on.
pub fn stop_on_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// The owner a bound pool dies with (FillOptions::bound), set once by `fill`.
static BOUND_OWNER: std::sync::OnceLock<Owner> = std::sync::OnceLock::new();

fn stop_requested() -> Option<String> {
    if STOP.load(Ordering::SeqCst) {
        return Some(match STOP_SIGNAL.load(Ordering::SeqCst) {
            libc::SIGINT => "SIGINT".to_string(),
            _ => "SIGTERM".to_string(),
        });
    }
    BOUND_OWNER.get().filter(|o| !crate::proc::alive(o.pid, o.start_time)).map(|o| format!("{} {}", OWNER_GONE, o.pid))
}

/// How a bound pool's fill report says that its owner is gone (followed by the owner's pid).
pub const OWNER_GONE: &str = "the pool's owner is gone: pid";

/// Sleep `d`, waking early when asked to stop.
fn nap(d: Duration) {
    let end = Instant::now() + d;
    while stop_requested().is_none() && Instant::now() < end {
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
    }
}

struct Filling<'a> {
    ckpt: &'a Checkpoint,
    spool: Spool,
    _lock: FillLock,
    report: FillReport,
}

/// Fill the pools of `ckpts`, one sibling at a time, taking turns; `parked` gets each parked sibling's
/// report. Returns one report per pool, also for a pool another filler holds.
pub fn fill(ckpts: &[Checkpoint], o: &FillOptions, mut parked: impl FnMut(&ParkedReport) -> Result<()>, mut failure: impl FnMut(&Error)) -> Result<Vec<FillReport>> {
    let t0 = Instant::now();
    // The filler owns the siblings it makes: if it dies midway, the sweep takes them (drums(7)). A bound
    // pool's siblings are its owner's instead, so that they are orphans once the owner is gone, whatever
    // became of the filler. Set before any thread exists.
    let me = match &o.bound {
        Some(owner) => {
            let _ = BOUND_OWNER.set(owner.clone());
            std::env::set_var("DRUMS_OWNER", owner.pid.to_string());
            owner.clone()
        }
        None => {
            std::env::set_var("DRUMS_OWNER", std::process::id().to_string());
            crate::proc::me()?
        }
    };
    let report = |spool: &Spool, stopped: String| FillReport { drums: crate::record::VERSION, kind: FillType::Tag, pool: spool.dir.clone(), made: 0, failed: 0, depth: None, elapsed_s: 0.0, stopped, failed_in_a_row: 0 };
    let mut busy = vec![];
    let mut pools = vec![];
    for c in ckpts {
        let spool = Spool::of(&c.id)?;
        spool.make()?;
        // One filler per pool: a second one (cron overlapping a loop) has nothing to do there.
        match FillLock::take(&spool, Duration::ZERO)? {
            Some(lock) => pools.push(Filling { ckpt: c, report: report(&spool, String::new()), spool, _lock: lock }),
            None => {
                let why = format!("another filler holds {}", spool.lock_path().display());
                busy.push(report(&spool, why));
            }
        }
    }
    while pools.iter().any(|p| p.report.stopped.is_empty()) {
        let mut worked = false;
        for p in pools.iter_mut().filter(|p| p.report.stopped.is_empty()) {
            if let Some(sig) = stop_requested() {
                p.report.stopped = format!("stopped by {sig}");
                continue;
            }
            prune(&p.spool, o, &me);
            if p.spool.parked().len() >= o.depth {
                if o.every.is_none() {
                    p.report.stopped = "depth reached".into();
                }
                continue;
            }
            if let Some(n) = o.count.filter(|n| p.report.made >= *n) {
                p.report.stopped = format!("count ceiling (--count {n})");
                continue;
            }
            if let Some(ceiling) = ceiling(o) {
                if o.every.is_none() {
                    p.report.stopped = ceiling;
                }
                continue;
            }
            worked = true;
            match fill_one(p.ckpt, &p.spool, o, &me) {
                Ok(r) => {
                    p.report.made += 1;
                    p.report.failed_in_a_row = 0;
                    match parked(&r) {
                        // A bound pool's owner may be gone with the reader of its reports: the pool
                        // must still be drained below.
                        Err(e) if o.bound.is_some() => failure(&e),
                        r => r?,
                    }
                }
                Err(e) => {
                    failure(&e);
                    p.report.failed += 1;
                    p.report.failed_in_a_row += 1;
                    if p.report.failed_in_a_row >= FAILURES_IN_A_ROW {
                        p.report.stopped = format!("{FAILURES_IN_A_ROW} siblings failed in a row");
                    }
                }
            }
        }
        if !worked {
            if let Some(every) = o.every {
                nap(every);
            }
        }
    }
    let spools: Vec<Spool> = pools.iter().map(|p| p.spool.clone()).collect();
    let mut out: Vec<FillReport> = pools
        .into_iter()
        .map(|p| FillReport { depth: Some(p.spool.parked().len()), elapsed_s: t0.elapsed().as_secs_f64(), ..p.report })
        .collect();
    out.extend(busy.into_iter().map(|r| FillReport { elapsed_s: t0.elapsed().as_secs_f64(), ..r }));
    if let Some(owner) = o.bound.as_ref().filter(|o| !crate::proc::alive(o.pid, o.start_time)) {
        // The pool dies with its owner: nobody is left to take from it. Drained once the fill locks are
        // let go (with `pools`), so that the drain can remove the spool.
        for spool in &spools {
            match drain(spool) {
                Ok(d) if d.left == 0 => {}
                Ok(d) => failure(&Error::failed(format!("pool {}: owner pid {} gone, {} sibling(s) left something behind (drums-sweep --orphans retries)", spool.dir.display(), owner.pid, d.left))),
                Err(e) => failure(&e),
            }
        }
    }
    Ok(out)
}

/// Which ceiling stops a restore now, if one does.
fn ceiling(o: &FillOptions) -> Option<String> {
    let dirs = std::fs::read_dir(crate::state::sessions_root()).into_iter().flatten().flatten();
    // A bound pool's ceiling is its owner's: the sessions the owner holds, parked and taken, not the
    // machine's (a Ray node's actor counts its own, beside other programs' sessions).
    let sessions = match &o.bound {
        Some(owner) => dirs
            .filter(|e| crate::ledger::read_file(&e.path().join(crate::ledger::FILE_NAME)).ok().is_some_and(|c| c.owner().is_some_and(|(_, w, _, _)| w == owner)))
            .count(),
        None => dirs.count(),
    };
    if sessions >= o.max_sessions {
        return Some(format!("count ceiling (--max-sessions {})", o.max_sessions));
    }
    if crate::proc::mem_available().is_some_and(|m| m < o.min_available) {
        return Some(format!("memory ceiling (MemAvailable below {} bytes)", o.min_available));
    }
    None
}

/// Remove what is stale: `ready/` records whose session is gone or was taken (a taker killed between its
/// claim and its rename), `taken/` records whose session is destroyed, `tmp/` files of a killed filler
/// (the fill lock is ours, so no other filler is writing there); and destroy parked siblings older than
/// --max-age.
fn prune(spool: &Spool, o: &FillOptions, me: &Owner) {
    for f in spool.parked() {
        if o.max_age.is_some_and(|m| now_ms().saturating_sub(f.parked_ms) > m.as_millis() as u64) {
            if claim(&f.session, "taken", me, &["parked", "live"]).is_ok_and(|c| c == PhaseCas::Appended) {
                let _ = std::fs::remove_file(&f.path);
                let _ = crate::destroy::destroy_session(&f.session);
            }
            continue;
        }
        let phase = crate::ledger::read_file(&crate::state::session_dir(&f.session).join(crate::ledger::FILE_NAME)).ok().map(|c| c.last_phase().map(|(p, ..)| p.to_string()));
        let stale = match phase {
            None => true,
            Some(p) => !matches!(p.as_deref(), Some("parked" | "live")),
        };
        if stale {
            let _ = std::fs::remove_file(&f.path);
        }
    }
    spool.prune_taken();
    for f in Spool::files_in(&spool.tmp()) {
        let _ = std::fs::remove_file(f);
    }
}

/// One sibling: restore, reseed, ready (crate::sibling), then freeze, park. A sibling that fails a step,
/// or that a stop signal catches before it is parked, is destroyed.
fn fill_one(c: &Checkpoint, spool: &Spool, o: &FillOptions, me: &Owner) -> Result<ParkedReport> {
    let t0 = Instant::now();
    let stop = || stop_requested().map_or(Ok(()), |sig| Err(Error::failed(format!("stopped by {sig} before the sibling was parked"))));
    let mut made = crate::sibling::make(c, &o.sibling(), &stop)?;
    match park(&mut made, spool, o, me, t0, &stop) {
        Ok(r) => {
            // Marked parked unless a taker was quicker (it claims a `live` published sibling too). A bound
            // pool's sibling stays `live`: the sweep takes it once its owner is gone.
            if o.bound.is_none() {
                let _ = claim(&made.session.id, "parked", me, &["live"]);
            }
            Ok(r)
        }
        Err(e) => Err(e.with_cleanup(crate::destroy::destroy_session(&made.session.id))),
    }
}

fn park(made: &mut crate::sibling::Made, spool: &Spool, o: &FillOptions, me: &Owner, t0: Instant, stop: &dyn Fn() -> Result<()>) -> Result<ParkedReport> {
    let s = &mut made.session;
    let t2 = t0.elapsed().as_secs_f64();
    stop()?;
    if o.freeze {
        crate::cgroup::freeze(s)?;
    }
    let t3 = t0.elapsed().as_secs_f64();
    let fill_s = FillTimes { restore_s: made.restore_s, reseed_ready_s: made.reseed_ready_s, freeze_s: t3 - t2, total_s: t0.elapsed().as_secs_f64() };
    let parked_at = crate::state::now();
    s.pool = Some(Section { checkpoint: spool.checkpoint.clone(), spool: spool.dir.clone(), parked_at, frozen: o.freeze, filler: me.clone(), fill_s: fill_s.clone(), take_started_at: None, taken_at: None, taker: None });
    crate::session_io::save(s)?;
    let name = format!("{}.{}.json", (parked_at * 1000.0) as u64, s.id);
    let tmp = spool.tmp().join(&name);
    let mut line = serde_json::to_vec(&*s).expect("records serialize");
    line.push(b'\n');
    std::fs::write(&tmp, &line).ctx("write", &tmp)?;
    stop()?;
    // Visible to takers only now, complete.
    let file = spool.ready().join(&name);
    std::fs::rename(&tmp, &file).ctx("rename", &file)?;
    Ok(ParkedReport { drums: crate::record::VERSION, kind: ParkedType::Tag, pool: spool.dir.clone(), session: s.id.clone(), file, frozen: o.freeze, fill_s })
}

// ---- drain ----------------------------------------------------------------------------------------

crate::record_type!(DrainType = "pool_drain");

#[derive(Debug, Serialize, Deserialize)]
pub struct DrainReport {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: DrainType,
    pub pool: PathBuf,
    pub destroyed: u64,
    pub left: u64,
    pub filler_running: bool,
    pub spool_removed: bool,
}

/// How long a drain waits for a filler at work to finish.
pub const DRAIN_WAIT: Duration = Duration::from_secs(60);

/// Claim every parked sibling (as a taker would) and destroy it; remove the spool when nothing in it is
/// left. Taken sessions belong to their takers and are left alone.
pub fn drain(spool: &Spool) -> Result<DrainReport> {
    let me = crate::proc::me()?;
    let mut rep = DrainReport { drums: crate::record::VERSION, kind: DrainType::Tag, pool: spool.dir.clone(), destroyed: 0, left: 0, filler_running: false, spool_removed: false };
    if spool.dir.is_dir() {
        // A filler at work would park more while we drain: wait for it (a looping filler never lets go).
        let lock = FillLock::take(spool, DRAIN_WAIT)?;
        rep.filler_running = lock.is_none();
        for f in spool.parked() {
            if claim(&f.session, "taken", &me, &["parked", "live"])? == PhaseCas::Appended {
                match crate::destroy::destroy_session(&f.session) {
                    Ok(()) => rep.destroyed += 1,
                    Err(_) => rep.left += 1,
                }
            }
            let _ = std::fs::remove_file(&f.path);
        }
        spool.prune_taken();
        if lock.is_some() {
            for f in Spool::files_in(&spool.tmp()) {
                let _ = std::fs::remove_file(f);
            }
            let empty = [spool.tmp(), spool.ready(), spool.taken()].iter().all(|d| std::fs::remove_dir(d).is_ok() || !d.exists());
            if empty {
                let _ = std::fs::remove_file(spool.lock_path());
                let _ = std::fs::remove_dir(&spool.dir);
            }
            // The pools root goes with its last spool.
            let _ = std::fs::remove_dir(crate::state::pools_root());
        }
    }
    rep.spool_removed = !spool.dir.exists();
    Ok(rep)
}

// ---- status ---------------------------------------------------------------------------------------

crate::record_type!(StatusType = "pool_status");

#[derive(Debug, Serialize, Deserialize)]
pub struct StatusReport {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: StatusType,
    pub pool: PathBuf,
    pub checkpoint: String,
    /// Parked siblings (records in `ready/`), oldest first.
    pub parked: Vec<String>,
    /// The file holding each parked sibling's record, in the order of `parked`: where a caller reads a
    /// parked record without knowing the spool's layout.
    pub parked_files: Vec<PathBuf>,
    /// Seconds since the oldest was parked; null when none is.
    pub oldest_age_s: Option<f64>,
    /// Records in `taken/`: siblings handed out whose session still exists (or was destroyed since the
    /// filler last looked).
    pub taken: usize,
    /// Records being written in `tmp/`.
    pub making: usize,
    /// The process holding the fill lock; null when no filler is at work.
    pub filler_pid: Option<i32>,
}

/// What is in the pool of `spool` now; reads only.
pub fn status(spool: &Spool) -> StatusReport {
    let parked = spool.parked();
    StatusReport {
        drums: crate::record::VERSION,
        kind: StatusType::Tag,
        pool: spool.dir.clone(),
        checkpoint: spool.checkpoint.clone(),
        oldest_age_s: parked.first().map(|f| now_ms().saturating_sub(f.parked_ms) as f64 / 1000.0),
        parked_files: parked.iter().map(|f| f.path.clone()).collect(),
        parked: parked.into_iter().map(|f| f.session).collect(),
        taken: Spool::files_in(&spool.taken()).len(),
        making: Spool::files_in(&spool.tmp()).len(),
        filler_pid: filler_pid(spool),
    }
}

/// Every pool there is, by checkpoint id.
pub fn spools() -> Vec<Spool> {
    let mut v: Vec<Spool> = std::fs::read_dir(crate::state::pools_root())
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Spool::of(e.file_name().to_str()?).ok())
        .collect();
    v.sort_by(|a, b| a.checkpoint.cmp(&b.checkpoint));
    v
}
