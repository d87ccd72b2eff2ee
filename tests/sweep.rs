//! drums-sweep on real kernel objects: sessions built by hand (a ledger, tmpfs mounts, a veth pair, a PID
//! namespace, cgroup directories, a slot file, directories), each resource ledgered before it is created,
//! as the Drums tools do. Every test holds the session lock and cleans up even when it fails.

use drums::destroy::sweep::{Judged, LeftoverKind, SweepReport, Verdict};
use drums::destroy::DestroyReport;
use drums::ledger::{Ledger, Resource};
use drums_tests::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn sh(cmd: &str) {
    let o = Command::new("sh").arg("-c").arg(cmd).output().unwrap();
    assert!(o.status.success(), "`{cmd}` failed: {}", text(&o.stderr));
}

/// A session made by hand. Drop removes whatever a failed test left, by hand (not with the code under test).
struct Hand {
    id: String,
    dir: PathBuf,
    link: String,
    cgroups: Vec<PathBuf>,
    image: PathBuf,
    slot: PathBuf,
    /// The `unshare` process whose child is the session's init.
    unshare: Option<Child>,
    init_pid: i32,
    pidns: u64,
}

fn link_name(id: &str) -> String {
    // Interface names are at most 15 bytes: "drums" + 8 of the id + "h".
    format!("drums{}h", &id[2..10])
}

/// A shell called drums-init, so that its processes look like a session init to the sweep (comm).
fn init_shell() -> PathBuf {
    let p = PathBuf::from("/tmp/drums-tests-bin/drums-init");
    if !p.exists() {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let tmp = p.with_extension(format!("{}", std::process::id()));
        std::fs::copy("/bin/dash", &tmp).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
    }
    p
}

