//! drums-guest: OSWorld's guest HTTP server protocol, served from inside a Drums session (drums-guest(1)).
use clap::Parser;
use std::net::SocketAddr;

/// Serve OSWorld's guest HTTP protocol (execute, screenshot, files, windows, accessibility) for the
/// desktop this process runs in. SIGUSR1 reseeds its random generator; SIGTERM stops it.
#[derive(Parser)]
#[command(name = "drums-guest", version = drums::cli::VERSION_TEXT)]
struct Args {
    /// Address and port to listen on.
    #[arg(long, value_name = "ADDR:PORT", default_value = "0.0.0.0:5000")]
    listen: SocketAddr,
    /// Port to listen on, replacing the port of --listen.
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// X display of the desktop, `:N` (default: $DISPLAY, else :0).
    #[arg(long, value_name = ":N")]
    display: Option<String>,
    /// The desktop user: commands run as this user and files are read and written as this user.
    #[arg(long, value_name = "NAME", default_value = "user")]
    user: String,
    /// Most bytes of one uploaded file (/setup/upload); a larger upload is refused with 413 (512M, 1G, bytes).
    #[arg(long, value_name = "BYTES", default_value_t = drums_guest::DEFAULT_MAX_UPLOAD, value_parser = drums::cli::parse_bytes)]
    max_upload: u64,
    /// Most bytes kept of each output stream of a command; the rest is dropped and the answer says so.
    #[arg(long, value_name = "BYTES", default_value_t = drums_guest::DEFAULT_MAX_OUTPUT, value_parser = drums::cli::parse_bytes)]
    max_output: u64,
}

fn main() {
    drums::cli::run("drums-guest", |a: Args| {
        let mut listen = a.listen;
        if let Some(p) = a.port {
            listen.set_port(p);
        }
        let display = a.display.or_else(|| std::env::var("DISPLAY").ok()).unwrap_or_else(|| ":0".into());
        if !display.starts_with(':') || display[1..].split('.').next().is_none_or(|n| n.parse::<u32>().is_err()) {
            return Err(drums::Error::Usage(format!("--display {display}: expected :N (a local display number)")));
        }
        let bounds = drums_guest::Bounds { max_upload: a.max_upload, max_output: a.max_output };
        drums_guest::serve(drums_guest::Config { listen, display, user: a.user, bounds })
    })
}
