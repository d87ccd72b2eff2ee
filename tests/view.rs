//! drums-view on real sessions: a session's VNC server seen by a VNC client of this test (the RFB 3.8
//! handshake and one raw framebuffer update) against the session's own guest /screenshot; who may
//! connect (root yes, a user outside group drums no); and the overview page in a real browser
//! (Debian's Chromium driven through chromedriver's WebDriver API).

use drums_tests::rfb::*;
use drums_tests::*;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The VNC server's pixels against the guest's screenshot: at most this fraction of pixels may differ by
/// more than 16 levels in a channel. The guest draws the pointer into its screenshot (XFixes) and x11vnc
/// into its framebuffer, each at its own moment: the pointer's 16x16 cell and a blinking caret are
/// about 0.03% of a 1280x800 screen, and 0.5% leaves room for one more small redraw between the two reads.
const PIXEL_TOLERANCE: f64 = 0.005;

/// A TCP connection to `addr` as `user` (its uid and groups; None: root): "connected" or "failed ...".
fn connect_as(user: Option<&str>, addr: &str) -> String {
    let (host, port) = addr.rsplit_once(':').unwrap();
    let py = ["/usr/bin/python3", "-c", "import socket, sys\ntry:\n    socket.create_connection((sys.argv[1], int(sys.argv[2])), 3)\n    print('connected')\nexcept Exception as e:\n    print('failed', type(e).__name__, e)\n", host, port];
    let o = match user {
        None => Command::new(py[0]).args(&py[1..]).output().unwrap(),
        Some(u) => {
            let gid = String::from_utf8(Command::new("id").args(["-g", u]).output().unwrap().stdout).unwrap();
            Command::new("setpriv").args([format!("--reuid={u}"), format!("--regid={}", gid.trim()), "--init-groups".into()]).args(py).current_dir("/").output().unwrap()
        }
    };
    assert!(o.status.success(), "{user:?}: {}", text(&o.stderr));
    text(&o.stdout).trim().to_string()
}

fn outsider() -> &'static str {
    let allowed = drums::net::allowed_uids().unwrap();
    let uid: u32 = String::from_utf8(Command::new("id").args(["-u", "nobody"]).output().unwrap().stdout).unwrap().trim().parse().unwrap();
    assert!(!allowed.contains(&uid), "nobody is in group drums: this test needs a user who is not");
    "nobody"
}

fn vnc_record(args: &[&str]) -> drums::view::Vnc {
    one(&run_ok("drums-view", args, ""))
}

#[test]
fn a_session_s_vnc_server_shows_its_screen_to_root_and_drums_only() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (_, s) = cold_session(&mut guard);
    let before = vnc_record(&["stop", "--session", &s.id]);
    assert!(!before.running && before.stopped == 0, "a fresh session runs no VNC server: {}", json(&before));

    let t0 = Instant::now();
    let v = vnc_record(&["vnc", "--session", &s.id]);
    let start_wall = t0.elapsed().as_secs_f64();
    assert!(v.running && v.started && v.input == Some(false), "{}", json(&v));
    assert_eq!(v.port, Some(drums::view::VNC_PORT));
    let addr = format!("{}:{}", v.addr.clone().unwrap(), v.port.unwrap());
    assert_eq!(addr.split(':').next(), Some(s.net.as_ref().unwrap().session_addr.as_str()), "the server listens on the session's address");
    eprintln!("vnc: started in {:.3} s (x11vnc to listening socket), {start_wall:.3} s for the whole drums-view run", v.start_s.unwrap());

    // Asked again in the same mode: the running server, not a second one.
    let again = vnc_record(&["vnc", "--session", &s.id]);
    assert!(again.running && !again.started && again.host_pid == v.host_pid, "{}", json(&again));

    // What an idle server costs, no viewer connected: CPU over 3 s and resident memory.
    let hp = v.host_pid.unwrap() as u32;
    let (c0, t0) = (cpu_s(hp), Instant::now());
    std::thread::sleep(Duration::from_secs(3));
    eprintln!("vnc: x11vnc with no viewer used {:.1} % of one CPU over 3 s, {} KiB resident", (cpu_s(hp) - c0) / t0.elapsed().as_secs_f64() * 100.0, rss_kib(hp));
    let vnc = rfb_screen(&addr);
    let guest = guest_screen(&s);
    let d = differing(&vnc, &guest, 16);
    eprintln!("vnc: {}x{}, {:.4} % of pixels differ from the guest's /screenshot by more than 16 levels", vnc.width, vnc.height, d * 100.0);
    assert!(d <= PIXEL_TOLERANCE, "the VNC screen differs from the guest's screenshot in {:.3} % of pixels", d * 100.0);
    // A screen that is not blank: the comparison above compared something.
    let dark = vnc.rgb.chunks(3).filter(|p| p.iter().all(|c| *c < 8)).count() as f64 / (vnc.width * vnc.height) as f64;
    assert!(dark < 0.9, "the VNC screen is {:.0} % black", dark * 100.0);

    // Who may connect: the firewall's owner rule, as for the guest.
    assert_eq!(connect_as(None, &addr), "connected", "root");
    let r = connect_as(Some(outsider()), &addr);
    assert!(r.starts_with("failed"), "a user outside group drums connected to the VNC server: {r}");

    let stopped = vnc_record(&["stop", "--session", &s.id]);
    assert!(!stopped.running && stopped.stopped == 1, "{}", json(&stopped));
    assert!(connect_as(None, &addr).starts_with("failed"), "the VNC server still answers after stop");

    // With input, the server is replaced by one that takes it.
    let with_input = vnc_record(&["vnc", "--session", &s.id, "--input"]);
    assert!(with_input.running && with_input.started && with_input.input == Some(true), "{}", json(&with_input));
    let replaced = vnc_record(&["vnc", "--session", &s.id]);
    assert!(replaced.started && replaced.stopped == 1 && replaced.input == Some(false), "{}", json(&replaced));
}

