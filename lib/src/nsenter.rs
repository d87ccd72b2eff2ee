//! Entering a session's namespaces: the one place that opens `/proc/PID/ns/*` and calls setns(2).
//!
//! setns changes the namespaces of the calling thread only. A tool that must stay in the host's namespaces
//! (and single-threaded, for the forks of `ns::spawn`) enters on a thread of its own (`on_thread`); a
//! single-purpose tool may enter from its main thread (`join`); a forked child enters with `NsFile::enter`,
//! which does not allocate.

use crate::error::{Error, IoContext, Result};
use std::os::fd::AsRawFd;

/// clone(2)'s flag for a time namespace (linux/sched.h), which the libc crate does not name.
pub const CLONE_NEWTIME: libc::c_int = 0x80;

/// The namespaces a session has (see `ns::create`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Ipc,
    Uts,
    Net,
    Pid,
    Mnt,
    /// A session made by this version of drums-ns has one of its own (its clocks continue across a
    /// checkpoint); one restored from an older checkpoint runs in the host's.
    Time,
    /// A session has one of its own unless it was made with `--host-ids`.
    User,
}

impl Kind {
    /// The name of its file in /proc/PID/ns.
    pub fn file_name(self) -> &'static str {
        match self {
            Kind::Ipc => "ipc",
            Kind::Uts => "uts",
            Kind::Net => "net",
            Kind::Pid => "pid",
            Kind::Mnt => "mnt",
            Kind::Time => "time",
            Kind::User => "user",
        }
    }
    fn clone_flag(self) -> libc::c_int {
        match self {
            Kind::Ipc => libc::CLONE_NEWIPC,
            Kind::Uts => libc::CLONE_NEWUTS,
            Kind::Net => libc::CLONE_NEWNET,
            Kind::Pid => libc::CLONE_NEWPID,
            Kind::Mnt => libc::CLONE_NEWNS,
            Kind::Time => CLONE_NEWTIME,
            Kind::User => libc::CLONE_NEWUSER,
        }
    }
    /// How error messages name it.
    fn described(self) -> &'static str {
        match self {
            Kind::Ipc => "IPC",
            Kind::Uts => "UTS",
            Kind::Net => "network",
            Kind::Pid => "PID",
            Kind::Mnt => "mount",
            Kind::Time => "time",
            Kind::User => "user",
        }
    }
}

/// An open namespace, to be entered later (before a fork, or by another thread).
pub struct NsFile {
    file: std::fs::File,
    kind: Kind,
    /// Where it was opened, for error messages.
    path: String,
}

impl NsFile {
    /// The namespace `kind` of process `pid`.
    pub fn open(pid: i32, kind: Kind) -> Result<NsFile> {
        let path = format!("/proc/{pid}/ns/{}", kind.file_name());
        let file = std::fs::File::open(&path).ctx(&format!("open {} namespace", kind.described()), &path)?;
        Ok(NsFile { file, kind, path })
    }

    /// A namespace already held as a descriptor (a new one made by `net::new_netns`).
    pub fn from_file(file: std::fs::File, kind: Kind) -> NsFile {
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        NsFile { file, kind, path }
    }

    pub fn file(&self) -> &std::fs::File {
        &self.file
    }

    /// setns(2) for the calling thread, without allocating (safe in a child between fork and exec).
    pub fn enter(&self) -> std::io::Result<()> {
        if unsafe { libc::setns(self.file.as_raw_fd(), self.kind.clone_flag()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// `enter`, with an error that names the namespace.
    pub fn join(&self) -> Result<()> {
        self.enter().map_err(|e| Error::io(format!("join {} namespace", self.kind.described()), &self.path, e))
    }
}

/// Join the namespace `kind` of process `pid`, for the calling thread.
pub fn join(pid: i32, kind: Kind) -> Result<()> {
    NsFile::open(pid, kind)?.join()
}

/// Run `f` on a thread of its own that joined `namespaces` (in that order), and wait for it: the calling
/// thread keeps its own namespaces, and once this returns it has no more threads than before.
pub fn on_thread<T: Send + 'static>(namespaces: Vec<NsFile>, f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    std::thread::spawn(move || -> Result<T> {
        for n in &namespaces {
            n.join()?;
        }
        drop(namespaces);
        f()
    })
    .join()
    .map_err(|_| Error::failed("the thread in the session's namespaces panicked"))?
}

/// `on_thread` in the network namespace of process `pid` (the session's init): how the host reaches the
/// session's X server, DevTools and guest.
pub fn in_netns<T: Send + 'static>(pid: i32, f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    on_thread(vec![NsFile::open(pid, Kind::Net)?], f)
}
