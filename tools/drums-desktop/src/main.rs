//! drums-desktop: Xvfb, D-Bus, AT-SPI, openbox, the guest server and Chromium inside a session.
use drums::cli;
use drums::desktop::DesktopOptions;
use drums_desktop::cli::{Args, Cmd};

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
        Cmd::Sandbox { chromium_args, input } => {
            let sessions = cli::read_sessions(input.as_deref())?;
            cli::require_root()?;
            for mut s in sessions {
                drums::desktop::sandbox_chromium(&mut s, &chromium_args)?;
                drums::session_io::emit_session(&s)?;
            }
            Ok(())
        }
    })
}
