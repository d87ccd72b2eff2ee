//! Sessions run on their own root image, never on the host's `/`, tried from inside a cold session and a
//! restored sibling: files only the host has are not there, the accounts and the binaries are the image's,
//! an upgrade of the host's files changes nothing under a checkpoint; a checkpoint whose image changed or
//! went is refused and makes nothing; unused images are pruned, used ones kept.

use drums_tests::hygiene::*;
use drums_tests::*;
use drums::image::{ImageRecord, PruneReport, Verified};
use drums::record::{Checkpoint, Session};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn default_image() -> ImageRecord {
    let p = drums::image::images_root().join(drums::image::DEFAULT_IMAGE).join("image.json");
    let t = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}: run pipelines/setup.sh (it builds the default root image)", p.display()));
    decode(&t)
}

/// Files the test writes where only the host has them; removed when dropped.
struct HostMarkers(Vec<PathBuf>);
impl HostMarkers {
    fn write() -> HostMarkers {
        let mut v = vec![];
        for dir in ["/root", "/home", "/etc", "/var/lib", "/opt"] {
            std::fs::create_dir_all(dir).unwrap();
            let p = Path::new(dir).join(format!("drums-host-only-{}", std::process::id()));
            std::fs::write(&p, "a file only the host has\n").unwrap();
            v.push(p);
        }
        HostMarkers(v)
    }
}
impl Drop for HostMarkers {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A file of the host's /usr replaced by a different version (its bytes and a marker: the program still
/// runs), put back when dropped.
struct HostUpgrade {
    path: PathBuf,
    saved: PathBuf,
}
impl HostUpgrade {
    fn of(path: &str) -> HostUpgrade {
        let path = PathBuf::from(path);
        assert!(path.is_file(), "{} is not on the host (pipelines/setup.sh installs it)", path.display());
        let saved = path.with_extension("drums-test-saved");
        std::fs::rename(&path, &saved).unwrap();
        let mut bytes = std::fs::read(&saved).unwrap();
        bytes.extend_from_slice(b"drums-test: the host's upgraded version");
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        HostUpgrade { path, saved }
    }
}
impl Drop for HostUpgrade {
    fn drop(&mut self) {
        let _ = std::fs::rename(&self.saved, &self.path);
    }
}

struct RemoveOnDrop(PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = drums::ckpt::remove_checkpoint_dir(&self.0);
    }
}

/// A cold session: its record line as cold.sh printed it, and decoded.
fn cold(guard: &mut Sessions, overlay_args: &str) -> (String, Session) {
    let o = Command::new(repo_root().join("pipelines/cold.sh"))
        .env("PATH", path_with_tools())
        .env("DRUMS_OWNER", std::process::id().to_string())
        .env("DRUMS_OVERLAY_ARGS", overlay_args)
        .output()
        .unwrap();
    assert!(o.status.success(), "cold.sh: {}", text(&o.stderr));
    guard.add(&text(&o.stdout));
    let line = text(&o.stdout).trim().to_string();
    let s = decode(&line);
    (line, s)
}

fn restore_ready(ckpt: &str, guard: &mut Sessions) -> Session {
    let out = run_ok("drums-restore", &[], ckpt);
    guard.add(&out);
    let out = run_ok("drums-reseed", &[], &out);
    guard.add(&out);
    decode(&run_ok("drums-ready", &[], &out))
}

fn host_pid(s: &Session, role: &str) -> i32 {
    let d = s.desktop.as_ref().unwrap_or_else(|| panic!("no desktop in {}", json(s)));
    d.processes.iter().find(|p| p.role == role).and_then(|p| p.host_pid).unwrap_or_else(|| panic!("no {role} in {}", json(d)))
}

