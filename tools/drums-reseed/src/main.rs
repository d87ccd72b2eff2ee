//! drums-reseed: clone hygiene for restored siblings.
use clap::Parser;
use drums::cli;
use std::path::PathBuf;

/// Make each restored session on stdin unique again: hostname and machine id, wipe-on-fork pages zeroed,
/// the guest's and Python processes' RNGs reseeded, and, for a clean checkpoint, the browser's cookies and
/// storage cleared and its page moved into a fresh renderer. Prints each record with a `reseed` section.
#[derive(Parser)]
#[command(name = "drums-reseed", version = cli::VERSION_TEXT)]
struct Args {
    /// Hostname to give the session (default: its id). Only with one record.
    #[arg(long)]
    hostname: Option<String>,
    /// Leave the browser alone.
    #[arg(long)]
    no_browser: bool,
    /// Record file (default: stdin).
    input: Option<PathBuf>,
}

fn main() {
    cli::run("drums-reseed", |a: Args| {
        let sessions = cli::read_sessions(a.input.as_deref())?;
        if a.hostname.is_some() && sessions.len() > 1 {
            return Err(drums::Error::Usage("--hostname takes one record; siblings need distinct names".into()));
        }
        cli::require_root()?;
        for mut s in sessions {
            drums::reseed::reseed(&mut s, &drums::reseed::ReseedOptions { hostname: a.hostname.clone(), browser: !a.no_browser })?;
            drums::session_io::emit_session(&s)?;
        }
        Ok(())
    })
}
