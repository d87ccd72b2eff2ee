//! Sessions on the network under a policy (issue 26; drums(7), "Network boundary"), tried against a
//! stand-in internet of the test's own: a network namespace holding a web server and a DNS server on
//! documentation addresses (tests/data/standin.sh), joined to the host by the veth `dtup0` that sessions
//! are given as their uplink. No packet may leave this machine: before any session exists, the test checks
//! that the uplink's gateway is an address of its own namespace, and before a session sends anything, that
//! the routes of its packets and of its resolver's queries lead into that namespace; a failed check fails
//! the test without sending. The stand-in also answers on a private address (10.0.0.10) and on
//! 169.254.169.254, so a filter that fails shows as a request the stand-in logs, never as a packet leaving.

#[path = "egress_common.rs"]
mod common;

use common::*;
use drums::record::{Checkpoint, Session};
use drums_tests::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn table_of(s: &Session) -> String {
    let t = &s.egress.as_ref().expect("an egress section").nft_table;
    let o = Command::new("nft").args(["list", "table"]).args(t.split_whitespace()).output().unwrap();
    // Without counters' values and the resolved set's elements, which traffic changes.
    text(&o.stdout).lines().filter(|l| !l.trim_start().starts_with("packets ")).map(str::to_string).collect::<Vec<_>>().join("\n")
}

/// The session's audit log (`net-audit.jsonl` in its state directory), read until `done` holds of it
/// (at most 10 s: the auditor writes as the kernel reports).
fn audit_until(s: &Session, done: impl Fn(&[serde_json::Value]) -> bool) -> Vec<serde_json::Value> {
    let path = s.state_dir.join(drums::net::audit::LOG_FILE);
    let t0 = Instant::now();
    loop {
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path).unwrap_or_default().lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: `{l}` is not JSON: {e}", path.display()))).collect();
        if done(&lines) {
            return lines;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{}'s audit log lacks what was expected: {lines:#?}", s.id);
        std::thread::sleep(Duration::from_millis(100));
    }
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
    // With host ids: checkpointed below.
    let cold_s = source("internet", &mut guard);
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

    // The audit log on the host: the page loaded (opened, then closed with its bytes) and the refusals,
    // each with the name the session's resolver gave.
    let web_closed = |a: &serde_json::Value| a["event"] == "close" && a["address"] == WEB && a["port"] == 80 && a["name"] == "web.example.org";
    let log = audit_until(&cold_s, |l| l.iter().any(web_closed));
    assert!(log.iter().any(|a| a["event"] == "open" && a["address"] == WEB && a["name"] == "web.example.org" && a["proto"] == "tcp"), "no open line for the page: {log:#?}");
    let closed = log.iter().find(|a| web_closed(a)).unwrap();
    assert!(closed["bytes_in"].as_u64().unwrap() > 100 && closed["bytes_out"].as_u64().unwrap() > 0 && closed["opened_at"].as_f64().unwrap() <= closed["t"].as_f64().unwrap(), "{closed}");
    for (addr, name) in [("10.0.0.10", Some("private.example.org")), ("169.254.169.254", None), ("198.51.100.1", None)] {
        let hit = |a: &serde_json::Value| a["event"] == "refused" && a["address"] == addr && a["port"] == 80 && a["bytes_in"] == 0 && name.is_none_or(|n| a["name"] == n);
        audit_until(&cold_s, |l| l.iter().any(hit));
    }
    assert!(log.iter().all(|a| a["session"] == cold_s.id.as_str() && a["drums"] == 1 && a["type"] == "net_audit"), "{log:#?}");

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
    let sample: serde_json::Value = serde_json::from_str(run_ok("drums-cgroup", &["watch", "--samples", "1"], &json(&none)).trim()).unwrap();
    assert!(sample["net_bytes_in"].is_null() && sample["why_null"]["net_bytes_in"].as_str().is_some_and(|w| w.contains("policy none")), "{sample}");

    // Accounting: a 100 MiB download, counted by the sibling's table within 5%.
    let big = 100 * 1024 * 1024;
    let (ok, secs, out) = fetch(&sib, "http://web.example.org/big.bin");
    assert!(ok && out.contains(&format!(" {big} ")), "the 100 MiB download failed: {out}");
    let slot = sib.net.as_ref().unwrap().slot;
    let listed_before = drums::net::egress::all_counters().expect("nft lists every table's counters");
    let counters = drums::net::egress::counters(slot).expect("the sibling's counters");
    // The listing of every table at once (the overview page's read) has the same counters, each between
    // a listing before and one after.
    let listed_after = drums::net::egress::all_counters().expect("nft lists every table's counters");
    let table = drums::net::egress::table_name(slot);
    let (before, after) = (&listed_before[&table], &listed_after[&table]);
    assert!(before.len() == counters.len() && after.len() == counters.len(), "{before:?} / {counters:?} / {after:?}");
    for (k, v) in &counters {
        let (b, v, a) = (before[k].as_u64().unwrap(), v.as_u64().unwrap(), after[k].as_u64().unwrap());
        assert!(b <= v && v <= a, "{k}: one listing {b}, the table alone {v}, the next listing {a}");
    }
    let bytes_in = counters["bytes_in"].as_u64().unwrap() as f64;
    let bytes_out = counters["bytes_out"].as_u64().unwrap() as f64;
    eprintln!("100 MiB in {secs} s; counted in {bytes_in} B, out {bytes_out} B, connections {}", counters["conns_out"]);
    assert!((bytes_in - big as f64).abs() / (big as f64) < 0.05, "bytes in {bytes_in} are not within 5% of {big}");
    assert!(bytes_out > 0.0 && bytes_out < big as f64 * 0.05, "bytes out {bytes_out}");
    // The same counts in the session's telemetry, and the download's connection in its audit log.
    let sample: serde_json::Value = serde_json::from_str(run_ok("drums-cgroup", &["watch", "--samples", "1"], &json(&sib)).trim()).unwrap();
    let tel_in = sample["net_bytes_in"].as_u64().unwrap_or_else(|| panic!("no net_bytes_in in the telemetry: {sample}")) as f64;
    assert!(tel_in >= bytes_in && (tel_in - big as f64).abs() / (big as f64) < 0.05, "telemetry's bytes in {tel_in} (counters {bytes_in}): {sample}");
    assert!(sample["net_bytes_out"].as_u64().unwrap() > 0 && sample["net_conns_out"].as_u64().unwrap() > 0, "{sample}");
    let big_closed = |a: &serde_json::Value| a["event"] == "close" && a["address"] == WEB && a["bytes_in"].as_u64().is_some_and(|b| b > big * 95 / 100);
    let log = audit_until(&sib, |l| l.iter().any(big_closed));
    let b = log.iter().find(|a| big_closed(a)).unwrap()["bytes_in"].as_u64().unwrap() as f64;
    assert!((b - big as f64).abs() / (big as f64) < 0.05, "the audit log's bytes in {b} are not within 5% of {big}");

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

    // The uplink back: its route does not come back by itself; `drums-net set` with the session's policy
    // puts it back (drums(7), "Network boundary").
    let _back = StandIn::up();
    let mut a = vec!["set", "--session", sib.id.as_str()];
    let args = net_args("internet");
    a.extend(args.iter().map(String::as_str));
    let sib: Session = one(&run_ok("drums-net", &a, ""));
    check_routes(&sib);
    loads(&sib, "http://web.example.org/");

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
    // A proxy that is not an address and port, or under policy none (nothing could reach it).
    for args in [&["--net", "internet", "--proxy", "proxy.example.org:3128"][..], &["--net", "internet", "--proxy", "127.0.0.1:3128"], &["--proxy", "http://10.0.0.10:3128"]] {
        let o = run("drums-ns", &[&["create"][..], args].concat(), "");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        assert!(error_record(&o.stderr).message.contains("--proxy"), "{}", text(&o.stderr));
    }
}

