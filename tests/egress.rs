//! Sessions on the network under a policy (issue 26; drums(7), "Network boundary"), tried against a
//! stand-in internet of the test's own: a network namespace holding a web server and a DNS server on
//! documentation addresses (tests/data/standin.sh), joined to the host by the veth `dtup0` that sessions
//! are given as their uplink. No packet may leave this machine: before any session exists, the test checks
//! that the uplink's gateway is an address of its own namespace, and before a session sends anything, that
//! the routes of its packets and of its resolver's queries lead into that namespace; a failed check fails
//! the test without sending. The stand-in also answers on a private address (10.0.0.10) and on
//! 169.254.169.254, so a filter that fails shows as a request the stand-in logs, never as a packet leaving.

use drums::record::{Checkpoint, Session};
use drums_tests::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NETNS: &str = "drums-egress-standin";
const UPLINK: &str = "dtup0";
const GATEWAY: &str = "198.51.100.2";
const DNS: &str = "198.51.100.53";
const WEB: &str = "198.51.100.10";
const PAGE_TITLE: &str = "Stand-in page";
/// A refused connection fails at once: well under any connect timeout.
const FAST: f64 = 1.0;

struct StandIn {
    dir: PathBuf,
}

impl StandIn {
    fn up() -> StandIn {
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
    /// Requests for `/` the stand-in's web server has logged (what every refused request asks; a browser's
    /// later favicon request is not one).
    fn web_requests(&self) -> usize {
        std::fs::read_to_string(self.dir.join("web.log")).unwrap_or_default().lines().filter(|l| l.contains("\"GET / HTTP")).count()
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = Command::new(repo_root().join("tests/data/standin.sh")).args(["down", NETNS, UPLINK]).output();
    }
}

fn net_args(policy: &str) -> Vec<String> {
    ["--net", policy, "--uplink", &format!("{UPLINK}:{GATEWAY}"), "--dns", DNS].iter().map(|s| s.to_string()).collect()
}

/// Before session `s` sends anything: its packets, and its resolver's queries, are routed into the
/// stand-in, for every address the test uses (the refused ones too: if the filter failed, they would
/// reach the stand-in, not leave the machine).
fn check_routes(s: &Session) {
    let net = s.net.as_ref().expect("a net section");
    for dst in [WEB, DNS, "198.51.100.11", "198.51.100.12", "10.0.0.10", "169.254.169.254"] {
        let o = Command::new("ip").args(["route", "get", dst, "from", &net.session_addr, "iif", &net.host_if]).output().unwrap();
        let r = text(&o.stdout);
        assert!(r.contains(&format!("via {GATEWAY} dev {UPLINK}")), "{dst} from session {} is not routed into the stand-in (nothing was sent): {r}{}", s.id, text(&o.stderr));
    }
    let o = Command::new("ip").args(["route", "get", DNS, "from", &net.host_addr, "ipproto", "udp", "dport", "53"]).output().unwrap();
    assert!(text(&o.stdout).contains(&format!("via {GATEWAY} dev {UPLINK}")), "the resolver's queries are not routed into the stand-in (nothing was sent): {}", text(&o.stdout));
}

/// A cold session under `policy`, its routes checked before its desktop starts.
fn cold(policy: &str, guard: &mut Sessions) -> Session {
    let ov = run_ok("drums-overlay", &["create"], "");
    guard.add(&ov);
    let args = net_args(policy);
    let mut a: Vec<&str> = vec!["create"];
    a.extend(args.iter().map(String::as_str));
    let ns = run_ok("drums-ns", &a, &ov);
    guard.0.clear();
    guard.add(&ns);
    check_routes(&one(&ns));
    let cg = run_ok("drums-cgroup", &["create"], &ns);
    let desk = run_ok("drums-desktop", &["start"], &cg);
    guard.0.clear();
    guard.add(&desk);
    let ready = run_ok("drums-ready", &[], &desk);
    guard.0.clear();
    guard.add(&ready);
    one(&ready)
}

/// Restore one sibling of `ckpt` under `policy` (None: no --net) and check its routes.
fn sibling(ckpt: &str, policy: Option<&str>, guard: &mut Sessions) -> Session {
    let args = policy.map(net_args).unwrap_or_default();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let rec = run_ok("drums-restore", &a, ckpt);
    guard.add(&rec);
    let s: Session = one(&rec);
    if policy.is_some_and(|p| p != "none") {
        check_routes(&s);
    }
    s
}

const FETCH: &str = r#"
import sys, time, urllib.request
t = time.monotonic()
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10)
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

