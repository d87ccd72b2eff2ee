//! What a record's ids and times are: ids that are safe as path components and interface names, times
//! in Unix seconds.

/// A session or checkpoint id: `d-` or `c-` and 1..32 of [a-z0-9], so it is safe as a path component
/// and fits in an interface name.
pub fn check_id(id: &str) -> Result<(), String> {
    let ok_prefix = id.starts_with("d-") || id.starts_with("c-");
    let rest = id.get(2..).unwrap_or("");
    if ok_prefix && !rest.is_empty() && rest.len() <= 32 && rest.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(format!("`{id}` is not a Drums id (d- or c- followed by 1 to 32 of a-z, 0-9)"))
    }
}

/// A session's id: `d-` and 1 to 32 of a-z, 0-9.
pub fn check_session_id(id: &str) -> Result<(), String> {
    check_id_of(id, "d-", "session", "c- names a checkpoint")
}

/// A checkpoint's id: `c-` and 1 to 32 of a-z, 0-9.
pub fn check_checkpoint_id(id: &str) -> Result<(), String> {
    check_id_of(id, "c-", "checkpoint", "d- names a session")
}

fn check_id_of(id: &str, prefix: &str, what: &str, other: &str) -> Result<(), String> {
    check_id(id)?;
    if !id.starts_with(prefix) {
        return Err(format!("`{id}` is not a {what} id ({prefix} followed by 1 to 32 of a-z, 0-9; {other})"));
    }
    Ok(())
}

/// Now, in Unix seconds: the unit of every time member of a record.
pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
