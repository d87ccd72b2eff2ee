//! Chromium's own sandbox in a session with a user namespace of its own (issue 27): its renderers run in
//! nested user, PID and network namespaces with its seccomp filter stacked on the session's, the page
//! loads, and the nested namespaces the session's filter now allows give session root nothing new on the
//! host. A session without a user namespace keeps them refused and Chromium keeps `--no-sandbox`.
//! A session whose Chromium runs its sandbox cannot be checkpointed (CRIU does not dump nested PID
//! namespaces): drums-ckpt refuses it and leaves it as it was; a sibling restored with --userns from a
//! checkpoint made without the sandbox gets it back with `drums-desktop sandbox`.

use drums::record::Session;
use drums_tests::*;
use std::collections::BTreeMap;
use std::process::Command;


fn status(pid: i32) -> BTreeMap<String, String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.to_string(), v.trim().to_string())))
        .collect()
}

/// A process's arguments, split at NULs and spaces: Chromium rewrites its command line as one string.
fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default().split(|&b| b == 0 || b == b' ').filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

fn ns(pid: i32, kind: &str) -> u64 {
    drums::proc::ns_inode(pid, kind).unwrap()
}

/// The host PIDs of every descendant of `root`.
fn descendants(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = drums::proc::pids().into_iter().filter_map(|p| Some((p, status(p).get("PPid")?.parse().ok()?))).collect();
    let mut out = vec![];
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (c, _) in parents.iter().filter(|(_, pp)| *pp == p) {
            out.push(*c);
            frontier.push(*c);
        }
    }
    out
}

fn browser_pid(rec: &Session) -> i32 {
    let d = rec.desktop.as_ref().expect("the session has a desktop");
    d.processes.iter().find(|p| p.role == "chromium").and_then(|p| p.host_pid).expect("the desktop names Chromium's host pid")
}

fn exec_root(rec: &str, script: &str) -> std::process::Output {
    run("drums-ns", &["exec", "--", "sh", "-c", script], rec)
}

/// From /proc, as an attacker's renderer would find itself: Chromium of `rec` runs without --no-sandbox,
/// and each of its renderers is in user, PID and network namespaces of its own (its NSpid a level deeper
/// than the browser's), under seccomp mode 2 with Chromium's filter stacked on the session's, with no
/// capability, as an id of the session's range.
fn assert_renderers_sandboxed(rec: &Session) {
    let browser = browser_pid(rec);
    let args = cmdline(browser);
    assert!(!args.iter().any(|a| a == "--no-sandbox"), "Chromium of a userns session runs without --no-sandbox: {args:?}");
    assert_eq!(rec.desktop.as_ref().unwrap().chromium_sandbox, Some(true), "the record says the browser runs its sandbox");

    let bst = status(browser);
    let b_filters: u32 = bst["Seccomp_filters"].parse().unwrap();
    let renderers: Vec<i32> = descendants(browser).into_iter().filter(|&p| cmdline(p).iter().any(|a| a == "--type=renderer")).collect();
    assert!(!renderers.is_empty(), "the readiness page has a renderer: {:?}", descendants(browser).iter().map(|&p| (p, cmdline(p))).collect::<Vec<_>>());
    for &r in &renderers {
        let st = status(r);
        let nspid: Vec<&str> = st["NSpid"].split_whitespace().collect();
        let b_nspid: Vec<&str> = bst["NSpid"].split_whitespace().collect();
        assert!(nspid.len() > b_nspid.len(), "renderer {r} is in a PID namespace below the session's: NSpid {nspid:?}, the browser's {b_nspid:?}");
        assert_eq!(st["Seccomp"], "2", "renderer {r} runs under a seccomp filter");
        let filters: u32 = st["Seccomp_filters"].parse().unwrap();
        assert!(filters > b_filters, "renderer {r} has Chromium's own filter over the session's: {filters} filters, the browser {b_filters}");
        for kind in ["user", "pid", "net"] {
            assert_ne!(ns(r, kind), ns(browser, kind), "renderer {r} has a {kind} namespace of its own");
        }
        // Its nested user namespace lies inside the session's: its ids are still the session's range.
        let uid: u32 = st["Uid"].split_whitespace().next().unwrap().parse().unwrap();
        let range = rec.id_range.unwrap();
        assert!(uid >= range.base && uid < range.base + range.count, "renderer {r} runs as host uid {uid}, inside the range {range:?}");
        assert_eq!(st["CapEff"], "0000000000000000", "renderer {r} dropped every capability");
    }

}

