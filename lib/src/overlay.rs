//! The session's root file system: overlayfs with a per-session upper on a host-visible tmpfs, over
//! read-only layers (a restore's checkpoint layer, layers given with `--layer`), over the runtime layer
//! (Drums' programs that run inside sessions, `runtime`), over the session's root image (`image`). The
//! host's `/` is never a layer.

use crate::error::{Error, IoContext, Result};
use crate::ledger::{Ledger, Resource};
use crate::record::{Overlay, Session};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::path::{Path, PathBuf};

pub struct OverlayOptions {
    /// The root image: a name (its current image) or an image directory.
    pub image: String,
    /// Read-only layers above the runtime layer and the image, topmost first.
    pub layers: Vec<PathBuf>,
    pub tmpfs_bytes: u64,
    pub ttl_s: Option<u64>,
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
    let overlay = mount_root(&ledger, &dir, &Lowers { layers: &opts.layers, mapped: None, runtime: &runtime, image: &image }, opts.tmpfs_bytes, OWN_DIRS, &[])?;
    Ok(Session {
        drums: crate::record::VERSION,
        kind: crate::record::SESSION.into(),
        id,
        state_dir: dir,
        created_at: crate::state::now(),
        owner,
        ttl_s: opts.ttl_s,
        overlay: Some(overlay),
        ns: None,
        net: None,
        desktop: None,
        ready: None,
        extra: Default::default(),
    })
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
    for d in own_dirs {
        let p = upper.join(d);
        std::fs::create_dir_all(&p).ctx("create directory", &p)?;
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
    }
    let merged = dir.join("root");
    ledger.create_res(Resource::Mount { path: merged.clone() })?;
    std::fs::create_dir(&merged).ctx("create directory", &merged)?;
    let mut lower: Vec<String> = copies.iter().map(|l| escape(l)).collect();
    if let Some(m) = lowers.mapped {
        lower.push(escape(m));
    }
    lower.push(escape(&lowers.runtime.layer));
    lower.push(escape(&lowers.image.root));
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

/// Copy a layer with everything overlayfs cares about: owners, modes, times, whiteouts (0:0 character
/// devices) and other device nodes and FIFOs (not sockets), symlinks, hard links, and extended attributes (`trusted.overlay.*`
/// among them; this needs root). In-process: a restore copies two layers, and running `cp -a` for each
/// cost a few milliseconds of process start on top of the copying.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    let mut links = std::collections::HashMap::new();
    copy_entry(from, to, &mut links)
}

fn cpath(p: &Path) -> Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| Error::bad_input(format!("{}: path has a NUL", p.display())))
}

fn check(rc: libc::c_int, what: &str, p: &Path) -> Result<()> {
    if rc != 0 {
        return Err(Error::io(what, p, std::io::Error::last_os_error()));
    }
    Ok(())
}

fn copy_entry(from: &Path, to: &Path, links: &mut std::collections::HashMap<(u64, u64), PathBuf>) -> Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::symlink_metadata(from).ctx("stat", from)?;
    let t = m.file_type();
    let (cf, ct) = (cpath(from)?, cpath(to)?);
    if !t.is_dir() && m.nlink() > 1 {
        if let Some(first) = links.get(&(m.dev(), m.ino())) {
            return std::fs::hard_link(first, to).ctx("link", to);
        }
        links.insert((m.dev(), m.ino()), to.to_path_buf());
    }
    if t.is_dir() {
        std::fs::create_dir(to).ctx("create directory", to)?;
        for e in std::fs::read_dir(from).ctx("read directory", from)? {
            let e = e.ctx("read directory", from)?;
            copy_entry(&e.path(), &to.join(e.file_name()), links)?;
        }
    } else if t.is_symlink() {
        let target = std::fs::read_link(from).ctx("read link", from)?;
        std::os::unix::fs::symlink(&target, to).ctx("symlink", to)?;
    } else if t.is_file() {
        std::fs::copy(from, to).ctx("copy", to)?;
    } else if t.is_socket() {
        // A socket's name is no socket: nothing listens on a copy, and CRIU binds the restored sockets
        // to their paths itself (an existing name would make that bind fail).
        return Ok(());
    } else if t.is_char_device() || t.is_block_device() || t.is_fifo() {
        check(unsafe { libc::mknod(ct.as_ptr(), m.mode(), m.rdev()) }, "mknod", to)?;
    } else {
        return Err(Error::failed(format!("{}: a file of a kind a layer cannot hold", from.display())));
    }
    check(unsafe { libc::lchown(ct.as_ptr(), m.uid(), m.gid()) }, "chown", to)?;
    if !t.is_symlink() {
        // After chown, which clears set-id bits.
        check(unsafe { libc::chmod(ct.as_ptr(), m.mode() & 0o7777) }, "chmod", to)?;
    }
    copy_xattrs(&cf, &ct, to)?;
    let times = [
        libc::timespec { tv_sec: m.atime(), tv_nsec: m.atime_nsec() },
        libc::timespec { tv_sec: m.mtime(), tv_nsec: m.mtime_nsec() },
    ];
    check(unsafe { libc::utimensat(libc::AT_FDCWD, ct.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) }, "set times", to)
}

