//! The root image against what OSWorld's tasks assume: every program a task's setup, post-config and
//! evaluation start (pipelines/osworld-run.py reads them off the task file as a shell reads its command
//! lines) is in the image. The check itself runs in the suite against a root image the test makes; the
//! OSWorld image's own check needs that image, which the suite does not build (docs/osworld.md).

use drums_tests::*;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One line of `osworld-run.py --list`.
#[derive(Debug, Clone, Deserialize)]
struct Listed {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    domain: String,
    #[serde(default)]
    runnable: bool,
    #[serde(default)]
    programs: Vec<String>,
    #[serde(default)]
    missing_programs: Option<Vec<String>>,
    #[serde(default)]
    skip_reason: Option<String>,
    #[serde(default)]
    network: String,
    #[serde(default)]
    session_hosts: Vec<String>,
    #[serde(default)]
    proxy: bool,
}

/// The shared OSWorld tasks: `../shared` beside the project, or `$DRUMS_SHARED` (a checkout elsewhere, such
/// as a git worktree).
fn shared_examples() -> PathBuf {
    let shared = std::env::var_os("DRUMS_SHARED").map(PathBuf::from).unwrap_or_else(|| repo_root().parent().unwrap().join("shared"));
    let root = shared.join("osworld/examples");
    assert!(root.is_dir(), "OSWorld's task files are not at {} (the project's shared/osworld)", root.display());
    root
}

fn list(image_root: &Path, tasks: &[PathBuf]) -> Vec<Listed> {
    list_with(image_root, tasks, &[], &[])
}

/// `osworld-run.py --list` with `flags` more, and only `env` of the variables it reads for the network.
fn list_with(image_root: &Path, tasks: &[PathBuf], flags: &[&str], env: &[(&str, &str)]) -> Vec<Listed> {
    let o = Command::new(repo_root().join("pipelines/osworld-run.py"))
        .arg("--list")
        .arg("--image-root")
        .arg(image_root)
        .args(flags)
        .args(tasks)
        .env_remove("DRUMS_NET")
        .env_remove("DRUMS_OSWORLD_PROXY")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(o.status.success(), "osworld-run.py --list: {}", text(&o.stderr));
    text(&o.stdout).lines().map(|l| decode::<Listed>(l)).filter(|l| l.kind == "osworld_task").collect()
}

