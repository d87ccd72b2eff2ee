//! Telemetry of a session's cgroups: the limits as the kernel reports them, and samples of what the
//! session uses (`cgroup_sample` records).

use super::files::read_procs;
use super::section::require_section;
use super::{backend_of, Backend, Figures, Section, Version};
use crate::error::Result;
use crate::record::Session;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

crate::record_type!(SampleType = "cgroup_sample");
/// The `type` of a telemetry record.
pub const SAMPLE: &str = SampleType::NAME;

/// One telemetry record (docs/record.md, "cgroup telemetry"): which session and when, then the figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: SampleType,
    pub session: String,
    pub version: Version,
    /// Counts from 0 within one `watch`.
    pub seq: u64,
    pub t: f64,
    /// The record's init, with its start time, is alive; None: the record has no `ns`.
    pub init_alive: Option<bool>,
    /// In `watch`'s samples only: true on the last, taken after the session ended.
    #[serde(rename = "final", default, skip_serializing_if = "Option::is_none")]
    pub last: Option<bool>,
    /// Memory current and peak, CPU time, throttling, tasks and processes, OOM kills; `why_null`.
    #[serde(flatten)]
    pub figures: Figures,
}

/// The limits as the kernel reports them now.
pub fn read_back(session: &Session) -> Result<Figures> {
    Ok(backend_of(&require_section(session)?).read_back())
}

/// One telemetry record: memory current and peak, CPU time, throttling, tasks and processes, OOM kills.
pub fn sample(session: &Session) -> Result<Sample> {
    let sec = require_section(session)?;
    Ok(sample_with(session, &sec, backend_of(&sec).as_ref(), 0))
}

/// The policy tables' counters read once for many sessions (crate::net::egress::all_counters); None: nft
/// could not list them.
pub type AllCounters = Option<std::collections::HashMap<String, serde_json::Map<String, serde_json::Value>>>;

/// `sample` for a reader of many sessions at once: the network counters from `all`, read once for all of
/// them, instead of one `nft` run per session.
pub fn sample_among(session: &Session, all: &AllCounters) -> Result<Sample> {
    let sec = require_section(session)?;
    Ok(sample_counted(session, &sec, backend_of(&sec).as_ref(), 0, |alive| net_counters_among(session, alive, all)))
}

fn init_alive(session: &Session) -> Option<bool> {
    session.ns.as_ref().map(|ns| crate::proc::alive(ns.init_pid, ns.init_start_time))
}

fn sample_with(session: &Session, sec: &Section, b: &dyn Backend, seq: u64) -> Sample {
    sample_counted(session, sec, b, seq, |alive| net_counters(session, alive))
}

type Counters = std::result::Result<serde_json::Map<String, serde_json::Value>, String>;

fn sample_counted(session: &Session, sec: &Section, b: &dyn Backend, seq: u64, counters: impl FnOnce(Option<bool>) -> Counters) -> Sample {
    let mut f = b.sample();
    match read_procs(b.fs(), b.procs_dir()) {
        Ok(p) => f.put("processes", Ok(p.len() as u64)),
        Err(e) => f.null("processes", e.to_string()),
    }
    let alive = init_alive(session);
    let net = counters(alive);
    let c = |k: &str| net.as_ref().map_err(Clone::clone).and_then(|m| m.get(k).and_then(serde_json::Value::as_u64).ok_or_else(|| format!("the session's table has no counter {k}")));
    f.put("net_bytes_out", c("bytes_out"));
    f.put("net_bytes_in", c("bytes_in"));
    f.put("net_conns_out", c("conns_out_packets"));
    f.put("net_conns_in", c("conns_in_packets"));
    f.put("net_refused", c("refused_packets"));
    Sample {
        drums: crate::record::VERSION,
        kind: SampleType::Tag,
        session: session.id.clone(),
        version: sec.version,
        seq,
        t: crate::state::now(),
        init_alive: alive,
        last: None,
        figures: f,
    }
}

/// The counters of the session's policy table (crate::net::egress), read now: the policy may have changed
/// since the record was written (drums-net set). Err(why) when there is nothing to read.
fn net_counters(session: &Session, alive: Option<bool>) -> Counters {
    let net = session.net.as_ref().ok_or("the record has no net section")?;
    if alive == Some(false) {
        // Its slot, and so its table's name, may be another session's by now.
        return Err("the session has ended".into());
    }
    crate::net::egress::counters(net.slot).ok_or_else(|| no_table(net.slot))
}

fn net_counters_among(session: &Session, alive: Option<bool>, all: &AllCounters) -> Counters {
    let net = session.net.as_ref().ok_or("the record has no net section")?;
    if alive == Some(false) {
        return Err("the session has ended".into());
    }
    all.as_ref().and_then(|m| m.get(&crate::net::egress::table_name(net.slot))).cloned().ok_or_else(|| no_table(net.slot))
}

fn no_table(slot: u32) -> String {
    format!("no table inet {}: policy none, nothing leaves the session to be counted (or nft could not list it)", crate::net::egress::table_name(slot))
}

/// Sample every `interval` until the session ends: its init is gone (or, for a record without
/// namespaces, its cgroup holds no process), the cgroup is removed, or `max_samples` were taken. The
/// last sample is taken after the end and has `"final": true`. Returns the number of samples.
pub fn watch(session: &Session, interval: Duration, max_samples: Option<u64>, mut emit: impl FnMut(&Sample) -> Result<()>) -> Result<u64> {
    let sec = require_section(session)?;
    let b = backend_of(&sec);
    let mut seq = 0u64;
    let mut next = Instant::now();
    loop {
        let ended = match init_alive(session) {
            Some(alive) => !alive,
            None => read_procs(b.fs(), b.procs_dir()).map(|p| p.is_empty()).unwrap_or(true),
        };
        let gone = !b.fs().exists(b.procs_dir());
        let last = ended || gone || max_samples.is_some_and(|m| seq + 1 >= m);
        let mut v = sample_with(session, &sec, b.as_ref(), seq);
        v.last = Some(last);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The record's JSON is that of the head and the figures side by side, as docs/record.md lists it.
    #[test]
    fn a_sample_is_its_head_and_its_figures() {
        let mut f = Figures::default();
        f.put("memory_current_bytes", Ok(4096));
        f.null("tasks_peak", "pids.peak: absent");
        let s = Sample { drums: 1, kind: SampleType::Tag, session: "d-1".into(), version: Version::V2, seq: 3, t: 1.5, init_alive: Some(true), last: Some(false), figures: f };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v,
            json!({"drums": 1, "type": "cgroup_sample", "session": "d-1", "version": "v2", "seq": 3, "t": 1.5, "init_alive": true, "final": false,
                   "memory_current_bytes": 4096, "tasks_peak": null, "why_null": {"tasks_peak": "pids.peak: absent"}})
        );
        assert_eq!(serde_json::from_value::<Sample>(v).unwrap(), s);
        let one = Sample { last: None, init_alive: None, ..s };
        let v = serde_json::to_value(&one).unwrap();
        assert!(v.get("final").is_none() && v["init_alive"].is_null(), "{v}");
        assert_eq!(serde_json::from_value::<Sample>(v).unwrap(), one);
    }
}
