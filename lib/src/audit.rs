//! The sibling audit (check C3 of the source report): do two or more live sessions share any kernel
//! object? Every process of each session is inspected through /proc (`scan`), the objects are compared
//! pair by pair, and two verdicts are given: the literal rule ("any shared writable object fails") and
//! revision 2a (a shared writable object is tolerated only if it is exactly /dev/null or /dev/urandom, a
//! cold-pair control audited in the same pass shares the same object, and nothing else is shared).
//! Both are always reported; the exit status follows the one asked for. The rules are spelled out in
//! drums-audit(1); the report's fields in docs/record.md.

pub mod identity;
pub mod scan;
pub mod sys;

use crate::error::{exit, Error, Result};
use crate::record::Session;
use scan::{Holder, Kind, Obj, SessionInfo, SessionScan};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The objects revision 2a may tolerate: the kernel's null and urandom devices (major 1, minors 3 and 9).
pub const TOLERATED_2A: &[(&str, &str)] = &[("chr:1:3", "/dev/null"), ("chr:1:9", "/dev/urandom")];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
pub enum Rule {
    /// The pre-registered wording: any shared writable object fails.
    #[serde(rename = "literal")]
    Literal,
    /// Revision 2a: only /dev/null and /dev/urandom are tolerated, and only when the control shares them.
    #[value(name = "revision-2a")]
    #[serde(rename = "revision-2a")]
    Revision2a,
}

pub struct Options {
    pub rule: Rule,
    /// How many times to run the whole audit when processes started or exited while it ran.
    pub attempts: u32,
    /// Pause between attempts.
    pub retry_pause: Duration,
}

/// One object both sessions of a pair hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SharedObj {
    pub kind: Kind,
    pub id: String,
    pub path: String,
    /// Some holder can write it (a descriptor open for writing, a writable shared mapping), or it is a device
    /// node or directory whose permission bits allow writing.
    pub writable: bool,
    /// Its sharing fails the literal rule.
    pub fails_literal: bool,
    /// Per session: how many holders, and the first few of them.
    pub holder_counts: BTreeMap<String, usize>,
    pub holders: BTreeMap<String, Vec<Holder>>,
}

/// The checks of a pair, in the order of their names (an `ObjRef` sorts by its check first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckName {
    AnonInodes,
    Devices,
    Directories,
    Eventfds,
    Files,
    Locks,
    Namespaces,
    NetworkNamespace,
    OtherFiles,
    Pipes,
    Processes,
    Sockets,
    XSocket,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub name: CheckName,
    /// What the check compares and when sharing fails it.
    pub rule: Cow<'static, str>,
    /// Objects of this check's kinds found in each session.
    pub compared: BTreeMap<String, usize>,
    pub shared: Vec<SharedObj>,
    /// Nothing shared fails the literal rule. `null` for a check that does not apply (no desktop).
    pub pass: Option<bool>,
    /// Why the check does not apply, or other remarks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairReport {
    pub sessions: [String; 2],
    pub checks: Vec<Check>,
    /// Every object the pair shares, failing the literal rule or not.
    pub shared: Vec<ObjRef>,
    /// The objects whose sharing fails the literal rule.
    pub failing: Vec<ObjRef>,
    /// The literal rule for this pair; `null` when the audit is incomplete and nothing failing was found.
    pub pass_literal: Option<bool>,
}

