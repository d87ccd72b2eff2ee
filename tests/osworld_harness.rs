//! OSWorld's own harness, unchanged, on Drums sessions: `DesktopEnv(provider_name="drums")` after
//! `drums_osworld.register()` (pipelines/osworld/), with desktop-env and its import chain as
//! pipelines/setup.d/osworld-harness.sh installs them, runs task e0df059f read verbatim from the shared
//! OSWorld task files: reset gives a restored sibling of the checkpoint where the task scores 0, the
//! rename sent through env.step scores 1, a second reset gives a fresh sibling (the old one destroyed)
//! where it scores 0 again; close destroys it. A harness killed without close leaves its session to the
//! orphan sweep.

use drums_tests::*;
use drums::destroy::sweep::{Judged, SweepReport};
use drums::record::{Checkpoint, Session};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const TASK: &str = "examples/os/e0df059f-28a6-4169-924f-b9623e7184cc.json";

/// Removes a checkpoint directory when dropped (checkpoints outlive sessions).
struct RemoveOnDrop(PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = drums::ckpt::remove_checkpoint_dir(&self.0);
    }
}

fn harness_dir() -> PathBuf {
    let dir = PathBuf::from(std::env::var("DRUMS_OSWORLD_HARNESS").unwrap_or_else(|_| "/var/lib/drums/osworld-harness".into()));
    assert!(
        dir.join("desktop_env/desktop_env.py").exists() && dir.join(".drums-requirements").exists(),
        "OSWorld's harness is not installed in {}: run pipelines/setup.sh (pipelines/setup.d/osworld-harness.sh)",
        dir.display()
    );
    dir
}

/// A file of the shared OSWorld tasks (`../shared/osworld` beside the project, see its README; or under
/// `$DRUMS_SHARED`, for a checkout elsewhere, such as a git worktree).
fn shared_task(rel: &str) -> PathBuf {
    let shared = std::env::var_os("DRUMS_SHARED").map(PathBuf::from).unwrap_or_else(|| repo_root().parent().unwrap().join("shared"));
    let root = shared.join("osworld");
    let task = root.join(rel);
    assert!(task.exists(), "OSWorld's task files are not at {} (the project's shared/osworld)", root.display());
    task
}

/// A clean checkpoint of a cold session on the default image, its record in a file (what path_to_vm names).
fn checkpoint(tmp: &Path) -> (PathBuf, Checkpoint, RemoveOnDrop) {
    checkpoint_on(tmp, drums::image::DEFAULT_IMAGE)
}

/// The OSWorld image (pipelines/images/osworld.packages), which neither setup.sh nor the suite builds.
const OSWORLD_IMAGE: &str = "osworld";

