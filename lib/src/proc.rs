//! Processes named safely across PID reuse (a pid with its start time), and what Drums reads of a
//! process's /proc/PID/stat and status: through `procfs`, here, but for the one set of status fields
//! it does not parse (`confinement`).

use crate::error::{Error, IoContext, Result};
use crate::record::Owner;
use std::path::Path;

fn stat(pid: i32) -> Option<procfs::process::Stat> {
    procfs::process::Process::new(pid).ok()?.stat().ok()
}

fn status(pid: i32) -> Option<procfs::process::Status> {
    procfs::process::Process::new(pid).ok()?.status().ok()
}

/// Start time of a process in clock ticks after boot (/proc/PID/stat field 22), or None if it is gone.
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|s| s.starttime)
}

/// State letter of a process (R, S, Z, ...), or None if it is gone.
pub fn state(pid: i32) -> Option<char> {
    stat(pid).map(|s| s.state)
}

/// The parent of a process, or None if it is gone.
pub fn ppid(pid: i32) -> Option<i32> {
    stat(pid).map(|s| s.ppid)
}

/// Whether the process `pid` catches the signal `sig` (its SigCgt mask); false when it is gone.
pub fn catches(pid: i32, sig: i32) -> bool {
    status(pid).is_some_and(|s| s.sigcgt & (1 << (sig - 1)) != 0)
}

/// Whether the process `pid` started at `start` still exists and has not exited (zombies count as gone).
pub fn alive(pid: i32, start: u64) -> bool {
    start_time(pid) == Some(start) && !matches!(state(pid), Some('Z') | Some('X') | None)
}

/// A process held by a pidfd, opened while it runs: once it has exited and been reaped, by whichever
/// parent (a session's processes are its init's children, not the tool's), the kernel still tells its
/// wait status through the pidfd (PIDFD_GET_INFO with PIDFD_INFO_EXIT, Linux 6.15).
pub struct Pidfd(std::os::fd::OwnedFd);

/// struct pidfd_info of <linux/pidfd.h>, its first version (PIDFD_INFO_SIZE_VER0, 64 bytes).
#[repr(C)]
#[derive(Default)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    ids: [u32; 11],
    exit_code: i32,
}
const PIDFD_INFO_EXIT: u64 = 1 << 3;
/// _IOWR(PIDFS_IOCTL_MAGIC 0xFF, 11, struct pidfd_info).
const PIDFD_GET_INFO: libc::c_ulong = (3 << 30) | ((std::mem::size_of::<PidfdInfo>() as libc::c_ulong) << 16) | (0xFF << 8) | 11;

impl Pidfd {
    /// The process `pid` started at `start`; None when it is gone (or is another process by now).
    pub fn open(pid: i32, start: u64) -> Option<Pidfd> {
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return None;
        }
        let fd = Pidfd(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) });
        // Checked after the open: the pidfd names the process that had the pid then.
        alive(pid, start).then_some(fd)
    }

    /// How the process ended, as a wait status; None while it runs, before its parent reaped it, or on
    /// a kernel older than 6.15.
    pub fn wait_status(&self) -> Option<i32> {
        let mut info = PidfdInfo { mask: PIDFD_INFO_EXIT, ..Default::default() };
        let r = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&self.0), PIDFD_GET_INFO as _, &mut info) };
        (r == 0 && info.mask & PIDFD_INFO_EXIT != 0).then_some(info.exit_code)
    }
}

/// A wait status as words: `exit status N` or `killed by signal N (SIGNAME)`.
pub fn describe_wait_status(st: i32) -> String {
    if libc::WIFEXITED(st) {
        format!("exit status {}", libc::WEXITSTATUS(st))
    } else if libc::WIFSIGNALED(st) {
        let sig = libc::WTERMSIG(st);
        let name = nix::sys::signal::Signal::try_from(sig).map(|s| s.as_str().to_string()).unwrap_or_else(|_| format!("signal {sig}"));
        format!("killed by signal {sig} ({name}){}", if libc::WCOREDUMP(st) { ", core dumped" } else { "" })
    } else {
        format!("wait status {st:#x}")
    }
}

