//! The assertions on the output of tests/cgroup-scenarios.sh, shared by the host tests (tests/cgroup.rs)
//! and the QEMU guest test (tests/cgroup_v2_qemu.rs), so both versions are held to the same bar.

use serde_json::Value;

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
    pub fn json(&self, s: &str, k: &str) -> Value {
        let t = self.one(s, k);
        serde_json::from_str(t).unwrap_or_else(|e| panic!("scenario {s}: `{k}` is not JSON ({e}): {t}"))
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
        let entries: Vec<Value> = self.all(s, k).iter().map(|l| serde_json::from_str(l).expect("ledger line")).collect();
        let cg = |op: &str| -> Vec<String> {
            let mut v: Vec<String> = entries
                .iter()
                .filter(|e| e["op"] == op && e["res"]["kind"] == "cgroup")
                .map(|e| e["res"]["path"].as_str().unwrap().to_string())
                .collect();
            v.sort();
            v
        };
        assert!(!cg("create").is_empty(), "scenario {s}: no cgroup in the ledger");
        assert_eq!(cg("create"), cg("release"), "scenario {s}: ledger creates and releases differ");
    }
    fn removed(&self, s: &str) {
        self.ok_exit(s, "remove-exit", 0);
        let r = self.json(s, "removed-record");
        assert!(r["cgroup"].is_null(), "scenario {s}: the removed record still has a cgroup section: {}", r["cgroup"]);
        self.no_leftovers(s);
    }
}

/// Every null figure has its reason; no figure the kernel gives is absent.
fn nulls_explained(v: &Value, what: &str) {
    let why = &v["why_null"];
    for (k, x) in v.as_object().unwrap() {
        if x.is_null() && !matches!(k.as_str(), "why_null" | "init_alive") {
            assert!(why[k].as_str().is_some_and(|r| !r.is_empty()), "{what}: `{k}` is null without a reason: {v}");
        }
    }
}

/// Limits applied and read back equal the request (checked in the record and in the kernel's files), the
/// init is inside, the ledger names each directory, telemetry of a working session has non-null memory
/// peak and CPU time, and removal leaves nothing.
pub fn limits(o: &Out, version: &str) {
    let s = "limits";
    o.ok_exit(s, "create-exit", 0);
    let rec = o.json(s, "record");
    let sec = &rec["cgroup"];
    assert_eq!(sec["version"], version, "{sec}");
    let want = serde_json::json!({"cpu_quota_us": 150000, "cpu_period_us": 100000, "memory_bytes": 256 * MIB, "pids_max": 64});
    assert_eq!(sec["requested"], want);
    for (k, v) in want.as_object().unwrap() {
        assert_eq!(&sec["read_back"][k], v, "read_back.{k}: {sec}");
    }
    match version {
        "v1" => assert_eq!(sec["read_back"]["memsw_bytes"], 256 * MIB, "{sec}"),
        _ => assert_eq!(sec["read_back"]["swap_max_bytes"], 0, "{sec}"),
    }
    assert_eq!(sec["applied"], true);
    assert!(sec["processes_moved"].as_u64().unwrap() >= 1, "{sec}");
    nulls_explained(&sec["read_back"], "read_back");

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
    for (ctrl, p) in sec["proc_paths"].as_object().unwrap() {
        let p = p.as_str().unwrap();
        let found = pc.split(';').any(|l| {
            let f: Vec<&str> = l.splitn(3, ':').collect();
            f.len() == 3 && f[2] == p && (if version == "v1" { f[1].split(',').any(|c| c == ctrl) } else { f[1].is_empty() })
        });
        assert!(found, "init not in {ctrl}:{p}; /proc/PID/cgroup: {pc}");
    }

    // Ledger before resource: one create per directory.
    let created: Vec<Value> = o.all(s, "ledger-created").iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut dirs: Vec<&str> = sec["paths"].as_object().unwrap().values().map(|v| v.as_str().unwrap()).collect();
    dirs.sort();
    dirs.dedup();
    for d in &dirs {
        assert!(
            created.iter().any(|e| e["op"] == "create" && e["res"]["kind"] == "cgroup" && e["res"]["path"] == *d),
            "{d} is not in the ledger"
        );
    }

    // Telemetry.
    o.ok_exit(s, "watch-exit", 0);
    let samples: Vec<Value> = o.all(s, "sample").iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(samples.len() >= 3, "only {} samples", samples.len());
    for x in &samples {
        assert_eq!(x["type"], "cgroup_sample");
        assert_eq!(x["version"], version);
        nulls_explained(x, "sample");
    }
    let last = samples.last().unwrap();
    assert_eq!(last["final"], true, "the last sample is marked final: {last}");
    assert_eq!(last["init_alive"], false, "watch ends when the init is gone: {last}");
    let max = |k: &str| samples.iter().filter_map(|x| x[k].as_u64()).max();
    let peak = max("memory_peak_bytes").unwrap_or_else(|| panic!("memory_peak_bytes is null in every sample: {last}"));
    assert!((32 * MIB..=256 * MIB).contains(&peak), "memory peak {peak} (the session held 32 MiB, its limit is 256 MiB)");
    let cpu = max("cpu_usage_ns").unwrap_or_else(|| panic!("cpu_usage_ns is null in every sample: {last}"));
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
    let x = o.json(s, "sample");
    nulls_explained(&x, "sample");
    let peak = x["memory_peak_bytes"].as_u64().unwrap_or_else(|| panic!("no memory peak: {x}"));
    assert!((32 * MIB..=64 * MIB).contains(&peak), "peak {peak} with a 64 MiB limit");
    assert!(x["oom_kills"].as_u64().unwrap_or(0) >= 1, "the kernel counts the OOM kill: {x}");
    assert_eq!(x["init_alive"], true, "the session's init survives its hog: {x}");
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
    let e = o.json(s, "create-err");
    assert_eq!(e["errno"], libc::EINVAL, "{e}");
    let p = e["path"].as_str().unwrap_or_default();
    assert!(p.ends_with("cpu.cfs_quota_us") || p.ends_with("cpu.max"), "{e}");
    o.no_leftovers(s);
    o.ledger_released(s, "ledger-after");
}
