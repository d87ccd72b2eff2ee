//! cgroup v2: one directory in the unified hierarchy, controllers passed down through
//! cgroup.subtree_control of the base (the mount's root, or the subtree delegated to Drums) and of `drums`, the limits in cpu.max, memory.max,
//! memory.swap.max and pids.max, telemetry from memory.peak and cpu.stat.

use super::files::{ensure_dir, CgroupFs, KERNEL, page_size, read_keyed, read_str, read_u64, read_u64_newer, wait_until, write_str};
use super::{detect::NEEDED, Backend, Figures, Limits, Version};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub(crate) struct V2 {
    dir: PathBuf,
    /// The parent of `drums`: the mount's root, or the subtree delegated to Drums (detect::v2_base).
    base: PathBuf,
    paths: BTreeMap<String, PathBuf>,
    fs: &'static dyn CgroupFs,
}

impl V2 {
    pub(crate) fn new(dir: PathBuf, base: PathBuf) -> V2 {
        V2::on(dir, base, &KERNEL)
    }
    /// On the cgroup file system `fs` (the kernel's, or a fake in unit tests).
    pub(crate) fn on(dir: PathBuf, base: PathBuf, fs: &'static dyn CgroupFs) -> V2 {
        let paths = BTreeMap::from([("unified".to_string(), dir.clone())]);
        V2 { dir, base, paths, fs }
    }
    fn f(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    fn swap(&self) -> Option<PathBuf> {
        Some(self.f("memory.swap.max")).filter(|p| self.fs.exists(p))
    }
}

/// Enable the needed controllers for the children of `d`, writing only those not yet enabled.
fn enable_controllers(fs: &dyn CgroupFs, d: &Path) -> Result<()> {
    let f = d.join("cgroup.subtree_control");
    let have = read_str(fs, &f)?;
    let missing: Vec<String> =
        NEEDED.iter().filter(|c| !have.split_whitespace().any(|h| h == **c)).map(|c| format!("+{c}")).collect();
    if missing.is_empty() {
        return Ok(());
    }
    write_str(fs, &f, &missing.join(" "))
}

/// "max" is no limit: null with a reason.
fn put_max(fs: &dyn CgroupFs, f: &mut Figures, name: &str, p: &Path) {
    match read_str(fs, p) {
        Ok(s) if s == "max" => f.null(name, format!("{} is `max`: no limit", p.display())),
        Ok(s) => f.put(name, s.parse().map_err(|_| format!("{}: `{s}` is not a number", p.display()))),
        Err(e) => f.null(name, e.to_string()),
    }
}

impl Backend for V2 {
    fn version(&self) -> Version {
        Version::V2
    }
    fn fs(&self) -> &'static dyn CgroupFs {
        self.fs
    }
    fn paths(&self) -> &BTreeMap<String, PathBuf> {
        &self.paths
    }
    fn prepare_parent(&self, dir: &Path) -> Result<()> {
        let parent = dir.parent().expect("session cgroups have a parent");
        // A controller reaches a cgroup only if every ancestor passes it down. Above the base is not Drums'
        // to write: a delegated base gets its controllers from whoever delegated it (systemd, for
        // Delegate=yes), and an error here says which one is missing.
        enable_controllers(self.fs, &self.base)?;
        ensure_dir(self.fs, parent)?;
        enable_controllers(self.fs, parent)
    }
    fn apply(&self, l: &Limits) -> Result<()> {
        write_str(self.fs, &self.f("cpu.max"), &format!("{} {}", l.cpu_quota_us, l.cpu_period_us))?;
        write_str(self.fs, &self.f("memory.max"), &l.memory_bytes.to_string())?;
        if let Some(sw) = self.swap() {
            // v1's memsw = memory, said the v2 way: no swap beyond the memory limit.
            write_str(self.fs, &sw, "0")?;
        }
        write_str(self.fs, &self.f("pids.max"), &l.pids_max.to_string())
    }
    fn read_back(&self) -> Figures {
        let mut f = Figures::default();
        let p = self.f("cpu.max");
        match read_str(self.fs, &p) {
            Ok(s) => {
                let mut w = s.split_whitespace();
                match w.next() {
                    Some("max") => f.null("cpu_quota_us", format!("{} is `{s}`: no quota", p.display())),
                    Some(q) => f.put("cpu_quota_us", q.parse().map_err(|_| format!("{}: `{s}`", p.display()))),
                    None => f.null("cpu_quota_us", format!("{}: empty", p.display())),
                }
                f.put("cpu_period_us", w.next().and_then(|x| x.parse().ok()).ok_or_else(|| format!("{}: `{s}`", p.display())));
            }
            Err(e) => {
                f.null("cpu_quota_us", e.to_string());
                f.null("cpu_period_us", e.to_string());
            }
        }
        put_max(self.fs, &mut f, "memory_bytes", &self.f("memory.max"));
        match self.swap() {
            Some(p) => put_max(self.fs, &mut f, "swap_max_bytes", &p),
            None => f.null("swap_max_bytes", "no memory.swap.max: this kernel does not account swap"),
        }
        put_max(self.fs, &mut f, "pids_max", &self.f("pids.max"));
        f
    }
    fn mismatches(&self, l: &Limits, rb: &Figures) -> Vec<String> {
        let mut want = vec![
            ("cpu_quota_us", l.cpu_quota_us),
            ("cpu_period_us", l.cpu_period_us),
            ("memory_bytes", l.memory_bytes / page_size() * page_size()),
            ("pids_max", l.pids_max),
        ];
        if self.swap().is_some() {
            want.push(("swap_max_bytes", 0));
        }
        want.into_iter().filter(|(k, v)| rb.get(k) != Some(*v)).map(|(k, _)| k.to_string()).collect()
    }
    fn set_frozen(&self, frozen: bool) -> Result<()> {
        let f = self.f("cgroup.freeze");
        if !self.fs.exists(&f) {
            return Err(Error::env(format!("{}: absent (the v2 freezer needs Linux 5.2)", f.display())));
        }
        write_str(self.fs, &f, if frozen { "1" } else { "0" })?;
        let ev = self.f("cgroup.events");
        let want = if frozen { 1 } else { 0 };
        wait_until(&format!("wait for `frozen {want}`"), &ev, crate::state::scaled(super::FREEZE_TIMEOUT), || {
            Ok(read_keyed(self.fs, &ev, "frozen").map_err(Error::failed)? == want)
        })
    }
    fn frozen_state(&self) -> Result<String> {
        let ev = self.f("cgroup.events");
        Ok(match read_keyed(self.fs, &ev, "frozen").map_err(Error::failed)? {
            1 => "frozen".into(),
            _ if read_str(self.fs, &self.f("cgroup.freeze"))? == "1" => "freezing".into(),
            _ => "thawed".into(),
        })
    }
    fn sample(&self) -> Figures {
        let mut f = Figures::default();
        f.put("memory_current_bytes", read_u64(self.fs, &self.f("memory.current")));
        let peak = self.f("memory.peak");
        if self.fs.exists(&peak) {
            f.put("memory_peak_bytes", read_u64(self.fs, &peak));
        } else {
            f.null("memory_peak_bytes", format!("{}: absent (the kernel keeps no v2 peak before Linux 5.19)", peak.display()));
        }
        f.put("memory_limit_hits", read_keyed(self.fs, &self.f("memory.events"), "max"));
        f.put("oom_kills", read_keyed(self.fs, &self.f("memory.events"), "oom_kill"));
        let stat = self.f("cpu.stat");
        f.put("cpu_usage_ns", read_keyed(self.fs, &stat, "usage_usec").map(|u| u * 1000));
        f.put("cpu_throttled_ns", read_keyed(self.fs, &stat, "throttled_usec").map(|u| u * 1000));
        f.put("cpu_nr_throttled", read_keyed(self.fs, &stat, "nr_throttled"));
        f.put("tasks", read_u64(self.fs, &self.f("pids.current")));
        f.put("tasks_peak", read_u64_newer(self.fs, &self.f("pids.peak")));
        f
    }
    fn procs_dir(&self) -> &Path {
        &self.dir
    }
    fn freezer_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }
}
