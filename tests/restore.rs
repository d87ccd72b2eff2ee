//! The restore path on real sessions: checkpoint, siblings, clone hygiene, failures that leave nothing.

use drums_tests::hygiene::*;
use drums::record::{Checkpoint, ClearedAt, Reseed, Session};
use drums_tests::*;
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A tool's output that is one record, decoded into `T`: more than one line fails (as parsing it as one
/// JSON value did).
fn one<T: serde::de::DeserializeOwned>(out: &str) -> T {
    assert_eq!(out.trim().lines().count(), 1, "not one record: {out}");
    decode(out)
}

/// Removes a checkpoint directory when dropped (checkpoints outlive sessions, so the session guard does not).
struct RemoveOnDrop(std::path::PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = drums::ckpt::remove_checkpoint_dir(&self.0);
    }
}

fn owner() -> String {
    std::process::id().to_string()
}

/// The source session's record as cold.sh printed it (the input of drums-ckpt), and decoded: with host ids
/// (drums-ckpt refuses a session in its own user namespace).
fn source(guard: &mut Sessions) -> (String, Session) {
    cold_with(guard, "--host-ids")
}

fn cold_with(guard: &mut Sessions, overlay_args: &str) -> (String, Session) {
    let o = Command::new(repo_root().join("pipelines/cold.sh")).env("PATH", path_with_tools()).env("DRUMS_OWNER", owner()).env("DRUMS_OVERLAY_ARGS", overlay_args).output().unwrap();
    assert!(o.status.success(), "cold.sh: {}", text(&o.stderr));
    guard.add(&text(&o.stdout));
    let line = text(&o.stdout).trim().to_string();
    let rec = one(&line);
    (line, rec)
}

/// Every entry of a layer, walked without following links: path, type and mode, owner, size, modification
/// time, and a file's bytes.
fn layer_digest(dir: &std::path::Path) -> Vec<(std::path::PathBuf, u32, u32, u32, u64, i64, i64, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let bytes = if m.is_file() { std::fs::read(&p).unwrap() } else { vec![] };
            if m.is_dir() {
                todo.push(p.clone());
            }
            out.push((p.strip_prefix(dir).unwrap().to_path_buf(), m.mode(), m.uid(), m.gid(), m.size(), m.mtime(), m.mtime_nsec(), bytes));
        }
    }
    out.sort();
    out
}

/// The `reseed` section of a sibling's record.
fn reseed_of(s: &Session) -> Reseed {
    s.reseed.clone().expect("the sibling has a reseed section")
}

fn restore(ckpt: &str, count: u32, hygiene: bool, guard: &mut Sessions) -> Vec<Session> {
    let out = run_ok("drums-restore", &["--count", &count.to_string()], ckpt);
    for l in out.lines() {
        guard.add(l);
    }
    let out = if hygiene { run_ok("drums-reseed", &[], &out) } else { out };
    for l in out.lines() {
        guard.add(l);
    }
    let out = run_ok("drums-ready", &[], &out);
    decode_lines(out.as_bytes())
}

