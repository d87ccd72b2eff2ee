//! Destroying a session from its ledger alone, and sweeping away what crashed runs left behind.
//!
//! `destroy` reads `<state_dir>/ledger.jsonl` and removes every resource created and not yet released, in
//! an order that lets each step succeed: processes (a session's init takes its whole PID namespace with
//! it), then mounts deepest first, links, cgroup directories, slots, directories, and last the state
//! directory with the ledger. Each resource is released in the ledger as soon as it is gone, so a destroy
//! killed midway resumes where it stopped. Anything already gone counts as removed: destroying twice is
//! not an error. Whatever could not be removed is reported with its reason, and the state directory and
//! ledger are then kept, so that a later sweep can try again.
//!
//! `sweep` (the cron mode of drums-sweep) decides which sessions are orphans and which unledgered objects
//! carry Drums' names; it calls `destroy` for the former. `request` is what drums-sweep does with its
//! arguments.

pub mod inventory;
mod links;
pub mod request;
pub mod sweep;

pub use links::{list as list_links, Link};

use crate::error::{Error, Result};
use crate::ledger::{Contents, Entry, Ledger, Resource};
use crate::removal;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a destroy behaves.
#[derive(Debug, Clone)]
pub struct DestroyOptions {
    /// Also remove checkpoint images the ledger lists (kept by default: they outlive sessions).
    pub remove_images: bool,
    /// Only say what would be done.
    pub dry_run: bool,
    /// How long to wait for a killed PID namespace to empty.
    pub kill_wait: Duration,
    /// How long to retry a busy unmount before giving up (the mount is then detached lazily and reported).
    /// Cgroup removal has its own rule: drums::cgroup::rmdir_when_left.
    pub busy_wait: Duration,
}

impl Default for DestroyOptions {
    fn default() -> Self {
        DestroyOptions { remove_images: false, dry_run: false, kill_wait: Duration::from_secs(10), busy_wait: Duration::from_secs(2) }
    }
}

/// One resource in a report, with what happened to it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Item {
    #[serde(flatten)]
    pub res: Resource,
    /// How it went: "already gone", "detached lazily (busy)", why it was kept, or why it is left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The errno of the failure, for a resource left behind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno: Option<i32>,
}

impl Item {
    fn new(res: Resource, note: Option<String>) -> Item {
        Item { res, note, errno: None }
    }
}

crate::record_type!(DestroyType = "destroy");

/// What a destroy found, removed, kept and could not remove.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DestroyReport {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: DestroyType,
    /// The session id from the ledger's owner entry; null when there was no readable ledger.
    pub session: Option<String>,
    pub state_dir: PathBuf,
    pub dry_run: bool,
    /// Resources the ledger listed as created and not released.
    pub found: Vec<Resource>,
    /// With --dry-run: what would be removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planned: Vec<Item>,
    pub removed: Vec<Item>,
    /// Checkpoint images, kept unless asked.
    pub kept: Vec<Item>,
    /// What could not be removed, with the reason.
    pub left: Vec<Item>,
    /// Mounts that stayed busy and were detached with MNT_DETACH.
    pub lazy_unmounts: Vec<PathBuf>,
    /// Whether the state directory (and the ledger in it) is gone now.
    pub state_dir_removed: bool,
    /// Why the state directory was kept, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_dir_note: Option<String>,
    /// Ledger lines that did not parse (a torn last line after a crash).
    pub skipped_ledger_lines: usize,
    /// Why nothing was done: the ledger holds a line this version does not understand (drums-sweep
    /// prints this report for such a session, then exits NOT_UNDERSTOOD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl DestroyReport {
    fn new(state_dir: &Path, dry_run: bool) -> DestroyReport {
        DestroyReport {
            drums: crate::record::VERSION,
            kind: DestroyType::Tag,
            session: None,
            state_dir: state_dir.to_path_buf(),
            dry_run,
            found: vec![],
            planned: vec![],
            removed: vec![],
            kept: vec![],
            left: vec![],
            lazy_unmounts: vec![],
            state_dir_removed: false,
            state_dir_note: None,
            skipped_ledger_lines: 0,
            refused: None,
        }
    }
    /// The report of a session `destroy` refused (`why`: its error), naming what its ledger holds.
    pub fn refused(state_dir: &Path, why: &Error) -> DestroyReport {
        let mut rep = DestroyReport::new(state_dir, false);
        if let Ok(c) = crate::ledger::read_file(&state_dir.join(crate::ledger::FILE_NAME)) {
            rep.session = c.owner().map(|o| o.0.to_string());
            rep.found = c.live();
            rep.skipped_ledger_lines = c.skipped_lines;
        }
        rep.refused = Some(why.to_string());
        rep
    }
    /// Nothing was left behind (kept images do not count: they are kept on purpose).
    pub fn clean(&self) -> bool {
        self.left.is_empty() && (self.state_dir_removed || self.dry_run)
    }
}

