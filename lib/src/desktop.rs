//! The desktop inside a session: Xvfb, a D-Bus session bus, the AT-SPI bus, openbox, the guest server and
//! Chromium on a page. Every process is started with `ns::spawn` (detached, its own process session,
//! stdio on a log inside the session) so that nothing in the session holds a host descriptor.

use crate::error::{Error, Result};
use crate::ns::{spawn, ExecOptions};
use crate::record::{Desktop, Session, SessionProcess};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const DEFAULT_TITLE: &str = "drums-ready";
/// A page titled `drums-ready` on a blue background (`%23` is `#`: a bare `#` would start a fragment).
pub const DEFAULT_URL: &str = "data:text/html,<title>drums-ready</title><body style=\"background:%2336c;color:white;font:48px sans-serif\"><h1>drums-ready</h1></body>";
/// Drums' own DevTools port for its Chromium, on the session's loopback (drums-reseed, drums-ckpt). Not
/// 9222: OSWorld's chrome tasks start their own browser and forward the session's port 9222 to it with
/// socat (`socat tcp-listen:9222,fork ...`), which cannot bind while anything holds 9222.
pub const DEVTOOLS_PORT: u16 = 9229;
pub use crate::record::GUEST_PORT;
/// Chromium's profile (user data directory) inside the session: on the overlay rather than in the /tmp
/// tmpfs, which CRIU would pack into every checkpoint and unpack in every restore.
pub const CHROMIUM_PROFILE: &str = "/var/cache/drums/chromium";
/// Where session processes log, inside the session.
pub const LOG_DIR: &str = "/tmp/drums";

pub struct DesktopOptions {
    pub display: u32,
    pub width: u32,
    pub height: u32,
    pub depth: u32,
    pub url: String,
    pub title: String,
    pub guest: bool,
    pub chromium: bool,
    pub extra_chromium_args: Vec<String>,
    /// The account the guest runs as, and so runs commands as; `None`: the desktop's account.
    pub guest_user: Option<String>,
    /// The account Xvfb, D-Bus, AT-SPI, openbox and Chromium run as; `None`: `user` when the session's
    /// /etc/passwd has it (every root image does), else root (`default_desktop_user`).
    pub desktop_user: Option<String>,
    /// Offer Xvfb's MIT-SHM extension (off by default: see drums-desktop(1)).
    pub mit_shm: bool,
    /// Offer Xvfb's GLX extension (off by default: see drums-desktop(1)).
    pub glx: bool,
}

/// Whether Chromium runs its own sandbox, which follows the session, not the image: a session in a user
/// namespace of its own (crate::idrange) lets it make the nested user, PID and network namespaces it
/// needs (crate::boundary::NESTED_SANDBOX_FLAGS); any other session refuses them, and Chromium runs with
/// `--no-sandbox` (the session is then its only sandbox, drums(7) SECURITY).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChromiumSandbox {
    On,
    Off,
}

impl ChromiumSandbox {
    pub fn of(session: &Session) -> ChromiumSandbox {
        if session.id_range.is_some() {
            ChromiumSandbox::On
        } else {
            ChromiumSandbox::Off
        }
    }
}

