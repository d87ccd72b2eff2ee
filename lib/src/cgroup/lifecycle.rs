//! A session's cgroups from creation to removal: create them with their limits, move processes in, make
//! a sibling's before a restore, freeze and thaw, and remove them (after a failure too).

use super::files::{errno, read_procs, CgroupFs, KERNEL};
use super::section::{is_session_cgroup_name, require_section};
use super::{backend_for_new, backend_of, detect, section, Backend, Limits, Section, PARENT, SECTION};
use crate::error::{Error, Result};
use crate::ledger::{Ledger, Resource};
use crate::record::Session;
use serde_json::Map;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long an rmdir that fails with EBUSY is retried while the tasks inside are leaving
/// (`rmdir_when_left`): tasks of a killed session leave their cgroup only when the kernel has finished
/// their exit, a little after SIGKILL.
pub const REMOVE_RETRY: Duration = Duration::from_secs(10);
/// How long freeze and thaw wait for the kernel to report the new state.
pub const FREEZE_TIMEOUT: Duration = Duration::from_secs(10);


/// Create the session's cgroups with `limits`, read them back, and move the session's processes in (when
/// the record has namespaces; otherwise call `enter` for the init as soon as it exists). Writes the
/// `cgroup` section. On any failure every directory made is removed again and released in the ledger.
pub fn create(session: &mut Session, limits: &Limits) -> Result<()> {
    if section(session)?.is_some() {
        return Err(Error::bad_field(SECTION, "the session already has cgroups (drums-cgroup remove first)"));
    }
    let layout = detect::layout()?;
    let (b, proc_paths) = backend_for_new(&layout, &session.id)?;
    create_on(session, limits, b.as_ref(), proc_paths)
}

/// `create` with the backend `b` made (on the kernel, or on a fake in unit tests): for each directory the
/// ledger line, then the parent, then mkdir; the limits; their read-back; the processes moved in. On a
/// failure the directories made are removed in reverse order, each released in the ledger after its rmdir.
pub(super) fn create_on(session: &mut Session, limits: &Limits, b: &dyn Backend, proc_paths: std::collections::BTreeMap<String, String>) -> Result<()> {
    let ledger = Ledger::open(&session.state_dir)?;
    let mut ledgered: Vec<PathBuf> = Vec::new();
    let result = (|| -> Result<Section> {
        for dir in b.dirs() {
            ledger.create_res(Resource::Cgroup { path: dir.clone() })?;
            ledgered.push(dir.clone());
            make_session_dir(b, &dir)?;
        }
        b.apply(limits)?;
        let rb = b.read_back();
        let bad = b.mismatches(limits, &rb);
        if !bad.is_empty() {
            return Err(Error::failed(format!(
                "limits read back from the kernel differ from the request in {}: read back {}",
                bad.join(", "),
                rb.clone().into_value()
            )));
        }
        let moved = match &session.ns {
            Some(ns) => Some(move_processes(b, ns)?),
            None => None,
        };
        Ok(Section {
            version: b.version(),
            paths: b.paths().clone(),
            proc_paths,
            requested: limits.clone(),
            read_back: rb,
            applied: true,
            processes_moved: moved,
            created_at: crate::state::now(),
            extra: Map::new(),
        })
    })();
    match result {
        Ok(sec) => {
            session.cgroup = Some(sec);
            Ok(())
        }
        Err(e) => {
            let mut cleanup = Ok(());
            for dir in ledgered.iter().rev() {
                // Made by this call, under the backend's own names: removed by the one removal rule.
                let r = rmdir_when_left_on(b.fs(), dir).and_then(|_| {
                    remove_empty_parent_on(b.fs(), dir);
                    ledger.release(Resource::Cgroup { path: dir.clone() })
                });
                if cleanup.is_ok() {
                    cleanup = r;
                }
            }
            Err(e.with_cleanup(cleanup))
        }
    }
}

/// mkdir the session directory; a concurrent removal of the shared `drums` parent (the last session of
/// another run going away) shows as ENOENT and is retried.
fn make_session_dir(b: &dyn Backend, dir: &Path) -> Result<()> {
    let mut tries = 0;
    loop {
        b.prepare_parent(dir)?;
        match b.fs().mkdir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 10 => tries += 1,
            Err(e) => return Err(Error::io("create cgroup directory", dir, e)),
        }
    }
}

