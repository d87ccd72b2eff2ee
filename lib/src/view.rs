//! Watching sessions live (drums-view(1), docs/view.md): a VNC server on a session's display, started
//! inside the session only when someone asks for it, and the host's overview page over every session,
//! pool, checkpoint and image.
//!
//! The VNC server is Debian's x11vnc from the session's root image, run inside the session (its PID
//! namespace and cgroups, as the desktop user) and listening on the session's own address: a connection
//! to it goes from the host into the session, so the firewall's owner rule (drums(7), "Network
//! boundary") decides who may open one, as for the guest. Nothing runs for a session nobody watches, and
//! the server dies with its session.

pub mod overview;
pub mod results;
pub mod serve;
pub mod thumb;

use crate::error::{Error, Result};
use crate::record::Session;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The port the VNC server listens on inside a session (RFB's display 0, as OSWorld's images have it).
pub const VNC_PORT: u16 = 5900;
/// The program, inside the session's root image (pipelines/images/desktop.packages).
const X11VNC: &str = "x11vnc";
/// How long the server may take to listen after it started.
const START_TIMEOUT: Duration = Duration::from_secs(15);

crate::record_type!(VncType = "vnc");

/// What `drums-view vnc` and `drums-view stop` print (docs/record.md, "VNC record").
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Vnc {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: VncType,
    pub session: String,
    /// A server is listening now.
    pub running: bool,
    /// Where a VNC client connects (the session's address and VNC_PORT); null when none runs.
    pub addr: Option<String>,
    pub port: Option<u16>,
    /// The server takes keyboard and pointer input; null when none runs.
    pub input: Option<bool>,
    /// The server's PID inside the session's PID namespace, and on the host; null when none runs.
    pub pid: Option<i32>,
    pub host_pid: Option<i32>,
    /// This run started the server (false: it was found running, or stopped).
    pub started: bool,
    /// Seconds from the start of the server to its listening socket (wall clock, this run); null when
    /// this run started none.
    pub start_s: Option<f64>,
    /// Servers this run ended (`stop`, or a server of the other input mode replaced).
    pub stopped: u32,
}

/// An x11vnc process of a session: host PID, and whether it takes input.
struct Server {
    host_pid: i32,
    input: bool,
}

fn servers(session: &Session) -> Result<Vec<Server>> {
    let pidns = session.ns()?.inodes.pid;
    Ok(crate::proc::pids_in_pidns(pidns)
        .into_iter()
        .filter(|p| crate::proc::comm(*p) == X11VNC)
        .map(|host_pid| {
            let cmdline = std::fs::read(format!("/proc/{host_pid}/cmdline")).unwrap_or_default();
            let view_only = cmdline.split(|b| *b == 0).any(|a| a == b"-viewonly");
            Server { host_pid, input: !view_only }
        })
        .collect())
}

/// The session's network namespace has a TCP socket listening on `port` (read from the session's own
/// /proc/PID/net tables, so that no probe connection reaches the server).
fn listening(host_pid: i32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["tcp", "tcp6"].iter().any(|t| {
        std::fs::read_to_string(format!("/proc/{host_pid}/net/{t}"))
            .map(|s| s.lines().skip(1).any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
            }))
            .unwrap_or(false)
    })
}

