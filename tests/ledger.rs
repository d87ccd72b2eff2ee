//! A ledger line drums-sweep does not understand (a later format version, an entry kind it does not know)
//! makes it refuse that session with exit 8, report why, and leave every resource of it in place; once the
//! line is gone the same destroy removes everything. The session is made by hand under temporary roots
//! (DRUMS_STATE_DIR), with real resources: a tmpfs mounted in its state directory, a directory, an address
//! slot file. Only explicit destroys run here, never the orphan sweep: with a temporary state root every
//! real session on the machine would look unledgered to it.

use drums::destroy::DestroyReport;
use drums::ledger::{Ledger, Resource};
use drums::record::Owner;
use drums_tests::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const SESSION: &str = "d-1edfe5000001";

struct Roots {
    base: PathBuf,
    state: PathBuf,
}

impl Roots {
    fn new(name: &str) -> Roots {
        let base = std::env::temp_dir().join(format!("drums-ledger-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let r = Roots { state: base.join("state"), base };
        std::fs::create_dir_all(r.state.join("slots")).unwrap();
        r
    }
    fn session(&self) -> PathBuf {
        self.state.join("sessions").join(SESSION)
    }
    fn sweep(&self) -> Output {
        Command::new(tool("drums-sweep"))
            .arg("--state-dir")
            .arg(self.session())
            .env("DRUMS_STATE_DIR", &self.state)
            .env("DRUMS_CHECKPOINT_DIR", self.base.join("checkpoints"))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for Roots {
    fn drop(&mut self) {
        // Only after a failed assertion is the tmpfs still there.
        let _ = Command::new("umount").arg("-l").arg(self.session().join("rw")).stderr(Stdio::null()).status();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// The session's resources, ledgered before each is made, as the tools do.
fn make_session(r: &Roots) -> (Ledger, Vec<Resource>) {
    let me = std::process::id() as i32;
    let l = Ledger::create(&r.session(), SESSION, Owner { pid: me, start_time: drums::proc::start_time(me).unwrap() }, None).unwrap();
    let rw = r.session().join("rw");
    let dir = r.session().join("scratch");
    let slot = r.state.join("slots/7");
    let res = vec![Resource::Dir { path: dir.clone() }, Resource::Mount { path: rw.clone() }, Resource::Slot { index: 7, path: slot.clone() }];
    for x in &res {
        l.create_res(x.clone()).unwrap();
    }
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(&rw).unwrap();
    let o = Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "drums-ledger-test"]).arg(&rw).output().unwrap();
    assert!(o.status.success(), "mount tmpfs: {}", text(&o.stderr));
    std::fs::write(&slot, SESSION).unwrap();
    l.phase("live").unwrap();
    (l, res)
}

fn mounted(p: &Path) -> bool {
    drums::mountinfo::read().unwrap().iter().any(|m| m.mount_point == p)
}

/// What is missing of the session's resources.
fn missing(r: &Roots) -> Vec<String> {
    let mut gone = vec![];
    for p in [r.session().join("scratch"), r.state.join("slots/7"), r.session().join(drums::ledger::FILE_NAME)] {
        if !p.exists() {
            gone.push(p.display().to_string());
        }
    }
    if !mounted(&r.session().join("rw")) {
        gone.push("the tmpfs on rw".into());
    }
    gone
}

#[test]
fn a_line_not_understood_makes_destroy_refuse_the_session_and_keep_all_of_it() {
    require_root();
    for (what, line) in [
        ("a line of a later format version", r#"{"v":2,"op":"create","t":1.0,"res":{"kind":"mount","path":"/run/drums-v2"}}"#),
        ("an entry kind this version does not know", r#"{"v":1,"op":"create","t":1.0,"res":{"kind":"volume","name":"drums-vol0"}}"#),
    ] {
        let r = Roots::new("refused");
        let (l, res) = make_session(&r);
        let ledger_before = std::fs::read_to_string(l.path()).unwrap();
        std::fs::OpenOptions::new().append(true).open(l.path()).unwrap().write_all(format!("{line}\n").as_bytes()).unwrap();

        let o = r.sweep();
        assert_eq!(o.status.code(), Some(drums::error::exit::NOT_UNDERSTOOD), "{what}: {}", text(&o.stderr));
        let err = error_record(&o.stderr);
        assert_eq!((err.kind.as_str(), err.exit), ("not_understood", 8), "{what}: {}", json(&err));
        assert!(err.message.contains("line 6"), "{what}: the message names the line: {}", json(&err));
        // Decoding as a DestroyReport checks its `type` is "destroy".
        let reports: Vec<DestroyReport> = decode_lines(&o.stdout);
        assert_eq!(reports.len(), 1, "{what}: one report: {reports:?}");
        let rep = &reports[0];
        assert_eq!(rep.session.as_deref(), Some(SESSION), "{what}: {}", json(rep));
        assert!(rep.refused.as_deref().is_some_and(|m| m.contains("line 6")), "{what}: the report says why: {}", json(rep));
        assert_eq!(rep.found, res, "{what}: the report lists what the understood lines hold");
        assert!(rep.removed.is_empty(), "{what}: {}", json(rep));
        assert_eq!(missing(&r), Vec::<String>::new(), "{what}: a refused destroy removed something");
        let ledger_after = std::fs::read_to_string(l.path()).unwrap();
        assert_eq!(ledger_after, format!("{ledger_before}{line}\n"), "{what}: the refused destroy wrote to the ledger");

        // Fixed (the line taken out again), the same destroy removes everything.
        std::fs::write(l.path(), &ledger_before).unwrap();
        let o = r.sweep();
        assert_eq!(o.status.code(), Some(0), "{what}: {} {}", text(&o.stdout), text(&o.stderr));
        assert!(!mounted(&r.session().join("rw")), "{what}: the tmpfs is unmounted");
        assert!(!r.session().exists() && !r.state.join("slots/7").exists(), "{what}: the state directory and the slot are gone");
    }
}
