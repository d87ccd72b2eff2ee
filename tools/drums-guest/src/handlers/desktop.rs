//! The display and its windows: screenshots, sizes, the pointer, accessibility, activating, closing and opening windows.
#![allow(clippy::result_large_err)]

use crate::exec;
use crate::{display, files, Guest};
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use super::{G, OPEN_DEFAULT_TIMEOUT, exists_for_user, blocking, which, fmt_secs};
use super::answers::{text, json_at};
use super::request::{json_object, object_with_path, opt_bool, opt_str, opt_number, py_list, os_error_text};

use super::transfer::required_form_field;

pub(super) async fn screenshot(State(g): G) -> Response {
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

pub(super) async fn screen_size(State(g): G) -> Response {
    let d = g.display.clone();
    match blocking(move || display::screen_size(&d)).await {
        Ok(Ok((w, h))) => json_at(200, json!({"width": w, "height": h})),
        Ok(Err(e)) => json_at(500, json!({"status": "error", "message": e})),
        Err(r) => r,
    }
}

pub(super) async fn cursor_position(State(g): G) -> Response {
    let d = g.display.clone();
    match blocking(move || display::pointer(&d)).await {
        Ok(Ok((x, y))) => json_at(200, json!([x, y])),
        Ok(Err(e)) => json_at(500, json!({"status": "error", "message": e})),
        Err(r) => r,
    }
}

/// Form field `app_class_name`: the size of the first client window whose WM_CLASS has it (ignoring case).
pub(super) async fn window_size(State(g): G, req: Request) -> Response {
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

pub(super) async fn platform() -> Response {
    text(200, "Linux")
}

/// OSWorld reads a focused gnome-terminal through AT-SPI; sessions have no gnome-terminal, so the answer
/// is OSWorld's "no active terminal". Harnesses poll this endpoint to see that the server is up.
pub(super) async fn terminal(State(g): G) -> Response {
    match crate::a11y::terminal(&g).await {
        Ok(out) => json_at(200, json!({"output": out, "status": "success"})),
        Err(e) => json_at(500, json!({"status": "error", "message": e})),
    }
}

pub(super) async fn accessibility(State(g): G) -> Response {
    match crate::a11y::tree(&g).await {
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

pub(super) async fn activate_window(State(g): G, body: Bytes) -> Response {
    window_endpoint(g, body, display::WindowOp::Activate, "Window activated successfully").await
}

pub(super) async fn close_window(State(g): G, body: Bytes) -> Response {
    window_endpoint(g, body, display::WindowOp::Close, "Window closed successfully.").await
}

/// Open a file with xdg-open (or start a program named on PATH), then wait for a window whose title holds
/// the file's name (or `window_name`) and activate it.
pub(super) async fn open_file(State(g): G, body: Bytes) -> Response {
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
