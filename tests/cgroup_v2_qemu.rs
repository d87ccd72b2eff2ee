//! drums-cgroup on a real cgroup v2. This machine is v1 hybrid (its cgroup2 mount has no controllers), so
//! the test boots Debian's kernel under QEMU (software emulation) with a busybox initramfs holding
//! drums-cgroup, cgroup-probe and their shared libraries; the guest's init only mounts cgroup2 and runs
//! tests/cgroup-scenarios.sh, whose console output is checked by the same code as on the host
//! (tests/cgroup_check.rs). The init enables no controller itself: a fresh cgroup2 mount passes none down,
//! so the limits read back only if drums-cgroup enabled cpu, memory and pids in the root's and in
//! `drums`'s cgroup.subtree_control, which the test checks from the guest's output.
//!
//! Needs: qemu-system-x86_64, busybox (static), cpio, and the kernel that pipelines/setup.d/qemu-kernel.sh
//! puts in $DRUMS_QEMU_CACHE (default /var/cache/drums/qemu); the test runs that script when the kernel is
//! missing and fails with a clear message if it still is.

#[path = "cgroup_check.rs"]
mod check;

use drums_tests::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(420);

fn cache() -> PathBuf {
    std::env::var_os("DRUMS_QEMU_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/cache/drums/qemu"))
}

fn kernel() -> PathBuf {
    let k = cache().join("vmlinuz");
    if !k.exists() {
        let o = Command::new("bash").arg(repo_root().join("pipelines/setup.d/qemu-kernel.sh")).output().expect("run qemu-kernel.sh");
        assert!(o.status.success(), "pipelines/setup.d/qemu-kernel.sh failed, no guest kernel:\n{}", text(&o.stderr));
    }
    assert!(k.exists(), "no guest kernel at {} (run pipelines/setup.d/qemu-kernel.sh)", k.display());
    k
}

fn which(p: &str) -> PathBuf {
    for d in std::env::var("PATH").unwrap_or_default().split(':').chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"]) {
        let c = Path::new(d).join(p);
        if c.is_file() {
            return c;
        }
    }
    panic!("{p} is not installed (pipelines/setup.sh installs qemu-system-x86, busybox-static, cpio)");
}

/// Copy `src` to `root/<dest>`, following symlinks.
fn put(root: &Path, src: &Path, dest: &str) {
    let d = root.join(dest.trim_start_matches('/'));
    std::fs::create_dir_all(d.parent().unwrap()).unwrap();
    std::fs::copy(src, &d).unwrap_or_else(|e| panic!("copy {} to {}: {e}", src.display(), d.display()));
}

/// A binary, stripped (the debug builds are tens of MiB and the guest unpacks everything into RAM), and
/// every shared library ldd names for it, at the same paths.
fn put_binary(root: &Path, bin: &Path, dest: &str) {
    put(root, bin, dest);
    let d = root.join(dest.trim_start_matches('/'));
    let st = Command::new("strip").arg(&d).status();
    assert!(st.map(|s| s.success()).unwrap_or(false), "strip {} failed (binutils)", d.display());
    let o = Command::new("ldd").arg(bin).output().expect("ldd");
    for l in text(&o.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        let lib = match l.split_once("=>") {
            Some((_, r)) => r.split_whitespace().next().unwrap_or(""),
            None => l.split_whitespace().next().unwrap_or(""),
        };
        if lib.starts_with('/') {
            put(root, Path::new(lib), lib);
        }
    }
}

const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "DRUMS-CG guest booted $(cut -d' ' -f1 /proc/uptime)"
echo "DRUMS-CG guest controllers $(cat /sys/fs/cgroup/cgroup.controllers)"
echo "DRUMS-CG guest subtree_control_before [$(cat /sys/fs/cgroup/cgroup.subtree_control)]"
export PATH=/drums:/bin DRUMS_STATE_DIR=/run/drums
sh /cgroup-scenarios.sh limits pids hog sigkill freeze fail
echo "DRUMS-CG guest subtree_control_after [$(cat /sys/fs/cgroup/cgroup.subtree_control)]"
echo "DRUMS-CG guest done $(cut -d' ' -f1 /proc/uptime)"
poweroff -f
"#;

