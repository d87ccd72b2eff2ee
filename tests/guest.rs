//! drums-guest on the host, against a real Xvfb and openbox, over real HTTP: OSWorld's endpoints and their
//! shapes, commands run as the desktop user, files, windows, malformed requests, and the RNG reseed.
//! (The e0df059f task through a real session is in guest_session.rs.)

#[path = "guest_common.rs"]
mod common;
use common::*;
use serde_json::json;
use std::os::unix::fs::MetadataExt;

fn tmpdir(tag: &str) -> std::path::PathBuf {
    let d = std::path::PathBuf::from(format!("/tmp/drums-guest-test-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    // World-writable so the desktop user (nobody) may write into it.
    std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    d
}

#[test]
fn execute_runs_osworld_command_forms_as_the_user() {
    let d = Desktop::start("nobody", 800, 600);
    for path in ["/execute", "/setup/execute"] {
        let r = post_json(d.addr, path, &json!({"command": ["sh", "-c", "echo out; echo err >&2; exit 3"]}));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json(), json!({"status": "success", "output": "out\n", "error": "err\n", "returncode": 3}));
    }
    // Who runs it, with which home, and `~/` expanded in list items (not inside a shell string).
    let r = post_json(d.addr, "/execute", &json!({"command": ["sh", "-c", "id -un; echo $HOME; echo $DISPLAY; echo \"$0\"", "~/x"]}));
    let home = drums::account::Account::lookup("nobody").unwrap().home;
    assert_eq!(r.json()["output"], format!("nobody\n{}\n{}\n{}/x\n", home.display(), d.display, home.display()));
    // A string without shell is split like Python's shlex.split.
    let r = post_json(d.addr, "/execute", &json!({"command": "printf '%s|' 'a b' \"c\\\"d\" e", "shell": false}));
    assert_eq!(r.json()["output"], "a b|c\"d|e|");
    // A shell string; a command list with shell=true runs the first item as the script.
    let r = post_json(d.addr, "/execute", &json!({"command": "echo $((6*7)) | tr 4 X", "shell": true}));
    assert_eq!(r.json()["output"], "X2\n");
    let r = post_json(d.addr, "/execute", &json!({"command": ["echo \"$0\"", "~/y"], "shell": true}));
    assert_eq!(r.json()["output"], format!("{}/y\n", home.display()));
    // Killed by a signal: Python's negative return code.
    let r = post_json(d.addr, "/execute", &json!({"command": "kill -9 $$", "shell": true}));
    assert_eq!(r.json()["returncode"], -9);
    // A program that does not exist: OSWorld's 500 with Python's error text.
    let r = post_json(d.addr, "/execute", &json!({"command": ["no-such-program-drums"]}));
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["status"], "error");
    assert!(r.json()["message"].as_str().unwrap().starts_with("[Errno 2] No such file or directory"), "{}", r.text());
    // A background child holding the output pipe does not hold the answer for the whole timeout.
    let t0 = std::time::Instant::now();
    let r = post_json(d.addr, "/execute", &json!({"command": "sleep 30 & echo started", "shell": true}));
    assert_eq!(r.json()["output"], "started\n");
    assert!(t0.elapsed().as_secs() < 10, "took {:?}", t0.elapsed());
}

#[test]
fn screen_endpoints_answer_with_the_display() {
    let d = Desktop::start("nobody", 1024, 768);
    let r = post_json(d.addr, "/screen_size", &json!({}));
    assert_eq!(r.json(), json!({"width": 1024, "height": 768}));
    // OSWorld's client posts with no body at all.
    assert_eq!(request(d.addr, "POST", "/screen_size", None, b"").json(), json!({"width": 1024, "height": 768}));
    let r = get(d.addr, "/cursor_position");
    let pos = r.json();
    assert!(pos.as_array().is_some_and(|a| a.len() == 2), "{pos}");
    let r = get(d.addr, "/platform");
    assert_eq!((r.status, r.text().as_str()), (200, "Linux"));
    // A client asking for keep-alive still gets the connection closed after the answer (read_to_end
    // returns only then).
    let r = raw(d.addr, b"GET /platform HTTP/1.1\r\nHost: guest\r\n\r\n");
    assert_eq!((r.status, r.header("connection")), (200, Some("close")), "no connection outlives its request");
    let r = get(d.addr, "/terminal");
    assert_eq!(r.json(), json!({"output": null, "status": "success"}));

    let r = get(d.addr, "/screenshot");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("image/png"));
    let (w, h, px, bpp) = decode_png(&r.body);
    assert_eq!((w, h), (1024, 768));
    // The blank Xvfb root is one colour everywhere except where the cursor is drawn, at the pointer.
    let (x, y) = (pos[0].as_u64().unwrap() as usize, pos[1].as_u64().unwrap() as usize);
    let at = |x: usize, y: usize| px[(y * w as usize + x) * bpp..(y * w as usize + x) * bpp + 3].to_vec();
    let background = at(0, 0);
    let mut cursor_pixels = 0;
    for yy in y.saturating_sub(20)..(y + 20).min(h as usize) {
        for xx in x.saturating_sub(20)..(x + 20).min(w as usize) {
            if at(xx, yy) != background {
                cursor_pixels += 1;
            }
        }
    }
    assert!(cursor_pixels > 10, "no cursor drawn near the pointer ({x},{y}): {cursor_pixels} pixels differ");
}