/// drums-net: a live session moved from none to internet to an allow list and back to none, each at once;
/// show reports the policy and counts what left.
#[test]
fn a_live_sessions_policy_changes_with_drums_net() {
    require_root();
    let _lock = session_lock();
    let _standin = StandIn::up();
    let mut guard = Sessions::default();
    let (_, s) = namespaces_with(vec![], &mut guard);
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

/// Drains the pool of a checkpoint when dropped.
struct Pool(String);
impl Drop for Pool {
    fn drop(&mut self) {
        let o = run_owned_tool("drums-pool", &["drain"], &self.0);
        if !o.status.success() {
            eprintln!("pool drain: {}{}", text(&o.stdout), text(&o.stderr));
        }
    }
}

/// A pool filled under a policy hands out sessions under that policy, whatever the checkpoint's (here
/// `none`): the taken sibling reaches the stand-in by name and is refused what the policy refuses.
#[test]
fn a_pool_filled_under_a_policy_hands_out_sessions_under_it() {
    require_root();
    let _lock = session_lock();
    let _standin = StandIn::up();
    let mut guard = Sessions::default();
    let (line, _) = source_session(&mut guard);
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &line);
    let c: Checkpoint = one(&ckpt);
    let _dir = CheckpointDir(c.dir.clone());
    assert_eq!(c.source.net_policy.to_string(), "none");
    let _pool = Pool(ckpt.clone());
    let args = net_args("internet");
    let mut a = vec!["fill", "--depth", "1"];
    a.extend(args.iter().map(String::as_str));
    let o = run_owned_tool("drums-pool", &a, &ckpt);
    assert!(o.status.success(), "pool fill: {}{}", text(&o.stdout), text(&o.stderr));
    let o = run_owned_tool("drums-pool", &["take", "--checkpoint", &c.id], "");
    assert!(o.status.success(), "pool take: {}", text(&o.stderr));
    guard.add(&text(&o.stdout));
    let s: Session = one(&text(&o.stdout));
    let e = s.egress.as_ref().unwrap_or_else(|| panic!("the taken sibling has no egress section: {}", json(&s)));
    assert_eq!((e.policy.to_string().as_str(), e.uplink.as_str()), ("internet", UPLINK));
    check_routes(&s);
    loads(&s, "http://web.example.org/");
    refused(&s, "http://10.0.0.10/");
    refused(&s, "http://meta.example.org/");
}

