//! Moving a checkpoint between nodes with drums-ckpt check, export and import (drums-ckpt(1), "Moving a
//! checkpoint"), on one machine standing in for two: node A and node B are two sets of roots
//! ($DRUMS_CHECKPOINT_DIR, $DRUMS_MAPPED_DIR). A checkpoint made on A is exported, imported on B, and a
//! sibling restored from B's copy becomes agent-ready. A damaged, truncated or foreign bundle is refused
//! with a clear error and leaves nothing under B's roots; a killed import leaves only what the sweep
//! removes.

use drums_tests::*;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// One node's roots, under a directory removed at the end.
struct Node {
    ck: PathBuf,
    mp: PathBuf,
}

impl Node {
    fn cmd(&self, name: &str, args: &[&str]) -> Command {
        let mut c = Command::new(tool(name));
        c.args(args)
            .env("PATH", path_with_tools())
            .env("DRUMS_OWNER", std::process::id().to_string())
            .env("DRUMS_CHECKPOINT_DIR", &self.ck)
            .env("DRUMS_MAPPED_DIR", &self.mp);
        c
    }
    fn run(&self, name: &str, args: &[&str], stdin: &[u8]) -> Output {
        let mut child = self.cmd(name, args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let _ = child.stdin.take().unwrap().write_all(stdin);
        child.wait_with_output().unwrap()
    }
    fn run_ok(&self, name: &str, args: &[&str], stdin: &[u8]) -> String {
        let o = self.run(name, args, stdin);
        assert!(o.status.success(), "{name} {args:?}: {}", text(&o.stderr));
        text(&o.stdout)
    }
    /// Everything under the node's two roots (the roots themselves may exist).
    fn held(&self) -> Vec<String> {
        [&self.ck, &self.mp].iter().flat_map(|r| std::fs::read_dir(r).into_iter().flatten().flatten().map(|e| e.path().display().to_string())).collect()
    }
}

struct Gone(PathBuf);
impl Drop for Gone {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The error object of a failed run, after checking its exit code.
fn refused(o: &Output, code: i32) -> drums::error::ErrorRecord {
    assert_eq!(o.status.code(), Some(code), "stdout {} stderr {}", text(&o.stdout), text(&o.stderr));
    error_record(&o.stderr)
}

#[test]
fn a_checkpoint_moves_to_another_node_and_a_sibling_restores_there() {
    require_root();
    let _lock = session_lock();
    let base = PathBuf::from(format!("/var/lib/drums/ckpt-move-test-{}", std::process::id()));
    let _gone = Gone(base.clone());
    let a = Node { ck: base.join("a/checkpoints"), mp: base.join("a/mapped") };
    let b = Node { ck: base.join("b/checkpoints"), mp: base.join("b/mapped") };
    let mut sessions = Sessions::default();
    let (cold, _) = source_session(&mut sessions);
    let ckpt = a.run_ok("drums-ckpt", &[], cold.as_bytes());
    sessions.0.clear(); // drums-ckpt destroyed the source
    let c: drums::record::Checkpoint = one(&ckpt);
    assert!(c.dir.starts_with(&a.ck) && c.dir.join("cpuinfo.img").is_file(), "the dump describes its CPU: {}", c.dir.display());

    // check: restorable here, CPU compared by CRIU; a record made on another kernel is not.
    let chk: Value = one(&a.run_ok("drums-ckpt", &["check"], ckpt.as_bytes()));
    assert_eq!((chk["type"].as_str(), chk["restorable"].as_bool(), chk["cpu"].as_str()), (Some("checkpoint_check"), Some(true), Some("compatible")), "{chk}");
    let mut other: Value = serde_json::from_str(ckpt.trim()).unwrap();
    other["kernel"] = "5.10.0-elsewhere".into();
    let o = a.run("drums-ckpt", &["check"], other.to_string().as_bytes());
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let chk: Value = one(&text(&o.stdout));
    assert!(chk["restorable"] == false && chk["why_not"][0].as_str().is_some_and(|w| w.contains("kernel here is") && w.contains("5.10.0-elsewhere")), "{chk}");

    // export to a file: a record of it.
    let file = base.join("bundle");
    let ex: Value = one(&a.run_ok("drums-ckpt", &["export", "--checkpoint", &c.id, "--out", file.to_str().unwrap()], b""));
    let bundle = std::fs::read(&file).unwrap();
    assert_eq!((ex["type"].as_str(), ex["bytes"].as_u64()), (Some("checkpoint_export"), Some(bundle.len() as u64)), "{ex}");
    assert!(!Path::new(&format!("{}.partial", file.display())).exists());
    // To stdout: the same bundle, and nothing else.
    let o = a.run("drums-ckpt", &["export", "--out", "-"], ckpt.as_bytes());
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(o.stdout.len(), bundle.len(), "stdout holds the bundle only");

    // A damaged byte in the archive, a truncated stream, a foreign image: refused, nothing left on B.
    let mut damaged = bundle.clone();
    let mid = damaged.len() / 2;
    damaged[mid] ^= 0xff;
    let e = refused(&b.run("drums-ckpt", &["import"], &damaged), 3);
    assert!(e.message.contains("differ from the sender's manifest") || e.message.contains("damaged"), "{}", e.message);
    assert_eq!(b.held(), Vec::<String>::new());
    let e = refused(&b.run("drums-ckpt", &["import"], &bundle[..bundle.len() / 3]), 3);
    assert!(e.message.contains("archive"), "{}", e.message);
    assert_eq!(b.held(), Vec::<String>::new());
    let nl = bundle.iter().position(|&x| x == b'\n').unwrap();
    let mut header: Value = serde_json::from_slice(&bundle[..nl]).unwrap();
    header["record"]["image"]["digest"] = format!("sha256:{}", "0".repeat(64)).into();
    let e = refused(&b.run("drums-ckpt", &["import"], &[header.to_string().as_bytes(), &bundle[nl..]].concat()), 3);
    assert!(e.message.contains("image"), "a digest that does not match its directory's name: {}", e.message);
    let mut header: Value = serde_json::from_slice(&bundle[..nl]).unwrap();
    header["record"]["kernel"] = "5.10.0-elsewhere".into();
    let e = refused(&b.run("drums-ckpt", &["import"], &[header.to_string().as_bytes(), &bundle[nl..]].concat()), 4);
    assert!(e.message.contains("cannot be restored on this node") && e.message.contains("5.10.0-elsewhere"), "{}", e.message);
    let e = refused(&b.run("drums-ckpt", &["import"], b"not a bundle\n"), 3);
    assert!(e.message.contains("malformed JSON"), "{}", e.message);
    assert_eq!(b.held(), Vec::<String>::new());

    // A killed import leaves its checkpoint unfinished (`.partial`), which the sweep would remove.
    let mut child = b.cmd("drums-ckpt", &["import"]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let mut sin = child.stdin.take().unwrap();
    sin.write_all(&bundle[..bundle.len() / 2]).unwrap();
    let partial = b.ck.join(format!("{}.partial", c.id));
    let t0 = std::time::Instant::now();
    while !partial.join("checkpoint").exists() {
        assert!(t0.elapsed().as_secs() < 30, "the import made no {}", partial.display());
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    drop(sin);
    let o = b.run("drums-sweep", &["--orphans", "--dry-run", "--older-than", "0"], b"");
    let sweep: Value = one(&text(&o.stdout));
    let planned: Vec<&str> = sweep["unledgered"]["planned"].as_array().unwrap().iter().filter_map(|l| l["name"].as_str()).collect();
    assert!(planned.contains(&partial.to_str().unwrap()), "the sweep would remove {}: {sweep}", partial.display());
    let left: Vec<String> = b.held().into_iter().filter(|p| *p != partial.display().to_string()).collect();
    assert_eq!(left, Vec::<String>::new(), "a killed import leaves nothing but its .partial");
    std::fs::remove_dir_all(&partial).unwrap();

    // The bundle whole: installed under B's roots, the record re-rooted, the files the same.
    let imported = b.run_ok("drums-ckpt", &["import", file.to_str().unwrap()], b"");
    let here: drums::record::Checkpoint = one(&imported);
    assert_eq!(here.dir, b.ck.join(&c.id));
    if let Some(m) = &c.mapped {
        let hm = here.mapped.as_ref().unwrap();
        assert_eq!(hm.dir, b.mp.join(&c.id));
        assert_eq!(std::fs::read_to_string(hm.dir.join("checkpoint")).unwrap(), here.dir.to_str().unwrap());
        assert_eq!(hm.files.len(), m.files.len());
    }
    let on_b = drums::ckpt::bundle::manifest(&here.dir, here.mapped.as_ref().map(|m| m.dir.as_path())).unwrap();
    let on_a = drums::ckpt::bundle::manifest(&c.dir, c.mapped.as_ref().map(|m| m.dir.as_path())).unwrap();
    let only_b: Vec<&String> = on_b.keys().filter(|k| on_a.get(*k) != on_b.get(*k)).collect();
    assert!(only_b.is_empty(), "files differ between A and B: {only_b:?}");
    // Again: the same files are already there; the record as it is here.
    let again: drums::record::Checkpoint = one(&b.run_ok("drums-ckpt", &["import"], &bundle));
    assert_eq!(again.dir, here.dir);

    // A sibling restored from B's copy, reseeded and agent-ready.
    let restored = b.run_ok("drums-restore", &[], imported.as_bytes());
    sessions.add(&restored);
    let ready: drums::record::Session = one(&b.run_ok("drums-ready", &[], b.run_ok("drums-reseed", &[], restored.as_bytes()).as_bytes()));
    assert_eq!(ready.restore.as_ref().map(|r| r.checkpoint.clone()), Some(c.id.clone()));
    assert!(ready.restore.as_ref().and_then(|r| r.checkpoint_dir.clone()).is_some_and(|d| d == here.dir), "restored from B's copy");
    drop(sessions);
}
