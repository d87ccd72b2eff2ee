//! Copies of layers, in-process and by directory descriptors: a read-only layer into a session's
//! tmpfs (`copy_tree`: `overlay::mount_root` for layers given by path, and a checkpoint's copy of such
//! layers), and a session's upper into its checkpoint's layer without what would give privilege
//! (`copy_layer`, CRIU's post-dump action). Apart from the mounts in `overlay`: a file copier with its
//! own rules about links and privilege, which the checkpoint uses as much as the overlay does.

use crate::error::{Error, IoContext, Result};
use std::path::{Path, PathBuf};
pub use crate::record::layers::Dropped;

/// The device nodes a session's init makes in its own /dev (drums-ns, `init_stage1`): name, major, minor.
/// CRIU restores descriptors open on them, so a checkpoint layer keeps them.
pub const SESSION_DEV_NODES: [(&str, u32, u32); 6] = [("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)];


/// Copy a layer with everything overlayfs cares about: owners, modes, times, whiteouts (0:0 character
/// devices) and other device nodes and FIFOs (not sockets), symlinks, hard links, and extended attributes
/// (`trusted.overlay.*` among them; this needs root). `to` is made here. In-process: a restore copies two
/// layers, and running `cp -a` for each cost a few milliseconds of process start on top of the copying.
/// For layers Drums made or was given (a checkpoint's layer, `--layer`): nothing is filtered.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir(to).ctx("create directory", to)?;
    Copier::run(from, to, false).map(|_| ())
}

/// Copy a session's upper (`from`) into the existing, empty checkpoint layer `to`, as `copy_tree` does
/// but without what would make the layer, a host directory, a way to privilege on the host or in a
/// sibling: set-user-ID and set-group-ID bits of files are cleared (a directory's set-group-ID only
/// chooses new files' group and is kept), file capabilities are not copied, and no device node is
/// copied but whiteouts and the session's own /dev nodes (`SESSION_DEV_NODES`). Returns what was left
/// out. Runs while the session is frozen (CRIU's post-dump action, `drums-ckpt copy-layer`).
pub fn copy_layer(from: &Path, to: &Path) -> Result<Dropped> {
    Copier::run(from, to, true)
}

/// A copy walks both trees by directory descriptors, one name at a time, and never follows a link in
/// either: every name is a single component of a directory already open, stated without following it,
/// and opened with O_NOFOLLOW.
struct Copier {
    from: PathBuf,
    sanitize: bool,
    dst_top: std::os::fd::OwnedFd,
    /// (device, inode) of a multiply-linked source file -> where its first copy is, relative to `to`.
    links: std::collections::HashMap<(u64, u64), PathBuf>,
    dropped: Dropped,
}

const DIR_FLAGS: i32 = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
const ONE_NAME: u64 = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS;
const FILE_CAPS: &[u8] = b"security.capability";

fn open_dir_fd(p: &Path) -> Result<std::os::fd::OwnedFd> {
    crate::inroot::openat2(libc::AT_FDCWD, p, DIR_FLAGS, 0, 0).ctx("open directory", p)
}

fn io_check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn cname(n: &std::ffi::OsStr) -> std::ffi::CString {
    // Names read from a directory never hold a NUL.
    std::ffi::CString::new(n.as_encoded_bytes()).expect("a directory entry's name has no NUL")
}

/// `/proc/self/fd/DIR/NAME`: a path to one name of an open directory for the calls that take no
/// descriptor (the l*xattr family); only NAME is looked up, and not followed.
fn at_name(dir: std::os::fd::BorrowedFd, name: &std::ffi::OsStr) -> std::ffi::CString {
    let mut b = format!("/proc/self/fd/{}/", std::os::fd::AsRawFd::as_raw_fd(&dir)).into_bytes();
    b.extend_from_slice(name.as_encoded_bytes());
    std::ffi::CString::new(b).expect("a directory entry's name has no NUL")
}

/// Where extended attributes are read and written: an open file or directory, or a name in a directory
/// (links, device nodes and FIFOs, which are never opened).
enum XattrAt<'a> {
    Fd(std::os::fd::BorrowedFd<'a>),
    Path(std::ffi::CString),
}

impl XattrAt<'_> {
    fn list(&self, buf: &mut [u8]) -> isize {
        let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
        match self {
            XattrAt::Fd(fd) => unsafe { libc::flistxattr(std::os::fd::AsRawFd::as_raw_fd(fd), p, n) },
            XattrAt::Path(c) => unsafe { libc::llistxattr(c.as_ptr(), p, n) },
        }
    }
    fn get(&self, name: &std::ffi::CStr, buf: &mut [u8]) -> isize {
        let (p, n) = (buf.as_mut_ptr().cast(), buf.len());
        match self {
            XattrAt::Fd(fd) => unsafe { libc::fgetxattr(std::os::fd::AsRawFd::as_raw_fd(fd), name.as_ptr(), p, n) },
            XattrAt::Path(c) => unsafe { libc::lgetxattr(c.as_ptr(), name.as_ptr(), p, n) },
        }
    }
    fn set(&self, name: &std::ffi::CStr, value: &[u8]) -> libc::c_int {
        match self {
            XattrAt::Fd(fd) => unsafe { libc::fsetxattr(std::os::fd::AsRawFd::as_raw_fd(fd), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) },
            XattrAt::Path(c) => unsafe { libc::lsetxattr(c.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) },
        }
    }
}

