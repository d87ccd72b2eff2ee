//! Clone hygiene: make a restored sibling unique again. Hostname and machine id; wipe-on-fork pages
//! zeroed as fork would have (the browser's BoringSSL then reseeds from the kernel); the guest's and
//! Python processes' RNGs reseeded through their SIGUSR1 hooks; for a clean checkpoint, the browser's
//! cookies and storage cleared and the page moved into a renderer started after the restore.

use crate::cdp::Cdp;
use crate::error::{Error, IoContext, Result};
use crate::record::{BrowserReseed, ClearedAt, Reseed, Session};
use serde_json::json;
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct ReseedOptions {
    /// New hostname (default: the session's id).
    pub hostname: Option<String>,
    /// Reseed the browser (clear state and renew the renderer for a clean checkpoint).
    pub browser: bool,
}

fn set_hostname_in(init_pid: i32, name: &str) -> Result<()> {
    let name = name.to_string();
    crate::nsenter::on_thread(vec![crate::nsenter::NsFile::open(init_pid, crate::nsenter::Kind::Uts)?], move || {
        nix::unistd::sethostname(&name).map_err(|e| Error::failed(format!("sethostname {name}: {e}")))
    })
}

fn is_reseedable(pid: i32) -> bool {
    if crate::proc::comm(pid) == "drums-guest" {
        return true;
    }
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let argv0 = cmd.split(|b| *b == 0).next().unwrap_or_default();
    String::from_utf8_lossy(argv0).rsplit('/').next().is_some_and(|n| n.starts_with("python"))
}

