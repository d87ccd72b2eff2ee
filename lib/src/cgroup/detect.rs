//! Which cgroup hierarchies this machine has, as the kernel reports them: every mount of type `cgroup` or
//! `cgroup2` in /proc/self/mountinfo, each confirmed by the magic number statfs(2) gives for it, the v1
//! controllers a mount carries taken from its super options (checked against /proc/cgroups), the v2
//! controllers from the mount's `cgroup.controllers`. No decision is made from a file name.

use crate::error::{Error, IoContext, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The controllers a session's limits need.
pub const NEEDED: [&str; 3] = ["cpu", "memory", "pids"];
/// v1 controllers Drums makes a session directory in: the needed ones, cpuacct for CPU time, freezer to
/// freeze. cpu and cpuacct may be one hierarchy or two; both cases are handled.
pub const V1_USED: [&str; 5] = ["cpu", "cpuacct", "memory", "pids", "freezer"];

#[derive(Debug, Clone, PartialEq)]
pub struct Mount {
    /// Where it is mounted.
    pub path: PathBuf,
    /// The cgroup this mount shows as its root (mountinfo field 4), "/" for a whole hierarchy.
    pub root: String,
    /// v1: the controllers bound to this hierarchy; v2: those the root offers (cgroup.controllers).
    pub controllers: Vec<String>,
}

/// The cgroup mounts found, by file system type.
#[derive(Debug, Clone, Default)]
pub struct Mounts {
    pub v1: Vec<Mount>,
    pub v2: Vec<Mount>,
    /// Mounts mountinfo names as cgroup but statfs does not confirm (stale or shadowed): reported, unused.
    pub unconfirmed: Vec<PathBuf>,
}

/// What the session cgroups will be made in.
#[derive(Debug, Clone, PartialEq)]
pub enum Layout {
    /// controller -> hierarchy mount (cpu and cpuacct point at one mount when they share a hierarchy).
    V1 { mounts: BTreeMap<String, Mount> },
    V2 { mount: Mount },
}

pub fn statfs_magic(path: &Path) -> Result<i64> {
    let st = nix::sys::statfs::statfs(path).ctx("statfs", path)?;
    Ok(st.filesystem_type().0 as i64)
}
pub fn is_cgroup1(magic: i64) -> bool {
    magic == nix::sys::statfs::CGROUP_SUPER_MAGIC.0 as i64
}
pub fn is_cgroup2(magic: i64) -> bool {
    magic == nix::sys::statfs::CGROUP2_SUPER_MAGIC.0 as i64
}

/// Controllers the kernel knows and has enabled (/proc/cgroups: name, hierarchy, num_cgroups, enabled).
fn enabled_controllers() -> Result<Vec<String>> {
    let text = std::fs::read_to_string("/proc/cgroups").ctx("read", "/proc/cgroups")?;
    Ok(text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 4 && f[3] == "1").then(|| f[0].to_string())
        })
        .collect())
}

pub fn mounts() -> Result<Mounts> {
    let all = crate::mountinfo::read().ctx("read", "/proc/self/mountinfo")?;
    let known = enabled_controllers()?;
    let mut m = Mounts::default();
    for mi in all {
        let fstype = mi.fstype.as_str();
        if fstype != "cgroup" && fstype != "cgroup2" {
            continue;
        }
        let (path, root) = (mi.mount_point.clone(), mi.root.clone());
        let magic = match statfs_magic(&path) {
            Ok(x) => x,
            Err(_) => {
                m.unconfirmed.push(path);
                continue;
            }
        };
        if fstype == "cgroup" && is_cgroup1(magic) {
            let controllers =
                mi.super_options.split(',').filter(|o| known.iter().any(|k| k == o)).map(str::to_string).collect();
            m.v1.push(Mount { path, root, controllers });
        } else if fstype == "cgroup2" && is_cgroup2(magic) {
            let f = path.join("cgroup.controllers");
            let controllers = std::fs::read_to_string(&f).ctx("read", &f)?.split_whitespace().map(str::to_string).collect();
            m.v2.push(Mount { path, root, controllers });
        } else {
            m.unconfirmed.push(path);
        }
    }
    Ok(m)
}