/// The set's elements now: address -> seconds until it expires.
fn resolved_expiry(s: &Session) -> std::collections::HashMap<String, u64> {
    let t = drums::net::egress::table_name(s.net.as_ref().unwrap().slot);
    let o = Command::new("nft").args(["-j", "list", "set", "inet", &t, "resolved"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("nft -j list set: {e}: {}", text(&o.stderr)));
    let mut m = std::collections::HashMap::new();
    for item in v["nftables"].as_array().unwrap() {
        for e in item["set"]["elem"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            m.insert(e["elem"]["val"].as_str().unwrap_or_else(|| panic!("an element with no expiry: {e}")).to_string(), e["elem"]["expires"].as_u64().unwrap());
        }
    }
    m
}

fn sleep_until(t: Instant) {
    if let Some(d) = t.checked_duration_since(Instant::now()) {
        std::thread::sleep(d);
    }
}

/// An allow list is enforced on addresses for as long as the resolver's answer is valid: an address is
/// let through for the answer's TTL, floored at TTL_FLOOR_S (60 s) and capped at TTL_CAP_S; once that
/// has passed, the raw address is refused again until the name is resolved again. The stand-in answers
/// short.example.org (198.51.100.11) with TTL 2 s and long.example.org (198.51.100.12) with 75 s.
#[test]
fn an_allow_lists_addresses_expire_with_the_answers_ttl() {
    require_root();
    let _lock = session_lock();
    let _standin = StandIn::up();
    let mut guard = Sessions::default();
    let (_, s) = namespaces_with(net_args("allow:short.example.org,long.example.org"), &mut guard);
    let (short_ip, long_ip) = ("http://198.51.100.11/", "http://198.51.100.12/");
    // Never resolved: refused.
    refused(&s, short_ip);
    refused(&s, long_ip);
    assert!(resolved_expiry(&s).is_empty(), "{:?}", resolved_expiry(&s));

    let t0 = Instant::now();
    loads(&s, "http://short.example.org/");
    loads(&s, "http://long.example.org/");
    let resolved = Instant::now();
    // The auditor raises the long answer's address from the floor to its TTL (at once, give or take its
    // reading the answer).
    let floor = drums::net::audit::TTL_FLOOR_S as u64;
    loop {
        let e = resolved_expiry(&s);
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e["198.51.100.11"] <= floor && e["198.51.100.11"] >= floor - 5, "TTL 2 s is floored at {floor} s: {e:?}");
        if e["198.51.100.12"] > floor {
            assert!(e["198.51.100.12"] <= 75, "{e:?}");
            break;
        }
        assert!(resolved.elapsed() < Duration::from_secs(3), "the long answer's address was not given its TTL: {e:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    loads(&s, short_ip);
    loads(&s, long_ip);

    // The floor passed (60 s after the short answer, which came after t0): its address is refused, the
    // long answer's still connects.
    sleep_until(t0 + Duration::from_secs(62));
    assert!(resolved.elapsed() < Duration::from_secs(74), "the test ran too slowly to tell the TTLs apart");
    refused(&s, short_ip);
    loads(&s, long_ip);
    // The long answer's TTL passed: refused too.
    sleep_until(resolved + Duration::from_secs(78));
    refused(&s, long_ip);
    assert!(resolved_expiry(&s).is_empty(), "{:?}", resolved_expiry(&s));
    // Resolved again: connects again.
    loads(&s, "http://short.example.org/");
    loads(&s, short_ip);
    refused(&s, long_ip);
}

/// A bandwidth cap (`--net-rate`) holds a download to it, and it is the cap that does: the same session
/// without it (drums-net set) downloads the same file faster than the cap.
#[test]
fn a_bandwidth_cap_holds_a_download_to_it() {
    require_root();
    let _lock = session_lock();
    let _standin = StandIn::up();
    let mut guard = Sessions::default();
    let cap: u64 = 8 << 20;
    let mut args = net_args("internet");
    args.extend(["--net-rate".to_string(), "8M".to_string()]);
    let (_, s) = namespaces_with(args, &mut guard);
    assert_eq!(s.egress.as_ref().unwrap().rate_bytes_s, Some(cap));
    let big = 100u64 * 1024 * 1024;
    let secs = |s: &Session| -> f64 {
        let (ok, secs, out) = fetch(s, "http://web.example.org/big.bin");
        assert!(ok && out.contains(&format!(" {big} ")), "the 100 MiB download failed: {out}");
        secs
    };
    let t = secs(&s);
    let dropped = drums::net::egress::counters(s.net.as_ref().unwrap().slot).unwrap()["rate_dropped"].as_u64().unwrap();
    // The kernel's bucket holds one second of the rate plus the burst (a quarter second's): at most
    // cap * (t + 1.25) bytes pass in t seconds, so 100 MiB take at least (100 MiB / cap) - 1.25 s.
    let least = big as f64 / cap as f64 - 1.25;
    eprintln!("capped at {cap} B/s: {t:.2} s ({:.0} B/s; at least {least:.2} s), {dropped} B dropped over the cap", big as f64 / t);
    assert!(t >= least * 0.98, "100 MiB in {t:.2} s under a cap of {cap} B/s (at least {least:.2} s)");
    assert!(dropped > 0, "nothing was dropped over the cap");

    let mut a = vec!["set", "--session", s.id.as_str()];
    let args = net_args("internet");
    a.extend(args.iter().map(String::as_str));
    let s: Session = one(&run_ok("drums-net", &a, ""));
    assert_eq!(s.egress.as_ref().unwrap().rate_bytes_s, None);
    let free = secs(&s);
    eprintln!("uncapped: {free:.2} s ({:.0} B/s)", big as f64 / free);
    assert!(free < least / 1.5, "without the cap the download took {free:.2} s: too slow here to show the cap of {cap} B/s");
}

/// An upstream proxy (`--proxy`, drums(7) "Network boundary"): the stand-in's proxy box on its private
/// address 10.0.0.10, port 3128. Under an allow list that names nothing the test fetches, the session's
/// direct connections are refused at once (the page's address, the proxy's address on another port) and
/// the page's name does not resolve; through the proxy, the session's environment (drums-ns exec), its
/// guest's commands and its desktop Chromium load the page, each request in the proxy's log. A sibling
/// restored with the proxy gets it too; one restored without it keeps none of it, nor does the session once
/// drums-net set takes the proxy away.
#[test]
fn a_session_reaches_the_stand_in_only_through_its_upstream_proxy() {
    require_root();
    let _lock = session_lock();
    let standin = StandIn::up();
    let mut guard = Sessions::default();
    let with_proxy = || {
        let mut a = net_args("allow:other.example.org");
        a.extend(["--proxy".to_string(), PROXY.to_string()]);
        a
    };
    // With host ids: checkpointed below.
    let s = source_with(with_proxy(), &mut guard);
    let cold_line = guard.0[0].clone();
    assert_eq!(s.egress.as_ref().unwrap().proxy.as_deref(), Some(PROXY), "{}", json(&s));
    let through = |what: &str| standin.proxy_requests().iter().filter(|l| l.ends_with(&format!(" GET http://web.example.org/?{what}"))).count();
    let cat = |s: &Session, f: &str| text(&Command::new(tool("drums-ns")).args(["exec", "--session", &s.id, "--", "cat", f]).output().unwrap().stdout);

    // Direct: refused, or not resolved, at once; nothing of it reaches the stand-in's web server.
    let before = standin.web_requests();
    refused(&s, &format!("http://{WEB}/"));
    refused(&s, "http://10.0.0.10/");
    does_not_resolve(&s, "http://web.example.org/");
    assert_eq!(standin.web_requests(), before, "a direct request reached the stand-in");

    // Through the proxy: the session's environment (its guest and Chromium below).
    loads(&s, "http://web.example.org/?exec");
    assert_eq!(through("exec"), 1, "the proxy did not log the request: {:?}", standin.proxy_requests());

    // Siblings: with the proxy, through it; without (policy internet), nothing of it is left and the page
    // is fetched directly.
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &cold_line);
    let c: Checkpoint = one(&ckpt);
    let _dir = CheckpointDir(c.dir.clone());
    let sib = sibling_with(&ckpt, with_proxy(), &mut guard);
    assert_eq!(sib.egress.as_ref().unwrap().proxy.as_deref(), Some(PROXY));
    refused(&sib, &format!("http://{WEB}/"));
    loads(&sib, "http://web.example.org/?sibling");
    assert_eq!(through("sibling"), 1, "{:?}", standin.proxy_requests());
    let plain = sibling(&ckpt, Some("internet"), &mut guard);
    assert_eq!(plain.egress.as_ref().unwrap().proxy, None);
    assert!(!cat(&plain, "/etc/profile.d/drums-proxy.sh").contains("export"), "{}", cat(&plain, "/etc/profile.d/drums-proxy.sh"));
    assert!(!cat(&plain, "/etc/chromium.d/drums-proxy").contains("--proxy-server"));
    loads(&plain, "http://web.example.org/?plain");
    assert_eq!(through("plain"), 0, "{:?}", standin.proxy_requests());
    // Under internet without the proxy, the proxy box on the LAN is refused like the rest of 10.0.0.0/8.
    let (ok, secs, out) = fetch_direct(&plain, &format!("{PROXY}/"));
    assert!(!ok && secs < FAST, "the proxy's address was reached without --proxy: {out}");

    // The cold session's guest and Chromium (after the checkpoint: the siblings' ready check expects the
    // source's page) go through the proxy too.
    let guest = s.desktop.as_ref().and_then(|d| d.guest_url.clone()).expect("a guest URL");
    let cmd = serde_json::json!({"command": ["python3", "-c", FETCH, "http://web.example.org/?guest"], "shell": false});
    let (status, body) = http("POST", &format!("{guest}/execute"), Some(&cmd), Duration::from_secs(30));
    assert!(status == 200 && body.contains("OK ") && body.contains(PAGE_TITLE), "the guest's command did not load the page: {status} {body}");
    assert_eq!(through("guest"), 1, "{:?}", standin.proxy_requests());
    chromium_loads(&s, "http://web.example.org/?chromium");
    assert!(through("chromium") >= 1, "Chromium's request is not in the proxy's log: {:?}", standin.proxy_requests());
    // Every Chromium started later in the session (Debian's wrapper, the images' google-chrome) and every
    // login shell reads the proxy from these.
    assert!(cat(&s, "/etc/chromium.d/drums-proxy").contains(&format!("--proxy-server={PROXY}")), "{}", cat(&s, "/etc/chromium.d/drums-proxy"));
    assert!(cat(&s, "/etc/profile.d/drums-proxy.sh").contains(&format!("export https_proxy={PROXY}")));

    // The proxy taken away from the live session (drums-net set without --proxy): its files say nothing,
    // its commands fetch directly, and the proxy box is refused like the rest of 10.0.0.0/8.
    let mut a = vec!["set", "--session", s.id.as_str()];
    let args = net_args("internet");
    a.extend(args.iter().map(String::as_str));
    let s: Session = one(&run_ok("drums-net", &a, ""));
    assert_eq!(s.egress.as_ref().unwrap().proxy, None);
    assert!(!cat(&s, "/etc/profile.d/drums-proxy.sh").contains("export") && !cat(&s, "/etc/chromium.d/drums-proxy").contains("--proxy-server"));
    loads(&s, "http://web.example.org/?unset");
    assert_eq!(through("unset"), 0, "{:?}", standin.proxy_requests());
    refused(&s, &format!("{PROXY}/"));
}

/// `--net-except`: a package mirror on the LAN (the stand-in's web server on its private address
/// 10.0.0.10) is reachable, by address and by name, with an exception for it; without, refused. The
/// exception opens only the network it names: the metadata address stays refused.
#[test]
fn an_exception_admits_a_lan_mirror_and_nothing_else() {
    require_root();
    let _lock = session_lock();
    let standin = StandIn::up();
    let mut guard = Sessions::default();
    let mut args = net_args("internet");
    args.extend(["--net-except".to_string(), "10.0.0.10/32".to_string()]);
    let (_, s) = namespaces_with(args, &mut guard);
    assert_eq!(s.egress.as_ref().unwrap().except, vec!["10.0.0.10/32".to_string()]);
    let before = standin.web_requests();
    loads(&s, "http://10.0.0.10/");
    loads(&s, "http://private.example.org/");
    assert_eq!(standin.web_requests(), before + 2, "the mirror's requests are not in the stand-in's log");
    refused(&s, "http://169.254.169.254/");
    refused(&s, "http://meta.example.org/");
    // The same session without the exception: refused.
    let mut a = vec!["set", "--session", s.id.as_str()];
    let args = net_args("internet");
    a.extend(args.iter().map(String::as_str));
    let s: Session = one(&run_ok("drums-net", &a, ""));
    assert!(s.egress.as_ref().unwrap().except.is_empty());
    refused(&s, "http://10.0.0.10/");
    refused(&s, "http://private.example.org/");
    loads(&s, "http://web.example.org/");
    assert_eq!(standin.web_requests(), before + 3, "a refused request reached the stand-in");
}

/// Clone hygiene under a policy (issue 26): two siblings of one checkpoint, restored under `internet` and
/// reseeded, each get their own address, MAC, table, policy rules and resolver (none of them the source's), and what
/// one sibling sends is counted by its own table alone: the other's counters stay at zero and its
/// resolver logs no query. The stand-in's web server sees each sibling from the uplink's address (NAT),
/// never from a session address.
#[test]
fn siblings_under_a_policy_have_their_own_addresses_tables_and_resolvers() {
    require_root();
    let _lock = session_lock();
    let standin = StandIn::up();
    let mut guard = Sessions::default();
    let src = source("internet", &mut guard);
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &guard.0[0].clone());
    let c: Checkpoint = one(&ckpt);
    let _dir = CheckpointDir(c.dir.clone());
    // Reseeded, as every sibling handed out is (drums-reseed: a sibling has its source's MAC until then).
    let a: Session = one(&run_ok("drums-reseed", &[], &json(&sibling(&ckpt, Some("internet"), &mut guard))));
    let b: Session = one(&run_ok("drums-reseed", &[], &json(&sibling(&ckpt, Some("internet"), &mut guard))));
    let (sn, an, bn) = (src.net.as_ref().unwrap(), a.net.as_ref().unwrap(), b.net.as_ref().unwrap());
    let (se, ae, be) = (src.egress.as_ref().unwrap(), a.egress.as_ref().unwrap(), b.egress.as_ref().unwrap());
    for (x, y, what) in [(an, bn, "a/b"), (an, sn, "a/source"), (bn, sn, "b/source")] {
        assert_ne!(x.session_addr, y.session_addr, "{what}: one address");
        assert_ne!(x.session_mac, y.session_mac, "{what}: one MAC");
        assert_ne!(x.slot, y.slot, "{what}: one slot");
    }
    for (x, y, what) in [(ae, be, "a/b"), (ae, se, "a/source"), (be, se, "b/source")] {
        assert_ne!(x.nft_table, y.nft_table, "{what}: one table");
        assert_ne!((x.route_table, x.rule_pref), (y.route_table, y.rule_pref), "{what}: one routing table");
        assert_ne!(x.resolver.listen, y.resolver.listen, "{what}: one resolver address");
        assert_ne!(x.resolver.pid, y.resolver.pid, "{what}: one resolver");
    }
    let counters = |s: &Session| drums::net::egress::counters(s.net.as_ref().unwrap().slot).expect("counters");
    let queries = |s: &Session| std::fs::read_to_string(s.state_dir.join(drums::net::egress::LOG_FILE)).unwrap_or_default().lines().filter(|l| l.contains("query[A] web.example.org")).count();
    let (b_in, b_out) = (counters(&b)["bytes_in"].as_u64().unwrap(), counters(&b)["bytes_out"].as_u64().unwrap());
    let b_queries = queries(&b);
    loads(&a, "http://web.example.org/");
    assert!(counters(&a)["bytes_in"].as_u64().unwrap() > 0 && queries(&a) >= 1, "a's own table and resolver did not see its request: {:?}", counters(&a));
    assert_eq!((counters(&b)["bytes_in"].as_u64().unwrap(), counters(&b)["bytes_out"].as_u64().unwrap()), (b_in, b_out), "b's counters moved with a's traffic");
    assert_eq!(queries(&b), b_queries, "b's resolver answered a's query");
    // The stand-in sees the uplink's address, not a session's.
    let log = std::fs::read_to_string(standin.dir.join("web.log")).unwrap_or_default();
    let last = log.lines().filter(|l| l.contains("\"GET / HTTP")).last().unwrap_or("").to_string();
    assert!(last.starts_with("198.51.100.1 "), "the stand-in saw {last}");
    for n in [an, bn, sn] {
        assert!(!log.contains(&n.session_addr), "the stand-in saw a session address {}: {log}", n.session_addr);
    }
}

