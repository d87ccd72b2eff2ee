//! The warm pool on real sessions (drums-pool(1), drums-pool(7)): a pool of depth 4 is filled and survives
//! a sweep; 4 concurrent takers get 4 distinct, thawed, ready sessions; a fifth fails at once or waits as
//! asked; two taken siblings differ in everything the clone-hygiene test checks; takers killed midway
//! leave nothing once swept; a taker refuses siblings older than its limit; a drain leaves nothing. Two
//! takers racing for one sibling: exactly one gets it. A filler stopped by SIGTERM leaves only parked
//! siblings, one killed with SIGKILL nothing that a sweep and a drain do not remove.

use drums_tests::hygiene::*;
use drums_tests::*;
use drums::destroy::sweep::{Judged, SweepReport};
use drums::pool::{DrainReport, FillReport, ParkedReport, StatusReport};
use drums::record::{Checkpoint, Session};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn me() -> i32 {
    std::process::id() as i32
}

fn script(name: &str) -> Command {
    let mut c = Command::new(repo_root().join("pipelines").join(name));
    c.env("PATH", path_with_tools()).env("DRUMS_OWNER", me().to_string()).stdin(Stdio::null());
    c
}

/// `drums-pool SUBCOMMAND`, owned by the test.
fn pool(sub: &str) -> Command {
    let mut c = Command::new(tool("drums-pool"));
    c.arg(sub).env("PATH", path_with_tools()).env("DRUMS_OWNER", me().to_string()).stdin(Stdio::null());
    c
}

fn out(c: &mut Command) -> Output {
    c.output().unwrap()
}

/// Whatever the test made is destroyed when this is dropped, also after a failed assertion: the parked
/// siblings (drained), the taken ones, and any session whose ledger names one of our processes as owner.
struct Guard {
    ckpt_id: String,
    ckpt_dir: String,
    records: Vec<String>,
    owners: Vec<i32>,
    dirs_before: Vec<PathBuf>,
}
impl Drop for Guard {
    fn drop(&mut self) {
        if !self.ckpt_id.is_empty() {
            let o = out(pool("drain").args(["--checkpoint", &self.ckpt_id]));
            if !o.status.success() {
                eprintln!("drain: {}{}", text(&o.stdout), text(&o.stderr));
            }
        }
        for r in &self.records {
            let _ = run("drums-sweep", &[], r);
        }
        for d in session_dirs() {
            if self.dirs_before.contains(&d) {
                continue;
            }
            let Ok(c) = drums::ledger::read_file(&d.join(drums::ledger::FILE_NAME)) else { continue };
            let ours = c.owner().is_some_and(|(_, o, _, _)| self.owners.contains(&o.pid));
            if ours {
                let _ = Command::new(tool("drums-sweep")).arg("--state-dir").arg(&d).output();
            }
        }
        if !self.ckpt_dir.is_empty() {
            let _ = drums::ckpt::remove_checkpoint_dir(std::path::Path::new(&self.ckpt_dir));
        }
    }
}

fn session_dirs() -> Vec<PathBuf> {
    std::fs::read_dir(drums::state::sessions_root()).into_iter().flatten().flatten().map(|e| e.path()).collect()
}

fn keep(g: &mut Guard, o: &Output) {
    let t = text(&o.stdout);
    if !t.trim().is_empty() {
        g.records.push(t.trim().to_string());
    }
}

/// What `drums-pool fill` printed: a report per sibling parked, then its summary.
fn fill_reports(o: &Output) -> (Vec<ParkedReport>, FillReport) {
    let t = text(&o.stdout);
    let mut lines: Vec<&str> = t.lines().filter(|l| !l.trim().is_empty()).collect();
    let summary = decode(lines.pop().unwrap_or_else(|| panic!("no summary: {}", text(&o.stderr))));
    (lines.into_iter().map(decode).collect(), summary)
}

fn last_phase(id: &str) -> Option<(String, i32)> {
    let c = drums::ledger::read_file(&drums::state::session_dir(id).join(drums::ledger::FILE_NAME)).ok()?;
    c.last_phase().map(|(p, by, _)| (p.to_string(), by.pid))
}

fn freezer_state(s: &Session) -> String {
    let dir = s.cgroup.as_ref().and_then(|c| c.paths.get("freezer").cloned()).expect("a freezer cgroup");
    std::fs::read_to_string(dir.join("freezer.state")).unwrap().trim().to_string()
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()).collect();
    v.sort();
    v
}

