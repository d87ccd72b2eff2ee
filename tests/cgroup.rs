//! drums-cgroup on this machine's real cgroup hierarchies (v1 hybrid on the development machines): the
//! scenarios of tests/cgroup-scenarios.sh, checked by tests/cgroup_check.rs, plus the refusals.
//! The same scenarios run on a real cgroup v2 in tests/cgroup_v2_qemu.rs.

#[path = "cgroup_check.rs"]
mod check;

use drums::cgroup::{Sample, Section};
use drums::record::{Checkpoint, Session};
use drums_tests::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A tool's output that is one record, decoded into `T`: more than one line fails (as parsing it as one
/// JSON value did).
fn one<T: serde::de::DeserializeOwned>(out: &str) -> T {
    assert_eq!(out.trim().lines().count(), 1, "not one record: {out}");
    decode(out)
}

fn state_root() -> PathBuf {
    let d = std::env::temp_dir().join(format!("drums-cgtest-{}", drums::state::new_id('d')));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn probe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cgroup-probe"))
}

/// PATH with drums-cgroup and cgroup-probe first.
fn path() -> String {
    tool("drums-cgroup");
    format!("{}:{}", probe().parent().unwrap().display(), path_with_tools())
}

fn host_version() -> &'static str {
    match drums::cgroup::detect::layout().expect("this machine has no usable cgroup hierarchy") {
        drums::cgroup::Layout::V1 { .. } => "v1",
        drums::cgroup::Layout::V2 { .. } => "v2",
    }
}

fn scenario(name: &str) -> check::Out {
    require_root();
    let root = state_root();
    let mut child = Command::new("/bin/sh")
        .arg(repo_root().join("tests/cgroup-scenarios.sh"))
        .arg(name)
        .env("PATH", path())
        .env("DRUMS_STATE_DIR", &root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run tests/cgroup-scenarios.sh");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).ok();
        s
    });
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("scenario {name} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = reader.join().unwrap();
    let _ = std::fs::remove_dir_all(&root);
    check::Out::parse(&text)
}

#[test]
fn this_machine_is_v1_with_separate_cpu_and_cpuacct() {
    // The machine; on another machine the scenarios below still run, on whatever it has.
    match drums::cgroup::detect::layout().unwrap() {
        drums::cgroup::Layout::V1 { mounts } => {
            for c in ["cpu", "cpuacct", "memory", "pids", "freezer"] {
                assert!(mounts.contains_key(c), "v1 hierarchy {c} missing: {mounts:?}");
            }
        }
        drums::cgroup::Layout::V2 { mount } => eprintln!("note: this machine is cgroup v2 ({})", mount.path.display()),
    }
}

#[test]
fn limits_read_back_telemetry_and_removal() {
    check::limits(&scenario("limits"), host_version());
}

#[test]
fn fork_beyond_pids_max_gets_eagain() {
    check::pids(&scenario("pids"));
}

#[test]
fn memory_hog_is_contained() {
    check::hog(&scenario("hog"));
}

#[test]
fn removal_after_sigkill_leaves_nothing() {
    check::sigkill(&scenario("sigkill"));
}

#[test]
fn freeze_and_thaw() {
    check::freeze(&scenario("freeze"));
}

#[test]
fn failed_create_leaves_nothing() {
    check::fail(&scenario("fail"));
}

fn spawn(root: &std::path::Path, script: &str) -> Session {
    let o = Command::new(probe()).args(["spawn-session", root.to_str().unwrap(), script]).output().unwrap();
    assert!(o.status.success(), "spawn-session: {}", text(&o.stderr));
    one(&text(&o.stdout))
}

fn cg(root: &std::path::Path, args: &[&str], stdin: &str) -> std::process::Output {
    let mut c = Command::new(tool("drums-cgroup"))
        .args(args)
        .env("DRUMS_STATE_DIR", root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut c.stdin.take().unwrap(), stdin.as_bytes()).unwrap();
    c.wait_with_output().unwrap()
}

fn kill(rec: &Session) {
    unsafe { libc::kill(rec.ns.as_ref().expect("an ns section").init_pid, libc::SIGKILL) };
}

