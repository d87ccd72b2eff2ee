//! Shared by the guest tests: a real X display (Xvfb, openbox) with drums-guest serving it on the host's
//! loopback, and a small HTTP/1.1 client (the requests are written by hand so that malformed ones can be
//! sent too).
#![allow(dead_code)]

use drums_tests::*;
use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Send raw bytes as one request on a fresh connection and read the whole answer.
pub fn raw(addr: SocketAddr, request: &[u8]) -> Resp {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(180))).unwrap();
    s.write_all(request).unwrap();
    let mut buf = vec![];
    s.read_to_end(&mut buf).unwrap_or_else(|e| panic!("read answer from {addr}: {e}"));
    parse(&buf)
}

fn parse(buf: &[u8]) -> Resp {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no HTTP header in {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> =
        lines.filter_map(|l| l.split_once(':')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect();
    let mut body = buf[end + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        let mut out = vec![];
        let mut rest = &body[..];
        loop {
            let nl = rest.windows(2).position(|w| w == b"\r\n").expect("chunk size line");
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..nl]).trim(), 16).expect("chunk size");
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[nl + 2..nl + 2 + size]);
            rest = &rest[nl + 2 + size + 2..];
        }
        body = out;
    }
    Resp { status, headers, body }
}

pub fn request(addr: SocketAddr, method: &str, path: &str, content_type: Option<&str>, body: &[u8]) -> Resp {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if let Some(ct) = content_type {
        req.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    raw(addr, &bytes)
}

pub fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, None, b"")
}

pub fn post_json(addr: SocketAddr, path: &str, v: &serde_json::Value) -> Resp {
    request(addr, "POST", path, Some("application/json"), v.to_string().as_bytes())
}

/// A multipart/form-data body from (name, filename, content) parts.
pub fn multipart(parts: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "drumsboundary7MA4YWxkTrZu0gW";
    let mut b = vec![];
    for (name, file, data) in parts {
        b.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match file {
            Some(f) => b.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
            ),
            None => b.extend_from_slice(format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes()),
        }
        b.extend_from_slice(data);
        b.extend_from_slice(b"\r\n");
    }
    b.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), b)
}

/// Xvfb (on a display it picks itself), openbox, and drums-guest on 127.0.0.1 with a port it picks.
pub struct Desktop {
    pub display: String,
    pub width: u32,
    pub height: u32,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<String>>>,
    procs: Vec<Child>,
    pub guest_pid: u32,
}

impl Desktop {
    /// `user`: the account drums-guest acts as (`nobody` proves commands do not run as root).
    pub fn start(user: &str, width: u32, height: u32) -> Desktop {
        Desktop::start_with(user, width, height, &[])
    }

    /// As `start`, with more options for drums-guest.
    pub fn start_with(user: &str, width: u32, height: u32, guest_args: &[&str]) -> Desktop {
        Desktop::start_full(user, width, height, guest_args, &[])
    }

    /// As `start_with`, with more variables in drums-guest's environment (its children inherit them).
    pub fn start_full(user: &str, width: u32, height: u32, guest_args: &[&str], env: &[(&str, &str)]) -> Desktop {
        require_root();
        let (display, xvfb) = start_xvfb(width, height);
        let mut procs = vec![xvfb];
        let wm = Command::new("openbox")
            .env("DISPLAY", &display)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("openbox is not installed (pipelines/setup.sh installs it)");
        procs.push(wm);
        let mut guest = Command::new(tool("drums-guest"))
            .args(["--listen", "127.0.0.1:0", "--display", &display, "--user", user])
            .args(guest_args)
            // What drums-desktop gives it in a session.
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .env("HOME", "/root")
            .env("DISPLAY", &display)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn drums-guest");
        let guest_pid = guest.id();
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let err = guest.stderr.take().unwrap();
        let log2 = log.clone();
        // Keep reading the log for the guest's whole life: a full pipe would block it.
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                let addr = l.split("listening on http://").nth(1).map(|rest| rest.split_whitespace().next().unwrap_or("").to_string());
                // The line is in the log before the test learns the address, so a test reading the log
                // right after start sees it.
                log2.lock().unwrap().push(l);
                if let Some(a) = addr {
                    let _ = tx.send(a);
                }
            }
        });
        procs.push(guest);
        let addr: SocketAddr = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(a) => a.parse().unwrap(),
            Err(_) => panic!("drums-guest did not start; its log: {:?}", log.lock().unwrap()),
        };
        Desktop { display, width, height, addr, log, procs, guest_pid }
    }

    pub fn guest_alive(&mut self) -> bool {
        matches!(self.procs[2].try_wait(), Ok(None))
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Desktop {
    fn drop(&mut self) {
        for p in self.procs.iter_mut().rev() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

/// Xvfb with -displayfd: it chooses a free display itself, so parallel tests never collide.
fn start_xvfb(width: u32, height: u32) -> (String, Child) {
    let mut fds = [0i32; 2];
    // Without O_CLOEXEC: Xvfb must inherit the write end.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let child = Command::new("Xvfb")
        .args(["-displayfd", &fds[1].to_string(), "-screen", "0", &format!("{width}x{height}x24"), "-nolisten", "tcp", "-noreset"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("Xvfb is not installed (pipelines/setup.sh installs it)");
    unsafe { libc::close(fds[1]) };
    let mut r = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
    let mut num = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut b = [0u8; 1];
    while Instant::now() < deadline {
        match r.read(&mut b) {
            Ok(1) if b[0] == b'\n' => break,
            Ok(1) => num.push(b[0] as char),
            _ => break,
        }
    }
    assert!(!num.is_empty(), "Xvfb did not report its display");
    (format!(":{}", num.trim()), child)
}

/// Poll `f` until it is true or `secs` pass.
pub fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// Decode a PNG answer: (width, height, RGB or RGBA bytes, bytes per pixel).
pub fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>, usize) {
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG: {} bytes", bytes.len());
    let dec = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = dec.read_info().expect("PNG header");
    let mut buf = vec![0; reader.output_buffer_size().expect("PNG size")];
    let info = reader.next_frame(&mut buf).expect("PNG data");
    let bpp = info.color_type.samples();
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf, bpp)
}