impl Copier {
    fn run(from: &Path, to: &Path, sanitize: bool) -> Result<Dropped> {
        let src = open_dir_fd(from)?;
        let dst = open_dir_fd(to)?;
        let dst_top = dst.try_clone().ctx("duplicate", to)?;
        let mut c = Copier { from: from.to_path_buf(), sanitize, dst_top, links: Default::default(), dropped: Dropped::default() };
        c.dir(&src, &dst, Path::new(""))?;
        let st = crate::inroot::fstat(std::os::fd::AsFd::as_fd(&src)).ctx("stat", from)?;
        c.finish_open(&src, &dst, &st, Path::new(""))?;
        Ok(c.dropped)
    }

    fn err(&self, what: &str, rel: &Path, e: std::io::Error) -> Error {
        Error::io(what, self.from.join(rel), e)
    }

    fn dir(&mut self, src: &std::os::fd::OwnedFd, dst: &std::os::fd::OwnedFd, rel: &Path) -> Result<()> {
        use std::os::fd::AsFd;
        let names = crate::inroot::list_dir(src.as_fd()).map_err(|e| self.err("read directory", rel, e))?;
        for name in names {
            self.entry(src, dst, rel, &name)?;
        }
        Ok(())
    }

    fn allowed_device(rel: &Path, st: &libc::stat) -> bool {
        let (major, minor) = (libc::major(st.st_rdev), libc::minor(st.st_rdev));
        if crate::inroot::is_kind(st, libc::S_IFCHR) && st.st_rdev == 0 {
            return true; // an overlayfs whiteout
        }
        crate::inroot::is_kind(st, libc::S_IFCHR)
            && SESSION_DEV_NODES.iter().any(|(n, ma, mi)| rel == Path::new("dev").join(n).as_path() && (major, minor) == (*ma, *mi))
    }

    /// The mode a copy gets: the source's, less set-id bits of a non-directory in a sanitized copy.
    fn mode_for(&mut self, st: &libc::stat) -> u32 {
        let mode = st.st_mode & 0o7777;
        if self.sanitize && !crate::inroot::is_kind(st, libc::S_IFDIR) && mode & 0o6000 != 0 {
            self.dropped.setid += 1;
            return mode & !0o6000;
        }
        mode
    }

