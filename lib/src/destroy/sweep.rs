//! The cron mode of drums-sweep: find orphaned sessions and unledgered leftovers, and remove them.

use crate::error::{Error, IoContext, Result};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

pub const LOCK_FILE: &str = "sweep.lock";

/// The sweep lock, `<state_root>/sweep.lock`, held until dropped. Sweeps take it exclusively so two never
/// race; explicit destroys take it shared, so they run side by side but never during a sweep.
pub struct SweepLock {
    _f: File,
}

/// Take the sweep lock, waiting for it. None: there is no state root, so there is nothing to sweep or
/// destroy and nothing to race with (a dry run never creates one).
pub fn lock(exclusive: bool, create: bool) -> Result<Option<SweepLock>> {
    let root = crate::state::state_root();
    let path: PathBuf = root.join(LOCK_FILE);
    if !root.is_dir() && !create {
        return Ok(None);
    }
    if create {
        std::fs::create_dir_all(&root).ctx("create state root", &root)?;
    }
    let f = match std::fs::OpenOptions::new().read(true).write(create).create(create).open(&path) {
        Ok(f) => f,
        Err(e) if !create && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open sweep lock", &path, e)),
    };
    let op = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
    loop {
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(Some(SweepLock { _f: f }));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::io("lock", &path, e));
        }
    }
}
