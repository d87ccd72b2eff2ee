//! The cgroup escapes of issue 30 tried from the attacker's side: from inside a cold session and a restored
//! sibling, as the session's `user` and as session root through `sudo` (as an agent would), the attack of
//! tests/data/cgroup-attack.py writes the session's own limits (memory, pids, cpu), tries to leave or thaw
//! its cgroup, looks for the other session's cgroup (its name, its directory, its figures) and mounts
//! cgroupfs (v1 hierarchies, a named one, v2) and sysfs. Every attempt must be refused, and the host is read
//! back afterwards: each session's limits from the host's cgroup files and from drums-cgroup's read-back,
//! the drums directories of every hierarchy, the host's cgroup and sysfs mounts, all unchanged.
//! The same script runs inside the cgroup-v2-only QEMU guest (tests/data/v2-guest.sh, "escape" lines).

use drums::record::Session;
use drums_tests::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

#[path = "cgroup_attack.rs"]
mod cgroup_attack;
use cgroup_attack::{judge, SCRIPT as ATTACK};

/// The limit files of either layout; those a directory has are read.
const LIMIT_FILES: &[&str] = &[
    "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.soft_limit_in_bytes", "memory.max", "memory.high", "memory.swap.max",
    "pids.max", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares", "cpu.max", "cpu.weight", "freezer.state", "cgroup.freeze",
    "cgroup.subtree_control", "notify_on_release",
];

/// What the host must still be after the attempts.
#[derive(Debug, PartialEq)]
struct HostState {
    /// session id -> (file path -> contents), read from the host.
    limits: BTreeMap<String, BTreeMap<String, String>>,
    /// drums-cgroup's read-back of each session, as JSON.
    read_back: BTreeMap<String, String>,
    /// Every hierarchy's drums/ parent -> its entries.
    tree: BTreeMap<String, Vec<String>>,
    /// The host's cgroup, cgroup2 and sysfs mounts (mountinfo lines).
    mounts: Vec<String>,
}

fn host_state(sessions: &[&Session]) -> HostState {
    let mut limits = BTreeMap::new();
    let mut read_back = BTreeMap::new();
    let mut tree = BTreeMap::new();
    for s in sessions {
        let sec = s.cgroup.as_ref().unwrap_or_else(|| panic!("{} has no cgroup section", s.id));
        let mut files = BTreeMap::new();
        for dir in sec.paths.values() {
            for f in LIMIT_FILES {
                if let Ok(v) = std::fs::read_to_string(dir.join(f)) {
                    files.insert(dir.join(f).display().to_string(), v);
                }
            }
            let parent = dir.parent().unwrap();
            let mut names: Vec<String> = std::fs::read_dir(parent).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
            names.sort();
            tree.insert(parent.display().to_string(), names);
        }
        assert!(files.len() >= 4, "{}: too few limit files read on the host: {files:?}", s.id);
        limits.insert(s.id.clone(), files);
        read_back.insert(s.id.clone(), json(&drums::cgroup::read_back(s).expect("read back")));
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(" - ").nth(1).is_some_and(|t| ["cgroup ", "cgroup2 ", "sysfs "].iter().any(|k| t.starts_with(k))))
        .map(str::to_string)
        .collect();
    HostState { limits, read_back, tree, mounts }
}

/// The attack in session `s`, as `user` or as session root through sudo; `others`: the ids it must not see.
fn attack(s: &Session, as_root: bool, others: &[&str]) -> Vec<String> {
    let run = if as_root { r#"echo password | sudo -S -p "" python3 -c "$ATTACK" "$@""# } else { r#"python3 -c "$ATTACK" "$@""# };
    let o = Command::new(tool("drums-ns"))
        .args(["exec", "--session", &s.id, "--user", "user", "--env", &format!("ATTACK={ATTACK}"), "--", "sh", "-c", run, "sh"])
        .args(others)
        .output()
        .unwrap();
    assert!(o.status.success(), "the attack did not run ({}): {}{}", if as_root { "root" } else { "user" }, text(&o.stdout), text(&o.stderr));
    text(&o.stdout).lines().map(str::to_string).collect()
}

#[test]
fn a_session_cannot_touch_or_see_cgroups() {
    require_root();
    let _lock = session_lock();
    let before_inventory = inventory();
    let mut guard = Sessions::default();
    let (src_line, src) = source_session(&mut guard);
    let (_ckpt_dir, sib) = checkpoint_and_sibling(&src_line, &mut guard);
    assert!(Path::new(&tool("drums-ns")).exists());
    let before = host_state(&[&src, &sib]);

    let mut infos = Vec::new();
    for (what, s, other) in [("cold session", &src, &sib), ("restored sibling", &sib, &src)] {
        for as_root in [false, true] {
            let who = if as_root { "session root" } else { "user" };
            let lines = attack(s, as_root, &[other.id.as_str()]);
            let (escaped, missing) = judge(&lines.iter().map(String::as_str).collect::<Vec<_>>());
            assert!(escaped.is_empty(), "{what}, as {who}: {escaped:#?}\nall: {lines:#?}");
            assert!(missing.is_empty(), "{what}, as {who}: no refusal of {missing:?}: {lines:#?}");
            let own = lines.iter().find(|l| l.starts_with("own cgroups: info ")).expect("own cgroups line");
            assert!(own.contains(&s.id), "{what}: its processes are not in its own cgroup: {own}");
            let boundary = lines.iter().find(|l| l.starts_with("boundary: ")).unwrap();
            assert!(boundary.contains(if as_root { "uid=0" } else { "uid=1000" }), "{what}: sudo gives session root: {boundary}");
            infos.extend(lines.iter().filter(|l| l.contains(": info ")).map(|l| format!("{what}, {who}: {l}")));
        }
    }
    eprintln!("{}", infos.join("\n"));
    let after = host_state(&[&src, &sib]);
    assert_eq!(after, before, "the host's cgroups changed");

    drop(guard);
    drop(_ckpt_dir);
    let left = inventory().new_since(&before_inventory);
    assert!(left.is_empty(), "left after destroy: {left:?}");
}
