//! Drums' CRIU kernel-feature cache (drums(7), DRUMS_CRIU_KDAT): a CRIU call made through
//! `drums::criu::command()` loads the cache instead of probing the kernel, and the host is unchanged: no
//! /run/criu.kdat on the host, no mount left behind.

use drums_tests::*;

fn mount_lines() -> usize {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap().lines().count()
}

/// `criu check` through Drums with a verbose log; returns the log.
fn criu_check_log(log: &std::path::Path) -> String {
    let status = drums::criu::command().args(["check", "-v4", "-o"]).arg(log).status().unwrap();
    assert!(status.success(), "criu check failed: {}", std::fs::read_to_string(log).unwrap_or_default());
    std::fs::read_to_string(log).unwrap()
}

#[test]
fn criu_runs_with_the_cache_and_the_host_is_unchanged() {
    require_root();
    let run_is_tmpfs = std::process::Command::new("stat").args(["-f", "-c", "%T", "/run"]).output().unwrap();
    // Where /run is a tmpfs CRIU keeps its cache by itself and Drums stays out of the way; either way the
    // second call must load a cache.
    let drums_keeps_it = String::from_utf8_lossy(&run_is_tmpfs.stdout).trim() != "tmpfs";
    let host_kdat = std::path::Path::new("/run/criu.kdat");
    let had_host_kdat = host_kdat.exists();
    let mounts = mount_lines();
    let dir = std::env::temp_dir().join(format!("drums-criu-cache-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The first call makes the cache if this boot has none yet; the second must load it.
    criu_check_log(&dir.join("first.log"));
    let log = criu_check_log(&dir.join("second.log"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(log.contains("Loaded kdat cache from /run/criu.kdat"), "CRIU probed the kernel instead of loading the cache:\n{}", &log[..log.len().min(2000)]);
    if drums_keeps_it {
        let cached: Vec<_> = std::fs::read_dir(drums::state::state_root().join("criu")).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().starts_with("kdat-")).collect();
        assert!(!cached.is_empty(), "no cache file under the state directory");
        assert_eq!(host_kdat.exists(), had_host_kdat, "the host's /run/criu.kdat changed");
    }
    assert_eq!(mount_lines(), mounts, "a CRIU call left a mount on the host");
}