#[test]
fn siblings_are_ready_isolated_and_run_the_task() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (src, src_rec) = source(&mut guard);
    let src_dir = src_rec.state_dir.clone();
    let ckpt = run_ok("drums-ckpt", &["--clean"], &src);
    let c: Checkpoint = one(&ckpt);
    let _ckpt_dir = RemoveOnDrop(c.dir.clone());
    let layer_before = layer_digest(&c.layer);
    assert!(c.image_bytes > 50 << 20, "{}", json(&c));
    assert!(c.dump_s > 0.0, "{}", json(&c));
    // Without --leave-running the source is gone: the siblings come from disk alone.
    assert!(!src_dir.exists(), "the source session was not destroyed");

    // A record of an older drums-ckpt (images holding the source's network namespace) is refused with
    // bad input (3), and nothing is made for it.
    let mut old = c.clone();
    old.criu_options = vec!["--file-locks".into(), "--tcp-close".into()];
    let before = new_state_dirs(&[]);
    let o = run("drums-restore", &[], &json(&old));
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("older drums-ckpt"), "{}", text(&o.stderr));
    assert_eq!(new_state_dirs(&before), Vec::<String>::new(), "a refused restore makes nothing");

    // Chromium's relocated data left the images for mapped files: the zygote's is shared by its
    // children (one file, several mappings).
    let mapped = c.mapped.as_ref().unwrap_or_else(|| panic!("the checkpoint has mapped files: {}", json(&c)));
    assert_eq!(mapped.dir, drums::mapped::mapped_root().join(&c.id), "{}", json(&c));
    let files = &mapped.files;
    assert!(files.iter().any(|f| f.bytes > 4 << 20 && f.mappings >= 2), "{}", json(mapped));
    assert!(mapped.pages_moved > 4096, "{}", json(mapped));
    for f in files {
        let m = std::fs::metadata(&f.path).unwrap();
        assert_eq!(m.len(), f.bytes, "{}", json(f));
    }

    let sibs = restore(&ckpt, 2, true, &mut guard);
    assert_eq!(sibs.len(), 2);
    for s in &sibs {
        let ready = s.ready.as_ref().expect("a ready section");
        assert!(ready.ready, "{}", json(ready));
        assert!(ready.changed_fraction.unwrap() > 0.10, "{}", json(ready));
        // The restored browser maps its relocated data from the checkpoint's file, which the session sees
        // in its checkpoint's layer of mapped files.
        let desktop = s.desktop.as_ref().expect("a desktop section");
        let browser = desktop.processes.iter().find(|p| p.role == "chromium").unwrap().host_pid.unwrap();
        let maps = std::fs::read_to_string(format!("/proc/{browser}/maps")).unwrap();
        let inside_dir = drums::mapped::inside_dir(&c.id);
        assert!(maps.lines().any(|l| l.contains(inside_dir.to_str().unwrap())), "the browser maps none of {}", json(mapped));
        let overlay = s.overlay.as_ref().expect("an overlay section");
        assert_eq!(overlay.mapped, Some(drums::mapped::layer_of(&mapped.dir)), "{}", json(overlay));
    }
    // The checkpoint layer is mounted in place, not copied: the files the source had open for writing
    // reach each sibling's upper as CRIU reopens them (copied up), and the layer itself is unchanged.
    let write_open = &c.write_open;
    assert!(write_open.iter().any(|p| p.to_string_lossy().contains("chromium/Default/Cookies")), "Chromium's cookie database is written at dump time: {write_open:?}");
    for s in &sibs {
        let rw = s.state_dir.join("rw");
        let tmpfs: Vec<String> = std::fs::read_dir(&rw).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(tmpfs.iter().all(|n| n == "upper" || n == "work"), "no layer copy in the sibling's tmpfs: {tmpfs:?}");
        for p in write_open {
            assert!(rw.join("upper").join(p).is_file(), "{} of {}", p.display(), s.id);
        }
    }
    assert_eq!(layer_digest(&c.layer), layer_before, "the checkpoint layer is as drums-ckpt made it");
    let (a, b) = (&sibs[0], &sibs[1]);
    let net = |s: &Session| s.net.clone().expect("a net section");
    let ns = |s: &Session| s.ns.clone().expect("an ns section");
    assert_ne!(net(a).session_addr, net(b).session_addr);
    assert_ne!(ns(a).inodes, ns(b).inodes);
    // A file written in one is invisible in the other.
    inside(a, "echo only-in-a > /tmp/probe && echo only-in-a > /root/probe");
    assert_eq!(inside(b, "cat /tmp/probe /root/probe 2>/dev/null || echo absent"), "absent");
    // Each answers on its own guest address, as itself. (The guest's answers are OSWorld's protocol, not
    // Drums records.)
    assert_eq!(guest(a, "POST", "/execute", Some(json!({"command": "hostname", "shell": true})))["output"].as_str().unwrap().trim(), sibs[0].id);
    assert_eq!(guest(b, "POST", "/execute", Some(json!({"command": "hostname", "shell": true})))["output"].as_str().unwrap().trim(), sibs[1].id);

    // OSWorld task e0df059f in a restored sibling: 0 before the action, 1 after.
    let check = json!({"command": "[ -d ~/Desktop/todo_list_Jan_2 ] && echo 'Directory exists.' || echo 'Directory does not exist.'", "shell": true});
    let score = |s: &Session| -> u32 { u32::from(guest(s, "POST", "/execute", Some(check.clone()))["output"].as_str().unwrap().trim() == "Directory exists.") };
    let setup = guest(a, "POST", "/setup/execute", Some(json!({"command": "echo 'password' | sudo -S mkdir ~/Desktop/todo_list_Jan_1", "shell": true})));
    assert_eq!(setup["returncode"], 0, "{setup}");
    assert_eq!(score(a), 0);
    guest(a, "POST", "/execute", Some(json!({"command": ["mv", "~/Desktop/todo_list_Jan_1", "~/Desktop/todo_list_Jan_2"], "shell": false})));
    assert_eq!(score(a), 1);
    assert_eq!(score(b), 0, "the task's effect must not reach the sibling");
}

