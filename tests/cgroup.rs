//! drums-cgroup on this machine's real cgroup hierarchies (v1 hybrid on the development machines): the
//! scenarios of tests/cgroup-scenarios.sh, checked by tests/cgroup_check.rs, plus the refusals.
//! The same scenarios run on a real cgroup v2 in tests/cgroup_v2_qemu.rs.

#[path = "cgroup_check.rs"]
mod check;

use drums_tests::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

fn spawn(root: &std::path::Path, script: &str) -> serde_json::Value {
    let o = Command::new(probe()).args(["spawn-session", root.to_str().unwrap(), script]).output().unwrap();
    assert!(o.status.success(), "spawn-session: {}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
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

fn kill(rec: &serde_json::Value) {
    unsafe { libc::kill(rec["ns"]["init_pid"].as_i64().unwrap() as i32, libc::SIGKILL) };
}

/// A record whose PID namespace is the host's would move every host process: refused before any change.
#[test]
fn refuses_the_host_pid_namespace() {
    require_root();
    let root = state_root();
    let mut rec = spawn(&root, "sleep 30");
    kill(&rec);
    let host = drums::proc::ns_inode(std::process::id() as i32, "pid").unwrap();
    rec["ns"]["inodes"]["pid"] = host.into();
    let o = cg(&root, &["create"], &rec.to_string());
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("ns.inodes.pid"), "{}", text(&o.stderr));
    let id = rec["id"].as_str().unwrap();
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
    let o = cg(&root, &["create", "--pids", "32"], &a.to_string());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let a2: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut hostile = b.clone();
    hostile["cgroup"] = a2["cgroup"].clone();
    for cmd in ["remove", "freeze", "watch"] {
        let o = cg(&root, &[cmd], &hostile.to_string());
        assert_eq!(o.status.code(), Some(3), "{cmd}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("cgroup.paths"), "{cmd}: {}", text(&o.stderr));
    }
    let mut elsewhere = a2.clone();
    elsewhere["cgroup"]["paths"]["memory"] = "/etc/drums/x".into();
    assert_eq!(cg(&root, &["remove"], &elsewhere.to_string()).status.code(), Some(3));
    // enter adds a process; the real session is intact and removable.
    let extra = Command::new("sleep").arg("30").spawn().unwrap();
    let o = cg(&root, &["enter", "--pid", &extra.id().to_string()], &a2.to_string());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let mem = a2["cgroup"]["paths"]["memory"].as_str().unwrap();
    let procs = std::fs::read_to_string(format!("{mem}/cgroup.procs")).unwrap();
    assert!(procs.lines().any(|l| l == extra.id().to_string()), "entered process not in {mem}: {procs}");
    unsafe { libc::kill(extra.id() as i32, libc::SIGKILL) };
    kill(&a);
    kill(&b);
    let o = cg(&root, &["remove"], &a2.to_string());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!std::path::Path::new(mem).exists());
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

fn probe_out(args: &[&str], stdin: &serde_json::Value) -> String {
    let mut c = Command::new(probe()).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut c.stdin.take().unwrap(), stdin.to_string().as_bytes()).unwrap();
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
    let o = cg(&root, &["create", "--pids", "100"], &src.to_string());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let src: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let src_id = src["id"].as_str().unwrap().to_string();
    let init = src["ns"]["init_pid"].as_i64().unwrap().to_string();
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
    assert_eq!(cg(&root, &["remove"], &src.to_string()).status.code(), Some(0));

    // The sibling: its own ledger, record and cgroups (different limits), no processes yet.
    let sib_id = drums::state::new_id('d');
    let sib_dir = root.join("sessions").join(&sib_id);
    let owner = drums::proc::me().unwrap();
    drums::ledger::Ledger::create(&sib_dir, &sib_id, owner, None).unwrap();
    let mut sib = src.clone();
    sib["id"] = sib_id.clone().into();
    sib["state_dir"] = sib_dir.to_str().unwrap().into();
    sib["ns"] = serde_json::Value::Null;
    sib["cgroup"] = serde_json::Value::Null;
    // drums-restore's calls: prepare_restore before CRIU, enter_all after it.
    let mut sib_s: drums::Session = serde_json::from_value(sib).unwrap();
    let limits = drums::cgroup::Limits::new(2.0, 512 << 20, 77).unwrap();
    drums::cgroup::prepare_restore(&mut sib_s, &limits).unwrap();
    let sib = serde_json::to_value(&sib_s).unwrap();
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
    let o = cg(&root, &["remove"], &sib.to_string());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));

    // A sibling without cgroups: CRIU is told to leave cgroups alone, and recreates nothing of the source.
    let mut sib_none = sib.clone();
    sib_none["cgroup"] = serde_json::Value::Null;
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

