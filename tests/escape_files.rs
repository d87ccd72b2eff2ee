//! Files a session plants against the host, from the attacker's side: root inside a cold session makes
//! links from the names drums-reseed writes to host paths, set-user-ID and set-group-ID copies of a shell,
//! device nodes and a file capability; then the session is checkpointed, a sibling restored and reseeded
//! (twice, the second time after a relative link planted in the sibling). The host's files stay as they
//! were, the checkpoint layer carries none of the privileges, and no other host user can run or read
//! anything of the checkpoint or of the live sibling's tree.

use drums::record::Session;
use drums_tests::*;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use drums_tests::run_pipeline as pipeline;

/// A shell command as root inside the session: (exit status, stdout, stderr).
fn inside(rec: &str, script: &str) -> (i32, String, String) {
    let id = decode::<Session>(rec.lines().next().unwrap()).id;
    let o = Command::new(tool("drums-ns")).args(["exec", "--session", &id, "--", "sh", "-c", script]).env("PATH", path_with_tools()).output().unwrap();
    (o.status.code().unwrap_or(-1), text(&o.stdout), text(&o.stderr))
}

/// Run `argv` as the host user nobody (no groups): (exit status, stderr). Through a shell that is already
/// nobody: setpriv itself still holds root's capabilities when it executes its command (they go with the
/// exec), so a program setpriv started directly would be reached with CAP_DAC_OVERRIDE.
fn as_nobody(argv: &[&str]) -> (i32, String) {
    let o = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "/bin/sh", "-c", "exec \"$0\" \"$@\""])
        .args(argv)
        .output()
        .expect("setpriv (util-linux)");
    (o.status.code().unwrap_or(-1), text(&o.stderr))
}

/// Removes the checkpoint (and its mapped files) when dropped.
struct Checkpoint(PathBuf);
impl Drop for Checkpoint {
    fn drop(&mut self) {
        let _ = drums::ckpt::remove_checkpoint_dir(&self.0);
    }
}