#[test]
fn a_bad_session_id_is_bad_input() {
    let o = run("drums-view", &["vnc", "--session", "../etc"], "");
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let o = run("drums-view", &["vnc", "--session", "d-0000000000000000"], "");
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
}

#[test]
fn serve_refuses_an_address_the_firewall_does_not_close() {
    for listen in ["0.0.0.0:3786", "127.0.0.1:8080"] {
        let o = run("drums-view", &["serve", "--listen", listen], "");
        assert_eq!(o.status.code(), Some(2), "{listen}: {}", text(&o.stderr));
    }
}

/// `drums-view serve` on a test port, killed when dropped.
struct Serve(Child);
impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const TEST_PORT: u16 = 3795;

fn serve() -> (Serve, String) {
    serve_with(&[])
}

fn serve_with(extra: &[&str]) -> (Serve, String) {
    let mut child = Command::new(tool("drums-view")).args(["serve", "--listen", &format!("127.0.0.1:{TEST_PORT}")]).args(extra).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let rec: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("drums-view serve printed {line:?}: {e}"));
    assert_eq!(rec["type"], "view_serving", "{line}");
    (Serve(child), rec["url"].as_str().unwrap().trim_end_matches('/').to_string())
}


/// One WebDriver request: chromedriver keeps connections open whatever the request says, so the answer
/// is read by its Content-Length, not to the end of the stream. (status, body)
fn wd(method: &str, url: &str, body: Option<&Value>) -> (u16, String) {
    let rest = url.strip_prefix("http://").unwrap();
    let (hostport, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}"))).unwrap();
    let mut s = TcpStream::connect_timeout(&hostport.parse::<SocketAddr>().unwrap(), Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut r = std::io::BufReader::new(s);
    let mut status_line = String::new();
    std::io::BufRead::read_line(&mut r, &mut status_line).unwrap();
    let status = status_line.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        std::io::BufRead::read_line(&mut r, &mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
        }
    }
    let mut out = vec![0u8; len];
    r.read_exact(&mut out).unwrap();
    (status, String::from_utf8_lossy(&out).into_owned())
}

/// Debian's Chromium, headless, driven through chromedriver's WebDriver API (W3C, over HTTP on loopback).
struct Browser {
    driver: Child,
    base: String,
    session: String,
    profile: std::path::PathBuf,
}

