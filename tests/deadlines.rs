//! No wait without a deadline (issue 31): a peer that stops answering ends the tools' waits at their
//! stated timeouts. The X server of a cold session and of a restored sibling is stopped with SIGSTOP
//! (it keeps accepting connections in the kernel's backlog and says nothing, as a wedged Xvfb does):
//! drums-ready must exit 1 within its --timeout plus 1 s. A restored sibling's Chromium is stopped:
//! drums-reseed must end within its browser deadline with an error that says Chromium does not answer.
//! A session whose Chromium was killed is not ready at once. Each session is then destroyed and nothing
//! of it is left after drums-sweep.

use drums::record::{Checkpoint, Session};
use drums_tests::*;
use std::time::{Duration, Instant};

/// The host PID of the desktop process `role` of a session record.
fn host_pid(s: &Session, role: &str) -> i32 {
    let d = s.desktop.as_ref().expect("the session has a desktop");
    let p = d.processes.iter().find(|p| p.role == role).unwrap_or_else(|| panic!("no {role} in {}", json(s)));
    let pid = p.host_pid.unwrap_or_else(|| panic!("{role} has no host pid in {}", json(s)));
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "{role} (pid {pid}) is not running");
    pid
}

fn signal(pid: i32, sig: i32) {
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig}): {}", std::io::Error::last_os_error());
}

