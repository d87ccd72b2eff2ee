//! drums-overlay: the session's overlayfs root.
use clap::{Parser, Subcommand};
use drums::cli;
use std::path::PathBuf;

/// Mount or remove a session's overlayfs root: a per-session upper on a tmpfs over read-only layers over
/// the host's `/`. `create` starts a new session and prints its record.
#[derive(Parser)]
#[command(name = "drums-overlay", version = cli::VERSION_TEXT)]
struct Args {
    // Required: without one the tool is a usage error at once, before reading anything (a terminal on
    // stdin would otherwise be waited on for a record).
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a new session: write its ledger, mount its root, print its record.
    Create {
        /// A read-only layer above the host's `/`, topmost first; may be repeated.
        /// Default: /var/lib/drums/template when it exists.
        #[arg(long = "layer", value_name = "DIR")]
        layers: Vec<PathBuf>,
        /// Use no template layer, only the host's `/`.
        #[arg(long)]
        no_template: bool,
        /// Size limit of the session's writable tmpfs, e.g. 512M, 2G.
        #[arg(long, default_value = "1G", value_parser = drums::cli::parse_bytes)]
        size: u64,
        /// Time to live in seconds, after which the sweep may destroy the session.
        #[arg(long)]
        ttl: Option<u64>,
    },
    /// Unmount and delete the root of the session on stdin (only what its ledger names).
    Remove {
        /// Record file (default: stdin).
        input: Option<PathBuf>,
    },
}

fn main() {
    cli::run("drums-overlay", |a: Args| {
        cli::require_root()?;
        match a.cmd {
            Cmd::Create { mut layers, no_template, size, ttl } => {
                if layers.is_empty() && !no_template && std::path::Path::new(drums::overlay::DEFAULT_TEMPLATE).is_dir() {
                    layers.push(drums::overlay::DEFAULT_TEMPLATE.into());
                }
                let s = drums::overlay::create(&drums::overlay::OverlayOptions { layers, tmpfs_bytes: size, ttl_s: ttl })?;
                drums::session_io::emit_session(&s)
            }
            Cmd::Remove { input } => {
                for mut s in cli::read_sessions(input.as_deref())? {
                    drums::overlay::remove(&s)?;
                    s.overlay = None;
                    drums::session_io::emit_session(&s)?;
                }
                Ok(())
            }
        }
    })
}