/// A clean checkpoint of a cold session on the root image `image`.
fn checkpoint_on(tmp: &Path, image: &str) -> (PathBuf, Checkpoint, RemoveOnDrop) {
    let record = drums::image::images_root().join(image).join("image.json");
    let build = if image == OSWORLD_IMAGE { "pipelines/image.sh --name osworld --packages pipelines/images/osworld.packages" } else { "pipelines/setup.sh" };
    assert!(record.exists(), "no root image `{image}` ({}): build it with {build}", record.display());
    let o = Command::new(repo_root().join("pipelines/cold.sh"))
        .env("PATH", path_with_tools())
        .env("DRUMS_OWNER", std::process::id().to_string())
        .env("DRUMS_OVERLAY_ARGS", format!("--host-ids --image {image}"))
        .output()
        .unwrap();
    let cold = text(&o.stdout);
    let _guard = Sessions(vec![cold.clone()]);
    assert!(o.status.success(), "cold.sh: {}", text(&o.stderr));
    let line = run_ok("drums-ckpt", &["--clean"], &cold);
    let c: Checkpoint = decode(&line);
    let remove = RemoveOnDrop(c.dir.clone());
    let file = tmp.join("checkpoint.json");
    std::fs::write(&file, &line).unwrap();
    (file, c, remove)
}

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
fn temp_dir(tag: &str) -> TempDir {
    let d = std::env::temp_dir().join(format!("drums-osworld-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    TempDir(d)
}

fn python(script: &str, args: &[&str]) -> Command {
    let mut c = Command::new("/usr/bin/python3");
    c.args(["-W", "ignore", "-c", script])
        .args(args)
        .env("PATH", path_with_tools())
        .env("PYTHONPATH", format!("{}:{}", repo_root().join("pipelines/osworld").display(), harness_dir().display()));
    c
}

/// Everything the harness does below is OSWorld's code (DesktopEnv, its controllers, getter and metric);
/// the script calls it and reports what it saw.
const EPISODE: &str = r#"
import json, os, sys, urllib.request
import drums_osworld
drums_osworld.register()
from desktop_env.desktop_env import DesktopEnv

task_file, ckpt_file, cache = sys.argv[1:4]
task = json.load(open(task_file))
out = {"pid": os.getpid()}
rec = lambda: json.loads(env.provider.session)
env = DesktopEnv(provider_name="drums", path_to_vm=ckpt_file, action_space="pyautogui", headless=True,
                 require_a11y_tree=False, cache_dir=cache)
try:
    first = rec()
    out["first"] = first
    obs = env.reset(task_config=task)
    out["same_after_first_reset"] = rec()["id"] == first["id"]
    # The first screen: the windows X has (read through the session's guest) and the accessibility tree.
    req = urllib.request.Request(rec()["desktop"]["guest_url"].rstrip("/") + "/execute", headers={"Content-Type": "application/json"},
                                 data=json.dumps({"command": ["xwininfo", "-root", "-tree"]}).encode())
    out["windows_after_reset"] = json.loads(urllib.request.urlopen(req, timeout=30).read())["output"]
    out["tree_after_reset"] = env.controller.get_accessibility_tree() or ""
    out["screenshot_is_png"] = obs["screenshot"][:8] == b"\x89PNG\r\n\x1a\n"
    out["ip"] = env.vm_ip
    out["score_before"] = env.evaluate()
    env.step("import os; os.rename(os.path.expanduser('~/Desktop/todo_list_Jan_1'), "
             "os.path.expanduser('~/Desktop/todo_list_Jan_2'))", pause=0.5)
    out["score_after"] = env.evaluate()
    env.reset(task_config=task)
    second = rec()
    out["second"] = second
    out["first_gone"] = not os.path.exists(first["state_dir"])
    out["second_ip"] = env.vm_ip
    out["score_second"] = env.evaluate()
    out["takes"] = env.provider.takes
finally:
    env.close()
out["held_after_close"] = env.provider.session
print(json.dumps(out))
"#;

/// What EPISODE prints: the two sessions as the provider holds their records, and what the harness saw.
#[derive(Debug, Deserialize)]
struct Episode {
    pid: i32,
    first: Session,
    second: Session,
    same_after_first_reset: bool,
    /// `xwininfo -root -tree` in the session after the first reset.
    windows_after_reset: String,
    /// OSWorld's get_accessibility_tree() after the first reset.
    tree_after_reset: String,
    screenshot_is_png: bool,
    ip: String,
    score_before: f64,
    score_after: f64,
    first_gone: bool,
    second_ip: String,
    score_second: f64,
    takes: Vec<Take>,
    held_after_close: Option<String>,
}

/// One entry of the provider's `takes` (pipelines/osworld/drums_osworld/provider.py).
#[derive(Debug, Deserialize)]
struct Take {
    #[allow(dead_code)]
    session: String,
    checkpoint: String,
    /// `pool` or `restore`.
    source: String,
    #[allow(dead_code)]
    seconds: f64,
}

#[test]
fn osworld_desktop_env_runs_e0df059f_on_restored_siblings() {
    require_root();
    let task = shared_task(TASK);
    let _ = harness_dir();
    let _lock = session_lock();
    let tmp = temp_dir("episode");
    let (ckpt_file, ckpt, _remove) = checkpoint(&tmp.0);
    let cache = tmp.0.join("cache");
    let o = python(EPISODE, &[task.to_str().unwrap(), ckpt_file.to_str().unwrap(), cache.to_str().unwrap()]).output().unwrap();
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "the harness failed: {}\n{stdout}", text(&o.stderr));
    let v: Episode = decode(stdout.lines().last().unwrap_or(""));
    let (first, second) = (&v.first, &v.second);
    // Both sessions are siblings restored from the checkpoint, owned by the harness process.
    for s in [first, second] {
        assert_eq!(s.restore.as_ref().map(|r| r.checkpoint.as_str()), Some(ckpt.id.as_str()), "not a sibling of the checkpoint: {}", json(s));
        assert_eq!(s.owner.pid, v.pid, "the harness does not own its session: {}", json(s));
        assert!(s.reseed.is_some(), "the sibling was not reseeded: {}", json(s));
    }
    assert!(v.same_after_first_reset, "the first reset (a clean session) took another session");
    // The harness's first screen is the desktop, not Drums' readiness page: no window with its title on
    // the X server, nothing of it in the accessibility tree.
    let title = &first.desktop().unwrap().title;
    assert!(v.windows_after_reset.contains("Root window id"), "xwininfo read nothing: {}", v.windows_after_reset);
    assert!(!v.windows_after_reset.contains(&format!("\"{title}\":")), "a window titled {title} is on the screen after reset:\n{}", v.windows_after_reset);
    assert!(!v.tree_after_reset.trim().is_empty(), "no accessibility tree after reset");
    assert!(!v.tree_after_reset.contains(&format!("name=\"{title}\"")), "{title} is in the accessibility tree after reset");
    assert!(v.screenshot_is_png);
    let host = |s: &Session| s.desktop().unwrap().guest_url.as_deref().unwrap().trim_start_matches("http://").split(':').next().unwrap().to_string();
    assert_eq!(v.ip, host(first));
    assert_eq!(v.score_before, 0.0, "{v:?}");
    assert_eq!(v.score_after, 1.0, "the rename through env.step did not complete the task: {v:?}");
    assert_ne!(first.id, second.id, "the second reset did not give a fresh sibling");
    assert!(v.first_gone, "the old session was not destroyed by the revert");
    assert_eq!(v.second_ip, host(second), "DesktopEnv does not talk to the fresh sibling");
    assert_eq!(v.score_second, 0.0, "the fresh sibling is not fresh: {v:?}");
    assert_eq!(v.takes.len(), 2, "{v:?}");
    assert_eq!(v.held_after_close, None);
    for s in [first, second] {
        assert!(!s.state_dir.exists(), "close left {}", s.id);
    }
}

/// A harness killed without close (no atexit either): its session is an orphan, and the sweep removes it.
#[test]
fn a_killed_harness_leaves_its_session_to_the_orphan_sweep() {
    require_root();
    let _ = harness_dir();
    let _lock = session_lock();
    let tmp = temp_dir("orphan");
    let (ckpt_file, _ckpt, _remove) = checkpoint(&tmp.0);
    let script = r#"
import json, os, sys
import drums_osworld
drums_osworld.register()
from desktop_env.desktop_env import DesktopEnv
env = DesktopEnv(provider_name="drums", path_to_vm=sys.argv[1], require_a11y_tree=False, cache_dir=sys.argv[2])
print(env.provider.session, flush=True)
os.kill(os.getpid(), 9)
"#;
    let o = python(script, &[ckpt_file.to_str().unwrap(), tmp.0.join("cache").to_str().unwrap()]).output().unwrap();
    let line = text(&o.stdout);
    let _guard = Sessions(vec![line.clone()]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(o.status.signal(), Some(9), "the harness was to die by SIGKILL: {}", text(&o.stderr));
    assert!(!line.trim().is_empty(), "the harness printed no session: {}", text(&o.stderr));
    let s: Session = decode(&line);
    assert!(s.state_dir.exists(), "the session went with the harness: nothing to sweep");
    // The orphan sweep's plan (a dry run: other engineers' orphans on this machine are the cron's to
    // take) destroys it as an orphan; the guard then destroys it by its record.
    let sweep = Command::new(tool("drums-sweep")).args(["--orphans", "--dry-run", "--older-than", "0"]).env("PATH", path_with_tools()).output().unwrap();
    let report: SweepReport = decode(&text(&sweep.stdout));
    let id = s.id.as_str();
    let judged_orphan = report.sessions.iter().any(|v| v.session.as_deref() == Some(id) && v.verdict == Judged::Orphan);
    let planned = report.destroyed.iter().any(|d| d.session.as_deref() == Some(id) && d.dry_run && !d.planned.is_empty());
    assert!(judged_orphan && planned, "the orphan sweep does not plan to destroy the dead harness's session {id}: {}{}", json(&report), text(&sweep.stderr));
}

/// Drains a checkpoint's warm pool when dropped (its parked siblings are the filler's, not the test's).
struct DrainOnDrop(String);
impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let _ = Command::new(tool("drums-pool")).args(["drain", "--checkpoint", &self.0]).env("PATH", path_with_tools()).output();
    }
}