/// Refuse any directory but a session's own state directory, `$DRUMS_STATE_DIR/sessions/<session id>`.
/// A directory without a ledger is removed whole, so being merely below a Drums root is not enough: the
/// sessions root, the slots directory or a checkpoint would go with everything in it.
pub fn check_state_dir(state_dir: &Path) -> Result<()> {
    let bad = |m: String| Error::bad_field("state_dir", m);
    session_id_of(state_dir, &crate::state::sessions_root()).map_err(bad)?;
    // The parents may still be symbolic links leading out of the state root.
    removal::confined(state_dir).map_err(bad)?;
    match std::fs::symlink_metadata(state_dir) {
        Ok(m) if !m.is_dir() => Err(bad(format!("{} is not a directory (a symbolic link or a file): refused", state_dir.display()))),
        _ => Ok(()),
    }
}

/// The session id that names `dir`, when `dir` is exactly `<sessions_root>/<id>`, judged on the words of
/// the path (a `..` anywhere never matches).
fn session_id_of<'a>(dir: &'a Path, sessions_root: &Path) -> Result<&'a str, String> {
    let refused = || format!("{} is not a session's state directory ({}/<session id>): refused", dir.display(), sessions_root.display());
    if dir.parent() != Some(sessions_root) || dir.components().any(|c| c == std::path::Component::ParentDir) {
        return Err(refused());
    }
    let id = dir.file_name().and_then(|n| n.to_str()).ok_or_else(refused)?;
    crate::state::check_session_id(id).map_err(|m| format!("{}: {m}", refused()))?;
    Ok(id)
}

/// Destroy session `id` from its ledger, as drums-sweep does with its record (under the sweep lock,
/// shared), and insist that nothing is left: what a caller does with a sibling it made and cannot hand
/// out (the pool, drums-restore --ready).
pub fn destroy_session(id: &str) -> Result<()> {
    let _lock = sweep::lock(false, true)?;
    let r = destroy(&crate::state::session_dir(id), &DestroyOptions::default())?;
    if r.clean() {
        Ok(())
    } else {
        Err(Error::failed(format!("destroying session {id} left {} resource(s) (drums-sweep --orphans retries)", r.left.len())))
    }
}

