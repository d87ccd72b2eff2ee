//! The session's root file system: overlayfs with a per-session upper on a host-visible tmpfs, over
//! read-only layers (a restore's checkpoint layer, layers given with `--layer`), over the runtime layer
//! (Drums' programs that run inside sessions, `runtime`), over the session's root image (`image`). The
//! host's `/` is never a layer.

use crate::error::{Error, IoContext, Result};
use crate::ledger::{Ledger, Resource};
use crate::record::{Overlay, Session};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use std::path::{Path, PathBuf};

pub mod copy;

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
    let lowers = Lowers { layers: &opts.layers, layer_mount: LayerMount::Copied, mapped: None, runtime: &runtime, image: &image, id_range: id_range.as_ref() };
    let overlay = mount_root(&ledger, &dir, &lowers, opts.tmpfs_bytes, OWN_DIRS)?;
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
/// tmpfs or mounted in place, `LayerMount`), then the runtime layer and the root image (shared, on the
/// host's disk), topmost first.
pub struct Lowers<'a> {
    pub layers: &'a [PathBuf],
    pub layer_mount: LayerMount,
    /// A restore's mapped files (crate::mapped): the checkpoint's layer of them.
    pub mapped: Option<&'a Path>,
    pub runtime: &'a crate::runtime::RuntimeRef,
    pub image: &'a crate::image::ImageRef,
    /// A session in its own user namespace: the lowers are mounted through idmapped mounts of this range
    /// at `<dir>/lowerN` (ledgered first), and the upper and its own directories belong to the range's
    /// root. On disk every layer stays owned by host root; nothing is copied or chowned for this.
    pub id_range: Option<&'a crate::record::IdRange>,
}

/// How the read-only layers above the runtime layer reach the overlay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerMount {
    /// Copied into the session's tmpfs (`<dir>/rw/layerN`) and mounted from the copy: layers given by
    /// path (`drums-overlay create --layer`), which overlayfs would refuse (ELOOP) if one lay inside
    /// another, and which their owner may change while sessions run on them.
    Copied,
    /// Mounted where they are, read-only and shared by every session on them: a restore's checkpoint
    /// layers, which nothing writes once drums-ckpt has made them. A restored process's first write to a
    /// file (CRIU reopening the files the source had open for writing among them) copies it up into the
    /// sibling's upper. Copying them instead cost every restore about 20 ms (the copy and moving the
    /// written files into the upper) and every sibling its own copy of the layer in memory.
    InPlace,
}

/// Mount a tmpfs at `<dir>/rw` (upper and work) and the overlay at `<dir>/root`, each ledgered first.
/// `own_dirs` are made opaque in the upper (see OWN_DIRS); a restore passes none, since its checkpoint
/// layer already has them.
pub fn mount_root(ledger: &Ledger, dir: &Path, lowers: &Lowers, tmpfs_bytes: u64, own_dirs: &[&str]) -> Result<Overlay> {
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

    // The runtime layer and the image are never written and are shared; the layers above them are
    // copied or not as `LayerMount` says.
    let mut lower_dirs: Vec<PathBuf> = match lowers.layer_mount {
        LayerMount::InPlace => layers.to_vec(),
        LayerMount::Copied => {
            let mut copies = vec![];
            for (i, layer) in layers.iter().enumerate() {
                let copy = rw.join(format!("layer{i}"));
                copy::copy_tree(layer, &copy)?;
                copies.push(copy);
            }
            copies
        }
    };
    let merged = dir.join("root");
    ledger.create_res(Resource::Mount { path: merged.clone() })?;
    std::fs::create_dir(&merged).ctx("create directory", &merged)?;
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