fn fill(g: &mut Guard, depth: usize) -> Vec<ParkedReport> {
    let child = pool("fill").args(["--checkpoint", &g.ckpt_id, "--depth", &depth.to_string()]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    g.owners.push(child.id() as i32);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "pool-fill: {}{}", text(&o.stdout), text(&o.stderr));
    let (parked, summary) = fill_reports(&o);
    assert_eq!(summary.depth, Some(depth), "{}", json(&summary));
    parked
}

fn take(args: &[&str]) -> Command {
    let mut c = pool("take");
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

fn sweep_orphans() -> SweepReport {
    let o = Command::new(tool("drums-sweep")).args(["--orphans", "--older-than", "1"]).output().unwrap();
    assert!(!o.stdout.is_empty(), "no sweep report: {}", text(&o.stderr));
    decode(&text(&o.stdout))
}

/// A clean checkpoint of a fresh cold session, the pool's checkpoint from now on (`g.ckpt_id`); with
/// `hygiene`, of a source prepared as the clone-hygiene test prepares it.
fn checkpoint(g: &mut Guard, hygiene: bool) -> Checkpoint {
    // Host ids: drums-ckpt refuses a session in its own user namespace.
    let o = out(script("cold.sh").env("DRUMS_OVERLAY_ARGS", "--host-ids"));
    assert!(o.status.success(), "cold.sh: {}", text(&o.stderr));
    let src_text = text(&o.stdout);
    keep(g, &o);
    if hygiene {
        prepare_source(&decode::<Session>(&src_text));
    }
    let o = run("drums-ckpt", &["--clean"], &src_text);
    assert!(o.status.success(), "drums-ckpt: {}", text(&o.stderr));
    let ckpt: Checkpoint = decode(&text(&o.stdout));
    g.ckpt_id = ckpt.id.clone();
    g.ckpt_dir = ckpt.dir.to_str().unwrap().to_string();
    ckpt
}

fn guard() -> Guard {
    Guard { ckpt_id: String::new(), ckpt_dir: String::new(), records: vec![], owners: vec![me()], dirs_before: session_dirs() }
}

/// The sessions made since the test began whose ledger names `owner` as owner.
fn sessions_owned_by(g: &Guard, owner: i32) -> Vec<String> {
    session_dirs()
        .into_iter()
        .filter(|d| !g.dirs_before.contains(d))
        .filter(|d| drums::ledger::read_file(&d.join(drums::ledger::FILE_NAME)).is_ok_and(|c| c.owner().is_some_and(|(_, o, _, _)| o.pid == owner)))
        .map(|d| d.file_name().unwrap().to_string_lossy().to_string())
        .collect()
}

/// Two takers started together for a pool of one sibling, three times: exactly one gets it each time,
/// the other finds the pool empty, and no sibling is handed out twice.
#[test]
fn two_concurrent_takes_never_get_the_same_sibling() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let mut g = guard();
    checkpoint(&mut g, false);
    let mut got = vec![];
    for round in 0..3 {
        fill(&mut g, 1);
        let takers: Vec<_> = (0..2).map(|_| take(&["--checkpoint", &g.ckpt_id]).spawn().unwrap()).collect();
        let outs: Vec<Output> = takers.into_iter().map(|t| t.wait_with_output().unwrap()).collect();
        for o in &outs {
            keep(&mut g, o);
        }
        let won: Vec<&Output> = outs.iter().filter(|o| o.status.success()).collect();
        assert_eq!(won.len(), 1, "round {round}: {} takers got a sibling: {:?}", won.len(), outs.iter().map(|o| text(&o.stderr)).collect::<Vec<_>>());
        let lost = outs.iter().find(|o| !o.status.success()).unwrap();
        assert_eq!(lost.status.code(), Some(1), "round {round}: {}", text(&lost.stderr));
        assert!(lost.stdout.is_empty());
        let r: Session = decode(&text(&won[0].stdout));
        assert_eq!(last_phase(&r.id).unwrap(), ("taken".to_string(), me()));
        got.push(r.id);
    }
    let mut distinct = got.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), got.len(), "a sibling was handed out twice: {got:?}");
    drop(g);
    assert_nothing_left(&before);
}