const DEV_NODES: [(&str, u32, u32); 6] = [("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)];

/// What in a tree would be a privilege on the host: set-id files, device nodes other than whiteouts and
/// the session's own /dev nodes, file capabilities.
fn privileges_in(top: &Path) -> Vec<String> {
    fn walk(top: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(top).unwrap().to_path_buf();
            let t = m.file_type();
            if !t.is_dir() && !t.is_symlink() && m.mode() & 0o6000 != 0 {
                out.push(format!("set-id {}", rel.display()));
            }
            if t.is_char_device() || t.is_block_device() {
                let (major, minor) = (libc::major(m.rdev()), libc::minor(m.rdev()));
                let whiteout = t.is_char_device() && m.rdev() == 0;
                let own = t.is_char_device() && DEV_NODES.iter().any(|(n, ma, mi)| rel == Path::new("dev").join(n) && (major, minor) == (*ma, *mi));
                if !whiteout && !own {
                    out.push(format!("device {} {major}:{minor}", rel.display()));
                }
            }
            if !t.is_symlink() {
                let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
                if unsafe { libc::lgetxattr(c.as_ptr(), c"security.capability".as_ptr(), std::ptr::null_mut(), 0) } >= 0 {
                    out.push(format!("capability {}", rel.display()));
                }
            }
            if t.is_dir() {
                walk(top, &p, out);
            }
        }
    }
    let mut out = vec![];
    walk(top, top, &mut out);
    out
}

#[test]
fn files_planted_in_a_session_reach_nothing_of_the_host() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let pid = std::process::id();
    let host = |name: &str| PathBuf::from(format!("/tmp/drums-escape-{pid}-{name}"));
    let targets = [host("hostname"), host("machine-id"), host("relative")];
    for t in &targets {
        let _ = std::fs::remove_file(t);
    }
    let mut guard = Sessions::default();

    // Host ids: drums-ckpt's source.
    let (cold, _) = source_session(&mut guard);
    let plant = format!(
        "set -e
         ln -sf {hn} /etc/hostname
         ln -sf {mi} /etc/machine-id
         cp /bin/sh /tmp/drums-escape-suid && chmod 4755 /tmp/drums-escape-suid
         cp /bin/sh /home/user/drums-escape-sgid && chmod 2755 /home/user/drums-escape-sgid
         mkdir -p /home/user/mail && chmod 2775 /home/user/mail",
        hn = targets[0].display(),
        mi = targets[1].display()
    );
    let (code, _, err) = inside(&cold, &plant);
    assert_eq!(code, 0, "planting as root inside the session: {err}");
    // Device nodes and a file capability need capabilities root inside a session may lose: made if it can.
    let (mknod, _, mknod_err) = inside(&cold, "mknod /tmp/drums-escape-mem c 1 1 && mknod /home/user/drums-escape-disk b 8 0");
    if mknod != 0 {
        eprintln!("note: mknod refused inside the session ({mknod_err}): no device node to check");
    }
    let cap = "import os; open('/tmp/drums-escape-cap', 'w').close(); os.setxattr('/tmp/drums-escape-cap', 'security.capability', bytes([1, 0, 0, 2, 0, 0, 0x20, 0] + [0] * 12))";
    let (setcap, _, setcap_err) = inside(&cold, &format!("python3 -c \"{cap}\""));
    if setcap != 0 {
        eprintln!("note: no file capability could be set inside the session ({setcap_err})");
    }

    let o = run("drums-ckpt", &["--clean"], &cold);
    assert!(o.status.success(), "drums-ckpt: {}", text(&o.stderr));
    let ckpt_line = text(&o.stdout);
    let ckpt: drums::record::Checkpoint = decode(&ckpt_line);
    let ckpt_dir = ckpt.dir.clone();
    let _ckpt_guard = Checkpoint(ckpt_dir.clone());
    for t in &targets {
        assert!(!t.exists(), "{} appeared on the host after the checkpoint", t.display());
    }

    // The checkpoint layer: the files are there, their privileges are not.
    let layer = ckpt_dir.join("layer");
    assert!(layer.join("tmp/drums-escape-suid").is_file() && layer.join("home/user/drums-escape-sgid").is_file());
    assert_eq!(privileges_in(&layer), Vec::<String>::new(), "privileges in the checkpoint layer");
    assert_eq!(std::fs::metadata(layer.join("home/user/mail")).unwrap().mode() & 0o7777, 0o2775, "a directory's set-group-ID stays");
    for (n, ma, mi) in DEV_NODES {
        let m = std::fs::symlink_metadata(layer.join("dev").join(n)).unwrap_or_else(|e| panic!("the session's /dev/{n} is kept: {e}"));
        assert!(m.file_type().is_char_device() && (libc::major(m.rdev()), libc::minor(m.rdev())) == (ma, mi), "/dev/{n}");
    }
    let dropped = ckpt.layer_dropped.unwrap_or_else(|| panic!("no layer_dropped: {ckpt_line}"));
    assert!(dropped.setid >= 2, "{dropped:?}");
    if mknod == 0 {
        assert!(dropped.devices >= 2, "{dropped:?}");
        assert!(!layer.join("tmp/drums-escape-mem").exists() && !layer.join("home/user/drums-escape-disk").exists());
    }
    if setcap == 0 {
        assert!(dropped.capabilities >= 1, "{dropped:?}");
    }
    // The links are copied as links (the sibling follows them inside its own root).
    assert_eq!(std::fs::read_link(layer.join("etc/hostname")).unwrap(), targets[0]);

    let o = pipeline("restore.sh", &["--count", "1"], &ckpt_line);
    guard.add(&text(&o.stdout));
    assert!(o.status.success(), "restore.sh (restore, reseed, ready): {}", text(&o.stderr));
    let sib_line = text(&o.stdout);
    let sib: Session = decode(&sib_line);
    assert!(sib.ready.as_ref().is_some_and(|r| r.ready), "the sibling is ready: {:?}", sib.ready);
    for t in &targets {
        assert!(!t.exists(), "{} appeared on the host after the reseed", t.display());
    }
    // The reseed wrote inside the sibling: its /etc/hostname is a file with its new name.
    let (code, out, err) = inside(&sib_line, "test -f /etc/hostname && ! test -L /etc/hostname && cat /etc/hostname && stat -c %a /tmp/drums-escape-suid");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().collect::<Vec<_>>(), vec![sib.reseed.as_ref().unwrap_or_else(|| panic!("no reseed section: {sib_line}")).hostname.as_str(), "755"], "the hostname, and the copy without its set-user-ID bit");

    // A relative link planted in the sibling, and a second reseed.
    let (code, _, err) = inside(&sib_line, &format!("ln -sf ../../tmp/drums-escape-{pid}-relative /etc/machine-id && ln -sf ../..{} /etc/hostname", targets[0].display()));
    assert_eq!(code, 0, "{err}");
    let o = run("drums-reseed", &[], &sib_line);
    assert!(o.status.success(), "the second drums-reseed: {}", text(&o.stderr));
    let o = run("drums-ready", &[], &text(&o.stdout));
    let again: Session = decode(&text(&o.stdout));
    assert!(again.ready.as_ref().is_some_and(|r| r.ready), "ready after the second reseed: {:?} {}", again.ready, text(&o.stderr));
    for t in &targets {
        assert!(!t.exists(), "{} appeared on the host after the second reseed", t.display());
    }

    // Another host user can run nothing from the checkpoint or from the live sibling's tree, and read
    // neither the checkpoint root nor the mapped files.
    let sib_root = sib.overlay.as_ref().unwrap_or_else(|| panic!("no overlay section: {sib_line}")).merged.clone();
    for program in [sib_root.join("tmp/drums-escape-suid"), sib_root.join("usr/bin/id"), layer.join("home/user/drums-escape-sgid"), layer.join("tmp/drums-escape-suid")] {
        assert!(program.exists(), "{}", program.display());
        let (code, err) = as_nobody(&[program.to_str().unwrap(), "-c", "id"]);
        assert_ne!(code, 0, "nobody ran {}", program.display());
        assert!(err.contains("Permission denied"), "{}: EACCES expected: {err}", program.display());
    }
    let mapped = drums::mapped::mapped_root();
    for dir in [drums::state::checkpoint_root(), mapped.clone(), ckpt_dir.join("images"), drums::state::state_root()] {
        let (code, err) = as_nobody(&["ls", dir.to_str().unwrap()]);
        assert_ne!(code, 0, "nobody listed {}", dir.display());
        assert!(err.contains("Permission denied"), "{}: {err}", dir.display());
    }
    for root in [drums::state::checkpoint_root(), mapped, drums::state::state_root(), drums::image::images_root(), drums::runtime::runtime_root()] {
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o777, 0o700, "{}", root.display());
    }

    let recs = guard.0.clone();
    drop(guard);
    drop(_ckpt_guard);
    let left = inventory().new_since(&before);
    assert!(left.is_empty(), "left behind: {left:?} (records {recs:?})");
    assert!(!ckpt_dir.exists());
}
