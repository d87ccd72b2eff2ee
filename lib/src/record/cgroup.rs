//! The `cgroup` section of a session record (written by crate::cgroup): the limits asked for and the
//! figures read back from the kernel. docs/record.md, "The cgroup section".

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

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

/// The limits asked for, in the kernel's own units.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub cpu_quota_us: u64,
    pub cpu_period_us: u64,
    pub memory_bytes: u64,
    pub pids_max: u64,
}
