//! Host id ranges for sessions in a user namespace of their own (the default of every tool that
//! makes sessions, unless `--host-ids`; drums(7) SECURITY): each such session gets 65536 host user and group ids that no host account and no
//! other live session uses, and its user namespace maps its ids 0..65535 to them (root inside is host
//! `base`, the desktop's `user`, 1000, is host `base+1000`).
//!
//! Ranges come from a band, $DRUMS_ID_BAND (`FIRST:SLOTS`: the first id and the number of 65536-id
//! slots; default 1073741824:4096, host ids 2^30 to 2^30+2^28-1). A slot is free when no live session's
//! ledger holds it (`id_range` lines), no line of /etc/passwd, /etc/group, /etc/subuid or /etc/subgid
//! names an id in it, and no process on the host runs with one of its ids (a leftover of a session
//! whose ledger is gone). Allocation holds `<state root>/idrange.lock` from the scan until the ledger
//! line is written, so two creators never take one slot; the ledger line comes before the namespace.

use crate::error::{Error, IoContext, Result};
use crate::ledger::{Ledger, Resource};
use crate::record::IdRange;
use std::path::{Path, PathBuf};

/// Ids per session: uid and gid 0..65535 inside.
pub const COUNT: u32 = 65536;
const DEFAULT_FIRST: u64 = 1 << 30;
const DEFAULT_SLOTS: u64 = 4096;
const LOCK_FILE: &str = "idrange.lock";

/// The band ranges are taken from: (first id, slots), from $DRUMS_ID_BAND or the default.
pub fn band() -> Result<(u64, u64)> {
    let Ok(v) = std::env::var("DRUMS_ID_BAND") else { return Ok((DEFAULT_FIRST, DEFAULT_SLOTS)) };
    let bad = || Error::bad_input(format!("DRUMS_ID_BAND=`{v}`: want FIRST:SLOTS, FIRST a multiple of 65536 above 65535, the band below 2^32-1"));
    let (a, b) = v.split_once(':').ok_or_else(bad)?;
    let (first, slots): (u64, u64) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
    if first < COUNT as u64 || first % COUNT as u64 != 0 || slots == 0 || first + slots * COUNT as u64 > u32::MAX as u64 {
        return Err(bad());
    }
    Ok((first, slots))
}

/// Ids named by host account files: (first, count) per entry.
fn host_accounts() -> Vec<(u64, u64)> {
    let mut out = vec![];
    for f in ["/etc/passwd", "/etc/group"] {
        for line in std::fs::read_to_string(f).unwrap_or_default().lines() {
            let fields: Vec<&str> = line.split(':').collect();
            for i in [2, 3] {
                if f == "/etc/group" && i == 3 {
                    continue;
                }
                if let Some(id) = fields.get(i).and_then(|x| x.parse::<u64>().ok()) {
                    out.push((id, 1));
                }
            }
        }
    }
    for f in ["/etc/subuid", "/etc/subgid"] {
        for line in std::fs::read_to_string(f).unwrap_or_default().lines() {
            let fields: Vec<&str> = line.split(':').collect();
            if let (Some(Ok(first)), Some(Ok(n))) = (fields.get(1).map(|x| x.parse::<u64>()), fields.get(2).map(|x| x.parse::<u64>())) {
                out.push((first, n));
            }
        }
    }
    out
}