pub fn reseed(s: &mut Session, o: &ReseedOptions) -> Result<()> {
    let t0 = Instant::now();
    let mut times = BTreeMap::new();
    let ns = s.ns()?.clone();
    // The checkpoint's record first: like the session's, it is checked before anything is done.
    let checkpoint = match &s.restore {
        Some(r) => Some(crate::session_io::load_checkpoint(&r.checkpoint)?),
        None => None,
    };
    if !crate::proc::alive(ns.init_pid, ns.init_start_time) {
        return Err(Error::failed(format!("session {}: its init is gone", s.id)));
    }

    let t = Instant::now();
    let hostname = o.hostname.clone().unwrap_or_else(|| s.id.clone());
    crate::record::check_hostname(&hostname).map_err(|m| Error::bad_input(format!("--hostname: {m}")))?;
    // The session's /etc, not the host's: its root is opened from its init (checked to be the same
    // process after the open), and the names are written inside it (crate::inroot). A link the session
    // planted at /etc/hostname or /etc/machine-id is replaced by the new file, never followed; links in
    // the directories above are followed inside the session's root and cannot leave its mount, so the
    // worst a hostile session gets is its own files overwritten.
    let root = crate::inroot::Root::of_process(ns.init_pid, Some(ns.init_start_time))?;
    set_hostname_in(ns.init_pid, &hostname)?;
    let machine_id = crate::state::random_hex(16);
    crate::inroot::replace_file(&root, Path::new("/etc/hostname"), format!("{hostname}\n").as_bytes(), 0o644, 0, 0)?;
    crate::inroot::replace_file(&root, Path::new("/etc/machine-id"), format!("{machine_id}\n").as_bytes(), 0o644, 0, 0)?;
    times.insert("hostname_s".into(), t.elapsed().as_secs_f64());

    let t = Instant::now();
    if let Some(net) = s.net.as_mut() {
        let mac = crate::net::random_mac();
        crate::net::set_session_mac(ns.init_pid, net.slot, &mac)?;
        net.session_mac = mac;
    }
    times.insert("mac_s".into(), t.elapsed().as_secs_f64());

    let t = Instant::now();
    let pids = crate::proc::pids_in_pidns(ns.inodes.pid);
    let by_ns_pid = crate::proc::host_pids_by_ns_pid(ns.inodes.pid);
    let mut wiped_ranges = 0;
    let mut wiped = std::collections::BTreeSet::new();
    if let Some(c) = &checkpoint {
        for w in &c.wipe {
            let Some(&host) = by_ns_pid.get(&w.pid) else { continue };
            if crate::proc::comm(host) != w.comm {
                continue;
            }
            let mem = format!("/proc/{host}/mem");
            let f = match std::fs::OpenOptions::new().write(true).open(&mem) {
                Ok(f) => f,
                // Gone since the listing (a renderer an earlier reseed replaced, exiting): nothing to zero.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) || e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Error::io("open", &mem, e)),
            };
            // In pieces: a range is bounded (Checkpoint::parse), but need not be small.
            let zeros = vec![0u8; 1 << 16];
            let mut at = w.start;
            while at < w.end {
                let n = (w.end - at).min(zeros.len() as u64) as usize;
                f.write_all_at(&zeros[..n], at).ctx("zero a wipe-on-fork range", &mem)?;
                at += n as u64;
            }
            wiped_ranges += 1;
            wiped.insert(host);
        }
    }
    times.insert("wipe_s".into(), t.elapsed().as_secs_f64());

    let t = Instant::now();
    let mut signalled = vec![];
    for &p in &pids {
        if is_reseedable(p) && crate::proc::catches(p, libc::SIGUSR1) && unsafe { libc::kill(p, libc::SIGUSR1) } == 0 {
            signalled.push(format!("{} {}", crate::proc::ns_pid(p).unwrap_or(-1), crate::proc::comm(p)));
        }
    }
    times.insert("signals_s".into(), t.elapsed().as_secs_f64());

    let mut browser = None;
    if o.browser {
        if let Some(d) = s.desktop.clone().filter(|d| d.processes.iter().any(|p| p.role == "chromium")) {
            let t = Instant::now();
            let clean = checkpoint.as_ref().is_some_and(|c| c.clean);
            let erased = checkpoint.as_ref().and_then(|c| c.browser_erased.as_ref());
            let mut b = reseed_browser(ns.init_pid, d.devtools_port, &d.url, clean, erased)?;
            b.seconds = t.elapsed().as_secs_f64();
            times.insert("browser_s".into(), b.seconds);
            browser = Some(b);
        }
    }
    if let Some(n) = s.ns.as_mut() {
        n.hostname = hostname.clone();
    }
    s.reseed = Some(Reseed {
        hostname,
        machine_id,
        wiped_ranges,
        wiped_processes: wiped.len(),
        signalled,
        browser,
        times,
        total_s: t0.elapsed().as_secs_f64(),
        at: crate::state::now(),
        extra: Default::default(),
    });
    Ok(())
}

/// Clear the default context's cookies (the page's and the browser's jar) and every storage type:
/// (cookies cleared, storage cleared). Storage is best effort: Chromium refuses it for some pages.
pub fn erase_browser_state(cdp: &mut Cdp) -> Result<(bool, bool)> {
    let (_, page) = cdp.attach_page()?;
    let clearing = start_clearing(cdp, &page)?;
    finish_clearing(cdp, clearing)
}

/// The clearing commands, sent without waiting: their ids, for `finish_clearing`.
fn start_clearing(cdp: &mut Cdp, page: &str) -> Result<[u64; 3]> {
    Ok([
        cdp.send(Some(page), "Network.clearBrowserCookies", json!({}))?,
        cdp.send(None, "Storage.clearCookies", json!({}))?,
        cdp.send(Some(page), "Storage.clearDataForOrigin", json!({"origin": "*", "storageTypes": "all"}))?,
    ])
}

/// Wait for the clearing commands: (cookies cleared, storage cleared).
fn finish_clearing(cdp: &mut Cdp, [cookies, jar, storage]: [u64; 3]) -> Result<(bool, bool)> {
    cdp.reply(cookies, "Network.clearBrowserCookies")?;
    cdp.reply(jar, "Storage.clearCookies")?;
    Ok((true, cdp.reply(storage, "Storage.clearDataForOrigin").is_ok()))
}

