//! Relocated data moved out of a checkpoint's memory images into read-only files every restore maps.
//!
//! Every Chromium process carries 11.6 MB of `.data.rel.ro`: a private, read-only mapping of the binary
//! that the dynamic loader wrote once (relocations) and then made read-only. CRIU saves it as memory, so
//! each restore reads it back page by page, into the browser, the zygote and (compared page by page,
//! to keep it shared) into each of the zygote's children: about a third of a session's images.
//! Its content never changes after start-up, so drums-ckpt writes it once into a file of the checkpoint
//! and points the mapping at that file (and drops its pages from the images): a restore then maps the
//! file like any library, and every sibling shares its pages in the page cache.
//!
//! The files are opened inside the restored session: each checkpoint's are a read-only overlay layer of
//! its own, `mapped_root()/<checkpoint id>/layer`, where sessions see them as
//! `/usr/lib/drums/mapped/<checkpoint id>/N.bin`. The layer is shared by every sibling (not copied).
//! Sessions can read them (drums-ckpt(1) says what they show). A checkpoint of a restored sibling maps
//! its parent checkpoint's files too: they are hard-linked into its own layer and renamed in its images,
//! so that every checkpoint needs only its own mapped files.

use crate::criu_image::{replace_file, Image, Message, Value};
use crate::error::{Error, IoContext, Result};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
pub use crate::record::layers::{Mapped, MappedFile};

const PAGE: u64 = 4096;
/// A mapping is moved out only when at least this many of its pages are in the images.
const MIN_PAGES: u64 = 64;

// Field numbers of CRIU 4's image messages (images/*.proto).
const PSTREE_PID: u32 = 1;
const MM_VMAS: u32 = 14;
const VMA_START: u32 = 1;
const VMA_END: u32 = 2;
const VMA_PGOFF: u32 = 3;
const VMA_SHMID: u32 = 4;
const VMA_PROT: u32 = 5;
const VMA_FLAGS: u32 = 6;
const VMA_STATUS: u32 = 7;
const PAGEMAP_HEAD_PAGES_ID: u32 = 1;
const PE_VADDR: u32 = 1;
const PE_COMPAT_NR_PAGES: u32 = 2;
const PE_IN_PARENT: u32 = 3;
const PE_FLAGS: u32 = 4;
const PE_NR_PAGES: u32 = 5;
const FILE_TYPE: u32 = 1;
const FILE_ID: u32 = 2;
const FILE_REG: u32 = 3;
const FD_TYPE_REG: u64 = 1;
const REG_ID: u32 = 1;
const REG_FLAGS: u32 = 2;
const REG_POS: u32 = 3;
const REG_NAME: u32 = 6;
const REG_MNT_ID: u32 = 7;
const REG_SIZE: u32 = 8;
const REG_MODE: u32 = 10;
/// ext, build id and checksum fields: describe the original file, not ours.
const REG_ABOUT_ORIGINAL: [u32; 5] = [9, 11, 12, 13, 14];
const MNT_ID: u32 = 2;
const MNT_MOUNTPOINT: u32 = 7;

const VMA_AREA_REGULAR: u64 = 1 << 0;
const VMA_FILE_PRIVATE: u64 = 1 << 6;
const PROT_WRITE: u64 = 0x2;
const MAP_SHARED: u64 = 0x1;
const PE_PARENT: u64 = 1 << 0;
const PE_LAZY: u64 = 1 << 1;
const PE_PRESENT: u64 = 1 << 2;

/// Where checkpoints' mapped files live: $DRUMS_MAPPED_DIR, default /var/lib/drums-mapped.
pub fn mapped_root() -> PathBuf {
    std::env::var_os("DRUMS_MAPPED_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/lib/drums-mapped"))
}

/// Where sessions see the mapped files of checkpoint `id`.
pub fn inside_dir(id: &str) -> PathBuf {
    Path::new(INSIDE_ROOT).join(id)
}
pub const INSIDE_ROOT: &str = "/usr/lib/drums/mapped";

/// The overlay layer of a checkpoint's mapped-files directory.
pub fn layer_of(dir: &Path) -> PathBuf {
    dir.join("layer")
}

/// Where, on the host, the mapped-files directory `dir` of checkpoint `id` holds a file the session sees
/// as `/usr/lib/drums/mapped/<id>/<name>`.
fn host_path(dir: &Path, id: &str, name: &str) -> PathBuf {
    layer_of(dir).join(inside_dir(id).strip_prefix("/").expect("absolute")).join(name)
}

