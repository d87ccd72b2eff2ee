//! A session's connection audit log (docs/record.md, "Connection audit log"; drums(7), "Network
//! boundary"): one `net_audit` line per connection the session opens (when it opens, and again when it
//! ends, with its bytes) and per packet its policy refuses, in `<state_dir>/net-audit.jsonl`.
//!
//! The auditor is a process of its own (`drums-net audit`), started by `egress::apply` beside the
//! resolver and killed with it (its pid file is in the same state directory as the resolver's, which the
//! ledgered `egress` resource names). It reads the kernel's own accounts, nothing the session says:
//! - connections from conntrack's events (NFNLGRP_CONNTRACK_NEW, _UPDATE, _DESTROY over nfnetlink),
//!   those whose original source is the session's address; their bytes from conntrack's accounting
//!   (`net.netfilter.nf_conntrack_acct`, which `start` turns on), read when a TCP connection reaches
//!   TIME_WAIT or CLOSE (a GET of the entry: the kernel's TIME_WAIT lasts 120 s, after which the DESTROY
//!   event would carry them) or from the DESTROY event (UDP and the rest);
//! - refusals from the `log group` of the session's table's `refuse` chain (nfnetlink_log), whose copy of
//!   the refused packet's headers gives its destination;
//! - under an allow list, a copy of the resolver's answers to the session (nfnetlink_log group
//!   `answers_group(slot)`), whose IPv4 addresses it keeps in the table's set `resolved` for the
//!   answer's TTL (TTL_FLOOR_S..TTL_CAP_S);
//! - names from the session's resolver's query log (`resolver.log`, dnsmasq's `reply NAME is ADDR`
//!   lines): the last name that resolved to the address.

use crate::error::{Error, IoContext, Result};
use crate::record::egress::{AuditEntry, Event};
use std::collections::HashMap;
use std::io::{Read, Seek, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

mod nfnetlink;
use nfnetlink::*;

pub const PID_FILE: &str = "audit.pid";
pub const LOG_FILE: &str = "net-audit.jsonl";
/// Where the auditor's own failure goes (it has no terminal).
pub const ERR_FILE: &str = "audit.err";
/// The session's resolver's query log in its state directory, from which the auditor names connections
/// (`egress` tells the resolver to write it here).
pub const RESOLVER_LOG: &str = "resolver.log";
/// The nfnetlink_log group of slot N's refusals: NFLOG_BASE + N (groups are 16 bits; slots < 16384).
pub const NFLOG_BASE: u32 = 20_000;

pub fn nflog_group(slot: u32) -> u32 {
    NFLOG_BASE + slot
}

/// The nfnetlink_log group of a copy of slot N's resolver answers under an allow list: ANSWERS_BASE + N.
pub const ANSWERS_BASE: u32 = 40_000;

pub fn answers_group(slot: u32) -> u32 {
    ANSWERS_BASE + slot
}

/// An address an allow list's resolver handed out is allowed for the answer's TTL, but at least
/// TTL_FLOOR_S (a client that caches a lookup for a minute whatever its TTL, as Chromium does with the
/// system resolver's answers, still connects) and at most TTL_CAP_S (the resolver hands out no longer
/// TTL: dnsmasq's --max-ttl). The resolver puts an address into the set `resolved` before it answers,
/// with the set's timeout, TTL_FLOOR_S (dnsmasq's nftset gives none of its own); the auditor, reading a
/// copy of every answer, then gives each address the time its answer is valid, never less than an
/// earlier answer gave it (an add without a timeout, the resolver's, resets an element to the floor).
pub const TTL_FLOOR_S: u32 = 60;
pub const TTL_CAP_S: u32 = 3600;

/// The A records of a DNS message: (address, TTL in seconds). A malformed or truncated message gives
/// what was read before the fault.
pub fn dns_a_records(m: &[u8]) -> Vec<(Ipv4Addr, u32)> {
    let mut out = vec![];
    if m.len() < 12 || m[2] & 0x80 == 0 {
        return out;
    }
    let count = |i: usize| u16::from_be_bytes([m[i], m[i + 1]]) as usize;
    let (qd, an) = (count(4), count(6));
    // A name: labels up to a zero byte or a compression pointer (2 bytes, ends the name).
    let skip_name = |mut at: usize| -> Option<usize> {
        loop {
            let l = *m.get(at)?;
            match l & 0xc0 {
                0xc0 => return Some(at + 2),
                0 if l == 0 => return Some(at + 1),
                0 => at += 1 + l as usize,
                _ => return None,
            }
        }
    };
    let mut at = 12;
    for _ in 0..qd {
        let Some(n) = skip_name(at) else { return out };
        at = n + 4;
    }
    for _ in 0..an {
        let Some(n) = skip_name(at) else { return out };
        let Some(h) = m.get(n..n + 10) else { return out };
        let (rtype, class) = (u16::from_be_bytes([h[0], h[1]]), u16::from_be_bytes([h[2], h[3]]));
        let ttl = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let len = u16::from_be_bytes([h[8], h[9]]) as usize;
        let Some(rdata) = m.get(n + 10..n + 10 + len) else { return out };
        if rtype == 1 && class == 1 && len == 4 {
            out.push((Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3]), ttl));
        }
        at = n + 10 + len;
    }
    out
}

