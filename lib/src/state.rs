//! Where Drums keeps its state, and the names it gives things.

use std::path::{Path, PathBuf};

/// Root of per-session state (ledgers, overlay mounts): $DRUMS_STATE_DIR, default /run/drums.
pub fn state_root() -> PathBuf {
    std::env::var_os("DRUMS_STATE_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/run/drums"))
}
/// The factor every built-in deadline of the tools is multiplied by: $DRUMS_TIMEOUT_SCALE, a number from
/// 1 to 1000 (default 1; anything else: every tool refuses to start, `cli::run`, error `usage`, exit 2).
/// For hosts far slower than the machines the deadlines were measured on (an emulated CPU:
/// tests/v2_host_qemu.rs runs Drums under QEMU with 20), without changing what a normal host waits.
pub fn timeout_scale() -> crate::Result<f64> {
    match std::env::var("DRUMS_TIMEOUT_SCALE") {
        Err(_) => Ok(1.0),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(f) if (1.0..=1000.0).contains(&f) => Ok(f),
            _ => Err(crate::error::Error::usage(format!("DRUMS_TIMEOUT_SCALE=`{v}`: want a number from 1 to 1000"))),
        },
    }
}
/// `d` times `timeout_scale()` (checked when the tool started, so an invalid one never gets here).
pub fn scaled(d: std::time::Duration) -> std::time::Duration {
    d.mul_f64(timeout_scale().unwrap_or(1.0))
}
pub fn sessions_root() -> PathBuf {
    state_root().join("sessions")
}
pub fn session_dir(id: &str) -> PathBuf {
    sessions_root().join(id)
}
/// The warm pools' spools (drums-pool(7)), one per checkpoint: `<pools root>/<checkpoint id>/{tmp,ready,taken}`,
/// laid out by drums-pool (crate::pool). $DRUMS_POOL_DIR places them elsewhere (a bound pool of its own
/// beside the machine's pool of the same checkpoint), default `<state root>/pools`.
pub fn pools_root() -> PathBuf {
    std::env::var_os("DRUMS_POOL_DIR").map(PathBuf::from).unwrap_or_else(|| state_root().join("pools"))
}
/// Root of checkpoints, which outlive sessions: $DRUMS_CHECKPOINT_DIR, default /var/lib/drums/checkpoints.
pub fn checkpoint_root() -> PathBuf {
    std::env::var_os("DRUMS_CHECKPOINT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib/drums/checkpoints"))
}

/// Root of read-only layers that sessions may be given by path (`drums-overlay create --layer`), besides
/// checkpoints' own: $DRUMS_LAYER_DIR, default /var/lib/drums/layers.
pub fn layers_root() -> PathBuf {
    std::env::var_os("DRUMS_LAYER_DIR").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/lib/drums/layers"))
}

/// Make `root` (one of Drums' roots: state, checkpoints, mapped files, images, runtime layers) a
/// directory no other host user can read or traverse (mode 0700), creating it (and its missing parents,
/// with the usual modes) if needed, and fixing the mode of one that exists: every use does this, so a
/// root made before, or by a script, is closed as soon as a tool touches it. Sessions' mounts sit below
/// these roots (`/run/drums/sessions/ID/root` is a session's whole file tree), and a host user who could
/// walk in could run a set-user-ID file a session planted, or read its files and a checkpoint's. Sessions
/// still work: overlayfs reaches its layers with the credentials of whoever mounted it. A root that is not
/// a directory, or is owned by another user than the tool's, is refused.
pub fn private_root(root: &Path) -> crate::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    if let Some(parent) = root.parent() {
        std::fs::create_dir_all(parent).map_err(|e| crate::Error::io("create directory", parent, e))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(crate::Error::io("create directory", root, e)),
    }
    // Followed: a root may be a link the administrator made (to a larger disk); what it names is checked.
    let m = std::fs::metadata(root).map_err(|e| crate::Error::io("stat", root, e))?;
    if !m.is_dir() {
        return Err(crate::Error::env(format!("{} is not a directory: Drums keeps its state in a directory of its own", root.display())));
    }
    if m.uid() != unsafe { libc::geteuid() } {
        return Err(crate::Error::env(format!("{} belongs to uid {}, not to this tool's user: another user could change what Drums finds there", root.display(), m.uid())));
    }
    if m.mode() & 0o7777 != 0o700 {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).map_err(|e| crate::Error::io("chmod", root, e))?;
    }
    Ok(root.to_path_buf())
}

/// Prefix of every name Drums gives a kernel object (veth links, cgroup directories): the sweep's
/// evidence that an unledgered object is Drums'.
pub const NAME_PREFIX: &str = "drums";

pub use crate::record::{check_checkpoint_id, check_id, check_session_id, now};

/// Fill `buf` from the kernel's random source (getrandom(2)), the one place Drums takes randomness from:
/// a fresh read every time, no cached generator state, so restored clones of a checkpoint (which start
/// with identical memory) still get different values.
pub fn fill_random(buf: &mut [u8]) {
    let mut got = 0usize;
    while got < buf.len() {
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if n > 0 {
            got += n as usize;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            panic!("getrandom(2) failed: {}", std::io::Error::last_os_error());
        }
    }
}

/// A new random id with the given prefix ('d' for sessions, 'c' for checkpoints).
pub fn new_id(prefix: char) -> String {
    let mut buf = [0u8; 8];
    fill_random(&mut buf);
    format!("{prefix}-{:012x}", u64::from_le_bytes(buf) & 0xffff_ffff_ffff)
}

/// `bytes` random bytes (`fill_random`), in hex.
pub fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    fill_random(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_and_checkpoint_ids_are_told_apart() {
        assert!(check_session_id("d-0123abcd").is_ok() && check_checkpoint_id("c-0123abcd").is_ok());
        assert!(check_session_id("c-0123abcd").is_err(), "a checkpoint id is no session id");
        assert!(check_checkpoint_id("d-0123abcd").is_err(), "a session id is no checkpoint id");
        for bad in ["d-", "d-ABC", "d-../x", "x-0123", &format!("d-{}", "a".repeat(33))] {
            assert!(check_id(bad).is_err() && check_session_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn roots_are_made_private_and_fixed_on_use() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let t = std::env::temp_dir().join(format!("drums-private-root-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        let root = t.join("a/root");
        private_root(&root).unwrap();
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o7777, 0o700);
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_root(&root).unwrap();
        assert_eq!(std::fs::metadata(&root).unwrap().mode() & 0o7777, 0o700, "fixed on use");
        std::fs::write(t.join("file"), b"").unwrap();
        assert!(private_root(&t.join("file")).is_err(), "a file is refused");
        std::fs::remove_dir_all(&t).unwrap();
    }
}
