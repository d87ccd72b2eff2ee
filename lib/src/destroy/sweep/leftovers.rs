//! Unledgered leftovers are objects that carry Drums' names but that no ledger claims: links named
//! `drums*`, mounts below the state root outside any ledgered session directory, directories below a
//! `drums` cgroup directory, slot files, unfinished checkpoints (`<checkpoint root>/*.partial`), and
//! session inits (comm `drums-init` or command line `drums-ns init`) with their whole PID namespace. A
//! ledger is always written before the object it names is created, but the sweep reads ledgers before it
//! lists objects, so an object created in between looks unledgered for a moment. So an unledgered object
//! is removed only when it has been unledgered for the grace period: processes are dated by their start
//! time and unfinished checkpoints by their mtime; links, mounts and cgroup directories have no creation
//! time the kernel reports, so the sweep remembers when it first saw each (`<state_root>/sweep-seen.json`)
//! and removes it on a later run. With `older_than` 0 everything is removed in one run. Every ledger is
//! read again just before the unledgered objects are judged, and a process that descends from a live tool
//! holding a session in a creating or restoring phase (CRIU's restored tree) is never a leftover.
//!
//! Apart from `sweep`'s judging of sessions, which reads one ledger at a time: this reads all of them and
//! then every kind of object on the host, and acts on what none claims.

use super::{mtime_age, session_dirs, holder_alive, Leftover, LeftoverKind, SweepOptions, Unledgered, SEEN_FILE};
use crate::destroy::links;
use crate::ledger::Resource;
use crate::removal;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What the ledgers still present claim, read fresh.
#[derive(Default)]
struct Claimed {
    links: BTreeSet<String>,
    mounts: BTreeSet<PathBuf>,
    cgroups: BTreeSet<PathBuf>,
    slots: BTreeSet<PathBuf>,
    /// Slots whose egress state a ledger holds.
    egress: BTreeSet<u32>,
    /// Session directories with a ledger: everything below them is theirs.
    dirs: BTreeSet<PathBuf>,
    ids: BTreeSet<String>,
    /// PID namespaces of ledgered inits that are alive.
    pidns: BTreeSet<u64>,
    /// Directories ledgered to be removed (a checkpoint being written, `<id>.partial`).
    dir_res: BTreeSet<PathBuf>,
    /// Live processes holding a session in a creating or restoring phase: what they are making (CRIU's
    /// restored tree, an init before it is ledgered) is theirs.
    creators: BTreeSet<i32>,
    /// Ledgers holding lines this version does not understand: those lines may claim any object.
    not_understood: Vec<PathBuf>,
}

fn claimed() -> Claimed {
    let mut k = Claimed::default();
    for dir in session_dirs() {
        // A directory without a ledger yet is claimed too: the judge gave it the grace period.
        k.dirs.insert(dir.clone());
        if let Some(n) = dir.file_name().and_then(|n| n.to_str()) {
            k.ids.insert(n.to_string());
        }
        let Ok(c) = crate::ledger::read_file(&dir.join(crate::ledger::FILE_NAME)) else { continue };
        if !c.not_understood.is_empty() {
            k.not_understood.push(dir.join(crate::ledger::FILE_NAME));
        }
        if let Some((id, ..)) = c.owner() {
            k.ids.insert(id.to_string());
        }
        if let Some((p, by, _)) = c.last_phase() {
            if !matches!(p, "live" | "parked" | "taken") && holder_alive(by) {
                k.creators.insert(by.pid);
            }
        }
        for r in c.live() {
            match r {
                Resource::Link { name } => {
                    k.links.insert(name);
                }
                Resource::Mount { path } => {
                    k.mounts.insert(path);
                }
                Resource::Cgroup { path } => {
                    k.cgroups.insert(path);
                }
                Resource::Slot { path, .. } => {
                    k.slots.insert(path);
                }
                Resource::Egress { slot, .. } => {
                    k.egress.insert(slot);
                }
                Resource::Dir { path } => {
                    k.dir_res.insert(path);
                }
                Resource::Process { pid, start_time, init: true, .. } if crate::proc::alive(pid, start_time) => {
                    if let Ok(ns) = crate::proc::ns_inode(pid, "pid") {
                        k.pidns.insert(ns);
                    }
                }
                _ => {}
            }
        }
    }
    k
}

