//! drums-guest: OSWorld's guest HTTP protocol (its `desktop_env/server/main.py`, Linux behaviour), served
//! from inside a session so that an unchanged OSWorld client works against a Drums session. The
//! endpoints, their shapes and every difference from OSWorld's server are in drums-guest(1).
//!
//! All state lives in the process (no host paths, no descriptors onto host files) and the listener is on
//! 0.0.0.0, so a CRIU restore with a re-addressed eth0 keeps serving.

mod a11y;
pub mod cli;
mod exec;
mod files;
mod handlers;
mod rng;
pub mod user;
mod display;

pub use display::X_TIMEOUT;
pub use exec::shlex_split;

use drums::{Error, Result};
use std::net::SocketAddr;
use std::sync::Arc;

/// What `drums-guest` was told on its command line.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// The X display, `:N`.
    pub display: String,
    /// The desktop user commands run as and files belong to.
    pub user: String,
    pub bounds: Bounds,
}

/// How much one request may make the guest hold or write: a harness (or an agent's command) that sends or
/// prints without end must not fill the session's memory or disk through the guest.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Most bytes of one /setup/upload file (`--max-upload`).
    pub max_upload: u64,
    /// Most bytes kept of each output stream of one command (`--max-output`).
    pub max_output: u64,
}

/// 1 GiB: far above the task files OSWorld's setups upload (documents, spreadsheets, images), and the
/// default size of a session's writable tmpfs (drums-overlay --size), which holds the uploaded files.
pub const DEFAULT_MAX_UPLOAD: u64 = 1 << 30;
/// DEFAULT_MAX_UPLOAD as --max-upload takes it, which --help and the man page show.
pub const DEFAULT_MAX_UPLOAD_TEXT: &str = "1G";
/// 16 MiB per stream: far above what an agent or an evaluator reads from a command, and an answer
/// (JSON-escaped, both streams) stays well under 100 MiB.
pub const DEFAULT_MAX_OUTPUT: u64 = 16 << 20;
/// DEFAULT_MAX_OUTPUT as --max-output takes it.
pub const DEFAULT_MAX_OUTPUT_TEXT: &str = "16M";

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds { max_upload: DEFAULT_MAX_UPLOAD, max_output: DEFAULT_MAX_OUTPUT }
    }
}

/// Shared by every request.
pub struct Guest {
    pub acct: user::Account,
    pub display: String,
    pub rng: rng::GuestRng,
    pub bounds: Bounds,
    /// The screen recording of /start_recording, until /end_recording stops it.
    pub recording: tokio::sync::Mutex<Option<exec::Watched>>,
}

fn log(msg: &str) {
    use std::io::Write;
    let t = drums::state::now();
    let _ = writeln!(std::io::stderr().lock(), "drums-guest: {t:.3} {msg}");
}

/// Serve until SIGTERM or SIGINT. SIGUSR1 reseeds the guest's generator (see `rng`).
pub fn serve(cfg: Config) -> Result<()> {
    if cfg.bounds.max_upload == 0 || cfg.bounds.max_output == 0 {
        return Err(Error::Usage("--max-upload and --max-output must be positive".into()));
    }
    let acct = user::Account::lookup(&cfg.user)?;
    if acct.is_other() && unsafe { libc::geteuid() } != 0 {
        return Err(Error::env(format!("running as uid {} cannot act as `{}` (uid {}): start drums-guest as root or as that user", unsafe { libc::geteuid() }, acct.name, acct.uid)));
    }
    let guest = Arc::new(Guest { acct, display: cfg.display.clone(), rng: rng::GuestRng::from_kernel(), bounds: cfg.bounds, recording: Default::default() });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::failed(format!("start the async runtime: {e}")))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(cfg.listen)
            .await
            .map_err(|e| Error::env(format!("listen on {}: {e}", cfg.listen)))?;
        let bound = listener.local_addr().map_err(|e| Error::failed(format!("local address: {e}")))?;
        let (g, f) = guest.rng.status();
        log(&format!(
            "listening on http://{bound} display {} user {} (uid {}) rng generation {g} fingerprint {f} max upload {} bytes, max output {} bytes per stream",
            guest.display, guest.acct.name, guest.acct.uid, guest.bounds.max_upload, guest.bounds.max_output
        ));
        spawn_reseeder(guest.clone())?;
        let app = handlers::router(guest.clone());
        axum::serve(listener, app)
            .with_graceful_shutdown(shutdown())
            .await
            .map_err(|e| Error::failed(format!("serve on {bound}: {e}")))?;
        log("stopped");
        Ok(())
    })
}

fn spawn_reseeder(guest: Arc<Guest>) -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut usr1 = signal(SignalKind::user_defined1()).map_err(|e| Error::failed(format!("install the SIGUSR1 handler: {e}")))?;
    tokio::spawn(async move {
        while usr1.recv().await.is_some() {
            let (g, f) = guest.rng.reseed();
            log(&format!("SIGUSR1: rng reseeded from the kernel, generation {g} fingerprint {f}"));
        }
    });
    Ok(())
}

async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without the handlers the default actions still end the process.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => log("SIGTERM: stopping"),
        _ = int.recv() => log("SIGINT: stopping"),
    }
}

#[cfg(test)]
mod tests {
    /// The defaults as the options take them (--help and drums-guest(1) show the text).
    #[test]
    fn default_texts_are_the_default_bounds() {
        assert_eq!(drums::cli::parse_bytes(super::DEFAULT_MAX_UPLOAD_TEXT), Ok(super::DEFAULT_MAX_UPLOAD));
        assert_eq!(drums::cli::parse_bytes(super::DEFAULT_MAX_OUTPUT_TEXT), Ok(super::DEFAULT_MAX_OUTPUT));
    }
}