#[test]
fn clone_hygiene() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (src_rec, src) = source(&mut guard);
    prepare_source(&src);
    let clean = run_ok("drums-ckpt", &["--clean", "--leave-running"], &src_rec);
    let kept = run_ok("drums-ckpt", &["--leave-running"], &src_rec);
    // Last, ending the source: a clean checkpoint whose source does not go on has its browser state
    // erased before the dump.
    let erased = run_ok("drums-ckpt", &["--clean"], &src_rec);
    let (clean_rec, kept_rec, erased_rec): (Checkpoint, Checkpoint, Checkpoint) = (one(&clean), one(&kept), one(&erased));
    assert_eq!((&clean_rec.browser_erased, &kept_rec.browser_erased), (&None, &None), "a source that goes on keeps its browser state");
    let erased_what = erased_rec.browser_erased.as_ref().map(|b| (b.cookies_cleared, b.storage_cleared));
    assert_eq!(erased_what, Some((true, true)), "{}", json(&erased_rec));

    // Reseed off: clones.
    let raw = restore(&clean, 2, false, &mut guard);
    let (a, b) = (probe(&raw[0], &clean_rec), probe(&raw[1], &clean_rec));
    assert_eq!(a.hostname, b.hostname, "hostname");
    assert_eq!(a.mac, b.mac, "MAC");
    assert_eq!(a.guest_rng, b.guest_rng, "guest RNG");
    assert_eq!(a.python_random, b.python_random, "Python random");
    assert_eq!(a.math_random, b.math_random, "Math.random");
    assert_eq!(a.cookie.as_deref(), Some("secret-pre-checkpoint"));
    assert_eq!(a.cookie, b.cookie, "cookie");
    // The browser process's own random state is cloned: its wipe-on-fork page (BoringSSL) is
    // byte-identical. Whether the next browser context id is then identical too depends on the CPU: where
    // BoringSSL mixes RDRAND into every draw (this machine: rdrand present), it differs even in clones.
    assert_eq!(a.browser_wf_page, b.browser_wf_page, "the browser's wipe-on-fork page in clones");
    assert!(a.browser_wf_page.iter().any(|&x| x != 0), "CRIU restored the wipe-on-fork page with its contents: BoringSSL sees no fork");
    let rdrand = std::fs::read_to_string("/proc/cpuinfo").unwrap().split_whitespace().any(|w| w == "rdrand");
    eprintln!("clone_hygiene: raw clones' new browser context ids {} (rdrand: {rdrand})", if a.new_context_id == b.new_context_id { "identical" } else { "differ" });
    if !rdrand {
        assert_eq!(a.new_context_id, b.new_context_id, "new browser context id");
    }

    // Reseed on, clean checkpoint: everything differs, cookies gone.
    let fresh = restore(&clean, 2, true, &mut guard);
    let (a, b) = (probe(&fresh[0], &clean_rec), probe(&fresh[1], &clean_rec));
    assert_ne!(a.hostname, b.hostname, "hostname");
    assert_ne!(a.mac, b.mac, "MAC");
    assert_ne!(a.guest_rng, b.guest_rng, "guest RNG");
    assert_ne!(a.python_random, b.python_random, "Python random");
    assert_ne!(a.math_random, b.math_random, "Math.random");
    assert_eq!((a.cookie, b.cookie), (None, None), "cookies of a clean checkpoint are erased");
    assert_ne!(a.new_context_id, b.new_context_id, "new browser context id");
    for s in &fresh {
        let rs = reseed_of(s);
        let b = rs.browser.as_ref().expect("the browser was reseeded");
        assert_eq!((b.cleared_at, b.renderer_renewed), (Some(ClearedAt::Reseed), true), "{rs:?}");
        assert!(rs.wiped_ranges > 0, "no wipe-on-fork range was zeroed");
    }

    // Reseed on, checkpoint not declared clean: the browser's state is kept by design, the rest differs.
    let kept_sibs = restore(&kept, 2, true, &mut guard);
    let (a, b) = (probe(&kept_sibs[0], &kept_rec), probe(&kept_sibs[1], &kept_rec));
    assert_eq!(a.cookie.as_deref(), Some("secret-pre-checkpoint"));
    assert_eq!(b.cookie.as_deref(), Some("secret-pre-checkpoint"));
    assert_ne!(a.hostname, b.hostname);
    assert_ne!(a.guest_rng, b.guest_rng);
    assert_ne!(a.python_random, b.python_random);
    assert_ne!(a.new_context_id, b.new_context_id, "the browser process's own randomness is reseeded either way");
    // Reseed on, clean checkpoint erased at dump time: the same, with the clearing done once, before the dump.
    let raw = restore(&erased, 1, false, &mut guard);
    assert_eq!(probe(&raw[0], &erased_rec).cookie, None, "the erased checkpoint holds no cookie");
    let erased_sibs = restore(&erased, 2, true, &mut guard);
    let (a, b) = (probe(&erased_sibs[0], &erased_rec), probe(&erased_sibs[1], &erased_rec));
    assert_eq!((a.cookie, b.cookie), (None, None));
    assert_ne!(a.math_random, b.math_random, "Math.random");
    assert_ne!(a.new_context_id, b.new_context_id, "new browser context id");
    for s in &erased_sibs {
        let rs = reseed_of(s);
        let b = rs.browser.as_ref().expect("the browser was reseeded");
        assert_eq!((b.cleared_at, b.renderer_renewed), (Some(ClearedAt::Dump), true), "{rs:?}");
    }
    for c in [&clean, &kept, &erased] {
        let _ = drums::ckpt::remove_checkpoint_dir(&one::<Checkpoint>(c).dir);
    }
}

