//! Recording the display: /start_recording and /end_recording (ffmpeg's x11grab, as the user).
#![allow(clippy::result_large_err)]

use crate::exec;
use crate::{display, files, Guest};
use axum::extract::State;
use axum::response::Response;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use super::{G, blocking, which};
use super::answers::{json_at, html_error};
use super::request::os_error_text;

use super::transfer::stream_file;

/// Where OSWorld's server records (`tempfile.gettempdir()`), inside the session.
const RECORDING_PATH: &str = "/tmp/osworld_recording.mp4";
/// A recorder has started once it has written the MP4's header, which ffmpeg does when the first frame
/// reaches the encoder: a `q` before that leaves an MP4 with no frame (seen on a fresh host, whose first
/// ffmpeg took seconds to load). /end_recording waits RECORDER_STOP for the file to be finished after `q`,
/// then RECORDING_READY for it to be there.
pub(super) const RECORDER_START: Duration = Duration::from_secs(10);
pub(super) const RECORDER_STOP: Duration = Duration::from_secs(15);
pub(super) const RECORDING_READY: Duration = Duration::from_secs(3);

/// POST /start_recording: ffmpeg's x11grab of the session's display, as the user, into RECORDING_PATH.
/// Without ffmpeg in the session's image the answer is an immediate 500 saying so (OSWorld's server
/// answers the same). The answer comes once ffmpeg has captured its first frame (the MP4's header is
/// written), so a stop right after it still gives frames; a recorder that dies first, or captures nothing
/// within 10 s, is a 500 with its standard error.
pub(super) async fn start_recording(State(g): G) -> Response {
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
    let removed = blocking(move || crate::user::with_fs_identity(&g2.acct, || match std::fs::remove_file(&o2) {
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
pub(super) async fn end_recording(State(g): G) -> Response {
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