/// What a session sees is its image's, whatever the host has.
fn assert_on_image(s: &Session, image_root: &Path, markers: &HostMarkers, what: &str) {
    let probe = markers.0.iter().map(|p| format!("[ -e {0} ] && echo {0};", p.display())).collect::<String>();
    assert_eq!(inside(s, &format!("{probe} true")), "", "{what}: files only the host has are visible");
    let shadow = inside(s, "cat /etc/shadow");
    let image_shadow = std::fs::read_to_string(image_root.join("etc/shadow")).unwrap();
    assert_eq!(shadow, image_shadow.trim(), "{what}: /etc/shadow is not the image's");
    for l in std::fs::read_to_string("/etc/shadow").unwrap().lines() {
        if !image_shadow.lines().any(|i| i == l) {
            assert!(!shadow.lines().any(|x| x == l), "{what}: the host's shadow entry {} is in the session", l.split(':').next().unwrap());
        }
    }
    // Nothing the host has in /home and /root and the image has not. Dot files are left out: the desktop's
    // own processes make caches of the same names (~/.cache); the markers above stand for them.
    for dir in ["/home", "/root"] {
        let list = |root: &Path| -> Vec<String> { std::fs::read_dir(root.join(dir.trim_start_matches('/'))).into_iter().flatten().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect() };
        let (host, image) = (list(Path::new("/")), list(image_root));
        let seen = inside(s, &format!("ls -A {dir}"));
        for name in host.iter().filter(|n| !image.contains(n) && !n.starts_with('.')) {
            assert!(!seen.lines().any(|l| l == name), "{what}: the host's {dir}/{name} is in the session");
        }
    }
    assert_eq!(inside(s, "cat /etc/os-release"), std::fs::read_to_string(image_root.join("etc/os-release")).unwrap().trim(), "{what}: os-release");
    // A system bus exactly where the image has D-Bus system services for it to start (drums-desktop(1)):
    // the default image has none, and its sessions run no process more.
    let services = std::fs::read_dir(image_root.join("usr/share/dbus-1/system-services")).into_iter().flatten().flatten().any(|e| e.file_name().to_string_lossy().ends_with(".service"));
    let system_bus = s.desktop.as_ref().unwrap().processes.iter().any(|p| p.role == "system-bus");
    assert_eq!(system_bus, services, "{what}: a system bus in the desktop, the image having D-Bus system services: {system_bus}, {services}");
    // The programs the desktop runs are the image's files: their bytes, as the kernel maps them.
    for (role, bin) in [("xvfb", "usr/bin/Xvfb"), ("openbox", "usr/bin/openbox")] {
        let running = std::fs::read(format!("/proc/{}/exe", host_pid(s, role))).unwrap();
        assert!(running == std::fs::read(image_root.join(bin)).unwrap(), "{what}: the running {role} is not the image's /{bin}");
    }
}

#[test]
fn a_cold_session_and_a_restored_sibling_see_their_image_not_the_host() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let image = default_image();
    let image_root = image.root.clone();
    let markers = HostMarkers::write();
    let mut guard = Sessions::default();

    let (src_line, src) = cold(&mut guard, "--host-ids");
    let overlay = src.overlay.as_ref().unwrap_or_else(|| panic!("no overlay: {src_line}"));
    assert_eq!(overlay.image, Some(image.reference()), "the record names the image");
    // desktop.manifest is a free-form map (Desktop::manifest): its members are not typed.
    let manifest = &src.desktop.as_ref().unwrap_or_else(|| panic!("no desktop: {src_line}")).manifest;
    assert_eq!(manifest.get("image").and_then(|i| i.get("digest")), Some(&json!(image.digest)), "{}", json(manifest));
    let chromium = image.version_of("chromium").unwrap_or_else(|| panic!("no chromium among the image's packages: {:?}", image.packages));
    assert_eq!(manifest.get("chromium"), Some(&json!(chromium)), "the manifest describes the image");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let options = mounts.lines().find(|l| l.split(' ').nth(4).map(Path::new) == Some(overlay.merged.as_path())).expect("the session's overlay is mounted");
    let lowers = options.split("lowerdir=").nth(1).unwrap().split(',').next().unwrap();
    assert!(lowers.ends_with(image.root.to_str().unwrap()), "the image is the lowest layer: {lowers}");
    assert!(!lowers.split(':').any(|l| l == "/"), "the host's / is a layer: {lowers}");
    assert_on_image(&src, &image_root, &markers, "cold session");

    let ckpt = run_ok("drums-ckpt", &["--clean"], &src_line);
    let c: Checkpoint = decode(&ckpt);
    let _ckpt_dir = RemoveOnDrop(c.dir.clone());
    assert_eq!(c.image, overlay.image, "the checkpoint names its image");

    // The host upgrades a program the image has too; the checkpoint restores onto the image's version.
    let upgrade = HostUpgrade::of("/usr/bin/Xvfb");
    let sib = restore_ready(&ckpt, &mut guard);
    assert!(sib.ready.as_ref().is_some_and(|r| r.ready), "{}", json(&sib.ready));
    assert_on_image(&sib, &image_root, &markers, "restored sibling");
    let running = std::fs::read(format!("/proc/{}/exe", host_pid(&sib, "xvfb"))).unwrap();
    assert!(running != std::fs::read(&upgrade.path).unwrap(), "the sibling runs the host's upgraded Xvfb");
    drop(upgrade);
    drop(guard);
    let left = inventory().new_since(&before);
    assert!(left.is_empty(), "left after destroy: {left:?}");
}

