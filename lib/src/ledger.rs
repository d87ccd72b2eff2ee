//! The ownership ledger: a session's list of everything it owns, written *before* each resource is
//! created, so that destroy and the sweep can always find it.
//!
//! Format: `<state_dir>/ledger.jsonl`, one JSON object per line, each with its format version `v` (absent
//! in lines of older tools: version 1). The first line is the owner entry. Each later line says that a
//! resource is about to be created (`"op":"create"`), has been removed (`"op":"release"`), or marks a
//! phase of the session's life (`"op":"phase"`). Appends take an exclusive `flock` and are one `write` of
//! a whole line, so concurrent tools never interleave and a tool killed mid-write leaves at most one
//! truncated line, which readers skip and count.
//!
//! A whole line this version does not understand (a later format version, an entry kind it does not know)
//! may name a resource a newer tool made: readers report it (`Contents::not_understood`), and destroy
//! refuses such a session rather than leak what it cannot see.
//!
//! No `fsync`: what a killed tool wrote is in the page cache and visible to destroy and the sweep at once,
//! and a machine crash, the only thing `fsync` would guard against, takes every resource a ledger can name
//! with it (processes, mounts, links, cgroups, slots under the state root) except an unfinished
//! checkpoint, which the sweep finds by its `.partial` name. The 13 syncs of one restore cost about 15 ms
//! on this machine's virtual disk.

use crate::error::{Error, IoContext, Result};
use crate::flock::{Flock, Mode};
use crate::record::Owner;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub const FILE_NAME: &str = "ledger.jsonl";
/// The ledger line format version this library writes and reads (`v`; a line without it is version 1).
pub const VERSION: u64 = 1;

/// One thing a session owns.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resource {
    /// A directory Drums made (removed recursively at destroy; only below the state or checkpoint root).
    Dir { path: PathBuf },
    /// A mount point on the host (tmpfs, overlay).
    Mount { path: PathBuf },
    /// The host end of a veth pair (deleting it deletes the pair).
    Link { name: String },
    /// An address-pool slot, held by an exclusive file.
    Slot { index: u32, path: PathBuf },
    /// A process as seen from the host. `init: true` is the PID 1 of the session's PID namespace:
    /// killing it ends every process in the namespace.
    Process { pid: i32, start_time: u64, role: String, #[serde(default)] init: bool },
    /// A cgroup directory in one hierarchy.
    Cgroup { path: PathBuf },
    /// A CRIU image directory (kept at destroy unless asked).
    Image { path: PathBuf },
    /// A session's network policy on the host (crate::net::egress): its nftables table
    /// `inet drums_net_<slot>`, its routing rules and table, and its resolver (the process whose pid
    /// `pid_file` holds).
    Egress { slot: u32, host_if: String, pid_file: PathBuf },
    /// A block of host user and group ids, `base` to `base+count-1`, that the session's user namespace
    /// maps to (crate::idrange). Written before the namespace exists; nothing on the host is removed at
    /// release (the namespace ends with the session's last process), the range is only free again.
    IdRange { base: u32, count: u32 },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Entry {
    Owner { t: f64, session: String, owner: Owner, ttl_s: Option<u64> },
    Create { t: f64, res: Resource },
    Release { t: f64, res: Resource },
    /// A life-cycle mark ("creating", "restoring", "live", "parked", "taken", "destroying") with the
    /// process that set it: the sweep leaves a session alone while a live process holds it in a
    /// creating phase.
    Phase { t: f64, phase: String, by: Owner },
}

/// What a read of the ledger found.
#[derive(Debug, Clone, Default)]
pub struct Contents {
    pub entries: Vec<Entry>,
    /// Torn lines (a write cut short by a crash): skipped, counted.
    pub skipped_lines: usize,
    /// Whole lines this version does not understand, in file order.
    pub not_understood: Vec<NotUnderstood>,
}

/// A whole ledger line that is no entry of this version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotUnderstood {
    /// 1-based line number in the ledger.
    pub line: usize,
    pub why: String,
}

