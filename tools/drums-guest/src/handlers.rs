//! The endpoints. Each answers with the method, status code and body shape of OSWorld's server; where
//! OSWorld would crash on a bad request (a 500 from an exception), the guest answers 400 and says why.
// A request check's error is the finished answer, returned once per request: its size does not matter.
#![allow(clippy::result_large_err)]

use super::exec::{self, RunError, Spec};
use super::{display, files, Guest};
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

type G = State<Arc<Guest>>;

/// OSWorld's timeouts: /execute 120 s, /run_python 30 s, /run_bash_script 100 s unless asked, /setup/open_file 1800 s.
const EXECUTE_TIMEOUT: Duration = Duration::from_secs(120);
const PYTHON_TIMEOUT: Duration = Duration::from_secs(30);
const BASH_DEFAULT_TIMEOUT: f64 = 100.0;
const OPEN_DEFAULT_TIMEOUT: f64 = 1800.0;
/// Request bodies other than uploads are JSON or a form: a bound keeps a hostile body from filling memory.
const BODY_LIMIT: usize = 64 << 20;
/// What an upload body may hold besides the file: the multipart framing, `file_path`, a file name, fields
/// the guest ignores. A body longer than --max-upload plus this is refused.
const UPLOAD_FORM_OVERHEAD: u64 = 1 << 20;
/// The longest `file_path` read (PATH_MAX is 4096; room for `~` and variables before expansion).
const MAX_PATH_FIELD: usize = 64 << 10;
/// After refusing an upload, how long to go on reading (and dropping) what the client still sends before
/// answering: a socket closed with unread data sends a reset, and a client still writing its body would
/// see the reset instead of the 413.
const REFUSAL_DRAIN: Duration = Duration::from_secs(5);

pub fn router(g: Arc<Guest>) -> Router {
    Router::new()
        .route("/execute", post(execute))
        .route("/setup/execute", post(execute))
        .route("/execute_with_verification", post(execute_with_verification))
        .route("/setup/execute_with_verification", post(execute_with_verification))
        .route("/setup/launch", post(launch))
        .route("/screenshot", get(screenshot))
        .route("/platform", get(platform))
        .route("/screen_size", post(screen_size))
        .route("/cursor_position", get(cursor_position))
        .route("/window_size", post(window_size))
        .route("/terminal", get(terminal))
        .route("/accessibility", get(accessibility))
        .route("/desktop_path", get(desktop_path).post(desktop_path))
        .route("/list_directory", post(list_directory))
        .route("/file", post(file))
        // Bounded by the upload handler itself (UploadBody), which can drain a refused body.
        .route("/setup/upload", post(upload).layer(axum::extract::DefaultBodyLimit::disable()))
        .route("/setup/open_file", post(open_file))
        .route("/setup/activate_window", post(activate_window))
        .route("/setup/close_window", post(close_window))
        .route("/run_python", post(run_python))
        .route("/run_bash_script", post(run_bash_script))
        .route("/start_recording", post(start_recording))
        .route("/end_recording", post(end_recording))
        .route("/wallpaper", post(wallpaper))
        .route("/setup/change_wallpaper", post(change_wallpaper))
        .route("/drums/rng", get(rng_status))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn(bounded))
        .layer(axum::middleware::from_fn(access_log))
        .with_state(g)
}

/// Added to an endpoint's own longest wait for its time limit: answering, reading a small body.
const LIMIT_MARGIN: Duration = Duration::from_secs(5);

/// The time limit of an endpoint whose waits are all of fixed length: the sum of its own bounded waits
/// (X calls display::X_TIMEOUT, children their timeouts) plus LIMIT_MARGIN. None for the endpoints whose
/// caller sets the wait (/run_bash_script's `timeout`, /setup/open_file's `timeout_seconds`,
/// /execute_with_verification's /execute then `max_wait_time`, each bounded by its own deadline) and for
/// the transfers (/file, /setup/upload), which last as long as the data takes to move.
pub fn time_limit(path: &str) -> Option<Duration> {
    let x = display::X_TIMEOUT;
    let limit = match path {
        "/execute" | "/setup/execute" => EXECUTE_TIMEOUT,
        "/run_python" => PYTHON_TIMEOUT,
        "/accessibility" | "/terminal" => super::a11y::TIMEOUT,
        "/start_recording" => x + RECORDER_START + Duration::from_secs(1),
        "/end_recording" => RECORDER_STOP + exec::KILL_WAIT + RECORDING_READY,
        "/wallpaper" | "/setup/change_wallpaper" => GSETTINGS_TIMEOUT,
        "/screenshot" | "/screen_size" | "/cursor_position" | "/window_size" | "/setup/activate_window" | "/setup/close_window" => x,
        // Work on the session's own files and processes only: no peer to wait for, but a large tree.
        "/platform" | "/desktop_path" | "/list_directory" | "/setup/launch" | "/drums/rng" => Duration::from_secs(55),
        _ => return None,
    };
    Some(limit + LIMIT_MARGIN)
}

/// Every endpoint with a fixed time limit (`time_limit`) answers within it: past it the request gets
/// OSWorld's error shape (500, status error) naming the limit, whatever it was waiting on. The endpoint's
/// own deadlines come first; this is the bound behind them.
async fn bounded(req: Request, next: axum::middleware::Next) -> Response {
    let path = req.uri().path().to_string();
    let Some(limit) = time_limit(&path) else { return next.run(req).await };
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(r) => r,
        Err(_) => json_at(500, json!({"status": "error", "message": format!("{path} did not finish within {} s (drums-guest's time limit for it) and was abandoned", limit.as_secs())})),
    }
}

async fn access_log(req: Request, next: axum::middleware::Next) -> Response {
    let (m, p) = (req.method().clone(), req.uri().path().to_string());
    let t0 = Instant::now();
    let mut resp = next.run(req).await;
    super::log(&format!("{m} {p} {} {:.0}ms", resp.status().as_u16(), t0.elapsed().as_secs_f64() * 1e3));
    // One request per connection, as OSWorld's Flask server (HTTP/1.0) does: between requests no
    // connection stays open, so a checkpoint of the session never holds an established TCP socket.
    resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

// ---- answers ---------------------------------------------------------------------------------------

/// Flask's `return "text"`: text/html.
fn text(code: u16, s: impl Into<String>) -> Response {
    let mut r = (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), s.into()).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    r
}

fn json_at(code: u16, v: Value) -> Response {
    (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), Json(v)).into_response()
}

fn bad(msg: impl Into<String>) -> Response {
    json_at(400, json!({"status": "error", "message": msg.into()}))
}

fn html_error(code: u16, title: &str, detail: &str) -> Response {
    text(code, format!("<!doctype html>\n<html lang=en>\n<title>{code} {title}</title>\n<h1>{title}</h1>\n<p>{detail}</p>\n"))
}