#[test]
fn renderers_of_a_userns_session_run_in_chromiums_own_sandbox() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (line, rec) = userns_cold_session(&mut guard);
    // The root image's flags file decides for every Chromium started through Debian's wrapper; one built
    // before the flag followed the session adds --no-sandbox everywhere.
    let flags_file = rec.overlay.as_ref().unwrap().merged.join("etc/chromium.d/drums");
    let flags = std::fs::read_to_string(&flags_file).unwrap_or_default();
    assert!(flags.contains("unshare --user --pid --net"), "the root image's {} adds --no-sandbox in every session: the image predates the sandbox choice made by trying the nested namespaces; build it again (pipelines/image.sh, or pipelines/setup.sh)", flags_file.display());
    assert_renderers_sandboxed(&rec);

    // The page is there: drums-ready (screenshot and title) passes again on the session as it is now.
    let o = run("drums-ready", &[], &line);
    assert!(o.status.success(), "the userns session stays agent-ready: {}", text(&o.stderr));

    // Chromium started in the session by anything else (OSWorld's `google-chrome`, through the image's
    // /etc/chromium.d) makes the same choice from the session it runs in: no --no-sandbox here.
    let o = run("drums-ns", &["exec", "--user", "user", "--", "sh", "-c", "for f in /etc/chromium.d/*; do . $f; done; echo \"flags: $CHROMIUM_FLAGS\""], &line);
    let out = text(&o.stdout);
    assert!(out.contains("flags: ") && out.contains("--disable-sync"), "the image's flags are read: {out}{}", text(&o.stderr));
    assert!(!out.contains("--no-sandbox"), "the image's wrapper drops --no-sandbox in a userns session: {out}");
}

#[test]
fn a_session_without_its_own_user_namespace_keeps_nested_namespaces_refused() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (line, rec) = source_session(&mut guard); // --host-ids: no user namespace of its own
    assert!(rec.id_range.is_none());
    let args = cmdline(browser_pid(&rec));
    assert!(args.iter().any(|a| a == "--no-sandbox"), "Chromium of a host-root session keeps --no-sandbox: {args:?}");
    assert_eq!(rec.desktop.as_ref().unwrap().chromium_sandbox, Some(false), "the record says the browser runs unsandboxed");
    let o = exec_root(&line, "for f in U p n Up Un; do unshare -$f true 2>/dev/null; echo $f=$?; done; for f in /etc/chromium.d/*; do . $f; done; echo \"flags: $CHROMIUM_FLAGS\"");
    let out = text(&o.stdout);
    for f in ["U", "p", "n", "Up", "Un"] {
        assert!(out.lines().any(|l| l.starts_with(&format!("{f}=")) && !l.ends_with("=0")), "unshare -{f} was refused: {out}{}", text(&o.stderr));
    }
    assert!(out.contains("flags: ") && out.contains("--no-sandbox"), "the image's wrapper keeps --no-sandbox there: {out}");
}

/// Run as session root inside a userns session: a child makes Chromium's nested namespaces; the parent
/// (session root, with CAP_SETUID and CAP_SETGID in the session's user namespace) tries to map ids the
/// session does not have, then maps the session's own; the child, with every capability in its nested
/// user namespace, tries what would reach past it. One line per step: `name=errno` (0: it worked).
const NESTED_PROBE: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *a):
    r = getattr(libc, name)(*a)
    return 0 if r == 0 else ctypes.get_errno()
def out(k, v):
    print("%s=%s" % (k, v), flush=True)
