//! drums-view: a session's VNC server on demand, and the host's overview page.
use drums::cli;
use drums_view::cli::{Args, Cmd};

fn main() {
    cli::run("drums-view", |a: Args| {
        cli::require_root()?;
        match a.cmd {
            Cmd::Vnc { session, input } => cli::emit(&drums::view::start(&drums::session_io::load(&session)?, input)?),
            Cmd::Stop { session } => cli::emit(&drums::view::stop(&drums::session_io::load(&session)?)?),
            Cmd::Serve { listen, novnc, results } => {
                let view_exe = std::env::current_exe().map_err(|e| drums::Error::io("find", "/proc/self/exe", e))?;
                let sweep_exe = view_exe.with_file_name("drums-sweep");
                let o = drums::view::serve::ServeOptions { listen, novnc, view_exe, sweep_exe, results };
                drums::view::serve::serve(o, |rec| cli::emit(rec))
            }
        }
    })
}