impl Contents {
    pub fn owner(&self) -> Option<(&str, &Owner, Option<u64>, f64)> {
        self.entries.iter().find_map(|e| match e {
            Entry::Owner { session, owner, ttl_s, t } => Some((session.as_str(), owner, *ttl_s, *t)),
            _ => None,
        })
    }
    /// Resources created and not released, in creation order.
    pub fn live(&self) -> Vec<Resource> {
        let mut live: Vec<Resource> = Vec::new();
        for e in &self.entries {
            match e {
                Entry::Create { res, .. } => live.push(res.clone()),
                Entry::Release { res, .. } => {
                    if let Some(i) = live.iter().rposition(|r| r == res) {
                        live.remove(i);
                    }
                }
                _ => {}
            }
        }
        live
    }
    /// The live mount points, in creation order.
    pub fn live_mounts(&self) -> Vec<PathBuf> {
        self.live().into_iter().filter_map(|r| if let Resource::Mount { path } = r { Some(path) } else { None }).collect()
    }
    /// The live cgroup directories, in creation order.
    pub fn live_cgroups(&self) -> Vec<PathBuf> {
        self.live().into_iter().filter_map(|r| if let Resource::Cgroup { path } = r { Some(path) } else { None }).collect()
    }
    pub fn last_phase(&self) -> Option<(&str, &Owner, f64)> {
        self.entries.iter().rev().find_map(|e| match e {
            Entry::Phase { phase, by, t } => Some((phase.as_str(), by, *t)),
            _ => None,
        })
    }
    /// Refuse (exit NOT_UNDERSTOOD) to act on a ledger that holds a line this version does not understand:
    /// the line may name a resource that acting on the rest would leak or break.
    pub fn understood(&self, path: &Path) -> Result<()> {
        match self.not_understood.first() {
            None => Ok(()),
            Some(n) => Err(Error::NotUnderstood(format!(
                "{}: line {}: {} ({} line(s) not understood); the session is left as it is: destroy it with the tools that wrote the line",
                path.display(),
                n.line,
                n.why,
                self.not_understood.len()
            ))),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Ledger {
    dir: PathBuf,
}

impl Ledger {
    /// Make the state directory and write the owner entry. Fails if the session already exists.
    pub fn create(dir: &Path, session: &str, owner: Owner, ttl_s: Option<u64>) -> Result<Ledger> {
        // The state root is closed to other host users before a session's mounts appear below it.
        let root = crate::state::state_root();
        if dir.starts_with(&root) {
            crate::state::private_root(&root)?;
        }
        if let Some(parent) = dir.parent() {
            std::fs::DirBuilder::new().recursive(true).mode(0o755).create(parent).ctx("create directory", parent)?;
        }
        std::fs::DirBuilder::new().mode(0o700).create(dir).ctx("create state directory", dir)?;
        let path = dir.join(FILE_NAME);
        let mut f = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path).ctx("create ledger", &path)?;
        let line = line_of(&Entry::Owner { t: crate::state::now(), session: session.to_string(), owner, ttl_s });
        f.write_all(line.as_bytes()).ctx("write ledger", &path)?;
        Ok(Ledger { dir: dir.to_path_buf() })
    }

    /// Open an existing ledger.
    pub fn open(dir: &Path) -> Result<Ledger> {
        let path = dir.join(FILE_NAME);
        if !path.is_file() {
            return Err(Error::bad_input(format!("{}: no ledger (is the session already destroyed?)", path.display())));
        }
        Ok(Ledger { dir: dir.to_path_buf() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// Record that `res` is about to be created. Call this before creating it.
    pub fn create_res(&self, res: Resource) -> Result<()> {
        self.append(&Entry::Create { t: crate::state::now(), res })
    }
    /// Record that `res` no longer exists.
    pub fn release(&self, res: Resource) -> Result<()> {
        self.append(&Entry::Release { t: crate::state::now(), res })
    }
    pub fn phase(&self, phase: &str) -> Result<()> {
        self.append(&Entry::Phase { t: crate::state::now(), phase: phase.to_string(), by: crate::proc::me()? })
    }

    pub fn append(&self, entry: &Entry) -> Result<()> {
        let path = self.path();
        let f = OpenOptions::new().read(true).append(true).open(&path).ctx("open ledger", &path)?;
        let _lock = Flock::wait(&f, &path, Mode::Exclusive)?;
        let mut line = line_of(entry);
        // A crash mid-write leaves a line without its newline; start ours on a fresh line so only the
        // damaged line is lost.
        if !ends_with_newline(&f) {
            line.insert(0, '\n');
        }
        (&f).write_all(line.as_bytes()).ctx("append to ledger", &path)?;
        Ok(())
    }

    pub fn read(&self) -> Result<Contents> {
        read_file(&self.path())
    }

    /// Append the phase `phase`, set by `by`, if and only if the last phase is one of `allowed`: the test
    /// and the append are one step under the lock every append takes, so of concurrent callers exactly one
    /// succeeds (the warm pool's claim, drums-pool(7)). Never creates a ledger a destroy just removed.
    pub fn append_phase_if(&self, phase: &str, by: &Owner, allowed: &[&str]) -> Result<PhaseCas> {
        use std::io::Read;
        let path = self.path();
        let f = match OpenOptions::new().read(true).append(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(PhaseCas::Gone),
            Err(e) => return Err(Error::io("open ledger", &path, e)),
        };
        let _lock = Flock::wait(&f, &path, Mode::Exclusive)?;
        let mut text = Vec::new();
        (&f).read_to_end(&mut text).ctx("read ledger", &path)?;
        let last = parse(&String::from_utf8_lossy(&text)).last_phase().map(|(p, ..)| p.to_string());
        if !last.as_deref().is_some_and(|l| allowed.contains(&l)) {
            return Ok(PhaseCas::Other(last));
        }
        let mut line = line_of(&Entry::Phase { t: crate::state::now(), phase: phase.to_string(), by: by.clone() });
        if text.last().is_some_and(|b| *b != b'\n') {
            line.insert(0, '\n');
        }
        (&f).write_all(line.as_bytes()).ctx("append to ledger", &path)?;
        Ok(PhaseCas::Appended)
    }
}

/// What `Ledger::append_phase_if` did.
#[derive(Debug, Clone, PartialEq)]
pub enum PhaseCas {
    Appended,
    /// Not appended: the last phase is this one (None: no phase yet).
    Other(Option<String>),
    /// The ledger is gone: the session was destroyed.
    Gone,
}

fn ends_with_newline(f: &File) -> bool {
    use std::os::unix::fs::FileExt;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len == 0 {
        return true;
    }
    let mut b = [0u8; 1];
    f.read_at(&mut b, len - 1).map(|_| b[0] == b'\n').unwrap_or(true)
}

/// A line as written: the format version first, then the entry.
#[derive(Serialize)]
struct Line<'a> {
    v: u64,
    #[serde(flatten)]
    entry: &'a Entry,
}

fn line_of(e: &Entry) -> String {
    let mut s = serde_json::to_string(&Line { v: VERSION, entry: e }).expect("ledger entries serialize");
    s.push('\n');
    s
}

/// What one line of a ledger is.
enum Read {
    Entry(Entry),
    /// The line ends before its object does: a write cut short (the last line, or one that a later append
    /// closed by starting on a fresh line).
    Torn,
    NotUnderstood(String),
}

fn read_line(line: &str) -> Read {
    let v: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) if e.is_eof() => return Read::Torn,
        Err(e) => return Read::NotUnderstood(format!("not a JSON object: {e}")),
    };
    let version = match v.get("v") {
        None => 1,
        Some(n) => match n.as_u64() {
            Some(n) => n,
            None => return Read::NotUnderstood(format!("format version `v` is {n}, not a number")),
        },
    };
    if version != VERSION {
        return Read::NotUnderstood(format!("format version {version} (this tool reads version {VERSION}; written by a newer tool?)"));
    }
    match serde_json::from_value::<Entry>(v) {
        Ok(e) => Read::Entry(e),
        Err(e) => Read::NotUnderstood(format!("not an entry this tool knows: {e}")),
    }
}

pub fn read_file(path: &Path) -> Result<Contents> {
    let text = std::fs::read(path).ctx("read ledger", path)?;
    Ok(parse(&String::from_utf8_lossy(&text)))
}

fn parse(text: &str) -> Contents {
    let mut c = Contents::default();
    for (i, line) in text.split('\n').enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        match read_line(line) {
            Read::Entry(e) => c.entries.push(e),
            Read::Torn => c.skipped_lines += 1,
            Read::NotUnderstood(why) => c.not_understood.push(NotUnderstood { line: i + 1, why }),
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner { pid: 42, start_time: 7 }
    }
    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("drums-ledger-test-{}", crate::state::new_id('d')));
        d
    }

