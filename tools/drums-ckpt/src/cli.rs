//! drums-ckpt's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS of
//! man/drums-ckpt.1 from it without running the tool (README, "Adding a tool").
use clap::{Parser, Subcommand};
use drums::cli;
use std::path::PathBuf;

/// Dump the session on stdin with CRIU into a checkpoint (images and a read-only layer under
/// $DRUMS_CHECKPOINT_DIR) and print the checkpoint record. Without --leave-running the source session is
/// destroyed after the dump. The subcommands check whether this node can restore a checkpoint and move
/// checkpoints between nodes.
#[derive(Parser)]
#[command(name = "drums-ckpt", version = cli::VERSION_TEXT, args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: Option<Cmd>,
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

#[derive(Subcommand)]
pub enum Cmd {
    /// Print whether this node can restore each checkpoint record on input (made here or on another
    /// node): its root image and runtime layer by digest, CRIU's version, the kernel, the CPU. Exits 1
    /// when one cannot be.
    Check {
        /// Checkpoint records, one per line (default: stdin).
        #[arg(value_name = "RECORDS")]
        input: Option<PathBuf>,
    },
    /// Write a checkpoint of this node as one bundle (a header line, then a tar stream of its files) for
    /// drums-ckpt import on another node.
    Export {
        /// The checkpoint to export; default: the checkpoint record on input.
        #[arg(long, value_name = "ID")]
        checkpoint: Option<String>,
        /// Where to write the bundle: a file (written as FILE.partial, then renamed; a record of it is
        /// printed) or - for stdout (nothing else is printed there).
        #[arg(long, value_name = "FILE|-")]
        out: PathBuf,
        /// A checkpoint record (default: stdin), when --checkpoint is not given.
        #[arg(value_name = "RECORD")]
        input: Option<PathBuf>,
    },
    /// Put the checkpoint of a bundle under this node's roots, after checking that this node can restore
    /// it and that every file matches the sender's manifest; print its record as it is here.
    Import {
        /// The bundle (default: stdin).
        #[arg(value_name = "BUNDLE")]
        input: Option<PathBuf>,
    },
}
