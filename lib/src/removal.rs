//! Mounts and directories, removed without ever leaving Drums' own directories: a path is acted on only
//! below the state or checkpoint root, a recursive removal never crosses a mount, and mounts are taken
//! down deepest first. Destroy and the sweep remove a session's and a checkpoint's files through it, and
//! image removal an image's tree.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use crate::mountinfo::Mount;

/// `path` is `root` or below it, judged on the words of the path (no `..`, absolute).
pub fn lexically_below(path: &Path, root: &Path) -> bool {
    path.is_absolute() && !path.components().any(|c| c == Component::ParentDir) && path.starts_with(root)
}

/// `path` lies strictly below one of Drums' roots, also after resolving symbolic links in its parent:
/// the only places a ledgered directory, slot file or image may be removed from.
pub fn confined(path: &Path) -> Result<(), String> {
    confined_to(path, &session_roots())
}

/// The roots a session's and a checkpoint's files live under: state, checkpoints, mapped files.
fn session_roots() -> [PathBuf; 3] {
    [crate::state::state_root(), crate::state::checkpoint_root(), crate::mapped::mapped_root()]
}

/// `path` lies strictly below one of `roots`, also after resolving symbolic links in its parent.
pub fn confined_to(path: &Path, roots: &[PathBuf]) -> Result<(), String> {
    let Some(root) = roots.iter().find(|r| lexically_below(path, r) && path != r.as_path()) else {
        let names: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        return Err(format!("{} is outside {}: refused", path.display(), names.join(", ")));
    };
    // A symbolic link among the parents could lead anywhere; the real parent must still be below the root.
    if let (Some(parent), Ok(real_root)) = (path.parent(), std::fs::canonicalize(root)) {
        if let Ok(real_parent) = std::fs::canonicalize(parent) {
            if !real_parent.starts_with(&real_root) {
                return Err(format!("{} resolves to {} outside {}: refused", path.display(), real_parent.display(), real_root.display()));
            }
        }
    }
    Ok(())
}

/// Mounts at or below `path`, deepest first and, at one place, the topmost (latest) first.
pub fn mounts_below(path: &Path) -> io::Result<Vec<Mount>> {
    let mut v: Vec<Mount> = crate::mountinfo::read()?.into_iter().filter(|m| m.mount_point.starts_with(path)).collect();
    v.sort_by(|a, b| b.mount_point.components().count().cmp(&a.mount_point.components().count()).then(b.id.cmp(&a.id)));
    Ok(v)
}

/// How a mount went away.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unmounted {
    Clean,
    /// Still busy after the retries: detached with MNT_DETACH (the file system lives on until its last user
    /// goes), reported.
    Lazy,
    AlreadyGone,
}

/// Take down every mount at or below `path`, deepest first. A busy mount is retried until `busy_wait`,
/// then detached lazily; `Lazy` is returned if any mount needed that.
pub fn unmount_tree(path: &Path, busy_wait: Duration) -> Result<Unmounted, (io::Error, PathBuf)> {
    let mut result = Unmounted::AlreadyGone;
    // Mounts stacked on one another show up one at a time: repeat until none is left.
    for _ in 0..64 {
        let list = mounts_below(path).map_err(|e| (e, PathBuf::from("/proc/self/mountinfo")))?;
        let Some(m) = list.first() else { return Ok(result) };
        match unmount_one(&m.mount_point, busy_wait) {
            Ok(u) => {
                if u == Unmounted::Lazy || result == Unmounted::AlreadyGone {
                    result = if u == Unmounted::AlreadyGone { Unmounted::Clean } else { u };
                }
            }
            Err(e) => return Err((e, m.mount_point.clone())),
        }
    }
    Err((io::Error::other("more than 64 mounts stacked"), path.to_path_buf()))
}

fn unmount_one(mp: &Path, busy_wait: Duration) -> io::Result<Unmounted> {
    let deadline = Instant::now() + busy_wait;
    loop {
        match nix::mount::umount2(mp, nix::mount::MntFlags::UMOUNT_NOFOLLOW) {
            Ok(()) => return Ok(Unmounted::Clean),
            Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => return Ok(Unmounted::AlreadyGone),
            // Processes that were just killed may still hold it for a moment.
            Err(nix::errno::Errno::EBUSY) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(nix::errno::Errno::EBUSY) => {
                nix::mount::umount2(mp, nix::mount::MntFlags::MNT_DETACH | nix::mount::MntFlags::UMOUNT_NOFOLLOW)
                    .map_err(|e| io::Error::from_raw_os_error(e as i32))?;
                return Ok(Unmounted::Lazy);
            }
            Err(e) => return Err(io::Error::from_raw_os_error(e as i32)),
        }
    }
}

/// Remove a directory tree below a Drums root. Refuses when anything is mounted at or below it (a recursive
/// removal through a mount would delete what the mount shows, possibly the host's files). Ok(false): it
/// did not exist.
pub fn remove_tree(path: &Path) -> Result<bool, String> {
    remove_tree_in(path, &session_roots())
}

/// `remove_tree` below other roots (a prune's: images and runtime layers).
pub fn remove_tree_in(path: &Path, roots: &[PathBuf]) -> Result<bool, String> {
    confined_to(path, roots)?;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("{}: stat: {e}", path.display())),
    };
    if let Some(m) = mounts_below(path).map_err(|e| format!("/proc/self/mountinfo: {e}"))?.first() {
        return Err(format!("{}: still mounted below it ({}): not removed", path.display(), m.mount_point.display()));
    }
    // A writer killed a moment ago (a dump's copy, CRIU itself) may still add a file while the tree goes:
    // the removal is retried for a short while before "not empty" is reported.
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        // remove_dir_all does not follow symbolic links, so a link inside cannot lead it out.
        let r = if meta.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
        match r {
            Ok(()) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty && Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("{}: remove: {e}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_removed_while_a_dying_writer_still_adds_files() {
        let root = crate::state::checkpoint_root();
        std::fs::create_dir_all(&root).unwrap();
        let dir = root.join(format!("{}.partial", crate::state::new_id('c')));
        std::fs::create_dir_all(dir.join("images")).unwrap();
        let writer_dir = dir.join("images");
        // A writer like a just-killed CRIU: it keeps creating files for 300 ms, then stops.
        let writer = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut n = 0;
            while t0.elapsed() < Duration::from_millis(300) {
                let _ = std::fs::write(writer_dir.join(format!("pages-{n}.img")), b"x");
                n += 1;
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        let r = remove_tree(&dir);
        writer.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(r, Ok(true));
    }

    #[test]
    fn only_below_the_roots() {
        let root = crate::state::state_root();
        assert!(confined(&root.join("sessions/d-1")).is_ok());
        assert!(confined(&root).is_err(), "the root itself is refused");
        assert!(confined(Path::new("/etc")).is_err());
        assert!(confined(&root.join("../etc")).is_err());
        assert!(confined(Path::new("relative/path")).is_err());
    }
}