/// The DNS message in an IPv4 packet from port 53 (UDP; TCP when the segment holds a whole message).
fn dns_in_packet(p: &[u8]) -> Option<&[u8]> {
    if p.first()? >> 4 != 4 {
        return None;
    }
    let ihl = ((p[0] & 0x0f) as usize) * 4;
    match *p.get(9)? {
        17 => p.get(ihl + 8..),
        6 => {
            let off = ((*p.get(ihl + 12)? >> 4) as usize) * 4;
            let d = p.get(ihl + off..)?;
            let len = u16::from_be_bytes([*d.first()?, *d.get(1)?]) as usize;
            d.get(2..2 + len)
        }
        _ => None,
    }
}

/// The addresses the resolver answered with and until when each is allowed (Unix seconds), as put into
/// the session's set `resolved`.
struct Allowed {
    table: String,
    until: HashMap<Ipv4Addr, f64>,
}

impl Allowed {
    /// Allow the answer's addresses for its TTL (floored and capped), or for the longer time an earlier
    /// answer gave them: one nftables transaction.
    fn admit(&mut self, records: &[(Ipv4Addr, u32)]) -> std::result::Result<(), String> {
        let now = crate::state::now();
        let mut elems = vec![];
        for (a, ttl) in records {
            let t = (*ttl).clamp(TTL_FLOOR_S, TTL_CAP_S);
            let until = self.until.get(a).copied().unwrap_or(0.0).max(now + t as f64);
            self.until.insert(*a, until);
            elems.push(format!("{a} timeout {}s", (until - now).ceil().max(1.0) as u64));
        }
        if elems.is_empty() {
            return Ok(());
        }
        let cmd = format!("add element inet {} resolved {{ {} }}\n", self.table, elems.join(", "));
        super::nft::nft(&cmd).map_err(|e| format!("{}: {e}", cmd.trim()))?;
        Ok(())
    }
}

/// An auditor started by `spawn`, not yet known to listen.
pub struct Starting {
    child: std::process::Child,
    /// The read end of the pipe on which it says it listens (its pid), or ends without a word.
    ready: OwnedFd,
    err_path: PathBuf,
}

