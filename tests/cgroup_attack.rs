//! The cgroup attack of tests/data/cgroup-attack.py, shared by tests/escape_cgroup.rs (this host) and
//! tests/v2_host_qemu.rs (the cgroup-v2-only guest, through tests/data/v2-guest.sh).

/// The script, run inside a session with `python3 -c "$ATTACK" OTHER_ID...`.
#[allow(dead_code)]
pub const SCRIPT: &str = include_str!("data/cgroup-attack.py");

/// The attempts every run must report refused (none may be missing: a script that stopped early proves
/// nothing).
pub const REFUSED: &[&str] = &[
    "mount cgroup v1 memory", "mount cgroup v1 pids", "mount cgroup v1 cpu", "mount cgroup v1 named", "mount cgroup v2", "mount sysfs",
    "fsopen cgroup", "fsopen cgroup2", "fsopen sysfs", "unshare cgroup namespace", "cgroup directories reachable", "write own memory limit",
    "write own memory limit (v1 value)", "write own pids limit", "write own cpu limit", "write own cpu limit (v1 value)",
    "thaw or freeze through the freezer", "leave its cgroup", "give controllers away", "make a cgroup release agent", "make a cgroup",
    "other sessions' names", "cgroups of the session's processes", "other sessions' cgroup directories", "other sessions' figures",
    "host cgroup counts",
];

/// The attack's output lines: what escaped, and which expected refusals are missing.
pub fn judge(lines: &[&str]) -> (Vec<String>, Vec<&'static str>) {
    let escaped = lines.iter().filter(|l| l.contains("ESCAPED")).map(|l| l.to_string()).collect();
    let missing = REFUSED.iter().copied().filter(|n| !lines.iter().any(|l| l.starts_with(&format!("{n}: refused")))).collect();
    (escaped, missing)
}
