//! Per-session cgroups on cgroup v1 and v2 behind one interface (`Backend`), the version chosen from what
//! the kernel reports for each mount (detect.rs): create a session's cgroups with CPU, memory and pids
//! limits, move the session's processes in, read every limit back from the kernel into the record, freeze
//! and thaw, sample telemetry, and remove the directories again, in every hierarchy, after a failure too.
//!
//! Names: a session's cgroup is `<hierarchy mount>/drums/<session id>` in each hierarchy used (v1: cpu,
//! cpuacct, memory, pids, freezer; v2: the one cgroup2 mount). The `drums` parent is how the sweep knows an
//! unledgered directory is Drums'; nothing outside it is ever created, written or removed. Every directory
//! is written to the session's ledger before mkdir and released after rmdir.
//!
//! The record's `cgroup` section is documented field by field in docs/record.md.

pub mod detect;
mod v1;
mod v2;

use crate::error::{Error, IoContext, Result};
use crate::ledger::{Ledger, Resource};
use crate::record::Session;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use detect::Layout;

/// The parent directory of every session cgroup, in every hierarchy.
pub const PARENT: &str = crate::state::NAME_PREFIX;
/// The record member this module owns.
pub const SECTION: &str = "cgroup";
/// How long an rmdir that fails with EBUSY is retried while the tasks inside are leaving
/// (`rmdir_when_left`): tasks of a killed session leave their cgroup only when the kernel has finished
/// their exit, a little after SIGKILL.
pub const REMOVE_RETRY: Duration = Duration::from_secs(10);
/// How long freeze and thaw wait for the kernel to report the new state.
pub const FREEZE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

/// The limits every session gets unless told otherwise (drums-cgroup create without options, cold.sh,
/// drums-restore, the pool). The one place these numbers live: the tools and pipelines take them from here.
/// Memory 4 GiB: OSWorld's own VMs (its Docker provider) run the whole Ubuntu desktop, LibreOffice and
/// Chrome included, in 4 GiB; a session here peaks at 122 MiB at ready and at 969 MiB with ten tabs of
/// 64 MiB each. Tasks 4096: a session runs about 77 at ready and 212 with those ten tabs. Measured and
/// argued in drums(7), "Default limits". CPUs 2: the shape of the source report's sessions.
pub const DEFAULT_CPUS: f64 = 2.0;
pub const DEFAULT_MEMORY_BYTES: u64 = 4 << 30;
/// DEFAULT_MEMORY_BYTES as --memory takes it, which --help and the man page show (a test ties the two).
pub const DEFAULT_MEMORY: &str = "4G";
pub const DEFAULT_PIDS: u64 = 4096;

/// The limits asked for, in the kernel's own units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub cpu_quota_us: u64,
    pub cpu_period_us: u64,
    pub memory_bytes: u64,
    pub pids_max: u64,
}

impl Limits {
    /// The CFS period both versions default to.
    pub const PERIOD_US: u64 = 100_000;

    /// `cpus` CPUs' worth of time per period, `memory_bytes` of memory (swap included: none beyond it),
    /// at most `pids_max` tasks.
    pub fn new(cpus: f64, memory_bytes: u64, pids_max: u64) -> Result<Limits> {
        if !(cpus.is_finite() && cpus > 0.0) {
            return Err(Error::Usage(format!("--cpus {cpus}: must be a positive number of CPUs")));
        }
        if memory_bytes == 0 || pids_max == 0 {
            return Err(Error::Usage("memory and pids limits must be positive".into()));
        }
        let quota = (cpus * Self::PERIOD_US as f64).round() as u64;
        Ok(Limits { cpu_quota_us: quota.max(1), cpu_period_us: Self::PERIOD_US, memory_bytes, pids_max })
    }