/// Run a helper program (`cmd`, given `input` on its standard input) to its end and collect its output,
/// or kill it once it has run `limit`: a helper that hangs (a wedged nft, a CRIU that waits) must not
/// hang the tool with it. The error names the program and the limit.
pub fn output_within(cmd: &mut std::process::Command, input: Option<&[u8]>, limit: std::time::Duration) -> std::io::Result<std::process::Output> {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let name = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
    // Readers on threads of their own, so that a full pipe never blocks the child while it is waited for.
    let read = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = vec![];
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut out);
            }
            out
        })
    };
    let out = read(child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    let err = read(child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
    if let (Some(mut w), Some(data)) = (child.stdin.take(), input) {
        let data = data.to_vec();
        // A child that reads nothing cannot block the writer past the kill below: the write fails then.
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
    }
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if t0.elapsed() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("{name} did not finish within {limit:?} and was killed")));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    // The child has exited; a grandchild that keeps its pipes open would keep the readers waiting, so
    // they get what the limit leaves (their threads are left to end with the pipes).
    let join = |h: std::thread::JoinHandle<Vec<u8>>| {
        let end = t0 + limit;
        while !h.is_finished() && std::time::Instant::now() < end {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if h.is_finished() {
            h.join().unwrap_or_default()
        } else {
            vec![]
        }
    };
    Ok(std::process::Output { status, stdout: join(out), stderr: join(err) })
}

/// Whether the process `pid` is on its way out: it is (`exiting`), or the init of its PID namespace is.
/// A killed session's init takes every process of its namespace with it, but signals them only once it
/// runs its own exit, a moment after kill(2) returned. Such a process leaves its cgroup without anyone's
/// help.
pub fn leaving(pid: i32) -> bool {
    if exiting(pid) {
        return true;
    }
    let Ok(pidns) = ns_inode(pid, "pid") else { return true };
    // The host's PID 1 does not leave; a scan of /proc finds the init of any other namespace.
    pidns != ns_inode(1, "pid").unwrap_or(0) && host_pids_by_ns_pid(pidns).get(&1).is_some_and(|init| exiting(*init))
}

/// Gone, a zombie, exiting (PF_EXITING), or with SIGKILL pending.
fn exiting(pid: i32) -> bool {
    const PF_EXITING: u32 = 0x4;
    let Some(st) = stat(pid) else { return true };
    if matches!(st.state, 'Z' | 'X') || st.flags & PF_EXITING != 0 {
        return true;
    }
    let sigkill = 1u64 << (libc::SIGKILL - 1);
    status(pid).is_none_or(|s| (s.sigpnd | s.shdpnd) & sigkill != 0)
}

/// MemAvailable of /proc/meminfo, bytes; None when it cannot be read.
pub fn mem_available() -> Option<u64> {
    use procfs::Current;
    procfs::Meminfo::current().ok()?.mem_available
}

pub fn me() -> Result<Owner> {
    let pid = std::process::id() as i32;
    let start_time = start_time(pid).ok_or_else(|| crate::Error::failed("cannot read /proc/self/stat"))?;
    Ok(Owner { pid, start_time })
}

/// What a process's /proc/PID/status says of its confinement, as the kernel writes it: the capability
/// masks as hex text (CapBnd, CapEff, CapPrm), Seccomp, Seccomp_filters and NoNewPrivs. Read here by
/// hand because procfs 0.18's `Status` has no Seccomp_filters (Linux 5.9) and turns the masks into
/// numbers, while the audit compares and reports the kernel's text. A field the kernel does not write is
/// "" (the caller decides what that means).
pub fn confinement(pid: i32) -> Result<std::collections::HashMap<&'static str, String>> {
    const FIELDS: [&str; 6] = ["CapBnd", "CapEff", "CapPrm", "Seccomp", "Seccomp_filters", "NoNewPrivs"];
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).ctx("read", &path)?;
    let value = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim).unwrap_or("").to_string();
    Ok(FIELDS.into_iter().map(|f| (f, value(f))).collect())
}

/// The inode of one of a process's namespaces ("pid", "mnt", "net", "ipc", "uts").
pub fn ns_inode(pid: i32, ns: &str) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let p = format!("/proc/{pid}/ns/{ns}");
    Ok(std::fs::metadata(&p).ctx("stat namespace", &p)?.ino())
}

/// The PIDs of every process on the host, from one listing of /proc (a process may be gone by the time
/// its files are read).
pub fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok())).collect()
}

/// Host PIDs of every descendant of `pid` (its children, theirs, ...), from one scan of /proc; a process
/// reparented away from the tree (its parent exited) is not among them.
pub fn descendants(pid: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = pids().into_iter().filter_map(|p| Some((p, ppid(p)?))).collect();
    let (mut out, mut frontier) = (vec![], vec![pid]);
    while let Some(p) = frontier.pop() {
        for &(c, _) in parents.iter().filter(|(_, pp)| *pp == p) {
            out.push(c);
            frontier.push(c);
        }
    }
    out
}

