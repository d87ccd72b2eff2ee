//! drums-guest's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS of
//! man/drums-guest.1 from it without running the tool (README, "Adding a tool").
use clap::Parser;
use crate::{DEFAULT_MAX_OUTPUT_TEXT, DEFAULT_MAX_UPLOAD_TEXT};
use std::net::SocketAddr;

/// Serve OSWorld's guest HTTP protocol (execute, screenshot, files, windows, accessibility) for the
/// desktop this process runs in. SIGUSR1 reseeds its random generator; SIGTERM stops it.
#[derive(Parser)]
#[command(name = "drums-guest", version = drums::cli::VERSION_TEXT)]
pub struct Args {
    /// Address and port to listen on.
    ///
    /// Port 0 picks a free port; the first log line names the address bound.
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:5000")]
    pub listen: SocketAddr,
    /// Port to listen on, replacing the port of --listen.
    #[arg(long, value_name = "PORT")]
    pub port: Option<u16>,
    /// X display of the desktop, `:N` (default: $DISPLAY, else :0).
    #[arg(long, value_name = ":N")]
    pub display: Option<String>,
    /// The desktop user: commands run as this user and files are read and written as this user.
    ///
    /// It must exist in /etc/passwd; a guest not running as root can only act as itself.
    #[arg(long, value_name = "NAME", default_value = "user")]
    pub user: String,
    /// Most bytes of one uploaded file (/setup/upload); a larger upload is refused with 413 (512M, 1G, bytes).
    ///
    /// The default is far above OSWorld's task files, and the default size of a session's writable
    /// tmpfs (drums-overlay(1) --size), which holds it.
    ///
    /// The size is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "BYTES", default_value = DEFAULT_MAX_UPLOAD_TEXT, value_parser = drums::cli::parse_bytes)]
    pub max_upload: u64,
    /// Most bytes kept of each output stream of a command; the rest is dropped and the answer says so.
    ///
    /// The default is far above what an agent or an evaluator reads from a command; an answer with both
    /// streams full stays under 100 MiB.
    ///
    /// The size is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "BYTES", default_value = DEFAULT_MAX_OUTPUT_TEXT, value_parser = drums::cli::parse_bytes)]
    pub max_output: u64,
}
