//! The cold path on a real session: namespaces, overlay, Xvfb, openbox, Chromium, guest; then destroy.

use drums_tests::*;
use drums::error::ErrorRecord;
use drums::record::Session;
use serde_json::Value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A tool's output that is one record, decoded into `T`: more than one line fails (as parsing it as one
/// JSON value did).
fn one<T: serde::de::DeserializeOwned>(out: &str) -> T {
    assert_eq!(out.trim().lines().count(), 1, "not one record: {out}");
    decode(out)
}

fn cold_session(png: &std::path::Path) -> (Session, Sessions) {
    let o = Command::new(repo_root().join("pipelines/cold.sh"))
        .env("PATH", path_with_tools())
        .env("DRUMS_OWNER", std::process::id().to_string())
        .env("DRUMS_READY_ARGS", format!("--png {}", png.display()))
        .output()
        .expect("run pipelines/cold.sh");
    let out = text(&o.stdout);
    assert!(o.status.success(), "cold.sh failed: {}\n{out}", text(&o.stderr));
    let rec: Session = one(&out);
    let guard = Sessions(vec![out]);
    (rec, guard)
}

fn inside(id: &str, script: &str) -> (i32, String) {
    let o = Command::new(tool("drums-ns")).args(["exec", "--session", id, "--", "sh", "-c", script]).output().unwrap();
    (o.status.code().unwrap_or(-1), text(&o.stdout).trim().to_string())
}