/// Fetch `url` from inside `s` as the session's root: (succeeded, seconds, what was printed).
fn fetch(s: &Session, url: &str) -> (bool, f64, String) {
    // The shared table as this version writes it: on a machine where older builds of Drums run too (other
    // worktrees), each reinstalls its own, without the mark that lets a policy's packets through.
    drums::net::ensure_firewall().unwrap();
    let o = Command::new(tool("drums-ns")).args(["exec", "--session", &s.id, "--", "python3", "-c", FETCH, url]).output().unwrap();
    let out = text(&o.stdout).trim().to_string();
    let mut f = out.split_whitespace();
    let ok = f.next() == Some("OK");
    let secs: f64 = f.next().and_then(|x| x.parse().ok()).unwrap_or_else(|| panic!("fetch {url} in {}: {out} {}", s.id, text(&o.stderr)));
    (ok, secs, out)
}

fn loads(s: &Session, url: &str) {
    let (ok, _, out) = fetch(s, url);
    let shared = text(&Command::new("nft").args(["list", "chain", "inet", "drums", "input"]).output().unwrap().stdout);
    assert!(ok && out.contains(PAGE_TITLE), "{url} did not load in {} ({:?}): {out}\nthe shared input chain now: {shared}", s.id, s.egress.as_ref().map(|e| e.policy.to_string()));
}

fn refused(s: &Session, url: &str) {
    let (ok, secs, out) = fetch(s, url);
    assert!(!ok, "{url} was reached from {} ({:?}): {out}", s.id, s.egress.as_ref().map(|e| e.policy.to_string()));
    assert!(secs < FAST, "{url} was refused from {} only after {secs} s (a hang, not a refusal): {out}", s.id);
}

fn does_not_resolve(s: &Session, url: &str) {
    let (ok, secs, out) = fetch(s, url);
    assert!(!ok && out.contains("Name or service not known"), "{url} resolved in {}: {out}", s.id);
    assert!(secs < FAST, "{url}: the lookup failed only after {secs} s: {out}");
}

/// Chromium in the session loads `url` and shows its title.
fn chromium_loads(s: &Session, url: &str) {
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
fn host_addresses() -> Vec<String> {
    let o = Command::new("ip").args(["-4", "-o", "addr", "show"]).output().unwrap();
    text(&o.stdout).lines().filter_map(|l| l.split_whitespace().nth(3)?.split('/').next().map(str::to_string)).filter(|a| !a.starts_with("127.")).collect()
}

fn table_of(s: &Session) -> String {
    let t = &s.egress.as_ref().expect("an egress section").nft_table;
    let o = Command::new("nft").args(["list", "table"]).args(t.split_whitespace()).output().unwrap();
    // Without counters' values and the resolved set's elements, which traffic changes.
    text(&o.stdout).lines().filter(|l| !l.trim_start().starts_with("packets ")).map(str::to_string).collect::<Vec<_>>().join("\n")
}

fn rules() -> String {
    text(&Command::new("ip").args(["-4", "rule", "show"]).output().unwrap().stdout)
}

/// Nothing of a session's egress state is left: its table, its rules, its routes, its resolver.
fn assert_egress_gone(slot: u32, state_dir: &Path) {
    assert!(!drums::net::egress::live_tables().contains(&slot), "table inet drums_net_{slot} left");
    let pref = drums::net::egress::rule_pref(slot);
    assert!(!rules().lines().any(|l| l.starts_with(&format!("{pref}:"))), "rules at {pref} left: {}", rules());
    let routes = text(&Command::new("ip").args(["route", "show", "table", &drums::net::egress::route_table(slot).to_string()]).output().unwrap().stdout);
    assert!(routes.trim().is_empty(), "routes left in table {}: {routes}", drums::net::egress::route_table(slot));
    let needle = state_dir.join("resolver.pid").display().to_string();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&cmd).contains(&needle), "a resolver of {} is still running: pid {:?}", state_dir.display(), e.file_name());
    }
}