impl Mounts {
    /// v2 when a cgroup2 mount offers every needed controller (on a v1 or hybrid host the v1 hierarchies
    /// hold them and cgroup2's `cgroup.controllers` is empty); else v1 when v1 hierarchies hold them all.
    pub fn layout(&self) -> Result<Layout> {
        let has_all = |m: &Mount| NEEDED.iter().all(|c| m.controllers.iter().any(|x| x == c));
        // A mount showing a sub-tree (a container's view) still works; prefer a whole hierarchy.
        let mut v2: Vec<&Mount> = self.v2.iter().filter(|m| has_all(m)).collect();
        v2.sort_by_key(|m| m.root != "/");
        if let Some(m) = v2.first() {
            return Ok(Layout::V2 { mount: (*m).clone() });
        }
        let mut mounts = BTreeMap::new();
        for c in V1_USED {
            let mut cands: Vec<&Mount> = self.v1.iter().filter(|m| m.controllers.iter().any(|x| x == c)).collect();
            cands.sort_by_key(|m| m.root != "/");
            if let Some(m) = cands.first() {
                mounts.insert(c.to_string(), (*m).clone());
            }
        }
        if NEEDED.iter().all(|c| mounts.contains_key(*c)) {
            return Ok(Layout::V1 { mounts });
        }
        Err(Error::env(format!(
            "no cgroup hierarchy offers {}: v1 hierarchies {:?}; cgroup2 mounts {:?}",
            NEEDED.join(", "),
            self.v1.iter().map(|m| format!("{} [{}]", m.path.display(), m.controllers.join(","))).collect::<Vec<_>>(),
            self.v2.iter().map(|m| format!("{} [{}]", m.path.display(), m.controllers.join(" "))).collect::<Vec<_>>(),
        )))
    }
}

pub fn layout() -> Result<Layout> {
    mounts()?.layout()
}

/// The cgroup of the unit `pipelines/drums-cgroups.service` (Delegate=yes): where Drums' `drums` parent
/// lives on a cgroup v2 host that systemd runs, unless DRUMS_CGROUP_BASE names another.
pub const SYSTEMD_BASE: &str = "/system.slice/drums-cgroups.service";

/// Where Drums' `drums` parent lives inside a cgroup v2 hierarchy, as a cgroup path below the mount ("/":
/// the mount's root). On v2 the hierarchy is one tree and, under systemd, systemd's: a process may write
/// only in a subtree systemd delegated to it (Delegate=yes), so Drums never writes above the base.
/// - `DRUMS_CGROUP_BASE` set: that cgroup (absolute, no `.` or `..`, an existing directory below the mount:
///   the delegation must exist; Drums does not make it);
/// - else, when systemd runs this boot (/run/systemd/system exists, sd_booted(3)'s test): SYSTEMD_BASE if
///   the unit is running, else an error naming the unit: Drums will not write at the root of a tree
///   systemd owns;
/// - else "/": the whole hierarchy is Drums' to use (a host without systemd, a container's own cgroup).
///
/// v1 hierarchies are unchanged (`<mount>/drums`): systemd delegates nothing there and Drums' hosts with v1
/// never ran it under a delegated subtree.
pub fn v2_base(mount: &Mount) -> Result<String> {
    let env = std::env::var("DRUMS_CGROUP_BASE").ok();
    choose_base(env.as_deref(), Path::new("/run/systemd/system").is_dir(), |rel| mount.path.join(rel.trim_start_matches('/')).is_dir())
}

/// The directory `drums` is made in, in this v2 mount.
pub fn v2_base_dir(mount: &Mount) -> Result<PathBuf> {
    Ok(mount.path.join(v2_base(mount)?.trim_start_matches('/')))
}

