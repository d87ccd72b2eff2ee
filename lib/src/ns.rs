//! The session's namespaces and its init.
//!
//! `create` forks a child that calls setsid and unshares PID, mount, IPC, UTS and network namespaces,
//! then forks the future PID 1, which waits on a pipe. The parent ledgers that process, builds the veth
//! pair, and only then tells it to go on: a creator killed at any point leaves either nothing or a
//! ledgered init (an init whose go-pipe closes without a message exits by itself). The init then makes
//! its mounts private, pivots into the overlay, mounts /proc, fills its own /dev, mounts /dev/pts,
//! detaches the old root, sets the hostname, calls setsid, closes every descriptor and re-executes
//! `drums-ns init` from the new root, so that nothing it holds points into the host's file system
//! (CRIU refuses such a tree).

use crate::error::{Error, Result};
use crate::ledger::{Ledger, Resource};
use crate::proc::pipe;
use crate::record::{NsInodes, Namespaces, Session};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// comm of every session init: how the sweep recognises a Drums session's PID namespace.
pub const INIT_COMM: &str = "drums-init";
/// Pseudo-terminals a session's devpts may hold at once (its `max=` option; drums(7), "Host ceilings"):
/// far more than a desktop and its terminals use (a gnome-terminal tab, an exec --pass-terminal: one
/// each), and a thousand sessions' worth fits below the host's kernel.pty.max of
/// pipelines/setup.d/sysctl.sh. CRIU dumps the option with the mount, so restored siblings keep it.
pub const PTYS_PER_SESSION: u32 = 256;
const OLD_ROOT: &str = ".drums-oldroot";

mod exec;
pub use exec::{host_pid_of, spawn, ExecOptions, Spawned};

#[derive(Serialize, Deserialize)]
struct InitConfig {
    merged: PathBuf,
    hostname: String,
    exe: PathBuf,
    session: String,
    /// A session in its own user namespace (crate::idrange): the init makes it last, as the range's root.
    #[serde(default)]
    id_range: Option<crate::record::IdRange>,
}

/// The per-user limits set in a session's own user namespace (/proc/sys/user/*, per user id inside;
/// above them, the host's limits apply to the session as a whole, counted against the range's base id,
/// the namespace's owner). drums(7) SECURITY lists them.
pub const USERNS_LIMITS: &[(&str, u32)] = &[
    ("max_inotify_instances", 128),
    ("max_inotify_watches", 65536),
    ("max_fanotify_groups", 16),
    ("max_fanotify_marks", 8192),
    ("max_user_namespaces", 32),
    ("max_mnt_namespaces", 32),
    // Chromium's sandbox forks each renderer and utility process into a PID namespace of its own (one
    // per site of every open tab): 32 would crash the 31st renderer. Each is also a task, which the
    // session's pids limit bounds.
    ("max_pid_namespaces", 1024),
    ("max_net_namespaces", 32),
    ("max_ipc_namespaces", 32),
    ("max_uts_namespaces", 32),
    ("max_cgroup_namespaces", 32),
    ("max_time_namespaces", 32),
];

pub struct NsOptions {
    pub hostname: Option<String>,
    /// The session's network policy (crate::net::egress).
    pub net: crate::net::egress::Options,
}

