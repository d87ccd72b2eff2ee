//! Finding and running CRIU, and its command lines (options.rs).

mod options;

pub use options::{freeze_cgroup_options, leaves_net_out, CgroupPlacement, Dump, Restore, EXTERNAL_NET};
use std::path::PathBuf;

/// The preload shim of every CRIU call (lib/criu-shim), beside the tools.
pub const CRIU_SHIM: &str = "libdrums_criu_shim.so";

/// The private CRIU that pipelines/install-criu.sh installs.
pub const DEFAULT_PRIVATE: &str = "/opt/drums/criu/bin/criu";

/// CRIU: $DRUMS_CRIU, else the private install when present, else `criu` on PATH.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("DRUMS_CRIU") {
        return p.into();
    }
    if std::path::Path::new(DEFAULT_PRIVATE).exists() {
        return DEFAULT_PRIVATE.into();
    }
    "criu".into()
}

/// How long a CRIU call may take: $DRUMS_CRIU_TIMEOUT seconds, default 60. CRIU 4.2 can hang instead of
/// failing (a veth name that already exists, a task that vanished mid-restore), so every call has a limit.
pub fn timeout() -> std::time::Duration {
    let s = std::env::var("DRUMS_CRIU_TIMEOUT").ok().and_then(|v| v.parse::<f64>().ok()).filter(|s| *s > 0.0).unwrap_or(60.0);
    std::time::Duration::from_secs_f64(s)
}

/// A CRIU command with what every Drums call of CRIU needs: it dies with the tool that runs it, and it
/// finds its kernel-feature cache (see `KdatCache`). A dump and a restore get it with their arguments
/// from `Dump::command` and `Restore::command`; then `run` it.
pub fn command() -> std::process::Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(binary());
    // CRIU reads the resource limits of tasks that are not root (the desktop's) with prlimit(2), which a
    // root without CAP_SYS_RESOURCE (this kind of machine) is refused: the shim reads them from /proc
    // then (lib/criu-shim). Restored tasks do not inherit CRIU's environment.
    if let Some(shim) = std::env::current_exe().ok().and_then(|e| Some(e.parent()?.join(CRIU_SHIM))).filter(|p| p.exists()) {
        cmd.env("LD_PRELOAD", shim);
    }
    let cache = KdatCache::prepare();
    // CRIU must not outlive the tool that runs it unledgered: if the tool dies, so does the call in flight.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if let Some(c) = &cache {
                c.enter();
            }
            Ok(())
        });
    }
    cmd
}

/// CRIU probes the kernel at every start (about 25 ms here: a socket pair, a TCP repair probe, an
/// iptables call...) unless it finds the result in /run/criu.kdat, and it keeps that file only where /run
/// is a tmpfs, which makes the cache die with the boot. This machine's /run is not a tmpfs. So Drums keeps
/// the bytes itself, keyed by the boot and the CRIU binary, and runs each CRIU call in a mount namespace
/// of its own whose /run is a fresh tmpfs holding that file, with Drums' own directories under /run bound
/// back in. Nothing changes on the host; a cache that cannot be made or entered only costs the probe.
struct KdatCache {
    bytes: Vec<u8>,
    /// Drums' roots below /run, bound back into the private /run.
    rebind: Vec<std::ffi::CString>,
}

const RUN: &std::ffi::CStr = c"/run";
const KDAT_FILE: &std::ffi::CStr = c"/run/criu.kdat";

