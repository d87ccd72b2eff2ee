//! Drums on a Ray cluster (docs/ray.md), on real Ray, real sessions, real CRIU: pipelines/ray-rollouts.py
//! --address local starts a two-node Ray cluster on this machine (a head and a second node, each with
//! its own Ray temp directory, checkpoint root and Drums actor), makes the environment's checkpoint on the
//! head, copies it to the second node through Ray's object store, and runs OSWorld task e0df059f's
//! rollouts on sessions taken from both nodes. Then nothing of the run is left, and the cluster is gone.
//! The fault test SIGKILLs the second node's Drums actor while it holds taken sessions: the rollouts go
//! on on the head, and after the sweep nothing of the dead actor's sessions is left.

use drums_tests::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const RAY_DIR: &str = "/var/lib/drums/ray";

/// Ray as pipelines/setup.d/ray.sh installs it; a clear failure when it is not there.
fn require_ray() {
    assert!(
        Path::new(RAY_DIR).join("ray/__init__.py").exists() && Path::new(RAY_DIR).join(".drums-requirements").exists(),
        "Ray is not installed in {RAY_DIR}: run pipelines/setup.d/ray.sh (pipelines/setup.sh runs it)"
    );
}

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("drums-ray-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn spawn(out: &Path, args: &[&str]) -> Child {
    Command::new("python3")
        .arg(repo_root().join("pipelines/ray-rollouts.py"))
        .args(["--address", "local", "--out"])
        .arg(out)
        .args(args)
        .env("PATH", path_with_tools())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pipelines/ray-rollouts.py")
}

/// (exit code, records, stderr) of a finished run.
fn finish(child: Child) -> (Option<i32>, Vec<Value>, String) {
    let o = child.wait_with_output().unwrap();
    let recs = text(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    (o.status.code(), recs, text(&o.stderr))
}

fn of<'a>(recs: &'a [Value], t: &str) -> Vec<&'a Value> {
    recs.iter().filter(|r| r["type"] == t).collect()
}

/// Processes carrying a local cluster's marker (drums_ray.local): Ray's processes of that run.
fn ray_processes(tag: &str) -> Vec<String> {
    let key = format!("DRUMS_RAY_CLUSTER={tag}");
    let mut out = vec![];
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.parse::<u32>().is_err() {
            continue;
        }
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            if env.split(|&b| b == 0).any(|v| v == key.as_bytes()) {
                out.push(format!("{name} {}", std::fs::read_to_string(e.path().join("comm")).unwrap_or_default().trim()));
            }
        }
    }
    out
}

/// The cluster is stopped and its directories gone: no process of it, no Ray temp directory, no
/// checkpoint or mapped-files root of either node.
fn assert_cluster_gone(s: &Value) {
    let local = &s["local"];
    for (name, n) in local["nodes"].as_object().expect("summary.local.nodes") {
        for k in ["temp_dir", "checkpoint_dir", "mapped_dir"] {
            let p = n[k].as_str().unwrap();
            assert!(!Path::new(p).exists(), "node {name}'s {k} {p} is left");
        }
    }
    let tag = Path::new(local["nodes"]["head"]["checkpoint_dir"].as_str().unwrap()).ancestors().nth(2).unwrap().file_name().unwrap().to_string_lossy().into_owned();
    let left = ray_processes(&tag);
    assert!(left.is_empty(), "processes of the local cluster are left: {left:?}");
    assert_eq!(s["teardown"]["left_pids"], serde_json::json!([]), "{s}");
}