    fn entry(&mut self, src_dir: &std::os::fd::OwnedFd, dst_dir: &std::os::fd::OwnedFd, rel_dir: &Path, name: &std::ffi::OsStr) -> Result<()> {
        use crate::inroot::{is_kind, openat2};
        use std::os::fd::{AsFd, AsRawFd};
        let rel = rel_dir.join(name);
        let st = crate::inroot::lstat_at(src_dir.as_fd(), name).map_err(|e| self.err("stat", &rel, e))?;
        let c = cname(name);
        let (sd, dd) = (src_dir.as_raw_fd(), dst_dir.as_raw_fd());
        let key = (st.st_dev, st.st_ino);
        if !is_kind(&st, libc::S_IFDIR) && st.st_nlink > 1 {
            if let Some(first) = self.links.get(&key) {
                let first = std::ffi::CString::new(first.as_os_str().as_encoded_bytes()).expect("no NUL");
                return io_check(unsafe { libc::linkat(self.dst_top.as_raw_fd(), first.as_ptr(), dd, c.as_ptr(), 0) }).map_err(|e| self.err("link", &rel, e));
            }
        }
        if is_kind(&st, libc::S_IFDIR) {
            io_check(unsafe { libc::mkdirat(dd, c.as_ptr(), 0o700) }).map_err(|e| self.err("create directory", &rel, e))?;
            let s = openat2(sd, Path::new(name), DIR_FLAGS, 0, ONE_NAME).map_err(|e| self.err("open directory", &rel, e))?;
            let d = openat2(dd, Path::new(name), DIR_FLAGS, 0, ONE_NAME).map_err(|e| self.err("open directory", &rel, e))?;
            self.dir(&s, &d, &rel)?;
            return self.finish_open(&s, &d, &st, &rel);
        }
        if is_kind(&st, libc::S_IFREG) {
            let s = openat2(sd, Path::new(name), libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY, 0, ONE_NAME).map_err(|e| self.err("open", &rel, e))?;
            // The same regular file that was stated (a name swapped in between is not copied blindly).
            let now = crate::inroot::fstat(s.as_fd()).map_err(|e| self.err("stat", &rel, e))?;
            if !is_kind(&now, libc::S_IFREG) || (now.st_dev, now.st_ino) != key {
                return Err(self.err("copy", &rel, std::io::Error::other("the file changed while it was copied")));
            }
            let d = openat2(dd, Path::new(name), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW, 0o600, ONE_NAME).map_err(|e| self.err("create", &rel, e))?;
            let (mut sf, mut df) = (std::fs::File::from(s), std::fs::File::from(d));
            std::io::copy(&mut sf, &mut df).map_err(|e| self.err("copy", &rel, e))?;
            self.finish_open(&sf.into(), &df.into(), &st, &rel)?;
        } else {
            if is_kind(&st, libc::S_IFLNK) {
                let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
                let n = unsafe { libc::readlinkat(sd, c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    return Err(self.err("read link", &rel, std::io::Error::last_os_error()));
                }
                buf.truncate(n as usize);
                let target = std::ffi::CString::new(buf).map_err(|_| self.err("read link", &rel, std::io::Error::from_raw_os_error(libc::EINVAL)))?;
                io_check(unsafe { libc::symlinkat(target.as_ptr(), dd, c.as_ptr()) }).map_err(|e| self.err("symlink", &rel, e))?;
            } else if is_kind(&st, libc::S_IFSOCK) {
                // A socket's name is no socket: nothing listens on a copy, and CRIU binds the restored
                // sockets to their paths itself (an existing name would make that bind fail).
                return Ok(());
            } else if is_kind(&st, libc::S_IFCHR) || is_kind(&st, libc::S_IFBLK) || is_kind(&st, libc::S_IFIFO) {
                if self.sanitize && !is_kind(&st, libc::S_IFIFO) && !Self::allowed_device(&rel, &st) {
                    self.dropped.devices += 1;
                    return Ok(());
                }
                io_check(unsafe { libc::mknodat(dd, c.as_ptr(), st.st_mode & libc::S_IFMT | 0o600, st.st_rdev) }).map_err(|e| self.err("mknod", &rel, e))?;
            } else {
                return Err(Error::failed(format!("{}: a file of a kind a layer cannot hold", self.from.join(&rel).display())));
            }
            self.finish_named(src_dir, dst_dir, name, &st, &rel)?;
        }
        if st.st_nlink > 1 {
            self.links.insert(key, rel);
        }
        Ok(())
    }

    /// Owner, mode, attributes and times of a copy that is open (a file, a directory).
    fn finish_open(&mut self, src: &std::os::fd::OwnedFd, dst: &std::os::fd::OwnedFd, st: &libc::stat, rel: &Path) -> Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        let mode = self.mode_for(st);
        // chown first: it clears set-id bits, which the chmod then sets as decided.
        io_check(unsafe { libc::fchown(dst.as_raw_fd(), st.st_uid, st.st_gid) }).map_err(|e| self.err("chown", rel, e))?;
        io_check(unsafe { libc::fchmod(dst.as_raw_fd(), mode) }).map_err(|e| self.err("chmod", rel, e))?;
        self.copy_xattrs(&XattrAt::Fd(src.as_fd()), &XattrAt::Fd(dst.as_fd()), rel)?;
        let times = [libc::timespec { tv_sec: st.st_atime, tv_nsec: st.st_atime_nsec }, libc::timespec { tv_sec: st.st_mtime, tv_nsec: st.st_mtime_nsec }];
        io_check(unsafe { libc::futimens(dst.as_raw_fd(), times.as_ptr()) }).map_err(|e| self.err("set times", rel, e))
    }