fn choose_base(env: Option<&str>, systemd: bool, is_dir: impl Fn(&str) -> bool) -> Result<String> {
    if let Some(v) = env {
        // Checked by its text: Path::components would quietly drop a `.` or an empty part.
        let normal = v == "/" || v.strip_prefix('/').is_some_and(|r| r.split('/').all(|c| !c.is_empty() && c != "." && c != ".."));
        if !normal {
            return Err(Error::usage(format!("DRUMS_CGROUP_BASE=`{v}`: want an absolute cgroup path without `.`, `..` or empty parts (e.g. {SYSTEMD_BASE})")));
        }
        if !is_dir(v) {
            return Err(Error::env(format!("DRUMS_CGROUP_BASE=`{v}`: no such cgroup below the cgroup2 mount (the delegated subtree must exist: start its unit)")));
        }
        return Ok(v.to_string());
    }
    if !systemd {
        return Ok("/".into());
    }
    if is_dir(SYSTEMD_BASE) {
        return Ok(SYSTEMD_BASE.into());
    }
    Err(Error::env(format!(
        "systemd runs this host's cgroup v2 tree, and Drums writes only in a subtree delegated to it: install and start \
         pipelines/drums-cgroups.service (its cgroup {SYSTEMD_BASE}, README \"Hosts\"), or name another delegated cgroup with DRUMS_CGROUP_BASE"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(path: &str, c: &[&str]) -> Mount {
        Mount { path: path.into(), root: "/".into(), controllers: c.iter().map(|s| s.to_string()).collect() }
    }

    #[test]
    fn hybrid_with_empty_cgroup2_is_v1() {
        let ms = Mounts {
            v1: vec![m("/c/cpu", &["cpu"]), m("/c/cpuacct", &["cpuacct"]), m("/c/memory", &["memory"]), m("/c/pids", &["pids"])],
            v2: vec![m("/c/unified", &[])],
            unconfirmed: vec![],
        };
        match ms.layout().unwrap() {
            Layout::V1 { mounts } => {
                assert_eq!(mounts["cpuacct"].path, PathBuf::from("/c/cpuacct"));
                assert!(!mounts.contains_key("freezer"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cgroup2_with_controllers_is_v2_and_nothing_is_an_error() {
        let ms = Mounts { v1: vec![], v2: vec![m("/c", &["cpuset", "cpu", "io", "memory", "pids"])], unconfirmed: vec![] };
        assert!(matches!(ms.layout().unwrap(), Layout::V2 { .. }));
        let ms = Mounts { v1: vec![m("/c/cpu,cpuacct", &["cpu", "cpuacct"])], v2: vec![], unconfirmed: vec![] };
        assert!(matches!(ms.layout(), Err(Error::Environment(_))));
    }

    #[test]
    fn the_v2_base_is_named_delegated_or_the_root() {
        let exists = |p: &str| ["/", SYSTEMD_BASE, "/user.slice/user-1000.slice/drums.scope"].contains(&p);
        let none = |_: &str| false;
        // No systemd: the whole tree.
        assert_eq!(choose_base(None, false, exists).unwrap(), "/");
        // systemd and its unit: the unit's cgroup; without the unit: refused, never the root.
        assert_eq!(choose_base(None, true, exists).unwrap(), SYSTEMD_BASE);
        let e = choose_base(None, true, none).unwrap_err();
        assert!(matches!(e, Error::Environment(_)) && e.to_string().contains("drums-cgroups.service"), "{e}");
        // A base named: taken as is, systemd or not, when it exists.
        for sd in [false, true] {
            assert_eq!(choose_base(Some("/user.slice/user-1000.slice/drums.scope"), sd, exists).unwrap(), "/user.slice/user-1000.slice/drums.scope");
        }
        assert!(matches!(choose_base(Some("/system.slice/gone.service"), true, exists), Err(Error::Environment(_))));
        for bad in ["system.slice/x", "/a/../b", "/a/./b", "/a//b", "/a/", ""] {
            assert!(matches!(choose_base(Some(bad), false, |_: &str| true), Err(Error::Usage(_))), "{bad}");
        }
    }

    /// The real machine: whatever it is, detection must agree with statfs of each chosen mount.
    #[test]
    fn this_machine_is_detected_from_statfs() {
        let ms = mounts().unwrap();
        for mt in &ms.v1 {
            assert!(is_cgroup1(statfs_magic(&mt.path).unwrap()), "{}", mt.path.display());
        }
        for mt in &ms.v2 {
            assert!(is_cgroup2(statfs_magic(&mt.path).unwrap()), "{}", mt.path.display());
        }
    }
}
