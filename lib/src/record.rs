//! The records every tool reads and writes: one JSON object per line, versioned, typed by `type`.
//! Field-by-field documentation: docs/record.md. Readers keep members they do not know (`extra`), so a
//! record passes through a stage that is older than the stage that wrote it without losing anything.

use crate::error::{Error, Result};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::PathBuf;

pub use crate::error::VERSION;
mod ids;
pub use ids::{check_checkpoint_id, check_id, check_session_id, now};
pub mod boundary;
pub mod bundle;
pub mod cgroup;
pub mod egress;
pub mod layers;
pub mod pool;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Owner {
    /// Host PID of the process that created the session (or took it from a pool).
    pub pid: i32,
    /// That process's start time in clock ticks after boot (/proc/PID/stat field 22): pid + start time
    /// names one process across PID reuse.
    pub start_time: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Overlay {
    /// The merged mount: the session's root file system as seen from the host.
    pub merged: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// The tmpfs holding upper and work.
    pub tmpfs: PathBuf,
    /// Read-only layers above the runtime layer and the root image, topmost first (a restore's
    /// checkpoint layer, then the layers given with `drums-overlay create --layer`).
    pub layers: Vec<PathBuf>,
    /// Size limit of the tmpfs, bytes.
    pub tmpfs_bytes: u64,
    /// A restored session's checkpoint's mapped files (drums-ckpt(1)), a read-only layer below `layers`
    /// shared by the siblings; null for cold sessions.
    #[serde(default)]
    pub mapped: Option<PathBuf>,
    /// Drums' programs that run inside the session, a read-only layer below `mapped` (null in records
    /// of sessions made on the host's `/` by older tools).
    #[serde(default)]
    pub runtime: Option<layers::RuntimeRef>,
    /// The root image: the lowest layer (null in records of sessions made on the host's `/` by older
    /// tools).
    #[serde(default)]
    pub image: Option<layers::ImageRef>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NsInodes {
    pub pid: u64,
    pub mnt: u64,
    pub net: u64,
    pub ipc: u64,
    pub uts: u64,
}

/// A block of host user and group ids that a session's user namespace maps its ids 0..count to
/// (crate::idrange): id N inside is host id base+N, for user and group ids alike.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdRange {
    pub base: u32,
    pub count: u32,
}

impl IdRange {
    /// The host id of id `inside`, if the range maps it.
    pub fn host(&self, inside: u32) -> Option<u32> {
        (inside < self.count).then(|| self.base + inside)
    }
    /// Whether the two ranges share an id.
    pub fn overlaps(&self, first: u64, count: u64) -> bool {
        let (a, b) = (self.base as u64, self.base as u64 + self.count as u64);
        first < b && a < first + count
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Namespaces {
    /// Host PID of the session's init (PID 1 inside).
    pub init_pid: i32,
    /// Start time of the init, clock ticks after boot.
    pub init_start_time: u64,
    pub hostname: String,
    /// Namespace inode numbers as the kernel reports them (/proc/PID/ns/*).
    pub inodes: NsInodes,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Net {
    /// Index in the address pool (docs/record.md, "Addresses").
    pub slot: u32,
    /// Host end of the veth pair, in the root network namespace.
    pub host_if: String,
    /// Session end of the veth pair, inside the session.
    pub session_if: String,
    pub host_addr: String,
    pub session_addr: String,
    pub prefix_len: u8,
    /// MAC address of the session end.
    pub session_mac: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SessionProcess {
    pub role: String,
    /// PID inside the session's PID namespace.
    pub pid: i32,
    /// PID as seen from the host, at the time it was recorded; null when it could not be found (the
    /// process had already exited, or a restore did not bring it back).
    #[serde(default)]
    pub host_pid: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Desktop {
    /// X display number: DISPLAY=:N inside the session.
    pub display: u32,
    pub width: u32,
    pub height: u32,
    pub depth: u32,
    /// The X server's abstract socket, `@/tmp/.X11-unix/XN` (reachable from the session's network
    /// namespace); no other form is accepted.
    pub x_socket: String,
    /// The page Chromium shows.
    pub url: String,
    /// The page title the readiness rule expects.
    pub title: String,
    /// Chromium's DevTools port on the session's loopback.
    pub devtools_port: u16,
    /// The guest server as the host reaches it, or null when no guest was started.
    pub guest_url: Option<String>,
    pub processes: Vec<SessionProcess>,
    /// Versions of what makes the session: kernel, Xvfb, openbox, Chromium, CRIU, drums.
    pub manifest: Map<String, Value>,
    /// Seconds `drums-desktop start` took.
    pub start_s: f64,
    /// Whether Xvfb offers the MIT-SHM extension (`drums-desktop start --mit-shm`). Absent in records of
    /// sessions made before the option existed, which had it.
    #[serde(default = "yes")]
    pub mit_shm: bool,
    /// Whether Xvfb offers the GLX extension (`drums-desktop start --glx`). Absent in records of sessions
    /// made before the option existed, which had it.
    #[serde(default = "yes")]
    pub glx: bool,
    /// The account the desktop's processes run as (null in records of older tools, whose desktop ran as
    /// root).
    #[serde(default)]
    pub user: Option<String>,
    /// The account the guest runs as; null: no guest (or an older record).
    #[serde(default)]
    pub guest_user: Option<String>,
    /// Whether the desktop's Chromium runs its own sandbox (its command line has no `--no-sandbox`), read
    /// from the running browser when drums-desktop started or restarted it; a restored sibling keeps its
    /// checkpoint's value, which is false (drums(7), "Chromium's sandbox"). Null: no Chromium, or a
    /// record of older tools.
    #[serde(default)]
    pub chromium_sandbox: Option<bool>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Ready {
    pub ready: bool,
    /// Seconds from the first poll until both conditions held; null when not ready.
    pub ready_s: Option<f64>,
    /// Fraction of the screen's pixels found different from a blank desktop at the last poll. The screen
    /// is read from the top in bands until more than the threshold is found, so when ready this is a
    /// lower bound (`rows_read` < the screen's height); with a PNG it is the whole screen's.
    pub changed_fraction: Option<f64>,
    /// Rows of the screen read at the last poll (absent in older records).
    #[serde(default)]
    pub rows_read: Option<u16>,
    pub threshold: f64,
    pub title_expected: String,
    /// Window titles seen at the last poll (client windows of the window manager).
    pub titles_seen: Vec<String>,
    pub polls: u32,
    /// The screenshot saved as evidence, if asked for.
    pub png: Option<PathBuf>,
    /// Which conditions did not hold at the last poll: "pixels", "title", "display".
    pub failed: Vec<String>,
    /// Unix time of the check.
    pub checked_at: f64,
}

/// A session: everything the tools know of one desktop session. Each stage fills in its section.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Session {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: SessionType,
    pub id: String,
    pub state_dir: PathBuf,
    /// Unix seconds.
    pub created_at: f64,
    pub owner: Owner,
    /// Seconds after the ledger's first line (its `t`, a moment before `created_at`) when the sweep may
    /// destroy the session; null: no limit.
    #[serde(default)]
    pub ttl_s: Option<u64>,
    #[serde(default)]
    pub overlay: Option<Overlay>,
    #[serde(default)]
    pub ns: Option<Namespaces>,
    #[serde(default)]
    pub net: Option<Net>,
    #[serde(default)]
    pub desktop: Option<Desktop>,
    #[serde(default)]
    pub ready: Option<Ready>,
    /// A warm pool's sibling: parked, or taken (drums-pool(1)).
    #[serde(default)]
    pub pool: Option<pool::Section>,
    /// The session's own cgroups (drums-cgroup, drums-restore); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<cgroup::Section>,
    /// The network policy and its enforcement on the host (crate::net::egress); absent: policy `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<egress::Section>,
    /// What a restored sibling was restored from (drums-restore); absent: a cold session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<Restore>,
    /// What drums-reseed changed to make a restored sibling unique; absent: not reseeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reseed: Option<Reseed>,
    /// The host id range of a session in its own user namespace (the default of `drums-overlay
    /// create`, `drums-restore` and `drums-pool fill`); absent: the session shares the host's user namespace
    /// (made with `--host-ids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id_range: Option<IdRange>,
    /// Members written by stages this version does not know, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Timings of one restore, seconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RestoreTimes {
    pub ledger_s: f64,
    pub overlay_s: f64,
    pub cgroup_s: f64,
    pub criu_s: f64,
    pub network_s: f64,
    /// Applying the sibling's network policy, on a thread of its own beside CRIU (absent in records of
    /// tools before it: not measured then, so never a 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_s: Option<f64>,
    /// How long the restore waited for that after CRIU returned: the policy's share of the critical path
    /// (absent in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_wait_s: Option<f64>,
    pub total_s: f64,
}

/// The `restore` section of a restored sibling.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Restore {
    /// The checkpoint's id: drums-reseed and drums-audit load its record.
    pub checkpoint: String,
    /// `$DRUMS_CHECKPOINT_DIR/<checkpoint>`; absent in hand-made records, which name the id alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_dir: Option<PathBuf>,
    /// The checkpoint was declared clean.
    pub clean: bool,
    pub ksm: bool,
    pub times: RestoreTimes,
    pub criu_options: Vec<String>,
    /// Members of later versions, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Who erased a sibling's browser state.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ClearedAt {
    /// drums-ckpt, just before the dump (the checkpoint's `browser_erased`).
    Dump,
    /// The sibling's drums-reseed.
    Reseed,
}

/// What drums-reseed did in the browser.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct BrowserReseed {
    /// Whether the checkpoint was declared clean (only then is browser state erased).
    pub clean: bool,
    pub cookies_cleared: bool,
    pub storage_cleared: bool,
    /// Null: state kept.
    pub cleared_at: Option<ClearedAt>,
    /// The page was navigated to its own URL, which moves it into a renderer forked after the restore.
    pub renderer_renewed: bool,
    pub note: Option<String>,
    pub seconds: f64,
}

/// The `reseed` section of a restored sibling.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Reseed {
    pub hostname: String,
    pub machine_id: String,
    /// Wipe-on-fork ranges zeroed, and in how many processes.
    pub wiped_ranges: usize,
    pub wiped_processes: usize,
    /// Processes sent SIGUSR1 to reseed (those that catch it: the guest, Python with the Drums hook).
    pub signalled: Vec<String>,
    pub browser: Option<BrowserReseed>,
    /// Seconds per step, by `<step>_s`.
    pub times: std::collections::BTreeMap<String, f64>,
    pub total_s: f64,
    pub at: f64,
    /// Members of later versions, kept as they are.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}


/// A memory range marked MADV_WIPEONFORK in a checkpointed process: CRIU restores it with its contents,
/// so drums-reseed zeroes it as fork would have.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WipeRange {
    /// PID inside the session (the same after restore).
    pub pid: i32,
    pub comm: String,
    pub start: u64,
    pub end: u64,
}

/// What a checkpoint remembers of the session it was taken from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckpointSource {
    pub session: String,
    pub hostname: String,
    pub session_addr: String,
    /// MAC of the source's eth0: restored siblings keep it until drums-reseed gives them their own.
    pub session_mac: String,
    pub desktop: Desktop,
    /// The network policy the source ran under (absent: `none`); a sibling may be restored under another.
    #[serde(default, skip_serializing_if = "egress::Policy::is_none")]
    pub net_policy: egress::Policy,
}

/// What drums-ckpt erased in the browser before a dump.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BrowserErased {
    pub cookies_cleared: bool,
    /// `Storage.clearDataForOrigin` for every storage type succeeded.
    pub storage_cleared: bool,
    pub seconds: f64,
}

/// A checkpoint: CRIU images and a read-only layer on disk, restorable after its source is gone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: CheckpointType,
    pub id: String,
    /// `$DRUMS_CHECKPOINT_DIR/<id>`: holds `images/`, `layer/` and `checkpoint.json` (this record).
    pub dir: PathBuf,
    pub images: PathBuf,
    /// The source session's upper directory as it was while its processes were frozen.
    pub layer: PathBuf,
    /// Copies of the source's read-only layers (`drums-overlay create --layer`), topmost first, below
    /// `layer`.
    pub layers: Vec<PathBuf>,
    /// The runtime layer the source ran with (null in checkpoints of older tools, which are refused).
    #[serde(default)]
    pub runtime: Option<layers::RuntimeRef>,
    /// The root image the source ran on (null in checkpoints taken on the host's `/` by older tools,
    /// which are refused).
    #[serde(default)]
    pub image: Option<layers::ImageRef>,
    /// Bytes of the CRIU images.
    pub image_bytes: u64,
    /// Bytes of the checkpoint layer.
    pub layer_bytes: u64,
    /// Seconds the CRIU dump took (the criu process, wall clock).
    pub dump_s: f64,
    pub criu_version: String,
    pub kernel: String,
    /// The source's composition manifest (desktop.manifest).
    pub manifest: Map<String, Value>,
    /// Declared clean: its browser state may be erased by drums-reseed.
    pub clean: bool,
    /// For a clean checkpoint whose source ended with the dump: drums-ckpt erased the browser's cookies
    /// and storage just before the dump. Null otherwise (and in older records): each sibling's drums-reseed
    /// erases them.
    #[serde(default)]
    pub browser_erased: Option<BrowserErased>,
    pub created_at: f64,
    pub source: CheckpointSource,
    pub wipe: Vec<WipeRange>,
    /// Files of `layer` (relative paths) that the source's processes had open for writing or mapped
    /// shared and writable at dump time: a restore moves them into the sibling's upper before mounting,
    /// where the first write would have copied them anyway (absent in older records: none).
    #[serde(default)]
    pub write_open: Vec<PathBuf>,
    /// What the copy of the source's upper into `layer` left out (set-id bits, device nodes, file
    /// capabilities; drums-ckpt(1)); absent in older records.
    #[serde(default)]
    pub layer_dropped: Option<layers::Dropped>,
    /// Read-only private file mappings (relocated data) whose pages drums-ckpt moved out of the images
    /// into files that the images map instead; null when none (`mapped_note` says why; absent in older
    /// records).
    #[serde(default)]
    pub mapped: Option<layers::Mapped>,
    #[serde(default)]
    pub mapped_note: Option<String>,
    /// The boundary (capabilities, seccomp, user namespace) of every process of the source at the dump:
    /// what drums-audit holds each restored sibling to (absent in older records: none).
    #[serde(default)]
    pub boundary: Vec<boundary::ProcessBoundary>,
    /// The CRIU options the dump used.
    pub criu_options: Vec<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

crate::record_type!(SessionType = "session");
crate::record_type!(CheckpointType = "checkpoint");
pub const SESSION: &str = SessionType::NAME;
pub const CHECKPOINT: &str = CheckpointType::NAME;

/// Parse one line into a JSON object and check its version and type.
pub fn parse_line(line: &str, want_type: &str) -> Result<Value> {
    let v: Value = serde_json::from_str(line)
        .map_err(|e| Error::bad_input(format!("malformed JSON: {e}")))?;
    let obj = v.as_object().ok_or_else(|| Error::bad_input("a record must be a JSON object"))?;
    match obj.get("drums") {
        None => return Err(Error::bad_field("drums", "missing (the record format version)")),
        Some(Value::Number(n)) if n.as_u64() == Some(VERSION as u64) => {}
        Some(other) => {
            return Err(Error::bad_field("drums", format!("version {other} is not supported (this tool reads {VERSION})")))
        }
    }
    match obj.get("type").and_then(Value::as_str) {
        None => return Err(Error::bad_field("type", "missing")),
        Some(t) if t == want_type => {}
        Some(t) => return Err(Error::bad_field("type", format!("`{t}` given, `{want_type}` expected"))),
    }
    Ok(v)
}

/// Deserialize a checked object into a typed record, naming the field that is missing or wrong by its
/// whole path (`ns.init_start_time`, `desktop.processes[2].pid`), not by its last name alone.
pub fn from_value<T: DeserializeOwned>(v: Value) -> Result<T> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        // The path of a missing field is the object that lacks it; "." is the record itself.
        let at = e.path().to_string();
        let msg = e.into_inner().to_string();
        let under = |name: &str| if at == "." { name.to_string() } else { format!("{at}.{name}") };
        if let Some(rest) = msg.strip_prefix("missing field `") {
            Error::bad_field(under(rest.split('`').next().unwrap_or("")), "missing")
        } else if at == "." {
            Error::bad_input(format!("record does not fit its type: {msg}"))
        } else {
            Error::bad_field(at, msg)
        }
    })
}