fn initramfs(dir: &Path) -> PathBuf {
    let root = dir.join("root");
    for d in ["bin", "proc", "sys", "dev", "run", "tmp", "drums"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let busybox = which("busybox");
    let ldd = Command::new("ldd").arg(&busybox).output().unwrap();
    assert!(!ldd.status.success() || text(&ldd.stdout).contains("not a dynamic"), "{} must be static (busybox-static)", busybox.display());
    put(&root, &busybox, "/bin/busybox");
    put_binary(&root, &tool("drums-cgroup"), "/drums/drums-cgroup");
    put_binary(&root, Path::new(env!("CARGO_BIN_EXE_cgroup-probe")), "/drums/cgroup-probe");
    put(&root, &repo_root().join("tests/cgroup-scenarios.sh"), "/cgroup-scenarios.sh");
    std::fs::write(root.join("init"), INIT).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root.join("init"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let img = dir.join("initramfs.cpio");
    let st = Command::new("sh")
        .arg("-c")
        .arg(format!("cd '{}' && find . | cpio -o -H newc --quiet > '{}'", root.display(), img.display()))
        .status()
        .expect("cpio");
    assert!(st.success(), "cpio failed");
    img
}

#[test]
fn cgroup_v2_in_a_qemu_guest() {
    let qemu = which("qemu-system-x86_64");
    let kernel = kernel();
    let dir = std::env::temp_dir().join(format!("drums-qemu-{}", drums::state::new_id('d')));
    std::fs::create_dir_all(&dir).unwrap();
    let img = initramfs(&dir);
    let t0 = Instant::now();
    // One vCPU: under TCG on a loaded 2-core CI host, a 2-vCPU guest once stalled both vCPUs for the
    // whole timeout (soft lockups in drums-cgroup and the session's init, never recovering); with one
    // vCPU no cross-CPU wait (IPI, TLB shoot-down) exists to stall, and no scenario needs a second CPU.
    let mut child = Command::new(qemu)
        .args(["-accel", "tcg", "-smp", "1", "-m", "512", "-nographic", "-no-reboot", "-nic", "none"])
        .arg("-kernel")
        .arg(&kernel)
        .arg("-initrd")
        .arg(&img)
        .args(["-append", "console=ttyS0 rdinit=/init panic=-1 quiet loglevel=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start qemu");
    let mut stdout = child.stdout.take().unwrap();
    // Read the console as it comes, to time the boot.
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, String)>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut all = String::new();
        for l in std::io::BufReader::new(&mut stdout).split(b'\n').map_while(Result::ok) {
            let l = String::from_utf8_lossy(&l).into_owned();
            let _ = tx.send((Instant::now(), l.clone()));
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    let mut booted_at = None;
    loop {
        while let Ok((t, l)) = rx.try_recv() {
            if booted_at.is_none() && l.contains("DRUMS-CG guest booted") {
                booted_at = Some(t - t0);
            }
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if t0.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            let out = reader.join().unwrap();
            panic!("the QEMU guest did not finish in {TIMEOUT:?}; console tail:\n{}", &out[out.len().saturating_sub(4000)..]);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let wall = t0.elapsed();
    let out = reader.join().unwrap();
    while let Ok((t, l)) = rx.try_recv() {
        if booted_at.is_none() && l.contains("DRUMS-CG guest booted") {
            booted_at = Some(t - t0);
        }
    }
    let o = check::Out::parse(&out);
    assert!(
        !o.all("guest", "done").is_empty(),
        "the guest did not finish its scenarios; console tail:\n{}",
        &out[out.len().saturating_sub(4000)..]
    );
    eprintln!(
        "qemu: guest init ran after {:.1} s wall (guest uptime {} s), all scenarios done after {:.1} s",
        booted_at.map(|d| d.as_secs_f64()).unwrap_or(f64::NAN),
        o.one("guest", "booted"),
        wall.as_secs_f64()
    );
    // Evidence in the test log: what the guest's kernel read back and its last telemetry sample.
    // (Only printed: check::limits below decodes the record and fails on a bad one.)
    if let Some(r) = o.all("limits", "record").last() {
        match serde_json::from_str::<drums::record::Session>(r) {
            Ok(s) => eprintln!("qemu: v2 read_back {}", s.cgroup.map(|c| serde_json::to_string(&c.read_back).unwrap()).unwrap_or_default()),
            Err(e) => eprintln!("qemu: v2 record is not a session record ({e}): {r}"),
        }
    }
    eprintln!("qemu: v2 raw {:?}", o.all("limits", "raw"));
    eprintln!("qemu: v2 last sample {}", o.all("limits", "sample").last().unwrap_or(&""));
    eprintln!("qemu: v2 hog {} {}", o.all("hog", "hog-status").join(" "), o.all("hog", "sample").join(" "));
    eprintln!("qemu: v2 forks {}", o.all("pids", "forks").join(" "));
    // Nobody but drums-cgroup enabled the controllers: none were passed down before the scenarios ran.
    let words = |v: &str| v.trim().trim_start_matches('[').trim_end_matches(']').split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let before = words(o.one("guest", "subtree_control_before"));
    assert!(before.is_empty(), "the guest's root cgroup passed controllers down before drums-cgroup ran: {before:?}");
    // The limits read back (and drums-cgroup's error if it could not write them) ...
    check::limits(&o, "v2");
    // ... because drums-cgroup passed the controllers down itself.
    let after = words(o.one("guest", "subtree_control_after"));
    let parent = words(o.one("limits", "parent-subtree-control"));
    for c in ["cpu", "memory", "pids"] {
        assert!(after.iter().any(|x| x == c), "drums-cgroup did not enable {c} in the root's subtree_control: {after:?}");
        assert!(parent.iter().any(|x| x == c), "drums-cgroup did not enable {c} in drums/cgroup.subtree_control: {parent:?}");
    }
    check::pids(&o);
    check::hog(&o);
    check::sigkill(&o);
    check::freeze(&o);
    check::fail(&o);
    let _ = std::fs::remove_dir_all(&dir);
}