NEWUSER, NEWPID, NEWNET, NEWNS = 0x10000000, 0x20000000, 0x40000000, 0x00020000
r1, w1 = os.pipe(); r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r1); os.close(w2)
    os.write(w1, str(call("unshare", NEWUSER | NEWPID | NEWNET)).encode()); os.close(w1)
    os.read(r2, 1)
    out("setresuid", call("setresuid", 0, 0, 0))
    caps = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff:")][0]
    out("capeff_full", int(int(caps, 16) == (1 << (int(open("/proc/sys/kernel/cap_last_cap").read()) + 1)) - 1))
    out("mount_tmpfs_etc", call("mount", b"none", b"/etc", b"tmpfs", 0, None))
    out("bind_proc_over_etc", call("mount", b"/proc", b"/etc", None, 0x1000, None))
    out("umount_proc", call("umount2", b"/proc", 2))
    out("unshare_mnt", call("unshare", NEWNS))
    out("sethostname", call("sethostname", b"pwned", 5))
    fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    out("setns_mnt", call("setns", fd, 0))
    for what, fn in [("chown_secret", lambda: os.chown("/tmp/host-secret", 0, 0)), ("read_secret", lambda: open("/tmp/host-secret").read()), ("chmod_secret", lambda: os.chmod("/tmp/host-secret", 0o666)), ("write_core_pattern", lambda: open("/proc/sys/kernel/core_pattern", "w").write("|/tmp/x"))]:
        try:
            fn(); out(what, 0)
        except OSError as e:
            out(what, e.errno)
    out("nested_again", call("unshare", NEWUSER))
    sys.exit(0)
os.close(w1); os.close(r2)
out("unshare_sandbox_flags", int(os.read(r1, 16)))
def write_map(f, text):
    try:
        with open("/proc/%d/%s" % (pid, f), "w") as m:
            m.write(text)
        return 0
    except OSError as e:
        return e.errno
out("map_id_outside_range", write_map("uid_map", "0 65536 1\n"))
out("map_more_than_range", write_map("uid_map", "0 0 65537\n"))
out("map_session_ids", write_map("uid_map", "0 0 65536\n"))
out("map_session_gids", write_map("gid_map", "0 0 65536\n"))
os.write(w2, b"g"); os.close(w2)
_, st = os.waitpid(pid, 0)
out("child_exit", os.waitstatus_to_exitcode(st))
"#;

#[test]
fn nested_namespaces_give_session_root_nothing_new_on_the_host() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (line, rec) = userns_cold_session(&mut guard);
    let merged = &rec.overlay.as_ref().unwrap().merged;
    // A host file of the host's uid 1000 (mode 0600) in the session's tree.
    let victim = merged.join("tmp/host-secret");
    std::fs::write(&victim, b"host uid 1000's secret\n").unwrap();
    std::os::unix::fs::chown(&victim, Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let host_mounts = |pid: i32| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap().lines().map(|l| l.split_whitespace().skip(3).take(2).collect::<Vec<_>>().join(" ")).collect();
        v.sort();
        v
    };
    let host_links = || text(&Command::new("ip").args(["-o", "link", "show"]).output().unwrap().stdout).lines().filter_map(|l| l.split(':').nth(1).map(|s| s.trim().to_string())).collect::<Vec<_>>();
    let init = rec.ns.as_ref().unwrap().init_pid;
    let (mounts_before, session_mounts_before, links_before) = (host_mounts(1), host_mounts(init), host_links());
    let core_pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap();
    let hostname = std::fs::read_to_string(format!("/proc/{init}/root/etc/hostname")).unwrap();

    let o = run("drums-ns", &["exec", "--", "python3", "-c", NESTED_PROBE], &line);
    let out = text(&o.stdout);
    let got: BTreeMap<String, i32> = out.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_string(), v.parse().unwrap_or(-1))).collect();
    let want_ok = ["unshare_sandbox_flags", "map_session_ids", "map_session_gids", "setresuid", "nested_again", "child_exit"];
    let want_refused = ["map_id_outside_range", "map_more_than_range", "mount_tmpfs_etc", "bind_proc_over_etc", "umount_proc", "unshare_mnt", "sethostname", "setns_mnt", "chown_secret", "read_secret", "chmod_secret", "write_core_pattern"];
    for k in want_ok {
        assert_eq!(got.get(k), Some(&0), "{k} works in a userns session: {out}{}", text(&o.stderr));
    }
    assert_eq!(got.get("capeff_full"), Some(&1), "the nested namespace's root holds every capability there, so what stops it is the boundary: {out}");
    for k in want_refused {
        assert!(got.get(k).is_some_and(|&e| e != 0), "{k} is refused: {out}{}", text(&o.stderr));
    }

    // The host and the session's own mounts, the host's links, core_pattern, the hostname and the file:
    // as they were.
    assert_eq!(host_mounts(1), mounts_before, "the host's mount table is unchanged");
    assert_eq!(host_mounts(init), session_mounts_before, "the session's mount table is unchanged");
    assert_eq!(host_links(), links_before, "the host's links are unchanged");
    assert_eq!(std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap(), core_pattern);
    assert_eq!(std::fs::read_to_string(format!("/proc/{init}/root/etc/hostname")).unwrap(), hostname);
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&victim).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777, std::fs::read(&victim).unwrap()), (1000, 1000, 0o600, b"host uid 1000's secret\n".to_vec()));
    std::fs::remove_file(&victim).unwrap();
}

