//! drums-ckpt's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS of
//! man/drums-ckpt.1 from it without running the tool (README, "Adding a tool").
use clap::Parser;
use drums::cli;
use std::path::PathBuf;

/// Dump the session on stdin with CRIU into a checkpoint (images and a read-only layer under
/// $DRUMS_CHECKPOINT_DIR) and print the checkpoint record. Without --leave-running the source session is
/// destroyed after the dump.
#[derive(Parser)]
#[command(name = "drums-ckpt", version = cli::VERSION_TEXT)]
pub struct Args {
    /// Keep the source session running after the dump.
    #[arg(long)]
    pub leave_running: bool,
    /// Declare the checkpoint clean: its browser state (cookies, storage, the page's renderer) may be
    /// erased by drums-reseed. Without it, restored siblings keep the browser state by design (erasing a
    /// real task's cookies would change the task).
    ///
    /// Without --leave-running, the source ends with the dump, so its browser's cookies and storage are
    /// erased just before it (Network.clearBrowserCookies, Storage.clearCookies,
    /// Storage.clearDataForOrigin for every storage type; the record's browser_erased): every sibling
    /// then starts without them, and its drums-reseed only renews the page's renderer instead of clearing
    /// them again (about 10 ms of each usable restore, with the new renderer starting alongside). If the
    /// dump then fails, the source runs on without them. With --leave-running, the source keeps its state
    /// and each sibling's drums-reseed erases it.
    #[arg(long)]
    pub clean: bool,
    /// Keep relocated read-only data (Chromium's 11.6 MB of `.data.rel.ro` per process) as pages in the
    /// images instead of moving it into mapped files under $DRUMS_MAPPED_DIR (drums-ckpt(1), "Mapped files").
    #[arg(long)]
    pub no_mapped_files: bool,
    /// Session records, one per line (default: stdin).
    #[arg(value_name = "RECORDS")]
    pub input: Option<PathBuf>,
}
