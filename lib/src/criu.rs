//! Finding and running CRIU.

use std::path::PathBuf;

/// The private CRIU that pipelines/install-criu.sh installs.
pub const DEFAULT_PRIVATE: &str = "/opt/drums/criu/bin/criu";

/// CRIU: $DRUMS_CRIU, else the private install when present, else `criu` on PATH.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("DRUMS_CRIU") {
        return p.into();
    }
    if std::path::Path::new(DEFAULT_PRIVATE).exists() {
        return DEFAULT_PRIVATE.into();
    }
    "criu".into()
}