/// What a checkpoint leaves on the host: the entries of the checkpoint and mapped-file roots.
fn checkpoint_entries() -> Vec<String> {
    let mut v: Vec<String> = [drums::state::checkpoint_root(), drums::mapped::mapped_root()]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten().map(|e| e.path().display().to_string()))
        .collect();
    v.sort();
    v
}

/// drums-ckpt on a session whose Chromium runs its sandbox: refused (exit 7, not_implemented) with the
/// reason named, before anything is made or frozen; the session stays live, its renderers as they were,
/// agent-ready, and the checkpoint roots and the host's inventory are as before.
fn assert_checkpoint_refused(line: &str, rec: &Session) {
    let renderers_before: Vec<i32> = descendants(browser_pid(rec)).into_iter().filter(|&p| cmdline(p).iter().any(|a| a == "--type=renderer")).collect();
    let (entries, inv) = (checkpoint_entries(), inventory());
    // Without --leave-running: a dump that went through would end the source.
    let o = run_owned_tool("drums-ckpt", &["--clean"], line);
    assert_eq!(o.status.code(), Some(7), "the checkpoint of a sandboxed session is refused: {}{}", text(&o.stdout), text(&o.stderr));
    assert!(o.stdout.is_empty(), "no checkpoint record: {}", text(&o.stdout));
    let e = error_record(&o.stderr);
    assert_eq!(e.kind, "not_implemented");
    for word in ["nested", "Chromium's own sandbox", "Can't dump nested pid namespace", "drums-desktop sandbox"] {
        assert!(e.message.contains(word), "the error says why and what to do instead ({word}): {}", e.message);
    }
    assert_eq!(checkpoint_entries(), entries, "nothing is left in the checkpoint roots");
    let after = inventory();
    assert_eq!((after.mounts, after.links, after.cgroups, after.state_dirs), (inv.mounts, inv.links, inv.cgroups, inv.state_dirs), "the host holds what it held");
    for &r in &renderers_before {
        assert!(status(r).get("State").is_some_and(|s| !s.starts_with('T') && !s.starts_with('Z')), "renderer {r} runs on, not left frozen or dead: {:?}", status(r));
    }
    let o = run("drums-ready", &[], line);
    assert!(o.status.success(), "the session stays agent-ready: {}", text(&o.stderr));
}

#[test]
fn a_session_whose_chromium_runs_its_sandbox_is_not_checkpointed() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    let (line, rec) = userns_cold_session(&mut guard);
    assert_renderers_sandboxed(&rec);
    assert_checkpoint_refused(&line, &rec);
}

