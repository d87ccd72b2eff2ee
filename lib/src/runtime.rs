//! The runtime layer: Drums' own programs that run inside sessions (the init `drums-ns`, the guest
//! `drums-guest`, the pkey shim Chromium preloads), as a read-only overlay layer between a session's
//! checkpoint layer and its root image, where sessions see them in `/usr/lib/drums`. A checkpoint's
//! processes map these files, and CRIU refuses to restore when a mapped file changed ("bad size"), so a
//! rebuild of the tools never touches a layer that exists: each build gets its own
//! `<runtime root>/<stamp>/`, named by the programs' sizes and modification times, made once (copied,
//! then renamed into place) and never changed. Its `runtime.json` holds the SHA-256 of the programs.
//! Layers are removed only by `drums-sweep --prune-root-images`, when nothing uses them.

use crate::error::{Error, IoContext, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
pub use crate::record::layers::RuntimeRef;

/// Where sessions see the runtime layer's programs.
pub const INSIDE_DIR: &str = "/usr/lib/drums";
pub const PROGRAMS: [&str; 3] = ["drums-ns", "drums-guest", "libdrums_pkey_shim.so"];
const RECORD_FILE: &str = "runtime.json";

/// `$DRUMS_RUNTIME_DIR`, default /var/lib/drums/runtime.
pub fn runtime_root() -> PathBuf {
    std::env::var_os("DRUMS_RUNTIME_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/lib/drums/runtime"))
}

/// A program's path inside a session.
pub fn inside(program: &str) -> PathBuf {
    Path::new(INSIDE_DIR).join(program)
}


#[derive(Serialize, Deserialize)]
struct RuntimeRecord {
    digest: String,
    programs: Vec<String>,
}

fn check_stamp(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

impl RuntimeRef {
    pub fn validate(&self, field: &str) -> Result<()> {
        let stamp = self.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if self.dir.parent() != Some(runtime_root().as_path()) || !check_stamp(&stamp) {
            return Err(Error::bad_field(format!("{field}.dir"), format!("{} is not a runtime layer directory of {}", self.dir.display(), runtime_root().display())));
        }
        if self.layer != self.dir.join("layer") {
            return Err(Error::bad_field(format!("{field}.layer"), format!("{} is not {}/layer", self.layer.display(), self.dir.display())));
        }
        Ok(())
    }
}

/// The runtime layer of the programs beside the running tool, made if missing.
pub fn beside_me() -> Result<RuntimeRef> {
    install(&own_bin_dir()?)
}

/// The directory the runtime layer of the programs in `bin` has (or would have): named by their sizes,
/// modification times and inodes, so that finding it costs three stats, not reading the programs.
pub fn dir_for(bin: &Path) -> Result<PathBuf> {
    let mut stamp = Sha256::new();
    for p in PROGRAMS {
        let src = bin.join(p);
        let m = std::fs::metadata(&src).map_err(|_| Error::env(format!("{p} is not in {} (build the workspace)", bin.display())))?;
        stamp.update(format!("{p} {} {} {} {}\n", m.size(), m.mtime(), m.mtime_nsec(), m.ino()).as_bytes());
    }
    let stamp: String = stamp.finalize()[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(runtime_root().join(stamp))
}

fn own_bin_dir() -> Result<PathBuf> {
    let me = std::env::current_exe().map_err(|e| Error::failed(format!("find own executable: {e}")))?;
    Ok(me.parent().ok_or_else(|| Error::failed("own executable has no directory"))?.to_path_buf())
}

/// The runtime layer directory of the programs beside the running tool (made or not).
pub fn current_dir() -> Result<PathBuf> {
    dir_for(&own_bin_dir()?)
}

/// The runtime layer of the programs in `bin`, made if missing.
pub fn install(bin: &Path) -> Result<RuntimeRef> {
    let dir = dir_for(bin)?;
    let root = runtime_root();
    let stamp = dir.file_name().expect("named by its stamp").to_string_lossy().into_owned();
    crate::state::private_root(&root)?;
    if let Ok(r) = load(&dir) {
        return Ok(r);
    }
    let tmp = root.join(format!(".{stamp}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let made = (|| -> Result<()> {
        let inside_dir = tmp.join("layer").join(INSIDE_DIR.trim_start_matches('/'));
        std::fs::create_dir_all(&inside_dir).ctx("create directory", &inside_dir)?;
        let mut h = Sha256::new();
        for p in PROGRAMS {
            let (src, dst) = (bin.join(p), inside_dir.join(p));
            let bytes = std::fs::read(&src).ctx("read", &src)?;
            h.update(p.as_bytes());
            h.update([0]);
            h.update(&bytes);
            std::fs::write(&dst, &bytes).ctx("write", &dst)?;
            std::fs::set_permissions(&dst, std::os::unix::fs::PermissionsExt::from_mode(0o755)).ctx("chmod", &dst)?;
        }
        let digest = format!("sha256:{}", h.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>());
        let rec = RuntimeRecord { digest, programs: PROGRAMS.iter().map(|s| s.to_string()).collect() };
        let path = tmp.join(RECORD_FILE);
        std::fs::write(&path, serde_json::to_vec(&rec).expect("serializes")).ctx("write", &path)
    })();
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => {}
        // Made at the same moment by another tool: theirs is as good.
        Err(_) if dir.join(RECORD_FILE).is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Err(e) => return Err(Error::io("rename runtime layer into place", &dir, e)),
    }
    load(&dir)
}

fn load(dir: &Path) -> Result<RuntimeRef> {
    let path = dir.join(RECORD_FILE);
    let text = std::fs::read_to_string(&path).ctx("read", &path)?;
    let rec: RuntimeRecord = serde_json::from_str(&text).map_err(|e| Error::failed(format!("{}: {e}", path.display())))?;
    Ok(RuntimeRef { dir: dir.to_path_buf(), layer: dir.join("layer"), digest: rec.digest })
}

/// A restore's check: the layer its checkpoint names is there, with the same programs.
pub fn check(r: &RuntimeRef, field: &str) -> Result<()> {
    r.validate(field)?;
    match load(&r.dir) {
        Ok(found) if found.digest == r.digest && r.layer.is_dir() => Ok(()),
        Ok(found) => Err(Error::bad_field(field, format!("runtime layer {} has digest {}, not {}", r.dir.display(), found.digest, r.digest))),
        Err(e) => Err(Error::bad_field(field, format!("runtime layer {} is not usable: {e}", r.dir.display()))),
    }
}

/// The runtime layer directories of the runtime root.
pub fn list_dirs() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(runtime_root())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()) && check_stamp(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}