/// A looping filler asked to stop with SIGTERM exits 0 with its summary, leaving only siblings that are
/// parked and in ready/; one killed with SIGKILL midway leaves nothing that `drums-sweep --orphans` and a
/// drain do not remove.
#[test]
fn a_filler_stopped_or_killed_midway_leaves_nothing_half_made() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let mut g = guard();
    checkpoint(&mut g, false);
    let spool = drums::state::state_root().join("pools").join(&g.ckpt_id);
    let filler = || {
        let c = pool("fill").args(["--checkpoint", &g.ckpt_id, "--depth", "8", "--loop", "1"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        c
    };
    let parked_in_ready = |id: &str| last_phase(id).is_some_and(|p| p.0 == "parked") && files(&spool.join("ready")).iter().any(|f| f.to_string_lossy().contains(id));

    // SIGTERM while it works (one sibling parked, the next being made): it stops between two steps.
    // Meanwhile `status` names it as the pool's filler.
    let child = filler();
    let pid = child.id() as i32;
    g.owners.push(pid);
    let deadline = Instant::now() + Duration::from_secs(30);
    let working = || {
        let mine = sessions_owned_by(&g, pid);
        mine.iter().any(|id| parked_in_ready(id)) && mine.iter().any(|id| !parked_in_ready(id))
    };
    while !working() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let st = out(pool("status").args(["--checkpoint", &g.ckpt_id]));
    assert!(st.status.success(), "{}", text(&st.stderr));
    assert_eq!(decode_lines::<StatusReport>(&st.stdout)[0].filler_pid, Some(pid), "{}", text(&st.stdout));
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}{}", text(&o.stdout), text(&o.stderr));
    let (_, summary) = fill_reports(&o);
    assert_eq!(summary.stopped, "stopped by SIGTERM", "{}", json(&summary));
    assert!(summary.made >= 1, "the filler made nothing before SIGTERM: {}", json(&summary));
    for id in sessions_owned_by(&g, pid) {
        assert!(parked_in_ready(&id), "{id}: left by a filler stopped with SIGTERM, but not parked (phase {:?})", last_phase(&id));
    }

    // SIGKILL at three points of a sibling's making, each caught as it happens (a sibling takes from 0.2 s
    // to 1.5 s to make here, so fixed delays land after the pool is full as often as not): as soon as its
    // ledger exists, while CRIU restores it, and once it is live but not yet parked. The pool is emptied
    // first, so that every filler has siblings to make.
    let o = out(pool("drain").args(["--checkpoint", &g.ckpt_id]));
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let mut killed = vec![];
    for stage in [None, Some("restoring"), Some("live")] {
        let mut child = filler();
        let pid = child.id() as i32;
        g.owners.push(pid);
        killed.push(pid);
        let deadline = Instant::now() + Duration::from_secs(20);
        let at_stage = || sessions_owned_by(&g, pid).iter().any(|id| stage.is_none_or(|p| last_phase(id).is_some_and(|(q, _)| q == p)));
        while !at_stage() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = child.wait();
        assert!(sessions_owned_by(&g, pid).iter().any(|id| !parked_in_ready(id)), "the SIGKILL at stage {stage:?} (None: its ledger exists) caught no sibling half made");
    }
    let half_made: Vec<String> = killed.iter().flat_map(|p| sessions_owned_by(&g, *p)).filter(|id| !parked_in_ready(id)).collect();
    assert!(!half_made.is_empty(), "no kill caught a sibling half made: the test proves nothing");
    std::thread::sleep(Duration::from_millis(1500));
    sweep_orphans();
    for id in &half_made {
        assert!(!drums::state::session_dir(id).exists(), "{id}, half made by a killed filler, survived the sweep (phase {:?})", last_phase(id));
    }
    for id in killed.iter().flat_map(|p| sessions_owned_by(&g, *p)) {
        assert!(parked_in_ready(&id), "{id}: a killed filler's sibling that is neither gone nor parked");
    }
    let o = out(pool("drain").args(["--checkpoint", &g.ckpt_id]));
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(decode_lines::<DrainReport>(&o.stdout)[0].spool_removed, "a killed filler's tmp/ or ready/ kept the spool: {}", text(&o.stdout));
    drop(g);
    assert_nothing_left(&before);
}