impl Browser {
    fn start() -> Browser {
        for p in ["/usr/bin/chromedriver", "/usr/bin/chromium"] {
            assert!(std::path::Path::new(p).exists(), "{p} is missing: Debian's chromium-driver and chromium (pipelines/setup.sh installs them)");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Command::new("/usr/bin/chromedriver").arg(format!("--port={port}")).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let profile = std::env::temp_dir().join(format!("drums-view-test-{}", std::process::id()));
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            // As root, Chromium runs only without its sandbox; the page is the test's own.
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1200", format!("--user-data-dir={}", profile.display())]
        }}}});
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(20), "chromedriver did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        let (status, body) = wd("POST", &format!("{base}/session"), Some(&caps));
        assert_eq!(status, 200, "chromedriver: new session: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let session = v["value"]["sessionId"].as_str().unwrap().to_string();
        Browser { driver, base, session, profile }
    }
    fn go(&self, url: &str) {
        let (status, body) = wd("POST", &format!("{}/session/{}/url", self.base, self.session), Some(&json!({"url": url})));
        assert_eq!(status, 200, "navigate to {url}: {body}");
    }
    /// Run `script` (a function body: `return ...`) in the page; its value.
    fn js(&self, script: &str) -> Value {
        let (status, body) = wd("POST", &format!("{}/session/{}/execute/sync", self.base, self.session), Some(&json!({"script": script, "args": []})));
        assert_eq!(status, 200, "script {script}: {body}");
        serde_json::from_str::<Value>(&body).unwrap()["value"].clone()
    }
    /// Run `script` until it returns something other than null or false, for up to `timeout`.
    fn wait(&self, what: &str, script: &str, timeout: Duration) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.js(script);
            if !(v.is_null() || v == json!(false)) {
                return v;
            }
            assert!(t0.elapsed() < timeout, "{what}: not within {timeout:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    fn screenshot(&self, path: &std::path::Path) {
        let (status, body) = wd("GET", &format!("{}/session/{}/screenshot", self.base, self.session), None);
        assert_eq!(status, 200, "screenshot: {body}");
        let b64 = serde_json::from_str::<Value>(&body).unwrap()["value"].as_str().unwrap().to_string();
        let o = Command::new("base64").arg("-d").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        o.stdin.as_ref().unwrap().write_all(b64.as_bytes()).unwrap();
        let out = o.wait_with_output().unwrap();
        std::fs::write(path, out.stdout).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = wd("DELETE", &format!("{}/session/{}", self.base, self.session), None);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// A checkpoint's pool, drained when dropped (its parked siblings destroyed).
struct PoolOf(String);
impl Drop for PoolOf {
    fn drop(&mut self) {
        let o = run_owned_tool("drums-pool", &["drain"], &self.0);
        if !o.status.success() {
            eprintln!("drums-pool drain: {}{}", text(&o.stdout), text(&o.stderr));
        }
    }
}

/// The "pool" cell of a checkpoint's row in the page's checkpoints table.
fn checkpoints_pool_cell(b: &Browser, id: &str) -> String {
    b.js(&format!("const tr = [...document.querySelectorAll('#checkpoints tbody tr')].find(tr => tr.children[0].innerText === '{id}'); return tr ? tr.children[7].innerText : ''")).as_str().unwrap_or("").to_string()
}

/// The page's rows: id -> the text of each cell.
fn rows(b: &Browser) -> std::collections::BTreeMap<String, Vec<String>> {
    let v = b.js("return [...document.querySelectorAll('#sessions tbody tr')].map(tr => [tr.dataset.session, [...tr.children].map(td => td.innerText)])");
    v.as_array().unwrap().iter().map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_array().unwrap().iter().map(|c| c.as_str().unwrap_or("").to_string()).collect())).collect()
}

fn digest(b: &Browser, id: &str) -> Option<String> {
    b.js(&format!("const i = document.querySelector('tr[data-session=\"{id}\"] img.thumb'); return i ? (i.dataset.digest || null) : null")).as_str().map(str::to_string)
}