fn new_state_dirs(before: &[String]) -> Vec<String> {
    let mut now: Vec<String> = std::fs::read_dir(drums::state::sessions_root()).into_iter().flatten().flatten().map(|e| e.path().display().to_string()).collect();
    now.retain(|d| !before.contains(d));
    now
}

fn sweep_dirs(dirs: &[String]) {
    for d in dirs {
        let o = Command::new(tool("drums-sweep")).args(["--state-dir", d]).output().unwrap();
        assert!(o.status.success(), "destroy {d}: {}{}", text(&o.stdout), text(&o.stderr));
    }
}

#[test]
fn killed_restore_reseed_and_failed_criu_leave_nothing() {
    require_root();
    let _lock = session_lock();
    let before_inv = inventory();
    let before_pidns: std::collections::BTreeSet<u64> = before_inv
        .processes
        .iter()
        .filter_map(|p| drums::proc::ns_inode(p.split(' ').next()?.parse().ok()?, "pid").ok())
        .collect();
    let mut guard = Sessions::default();
    let (src, _) = source(&mut guard);
    let ckpt = run_ok("drums-ckpt", &["--clean"], &src);
    let c: Checkpoint = one(&ckpt);

    for delay in [30u64, 150, 400, 800] {
        let before: Vec<String> = new_state_dirs(&[]);
        let mut child = Command::new(tool("drums-restore")).env("DRUMS_OWNER", owner()).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(ckpt.as_bytes()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        std::thread::sleep(Duration::from_millis(300));
        sweep_dirs(&new_state_dirs(&before));
    }

    // drums-reseed killed midway, then destroyed from the ledger.
    for delay in [5u64, 40] {
        let rec = run_ok("drums-restore", &[], &ckpt);
        let mut child = Command::new(tool("drums-reseed")).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(rec.as_bytes()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let _ = child.wait();
        let o = run("drums-sweep", &[], &rec);
        assert!(o.status.success(), "{}", text(&o.stdout));
    }

    // A CRIU failure: a copy of the checkpoint with a truncated page image.
    let broken_id = drums::state::new_id('c');
    let broken_dir = drums::state::checkpoint_root().join(&broken_id);
    let st = Command::new("cp").arg("-a").arg(&c.dir).arg(&broken_dir).status().unwrap();
    assert!(st.success());
    let (mapped_dir, broken_mapped) = (drums::mapped::mapped_root().join(&c.id), drums::mapped::mapped_root().join(&broken_id));
    let st = Command::new("cp").arg("-a").arg(&mapped_dir).arg(&broken_mapped).status().unwrap();
    assert!(st.success(), "the checkpoint has mapped files");
    // Where the copy's record says its files are: its own directory of its layer.
    let inner = |id: &str| drums::mapped::layer_of(&broken_mapped).join(drums::mapped::inside_dir(id).strip_prefix("/").unwrap());
    std::fs::rename(inner(&c.id), inner(&broken_id)).unwrap();
    let pages = std::fs::read_dir(broken_dir.join("images")).unwrap().flatten().map(|e| e.path()).filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("pages-")).max_by_key(|p| std::fs::metadata(p).unwrap().len()).unwrap();
    std::fs::OpenOptions::new().write(true).open(&pages).unwrap().set_len(4096).unwrap();
    let broken = ckpt.replace(&c.id, &broken_id);
    let before: Vec<String> = new_state_dirs(&[]);
    // CRIU 4.2 either fails or hangs on a truncated page image; the time limit turns a hang into a failure.
    let mut child = Command::new(tool("drums-restore"))
        .env("DRUMS_OWNER", owner())
        .env("DRUMS_CRIU_TIMEOUT", "15")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(broken.as_bytes()).unwrap();
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(5), "a restore from a broken image must fail: {}", text(&o.stderr));
    assert!(text(&o.stderr).contains("criu restore"), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty());
    assert!(new_state_dirs(&before).is_empty(), "a failed restore must destroy its sibling itself");
    // The same copy without its mapped files is refused before anything is made.
    std::fs::remove_dir_all(&broken_mapped).unwrap();
    let o = run("drums-restore", &[], &broken);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("mapped file"), "{}", text(&o.stderr));
    assert!(new_state_dirs(&before).is_empty(), "a refused restore makes nothing");
    drums::ckpt::remove_checkpoint_dir(&broken_dir).unwrap();

    // Afterwards a restore from the same checkpoint still works (no "File exists" from leftovers).
    let ok = restore(&ckpt, 1, true, &mut guard);
    assert!(ok[0].ready.as_ref().is_some_and(|r| r.ready), "{}", json(&ok[0]));
    drop(guard);
    let _ = drums::ckpt::remove_checkpoint_dir(&c.dir);
    let mut left = inventory().new_since(&before_inv);
    // Processes count as left behind only in PID namespaces that did not exist when the test started:
    // a long-lived session of someone else's can fork new processes meanwhile.
    left.processes.retain(|p| {
        let pid: i32 = p.split(' ').next().unwrap().parse().unwrap();
        drums::proc::ns_inode(pid, "pid").is_ok_and(|ns| !before_pidns.contains(&ns))
    });
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// `drums-restore --ready --count N` (pipelines/restore.sh's path, drums::sibling): the N siblings of one
/// call are made concurrently, each restored, reseeded and agent-ready, all distinct, and the audit
/// passes them; kill -9 of the tool at any moment leaves nothing once the sweep has run.
#[test]
fn count_mode_makes_ready_distinct_siblings_concurrently_and_a_kill_leaves_nothing() {
    require_root();
    let _lock = session_lock();
    let before_inv = inventory();
    let mut guard = Sessions::default();
    let (src, _) = source(&mut guard);
    let ckpt = run_ok("drums-ckpt", &["--clean"], &src);
    let c: Checkpoint = one(&ckpt);
    let _ckpt_dir = RemoveOnDrop(c.dir.clone());

    const N: usize = 4;
    let t0 = std::time::Instant::now();
    let o = run("drums-restore", &["--ready", "--count", &N.to_string()], &ckpt);
    let wall = t0.elapsed().as_secs_f64();
    guard.add(&text(&o.stdout));
    assert!(o.status.success(), "drums-restore --ready --count {N}: {}", text(&o.stderr));
    let sibs: Vec<Session> = decode_lines(&o.stdout);
    assert_eq!(sibs.len(), N, "{}", text(&o.stdout));
    for s in &sibs {
        let ready = s.ready.as_ref().unwrap_or_else(|| panic!("{} has no ready section", s.id));
        assert!(ready.ready && ready.changed_fraction.unwrap() > 0.10, "{}", json(ready));
        let r = reseed_of(s);
        assert_eq!(r.hostname, s.id, "{}", json(&r));
        assert!(r.browser.as_ref().is_some_and(|b| b.renderer_renewed), "a clean checkpoint's sibling gets a new renderer: {}", json(&r));
        assert_eq!(s.restore.as_ref().map(|r| r.checkpoint.as_str()), Some(c.id.as_str()));
    }
    // Distinct: ids, addresses, MACs, machine ids, namespaces, inits.
    let distinct = |what: &str, xs: Vec<String>| {
        let set: std::collections::BTreeSet<&String> = xs.iter().collect();
        assert_eq!(set.len(), N, "{what} not distinct: {xs:?}");
    };
    distinct("ids", sibs.iter().map(|s| s.id.clone()).collect());
    distinct("addresses", sibs.iter().map(|s| s.net.as_ref().unwrap().session_addr.clone()).collect());
    distinct("MACs", sibs.iter().map(|s| s.net.as_ref().unwrap().session_mac.clone()).collect());
    distinct("machine ids", sibs.iter().map(|s| reseed_of(s).machine_id).collect());
    distinct("PID namespaces", sibs.iter().map(|s| s.ns.as_ref().unwrap().inodes.pid.to_string()).collect());
    distinct("inits", sibs.iter().map(|s| s.ns.as_ref().unwrap().init_pid.to_string()).collect());
    // Concurrently: the call took less than its siblings' own restore, reseed and check times added up
    // (one after the other they would take at least that sum).
    let own: f64 = sibs.iter().map(|s| s.restore.as_ref().unwrap().times.total_s + reseed_of(s).total_s + s.ready.as_ref().unwrap().ready_s.unwrap()).sum();
    assert!(wall < own, "{N} siblings took {wall:.2} s, their steps {own:.2} s added up: not made concurrently");
    // The audit passes the siblings of one call: revision 2a, against a cold pair as its control (the
    // literal rule fails every pair of sessions, cold ones too, on /dev/null and /dev/urandom: tests/audit.rs).
    // The control pair is made as the source was (host ids): the siblings run the source's processes.
    let (_, ca) = source(&mut guard);
    let (_, cb) = source(&mut guard);
    let lines: String = sibs.iter().map(|s| json(s) + "\n").collect();
    let a = run("drums-audit", &["--rule", "revision-2a", "--control", &format!("{},{}", ca.id, cb.id)], &lines);
    assert!(a.status.success(), "drums-audit of the {N} siblings: {}{}", text(&a.stdout), text(&a.stderr));
    let report: drums::audit::Report = decode(&text(&a.stdout));
    assert!(report.complete, "{:?}", report.incomplete);
    drop(guard);

    // kill -9 of drums-restore --ready --count N at several moments (restores, CRIU, reseeds, checks in
    // flight), then a sweep of what it made: nothing is left.
    let mut guard = Sessions::default();
    let mut caught_midway = 0;
    for delay in [50u64, 150, 300, 500, 800] {
        let before: Vec<String> = new_state_dirs(&[]);
        let mut child = Command::new(tool("drums-restore"))
            .args(["--ready", "--count", &N.to_string()])
            .env("DRUMS_OWNER", owner())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(ckpt.as_bytes()).unwrap();
        }
        std::thread::sleep(Duration::from_millis(delay));
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        if text(&out.stdout).lines().count() < N {
            caught_midway += 1;
        }
        guard.add(&text(&out.stdout));
        std::thread::sleep(Duration::from_millis(300));
        sweep_dirs(&new_state_dirs(&before));
    }
    drop(guard);
    drop(_ckpt_dir);
    assert!(caught_midway > 0, "no kill caught drums-restore before its {N} siblings were printed");
    let left = inventory().new_since(&before_inv);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A sibling's clocks go on from its checkpoint's dump, not from the host's: drums-ns gives every session
