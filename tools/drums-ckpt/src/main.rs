//! drums-ckpt: checkpoint a ready session with CRIU.
use drums::cli;
use drums_ckpt::cli::Args;

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
