//! drums-reseed: clone hygiene for restored siblings.
use drums::cli;
use drums_reseed::cli::Args;

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
