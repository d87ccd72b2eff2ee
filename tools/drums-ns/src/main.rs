//! drums-ns: a session's namespaces, its init, its network; `exec` runs a command inside.
use drums::cli;
use drums_ns::cli::{Args, Cmd};
use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("init") {
        drums::ns::init_main();
    }
    cli::run("drums-ns", |a: Args| match a.cmd {
        Cmd::Create { hostname, net, input } => {
            let net = net.options()?;
            cli::require_root()?;
            let sessions = cli::read_sessions(input.as_deref())?;
            if hostname.is_some() && sessions.len() > 1 {
                return Err(drums::Error::Usage("--hostname takes one record; sessions need distinct names".into()));
            }
            for mut s in sessions {
                drums::ns::create(&mut s, &drums::ns::NsOptions { hostname: hostname.clone(), net: net.clone() })?;
                drums::session_io::emit_session(&s)?;
            }
            Ok(())
        }
        Cmd::Exec { session, detach, log, env, cwd, user, pass_terminal, command } => {
            cli::require_root()?;
            let s = match session {
                Some(id) => drums::session_io::load(&id)?,
                None => cli::read_session(None)?,
            };
            let env = env
                .iter()
                .map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(|| drums::Error::Usage(format!("--env {kv}: expected KEY=VALUE"))))
                .collect::<drums::Result<Vec<_>>>()?;
            let uid_gid = match user {
                Some(name) => {
                    let root = PathBuf::from(format!("/proc/{}/root", s.ns()?.init_pid));
                    let a = drums::account::Account::lookup_in(&root, &name).map_err(|e| drums::Error::bad_input(format!("--user {name}: {e}")))?;
                    Some((a.uid, a.gid))
                }
                None => None,
            };
            let opts = drums::ns::ExecOptions { detach, log, env, cwd, uid_gid, pass_terminal };
            let sp = drums::ns::spawn(&s, &command, &opts)?;
            if detach {
                cli::emit(&drums::ns::ProcessRecord { drums: drums::record::VERSION, record_type: drums::ns::ProcessType::Tag, session: s.id.clone(), pid: sp.ns_pid, host_pid: sp.host_pid })
            } else {
                if let Some(e) = &sp.exec_error {
                    // The command never ran: say why, in the tools' error format, with a shell's status.
                    let rec = drums::error::ErrorRecord::new("drums-ns", "exec_failed", 127, e.to_string());
                    eprintln!("{}", serde_json::to_string(&rec).expect("the error object serializes"));
                }
                std::process::exit(sp.status.unwrap_or(0))
            }
        }
        Cmd::Init { .. } => unreachable!("handled before argument parsing"),
    })
}