impl KdatCache {
    /// The cache for this boot and CRIU binary, made now if missing. None: use CRIU as it is (/run is
    /// already a tmpfs, the cache cannot be made, or $DRUMS_CRIU_KDAT=off).
    fn prepare() -> Option<KdatCache> {
        if std::env::var("DRUMS_CRIU_KDAT").is_ok_and(|v| v == "off") || run_is_tmpfs() {
            return None;
        }
        let path = cache_path()?;
        let bytes = match std::fs::read(&path) {
            Ok(b) if !b.is_empty() => b,
            _ => {
                let b = generate()?;
                let _ = std::fs::create_dir_all(path.parent()?);
                let tmp = path.with_extension(format!("tmp{}", std::process::id()));
                std::fs::write(&tmp, &b).ok()?;
                std::fs::rename(&tmp, &path).ok()?;
                // Caches of earlier boots or other CRIU binaries are never read again.
                for e in std::fs::read_dir(path.parent()?).into_iter().flatten().flatten() {
                    let name = e.file_name();
                    if name.to_string_lossy().starts_with("kdat-") && e.path() != path {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
                b
            }
        };
        let mut rebind: Vec<std::ffi::CString> = vec![];
        for root in [crate::state::state_root(), crate::state::checkpoint_root()] {
            // Resolved first: a root given as /var/run/drums lives under /run all the same.
            let _ = crate::state::private_root(&root);
            let root = std::fs::canonicalize(&root).unwrap_or(root);
            if root.starts_with("/run") && root != std::path::Path::new("/run") && !rebind.iter().any(|c| root.starts_with(c.to_str().unwrap_or(""))) {
                rebind.push(std::ffi::CString::new(root.as_os_str().as_encoded_bytes()).ok()?);
            }
        }
        Some(KdatCache { bytes, rebind })
    }

    /// In the child, before exec: a private mount namespace whose /run is a tmpfs with the cache in it.
    /// Only raw system calls (this runs between fork and exec). Any failure leaves CRIU without the cache
    /// but otherwise as it was: the tmpfs is detached again if a root cannot be bound back.
    fn enter(&self) {
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return;
            }
            // Nothing mounted here reaches the host; the host's later mounts still reach CRIU.
            if libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_SLAVE, std::ptr::null()) != 0 {
                return;
            }
            // Each root is opened before the tmpfs hides it, then bound back from that descriptor (a bind
            // source must belong to this namespace, so it is opened here, not in the tool).
            let mut fds = [-1i32; 4];
            for (i, path) in self.rebind.iter().enumerate().take(fds.len()) {
                fds[i] = libc::open(path.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC);
                if fds[i] < 0 {
                    return;
                }
            }
            if libc::mount(c"tmpfs".as_ptr(), RUN.as_ptr(), c"tmpfs".as_ptr(), libc::MS_NOSUID | libc::MS_NODEV, c"mode=0755,size=1m".as_ptr().cast()) != 0 {
                return;
            }
            for (path, fd) in self.rebind.iter().zip(fds) {
                let mut proc_fd = [0u8; 32];
                fd_path(fd, &mut proc_fd);
                if mkdir_p(path) != 0 || libc::mount(proc_fd.as_ptr().cast(), path.as_ptr(), std::ptr::null(), libc::MS_BIND | libc::MS_REC, std::ptr::null()) != 0 {
                    libc::umount2(RUN.as_ptr(), libc::MNT_DETACH);
                    return;
                }
                libc::close(fd);
            }
            let f = libc::open(KDAT_FILE.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o600);
            if f >= 0 {
                libc::write(f, self.bytes.as_ptr().cast(), self.bytes.len());
                libc::close(f);
            }
        }
    }
}

/// The directory of a sibling's state directory where CRIU, run as root of the sibling's user
/// namespace, works (its log and pid file): owned by the range's root.
pub const USERNS_WORK_DIR: &str = "criu";

/// How a restore runs CRIU as root of a sibling's own user namespace (drums-restore, unless --host-ids): every
/// namespace CRIU makes (PID, mount, IPC, UTS) is then owned by that user namespace, and the restored
/// tasks' ids 0 and 1000 are the range's base and base+1000 on the host. (CRIU's own `--join-ns user`
/// was not used: read in CRIU 4.2's source, not tried, its root task makes the dumped PID, mount, IPC
/// and UTS namespaces as host root, then joins the user namespace, and only then sets their hostname and
/// mounts, without the capabilities over them.) As root of that namespace
/// CRIU holds no right over host-root files, so its child prepares, as host root and before it changes
/// ids, a mount namespace of its own where the state root is a small tmpfs holding only what this
/// restore needs at the same paths: the sibling's root, its work directory (owned by the range) and the
/// checkpoint's images through an idmapped mount (read-only). These mounts die with CRIU's namespace;
/// nothing is ledgered for them. The child also moves itself into the sibling's cgroups (CRIU cannot
/// write host cgroup files from there), so the whole tree is born in them.
pub struct AsUsernsRoot {
    userns: std::fs::File,
    cgroup_procs: Vec<std::ffi::CString>,
    view_root: std::ffi::CString,
    /// (source on the host, where CRIU sees it); the images are the idmapped one.
    root: (std::ffi::CString, std::ffi::CString),
    work: (std::ffi::CString, std::ffi::CString),
    images: (std::ffi::CString, std::ffi::CString),
    /// What to write to /proc/self/timens_offsets of a new time namespace for the restored tree, when
    /// the checkpoint has one (`TimensOffsets`).
    timens_offsets: Option<std::ffi::CString>,
}