/// A hostname Drums sets (sethostname(2), the session's /etc/hostname): 1 to 64 of a-z, A-Z, 0-9, `-`
/// and `.`, starting with a letter or digit.
pub fn check_hostname(h: &str) -> std::result::Result<(), String> {
    let b = h.as_bytes();
    if !b.is_empty() && b.len() <= 64 && b[0].is_ascii_alphanumeric() && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'.') {
        Ok(())
    } else {
        Err(format!("`{h}` is not a hostname (1 to 64 of a-z, A-Z, 0-9, - and ., starting with a letter or digit)"))
    }
}

/// A MAC address as Drums writes one: six pairs of hex digits joined by `:`.
pub fn check_mac(m: &str) -> std::result::Result<(), String> {
    let parts: Vec<&str> = m.split(':').collect();
    if parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.bytes().all(|c| c.is_ascii_hexdigit())) {
        Ok(())
    } else {
        Err(format!("`{m}` is not a MAC address (six pairs of hex digits joined by :)"))
    }
}

/// Text a tool hands to a program or the kernel (a command line, a page): no NUL, at most `max` bytes.
fn check_text(field: &str, s: &str, max: usize) -> Result<()> {
    if s.contains('\0') || s.len() > max {
        return Err(Error::bad_field(field, format!("holds a NUL or is longer than {max} bytes")));
    }
    Ok(())
}