/// a time namespace of its own and CRIU restores it, so a timer set before the dump falls due as it would
/// have in the source. A cold session's clocks are the host's (offsets zero); a sibling restored some
/// seconds after the dump is that much behind the host, with host ids and in its own user namespace
/// (CRIU then makes the time namespace as that namespace's root). The clocks are read with drums-ns
/// exec, which joins the session's time namespace.
#[test]
fn a_siblings_clocks_go_on_from_the_dump() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (src, src_rec) = source(&mut guard);
    let uptime = |s: &Session| -> f64 { inside(s, "cut -d' ' -f1 /proc/uptime").parse().unwrap() };
    let host_uptime = || -> f64 { std::fs::read_to_string("/proc/uptime").unwrap().split_whitespace().next().unwrap().parse().unwrap() };
    let (in_source, host) = (uptime(&src_rec), host_uptime());
    assert!((host - in_source).abs() < 1.0, "a cold session's clocks are the host's: {in_source} s against {host} s");
    let ckpt = run_ok("drums-ckpt", &["--clean"], &src);
    let c: Checkpoint = one(&ckpt);
    let _ckpt_dir = RemoveOnDrop(c.dir.clone());
    std::thread::sleep(Duration::from_secs(3));
    for args in [&[][..], &["--host-ids"][..]] {
        let out = run_ok("drums-restore", args, &ckpt);
        guard.add(&out);
        let sib: Session = one(&out);
        assert_eq!(sib.id_range.is_some(), args.is_empty(), "{}", json(&sib));
        let (s, h) = (uptime(&sib), host_uptime());
        assert!(h - s > 2.5, "restored {args:?} more than 3 s after the dump, the sibling's clock is behind the host's by as much: {s} s against {h} s");
    }
}