async fn not_found() -> Response {
    html_error(404, "Not Found", "No such endpoint on this guest server (see drums-guest(1) for the list).")
}

async fn method_not_allowed() -> Response {
    html_error(405, "Method Not Allowed", "This endpoint does not take this method (see drums-guest(1)).")
}

// ---- request bodies ----------------------------------------------------------------------------------

/// The body as a JSON object, whatever the Content-Type says (OSWorld's clients always send JSON).
fn json_object(body: &Bytes) -> Result<Map<String, Value>, Response> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(bad("request body is empty: a JSON object is expected"));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(bad(format!("request body is JSON {}, not an object", kind(&other)))),
        Err(e) => Err(bad(format!("request body is not JSON: {e}"))),
    }
}

/// The request's JSON object and its non-empty `path` (OSWorld's servers answer 400 "Path not supplied!"
/// without one).
fn object_with_path(body: &Bytes) -> Result<(Map<String, Value>, String), Response> {
    let m = json_object(body)?;
    match opt_str(&m, "path")? {
        Some(p) if !p.is_empty() => {
            let p = p.to_string();
            Ok((m, p))
        }
        _ => Err(text(400, "Path not supplied!")),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn opt_bool(m: &Map<String, Value>, k: &str) -> Result<bool, Response> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(bad(format!("field `{k}` must be a boolean, got {}", kind(v)))),
    }
}

fn opt_str<'a>(m: &'a Map<String, Value>, k: &str) -> Result<Option<&'a str>, Response> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(bad(format!("field `{k}` must be a string, got {}", kind(v)))),
    }
}

fn opt_number(m: &Map<String, Value>, k: &str, default: f64) -> Result<f64, Response> {
    let v = match m.get(k) {
        None | Some(Value::Null) => return Ok(default),
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        // OSWorld's open_file takes float(timeout_seconds), so a numeric string is a number there.
        Some(Value::String(s)) => s.trim().parse().map_err(|_| bad(format!("field `{k}` must be a number, got {s:?}")))?,
        Some(v) => return Err(bad(format!("field `{k}` must be a number, got {}", kind(v)))),
    };
    if !v.is_finite() || v <= 0.0 || v > 86400.0 {
        return Err(bad(format!("field `{k}` must be a number of seconds in (0, 86400], got {v}")));
    }
    Ok(v)
}

/// OSWorld's command forms: `command` a list or a string, `shell` a boolean. Without a shell a string is
/// split like `shlex.split`; list items starting with `~/` are expanded to the user's home (a shell
/// string is left to the shell). Returns the argv and the command as OSWorld would print it.
fn parse_command(g: &Guest, m: &Map<String, Value>) -> Result<(Vec<String>, String), Response> {
    let shell = opt_bool(m, "shell")?;
    let (given_list, mut items) = match m.get("command") {
        None | Some(Value::Null) => (!shell, vec![]),
        Some(Value::String(s)) if shell => (false, vec![s.clone()]),
        Some(Value::String(s)) => (false, exec::shlex_split(s).map_err(|e| bad(format!("field `command`: {e}")))?),
        Some(Value::Array(a)) => {
            let mut v = vec![];
            for (i, x) in a.iter().enumerate() {
                match x {
                    Value::String(s) => v.push(s.clone()),
                    other => return Err(bad(format!("field `command`: item {i} must be a string, got {}", kind(other)))),
                }
            }
            (true, v)
        }
        Some(v) => return Err(bad(format!("field `command` must be a list of strings or a string, got {}", kind(v)))),
    };
    if items.is_empty() {
        return Err(bad("field `command` is empty: nothing to run"));
    }
    if given_list || !shell {
        for a in items.iter_mut() {
            if a.starts_with("~/") {
                *a = g.acct.expand_tilde(a);
            }
        }
    }
    let shown = if shell && !given_list { items[0].clone() } else if shell { py_list(&items) } else { items.join(" ") };
    let argv = if shell {
        let mut v = vec!["/bin/sh".to_string(), "-c".to_string()];
        v.extend(items);
        v
    } else {
        items
    };
    Ok((argv, shown))
}

/// A command endpoint's body: the JSON object and its command (`parse_command`).
fn command_request(g: &Guest, body: &Bytes) -> Result<(Map<String, Value>, Vec<String>, String), Response> {
    let m = json_object(body)?;
    let (argv, shown) = parse_command(g, &m)?;
    Ok((m, argv, shown))
}

/// A list of strings as Python prints it, for messages that quote a command the way OSWorld's do.
fn py_list(items: &[String]) -> String {
    let q: Vec<String> = items.iter().map(|s| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))).collect();
    format!("[{}]", q.join(", "))
}

/// Python's text for an OSError, which OSWorld returns as the message.
fn os_error_text(e: &std::io::Error, program: &str) -> String {
    match e.raw_os_error() {
        Some(n) => format!("[Errno {n}] {}: '{program}'", strerror(n)),
        None => e.to_string(),
    }
}

