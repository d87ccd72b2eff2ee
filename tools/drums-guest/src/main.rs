//! drums-guest: OSWorld's guest HTTP server protocol, served from inside a Drums session (drums-guest(1)).
use drums_guest::cli::Args;

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