fn stage(guard: &Destroy, name: &str, args: &[&str], input: &str) -> serde_json::Value {
    let o = run(name, args, input);
    assert!(o.status.success(), "{name} {args:?} failed: {}", text(&o.stderr));
    let out = text(&o.stdout);
    *guard.0.borrow_mut() = out.clone();
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{name}: not one record ({e}): {out}"))
}

/// A real Drums session (drums-overlay, drums-ns, drums-desktop) limited between drums-ns and the
/// desktop: every desktop process is inside, `drums-ns exec` joins the cgroups, telemetry sees the
/// desktop's memory and CPU, and the destroy path leaves no directory in any hierarchy.
#[test]
fn real_session_under_limits() {
    require_root();
    let _lock = session_lock();
    let guard = Destroy(std::cell::RefCell::new(String::new()));
    let a = stage(&guard, "drums-overlay", &["create"], "");
    let b = stage(&guard, "drums-ns", &["create"], &a.to_string());
    let c = stage(&guard, "drums-cgroup", &["create", "--cpus", "2", "--memory", "4G", "--pids", "4096"], &b.to_string());
    let sec = c["cgroup"].clone();
    assert_eq!(sec["applied"], true, "{sec}");
    assert_eq!(sec["read_back"]["cpu_quota_us"], 200000);
    assert_eq!(sec["read_back"]["memory_bytes"], 4u64 << 30);
    assert_eq!(sec["read_back"]["pids_max"], 4096);
    assert!(sec["processes_moved"].as_u64().unwrap() >= 1);
    let d = stage(&guard, "drums-desktop", &["start"], &c.to_string());
    assert_eq!(d["cgroup"], sec, "later stages keep the cgroup section");
    let id = d["id"].as_str().unwrap();
    let want = format!("/{}/{id}", drums::cgroup::PARENT);

    // Every process of the session's PID namespace is in every one of its cgroups.
    let pidns = d["ns"]["inodes"]["pid"].as_u64().unwrap();
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

    let o = run("drums-cgroup", &["watch", "--samples", "1"], &d.to_string());
    assert!(o.status.success(), "watch: {}", text(&o.stderr));
    let x: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    eprintln!("real session sample: {x}");
    // Sampled right after drums-desktop start returns, while Chromium is still starting: Xvfb and the
    // rest already hold well over 8 MiB (a bare session init holds under 1 MiB).
    assert!(x["memory_peak_bytes"].as_u64().unwrap() > 8 << 20, "a desktop uses more than 8 MiB: {x}");
    assert!(x["cpu_usage_ns"].as_u64().unwrap() > 50_000_000, "a desktop start uses CPU: {x}");
    assert!(x["processes"].as_u64().unwrap() >= procs.len() as u64 - 1, "{x}");
    assert_eq!(x["init_alive"], true);

    let paths: Vec<String> = sec["paths"].as_object().unwrap().values().map(|v| v.as_str().unwrap().to_string()).collect();
    drop(guard);
    for p in &paths {
        assert!(!Path::new(p).exists(), "{p} left after the session was destroyed");
    }
    for m in drums::destroy::cgroup_mounts() {
        assert!(!m.join(drums::cgroup::PARENT).join(id).exists(), "{} left", m.display());
    }
}

