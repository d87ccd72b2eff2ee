//! drums-desktop's command line. It lives apart from main.rs so that tests/man.rs can render the OPTIONS
//! of man/drums-desktop.1 from it without running the tool (README, "Adding a tool").
use clap::Subcommand;
use drums::desktop::{DEFAULT_TITLE, DEFAULT_URL};
use std::path::PathBuf;

drums::subcommand_args! {
    /// Start the desktop inside the session on stdin and print the record with its `desktop` section.
    "drums-desktop"
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Start Xvfb, D-Bus, AT-SPI, openbox, drums-guest and Chromium on a page.
    Start {
        /// X display number inside the session.
        ///
        /// Each session has its own network namespace and /tmp, so every session can use 0.
        #[arg(long, value_name = "N", default_value_t = 0)]
        display: u32,
        /// Screen width, height and depth (24 or 32).
        #[arg(long, value_name = "WxHxD", default_value = "1920x1080x24")]
        size: String,
        /// The page Chromium shows (the default: a data: URL titled drums-ready on a blue background).
        ///
        /// In a data: URL, # starts a fragment: write %23.
        #[arg(long, default_value = DEFAULT_URL, hide_default_value = true)]
        url: String,
        /// The page's title, recorded for drums-ready(1), which expects it.
        #[arg(long, default_value = DEFAULT_TITLE)]
        title: String,
        /// Do not start drums-guest(1).
        #[arg(long)]
        no_guest: bool,
        /// The account the guest runs as, and so runs commands as (drums-guest --user; default: the
        /// desktop's account, --desktop-user). It must exist in the session's /etc/passwd.
        #[arg(long, value_name = "USER", conflicts_with = "no_guest")]
        guest_user: Option<String>,
        /// The account Xvfb, D-Bus, AT-SPI, openbox and Chromium run as (default: user when the session
        /// has it, as every root image does, else root). It must exist in the session's /etc/passwd.
        ///
        /// The desktop runs unprivileged as on OSWorld's image: its logs directory /tmp/drums, its
        /// runtime directory and Chromium's profile are that user's.
        #[arg(long, value_name = "USER")]
        desktop_user: Option<String>,
        /// Do not start Chromium.
        #[arg(long)]
        no_chromium: bool,
        /// Offer Xvfb's MIT-SHM extension (off by default: each restore would recreate its shared memory).
        ///
        /// With it, Chromium presents its frames through two SysV shared-memory segments of about 12 MB
        /// each, which CRIU must recreate in every restore (about 18 ms of a 0.16 s criu restore; the
        /// usable restore 0.288 -> 0.264 s without it, n=10 interleaved, cold start unchanged). Without
        /// it, X clients send their images over the X socket: correct for every client (the extension is
        /// optional), slower for programs that move many large images, such as video players. The
        /// record's desktop.mit_shm says which.
        #[arg(long)]
        mit_shm: bool,
        /// Offer Xvfb's GLX extension (off by default: Xvfb would load Mesa, 13 MiB more per session).
        ///
        /// With it Xvfb loads Mesa and LLVM at start, 13 MiB more in every session and every checkpoint
        /// image and about 20 ms more of a cold start, for nothing Chromium uses (--disable-gpu).
        /// Programs that need OpenGL on the display need it. The record's desktop.glx says which.
        #[arg(long)]
        glx: bool,
        /// An extra Chromium argument; may be repeated.
        #[arg(long = "chromium-arg", value_name = "ARG", allow_hyphen_values = true)]
        chromium_args: Vec<String>,
        /// Session records, one per line (default: stdin).
        #[arg(value_name = "RECORDS")]
        input: Option<PathBuf>,
    },
    /// Start the session's Chromium again with its own sandbox (a sibling restored with --userns).
    ///
    /// A restored sibling's Chromium is its checkpoint's, which ran with --no-sandbox; a session whose
    /// Chromium runs its sandbox cannot be checkpointed (CRIU does not dump nested PID namespaces). This
    /// closes that Chromium and starts a new one without --no-sandbox on the record's page, and prints the
    /// record with the new process; check the page with drums-ready(1). A Chromium already sandboxed is
    /// left as it is.
    Sandbox {
        /// An extra Chromium argument (those given to drums-desktop start are not recorded); may be
        /// repeated.
        #[arg(long = "chromium-arg", value_name = "ARG", allow_hyphen_values = true)]
        chromium_args: Vec<String>,
        /// Session records, one per line (default: stdin).
        #[arg(value_name = "RECORDS")]
        input: Option<PathBuf>,
    },
}