/// An object named in a verdict.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct ObjRef {
    pub check: CheckName,
    pub kind: Kind,
    pub id: String,
    pub path: String,
    pub writable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pair: Option<[String; 2]>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    /// `true` pass, `false` fail, `null` unknown (the audit is incomplete and found nothing failing).
    pub pass: Option<bool>,
    pub failed_on: Vec<ObjRef>,
    /// Revision 2a only: the shared objects it tolerated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerated: Option<Vec<ObjRef>>,
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdicts {
    pub literal: Verdict,
    pub revision_2a: Verdict,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ControlReport {
    pub sessions: Vec<SessionInfo>,
    /// Neither control session was restored (no `restore` section): a cold pair, as revision 2a asks.
    pub cold: bool,
    pub pair: PairReport,
}

crate::record_type!(AuditType = "audit");

/// The report drums-audit prints (`"type": "audit"`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: AuditType,
    pub t: f64,
    pub duration_s: f64,
    /// The rule the exit status follows.
    pub rule: Rule,
    /// Every process of every session was read to the end and none started or exited meanwhile.
    pub complete: bool,
    /// Why not.
    pub incomplete: Vec<String>,
    pub attempts: u32,
    pub sessions: Vec<SessionInfo>,
    pub pairs: Vec<PairReport>,
    pub control: Option<ControlReport>,
    /// With a control: objects the audited sessions share that the control pair does not.
    pub introduced_by_restore: Option<Vec<ObjRef>>,
    /// With a control: objects the control pair shares that the audited sessions do not.
    pub control_only: Option<Vec<ObjRef>>,
    pub verdicts: Verdicts,
    /// Per audited session: the boundary of each process (capabilities, seccomp, user namespace),
    /// whether all are confined, and (restored siblings) whether each is its checkpoint's source's. A
    /// session that differs fails both rules.
    pub boundary: BTreeMap<String, crate::boundary::Comparison>,
    /// Each audited session's user namespace and host id maps, and whether two of them share either
    /// (identity::IdentityReport). A finding fails both rules.
    pub identity: identity::IdentityReport,
    /// The exit status: 0 the rule passes, 1 it fails, 6 the audit is incomplete.
    pub exit: i32,
}

impl Report {
    /// The report as an error for the exit status (the report itself is printed first).
    pub fn outcome(&self) -> Result<()> {
        match self.exit {
            exit::OK => Ok(()),
            exit::INCOMPLETE => Err(Error::Incomplete(format!("the audit is incomplete: {}", self.incomplete.join("; ")))),
            _ => {
                let v = match self.rule {
                    Rule::Literal => &self.verdicts.literal,
                    Rule::Revision2a => &self.verdicts.revision_2a,
                };
                let what: Vec<String> = v.failed_on.iter().map(|o| format!("{} {}", o.id, o.path)).chain(v.reasons.iter().cloned()).collect();
                Err(Error::CheckFailed(format!("the {} rule fails: {}", serde_json::to_value(self.rule).unwrap().as_str().unwrap_or(""), what.join("; "))))
            }
        }
    }
}

struct CheckDef {
    name: CheckName,
    rule: &'static str,
    select: fn(&Obj) -> bool,
    /// Sharing fails whatever the access (false: only a writable shared object fails).
    any_sharing_fails: bool,
}

fn ns_of(o: &Obj) -> &str {
    o.id.split(':').next().unwrap_or("")
}

const CHECKS: &[CheckDef] = &[
    CheckDef { name: CheckName::Namespaces, rule: "PID, mount, IPC and UTS namespaces of every process and thread: any namespace held in both sessions fails", select: |o| o.kind == Kind::Namespace && ns_of(o) != "net", any_sharing_fails: true },
    CheckDef { name: CheckName::NetworkNamespace, rule: "network namespaces of every process, thread and socket: any network namespace held in both sessions fails", select: |o| o.kind == Kind::Namespace && ns_of(o) == "net", any_sharing_fails: true },
    CheckDef { name: CheckName::Pipes, rule: "pipe inodes (anonymous pipes and FIFOs) held by descriptor: any pipe in both sessions fails", select: |o| o.kind == Kind::Pipe, any_sharing_fails: true },
    CheckDef { name: CheckName::Sockets, rule: "socket inodes held by descriptor: any socket in both sessions fails", select: |o| o.kind == Kind::Socket, any_sharing_fails: true },
    CheckDef { name: CheckName::Eventfds, rule: "eventfds by their kernel id (fdinfo eventfd-id; kcmp(2) where none is shown): any eventfd in both sessions fails", select: |o| o.kind == Kind::Eventfd, any_sharing_fails: true },
    CheckDef { name: CheckName::AnonInodes, rule: "other anonymous-inode descriptors (eventpoll, inotify, timerfd, signalfd, pidfd, ...), by their own inode or kcmp(2) when they share the kernel's anonymous inode: any in both sessions fails", select: |o| o.kind == Kind::AnonInode, any_sharing_fails: true },
    CheckDef { name: CheckName::Files, rule: "regular files (memfd and shared memory included) by (device, inode), held by descriptor or shared mapping: a file in both sessions fails when a holder in either can write it", select: |o| o.kind == Kind::File, any_sharing_fails: false },
    CheckDef { name: CheckName::Devices, rule: "character devices by (major, minor), pseudo-terminals also by their devpts instance, and block devices: a device in both sessions fails when a holder has it open for writing or its node is writable", select: |o| matches!(o.kind, Kind::Chr | Kind::Blk), any_sharing_fails: false },
    CheckDef { name: CheckName::Directories, rule: "directories held by descriptor, working directory or root, by (device, inode): one in both sessions fails when its permission bits allow writing", select: |o| o.kind == Kind::Dir, any_sharing_fails: false },
    CheckDef { name: CheckName::OtherFiles, rule: "any other file type by (device, inode): fails when a holder can write it", select: |o| o.kind == Kind::Other, any_sharing_fails: false },
    CheckDef { name: CheckName::Locks, rule: "file locks (/proc/locks and fdinfo, POSIX, flock and OFD) by the locked file: a file locked from both sessions fails", select: |o| o.kind == Kind::Lock, any_sharing_fails: true },
];