/// In each checkpoint's mapped-files directory: the checkpoint directory it belongs to. The sweep removes
/// a directory whose checkpoint is gone, and judges only those that belong under its checkpoint root.
pub const OWNER_FILE: &str = "checkpoint";

/// The checkpoint directory a mapped-files directory belongs to, as its owner file says.
pub fn owner_of(dir: &Path) -> Option<PathBuf> {
    let b = std::fs::read(dir.join(OWNER_FILE)).ok()?;
    Some(PathBuf::from(std::ffi::OsString::from(String::from_utf8(b).ok()?)))
}

/// Why mapped files cannot be kept under `root`, if they cannot.
pub fn unusable_root(root: &Path) -> Option<String> {
    if !root.is_absolute() || root.components().any(|c| !matches!(c, Component::RootDir | Component::Normal(_))) {
        return Some(format!("{} is not a plain absolute path", root.display()));
    }
    None
}



impl Mapped {
    /// Each file is there with its size: a restore would otherwise fail inside CRIU. (Where they may be is
    /// checked when the record is read.)
    pub fn check(&self) -> Result<()> {
        for f in &self.files {
            match std::fs::metadata(&f.path) {
                Ok(m) if m.len() == f.bytes => {}
                Ok(m) => return Err(Error::bad_input(format!("mapped file {} is {} bytes, not the {} the images expect", f.path.display(), m.len(), f.bytes))),
                Err(e) => return Err(Error::bad_input(format!("mapped file {} of the checkpoint: {e}", f.path.display()))),
            }
        }
        Ok(())
    }
}

struct PageRun {
    vaddr: u64,
    pages: u64,
    flags: u64,
    /// Offset of its first page in the pages file, for present runs.
    offset: Option<u64>,
    entry: Message,
}

fn pagemap_runs(entries: &[Vec<u8>]) -> Result<Vec<PageRun>> {
    let mut runs = vec![];
    let mut offset = 0;
    for e in entries {
        let m = Message::parse(e)?;
        let pages = m.varint(PE_NR_PAGES).filter(|n| *n > 0).or(m.varint(PE_COMPAT_NR_PAGES)).unwrap_or(0);
        let flags = m.varint(PE_FLAGS).unwrap_or(0) | if m.varint(PE_IN_PARENT).unwrap_or(0) != 0 { PE_PARENT } else { 0 };
        let vaddr = m.varint(PE_VADDR).ok_or_else(|| Error::failed("pagemap entry without an address"))?;
        let present = flags & PE_PRESENT != 0;
        runs.push(PageRun { vaddr, pages, flags, offset: present.then_some(offset), entry: m });
        if present {
            offset += pages * PAGE;
        }
    }
    Ok(runs)
}

/// `N.bin` or `pN.bin`: the names drums-ckpt gives mapped files.
fn is_mapped_name(n: &str) -> bool {
    let digits = n.strip_suffix(".bin").map(|d| d.strip_prefix('p').unwrap_or(d));
    digits.is_some_and(|d| !d.is_empty() && d.len() <= 9 && d.bytes().all(|b| b.is_ascii_digit()))
}

fn plain_absolute(name: &[u8]) -> Option<PathBuf> {
    let p = PathBuf::from(std::str::from_utf8(name).ok()?);
    (p.is_absolute() && p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))).then_some(p)
}

