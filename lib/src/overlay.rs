//! The session's root file system: overlayfs with a per-session upper on a host-visible tmpfs, over
//! read-only layers (a restore's checkpoint layer, layers given with `--layer`), over the runtime layer
//! (Drums' programs that run inside sessions, `runtime`), over the session's root image (`image`). The
//! host's `/` is never a layer.

use crate::error::{Error, IoContext, Result};
use crate::ledger::{Ledger, Resource};
use crate::record::{Overlay, Session};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::path::{Path, PathBuf};
pub use crate::record::layers::Dropped;

pub struct OverlayOptions {
    /// The root image: a name (its current image) or an image directory.
    pub image: String,
    /// Read-only layers above the runtime layer and the image, topmost first.
    pub layers: Vec<PathBuf>,
    pub tmpfs_bytes: u64,
    pub ttl_s: Option<u64>,
    /// Make the session for a user namespace of its own (drums(7) SECURITY): allocate its host id range
    /// (crate::idrange, ledgered first), show the layers through idmapped mounts, and own its upper by
    /// the range.
    pub userns: bool,
}

/// Make a new session: its state directory and ledger first, then the tmpfs and the overlay of its root
/// image.
pub fn create(opts: &OverlayOptions) -> Result<Session> {
    for l in &opts.layers {
        check_layer(l)?;
    }
    let id = crate::state::new_id('d');
    let dir = crate::state::session_dir(&id);
    let owner = crate::proc::session_owner()?;
    // The image is resolved and mounted under the shared use lock: `drums-sweep --prune-root-images`
    // cannot remove it in between.
    let _use = crate::image::lock(false)?;
    let image = crate::image::resolve(&opts.image)?.reference();
    let runtime = crate::runtime::beside_me()?;
    let ledger = Ledger::create(&dir, &id, owner.clone(), opts.ttl_s)?;
    ledger.phase("creating")?;
    let id_range = if opts.userns { Some(crate::idrange::allocate(&ledger)?) } else { None };
    let lowers = Lowers { layers: &opts.layers, mapped: None, runtime: &runtime, image: &image, id_range: id_range.as_ref() };
    let overlay = mount_root(&ledger, &dir, &lowers, opts.tmpfs_bytes, OWN_DIRS, &[])?;
    Ok(Session { overlay: Some(overlay), id_range, ..Session::new(id, dir, owner, opts.ttl_s) })
}

/// Directories of a new session's root that show nothing of the layers below (overlayfs "opaque"
/// directories in the upper): /dev gets only the nodes drums-ns makes, /tmp and /run start empty
/// whatever an image holds there. They are plain directories of the session's upper
/// (itself on a tmpfs) rather than tmpfs mounts because CRIU packs every tmpfs with tar and gzip and
/// unpacks it in each restore (two processes each, about 3.5 ms), while the upper is copied once into
/// the checkpoint layer, opaque marks included.
pub const OWN_DIRS: &[&str] = &["dev", "run", "tmp"];

/// Of OWN_DIRS, those anyone may write to (mode 1777, like a /tmp).
const STICKY_DIRS: &[&str] = &["tmp"];

/// What a session's root is made of, below its upper: read-only layers (copied into the session's
/// tmpfs), then the runtime layer and the root image (shared, on the host's disk), topmost first.
pub struct Lowers<'a> {
    pub layers: &'a [PathBuf],
    /// A restore's mapped files (crate::mapped): the checkpoint's layer of them.
    pub mapped: Option<&'a Path>,
    pub runtime: &'a crate::runtime::RuntimeRef,
    pub image: &'a crate::image::ImageRef,
    /// A session in its own user namespace: the lowers are mounted through idmapped mounts of this range
    /// at `<dir>/lowerN` (ledgered first), and the upper and its own directories belong to the range's
    /// root. On disk every layer stays owned by host root; nothing is copied or chowned for this.
    pub id_range: Option<&'a crate::record::IdRange>,
}

