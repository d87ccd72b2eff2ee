//! The cron mode of drums-sweep: find orphaned sessions and unledgered leftovers, and remove them.
//!
//! A session (a directory under `<state_root>/sessions`) is judged from its ledger:
//! - left alone while its last phase marks work in progress (`creating`, `restoring`, `destroying`: any
//!   but `live`, `parked`, `taken`) and the process that set it is alive (a live tool is at work), and
//!   while its ledger was written to less than the grace period (`older_than`) ago (between two stages
//!   of a pipeline no tool holds it);
//! - an orphan when its time to live has expired; when its holder is gone (the owner, or the taker after a
//!   `taken` phase) unless it is `parked` in a warm pool; when it is `parked` but no pool's `ready/`
//!   directory holds its record (nobody can take it any more); when the tool that was creating, restoring or
//!   destroying it died midway; when it holds resources but no live init (half-created, or its init died); or when it
//!   has no readable ledger at all.
//!
//! Unledgered leftovers, objects that carry Drums' names but that no ledger claims, are found and removed
//! by `leftovers` (its documentation says which objects, and how the grace period applies to them).

mod leftovers;

use super::{DestroyOptions, DestroyReport};
use crate::error::{Error, Result};
use crate::ledger::{Contents, Entry, Resource};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const LOCK_FILE: &str = "sweep.lock";
pub const SEEN_FILE: &str = "sweep-seen.json";
/// The comm a session init gives itself (drums-ns init sets it with PR_SET_NAME).
pub const INIT_COMM: &str = "drums-init";

/// The sweep lock, `<state_root>/sweep.lock`, held until dropped. Sweeps take it exclusively so two never
/// race; explicit destroys take it shared, so they run side by side but never during a sweep.
pub struct SweepLock {
    _l: crate::flock::Flock<File>,
}

/// Take the sweep lock, waiting for it. None: there is no state root, so there is nothing to sweep or
/// destroy and nothing to race with (a dry run never creates one).
pub fn lock(exclusive: bool, create: bool) -> Result<Option<SweepLock>> {
    let root = crate::state::state_root();
    let path: PathBuf = root.join(LOCK_FILE);
    if !root.is_dir() && !create {
        return Ok(None);
    }
    if create {
        crate::state::private_root(&root)?;
    }
    let f = match std::fs::OpenOptions::new().read(true).write(create).create(create).open(&path) {
        Ok(f) => f,
        Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open sweep lock", &path, e)),
    };
    let mode = if exclusive { crate::flock::Mode::Exclusive } else { crate::flock::Mode::Shared };
    Ok(Some(SweepLock { _l: crate::flock::Flock::wait(f, &path, mode)? }))
}

#[derive(Debug, Clone)]
pub struct SweepOptions {
    pub destroy: DestroyOptions,
    /// The grace period (see the module documentation).
    pub older_than: Duration,
    /// Time to live for sessions whose ledger sets none.
    pub ttl: Option<u64>,
}

/// What the sweep thought of one session.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub state_dir: PathBuf,
    pub session: Option<String>,
    pub verdict: Judged,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Judged {
    /// Its owner is gone (or its time to live is over): destroyed.
    Orphan,
    Kept,
    /// An orphan whose ledger holds a line this version does not understand: nothing of it removed.
    Refused,
}

/// One unledgered object.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Leftover {
    pub kind: LeftoverKind,
    /// The link name, mount point, cgroup directory or slot file; for a process, its host pid.
    pub name: String,
    /// Why it is Drums', and what became of it.
    pub note: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
}

/// What an unledgered object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeftoverKind {
    Process,
    Link,
    Mount,
    Cgroup,
    Slot,
    Checkpoint,
    /// A session's network policy state (nftables table `inet drums_net_<slot>`, its rules, routes and
    /// resolver): `name` is the table.
    Egress,
    /// An orphan session whose destroy failed (in `unledgered.left` only: `name` is its state directory).
    Session,
}

