//! The desktop's wallpaper through gsettings: /wallpaper and /setup/change_wallpaper.
#![allow(clippy::result_large_err)]

use crate::exec::{self, RunError, Spec};
use crate::{files, Guest};
use axum::body::Bytes;
use axum::extract::State;
use axum::response::Response;
use std::sync::Arc;
use std::time::Duration;
use super::{G, exists_for_user, blocking, which};
use super::answers::{text, html_error};
use super::request::{object_with_path, os_error_text, lossy};

use super::transfer::stream_file;

pub(super) const GSETTINGS_TIMEOUT: Duration = Duration::from_secs(30);

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
pub(super) async fn wallpaper(State(g): G) -> Response {
    let uri = match gsettings(&g, &["get", "org.gnome.desktop.background", "picture-uri"]).await {
        Ok(u) => u.trim().replace("file://", "").replace('\'', ""),
        Err(e) => {
            crate::log(&format!("/wallpaper: {e}"));
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
pub(super) async fn change_wallpaper(State(g): G, body: Bytes) -> Response {
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