/// Start the auditor of the session `session` (slot `slot`, state directory `state_dir`): `drums-net audit`
/// beside this tool's executable, in a session of its own; `wait` then waits until it listens.
pub fn spawn(state_dir: &Path, session: &str, slot: u32) -> Result<Starting> {
    // Bytes per connection: off by default in the kernel; without it the log's bytes are null, said why.
    let _ = std::fs::write("/proc/sys/net/netfilter/nf_conntrack_acct", "1");
    let me = std::env::current_exe().map_err(|e| Error::failed(format!("find own executable: {e}")))?;
    let program = me.parent().ok_or_else(|| Error::failed("own executable has no directory"))?.join("drums-net");
    if !program.exists() {
        return Err(Error::env(format!("{} is needed for a session's connection audit log (it is installed with the other tools)", program.display())));
    }
    let pid_file = state_dir.join(PID_FILE);
    let _ = std::fs::remove_file(&pid_file);
    let err_path = state_dir.join(ERR_FILE);
    let err = std::fs::File::create(&err_path).ctx("create", &err_path)?;
    // Both ends close on exec: only the auditor gets the write end (below), so that no other child of
    // this process (the resolver's dnsmasq, nft) holds it open and the read end sees the end of file
    // when the auditor ends.
    let mut fds = [0i32; 2];
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::failed(format!("a pipe for the auditor's readiness: {}", std::io::Error::last_os_error())));
    }
    let (ready, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let wfd = write.as_raw_fd();
    let mut cmd = std::process::Command::new(&program);
    cmd.arg("audit")
        .arg(format!("--state-dir={}", state_dir.display()))
        .arg(format!("--session={session}"))
        .arg(format!("--slot={slot}"))
        .arg(format!("--pid-file={}", pid_file.display()))
        .arg(format!("--ready-fd={wfd}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(err);
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            libc::setsid();
            // The write end stays open across the exec, in the child only.
            if libc::fcntl(wfd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| Error::failed(format!("start {}: {e}", program.display())))?;
    drop(write);
    Ok(Starting { child, ready, err_path })
}

/// Wait until the auditor `spawn` started listens (it writes its pid on the pipe, after its sockets are
/// bound and its pid file written): its pid, or the failure it wrote. No polling: one blocking read,
/// bounded by 10 s.
pub fn wait(st: Starting) -> Result<i32> {
    let Starting { mut child, ready, err_path } = st;
    let limit = crate::state::scaled(std::time::Duration::from_secs(10));
    let deadline = std::time::Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 32];
    let ended = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut p = libc::pollfd { fd: ready.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let n = unsafe { libc::poll(&mut p, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::failed(format!("waiting for the connection auditor: {e}")));
        }
        if n == 0 {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::failed(format!("the session's connection auditor (drums-net audit) did not start listening within {} s", limit.as_secs())));
        }
        let r = unsafe { libc::read(ready.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match r {
            0 => break true,
            r if r > 0 => {
                got.extend_from_slice(&buf[..r as usize]);
                if got.ends_with(b"\n") {
                    break false;
                }
            }
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return Err(Error::failed(format!("waiting for the connection auditor: {}", std::io::Error::last_os_error()))),
        }
    };
    if let (false, Ok(pid)) = (ended, String::from_utf8_lossy(&got).trim().parse::<i32>()) {
        // Reaped by a thread of its own once it ends (killed with the session's egress state), so that a
        // long-lived caller keeps no zombie; a short-lived one's exit hands it to init.
        std::thread::spawn(move || child.wait());
        return Ok(pid);
    }
    let st = child.wait().map_err(|e| Error::failed(format!("the session's connection auditor: {e}")))?;
    let why = std::fs::read_to_string(&err_path).unwrap_or_default();
    Err(Error::failed(format!("the session's connection auditor (drums-net audit) ended at start ({st}): {}", why.trim())))
}

/// `wait`; and when the auditor could not start because another auditor of the same slot holds its log
/// groups (the kernel refuses a group bound by another socket, EPERM: seen once under concurrency), that
/// other one is stale, since a slot is one live session's at a time (its link `drums<slot>` exists
/// host-wide once): it is killed and the auditor started again, once. Costs nothing when the first
/// start listens.
pub fn wait_replacing_stale(st: Starting, state_dir: &Path, session: &str, slot: u32) -> Result<i32> {
    match wait(st) {
        Ok(pid) => Ok(pid),
        Err(e) => {
            if kill_stale(slot, &state_dir.join(PID_FILE)) == 0 {
                return Err(e);
            }
            wait(spawn(state_dir, session, slot)?)
        }
    }
}

/// Kill every `drums-net audit` of slot `slot` whose pid file is not `mine` (a session's whose egress
/// state was never removed: its ledger lost, or its starter killed before the auditor wrote its pid
/// file); how many there were.
pub fn kill_stale(slot: u32, mine: &Path) -> usize {
    let (want_slot, mine) = (format!("--slot={slot}"), format!("--pid-file={}", mine.display()));
    let mut killed = 0;
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let is_auditor = args.first().is_some_and(|a| a.ends_with(b"/drums-net") || *a == b"drums-net") && args.get(1) == Some(&&b"audit"[..]);
        if !is_auditor || !args.contains(&want_slot.as_bytes()) || args.contains(&mine.as_bytes()) {
            continue;
        }
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
        if fd < 0 {
            continue;
        }
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Still the same process (the pid not reused between the read and the open).
        if std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default() != cmd {
            continue;
        }
        unsafe { libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), libc::SIGKILL, std::ptr::null::<libc::siginfo_t>(), 0) };
        // Its sockets close when it exits: poll the pidfd until then (readable once the process ended).
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        unsafe { libc::poll(&mut p, 1, 2000) };
        killed += 1;
    }
    killed
}

