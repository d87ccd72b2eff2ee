//! Inspecting one live session through /proc: which processes are its, and every kernel object they hold.
//!
//! The processes are the union of the ledger's live processes and every process whose PID namespace is the
//! session's (never found by name). Each is opened as `/proc/PID` once its start time matches, and read
//! only through that directory. Each object gets an identity that means the same kernel object wherever it
//! is seen (see `docs/record.md`, "The audit report"), and a list of holders: which process holds it, how
//! (descriptor, mapping, thread, lock), under which path, and whether that holder can write it.

use super::sys::{dev_pair, kcmp, PidFd, ProcDir, ReadErr, Stat, KCMP_FILE, KCMP_FILES};
use crate::record::Session;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Namespace kinds a session owns (`drums-ns` unshares them): sharing one between sessions is a finding.
pub const SESSION_NS: &[&str] = &["pid", "mnt", "net", "ipc", "uts"];
/// Namespace kinds a session shares with the host unless it has its own (a user namespace; a time
/// namespace, which drums-ns gives every session it makes and a sibling of an older checkpoint lacks):
/// the host's are reported, not compared.
pub const HOST_NS: &[&str] = &["user", "cgroup", "time"];

/// This tool's (the host's) namespace of `kind`, one of `HOST_NS`.
fn host_ns(kind: &str) -> Option<u64> {
    static HOST: std::sync::OnceLock<BTreeMap<&'static str, u64>> = std::sync::OnceLock::new();
    let me = std::process::id() as i32;
    HOST.get_or_init(|| HOST_NS.iter().filter_map(|k| Some((*k, crate::proc::ns_inode(me, k).ok()?))).collect()).get(kind).copied()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Process,
    Namespace,
    Pipe,
    Socket,
    Eventfd,
    AnonInode,
    File,
    Chr,
    Blk,
    Dir,
    Other,
    Lock,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Holder {
    /// Host PID.
    pub pid: i32,
    pub comm: String,
    /// How it is held: `fd 7`, `thread 123 fd 7`, `map 7f00-7f10`, `cwd`, `root`, `thread 123`,
    /// `socket fd 9` (a socket of that namespace), `ledger`, `pid namespace`, `lock`.
    pub via: String,
    /// The path or name the kernel shows for it (`readlink`, the maps path, the lock line).
    pub path: String,
    /// Open mode of a descriptor (`r`, `w`, `rw`, `path`), mapping permissions, lock type; null otherwise.
    pub mode: Option<String>,
    /// This holder can write the object (a descriptor open for writing, a writable shared mapping).
    pub writes: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Obj {
    pub kind: Kind,
    pub id: String,
    /// The first path seen for it.
    pub path: String,
    /// For device nodes and directories: the node's permission bits let the session write it
    /// (any process of the session can open it for writing whenever it likes).
    pub node_writable: bool,
    pub holders: Vec<Holder>,
}

impl Obj {
    pub fn writable(&self) -> bool {
        self.node_writable || self.holders.iter().any(|h| h.writes)
    }
}

/// A descriptor of the shared anonymous inode (eventpoll, inotify, ...; eventfd without an id): compared
/// across sessions with kcmp(2).
#[derive(Debug, Clone)]
pub struct AnonRef {
    pub pid: i32,
    pub fd: i32,
    pub name: String,
    pub holder: Holder,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub pid: i32,
    pub start_time: u64,
    /// PID inside the session's PID namespace.
    pub ns_pid: Option<i32>,
    pub comm: String,
    pub found_by: Vec<FoundBy>,
    pub threads: usize,
}

/// How the audit found a process of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FoundBy {
    /// A live process of the session's ledger (its start time matches).
    Ledger,
    /// A process in the session's PID namespace.
    PidNamespace,
    /// The session record's init, found by neither (it exited, or the ledger is unreadable).
    Record,
}

impl FoundBy {
    pub fn as_str(self) -> &'static str {
        match self {
            FoundBy::Ledger => "ledger",
            FoundBy::PidNamespace => "pid_namespace",
            FoundBy::Record => "record",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct XSocket {
    pub inode: u64,
    /// As /proc/net/unix shows it: `@...` abstract, else a path inside the session.
    pub address: String,
    pub listening: bool,
    /// The network namespace the address lives in (abstract addresses are per network namespace).
    pub netns: u64,
    /// For a path socket: the socket file's identity (`dev MAJ:MIN ino N`) inside the session.
    pub file: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct XServer {
    pub pid: i32,
    pub ns_pid: i32,
    pub display: u32,
    pub record_socket: String,
    pub sockets: Vec<XSocket>,
}

/// What the audit saw of one session (serialized into the report).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct SessionInfo {
    pub id: String,
    pub init_pid: i32,
    pub init_start_time: u64,
    /// The session's own namespaces as its init holds them.
    pub namespaces: BTreeMap<String, u64>,
    /// Namespaces every session shares with the host by design: reported, not compared.
    pub host_namespaces: BTreeMap<String, Vec<u64>>,
    pub processes: Vec<ProcessInfo>,
    pub zombies: Vec<i32>,
    /// Ledgered processes that no longer exist (started at another time or gone) when the audit began.
    pub ledger_processes_gone: Vec<i32>,
    pub threads: usize,
    pub descriptors: usize,
    /// Descriptors closed between listing and reading them (the object they named is no longer held).
    pub descriptors_vanished: usize,
    pub shared_mappings: usize,
    pub locks: usize,
    pub sockets_netns_checked: usize,
    pub x_server: Option<XServer>,
    /// Objects found, by kind.
    pub objects: BTreeMap<String, usize>,
}

pub struct SessionScan {
    pub info: SessionInfo,
    pub objects: BTreeMap<String, Obj>,
    pub anon: Vec<AnonRef>,
    /// Opened processes, for the check at the end of the audit that none has exited.
    pub dirs: Vec<ProcDir>,
    /// Per process, what its reaped children added up to when it was read ([`ProcDir::children_totals`]).
    pub children_totals: BTreeMap<i32, [u64; 4]>,
    /// Reasons the scan is incomplete.
    pub problems: Vec<String>,
    /// The session itself is gone (its init, or its ledger): repeating the audit cannot help.
    pub gone: bool,
}

impl SessionScan {
    fn add(&mut self, kind: Kind, id: String, path: &str, node_writable: bool, h: Holder) {
        let o = self.objects.entry(id.clone()).or_insert_with(|| Obj { kind, id, path: path.to_string(), node_writable: false, holders: vec![] });
        o.node_writable |= node_writable;
        o.holders.push(h);
    }
}

fn mm(dev: u64) -> String {
    let (a, b) = dev_pair(dev);
    format!("{a}:{b}")
}


/// One `lock:` line of fdinfo or a /proc/locks line, from its type onwards:
/// `POSIX  ADVISORY  WRITE 27652 00:30:150 0 EOF` -> (object id, description).
fn parse_lock(line: &str) -> Option<(String, String)> {
    let w: Vec<&str> = line.split_whitespace().filter(|w| *w != "->").collect();
    // [n:] TYPE MODE KIND PID MAJ:MIN:INO START END
    let w = if w.first().is_some_and(|x| x.ends_with(':')) { &w[1..] } else { &w[..] };
    if w.len() < 7 {
        return None;
    }
    let mut f = w[4].split(':');
    let maj = u32::from_str_radix(f.next()?, 16).ok()?;
    let min = u32::from_str_radix(f.next()?, 16).ok()?;
    let ino: u64 = f.next()?.parse().ok()?;
    Some((format!("lock:{maj}:{min}:{ino}"), format!("{} {} {}-{}", w[0], w[2], w[5], w[6])))
}

fn describe_gone(what: &str, e: &ReadErr) -> String {
    format!("{what}: {e}")
}

/// Inspect a session. `anon_inode` is the shared anonymous inode ([`super::sys::shared_anon_inode`]).
pub fn scan(s: &Session, anon_inode: Option<(u64, u64)>, locks: &[procfs::Lock]) -> SessionScan {
    let mut sc = SessionScan { info: SessionInfo { id: s.id.clone(), ..Default::default() }, objects: BTreeMap::new(), anon: vec![], dirs: vec![], children_totals: BTreeMap::new(), problems: vec![], gone: false };
    let Some(ns) = s.ns.as_ref() else {
        sc.problems.push(format!("session {}: the record has no `ns` section", s.id));
        sc.gone = true;
        return sc;
    };
    sc.info.init_pid = ns.init_pid;
    sc.info.init_start_time = ns.init_start_time;
    let init = match ProcDir::open(ns.init_pid, Some(ns.init_start_time)) {
        Ok(d) => d,
        Err(e) => {
            sc.problems.push(format!("session {}: its init (pid {}, start time {}) is gone ({e})", s.id, ns.init_pid, ns.init_start_time));
            sc.gone = true;
            return sc;
        }
    };
    if !init.alive() {
        sc.problems.push(format!("session {}: its init (pid {}) is gone (it has exited)", s.id, ns.init_pid));
        sc.gone = true;
        return sc;
    }
    for t in SESSION_NS {
        match init.stat_target(&format!("ns/{t}")) {
            Ok(st) => {
                sc.info.namespaces.insert(t.to_string(), st.ino);
            }
            Err(e) => {
                sc.problems.push(describe_gone(&format!("session {}: namespace {t} of its init", s.id), &e));
                sc.gone = true;
                return sc;
            }
        }
    }
    let want = [("pid", ns.inodes.pid), ("mnt", ns.inodes.mnt), ("net", ns.inodes.net), ("ipc", ns.inodes.ipc), ("uts", ns.inodes.uts)];
    for (t, ino) in want {
        if sc.info.namespaces.get(t) != Some(&ino) {
            sc.problems.push(format!("session {}: its init is in {t} namespace {:?}, the record says {ino}", s.id, sc.info.namespaces.get(t)));
            sc.gone = true;
        }
    }
    if sc.gone {
        return sc;
    }

    // The processes: ledger and PID namespace.
    let mut found: BTreeMap<i32, (Option<u64>, Vec<FoundBy>)> = BTreeMap::new();
    match crate::ledger::read_file(&s.state_dir.join(crate::ledger::FILE_NAME)) {
        Ok(c) => {
            for r in c.live() {
                if let crate::ledger::Resource::Process { pid, start_time, .. } = r {
                    if crate::proc::start_time(pid) == Some(start_time) {
                        found.entry(pid).or_insert((Some(start_time), vec![])).1.push(FoundBy::Ledger);
                    } else {
                        sc.info.ledger_processes_gone.push(pid);
                    }
                }
            }
        }
        Err(e) => {
            sc.problems.push(format!("session {}: cannot read its ledger ({e}); is it destroyed?", s.id));
            sc.gone = true;
            return sc;
        }
    }
    for pid in crate::proc::pids_in_pidns(ns.inodes.pid) {
        found.entry(pid).or_insert((None, vec![])).1.push(FoundBy::PidNamespace);
    }
    found.entry(ns.init_pid).or_insert_with(|| (Some(ns.init_start_time), vec![FoundBy::Record]));

    for (pid, (start, by)) in found {
        let d = match ProcDir::open(pid, start) {
            Ok(d) => d,
            Err(e) => {
                sc.problems.push(format!("session {}: process {pid} exited during the audit ({e})", s.id));
                continue;
            }
        };
        let Ok(st) = d.start_time() else {
            sc.problems.push(format!("session {}: process {pid} exited during the audit", s.id));
            continue;
        };
        if matches!(d.state(), Ok('Z') | Ok('X')) {
            sc.info.zombies.push(pid);
            sc.dirs.push(d);
            continue;
        }
        if let Ok(t) = d.children_totals() {
            sc.children_totals.insert(pid, t);
        }
        match scan_process(&mut sc, &d, anon_inode) {
            Ok(threads) => {
                let ns_pid = d.ns_pid().ok().flatten();
                sc.info.processes.push(ProcessInfo { pid, start_time: st, ns_pid, comm: d.comm(), found_by: by, threads });
            }
            Err(e) => {
                sc.problems.push(format!("session {}: process {pid} could not be read to the end ({e}): it exited during the audit", s.id));
            }
        }
        sc.dirs.push(d);
    }

    // Locks the kernel attributes to the session's processes by PID (POSIX and flock locks); OFD locks
    // (no PID) were attributed through the descriptors' fdinfo.
    let pids: BTreeSet<i32> = sc.info.processes.iter().map(|p| p.pid).collect();
    for l in locks {
        let Some(pid) = l.pid.filter(|p| pids.contains(p)) else { continue };
        let id = format!("lock:{}:{}:{}", l.devmaj, l.devmin, l.inode);
        let desc = format!("{:?} {:?} {}-{}", l.lock_type, l.kind, l.offset_first, l.offset_last.map(|v| v.to_string()).unwrap_or("EOF".into()));
        let already = sc.objects.get(&id).is_some_and(|o| o.holders.iter().any(|h| h.pid == pid));
        if !already {
            let comm = sc.info.processes.iter().find(|p| p.pid == pid).map(|p| p.comm.clone()).unwrap_or_default();
            sc.add(Kind::Lock, id, &desc, false, Holder { pid, comm, via: "lock (/proc/locks)".into(), path: desc.clone(), mode: Some(desc.clone()), writes: true });
            sc.info.locks += 1;
        }
    }

    // The X server: the record's xvfb process, found in the session by its PID inside the session.
    if let Some(desk) = s.desktop.as_ref() {
        match x_server(&sc, desk) {
            Ok(x) => sc.info.x_server = Some(x),
            Err(e) => sc.problems.push(format!("session {}: the X server's socket: {e}", s.id)),
        }
    }
    for o in sc.objects.values() {
        *sc.info.objects.entry(serde_json::to_value(o.kind).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()).or_default() += 1;
    }
    sc
}

fn x_server(sc: &SessionScan, desk: &crate::record::Desktop) -> Result<XServer, String> {
    let role = desk.processes.iter().find(|p| p.role == "xvfb").ok_or("the record's desktop has no xvfb process")?;
    let p = sc.info.processes.iter().find(|p| p.ns_pid == Some(role.pid)).ok_or_else(|| format!("no process of the session has PID {} inside it (the record's xvfb)", role.pid))?;
    let d = sc.dirs.iter().find(|d| d.pid == p.pid).ok_or("the X server was not opened")?;
    let netns = d.stat_target("ns/net").map_err(|e| format!("network namespace of the X server: {e}"))?.ino;
    let mine: BTreeSet<u64> = sc
        .objects
        .values()
        .filter(|o| o.kind == Kind::Socket && o.holders.iter().any(|h| h.pid == p.pid && h.via.starts_with("fd")))
        .filter_map(|o| o.id.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok())
        .collect();
    let table = d.read_string("net/unix").map_err(|e| format!("read /proc/{}/net/unix: {e}", p.pid))?;
    let mut sockets = vec![];
    for l in table.lines().skip(1) {
        let w: Vec<&str> = l.split_whitespace().collect();
        if w.len() < 7 {
            continue;
        }
        let Ok(inode) = w[6].parse::<u64>() else { continue };
        if !mine.contains(&inode) {
            continue;
        }
        let flags = u32::from_str_radix(w[3], 16).unwrap_or(0);
        let listening = flags & 0x10000 != 0;
        let Some(address) = w.get(7).map(|s| s.to_string()) else { continue };
        if !listening {
            continue;
        }
        let file = if address.starts_with('/') {
            d.stat_target(&format!("root{address}")).ok().map(|st| format!("dev {} ino {}", mm(st.dev), st.ino))
        } else {
            None
        };
        sockets.push(XSocket { inode, address, listening, netns, file });
    }
    if sockets.is_empty() {
        return Err(format!("process {} (the record's xvfb) has no listening Unix socket", p.pid));
    }
    Ok(XServer { pid: p.pid, ns_pid: role.pid, display: desk.display, record_socket: desk.x_socket.clone(), sockets })
}

/// Everything one process holds. Returns its thread count; an error means the process is gone.
fn scan_process(sc: &mut SessionScan, d: &ProcDir, anon_inode: Option<(u64, u64)>) -> Result<usize, ReadErr> {
    let pid = d.pid;
    let comm = d.comm();
    let h = |via: String, path: String, mode: Option<String>, writes: bool| Holder { pid, comm: comm.clone(), via, path, mode, writes };

    // Namespaces of the process, then of each thread that differs (setns(2) is per thread).
    let mut proc_ns: BTreeMap<&str, u64> = BTreeMap::new();
    for t in SESSION_NS.iter().chain(HOST_NS) {
        let st = d.stat_target(&format!("ns/{t}"))?;
        proc_ns.insert(t, st.ino);
        // A user namespace other than the host's is a session's own (the default of drums-overlay
        // create and drums-restore, unless --host-ids), and so is a time namespace other than the host's:
        // compared like the others, so two sessions that share one fail.
        let own = matches!(*t, "user" | "time") && Some(st.ino) != host_ns(t);
        if SESSION_NS.contains(t) || own {
            sc.add(Kind::Namespace, format!("{t}:[{}]", st.ino), &format!("{t}:[{}]", st.ino), false, h("process".into(), format!("{t}:[{}]", st.ino), None, false));
        } else {
            let v = sc.info.host_namespaces.entry(t.to_string()).or_default();
            if !v.contains(&st.ino) {
                v.push(st.ino);
            }
        }
    }
    let tids = d.list_numbers("task")?;
    sc.info.threads += tids.len();
    let mut tables = vec![String::new()];
    for &tid in tids.iter().filter(|&&t| t != pid) {
        for t in SESSION_NS {
            let Ok(st) = d.stat_target(&format!("task/{tid}/ns/{t}")) else { continue };
            if proc_ns.get(t) != Some(&st.ino) {
                sc.add(Kind::Namespace, format!("{t}:[{}]", st.ino), &format!("{t}:[{}]", st.ino), false, h(format!("thread {tid}"), format!("{t}:[{}]", st.ino), None, false));
            }
        }
        // A thread with a descriptor table of its own (unshare(CLONE_FILES)) is read separately.
        if kcmp(pid, tid, KCMP_FILES, 0, 0).is_some_and(|r| r != 0) {
            tables.push(format!("task/{tid}/"));
        }
    }

    // Descriptors.
    let pidfd = PidFd::open(pid).ok();
    for base in tables {
        let fds = match d.list_numbers(&format!("{base}fd")) {
            Ok(f) => f,
            Err(ReadErr::Gone) if !base.is_empty() => continue,
            Err(e) => return Err(e),
        };
        let via_prefix = if base.is_empty() { String::new() } else { format!("thread {} ", base.trim_start_matches("task/").trim_end_matches('/')) };
        for fd in fds {
            let rel = format!("{base}fd/{fd}");
            let (link, st, info) = match (d.readlink(&rel), d.stat_target(&rel), d.read_string(&format!("{base}fdinfo/{fd}"))) {
                (Ok(l), Ok(s), Ok(i)) => (l, s, i),
                (Err(ReadErr::Other(e)), _, _) | (_, Err(ReadErr::Other(e)), _) | (_, _, Err(ReadErr::Other(e))) => return Err(ReadErr::Other(e)),
                _ => {
                    sc.info.descriptors_vanished += 1;
                    continue;
                }
            };
            sc.info.descriptors += 1;
            let (mode, writes) = crate::proc::open_mode(&info);
            let via = format!("{via_prefix}fd {fd}");
            for l in info.lines().filter_map(|l| l.strip_prefix("lock:")) {
                if let Some((id, desc)) = parse_lock(l) {
                    sc.info.locks += 1;
                    sc.add(Kind::Lock, id, &link, false, h(via.clone(), link.clone(), Some(desc), true));
                }
            }
            classify_fd(sc, &h(via.clone(), link.clone(), mode, writes), fd, &link, st, &info, anon_inode);
            if link.starts_with("socket:") && base.is_empty() {
                match pidfd.as_ref().map(|p| p.socket_netns(fd)) {
                    Some(Ok(netns)) => {
                        sc.info.sockets_netns_checked += 1;
                        let id = format!("net:[{netns}]");
                        sc.add(Kind::Namespace, id.clone(), &id, false, h(format!("socket fd {fd}"), link.clone(), None, false));
                    }
                    Some(Err(ReadErr::Gone)) => sc.info.descriptors_vanished += 1,
                    Some(Err(e)) => sc.problems.push(format!("process {pid} fd {fd} ({link}): its network namespace could not be read: {e}")),
                    None => sc.problems.push(format!("process {pid}: pidfd_open failed, so its sockets' network namespaces could not be read")),
                }
            }
        }
    }

    // Working directory and root.
    for (what, rel) in [("cwd", "cwd"), ("root", "root")] {
        let st = d.stat_target(rel)?;
        let path = d.readlink(rel).unwrap_or_default();
        sc.add(Kind::Dir, format!("dir:{}:{}", mm(st.dev), st.ino), &path, st.mode & 0o222 != 0, h(what.into(), path.clone(), None, false));
    }

    // Shared mappings of files (private mappings are copy-on-write: never shared writable).
    let maps = d.read_string("maps")?;
    for l in maps.lines() {
        let w: Vec<&str> = l.splitn(6, ' ').collect();
        if w.len() < 5 || w[1].as_bytes().get(3) != Some(&b's') {
            continue;
        }
        let path = w.get(5).map(|p| p.trim().to_string()).unwrap_or_default();
        let writes = w[1].as_bytes().get(1) == Some(&b'w');
        sc.info.shared_mappings += 1;
        let (kind, id, node_writable) = match d.stat_target(&format!("map_files/{}", w[0])) {
            Ok(st) => id_of_stat(st),
            Err(ReadErr::Gone) => {
                // The mapping went away, or map_files is not readable: fall back to the maps line.
                let mut dv = w[3].split(':');
                let maj = dv.next().and_then(|v| u32::from_str_radix(v, 16).ok()).unwrap_or(0);
                let min = dv.next().and_then(|v| u32::from_str_radix(v, 16).ok()).unwrap_or(0);
                (Kind::File, format!("file:{maj}:{min}:{}", w[4]), false)
            }
            Err(e) => return Err(e),
        };
        // A System V shared memory segment's inode number is its id, which each IPC namespace counts from
        // 0: the segment is named by its IPC namespace and id.
        let id = if kind == Kind::File && path.starts_with("/SYSV") && path.ends_with("(deleted)") {
            format!("sysvshm:ipc:[{}]:{}", proc_ns.get("ipc").copied().unwrap_or(0), id.rsplit(':').next().unwrap_or(""))
        } else {
            id
        };
        sc.add(kind, id, &path, node_writable, h(format!("map {}", w[0]), path.clone(), Some(w[1].to_string()), writes));
    }
    Ok(tids.len())
}

/// Identity of a file-like object from its stat: (kind, id, node writable).
fn id_of_stat(st: Stat) -> (Kind, String, bool) {
    let node_w = st.mode & 0o222 != 0;
    match st.file_type() {
        libc::S_IFREG => (Kind::File, format!("file:{}:{}", mm(st.dev), st.ino), false),
        libc::S_IFDIR => (Kind::Dir, format!("dir:{}:{}", mm(st.dev), st.ino), node_w),
        libc::S_IFCHR => {
            let (maj, min) = dev_pair(st.rdev);
            // Pseudo-terminals belong to their devpts instance: the same numbers in two instances are two
            // terminals. Every other character device is the one kernel device its numbers name.
            if (136..=143).contains(&maj) || (maj, min) == (5, 2) {
                (Kind::Chr, format!("chr:{maj}:{min}@{}", mm(st.dev)), node_w)
            } else {
                (Kind::Chr, format!("chr:{maj}:{min}"), node_w)
            }
        }
        libc::S_IFBLK => {
            let (maj, min) = dev_pair(st.rdev);
            (Kind::Blk, format!("blk:{maj}:{min}"), node_w)
        }
        libc::S_IFIFO => (Kind::Pipe, format!("fifo:{}:{}", mm(st.dev), st.ino), false),
        libc::S_IFSOCK => (Kind::Socket, format!("socket:[{}]", st.ino), false),
        _ => (Kind::Other, format!("other:{}:{}", mm(st.dev), st.ino), false),
    }
}

fn classify_fd(sc: &mut SessionScan, holder: &Holder, fd: i32, link: &str, st: Stat, info: &str, anon_inode: Option<(u64, u64)>) {
    if link.starts_with("socket:[") {
        sc.add(Kind::Socket, format!("socket:[{}]", st.ino), link, false, holder.clone());
    } else if link.starts_with("pipe:[") {
        sc.add(Kind::Pipe, format!("pipe:[{}]", st.ino), link, false, holder.clone());
    } else if let Some(name) = link.strip_prefix("anon_inode:") {
        let shared_inode = anon_inode == Some((st.dev, st.ino));
        let eventfd_id = info.lines().find_map(|l| l.strip_prefix("eventfd-id:")).map(|v| v.trim().to_string());
        match (name, eventfd_id, shared_inode) {
            ("[eventfd]", Some(id), _) => sc.add(Kind::Eventfd, format!("eventfd:{id}"), link, false, holder.clone()),
            (_, _, true) => sc.anon.push(AnonRef { pid: holder.pid, fd, name: name.to_string(), holder: holder.clone() }),
            _ => sc.add(Kind::AnonInode, format!("anon:{name}:{}:{}", mm(st.dev), st.ino), link, false, holder.clone()),
        }
    } else {
        let (kind, id, node_w) = id_of_stat(st);
        sc.add(kind, id, link, node_w, holder.clone());
    }
}

/// Descriptors of the shared anonymous inode held in both sessions that are the same open file (kcmp).
pub fn same_anon(a: &SessionScan, b: &SessionScan) -> Vec<(AnonRef, AnonRef)> {
    let mut out = vec![];
    for x in &a.anon {
        for y in b.anon.iter().filter(|y| y.name == x.name) {
            if kcmp(x.pid, y.pid, KCMP_FILE, x.fd as u64, y.fd as u64) == Some(0) {
                out.push((x.clone(), y.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lock_lines() {
        assert_eq!(parse_lock("\t1: POSIX  ADVISORY  WRITE 27652 00:30:150 0 EOF").unwrap().0, "lock:0:48:150");
        assert_eq!(parse_lock("2: -> FLOCK  ADVISORY  WRITE 25803 fe:00:5308522 0 EOF").unwrap().0, "lock:254:0:5308522");
        assert!(parse_lock("garbage").is_none());
    }

    #[test]
    fn open_modes() {
        assert_eq!(crate::proc::open_mode("pos:\t0\nflags:\t0100002\n"), (Some("rw".into()), true));
        assert_eq!(crate::proc::open_mode("pos:\t0\nflags:\t02100000\n"), (Some("r".into()), false));
        assert_eq!(crate::proc::open_mode("flags:\t01\n"), (Some("w".into()), true));
        assert_eq!(crate::proc::open_mode("flags:\t012000000\n"), (Some("path".into()), false));
    }
}