/// With a warm pool of the checkpoint filled, start_emulator takes its parked sibling; once the pool is
/// empty, the revert restores one. Both run in user namespaces of their own (the default of drums-pool
/// fill and of the provider's restores): each one's guest has a uid_map that is not the host's identity.
/// A harness under another network policy than the pool's (DRUMS_NET allow:..., the stand-in internet as
/// its uplink) does not get the pool's sibling: it is destroyed unused and one is restored under the
/// harness's policy.
#[test]
fn start_emulator_takes_from_the_warm_pool() {
    require_root();
    let _ = harness_dir();
    let _lock = session_lock();
    let tmp = temp_dir("pool");
    let (ckpt_file, ckpt, _remove) = checkpoint(&tmp.0);
    let id = ckpt.id.clone();
    let _drain = DrainOnDrop(id.clone());
    let fill = || {
        let fill = Command::new(tool("drums-pool"))
            .args(["fill", "--checkpoint", &id, "--depth", "1"])
            .env("PATH", path_with_tools())
            .env_remove("DRUMS_NET")
            .output()
            .unwrap();
        assert!(fill.status.success(), "drums-pool fill: {}", text(&fill.stderr));
    };
    fill();
    let script = r#"
import json, sys
import drums_osworld
drums_osworld.register()
from desktop_env.desktop_env import DesktopEnv
env = DesktopEnv(provider_name="drums", path_to_vm=sys.argv[1], require_a11y_tree=False, cache_dir=sys.argv[2])
maps = []
def uid_map():
    rec = json.loads(env.provider.session)
    pid = next(p["host_pid"] for p in rec["desktop"]["processes"] if p["role"] == "guest")
    maps.append(open(f"/proc/{pid}/uid_map").read().split())
try:
    policies = [(json.loads(env.provider.session).get("egress") or {}).get("policy")]
    uid_map()
    env.is_environment_used = True  # as after an episode: the next reset reverts
    env.reset()
    policies.append((json.loads(env.provider.session).get("egress") or {}).get("policy"))
    uid_map()
finally:
    env.close()
print(json.dumps({"takes": env.provider.takes, "refused": env.provider.pool_refused, "policies": policies, "maps": maps}))
"#;
    let run = |env: &[(&str, &str)]| -> (Vec<Take>, Value) {
        let mut c = python(script, &[ckpt_file.to_str().unwrap(), tmp.0.join("cache").to_str().unwrap()]);
        for k in ["DRUMS_NET", "DRUMS_UPLINK", "DRUMS_NET_DNS", "DRUMS_OSWORLD_PROXY"] {
            c.env_remove(k);
        }
        let o = c.envs(env.iter().copied()).output().unwrap();
        let out = text(&o.stdout);
        assert!(o.status.success(), "the harness failed: {}\n{out}", text(&o.stderr));
        let v: Value = decode(out.lines().last().unwrap_or(""));
        eprintln!("{v}");
        (serde_json::from_value(v["takes"].clone()).unwrap(), v)
    };
    let (takes, v) = run(&[]);
    assert_eq!(takes.len(), 2, "{takes:?}");
    assert_eq!(takes[0].source, "pool", "{takes:?}");
    assert_eq!(takes[1].source, "restore", "the pool held one sibling: {takes:?}");
    assert!(takes.iter().all(|t| t.checkpoint == ckpt.id), "{takes:?}");
    let maps: Vec<Vec<String>> = serde_json::from_value(v["maps"].clone()).unwrap();
    assert_eq!(maps.len(), 2, "{maps:?}");
    assert!(maps.iter().all(|m| m.len() == 3 && m[0] == "0" && m[1] != "0" && m[2] == "65536"), "the pool sibling and the restored one each map 0-65535 to a range of their own: {maps:?}");
    assert_eq!((v["refused"].clone(), v["policies"].clone()), (serde_json::json!([]), serde_json::json!([null, null])), "{v}");

    // The pool's sibling runs under none; a harness under an allow list restores its own. Its sessions
    // run no task: they send nothing, and their uplink is the stand-in's anyway.
    fill();
    let standin = egress::StandIn::up();
    let uplink = format!("{}:{}", egress::UPLINK, egress::GATEWAY);
    let (takes, v) = run(&[("DRUMS_NET", "allow:web.example.org"), ("DRUMS_UPLINK", uplink.as_str()), ("DRUMS_NET_DNS", egress::DNS)]);
    assert_eq!(takes.iter().map(|t| t.source.as_str()).collect::<Vec<_>>(), ["restore", "restore"], "{v}");
    assert_eq!(v["refused"], serde_json::json!([{"checkpoint": id, "policy": "none", "wanted": "allow:web.example.org"}]), "{v}");
    assert_eq!(v["policies"], serde_json::json!(["allow:web.example.org", "allow:web.example.org"]), "{v}");
    drop(standin);
}

