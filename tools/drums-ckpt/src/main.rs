//! drums-ckpt: checkpoint a ready session with CRIU.
use clap::Parser;
use drums::cli;
use std::path::PathBuf;

/// Dump the session on stdin with CRIU into a checkpoint (images and a read-only layer under
/// $DRUMS_CHECKPOINT_DIR) and print the checkpoint record. Without --leave-running the source session is
/// destroyed after the dump.
#[derive(Parser)]
#[command(name = "drums-ckpt", version = cli::VERSION_TEXT)]
struct Args {
    /// Keep the source session running after the dump.
    #[arg(long)]
    leave_running: bool,
    /// Declare the checkpoint clean: its browser state (cookies, storage, the page's renderer) may be
    /// erased by drums-reseed. Without it, restored siblings keep the browser state by design.
    #[arg(long)]
    clean: bool,
    /// Keep relocated read-only data (Chromium's 11.6 MB of `.data.rel.ro` per process) as pages in the
    /// images instead of moving it into mapped files under $DRUMS_MAPPED_DIR.
    #[arg(long)]
    no_mapped_files: bool,
    /// Record file (default: stdin).
    input: Option<PathBuf>,
}

fn main() {
    // Internal, not in --help: CRIU's post-dump action of a dump runs `drums-ckpt copy-layer` (drums-ckpt(1)).
    if std::env::args_os().nth(1).is_some_and(|a| a == "copy-layer") && std::env::args_os().len() == 2 {
        let code = match drums::ckpt::copy_layer_action() {
            Ok(()) => 0,
            Err(e) => cli::report("drums-ckpt copy-layer", &e),
        };
        std::process::exit(code);
    }
    cli::run("drums-ckpt", |a: Args| {
        let sessions = cli::read_sessions(a.input.as_deref())?;
        cli::require_root()?;
        for s in sessions {
            let c = drums::ckpt::checkpoint(&s, &drums::ckpt::CkptOptions { leave_running: a.leave_running, clean: a.clean, map_relocated: !a.no_mapped_files });
            cli::progress_done();
            cli::emit(&c?)?;
        }
        Ok(())
    })
}