fn strerror(n: i32) -> String {
    let s = std::io::Error::from_raw_os_error(n).to_string();
    // Rust appends " (os error N)"; Python does not.
    s.rsplit_once(" (os error").map(|(a, _)| a.to_string()).unwrap_or(s)
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn max_output(g: &Guest) -> usize {
    usize::try_from(g.bounds.max_output).unwrap_or(usize::MAX)
}

/// A command's answer with its streams cut at --max-output said: the answer gains `truncated`, naming
/// each cut stream by the answer's own field (`output` for stdout, `error` for stderr) with the bytes
/// kept and dropped, and the guest logs it. OSWorld's fields keep their shape: a cut stream is its first
/// bytes.
fn noting_truncation(mut answer: Value, endpoint: &str, o: &exec::Outcome) -> Value {
    let mut cut = Map::new();
    for (field, kept, dropped) in [("output", o.stdout.len(), o.stdout_dropped), ("error", o.stderr.len(), o.stderr_dropped)] {
        if dropped > 0 {
            super::log(&format!("{endpoint}: {field} truncated at --max-output: kept {kept} bytes, dropped {dropped}"));
            cut.insert(field.into(), json!({"kept_bytes": kept, "dropped_bytes": dropped}));
        }
    }
    if !cut.is_empty() {
        answer["truncated"] = Value::Object(cut);
    }
    answer
}

// ---- commands ----------------------------------------------------------------------------------------

async fn execute(State(g): G, body: Bytes) -> Response {
    let (_, argv, shown) = match command_request(&g, &body) {
        Ok(x) => x,
        Err(r) => return r,
    };
    match run_command(&g, argv, &shown).await {
        Ok(o) => json_at(200, noting_truncation(json!({"status": "success", "output": lossy(&o.stdout), "error": lossy(&o.stderr), "returncode": o.code}), "/execute", &o)),
        Err(r) => r,
    }
}

/// Run an /execute command as the user with OSWorld's /execute timeout: its outcome, or OSWorld's 500
/// answer for a command that could not start or did not end in time.
async fn run_command(g: &Guest, argv: Vec<String>, shown: &str) -> Result<exec::Outcome, Response> {
    let program = argv[0].clone();
    let spec = Spec { argv, acct: &g.acct, display: &g.display, cwd: None, merge_stderr: false, timeout: EXECUTE_TIMEOUT, max_output: max_output(g) };
    match exec::run(spec).await {
        Ok(o) => Ok(o),
        Err(RunError::Spawn(e)) => Err(json_at(500, json!({"status": "error", "message": os_error_text(&e, &program)}))),
        Err(RunError::Timeout) => Err(json_at(500, json!({"status": "error", "message": format!("Command '{shown}' timed out after {} seconds", EXECUTE_TIMEOUT.as_secs())}))),
    }
}

/// /execute, then poll until `verification` holds: `window_exists` (a client window whose title contains
/// it, ignoring case) and/or `command_success` (a shell command, as the user, exiting 0 within 5 s).
async fn execute_with_verification(State(g): G, body: Bytes) -> Response {
    let (m, argv, shown) = match command_request(&g, &body) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let verification = match m.get("verification") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(v)) => v.clone(),
        Some(v) => return bad(format!("field `verification` must be an object, got {}", kind(v))),
    };
    let window = match opt_str(&verification, "window_exists") {
        Ok(w) => w.map(str::to_string),
        Err(r) => return r,
    };
    let check = match opt_str(&verification, "command_success") {
        Ok(c) => c.map(str::to_string),
        Err(r) => return r,
    };
    let max_wait = match opt_number(&m, "max_wait_time", 10.0) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let interval = match opt_number(&m, "check_interval", 1.0) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let o = match run_command(&g, argv, &shown).await {
        Ok(o) => o,
        Err(r) => return r,
    };
    let (output, error) = (lossy(&o.stdout), lossy(&o.stderr));
    let answer = |v: Value| noting_truncation(v, "/execute_with_verification", &o);
    if window.is_none() && check.is_none() {
        return json_at(200, answer(json!({"status": "success", "output": output, "error": error, "returncode": o.code})));
    }
    let t0 = Instant::now();
    while t0.elapsed().as_secs_f64() < max_wait {
        let mut passed = true;
        if let Some(w) = &window {
            let (d, w) = (g.display.clone(), w.to_lowercase());
            let found = blocking(move || display::windows(&d).map(|l| l.iter().any(|x| x.title.to_lowercase().contains(&w)))).await;
            passed &= matches!(found, Ok(Ok(true)));
        }
        if let Some(c) = &check {
            let spec = Spec {
                argv: vec!["/bin/sh".into(), "-c".into(), c.clone()],
                acct: &g.acct,
                display: &g.display,
                cwd: None,
                merge_stderr: false,
                timeout: Duration::from_secs(5),
                max_output: max_output(&g),
            };
            passed &= matches!(exec::run(spec).await, Ok(r) if r.code == 0);
        }
        if passed {
            return json_at(
                200,
                answer(json!({"status": "success", "output": output, "error": error, "returncode": o.code, "verification": "passed", "wait_time": t0.elapsed().as_secs_f64()})),
            );
        }
        tokio::time::sleep(Duration::from_secs_f64(interval)).await;
    }
    json_at(
        500,
        answer(json!({"status": "verification_failed", "output": output, "error": error, "returncode": o.code, "verification": "failed", "wait_time": max_wait})),
    )
}

async fn launch(State(g): G, body: Bytes) -> Response {
    let (_, argv, shown) = match command_request(&g, &body) {
        Ok(x) => x,
        Err(r) => return r,
    };
    match exec::launch(&argv, &g.acct, &g.display) {
        Ok(pid) => {
            super::log(&format!("launched pid {pid}: {shown}"));
            text(200, format!("{shown} launched successfully"))
        }
        Err(e) => json_at(500, json!({"status": "error", "message": os_error_text(&e, &argv[0])})),
    }
}

/// Write a temporary file for a script, as the user, in the session's /tmp.
async fn script_file(g: &Arc<Guest>, prefix: &str, suffix: &str, content: String) -> Result<PathBuf, String> {
    let path = PathBuf::from(format!("/tmp/{prefix}{}{suffix}", g.rng.hex(16)));
    let (g2, p2) = (g.clone(), path.clone());
    tokio::task::spawn_blocking(move || {
        super::user::with_fs_identity(&g2.acct, || {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o700).open(&p2)?;
            f.write_all(content.as_bytes())
        })
    })
    .await
    .map_err(|e| format!("{}: {e}", path.display()))?
    .map_err(|e| format!("{}: write: {e}", path.display()))?;
    Ok(path)
}

async fn remove_file(g: &Arc<Guest>, p: PathBuf) {
    let g2 = g.clone();
    let _ = tokio::task::spawn_blocking(move || files::remove_as(&g2.acct, &p)).await;
}

async fn run_python(State(g): G, body: Bytes) -> Response {
    let m = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let code = match opt_str(&m, "code") {
        Ok(Some(c)) if !c.is_empty() => c.to_string(),
        Ok(_) => return json_at(400, json!({"status": "error", "message": "Code not supplied!"})),
        Err(r) => return r,
    };
    let path = match script_file(&g, "python_exec_", ".py", code).await {
        Ok(p) => p,
        Err(e) => return json_at(500, json!({"status": "error", "message": format!("Execution error: {e}"), "error": e, "need_more": false, "output": null})),
    };
    let spec = Spec {
        argv: vec!["/usr/bin/python3".into(), path.display().to_string()],
        acct: &g.acct,
        display: &g.display,
        cwd: None,
        merge_stderr: false,
        timeout: PYTHON_TIMEOUT,
        max_output: max_output(&g),
    };
    let r = exec::run(spec).await;
    remove_file(&g, path).await;
    match r {
        Ok(o) => {
            let (output, mut error) = (lossy(&o.stdout), lossy(&o.stderr));
            let mut message = output.clone();
            if !error.is_empty() {
                message = if output.is_empty() { error.clone() } else { format!("{output}\n{error}") };
            }
            let status = if o.code != 0 {
                if error.is_empty() {
                    error = format!("Process exited with code {}", o.code);
                    message = if message.is_empty() { error.clone() } else { format!("{message}\n{error}") };
                }
                "error"
            } else {
                "success"
            };
            json_at(200, noting_truncation(json!({"status": status, "message": message, "need_more": false, "output": output, "error": error, "return_code": o.code}), "/run_python", &o))
        }
        Err(RunError::Timeout) => json_at(
            500,
            json!({"status": "error", "message": "Execution timeout: Code took too long to execute", "error": "TimeoutExpired", "need_more": false, "output": null}),
        ),
        Err(RunError::Spawn(e)) => {
            let t = os_error_text(&e, "/usr/bin/python3");
            json_at(500, json!({"status": "error", "message": format!("Execution error: {t}"), "error": t, "need_more": false, "output": null}))
        }
    }
}