#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Unledgered {
    pub found: Vec<Leftover>,
    /// With --dry-run: what would be removed now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planned: Vec<Leftover>,
    pub removed: Vec<Leftover>,
    /// Younger than the grace period (or not yet seen for that long): left for a later sweep.
    pub waiting: Vec<Leftover>,
    /// Could not be removed, with the reason.
    pub left: Vec<Leftover>,
}

crate::record_type!(SweepType = "sweep");

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SweepReport {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: SweepType,
    pub dry_run: bool,
    pub at: f64,
    pub older_than_s: f64,
    pub sessions: Vec<Verdict>,
    pub destroyed: Vec<DestroyReport>,
    pub unledgered: Unledgered,
    /// How many things are still there that the sweep wanted gone (with --dry-run: would remove).
    pub left: usize,
    /// How many orphans were refused (verdict `refused`); drums-sweep then exits NOT_UNDERSTOOD.
    pub refused: usize,
    /// The session firewall, checked (and put back if it was changed) while any session remains, so that
    /// live sessions do not stay unprotected until the next one is made: `verified`, `no sessions`,
    /// `not checked (dry run)`, or why it could not be (then counted in `left`).
    pub firewall: String,
}

/// Sweep: destroy orphaned sessions, then unledgered leftovers. Takes the sweep lock.
pub fn sweep(opts: &SweepOptions) -> Result<SweepReport> {
    let dry = opts.destroy.dry_run;
    let _lock = lock(true, !dry)?;
    let now = crate::state::now();
    let mut rep = SweepReport {
        drums: crate::record::VERSION,
        kind: SweepType::Tag,
        dry_run: dry,
        at: now,
        older_than_s: opts.older_than.as_secs_f64(),
        sessions: vec![],
        destroyed: vec![],
        unledgered: Unledgered::default(),
        left: 0,
        refused: 0,
        firewall: String::new(),
    };
    for dir in session_dirs() {
        // Only a directory named like a session is one: anything else put here is not Drums' to remove.
        if let Err(e) = super::check_state_dir(&dir) {
            rep.sessions.push(Verdict { state_dir: dir, session: None, verdict: Judged::Kept, reason: format!("left alone: {e}") });
            continue;
        }
        let (verdict, reason) = judge(&dir, now, opts, &crate::state::pools_root());
        let session = crate::ledger::read_file(&dir.join(crate::ledger::FILE_NAME)).ok().and_then(|c| c.owner().map(|o| o.0.to_string()));
        rep.sessions.push(Verdict { state_dir: dir.clone(), session, verdict: if verdict { Judged::Orphan } else { Judged::Kept }, reason });
        if verdict {
            match super::destroy(&dir, &opts.destroy) {
                Ok(d) => {
                    if !d.clean() || (dry && !d.planned.is_empty()) {
                        rep.left += if dry { d.planned.len() } else { d.left.len().max(1) };
                    }
                    rep.destroyed.push(d);
                }
                Err(e @ Error::NotUnderstood(_)) => {
                    rep.refused += 1;
                    let v = rep.sessions.last_mut().expect("pushed above");
                    v.verdict = Judged::Refused;
                    v.reason = format!("{}; not destroyed: {e}", v.reason);
                }
                Err(e) => {
                    rep.left += 1;
                    rep.unledgered.left.push(Leftover { kind: LeftoverKind::Session, name: dir.display().to_string(), note: e.to_string(), errno: None });
                }
            }
        }
    }
    leftovers::unledgered(opts, now, &mut rep.unledgered);
    rep.left += if dry { rep.unledgered.planned.len() } else { rep.unledgered.left.len() };
    rep.firewall = if dry {
        "not checked (dry run)".into()
    } else if session_dirs().is_empty() {
        "no sessions".into()
    } else {
        match crate::net::ensure_firewall() {
            Ok(()) => "verified".into(),
            Err(e) => {
                rep.left += 1;
                format!("could not be verified: {e}")
            }
        }
    };
    Ok(rep)
}