#[test]
fn cold_session_is_ready_isolated_and_leaves_nothing() {
    require_root();
    let _lock = session_lock();
    let dir = std::env::temp_dir().join(format!("drums-cold-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png_path = dir.join("cold.png");
    let (rec, guard) = cold_session(&png_path);
    let id = rec.id.clone();
    let ready = rec.ready.as_ref().expect("a ready section");
    let ns = rec.ns.as_ref().expect("an ns section");
    let desktop = rec.desktop.as_ref().expect("a desktop section");
    let net = rec.net.as_ref().expect("a net section");

    // Agent-ready with the real page: evidence saved, changed fraction above the bar, exact title.
    assert!(ready.ready, "{}", json(ready));
    assert!(ready.changed_fraction.unwrap() > 0.10, "{}", json(ready));
    assert!(ready.titles_seen.iter().any(|t| t == "drums-ready"), "{}", json(ready));
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&png_path).expect("the PNG evidence was saved")));
    let reader = decoder.read_info().expect("a valid PNG");
    assert_eq!((reader.info().width, reader.info().height), (1920, 1080));

    // From inside: its own PID 1, hostname, network namespace and root; the host's processes invisible.
    let (_, comm1) = inside(&id, "cat /proc/1/comm");
    assert_eq!(comm1, "drums-init");
    let (_, host) = inside(&id, "hostname");
    assert_eq!(host, ns.hostname);
    let (_, netns) = inside(&id, "readlink /proc/self/ns/net");
    assert_eq!(netns, format!("net:[{}]", ns.inodes.net));
    assert_ne!(netns, std::fs::read_link("/proc/self/ns/net").unwrap().display().to_string());
    let (_, root) = inside(&id, "awk '$5 == \"/\" { for (i = 7; i <= NF; i++) if ($i == \"-\") { print $(i+1); exit } }' /proc/self/mountinfo");
    assert_eq!(root, "overlay", "the session's root is its overlay");
    let (_, pids) = inside(&id, "ls /proc | grep -c '^[0-9]'");
    let n: usize = pids.parse().unwrap();
    assert!(n < 60, "{n} processes visible inside: the host's leak in");
    let me = std::process::id();
    let (code, _) = inside(&id, &format!("grep -q drums-tests /proc/{me}/cmdline 2>/dev/null"));
    assert_ne!(code, 0, "the test process (host pid {me}) must be invisible inside");
    // The session's own /dev, /run and /var/lib/drums: nothing of the host's shows there.
    // /run/user/UID/bus is the session's own (drums-desktop links its bus there, where OSWorld's tasks name it).
    let (_, run) = inside(&id, "ls -A /run /var/lib/drums | grep -v ':$' | grep -vx user | grep -c . || true");
    assert_eq!(run, "0", "the host's /run or Drums' checkpoints show inside");
    let (_, user_run) = inside(&id, "find /run/user -mindepth 1 -printf '%P %y\\n' | sort | tr '\\n' ' '");
    assert_eq!(user_run, "1000 d 1000/bus l", "/run/user holds only the desktop user's bus link");
    let (_, devs) = inside(&id, "ls /dev | tr '\\n' ' '");
    assert_eq!(devs, "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero", "the session's /dev");
    // Xvfb without MIT-SHM by default (drums-desktop(1)), and the record says so.
    assert!(!desktop.mit_shm, "{}", json(desktop));
    let (_, ext) = inside(&id, "DISPLAY=:0 xdpyinfo -queryExtensions | grep -c MIT-SHM || true");
    assert_eq!(ext, "0", "Xvfb offers MIT-SHM");
    assert!(!desktop.glx, "{}", json(desktop));
    let (_, ext) = inside(&id, "DISPLAY=:0 xdpyinfo -queryExtensions | grep -c GLX || true");
    assert_eq!(ext, "0", "Xvfb offers GLX");
    // A command that cannot be started: a shell's 127, and an error object saying why.
    let o = Command::new(tool("drums-ns")).args(["exec", "--session", &id, "--", "/no/such/drums-command"]).output().unwrap();
    assert_eq!(o.status.code(), Some(127));
    // One error object and nothing else on stderr.
    let err: ErrorRecord = one(&text(&o.stderr));
    assert_eq!((err.kind.as_str(), err.exit), ("exec_failed", 127), "{}", json(&err));
    assert!(err.message.contains("No such file"), "{}", json(&err));
    let (_, write) = inside(&id, "echo x > /etc/drums-cold-probe && cat /etc/drums-cold-probe");
    assert_eq!(write, "x");
    assert!(!std::path::Path::new("/etc/drums-cold-probe").exists(), "a write inside must not reach the host");

    // The guest answers from the host on the session's address.
    let guest = desktop.guest_url.as_deref().expect("the desktop started the guest");
    let (_, platform) = http("GET", &format!("{guest}/platform"), None, Duration::from_secs(10));
    assert!(platform.contains("Linux"), "GET /platform: {platform}");

    // A listener on the host, on the veth's host address and on 127.0.0.1, cannot be reached from inside.
    let host_addr = net.host_addr.as_str();
    for addr in [host_addr, "127.0.0.1"] {
        let l = TcpListener::bind(format!("{addr}:0")).unwrap();
        l.set_nonblocking(true).unwrap();
        let port = l.local_addr().unwrap().port();
        let (code, _) = inside(&id, &format!("timeout 3 bash -c 'echo hi > /dev/tcp/{addr}/{port}'"));
        assert_ne!(code, 0, "the session connected to a host listener on {addr}:{port}");
        assert!(l.accept().is_err(), "the host listener on {addr} accepted a connection from the session");
    }

    let state_dir = rec.state_dir.display().to_string();
    let host_if = net.host_if.clone();
    let slot = drums::net::slots_dir().join(net.slot.to_string());
    assert_eq!(std::fs::read_to_string(&slot).ok().as_deref(), Some(id.as_str()), "the session holds its address slot {}", slot.display());
    let pidns = ns.inodes.pid;
    drop(guard);
    assert_gone(&state_dir, &[host_if], &[slot], Some(pidns), &id);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Nothing of session `id` is left: no process in its PID namespace (when known), no mount under its state
/// directory, none of its links or address-slot files (those named, and any slot file naming the session),
/// no state directory, no cgroup.
pub fn assert_gone(state_dir: &str, host_ifs: &[String], slots: &[PathBuf], pidns: Option<u64>, id: &str) {
    if let Some(pidns) = pidns {
        assert!(drums::proc::pids_in_pidns(pidns).iter().all(|&p| drums::proc::state(p) == Some('Z')), "processes of {id} are left");
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(state_dir), "mounts of {id} are left");
    for host_if in host_ifs {
        assert!(!Path::new(&format!("/sys/class/net/{host_if}")).exists(), "link {host_if} is left");
    }
    for slot in slots {
        assert!(!slot.exists(), "address slot {} of {id} is left", slot.display());
    }
    // A slot file holds its session's id, so one that the ledger never named (only a bug could make one:
    // the ledger line comes first) is found as well.
    for e in std::fs::read_dir(drums::net::slots_dir()).into_iter().flatten().flatten() {
        assert_ne!(std::fs::read_to_string(e.path()).unwrap_or_default(), id, "address slot {} of {id} is left", e.path().display());
    }
    assert!(!Path::new(state_dir).exists(), "state directory {state_dir} is left");
    for c in ["cpu", "memory", "pids", "cpuacct", "freezer"] {
        assert!(!Path::new(&format!("/sys/fs/cgroup/{c}/drums/{id}")).exists(), "cgroup {c}/drums/{id} is left");
    }
}

