//! drums-net: show or change a live session's network policy. Parses arguments and calls
//! drums::net::egress.
use drums::cli;
use drums_net::cli::{Args, Cmd};

fn main() {
    cli::run("drums-net", |a: Args| match a.cmd {
        Cmd::Show { session, input } => {
            let sessions = match session {
                Some(id) => vec![drums::session_io::load(&id)?],
                None => cli::read_sessions(input.as_deref())?,
            };
            cli::require_root()?;
            for s in &sessions {
                cli::emit(&drums::net::egress::status(s))?;
            }
            Ok(())
        }
        Cmd::Set { session, net, input } => {
            let o = net.options()?;
            let mut s = match session {
                Some(id) => drums::session_io::load(&id)?,
                None => cli::read_session(input.as_deref())?,
            };
            cli::require_root()?;
            drums::net::egress::set(&mut s, &o)?;
            drums::session_io::emit_session(&s)
        }
        Cmd::Audit { state_dir, session, slot, pid_file, ready_fd } => {
            cli::require_root()?;
            drums::record::check_session_id(&session).map_err(|why| drums::error::Error::bad_input(format!("--session: {why}")))?;
            drums::net::audit::run(&state_dir, &session, slot, &pid_file, ready_fd)
        }
    })
}
