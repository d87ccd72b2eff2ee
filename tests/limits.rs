//! Default resource limits (issue 16, "a session is a sandbox"): a session made without any cgroup option,
//! cold (pipelines/cold.sh) or restored (drums-restore), has memory and pids limits, read here from the
//! kernel's cgroup files of its own processes; with the opt-out (DRUMS_CGROUP_ARGS=none, drums-restore
//! --no-cgroup) it has none; a fork bomb run as root inside a cold session and inside a restored sibling
//! stops at the session's task limit while the host goes on forking; the sweep removes every cgroup.

use drums::cgroup::Layout;
use drums::record::{Checkpoint, Session};
use drums_tests::*;
use serde_json::Value;
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A cold session with host ids: each is a checkpoint's source (drums-ckpt refuses a session in its own user
/// namespace).
fn cold(cgroup_args: Option<&str>) -> String {
    let mut c = Command::new(repo_root().join("pipelines/cold.sh"));
    c.env("PATH", path_with_tools()).env("DRUMS_OWNER", std::process::id().to_string()).env_remove("DRUMS_CGROUP_ARGS").env("DRUMS_OVERLAY_ARGS", "--host-ids");
    if let Some(a) = cgroup_args {
        c.env("DRUMS_CGROUP_ARGS", a);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "cold.sh (DRUMS_CGROUP_ARGS {cgroup_args:?}): {}", text(&o.stderr));
    text(&o.stdout).trim().to_string()
}

/// A tool's output that is one record, decoded into `T` (a session's or a checkpoint's).
fn record<T: serde::de::DeserializeOwned>(line: &str) -> T {
    assert_eq!(line.trim().lines().count(), 1, "not one record: {line}");
    decode(line)
}

/// What the kernel applies to one process, from its own cgroups as /proc/PID/cgroup names them: the
/// memory and pids cgroups (as named there) and their limits (`None`: no limit, `max`).
#[derive(Debug)]
struct Applied {
    memory_cgroup: String,
    pids_cgroup: String,
    memory_bytes: Option<u64>,
    pids_max: Option<u64>,
}

/// The cgroup path of the /proc/PID/cgroup line whose controller list satisfies `want`.
fn line_of(pc: &str, want: impl Fn(&str) -> bool) -> Option<String> {
    pc.lines().find_map(|l| {
        let f: Vec<&str> = l.splitn(3, ':').collect();
        (f.len() == 3 && want(f[1])).then(|| f[2].to_string())
    })
}

fn applied_to(pid: i32) -> Option<Applied> {
    let pc = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let read = |dir: PathBuf, file: &str| -> Option<u64> {
        let v = match std::fs::read_to_string(dir.join(file)) {
            Ok(v) => v,
            // A hierarchy's root has no limit files.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => panic!("{}: {e}", dir.join(file).display()),
        };
        // v1 says "no limit" with a huge number, v2 with `max`.
        v.trim().parse::<u64>().ok().filter(|n| *n < 1 << 62)
    };
    let under = |m: &drums::cgroup::detect::Mount, cg: &str| m.path.join(cg.strip_prefix(m.root.trim_end_matches('/')).unwrap_or(cg).trim_start_matches('/'));
    Some(match drums::cgroup::detect::layout().expect("this machine has no usable cgroup hierarchy") {
        Layout::V1 { mounts } => {
            let mem = line_of(&pc, |c| c.split(',').any(|x| x == "memory"))?;
            let pids = line_of(&pc, |c| c.split(',').any(|x| x == "pids"))?;
            Applied {
                memory_bytes: read(under(&mounts["memory"], &mem), "memory.limit_in_bytes"),
                pids_max: read(under(&mounts["pids"], &pids), "pids.max"),
                memory_cgroup: mem,
                pids_cgroup: pids,
            }
        }
        Layout::V2 { mount } => {
            let cg = line_of(&pc, |c| c.is_empty())?;
            let dir = under(&mount, &cg);
            let at_root = dir == mount.path;
            Applied {
                memory_bytes: if at_root { None } else { read(dir.clone(), "memory.max") },
                pids_max: if at_root { None } else { read(dir, "pids.max") },
                memory_cgroup: cg.clone(),
                pids_cgroup: cg,
            }
        }
    })
}