/// Create the namespaces and init of a session whose overlay is mounted. Adds `ns` and `net`.
pub fn create(session: &mut Session, opts: &NsOptions) -> Result<()> {
    if session.ns.is_some() {
        return Err(Error::bad_field("ns", "this session already has namespaces"));
    }
    let merged = session.overlay()?.merged.clone();
    let ledger = Ledger::open(&session.state_dir)?;
    ledger.phase("creating")?;
    crate::net::ensure_firewall()?;
    let slot = crate::net::allocate_slot(&ledger, &session.id)?;
    let host_if = crate::net::host_if_name(slot);
    ledger.create_res(Resource::Link { name: host_if.clone() })?;
    let hostname = opts.hostname.clone().unwrap_or_else(|| session.id.clone());
    // The init runs from the session's runtime layer (immutable), so rebuilding the tools never
    // invalidates a checkpoint, and nothing of the host's file system is executed in the session.
    if session.overlay()?.runtime.is_none() || session.overlay()?.image.is_none() {
        return Err(Error::bad_field("overlay.image", "missing: this session's root was made on the host's / by an older drums-overlay"));
    }
    let exe = crate::runtime::inside("drums-ns");

    let id_range = session.id_range;
    let (pid_r, pid_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    // A user namespace's handshake: the init says it made its namespace (uns), the creator writes the
    // maps and the limits and says so (mapped).
    let (uns_r, uns_w) = pipe()?;
    let (mapped_r, mapped_w) = pipe()?;
    // Single-threaded here: no runtime has been started yet, so fork is safe.
    match unsafe { libc::fork() } {
        -1 => return Err(Error::failed(format!("fork: {}", std::io::Error::last_os_error()))),
        0 => {
            drop(pid_r);
            drop(go_w);
            drop(status_r);
            drop(uns_r);
            drop(mapped_w);
            unsafe { child_unshare_and_fork(pid_w, go_r, status_w, Userns { made: uns_w, mapped: mapped_r }) }
        }
        child => {
            drop(pid_w);
            drop(go_r);
            drop(status_w);
            drop(uns_w);
            drop(mapped_r);
            let mut buf = [0u8; 4];
            let got = std::fs::File::from(pid_r).read_exact(&mut buf);
            let mut st = 0;
            unsafe { libc::waitpid(child, &mut st, 0) };
            got.map_err(|e| Error::failed(format!("the namespace child did not report its init: {e}")))?;
            let init_pid = i32::from_le_bytes(buf);
            let init_start = crate::proc::start_time(init_pid).ok_or_else(|| Error::failed("the session init vanished"))?;
            ledger.create_res(Resource::Process { pid: init_pid, start_time: init_start, role: "init".into(), init: true })?;

            let mac = crate::net::random_mac();
            crate::net::create_veth(slot, init_pid, &mac)?;
            crate::net::configure_session_end(init_pid, crate::net::SESSION_IF, slot, None)?;
            session.net = Some(crate::net::net_record(slot, &mac));
            // The policy is applied on a thread of its own while the init starts (the user namespace's
            // maps, its mounts, its exec), and is in place before this returns, so before anything of
            // the session's runs but its init, which opens no connection: its route and resolv.conf are
            // there for every program the desktop starts. Fail-closed as in a restore (egress::apply_to:
            // the route comes last).
            let target = crate::net::egress::Target::of(session)?;
            let netns = crate::nsenter::NsFile::open(init_pid, crate::nsenter::Kind::Net)?;
            let (started, applied) = std::thread::scope(|sc| -> Result<_> {
                let egress = crate::net::egress::apply_beside(sc, &ledger, target, &opts.net, netns, "the session's init start-up")?;
                let started = (|| -> Result<()> {
                    let cfg = InitConfig { merged, hostname: hostname.clone(), exe, session: session.id.clone(), id_range };
                    let mut go = std::fs::File::from(go_w);
                    go.write_all(&serde_json::to_vec(&cfg).expect("config serializes")).map_err(|e| Error::failed(format!("start the session init: {e}")))?;
                    drop(go);
                    let mut made = [0u8; 1];
                    if let (Some(r), Ok(())) = (id_range.as_ref(), std::fs::File::from(uns_r).read_exact(&mut made)) {
                        crate::idrange::write_maps(init_pid, r)?;
                        set_userns_limits(&crate::nsenter::NsFile::open(init_pid, crate::nsenter::Kind::User)?)?;
                        std::fs::File::from(mapped_w).write_all(b"m").map_err(|e| Error::failed(format!("tell the session init its namespace is mapped: {e}")))?;
                    } else {
                        drop(mapped_w);
                    }
                    let mut err = String::new();
                    let _ = std::fs::File::from(status_r).read_to_string(&mut err);
                    if !err.is_empty() {
                        return Err(Error::failed(format!("session init: {err}")));
                    }
                    Ok(())
                })();
                // Joined on every path: a failure leaves the policy's resources whole in the ledger for
                // the destroy, never half made by a thread still running.
                Ok((started, egress.join()?.0))
            })?;
            started?;
            session.egress = applied?;
            session.ns = Some(Namespaces {
                init_pid,
                init_start_time: init_start,
                hostname,
                inodes: inodes(init_pid)?,
            });
            ledger.phase("live")?;
            Ok(())
        }
    }
}

pub fn inodes(pid: i32) -> Result<NsInodes> {
    use crate::proc::ns_inode;
    Ok(NsInodes {
        pid: ns_inode(pid, "pid")?,
        mnt: ns_inode(pid, "mnt")?,
        net: ns_inode(pid, "net")?,
        ipc: ns_inode(pid, "ipc")?,
        uts: ns_inode(pid, "uts")?,
    })
}

/// Set USERNS_LIMITS in the user namespace `ns` (a cold session's init's, or a restored sibling's
/// before CRIU runs in it): a forked child joins it (its /proc/sys/user shows the namespace of the
/// reader) and writes them through the host's /proc.
pub fn set_userns_limits(ns: &crate::nsenter::NsFile) -> Result<()> {
    let files: Vec<(CString, String)> = USERNS_LIMITS.iter().map(|(f, v)| (CString::new(format!("/proc/sys/user/{f}")).expect("no NUL"), v.to_string())).collect();
    match unsafe { libc::fork() } {
        -1 => Err(Error::failed(format!("fork: {}", std::io::Error::last_os_error()))),
        0 => unsafe {
            if ns.enter().is_err() {
                libc::_exit(100);
            }
            for (i, (f, v)) in files.iter().enumerate() {
                let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, v.as_ptr().cast(), v.len()) != v.len() as isize {
                    libc::_exit(1 + i as i32);
                }
                libc::close(fd);
            }
            libc::_exit(0)
        },
        child => {
            let mut st = 0;
            unsafe { libc::waitpid(child, &mut st, 0) };
            let code = if libc::WIFEXITED(st) { libc::WEXITSTATUS(st) } else { -1 };
            match code {
                0 => Ok(()),
                100 => Err(Error::failed("join the session's user namespace to set its limits")),
                n if n >= 1 && (n as usize) <= USERNS_LIMITS.len() => Err(Error::failed(format!("set /proc/sys/user/{} in the session's user namespace", USERNS_LIMITS[n as usize - 1].0))),
                n => Err(Error::failed(format!("the limits helper ended with {n}"))),
            }
        }
    }
}

