//! A session's network policy and the record's `egress` section (written by crate::net::egress).
//! docs/record.md, "The egress section"; drums(7), "Network boundary".

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::net::Ipv4Addr;

/// An IPv4 network, `A.B.C.D/N` (a bare address is /32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: Ipv4Addr,
    pub len: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr> {
        let bad = |why: &str| Error::bad_input(format!("`{s}` is not an IPv4 network (A.B.C.D/N): {why}"));
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, l.parse::<u8>().map_err(|_| bad("bad prefix length"))?),
            None => (s, 32),
        };
        if l > 32 {
            return Err(bad("prefix length above 32"));
        }
        let addr: Ipv4Addr = a.parse().map_err(|_| bad("bad address"))?;
        let mask = if l == 0 { 0 } else { u32::MAX << (32 - l) };
        if u32::from(addr) & !mask != 0 {
            return Err(bad("host bits set"));
        }
        Ok(Cidr { addr, len: l })
    }
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        let mask = if self.len == 0 { 0 } else { u32::MAX << (32 - self.len) };
        u32::from(a) & mask == u32::from(self.addr)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// One entry of an allow list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allow {
    /// Exactly this name.
    Name(String),
    /// `*.NAME`: the subdomains of NAME, not NAME itself.
    Subdomains(String),
    Net(Cidr),
}

/// What a session may reach beyond its host link.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Policy {
    /// Nothing leaves the session (the default).
    #[default]
    None,
    /// Every public IPv4 address, by name or address.
    Internet,
    /// Only these names (through the session's resolver) and networks.
    Allow(Vec<Allow>),
}

/// A DNS name as an allow list takes it: lower case, labels of letters, digits, `-` and `_`, at least two
/// labels (a bare top-level name would be a whole registry).
fn check_name(n: &str) -> std::result::Result<String, String> {
    let n = n.trim_end_matches('.').to_ascii_lowercase();
    if n.len() > 253 {
        return Err("longer than 253 characters".into());
    }
    let labels: Vec<&str> = n.split('.').collect();
    if labels.len() < 2 {
        return Err("a name needs at least two labels".into());
    }
    for l in &labels {
        if l.is_empty() || l.len() > 63 || !l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') || l.starts_with('-') {
            return Err(format!("label `{l}` is not a DNS label"));
        }
    }
    Ok(n)
}

impl Policy {
    /// `none`, `internet` or `allow:ENTRY,...` with ENTRY a name, `*.name` or a CIDR.
    pub fn parse(s: &str) -> Result<Policy> {
        let s = s.trim();
        match s {
            "" | "none" => return Ok(Policy::None),
            "internet" => return Ok(Policy::Internet),
            _ => {}
        }
        let Some(list) = s.strip_prefix("allow:") else {
            return Err(Error::bad_input(format!("network policy `{s}`: expected none, internet or allow:NAME|*.NAME|CIDR,...")));
        };
        let mut out = vec![];
        for e in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let bad = |why: String| Error::bad_input(format!("network policy: allow entry `{e}`: {why}"));
            let a = if e.chars().next().is_some_and(|c| c.is_ascii_digit()) && e.chars().all(|c| c.is_ascii_digit() || c == '.' || c == '/') {
                Allow::Net(Cidr::parse(e).map_err(|x| bad(x.to_string()))?)
            } else if let Some(rest) = e.strip_prefix("*.") {
                Allow::Subdomains(check_name(rest).map_err(bad)?)
            } else if e.contains('*') {
                return Err(bad("a wildcard is only `*.` in front of a name".into()));
            } else {
                Allow::Name(check_name(e).map_err(bad)?)
            };
            if !out.contains(&a) {
                out.push(a);
            }
        }
        if out.is_empty() {
            return Err(Error::bad_input("network policy `allow:` names nothing: use none"));
        }
        Ok(Policy::Allow(out))
    }
    pub fn is_none(&self) -> bool {
        *self == Policy::None
    }
    pub fn nets(&self) -> Vec<Cidr> {
        match self {
            Policy::Allow(v) => v.iter().filter_map(|a| if let Allow::Net(c) = a { Some(*c) } else { None }).collect(),
            _ => vec![],
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Policy::None => f.write_str("none"),
            Policy::Internet => f.write_str("internet"),
            Policy::Allow(v) => {
                let items: Vec<String> = v
                    .iter()
                    .map(|a| match a {
                        Allow::Name(n) => n.clone(),
                        Allow::Subdomains(n) => format!("*.{n}"),
                        Allow::Net(c) => c.to_string(),
                    })
                    .collect();
                write!(f, "allow:{}", items.join(","))
            }
        }
    }
}

impl Serialize for Policy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Policy::parse(&s).map_err(|e| serde::de::Error::custom(e.to_string()))
    }
}

