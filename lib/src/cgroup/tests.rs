//! The cgroup code on a recording fake of its file systems (`Recording`): the v1 and v2 backends and the
//! lifecycle, checked for what they write, where, and in which order, without root or a kernel. The
//! real-kernel tests (tests/cgroup.rs, tests/limits.rs) check the same code against the kernel.

use super::files::CgroupFs;
use super::lifecycle::create_on;
use super::v1::V1;
use super::v2::V2;
use super::{Backend, Limits, Version};
use crate::ledger::Ledger;
use crate::record::Session;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, String>,
    dirs: BTreeSet<PathBuf>,
    /// Every operation, in order: `read P`, `write P V`, `mkdir P`, `rmdir P`.
    ops: Vec<String>,
    /// Writes that fail, with the errno.
    fail: BTreeMap<PathBuf, i32>,
}

/// A cgroup file system in memory that records every operation. Like the kernel's: a write needs the
/// directory to exist and fails as configured; mkdir needs the parent; rmdir takes the directory's files
/// with it; writing `cgroup.freeze` (v2) sets `frozen` in `cgroup.events` at once.
#[derive(Default)]
struct Recording {
    s: Mutex<State>,
    /// Called before each mkdir, with the path (a check of what must hold before a directory exists).
    before_mkdir: Mutex<Option<Box<dyn Fn(&Path) + Send>>>,
}

fn err(errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno)
}

impl Recording {
    fn leaked() -> &'static Recording {
        Box::leak(Box::default())
    }
    fn dir(&self, p: &str) -> &Self {
        let mut s = self.s.lock().unwrap();
        for a in Path::new(p).ancestors() {
            s.dirs.insert(a.to_path_buf());
        }
        self
    }
    fn file(&self, p: &str, v: &str) -> &Self {
        self.dir(Path::new(p).parent().unwrap().to_str().unwrap());
        self.s.lock().unwrap().files.insert(p.into(), v.into());
        self
    }
    fn fail_write(&self, p: &str, errno: i32) {
        self.s.lock().unwrap().fail.insert(p.into(), errno);
    }
    fn get(&self, p: &str) -> Option<String> {
        self.s.lock().unwrap().files.get(Path::new(p)).cloned()
    }
    /// The operations that change something, in order.
    fn changes(&self) -> Vec<String> {
        self.s.lock().unwrap().ops.iter().filter(|o| !o.starts_with("read ")).cloned().collect()
    }
}

impl CgroupFs for Recording {
    fn read(&self, p: &Path) -> std::io::Result<String> {
        let mut s = self.s.lock().unwrap();
        s.ops.push(format!("read {}", p.display()));
        s.files.get(p).cloned().ok_or_else(|| err(libc::ENOENT))
    }
    fn write(&self, p: &Path, v: &str) -> std::io::Result<()> {
        let mut s = self.s.lock().unwrap();
        s.ops.push(format!("write {} {v}", p.display()));
        if let Some(e) = s.fail.get(p) {
            return Err(err(*e));
        }
        if !s.dirs.contains(p.parent().unwrap()) {
            return Err(err(libc::ENOENT));
        }
        let v = match p.file_name().and_then(|n| n.to_str()) {
            Some("cgroup.freeze") => {
                s.files.insert(p.with_file_name("cgroup.events"), format!("populated 1\nfrozen {v}"));
                v.to_string()
            }
            // `+c` enables, `-c` disables; the file lists what is enabled.
            Some("cgroup.subtree_control") => {
                let mut on: BTreeSet<String> = s.files.get(p).map(|t| t.split_whitespace().map(str::to_string).collect()).unwrap_or_default();
                for t in v.split_whitespace() {
                    match (t.strip_prefix('+'), t.strip_prefix('-')) {
                        (Some(c), _) => on.insert(c.to_string()),
                        (_, Some(c)) => on.remove(c),
                        _ => return Err(err(libc::EINVAL)),
                    };
                }
                on.into_iter().collect::<Vec<_>>().join(" ")
            }
            _ => v.to_string(),
        };
        s.files.insert(p.into(), v);
        Ok(())
    }
    fn mkdir(&self, p: &Path) -> std::io::Result<()> {
        if let Some(f) = self.before_mkdir.lock().unwrap().as_ref() {
            f(p);
        }
        let mut s = self.s.lock().unwrap();
        s.ops.push(format!("mkdir {}", p.display()));
        if s.dirs.contains(p) {
            return Err(err(libc::EEXIST));
        }
        if !s.dirs.contains(p.parent().unwrap()) {
            return Err(err(libc::ENOENT));
        }
        s.dirs.insert(p.into());
        // The interface files every new cgroup has (v1 has no subtree_control; nothing here reads it there).
        s.files.insert(p.join("cgroup.procs"), String::new());
        s.files.insert(p.join("cgroup.subtree_control"), String::new());
        Ok(())
    }
    fn rmdir(&self, p: &Path) -> std::io::Result<()> {
        let mut s = self.s.lock().unwrap();
        s.ops.push(format!("rmdir {}", p.display()));
        if !s.dirs.contains(p) {
            return Err(err(libc::ENOENT));
        }
        if s.dirs.iter().any(|d| d.parent() == Some(p)) {
            return Err(err(libc::EBUSY));
        }
        s.dirs.remove(p);
        s.files.retain(|f, _| f.parent() != Some(p));
        Ok(())
    }
    fn exists(&self, p: &Path) -> bool {
        let s = self.s.lock().unwrap();
        s.dirs.contains(p) || s.files.contains_key(p)
    }
}

