//! The assertions on the output of tests/cgroup-scenarios.sh, shared by the host tests (tests/cgroup.rs)
//! and the QEMU guest test (tests/cgroup_v2_qemu.rs), so both versions are held to the same bar.

use drums::cgroup::{Figures, Limits, Sample, Section, Version};
use drums::error::ErrorRecord;
use drums::ledger::{Entry, Resource};
use drums::record::Session;
use drums_tests::json as record_json;
use serde_json::Value;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;

/// `DRUMS-CG <scenario> <key> <value>` lines, found anywhere in a line (a guest console may prefix them).
pub struct Out {
    pub lines: Vec<(String, String, String)>,
    pub text: String,
}

impl Out {
    pub fn parse(text: &str) -> Out {
        let mut lines = vec![];
        for l in text.lines() {
            let Some(i) = l.find("DRUMS-CG ") else { continue };
            let mut w = l[i + 9..].trim_end_matches('\r').splitn(3, ' ');
            let (s, k, v) = (w.next().unwrap_or(""), w.next().unwrap_or(""), w.next().unwrap_or(""));
            lines.push((s.to_string(), k.to_string(), v.to_string()));
        }
        Out { lines, text: text.to_string() }
    }
    pub fn all(&self, s: &str, k: &str) -> Vec<&str> {
        self.lines.iter().filter(|(a, b, _)| a == s && b == k).map(|(_, _, v)| v.as_str()).collect()
    }
    pub fn one(&self, s: &str, k: &str) -> &str {
        let v = self.all(s, k);
        assert!(!v.is_empty(), "scenario {s}: no `{k}` line in the output:\n{}", self.context(s));
        v[v.len() - 1]
    }
    /// The test's own JSON (cgroup-probe's answers), not a Drums record.
    pub fn json(&self, s: &str, k: &str) -> Value {
        let t = self.one(s, k);
        serde_json::from_str(t).unwrap_or_else(|e| panic!("scenario {s}: `{k}` is not JSON ({e}): {t}"))
    }
    /// The last `k` line of scenario `s`, a record of type `T`.
    pub fn record<T: serde::de::DeserializeOwned>(&self, s: &str, k: &str) -> T {
        decode_in(s, k, self.one(s, k))
    }
    /// Every `k` line of scenario `s`, each a record of type `T`.
    pub fn records<T: serde::de::DeserializeOwned>(&self, s: &str, k: &str) -> Vec<T> {
        self.all(s, k).into_iter().map(|t| decode_in(s, k, t)).collect()
    }
    fn context(&self, s: &str) -> String {
        let mine: Vec<String> =
            self.lines.iter().filter(|(a, _, _)| a == s).map(|(a, b, c)| format!("{a} {b} {}", &c[..c.len().min(300)])).collect();
        if mine.is_empty() {
            let t = &self.text;
            format!("(no line of this scenario; output tail)\n{}", &t[t.len().saturating_sub(3000)..])
        } else {
            mine.join("\n")
        }
    }
    fn ok_exit(&self, s: &str, k: &str, want: i32) {
        let got = self.one(s, k);
        let err = self.all(s, &k.replace("-exit", "-err")).join(" ");
        assert_eq!(got, want.to_string(), "scenario {s}: {k} (stderr: {err})\n{}", self.context(s));
    }
    fn no_leftovers(&self, s: &str) {
        assert_eq!(self.one(s, "leftovers"), "0", "scenario {s}: directories left: {:?}", self.all(s, "leftover"));
    }
    /// Every cgroup the ledger says was created has been released, and there was at least one.
    fn ledger_released(&self, s: &str, k: &str) {
        let entries: Vec<Entry> = self.records(s, k);
        let cg = |release: bool| -> Vec<PathBuf> {
            let mut v: Vec<PathBuf> = entries
                .iter()
                .filter_map(|e| match e {
                    Entry::Create { res: Resource::Cgroup { path }, .. } if !release => Some(path.clone()),
                    Entry::Release { res: Resource::Cgroup { path }, .. } if release => Some(path.clone()),
                    _ => None,
                })
                .collect();
            v.sort();
            v
        };
        assert!(!cg(false).is_empty(), "scenario {s}: no cgroup in the ledger");
        assert_eq!(cg(false), cg(true), "scenario {s}: ledger creates and releases differ");
    }
    fn removed(&self, s: &str) {
        self.ok_exit(s, "remove-exit", 0);
        let r: Session = self.record(s, "removed-record");
        assert!(r.cgroup.is_none(), "scenario {s}: the removed record still has a cgroup section: {}", record_json(&r.cgroup));
        self.no_leftovers(s);
    }
}