/// SIGKILL a stage at several points of its work; destroying from the ledger alone leaves nothing.
#[test]
fn killed_stages_leave_nothing_after_destroy() {
    require_root();
    let _lock = session_lock();
    for (stage, delay_ms) in [("ns", 2u64), ("ns", 15), ("ns", 40), ("desktop", 5), ("desktop", 60), ("desktop", 300)] {
        // What is here before this round: whatever the round leaves (an init that was killed before the
        // ledger named it included) is what is new afterwards.
        let before = inventory();
        let o = Command::new(tool("drums-overlay")).args(["create"]).env("DRUMS_OWNER", std::process::id().to_string()).output().unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        let mut rec = text(&o.stdout);
        let id = one::<Session>(&rec).id;
        if stage == "desktop" {
            let o = run("drums-ns", &["create"], &rec);
            assert!(o.status.success(), "{}", text(&o.stderr));
            rec = text(&o.stdout);
        }
        let mut child = Command::new(tool(&format!("drums-{stage}")))
            .arg(if stage == "ns" { "create" } else { "start" })
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(rec.as_bytes()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        let ledger = drums::ledger::read_file(&drums::state::session_dir(&id).join("ledger.jsonl")).unwrap();
        let init_pidns = ledger.live().iter().find_map(|r| match r {
            drums::ledger::Resource::Process { pid, init: true, .. } => drums::proc::ns_inode(*pid, "pid").ok(),
            _ => None,
        });
        let links: Vec<String> = ledger.live().iter().filter_map(|r| match r {
            drums::ledger::Resource::Link { name } => Some(name.clone()),
            _ => None,
        }).collect();
        let slots: Vec<PathBuf> = ledger.live().iter().filter_map(|r| match r {
            drums::ledger::Resource::Slot { path, .. } => Some(path.clone()),
            _ => None,
        }).collect();
        let o = Command::new(tool("drums-sweep")).args(["--session", &id]).output().unwrap();
        assert!(o.status.success(), "{stage} killed after {delay_ms} ms: destroy failed: {}{}", text(&o.stdout), text(&o.stderr));
        let state_dir = drums::state::session_dir(&id).display().to_string();
        assert_gone(&state_dir, &links, &slots, init_pidns, &id);
        let left = inventory().new_since(&before);
        assert!(left.is_empty(), "{stage} killed after {delay_ms} ms: left after destroy: {left:?}");
    }
}

fn bare_session() -> (String, Sessions) {
    let a = Command::new(tool("drums-overlay")).args(["create"]).env("DRUMS_OWNER", std::process::id().to_string()).output().unwrap();
    assert!(a.status.success(), "{}", text(&a.stderr));
    let b = run_ok("drums-ns", &["create"], &text(&a.stdout));
    (b.clone(), Sessions(vec![b]))
}

fn last_error(o: &std::process::Output) -> ErrorRecord {
    error_record(&o.stderr)
}

/// `--guest-user`: the guest runs commands as that account (by default `user`, the image's desktop user).
#[test]
fn the_guest_runs_commands_as_its_guest_user() {
    require_root();
    let o = run("drums-desktop", &["start", "--no-guest", "--guest-user", "root"], "");
    assert_eq!(o.status.code(), Some(2), "--guest-user without a guest: {}", text(&o.stderr));
    let _lock = session_lock();
    let before = inventory();
    let (rec, guard) = bare_session();
    let rec = run_ok("drums-desktop", &["start", "--no-chromium", "--guest-user", "daemon"], &rec);
    let v: Session = one(&rec);
    let guest = v.desktop.as_ref().and_then(|d| d.guest_url.as_deref()).expect("the guest was started");
    let (status, body) = http("POST", &format!("{guest}/execute"), Some(&serde_json::json!({"command": "id -un", "shell": true})), Duration::from_secs(10));
    assert_eq!(status, 200, "{body}");
    // The guest's reply is OSWorld's HTTP protocol, not a Drums record.
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["output"], "daemon\n", "{body}");
    drop(guard);
    let left = inventory().new_since(&before);
    assert!(left.is_empty(), "left after destroy: {left:?}");
}