/// The port of a session's guest server (drums-guest), in `desktop.guest_url`.
pub const GUEST_PORT: u16 = 5000;

/// The widest X screen and the highest display number a record may name.
const MAX_SCREEN: u32 = 32768;
const MAX_DISPLAY: u32 = 65535;
/// Chromium gets the URL as one argument (`--app=URL`), which Linux limits to 128 KiB.
const MAX_URL_BYTES: usize = 128 * 1024 - 16;
const MAX_TITLE_BYTES: usize = 4096;
/// A wipe-on-fork range is a page or a few (BoringSSL's): one larger than this is no real range.
pub const MAX_WIPE_BYTES: u64 = 1 << 30;

impl Desktop {
    /// `session_addr`: the address the guest must be reached at, when the record says.
    pub fn validate(&self, field: &str, session_addr: Option<&str>) -> Result<()> {
        let bad = |name: &str, m: String| Error::bad_field(format!("{field}.{name}"), m);
        if self.display > MAX_DISPLAY {
            return Err(bad("display", format!("{} is above {MAX_DISPLAY}", self.display)));
        }
        if self.x_socket != format!("@/tmp/.X11-unix/X{}", self.display) {
            return Err(bad("x_socket", format!("`{}` is not display {}'s socket", self.x_socket, self.display)));
        }
        if !(1..=MAX_SCREEN).contains(&self.width) || !(1..=MAX_SCREEN).contains(&self.height) || !(1..=32).contains(&self.depth) {
            return Err(bad("width", format!("{}x{}x{} is not a screen", self.width, self.height, self.depth)));
        }
        check_text(&format!("{field}.url"), &self.url, MAX_URL_BYTES)?;
        check_text(&format!("{field}.title"), &self.title, MAX_TITLE_BYTES)?;
        if self.devtools_port == 0 {
            return Err(bad("devtools_port", "0 is not a port".into()));
        }
        if let Some(g) = &self.guest_url {
            let addr = g.strip_prefix("http://").and_then(|r| r.strip_suffix(&format!(":{}", GUEST_PORT)));
            let ok = match (addr, session_addr) {
                (Some(a), Some(want)) => a == want,
                (Some(a), None) => a.parse::<std::net::Ipv4Addr>().is_ok(),
                (None, _) => false,
            };
            if !ok {
                return Err(bad("guest_url", format!("`{g}` is not http://<the session's address>:{}", GUEST_PORT)));
            }
        }
        for (i, p) in self.processes.iter().enumerate() {
            let role_ok = !p.role.is_empty() && p.role.len() <= 32 && p.role.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-');
            if !role_ok {
                return Err(bad(&format!("processes[{i}].role"), format!("`{}` is not a role (1 to 32 of a-z, 0-9, -)", p.role)));
            }
            if p.pid <= 0 || p.host_pid.is_some_and(|h| h <= 0) {
                return Err(bad(&format!("processes[{i}].pid"), format!("{} (host {:?}) is not a process id", p.pid, p.host_pid)));
            }
        }
        Ok(())
    }
}

