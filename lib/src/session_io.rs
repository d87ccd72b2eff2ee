//! Records on disk: a session's latest record in its state directory (written with every record a tool
//! prints, so that `--session ID` works), and a checkpoint's record in its directory.

use crate::error::{IoContext, Result};
use crate::record::{Checkpoint, Session};

pub const RECORD_FILE: &str = "record.json";
/// A checkpoint's record, in its directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";

/// Save the record beside the ledger (atomically), then print it.
pub fn emit_session(s: &Session) -> Result<()> {
    save(s)?;
    crate::cli::emit(s)
}

pub fn save(s: &Session) -> Result<()> {
    let path = s.state_dir.join(RECORD_FILE);
    let tmp = s.state_dir.join(format!(".{RECORD_FILE}.{}", std::process::id()));
    let mut line = serde_json::to_vec(s).expect("records serialize");
    line.push(b'\n');
    std::fs::write(&tmp, &line).ctx("write", &tmp)?;
    std::fs::rename(&tmp, &path).ctx("rename", &path)
}

/// The latest record of a live session, by id.
pub fn load(id: &str) -> Result<Session> {
    find(id)?.ok_or_else(|| crate::Error::bad_input(format!("{}: no such session", record_path(id).display())))
}

/// The latest record of a session, by id; `None` when the session is gone (no state directory, or no
/// record in it), which a caller may judge otherwise than a bad id or a bad record (drums-audit: incomplete).
pub fn find(id: &str) -> Result<Option<Session>> {
    crate::state::check_session_id(id).map_err(|m| crate::Error::bad_field("id", m))?;
    let path = record_path(id);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(crate::Error::bad_input(format!("{}: {e}", path.display()))),
    };
    Session::parse(text.trim()).map(Some)
}

fn record_path(id: &str) -> std::path::PathBuf {
    crate::state::session_dir(id).join(RECORD_FILE)
}

/// Read a checkpoint record from its directory, by id.
pub fn load_checkpoint(id: &str) -> Result<Checkpoint> {
    crate::state::check_checkpoint_id(id).map_err(|m| crate::Error::bad_field("id", m))?;
    let path = crate::state::checkpoint_root().join(id).join(CHECKPOINT_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| crate::Error::bad_input(format!("{}: {e} (no such checkpoint?)", path.display())))?;
    Checkpoint::parse(text.trim())
}
