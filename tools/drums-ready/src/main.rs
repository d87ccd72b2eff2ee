//! drums-ready: is the session agent-ready? A screenshot and the window titles, over X11.
use drums::cli;
use drums_ready::cli::Args;

fn main() {
    cli::run("drums-ready", |a: Args| {
        let blank = drums::ready::parse_blank(&a.blank, "--blank")?;
        drums::ready::check_threshold(a.threshold, "--threshold")?;
        let sessions = cli::read_sessions(a.input.as_deref())?;
        cli::require_root()?;
        let o = drums::ready::ReadyOptions {
            threshold: a.threshold,
            title: a.title,
            timeout: a.timeout,
            interval: a.interval,
            png: a.png,
            blank,
        };
        if o.png.is_some() && sessions.len() > 1 {
            return Err(drums::Error::Usage("--png takes one record (one screenshot)".into()));
        }
        let mut not_ready = vec![];
        for mut s in sessions {
            let r = drums::ready::check(&s, &o)?;
            if !r.ready {
                not_ready.push(format!("{} ({})", s.id, r.failed.join(", ")));
            }
            s.ready = Some(r);
            cli::progress_done();
            drums::session_io::emit_session(&s)?;
        }
        if not_ready.is_empty() {
            Ok(())
        } else {
            Err(drums::Error::CheckFailed(format!("not agent-ready: {}", not_ready.join("; "))))
        }
    })
}