/// A desktop process that cannot start fails `drums-desktop start` with exit 5 and an error naming it and
/// its log; no record comes out, and the session it was started in is still destroyed from its ledger.
/// The guest is given a user the session does not have, so it exits at once; `drums-ns exec --detach` of
/// a program that does not exist fails the same way instead of printing a record.
#[test]
fn a_process_that_does_not_start_is_named_and_its_session_destroyed() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let (rec, guard) = bare_session();
    let id = one::<Session>(&rec).id;
    let o = Command::new(tool("drums-ns")).args(["exec", "--detach", "--session", &id, "--", "/no/such/program"]).output().unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "no process record for a command that never ran: {}", text(&o.stdout));
    assert!(last_error(&o).message.contains("/no/such/program"), "{}", text(&o.stderr));

    // An account the session does not have is refused before anything starts.
    let o = run("drums-desktop", &["start", "--no-chromium", "--guest-user", "drums-no-such-user"], &rec);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(last_error(&o).message.contains("drums-no-such-user"), "{}", text(&o.stderr));
    // The guest's port taken by something else in the session: the guest exits at once, named.
    let o = Command::new(tool("drums-ns")).args(["exec", "--detach", "--session", &id, "--", "python3", "-m", "http.server", "--bind", "0.0.0.0", "5000"]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let listening = || Command::new(tool("drums-ns")).args(["exec", "--session", &id, "--", "python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 5000), 1)"]).stderr(std::process::Stdio::null()).status().unwrap().success();
    let t0 = std::time::Instant::now();
    while !listening() {
        assert!(t0.elapsed() < Duration::from_secs(20), "the port-taker did not listen");
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = run("drums-desktop", &["start", "--no-chromium"], &rec);
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "no record when the guest died: {}", text(&o.stdout));
    let e = last_error(&o);
    assert_eq!((e.kind.as_str(), e.process.as_deref(), e.log.as_deref()), ("failed", Some("guest"), Some(Path::new("/tmp/drums/guest.log"))), "{}", json(&e));
    assert!(e.message.contains("in use"), "the message quotes the guest's log: {}", json(&e));
    let state_dir = drums::state::session_dir(&id).display().to_string();
    drop(guard);
    assert_gone(&state_dir, &[], &[], None, &id);
    let left = inventory().new_since(&before);
    assert!(left.is_empty(), "left after destroy: {left:?}");
}

/// Chromium measures its on-device model "performance class" in a utility process a fixed delay after it
/// starts (3 minutes); a sibling restored from a checkpoint older than that ran the measurement during
/// its reseed. drums-desktop gives Chromium the answer (`--optimization-guide-performance-class=7`), so
/// the process is never launched. The delay is cut to 1 s here (a feature parameter); the control, the
/// same session with the answer taken back (class 0 means "measure"), shows the measurement does start.
#[test]
fn chromium_never_launches_its_on_device_model_measurement() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    const DUE_IN_1S: &str = "--chromium-arg=--enable-features=NetworkServiceInProcess2,NetworkServiceInProcess,LogOnDeviceMetricsOnStartup:on_device_startup_metric_delay/1s";
    let measures = |desktop_args: &str| -> bool {
        let mut guard = Sessions(vec![]);
        let (_, rec) = cold_session_with(&mut guard, &[("DRUMS_OVERLAY_ARGS", "--host-ids"), ("DRUMS_DESKTOP_ARGS", desktop_args)]);
        let pidns = rec.ns.as_ref().expect("a cold session has namespaces").inodes.pid;
        // The process may live only briefly (here it crashes at its start): it is seen running, or its end
        // is seen in Chromium's log.
        let log = rec.overlay.as_ref().expect("a cold session has an overlay").merged.join("tmp/drums/chromium.log");
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_secs(4) {
            let running = drums::proc::pids_in_pidns(pidns).into_iter().any(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| String::from_utf8_lossy(&c).contains("on_device_model.mojom.OnDeviceModelService"))
            });
            if running || std::fs::read_to_string(&log).is_ok_and(|l| l.contains("on_device_model")) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    };
    assert!(!measures(DUE_IN_1S), "Chromium launched its on-device model service although drums-desktop gave it the performance class");
    assert!(measures(&format!("{DUE_IN_1S} --chromium-arg=--optimization-guide-performance-class=0")), "control: with the class taken back, Chromium measures it within 4 s (else this test watches nothing)");
    let left = inventory().new_since(&before);
    assert!(left.is_empty(), "left after destroy: {left:?}");
}
