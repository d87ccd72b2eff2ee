//! drums-overlay: the session's overlayfs root, and the root images it is made on.
use clap::{Parser, Subcommand};
use drums::cli;
use std::path::PathBuf;

/// Mount or remove a session's overlayfs root: a per-session upper on a tmpfs over read-only layers over
/// the runtime layer over the session's root image (never the host's `/`). `create` starts a new session
/// and prints its record; `image` lists, checks and digests root images.
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
        /// The root image: a name (the image its link names now) or an image directory.
        #[arg(long, value_name = "NAME|DIR", default_value = drums::image::DEFAULT_IMAGE)]
        image: String,
        /// A read-only layer above the runtime layer and the image, topmost first; may be repeated.
        #[arg(long = "layer", value_name = "DIR")]
        layers: Vec<PathBuf>,
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
    /// Root images: list them, verify one, or digest a tree.
    Image {
        #[command(subcommand)]
        cmd: ImageCmd,
    },
}

#[derive(Subcommand)]
enum ImageCmd {
    /// Print the record of every image, with what uses it, one JSON line each.
    List,
    /// Digest an image's tree again and compare it with its record (exit 1 when they differ).
    Verify {
        /// An image name or directory.
        #[arg(value_name = "NAME|DIR")]
        image: String,
    },
    /// Print the content digest of a tree (what pipelines/image.sh records).
    Digest {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

fn main() {
    cli::run("drums-overlay", |a: Args| {
        cli::require_root()?;
        match a.cmd {
            Cmd::Create { image, layers, size, ttl } => {
                let s = drums::overlay::create(&drums::overlay::OverlayOptions { image, layers, tmpfs_bytes: size, ttl_s: ttl })?;
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
            Cmd::Image { cmd: ImageCmd::List } => drums::image::list().iter().try_for_each(cli::emit),
            Cmd::Image { cmd: ImageCmd::Verify { image } } => {
                let v = drums::image::verify(&image)?;
                cli::emit(&v)?;
                if v.equal {
                    Ok(())
                } else {
                    Err(drums::Error::CheckFailed(format!("image {}: its tree has digest {}, its record says {}", v.image.display(), v.digest_now, v.digest_recorded)))
                }
            }
            Cmd::Image { cmd: ImageCmd::Digest { dir } } => cli::emit(&drums::image::digest_tree(&dir)?),
        }
    })
}
