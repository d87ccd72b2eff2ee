//! drums-ready's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS of
//! man/drums-ready.1 from it without running the tool (README, "Adding a tool").
use clap::Parser;
use drums::cli;
use std::path::PathBuf;

/// Poll a session's display until it is agent-ready: the screen differs from a blank desktop in more than
/// --threshold of its pixels AND a window has the expected title. Prints the record with its `ready`
/// section; exits 1 when the session did not become ready in time.
#[derive(Parser)]
#[command(name = "drums-ready", version = cli::VERSION_TEXT)]
pub struct Args {
    /// Fraction of pixels that must differ from the blank desktop.
    #[arg(long, value_name = "F", default_value_t = 0.10)]
    pub threshold: f64,
    /// Expected window title (default: the record's desktop.title).
    #[arg(long, value_name = "TITLE")]
    pub title: Option<String>,
    /// Give up after this long, such as 30s or 500ms.
    ///
    /// The duration is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "TIME", default_value = "30s", value_parser = cli::parse_duration)]
    pub timeout: std::time::Duration,
    /// Time between polls.
    ///
    /// The duration is read as drums(7), "Sizes and durations", says.
    #[arg(long, value_name = "TIME", default_value = "20ms", value_parser = cli::parse_duration)]
    pub interval: std::time::Duration,
    /// Save the last screenshot as a PNG here, as evidence (only with one record).
    #[arg(long, value_name = "PATH")]
    pub png: Option<PathBuf>,
    /// Colour of the blank desktop as RRGGBB (000000: Xvfb with a black root, -br, and no windows).
    #[arg(long, value_name = "RRGGBB", default_value = "000000")]
    pub blank: String,
    /// Session records, one per line (default: stdin).
    #[arg(value_name = "RECORDS")]
    pub input: Option<PathBuf>,
}
