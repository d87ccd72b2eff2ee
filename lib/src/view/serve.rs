//! `drums-view serve`: the overview page and its JSON API (docs/view.md), over plain HTTP/1.1 on a
//! loopback port, one thread per connection. The page polls `/api/overview` and each session's
//! thumbnail only while it is open, so an unwatched host pays nothing but a listening socket.
//!
//! Who may connect: only root and the members of group `drums`, by the kernel, not by this server: the
//! port must be one of `net::VIEW_PORTS`, which the shared firewall (table `inet drums`, drums(7),
//! "Network boundary") closes to every other user's sockets, as it closes sessions. The server makes
//! sure the table is in place before it listens. A request must also name the server itself in `Host`
//! (no other site's page can reach it through a renamed host) and a destroy must carry
//! `X-Drums-Confirm: <id>`, which no cross-site form or image can send.
//!
//! Starting a session's VNC server forks into the session, which only a single-threaded process may do:
//! the server runs `drums-view vnc` for it; a destroy runs `drums-sweep --session`. Their records are the
//! answers, as the tools print them.

use crate::error::{Error, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// Every page starts with the same head (head.html: doctype, language, character set); a page's own file
// holds the rest, from its title on. Joined at compile time: each page is served as one constant.
const PAGE: &str = concat!(include_str!("head.html"), include_str!("page.html"));
const LIVE: &str = concat!(include_str!("head.html"), include_str!("live.html"));
const CHARTS: &str = concat!(include_str!("head.html"), include_str!("charts.html"));

pub struct ServeOptions {
    pub listen: SocketAddr,
    /// Debian's noVNC (package novnc), served under /novnc/ for the live view.
    pub novnc: PathBuf,
    /// The drums-view binary (for `vnc`) and drums-sweep's, run for the requests that need them.
    pub view_exe: PathBuf,
    pub sweep_exe: PathBuf,
    /// Benchmark results the charts page lists (`--results`, the repository's docs/results); none: the
    /// page says so.
    pub results: Option<PathBuf>,
}

crate::record_type!(ServingType = "view_serving");

/// What `serve` prints once it listens (docs/record.md, "drums-view serve").
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Serving {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: ServingType,
    pub url: String,
    pub listen: String,
    pub pid: u32,
    /// The uids the firewall lets connect (root and group drums), as it was verified at start.
    pub allowed_uids: Vec<u32>,
}

/// A listen address the firewall protects: loopback, and a port of `net::VIEW_PORTS`.
pub fn check_listen(addr: &SocketAddr) -> Result<()> {
    let (lo, hi) = crate::net::VIEW_PORTS;
    if !addr.ip().is_loopback() {
        return Err(Error::Usage(format!("--listen {addr}: only a loopback address (127.0.0.1 or [::1]) may be used: the page is for this host's root and group drums")));
    }
    if !(lo..=hi).contains(&addr.port()) {
        return Err(Error::Usage(format!("--listen {addr}: the port must be in {lo}-{hi}, the ports the firewall closes to users outside group drums (drums(7), \"Network boundary\")")));
    }
    Ok(())
}

struct State {
    o: ServeOptions,
    watcher: Mutex<super::overview::Watcher>,
}

/// Listen and serve until killed. `ready` is called with the record once the socket listens.
pub fn serve(o: ServeOptions, ready: impl FnOnce(&Serving) -> Result<()>) -> Result<()> {
    check_listen(&o.listen)?;
    if !o.novnc.join("core/rfb.js").is_file() {
        return Err(Error::env(format!("{}: noVNC is not there (Debian package novnc; pipelines/setup.sh installs it)", o.novnc.display())));
    }
    crate::net::ensure_firewall()?;
    let listener = TcpListener::bind(o.listen).map_err(|e| Error::io("listen on", o.listen.to_string(), e))?;
    let rec = Serving {
        drums: crate::record::VERSION,
        kind: ServingType::Tag,
        url: format!("http://{}/", o.listen),
        listen: o.listen.to_string(),
        pid: std::process::id(),
        allowed_uids: crate::net::allowed_uids()?,
    };
    ready(&rec)?;
    let state = Arc::new(State { o, watcher: Mutex::new(Default::default()) });
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let st = state.clone();
        std::thread::spawn(move || {
            let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
            let _ = handle(&st, conn);
        });
    }
    Ok(())
}