/// The processes that run in a PID namespace nested below the one of `init` (a session's): (host pid, its
/// comm). Chromium's sandbox makes such namespaces for its zygote and each renderer. Found as the
/// descendants, with a longer NSpid, of every process of that namespace (its init's tree, and what
/// `drums-ns exec` joined into it, whose parent is on the host): only host root could put a process
/// there otherwise.
pub fn in_nested_pidns(init: i32) -> Vec<(i32, String)> {
    let depth = |p: i32| status(p).and_then(|s| s.nspid).map(|v| v.len());
    let (Some(d0), Ok(pidns)) = (depth(init), ns_inode(init, "pid")) else { return vec![] };
    let parents: Vec<(i32, i32)> = pids().into_iter().filter_map(|p| Some((p, ppid(p)?))).collect();
    let mut frontier = pids_in_pidns(pidns);
    let mut seen: std::collections::BTreeSet<i32> = frontier.iter().copied().collect();
    let mut out = vec![];
    while let Some(p) = frontier.pop() {
        for &(c, _) in parents.iter().filter(|(_, pp)| *pp == p) {
            if seen.insert(c) {
                frontier.push(c);
                if depth(c).is_some_and(|d| d > d0) {
                    out.push((c, comm(c)));
                }
            }
        }
    }
    out
}

/// Host PIDs of every process whose PID namespace is `pidns` (inode).
pub fn pids_in_pidns(pidns: u64) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let mut out = vec![];
    for pid in pids() {
        if let Ok(m) = std::fs::metadata(Path::new("/proc").join(pid.to_string()).join("ns/pid")) {
            if m.ino() == pidns {
                out.push(pid);
            }
        }
    }
    out.sort();
    out
}

/// Host PID by PID inside the namespace, for every process of the PID namespace `pidns`: one scan of /proc
/// for a whole session.
pub fn host_pids_by_ns_pid(pidns: u64) -> std::collections::HashMap<i32, i32> {
    pids_in_pidns(pidns).into_iter().filter_map(|p| Some((ns_pid(p)?, p))).collect()
}

/// The PID of a host process as seen inside its innermost PID namespace (last NSpid entry).
pub fn ns_pid(host_pid: i32) -> Option<i32> {
    status(host_pid)?.nspid?.last().copied()
}

pub fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The owner a new session is written with: the process named by $DRUMS_OWNER (a PID), else the parent
/// of this tool (the shell or program running the pipeline). The sweep treats a session whose owner is
/// gone as an orphan, so a driver that keeps sessions across its own children sets DRUMS_OWNER to itself.
pub fn session_owner() -> Result<Owner> {
    let pid = match std::env::var("DRUMS_OWNER") {
        Ok(v) => v.trim().parse::<i32>().map_err(|_| crate::Error::bad_input(format!("DRUMS_OWNER={v} is not a PID")))?,
        Err(_) => unsafe { libc::getppid() },
    };
    let start_time = start_time(pid).ok_or_else(|| crate::Error::bad_input(format!("owner process {pid} does not exist")))?;
    Ok(Owner { pid, start_time })
}

/// Open mode of a descriptor from its fdinfo `flags` (octal), and whether it writes.
pub fn open_mode(fdinfo: &str) -> (Option<String>, bool) {
    let Some(flags) = fdinfo.lines().find_map(|l| l.strip_prefix("flags:")).and_then(|v| i64::from_str_radix(v.trim(), 8).ok()) else {
        return (None, false);
    };
    if flags & libc::O_PATH as i64 != 0 {
        return (Some("path".into()), false);
    }
    match flags & libc::O_ACCMODE as i64 {
        x if x == libc::O_RDONLY as i64 => (Some("r".into()), false),
        x if x == libc::O_WRONLY as i64 => (Some("w".into()), true),
        _ => (Some("rw".into()), true),
    }
}

/// A pipe whose ends close on exec (a child is given only the ends it is meant to hold).
pub fn pipe() -> Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::failed(format!("pipe2: {}", std::io::Error::last_os_error())));
    }
    Ok(unsafe { (std::os::fd::OwnedFd::from_raw_fd(fds[0]), std::os::fd::OwnedFd::from_raw_fd(fds[1])) })
}

/// `p` as a system call takes it; a path with a NUL is bad input (no file can have that name).
pub fn c_path(p: &Path) -> Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| Error::bad_input(format!("{}: path has a NUL", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit of a process that is not our child, told through its pidfd once its parent reaped it
    /// (here it is ours, reaped by `wait`; the pidfd was opened while it ran).
    #[test]
    fn a_reaped_process_tells_how_it_ended() {
        let mut c = std::process::Command::new("sleep").arg("10").spawn().unwrap();
        let pid = c.id() as i32;
        let fd = Pidfd::open(pid, start_time(pid).unwrap()).expect("a pidfd of a running process");
        assert_eq!(fd.wait_status(), None, "still running");
        unsafe { libc::kill(pid, libc::SIGKILL) };
        c.wait().unwrap();
        let st = fd.wait_status().expect("the kernel (6.15 or later) keeps the exit status");
        assert_eq!(describe_wait_status(st), "killed by signal 9 (SIGKILL)");
        assert_eq!(describe_wait_status(3 << 8), "exit status 3");
    }
}
