//! drums-ns: a session's namespaces, its init, its network; `exec` runs a command inside.
use clap::{Parser, Subcommand};
use drums::cli;
use std::path::PathBuf;

/// Create a session's PID, mount, IPC, UTS and network namespaces with its init as PID 1 and a veth
/// pair, or run a command inside a session.
#[derive(Parser)]
#[command(name = "drums-ns", version = cli::VERSION_TEXT)]
struct Args {
    // Required: without one the tool is a usage error at once, before reading anything (a terminal on
    // stdin would otherwise be waited on for a record).
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create the namespaces, init and network of the session on stdin (its overlay must be mounted).
    Create {
        /// Hostname inside the session (default: the session id).
        #[arg(long)]
        hostname: Option<String>,
        /// Record file (default: stdin).
        input: Option<PathBuf>,
    },
    /// Run a command inside a session: `drums-ns exec --session ID -- CMD...` or with the record on stdin.
    Exec {
        /// The session's id (its record is read from its state directory); default: a record on stdin.
        #[arg(long)]
        session: Option<String>,
        /// Detach: new process session, output to --log, print {"pid","host_pid"} and return at once.
        #[arg(long)]
        detach: bool,
        /// Output file inside the session for a detached command (default /dev/null).
        #[arg(long)]
        log: Option<PathBuf>,
        /// KEY=VALUE added to the environment; may be repeated.
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Working directory inside the session.
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Run as this account of the session's /etc/passwd (default: the session's root).
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// Hand the command this terminal when the standard streams are one (default: output relayed
        /// through pipes, input /dev/null, no controlling terminal; a terminal never reaches a session).
        #[arg(long)]
        pass_terminal: bool,
        #[arg(required = true, last = true)]
        command: Vec<String>,
    },
    /// The session's PID 1 (started by `create`; not for use by hand).
    #[command(hide = true)]
    Init {
        #[arg(long)]
        session: String,
    },
}

/// What `exec --detach` prints: docs/record.md, "Process record".
#[derive(serde::Serialize)]
struct ProcessRecord<'a> {
    drums: u32,
    #[serde(rename = "type")]
    record_type: &'static str,
    session: &'a str,
    pid: i32,
    host_pid: Option<i32>,
}

/// The error object of a command that could not be started: docs/record.md, "Error object", kind
/// `exec_failed`, with a shell's status 127.
#[derive(serde::Serialize)]
struct ExecFailed<'a> {
    drums: u32,
    #[serde(rename = "type")]
    record_type: &'static str,
    tool: &'static str,
    kind: &'static str,
    exit: i32,
    message: &'a str,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("init") {
        drums::ns::init_main();
    }
    cli::run("drums-ns", |a: Args| match a.cmd {
        Cmd::Create { hostname, input } => {
            cli::require_root()?;
            let sessions = cli::read_sessions(input.as_deref())?;
            if hostname.is_some() && sessions.len() > 1 {
                return Err(drums::Error::Usage("--hostname takes one record; sessions need distinct names".into()));
            }
            for mut s in sessions {
                drums::ns::create(&mut s, &drums::ns::NsOptions { hostname: hostname.clone() })?;
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
                    let a = drums::guest::user::Account::lookup_in(&root, &name).map_err(|e| drums::Error::bad_input(format!("--user {name}: {e}")))?;
                    Some((a.uid, a.gid))
                }
                None => None,
            };
            let opts = drums::ns::ExecOptions { detach, log, env, cwd, uid_gid, pass_terminal };
            let sp = drums::ns::spawn(&s, &command, &opts)?;
            if detach {
                cli::emit(&ProcessRecord { drums: drums::record::VERSION, record_type: "process", session: &s.id, pid: sp.ns_pid, host_pid: sp.host_pid })
            } else {
                if let Some(e) = &sp.exec_error {
                    // The command never ran: say why, in the tools' error format, with a shell's status.
                    let rec = ExecFailed { drums: drums::record::VERSION, record_type: "error", tool: "drums-ns", kind: "exec_failed", exit: 127, message: e };
                    eprintln!("{}", serde_json::to_string(&rec).expect("the error object serializes"));
                }
                std::process::exit(sp.status.unwrap_or(0))
            }
        }
        Cmd::Init { .. } => unreachable!("handled before argument parsing"),
    })
}
