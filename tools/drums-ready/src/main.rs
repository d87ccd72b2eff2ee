//! drums-ready: is the session agent-ready? A screenshot and the window titles, over X11.
use drums::cli;
use drums_ready::cli::Args;

fn main() {
    cli::run("drums-ready", |a: Args| {
        let blank = u32::from_str_radix(&a.blank, 16).ok().filter(|_| a.blank.len() == 6).ok_or_else(|| drums::Error::Usage(format!("--blank {}: expected RRGGBB", a.blank)))?;
        if !(0.0..1.0).contains(&a.threshold) {
            return Err(drums::Error::Usage("--threshold must be in [0, 1)".into()));
        }
        let sessions = cli::read_sessions(a.input.as_deref())?;
        cli::require_root()?;
        let o = drums::ready::ReadyOptions {
            threshold: a.threshold,
            title: a.title,
            timeout: a.timeout,
            interval: a.interval,
            png: a.png,
            blank: [(blank >> 16) as u8, (blank >> 8) as u8, blank as u8],
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
