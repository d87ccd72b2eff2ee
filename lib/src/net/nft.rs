//! The nftables side shared by a session's network policy (`egress`, which writes the session's table)
//! and its connection auditor (`audit`, which adds the addresses of allowed answers to the table's set):
//! the table's name, `nft -f -` and a table's deletion. It lives below both so that the auditor needs nothing of the policy
//! and the policy can start the auditor.

use crate::error::{Error, Result};
use std::io::Write;

/// Prefix of the per-session nftables tables.
pub const TABLE_PREFIX: &str = "drums_net_";

/// The nftables table (family inet) of the session in slot `slot`.
pub fn table_name(slot: u32) -> String {
    format!("{TABLE_PREFIX}{slot}")
}

/// Run `nft -f -` with `input` (the policy's table, the auditor's set updates).
pub fn nft(input: &str) -> Result<()> {
    let mut child = std::process::Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::env(format!("nft (package nftables) is needed for a session's network policy: {e}")))?;
    child.stdin.take().unwrap().write_all(input.as_bytes()).map_err(|e| Error::failed(format!("nft: {e}")))?;
    let o = child.wait_with_output().map_err(|e| Error::failed(format!("nft: {e}")))?;
    if !o.status.success() {
        return Err(Error::failed(format!("nft -f: {}", String::from_utf8_lossy(&o.stderr).trim())));
    }
    Ok(())
}

/// Delete the table `inet <name>` if it exists, in one nftables transaction sent to the kernel directly
/// (crate::net::nfbatch): `nft` would list the whole ruleset first, every table's chains, sets and
/// objects (nft 1.0.6 does for any `delete table`), which made a session's removal cost more with every
/// other session's table on the host. Idempotent: no such table is success.
pub fn delete_table(name: &str) -> Result<()> {
    let mut b = super::nfbatch::Batch::new(name);
    b.delete_table();
    match super::nfbatch::send(&b.finish()) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(Error::failed(format!("nftables: delete table inet {name}: {e}"))),
    }
}