const HOLDERS_SHOWN: usize = 8;

fn shared_obj(a: &SessionScan, oa: &Obj, b: &SessionScan, ob: &Obj, any_fails: bool) -> SharedObj {
    let writable = oa.writable() || ob.writable();
    let mut holders = BTreeMap::new();
    let mut holder_counts = BTreeMap::new();
    for (s, o) in [(a, oa), (b, ob)] {
        holder_counts.insert(s.info.id.clone(), o.holders.len());
        holders.insert(s.info.id.clone(), o.holders.iter().take(HOLDERS_SHOWN).cloned().collect());
    }
    SharedObj { kind: oa.kind, id: oa.id.clone(), path: oa.path.clone(), writable, fails_literal: any_fails || writable, holder_counts, holders }
}

/// Compare two scanned sessions.
fn compare(a: &SessionScan, b: &SessionScan, complete: bool) -> PairReport {
    let ids = [a.info.id.clone(), b.info.id.clone()];
    let mut checks = vec![];

    // Processes: the same host process (PID and start time) in both.
    let set = |s: &SessionScan| -> BTreeSet<(i32, u64)> { s.info.processes.iter().map(|p| (p.pid, p.start_time)).collect() };
    let (pa, pb) = (set(a), set(b));
    let shared_pids: Vec<SharedObj> = pa
        .intersection(&pb)
        .map(|(pid, st)| {
            let h = |s: &SessionScan| {
                s.info.processes.iter().filter(|p| p.pid == *pid).map(|p| Holder { pid: p.pid, comm: p.comm.clone(), via: p.found_by.iter().map(|f| f.as_str()).collect::<Vec<_>>().join("+"), path: format!("/proc/{pid}"), mode: None, writes: false }).collect::<Vec<_>>()
            };
            SharedObj {
                kind: Kind::Process,
                id: format!("process:{pid}@{st}"),
                path: format!("/proc/{pid}"),
                writable: false,
                fails_literal: true,
                holder_counts: BTreeMap::from([(ids[0].clone(), 1), (ids[1].clone(), 1)]),
                holders: BTreeMap::from([(ids[0].clone(), h(a)), (ids[1].clone(), h(b))]),
            }
        })
        .collect();
    checks.push(Check {
        name: CheckName::Processes,
        rule: Cow::Borrowed("host processes (PID and start time) found from the ledger and the PID namespace: any process in both sessions fails"),
        compared: BTreeMap::from([(ids[0].clone(), pa.len()), (ids[1].clone(), pb.len())]),
        pass: Some(shared_pids.is_empty()),
        shared: shared_pids,
        note: None,
    });

    // Objects by identity; descriptors of the kernel's shared anonymous inode by kcmp(2).
    let kcmp_pairs = scan::same_anon(a, b);
    for def in CHECKS {
        let mut shared = vec![];
        for (id, oa) in a.objects.iter().filter(|(_, o)| (def.select)(o)) {
            if let Some(ob) = b.objects.get(id) {
                shared.push(shared_obj(a, oa, b, ob, def.any_sharing_fails));
            }
        }
        let mut extra_a = 0;
        let mut extra_b = 0;
        if matches!(def.name, CheckName::Eventfds | CheckName::AnonInodes) {
            let want_eventfd = def.name == CheckName::Eventfds;
            extra_a = a.anon.iter().filter(|r| (r.name == "[eventfd]") == want_eventfd).count();
            extra_b = b.anon.iter().filter(|r| (r.name == "[eventfd]") == want_eventfd).count();
            for (x, y) in kcmp_pairs.iter().filter(|(x, _)| (x.name == "[eventfd]") == want_eventfd) {
                let kind = if want_eventfd { Kind::Eventfd } else { Kind::AnonInode };
                let id = format!("anon_inode:{}@{}/{}", x.name, x.pid, x.fd);
                let path = format!("anon_inode:{}", x.name);
                let oa = Obj { kind, id: id.clone(), path: path.clone(), node_writable: false, holders: vec![x.holder.clone()] };
                let ob = Obj { kind, id, path, node_writable: false, holders: vec![y.holder.clone()] };
                shared.push(shared_obj(a, &oa, b, &ob, true));
            }
        }
        let count = |s: &SessionScan, extra: usize| s.objects.values().filter(|o| (def.select)(o)).count() + extra;
        let pass = shared.iter().all(|o| !o.fails_literal);
        checks.push(Check {
            name: def.name,
            rule: def.rule.into(),
            compared: BTreeMap::from([(ids[0].clone(), count(a, extra_a)), (ids[1].clone(), count(b, extra_b))]),
            shared,
            pass: Some(pass),
            note: None,
        });
    }
    checks.push(x_check(a, b));

    let mut shared_refs = vec![];
    let mut failing = vec![];
    for c in &checks {
        for o in &c.shared {
            let r = ObjRef { check: c.name, kind: o.kind, id: o.id.clone(), path: o.path.clone(), writable: o.writable, pair: None };
            if o.fails_literal {
                failing.push(r.clone());
            }
            shared_refs.push(r);
        }
    }
    let pass_literal = if !failing.is_empty() { Some(false) } else if complete { Some(true) } else { None };
    PairReport { sessions: ids, checks, shared: shared_refs, failing, pass_literal }
}

