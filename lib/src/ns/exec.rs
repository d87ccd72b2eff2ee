//! `drums-ns exec`: a command run inside a live session.
//!
//! No descriptor of the host reaches a session. Session root can reopen any descriptor a session process
//! holds through /proc/PID/fd and change the file behind it (chmod, chown, write, truncate), so a host
//! file, the host's /dev/null, a FIFO or a socket handed to the command as a standard stream would be
//! handed to the session. The command's standard streams are therefore always one of:
//! - the session's own /dev/null (where the caller's stream is /dev/null, is closed, or is a terminal
//!   for input);
//! - a pipe that this process relays to or from the caller's stream (any other stream);
//! - with `--pass-terminal` and a terminal among the caller's streams: a terminal of the session's own
//!   devpts, opened inside the session, whose master this process relays to the caller's terminal
//!   (as `docker exec -t` does).

use super::pipe;
use crate::error::{Error, Result};
use crate::record::Session;
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

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
    /// Not detached, with a terminal among this process's standard streams: give the command a terminal
    /// of the session's own (its controlling terminal), relayed to this one. By default the command has
    /// no terminal: its output is relayed through pipes, its input is the session's /dev/null when this
    /// process's input is a terminal, and it runs in a process session of its own.
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

/// What one of this process's standard streams is, as far as the command's is concerned.
#[derive(Clone, Copy, PartialEq, Debug)]
enum HostStream {
    /// /dev/null (any character device 1:3): the command gets the session's own.
    Null,
    Terminal,
    /// A file, a pipe, a FIFO, a socket, another device: relayed.
    Other,
}

fn host_stream(fd: i32) -> HostStream {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return HostStream::Null;
    }
    if st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == libc::makedev(1, 3) {
        return HostStream::Null;
    }
    if unsafe { libc::isatty(fd) } == 1 {
        HostStream::Terminal
    } else {
        HostStream::Other
    }
}

/// Whether this process's descriptors `a` and `b` are the same file (`2>&1`): then one pipe carries both,
/// so that their order is kept.
fn same_file(a: i32, b: i32) -> bool {
    let (mut x, mut y): (libc::stat, libc::stat) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    unsafe { libc::fstat(a, &mut x) == 0 && libc::fstat(b, &mut y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino }
}

/// Descriptors 0-2 that are closed are opened on /dev/null, so that no descriptor made below takes a
/// standard stream's number.
fn fill_standard_streams() {
    for fd in 0..3 {
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            let n = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
            if n >= 0 && n != fd {
                unsafe { libc::close(n) };
            }
        }
    }
}

/// A pipe between the command and this process, for one or two of the command's standard streams.
struct Relay {
    /// The command's standard streams it serves (0 for input; 1, 2 or both for output).
    streams: Vec<i32>,
    /// This process's end.
    ours: OwnedFd,
    /// The command's end (dropped here after the fork).
    theirs: OwnedFd,
}

/// How the command's standard streams are made, decided before the fork.
enum Streams {
    Detached,
    Relayed(Vec<Relay>),
    /// A terminal opened inside the session: the child sends its master back over `theirs`.
    Terminal { ours: OwnedFd, theirs: OwnedFd, winsize: Option<libc::winsize>, host_tty: i32 },
}

impl Streams {
    fn plan(opts: &ExecOptions) -> Result<Streams> {
        if opts.detach {
            return Ok(Streams::Detached);
        }
        let kinds = [0, 1, 2].map(host_stream);
        if opts.pass_terminal {
            if let Some(tty) = (0..3).find(|&fd| kinds[fd as usize] == HostStream::Terminal) {
                let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
                let winsize = (unsafe { libc::ioctl(tty, libc::TIOCGWINSZ, &mut ws) } == 0).then_some(ws);
                let (ours, theirs) = socketpair()?;
                return Ok(Streams::Terminal { ours, theirs, winsize, host_tty: tty });
            }
        }
        let mut relays = vec![];
        if kinds[0] == HostStream::Other {
            let (r, w) = pipe()?;
            relays.push(Relay { streams: vec![0], ours: w, theirs: r });
        }
        let out: Vec<i32> = [1, 2].into_iter().filter(|&fd| kinds[fd as usize] != HostStream::Null).collect();
        if out.len() == 2 && same_file(1, 2) {
            let (r, w) = pipe()?;
            relays.push(Relay { streams: vec![1, 2], ours: r, theirs: w });
        } else {
            for fd in out {
                let (r, w) = pipe()?;
                relays.push(Relay { streams: vec![fd], ours: r, theirs: w });
            }
        }
        Ok(Streams::Relayed(relays))
    }