struct Request {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

fn read_request(r: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = vec![];
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if headers.len() > 100 {
            return None;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let (path, q) = target.split_once('?').unwrap_or((&target, ""));
    let query = q.split('&').filter(|p| !p.is_empty()).map(|p| p.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).unwrap_or((p.to_string(), String::new()))).collect();
    Some(Request { method, path: path.to_string(), query, headers })
}

fn respond(mut s: &TcpStream, code: u16, ctype: &str, extra: &[(&str, String)], body: &[u8]) -> std::io::Result<()> {
    let reason = match code {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        502 => "Bad Gateway",
        _ => "Error",
    };
    let mut head = format!("HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n", body.len());
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    s.flush()
}

fn json_error(s: &TcpStream, code: u16, e: &Error) -> std::io::Result<()> {
    respond(s, code, "application/json", &[], serde_json::to_string(&e.to_record("drums-view")).unwrap_or_default().as_bytes())
}

fn handle(st: &State, conn: TcpStream) -> std::io::Result<()> {
    let mut r = BufReader::new(conn.try_clone()?);
    let Some(req) = read_request(&mut r) else { return Ok(()) };
    // The page's own host only: a page of another site that renamed itself to 127.0.0.1 (DNS
    // rebinding) sends its own name here.
    let port = st.o.listen.port();
    let host_ok = req.header("Host").is_some_and(|h| [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}"), st.o.listen.to_string()].iter().any(|x| x == h));
    if !host_ok {
        return respond(&conn, 403, "text/plain", &[], b"Host must name this server\n");
    }
    let segs: Vec<&str> = req.path.trim_start_matches('/').split('/').collect();
    match (req.method.as_str(), segs.as_slice()) {
        ("GET", [""]) => respond(&conn, 200, "text/html; charset=utf-8", &[], PAGE.as_bytes()),
        ("GET", ["live"]) => respond(&conn, 200, "text/html; charset=utf-8", &[], LIVE.as_bytes()),
        ("GET", ["charts"]) => respond(&conn, 200, "text/html; charset=utf-8", &[], CHARTS.as_bytes()),
        ("GET", ["api", "results"]) => respond(&conn, 200, "application/json", &[], &serde_json::to_vec(&super::results::list(st.o.results.as_deref())).unwrap_or_default()),
        ("GET", ["api", "results", name]) => match st.o.results.as_deref() {
            None => json_error(&conn, 404, &Error::bad_input("drums-view serve was given no --results DIR")),
            Some(dir) => match super::results::read(dir, name) {
                Ok(body) => respond(&conn, 200, "application/json", &[], &body),
                Err(e @ Error::BadInput { .. }) => json_error(&conn, 400, &e),
                Err(e) => json_error(&conn, 404, &e),
            },
        },
        ("GET", ["api", "overview"]) => {
            let ov = st.watcher.lock().map(|mut w| w.read());
            match ov {
                Ok(ov) => respond(&conn, 200, "application/json", &[], &serde_json::to_vec(&ov).unwrap_or_default()),
                Err(_) => respond(&conn, 500, "text/plain", &[], b"the overview's state is poisoned\n"),
            }
        }
        ("GET", ["api", "sessions", id, "thumb.png"]) => {
            let width = req.param("width").and_then(|w| w.parse::<u32>().ok()).unwrap_or(320).clamp(16, 1920);
            match session(id).and_then(|s| super::thumb::thumbnail(&s, width)) {
                Ok(t) => respond(&conn, 200, "image/png", &[("X-Drums-Frame-Digest", t.digest), ("X-Drums-Grab-Seconds", format!("{:.4}", t.grab_s))], &t.png),
                Err(e) => json_error(&conn, 404, &e),
            }
        }
        ("POST", ["api", "sessions", id, "vnc"]) => {
            let input = req.param("input") == Some("1");
            let mut args = vec!["vnc".to_string(), "--session".into(), id.to_string()];
            if input {
                args.push("--input".into());
            }
            run_tool(&conn, &st.o.view_exe, &args)
        }
        ("DELETE", ["api", "sessions", id, "vnc"]) => run_tool(&conn, &st.o.view_exe, &["stop".into(), "--session".into(), id.to_string()]),
        ("GET", ["api", "sessions", id, "vnc", "ws"]) => {
            drop(r);
            websocket(&req, conn, id)
        }
        ("DELETE", ["api", "sessions", id]) => {
            if req.header("X-Drums-Confirm") != Some(*id) {
                return respond(&conn, 400, "text/plain", &[], b"a destroy needs the header X-Drums-Confirm: <session id>\n");
            }
            if let Err(e) = crate::state::check_session_id(id) {
                return json_error(&conn, 400, &Error::bad_field("id", e));
            }
            run_tool(&conn, &st.o.sweep_exe, &["--session".into(), id.to_string()])
        }
        ("GET", ["novnc", rest @ ..]) => static_file(&conn, &st.o.novnc, &rest.join("/")),
        ("GET", _) => respond(&conn, 404, "text/plain", &[], b"no such page\n"),
        _ => respond(&conn, 405, "text/plain", &[], b"method not allowed\n"),
    }
}

fn session(id: &str) -> Result<crate::record::Session> {
    crate::session_io::load(id)
}

/// Run a Drums tool; its record is the answer (200), or its error object (400 for bad input or usage,
/// 500 otherwise).
fn run_tool(conn: &TcpStream, exe: &Path, args: &[String]) -> std::io::Result<()> {
    match std::process::Command::new(exe).args(args).stdin(std::process::Stdio::null()).output() {
        Ok(o) if o.status.success() => respond(conn, 200, "application/json", &[], &o.stdout),
        Ok(o) => {
            let code = match o.status.code() {
                Some(2) | Some(3) => 400,
                _ => 500,
            };
            let last = String::from_utf8_lossy(&o.stderr).lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").to_string();
            respond(conn, code, "application/json", &[], last.as_bytes())
        }
        Err(e) => json_error(conn, 500, &Error::io("run", exe, e)),
    }
}

fn content_type(p: &Path) -> &'static str {
    match p.extension().and_then(|e| e.to_str()) {
        Some("js") => "text/javascript",
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

/// A file of noVNC's tree: plain names only, and the resolved file must still be inside the tree.
fn static_file(conn: &TcpStream, root: &Path, rel: &str) -> std::io::Result<()> {
    let rel = Path::new(rel);
    if rel.as_os_str().is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return respond(conn, 404, "text/plain", &[], b"no such file\n");
    }
    let inside = |p: &Path| -> Option<PathBuf> {
        let real = p.canonicalize().ok()?;
        real.starts_with(root.canonicalize().ok()?).then_some(real)
    };
    match inside(&root.join(rel)).and_then(|p| std::fs::read(&p).ok().map(|b| (p, b))) {
        Some((p, body)) => respond(conn, 200, content_type(&p), &[], &body),
        None => respond(conn, 404, "text/plain", &[], b"no such file\n"),
    }
}

/// noVNC's websocket, relayed to the session's VNC server (session address, VNC_PORT), binary frames
/// both ways. The server must be running (`POST /api/sessions/ID/vnc` starts it).
fn websocket(req: &Request, conn: TcpStream, id: &str) -> std::io::Result<()> {
    let Some(key) = req.header("Sec-WebSocket-Key").map(str::to_string) else {
        return respond(&conn, 400, "text/plain", &[], b"a websocket upgrade was expected\n");
    };
    let target = match session(id).and_then(|s| Ok(format!("{}:{}", s.net()?.session_addr, super::VNC_PORT))) {
        Ok(t) => t,
        Err(e) => return json_error(&conn, 404, &e),
    };
    let upstream = match target.parse::<SocketAddr>().map_err(|e| e.to_string()).and_then(|a| TcpStream::connect_timeout(&a, Duration::from_secs(3)).map_err(|e| e.to_string())) {
        Ok(u) => u,
        Err(e) => return json_error(&conn, 502, &Error::failed(format!("{target}: {e} (is the VNC server running? POST /api/sessions/{id}/vnc)"))),
    };
    let protocol = req.header("Sec-WebSocket-Protocol").and_then(|p| p.split(',').map(str::trim).find(|p| *p == "binary")).map(|p| format!("Sec-WebSocket-Protocol: {p}\r\n")).unwrap_or_default();
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut w = conn.try_clone()?;
    write!(w, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n{protocol}\r\n")?;
    conn.set_read_timeout(None)?;
    let writer = Arc::new(Mutex::new(w));
    // Server to browser: every read of the VNC server's stream becomes one binary frame.
    let (mut up_r, mut up_w) = (upstream.try_clone()?, upstream);
    let to_browser = {
        let writer = writer.clone();
        let conn = conn.try_clone()?;
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                match up_r.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if writer.lock().map(|mut w| write_frame(&mut *w, 0x2, &buf[..n])).map_or(true, |r| r.is_err()) {
                            break;
                        }
                    }
                }
            }
            if let Ok(mut w) = writer.lock() {
                let _ = write_frame(&mut *w, 0x8, &[]);
            }
            let _ = conn.shutdown(std::net::Shutdown::Both);
        })
    };
    // Browser to server.
    let mut r = BufReader::new(conn.try_clone()?);
    let mut message = vec![];
    while let Ok((fin, op, payload)) = read_frame(&mut r) {
        match op {
            0x8 => break,
            0x9 => {
                if writer.lock().map(|mut w| write_frame(&mut *w, 0xA, &payload)).map_or(true, |r| r.is_err()) {
                    break;
                }
            }
            0xA => {}
            0x0..=0x2 => {
                message.extend_from_slice(&payload);
                if fin {
                    if up_w.write_all(&message).is_err() {
                        break;
                    }
                    message.clear();
                }
            }
            _ => break,
        }
    }
    let _ = up_w.shutdown(std::net::Shutdown::Both);
    let _ = conn.shutdown(std::net::Shutdown::Both);
    let _ = to_browser.join();
    Ok(())
}

