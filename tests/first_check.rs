//! pipelines/first-check.sh on real sessions, with two induced faults. The guest of a restored post_setup
//! rollout is killed mid-rollout: that rollout records the fault and is not valid, and the driver goes on
//! (the next rollout of the same block restores again, is valid and scores 1 with a clean canary). A
//! no_reuse rollout skips its reset: the canary sees the previous rollout's marker, so a marker that does
//! leak is detected. The summary computes no verdict, and nothing the run made is left on the machine.
//! With --reset pool, the post_setup rollouts after the checkpoint take siblings from a warm pool of it.
//!
//! The driver's own records (first_check_rollout, first_check_block, first_check_summary) are written by
//! pipelines/first-check.sh and pipelines/first_check_report.py, not by a Rust type: they are read as
//! JSON. The Drums records they embed whole are decoded into their types: a session's `cgroup` section
//! (drums::cgroup::Section), `restore.times` (drums::record::RestoreTimes), `pool.fill_s`
//! (drums::pool::FillTimes). What the driver picks out of a record with jq (a block's `checkpoint`: id,
//! dump_s, image_bytes, layer_bytes; `pool.drain`: destroyed, left, spool_removed) is not the record and
//! stays JSON, as does what the report computes (`telemetry`, `host`).

use drums::cgroup::Section;
use drums::pool::FillTimes;
use drums::record::RestoreTimes;
use drums_tests::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A Drums record that a driver record holds as a member, decoded into its type.
fn embedded<T: serde::de::DeserializeOwned>(member: &Value) -> T {
    decode(&member.to_string())
}