fn session_dirs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(crate::state::sessions_root())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

fn holder_alive(o: &crate::record::Owner) -> bool {
    crate::proc::alive(o.pid, o.start_time)
}

/// (orphan?, why). `pools`: where the warm pools' spools are (crate::state::pools_root).
fn judge(dir: &Path, now: f64, opts: &SweepOptions, pools: &Path) -> (bool, String) {
    let grace = opts.older_than.as_secs_f64();
    let ledger = dir.join(crate::ledger::FILE_NAME);
    let contents = crate::ledger::read_file(&ledger).ok();
    let Some((id, owner, ttl, created)) = contents.as_ref().and_then(|c| c.owner().map(|(s, o, t, c)| (s.to_string(), o.clone(), t, c))) else {
        // Ledger::create makes the directory, then the ledger: a young directory may be half-way there.
        let age = mtime_age(dir, now);
        return if age >= grace {
            (true, format!("no readable ledger, and the directory is {age:.0} s old"))
        } else {
            (false, format!("no ledger yet; {age:.1} s old, within the grace period"))
        };
    };
    let c = contents.as_ref().unwrap();
    let phase = c.last_phase();
    if let Some((p, by, _)) = phase {
        // Any phase but the settled ones marks work in progress (creating, restoring, destroying, and
        // whatever a later tool adds, like a dump), so a live process that set it protects the session.
        if !matches!(p, "live" | "parked" | "taken") && holder_alive(by) {
            return (false, format!("{p} by pid {}, which is alive", by.pid));
        }
    }
    let quiet = now - last_write(c).max(mtime_secs(&ledger).unwrap_or(0.0));
    if quiet < grace {
        return (false, format!("its ledger was written {quiet:.1} s ago, within the grace period"));
    }
    if let Some(ttl) = ttl.or(opts.ttl) {
        if now > created + ttl as f64 {
            return (true, format!("time to live of {ttl} s expired {:.0} s ago", now - created - ttl as f64));
        }
    }
    if let Some((p @ ("creating" | "restoring" | "destroying"), by, _)) = phase {
        // The live-holder case returned above: the tool that was making (or destroying) it died midway.
        return (true, format!("{p} was interrupted: pid {} is gone", by.pid));
    }
    match phase {
        // The pool's protocol keeps a parked session's record in a `ready/` until a claim is appended: the
        // filler renames the record in before it appends `parked`, and takers, the filler's pruning and the
        // drain append `taken` before they move it out. So a parked session that no `ready/` holds (its
        // spool or file was removed by hand, or lost) can never be taken and would live for ever. The ledger
        // is read again after the look: a claim made between the first read and the look (`taken`, the
        // record moved to taken/) must not pass for a lost record.
        Some(("parked", _, _)) if crate::spool::parked_record(pools, &id).is_none() && still_parked(&ledger) => {
            return (true, format!("parked, but no pool's ready/ holds its record ({}/*/ready/*.{id}.json): nobody can take it", pools.display()));
        }
        Some(("parked", _, _)) => {}
        Some(("taken", by, _)) if !holder_alive(by) => return (true, format!("taken by pid {}, which is gone", by.pid)),
        Some(("taken", _, _)) => {}
        _ if !holder_alive(&owner) => return (true, format!("its owner pid {} is gone", owner.pid)),
        _ => {}
    }
    let live = c.live();
    let inits: Vec<&Resource> = live.iter().filter(|r| matches!(r, Resource::Process { init: true, .. })).collect();
    let init_alive = inits.iter().any(|r| matches!(r, Resource::Process { pid, start_time, .. } if crate::proc::alive(*pid, *start_time)));
    if !init_alive && live.iter().any(|r| !matches!(r, Resource::Image { .. })) {
        return (true, if inits.is_empty() { "half-created: resources but no init".into() } else { "its init is gone".into() });
    }
    (false, "live".into())
}

fn still_parked(ledger: &Path) -> bool {
    crate::ledger::read_file(ledger).ok().is_some_and(|c| c.last_phase().is_some_and(|(p, ..)| p == "parked"))
}