struct TempRoot(PathBuf);
impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A root image holding only `programs` (empty files in usr/bin: the check looks for a name, as the shell's
/// PATH search would).
fn image_with(programs: &[&str]) -> TempRoot {
    let root = std::env::temp_dir().join(format!("drums-osworld-image-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    for p in programs {
        std::fs::write(root.join("usr/bin").join(p), "").unwrap();
    }
    TempRoot(root)
}

/// The check reads programs as a shell does (pipes, `&&`, variable assignments, `$(...)`, wrappers such as
/// `timeout`, no builtins) and names exactly those the image lacks, in both directions.
#[test]
fn the_program_check_names_what_an_image_lacks() {
    let os = shared_examples().join("os");
    let volume = os.join("28cc3b7e-b194-4bc9-8353-d04c0f4d56d2.json");
    let banners = os.join("f9be0997-4b7c-45c5-b05c-4612b44a6118.json");
    let tasks = [volume.clone(), banners.clone()];

    let all = image_with(&["pulseaudio", "pactl", "grep", "head", "awk", "sed", "gsettings", "python"]);
    let listed = list(&all.0, &tasks);
    assert_eq!(listed.len(), 2, "{listed:?}");
    let by_id = |l: &[Listed], file: &Path| -> Listed {
        let id = file.file_stem().unwrap().to_str().unwrap().to_string();
        l.iter().find(|t| t.id == id).unwrap_or_else(|| panic!("{id} not listed: {l:?}")).clone()
    };
    let v = by_id(&listed, &volume);
    // Its evaluator: "pulseaudio --start\npactl list sinks | grep ... | head -n 1 | awk ... | sed ...".
    for p in ["pulseaudio", "pactl", "grep", "head", "awk", "sed"] {
        assert!(v.programs.contains(&p.to_string()), "{p} not read from the task: {v:?}");
    }
    assert!(!v.programs.iter().any(|p| p.starts_with('-') || p.starts_with('\'') || p == "1"), "an argument read as a program: {v:?}");
    assert_eq!(v.missing_programs, Some(vec![]), "{v:?}");
    assert_eq!(by_id(&listed, &banners).missing_programs, Some(vec![]));

    let lacking = image_with(&["grep", "head", "awk", "sed", "python"]);
    let listed = list(&lacking.0, &tasks);
    assert_eq!(by_id(&listed, &volume).missing_programs, Some(vec!["pulseaudio".to_string(), "pactl".to_string()]));
    assert_eq!(by_id(&listed, &banners).missing_programs, Some(vec!["gsettings".to_string()]));
}

/// Where each task fetches (docs/osworld.md, "Tasks on the internet"), counted over the shared tasks as the
/// doc gives the counts, and what a task that names URLs needs to run: the host's internet (--internet),
/// a network policy when the session opens pages itself, the operator's proxy when it asks for one.
#[test]
fn the_list_tells_where_each_task_fetches_and_what_it_needs() {
    let image = image_with(&["chromium", "google-chrome", "socat", "soffice", "gimp", "vlc", "thunderbird"]);
    let all = list(&image.0, &[shared_examples()]);
    let count = |f: &dyn Fn(&Listed) -> bool| all.iter().filter(|t| f(t)).count();
    assert_eq!(all.len(), 369);
    assert_eq!(count(&|t| t.network == "offline"), 65);
    assert_eq!(count(&|t| t.network == "host"), 249);
    assert_eq!(count(&|t| t.network == "session"), 55);
    assert_eq!(count(&|t| t.proxy), 52);
    assert_eq!(count(&|t| t.network == "session" && t.domain == "chrome"), 32);
    assert_eq!(count(&|t| t.network == "session" && t.domain == "multi_apps"), 23);
    assert!(all.iter().all(|t| t.session_hosts.is_empty() == (t.network != "session")), "session_hosts only for session tasks");
    assert!(all.iter().filter(|t| t.network != "offline" && t.domain != "vs_code").all(|t| !t.runnable && t.skip_reason.as_deref().unwrap_or("").starts_with("internet")));

    let tabs = shared_examples().join("chrome/06fe7178-4491-4589-810f-2e2bc9502122.json");
    let download = shared_examples().join("gimp/045bf3ff-9077-4b86-b483-a1040a949cff.json");
    let tasks = [tabs, download];
    let run = |env: &[(&str, &str)]| -> (Listed, Listed) {
        let l = list_with(&image.0, &tasks, &["--internet"], env);
        (l[0].clone(), l[1].clone())
    };
    let (t, d) = run(&[]);
    assert_eq!((t.network.as_str(), t.proxy, d.network.as_str(), d.proxy), ("session", true, "host", false));
    assert_eq!(t.session_hosts, ["www.airbnb.com", "www.lonelyplanet.com", "www.tripadvisor.com"]);
    // The host fetches for a download task: its sessions may stay under none.
    assert!(d.runnable, "{d:?}");
    assert!(!t.runnable && t.skip_reason.as_deref().unwrap().starts_with("network policy none"), "{t:?}");
    let (t, _) = run(&[("DRUMS_NET", "internet")]);
    assert!(!t.runnable && t.skip_reason.as_deref().unwrap().starts_with("proxy"), "{t:?}");
    let (t, d) = run(&[("DRUMS_NET", "internet"), ("DRUMS_OSWORLD_PROXY", "http://192.0.2.80:3128")]);
    assert!(t.runnable && d.runnable, "{t:?} {d:?}");
}

/// Programs offline tasks start that the OSWorld image does not have, each with its cause. None since the
/// image has systemd's timedatectl (os/b6781586), which the session's system bus answers through
/// systemd-timedated (docs/osworld.md).
const ALLOWED_MISSING: &[(&str, &str)] = &[];

/// On the OSWorld image, every program the offline tasks start is there. Needs the OSWorld image:
/// cargo test --release -p drums-tests --test osworld_image -- --ignored
#[test]
#[ignore = "needs the OSWorld image (pipelines/image.sh --name osworld ...), which the suite does not build"]
fn every_program_the_offline_tasks_start_is_in_the_osworld_image() {
    let root = drums::image::images_root().join("osworld").join("root");
    assert!(root.join("usr/bin").is_dir(), "no OSWorld image at {}: pipelines/image.sh --name osworld --packages pipelines/images/osworld.packages", root.display());
    let listed = list(&root, &[shared_examples()]);
    let runnable: Vec<&Listed> = listed.iter().filter(|t| t.runnable).collect();
    assert!(runnable.len() >= 40, "only {} offline tasks are runnable on the OSWorld image", runnable.len());
    let mut wrong = vec![];
    for t in &runnable {
        for p in t.missing_programs.clone().unwrap_or_default() {
            if !ALLOWED_MISSING.iter().any(|(a, _)| *a == p) {
                wrong.push(format!("{}/{}: {p}", t.domain, t.id));
            }
        }
    }
    assert!(wrong.is_empty(), "programs offline tasks start that the OSWorld image lacks:\n{}", wrong.join("\n"));
}

/// A screenshot through the session's guest, decoded: (width, height, RGB).
fn screenshot(guest: &str) -> (u32, u32, Vec<u8>) {
    let o = Command::new("curl").args(["-sf", "-m", "30", &format!("{guest}/screenshot")]).output().expect("run curl");
    assert!(o.status.success(), "GET {guest}/screenshot failed: {}", text(&o.stderr));
    let dec = png::Decoder::new(std::io::Cursor::new(o.stdout));
    let mut reader = dec.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("PNG size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    assert_eq!(info.color_type, png::ColorType::Rgb, "the guest's screenshots are RGB");
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// Pixels that differ between two screenshots of one display.
fn differing_pixels(a: &[u8], b: &[u8]) -> usize {
    assert_eq!(a.len(), b.len(), "screenshots of different sizes");
    a.chunks_exact(3).zip(b.chunks_exact(3)).filter(|(p, q)| p != q).count()
}

/// Through the guest as a task's setup would: end any GIMP and forget its settings (so that every start
/// lays out its windows alike), start `command` with the shell, and return the screen once GIMP's windows
/// have settled: two screenshots 2 s apart alike, and unlike the screen before the start.
fn gimp_screen(guest: &str, command: &str) -> Vec<u8> {
    let (status, body) = http("POST", &format!("{guest}/setup/execute"), Some(&serde_json::json!({"command": "pkill -x gimp; sleep 1; pkill -9 -x gimp; rm -rf ~/.config/GIMP; true", "shell": true})), std::time::Duration::from_secs(10));
    assert_eq!(status, 200, "{body}");
    let before = screenshot(guest).2;
    let (status, body) = http("POST", &format!("{guest}/setup/launch"), Some(&serde_json::json!({"command": command, "shell": true})), std::time::Duration::from_secs(10));
    assert_eq!(status, 200, "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut last = before.clone();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(2));
        let now = screenshot(guest).2;
        if now == last && differing_pixels(&now, &before) > 10_000 {
            return now;
        }
        assert!(std::time::Instant::now() < deadline, "`{command}`: GIMP's windows did not settle within 120 s");
        last = now;
    }
}

/// GIMP on the OSWorld image draws its icons (its themes are SVG: GTK's gdk-pixbuf needs librsvg's loader,
/// which the image holds since pipelines/images/osworld.packages names librsvg2-common). The placeholder
/// is rendered for the comparison by the same GIMP with gdk-pixbuf's loaders hidden
/// (GDK_PIXBUF_MODULE_FILE naming no file): what the image without the loader drew, a broken-image icon
/// in every tool button. Twice, to show the rendering is repeatable; the icons' screen must differ from it
/// by at least the toolbox's worth of pixels.
#[test]
#[ignore = "needs the OSWorld image (pipelines/image.sh --name osworld ...), which the suite does not build"]
fn gimp_draws_its_icons_on_the_osworld_image() {
    require_root();
    let _lock = session_lock();
    let record = drums::image::images_root().join("osworld").join("image.json");
    assert!(record.exists(), "no OSWorld image ({}): pipelines/image.sh --name osworld --packages pipelines/images/osworld.packages", record.display());
    let o = Command::new(repo_root().join("pipelines/cold.sh"))
        .env("PATH", path_with_tools())
        .env("DRUMS_OWNER", std::process::id().to_string())
        .env("DRUMS_OVERLAY_ARGS", "--image osworld")
        .output()
        .unwrap();
    let mut guard = Sessions::default();
    guard.add(&text(&o.stdout));
    assert!(o.status.success(), "cold.sh: {}", text(&o.stderr));
    let session: drums::record::Session = one(&text(&o.stdout));
    let guest = session.desktop.and_then(|d| d.guest_url).expect("a guest");

    let icons = gimp_screen(&guest, "gimp");
    let placeholders = gimp_screen(&guest, "GDK_PIXBUF_MODULE_FILE=/nonexistent gimp");
    let again = gimp_screen(&guest, "GDK_PIXBUF_MODULE_FILE=/nonexistent gimp");
    let noise = differing_pixels(&placeholders, &again);
    let icons_vs_placeholders = differing_pixels(&icons, &placeholders);
    eprintln!("pixels differing: icons vs placeholders {icons_vs_placeholders}, placeholders vs placeholders {noise}");
    assert!(noise < 500, "GIMP does not draw the same screen twice ({noise} pixels differ): the comparison means nothing");
    // The toolbox alone has 18 tool buttons of 16x16 pixels.
    assert!(icons_vs_placeholders > 18 * 16 * 16 / 2 + noise, "GIMP's screen with its icons differs from the placeholders' in only {icons_vs_placeholders} pixels: it draws no icons");
}
