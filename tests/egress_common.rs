//! Shared by the tests that put sessions on the network (tests/egress.rs, tests/escape_net.rs): the
//! stand-in internet (tests/data/standin.sh), the route checks that run before anything is sent, sessions
//! under a policy, and fetches from inside them.
#![allow(dead_code)]

use drums::record::Session;
use drums_tests::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub const NETNS: &str = "drums-egress-standin";
pub const UPLINK: &str = "dtup0";
pub const GATEWAY: &str = "198.51.100.2";
pub const DNS: &str = "198.51.100.53";
pub const WEB: &str = "198.51.100.10";
pub const PAGE_TITLE: &str = "Stand-in page";
/// A refused connection fails at once: well under any connect timeout.
pub const FAST: f64 = 1.0;

pub struct StandIn {
    pub dir: PathBuf,
}

impl StandIn {
    pub fn up() -> StandIn {
        let dir = std::env::temp_dir().join("drums-egress-standin");
        let script = repo_root().join("tests/data/standin.sh");
        let _ = Command::new(&script).args(["down", NETNS, UPLINK]).output();
        let o = Command::new(&script).args(["up", NETNS, UPLINK]).arg(&dir).output().unwrap();
        let s = StandIn { dir };
        assert!(o.status.success(), "the stand-in internet did not come up (dnsmasq-base, python3, iproute2 needed): {}", text(&o.stderr));
        // Nothing may leave the machine: the gateway sessions are routed to is the stand-in's own address,
        // reached through the stand-in's own link.
        let addrs = text(&Command::new("ip").args(["-n", NETNS, "-4", "-o", "addr", "show"]).output().unwrap().stdout);
        for a in [GATEWAY, WEB, DNS, "10.0.0.10", "169.254.169.254"] {
            assert!(addrs.contains(&format!(" {a}/")), "the stand-in namespace lacks {a}: {addrs}");
        }
        let r = text(&Command::new("ip").args(["route", "get", GATEWAY]).output().unwrap().stdout);
        assert!(r.contains(&format!("dev {UPLINK}")), "the gateway {GATEWAY} is not reached through {UPLINK} (nothing was sent): {r}");
        s
    }
    /// Datagrams the stand-in's UDP sink (198.51.100.10:9999) received: "SOURCE PAYLOAD" lines.
    pub fn udp_received(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("udp.log")).unwrap_or_default().lines().map(str::to_string).collect()
    }
    /// Requests for `/` the stand-in's web server has logged (what every refused request asks; a browser's
    /// later favicon request is not one).
    pub fn web_requests(&self) -> usize {
        std::fs::read_to_string(self.dir.join("web.log")).unwrap_or_default().lines().filter(|l| l.contains("\"GET / HTTP")).count()
    }
    /// The proxy's log (tests/data/standin-proxy.py): "CLIENT METHOD TARGET" lines.
    pub fn proxy_requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("proxy.log")).unwrap_or_default().lines().map(str::to_string).collect()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("tests/data/standin.sh")).args(["down", NETNS, UPLINK]).output();
    }
}

pub fn net_args(policy: &str) -> Vec<String> {
    ["--net", policy, "--uplink", &format!("{UPLINK}:{GATEWAY}"), "--dns", DNS].iter().map(|s| s.to_string()).collect()
}

/// Before session `s` sends anything: its packets, and its resolver's queries, are routed into the
/// stand-in, for every address the test uses (the refused ones too: if the filter failed, they would
/// reach the stand-in, not leave the machine).
pub fn check_routes(s: &Session) {
    let net = s.net.as_ref().expect("a net section");
    for dst in [WEB, DNS, "198.51.100.11", "198.51.100.12", "10.0.0.10", "169.254.169.254"] {
        let o = Command::new("ip").args(["route", "get", dst, "from", &net.session_addr, "iif", &net.host_if]).output().unwrap();
        let r = text(&o.stdout);
        assert!(r.contains(&format!("via {GATEWAY} dev {UPLINK}")), "{dst} from session {} is not routed into the stand-in (nothing was sent): {r}{}", s.id, text(&o.stderr));
    }
    let o = Command::new("ip").args(["route", "get", DNS, "from", &net.host_addr, "ipproto", "udp", "dport", "53"]).output().unwrap();
    assert!(text(&o.stdout).contains(&format!("via {GATEWAY} dev {UPLINK}")), "the resolver's queries are not routed into the stand-in (nothing was sent): {}", text(&o.stdout));
}

/// The stand-in's upstream proxy (tests/data/standin-proxy.py): on its private address, a proxy box on
/// the LAN; its requests are logged in proxy.log.
pub const PROXY: &str = "http://10.0.0.10:3128";

/// A cold session under `policy`, its routes checked before its desktop starts.
pub fn cold(policy: &str, guard: &mut Sessions) -> Session {
    cold_with(net_args(policy), guard)
}

