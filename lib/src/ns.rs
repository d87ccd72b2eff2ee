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
use crate::record::{NsInodes, Namespaces, Session};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use serde::{Deserialize, Serialize};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// comm of every session init: how the sweep recognises a Drums session's PID namespace.
pub const INIT_COMM: &str = "drums-init";
const OLD_ROOT: &str = ".drums-oldroot";

#[derive(Serialize, Deserialize)]
struct InitConfig {
    merged: PathBuf,
    hostname: String,
    exe: PathBuf,
    session: String,
}

pub struct NsOptions {
    pub hostname: Option<String>,
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::failed(format!("pipe2: {}", std::io::Error::last_os_error())));
    }
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
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

    let (pid_r, pid_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    // Single-threaded here: no runtime has been started yet, so fork is safe.
    match unsafe { libc::fork() } {
        -1 => return Err(Error::failed(format!("fork: {}", std::io::Error::last_os_error()))),
        0 => {
            drop(pid_r);
            drop(go_w);
            drop(status_r);
            unsafe { child_unshare_and_fork(pid_w, go_r, status_w) }
        }
        child => {
            drop(pid_w);
            drop(go_r);
            drop(status_w);
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

            let cfg = InitConfig { merged, hostname: hostname.clone(), exe, session: session.id.clone() };
            let mut go = std::fs::File::from(go_w);
            go.write_all(&serde_json::to_vec(&cfg).expect("config serializes")).map_err(|e| Error::failed(format!("start the session init: {e}")))?;
            drop(go);
            let mut err = String::new();
            let _ = std::fs::File::from(status_r).read_to_string(&mut err);
            if !err.is_empty() {
                return Err(Error::failed(format!("session init: {err}")));
            }
            session.ns = Some(Namespaces {
                init_pid,
                init_start_time: init_start,
                hostname,
                inodes: inodes(init_pid)?,
            });
            session.net = Some(crate::net::net_record(slot, &mac));
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

/// In the forked child: new session, new namespaces, fork PID 1, report its pid, exit.
unsafe fn child_unshare_and_fork(pid_w: OwnedFd, go_r: OwnedFd, status_w: OwnedFd) -> ! {
    libc::setsid();
    let flags = libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | libc::CLONE_NEWNET;
    if libc::unshare(flags) != 0 {
        let _ = std::fs::File::from(status_w).write_all(format!("unshare: {}", std::io::Error::last_os_error()).as_bytes());
        libc::_exit(1);
    }
    match libc::fork() {
        -1 => libc::_exit(1),
        0 => {
            drop(pid_w);
            let code = match init_stage1(go_r, &status_w) {
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
fn init_stage1(go_r: OwnedFd, status_w: &OwnedFd) -> std::result::Result<Never, String> {
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
    mount(Some("devpts"), "/dev/pts", Some("devpts"), MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC, Some("newinstance,ptmxmode=0666,mode=0620"))
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
    // The boundary, last: every process of the session descends from this one and inherits it
    // (crate::boundary). The filter first, while the init still has CAP_SYS_ADMIN to install it without
    // no-new-privileges.
    crate::boundary::Seccomp::session().install().map_err(|x| format!("install the seccomp filter: {}", std::io::Error::from_raw_os_error(x)))?;
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

/// Files of /proc that show or change the host (the kernel's memory, its symbols and timers, the magic
/// SysRq key, physical pages): /dev/null is bound over each, as Docker's default masks them.
pub const MASKED_PROC_FILES: &[&str] = &["kcore", "sysrq-trigger", "keys", "timer_list", "timer_stats", "sched_debug", "kallsyms", "latency_stats", "kpagecount", "kpageflags", "kpagecgroup", "vmcore"];
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

/// How to run a command inside a session.
#[derive(Default, Clone)]
pub struct ExecOptions {
    /// Detach: new session, stdio on `log` (a path inside the session) or /dev/null, return at once.
    pub detach: bool,
    pub log: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<PathBuf>,
    /// Run as this uid/gid (after joining), or as root.
    pub uid_gid: Option<(u32, u32)>,
    /// Not detached: hand the command this process's terminal, when its standard streams are one. By
    /// default a terminal never reaches a session: the command's output is relayed through pipes, its
    /// input is the session's /dev/null, and it runs in a process session of its own (no controlling
    /// terminal to open as /dev/tty).
    pub pass_terminal: bool,
}

pub struct Spawned {
    /// None when the process could not be found from the host (a short command already gone).
    pub host_pid: Option<i32>,
    pub ns_pid: i32,
    /// Exit status when not detached.
    pub status: Option<i32>,
    /// Why the command could not be started, when not detached (its status is then 127, as a shell's).
    pub exec_error: Option<String>,
}

const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Run `argv` inside the session: join its cgroups, then its IPC, UTS, network, PID and mount
/// namespaces, fork into the PID namespace, exec. Call only from a single-threaded process.
pub fn spawn(session: &Session, argv: &[String], opts: &ExecOptions) -> Result<Spawned> {
    let ns = session.ns()?;
    if !crate::proc::alive(ns.init_pid, ns.init_start_time) {
        return Err(Error::failed(format!("session {}: its init (pid {}) is gone", session.id, ns.init_pid)));
    }
    if argv.is_empty() {
        return Err(Error::Usage("no command given".into()));
    }
    use crate::nsenter::{Kind, NsFile};
    let ns_files = [Kind::Ipc, Kind::Uts, Kind::Net, Kind::Pid, Kind::Mnt].map(|k| NsFile::open(ns.init_pid, k)).into_iter().collect::<Result<Vec<_>>>()?;
    // Everything the child needs is prepared before fork: no allocation after it.
    let cargs: Vec<CString> = argv.iter().map(|a| CString::new(a.as_str())).collect::<std::result::Result<_, _>>().map_err(|_| Error::bad_input("argument with NUL"))?;
    let mut env: Vec<(String, String)> = vec![("PATH".into(), DEFAULT_PATH.into()), ("HOME".into(), "/root".into()), ("TERM".into(), "xterm".into())];
    for (k, v) in &opts.env {
        env.retain(|(ek, _)| ek != k);
        env.push((k.clone(), v.clone()));
    }
    let cenv: Vec<CString> = env.iter().map(|(k, v)| CString::new(format!("{k}={v}"))).collect::<std::result::Result<_, _>>().map_err(|_| Error::bad_input("environment with NUL"))?;
    let log = opts.log.as_ref().map(|l| CString::new(l.as_os_str().as_encoded_bytes())).transpose().map_err(|_| Error::bad_input("log path with NUL"))?;
    let cwd = CString::new(opts.cwd.as_ref().map(|c| c.as_os_str().as_encoded_bytes().to_vec()).unwrap_or_else(|| b"/".to_vec())).map_err(|_| Error::bad_input("cwd with NUL"))?;
    let (pid_r, pid_w) = pipe()?;
    // The command's exec status: the write end is close-on-exec and kept only by the command's process,
    // so the read end sees end-of-file once the exec succeeded, or the errno of a failed exec. A detached
    // command that cannot be started would otherwise only leave an exit status 127 that no one collects.
    let (exec_r, exec_w) = pipe()?;
    // A terminal among this process's standard streams stays on the host unless asked for: stdin is
    // then the session's /dev/null, stdout and stderr are pipes this process relays.
    let terminal = |fd: i32| !opts.detach && !opts.pass_terminal && unsafe { libc::isatty(fd) } == 1;
    let stdin_null = terminal(0);
    let mut relays: Vec<(i32, OwnedFd, OwnedFd)> = vec![];
    for fd in [1, 2] {
        if terminal(fd) {
            let (r, w) = pipe()?;
            relays.push((fd, r, w));
        }
    }
    let new_session = !opts.detach && !opts.pass_terminal && (stdin_null || !relays.is_empty() || has_controlling_terminal());
    let mut redirect = [-1i32; 3];
    for (fd, _, w) in &relays {
        redirect[*fd as usize] = w.as_raw_fd();
    }
    let seccomp = crate::boundary::Seccomp::session();
    let last_cap = crate::boundary::last_cap();

    match unsafe { libc::fork() } {
        -1 => Err(Error::failed(format!("fork: {}", std::io::Error::last_os_error()))),
        0 => unsafe {
            drop(pid_r);
            drop(exec_r);
            // Not dumpable from here until the command's exec: the processes of this tool that live in
            // the session's namespaces run the host's drums-ns binary, and a session process must not
            // reach it (/proc/PID/exe, /proc/PID/mem, ptrace: the runc CVE-2019-5736 pattern). The exec
            // of the session's own program makes the command dumpable again.
            if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
                libc::_exit(126);
            }
            let me = libc::getpid();
            if crate::cgroup::enter(session, me).is_err() {
                libc::_exit(126);
            }
            if ns_files.iter().any(|f| f.enter().is_err()) {
                libc::_exit(126);
            }
            drop(ns_files);
            // The session's boundary (crate::boundary), before anything of the session can see this
            // process: the same filter and capabilities as the session's init gave everything else.
            if seccomp.install().is_err() || crate::boundary::drop_capabilities(last_cap).is_err() {
                libc::_exit(126);
            }
            // setns(CLONE_NEWPID) only places this process's children in the session's PID namespace, and
            // orphans go to the reaper of their parent's namespace: the command is forked from a process
            // inside (b), so that when b exits the command is reparented to the session's init, not the
            // host's.
            let b = libc::fork();
            if b == 0 {
                let c = libc::fork();
                if c == 0 {
                    let stdio = ChildStdio { stdin_null, redirect, new_session };
                    exec_child(&cargs, &cenv, log.as_ref(), &cwd, opts.detach, opts.uid_gid, exec_w.as_raw_fd(), &stdio);
                }
                // Only the command may hold the exec-status pipe, or its end-of-file would wait for b.
                drop(exec_w);
                let mut w = std::fs::File::from(pid_w);
                let _ = w.write_all(&c.to_le_bytes());
                drop(w);
                if opts.detach || c < 0 {
                    libc::_exit(if c < 0 { 126 } else { 0 });
                }
                libc::_exit(wait_code(c));
            }
            drop(pid_w);
            drop(exec_w);
            libc::_exit(if b < 0 { 126 } else { wait_code(b) })
        },
        a => {
            drop(pid_w);
            drop(exec_w);
            drop(ns_files);
            // Blocked before the relay threads start, so that they inherit it: a terminal's signal must
            // reach the waiting thread, which passes it on, and not end this process from a relay.
            let forwarded = new_session.then(block_ending_signals);
            // The relays run until every holder of the pipes' write ends (the command and what it left
            // behind) has closed them.
            let relay_threads: Vec<std::thread::JoinHandle<()>> = relays
                .into_iter()
                .map(|(fd, r, w)| {
                    drop(w);
                    std::thread::spawn(move || relay(r, fd))
                })
                .collect();
            let mut buf = [0u8; 4];
            let got = std::fs::File::from(pid_r).read_exact(&mut buf);
            let ns_pid = got.as_ref().ok().map(|_| i32::from_le_bytes(buf));
            let group = forwarded.as_ref().and(ns_pid).and_then(|p| host_pid_of(ns.inodes.pid, p));
            let st = wait_forwarding_signals(a, group);
            for t in relay_threads {
                let _ = t.join();
            }
            if let Some(old) = forwarded {
                unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
            }
            let code = if libc::WIFEXITED(st) { libc::WEXITSTATUS(st) } else { 128 + libc::WTERMSIG(st) };
            if got.is_err() {
                return Err(Error::failed(format!("could not enter session {} (exit {code})", session.id)));
            }
            // Returns as soon as the command has exec'd: no wait beyond the exec itself.
            let mut failure = Vec::new();
            let _ = std::fs::File::from(exec_r).read_to_end(&mut failure);
            let exec_error = exec_failure(&failure).map(|e| format!("session {}: cannot start {}: {e}", session.id, argv[0]));
            if opts.detach {
                if let Some(e) = exec_error {
                    return Err(Error::failed(e));
                }
            }
            let ns_pid = i32::from_le_bytes(buf);
            let host_pid = host_pid_of(ns.inodes.pid, ns_pid);
            Ok(Spawned { host_pid, ns_pid, status: if opts.detach { None } else { Some(code) }, exec_error })
        }
    }
}

/// Copy a relay pipe to this process's descriptor `fd` until end of file.
fn relay(from: OwnedFd, fd: i32) {
    let mut from = std::fs::File::from(from);
    let mut buf = [0u8; 16384];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut done = 0;
                while done < n {
                    let w = unsafe { libc::write(fd, buf[done..n].as_ptr().cast(), n - done) };
                    if w <= 0 {
                        return;
                    }
                    done += w as usize;
                }
            }
        }
    }
}

/// Whether this process has a controlling terminal, which a child would inherit (and could open as
/// /dev/tty).
fn has_controlling_terminal() -> bool {
    let fd = unsafe { libc::open(c"/dev/tty".as_ptr(), libc::O_RDONLY | libc::O_NOCTTY | libc::O_CLOEXEC) };
    if fd >= 0 {
        unsafe { libc::close(fd) };
        true
    } else {
        false
    }
}

const ENDING_SIGNALS: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

fn ending_signals() -> libc::sigset_t {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in ENDING_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Block the signals that end a command run from a terminal; returns the mask before.
fn block_ending_signals() -> libc::sigset_t {
    let set = ending_signals();
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

/// Wait for `pid` (the forked joiner). With `group` (the command's process group, in a process session
/// of its own that the terminal's signals no longer reach; those signals are blocked here) SIGINT,
/// SIGTERM, SIGHUP and SIGQUIT are passed on to it. Returns the wait status.
fn wait_forwarding_signals(pid: i32, group: Option<i32>) -> i32 {
    let mut st = 0;
    let Some(group) = group else {
        unsafe { libc::waitpid(pid, &mut st, 0) };
        return st;
    };
    let set = ending_signals();
    loop {
        if unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) } == pid {
            return st;
        }
        let timeout = libc::timespec { tv_sec: 0, tv_nsec: 20_000_000 };
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        if sig > 0 {
            unsafe { libc::kill(-group, sig) };
        }
    }
}

fn wait_code(pid: i32) -> i32 {
    let mut st = 0;
    unsafe { libc::waitpid(pid, &mut st, 0) };
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else {
        128 + libc::WTERMSIG(st)
    }
}

/// The host PID of the process that has `ns_pid` in the PID namespace `pidns`.
pub fn host_pid_of(pidns: u64, ns_pid: i32) -> Option<i32> {
    crate::proc::host_pids_by_ns_pid(pidns).get(&ns_pid).copied()
}

/// What the command's process wrote on the exec-status pipe before it gave up: a step and an errno.
fn exec_failure(msg: &[u8]) -> Option<String> {
    let (&step, errno) = msg.split_first()?;
    let errno = std::io::Error::from_raw_os_error(i32::from_le_bytes(errno.try_into().ok()?));
    Some(match step {
        EXEC_STEP_IDS => format!("set its user and group: {errno}"),
        _ => format!("exec: {errno}"),
    })
}

const EXEC_STEP_IDS: u8 = 1;
const EXEC_STEP_EXEC: u8 = 2;
/// Where the exec-status pipe's write end sits in the command's process, out of the way of stdio.
const EXEC_STATUS_FD: i32 = 3;

/// A non-detached command's standard streams: the session's /dev/null for stdin, relay pipes for stdout
/// and stderr (-1: kept), and whether it gets a process session of its own.
struct ChildStdio {
    stdin_null: bool,
    redirect: [i32; 3],
    new_session: bool,
}

#[allow(clippy::too_many_arguments)]
unsafe fn exec_child(args: &[CString], env: &[CString], log: Option<&CString>, cwd: &CString, detach: bool, ids: Option<(u32, u32)>, exec_w: i32, stdio: &ChildStdio) -> ! {
    // The pipe goes to a fixed descriptor first, so that closing every other one below keeps it; dup3
    // sets close-on-exec again (dup2 would clear it).
    if exec_w != EXEC_STATUS_FD && libc::dup3(exec_w, EXEC_STATUS_FD, libc::O_CLOEXEC) < 0 {
        libc::_exit(126);
    }
    let report = |step: u8| {
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0).to_le_bytes();
        let msg = [step, e[0], e[1], e[2], e[3]];
        libc::write(EXEC_STATUS_FD, msg.as_ptr().cast(), msg.len());
    };
    if detach {
        libc::setsid();
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        let out = match log {
            Some(l) => libc::open(l.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND, 0o644),
            None => null,
        };
        libc::dup2(null, 0);
        libc::dup2(if out >= 0 { out } else { null }, 1);
        libc::dup2(if out >= 0 { out } else { null }, 2);
    } else {
        if stdio.new_session {
            libc::setsid();
        }
        if stdio.stdin_null {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
            libc::dup2(null, 0);
        }
        for fd in [1, 2] {
            if stdio.redirect[fd as usize] >= 0 {
                libc::dup2(stdio.redirect[fd as usize], fd);
            }
        }
    }
    // No descriptor of the host may reach the session (CRIU cannot dump it, and it would leak); the
    // exec-status pipe closes at exec.
    libc::syscall(libc::SYS_close_range, (EXEC_STATUS_FD + 1) as u32, u32::MAX, 0u32);
    if libc::chdir(cwd.as_ptr()) != 0 {
        libc::chdir(c"/".as_ptr());
    }
    if let Some((uid, gid)) = ids {
        libc::setgroups(0, std::ptr::null());
        if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            report(EXEC_STEP_IDS);
            libc::_exit(126);
        }
    }
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    // execvpe searches PATH from the environment we pass.
    libc::execvpe(args[0].as_ptr(), argv.as_ptr(), envp.as_ptr());
    report(EXEC_STEP_EXEC);
    libc::_exit(127)
}
