//! Kernel file helpers of the cgroup code: every error names its path and keeps the errno.

use crate::error::{Error, IoContext, Result};
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) fn read_str(p: &Path) -> Result<String> {
    Ok(std::fs::read_to_string(p).ctx("read", p)?.trim().to_string())
}
/// One write(2) of the whole value: cgroup files act on each write.
pub(crate) fn write_str(p: &Path, v: &str) -> Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().write(true).open(p).ctx("open for writing", p)?;
    f.write_all(v.as_bytes()).map_err(|e| Error::io(format!("write `{v}` to"), p, e))
}
pub(crate) fn read_procs(dir: &Path) -> Result<Vec<i32>> {
    let f = dir.join("cgroup.procs");
    Ok(read_str(&f)?.lines().filter_map(|l| l.trim().parse().ok()).collect())
}
/// A figure or the reason it is missing (the error text names the file and the errno).
pub(crate) fn read_u64(p: &Path) -> std::result::Result<u64, String> {
    let s = read_str(p).map_err(|e| e.to_string())?;
    s.parse().map_err(|_| format!("{}: `{s}` is not a number", p.display()))
}
/// Like read_u64, for a file only newer kernels have: its absence is said as such.
pub(crate) fn read_u64_newer(p: &Path) -> std::result::Result<u64, String> {
    if !p.exists() {
        return Err(format!("{}: absent (this kernel does not keep it)", p.display()));
    }
    read_u64(p)
}
/// A value from a `key value` file (cpu.stat, memory.events, memory.oom_control).
pub(crate) fn read_keyed(p: &Path, key: &str) -> std::result::Result<u64, String> {
    let s = read_str(p).map_err(|e| e.to_string())?;
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
pub(crate) fn ensure_dir(p: &Path) -> Result<()> {
    match std::fs::create_dir(p) {
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