/// Move every process of the session's PID namespace into its cgroups. The init goes first so that what
/// it forks from then on is born inside; the scan repeats until it finds nobody outside.
fn move_processes(b: &dyn Backend, ns: &crate::record::Namespaces) -> Result<u64> {
    let mine = crate::proc::ns_inode(std::process::id() as i32, "pid")?;
    if ns.inodes.pid == mine {
        return Err(Error::bad_field(
            "ns.inodes.pid",
            "is this tool's own PID namespace (the host's): refusing to move every process of it",
        ));
    }
    if !crate::proc::alive(ns.init_pid, ns.init_start_time) {
        return Err(Error::failed(format!("the session's init (host PID {}) is gone", ns.init_pid)));
    }
    if crate::proc::ns_inode(ns.init_pid, "pid")? != ns.inodes.pid {
        return Err(Error::bad_field("ns.init_pid", "is not in the PID namespace ns.inodes.pid names"));
    }
    let mut moved = 0u64;
    for _round in 0..100 {
        let inside = b.procs_everywhere()?;
        // A process on its way out is skipped: a zombie stays in /proc until its parent reaps it but is in no
        // cgroup.procs, so it would look outside forever (a restored Chromium's child that died at once,
        // its network connections closed by the restore, while the parent was still stopped).
        let mut todo: Vec<i32> =
            crate::proc::pids_in_pidns(ns.inodes.pid).into_iter().filter(|p| !inside.contains(p) && !crate::proc::leaving(*p)).collect();
        if todo.is_empty() {
            return Ok(moved);
        }
        // init first
        todo.sort_by_key(|p| *p != ns.init_pid);
        for pid in todo {
            match b.enter(pid) {
                Ok(()) => moved += 1,
                // exited between the scan and the move
                Err(e) if errno(&e) == Some(libc::ESRCH) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Err(Error::failed("processes of the session kept appearing outside its cgroups after 100 rounds of moves"))
}

/// Put one process into the session's cgroups; a no-op when the record has no cgroup section. For
/// processes that join a session with setns (drums-ns exec) and for an init right after it is cloned.
pub fn enter(session: &Session, pid: i32) -> Result<()> {
    match section(session)? {
        None => Ok(()),
        Some(sec) => backend_of(&sec).enter(pid),
    }
}

/// Move every process of the session's PID namespace in (again): after a restore, or to repair. Records
/// the count in the section's `processes_moved` and returns it.
pub fn enter_all(session: &mut Session) -> Result<u64> {
    let mut sec = require_section(session)?;
    let n = move_processes(backend_of(&sec).as_ref(), session.ns()?)?;
    sec.processes_moved = Some(sec.processes_moved.unwrap_or(0) + n);
    session.cgroup = Some(sec);
    Ok(n)
}

/// For a restore: make the sibling's own cgroups, with `limits`, before CRIU runs (the record must not
/// have `ns` yet: CRIU makes the PID namespace); `criu::CgroupPlacement::of` the section then puts the
/// restored tree into them. After the restore, fill in `ns` and call `enter_all` (it should move nobody;
/// it catches anything CRIU placed elsewhere). If the restore fails, `remove`.
pub fn prepare_restore(sibling: &mut Session, limits: &Limits) -> Result<()> {
    if sibling.ns.is_some() {
        return Err(Error::bad_field("ns", "present before the restore: prepare_restore runs before CRIU makes the session's namespaces"));
    }
    create(sibling, limits)
}

/// The session's freezer cgroup, which a dump freezes the tree through (`criu::Dump::freeze_cgroup`);
/// None without a section or a freezer.
pub fn freezer_dir(section: Option<&Section>) -> Option<PathBuf> {
    backend_of(section?).freezer_dir().map(Path::to_path_buf)
}

/// rmdir one session cgroup directory. Refuses anything not named `.../drums/<id>` on a cgroup file
/// system; an absent directory is success; EBUSY is handled by `rmdir_when_left`. Afterwards the shared
/// `drums` parent is removed too if it became empty (best effort: another session may be using it).
pub fn remove_path(path: &Path) -> Result<()> {
    if !is_session_cgroup_name(path) {
        return Err(Error::bad_input(format!("{}: not a Drums session cgroup (expected .../{PARENT}/<id>)", path.display())));
    }
    let magic = match detect::statfs_magic(path) {
        Ok(m) => m,
        Err(e) if errno(&e) == Some(libc::ENOENT) => return Ok(()),
        Err(e) => return Err(e),
    };
    if !detect::is_cgroup1(magic) && !detect::is_cgroup2(magic) {
        return Err(Error::bad_input(format!("{}: not on a cgroup file system (statfs magic {magic:#x})", path.display())));
    }
    rmdir_when_left(path)?;
    remove_empty_parent(path);
    Ok(())
}

/// rmdir a cgroup directory (absent is success), the one removal rule of every Drums cgroup. rmdir fails
/// with EBUSY while the kernel still counts tasks in the cgroup. Tasks that are leaving (gone, zombies,
/// exiting, with SIGKILL pending, or in a PID namespace whose init is: a session just killed) leave a
/// moment later, so EBUSY is retried while every listed task is leaving (`proc::leaving`), for at most
/// REMOVE_RETRY. A task that is not leaving will not go
/// by waiting: the error comes at once, with errno EBUSY and the processes still inside.
pub(crate) fn rmdir_when_left(path: &Path) -> Result<()> {
    rmdir_when_left_on(&KERNEL, path)
}
pub(super) fn rmdir_when_left_on(fs: &dyn CgroupFs, path: &Path) -> Result<()> {
    let t0 = Instant::now();
    loop {
        match fs.rmdir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && t0.elapsed() < crate::state::scaled(REMOVE_RETRY) && all_leaving(fs, path) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => {
                let left = read_procs(fs, path).map(|v| format!("{v:?}")).unwrap_or_else(|_| "unknown".into());
                return Err(Error::io(format!("remove cgroup (processes still inside: {left})"), path, e));
            }
        }
    }
}

/// Every process `cgroup` lists is leaving (see `rmdir_when_left`); an unreadable list counts as left.
fn all_leaving(fs: &dyn CgroupFs, cgroup: &Path) -> bool {
    read_procs(fs, cgroup).unwrap_or_default().into_iter().all(crate::proc::leaving)
}

/// The `drums` parent of a session cgroup, if it is now empty. Best effort: EBUSY/ENOTEMPTY means other
/// sessions still have their cgroups there.
pub(crate) fn remove_empty_parent(path: &Path) {
    remove_empty_parent_on(&KERNEL, path)
}
fn remove_empty_parent_on(fs: &dyn CgroupFs, path: &Path) {
    if let Some(parent) = path.parent() {
        if parent.file_name().is_some_and(|n| n == PARENT) {
            let _ = fs.rmdir(parent);
        }
    }
}

/// Remove every cgroup of the session: the section's paths and any the ledger holds (a crash between
/// mkdir and writing the record leaves them only there). Each removal is released in the ledger. The
/// section becomes `null`. Removal goes on past a failure; the first failure is returned.
pub fn remove(session: &mut Session) -> Result<()> {
    let mut paths: Vec<PathBuf> = section(session)?.map(|s| s.paths.values().cloned().collect()).unwrap_or_default();
    let ledger = Ledger::open(&session.state_dir).ok();
    let live = match &ledger {
        Some(l) => l.read()?.live_cgroups(),
        None => vec![],
    };
    paths.extend(live.iter().cloned());
    let mut seen = BTreeSet::new();
    paths.retain(|p| seen.insert(p.clone()));
    let mut first: Option<Error> = None;
    for p in &paths {
        let r = remove_path(p).and_then(|_| match (&ledger, live.contains(p)) {
            (Some(l), true) => l.release(Resource::Cgroup { path: p.clone() }),
            _ => Ok(()),
        });
        if let Err(e) = r {
            first.get_or_insert(e);
        }
    }
    match first {
        Some(e) => Err(e),
        None => {
            session.cgroup = None;
            Ok(())
        }
    }
}

/// Freeze every process of the session (for a consistent dump); returns when the kernel reports it frozen.
pub fn freeze(session: &Session) -> Result<()> {
    set_frozen(session, true)
}
pub fn thaw(session: &Session) -> Result<()> {
    set_frozen(session, false)
}
fn set_frozen(session: &Session, frozen: bool) -> Result<()> {
    let sec = require_section(session)?;
    let b = backend_of(&sec);
    let r = b.set_frozen(frozen);
    if r.is_err() && frozen {
        // Never leave a session half frozen by a failed freeze.
        return r.map_err(|e| e.with_cleanup(b.set_frozen(false)));
    }
    r
}
/// The freezer state as the kernel reports it: "frozen", "thawed", "freezing".
pub fn frozen_state(session: &Session) -> Result<String> {
    backend_of(&require_section(session)?).frozen_state()
}
