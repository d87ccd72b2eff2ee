//! Helpers shared by the black-box tests: where the tools are, a lock so that tests starting sessions
//! run one at a time, and an inventory of what Drums holds on this machine.

#[path = "hygiene_probe.rs"]
pub mod hygiene;
#[path = "rfb_client.rs"]
pub mod rfb;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub const TOOLS: &[&str] = &[
    "drums-ns", "drums-overlay", "drums-desktop", "drums-ckpt", "drums-restore", "drums-reseed", "drums-ready",
    "drums-audit", "drums-cgroup", "drums-sweep", "drums-guest", "drums-pool", "drums-view", "drums-net",
];

/// Every tool's command line as its crate's `cli` module defines it (README, "Adding a tool"), in the
/// order of TOOLS: what its --help prints and what tests/man.rs generates its man page's OPTIONS from.
pub fn commands() -> Vec<(&'static str, clap::Command)> {
    use clap::CommandFactory;
    vec![
        ("drums-ns", drums_ns::cli::Args::command()),
        ("drums-overlay", drums_overlay::cli::Args::command()),
        ("drums-desktop", drums_desktop::cli::Args::command()),
        ("drums-ckpt", drums_ckpt::cli::Args::command()),
        ("drums-restore", drums_restore::cli::Args::command()),
        ("drums-reseed", drums_reseed::cli::Args::command()),
        ("drums-ready", drums_ready::cli::Args::command()),
        ("drums-audit", drums_audit::cli::Args::command()),
        ("drums-cgroup", drums_cgroup::cli::Args::command()),
        ("drums-sweep", drums_sweep::cli::Args::command()),
        ("drums-guest", drums_guest::cli::Args::command()),
        ("drums-pool", drums_pool::cli::Args::command()),
        ("drums-view", drums_view::cli::Args::command()),
        ("drums-net", drums_net::cli::Args::command()),
    ]
}

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

/// Run a tool with `stdin` as input, owned by this test process (DRUMS_OWNER), and insist that it succeeds;
/// its standard output.
pub fn run_ok(name: &str, args: &[&str], stdin: &str) -> String {
    let o = run_owned(tool(name), args, stdin);
    assert!(o.status.success(), "{name} {args:?} failed: {}", text(&o.stderr));
    text(&o.stdout)
}

/// Run a tool with `stdin` as input, owned by this test process (DRUMS_OWNER); its output, whatever its
/// exit status.
pub fn run_owned_tool(name: &str, args: &[&str], stdin: &str) -> Output {
    run_owned(tool(name), args, stdin)
}

/// Run a script of pipelines/ (cold.sh, restore.sh, ...) with `stdin` as input, owned by this test process
/// (DRUMS_OWNER); its output, whatever its exit status.
pub fn run_pipeline(script: &str, args: &[&str], stdin: &str) -> Output {
    run_owned(repo_root().join("pipelines").join(script), args, stdin)
}