/// The init's ends of the user namespace handshake (used only when the go message names an id range).
struct Userns {
    made: OwnedFd,
    mapped: OwnedFd,
}

/// In the forked child: new session, new namespaces, fork PID 1, report its pid, exit.
unsafe fn child_unshare_and_fork(pid_w: OwnedFd, go_r: OwnedFd, status_w: OwnedFd, userns: Userns) -> ! {
    libc::setsid();
    // A time namespace of its own (offsets zero: the host's clocks) so that CRIU carries its monotonic and
    // boot-time clocks across a checkpoint: a restored sibling's clocks go on from the dump, and the
    // timers its programs set (Chromium's delayed tasks) fall due when they would have in the source,
    // not all at once at the restore because the host's clock moved on since the dump.
    let flags = libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | libc::CLONE_NEWNET | crate::nsenter::CLONE_NEWTIME;
    if libc::unshare(flags) != 0 {
        let e = std::io::Error::last_os_error();
        let hint = if e.raw_os_error() == Some(libc::EINVAL) { " (a kernel without time namespaces, CONFIG_TIME_NS of Linux 5.6 and later, refuses this)" } else { "" };
        let _ = std::fs::File::from(status_w).write_all(format!("unshare of the PID, mount, IPC, UTS, network and time namespaces: {e}{hint}").as_bytes());
        libc::_exit(1);
    }
    match libc::fork() {
        -1 => libc::_exit(1),
        0 => {
            drop(pid_w);
            let code = match init_stage1(go_r, &status_w, userns) {
                Ok(never) => match never {},
                Err(e) => {
                    let _ = std::fs::File::from(status_w).write_all(e.as_bytes());
                    1
                }
            };
            libc::_exit(code)
        }
        g => {
            let _ = std::fs::File::from(pid_w).write_all(&g.to_le_bytes());
            libc::_exit(0)
        }
    }
}

enum Never {}

