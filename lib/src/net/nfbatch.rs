//! nf_tables transactions sent to the kernel directly: an nfnetlink batch of tables, chains, named
//! counters, sets, their elements and rules with their expressions, built here without `nft`. nft 1.0.6
//! lists every table on the host before it commits anything and pays for each (docs/benchmarks.md), so
//! a session's table made with it cost more with every other session on the host; a batch names only
//! what it makes. `egress` builds the session's table with it, expression for expression what nft sends
//! for the table's text (read from `nft --debug=netlink`), so that `nft list table` prints the same table
//! (tests/egress.rs compares the two listings).

use crate::record::egress::Cidr;

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_DELTABLE: u16 = 2;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFT_MSG_NEWSET: u16 = 9;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_NEWOBJ: u16 = 18;
const NFPROTO_INET: u8 = 1;
pub const NFPROTO_IPV4: u32 = 2;
const NLA_F_NESTED: u16 = 1 << 15;
/// nft's first register (16 bytes wide), which every expression here loads into and reads from.
pub const REG1: u32 = 1;
const REG_VERDICT: u32 = 0;

pub const NF_ACCEPT: i32 = 1;
pub const NF_DROP: i32 = 0;
pub const NFT_JUMP: i32 = -3;
pub const NFT_GOTO: i32 = -4;

/// Netlink attributes, appended in order; nested ones through `nest`.
#[derive(Default)]
pub struct Attrs(Vec<u8>);

impl Attrs {
    pub fn raw(&mut self, kind: u16, value: &[u8]) -> &mut Self {
        let len = 4 + value.len();
        self.0.extend_from_slice(&(len as u16).to_ne_bytes());
        self.0.extend_from_slice(&kind.to_ne_bytes());
        self.0.extend_from_slice(value);
        self.0.resize(self.0.len().div_ceil(4) * 4, 0);
        self
    }
    pub fn str(&mut self, kind: u16, s: &str) -> &mut Self {
        let v: Vec<u8> = s.bytes().chain([0]).collect();
        self.raw(kind, &v)
    }
    pub fn be32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.raw(kind, &v.to_be_bytes())
    }
    pub fn be64(&mut self, kind: u16, v: u64) -> &mut Self {
        self.raw(kind, &v.to_be_bytes())
    }
    pub fn nest(&mut self, kind: u16, f: impl FnOnce(&mut Attrs)) -> &mut Self {
        let mut inner = Attrs::default();
        f(&mut inner);
        self.raw(kind | NLA_F_NESTED, &inner.0)
    }
    /// NFTA_DATA_VALUE inside `kind`.
    pub fn data(&mut self, kind: u16, value: &[u8]) -> &mut Self {
        self.nest(kind, |a| {
            a.raw(1, value);
        })
    }
}

/// One rule's expressions.
#[derive(Default)]
pub struct Rule(Vec<Vec<u8>>);

