//! The answers' shapes: Flask's text and JSON answers, OSWorld's 400s and HTML error pages.
#![allow(clippy::result_large_err)]

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// Flask's `return "text"`: text/html.
pub(super) fn text(code: u16, s: impl Into<String>) -> Response {
    let mut r = (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), s.into()).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    r
}

pub(super) fn json_at(code: u16, v: Value) -> Response {
    (StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), Json(v)).into_response()
}

pub(super) fn bad(msg: impl Into<String>) -> Response {
    json_at(400, json!({"status": "error", "message": msg.into()}))
}

pub(super) fn html_error(code: u16, title: &str, detail: &str) -> Response {
    text(code, format!("<!doctype html>\n<html lang=en>\n<title>{code} {title}</title>\n<h1>{title}</h1>\n<p>{detail}</p>\n"))
}

pub(super) async fn not_found() -> Response {
    html_error(404, "Not Found", "No such endpoint on this guest server (see drums-guest(1) for the list).")
}

pub(super) async fn method_not_allowed() -> Response {
    html_error(405, "Method Not Allowed", "This endpoint does not take this method (see drums-guest(1)).")
}
