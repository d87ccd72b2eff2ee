//! The cgroup code's one privileged seam, the file operations on cgroup file systems (`CgroupFs`: the
//! kernel's, `KERNEL`, or in unit tests a recording fake, `fake::Recording`), and the helpers built on it:
//! every error names its path and keeps the errno.

use crate::error::{Error, IoContext, Result};
use std::path::Path;
use std::time::{Duration, Instant};

/// What the cgroup code does to a cgroup file system. Everything above it (v1.rs, v2.rs, lifecycle.rs)
/// goes through one of these, so the order of its operations can be checked without a kernel.
pub(crate) trait CgroupFs: Send + Sync {
    fn read(&self, p: &Path) -> std::io::Result<String>;
    /// One write(2) of the whole value: cgroup files act on each write.
    fn write(&self, p: &Path, v: &str) -> std::io::Result<()>;
    fn mkdir(&self, p: &Path) -> std::io::Result<()>;
    fn rmdir(&self, p: &Path) -> std::io::Result<()>;
    fn exists(&self, p: &Path) -> bool;
}

/// The kernel's cgroup file systems.
pub(crate) struct Kernel;
pub(crate) static KERNEL: Kernel = Kernel;

impl CgroupFs for Kernel {
    fn read(&self, p: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(p)
    }
    fn write(&self, p: &Path, v: &str) -> std::io::Result<()> {
        use std::io::Write;
        std::fs::OpenOptions::new().write(true).open(p)?.write_all(v.as_bytes())
    }
    fn mkdir(&self, p: &Path) -> std::io::Result<()> {
        std::fs::create_dir(p)
    }
    fn rmdir(&self, p: &Path) -> std::io::Result<()> {
        std::fs::remove_dir(p)
    }
    fn exists(&self, p: &Path) -> bool {
        p.exists()
    }
}

pub(crate) fn read_str(fs: &dyn CgroupFs, p: &Path) -> Result<String> {
    Ok(fs.read(p).ctx("read", p)?.trim().to_string())
}
pub(crate) fn write_str(fs: &dyn CgroupFs, p: &Path, v: &str) -> Result<()> {
    fs.write(p, v).map_err(|e| Error::io(format!("write `{v}` to"), p, e))
}
pub(crate) fn read_procs(fs: &dyn CgroupFs, dir: &Path) -> Result<Vec<i32>> {
    let f = dir.join("cgroup.procs");
    Ok(read_str(fs, &f)?.lines().filter_map(|l| l.trim().parse().ok()).collect())
}
/// A figure or the reason it is missing (the error text names the file and the errno).
pub(crate) fn read_u64(fs: &dyn CgroupFs, p: &Path) -> std::result::Result<u64, String> {
    let s = read_str(fs, p).map_err(|e| e.to_string())?;
    s.parse().map_err(|_| format!("{}: `{s}` is not a number", p.display()))
}
/// Like read_u64, for a file only newer kernels have: its absence is said as such.
pub(crate) fn read_u64_newer(fs: &dyn CgroupFs, p: &Path) -> std::result::Result<u64, String> {
    if !fs.exists(p) {
        return Err(format!("{}: absent (this kernel does not keep it)", p.display()));
    }
    read_u64(fs, p)
}
/// A value from a `key value` file (cpu.stat, memory.events, memory.oom_control).
pub(crate) fn read_keyed(fs: &dyn CgroupFs, p: &Path, key: &str) -> std::result::Result<u64, String> {
    let s = read_str(fs, p).map_err(|e| e.to_string())?;
    s.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')).map(str::trim))
        .ok_or_else(|| format!("{}: no `{key}` line (this kernel does not report it)", p.display()))?
        .parse()
        .map_err(|_| format!("{}: `{key}` is not a number", p.display()))
}
pub(crate) fn page_size() -> u64 {
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}
pub(crate) fn errno(e: &Error) -> Option<i32> {
    match e {
        Error::Io { source, .. } => source.raw_os_error(),
        Error::WithCleanup { cause, .. } => errno(cause),
        _ => None,
    }
}
/// mkdir that accepts an existing directory.
pub(crate) fn ensure_dir(fs: &dyn CgroupFs, p: &Path) -> Result<()> {
    match fs.mkdir(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io("create cgroup directory", p, e)),
    }
}
pub(crate) fn wait_until(what: &str, path: &Path, timeout: Duration, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if done()? {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            return Err(Error::failed(format!("{}: {what}: not done after {:?}", path.display(), timeout)));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
