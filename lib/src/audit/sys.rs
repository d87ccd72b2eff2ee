//! The kernel interfaces the audit reads through: a `/proc/PID` directory held open (so that every read
//! names the process that was verified, never a later one with the same number), `stat` that follows
//! `/proc` magic links without opening their targets, `kcmp(2)`, and a socket's network namespace.

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Why a read of a process failed: the process is gone, or something else.
#[derive(Debug)]
pub enum ReadErr {
    /// The process (or the descriptor asked for) no longer exists.
    Gone,
    Other(std::io::Error),
}

impl ReadErr {
    fn from_io(e: std::io::Error) -> ReadErr {
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) => ReadErr::Gone,
            _ => ReadErr::Other(e),
        }
    }
}

impl std::fmt::Display for ReadErr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadErr::Gone => write!(f, "gone"),
            ReadErr::Other(e) => write!(f, "{e}"),
        }
    }
}

pub type R<T> = std::result::Result<T, ReadErr>;

fn cstr(s: &str) -> CString {
    CString::new(s).expect("proc paths have no NUL")
}

fn last_err() -> ReadErr {
    ReadErr::from_io(std::io::Error::last_os_error())
}

/// `/proc/PID` held open. Once opened and checked against the expected start time, every read through it
/// concerns that process; after it exits, reads fail with ESRCH or ENOENT ([`ReadErr::Gone`]).
pub struct ProcDir {
    pub pid: i32,
    dir: OwnedFd,
}

/// What `stat` says about the target of a `/proc` link.
#[derive(Debug, Clone, Copy)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub rdev: u64,
    pub mode: u32,
}

impl Stat {
    pub fn file_type(&self) -> u32 {
        self.mode & libc::S_IFMT
    }
}

pub fn dev_pair(dev: u64) -> (u32, u32) {
    (libc::major(dev), libc::minor(dev))
}