/// A record whose PID namespace is the host's would move every host process: refused before any change.
#[test]
fn refuses_the_host_pid_namespace() {
    require_root();
    let root = state_root();
    let mut rec = spawn(&root, "sleep 30");
    kill(&rec);
    let host = drums::proc::ns_inode(std::process::id() as i32, "pid").unwrap();
    rec.ns.as_mut().unwrap().inodes.pid = host;
    let o = cg(&root, &["create"], &json(&rec));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("ns.inodes.pid"), "{}", text(&o.stderr));
    let id = &rec.id;
    for c in ["cpu", "memory", "pids"] {
        let p = format!("/sys/fs/cgroup/{c}/drums/{id}");
        assert!(!std::path::Path::new(&p).exists(), "{p} left after a refused create");
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// A record pointing a session's cgroup paths at another session (or anywhere else) is refused.
#[test]
fn refuses_paths_of_another_session() {
    require_root();
    let root = state_root();
    let a = spawn(&root, "sleep 30");
    let b = spawn(&root, "sleep 30");
    let o = cg(&root, &["create", "--pids", "32"], &json(&a));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let a2_line = text(&o.stdout);
    let a2: Session = one(&a2_line);
    // Hostile input: b's record naming a's cgroups, a's naming a directory elsewhere.
    let mut hostile = b.clone();
    hostile.cgroup = a2.cgroup.clone();
    for cmd in ["remove", "freeze", "watch"] {
        let o = cg(&root, &[cmd], &json(&hostile));
        assert_eq!(o.status.code(), Some(3), "{cmd}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("cgroup.paths"), "{cmd}: {}", text(&o.stderr));
    }
    let mut elsewhere = a2.clone();
    elsewhere.cgroup.as_mut().expect("a cgroup section").paths.insert("memory".into(), "/etc/drums/x".into());
    assert_eq!(cg(&root, &["remove"], &json(&elsewhere)).status.code(), Some(3));
    // enter adds a process; the real session is intact and removable.
    let extra = Command::new("sleep").arg("30").spawn().unwrap();
    let o = cg(&root, &["enter", "--pid", &extra.id().to_string()], &a2_line);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let mem = a2.cgroup.as_ref().expect("a cgroup section").paths["memory"].clone();
    let procs = std::fs::read_to_string(mem.join("cgroup.procs")).unwrap();
    assert!(procs.lines().any(|l| l == extra.id().to_string()), "entered process not in {}: {procs}", mem.display());
    unsafe { libc::kill(extra.id() as i32, libc::SIGKILL) };
    kill(&a);
    kill(&b);
    let o = cg(&root, &["remove"], &a2_line);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!mem.exists());
    let _ = std::fs::remove_dir_all(&root);
}

fn criu() -> PathBuf {
    if let Some(c) = std::env::var_os("DRUMS_CRIU") {
        return c.into();
    }
    let opt = PathBuf::from("/opt/drums/criu/bin/criu");
    if opt.exists() {
        return opt;
    }
    let o = Command::new("criu").arg("--version").output();
    assert!(o.is_ok(), "no CRIU: neither DRUMS_CRIU, /opt/drums/criu/bin/criu nor criu on PATH (pipelines/setup.sh installs it)");
    PathBuf::from("criu")
}

fn probe_out(args: &[&str], stdin: &Session) -> String {
    let mut c = Command::new(probe()).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut c.stdin.take().unwrap(), json(stdin).as_bytes()).unwrap();
    text(&c.wait_with_output().unwrap().stdout).trim().to_string()
}

fn proc_cgroup(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default().replace('\n', ";")
}

