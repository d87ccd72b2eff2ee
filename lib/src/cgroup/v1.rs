//! cgroup v1: one directory per hierarchy (cpu, cpuacct, memory, pids, freezer; cpu and cpuacct may share
//! one), the limits in the v1 files, telemetry from memory.max_usage_in_bytes and cpuacct.usage.

use super::files::{ensure_dir, CgroupFs, KERNEL, page_size, read_keyed, read_str, read_u64, read_u64_newer, wait_until, write_str};
use super::{Backend, Figures, Limits, Version};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// v1 reports "no memory limit" as PAGE_COUNTER_MAX pages (9223372036854771712 with 4 KiB pages).
const UNLIMITED: u64 = 1 << 62;

pub(crate) struct V1 {
    paths: BTreeMap<String, PathBuf>,
    procs_dir: PathBuf,
    fs: &'static dyn CgroupFs,
}

impl V1 {
    pub(crate) fn new(paths: BTreeMap<String, PathBuf>) -> V1 {
        V1::on(paths, &KERNEL)
    }
    /// On the cgroup file systems `fs` (the kernel's, or a fake in unit tests).
    pub(crate) fn on(paths: BTreeMap<String, PathBuf>, fs: &'static dyn CgroupFs) -> V1 {
        let procs_dir = ["pids", "memory", "cpu"]
            .iter()
            .find_map(|c| paths.get(*c))
            .or_else(|| paths.values().next())
            .cloned()
            .unwrap_or_default();
        V1 { paths, procs_dir, fs }
    }
    fn dir(&self, ctrl: &str) -> Result<&Path> {
        self.paths
            .get(ctrl)
            .map(PathBuf::as_path)
            .ok_or_else(|| Error::env(format!("no cgroup v1 `{ctrl}` hierarchy is mounted on this machine")))
    }
    fn file(&self, ctrl: &str, name: &str) -> std::result::Result<PathBuf, String> {
        self.dir(ctrl).map(|d| d.join(name)).map_err(|e| e.to_string())
    }
    fn memsw(&self) -> Option<PathBuf> {
        self.paths.get("memory").map(|d| d.join("memory.memsw.limit_in_bytes")).filter(|p| self.fs.exists(p))
    }
}