/// Point every regular file of `files` that is another checkpoint's mapped file at a hard link of it in
/// checkpoint `id`'s own layer (under `write_dir`, to be moved to `final_dir`): `pN.bin`.
fn relink_inherited(files: &mut Image, write_dir: &Path, final_dir: &Path, id: &str) -> Result<Vec<MappedFile>> {
    let mut out: Vec<MappedFile> = vec![];
    let mut linked: HashMap<Vec<u8>, String> = HashMap::new();
    for entry in files.entries.iter_mut() {
        let mut f = Message::parse(entry)?;
        if f.varint(FILE_TYPE) != Some(FD_TYPE_REG) {
            continue;
        }
        let Some(raw) = f.bytes(FILE_REG) else { continue };
        let mut r = Message::parse(raw)?;
        let Some(name) = r.bytes(REG_NAME).and_then(plain_absolute) else { continue };
        let Ok(rest) = name.strip_prefix(INSIDE_ROOT) else { continue };
        let mut parts = rest.components();
        let (Some(Component::Normal(owner)), Some(Component::Normal(file)), None) = (parts.next(), parts.next(), parts.next()) else { continue };
        let (owner, file) = (owner.to_string_lossy().into_owned(), file.to_string_lossy().into_owned());
        if owner == id || crate::state::check_checkpoint_id(&owner).is_err() || !is_mapped_name(&file) {
            continue;
        }
        let key = name.as_os_str().as_encoded_bytes().to_vec();
        let new_name = match linked.get(&key) {
            Some(n) => n.clone(),
            None => {
                let from = host_path(&mapped_root().join(&owner), &owner, &file);
                let m = std::fs::symlink_metadata(&from).map_err(|e| Error::failed(format!("the source maps {} of checkpoint {owner}, whose file {} is not usable: {e}", name.display(), from.display())))?;
                if !m.is_file() {
                    return Err(Error::failed(format!("the source maps {} of checkpoint {owner}, whose {} is not a regular file", name.display(), from.display())));
                }
                let n = format!("p{}.bin", out.len());
                let to = host_path(write_dir, id, &n);
                std::fs::create_dir_all(to.parent().unwrap()).ctx("create directory", to.parent().unwrap())?;
                std::fs::hard_link(&from, &to).ctx("link", &to)?;
                out.push(MappedFile { path: host_path(final_dir, id, &n), bytes: m.len(), mappings: 0 });
                linked.insert(key, n.clone());
                n
            }
        };
        if let Some(mf) = out.iter_mut().find(|m| m.path.file_name().is_some_and(|x| x == new_name.as_str())) {
            mf.mappings += 1;
        }
        r.set_bytes(REG_NAME, inside_dir(id).join(&new_name).into_os_string().into_encoded_bytes());
        f.set_bytes(FILE_REG, r.encode());
        *entry = f.encode();
    }
    Ok(out)
}