/// A cold session made with the network options `args` (net_args and more), in a user namespace of its own
/// (the default).
pub fn cold_with(args: Vec<String>, guard: &mut Sessions) -> Session {
    made_with(&[], args, guard)
}

/// A cold session under `policy` to be checkpointed: with host ids (drums-overlay create --host-ids), as
/// drums-ckpt needs.
pub fn source(policy: &str, guard: &mut Sessions) -> Session {
    source_with(net_args(policy), guard)
}

/// `source` with the network options `args`.
pub fn source_with(args: Vec<String>, guard: &mut Sessions) -> Session {
    made_with(&["--host-ids"], args, guard)
}

fn made_with(overlay_args: &[&str], args: Vec<String>, guard: &mut Sessions) -> Session {
    let (ns, _) = namespaces_made_with(overlay_args, args, guard);
    let cg = run_ok("drums-cgroup", &["create"], &ns);
    let desk = run_ok("drums-desktop", &["start"], &cg);
    guard.0.clear();
    guard.add(&desk);
    let ready = run_ok("drums-ready", &[], &desk);
    guard.0.clear();
    guard.add(&ready);
    one(&ready)
}

/// A session's overlay and namespaces only (no desktop), made with the network options `args`: its
/// record line and the record, its routes checked under a policy.
pub fn namespaces_with(args: Vec<String>, guard: &mut Sessions) -> (String, Session) {
    namespaces_made_with(&[], args, guard)
}

fn namespaces_made_with(overlay_args: &[&str], args: Vec<String>, guard: &mut Sessions) -> (String, Session) {
    let ov = run_ok("drums-overlay", &[&["create"][..], overlay_args].concat(), "");
    guard.add(&ov);
    let mut a: Vec<&str> = vec!["create"];
    a.extend(args.iter().map(String::as_str));
    let ns = run_ok("drums-ns", &a, &ov);
    guard.0.clear();
    guard.add(&ns);
    let s: Session = one(&ns);
    if s.egress.is_some() {
        check_routes(&s);
    }
    (ns, s)
}

/// Restore one sibling of `ckpt` under `policy` (None: no --net) and check its routes.
pub fn sibling(ckpt: &str, policy: Option<&str>, guard: &mut Sessions) -> Session {
    sibling_with(ckpt, policy.map(net_args).unwrap_or_default(), guard)
}

/// Restore one sibling of `ckpt` with the network options `args` and check its routes (under a policy).
pub fn sibling_with(ckpt: &str, args: Vec<String>, guard: &mut Sessions) -> Session {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let rec = run_ok("drums-restore", &a, ckpt);
    guard.add(&rec);
    let s: Session = one(&rec);
    if s.egress.is_some() {
        check_routes(&s);
    }
    s
}

/// Fetch argv[1]: through the proxy the environment names (http_proxy, a session's upstream proxy) unless
/// argv[2] is `direct`.
pub const FETCH: &str = r#"
import sys, time, urllib.request
t = time.monotonic()
try:
    handlers = [urllib.request.ProxyHandler({})] if sys.argv[2:] == ["direct"] else []
    r = urllib.request.build_opener(*handlers).open(sys.argv[1], timeout=10)
    n, head = 0, b""
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        if n < 200:
            head += b[:200]
        n += len(b)
    print(f"OK {time.monotonic() - t:.3f} {n} {head[:200]!r}")
except Exception as e:
    print(f"ERR {time.monotonic() - t:.3f} {type(e).__name__} {e}")
"#;

/// Fetch `url` from inside `s` as the session's root, through its upstream proxy when it has one:
/// (succeeded, seconds, what was printed).
pub fn fetch(s: &Session, url: &str) -> (bool, f64, String) {
    fetch_how(s, url, false)
}

/// `fetch` without any proxy: a direct connection from the session.
pub fn fetch_direct(s: &Session, url: &str) -> (bool, f64, String) {
    fetch_how(s, url, true)
}

fn fetch_how(s: &Session, url: &str, direct: bool) -> (bool, f64, String) {
    // The shared table as this version writes it: on a machine where older builds of Drums run too (other
    // worktrees), each reinstalls its own, without the mark that lets a policy's packets through.
    drums::net::ensure_firewall().unwrap();
    let o = Command::new(tool("drums-ns")).args(["exec", "--session", &s.id, "--", "python3", "-c", FETCH, url]).args(direct.then_some("direct")).output().unwrap();
    let out = text(&o.stdout).trim().to_string();
    let mut f = out.split_whitespace();
    let ok = f.next() == Some("OK");
    let secs: f64 = f.next().and_then(|x| x.parse().ok()).unwrap_or_else(|| panic!("fetch {url} in {}: {out} {}", s.id, text(&o.stderr)));
    (ok, secs, out)
}

