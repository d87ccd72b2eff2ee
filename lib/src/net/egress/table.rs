//! A session's policy table, `inet drums_net_<slot>` (crate::net::egress says what it does): its text, as
//! `nft -f` takes it and an operator reads it, and the same table as one nf_tables batch
//! (crate::net::nfbatch), which is what a session's policy sends to the kernel.

use super::{table_name, Proxy, ALWAYS_DENIED, PERMIT_MARK, RESOLVER_ADDR};
use crate::error::{Error, Result};
use crate::net::nfbatch::{Batch, Rule, NFPROTO_IPV4, NFT_GOTO, NFT_JUMP, NF_ACCEPT, NF_DROP, REG1};
use crate::record::egress::{Cidr, Policy};
use std::net::Ipv4Addr;

/// The session's table, as `nft -f` takes it: the reference `table_batch` is checked against (what
/// `nft list table` prints of either is the same, tests/egress.rs), and what an operator reads.
pub fn table_text(slot: u32, policy: &Policy, uplink: &str, except: &[Cidr], rate: Option<u64>, proxy: Option<&Proxy>) -> String {
    let (host, sess) = crate::net::slot_addrs(slot);
    let hif = crate::net::host_if_name(slot);
    let t = table_name(slot);
    let denied = ALWAYS_DENIED.join(", ");
    let nets: Vec<String> = policy.nets().iter().map(Cidr::to_string).collect();
    let set_elems = |v: &[String]| if v.is_empty() { String::new() } else { format!("\n    elements = {{ {} }}", v.join(", ")) };
    let exc: Vec<String> = except.iter().map(Cidr::to_string).collect();
    let verdict = match policy {
        Policy::Internet => format!("    ct state new counter name conns_out\n    meta mark set {PERMIT_MARK:#x} counter name bytes_out accept\n"),
        _ => format!("    ip daddr @allowed ct state new counter name conns_out\n    ip daddr @allowed meta mark set {PERMIT_MARK:#x} counter name bytes_out accept\n    ip daddr @resolved ct state new counter name conns_out\n    ip daddr @resolved meta mark set {PERMIT_MARK:#x} counter name bytes_out accept\n"),
    };
    // The operator's proxy, that address and TCP port only, ahead of the always-denied ranges.
    let to_proxy = match proxy {
        Some(p) => format!(
            "    ip daddr {a} tcp dport {port} ct state new counter name conns_out\n    ip daddr {a} tcp dport {port} meta mark set {PERMIT_MARK:#x} counter name bytes_out accept\n",
            a = p.addr,
            port = p.port
        ),
        None => String::new(),
    };
    let group = crate::net::audit::nflog_group(slot);
    // An allow list's resolver answers go to the auditor too, which keeps their addresses in `resolved`
    // for as long as each answer is valid (crate::net::audit).
    let dns_log = match policy {
        Policy::Allow(_) => format!("    oifname \"{hif}\" meta l4proto {{ tcp, udp }} th sport 53 log group {}\n", crate::net::audit::answers_group(slot)),
        _ => String::new(),
    };
    // The cap each way: one token bucket per direction, a burst of a quarter second (at least 64 KiB).
    let cap = match rate {
        Some(r) => {
            let b = (r / 4).clamp(65536, u32::MAX as u64);
            format!("    iifname \"{hif}\" limit rate over {r} bytes/second burst {b} bytes counter name rate_dropped drop\n    oifname \"{hif}\" limit rate over {r} bytes/second burst {b} bytes counter name rate_dropped drop\n")
        }
        None => String::new(),
    };
    format!(
        r#"table inet {t} {{
  counter bytes_out {{ }}
  counter bytes_in {{ }}
  counter conns_out {{ }}
  counter conns_in {{ }}
  counter refused {{ }}
  counter rate_dropped {{ }}
  set denied {{
    type ipv4_addr
    flags interval
    elements = {{ {denied} }}
  }}
  set except {{
    type ipv4_addr
    flags interval{exc}
  }}
  set allowed {{
    type ipv4_addr
    flags interval{nets}
  }}
  set resolved {{
    type ipv4_addr
    flags timeout
    timeout {floor}s
  }}
  chain refuse {{
    counter name refused
    limit rate {LOG_RATE}/second burst {LOG_BURST} packets log group {group}
    meta l4proto tcp reject with tcp reset
    reject with icmpx admin-prohibited
  }}
  chain egress {{
    oifname != "{uplink}" goto refuse
    ct state established,related meta mark set {PERMIT_MARK:#x} counter name bytes_out accept
    meta nfproto != ipv4 goto refuse
    ip daddr @except ct state new counter name conns_out
    ip daddr @except meta mark set {PERMIT_MARK:#x} counter name bytes_out accept
{to_proxy}    ip daddr @denied goto refuse
    fib daddr type != unicast goto refuse
{verdict}    goto refuse
  }}
  chain forward {{
    type filter hook forward priority filter - 1; policy accept;
{cap}    iifname "{hif}" jump egress
    oifname "{hif}" ct state established,related meta mark set {PERMIT_MARK:#x} counter name bytes_in accept
  }}
  chain input {{
    type filter hook input priority filter - 1; policy accept;
    iifname "{hif}" ct state established,related accept
    iifname "{hif}" ip daddr {host} meta l4proto {{ tcp, udp }} th dport 53 meta mark set {PERMIT_MARK:#x} accept
    iifname "{hif}" goto refuse
  }}
  chain output {{
    type filter hook output priority filter - 1; policy accept;
    oifname "{hif}" ct state new counter name conns_in
{dns_log}  }}
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iifname "{hif}" ip daddr {RESOLVER_ADDR} meta l4proto {{ tcp, udp }} th dport 53 dnat ip to {host}
  }}
  chain postrouting {{
    type nat hook postrouting priority srcnat; policy accept;
    oifname "{uplink}" ip saddr {{ {host}, {sess} }} masquerade
  }}
}}
"#,
        exc = set_elems(&exc),
        floor = crate::net::audit::TTL_FLOOR_S,
        nets = set_elems(&nets),
    )
}