/// The clocks of a checkpoint's time namespace at its dump, from CRIU's `timens-N.img` (a `timens_entry`:
/// monotonic = 1 and boottime = 2, each a `timespec` of tv_sec = 1, tv_nsec = 2): None when the images
/// hold none (a checkpoint of a session from before drums-ns gave sessions a time namespace).
pub fn dump_clocks(images: &std::path::Path) -> crate::Result<Option<[(u64, u64); 2]>> {
    use crate::criu_image::{Image, Message};
    use crate::error::IoContext;
    let found = std::fs::read_dir(images).ctx("read directory", images)?.flatten().map(|e| e.file_name()).find(|n| n.to_str().is_some_and(|n| n.starts_with("timens-") && n.ends_with(".img")));
    let Some(path) = found.map(|n| images.join(n)) else { return Ok(None) };
    let bad = || crate::Error::failed(format!("{}: not a time namespace image", path.display()));
    let img = Image::read(&path)?;
    let entry = Message::parse(img.entries.first().ok_or_else(bad)?)?;
    let clock = |field: u32| -> crate::Result<(u64, u64)> {
        let ts = Message::parse(entry.bytes(field).ok_or_else(bad)?)?;
        let (s, ns) = (ts.varint(1).ok_or_else(bad)?, ts.varint(2).ok_or_else(bad)?);
        if ns >= 1_000_000_000 || s > i64::MAX as u64 / 2 {
            return Err(bad());
        }
        Ok((s, ns))
    };
    Ok(Some([clock(1)?, clock(2)?]))
}