/// One line of a scenario's output decoded into `T`, naming the scenario, the key and the member at fault.
fn decode_in<T: serde::de::DeserializeOwned>(s: &str, k: &str, t: &str) -> T {
    let mut de = serde_json::Deserializer::from_str(t.trim());
    serde_path_to_error::deserialize(&mut de)
        .unwrap_or_else(|e| panic!("scenario {s}: `{k}` is not a {} (at `{}`: {}): {t}", std::any::type_name::<T>(), e.path(), e.inner()))
}

/// The section's `read_back` figures.
pub fn read_back(sec: &Section) -> Figures {
    sec.read_back.clone()
}

/// The version the scenarios were run on, as the records name it.
fn version_of(version: &str) -> Version {
    match version {
        "v1" => Version::V1,
        "v2" => Version::V2,
        v => panic!("no cgroup version {v}"),
    }
}

/// Every null figure has its reason; no figure the kernel gives is absent.
fn nulls_explained(f: &Figures, what: &str) {
    for k in f.nulls() {
        assert!(f.why_null(k).is_some_and(|r| !r.is_empty()), "{what}: `{k}` is null without a reason: {}", record_json(f));
    }
}

/// Limits applied and read back equal the request (checked in the record and in the kernel's files), the
/// init is inside, the ledger names each directory, telemetry of a working session has non-null memory
/// peak and CPU time, and removal leaves nothing.
pub fn limits(o: &Out, version: &str) {
    let s = "limits";
    o.ok_exit(s, "create-exit", 0);
    let rec: Session = o.record(s, "record");
    let sec = rec.cgroup.as_ref().unwrap_or_else(|| panic!("scenario {s}: the record has no cgroup section: {}", record_json(&rec)));
    let sec_json = record_json(sec);
    assert_eq!(sec.version, version_of(version), "{sec_json}");
    let want = Limits { cpu_quota_us: 150000, cpu_period_us: 100000, memory_bytes: 256 * MIB, pids_max: 64 };
    assert_eq!(sec.requested, want, "{sec_json}");
    let rb = read_back(sec);
    for (k, v) in [("cpu_quota_us", want.cpu_quota_us), ("cpu_period_us", want.cpu_period_us), ("memory_bytes", want.memory_bytes), ("pids_max", want.pids_max)] {
        assert_eq!(rb.get(k), Some(v), "read_back.{k}: {sec_json}");
    }
    match version {
        "v1" => assert_eq!(rb.get("memsw_bytes"), Some(256 * MIB), "{sec_json}"),
        _ => assert_eq!(rb.get("swap_max_bytes"), Some(0), "{sec_json}"),
    }
    assert!(sec.applied, "{sec_json}");
    assert!(sec.processes_moved.unwrap() >= 1, "{sec_json}");
    nulls_explained(&rb, "read_back");

    // Straight from the kernel's files, not through drums-cgroup.
    let raw = o.all(s, "raw");
    let expect: &[&str] = match version {
        "v1" => &[
            "cpu.cfs_quota_us 150000",
            "cpu.cfs_period_us 100000",
            "memory.limit_in_bytes 268435456",
            "memory.memsw.limit_in_bytes 268435456",
            "pids.max 64",
        ],
        _ => &["cpu.max 150000 100000", "memory.max 268435456", "memory.swap.max 0", "pids.max 64"],
    };
    for e in expect {
        assert!(raw.contains(e), "kernel file `{e}` not seen; raw: {raw:?}");
    }

    // The init is in every one of the session's cgroups, as /proc/PID/cgroup names them.
    let pc = o.one(s, "proc-cgroup");
    for (ctrl, p) in &sec.proc_paths {
        let found = pc.split(';').any(|l| {
            let f: Vec<&str> = l.splitn(3, ':').collect();
            f.len() == 3 && f[2] == p && (if version == "v1" { f[1].split(',').any(|c| c == ctrl) } else { f[1].is_empty() })
        });
        assert!(found, "init not in {ctrl}:{p}; /proc/PID/cgroup: {pc}");
    }

    // Ledger before resource: one create per directory.
    let created: Vec<Entry> = o.records(s, "ledger-created");
    let mut dirs: Vec<&Path> = sec.paths.values().map(PathBuf::as_path).collect();
    dirs.sort();
    dirs.dedup();
    for d in &dirs {
        assert!(
            created.iter().any(|e| matches!(e, Entry::Create { res: Resource::Cgroup { path }, .. } if path == d)),
            "{} is not in the ledger",
            d.display()
        );
    }

    // Telemetry.
    o.ok_exit(s, "watch-exit", 0);
    // Decoding as Sample checks each record's type (cgroup::SampleType).
    let samples: Vec<Sample> = o.records(s, "sample");
    assert!(samples.len() >= 3, "only {} samples", samples.len());
    for x in &samples {
        assert_eq!(x.version, version_of(version), "{}", record_json(x));
        nulls_explained(&x.figures, "sample");
    }
    let last = samples.last().unwrap();
    let last_json = record_json(last);
    assert_eq!(last.last, Some(true), "the last sample is marked final: {last_json}");
    assert_eq!(last.init_alive, Some(false), "watch ends when the init is gone: {last_json}");
    let max = |k: &str| samples.iter().filter_map(|x| x.figures.get(k)).max();
    let peak = max("memory_peak_bytes").unwrap_or_else(|| panic!("memory_peak_bytes is null in every sample: {last_json}"));
    assert!((32 * MIB..=256 * MIB).contains(&peak), "memory peak {peak} (the session held 32 MiB, its limit is 256 MiB)");
    let cpu = max("cpu_usage_ns").unwrap_or_else(|| panic!("cpu_usage_ns is null in every sample: {last_json}"));
    assert!(cpu >= 1_500_000_000, "CPU time {cpu} ns after burning 1.5 s of CPU");
    assert!(max("processes").unwrap() >= 2 && max("tasks").unwrap() >= 2, "process counts: {samples:?}");
    if let Some(tp) = max("tasks_peak") {
        assert!(tp >= max("tasks").unwrap(), "pids.peak below a pids.current seen: {samples:?}");
    }

    o.removed(s);
    o.ledger_released(s, "ledger-removed");
}

