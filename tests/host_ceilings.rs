//! Host ceilings (drums(7), "Host ceilings"): the host-wide kernel limits pipelines/setup.d/sysctl.sh
//! raises so that many full sessions fit, and each session's share of the host's pseudo-terminals (its
//! devpts `max=`), tried from the attacker's side: from inside a cold session and a restored --userns
//! sibling, session root opens pseudo-terminals until refused; the count stops at the session's share,
//! cannot be raised from inside, and meanwhile the other session and the host still open theirs.

use drums::ns::PTYS_PER_SESSION;
use drums::record::Session;
use drums_tests::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// The floors of pipelines/setup.d/sysctl.sh.
const FLOORS: &[(&str, u64)] = &[
    ("fs/inotify/max_user_instances", 8192),
    ("fs/inotify/max_user_watches", 1048576),
    ("kernel/pid_max", 4194304),
    ("kernel/threads-max", 4194304),
    ("fs/file-max", 4194304),
    ("kernel/pty/max", 257024),
];

fn sysctl(key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/sys/{key}")).unwrap().trim().parse().unwrap()
}

#[test]
fn the_hosts_ceilings_are_raised() {
    for &(key, floor) in FLOORS {
        assert!(sysctl(key) >= floor, "/proc/sys/{key} is {}, below Drums' floor {floor}: run pipelines/setup.d/sysctl.sh", sysctl(key));
    }
    // The script's file says what is in force, and a second run changes nothing.
    let conf = std::fs::read_to_string("/etc/sysctl.d/60-drums.conf").expect("pipelines/setup.d/sysctl.sh wrote /etc/sysctl.d/60-drums.conf");
    for &(key, _) in FLOORS {
        let name = key.replace('/', ".");
        let line = conf.lines().find(|l| l.starts_with(&format!("{name} = "))).unwrap_or_else(|| panic!("{name} in 60-drums.conf: {conf}"));
        assert_eq!(line.rsplit(' ').next().unwrap().parse::<u64>().unwrap(), sysctl(key), "{name}: the file's value is the host's");
    }
    // Room for a thousand sessions' pseudo-terminals beside the host's own reserve.
    assert!(sysctl("kernel/pty/max") >= sysctl("kernel/pty/reserve") + 1000 * PTYS_PER_SESSION as u64);
}

/// Run as session root: open pseudo-terminals (the session's /dev/ptmx, its own devpts) until refused,
/// print `opened=N errno=E held=H` (H: the devpts' nodes then, its ptmx excepted), try to raise the
/// devpts' max (`remount=errno`), then hold them until the file `argv[1]` exists (at most 120 s).
const PTY_HOG: &str = r#"
import os, sys, time, ctypes
fds, err = [], 0
while len(fds) < 100000:
    try:
        fds.append(os.openpty())
    except OSError as e:
        err = e.errno
        break
held = len([n for n in os.listdir("/dev/pts") if n != "ptmx"])
libc = ctypes.CDLL(None, use_errno=True)
r = libc.mount(b"devpts", b"/dev/pts", b"devpts", 0x20, b"max=1048576")
print("opened=%d errno=%d held=%d remount=%d" % (len(fds), err, held, 0 if r == 0 else ctypes.get_errno()), flush=True)
t = time.time()
while not os.path.exists(sys.argv[1]) and time.time() - t < 120:
    time.sleep(0.02)
"#;

/// Where a hog in the session of `rec` looks for its release file: (inside, from the host).
fn release_file(rec: &Session) -> (String, std::path::PathBuf) {
    ("/tmp/pty-hog-release".into(), rec.overlay.as_ref().unwrap().merged.join("tmp/pty-hog-release"))
}

/// The hog started in the session of `rec`, as root; its first line, and the running child, which ends
/// once `release` is called.
fn hog(line: &str, rec: &Session) -> (std::collections::BTreeMap<String, i64>, Child) {
    let (inside, host) = release_file(rec);
    let _ = std::fs::remove_file(&host);
    let mut child = Command::new(tool("drums-ns"))
        .args(["exec", "--", "python3", "-c", PTY_HOG, &inside])
        .env("PATH", path_with_tools())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(line.as_bytes()).unwrap();
    }
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    let got = line.split_whitespace().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.parse().unwrap_or(-1))).collect();
    (got, child)
}

