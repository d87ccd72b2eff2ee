//! drums-restore: restore isolated siblings from a checkpoint.
use drums::cli;
use drums::sibling::{make_many, SiblingOptions};
use drums_restore::cli::Args;

fn main() {
    cli::run("drums-restore", |a: Args| {
        let net = a.net.options()?;
        // With --ready, the check's options are checked before anything is read or made.
        let ready = if a.ready {
            let r = &a.ready_args;
            drums::ready::check_threshold(r.ready_threshold, "--ready-threshold")?;
            let blank = drums::ready::parse_blank(&r.ready_blank, "--ready-blank")?;
            Some(drums::ready::ReadyOptions { threshold: r.ready_threshold, title: r.ready_title.clone(), timeout: r.ready_timeout, interval: r.ready_interval, png: None, blank })
        } else {
            None
        };
        let c = match &a.checkpoint {
            Some(id) => drums::session_io::load_checkpoint(id)?,
            None => {
                let lines = cli::read_lines(a.input.as_deref())?;
                match lines.as_slice() {
                    [one] => drums::record::Checkpoint::parse(one)?,
                    [] => return Err(drums::Error::bad_input("no checkpoint record on input")),
                    _ => return Err(drums::Error::bad_input(format!("{} records on input, this command takes one checkpoint", lines.len()))),
                }
            }
        };
        if a.count == 0 {
            return Err(drums::Error::Usage("--count must be at least 1".into()));
        }
        let limits = match (&a.cgroup, a.no_cgroup) {
            (_, true) => None,
            (Some(spec), false) => Some(drums::cgroup::Limits::parse_spec(spec)?),
            (None, false) => Some(drums::cgroup::Limits::default()),
        };
        cli::require_root()?;
        drums::restore::check_checkpoint(&c)?;
        let restore = drums::restore::RestoreOptions { tmpfs_bytes: a.size, ttl_s: a.ttl, limits, ksm: a.ksm, net, userns: a.identity.userns() };
        let reseed = a.ready.then(|| drums::reseed::ReseedOptions { hostname: None, browser: !a.no_browser });
        let o = SiblingOptions { restore: &restore, reseed, ready };
        let mut first_err = None;
        let mut finished = 0;
        make_many(&c, a.count, &o, |r| {
            finished += 1;
            cli::progress("drums-restore", &format!("{finished}/{} siblings", a.count));
            match r {
                Ok(m) => drums::session_io::emit_session(&m.session)?,
                Err(e) => {
                    cli::report("drums-restore", &e);
                    first_err.get_or_insert(e);
                }
            }
            Ok(())
        })?;
        cli::progress_done();
        match first_err {
            None => Ok(()),
            Some(e) => Err(drums::Error::failed(format!("at least one sibling failed; the first: {e}"))),
        }
    })
}