impl Rule {
    pub fn expr(&mut self, name: &str, f: impl FnOnce(&mut Attrs)) -> &mut Self {
        let mut e = Attrs::default();
        e.str(1, name);
        e.nest(2, f);
        self.0.push(e.0);
        self
    }
    pub fn meta_load(&mut self, key: u32) -> &mut Self {
        self.expr("meta", |a| {
            a.be32(2, key).be32(1, REG1);
        })
    }
    pub fn cmp(&mut self, eq: bool, value: &[u8]) -> &mut Self {
        self.expr("cmp", |a| {
            a.be32(1, REG1).be32(2, if eq { 0 } else { 1 }).data(3, value);
        })
    }
    /// `iifname` (6) or `oifname` (7) equal (or not) to `name`.
    pub fn ifname(&mut self, key: u32, eq: bool, name: &str) -> &mut Self {
        let mut v = [0u8; 16];
        v[..name.len()].copy_from_slice(name.as_bytes());
        self.meta_load(key).cmp(eq, &v)
    }
    pub fn nfproto(&mut self, eq: bool) -> &mut Self {
        self.meta_load(15).cmp(eq, &[NFPROTO_IPV4 as u8])
    }
    /// `ip saddr` (offset 12) or `ip daddr` (16) into the register, after nft's dependency (an IPv4 packet).
    pub fn ip_addr(&mut self, offset: u32) -> &mut Self {
        self.nfproto(true).payload(1, offset, 4)
    }
    pub fn payload(&mut self, base: u32, offset: u32, len: u32) -> &mut Self {
        self.expr("payload", |a| {
            a.be32(1, REG1).be32(2, base).be32(3, offset).be32(4, len);
        })
    }
    pub fn lookup(&mut self, set: &str, id: Option<u32>) -> &mut Self {
        self.expr("lookup", |a| {
            a.str(1, set).be32(2, REG1);
            if let Some(id) = id {
                a.be32(4, id);
            }
            a.be32(5, 0);
        })
    }
    /// `ct state` has one of the bits of `mask` (new 8, established 2, related 4).
    pub fn ct_state(&mut self, mask: u32) -> &mut Self {
        self.expr("ct", |a| {
            a.be32(2, 0).be32(1, REG1);
        });
        self.expr("bitwise", |a| {
            a.be32(1, REG1).be32(2, REG1).be32(3, 4).data(4, &mask.to_ne_bytes()).data(5, &[0; 4]);
        });
        self.cmp(false, &[0; 4])
    }
    pub fn mark_set(&mut self, mark: u32) -> &mut Self {
        self.expr("immediate", |a| {
            a.be32(1, REG1).data(2, &mark.to_ne_bytes());
        });
        self.expr("meta", |a| {
            a.be32(2, 3).be32(3, REG1);
        })
    }
    pub fn counter(&mut self, name: &str) -> &mut Self {
        self.expr("objref", |a| {
            a.be32(1, 1).str(2, name);
        })
    }
    pub fn verdict(&mut self, code: i32, chain: Option<&str>) -> &mut Self {
        self.expr("immediate", |a| {
            a.be32(1, REG_VERDICT).nest(2, |d| {
                d.nest(2, |v| {
                    v.be32(1, code as u32);
                    if let Some(c) = chain {
                        v.str(2, c);
                    }
                });
            });
        })
    }
    pub fn l4proto(&mut self, proto: u8) -> &mut Self {
        self.meta_load(16).cmp(true, &[proto])
    }
    pub fn l4proto_in(&mut self, set: &str, id: u32) -> &mut Self {
        self.meta_load(16).lookup(set, Some(id))
    }
    /// The transport header's source (offset 0) or destination (2) port equal to `port`.
    pub fn th_port(&mut self, offset: u32, port: u16) -> &mut Self {
        self.payload(2, offset, 2).cmp(true, &port.to_be_bytes())
    }
    pub fn limit(&mut self, rate: u64, burst: u32, bytes: bool, over: bool) -> &mut Self {
        self.expr("limit", |a| {
            a.be64(1, rate).be64(2, 1).be32(3, burst).be32(4, bytes as u32).be32(5, over as u32);
        })
    }
    pub fn log_group(&mut self, group: u16) -> &mut Self {
        self.expr("log", |a| {
            a.raw(1, &group.to_be_bytes());
        })
    }
    pub fn reject(&mut self, kind: u32, code: u8) -> &mut Self {
        self.expr("reject", |a| {
            a.be32(1, kind).raw(2, &[code]);
        })
    }
}

/// What a set element is: a key (or an interval's start), an interval's end, or the start of an interval
/// that runs to the last address.
#[derive(Clone, Copy, PartialEq)]
pub enum Elem {
    Start,
    End,
    Open,
}

/// The batch: its messages, each with its sequence number.
pub struct Batch {
    buf: Vec<u8>,
    seq: u32,
    table: String,
    /// Sets get ids from here, unique in the batch (rules and elements name a set of the batch by it).
    set_id: u32,
    named: std::collections::HashMap<String, u32>,
}