/// A restored sibling through DesktopEnv: the task's config with `extra` steps appended, then `action`
/// (pyautogui/Python, "" for none) through env.step, then OSWorld's get_accessibility_tree() until every
/// `wanted` string is in it (60 s at most), and /terminal's text (OSWorld's get_terminal_output).
const A11Y_EPISODE: &str = r#"
import json, sys, time
import drums_osworld
drums_osworld.register()
from desktop_env.desktop_env import DesktopEnv
task_file, ckpt_file, cache, extra, action, wanted = sys.argv[1:7]
task = json.load(open(task_file))
task["config"] = task["config"] + json.loads(extra)
env = DesktopEnv(provider_name="drums", path_to_vm=ckpt_file, require_a11y_tree=False, cache_dir=cache)
out = {}
try:
    env.reset(task_config=task)
    out["session"] = json.loads(env.provider.session)
    if action:
        env.step(action, pause=0.5)
    deadline, tree = time.monotonic() + 60, ""
    while time.monotonic() < deadline:
        tree = env.controller.get_accessibility_tree() or ""
        if all(w in tree for w in json.loads(wanted)):
            break
        time.sleep(1)
    out["tree"] = tree
    out["terminal"] = env.controller.get_terminal_output()
finally:
    env.close()
print(json.dumps(out))
"#;

/// What A11Y_EPISODE prints.
#[derive(Debug, Deserialize)]
struct A11yEpisode {
    session: Session,
    tree: Option<String>,
    terminal: Option<String>,
}

/// Runs A11Y_EPISODE from the shared task e0df059f on a checkpoint of `image`; asserts a restored sibling
/// and every `wanted` string in its tree, and returns what the episode saw.
fn a11y_episode(image: &str, tag: &str, extra: Value, action: &str, wanted: &[&str]) -> A11yEpisode {
    require_root();
    let task = shared_task(TASK);
    let _ = harness_dir();
    let _lock = session_lock();
    let tmp = temp_dir(tag);
    let (ckpt_file, _ckpt, _remove) = checkpoint_on(&tmp.0, image);
    let (cache, extra, wanted_json) = (tmp.0.join("cache"), extra.to_string(), serde_json::to_string(wanted).unwrap());
    let args = [task.to_str().unwrap(), ckpt_file.to_str().unwrap(), cache.to_str().unwrap(), &extra, action, &wanted_json];
    let o = python(A11Y_EPISODE, &args).output().unwrap();
    let out = text(&o.stdout);
    assert!(o.status.success(), "the harness failed: {}\n{out}", text(&o.stderr));
    let v: A11yEpisode = decode(out.lines().last().unwrap_or(""));
    assert!(v.session.restore.is_some(), "not a restored sibling: {}", json(&v.session));
    let tree = v.tree.as_deref().unwrap_or_default();
    let named: Vec<&str> = tree
        .split('<')
        .filter(|t| ["application name=", "frame name=", "page-tab name=", "document-web name="].iter().any(|k| t.starts_with(k)))
        .map(|t| t.split(" st:").next().unwrap_or(t))
        .collect();
    for w in wanted {
        assert!(tree.contains(w), "{w} is not in /accessibility after 60 s; its applications, frames, tabs and pages: {named:?}");
    }
    v
}

/// An application a task's config launches (a `launch` step, as the chrome tasks start google-chrome)
/// exposes itself to the session's AT-SPI bus: OSWorld's controller reads its window and page from
/// /accessibility of a restored sibling, beside the desktop's own browser.
#[test]
fn an_application_a_task_launches_shows_in_the_accessibility_tree_of_a_restored_sibling() {
    let launch = serde_json::json!([{"type": "launch", "parameters": {"command": [
        "google-chrome", "--no-first-run", "--no-default-browser-check",
        "data:text/html,<title>task-app</title><h1>launched by the task</h1>"]}}]);
    // The launched browser's window (titled by its page), its tab (whose name Chromium may follow with
    // " - Memory usage - N MB") and its page; the desktop's own browser, which showed the readiness page,
    // was closed before the harness had the session (the provider), so only the task's is there.
    let wanted = ["<frame name=\"task-app - Chromium\"", "<page-tab name=\"task-app", "<document-web name=\"task-app\""];
    let v = a11y_episode(drums::image::DEFAULT_IMAGE, "a11y", launch, "", &wanted);
    assert!(!v.tree.unwrap_or_default().contains("<frame name=\"drums-ready\""), "the readiness page is still in the tree");
}

/// On the OSWorld image, gedit launched by a task's `launch` step (a GTK application, as the os and
/// multi_apps tasks open files with it) shows its window in /accessibility of a restored sibling. Needs
/// the OSWorld image, which the suite does not build; run by hand (docs/osworld.md):
/// cargo test --release -p drums-tests --test osworld_harness -- --ignored --test-threads=1
#[test]
#[ignore = "needs the OSWorld image (pipelines/image.sh --name osworld ...), which the suite does not build"]
fn gedit_a_task_launches_shows_in_the_accessibility_tree_on_the_osworld_image() {
    let launch = serde_json::json!([{"type": "launch", "parameters": {"command": ["gedit", "/home/user/Desktop/drums-notes.txt"]}}]);
    a11y_episode(OSWORLD_IMAGE, "gedit", launch, "", &["<application name=\"gedit\"", "<frame name=\"drums-notes.txt"]);
}

/// On the OSWorld image, GIMP 2.10 (GTK 2) launched by a task's `launch` step shows its application, its
/// window and its menus in /accessibility of a restored sibling: GTK 2 loads GAIL and the AT-SPI bridge
/// only when GTK_MODULES names them (drums-desktop(1)) and the image has them (libgail-common,
/// libatk-adaptor). Without either, GIMP is not in the tree at all. Run by hand (docs/osworld.md).
#[test]
#[ignore = "needs the OSWorld image (pipelines/image.sh --name osworld ...), which the suite does not build"]
fn gimp_a_task_launches_shows_in_the_accessibility_tree_on_the_osworld_image() {
    let launch = serde_json::json!([{"type": "launch", "parameters": {"command": ["gimp"]}}]);
    a11y_episode(OSWORLD_IMAGE, "gimp", launch, "", &["<application name=\"gimp\"", "<frame name=\"GNU Image Manipulation Program\"", "<menu name=\"File\""]);
}