#[test]
fn launch_screenshot_and_windows_with_a_real_browser() {
    let d = Desktop::start("nobody", 1024, 768);
    let dir = tmpdir("browser");
    let page = dir.join("page.html");
    std::fs::write(&page, "<html><head><title>Drums guest page</title></head><body style='background:#00c000'></body></html>").unwrap();
    let r = post_json(
        d.addr,
        "/setup/launch",
        &json!({"command": ["chromium", "--no-first-run", "--disable-gpu", "--no-default-browser-check", &format!("--user-data-dir={}/profile", dir.display()), "--window-position=0,0", "--window-size=1024,768", &format!("file://{}", page.display())]}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().ends_with(" launched successfully"), "{}", r.text());
    // The page is green: the screenshot shows the browser once a good part of the screen is green.
    let mut green = 0.0;
    let shown = wait_for(60, || {
        let (w, h, px, bpp) = decode_png(&get(d.addr, "/screenshot").body);
        assert_eq!((w, h), (1024, 768));
        let n = px.chunks(bpp).filter(|p| p[0] < 40 && p[1] > 150 && p[2] < 40).count();
        green = n as f64 / (w * h) as f64;
        green > 0.3
    });
    assert!(shown, "the browser page never covered the screen (green fraction {green:.2}); log:\n{}", d.log_text());
    // Windows by title, wmctrl's way.
    let r = post_json(d.addr, "/setup/activate_window", &json!({"window_name": "drums GUEST page"}));
    assert_eq!((r.status, r.text().as_str()), (200, "Window activated successfully"));
    let r = post_json(d.addr, "/setup/activate_window", &json!({"window_name": "drums GUEST page", "strict": true}));
    assert_eq!(r.status, 404, "strict matching is case-sensitive and whole: {}", r.text());
    let r = post_json(d.addr, "/setup/activate_window", &json!({"window_name": "chromium", "by_class": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = request(d.addr, "POST", "/window_size", Some("application/x-www-form-urlencoded"), b"app_class_name=Chromium");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["width"].as_u64().unwrap() > 100, "{}", r.text());
    let r = request(d.addr, "POST", "/window_size", Some("application/x-www-form-urlencoded"), b"app_class_name=no-such-class");
    assert_eq!(r.status, 404);
    // Setup steps that wait for their effect.
    let r = post_json(
        d.addr,
        "/setup/execute_with_verification",
        &json!({"command": ["true"], "verification": {"window_exists": "guest PAGE", "command_success": "test -d /tmp"}, "max_wait_time": 10}),
    );
    assert_eq!((r.status, r.json()["verification"].clone()), (200, json!("passed")), "{}", r.text());
    let r = post_json(d.addr, "/execute_with_verification", &json!({"command": ["true"], "verification": {"command_success": "false"}, "max_wait_time": 1, "check_interval": 0.2}));
    assert_eq!((r.status, r.json()["status"].clone()), (500, json!("verification_failed")), "{}", r.text());
    let r = post_json(d.addr, "/setup/close_window", &json!({"window_name": "Drums guest page"}));
    assert_eq!((r.status, r.text().as_str()), (200, "Window closed successfully."));
    let gone = wait_for(30, || post_json(d.addr, "/setup/activate_window", &json!({"window_name": "Drums guest page"})).status == 404);
    assert!(gone, "the window was not closed");
    // The browser leads its own process group (the guest logs its pid): end exactly that group.
    let log = d.log_text();
    let pid: i32 = log.split("launched pid ").nth(1).and_then(|r| r.split(':').next()).and_then(|p| p.parse().ok()).expect("the launch is logged with its pid");
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    // Its profile is written until the last of its processes exits: remove the directory after that.
    wait_for(10, || unsafe { libc::kill(-pid, 0) } != 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn files_move_as_the_user() {
    let d = Desktop::start("nobody", 640, 480);
    let dir = tmpdir("files");
    let nobody = drums::account::Account::lookup("nobody").unwrap();
    // Upload in OSWorld's part order, into directories that do not exist yet.
    let target = dir.join("a/b/c.bin");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let (ct, body) = multipart(&[("file_path", None, target.to_str().unwrap().as_bytes()), ("file_data", Some("c.bin"), &data)]);
    let r = request(d.addr, "POST", "/setup/upload", Some(&ct), &body);
    assert_eq!((r.status, r.text()), (200, format!("File Uploaded: {} bytes", data.len())));
    assert_eq!(std::fs::read(&target).unwrap(), data);
    let md = std::fs::metadata(&target).unwrap();
    assert_eq!(md.uid(), nobody.uid, "the uploaded file belongs to the desktop user");
    assert_eq!(std::fs::metadata(dir.join("a")).unwrap().uid(), nobody.uid);
    // The other part order works too.
    let t2 = dir.join("second.txt");
    let (ct, body) = multipart(&[("file_data", Some("x.txt"), b"two"), ("file_path", None, t2.to_str().unwrap().as_bytes())]);
    assert_eq!(request(d.addr, "POST", "/setup/upload", Some(&ct), &body).status, 200);
    assert_eq!(std::fs::read_to_string(&t2).unwrap(), "two");
    // Download, as `requests.post(url, data={"file_path": ...})` sends it.
    let form = format!("file_path={}", target.to_str().unwrap().replace('/', "%2F"));
    let r = request(d.addr, "POST", "/file", Some("application/x-www-form-urlencoded"), form.as_bytes());
    assert_eq!(r.status, 200);
    assert_eq!(r.body, data);
    assert!(r.header("content-disposition").unwrap().contains("c.bin"));
    let r = request(d.addr, "POST", "/file", Some("application/x-www-form-urlencoded"), format!("file_path={}/nope", dir.display()).as_bytes());
    assert_eq!((r.status, r.json()), (404, json!({"error": "File not found"})));
    // The user's permissions apply: root's private file is not the user's to read or overwrite.
    let secret = dir.join("secret");
    std::fs::write(&secret, "root only").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let r = request(d.addr, "POST", "/file", Some("application/x-www-form-urlencoded"), format!("file_path={}", secret.display()).as_bytes());
    assert_eq!(r.status, 403, "{}", r.text());
    let (ct, body) = multipart(&[("file_path", None, secret.to_str().unwrap().as_bytes()), ("file_data", Some("s"), b"overwritten")]);
    assert_eq!(request(d.addr, "POST", "/setup/upload", Some(&ct), &body).status, 500);
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root only");
    // The directory tree.
    let r = post_json(d.addr, "/list_directory", &json!({"path": dir.join("a").to_str().unwrap()}));
    assert_eq!(
        r.json(),
        json!({"directory_tree": {"type": "directory", "name": "a", "children": [{"type": "directory", "name": "b", "children": [{"type": "file", "name": "c.bin"}]}]}})
    );
    let r = post_json(d.addr, "/list_directory", &json!({"path": target.to_str().unwrap()}));
    assert_eq!((r.status, r.json()), (400, json!({"error": "The provided path is not a directory"})));
    // nobody's home has no Desktop: OSWorld's 404.
    let r = get(d.addr, "/desktop_path");
    assert_eq!(r.status, 404);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn scripts_run_with_osworld_shapes() {
    let d = Desktop::start("nobody", 640, 480);
    let r = post_json(d.addr, "/run_python", &json!({"code": "import os, sys\nprint(os.getuid())\nprint('bad', file=sys.stderr)"}));
    let uid = drums::account::Account::lookup("nobody").unwrap().uid;
    assert_eq!(
        r.json(),
        json!({"status": "success", "message": format!("{uid}\n\nbad\n"), "need_more": false, "output": format!("{uid}\n"), "error": "bad\n", "return_code": 0})
    );
    let r = post_json(d.addr, "/run_python", &json!({"code": "raise SystemExit(4)"}));
    assert_eq!((r.json()["status"].clone(), r.json()["return_code"].clone(), r.json()["error"].clone()), (json!("error"), json!(4), json!("Process exited with code 4")));
    assert_eq!(post_json(d.addr, "/run_python", &json!({})).json(), json!({"status": "error", "message": "Code not supplied!"}));
    let dir = tmpdir("bash");
    let r = post_json(d.addr, "/run_bash_script", &json!({"script": "echo out; echo err >&2; pwd; exit 2", "working_dir": dir.to_str().unwrap()}));
    assert_eq!(r.json(), json!({"status": "error", "output": format!("out\nerr\n{}\n", dir.display()), "error": "", "returncode": 2}));
    let r = post_json(d.addr, "/run_bash_script", &json!({"script": "sleep 20", "timeout": 1}));
    assert_eq!((r.status, r.json()), (500, json!({"status": "error", "output": "Script execution timed out after 1 seconds", "error": "", "returncode": -1})));
    let r = post_json(d.addr, "/run_bash_script", &json!({"script": "true", "working_dir": "/no/such/dir"}));
    assert_eq!(r.status, 400);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A batch of malformed requests: each gets a 4xx answer naming the problem, and the server keeps serving.
#[test]
fn malformed_requests_get_4xx_and_the_server_keeps_serving() {
    let mut d = Desktop::start("nobody", 640, 480);
    let a = d.addr;
    let j = "application/json";
    let cases: Vec<(&str, &str, Option<&str>, Vec<u8>)> = vec![
        ("POST", "/execute", None, b"".to_vec()),
        ("POST", "/execute", Some(j), b"{not json".to_vec()),
        ("POST", "/execute", Some(j), b"[1, 2]".to_vec()),
        ("POST", "/execute", Some(j), b"\"a string\"".to_vec()),
        ("POST", "/execute", Some(j), br#"{"command": 42}"#.to_vec()),
        ("POST", "/execute", Some(j), br#"{"command": ["ls", 3]}"#.to_vec()),
        ("POST", "/execute", Some(j), br#"{"command": ["ls"], "shell": "yes"}"#.to_vec()),
        ("POST", "/execute", Some(j), br#"{"command": []}"#.to_vec()),
        ("POST", "/execute", Some(j), br#"{"command": "echo 'unclosed"}"#.to_vec()),
        ("POST", "/setup/execute", Some(j), vec![0xff, 0xfe, 0x00]),
        ("POST", "/setup/launch", Some(j), br#"{"command": {"a": 1}}"#.to_vec()),
        ("POST", "/run_python", Some(j), br#"{"code": 12}"#.to_vec()),
        ("POST", "/run_bash_script", Some(j), br#"{"script": "true", "timeout": "soon"}"#.to_vec()),
        ("POST", "/run_bash_script", Some(j), br#"{"script": "true", "timeout": -5}"#.to_vec()),
        ("POST", "/list_directory", Some(j), br#"{}"#.to_vec()),
        ("POST", "/list_directory", Some(j), br#"{"path": ["x"]}"#.to_vec()),
        ("POST", "/list_directory", Some(j), br#"{"path": "/proc/1/root"}"#.to_vec()),
        ("POST", "/list_directory", Some(j), br#"{"path": "relative/dir"}"#.to_vec()),
        ("POST", "/file", Some("application/x-www-form-urlencoded"), b"other=1".to_vec()),
        ("POST", "/file", Some("application/x-www-form-urlencoded"), b"file_path=/proc/self/environ".to_vec()),
        ("POST", "/file", Some("application/x-www-form-urlencoded"), b"file_path=/tmp/../sys/kernel/notes".to_vec()),
        ("POST", "/file", Some("application/x-www-form-urlencoded"), b"file_path=etc/passwd".to_vec()),
        ("POST", "/file", Some("multipart/form-data; boundary=zz"), b"--zz\r\ngarbage".to_vec()),
        ("POST", "/setup/upload", Some(j), br#"{"file_path": "/tmp/x"}"#.to_vec()),
        ("POST", "/setup/upload", Some("multipart/form-data; boundary=zz"), b"--zz\r\nContent-Disposition: form-data; name=\"file_path\"\r\n\r\n/dev/shm/x\r\n--zz\r\nContent-Disposition: form-data; name=\"file_data\"; filename=\"x\"\r\n\r\nx\r\n--zz--\r\n".to_vec()),
        ("POST", "/setup/open_file", Some(j), br#"{"path": ""}"#.to_vec()),
        ("POST", "/setup/open_file", Some(j), br#"{"path": "/tmp", "timeout_seconds": "x"}"#.to_vec()),
        ("POST", "/setup/activate_window", Some(j), br#"{"window_name": 7}"#.to_vec()),
        ("POST", "/setup/close_window", Some(j), br#"{}"#.to_vec()),
        ("GET", "/execute", None, b"".to_vec()),
        ("DELETE", "/screenshot", None, b"".to_vec()),
        ("GET", "/no/such/endpoint", None, b"".to_vec()),
        ("POST", "/execute_with_verification", Some(j), b"{}".to_vec()),
    ];
    for (m, p, ct, body) in &cases {
        let r = request(a, m, p, *ct, body);
        assert!((400..500).contains(&r.status), "{m} {p} {:?}: answered {} {}", String::from_utf8_lossy(body), r.status, r.text());
    }
    // Not even HTTP, and a connection that closes mid-request.
    let r = raw(a, b"HELLO\r\n\r\n");
    assert!((400..500).contains(&r.status), "garbage request line: {}", r.status);
    {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(a).unwrap();
        s.write_all(b"POST /execute HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{\"comm").unwrap();
    }
    // Unknown routes answer as Flask does.
    let r = get(a, "/nothing-here");
    assert_eq!(r.status, 404);
    assert!(r.header("content-type").unwrap().starts_with("text/html"));
    assert!(d.guest_alive(), "drums-guest died; log:\n{}", d.log_text());
    let r = post_json(a, "/execute", &json!({"command": ["echo", "still here"]}));
    assert_eq!((r.status, r.json()["output"].clone()), (200, json!("still here\n")));
}

#[test]
fn sigusr1_reseeds_the_rng_and_shows_the_new_fingerprint() {
    let d = Desktop::start("nobody", 640, 480);
    let before = get(d.addr, "/drums/rng").json();
    assert_eq!(before["generation"], 0);
    // Drawing (temporary names) does not change the fingerprint of the state.
    post_json(d.addr, "/run_python", &json!({"code": "pass"}));
    assert_eq!(get(d.addr, "/drums/rng").json()["fingerprint"], before["fingerprint"]);
    assert_eq!(unsafe { libc::kill(d.guest_pid as i32, libc::SIGUSR1) }, 0);
    assert!(wait_for(10, || get(d.addr, "/drums/rng").json()["generation"] == 1));
    let after = get(d.addr, "/drums/rng").json();
    assert_ne!(after["fingerprint"], before["fingerprint"]);
    let fp = after["fingerprint"].as_str().unwrap().to_string();
    assert!(wait_for(5, || d.log_text().contains(&format!("generation 1 fingerprint {fp}"))), "log:\n{}", d.log_text());
}

/// The Python start-up hook: two processes in the same `random` and numpy state (as restored clones are)
/// draw the same numbers, and different ones after SIGUSR1; each reseed is logged with the new state's
/// fingerprint.
#[test]
fn python_hook_reseeds_random_on_sigusr1() {
    use std::io::{BufRead, Write};
    let dir = tmpdir("pyhook");
    std::fs::copy(drums_tests::repo_root().join("tools/drums-guest/src/sitecustomize.py"), dir.join("sitecustomize.py")).unwrap();
    let log = dir.join("reseed.log");
    // numpy is loaded before the signal, so its global generator is reseeded too.
    let script = "import random, sys, numpy\nrandom.seed(1234)\nnumpy.random.seed(99)\nprint('ready', flush=True)\nsys.stdin.readline()\nprint(random.random(), numpy.random.random())\n";
    let draw = |signal: bool| -> Vec<String> {
        let mut kids: Vec<_> = (0..2)
            .map(|_| {
                std::process::Command::new("/usr/bin/python3")
                    .args(["-c", script])
                    .env("PYTHONPATH", &dir)
                    .env("DRUMS_RESEED_LOG", &log)
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut outs = vec![];
        let mut readers: Vec<_> = kids.iter_mut().map(|k| std::io::BufReader::new(k.stdout.take().unwrap())).collect();
        for (k, r) in kids.iter_mut().zip(readers.iter_mut()) {
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            assert_eq!(l, "ready\n");
            if signal {
                assert_eq!(unsafe { libc::kill(k.id() as i32, libc::SIGUSR1) }, 0);
            }
        }
        // The reseed runs at the interpreter's next check; give it that moment before asking for a number.
        std::thread::sleep(std::time::Duration::from_millis(300));
        for (k, r) in kids.iter_mut().zip(readers.iter_mut()) {
            k.stdin.take().unwrap().write_all(b"go\n").unwrap();
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            assert!(k.wait().unwrap().success(), "python failed");
            outs.push(l.trim().to_string());
        }
        outs
    };
    let same = draw(false);
    assert_eq!(same[0], same[1], "equal states draw equal numbers");
    assert!(!log.exists(), "no signal, no reseed");
    let reseeded = draw(true);
    let parts = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let (a, b, s0) = (parts(&reseeded[0]), parts(&reseeded[1]), parts(&same[0]));
    assert_ne!(a[0], b[0], "after SIGUSR1 the two `random` streams differ");
    assert_ne!(a[1], b[1], "after SIGUSR1 the two numpy streams differ");
    assert_ne!((&a[0], &a[1]), (&s0[0], &s0[1]));
    let lines = std::fs::read_to_string(&log).unwrap();
    let fps: Vec<&str> = lines.lines().map(|l| l.split_whitespace().nth(1).unwrap()).collect();
    assert_eq!(fps.len(), 2, "{lines}");
    assert_ne!(fps[0], fps[1]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The command line: a user the session does not have and a bad display are refused with the conventions'
/// codes; --port replaces the port of --listen; SIGTERM stops the server with status 0.
#[test]
fn command_line_and_stopping() {
    let o = drums_tests::run("drums-guest", &["--user", "no-such-user-drums", "--listen", "127.0.0.1:0"], "");
    assert_eq!(o.status.code(), Some(4), "{}", drums_tests::text(&o.stderr));
    let err = drums_tests::error_record(&o.stderr);
    assert_eq!((err.kind.as_str(), err.tool.as_str()), ("environment", "drums-guest"));
    assert!(err.message.contains("/etc/passwd"), "{err:?}");
    let o = drums_tests::run("drums-guest", &["--display", "host:1"], "");
    assert_eq!(o.status.code(), Some(2), "{}", drums_tests::text(&o.stderr));

    // Port 0 through --port: the log names the port actually bound, and it answers there.
    let mut child = std::process::Command::new(drums_tests::tool("drums-guest"))
        .args(["--listen", "127.0.0.1:5999", "--port", "0", "--user", "nobody", "--display", ":59"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stderr.take().unwrap()), &mut first).unwrap();
    let addr: std::net::SocketAddr = first.split("listening on http://").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap();
    assert_ne!(addr.port(), 5999);
    assert_eq!(get(addr, "/platform").text(), "Linux");
    // No X server on :59: the screen endpoints fail with 500 and say why; the rest still works.
    let r = post_json(addr, "/screen_size", &json!({}));
    assert_eq!(r.status, 500);
    assert!(r.json()["message"].as_str().unwrap().contains(":59"), "{}", r.text());
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// The guest's peak resident memory (VmHWM), bytes.
fn peak_rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok()).expect("VmHWM");
    kb << 10
}

/// Files named like the guest's upload spool in the host's /tmp (the guest runs on the host here).
fn spooled() -> Vec<String> {
    std::fs::read_dir("/tmp").unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with("drums_upload_")).collect()
}

/// Everything below `dir`, relative, sorted.
fn listing(dir: &std::path::Path) -> Vec<String> {
    fn walk(d: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            out.push(e.path().strip_prefix(base).unwrap().display().to_string());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&e.path(), base, out);
            }
        }
    }
    let mut v = vec![];
    walk(dir, dir, &mut v);
    v.sort();
    v
}

/// An upload with its body sent chunked (no Content-Length), as a streaming client sends it.
fn upload_chunked(addr: std::net::SocketAddr, content_type: &str, body: &[u8]) -> Resp {
    let mut req = format!("POST /setup/upload HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n").into_bytes();
    for c in body.chunks(64 << 10) {
        req.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        req.extend_from_slice(c);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    raw(addr, &req)
}

/// --max-upload: an upload up to the bound lands; one byte more is refused with 413 in either part order,
/// with or without a Content-Length, and leaves nothing: no file, no directory made for it, no spool file.
/// Within the bound a large file is streamed to disk in either order, never held in the guest's memory.
#[test]
fn uploads_past_the_bound_are_refused_and_leave_nothing() {
    let mut d = Desktop::start_with("nobody", 640, 480, &["--max-upload", "1M"]);
    assert!(d.log_text().contains("max upload 1048576 bytes"), "{}", d.log_text());
    let dir = tmpdir("bound");
    let spool_before = spooled();
    let at_bound: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    let target = dir.join("fits.bin");
    let (ct, body) = multipart(&[("file_path", None, target.to_str().unwrap().as_bytes()), ("file_data", Some("f"), &at_bound)]);
    let r = request(d.addr, "POST", "/setup/upload", Some(&ct), &body);
    assert_eq!((r.status, r.text()), (200, format!("File Uploaded: {} bytes", 1 << 20)), "exactly the bound is taken");
    assert_eq!(std::fs::read(&target).unwrap(), at_bound);
    std::fs::remove_file(&target).unwrap();

    let over: Vec<u8> = (0..(1u32 << 20) + 1).map(|i| (i % 251) as u8).collect();
    let far_over = vec![7u8; 3 << 20];
    let deep = dir.join("new/deeper/over.bin");
    let deep_s = deep.to_str().unwrap().as_bytes();
    let cases: Vec<(&str, (String, Vec<u8>), bool)> = vec![
        ("path first, one byte over", multipart(&[("file_path", None, deep_s), ("file_data", Some("o"), &over)]), false),
        ("data first, one byte over", multipart(&[("file_data", Some("o"), &over), ("file_path", None, deep_s)]), false),
        ("Content-Length far over the bound", multipart(&[("file_path", None, deep_s), ("file_data", Some("o"), &far_over)]), false),
        ("chunked, path first", multipart(&[("file_path", None, deep_s), ("file_data", Some("o"), &over)]), true),
        ("chunked, data first", multipart(&[("file_data", Some("o"), &far_over), ("file_path", None, deep_s)]), true),
    ];
    for (what, (ct, body), chunked) in &cases {
        let r = if *chunked { upload_chunked(d.addr, ct, body) } else { request(d.addr, "POST", "/setup/upload", Some(ct), body) };
        assert_eq!(r.status, 413, "{what}: {}", r.text());
        assert!(r.json()["error"].as_str().unwrap().contains("1048576 bytes"), "{what}: {}", r.text());
        assert_eq!(listing(&dir), Vec::<String>::new(), "{what}: something was left in {}", dir.display());
        assert_eq!(spooled(), spool_before, "{what}: a spool file was left in /tmp");
    }
    assert!(d.log_text().contains("/setup/upload refused"), "the refusal is logged: {}", d.log_text());
    // The server goes on serving uploads.
    let (ct, body) = multipart(&[("file_path", None, target.to_str().unwrap().as_bytes()), ("file_data", Some("f"), b"after")]);
    assert_eq!(request(d.addr, "POST", "/setup/upload", Some(&ct), &body).status, 200);
    assert!(d.guest_alive(), "drums-guest died; log:\n{}", d.log_text());
    drop(d);

    // The default bound (1 GiB): 256 MiB in either part order is written through to its file, and the
    // guest's peak memory grows by far less than the file.
    let d = Desktop::start("nobody", 640, 480);
    assert!(d.log_text().contains(&format!("max upload {} bytes, max output {} bytes per stream", 1u64 << 30, 16u64 << 20)), "{}", d.log_text());
    let big: Vec<u8> = (0..256u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
    let before = peak_rss(d.guest_pid);
    for (i, first) in ["file_path", "file_data"].iter().enumerate() {
        let t = dir.join(format!("big{i}.bin"));
        let parts: Vec<(&str, Option<&str>, &[u8])> = if *first == "file_path" {
            vec![("file_path", None, t.to_str().unwrap().as_bytes()), ("file_data", Some("b"), &big)]
        } else {
            vec![("file_data", Some("b"), &big), ("file_path", None, t.to_str().unwrap().as_bytes())]
        };
        let (ct, body) = multipart(&parts);
        let r = request(d.addr, "POST", "/setup/upload", Some(&ct), &body);
        assert_eq!((r.status, r.text()), (200, format!("File Uploaded: {} bytes", big.len())), "{first} first");
        assert!(std::fs::read(&t).unwrap() == big, "{first} first: the file differs from the upload");
        std::fs::remove_file(&t).unwrap();
    }
    let grew = peak_rss(d.guest_pid).saturating_sub(before);
    eprintln!("guest peak RSS grew by {} MiB over two 256 MiB uploads", grew >> 20);
    assert!(grew < 64 << 20, "the guest held an upload in memory: its peak RSS grew by {} MiB", grew >> 20);
    assert_eq!(spooled(), spool_before, "a spool file was left in /tmp");
    let _ = std::fs::remove_dir_all(&dir);
}

/// --max-output: a command printing past the bound gets OSWorld's answer with each stream cut to its first
/// bytes, `truncated` saying what was kept and dropped, and a line in the guest's log; the command still
/// runs to its end (its pipe is drained), the guest's memory stays bounded, and the server keeps answering.
#[test]
fn output_past_the_bound_is_truncated_and_the_server_keeps_answering() {
    let mut d = Desktop::start_with("nobody", 640, 480, &["--max-output", "64K"]);
    let bound = 64usize << 10;
    let two_streams = "import sys; sys.stdout.write('a' * 200000); sys.stderr.write('b' * 100000)";
    let r = post_json(d.addr, "/execute", &json!({"command": ["python3", "-c", two_streams]}));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!((v["status"].clone(), v["returncode"].clone()), (json!("success"), json!(0)), "{v}");
    assert_eq!(v["output"].as_str().unwrap(), "a".repeat(bound));
    assert_eq!(v["error"].as_str().unwrap(), "b".repeat(bound));
    assert_eq!(
        v["truncated"],
        json!({"output": {"kept_bytes": bound, "dropped_bytes": 200000 - bound}, "error": {"kept_bytes": bound, "dropped_bytes": 100000 - bound}})
    );
    let mut keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["error", "output", "returncode", "status", "truncated"], "OSWorld's fields plus `truncated`: {v}");
    // Within the bound the answer is OSWorld's exactly: no `truncated`.
    let r = post_json(d.addr, "/execute", &json!({"command": ["printf", "%s", "small"]}));
    assert_eq!(r.json(), json!({"status": "success", "output": "small", "error": "", "returncode": 0}));
    // The script endpoints too (run_bash_script merges stderr into `output`).
    let r = post_json(d.addr, "/run_bash_script", &json!({"script": "head -c 100000 /dev/zero | tr '\\0' x; head -c 100000 /dev/zero | tr '\\0' y >&2"}));
    let v = r.json();
    assert_eq!((v["status"].clone(), v["output"].as_str().unwrap().len()), (json!("success"), bound), "{}", &r.text()[..200]);
    assert_eq!(v["truncated"], json!({"output": {"kept_bytes": bound, "dropped_bytes": 200000 - bound}}));
    let r = post_json(d.addr, "/run_python", &json!({"code": "print('p' * 100000)"}));
    let v = r.json();
    assert_eq!((v["status"].clone(), v["return_code"].clone(), v["output"].as_str().unwrap().len()), (json!("success"), json!(0), bound));
    assert_eq!(v["truncated"]["output"], json!({"kept_bytes": bound, "dropped_bytes": 100001 - bound}));
    // 256 MiB of output: the command is not blocked on its pipe, the guest does not hold it.
    let before = peak_rss(d.guest_pid);
    let t0 = std::time::Instant::now();
    let r = post_json(d.addr, "/execute", &json!({"command": "head -c 268435456 /dev/zero", "shell": true}));
    let v = r.json();
    assert_eq!((r.status, v["returncode"].clone()), (200, json!(0)), "{}", &r.text()[..200.min(r.text().len())]);
    assert_eq!(v["truncated"]["output"], json!({"kept_bytes": bound, "dropped_bytes": (256u64 << 20) - bound as u64}));
    assert!(t0.elapsed().as_secs() < 60, "256 MiB of output took {:?}", t0.elapsed());
    let grew = peak_rss(d.guest_pid).saturating_sub(before);
    assert!(grew < 32 << 20, "the guest held the output: its peak RSS grew by {} MiB", grew >> 20);
    assert!(d.log_text().contains("truncated at --max-output"), "the truncation is logged: {}", d.log_text());
    assert!(d.guest_alive(), "drums-guest died; log:\n{}", d.log_text());
    let r = post_json(d.addr, "/execute", &json!({"command": ["echo", "still here"]}));
    assert_eq!(r.json(), json!({"status": "success", "output": "still here\n", "error": "", "returncode": 0}));
}

/// /start_recording and /end_recording with the host's ffmpeg (pipelines/setup.sh installs it): a real
/// x11grab of the test's display, stopped with `q`, answered as an MP4; a second start while recording
/// is refused; an end with nothing recorded is a 400.
#[test]
fn recording_makes_an_mp4_of_the_display() {
    let ffmpeg = ["/usr/bin/ffmpeg", "/usr/local/bin/ffmpeg"].iter().any(|p| std::path::Path::new(p).exists());
    assert!(ffmpeg, "ffmpeg is not installed on this host: run pipelines/setup.sh (it installs ffmpeg for this test)");
    let d = Desktop::start("nobody", 640, 480);
    let _ = std::fs::remove_file("/tmp/osworld_recording.mp4");
    let r = post_json(d.addr, "/end_recording", &json!({}));
    assert_eq!((r.status, r.json()["message"].clone()), (400, json!("No recording in progress to stop.")), "{}", r.text());
    let t0 = std::time::Instant::now();
    let r = post_json(d.addr, "/start_recording", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"status": "success", "message": "Started recording successfully."}));
    assert!(t0.elapsed().as_secs_f64() < 10.0, "start took {:?}", t0.elapsed());
    let r = post_json(d.addr, "/start_recording", &json!({}));
    assert_eq!((r.status, r.json()["message"].clone()), (400, json!("Recording is already in progress.")));
    // Something moves on the screen while it records.
    post_json(d.addr, "/execute", &json!({"command": ["python3", "-c", "import pyautogui; pyautogui.moveTo(300, 200, duration=0.5)"]}));
    std::thread::sleep(std::time::Duration::from_secs(1));
    let r = post_json(d.addr, "/end_recording", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("video/mp4"));
    assert!(r.body.len() > 1000 && &r.body[4..8] == b"ftyp", "not an MP4: {} bytes {:?}", r.body.len(), &r.body[..r.body.len().min(16)]);
    // The file is the user's (ffmpeg ran as the user).
    let md = std::fs::metadata("/tmp/osworld_recording.mp4").unwrap();
    assert_eq!(md.uid(), 65534);
    // Stopped: a second end sends the finished recording, as OSWorld's server does.
    let r = post_json(d.addr, "/end_recording", &json!({}));
    assert_eq!(r.status, 200);
    let _ = std::fs::remove_file("/tmp/osworld_recording.mp4");
    let r = post_json(d.addr, "/end_recording", &json!({}));
    assert_eq!(r.status, 400);
}

/// /setup/change_wallpaper and /wallpaper through the host's real gsettings and GNOME's schemas, with
/// GLib's keyfile back end in a directory of the test's (the guest gives it to a non-root user itself;
/// here the guest acts as root, whose host settings the test must not touch).
#[test]
fn wallpaper_is_set_and_read_through_gsettings() {
    let dir = tmpdir("wallpaper");
    let conf = dir.join("config");
    let d = Desktop::start_full("root", 320, 240, &[], &[("GSETTINGS_BACKEND", "keyfile"), ("XDG_CONFIG_HOME", conf.to_str().unwrap())]);
    let png = dir.join("wall.png");
    let shot = get(d.addr, "/screenshot").body;
    std::fs::write(&png, &shot).unwrap();
    let r = post_json(d.addr, "/setup/change_wallpaper", &json!({"path": png}));
    assert_eq!((r.status, r.text().as_str()), (200, "Wallpaper changed successfully"), "{}", r.text());
    assert!(conf.join("glib-2.0/settings/keyfile").exists(), "gsettings did not write the keyfile");
    let r = post_json(d.addr, "/wallpaper", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("image/png"));
    assert_eq!(r.body, shot);
    // OSWorld's refusals.
    assert_eq!(post_json(d.addr, "/setup/change_wallpaper", &json!({})).status, 400);
    assert_eq!(post_json(d.addr, "/setup/change_wallpaper", &json!({"path": dir.join("none.png")})).status, 404);
    // The file picture-uri names is gone: OSWorld's 500 (its send_file fails).
    std::fs::remove_file(&png).unwrap();
    let r = post_json(d.addr, "/wallpaper", &json!({}));
    assert_eq!(r.status, 500, "the wallpaper named is gone: {}", r.text());
    let _ = std::fs::remove_dir_all(&dir);
}

/// /setup/open_file answers at once when what it started exits with an error, instead of waiting out
/// its timeout (1800 s by default) for a window that cannot come.
#[test]
fn open_file_fails_fast_when_the_opener_fails() {
    let d = Desktop::start("nobody", 320, 240);
    let t0 = std::time::Instant::now();
    let r = post_json(d.addr, "/setup/open_file", &json!({"path": "false"}));
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.text().contains("exited with status 1"), "{}", r.text());
    assert!(t0.elapsed().as_secs() < 5, "took {:?}", t0.elapsed());
    // A program that exits 0 without a window is waited for until the (short) timeout, as before.
    let t0 = std::time::Instant::now();
    let r = post_json(d.addr, "/setup/open_file", &json!({"path": "true", "timeout_seconds": 2}));
    assert_eq!(r.status, 500);
    assert!(r.text().starts_with("Failed to find window"), "{}", r.text());
    assert!(t0.elapsed().as_secs_f64() >= 2.0);
}
