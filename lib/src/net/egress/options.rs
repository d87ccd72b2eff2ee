//! A session's network options as an operator gives them (`--net`, `--uplink`, `--net-except`, `--dns`,
//! `--net-rate`, `--proxy`, or their environment variables): parsed and checked here, before anything is
//! made; `egress` makes them real on the host. Apart because this part needs no host and no root, and
//! every tool that makes sessions reads it (crate::cli::NetArgs).

use crate::error::{Error, IoContext, Result};
use crate::record::egress::{Cidr, Policy};
use std::net::Ipv4Addr;

/// The interface (and gateway) sessions' packets leave through.
#[derive(Debug, Clone, PartialEq)]
pub struct Uplink {
    pub ifname: String,
    pub gateway: Option<Ipv4Addr>,
}

impl Uplink {
    /// `IF` or `IF:GATEWAY`.
    pub fn parse(s: &str) -> Result<Uplink> {
        let (i, g) = match s.split_once(':') {
            Some((i, g)) => (i, Some(g.parse::<Ipv4Addr>().map_err(|_| Error::bad_input(format!("uplink `{s}`: `{g}` is not an IPv4 gateway address")))?)),
            None => (s, None),
        };
        if i.is_empty() || i.len() > 15 || i.contains('/') || i.starts_with(crate::state::NAME_PREFIX) {
            return Err(Error::bad_input(format!("uplink `{s}`: `{i}` is not an interface name sessions may leave through")));
        }
        Ok(Uplink { ifname: i.to_string(), gateway: g })
    }
    /// The host's IPv4 default route (/proc/net/route), the uplink when none is named.
    pub fn host_default() -> Result<Uplink> {
        let t = std::fs::read_to_string("/proc/net/route").ctx("read", "/proc/net/route")?;
        parse_default_route(&t).ok_or_else(|| Error::env("this host has no IPv4 default route: name the uplink sessions leave through (--uplink IF[:GW])"))
    }
}

fn parse_default_route(table: &str) -> Option<Uplink> {
    // Iface Destination Gateway Flags RefCnt Use Metric Mask ...; addresses little-endian hex.
    let mut best: Option<(u32, Uplink)> = None;
    for l in table.lines().skip(1) {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 8 || f[1] != "00000000" || f[7] != "00000000" {
            continue;
        }
        let gw = u32::from_str_radix(f[2], 16).ok()?;
        let metric: u32 = f[6].parse().unwrap_or(u32::MAX);
        let up = Uplink { ifname: f[0].to_string(), gateway: (gw != 0).then(|| Ipv4Addr::from(u32::from_be(gw))) };
        if best.as_ref().is_none_or(|b| metric < b.0) {
            best = Some((metric, up));
        }
    }
    best.map(|b| b.1)
}

/// A session's network options: drums-ns create, drums-restore and drums-pool fill take them
/// (`--net`, `--uplink`, `--net-except`, `--dns`), and each falls back to its environment variable.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub policy: Policy,
    /// None: the host's default route at the time the policy is applied.
    pub uplink: Option<Uplink>,
    pub except: Vec<Cidr>,
    /// The resolver's upstream servers; empty: the host's /etc/resolv.conf's IPv4 nameservers.
    pub dns: Vec<Ipv4Addr>,
    /// The bandwidth cap each way, bytes a second (`--net-rate`); None: no cap.
    pub rate: Option<u64>,
    /// The upstream HTTP proxy the session's browser and environment use (`--proxy`); None: none.
    pub proxy: Option<Proxy>,
}

/// An upstream HTTP proxy an operator names for sessions (`--proxy http://IPV4:PORT`): the session's
/// table lets its TCP connections to that address and port through (even into an always-denied range: a
/// proxy box on the LAN), and the session's Chromium and environment are pointed at it
/// (`egress::write_proxy_files`). What the proxy then fetches is the proxy's decision, not the policy's: an
/// allow list limits only the session's direct connections.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Proxy {
    pub addr: Ipv4Addr,
    pub port: u16,
}

impl Proxy {
    /// `http://IPV4:PORT` (a trailing `/` taken) or `IPV4:PORT`; `none`: no proxy. An address, not a name:
    /// the table admits an address, and a name would be resolved where the session cannot see it.
    pub fn parse(s: &str) -> Result<Option<Proxy>> {
        let t = s.trim();
        if t == "none" {
            return Ok(None);
        }
        let bad = |why: &str| Error::bad_input(format!("--proxy `{s}`: {why}"));
        let hp = t.strip_prefix("http://").unwrap_or(t).trim_end_matches('/');
        if hp.contains("://") {
            return Err(bad("only an http:// proxy is taken (it tunnels https with CONNECT)"));
        }
        let sa: std::net::SocketAddrV4 = hp.parse().map_err(|_| bad("expected http://IPV4:PORT (an IPv4 address, not a name) or none"))?;
        let a = *sa.ip();
        let o = a.octets();
        // Reached through the uplink, like everything a session opens: never the host's loopback, this
        // host's sessions, "this network", multicast or broadcast.
        if o[0] == 0 || o[0] == 127 || o[0] >= 224 || (o[0], o[1]) == (crate::net::POOL_BASE[0], crate::net::POOL_BASE[1]) || sa.port() == 0 {
            return Err(bad("not an address and port sessions can reach a proxy at (loopback, sessions' 10.77.0.0/16, 0.0.0.0/8, multicast and reserved ranges, port 0 are not)"));
        }
        Ok(Some(Proxy { addr: a, port: sa.port() }))
    }
    /// `http://IPV4:PORT`, as the record, Chromium's --proxy-server and http_proxy take it.
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.addr, self.port)
    }
    /// The environment a session's processes get: both spellings, since programs read one or the other;
    /// the session's own loopback is never proxied.
    pub fn env(&self) -> Vec<(String, String)> {
        let u = self.url();
        let mut v = vec![];
        for k in ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"] {
            v.push((k.to_string(), u.clone()));
        }
        for k in ["no_proxy", "NO_PROXY"] {
            v.push((k.to_string(), NO_PROXY.to_string()));
        }
        v
    }
}

