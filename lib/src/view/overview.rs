//! What the overview page shows (docs/view.md, `GET /api/overview`): every session with its owner, age,
//! checkpoint, image, readiness and cgroup figures, every pool, checkpoint and root image with what uses
//! it. Read from the records the tools wrote (each session's `record.json`, each checkpoint's
//! `checkpoint.json`, each image's `image.json`, the pools' spools) and from the kernel (cgroup figures,
//! liveness), each time it is asked: nothing of it is kept but the recent figures a plot needs.

use crate::record::Session;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};

crate::record_type!(OverviewType = "view_overview");

#[derive(Debug, Serialize)]
pub struct Overview {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: OverviewType,
    /// When it was read, Unix seconds.
    pub t: f64,
    /// Seconds the whole read took (wall clock).
    pub read_s: f64,
    pub sessions: Vec<SessionView>,
    pub pools: Vec<Value>,
    pub checkpoints: Vec<Value>,
    pub images: Vec<Value>,
}

#[derive(Debug, Serialize, Clone)]
pub struct SessionView {
    pub id: String,
    /// `cold` (no restore section) or `restored`.
    pub kind: &'static str,
    /// `live`, `parked` (frozen in a pool), `taken` (handed out by a pool), `dead` (its init is gone:
    /// the sweep's work) or `starting` (no namespaces yet).
    pub state: &'static str,
    pub created_at: f64,
    pub age_s: f64,
    /// The owner process and whether it is alive (a dead owner makes the session an orphan).
    pub owner: Value,
    /// The checkpoint it was restored from (or whose pool holds it); null: a cold session.
    pub checkpoint: Option<String>,
    /// The root image's name and directory; null: the record names none.
    pub image: Option<Value>,
    /// drums-ready's verdict as last recorded, with when; null: never checked.
    pub ready: Option<bool>,
    pub ready_checked_at: Option<f64>,
    pub session_addr: Option<String>,
    pub guest_url: Option<String>,
    /// Display number and size; null: no desktop yet.
    pub display: Option<Value>,
    /// The VNC server (drums-view vnc): null when none runs.
    pub vnc: Option<Value>,
    /// The cgroup sample (docs/record.md, "cgroup telemetry") with `cpu_share`, or null with `cgroup_why_null`.
    pub cgroup: Option<Value>,
    pub cgroup_why_null: Option<String>,
    /// The last minutes' figures: [t, memory_current_bytes, cpu_share] per read (cpu_share null on the
    /// first read of a session).
    pub history: Vec<(f64, Option<u64>, Option<f64>)>,
}

/// Figures kept between reads: the CPU time at the last read (for a share) and the recent points.
#[derive(Default)]
pub struct Watcher {
    last_cpu: HashMap<String, (f64, u64)>,
    history: HashMap<String, VecDeque<(f64, Option<u64>, Option<f64>)>>,
}

/// How long a session's points are kept (the page plots the last minutes).
const HISTORY_S: f64 = 300.0;

impl Watcher {
    /// Read everything now.
    pub fn read(&mut self) -> Overview {
        let t0 = std::time::Instant::now();
        let now = crate::state::now();
        let vnc = vnc_servers();
        let counters = crate::net::egress::all_counters();
        let mut sessions: Vec<SessionView> = session_records().into_iter().map(|s| self.session_view(&s, now, &vnc, &counters)).collect();
        sessions.sort_by(|a, b| a.created_at.partial_cmp(&b.created_at).unwrap_or(std::cmp::Ordering::Equal).then(a.id.cmp(&b.id)));
        let live: std::collections::HashSet<&str> = sessions.iter().map(|s| s.id.as_str()).collect();
        self.last_cpu.retain(|k, _| live.contains(k.as_str()));
        self.history.retain(|k, _| live.contains(k.as_str()));
        let pools: Vec<Value> = crate::pool::spools().iter().map(|s| serde_json::to_value(crate::pool::status(s)).unwrap_or(Value::Null)).collect();
        let checkpoints = checkpoints(&sessions, &pools);
        let images = crate::image::list()
            .into_iter()
            .map(|l| json!({"name": l.record.name, "dir": l.record.dir, "digest": l.record.digest, "bytes": l.record.bytes, "files": l.record.files, "current": l.current, "used_by": l.used_by}))
            .collect();
        Overview { drums: crate::record::VERSION, kind: OverviewType::Tag, t: now, read_s: t0.elapsed().as_secs_f64(), sessions, pools, checkpoints, images }
    }