/// On the OSWorld image, Ctrl+Alt+T sent by the agent (pyautogui through env.step) opens gnome-terminal
/// (openbox's key binding in the desktop user's rc.xml, pipelines/image.sh): its window shows in
/// /accessibility of a restored sibling, and /terminal reads its prompt.
#[test]
#[ignore = "needs the OSWorld image (pipelines/image.sh --name osworld ...), which the suite does not build"]
fn ctrl_alt_t_opens_a_terminal_on_the_osworld_image() {
    let v = a11y_episode(OSWORLD_IMAGE, "terminal", serde_json::json!([]), "import pyautogui; pyautogui.hotkey('ctrl', 'alt', 't')", &["<application name=\"gnome-terminal-server\"", "<frame name=\"user@"]);
    let terminal = v.terminal.as_deref().unwrap_or_default();
    assert!(terminal.contains("user@"), "/terminal does not read the terminal's prompt: {:?}", v.terminal);
}

/// On the OSWorld image, the vlc task 215dfd39 verbatim: its setup launches VLC, whose web interface
/// answers at the session's address on the vlc_port get_ip_address gives (8080) with OSWorld's password
/// (OSWorld's get_vlc_playing_info), and the task evaluates without error to 0 before any action (its
/// getter reads the vlcrc pipelines/image.sh puts in the desktop user's home).
#[test]
#[ignore = "needs the OSWorld image (pipelines/image.sh --name osworld ...), which the suite does not build"]
fn vlc_serves_its_web_interface_on_8080_on_the_osworld_image() {
    require_root();
    let task = shared_task("examples/vlc/215dfd39-f493-4bc3-a027-8a97d72c61bf.json");
    let _ = harness_dir();
    let _lock = session_lock();
    let tmp = temp_dir("vlc");
    let (ckpt_file, _ckpt, _remove) = checkpoint_on(&tmp.0, OSWORLD_IMAGE);
    let script = r#"
import json, os, sys, time
import drums_osworld
drums_osworld.register()
from desktop_env.desktop_env import DesktopEnv
from desktop_env.evaluators.getters.vlc import get_vlc_playing_info, get_vlc_config
task = json.load(open(sys.argv[1]))
env = DesktopEnv(provider_name="drums", path_to_vm=sys.argv[2], require_a11y_tree=False, cache_dir=sys.argv[3])
out = {}
try:
    env.reset(task_config=task)
    out["session"] = json.loads(env.provider.session)
    out["vlc_port"] = env.vlc_port
    deadline, status = time.monotonic() + 60, None
    while time.monotonic() < deadline and status is None:
        try:
            status = get_vlc_playing_info(env, {"dest": "status.xml"})
        except Exception as e:
            out["status_error"] = repr(e)
            time.sleep(1)
    out["status"] = open(status).read() if status else None
    out["vlcrc"] = open(get_vlc_config(env, {"dest": "vlcrc"})).read()
    out["score"] = env.evaluate()
finally:
    env.close()
print(json.dumps(out))
"#;
    let o = python(script, &[task.to_str().unwrap(), ckpt_file.to_str().unwrap(), tmp.0.join("cache").to_str().unwrap()]).output().unwrap();
    let out = text(&o.stdout);
    assert!(o.status.success(), "the harness failed: {}\n{out}", text(&o.stderr));
    /// What the script prints.
    #[derive(Debug, Deserialize)]
    struct VlcEpisode {
        session: Session,
        vlc_port: u16,
        status: Option<String>,
        #[allow(dead_code)]
        status_error: Option<String>,
        vlcrc: String,
        score: f64,
    }
    let v: VlcEpisode = decode(out.lines().last().unwrap_or(""));
    assert!(v.session.restore.is_some(), "not a restored sibling: {}", json(&v.session));
    assert_eq!(v.vlc_port, 8080, "{v:?}");
    assert!(v.status.as_deref().is_some_and(|s| s.contains("<root>")), "VLC's status.xml did not answer at the session's address on 8080 within 60 s: {v:?}");
    assert!(v.vlcrc.contains("extraintf=http"), "{v:?}");
    assert_eq!(v.score, 0.0, "{v:?}");
}

/// OSWorld's DesktopEnv with the Drums provider and DRUMS_OSWORLD_VNC=view: the vnc_port it reports is
/// where a VNC client (tests/rfb_client.rs) gets the session's screen, as its guest's /screenshot shows it.
/// Reference solutions of four kinds (pipelines/osworld/solutions/): a terminal command (os/28cc3b7e, through
/// Ctrl+Alt+T and PulseAudio), a control found in Chromium's accessibility tree (chrome/030eeff7), one in
/// VLC's Qt preferences (vlc/f3977615) and an infeasible task answered with FAIL (os/b3d4a89c).
const SOLVED: [&str; 4] = [
    "examples/os/28cc3b7e-b194-4bc9-8353-d04c0f4d56d2.json",
    "examples/chrome/030eeff7-b492-4218-b312-701ec99ee0cc.json",
    "examples/vlc/f3977615-2b45-4ac5-8bba-80c17dbe2a37.json",
    "examples/os/b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa.json",
];

/// The osworld_task records of `osworld-run.py --agent AGENT` over `tasks` (each on a fresh restored sibling).
fn run_tasks(agent: &str, ckpt_file: &Path, tasks: &[PathBuf], cache: &Path) -> Vec<Value> {
    let o = Command::new(repo_root().join("pipelines/osworld-run.py"))
        .args(["--agent", agent, "--checkpoint", ckpt_file.to_str().unwrap(), "--cache", cache.to_str().unwrap()])
        .args(tasks)
        .env("PATH", path_with_tools())
        .env("PYTHONPATH", format!("{}:{}", repo_root().join("pipelines/osworld").display(), harness_dir().display()))
        .output()
        .unwrap();
    let out = text(&o.stdout);
    let records: Vec<Value> = out.lines().map(|l| decode::<Value>(l)).filter(|r| r["type"] == "osworld_task").collect();
    assert_eq!(records.len(), tasks.len(), "osworld-run.py --agent {agent} gave {} task records: {out}\n{}", records.len(), text(&o.stderr));
    records
}

