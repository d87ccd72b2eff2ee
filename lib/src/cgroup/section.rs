//! The record's `cgroup` section: its type, the figures it reads back, and `section()`, which refuses a
//! section naming anything but this session's cgroups.

use super::{detect, PARENT};
use crate::error::{Error, Result};
use crate::record::Session;
use std::path::Path;
pub use crate::record::cgroup::{Figures, Section, Version};

/// The record member this module owns.
pub const SECTION: &str = "cgroup";





/// Whether `p` is named like a session cgroup: `.../drums/<id>`.
pub(super) fn is_session_cgroup_name(p: &Path) -> bool {
    let name_ok = p.file_name().and_then(|n| n.to_str()).map(|n| crate::state::check_session_id(n).is_ok()).unwrap_or(false);
    let parent_ok = p.parent().and_then(|q| q.file_name()).map(|n| n == PARENT).unwrap_or(false);
    p.is_absolute() && name_ok && parent_ok && !p.components().any(|c| matches!(c, std::path::Component::ParentDir))
}

/// The session's section, checked: every path is `.../drums/<this session's id>` and, where it exists,
/// on a file system of the recorded cgroup version. A record naming anything else is refused.
pub fn section(session: &Session) -> Result<Option<Section>> {
    let Some(sec) = session.cgroup.clone() else { return Ok(None) };
    if sec.paths.is_empty() {
        return Err(Error::bad_field("cgroup.paths", "empty"));
    }
    for (k, p) in &sec.paths {
        if !is_session_cgroup_name(p) || p.file_name().and_then(|n| n.to_str()) != Some(session.id.as_str()) {
            return Err(Error::bad_field(
                format!("cgroup.paths.{k}"),
                format!("{} is not a cgroup of session {} (expected .../{PARENT}/{})", p.display(), session.id, session.id),
            ));
        }
        if p.exists() {
            let magic = detect::statfs_magic(p)?;
            let ok = match sec.version {
                Version::V1 => detect::is_cgroup1(magic),
                Version::V2 => detect::is_cgroup2(magic),
            };
            if !ok {
                return Err(Error::bad_field(
                    format!("cgroup.paths.{k}"),
                    format!("{} is not on a cgroup {:?} file system (statfs magic {magic:#x})", p.display(), sec.version),
                ));
            }
        }
    }
    if sec.version == Version::V2 && !sec.paths.contains_key("unified") {
        return Err(Error::bad_field("cgroup.paths", "a v2 section needs `unified`"));
    }
    Ok(Some(sec))
}

pub(super) fn require_section(session: &Session) -> Result<Section> {
    section(session)?.ok_or_else(|| Error::bad_field(SECTION, "missing: run drums-cgroup create first"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::remove_path;

    #[test]
    fn session_cgroup_names() {
        assert!(is_session_cgroup_name(Path::new("/sys/fs/cgroup/memory/drums/d-0123456789ab")));
        assert!(!is_session_cgroup_name(Path::new("/sys/fs/cgroup/memory/d-0123456789ab")));
        assert!(!is_session_cgroup_name(Path::new("/sys/fs/cgroup/memory/drums/..")));
        assert!(!is_session_cgroup_name(Path::new("drums/d-1")));
        assert!(matches!(remove_path(Path::new("/etc/drums/x")), Err(Error::BadInput { .. })));
    }
}
