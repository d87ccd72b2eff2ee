//! drums-reseed's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS of
//! man/drums-reseed.1 from it without running the tool (README, "Adding a tool").
use clap::Parser;
use drums::cli;
use std::path::PathBuf;

/// Make each restored session on stdin unique again: hostname and machine id, wipe-on-fork pages zeroed,
/// the guest's and Python processes' RNGs reseeded, and, for a clean checkpoint, the browser's cookies and
/// storage cleared and its page moved into a fresh renderer. Prints each record with a `reseed` section.
#[derive(Parser)]
#[command(name = "drums-reseed", version = cli::VERSION_TEXT)]
pub struct Args {
    /// Hostname to give the session (default: its id). Only with one record.
    ///
    /// 1 to 64 of a-z, A-Z, 0-9, - and ., starting with a letter or digit; anything else is refused
    /// (exit 3).
    #[arg(long, value_name = "NAME")]
    pub hostname: Option<String>,
    /// Leave the browser alone (step 5).
    #[arg(long)]
    pub no_browser: bool,
    /// Session records, one per line (default: stdin).
    #[arg(value_name = "RECORDS")]
    pub input: Option<PathBuf>,
}