/// The scripted agent solves them end to end through DesktopEnv (score 1), and the same tasks score 0 when
/// no agent acts: the solutions do the work, not the setup.
#[test]
#[ignore = "needs the OSWorld image (pipelines/image.sh --name osworld ...), which the suite does not build"]
fn reference_solutions_score_1_and_no_agent_scores_0_on_the_osworld_image() {
    require_root();
    let tasks: Vec<PathBuf> = SOLVED.iter().map(|t| shared_task(t)).collect();
    let _ = harness_dir();
    let _lock = session_lock();
    let tmp = temp_dir("solutions");
    let (ckpt_file, _ckpt, _remove) = checkpoint_on(&tmp.0, OSWORLD_IMAGE);
    for (agent, want) in [("scripted", 1.0), ("none", 0.0)] {
        for r in run_tasks(agent, &ckpt_file, &tasks, &tmp.0.join("cache")) {
            assert_eq!(r["score"].as_f64(), Some(want), "agent {agent}, task {}/{}: {}", r["domain"], r["id"], json(&r));
            if agent == "scripted" {
                assert!(r["solution"].is_string() && r["agent_error"].is_null(), "the solution did not run to its end: {}", json(&r));
            }
        }
    }
}

#[test]
fn desktop_env_reports_a_vnc_port_where_a_vnc_client_gets_the_screen() {
    require_root();
    let _ = harness_dir();
    let _lock = session_lock();
    let tmp = temp_dir("vnc");
    let (ckpt_file, _ckpt, _remove) = checkpoint(&tmp.0);
    let script = r#"
import json, sys
import drums_osworld
drums_osworld.register()
from desktop_env.desktop_env import DesktopEnv
env = DesktopEnv(provider_name="drums", path_to_vm=sys.argv[1], require_a11y_tree=False, cache_dir=sys.argv[2])
try:
    print(json.dumps({"session": env.provider.session, "ip": env.vm_ip, "vnc_port": env.vnc_port}), flush=True)
    sys.stdin.read()
finally:
    env.close()
"#;
    let mut child = python(script, &[ckpt_file.to_str().unwrap(), tmp.0.join("cache").to_str().unwrap()])
        .env("DRUMS_OSWORLD_VNC", "view")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("the harness printed {line:?}: {e}"));
    let _guard = Sessions(vec![v["session"].as_str().unwrap().to_string()]);
    let s: Session = decode(v["session"].as_str().unwrap());
    assert_eq!(v["vnc_port"].as_u64(), Some(drums::view::VNC_PORT as u64), "{v}");
    let screen = drums_tests::rfb::rfb_screen(&format!("{}:{}", v["ip"].as_str().unwrap(), v["vnc_port"]));
    let d = drums_tests::rfb::differing(&screen, &drums_tests::rfb::guest_screen(&s), 16);
    assert!(d <= 0.005, "the screen through DesktopEnv's vnc_port differs from the guest's screenshot in {:.3} % of pixels", d * 100.0);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "the harness failed");
}

/// OSWorld tasks' `"proxy": true` under the Drums provider (docs/osworld.md, "Tasks that ask for a
/// proxy"), against the stand-in internet (tests/egress_common.rs) and its proxy box: the harness's
/// sessions under policy internet reach the stand-in; a proxy task fails before it starts when the operator
/// named no proxy ($DRUMS_OSWORLD_PROXY); with one named, the task's session gets it and the `google-chrome`
/// its setup launches loads the page through it (the proxy's log shows the request); the next task, without
/// `"proxy"`, runs on a fresh sibling without it. Under the default policy none the harness's session
/// reaches nothing, and a proxy task fails before it starts.
const PROXY_EPISODE: &str = r#"
import json, os, sys
import drums_osworld
drums_osworld.register()
from desktop_env.desktop_env import DesktopEnv
from drums_osworld.provider import DrumsError

ckpt_file, cache = sys.argv[1:3]
rec = lambda: json.loads(env.provider.session)
def say(k, v):
    print(json.dumps({"step": k, "value": v}), flush=True)
    sys.stdin.readline()  # the test looks (and checks the routes before anything is sent)
# A task as OSWorld's files write one (an evaluator that is never run: the test looks at the network).
def task(i, proxy, url):
    return {"id": i, "instruction": "open the page", "proxy": proxy, "evaluator": {"func": "infeasible"},
            "config": [{"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337", url]}}]}
env = DesktopEnv(provider_name="drums", path_to_vm=ckpt_file, action_space="pyautogui", headless=True,
                 require_a11y_tree=False, cache_dir=cache)
try:
    say("taken", rec())
    named = os.environ.pop("DRUMS_OSWORLD_PROXY", None)
    try:
        env.reset(task_config=task("unnamed", True, "http://web.example.org/?unnamed"))
        say("unnamed", "no error")
    except DrumsError as e:
        say("unnamed", str(e))
    if named:
        os.environ["DRUMS_OSWORLD_PROXY"] = named
        env.reset(task_config=task("proxied", True, "http://web.example.org/?task"))
        say("proxied", rec())
        env.is_environment_used = True
        env.reset(task_config={"id": "plain", "instruction": "nothing", "evaluator": {"func": "infeasible"}, "config": []})
        say("plain", rec())
    else:
        os.environ["DRUMS_OSWORLD_PROXY"] = sys.argv[3]
        try:
            env.reset(task_config=task("under-none", True, "http://web.example.org/?none"))
            say("under_none", "no error")
        except DrumsError as e:
            say("under_none", str(e))
finally:
    env.close()
"#;

#[path = "egress_common.rs"]
mod egress;

/// Runs PROXY_EPISODE with `env`, answering each step `look` saw.
fn proxy_episode(ckpt_file: &Path, cache: &Path, env: &[(&str, &str)], look: impl FnMut(&str, &Value)) {
    stepped_episode(PROXY_EPISODE, &[ckpt_file.to_str().unwrap(), cache.to_str().unwrap(), egress::PROXY], env, look)
}