/// Stops the process when made and continues it when dropped, so that a failing assertion leaves no
/// stopped process behind for the sweep.
struct Stopped(i32);
impl Stopped {
    fn new(pid: i32) -> Stopped {
        signal(pid, libc::SIGSTOP);
        // Stopped once /proc says so (T): the signal is delivered asynchronously.
        let t0 = Instant::now();
        while !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().rsplit(')').next().unwrap_or("").trim_start().starts_with('T') {
            assert!(t0.elapsed() < Duration::from_secs(5), "pid {pid} did not stop");
            std::thread::sleep(Duration::from_millis(5));
        }
        Stopped(pid)
    }
}
impl Drop for Stopped {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// drums-ready --timeout `timeout` against `record`, whose X server is stopped: exit 1 (not agent-ready,
/// the display named), no sooner than the timeout and no later than the timeout plus 1 s.
fn ready_fails_in_time(record: &str, what: &str) {
    let timeout = Duration::from_secs(3);
    let t0 = Instant::now();
    let o = run("drums-ready", &["--timeout", "3s"], record);
    let took = t0.elapsed();
    eprintln!("{what}: drums-ready --timeout 3s against a stopped X server: exit {:?} after {:.3} s", o.status.code(), took.as_secs_f64());
    assert_eq!(o.status.code(), Some(1), "{what}: drums-ready must say not ready: {}", text(&o.stderr));
    assert!(took <= timeout + Duration::from_secs(1), "{what}: drums-ready took {:.3} s, more than its timeout (3 s) + 1 s", took.as_secs_f64());
    assert!(took >= timeout, "{what}: drums-ready gave up after {:.3} s, before its timeout", took.as_secs_f64());
    let err = text(&o.stderr);
    assert!(err.contains("not agent-ready") && err.contains("display"), "{what}: the error must say the display failed: {err}");
    let r: Session = one(&text(&o.stdout));
    let ready = r.ready.expect("a ready section");
    assert!(!ready.ready && ready.failed == ["display"], "{what}: {}", json(&ready));
}

#[test]
fn a_stopped_x_server_or_chromium_ends_the_waits_at_their_deadlines() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    {
        let mut guard = Sessions::default();
        let (src, s) = source_session(&mut guard);

        // A clean checkpoint (drums-reseed renews the browser of its siblings) and one sibling, not yet reseeded.
        let ckpt = run_ok("drums-ckpt", &["--clean", "--leave-running"], &src);
        let _dir = CheckpointDir(one::<Checkpoint>(&ckpt).dir);
        let restored = run_ok("drums-restore", &[], &ckpt);
        guard.add(&restored);
        let sib: Session = one(&restored);

        // drums-reseed against the sibling's stopped Chromium: an error at its deadline, saying so.
        {
            let _chromium = Stopped::new(host_pid(&sib, "chromium"));
            let t0 = Instant::now();
            let o = run("drums-reseed", &[], &restored);
            let took = t0.elapsed();
            eprintln!("restored sibling: drums-reseed against a stopped Chromium: exit {:?} after {:.3} s", o.status.code(), took.as_secs_f64());
            // The browser's part has BROWSER_TIMEOUT; the steps before it (records, hostname, MAC, wipe)
            // took 0.4-0.9 s here on a loaded machine, and are given 3 s.
            let limit = drums::reseed::BROWSER_TIMEOUT + Duration::from_secs(3);
            assert_eq!(o.status.code(), Some(5), "drums-reseed must fail: {}", text(&o.stderr));
            assert!(took <= limit, "drums-reseed took {:.3} s, more than its browser deadline + 3 s", took.as_secs_f64());
            let err = error_record(&o.stderr);
            assert!(err.message.contains("DevTools") && err.message.contains("does not answer"), "the error must say Chromium does not answer: {}", err.message);
        }
        // Continued, the same Chromium is reseeded and the sibling is agent-ready.
        let sib_rec = run_ok("drums-ready", &[], &run_ok("drums-reseed", &[], &restored));

        // drums-ready against the stopped X server of the sibling, then of the source.
        {
            let _x = Stopped::new(host_pid(&sib, "xvfb"));
            ready_fails_in_time(&sib_rec, "restored sibling");
        }
        {
            let _x = Stopped::new(host_pid(&s, "xvfb"));
            ready_fails_in_time(&src, "cold session");
            // A second run while the first's connection still waits in the stopped server's backlog.
            ready_fails_in_time(&src, "cold session, again");
            // The guest's screenshot: an error at its X deadline, not a request that hangs.
            let guest = s.desktop.as_ref().and_then(|d| d.guest_url.clone()).expect("the session has a guest");
            let t0 = Instant::now();
            let (status, body) = http("GET", &format!("{guest}/screenshot"), None, Duration::from_secs(5));
            let took = t0.elapsed();
            eprintln!("cold session: the guest's /screenshot against a stopped X server: {status} after {:.3} s: {body}", took.as_secs_f64());
            assert_eq!(status, 500, "{body}");
            assert!(body.contains("does not answer"), "the answer must say the X server does not answer: {body}");
            assert!(took >= drums_guest::X_TIMEOUT && took <= drums_guest::X_TIMEOUT + Duration::from_secs(1), "/screenshot took {:.3} s; its X deadline is {:?}", took.as_secs_f64(), drums_guest::X_TIMEOUT);
        }
        // Continued, the X server answers again: the failure was the stop, not the session.
        run_ok("drums-ready", &["--timeout", "10s"], &src);
        // A Chromium that has exited (killed, as the OOM killer would) cannot come back: drums-ready
        // says so at once, not at its timeout.
        let chromium = host_pid(&s, "chromium");
        signal(chromium, libc::SIGKILL);
        // SIGKILL is delivered at once, but a browser of many threads and a large address space takes a
        // few milliseconds to exit; the claim is about a Chromium that has exited.
        let killed = Instant::now();
        while !matches!(drums::proc::state(chromium), Some('Z') | Some('X') | None) {
            assert!(killed.elapsed() < Duration::from_secs(5), "Chromium {chromium} did not exit within 5 s of SIGKILL");
            std::thread::sleep(Duration::from_millis(2));
        }
        let t0 = Instant::now();
        let o = run("drums-ready", &["--timeout", "20s"], &src);
        let took = t0.elapsed();
        eprintln!("cold session: drums-ready --timeout 20s after Chromium was killed: exit {:?} after {:.3} s", o.status.code(), took.as_secs_f64());
        assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
        let ready = one::<Session>(&text(&o.stdout)).ready.expect("a ready section");
        assert_eq!(ready.failed, ["chromium"], "{}", json(&ready));
        assert!(took < Duration::from_secs(2), "drums-ready took {:.3} s to see that Chromium is gone", took.as_secs_f64());
    }
    let left = inventory().new_since(&before);
    assert!(left.is_empty(), "left after the sweep: {left:?}");
}

