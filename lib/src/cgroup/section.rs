//! The record's `cgroup` section: its type, the figures it reads back, and `section()`, which refuses a
//! section naming anything but this session's cgroups.

use super::{detect, Limits, PARENT};
use crate::error::{Error, Result};
use crate::record::Session;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The record member this module owns.
pub const SECTION: &str = "cgroup";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Version {
    V1,
    V2,
}

/// The record's `cgroup` section.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Section {
    pub version: Version,
    /// Hierarchy key (v1: controller name; v2: "unified") -> the session's directory.
    pub paths: BTreeMap<String, PathBuf>,
    /// The same cgroups named as /proc/PID/cgroup shows them (relative to each hierarchy's root).
    pub proc_paths: BTreeMap<String, String>,
    pub requested: Limits,
    /// Limits as read back from the kernel, `null` with a reason in `why_null` when it gives none.
    pub read_back: Figures,
    /// Every read-back limit equals the request (memory rounded down to whole pages, as the kernel does).
    pub applied: bool,
    /// Processes moved in at creation; `null` when the session had no namespaces yet.
    pub processes_moved: Option<u64>,
    pub created_at: f64,
    /// Members of later versions, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Section {
    /// The session's cgroup in each hierarchy, as /proc/PID/cgroup names it, with the hierarchy's
    /// controller: v1 one per controller; v2 the unified hierarchy's alone, which has no controller name
    /// (None).
    pub fn roots(&self) -> Vec<(Option<&str>, &str)> {
        match self.version {
            Version::V1 => self.proc_paths.iter().map(|(c, p)| (Some(c.as_str()), p.as_str())).collect(),
            Version::V2 => self.proc_paths.get("unified").map(|p| (None, p.as_str())).into_iter().collect(),
        }
    }
}

/// Figures read from the kernel: a value, or `null` and why. As JSON: `{name: value, ..., "why_null":
/// {name: reason}}`.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    #[serde(flatten)]
    values: Map<String, Value>,
    #[serde(rename = "why_null", default)]
    why: Map<String, Value>,
}
impl Figures {
    pub fn put(&mut self, name: &str, r: std::result::Result<u64, String>) {
        match r {
            Ok(v) => {
                self.values.insert(name.into(), json!(v));
            }
            Err(why) => self.null(name, why),
        }
    }
    pub fn null(&mut self, name: &str, why: impl Into<String>) {
        self.values.insert(name.into(), Value::Null);
        self.why.insert(name.into(), json!(why.into()));
    }
    pub fn get(&self, name: &str) -> Option<u64> {
        self.values.get(name).and_then(Value::as_u64)
    }
    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
    /// The names of the figures that are null (the kernel gave none), in order.
    pub fn nulls(&self) -> impl Iterator<Item = &str> + '_ {
        self.values.iter().filter(|(_, v)| v.is_null()).map(|(k, _)| k.as_str())
    }
    /// Why figure `name` is null, as `why_null` gives it.
    pub fn why_null(&self, name: &str) -> Option<&str> {
        self.why.get(name).and_then(Value::as_str)
    }
    /// The figures as JSON.
    pub fn into_value(self) -> Value {
        serde_json::to_value(self).expect("figures serialize")
    }
}

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
