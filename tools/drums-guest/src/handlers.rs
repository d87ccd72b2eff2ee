//! The endpoints. Each answers with the method, status code and body shape of OSWorld's server; where
//! OSWorld would crash on a bad request (a 500 from an exception), the guest answers 400 and says why.
// A request check's error is the finished answer, returned once per request: its size does not matter.
#![allow(clippy::result_large_err)]

use super::exec;
use super::{display, Guest};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod answers;
mod commands;
mod desktop;
mod recording;
mod request;
mod transfer;
mod wallpaper;

use answers::{json_at, not_found, method_not_allowed};
use commands::{execute, execute_with_verification, launch, run_python, run_bash_script};
use desktop::{screenshot, screen_size, cursor_position, window_size, platform, terminal, accessibility, activate_window, close_window, open_file};
use recording::{RECORDER_START, RECORDER_STOP, RECORDING_READY, start_recording, end_recording};
use wallpaper::{GSETTINGS_TIMEOUT, wallpaper, change_wallpaper};
use transfer::{desktop_path, list_directory, file, upload};

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
// ---- shared by the endpoints ------------------------------------------------------------------------

/// Whether `p` exists as the user sees it (their permissions on the way to it); false if that cannot be told.
async fn exists_for_user(g: &Arc<Guest>, p: &std::path::Path) -> bool {
    let (g, p) = (g.clone(), p.to_path_buf());
    blocking(move || crate::user::with_fs_identity(&g.acct, || p.exists())).await.unwrap_or(false)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Response> {
    tokio::task::spawn_blocking(f).await.map_err(|e| json_at(500, json!({"status": "error", "message": format!("internal: {e}")})))
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

fn fmt_secs(t: f64) -> String {
    if t.fract() == 0.0 {
        format!("{}", t as u64)
    } else {
        format!("{t}")
    }
}

// ---- Drums' own --------------------------------------------------------------------------------------

async fn rng_status(State(g): G) -> Response {
    let (generation, fingerprint) = g.rng.status();
    json_at(200, json!({"generation": generation, "fingerprint": fingerprint, "pid": std::process::id()}))
}