/// The session's devpts as its mount table shows it (its options, max= among them).
fn devpts_options(rec: &Session) -> String {
    let init = rec.ns.as_ref().unwrap().init_pid;
    let mi = std::fs::read_to_string(format!("/proc/{init}/mountinfo")).unwrap();
    mi.lines().find(|l| l.split_whitespace().nth(4) == Some("/dev/pts")).unwrap_or_else(|| panic!("no /dev/pts in the session: {mi}")).to_string()
}

/// Let the hog of `rec` end, and wait for it.
fn release(rec: &Session, mut child: Child) {
    std::fs::write(release_file(rec).1, b"").unwrap();
    let st = child.wait().unwrap();
    assert!(st.success(), "the hog ended by itself: {st}");
}

fn assert_stopped_at_share(who: &str, got: &std::collections::BTreeMap<String, i64>) {
    assert_eq!(got.get("errno"), Some(&28), "{who}: the next pseudo-terminal is refused with ENOSPC: {got:?}");
    assert_eq!(got.get("held"), Some(&(PTYS_PER_SESSION as i64)), "{who}: the session's devpts holds its share and no more: {got:?}");
    assert!(got.get("opened").is_some_and(|&n| n > 0 && n <= PTYS_PER_SESSION as i64), "{who}: {got:?}");
    assert!(got.get("remount").is_some_and(|&e| e != 0), "{who}: session root cannot raise its devpts' max: {got:?}");
}

#[test]
fn one_session_cannot_take_the_hosts_pseudo_terminals() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (cold, cold_rec) = source_session(&mut guard);
    let (_dir, sibling) = {
        let ckpt = run_ok("drums-ckpt", &["--leave-running"], &cold);
        let dir = CheckpointDir(one::<drums::record::Checkpoint>(&ckpt).dir);
        let o = run_owned_tool("drums-restore", &["--userns", "--ready"], &ckpt);
        guard.add(&text(&o.stdout));
        assert!(o.status.success(), "drums-restore --userns --ready: {}", text(&o.stderr));
        (dir, text(&o.stdout).trim().to_string())
    };
    let sib_rec: Session = one(&sibling);
    let max = format!("max={PTYS_PER_SESSION}");
    for (who, rec) in [("cold", &cold_rec), ("sibling", &sib_rec)] {
        assert!(devpts_options(rec).contains(&max), "{who}: the devpts is mounted with {max} (CRIU keeps it in the sibling): {}", devpts_options(rec));
    }

    // The cold session takes all it can and holds them.
    let (got, cold_hog) = hog(&cold, &cold_rec);
    assert_stopped_at_share("cold", &got);
    // Meanwhile the sibling takes its own share in full, and holds it too.
    let (got, sib_hog) = hog(&sibling, &sib_rec);
    assert_stopped_at_share("sibling", &got);
    // Both at their share: the host still opens pseudo-terminals, and a new session gets its own.
    let mut master = 0;
    let mut slave = 0;
    assert_eq!(unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) }, 0, "the host opens a pseudo-terminal: {}", std::io::Error::last_os_error());
    unsafe {
        libc::close(master);
        libc::close(slave);
    }
    let (third, third_rec) = cold_session(&mut guard);
    let (got, third_hog) = hog(&third, &third_rec);
    assert_stopped_at_share("a new session beside the two", &got);
    for (rec, child) in [(&cold_rec, cold_hog), (&sib_rec, sib_hog), (&third_rec, third_hog)] {
        release(rec, child);
    }
    // The holders gone, the session has its whole share again.
    let (got, again) = hog(&cold, &cold_rec);
    assert_stopped_at_share("cold, again", &got);
    release(&cold_rec, again);
}
