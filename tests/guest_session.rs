//! drums-guest in a real session (pipelines/cold.sh), driven over HTTP from the host the way OSWorld's
//! harness drives its VM: OSWorld task e0df059f (the directory rename) scores 0 after setup and 1 after the
//! agent's step; the screenshot is the display's size and shows the browser; malformed requests do not
//! stop the server.

#[path = "guest_common.rs"]
mod common;
use common::*;
use drums_tests::*;
use drums::record::Session;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::process::Command;

fn cold_session() -> (Session, Sessions) {
    let image = drums::image::images_root().join(drums::image::DEFAULT_IMAGE).join("image.json");
    assert!(image.exists(), "no default root image ({}): run pipelines/setup.sh (pipelines/image.sh builds it)", image.display());
    let o = Command::new(repo_root().join("pipelines/cold.sh"))
        .env("PATH", path_with_tools())
        .env("DRUMS_OWNER", std::process::id().to_string())
        .output()
        .expect("run pipelines/cold.sh");
    let out = text(&o.stdout);
    assert!(o.status.success(), "cold.sh failed: {}\n{out}", text(&o.stderr));
    let rec: Session = decode(&out);
    (rec, Sessions(vec![out]))
}

/// OSWorld's `execute` setup step: POST /setup/execute with the step's command and shell flag.
fn setup_step(addr: SocketAddr, step: &Value) {
    assert_eq!(step["type"], "execute", "this test knows OSWorld's execute steps only");
    let p = &step["parameters"];
    let r = post_json(addr, "/setup/execute", &json!({"command": p["command"], "shell": p["shell"].as_bool().unwrap_or(false)}));
    assert_eq!(r.status, 200, "setup step {p}: {}", r.text());
    assert_eq!(r.json()["returncode"], 0, "setup step {p}: {}", r.text());
}

/// OSWorld's evaluator for this task: the `vm_command_line` getter (POST /execute, the output) compared by
/// `exact_match` with the rule's expected text.
fn score(addr: SocketAddr, evaluator: &Value) -> u32 {
    assert_eq!(evaluator["func"], "exact_match");
    assert_eq!(evaluator["result"]["type"], "vm_command_line");
    let res = &evaluator["result"];
    let r = post_json(addr, "/execute", &json!({"command": res["command"], "shell": res["shell"]}));
    assert_eq!(r.status, 200, "{}", r.text());
    let output = r.json()["output"].as_str().unwrap().to_string();
    u32::from(output == evaluator["expected"]["rules"]["expected"].as_str().unwrap())
}

