//! The network boundary attacked from inside sessions that may reach the internet (policy `internet`,
//! drums(7), "Network boundary"): from a cold session and from a restored sibling, as the desktop user and
//! as session root (through sudo, as an agent would), every address the policy always refuses is tried,
//! by name and by address (the host's addresses, the session's own host end, the other session, a private
//! address, 169.254.169.254), the session's routes, addresses and raw sockets are tried, and the host
//! sends forged frames out of the session's link with other sources. The stand-in internet
//! (tests/egress_common.rs) answers on the refused private and link-local addresses too, so a filter that
//! failed shows as a request it logged, never as a packet leaving the machine. Afterwards the host's
//! tables, rules and routes are as they were. (Under `none`: tests/firewall.rs and tests/escape.rs.)

#[path = "egress_common.rs"]
mod common;

use common::*;
use drums::record::{Checkpoint, Session};
use drums_tests::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Run in the session: each `HOST:PORT` argument is connected to and sent an HTTP request; one line each,
/// `HOST:PORT: refused SECONDS ERROR` or `HOST:PORT: ESCAPED ...`. Then, for session root's means of
/// changing where its packets go, `NAME: refused` or `NAME: ESCAPED`.
const ATTACK: &str = r#"
import socket, subprocess, sys, time
def out(name, r): print(f"{name}: {r}", flush=True)
for spec in sys.argv[1:]:
    host, port = spec.rsplit(":", 1)
    t = time.monotonic()
    try:
        s = socket.create_connection((host, int(port)), 5)
        s.sendall(b"GET / HTTP/1.0\r\nHost: attack\r\n\r\n")
        d = s.recv(64)
        out(spec, f"ESCAPED connected after {time.monotonic() - t:.3f} s: {d!r}")
    except OSError as e:
        out(spec, f"refused {time.monotonic() - t:.3f} {type(e).__name__} {e}")
for name, argv in [
    ("route default on-link", ["ip", "route", "replace", "default", "dev", "eth0"]),
    ("route 10/8", ["ip", "route", "add", "10.0.0.0/8", "dev", "eth0"]),
    ("address of the host", ["ip", "addr", "add", "198.51.100.1/32", "dev", "eth0"]),
    ("mac", ["ip", "link", "set", "eth0", "address", "02:00:00:00:00:01"]),
    ("nft", ["nft", "flush", "ruleset"]),
]:
    try:
        r = subprocess.run(argv, capture_output=True).returncode
        out(name, "refused" if r else "ESCAPED")
    except FileNotFoundError:
        out(name, "refused (no such program)")
for name, args in [("raw ip socket", (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)), ("packet socket", (socket.AF_PACKET, socket.SOCK_RAW, 0))]:
    try:
        socket.socket(*args)
        out(name, "ESCAPED")
    except OSError as e:
        out(name, f"refused ({e.strerror})")
"#;

fn attack(s: &Session, as_root: bool, targets: &[String]) -> Vec<String> {
    drums::net::ensure_firewall().unwrap();
    let run = if as_root { r#"echo password | sudo -S -p "" python3 -c "$ATTACK" "$@""# } else { r#"python3 -c "$ATTACK" "$@""# };
    let mut cmd = Command::new(tool("drums-ns"));
    cmd.args(["exec", "--session", &s.id, "--user", "user", "--env", &format!("ATTACK={ATTACK}"), "--", "sh", "-c", run, "sh"]);
    cmd.args(targets);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "the attack did not run in {}: {}{}", s.id, text(&o.stdout), text(&o.stderr));
    text(&o.stdout).lines().map(str::to_string).collect()
}

/// Send one UDP datagram to the stand-in's sink (198.51.100.10:9999) out of `s`'s link as a raw Ethernet
/// frame from inside its network namespace (what a session with CAP_NET_RAW could do; the host does it
/// here, since sessions lack that capability), with source address `src`.
fn send_forged(s: &Session, src: &str, payload: &str) {
    const SEND: &str = r#"
import socket, struct, sys
ifname, dmac, src, dst, payload = sys.argv[1:6]
def checksum(b):
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff)
    return ~(s + (s >> 16)) & 0xffff
data = payload.encode()
udp = struct.pack('!HHHH', 40000, 9999, 8 + len(data), 0) + data
ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, socket.inet_aton(src), socket.inet_aton(dst))
ip = ip[:10] + struct.pack('!H', checksum(ip)) + ip[12:]
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((ifname, 0))
sock.send(bytes.fromhex(dmac.replace(':', '')) + sock.getsockname()[4] + b'\x08\x00' + ip + udp)
"#;
    let net = s.net.as_ref().unwrap();
    let host_mac = std::fs::read_to_string(Path::new("/sys/class/net").join(&net.host_if).join("address")).unwrap();
    let init = s.ns.as_ref().unwrap().init_pid;
    let o = Command::new("nsenter").args([&format!("--net=/proc/{init}/ns/net"), "/usr/bin/python3", "-c", SEND, &net.session_if, host_mac.trim(), src, WEB, payload]).output().unwrap();
    assert!(o.status.success(), "sending from {}'s namespace: {}", s.id, text(&o.stderr));
}