/// A process inside exceeding pids.max gets EAGAIN.
pub fn pids(o: &Out) {
    let s = "pids";
    o.ok_exit(s, "create-exit", 0);
    // cgroup-probe fork-until-fail's own answer, not a Drums record.
    let f = o.json(s, "forks");
    assert_eq!(f["errno"], libc::EAGAIN, "fork beyond pids.max 16: {f}");
    let n = f["forked"].as_u64().unwrap();
    assert!((8..16).contains(&n), "forked {n} children under pids.max 16 (the shell and the prober count too)");
    o.removed(s);
}

/// A memory hog is contained: the session's own OOM killer ends it (exit 137) and the kernel's peak
/// stays at or under the limit.
pub fn hog(o: &Out) {
    let s = "hog";
    o.ok_exit(s, "create-exit", 0);
    assert_eq!(o.one(s, "hog-status"), "137", "a 1 GiB hog under a 64 MiB limit is killed with SIGKILL");
    let x: Sample = o.record(s, "sample");
    let x_json = record_json(&x);
    nulls_explained(&x.figures, "sample");
    let peak = x.figures.get("memory_peak_bytes").unwrap_or_else(|| panic!("no memory peak: {x_json}"));
    assert!((32 * MIB..=64 * MIB).contains(&peak), "peak {peak} with a 64 MiB limit");
    assert!(x.figures.get("oom_kills").unwrap_or(0) >= 1, "the kernel counts the OOM kill: {x_json}");
    assert_eq!(x.init_alive, Some(true), "the session's init survives its hog: {x_json}");
    o.removed(s);
}

/// Removal right after SIGKILL of the whole session leaves nothing.
pub fn sigkill(o: &Out) {
    let s = "sigkill";
    o.ok_exit(s, "create-exit", 0);
    o.removed(s);
    o.ledger_released(s, "ledger-removed");
}

pub fn freeze(o: &Out) {
    let s = "freeze";
    o.ok_exit(s, "create-exit", 0);
    o.ok_exit(s, "freeze-exit", 0);
    let st = o.all(s, "freezer-state");
    assert!(st.iter().any(|x| *x == "FROZEN" || *x == "frozen 1"), "kernel freezer state: {st:?}");
    let c: Vec<u64> = o.one(s, "frozen-count").split(' ').map(|x| x.parse().unwrap()).collect();
    assert!(c[0] > 0 && c[0] == c[1], "a frozen loop does not count: {c:?}");
    o.ok_exit(s, "thaw-exit", 0);
    let c: Vec<u64> = o.one(s, "thawed-count").split(' ').map(|x| x.parse().unwrap()).collect();
    assert!(c[1] > c[0], "a thawed loop counts again: {c:?}");
    o.removed(s);
}

/// A limit the kernel refuses: exit 5, the error names the file and keeps EINVAL, nothing is left and
/// the ledger releases what it recorded.
pub fn fail(o: &Out) {
    let s = "fail";
    o.ok_exit(s, "create-exit", 5);
    let e: ErrorRecord = o.record(s, "create-err");
    assert_eq!(e.errno, Some(libc::EINVAL), "{}", record_json(&e));
    let p = e.path.clone().unwrap_or_default();
    assert!(p.ends_with("cpu.cfs_quota_us") || p.ends_with("cpu.max"), "{}", record_json(&e));
    o.no_leftovers(s);
    o.ledger_released(s, "ledger-after");
}