async fn run_bash_script(State(g): G, body: Bytes) -> Response {
    let fail = |code: u16, out: String| json_at(code, json!({"status": "error", "output": out, "error": "", "returncode": -1}));
    let m = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let mut script = match opt_str(&m, "script") {
        Ok(Some(s)) if !s.is_empty() => s.to_string(),
        Ok(_) => return fail(400, "Script not supplied!".into()),
        Err(r) => return r,
    };
    let timeout = match opt_number(&m, "timeout", BASH_DEFAULT_TIMEOUT) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let cwd = match opt_str(&m, "working_dir") {
        Ok(Some(d)) if !d.is_empty() => {
            let d = PathBuf::from(g.acct.expand_tilde(d));
            let exists = exists_for_user(&g, &d).await;
            if !exists {
                return fail(400, format!("Working directory does not exist: {}", d.display()));
            }
            Some(d)
        }
        Ok(_) => None,
        Err(r) => return r,
    };
    if !script.contains("#!/bin/bash") {
        script = format!("#!/bin/bash\n\n{script}");
    }
    let path = match script_file(&g, "drums_bash_", ".sh", script).await {
        Ok(p) => p,
        Err(e) => return fail(500, format!("Failed to execute script: {e}")),
    };
    let spec = Spec {
        argv: vec!["/bin/bash".into(), path.display().to_string()],
        acct: &g.acct,
        display: &g.display,
        cwd,
        merge_stderr: true,
        timeout: Duration::from_secs_f64(timeout),
        max_output: max_output(&g),
    };
    let r = exec::run(spec).await;
    remove_file(&g, path).await;
    match r {
        Ok(o) => json_at(
            200,
            noting_truncation(json!({"status": if o.code == 0 {"success"} else {"error"}, "output": lossy(&o.stdout), "error": "", "returncode": o.code}), "/run_bash_script", &o),
        ),
        Err(RunError::Timeout) => fail(500, format!("Script execution timed out after {} seconds", fmt_secs(timeout))),
        Err(RunError::Spawn(e)) => fail(500, format!("Failed to execute script: {}", os_error_text(&e, "/bin/bash"))),
    }
}

fn fmt_secs(t: f64) -> String {
    if t.fract() == 0.0 {
        format!("{}", t as u64)
    } else {
        format!("{t}")
    }
}

// ---- the display -------------------------------------------------------------------------------------

/// Whether `p` exists as the user sees it (their permissions on the way to it); false if that cannot be told.
async fn exists_for_user(g: &Arc<Guest>, p: &std::path::Path) -> bool {
    let (g, p) = (g.clone(), p.to_path_buf());
    blocking(move || super::user::with_fs_identity(&g.acct, || p.exists())).await.unwrap_or(false)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Response> {
    tokio::task::spawn_blocking(f).await.map_err(|e| json_at(500, json!({"status": "error", "message": format!("internal: {e}")})))
}

async fn screenshot(State(g): G) -> Response {
    let d = g.display.clone();
    match blocking(move || display::screenshot_png(&d)).await {
        Ok(Ok(png)) => {
            let mut r = (StatusCode::OK, png).into_response();
            r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("image/png"));
            r
        }
        Ok(Err(e)) => json_at(500, json!({"status": "error", "message": e})),
        Err(r) => r,
    }
}

async fn screen_size(State(g): G) -> Response {
    let d = g.display.clone();
    match blocking(move || display::screen_size(&d)).await {
        Ok(Ok((w, h))) => json_at(200, json!({"width": w, "height": h})),
        Ok(Err(e)) => json_at(500, json!({"status": "error", "message": e})),
        Err(r) => r,
    }
}

async fn cursor_position(State(g): G) -> Response {
    let d = g.display.clone();
    match blocking(move || display::pointer(&d)).await {
        Ok(Ok((x, y))) => json_at(200, json!([x, y])),
        Ok(Err(e)) => json_at(500, json!({"status": "error", "message": e})),
        Err(r) => r,
    }
}

/// Form field `app_class_name`: the size of the first client window whose WM_CLASS has it (ignoring case).
async fn window_size(State(g): G, req: Request) -> Response {
    let class = match required_form_field(&g, req, "app_class_name").await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let d = g.display.clone();
    let c2 = class.clone();
    match blocking(move || display::window_size_by_class(&d, &c2)).await {
        Ok(Ok(Some((w, h)))) => json_at(200, json!({"width": w, "height": h})),
        Ok(Ok(None)) => json_at(404, json!({"error": format!("no window of class {class}")})),
        Ok(Err(e)) => json_at(500, json!({"status": "error", "message": e})),
        Err(r) => r,
    }
}

async fn platform() -> Response {
    text(200, "Linux")
}

/// OSWorld reads a focused gnome-terminal through AT-SPI; sessions have no gnome-terminal, so the answer
/// is OSWorld's "no active terminal". Harnesses poll this endpoint to see that the server is up.
async fn terminal(State(g): G) -> Response {
    match super::a11y::terminal(&g).await {
        Ok(out) => json_at(200, json!({"output": out, "status": "success"})),
        Err(e) => json_at(500, json!({"status": "error", "message": e})),
    }
}

async fn accessibility(State(g): G) -> Response {
    match super::a11y::tree(&g).await {
        Ok(xml) => json_at(200, json!({"AT": xml})),
        Err(e) => json_at(500, json!({"status": "error", "message": e})),
    }
}

fn window_args(m: &Map<String, Value>) -> Result<(String, bool, bool), Response> {
    let name = match opt_str(m, "window_name")? {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => return Err(text(400, "window_name required")),
    };
    Ok((name, opt_bool(m, "strict")?, opt_bool(m, "by_class")?))
}

async fn window_endpoint(g: Arc<Guest>, body: Bytes, op: display::WindowOp, done: &'static str) -> Response {
    let m = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let (name, strict, by_class) = match window_args(&m) {
        Ok(x) => x,
        Err(r) => return r,
    };
    let d = g.display.clone();
    let n2 = name.clone();
    match blocking(move || display::window_op(&d, &n2, strict, by_class, op)).await {
        Ok(Ok(Some(_))) => text(200, done),
        Ok(Ok(None)) => text(404, format!("Window {name} not found")),
        Ok(Err(e)) => text(500, e),
        Err(r) => r,
    }
}

async fn activate_window(State(g): G, body: Bytes) -> Response {
    window_endpoint(g, body, display::WindowOp::Activate, "Window activated successfully").await
}

