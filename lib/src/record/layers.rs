//! What session and checkpoint records say of the layers a session's root is made of: its root image
//! (crate::image), the runtime layer (crate::runtime), a checkpoint's mapped files (crate::mapped) and
//! what a checkpoint layer's copy left out (crate::overlay). Their checks against this host live with
//! those modules.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What a session or checkpoint record says of its image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageRef {
    pub name: String,
    /// The image's directory, `<images root>/<name>-<12 hex>`.
    pub dir: PathBuf,
    /// The tree: `<dir>/root`, the overlay's lowest layer.
    pub root: PathBuf,
    /// `sha256:<64 hex>`, over the tree's content (`digest_tree`).
    pub digest: String,
}

/// What session and checkpoint records say of their runtime layer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RuntimeRef {
    /// `<runtime root>/<stamp>`.
    pub dir: PathBuf,
    /// The overlay layer: `<dir>/layer`.
    pub layer: PathBuf,
    /// `sha256:<hex>` over the programs (name, then bytes, in PROGRAMS order).
    pub digest: String,
}

/// What a checkpoint's images map from files of its own instead of holding as pages.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Mapped {
    /// `mapped_root()/<checkpoint id>`; the overlay layer is its `layer/`.
    pub dir: PathBuf,
    pub files: Vec<MappedFile>,
    /// Pages taken out of the images (every process's copy counted).
    pub pages_moved: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MappedFile {
    /// On the host: `<dir>/layer/usr/lib/drums/mapped/<checkpoint id>/N.bin` (`pN.bin`: a file of the
    /// parent checkpoint the source was restored from, linked).
    pub path: PathBuf,
    pub bytes: u64,
    /// The mappings (one per process) that now map this file.
    pub mappings: u32,
}

/// What a copy of a session's upper into a checkpoint layer left out (`copy_layer`): the checkpoint
/// record's `layer_dropped`.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Dropped {
    /// Files (not directories) whose set-user-ID or set-group-ID bit was cleared.
    pub setid: u64,
    /// Device nodes not copied: every one but overlayfs whiteouts and the session's own /dev nodes.
    pub devices: u64,
    /// File capabilities (`security.capability`) not copied.
    #[serde(default)]
    pub capabilities: u64,
}