fn copy_xattrs(from: &std::ffi::CStr, to: &std::ffi::CStr, to_path: &Path) -> Result<()> {
    let n = unsafe { libc::llistxattr(from.as_ptr(), std::ptr::null_mut(), 0) };
    if n <= 0 {
        return Ok(());
    }
    let mut names = vec![0u8; n as usize];
    let n = unsafe { libc::llistxattr(from.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n < 0 {
        return Err(Error::io("list extended attributes", to_path, std::io::Error::last_os_error()));
    }
    for name in names[..n as usize].split(|b| *b == 0).filter(|x| !x.is_empty()) {
        let cname = std::ffi::CString::new(name).expect("split at NUL");
        let len = unsafe { libc::lgetxattr(from.as_ptr(), cname.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            return Err(Error::io(format!("read attribute {}", cname.to_string_lossy()), to_path, std::io::Error::last_os_error()));
        }
        let mut value = vec![0u8; len as usize];
        let len = unsafe { libc::lgetxattr(from.as_ptr(), cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if len < 0 || unsafe { libc::lsetxattr(to.as_ptr(), cname.as_ptr(), value.as_ptr().cast(), len as usize, 0) } != 0 {
            return Err(Error::io(format!("copy attribute {}", cname.to_string_lossy()), to_path, std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// Move files of a layer copy into the upper, with their parent directories made in the upper with the
/// layer's modes and owners (a merged directory takes its attributes from the topmost one). These are the
/// files the checkpointed processes had open for writing: restoring them would copy each up anyway, and
/// the session would then hold it twice, in its layer copy and in its upper. A path that is not a single
/// regular file in the layer copy is left where it is (it is then copied up as before).
pub fn promote_into_upper(layer: &Path, upper: &Path, rels: &[PathBuf]) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for rel in rels {
        if !rel.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
            return Err(Error::bad_field("write_open", format!("{} is not a plain relative path", rel.display())));
        }
        let src = layer.join(rel);
        if !std::fs::symlink_metadata(&src).is_ok_and(|m| m.is_file() && m.nlink() == 1) {
            continue;
        }
        let mut at = PathBuf::new();
        for c in rel.parent().into_iter().flat_map(|p| p.components()) {
            at.push(c);
            let (ours, theirs) = (upper.join(&at), layer.join(&at));
            if std::fs::symlink_metadata(&ours).is_ok() {
                continue;
            }
            let m = std::fs::symlink_metadata(&theirs).ctx("stat", &theirs)?;
            if !m.is_dir() {
                return Err(Error::failed(format!("{}: not a directory in the layer", theirs.display())));
            }
            std::fs::create_dir(&ours).ctx("create directory", &ours)?;
            std::os::unix::fs::lchown(&ours, Some(m.uid()), Some(m.gid())).ctx("chown", &ours)?;
            std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(m.mode() & 0o7777)).ctx("chmod", &ours)?;
        }
        let dst = upper.join(rel);
        std::fs::rename(&src, &dst).ctx("move into the upper", &dst)?;
    }
    Ok(())
}

fn xattr_set(p: &Path, name: &std::ffi::CStr, value: &[u8]) -> Result<()> {
    let c = cpath(p)?;
    if unsafe { libc::lsetxattr(c.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) } != 0 {
        return Err(Error::io(format!("set {}", name.to_string_lossy()), p, std::io::Error::last_os_error()));
    }
    Ok(())
}

fn check_layer(l: &Path) -> Result<()> {
    if !l.is_absolute() {
        return Err(Error::bad_input(format!("layer {} is not an absolute path", l.display())));
    }
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
    let mut mounts: Vec<PathBuf> = ledger
        .read()?
        .live()
        .into_iter()
        .filter_map(|r| match r {
            Resource::Mount { path } => Some(path),
            _ => None,
        })
        .collect();
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
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = path.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4).map(crate::mountinfo::unescape).as_deref() == Some(&*want))
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn copies_a_layer_with_whiteouts_links_modes_and_attributes() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let t = std::env::temp_dir().join(format!("drums-copy-{}", std::process::id()));
        let (from, to) = (t.join("from"), t.join("to"));
        std::fs::create_dir_all(from.join("d/e")).unwrap();
        std::fs::write(from.join("d/f"), b"data").unwrap();
        std::os::unix::fs::lchown(from.join("d/f"), Some(1), Some(2)).unwrap();
        // After the chown, which clears set-id bits.
        std::fs::set_permissions(from.join("d/f"), std::fs::Permissions::from_mode(0o4751)).unwrap();
        std::fs::hard_link(from.join("d/f"), from.join("d/g")).unwrap();
        std::os::unix::fs::symlink("f", from.join("d/l")).unwrap();
        let wh = cpath(&from.join("d/gone")).unwrap();
        assert_eq!(unsafe { libc::mknod(wh.as_ptr(), libc::S_IFCHR, 0) }, 0, "mknod needs root");
        xattr_set(&from.join("d/e"), c"trusted.overlay.opaque", b"y").unwrap();
        copy_tree(&from, &to).unwrap();
        let f = std::fs::metadata(to.join("d/f")).unwrap();
        assert_eq!((std::fs::read(to.join("d/f")).unwrap(), f.mode() & 0o7777, f.uid(), f.gid()), (b"data".to_vec(), 0o4751, 1, 2));
        assert_eq!(std::fs::metadata(to.join("d/g")).unwrap().ino(), f.ino(), "hard links stay links");
        assert_eq!(std::fs::read_link(to.join("d/l")).unwrap(), Path::new("f"));
        let w = std::fs::symlink_metadata(to.join("d/gone")).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_char_device(&w.file_type()) && w.rdev() == 0, "the whiteout");
        let mut v = [0u8; 4];
        let n = unsafe { libc::lgetxattr(cpath(&to.join("d/e")).unwrap().as_ptr(), c"trusted.overlay.opaque".as_ptr(), v.as_mut_ptr().cast(), 4) };
        assert_eq!(&v[..n.max(0) as usize], b"y", "the opaque mark");
        assert_eq!(std::fs::metadata(to.join("d/f")).unwrap().mtime(), std::fs::metadata(from.join("d/f")).unwrap().mtime());
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn escapes_separators() {
        assert_eq!(escape(Path::new("/a,b:c\\d")), "/a\\,b\\:c\\\\d");
    }
}