/// The offsets that make a new time namespace's monotonic and boot-time clocks read now what they read
/// at the dump (`dump_clocks`), as /proc/PID/timens_offsets takes them: what CRIU does itself when it
/// restores as host root, and skips in its unprivileged mode.
pub fn timens_offsets(dumped: [(u64, u64); 2]) -> std::ffi::CString {
    let now = |id: libc::clockid_t| {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        unsafe { libc::clock_gettime(id, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    };
    let mut text = String::new();
    for ((name, id), (s, ns)) in [("monotonic", libc::CLOCK_MONOTONIC), ("boottime", libc::CLOCK_BOOTTIME)].into_iter().zip(dumped) {
        let off = i128::from(s) * 1_000_000_000 + i128::from(ns) - now(id);
        text.push_str(&format!("{name} {} {}\n", off.div_euclid(1_000_000_000), off.rem_euclid(1_000_000_000)));
    }
    std::ffi::CString::new(text).expect("no NUL in numbers")
}

impl AsUsernsRoot {
    /// `view_root`: the state root (hidden by the tmpfs in CRIU's namespace); the pairs are (host path,
    /// path CRIU is given), each below `view_root`; `cgroup_dirs` the sibling's cgroup directories.
    /// `timens_offsets`: a time namespace for the restored tree (`timens_offsets()`), made by CRIU's child
    /// as host root before it enters the user namespace.
    pub fn new(userns: std::fs::File, cgroup_dirs: &[PathBuf], view_root: &std::path::Path, root: (&std::path::Path, &std::path::Path), work: (&std::path::Path, &std::path::Path), images: (&std::path::Path, &std::path::Path), timens_offsets: Option<std::ffi::CString>) -> crate::Result<AsUsernsRoot> {
        let c = crate::proc::c_path;
        for (_, at) in [root, work, images] {
            if !at.starts_with(view_root) {
                return Err(crate::Error::failed(format!("{} is not below {}", at.display(), view_root.display())));
            }
        }
        Ok(AsUsernsRoot {
            userns,
            cgroup_procs: cgroup_dirs.iter().map(|d| c(&d.join("cgroup.procs"))).collect::<crate::Result<_>>()?,
            view_root: c(view_root)?,
            root: (c(root.0)?, c(root.1)?),
            work: (c(work.0)?, c(work.1)?),
            images: (c(images.0)?, c(images.1)?),
            timens_offsets,
        })
    }

    /// In CRIU's child, before exec, after `command()`'s own preparation: only raw system calls. On
    /// error the child does not exec CRIU (the restore fails with the errno).
    pub fn enter(&self) -> std::io::Result<()> {
        use std::os::fd::AsRawFd;
        let last = std::io::Error::last_os_error;
        let ok = |rc: libc::c_long| if rc < 0 { Err(last()) } else { Ok(rc) };
        unsafe {
            for p in &self.cgroup_procs {
                let fd = ok(libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) as libc::c_long)? as i32;
                let w = libc::write(fd, c"0".as_ptr().cast(), 1);
                libc::close(fd);
                ok(w as libc::c_long)?;
            }
            ok(libc::unshare(libc::CLONE_NEWNS) as libc::c_long)?;
            ok(libc::mount(std::ptr::null(), c"/".as_ptr(), std::ptr::null(), libc::MS_REC | libc::MS_SLAVE, std::ptr::null()) as libc::c_long)?;
            let root_fd = ok(libc::open(self.root.0.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as libc::c_long)? as i32;
            let work_fd = ok(libc::open(self.work.0.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as libc::c_long)? as i32;
            let images_fd = ok(libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, self.images.0.as_ptr(), crate::idrange::OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint))? as i32;
            crate::idrange::set_idmap(images_fd, &self.userns)?;
            ok(libc::mount(c"drums-criu".as_ptr(), self.view_root.as_ptr(), c"tmpfs".as_ptr(), libc::MS_NOSUID | libc::MS_NODEV, c"mode=0711,size=64k".as_ptr().cast()) as libc::c_long)?;
            for at in [&self.root.1, &self.work.1, &self.images.1] {
                if mkdir_p(at) != 0 {
                    return Err(last());
                }
            }
            let mut path = [0u8; 32];
            for (fd, at) in [(root_fd, &self.root.1), (work_fd, &self.work.1)] {
                fd_path(fd, &mut path);
                ok(libc::mount(path.as_ptr().cast(), at.as_ptr(), std::ptr::null(), libc::MS_BIND | libc::MS_REC, std::ptr::null()) as libc::c_long)?;
                libc::close(fd);
            }
            ok(libc::syscall(libc::SYS_move_mount, images_fd, c"".as_ptr(), libc::AT_FDCWD, self.images.1.as_ptr(), crate::idrange::MOVE_MOUNT_F_EMPTY_PATH))?;
            libc::close(images_fd);
            // CRIU's unprivileged mode restores no time namespace: this child makes it, as host root (so
            // the host's user namespace owns it, as it owns a cold session's), with its offsets written
            // before any process is in it (the kernel refuses them afterwards). This child, and so CRIU,
            // stays in the host's; the tree CRIU forks is born in the new one.
            if let Some(offsets) = &self.timens_offsets {
                ok(libc::unshare(crate::nsenter::CLONE_NEWTIME) as libc::c_long)?;
                let fd = ok(libc::open(c"/proc/self/timens_offsets".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) as libc::c_long)? as i32;
                let w = libc::write(fd, offsets.as_ptr().cast(), offsets.as_bytes().len());
                libc::close(fd);
                ok(w as libc::c_long)?;
            }
            // Into the user namespace as its root; the mount namespace is made again from inside it, so
            // that CRIU's own mounts there are its to make.
            ok(libc::setns(self.userns.as_raw_fd(), libc::CLONE_NEWUSER) as libc::c_long)?;
            ok(libc::setgroups(0, std::ptr::null()) as libc::c_long)?;
            ok(libc::setresgid(0, 0, 0) as libc::c_long)?;
            ok(libc::setresuid(0, 0, 0) as libc::c_long)?;
            // Changing ids cleared the parent-death signal `command()` set.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            ok(libc::unshare(libc::CLONE_NEWNS) as libc::c_long)?;
        }
        Ok(())
    }
}

/// "/proc/self/fd/N\0" into `buf`, without allocating; returns its length with the NUL.
fn fd_path(fd: i32, buf: &mut [u8; 32]) -> usize {
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 10];
    let (mut n, mut v) = (0, fd.max(0) as u32);
    loop {
        digits[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..n {
        buf[prefix.len() + i] = digits[n - 1 - i];
    }
    buf[prefix.len() + n] = 0;
    prefix.len() + n + 1
}

/// mkdir -p of an absolute path inside the private /run, without allocating. 0 on success.
unsafe fn mkdir_p(path: &std::ffi::CStr) -> i32 {
    let bytes = path.to_bytes();
    let mut buf = [0u8; 4096];
    if bytes.len() >= buf.len() {
        return -1;
    }
    for i in 1..=bytes.len() {
        if i == bytes.len() || bytes[i] == b'/' {
            buf[..i].copy_from_slice(&bytes[..i]);
            buf[i] = 0;
            if libc::mkdir(buf.as_ptr().cast(), 0o755) != 0 && *libc::__errno_location() != libc::EEXIST {
                return -1;
            }
        }
    }
    0
}

fn run_is_tmpfs() -> bool {
    nix::sys::statfs::statfs("/run").is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

/// `<state root>/criu/kdat-<boot id>-<binary size>-<binary mtime>`: a new boot or another CRIU never
/// reads an old cache.
fn cache_path() -> Option<PathBuf> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let bin = binary();
    let bin = if bin.is_absolute() { bin } else { which(&bin)? };
    // The private install is a wrapper script: its identity is the real binary's.
    let real = bin.parent().and_then(|p| p.parent()).map(|p| p.join("root/usr/sbin/criu")).filter(|p| p.exists()).unwrap_or(bin);
    let m = std::fs::metadata(&real).ok()?;
    use std::os::unix::fs::MetadataExt;
    Some(crate::state::state_root().join("criu").join(format!("kdat-{}-{}-{}", boot.trim(), m.size(), m.mtime())))
}

fn which(name: &std::path::Path) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|c| c.is_file()))
}