pub fn loads(s: &Session, url: &str) {
    let (ok, _, out) = fetch(s, url);
    let shared = text(&Command::new("nft").args(["list", "chain", "inet", "drums", "input"]).output().unwrap().stdout);
    assert!(ok && out.contains(PAGE_TITLE), "{url} did not load in {} ({:?}): {out}\nthe shared input chain now: {shared}", s.id, s.egress.as_ref().map(|e| e.policy.to_string()));
}

/// A direct connection to `url` is refused at once (a session's upstream proxy aside).
pub fn refused(s: &Session, url: &str) {
    let (ok, secs, out) = fetch_direct(s, url);
    assert!(!ok, "{url} was reached from {} ({:?}): {out}", s.id, s.egress.as_ref().map(|e| e.policy.to_string()));
    assert!(secs < FAST, "{url} was refused from {} only after {secs} s (a hang, not a refusal): {out}", s.id);
}

pub fn does_not_resolve(s: &Session, url: &str) {
    let (ok, secs, out) = fetch_direct(s, url);
    assert!(!ok && out.contains("Name or service not known"), "{url} resolved in {}: {out}", s.id);
    assert!(secs < FAST, "{url}: the lookup failed only after {secs} s: {out}");
}

/// Chromium in the session loads `url` and shows its title.
pub fn chromium_loads(s: &Session, url: &str) {
    let (ns, desktop) = (s.ns.as_ref().unwrap(), s.desktop.as_ref().unwrap());
    drums::net::ensure_firewall().unwrap();
    let mut c = drums::cdp::Cdp::connect(ns.init_pid, desktop.devtools_port, std::time::Instant::now() + Duration::from_secs(10)).unwrap();
    let (_, page) = c.attach_page().unwrap();
    c.call(Some(&page), "Page.navigate", serde_json::json!({"url": url})).unwrap();
    let t0 = Instant::now();
    loop {
        let title = c.eval(&page, "document.title").unwrap_or_default();
        if title == PAGE_TITLE {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "Chromium in {} did not load {url}: title {title}", s.id);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The host's IPv4 addresses (every one must be refused to a session).
pub fn host_addresses() -> Vec<String> {
    let o = Command::new("ip").args(["-4", "-o", "addr", "show"]).output().unwrap();
    text(&o.stdout).lines().filter_map(|l| l.split_whitespace().nth(3)?.split('/').next().map(str::to_string)).filter(|a| !a.starts_with("127.")).collect()
}


/// The host's network state that sessions in `slots` must not change: the shared table `inet drums` and
/// their own tables (counter values and the `resolved` sets' elements aside, which traffic changes),
/// their policy rules and routing tables, and the main routing table.
pub fn host_net_state(slots: &[u32]) -> String {
    let mut tables = vec!["drums".to_string()];
    tables.extend(slots.iter().map(|s| drums::net::egress::table_name(*s)));
    let mut kept = vec![];
    for t in &tables {
        let o = Command::new("nft").args(["list", "table", "inet", t]).output().unwrap();
        let mut in_resolved = false;
        for l in text(&o.stdout).lines().chain(text(&o.stderr).lines()) {
            let t = l.trim();
            if t.starts_with("set resolved") {
                in_resolved = true;
            }
            if in_resolved {
                in_resolved = t != "}";
                continue;
            }
            if t.starts_with("packets ") {
                continue;
            }
            let mut words: Vec<&str> = t.split_whitespace().collect();
            if let Some(i) = words.iter().position(|w| *w == "packets") {
                if words.get(i + 2) == Some(&"bytes") {
                    words.drain(i..(i + 4).min(words.len()));
                }
            }
            kept.push(words.join(" "));
        }
    }
    let rules = text(&Command::new("ip").args(["-4", "rule", "show"]).output().unwrap().stdout);
    let prefs: Vec<String> = slots.iter().map(|s| format!("{}:", drums::net::egress::rule_pref(*s))).collect();
    kept.extend(rules.lines().filter(|l| prefs.iter().any(|p| l.starts_with(p.as_str()))).map(str::to_string));
    let mut route_tables = vec!["main".to_string()];
    route_tables.extend(slots.iter().map(|s| drums::net::egress::route_table(*s).to_string()));
    // Other sessions' links (anyone's, made meanwhile) aside.
    let ours: Vec<String> = slots.iter().map(|s| format!("dev {} ", drums::net::host_if_name(*s))).collect();
    for t in route_tables {
        kept.push(format!("--- routes {t}"));
        let routes = text(&Command::new("ip").args(["-4", "route", "show", "table", &t]).output().unwrap().stdout);
        kept.extend(routes.lines().filter(|l| !l.contains("dev drums") || ours.iter().any(|o| l.contains(o.as_str()))).map(str::to_string));
    }
    kept.join("\n")
}