#[test]
fn a_restored_userns_sibling_gets_chromiums_sandbox_back_with_drums_desktop_sandbox() {
    require_root();
    let _lock = session_lock();
    let mut guard = Sessions::default();
    // The checkpoint is of an ordinary session, whose Chromium runs with --no-sandbox: CRIU can dump it.
    let (source, src) = source_session(&mut guard);
    assert!(cmdline(browser_pid(&src)).iter().any(|a| a == "--no-sandbox"));
    let ckpt = run_ok("drums-ckpt", &["--leave-running"], &source);
    let _dir = CheckpointDir(one::<drums::record::Checkpoint>(&ckpt).dir);
    let o = run_owned_tool("drums-restore", &["--userns", "--ready"], &ckpt);
    guard.add(&text(&o.stdout));
    assert!(o.status.success(), "drums-restore --userns --ready: {}", text(&o.stderr));
    let sibling = text(&o.stdout).trim().to_string();
    let before: Session = one(&sibling);
    let old_browser = browser_pid(&before);
    let old_start = drums::proc::start_time(old_browser).unwrap();
    assert!(cmdline(old_browser).iter().any(|a| a == "--no-sandbox"), "the restored Chromium is its checkpoint's, unsandboxed");
    assert_eq!(before.desktop.as_ref().unwrap().chromium_sandbox, Some(false), "the sibling's record says so: its checkpoint's value");

    // Nested PID namespaces made by anything else in the session are found too: one made through
    // drums-ns exec, in a sibling whose Chromium runs unsandboxed, is refused with the same reason.
    let init = before.ns.as_ref().unwrap().init_pid;
    let o = run("drums-ns", &["exec", "--", "sh", "-c", "unshare -Upf sleep 120 >/dev/null 2>&1 & sleep 0.5; echo started"], &sibling);
    assert!(text(&o.stdout).contains("started"), "{}{}", text(&o.stdout), text(&o.stderr));
    let nested = drums::proc::in_nested_pidns(init);
    assert!(!nested.is_empty(), "the sleep runs in a nested PID namespace");
    let o = run_owned_tool("drums-ckpt", &["--leave-running"], &sibling);
    assert_eq!(o.status.code(), Some(7), "{}", text(&o.stderr));
    assert!(error_record(&o.stderr).message.contains("nested"), "{}", text(&o.stderr));
    for (p, _) in nested {
        unsafe { libc::kill(p, libc::SIGKILL) };
    }

    // A session without its own user namespace is refused, its Chromium left running.
    let o = run("drums-desktop", &["sandbox"], &source);
    assert_eq!(o.status.code(), Some(3), "drums-desktop sandbox on a session without a user namespace: {}", text(&o.stderr));
    assert!(error_record(&o.stderr).message.contains("no user namespace of its own"));
    assert!(drums::proc::start_time(browser_pid(&src)).is_some(), "the source's Chromium still runs");

    let o = run("drums-desktop", &["sandbox"], &sibling);
    assert!(o.status.success(), "drums-desktop sandbox: {}", text(&o.stderr));
    let line = text(&o.stdout).trim().to_string();
    let rec: Session = one(&line);
    assert_ne!(browser_pid(&rec), old_browser, "the record names the new Chromium");
    assert!(!drums::proc::alive(old_browser, old_start), "the old Chromium is gone");
    let o = run("drums-ready", &[], &line);
    assert!(o.status.success(), "the sibling is agent-ready on its sandboxed Chromium: {}", text(&o.stderr));
    let line = text(&o.stdout).trim().to_string();
    assert_renderers_sandboxed(&rec);
    // The guest answers and starts programs as before.
    let o = run("drums-ns", &["exec", "--user", "user", "--", "true"], &line);
    assert!(o.status.success(), "{}", text(&o.stderr));

    // Asked again: nothing to do, the same Chromium.
    let o = run("drums-desktop", &["sandbox"], &line);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(browser_pid(&one::<Session>(text(&o.stdout).trim())), browser_pid(&rec));

    // And such a sibling is not checkpointed either.
    assert_checkpoint_refused(&line, &rec);
}