/// Runs a harness script that reports steps (`{"step", "value"}` lines) and waits for a line on its stdin
/// after each, with only `env` of the network variables: `look` sees each step once the routes of a
/// session record it carries are checked (before the harness goes on to send anything).
fn stepped_episode(script: &str, args: &[&str], env: &[(&str, &str)], mut look: impl FnMut(&str, &Value)) {
    use std::io::{BufRead, Write};
    let mut c = python(script, args);
    for k in ["DRUMS_NET", "DRUMS_UPLINK", "DRUMS_NET_DNS", "DRUMS_NET_EXCEPT", "DRUMS_NET_PROXY", "DRUMS_NET_RATE", "DRUMS_OSWORLD_PROXY", "DRUMS_OSWORLD_URL_MAP"] {
        c.env_remove(k);
    }
    c.envs(env.iter().copied()).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = vec![];
    for line in stdout.lines() {
        let line = line.unwrap();
        let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
        let Some(step) = v["step"].as_str() else { continue };
        seen.push(step.to_string());
        if v["value"]["type"] == "session" {
            let s: Session = serde_json::from_value(v["value"].clone()).unwrap();
            if s.egress.is_some() {
                egress::check_routes(&s);
            }
        }
        look(step, &v["value"]);
        let _ = stdin.write_all(b"\n");
    }
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "the harness failed after {seen:?}: {}", text(&o.stderr));
}

#[test]
fn osworld_proxy_tasks_get_the_operators_proxy() {
    require_root();
    let _ = harness_dir();
    let _lock = session_lock();
    let standin = egress::StandIn::up();
    let tmp = temp_dir("proxy");
    let (ckpt_file, _ckpt, _remove) = checkpoint(&tmp.0);
    let cache = tmp.0.join("cache");
    let uplink = format!("{}:{}", egress::UPLINK, egress::GATEWAY);
    let through = |what: &str| standin.proxy_requests().iter().filter(|l| l.ends_with(&format!(" GET http://web.example.org/?{what}"))).count();
    let mut steps = vec![];
    let env = [("DRUMS_NET", "internet"), ("DRUMS_UPLINK", uplink.as_str()), ("DRUMS_NET_DNS", egress::DNS), ("DRUMS_OSWORLD_PROXY", egress::PROXY)];
    proxy_episode(&ckpt_file, &cache, &env, |step, v| {
        steps.push(step.to_string());
        match step {
            "taken" => {
                let s: Session = serde_json::from_value(v.clone()).unwrap();
                assert_eq!(s.egress.as_ref().map(|e| e.policy.to_string()).as_deref(), Some("internet"), "{}", json(&s));
                assert_eq!(s.egress.as_ref().unwrap().proxy, None);
                egress::loads(&s, "http://web.example.org/?direct");
                assert_eq!(through("direct"), 0);
            }
            "unnamed" => {
                let m = v.as_str().unwrap();
                assert!(m.contains("DRUMS_OSWORLD_PROXY") && m.contains("\"proxy\": true"), "{m}");
                assert_eq!(through("unnamed"), 0, "the task ran: {:?}", standin.proxy_requests());
            }
            "proxied" => {
                let s: Session = serde_json::from_value(v.clone()).unwrap();
                assert_eq!(s.egress.as_ref().unwrap().proxy.as_deref(), Some(egress::PROXY), "{}", json(&s));
                // The task's google-chrome loads its page through the proxy.
                let t0 = std::time::Instant::now();
                while through("task") == 0 {
                    assert!(t0.elapsed() < std::time::Duration::from_secs(60), "the task's google-chrome did not go through the proxy: {:?}", standin.proxy_requests());
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                egress::loads(&s, "http://web.example.org/?exec");
                assert_eq!(through("exec"), 1, "{:?}", standin.proxy_requests());
            }
            "plain" => {
                let s: Session = serde_json::from_value(v.clone()).unwrap();
                assert_eq!(s.egress.as_ref().unwrap().proxy, None, "{}", json(&s));
                egress::loads(&s, "http://web.example.org/?plain");
                assert_eq!(through("plain"), 0, "{:?}", standin.proxy_requests());
            }
            other => panic!("unexpected step {other}: {v}"),
        }
    });
    assert_eq!(steps, ["taken", "unnamed", "proxied", "plain"]);

    // The default policy none: the harness's session reaches nothing, and a proxy task fails at once.
    let mut steps = vec![];
    let env = [("DRUMS_UPLINK", uplink.as_str()), ("DRUMS_NET_DNS", egress::DNS)];
    proxy_episode(&ckpt_file, &cache, &env, |step, v| {
        steps.push(step.to_string());
        match step {
            "taken" => {
                let s: Session = serde_json::from_value(v.clone()).unwrap();
                assert!(s.egress.is_none(), "{}", json(&s));
                egress::refused(&s, &format!("http://{}/", egress::WEB));
                egress::refused(&s, "http://web.example.org/");
            }
            "unnamed" => assert!(v.as_str().unwrap().contains("DRUMS_OSWORLD_PROXY"), "{v}"),
            "under_none" => {
                let m = v.as_str().unwrap();
                assert!(m.contains("network policy none"), "{m}");
                assert_eq!(through("none"), 0, "{:?}", standin.proxy_requests());
            }
            other => panic!("unexpected step {other}: {v}"),
        }
    });
    assert_eq!(steps, ["taken", "unnamed", "under_none"]);
}

/// An OSWorld chrome task whose setup opens web pages, run on a stand-in internet (tests/egress_common.rs)
/// through the provider's URL map ($DRUMS_OSWORLD_URL_MAP, docs/osworld.md "Tasks on a stand-in
/// internet"). chrome/06fe7178 ("bring back the last tab I shut down") is read verbatim from the shared
/// task files: its setup starts `google-chrome`, forwards DevTools with socat, opens three sites and closes
/// one; its evaluator wants all three open; it sets `"proxy": true`. Its three sites are mapped onto three
/// names of the stand-in. In a restored sibling under policy internet, with the stand-in's proxy box as the
/// operator's proxy: the two tabs the setup leaves show the stand-in's page, loaded through the proxy; the
/// evaluator scores 0; the task's reference solution (a click on the address bar, then Ctrl+Shift+T, sent
/// through env.step) brings the third back and it scores 1. The
/// harness on the host resolves no name meanwhile (tldextract, which the evaluator uses, reads its bundled
/// suffix list instead of fetching one).
const URL_MAP_EPISODE: &str = r#"
import importlib.util, ipaddress, json, os, socket, sys, time
names = []
resolve = socket.getaddrinfo
def watched(host, *a, **k):
    try:
        ipaddress.ip_address(host)
    except ValueError:
        names.append(host)  # a name the host would look up with its own resolver
    return resolve(host, *a, **k)
socket.getaddrinfo = watched
import drums_osworld
drums_osworld.register()
from desktop_env.desktop_env import DesktopEnv
from desktop_env.evaluators.getters import get_open_tabs_info
import tldextract

task_file, ckpt_file, cache, solutions = sys.argv[1:5]
task = json.load(open(task_file))
rec = lambda: json.loads(env.provider.session)
def say(k, v):
    print(json.dumps({"step": k, "value": v}), flush=True)
    sys.stdin.readline()  # the test looks (and checks the routes before anything is sent)
def tabs():
    return sorted((t["url"], t["title"]) for t in get_open_tabs_info(env, {}) or [])
def score_until(want, seconds):
    t0 = time.monotonic()
    while True:
        s = env.evaluate()
        if s == want or time.monotonic() - t0 > seconds:
            return s
        time.sleep(2)
env = DesktopEnv(provider_name="drums", path_to_vm=ckpt_file, action_space="pyautogui", headless=True,
                 require_a11y_tree=False, cache_dir=cache)
try:
    say("taken", rec())
    env.reset(task_config=task)
    say("set_up", {"session": rec(), "tabs": tabs()})
    say("score_before", env.evaluate())
    # The agent's action, the task's reference solution (pipelines/osworld/solutions/chrome/06fe7178.py):
    # a click on the browser's address bar, then Ctrl+Shift+T, each through env.step.
    sys.path.insert(0, solutions)
    spec = importlib.util.spec_from_file_location("solution_06fe7178", os.path.join(solutions, "chrome", "06fe7178.py"))
    solution = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solution)
    solution.solve(env, None)
    score = score_until(1, 30)
    say("after", {"score": score, "tabs": tabs()})
    e = tldextract.extract("http://www.example.co.uk/")
    say("tldextract", [e.subdomain, e.domain, e.suffix])