    /// A compact form for other tools' options: `cpus=2,memory=4G,pids=4096`, or positionally
    /// `2,4G,4096` (CPUS,MEMORY,PIDS); any subset, the rest default.
    pub fn parse_spec(spec: &str) -> Result<Limits> {
        let (mut cpus, mut mem, mut pids) = (DEFAULT_CPUS, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS);
        const KEYS: [&str; 3] = ["cpus", "memory", "pids"];
        for (i, part) in spec.split(',').map(str::trim).enumerate() {
            if part.is_empty() {
                continue;
            }
            let (k, v) = match part.split_once('=') {
                Some(kv) => kv,
                None => (*KEYS.get(i).ok_or_else(|| Error::Usage(format!("limits `{spec}`: at most CPUS,MEMORY,PIDS")))?, part),
            };
            match k {
                "cpus" => cpus = v.parse().map_err(|_| Error::Usage(format!("cpus={v}: not a number")))?,
                "memory" => mem = crate::cli::parse_bytes(v).map_err(Error::Usage)?,
                "pids" => pids = v.parse().map_err(|_| Error::Usage(format!("pids={v}: not a count")))?,
                _ => return Err(Error::Usage(format!("limit `{k}`: expected cpus, memory or pids"))),
            }
        }
        Limits::new(cpus, mem, pids)
    }
}

impl Default for Limits {
    /// DEFAULT_CPUS, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS.
    fn default() -> Limits {
        Limits::new(DEFAULT_CPUS, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS).expect("valid defaults")
    }
}

/// The record's `cgroup` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Section {
    pub version: Version,
    /// Hierarchy key (v1: controller name; v2: "unified") -> the session's directory.
    pub paths: BTreeMap<String, PathBuf>,
    /// The same cgroups named as /proc/PID/cgroup shows them (relative to each hierarchy's root).
    pub proc_paths: BTreeMap<String, String>,
    pub requested: Limits,
    /// Limits as read back from the kernel, `null` with a reason in `why_null` when it gives none.
    pub read_back: Value,
    /// Every read-back limit equals the request (memory rounded down to whole pages, as the kernel does).
    pub applied: bool,
    /// Processes moved in at creation; `null` when the session had no namespaces yet.
    pub processes_moved: Option<u64>,
    pub created_at: f64,
    /// Members of later versions, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Section {
    /// The session's cgroup in each hierarchy, as /proc/PID/cgroup names it, with the hierarchy's
    /// controller: v1 one per controller; v2 the unified hierarchy's alone, which has no controller name
    /// (None).
    pub fn roots(&self) -> Vec<(Option<&str>, &str)> {
        match self.version {
            Version::V1 => self.proc_paths.iter().map(|(c, p)| (Some(c.as_str()), p.as_str())).collect(),
            Version::V2 => self.proc_paths.get("unified").map(|p| (None, p.as_str())).into_iter().collect(),
        }
    }
}

/// Figures read from the kernel: a value, or `null` and why.
#[derive(Debug, Default, Clone)]
pub struct Figures {
    values: Map<String, Value>,
    why: Map<String, Value>,
}
impl Figures {
    pub fn put(&mut self, name: &str, r: std::result::Result<u64, String>) {
        match r {
            Ok(v) => {
                self.values.insert(name.into(), json!(v));
            }
            Err(why) => self.null(name, why),
        }
    }
    pub fn null(&mut self, name: &str, why: impl Into<String>) {
        self.values.insert(name.into(), Value::Null);
        self.why.insert(name.into(), json!(why.into()));
    }
    pub fn get(&self, name: &str) -> Option<u64> {
        self.values.get(name).and_then(Value::as_u64)
    }
    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
    /// `{name: value, ..., "why_null": {name: reason}}`.
    pub fn into_value(self) -> Value {
        let mut v = self.values;
        v.insert("why_null".into(), Value::Object(self.why));
        Value::Object(v)
    }
}

