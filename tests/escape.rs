//! The session boundary tried from the attacker's side: from inside a cold session and a restored sibling,
//! as the session's desktop user and as session root (through `sudo` with the task password, as an agent
//! would), every escape below is attempted and must fail, and the host is checked unchanged afterwards.
//! (Planted links and set-id files: tests/escape_files.rs; the network: tests/firewall.rs; descriptors
//! and terminals handed to `drums-ns exec`: tests/escape_exec.rs.)

use drums::record::{Checkpoint, Session};
use drums_tests::*;
use std::path::PathBuf;
use std::process::Command;

/// Run inside a session with the names of files only the host has; prints one line per attempt,
/// `NAME: refused ...` or `NAME: ESCAPED ...`, and `NAME: info ...` for what is only reported.
const ATTACK: &str = r#"
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
def out(name, r): print(f"{name}: {r}", flush=True)
def sc(nr, *a):
    r = libc.syscall(nr, *a)
    return f"refused errno {ctypes.get_errno()}" if r == -1 else f"ESCAPED (returned {r})"
def attempt(name, fn):
    try:
        r = fn()
    except OSError as e:
        r = f"refused ({e.strerror})"
    out(name, r)
class timespec(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
def clock():
    r = libc.clock_settime(0, ctypes.byref(timespec(86400, 0)))
    return f"refused errno {ctypes.get_errno()}" if r == -1 else "ESCAPED"
attempt("clock_settime", clock)
attempt("date -s", lambda: "refused" if subprocess.run(["date", "-s", "@86400"], capture_output=True).returncode else "ESCAPED")
def write(path, data):
    with open(path, "w") as f:
        f.write(data)
    return "ESCAPED"
attempt("core_pattern", lambda: write("/proc/sys/kernel/core_pattern", "|/tmp/drums-escape"))
attempt("kcore", lambda: "ESCAPED" if open("/proc/kcore", "rb").read(1) else "refused (empty)")
attempt("kallsyms", lambda: "ESCAPED" if open("/proc/kallsyms").read(64) else "refused (masked: empty)")
attempt("init_module", lambda: sc(175, ctypes.c_char_p(b"\0" * 64), 64, ctypes.c_char_p(b"")))
attempt("finit_module", lambda: sc(313, os.open("/dev/null", os.O_RDONLY), ctypes.c_char_p(b""), 0))
attempt("mount tmpfs", lambda: sc(165, b"none", b"/mnt", b"tmpfs", 0, None))
attempt("mount the host's disk", lambda: sc(165, b"/dev/vda", b"/mnt", b"ext4", 1, None))
attempt("mknod block", lambda: (os.mknod("/tmp/drums-escape-disk", 0o600 | 0o060000, os.makedev(254, 0)), "ESCAPED")[1])
def mknod_mem():
    os.mknod("/tmp/drums-escape-mem", 0o600 | 0o020000, os.makedev(1, 1))
    os.open("/tmp/drums-escape-mem", os.O_RDONLY)
    return "ESCAPED"
attempt("mknod /dev/mem and open it", mknod_mem)
attempt("devices", lambda: "refused (only the six nodes)" if sorted(n for n in os.listdir("/dev") if not os.path.islink("/dev/" + n) and n not in ("pts", "shm", ".drums-empty")) == ["full", "null", "random", "tty", "urandom", "zero"] else "ESCAPED " + " ".join(sorted(os.listdir("/dev"))))
# In a session with a user namespace of its own (the default) the filter lets a process make nested user
# namespaces, for Chromium's sandbox (drums(7), "Chromium's sandbox"; what they give is tests/
# chromium_sandbox.rs's): tried in a child, so the attempts after it run where they did.
own_userns = open("/proc/self/uid_map").read().split()[:3] != ["0", "0", "4294967295"]
def unshare_user():
    pid = os.fork()
    if pid == 0:
        os._exit(0 if libc.syscall(272, 0x10000000) == 0 else 1)
    made = os.waitpid(pid, 0)[1] == 0
    if own_userns:
        return "allowed (a nested user namespace of the session's own)" if made else "refused"
    return "ESCAPED (returned 0)" if made else "refused"
attempt("unshare user namespace", unshare_user)
attempt("unshare mount namespace", lambda: sc(272, 0x00020000))
attempt("keyctl", lambda: sc(250, 0, -3, 0))
attempt("bpf", lambda: sc(321, 0, 0, 0))
attempt("perf_event_open", lambda: sc(298, 0, 0, -1, -1, 0))
attempt("userfaultfd", lambda: sc(323, 0))
attempt("io_setup", lambda: sc(206, 1, ctypes.byref(ctypes.c_ulong(0))))
attempt("ip link add", lambda: "refused" if subprocess.run(["ip", "link", "add", "drumsx", "type", "dummy"], capture_output=True).returncode else "ESCAPED")
for f in sys.argv[1:]:
    attempt("host file " + f, lambda: (open(f).read(), "ESCAPED")[1])
joiners = 0
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        comm = open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        continue
    try:
        target = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        target = None
    if target and not os.path.exists(target):
        out(f"exe of {pid}", f"ESCAPED (names {target}, which is not in the session)")
    if comm != "drums-ns":
        continue
    joiners += 1
    def through_exe():
        fd = os.open(f"/proc/{pid}/exe", os.O_PATH)
        os.open(f"/proc/self/fd/{fd}", os.O_WRONLY)
        return "ESCAPED"
    attempt(f"write through /proc/{pid}/exe", through_exe)
    attempt(f"read /proc/{pid}/mem", lambda: (open(f"/proc/{pid}/mem", "rb"), "ESCAPED")[1])
out("joiners", f"info {joiners}")
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
out("boundary", f"info CapBnd={status['CapBnd'].strip()} CapEff={status['CapEff'].strip()} Seccomp={status['Seccomp'].strip()} uid={os.getuid()}")
"#;

/// What the host must still be after the attempts.
#[derive(Debug, PartialEq)]
struct HostState {
    core_pattern: String,
    modules: String,
    dev: Vec<String>,
    drums_ns: Vec<u8>,
}
fn host_state() -> HostState {
    let mut dev: Vec<String> = std::fs::read_dir("/dev").unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    dev.sort();
    HostState {
        core_pattern: std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap(),
        modules: std::fs::read_to_string("/proc/modules").unwrap_or_default(),
        dev,
        drums_ns: std::fs::read(tool("drums-ns")).unwrap(),
    }
}

/// The attack in session `s` as `user`, or as session root through sudo; while it runs, a command joined
/// with `drums-ns exec` is alive in the session (its joiner process is what /proc/PID/exe is tried on).
fn attack(s: &Session, as_root: bool, markers: &[PathBuf]) -> Vec<String> {
    let id = s.id.as_str();
    let mut joined = Command::new(tool("drums-ns")).args(["exec", "--session", id, "--", "sleep", "20"]).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let run = if as_root { r#"echo password | sudo -S -p "" python3 -c "$ATTACK" "$@""# } else { r#"python3 -c "$ATTACK" "$@""# };
    let mut cmd = Command::new(tool("drums-ns"));
    cmd.args(["exec", "--session", id, "--user", "user", "--env", &format!("ATTACK={ATTACK}"), "--", "sh", "-c", run, "sh"]);
    cmd.args(markers);
    let o = cmd.output().unwrap();
    let _ = joined.kill();
    let _ = joined.wait();
    assert!(o.status.success(), "the attack did not run ({}): {}{}", if as_root { "root" } else { "user" }, text(&o.stdout), text(&o.stderr));
    text(&o.stdout).lines().map(str::to_string).collect()
}

#[test]
fn root_in_a_session_is_not_root_on_the_host() {
    require_root();
    let _lock = session_lock();
    let before_inventory = inventory();
    let before = host_state();
    let markers: Vec<PathBuf> = ["/root", "/etc", "/var/lib"].iter().map(|d| PathBuf::from(d).join(format!("drums-escape-host-only-{}", std::process::id()))).collect();
    for m in &markers {
        std::fs::write(m, "host only\n").unwrap();
    }
    let mut guard = Sessions::default();
    let (src_line, src) = source_session(&mut guard);
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &src_line);
    let c: Checkpoint = one(&ckpt);
    let ckpt_dir = c.dir.clone();
    let restored = run_ok("drums-restore", &[], &ckpt);
    guard.add(&restored);
    let sib: Session = one(&run_ok("drums-ready", &[], &run_ok("drums-reseed", &[], &restored)));
    let t0 = std::time::SystemTime::now();

    let kept = format!("{:016x}", drums::boundary::kept_mask());
    for (what, s) in [("cold session", &src), ("restored sibling", &sib)] {
        for as_root in [false, true] {
            let who = if as_root { "session root" } else { "user" };
            let lines = attack(s, as_root, &markers);
            let escaped: Vec<&String> = lines.iter().filter(|l| l.contains("ESCAPED")).collect();
            assert!(escaped.is_empty(), "{what}, as {who}: {escaped:#?}\nall: {lines:#?}");
            for name in ["clock_settime", "core_pattern", "kcore", "init_module", "mount tmpfs", "mknod /dev/mem and open it", "unshare user namespace", "devices", "io_setup"] {
                // A session in its own user namespace makes nested ones by design (Chromium's sandbox).
                if name == "unshare user namespace" && s.id_range.is_some() {
                    assert!(lines.iter().any(|l| l.starts_with(&format!("{name}: allowed"))), "{what}, as {who}: {lines:#?}");
                    continue;
                }
                assert!(lines.iter().any(|l| l.starts_with(&format!("{name}: refused"))), "{what}, as {who}: no refusal of {name}: {lines:#?}");
            }
            assert!(lines.iter().any(|l| l.starts_with("joiners: info ") && l != "joiners: info 0"), "{what}: the joined command's process was not found: {lines:#?}");
            let boundary = lines.iter().find(|l| l.starts_with("boundary: ")).unwrap();
            assert!(boundary.contains(&format!("CapBnd={kept}")) && boundary.contains("Seccomp=2"), "{what}, as {who}: {boundary}");
            assert!(boundary.contains(if as_root { "uid=0" } else { "uid=1000" }), "{what}: sudo gives session root: {boundary}");
        }
    }
    // The host: its clock did not jump, nothing of its kernel or files changed.
    let now = std::time::SystemTime::now();
    assert!(now.duration_since(t0).is_ok_and(|d| d.as_secs() < 600), "the host's clock moved");
    assert_eq!(host_state(), before, "the host changed");
    for m in &markers {
        let _ = std::fs::remove_file(m);
    }
    drop(guard);
    let _ = drums::ckpt::remove_checkpoint_dir(&ckpt_dir);
    let left = inventory().new_since(&before_inventory);
    assert!(left.is_empty(), "left after destroy: {left:?}");
}
