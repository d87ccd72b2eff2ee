//! nfnetlink, as the auditor speaks it: sockets of the NETLINK_NETFILTER family, requests, and the
//! messages and attributes of the kernel's answers and events (linux/netfilter/nfnetlink*.h, the
//! conntrack and nfnetlink_log subsystems). Apart from `audit`, which decides what a connection or a
//! refusal means for the session: this is only the kernel's message format.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub(super) const NFNL_SUBSYS_CTNETLINK: u16 = 1;
pub(super) const NFNL_SUBSYS_ULOG: u16 = 4;
pub(super) const IPCTNL_MSG_CT_NEW: u16 = 0;
pub(super) const IPCTNL_MSG_CT_GET: u16 = 1;
pub(super) const IPCTNL_MSG_CT_DELETE: u16 = 2;
pub(super) const NFULNL_MSG_PACKET: u16 = 0;
pub(super) const NFULNL_MSG_CONFIG: u16 = 1;
pub(super) const NFNLGRP_CONNTRACK_NEW: u32 = 1;
pub(super) const NFNLGRP_CONNTRACK_UPDATE: u32 = 2;
pub(super) const NFNLGRP_CONNTRACK_DESTROY: u32 = 3;
pub(super) const CTA_TUPLE_ORIG: u16 = 1;
pub(super) const CTA_PROTOINFO: u16 = 4;
pub(super) const CTA_COUNTERS_ORIG: u16 = 9;
pub(super) const CTA_COUNTERS_REPLY: u16 = 10;
pub(super) const CTA_ID: u16 = 12;
pub(super) const TCP_CONNTRACK_TIME_WAIT: u8 = 7;
pub(super) const TCP_CONNTRACK_CLOSE: u8 = 8;
pub(super) const NFULA_PAYLOAD: u16 = 9;

pub(super) fn nl_socket(groups: &[u32]) -> std::io::Result<OwnedFd> {
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_NETFILTER) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // A burst of connections must not overflow the socket: events lost are said (ENOBUFS), not silent.
    let size: libc::c_int = 8 << 20;
    unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, (&size as *const libc::c_int).cast(), 4) };
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    if unsafe { libc::bind(fd, (&addr as *const libc::sockaddr_nl).cast(), std::mem::size_of::<libc::sockaddr_nl>() as u32) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    for g in groups {
        if unsafe { libc::setsockopt(fd, libc::SOL_NETLINK, libc::NETLINK_ADD_MEMBERSHIP, (g as *const u32).cast(), 4) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(sock)
}

/// A netfilter netlink request: header, nfgenmsg (family, version 0, res_id big-endian), attributes.
pub(super) fn request(kind: u16, flags: u16, family: u8, res_id: u16, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut m = vec![0u8; 20];
    m[16] = family;
    m[18..20].copy_from_slice(&res_id.to_be_bytes());
    for (t, p) in attrs {
        let len = 4 + p.len();
        m.extend_from_slice(&(len as u16).to_ne_bytes());
        m.extend_from_slice(&t.to_ne_bytes());
        m.extend_from_slice(p);
        m.resize(m.len().div_ceil(4) * 4, 0);
    }
    let len = m.len() as u32;
    m[0..4].copy_from_slice(&len.to_ne_bytes());
    m[4..6].copy_from_slice(&kind.to_ne_bytes());
    m[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16 | flags).to_ne_bytes());
    m[8..12].copy_from_slice(&1u32.to_ne_bytes());
    m
}

pub(super) fn send(sock: &OwnedFd, m: &[u8]) -> std::io::Result<()> {
    if unsafe { libc::send(sock.as_raw_fd(), m.as_ptr().cast(), m.len(), 0) } != m.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

pub(super) fn recv(sock: &OwnedFd, buf: &mut [u8], flags: i32) -> std::io::Result<usize> {
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// The netlink messages in `buf`: (type, flags, payload after the 16-byte header).
pub(super) fn messages(buf: &[u8]) -> Vec<(u16, u16, &[u8])> {
    let mut out = vec![];
    let mut at = 0;
    while at + 16 <= buf.len() {
        let len = u32::from_ne_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
        if len < 16 || at + len > buf.len() {
            break;
        }
        let t = u16::from_ne_bytes([buf[at + 4], buf[at + 5]]);
        let f = u16::from_ne_bytes([buf[at + 6], buf[at + 7]]);
        out.push((t, f, &buf[at + 16..at + len]));
        at += len.div_ceil(4) * 4;
    }
    out
}

/// The attributes in `b`: (type without the nested and byte-order flags, payload).
pub(super) fn attrs(b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = vec![];
    let mut at = 0;
    while at + 4 <= b.len() {
        let len = u16::from_ne_bytes([b[at], b[at + 1]]) as usize;
        if len < 4 || at + len > b.len() {
            break;
        }
        out.push((u16::from_ne_bytes([b[at + 2], b[at + 3]]) & 0x3fff, &b[at + 4..at + len]));
        at += len.div_ceil(4) * 4;
    }
    out
}

pub(super) fn attr(b: &[u8], t: u16) -> Option<&[u8]> {
    attrs(b).into_iter().find(|a| a.0 == t).map(|a| a.1)
}

pub(super) fn be_u64(b: &[u8]) -> Option<u64> {
    Some(match b.len() {
        8 => u64::from_be_bytes(b.try_into().ok()?),
        4 => u32::from_be_bytes(b.try_into().ok()?) as u64,
        _ => return None,
    })
}

/// Wait for the kernel's answer to a request with NLM_F_ACK: its errno (0: done).
pub(super) fn ack(sock: &OwnedFd) -> std::io::Result<()> {
    let mut buf = vec![0u8; 8192];
    loop {
        let n = recv(sock, &mut buf, 0)?;
        for (t, _, p) in messages(&buf[..n]) {
            if t == libc::NLMSG_ERROR as u16 {
                let errno = p.get(0..4).map(|b| i32::from_ne_bytes(b.try_into().unwrap())).unwrap_or(-libc::EPROTO);
                return if errno == 0 { Ok(()) } else { Err(std::io::Error::from_raw_os_error(-errno)) };
            }
        }
    }
}