/// Distinct X server sockets: no socket inode in both, no abstract address in the same network
/// namespace, no path socket that is the same file.
fn x_check(a: &SessionScan, b: &SessionScan) -> Check {
    let ids = [a.info.id.clone(), b.info.id.clone()];
    let rule = "the X server's listening sockets: distinct socket inodes, abstract addresses in distinct network namespaces, path sockets that are distinct files";
    let (Some(xa), Some(xb)) = (a.info.x_server.as_ref(), b.info.x_server.as_ref()) else {
        return Check {
            name: CheckName::XSocket,
            rule: rule.into(),
            compared: BTreeMap::from([(ids[0].clone(), a.info.x_server.as_ref().map_or(0, |x| x.sockets.len())), (ids[1].clone(), b.info.x_server.as_ref().map_or(0, |x| x.sockets.len()))]),
            shared: vec![],
            pass: None,
            note: Some("not applicable: a session has no desktop in its record (or its X server was not found, which makes the audit incomplete)".into()),
        };
    };
    let mut shared = vec![];
    for sa in &xa.sockets {
        for sb in &xb.sockets {
            let same_inode = sa.inode == sb.inode;
            let same_abstract = sa.address.starts_with('@') && sa.address == sb.address && sa.netns == sb.netns;
            let same_file = sa.file.is_some() && sa.file == sb.file;
            if same_inode || same_abstract || same_file {
                let why = if same_inode { "the same socket" } else if same_abstract { "the same abstract address in the same network namespace" } else { "the same socket file" };
                let h = |x: &scan::XServer, s: &scan::XSocket| Holder { pid: x.pid, comm: "xvfb".into(), via: format!("socket:[{}] in net:[{}]", s.inode, s.netns), path: s.address.clone(), mode: Some(why.into()), writes: true };
                shared.push(SharedObj {
                    kind: Kind::Socket,
                    id: format!("x11:{}@net:[{}]", sa.address, sa.netns),
                    path: sa.address.clone(),
                    writable: true,
                    fails_literal: true,
                    holder_counts: BTreeMap::from([(ids[0].clone(), 1), (ids[1].clone(), 1)]),
                    holders: BTreeMap::from([(ids[0].clone(), vec![h(xa, sa)]), (ids[1].clone(), vec![h(xb, sb)])]),
                });
            }
        }
    }
    Check {
        name: CheckName::XSocket,
        rule: rule.into(),
        compared: BTreeMap::from([(ids[0].clone(), xa.sockets.len()), (ids[1].clone(), xb.sockets.len())]),
        pass: Some(shared.is_empty()),
        shared,
        note: None,
    }
}

