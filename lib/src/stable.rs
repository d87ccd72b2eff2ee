//! Immutable copies of the Drums programs that run inside sessions (the init, the guest, the pkey shim).
//! A checkpoint's processes map these files; CRIU refuses to restore when a mapped file changed size
//! ("bad size"), so a rebuild of the tools must not touch the files that existing checkpoints map. Each
//! build gets its own directory under /usr/local/lib/drums-run, named by the source file's size and
//! modification time, and is never changed afterwards. (Not under /var/lib/drums: sessions do not see
//! that directory.)

use crate::error::{Error, IoContext, Result};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    std::env::var_os("DRUMS_RUN_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/local/lib/drums-run"))
}

/// The immutable copy of `src`, made if missing (atomically: copy to a temporary name, then rename).
pub fn install(src: &Path) -> Result<PathBuf> {
    let m = std::fs::metadata(src).ctx("stat", src)?;
    let name = src.file_name().ok_or_else(|| Error::failed(format!("{} has no file name", src.display())))?;
    let dir = root().join(format!("{:x}-{:x}-{:x}", m.size(), m.mtime(), m.mtime_nsec()));
    let dst = dir.join(name);
    if dst.exists() {
        return Ok(dst);
    }
    std::fs::create_dir_all(&dir).ctx("create directory", &dir)?;
    let tmp = dir.join(format!(".{}.{}", name.to_string_lossy(), std::process::id()));
    std::fs::copy(src, &tmp).ctx("copy", &tmp)?;
    std::fs::rename(&tmp, &dst).ctx("rename", &dst)?;
    Ok(dst)
}

/// A program that lives beside the running tool, installed immutably.
pub fn beside_me(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe().map_err(|e| Error::failed(format!("find own executable: {e}")))?;
    let src = me.parent().map(|d| d.join(name)).filter(|p| p.exists()).ok_or_else(|| Error::env(format!("{name} is not beside {} (build the workspace)", me.display())))?;
    install(&src)
}
