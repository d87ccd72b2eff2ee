//! Checkpointing a ready session with CRIU: images and a read-only layer that outlive the session.

use crate::error::{Error, IoContext, Result};
use crate::ledger::{Ledger, Resource};
use crate::record::{BrowserErased, Checkpoint, CheckpointSource, Session, WipeRange};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub mod bundle;

/// How many times a dump is tried before drums-ckpt gives up.
pub const DUMP_ATTEMPTS: u32 = 4;

fn clear_dir(d: &Path) -> Result<()> {
    for e in std::fs::read_dir(d).ctx("read directory", d)?.flatten() {
        let p = e.path();
        let r = if e.file_type().is_ok_and(|t| t.is_dir()) { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        r.ctx("remove", &p)?;
    }
    Ok(())
}

pub struct CkptOptions {
    pub leave_running: bool,
    pub clean: bool,
    /// Move relocated read-only data out of the images into mapped files (see `mapped`).
    pub map_relocated: bool,
}

/// How long `criu --version` may take (it takes milliseconds).
const HELPER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub fn criu_version() -> Result<String> {
    let bin = crate::criu::binary();
    let o = crate::proc::output_within(Command::new(&bin).arg("--version"), None, crate::state::scaled(HELPER_TIMEOUT)).map_err(|e| Error::env(format!("CRIU ({}) cannot run: {e}; run pipelines/setup.sh", bin.display())))?;
    let out = String::from_utf8_lossy(&o.stdout);
    out.lines().find_map(|l| l.strip_prefix("Version: ")).map(|v| v.trim().to_string()).ok_or_else(|| Error::env(format!("{} --version printed no version", bin.display())))
}

/// Ranges marked wipe-on-fork (`wf` in VmFlags) in every process of the session.
pub fn wipe_ranges(session: &Session) -> Result<Vec<WipeRange>> {
    let ns = session.ns()?;
    let mut out = vec![];
    for pid in crate::proc::pids_in_pidns(ns.inodes.pid) {
        let Ok(smaps) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else { continue };
        let Some(ns_pid) = crate::proc::ns_pid(pid) else { continue };
        let comm = crate::proc::comm(pid);
        let mut range: Option<(u64, u64)> = None;
        for line in smaps.lines() {
            if let Some((a, b)) = line.split_whitespace().next().and_then(|r| r.split_once('-')) {
                if let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) {
                    range = Some((a, b));
                    continue;
                }
            }
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                if flags.split_whitespace().any(|f| f == "wf") {
                    if let Some((start, end)) = range {
                        out.push(WipeRange { pid: ns_pid, comm: comm.clone(), start, end });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// Files of the session's upper that its processes have open for writing (fdinfo flags) or mapped
/// shared and writable, as paths relative to the upper: a restored sibling gets them in its own upper
/// rather than in its copy of the checkpoint layer, so they are not held twice (see restore).
pub fn write_open_files(session: &Session, upper: &Path) -> Result<Vec<PathBuf>> {
    let ns = session.ns()?;
    let mut out = std::collections::BTreeSet::new();
    // The names come from the session (what its processes have open), the upper is its tree: a link on
    // the way (a directory it replaced by a link to a host directory) leaves the file out instead of
    // naming a host file that a restore would then move into the sibling.
    let upper = crate::inroot::Root::open(upper, crate::inroot::Links::Refuse)?;
    let mut consider = |inside: &str| {
        use std::os::unix::fs::MetadataExt;
        let Ok(rel) = Path::new(inside.trim_end_matches(" (deleted)")).strip_prefix("/") else { return };
        if rel.as_os_str().is_empty() || !rel.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
            return;
        }
        // One name only: moving one name of a hard-linked file would leave the other in the layer.
        if crate::inroot::symlink_metadata(&upper, rel).is_ok_and(|m| m.is_file() && m.nlink() == 1) {
            out.insert(rel.to_path_buf());
        }
    };
    for pid in crate::proc::pids_in_pidns(ns.inodes.pid) {
        for e in std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten() {
            let Ok(target) = std::fs::read_link(e.path()) else { continue };
            let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", e.file_name().to_string_lossy())).unwrap_or_default();
            if crate::proc::open_mode(&info).1 {
                consider(&target.to_string_lossy());
            }
        }
        for line in std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default().lines() {
            let f: Vec<&str> = line.splitn(6, ' ').collect();
            if let (Some(perms), Some(path)) = (f.get(1), f.get(5)) {
                let path = path.trim_start();
                if perms.as_bytes().get(1) == Some(&b'w') && perms.as_bytes().get(3) == Some(&b's') && path.starts_with('/') {
                    consider(path);
                }
            }
        }
    }
    Ok(out.into_iter().collect())
}

fn dir_bytes(p: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// Dump the session. The checkpoint is made under a `.partial` name, ledgered in the session as a
/// directory to remove, and renamed into place only when complete, so a killed or failed dump leaves
/// nothing once the session is destroyed. Without `leave_running` the source session is destroyed after
/// a successful dump (CRIU has killed its processes).
pub fn checkpoint(session: &Session, o: &CkptOptions) -> Result<Checkpoint> {
    // Checked first, so that a session whose Chromium runs its own sandbox is told why whatever else it
    // is: CRIU 4.2 refuses every task in a PID namespace below the dumped tree's root ("Can't dump nested
    // pid namespace", criu/namespaces.c; seen here on a --userns session, docs/results/
    // criu-nested-pidns-2026-12-06.log). Refused before the ledger is touched: the session stays as it
    // was.
    let nested = crate::proc::in_nested_pidns(session.ns()?.init_pid);
    if !nested.is_empty() {
        let named: Vec<String> = nested.iter().take(5).map(|(p, c)| format!("{p} ({c})")).collect();
        return Err(Error::NotImplemented(format!(
            "session {}: {} of its processes run in PID namespaces nested below the session's (host pids {}{}): Chromium's own sandbox makes them, and CRIU cannot dump a nested PID namespace (\"Can't dump nested pid namespace\"); checkpoint a session whose Chromium runs with --no-sandbox (one made with --host-ids) and start Chromium sandboxed in each restored sibling instead (drums-desktop sandbox; drums(7), \"Chromium's sandbox in restored siblings\")",
            session.id,
            nested.len(),
            named.join(", "),
            if nested.len() > 5 { ", ..." } else { "" }
        )));
    }
    if let Some(r) = session.id_range {
        return Err(Error::NotImplemented(format!(
            "session {} runs in a user namespace of its own (id_range {}+{}): checkpointing such a session is not implemented yet (drums(7), \"Its own user namespace\"); make the session to be checkpointed with --host-ids (drums-overlay create --host-ids; pipelines/cold.sh with DRUMS_OVERLAY_ARGS=--host-ids)",
            session.id, r.base, r.count
        )));
    }
    let ns = session.ns()?;
    if !crate::proc::alive(ns.init_pid, ns.init_start_time) {
        return Err(Error::failed(format!("session {}: its init is gone", session.id)));
    }
    let desktop = session.desktop()?.clone();
    let overlay = session.overlay()?.clone();
    let (Some(image), Some(runtime)) = (overlay.image.clone(), overlay.runtime.clone()) else {
        return Err(Error::bad_field("overlay.image", "missing: this session runs on the host's / (made by an older drums-overlay) and cannot be checkpointed"));
    };
    // The image must still be the one the session was made on: a checkpoint names it by digest.
    crate::image::check(&image, "overlay.image")?;
    let version = criu_version()?;
    let root = crate::state::private_root(&crate::state::checkpoint_root())?;
    check_shell_plain(&root)?;
    let ledger = Ledger::open(&session.state_dir)?;
    // A live process in a phase other than live/parked/taken tells the sweep that work is under way.
    ledger.phase("dumping")?;
    // A clean checkpoint whose source ends with the dump loses nothing by having its browser state erased
    // first: every sibling then starts without it, and drums-reseed only renews the page's renderer
    // instead of clearing cookies and storage in every sibling (about 10 ms of each usable restore, with
    // the renderer starting alongside). A source that keeps running keeps its state.
    let browser_erased = if o.clean && !o.leave_running && desktop.processes.iter().any(|p| p.role == "chromium") {
        let t = Instant::now();
        let ns = session.ns()?;
        let mut cdp = crate::cdp::Cdp::connect(ns.init_pid, desktop.devtools_port, std::time::Instant::now() + crate::state::scaled(crate::reseed::BROWSER_TIMEOUT))?;
        let (cookies_cleared, storage_cleared) = crate::reseed::erase_browser_state(&mut cdp)?;
        Some(BrowserErased { cookies_cleared, storage_cleared, seconds: t.elapsed().as_secs_f64() })
    } else {
        None
    };
    let id = crate::state::new_id('c');
    let partial = root.join(format!("{id}.partial"));
    ledger.create_res(Resource::Dir { path: partial.clone() })?;
    let mapped_root = crate::mapped::mapped_root();
    let (mapped_partial, mapped_dir) = (mapped_root.join(format!("{id}.partial")), mapped_root.join(&id));
    let mapped_unusable = if o.map_relocated { crate::mapped::unusable_root(&mapped_root) } else { Some("not asked for (--no-mapped-files)".to_string()) };
    let result = dump_into(session, o, &partial, &overlay.upper, &version).and_then(|mut c| {
        if o.leave_running {
            ledger.phase("live")?;
        }
        if mapped_unusable.is_none() {
            crate::state::private_root(&mapped_root)?;
            ledger.create_res(Resource::Dir { path: mapped_partial.clone() })?;
            let m = crate::mapped::move_out_relocated(&c.images, &overlay.merged, &mapped_partial, &mapped_dir, &id, &root.join(&id))?;
            c.image_bytes = dir_bytes(&c.images);
            c.mapped_note = m.files.is_empty().then(|| "no mapping qualified".to_string());
            c.mapped = Some(m).filter(|m| !m.files.is_empty());
        } else {
            c.mapped_note = mapped_unusable.clone();
        }
        // The CPU the images were dumped on, as CRIU compares CPUs: a node the checkpoint moves to checks
        // its own against it (`bundle::check`). Without it (CRIU could not describe this CPU) that check
        // says it was not made, and the checkpoint is as usable here.
        if let Err(e) = crate::criu::cpuinfo_dump(&partial) {
            crate::cli::progress("drums-ckpt", &format!("no CPU description kept: {e}"));
        }
        // Layers given by path are part of what the processes see: the checkpoint keeps its own copy, so
        // changing them later does not change what a restore finds. (The runtime layer and the image
        // are immutable and named, not copied.)
        for (i, l) in overlay.layers.iter().enumerate() {
            let to = partial.join("layers").join(i.to_string());
            std::fs::create_dir_all(to.parent().unwrap()).ctx("create directory", &to)?;
            crate::overlay::copy::copy_tree(l, &to)?;
        }
        Ok(c)
    });
    let mut c = match result {
        Ok(c) => c,
        Err(e) => {
            let _ = ledger.phase("live");
            let cleanup = std::fs::remove_dir_all(&partial).ctx("remove partial checkpoint", &partial).and_then(|_| ledger.release(Resource::Dir { path: partial.clone() }));
            let cleanup = cleanup.and_then(|_| match std::fs::remove_dir_all(&mapped_partial) {
                Ok(()) => ledger.release(Resource::Dir { path: mapped_partial.clone() }),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => ledger.release(Resource::Dir { path: mapped_partial.clone() }),
                Err(e) => Err(Error::io("remove partial mapped files", &mapped_partial, e)),
            });
            return Err(e.with_cleanup(cleanup));
        }
    };
    let dir = root.join(&id);
    // The image and the runtime layer learn that this checkpoint uses them before it is in place, so a
    // prune never removes what a checkpoint names (refs of a checkpoint never finished name nothing).
    crate::image::add_ref(&image.dir, &id, &dir)?;
    crate::image::add_ref(&runtime.dir, &id, &dir)?;
    // The mapped files first: a checkpoint in place always has the files its images name.
    if c.mapped.is_some() {
        std::fs::rename(&mapped_partial, &mapped_dir).ctx("rename mapped files into place", &mapped_dir)?;
    }
    if mapped_unusable.is_none() {
        ledger.release(Resource::Dir { path: mapped_partial })?;
    }
    std::fs::rename(&partial, &dir).ctx("rename checkpoint into place", &dir)?;
    ledger.release(Resource::Dir { path: partial })?;
    c.id = id;
    c.images = dir.join("images");
    c.layer = dir.join("layer");
    c.dir = dir;
    c.layers = (0..overlay.layers.len()).map(|i| c.dir.join("layers").join(i.to_string())).collect();
    c.browser_erased = browser_erased;
    c.image = Some(image);
    c.runtime = Some(runtime);
    c.source = CheckpointSource { session: session.id.clone(), hostname: ns.hostname.clone(), session_addr: session.net()?.session_addr.clone(), session_mac: session.net()?.session_mac.clone(), desktop, net_policy: session.egress.as_ref().map(|e| e.policy.clone()).unwrap_or_default() };
    let path = c.dir.join(crate::session_io::CHECKPOINT_FILE);
    std::fs::write(&path, serde_json::to_vec(&c).expect("records serialize")).ctx("write", &path)?;
    if !o.leave_running {
        crate::destroy::destroy(&session.state_dir, &crate::destroy::DestroyOptions::default())?;
    }
    Ok(c)
}

fn dump_into(session: &Session, o: &CkptOptions, dir: &Path, upper: &Path, version: &str) -> Result<Checkpoint> {
    let ns = session.ns()?;
    let images = dir.join("images");
    let layer = dir.join("layer");
    std::fs::create_dir_all(&images).ctx("create directory", &images)?;
    std::fs::create_dir_all(&layer).ctx("create directory", &layer)?;
    let wipe = wipe_ranges(session)?;
    let boundary = crate::boundary::of_pidns(ns.inodes.pid);
    let write_open = write_open_files(session, upper)?;
    // The upper directory is copied by CRIU's post-dump action, while the session is still frozen, so
    // the layer matches the memory image exactly even when the session keeps running. The copy dies with
    // CRIU (which dies with this tool): a copy outliving a killed dump would keep writing into the
    // directory the sweep is removing. The script is constant; the paths reach the copy in CRIU's
    // environment, which it passes to its action scripts (see `copy_layer_action`).
    let script = dir.join("post-dump.sh");
    std::fs::write(&script, POST_DUMP_SCRIPT).ctx("write", &script)?;
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o700)).ctx("chmod", &script)?;
    let report = dir.join(LAYER_REPORT_FILE);
    let me = std::env::current_exe().map_err(|e| Error::failed(format!("find own executable: {e}")))?;
    let program = me.parent().ok_or_else(|| Error::failed("own executable has no directory"))?.join("drums-ckpt");
    let dump = crate::criu::Dump {
        pid: ns.init_pid,
        images: images.clone(),
        log: "dump.log".into(),
        external_net: ns.inodes.net,
        freeze_cgroup: crate::cgroup::freezer_dir(session.cgroup.as_ref()),
        action_script: script,
        leave_running: o.leave_running,
    };
    let mut cmd = dump.command();
    let log = images.join(&dump.log);
    cmd.env(ENV_PROGRAM, &program).env(ENV_FROM, upper).env(ENV_TO, &layer).env(ENV_REPORT, &report);
    cmd.env(ENV_SESSION, format!("{} {} {}", ns.init_pid, ns.init_start_time, session.net()?.session_addr));
    // A session that just became ready is still busy: a dump can meet a socket in a state CRIU cannot
    // save ("netlink: The socket has data to read", "Control messages in queue"). CRIU then resumes the
    // tree unharmed, so the dump is tried again after a pause; every attempt's failure is reported.
    let mut failures = vec![];
    let mut dump_s = 0.0;
    for attempt in 1..=DUMP_ATTEMPTS {
        crate::cli::progress("drums-ckpt", &format!("{}: criu dump, attempt {attempt}/{DUMP_ATTEMPTS}", session.id));
        clear_dir(&images)?;
        clear_dir(&layer)?;
        remove_if_there(&report)?;
        let refused = report.with_file_name(ACTION_REFUSED_FILE);
        remove_if_there(&refused)?;
        let t0 = Instant::now();
        let status = crate::criu::run(&mut cmd);
        dump_s = t0.elapsed().as_secs_f64();
        match status {
            Ok(st) if st.success() => break,
            Ok(_) => failures.push(match std::fs::read_to_string(&refused) {
                Ok(why) => format!("attempt {attempt}: {why}"),
                Err(_) => format!("attempt {attempt}: {}", crate::criu::log_tail(&log)),
            }),
            Err(e) => failures.push(format!("attempt {attempt}: {e}: {}", crate::criu::log_tail(&log))),
        }
        if attempt == DUMP_ATTEMPTS || !crate::proc::alive(ns.init_pid, ns.init_start_time) {
            return Err(Error::failed(format!("criu dump failed: {}", failures.join(" || "))));
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let layer_dropped = read_layer_report(&report)?;
    let kernel = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    Ok(Checkpoint {
        drums: crate::record::VERSION,
        kind: crate::record::CheckpointType::Tag,
        id: String::new(),
        dir: PathBuf::new(),
        images: images.clone(),
        layer: layer.clone(),
        layers: vec![],
        runtime: None,
        image: None,
        image_bytes: dir_bytes(&images),
        layer_bytes: dir_bytes(&layer),
        dump_s,
        criu_version: version.to_string(),
        kernel,
        manifest: session.desktop()?.manifest.clone(),
        clean: o.clean,
        browser_erased: None,
        created_at: crate::state::now(),
        source: CheckpointSource { session: String::new(), hostname: String::new(), session_addr: String::new(), session_mac: String::new(), desktop: session.desktop()?.clone(), net_policy: Default::default() },
        wipe,
        write_open,
        layer_dropped: Some(layer_dropped),
        mapped: None,
        mapped_note: None,
        boundary,
        criu_options: dump.options(),
        extra: Default::default(),
    })
}

/// CRIU's action script for a dump (`--action-script`): at post-dump, while the tree is frozen, run
/// `drums-ckpt copy-layer`, which copies the session's upper into the checkpoint layer. Nothing of the
/// session (no path) is in its text: CRIU runs it with `sh`, and the paths come in the environment.
pub const POST_DUMP_SCRIPT: &str = "#!/bin/sh
# CRIU action script of drums-ckpt(1): copy the session's upper into the checkpoint layer while the
# session's processes are frozen. Constant: the program and the paths are in CRIU's environment.
[ \"$CRTOOLS_SCRIPT_ACTION\" = post-dump ] || exit 0
exec setpriv --pdeathsig KILL \"$DRUMS_CKPT_PROGRAM\" copy-layer
";
/// The environment of `drums-ckpt copy-layer`: the program, the session's upper, the checkpoint layer,
/// and where the copy reports what it left out.
pub const ENV_PROGRAM: &str = "DRUMS_CKPT_PROGRAM";
pub const ENV_FROM: &str = "DRUMS_CKPT_LAYER_FROM";
pub const ENV_TO: &str = "DRUMS_CKPT_LAYER_TO";
pub const ENV_REPORT: &str = "DRUMS_CKPT_LAYER_REPORT";
/// For the post-dump action: the session's init (`PID START_TIME`) and its address.
pub const ENV_SESSION: &str = "DRUMS_CKPT_SESSION";
/// Beside the layer report: why the post-dump action refused this dump.
const ACTION_REFUSED_FILE: &str = "refused.txt";

/// In a checkpoint being made: what the layer copy left out (`overlay::copy::Dropped`, JSON).
const LAYER_REPORT_FILE: &str = "layer-copy.json";

/// CRIU runs the action script with `sh -c PATH`: a checkpoint root whose path the shell would split or
/// expand is refused.
fn check_shell_plain(root: &Path) -> Result<()> {
    let plain = root.as_os_str().as_encoded_bytes().iter().all(|b| b.is_ascii_alphanumeric() || b"/._+-".contains(b));
    if !plain {
        return Err(Error::env(format!("checkpoint root {}: CRIU runs the dump's action script through sh, so the path may hold only letters, digits and / . _ + -", root.display())));
    }
    Ok(())
}

fn remove_if_there(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", p, e)),
        _ => Ok(()),
    }
}

fn read_layer_report(p: &Path) -> Result<crate::overlay::copy::Dropped> {
    let b = std::fs::read(p).map_err(|e| Error::failed(format!("the layer copy left no report at {} ({e}): did CRIU run the post-dump action?", p.display())))?;
    let d = serde_json::from_slice(&b).map_err(|e| Error::failed(format!("{}: {e}", p.display())))?;
    std::fs::remove_file(p).ctx("remove", p)?;
    Ok(d)
}

/// `drums-ckpt copy-layer`, run by CRIU's post-dump action (`POST_DUMP_SCRIPT`) while the session is
/// frozen: copy the upper named by the environment into the checkpoint layer (`overlay::copy::copy_layer`) and
/// write what was left out beside it. The environment comes from drums-ckpt through CRIU; it is checked
/// all the same (a session's upper, a layer being made, its report): bad input (exit 3) otherwise.
pub fn copy_layer_action() -> Result<()> {
    let var = |name: &str| std::env::var_os(name).map(PathBuf::from).ok_or_else(|| Error::bad_input(format!("{name} is not set: copy-layer is run by CRIU during a drums-ckpt dump, not by hand")));
    let (from, to, report) = (var(ENV_FROM)?, var(ENV_TO)?, var(ENV_REPORT)?);
    let parts = |p: &Path, root: &Path| -> Option<Vec<String>> {
        let rest = p.strip_prefix(root).ok()?;
        rest.components().map(|c| match c {
            std::path::Component::Normal(n) => n.to_str().map(str::to_string),
            _ => None,
        }).collect()
    };
    let is_upper = parts(&from, &crate::state::sessions_root()).is_some_and(|v| v.len() == 3 && crate::state::check_session_id(&v[0]).is_ok() && v[1] == "rw" && v[2] == "upper");
    if !is_upper {
        return Err(Error::bad_input(format!("{ENV_FROM}: {} is not a session's upper ({}/ID/rw/upper)", from.display(), crate::state::sessions_root().display())));
    }
    let partial = parts(&to, &crate::state::checkpoint_root()).filter(|v| v.len() == 2 && v[1] == "layer").and_then(|v| v[0].strip_suffix(".partial").map(str::to_string));
    let Some(id) = partial.filter(|id| crate::state::check_checkpoint_id(id).is_ok()) else {
        return Err(Error::bad_input(format!("{ENV_TO}: {} is not the layer of a checkpoint being made ({}/ID.partial/layer)", to.display(), crate::state::checkpoint_root().display())));
    };
    if report != crate::state::checkpoint_root().join(format!("{id}.partial")).join(LAYER_REPORT_FILE) {
        return Err(Error::bad_input(format!("{ENV_REPORT}: {} is not {LAYER_REPORT_FILE} of the checkpoint being made", report.display())));
    }
    // With the session frozen, so nothing opens such a socket after this check: this dump fails (CRIU
    // resumes the session) and drums-ckpt dumps again after a pause, by when a DNS query is over.
    let session = std::env::var(ENV_SESSION).map_err(|_| Error::bad_input(format!("{ENV_SESSION} is not set")))?;
    let bad_session = || Error::bad_input(format!("{ENV_SESSION}: `{session}` is not `PID START_TIME ADDRESS`"));
    let [pid, start, addr] = session.split(' ').collect::<Vec<_>>()[..] else { return Err(bad_session()) };
    let (pid, start, addr): (i32, u64, std::net::Ipv4Addr) = (pid.parse().map_err(|_| bad_session())?, start.parse().map_err(|_| bad_session())?, addr.parse().map_err(|_| bad_session())?);
    if !crate::proc::alive(pid, start) {
        return Err(Error::failed(format!("the session's init {pid} is gone")));
    }
    let bound = crate::net::udp_bound_to(pid, addr)?;
    if !bound.is_empty() {
        // CRIU keeps no word of its action's: the reason goes beside the report, for drums-ckpt.
        let why = format!("UDP sockets bound to the session's address ({}): a sibling could not restore them", bound.join(", "));
        let refused = report.with_file_name(ACTION_REFUSED_FILE);
        std::fs::write(&refused, &why).ctx("write", &refused)?;
        return Err(Error::failed(why));
    }
    let dropped = crate::overlay::copy::copy_layer(&from, &to)?;
    std::fs::write(&report, serde_json::to_vec(&dropped).expect("serializes")).ctx("write", &report)
}

/// Remove a checkpoint: its directory and its mapped files (`mapped_root()/<id>`, named by the
/// directory's name). What is already gone is not an error.
pub fn remove_checkpoint_dir(dir: &Path) -> std::io::Result<()> {
    let gone = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    };
    if let Some(name) = dir.file_name() {
        gone(std::fs::remove_dir_all(crate::mapped::mapped_root().join(name)))?;
    }
    gone(std::fs::remove_dir_all(dir))
}