fn run_owned(program: PathBuf, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(&program)
        .args(args)
        .env("PATH", path_with_tools())
        .env("DRUMS_OWNER", std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// One line of a tool's output decoded into its record type: a member renamed, retyped or gone fails the
/// test here, naming the type and the line; so does anything after the record (a second record).
pub fn decode<T: serde::de::DeserializeOwned>(line: &str) -> T {
    let mut de = serde_json::Deserializer::from_str(line.trim());
    let v = serde_path_to_error::deserialize(&mut de).unwrap_or_else(|e| panic!("not a {}: at `{}`: {}: {line}", std::any::type_name::<T>(), e.path(), e.inner()));
    de.end().unwrap_or_else(|e| panic!("more than one {} ({e}): {line}", std::any::type_name::<T>()));
    v
}

/// Every non-empty line of a tool's output, each decoded into `T`.
pub fn decode_lines<T: serde::de::DeserializeOwned>(out: &[u8]) -> Vec<T> {
    text(out).lines().filter(|l| !l.trim().is_empty()).map(decode).collect()
}

/// The error object a tool printed as its last line on stderr (docs/record.md, "Error object").
pub fn error_record(stderr: &[u8]) -> drums::error::ErrorRecord {
    let t = text(stderr);
    decode(t.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_else(|| panic!("nothing on stderr")))
}

/// A tool's output that is one record, decoded into `T`: more than one line fails.
pub fn one<T: serde::de::DeserializeOwned>(out: &str) -> T {
    assert_eq!(out.trim().lines().count(), 1, "not one record: {out}");
    decode(out)
}

/// A full cold session (pipelines/cold.sh: overlay, namespaces, cgroups, desktop, agent-ready), owned by
/// this test process and destroyed with `guard`: its record as cold.sh printed it, and decoded. It runs
/// in a user namespace of its own, the default (drums(7), "Its own user namespace").
pub fn cold_session(guard: &mut Sessions) -> (String, drums::record::Session) {
    cold_session_with(guard, &[])
}

/// A cold session in its own user namespace, said explicitly (cold.sh with DRUMS_OVERLAY_ARGS=--userns),
/// agent-ready (drums-ready saw the readiness page) when this returns; its record names its id range.
pub fn userns_cold_session(guard: &mut Sessions) -> (String, drums::record::Session) {
    let (line, rec) = cold_session_with(guard, &[("DRUMS_OVERLAY_ARGS", "--userns")]);
    assert!(rec.id_range.is_some(), "the record names its id range: {line}");
    (line, rec)
}

/// A cold session to be checkpointed: with host ids (cold.sh with DRUMS_OVERLAY_ARGS=--host-ids), since
/// drums-ckpt refuses a session in its own user namespace; no id range in its record.
pub fn source_session(guard: &mut Sessions) -> (String, drums::record::Session) {
    let (line, rec) = cold_session_with(guard, &[("DRUMS_OVERLAY_ARGS", "--host-ids")]);
    assert!(rec.id_range.is_none(), "a --host-ids session has no id range: {line}");
    (line, rec)
}

pub fn cold_session_with(guard: &mut Sessions, env: &[(&str, &str)]) -> (String, drums::record::Session) {
    let o = Command::new(repo_root().join("pipelines/cold.sh"))
        .env("PATH", path_with_tools())
        .env("DRUMS_OWNER", std::process::id().to_string())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    guard.add(&text(&o.stdout));
    assert!(o.status.success(), "cold.sh {env:?}: {}", text(&o.stderr));
    let line = text(&o.stdout).trim().to_string();
    let rec = one(&line);
    (line, rec)
}

/// A checkpoint directory, removed when dropped (checkpoints outlive sessions, so `Sessions` does not).
pub struct CheckpointDir(pub PathBuf);
impl Drop for CheckpointDir {
    fn drop(&mut self) {
        let _ = drums::ckpt::remove_checkpoint_dir(&self.0);
    }
}

/// A checkpoint of `source` (left running) and one restored, reseeded, agent-ready sibling of it.
pub fn checkpoint_and_sibling(source: &str, guard: &mut Sessions) -> (CheckpointDir, drums::record::Session) {
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], source);
    let dir = CheckpointDir(one::<drums::record::Checkpoint>(&ckpt).dir);
    let restored = run_ok("drums-restore", &[], &ckpt);
    guard.add(&restored);
    let sib = one(&run_ok("drums-ready", &[], &run_ok("drums-reseed", &[], &restored)));
    (dir, sib)
}

/// A record as one line of JSON, for assertion messages.
pub fn json<T: serde::Serialize>(r: &T) -> String {
    serde_json::to_string(r).expect("records serialize")
}

/// Held while a test runs sessions: sessions on a 2-core machine go one at a time, across test binaries.
pub struct SessionLock(#[allow(dead_code)] std::fs::File);
pub fn session_lock() -> SessionLock {
    drums::state::private_root(std::path::Path::new("/run/drums")).unwrap();
    let f = std::fs::OpenOptions::new().create(true).write(true).open("/run/drums/test.lock").unwrap();
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    SessionLock(f)
}

/// Fail with a clear message when the machine lacks what a test needs.
pub fn require_root() {
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests need root (namespaces, mounts, cgroups)");
}

/// What Drums holds on this machine, as the before-stop check sees it, read from `drums-sweep --report`
/// (its `host_inventory` record, docs/record.md): processes in PID namespaces other than the host's,
/// mounts below Drums' roots or naming drums, links named drums*, cgroup directories below Drums'
/// cgroup parents, session state directories, sessions' network policy tables, address slots. A suite
/// must leave every list empty.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inventory {
    /// "pid comm" of every live process outside the host PID namespace.
    pub processes: Vec<String>,
    /// The same for zombies: they hold nothing but a pid and wait for whichever unrelated parent they have,
    /// so `is_empty` does not count them.
    pub zombies: Vec<String>,
    pub mounts: Vec<String>,
    pub links: Vec<String>,
    pub cgroups: Vec<String>,
    pub state_dirs: Vec<String>,
    /// Sessions' network policy tables (`inet drums_net_<slot>`); the session firewall `inet drums`,
    /// which stays once made, is not counted.
    pub nft_tables: Vec<String>,
    /// "path session" of every address slot file (the session its file names, `-` when it names none).
    pub slots: Vec<String>,
    /// "base+count session" of every host id range a ledger holds.
    pub id_ranges: Vec<String>,
    /// "base+count pids" of every slot of the id band processes run with and no ledger holds (leaked ids).
    pub unledgered_ids: Vec<String>,
}