/// Start `drums-init -c 'sleep & sleep & wait'` as PID 1 of a new PID namespace; (unshare, init pid).
fn spawn_init() -> (Child, i32) {
    let child = Command::new("unshare")
        .args(["--pid", "--fork"])
        .arg(init_shell())
        .args(["-c", "sleep 1000 & sleep 1000 & wait"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let up = child.id() as i32;
    let init = wait_for(|| children(up).first().copied(), "the init under unshare");
    wait_for(|| (children(init).len() == 2).then_some(()), "the init's two children");
    (child, init)
}

/// The owner of a session whose owner is gone: a child that has exited and been reaped.
fn dead_owner() -> drums::record::Owner {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id() as i32;
    let start = drums::proc::start_time(pid).unwrap_or(1);
    c.wait().unwrap();
    drums::record::Owner { pid, start_time: start }
}

impl Hand {
    /// `stages`: how far to go, in creation order (overlay, ns, net, cgroup, ...), so that a test can stop
    /// where a crashed tool would have.
    fn new(stages: usize) -> Hand {
        Hand::with_owner(stages, drums::proc::me().unwrap())
    }

    fn with_owner(stages: usize, owner: drums::record::Owner) -> Hand {
        let id = drums::state::new_id('d');
        let dir = drums::state::session_dir(&id);
        let link = link_name(&id);
        let image = drums::state::checkpoint_root().join(format!("test-{id}"));
        let slot = drums::state::state_root().join("slots").join(format!("test-{id}"));
        let cgroups = ["pids", "memory"].iter().map(|c| PathBuf::from(format!("/sys/fs/cgroup/{c}/drums/{id}"))).collect();
        let mut h = Hand { id: id.clone(), dir: dir.clone(), link, cgroups, image, slot, unshare: None, init_pid: 0, pidns: 0 };
        let l = Ledger::create(&dir, &id, owner, None).unwrap();
        l.phase("creating").unwrap();
        // overlay stage: a tmpfs with a mount inside it, and a directory holding files.
        let tmpfs = dir.join("tmpfs");
        l.create_res(Resource::Mount { path: tmpfs.clone() }).unwrap();
        std::fs::create_dir_all(&tmpfs).unwrap();
        sh(&format!("mount -t tmpfs drums-test {}", tmpfs.display()));
        let inner = tmpfs.join("merged");
        l.create_res(Resource::Mount { path: inner.clone() }).unwrap();
        std::fs::create_dir_all(&inner).unwrap();
        sh(&format!("mount -t tmpfs drums-test {}", inner.display()));
        l.create_res(Resource::Dir { path: dir.join("upper") }).unwrap();
        std::fs::create_dir_all(dir.join("upper/a/b")).unwrap();
        std::fs::write(dir.join("upper/a/b/file"), "x").unwrap();
        if stages < 2 {
            return h;
        }
        // ns stage: an init in its own PID namespace with two children, as drums-ns makes it.
        let (child, init) = spawn_init();
        h.unshare = Some(child);
        let st = drums::proc::start_time(init).unwrap();
        h.init_pid = init;
        h.pidns = drums::proc::ns_inode(init, "pid").unwrap();
        l.create_res(Resource::Process { pid: init, start_time: st, role: "init".into(), init: true }).unwrap();
        if stages < 3 {
            return h;
        }
        // net stage: a slot and a veth pair, both ends still on the host.
        l.create_res(Resource::Slot { index: 16383, path: h.slot.clone() }).unwrap();
        std::fs::create_dir_all(h.slot.parent().unwrap()).unwrap();
        std::fs::write(&h.slot, &id).unwrap();
        l.create_res(Resource::Link { name: h.link.clone() }).unwrap();
        sh(&format!("ip link add {} type veth peer name {}", h.link, h.link.replace('h', "s")));
        if stages < 4 {
            return h;
        }
        // cgroup stage: the init in a pids and a memory cgroup.
        for c in &h.cgroups {
            l.create_res(Resource::Cgroup { path: c.clone() }).unwrap();
            std::fs::create_dir_all(c).unwrap();
            std::fs::write(c.join("cgroup.procs"), init.to_string()).unwrap();
        }
        // An image directory, kept by default.
        l.create_res(Resource::Image { path: h.image.clone() }).unwrap();
        std::fs::create_dir_all(&h.image).unwrap();
        std::fs::write(h.image.join("pages-1.img"), "x").unwrap();
        l.phase("live").unwrap();
        h
    }

    /// The hex digits of the id: every name the session gives a kernel object contains them.
    fn tag(&self) -> &str {
        &self.id[2..10]
    }

    /// What a tool killed midway leaves: the creating phase, set by a process that is gone.
    fn crash(&self) {
        let l = Ledger::open(&self.dir).unwrap();
        l.append(&drums::ledger::Entry::Phase { t: drums::state::now(), phase: "creating".into(), by: dead_owner() }).unwrap();
    }

    fn record(&self) -> String {
        format!(
            r#"{{"drums":1,"type":"session","id":"{}","state_dir":"{}","created_at":1.0,"owner":{{"pid":1,"start_time":1}}}}"#,
            self.id,
            self.dir.display()
        )
    }

    /// Wait for the unshare process (it exits once its child, the init, is killed).
    fn reap(&mut self) {
        if let Some(mut c) = self.unshare.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Hand {
    fn drop(&mut self) {
        if self.init_pid > 0 && drums::proc::comm(self.init_pid) == "drums-init" {
            unsafe { libc::kill(self.init_pid, libc::SIGKILL) };
        }
        self.reap();
        for m in [self.dir.join("tmpfs/merged"), self.dir.join("tmpfs")] {
            let _ = Command::new("umount").arg("-l").arg(&m).stderr(Stdio::null()).status();
        }
        let _ = Command::new("ip").args(["link", "del", &self.link]).stderr(Stdio::null()).status();
        for c in &self.cgroups {
            let _ = std::fs::remove_dir(c);
            let _ = std::fs::remove_dir(c.parent().unwrap());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_dir_all(&self.image);
        let _ = std::fs::remove_file(&self.slot);
    }
}

fn children(pid: i32) -> Vec<i32> {
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        if rest.split_whitespace().nth(1).and_then(|s| s.parse::<i32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

fn wait_for<T>(mut f: impl FnMut() -> Option<T>, what: &str) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The destroy reports of drums-sweep (decoding checks each `type` is "destroy").
fn reports(out: &[u8]) -> Vec<DestroyReport> {
    decode_lines(out)
}

/// What of this one session is still on the machine.
fn leftovers(h: &Hand) -> Vec<String> {
    let inv = inventory();
    let mut left = vec![];
    left.extend(inv.mounts.iter().filter(|m| m.contains(&h.id)).map(|m| format!("mount {m}")));
    left.extend(inv.links.iter().filter(|l| l.starts_with(&h.link[..13])).map(|l| format!("link {l}")));
    left.extend(inv.cgroups.iter().filter(|c| c.contains(&h.id)).map(|c| format!("cgroup {c}")));
    if h.dir.exists() {
        left.push(format!("state dir {}", h.dir.display()));
    }
    if h.slot.exists() {
        left.push(format!("slot {}", h.slot.display()));
    }
    if h.init_pid > 0 && drums::proc::state(h.init_pid).is_some_and(|s| s != 'Z') && drums::proc::comm(h.init_pid) == "drums-init" {
        left.push(format!("init {}", h.init_pid));
    }
    left
}

#[test]
fn destroy_removes_every_ledgered_resource_and_twice_is_not_an_error() {
    require_root();
    let _l = session_lock();
    let mut h = Hand::new(9);
    let o = run("drums-sweep", &[], &h.record());
    h.reap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", text(&o.stderr));
    let r = &reports(&o.stdout)[0];
    assert_eq!(r.session.as_deref(), Some(h.id.as_str()), "{}", json(r));
    assert_eq!(r.left.len(), 0, "{}", json(r));
    assert!(r.state_dir_removed, "{}", json(r));
    // tmpfs, inner mount, dir, init, slot, link, 2 cgroups = 8 removed; the image is kept.
    assert_eq!(r.removed.len(), 8, "{}", json(r));
    assert!(matches!(r.kept.first().map(|k| &k.res), Some(Resource::Image { .. })), "{}", json(r));
    assert!(h.image.join("pages-1.img").exists(), "images are kept unless asked");
    assert_eq!(leftovers(&h), Vec::<String>::new());
    assert!(!Path::new(&format!("/sys/fs/cgroup/pids/drums/{}", h.id)).exists());

    let again = run("drums-sweep", &["--session", &h.id], "");
    assert_eq!(again.status.code(), Some(0), "a second destroy is not an error: {}", text(&again.stderr));
    let r = &reports(&again.stdout)[0];
    assert!(r.state_dir_removed, "{}", json(r));
}

#[test]
fn destroy_killed_midway_resumes() {
    require_root();
    let _l = session_lock();
    let mut interrupted = 0;
    for delay_ms in [0u64, 1, 2, 3, 5, 8, 12, 20, 40] {
        let mut h = Hand::new(9);
        let mut c = Command::new(tool("drums-sweep"))
            .args(["--state-dir", h.dir.to_str().unwrap(), "--remove-images"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = c.kill();
        let _ = c.wait();
        let ledger = std::fs::read_to_string(h.dir.join("ledger.jsonl")).unwrap_or_default();
        if ledger.contains("destroying") {
            interrupted += 1;
        }
        let o = run("drums-sweep", &["--state-dir", h.dir.to_str().unwrap(), "--remove-images"], "");
        h.reap();
        assert_eq!(o.status.code(), Some(0), "after a kill at {delay_ms} ms: {}{}", text(&o.stdout), text(&o.stderr));
        assert_eq!(leftovers(&h), Vec::<String>::new(), "after a kill at {delay_ms} ms");
        assert!(!h.image.exists(), "--remove-images removes the image");
    }
    assert!(interrupted > 0, "no destroy was killed after it had started: the test proved nothing");
}

#[test]
fn dry_run_destroy_changes_nothing() {
    require_root();
    let _l = session_lock();
    let mut h = Hand::new(9);
    let snap = || mine(&inventory(), &[h.tag()], &[h.pidns]);
    let before = snap();
    let o = run("drums-sweep", &["--dry-run"], &h.record());
    assert_eq!(o.status.code(), Some(1), "a dry run with something to remove exits 1: {}", text(&o.stderr));
    let r = &reports(&o.stdout)[0];
    assert_eq!(r.planned.len(), 9, "{}", json(r));
    assert!(!before.processes.is_empty() && !before.mounts.is_empty() && !before.links.is_empty() && !before.cgroups.is_empty());
    assert_eq!(snap(), before, "a dry run changed the machine");
    let ledger = std::fs::read_to_string(h.dir.join("ledger.jsonl")).unwrap();
    assert!(!ledger.contains("destroying"), "a dry run writes nothing to the ledger");
    let o = run("drums-sweep", &[], &h.record());
    h.reap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

#[test]
fn a_bad_record_refuses_the_whole_input() {
    require_root();
    let _l = session_lock();
    let h = Hand::new(1);
    let input = format!("{}\n{{\"drums\":1,\"type\":\"session\",\"id\":\"d-x\",\"state_dir\":\"/etc\"}}\n", h.record());
    let o = run("drums-sweep", &[], &input);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(h.dir.exists(), "nothing is destroyed when one record is bad");
    let o = run("drums-sweep", &["--state-dir", "/etc"], "");
    assert_eq!(o.status.code(), Some(3), "a state directory outside the state root is refused: {}", text(&o.stderr));
    let o = run("drums-sweep", &[], &h.record());
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}

impl Hand {
    /// What of the session is missing, by stage (empty: everything it made is there).
    fn missing(&self, stages: usize) -> Vec<String> {
        let inv = inventory();
        let mut miss = vec![];
        for m in [self.dir.join("tmpfs"), self.dir.join("tmpfs/merged")] {
            if !inv.mounts.contains(&m.display().to_string()) {
                miss.push(format!("mount {}", m.display()));
            }
        }
        if stages >= 2 && !(drums::proc::state(self.init_pid).is_some_and(|s| s != 'Z') && drums::proc::comm(self.init_pid) == "drums-init") {
            miss.push(format!("init {}", self.init_pid));
        }
        if stages >= 3 && !inv.links.contains(&self.link) {
            miss.push(format!("link {}", self.link));
        }
        if stages >= 4 {
            for c in &self.cgroups {
                if !c.is_dir() {
                    miss.push(format!("cgroup {}", c.display()));
                }
            }
        }
        if !self.dir.join("ledger.jsonl").is_file() {
            miss.push("ledger".into());
        }
        miss
    }
}

/// Objects with Drums' names that no ledger holds: what a lost ledger leaves. Dropped: removed by hand.
struct Stray {
    tag: String,
    link: String,
    mount: PathBuf,
    cgroup: PathBuf,
    slot: PathBuf,
    /// An unfinished checkpoint, as a dump killed midway leaves it.
    partial: PathBuf,
    unshare: Option<Child>,
    init: i32,
    pidns: u64,
}

impl Stray {
    fn new() -> Stray {
        let tag = drums::state::new_id('d')[2..10].to_string();
        let link = format!("drums{tag}u");
        sh(&format!("ip link add {link} type veth peer name drums{tag}v"));
        let mount = drums::state::state_root().join(format!("stray-{tag}"));
        std::fs::create_dir_all(&mount).unwrap();
        sh(&format!("mount -t tmpfs stray {}", mount.display()));
        let cgroup = PathBuf::from(format!("/sys/fs/cgroup/pids/drums/stray{tag}"));
        std::fs::create_dir_all(&cgroup).unwrap();
        let slot = drums::state::state_root().join("slots").join(format!("stray-{tag}"));
        std::fs::create_dir_all(slot.parent().unwrap()).unwrap();
        std::fs::write(&slot, "d-gone").unwrap();
        let partial = drums::state::checkpoint_root().join(format!("c-{tag}.partial"));
        std::fs::create_dir_all(partial.join("images")).unwrap();
        std::fs::write(partial.join("images/pages-1.img"), "x").unwrap();
        let (c, init) = spawn_init();
        let pidns = drums::proc::ns_inode(init, "pid").unwrap();
        Stray { tag, link, mount, cgroup, slot, partial, unshare: Some(c), init, pidns }
    }
    fn present(&self) -> Vec<String> {
        let inv = inventory();
        let mut v = vec![];
        if inv.links.iter().any(|l| l.contains(&self.tag)) {
            v.push(format!("link {}", self.link));
        }
        if inv.mounts.contains(&self.mount.display().to_string()) {
            v.push(format!("mount {}", self.mount.display()));
        }
        if self.cgroup.exists() {
            v.push(format!("cgroup {}", self.cgroup.display()));
        }
        if self.slot.exists() {
            v.push(format!("slot {}", self.slot.display()));
        }
        if self.partial.exists() {
            v.push(format!("checkpoint {}", self.partial.display()));
        }
        if drums::proc::state(self.init).is_some_and(|s| s != 'Z') && drums::proc::comm(self.init) == "drums-init" {
            v.push(format!("init {}", self.init));
        }
        v
    }
    fn reap(&mut self) {
        if let Some(mut c) = self.unshare.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Stray {
    fn drop(&mut self) {
        if drums::proc::comm(self.init) == "drums-init" {
            unsafe { libc::kill(self.init, libc::SIGKILL) };
        }
        self.reap();
        let _ = Command::new("ip").args(["link", "del", &self.link]).stderr(Stdio::null()).status();
        let _ = Command::new("umount").arg("-l").arg(&self.mount).stderr(Stdio::null()).status();
        let _ = std::fs::remove_dir(&self.mount);
        let _ = std::fs::remove_dir(&self.cgroup);
        let _ = std::fs::remove_file(&self.slot);
        let _ = std::fs::remove_dir_all(&self.partial);
    }
}

/// Objects that are not Drums': a veth, a tmpfs mount, a cgroup directory and a PID namespace with other
/// names. A sweep must leave every one of them alone.
struct Foreign {
    tag: String,
    link: String,
    mount: PathBuf,
    cgroup: PathBuf,
    unshare: Option<Child>,
    init: i32,
}

impl Foreign {
    fn new() -> Foreign {
        let tag = drums::state::new_id('d')[2..8].to_string();
        let link = format!("xtest{tag}");
        sh(&format!("ip link add {link} type veth peer name ytest{tag}"));
        let mount = PathBuf::from(format!("/tmp/xtest-{tag}"));
        std::fs::create_dir_all(&mount).unwrap();
        sh(&format!("mount -t tmpfs xtest {}", mount.display()));
        let cgroup = PathBuf::from(format!("/sys/fs/cgroup/pids/notdrums-{tag}"));
        std::fs::create_dir_all(&cgroup).unwrap();
        let c = Command::new("unshare").args(["--pid", "--fork", "sleep", "1000"]).stdin(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let up = c.id() as i32;
        let init = wait_for(|| children(up).first().copied(), "the foreign init");
        Foreign { tag, link, mount, cgroup, unshare: Some(c), init }
    }
    fn missing(&self) -> Vec<String> {
        let mut v = vec![];
        if !Command::new("ip").args(["link", "show", &self.link]).output().unwrap().status.success() {
            v.push(format!("link {}", self.link));
        }
        let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        if !mi.contains(&format!(" {} ", self.mount.display())) {
            v.push(format!("mount {}", self.mount.display()));
        }
        if !self.cgroup.is_dir() {
            v.push(format!("cgroup {}", self.cgroup.display()));
        }
        if drums::proc::state(self.init).is_none_or(|s| s == 'Z') {
            v.push(format!("process {}", self.init));
        }
        v
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        unsafe { libc::kill(self.init, libc::SIGKILL) };
        if let Some(mut c) = self.unshare.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["link", "del", &self.link]).stderr(Stdio::null()).status();
        let _ = Command::new("umount").arg(&self.mount).stderr(Stdio::null()).status();
        let _ = std::fs::remove_dir(&self.mount);
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

/// The part of an inventory that names one of `tags` (the hex of a test's own ids), plus the processes in
/// the PID namespaces `pidns`. Other tests on this machine (some with their own state root) make and remove
/// Drums objects at the same time, so a test compares only its own.
fn mine(inv: &Inventory, tags: &[&str], pidns: &[u64]) -> Inventory {
    let f = |v: &Vec<String>| v.iter().filter(|x| tags.iter().any(|t| x.contains(t))).cloned().collect::<Vec<_>>();
    let procs = |v: &Vec<String>| {
        v.iter()
            .filter(|p| p.split(' ').next().and_then(|n| n.parse::<i32>().ok()).is_some_and(|pid| drums::proc::ns_inode(pid, "pid").is_ok_and(|n| pidns.contains(&n))))
            .cloned()
            .collect::<Vec<_>>()
    };
    Inventory {
        processes: procs(&inv.processes),
        zombies: vec![],
        mounts: f(&inv.mounts),
        links: f(&inv.links),
        cgroups: f(&inv.cgroups),
        state_dirs: f(&inv.state_dirs),
        nft_tables: f(&inv.nft_tables),
        slots: f(&inv.slots),
        id_ranges: f(&inv.id_ranges),
        unledgered_ids: vec![],
    }
}

/// A sweep left nothing of this test's (`tags`). Exit 1 is accepted only when everything it reports as left
/// belongs to someone else (another test's objects, named like Drums', that were busy).
fn assert_swept(code: Option<i32>, r: &SweepReport, err: &str, tags: &[&str]) {
    let mut left: Vec<String> = r.unledgered.left.iter().map(json).collect();
    for d in &r.destroyed {
        left.extend(d.left.iter().map(json));
        if !d.state_dir_removed {
            left.push(json(d));
        }
    }
    let ours: Vec<&String> = left.iter().filter(|l| tags.iter().any(|t| l.contains(t))).collect();
    assert!(ours.is_empty(), "the sweep left this test's objects: {ours:#?}\n{err}");
    match code {
        Some(0) => {}
        Some(1) => {
            assert!(!left.is_empty(), "exit 1 but nothing reported left: {}\n{err}", json(r));
            eprintln!("note: the sweep left {} objects of others, first: {}", left.len(), left[0]);
        }
        other => panic!("sweep exit {other:?}: {err}\n{}", json(r)),
    }
}

/// `drums-sweep --orphans`: its exit code, its report (decoding checks its `type` is "sweep"), its stderr.
fn sweep(args: &[&str]) -> (Option<i32>, SweepReport, String) {
    let mut a = vec!["--orphans"];
    a.extend_from_slice(args);
    let o = run("drums-sweep", &a, "");
    let r = decode_lines::<SweepReport>(&o.stdout).pop().unwrap_or_else(|| panic!("no report; stderr: {}", text(&o.stderr)));
    (o.status.code(), r, text(&o.stderr))
}

/// The sweep's verdict on session `id`.
fn verdict_on(r: &SweepReport, id: &str) -> Verdict {
    r.sessions.iter().find(|v| v.session.as_deref() == Some(id)).cloned().unwrap_or_else(|| panic!("{id} not judged: {}", json(r)))
}

#[test]
fn cron_sweep_removes_orphans_and_strays_and_spares_live_and_foreign() {
    require_root();
    let _l = session_lock();
    let foreign = Foreign::new();
    let mut orphan = Hand::with_owner(9, dead_owner());
    let mut half = Hand::new(1);
    half.crash();
    let mut live = Hand::new(9);
    let mut stray = Stray::new();
    let (code, r, err) = sweep(&["--older-than", "0"]);
    orphan.reap();
    half.reap();
    stray.reap();
    assert_swept(code, &r, &err, &[orphan.tag(), half.tag(), live.tag(), &stray.tag, &foreign.tag]);
    let verdict = |h: &Hand| verdict_on(&r, &h.id);
    assert_eq!(verdict(&orphan).verdict, Judged::Orphan, "{}", json(&r));
    assert!(verdict(&orphan).reason.contains("owner"), "{}", json(&r));
    assert_eq!(verdict(&half).verdict, Judged::Orphan, "{}", json(&r));
    assert_eq!(verdict(&live).verdict, Judged::Kept, "{}", json(&r));
    assert_eq!(leftovers(&orphan), Vec::<String>::new());
    assert_eq!(leftovers(&half), Vec::<String>::new());
    assert_eq!(stray.present(), Vec::<String>::new(), "{}", json(&r));
    assert_eq!(live.missing(9), Vec::<String>::new(), "a sweep harmed a live session: {}", json(&r));
    assert_eq!(foreign.missing(), Vec::<String>::new(), "a sweep touched what is not Drums': {}", json(&r));
    let kinds: Vec<LeftoverKind> = r.unledgered.removed.iter().map(|l| l.kind).collect();
    for k in [LeftoverKind::Process, LeftoverKind::Link, LeftoverKind::Mount, LeftoverKind::Cgroup, LeftoverKind::Slot, LeftoverKind::Checkpoint] {
        assert!(kinds.contains(&k), "no unledgered {k:?} reported removed: {}", json(&r));
    }
    let o = run("drums-sweep", &[], &live.record());
    live.reap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(foreign.missing(), Vec::<String>::new());
}

#[test]
fn dry_run_sweep_changes_nothing() {
    require_root();
    let _l = session_lock();
    let _foreign = Foreign::new();
    let mut orphan = Hand::with_owner(9, dead_owner());
    let mut stray = Stray::new();
    let seen = drums::state::state_root().join("sweep-seen.json");
    let seen_before = std::fs::read(&seen).ok();
    let tags = [orphan.tag().to_string(), stray.tag.clone(), _foreign.tag.clone()];
    let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
    let snap = || mine(&inventory(), &tags, &[orphan.pidns, stray.pidns]);
    let before = snap();
    let (code, r, err) = sweep(&["--older-than", "0", "--dry-run"]);
    assert_eq!(code, Some(1), "a dry run that finds orphans exits 1: {err}");
    let planned = &r.destroyed.iter().find(|d| d.session.as_deref() == Some(orphan.id.as_str())).unwrap_or_else(|| panic!("{}", json(&r))).planned;
    assert!(!planned.is_empty(), "{}", json(&r));
    let unl: Vec<&str> = r.unledgered.planned.iter().map(|l| l.name.as_str()).collect();
    for what in [&stray.link, &stray.mount.display().to_string(), &stray.cgroup.display().to_string(), &stray.slot.display().to_string(), &stray.partial.display().to_string(), &stray.init.to_string()] {
        assert!(unl.contains(&what.as_str()), "the plan misses {what}: {}", json(&r));
    }
    assert_eq!(before.processes.len(), 6, "two inits with two children each: {before:?}");
    assert_eq!(snap(), before, "a dry run changed the machine");
    assert_eq!(std::fs::read(&seen).ok(), seen_before, "a dry run wrote the seen file");
    assert!(orphan.missing(9).is_empty());
    let (code, r, err) = sweep(&["--older-than", "0"]);
    orphan.reap();
    stray.reap();
    assert_swept(code, &r, &err, &tags);
    assert_eq!(stray.present(), Vec::<String>::new());
}

#[test]
fn unledgered_objects_wait_for_the_grace_period() {
    require_root();
    let _l = session_lock();
    let mut stray = Stray::new();
    let (code, r, err) = sweep(&[]);
    assert_swept(code, &r, &err, &[&stray.tag]);
    assert_eq!(stray.present().len(), 6, "the default grace period spares young objects: {}", json(&r));
    let waiting: Vec<&str> = r.unledgered.waiting.iter().map(|l| l.name.as_str()).collect();
    assert!(waiting.contains(&stray.link.as_str()) && waiting.contains(&stray.partial.display().to_string().as_str()), "{}", json(&r));
    let (code, r, err) = sweep(&["--older-than", "30"]);
    assert_swept(code, &r, &err, &[&stray.tag]);
    assert_eq!(stray.present().len(), 6, "{}", json(&r));
    // Links, mounts, cgroups and slots have no kernel age: the sweep dates them from when it first saw them.
    // Move those dates 100 s back, as if that sweep had run long ago.
    let seen_path = drums::state::state_root().join("sweep-seen.json");
    // The seen file is the sweep's own state (no record): key -> when first seen, as lib/src/destroy/sweep.rs keeps it.
    let mut seen: BTreeMap<String, f64> = serde_json::from_slice(&std::fs::read(&seen_path).unwrap()).unwrap();
    let mut backdated = 0;
    for (k, v) in seen.iter_mut() {
        if k.contains(&stray.tag) {
            *v -= 100.0;
            backdated += 1;
        }
    }
    assert_eq!(backdated, 5, "link pair, mount, cgroup, slot are remembered: {seen:?}");
    std::fs::write(&seen_path, serde_json::to_vec(&seen).unwrap()).unwrap();
    let (code, r, err) = sweep(&["--older-than", "30"]);
    assert_swept(code, &r, &err, &[&stray.tag]);
    let left = stray.present();
    assert_eq!(left.len(), 2, "only the init and the checkpoint, dated by the kernel, are still young: {left:?}\n{}", json(&r));
    assert!(left[0].starts_with("checkpoint") && left[1].starts_with("init"), "{left:?}");
    let (code, r, err) = sweep(&["--older-than", "0"]);
    stray.reap();
    assert_swept(code, &r, &err, &[&stray.tag]);
    assert_eq!(stray.present(), Vec::<String>::new(), "{}", json(&r));
}

#[test]
fn a_session_being_created_by_a_live_tool_is_spared() {
    require_root();
    let _l = session_lock();
    // Owner gone, no init yet, but a live process holds it in the creating phase.
    let mut h = Hand::with_owner(1, dead_owner());
    let mut holder = Command::new("sleep").arg("1000").spawn().unwrap();
    let by = drums::record::Owner { pid: holder.id() as i32, start_time: drums::proc::start_time(holder.id() as i32).unwrap() };
    let l = Ledger::open(&h.dir).unwrap();
    l.append(&drums::ledger::Entry::Phase { t: drums::state::now(), phase: "creating".into(), by }).unwrap();
    let (code, r, err) = sweep(&["--older-than", "0"]);
    assert_swept(code, &r, &err, &[h.tag()]);
    assert_eq!(h.missing(1), Vec::<String>::new(), "{}", json(&r));
    let _ = holder.kill();
    let _ = holder.wait();
    let (code, r, err) = sweep(&["--older-than", "0"]);
    h.reap();
    assert_swept(code, &r, &err, &[h.tag()]);
    assert_eq!(leftovers(&h), Vec::<String>::new(), "once its creator is gone it is an orphan: {}", json(&r));
}

#[test]
fn expired_time_to_live_is_an_orphan() {
    require_root();
    let _l = session_lock();
    let mut h = Hand::new(9);
    let (_, r, _) = sweep(&["--older-than", "0", "--ttl", "3600"]);
    assert!(h.missing(9).is_empty(), "{}", json(&r));
    std::thread::sleep(Duration::from_millis(1100));
    let (code, r, err) = sweep(&["--older-than", "0", "--ttl", "1"]);
    h.reap();
    assert_swept(code, &r, &err, &[h.tag()]);
    assert_eq!(leftovers(&h), Vec::<String>::new(), "{}", json(&r));
}

/// A warm pool's spool directory made by hand (drums-pool(7)); removed when dropped.
struct Spool(PathBuf);
impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        // As drums-pool drain does: the pools root goes with its last spool (others' spools keep it).
        let _ = std::fs::remove_dir(drums::state::pools_root());
    }
}

/// A parked session (drums-pool(7)) is kept while a pool's ready/ holds its record, though its filler (its
/// owner) is gone; once the record is gone nobody can take it, and after the grace period it is an orphan.
#[test]
fn a_parked_session_without_its_pool_record_is_an_orphan() {
    require_root();
    let _l = session_lock();
    let filler = dead_owner();
    let mut h = Hand::with_owner(2, filler.clone());
    Ledger::open(&h.dir).unwrap().append(&drums::ledger::Entry::Phase { t: drums::state::now(), phase: "parked".into(), by: filler }).unwrap();
    let spool = Spool(drums::state::pools_root().join(format!("c-{}", h.tag())));
    let ready = spool.0.join("ready");
    std::fs::create_dir_all(&ready).unwrap();
    let parked_ms = (drums::state::now() * 1000.0) as u64;
    let rec = ready.join(format!("{parked_ms}.{}.json", h.id));
    std::fs::write(&rec, format!("{}\n", h.record())).unwrap();
    let id = h.id.clone();
    let verdict = |r: &SweepReport| verdict_on(r, &id);

    let (code, r, err) = sweep(&["--older-than", "0"]);
    assert_swept(code, &r, &err, &[h.tag()]);
    assert_eq!(verdict(&r).verdict, Judged::Kept, "parked, its record in ready/: {}", json(&r));
    assert_eq!(h.missing(2), Vec::<String>::new(), "{}", json(&r));

    // The record is gone (its spool removed by hand): within the grace period the session is still kept ...
    std::fs::remove_file(&rec).unwrap();
    let (code, r, err) = sweep(&["--older-than", "60"]);
    assert_swept(code, &r, &err, &[h.tag()]);
    assert_eq!(verdict(&r).verdict, Judged::Kept, "{}", json(&r));
    assert!(verdict(&r).reason.contains("grace"), "{}", json(&r));
    assert_eq!(h.missing(2), Vec::<String>::new(), "{}", json(&r));
    // ... and after it, an orphan, destroyed with everything it holds.
    let (code, r, err) = sweep(&["--older-than", "0"]);
    h.reap();
    assert_swept(code, &r, &err, &[h.tag()]);
    let v = verdict(&r);
    assert_eq!(v.verdict, Judged::Orphan, "{}", json(&r));
    assert!(v.reason.contains("ready/"), "{}", json(&v));
    assert_eq!(leftovers(&h), Vec::<String>::new(), "{}", json(&r));
}

#[test]
fn mapped_files_go_with_their_checkpoint_and_only_theirs() {
    require_root();
    let _l = session_lock();
    let root = drums::mapped::mapped_root();
    let make = |id: &str, owner: &std::path::Path| {
        let d = root.join(id);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("0.bin"), [0u8; 4096]).unwrap();
        std::fs::write(d.join(drums::mapped::OWNER_FILE), owner.as_os_str().as_encoded_bytes()).unwrap();
        d
    };
    let gone = drums::state::new_id('c');
    let orphan = make(&gone, &drums::state::checkpoint_root().join(&gone));
    let kept_id = drums::state::new_id('c');
    let kept_ckpt = drums::state::checkpoint_root().join(&kept_id);
    std::fs::create_dir_all(&kept_ckpt).unwrap();
    let kept = make(&kept_id, &kept_ckpt);
    // Named by a checkpoint under another checkpoint root (another DRUMS_CHECKPOINT_DIR): not this sweep's.
    let other_id = drums::state::new_id('c');
    let other = make(&other_id, &std::path::Path::new("/srv/other-checkpoints").join(&other_id));
    let (code, r, err) = sweep(&["--older-than", "0"]);
    let (orphan_left, kept_left, other_left) = (orphan.exists(), kept.exists(), other.exists());
    for d in [&orphan, &kept, &other] {
        let _ = std::fs::remove_dir_all(d);
    }
    let _ = std::fs::remove_dir_all(&kept_ckpt);
    assert!(code == Some(0), "sweep exit {code:?}: {err}\n{}", json(&r));
    assert!(!orphan_left, "mapped files of a removed checkpoint stay: {}", json(&r));
    assert!(kept_left, "mapped files of a checkpoint that exists were removed: {}", json(&r));
    assert!(other_left, "mapped files judged against the wrong checkpoint root were removed: {}", json(&r));
    assert!(r.unledgered.removed.iter().any(|l| l.name == orphan.display().to_string()), "{}", json(&r));
}

/// An orphan whose ledger holds a line of a later format version is refused by the cron sweep: reported
/// with the verdict `refused`, exit 8, everything of it left; with the line taken out it is swept.
#[test]
fn an_orphan_with_a_ledger_line_not_understood_is_refused_and_kept() {
    require_root();
    let _l = session_lock();
    let mut h = Hand::with_owner(9, dead_owner());
    let ledger = h.dir.join(drums::ledger::FILE_NAME);
    let before = std::fs::read_to_string(&ledger).unwrap();
    let newer = r#"{"v":2,"op":"create","t":1.0,"res":{"kind":"mount","path":"/run/drums-v2"}}"#;
    std::fs::write(&ledger, format!("{before}{newer}\n")).unwrap();
    let (code, r, err) = sweep(&["--older-than", "0"]);
    assert_eq!(code, Some(drums::error::exit::NOT_UNDERSTOOD), "{err}\n{}", json(&r));
    let v = verdict_on(&r, &h.id);
    assert_eq!(v.verdict, Judged::Refused, "{}", json(&v));
    assert!(v.reason.contains("format version 2"), "the reason says why: {}", json(&v));
    assert!(r.refused >= 1, "{}", json(&r));
    assert!(r.destroyed.iter().all(|d| d.session.as_deref() != Some(h.id.as_str())), "{}", json(&r));
    assert_eq!(h.missing(9), Vec::<String>::new(), "the refused session lost something: {}", json(&r));
    assert_eq!(std::fs::read_to_string(&ledger).unwrap(), format!("{before}{newer}\n"), "the refused sweep wrote to the ledger");
    std::fs::write(&ledger, &before).unwrap();
    let (code, r, err) = sweep(&["--older-than", "0"]);
    h.reap();
    assert_swept(code, &r, &err, &[h.tag()]);
    assert_eq!(leftovers(&h), Vec::<String>::new(), "{}", json(&r));
}

/// `drums-sweep --report` names every object of a live session (made here, so what it must name is
/// known), takes no lock (it answers while a sweep's lock is held), and names none of them once the
/// session is swept.
#[test]
fn the_host_inventory_names_a_live_session_and_nothing_of_it_after_its_sweep() {
    require_root();
    let _l = session_lock();
    let mut h = Hand::new(9);
    let report = || {
        let mut c = Command::new(tool("drums-sweep")).arg("--report").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let t0 = Instant::now();
        while c.try_wait().unwrap().is_none() {
            if t0.elapsed() > Duration::from_secs(30) {
                let _ = c.kill();
                panic!("drums-sweep --report did not finish in 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = c.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        one::<drums::destroy::inventory::Inventory>(&text(&o.stdout))
    };
    let inv = {
        // A sweep's exclusive lock held meanwhile: the report does not wait for it.
        let _sweeping = drums::destroy::sweep::lock(true, true).unwrap();
        report()
    };
    let s = inv.sessions.iter().find(|s| s.id == h.id).unwrap_or_else(|| panic!("{} not listed: {}", h.id, json(&inv.sessions)));
    assert_eq!((&s.state_dir, s.ledger, s.phase.as_deref(), s.holder_alive), (&h.dir, true, Some("live"), Some(true)), "{}", json(s));
    // tmpfs, inner mount, dir, init, slot, link, 2 cgroups, image.
    assert_eq!(s.resources, 9, "{}", json(s));
    for m in [h.dir.join("tmpfs"), h.dir.join("tmpfs/merged")] {
        assert!(inv.mounts.contains(&m), "{} not in {:?}", m.display(), inv.mounts);
    }
    assert!(inv.links.contains(&h.link), "{} not in {:?}", h.link, inv.links);
    for c in &h.cgroups {
        assert!(inv.cgroups.contains(c), "{} not in {:?}", c.display(), inv.cgroups);
    }
    assert!(inv.slots.iter().any(|s| s.path == h.slot && s.session.as_deref() == Some(h.id.as_str())), "{}", json(&inv.slots));
    let ours: Vec<_> = inv.processes.iter().filter(|p| p.pidns == h.pidns).collect();
    assert!(ours.iter().any(|p| p.pid == h.init_pid && p.comm == "drums-init"), "{}", json(&ours));
    assert!(ours.len() >= 3, "the init and its two children: {}", json(&ours));
    assert!(ours.iter().all(|p| p.session_init == Some(h.init_pid)), "{}", json(&ours));
    // The cgroups the tests' inventory counts are the report's.
    assert!(inventory().cgroups.iter().any(|c| c.contains(&h.id)));

    let o = run("drums-sweep", &[], &h.record());
    h.reap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", text(&o.stderr));
    let inv = report();
    let named = |x: &str| x.contains(&h.id);
    assert!(!inv.sessions.iter().any(|s| s.id == h.id), "{}", json(&inv.sessions));
    assert!(!inv.mounts.iter().any(|m| named(&m.to_string_lossy())), "{:?}", inv.mounts);
    assert!(!inv.links.contains(&h.link), "{:?}", inv.links);
    assert!(!inv.cgroups.iter().any(|c| named(&c.to_string_lossy())), "{:?}", inv.cgroups);
    assert!(!inv.slots.iter().any(|s| s.path == h.slot), "{}", json(&inv.slots));
    assert!(!inv.processes.iter().any(|p| p.pid == h.init_pid && p.comm == "drums-init"), "{}", json(&inv.processes));
}