/// The user and group ids of every process on the host (real, effective, saved, file system).
fn process_ids() -> Vec<u64> {
    let mut out = vec![];
    for pid in crate::proc::pids() {
        let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
        for l in st.lines().filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:")) {
            out.extend(l.split_whitespace().skip(1).filter_map(|x| x.parse::<u64>().ok()));
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Host processes running with an id of the band, by the base of the slot that id falls in: what the
/// sweep's report shows of ranges in use, ledgered or not. Zombies are left out: a destroyed session's
/// init waits as one for whichever parent CRIU's restore left it (the inventory counts zombies apart, as
/// holding nothing but a pid), and its ids act on nothing. (Allocation still avoids their slots.)
pub fn band_users() -> std::collections::BTreeMap<u32, Vec<i32>> {
    let (first, slots) = band().unwrap_or((DEFAULT_FIRST, DEFAULT_SLOTS));
    let end = first + slots * COUNT as u64;
    let mut out: std::collections::BTreeMap<u32, Vec<i32>> = Default::default();
    for pid in crate::proc::pids() {
        if crate::proc::state(pid) == Some('Z') {
            continue;
        }
        let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
        let mut bases: Vec<u32> = st
            .lines()
            .filter(|l| l.starts_with("Uid:") || l.starts_with("Gid:"))
            .flat_map(|l| l.split_whitespace().skip(1).filter_map(|x| x.parse::<u64>().ok()).collect::<Vec<_>>())
            .filter(|&id| id >= first && id < end)
            .map(|id| (first + (id - first) / COUNT as u64 * COUNT as u64) as u32)
            .collect();
        bases.sort_unstable();
        bases.dedup();
        for b in bases {
            out.entry(b).or_default().push(pid);
        }
    }
    out
}

/// The ranges held by live sessions' ledgers (created, not released).
pub fn held() -> Vec<(String, IdRange)> {
    let mut out = vec![];
    for e in std::fs::read_dir(crate::state::sessions_root()).into_iter().flatten().flatten() {
        let Ok(c) = crate::ledger::read_file(&e.path().join(crate::ledger::FILE_NAME)) else { continue };
        let id = c.owner().map(|o| o.0.to_string()).unwrap_or_else(|| e.file_name().to_string_lossy().into_owned());
        for r in c.live() {
            if let Resource::IdRange { base, count } = r {
                out.push((id.clone(), IdRange { base, count }));
            }
        }
    }
    out
}

/// Take a free range for the session of `ledger` and write its `id_range` line.
pub fn allocate(ledger: &Ledger) -> Result<IdRange> {
    let (first, slots) = band()?;
    let root = crate::state::private_root(&crate::state::state_root())?;
    let lock_path = root.join(LOCK_FILE);
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&lock_path).ctx("open", &lock_path)?;
    let _lock = crate::flock::Flock::wait(&f, &lock_path, crate::flock::Mode::Exclusive)?;
    let taken: Vec<(u64, u64)> = held().into_iter().map(|(_, r)| (r.base as u64, r.count as u64)).chain(host_accounts()).collect();
    let procs = process_ids();
    for slot in 0..slots {
        let r = IdRange { base: (first + slot * COUNT as u64) as u32, count: COUNT };
        if taken.iter().any(|(a, n)| r.overlaps(*a, *n)) {
            continue;
        }
        let lo = procs.partition_point(|&id| id < r.base as u64);
        if procs.get(lo).is_some_and(|&id| id < r.base as u64 + r.count as u64) {
            continue;
        }
        ledger.create_res(Resource::IdRange { base: r.base, count: r.count })?;
        return Ok(r);
    }
    Err(Error::failed(format!("no free id range: all {slots} slots of {COUNT} ids from {first} are taken ($DRUMS_ID_BAND)")))
}

/// The uid_map and gid_map text of a session's user namespace.
pub fn map_text(r: &IdRange) -> String {
    format!("0 {} {}\n", r.base, r.count)
}

/// Write `/proc/PID/uid_map` and `gid_map` of a process that has just made a user namespace.
pub fn write_maps(pid: i32, r: &IdRange) -> Result<()> {
    for f in ["uid_map", "gid_map"] {
        let p = PathBuf::from(format!("/proc/{pid}/{f}"));
        std::fs::write(&p, map_text(r)).ctx("write", &p)?;
    }
    Ok(())
}

/// A user namespace with the mapping of `r`, held by its descriptor only (for idmapped mounts): a
/// child makes it and exits; the descriptor keeps the namespace. Owned by host root: no process ever
/// runs in it.
pub fn userns_fd(r: &IdRange) -> Result<std::fs::File> {
    let r = *r;
    in_helper(
        || unsafe { libc::unshare(libc::CLONE_NEWUSER) == 0 },
        |child| {
            write_maps(child, &r)?;
            open_ns(child, "user")
        },
    )
}

/// The user namespace a restored sibling runs in (drums-restore, unless --host-ids): mapped as `userns_fd`'s, but
/// made by a child that became the range's root (host id `base`) first, so that it is owned by `base`:
/// the kernel's per-user counts of everything inside are charged to `base` at the host's level, as for
/// a cold session's namespace (ns::create). Held by the descriptor until the restored tree is in it.
pub fn session_userns(r: &IdRange) -> Result<std::fs::File> {
    let (base, r) = (r.base, *r);
    in_helper(
        move || unsafe {
            libc::setgroups(0, std::ptr::null()) == 0
                && libc::setresgid(base, base, base) == 0
                && libc::setresuid(base, base, base) == 0
                && libc::unshare(libc::CLONE_NEWUSER) == 0
        },
        |child| {
            write_maps(child, &r)?;
            open_ns(child, "user")
        },
    )
}

/// A new network namespace owned by the user namespace `userns` (a restored sibling's, `session_userns`):
/// CRIU, which restores such a sibling as root of that namespace, can join only a namespace its user
/// namespace owns. Host root still configures it from outside (it holds every capability there).
pub fn netns_in(userns: &std::fs::File) -> Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let fd = userns.as_raw_fd();
    in_helper(
        move || unsafe { libc::setns(fd, libc::CLONE_NEWUSER) == 0 && libc::unshare(libc::CLONE_NEWNET) == 0 },
        |child| open_ns(child, "net"),
    )
}

fn open_ns(pid: i32, name: &str) -> Result<std::fs::File> {
    let p = PathBuf::from(format!("/proc/{pid}/ns/{name}"));
    std::fs::File::open(&p).ctx("open", &p)
}

