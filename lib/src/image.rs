//! Session root images: complete, read-only Debian trees (pipelines/image.sh builds them) that
//! drums-overlay mounts as the lowest layer of every session, so that nothing of the host's `/` is ever a
//! layer. An image lives in `<images root>/<name>-<first 12 hex of its digest>/`, with the tree in `root/`
//! and its record in `image.json`; the link `<images root>/<name>` names the current image of that name.
//! Images are never changed in place and never copied per session: every session of an image shares its
//! files (and their page cache) as a read-only lower layer.

use crate::error::{Error, IoContext, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
pub use crate::record::layers::ImageRef;

/// The image a session gets when none is named.
pub const DEFAULT_IMAGE: &str = "desktop";
pub const RECORD_FILE: &str = "image.json";
pub const IMAGE: &str = "image";

/// `$DRUMS_IMAGE_DIR`, default /var/lib/drums/images.
pub fn images_root() -> PathBuf {
    std::env::var_os("DRUMS_IMAGE_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/lib/drums/images"))
}


#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Package {
    pub name: String,
    pub version: String,
}

/// `image.json`, written by pipelines/image.sh (docs/record.md, "Root images").
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageRecord {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub dir: PathBuf,
    pub root: PathBuf,
    pub digest: String,
    pub files: u64,
    pub bytes: u64,
    pub suite: String,
    /// Digest of what the image was made from (packages asked for, pip set, the build script): the
    /// build script's test of whether a build is needed.
    pub inputs: String,
    pub packages_asked: Vec<String>,
    pub pip: Vec<String>,
    /// Every package installed in the tree, with its version.
    pub packages: Vec<Package>,
    pub built_at: f64,
    pub build_s: f64,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ImageRecord {
    pub fn reference(&self) -> ImageRef {
        ImageRef { name: self.name.clone(), dir: self.dir.clone(), root: self.root.clone(), digest: self.digest.clone() }
    }
    pub fn version_of(&self, package: &str) -> Option<&str> {
        self.packages.iter().find(|p| p.name == package).map(|p| p.version.as_str())
    }
}

pub fn check_name(name: &str) -> std::result::Result<(), String> {
    let b = name.as_bytes();
    let ok = !b.is_empty() && b.len() <= 32 && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit()) && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!("`{name}` is not an image name ([a-z0-9][a-z0-9-]*, at most 32)"))
    }
}

fn check_digest(d: &str) -> std::result::Result<(), String> {
    match d.strip_prefix("sha256:") {
        Some(h) if h.len() == 64 && h.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()) => Ok(()),
        _ => Err(format!("`{d}` is not a digest (sha256: and 64 hex digits)")),
    }
}

impl ImageRef {
    /// Refuse a reference that does not name an image directory of the images root by the layout every
    /// image has (`<root>/<name>-<12 hex of digest>/root`): the path fields of a record reach mount(2).
    pub fn validate(&self, field: &str) -> Result<()> {
        check_name(&self.name).map_err(|m| Error::bad_field(format!("{field}.name"), m))?;
        check_digest(&self.digest).map_err(|m| Error::bad_field(format!("{field}.digest"), m))?;
        let expected = images_root().join(format!("{}-{}", self.name, &self.digest[7..19]));
        if self.dir != expected {
            return Err(Error::bad_field(format!("{field}.dir"), format!("{} is not {} (where image {} with that digest lives)", self.dir.display(), expected.display(), self.name)));
        }
        if self.root != self.dir.join("root") {
            return Err(Error::bad_field(format!("{field}.root"), format!("{} is not {}/root", self.root.display(), self.dir.display())));
        }
        Ok(())
    }
}

/// The image a name or directory stands for, by its record. A name is looked up through the link
/// `<images root>/<name>`, an absolute path must be an image directory of the images root.
pub fn resolve(spec: &str) -> Result<ImageRecord> {
    let root = images_root();
    let given = if spec.starts_with('/') {
        PathBuf::from(spec)
    } else {
        check_name(spec).map_err(|m| Error::bad_input(format!("--image: {m}")))?;
        root.join(spec)
    };
    let dir = std::fs::canonicalize(&given).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::env(format!("image {spec}: {} does not exist (pipelines/image.sh builds images; pipelines/setup.sh the default one)", given.display()))
        } else {
            Error::io("resolve image", &given, e)
        }
    })?;
    let canonical_root = std::fs::canonicalize(&root).ctx("resolve", &root)?;
    if dir.parent() != Some(canonical_root.as_path()) {
        return Err(Error::bad_input(format!("image {spec}: {} is not an image directory of {}", dir.display(), root.display())));
    }
    // Records name the directory under the root as configured, not as canonicalized.
    let dir = root.join(dir.file_name().expect("a directory below the root has a name"));
    let rec = load(&dir)?;
    Ok(rec)
}