impl Inventory {
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
            && self.mounts.is_empty()
            && self.links.is_empty()
            && self.cgroups.is_empty()
            && self.state_dirs.is_empty()
            && self.nft_tables.is_empty()
            && self.slots.is_empty()
            && self.id_ranges.is_empty()
            && self.unledgered_ids.is_empty()
    }
    /// What is here now and was not in `before`: what a test left, even on a machine that was not clean.
    /// A new process in a PID namespace that a process of `before` still lives in (someone else's long-running
    /// session that forks) is not new. (The namespace is named by a process still in it, not by its inode
    /// alone: the kernel reuses the inode numbers of namespaces that are gone.)
    pub fn new_since(&self, before: &Inventory) -> Inventory {
        use std::os::unix::fs::MetadataExt;
        let minus = |now: &Vec<String>, then: &Vec<String>| now.iter().filter(|x| !then.contains(x)).cloned().collect::<Vec<_>>();
        let ns_of = |p: &String| {
            let pid = p.split(' ').next().unwrap_or("");
            let ns = std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok()?.ino();
            // Still the same process: the pid and its command name, as listed.
            (format!("{pid} {}", std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?.trim()) == *p).then_some(ns)
        };
        let old_ns: Vec<u64> = before.processes.iter().filter_map(ns_of).collect();
        // A process that is gone by now is no leftover either.
        let in_new_ns = |p: &String| ns_of(p).is_some_and(|ns| !old_ns.contains(&ns));
        Inventory {
            processes: minus(&self.processes, &before.processes).into_iter().filter(in_new_ns).collect(),
            zombies: minus(&self.zombies, &before.zombies),
            mounts: minus(&self.mounts, &before.mounts),
            links: minus(&self.links, &before.links),
            cgroups: minus(&self.cgroups, &before.cgroups),
            state_dirs: minus(&self.state_dirs, &before.state_dirs),
            nft_tables: minus(&self.nft_tables, &before.nft_tables),
            slots: minus(&self.slots, &before.slots),
            id_ranges: minus(&self.id_ranges, &before.id_ranges),
            // A slot is new when it was not used before, whatever processes use it now.
            unledgered_ids: self.unledgered_ids.iter().filter(|x| !before.unledgered_ids.iter().any(|b| b.split(' ').next() == x.split(' ').next())).cloned().collect(),
        }
    }
}

/// The host inventory record of `drums-sweep --report`, as the tool prints it.
pub fn host_inventory() -> drums::destroy::inventory::Inventory {
    let o = Command::new(tool("drums-sweep")).arg("--report").stdin(Stdio::null()).output().expect("run drums-sweep --report");
    assert!(o.status.success(), "drums-sweep --report: {}", text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("drums-sweep --report: {e}: {}", text(&o.stdout)))
}