/// Chromium's command line. Each flag is explained in drums-desktop(1).
pub fn chromium_args(o: &DesktopOptions, sandbox: ChromiumSandbox) -> Vec<String> {
    let mut a: Vec<String> = vec!["chromium".to_string()];
    if sandbox == ChromiumSandbox::Off {
        a.push("--no-sandbox".to_string());
    }
    a.extend([
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-quic",
        "--no-first-run",
        "--no-default-browser-check",
        "--password-store=basic",
        "--disable-gpu",
        // Hides the bars that would cover the page ("unsupported command-line flag: --no-sandbox", and
        // the automation warning).
        "--test-type",
        "--remote-debugging-address=127.0.0.1",
        // Only the page's renderer may exist at checkpoint time: a spare renderer would carry a cloned V8
        // state that a later navigation reuses. No back-forward cache either: the page drums-reseed
        // navigates away from (in a restored renderer, with cloned state) must end, not wait to be
        // revived by a Back (the renewal is also about 2 ms shorter without it).
        "--disable-features=SpareRendererForSitePerProcess,BackForwardCache",
        // No shader caches on disk (GPUCache, DawnGraphiteCache, DawnWebGPUCache: 2.4 MB of files open for
        // writing, which every restored sibling would need a copy of).
        "--disable-gpu-shader-disk-cache",
        // The network service inside the browser process instead of a utility process of its own: one
        // process less to checkpoint and restore (image 193 -> 169 MiB, restore about 30 ms shorter). The
        // feature is named NetworkServiceInProcess2 in current Chromium, NetworkServiceInProcess before.
        "--enable-features=NetworkServiceInProcess2,NetworkServiceInProcess",
        // The GPU process's work (compositing, in software here) on a thread of the browser process, and
        // so no second, unsandboxed zygote to fork it from (left unused, that zygote's greeting would sit
        // unread in a socket, which CRIU cannot dump): two processes fewer per session, 31 MiB less in
        // every checkpoint and about 14 ms off a cold start.
        "--in-process-gpu",
        "--no-unsandboxed-zygote",
        // No crash handler: two crashpad processes fewer to checkpoint and restore (about 10 ms of a
        // restore); a closed network could not send a report anyway.
        "--disable-crashpad-for-testing",
        // The on-device model performance class Chromium would measure itself 3 minutes after its start
        // (7, GPU blocked: it runs with --disable-gpu), given instead: the measurement launches a utility
        // process, and a sibling restored from a checkpoint older than 3 minutes ran it at once, during
        // its reseed (a usable restore about 0.12 s longer).
        "--optimization-guide-performance-class=7",
        "--window-position=0,0",
        // OSWorld's /accessibility reads the AT-SPI tree, which Chromium fills only when asked to.
        "--force-renderer-accessibility",
    ]
    .iter()
    .map(|s| s.to_string()));
    a.push(format!("--user-data-dir={CHROMIUM_PROFILE}"));
    a.push(format!("--remote-debugging-port={DEVTOOLS_PORT}"));
    a.push(format!("--window-size={},{}", o.width, o.height));
    a.extend(o.extra_chromium_args.iter().cloned());
    a.push(format!("--app={}", o.url));
    a
}

/// How long the guest may take to listen on its port: it binds first thing (no X, no page), so a slow
/// start means a loaded machine, not a guest still working.
const GUEST_LISTEN_TIMEOUT: Duration = Duration::from_secs(5);
const X_TIMEOUT: Duration = Duration::from_secs(15);
/// How long Chromium may take to listen on its DevTools port, the sign that its browser process is up
/// (about 0.3 s here; much longer only on a machine starved of CPU or memory).
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of a dead process's log an error quotes.
const LOG_TAIL_BYTES: usize = 600;

/// Start one desktop process (detached, its log under LOG_DIR named by its role) and hold it from right
/// after its exec: the record's entry and its watch.
fn spawn_watched(session: &Session, init: i32, role: &str, argv: &[String], env: Vec<(String, String)>, as_ids: (u32, u32)) -> Result<(SessionProcess, Watched)> {
    let w = Watched { role: role.into(), host: None, init, pidfd: None };
    let sp = spawn(session, argv, &ExecOptions { detach: true, log: Some(format!("{LOG_DIR}/{role}.log").into()), env, cwd: None, uid_gid: Some(as_ids), pass_terminal: false })
        .map_err(|e| match e {
            Error::Failed(m) => w.error(&format!("could not be started ({m})")),
            other => other,
        })?;
    let host = sp.host_pid.and_then(|p| Some((p, crate::proc::start_time(p)?)));
    let pidfd = host.and_then(|(p, start)| crate::proc::Pidfd::open(p, start)).map(std::sync::Arc::new);
    Ok((SessionProcess { role: role.into(), pid: sp.ns_pid, host_pid: sp.host_pid }, Watched { host, pidfd, ..w }))
}

/// A process started here, named by its host PID and start time so that its liveness is checked safely
/// across PID reuse.
#[derive(Clone)]
struct Watched {
    role: String,
    /// `None`: already gone right after its exec.
    host: Option<(i32, u64)>,
    /// The session's init, through whose root its log is read (crate::inroot).
    init: i32,
    /// Held from right after the start, so that an exit is told with its status (crate::proc::Pidfd).
    pidfd: Option<std::sync::Arc<crate::proc::Pidfd>>,
}

