//! A small synchronous client of Chromium's DevTools protocol, reached on the session's loopback: the
//! TCP connection is opened by a thread that joined the session's network namespace, and then used from
//! any thread.
//!
//! Every conversation has a deadline, given at `Cdp::connect`: each connect, read and write on its
//! sockets has the time left to it as its timeout, so a Chromium that stops answering (stopped, frozen,
//! or a port that accepts and never answers) ends the caller's wait with an error at the deadline.

use crate::error::{Error, Result};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tungstenite::{Message, WebSocket};

pub struct Cdp {
    ws: WebSocket<TcpStream>,
    next_id: u64,
    /// Events and replies received while waiting for something else, oldest first.
    pending: Vec<Value>,
    /// No wait of this conversation goes past it.
    deadline: Instant,
}

/// The time left until `deadline`, or the error naming `what` once it has passed.
fn left(deadline: Instant, what: &str) -> Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(Error::failed(format!("DevTools: {what} not done by the deadline (Chromium does not answer)")));
    }
    Ok(left)
}

/// Open a TCP connection to 127.0.0.1:`port` inside the network namespace of `init_pid`.
pub fn connect_in_netns(init_pid: i32, port: u16, timeout: Duration) -> Result<TcpStream> {
    connect_in_netns_unless(init_pid, port, timeout, || None)
}