/// A checkpoint of a session whose Chromium browsed over the network restores: the restore closes the
/// page's connections (CRIU --tcp-close), processes of the sibling that die of it right away are zombies
/// until their parent runs, and moving the sibling's processes into its cgroups skips them instead of
/// failing ("kept appearing outside its cgroups").
#[test]
fn a_checkpoint_taken_after_browsing_restores() {
    require_root();
    let _lock = session_lock();
    let _standin = StandIn::up();
    let mut guard = Sessions::default();
    let src = source("internet", &mut guard);
    chromium_loads(&src, "http://web.example.org/");
    // Connections open at the dump, the page's keep-alive among them.
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &guard.0[0].clone());
    let c: Checkpoint = one(&ckpt);
    let _dir = CheckpointDir(c.dir.clone());
    for _ in 0..2 {
        let sib = sibling(&ckpt, Some("internet"), &mut guard);
        assert!(sib.cgroup.is_some(), "the sibling runs under the default limits: {}", json(&sib));
        // Its page is the source's at the dump: the stand-in's, not the readiness page.
        let ready: Session = one(&run_ok("drums-ready", &["--title", PAGE_TITLE], &run_ok("drums-reseed", &[], &json(&sib))));
        loads(&ready, "http://web.example.org/");
        chromium_loads(&ready, "http://web.example.org/");
    }
}