/// Runs the driver with ARGS into a fresh directory; (exit code, records by type, stderr, directory).
fn first_check(name: &str, args: &[&str]) -> (Option<i32>, impl Fn(&str) -> Vec<Value>, String, PathBuf) {
    let out = std::env::temp_dir().join(format!("drums-first-check-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = Command::new(repo_root().join("pipelines/first-check.sh"))
        .args(args)
        .arg("--out")
        .arg(&out)
        .env("PATH", path_with_tools())
        .output()
        .expect("run pipelines/first-check.sh");
    let recs: Vec<Value> = text(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let of = move |t: &str| recs.iter().filter(|r| r["type"] == t).cloned().collect::<Vec<_>>();
    (o.status.code(), of, text(&o.stderr), out)
}

/// Nothing the run made is left: processes, mounts, links, cgroups, session state.
fn assert_nothing_left(before: &Inventory, out: &Path) {
    // Processes of PID namespaces that existed before the run belong to someone else (another engineer's
    // fixture forking `sleep` every second shows up here as "new"); a leak of this run is in a new one.
    let mut left = inventory().new_since(before);
    let old_ns: std::collections::HashSet<u64> = before.processes.iter().filter_map(|p| pid_ns(p)).collect();
    left.processes.retain(|p| pid_ns(p).is_some_and(|n| !old_ns.contains(&n)));
    assert!(left.is_empty(), "the run left {left:?}");
    let _ = std::fs::remove_dir_all(out);
}

#[test]
fn an_induced_fault_is_recorded_and_the_driver_goes_on() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let (code, of, stderr, out) =
        first_check("faults", &["--blocks", "post_setup,no_reuse", "--rollouts", "3", "--inject-fault", "guest-kill@2", "--inject-fault", "reuse@6"]);
    assert_eq!(code, Some(1), "two rollouts are not valid, so the driver exits 1\n{stderr}");
    let rollouts = of("first_check_rollout");
    assert_eq!(rollouts.len(), 6, "{stderr}");

    // Rollout 1 (post_setup): a fresh session, the setup and the checkpoint, the task done.
    let r1 = &rollouts[0];
    assert_eq!((r1["arm"].as_str(), r1["reset_kind"].as_str(), r1["reset_s"].clone()), (Some("drums_post_setup"), Some("fresh"), Value::Null));
    assert!(r1["first_rollout_work_s"].as_f64().unwrap() > 0.0, "{r1}");
    assert_eq!((r1["score_before_action"].as_f64(), r1["score"].as_f64(), r1["valid"].as_bool()), (Some(0.0), Some(1.0), Some(true)), "{r1}");
    assert!(r1["canary_written"].as_str().is_some_and(|m| m.contains("block 0 rollout 1")), "the marker was written and read back: {r1}");
    // Rollout 2: restored from the checkpoint, its guest killed after the (checkpointed) setup.
    let r2 = &rollouts[1];
    assert_eq!((r2["reset_kind"].as_str(), r2["injected_fault"].as_str()), (Some("restore"), Some("guest-kill")), "{r2}");
    assert!(r2["reset_s"].as_f64().unwrap() > 0.0);
    assert_eq!(r2["setup_s"], Value::Null, "a restored rollout skips the setup");
    assert_eq!(r2["canary"], "clean", "the canary of rollout 1 was written after the checkpoint: {r2}");
    assert_eq!(r2["valid"], false);
    assert_eq!(r2["score"], Value::Null);
    let fault = r2["fault"].as_str().expect("the fault is recorded");
    assert!(fault.starts_with("finish:") && fault.contains("guest unreachable"), "{fault}");
    // Rollout 3, after the fault in the same block: its reset replaced the broken session with a new
    // restore, which is valid, scores 1 after scoring 0, and sees no marker of rollouts 1 or 2.
    let r3 = &rollouts[2];
    assert_eq!((r3["arm"].as_str(), r3["block"].as_u64(), r3["reset_kind"].as_str()), (Some("drums_post_setup"), Some(0), Some("restore")), "{r3}");
    assert!(r3["reset_s"].as_f64().unwrap() > 0.0 && r3["reset_parts"]["destroy_s"].as_f64().is_some(), "the faulted session was destroyed by the reset: {r3}");
    assert_ne!(r3["session"], r2["session"]);
    assert_eq!((r3["setup_s"].clone(), r3["first_rollout_work_s"].clone(), r3["fault"].clone()), (Value::Null, Value::Null, Value::Null), "{r3}");
    assert_eq!((r3["score_before_action"].as_f64(), r3["score"].as_f64(), r3["valid"].as_bool()), (Some(0.0), Some(1.0), Some(true)), "{r3}");
    assert_eq!((r3["canary"].as_str(), r3["canary_seen"].as_array().map(Vec::len)), (Some("clean"), Some(0)), "{r3}");
    assert!(r3["canary_written"].as_str().is_some_and(|m| m.contains("block 0 rollout 3")), "{r3}");
    assert!(embedded::<Section>(&r3["cgroup"]).applied, "{r3}");
    // The driver went on: the no_reuse block's rollouts 4 and 5 ran on cold sessions, canary clean, task done.
    for r in &rollouts[3..5] {
        assert_eq!(r["arm"], "drums_no_reuse");
        assert_eq!((r["valid"].as_bool(), r["score"].as_f64(), r["canary"].as_str()), (Some(true), Some(1.0), Some("clean")), "{r}");
        assert!(r["setup_s"].as_f64().is_some());
        assert!(embedded::<Section>(&r["cgroup"]).applied, "every session runs under its limits: {r}");
        assert!(r["telemetry"]["samples"].as_u64().unwrap() > 0 && r["telemetry"]["memory_peak_mib_kernel"].as_f64().unwrap() > 10.0, "{r}");
    }
    assert_eq!(rollouts[4]["reset_kind"], "recreate");
    // A recreate is a destroy and a whole cold start (about 0.4 s here; Chromium alone takes over 0.2 s).
    assert!(rollouts[4]["reset_s"].as_f64().unwrap() > 0.2, "{}", rollouts[4]);
    // Rollout 6 skipped its reset (reuse@6): it ran on rollout 5's session, where rollout 5's marker is.
    let (r5, r6) = (&rollouts[4], &rollouts[5]);
    assert_eq!((r6["reset_kind"].as_str(), r6["injected_fault"].as_str(), r6["reset_s"].clone()), (Some("reused"), Some("reuse"), Value::Null), "{r6}");
    assert_eq!(r6["session"], r5["session"]);
    assert_eq!(r6["canary"], "seen", "a marker that leaks is detected: {r6}");
    assert_eq!(r6["canary_seen"], serde_json::json!([r5["canary_written"], r5["canary_written"]]), "both files hold rollout 5's marker: {r6}");
    assert_eq!(r6["valid"], false);
    assert!(r6["fault"].as_str().unwrap().starts_with("interference: "), "{r6}");

    let blocks = of("first_check_block");
    assert_eq!(blocks.len(), 2);
    assert_eq!((blocks[0]["valid"].as_u64(), blocks[0]["faults"].as_array().unwrap().len()), (Some(2), 1), "{}", blocks[0]);
    assert_eq!(blocks[0]["faults"][0]["rollout"], 2);
    assert!((blocks[0]["first_rollout_work_s"].as_f64().unwrap() - r1["first_rollout_work_s"].as_f64().unwrap()).abs() < 0.001, "{}", blocks[0]);
    assert_eq!((blocks[1]["valid"].as_u64(), blocks[1]["faults"].as_array().unwrap().len()), (Some(2), 1), "{}", blocks[1]);
    assert_eq!(blocks[1]["faults"][0]["rollout"], 6);
    assert_eq!(blocks[1]["first_rollout_work_s"], Value::Null, "no_reuse has no first-rollout work: null, not 0");
    assert!(blocks[1]["why_null"]["first_rollout_work_s"].as_str().is_some(), "{}", blocks[1]);
    assert!(blocks[0]["external_prep_s"].as_f64().unwrap() > 0.0 && blocks[0]["host"]["cpu_busy_s"].as_f64().is_some());
    assert!(blocks[0]["checkpoint"]["id"].as_str().unwrap().starts_with("c-"));

    let s = of("first_check_summary").pop().expect("a summary");
    assert_eq!((s["rollouts"].as_u64(), s["valid"].as_u64()), (Some(6), Some(4)));
    assert_eq!(s["canary_clean_every_block"], false, "rollout 6 saw a marker");
    assert_eq!(s["engineering_validation_only"], true);
    assert_eq!(s["resource_parity_claimed"], false);
    assert_eq!(s["verdict"], Value::Null, "the driver computes no verdict");
    assert!(s["raw_ratio_first_over_second_arm_wall_with_prep_NOT_A_CLAIM"].as_f64().is_some());
    assert_eq!(s["prices"]["usd_per_hour"], Value::Null);
    assert_eq!(s["left_on_machine"], serde_json::json!([]), "{s}");
    let png = std::fs::read(out.join("reset_times.png")).expect("the chart");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(std::fs::read_to_string(out.join("report.txt")).unwrap().contains("NOT_A_CLAIM"));
    assert!(stderr.contains("drums_no_reuse"), "the table is printed at the end: {stderr}");
    assert_nothing_left(&before, &out);
}

/// --reset pool: once rollout 1 has made the checkpoint, a pool of 2 is filled outside the block clock and
/// rollouts 2 and 3 each take a parked sibling: no setup, valid, score 1, canary clean. The drain at the
/// end of the block removes the spool; nothing is left.
#[test]
fn the_pool_is_the_post_setup_reset() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let (code, of, stderr, out) = first_check("pool", &["--blocks", "post_setup", "--rollouts", "3", "--reset", "pool"]);
    assert_eq!(code, Some(0), "{stderr}");
    let rollouts = of("first_check_rollout");
    assert_eq!(rollouts.len(), 3, "{stderr}");
    assert_eq!((rollouts[0]["reset_kind"].as_str(), rollouts[0]["valid"].as_bool()), (Some("fresh"), Some(true)), "{}", rollouts[0]);
    assert!(rollouts[0]["first_rollout_work_s"].as_f64().unwrap() > 0.0);
    for r in &rollouts[1..] {
        assert_eq!((r["reset_kind"].as_str(), r["setup_s"].clone(), r["fault"].clone()), (Some("pool"), Value::Null, Value::Null), "{r}");
        assert!(r["reset_s"].as_f64().unwrap() > 0.0 && r["reset_parts"]["destroy_s"].as_f64().is_some(), "{r}");
        // The restore and the reseed were the filler's, outside the clock: not parts of the reset.
        let restore_times: Option<RestoreTimes> = embedded(&r["reset_parts"]["restore_times"]);
        assert_eq!((restore_times, r["reset_parts"]["reseed_s"].clone()), (None, Value::Null), "{r}");
        assert!(embedded::<FillTimes>(&r["reset_parts"]["pool_fill_s"]).total_s > 0.0, "{r}");
        assert_eq!((r["score_before_action"].as_f64(), r["score"].as_f64(), r["valid"].as_bool()), (Some(0.0), Some(1.0), Some(true)), "{r}");
        assert_eq!((r["canary"].as_str(), r["canary_seen"].as_array().map(Vec::len)), (Some("clean"), Some(0)), "{r}");
        assert!(r["canary_written"].as_str().is_some(), "{r}");
        assert!(embedded::<Section>(&r["cgroup"]).applied, "the pool's siblings run under the driver's limits: {r}");
        assert!(r["telemetry"]["samples"].as_u64().unwrap() > 0, "{r}");
    }
    assert_ne!(rollouts[1]["session"], rollouts[2]["session"]);

    let b = of("first_check_block").pop().expect("a block record");
    assert_eq!((b["reset"].as_str(), b["valid"].as_u64(), b["faults"].as_array().map(Vec::len)), (Some("pool"), Some(3), Some(0)), "{b}");
    let pool = &b["pool"];
    assert_eq!((pool["depth_wanted"].as_u64(), pool["parked"].as_u64(), pool["made"].as_u64()), (Some(2), Some(2), Some(2)), "{b}");
    assert_eq!((pool["drain"]["left"].as_u64(), pool["drain"]["spool_removed"].as_bool()), (Some(0), Some(true)), "{b}");
    // The fill is external preparation: outside the block clock and the host telemetry, counted beside them.
    let fill_s = pool["fill_s"].as_f64().unwrap();
    assert!(fill_s > 0.0 && b["external_prep_s"].as_f64().unwrap() > fill_s, "{b}");
    assert_eq!(b["external_prep_sessions"], 3, "one cold session and two parked siblings: {b}");
    assert!((b["host"]["paused_s"].as_f64().unwrap() - fill_s).abs() < 0.5, "{b}");
    let spool = Path::new(pool["spool"].as_str().unwrap());
    assert!(spool.ends_with(b["checkpoint"]["id"].as_str().unwrap()) && !spool.exists(), "{b}");

    let s = of("first_check_summary").pop().expect("a summary");
    assert_eq!((s["design"]["post_setup_reset"].as_str(), s["valid"].as_u64()), (Some("pool"), Some(3)), "{s}");
    assert_eq!(s["left_on_machine"], serde_json::json!([]), "{s}");
    assert_nothing_left(&before, &out);
}

/// The PID namespace (inode) of an inventory entry "pid comm"; None once the process is gone.
fn pid_ns(entry: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let pid = entry.split(' ').next()?;
    std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok().map(|m| m.ino())
}