fn kill_servers(found: &[Server]) -> u32 {
    let mut n = 0;
    for s in found {
        if unsafe { libc::kill(s.host_pid, libc::SIGTERM) } == 0 {
            n += 1;
        }
    }
    // x11vnc ends on SIGTERM at once; one that lingers past a second is killed.
    let t0 = Instant::now();
    while found.iter().any(|s| std::path::Path::new(&format!("/proc/{}", s.host_pid)).exists() && crate::proc::state(s.host_pid) != Some('Z')) {
        if t0.elapsed() > Duration::from_secs(1) {
            for s in found {
                unsafe { libc::kill(s.host_pid, libc::SIGKILL) };
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    n
}

fn record(session: &Session, running: Option<(&Server, i32)>, started: bool, start_s: Option<f64>, stopped: u32) -> Result<Vnc> {
    let addr = session.net()?.session_addr.clone();
    Ok(Vnc {
        drums: crate::record::VERSION,
        kind: VncType::Tag,
        session: session.id.clone(),
        running: running.is_some(),
        addr: running.map(|_| addr),
        port: running.map(|_| VNC_PORT),
        input: running.map(|(s, _)| s.input),
        pid: running.map(|(_, p)| p),
        host_pid: running.map(|(s, _)| s.host_pid),
        started,
        start_s,
        stopped,
    })
}

/// Start the session's VNC server (or find it running in the asked mode: a server of the other mode is
/// replaced). Call only from a single-threaded process (it forks into the session).
pub fn start(session: &Session, input: bool) -> Result<Vnc> {
    let desktop = session.desktop()?;
    let ns = session.ns()?;
    if !crate::proc::alive(ns.init_pid, ns.init_start_time) {
        return Err(Error::bad_input(format!("session {}: its init (pid {}) is gone", session.id, ns.init_pid)));
    }
    let found = servers(session)?;
    if let Some(s) = found.iter().find(|s| s.input == input && listening(s.host_pid, VNC_PORT)) {
        let pid = crate::proc::ns_pid(s.host_pid).unwrap_or(0);
        return record(session, Some((s, pid)), false, None, 0);
    }
    let stopped = kill_servers(&found);
    let user = desktop.user.clone().unwrap_or_else(|| "root".into());
    let root = std::path::PathBuf::from(format!("/proc/{}/root", ns.init_pid));
    let account = crate::account::Account::lookup_in(&root, &user).map_err(|e| Error::bad_input(format!("account {user}: {e}")))?;
    let mut argv: Vec<String> = [
        X11VNC, "-display", &format!(":{}", desktop.display), "-rfbport", &VNC_PORT.to_string(),
        // Several viewers at once (the page and a person's viewer), and the server outlives each.
        "-shared", "-forever",
        // Who may connect is the firewall's decision (drums(7), "Network boundary"), as for the guest.
        "-nopw",
        // No ~/.x11vncrc of the session's user, no reverse DNS (no resolver in a session), no MIT-SHM
        // (sessions' Xvfb has it off by default), no XDAMAGE hints (Xvfb's damage is poor: poll instead).
        "-norc", "-nolookup", "-noshm", "-noxdamage", "-quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if !input {
        argv.push("-viewonly".into());
    }
    let env = vec![("DISPLAY".to_string(), format!(":{}", desktop.display)), ("HOME".to_string(), account.home.display().to_string())];
    let t0 = Instant::now();
    let log = std::path::PathBuf::from(format!("{}/vnc.log", crate::desktop::LOG_DIR));
    let sp = crate::ns::spawn(session, &argv, &crate::ns::ExecOptions { detach: true, log: Some(log.clone()), env, cwd: None, uid_gid: Some((account.uid, account.gid)), pass_terminal: false })
        .map_err(|e| match e {
            Error::Failed(m) => Error::env(format!("{X11VNC} could not be started in session {} ({m}): is it in the session's root image (pipelines/images/desktop.packages)?", session.id)),
            other => other,
        })?;
    let host_pid = sp.host_pid.ok_or_else(|| Error::Process { role: "vnc".into(), log: log.clone(), msg: format!("{X11VNC} exited at once (its log: {} inside the session)", log.display()) })?;
    let start_time = crate::proc::start_time(host_pid);
    loop {
        if listening(host_pid, VNC_PORT) {
            break;
        }
        let alive = start_time.is_some_and(|t| crate::proc::alive(host_pid, t));
        if !alive || t0.elapsed() > START_TIMEOUT {
            if alive {
                kill_servers(&[Server { host_pid, input }]);
            }
            return Err(Error::Process {
                role: "vnc".into(),
                log: log.clone(),
                msg: format!("{X11VNC} {} (its log: {} inside the session)", if alive { "did not listen in time" } else { "exited before it listened" }, log.display()),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let start_s = t0.elapsed().as_secs_f64();
    record(session, Some((&Server { host_pid, input }, sp.ns_pid)), true, Some(start_s), stopped)
}

/// End the session's VNC servers; the record says how many.
pub fn stop(session: &Session) -> Result<Vnc> {
    let found = servers(session)?;
    let n = kill_servers(&found);
    record(session, None, false, None, n)
}

/// The session's VNC server now, as `start` would report a running one; none: `running` false.
pub fn status(session: &Session) -> Result<Vnc> {
    let found = servers(session)?;
    match found.iter().find(|s| listening(s.host_pid, VNC_PORT)) {
        Some(s) => {
            let pid = crate::proc::ns_pid(s.host_pid).unwrap_or(0);
            record(session, Some((s, pid)), false, None, 0)
        }
        None => record(session, None, false, None, 0),
    }
}