/// Check, after everything was read and compared, that no process of the scan exited, none appeared, and
/// no process had a child end meanwhile (a process that started and ended between two reads of /proc
/// leaves no other trace than its parent's totals of reaped children).
fn verify(s: &mut SessionScan, pidns: u64) {
    for d in &s.dirs {
        if s.info.zombies.contains(&d.pid) {
            continue;
        }
        if !d.alive() {
            s.problems.push(format!("session {}: process {} exited during the audit", s.info.id, d.pid));
        } else if let (Some(before), Ok(now)) = (s.children_totals.get(&d.pid), d.children_totals()) {
            if *before != now {
                s.problems.push(format!("session {}: a child of process {} ended during the audit", s.info.id, d.pid));
            }
        }
    }
    let seen: BTreeSet<i32> = s.dirs.iter().map(|d| d.pid).collect();
    for pid in crate::proc::pids_in_pidns(pidns) {
        if !seen.contains(&pid) {
            s.problems.push(format!("session {}: process {pid} started during the audit", s.info.id));
        }
    }
}

/// Audit `sessions` (two or more), and the cold pair `control` in the same pass.
pub fn audit(sessions: &[Session], control: Option<[Session; 2]>, opts: &Options) -> Result<Report> {
    let t0 = Instant::now();
    if sessions.len() < 2 {
        return Err(Error::bad_input(format!("{} session record(s) on input: the audit compares two or more", sessions.len())));
    }
    let mut all: Vec<&Session> = vec![];
    for s in sessions.iter().chain(control.iter().flatten()) {
        s.ns()?;
        if !all.iter().any(|x| x.id == s.id) {
            all.push(s);
        }
    }
    let audited: BTreeSet<&str> = sessions.iter().map(|s| s.id.as_str()).collect();
    if audited.len() != sessions.len() {
        return Err(Error::bad_input("the same session is given twice: the audit compares distinct sessions"));
    }
    if let Some([c1, c2]) = control.as_ref() {
        if c1.id == c2.id {
            return Err(Error::Usage("--control names the same session twice".into()));
        }
    }
    let anon = sys::shared_anon_inode();
    let attempts = opts.attempts.max(1);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut problems = vec![];
        let locks = procfs::locks().unwrap_or_else(|e| {
            problems.push(format!("read /proc/locks: {e}"));
            vec![]
        });
        let mut scans: Vec<SessionScan> = all.iter().map(|s| scan::scan(s, anon, &locks)).collect();
        let find = |scans: &[SessionScan], id: &str| scans.iter().position(|s| s.info.id == id).expect("scanned");
        let gone = scans.iter().any(|s| s.gone);
        // Compare while the processes are held open (kcmp needs them alive), then check nothing changed.
        let pre_complete = !gone && problems.is_empty() && scans.iter().all(|s| s.problems.is_empty());
        let mut pairs: Vec<PairReport> = vec![];
        for (i, x) in sessions.iter().enumerate() {
            for y in &sessions[i + 1..] {
                pairs.push(compare(&scans[find(&scans, &x.id)], &scans[find(&scans, &y.id)], pre_complete));
            }
        }
        let control_pair = control.as_ref().map(|[c1, c2]| compare(&scans[find(&scans, &c1.id)], &scans[find(&scans, &c2.id)], pre_complete));
        if !gone {
            for (s, sess) in scans.iter_mut().zip(&all) {
                verify(s, sess.ns.as_ref().map(|n| n.inodes.pid).unwrap_or(0));
            }
        }
        problems.extend(scans.iter().flat_map(|s| s.problems.iter().cloned()));
        let complete = problems.is_empty();
        if !complete && !gone && attempt < attempts {
            std::thread::sleep(opts.retry_pause);
            continue;
        }
        let mut control_pair = control_pair;
        if !complete {
            for p in pairs.iter_mut().chain(control_pair.iter_mut()) {
                if p.pass_literal == Some(true) {
                    p.pass_literal = None;
                }
            }
        }
        let info = |id: &str| scans[find(&scans, id)].info.clone();
        let session_infos: Vec<SessionInfo> = sessions.iter().map(|s| info(&s.id)).collect();
        let control_report = control.as_ref().zip(control_pair).map(|([c1, c2], pair)| ControlReport {
            sessions: vec![info(&c1.id), info(&c2.id)],
            cold: c1.restore.is_none() && c2.restore.is_none(),
            pair,
        });
        let mut verdicts = verdicts(&pairs, control_report.as_ref(), complete);
        let mut boundary = BTreeMap::new();
        for s in sessions {
            let checkpoint = match &s.restore {
                Some(r) => Some(crate::session_io::load_checkpoint(&r.checkpoint)?),
                None => None,
            };
            let procs = crate::boundary::of_pidns(s.ns()?.inodes.pid);
            let cmp = crate::boundary::compare(procs, checkpoint.as_ref().map(|c| (c.id.as_str(), c.boundary.as_slice())));
            for v in [&mut verdicts.literal, &mut verdicts.revision_2a] {
                if !cmp.differences.is_empty() {
                    v.pass = Some(false);
                    v.reasons.extend(cmp.differences.iter().map(|d| format!("session {}: {d}", s.id)));
                }
            }
            boundary.insert(s.id.clone(), cmp);
        }
        let (ids, id_problems) = identity::read(sessions);
        let identity = identity::judge(ids, id_problems);
        for v in [&mut verdicts.literal, &mut verdicts.revision_2a] {
            if !identity.findings.is_empty() {
                v.pass = Some(false);
                v.reasons.extend(identity.findings.iter().map(|f| format!("identity: {f}")));
            }
        }
        let (introduced, control_only) = match &control_report {
            Some(c) => {
                let cids: BTreeSet<&str> = c.pair.shared.iter().map(|o| o.id.as_str()).collect();
                let mut intro: Vec<ObjRef> = pairs.iter().flat_map(|p| p.shared.iter().filter(|o| !cids.contains(o.id.as_str())).map(|o| with_pair(o, p))).collect();
                intro.sort();
                intro.dedup();
                let sids: BTreeSet<&str> = pairs.iter().flat_map(|p| p.shared.iter().map(|o| o.id.as_str())).collect();
                let only: Vec<ObjRef> = c.pair.shared.iter().filter(|o| !sids.contains(o.id.as_str())).cloned().collect();
                (Some(intro), Some(only))
            }
            None => (None, None),
        };
        let chosen = match opts.rule {
            Rule::Literal => &verdicts.literal,
            Rule::Revision2a => &verdicts.revision_2a,
        };
        let exit = if !complete {
            exit::INCOMPLETE
        } else if chosen.pass == Some(true) {
            exit::OK
        } else {
            exit::CHECK_FAILED
        };
        return Ok(Report {
            drums: crate::record::VERSION,
            kind: AuditType::Tag,
            t: crate::state::now(),
            duration_s: t0.elapsed().as_secs_f64(),
            rule: opts.rule,
            complete,
            incomplete: problems,
            attempts: attempt,
            sessions: session_infos,
            pairs,
            control: control_report,
            introduced_by_restore: introduced,
            control_only,
            verdicts,
            boundary,
            identity,
            exit,
        });
    }
}

