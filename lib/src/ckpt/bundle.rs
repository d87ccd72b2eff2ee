//! Moving a checkpoint between nodes (drums-ckpt(1), "Moving a checkpoint"): whether this node can
//! restore it (`check`), the checkpoint as one stream (`export`: a header line, then a tar archive of its
//! directory and its mapped files), and that stream put under this node's roots (`import`).
//!
//! An import writes everything under `<checkpoint root>/<id>.partial` and renames it into place only
//! when every file matches the sender's manifest, as a dump does. It holds the sweep lock shared while
//! it works (as an explicit destroy does), so no sweep runs meanwhile; once the import is killed, its
//! `.partial` is an unfinished checkpoint that no ledger names, which the sweep removes.

use crate::error::{Error, IoContext, Result};
use crate::record::bundle::{Bundle, BundleType, Check, CheckType, Export, ExportType};
use crate::record::Checkpoint;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The largest header line an import reads (the record and a manifest of some ten thousand files).
const MAX_HEADER: u64 = 64 << 20;
/// Archives keep owners, modes, hard links, device nodes (overlayfs whiteouts) and every extended
/// attribute (overlayfs' `trusted.overlay.*` marks): the checkpoint layer is an overlay layer.
const TAR: &[&str] = &["--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls"];
/// The bundle's two trees.
const CKPT: &str = "checkpoint";
const MAPPED: &str = "mapped";

/// Everything this node lacks to restore `c`: its root image and runtime layer (by digest), a CRIU at
/// least as new as the one that dumped it, the same kernel release, and a CPU offering what the images
/// hold (`criu cpuinfo check` against `cpuinfo`, the dump node's description, when there is one).
pub fn check(c: &Checkpoint, cpuinfo: Option<&Path>) -> Result<Check> {
    let mut why = vec![];
    match &c.image {
        None => why.push("the checkpoint names no root image (made on the host's / by older tools)".to_string()),
        Some(i) => {
            if let Err(e) = crate::image::check(i, "image") {
                why.push(format!("root image {} ({}): {e} (build it with pipelines/image.sh from the same inputs)", i.name, i.digest));
            }
        }
    }
    match &c.runtime {
        None => why.push("the checkpoint names no runtime layer (made by older tools)".to_string()),
        Some(r) => {
            if let Err(e) = crate::runtime::check(r, "runtime") {
                why.push(format!("{e} (the same Drums build makes it: run pipelines/setup.sh)"));
            }
        }
    }
    let criu_version = super::criu_version().ok();
    match &criu_version {
        None => why.push(format!("no CRIU runs on this node ({}; pipelines/install-criu.sh)", crate::criu::binary().display())),
        Some(here) if major_minor(here) < major_minor(&c.criu_version) => why.push(format!("CRIU here is {here}, older than the {} that dumped the images", c.criu_version)),
        Some(_) => {}
    }
    let kernel = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    // CRIU restores onto a kernel that offers what the dump used; Drums has tested restores on the kernel
    // that made them only, so another release is refused rather than tried.
    if c.kernel != kernel {
        why.push(format!("kernel here is {kernel}, the images were made on {} (restores across kernels are not tested: refused)", c.kernel));
    }
    let cpu = match (cpuinfo, &criu_version) {
        (None, _) => "not checked: the checkpoint has no description of the CPU that made it (made by older tools)".to_string(),
        (Some(_), None) => "not checked: no CRIU".to_string(),
        (Some(dir), Some(_)) => match crate::criu::cpuinfo_check(dir)? {
            Ok(()) => "compatible".to_string(),
            Err(words) => {
                why.push(format!("this node's CPU lacks what the images use (criu cpuinfo check: {words})"));
                "incompatible".to_string()
            }
        },
    };
    Ok(Check { drums: crate::record::VERSION, kind: CheckType::Tag, checkpoint: c.id.clone(), restorable: why.is_empty(), why_not: why, kernel, criu_version, cpu })
}

/// `check` of a record on input (any node's): the CPU description is the checkpoint's own when the
/// record names a directory of this node that holds one.
pub fn check_record(line: &str) -> Result<Check> {
    let c = Checkpoint::parse_elsewhere(line)?;
    let here = c.dir == crate::state::checkpoint_root().join(&c.id) && c.dir.join(crate::criu::CPUINFO_FILE).is_file();
    check(&c, here.then_some(c.dir.as_path()))
}

