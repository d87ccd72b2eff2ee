//! drums-desktop: Xvfb, D-Bus, AT-SPI, openbox, the guest server and Chromium inside a session.
use clap::{Parser, Subcommand};
use drums::cli;
use drums::desktop::{DesktopOptions, DEFAULT_TITLE, DEFAULT_URL};
use std::path::PathBuf;

/// Start the desktop inside the session on stdin and print the record with its `desktop` section.
#[derive(Parser)]
#[command(name = "drums-desktop", version = cli::VERSION_TEXT)]
struct Args {
    // Required: without one the tool is a usage error at once, before reading anything (a terminal on
    // stdin would otherwise be waited on for a record).
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start Xvfb, D-Bus, AT-SPI, openbox, drums-guest and Chromium on a page.
    Start {
        /// X display number inside the session.
        #[arg(long, default_value_t = 0)]
        display: u32,
        /// Screen size and depth, WIDTHxHEIGHTxDEPTH.
        #[arg(long, default_value = "1920x1080x24")]
        size: String,
        /// The page Chromium shows.
        #[arg(long, default_value = DEFAULT_URL)]
        url: String,
        /// The page's title, which drums-ready expects.
        #[arg(long, default_value = DEFAULT_TITLE)]
        title: String,
        /// Do not start the guest server.
        #[arg(long)]
        no_guest: bool,
        /// The account the guest runs as, and so runs commands as (default: the desktop's account).
        #[arg(long, value_name = "USER", conflicts_with = "no_guest")]
        guest_user: Option<String>,
        /// The account the desktop runs as (default: `user` when the session has it, else root).
        #[arg(long, value_name = "USER")]
        desktop_user: Option<String>,
        /// Do not start Chromium.
        #[arg(long)]
        no_chromium: bool,
        /// Offer Xvfb's MIT-SHM extension (off by default: each restore would recreate its shared memory).
        #[arg(long)]
        mit_shm: bool,
        /// Offer Xvfb's GLX extension (off by default: Xvfb would load Mesa, 13 MiB more per session).
        #[arg(long)]
        glx: bool,
        /// An extra Chromium argument; may be repeated.
        #[arg(long = "chromium-arg", value_name = "ARG", allow_hyphen_values = true)]
        chromium_args: Vec<String>,
        /// Record file (default: stdin).
        input: Option<PathBuf>,
    },
}

fn parse_size(s: &str) -> drums::Result<(u32, u32, u32)> {
    let v: Vec<u32> = s.split('x').map(|p| p.parse().map_err(|_| drums::Error::Usage(format!("--size {s}: expected WIDTHxHEIGHTxDEPTH")))).collect::<drums::Result<_>>()?;
    match v[..] {
        [w, h, d] if w > 0 && h > 0 && (d == 24 || d == 32) => Ok((w, h, d)),
        _ => Err(drums::Error::Usage(format!("--size {s}: expected WIDTHxHEIGHTxDEPTH with depth 24 or 32"))),
    }
}

fn main() {
    cli::run("drums-desktop", |a: Args| match a.cmd {
        Cmd::Start { display, size, url, title, no_guest, guest_user, desktop_user, no_chromium, mit_shm, glx, chromium_args, input } => {
            let (width, height, depth) = parse_size(&size)?;
            let sessions = cli::read_sessions(input.as_deref())?;
            cli::require_root()?;
            let o = DesktopOptions { display, width, height, depth, url, title, guest: !no_guest, chromium: !no_chromium, extra_chromium_args: chromium_args, guest_user, desktop_user, mit_shm, glx };
            for mut s in sessions {
                drums::desktop::start(&mut s, &o)?;
                drums::session_io::emit_session(&s)?;
            }
            Ok(())
        }
    })
}