/// What the loop below prints: one line per attempt, `T0 T1 ADDRESS RESULT` (Unix seconds before and
/// after the attempt; OK, or the errno's name). It connects to the stand-in's web server and to two
/// always-denied addresses the stand-in also answers on, as fast as it can (a 2 ms pause a round), and
/// ends after 20 requests to the web server went through.
const EARLY_LOOP: &str = r#"
import errno, socket, time
targets = [("198.51.100.10", "/early"), ("10.0.0.10", "/early-denied"), ("169.254.169.254", "/early-denied")]
ok = 0
while ok < 20:
    for a, path in targets:
        t0 = time.time()
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect((a, 80))
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: {a}\r\n\r\n".encode())
            s.recv(64)
            r = "OK"
            ok += a == "198.51.100.10"
        except OSError as e:
            r = errno.errorcode.get(e.errno, type(e).__name__) if e.errno else type(e).__name__
        finally:
            s.close()
        print(f"{t0:.6f} {time.time():.6f} {a} {r}", flush=True)
    time.sleep(0.002)
"#;

/// Holds one thread of another process stopped (ptrace) until dropped.
struct Held(i32);
impl Held {
    fn stop(tid: i32) -> Held {
        unsafe {
            let null = std::ptr::null_mut::<libc::c_void>();
            assert_eq!(libc::ptrace(libc::PTRACE_SEIZE, tid, null, null), 0, "seize thread {tid}: {}", std::io::Error::last_os_error());
            assert_eq!(libc::ptrace(libc::PTRACE_INTERRUPT, tid, null, null), 0, "interrupt thread {tid}: {}", std::io::Error::last_os_error());
            let mut st = 0;
            assert_eq!(libc::waitpid(tid, &mut st, libc::__WALL), tid, "wait for thread {tid}: {}", std::io::Error::last_os_error());
        }
        Held(tid)
    }
}
impl Drop for Held {
    fn drop(&mut self) {
        let null = std::ptr::null_mut::<libc::c_void>();
        unsafe { libc::ptrace(libc::PTRACE_DETACH, self.0, null, null) };
    }
}

