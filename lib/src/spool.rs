//! A pool's spool on disk (drums-pool(7), "The spool"): `<pools root>/<checkpoint id>/` with `tmp/`,
//! `ready/` (parked siblings' records, `<parked ms>.<session id>.json`), `taken/` and `fill.lock`. Read
//! by the pool and by the sweep, which must tell a parked sibling from an orphan.

use crate::error::{Error, IoContext, Result};
use std::path::{Path, PathBuf};

/// The spool of one checkpoint's pool.
#[derive(Debug, Clone)]
pub struct Spool {
    pub checkpoint: String,
    pub dir: PathBuf,
}

/// A parked sibling's file in `ready/`.
#[derive(Debug, Clone)]
pub struct ParkedFile {
    pub path: PathBuf,
    pub parked_ms: u64,
    pub session: String,
}

/// `<parked ms>.<session id>.json` → (ms, id).
fn parse_name(name: &str) -> Option<(u64, String)> {
    let (ms, rest) = name.split_once('.')?;
    let id = rest.strip_suffix(".json")?;
    let ms = ms.parse().ok().filter(|_| ms.bytes().all(|b| b.is_ascii_digit()))?;
    crate::state::check_session_id(id).ok()?;
    Some((ms, id.to_string()))
}

impl Spool {
    pub fn of(checkpoint: &str) -> Result<Spool> {
        crate::state::check_checkpoint_id(checkpoint).map_err(Error::bad_input)?;
        Ok(Spool { checkpoint: checkpoint.to_string(), dir: crate::state::pools_root().join(checkpoint) })
    }
    pub fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }
    pub fn ready(&self) -> PathBuf {
        self.dir.join("ready")
    }
    pub fn taken(&self) -> PathBuf {
        self.dir.join("taken")
    }
    pub fn lock_path(&self) -> PathBuf {
        self.dir.join("fill.lock")
    }

    pub(crate) fn make(&self) -> Result<()> {
        crate::state::private_root(&crate::state::state_root())?;
        for d in [self.tmp(), self.ready(), self.taken()] {
            std::fs::create_dir_all(&d).ctx("create directory", &d)?;
        }
        Ok(())
    }

    /// The parked siblings' files, oldest first.
    pub fn parked(&self) -> Vec<ParkedFile> {
        let mut v: Vec<ParkedFile> = std::fs::read_dir(self.ready())
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let (parked_ms, session) = parse_name(e.file_name().to_str()?)?;
                Some(ParkedFile { path: e.path(), parked_ms, session })
            })
            .collect();
        v.sort_by(|a, b| (a.parked_ms, &a.session).cmp(&(b.parked_ms, &b.session)));
        v
    }

    pub(crate) fn files_in(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect()
    }

    /// Remove the records in `taken/` whose session is destroyed.
    pub(crate) fn prune_taken(&self) {
        for f in Self::files_in(&self.taken()) {
            let gone = f.file_name().and_then(|n| n.to_str()).and_then(parse_name).is_none_or(|(_, id)| !crate::state::session_dir(&id).is_dir());
            if gone {
                let _ = std::fs::remove_file(&f);
            }
        }
    }
}

/// The file in any pool's `ready/` that holds session `id`'s record; None when no pool holds one (the
/// sweep's test of a parked session).
pub fn parked_record(pools: &Path, id: &str) -> Option<PathBuf> {
    for pool in std::fs::read_dir(pools).into_iter().flatten().flatten() {
        // Spools are only made under a checkpoint id.
        let Some(ckpt) = pool.file_name().to_str().filter(|n| crate::state::check_checkpoint_id(n).is_ok()).map(str::to_string) else { continue };
        let spool = Spool { checkpoint: ckpt, dir: pool.path() };
        if let Some(f) = spool.parked().into_iter().find(|f| f.session == id && f.path.is_file()) {
            return Some(f.path);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parked_file_names_are_read_strictly() {
        assert_eq!(parse_name("1700000000123.d-0123abcd.json"), Some((1700000000123, "d-0123abcd".into())));
        for bad in ["x.d-0123abcd.json", ".d-0123abcd.json", "12.d-0123abcd.json.tmp", "12.c-0123abcd.json", "12.d-../x.json", "+1.d-0a.json"] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }
}