/// Host PIDs of every live process of the session's PID namespace.
fn processes(rec: &Session) -> Vec<i32> {
    drums::proc::pids_in_pidns(rec.ns.as_ref().expect("ns.inodes.pid").inodes.pid)
}

/// Every process of the session (at least its init and its desktop) runs under the default limits, in
/// the session's own cgroups, as the kernel's files say.
fn assert_default_limits(what: &str, rec: &Session) {
    let id = rec.id.as_str();
    let d = drums::cgroup::Limits::default();
    let sec = rec.cgroup.as_ref().unwrap_or_else(|| panic!("{what}: the record has no cgroup section: {}", json(rec)));
    assert_eq!(sec.requested.memory_bytes, d.memory_bytes, "{what}: {}", json(sec));
    assert_eq!(sec.requested.pids_max, d.pids_max, "{what}: {}", json(sec));
    let procs = processes(rec);
    assert!(procs.len() >= 4, "{what}: the desktop runs several processes: {procs:?}");
    let want = format!("/{}/{id}", drums::cgroup::PARENT);
    let mut checked = 0;
    for p in procs {
        let Some(a) = applied_to(p) else { continue }; // exited since the scan
        if !drums::proc::alive(p, drums::proc::start_time(p).unwrap_or(0)) || a.memory_cgroup == "/" {
            continue; // exiting: the kernel has taken it out of its cgroups already
        }
        assert_eq!((a.memory_cgroup.as_str(), a.pids_cgroup.as_str()), (want.as_str(), want.as_str()), "{what}: process {p} ({})", drums::proc::comm(p));
        assert_eq!(a.memory_bytes, Some(d.memory_bytes), "{what}: memory limit of process {p} ({}): {a:?}", drums::proc::comm(p));
        assert_eq!(a.pids_max, Some(d.pids_max), "{what}: task limit of process {p} ({}): {a:?}", drums::proc::comm(p));
        checked += 1;
    }
    assert!(checked >= 4, "{what}: only {checked} processes checked");
}

/// No process of the session is in a Drums cgroup.
fn assert_no_session_cgroups(what: &str, rec: &Session) {
    assert!(rec.cgroup.is_none(), "{what}: the record has a cgroup section: {}", json(&rec.cgroup));
    let procs = processes(rec);
    assert!(procs.len() >= 4, "{what}: {procs:?}");
    for p in procs {
        if let Some(a) = applied_to(p) {
            let mine = format!("/{}/", drums::cgroup::PARENT);
            assert!(!a.memory_cgroup.contains(&mine) && !a.pids_cgroup.contains(&mine), "{what}: process {p} is in a Drums cgroup: {a:?}");
        }
    }
}

fn no_cgroup_dirs_left(ids: &[String]) {
    for m in drums::destroy::cgroup_mounts() {
        for id in ids {
            let p = m.join(drums::cgroup::PARENT).join(id);
            assert!(!p.exists(), "{} left after the sweep", p.display());
        }
    }
}