/// One connection of the original direction: source, destination, protocol, ports.
#[derive(Debug, Clone, PartialEq)]
struct Tuple {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    sport: Option<u16>,
    dport: Option<u16>,
}

fn tuple(b: &[u8]) -> Option<Tuple> {
    let ip = attr(b, 1)?;
    let pr = attr(b, 2)?;
    let a4 = |t| attr(ip, t).and_then(|x| <[u8; 4]>::try_from(x).ok()).map(Ipv4Addr::from);
    let port = |t| attr(pr, t).and_then(|x| <[u8; 2]>::try_from(x).ok()).map(u16::from_be_bytes);
    Some(Tuple { src: a4(1)?, dst: a4(2)?, proto: *attr(pr, 1)?.first()?, sport: port(2), dport: port(3) })
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

/// A conntrack message's (original tuple, raw CTA_TUPLE_ORIG, id, TCP state, (bytes out, bytes in)).
struct Ct<'a> {
    tuple: Tuple,
    raw_orig: &'a [u8],
    id: Option<u32>,
    tcp_state: Option<u8>,
    bytes: Option<(u64, u64)>,
}

fn ct(payload: &[u8]) -> Option<Ct<'_>> {
    // nfgenmsg first: only IPv4 (sessions have no IPv6).
    if payload.first() != Some(&(libc::AF_INET as u8)) {
        return None;
    }
    let a = &payload[4..];
    let raw_orig = attr(a, CTA_TUPLE_ORIG)?;
    let bytes = |t| attr(a, t).and_then(|c| attr(c, 2)).and_then(be_u64);
    Some(Ct {
        tuple: tuple(raw_orig)?,
        raw_orig,
        id: attr(a, CTA_ID).and_then(|x| <[u8; 4]>::try_from(x).ok()).map(u32::from_be_bytes),
        tcp_state: attr(a, CTA_PROTOINFO).and_then(|p| attr(p, 1)).and_then(|t| attr(t, 1)).and_then(|s| s.first().copied()),
        bytes: bytes(CTA_COUNTERS_ORIG).zip(bytes(CTA_COUNTERS_REPLY)),
    })
}

