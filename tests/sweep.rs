//! drums-sweep on real kernel objects: sessions built by hand (a ledger, tmpfs mounts, a veth pair, a PID
//! namespace, cgroup directories, a slot file, directories), each resource ledgered before it is created,
//! as the Drums tools do. Every test holds the session lock and cleans up even when it fails.

use drums::ledger::{Ledger, Resource};
use drums_tests::*;
use serde_json::Value;
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
}

fn link_name(id: &str) -> String {
    // Interface names are at most 15 bytes: "drums" + 8 of the id + "h".
    format!("drums{}h", &id[2..10])
}

impl Hand {
    /// `stages`: how far to go, in creation order (overlay, ns, net, cgroup, ...), so that a test can stop
    /// where a crashed tool would have.
    fn new(stages: usize) -> Hand {
        let id = drums::state::new_id('d');
        let dir = drums::state::session_dir(&id);
        let link = link_name(&id);
        let image = drums::state::checkpoint_root().join(format!("test-{id}"));
        let slot = drums::state::state_root().join("slots").join(format!("test-{id}"));
        let cgroups = ["pids", "memory"].iter().map(|c| PathBuf::from(format!("/sys/fs/cgroup/{c}/drums/{id}"))).collect();
        let mut h = Hand { id: id.clone(), dir: dir.clone(), link, cgroups, image, slot, unshare: None, init_pid: 0 };
        let l = Ledger::create(&dir, &id, drums::proc::me().unwrap(), None).unwrap();
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
        let child = Command::new("unshare")
            .args(["--pid", "--fork", "sh", "-c", "sleep 1000 & sleep 1000 & wait"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let up = child.id() as i32;
        h.unshare = Some(child);
        let init = wait_for(|| children(up).first().copied(), "the init under unshare");
        wait_for(|| (children(init).len() == 2).then_some(()), "the init's two children");
        let st = drums::proc::start_time(init).unwrap();
        h.init_pid = init;
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
        if self.init_pid > 0 && drums::proc::comm(self.init_pid) == "sh" {
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

fn reports(out: &[u8]) -> Vec<Value> {
    text(out).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
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
    if h.init_pid > 0 && drums::proc::state(h.init_pid).is_some_and(|s| s != 'Z') && drums::proc::comm(h.init_pid) == "sh" {
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
    assert_eq!(r["type"], "destroy");
    assert_eq!(r["session"], h.id.as_str());
    assert_eq!(r["left"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(r["state_dir_removed"], true, "{r}");
    // tmpfs, inner mount, dir, init, slot, link, 2 cgroups = 8 removed; the image is kept.
    assert_eq!(r["removed"].as_array().unwrap().len(), 8, "{r}");
    assert_eq!(r["kept"][0]["kind"], "image", "{r}");
    assert!(h.image.join("pages-1.img").exists(), "images are kept unless asked");
    assert_eq!(leftovers(&h), Vec::<String>::new());
    assert!(!Path::new(&format!("/sys/fs/cgroup/pids/drums/{}", h.id)).exists());

    let again = run("drums-sweep", &["--session", &h.id], "");
    assert_eq!(again.status.code(), Some(0), "a second destroy is not an error: {}", text(&again.stderr));
    assert_eq!(reports(&again.stdout)[0]["state_dir_removed"], true);
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
    let before = inventory();
    let o = run("drums-sweep", &["--dry-run"], &h.record());
    assert_eq!(o.status.code(), Some(1), "a dry run with something to remove exits 1: {}", text(&o.stderr));
    let r = &reports(&o.stdout)[0];
    assert_eq!(r["planned"].as_array().unwrap().len(), 9, "{r}");
    assert_eq!(inventory(), before, "a dry run changed the machine");
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
