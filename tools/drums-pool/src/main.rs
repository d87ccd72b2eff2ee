//! drums-pool: warm pools of parked, reseeded, agent-ready siblings. Parses arguments and calls
//! drums::pool; see drums-pool(1) and drums-pool(7).
use drums::record::Checkpoint;
use drums::{cli, pool, Error, Result};
use drums_pool::cli::{Args, Cmd};
use std::io::IsTerminal;

fn main() {
    // A take's clock starts with the tool.
    let started_at = drums::state::now();
    cli::run("drums-pool", |a: Args| match a.cmd {
        Cmd::Fill { checkpoints, depth, every, count, max_sessions, min_available, max_age, cgroup, no_freeze, ksm, identity, net, size, bound, input } => {
            let net = net.options()?;
            let limits = match cgroup.as_deref() {
                Some("none") => None,
                Some(spec) => Some(drums::cgroup::Limits::parse_spec(spec)?),
                None => Some(drums::cgroup::Limits::default()),
            };
            let ckpts = if checkpoints.is_empty() { checkpoints_on_input(input.as_deref())? } else { checkpoints.iter().map(|id| drums::session_io::load_checkpoint(id)).collect::<Result<Vec<_>>>()? };
            // Read before fill sets DRUMS_OWNER for the siblings it makes.
            let bound = if bound { Some(drums::proc::session_owner()?) } else { None };
            cli::require_root()?;
            for c in &ckpts {
                drums::restore::check_checkpoint(c)?;
            }
            let o = pool::FillOptions {
                depth,
                every,
                count,
                max_sessions,
                min_available,
                max_age,
                freeze: !no_freeze && limits.is_some(),
                restore: drums::restore::RestoreOptions { tmpfs_bytes: size, ttl_s: None, limits, ksm, net, userns: identity.userns() },
                bound,
            };
            pool::stop_on_signals();
            let reports = pool::fill(&ckpts, &o, |r| cli::emit(r), |e| {
                cli::report("drums-pool", e);
            })?;
            for r in &reports {
                cli::emit(r)?;
            }
            match reports.iter().find(|r| r.failed_in_a_row >= pool::FAILURES_IN_A_ROW) {
                Some(r) => Err(Error::failed(format!("pool {}: {}", r.pool.display(), r.stopped))),
                None => Ok(()),
            }
        }
        Cmd::Take { checkpoint, wait, max_age, ready_timeout, input } => {
            let spool = spool_of(checkpoint, input.as_deref())?;
            let o = pool::TakeOptions {
                wait,
                max_age,
                ready_timeout,
                started_at,
            };
            let taker = drums::proc::session_owner()?;
            cli::require_root()?;
            let s = pool::take(&spool, &taker, &o)?;
            drums::session_io::emit_session(&s)
        }
        Cmd::Drain { checkpoint, input } => {
            let spool = spool_of(checkpoint, input.as_deref())?;
            cli::require_root()?;
            let r = pool::drain(&spool)?;
            cli::emit(&r)?;
            if r.left > 0 {
                return Err(Error::CheckFailed(format!("pool {}: {} sibling(s) left something behind (drums-sweep --orphans retries)", r.pool.display(), r.left)));
            }
            Ok(())
        }
        Cmd::Status { checkpoint } => {
            let spools = match checkpoint {
                Some(id) => vec![pool::Spool::of(&id)?],
                None => pool::spools(),
            };
            cli::require_root()?;
            for s in &spools {
                cli::emit(&pool::status(s))?;
            }
            Ok(())
        }
    })
}

/// The checkpoint records on input: one or more, each checked.
fn checkpoints_on_input(input: Option<&std::path::Path>) -> Result<Vec<Checkpoint>> {
    if input.is_none() && std::io::stdin().is_terminal() {
        return Err(Error::Usage("give --checkpoint ID or checkpoint records on standard input".into()));
    }
    let lines = cli::read_lines(input)?;
    if lines.is_empty() {
        return Err(Error::bad_input("no checkpoint record on input"));
    }
    lines.iter().map(|l| Checkpoint::parse(l)).collect()
}

/// The spool of --checkpoint ID, else of the one checkpoint record on input.
fn spool_of(checkpoint: Option<String>, input: Option<&std::path::Path>) -> Result<pool::Spool> {
    let id = match checkpoint {
        Some(id) => id,
        None => match checkpoints_on_input(input)?.as_slice() {
            [c] => c.id.clone(),
            more => return Err(Error::bad_input(format!("{} checkpoint records on input, this command takes one", more.len()))),
        },
    };
    pool::Spool::of(&id)
}
