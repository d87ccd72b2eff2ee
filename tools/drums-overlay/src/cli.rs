//! drums-overlay's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS
//! of man/drums-overlay.1 from it without running the tool (README, "Adding a tool").
use clap::Subcommand;
use drums::cli;
use std::path::PathBuf;

drums::subcommand_args! {
    /// Mount or remove a session's overlayfs root: a per-session upper on a tmpfs over read-only layers over
    /// the runtime layer over the session's root image (never the host's `/`). `create` starts a new session
    /// and prints its record; `image` lists, checks and digests root images.
    "drums-overlay"
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Start a new session: write its ledger, mount its root, print its record.
    Create {
        /// The root image: a name (the image its link names now) or an image directory under the images
        /// root.
        #[arg(long, value_name = "NAME|DIR", default_value = drums::image::DEFAULT_IMAGE)]
        image: String,
        /// A read-only layer above the runtime layer and the image, topmost first; may be repeated.
        ///
        /// DIR must be a plain absolute path (no ..) naming a directory below the layers root
        /// ($DRUMS_LAYER_DIR, default /var/lib/drums/layers) or a checkpoint's layer or layers/N under
        /// the checkpoint root; anything else (a host directory such as /etc, another session's upper) is
        /// refused with exit 3 before anything is made. Records are checked the same way: an
        /// overlay.layers entry of any other shape is refused by every tool that reads the record.
        #[arg(long = "layer", value_name = "DIR")]
        layers: Vec<PathBuf>,
        /// Size limit of the session's writable tmpfs, e.g. 512M, 2G: its copies of the layers and what the
        /// session writes.
        ///
        /// The size is read as drums(7), "Sizes and durations", says.
        #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = drums::cli::parse_bytes)]
        size: u64,
        /// Time to live in whole seconds (90, 90s, 2m), after which drums-sweep(1) may destroy the session.
        ///
        /// The duration is read as drums(7), "Sizes and durations", says.
        #[arg(long, value_name = "TIME", value_parser = drums::cli::parse_seconds)]
        ttl: Option<u64>,
        #[command(flatten)]
        identity: cli::IdentityArgs,
    },
    /// Unmount and delete the root of the session on stdin (only what its ledger names).
    Remove {
        /// Session records, one per line (default: stdin).
        #[arg(value_name = "RECORDS")]
        input: Option<PathBuf>,
    },
    /// Root images: list them, verify one, or digest a tree.
    Image {
        #[command(subcommand)]
        cmd: ImageCmd,
    },
}

#[derive(Subcommand)]
pub enum ImageCmd {
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
        /// The tree to digest.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}