/// A UDP socket bound to the session's address at the dump (a DNS query in flight, say) would be restored
/// by binding it to that address again, which a sibling, with an address of its own, refuses: every
/// restore of the checkpoint failed ("Can't bind inet socket: Cannot assign requested address"). The dump
/// checks for one while the session is frozen and is tried again after a pause; a socket that stays
/// makes drums-ckpt fail, naming it, and leaves the session running. Once it is closed the checkpoint is
/// made and restores.
#[test]
fn a_udp_socket_bound_to_the_sessions_address_is_never_dumped() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (src, src_rec) = source(&mut guard);
    let net = src_rec.net.clone().expect("a net section");
    let script = format!(
        "import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.bind(('{}', 0))\ns.connect(('{}', 53))\nopen('/tmp/udp-bound', 'w').write('ok')\ntime.sleep(3600)\n",
        net.session_addr, net.host_addr
    );
    let o = Command::new(tool("drums-ns")).args(["exec", "--detach", "--session", &src_rec.id, "--", "python3", "-c", &script]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let t0 = std::time::Instant::now();
    while inside(&src_rec, "cat /tmp/udp-bound 2>/dev/null || true") != "ok" {
        assert!(t0.elapsed() < Duration::from_secs(20), "the socket was not bound");
        std::thread::sleep(Duration::from_millis(50));
    }
    let checkpoints_before = std::fs::read_dir(drums::state::checkpoint_root()).map(|d| d.count()).unwrap_or(0);
    let o = run("drums-ckpt", &["--clean"], &src);
    assert!(!o.status.success(), "the dump is refused while the socket is open: {}", text(&o.stdout));
    let e = error_record(&o.stderr);
    assert!(e.message.contains("UDP sockets bound to the session's address") && e.message.contains(&net.session_addr), "{}", e.message);
    assert_eq!(std::fs::read_dir(drums::state::checkpoint_root()).map(|d| d.count()).unwrap_or(0), checkpoints_before, "no checkpoint is left");
    assert_eq!(inside(&src_rec, "echo alive"), "alive", "the session keeps running");
    inside(&src_rec, "pkill -f 'udp[-]bound'; true");
    let ckpt = run_ok("drums-ckpt", &["--clean"], &src);
    let c: Checkpoint = one(&ckpt);
    let _ckpt_dir = RemoveOnDrop(c.dir.clone());
    let out = run_ok("drums-restore", &["--ready"], &ckpt);
    guard.add(&out);
    let sib: Session = one(&out);
    assert!(sib.ready.as_ref().is_some_and(|r| r.ready), "{}", json(&sib));
}