const ID: &str = "d-0123456789ab";

fn limits() -> Limits {
    // 1.5 CPUs, 512 MiB, 100 tasks.
    Limits::new(1.5, 512 << 20, 100).unwrap()
}

/// A v1 session's directories: cpu and cpuacct share one hierarchy, as on Debian.
fn v1_paths() -> BTreeMap<String, PathBuf> {
    let d = |h: &str| PathBuf::from(format!("/cg/{h}/drums/{ID}"));
    BTreeMap::from([
        ("cpu".into(), d("cpu,cpuacct")),
        ("cpuacct".into(), d("cpu,cpuacct")),
        ("memory".into(), d("memory")),
        ("pids".into(), d("pids")),
        ("freezer".into(), d("freezer")),
    ])
}

/// A fake with the v1 hierarchies mounted and the session's directories made (with `memsw`: swap
/// accounting).
fn v1_made(memsw: bool) -> (&'static Recording, V1) {
    let fs = Recording::leaked();
    for d in v1_paths().values() {
        fs.dir(d.to_str().unwrap());
    }
    if memsw {
        fs.file(&format!("/cg/memory/drums/{ID}/memory.memsw.limit_in_bytes"), "9223372036854771712");
    }
    (fs, V1::on(v1_paths(), fs))
}

#[test]
fn v1_writes_the_period_before_the_quota_and_memory_before_memsw() {
    let (fs, b) = v1_made(true);
    b.apply(&limits()).unwrap();
    let m = format!("/cg/memory/drums/{ID}");
    assert_eq!(
        fs.changes(),
        [
            format!("write /cg/cpu,cpuacct/drums/{ID}/cpu.cfs_period_us 100000"),
            format!("write /cg/cpu,cpuacct/drums/{ID}/cpu.cfs_quota_us 150000"),
            format!("write {m}/memory.limit_in_bytes 536870912"),
            format!("write {m}/memory.memsw.limit_in_bytes 536870912"),
            format!("write /cg/pids/drums/{ID}/pids.max 100"),
        ]
    );
    let rb = b.read_back();
    assert_eq!(b.mismatches(&limits(), &rb), Vec::<String>::new(), "{}", rb.clone().into_value());
    assert_eq!((rb.get("cpu_quota_us"), rb.get("memsw_bytes")), (Some(150000), Some(536870912)));
}

#[test]
fn v1_without_swap_accounting_writes_no_memsw_and_says_why() {
    let (fs, b) = v1_made(false);
    b.apply(&limits()).unwrap();
    assert!(!fs.changes().iter().any(|o| o.contains("memsw")), "{:?}", fs.changes());
    let rb = b.read_back();
    assert!(rb.has("memsw_bytes") && rb.get("memsw_bytes").is_none());
    assert!(rb.why_null("memsw_bytes").unwrap().contains("does not account swap"), "{:?}", rb.why_null("memsw_bytes"));
    // And a memsw figure is not asked of a kernel without one.
    assert_eq!(b.mismatches(&limits(), &rb), Vec::<String>::new());
}