fn in_cgroups(pid: i32, sec: &serde_json::Value) -> Result<(), String> {
    let pc = proc_cgroup(pid);
    for (ctrl, p) in sec["proc_paths"].as_object().unwrap() {
        let p = p.as_str().unwrap();
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
        .output()
        .unwrap();
    assert!(o.status.success(), "cold.sh: {}", text(&o.stderr));
    let src = text(&o.stdout);
    guard.0.push(src.trim().to_string());
    let src_v: serde_json::Value = serde_json::from_str(src.trim()).unwrap();
    assert_eq!(src_v["cgroup"]["read_back"]["memory_bytes"], 3u64 << 30, "{}", src_v["cgroup"]);
    assert_eq!(src_v["cgroup"]["read_back"]["pids_max"], 3000);
    let src_id = src_v["id"].as_str().unwrap().to_string();
    let x: serde_json::Value = serde_json::from_str(run_ok("drums-cgroup", &["watch", "--samples", "1"], &src).trim()).unwrap();
    assert!(x["memory_current_bytes"].as_u64().is_some() && x["cpu_usage_ns"].as_u64().is_some(), "cold arm: {x}");

    let ckpt = run_ok("drums-ckpt", &[], &src);
    let ckpt_v: serde_json::Value = serde_json::from_str(ckpt.trim()).unwrap();
    for m in drums::destroy::cgroup_mounts() {
        assert!(!m.join(drums::cgroup::PARENT).join(&src_id).exists(), "the destroyed source's cgroup in {} is left", m.display());
    }

    let out = run_ok("drums-restore", &["--count", "2", "--cgroup", "1.5,1G,512"], &ckpt);
    let sibs: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    guard.0.extend(out.lines().map(str::to_string));
    assert_eq!(sibs.len(), 2);
    for s in &sibs {
        let sec = &s["cgroup"];
        assert_eq!(sec["applied"], true, "{sec}");
        assert_eq!(sec["read_back"]["cpu_quota_us"], 150000);
        assert_eq!(sec["read_back"]["memory_bytes"], 1u64 << 30);
        assert_eq!(sec["read_back"]["pids_max"], 512);
        let procs = drums::proc::pids_in_pidns(s["ns"]["inodes"]["pid"].as_u64().unwrap());
        assert!(procs.len() >= 4, "restored desktop processes: {procs:?}");
        for p in procs {
            if drums::proc::alive(p, drums::proc::start_time(p).unwrap_or(0)) {
                in_cgroups(p, sec).unwrap();
                assert!(!proc_cgroup(p).contains(&src_id), "{p} in the source's cgroups");
            }
        }
        let x: serde_json::Value = serde_json::from_str(run_ok("drums-cgroup", &["watch", "--samples", "1"], &s.to_string()).trim()).unwrap();
        eprintln!("restored sibling sample: {x}");
        assert!(x["memory_peak_bytes"].as_u64().unwrap() > 10 << 20, "restore arm: the restored memory is charged to the sibling: {x}");
        assert!(x["cpu_usage_ns"].as_u64().is_some(), "{x}");
    }
    for m in drums::destroy::cgroup_mounts() {
        assert!(!m.join(drums::cgroup::PARENT).join(&src_id).exists(), "CRIU recreated the source's cgroup in {}", m.display());
    }
    let ids: Vec<String> = sibs.iter().map(|s| s["id"].as_str().unwrap().to_string()).collect();
    drop(guard);
    for m in drums::destroy::cgroup_mounts() {
        for id in &ids {
            assert!(!m.join(drums::cgroup::PARENT).join(id).exists(), "sibling cgroup left in {}", m.display());
        }
    }
    // The checkpoint and its mapped files (drums-ckpt(1)), which live in a directory of their own.
    for dir in [ckpt_v["dir"].as_str(), ckpt_v["mapped"]["dir"].as_str()].into_iter().flatten() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