/// PID 1 before exec: wait for the go message, build the root, exec `drums-ns init`.
fn init_stage1(go_r: OwnedFd, status_w: &OwnedFd, userns: Userns) -> std::result::Result<Never, String> {
    let mut msg = Vec::new();
    std::fs::File::from(go_r).read_to_end(&mut msg).map_err(|e| format!("read go message: {e}"))?;
    if msg.is_empty() {
        // The creator died before the session was ledgered and networked: leave nothing.
        unsafe { libc::_exit(0) };
    }
    let cfg: InitConfig = serde_json::from_slice(&msg).map_err(|e| format!("go message: {e}"))?;
    let e = |what: &str, p: &dyn AsRef<Path>, err: nix::Error| format!("{what} {}: {err}", p.as_ref().display());

    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>).map_err(|x| e("make private", &"/", x))?;
    std::env::set_current_dir(&cfg.merged).map_err(|x| format!("chdir {}: {x}", cfg.merged.display()))?;
    let _ = std::fs::create_dir(OLD_ROOT);
    nix::unistd::pivot_root(".", OLD_ROOT).map_err(|x| e("pivot_root into", &cfg.merged, x))?;
    std::env::set_current_dir("/").map_err(|x| format!("chdir /: {x}"))?;

    // /proc before the old root goes: the other order failed with CRIU (see docs).
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("proc"), "/proc", Some("proc"), nosuid, None::<&str>).map_err(|x| e("mount", &"/proc", x))?;
    // /dev, /run, /var/lib/drums and /tmp are the session's own empty directories (drums-overlay made them
    // opaque): nothing of the host's shows there, and no tmpfs is needed for that (see overlay::OWN_DIRS).
    for d in crate::overlay::OWN_DIRS {
        let p = Path::new("/").join(d);
        if std::fs::read_dir(&p).map_err(|x| format!("read {}: {x}", p.display()))?.next().is_some() {
            return Err(format!("{} is not empty: the root was not made by drums-overlay create", p.display()));
        }
    }
    for (name, major, minor) in [("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)] {
        let p = format!("/dev/{name}");
        mknod(p.as_str(), SFlag::S_IFCHR, Mode::from_bits_truncate(0o666), makedev(major, minor)).map_err(|x| e("mknod", &p, x))?;
        // mknod is subject to the umask.
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o666)).map_err(|x| format!("chmod {p}: {x}"))?;
    }
    for d in ["/dev/pts", "/dev/shm"] {
        std::fs::create_dir(d).map_err(|x| format!("mkdir {d}: {x}"))?;
    }
    // /dev/shm and /tmp (an opaque directory from drums-overlay) are directories of the session's upper,
    // which is memory already: as tmpfs mounts of their own CRIU would tar them in every dump and untar
    // them in every restore.
    std::fs::set_permissions("/dev/shm", std::os::unix::fs::PermissionsExt::from_mode(0o1777)).map_err(|x| format!("chmod /dev/shm: {x}"))?;
    // max=: the session's share of the host's pseudo-terminals (kernel.pty.max counts every instance's
    // together), so one session opening all it can leaves the others and the host theirs.
    let devpts_opts = format!("newinstance,ptmxmode=0666,mode=0620,max={PTYS_PER_SESSION}");
    mount(Some("devpts"), "/dev/pts", Some("devpts"), MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC, Some(devpts_opts.as_str()))
        .map_err(|x| e("mount", &"/dev/pts", x))?;
    for (link, target) in [("/dev/ptmx", "pts/ptmx"), ("/dev/fd", "/proc/self/fd"), ("/dev/stdin", "/proc/self/fd/0"), ("/dev/stdout", "/proc/self/fd/1"), ("/dev/stderr", "/proc/self/fd/2")] {
        std::os::unix::fs::symlink(target, link).map_err(|x| format!("symlink {link}: {x}"))?;
    }
    mask_proc().map_err(|(what, p, x)| e(what, &p, x))?;
    umount2(&*format!("/{OLD_ROOT}"), MntFlags::MNT_DETACH).map_err(|x| e("detach the old root", &OLD_ROOT, x))?;
    let _ = std::fs::remove_dir(format!("/{OLD_ROOT}"));

    nix::unistd::sethostname(&cfg.hostname).map_err(|x| format!("sethostname: {x}"))?;
    // The session's own names, written from inside (an image holds none): its hostname, and a machine
    // id of its own for D-Bus and whatever else reads one.
    std::fs::write("/etc/hostname", format!("{}\n", cfg.hostname)).map_err(|x| format!("write /etc/hostname: {x}"))?;
    std::fs::write("/etc/machine-id", format!("{}\n", crate::state::random_hex(16))).map_err(|x| format!("write /etc/machine-id: {x}"))?;
    // PID 1 must lead its own session inside the namespace, or CRIU finds a session leader outside it.
    nix::unistd::setsid().map_err(|x| format!("setsid: {x}"))?;
    let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").map_err(|x| format!("open /dev/null: {x}"))?;
    for fd in 0..3 {
        unsafe { libc::dup2(null.as_raw_fd(), fd) };
    }
    drop(null);
    if let Some(r) = cfg.id_range {
        enter_own_userns(&r, userns)?;
    } else {
        drop(userns);
    }
    // The boundary, last: every process of the session descends from this one and inherits it
    // (crate::boundary). The filter first, while the init still has CAP_SYS_ADMIN to install it without
    // no-new-privileges.
    crate::boundary::Seccomp::for_session(cfg.id_range.is_some()).install().map_err(|x| format!("install the seccomp filter: {}", std::io::Error::from_raw_os_error(x)))?;
    crate::boundary::drop_capabilities(crate::boundary::last_cap()).map_err(|x| format!("drop capabilities: {}", std::io::Error::from_raw_os_error(x)))?;
    // Every other descriptor closes at exec; the status pipe's closing tells the creator that all went well.
    unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    let _ = status_w;
    let exe = CString::new(cfg.exe.as_os_str().as_encoded_bytes()).map_err(|_| "exe path has a NUL".to_string())?;
    let args = [CString::new("drums-ns").unwrap(), CString::new("init").unwrap(), CString::new("--session").unwrap(), CString::new(cfg.session).unwrap()];
    let env = [CString::new("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin").unwrap()];
    let err = nix::unistd::execve(&exe, &args, &env).unwrap_err();
    Err(format!("exec {} in the new root: {err}", cfg.exe.display()))
}