/// Mount a tmpfs at `<dir>/rw` (upper and work) and the overlay at `<dir>/root`, each ledgered first.
/// `own_dirs` are made opaque in the upper (see OWN_DIRS); a restore passes none, since its checkpoint
/// layer already has them. `promote` (paths relative to the topmost layer) are moved from the session's
/// copy of that layer into its upper before the mount (see `promote_into_upper`).
pub fn mount_root(ledger: &Ledger, dir: &Path, lowers: &Lowers, tmpfs_bytes: u64, own_dirs: &[&str], promote: &[PathBuf]) -> Result<Overlay> {
    let layers = lowers.layers;
    let rw = dir.join("rw");
    ledger.create_res(Resource::Mount { path: rw.clone() })?;
    std::fs::create_dir(&rw).ctx("create directory", &rw)?;
    mount(Some("drums"), &rw, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(format!("size={tmpfs_bytes},mode=0755").as_str()))
        .ctx("mount tmpfs", &rw)?;
    let (upper, work) = (rw.join("upper"), rw.join("work"));
    std::fs::create_dir(&upper).ctx("create directory", &upper)?;
    std::fs::create_dir(&work).ctx("create directory", &work)?;
    let owned_by_range = |p: &Path| -> Result<()> {
        match lowers.id_range {
            Some(r) => std::os::unix::fs::lchown(p, Some(r.base), Some(r.base)).ctx("chown", p),
            None => Ok(()),
        }
    };
    owned_by_range(&upper)?;
    for d in own_dirs {
        let p = upper.join(d);
        std::fs::create_dir_all(&p).ctx("create directory", &p)?;
        owned_by_range(&p)?;
        xattr_set(&p, c"trusted.overlay.opaque", b"y")?;
        if STICKY_DIRS.contains(d) {
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).ctx("chmod", &p)?;
        }
    }

    // Each read-only layer above the runtime layer is copied into the session's own tmpfs: siblings share
    // no layer that a tool ever writes (a checkpoint layer is the source's upper; a restore moves files
    // out of its copy, `promote`), and overlayfs refuses (ELOOP) a layer inside another one, which a
    // layer given by path could be. The runtime layer and the image are never written and are shared.
    let mut copies = vec![];
    for (i, layer) in layers.iter().enumerate() {
        let copy = rw.join(format!("layer{i}"));
        copy_tree(layer, &copy)?;
        copies.push(copy);
    }
    if let Some(top) = copies.first() {
        promote_into_upper(top, &upper, promote)?;
        if let Some(r) = lowers.id_range {
            crate::idrange::shift_tree(&upper, r)?;
        }
    }
    let merged = dir.join("root");
    ledger.create_res(Resource::Mount { path: merged.clone() })?;
    std::fs::create_dir(&merged).ctx("create directory", &merged)?;
    let mut lower_dirs: Vec<PathBuf> = copies.clone();
    if let Some(m) = lowers.mapped {
        lower_dirs.push(m.to_path_buf());
    }
    lower_dirs.push(lowers.runtime.layer.clone());
    lower_dirs.push(lowers.image.root.clone());
    if let Some(r) = lowers.id_range {
        let userns = crate::idrange::userns_fd(r)?;
        for (i, l) in lower_dirs.iter_mut().enumerate() {
            let at = dir.join(format!("lower{i}"));
            ledger.create_res(Resource::Mount { path: at.clone() })?;
            std::fs::create_dir(&at).ctx("create directory", &at)?;
            crate::idrange::idmapped_bind(l, &at, &userns)?;
            *l = at;
        }
    }
    let lower: Vec<String> = lower_dirs.iter().map(|l| escape(l)).collect();
    // redirect_dir=on: renaming a directory that comes from a lower layer (a task's directory in the
    // checkpoint layer, an image directory) fails with EXDEV without it, and this kernel's default is off.
    let data = format!("lowerdir={},upperdir={},workdir={},redirect_dir=on", lower.join(":"), escape(&upper), escape(&work));
    // The kernel takes overlay options in one page; a longer string fails with a bare EINVAL.
    if data.len() >= 4000 {
        return Err(Error::bad_input(format!("overlay options are {} bytes, over the kernel's one-page limit: fewer or shorter layers", data.len())));
    }
    mount(Some("drums-overlay"), &merged, Some("overlay"), MsFlags::empty(), Some(data.as_str()))
        .map_err(|e| Error::io(format!("mount overlay ({data})"), &merged, std::io::Error::from_raw_os_error(e as i32)))?;
    Ok(Overlay { merged, upper, work, tmpfs: rw, layers: layers.to_vec(), tmpfs_bytes, mapped: lowers.mapped.map(Path::to_path_buf), runtime: Some(lowers.runtime.clone()), image: Some(lowers.image.clone()) })
}

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

