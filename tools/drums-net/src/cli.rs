//! drums-net's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS of
//! man/drums-net.1 from it without running the tool (README, "Adding a tool").
use clap::Subcommand;
use drums::cli;
use std::path::PathBuf;

drums::subcommand_args! {
    /// A live session's network policy: show it with its counters, or change it (drums(7), "Network
    /// boundary").
    "drums-net"
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Print the session's policy and its counters (bytes and connections, from its nftables table).
    Show {
        /// The session's id (its latest record is read from its state directory); default: records on stdin.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        /// Session records, one per line (default: stdin).
        #[arg(value_name = "RECORDS")]
        input: Option<PathBuf>,
    },
    /// Put the session under another policy at once; prints its updated session record.
    ///
    /// The old policy's table, rules and resolver are removed and the new ones made, as drums-ns create
    /// makes them; connections the old policy allowed are not cut, new ones follow the new policy.
    /// --net none removes everything and the session's default route.
    Set {
        /// The session's id; default: a record on stdin.
        #[arg(long, value_name = "ID")]
        session: Option<String>,
        #[command(flatten)]
        net: cli::NetArgs,
        /// Session record (default: stdin).
        #[arg(value_name = "RECORD")]
        input: Option<PathBuf>,
    },
    /// The session's connection auditor: writes DIR/net-audit.jsonl until killed or DIR is gone.
    ///
    /// Started by whatever applies a policy (drums-ns create, drums-restore, drums-net set) and killed
    /// with the session's egress state; not meant to be run by hand.
    Audit {
        /// The session's state directory.
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
        /// The session's id (written in every line).
        #[arg(long, value_name = "ID")]
        session: String,
        /// The session's address slot (its address and log group).
        #[arg(long, value_name = "SLOT")]
        slot: u32,
        /// Where the auditor writes its pid once it listens.
        #[arg(long, value_name = "FILE")]
        pid_file: PathBuf,
        /// A descriptor, open for writing, on which the auditor writes its pid once it listens, then
        /// closes (its starter waits on the other end of the pipe)
        #[arg(long, value_name = "FD")]
        ready_fd: Option<i32>,
    },
}