impl Session {
    /// A session record with only what every stage has from its start: the sections are filled in by
    /// the stages that make them.
    pub fn new(id: String, state_dir: PathBuf, owner: Owner, ttl_s: Option<u64>) -> Session {
        Session {
            drums: VERSION,
            kind: SessionType::Tag,
            id,
            state_dir,
            created_at: now(),
            owner,
            ttl_s,
            overlay: None,
            ns: None,
            net: None,
            desktop: None,
            ready: None,
            pool: None,
            cgroup: None,
            egress: None,
            restore: None,
            reseed: None,
            id_range: None,
            extra: Default::default(),
        }
    }

    /// A section written by a stage this library does not type, or null.
    pub fn section(&self, name: &str) -> Option<&Value> {
        self.extra.get(name).filter(|v| !v.is_null())
    }

    pub fn ns(&self) -> Result<&Namespaces> {
        self.ns.as_ref().ok_or_else(|| Error::bad_field("ns", "missing: run drums-ns create first"))
    }
    pub fn overlay(&self) -> Result<&Overlay> {
        self.overlay.as_ref().ok_or_else(|| Error::bad_field("overlay", "missing: run drums-overlay create first"))
    }
    pub fn desktop(&self) -> Result<&Desktop> {
        self.desktop.as_ref().ok_or_else(|| Error::bad_field("desktop", "missing: run drums-desktop start first"))
    }
    pub fn net(&self) -> Result<&Net> {
        self.net.as_ref().ok_or_else(|| Error::bad_field("net", "missing: run drums-ns create first"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minimal(id: &str) -> String {
        format!(
            r#"{{"drums":1,"type":"session","id":"{id}","state_dir":"{}","created_at":1.5,"owner":{{"pid":1,"start_time":2}},"future_member":{{"x":1}}}}"#,
            crate::state::session_dir(id).display()
        )
    }

    #[test]
    fn parses_and_keeps_unknown_members() {
        let s = Session::parse(&minimal("d-abc123")).unwrap();
        assert_eq!(s.id, "d-abc123");
        let out = serde_json::to_value(&s).unwrap();
        assert_eq!(out["future_member"]["x"], 1);
    }

    #[test]
    fn typed_sections_read_back_and_write_the_same_json() {
        let restore = json!({"checkpoint": "c-0123456789ab", "checkpoint_dir": crate::state::checkpoint_root().join("c-0123456789ab"), "clean": true, "ksm": false,
            "times": {"ledger_s": 0.1, "overlay_s": 0.2, "cgroup_s": 0.3, "criu_s": 0.4, "network_s": 0.5, "total_s": 1.5}, "criu_options": ["--manage-cgroups=ignore"], "later": [1]});
        let reseed = json!({"hostname": "h", "machine_id": "0123456789abcdef0123456789abcdef", "wiped_ranges": 2, "wiped_processes": 1, "signalled": ["7 guest"],
            "browser": {"clean": true, "cookies_cleared": true, "storage_cleared": true, "cleared_at": "dump", "renderer_renewed": true, "note": null, "seconds": 0.25},
            "times": {"hostname_s": 0.001}, "total_s": 0.3, "at": 1.25});
        let mut v: Value = serde_json::from_str(&minimal("d-abc123")).unwrap();
        v["restore"] = restore.clone();
        v["reseed"] = reseed.clone();
        let s = Session::parse(&v.to_string()).unwrap();
        assert_eq!(s.restore.as_ref().unwrap().checkpoint, "c-0123456789ab");
        assert_eq!(s.reseed.as_ref().unwrap().browser.as_ref().unwrap().cleared_at, Some(ClearedAt::Dump));
        assert!(s.cgroup.is_none() && !s.extra.contains_key("restore"));
        let out = serde_json::to_value(&s).unwrap();
        assert_eq!((&out["restore"], &out["reseed"]), (&restore, &reseed), "the same members and values, unknown ones kept");
        assert!(out.get("cgroup").is_none(), "no section, no member: {out}");
        // A section missing a member is refused with its path.
        v["restore"].as_object_mut().unwrap().remove("times");
        assert_eq!(field_of(&v.to_string()), "restore.times");
    }

    #[test]
    fn refuses_wrong_version_and_names_the_field() {
        let line = minimal("d-abc123").replace("\"drums\":1", "\"drums\":9");
        match Session::parse(&line) {
            Err(Error::BadInput { field: Some(f), .. }) => assert_eq!(f, "drums"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_a_missing_field() {
        let line = minimal("d-abc123").replace(",\"created_at\":1.5", "");
        match Session::parse(&line) {
            Err(Error::BadInput { field: Some(f), .. }) => assert_eq!(f, "created_at"),
            other => panic!("{other:?}"),
        }
    }

    fn field_of(line: &str) -> String {
        match Session::parse(line) {
            Err(Error::BadInput { field: Some(f), .. }) => f,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_a_nested_field_by_its_path() {
        let ns = r#""ns":{"init_pid":7,"hostname":"h","inodes":{"pid":1,"mnt":2,"net":3,"ipc":4,"uts":5}}"#;
        assert_eq!(field_of(&minimal("d-abc123").replace("\"future_member\"", &format!("{ns},\"future_member\""))), "ns.init_start_time");
        let ns = r#""ns":{"init_pid":"seven","init_start_time":1,"hostname":"h","inodes":{"pid":1,"mnt":2,"net":3,"ipc":4,"uts":5}}"#;
        assert_eq!(field_of(&minimal("d-abc123").replace("\"future_member\"", &format!("{ns},\"future_member\""))), "ns.init_pid");
        let ns = r#""ns":{"init_pid":7,"init_start_time":1,"hostname":"h","inodes":{"pid":1,"mnt":2,"net":3,"ipc":4}}"#;
        assert_eq!(field_of(&minimal("d-abc123").replace("\"future_member\"", &format!("{ns},\"future_member\""))), "ns.inodes.uts");
    }

    #[test]
    fn names_a_field_of_the_wrong_type() {
        assert_eq!(field_of(&minimal("d-abc123").replace("\"created_at\":1.5", "\"created_at\":\"yesterday\"")), "created_at");
        assert_eq!(field_of(&minimal("d-abc123").replace("\"pid\":1", "\"pid\":-1.5")), "owner.pid");
    }

    #[test]
    fn refuses_hostile_ids_and_state_dirs() {
        let line = minimal("d-abc123").replace("d-abc123\",\"state_dir", "../../etc\",\"state_dir");
        assert!(matches!(Session::parse(&line), Err(Error::BadInput { .. })));
        let line = minimal("d-abc123").replace(&crate::state::session_dir("d-abc123").display().to_string(), "/etc");
        match Session::parse(&line) {
            Err(Error::BadInput { field: Some(f), .. }) => assert_eq!(f, "state_dir"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refuses_malformed_json() {
        assert!(matches!(Session::parse("{"), Err(Error::BadInput { .. })));
        assert!(matches!(Session::parse("[1]"), Err(Error::BadInput { .. })));
    }
}