/// A tree dumped from one session and restored with a sibling's cgroup options (`criu::CgroupPlacement`)
/// runs in the sibling's cgroups, under the sibling's limits, and the source's directories are not
/// recreated. The control restore without them shows why they are needed: CRIU recreates the source's
/// cgroups (the directories the source report found left behind after its runs).
#[test]
fn criu_restores_a_sibling_into_its_own_cgroups() {
    require_root();
    let criu = criu();
    let root = state_root();
    let src = spawn(&root, "while :; do sleep 1; done");
    let o = cg(&root, &["create", "--pids", "100"], &json(&src));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let src_line = text(&o.stdout);
    let src: Session = one(&src_line);
    let src_id = src.id.clone();
    let init = src.ns.as_ref().expect("an ns section").init_pid.to_string();
    let img = root.join("img");
    std::fs::create_dir_all(&img).unwrap();
    let dump_args = probe_out(&["criu-dump-args"], &src);
    assert!(dump_args.starts_with("--freeze-cgroup "), "{dump_args}");
    let o = Command::new(&criu)
        .args(["dump", "-t", &init, "-D", img.to_str().unwrap(), "-o", "dump.log"])
        .args(dump_args.split(' '))
        .output()
        .unwrap();
    let log = |f: &str| std::fs::read_to_string(img.join(f)).unwrap_or_default();
    assert!(o.status.success(), "criu dump: {}\n{}", text(&o.stderr), log("dump.log"));
    // The source is gone (dump kills it); its cgroups are removed as its destroy would.
    assert_eq!(cg(&root, &["remove"], &src_line).status.code(), Some(0));

    // The sibling: its own ledger, record and cgroups (different limits), no processes yet.
    let sib_id = drums::state::new_id('d');
    let sib_dir = root.join("sessions").join(&sib_id);
    let owner = drums::proc::me().unwrap();
    drums::ledger::Ledger::create(&sib_dir, &sib_id, owner, None).unwrap();
    let mut sib_s = Session { id: sib_id.clone(), state_dir: sib_dir.clone(), ns: None, cgroup: None, ..src.clone() };
    // drums-restore's calls: prepare_restore before CRIU, enter_all after it.
    let limits = drums::cgroup::Limits::new(2.0, 512 << 20, 77).unwrap();
    drums::cgroup::prepare_restore(&mut sib_s, &limits).unwrap();
    let sib = sib_s.clone();
    let args: Vec<String> = probe_out(&["criu-restore-args"], &sib).split(' ').map(str::to_string).collect();
    assert_eq!(args[0], "--manage-cgroups=soft", "{args:?}");

    let restore = |extra: &[String], pidfile: &str, logname: &str| -> i32 {
        let o = Command::new(&criu)
            .args(["restore", "-d", "-D", img.to_str().unwrap(), "-o", logname, "--pidfile"])
            .arg(root.join(pidfile))
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "criu restore {extra:?}: {}\n{}", text(&o.stderr), log(logname));
        std::fs::read_to_string(root.join(pidfile)).unwrap().trim().parse().unwrap()
    };
    let pid = restore(&args, "pid", "restore.log");
    let pc = proc_cgroup(pid);
    let sec = sib_s.cgroup.clone().expect("prepare_restore wrote the section");
    for (ctrl, p) in &sec.proc_paths {
        assert!(
            pc.split(';').any(|l| l.ends_with(&format!(":{p}")) && l.split(':').nth(1).unwrap().split(',').any(|c| c == ctrl)),
            "restored init not in the sibling's {ctrl} cgroup: {pc}"
        );
    }
    assert!(!pc.contains(&src_id), "restored init in the source's cgroups: {pc}");
    let pids_max = std::fs::read_to_string(sec.paths["pids"].join("pids.max")).unwrap();
    assert_eq!(pids_max.trim(), "77", "CRIU left the sibling's limits alone");
    for c in ["cpu", "memory", "pids"] {
        let p = format!("/sys/fs/cgroup/{c}/drums/{src_id}");
        assert!(!Path::new(&p).exists(), "CRIU recreated the source's {p}");
    }
    sib_s.ns = Some(drums::record::Namespaces {
        init_pid: pid,
        init_start_time: drums::proc::start_time(pid).unwrap(),
        hostname: sib_id.clone(),
        inodes: drums::record::NsInodes {
            pid: drums::proc::ns_inode(pid, "pid").unwrap(),
            mnt: drums::proc::ns_inode(pid, "mnt").unwrap(),
            net: drums::proc::ns_inode(pid, "net").unwrap(),
            ipc: drums::proc::ns_inode(pid, "ipc").unwrap(),
            uts: drums::proc::ns_inode(pid, "uts").unwrap(),
        },
    });
    assert_eq!(drums::cgroup::enter_all(&mut sib_s).unwrap(), 0, "CRIU put every restored process in the sibling's cgroups");
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let o = cg(&root, &["remove"], &json(&sib));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));

    // A sibling without cgroups: CRIU is told to leave cgroups alone, and recreates nothing of the source.
    let mut sib_none = sib.clone();
    sib_none.cgroup = None;
    let none = probe_out(&["criu-restore-args"], &sib_none);
    assert_eq!(none, "--manage-cgroups=ignore");
    let pid = restore(&[none], "pid3", "restore3.log");
    let pc = proc_cgroup(pid);
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(!pc.contains(&src_id), "a sibling without cgroups went into the source's: {pc}");
    for c in ["cpu", "cpuacct", "memory", "pids", "freezer"] {
        let p = format!("/sys/fs/cgroup/{c}/drums/{src_id}");
        assert!(!Path::new(&p).exists(), "CRIU recreated the source's {p} for a sibling without cgroups");
    }

    // Control: without the options, CRIU puts the tree back into the source's paths, recreating them.
    let pid = restore(&[], "pid2", "restore2.log");
    let pc = proc_cgroup(pid);
    unsafe { libc::kill(pid, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(300));
    let mut recreated = vec![];
    for c in ["cpu", "cpuacct", "memory", "pids", "freezer"] {
        let p = PathBuf::from(format!("/sys/fs/cgroup/{c}/drums/{src_id}"));
        if p.exists() {
            drums::cgroup::remove_path(&p).unwrap();
            recreated.push(c);
        }
    }
    assert!(pc.contains(&src_id), "control: a plain restore goes back to the source's cgroups: {pc}");
    assert!(!recreated.is_empty(), "control: a plain restore recreates the source's cgroup directories");
    let _ = std::fs::remove_dir_all(&root);
}