/// Let CRIU write its cache into a private tmpfs /run (`criu check` probes everything), and read it back.
fn generate() -> Option<Vec<u8>> {
    let o = crate::proc::output_within(
        std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "slave", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /run && \"$0\" check >/dev/null 2>&1; cat /run/criu.kdat"])
            .arg(binary()),
        None,
        timeout(),
    )
    .ok()?;
    (!o.stdout.is_empty()).then_some(o.stdout)
}

/// Run a CRIU command made by `command()` to its end, or kill it when it exceeds `timeout()`. Its
/// output goes to its log file (-o), so nothing is read from its pipes. CRIU's exit is noticed at once
/// (through a pidfd) rather than at the next of a series of sleeps.
pub fn run(cmd: &mut std::process::Command) -> crate::Result<std::process::ExitStatus> {
    run_watching(cmd, |_| true)
}

/// `run`, calling `watch` with CRIU's pid about every millisecond while it runs, until `watch` returns
/// true (it has seen what it waits for).
pub fn run_watching(cmd: &mut std::process::Command, mut watch: impl FnMut(i32) -> bool) -> crate::Result<std::process::ExitStatus> {
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| crate::Error::env(format!("run CRIU ({}): {e}", binary().display())))?;
    let pid = child.id() as i32;
    let pidfd = match unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32 {
        fd if fd >= 0 => Some(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }),
        _ => None,
    };
    let limit = timeout();
    let t0 = std::time::Instant::now();
    let mut watching = true;
    loop {
        if watching {
            watching = !watch(pid);
        }
        let left = limit.saturating_sub(t0.elapsed());
        if left.is_zero() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(crate::Error::failed(format!("CRIU did not finish within {limit:?} and was killed (DRUMS_CRIU_TIMEOUT)")));
        }
        let wait_ms = if watching { 1 } else { left.as_millis().clamp(1, 100) as i32 };
        if let Some(fd) = &pidfd {
            let mut p = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(fd), events: libc::POLLIN, revents: 0 };
            unsafe { libc::poll(&mut p, 1, wait_ms) };
        } else {
            std::thread::sleep(std::time::Duration::from_millis(wait_ms.min(2) as u64));
        }
        match child.try_wait() {
            Ok(Some(st)) => return Ok(st),
            Ok(None) => {}
            Err(e) => return Err(crate::Error::failed(format!("wait for CRIU: {e}"))),
        }
    }
}