fn major_minor(v: &str) -> (u64, u64) {
    let mut it = v.split('.').map(|x| x.trim().parse::<u64>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Regular files below `top` (links and directories are the archive's to carry), by relative path.
fn files(top: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = vec![];
    let mut stack = vec![top.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ctx("read directory", &d)? {
            let e = e.ctx("read directory", &d)?;
            let t = e.file_type().ctx("stat", e.path())?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                let rel = e.path().strip_prefix(top).expect("below top").to_string_lossy().into_owned();
                out.push((rel, e.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

fn sha256_file(p: &Path) -> Result<(u64, String)> {
    let mut f = std::fs::File::open(p).ctx("open", p)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf).ctx("read", p)?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((n, h.finalize().iter().map(|b| format!("{b:02x}")).collect()))
}

/// Size and SHA-256 of every regular file of a checkpoint's directory and mapped-files directory, but
/// the two files each node writes itself (the record, the mapped files' owner note).
pub fn manifest(dir: &Path, mapped: Option<&Path>) -> Result<BTreeMap<String, (u64, String)>> {
    let mut m = BTreeMap::new();
    for (rel, p) in files(dir)? {
        if rel != crate::session_io::CHECKPOINT_FILE {
            m.insert(format!("{CKPT}/{rel}"), sha256_file(&p)?);
        }
    }
    if let Some(md) = mapped {
        for (rel, p) in files(md)? {
            if rel != crate::mapped::OWNER_FILE {
                m.insert(format!("{MAPPED}/{rel}"), sha256_file(&p)?);
            }
        }
    }
    Ok(m)
}

/// Where an export writes.
pub enum Out {
    Stdout,
    File(PathBuf),
}

/// Write checkpoint `c` (of this node) as a bundle: the header line (`Bundle`), then a tar stream of
/// `checkpoint/...` and `mapped/...`. To a file: written as `FILE.partial` and renamed when complete;
/// the record of what was written is returned.
pub fn export(c: &Checkpoint, out: &Out) -> Result<Option<Export>> {
    let t0 = std::time::Instant::now();
    let mapped = c.mapped.as_ref().map(|m| m.dir.clone());
    let man = manifest(&c.dir, mapped.as_deref())?;
    let cpu = c.dir.join(crate::criu::CPUINFO_FILE);
    let cpuinfo = match std::fs::read(&cpu) {
        Ok(b) => Some(b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io("read", &cpu, e)),
    };
    let files = man.len();
    let header = Bundle { drums: crate::record::VERSION, kind: BundleType::Tag, record: serde_json::to_value(c).expect("records serialize"), manifest: man, cpuinfo };
    let mut line = serde_json::to_vec(&header).expect("records serialize");
    line.push(b'\n');
    match out {
        Out::Stdout => {
            let mut so = std::io::stdout().lock();
            so.write_all(&line).and_then(|_| so.flush()).map_err(|e| Error::failed(format!("write the bundle to stdout: {e}")))?;
            drop(so);
            write_trees(c, mapped.as_deref(), || Ok(Stdio::inherit()))?;
            Ok(None)
        }
        Out::File(path) => {
            let mut part = path.clone().into_os_string();
            part.push(".partial");
            let part = PathBuf::from(part);
            let r = (|| {
                let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&part).ctx("create", &part)?;
                f.write_all(&line).ctx("write", &part)?;
                write_trees(c, mapped.as_deref(), || Ok(Stdio::from(f.try_clone().ctx("dup", &part)?)))?;
                f.sync_all().ctx("sync", &part)?;
                std::fs::rename(&part, path).ctx("rename into place", path)
            })();
            if let Err(e) = r {
                let cleanup = match std::fs::remove_file(&part) {
                    Err(x) if x.kind() != std::io::ErrorKind::NotFound && x.kind() != std::io::ErrorKind::AlreadyExists => Err(Error::io("remove", &part, x)),
                    _ => Ok(()),
                };
                return Err(e.with_cleanup(cleanup));
            }
            let bytes = std::fs::metadata(path).ctx("stat", path)?.len();
            Ok(Some(Export { drums: crate::record::VERSION, kind: ExportType::Tag, checkpoint: c.id.clone(), out: path.clone(), bytes, files, export_s: t0.elapsed().as_secs_f64() }))
        }
    }
}

/// Two tar archives one after the other on the same output (an import reads them with
/// --ignore-zeros): the checkpoint's directory as `checkpoint/`, its mapped files as `mapped/`.
fn write_trees(c: &Checkpoint, mapped: Option<&Path>, out: impl Fn() -> Result<Stdio>) -> Result<()> {
    let mut trees = vec![(c.dir.as_path(), CKPT, crate::session_io::CHECKPOINT_FILE)];
    if let Some(m) = mapped {
        trees.push((m, MAPPED, crate::mapped::OWNER_FILE));
    }
    for (dir, name, own_file) in trees {
        let (parent, base) = (dir.parent().expect("absolute"), dir.file_name().expect("named by id").to_string_lossy().into_owned());
        let mut cmd = Command::new("tar");
        cmd.arg("-c").args(TAR).arg("-f").arg("-").arg("-C").arg(parent);
        // The record and the owner note are each node's own: the header carries the record.
        cmd.arg("--anchored").arg(format!("--exclude={base}/{own_file}"));
        // Member names only (S: not symbolic links' targets, which point inside the session's tree).
        cmd.arg(format!("--transform=s,^{base},{name},S")).arg(&base);
        let o = cmd.stdin(Stdio::null()).stdout(out()?).stderr(Stdio::piped()).output().map_err(|e| Error::env(format!("run tar: {e}")))?;
        if !o.status.success() {
            return Err(Error::failed(format!("tar of {}: {}", dir.display(), String::from_utf8_lossy(&o.stderr).trim())));
        }
    }
    Ok(())
}

/// Read a bundle from `input` and put its checkpoint under this node's roots; the record as it is here.
/// Refused, with nothing left, when this node cannot restore it (ENVIRONMENT) or when the bundle is not
/// whole (BAD_INPUT: a header that does not parse, a file that differs from the manifest).
pub fn import(input: impl Read) -> Result<Checkpoint> {
    let mut r = std::io::BufReader::with_capacity(1 << 20, input);
    let mut line = vec![];
    (&mut r).take(MAX_HEADER).read_until(b'\n', &mut line).map_err(|e| Error::bad_input(format!("read the bundle: {e}")))?;
    if !line.ends_with(b"\n") {
        return Err(Error::bad_input(format!("not a checkpoint bundle: no header line (a JSON object and a newline within {MAX_HEADER} bytes)")));
    }
    let header: Bundle = crate::record::from_value(crate::record::parse_line(std::str::from_utf8(&line).map_err(|_| Error::bad_input("the bundle's header is not UTF-8"))?.trim_end(), BundleType::NAME)?)?;
    let theirs = Checkpoint::parse_elsewhere(&header.record.to_string()).map_err(|e| Error::bad_input(format!("the bundle's record: {e}")))?;
    for k in header.manifest.keys() {
        let ok = k.split_once('/').is_some_and(|(top, rest)| (top == CKPT || top == MAPPED) && !rest.is_empty() && Path::new(rest).components().all(|c| matches!(c, std::path::Component::Normal(_))));
        if !ok {
            return Err(Error::bad_field("manifest", format!("`{k}` is not a plain path below checkpoint/ or mapped/")));
        }
    }
    let cpu_tmp = match &header.cpuinfo {
        None => None,
        Some(hex) => {
            let bytes = unhex(hex).ok_or_else(|| Error::bad_field("cpuinfo", "not hex"))?;
            let d = std::env::temp_dir().join(format!("drums-cpuinfo-{}", crate::state::random_hex(6)));
            std::fs::create_dir(&d).ctx("create directory", &d)?;
            std::fs::write(d.join(crate::criu::CPUINFO_FILE), &bytes).ctx("write", &d)?;
            Some(TempDir(d))
        }
    };
    let verdict = check(&theirs, cpu_tmp.as_ref().map(|t| t.0.as_path()))?;
    drop(cpu_tmp);
    if !verdict.restorable {
        return Err(Error::env(format!("checkpoint {} cannot be restored on this node: {}", theirs.id, verdict.why_not.join("; "))));
    }
    let id = theirs.id.clone();
    let root = crate::state::private_root(&crate::state::checkpoint_root())?;
    let mroot = crate::mapped::mapped_root();
    let dst = root.join(&id);
    let mdst = mroot.join(&id);
    // No sweep while the checkpoint is unfinished here; a killed import leaves it to the next sweep.
    let _lock = crate::destroy::sweep::lock(false, true)?;
    if dst.join(crate::session_io::CHECKPOINT_FILE).exists() {
        let here = crate::session_io::load_checkpoint(&id)?;
        if manifest(&here.dir, here.mapped.as_ref().map(|m| m.dir.as_path()))? == header.manifest {
            return Ok(here);
        }
        return Err(Error::bad_input(format!("checkpoint {id} is already on this node ({}) with other files", dst.display())));
    }
    let part = root.join(format!("{id}.partial"));
    // create_dir, not create_dir_all: one there is another import's or dump's, or a killed one's (the
    // sweep's to remove).
    std::fs::create_dir(&part).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => Error::failed(format!("{} exists: another import or dump of {id} is under way, or a killed one left it (drums-sweep removes it)", part.display())),
        _ => Error::io("create directory", &part, e),
    })?;
    let r = unpack_and_install(&mut r, &header, &theirs, &part, &dst, &mdst);
    if let Err(e) = r {
        let cleanup = std::fs::remove_dir_all(&part).or_else(|x| if x.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(x) }).ctx("remove", &part);
        // Mapped files put in place for a checkpoint that never was: nobody else has them.
        let cleanup = cleanup.and_then(|_| if dst.exists() { Ok(()) } else { std::fs::remove_dir_all(&mdst).or_else(|x| if x.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(x) }).ctx("remove", &mdst) });
        return Err(e.with_cleanup(cleanup));
    }
    r
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || s.len() > 1 << 20 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

fn unpack_and_install(r: &mut impl Read, header: &Bundle, theirs: &Checkpoint, part: &Path, dst: &Path, mdst: &Path) -> Result<Checkpoint> {
    let id = &theirs.id;
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("tar");
    // tar dies with the import: a killed import leaves no writer in the `.partial` the sweep removes.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .arg("-x")
        .args(TAR)
        .args(["--ignore-zeros", "--no-overwrite-dir", "-f", "-", "-C"])
        .arg(part)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::env(format!("run tar: {e}")))?;
    let mut sin = child.stdin.take().expect("piped");
    let copied = std::io::copy(r, &mut sin);
    drop(sin);
    let o = child.wait_with_output().map_err(|e| Error::failed(format!("wait for tar: {e}")))?;
    if let Err(e) = copied {
        return Err(Error::bad_input(format!("the bundle's archive could not be read whole: {e}; tar: {}", String::from_utf8_lossy(&o.stderr).trim())));
    }
    if !o.status.success() {
        return Err(Error::bad_input(format!("the bundle's archive is damaged: tar: {}", String::from_utf8_lossy(&o.stderr).trim())));
    }
    let (ck, mp) = (part.join(CKPT), part.join(MAPPED));
    let stray: Vec<String> = std::fs::read_dir(part).ctx("read directory", part)?.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n != CKPT && !(n == MAPPED && theirs.mapped.is_some())).collect();
    if !stray.is_empty() || !ck.is_dir() {
        return Err(Error::bad_input(format!("the bundle's archive holds {stray:?} beside checkpoint/ (and mapped/ when the record names mapped files), or no checkpoint/")));
    }
    let got = manifest(&ck, theirs.mapped.is_some().then_some(mp.as_path()))?;
    if got != header.manifest {
        let bad: Vec<&String> = got.keys().chain(header.manifest.keys()).filter(|k| got.get(*k) != header.manifest.get(*k)).collect::<std::collections::BTreeSet<_>>().into_iter().take(5).collect();
        return Err(Error::bad_input(format!("checkpoint {id}: files differ from the sender's manifest after unpacking (first: {bad:?})")));
    }
    // The record re-rooted at this node's directories; nothing else in it changes.
    let mut here = theirs.clone();
    here.dir = dst.to_path_buf();
    here.images = dst.join("images");
    here.layer = dst.join("layer");
    here.layers = (0..theirs.layers.len()).map(|i| dst.join("layers").join(i.to_string())).collect();
    if let Some(m) = here.mapped.as_mut() {
        let old = m.dir.clone();
        for f in m.files.iter_mut() {
            let rel = f.path.strip_prefix(&old).expect("parse_elsewhere checked").to_path_buf();
            let at = mp.join(&rel);
            let ok = std::fs::symlink_metadata(&at).is_ok_and(|md| md.is_file() && md.len() == f.bytes);
            if !ok {
                return Err(Error::bad_input(format!("checkpoint {id}: mapped file {} is missing or not {} bytes", rel.display(), f.bytes)));
            }
            f.path = mdst.join(rel);
        }
        m.dir = mdst.to_path_buf();
    }
    if let Some(hex) = &header.cpuinfo {
        let p = ck.join(crate::criu::CPUINFO_FILE);
        std::fs::write(&p, unhex(hex).expect("checked")).ctx("write", &p)?;
    }
    let rec = ck.join(crate::session_io::CHECKPOINT_FILE);
    std::fs::write(&rec, serde_json::to_vec(&here).expect("records serialize")).ctx("write", &rec)?;
    // The mapped files first, as a dump puts them: a checkpoint in place always has the files its
    // images name. The owner note goes in before they are, so a sweep can always judge them.
    if here.mapped.is_some() {
        let owner = mp.join(crate::mapped::OWNER_FILE);
        std::fs::write(&owner, dst.as_os_str().as_encoded_bytes()).ctx("write", &owner)?;
        crate::state::private_root(&crate::mapped::mapped_root())?;
        std::fs::rename(&mp, mdst).ctx("rename mapped files into place", mdst)?;
    }
    if let (Some(i), Some(rt)) = (&here.image, &here.runtime) {
        crate::image::add_ref_keeping(&i.dir, id, dst)?;
        crate::image::add_ref_keeping(&rt.dir, id, dst)?;
    }
    std::fs::rename(&ck, dst).ctx("rename checkpoint into place", dst)?;
    std::fs::remove_dir(part).ctx("remove", part)?;
    Ok(here)
}
