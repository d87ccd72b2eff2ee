//! drums-cgroup: not implemented yet (see its issue); it says so and exits with code 7.
use clap::Parser;

/// Not implemented yet: this tool says so and exits 7.
#[derive(Parser)]
#[command(name = "drums-cgroup", version = drums::cli::VERSION_TEXT)]
struct Args {
    /// Input records (default: stdin).
    input: Option<std::path::PathBuf>,
}

fn main() {
    drums::cli::run("drums-cgroup", |_a: Args| Err(drums::Error::NotImplemented("drums-cgroup".into())))
}
