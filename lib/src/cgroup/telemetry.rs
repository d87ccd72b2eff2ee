//! Telemetry of a session's cgroups: the limits as the kernel reports them, and samples of what the
//! session uses (`cgroup_sample` records).

use super::files::read_procs;
use super::section::require_section;
use super::{backend_of, Backend, Section};
use crate::error::Result;
use crate::record::Session;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The limits as the kernel reports them now.
pub fn read_back(session: &Session) -> Result<Value> {
    Ok(backend_of(&require_section(session)?).read_back().into_value())
}

/// One telemetry record: memory current and peak, CPU time, throttling, tasks and processes, OOM kills.
pub fn sample(session: &Session) -> Result<Value> {
    let sec = require_section(session)?;
    Ok(sample_with(session, &sec, backend_of(&sec).as_ref(), 0))
}

fn init_alive(session: &Session) -> Option<bool> {
    session.ns.as_ref().map(|ns| crate::proc::alive(ns.init_pid, ns.init_start_time))
}

fn sample_with(session: &Session, sec: &Section, b: &dyn Backend, seq: u64) -> Value {
    let mut f = b.sample();
    match read_procs(b.procs_dir()) {
        Ok(p) => f.put("processes", Ok(p.len() as u64)),
        Err(e) => f.null("processes", e.to_string()),
    }
    let mut v = f.into_value();
    let head = json!({
        "drums": crate::record::VERSION,
        "type": "cgroup_sample",
        "session": session.id,
        "version": sec.version,
        "seq": seq,
        "t": crate::state::now(),
        "init_alive": init_alive(session),
    });
    if let (Value::Object(h), Value::Object(body)) = (head, &mut v) {
        for (k, x) in h.into_iter().rev() {
            body.insert(k, x);
        }
    }
    v
}

/// Sample every `interval` until the session ends: its init is gone (or, for a record without
/// namespaces, its cgroup holds no process), the cgroup is removed, or `max_samples` were taken. The
/// last sample is taken after the end and has `"final": true`. Returns the number of samples.
pub fn watch(session: &Session, interval: Duration, max_samples: Option<u64>, mut emit: impl FnMut(&Value) -> Result<()>) -> Result<u64> {
    let sec = require_section(session)?;
    let b = backend_of(&sec);
    let mut seq = 0u64;
    let mut next = Instant::now();
    loop {
        let ended = match init_alive(session) {
            Some(alive) => !alive,
            None => read_procs(b.procs_dir()).map(|p| p.is_empty()).unwrap_or(true),
        };
        let gone = !b.procs_dir().exists();
        let last = ended || gone || max_samples.is_some_and(|m| seq + 1 >= m);
        let mut v = sample_with(session, &sec, b.as_ref(), seq);
        v["final"] = json!(last);
        emit(&v)?;
        seq += 1;
        if last {
            return Ok(seq);
        }
        next += interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}