#[test]
fn the_page_lists_sessions_live_and_follows_their_screens() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (cold_line, cold) = source_session(&mut guard);
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &cold_line);
    let ckpt_rec: drums::record::Checkpoint = one(&ckpt);
    let _ckpt_dir = CheckpointDir(ckpt_rec.dir.clone());
    let restored = run_ok("drums-restore", &["--count", "2"], &ckpt);
    guard.add(&restored);
    let sibs: Vec<drums::record::Session> = decode_lines(run_ok("drums-ready", &[], &run_ok("drums-reseed", &[], &restored)).as_bytes());
    assert_eq!(sibs.len(), 2);
    let (_serve, url) = serve();
    let b = Browser::start();

    b.go(&format!("{url}/"));
    let first_paint = b.wait("the first overview painted", "return window.drums && window.drums.firstPaintMs", Duration::from_secs(10)).as_f64().unwrap();
    let fcp = b.js("const e = performance.getEntriesByName('first-contentful-paint')[0]; return e ? e.startTime : null");
    eprintln!("page: sessions listed and painted {first_paint:.0} ms after navigation start (first contentful paint {fcp} ms)");
    assert!(first_paint < 1000.0, "first paint of the session list took {first_paint:.0} ms (limit 1000)");
    b.js("window.notReloaded = 42; return true");

    // Every session with its fields: owner, age, checkpoint (restored ones), image, readiness, cgroup figures.
    let all = [&cold, &sibs[0], &sibs[1]];
    // Other sessions of the machine may be listed too: only the test's own are looked at.
    let own = serde_json::to_string(&all.iter().map(|s| s.id.clone()).collect::<Vec<_>>()).unwrap();
    let listed = rows(&b);
    for s in all {
        let r = listed.get(&s.id).unwrap_or_else(|| panic!("{} is not listed: {listed:?}", s.id));
        let cells = r.join(" | ");
        assert!(r[3].contains(&format!("pid {}", s.owner.pid)) && r[3].contains("alive"), "owner: {cells}");
        assert!(r[4].ends_with(" s") || r[4].ends_with(" min"), "age: {cells}");
        if s.restore.is_some() {
            assert_eq!(r[2].split_whitespace().next(), Some("restored"), "{cells}");
            assert_eq!(r[5], ckpt_rec.id, "checkpoint: {cells}");
        } else {
            assert_eq!(r[5], "cold", "{cells}");
        }
        assert!(r[6].starts_with("desktop"), "image: {cells}");
        assert_eq!(r[7], "ready", "readiness: {cells}");
        assert!(r[8].ends_with("MiB"), "memory: {cells}");
        assert!(r[10].parse::<u64>().is_ok_and(|n| n > 0), "tasks: {cells}");
    }
    // The CPU share needs two reads: it is there within a few seconds.
    b.wait("a CPU share for every session", &format!("return {own}.every(id => document.querySelector(`tr[data-session=\"${{id}}\"]`).children[9].innerText.includes('% of a CPU'))"), Duration::from_secs(5));
    let checkpoints = b.js("return document.querySelector('#checkpoints tbody').innerText");
    assert!(checkpoints.as_str().unwrap().contains(&ckpt_rec.id), "checkpoints table: {checkpoints}");
    // The root images with what uses them: the sessions' image, used by the test's checkpoint.
    let image = cold.overlay.as_ref().and_then(|o| o.image.as_ref()).expect("the cold session's root image").clone();
    let image_row = b.js(&format!("const tr = [...document.querySelectorAll('#images tbody tr')].find(tr => tr.children[0].innerText.includes({:?})); return tr ? tr.innerText : null", image.dir.file_name().unwrap().to_str().unwrap()));
    assert!(image_row.as_str().is_some_and(|r| r.contains(&image.name) && r.contains(&format!("checkpoint {}", ckpt_rec.id))), "images table, {}: {image_row}", image.dir.display());

    // The plots of the last minutes: each session's memory (blue) and CPU share (orange) lines have a
    // point per figure of the overview the page drew, the newest memory point at its height.
    b.wait("three overview reads", "return window.drums.overviews >= 3", Duration::from_secs(10));
    let plots = b.js(&format!(
        "const ov = window.drums.last; return {own}.map(id => {{ \
           const s = ov.sessions.find(s => s.id === id); const svg = document.querySelector(`tr[data-session=\"${{id}}\"] svg.spark`); \
           const pts = (c) => {{ const l = svg.querySelector(`polyline[stroke=\"${{c}}\"]`); return l ? l.getAttribute('points').trim().split(' ').map(p => p.split(',').map(Number)) : []; }}; \
           const mem = s.history.map(h => h[1]).filter(v => v != null), cpu = s.history.map(h => h[2]).filter(v => v != null); \
           const m = pts('#36c'), c = pts('#c63'); \
           return [id, mem.length, m.length, cpu.length, c.length, m.length ? m[m.length - 1][1] : null, 29 - mem[mem.length - 1] / Math.max(...mem) * 27]; }})"
    ));
    for p in plots.as_array().unwrap() {
        let n = |i: usize| p[i].as_u64().unwrap();
        assert!(n(1) >= 2 && n(2) == n(1), "memory plot of {}: {} points for {} figures", p[0], n(2), n(1));
        assert!(n(3) >= 1 && n(4) == n(3), "CPU plot of {}: {} points for {} figures", p[0], n(4), n(3));
        let (drawn, want) = (p[5].as_f64().unwrap(), p[6].as_f64().unwrap());
        assert!((drawn - want).abs() <= 0.06, "memory plot of {}: newest point at y {drawn}, its figure puts it at {want:.2}", p[0]);
    }

    // A pool: its depth and filler in the pools table, the parked sibling listed as parked (no thumbnail:
    // it is frozen), the checkpoint's pool column counting it.
    let pool = PoolOf(ckpt.clone());
    let o = run_owned_tool("drums-pool", &["fill", "--depth", "1"], &ckpt);
    assert!(o.status.success(), "drums-pool fill: {}{}", text(&o.stdout), text(&o.stderr));
    let pool_row = b.wait(
        "the pool listed with depth 1",
        &format!("const tr = [...document.querySelectorAll('#pools tbody tr')].find(tr => tr.children[0].innerText === '{}'); return tr && tr.children[1].innerText === '1' ? [...tr.children].map(td => td.innerText) : null", ckpt_rec.id),
        Duration::from_secs(5),
    );
    assert_eq!(pool_row[4], "none at work", "filler: {pool_row}");
    let parked = b.wait("the parked sibling listed", "const tr = document.querySelector('#sessions tbody tr[data-state=\"parked\"]'); return tr ? tr.dataset.session : null", Duration::from_secs(5));
    assert!(!all.iter().any(|s| json!(s.id) == parked), "a parked sibling is a new session");
    assert!(checkpoints_pool_cell(&b, &ckpt_rec.id).contains("1 parked"));
    drop(pool);
    b.wait("the drained pool's sibling gone", &format!("return !document.querySelector('tr[data-session={parked}]')"), Duration::from_secs(5));

    // A session made after the page loaded appears, a destroyed one disappears, without a reload.
    let late_line = run_ok("drums-restore", &[], &ckpt);
    guard.add(&late_line);
    let late: drums::record::Session = one(&late_line);
    let t0 = Instant::now();
    b.wait("the new session listed", &format!("return !!document.querySelector('tr[data-session=\"{}\"]')", late.id), Duration::from_secs(5));
    eprintln!("page: a new session listed {:.2} s after drums-restore returned", t0.elapsed().as_secs_f64());
    run_ok("drums-sweep", &[], &late_line);
    b.wait("the destroyed session gone", &format!("return !document.querySelector('tr[data-session=\"{}\"]')", late.id), Duration::from_secs(5));
    assert_eq!(b.js("return window.notReloaded"), json!(42), "the page was reloaded");

    // Thumbnails: each still screen keeps its digest; a window drawn on one changes that one only. The
    // page fetches the thumbnails of the rows in view only: other sessions of the machine, listed above
    // the test's (oldest first), are hidden so that the test's own rows are in view.
    let hidden = b.js(&format!("let n = 0; for (const tr of document.querySelectorAll('#sessions tbody tr')) if (!{own}.includes(tr.dataset.session)) {{ tr.style.display = 'none'; n++; }} return n"));
    eprintln!("page: {hidden} rows of other sessions hidden");
    let thumbs_shown = format!("return {own}.every(id => {{ const i = document.querySelector(`tr[data-session=\"${{id}}\"] img.thumb`); return i && i.dataset.digest; }})");
    let t0 = Instant::now();
    while b.js(&thumbs_shown) != json!(true) {
        let state = b.js(&format!("return {own}.map(id => {{ const i = document.querySelector(`tr[data-session=\"${{id}}\"] img.thumb`); return [id, i.dataset.inView, i.dataset.frames, i.getBoundingClientRect().top]; }})"));
        assert!(t0.elapsed() < Duration::from_secs(10), "a thumbnail of every session: not within 10 s; [id, in view, frames, top]: {state}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut seen: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        for s in all {
            seen.entry(s.id.clone()).or_default().extend(digest(&b, &s.id));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let target = &sibs[0];
    let before = digest(&b, &target.id).unwrap();
    let guest = target.desktop.as_ref().unwrap().guest_url.clone().unwrap();
    let tk = "import tkinter as t\nr = t.Tk()\nr.title('drums-view-test')\nr.geometry('900x600+40+40')\nr.configure(bg='#ff00ff')\nr.after(60000, r.destroy)\nr.mainloop()\n";
    let (status, body) = http("POST", &format!("{guest}/setup/launch"), Some(&json!({"command": ["python3", "-c", tk], "shell": false})), Duration::from_secs(5));
    assert_eq!(status, 200, "guest /setup/launch: {body}");
    let t0 = Instant::now();
    let mut changed_after = None;
    while t0.elapsed() < Duration::from_secs(2) {
        if changed_after.is_none() && digest(&b, &target.id).is_some_and(|d| !seen[&target.id].contains(&d) && d != before) {
            changed_after = Some(t0.elapsed().as_secs_f64());
        }
        for s in all.iter().filter(|s| s.id != target.id) {
            let d = digest(&b, &s.id).unwrap();
            assert!(seen[&s.id].contains(&d), "the thumbnail of {} changed though nothing was drawn on it", s.id);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let changed_after = changed_after.unwrap_or_else(|| panic!("the thumbnail of {} did not change within 2 s of the window's launch", target.id));
    eprintln!("page: the thumbnail changed {changed_after:.2} s after the guest launched a window (the window's own start included)");
    // What watching costs the server: its CPU over 5 s of the page open with 3 thumbnails at 4 frames a
    // second and the overview every second, and its resident memory.
    let pid = _serve.0.id();
    let (c0, t0) = (cpu_s(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(5));
    let share = (cpu_s(pid) - c0) / t0.elapsed().as_secs_f64();
    eprintln!("page: drums-view serve used {:.1} % of one CPU over 5 s (3 thumbnails, /proc/PID/stat utime+stime), {} KiB resident", share * 100.0, rss_kib(pid));
    if let Ok(p) = std::env::var("DRUMS_VIEW_SCREENSHOT") {
        std::thread::sleep(Duration::from_millis(500));
        b.screenshot(std::path::Path::new(&p));
    }

    // Destroy from the page, confirmed.
    let victim = &sibs[1];
    b.js(&format!("window.confirm = () => true; document.querySelector('tr[data-session=\"{}\"] button[data-action=destroy]').click(); return true", victim.id));
    b.wait("the session destroyed from the page gone", &format!("return !document.querySelector('tr[data-session=\"{}\"]')", victim.id), Duration::from_secs(20));
    assert!(!victim.state_dir.exists(), "{} still has its state directory", victim.id);
    // A destroy without the confirmation header is refused.
    let (status, _) = http("DELETE", &format!("{url}/api/sessions/{}", cold.id), None, Duration::from_secs(1));
    assert_eq!(status, 400, "a destroy without X-Drums-Confirm");
    assert!(cold.state_dir.exists());
}

#[test]
fn the_page_is_for_root_and_group_drums_only() {
    require_root();
    let (_serve, url) = serve();
    let (status, body) = http("GET", &format!("{url}/api/overview"), None, Duration::from_secs(5));
    assert_eq!(status, 200, "root: {body}");
    let addr = url.trim_start_matches("http://");
    let r = connect_as(Some(outsider()), addr);
    assert!(r.starts_with("failed"), "a user outside group drums connected to the page: {r}");
    assert_eq!(connect_as(None, addr), "connected");
}

/// A data: URL's bytes (base64).
fn data_url_bytes(url: &str) -> Vec<u8> {
    let b64 = url.split_once(',').expect("a data: URL").1;
    let mut child = Command::new("base64").arg("-d").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(b64.as_bytes()).unwrap();
    child.wait_with_output().unwrap().stdout
}

/// The live view of the page (noVNC through drums-view's relay) shows the session's screen: the
/// canvas's pixels against the guest's /screenshot, with the VNC test's tolerance; with input, a click
/// in the view reaches the session (a window of the test's turns green when clicked).
#[test]
fn the_live_view_shows_the_screen_and_passes_a_click_with_input() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (_, s) = cold_session(&mut guard);
    let (_serve, url) = serve();
    let b = Browser::start();
    b.go(&format!("{url}/live?session={}&input=0", s.id));
    // 60 s: on a fresh CI-like host under load the first live view once took more than 20 s to connect.
    b.wait("the live view connected", "return window.drumsLive && (window.drumsLive.connected || window.drumsLive.error)", Duration::from_secs(60));
    assert_eq!(b.js("return window.drumsLive.error"), Value::Null);
    assert_eq!(b.js("return window.drumsLive.vnc.input"), json!(false), "view only");
    // The first full update has been drawn once the canvas is not all black.
    let canvas_png = |b: &Browser| -> Screen {
        let u = b.js("const c = document.querySelector('#screen canvas'); return c ? c.toDataURL('image/png') : null");
        decode_png(&data_url_bytes(u.as_str().expect("noVNC's canvas")))
    };
    let t0 = Instant::now();
    let view = loop {
        std::thread::sleep(Duration::from_millis(300));
        let v = canvas_png(&b);
        if v.rgb.chunks(3).filter(|p| p.iter().all(|c| *c < 8)).count() < v.width * v.height * 9 / 10 || t0.elapsed() > Duration::from_secs(10) {
            break v;
        }
    };
    let guest = guest_screen(&s);
    let d = differing(&view, &guest, 16);
    eprintln!("live view: {}x{} canvas, {:.4} % of pixels differ from the guest's /screenshot by more than 16 levels", view.width, view.height, d * 100.0);
    assert!(d <= PIXEL_TOLERANCE, "the live view differs from the guest's screenshot in {:.3} % of pixels", d * 100.0);

    // With input: a window that turns green when clicked, clicked through the view.
    let guest_url = s.desktop.as_ref().unwrap().guest_url.clone().unwrap();
    let tk = "import tkinter as t\nr = t.Tk()\nr.title('drums-view-click')\nr.geometry('400x300+100+100')\nr.configure(bg='#ff0000')\nr.bind('<Button-1>', lambda e: r.configure(bg='#00ff00'))\nr.after(60000, r.destroy)\nr.mainloop()\n";
    let (status, body) = http("POST", &format!("{guest_url}/setup/launch"), Some(&json!({"command": ["python3", "-c", tk], "shell": false})), Duration::from_secs(5));
    assert_eq!(status, 200, "guest /setup/launch: {body}");
    // Where the red window is, on the guest's screen.
    let find = |colour: [u8; 3]| -> Option<(usize, usize)> {
        let g = guest_screen(&s);
        let hits: Vec<usize> = (0..g.width * g.height).filter(|i| g.rgb[i * 3..i * 3 + 3] == colour).collect();
        (hits.len() > 10_000).then(|| {
            let (sx, sy) = hits.iter().fold((0, 0), |(x, y), i| (x + i % g.width, y + i / g.width));
            (sx / hits.len(), sy / hits.len())
        })
    };
    let t0 = Instant::now();
    let (x, y) = loop {
        if let Some(p) = find([255, 0, 0]) {
            break p;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "the test's window did not show");
        std::thread::sleep(Duration::from_millis(200));
    };
    // A click in the view-only view does nothing.
    let click = |b: &Browser| {
        let script = format!(
            "const c = document.querySelector('#screen canvas'); const r = c.getBoundingClientRect(); \
             const cx = r.left + {x} * r.width / c.width, cy = r.top + {y} * r.height / c.height; \
             for (const t of ['mousemove', 'mousedown', 'mouseup']) c.dispatchEvent(new MouseEvent(t, {{clientX: cx, clientY: cy, button: 0, buttons: t === 'mousedown' ? 1 : 0, bubbles: true}})); return true"
        );
        b.js(&script);
    };
    click(&b);
    std::thread::sleep(Duration::from_millis(1500));
    assert!(find([0, 255, 0]).is_none(), "a click in the view-only view reached the session");
    b.go(&format!("{url}/live?session={}&input=1", s.id));
    b.wait("the live view with input connected", "return window.drumsLive && (window.drumsLive.connected || window.drumsLive.error)", Duration::from_secs(20));
    assert_eq!(b.js("return window.drumsLive.vnc.input"), json!(true), "with input");
    std::thread::sleep(Duration::from_millis(1000));
    let t0 = Instant::now();
    click(&b);
    loop {
        if find([0, 255, 0]).is_some() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "a click in the view with input did not reach the session's window");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("live view: a click with input turned the window green {:.2} s later", t0.elapsed().as_secs_f64());
}

/// A member of group `drums` may open the page and a session's VNC server, and a user outside it still
/// may not (the group is made if absent, the member added, and both undone exactly afterwards).
#[test]
fn a_member_of_group_drums_opens_the_page_and_the_vnc_server() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (_, s) = cold_session(&mut guard);
    let v = vnc_record(&["vnc", "--session", &s.id]);
    let vnc_addr = format!("{}:{}", v.addr.unwrap(), v.port.unwrap());
    let (_serve, url) = serve();
    let page = url.trim_start_matches("http://").to_string();
    let allowed = drums::net::allowed_uids().unwrap();
    let uid = |u: &str| -> u32 { String::from_utf8(Command::new("id").args(["-u", u]).output().unwrap().stdout).unwrap().trim().parse().unwrap() };
    let member = ["daemon", "bin", "sys"].into_iter().find(|u| !allowed.contains(&uid(u))).expect("a system user outside group drums");
    for addr in [&page, &vnc_addr] {
        assert!(connect_as(Some(member), addr).starts_with("failed"), "{member}, not yet in group drums, connected to {addr}");
    }
    let saved = group_files();
    let files = GroupFiles(saved.clone());
    let sh = |cmd: &str, args: &[&str]| assert!(Command::new(cmd).args(args).status().unwrap().success(), "{cmd} {args:?}");
    if Command::new("getent").args(["group", drums::net::ALLOWED_GROUP]).output().unwrap().stdout.is_empty() {
        sh("groupadd", &["--system", drums::net::ALLOWED_GROUP]);
    }
    sh("gpasswd", &["--add", member, drums::net::ALLOWED_GROUP]);
    drums::net::ensure_firewall().unwrap();
    for addr in [&page, &vnc_addr] {
        assert_eq!(connect_as(Some(member), addr), "connected", "{member}, in group drums, to {addr}");
        assert!(connect_as(Some(outsider()), addr).starts_with("failed"), "nobody to {addr}");
    }
    drop(files);
    assert!(group_files() == saved, "the group files were not restored exactly");
    assert!(connect_as(Some(member), &page).starts_with("failed"), "{member}, out of group drums again, connected to the page");
}

/// CPU seconds (user + system) a process has used, from /proc/PID/stat.
fn cpu_s(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap().lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()).unwrap()
}

/// The charts page draws a benchmark result of docs/results as the file has it: the cold and restore
/// medians as bars in proportion, the ratio, and the density run's fill as a series; the API serves only
/// plain .json names of the directory it was given (no link, no other file, nothing outside it).
#[test]
fn the_charts_page_draws_the_benchmark_results() {
    require_root();
    let dir = std::env::temp_dir().join(format!("drums-view-results-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bench_name = "bench-2026-12-02-typed.json";
    let density_name = "density-2026-12-01.json";
    for n in [bench_name, density_name] {
        std::fs::copy(repo_root().join("docs/results").join(n), dir.join(n)).unwrap();
    }
    std::fs::write(dir.join("notes.txt"), "not a result").unwrap();
    std::os::unix::fs::symlink("/etc/shadow", dir.join("shadow.json")).unwrap();
    let bench: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(bench_name)).unwrap()).unwrap();
    let (_serve, url) = serve_with(&["--results", dir.to_str().unwrap()]);

    let (status, body) = http("GET", &format!("{url}/api/results"), None, Duration::from_secs(5));
    assert_eq!(status, 200, "{body}");
    let list: drums::view::results::ResultsList = decode(&body);
    let files: Vec<_> = list.files.iter().map(|f| (f.name.as_str(), f.kind.as_deref())).collect();
    assert_eq!(files, [(bench_name, Some("benchmark")), (density_name, Some("density-benchmark"))], "only the plain .json files: {body}");
    let (status, body) = http("GET", &format!("{url}/api/results/{bench_name}"), None, Duration::from_secs(5));
    assert_eq!((status, serde_json::from_str::<Value>(&body).ok()), (200, Some(bench.clone())));
    for (refused, want) in [("shadow.json", 404), ("notes.txt", 400), ("..%2Fbench.json", 400), ("missing.json", 404)] {
        let (status, body) = http("GET", &format!("{url}/api/results/{refused}"), None, Duration::from_secs(5));
        assert_eq!(status, want, "{refused}: {body}");
        assert!(!body.contains("root:"), "{refused} leaked a file: {body}");
    }

    let b = Browser::start();
    b.go(&format!("{url}/charts?file={bench_name}"));
    b.wait("the bench result drawn", &format!("return window.drumsCharts && window.drumsCharts.rendered === '{bench_name}'"), Duration::from_secs(10));
    let bar = |path: &str| -> (f64, f64) {
        let v = b.js(&format!("const r = window.drumsCharts.bars.find(b => b.path === '{path}'); return r ? [r.value, r.width] : null"));
        assert!(v.is_array(), "no bar for {path}");
        (v[0].as_f64().unwrap(), v[1].as_f64().unwrap())
    };
    let (cold, cold_w) = bar("time_to_agent_ready.cold");
    let (restore, restore_w) = bar("time_to_agent_ready.restore");
    assert_eq!((cold, restore), (bench["time_to_agent_ready"]["cold"]["p50_s"].as_f64().unwrap(), bench["time_to_agent_ready"]["restore"]["p50_s"].as_f64().unwrap()));
    assert!(((cold_w / restore_w) - cold / restore).abs() < 0.01, "bars out of proportion: {cold_w} / {restore_w} for {cold} / {restore}");
    // The bar is drawn in the page, as wide as its record says.
    let drawn = b.js("const r = document.querySelector('rect[data-path=\"time_to_agent_ready.cold\"]'); return r ? r.getBBox().width : null");
    assert!((drawn.as_f64().unwrap() - cold_w).abs() < 0.5, "drawn {drawn} vs {cold_w}");
    let ratio = b.js("const r = window.drumsCharts.ratios.find(r => r.path === 'ratio_cold_p50_over_restore_p50'); return r ? r.value : null");
    assert_eq!(ratio.as_f64(), bench["ratio_cold_p50_over_restore_p50"]["value"].as_f64());

    b.js(&format!("document.querySelector('nav a[data-name=\"{density_name}\"]').click(); return true"));
    b.wait("the density result drawn", &format!("return window.drumsCharts.rendered === '{density_name}'"), Duration::from_secs(10));
    let density: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(density_name)).unwrap()).unwrap();
    let steps = density["fill"]["steps"].as_array().unwrap();
    let want: Vec<Value> = steps.iter().map(|s| json!([s["live"], s["host_used_mib"]])).collect();
    let got = b.js("const s = window.drumsCharts.series.find(s => s.path === 'fill.steps' && s.y === 'host_used_mib'); return s ? s.points : null");
    assert_eq!(got, json!(want), "the fill's host memory over live sessions");
    let shot = dir.join("charts.png");
    b.screenshot(&shot);
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
    let _ = std::fs::remove_dir_all(&dir);
}