/// Destroys a real session when dropped (drums-sweep, which removes each ledgered cgroup with
/// drums::cgroup::remove_path), so a failing assertion leaves nothing behind.
struct Destroy(std::cell::RefCell<String>);
impl Drop for Destroy {
    fn drop(&mut self) {
        let o = run("drums-sweep", &[], &self.0.borrow());
        if !o.status.success() {
            eprintln!("destroy failed: {}", text(&o.stderr));
        }
    }
}

/// A stage's record: as it printed it (the next stage's input) and decoded.
fn stage(guard: &Destroy, name: &str, args: &[&str], input: &str) -> (String, Session) {
    let o = run(name, args, input);
    assert!(o.status.success(), "{name} {args:?} failed: {}", text(&o.stderr));
    let out = text(&o.stdout);
    *guard.0.borrow_mut() = out.clone();
    let rec = one(&out);
    (out, rec)
}

/// A real Drums session (drums-overlay, drums-ns, drums-desktop) limited between drums-ns and the
/// desktop: every desktop process is inside, `drums-ns exec` joins the cgroups, telemetry sees the
/// desktop's memory and CPU, and the destroy path leaves no directory in any hierarchy.
#[test]
fn real_session_under_limits() {
    require_root();
    let _lock = session_lock();
    let guard = Destroy(std::cell::RefCell::new(String::new()));
    let (a, _) = stage(&guard, "drums-overlay", &["create"], "");
    let (b, _) = stage(&guard, "drums-ns", &["create"], &a);
    let (c, c_rec) = stage(&guard, "drums-cgroup", &["create", "--cpus", "2", "--memory", "4G", "--pids", "4096"], &b);
    let sec = c_rec.cgroup.clone().unwrap_or_else(|| panic!("no cgroup section: {c}"));
    let rb = check::read_back(&sec);
    assert!(sec.applied, "{}", json(&sec));
    assert_eq!(rb.get("cpu_quota_us"), Some(200000), "{}", json(&sec));
    assert_eq!(rb.get("memory_bytes"), Some(4u64 << 30), "{}", json(&sec));
    assert_eq!(rb.get("pids_max"), Some(4096), "{}", json(&sec));
    assert!(sec.processes_moved.unwrap() >= 1, "{}", json(&sec));
    let (d_line, d) = stage(&guard, "drums-desktop", &["start"], &c);
    assert_eq!(d.cgroup.as_ref(), Some(&sec), "later stages keep the cgroup section");
    let id = d.id.as_str();
    let want = format!("/{}/{id}", drums::cgroup::PARENT);

    // Every process of the session's PID namespace is in every one of its cgroups.
    let pidns = d.ns.as_ref().expect("an ns section").inodes.pid;
    let procs = drums::proc::pids_in_pidns(pidns);
    assert!(procs.len() >= 4, "the desktop runs several processes: {procs:?}");
    for p in &procs {
        let pc = proc_cgroup(*p);
        if pc.is_empty() {
            continue; // exited since the scan
        }
        // An exiting process is taken out of its cgroups before it is reaped (cgroup v1 shows "/"):
        // Chromium's launcher script runs short commands such as uname while the desktop comes up.
        let exiting = || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            std::fs::read_to_string(format!("/proc/{p}/stat")).map_or(true, |st| st.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with(['Z', 'X'])))
        };
        if !pc.contains(&format!(":{want}")) && exiting() {
            continue;
        }
        for ctrl in ["cpu", "memory", "pids"] {
            assert!(
                pc.split(';').any(|l| l.ends_with(&format!(":{want}")) && l.split(':').nth(1).unwrap().split(',').any(|c| c == ctrl)),
                "process {p} ({}) not in {ctrl}:{want}: {pc}",
                drums::proc::comm(*p)
            );
        }
    }
    // A process joining with drums-ns exec is put in too.
    let o = Command::new(tool("drums-ns")).args(["exec", "--session", id, "--", "cat", "/proc/self/cgroup"]).output().unwrap();
    assert!(o.status.success(), "drums-ns exec: {}", text(&o.stderr));
    assert!(text(&o.stdout).lines().any(|l| l.contains(":memory:") && l.ends_with(&want)), "exec'd process: {}", text(&o.stdout));

    let o = run("drums-cgroup", &["watch", "--samples", "1"], &d_line);
    assert!(o.status.success(), "watch: {}", text(&o.stderr));
    let x: Sample = one(&text(&o.stdout));
    let xj = json(&x);
    eprintln!("real session sample: {xj}");
    // Sampled right after drums-desktop start returns, while Chromium is still starting: Xvfb and the
    // rest already hold well over 8 MiB (a bare session init holds under 1 MiB).
    assert!(x.figures.get("memory_peak_bytes").unwrap() > 8 << 20, "a desktop uses more than 8 MiB: {xj}");
    assert!(x.figures.get("cpu_usage_ns").unwrap() > 50_000_000, "a desktop start uses CPU: {xj}");
    assert!(x.figures.get("processes").unwrap() >= procs.len() as u64 - 1, "{xj}");
    assert_eq!(x.init_alive, Some(true), "{xj}");

    let paths: Vec<PathBuf> = sec.paths.values().cloned().collect();
    drop(guard);
    for p in &paths {
        assert!(!p.exists(), "{} left after the session was destroyed", p.display());
    }
    for m in drums::destroy::cgroup_mounts() {
        assert!(!m.join(drums::cgroup::PARENT).join(id).exists(), "{} left", m.display());
    }
}