pub fn inventory() -> Inventory {
    let r = host_inventory();
    let show = |p: &Path| p.display().to_string();
    let (zombies, live): (Vec<_>, Vec<_>) = r.processes.iter().partition(|p| p.zombie);
    let policy = format!("inet {}", drums::net::egress::TABLE_PREFIX);
    Inventory {
        processes: live.iter().map(|p| format!("{} {}", p.pid, p.comm)).collect(),
        zombies: zombies.iter().map(|p| format!("{} {}", p.pid, p.comm)).collect(),
        mounts: r.mounts.iter().map(|p| show(p)).collect(),
        links: r.links.clone(),
        cgroups: r.cgroups.iter().map(|p| show(p)).collect(),
        state_dirs: r.sessions.iter().map(|s| show(&s.state_dir)).collect(),
        nft_tables: r.nft_tables.iter().filter(|t| t.starts_with(&policy)).cloned().collect(),
        slots: r.slots.iter().map(|s| format!("{} {}", s.path.display(), s.session.as_deref().unwrap_or("-"))).collect(),
        id_ranges: r.id_ranges.iter().map(|x| format!("{}+{} {}", x.base, x.count, x.session)).collect(),
        unledgered_ids: r.unledgered_ids.iter().map(|x| format!("{}+{} {:?}", x.base, x.count, x.pids)).collect(),
    }
}

/// One HTTP/1.1 request to `url` (http://host:port/path) with an optional JSON body, retried while the
/// server does not accept connections (up to `wait`). Returns (status, body).
pub fn http(method: &str, url: &str, json: Option<&serde_json::Value>, wait: std::time::Duration) -> (u16, String) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("http:// URL");
    let (hostport, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap_or((rest, "/".into()));
    let addr: std::net::SocketAddr = hostport.parse().expect("host:port");
    let t0 = std::time::Instant::now();
    let mut s = loop {
        match std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(2)) {
            Ok(s) => break s,
            Err(e) if t0.elapsed() > wait => panic!("{url}: {e}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
        }
    };
    s.set_read_timeout(Some(std::time::Duration::from_secs(150))).unwrap();
    let body = json.map(|j| j.to_string()).unwrap_or_default();
    let ctype = if json.is_some() { "Content-Type: application/json\r\n" } else { "" };
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\n{ctype}Content-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    let status = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// Destroys every session it holds with drums-sweep when dropped, so a failing assertion leaves nothing
/// behind. Holds session records (one or several lines each).
#[derive(Default)]
pub struct Sessions(pub Vec<String>);
impl Sessions {
    pub fn add(&mut self, records: &str) {
        self.0.extend(records.lines().filter(|l| !l.trim().is_empty()).map(str::to_string));
    }
}
impl Drop for Sessions {
    fn drop(&mut self) {
        for rec in &self.0 {
            let o = run("drums-sweep", &[], rec);
            if !o.status.success() {
                eprintln!("destroy failed: {}{}", text(&o.stdout), text(&o.stderr));
            }
        }
    }
}

/// Group membership changes made by a test (group `drums`), undone exactly: tests/firewall.rs, tests/view.rs.
pub type Saved = Vec<(PathBuf, Option<(Vec<u8>, u32, u32, u32)>)>;

/// /etc/group, /etc/gshadow and the shadow tools' backups of them: contents, mode, owner (None: absent).
pub fn group_files() -> Saved {
    use std::os::unix::fs::MetadataExt;
    ["/etc/group", "/etc/gshadow", "/etc/group-", "/etc/gshadow-"]
        .iter()
        .map(|p| (std::path::PathBuf::from(p), std::fs::metadata(p).ok().map(|m| (std::fs::read(p).unwrap(), m.mode() & 0o7777, m.uid(), m.gid()))))
        .collect()
}

/// Puts the group files back exactly as saved when dropped (removing those that did not exist), and
/// verifies the firewall again with the membership restored.
pub struct GroupFiles(pub Saved);
impl Drop for GroupFiles {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let now = group_files();
        for ((p, saved), (_, current)) in self.0.iter().zip(&now) {
            if saved == current {
                continue;
            }
            match saved {
                Some((bytes, mode, uid, gid)) => {
                    std::fs::write(p, bytes).unwrap_or_else(|e| eprintln!("restore {}: {e}", p.display()));
                    let _ = std::os::unix::fs::chown(p, Some(*uid), Some(*gid));
                    let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(*mode));
                }
                None => {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        if let Err(e) = drums::net::ensure_firewall() {
            eprintln!("verifying the firewall after restoring the group files: {e}");
        }
    }
}


/// The index of the `}` closing an opened `{` in `s` (its end when there is none).
pub fn closing_brace(s: &str) -> usize {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    s.len()
}

/// `s` split at the commas outside braces and double quotes.
pub fn split_top_level(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start, mut quoted) = (vec![], 0, 0, false);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '{' if !quoted => depth += 1,
            '}' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}