#[test]
fn v1_reads_the_kernels_no_limit_values_as_nulls_with_reasons() {
    let (fs, b) = v1_made(false);
    let cpu = format!("/cg/cpu,cpuacct/drums/{ID}");
    fs.file(&format!("{cpu}/cpu.cfs_quota_us"), "-1\n").file(&format!("{cpu}/cpu.cfs_period_us"), "100000\n");
    fs.file(&format!("/cg/memory/drums/{ID}/memory.limit_in_bytes"), "9223372036854771712\n");
    fs.file(&format!("/cg/pids/drums/{ID}/pids.max"), "max\n");
    let rb = b.read_back();
    assert_eq!(rb.why_null("cpu_quota_us"), Some("cpu.cfs_quota_us is -1: no quota"));
    assert!(rb.why_null("memory_bytes").unwrap().contains("no limit"));
    assert_eq!(rb.why_null("pids_max"), Some("pids.max is `max`: no limit"));
    assert_eq!(rb.get("cpu_period_us"), Some(100000));
    // Every limit that is not what was asked is named.
    assert_eq!(b.mismatches(&limits(), &rb), ["cpu_quota_us", "memory_bytes", "pids_max"]);
}

#[test]
fn v1_moves_a_process_into_each_directory_once_and_freezes_through_the_freezer() {
    let (fs, b) = v1_made(false);
    b.enter(4242).unwrap();
    let procs: Vec<String> = fs.changes().into_iter().filter(|o| o.ends_with("cgroup.procs 4242")).collect();
    // cpu and cpuacct share a directory: four directories, four writes.
    assert_eq!(procs.len(), 4, "{procs:?}");
    b.set_frozen(true).unwrap();
    assert_eq!(fs.get(&format!("/cg/freezer/drums/{ID}/freezer.state")).as_deref(), Some("FROZEN"));
    assert_eq!(b.frozen_state().unwrap(), "frozen");
    assert_eq!(b.freezer_dir(), Some(Path::new(&format!("/cg/freezer/drums/{ID}"))));
}

fn v2_fs(base_controllers: &str) -> (&'static Recording, V2) {
    let fs = Recording::leaked();
    fs.file("/cg2/cgroup.subtree_control", base_controllers);
    (fs, V2::on(PathBuf::from(format!("/cg2/drums/{ID}")), PathBuf::from("/cg2"), fs))
}

#[test]
fn v2_passes_down_only_the_missing_controllers_before_making_the_parent() {
    let (fs, b) = v2_fs("cpu io");
    let dir = PathBuf::from(format!("/cg2/drums/{ID}"));
    b.prepare_parent(&dir).unwrap();
    // The base first (only what it lacks), then the `drums` parent, then what the parent passes down.
    assert_eq!(fs.changes(), ["write /cg2/cgroup.subtree_control +memory +pids", "mkdir /cg2/drums", "write /cg2/drums/cgroup.subtree_control +cpu +memory +pids"]);
    assert_eq!(fs.get("/cg2/cgroup.subtree_control").as_deref(), Some("cpu io memory pids"));
    // Again: nothing to write, and the existing parent is accepted.
    b.prepare_parent(&dir).unwrap();
    assert_eq!(fs.changes().len(), 4, "{:?}", fs.changes());
    assert_eq!(fs.changes()[3], "mkdir /cg2/drums");
}

#[test]
fn v2_writes_the_limits_the_v2_way_and_reads_them_back() {
    let (fs, b) = v2_fs("cpu memory pids");
    let d = format!("/cg2/drums/{ID}");
    fs.dir(&d).file(&format!("{d}/memory.swap.max"), "max");
    b.apply(&limits()).unwrap();
    assert_eq!(
        fs.changes(),
        [format!("write {d}/cpu.max 150000 100000"), format!("write {d}/memory.max 536870912"), format!("write {d}/memory.swap.max 0"), format!("write {d}/pids.max 100")]
    );
    let rb = b.read_back();
    assert_eq!(b.mismatches(&limits(), &rb), Vec::<String>::new(), "{}", rb.clone().into_value());
    assert_eq!((b.version(), rb.get("swap_max_bytes")), (Version::V2, Some(0)));
    // "max" is no limit: null, and named as a mismatch.
    fs.file(&format!("{d}/cpu.max"), "max 100000");
    let rb = b.read_back();
    assert_eq!(rb.why_null("cpu_quota_us"), Some(format!("{d}/cpu.max is `max 100000`: no quota").as_str()));
    assert_eq!(b.mismatches(&limits(), &rb), ["cpu_quota_us"]);
}