#[test]
fn network_attacks_under_internet_from_a_cold_session_and_a_sibling() {
    require_root();
    let _lock = session_lock();
    let before_inventory = inventory();
    let standin = StandIn::up();
    let mut guard = Sessions::default();
    // With host ids: the checkpoint's source (its sibling has a user namespace of its own, the default).
    let cold_s = source("internet", &mut guard);
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &guard.0[0].clone());
    let c: Checkpoint = one(&ckpt);
    let ckpt_dir = CheckpointDir(c.dir.clone());
    let sib = sibling(&ckpt, Some("internet"), &mut guard);
    let sib: Session = one(&run_ok("drums-ready", &[], &run_ok("drums-reseed", &[], &json(&sib))));
    let slots: Vec<u32> = [&cold_s, &sib].iter().map(|s| s.net.as_ref().unwrap().slot).collect();

    // Both reach the stand-in: the refusals below are the policy's, not a dead network.
    loads(&cold_s, "http://web.example.org/");
    loads(&sib, "http://web.example.org/");
    std::thread::sleep(Duration::from_millis(300));
    let host_before = host_net_state(&slots);
    let web_before = standin.web_requests();

    let guest = |s: &Session| format!("{}:{}", s.net.as_ref().unwrap().session_addr, drums::desktop::GUEST_PORT);
    for (what, s, other) in [("cold session", &cold_s, &sib), ("restored sibling", &sib, &cold_s)] {
        let mut targets: Vec<String> =
            ["private.example.org:80", "meta.example.org:80", "host.example.org:80", "10.0.0.10:80", "169.254.169.254:80", "198.51.100.1:80", "198.51.100.1:22"].iter().map(|t| t.to_string()).collect();
        targets.extend(host_addresses().iter().flat_map(|a| [format!("{a}:80"), format!("{a}:22")]));
        targets.push(format!("{}:{}", s.net.as_ref().unwrap().host_addr, drums::desktop::GUEST_PORT));
        targets.push(guest(other));
        targets.push(format!("{}:80", other.net.as_ref().unwrap().host_addr));
        for as_root in [false, true] {
            let who = if as_root { "session root" } else { "user" };
            let lines = attack(s, as_root, &targets);
            let escaped: Vec<&String> = lines.iter().filter(|l| l.contains("ESCAPED")).collect();
            assert!(escaped.is_empty(), "{what}, as {who}: {escaped:#?}\nall: {lines:#?}");
            for t in &targets {
                let l = lines.iter().find(|l| l.starts_with(&format!("{t}: "))).unwrap_or_else(|| panic!("{what}, as {who}: no line for {t}: {lines:#?}"));
                let secs: f64 = l.split_whitespace().nth(2).and_then(|x| x.parse().ok()).unwrap_or(f64::MAX);
                assert!(secs < FAST, "{what}, as {who}: {t} was refused only after {secs} s (a hang, not a refusal): {l}");
            }
            for name in ["route default on-link", "route 10/8", "address of the host", "mac", "nft", "raw ip socket", "packet socket"] {
                assert!(lines.iter().any(|l| l.starts_with(&format!("{name}: refused"))), "{what}, as {who}: no refusal of {name}: {lines:#?}");
            }
        }
    }
    assert_eq!(standin.web_requests(), web_before, "a refused request reached the stand-in");

    // Forged sources out of the sibling's link: the other session's address, the host's uplink address, a
    // public address. None reaches the stand-in; the sibling's own address does (masqueraded to the host's).
    let cold_addr = cold_s.net.as_ref().unwrap().session_addr.clone();
    let forged = [(cold_addr.as_str(), "forged-other-session"), ("198.51.100.1", "forged-host"), ("198.51.100.99", "forged-public"), ("10.0.0.10", "forged-private")];
    for (src, payload) in forged {
        send_forged(&sib, src, payload);
    }
    send_forged(&sib, &sib.net.as_ref().unwrap().session_addr, "genuine");
    let t0 = std::time::Instant::now();
    while !standin.udp_received().iter().any(|l| l.ends_with(" genuine")) {
        assert!(t0.elapsed() < Duration::from_secs(5), "the sibling's genuine datagram never reached the stand-in: {:?}", standin.udp_received());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let got = standin.udp_received();
    assert!(!got.iter().any(|l| l.contains("forged")), "a forged datagram reached the stand-in: {got:?}");
    assert!(got.iter().any(|l| l == "198.51.100.1 genuine"), "the genuine datagram did not arrive masqueraded to the host's uplink address: {got:?}");

    assert_eq!(host_net_state(&slots), host_before, "the host's tables, rules or routes changed");
    drop(guard);
    drop(ckpt_dir);
    drop(standin);
    let left = inventory().new_since(&before_inventory);
    assert!(left.is_empty(), "left after destroy: {left:?}");
}