/// What the init made as host root, given to the range's root (id 0 inside) before it becomes it.
const MADE_BY_INIT: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/pts", "/dev/shm", "/dev/ptmx", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr", EMPTY_DIR, "/etc/hostname", "/etc/machine-id"];

/// The init's last step as host root, for a session in its own user namespace: hand what it made to the
/// range's root, become the range's root (base) on the host, unshare the user namespace (owned by base,
/// so the kernel's per-user counts of everything inside are charged to base at the host's level), and
/// wait until the creator has written the maps and limits. Every other namespace stays owned by the
/// host's user namespace: root inside holds capabilities over nothing but its own user namespace.
fn enter_own_userns(r: &crate::record::IdRange, userns: Userns) -> std::result::Result<(), String> {
    for p in MADE_BY_INIT {
        std::os::unix::fs::lchown(p, Some(r.base), Some(r.base)).map_err(|x| format!("chown {p}: {x}"))?;
    }
    let base = r.base;
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 || libc::setresgid(base, base, base) != 0 || libc::setresuid(base, base, base) != 0 {
            return Err(format!("become host id {base}: {}", std::io::Error::last_os_error()));
        }
        if libc::unshare(libc::CLONE_NEWUSER) != 0 {
            return Err(format!("unshare(CLONE_NEWUSER) as host id {base}: {}", std::io::Error::last_os_error()));
        }
    }
    std::fs::File::from(userns.made).write_all(b"u").map_err(|x| format!("report the user namespace: {x}"))?;
    let mut b = [0u8; 1];
    std::fs::File::from(userns.mapped).read_exact(&mut b).map_err(|x| format!("the creator did not map the user namespace: {x}"))?;
    // Mapped: this process is id 0 inside, with every capability in its own user namespace (the
    // boundary below then drops what a session may not have, as for any session).
    Ok(())
}