/// What differs between cgroup v1 and v2. Everything above it (ledger, record, process moves, retries)
/// is written once.
pub(crate) trait Backend {
    fn version(&self) -> Version;
    /// Hierarchy key -> session directory.
    fn paths(&self) -> &BTreeMap<String, PathBuf>;
    /// Make the `drums` parent of `dir` ready (exists; on v2 passes the controllers down).
    fn prepare_parent(&self, dir: &Path) -> Result<()>;
    fn apply(&self, l: &Limits) -> Result<()>;
    fn read_back(&self) -> Figures;
    /// Names of read-back figures that do not equal what `l` asked for.
    fn mismatches(&self, l: &Limits, rb: &Figures) -> Vec<String>;
    fn set_frozen(&self, frozen: bool) -> Result<()>;
    /// "frozen", "thawed" or a transitional state as the kernel reports it.
    fn frozen_state(&self) -> Result<String>;
    fn sample(&self) -> Figures;
    /// The directory whose cgroup.procs lists the session's processes for telemetry.
    fn procs_dir(&self) -> &Path;
    /// The cgroup to freeze for CRIU's --freeze-cgroup, if any.
    fn freezer_dir(&self) -> Option<&Path>;

    /// Each directory once (cpu and cpuacct share one when they share a hierarchy).
    fn dirs(&self) -> Vec<PathBuf> {
        let mut seen = BTreeSet::new();
        self.paths().values().filter(|p| seen.insert((*p).clone())).cloned().collect()
    }
    fn enter(&self, pid: i32) -> Result<()> {
        for d in self.dirs() {
            write_str(&d.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }
    /// Processes present in every one of the session's directories.
    fn procs_everywhere(&self) -> Result<BTreeSet<i32>> {
        let mut acc: Option<BTreeSet<i32>> = None;
        for d in self.dirs() {
            let s: BTreeSet<i32> = read_procs(&d)?.into_iter().collect();
            acc = Some(match acc {
                None => s,
                Some(a) => a.intersection(&s).copied().collect(),
            });
        }
        Ok(acc.unwrap_or_default())
    }
}

// ---- kernel file helpers: every error names its path and keeps the errno ----

pub(crate) fn read_str(p: &Path) -> Result<String> {
    Ok(std::fs::read_to_string(p).ctx("read", p)?.trim().to_string())
}
/// One write(2) of the whole value: cgroup files act on each write.
pub(crate) fn write_str(p: &Path, v: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(p).ctx("open for writing", p)?;
    f.write_all(v.as_bytes()).map_err(|e| Error::io(format!("write `{v}` to"), p, e))
}
pub(crate) fn read_procs(dir: &Path) -> Result<Vec<i32>> {
    let f = dir.join("cgroup.procs");
    Ok(read_str(&f)?.lines().filter_map(|l| l.trim().parse().ok()).collect())
}
/// A figure or the reason it is missing (the error text names the file and the errno).
pub(crate) fn read_u64(p: &Path) -> std::result::Result<u64, String> {
    let s = read_str(p).map_err(|e| e.to_string())?;
    s.parse().map_err(|_| format!("{}: `{s}` is not a number", p.display()))
}
/// Like read_u64, for a file only newer kernels have: its absence is said as such.
pub(crate) fn read_u64_newer(p: &Path) -> std::result::Result<u64, String> {
    if !p.exists() {
        return Err(format!("{}: absent (this kernel does not keep it)", p.display()));
    }
    read_u64(p)
}
/// A value from a `key value` file (cpu.stat, memory.events, memory.oom_control).
pub(crate) fn read_keyed(p: &Path, key: &str) -> std::result::Result<u64, String> {
    let s = read_str(p).map_err(|e| e.to_string())?;
    s.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')).map(str::trim))
        .ok_or_else(|| format!("{}: no `{key}` line (this kernel does not report it)", p.display()))?
        .parse()
        .map_err(|_| format!("{}: `{key}` is not a number", p.display()))
}
pub(crate) fn page_size() -> u64 {
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}
pub(crate) fn errno(e: &Error) -> Option<i32> {
    match e {
        Error::Io { source, .. } => source.raw_os_error(),
        Error::WithCleanup { cause, .. } => errno(cause),
        _ => None,
    }
}
/// mkdir that accepts an existing directory.
pub(crate) fn ensure_dir(p: &Path) -> Result<()> {
    match std::fs::create_dir(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io("create cgroup directory", p, e)),
    }
}
fn wait_until(what: &str, path: &Path, timeout: Duration, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if done()? {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            return Err(Error::failed(format!("{}: {what}: not done after {:?}", path.display(), timeout)));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

// ---- from the machine or from a record to a backend ----

fn backend_for_new(layout: &Layout, id: &str) -> (Box<dyn Backend>, BTreeMap<String, String>) {
    match layout {
        Layout::V1 { mounts } => {
            let mut paths = BTreeMap::new();
            let mut proc_paths = BTreeMap::new();
            for (c, m) in mounts {
                paths.insert(c.clone(), m.path.join(PARENT).join(id));
                proc_paths.insert(c.clone(), join_root(&m.root, id));
            }
            (Box::new(v1::V1::new(paths)), proc_paths)
        }
        Layout::V2 { mount } => {
            let dir = mount.path.join(PARENT).join(id);
            let proc_paths = BTreeMap::from([("unified".to_string(), join_root(&mount.root, id))]);
            (Box::new(v2::V2::new(dir, mount.path.clone())), proc_paths)
        }
    }
}
fn join_root(root: &str, id: &str) -> String {
    format!("{}/{PARENT}/{id}", root.trim_end_matches('/'))
}

/// Whether `p` is named like a session cgroup: `.../drums/<id>`.
fn is_session_cgroup_name(p: &Path) -> bool {
    let name_ok = p.file_name().and_then(|n| n.to_str()).map(|n| crate::state::check_session_id(n).is_ok()).unwrap_or(false);
    let parent_ok = p.parent().and_then(|q| q.file_name()).map(|n| n == PARENT).unwrap_or(false);
    p.is_absolute() && name_ok && parent_ok && !p.components().any(|c| matches!(c, std::path::Component::ParentDir))
}

/// The session's section, checked: every path is `.../drums/<this session's id>` and, where it exists,
/// on a file system of the recorded cgroup version. A record naming anything else is refused.
pub fn section(session: &Session) -> Result<Option<Section>> {
    let Some(sec) = session.cgroup.clone() else { return Ok(None) };
    if sec.paths.is_empty() {
        return Err(Error::bad_field("cgroup.paths", "empty"));
    }
    for (k, p) in &sec.paths {
        if !is_session_cgroup_name(p) || p.file_name().and_then(|n| n.to_str()) != Some(session.id.as_str()) {
            return Err(Error::bad_field(
                format!("cgroup.paths.{k}"),
                format!("{} is not a cgroup of session {} (expected .../{PARENT}/{})", p.display(), session.id, session.id),
            ));
        }
        if p.exists() {
            let magic = detect::statfs_magic(p)?;
            let ok = match sec.version {
                Version::V1 => detect::is_cgroup1(magic),
                Version::V2 => detect::is_cgroup2(magic),
            };
            if !ok {
                return Err(Error::bad_field(
                    format!("cgroup.paths.{k}"),
                    format!("{} is not on a cgroup {:?} file system (statfs magic {magic:#x})", p.display(), sec.version),
                ));
            }
        }
    }
    if sec.version == Version::V2 && !sec.paths.contains_key("unified") {
        return Err(Error::bad_field("cgroup.paths", "a v2 section needs `unified`"));
    }
    Ok(Some(sec))
}

fn require_section(session: &Session) -> Result<Section> {
    section(session)?.ok_or_else(|| Error::bad_field(SECTION, "missing: run drums-cgroup create first"))
}

fn backend_of(sec: &Section) -> Box<dyn Backend> {
    match sec.version {
        Version::V1 => Box::new(v1::V1::new(sec.paths.clone())),
        Version::V2 => {
            let dir = sec.paths["unified"].clone();
            let mount = dir.parent().and_then(Path::parent).unwrap_or(Path::new("/")).to_path_buf();
            Box::new(v2::V2::new(dir, mount))
        }
    }
}

// ---- the operations ----

/// Create the session's cgroups with `limits`, read them back, and move the session's processes in (when
/// the record has namespaces; otherwise call `enter` for the init as soon as it exists). Writes the
/// `cgroup` section. On any failure every directory made is removed again and released in the ledger.
pub fn create(session: &mut Session, limits: &Limits) -> Result<()> {
    if section(session)?.is_some() {
        return Err(Error::bad_field(SECTION, "the session already has cgroups (drums-cgroup remove first)"));
    }
    let layout = detect::layout()?;
    let (b, proc_paths) = backend_for_new(&layout, &session.id);
    let ledger = Ledger::open(&session.state_dir)?;
    let mut ledgered: Vec<PathBuf> = Vec::new();
    let result = (|| -> Result<Section> {
        for dir in b.dirs() {
            ledger.create_res(Resource::Cgroup { path: dir.clone() })?;
            ledgered.push(dir.clone());
            make_session_dir(b.as_ref(), &dir)?;
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
            Some(ns) => Some(move_processes(b.as_ref(), ns)?),
            None => None,
        };
        Ok(Section {
            version: b.version(),
            paths: b.paths().clone(),
            proc_paths,
            requested: limits.clone(),
            read_back: rb.into_value(),
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
                let r = remove_path(dir).and_then(|_| ledger.release(Resource::Cgroup { path: dir.clone() }));
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
        match std::fs::create_dir(dir) {
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
        let mut todo: Vec<i32> = crate::proc::pids_in_pidns(ns.inodes.pid).into_iter().filter(|p| !inside.contains(p)).collect();
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
    let t0 = Instant::now();
    loop {
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && t0.elapsed() < REMOVE_RETRY && all_leaving(path) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => {
                let left = read_procs(path).map(|v| format!("{v:?}")).unwrap_or_else(|_| "unknown".into());
                return Err(Error::io(format!("remove cgroup (processes still inside: {left})"), path, e));
            }
        }
    }
}

/// Every process `cgroup` lists is leaving (see `rmdir_when_left`); an unreadable list counts as left.
fn all_leaving(cgroup: &Path) -> bool {
    read_procs(cgroup).unwrap_or_default().into_iter().all(crate::proc::leaving)
}

/// The `drums` parent of a session cgroup, if it is now empty. Best effort: EBUSY/ENOTEMPTY means other
/// sessions still have their cgroups there.
pub(crate) fn remove_empty_parent(path: &Path) {
    if let Some(parent) = path.parent() {
        if parent.file_name().is_some_and(|n| n == PARENT) {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

/// Remove every cgroup of the session: the section's paths and any the ledger holds (a crash between
/// mkdir and writing the record leaves them only there). Each removal is released in the ledger. The
/// section becomes `null`. Removal goes on past a failure; the first failure is returned.
pub fn remove(session: &mut Session) -> Result<()> {
    let mut paths: Vec<PathBuf> = section(session)?.map(|s| s.paths.values().cloned().collect()).unwrap_or_default();
    let ledger = Ledger::open(&session.state_dir).ok();
    let live: Vec<PathBuf> = match &ledger {
        Some(l) => l
            .read()?
            .live()
            .into_iter()
            .filter_map(|r| match r {
                Resource::Cgroup { path } => Some(path),
                _ => None,
            })
            .collect(),
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

/// The limits as the kernel reports them now.
pub fn read_back(session: &Session) -> Result<Value> {
    Ok(backend_of(&require_section(session)?).read_back().into_value())
}

/// One telemetry record: memory current and peak, CPU time, throttling, tasks and processes, OOM kills.
pub fn sample(session: &Session) -> Result<Value> {
    let sec = require_section(session)?;
    Ok(sample_with(session, &sec, backend_of(&sec).as_ref(), 0))
}

fn init_alive(session: &Session) -> Option<bool> {
    session.ns.as_ref().map(|ns| crate::proc::alive(ns.init_pid, ns.init_start_time))
}

fn sample_with(session: &Session, sec: &Section, b: &dyn Backend, seq: u64) -> Value {
    let mut f = b.sample();
    match read_procs(b.procs_dir()) {
        Ok(p) => f.put("processes", Ok(p.len() as u64)),
        Err(e) => f.null("processes", e.to_string()),
    }
    let mut v = f.into_value();
    let head = json!({
        "drums": crate::record::VERSION,
        "type": "cgroup_sample",
        "session": session.id,
        "version": sec.version,
        "seq": seq,
        "t": crate::state::now(),
        "init_alive": init_alive(session),
    });
    if let (Value::Object(h), Value::Object(body)) = (head, &mut v) {
        for (k, x) in h.into_iter().rev() {
            body.insert(k, x);
        }
    }
    v
}

/// Sample every `interval` until the session ends: its init is gone (or, for a record without
/// namespaces, its cgroup holds no process), the cgroup is removed, or `max_samples` were taken. The
/// last sample is taken after the end and has `"final": true`. Returns the number of samples.
pub fn watch(session: &Session, interval: Duration, max_samples: Option<u64>, mut emit: impl FnMut(&Value) -> Result<()>) -> Result<u64> {
    let sec = require_section(session)?;
    let b = backend_of(&sec);
    let mut seq = 0u64;
    let mut next = Instant::now();
    loop {
        let ended = match init_alive(session) {
            Some(alive) => !alive,
            None => read_procs(b.procs_dir()).map(|p| p.is_empty()).unwrap_or(true),
        };
        let gone = !b.procs_dir().exists();
        let last = ended || gone || max_samples.is_some_and(|m| seq + 1 >= m);
        let mut v = sample_with(session, &sec, b.as_ref(), seq);
        v["final"] = json!(last);
        emit(&v)?;
        seq += 1;
        if last {
            return Ok(seq);
        }
        next += interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn default_memory_text_is_default_memory_bytes() {
        assert_eq!(crate::cli::parse_bytes(super::DEFAULT_MEMORY), Ok(super::DEFAULT_MEMORY_BYTES));
    }

    use super::*;

    #[test]
    fn limits_in_kernel_units() {
        let l = Limits::default();
        assert_eq!((l.cpu_quota_us, l.cpu_period_us, l.memory_bytes, l.pids_max), (200000, 100000, 4294967296, 4096));
        let l = Limits::parse_spec("cpus=0.5,memory=64M").unwrap();
        assert_eq!((l.cpu_quota_us, l.memory_bytes, l.pids_max), (50000, 64 << 20, 4096));
        assert!(Limits::parse_spec("gpus=1").is_err());
        assert_eq!(Limits::parse_spec("2,4G,4096").unwrap(), Limits::default());
        let l = Limits::parse_spec("1.5,256M").unwrap();
        assert_eq!((l.cpu_quota_us, l.memory_bytes, l.pids_max), (150000, 256 << 20, 4096));
        assert!(Limits::parse_spec("1,2G,3,4").is_err());
        assert!(Limits::new(0.0, 1, 1).is_err());
    }

    #[test]
    fn session_cgroup_names() {
        assert!(is_session_cgroup_name(Path::new("/sys/fs/cgroup/memory/drums/d-0123456789ab")));
        assert!(!is_session_cgroup_name(Path::new("/sys/fs/cgroup/memory/d-0123456789ab")));
        assert!(!is_session_cgroup_name(Path::new("/sys/fs/cgroup/memory/drums/..")));
        assert!(!is_session_cgroup_name(Path::new("drums/d-1")));
        assert!(matches!(remove_path(Path::new("/etc/drums/x")), Err(Error::BadInput { .. })));
    }
}