impl ProcDir {
    /// Open `/proc/PID` and check that the process there started at `start_time` (when given).
    pub fn open(pid: i32, start_time: Option<u64>) -> R<ProcDir> {
        let p = cstr(&format!("/proc/{pid}"));
        let fd = unsafe { libc::open(p.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(last_err());
        }
        let d = ProcDir { pid, dir: unsafe { OwnedFd::from_raw_fd(fd) } };
        if let Some(want) = start_time {
            if d.start_time()? != want {
                return Err(ReadErr::Gone);
            }
        }
        Ok(d)
    }

    fn openat(&self, rel: &str, flags: i32) -> R<OwnedFd> {
        let p = cstr(rel);
        let fd = unsafe { libc::openat(self.dir.as_raw_fd(), p.as_ptr(), flags | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(last_err());
        }
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    pub fn read(&self, rel: &str) -> R<Vec<u8>> {
        let fd = self.openat(rel, libc::O_RDONLY)?;
        let mut out = Vec::new();
        std::fs::File::from(fd).read_to_end(&mut out).map_err(ReadErr::from_io)?;
        Ok(out)
    }

    pub fn read_string(&self, rel: &str) -> R<String> {
        Ok(String::from_utf8_lossy(&self.read(rel)?).into_owned())
    }

    /// Start time in clock ticks after boot (stat field 22).
    pub fn start_time(&self) -> R<u64> {
        let s = self.read_string("stat")?;
        let rest = s.rfind(')').map(|i| &s[i + 2..]).ok_or(ReadErr::Gone)?;
        rest.split_whitespace().nth(19).and_then(|v| v.parse().ok()).ok_or(ReadErr::Gone)
    }

    /// What the process's waited-for children added up to (stat fields cminflt, cmajflt, cutime, cstime):
    /// it grows whenever a child of the process ends and is reaped, however short its life was.
    pub fn children_totals(&self) -> R<[u64; 4]> {
        let s = self.read_string("stat")?;
        let rest: Vec<&str> = s.rfind(')').map(|i| s[i + 2..].split_whitespace().collect()).ok_or(ReadErr::Gone)?;
        let f = |i: usize| rest.get(i).and_then(|v| v.parse().ok()).ok_or(ReadErr::Gone);
        Ok([f(8)?, f(10)?, f(13)?, f(14)?])
    }

    /// State letter (R, S, Z, ...).
    pub fn state(&self) -> R<char> {
        let s = self.read_string("stat")?;
        s.rfind(')').and_then(|i| s[i + 2..].chars().next()).ok_or(ReadErr::Gone)
    }

    /// Whether the process is still the one that was opened and has not exited.
    pub fn alive(&self) -> bool {
        matches!(self.state(), Ok(c) if c != 'Z' && c != 'X')
    }

    pub fn comm(&self) -> String {
        self.read_string("comm").map(|s| s.trim().to_string()).unwrap_or_default()
    }

    /// The PID in the innermost PID namespace (last NSpid entry).
    pub fn ns_pid(&self) -> R<Option<i32>> {
        let s = self.read_string("status")?;
        Ok(s.lines().find_map(|l| l.strip_prefix("NSpid:")).and_then(|v| v.split_whitespace().last()?.parse().ok()))
    }

    /// `stat` of what a link below the directory points to (`fd/3`, `ns/net`, `cwd`, `map_files/a-b`),
    /// following it without opening it: a FIFO does not block, a device is not opened.
    pub fn stat_target(&self, rel: &str) -> R<Stat> {
        let p = cstr(rel);
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstatat(self.dir.as_raw_fd(), p.as_ptr(), &mut st, 0) } != 0 {
            return Err(last_err());
        }
        Ok(Stat { dev: st.st_dev, ino: st.st_ino, rdev: st.st_rdev, mode: st.st_mode })
    }

    pub fn readlink(&self, rel: &str) -> R<String> {
        let p = cstr(rel);
        let mut buf = vec![0u8; 4096];
        let n = unsafe { libc::readlinkat(self.dir.as_raw_fd(), p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(last_err());
        }
        buf.truncate(n as usize);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Names in a subdirectory (`fd`, `task`, `task/TID/fd`), as numbers.
    pub fn list_numbers(&self, rel: &str) -> R<Vec<i32>> {
        let fd = self.openat(rel, libc::O_RDONLY | libc::O_DIRECTORY)?;
        let dir = nix::dir::Dir::from_fd(fd).map_err(|e| ReadErr::from_io(std::io::Error::from_raw_os_error(e as i32)))?;
        let mut out = vec![];
        for e in dir {
            let e = e.map_err(|e| ReadErr::from_io(std::io::Error::from_raw_os_error(e as i32)))?;
            if let Some(n) = e.file_name().to_str().ok().and_then(|s| s.parse::<i32>().ok()) {
                out.push(n);
            }
        }
        out.sort();
        Ok(out)
    }
}

/// kcmp(2) types.
pub const KCMP_FILE: i32 = 0;
pub const KCMP_FILES: i32 = 2;

/// kcmp(2): 0 when the two objects are the same kernel object, another number when not, None when the
/// call failed (a process or descriptor gone).
pub fn kcmp(pid1: i32, pid2: i32, kind: i32, idx1: u64, idx2: u64) -> Option<i64> {
    let r = unsafe { libc::syscall(libc::SYS_kcmp, pid1, pid2, kind, idx1, idx2) };
    (r >= 0).then_some(r)
}

/// `SIOCGSKNS` from linux/sockios.h: a descriptor of the network namespace a socket belongs to.
const SIOCGSKNS: libc::c_ulong = 0x894C;

/// A process handle for pidfd_getfd(2).
pub struct PidFd(OwnedFd);

impl PidFd {
    pub fn open(pid: i32) -> R<PidFd> {
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(last_err());
        }
        Ok(PidFd(unsafe { OwnedFd::from_raw_fd(fd as i32) }))
    }

    /// The network namespace (inode) of the socket that is descriptor `fd` of the process: the socket is
    /// duplicated into this process (pidfd_getfd(2), which changes nothing for its owner), asked with
    /// SIOCGSKNS, and closed again.
    pub fn socket_netns(&self, fd: i32) -> R<u64> {
        let s = unsafe { libc::syscall(libc::SYS_pidfd_getfd, self.0.as_raw_fd(), fd, 0) };
        if s < 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EBADF) | Some(libc::ESRCH) => ReadErr::Gone,
                _ => ReadErr::Other(e),
            });
        }
        let sock = unsafe { OwnedFd::from_raw_fd(s as i32) };
        let ns = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSKNS as _) };
        if ns < 0 {
            return Err(ReadErr::Other(std::io::Error::last_os_error()));
        }
        let ns = unsafe { OwnedFd::from_raw_fd(ns) };
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(ns.as_raw_fd(), &mut st) } != 0 {
            return Err(ReadErr::Other(std::io::Error::last_os_error()));
        }
        Ok(st.st_ino)
    }
}

/// The (device, inode) every anonymous-inode descriptor without an inode of its own shares (eventfd,
/// eventpoll, inotify, signalfd, timerfd): learnt from an eventfd of this process. Descriptors with this
/// identity cannot be told apart by inode; the audit compares them with eventfd ids and kcmp(2).
pub fn shared_anon_inode() -> Option<(u64, u64)> {
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    Some((st.st_dev, st.st_ino))
}