    /// The descriptors the child must close at once (this process's ends) and those it hands down to
    /// the command, as raw numbers so that the child neither allocates nor drops anything.
    fn child_view(&self) -> ([i32; 4], [i32; 4], [i32; 3]) {
        let mut ours = [-1; 4];
        let mut theirs = [-1; 4];
        let mut fds = [-1; 3];
        match self {
            Streams::Detached => {}
            Streams::Relayed(relays) => {
                for (i, r) in relays.iter().enumerate() {
                    ours[i] = r.ours.as_raw_fd();
                    theirs[i] = r.theirs.as_raw_fd();
                    for &s in &r.streams {
                        fds[s as usize] = r.theirs.as_raw_fd();
                    }
                }
            }
            Streams::Terminal { ours: o, theirs: t, .. } => {
                ours[0] = o.as_raw_fd();
                theirs[0] = t.as_raw_fd();
            }
        }
        (ours, theirs, fds)
    }
}

fn socketpair() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(Error::failed(format!("socketpair: {}", std::io::Error::last_os_error())));
    }
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// ioctl(2) on a pseudo-terminal master: open its peer without a path lookup (Linux 4.13).
const TIOCGPTPEER: libc::c_ulong = 0x5441;

/// In the child, inside the session's mount namespace and boundary: open a terminal of the session's
/// devpts, send its master to this tool's host process over `sock`, return the peer (close-on-exec)
/// or -1.
unsafe fn open_session_terminal(sock: i32, winsize: Option<&libc::winsize>) -> i32 {
    // /dev/pts is the session's own devpts mount (ns::create), which session root cannot unmount or
    // replace; /dev/ptmx is a link it could change.
    let master = libc::open(c"/dev/pts/ptmx".as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
    if master < 0 {
        return -1;
    }
    let unlock: libc::c_int = 0;
    if libc::ioctl(master, libc::TIOCSPTLCK, &unlock) != 0 {
        return -1;
    }
    if let Some(ws) = winsize {
        libc::ioctl(master, libc::TIOCSWINSZ, ws as *const libc::winsize);
    }
    let peer = libc::ioctl(master, TIOCGPTPEER, libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
    if peer < 0 || !send_fd(sock, master) {
        return -1;
    }
    libc::close(master);
    peer
}

/// Send descriptor `fd` over the Unix socket `sock` (SCM_RIGHTS), without allocating.
unsafe fn send_fd(sock: i32, fd: i32) -> bool {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec { iov_base: byte.as_mut_ptr().cast(), iov_len: 1 };
    let mut control = [0u64; 4];
    let mut msg: libc::msghdr = std::mem::zeroed();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<i32>() as u32) as usize;
    let cmsg = libc::CMSG_FIRSTHDR(&msg);
    (*cmsg).cmsg_level = libc::SOL_SOCKET;
    (*cmsg).cmsg_type = libc::SCM_RIGHTS;
    (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<i32>() as u32) as usize;
    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<i32>(), fd);
    libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) == 1
}