/// A bound pool (`drums-pool fill --bound`, its spool in a $DRUMS_POOL_DIR of its own) dies with its
/// owner: with the owner killed by SIGKILL, the filler destroys the siblings it parked and ends, and a
/// sweep leaves nothing. While the owner lives, its siblings are its own and survive a sweep.
#[test]
fn a_bound_pool_dies_with_its_owner() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let mut g = guard();
    checkpoint(&mut g, false);
    let pool_dir = std::env::temp_dir().join(format!("drums-bound-pool-{}", me()));
    let spool = pool_dir.join(&g.ckpt_id);
    // The owner: a shell whose child is the filler (no DRUMS_OWNER: the filler's parent owns the pool).
    let mut owner = Command::new("sh")
        .args(["-c", "\"$0\" fill --bound --loop 1 --depth 2 --checkpoint \"$1\" >/dev/null 2>&1 & wait", tool("drums-pool").to_str().unwrap(), &g.ckpt_id])
        .env("PATH", path_with_tools())
        .env("DRUMS_POOL_DIR", &pool_dir)
        .env_remove("DRUMS_OWNER")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let owner_pid = owner.id() as i32;
    g.owners.push(owner_pid);
    let deadline = Instant::now() + Duration::from_secs(120);
    while files(&spool.join("ready")).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let siblings = sessions_owned_by(&g, owner_pid);
    assert!(files(&spool.join("ready")).len() >= 2 && siblings.len() >= 2, "the bound pool did not fill to 2 within 120 s: {:?}, owned by the owner: {siblings:?}", files(&spool.join("ready")));
    for id in &siblings {
        assert_eq!(last_phase(id).map(|p| p.0).as_deref(), Some("live"), "{id}: a bound pool's sibling is left live, never parked");
    }
    let st = out(pool("status").args(["--checkpoint", &g.ckpt_id]).env("DRUMS_POOL_DIR", &pool_dir));
    assert!(st.status.success(), "{}", text(&st.stderr));
    let filler = decode_lines::<StatusReport>(&st.stdout)[0].filler_pid.expect("the bound pool's filler holds its lock");
    // Alive owner: the sweep leaves its siblings alone.
    sweep_orphans();
    for id in &siblings {
        assert!(drums::state::session_dir(id).exists(), "{id}: the sweep destroyed a sibling of a live owner's bound pool");
    }

    unsafe { libc::kill(owner_pid, libc::SIGKILL) };
    let _ = owner.wait();
    let deadline = Instant::now() + Duration::from_secs(60);
    let gone = |id: &String| !drums::state::session_dir(id).exists();
    while (drums::proc::start_time(filler).is_some() || !siblings.iter().all(gone)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(drums::proc::start_time(filler).is_none(), "the filler (pid {filler}) outlived the owner of its bound pool by 60 s");
    let left: Vec<&String> = siblings.iter().filter(|id| !gone(id)).collect();
    assert!(left.is_empty(), "siblings of a bound pool that outlived its owner: {left:?}");
    assert!(!spool.exists(), "the drained bound pool's spool is still there: {:?}", files(&spool));
    std::thread::sleep(Duration::from_millis(1500));
    sweep_orphans();
    let _ = std::fs::remove_dir_all(&pool_dir);
    drop(g);
    assert_nothing_left(&before);
}