/// Move files of a layer copy into the upper, with their parent directories made in the upper with the
/// layer's modes and owners (a merged directory takes its attributes from the topmost one). These are the
/// files the checkpointed processes had open for writing: restoring them would copy each up anyway, and
/// the session would then hold it twice, in its layer copy and in its upper. A path that is not a single
/// regular file in the layer copy is left where it is (it is then copied up as before), and so is one
/// with a symbolic link anywhere on its way in either tree: the paths come from the session (what its
/// processes had open), and a directory it replaced by a link to /etc before the dump would otherwise
/// make this rename move a host file into the session.
pub fn promote_into_upper(layer: &Path, upper: &Path, rels: &[PathBuf]) -> Result<()> {
    use crate::inroot::{Links, Root};
    use std::os::unix::fs::MetadataExt;
    if rels.is_empty() {
        return Ok(());
    }
    let (from, to) = (Root::open(layer, Links::Refuse)?, Root::open(upper, Links::Refuse)?);
    'next: for rel in rels {
        if !rel.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
            return Err(Error::bad_field("write_open", format!("{} is not a plain relative path", rel.display())));
        }
        if !crate::inroot::symlink_metadata(&from, rel).is_ok_and(|m| m.is_file() && m.nlink() == 1) {
            continue;
        }
        let mut at = PathBuf::new();
        for c in rel.parent().into_iter().flat_map(|p| p.components()) {
            at.push(c);
            match crate::inroot::symlink_metadata(&to, &at) {
                Ok(m) if m.is_dir() => continue,
                Ok(_) => continue 'next,
                Err(_) => {}
            }
            let Ok(m) = crate::inroot::symlink_metadata(&from, &at) else { continue 'next };
            if !m.is_dir() {
                continue 'next;
            }
            crate::inroot::mkdir(&to, &at, m.mode(), m.uid(), m.gid())?;
        }
        crate::inroot::rename(&from, rel, &to, rel)?;
    }
    Ok(())
}

