//! Helpers shared by the black-box tests: where the tools are, a lock so that tests starting sessions
//! run one at a time, and an inventory of what Drums holds on this machine.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const TOOLS: &[&str] = &[
    "drums-ns", "drums-overlay", "drums-desktop", "drums-ckpt", "drums-restore", "drums-reseed", "drums-ready",
    "drums-audit", "drums-cgroup", "drums-sweep", "drums-guest",
];

/// The directory holding the tools built with the tests (target/<profile>).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent().and_then(Path::parent).expect("target dir").to_path_buf()
}
pub fn tool(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(p.exists(), "{} is not built (run the tests with `cargo test --workspace`)", p.display());
    p
}
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}
/// PATH with the built tools first, for pipelines.
pub fn path_with_tools() -> String {
    format!("{}:{}", bin_dir().display(), std::env::var("PATH").unwrap_or_default())
}

/// Run a tool with `stdin` as input.
pub fn run(name: &str, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(tool(name))
        .args(args)
        .env("PATH", path_with_tools())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
    {
        use std::io::Write;
        let mut i = child.stdin.take().unwrap();
        let _ = i.write_all(stdin.as_bytes());
    }
    child.wait_with_output().unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Held while a test runs sessions: sessions on a 2-core machine go one at a time, across test binaries.
pub struct SessionLock(std::fs::File);
pub fn session_lock() -> SessionLock {
    std::fs::create_dir_all("/run/drums").unwrap();
    let f = std::fs::OpenOptions::new().create(true).write(true).open("/run/drums/test.lock").unwrap();
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    SessionLock(f)
}

/// Fail with a clear message when the machine lacks what a test needs.
pub fn require_root() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests need root (namespaces, mounts, cgroups)");
}