#[test]
fn osworld_task_e0df059f_through_a_real_session() {
    require_root();
    let _lock = session_lock();
    let (rec, _destroy) = cold_session();
    let url = rec.desktop().unwrap().guest_url.as_deref().expect("drums-desktop started the guest and recorded its URL");
    let addr: SocketAddr = url.strip_prefix("http://").unwrap().trim_end_matches('/').parse().unwrap();
    // OSWorld's setup controller waits for /terminal and /screenshot to answer 200.
    assert!(wait_for(30, || std::net::TcpStream::connect(addr).is_ok() && get(addr, "/terminal").status == 200), "the guest at {url} does not answer");
    assert_eq!(get(addr, "/screenshot").status, 200);

    // The desktop user of OSWorld's image.
    let r = post_json(addr, "/execute", &json!({"command": "id -un; echo $HOME; command -v python; command -v google-chrome", "shell": true}));
    assert_eq!(r.json()["output"], "user\n/home/user\n/usr/bin/python\n/usr/bin/google-chrome\n", "{}", r.text());
    assert_eq!(get(addr, "/desktop_path").json(), json!({"desktop_path": "/home/user/Desktop"}));
    // Python in the session starts with the image's clone-hygiene hook installed.
    let r = post_json(addr, "/execute", &json!({"command": ["python", "-c", "import signal; print(signal.getsignal(signal.SIGUSR1).__qualname__)"]}));
    assert_eq!(r.json()["output"], "_drums_install_reseed.<locals>.reseed\n", "{}", r.text());

    let task: Value = serde_json::from_str(&std::fs::read_to_string(repo_root().join("tests/data/osworld-e0df059f.json")).unwrap()).unwrap();
    assert_eq!(task["id"], "e0df059f-28a6-4169-924f-b9623e7184cc");
    for step in task["config"].as_array().unwrap() {
        setup_step(addr, step);
    }
    // The second setup step clicked with pyautogui at (960, 540): the pointer is there.
    assert_eq!(get(addr, "/cursor_position").json(), json!([960, 540]));
    // sudo made the directory (root's), in the user's ~/Desktop.
    let tree = post_json(addr, "/list_directory", &json!({"path": "~/Desktop"})).json();
    assert_eq!(tree["directory_tree"]["children"], json!([{"type": "directory", "name": "todo_list_Jan_1", "children": []}]), "{tree}");

    assert_eq!(score(addr, &task["evaluator"]), 0, "before the agent acts the task is not done");

    // The agent's step, sent the way OSWorld's PythonController sends pyautogui code.
    let code = format!("import pyautogui; import time; pyautogui.FAILSAFE = False; {}", task["agent_step"].as_str().unwrap());
    let r = post_json(addr, "/execute", &json!({"command": ["python", "-c", code], "shell": false}));
    assert_eq!((r.status, r.json()["returncode"].clone()), (200, json!(0)), "{}", r.text());

    assert_eq!(score(addr, &task["evaluator"]), 1, "after the rename the task is done");

    // The screenshot: a PNG of the display's size, showing the browser (its window is there, and the
    // screen is not the black root of a desktop without it).
    let (w, h) = (rec.desktop().unwrap().width, rec.desktop().unwrap().height);
    let r = get(addr, "/screenshot");
    assert_eq!(r.header("content-type"), Some("image/png"));
    let (pw, ph, px, bpp) = decode_png(&r.body);
    assert_eq!((pw, ph), (w, h));
    let black = px.chunks(bpp).filter(|p| p[0] < 8 && p[1] < 8 && p[2] < 8).count() as f64 / (pw * ph) as f64;
    assert!(black < 0.5, "{:.0}% of the screenshot is the black root: no browser", black * 100.0);
    let title = rec.desktop().unwrap().title.as_str();
    let r = post_json(addr, "/setup/activate_window", &json!({"window_name": title, "strict": true}));
    assert_eq!(r.status, 200, "no browser window titled {title:?}: {}", r.text());

    // The accessibility tree answers in OSWorld's shape.
    let r = get(addr, "/accessibility");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["AT"].as_str().unwrap().starts_with("<desktop-frame"), "{}", r.text());

    // The default image has neither ffmpeg nor gsettings: the recording and wallpaper endpoints say so at
    // once (OSWorld's client retries a failed request; each answer must not itself be slow).
    let t0 = std::time::Instant::now();
    let r = post_json(addr, "/start_recording", &json!({}));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.json()["message"].as_str().unwrap().contains("ffmpeg is required for recording but was not found"), "{}", r.text());
    assert!(t0.elapsed().as_secs_f64() < 2.0, "took {:?}", t0.elapsed());
    assert_eq!(post_json(addr, "/end_recording", &json!({})).status, 400);
    let r = post_json(addr, "/setup/change_wallpaper", &json!({"path": "~/Desktop"}));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.text().contains("gsettings is not in this session's root image"), "{}", r.text());
    assert_eq!(post_json(addr, "/wallpaper", &json!({})).status, 404);
    // No terminal application runs: /terminal reads the AT-SPI tree and finds none, as OSWorld's would.
    assert_eq!(get(addr, "/terminal").json(), json!({"output": null, "status": "success"}));

    // Malformed requests get 4xx and the guest keeps serving.
    for (path, body) in [("/execute", "{"), ("/execute", "[]"), ("/execute", r#"{"command": 5}"#), ("/list_directory", r#"{"path": "/proc/1/root"}"#)] {
        let r = request(addr, "POST", path, Some("application/json"), body.as_bytes());
        assert!((400..500).contains(&r.status), "{path} {body}: {} {}", r.status, r.text());
    }
    assert_eq!(get(addr, "/platform").text(), "Linux");
}