fn xattr_set(p: &Path, name: &std::ffi::CStr, value: &[u8]) -> Result<()> {
    let c = crate::proc::c_path(p)?;
    if unsafe { libc::lsetxattr(c.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) } != 0 {
        return Err(Error::io(format!("set {}", name.to_string_lossy()), p, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Where a read-only layer given by path may be: a checkpoint's `layer` or `layers/N` under the checkpoint
/// root, or a directory below the Drums layers root ($DRUMS_LAYER_DIR), named without `..` or `.`. A
/// layer is copied into every session made on it and its path reaches the overlay's mount options, so a
/// record or an option naming anything else (a host directory, another session's upper) is refused.
pub fn check_layer_path(l: &Path) -> std::result::Result<(), String> {
    use std::path::Component;
    let plain = l.is_absolute() && l.components().skip(1).all(|c| matches!(c, Component::Normal(_)));
    if !plain {
        return Err(format!("{} is not a plain absolute path (no `..`, no `.`)", l.display()));
    }
    let layers_root = crate::state::layers_root();
    if l.starts_with(&layers_root) && l != layers_root {
        return Ok(());
    }
    if let Ok(rest) = l.strip_prefix(crate::state::checkpoint_root()) {
        let parts: Vec<String> = rest.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
        let of_checkpoint = match parts.as_slice() {
            [id, layer] => layer == "layer" && crate::state::check_checkpoint_id(id).is_ok(),
            [id, layers, n] => layers == "layers" && crate::state::check_checkpoint_id(id).is_ok() && !n.is_empty() && n.len() <= 4 && n.bytes().all(|b| b.is_ascii_digit()),
            _ => false,
        };
        if of_checkpoint {
            return Ok(());
        }
    }
    Err(format!(
        "{} is neither a checkpoint's layer ({}/<id>/layer or layers/N) nor a directory below the layers root {} ($DRUMS_LAYER_DIR)",
        l.display(),
        crate::state::checkpoint_root().display(),
        layers_root.display()
    ))
}

fn check_layer(l: &Path) -> Result<()> {
    check_layer_path(l).map_err(|m| Error::bad_input(format!("--layer: {m}")))?;
    if !l.is_dir() {
        return Err(Error::bad_input(format!("layer {} is not a directory", l.display())));
    }
    Ok(())
}

/// overlayfs splits its options at `,` and `:`; a backslash escapes them.
fn escape(p: &Path) -> String {
    let s = p.to_string_lossy();
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, ',' | ':' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Unmount and delete the overlay and its tmpfs: only the mounts this session's ledger names.
pub fn remove(session: &Session) -> Result<()> {
    let ledger = Ledger::open(&session.state_dir)?;
    let mut mounts = ledger.read()?.live_mounts();
    mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for m in mounts {
        unmount_owned(&ledger, &m)?;
    }
    Ok(())
}

/// Unmount a ledgered mount point (if mounted), remove its directory and release it.
pub fn unmount_owned(ledger: &Ledger, path: &Path) -> Result<()> {
    if is_mountpoint(path) {
        umount2(path, MntFlags::empty()).ctx("unmount", path)?;
    }
    match std::fs::remove_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io("remove directory", path, e)),
    }
    ledger.release(Resource::Mount { path: path.to_path_buf() })
}

/// Whether `path` is a mount point in this mount namespace (per /proc/self/mountinfo).
pub fn is_mountpoint(path: &Path) -> bool {
    crate::mountinfo::read().is_ok_and(|ms| ms.iter().any(|m| m.mount_point == path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpath(p: &Path) -> std::ffi::CString {
        std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap()
    }

    fn mknod(p: &Path, kind: libc::mode_t, major: u32, minor: u32) {
        assert_eq!(unsafe { libc::mknod(cpath(p).as_ptr(), kind | 0o644, libc::makedev(major, minor)) }, 0, "mknod needs root");
    }

    #[test]
    fn promoted_files_move_with_their_parents_modes_and_hostile_paths_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let t = std::env::temp_dir().join(format!("drums-promote-{}", std::process::id()));
        let (layer, upper) = (t.join("layer"), t.join("upper"));
        std::fs::create_dir_all(layer.join("a/b")).unwrap();
        std::fs::create_dir_all(&upper).unwrap();
        std::fs::set_permissions(layer.join("a"), std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(layer.join("a/b/db"), b"x").unwrap();
        std::fs::write(layer.join("a/kept"), b"y").unwrap();
        promote_into_upper(&layer, &upper, &[PathBuf::from("a/b/db"), PathBuf::from("a/missing")]).unwrap();
        assert!(!layer.join("a/b/db").exists() && std::fs::read(upper.join("a/b/db")).unwrap() == b"x");
        assert_eq!(std::fs::metadata(upper.join("a")).unwrap().permissions().mode() & 0o7777, 0o700, "a merged directory takes the upper's mode");
        assert!(layer.join("a/kept").exists() && !upper.join("a/kept").exists());
        for bad in ["../x", "/etc/passwd", "a/../../x"] {
            assert!(promote_into_upper(&layer, &upper, &[PathBuf::from(bad)]).is_err(), "{bad}");
        }
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn a_symlinked_component_is_never_promoted_through() {
        let t = std::env::temp_dir().join(format!("drums-promote-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        let (layer, upper, host) = (t.join("layer"), t.join("upper"), t.join("host-etc"));
        for d in [&layer, &upper, &host] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(host.join("shadow"), b"host secret").unwrap();
        // The session listed /a/shadow as open for writing, then replaced /a by a link to a host directory.
        std::os::unix::fs::symlink(&host, layer.join("a")).unwrap();
        std::fs::create_dir_all(layer.join("b")).unwrap();
        std::os::unix::fs::symlink(&host, layer.join("b/c")).unwrap();
        promote_into_upper(&layer, &upper, &[PathBuf::from("a/shadow"), PathBuf::from("b/c/shadow")]).unwrap();
        assert_eq!(std::fs::read(host.join("shadow")).unwrap(), b"host secret", "the host's file stays where it is");
        assert!(std::fs::read_dir(&upper).unwrap().next().is_none(), "nothing reached the upper");
        // A link in the upper is no way out either.
        std::fs::remove_file(layer.join("a")).unwrap();
        std::fs::create_dir_all(layer.join("a")).unwrap();
        std::fs::write(layer.join("a/db"), b"x").unwrap();
        std::os::unix::fs::symlink(&host, upper.join("a")).unwrap();
        promote_into_upper(&layer, &upper, &[PathBuf::from("a/db")]).unwrap();
        assert!(!host.join("db").exists() && layer.join("a/db").exists(), "left in the layer");
        std::fs::remove_dir_all(&t).unwrap();
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

    #[test]
    fn layers_are_only_checkpoint_layers_or_below_the_layers_root() {
        let ck = crate::state::checkpoint_root();
        let layers = crate::state::layers_root();
        for ok in [ck.join("c-0123abcd/layer"), ck.join("c-0123abcd/layers/0"), ck.join("c-0123abcd/layers/12"), layers.join("office"), layers.join("a/b")] {
            assert!(check_layer_path(&ok).is_ok(), "{}", ok.display());
        }
        for bad in [
            PathBuf::from("/etc"),
            PathBuf::from("relative"),
            layers.clone(),
            layers.join("../../../etc"),
            ck.join("c-0123abcd/images"),
            ck.join("d-0123abcd/layer"),
            ck.join("c-0123abcd/layers/x"),
            ck.join("c-0123abcd/layer/sub"),
            PathBuf::from("/run/drums/sessions/d-0123abcd/rw/upper"),
        ] {
            assert!(check_layer_path(&bad).is_err(), "{}", bad.display());
        }
    }

    #[test]
    fn escapes_separators() {
        assert_eq!(escape(Path::new("/a,b:c\\d")), "/a\\,b\\:c\\\\d");
    }
}