/// Receive one descriptor sent with `send_fd`; None when the sender went away without sending.
fn recv_fd(sock: &OwnedFd) -> Option<OwnedFd> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(std::os::fd::RawFd);
    let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC).ok()?;
    let fd = msg.cmsgs().ok()?.find_map(|c| match c {
        ControlMessageOwned::ScmRights(fds) => fds.first().copied(),
        _ => None,
    })?;
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Run `argv` inside the session: join its cgroups, then its IPC, UTS, network, PID, mount and time
/// namespaces (and its user namespace, if it has one), fork into the PID namespace, exec. Call only from a single-threaded process.
pub fn spawn(session: &Session, argv: &[String], opts: &ExecOptions) -> Result<Spawned> {
    let ns = session.ns()?;
    if !crate::proc::alive(ns.init_pid, ns.init_start_time) {
        return Err(Error::failed(format!("session {}: its init (pid {}) is gone", session.id, ns.init_pid)));
    }
    if argv.is_empty() {
        return Err(Error::Usage("no command given".into()));
    }
    fill_standard_streams();
    use crate::nsenter::{Kind, NsFile};
    let mut ns_files = [Kind::Ipc, Kind::Uts, Kind::Net, Kind::Pid, Kind::Mnt, Kind::Time].map(|k| NsFile::open(ns.init_pid, k)).into_iter().collect::<Result<Vec<_>>>()?;
    // A session in its own user namespace (crate::idrange): that one last, while this process still has
    // the host's capabilities the others need; then it becomes the namespace's root (host id base).
    let own_userns = session.id_range.is_some();
    if own_userns {
        ns_files.push(NsFile::open(ns.init_pid, Kind::User)?);
    }
    // Everything the child needs is prepared before fork: no allocation after it.
    let cargs: Vec<CString> = argv.iter().map(|a| CString::new(a.as_str())).collect::<std::result::Result<_, _>>().map_err(|_| Error::bad_input("argument with NUL"))?;
    let mut env: Vec<(String, String)> = vec![("PATH".into(), DEFAULT_PATH.into()), ("HOME".into(), "/root".into()), ("TERM".into(), "xterm".into())];
    // The session's upstream proxy (drums(7), "Network boundary"), unless the caller sets its own.
    if let Some(p) = session.egress.as_ref().and_then(|e| e.proxy.as_deref()).and_then(|u| crate::net::egress::Proxy::parse(u).ok().flatten()) {
        env.extend(p.env());
    }
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
    let streams = Streams::plan(opts)?;
    let (ours, theirs, mut child_fds) = streams.child_view();
    let terminal = match &streams {
        Streams::Terminal { winsize, .. } => Some(*winsize),
        _ => None,
    };
    let seccomp = crate::boundary::Seccomp::for_session(own_userns);
    let last_cap = crate::boundary::last_cap();

    match unsafe { libc::fork() } {
        -1 => Err(Error::failed(format!("fork: {}", std::io::Error::last_os_error()))),
        0 => unsafe {
            drop(pid_r);
            drop(exec_r);
            for fd in ours.into_iter().filter(|&f| f >= 0) {
                libc::close(fd);
            }
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
            if own_userns && (libc::setgroups(0, std::ptr::null()) != 0 || libc::setresgid(0, 0, 0) != 0 || libc::setresuid(0, 0, 0) != 0) {
                libc::_exit(126);
            }
            // The session's boundary (crate::boundary), before anything of the session can see this
            // process: the same filter and capabilities as the session's init gave everything else.
            if seccomp.install().is_err() || crate::boundary::drop_capabilities(last_cap).is_err() {
                libc::_exit(126);
            }
            let mut theirs = theirs;
            if let Some(winsize) = terminal {
                let peer = open_session_terminal(theirs[0], winsize.as_ref());
                if peer < 0 {
                    libc::_exit(126);
                }
                libc::close(theirs[0]);
                theirs[0] = -1;
                child_fds = [peer, -1, -1];
            }
            // setns(CLONE_NEWPID) only places this process's children in the session's PID namespace, and
            // orphans go to the reaper of their parent's namespace: the command is forked from a process
            // inside (b), so that when b exits the command is reparented to the session's init, not the
            // host's.
            let b = libc::fork();
            if b == 0 {
                let c = libc::fork();
                if c == 0 {
                    let fds = if terminal.is_some() { [child_fds[0]; 3] } else { child_fds };
                    let stdio = ChildStdio { fds, terminal: terminal.is_some() };
                    exec_child(&cargs, &cenv, log.as_ref(), &cwd, opts.detach, opts.uid_gid, exec_w.as_raw_fd(), &stdio);
                }
                // Only the command may hold the exec-status pipe and its streams, or their end-of-file
                // would wait for b.
                drop(exec_w);
                close_streams(&theirs, &child_fds);
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
            close_streams(&theirs, &child_fds);
            libc::_exit(if b < 0 { 126 } else { wait_code(b) })
        },
        a => {
            drop(pid_w);
            drop(exec_w);
            drop(ns_files);
            let (relays, session_terminal) = match streams {
                Streams::Detached => (vec![], None),
                Streams::Relayed(relays) => (relays, None),
                Streams::Terminal { ours, theirs, host_tty, .. } => {
                    drop(theirs);
                    (vec![], Some((recv_fd(&ours), host_tty)))
                }
            };
            // Blocked before the relay threads start, so that they inherit it: a terminal's signal must
            // reach the waiting thread, which passes it on, and not end this process from a relay.
            let forwarded = (!opts.detach).then(|| block_signals(session_terminal.is_some()));
            let mut joined: Vec<std::thread::JoinHandle<()>> = vec![];
            let mut raw_mode = None;
            let mut master_fd = None;
            for r in relays {
                drop(r.theirs);
                if r.streams == [0] {
                    // Not joined: this process's input may never end, and the command may not read it.
                    std::thread::spawn(move || copy_to(0, r.ours));
                } else {
                    joined.push(std::thread::spawn(move || copy_from(r.ours, r.streams[0])));
                }
            }
            if let Some((master, host_tty)) = session_terminal {
                let master = match master {
                    Some(m) => m,
                    None => {
                        let st = wait_code(a);
                        return Err(Error::failed(format!("session {}: could not open a terminal in the session (exit {st})", session.id)));
                    }
                };
                master_fd = Some((master.as_raw_fd(), host_tty));
                if host_stream(0) == HostStream::Terminal {
                    raw_mode = RawMode::enter(0);
                }
                if host_stream(0) != HostStream::Null {
                    let input = master.try_clone().map_err(|e| Error::failed(format!("dup: {e}")))?;
                    std::thread::spawn(move || copy_to(0, input));
                }
                // The terminal's end of file is EIO once every holder of its peer has closed it.
                joined.push(std::thread::spawn(move || copy_from(master, 1)));
            }
            let mut buf = [0u8; 4];
            let got = std::fs::File::from(pid_r).read_exact(&mut buf);
            let ns_pid = got.as_ref().ok().map(|_| i32::from_le_bytes(buf));
            let group = forwarded.as_ref().and(ns_pid).and_then(|p| host_pid_of(ns.inodes.pid, p));
            let st = wait_forwarding_signals(a, group, master_fd);
            for t in joined {
                let _ = t.join();
            }
            drop(raw_mode);
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

/// In a child that is not the command: close the command's ends of its streams.
unsafe fn close_streams(theirs: &[i32; 4], child_fds: &[i32; 3]) {
    for &fd in theirs.iter().chain(child_fds.iter()) {
        if fd >= 0 {
            libc::close(fd);
        }
    }
}

/// The host terminal `fd` in raw mode (its keys go to the session's terminal, which interprets them),
/// until dropped.
struct RawMode {
    fd: i32,
    before: libc::termios,
}

impl RawMode {
    fn enter(fd: i32) -> Option<RawMode> {
        unsafe {
            let mut before: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd, &mut before) != 0 {
                return None;
            }
            let mut raw = before;
            libc::cfmakeraw(&mut raw);
            (libc::tcsetattr(fd, libc::TCSADRAIN, &raw) == 0).then_some(RawMode { fd, before })
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        unsafe { libc::tcsetattr(self.fd, libc::TCSADRAIN, &self.before) };
    }
}

/// Copy this process's descriptor `fd` into `to` until either ends.
fn copy_to(fd: i32, to: OwnedFd) {
    let mut to = std::fs::File::from(to);
    let mut buf = [0u8; 16384];
    loop {
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 || to.write_all(&buf[..n as usize]).is_err() {
            return;
        }
    }
}

/// Copy `from` to this process's descriptor `fd` until end of file (or EIO: a terminal whose peer is
/// closed everywhere).
fn copy_from(from: OwnedFd, fd: i32) {
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

const ENDING_SIGNALS: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

fn forwarded_signals(terminal: bool) -> libc::sigset_t {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in ENDING_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        if terminal {
            libc::sigaddset(&mut set, libc::SIGWINCH);
        }
        // Blocked and waited for with the others, so that the command's end is seen at once.
        libc::sigaddset(&mut set, libc::SIGCHLD);
        set
    }
}

/// Block the signals that end a command run from a terminal, SIGCHLD (and SIGWINCH, with a session
/// terminal); returns the mask before.
fn block_signals(terminal: bool) -> libc::sigset_t {
    let set = forwarded_signals(terminal);
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

/// Wait for `pid` (the forked joiner). With `group` (the command's process group, in a process session
/// of its own that the caller's terminal does not reach; those signals are blocked here) SIGINT,
/// SIGTERM, SIGHUP and SIGQUIT are passed on to it; with a session terminal (`master`, and the host
/// terminal whose size it follows), SIGWINCH copies the host terminal's size to it. Returns the wait
/// status.
fn wait_forwarding_signals(pid: i32, group: Option<i32>, master: Option<(i32, i32)>) -> i32 {
    let mut st = 0;
    let Some(group) = group else {
        unsafe { libc::waitpid(pid, &mut st, 0) };
        return st;
    };
    let set = forwarded_signals(master.is_some());
    loop {
        if unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) } == pid {
            return st;
        }
        let timeout = libc::timespec { tv_sec: 0, tv_nsec: 20_000_000 };
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &timeout) };
        if sig == libc::SIGWINCH {
            if let Some((master, host_tty)) = master {
                let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
                if unsafe { libc::ioctl(host_tty, libc::TIOCGWINSZ, &mut ws) } == 0 {
                    unsafe { libc::ioctl(master, libc::TIOCSWINSZ, &ws) };
                }
            }
        } else if sig > 0 && sig != libc::SIGCHLD {
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
        EXEC_STEP_STREAMS => format!("set up its standard streams: {errno}"),
        _ => format!("exec: {errno}"),
    })
}

const EXEC_STEP_IDS: u8 = 1;
const EXEC_STEP_EXEC: u8 = 2;
const EXEC_STEP_STREAMS: u8 = 3;
/// Where the exec-status pipe's write end sits in the command's process, out of the way of stdio.
const EXEC_STATUS_FD: i32 = 3;

/// A non-detached command's standard streams: for each, the descriptor it gets (a relay pipe's end or
/// the session terminal's peer), or -1 for the session's /dev/null; and whether that terminal becomes
/// its controlling terminal.
struct ChildStdio {
    fds: [i32; 3],
    terminal: bool,
}

#[allow(clippy::too_many_arguments)]
unsafe fn exec_child(args: &[CString], env: &[CString], log: Option<&CString>, cwd: &CString, detach: bool, ids: Option<(u32, u32)>, exec_w: i32, stdio: &ChildStdio) -> ! {
    // The pipe goes to a fixed descriptor first, so that closing every other one below keeps it; dup3
    // sets close-on-exec again (dup2 would clear it). Every descriptor made by spawn is above 2
    // (fill_standard_streams), and the streams' descriptors are moved off 3 first.
    let mut fds = stdio.fds;
    for fd in fds.iter_mut().filter(|f| **f == EXEC_STATUS_FD) {
        *fd = libc::fcntl(EXEC_STATUS_FD, libc::F_DUPFD_CLOEXEC, EXEC_STATUS_FD + 1);
    }
    if exec_w != EXEC_STATUS_FD && libc::dup3(exec_w, EXEC_STATUS_FD, libc::O_CLOEXEC) < 0 {
        libc::_exit(126);
    }
    let report = |step: u8| {
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0).to_le_bytes();
        let msg = [step, e[0], e[1], e[2], e[3]];
        libc::write(EXEC_STATUS_FD, msg.as_ptr().cast(), msg.len());
    };
    // Every process of a command leads a process session of its own: no terminal of the caller's is
    // its controlling terminal.
    libc::setsid();
    if detach {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        let out = match log {
            Some(l) => libc::open(l.as_ptr(), libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND, 0o644),
            None => null,
        };
        libc::dup2(null, 0);
        libc::dup2(if out >= 0 { out } else { null }, 1);
        libc::dup2(if out >= 0 { out } else { null }, 2);
    } else {
        // The session's own /dev/null, opened inside its mount namespace.
        let null = if fds.contains(&-1) { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) } else { -1 };
        for (target, fd) in fds.iter().enumerate() {
            let from = if *fd >= 0 { *fd } else { null };
            if from < 0 || libc::dup2(from, target as i32) < 0 {
                report(EXEC_STEP_STREAMS);
                libc::_exit(126);
            }
        }
        if stdio.terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
            report(EXEC_STEP_STREAMS);
            libc::_exit(126);
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