impl Backend for V1 {
    fn version(&self) -> Version {
        Version::V1
    }
    fn fs(&self) -> &'static dyn CgroupFs {
        self.fs
    }
    fn paths(&self) -> &BTreeMap<String, PathBuf> {
        &self.paths
    }
    fn prepare_parent(&self, dir: &Path) -> Result<()> {
        ensure_dir(self.fs, dir.parent().expect("session cgroups have a parent"))
    }
    fn apply(&self, l: &Limits) -> Result<()> {
        let cpu = self.dir("cpu")?;
        // The period first: the kernel checks the quota against it.
        write_str(self.fs, &cpu.join("cpu.cfs_period_us"), &l.cpu_period_us.to_string())?;
        write_str(self.fs, &cpu.join("cpu.cfs_quota_us"), &l.cpu_quota_us.to_string())?;
        let mem = self.dir("memory")?;
        // memory before memsw: memsw may never be below memory, and both start unlimited.
        write_str(self.fs, &mem.join("memory.limit_in_bytes"), &l.memory_bytes.to_string())?;
        if let Some(sw) = self.memsw() {
            // memory + swap = memory: the session gets no swap beyond its memory limit.
            write_str(self.fs, &sw, &l.memory_bytes.to_string())?;
        }
        write_str(self.fs, &self.dir("pids")?.join("pids.max"), &l.pids_max.to_string())?;
        Ok(())
    }
    fn read_back(&self) -> Figures {
        let mut f = Figures::default();
        match self.file("cpu", "cpu.cfs_quota_us").and_then(|p| read_str(self.fs, &p).map_err(|e| e.to_string())) {
            Ok(s) if s == "-1" => f.null("cpu_quota_us", "cpu.cfs_quota_us is -1: no quota"),
            Ok(s) => f.put("cpu_quota_us", s.parse().map_err(|_| format!("cpu.cfs_quota_us: `{s}` is not a number"))),
            Err(e) => f.null("cpu_quota_us", e),
        }
        f.put("cpu_period_us", self.file("cpu", "cpu.cfs_period_us").and_then(|p| read_u64(self.fs, &p)));
        match self.file("memory", "memory.limit_in_bytes").and_then(|p| read_u64(self.fs, &p)) {
            Ok(v) if v >= UNLIMITED => f.null("memory_bytes", format!("memory.limit_in_bytes is {v}: no limit")),
            r => f.put("memory_bytes", r),
        }
        match self.memsw() {
            None => f.null("memsw_bytes", "no memory.memsw.limit_in_bytes: this kernel does not account swap"),
            Some(p) => match read_u64(self.fs, &p) {
                Ok(v) if v >= UNLIMITED => f.null("memsw_bytes", format!("memory.memsw.limit_in_bytes is {v}: no limit")),
                r => f.put("memsw_bytes", r),
            },
        }
        match self.file("pids", "pids.max").and_then(|p| read_str(self.fs, &p).map_err(|e| e.to_string())) {
            Ok(s) if s == "max" => f.null("pids_max", "pids.max is `max`: no limit"),
            Ok(s) => f.put("pids_max", s.parse().map_err(|_| format!("pids.max: `{s}` is not a number"))),
            Err(e) => f.null("pids_max", e),
        }
        f
    }
    fn mismatches(&self, l: &Limits, rb: &Figures) -> Vec<String> {
        let mem = l.memory_bytes / page_size() * page_size();
        let mut want = vec![
            ("cpu_quota_us", l.cpu_quota_us),
            ("cpu_period_us", l.cpu_period_us),
            ("memory_bytes", mem),
            ("pids_max", l.pids_max),
        ];
        if self.memsw().is_some() {
            want.push(("memsw_bytes", mem));
        }
        want.into_iter().filter(|(k, v)| rb.get(k) != Some(*v)).map(|(k, _)| k.to_string()).collect()
    }
    fn set_frozen(&self, frozen: bool) -> Result<()> {
        let f = self.dir("freezer")?.join("freezer.state");
        let want = if frozen { "FROZEN" } else { "THAWED" };
        write_str(self.fs, &f, want)?;
        // FREEZING lasts until every task has stopped.
        wait_until(&format!("wait for {want}"), &f, crate::state::scaled(super::FREEZE_TIMEOUT), || Ok(read_str(self.fs, &f)? == want))
    }
    fn frozen_state(&self) -> Result<String> {
        Ok(read_str(self.fs, &self.dir("freezer")?.join("freezer.state"))?.to_lowercase())
    }
    fn sample(&self) -> Figures {
        let mut f = Figures::default();
        f.put("memory_current_bytes", self.file("memory", "memory.usage_in_bytes").and_then(|p| read_u64(self.fs, &p)));
        f.put("memory_peak_bytes", self.file("memory", "memory.max_usage_in_bytes").and_then(|p| read_u64(self.fs, &p)));
        f.put("memory_limit_hits", self.file("memory", "memory.failcnt").and_then(|p| read_u64(self.fs, &p)));
        // With memsw = memory, the memory+swap counter is usually the one that reaches its limit first.
        match self.paths.get("memory").map(|d| d.join("memory.memsw.failcnt")).filter(|p| self.fs.exists(p)) {
            Some(p) => f.put("memsw_limit_hits", read_u64(self.fs, &p)),
            None => f.null("memsw_limit_hits", "no memory.memsw.failcnt: this kernel does not account swap"),
        }
        f.put("oom_kills", self.file("memory", "memory.oom_control").and_then(|p| read_keyed(self.fs, &p, "oom_kill")));
        match self.paths.get("cpuacct") {
            Some(d) => f.put("cpu_usage_ns", read_u64(self.fs, &d.join("cpuacct.usage"))),
            None => f.null("cpu_usage_ns", "no cgroup v1 cpuacct hierarchy on this machine: the kernel counts no per-cgroup CPU time"),
        }
        f.put("cpu_throttled_ns", self.file("cpu", "cpu.stat").and_then(|p| read_keyed(self.fs, &p, "throttled_time")));
        f.put("cpu_nr_throttled", self.file("cpu", "cpu.stat").and_then(|p| read_keyed(self.fs, &p, "nr_throttled")));
        f.put("tasks", self.file("pids", "pids.current").and_then(|p| read_u64(self.fs, &p)));
        f.put("tasks_peak", self.file("pids", "pids.peak").and_then(|p| read_u64_newer(self.fs, &p)));
        f
    }
    fn procs_dir(&self) -> &Path {
        &self.procs_dir
    }
    fn freezer_dir(&self) -> Option<&Path> {
        self.paths.get("freezer").map(PathBuf::as_path)
    }
}