/// Destroy the session whose state directory is `state_dir`, from its ledger alone. A ledger holding a
/// line this version does not understand is refused (Error::NotUnderstood) before anything is done.
pub fn destroy(state_dir: &Path, opts: &DestroyOptions) -> Result<DestroyReport> {
    check_state_dir(state_dir)?;
    let mut rep = DestroyReport::new(state_dir, opts.dry_run);
    if !state_dir.exists() {
        rep.state_dir_removed = true;
        rep.state_dir_note = Some("already gone".into());
        return Ok(rep);
    }
    let ledger_path = state_dir.join(crate::ledger::FILE_NAME);
    let (ledger, contents) = if ledger_path.is_file() {
        let l = Ledger::open(state_dir)?;
        let c = l.read()?;
        c.understood(&ledger_path)?;
        (Some(l), c)
    } else {
        (None, Contents::default())
    };
    rep.session = contents.owner().map(|o| o.0.to_string());
    rep.skipped_ledger_lines = contents.skipped_lines;
    let live = live_with_time(&contents);
    rep.found = live.iter().map(|(r, _)| r.clone()).collect();

    if !opts.dry_run {
        if let Some(l) = &ledger {
            // Tells a concurrent sweep that someone is at work here; advisory, so a failure is not fatal.
            let _ = l.phase("destroying");
        }
    }

    let mut ordered = live;
    // Within a group, deepest first (an outer mount or directory cannot go while an inner one is there),
    // then newest first (an overlay goes before the tmpfs that holds its upper layer).
    ordered.sort_by(|(a, ta), (b, tb)| order(a).cmp(&order(b)).then(depth(b).cmp(&depth(a))).then(tb.total_cmp(ta)));

    if !opts.dry_run {
        thaw(&ordered);
        for (pid, start_time) in crate::criu::kill_stray_restores(state_dir) {
            let res = Resource::Process { pid, start_time, role: "criu-restore".into(), init: false };
            rep.removed.push(Item::new(res, Some("unledgered task of a restore killed midway".into())));
        }
    }
    for (res, t) in ordered {
        if opts.dry_run {
            let note = match &res {
                Resource::Image { .. } if !opts.remove_images => Some("would be kept".to_string()),
                _ => None,
            };
            rep.planned.push(Item::new(res, note));
            continue;
        }
        if let Resource::Image { path } = &res {
            if !opts.remove_images {
                let note = if path.starts_with(state_dir) { "kept, inside the state directory" } else { "kept (images are removed only when asked)" };
                rep.kept.push(Item::new(res.clone(), Some(note.into())));
                continue;
            }
        }
        match remove(&res, t, state_dir, opts) {
            Ok(done) => {
                if let Done::Lazy(p) = &done {
                    rep.lazy_unmounts.push(p.clone());
                }
                let mut note = done.note();
                if let Some(l) = &ledger {
                    if let Err(e) = l.release(res.clone()) {
                        if l.path().exists() {
                            rep.left.push(Item { res: res.clone(), note: Some(format!("removed, but the ledger could not record it: {e}")), errno: None });
                            continue;
                        }
                        // Someone else destroyed the session at the same time (a tool cleaning up after itself):
                        // the resource is gone all the same.
                        note = Some(format!("{}; the ledger went away meanwhile (destroyed concurrently)", note.unwrap_or_else(|| "removed".into())));
                    }
                }
                rep.removed.push(Item::new(res, note));
            }
            Err(f) => rep.left.push(Item { res, note: Some(f.reason), errno: f.errno }),
        }
    }

    // Mounts below the state directory are the session's whether or not they reached the ledger (a mount
    // that propagated in, or a ledger that was lost): they would stop the directory's removal.
    for m in removal::mounts_below(state_dir).unwrap_or_default() {
        let res = Resource::Mount { path: m.mount_point.clone() };
        if opts.dry_run {
            if !rep.planned.iter().any(|i| i.res == res) {
                rep.planned.push(Item::new(res, Some("not in the ledger; below the state directory".into())));
            }
            continue;
        }
        match removal::unmount_tree(&m.mount_point, opts.busy_wait) {
            Ok(u) => {
                if u == removal::Unmounted::Lazy {
                    rep.lazy_unmounts.push(m.mount_point.clone());
                }
                if u != removal::Unmounted::AlreadyGone {
                    rep.removed.push(Item::new(res, Some("not in the ledger; below the state directory".into())));
                }
            }
            Err((e, p)) => {
                let f = Fail::io("unmount", &p, &e);
                rep.left.push(Item { res, note: Some(f.reason), errno: f.errno });
            }
        }
    }

    if opts.dry_run {
        return Ok(rep);
    }
    if !rep.left.is_empty() {
        rep.state_dir_note = Some(format!("kept with its ledger: {} resource(s) left; a later sweep retries", rep.left.len()));
        return Ok(rep);
    }
    if let Some(k) = rep.kept.iter().find(|k| matches!(&k.res, Resource::Image { path } if path.starts_with(state_dir))) {
        rep.state_dir_note = Some(format!("kept: it holds the checkpoint image {:?}; destroy with images removed to remove it", k.res));
        return Ok(rep);
    }
    match removal::remove_tree(state_dir) {
        Ok(_) => rep.state_dir_removed = true,
        Err(m) => rep.state_dir_note = Some(m),
    }
    Ok(rep)
}

/// Resources created and not released, each with the time of its (last) create entry.
fn live_with_time(c: &Contents) -> Vec<(Resource, f64)> {
    let mut live: Vec<(Resource, f64)> = Vec::new();
    for e in &c.entries {
        match e {
            Entry::Create { res, t } => live.push((res.clone(), *t)),
            Entry::Release { res, .. } => {
                if let Some(i) = live.iter().rposition(|(r, _)| r == res) {
                    live.remove(i);
                }
            }
            _ => {}
        }
    }
    live
}