    fn session_view(&mut self, s: &Session, now: f64, vnc: &HashMap<u64, Value>, counters: &crate::cgroup::AllCounters) -> SessionView {
        let alive = s.ns.as_ref().map(|ns| crate::proc::alive(ns.init_pid, ns.init_start_time));
        let state = match (&s.pool, alive) {
            (_, None) => "starting",
            (_, Some(false)) => "dead",
            (Some(p), Some(true)) if p.taken_at.is_none() => "parked",
            (Some(_), Some(true)) => "taken",
            (None, Some(true)) => "live",
        };
        let (cgroup, why) = if alive == Some(true) && s.cgroup.is_some() {
            match crate::cgroup::sample_among(s, counters) {
                Ok(sample) => {
                    let cpu = sample.figures.get("cpu_usage_ns");
                    let mem = sample.figures.get("memory_current_bytes");
                    let share = match (cpu, self.last_cpu.get(&s.id)) {
                        (Some(c), Some((t, c0))) if sample.t > *t && c >= *c0 => Some((c - c0) as f64 / 1e9 / (sample.t - t)),
                        _ => None,
                    };
                    if let Some(c) = cpu {
                        self.last_cpu.insert(s.id.clone(), (sample.t, c));
                    }
                    let h = self.history.entry(s.id.clone()).or_default();
                    h.push_back((sample.t, mem, share));
                    while h.front().is_some_and(|p| p.0 < now - HISTORY_S) {
                        h.pop_front();
                    }
                    let mut v = serde_json::to_value(&sample).unwrap_or(Value::Null);
                    v["cpu_share"] = json!(share);
                    if share.is_none() {
                        v["why_null"]["cpu_share"] = json!("a share needs two reads of cpu_usage_ns; this is the first");
                    }
                    if let Some(sec) = &s.cgroup {
                        v["limits"] = serde_json::to_value(&sec.requested).unwrap_or(Value::Null);
                    }
                    (Some(v), None)
                }
                Err(e) => (None, Some(e.to_string())),
            }
        } else if s.cgroup.is_none() {
            (None, Some("the session has no cgroups (drums-cgroup create was not run)".to_string()))
        } else {
            (None, Some("the session's init is not running".to_string()))
        };
        let checkpoint = s.restore.as_ref().map(|r| r.checkpoint.clone()).or_else(|| s.pool.as_ref().map(|p| p.checkpoint.clone()));
        let image = s.overlay.as_ref().and_then(|o| o.image.as_ref()).map(|i| json!({"name": i.name, "dir": i.dir}));
        SessionView {
            id: s.id.clone(),
            kind: if s.restore.is_some() { "restored" } else { "cold" },
            state,
            created_at: s.created_at,
            age_s: (now - s.created_at).max(0.0),
            owner: json!({"pid": s.owner.pid, "alive": crate::proc::alive(s.owner.pid, s.owner.start_time)}),
            checkpoint,
            image,
            ready: s.ready.as_ref().map(|r| r.ready),
            ready_checked_at: s.ready.as_ref().map(|r| r.checked_at),
            session_addr: s.net.as_ref().map(|n| n.session_addr.clone()),
            guest_url: s.desktop.as_ref().and_then(|d| d.guest_url.clone()),
            display: s.desktop.as_ref().map(|d| json!({"display": d.display, "width": d.width, "height": d.height})),
            vnc: s.ns.as_ref().and_then(|ns| vnc.get(&ns.inodes.pid)).cloned(),
            cgroup,
            cgroup_why_null: why,
            history: self.history.get(&s.id).map(|h| h.iter().copied().collect()).unwrap_or_default(),
        }
    }
}

/// Every session's latest record (`<state>/sessions/ID/record.json`); a directory without one (a
/// session being made, or a broken one the sweep will see) is left out.
pub fn session_records() -> Vec<Session> {
    let Ok(rd) = std::fs::read_dir(crate::state::sessions_root()) else { return vec![] };
    rd.flatten().filter_map(|e| crate::session_io::find(e.file_name().to_str()?).ok().flatten()).collect()
}

/// The VNC servers running in sessions, by PID namespace inode, from one scan of /proc: the page reads
/// this every second, and a scan per session would cost a /proc walk each.
fn vnc_servers() -> HashMap<u64, Value> {
    use std::os::unix::fs::MetadataExt;
    let mut out = HashMap::new();
    for pid in crate::proc::pids() {
        if crate::proc::comm(pid) != "x11vnc" {
            continue;
        }
        let Ok(m) = std::fs::metadata(format!("/proc/{pid}/ns/pid")) else { continue };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let input = !cmdline.split(|b| *b == 0).any(|a| a == b"-viewonly");
        out.insert(m.ino(), json!({"host_pid": pid, "port": super::VNC_PORT, "input": input}));
    }
    out
}

/// Every checkpoint under the checkpoint root, with the live sessions restored from it and its pool.
fn checkpoints(sessions: &[SessionView], pools: &[Value]) -> Vec<Value> {
    let mut by_ckpt: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for s in sessions {
        if let Some(c) = &s.checkpoint {
            by_ckpt.entry(c.clone()).or_default().push(s.id.clone());
        }
    }
    let Ok(rd) = std::fs::read_dir(crate::state::checkpoint_root()) else { return vec![] };
    let mut out: Vec<Value> = rd
        .flatten()
        .filter_map(|e| {
            let id = e.file_name().to_str()?.to_string();
            let c = crate::session_io::load_checkpoint(&id).ok()?;
            let pool = pools.iter().find(|p| p["checkpoint"] == json!(id)).cloned();
            Some(json!({
                "id": id,
                "dir": c.dir,
                "created_at": c.created_at,
                "image": c.image.as_ref().map(|i| json!({"name": i.name, "dir": i.dir})),
                "image_bytes": c.image_bytes,
                "layer_bytes": c.layer_bytes,
                "dump_s": c.dump_s,
                "source": c.source.session,
                "sessions": by_ckpt.get(&id).cloned().unwrap_or_default(),
                "pool": pool,
            }))
        })
        .collect();
    out.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    out
}