/// First-seen times of unledgered objects, by key.
fn load_seen() -> BTreeMap<String, f64> {
    std::fs::read(crate::state::state_root().join(SEEN_FILE)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}
fn store_seen(seen: &BTreeMap<String, f64>) {
    let root = crate::state::state_root();
    let tmp = root.join(format!("{SEEN_FILE}.tmp"));
    if std::fs::write(&tmp, serde_json::to_vec(seen).unwrap_or_default()).is_ok() {
        let _ = std::fs::rename(&tmp, root.join(SEEN_FILE));
    }
}

enum Candidate {
    Process { init_pid: i32, start: u64, pidns: u64 },
    Link(String),
    Mount(PathBuf),
    Cgroup(PathBuf),
    Slot(PathBuf),
    Partial(PathBuf),
    Egress(u32),
}

pub(super) fn unledgered(opts: &SweepOptions, now: f64, out: &mut Unledgered) {
    let dry = opts.destroy.dry_run;
    let grace = opts.older_than.as_secs_f64();
    let k = claimed();
    let old_seen = load_seen();
    let mut seen = BTreeMap::new();
    let mut cands: Vec<(Leftover, Candidate, f64)> = vec![];
    // Age of objects the kernel dates (processes); for the others, how long the sweep has known them.
    let mut dated = |key: String, age: Option<f64>| -> f64 {
        match age {
            Some(a) => a,
            None => {
                let first = *old_seen.get(&key).unwrap_or(&now);
                seen.insert(key, first);
                now - first
            }
        }
    };

    for (init_pid, start, pidns, why) in super::session_inits() {
        if k.pidns.contains(&pidns) || made_by(init_pid, &k.creators) {
            continue;
        }
        let age = process_age(start);
        let n = crate::proc::pids_in_pidns(pidns).len();
        let lo = Leftover { kind: LeftoverKind::Process, name: init_pid.to_string(), note: format!("{why}, PID 1 of a namespace with {n} process(es), in no ledger"), errno: None };
        cands.push((lo, Candidate::Process { init_pid, start, pidns }, dated(String::new(), Some(age))));
    }
    let all_links = links::list().unwrap_or_default();
    // Deleting one end of a veth pair deletes the other: an unledgered end whose peer is ledgered (both
    // ends on the host while a tool sets the pair up) belongs to that session.
    let peer_claimed = |l: &links::Link, claimed: &BTreeSet<String>| {
        l.peer_here.and_then(|p| all_links.iter().find(|o| o.index == p)).is_some_and(|o| claimed.contains(&o.name))
    };
    for l in &all_links {
        if l.name.starts_with(crate::state::NAME_PREFIX) && !k.links.contains(&l.name) && !peer_claimed(l, &k.links) {
            let lo = Leftover { kind: LeftoverKind::Link, name: l.name.clone(), note: format!("named {}*, in no ledger", crate::state::NAME_PREFIX), errno: None };
            let age = dated(format!("link:{}:{}", l.name, l.index), None);
            cands.push((lo, Candidate::Link(l.name.clone()), age));
        }
    }
    let root = crate::state::state_root();
    let mut mps: Vec<crate::mountinfo::Mount> = crate::mountinfo::read().unwrap_or_default();
    mps.sort_by_key(|m| std::cmp::Reverse(m.mount_point.components().count()));
    for m in mps {
        let p = &m.mount_point;
        if p == &root || !p.starts_with(&root) || k.mounts.contains(p) || k.dirs.iter().any(|d| p.starts_with(d)) {
            continue;
        }
        let lo = Leftover { kind: LeftoverKind::Mount, name: p.display().to_string(), note: format!("below the state root {}, in no ledger", root.display()), errno: None };
        let age = dated(format!("mount:{}:{}", m.id, p.display()), None);
        cands.push((lo, Candidate::Mount(p.clone()), age));
    }
    for parent in crate::destroy::cgroup_parents() {
        let Ok(rd) = std::fs::read_dir(&parent) else { continue };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if k.cgroups.contains(&p) || k.ids.contains(&name) {
                continue;
            }
            let lo = Leftover { kind: LeftoverKind::Cgroup, name: p.display().to_string(), note: format!("below {}, in no ledger", parent.display()), errno: None };
            let age = dated(format!("cgroup:{}", p.display()), None);
            cands.push((lo, Candidate::Cgroup(p), age));
        }
    }
    for e in std::fs::read_dir(root.join("slots")).into_iter().flatten().flatten() {
        let p = e.path();
        if k.slots.contains(&p) {
            continue;
        }
        let holder = std::fs::read_to_string(&p).unwrap_or_default();
        // The slot file names its session; one whose session still has a directory is being set up.
        if !holder.is_empty() && k.ids.contains(holder.trim()) {
            continue;
        }
        let lo = Leftover { kind: LeftoverKind::Slot, name: p.display().to_string(), note: "an address slot in no ledger".into(), errno: None };
        let age = dated(format!("slot:{}", p.display()), None);
        cands.push((lo, Candidate::Slot(p), age));
    }

    // A session's policy table is made after its Egress resource is ledgered: one that no ledger names
    // was left by a ledger lost or removed by hand. Its removal takes its rules and routes with it (its
    // resolver is only known through the lost ledger's state directory).
    for slot in crate::net::egress::live_tables() {
        if k.egress.contains(&slot) {
            continue;
        }
        let name = format!("inet {}", crate::net::egress::table_name(slot));
        let lo = Leftover { kind: LeftoverKind::Egress, name: name.clone(), note: "a session's network policy table in no ledger".into(), errno: None };
        let age = dated(format!("egress:{slot}"), None);
        cands.push((lo, Candidate::Egress(slot), age));
    }
    // A checkpoint is written as `<checkpoint root>/<id>.partial` and renamed when complete; one that no
    // ledger names any more is what a dump killed midway left (it may hold hundreds of MiB of images).
    for e in std::fs::read_dir(crate::state::checkpoint_root()).into_iter().flatten().flatten() {
        let p = e.path();
        if !e.file_type().is_ok_and(|t| t.is_dir()) || p.extension().is_none_or(|x| x != "partial") || k.dir_res.contains(&p) {
            continue;
        }
        let lo = Leftover { kind: LeftoverKind::Checkpoint, name: p.display().to_string(), note: "an unfinished checkpoint in no ledger".into(), errno: None };
        let age = dated(String::new(), Some(mtime_age(&p, now)));
        cands.push((lo, Candidate::Partial(p), age));
    }
    // A checkpoint's mapped files (crate::mapped) live beside the checkpoint root, named by its id: a
    // `.partial` no ledger names is a dump's that was killed, and one whose checkpoint is gone (removed
    // with `rm -r`) is kept by nothing.
    let checkpoints = crate::state::checkpoint_root();
    for e in std::fs::read_dir(crate::mapped::mapped_root()).into_iter().flatten().flatten() {
        let p = e.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()).map(str::to_string) else { continue };
        let id = name.strip_suffix(".partial").unwrap_or(&name);
        if !e.file_type().is_ok_and(|t| t.is_dir()) || crate::state::check_checkpoint_id(id).is_err() || k.dir_res.contains(&p) {
            continue;
        }
        // Judged only against this sweep's checkpoint root (DRUMS_CHECKPOINT_DIR may name another).
        if crate::mapped::owner_of(&p) != Some(checkpoints.join(id)) {
            continue;
        }
        let note = if name.ends_with(".partial") {
            "unfinished mapped files in no ledger"
        } else if checkpoints.join(id).exists() || checkpoints.join(format!("{id}.partial")).exists() {
            continue;
        } else {
            "mapped files of a checkpoint that is gone"
        };
        let lo = Leftover { kind: LeftoverKind::Checkpoint, name: p.display().to_string(), note: note.into(), errno: None };
        let age = dated(String::new(), Some(mtime_age(&p, now)));
        cands.push((lo, Candidate::Partial(p), age));
    }

    // Processes first: a killed PID namespace releases the mounts, links and cgroups it held.
    cands.sort_by_key(|(_, c, _)| match c {
        Candidate::Process { .. } => 0,
        Candidate::Mount(_) => 1,
        Candidate::Link(_) => 2,
        Candidate::Cgroup(_) => 3,
        Candidate::Slot(_) => 4,
        Candidate::Partial(_) => 5,
        Candidate::Egress(_) => 2,
    });
    // Ledgers again, right before acting: anything a tool ledgered since the first read is not ours.
    let fresh = if dry || cands.is_empty() { None } else { Some(claimed()) };
    for (mut lo, c, age) in cands {
        out.found.push(lo.clone());
        if age < grace {
            lo.note.push_str(&format!("; unledgered for {age:.0} s, less than the grace period"));
            out.waiting.push(lo);
            continue;
        }
        if let Some(l) = k.not_understood.first() {
            lo.note.push_str(&format!("; left: {} holds a line this sweep does not understand, which may claim it", l.display()));
            out.waiting.push(lo);
            continue;
        }
        if let Some(f) = &fresh {
            let now_claimed = match &c {
                Candidate::Process { pidns, init_pid, .. } => f.pidns.contains(pidns) || made_by(*init_pid, &f.creators),
                Candidate::Link(n) => f.links.contains(n) || all_links.iter().any(|l| &l.name == n && peer_claimed(l, &f.links)),
                Candidate::Mount(p) => f.mounts.contains(p) || f.dirs.iter().any(|d| p.starts_with(d)),
                Candidate::Cgroup(p) => f.cgroups.contains(p) || p.file_name().is_some_and(|n| f.ids.contains(&*n.to_string_lossy())),
                Candidate::Slot(p) => f.slots.contains(p),
                Candidate::Partial(p) => f.dir_res.contains(p),
                Candidate::Egress(slot) => f.egress.contains(slot),
            };
            if now_claimed {
                continue;
            }
        }
        if dry {
            out.planned.push(lo);
            continue;
        }
        let r: std::result::Result<String, (String, Option<i32>)> = match &c {
            Candidate::Process { init_pid, start, .. } => crate::destroy::kill(*init_pid, *start, true, opts.destroy.kill_wait)
                .map(|d| d.note().unwrap_or_else(|| "killed with its PID namespace".into()))
                .map_err(|f| (f.reason, f.errno)),
            Candidate::Link(n) => match links::delete(n) {
                Ok(true) => Ok("deleted".into()),
                Ok(false) => Ok("already gone".into()),
                Err(e) => Err((format!("link {n}: delete: {e}"), e.raw_os_error())),
            },
            Candidate::Mount(p) => match removal::unmount_tree(p, opts.destroy.busy_wait) {
                Ok(removal::Unmounted::Lazy) => Ok("still busy after the retries: detached lazily (MNT_DETACH)".into()),
                Ok(_) => Ok("unmounted".into()),
                Err((e, at)) => Err((format!("{}: unmount: {e}", at.display()), e.raw_os_error())),
            },
            Candidate::Cgroup(p) => crate::destroy::remove_cgroup(p).map(|_| "removed".into()).map_err(|f| (f.reason, f.errno)),
            Candidate::Egress(slot) => {
                let res = crate::net::egress::resource(*slot, Path::new("/nonexistent"));
                // Its auditor too, found by its slot (its pid file was in the lost state directory): left
                // running, it would hold the slot's log groups and the next session there could not audit.
                let stale = crate::net::audit::kill_stale(*slot, Path::new("/nonexistent/audit.pid"));
                crate::net::egress::remove(&res)
                    .map(|_| if stale > 0 { format!("removed with its rules, routes and {stale} stale auditor(s)") } else { "removed with its rules and routes".into() })
                    .map_err(|e| (e.to_string(), None))
            }
            Candidate::Partial(p) => match removal::remove_tree(p) {
                Ok(true) => Ok("removed".into()),
                Ok(false) => Ok("already gone".into()),
                Err(m) => Err((m, None)),
            },
            Candidate::Slot(p) => match std::fs::remove_file(p) {
                Ok(()) => Ok("removed".into()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok("already gone".into()),
                Err(e) => Err((format!("{}: remove: {e}", p.display()), e.raw_os_error())),
            },
        };
        match r {
            Ok(how) => {
                lo.note.push_str(&format!("; {how}"));
                out.removed.push(lo);
            }
            Err((why, errno)) => {
                lo.note.push_str(&format!("; not removed: {why}"));
                lo.errno = errno;
                out.left.push(lo);
            }
        }
    }
    if !dry {
        // Keys not seen this time are dropped: an object that went away and came back starts over.
        store_seen(&seen);
    }
}

/// Whether `pid` descends from one of `creators`: a restore's tree is CRIU's child, and CRIU the child of
/// the drums-restore that holds the session in the restoring phase until it has ledgered the init.
fn made_by(pid: i32, creators: &BTreeSet<i32>) -> bool {
    let mut p = pid;
    for _ in 0..16 {
        let Some(pp) = crate::proc::ppid(p) else { return false };
        if creators.contains(&pp) {
            return true;
        }
        if pp <= 1 {
            return false;
        }
        p = pp;
    }
    false
}

/// Seconds since a process started, from its start time in clock ticks after boot.
fn process_age(start_ticks: u64) -> f64 {
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime").ok().and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap_or(0.0);
    uptime - start_ticks as f64 / hz
}