fn order(r: &Resource) -> u8 {
    match r {
        Resource::Process { init: true, .. } => 0,
        Resource::Process { .. } => 1,
        Resource::Mount { .. } => 2,
        Resource::Link { .. } => 3,
        Resource::Egress { .. } => 3,
        Resource::Cgroup { .. } => 4,
        Resource::Slot { .. } => 5,
        Resource::Dir { .. } => 6,
        Resource::Image { .. } => 7,
        // Free again once every process that ran with its ids is gone (the processes come first).
        Resource::IdRange { .. } => 8,
    }
}

fn depth(r: &Resource) -> usize {
    match r {
        Resource::Mount { path } | Resource::Dir { path } | Resource::Cgroup { path } => path.components().count(),
        _ => 0,
    }
}

enum Done {
    Removed,
    Gone(String),
    Lazy(PathBuf),
}
impl Done {
    fn note(&self) -> Option<String> {
        match self {
            Done::Removed => None,
            Done::Gone(why) => Some(why.clone()),
            Done::Lazy(_) => Some("still busy after the retries: detached lazily (MNT_DETACH)".into()),
        }
    }
}

struct Fail {
    reason: String,
    errno: Option<i32>,
}
impl Fail {
    fn msg(reason: impl Into<String>) -> Fail {
        Fail { reason: reason.into(), errno: None }
    }
    fn io(what: &str, path: &Path, e: &std::io::Error) -> Fail {
        Fail { reason: format!("{}: {what}: {e}", path.display()), errno: e.raw_os_error() }
    }
}

fn remove(res: &Resource, created_t: f64, state_dir: &Path, opts: &DestroyOptions) -> Result<Done, Fail> {
    match res {
        Resource::Process { pid, start_time, init, .. } => kill(*pid, *start_time, *init, opts.kill_wait),
        Resource::Mount { path } => {
            removal::confined(path).map_err(Fail::msg)?;
            match removal::unmount_tree(path, opts.busy_wait) {
                Ok(removal::Unmounted::Clean) => Ok(Done::Removed),
                Ok(removal::Unmounted::Lazy) => Ok(Done::Lazy(path.clone())),
                Ok(removal::Unmounted::AlreadyGone) => Ok(Done::Gone("not mounted".into())),
                Err((e, p)) => Err(Fail::io("unmount", &p, &e)),
            }
        }
        Resource::Link { name } => {
            if !name.starts_with(crate::state::NAME_PREFIX) {
                return Err(Fail::msg(format!("link {name}: not a Drums name (drums…): refused")));
            }
            // Slot numbers, and so link names, are reused: if a later session claims this name, the link
            // that is there now is theirs and ours is long gone.
            if let Some(other) = claimed_later(res, created_t, state_dir) {
                return Ok(Done::Gone(format!("the name now belongs to session {other}")));
            }
            match links::delete(name) {
                Ok(true) => Ok(Done::Removed),
                Ok(false) => Ok(Done::Gone("no such link".into())),
                Err(e) => Err(Fail { reason: format!("link {name}: delete: {e}"), errno: e.raw_os_error() }),
            }
        }
        Resource::Egress { .. } => {
            // Named by a slot, which is reused: a later session's is not ours to remove.
            if let Some(other) = claimed_later(res, created_t, state_dir) {
                return Ok(Done::Gone(format!("the slot's egress state now belongs to session {other}")));
            }
            crate::net::egress::remove(res).map(|_| Done::Removed).map_err(|e| Fail { errno: None, reason: e.to_string() })
        }
        Resource::Cgroup { path } => {
            if !path.exists() {
                return Ok(Done::Gone("no such cgroup directory".into()));
            }
            crate::cgroup::remove_path(path).map(|_| Done::Removed).map_err(|e| Fail { errno: errno_of(&e), reason: e.to_string() })
        }
        Resource::Slot { path, .. } => {
            removal::confined(path).map_err(Fail::msg)?;
            if let Some(other) = claimed_later(res, created_t, state_dir) {
                return Ok(Done::Gone(format!("the slot now belongs to session {other}")));
            }
            match std::fs::remove_file(path) {
                Ok(()) => Ok(Done::Removed),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Done::Gone("no slot file".into())),
                Err(e) => Err(Fail::io("remove slot file", path, &e)),
            }
        }
        // Nothing on the host to remove: the user namespace ended with the session's processes, and the
        // files its ids owned were on the session's tmpfs. Releasing the line frees the range.
        Resource::IdRange { .. } => Ok(Done::Removed),
        Resource::Dir { path } | Resource::Image { path } => match removal::remove_tree(path) {
            Ok(true) => Ok(Done::Removed),
            Ok(false) => Ok(Done::Gone("no such directory".into())),
            Err(m) => Err(Fail::msg(m)),
        },
    }
}