/// A session with namespaces and no desktop yet (drums-overlay create, drums-ns create), destroyed by the
/// guard.
fn bare_session(guard: &mut Sessions) -> (String, Session) {
    let a = std::process::Command::new(tool("drums-overlay")).args(["create"]).env("DRUMS_OWNER", std::process::id().to_string()).output().unwrap();
    assert!(a.status.success(), "{}", text(&a.stderr));
    guard.add(&text(&a.stdout));
    let b = run_ok("drums-ns", &["create"], &text(&a.stdout));
    guard.add(&b);
    let s = one(&b);
    (b, s)
}

/// drums-desktop's error when its Chromium died: exit 5, no record, the error naming chromium (its role
/// and log) and how it ended, well before Chromium's 30 s.
fn chromium_died(o: &std::process::Output, took: Duration, how: &str) {
    eprintln!("drums-desktop with a Chromium that dies ({how}): exit {:?} after {:.3} s: {}", o.status.code(), took.as_secs_f64(), text(&o.stderr).trim());
    assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "no record when Chromium died: {}", text(&o.stdout));
    let e = error_record(&o.stderr);
    assert_eq!((e.process.as_deref(), e.log.as_deref()), (Some("chromium"), Some(std::path::Path::new("/tmp/drums/chromium.log"))), "{}", json(&e));
    assert!(e.message.contains(how), "the error must say how Chromium ended ({how}): {}", e.message);
    assert!(took < Duration::from_secs(10), "drums-desktop took {:.3} s to say Chromium died", took.as_secs_f64());
}

/// The desktop fails fast: a Chromium that exits at its start (here `--version`, which prints the version
/// and exits 0) or is killed right after it was started (SIGKILL, as the OOM killer would) ends
/// drums-desktop at once, with an error naming chromium and its exit status or signal, instead of a
/// desktop without a browser that drums-ready would wait on until its timeout.
#[test]
fn a_desktop_whose_chromium_dies_fails_at_once() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    {
        let mut guard = Sessions::default();
        let (rec, _) = bare_session(&mut guard);
        let t0 = Instant::now();
        let o = run("drums-desktop", &["start", "--chromium-arg=--version"], &rec);
        chromium_died(&o, t0.elapsed(), "exit status 0");

        // Killed as soon as it shows in the session: found by its name among the session's processes.
        let (rec, s) = bare_session(&mut guard);
        let pidns = s.ns.as_ref().expect("namespaces").inodes.pid;
        let mut child = std::process::Command::new(tool("drums-desktop"))
            .args(["start", "--no-guest"])
            .env("PATH", path_with_tools())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(rec.as_bytes()).unwrap();
        }
        let t0 = Instant::now();
        let killed = loop {
            if let Some(p) = drums::proc::pids_in_pidns(pidns).into_iter().find(|p| drums::proc::comm(*p) == "chromium") {
                // 50 ms in: drums-desktop holds its pidfd by then (it takes it as soon as the exec is
                // done), and Chromium is still starting (it listens on DevTools after about 0.3 s).
                std::thread::sleep(Duration::from_millis(50));
                signal(p, libc::SIGKILL);
                break p;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no chromium appeared in the session");
            std::thread::sleep(Duration::from_millis(1));
        };
        let t1 = Instant::now();
        let o = child.wait_with_output().unwrap();
        eprintln!("killed chromium (host pid {killed}) {:.3} s after drums-desktop started", t1.duration_since(t0).as_secs_f64());
        chromium_died(&o, t1.elapsed(), "killed by signal 9 (SIGKILL)");
    }
    let left = inventory().new_since(&before);
    assert!(left.is_empty(), "left after the sweep: {left:?}");
}