/// For a clean checkpoint whose browser state drums-ckpt erased before the dump (`erased_at_dump`): only
/// the navigation below. For any other clean checkpoint: clear cookies and storage, and navigate the page to its own URL, which moves
/// it into a renderer forked after the restore (a data: URL switches process on a same-URL navigation),
/// so its V8 state (Math.random) is new. A non-clean checkpoint keeps its browser state by design.
///
/// A data: document has an opaque origin and can read no cookie or stored data, so for one the clearing
/// runs while the new renderer starts (it takes about 25 ms of the ~80 ms); any other page could read the
/// old state while loading, so it is navigated only once the clearing is done. Either way the clearing has
/// finished when this returns.
/// How long the browser's part of a reseed may take in all (connection, clearing, navigation, load): it
/// takes about 0.1 s; a Chromium that has not finished in this long does not answer, and the reseed ends
/// with an error (drums-reseed(1), EXIT STATUS).
pub const BROWSER_TIMEOUT: Duration = Duration::from_secs(20);

pub fn reseed_browser(init_pid: i32, port: u16, url: &str, clean: bool, erased_at_dump: Option<&crate::record::BrowserErased>) -> Result<BrowserReseed> {
    let mut b = BrowserReseed { clean, ..Default::default() };
    if !clean {
        b.note = Some("checkpoint not declared clean: browser state kept by design".into());
        return Ok(b);
    }
    let mut cdp = Cdp::connect(init_pid, port, Instant::now() + crate::state::scaled(BROWSER_TIMEOUT))?;
    let (_, page) = cdp.attach_page()?;
    // Not waited for: the page session handles its commands in order, so the load event of the
    // navigation below is reported.
    let enable = cdp.send(Some(&page), "Page.enable", json!({}))?;
    let opaque = url.starts_with("data:");
    let navigate = |cdp: &mut Cdp| cdp.send(Some(&page), "Page.navigate", json!({"url": url}));
    let nav = if opaque || erased_at_dump.is_some() { Some(navigate(&mut cdp)?) } else { None };
    (b.cookies_cleared, b.storage_cleared, b.cleared_at) = match erased_at_dump {
        Some(e) => {
            cdp.reply(enable, "Page.enable")?;
            (e.cookies_cleared, e.storage_cleared, Some(ClearedAt::Dump))
        }
        None => {
            let clearing = start_clearing(&mut cdp, &page)?;
            cdp.reply(enable, "Page.enable")?;
            let (cookies, storage) = finish_clearing(&mut cdp, clearing)?;
            (cookies, storage, Some(ClearedAt::Reseed))
        }
    };
    let nav = match nav {
        Some(n) => n,
        None => navigate(&mut cdp)?,
    };
    let loader = cdp.reply(nav, "Page.navigate")?["loaderId"].as_str().map(str::to_string);
    wait_loaded(&mut cdp, &page, loader.as_deref(), Duration::from_secs(10))?;
    b.renderer_renewed = true;
    Ok(b)
}

/// Wait until the page has loaded the document of navigation `loader`. The load event is the fast
/// signal, but with many siblings restored at once Chromium now and then does not report it for a
/// navigation that moved to a new renderer (1 in ~50 seen here, the page loaded all the same): between
/// short waits for the event, the main frame is asked directly (its loader is the navigation's and its
/// document is complete).
fn wait_loaded(cdp: &mut Cdp, page: &str, loader: Option<&str>, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let slice = (Instant::now() + Duration::from_millis(250)).min(deadline);
        if cdp.event_before(Some(page), "Page.loadEventFired", slice)?.is_some() {
            return Ok(());
        }
        let tree = cdp.call(Some(page), "Page.getFrameTree", json!({}))?;
        let same_loader = loader.is_none_or(|l| tree["frameTree"]["frame"]["loaderId"] == l);
        if same_loader && cdp.eval(page, "document.readyState")? == "complete" {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::failed(format!("the page did not load its new document within {timeout:?} (no load event; main frame {})", tree["frameTree"]["frame"])));
        }
    }
}
