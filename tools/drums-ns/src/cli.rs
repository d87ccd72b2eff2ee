//! drums-ns's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS of
//! man/drums-ns.1 from it without running the tool (README, "Adding a tool").
use clap::Subcommand;
use drums::cli;
use std::path::PathBuf;

drums::subcommand_args! {
    /// Create a session's PID, mount, IPC, UTS and network namespaces with its init as PID 1 and a veth
    /// pair, or run a command inside a session.
    "drums-ns"
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Create the namespaces, init and network of the session on stdin (its overlay must be mounted).
    Create {
        /// Hostname inside the session (default: the session id).
        #[arg(long, value_name = "NAME")]
        hostname: Option<String>,
        #[command(flatten)]
        net: cli::NetArgs,
        /// Session records, one per line (default: stdin).
        #[arg(value_name = "RECORDS")]
        input: Option<PathBuf>,
    },
    /// Run a command inside a session: `drums-ns exec --session ID -- CMD...` or with the record on stdin.
    Exec {
        /// The session's id (its latest record is read from its state directory); default: a record on stdin.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Detach: new process session, output to --log, print {"pid","host_pid"} and return at once.
        ///
        /// The one record printed is {"drums":1,"type":"process","session":ID,"pid":N,"host_pid":N}: the
        /// command's PID inside the session and on the host (host_pid is null when the command was
        /// already gone; docs/record.md). It returns once the command has been executed. A command that
        /// cannot be executed (not found, not executable) is an error, exit 5, and no record is printed:
        /// nothing else would see its exit status.
        #[arg(long)]
        detach: bool,
        /// Output file of a detached command, a path inside the session (default /dev/null).
        #[arg(long, value_name = "PATH")]
        log: Option<PathBuf>,
        /// KEY=VALUE added to the command's environment (which starts with PATH, HOME=/root and TERM);
        /// may be repeated.
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Working directory inside the session (default /).
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        /// Run as this account of the session's /etc/passwd (default: the session's root, with the
        /// session's reduced capabilities).
        #[arg(long, value_name = "USER")]
        user: Option<String>,
        /// Give the command a terminal of the session's own, relayed to this one, when a standard stream
        /// is a terminal (default: no terminal; output relayed through pipes, input from a terminal is
        /// /dev/null).
        ///
        /// Only without --detach. The session's terminal is opened inside the session (its devpts); the
        /// caller's terminal is put in raw mode, relayed to it and restored at the end, and its window
        /// size follows the caller's. The caller's terminal itself never reaches the session.
        #[arg(long)]
        pass_terminal: bool,
        /// The command and its arguments, after --.
        #[arg(required = true, last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// The session's PID 1 (started by `create`; not for use by hand).
    #[command(hide = true)]
    Init {
        #[arg(long)]
        session: String,
    },
}