fn comm(path: &Path) -> String {
    std::fs::read_to_string(path.join("comm")).unwrap_or_default().trim().to_string()
}

/// The restore applies a sibling's policy beside CRIU, fail-closed (drums(7), "Network boundary"), tried
/// from the attacker's side: a process of the checkpoint connects, as fast as it can, to the stand-in's web
/// server and to two always-denied addresses (where the stand-in answers too, so a leak would show as a
/// request it logs), from the moment CRIU resumes it. The thread that applies the policy is held stopped
/// (ptrace) from its start until 300 ms after CRIU has exited (or, should CRIU not be seen among the
/// restore's children, 5 s), so the sibling runs without its policy for that long. Until the policy is in place (`egress.applied_at`, taken before the sibling's route is made)
/// every attempt fails at once (no route), none hangs, nothing reaches the stand-in; afterwards the web
/// server is reached and the denied addresses are refused at once. The source runs under `none`, where the
/// loop sends nothing; the sibling's only way out is the uplink of its command line, the stand-in's own
/// link (checked by StandIn::up), which its policy routing holds alone, a `prohibit` after it.
#[test]
fn a_sibling_reaches_nothing_before_its_policy_is_in_place() {
    require_root();
    let _lock = session_lock();
    let standin = StandIn::up();
    let mut guard = Sessions::default();
    let src = source("none", &mut guard);
    let o = Command::new(tool("drums-ns")).args(["exec", "--detach", "--session", &src.id, "--log", "/root/early.log", "--", "python3", "-c", EARLY_LOOP]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::thread::sleep(Duration::from_millis(500));
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &guard.0[0].clone());
    let c: Checkpoint = one(&ckpt);
    let _dir = CheckpointDir(c.dir.clone());
    // Under none nothing left the source.
    assert!(!text(&Command::new(tool("drums-ns")).args(["exec", "--session", &src.id, "--", "cat", "/root/early.log"]).output().unwrap().stdout).contains(" OK"), "the source under none reached something");

    let started = drums::state::now();
    let mut restore = Command::new(tool("drums-restore"))
        .args(net_args("internet"))
        .env("PATH", path_with_tools())
        .env("DRUMS_OWNER", std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    restore.stdin.take().unwrap().write_all(ckpt.as_bytes()).unwrap();
    let proc_dir = PathBuf::from(format!("/proc/{}", restore.id()));
    // The policy's thread, stopped as soon as it shows.
    let t0 = Instant::now();
    let tid = loop {
        let found = std::fs::read_dir(proc_dir.join("task")).into_iter().flatten().flatten().find(|t| comm(&t.path()) == drums::net::egress::APPLY_THREAD);
        if let Some(t) = found {
            break t.file_name().to_str().unwrap().parse::<i32>().unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(60) && restore.try_wait().unwrap().is_none(), "drums-restore never started its policy's thread");
        std::thread::sleep(Duration::from_micros(200));
    };
    let held = Held::stop(tid);
    // CRIU (a child of the restore's thread for this sibling) runs, and exits (reaped, or a zombie while
    // that thread waits for the ledger): the sibling's processes run from then on.
    let criu = |state: Option<char>| {
        // Children of any of the restore's threads (a worker thread restores each sibling).
        let kids: String = std::fs::read_dir(proc_dir.join("task")).into_iter().flatten().flatten().map(|t| std::fs::read_to_string(t.path().join("children")).unwrap_or_default() + " ").collect();
        kids.split_whitespace().any(|k| {
            let p = PathBuf::from(format!("/proc/{k}"));
            let st = std::fs::read_to_string(p.join("stat")).unwrap_or_default();
            let zombie = st.rsplit_once(") ").and_then(|x| x.1.chars().next()) == Some('Z');
            // 'R': any state but a zombie's.
            comm(&p) == "criu" && state.is_none_or(|s| (s == 'Z') == zombie)
        })
    };
    // (Not seen at all within 5 s: it ran and was reaped before the thread was stopped.)
    let (t0, mut seen) = (Instant::now(), false);
    loop {
        let (running, zombie) = (criu(Some('R')), criu(Some('Z')));
        seen |= running;
        if zombie || (seen && !running) || (!seen && t0.elapsed() > Duration::from_secs(5)) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "CRIU never ended");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(300));
    let released = drums::state::now();
    drop(held);
    let o = restore.wait_with_output().unwrap();
    guard.add(&text(&o.stdout));
    assert!(o.status.success(), "drums-restore: {}", text(&o.stderr));
    let sib: Session = one(&text(&o.stdout));
    check_routes(&sib);
    let (e, times) = (sib.egress.as_ref().expect("an egress section"), &sib.restore.as_ref().unwrap().times);
    assert_eq!(e.apply_times.as_ref().unwrap().beside.as_deref(), Some("criu restore"), "{}", json(&sib));
    // The policy's thread was stopped until `released`, after CRIU had ended: it finished only then, and
    // the restore waited for it.
    assert!(e.applied_at >= released && times.egress_wait_s.is_some_and(|w| w > 0.0), "the restore did not wait for its held policy (released at {released}): {}", json(&sib));

    // The loop's lines from the sibling (after the restore started), once it is done.
    let t0 = Instant::now();
    let lines: Vec<(f64, f64, String, String)> = loop {
        let log = text(&Command::new(tool("drums-ns")).args(["exec", "--session", &sib.id, "--", "cat", "/root/early.log"]).output().unwrap().stdout);
        let lines: Vec<(f64, f64, String, String)> = log
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                Some((f.first()?.parse().ok()?, f.get(1)?.parse().ok()?, f.get(2)?.to_string(), f.get(3)?.to_string()))
            })
            .filter(|l| l.0 >= started)
            .collect();
        if lines.iter().filter(|l| l.2 == WEB && l.3 == "OK").count() >= 20 {
            break lines;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the sibling's loop did not get through to the stand-in: {log}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let before: Vec<_> = lines.iter().filter(|l| l.1 < e.applied_at).collect();
    let first_ok = lines.iter().find(|l| l.3 == "OK").unwrap();
    eprintln!(
        "{} attempts before the policy was in place ({} to the web server), all failed: {:?}; first success {:.3} s after applied_at; egress_s {:.3}, egress_wait_s {:.3}",
        before.len(),
        before.iter().filter(|l| l.2 == WEB).count(),
        before.iter().map(|l| l.3.as_str()).collect::<std::collections::BTreeSet<_>>(),
        first_ok.1 - e.applied_at,
        times.egress_s.unwrap_or(f64::NAN),
        times.egress_wait_s.unwrap_or(f64::NAN)
    );
    assert!(before.iter().filter(|l| l.2 == WEB).count() >= 3, "the sibling's loop did not try while its policy was held: {lines:?}");
    assert!(first_ok.1 >= e.applied_at && first_ok.2 == WEB, "{first_ok:?} got through before the policy was in place at {}", e.applied_at);
    for l in &lines {
        assert!(l.1 - l.0 < FAST, "an attempt hung instead of failing at once: {l:?}");
        assert!(l.2 == WEB || l.3 != "OK", "an always-denied address was reached: {l:?}");
    }
    for l in &before {
        assert!(l.3 == "ENETUNREACH", "before its policy the sibling had a route: {l:?}");
    }
    let web = std::fs::read_to_string(standin.dir.join("web.log")).unwrap_or_default();
    assert!(!web.contains("/early-denied"), "an always-denied request reached the stand-in: {web}");
}

