//! The `pool` section of a parked or taken session record (written by crate::pool).

use super::Owner;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The `pool` section of a parked or taken session record (docs/record.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Section {
    pub checkpoint: String,
    /// The spool: `<pools root>/<checkpoint>` (a record naming another is refused).
    pub spool: PathBuf,
    /// Unix seconds when the filler parked it.
    pub parked_at: f64,
    /// Frozen by the cgroup freezer now: true while parked frozen, false once taken.
    pub frozen: bool,
    /// The filler, which is also the ledger's owner.
    pub filler: Owner,
    pub fill_s: FillTimes,
    /// When the take started (Unix seconds): the take took `ready.checked_at` minus this; null while parked.
    #[serde(default)]
    pub take_started_at: Option<f64>,
    /// When the taker claimed it; null while parked.
    #[serde(default)]
    pub taken_at: Option<f64>,
    /// The taker, also written to `owner`; null while parked.
    #[serde(default)]
    pub taker: Option<Owner>,
}

/// What the filler spent on one sibling, seconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FillTimes {
    pub restore_s: f64,
    pub reseed_ready_s: f64,
    pub freeze_s: f64,
    pub total_s: f64,
}