/// Rewrite the images in `images` so that read-only private file mappings whose pages they hold (relocated
/// data) map files written to `write_dir` instead; `final_dir` is where drums-ckpt moves `write_dir` once
/// checkpoint `id` is complete, and the images name the files as sessions see them
/// (`/usr/lib/drums/mapped/<id>/`). `source_root` is the source session's root as the host sees it (the
/// original files are read there). Files of other checkpoints that the images open (the source was
/// restored from one) are linked in and renamed. Leaves the images as they were and returns an empty
/// result when nothing qualifies.
pub fn move_out_relocated(images: &Path, source_root: &Path, write_dir: &Path, final_dir: &Path, id: &str, checkpoint_dir: &Path) -> Result<Mapped> {
    // The session's tree: any link in a mapped file's path is refused (crate::inroot), so a link the
    // session planted there never makes this tool read a host file into a file every sibling can read.
    let source = crate::inroot::Root::open(source_root, crate::inroot::Links::Refuse)?;
    let files_path = images.join("files.img");
    let mut files = Image::read(&files_path)?;
    let inherited = relink_inherited(&mut files, write_dir, final_dir, id)?;
    let mut reg: HashMap<u64, Message> = HashMap::new();
    let mut next_id = 0;
    for e in &files.entries {
        let f = Message::parse(e)?;
        let id = f.varint(FILE_ID).unwrap_or(0);
        next_id = next_id.max(id + 1);
        if f.varint(FILE_TYPE) == Some(FD_TYPE_REG) {
            if let Some(r) = f.bytes(FILE_REG) {
                reg.insert(id, Message::parse(r)?);
            }
        }
    }
    // Only files on the session's root mount: the new files are named relative to it.
    let mut root_mnt = None;
    for e in std::fs::read_dir(images).ctx("read directory", images)?.flatten() {
        let name = e.file_name();
        if name.to_str().is_some_and(|n| n.starts_with("mountpoints-") && n.ends_with(".img")) {
            for m in Image::read(&e.path())?.entries {
                let m = Message::parse(&m)?;
                if m.bytes(MNT_MOUNTPOINT) == Some(b"/") {
                    root_mnt = m.varint(MNT_ID);
                }
            }
        }
    }
    let Some(root_mnt) = root_mnt else { return Ok(Mapped::default()) };

    let pids: Vec<u64> = Image::read(&images.join("pstree.img"))?.entries.iter().filter_map(|e| Message::parse(e).ok()?.varint(PSTREE_PID)).collect();
    let mut contents: Vec<(Vec<u8>, u64, u32)> = vec![]; // content, new file id, mappings
    let mut by_hash: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut new_reg: Vec<Message> = vec![];
    let mut rewrites: Vec<(PathBuf, Vec<u8>)> = vec![];
    let mut pages_moved = 0;

    for pid in pids {
        let mm_path = images.join(format!("mm-{pid}.img"));
        let pm_path = images.join(format!("pagemap-{pid}.img"));
        if !mm_path.exists() || !pm_path.exists() {
            continue;
        }
        let mut mm_img = Image::read(&mm_path)?;
        let Some(mm_entry) = mm_img.entries.first() else { continue };
        let mut mm = Message::parse(mm_entry)?;
        let pm_img = Image::read(&pm_path)?;
        let Some(head) = pm_img.entries.first() else { continue };
        let pages_id = Message::parse(head)?.varint(PAGEMAP_HEAD_PAGES_ID).ok_or_else(|| Error::failed(format!("{}: no pages id", pm_path.display())))?;
        let runs = pagemap_runs(&pm_img.entries[1..])?;
        let pages_path = images.join(format!("pages-{pages_id}.img"));
        let mut data: Option<Vec<u8>> = None;

        let mut moved: Vec<(u64, u64)> = vec![];
        for (field, value) in mm.0.iter_mut() {
            let Value::Bytes(raw) = value else { continue };
            if *field != MM_VMAS {
                continue;
            }
            let mut vma = Message::parse(raw)?;
            let get = |f| vma.varint(f).unwrap_or(0);
            let (start, end, pgoff, shmid) = (get(VMA_START), get(VMA_END), get(VMA_PGOFF), get(VMA_SHMID));
            let eligible = get(VMA_STATUS) & (VMA_AREA_REGULAR | VMA_FILE_PRIVATE) == VMA_AREA_REGULAR | VMA_FILE_PRIVATE
                && get(VMA_PROT) & PROT_WRITE == 0
                && get(VMA_FLAGS) & MAP_SHARED == 0
                && end > start;
            let Some(file) = reg.get(&shmid).filter(|_| eligible) else { continue };
            // sint32, zigzag-encoded
            let mnt = file.varint(REG_MNT_ID).map(|z| (z >> 1) ^ (z & 1).wrapping_neg());
            let Some(name) = file.bytes(REG_NAME).and_then(plain_absolute).filter(|_| mnt == Some(root_mnt)) else { continue };
            let inside: Vec<&PageRun> = runs.iter().filter(|r| r.vaddr < end && r.vaddr + r.pages * PAGE > start).collect();
            if inside.iter().any(|r| r.flags & (PE_PARENT | PE_LAZY) != 0 || r.flags & PE_PRESENT == 0) {
                continue;
            }
            let have: u64 = inside.iter().map(|r| (r.vaddr + r.pages * PAGE).min(end).saturating_sub(r.vaddr.max(start)) / PAGE).sum();
            if have < MIN_PAGES || have * PAGE * 2 < end - start {
                continue;
            }
            // The mapping's content: the file where no page was saved, the saved pages elsewhere.
            let len = (end - start) as usize;
            let host = source.shown(&name);
            let mut content = vec![0u8; len];
            {
                use std::os::unix::fs::FileExt;
                // The name is the kernel's, without links; a link on its way now, or a file of another
                // size than the one mapped, means the session changed it after mapping it: the mapping
                // is left to CRIU, and no other file is read in its place.
                let Ok(f) = crate::inroot::open_regular(&source, &name) else { continue };
                if file.varint(REG_SIZE).is_some_and(|size| f.metadata().map(|m| m.len()).ok() != Some(size)) {
                    continue;
                }
                let mut done = 0;
                while done < len {
                    match f.read_at(&mut content[done..], pgoff + done as u64).ctx("read", &host)? {
                        0 => break,
                        n => done += n,
                    }
                }
                if done < len {
                    continue; // a mapping past the end of its file: leave it to CRIU
                }
            }
            if data.is_none() {
                data = Some(std::fs::read(&pages_path).ctx("read", &pages_path)?);
            }
            let data = data.as_ref().unwrap();
            for r in &inside {
                let (a, b) = (r.vaddr.max(start), (r.vaddr + r.pages * PAGE).min(end));
                let off = (r.offset.unwrap() + (a - r.vaddr)) as usize;
                let src = data.get(off..off + (b - a) as usize).ok_or_else(|| Error::failed(format!("{} is shorter than its pagemap", pages_path.display())))?;
                content[(a - start) as usize..(b - start) as usize].copy_from_slice(src);
            }
            let hash = {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                content.hash(&mut h);
                h.finish()
            };
            let same = by_hash.get(&hash).and_then(|ix| ix.iter().copied().find(|&i| contents[i].0 == content));
            let file_id = match same {
                Some(i) => {
                    contents[i].2 += 1;
                    contents[i].1
                }
                None => {
                    let file_id = next_id;
                    next_id += 1;
                    let index = contents.len();
                    let mut r = file.clone();
                    r.set_varint(REG_ID, file_id);
                    r.set_varint(REG_FLAGS, 0);
                    r.set_varint(REG_POS, 0);
                    r.set_bytes(REG_NAME, inside_dir(id).join(format!("{index}.bin")).into_os_string().into_encoded_bytes());
                    r.set_varint(REG_SIZE, len as u64);
                    r.set_varint(REG_MODE, 0o100444);
                    for f in REG_ABOUT_ORIGINAL {
                        r.remove(f);
                    }
                    new_reg.push(r);
                    by_hash.entry(hash).or_default().push(index);
                    contents.push((content, file_id, 1));
                    file_id
                }
            };
            vma.set_varint(VMA_SHMID, file_id);
            vma.set_varint(VMA_PGOFF, 0);
            *raw = vma.encode();
            moved.push((start, end));
            pages_moved += have;
        }
        if moved.is_empty() {
            continue;
        }
        // The pagemap and the pages without the moved mappings' pages.
        let data = data.expect("read when a mapping moved");
        let in_moved = |p: u64| moved.iter().any(|&(s, e)| s <= p && p < e);
        let (mut entries, mut pages) = (vec![pm_img.entries[0].clone()], Vec::with_capacity(data.len()));
        for r in &runs {
            let mut i = 0;
            while i < r.pages {
                if in_moved(r.vaddr + i * PAGE) {
                    i += 1;
                    continue;
                }
                let first = i;
                while i < r.pages && !in_moved(r.vaddr + i * PAGE) {
                    i += 1;
                }
                let mut e = r.entry.clone();
                e.set_varint(PE_VADDR, r.vaddr + first * PAGE);
                e.set_varint(PE_COMPAT_NR_PAGES, 0);
                e.set_varint(PE_NR_PAGES, i - first);
                entries.push(e.encode());
                if let Some(off) = r.offset {
                    pages.extend_from_slice(&data[(off + first * PAGE) as usize..(off + i * PAGE) as usize]);
                }
            }
        }
        rewrites.push((pm_path, Image { magic: pm_img.magic, entries }.to_bytes()));
        rewrites.push((pages_path, pages));
        mm_img.entries[0] = mm.encode();
        rewrites.push((mm_path, mm_img.to_bytes()));
    }
    if contents.is_empty() && inherited.is_empty() {
        return Ok(Mapped::default());
    }

    std::fs::create_dir_all(write_dir).ctx("create directory", write_dir)?;
    let owner = write_dir.join(OWNER_FILE);
    std::fs::write(&owner, checkpoint_dir.as_os_str().as_encoded_bytes()).ctx("write", &owner)?;
    let mut out = Mapped { dir: final_dir.to_path_buf(), files: inherited, pages_moved };
    for (index, (content, _, mappings)) in contents.iter().enumerate() {
        let name = format!("{index}.bin");
        let p = host_path(write_dir, id, &name);
        std::fs::create_dir_all(p.parent().unwrap()).ctx("create directory", p.parent().unwrap())?;
        std::fs::write(&p, content).ctx("write", &p)?;
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o444)).ctx("chmod", &p)?;
        out.files.push(MappedFile { path: host_path(final_dir, id, &name), bytes: content.len() as u64, mappings: *mappings });
    }
    for r in new_reg {
        let id = r.varint(REG_ID).unwrap();
        files.entries.push(Message(vec![(FILE_TYPE, Value::Varint(FD_TYPE_REG)), (FILE_ID, Value::Varint(id)), (FILE_REG, Value::Bytes(r.encode()))]).encode());
    }
    rewrites.push((files_path, files.to_bytes()));
    for (path, bytes) in rewrites {
        replace_file(&path, &bytes)?;
    }
    Ok(out)
}
