//! Per-session cgroups on cgroup v1 and v2 behind one interface (`Backend`), the version chosen from what
//! the kernel reports for each mount (detect.rs): create a session's cgroups with CPU, memory and pids
//! limits, move the session's processes in, read every limit back from the kernel into the record, freeze
//! and thaw, sample telemetry, and remove the directories again, in every hierarchy, after a failure too.
//!
//! Names: a session's cgroup is `<hierarchy mount>/drums/<session id>` in each hierarchy used (v1: cpu,
//! cpuacct, memory, pids, freezer; v2: the one cgroup2 mount). The `drums` parent is how the sweep knows an
//! unledgered directory is Drums'; nothing outside it is ever created, written or removed. Every directory
//! is written to the session's ledger before mkdir and released after rmdir.
//!
//! The record's `cgroup` section is documented field by field in docs/record.md.
//!
//! Here: the `Backend` interface and how a backend is made. Beside it: limits.rs (the limits and their
//! defaults), section.rs (the record's section, checked), lifecycle.rs (create, enter, freeze, remove),
//! telemetry.rs (read-back and samples), files.rs (the file operations, the one privileged seam, behind
//! `CgroupFs`), detect.rs, v1.rs, v2.rs. The unit tests in tests.rs run v1, v2 and the lifecycle on a
//! recording fake of `CgroupFs` (no root, no kernel): what is written, where, and in which order.

pub mod detect;
mod files;
mod lifecycle;
mod limits;
mod section;
mod telemetry;
mod v1;
mod v2;
#[cfg(test)]
mod tests;

use crate::error::Result;
use files::{read_procs, write_str, CgroupFs};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub use detect::Layout;
pub(crate) use lifecycle::{remove_empty_parent, rmdir_when_left};
pub use lifecycle::{create, enter, enter_all, freeze, freezer_dir, frozen_state, prepare_restore, remove, remove_path, thaw, FREEZE_TIMEOUT, REMOVE_RETRY};
pub use limits::{Limits, DEFAULT_CPUS, DEFAULT_MEMORY, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS};
pub use section::{section, Figures, Section, Version, SECTION};
pub use telemetry::{read_back, sample, sample_among, watch, AllCounters, Sample, SAMPLE};

/// The parent directory of every session cgroup, in every hierarchy.
pub const PARENT: &str = crate::state::NAME_PREFIX;

/// What differs between cgroup v1 and v2. Everything else (ledger, record, process moves, retries)
/// is written once.
pub(crate) trait Backend {
    fn version(&self) -> Version;
    /// The file system its operations go to: the kernel's, or a recording fake in unit tests.
    fn fs(&self) -> &'static dyn CgroupFs;
    /// Hierarchy key -> session directory.
    fn paths(&self) -> &BTreeMap<String, PathBuf>;
    /// Make the `drums` parent of `dir` ready (exists; on v2 passes the controllers down).
    fn prepare_parent(&self, dir: &Path) -> Result<()>;
    fn apply(&self, l: &Limits) -> Result<()>;
    fn read_back(&self) -> Figures;
    /// Names of read-back figures that do not equal what `l` asked for.
    fn mismatches(&self, l: &Limits, rb: &Figures) -> Vec<String>;
    fn set_frozen(&self, frozen: bool) -> Result<()>;
    /// "frozen", "thawed" or a transitional state as the kernel reports it.
    fn frozen_state(&self) -> Result<String>;
    fn sample(&self) -> Figures;
    /// The directory whose cgroup.procs lists the session's processes for telemetry.
    fn procs_dir(&self) -> &Path;
    /// The cgroup to freeze for CRIU's --freeze-cgroup, if any.
    fn freezer_dir(&self) -> Option<&Path>;

    /// Each directory once (cpu and cpuacct share one when they share a hierarchy).
    fn dirs(&self) -> Vec<PathBuf> {
        let mut seen = BTreeSet::new();
        self.paths().values().filter(|p| seen.insert((*p).clone())).cloned().collect()
    }
    fn enter(&self, pid: i32) -> Result<()> {
        for d in self.dirs() {
            write_str(self.fs(), &d.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }
    /// Processes present in every one of the session's directories.
    fn procs_everywhere(&self) -> Result<BTreeSet<i32>> {
        let mut acc: Option<BTreeSet<i32>> = None;
        for d in self.dirs() {
            let s: BTreeSet<i32> = read_procs(self.fs(), &d)?.into_iter().collect();
            acc = Some(match acc {
                None => s,
                Some(a) => a.intersection(&s).copied().collect(),
            });
        }
        Ok(acc.unwrap_or_default())
    }
}

// ---- from the machine or from a record to a backend ----

fn backend_for_new(layout: &Layout, id: &str) -> Result<(Box<dyn Backend>, BTreeMap<String, String>)> {
    Ok(match layout {
        Layout::V1 { mounts } => {
            let mut paths = BTreeMap::new();
            let mut proc_paths = BTreeMap::new();
            for (c, m) in mounts {
                paths.insert(c.clone(), m.path.join(PARENT).join(id));
                proc_paths.insert(c.clone(), join_root(&m.root, id));
            }
            (Box::new(v1::V1::new(paths)), proc_paths)
        }
        Layout::V2 { mount } => {
            // Inside the subtree Drums was given (detect::v2_base): under systemd, its delegated unit.
            let base = detect::v2_base(mount)?;
            let base_dir = mount.path.join(base.trim_start_matches('/'));
            let dir = base_dir.join(PARENT).join(id);
            let root = format!("{}{}", mount.root.trim_end_matches('/'), if base == "/" { "" } else { base.as_str() });
            let proc_paths = BTreeMap::from([("unified".to_string(), join_root(&root, id))]);
            (Box::new(v2::V2::new(dir, base_dir)), proc_paths)
        }
    })
}
fn join_root(root: &str, id: &str) -> String {
    format!("{}/{PARENT}/{id}", root.trim_end_matches('/'))
}

fn backend_of(sec: &Section) -> Box<dyn Backend> {
    match sec.version {
        Version::V1 => Box::new(v1::V1::new(sec.paths.clone())),
        Version::V2 => {
            let dir = sec.paths["unified"].clone();
            // `<base>/drums/<id>`: the base is the mount's root or the delegated subtree it was made in.
            let base = dir.parent().and_then(Path::parent).unwrap_or(Path::new("/")).to_path_buf();
            Box::new(v2::V2::new(dir, base))
        }
    }
}
