//! The boundary of `drums-ns exec`, tried from the attacker's side: no descriptor of the caller's (a file,
//! the host's /dev/null, a FIFO, a socket, a terminal) reaches a session, so session root cannot change
//! the host's file behind it through /proc/PID/fd. Tried from a cold session and from a restored sibling,
//! as session root reached through sudo (as an agent would).

use drums::record::Session;
use drums_tests::*;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Marks the commands the attack goes after: `sleep 37.5` run through drums-ns exec.
const MARK: &str = "37.5";

/// As session root: every descriptor 0-2 of every `sleep MARK` in the session is reopened through
/// /proc/PID/fd and chmod, chown, write and truncate are tried on it; fdinfo is read. One line per step:
/// `PID FD target TARGET` then `PID FD STEP done|refused ERRNO`.
const ATTACK: &str = r#"
import os, sys
mark = sys.argv[1].encode()
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    try:
        argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    except OSError:
        continue
    if argv[:2] != [b"sleep", mark]:
        continue
    for fd in "012":
        path = f"/proc/{pid}/fd/{fd}"
        try:
            print(pid, fd, "target", os.readlink(path), flush=True)
        except OSError as e:
            print(pid, fd, "target refused", e.errno, flush=True)
            continue
        steps = [
            ("chmod", lambda: os.chmod(path, 0o4755)),
            ("chown", lambda: os.chown(path, 1000, 1000)),
            ("write", lambda: open(path, "a").write("written from the session\n")),
            ("truncate", lambda: os.truncate(path, 0)),
            ("fdinfo", lambda: open(f"/proc/{pid}/fdinfo/{fd}").read()),
        ]
        for name, step in steps:
            try:
                step()
                print(pid, fd, name, "done", flush=True)
            except OSError as e:
                print(pid, fd, name, "refused", e.errno, flush=True)
"#;

/// What the host's objects are before and after: mode, owner, content of each.
#[derive(Debug, PartialEq, Clone)]
struct Seen {
    mode: u32,
    uid: u32,
    gid: u32,
    rdev: u64,
    content: Option<Vec<u8>>,
}

fn seen(p: &Path) -> Seen {
    let m = std::fs::metadata(p).unwrap();
    let content = m.is_file().then(|| std::fs::read(p).unwrap());
    Seen { mode: m.mode(), uid: m.uid(), gid: m.gid(), rdev: m.rdev(), content }
}

/// The host objects handed to `drums-ns exec` as standard streams.
struct HostObjects {
    dir: PathBuf,
    input: PathBuf,
    output: PathBuf,
    fifo: PathBuf,
}