/// The destination of a refused packet (its copied IP header and the start of its transport header).
fn refused_packet(payload: &[u8]) -> Option<Tuple> {
    let p = attr(payload.get(4..)?, NFULA_PAYLOAD)?;
    if p.first()? >> 4 != 4 {
        return None;
    }
    let ihl = ((p[0] & 0x0f) as usize) * 4;
    let proto = *p.get(9)?;
    let a4 = |i: usize| p.get(i..i + 4).and_then(|x| <[u8; 4]>::try_from(x).ok()).map(Ipv4Addr::from);
    let port = |i: usize| p.get(ihl + i..ihl + i + 2).map(|x| u16::from_be_bytes([x[0], x[1]]));
    let ports = matches!(proto, 6 | 17 | 132);
    Some(Tuple { src: a4(12)?, dst: a4(16)?, proto, sport: port(0).filter(|_| ports), dport: port(2).filter(|_| ports) })
}

/// What the resolver has answered, read on as its log grows: address -> the last name resolved to it.
struct Names {
    path: PathBuf,
    offset: u64,
    partial: String,
    by_addr: HashMap<Ipv4Addr, String>,
}

impl Names {
    fn refresh(&mut self) {
        let Ok(mut f) = std::fs::File::open(&self.path) else { return };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            self.offset = 0;
        }
        if f.seek(std::io::SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut more = String::new();
        if let Ok(n) = f.read_to_string(&mut more) {
            self.offset += n as u64;
        }
        self.partial.push_str(&more);
        let complete = self.partial.rfind('\n').map(|i| i + 1).unwrap_or(0);
        let lines: String = self.partial.drain(..complete).collect();
        for l in lines.lines() {
            if let Some((name, addr)) = resolved(l) {
                self.by_addr.insert(addr, name);
            }
        }
    }
}

/// dnsmasq's `... reply NAME is ADDR` (also `cached`, `config`): the name and an IPv4 address.
fn resolved(line: &str) -> Option<(String, Ipv4Addr)> {
    let w: Vec<&str> = line.split_whitespace().collect();
    let i = w.iter().position(|x| matches!(*x, "reply" | "cached" | "config"))?;
    if w.get(i + 2) != Some(&"is") {
        return None;
    }
    Some((w.get(i + 1)?.to_string(), w.get(i + 3)?.parse().ok()?))
}