/// What the run left, among what is new since `before`: retried for a few seconds, because other
/// engineers' sessions come and go on this machine (their state directories, mounts and cgroups name
/// their own ids, so those are judged by this run's ids; links and processes by their namespaces).
fn assert_nothing_left(before: &Inventory, ours: &[String]) {
    let t0 = Instant::now();
    loop {
        let mut left = inventory().new_since(before);
        let mine = |p: &String| ours.iter().any(|id| p.contains(id.as_str()));
        left.state_dirs.retain(mine);
        left.mounts.retain(mine);
        left.cgroups.retain(mine);
        // A slot file names its session; a policy table is judged by the slot it is numbered after.
        left.slots.retain(mine);
        let our_slots: Vec<String> = left.slots.iter().filter_map(|s| s.split(' ').next()?.rsplit('/').next().map(str::to_string)).collect();
        left.nft_tables.retain(|t| t.rsplit('_').next().is_some_and(|n| our_slots.iter().any(|s| s == n)));
        // A link of a session that is not ours (someone else's, on a slot this run freed) is theirs.
        left.links.retain(|l| !claimed_by_another(l, ours));
        if left.is_empty() {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(15), "the run left {left:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Whether the ledger of a live session that is not one of `ours` names `link`.
fn claimed_by_another(link: &str, ours: &[String]) -> bool {
    let quoted = format!("\"{link}\"");
    std::fs::read_dir(drums::state::sessions_root()).into_iter().flatten().flatten().any(|e| {
        let id = e.file_name().to_string_lossy().into_owned();
        !ours.contains(&id) && std::fs::read_to_string(e.path().join("ledger.jsonl")).is_ok_and(|l| l.contains(&quoted))
    })
}

fn session_ids(recs: &[Value]) -> Vec<String> {
    recs.iter().filter_map(|r| r["session"].as_str().map(str::to_string)).collect()
}

#[test]
fn eight_rollouts_on_a_two_node_cluster() {
    require_root();
    require_ray();
    let _lock = session_lock();
    let before = inventory();
    let out = out_dir("eight");
    let (code, recs, stderr) = finish(spawn(&out, &["--rollouts", "8"]));
    let s = of(&recs, "ray_rollouts_summary").pop().cloned().unwrap_or_else(|| panic!("no summary\n{stderr}"));
    assert_eq!(code, Some(0), "{s}\n{stderr}");
    let rollouts = of(&recs, "ray_rollout");
    assert_eq!(rollouts.len(), 8, "{stderr}");
    for r in &rollouts {
        assert_eq!((r["valid"].as_bool(), r["score_before_action"].as_f64(), r["score"].as_f64()), (Some(true), Some(0.0), Some(1.0)), "{r}");
        assert_eq!((r["canary"].as_str(), r["fault"].clone()), (Some("clean"), Value::Null), "{r}");
        assert!(r["reset_s"].as_f64().unwrap() > 0.0 && r["take_ray_s"].as_f64().is_some(), "{r}");
        assert!(r["guest_url"].as_str().unwrap().starts_with("http://10.77.") && r["devtools_port"].as_u64().is_some(), "{r}");
    }
    let mut sessions = session_ids(&recs);
    sessions.sort();
    sessions.dedup();
    assert_eq!(sessions.len(), 8, "every rollout had a session of its own");
    // Both nodes served sessions; the checkpoint was made on the head and moved to the second node.
    assert_eq!(s["environment"]["node"], "head", "{s}");
    let per_node = s["per_node"].as_object().unwrap();
    assert!(per_node.get("head").and_then(Value::as_u64).unwrap_or(0) >= 1 && per_node.get("n2").and_then(Value::as_u64).unwrap_or(0) >= 1, "{s}");
    assert_eq!(per_node.values().map(|v| v.as_u64().unwrap()).sum::<u64>(), 8);
    let copy = &s["copies"][0];
    assert_eq!((copy["node"].as_str(), copy["via"].as_str()), (Some("n2"), Some("ray")), "{s}");
    assert!(copy["dir"].as_str().unwrap().starts_with(s["local"]["nodes"]["n2"]["checkpoint_dir"].as_str().unwrap()), "{s}");
    assert_eq!((s["valid"].as_u64(), s["score_1"].as_u64()), (Some(8), Some(8)), "{s}");
    assert!(s["throughput_per_min"].as_f64().unwrap() > 0.0 && s["reset_s"]["p95_s"].as_f64().is_some(), "{s}");
    assert_eq!(s["left_on_machine"], serde_json::json!([]), "{s}");
    assert_cluster_gone(&s);
    assert_nothing_left(&before, &sessions);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_killed_node_actor_loses_its_sessions_to_the_sweep_and_the_rollouts_go_on() {
    require_root();
    require_ray();
    let _lock = session_lock();
    let before = inventory();
    let out = out_dir("kill");
    // Each rollout holds its session 5 s between its begin and its finish: the window for the kill.
    let child = spawn(&out, &["--rollouts", "4", "--hold", "5"]);
    let held = out.join("held");
    let t0 = Instant::now();
    // Wait until the second node's actor holds a taken session, then SIGKILL that actor.
    let victims: Vec<Value> = loop {
        let on_n2: Vec<Value> = std::fs::read_dir(&held)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok()))
            .filter(|h| h["node"] == "n2")
            .collect();
        if !on_n2.is_empty() {
            break on_n2;
        }
        assert!(t0.elapsed() < Duration::from_secs(150), "no session was taken on node n2 in 150 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let pid = victims[0]["actor_pid"].as_i64().unwrap() as i32;
    assert_eq!(std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().starts_with("ray::"), true, "pid {pid} is the actor");
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "SIGKILL the n2 actor {pid}");
    let (code, recs, stderr) = finish(child);
    let s = of(&recs, "ray_rollouts_summary").pop().cloned().unwrap_or_else(|| panic!("no summary\n{stderr}"));
    assert_eq!(code, Some(0), "every rollout was in the end run, valid, with score 1\n{s}\n{stderr}");
    assert_eq!(s["dead_nodes"], serde_json::json!(["n2"]), "{s}");
    assert!(s["lost_to_dead_actor"].as_u64().unwrap() >= 1, "{s}");
    // The rollouts on the dead actor's sessions are invalid and were run again, on the head.
    let rollouts = of(&recs, "ray_rollout");
    let killed: Vec<&str> = victims.iter().map(|v| v["session"].as_str().unwrap()).collect();
    for r in &rollouts {
        if killed.contains(&r["session"].as_str().unwrap_or("")) {
            assert_eq!((r["valid"].as_bool(), r["actor_died"].as_bool()), (Some(false), Some(true)), "{r}");
        }
        if r["attempt"].as_u64().unwrap() > 1 {
            assert_eq!(r["node"], "head", "a rerun goes to the live node: {r}");
        }
    }
    let mut last = std::collections::BTreeMap::new();
    for r in &rollouts {
        last.insert(r["rollout"].as_u64().unwrap(), *r);
    }
    assert_eq!(last.len(), 4);
    assert!(last.values().all(|r| r["valid"] == true && r["score"] == 1.0), "{last:?}");
    // That node's sweep (ray-rollouts.py ran it for the dead node; once more here): nothing of the dead
    // actor's sessions is left, neither process, mount, link, cgroup nor state directory.
    let o = run("drums-sweep", &["--orphans"], "");
    assert!(o.status.code().is_some_and(|c| c == 0 || c == 1), "drums-sweep --orphans: {}", text(&o.stderr));
    for v in &victims {
        let id = v["session"].as_str().unwrap();
        assert!(!Path::new(v["state_dir"].as_str().unwrap()).exists(), "{id}: state directory left");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains(id), "{id}: a mount is left");
        for c in v["cgroups"].as_array().unwrap() {
            assert!(!Path::new(c.as_str().unwrap()).exists(), "{id}: cgroup {c} left");
        }
        let pidns = v["pidns"].as_u64().unwrap();
        let procs: Vec<String> = inventory().processes.into_iter().filter(|p| {
            use std::os::unix::fs::MetadataExt;
            let pid = p.split(' ').next().unwrap();
            std::fs::metadata(format!("/proc/{pid}/ns/pid")).is_ok_and(|m| m.ino() == pidns)
        }).collect();
        assert!(procs.is_empty(), "{id}: processes left {procs:?}");
        let link = v["host_if"].as_str().unwrap();
        assert!(!Path::new("/sys/class/net").join(link).exists() || claimed_by_another(link, &[id.to_string()]), "{id}: link {link} left");
    }
    assert_cluster_gone(&s);
    let mut ours = session_ids(&recs);
    ours.extend(killed.iter().map(|s| s.to_string()));
    assert_nothing_left(&before, &ours);
    let _ = std::fs::remove_dir_all(&out);
}

/// A checkpoint arriving on a node is refused, with every reason named and nothing left under the node's
/// roots, when the node's root image differs, when its kernel is another, or when a file does not match
/// the sender's manifest; the same checkpoint unaltered is installed, its record re-rooted, and restorable
/// (drums_ray.checkpoints, which both copy paths use, runs drums-ckpt export, import and check;
/// tests/ckpt_move.rs tests those tools themselves).
#[test]
fn a_checkpoint_that_cannot_be_restored_here_is_refused() {
    require_root();
    require_ray();
    let _lock = session_lock();
    let base = PathBuf::from(format!("/var/lib/drums/ray-test-{}", std::process::id()));
    let (src_ck, src_mp) = (base.join("a/checkpoints"), base.join("a/mapped"));
    struct Gone(PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _gone = Gone(base.clone());
    // Host ids: drums-ckpt's source.
    let o = Command::new(repo_root().join("pipelines/cold.sh")).env("PATH", path_with_tools()).env("DRUMS_OWNER", std::process::id().to_string()).env("DRUMS_OVERLAY_ARGS", "--host-ids").output().unwrap();
    assert!(o.status.success(), "cold.sh: {}", text(&o.stderr));
    let mut sessions = Sessions::default();
    sessions.add(&text(&o.stdout));
    let c = Command::new(tool("drums-ckpt"))
        .env("DRUMS_CHECKPOINT_DIR", &src_ck)
        .env("DRUMS_MAPPED_DIR", &src_mp)
        .stdin(std::fs::File::open({
            let p = base.join("cold.json");
            std::fs::create_dir_all(&base).unwrap();
            std::fs::write(&p, &o.stdout).unwrap();
            p
        }).unwrap())
        .output()
        .unwrap();
    assert!(c.status.success(), "drums-ckpt: {}", text(&c.stderr));
    sessions.0.clear(); // drums-ckpt destroyed the source
    let ck: drums::record::Checkpoint = decode(&text(&c.stdout));
    let script = r#"
import json, os, sys
sys.path.insert(0, sys.argv[1])
import drums_ray
from drums_ray import checkpoints as C
rec = json.load(open(sys.argv[2])); root, mroot = sys.argv[3], sys.argv[4]
src = dict(os.environ)
dst = dict(os.environ, DRUMS_CHECKPOINT_DIR=root, DRUMS_MAPPED_DIR=mroot)
b = C.pack(rec, src)
nl = b.index(b"\n")
def changed(change):
    h = json.loads(b[:nl]); change(h)
    return json.dumps(h).encode() + b[nl:]
out = {}
def attempt(name, data):
    try:
        C.install(data, dst); out[name] = None
    except C.Refused as e:
        out[name] = str(e)
attempt("image", changed(lambda h: h["record"]["image"].update(digest="sha256:" + "0" * 64)))
attempt("kernel", changed(lambda h: h["record"].update(kernel="5.10.0-elsewhere")))
attempt("manifest", changed(lambda h: h["manifest"].update({next(iter(h["manifest"])): [1, "0" * 64]})))
out["left"] = [n for r in (root, mroot) if os.path.isdir(r) for n in os.listdir(r)]
here = C.install(b, dst)
out["installed"] = here
out["why_not"] = C.why_not_restorable(here, dst)
print(json.dumps(out))
"#;
    let rec_file = src_ck.join(&ck.id).join("checkpoint.json");
    let (dst_ck, dst_mp) = (base.join("b/checkpoints"), base.join("b/mapped"));
    let p = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(repo_root().join("pipelines/ray"))
        .arg(&rec_file)
        .arg(&dst_ck)
        .arg(&dst_mp)
        .env("PATH", path_with_tools())
        .env("DRUMS_CHECKPOINT_DIR", &src_ck)
        .env("DRUMS_MAPPED_DIR", &src_mp)
        .output()
        .unwrap();
    assert!(p.status.success(), "{}", text(&p.stderr));
    let r: Value = serde_json::from_slice(&p.stdout).unwrap();
    assert!(r["image"].as_str().is_some_and(|m| m.contains("image") && m.contains("digest")), "{r}");
    assert!(r["kernel"].as_str().is_some_and(|m| m.contains("kernel here is") && m.contains("5.10.0-elsewhere")), "{r}");
    assert!(r["manifest"].as_str().is_some_and(|m| m.contains("differ from the sender's manifest")), "{r}");
    assert_eq!(r["left"], serde_json::json!([]), "a refusal leaves nothing under the node's roots: {r}");
    let id = ck.id.as_str();
    // What install returns is the checkpoint record it wrote on this node.
    let here: drums::record::Checkpoint = decode(&r["installed"].to_string());
    assert_eq!(here.dir, dst_ck.join(id), "{r}");
    if ck.mapped.is_some() {
        assert_eq!(here.mapped.as_ref().map(|m| m.dir.clone()), Some(dst_mp.join(id)), "{r}");
        assert_eq!(std::fs::read_to_string(dst_mp.join(id).join("checkpoint")).unwrap(), dst_ck.join(id).to_str().unwrap());
    }
    assert_eq!(r["why_not"], serde_json::json!([]), "the installed copy is restorable here: {r}");
}

/// The driver's API (tests/ray-api.py) on a local cluster of 2 slots a node: takes from the preferred node
/// until its count ceiling, the next one served by the other node; every taken session's guest answers;
/// taken sessions have user namespaces of their own unless taken with host_ids=True;
/// a snapshot of a session on the second node is an environment there only, and a take of it is served
/// there; with both nodes full a take fails naming each node's ceiling; nothing is left.
#[test]
fn take_goes_elsewhere_when_a_node_is_full_and_snapshot_makes_an_environment_on_its_node() {
    require_root();
    require_ray();
    let _lock = session_lock();
    let before = inventory();
    let o = Command::new("python3").arg(repo_root().join("tests/ray-api.py")).env("PATH", path_with_tools()).output().unwrap();
    assert!(o.status.success(), "tests/ray-api.py: {}", text(&o.stderr));
    let r: Value = serde_json::from_str(text(&o.stdout).lines().last().expect("a JSON line")).unwrap();
    assert_eq!(r["slots"], serde_json::json!({"head": 2, "n2": 2}), "{r}");
    let nodes: Vec<&str> = r["leases"].as_array().unwrap().iter().map(|l| l["node"].as_str().unwrap()).collect();
    assert_eq!(nodes, ["head", "head", "n2"], "the third take found the head full: {r}");
    assert!(r["leases"].as_array().unwrap().iter().all(|l| l["guest"] == true), "{r}");
    // Sessions taken by default run in user namespaces of their own; the one taken with host_ids=True (the
    // third, snapshot below) does not, and a snapshot of one in its own user namespace is refused.
    let own: Vec<bool> = r["leases"].as_array().unwrap().iter().map(|l| l["own_userns"].as_bool().unwrap()).collect();
    assert_eq!(own, [true, true, false], "{r}");
    assert!(r["snapshot_userns"].as_str().is_some_and(|e| e.contains("--host-ids")), "a snapshot of a session in its own user namespace is refused, naming --host-ids: {r}");
    assert_eq!(r["from_snapshot"]["own_userns"], true, "{r}");
    assert_eq!(r["copy"]["via"], "ray", "{r}");
    assert_eq!((r["snapshot"]["node"].as_str(), r["env2_on"].clone()), (Some("n2"), serde_json::json!(["n2"])), "{r}");
    assert_eq!(r["release"]["released"], true, "{r}");
    assert_eq!((r["from_snapshot"]["node"].as_str(), r["from_snapshot"]["guest"].as_bool()), (Some("n2"), Some(true)), "{r}");
    assert_eq!(r["from_snapshot"]["checkpoint"], r["snapshot"]["env"], "{r}");
    let full = r["full_everywhere"].as_str().expect("a take with every node full fails");
    assert!(full.contains("node head: count ceiling") && full.contains("node n2: count ceiling"), "{full}");
    assert_eq!((r["errors"].clone(), r["stop"]["left_pids"].clone()), (serde_json::json!([]), serde_json::json!([])), "{r}");
    let ours: Vec<String> = r["sessions"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect();
    assert_nothing_left(&before, &ours);
}

#[path = "egress_common.rs"]
mod egress;

/// Whether traffic from a session at `addr` behind the host link `host_if` goes into the stand-in
/// (tests/egress_common.rs) for every address a browsing rollout may use: (ok, what `ip route get` said).
fn routed_into_standin(addr: &str, host_if: &str) -> (bool, String) {
    let mut said = String::new();
    for dst in [egress::WEB, egress::DNS, "198.51.100.11", "10.0.0.10", "169.254.169.254"] {
        let o = Command::new("ip").args(["route", "get", dst, "from", addr, "iif", host_if]).output().unwrap();
        let r = text(&o.stdout);
        said.push_str(&r);
        if !r.contains(&format!("via {} dev {}", egress::GATEWAY, egress::UPLINK)) {
            return (false, format!("{dst}: {r}{}", text(&o.stderr)));
        }
    }
    (true, said)
}

/// One ray-rollouts.py run of tests/data/ray-fetch.json (the agent's step fetches http://web.example.org/
/// in the session) under `net`, the nodes reaching the stand-in by their DRUMS_UPLINK and DRUMS_NET_DNS.
/// While it runs, every session a rollout holds (its marker in --out/held, written before the task's
/// first step) is checked to route into the stand-in; a session that does not fails the test.
fn fetch_run(name: &str, net: &str, args: &[&str]) -> (Option<i32>, Vec<Value>, String, usize) {
    let out = out_dir(name);
    let uplink = format!("{}:{}", egress::UPLINK, egress::GATEWAY);
    let child = Command::new("python3")
        .arg(repo_root().join("pipelines/ray-rollouts.py"))
        .args(["--address", "local", "--out"])
        .arg(&out)
        .args(["--env", repo_root().join("tests/data/ray-fetch.json").to_str().unwrap(), "--net", net, "--slots", "2"])
        .args(args)
        .env("PATH", path_with_tools())
        .env_remove("DRUMS_NET")
        .env("DRUMS_UPLINK", &uplink)
        .env("DRUMS_NET_DNS", egress::DNS)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (done, seen) = (std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)), std::sync::Arc::new(std::sync::Mutex::new(vec![])));
    let watcher = {
        let (done, seen, held) = (done.clone(), seen.clone(), out.join("held"));
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                for e in std::fs::read_dir(&held).into_iter().flatten().flatten() {
                    let Ok(m) = std::fs::read_to_string(e.path()) else { continue };
                    let Ok(m) = serde_json::from_str::<Value>(&m) else { continue };
                    let id = m["session"].as_str().unwrap_or_default().to_string();
                    if seen.lock().unwrap().iter().any(|(s, _): &(String, _)| *s == id) {
                        continue;
                    }
                    let verdict = match (m["session_addr"].as_str(), m["host_if"].as_str(), m["net"].as_str()) {
                        (_, _, Some("none")) => (true, "policy none: nothing is routed out".to_string()),
                        (Some(a), Some(h), _) => routed_into_standin(a, h),
                        _ => (false, format!("a marker without the session's address: {m}")),
                    };
                    seen.lock().unwrap().push((id, verdict));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let (code, recs, stderr) = finish(child);
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    watcher.join().unwrap();
    let seen = seen.lock().unwrap().clone();
    for (id, (ok, said)) in &seen {
        assert!(ok, "session {id} of a {net} rollout was not routed into the stand-in: {said}");
    }
    let _ = std::fs::remove_dir_all(&out);
    (code, recs, stderr, seen.len())
}

/// A rollout's network policy (docs/ray.md, "Network policy"), against a stand-in internet
/// (tests/egress_common.rs): before anything is sent, a session made under the nodes' settings routes into
/// the stand-in; rollouts under allow:web.example.org, taken from pools filled under that policy, reach
/// the stand-in's page from inside their sessions (score 1, `net` in their records, the stand-in's log);
/// a rollout under none is refused (score 0, nothing more in the stand-in's log). Nothing is left.
#[test]
fn a_rollout_gets_the_network_policy_it_asks_for() {
    require_root();
    require_ray();
    let _lock = session_lock();
    let before = inventory();
    let standin = egress::StandIn::up();
    const ALLOW: &str = "allow:web.example.org";
    {
        // namespaces_with checks the routes of the session it makes (and sends nothing).
        let mut guard = Sessions(vec![]);
        let (_, s) = egress::namespaces_with(egress::net_args(ALLOW), &mut guard);
        assert_eq!(s.egress.as_ref().map(|e| e.policy.to_string()).as_deref(), Some(ALLOW));
    }
    let mut ours = vec![];

    let (code, recs, stderr, watched) = fetch_run("net-allow", ALLOW, &["--rollouts", "2", "--concurrency", "2", "--pool-depth", "1", "--hold", "2"]);
    let s = of(&recs, "ray_rollouts_summary").pop().cloned().unwrap_or_else(|| panic!("no summary\n{stderr}"));
    assert_eq!(code, Some(0), "{s}\n{stderr}");
    assert_eq!(s["net"], ALLOW, "{s}");
    let rollouts = of(&recs, "ray_rollout");
    assert_eq!(rollouts.len(), 2, "{stderr}");
    assert_eq!(watched, 2, "the route check saw {watched} of the 2 rollouts' sessions");
    for r in &rollouts {
        assert_eq!(r["net"], ALLOW, "{r}");
        assert_eq!((r["valid"].as_bool(), r["score_before_action"].as_f64(), r["score"].as_f64()), (Some(true), Some(0.0), Some(1.0)), "{r}");
    }
    assert!(s["take_kinds"]["pool"].as_u64().unwrap_or(0) >= 1, "no rollout took a sibling of the pool filled under {ALLOW}: {s}");
    assert!(standin.web_requests() >= 2, "the stand-in saw {} requests", standin.web_requests());
    assert_cluster_gone(&s);
    ours.extend(session_ids(&recs));

    let served = standin.web_requests();
    let (code, recs, stderr, _) = fetch_run("net-none", "none", &["--rollouts", "1", "--pool-depth", "0"]);
    let s = of(&recs, "ray_rollouts_summary").pop().cloned().unwrap_or_else(|| panic!("no summary\n{stderr}"));
    // Exit 1: the rollout is valid but does not score 1 (its fetch was refused).
    assert_eq!(code, Some(1), "{s}\n{stderr}");
    let r = of(&recs, "ray_rollout").pop().cloned().unwrap_or_else(|| panic!("no rollout\n{stderr}"));
    assert_eq!(r["net"], "none", "{r}");
    assert_eq!((r["valid"].as_bool(), r["fault"].clone(), r["score"].as_f64()), (Some(true), Value::Null, Some(0.0)), "{r}");
    assert_eq!(standin.web_requests(), served, "a rollout under none reached the stand-in");
    assert_cluster_gone(&s);
    ours.extend(session_ids(&recs));
    assert_nothing_left(&before, &ours);
}

/// The pids of every process of a local cluster (those carrying its marker).
fn cluster_pids(tag: &str) -> Vec<i32> {
    ray_processes(tag).iter().filter_map(|p| p.split(' ').next()?.parse().ok()).collect()
}

/// A driver killed with SIGKILL while its local cluster runs sessions leaves nothing running: each
/// node's `ray start` gets SIGTERM from its parent-death signal and stops its node (raylet and GCS gone
/// within 60 s); `python3 -m drums_ray reap-local` ends whatever of the cluster outlived that and removes
/// its temp directory and root; the dead actors' sessions are orphans, destroyed by the sweep.
#[test]
fn a_killed_driver_leaves_no_local_cluster() {
    require_root();
    require_ray();
    let _lock = session_lock();
    let before = inventory();
    let out = out_dir("driver");
    let mut child = spawn(&out, &["--rollouts", "2", "--hold", "120"]);
    let tag = child.id().to_string();
    let root = Path::new("/var/lib/drums/ray-local").join(&tag);
    let tmp = PathBuf::from(format!("/tmp/drums-ray-{tag}"));
    let held = out.join("held");
    let t0 = Instant::now();
    while std::fs::read_dir(&held).map(|d| d.count()).unwrap_or(0) == 0 {
        assert!(child.try_wait().unwrap().is_none(), "the driver ended before any session was taken");
        assert!(t0.elapsed() < Duration::from_secs(150), "no session was taken in 150 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let ours_before = cluster_pids(&tag);
    assert!(!ours_before.is_empty() && root.join("owner.json").exists() && tmp.exists(), "the cluster runs, with its owner file");
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
    let _ = child.wait();

    let core = |tag: &str| ray_processes(tag).into_iter().filter(|p| p.ends_with(" raylet") || p.ends_with(" gcs_server")).collect::<Vec<_>>();
    let t1 = Instant::now();
    while !core(&tag).is_empty() {
        assert!(t1.elapsed() < Duration::from_secs(60), "the nodes did not stop within 60 s of their driver's death: {:?}", core(&tag));
        std::thread::sleep(Duration::from_millis(500));
    }

    let o = Command::new("python3")
        .args(["-m", "drums_ray", "reap-local"])
        .env("PYTHONPATH", repo_root().join("pipelines/ray"))
        .output()
        .expect("python3 -m drums_ray reap-local");
    assert_eq!(o.status.code(), Some(0), "reap-local: {}{}", text(&o.stdout), text(&o.stderr));
    let reaped: Vec<Value> = text(&o.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(reaped.iter().any(|r| r["type"] == "ray_local_reaped" && r["tag"] == tag.as_str()), "our cluster was reaped: {reaped:?}");
    assert!(ray_processes(&tag).is_empty(), "processes of the cluster are left: {:?}", ray_processes(&tag));
    assert!(!root.exists() && !tmp.exists(), "the cluster's root {} or temp directory {} is left", root.display(), tmp.display());
    // Nor the dead actors' pool spools (named by their pid and start time).
    let pools: Vec<String> = std::fs::read_dir("/tmp/drums-ray-pools").into_iter().flatten().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    let left: Vec<&String> = pools.iter().filter(|n| n.split('-').next().and_then(|p| p.parse::<i32>().ok()).is_some_and(|p| ours_before.contains(&p))).collect();
    assert!(left.is_empty(), "pool directories of the dead actors are left: {left:?}");
    // Asked again: nothing of ours to reap.
    let o = Command::new("python3").args(["-m", "drums_ray", "reap-local"]).env("PYTHONPATH", repo_root().join("pipelines/ray")).output().unwrap();
    assert!(!text(&o.stdout).contains(&format!("\"tag\": \"{tag}\"")), "{}", text(&o.stdout));

    // The sessions the dead actors owned: orphans, destroyed by id (the cron sweep's grace would keep
    // them another 60 s).
    let report = run_ok("drums-sweep", &["--report"], "");
    let inv: Value = serde_json::from_str(report.trim()).unwrap();
    let ids: Vec<String> = inv["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["owner"]["pid"].as_i64().is_some_and(|p| ours_before.contains(&(p as i32))) && s["owner_alive"] == false)
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    if !ids.is_empty() {
        let args: Vec<&str> = ids.iter().flat_map(|i| ["--session", i.as_str()]).collect();
        let o = run("drums-sweep", &args, "");
        assert_eq!(o.status.code(), Some(0), "drums-sweep of the dead actors' sessions: {}", text(&o.stderr));
    }
    assert_nothing_left(&before, &ids);
    let _ = std::fs::remove_dir_all(&out);
}