#[test]
fn warm_pool() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let mut g = guard();

    // A clean checkpoint of a session holding a Python process that answers with its next random number
    // and a cookie in the browser, as in the clone-hygiene test.
    let ckpt = checkpoint(&mut g, true);
    let spool = drums::state::state_root().join("pools").join(&g.ckpt_id);

    // Fill to depth 4: four parked, frozen siblings, marked "parked" in their ledgers.
    let parked = fill(&mut g, 4);
    assert_eq!(parked.len(), 4, "{parked:?}");
    assert_eq!(files(&spool.join("ready")).len(), 4);
    for f in files(&spool.join("ready")) {
        let r: Session = decode(&std::fs::read_to_string(&f).unwrap());
        assert!(r.ready.as_ref().is_some_and(|x| x.ready), "{f:?}");
        assert!(r.reseed.as_ref().is_some_and(|x| x.total_s > 0.0), "parked before its reseed: {f:?}");
        let pool = r.pool.as_ref().expect("a parked sibling's pool section");
        assert!(pool.frozen, "{f:?}");
        assert!(pool.parked_at > 0.0, "{f:?}");
        assert_eq!(freezer_state(&r), "FROZEN");
        assert_eq!(last_phase(&r.id).unwrap().0, "parked");
    }

    // `status` sees them, oldest first, and no filler at work.
    let st = out(pool("status").args(["--checkpoint", &g.ckpt_id]));
    assert!(st.status.success(), "{}", text(&st.stderr));
    let st = &decode_lines::<StatusReport>(&st.stdout)[0];
    let by_name: Vec<String> = files(&spool.join("ready")).iter().map(|f| f.file_name().unwrap().to_string_lossy().split('.').nth(1).unwrap().to_string()).collect();
    assert_eq!((&st.parked, st.filler_pid), (&by_name, None), "{}", json(st));
    // And names the file of each one's record, in the same order: what a caller reads instead of the spool.
    assert_eq!(st.parked_files, files(&spool.join("ready")), "{}", json(st));

    // Parked siblings survive a sweep although their filler (their owner) is gone.
    std::thread::sleep(Duration::from_millis(1500));
    let rep = sweep_orphans();
    for p in &parked {
        let id = &p.session;
        let v = rep.sessions.iter().find(|s| s.session.as_ref() == Some(id)).unwrap_or_else(|| panic!("{id} not judged: {}", json(&rep)));
        assert_eq!(v.verdict, Judged::Kept, "{}", json(v));
        assert!(drums::state::session_dir(id).is_dir());
    }

    // Four concurrent takers: four distinct, thawed, ready sessions owned by the taker.
    let takers: Vec<_> = (0..4).map(|_| take(&["--checkpoint", &g.ckpt_id]).spawn().unwrap()).collect();
    let mut taken: Vec<Session> = vec![];
    for t in takers {
        let o = t.wait_with_output().unwrap();
        keep(&mut g, &o);
        assert!(o.status.success(), "take: {}", text(&o.stderr));
        taken.push(decode(&text(&o.stdout)));
    }
    let mut ids: Vec<&str> = taken.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "two takers got the same session: {ids:?}");
    for s in &taken {
        let ready = s.ready.as_ref().expect("a checked sibling");
        assert!(ready.ready, "{ready:?}");
        assert_eq!(s.owner.pid, me(), "the taker is the new owner");
        assert_eq!(s.pool.as_ref().and_then(|p| p.taker.as_ref()).map(|t| t.pid as i64), Some(me() as i64));
        assert_eq!(freezer_state(s), "THAWED");
        assert_eq!(last_phase(&s.id).unwrap(), ("taken".to_string(), me()));
        eprintln!("take: {:.3} s", ready.checked_at - s.pool.as_ref().and_then(|p| p.take_started_at).unwrap());
    }
    assert!(files(&spool.join("ready")).is_empty());
    assert_eq!(files(&spool.join("taken")).len(), 4);

    // A fifth taker: with no --wait it fails at once (exit 1, an error object, nothing on stdout) ...
    let t = Instant::now();
    let o = take(&["--checkpoint", &g.ckpt_id]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty());
    let err = error_record(&o.stderr);
    assert_eq!((err.kind.as_str(), err.exit), ("check_failed", 1), "{}", json(&err));
    assert!(t.elapsed() < Duration::from_secs(2));
    // ... with --wait it fails after that long, or gets the sibling that a filler parks meanwhile.
    let t = Instant::now();
    let o = take(&["--checkpoint", &g.ckpt_id, "--wait", "1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let err = error_record(&o.stderr);
    assert_eq!(err.tool, "drums-pool", "{}", json(&err));
    assert!(t.elapsed() >= Duration::from_secs(1));
    let waiter = take(&["--checkpoint", &g.ckpt_id, "--wait", "120"]).spawn().unwrap();
    fill(&mut g, 1);
    let o = waiter.wait_with_output().unwrap();
    keep(&mut g, &o);
    assert!(o.status.success(), "waiting taker: {}", text(&o.stderr));
    let fifth: Session = decode(&text(&o.stdout));
    assert!(!ids.contains(&fifth.id.as_str()), "{} was taken before", fifth.id);

    // Uniqueness was established before parking, as the restore path's clone-hygiene test proves it: every
    // taken sibling had its page moved into a renderer forked after the restore, and every wipe-on-fork
    // range the checkpoint recorded zeroed (a range is skipped only when its process is missing) ...
    let wipe_ranges = ckpt.wipe.len();
    assert!(wipe_ranges > 0, "the checkpoint recorded no wipe-on-fork range: {:?}", ckpt.wipe);
    for s in taken.iter().chain([&fifth]) {
        let rs = s.reseed.as_ref().expect("a reseeded sibling");
        assert!(rs.browser.as_ref().is_some_and(|b| b.renderer_renewed), "{}: {rs:?}", s.id);
        assert_eq!(rs.wiped_ranges, wipe_ranges, "{}: not every wipe-on-fork range was zeroed: {rs:?}", s.id);
    }
    // ... and two taken siblings differ in everything.
    let (a, b) = (probe(&taken[0], &ckpt), probe(&taken[1], &ckpt));
    assert_ne!(a.hostname, b.hostname, "hostname");
    assert_ne!(a.mac, b.mac, "MAC");
    assert_ne!(a.guest_rng, b.guest_rng, "guest RNG");
    assert_ne!(a.python_random, b.python_random, "Python random");
    assert_ne!(a.math_random, b.math_random, "Math.random");
    assert_eq!((a.cookie, b.cookie), (None, None), "cookies of a clean checkpoint are erased");
    assert_ne!(a.new_context_id, b.new_context_id, "new browser context id");
    for r in g.records.split_off(1) {
        let o = run("drums-sweep", &[], &r);
        assert!(o.status.success(), "{}", text(&o.stdout));
    }

    // Takers killed midway (each in its own process group: a shell that is the taker, the script and its
    // tools), one of them after it printed its session: nothing of theirs is left once swept.
    fill(&mut g, 3);
    let mut killed = vec![];
    for delay in [Some(15u64), Some(60), None] {
        let mut c = Command::new("bash");
        c.args(["-c", &format!("{} take --checkpoint {}; sleep 60", tool("drums-pool").display(), g.ckpt_id)])
            .env("PATH", path_with_tools())
            .env_remove("DRUMS_OWNER")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = c.spawn().unwrap();
        g.owners.push(child.id() as i32);
        match delay {
            Some(ms) => std::thread::sleep(Duration::from_millis(ms)),
            None => {
                use std::io::BufRead;
                let mut line = String::new();
                std::io::BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
                let r: Session = decode(&line);
                assert_eq!(r.owner.pid, child.id() as i32, "the shell that ran the taker owns the session");
                killed.push(r.id);
            }
        }
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
        let _ = child.wait();
    }
    std::thread::sleep(Duration::from_millis(1500));
    sweep_orphans();
    for id in &killed {
        assert!(!drums::state::session_dir(id).exists(), "{id}, taken by a killed taker, survived the sweep");
    }
    // Every sibling of that fill is now either gone or still parked, ready to be taken. (Only the test's
    // fillers' siblings: other engineers' sessions come and go on this machine.)
    let ready: Vec<PathBuf> = files(&spool.join("ready"));
    for id in g.owners.iter().flat_map(|o| sessions_owned_by(&g, *o)) {
        let phase = last_phase(&id).map(|p| p.0);
        let in_ready = ready.iter().any(|f| f.to_string_lossy().contains(&id));
        assert!(phase.as_deref() == Some("parked") && in_ready, "{id}: phase {phase:?}, in ready/: {in_ready}");
    }

    // A taker refuses (and destroys) siblings older than its limit; here that is every one left.
    let o = take(&["--checkpoint", &g.ckpt_id, "--max-age", "1"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stderr).contains("refused"), "{}", text(&o.stderr));
    for f in &ready {
        let id = f.file_name().unwrap().to_string_lossy().split('.').nth(1).unwrap().to_string();
        assert!(!drums::state::session_dir(&id).exists(), "{id} is older than the limit and was not destroyed");
    }

    // Draining removes the spool; nothing the test made is left.
    let o = out(pool("drain").args(["--checkpoint", &g.ckpt_id]));
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(decode_lines::<DrainReport>(&o.stdout)[0].spool_removed, "{}", text(&o.stdout));
    drop(g);
    assert_nothing_left(&before);
}

/// Nothing the test made is left: what is new since `before` must still be there a moment later to count.
fn assert_nothing_left(before: &Inventory) {
    // Other engineers' processes come and go on this machine: what is left must still be there a moment later.
    let mut left = inventory().new_since(before);
    if !left.is_empty() {
        std::thread::sleep(Duration::from_secs(3));
        let again = inventory().new_since(before);
        let keep = |a: &mut Vec<String>, b: &Vec<String>| a.retain(|x| b.contains(x));
        keep(&mut left.processes, &again.processes);
        keep(&mut left.mounts, &again.mounts);
        keep(&mut left.links, &again.links);
        keep(&mut left.cgroups, &again.cgroups);
        keep(&mut left.state_dirs, &again.state_dirs);
        keep(&mut left.nft_tables, &again.nft_tables);
        keep(&mut left.slots, &again.slots);
    }
    assert!(left.is_empty(), "left behind: {left:?}");
}