/// Files of /proc that show or change the host (the kernel's memory, its symbols and timers, the magic
/// SysRq key, physical pages): /dev/null is bound over each, as Docker's default masks them. Also
/// `cgroups`: its counts of the host's cgroups tell a session how many sessions run beside it.
pub const MASKED_PROC_FILES: &[&str] = &["kcore", "sysrq-trigger", "keys", "timer_list", "timer_stats", "sched_debug", "kallsyms", "latency_stats", "kpagecount", "kpageflags", "kpagecgroup", "vmcore", "cgroups"];
/// Directories of /proc with hardware and drivers of the host: an empty read-only directory over each.
pub const MASKED_PROC_DIRS: &[&str] = &["acpi", "scsi", "asound"];
/// Directories of /proc that write the host's kernel (most of /proc/sys is not namespaced:
/// kernel.core_pattern would run a program of the session's as host root): bound read-only.
pub const READ_ONLY_PROC: &[&str] = &["sys", "irq", "bus", "fs"];
/// The empty directory bound over MASKED_PROC_DIRS, in the session's own /dev.
const EMPTY_DIR: &str = "/dev/.drums-empty";

/// Mask and write-protect /proc (see MASKED_PROC_FILES, MASKED_PROC_DIRS, READ_ONLY_PROC), after /proc and
/// /dev/null exist. Bind mounts, not tmpfs: CRIU packs and unpacks every tmpfs in each dump and restore.
fn mask_proc() -> std::result::Result<(), (&'static str, PathBuf, nix::Error)> {
    let bind_ro = |src: &Path, dst: &Path| -> std::result::Result<(), (&'static str, PathBuf, nix::Error)> {
        mount(Some(src), dst, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(|x| ("bind", dst.to_path_buf(), x))?;
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        mount(None::<&str>, dst, None::<&str>, flags, None::<&str>).map_err(|x| ("make read-only", dst.to_path_buf(), x))
    };
    for f in MASKED_PROC_FILES {
        let p = Path::new("/proc").join(f);
        if p.exists() {
            bind_ro(Path::new("/dev/null"), &p)?;
        }
    }
    std::fs::create_dir(EMPTY_DIR).map_err(|x| ("create", PathBuf::from(EMPTY_DIR), nix::Error::from_raw(x.raw_os_error().unwrap_or(libc::EIO))))?;
    std::fs::set_permissions(EMPTY_DIR, std::os::unix::fs::PermissionsExt::from_mode(0o555)).map_err(|x| ("chmod", PathBuf::from(EMPTY_DIR), nix::Error::from_raw(x.raw_os_error().unwrap_or(libc::EIO))))?;
    for d in MASKED_PROC_DIRS {
        let p = Path::new("/proc").join(d);
        if p.is_dir() {
            bind_ro(Path::new(EMPTY_DIR), &p)?;
        }
    }
    for d in READ_ONLY_PROC {
        let p = Path::new("/proc").join(d);
        if p.is_dir() {
            bind_ro(&p, &p)?;
        }
    }
    Ok(())
}

/// The session's PID 1 after re-exec: reap every child; on SIGTERM or SIGINT, stop everything and exit.
pub fn init_main() -> ! {
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"drums-init".as_ptr() as libc::c_ulong, 0, 0, 0);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        loop {
            let mut sig = 0;
            libc::sigwait(&set, &mut sig);
            reap_all();
            if sig == libc::SIGTERM || sig == libc::SIGINT {
                libc::kill(-1, libc::SIGTERM);
                for _ in 0..40 {
                    reap_all();
                    if libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) == -1 {
                        break;
                    }
                    libc::usleep(50_000);
                }
                libc::kill(-1, libc::SIGKILL);
                libc::_exit(0);
            }
        }
    }
}

fn reap_all() {
    loop {
        let r = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if r <= 0 {
            break;
        }
    }
}

crate::record_type!(ProcessType = "process");

/// What `drums-ns exec --detach` prints: docs/record.md, "Process record".
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProcessRecord {
    pub drums: u32,
    #[serde(rename = "type")]
    pub record_type: ProcessType,
    pub session: String,
    /// The PID inside the session.
    pub pid: i32,
    /// The PID on the host; null when it could not be told.
    pub host_pid: Option<i32>,
}