finally:
    env.close()
say("names_resolved", names)
"#;

#[test]
fn an_osworld_chrome_task_opens_its_tabs_on_the_stand_in_and_evaluates() {
    require_root();
    let _ = harness_dir();
    let task = shared_task("examples/chrome/06fe7178-4491-4589-810f-2e2bc9502122.json");
    let _lock = session_lock();
    let root = drums::image::images_root().join(drums::image::DEFAULT_IMAGE).join("root");
    assert!(root.join("usr/bin/socat").exists(), "the default image has no socat, which the chrome tasks forward DevTools with: rebuild it with pipelines/image.sh (pipelines/images/desktop.packages names it)");
    let standin = egress::StandIn::up();
    let tmp = temp_dir("urlmap");
    let (ckpt_file, _ckpt, _remove) = checkpoint(&tmp.0);
    let cache = tmp.0.join("cache");
    let uplink = format!("{}:{}", egress::UPLINK, egress::GATEWAY);
    // The task's three sites, each onto a name of the stand-in (web 198.51.100.10, other .11, sub .12).
    let sites = [("https://www.lonelyplanet.com", "http://web.example.org"), ("https://www.airbnb.com", "http://other.example.org"), ("https://www.tripadvisor.com", "http://sub.example.net")];
    let map: Vec<String> = sites.iter().map(|(a, b)| format!("{a}={b}")).collect();
    let map = map.join(" ");
    let env = [("DRUMS_NET", "internet"), ("DRUMS_UPLINK", uplink.as_str()), ("DRUMS_NET_DNS", egress::DNS), ("DRUMS_OSWORLD_PROXY", egress::PROXY), ("DRUMS_OSWORLD_URL_MAP", map.as_str())];
    let through = |host: &str| standin.proxy_requests().iter().filter(|l| l.contains(&format!(" GET http://{host}/"))).count();
    let page = |host: &str| (format!("http://{host}/"), egress::PAGE_TITLE.to_string());
    let mut steps = vec![];
    let solutions = repo_root().join("pipelines/osworld/solutions");
    let args = [task.to_str().unwrap(), ckpt_file.to_str().unwrap(), cache.to_str().unwrap(), solutions.to_str().unwrap()];
    stepped_episode(URL_MAP_EPISODE, &args, &env, |step, v| {
        steps.push(step.to_string());
        match step {
            "taken" => {
                let s: Session = serde_json::from_value(v.clone()).unwrap();
                assert!(s.restore.is_some(), "the harness's session is not a restored sibling: {}", json(&s));
                assert_eq!(s.egress.as_ref().map(|e| e.policy.to_string()).as_deref(), Some("internet"), "{}", json(&s));
            }
            "set_up" => {
                let s: Session = serde_json::from_value(v["session"].clone()).unwrap();
                assert_eq!(s.egress.as_ref().unwrap().proxy.as_deref(), Some(egress::PROXY), "the task's \"proxy\" was not given: {}", json(&s));
                let tabs: Vec<(String, String)> = serde_json::from_value(v["tabs"].clone()).unwrap();
                assert_eq!(tabs, vec![page("other.example.org"), page("web.example.org")], "the tabs the setup left");
                for host in ["web.example.org", "other.example.org", "sub.example.net"] {
                    assert!(through(host) >= 1, "{host} was not loaded through the proxy: {:?}", standin.proxy_requests());
                }
            }
            "score_before" => assert_eq!(v.as_f64(), Some(0.0), "before the agent acts"),
            "after" => {
                let tabs: Vec<(String, String)> = serde_json::from_value(v["tabs"].clone()).unwrap();
                assert_eq!(v["score"].as_f64(), Some(1.0), "after Ctrl+Shift+T, with the tabs {tabs:?}");
                assert_eq!(tabs, vec![page("other.example.org"), page("sub.example.net"), page("web.example.org")]);
            }
            "tldextract" => assert_eq!(v, &serde_json::json!(["www", "example", "co.uk"])),
            "names_resolved" => assert_eq!(v, &serde_json::json!([]), "the harness looked names up on the host"),
            other => panic!("unexpected step {other}: {v}"),
        }
    });
    assert_eq!(steps, ["taken", "set_up", "score_before", "after", "tldextract", "names_resolved"]);
}