#[test]
fn policies_in_cold_sessions_and_restored_siblings() {
    require_root();
    let _lock = session_lock();
    let standin = StandIn::up();
    let mut guard = Sessions::default();

    // internet, cold: by name from curl-like code and Chromium; everything always denied refused at once,
    // by name and by address, and none of it reaches the stand-in (which answers on those addresses).
    let cold_s = cold("internet", &mut guard);
    let cold_line = guard.0[0].clone();
    let e = cold_s.egress.as_ref().expect("an egress section under internet");
    assert_eq!((e.policy.to_string().as_str(), e.uplink.as_str()), ("internet", UPLINK));
    loads(&cold_s, "http://web.example.org/");
    let before = standin.web_requests();
    let host_end = &cold_s.net.as_ref().unwrap().host_addr;
    let mut denied: Vec<String> = ["private.example.org", "meta.example.org", "10.0.0.10", "169.254.169.254", "host.example.org", "198.51.100.1"].iter().map(|h| format!("http://{h}/")).collect();
    denied.push(format!("http://{host_end}/"));
    denied.extend(host_addresses().iter().map(|a| format!("http://{a}/")));
    for u in &denied {
        refused(&cold_s, u);
    }
    assert_eq!(standin.web_requests(), before, "a refused request reached the stand-in");

    // The checkpoint remembers the policy; siblings get the one they are restored under.
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &cold_line);
    let c: Checkpoint = one(&ckpt);
    let _dir = CheckpointDir(c.dir.clone());
    assert_eq!(c.source.net_policy.to_string(), "internet");

    // (After the checkpoint: the siblings' ready check expects the source's page.)
    chromium_loads(&cold_s, "http://web.example.org/");
    let sib = sibling(&ckpt, Some("internet"), &mut guard);
    let sib_line = run_ok("drums-ready", &[], &run_ok("drums-reseed", &[], &json(&sib)));
    let sib: Session = one(&sib_line);
    loads(&sib, "http://web.example.org/");
    chromium_loads(&sib, "http://web.example.org/");
    // Chromium may still fetch a favicon: counted once it is quiet.
    std::thread::sleep(Duration::from_millis(500));
    let before = standin.web_requests();
    for u in &denied {
        refused(&sib, u);
    }
    // Each session is refused the other, although both run a guest that answers the host.
    let guest = |s: &Session| s.desktop.as_ref().and_then(|d| d.guest_url.clone()).expect("a guest URL");
    refused(&sib, &guest(&cold_s));
    refused(&cold_s, &guest(&sib));
    assert_eq!(standin.web_requests(), before, "a refused request reached the stand-in");

    // An allow list: the name listed loads, another name does not resolve, its address does not connect;
    // `*.name` admits subdomains only.
    let allow = sibling(&ckpt, Some("allow:web.example.org,*.sub.example.net"), &mut guard);
    assert_eq!(allow.egress.as_ref().unwrap().policy.to_string(), "allow:web.example.org,*.sub.example.net");
    loads(&allow, "http://web.example.org/");
    does_not_resolve(&allow, "http://other.example.org/");
    refused(&allow, "http://198.51.100.11/");
    does_not_resolve(&allow, "http://x.web.example.org/");
    loads(&allow, "http://a.sub.example.net/");
    does_not_resolve(&allow, "http://sub.example.net/");
    refused(&allow, "http://10.0.0.10/");

    // none: nothing leaves, at once.
    let none = sibling(&ckpt, None, &mut guard);
    assert!(none.egress.is_none(), "a sibling restored without --net has policy none");
    refused(&none, "http://web.example.org/");
    refused(&none, &format!("http://{WEB}/"));

    // Accounting: a 100 MiB download, counted by the sibling's table within 5%.
    let big = 100 * 1024 * 1024;
    let (ok, secs, out) = fetch(&sib, "http://web.example.org/big.bin");
    assert!(ok && out.contains(&format!(" {big} ")), "the 100 MiB download failed: {out}");
    let counters = drums::net::egress::counters(sib.net.as_ref().unwrap().slot).expect("the sibling's counters");
    let bytes_in = counters["bytes_in"].as_u64().unwrap() as f64;
    let bytes_out = counters["bytes_out"].as_u64().unwrap() as f64;
    eprintln!("100 MiB in {secs} s; counted in {bytes_in} B, out {bytes_out} B, connections {}", counters["conns_out"]);
    assert!((bytes_in - big as f64).abs() / (big as f64) < 0.05, "bytes in {bytes_in} are not within 5% of {big}");
    assert!(bytes_out > 0.0 && bytes_out < big as f64 * 0.05, "bytes out {bytes_out}");

    // The attacker's side: session root tries to change its routes and addresses and to reach the host;
    // the host's table and rules for it stay as they were, and the refusals hold.
    let (table, rules_before) = (table_of(&sib), rules());
    let attack = "ip route del default; ip route add 10.0.0.0/8 dev eth0; ip addr add 10.77.255.254/30 dev eth0; ip link set eth0 address 02:00:00:00:00:01; nft flush ruleset; ip link add x type dummy; echo done";
    let o = Command::new(tool("drums-ns")).args(["exec", "--session", &sib.id, "--", "sh", "-c", attack]).output().unwrap();
    assert!(text(&o.stdout).contains("done"), "{}", text(&o.stderr));
    assert_eq!(table_of(&sib), table, "the session's table changed");
    assert_eq!(rules(), rules_before, "the host's rules changed");
    refused(&sib, "http://10.0.0.10/");
    refused(&sib, &format!("http://{host_end}/"));
    loads(&sib, "http://web.example.org/");

    // The uplink removed: nothing is reached, and the route is refused, never another one.
    let net = sib.net.clone().unwrap();
    let o = Command::new("ip").args(["link", "del", UPLINK]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = Command::new("ip").args(["route", "get", WEB, "from", &net.session_addr, "iif", &net.host_if]).output().unwrap();
    assert!(!o.status.success() || text(&o.stdout).contains("prohibit"), "with the uplink gone, {WEB} is still routed: {}", text(&o.stdout));
    refused(&sib, &format!("http://{WEB}/"));
    refused(&sib, "http://web.example.org/");

    // Destroyed: nothing of any session's egress state is left.
    let gone: Vec<(u32, PathBuf)> = [&cold_s, &sib, &allow].iter().map(|s| (s.net.as_ref().unwrap().slot, s.state_dir.clone())).collect();
    drop(guard);
    for (slot, dir) in gone {
        assert_egress_gone(slot, &dir);
    }
}

