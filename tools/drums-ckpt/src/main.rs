//! drums-ckpt: checkpoint a ready session with CRIU.
use drums::cli;
use drums_ckpt::cli::{Args, Cmd};
use std::path::{Path, PathBuf};

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
        match a.cmd {
            Some(Cmd::Check { input }) => return check(input.as_deref()),
            Some(Cmd::Export { checkpoint, out, input }) => return export(checkpoint, out, input.as_deref()),
            Some(Cmd::Import { input }) => return import(input.as_deref()),
            None => {}
        }
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

fn check(input: Option<&Path>) -> drums::Result<()> {
    let mut all = true;
    for line in cli::read_lines(input)? {
        let c = drums::ckpt::bundle::check_record(&line)?;
        all &= c.restorable;
        cli::emit(&c)?;
    }
    if all {
        Ok(())
    } else {
        Err(drums::Error::CheckFailed("a checkpoint cannot be restored on this node (why_not says why)".into()))
    }
}

fn export(id: Option<String>, out: PathBuf, input: Option<&Path>) -> drums::Result<()> {
    cli::require_root()?;
    let c = match id {
        Some(id) => drums::session_io::load_checkpoint(&id)?,
        None => {
            let lines = cli::read_lines(input)?;
            let [line] = lines.as_slice() else { return Err(drums::Error::bad_input(format!("export takes one checkpoint record, {} given", lines.len()))) };
            drums::record::Checkpoint::parse(line)?
        }
    };
    let to = if out.as_os_str() == "-" { drums::ckpt::bundle::Out::Stdout } else { drums::ckpt::bundle::Out::File(out) };
    if let Some(rec) = drums::ckpt::bundle::export(&c, &to)? {
        cli::emit(&rec)?;
    }
    Ok(())
}

fn import(input: Option<&Path>) -> drums::Result<()> {
    cli::require_root()?;
    let c = match input {
        Some(p) if p.as_os_str() != "-" => drums::ckpt::bundle::import(std::fs::File::open(p).map_err(|e| drums::Error::io("open", p, e))?)?,
        _ => drums::ckpt::bundle::import(std::io::stdin().lock())?,
    };
    cli::emit(&c)
}