/// One websocket frame from a client (masked, RFC 6455): (fin, opcode, payload).
fn read_frame(r: &mut impl Read) -> std::io::Result<(bool, u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    r.read_exact(&mut h)?;
    let (fin, op, masked) = (h[0] & 0x80 != 0, h[0] & 0x0f, h[1] & 0x80 != 0);
    let len = match h[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            r.read_exact(&mut b)?;
            u16::from_be_bytes(b) as u64
        }
        127 => {
            let mut b = [0u8; 8];
            r.read_exact(&mut b)?;
            u64::from_be_bytes(b)
        }
        n => n as u64,
    };
    if !masked || len > 16 << 20 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "unmasked or oversized websocket frame"));
    }
    let mut mask = [0u8; 4];
    r.read_exact(&mut mask)?;
    let mut payload = vec![0u8; len as usize];
    r.read_exact(&mut payload)?;
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    Ok((fin, op, payload))
}

/// One unmasked websocket frame (a server's).
fn write_frame(w: &mut impl Write, op: u8, payload: &[u8]) -> std::io::Result<()> {
    let mut head = vec![0x80 | op];
    match payload.len() {
        n if n < 126 => head.push(n as u8),
        n if n <= u16::MAX as usize => {
            head.push(126);
            head.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            head.push(127);
            head.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    w.write_all(&head)?;
    w.write_all(payload)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_and_the_protected_ports_are_taken() {
        let (lo, hi) = crate::net::VIEW_PORTS;
        assert!(check_listen(&format!("127.0.0.1:{lo}").parse().unwrap()).is_ok());
        assert!(check_listen(&format!("[::1]:{hi}").parse().unwrap()).is_ok());
        assert!(check_listen(&format!("0.0.0.0:{lo}").parse().unwrap()).is_err());
        assert!(check_listen(&format!("127.0.0.1:{}", hi + 1).parse().unwrap()).is_err());
    }

    #[test]
    fn every_page_is_one_document_with_the_shared_head() {
        let head = include_str!("head.html");
        for page in [PAGE, LIVE, CHARTS] {
            // A page's own file starts at its title: a second head in it would make two documents.
            let own = page.strip_prefix(head).expect("the shared head first");
            assert!(own.starts_with("<title>Drums: "), "{:?}", own.lines().next());
            assert_eq!(page.matches("<!doctype html>").count(), 1);
            assert!(page.trim_end().ends_with("</html>"));
        }
    }

    #[test]
    fn frames_round_trip() {
        let mut out = vec![];
        write_frame(&mut out, 0x2, &[1, 2, 3]).unwrap();
        assert_eq!(out, vec![0x82, 3, 1, 2, 3]);
        // The same frame as a client sends it, masked.
        let mask = [9u8, 8, 7, 6];
        let mut client = vec![0x82, 0x80 | 3];
        client.extend_from_slice(&mask);
        client.extend([1u8, 2, 3].iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        assert_eq!(read_frame(&mut &client[..]).unwrap(), (true, 0x2, vec![1, 2, 3]));
    }
}
