//! What `drums-ckpt check`, `export` and `import` write: the portability check of a checkpoint on this
//! node and the header of a checkpoint bundle (drums-ckpt(1), "Moving a checkpoint").

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

crate::record_type!(CheckType = "checkpoint_check");
crate::record_type!(BundleType = "checkpoint_bundle");
crate::record_type!(ExportType = "checkpoint_export");

/// Whether this node can restore a checkpoint, and every reason it cannot.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Check {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: CheckType,
    pub checkpoint: String,
    pub restorable: bool,
    /// Each reason this node cannot restore it (empty when it can).
    pub why_not: Vec<String>,
    /// This node's kernel release.
    pub kernel: String,
    /// This node's CRIU version (null: no CRIU runs here, named in `why_not`).
    pub criu_version: Option<String>,
    /// `compatible` (criu cpuinfo check accepted the CPU description of the node that made the dump),
    /// `incompatible` (named in `why_not`), or `not checked: <why>`.
    pub cpu: String,
}

/// The first line of a checkpoint bundle; a tar stream of the files follows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bundle {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: BundleType,
    /// The checkpoint record as it is on the exporting node (its paths under that node's roots).
    pub record: serde_json::Value,
    /// Size and SHA-256 (hex) of every regular file, by its path in the bundle (`checkpoint/...`,
    /// `mapped/...`), but the record and the mapped files' owner note, which an import writes itself.
    pub manifest: BTreeMap<String, (u64, String)>,
    /// The CPU description (`criu cpuinfo dump`, hex) of the node that made the dump; null when the
    /// checkpoint has none (made by older tools).
    pub cpuinfo: Option<String>,
}

/// What `drums-ckpt export --out FILE` wrote.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Export {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: ExportType,
    pub checkpoint: String,
    pub out: PathBuf,
    /// Bytes of the bundle file.
    pub bytes: u64,
    /// Regular files in the manifest.
    pub files: usize,
    /// Wall-clock seconds of the export (manifest and archive).
    pub export_s: f64,
}
