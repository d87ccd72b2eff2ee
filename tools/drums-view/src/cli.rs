//! drums-view's command line (drums-view(1)): the definition its --help prints and its man page's
//! options follow.
use clap::Subcommand;
use std::net::SocketAddr;
use std::path::PathBuf;

drums::subcommand_args! {
    /// Watch sessions live: a VNC server on a session's display, started on demand, and a web page over
    /// every session, pool, checkpoint and image of this host.
    "drums-view"
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Start the session's VNC server (x11vnc, inside the session, on its address, port 5900), or find it
    /// running; prints a `vnc` record with the address and port.
    Vnc {
        /// The session, by id.
        #[arg(long, value_name = "ID")]
        session: String,
        /// Take keyboard and pointer input from viewers (default: view only). A server running in the other
        /// mode is replaced.
        #[arg(long)]
        input: bool,
    },
    /// End the session's VNC server; prints a `vnc` record with `running` false.
    Stop {
        /// The session, by id.
        #[arg(long, value_name = "ID")]
        session: String,
    },
    /// Serve the overview page and its JSON API (docs/view.md) until killed; prints a `view_serving`
    /// record once it listens.
    Serve {
        /// Loopback address and port, the port one of 3786-3795 (which the firewall closes to users outside
        /// group drums).
        #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:3786")]
        listen: SocketAddr,
        /// Where Debian's noVNC is (package novnc).
        #[arg(long, value_name = "DIR", default_value = "/usr/share/novnc")]
        novnc: PathBuf,
        /// A directory of benchmark results (the repository's docs/results) that the page's /charts lists
        /// and draws; without it the charts page says none was given.
        #[arg(long, value_name = "DIR")]
        results: Option<PathBuf>,
    },
}