/// The session's table, `table_text` (the same arguments), as one nf_tables batch: what nft sends for
/// that text, expression for expression (crate::net::nfbatch), its table created with NLM_F_EXCL, so
/// that a table of that name left on the host fails it (EEXIST) instead of being merged into.
fn table_batch(slot: u32, policy: &Policy, uplink: &str, except: &[Cidr], rate: Option<u64>, proxy: Option<&Proxy>) -> Result<Vec<u8>> {
    const MARK: u32 = PERMIT_MARK;
    let (host, sess) = crate::net::slot_addrs(slot);
    let hif = crate::net::host_if_name(slot);
    let mut b = Batch::new(&table_name(slot));
    b.create_table();
    // Chains first (rules jump and go to them), as nft sends them.
    b.chain("refuse", None);
    b.chain("egress", None);
    b.chain("forward", Some(("filter", 2, -1)));
    b.chain("input", Some(("filter", 1, -1)));
    b.chain("output", Some(("filter", 3, -1)));
    b.chain("prerouting", Some(("nat", 0, -100)));
    b.chain("postrouting", Some(("nat", 4, 100)));
    for c in ["bytes_out", "bytes_in", "conns_out", "conns_in", "refused", "rate_dropped"] {
        b.counter(c);
    }
    let denied: Vec<Cidr> = ALWAYS_DENIED.iter().map(|c| Cidr::parse(c)).collect::<Result<_>>()?;
    b.ipv4_set("denied", true, None, &denied);
    b.ipv4_set("except", true, None, except);
    b.ipv4_set("allowed", true, None, &policy.nets());
    b.ipv4_set("resolved", false, Some(crate::net::audit::TTL_FLOOR_S as u64 * 1000), &[]);

    let new_conn = |r: &mut Rule| {
        r.ct_state(8).counter("conns_out");
    };
    let permit = |r: &mut Rule, counter: &str| {
        r.mark_set(MARK).counter(counter).verdict(NF_ACCEPT, None);
    };
    // To an address of `set`: a new connection is counted, then every packet is permitted.
    let count_and_permit = |b: &mut Batch, set: &str| {
        let mut r = Rule::default();
        r.ip_addr(16).lookup(set, Some(b.set_id(set)));
        new_conn(&mut r);
        b.rule("egress", &r);
        let mut r = Rule::default();
        r.ip_addr(16).lookup(set, Some(b.set_id(set)));
        permit(&mut r, "bytes_out");
        b.rule("egress", &r);
    };
    // chain refuse
    let mut r = Rule::default();
    r.counter("refused");
    b.rule("refuse", &r);
    let mut r = Rule::default();
    r.limit(LOG_RATE as u64, LOG_BURST, false, false).log_group(crate::net::audit::nflog_group(slot) as u16);
    b.rule("refuse", &r);
    let mut r = Rule::default();
    r.l4proto(6).reject(1, 0);
    b.rule("refuse", &r);
    let mut r = Rule::default();
    r.reject(2, 3);
    b.rule("refuse", &r);
    // chain egress
    let mut r = Rule::default();
    r.ifname(7, false, uplink).verdict(NFT_GOTO, Some("refuse"));
    b.rule("egress", &r);
    let mut r = Rule::default();
    r.ct_state(6);
    permit(&mut r, "bytes_out");
    b.rule("egress", &r);
    let mut r = Rule::default();
    r.nfproto(false).verdict(NFT_GOTO, Some("refuse"));
    b.rule("egress", &r);
    count_and_permit(&mut b, "except");
    if let Some(p) = proxy {
        for counting in [true, false] {
            let mut r = Rule::default();
            r.ip_addr(16).cmp(true, &p.addr.octets()).l4proto(6).th_port(2, p.port);
            if counting {
                new_conn(&mut r);
            } else {
                permit(&mut r, "bytes_out");
            }
            b.rule("egress", &r);
        }
    }
    let mut r = Rule::default();
    r.ip_addr(16).lookup("denied", Some(b.set_id("denied"))).verdict(NFT_GOTO, Some("refuse"));
    b.rule("egress", &r);
    let mut r = Rule::default();
    // fib daddr type != unicast
    r.expr("fib", |a| {
        a.be32(1, REG1).be32(2, 3).be32(3, 2);
    })
    .cmp(false, &1u32.to_ne_bytes())
    .verdict(NFT_GOTO, Some("refuse"));
    b.rule("egress", &r);
    match policy {
        Policy::Internet => {
            let mut r = Rule::default();
            new_conn(&mut r);
            b.rule("egress", &r);
            let mut r = Rule::default();
            permit(&mut r, "bytes_out");
            b.rule("egress", &r);
        }
        _ => {
            for set in ["allowed", "resolved"] {
                count_and_permit(&mut b, set);
            }
        }
    }
    let mut r = Rule::default();
    r.verdict(NFT_GOTO, Some("refuse"));
    b.rule("egress", &r);
    // chain forward
    if let Some(rate) = rate {
        let burst = (rate / 4).clamp(65536, u32::MAX as u64) as u32;
        for key in [6, 7] {
            let mut r = Rule::default();
            r.ifname(key, true, &hif).limit(rate, burst, true, true).counter("rate_dropped").verdict(NF_DROP, None);
            b.rule("forward", &r);
        }
    }
    let mut r = Rule::default();
    r.ifname(6, true, &hif).verdict(NFT_JUMP, Some("egress"));
    b.rule("forward", &r);
    let mut r = Rule::default();
    r.ifname(7, true, &hif).ct_state(6);
    permit(&mut r, "bytes_in");
    b.rule("forward", &r);
    // chain input
    let mut r = Rule::default();
    r.ifname(6, true, &hif).ct_state(6).verdict(NF_ACCEPT, None);
    b.rule("input", &r);
    let (tcp_udp, id) = b.anon_set(12, 1, &[vec![6], vec![17]]);
    let mut r = Rule::default();
    r.ifname(6, true, &hif).ip_addr(16).cmp(true, &host.octets()).l4proto_in(&tcp_udp, id).th_port(2, 53).mark_set(MARK).verdict(NF_ACCEPT, None);
    b.rule("input", &r);
    let mut r = Rule::default();
    r.ifname(6, true, &hif).verdict(NFT_GOTO, Some("refuse"));
    b.rule("input", &r);
    // chain output
    let mut r = Rule::default();
    r.ifname(7, true, &hif).ct_state(8).counter("conns_in");
    b.rule("output", &r);
    if let Policy::Allow(_) = policy {
        let (tcp_udp, id) = b.anon_set(12, 1, &[vec![6], vec![17]]);
        let mut r = Rule::default();
        r.ifname(7, true, &hif).l4proto_in(&tcp_udp, id).th_port(0, 53).log_group(crate::net::audit::answers_group(slot) as u16);
        b.rule("output", &r);
    }
    // chain prerouting: the resolver address every session names, to its own resolver.
    let resolver: Ipv4Addr = RESOLVER_ADDR.parse().expect("RESOLVER_ADDR is an address");
    let (tcp_udp, id) = b.anon_set(12, 1, &[vec![6], vec![17]]);
    let mut r = Rule::default();
    r.ifname(6, true, &hif).ip_addr(16).cmp(true, &resolver.octets()).l4proto_in(&tcp_udp, id).th_port(2, 53);
    r.expr("immediate", |a| {
        a.be32(1, REG1).data(2, &host.octets());
    })
    .expr("nat", |a| {
        a.be32(1, 1).be32(2, NFPROTO_IPV4).be32(3, REG1);
    });
    b.rule("prerouting", &r);
    // chain postrouting
    let (addrs, id) = b.anon_set(7, 4, &[host.octets().to_vec(), sess.octets().to_vec()]);
    let mut r = Rule::default();
    r.ifname(7, true, uplink).ip_addr(12).lookup(&addrs, Some(id)).expr("masq", |_| {});
    b.rule("postrouting", &r);
    Ok(b.finish())
}

/// Create the session's table (`egress::table_text`) in one transaction sent to the kernel directly.
/// A table of that name already there fails it: Err(Exists).
pub fn create_table(slot: u32, policy: &Policy, uplink: &str, except: &[Cidr], rate: Option<u64>, proxy: Option<&Proxy>) -> std::result::Result<(), CreateError> {
    let batch = table_batch(slot, policy, uplink, except, rate, proxy).map_err(CreateError::Other)?;
    crate::net::nfbatch::send(&batch).map_err(|e| match e.raw_os_error() {
        Some(libc::EEXIST) => CreateError::Exists,
        _ => CreateError::Other(Error::failed(format!("nftables: the table of slot {slot}: {e}"))),
    })
}

#[derive(Debug)]
pub enum CreateError {
    /// A table of that name is already there.
    Exists,
    Other(Error),
}

/// At most this many refused packets a second (after a burst of LOG_BURST) go to the audit log: a
/// session that floods refused destinations cannot fill the host's disk through it.
pub const LOG_RATE: u32 = 50;
pub const LOG_BURST: u32 = 100;