/// Read and check the record of the image in `dir`.
pub fn load(dir: &Path) -> Result<ImageRecord> {
    let path = dir.join(RECORD_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::bad_input(format!("{}: {e} (not an image built by pipelines/image.sh?)", path.display())))?;
    let v: Value = serde_json::from_str(text.trim()).map_err(|e| Error::bad_input(format!("{}: malformed JSON: {e}", path.display())))?;
    let rec: ImageRecord = crate::record::from_value(v)?;
    if rec.kind != IMAGE || rec.drums != crate::record::VERSION {
        return Err(Error::bad_input(format!("{}: not a version {} image record", path.display(), crate::record::VERSION)));
    }
    rec.reference().validate("image")?;
    if rec.dir != dir {
        return Err(Error::bad_input(format!("{}: the record names {}, not its own directory", path.display(), rec.dir.display())));
    }
    if !rec.root.is_dir() {
        return Err(Error::bad_input(format!("image {}: its tree {} is missing", rec.name, rec.root.display())));
    }
    Ok(rec)
}

/// A restore's check of the image its checkpoint was taken on: the image is there and its record has
/// the same digest. Both failures are bad input (exit 3): the checkpoint cannot be restored here.
pub fn check(r: &ImageRef, field: &str) -> Result<ImageRecord> {
    r.validate(field)?;
    let rec = load(&r.dir).map_err(|e| Error::bad_field(field, format!("image {} ({}) is not usable: {e}", r.name, r.digest)))?;
    if rec.digest != r.digest {
        return Err(Error::bad_field(field, format!("image {} in {} has digest {}, not {} (it was changed after the checkpoint was taken)", r.name, r.dir.display(), rec.digest, r.digest)));
    }
    Ok(rec)
}

/// The digest of a tree, and what it covered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TreeDigest {
    pub digest: String,
    /// Entries of every kind, the top directory excluded.
    pub files: u64,
    /// Bytes of regular files.
    pub bytes: u64,
}

crate::record_type!(DigestType = "image_digest");

/// What `drums-overlay image digest` prints: a tree's digest as a record.
#[derive(Debug, Serialize, Deserialize)]
pub struct DigestReport {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: DigestType,
    pub dir: PathBuf,
    #[serde(flatten)]
    pub tree: TreeDigest,
}

/// `digest_tree` of `dir`, as the record `drums-overlay image digest` prints.
pub fn digest_report(dir: &Path) -> Result<DigestReport> {
    Ok(DigestReport { drums: crate::record::VERSION, kind: DigestType::Tag, dir: dir.to_path_buf(), tree: digest_tree(dir)? })
}