/// The record's `egress` section: the policy a session runs under and how the host enforces it. Absent:
/// policy `none` (nothing but the session's host link; no host state made for it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Section {
    pub policy: Policy,
    /// The host interface its packets leave through (the uplink) and the gateway there (null: the
    /// destination is on the uplink's link).
    pub uplink: String,
    pub gateway: Option<String>,
    /// Networks the operator excepted from the always-denied ranges (`--net-except`).
    pub except: Vec<String>,
    /// The bandwidth cap each way, bytes a second (`--net-rate`); null: none (and in older records).
    #[serde(default)]
    pub rate_bytes_s: Option<u64>,
    /// The upstream HTTP proxy (`--proxy`), `http://IPV4:PORT`; null: none (and in older records).
    #[serde(default)]
    pub proxy: Option<String>,
    /// The nftables table that enforces the policy (`inet drums_net_<slot>`).
    pub nft_table: String,
    /// The policy routing table and rule preference of the session's packets.
    pub route_table: u32,
    pub rule_pref: u32,
    /// The session's resolver: the host address it listens on (the session's nameserver), its upstream
    /// servers, and its pid on the host.
    pub resolver: Resolver,
    /// Unix time the policy was applied.
    pub applied_at: f64,
    /// What applying it took, step by step (absent in older records).
    #[serde(default)]
    pub apply_times: Option<ApplyTimes>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Milliseconds each step of applying a policy took (crate::net::egress::apply), wall time on the
/// applying thread, n = 1 application: where a restore's `network_s` goes under a policy.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ApplyTimes {
    /// Removing the state of the policy the session had before (drums-net set); 0 when it had none.
    pub remove_ms: f64,
    /// Finding the uplink and upstream servers, the ledger line, forwarding turned on.
    pub prepare_ms: f64,
    /// Starting the resolver (dnsmasq) and the connection auditor (`drums-net audit`), without waiting
    /// for them: they start up beside the next two steps.
    pub spawn_ms: f64,
    /// Creating the session's table, its sets, counters and chains: one nftables transaction.
    pub nft_ms: f64,
    /// The policy routing table's routes and the session's rules (rtnetlink).
    pub routes_ms: f64,
    /// Waiting for the resolver to run and the auditor to listen.
    pub wait_ms: f64,
    /// The default route inside the session.
    pub session_route_ms: f64,
    /// The session's /etc/resolv.conf and proxy files.
    pub files_ms: f64,
    /// From the start of applying to the end.
    pub total_ms: f64,
    /// What ran at the same time as this application (a restore's `criu restore`, a cold session's
    /// start-up); absent: nothing, the application was on the critical path by itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beside: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Resolver {
    pub listen: String,
    pub upstream: Vec<String>,
    pub pid: Option<i32>,
}

crate::record_type!(NetStatusType = "net_status");

/// What `drums-net show` prints for a session (docs/record.md, "Network status").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Status {
    pub drums: u32,
    #[serde(rename = "type")]
    pub record_type: NetStatusType,
    pub session: String,
    pub policy: Policy,
    pub uplink: Option<String>,
    /// Bytes and packets (`<name>_packets`) of the counters `bytes_out`, `bytes_in`, `conns_out` (packets
    /// of connections' first direction before a reply: `conns_out_packets` approximates connections
    /// opened) and `refused`, as the kernel counts them in the session's table (IP packets, headers
    /// included); null with `counters_null_reason` when there is no table (policy none) or it cannot be read.
    pub counters: Option<Map<String, Value>>,
    pub counters_null_reason: Option<String>,
    /// Unix time of the reading.
    pub at: f64,
}

crate::record_type!(NetAuditType = "net_audit");

/// What a line of the connection audit log tells (docs/record.md, "Connection audit log").
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// The session opened a connection its policy let through.
    Open,
    /// That connection ended (TCP: closed; others: expired from connection tracking), with its bytes.
    Close,
    /// The policy refused a packet (a connection attempt, or a datagram).
    Refused,
    /// The kernel dropped events before the auditor read them: connections may be missing from the log.
    Lost,
}

/// One line of a session's connection audit log (`<state_dir>/net-audit.jsonl`, written by the session's
/// auditor, `drums-net audit`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    pub drums: u32,
    #[serde(rename = "type")]
    pub record_type: NetAuditType,
    pub session: String,
    /// Unix time the auditor saw it.
    pub t: f64,
    pub event: Event,
    /// `tcp`, `udp`, `icmp`, or the IP protocol's number.
    pub proto: String,
    /// Destination address and port (as the session sent it, before any translation); port null for a
    /// protocol without ports.
    pub address: String,
    pub port: Option<u16>,
    /// The last name the session's resolver answered with this address; null: none did (a raw address).
    pub name: Option<String>,
    /// On `close`: when the connection opened (Unix time).
    pub opened_at: Option<f64>,
    /// On `close`: IP bytes the session sent and received on the connection (the kernel's conntrack
    /// accounting); on `refused`: 0, nothing passed; null on `open` and when the kernel gave none (then
    /// `bytes_null_reason`).
    pub bytes_out: Option<u64>,
    pub bytes_in: Option<u64>,
    pub bytes_null_reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn policies_parse_and_print() {
        assert_eq!(Policy::parse("none").unwrap(), Policy::None);
        assert_eq!(Policy::parse("internet").unwrap(), Policy::Internet);
        let p = Policy::parse("allow:Example.ORG, *.cdn.example.net,203.0.113.0/24,198.51.100.7").unwrap();
        assert_eq!(p.to_string(), "allow:example.org,*.cdn.example.net,203.0.113.0/24,198.51.100.7/32");
        assert_eq!(Policy::parse(&p.to_string()).unwrap(), p);
        for bad in ["all", "allow:", "allow:com", "allow:a*.example.org", "allow:10.0.0.1/8", "allow:1.2.3.4/33", "allow:exa mple.org"] {
            assert!(Policy::parse(bad).is_err(), "{bad}");
        }
        assert!(Cidr::parse("10.0.0.0/8").unwrap().contains("10.1.2.3".parse().unwrap()));
    }
}
