//! The library's one lock helper: an flock(2) on an open file, held until dropped. Every lock Drums takes
//! is one: a ledger's append lock (`ledger`), the sweep lock (`destroy::sweep`), a pool's fill lock
//! (`pool`), the images' use lock (`image`) and the firewall lock (`net`). An interrupted wait (EINTR) is
//! retried; any other failure is an error naming the file.

use crate::error::{Error, Result};
use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// Shared (LOCK_SH: any number of holders, no exclusive one) or exclusive (LOCK_EX: one holder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Shared,
    Exclusive,
}

impl Mode {
    fn op(self) -> libc::c_int {
        match self {
            Mode::Shared => libc::LOCK_SH,
            Mode::Exclusive => libc::LOCK_EX,
        }
    }
}

/// A lock on `F` (a `File`, owned or borrowed), released when dropped.
pub struct Flock<F: AsFd> {
    f: F,
}

impl<F: AsFd> Flock<F> {
    /// Lock `f` (opened from `path`, which errors name), waiting as long as it takes.
    pub fn wait(f: F, path: &Path, mode: Mode) -> Result<Flock<F>> {
        Self::once(&f, path, mode)?;
        Ok(Flock { f })
    }

    /// Lock `f`, trying every 50 ms for at most `wait`; None when another holder kept it all that time.
    pub fn try_for(f: F, path: &Path, mode: Mode, wait: Duration) -> Result<Option<Flock<F>>> {
        let deadline = Instant::now() + wait;
        loop {
            if Self::once_nb(&f, path, mode)? {
                return Ok(Some(Flock { f }));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The file the lock is on.
    pub fn file(&self) -> &F {
        &self.f
    }

    /// One blocking flock, EINTR retried.
    fn once(f: &F, path: &Path, mode: Mode) -> Result<()> {
        loop {
            if unsafe { libc::flock(f.as_fd().as_raw_fd(), mode.op()) } == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io("lock", path, e));
            }
        }
    }

    /// One non-blocking flock, EINTR retried: false when another holds it.
    fn once_nb(f: &F, path: &Path, mode: Mode) -> Result<bool> {
        loop {
            if unsafe { libc::flock(f.as_fd().as_raw_fd(), mode.op() | libc::LOCK_NB) } == 0 {
                return Ok(true);
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) => return Ok(false),
                Some(libc::EINTR) => continue,
                _ => return Err(Error::io("lock", path, e)),
            }
        }
    }
}

impl<F: AsFd> Drop for Flock<F> {
    fn drop(&mut self) {
        // Closing an owned file releases it too; a borrowed one stays open, so unlock explicitly.
        unsafe { libc::flock(self.f.as_fd().as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    fn tmp(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("drums-flock-{}-{name}", std::process::id()));
        std::fs::write(&p, "").unwrap();
        p
    }

    #[test]
    fn exclusive_excludes_and_shared_shares() {
        let p = tmp("modes");
        let a = Flock::wait(File::open(&p).unwrap(), &p, Mode::Exclusive).unwrap();
        // Another open file description: flock locks are per description.
        assert!(Flock::try_for(File::open(&p).unwrap(), &p, Mode::Shared, Duration::ZERO).unwrap().is_none());
        drop(a);
        let s1 = Flock::try_for(File::open(&p).unwrap(), &p, Mode::Shared, Duration::ZERO).unwrap();
        let s2 = Flock::try_for(File::open(&p).unwrap(), &p, Mode::Shared, Duration::ZERO).unwrap();
        assert!(s1.is_some() && s2.is_some());
        assert!(Flock::try_for(File::open(&p).unwrap(), &p, Mode::Exclusive, Duration::from_millis(120)).unwrap().is_none());
        drop((s1, s2));
        assert!(Flock::try_for(File::open(&p).unwrap(), &p, Mode::Exclusive, Duration::ZERO).unwrap().is_some());
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_borrowed_file_is_unlocked_when_the_lock_is_dropped() {
        let p = tmp("borrowed");
        let f = File::open(&p).unwrap();
        let l = Flock::wait(&f, &p, Mode::Exclusive).unwrap();
        assert!(Flock::try_for(File::open(&p).unwrap(), &p, Mode::Exclusive, Duration::ZERO).unwrap().is_none());
        drop(l);
        // `f` is still open, and no longer locked.
        assert!(Flock::try_for(File::open(&p).unwrap(), &p, Mode::Exclusive, Duration::ZERO).unwrap().is_some());
        drop(f);
        let _ = std::fs::remove_file(&p);
    }
}