/// The session's table sent to the kernel directly (drums::net::egress::create_table over
/// drums::net::nfbatch, what a policy commits) is the
/// table `nft -f` makes of its text, rule for rule, for both kinds of policy and every option, alone and
/// beside 50 other policy tables; a table left in the slot fails it (EEXIST) instead of being merged
/// into. Each way is timed 10 times alone and beside the 50 tables (printed as JSON; docs/benchmarks.md).
/// In a network namespace of the test's own (a thread that made it, and the `nft` it starts): nothing on
/// the host changes, nothing is sent.
#[test]
fn a_policy_table_sent_directly_is_the_table_nft_makes_of_its_text() {
    require_root();
    use drums::net::egress::{table_text, Proxy};
    use drums::net::egress::{create_table, CreateError};
    use drums::record::egress::{Cidr, Policy};
    let proxy = Proxy::parse("http://10.0.0.10:3128").unwrap();
    let cases = [
        (Policy::Internet, vec![], None, None),
        (Policy::parse("allow:example.org,*.cdn.example.net,203.0.113.0/24,198.51.100.0/24").unwrap(), vec![Cidr::parse("10.1.2.0/24").unwrap(), Cidr::parse("192.168.7.7/32").unwrap()], Some(8u64 << 20), proxy),
    ];
    std::thread::spawn(move || {
        assert_eq!(unsafe { libc::unshare(libc::CLONE_NEWNET) }, 0, "unshare: {}", std::io::Error::last_os_error());
        let nft = |input: &str| {
            let mut c = Command::new("nft").args(["-f", "-"]).stdin(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "nft -f: {}\n{input}", text(&o.stderr));
        };
        let list = |t: &str| text(&Command::new("nft").args(["list", "table", "inet", t]).output().unwrap().stdout);
        let us = |f: &mut dyn FnMut()| {
            let t = Instant::now();
            f();
            t.elapsed().as_micros() as u64
        };
        for (i, (policy, except, rate, proxy)) in cases.iter().enumerate() {
            let slot = 9;
            let t = drums::net::egress::table_name(slot);
            let text_of = |s: u32| table_text(s, policy, "up0", except, *rate, proxy.as_ref());
            let gone = || drums::net::nft::delete_table(&t).unwrap();
            let mut times: std::collections::BTreeMap<&str, Vec<u64>> = Default::default();
            for others in [false, true] {
                if others {
                    nft(&(100..150).map(text_of).collect::<String>());
                }
                nft(&text_of(slot));
                let want = list(&t);
                assert!(want.contains("chain egress") && want.contains("elements = {"), "case {i}: {want}");
                gone();
                create_table(slot, policy, "up0", except, *rate, proxy.as_ref()).unwrap_or_else(|e| panic!("case {i}: {e:?}"));
                assert_eq!(list(&t), want, "case {i}, beside other tables {others}: the batch made another table than nft of the text");
                assert!(matches!(create_table(slot, policy, "up0", except, *rate, proxy.as_ref()), Err(CreateError::Exists)), "case {i}: a second table of that name");
                assert_eq!(list(&t), want, "case {i}: the failed second batch changed the table");
                for _ in 0..10 {
                    gone();
                    // The transaction the tools committed before (nft lists every table's contents for it).
                    let text = format!("table inet {t} {{}}\ndelete table inet {t}\n{}", text_of(slot));
                    times.entry(if others { "nft_text_beside_50" } else { "nft_text_alone" }).or_default().push(us(&mut || nft(&text)));
                    gone();
                    times.entry(if others { "batch_beside_50" } else { "batch_alone" }).or_default().push(us(&mut || create_table(slot, policy, "up0", except, *rate, proxy.as_ref()).unwrap()));
                }
                gone();
            }
            let summary: Vec<String> = times
                .iter()
                .map(|(k, v)| {
                    let mut s = v.clone();
                    s.sort_unstable();
                    format!("\"{k}\": {{\"p50_us\": {}, \"n\": {}, \"us\": {v:?}}}", s[s.len() / 2], v.len())
                })
                .collect();
            eprintln!("{{\"case\": {i}, \"policy\": \"{policy}\", \"other_tables\": 50, {}}}", summary.join(", "));
            nft(&(100..150).map(|s| format!("delete table inet {}\n", drums::net::egress::table_name(s))).collect::<String>());
        }
    })
    .join()
    .unwrap();
}