/// OSWorld's own client, unchanged (PythonController of the `desktop-env` package, installed by
/// pipelines/setup.d/osworld-client.sh), pointed at the session's address.
#[test]
fn osworld_python_controller_works_against_a_session() {
    require_root();
    let client = std::env::var("DRUMS_OSWORLD_CLIENT").unwrap_or_else(|_| "/var/lib/drums/osworld-client".into());
    assert!(
        std::path::Path::new(&client).join("desktop_env/controllers/python.py").exists(),
        "OSWorld's client is not installed in {client}: run pipelines/setup.sh (pipelines/setup.d/osworld-client.sh)"
    );
    let _lock = session_lock();
    let (rec, _destroy) = cold_session();
    let url = rec.desktop().unwrap().guest_url.as_deref().unwrap();
    let addr: SocketAddr = url.strip_prefix("http://").unwrap().trim_end_matches('/').parse().unwrap();
    assert!(wait_for(30, || std::net::TcpStream::connect(addr).is_ok()), "the guest at {url} does not answer");
    // Everything below is OSWorld's client code; the script only calls it and reports what it returned.
    let probe = r#"
import json, sys
from desktop_env.controllers.python import PythonController
c = PythonController(vm_ip=sys.argv[1], server_port=int(sys.argv[2]))
c.retry_interval = 0.5
out = {}
shot = c.get_screenshot()
out["screenshot_is_png"] = bool(shot) and shot[:8] == b"\x89PNG\r\n\x1a\n"
out["screen_size"] = c.get_vm_screen_size()
out["platform"] = c.get_vm_platform()
out["desktop_path"] = c.get_vm_desktop_path()
out["terminal"] = c.get_terminal_output()
out["size"] = c.execute_python_command("print(tuple(pyautogui.size()))")
c.execute_action({"action_type": "CLICK", "x": 300, "y": 200})
out["position"] = c.execute_python_command("print(tuple(pyautogui.position()))")
out["run_python"] = c.run_python_script("print(6 * 7)")
out["run_bash"] = c.run_bash_script("echo note > ~/Desktop/note.txt; whoami")
out["file"] = (c.get_file("~/Desktop/note.txt") or b"").decode()
out["tree"] = c.get_vm_directory_tree("/home/user/Desktop")
at = c.get_accessibility_tree()
out["accessibility"] = at[:14] if at else None
print(json.dumps(out))
"#;
    let o = Command::new("/usr/bin/python3")
        .args(["-c", probe, &addr.ip().to_string(), &addr.port().to_string()])
        .env("PYTHONPATH", &client)
        .output()
        .unwrap();
    assert!(o.status.success(), "the OSWorld client failed: {}", text(&o.stderr));
    let v: Value = serde_json::from_str(text(&o.stdout).trim()).unwrap_or_else(|e| panic!("{e}: {}", text(&o.stdout)));
    let (w, h) = (rec.desktop().unwrap().width, rec.desktop().unwrap().height);
    assert_eq!(v["screenshot_is_png"], true, "{v}");
    assert_eq!(v["screen_size"], json!({"width": w, "height": h}));
    assert_eq!(v["platform"], "Linux");
    assert_eq!(v["desktop_path"], "/home/user/Desktop");
    assert_eq!(v["terminal"], Value::Null);
    assert_eq!(v["size"]["output"], format!("({w}, {h})\n"));
    assert_eq!(v["position"]["output"], "(300, 200)\n");
    assert_eq!((v["run_python"]["status"].clone(), v["run_python"]["output"].clone()), (json!("success"), json!("42\n")), "{v}");
    assert_eq!(v["run_bash"]["output"], "user\n", "{v}");
    assert_eq!(v["file"], "note\n");
    assert_eq!(v["tree"], json!({"type": "directory", "name": "Desktop", "children": [{"type": "file", "name": "note.txt"}]}));
    assert_eq!(v["accessibility"], "<desktop-frame");

    // OSWorld's `open` setup step: xdg-open as the user starts the session's browser on a file, and the
    // guest waits for its window (the title holds the file's stem) and activates it.
    let page = b"<title>drums-open</title><body style='background:#ff0000'></body>";
    let (ct, body) = multipart(&[("file_path", None, b"~/Desktop/drums-open.html"), ("file_data", Some("drums-open.html"), page)]);
    assert_eq!(request(addr, "POST", "/setup/upload", Some(&ct), &body).status, 200);
    let r = post_json(addr, "/setup/open_file", &json!({"path": "~/Desktop/drums-open.html", "timeout_seconds": 60}));
    assert_eq!((r.status, r.text().as_str()), (200, "File opened and window activated successfully"));
    // The title (which the window search matched) comes before the first paint: wait for the page.
    let mut red = 0;
    let painted = wait_for(30, || {
        let (_, _, px, bpp) = decode_png(&get(addr, "/screenshot").body);
        red = px.chunks(bpp).filter(|p| p[0] > 200 && p[1] < 40 && p[2] < 40).count();
        red > px.len() / bpp / 20
    });
    assert!(painted, "the opened page is not on the screen ({red} red pixels)");
    let r = post_json(addr, "/setup/open_file", &json!({"path": "~/Desktop/no-such-file.html"}));
    assert_eq!(r.status, 404);
}

/// GET /accessibility walks the session's AT-SPI tree: the desktop's Chromium exposes itself (started with
/// --force-renderer-accessibility, as OSWorld's Chrome does) and shows up with its page's content, in
/// OSWorld's XML.
#[test]
fn accessibility_tree_shows_an_accessible_browser() {
    require_root();
    let _lock = session_lock();
    let (rec, _destroy) = cold_session();
    let url = rec.desktop().unwrap().guest_url.as_deref().unwrap();
    let addr: SocketAddr = url.strip_prefix("http://").unwrap().trim_end_matches('/').parse().unwrap();
    assert!(wait_for(30, || std::net::TcpStream::connect(addr).is_ok()), "the guest at {url} does not answer");
    let mut last = String::new();
    let found = wait_for(60, || {
        let r = get(addr, "/accessibility");
        last = r.text();
        r.status == 200 && last.contains("<heading name=\\\"drums-ready\\\"")
    });
    assert!(found, "the page's heading never showed in the tree; last answer: {}", &last[..last.len().min(2000)]);
    let at = serde_json::from_str::<Value>(&last).unwrap()["AT"].as_str().unwrap().to_string();
    assert!(at.starts_with("<desktop-frame"), "{}", &at[..200]);
    assert!(at.contains("xmlns:st=\"https://accessibility.ubuntu.example.org/ns/state\""));
    assert!(at.contains("<application name=\"Chromium\""), "{}", &at[..at.len().min(2000)]);
    assert!(at.contains("<frame name=\"drums-ready\""), "{}", &at[..at.len().min(3000)]);
    assert!(at.contains("<document-web"), "the page itself is in the tree");
    assert!(at.contains("cp:screencoord=\"("), "visible nodes carry their screen position");
}
