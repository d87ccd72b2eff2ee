//! drums-sweep: destroy the sessions named on input, or (with no input) find and remove orphans.
use clap::Parser;
use drums::destroy::{self, DestroyOptions};
use std::path::PathBuf;
use std::time::Duration;

/// Destroy sessions from their ledgers; with no session on input, sweep away orphaned sessions and
/// unledgered leftovers that carry Drums' names. Prints a JSON report; exits 1 when something was left.
#[derive(Parser)]
#[command(name = "drums-sweep", version = drums::cli::VERSION_TEXT)]
struct Args {
    /// Session records to destroy (default: stdin). No records (empty input, a terminal): sweep orphans.
    input: Option<PathBuf>,
    /// Destroy the session with this id (repeatable); stdin is not read.
    #[arg(long = "session", value_name = "ID")]
    sessions: Vec<String>,
    /// Destroy the session whose state directory is DIR (repeatable); stdin is not read.
    #[arg(long = "state-dir", value_name = "DIR")]
    state_dirs: Vec<PathBuf>,
    /// Sweep orphans without reading stdin (what the cron job runs).
    #[arg(long)]
    orphans: bool,
    /// Print the plan and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also remove checkpoint images listed in the ledgers (kept by default).
    #[arg(long)]
    remove_images: bool,
    /// Remove the root images and runtime layers nothing uses (no session, no checkpoint, no image
    /// name), and nothing else; never part of the orphan sweep.
    #[arg(long, conflicts_with_all = ["input", "sessions", "state_dirs", "orphans", "remove_images"])]
    prune_root_images: bool,
    /// Grace period: leave alone sessions and unledgered objects younger than this (seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    older_than: u64,
    /// Time to live for sessions whose ledger sets none (seconds); default: no limit.
    #[arg(long, value_name = "SECONDS")]
    ttl: Option<u64>,
    /// How long to wait for a killed session's processes to go (seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    kill_wait: u64,
}

fn main() {
    drums::cli::run("drums-sweep", |a: Args| {
        drums::cli::require_root()?;
        if a.prune_root_images {
            return drums::cli::emit(&drums::image::prune(a.dry_run)?);
        }
        destroy::request::run(&destroy::request::Request {
            input: a.input,
            session_ids: a.sessions,
            state_dirs: a.state_dirs,
            orphans: a.orphans,
            destroy: DestroyOptions { remove_images: a.remove_images, dry_run: a.dry_run, kill_wait: Duration::from_secs(a.kill_wait), ..DestroyOptions::default() },
            older_than: Duration::from_secs(a.older_than),
            ttl: a.ttl,
        })
    })
}