/// The auditor's work (`drums-net audit`): bind its sockets, write `pid_file` (and the pid on `ready_fd`,
/// which it then closes: its starter's `wait` reads it), then log until killed or until the session's
/// state directory is gone.
pub fn run(state_dir: &Path, session: &str, slot: u32, pid_file: &Path, ready_fd: Option<i32>) -> Result<()> {
    let (_, session_addr) = super::slot_addrs(slot);
    let sock_err = |what: &str, e: std::io::Error| Error::failed(format!("connection auditor: {what}: {e}"));
    let events = nl_socket(&[NFNLGRP_CONNTRACK_NEW, NFNLGRP_CONNTRACK_UPDATE, NFNLGRP_CONNTRACK_DESTROY]).map_err(|e| sock_err("conntrack events", e))?;
    let queries = nl_socket(&[]).map_err(|e| sock_err("conntrack queries", e))?;
    let log = nl_socket(&[]).map_err(|e| sock_err("nfnetlink_log", e))?;
    let group = nflog_group(slot) as u16;
    let ulog = |m: u16| (NFNL_SUBSYS_ULOG << 8) | m;
    // Bind the group (NFULNL_CFG_CMD_BIND), then copy 128 bytes of each packet (NFULNL_COPY_PACKET).
    send(&log, &request(ulog(NFULNL_MSG_CONFIG), libc::NLM_F_ACK as u16, libc::AF_UNSPEC as u8, group, &[(1, &[1u8])])).map_err(|e| sock_err("bind the log group", e))?;
    ack(&log).map_err(|e| sock_err(&format!("bind log group {group}"), e))?;
    let mode = [0u8, 0, 0, 128, 2, 0];
    send(&log, &request(ulog(NFULNL_MSG_CONFIG), libc::NLM_F_ACK as u16, libc::AF_UNSPEC as u8, group, &[(2, &mode)])).map_err(|e| sock_err("set the log mode", e))?;
    ack(&log).map_err(|e| sock_err("set the log mode", e))?;

    // A copy of the resolver's answers (allow lists only: other policies log none), whole packets.
    let answers = nl_socket(&[]).map_err(|e| sock_err("nfnetlink_log (answers)", e))?;
    let agroup = answers_group(slot) as u16;
    send(&answers, &request(ulog(NFULNL_MSG_CONFIG), libc::NLM_F_ACK as u16, libc::AF_UNSPEC as u8, agroup, &[(1, &[1u8])])).map_err(|e| sock_err("bind the answers' log group", e))?;
    ack(&answers).map_err(|e| sock_err(&format!("bind log group {agroup}"), e))?;
    send(&answers, &request(ulog(NFULNL_MSG_CONFIG), libc::NLM_F_ACK as u16, libc::AF_UNSPEC as u8, agroup, &[(2, &[0u8, 0, 0xff, 0xff, 2, 0])])).map_err(|e| sock_err("set the answers' log mode", e))?;
    ack(&answers).map_err(|e| sock_err("set the answers' log mode", e))?;
    let mut allowed = Allowed { table: super::nft::table_name(slot), until: HashMap::new() };

    let log_path = state_dir.join(LOG_FILE);
    let mut out = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).ctx("open", &log_path)?;
    let tmp = pid_file.with_extension("tmp");
    std::fs::write(&tmp, format!("{}\n", std::process::id())).ctx("write", &tmp)?;
    std::fs::rename(&tmp, pid_file).ctx("rename", pid_file)?;
    if let Some(fd) = ready_fd {
        // Taken over: closed once written, so that nothing else this process runs (nft) keeps it.
        let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
        f.write_all(format!("{}\n", std::process::id()).as_bytes()).map_err(|e| Error::failed(format!("connection auditor: write to --ready-fd {fd}: {e}")))?;
    }

    let mut names = Names { path: state_dir.join(RESOLVER_LOG), offset: 0, partial: String::new(), by_addr: HashMap::new() };
    // Open connections by conntrack id: (when opened, whether their close was logged).
    let mut open: HashMap<u32, (f64, bool)> = HashMap::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut write = |e: AuditEntry| -> Result<()> {
        let mut l = serde_json::to_vec(&e).map_err(|x| Error::failed(format!("audit line: {x}")))?;
        l.push(b'\n');
        out.write_all(&l).ctx("write", &log_path)
    };
    let entry = |names: &mut Names, t: &Tuple, event: Event| {
        names.refresh();
        AuditEntry {
            drums: crate::record::VERSION,
            record_type: Default::default(),
            session: session.to_string(),
            t: crate::state::now(),
            event,
            proto: proto_name(t.proto),
            address: t.dst.to_string(),
            port: t.dport,
            name: names.by_addr.get(&t.dst).cloned(),
            opened_at: None,
            bytes_out: None,
            bytes_in: None,
            bytes_null_reason: None,
        }
    };
    loop {
        if !state_dir.exists() {
            return Ok(());
        }
        let mut fds = [
            libc::pollfd { fd: events.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: log.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: answers.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        if unsafe { libc::poll(fds.as_mut_ptr(), 3, 2000) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(sock_err("poll", e));
        }
        if fds[2].revents != 0 {
            let n = recv(&answers, &mut buf, libc::MSG_DONTWAIT).unwrap_or(0);
            for (t, _, p) in messages(&buf[..n]) {
                if t != ulog(NFULNL_MSG_PACKET) {
                    continue;
                }
                let records = p.get(4..).and_then(|a| attr(a, NFULA_PAYLOAD)).and_then(dns_in_packet).map(dns_a_records).unwrap_or_default();
                // A failure leaves the addresses at the floor the resolver gave them (fail closed).
                if let Err(why) = allowed.admit(&records) {
                    let _ = writeln!(std::io::stderr(), "connection auditor: allow an answer's addresses: {why}");
                }
            }
        }
        if fds[1].revents != 0 {
            let n = recv(&log, &mut buf, libc::MSG_DONTWAIT).unwrap_or(0);
            for (t, _, p) in messages(&buf[..n]) {
                if t != ulog(NFULNL_MSG_PACKET) {
                    continue;
                }
                if let Some(tp) = refused_packet(p).filter(|tp| tp.src == session_addr) {
                    let mut e = entry(&mut names, &tp, Event::Refused);
                    (e.bytes_out, e.bytes_in) = (Some(0), Some(0));
                    write(e)?;
                }
            }
        }
        if fds[0].revents == 0 {
            continue;
        }
        let n = match recv(&events, &mut buf, libc::MSG_DONTWAIT) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                write(AuditEntry { event: Event::Lost, ..entry(&mut names, &Tuple { src: session_addr, dst: Ipv4Addr::UNSPECIFIED, proto: 0, sport: None, dport: None }, Event::Lost) })?;
                continue;
            }
            Err(_) => continue,
        };
        let msgs: Vec<(u16, u16, Vec<u8>)> = messages(&buf[..n]).into_iter().map(|(t, f, p)| (t, f, p.to_vec())).collect();
        for (t, flags, p) in msgs {
            let Some(c) = ct(&p) else { continue };
            if c.tuple.src != session_addr {
                continue;
            }
            let id = c.id.unwrap_or(0);
            let new = t == ((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW) && flags & libc::NLM_F_CREATE as u16 != 0;
            let destroy = t == ((NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE);
            if new {
                open.insert(id, (crate::state::now(), false));
                write(entry(&mut names, &c.tuple, Event::Open))?;
                continue;
            }
            let ended_tcp = matches!(c.tcp_state, Some(TCP_CONNTRACK_TIME_WAIT | TCP_CONNTRACK_CLOSE));
            if !(destroy || ended_tcp) {
                continue;
            }
            let Some((opened, logged)) = open.get(&id).copied() else { continue };
            if logged {
                if destroy {
                    open.remove(&id);
                }
                continue;
            }
            let bytes = if destroy { c.bytes } else { c.bytes.or_else(|| counters_now(&queries, c.raw_orig)) };
            let mut e = entry(&mut names, &c.tuple, Event::Close);
            e.opened_at = Some(opened);
            match bytes {
                Some((o, i)) => (e.bytes_out, e.bytes_in) = (Some(o), Some(i)),
                None => e.bytes_null_reason = Some("the kernel gave no byte counts for the connection (net.netfilter.nf_conntrack_acct was 0 when it opened)".into()),
            }
            write(e)?;
            if destroy {
                open.remove(&id);
            } else {
                open.insert(id, (opened, true));
            }
        }
    }
}

/// The byte counts of the conntrack entry whose original tuple is `raw_orig`, asked of the kernel now.
fn counters_now(sock: &OwnedFd, raw_orig: &[u8]) -> Option<(u64, u64)> {
    let ctm = |m: u16| (NFNL_SUBSYS_CTNETLINK << 8) | m;
    // CTA_TUPLE_ORIG is a nested attribute: flag it so.
    send(sock, &request(ctm(IPCTNL_MSG_CT_GET), libc::NLM_F_ACK as u16, libc::AF_INET as u8, 0, &[(CTA_TUPLE_ORIG | 0x8000, raw_orig)])).ok()?;
    let mut buf = vec![0u8; 16384];
    let mut found = None;
    let timeout = libc::timeval { tv_sec: 1, tv_usec: 0 };
    unsafe { libc::setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&timeout as *const libc::timeval).cast(), std::mem::size_of::<libc::timeval>() as u32) };
    loop {
        let n = recv(sock, &mut buf, 0).ok()?;
        for (t, _, p) in messages(&buf[..n]) {
            if t == libc::NLMSG_ERROR as u16 || t == libc::NLMSG_DONE as u16 {
                return found;
            }
            if t == ctm(IPCTNL_MSG_CT_NEW) {
                found = ct(p).and_then(|c| c.bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn resolver_log_lines_give_names() {
        assert_eq!(resolved("Dec  5 13:20:01 dnsmasq[77]: reply web.example.org is 198.51.100.10"), Some(("web.example.org".into(), "198.51.100.10".parse().unwrap())));
        assert_eq!(resolved("Dec  5 13:20:01 dnsmasq[77]: cached a.example.org is 192.0.2.5"), Some(("a.example.org".into(), "192.0.2.5".parse().unwrap())));
        assert_eq!(resolved("Dec  5 13:20:01 dnsmasq[77]: reply x.example.org is NXDOMAIN"), None);
        assert_eq!(resolved("Dec  5 13:20:01 dnsmasq[77]: query[A] web.example.org from 10.77.0.2"), None);
    }
    #[test]
    fn dns_answers_give_addresses_and_ttls() {
        // A response to web.example.org A: a CNAME (pointer to the question's name), then two A records.
        let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 3, 0, 0, 0, 0];
        m.extend_from_slice(b"\x03web\x07example\x03org\x00\x00\x01\x00\x01");
        m.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 30, 0, 4, 1, b'x', 0xc0, 16]);
        m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4, 198, 51, 100, 10]);
        m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0x0e, 0x10, 0, 4, 198, 51, 100, 11]);
        assert_eq!(dns_a_records(&m), vec![("198.51.100.10".parse().unwrap(), 5), ("198.51.100.11".parse().unwrap(), 3600)]);
        // Truncated: what was read before the fault; a query (QR clear): nothing.
        assert_eq!(dns_a_records(&m[..m.len() - 3]).len(), 1);
        let mut q = m.clone();
        q[2] = 0x01;
        assert!(dns_a_records(&q).is_empty());
        // In a UDP packet and in a TCP segment (length-prefixed).
        let mut udp = vec![0x45u8, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2, 0, 53, 0x9c, 0x40, 0, 0, 0, 0];
        udp.extend_from_slice(&m);
        assert_eq!(dns_in_packet(&udp), Some(&m[..]));
        let mut tcp = vec![0x45u8, 0, 0, 0, 0, 0, 0, 0, 64, 6, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2];
        tcp.extend_from_slice(&[0, 53, 0x9c, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x18, 0, 0, 0, 0, 0, 0]);
        tcp.extend_from_slice(&(m.len() as u16).to_be_bytes());
        tcp.extend_from_slice(&m);
        assert_eq!(dns_in_packet(&tcp), Some(&m[..]));
    }
    #[test]
    fn attributes_and_refused_packets_parse() {
        // nfgenmsg, then NFULA_PAYLOAD holding an IPv4 TCP header from 10.77.0.2:40000 to 10.0.0.10:80.
        let mut ip = vec![0x45u8, 0, 0, 40, 0, 0, 0, 0, 64, 6, 0, 0, 10, 77, 0, 2, 10, 0, 0, 10];
        ip.extend_from_slice(&[0x9c, 0x40, 0, 80]);
        let m = request(0, 0, 2, 0, &[(NFULA_PAYLOAD, &ip)]);
        let t = refused_packet(&m[16..]).unwrap();
        assert_eq!((t.src.to_string(), t.dst.to_string(), t.proto, t.dport), ("10.77.0.2".into(), "10.0.0.10".into(), 6, Some(80)));
        assert_eq!(messages(&m).len(), 1);
    }
}