    /// The same for a copy that is only a name (a link, a device node, a FIFO), never followed.
    fn finish_named(&mut self, src_dir: &std::os::fd::OwnedFd, dst_dir: &std::os::fd::OwnedFd, name: &std::ffi::OsStr, st: &libc::stat, rel: &Path) -> Result<()> {
        use std::os::fd::{AsFd, AsRawFd};
        let c = cname(name);
        let dd = dst_dir.as_raw_fd();
        io_check(unsafe { libc::fchownat(dd, c.as_ptr(), st.st_uid, st.st_gid, libc::AT_SYMLINK_NOFOLLOW) }).map_err(|e| self.err("chown", rel, e))?;
        if !crate::inroot::is_kind(st, libc::S_IFLNK) {
            // The name is the node just made here, not a link: fchmodat may follow it.
            let mode = self.mode_for(st);
            io_check(unsafe { libc::fchmodat(dd, c.as_ptr(), mode, 0) }).map_err(|e| self.err("chmod", rel, e))?;
        }
        self.copy_xattrs(&XattrAt::Path(at_name(src_dir.as_fd(), name)), &XattrAt::Path(at_name(dst_dir.as_fd(), name)), rel)?;
        let times = [libc::timespec { tv_sec: st.st_atime, tv_nsec: st.st_atime_nsec }, libc::timespec { tv_sec: st.st_mtime, tv_nsec: st.st_mtime_nsec }];
        io_check(unsafe { libc::utimensat(dd, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) }).map_err(|e| self.err("set times", rel, e))
    }