/// The content digest of a tree: SHA-256 over every entry in byte order of its path, each entry as its
/// path, kind, mode, owner and group, and its content (the SHA-256 of a regular file's bytes, a link's
/// target, a device's number) and extended attributes. Times are left out: two builds of the same
/// packages give the same digest.
pub fn digest_tree(top: &Path) -> Result<TreeDigest> {
    let mut h = Sha256::new();
    let mut out = TreeDigest { digest: String::new(), files: 0, bytes: 0 };
    walk(top, Path::new(""), &mut h, &mut out)?;
    out.digest = format!("sha256:{}", hex(&h.finalize()));
    Ok(out)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn walk(top: &Path, rel: &Path, h: &mut Sha256, out: &mut TreeDigest) -> Result<()> {
    let dir = top.join(rel);
    let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(&dir).ctx("read directory", &dir)?.map(|e| e.map(|e| e.file_name())).collect::<std::io::Result<_>>().ctx("read directory", &dir)?;
    names.sort_by(|a, b| a.as_encoded_bytes().cmp(b.as_encoded_bytes()));
    for name in names {
        let r = rel.join(&name);
        let p = top.join(&r);
        let m = std::fs::symlink_metadata(&p).ctx("stat", &p)?;
        let t = m.file_type();
        out.files += 1;
        h.update(r.as_os_str().as_encoded_bytes());
        h.update([0]);
        h.update(format!("{:o} {} {}\0", m.mode(), m.uid(), m.gid()).as_bytes());
        if t.is_file() {
            let mut f = std::fs::File::open(&p).ctx("open", &p)?;
            let mut fh = Sha256::new();
            std::io::copy(&mut f, &mut fh).ctx("read", &p)?;
            h.update(fh.finalize());
            out.bytes += m.len();
        } else if t.is_symlink() {
            h.update(std::fs::read_link(&p).ctx("read link", &p)?.as_os_str().as_encoded_bytes());
        } else if t.is_char_device() || t.is_block_device() {
            h.update(m.rdev().to_le_bytes());
        }
        h.update([0]);
        for (k, v) in xattrs(&p)? {
            h.update(&k);
            h.update([b'=']);
            h.update(&v);
            h.update([0]);
        }
        h.update(b"\n");
        if t.is_dir() {
            walk(top, &r, h, out)?;
        }
    }
    Ok(())
}

/// Extended attributes of `p` (not followed), sorted by name.
fn xattrs(p: &Path) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let c = crate::proc::c_path(p)?;
    let n = unsafe { libc::llistxattr(c.as_ptr(), std::ptr::null_mut(), 0) };
    if n <= 0 {
        return Ok(vec![]);
    }
    let mut names = vec![0u8; n as usize];
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n < 0 {
        return Err(Error::io("list extended attributes", p, std::io::Error::last_os_error()));
    }
    let mut out = vec![];
    for name in names[..n as usize].split(|b| *b == 0).filter(|x| !x.is_empty()) {
        let cname = std::ffi::CString::new(name).expect("split at NUL");
        let len = unsafe { libc::lgetxattr(c.as_ptr(), cname.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            return Err(Error::io(format!("read attribute {}", cname.to_string_lossy()), p, std::io::Error::last_os_error()));
        }
        let mut value = vec![0u8; len as usize];
        let len = unsafe { libc::lgetxattr(c.as_ptr(), cname.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if len < 0 {
            return Err(Error::io(format!("read attribute {}", cname.to_string_lossy()), p, std::io::Error::last_os_error()));
        }
        value.truncate(len as usize);
        out.push((name.to_vec(), value));
    }
    out.sort();
    Ok(out)
}

/// Held while a tool resolves an image (or runtime layer) and mounts it (shared), or removes unused ones
/// (exclusive): a removal never takes an image from under a session being made.
pub struct UseLock(#[allow(dead_code)] crate::flock::Flock<std::fs::File>);

pub fn lock(exclusive: bool) -> Result<UseLock> {
    let root = crate::state::private_root(&images_root())?;
    let path = root.join(".lock");
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path).ctx("open", &path)?;
    let mode = if exclusive { crate::flock::Mode::Exclusive } else { crate::flock::Mode::Shared };
    Ok(UseLock(crate::flock::Flock::wait(f, &path, mode)?))
}

/// Who uses the read-only lowers on this machine: each live overlay mount (by its mount point) with the
/// options that list its layers, and each checkpoint record with the image and runtime layer it names.
pub struct Users {
    mounts: Vec<(String, String)>,
    checkpoints: Vec<(String, Option<ImageRef>, Option<crate::runtime::RuntimeRef>)>,
    /// Checkpoint directories whose record could not be read: they may use anything.
    pub unreadable: Vec<PathBuf>,
}

impl Users {
    pub fn scan() -> Users {
        let mounts = crate::mountinfo::read()
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.fstype == "overlay")
            .map(|m| (m.mount_point.to_string_lossy().into_owned(), m.super_options))
            .collect();
        let mut checkpoints = vec![];
        let mut unreadable = vec![];
        for e in std::fs::read_dir(crate::state::checkpoint_root()).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if crate::state::check_checkpoint_id(&name).is_err() {
                continue;
            }
            match crate::session_io::load_checkpoint(&name) {
                Ok(c) => checkpoints.push((name, c.image, c.runtime)),
                Err(_) => unreadable.push(e.path()),
            }
        }
        Users { mounts, checkpoints, unreadable }
    }

    /// What uses the image in `dir` or the runtime layer in `dir`: mount points, and checkpoints (those
    /// of this checkpoint root, and any whose reference in `dir/refs` still holds).
    pub fn of(&self, dir: &Path) -> Vec<String> {
        let layer_paths = [dir.join("root"), dir.join("layer")];
        let mut out: Vec<String> = self
            .mounts
            .iter()
            .filter(|(_, opts)| layer_paths.iter().any(|p| names_layer(opts, p)))
            .map(|(point, _)| format!("mount {point}"))
            .collect();
        for (id, image, runtime) in &self.checkpoints {
            if image.as_ref().is_some_and(|i| i.dir == dir) || runtime.as_ref().is_some_and(|r| r.dir == dir) {
                out.push(format!("checkpoint {id}"));
            }
        }
        for (id, at) in refs_in_use(dir) {
            let line = format!("checkpoint {id}");
            if !out.contains(&line) {
                out.push(format!("{line} ({})", at.display()));
            }
        }
        out
    }
}

const REFS_DIR: &str = "refs";

/// Note in the image or runtime layer directory `dir` that checkpoint `id`, in `checkpoint_dir`, uses
/// it: a checkpoint under another checkpoint root than the one a prune looks at still keeps it.
pub fn add_ref(dir: &Path, id: &str, checkpoint_dir: &Path) -> Result<()> {
    let refs = dir.join(REFS_DIR);
    std::fs::create_dir_all(&refs).ctx("create directory", &refs)?;
    let p = refs.join(id);
    std::fs::write(&p, checkpoint_dir.as_os_str().as_encoded_bytes()).ctx("write", &p)
}

/// `add_ref` for a copy of a checkpoint arriving from another node (drums-ckpt import): a reference that
/// already names a live copy of the same checkpoint elsewhere on this node is left, since that copy keeps
/// the image in use too and is removed independently of this one.
pub fn add_ref_keeping(dir: &Path, id: &str, checkpoint_dir: &Path) -> Result<()> {
    if let Ok(b) = std::fs::read(dir.join(REFS_DIR).join(id)) {
        let at = PathBuf::from(String::from_utf8_lossy(&b).into_owned());
        if at != checkpoint_dir && at.join(crate::session_io::CHECKPOINT_FILE).is_file() {
            return Ok(());
        }
    }
    add_ref(dir, id, checkpoint_dir)
}

/// The references in `dir/refs` whose checkpoint is still there and still names `dir`.
fn refs_in_use(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir.join(REFS_DIR)).into_iter().flatten().flatten() {
        let id = e.file_name().to_string_lossy().into_owned();
        let Ok(at) = std::fs::read(e.path()).map(|b| PathBuf::from(String::from_utf8_lossy(&b).into_owned())) else { continue };
        let names_dir = std::fs::read_to_string(at.join(crate::session_io::CHECKPOINT_FILE)).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok()).is_some_and(|c| {
            let d = dir.to_string_lossy();
            c["image"]["dir"].as_str() == Some(&d) || c["runtime"]["dir"].as_str() == Some(&d)
        });
        // A checkpoint being made is not in place yet (`<id>.partial`): it uses what it names too.
        let partial = at.with_file_name(format!("{id}.partial"));
        if names_dir || partial.is_dir() {
            out.push((id, at));
        }
    }
    out
}

