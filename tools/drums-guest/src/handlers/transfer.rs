//! Files between the harness and the session: /desktop_path, /list_directory, /file (download) and /setup/upload.
#![allow(clippy::result_large_err)]

use crate::{files, Guest};
use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;
use super::{G, UPLOAD_FORM_OVERHEAD, MAX_PATH_FIELD, REFUSAL_DRAIN, exists_for_user, blocking};
use super::answers::{text, json_at};
use super::request::{json_object, kind};
use super::commands::remove_file;

pub(super) async fn desktop_path(State(g): G) -> Response {
    let p = g.acct.home.join("Desktop");
    let exists = exists_for_user(&g, &p).await;
    if exists {
        json_at(200, json!({"desktop_path": p.display().to_string()}))
    } else {
        json_at(404, json!({"error": "Unsupported operating system or desktop path not found"}))
    }
}

pub(super) async fn list_directory(State(g): G, body: Bytes) -> Response {
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
pub(super) async fn required_form_field(g: &Arc<Guest>, req: Request, name: &str) -> Result<String, Response> {
    let fields = form_fields(g, req).await?;
    match fields.into_iter().find(|(k, _)| k == name) {
        Some((_, v)) => Ok(v),
        None => Err(json_at(400, json!({"error": format!("{name} is required")}))),
    }
}

pub(super) async fn file(State(g): G, req: Request) -> Response {
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
pub(super) fn stream_file(f: std::fs::File, len: u64, p: &std::path::Path, mime: &'static str) -> Response {
    crate::log(&format!("sending {} ({len} bytes)", p.display()));
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

pub(super) async fn upload(State(g): G, req: Request) -> Response {
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
pub(super) struct UploadBody {
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
                crate::log(&format!("uploaded {} ({n} bytes)", p.display()));
                text(200, format!("File Uploaded: {n} bytes"))
            }
            None => need(),
        },
    }
}

fn too_large(max: u64, what: &str) -> Response {
    crate::log(&format!("/setup/upload refused: {what} is over --max-upload ({max} bytes); nothing written"));
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
        let copied = crate::user::with_fs_identity(&g2.acct, || -> std::io::Result<u64> {
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
