//! Hostile record fields: every tool that reads a field refuses a record whose field does not name the
//! session's (or checkpoint's) own things, with exit 3, the field named, and nothing done (no state
//! directory, mount or checkpoint made, nothing destroyed, no command of the field's run). No session is
//! started: the roots are temporary directories (DRUMS_STATE_DIR, DRUMS_CHECKPOINT_DIR, ...) holding one
//! ledgered session directory and one checkpoint directory that a tool acting on the record would change
//! or remove, and the session's init is a PID that no process has.
//!
//! Each refusal is checked against its control: the same record without the hostile field is not refused
//! for that field (it fails later, on the missing init or image, or succeeds).

use drums::error::ErrorRecord;
use drums_tests::*;
// The records these tests feed the tools are built as serde_json::Value on purpose: hostile members and
// values (a PID of -1, a member taken out) that the typed records could not carry.
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SESSION: &str = "d-0123456789ab";
const CHECKPOINT: &str = "c-0123456789ab";
const SLOT: u32 = 7;

struct Roots {
    base: PathBuf,
}

impl Roots {
    fn new(name: &str) -> Roots {
        let base = std::env::temp_dir().join(format!("drums-records-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let r = Roots { base };
        for d in ["state", "checkpoints", "mapped", "layers", "images", "runtime"] {
            std::fs::create_dir_all(r.base.join(d)).unwrap();
        }
        r.reset();
        r
    }
    fn state(&self) -> PathBuf {
        self.base.join("state")
    }
    fn session_dir(&self) -> PathBuf {
        self.state().join("sessions").join(SESSION)
    }
    fn checkpoint_dir(&self) -> PathBuf {
        self.base.join("checkpoints").join(CHECKPOINT)
    }
    /// The session directory with a ledger holding only its owner line (a destroy would remove it), and
    /// the checkpoint directory with its record.
    fn reset(&self) {
        std::fs::create_dir_all(self.session_dir()).unwrap();
        let owner = json!({"op": "owner", "t": 1.0, "session": SESSION, "owner": {"pid": std::process::id(), "start_time": 1}, "ttl_s": null});
        std::fs::write(self.session_dir().join("ledger.jsonl"), format!("{owner}\n")).unwrap();
        std::fs::create_dir_all(self.checkpoint_dir().join("images")).unwrap();
        std::fs::create_dir_all(self.checkpoint_dir().join("layer")).unwrap();
        std::fs::write(self.checkpoint_dir().join("checkpoint.json"), checkpoint(self).to_string()).unwrap();
    }
    fn tool(&self, name: &str, args: &[&str], stdin: &str) -> Output {
        let mut c = Command::new(tool(name));
        c.args(args)
            .env("PATH", path_with_tools())
            .env("DRUMS_OWNER", std::process::id().to_string())
            .env("DRUMS_STATE_DIR", self.state())
            .env("DRUMS_CHECKPOINT_DIR", self.base.join("checkpoints"))
            .env("DRUMS_MAPPED_DIR", self.base.join("mapped"))
            .env("DRUMS_LAYER_DIR", self.base.join("layers"))
            .env("DRUMS_IMAGE_DIR", self.base.join("images"))
            .env("DRUMS_RUNTIME_DIR", self.base.join("runtime"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        {
            use std::io::Write;
            let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
        }
        child.wait_with_output().unwrap()
    }
    /// Every file and directory below the roots, for the before/after comparison.
    fn listing(&self) -> Vec<String> {
        fn walk(d: &Path, out: &mut Vec<String>) {
            for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
                out.push(e.path().display().to_string());
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&e.path(), out);
                }
            }
        }
        let mut out = vec![];
        walk(&self.base, &mut out);
        // The sweep's lock file is made by any sweep, refused or not: it holds nothing.
        out.retain(|p| !p.ends_with("sweep.lock"));
        out.sort();
        out
    }
}

impl Drop for Roots {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// A PID no process has now (just below the kernel's limit).
fn dead_pid() -> i64 {
    let max: i64 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    (max - 1000..max).rev().find(|p| !Path::new(&format!("/proc/{p}")).exists()).expect("a free PID")
}

/// A live process in the host's namespaces, started once (killed when the test is done; it sleeps for a
/// minute at most).
fn host_process() -> i32 {
    static CHILD: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *CHILD.get_or_init(|| Command::new("sleep").arg("60").spawn().unwrap().id() as i32)
}

fn session_addr() -> String {
    drums::net::slot_addrs(SLOT).1.to_string()
}

fn desktop() -> Value {
    json!({
        "display": 1, "width": 1280, "height": 800, "depth": 24, "x_socket": "@/tmp/.X11-unix/X1",
        "url": "data:text/html,<title>t</title>", "title": "t", "devtools_port": 9222,
        "guest_url": format!("http://{}:5000", session_addr()),
        "processes": [{"role": "xvfb", "pid": 3, "host_pid": null}, {"role": "chromium", "pid": 9, "host_pid": null}],
        "manifest": {}, "start_s": 0.5, "mit_shm": false, "glx": false
    })
}

/// This machine's cgroup directories for SESSION, as drums-cgroup create would name them.
fn cgroup_section() -> Value {
    let (version, mounts) = match drums::cgroup::detect::layout().expect("this machine has no usable cgroup hierarchy") {
        drums::cgroup::Layout::V1 { mounts } => ("v1", mounts.into_iter().collect::<Vec<_>>()),
        drums::cgroup::Layout::V2 { mount } => ("v2", vec![("unified".to_string(), mount)]),
    };
    let mut paths = serde_json::Map::new();
    let mut proc_paths = serde_json::Map::new();
    for (k, m) in mounts {
        paths.insert(k.clone(), json!(m.path.join("drums").join(SESSION)));
        proc_paths.insert(k, json!(format!("{}/drums/{SESSION}", m.root.trim_end_matches('/'))));
    }
    json!({
        "version": version, "paths": paths, "proc_paths": proc_paths,
        "requested": {"cpu_quota_us": 100000, "cpu_period_us": 100000, "memory_bytes": 1073741824u64, "pids_max": 512},
        "read_back": {}, "applied": true, "processes_moved": null, "created_at": 1.0
    })
}

/// A session record that passes every check, with everything a tool could act on.
fn session(r: &Roots) -> Value {
    let sd = r.session_dir();
    let (host, sess) = drums::net::slot_addrs(SLOT);
    json!({
        "drums": 1, "type": "session", "id": SESSION, "state_dir": sd, "created_at": 1.0,
        "owner": {"pid": std::process::id(), "start_time": 1}, "ttl_s": null,
        "overlay": {"merged": sd.join("root"), "upper": sd.join("rw/upper"), "work": sd.join("rw/work"), "tmpfs": sd.join("rw"),
                    "layers": [r.checkpoint_dir().join("layer")], "tmpfs_bytes": 1073741824u64, "mapped": null, "runtime": null, "image": null},
        "ns": {"init_pid": dead_pid(), "init_start_time": 1, "hostname": SESSION, "inodes": {"pid": 1, "mnt": 2, "net": 3, "ipc": 4, "uts": 5}},
        "net": {"slot": SLOT, "host_if": format!("drums{SLOT}"), "session_if": "eth0", "host_addr": host.to_string(), "session_addr": sess.to_string(),
                "prefix_len": 30, "session_mac": "02:00:00:00:00:07"},
        "desktop": desktop(),
    })
}

fn checkpoint(r: &Roots) -> Value {
    let d = r.checkpoint_dir();
    json!({
        "drums": 1, "type": "checkpoint", "id": CHECKPOINT, "dir": d, "images": d.join("images"), "layer": d.join("layer"), "layers": [],
        "runtime": null, "image": null, "image_bytes": 0, "layer_bytes": 0, "dump_s": 0.1, "criu_version": "4.2", "kernel": "x",
        "manifest": {}, "clean": true, "created_at": 1.0,
        "source": {"session": "d-0123456789aa", "hostname": "d-0123456789aa", "session_addr": session_addr(), "session_mac": "02:00:00:00:00:07", "desktop": desktop()},
        "wipe": [{"pid": 5, "comm": "chromium", "start": 4096, "end": 8192}],
        "criu_options": []
    })
}

/// The error object a tool printed last on stderr; None when it succeeded (then it printed none).
fn error_of(o: &Output) -> Option<ErrorRecord> {
    (!o.status.success()).then(|| error_record(&o.stderr))
}

/// The field the error object names, if the tool failed and its error names one.
fn field_of(o: &Output) -> Option<String> {
    error_of(o).and_then(|e| e.field)
}

/// The tools given `rec` refuse it for `field` and leave everything as it was; without the change (the
/// control) none refuses it for that field.
fn refused(r: &Roots, what: &str, field: &str, rec: &Value, tools: &[(&str, &[&str])]) {
    let control = session(r).to_string();
    for (t, args) in tools {
        r.reset();
        let before = r.listing();
        let o = r.tool(t, args, &rec.to_string());
        assert_eq!(o.status.code(), Some(3), "{t} {args:?} must refuse {what}: {}", text(&o.stderr));
        let e = error_record(&o.stderr);
        assert_eq!(e.kind, "bad_input", "{t}: {what}: {}", json(&e));
        assert_eq!(e.field.as_deref(), Some(field), "{t}: {what}: the error names the field: {}", json(&e));
        assert!(o.stdout.is_empty(), "{t}: {what}: nothing is printed as done: {}", text(&o.stdout));
        assert_eq!(r.listing(), before, "{t}: {what}: nothing was made or removed under the roots");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains(&r.base.display().to_string()), "{t}: {what}: nothing was mounted");
        r.reset();
        let o = r.tool(t, args, &control);
        assert_ne!(field_of(&o).as_deref(), Some(field), "{t}: the control is refused for {field} too: {}", text(&o.stderr));
    }
}

const CKPT: (&str, &[&str]) = ("drums-ckpt", &[]);
const SWEEP: (&str, &[&str]) = ("drums-sweep", &[]);
const RESEED: (&str, &[&str]) = ("drums-reseed", &[]);
const NS_EXEC: (&str, &[&str]) = ("drums-ns", &["exec", "--", "true"]);
const DESKTOP: (&str, &[&str]) = ("drums-desktop", &["start"]);
const READY: (&str, &[&str]) = ("drums-ready", &[]);
const OVERLAY_REMOVE: (&str, &[&str]) = ("drums-overlay", &["remove"]);

#[test]
fn a_shell_command_in_overlay_upper_is_refused_and_never_run() {
    require_root();
    let r = Roots::new("upper");
    let mark = r.base.join("ran");
    let mut rec = session(&r);
    rec["overlay"]["upper"] = json!(format!("{}/rw/upper'; touch '{}'; '", r.session_dir().display(), mark.display()));
    refused(&r, "a shell command in overlay.upper", "overlay.upper", &rec, &[CKPT, SWEEP, RESEED, NS_EXEC, OVERLAY_REMOVE]);
    assert!(!mark.exists(), "the command ran");
}

#[test]
fn layers_outside_drums_roots_and_dot_dot_are_refused() {
    require_root();
    let r = Roots::new("layers");
    let up = format!("{}/layer/../../../../../../etc", r.checkpoint_dir().display());
    for (what, layer) in [("a host directory as a layer", "/etc".to_string()), ("`..` out of a checkpoint's layer", up.clone()), ("another session's upper", format!("{}/rw/upper", r.session_dir().display()))] {
        let mut rec = session(&r);
        rec["overlay"]["layers"] = json!([layer]);
        refused(&r, what, "overlay.layers[0]", &rec, &[CKPT, SWEEP, RESEED]);
    }
    // drums-overlay create checks --layer the same way, before it makes anything.
    let below = format!("{}/../../../etc", r.base.join("layers").display());
    for layer in ["/etc", up.as_str(), below.as_str()] {
        let before = r.listing();
        let o = r.tool("drums-overlay", &["create", "--layer", layer], "");
        assert_eq!(o.status.code(), Some(3), "--layer {layer}: {}", text(&o.stderr));
        assert!(text(&o.stderr).contains("--layer"), "{}", text(&o.stderr));
        assert_eq!(r.listing(), before, "--layer {layer}: nothing was made");
    }
    // The control: a layer below the layers root passes the check (and fails later, without an image).
    std::fs::create_dir_all(r.base.join("layers/extra")).unwrap();
    let o = r.tool("drums-overlay", &["create", "--layer", r.base.join("layers/extra").to_str().unwrap()], "");
    assert_ne!(o.status.code(), Some(3), "a layer below the layers root is accepted: {}", text(&o.stderr));
    assert!(std::fs::read_dir(r.state().join("sessions")).unwrap().all(|e| e.unwrap().file_name() == SESSION), "no session was made without an image");
}

#[test]
fn cgroup_paths_that_are_not_the_session_s_own_are_refused() {
    require_root();
    let r = Roots::new("cgroup");
    let mut control = session(&r);
    control["cgroup"] = cgroup_section();
    let key = control["cgroup"]["paths"].as_object().unwrap().keys().next().unwrap().clone();
    let tools: &[(&str, &[&str])] = &[("drums-cgroup", &["remove"]), ("drums-cgroup", &["freeze"]), CKPT, SWEEP, RESEED];
    // Named like a session cgroup (…/drums/<id>), but not under a cgroup mount of this machine.
    let evil = r.base.join("evil/drums").join(SESSION);
    let mut rec = control.clone();
    rec["cgroup"]["paths"][&key] = json!(evil);
    refused(&r, "a cgroup path outside the cgroup mounts", &format!("cgroup.paths.{key}"), &rec, tools);
    let mut rec = control.clone();
    let other = rec["cgroup"]["paths"][&key].as_str().unwrap().replace(SESSION, "d-0000000000ff");
    rec["cgroup"]["paths"][&key] = json!(other);
    refused(&r, "another session's cgroup", &format!("cgroup.paths.{key}"), &rec, tools);
    let mut rec = control.clone();
    rec["cgroup"]["proc_paths"][&key] = json!("/");
    refused(&r, "the root cgroup for CRIU's --cgroup-root", &format!("cgroup.proc_paths.{key}"), &rec, tools);
    // The control itself is accepted by the record check (the cgroups do not exist: drums-cgroup fails later or has nothing to do).
    for (t, args) in tools {
        let o = r.tool(t, args, &control.to_string());
        assert!(!field_of(&o).is_some_and(|f| f.starts_with("cgroup")), "{t}: {}", text(&o.stderr));
        r.reset();
    }
}

#[test]
fn hostile_wipe_ranges_are_refused_by_restore_and_reseed() {
    require_root();
    let r = Roots::new("wipe");
    for (what, start, end) in [("a range that ends before it starts", 8192u64, 4096u64), ("a 2 GiB range", 0, 2u64 << 30), ("an empty range", 4096, 4096)] {
        let mut ck = checkpoint(&r);
        ck["wipe"][0]["start"] = json!(start);
        ck["wipe"][0]["end"] = json!(end);
        // drums-restore reads the checkpoint record on standard input.
        let before = r.listing();
        let o = r.tool("drums-restore", &[], &ck.to_string());
        assert_eq!(o.status.code(), Some(3), "{what}: {}", text(&o.stderr));
        assert_eq!(field_of(&o).as_deref(), Some("wipe[0]"), "{what}: {}", text(&o.stderr));
        assert_eq!(r.listing(), before, "{what}: drums-restore made nothing");
        // drums-reseed reads it from the checkpoint its session was restored from.
        r.reset();
        std::fs::write(r.checkpoint_dir().join("checkpoint.json"), ck.to_string()).unwrap();
        let mut s = session(&r);
        s["restore"] = restore_section(json!(CHECKPOINT), json!(r.checkpoint_dir()));
        let before = r.listing();
        let o = r.tool("drums-reseed", &[], &s.to_string());
        assert_eq!(o.status.code(), Some(3), "{what}: {}", text(&o.stderr));
        assert_eq!(field_of(&o).as_deref(), Some("wipe[0]"), "{what}: {}", text(&o.stderr));
        assert_eq!(r.listing(), before, "{what}: drums-reseed changed nothing");
    }
    // The control: the record as drums-ckpt writes it passes (drums-restore then fails on its missing image).
    let o = r.tool("drums-restore", &[], &checkpoint(&r).to_string());
    assert_ne!(field_of(&o).as_deref(), Some("wipe[0]"), "{}", text(&o.stderr));
}

/// A whole pool section (drums::pool::Section) of checkpoint CHECKPOINT's pool at `spool`.
fn pool_section(spool: &str) -> Value {
    let filler = json!({"pid": 1, "start_time": 1});
    let fill_s = json!({"restore_s": 0.1, "reseed_ready_s": 0.1, "freeze_s": 0.0, "total_s": 0.2});
    json!({"checkpoint": CHECKPOINT, "spool": spool, "parked_at": 1.0, "frozen": true, "filler": filler, "fill_s": fill_s, "take_started_at": null, "taken_at": null, "taker": null})
}

/// A `restore` section as drums-restore writes it, naming `checkpoint` in `checkpoint_dir` (null: left out).
fn restore_section(checkpoint: Value, checkpoint_dir: Value) -> Value {
    let times = drums::record::RestoreTimes { ledger_s: 0.1, overlay_s: 0.1, cgroup_s: 0.1, criu_s: 0.1, network_s: 0.1, egress_s: Some(0.05), egress_wait_s: Some(0.0), total_s: 0.5 };
    let mut r = json!({"checkpoint": checkpoint, "clean": true, "ksm": false, "times": times, "criu_options": []});
    if !checkpoint_dir.is_null() {
        r["checkpoint_dir"] = checkpoint_dir;
    }
    r
}

#[test]
fn hostile_namespaces_network_and_desktop_are_refused() {
    require_root();
    let r = Roots::new("members");
    type Change = fn(&mut Value);
    let cases: &[(&str, &str, Change, &[(&str, &[&str])])] = &[
        ("init PID -1 (kill(-1) would reach every process)", "ns.init_pid", |v| v["ns"]["init_pid"] = json!(-1), &[NS_EXEC, RESEED, DESKTOP, SWEEP, CKPT, READY]),
        ("init PID 0", "ns.init_pid", |v| v["ns"]["init_pid"] = json!(0), &[NS_EXEC, RESEED, SWEEP]),
        ("the host's PID namespace", "ns.inodes.pid", |v| v["ns"]["inodes"]["pid"] = json!(drums::proc::ns_inode(std::process::id() as i32, "pid").unwrap()), &[RESEED, CKPT, NS_EXEC, ("drums-cgroup", &["create"])]),
        ("a host process as the session's init (drums-reseed would rename the host)", "ns.inodes.pid", |v| {
            let host = host_process();
            v["ns"]["init_pid"] = json!(host);
            v["ns"]["init_start_time"] = json!(drums::proc::start_time(host).unwrap());
        }, &[RESEED, CKPT, NS_EXEC]),
        ("a hostname with a shell command", "ns.hostname", |v| v["ns"]["hostname"] = json!("h;reboot"), &[RESEED, CKPT, NS_EXEC]),
        ("the host's interface as the session's link", "net.host_if", |v| v["net"]["host_if"] = json!("eth0"), &[SWEEP, RESEED, CKPT]),
        ("a slot beyond the pool", "net.slot", |v| v["net"]["slot"] = json!(99999), &[SWEEP, RESEED]),
        ("an address of another slot", "net.session_addr", |v| v["net"]["session_addr"] = json!("10.77.0.2"), &[RESEED, CKPT]),
        ("a MAC that is not one", "net.session_mac", |v| v["net"]["session_mac"] = json!("02:00:00:00:00:07 up"), &[RESEED, CKPT]),
        ("a display out of range", "desktop.display", |v| v["desktop"]["display"] = json!(70000), &[READY, CKPT]),
        ("a guest URL elsewhere", "desktop.guest_url", |v| v["desktop"]["guest_url"] = json!("http://169.254.169.254:80/latest"), &[READY, CKPT]),
        ("a URL with a NUL", "desktop.url", |v| v["desktop"]["url"] = json!("data:text/html,a\u{0}--no-sandbox"), &[RESEED, CKPT]),
        ("a process role that is a path", "desktop.processes[0].role", |v| v["desktop"]["processes"][0]["role"] = json!("../../etc/x"), &[READY, CKPT]),
        ("a restore from a path", "restore.checkpoint", |v| v["restore"] = restore_section(json!("../../etc"), Value::Null), &[RESEED, SWEEP]),
        ("a restore from a directory elsewhere", "restore.checkpoint_dir", |v| v["restore"] = restore_section(json!(CHECKPOINT), json!("/etc")), &[RESEED, SWEEP]),
        ("a pool spool elsewhere", "pool.spool", |v| v["pool"] = pool_section("/etc"), &[SWEEP]),
        ("a pool section without its parked_at", "pool.parked_at", |v| {
            v["pool"] = pool_section("/etc");
            v["pool"].as_object_mut().unwrap().remove("parked_at");
        }, &[SWEEP]),
        ("an owner PID of -1", "owner.pid", |v| v["owner"]["pid"] = json!(-1), &[SWEEP]),
    ];
    for (what, field, change, tools) in cases {
        let mut rec = session(&r);
        change(&mut rec);
        refused(&r, what, field, &rec, tools);
    }
    unsafe { libc::kill(host_process(), libc::SIGKILL) };
}