/// Whether a mount's options (`lowerdir=a:b:c,...`) name `layer` as a whole layer.
fn names_layer(opts: &str, layer: &Path) -> bool {
    let want = layer.to_string_lossy();
    opts.match_indices(want.as_ref()).any(|(i, _)| {
        let after = opts.as_bytes().get(i + want.len()).copied();
        let before = i.checked_sub(1).and_then(|b| opts.as_bytes().get(b).copied());
        matches!(before, Some(b'=' | b':' | b',')) && matches!(after, None | Some(b':' | b',' | b' '))
    })
}

/// The image directories of the images root (`<name>-<12 hex>` holding an image.json), sorted.
pub fn list_dirs() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(images_root())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.rsplit_once('-').is_some_and(|(name, h)| check_name(name).is_ok() && h.len() == 12 && h.bytes().all(|c| c.is_ascii_hexdigit()))
        })
        .map(|e| e.path())
        .filter(|p| p.join(RECORD_FILE).is_file())
        .collect();
    out.sort();
    out
}

/// The image directories that a name link points at.
pub fn current_dirs() -> Vec<PathBuf> {
    let root = images_root();
    std::fs::read_dir(&root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()) && check_name(&e.file_name().to_string_lossy()).is_ok())
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|t| t.file_name().map(|n| root.join(n)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_covers_content_modes_links_and_attributes_but_not_times() {
        let t = std::env::temp_dir().join(format!("drums-digest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(t.join("a/b")).unwrap();
        std::fs::write(t.join("a/f"), b"one").unwrap();
        std::os::unix::fs::symlink("f", t.join("a/l")).unwrap();
        let d0 = digest_tree(&t).unwrap();
        assert_eq!((d0.files, d0.bytes), (4, 3));
        assert!(check_digest(&d0.digest).is_ok(), "{}", d0.digest);
        let f = std::fs::File::options().write(true).open(t.join("a/f")).unwrap();
        f.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(digest_tree(&t).unwrap(), d0, "times are not content");
        std::fs::write(t.join("a/f"), b"two").unwrap();
        let d1 = digest_tree(&t).unwrap();
        assert_ne!(d1.digest, d0.digest, "content");
        std::fs::set_permissions(t.join("a/f"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let d2 = digest_tree(&t).unwrap();
        assert_ne!(d2.digest, d1.digest, "mode");
        std::fs::remove_file(t.join("a/l")).unwrap();
        std::os::unix::fs::symlink("g", t.join("a/l")).unwrap();
        let d3 = digest_tree(&t).unwrap();
        assert_ne!(d3.digest, d2.digest, "link target");
        std::fs::rename(t.join("a/b"), t.join("a/c")).unwrap();
        assert_ne!(digest_tree(&t).unwrap().digest, d3.digest, "names");
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn references_must_name_an_image_directory_by_its_layout() {
        let d = format!("sha256:{}", "ab".repeat(32));
        let dir = images_root().join("desktop-abababababab");
        let good = ImageRef { name: "desktop".into(), dir: dir.clone(), root: dir.join("root"), digest: d.clone() };
        assert!(good.validate("image").is_ok());
        let bad = |r: ImageRef| r.validate("image").is_err();
        assert!(bad(ImageRef { dir: "/".into(), root: "/root".into(), ..good.clone() }), "the host's /");
        assert!(bad(ImageRef { root: "/".into(), ..good.clone() }), "root outside the directory");
        assert!(bad(ImageRef { dir: images_root().join("desktop-abababababab/../x"), ..good.clone() }), "..");
        assert!(bad(ImageRef { name: "x;rm".into(), ..good.clone() }), "name");
        assert!(bad(ImageRef { digest: "sha256:zz".into(), ..good.clone() }), "digest");
        assert!(bad(ImageRef { digest: format!("sha256:{}", "cd".repeat(32)), ..good }), "digest not the directory's");
    }

    #[test]
    fn finds_a_layer_among_a_mounts_layers_only_whole() {
        let opts = "overlay drums-overlay rw,lowerdir=/run/drums/sessions/d-1/rw/layer0:/var/lib/drums/runtime/a/layer:/var/lib/drums/images/desktop-abc/root,upperdir=/x";
        assert!(names_layer(opts, Path::new("/var/lib/drums/images/desktop-abc/root")));
        assert!(names_layer(opts, Path::new("/var/lib/drums/runtime/a/layer")));
        assert!(!names_layer(opts, Path::new("/var/lib/drums/images/desktop-ab/root")));
        assert!(!names_layer(opts, Path::new("/var/lib/drums/images/desktop-abc")));
    }
}

crate::record_type!(PruneType = "image_prune");

/// What `drums-sweep --prune-root-images` did or (dry run) would do.
#[derive(Debug, Serialize, Deserialize)]
pub struct PruneReport {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: PruneType,
    pub dry_run: bool,
    /// Image and runtime layer directories removed (or to be removed), and unfinished builds.
    pub removed: Vec<PathBuf>,
    /// Those kept, each with what uses it.
    pub kept: Vec<Kept>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Kept {
    pub dir: PathBuf,
    pub used_by: Vec<String>,
}

/// Remove the root images and runtime layers that nothing uses: no session's overlay mounts them, no
/// checkpoint names them, no image name points at them, and (a runtime layer) they are not the one of
/// the installed tools. Under the exclusive use lock, so no session is being made meanwhile. A
/// checkpoint whose record cannot be read might use anything: then nothing is removed.
pub fn prune(dry_run: bool) -> Result<PruneReport> {
    let _lock = lock(true)?;
    let users = Users::scan();
    if let Some(bad) = users.unreadable.first() {
        return Err(Error::failed(format!("checkpoint {} has no readable record, so what it uses is unknown: nothing was removed (remove or repair it first)", bad.display())));
    }
    let current_images = current_dirs();
    let current_runtime = crate::runtime::current_dir().ok();
    let mut report = PruneReport { drums: crate::record::VERSION, kind: PruneType::Tag, dry_run, removed: vec![], kept: vec![] };
    let mut candidates: Vec<(PathBuf, Vec<String>)> = vec![];
    for dir in list_dirs() {
        let mut why = users.of(&dir);
        if current_images.contains(&dir) {
            why.push("the current image of its name".into());
        }
        candidates.push((dir, why));
    }
    for dir in crate::runtime::list_dirs() {
        let mut why = users.of(&dir);
        if current_runtime.as_ref() == Some(&dir) {
            why.push("the runtime layer of the installed tools".into());
        }
        candidates.push((dir, why));
    }
    // Unfinished builds: pipelines/image.sh and the runtime layer's install hold the use lock (shared)
    // while they build, so none is under way now.
    for root in [images_root(), crate::runtime::runtime_root()] {
        for e in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if (n.starts_with(".build-") || (n.starts_with('.') && n.len() > 17 && n[1..17].bytes().all(|c| c.is_ascii_hexdigit()))) && e.file_type().is_ok_and(|t| t.is_dir()) {
                candidates.push((e.path(), vec![]));
            }
        }
    }
    let roots = [images_root(), crate::runtime::runtime_root()];
    for (dir, mut why) in candidates {
        // Something mounted inside (a hand-made chroot's /proc) would be removed through: never.
        if let Some(m) = crate::removal::mounts_below(&dir).ctx("read mounts", "/proc/self/mountinfo")?.first() {
            why.push(format!("mount {} below it", m.mount_point.display()));
        }
        if why.is_empty() {
            if !dry_run {
                crate::removal::remove_tree_in(&dir, &roots).map_err(Error::failed)?;
            }
            report.removed.push(dir);
        } else {
            report.kept.push(Kept { dir, used_by: why });
        }
    }
    Ok(report)
}

/// An image's record as `drums-overlay image list` prints it: with whether its name points at it and
/// what uses it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Listed {
    #[serde(flatten)]
    pub record: ImageRecord,
    pub current: bool,
    pub used_by: Vec<String>,
}

pub fn list() -> Vec<Listed> {
    let users = Users::scan();
    let current = current_dirs();
    list_dirs()
        .into_iter()
        .filter_map(|d| load(&d).ok())
        .map(|record| Listed { current: current.contains(&record.dir), used_by: users.of(&record.dir), record })
        .collect()
}

crate::record_type!(VerifyType = "image_verify");

/// What `drums-overlay image verify` found.
#[derive(Debug, Serialize, Deserialize)]
pub struct Verified {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: VerifyType,
    pub image: PathBuf,
    pub digest_recorded: String,
    pub digest_now: String,
    pub equal: bool,
    pub seconds: f64,
}

/// Digest an image's tree again (seconds: about one per GiB here) and compare with its record.
pub fn verify(spec: &str) -> Result<Verified> {
    let rec = resolve(spec)?;
    let t = std::time::Instant::now();
    let now = digest_tree(&rec.root)?;
    Ok(Verified { drums: crate::record::VERSION, kind: VerifyType::Tag, image: rec.dir, equal: now.digest == rec.digest, digest_recorded: rec.digest, digest_now: now.digest, seconds: t.elapsed().as_secs_f64() })
}