/// The lines of a CRIU log that say what went wrong.
pub fn log_tail(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("Error") && !l.contains("RLIMIT_NOFILE")).collect();
    let pick: Vec<&str> = if errors.is_empty() { text.lines().rev().take(5).collect::<Vec<_>>().into_iter().rev().collect() } else { errors.into_iter().take(6).collect() };
    format!("{} (log: {})", pick.join(" | "), log.display())
}

/// Tasks of a CRIU restore into `state_dir` that outlived it: CRIU killed before its root task (PID 1 of a
/// new PID namespace) was ledgered leaves that task waiting forever. They still carry
/// CRIU's command line, with `-W <state_dir>`: SIGKILL them (killing the root task ends its namespace).
/// Returns (pid, start time) of each task killed.
pub fn kill_stray_restores(state_dir: &std::path::Path) -> Vec<(i32, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let want = state_dir.as_os_str().as_encoded_bytes();
    let mut killed = vec![];
    for pid in crate::proc::pids() {
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let is_restore = args.iter().any(|a| *a == b"restore") && args.iter().any(|a| a.ends_with(b"criu"));
        // A restore as root of a user namespace works in `<state_dir>/criu` (AsUsernsRoot).
        let ours = args.windows(2).any(|w| w[0] == b"-W" && (w[1] == want || std::path::Path::new(std::ffi::OsStr::from_bytes(w[1])) == state_dir.join(USERNS_WORK_DIR)));
        if is_restore && ours {
            if let Some(start) = crate::proc::start_time(pid) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
                killed.push((pid, start));
            }
        }
    }
    for _ in 0..100 {
        if killed.iter().all(|&(p, s)| !crate::proc::alive(p, s)) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    killed
}

/// The name `criu cpuinfo dump` gives the CPU description it writes.
pub const CPUINFO_FILE: &str = "cpuinfo.img";

/// Describe this node's CPU as CRIU compares CPUs (`criu cpuinfo dump`): `dir/cpuinfo.img`.
pub fn cpuinfo_dump(dir: &std::path::Path) -> crate::Result<()> {
    let mut cmd = std::process::Command::new(binary());
    cmd.args(["cpuinfo", "dump", "-D"]).arg(dir);
    let o = crate::proc::output_within(&mut cmd, None, timeout()).map_err(|e| crate::Error::env(format!("run CRIU ({}): {e}", binary().display())))?;
    if !o.status.success() || !dir.join(CPUINFO_FILE).is_file() {
        return Err(crate::Error::failed(format!("criu cpuinfo dump: {}", String::from_utf8_lossy(&o.stderr).trim())));
    }
    Ok(())
}

/// Whether this node's CPU offers what the CPU described by `dir/cpuinfo.img` did, as a restore needs it
/// (`criu cpuinfo check`, CRIU's default --cpu-cap: the FPU and extended state the images hold):
/// Err with CRIU's words when not.
pub fn cpuinfo_check(dir: &std::path::Path) -> crate::Result<std::result::Result<(), String>> {
    let mut cmd = std::process::Command::new(binary());
    cmd.args(["cpuinfo", "check", "-D"]).arg(dir);
    let o = crate::proc::output_within(&mut cmd, None, timeout()).map_err(|e| crate::Error::env(format!("run CRIU ({}): {e}", binary().display())))?;
    if o.status.success() {
        return Ok(Ok(()));
    }
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).take(4).collect();
    Ok(Err(lines.join(" | ")))
}
