//! Commands run as the user: /execute, /execute_with_verification, /setup/launch, /run_python, /run_bash_script.
#![allow(clippy::result_large_err)]

use crate::exec::{self, RunError, Spec};
use crate::{display, files, Guest};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use super::{G, EXECUTE_TIMEOUT, PYTHON_TIMEOUT, BASH_DEFAULT_TIMEOUT, exists_for_user, blocking, fmt_secs};
use super::answers::{text, json_at, bad};
use super::request::{json_object, kind, opt_str, opt_number, command_request, os_error_text, lossy, max_output, noting_truncation};

pub(super) async fn execute(State(g): G, body: Bytes) -> Response {
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
pub(super) async fn execute_with_verification(State(g): G, body: Bytes) -> Response {
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

pub(super) async fn launch(State(g): G, body: Bytes) -> Response {
    let (_, argv, shown) = match command_request(&g, &body) {
        Ok(x) => x,
        Err(r) => return r,
    };
    match exec::launch(&argv, &g.acct, &g.display) {
        Ok(pid) => {
            crate::log(&format!("launched pid {pid}: {shown}"));
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
        crate::user::with_fs_identity(&g2.acct, || {
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

pub(super) async fn remove_file(g: &Arc<Guest>, p: PathBuf) {
    let g2 = g.clone();
    let _ = tokio::task::spawn_blocking(move || files::remove_as(&g2.acct, &p)).await;
}

pub(super) async fn run_python(State(g): G, body: Bytes) -> Response {
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

pub(super) async fn run_bash_script(State(g): G, body: Bytes) -> Response {
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