fn in_cgroups(pid: i32, sec: &Section) -> Result<(), String> {
    let pc = proc_cgroup(pid);
    for (ctrl, p) in &sec.proc_paths {
        let ok = pc.split(';').any(|l| {
            let f: Vec<&str> = l.splitn(3, ':').collect();
            f.len() == 3 && f[2] == p && (f[1].split(',').any(|c| c == ctrl) || (ctrl == "unified" && f[1].is_empty()))
        });
        if !ok {
            return Err(format!("{pid} ({}) not in {ctrl}:{p}: {pc}", drums::proc::comm(pid)));
        }
    }
    Ok(())
}

/// Both arms of the first-check driver under limits on real sessions: a cold session limited by the
/// drums-cgroup stage, checkpointed; siblings restored by drums-restore --cgroup run in their own
/// cgroups (every process), never in the source's, the source's directories are not recreated by CRIU
/// after the source is gone, and telemetry gives per-session figures for each; destroy leaves nothing.
#[test]
fn restore_path_siblings_in_their_own_cgroups() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    // Explicit limits through cold.sh's drums-cgroup stage (the defaults are tests/limits.rs's).
    let o = Command::new(repo_root().join("pipelines/cold.sh"))
        .env("PATH", path_with_tools())
        .env("DRUMS_OWNER", std::process::id().to_string())
        .env("DRUMS_CGROUP_ARGS", "--cpus 2 --memory 3G --pids 3000")
        // Host ids: it is checkpointed below.
        .env("DRUMS_OVERLAY_ARGS", "--host-ids")
        .output()
        .unwrap();
    assert!(o.status.success(), "cold.sh: {}", text(&o.stderr));
    let src = text(&o.stdout);
    guard.0.push(src.trim().to_string());
    let src_v: Session = one(&src);
    let src_sec = src_v.cgroup.as_ref().unwrap_or_else(|| panic!("no cgroup section: {src}"));
    let src_rb = check::read_back(src_sec);
    assert_eq!(src_rb.get("memory_bytes"), Some(3u64 << 30), "{}", json(src_sec));
    assert_eq!(src_rb.get("pids_max"), Some(3000), "{}", json(src_sec));
    let src_id = src_v.id.clone();
    let x: Sample = one(&run_ok("drums-cgroup", &["watch", "--samples", "1"], &src));
    assert!(x.figures.get("memory_current_bytes").is_some() && x.figures.get("cpu_usage_ns").is_some(), "cold arm: {}", json(&x));

    let ckpt = run_ok("drums-ckpt", &[], &src);
    let ckpt_v: Checkpoint = one(&ckpt);
    for m in drums::destroy::cgroup_mounts() {
        assert!(!m.join(drums::cgroup::PARENT).join(&src_id).exists(), "the destroyed source's cgroup in {} is left", m.display());
    }

    let out = run_ok("drums-restore", &["--count", "2", "--cgroup", "1.5,1G,512"], &ckpt);
    let sibs: Vec<Session> = decode_lines(out.as_bytes());
    guard.0.extend(out.lines().map(str::to_string));
    assert_eq!(sibs.len(), 2);
    for (s, line) in sibs.iter().zip(out.lines()) {
        let sec = s.cgroup.as_ref().unwrap_or_else(|| panic!("no cgroup section: {line}"));
        let rb = check::read_back(sec);
        assert!(sec.applied, "{}", json(sec));
        assert_eq!(rb.get("cpu_quota_us"), Some(150000), "{}", json(sec));
        assert_eq!(rb.get("memory_bytes"), Some(1u64 << 30), "{}", json(sec));
        assert_eq!(rb.get("pids_max"), Some(512), "{}", json(sec));
        let procs = drums::proc::pids_in_pidns(s.ns.as_ref().expect("an ns section").inodes.pid);
        assert!(procs.len() >= 4, "restored desktop processes: {procs:?}");
        for p in procs {
            if drums::proc::alive(p, drums::proc::start_time(p).unwrap_or(0)) {
                in_cgroups(p, sec).unwrap();
                assert!(!proc_cgroup(p).contains(&src_id), "{p} in the source's cgroups");
            }
        }
        let x: Sample = one(&run_ok("drums-cgroup", &["watch", "--samples", "1"], line));
        let xj = json(&x);
        eprintln!("restored sibling sample: {xj}");
        assert!(x.figures.get("memory_peak_bytes").unwrap() > 10 << 20, "restore arm: the restored memory is charged to the sibling: {xj}");
        assert!(x.figures.get("cpu_usage_ns").is_some(), "{xj}");
    }
    for m in drums::destroy::cgroup_mounts() {
        assert!(!m.join(drums::cgroup::PARENT).join(&src_id).exists(), "CRIU recreated the source's cgroup in {}", m.display());
    }
    let ids: Vec<String> = sibs.iter().map(|s| s.id.clone()).collect();
    drop(guard);
    for m in drums::destroy::cgroup_mounts() {
        for id in &ids {
            assert!(!m.join(drums::cgroup::PARENT).join(id).exists(), "sibling cgroup left in {}", m.display());
        }
    }
    // The checkpoint and its mapped files (drums-ckpt(1)), which live in a directory of their own.
    for dir in [Some(&ckpt_v.dir), ckpt_v.mapped.as_ref().map(|m| &m.dir)].into_iter().flatten() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