fn remove_checkpoint(c: &Checkpoint) {
    for dir in [Some(&c.dir), c.mapped.as_ref().map(|m| &m.dir)].into_iter().flatten() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn settle_inventory(before: &Inventory) -> Inventory {
    // Tasks of a killed session leave a moment after their signal.
    let t0 = Instant::now();
    loop {
        let left = inventory().new_since(before);
        if left.is_empty() || t0.elapsed() > Duration::from_secs(10) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The fork bomb, run as root inside the session: fork children that only wait, until fork fails or 30 s
/// pass; report; hold the children 3 s (the test looks at the host meanwhile); kill and reap them.
const FORK_BOMB: &str = r#"
import json, os, signal, sys, time
kids, err, t0 = [], None, time.time()
while time.time() - t0 < 30:
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
print(json.dumps({"forks": len(kids), "errno": err, "seconds": round(time.time() - t0, 3)}), flush=True)
time.sleep(3)
for k in kids:
    os.kill(k, signal.SIGKILL)
for k in kids:
    os.waitpid(k, 0)
print("reaped", flush=True)
"#;

fn read_u64(p: &std::path::Path) -> u64 {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).trim().parse().unwrap()
}

/// `max N` of pids.events: how often a fork failed at the limit.
fn pids_limit_hits(dir: &std::path::Path) -> u64 {
    let t = std::fs::read_to_string(dir.join("pids.events")).unwrap_or_else(|e| panic!("{}/pids.events: {e}", dir.display()));
    t.lines().find_map(|l| l.strip_prefix("max ")).and_then(|v| v.trim().parse().ok()).unwrap_or_else(|| panic!("pids.events: {t}"))
}

fn fork_bomb(what: &str, rec: &Session) {
    let id = rec.id.as_str();
    let paths = &rec.cgroup.as_ref().expect("a cgroup section").paths;
    let dir = paths.get("pids").or_else(|| paths.get("unified")).cloned().expect("a pids cgroup");
    let max = read_u64(&dir.join("pids.max"));
    let tasks_before = read_u64(&dir.join("pids.current"));
    let hits_before = pids_limit_hits(&dir);
    let mut bomb = Command::new(tool("drums-ns"))
        .args(["exec", "--session", id, "--", "python3", "-c", FORK_BOMB])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(bomb.stdout.take().unwrap());
    let mut first = String::new();
    let reader = std::thread::spawn(move || {
        out.read_line(&mut first).unwrap();
        (first, out)
    });
    let t0 = Instant::now();
    while !reader.is_finished() {
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = bomb.kill();
            panic!("{what}: the fork bomb did not report within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (first, mut out) = reader.join().unwrap();
    // The bomb holds its children now: the session is at its limit, the host is not.
    let tasks_at_peak = read_u64(&dir.join("pids.current"));
    let host_fork = Command::new("/bin/true").status();
    assert!(host_fork.as_ref().is_ok_and(|s| s.success()), "{what}: the host cannot fork while the session's bomb holds its children: {host_fork:?}");
    // The bomb's own report (FORK_BOMB above), not a Drums record.
    let report: Value = serde_json::from_str(first.trim()).unwrap_or_else(|e| panic!("{what}: the bomb's report ({e}): {first:?}"));
    eprintln!("{what}: fork bomb {report}; tasks {tasks_before} before, {tasks_at_peak} at the peak, pids.max {max}");
    assert_eq!(report["errno"], libc::EAGAIN, "{what}: fork did not fail with EAGAIN: {report}");
    assert!(tasks_at_peak <= max, "{what}: {tasks_at_peak} tasks over pids.max {max}");
    let forks = report["forks"].as_u64().unwrap();
    assert!(forks + tasks_before + 64 >= max && forks < max, "{what}: {forks} forks from {tasks_before} tasks do not end at the limit {max}");
    assert!(pids_limit_hits(&dir) > hits_before, "{what}: pids.events counts no fork refused at the limit");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let st = bomb.wait().unwrap();
    assert!(st.success() && rest.contains("reaped"), "{what}: the bomb did not clean up ({st}): {rest} {}", text(&{
        let mut e = vec![];
        let _ = std::io::Read::read_to_end(bomb.stderr.as_mut().unwrap(), &mut e);
        e
    }));
    let ns = rec.ns.as_ref().expect("an ns section");
    assert!(drums::proc::alive(ns.init_pid, ns.init_start_time), "{what}: the session's init died");
    let back = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        read_u64(&dir.join("pids.current")) <= tasks_before + 16
    });
    assert!(back, "{what}: the bomb's children did not go: {} tasks, {tasks_before} before", read_u64(&dir.join("pids.current")));
}

/// A cold session and a restored sibling made without any cgroup option run under the default limits,
/// every process of them as the kernel's files say; a fork bomb as root inside each stops at the task
/// limit while the host goes on forking; the sweep removes their cgroups and leaves nothing.
#[test]
fn default_limits_cold_and_restored_and_a_fork_bomb_stops_at_them() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let mut guard = Sessions::default();
    let src = cold(None);
    guard.add(&src);
    let src_v: Session = record(&src);
    assert_default_limits("cold session", &src_v);

    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &src);
    let ckpt_v: Checkpoint = record(&ckpt);
    let sib = run_ok("drums-restore", &[], &ckpt);
    guard.add(&sib);
    let sib_v: Session = record(&sib);
    assert_default_limits("restored sibling", &sib_v);
    let restore = sib_v.restore.as_ref().unwrap_or_else(|| panic!("no restore section: {sib}"));
    // A sibling in its own user namespace (the default) is restored by a CRIU that already runs in the
    // sibling's cgroups (criu::AsUsernsRoot), so CRIU leaves cgroups alone and the tree inherits them;
    // with host ids CRIU places it with --cgroup-root in soft mode.
    let placement = if sib_v.id_range.is_some() { "--manage-cgroups=ignore" } else { "--manage-cgroups=soft" };
    assert!(restore.criu_options.iter().any(|o| o == placement), "{placement}: {}", json(restore));

    fork_bomb("cold session", &src_v);
    fork_bomb("restored sibling", &sib_v);

    let ids = vec![src_v.id.clone(), sib_v.id.clone()];
    drop(guard);
    remove_checkpoint(&ckpt_v);
    no_cgroup_dirs_left(&ids);
    let left = settle_inventory(&before);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// The opt-out makes no cgroups: a cold session with DRUMS_CGROUP_ARGS=none and a sibling restored with
/// --no-cgroup run in no Drums cgroup, and CRIU is told to leave cgroups alone. Explicit limits still
/// work (a subset: the rest are the defaults); --cgroup with --no-cgroup is a usage error.
#[test]
fn opt_out_makes_no_cgroups_and_explicit_limits_still_work() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let mut guard = Sessions::default();
    let src = cold(Some("none"));
    guard.add(&src);
    let src_v: Session = record(&src);
    assert_no_session_cgroups("cold session, DRUMS_CGROUP_ARGS=none", &src_v);

    let ckpt = run_ok("drums-ckpt", &[], &src);
    let ckpt_v: Checkpoint = record(&ckpt);
    let o = run("drums-restore", &["--no-cgroup", "--cgroup", "2,1G,100"], &ckpt);
    assert_eq!(o.status.code(), Some(2), "--cgroup with --no-cgroup: {}", text(&o.stderr));
    let sib = run_ok("drums-restore", &["--no-cgroup"], &ckpt);
    guard.add(&sib);
    let sib_v: Session = record(&sib);
    assert_no_session_cgroups("restored sibling, --no-cgroup", &sib_v);
    let restore = sib_v.restore.as_ref().unwrap_or_else(|| panic!("no restore section: {sib}"));
    assert!(restore.criu_options.iter().any(|o| o == "--manage-cgroups=ignore"), "{}", json(restore));

    let sib2 = run_ok("drums-restore", &["--cgroup", "pids=1000"], &ckpt);
    guard.add(&sib2);
    let sib2_v: Session = record(&sib2);
    let init = sib2_v.ns.as_ref().expect("an ns section").init_pid;
    let a = applied_to(init).expect("the sibling's init");
    assert_eq!((a.pids_max, a.memory_bytes), (Some(1000), Some(drums::cgroup::DEFAULT_MEMORY_BYTES)), "--cgroup pids=1000: {a:?}");

    let ids: Vec<String> = [&src_v, &sib_v, &sib2_v].iter().map(|r| r.id.clone()).collect();
    drop(guard);
    remove_checkpoint(&ckpt_v);
    no_cgroup_dirs_left(&ids);
    let left = settle_inventory(&before);
    assert!(left.is_empty(), "left behind: {left:?}");
}