impl Batch {
    /// A batch of changes to the table `inet <table>`, its first message sent.
    pub fn new(table: &str) -> Batch {
        let mut b = Batch { buf: vec![], seq: 0, table: table.to_string(), set_id: 0, named: Default::default() };
        b.msg(NFNL_MSG_BATCH_BEGIN, 0, libc::AF_UNSPEC as u8, NFNL_SUBSYS_NFTABLES, &[]);
        b
    }
    /// The batch's bytes, its last message added.
    pub fn finish(mut self) -> Vec<u8> {
        self.msg(NFNL_MSG_BATCH_END, 0, libc::AF_UNSPEC as u8, NFNL_SUBSYS_NFTABLES, &[]);
        self.buf
    }
    /// Create the table (NLM_F_EXCL: a table of that name already there fails the batch, EEXIST).
    pub fn create_table(&mut self) {
        let mut t = Attrs::default();
        t.str(1, &self.table.clone()).be32(2, 0);
        self.nft(NFT_MSG_NEWTABLE, (libc::NLM_F_CREATE | libc::NLM_F_EXCL) as u16, &t);
    }
    /// Delete the table (ENOENT when there is none).
    pub fn delete_table(&mut self) {
        let mut t = Attrs::default();
        t.str(1, &self.table.clone());
        self.nft(NFT_MSG_DELTABLE, 0, &t);
    }
    /// The id of the named set `name` made in this batch.
    pub fn set_id(&self, name: &str) -> u32 {
        self.named[name]
    }
    fn msg(&mut self, kind: u16, flags: u16, family: u8, res_id: u16, attrs: &[u8]) {
        self.seq += 1;
        let len = 16 + 4 + attrs.len();
        self.buf.extend_from_slice(&(len as u32).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
        self.buf.extend_from_slice(&self.seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes());
        self.buf.extend_from_slice(&[family, 0]);
        self.buf.extend_from_slice(&res_id.to_be_bytes());
        self.buf.extend_from_slice(attrs);
    }
    fn nft(&mut self, kind: u16, flags: u16, a: &Attrs) {
        self.msg((NFNL_SUBSYS_NFTABLES << 8) | kind, flags | libc::NLM_F_ACK as u16, NFPROTO_INET, 0, &a.0);
    }
    pub fn chain(&mut self, name: &str, hook: Option<(&str, u32, i32)>) {
        let mut a = Attrs::default();
        a.str(1, &self.table.clone()).str(3, name);
        if let Some((kind, hooknum, prio)) = hook {
            a.nest(4, |h| {
                h.be32(1, hooknum).be32(2, prio as u32);
            })
            .be32(5, NF_ACCEPT as u32)
            .str(7, kind);
        }
        self.nft(NFT_MSG_NEWCHAIN, libc::NLM_F_CREATE as u16, &a);
    }
    pub fn counter(&mut self, name: &str) {
        let mut a = Attrs::default();
        a.str(1, &self.table.clone()).str(2, name).be32(3, 1).nest(4, |c| {
            c.be64(1, 0).be64(2, 0);
        });
        self.nft(NFT_MSG_NEWOBJ, libc::NLM_F_CREATE as u16, &a);
    }
    /// A named set of IPv4 addresses: `interval` (elements are networks) or with a `timeout` (ms).
    pub fn ipv4_set(&mut self, name: &str, interval: bool, timeout_ms: Option<u64>, nets: &[Cidr]) {
        let mut a = Attrs::default();
        let flags = if interval { 4 } else { 0 } | if timeout_ms.is_some() { 0x10 } else { 0 };
        a.str(1, &self.table.clone()).str(2, name).be32(3, flags).be32(4, 7).be32(5, 4);
        self.set_id += 1;
        a.be32(10, self.set_id);
        self.named.insert(name.to_string(), self.set_id);
        if let Some(t) = timeout_ms {
            a.be64(11, t);
        }
        self.nft(NFT_MSG_NEWSET, libc::NLM_F_CREATE as u16, &a);
        if !nets.is_empty() {
            let mut bounds: Vec<(u32, u64)> = nets.iter().map(|c| (u32::from(c.addr), u64::from(u32::from(c.addr)) + (1u64 << (32 - c.len)))).collect();
            bounds.sort_unstable();
            let mut elems: Vec<(Vec<u8>, Elem)> = vec![];
            for (start, end) in bounds {
                // A network up to the last address has no end element: nft marks its start open.
                elems.push((start.to_be_bytes().to_vec(), if end <= u32::MAX as u64 { Elem::Start } else { Elem::Open }));
                if end <= u32::MAX as u64 {
                    elems.push(((end as u32).to_be_bytes().to_vec(), Elem::End));
                }
            }
            let id = self.named[name];
            self.elements(name, Some(id), &elems);
        }
    }
    /// Elements of the set `name` (`id`: an anonymous set of this batch), each a key and whether it
    /// ends an interval.
    fn elements(&mut self, name: &str, id: Option<u32>, elems: &[(Vec<u8>, Elem)]) {
        let mut a = Attrs::default();
        a.str(1, &self.table.clone()).str(2, name);
        if let Some(id) = id {
            a.be32(4, id);
        }
        a.nest(3, |l| {
            for (key, kind) in elems {
                l.nest(1, |e| {
                    if *kind == Elem::End {
                        e.be32(3, 1);
                    }
                    e.data(1, key);
                    if *kind == Elem::Open {
                        // nft's element userdata: its flags (type 1, 4 bytes), SET_ELEM_F_INTERVAL_OPEN.
                        e.raw(6, &[1, 4, 1, 0, 0, 0]);
                    }
                });
            }
        });
        self.nft(NFT_MSG_NEWSETELEM, libc::NLM_F_CREATE as u16, &a);
    }
    /// An anonymous constant set of `keys` (type `key_type`, each `key_len` bytes): its name and id.
    pub fn anon_set(&mut self, key_type: u32, key_len: u32, keys: &[Vec<u8>]) -> (String, u32) {
        self.set_id += 1;
        let (name, id) = ("__set%d".to_string(), self.set_id);
        let mut a = Attrs::default();
        a.str(1, &self.table.clone()).str(2, &name).be32(3, 3).be32(4, key_type).be32(5, key_len).nest(9, |d| {
            d.be32(1, keys.len() as u32);
        });
        a.be32(10, id);
        self.nft(NFT_MSG_NEWSET, libc::NLM_F_CREATE as u16, &a);
        let elems: Vec<(Vec<u8>, Elem)> = keys.iter().map(|k| (k.clone(), Elem::Start)).collect();
        self.elements(&name, Some(id), &elems);
        (name, id)
    }
    pub fn rule(&mut self, chain: &str, r: &Rule) {
        let mut a = Attrs::default();
        a.str(1, &self.table.clone()).str(2, chain).nest(4, |l| {
            for e in &r.0 {
                l.raw(1 | NLA_F_NESTED, e);
            }
        });
        self.nft(NFT_MSG_NEWRULE, (libc::NLM_F_CREATE | libc::NLM_F_APPEND) as u16, &a);
    }
}

/// Send `batch` on a netfilter netlink socket and wait for the kernel's answer to each of its messages
/// that asked for one (NLM_F_ACK): the first error is returned (the kernel then committed nothing).
pub fn send(batch: &[u8]) -> std::io::Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_NETFILTER) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let timeout = libc::timeval { tv_sec: 5, tv_usec: 0 };
    unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&timeout as *const libc::timeval).cast(), std::mem::size_of::<libc::timeval>() as u32) };
    // The sequence numbers that asked for an answer.
    let mut pending = std::collections::BTreeSet::new();
    let mut at = 0;
    while at + 16 <= batch.len() {
        let len = u32::from_ne_bytes(batch[at..at + 4].try_into().unwrap()) as usize;
        let flags = u16::from_ne_bytes(batch[at + 6..at + 8].try_into().unwrap());
        if flags & libc::NLM_F_ACK as u16 != 0 {
            pending.insert(u32::from_ne_bytes(batch[at + 8..at + 12].try_into().unwrap()));
        }
        at += len.div_ceil(4) * 4;
    }
    if unsafe { libc::send(sock.as_raw_fd(), batch.as_ptr().cast(), batch.len(), 0) } != batch.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 1 << 16];
    let mut first_err = None;
    while !pending.is_empty() {
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let got = &buf[..n as usize];
        let mut at = 0;
        while at + 16 <= got.len() {
            let len = u32::from_ne_bytes(got[at..at + 4].try_into().unwrap()) as usize;
            let kind = u16::from_ne_bytes(got[at + 4..at + 6].try_into().unwrap());
            let seq = u32::from_ne_bytes(got[at + 8..at + 12].try_into().unwrap());
            if len < 16 || at + len > got.len() {
                return Err(std::io::Error::other("a malformed netlink message"));
            }
            if kind == libc::NLMSG_ERROR as u16 && len >= 20 {
                let errno = -i32::from_ne_bytes(got[at + 16..at + 20].try_into().unwrap());
                pending.remove(&seq);
                if errno != 0 && first_err.is_none() {
                    first_err = Some(std::io::Error::from_raw_os_error(errno));
                }
            }
            at += len.div_ceil(4) * 4;
        }
        // After an error the kernel aborts the batch and may answer no further message.
        if first_err.is_some() {
            break;
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