/// drums-ns create killed with SIGKILL at and after the moment its egress resource is ledgered: one
/// orphan sweep removes the table, rules, routes and resolver it may have made.
#[test]
fn killed_while_applying_a_policy_leaves_nothing() {
    require_root();
    let _lock = session_lock();
    let _standin = StandIn::up();
    for delay_ms in [0u64, 3, 10, 30, 100] {
        let mut owner = Command::new("sleep").arg("100000").stdin(Stdio::null()).spawn().unwrap();
        let ov = {
            let o = Command::new(tool("drums-overlay")).arg("create").env("PATH", path_with_tools()).env("DRUMS_OWNER", owner.id().to_string()).output().unwrap();
            assert!(o.status.success(), "{}", text(&o.stderr));
            text(&o.stdout)
        };
        let s: Session = one(&ov);
        let mut c = Command::new(tool("drums-ns"))
            .arg("create")
            .args(net_args("internet"))
            .env("PATH", path_with_tools())
            .env("DRUMS_OWNER", owner.id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(ov.as_bytes()).unwrap();
        let t0 = Instant::now();
        let ledger = s.state_dir.join("ledger.jsonl");
        while !std::fs::read_to_string(&ledger).unwrap_or_default().contains("\"kind\":\"egress\"") {
            if c.try_wait().unwrap().is_some() {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "drums-ns create never ledgered its egress");
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = c.kill();
        let _ = c.wait();
        let _ = owner.kill();
        let _ = owner.wait();
        let slot = drums::ledger::read_file(&ledger)
            .unwrap()
            .live()
            .iter()
            .find_map(|r| if let drums::ledger::Resource::Egress { slot, .. } = r { Some(*slot) } else { None })
            .expect("the egress resource in the ledger");
        let o = run("drums-sweep", &["--orphans", "--older-than", "0"], "");
        assert!(!text(&o.stdout).trim().is_empty(), "no sweep report: {}", text(&o.stderr));
        assert!(!s.state_dir.exists(), "killed after {delay_ms} ms: the sweep left {}: {}", s.state_dir.display(), text(&o.stdout));
        assert_egress_gone(slot, &s.state_dir);
    }
}

/// A policy table no ledger names (its ledger lost) is found and removed by the orphan sweep.
#[test]
fn unledgered_policy_tables_are_swept() {
    require_root();
    let _lock = session_lock();
    let slot = drums::net::POOL_SLOTS - 1;
    let t = drums::net::egress::table_name(slot);
    let mut child = Command::new("nft").args(["-f", "-"]).stdin(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(format!("table inet {t} {{\n  chain forward {{\n    type filter hook forward priority filter - 1; policy accept;\n  }}\n}}\n").as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    assert!(drums::net::egress::live_tables().contains(&slot));
    // First seen now: a sweep with no grace period removes it.
    let o = run("drums-sweep", &["--orphans", "--older-than", "0"], "");
    assert!(text(&o.stdout).contains(&t), "the sweep did not report {t}: {}", text(&o.stdout));
    assert!(!drums::net::egress::live_tables().contains(&slot), "{t} is still there after the sweep");
}

#[test]
fn policies_parse_and_bad_ones_are_usage_errors() {
    for bad in ["everything", "allow:", "allow:*", "allow:10.0.0.1/8"] {
        let o = run("drums-ns", &["create", "--net", bad], "");
        assert_eq!(o.status.code(), Some(2), "--net {bad}: {}", text(&o.stderr));
        assert!(error_record(&o.stderr).message.contains("network policy"), "{}", text(&o.stderr));
    }
    let o = run("drums-restore", &["--uplink", "drums7"], "");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// drums-net: a live session moved from none to internet to an allow list and back to none, each at once;
/// show reports the policy and counts what left.
#[test]
fn a_live_sessions_policy_changes_with_drums_net() {
    require_root();
    let _lock = session_lock();
    let _standin = StandIn::up();
    let mut guard = Sessions::default();
    let ov = run_ok("drums-overlay", &["create"], "");
    guard.add(&ov);
    let ns = run_ok("drums-ns", &["create"], &ov);
    guard.0.clear();
    guard.add(&ns);
    let s: Session = one(&ns);
    refused(&s, &format!("http://{WEB}/"));
    let show = |s: &Session| -> serde_json::Value { serde_json::from_str(run_ok("drums-net", &["show", "--session", &s.id], "").trim()).unwrap() };
    assert!(show(&s)["counters"].is_null(), "{}", show(&s));
    let mut a = vec!["set", "--session", s.id.as_str()];
    let args = net_args("internet");
    a.extend(args.iter().map(String::as_str));
    let s: Session = one(&run_ok("drums-net", &a, ""));
    check_routes(&s);
    loads(&s, "http://web.example.org/");
    let st = show(&s);
    assert_eq!(st["policy"], "internet", "{st}");
    assert!(st["counters"]["bytes_in"].as_u64().unwrap() > 0, "{st}");
    let args = net_args("allow:*.sub.example.net");
    let mut a = vec!["set", "--session", s.id.as_str()];
    a.extend(args.iter().map(String::as_str));
    let s: Session = one(&run_ok("drums-net", &a, ""));
    does_not_resolve(&s, "http://web.example.org/");
    loads(&s, "http://a.sub.example.net/");
    let s: Session = one(&run_ok("drums-net", &["set", "--session", &s.id, "--net", "none"], ""));
    assert!(s.egress.is_none());
    refused(&s, &format!("http://{WEB}/"));
    let (slot, dir) = (s.net.as_ref().unwrap().slot, s.state_dir.clone());
    assert_egress_gone(slot, &dir);
}