impl Watched {
    fn alive(&self) -> bool {
        self.host.is_some_and(|(pid, start)| crate::proc::alive(pid, start))
    }
    /// The error naming this process and its log. The log lives in the session's /tmp, which a pipeline
    /// destroys on failure (pipelines/cold.sh), so the message carries the log's last lines as well.
    fn error(&self, what: &str) -> Error {
        let log = PathBuf::from(format!("{LOG_DIR}/{}.log", self.role));
        let tail = log_tail(self.init, &log);
        Error::Process { role: self.role.clone(), msg: format!("{} {what}; its log {} in the session: {tail}", self.role, log.display()), log }
    }
    /// `Some(error)` once the process has exited: what the waits ask between their polls.
    fn gone(&self) -> Option<Error> {
        (!self.alive()).then(|| self.error(&format!("exited during the desktop's start ({})", self.how_it_ended())))
    }
    /// How the process ended: its wait status once its parent (the session's init, which reaps it at
    /// once) has reaped it, waited for briefly; else that it is not known.
    fn how_it_ended(&self) -> String {
        let Some(fd) = &self.pidfd else { return "gone before it could be watched; exit status unknown".into() };
        let t0 = Instant::now();
        loop {
            if let Some(st) = fd.wait_status() {
                return crate::proc::describe_wait_status(st);
            }
            if t0.elapsed() > Duration::from_millis(500) {
                return "exit status unknown".into();
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// The end of a log inside the session, read inside its root: a link the session made in its place is
/// followed there, never to a host file whose lines an error would then print.
fn log_tail(init: i32, path: &Path) -> String {
    let bytes = crate::inroot::Root::of_process(init, None).and_then(|root| crate::inroot::read_tail(&root, path, LOG_TAIL_BYTES as u64));
    let Ok(bytes) = bytes else { return "unreadable".into() };
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        return "empty".into();
    }
    format!("ends with: {}", lines[lines.len().saturating_sub(3)..].join(" | "))
}

/// The desktop's account when none is given: `user`, the desktop user of OSWorld's image, when the
/// session's /etc/passwd has that user (every image of pipelines/image.sh does); else root.
fn default_desktop_user(init: i32) -> String {
    let root = PathBuf::from(format!("/proc/{init}/root"));
    if crate::account::Account::lookup_in(&root, DESKTOP_USER).is_ok() {
        DESKTOP_USER.into()
    } else {
        "root".into()
    }
}

/// The desktop user of OSWorld's image, which every root image has.
pub const DESKTOP_USER: &str = "user";

/// Start the desktop in a session that has namespaces. Adds `desktop`. Each process must still run once
/// it is expected to be up (Xvfb accepting connections, the guest listening, the rest when this returns);
/// otherwise the error names it and its log, and the session is left as it is for its ledger's destroy.
pub fn start(session: &mut Session, o: &DesktopOptions) -> Result<()> {
    if session.desktop.is_some() {
        return Err(Error::bad_field("desktop", "this session already has a desktop"));
    }
    let t0 = Instant::now();
    let init = session.ns()?.init_pid;
    let net = session.net()?.clone();
    // The desktop runs as the session's unprivileged user, as on OSWorld's image: only the init (and what
    // the user starts with sudo) is root. The guest is that user too unless told otherwise.
    let root = PathBuf::from(format!("/proc/{init}/root"));
    let desktop_user = o.desktop_user.clone().unwrap_or_else(|| default_desktop_user(init));
    // An account the session does not have is the caller's mistake, found before anything starts.
    let lookup = |name: &str| crate::account::Account::lookup_in(&root, name).map_err(|e| Error::bad_input(format!("account {name}: {e}")));
    let account = lookup(&desktop_user)?;
    let guest_user = o.guest_user.clone().unwrap_or_else(|| desktop_user.clone());
    let guest_account = lookup(&guest_user)?;
    let ids = (account.uid, account.gid);
    // The session's own /tmp, seen from the host through its init's root (links in it followed inside
    // that root only: crate::inroot): the logs, the D-Bus socket and the runtime directory, the user's.
    let host_view = crate::inroot::Root::of_process(init, Some(session.ns()?.init_start_time))?;
    crate::inroot::mkdir_all(&host_view, Path::new(LOG_DIR), 0o755, account.uid, account.gid)?;
    crate::inroot::mkdir_all(&host_view, &Path::new(LOG_DIR).join("xdg"), 0o700, account.uid, account.gid)?;

    let display = format!(":{}", o.display);
    let bus = format!("unix:path={LOG_DIR}/bus");
    let env = desktop_env(o.display, &account);
    let mut procs = vec![];
    let mut watched: Vec<Watched> = vec![];
    let mut run = |role: &str, argv: Vec<String>, extra_env: Vec<(String, String)>, as_ids: (u32, u32)| -> Result<Watched> {
        let mut e = env.clone();
        e.extend(extra_env);
        let (p, w) = spawn_watched(session, init, role, &argv, e, as_ids)?;
        procs.push(p);
        watched.push(w.clone());
        Ok(w)
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();

    let mut xvfb_args = s(&["Xvfb", &display, "-screen", "0", &format!("{}x{}x{}", o.width, o.height, o.depth), "-nolisten", "tcp", "-br", "-noreset"]);
    if !o.mit_shm {
        // Without MIT-SHM Chromium hands its frames to X over the socket instead of through two SysV
        // shared-memory segments of 12 MB, which CRIU must recreate in every restore (about 18 ms).
        xvfb_args.extend(s(&["-extension", "MIT-SHM"]));
    }
    if !o.glx {
        // Without GLX Xvfb does not load Mesa and LLVM (13 MiB less in every session and its checkpoint,
        // about 20 ms off a cold start); Chromium draws in software either way (--disable-gpu).
        xvfb_args.extend(s(&["-extension", "GLX"]));
    }
    let xvfb = run("xvfb", xvfb_args, vec![], ids)?;
    wait_for_x(init, o.display, xvfb)?;
    let dbus = run("dbus", s(&["dbus-daemon", "--session", "--nofork", "--nopidfile", &format!("--address={bus}")]), vec![], ids)?;
    // The AT-SPI launcher connects to the session bus at once and exits when it is not there yet.
    wait_for_socket(&host_view, &Path::new(LOG_DIR).join("bus"), dbus)?;
    run("at-spi", s(&["/usr/libexec/at-spi-bus-launcher", "--launch-immediately"]), vec![], ids)?;
    link_bus_where_osworld_has_it(&host_view, &account)?;
    if has_system_services(&host_view) {
        // As the session's root, as a machine's boot starts it: the daemon drops to its own account
        // (`messagebus`, system.conf's <user>) and starts each service as the account its file names.
        crate::inroot::mkdir_all(&host_view, Path::new(SYSTEM_BUS_DIR), 0o755, 0, 0)?;
        let system_bus = run("system-bus", s(&["dbus-daemon", "--system", "--nofork", "--nopidfile"]), vec![], (0, 0))?;
        wait_for_socket(&host_view, &Path::new(SYSTEM_BUS_DIR).join("system_bus_socket"), system_bus)?;
    }
    run("openbox", s(&["openbox", "--sm-disable"]), vec![], ids)?;
    let guest = if o.guest {
        let bin = crate::runtime::inside("drums-guest");
        let argv = vec![bin.display().to_string(), "--listen".into(), format!("0.0.0.0:{GUEST_PORT}"), "--display".into(), display.clone(), "--user".into(), guest_user.clone()];
        let guest_env = vec![("HOME".into(), guest_account.home.display().to_string()), ("USER".into(), guest_account.name.clone()), ("LOGNAME".into(), guest_account.name.clone())];
        Some(run("guest", argv, guest_env, (guest_account.uid, guest_account.gid))?)
    } else {
        None
    };
    let chromium = if o.chromium {
        prepare_chromium_profile(init, ids)?;
        let (args, env) = chromium_command(session, o, ChromiumSandbox::of(session));
        Some(run("chromium", args, env, ids)?)
    } else {
        None
    };
    // The guest is waited for after Chromium started, so that its start overlaps Chromium's, which
    // drums-ready then waits for: the wait costs the cold path nothing when the guest is up by then.
    let guest_url = match guest {
        Some(g) => {
            wait_for_guest(init, g)?;
            Some(format!("http://{}:{GUEST_PORT}", net.session_addr))
        }
        None => None,
    };
    if let Some(c) = chromium {
        wait_for_chromium(init, c, &watched)?;
    }
    if let Some(e) = watched.iter().find_map(Watched::gone) {
        return Err(e);
    }
    let chromium_sandbox = procs.iter().find(|p| p.role == "chromium").and_then(|p| p.host_pid).map(runs_sandboxed);
    session.desktop = Some(Desktop {
        display: o.display,
        width: o.width,
        height: o.height,
        depth: o.depth,
        x_socket: format!("@/tmp/.X11-unix/X{}", o.display),
        url: o.url.clone(),
        title: o.title.clone(),
        devtools_port: DEVTOOLS_PORT,
        guest_url,
        processes: procs,
        manifest: manifest(session)?,
        start_s: t0.elapsed().as_secs_f64(),
        mit_shm: o.mit_shm,
        glx: o.glx,
        user: Some(account.name.clone()),
        guest_user: o.guest.then(|| guest_account.name.clone()),
        chromium_sandbox,
    });
    Ok(())
}

/// Chromium's command line in `session` and what it adds to the desktop's environment.
fn chromium_command(session: &Session, o: &DesktopOptions, sandbox: ChromiumSandbox) -> (Vec<String>, Vec<(String, String)>) {
    let shim = crate::runtime::inside("libdrums_pkey_shim.so");
    let mut args = chromium_args(o, sandbox);
    // The session's upstream proxy (crate::net::egress::Proxy): its other Chromiums read it from
    // /etc/chromium.d, which this command line does not go through.
    if let Some(p) = session.egress.as_ref().and_then(|e| e.proxy.as_ref()) {
        args.push(format!("--proxy-server={p}"));
    }
    (args, vec![("LD_PRELOAD".into(), shim.display().to_string())])
}

/// How long the old Chromium may take to close its windows and exit after DevTools' Browser.close before
/// what is left of it is killed (about 0.1 s here).
const CHROMIUM_CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// What `sandbox_chromium` did: the Chromium it ended and the one it started.
pub struct ChromiumRestart {
    /// False: Chromium already ran its sandbox (no --no-sandbox on its command line); nothing was done.
    pub restarted: bool,
    /// Seconds from the old browser's close to the new one listening on its DevTools port.
    pub seconds: f64,
}

/// Start the session's Chromium again with its own sandbox. For a restored sibling in a user namespace
/// of its own (`drums-restore --userns`): its Chromium is its checkpoint's, which ran in a session
/// without one and so with --no-sandbox, and a sandboxed Chromium cannot be checkpointed (CRIU 4.2 does
/// not dump nested PID namespaces, crate::ckpt). The old browser is closed through DevTools (a clean
/// exit: no "did not shut down correctly" bar on the new one's page), what is left of its process tree
/// after CHROMIUM_CLOSE_TIMEOUT is killed, and a new one is started on the record's page as
/// drums-desktop start starts it, and waited for on its DevTools port; the record's chromium process is
/// the new one. The caller checks the page (drums-ready). A session without its own user namespace is
/// refused (bad input): its boundary refuses the nested namespaces the sandbox needs.
pub fn sandbox_chromium(session: &mut Session, extra_chromium_args: &[String]) -> Result<ChromiumRestart> {
    if session.id_range.is_none() {
        return Err(Error::bad_input(format!(
            "session {} has no user namespace of its own: its boundary refuses the nested namespaces Chromium's sandbox needs (drums(7), \"Chromium's sandbox\"); restore it with drums-restore --userns",
            session.id
        )));
    }
    let ns = session.ns()?.clone();
    let d = session.desktop()?.clone();
    let idx = d.processes.iter().position(|p| p.role == "chromium").ok_or_else(|| Error::bad_field("desktop.processes", "no chromium: this session's desktop runs none"))?;
    let old = d.processes[idx].host_pid.ok_or_else(|| Error::bad_field("desktop.processes", "chromium has no host_pid"))?;
    let old_start = crate::proc::start_time(old).ok_or_else(|| Error::failed(format!("session {}: its Chromium (host pid {old}) is gone", session.id)))?;
    // The record's pid must still be this session's Chromium: a pid reused by anything else is not ours
    // to close.
    if crate::proc::ns_inode(old, "pid")? != ns.inodes.pid {
        return Err(Error::failed(format!("session {}: host pid {old} of its record's chromium is not in the session's PID namespace", session.id)));
    }
    if runs_sandboxed(old) {
        return Ok(ChromiumRestart { restarted: false, seconds: 0.0 });
    }
    let init = ns.init_pid;
    let root = PathBuf::from(format!("/proc/{init}/root"));
    let user = d.user.clone().unwrap_or_else(|| default_desktop_user(init));
    let account = crate::account::Account::lookup_in(&root, &user).map_err(|e| Error::bad_input(format!("account {user}: {e}")))?;
    let o = DesktopOptions {
        display: d.display,
        width: d.width,
        height: d.height,
        depth: d.depth,
        url: d.url.clone(),
        title: d.title.clone(),
        guest: false,
        chromium: true,
        extra_chromium_args: extra_chromium_args.to_vec(),
        guest_user: None,
        desktop_user: Some(user),
        mit_shm: d.mit_shm,
        glx: d.glx,
    };
    let t0 = Instant::now();
    // Every process of the old browser's tree, taken before it closes: its zygote and renderers outlive
    // it briefly, reparented to the session's init.
    let tree: Vec<(i32, u64)> = std::iter::once((old, old_start)).chain(crate::proc::descendants(old).into_iter().filter_map(|p| Some((p, crate::proc::start_time(p)?)))).collect();
    let deadline = Instant::now() + crate::state::scaled(CHROMIUM_CLOSE_TIMEOUT);
    if let Ok(mut cdp) = crate::cdp::Cdp::connect(init, d.devtools_port, deadline) {
        // The reply may not come: the browser exits while answering.
        let _ = cdp.send(None, "Browser.close", serde_json::json!({}));
    }
    while tree.iter().any(|&(p, st)| crate::proc::alive(p, st)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    for &(p, st) in &tree {
        if crate::proc::alive(p, st) {
            // Chromium ran as the session's `user`: the signal goes to a process of the session's range.
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), nix::sys::signal::Signal::SIGKILL);
        }
    }
    let gone_by = Instant::now() + Duration::from_secs(5);
    while tree.iter().any(|&(p, st)| crate::proc::alive(p, st)) {
        if Instant::now() > gone_by {
            return Err(Error::failed(format!("session {}: the old Chromium (host pid {old}) did not exit after SIGKILL", session.id)));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (args, extra_env) = chromium_command(session, &o, ChromiumSandbox::On);
    let mut env = desktop_env(o.display, &account);
    env.extend(extra_env);
    let (p, w) = spawn_watched(session, init, "chromium", &args, env, (account.uid, account.gid))?;
    wait_for_chromium(init, w.clone(), &[w])?;
    let sandboxed = p.host_pid.map(runs_sandboxed);
    let desktop = session.desktop.as_mut().expect("checked above");
    desktop.processes[idx] = p;
    desktop.chromium_sandbox = sandboxed;
    Ok(ChromiumRestart { restarted: true, seconds: t0.elapsed().as_secs_f64() })
}

/// Whether the Chromium at host pid `pid` runs its own sandbox: its command line has no `--no-sandbox`.
/// Chromium rewrites its command line as one string, so the flag is a word of it, whatever the separator.
fn runs_sandboxed(pid: i32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    !cmdline.split(|&b| b == 0 || b == b' ').any(|w| w == b"--no-sandbox")
}

/// The environment of every desktop process (and so of what the guest launches) on display `display`,
/// as `account`.
fn desktop_env(display: u32, account: &crate::account::Account) -> Vec<(String, String)> {
    let bus = format!("unix:path={LOG_DIR}/bus");
    vec![
        ("DISPLAY".to_string(), format!(":{display}")),
        ("DBUS_SESSION_BUS_ADDRESS".to_string(), bus),
        ("XDG_RUNTIME_DIR".to_string(), format!("{LOG_DIR}/xdg")),
        ("NO_AT_BRIDGE".to_string(), "0".to_string()),
        // Every application of the session exposes itself to AT-SPI, as on OSWorld's image (GNOME's
        // toolkit-accessibility on): Chromium (and so a task's google-chrome) reads ACCESSIBILITY_ENABLED,
        // Qt applications (VLC) QT_ACCESSIBILITY; GTK ones register through the bridge anyway. The guest
        // hands the same environment to what a task launches, so its windows show in /accessibility.
        ("ACCESSIBILITY_ENABLED".to_string(), "1".to_string()),
        ("QT_ACCESSIBILITY".to_string(), "1".to_string()),
        // GTK 2 applications (GIMP 2.10, VLC's GTK dialogs) load their accessibility modules only when
        // named here, as OSWorld's Ubuntu names them: GAIL and the AT-SPI bridge (packages libgail-common
        // and libatk-adaptor, in the OSWorld image). GTK 3 has both built in and skips these two names; an
        // image without the modules only makes a GTK 2 application print that it could not load them.
        ("GTK_MODULES".to_string(), "gail:atk-bridge".to_string()),
        // A UTF-8 locale, as on OSWorld's image: gnome-terminal's server (started by D-Bus with the bus's
        // environment) refuses to run in the POSIX locale, and tasks' scripts print non-ASCII text.
        // C.UTF-8 is glibc's own, in every Debian image without a locales package.
        ("LANG".to_string(), "C.UTF-8".to_string()),
        ("HOME".to_string(), account.home.display().to_string()),
        ("USER".to_string(), account.name.clone()),
        ("LOGNAME".to_string(), account.name.clone()),
    ]
}

/// The session bus also at /run/user/UID/bus, where OSWorld's image (systemd's) has it: its tasks name that
/// address in their commands (`export DBUS_SESSION_BUS_ADDRESS='unix:path=/run/user/1000/bus'` before
/// `gsettings set`), and without a bus there dconf stores nothing. A link to the bus's socket, in the
/// user's runtime directory made as systemd makes it (/run/user root's, 0755; the user's own, 0700).
fn link_bus_where_osworld_has_it(root: &crate::inroot::Root, account: &crate::account::Account) -> Result<()> {
    crate::inroot::mkdir_all(root, Path::new("/run/user"), 0o755, 0, 0)?;
    let dir = PathBuf::from(format!("/run/user/{}", account.uid));
    crate::inroot::mkdir(root, &dir, 0o700, account.uid, account.gid)?;
    crate::inroot::symlink_new(root, &dir.join("bus"), &Path::new(LOG_DIR).join("bus"), account.uid, account.gid)?;
    Ok(())
}

/// Where D-Bus's system.conf (Debian's) has the system bus listen: `system_bus_socket` in it.
const SYSTEM_BUS_DIR: &str = "/run/dbus";
/// Where an image's packages put the D-Bus services the system bus may start on demand.
const SYSTEM_SERVICES_DIR: &str = "/usr/share/dbus-1/system-services";

/// Whether the session's image has D-Bus system services (a `.service` file in SYSTEM_SERVICES_DIR): then
/// the desktop gets a system bus, since those services answer only through one (OSWorld's image:
/// systemd-timedated behind `timedatectl`, pipelines/image.sh). A machine's boot starts the bus; a session
/// has no boot, so the desktop does. An image without such services (the default image) gets no system
/// bus, and its sessions run no process more.
fn has_system_services(root: &crate::inroot::Root) -> bool {
    use std::os::fd::AsFd;
    let Ok(dir) = root.resolve(Path::new(SYSTEM_SERVICES_DIR), libc::O_PATH | libc::O_DIRECTORY) else { return false };
    crate::inroot::list_dir(dir.as_fd()).is_ok_and(|names| names.iter().any(|n| n.to_string_lossy().ends_with(".service")))
}

/// Chromium's profile directory, with a plain file where Chromium would create `BrowserMetrics/`: it
/// keeps its histograms in a 4 MiB memory-mapped file there (no switch turns that off), which a restored
/// sibling would need a private copy of; unable to make the directory, Chromium keeps them in memory.
fn prepare_chromium_profile(init_pid: i32, (uid, gid): (u32, u32)) -> Result<()> {
    // Inside the session's root (crate::inroot): a link planted on the way is followed there only, and
    // one in BrowserMetrics' place counts as something there.
    let root = crate::inroot::Root::of_process(init_pid, None)?;
    let profile = Path::new(CHROMIUM_PROFILE);
    crate::inroot::mkdir_all(&root, profile, 0o700, uid, gid)?;
    crate::inroot::create_new(&root, &profile.join("BrowserMetrics"), b"Drums: Chromium keeps its histograms in memory (see drums-desktop(1)).\n", 0o644, uid, gid)?;
    Ok(())
}

/// Wait until a process has made its listening socket `path` (inside the session's root); a process that
/// exits ends the wait at once.
fn wait_for_socket(root: &crate::inroot::Root, path: &Path, owner: Watched) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if crate::inroot::symlink_metadata(root, path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) {
            return Ok(());
        }
        if let Some(e) = owner.gone() {
            return Err(e);
        }
        if t0.elapsed() > crate::state::scaled(X_TIMEOUT) {
            return Err(owner.error(&format!("did not make its socket {} within {:?}", path.display(), crate::state::scaled(X_TIMEOUT))));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Wait until the guest accepts connections on its port, on the session's loopback from inside its network
/// namespace: what is checked is the guest's listener, not the veth and host firewall in between.
/// The listener must be the guest's, not something else on its port: the guest says so in its log once it
/// has bound (drums-guest(1)); until then the connection is not tried.
fn wait_for_guest(init_pid: i32, guest: Watched) -> Result<()> {
    let g = guest.clone();
    let log = PathBuf::from(format!("{LOG_DIR}/{}.log", guest.role));
    let root = crate::inroot::Root::of_process(init_pid, None)?;
    let bound = move || crate::inroot::read_to_string(&root, &log).is_ok_and(|t| t.contains("listening on http://"));
    let t0 = Instant::now();
    while !bound() {
        if let Some(e) = guest.gone() {
            return Err(e);
        }
        if t0.elapsed() > crate::state::scaled(GUEST_LISTEN_TIMEOUT) {
            return Err(guest.error(&format!("did not say it listens on port {GUEST_PORT} within {:?}", crate::state::scaled(GUEST_LISTEN_TIMEOUT))));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    match crate::cdp::connect_in_netns_unless(init_pid, GUEST_PORT, crate::state::scaled(GUEST_LISTEN_TIMEOUT), move || g.gone()) {
        Ok(_connection) => Ok(()),
        Err(e @ Error::Process { .. }) => Err(e),
        Err(e) => Err(guest.error(&format!("did not listen on port {GUEST_PORT} within {:?} ({e})", crate::state::scaled(GUEST_LISTEN_TIMEOUT)))),
    }
}

/// Wait until Chromium listens on its DevTools port, on the session's loopback: its browser process is
/// up. Any process of the desktop that exits meanwhile (Chromium, or the X server it needs) ends the wait
/// at once with an error naming it and how it ended; so does CHROMIUM_TIMEOUT (times DRUMS_TIMEOUT_SCALE).
fn wait_for_chromium(init_pid: i32, chromium: Watched, all: &[Watched]) -> Result<()> {
    let all = all.to_vec();
    let c = chromium.clone();
    match crate::cdp::connect_in_netns_unless(init_pid, DEVTOOLS_PORT, crate::state::scaled(CHROMIUM_TIMEOUT), move || all.iter().find_map(Watched::gone)) {
        Ok(_connection) => Ok(()),
        Err(e @ Error::Process { .. }) => Err(e),
        Err(e) => Err(c.error(&format!("did not listen on its DevTools port {DEVTOOLS_PORT} within {:?} ({e})", crate::state::scaled(CHROMIUM_TIMEOUT)))),
    }
}

/// Wait until the X server accepts connections, from a thread that joins the session's network
/// namespace (where its abstract socket lives); the main thread must stay out of it and single-threaded
/// for the forks of `ns::spawn`. An X server that exits ends the wait at once.
fn wait_for_x(init_pid: i32, display: u32, xvfb: Watched) -> Result<()> {
    crate::nsenter::in_netns(init_pid, move || {
        let t0 = Instant::now();
        loop {
            // One attempt waits at most a second, so that an X server that exits meanwhile is noticed.
            if crate::x11::connect(display, (Instant::now() + Duration::from_secs(1)).min(t0 + crate::state::scaled(X_TIMEOUT))).is_ok() {
                return Ok(());
            }
            if let Some(e) = xvfb.gone() {
                return Err(e);
            }
            if t0.elapsed() > crate::state::scaled(X_TIMEOUT) {
                return Err(xvfb.error(&format!("did not accept connections on :{display} within {:?}", crate::state::scaled(X_TIMEOUT))));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    })
}

/// Versions of what the session is made of: the root image (name, digest) and the versions of its
/// Chromium, Xvfb and openbox packages from the image's record; the kernel and CRIU that run it, which are
/// the host's. CRIU's version is cached per binary modification time, since asking costs a process start.
pub fn manifest(session: &Session) -> Result<Map<String, Value>> {
    let image_ref = session.overlay()?.image.clone().ok_or_else(|| Error::bad_field("overlay.image", "missing: this session's root was made on the host's / by an older drums-overlay"))?;
    let image = crate::image::check(&image_ref, "overlay.image")?;
    let mut out = Map::new();
    out.insert("image".into(), json!({"name": image.name, "digest": image.digest, "suite": image.suite}));
    for (name, package) in [("chromium", "chromium"), ("xvfb", "xvfb"), ("openbox", "openbox")] {
        out.insert(name.into(), json!(image.version_of(package)));
    }
    let uname = nix::sys::utsname::uname().ok();
    out.insert("kernel".into(), json!(uname.map(|u| u.release().to_string_lossy().into_owned())));
    let cache_path = crate::state::state_root().join("manifest-cache.json");
    let mut cache: Map<String, Value> = std::fs::read(&cache_path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let criu = crate::criu::binary();
    let mtime = std::fs::metadata(&criu).and_then(|m| m.modified()).ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_secs());
    let key = format!("{}@{mtime:?}", criu.display());
    let v = match cache.get(&key) {
        Some(v) => v.clone(),
        None => {
            let v = version_of(&criu.display().to_string(), &["--version"]).map(Value::String).unwrap_or(Value::Null);
            cache.insert(key, v.clone());
            let _ = crate::state::private_root(&crate::state::state_root());
            let _ = std::fs::write(&cache_path, serde_json::to_vec(&cache).unwrap_or_default());
            v
        }
    };
    out.insert("criu".into(), v);
    out.insert("drums".into(), json!(env!("CARGO_PKG_VERSION")));
    Ok(out)
}

fn version_of(bin: &str, args: &[&str]) -> Option<String> {
    if !Path::new(bin).exists() {
        return None;
    }
    // A version that cannot be had in 10 s is recorded as unknown (null), not waited for.
    let o = crate::proc::output_within(std::process::Command::new(bin).args(args), None, Duration::from_secs(10)).ok()?;
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    // The first line with a dotted version number (Xvfb prints its option list too).
    let dotted = |l: &str| l.as_bytes().windows(3).any(|w| w[0].is_ascii_digit() && w[1] == b'.' && w[2].is_ascii_digit());
    text.lines().map(str::trim).find(|l| dotted(l)).map(str::to_string)
}