async fn close_window(State(g): G, body: Bytes) -> Response {
    window_endpoint(g, body, display::WindowOp::Close, "Window closed successfully.").await
}

/// Open a file with xdg-open (or start a program named on PATH), then wait for a window whose title holds
/// the file's name (or `window_name`) and activate it.
async fn open_file(State(g): G, body: Bytes) -> Response {
    let (m, raw) = match object_with_path(&body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let window_name = match opt_str(&m, "window_name") {
        Ok(w) => w.map(str::to_string),
        Err(r) => return r,
    };
    let timeout = match opt_number(&m, "timeout_seconds", OPEN_DEFAULT_TIMEOUT) {
        Ok(t) => t,
        Err(_) => return text(400, format!("Invalid timeout_seconds: {}", m.get("timeout_seconds").unwrap_or(&Value::Null))),
    };
    let looks_like_path = raw.starts_with('/') || raw.starts_with('~') || raw.starts_with('$');
    let (argv, candidates) = if looks_like_path {
        let p = match files::session_path(&g.acct, &raw) {
            Ok(p) => p,
            Err(e) => return text(400, e),
        };
        let exists = exists_for_user(&g, &p).await;
        if !exists {
            return text(404, format!("Application/file not found: {raw}"));
        }
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let stem = p.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        (vec!["xdg-open".to_string(), p.display().to_string()], vec![name, stem])
    } else {
        if which(&raw).is_none() {
            return text(404, format!("Application/file not found: {raw}"));
        }
        (vec![raw.clone()], vec![raw.clone()])
    };
    let candidates: Vec<String> = match window_name {
        Some(w) if !w.is_empty() => vec![w],
        _ => candidates.into_iter().filter(|c| !c.is_empty()).collect(),
    };
    let mut opener = match exec::spawn_watched(&argv, &g.acct, &g.display, false) {
        Ok(w) => w,
        Err(e) => return text(500, format!("Failed to open {raw}. Error: {}", os_error_text(&e, &argv[0]))),
    };
    let deadline = Instant::now() + Duration::from_secs_f64(timeout);
    let mut opener_done = false;
    while Instant::now() < deadline {
        // An opener that exits with an error (xdg-open finding nothing to open the file with, a program
        // that fails at its start) opens no window: answer now, not after the whole timeout. One that
        // exits 0 handed the file on, and the window is waited for as before.
        if !opener_done {
            if let Ok(Some(st)) = opener.child.try_wait() {
                opener_done = true;
                if !st.success() {
                    // Its standard error, once the pipe's reader has it (the opener is gone).
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let code = st.code().map_or_else(|| format!("was killed by signal {}", std::os::unix::process::ExitStatusExt::signal(&st).unwrap_or(0)), |c| format!("exited with status {c}"));
                    return text(500, format!("Failed to open {raw}: {} {code}: {}", argv[0], opener.stderr_text()));
                }
            }
        }
        let d = g.display.clone();
        let c2 = candidates.clone();
        let found = blocking(move || -> Result<bool, String> {
            for w in display::windows(&d)? {
                if c2.iter().any(|c| w.title.contains(c.as_str())) {
                    return display::window_op(&d, &w.title, true, false, display::WindowOp::Activate).map(|r| r.is_some());
                }
            }
            Ok(false)
        })
        .await;
        if let Ok(Ok(true)) = found {
            return text(200, "File opened and window activated successfully");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    text(500, format!("Failed to find window for {} within {} seconds.", py_list(&candidates), fmt_secs(timeout)))
}

// ---- recording ---------------------------------------------------------------------------------------

/// Where OSWorld's server records (`tempfile.gettempdir()`), inside the session.
const RECORDING_PATH: &str = "/tmp/osworld_recording.mp4";
/// A recorder has started once it has written the MP4's header, which ffmpeg does when the first frame
/// reaches the encoder: a `q` before that leaves an MP4 with no frame (seen on a fresh host, whose first
/// ffmpeg took seconds to load). /end_recording waits RECORDER_STOP for the file to be finished after `q`,
/// then RECORDING_READY for it to be there.
const RECORDER_START: Duration = Duration::from_secs(10);
const RECORDER_STOP: Duration = Duration::from_secs(15);
const RECORDING_READY: Duration = Duration::from_secs(3);

/// POST /start_recording: ffmpeg's x11grab of the session's display, as the user, into RECORDING_PATH.
/// Without ffmpeg in the session's image the answer is an immediate 500 saying so (OSWorld's server
/// answers the same). The answer comes once ffmpeg has captured its first frame (the MP4's header is
/// written), so a stop right after it still gives frames; a recorder that dies first, or captures nothing
/// within 10 s, is a 500 with its standard error.
async fn start_recording(State(g): G) -> Response {
    let mut rec = g.recording.lock().await;
    if let Some(w) = rec.as_mut() {
        if matches!(w.child.try_wait(), Ok(None)) {
            return json_at(400, json!({"status": "error", "message": "Recording is already in progress."}));
        }
    }
    *rec = None;
    let Some(ffmpeg) = which("ffmpeg") else {
        return json_at(500, json!({"status": "error", "message": "ffmpeg is required for recording but was not found in PATH (it is not in this session's root image; the osworld image has it: pipelines/images/osworld.packages)"}));
    };
    let out = PathBuf::from(RECORDING_PATH);
    let (g2, o2) = (g.clone(), out.clone());
    let removed = blocking(move || super::user::with_fs_identity(&g2.acct, || match std::fs::remove_file(&o2) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
        _ => Ok(()),
    }))
    .await;
    match removed {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return json_at(500, json!({"status": "error", "message": format!("Failed to remove old recording file: {e}")})),
        Err(r) => return r,
    }
    let d = g.display.clone();
    let (w, h) = match blocking(move || display::screen_size(&d)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return json_at(500, json!({"status": "error", "message": e})),
        Err(r) => return r,
    };
    let size = format!("{w}x{h}");
    let ffmpeg = ffmpeg.display().to_string();
    let argv: Vec<String> = [
        ffmpeg.as_str(), "-y", "-nostats", "-hide_banner", "-f", "x11grab", "-draw_mouse", "1", "-s", size.as_str(), "-i", g.display.as_str(),
        "-c:v", "libx264", "-r", "30", RECORDING_PATH,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut watched = match exec::spawn_watched(&argv, &g.acct, &g.display, true) {
        Ok(w) => w,
        Err(e) => return json_at(500, json!({"status": "error", "message": format!("Failed to start recording: {}", os_error_text(&e, &argv[0]))})),
    };
    let started = Instant::now() + RECORDER_START;
    loop {
        if let Ok(Some(st)) = watched.child.try_wait() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            return json_at(500, json!({"status": "error", "message": format!("Failed to start recording. ffmpeg terminated unexpectedly ({st}). Error: {}", watched.stderr_text())}));
        }
        // symlink_metadata: the user owns /tmp's entry and may have put a link there; only its size is read.
        if std::fs::symlink_metadata(RECORDING_PATH).map(|m| m.is_file() && m.len() > 0).unwrap_or(false) {
            break;
        }
        if Instant::now() >= started {
            if let Some(pid) = watched.child.id() {
                unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
            }
            let _ = watched.child.start_kill();
            let _ = tokio::time::timeout(exec::KILL_WAIT, watched.child.wait()).await;
            return json_at(500, json!({"status": "error", "message": format!("Failed to start recording: ffmpeg captured no frame of {} within {} s. Error: {}", g.display, RECORDER_START.as_secs(), watched.stderr_text())}));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    *rec = Some(watched);
    json_at(200, json!({"status": "success", "message": "Started recording successfully."}))
}

/// POST /end_recording: `q` to ffmpeg, which finishes the MP4; the file as an attachment.
async fn end_recording(State(g): G) -> Response {
    let mut rec = g.recording.lock().await;
    let running = match rec.as_mut() {
        Some(w) => matches!(w.child.try_wait(), Ok(None)),
        None => false,
    };
    if !running {
        *rec = None;
        return match recording_file(&g, Duration::ZERO).await {
            Some(r) => r,
            None => json_at(400, json!({"status": "error", "message": "No recording in progress to stop."})),
        };
    }
    let Some(mut w) = rec.take() else { return json_at(400, json!({"status": "error", "message": "No recording in progress to stop."})) };
    drop(rec);
    let stop = Instant::now() + RECORDER_STOP;
    if let Some(mut stdin) = w.stdin.take() {
        use tokio::io::AsyncWriteExt;
        // Within the stop's time: a stopped recorder that reads nothing must not hold the answer.
        let _ = tokio::time::timeout_at(stop.into(), async {
            let _ = stdin.write_all(b"q\n").await;
            let _ = stdin.flush().await;
        })
        .await;
    }
    if tokio::time::timeout_at(stop.into(), w.child.wait()).await.is_err() {
        if let Some(pid) = w.child.id() {
            unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        }
        let _ = w.child.start_kill();
        let _ = tokio::time::timeout(exec::KILL_WAIT, w.child.wait()).await;
        return json_at(500, json!({"status": "error", "message": format!("Recording process was unresponsive and had to be killed. Stderr: {}", w.stderr_text())}));
    }
    match recording_file(&g, RECORDING_READY).await {
        Some(r) => r,
        None => html_error(500, "Internal Server Error", &format!("Recording failed. The output file is missing or empty. ffmpeg stderr: {}", w.stderr_text())),
    }
}

/// The recording, once it is there and not empty (polled until `wait` passes).
async fn recording_file(g: &Arc<Guest>, wait: Duration) -> Option<Response> {
    let deadline = Instant::now() + wait;
    loop {
        let g2 = g.clone();
        if let Ok(Ok((f, len))) = blocking(move || files::open_for_send(&g2.acct, std::path::Path::new(RECORDING_PATH))).await {
            if len > 0 {
                return Some(stream_file(f, len, std::path::Path::new(RECORDING_PATH), "video/mp4"));
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// ---- wallpaper ---------------------------------------------------------------------------------------

const GSETTINGS_TIMEOUT: Duration = Duration::from_secs(30);

/// `gsettings ARGS` as the user: Ok(stdout) when it exits 0, else Err(why).
async fn gsettings(g: &Arc<Guest>, args: &[&str]) -> Result<String, String> {
    let Some(bin) = which("gsettings") else {
        return Err("gsettings is not in this session's root image (libglib2.0-bin; the osworld image has it with GNOME's settings schemas)".into());
    };
    let mut argv = vec![bin.display().to_string()];
    argv.extend(args.iter().map(|a| a.to_string()));
    let spec = Spec { argv, acct: &g.acct, display: &g.display, cwd: None, merge_stderr: false, timeout: GSETTINGS_TIMEOUT, max_output: 1 << 20 };
    match exec::run(spec).await {
        Ok(o) if o.code == 0 => Ok(lossy(&o.stdout)),
        Ok(o) => Err(format!("gsettings {} exited {}: {}", args.join(" "), o.code, lossy(&o.stderr).trim())),
        Err(RunError::Timeout) => Err("gsettings took longer than 30 s".into()),
        Err(RunError::Spawn(e)) => Err(os_error_text(&e, "gsettings")),
    }
}

/// POST /wallpaper: the file org.gnome.desktop.background picture-uri names, as OSWorld's server reads
/// it (its `file://` and quotes stripped); 404 when none is set or gsettings cannot say.
async fn wallpaper(State(g): G) -> Response {
    let uri = match gsettings(&g, &["get", "org.gnome.desktop.background", "picture-uri"]).await {
        Ok(u) => u.trim().replace("file://", "").replace('\'', ""),
        Err(e) => {
            super::log(&format!("/wallpaper: {e}"));
            return html_error(404, "Not Found", &format!("Wallpaper file not found ({e})"));
        }
    };
    if uri.is_empty() {
        return html_error(404, "Not Found", "Wallpaper file not found");
    }
    let p = match files::session_path(&g.acct, &uri) {
        Ok(p) => p,
        Err(e) => return html_error(500, "Internal Server Error", &format!("Unable to serve the wallpaper file: {e}")),
    };
    let (g2, p2) = (g.clone(), p.clone());
    match blocking(move || files::open_for_send(&g2.acct, &p2)).await {
        Ok(Ok((f, len))) => stream_file(f, len, &p, "image/png"),
        Ok(Err((_, e))) => html_error(500, "Internal Server Error", &format!("Unable to serve the wallpaper file: {}: {e}", p.display())),
        Err(r) => r,
    }
}

/// POST /setup/change_wallpaper {path}: picture-uri set to the file. Unlike OSWorld's server, which
/// answers success whatever gsettings did, a gsettings that fails (or is missing) is a 500 saying why.
async fn change_wallpaper(State(g): G, body: Bytes) -> Response {
    let (_, raw) = match object_with_path(&body) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let p = match files::session_path(&g.acct, &raw) {
        Ok(p) => p,
        Err(e) => return text(400, e),
    };
    if !exists_for_user(&g, &p).await {
        return text(404, format!("File not found: {}", p.display()));
    }
    match gsettings(&g, &["set", "org.gnome.desktop.background", "picture-uri", &format!("file://{}", p.display())]).await {
        Ok(_) => text(200, "Wallpaper changed successfully"),
        Err(e) => text(500, format!("Failed to change wallpaper. Error: {e}")),
    }
}

fn which(prog: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let ok = |p: &std::path::Path| p.metadata().map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false);
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        return ok(&p).then_some(p);
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    path.split(':').map(|d| PathBuf::from(d).join(prog)).find(|p| ok(p))
}

// ---- files -------------------------------------------------------------------------------------------

async fn desktop_path(State(g): G) -> Response {
    let p = g.acct.home.join("Desktop");
    let exists = exists_for_user(&g, &p).await;
    if exists {
        json_at(200, json!({"desktop_path": p.display().to_string()}))
    } else {
        json_at(404, json!({"error": "Unsupported operating system or desktop path not found"}))
    }
}

async fn list_directory(State(g): G, body: Bytes) -> Response {
    let m = match json_object(&body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let raw = match m.get("path") {
        None => return json_at(400, json!({"error": "Missing 'path' parameter"})),
        Some(Value::String(s)) => s.clone(),
        Some(v) => return json_at(400, json!({"error": format!("'path' must be a string, got {}", kind(v))})),
    };
    let p = match files::session_path(&g.acct, &raw) {
        Ok(p) => p,
        Err(e) => return json_at(400, json!({"error": e})),
    };
    let (g2, p2) = (g.clone(), p.clone());
    let r = blocking(move || if files::is_dir_as(&g2.acct, &p2) { Some(files::tree(&g2.acct, &p2)) } else { None }).await;
    match r {
        Ok(Some(t)) => json_at(200, json!({"directory_tree": t})),
        Ok(None) => json_at(400, json!({"error": "The provided path is not a directory"})),
        Err(r) => r,
    }
}

/// Fields of a form body, urlencoded or multipart (Flask's `request.form` takes both); file parts are skipped.
async fn form_fields(g: &Arc<Guest>, req: Request) -> Result<Vec<(String, String)>, Response> {
    let ct = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    if ct.starts_with("multipart/form-data") {
        let mut mp = Multipart::from_request(req, g).await.map_err(|e| json_at(400, json!({"error": format!("bad multipart body: {e}")})))?;
        let mut out = vec![];
        while let Some(f) = mp.next_field().await.map_err(|e| json_at(400, json!({"error": format!("bad multipart body: {e}")})))? {
            if f.file_name().is_some() {
                continue;
            }
            let name = f.name().unwrap_or("").to_string();
            let v = f.text().await.map_err(|e| json_at(400, json!({"error": format!("bad multipart field {name}: {e}")})))?;
            out.push((name, v));
        }
        Ok(out)
    } else {
        let axum::Form(v) = axum::Form::<Vec<(String, String)>>::from_request(req, g)
            .await
            .map_err(|e| json_at(400, json!({"error": format!("bad form body: {}", e.body_text())})))?;
        Ok(v)
    }
}

/// The form field `name` of a form body, or OSWorld's 400 answer saying that it is required.
async fn required_form_field(g: &Arc<Guest>, req: Request, name: &str) -> Result<String, Response> {
    let fields = form_fields(g, req).await?;
    match fields.into_iter().find(|(k, _)| k == name) {
        Some((_, v)) => Ok(v),
        None => Err(json_at(400, json!({"error": format!("{name} is required")}))),
    }
}

async fn file(State(g): G, req: Request) -> Response {
    let raw = match required_form_field(&g, req, "file_path").await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let p = match files::session_path(&g.acct, &raw) {
        Ok(p) => p,
        Err(e) => return json_at(400, json!({"error": e})),
    };
    let (g2, p2) = (g.clone(), p.clone());
    let opened = match blocking(move || files::open_for_send(&g2.acct, &p2)).await {
        Ok(o) => o,
        Err(r) => return r,
    };
    let (f, len) = match opened {
        Ok(x) => x,
        Err((code, msg)) => return json_at(code, json!({"error": msg})),
    };
    stream_file(f, len, &p, files::mime_of(&p))
}

/// A file opened as the user, streamed as Flask's `send_file(..., as_attachment=True)` answers.
fn stream_file(f: std::fs::File, len: u64, p: &std::path::Path, mime: &'static str) -> Response {
    super::log(&format!("sending {} ({len} bytes)", p.display()));
    let f = tokio::fs::File::from_std(f);
    let stream = futures::stream::unfold(f, |mut f| async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 256 << 10];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<Bytes, std::io::Error>(Bytes::from(buf)), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    });
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Ok(v) = HeaderValue::from_str(&content_disposition(&name)) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    r
}

/// `attachment; filename=...`, with RFC 5987 `filename*` for names that are not plain ASCII.
fn content_disposition(name: &str) -> String {
    let plain = name.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\' || b == b' ');
    if plain {
        format!("attachment; filename=\"{name}\"")
    } else {
        let enc: String = name
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b"-._~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        format!("attachment; filename*=UTF-8''{enc}")
    }
}

async fn upload(State(g): G, req: Request) -> Response {
    // file_data before file_path (a client may order the parts either way) goes to a temporary file until
    // the path is known; whatever happens, it does not stay behind.
    let mut spool: Option<PathBuf> = None;
    let answer = receive_upload(&g, req, &mut spool).await;
    if let Some(p) = spool {
        remove_file(&g, p).await;
    }
    answer
}

/// Why an upload did not land. Every case has removed what it wrote.
enum UploadError {
    /// More than --max-upload bytes of file.
    TooLarge,
    /// The body ended early or is not multipart: the client's fault (400).
    Body(String),
    /// Writing the file failed (500, as OSWorld's `Failed to upload file`).
    Write(String),
}

fn multipart_error(e: axum::extract::multipart::MultipartError) -> UploadError {
    UploadError::Body(format!("bad multipart body: {e}"))
}

/// An upload's body as the multipart parser reads it: counted and cut off once past `limit` bytes (the
/// file's bound plus UPLOAD_FORM_OVERHEAD, so that fields the guest ignores are bounded too), and taken
/// back whole for the drain that precedes a refusal.
#[derive(Clone)]
struct UploadBody {
    inner: Arc<std::sync::Mutex<Option<axum::body::BodyDataStream>>>,
    read: Arc<std::sync::atomic::AtomicU64>,
    limit: u64,
}

impl UploadBody {
    fn new(body: Body, limit: u64) -> UploadBody {
        UploadBody { inner: Arc::new(std::sync::Mutex::new(Some(body.into_data_stream()))), read: Default::default(), limit }
    }
    fn over(&self) -> bool {
        self.read.load(std::sync::atomic::Ordering::Relaxed) > self.limit
    }
    /// Read and drop what the client still sends, for at most REFUSAL_DRAIN.
    async fn drain(&self) {
        use futures::StreamExt;
        let Some(mut rest) = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take() else { return };
        let _ = tokio::time::timeout(REFUSAL_DRAIN, async { while let Some(Ok(_)) = rest.next().await {} }).await;
    }
}

impl futures::Stream for UploadBody {
    type Item = Result<Bytes, std::io::Error>;
    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        if self.over() {
            return Poll::Ready(Some(Err(std::io::Error::other("the upload is over its bound"))));
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let Some(body) = inner.as_mut() else { return Poll::Ready(None) };
        match std::pin::Pin::new(body).poll_next(cx) {
            Poll::Ready(Some(Ok(b))) => {
                self.read.fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(std::io::Error::other(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

async fn receive_upload(g: &Arc<Guest>, req: Request, spool: &mut Option<PathBuf>) -> Response {
    let max = g.bounds.max_upload;
    let (parts, body) = req.into_parts();
    let body = UploadBody::new(body, max.saturating_add(UPLOAD_FORM_OVERHEAD));
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > body.limit) {
        body.drain().await;
        return too_large(max, "the body's Content-Length");
    }
    let need = || json_at(400, json!({"error": "file_path and file_data are required"}));
    let mut mp = match Multipart::from_request(Request::from_parts(parts, Body::from_stream(body.clone())), g).await {
        Ok(m) => m,
        Err(_) => return need(),
    };
    let mut path: Option<PathBuf> = None;
    let mut written: Option<(PathBuf, u64)> = None;
    let result: Result<(), UploadError> = async {
        while let Some(field) = mp.next_field().await.map_err(multipart_error)? {
            match field.name().unwrap_or("") {
                "file_path" if path.is_none() => {
                    let raw = small_text(field, MAX_PATH_FIELD).await?;
                    let p = files::session_path(&g.acct, &raw).map_err(UploadError::Body)?;
                    if let Some(tmp) = spool.take() {
                        let n = place_spooled(g, &tmp, &p).await;
                        remove_file(g, tmp).await;
                        written = Some((p.clone(), n?));
                    }
                    path = Some(p);
                }
                "file_data" if written.is_none() && spool.is_none() => match &path {
                    Some(p) => written = Some((p.clone(), write_upload(g, p, field, max).await?)),
                    None => {
                        let tmp = PathBuf::from(format!("/tmp/drums_upload_{}", g.rng.hex(16)));
                        *spool = Some(tmp.clone());
                        write_upload(g, &tmp, field, max).await?;
                    }
                },
                _ => {}
            }
        }
        Ok(())
    }
    .await;
    drop(mp);
    match result {
        // Whatever the parser made of a body cut off at its bound, the body was too large.
        Err(_) if body.over() => {
            body.drain().await;
            too_large(max, "the body")
        }
        Err(UploadError::TooLarge) => {
            body.drain().await;
            too_large(max, "file_data")
        }
        Err(UploadError::Body(e)) => json_at(400, json!({"error": e})),
        Err(UploadError::Write(e)) => json_at(500, json!({"error": format!("Failed to upload file: {e}")})),
        Ok(()) => match written {
            Some((p, n)) => {
                super::log(&format!("uploaded {} ({n} bytes)", p.display()));
                text(200, format!("File Uploaded: {n} bytes"))
            }
            None => need(),
        },
    }
}

fn too_large(max: u64, what: &str) -> Response {
    super::log(&format!("/setup/upload refused: {what} is over --max-upload ({max} bytes); nothing written"));
    json_at(413, json!({"error": format!("File too large: this guest takes uploads of at most {max} bytes (drums-guest --max-upload)")}))
}

/// A text field of at most `max` bytes, read without holding more.
async fn small_text(mut field: axum::extract::multipart::Field<'_>, max: usize) -> Result<String, UploadError> {
    let name = field.name().unwrap_or("").to_string();
    let mut b = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
        if b.len() + chunk.len() > max {
            return Err(UploadError::Body(format!("multipart field {name}: longer than {max} bytes")));
        }
        b.extend_from_slice(&chunk);
    }
    String::from_utf8(b).map_err(|_| UploadError::Body(format!("multipart field {name}: not UTF-8")))
}

/// Stream a file part into `p` (created as the user), at most `max` bytes. On any failure, including an
/// upload over the bound, the partial file and the directories made for it are removed (OSWorld removes
/// a partial upload).
async fn write_upload(g: &Arc<Guest>, p: &std::path::Path, mut field: axum::extract::multipart::Field<'_>, max: u64) -> Result<u64, UploadError> {
    use tokio::io::AsyncWriteExt;
    let (g2, p2) = (g.clone(), p.to_path_buf());
    let up = tokio::task::spawn_blocking(move || files::create_for_upload(&g2.acct, &p2))
        .await
        .map_err(|e| UploadError::Write(e.to_string()))?
        .map_err(UploadError::Write)?;
    let mut f = tokio::fs::File::from_std(up.file);
    let mut n = 0u64;
    let res: Result<(), UploadError> = async {
        while let Some(chunk) = field.chunk().await.map_err(multipart_error)? {
            n += chunk.len() as u64;
            if n > max {
                return Err(UploadError::TooLarge);
            }
            f.write_all(&chunk).await.map_err(|e| UploadError::Write(format!("{}: write: {e}", p.display())))?;
        }
        f.flush().await.map_err(|e| UploadError::Write(format!("{}: write: {e}", p.display())))?;
        f.sync_all().await.map_err(|e| UploadError::Write(format!("{}: fsync: {e}", p.display())))
    }
    .await;
    drop(f);
    if let Err(e) = res {
        let (g2, p2) = (g.clone(), p.to_path_buf());
        let _ = tokio::task::spawn_blocking(move || files::remove_upload(&g2.acct, &p2, &up.made_dirs)).await;
        return Err(e);
    }
    Ok(n)
}

/// Copy a spooled upload into its file, created as the user exactly as an upload in the usual order
/// creates it (a rename would replace a file the user may not write). A failed copy is removed as a failed
/// upload is.
async fn place_spooled(g: &Arc<Guest>, tmp: &std::path::Path, p: &std::path::Path) -> Result<u64, UploadError> {
    let (g2, tmp2, p2) = (g.clone(), tmp.to_path_buf(), p.to_path_buf());
    let r = tokio::task::spawn_blocking(move || -> Result<u64, String> {
        let mut up = files::create_for_upload(&g2.acct, &p2)?;
        let copied = super::user::with_fs_identity(&g2.acct, || -> std::io::Result<u64> {
            let mut from = std::fs::File::open(&tmp2)?;
            let n = std::io::copy(&mut from, &mut up.file)?;
            up.file.sync_all()?;
            Ok(n)
        });
        copied.map_err(|e| {
            files::remove_upload(&g2.acct, &p2, &up.made_dirs);
            format!("{}: write: {e}", p2.display())
        })
    })
    .await
    .map_err(|e| UploadError::Write(e.to_string()))?;
    r.map_err(UploadError::Write)
}

// ---- Drums' own --------------------------------------------------------------------------------------

async fn rng_status(State(g): G) -> Response {
    let (generation, fingerprint) = g.rng.status();
    json_at(200, json!({"generation": generation, "fingerprint": fingerprint, "pid": std::process::id()}))
}
