//! drums-restore: restore isolated siblings from a checkpoint.
use drums::cli;
use drums_restore::cli::Args;

fn main() {
    cli::run("drums-restore", |a: Args| {
        let net = a.net.options()?;
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
        let o = drums::restore::RestoreOptions { tmpfs_bytes: a.size, ttl_s: a.ttl, limits, ksm: a.ksm, net, userns: a.userns };
        let mut first_err = None;
        for i in 0..a.count {
            cli::progress("drums-restore", &format!("sibling {}/{}", i + 1, a.count));
            match drums::restore::restore_one(&c, &o) {
                Ok(s) => drums::session_io::emit_session(&s)?,
                Err(e) => {
                    cli::report("drums-restore", &e);
                    first_err.get_or_insert(e);
                }
            }
        }
        cli::progress_done();
        match first_err {
            None => Ok(()),
            Some(e) => Err(drums::Error::failed(format!("at least one sibling failed; the first: {e}"))),
        }
    })
}