#[test]
fn v2_freeze_waits_for_the_kernels_event_and_needs_the_freezer_file() {
    let (fs, b) = v2_fs("cpu memory pids");
    let d = format!("/cg2/drums/{ID}");
    fs.dir(&d);
    // No cgroup.freeze (Linux before 5.2): refused, nothing written.
    let e = b.set_frozen(true).unwrap_err();
    assert!(e.to_string().contains("Linux 5.2"), "{e}");
    assert!(fs.changes().is_empty(), "{:?}", fs.changes());
    fs.file(&format!("{d}/cgroup.freeze"), "0");
    b.set_frozen(true).unwrap();
    assert_eq!(fs.changes(), [format!("write {d}/cgroup.freeze 1")]);
    assert_eq!(b.frozen_state().unwrap(), "frozen");
    b.set_frozen(false).unwrap();
    assert_eq!(b.frozen_state().unwrap(), "thawed");
}

/// A session whose state directory (and ledger) is a fresh temporary directory.
fn session_with_ledger(tag: &str) -> (Session, PathBuf) {
    let dir = std::env::temp_dir().join(format!("drums-cgroup-unit-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Ledger::create(&dir, ID, crate::proc::me().unwrap(), None).unwrap();
    let s: Session = serde_json::from_value(serde_json::json!({
        "drums": 1, "type": "session", "id": ID, "state_dir": dir, "created_at": 1.0, "owner": {"pid": 1, "start_time": 1}
    }))
    .unwrap();
    (s, dir)
}

fn live_cgroups(dir: &Path) -> Vec<PathBuf> {
    Ledger::open(dir).unwrap().read().unwrap().live_cgroups()
}

#[test]
fn create_ledgers_each_directory_before_making_it_then_applies_and_checks_the_limits() {
    let (mut s, state) = session_with_ledger("create");
    let fs = Recording::leaked();
    for h in ["cpu,cpuacct", "memory", "pids", "freezer"] {
        fs.dir(&format!("/cg/{h}"));
    }
    // Ledger before resource: when a session directory is made, its line is already in the ledger.
    let ledger_dir = state.clone();
    *fs.before_mkdir.lock().unwrap() = Some(Box::new(move |p: &Path| {
        if p.file_name().is_some_and(|n| n == ID) {
            assert!(live_cgroups(&ledger_dir).contains(&p.to_path_buf()), "{} made before its ledger line", p.display());
        }
    }));
    let b = V1::on(v1_paths(), fs);
    create_on(&mut s, &limits(), &b, BTreeMap::new()).unwrap();
    let made: Vec<String> = fs.changes().into_iter().filter(|o| o.starts_with("mkdir")).collect();
    // Each hierarchy: its `drums` parent, then the session's directory; cpu and cpuacct once.
    assert_eq!(made.len(), 8, "{made:?}");
    let sec = s.cgroup.as_ref().expect("the section is written");
    assert_eq!((sec.version, sec.applied, sec.processes_moved), (Version::V1, true, None));
    assert_eq!(live_cgroups(&state).len(), 4);
    // The limits come after every directory, in their order.
    let changes = fs.changes();
    let last_mkdir = changes.iter().rposition(|o| o.starts_with("mkdir")).unwrap();
    let first_write = changes.iter().position(|o| o.starts_with("write")).unwrap();
    assert!(last_mkdir < first_write, "{changes:?}");
    let _ = std::fs::remove_dir_all(&state);
}

#[test]
fn create_that_fails_removes_what_it_made_in_reverse_and_releases_it() {
    let (mut s, state) = session_with_ledger("fail");
    let fs = Recording::leaked();
    for h in ["cpu,cpuacct", "memory", "pids", "freezer"] {
        fs.dir(&format!("/cg/{h}"));
    }
    fs.fail_write(&format!("/cg/pids/drums/{ID}/pids.max"), libc::EINVAL);
    let b = V1::on(v1_paths(), fs);
    let e = create_on(&mut s, &limits(), &b, BTreeMap::new()).unwrap_err();
    assert!(e.to_string().contains("pids.max"), "{e}");
    assert!(s.cgroup.is_none());
    let changes = fs.changes();
    let made: Vec<&str> = changes.iter().filter_map(|o| o.strip_prefix("mkdir ")).filter(|p| p.ends_with(ID)).collect();
    let removed: Vec<&str> = changes.iter().filter_map(|o| o.strip_prefix("rmdir ")).filter(|p| p.ends_with(ID)).collect();
    let mut reversed = made.clone();
    reversed.reverse();
    assert_eq!(removed, reversed, "{changes:?}");
    // The emptied `drums` parents go too, and the ledger holds nothing of it any more.
    assert!(changes.iter().any(|o| o == "rmdir /cg/pids/drums"), "{changes:?}");
    assert_eq!(live_cgroups(&state), Vec::<PathBuf>::new());
    let _ = std::fs::remove_dir_all(&state);
}