fn last_write(c: &Contents) -> f64 {
    c.entries
        .iter()
        .map(|e| match e {
            Entry::Owner { t, .. } | Entry::Create { t, .. } | Entry::Release { t, .. } | Entry::Phase { t, .. } => *t,
        })
        .fold(0.0, f64::max)
}

fn mtime_secs(p: &Path) -> Option<f64> {
    let m = std::fs::metadata(p).ok()?.modified().ok()?;
    Some(m.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs_f64())
}
fn mtime_age(p: &Path, now: f64) -> f64 {
    mtime_secs(p).map(|t| now - t).unwrap_or(f64::INFINITY)
}


/// Session inits on this machine: (host pid, start time, pid namespace inode, why it is Drums'). A session
/// init is PID 1 of its namespace and calls itself `drums-init` (comm) or `drums-ns init` (command line);
/// a restored init keeps both from its source, so the id in the command line is never relied on.
pub(super) fn session_inits() -> Vec<(i32, u64, u64, String)> {
    let me = crate::proc::ns_inode(std::process::id() as i32, "pid").ok();
    let mut out = vec![];
    for pid in crate::proc::pids() {
        let comm = crate::proc::comm(pid);
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let why = if comm == INIT_COMM {
            format!("comm {comm}")
        } else if cmdline.starts_with(b"drums-ns\0init") {
            "command line drums-ns init".to_string()
        } else {
            continue;
        };
        let Ok(ns) = crate::proc::ns_inode(pid, "pid") else { continue };
        if Some(ns) == me || crate::proc::ns_pid(pid) != Some(1) {
            continue;
        }
        let Some(start) = crate::proc::start_time(pid) else { continue };
        if matches!(crate::proc::state(pid), Some('Z') | Some('X')) {
            continue;
        }
        out.push((pid, start, ns, why));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Ledger;
    use crate::record::Owner;

    fn opts(grace: u64) -> SweepOptions {
        SweepOptions { destroy: DestroyOptions::default(), older_than: Duration::from_secs(grace), ttl: None }
    }
    fn dir() -> PathBuf {
        std::env::temp_dir().join(format!("drums-judge-test-{}", crate::state::new_id('d')))
    }
    fn dead() -> Owner {
        // A child that has exited and been reaped: its pid names nobody (or someone with another start time).
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id() as i32;
        let start_time = crate::proc::start_time(pid).unwrap_or(1);
        c.wait().unwrap();
        Owner { pid, start_time }
    }
    fn phase(l: &Ledger, p: &str, by: Owner) {
        l.append(&Entry::Phase { t: crate::state::now(), phase: p.into(), by }).unwrap();
    }
    /// Judged against an empty temporary pools root; tests that need a spool record use `verdict_in`.
    fn verdict(d: &Path, grace: u64) -> (bool, String) {
        verdict_in(d, grace, Path::new("/nonexistent/drums-judge-test-pools"))
    }
    fn verdict_in(d: &Path, grace: u64, pools: &Path) -> (bool, String) {
        judge(d, crate::state::now(), &opts(grace), pools)
    }

    #[test]
    fn the_rules() {
        let me = crate::proc::me().unwrap();
        // A live owner with a live init (this process stands in for the init).
        let d = dir();
        let l = Ledger::create(&d, "d-1", me.clone(), None).unwrap();
        l.create_res(Resource::Process { pid: me.pid, start_time: me.start_time, role: "init".into(), init: true }).unwrap();
        phase(&l, "live", dead());
        assert!(!verdict(&d, 0).0, "{:?}", verdict(&d, 0));
        // Young ledgers are left alone whatever they say.
        let d2 = dir();
        let l2 = Ledger::create(&d2, "d-2", dead(), None).unwrap();
        l2.create_res(Resource::Mount { path: "/nonexistent".into() }).unwrap();
        assert!(!verdict(&d2, 60).0, "within the grace period");
        assert!(verdict(&d2, 0).1.contains("owner"), "{:?}", verdict(&d2, 0));
        // A live creator protects even an owner-less, init-less session; once it is gone, it is an orphan.
        let holder = Owner { pid: me.pid, start_time: me.start_time };
        phase(&l2, "creating", holder);
        assert!(!verdict(&d2, 0).0);
        phase(&l2, "creating", dead());
        assert!(verdict(&d2, 0).1.contains("interrupted"), "{:?}", verdict(&d2, 0));
        // A destroy that died midway: finish it, even with a live owner.
        let l7 = Ledger::create(&dir(), "d-7", me.clone(), None).unwrap();
        l7.create_res(Resource::Process { pid: me.pid, start_time: me.start_time, role: "init".into(), init: true }).unwrap();
        phase(&l7, "destroying", dead());
        assert!(verdict(l7.dir(), 0).1.contains("destroying was interrupted"), "{:?}", verdict(l7.dir(), 0));
        std::fs::remove_dir_all(l7.dir()).unwrap();
        // Parked, its record in a pool's ready/: the pool's owner may be gone.
        phase(&l, "parked", dead());
        let l3 = Ledger::create(&dir(), "d-3", dead(), None).unwrap();
        l3.create_res(Resource::Process { pid: me.pid, start_time: me.start_time, role: "init".into(), init: true }).unwrap();
        phase(&l3, "parked", dead());
        let pools = dir();
        let ready = pools.join("c-0123abcd").join("ready");
        std::fs::create_dir_all(&ready).unwrap();
        let rec = ready.join("1796000000000.d-3.json");
        std::fs::write(&rec, "{}\n").unwrap();
        assert!(!verdict_in(l3.dir(), 0, &pools).0, "{:?}", verdict_in(l3.dir(), 0, &pools));
        // Another session's record, a record still in tmp/ or in taken/, or a spool not named by a
        // checkpoint id is not its record: then nobody can take it, and it is an orphan.
        std::fs::rename(&rec, ready.join("1796000000000.d-33.json")).unwrap();
        for d in ["tmp", "taken"] {
            std::fs::create_dir_all(pools.join("c-0123abcd").join(d)).unwrap();
            std::fs::write(pools.join("c-0123abcd").join(d).join("1796000000000.d-3.json"), "{}\n").unwrap();
        }
        std::fs::create_dir_all(pools.join("stray/ready")).unwrap();
        std::fs::write(pools.join("stray/ready/1796000000000.d-3.json"), "{}\n").unwrap();
        let v = verdict_in(l3.dir(), 0, &pools);
        assert!(v.0 && v.1.contains("ready/"), "{v:?}");
        // ... but only after the grace period, like every verdict on a ledger.
        assert!(!verdict_in(l3.dir(), 60, &pools).0);
        std::fs::remove_dir_all(&pools).unwrap();
        // Taken by a process that is gone.
        phase(&l3, "taken", dead());
        assert!(verdict(l3.dir(), 0).1.contains("taken"));
        // A live owner but an init that is gone: dead session.
        let l4 = Ledger::create(&dir(), "d-4", me.clone(), None).unwrap();
        l4.create_res(Resource::Process { pid: dead().pid, start_time: 1, role: "init".into(), init: true }).unwrap();
        assert!(verdict(l4.dir(), 0).1.contains("init is gone"));
        // TTL, from the ledger or the default.
        let l5 = Ledger::create(&dir(), "d-5", me.clone(), Some(0)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(verdict(l5.dir(), 0).1.contains("time to live"));
        // No ledger: orphan only when old enough.
        let d6 = dir();
        std::fs::create_dir_all(&d6).unwrap();
        assert!(!verdict(&d6, 60).0);
        assert!(verdict(&d6, 0).0);
        for x in [d, d2, l3.dir().to_path_buf(), l4.dir().to_path_buf(), l5.dir().to_path_buf(), d6] {
            std::fs::remove_dir_all(x).unwrap();
        }
    }
}