/// Thaw the session's cgroups before its processes are killed: a frozen task does not act on SIGKILL
/// until it is thawed, and a dump killed midway (CRIU freezes through the freezer cgroup) leaves the session
/// frozen. Best effort: a cgroup that is not there or not a freezer has nothing to thaw.
fn thaw(resources: &[(Resource, f64)]) {
    for (r, _) in resources {
        if let Resource::Cgroup { path } = r {
            if cgroup_confined(path).is_ok() {
                let _ = std::fs::write(path.join("freezer.state"), "THAWED");
                let _ = std::fs::write(path.join("cgroup.freeze"), "0");
            }
        }
    }
}

/// Whether two resources name the same host object: a slot's egress state is named by the slot alone.
fn same_name(a: &Resource, b: &Resource) -> bool {
    match (a, b) {
        (Resource::Egress { slot: x, .. }, Resource::Egress { slot: y, .. }) => x == y,
        _ => a == b,
    }
}

/// The id of another session whose ledger created an equal resource after `t` and still holds it.
fn claimed_later(res: &Resource, t: f64, mine: &Path) -> Option<String> {
    let rd = std::fs::read_dir(crate::state::sessions_root()).ok()?;
    for e in rd.flatten() {
        let dir = e.path();
        if dir == mine {
            continue;
        }
        let Ok(c) = crate::ledger::read_file(&dir.join(crate::ledger::FILE_NAME)) else { continue };
        if live_with_time(&c).iter().any(|(r, t2)| same_name(r, res) && *t2 > t) {
            return Some(c.owner().map(|o| o.0.to_string()).unwrap_or_else(|| dir.display().to_string()));
        }
    }
    None
}