/// Fork a child that runs `child` (raw system calls only: this runs between fork and exit) and reports
/// whether it succeeded; on success `parent` is called with the child's pid while the child waits, then
/// the child exits. For namespaces that a process must make and the tool keeps by descriptor.
fn in_helper<T>(child: impl FnOnce() -> bool, parent: impl FnOnce(i32) -> Result<T>) -> Result<T> {
    use std::io::{Read, Write};
    let (ready_r, ready_w) = crate::proc::pipe()?;
    let (done_r, done_w) = crate::proc::pipe()?;
    match unsafe { libc::fork() } {
        -1 => Err(Error::failed(format!("fork: {}", std::io::Error::last_os_error()))),
        0 => unsafe {
            drop(ready_r);
            drop(done_w);
            // 0, or the errno of the call that failed.
            let rc: i32 = if child() { 0 } else { (*libc::__errno_location()).max(1) };
            let b = rc.to_le_bytes();
            libc::write(std::os::fd::AsRawFd::as_raw_fd(&ready_w), b.as_ptr().cast(), b.len());
            // Wait until the parent has opened what it needs (or gone).
            let mut x = [0u8; 1];
            libc::read(std::os::fd::AsRawFd::as_raw_fd(&done_r), x.as_mut_ptr().cast(), 1);
            libc::_exit(0)
        },
        child => {
            drop(ready_w);
            drop(done_r);
            let mut b = [0u8; 4];
            let got = std::fs::File::from(ready_r).read_exact(&mut b);
            let res = (|| {
                got.map_err(|e| Error::failed(format!("namespace helper: {e}")))?;
                let rc = i32::from_le_bytes(b);
                if rc != 0 {
                    return Err(Error::failed(format!("the namespace helper (setresuid, unshare or setns): {}", std::io::Error::from_raw_os_error(rc))));
                }
                parent(child)
            })();
            let _ = std::fs::File::from(done_w).write_all(b"x");
            let mut st = 0;
            unsafe { libc::waitpid(child, &mut st, 0) };
            res
        }
    }
}

/// open_tree(2)'s and move_mount(2)'s flags (linux/mount.h), which the libc crate does not name.
pub(crate) const OPEN_TREE_CLONE: libc::c_uint = 1;
pub(crate) const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// Make an idmapped copy of the mount at `src` (the on-disk ids shifted by the range of `userns`) and
/// attach it at `target`, an existing empty directory: open_tree(OPEN_TREE_CLONE), mount_setattr
/// (MOUNT_ATTR_IDMAP, read-only), move_mount. Files owned by host root on disk appear owned by the
/// range's base, which the session's user namespace shows as root.
pub fn idmapped_bind(src: &Path, target: &Path, userns: &std::fs::File) -> Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let cs = std::ffi::CString::new(src.as_os_str().as_encoded_bytes()).map_err(|_| Error::bad_input("path with NUL"))?;
    let ct = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()).map_err(|_| Error::bad_input("path with NUL"))?;
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, cs.as_ptr(), OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint) };
    if fd < 0 {
        return Err(Error::io("open_tree", src, std::io::Error::last_os_error()));
    }
    let tree = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    set_idmap(tree.as_raw_fd(), userns).map_err(|e| Error::io("mount_setattr(MOUNT_ATTR_IDMAP)", src, e))?;
    let rc = unsafe { libc::syscall(libc::SYS_move_mount, tree.as_raw_fd(), c"".as_ptr(), libc::AT_FDCWD, ct.as_ptr(), MOVE_MOUNT_F_EMPTY_PATH) };
    if rc != 0 {
        return Err(Error::io("move_mount", target, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Make the detached mount `tree` (from open_tree(OPEN_TREE_CLONE)) idmapped by `userns`, read-only,
/// nosuid, nodev. Raw system calls only: also used between fork and exec (criu::AsUsernsRoot).
pub fn set_idmap(tree: i32, userns: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    #[repr(C)]
    struct MountAttr {
        attr_set: u64,
        attr_clr: u64,
        propagation: u64,
        userns_fd: u64,
    }
    const MOUNT_ATTR_RDONLY: u64 = 0x1;
    const MOUNT_ATTR_NOSUID: u64 = 0x2;
    const MOUNT_ATTR_NODEV: u64 = 0x4;
    const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
    let attr = MountAttr { attr_set: MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, attr_clr: 0, propagation: libc::MS_PRIVATE as u64, userns_fd: userns.as_raw_fd() as u64 };
    let rc = unsafe { libc::syscall(libc::SYS_mount_setattr, tree, c"".as_ptr(), libc::AT_EMPTY_PATH, &attr as *const MountAttr, std::mem::size_of::<MountAttr>()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_overlap_only_when_they_share_an_id() {
        let r = IdRange { base: 1 << 30, count: COUNT };
        assert!(r.overlaps(1 << 30, 1));
        assert!(r.overlaps((1 << 30) + 65535, 1));
        assert!(!r.overlaps((1 << 30) + 65536, 10));
        assert!(!r.overlaps(1000, 1));
        assert!(r.overlaps(100000, 1 << 31), "a subuid range that covers it");
        assert_eq!(r.host(1000), Some((1 << 30) + 1000));
        assert_eq!(r.host(65536), None);
    }
}
