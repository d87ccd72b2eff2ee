//! Request bodies read as OSWorld's server reads them (JSON objects, its command forms) and command outputs answered as it answers them.
#![allow(clippy::result_large_err)]

use crate::exec;
use crate::Guest;
use axum::body::Bytes;
use axum::response::Response;
use serde_json::{json, Map, Value};

use super::answers::{text, bad};

/// The body as a JSON object, whatever the Content-Type says (OSWorld's clients always send JSON).
pub(super) fn json_object(body: &Bytes) -> Result<Map<String, Value>, Response> {
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
pub(super) fn object_with_path(body: &Bytes) -> Result<(Map<String, Value>, String), Response> {
    let m = json_object(body)?;
    match opt_str(&m, "path")? {
        Some(p) if !p.is_empty() => {
            let p = p.to_string();
            Ok((m, p))
        }
        _ => Err(text(400, "Path not supplied!")),
    }
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn opt_bool(m: &Map<String, Value>, k: &str) -> Result<bool, Response> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(bad(format!("field `{k}` must be a boolean, got {}", kind(v)))),
    }
}

pub(super) fn opt_str<'a>(m: &'a Map<String, Value>, k: &str) -> Result<Option<&'a str>, Response> {
    match m.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(bad(format!("field `{k}` must be a string, got {}", kind(v)))),
    }
}

pub(super) fn opt_number(m: &Map<String, Value>, k: &str, default: f64) -> Result<f64, Response> {
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
pub(super) fn command_request(g: &Guest, body: &Bytes) -> Result<(Map<String, Value>, Vec<String>, String), Response> {
    let m = json_object(body)?;
    let (argv, shown) = parse_command(g, &m)?;
    Ok((m, argv, shown))
}

/// A list of strings as Python prints it, for messages that quote a command the way OSWorld's do.
pub(super) fn py_list(items: &[String]) -> String {
    let q: Vec<String> = items.iter().map(|s| format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))).collect();
    format!("[{}]", q.join(", "))
}

/// Python's text for an OSError, which OSWorld returns as the message.
pub(super) fn os_error_text(e: &std::io::Error, program: &str) -> String {
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

pub(super) fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub(super) fn max_output(g: &Guest) -> usize {
    usize::try_from(g.bounds.max_output).unwrap_or(usize::MAX)
}

/// A command's answer with its streams cut at --max-output said: the answer gains `truncated`, naming
/// each cut stream by the answer's own field (`output` for stdout, `error` for stderr) with the bytes
/// kept and dropped, and the guest logs it. OSWorld's fields keep their shape: a cut stream is its first
/// bytes.
pub(super) fn noting_truncation(mut answer: Value, endpoint: &str, o: &exec::Outcome) -> Value {
    let mut cut = Map::new();
    for (field, kept, dropped) in [("output", o.stdout.len(), o.stdout_dropped), ("error", o.stderr.len(), o.stderr_dropped)] {
        if dropped > 0 {
            crate::log(&format!("{endpoint}: {field} truncated at --max-output: kept {kept} bytes, dropped {dropped}"));
            cut.insert(field.into(), json!({"kept_bytes": kept, "dropped_bytes": dropped}));
        }
    }
    if !cut.is_empty() {
        answer["truncated"] = Value::Object(cut);
    }
    answer
}