/// SIGKILL a process named by pid and start time, through a pidfd so that a reused pid is never hit.
/// For a session's init, wait until its whole PID namespace is empty (zombies of unrelated parents count
/// as gone: they hold no resources but a pid).
fn kill(pid: i32, start: u64, init: bool, wait: Duration) -> Result<Done, Fail> {
    let proc_path = PathBuf::from(format!("/proc/{pid}"));
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return if e.raw_os_error() == Some(libc::ESRCH) { Ok(Done::Gone("process already gone".into())) } else { Err(Fail::io("pidfd_open", &proc_path, &e)) };
    }
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    if crate::proc::start_time(pid) != Some(start) {
        return Ok(Done::Gone("process already gone (its pid now names another process)".into()));
    }
    if !crate::proc::alive(pid, start) {
        return Ok(Done::Gone("process already exited (zombie)".into()));
    }
    // Read before the kill: once the init is gone its namespace can no longer be named through it.
    let pidns = if init { crate::proc::ns_inode(pid, "pid").ok() } else { None };
    if pidns.is_some() && pidns == crate::proc::ns_inode(std::process::id() as i32, "pid").ok() {
        // Waiting for "its namespace" to empty would mean waiting for the whole host.
        return Err(Fail::msg(format!("pid {pid} is listed as a session init but lives in the host's PID namespace: not killed")));
    }
    let r = unsafe { libc::syscall(libc::SYS_pidfd_send_signal, std::os::fd::AsRawFd::as_raw_fd(&fd), libc::SIGKILL, std::ptr::null::<libc::siginfo_t>(), 0) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(Fail::io("kill", &proc_path, &e));
        }
    }
    let deadline = Instant::now() + wait;
    loop {
        let me_alive = crate::proc::alive(pid, start);
        let others: Vec<i32> = match pidns {
            Some(ns) => crate::proc::pids_in_pidns(ns).into_iter().filter(|p| !matches!(crate::proc::state(*p), Some('Z') | Some('X') | None)).collect(),
            None => vec![],
        };
        if !me_alive && others.is_empty() {
            return Ok(Done::Removed);
        }
        if Instant::now() >= deadline {
            return Err(Fail {
                reason: format!("pid {pid}: still alive {:.1} s after SIGKILL (alive: {me_alive}, processes left in its PID namespace: {others:?})", wait.as_secs_f64()),
                errno: None,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The cgroup hierarchies mounted on this machine (v1 and v2), as mount points, as drums::cgroup finds them.
pub fn cgroup_mounts() -> Vec<PathBuf> {
    crate::cgroup::detect::mounts().map(|m| m.v1.into_iter().chain(m.v2).map(|m| m.path).collect()).unwrap_or_default()
}

/// Every `drums` parent directory there may be: `<mount>/drums` in each v1 hierarchy, `<base>/drums` in
/// the v2 one (cgroup::detect::v2_base; none when the base cannot be had: then Drums made nothing there).
pub fn cgroup_parents() -> Vec<PathBuf> {
    let Ok(m) = crate::cgroup::detect::mounts() else { return vec![] };
    let v1 = m.v1.iter().map(|m| m.path.join(crate::state::NAME_PREFIX));
    let v2 = m.v2.iter().filter_map(|m| crate::cgroup::detect::v2_base_dir(m).ok()).map(|b| b.join(crate::state::NAME_PREFIX));
    v1.chain(v2).collect()
}

/// A cgroup directory is Drums' when it lies below a `drums` directory of a mounted hierarchy.
fn cgroup_confined(path: &Path) -> Result<(), String> {
    let ok = cgroup_mounts().iter().any(|m| {
        path.strip_prefix(m).ok().is_some_and(|rel| {
            let comps: Vec<_> = rel.components().collect();
            comps.len() >= 2
                && !rel.components().any(|c| c == std::path::Component::ParentDir)
                && comps[..comps.len() - 1].iter().any(|c| c.as_os_str() == crate::state::NAME_PREFIX)
        })
    });
    if ok {
        Ok(())
    } else {
        Err(format!("{}: not below a `drums` directory of a mounted cgroup hierarchy: refused", path.display()))
    }
}

fn errno_of(e: &Error) -> Option<i32> {
    match e {
        Error::Io { source, .. } => source.raw_os_error(),
        Error::WithCleanup { cause, .. } => errno_of(cause),
        _ => None,
    }
}

/// Remove an unledgered cgroup directory and any below it (deepest first), each by the one cgroup removal
/// rule (drums::cgroup::rmdir_when_left); then the `drums` parent if that is now empty. Ledgered session
/// cgroups go through drums::cgroup::remove_path instead, which accepts only `.../drums/<session id>`; a
/// leftover below `drums` may have any name and children of its own.
fn remove_cgroup(path: &Path) -> Result<Done, Fail> {
    cgroup_confined(path).map_err(Fail::msg)?;
    if !path.exists() {
        return Ok(Done::Gone("no such cgroup directory".into()));
    }
    let mut dirs = vec![];
    collect_dirs(path, &mut dirs);
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in &dirs {
        crate::cgroup::rmdir_when_left(d).map_err(|e| Fail { errno: errno_of(&e), reason: e.to_string() })?;
    }
    crate::cgroup::remove_empty_parent(path);
    Ok(Done::Removed)
}

fn collect_dirs(d: &Path, out: &mut Vec<PathBuf>) {
    out.push(d.to_path_buf());
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_session_directory_is_a_state_directory() {
        let root = Path::new("/run/drums/sessions");
        assert_eq!(session_id_of(Path::new("/run/drums/sessions/d-0123abcd"), root), Ok("d-0123abcd"));
        assert_eq!(session_id_of(Path::new("/run/drums/sessions/d-0123abcd/"), root), Ok("d-0123abcd"));
        for refused in [
            "/run/drums/sessions",
            "/run/drums/sessions/",
            "/run/drums/slots",
            "/run/drums/slots/7",
            "/run/drums/pools/c-0123abcd",
            "/var/lib/drums/checkpoints/c-0123abcd",
            "/run/drums/sessions/d-0123abcd/tmpfs",
            "/run/drums/sessions/not-an-id",
            "/run/drums/sessions/D-0123ABCD",
            "/run/drums/sessions/d-",
            "/run/drums/sessions/..",
            "/run/drums/sessions/d-1/..",
            "/run/drums/x/../sessions/d-1",
            "run/drums/sessions/d-1",
        ] {
            assert!(session_id_of(Path::new(refused), root).is_err(), "{refused} must be refused");
        }
    }
}