/// A second image with the default one's tree (hard links: no copy of its bytes), removed when dropped.
struct TestImage {
    dir: PathBuf,
}
impl TestImage {
    fn new() -> TestImage {
        let base = default_image();
        let short = &base.digest[7..19];
        let dir = drums::image::images_root().join(format!("drumstest-{short}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let o = Command::new("cp").arg("-al").arg(&base.root).arg(dir.join("root")).output().unwrap();
        assert!(o.status.success(), "cp -al: {}", text(&o.stderr));
        let mut rec = base.clone();
        rec.name = "drumstest".into();
        rec.dir = dir.clone();
        rec.root = dir.join("root");
        std::fs::write(dir.join("image.json"), json(&rec)).unwrap();
        TestImage { dir }
    }
    fn record(&self) -> ImageRecord {
        decode(&std::fs::read_to_string(self.dir.join("image.json")).unwrap())
    }
}
impl Drop for TestImage {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn state_dirs() -> Vec<PathBuf> {
    std::fs::read_dir(drums::state::sessions_root()).into_iter().flatten().flatten().map(|e| e.path()).collect()
}

/// A refused restore: exit 3, a message that says why, and no session made.
fn assert_refused(ckpt: &str, why: &str) {
    let before = inventory();
    let dirs = state_dirs();
    let o = run("drums-restore", &[], ckpt);
    assert_eq!(o.status.code(), Some(3), "{why}: {}", text(&o.stderr));
    assert!(text(&o.stderr).contains(why), "the error says `{why}`: {}", text(&o.stderr));
    assert!(o.stdout.is_empty());
    assert_eq!(state_dirs(), dirs, "a refused restore makes no state directory");
    assert!(inventory().new_since(&before).is_empty(), "a refused restore makes nothing");
}

#[test]
fn a_checkpoint_whose_image_changed_or_went_is_refused_and_unused_images_are_pruned() {
    require_root();
    let _lock = session_lock();
    let before = inventory();
    let img = TestImage::new();
    let rec = img.record();
    let o = run("drums-overlay", &["image", "verify", img.dir.to_str().unwrap()], "");
    assert!(o.status.success(), "verify: {}{}", text(&o.stdout), text(&o.stderr));
    let v: Verified = decode(&text(&o.stdout));
    assert!(v.equal, "{}", json(&v));

    let mut guard = Sessions::default();
    let (src_line, src) = cold(&mut guard, &format!("--host-ids --image {}", img.dir.display()));
    assert_eq!(src.overlay.as_ref().and_then(|o| o.image.as_ref()).map(|i| i.name.as_str()), Some("drumstest"), "{src_line}");
    let ckpt = run_ok("drums-ckpt", &["--clean"], &src_line);
    let c: Checkpoint = decode(&ckpt);
    let ckpt_dir = RemoveOnDrop(c.dir.clone());

    // While the checkpoint names it, the image is kept by a prune.
    let o = run("drums-sweep", &["--prune-root-images", "--dry-run"], "");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let plan: PruneReport = decode(&text(&o.stdout));
    let kept = plan.kept.iter().find(|k| k.dir == img.dir).unwrap_or_else(|| panic!("the used test image is not kept: {}", json(&plan)));
    assert!(kept.used_by.iter().any(|u| u.contains(&c.id)), "{}", json(kept));

    // The image's digest is no longer the one the checkpoint names (same directory name, the rest differs).
    let mut changed = rec.clone();
    let d = &rec.digest;
    changed.digest = format!("{}{}", &d[..d.len() - 1], if d.ends_with('0') { '1' } else { '0' });
    std::fs::write(img.dir.join("image.json"), json(&changed)).unwrap();
    assert_refused(&ckpt, "has digest");
    std::fs::write(img.dir.join("image.json"), json(&rec)).unwrap();
    // The image is gone.
    let away = img.dir.with_file_name("drumstest-away");
    std::fs::rename(&img.dir, &away).unwrap();
    assert_refused(&ckpt, "not usable");
    std::fs::rename(&away, &img.dir).unwrap();
    // Hostile records: the host's / as the image, a path with .., a directory the digest does not name.
    // Built as JSON: drums-ckpt's line with one member replaced, hostile input to drums-restore.
    let c_json: Value = serde_json::from_str(&ckpt).unwrap();
    for (field, value) in [("dir", json!("/")), ("root", json!("/")), ("dir", json!(format!("{}/../desktop", img.dir.display())))] {
        let mut bad = c_json.clone();
        bad["image"][field] = value;
        assert_refused(&bad.to_string(), &format!("image.{field}"));
    }
    // With the image as it was, the same checkpoint restores.
    let sib = restore_ready(&ckpt, &mut guard);
    assert!(sib.ready.as_ref().is_some_and(|r| r.ready), "{}", json(&sib.ready));
    drop(guard);

    // A file of the tree changed in place: verify says so (exit 1).
    let issue = img.dir.join("root/etc/issue");
    std::fs::remove_file(&issue).unwrap();
    std::fs::write(&issue, "changed in place\n").unwrap();
    let o = run("drums-overlay", &["image", "verify", img.dir.to_str().unwrap()], "");
    assert_eq!(o.status.code(), Some(1), "{}{}", text(&o.stdout), text(&o.stderr));

    // Unused, the test image is removed by a prune; the default image is the current one of its name. But
    // never while something is mounted inside it (a hand-made chroot's /proc): a prune does not remove
    // through a mount.
    drop(ckpt_dir);
    let inner = img.dir.join("root/proc");
    let st = Command::new("mount").args(["-t", "tmpfs", "drums-test", inner.to_str().unwrap()]).status().unwrap();
    assert!(st.success());
    std::fs::write(inner.join("keep"), "a file of another file system").unwrap();
    let o = run("drums-sweep", &["--prune-root-images"], "");
    let _ = Command::new("umount").arg(&inner).status();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let kept: PruneReport = decode(&text(&o.stdout));
    assert!(kept.kept.iter().any(|k| k.dir == img.dir && k.used_by.iter().any(|u| u.contains("below it"))), "{}", json(&kept));
    let o = run("drums-sweep", &["--prune-root-images"], "");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let done: PruneReport = decode(&text(&o.stdout));
    assert!(done.removed.contains(&img.dir), "{}", json(&done));
    assert!(!img.dir.exists());
    let default_dir = default_image().dir;
    assert!(done.kept.iter().any(|k| k.dir == default_dir), "{}", json(&done));
    assert!(default_dir.join("root/usr/bin/Xvfb").is_file());
    let left = inventory().new_since(&before);
    assert!(left.is_empty(), "left after destroy: {left:?}");
}