/// What a session's processes reach without the proxy: their own loopback.
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// The smallest cap `--net-rate` takes: 1 KiB/s.
pub const MIN_RATE: u64 = 1024;

/// `--net-rate`: bytes a second, with K, M or G for 1024, 1024^2 or 1024^3; `none`: no cap.
pub fn parse_rate(s: &str) -> Result<Option<u64>> {
    let t = s.trim();
    if t == "none" {
        return Ok(None);
    }
    let bad = || Error::bad_input(format!("--net-rate `{s}` is not bytes a second (an integer, with K, M or G for 1024, 1024^2 or 1024^3) nor `none`"));
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let r = n.checked_mul(mult).ok_or_else(bad)?;
    if r < MIN_RATE {
        return Err(Error::bad_input(format!("--net-rate `{s}`: at least {MIN_RATE} bytes a second")));
    }
    Ok(Some(r))
}

impl Options {
    /// From the command line's values, each unset one from DRUMS_NET, DRUMS_UPLINK, DRUMS_NET_EXCEPT
    /// (comma-separated), DRUMS_NET_DNS (comma-separated), DRUMS_NET_RATE and DRUMS_NET_PROXY. A proxy
    /// under policy none is refused: nothing could reach it.
    pub fn from_args(net: Option<&str>, uplink: Option<&str>, except: &[String], dns: &[String], rate: Option<&str>, proxy: Option<&str>) -> Result<Options> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let list = |given: &[String], k: &str| -> Vec<String> {
            if given.is_empty() {
                env(k).map(|v| v.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect()).unwrap_or_default()
            } else {
                given.iter().flat_map(|g| g.split(',').map(|x| x.trim().to_string())).filter(|x| !x.is_empty()).collect()
            }
        };
        let policy = match net.map(str::to_string).or_else(|| env("DRUMS_NET")) {
            Some(p) => Policy::parse(&p)?,
            None => Policy::None,
        };
        let uplink = uplink.map(str::to_string).or_else(|| env("DRUMS_UPLINK")).map(|u| Uplink::parse(&u)).transpose()?;
        let except = list(except, "DRUMS_NET_EXCEPT").iter().map(|c| Cidr::parse(c)).collect::<Result<Vec<_>>>()?;
        let dns = list(dns, "DRUMS_NET_DNS")
            .iter()
            .map(|d| d.parse::<Ipv4Addr>().map_err(|_| Error::bad_input(format!("--dns `{d}` is not an IPv4 address"))))
            .collect::<Result<Vec<_>>>()?;
        let rate = match rate.map(str::to_string).or_else(|| env("DRUMS_NET_RATE")) {
            Some(r) => parse_rate(&r)?,
            None => None,
        };
        let proxy = match proxy.map(str::to_string).or_else(|| env("DRUMS_NET_PROXY")) {
            Some(p) => Proxy::parse(&p)?,
            None => None,
        };
        if let (Some(p), true) = (&proxy, policy.is_none()) {
            return Err(Error::bad_input(format!("--proxy {}: under network policy none nothing leaves the session, the proxy included (--net internet or --net allow:...)", p.url())));
        }
        Ok(Options { policy, uplink, except, dns, rate, proxy })
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_route_is_read() {
        let t = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
                 eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
                 eth1\t00000000\t0102A8C0\t0003\t0\t0\t50\t00000000\t0\t0\t0\n\
                 eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        assert_eq!(parse_default_route(t), Some(Uplink { ifname: "eth1".into(), gateway: Some("192.168.2.1".parse().unwrap()) }));
        assert!(Uplink::parse("drums5").is_err());
        assert_eq!(Uplink::parse("veth0:203.0.113.2").unwrap().gateway, Some("203.0.113.2".parse().unwrap()));
    }

    #[test]
    fn rates_are_bytes_a_second() {
        assert_eq!(parse_rate("8M").unwrap(), Some(8 << 20));
        assert_eq!(parse_rate("1500").unwrap(), Some(1500));
        assert_eq!(parse_rate("2g").unwrap(), Some(2 << 30));
        assert_eq!(parse_rate("none").unwrap(), None);
        for bad in ["", "8X", "-1", "100", "99999999999G", "M"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_proxy_is_an_address_and_port() {
        let p = Proxy::parse("http://10.0.0.10:3128/").unwrap().unwrap();
        assert_eq!(p.url(), "http://10.0.0.10:3128");
        assert_eq!(Proxy::parse("198.51.100.20:8080").unwrap().unwrap().url(), "http://198.51.100.20:8080");
        assert_eq!(Proxy::parse("none").unwrap(), None);
        for bad in ["", "proxy.example.org:3128", "https://10.0.0.10:3128", "socks5://10.0.0.10:1080", "10.0.0.10", "127.0.0.1:3128", "10.77.0.1:3128", "224.0.0.1:80", "10.0.0.10:0", "10.0.0.10:99999"] {
            assert!(Proxy::parse(bad).is_err(), "{bad}");
        }
        assert!(Options::from_args(None, None, &[], &[], None, Some("http://10.0.0.10:3128")).is_err_and(|e| e.to_string().contains("policy none")));
        assert_eq!(Options::from_args(Some("internet"), None, &[], &[], None, Some("10.0.0.10:3128")).unwrap().proxy, Some(p));
    }
}
