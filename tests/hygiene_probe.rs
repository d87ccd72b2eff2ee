//! The clone-hygiene probe shared by the restore and pool tests: what two siblings of one checkpoint
//! must share without drums-reseed and must not share with it.

//!
//! The functions take a session's (and a checkpoint's) record as its record type. What the guest and the
//! browser answer (OSWorld's HTTP protocol, Chromium's DevTools protocol) is not a Drums record and stays
//! JSON.

use crate::{http, json as record_json, text, tool};
use drums::cdp::Cdp;
use drums::record::{Checkpoint, Session};
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

/// Run a shell script inside a session; its trimmed output.
pub fn inside(rec: &Session, script: &str) -> String {
    let o = Command::new(tool("drums-ns")).args(["exec", "--session", &rec.id, "--", "sh", "-c", script]).output().unwrap();
    assert!(o.status.success(), "{script}: {}", text(&o.stderr));
    text(&o.stdout).trim().to_string()
}

/// A request to the session's guest; the JSON answer (or the text as a JSON string).
pub fn guest(rec: &Session, method: &str, path: &str, body: Option<Value>) -> Value {
    let url = format!("{}{path}", rec.desktop.as_ref().and_then(|d| d.guest_url.as_deref()).expect("guest_url"));
    let (status, body) = http(method, &url, body.as_ref(), Duration::from_secs(10));
    assert_eq!(status, 200, "{method} {url}: {body}");
    serde_json::from_str(&body).unwrap_or(Value::String(body))
}

/// A DevTools connection to the session's browser, attached to its page.
pub fn cdp(rec: &Session) -> (Cdp, String) {
    let (ns, desktop) = (rec.ns.as_ref().expect("an ns section"), rec.desktop.as_ref().expect("a desktop section"));
    let mut c = Cdp::connect(ns.init_pid, desktop.devtools_port, std::time::Instant::now() + Duration::from_secs(10)).unwrap();
    let (_, page) = c.attach_page().unwrap();
    (c, page)
}

/// Before the checkpoint: a Python process that answers with its next random number when asked (through
/// /tmp/ask and /tmp/answer), and a cookie in the browser.
pub fn prepare_source(src: &Session) {
    let py = "import os, random, time\nwhile True:\n    if os.path.exists('/tmp/ask'):\n        os.remove('/tmp/ask')\n        open('/tmp/answer', 'w').write(repr(random.random()))\n    time.sleep(0.02)\n";
    let o = Command::new(tool("drums-ns"))
        .args(["exec", "--session", &src.id, "--detach", "--log", "/tmp/py.log", "--", "/usr/bin/python3", "-c", py])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (mut c, page) = cdp(src);
    c.call(Some(&page), "Network.setCookie", json!({"name": "drums", "value": "secret-pre-checkpoint", "url": "http://drums.test/"})).unwrap();
    std::thread::sleep(Duration::from_millis(300));
}

/// What the clone-hygiene test compares between two siblings.
#[derive(Debug, PartialEq)]
pub struct Probe {
    pub hostname: String,
    pub mac: String,
    pub guest_rng: String,
    pub python_random: String,
    pub math_random: Value,
    pub cookie: Option<String>,
    pub new_context_id: String,
    /// The browser process's wipe-on-fork page (BoringSSL's fork-detection and buffered state), read
    /// before the new context was made.
    pub browser_wf_page: Vec<u8>,
}

/// The bytes of the browser process's MADV_WIPEONFORK ranges, as the checkpoint recorded them.
pub fn browser_wf_bytes(s: &Session, ckpt: &Checkpoint) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let desktop = s.desktop.as_ref().expect("a desktop section");
    let browser = desktop.processes.iter().find(|p| p.role == "chromium").unwrap_or_else(|| panic!("no chromium in {}", record_json(desktop)));
    let ns_pid = browser.pid;
    let host = drums::ns::host_pid_of(s.ns.as_ref().expect("an ns section").inodes.pid, ns_pid).expect("browser process");
    let mem = std::fs::File::open(format!("/proc/{host}/mem")).unwrap();
    let mut out = vec![];
    for w in ckpt.wipe.iter().filter(|w| w.pid == ns_pid) {
        let (a, b) = (w.start, w.end);
        let mut buf = vec![0u8; (b - a) as usize];
        mem.read_exact_at(&mut buf, a).unwrap();
        out.extend(buf);
    }
    assert!(!out.is_empty(), "the checkpoint recorded no wipe-on-fork range for the browser process");
    out
}

/// Probe one sibling of the checkpoint `ckpt` (its record).
pub fn probe(s: &Session, ckpt: &Checkpoint) -> Probe {
    let browser_wf_page = browser_wf_bytes(s, ckpt);
    let hostname = inside(s, "hostname");
    let mac = inside(s, "ip -o link show eth0 | sed 's/.*link\\/ether \\([^ ]*\\).*/\\1/'");
    let guest_rng = guest(s, "GET", "/drums/rng", None)["fingerprint"].as_str().unwrap().to_string();
    inside(s, "rm -f /tmp/answer; touch /tmp/ask; for i in $(seq 100); do [ -s /tmp/answer ] && break; sleep 0.05; done");
    let python_random = inside(s, "cat /tmp/answer");
    let (mut c, page) = cdp(s);
    let math_random = c.eval(&page, "[Math.random(), Math.random(), Math.random()]").unwrap();
    let cookies = c.call(None, "Storage.getCookies", json!({})).unwrap();
    let cookie = cookies["cookies"].as_array().unwrap().iter().find(|k| k["name"] == "drums").map(|k| k["value"].as_str().unwrap().to_string());
    let ctx = c.call(None, "Target.createBrowserContext", json!({})).unwrap();
    let new_context_id = ctx["browserContextId"].as_str().unwrap().to_string();
    c.call(None, "Target.disposeBrowserContext", json!({"browserContextId": new_context_id})).unwrap();
    Probe { hostname, mac, guest_rng, python_random, math_random, cookie, new_context_id, browser_wf_page }
}