/// The same, asking `give_up` between attempts: its error ends the wait at once (the server that should
/// listen has exited, so waiting out `timeout` would only delay the failure). Attempts are 5 ms apart: a
/// refused connection on the loopback costs microseconds, and drums-desktop waits here on the cold path.
pub fn connect_in_netns_unless(init_pid: i32, port: u16, timeout: Duration, give_up: impl Fn() -> Option<Error> + Send + 'static) -> Result<TcpStream> {
    crate::nsenter::in_netns(init_pid, move || {
        let t0 = Instant::now();
        loop {
            // One attempt waits at most 2 s and never past the whole wait.
            let attempt = Duration::from_secs(2).min(timeout.saturating_sub(t0.elapsed())).max(Duration::from_millis(1));
            match TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), attempt) {
                Ok(s) => return Ok(s),
                Err(e) if t0.elapsed() > timeout => return Err(Error::failed(format!("connect to 127.0.0.1:{port} in the session: {e}"))),
                Err(_) => {
                    if let Some(e) = give_up() {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    })
}

/// GET `path` as JSON, every read and write ending by `deadline`.
fn http_get_json(mut s: TcpStream, path: &str, deadline: Instant) -> Result<Value> {
    let what = format!("GET {path}");
    let err = |e: &dyn std::fmt::Display| Error::failed(format!("DevTools {path}: {e}"));
    // Sets the socket's timeouts to the time left before each step: a read that times out is an error.
    let bound = |s: &TcpStream| -> Result<()> {
        let l = left(deadline, &what)?;
        s.set_read_timeout(Some(l)).and_then(|_| s.set_write_timeout(Some(l))).map_err(|e| err(&e))
    };
    let timed_out = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => Error::failed(format!("DevTools: {what} not answered by the deadline (Chromium does not answer)")),
        _ => err(&e),
    };
    bound(&s)?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").map_err(timed_out)?;
    // Chromium's DevTools server keeps the connection open: read the headers, then Content-Length bytes.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let body_start = loop {
        bound(&s)?;
        let n = s.read(&mut chunk).map_err(timed_out)?;
        if n == 0 {
            return Err(err(&"connection closed before the headers ended"));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let headers = String::from_utf8_lossy(&buf[..body_start]).to_ascii_lowercase();
    let len: usize = headers
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| err(&"no Content-Length"))?;
    while buf.len() < body_start + len {
        bound(&s)?;
        let n = s.read(&mut chunk).map_err(timed_out)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    serde_json::from_slice(&buf[body_start..(body_start + len).min(buf.len())]).map_err(|e| err(&format!("not JSON ({e})")))
}

/// How long a command's reply may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);

impl Cdp {
    /// Connect to the browser target of the Chromium in a session. Nothing of the conversation, this
    /// connection included, waits past `deadline`.
    pub fn connect(init_pid: i32, port: u16, deadline: Instant) -> Result<Cdp> {
        let version = http_get_json(connect_in_netns(init_pid, port, left(deadline, "connect")?)?, "/json/version", deadline)?;
        let url = version["webSocketDebuggerUrl"].as_str().ok_or_else(|| Error::failed("DevTools /json/version has no webSocketDebuggerUrl"))?.to_string();
        let stream = connect_in_netns(init_pid, port, left(deadline, "connect")?)?;
        // For the handshake; each read after it sets its own.
        let l = left(deadline, "the websocket handshake")?;
        stream.set_read_timeout(Some(l)).ok();
        stream.set_write_timeout(Some(l)).ok();
        let (ws, _) = tungstenite::client(url.as_str(), stream).map_err(|e| Error::failed(format!("DevTools websocket {url}: {e}")))?;
        Ok(Cdp { ws, next_id: 1, pending: vec![], deadline })
    }

    /// Send a command (to a flattened target session when `session` is given) and wait for its reply.
    pub fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<Value> {
        let id = self.send(session, method, params)?;
        self.reply(id, method)
    }

    /// Send a command without waiting; its reply is taken later with `reply`. Chromium answers commands
    /// as they finish, not in order, so several can be under way at once.
    pub fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        // A Chromium that reads nothing fills the socket's buffer: the write ends at the deadline too.
        let l = left(self.deadline, method)?;
        self.ws.get_mut().set_write_timeout(Some(l)).map_err(|e| Error::failed(format!("DevTools socket: {e}")))?;
        self.ws.send(Message::text(msg.to_string())).map_err(|e| Error::failed(format!("DevTools {method}: {e}")))?;
        Ok(id)
    }

    /// The reply to command `id` (sent as `method`), keeping what else arrives meanwhile.
    pub fn reply(&mut self, id: u64, method: &str) -> Result<Value> {
        let is_it = |v: &Value| v.get("id").and_then(Value::as_u64) == Some(id);
        let deadline = (Instant::now() + crate::state::scaled(REPLY_TIMEOUT)).min(self.deadline);
        let v = match self.pending.iter().position(is_it) {
            Some(i) => self.pending.remove(i),
            None => loop {
                let v = self.read_before(deadline, method)?;
                if is_it(&v) {
                    break v;
                }
                self.pending.push(v);
            },
        };
        if let Some(err) = v.get("error") {
            return Err(Error::failed(format!("DevTools {method}: {err}")));
        }
        Ok(v["result"].clone())
    }

    /// The event (`method`, on `session` when given) if it comes before `deadline`; None if it does not.
    pub fn event_before(&mut self, session: Option<&str>, method: &str, deadline: Instant) -> Result<Option<Value>> {
        let deadline = deadline.min(self.deadline);
        let matches = |v: &Value| v["method"] == method && session.is_none_or(|s| v["sessionId"] == s);
        if let Some(i) = self.pending.iter().position(matches) {
            return Ok(Some(self.pending.remove(i)));
        }
        while let Some(v) = self.next_before(deadline, method)? {
            if matches(&v) {
                return Ok(Some(v));
            }
            self.pending.push(v);
        }
        Ok(None)
    }

    /// The next message, or a timeout error naming `what` (a reply's command) once `deadline` passes.
    fn read_before(&mut self, deadline: Instant, what: &str) -> Result<Value> {
        let whole = deadline >= self.deadline;
        self.next_before(deadline, what)?.ok_or_else(|| {
            if whole {
                Error::failed(format!("DevTools: no reply to {what} by the deadline (Chromium does not answer)"))
            } else {
                Error::failed(format!("DevTools: no reply to {what} within {:?} (Chromium does not answer)", crate::state::scaled(REPLY_TIMEOUT)))
            }
        })
    }

    /// The next message, or None once `deadline` passes: the socket's read timeout is the time left, so no
    /// read waits past it.
    fn next_before(&mut self, deadline: Instant, what: &str) -> Result<Option<Value>> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.ws.get_mut().set_read_timeout(Some(left)).map_err(|e| Error::failed(format!("DevTools socket: {e}")))?;
            match self.ws.read() {
                Ok(Message::Text(t)) => return serde_json::from_str(t.as_str()).map(Some).map_err(|e| Error::failed(format!("DevTools sent bad JSON: {e}"))),
                Ok(Message::Close(_)) => return Err(Error::failed("DevTools closed the connection")),
                Ok(_) => continue,
                // A frame cut by the timeout stays buffered in tungstenite; the deadline check above ends the wait.
                Err(tungstenite::Error::Io(e)) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => continue,
                Err(e) => return Err(Error::failed(format!("DevTools read (waiting for {what}): {e}"))),
            }
        }
    }

    /// The first page target and a flattened session attached to it.
    pub fn attach_page(&mut self) -> Result<(String, String)> {
        let targets = self.call(None, "Target.getTargets", json!({}))?;
        let page = targets["targetInfos"]
            .as_array()
            .and_then(|a| a.iter().find(|t| t["type"] == "page"))
            .ok_or_else(|| Error::failed("Chromium has no page target"))?;
        let target = page["targetId"].as_str().unwrap_or_default().to_string();
        let r = self.call(None, "Target.attachToTarget", json!({"targetId": target, "flatten": true}))?;
        let session = r["sessionId"].as_str().ok_or_else(|| Error::failed("attachToTarget gave no sessionId"))?.to_string();
        Ok((target, session))
    }

    /// Evaluate a JavaScript expression in a page session and return its value.
    pub fn eval(&mut self, session: &str, expr: &str) -> Result<Value> {
        let r = self.call(Some(session), "Runtime.evaluate", json!({"expression": expr, "returnByValue": true, "awaitPromise": true}))?;
        if let Some(ex) = r.get("exceptionDetails") {
            return Err(Error::failed(format!("evaluate {expr}: {ex}")));
        }
        Ok(r["result"]["value"].clone())
    }
}