    #[test]
    fn create_append_read_release() {
        let dir = tmp();
        let l = Ledger::create(&dir, "d-1", owner(), Some(60)).unwrap();
        l.create_res(Resource::Mount { path: "/x".into() }).unwrap();
        l.create_res(Resource::Link { name: "drums-1".into() }).unwrap();
        l.release(Resource::Mount { path: "/x".into() }).unwrap();
        let c = l.read().unwrap();
        assert_eq!(c.owner().unwrap().0, "d-1");
        assert_eq!(c.owner().unwrap().2, Some(60));
        assert_eq!(c.live(), vec![Resource::Link { name: "drums-1".into() }]);
        assert_eq!(c.skipped_lines, 0);
        assert!(Ledger::create(&dir, "d-1", owner(), None).is_err(), "a second create must fail");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(Ledger::open(&dir).is_err(), "a removed ledger is gone");
    }

    #[test]
    fn concurrent_appends_do_not_interleave() {
        let dir = tmp();
        let l = Ledger::create(&dir, "d-2", owner(), None).unwrap();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        l.create_res(Resource::Dir { path: format!("/t{t}/{i}/{}", "x".repeat(300)).into() }).unwrap();
                    }
                })
            })
            .collect();
        // And from other processes: fork children that append through their own descriptors.
        let mut kids = vec![];
        for k in 0..4 {
            match unsafe { libc::fork() } {
                0 => {
                    let l2 = Ledger::open(&dir).unwrap();
                    for i in 0..50 {
                        l2.create_res(Resource::Link { name: format!("p{k}-{i}") }).unwrap();
                    }
                    unsafe { libc::_exit(0) };
                }
                pid => kids.push(pid),
            }
        }
        for t in threads {
            t.join().unwrap();
        }
        for pid in kids {
            let mut st = 0;
            unsafe { libc::waitpid(pid, &mut st, 0) };
            assert_eq!(st, 0);
        }
        let c = l.read().unwrap();
        assert_eq!(c.skipped_lines, 0);
        assert_eq!(c.live().len(), 8 * 50 + 4 * 50);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn truncated_last_line_is_skipped_and_appends_continue() {
        let dir = tmp();
        let l = Ledger::create(&dir, "d-3", owner(), None).unwrap();
        l.create_res(Resource::Mount { path: "/a".into() }).unwrap();
        // What a kill -9 in the middle of a write leaves.
        let mut f = OpenOptions::new().append(true).open(l.path()).unwrap();
        f.write_all(br#"{"op":"create","t":1.0,"res":{"kind":"mou"#).unwrap();
        let c = l.read().unwrap();
        assert_eq!(c.skipped_lines, 1);
        assert_eq!(c.live(), vec![Resource::Mount { path: "/a".into() }]);
        l.create_res(Resource::Link { name: "drums-x".into() }).unwrap();
        let c = l.read().unwrap();
        assert_eq!(c.skipped_lines, 1);
        assert_eq!(c.live().len(), 2, "an append after a torn line is kept");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_conditional_phase_is_appended_once_among_concurrent_callers() {
        let dir = tmp();
        let l = Ledger::create(&dir, "d-5", owner(), None).unwrap();
        l.phase("parked").unwrap();
        // A torn last line (a writer killed mid-line) does not hide the last phase, and the append starts
        // on a fresh line.
        let mut f = OpenOptions::new().append(true).open(l.path()).unwrap();
        f.write_all(br#"{"op":"create","t":1.0,"res":{"kind":"mou"#).unwrap();
        let wins: usize = (0..8)
            .map(|i| {
                let l = l.clone();
                std::thread::spawn(move || l.append_phase_if("taken", &Owner { pid: 100 + i, start_time: 1 }, &["parked", "live"]).unwrap())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|r| *r == PhaseCas::Appended)
            .count();
        assert_eq!(wins, 1);
        let c = l.read().unwrap();
        assert_eq!(c.last_phase().unwrap().0, "taken");
        assert_eq!(c.skipped_lines, 1);
        assert_eq!(l.append_phase_if("taken", &owner(), &["parked"]).unwrap(), PhaseCas::Other(Some("taken".into())));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(l.append_phase_if("taken", &owner(), &["parked"]).unwrap(), PhaseCas::Gone);
    }

    #[test]
    fn phases_are_read_back() {
        let dir = tmp();
        let l = Ledger::create(&dir, "d-4", owner(), None).unwrap();
        l.phase("creating").unwrap();
        l.phase("live").unwrap();
        assert_eq!(l.read().unwrap().last_phase().unwrap().0, "live");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lines_carry_their_version_and_unversioned_lines_are_version_1() {
        let dir = tmp();
        let l = Ledger::create(&dir, "d-5", owner(), None).unwrap();
        l.create_res(Resource::Link { name: "drums-5".into() }).unwrap();
        let text = std::fs::read_to_string(l.path()).unwrap();
        for line in text.lines() {
            assert!(line.starts_with(r#"{"v":1,"op":"#), "{line}");
        }
        // What the tools before the version wrote.
        let mut f = OpenOptions::new().append(true).open(l.path()).unwrap();
        f.write_all(b"{\"op\":\"create\",\"t\":2.0,\"res\":{\"kind\":\"mount\",\"path\":\"/old\"}}\n").unwrap();
        let c = l.read().unwrap();
        assert_eq!(c.live(), vec![Resource::Link { name: "drums-5".into() }, Resource::Mount { path: "/old".into() }]);
        assert!(c.not_understood.is_empty() && c.skipped_lines == 0, "{c:?}");
        assert!(c.understood(&l.path()).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn whole_lines_not_understood_are_reported_not_skipped() {
        for (line, why) in [
            (r#"{"v":2,"op":"create","t":2.0,"res":{"kind":"mount","path":"/new"}}"#, "format version 2"),
            (r#"{"v":1,"op":"lease","t":2.0,"res":{"kind":"mount","path":"/new"}}"#, "not an entry this tool knows"),
            (r#"{"op":"create","t":2.0,"res":{"kind":"volume","name":"v0"}}"#, "not an entry this tool knows"),
            (r#"{"v":"one","op":"phase"}"#, "not a number"),
            (r#"{"op":"create"}}"#, "not a JSON object"),
        ] {
            let dir = tmp();
            let l = Ledger::create(&dir, "d-6", owner(), None).unwrap();
            let mut f = OpenOptions::new().append(true).open(l.path()).unwrap();
            f.write_all(format!("{line}\n").as_bytes()).unwrap();
            let c = l.read().unwrap();
            assert_eq!(c.skipped_lines, 0, "{line}");
            assert_eq!(c.not_understood.len(), 1, "{line}");
            assert_eq!(c.not_understood[0].line, 2, "{line}");
            assert!(c.not_understood[0].why.contains(why), "{line}: {}", c.not_understood[0].why);
            let e = c.understood(&l.path()).unwrap_err();
            assert_eq!(e.exit_code(), crate::error::exit::NOT_UNDERSTOOD, "{line}");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    #[test]
    fn a_torn_line_closed_by_a_later_append_is_still_torn() {
        let dir = tmp();
        let l = Ledger::create(&dir, "d-7", owner(), None).unwrap();
        let mut f = OpenOptions::new().append(true).open(l.path()).unwrap();
        f.write_all(br#"{"v":1,"op":"create","t":1.0,"res":{"kind":"link","na"#).unwrap();
        l.create_res(Resource::Link { name: "drums-7".into() }).unwrap();
        let c = l.read().unwrap();
        assert_eq!((c.skipped_lines, c.not_understood.len()), (1, 0), "{c:?}");
        assert_eq!(c.live(), vec![Resource::Link { name: "drums-7".into() }]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