    fn copy_xattrs(&mut self, from: &XattrAt, to: &XattrAt, rel: &Path) -> Result<()> {
        let n = from.list(&mut []);
        if n <= 0 {
            return Ok(());
        }
        let mut names = vec![0u8; n as usize];
        let n = from.list(&mut names);
        if n < 0 {
            return Err(self.err("list extended attributes", rel, std::io::Error::last_os_error()));
        }
        for name in names[..n as usize].split(|b| *b == 0).filter(|x| !x.is_empty()) {
            if self.sanitize && name == FILE_CAPS {
                self.dropped.capabilities += 1;
                continue;
            }
            let cname = std::ffi::CString::new(name).expect("split at NUL");
            let len = from.get(&cname, &mut []);
            if len < 0 {
                return Err(self.err(&format!("read attribute {}", cname.to_string_lossy()), rel, std::io::Error::last_os_error()));
            }
            let mut value = vec![0u8; len as usize];
            let len = from.get(&cname, &mut value);
            if len < 0 || to.set(&cname, &value[..len as usize]) != 0 {
                return Err(self.err(&format!("copy attribute {}", cname.to_string_lossy()), rel, std::io::Error::last_os_error()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overlay::xattr_set;

    fn cpath(p: &Path) -> std::ffi::CString {
        std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
    }

    fn mknod(p: &Path, kind: libc::mode_t, major: u32, minor: u32) {
        assert_eq!(unsafe { libc::mknod(cpath(p).as_ptr(), kind | 0o644, libc::makedev(major, minor)) }, 0, "mknod needs root");
    }

    fn xattr_of(p: &Path, name: &std::ffi::CStr) -> Option<Vec<u8>> {
        let mut v = [0u8; 64];
        let n = unsafe { libc::lgetxattr(cpath(p).as_ptr(), name.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        (n >= 0).then(|| v[..n as usize].to_vec())
    }

    /// A tree with one of everything: a set-user-ID file with two names, a link, a whiteout, a device
    /// node, the session's /dev/null, a FIFO, an opaque directory, a file capability.
    fn sample_tree(from: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(from.join("d/e")).unwrap();
        std::fs::create_dir_all(from.join("dev")).unwrap();
        std::fs::write(from.join("d/f"), b"data").unwrap();
        std::os::unix::fs::lchown(from.join("d/f"), Some(1), Some(2)).unwrap();
        // After the chown, which clears set-id bits.
        std::fs::set_permissions(from.join("d/f"), std::fs::Permissions::from_mode(0o4751)).unwrap();
        std::fs::hard_link(from.join("d/f"), from.join("d/g")).unwrap();
        std::os::unix::fs::symlink("f", from.join("d/l")).unwrap();
        mknod(&from.join("d/gone"), libc::S_IFCHR, 0, 0);
        mknod(&from.join("d/disk"), libc::S_IFBLK, 8, 0);
        mknod(&from.join("d/mem"), libc::S_IFCHR, 1, 1);
        mknod(&from.join("dev/null"), libc::S_IFCHR, 1, 3);
        mknod(&from.join("d/null"), libc::S_IFCHR, 1, 3);
        assert_eq!(unsafe { libc::mkfifo(cpath(&from.join("d/fifo")).as_ptr(), 0o600) }, 0);
        xattr_set(&from.join("d/e"), c"trusted.overlay.opaque", b"y").unwrap();
        std::fs::write(from.join("d/cap"), b"x").unwrap();
        // VFS_CAP_REVISION_2 with CAP_SYS_ADMIN permitted and effective.
        let cap: [u8; 20] = [0x01, 0x00, 0x00, 0x02, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        xattr_set(&from.join("d/cap"), c"security.capability", &cap).unwrap();
    }

    #[test]
    fn copies_a_layer_with_whiteouts_links_modes_and_attributes() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let t = std::env::temp_dir().join(format!("drums-copy-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        let (from, to) = (t.join("from"), t.join("to"));
        sample_tree(&from);
        copy_tree(&from, &to).unwrap();
        let f = std::fs::metadata(to.join("d/f")).unwrap();
        assert_eq!((std::fs::read(to.join("d/f")).unwrap(), f.mode() & 0o7777, f.uid(), f.gid()), (b"data".to_vec(), 0o4751, 1, 2));
        assert_eq!(std::fs::metadata(to.join("d/g")).unwrap().ino(), f.ino(), "hard links stay links");
        assert_eq!(std::fs::read_link(to.join("d/l")).unwrap(), Path::new("f"));
        let w = std::fs::symlink_metadata(to.join("d/gone")).unwrap();
        assert!(w.file_type().is_char_device() && w.rdev() == 0, "the whiteout");
        assert!(std::fs::symlink_metadata(to.join("d/disk")).unwrap().file_type().is_block_device(), "a faithful copy keeps devices");
        assert!(std::fs::symlink_metadata(to.join("d/fifo")).unwrap().file_type().is_fifo());
        assert_eq!(xattr_of(&to.join("d/e"), c"trusted.overlay.opaque").as_deref(), Some(&b"y"[..]), "the opaque mark");
        assert!(xattr_of(&to.join("d/cap"), c"security.capability").is_some());
        assert_eq!(f.mtime(), std::fs::metadata(from.join("d/f")).unwrap().mtime());
        assert_eq!(std::fs::metadata(to.join("d")).unwrap().mtime(), std::fs::metadata(from.join("d")).unwrap().mtime(), "a directory's time, set after its entries");
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn a_checkpoint_layer_keeps_no_set_id_bit_capability_or_device_but_whiteouts_and_dev_nodes() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
        let t = std::env::temp_dir().join(format!("drums-copy-layer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        let (from, to) = (t.join("from"), t.join("to"));
        sample_tree(&from);
        std::fs::create_dir_all(from.join("var/mail")).unwrap();
        std::fs::set_permissions(from.join("var/mail"), std::fs::Permissions::from_mode(0o2775)).unwrap();
        // A link to a host directory: copied as a link, never followed.
        std::os::unix::fs::symlink("/etc", from.join("d/etc")).unwrap();
        std::fs::create_dir(&to).unwrap();
        let dropped = copy_layer(&from, &to).unwrap();
        assert_eq!(dropped, Dropped { setid: 1, devices: 3, capabilities: 1 }, "d/f (two names, one file), d/disk, d/mem, d/null, d/cap");
        let f = std::fs::metadata(to.join("d/f")).unwrap();
        assert_eq!((f.mode() & 0o7777, f.uid(), std::fs::metadata(to.join("d/g")).unwrap().ino()), (0o751, 1, f.ino()));
        assert_eq!(std::fs::metadata(to.join("var/mail")).unwrap().mode() & 0o7777, 0o2775, "a directory's set-group-ID is kept");
        for gone in ["d/disk", "d/mem", "d/null"] {
            assert!(std::fs::symlink_metadata(to.join(gone)).is_err(), "{gone}");
        }
        assert!(std::fs::symlink_metadata(to.join("d/gone")).unwrap().file_type().is_char_device(), "the whiteout");
        assert_eq!(std::fs::symlink_metadata(to.join("dev/null")).unwrap().rdev(), libc::makedev(1, 3), "the session's /dev/null");
        assert!(xattr_of(&to.join("d/cap"), c"security.capability").is_none());
        assert_eq!(std::fs::read_link(to.join("d/etc")).unwrap(), Path::new("/etc"));
        std::fs::remove_dir_all(&t).unwrap();
    }
}