impl HostObjects {
    fn new() -> HostObjects {
        let dir = std::env::temp_dir().join(format!("drums-exec-victims-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let input = dir.join("input.txt");
        std::fs::write(&input, "the host's input\n").unwrap();
        std::fs::set_permissions(&input, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let output = dir.join("output.txt");
        std::fs::write(&output, "the host's file\n").unwrap();
        std::fs::set_permissions(&output, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        HostObjects { dir, input, output, fifo }
    }
    fn paths(&self) -> Vec<PathBuf> {
        vec![self.input.clone(), self.output.clone(), self.fifo.clone(), PathBuf::from("/dev/null")]
    }
}

impl Drop for HostObjects {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `drums-ns exec --session ID -- sleep MARK` with the given standard streams.
fn exec_with(id: &str, stdin: Stdio, stdout: Stdio, stderr: Stdio) -> Child {
    Command::new(tool("drums-ns")).args(["exec", "--session", id, "--", "sleep", MARK]).stdin(stdin).stdout(stdout).stderr(stderr).spawn().unwrap()
}

fn file(p: &Path, write: bool) -> Stdio {
    Stdio::from(std::fs::OpenOptions::new().read(!write).append(write).open(p).unwrap())
}

/// Runs the attack in `s` with every kind of host stream handed to exec; returns its lines.
fn attack(s: &Session, objects: &HostObjects, socket_end: &OwnedFd) -> Vec<String> {
    let id = s.id.as_str();
    let rdwr = |p: &Path| Stdio::from(std::fs::OpenOptions::new().read(true).write(true).open(p).unwrap());
    let sock = || Stdio::from(socket_end.try_clone().unwrap());
    let mut children = vec![
        // A regular file to read and one to append to (`< input >> output 2>> output`).
        exec_with(id, file(&objects.input, false), file(&objects.output, true), file(&objects.output, true)),
        // The host's /dev/null on all three (`>/dev/null` and friends).
        exec_with(id, rdwr(Path::new("/dev/null")), rdwr(Path::new("/dev/null")), rdwr(Path::new("/dev/null"))),
        // A FIFO (opened read-write, so that opening it does not wait for a peer).
        exec_with(id, rdwr(&objects.fifo), rdwr(&objects.fifo), rdwr(&objects.fifo)),
        // A socket.
        exec_with(id, sock(), sock(), sock()),
    ];
    // Every command has started once four `sleep MARK` are in the session.
    let count = format!("n=0; for p in /proc/[0-9]*; do [ \"$(tr '\\0' ' ' < $p/cmdline 2>/dev/null)\" = 'sleep {MARK} ' ] && n=$((n+1)); done; echo $n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let n = run_ok("drums-ns", &["exec", "--session", id, "--", "sh", "-c", &count], "");
        if n.trim() == "4" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the four commands did not start: {n}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let o = Command::new(tool("drums-ns"))
        .args(["exec", "--session", id, "--user", "user", "--env", &format!("ATTACK={ATTACK}"), "--", "sh", "-c", r#"echo password | sudo -S -p "" python3 -c "$ATTACK" "$@""#, "sh", MARK])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "the attack did not run: {}{}", text(&o.stdout), text(&o.stderr));
    for c in &mut children {
        // SIGTERM: passed on to the command, which ends; exec then ends too.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let _ = c.wait();
    }
    text(&o.stdout).lines().map(str::to_string).collect()
}

/// Every descriptor held by a process of session `s` that is not its own: a file on a mount outside the
/// session's mount namespace, or an object with no path there (a pipe, a socket, a memfd) that a process
/// outside the session also holds (the guest's, the desktop's, CRIU's inherited descriptors would show
/// here).
fn foreign_descriptors(s: &Session) -> Vec<String> {
    let ns = s.ns.as_ref().expect("an ns section");
    let inside = drums::proc::pids_in_pidns(ns.inodes.pid);
    assert!(inside.len() > 1, "the session has processes: {inside:?}");
    let mounts: std::collections::HashSet<String> = std::fs::read_to_string(format!("/proc/{}/mountinfo", ns.init_pid)).unwrap().lines().filter_map(|l| l.split(' ').next().map(str::to_string)).collect();
    // (target, mount id, (device, inode)) of each descriptor of `pid`.
    let fds = |pid: i32| -> Vec<(String, String, (u64, u64))> {
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return vec![] };
        dir.flatten()
            .filter_map(|e| {
                let target = std::fs::read_link(e.path()).ok()?.to_string_lossy().into_owned();
                let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", e.file_name().to_string_lossy())).ok()?;
                let mnt = info.lines().find_map(|l| l.strip_prefix("mnt_id:")).map(|m| m.trim().to_string())?;
                let m = std::fs::metadata(e.path()).ok()?;
                Some((target, mnt, (m.dev(), m.ino())))
            })
            .collect()
    };
    let mut foreign = vec![];
    let mut objects = std::collections::HashMap::new();
    for &pid in &inside {
        for (target, mnt, id) in fds(pid) {
            // Every anonymous inode (eventfd, epoll, timerfd...) is one inode of the kernel's: nothing
            // to compare.
            if target.starts_with("anon_inode:") {
                continue;
            }
            // Mount 0 is the kernel's own (memfd, anonymous files): no file of the host's.
            if target.starts_with('/') && mnt != "0" {
                if !mounts.contains(&mnt) {
                    foreign.push(format!("pid {pid}: {target} on mount {mnt}, not the session's"));
                }
            } else {
                objects.insert(id, (pid, target));
            }
        }
    }
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<i32>().ok()) else { continue };
        // A process of the session started after the list was made is no host process.
        if inside.contains(&pid) || drums::proc::ns_inode(pid, "pid").is_ok_and(|i| i == ns.inodes.pid) {
            continue;
        }
        for (_, _, id) in fds(pid) {
            if let Some((holder, target)) = objects.get(&id) {
                foreign.push(format!("pid {holder} holds {target}, which host process {pid} ({}) holds too", drums::proc::comm(pid)));
            }
        }
    }
    foreign
}

#[test]
fn host_descriptors_never_reach_a_session() {
    require_root();
    let _lock = session_lock();
    let before_inventory = inventory();
    let objects = HostObjects::new();
    let mut pair = [0; 2];
    assert_eq!(unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, pair.as_mut_ptr()) }, 0, "socketpair");
    let (host_end, socket_end) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    let mut guard = Sessions::default();
    let (src_line, src) = source_session(&mut guard);
    let (_ckpt, sib) = checkpoint_and_sibling(&src_line, &mut guard);

    for (what, s) in [("cold session", &src), ("restored sibling", &sib)] {
        let foreign = foreign_descriptors(s);
        assert!(foreign.is_empty(), "{what}: descriptors of the host's in the session: {foreign:#?}");
        let before: Vec<Seen> = objects.paths().iter().map(|p| seen(p)).collect();
        let lines = attack(s, &objects, &socket_end);
        let after: Vec<Seen> = objects.paths().iter().map(|p| seen(p)).collect();
        // Should the boundary fail, the host's /dev/null is put back before the test fails on it.
        let null = Path::new("/dev/null");
        if seen(null) != before[3] {
            let _ = std::fs::set_permissions(null, std::os::unix::fs::PermissionsExt::from_mode(0o666));
            let _ = std::os::unix::fs::chown(null, Some(0), Some(0));
        }
        let targets: Vec<&String> = lines.iter().filter(|l| l.split(' ').nth(2) == Some("target")).collect();
        assert_eq!(targets.len(), 12, "{what}: four commands, three streams each: {lines:#?}");
        for t in &targets {
            let target = t.split(' ').nth(3).unwrap_or("");
            assert!(target.starts_with("pipe:[") || target == "/dev/null", "{what}: a command's stream is not a relay pipe nor the session's /dev/null: {t}\n{lines:#?}");
        }
        // The attack reached what it could (the session's own pipes and /dev/null): it ran for real.
        assert!(lines.iter().any(|l| l.ends_with(" chmod done")), "{what}: no chmod got through to anything, so the attack did not run as session root: {lines:#?}");
        for ((p, b), a) in objects.paths().iter().zip(&before).zip(&after) {
            if *p == objects.output {
                // Text the session wrote to the command's output arrives as output, through the relay:
                // the file is appended to, never chmodded, chowned or truncated.
                assert_eq!((a.mode, a.uid, a.gid), (b.mode, b.uid, b.gid), "{what}: {} changed: {b:?} -> {a:?}", p.display());
                let (bc, ac) = (b.content.as_ref().unwrap(), a.content.as_ref().unwrap());
                assert!(ac.starts_with(bc), "{what}: {} was overwritten or truncated: {:?}", p.display(), text(ac));
                assert!(text(&ac[bc.len()..]).lines().all(|l| l == "written from the session"), "{what}: {}: {:?}", p.display(), text(ac));
            } else {
                assert_eq!(a, b, "{what}: the host's {} changed", p.display());
            }
        }
        // Nothing but relayed output may have come through the socket.
        let mut buf = [0u8; 4096];
        let n = unsafe { libc::recv(host_end.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n > 0 {
            assert!(text(&buf[..n as usize]).lines().all(|l| l == "written from the session"), "{what}: {:?}", text(&buf[..n as usize]));
        }
    }
    drop(guard);
    let left = inventory().new_since(&before_inventory);
    assert!(left.is_empty(), "left after destroy: {left:?}");
}

/// `drums-ns exec` from a terminal: the command sees no terminal (its output comes back through pipes,
/// its input is the session's /dev/null, it has no controlling terminal to open as /dev/tty), so nothing
/// in the session can read keystrokes from it or push input into the host's shell; `--pass-terminal`
/// gives it a terminal of the session's own, relayed to the caller's, never the caller's terminal.
#[test]
fn a_terminal_never_reaches_a_session() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let mut guard = Sessions::default();
    let o = Command::new(tool("drums-overlay")).arg("create").env("DRUMS_OWNER", std::process::id().to_string()).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rec = run_ok("drums-ns", &["create"], &text(&o.stdout));
    guard.add(&rec);
    let id = one::<Session>(&rec).id;
    let (mut master, mut slave) = (0, 0);
    assert_eq!(unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) }, 0, "openpty");
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let host_pty_dev = std::fs::metadata(format!("/proc/self/fd/{}", slave.as_raw_fd())).unwrap().dev();
    let probe = "for fd in 0 1 2; do [ -t $fd ] && echo tty$fd; done; (exec 3</dev/tty) 2>/dev/null && echo ctty; echo \"dev $(stat -L -c %d /proc/$$/fd/1)\"; python3 -c 'import fcntl, termios\ntry:\n fcntl.ioctl(1, termios.TIOCSTI, b\"x\"); print(\"injected\")\nexcept OSError as e: print(\"refused\", e.errno)'; echo done";
    let exec = |extra: &[&str]| -> String {
        let mut cmd = Command::new(tool("drums-ns"));
        cmd.args(["exec", "--session", &id]).args(extra).args(["--", "sh", "-c", probe]);
        cmd.stdin(Stdio::from(slave.try_clone().unwrap())).stdout(Stdio::from(slave.try_clone().unwrap())).stderr(Stdio::from(slave.try_clone().unwrap()));
        // The terminal becomes the controlling terminal of drums-ns, as a shell's would be.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::setsid();
                libc::ioctl(0, libc::TIOCSCTTY, 0);
                Ok(())
            });
        }
        let st = cmd.status().unwrap();
        assert!(st.success(), "drums-ns exec {extra:?}: {st}");
        let mut out = vec![];
        let mut buf = [0u8; 4096];
        let flags = unsafe { libc::fcntl(master.as_raw_fd(), libc::F_GETFL) };
        unsafe { libc::fcntl(master.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) };
        loop {
            let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
        String::from_utf8_lossy(&out).replace('\r', "")
    };
    let host_dev_line = format!("dev {host_pty_dev}");
    let default = exec(&[]);
    assert!(default.contains("done"), "the output came back through the relay: {default:?}");
    for bad in ["tty0", "tty1", "tty2", "ctty", "injected", host_dev_line.as_str()] {
        assert!(!default.lines().any(|l| l == bad), "{bad} in the session: {default:?}");
    }
    assert!(default.contains("refused"), "{default:?}");
    let passed = exec(&["--pass-terminal"]);
    for good in ["tty0", "tty1", "tty2", "ctty", "refused 1", "done"] {
        assert!(passed.lines().any(|l| l == good), "--pass-terminal gives the command a terminal ({good} missing; TIOCSTI on it is refused by the filter, EPERM): {passed:?}");
    }
    assert!(!passed.lines().any(|l| l == host_dev_line), "--pass-terminal handed the caller's terminal into the session: {passed:?}");
    drop(guard);
    let left = inventory().new_since(&before);
    assert!(left.is_empty(), "left after destroy: {left:?}");
}
