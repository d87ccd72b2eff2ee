//! drums-sweep refuses every directory that is not a session's state directory, and checks them all before
//! it touches any. No session is started: the state and checkpoint roots are temporary directories
//! (DRUMS_STATE_DIR, DRUMS_CHECKPOINT_DIR) holding a checkpoint, a slot file and a ledger-less session
//! directory, which a destroy would remove whole.
//!
//! Only explicit destroys run here, never the orphan sweep: with a temporary state root every real session
//! on the machine would look unledgered to it.

use drums_tests::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Temporary Drums roots, removed when the test ends however it ends.
struct Roots {
    base: PathBuf,
    state: PathBuf,
    checkpoints: PathBuf,
}

const SESSION: &str = "d-0123456789ab";
const CHECKPOINT: &str = "c-0123456789ab";

impl Roots {
    fn new(name: &str) -> Roots {
        let base = std::env::temp_dir().join(format!("drums-sweep-refusals-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let r = Roots { state: base.join("state"), checkpoints: base.join("checkpoints"), base };
        std::fs::create_dir_all(r.checkpoint().join("images")).unwrap();
        std::fs::write(r.checkpoint().join("images/pages-1.img"), b"pages").unwrap();
        std::fs::create_dir_all(r.state.join("slots")).unwrap();
        std::fs::write(r.state.join("slots/7"), b"").unwrap();
        std::fs::create_dir_all(r.session()).unwrap();
        std::fs::write(r.session().join("record.json"), b"{}\n").unwrap();
        r
    }
    fn checkpoint(&self) -> PathBuf {
        self.checkpoints.join(CHECKPOINT)
    }
    fn session(&self) -> PathBuf {
        self.state.join("sessions").join(SESSION)
    }
    /// Everything that must survive a refused destroy.
    fn intact(&self) -> Vec<String> {
        let want = [self.checkpoint().join("images/pages-1.img"), self.state.join("slots/7"), self.session().join("record.json")];
        want.iter().filter(|p| !p.exists()).map(|p| p.display().to_string()).collect()
    }
    fn sweep(&self, args: &[&Path]) -> Output {
        let mut c = Command::new(tool("drums-sweep"));
        for a in args {
            c.arg("--state-dir").arg(a);
        }
        c.env("DRUMS_STATE_DIR", &self.state)
            .env("DRUMS_CHECKPOINT_DIR", &self.checkpoints)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for Roots {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn assert_refused(o: &Output, what: &str) {
    assert_eq!(o.status.code(), Some(3), "{what} must be refused with the bad-input code: {}", text(&o.stderr));
    assert!(o.stdout.is_empty(), "{what}: nothing is reported destroyed: {}", text(&o.stdout));
    let err = error_record(&o.stderr);
    assert_eq!(err.kind, "bad_input", "{what}: {}", json(&err));
    assert_eq!(err.field.as_deref(), Some("state_dir"), "{what}: {}", json(&err));
}

#[test]
fn directories_that_are_not_a_session_are_refused_and_left_intact() {
    require_root();
    let r = Roots::new("each");
    let sessions = r.state.join("sessions");
    let dotdot = r.session().join("../../slots");
    for (dir, what) in [
        (r.checkpoint(), "a checkpoint directory"),
        (r.checkpoints.clone(), "the checkpoint root"),
        (r.state.join("slots"), "the slots directory"),
        (sessions.clone(), "the sessions root"),
        (r.state.clone(), "the state root"),
        (r.session().join("tmpfs"), "a directory inside a session"),
        (dotdot, "a path climbing out of a session directory"),
    ] {
        let o = r.sweep(&[&dir]);
        assert_refused(&o, what);
        assert_eq!(r.intact(), Vec::<String>::new(), "refusing {what} removed something");
    }
}

#[test]
fn a_session_name_linking_elsewhere_is_refused() {
    require_root();
    let r = Roots::new("link");
    let link = r.state.join("sessions/d-ba9876543210");
    std::os::unix::fs::symlink(r.checkpoint(), &link).unwrap();
    assert_refused(&r.sweep(&[&link]), "a symbolic link named like a session");
    assert!(link.symlink_metadata().is_ok(), "the link itself is left too");
    assert_eq!(r.intact(), Vec::<String>::new());
}

#[test]
fn every_directory_is_checked_before_any_is_destroyed() {
    require_root();
    let r = Roots::new("all");
    // The session directory is valid and has no ledger: were it acted on, it would be removed whole.
    let o = r.sweep(&[&r.session(), &r.checkpoint()]);
    assert_refused(&o, "a list with a checkpoint directory in it");
    assert_eq!(r.intact(), Vec::<String>::new(), "a refused list touched its valid member");
    // The same session directory alone is destroyed: the refusals above were not for want of a usable setup.
    let o = r.sweep(&[&r.session()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!r.session().exists(), "the session directory is destroyed");
    assert!(r.checkpoint().join("images/pages-1.img").exists() && r.state.join("slots/7").exists());
}