fn with_pair(o: &ObjRef, p: &PairReport) -> ObjRef {
    ObjRef { pair: Some(p.sessions.clone()), ..o.clone() }
}

fn verdicts(pairs: &[PairReport], control: Option<&ControlReport>, complete: bool) -> Verdicts {
    let failing: Vec<ObjRef> = pairs.iter().flat_map(|p| p.failing.iter().map(|o| with_pair(o, p))).collect();
    let unknown = |found_failure: bool| if found_failure { Some(false) } else if complete { Some(true) } else { None };
    let mut lit_reasons = vec![];
    if !complete {
        lit_reasons.push("the audit is incomplete".to_string());
    }
    let literal = Verdict { pass: unknown(!failing.is_empty()), failed_on: failing.clone(), tolerated: None, reasons: lit_reasons.clone() };

    let tolerable = |o: &ObjRef| TOLERATED_2A.iter().any(|(id, _)| *id == o.id);
    let (cand, others): (Vec<ObjRef>, Vec<ObjRef>) = failing.into_iter().partition(|o| tolerable(o));
    let mut reasons = lit_reasons;
    let mut tolerated = vec![];
    let mut not_tolerated = others;
    match control {
        None if !cand.is_empty() => {
            reasons.push("no cold-pair control was audited in this pass (--control), so no shared object can be tolerated".into());
            not_tolerated.extend(cand);
        }
        None => {}
        Some(c) if !c.cold && !cand.is_empty() => {
            reasons.push("the control pair is not cold (a control session has a `restore` section), so no shared object can be tolerated".into());
            not_tolerated.extend(cand);
        }
        Some(c) => {
            let cfail: BTreeSet<&str> = c.pair.failing.iter().map(|o| o.id.as_str()).collect();
            for o in cand {
                if cfail.contains(o.id.as_str()) {
                    tolerated.push(o);
                } else {
                    reasons.push(format!("{} ({}) is shared but the control pair does not share it", o.id, o.path));
                    not_tolerated.push(o);
                }
            }
            if c.pair.pass_literal.is_none() {
                reasons.push("the control pair's audit is incomplete".into());
            }
        }
    }
    if !not_tolerated.is_empty() && not_tolerated.iter().any(|o| !tolerable(o)) {
        reasons.push("objects other than /dev/null and /dev/urandom are shared".into());
    }
    let pass = if !not_tolerated.is_empty() { Some(false) } else if complete { Some(true) } else { None };
    Verdicts { literal, revision_2a: Verdict { pass, failed_on: not_tolerated, tolerated: Some(tolerated), reasons } }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(id: &str) -> ObjRef {
        ObjRef { check: CheckName::Devices, kind: Kind::Chr, id: id.into(), path: "/dev/x".into(), writable: true, pair: None }
    }
    fn pair(failing: &[&str], complete: bool) -> PairReport {
        let failing: Vec<ObjRef> = failing.iter().map(|i| obj(i)).collect();
        let pass_literal = if !failing.is_empty() { Some(false) } else if complete { Some(true) } else { None };
        PairReport { sessions: ["d-a".into(), "d-b".into()], checks: vec![], shared: failing.clone(), failing, pass_literal }
    }
    fn control(failing: &[&str]) -> ControlReport {
        ControlReport { sessions: vec![], cold: true, pair: pair(failing, true) }
    }

    #[test]
    fn revision_2a_tolerates_only_null_and_urandom_shared_by_the_control() {
        let p = [pair(&["chr:1:3", "chr:1:9"], true)];
        let v = verdicts(&p, Some(&control(&["chr:1:3", "chr:1:9"])), true);
        assert_eq!(v.literal.pass, Some(false), "the literal verdict is reported, not hidden");
        assert_eq!(v.literal.failed_on.len(), 2);
        assert_eq!(v.revision_2a.pass, Some(true));
        assert_eq!(v.revision_2a.tolerated.as_ref().unwrap().len(), 2);

        // The control does not share /dev/urandom: not tolerated.
        let v = verdicts(&p, Some(&control(&["chr:1:3"])), true);
        assert_eq!(v.revision_2a.pass, Some(false));
        assert_eq!(v.revision_2a.failed_on[0].id, "chr:1:9");

        // A control that is not a cold pair tolerates nothing.
        let warm = ControlReport { cold: false, ..control(&["chr:1:3", "chr:1:9"]) };
        assert_eq!(verdicts(&p, Some(&warm), true).revision_2a.pass, Some(false));

        // No control: nothing is tolerated.
        let v = verdicts(&p, None, true);
        assert_eq!(v.revision_2a.pass, Some(false));
        assert!(v.revision_2a.reasons.iter().any(|r| r.contains("control")));

        // Anything else shared fails, even with the devices tolerated, and even if the control shares it.
        let p2 = [pair(&["chr:1:3", "chr:1:5"], true)];
        let v = verdicts(&p2, Some(&control(&["chr:1:3", "chr:1:5"])), true);
        assert_eq!(v.revision_2a.pass, Some(false));
        assert_eq!(v.revision_2a.failed_on.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(), vec!["chr:1:5"]);

        // Nothing shared: both pass.
        let v = verdicts(&[pair(&[], true)], None, true);
        assert_eq!((v.literal.pass, v.revision_2a.pass), (Some(true), Some(true)));
    }

    #[test]
    fn an_incomplete_audit_never_passes() {
        let v = verdicts(&[pair(&[], false)], None, false);
        assert_eq!((v.literal.pass, v.revision_2a.pass), (None, None));
        let v = verdicts(&[pair(&["chr:1:3"], false)], Some(&control(&["chr:1:3"])), false);
        assert_eq!(v.literal.pass, Some(false), "a failure found is a failure, complete or not");
        assert_eq!(v.revision_2a.pass, None, "tolerated, but the audit is incomplete: unknown");
        let v = verdicts(&[pair(&["pipe:[7]"], false)], None, false);
        assert_eq!(v.revision_2a.pass, Some(false));
    }
}
