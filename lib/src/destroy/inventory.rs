//! `drums-sweep --report`: one inventory of what Drums holds on this host (a `host_inventory` record,
//! docs/record.md), found the ways the sweep finds it. It reads only: it takes no lock, writes no file
//! and judges nothing (the sweep judges; this lists). The tests' before/after check, pipelines/benchlib.py
//! and pipelines/first_check_report.py read this record instead of counting for themselves.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

crate::record_type!(InventoryType = "host_inventory");

/// What Drums holds on the host now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Inventory {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: InventoryType,
    /// When it was taken, Unix seconds.
    pub at: f64,
    pub state_root: PathBuf,
    pub checkpoint_root: PathBuf,
    /// Every directory under `<state_root>/sessions`.
    pub sessions: Vec<SessionEntry>,
    /// Every process in a PID namespace other than this tool's (the host's).
    pub processes: Vec<ProcessEntry>,
    /// Mount points in the host's mount table below a Drums root or whose path names `drums`.
    pub mounts: Vec<PathBuf>,
    /// The `drums` cgroup directories of the mounted hierarchies (the sweep's cgroup parents).
    pub cgroup_parents: Vec<PathBuf>,
    /// Every directory below a cgroup parent.
    pub cgroups: Vec<PathBuf>,
    /// Links of the host's network namespace named `drums*`.
    pub links: Vec<String>,
    /// nftables tables named `drums*` (the session firewall `inet drums`, policies `inet drums_net_<slot>`).
    pub nft_tables: Vec<String>,
    /// Address slot files, `<state_root>/slots/*`.
    pub slots: Vec<SlotEntry>,
    /// Checkpoint directories, complete and unfinished (`.partial`).
    pub checkpoints: Vec<CheckpointEntry>,
    /// Directories of checkpoints' mapped files (complete and `.partial`).
    pub mapped: Vec<PathBuf>,
    /// Root image directories (complete ones and unfinished builds).
    pub images: Vec<PathBuf>,
    /// Warm pools' spools.
    pub pools: Vec<PoolEntry>,
    /// Host id ranges that sessions' ledgers hold (`id_range` lines not released), with the processes
    /// running with one of their ids.
    pub id_ranges: Vec<IdRangeEntry>,
    /// Slots of the id band ($DRUMS_ID_BAND) that processes run with and no ledger holds: the ids of a
    /// session whose ledger is gone (the allocator skips them until those processes end).
    pub unledgered_ids: Vec<UnledgeredIds>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IdRangeEntry {
    /// The id of the session whose ledger holds it (its owner line's, else its directory's name).
    pub session: String,
    pub base: u32,
    pub count: u32,
    /// Host PIDs of the processes running with an id of the range.
    pub pids: Vec<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UnledgeredIds {
    /// The slot: its first host id and its size.
    pub base: u32,
    pub count: u32,
    /// Host PIDs of the processes running with an id of it.
    pub pids: Vec<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SessionEntry {
    /// The directory's name (a session id unless something else was put there).
    pub id: String,
    pub state_dir: PathBuf,
    /// Whether it holds a readable ledger.
    pub ledger: bool,
    /// The ledger's last phase; null: no ledger or no phase yet.
    pub phase: Option<String>,
    /// Whether the process that set that phase is alive; null without a phase.
    pub holder_alive: Option<bool>,
    /// Resources the ledger holds that are not released.
    pub resources: usize,
    /// The ledger's owner (its owner line: pid and start time); null: no ledger or no owner line yet.
    pub owner: Option<crate::record::Owner>,
    /// Whether that owner is alive (pid and start time); null without an owner.
    pub owner_alive: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessEntry {
    pub pid: i32,
    pub comm: String,
    /// Its PID namespace's inode.
    pub pidns: u64,
    /// A zombie: it holds nothing but its pid.
    pub zombie: bool,
    /// The host pid of the Drums session init that is PID 1 of its namespace (comm `drums-init` or command
    /// line `drums-ns init`, as the sweep recognises one); null: its namespace's PID 1 is no session init.
    pub session_init: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SlotEntry {
    pub path: PathBuf,
    /// The session the file names (its content); null: empty or unreadable.
    pub session: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckpointEntry {
    /// The checkpoint id (without `.partial`).
    pub id: String,
    pub dir: PathBuf,
    /// False for `<id>.partial`: a dump not finished (or killed midway).
    pub complete: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PoolEntry {
    pub checkpoint: String,
    pub spool: PathBuf,
    /// Siblings parked in it now.
    pub parked: usize,
}

fn sorted_dirs(root: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root).into_iter().flatten().flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect();
    v.sort();
    v
}

fn name_of(p: &Path) -> String {
    p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Every directory below `d`, at most `depth` levels down, symbolic links not followed.
fn walk(d: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    for p in sorted_dirs(d) {
        out.push(p.clone());
        if depth > 1 {
            walk(&p, depth - 1, out);
        }
    }
}

fn sessions() -> Vec<SessionEntry> {
    sorted_dirs(&crate::state::sessions_root())
        .into_iter()
        .map(|dir| {
            let c = crate::ledger::read_file(&dir.join(crate::ledger::FILE_NAME)).ok();
            let last = c.as_ref().and_then(|c| c.last_phase().map(|(p, by, _)| (p.to_string(), crate::proc::alive(by.pid, by.start_time))));
            let owner = c.as_ref().and_then(|c| c.owner().map(|(_, o, _, _)| o.clone()));
            SessionEntry {
                id: name_of(&dir),
                owner_alive: owner.as_ref().map(|o| crate::proc::alive(o.pid, o.start_time)),
                owner,
                ledger: c.is_some(),
                phase: last.as_ref().map(|l| l.0.clone()),
                holder_alive: last.map(|l| l.1),
                resources: c.map(|c| c.live().len()).unwrap_or(0),
                state_dir: dir,
            }
        })
        .collect()
}

fn processes() -> Vec<ProcessEntry> {
    let me = crate::proc::ns_inode(std::process::id() as i32, "pid").ok();
    let inits: BTreeMap<u64, i32> = super::sweep::session_inits().into_iter().map(|(pid, _, ns, _)| (ns, pid)).collect();
    let mut v = vec![];
    for pid in crate::proc::pids() {
        let Ok(ns) = crate::proc::ns_inode(pid, "pid") else { continue };
        if Some(ns) == me {
            continue;
        }
        v.push(ProcessEntry { pid, comm: crate::proc::comm(pid), pidns: ns, zombie: crate::proc::state(pid) == Some('Z'), session_init: inits.get(&ns).copied() });
    }
    v.sort_by_key(|p| p.pid);
    v
}

fn mounts() -> Vec<PathBuf> {
    let roots = [crate::state::state_root(), crate::state::checkpoint_root(), crate::mapped::mapped_root(), crate::image::images_root()];
    let mut v: Vec<PathBuf> = crate::mountinfo::read()
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|p| roots.iter().any(|r| p.starts_with(r)) || p.to_string_lossy().to_lowercase().contains(crate::state::NAME_PREFIX))
        .collect();
    v.sort();
    v.dedup();
    v
}

fn nft_tables() -> Vec<String> {
    let Ok(o) = std::process::Command::new("nft").args(["list", "tables"]).stderr(std::process::Stdio::null()).output() else { return vec![] };
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let t = l.trim().strip_prefix("table ")?;
            let name = t.split_whitespace().nth(1)?;
            name.starts_with(crate::state::NAME_PREFIX).then(|| t.to_string())
        })
        .collect();
    v.sort();
    v
}

fn checkpoints() -> Vec<CheckpointEntry> {
    sorted_dirs(&crate::state::checkpoint_root())
        .into_iter()
        .filter_map(|dir| {
            let name = name_of(&dir);
            let (id, complete) = match name.strip_suffix(".partial") {
                Some(id) => (id.to_string(), false),
                None => (name, true),
            };
            crate::state::check_checkpoint_id(&id).ok()?;
            Some(CheckpointEntry { id, dir, complete })
        })
        .collect()
}

/// Take the inventory. Changes nothing.
pub fn take() -> Inventory {
    let parents = super::cgroup_parents();
    let mut cgroups = vec![];
    for p in &parents {
        walk(p, 4, &mut cgroups);
    }
    let mut links: Vec<String> = super::links::list().unwrap_or_default().into_iter().map(|l| l.name).filter(|n| n.starts_with(crate::state::NAME_PREFIX)).collect();
    links.sort();
    let mut slots: Vec<SlotEntry> = std::fs::read_dir(crate::state::state_root().join("slots"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let session = std::fs::read_to_string(e.path()).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
            SlotEntry { path: e.path(), session }
        })
        .collect();
    slots.sort_by(|a, b| a.path.cmp(&b.path));
    let mapped = sorted_dirs(&crate::mapped::mapped_root()).into_iter().filter(|p| crate::state::check_checkpoint_id(name_of(p).trim_end_matches(".partial")).is_ok()).collect();
    let pools = sorted_dirs(&crate::state::pools_root())
        .into_iter()
        .filter_map(|dir| {
            let spool = crate::spool::Spool::of(&name_of(&dir)).ok()?;
            Some(PoolEntry { parked: spool.parked().len(), checkpoint: spool.checkpoint, spool: spool.dir })
        })
        .collect();
    let mut users = crate::idrange::band_users();
    let id_ranges: Vec<IdRangeEntry> = crate::idrange::held()
        .into_iter()
        .map(|(session, r)| {
            let pids: Vec<i32> = users.iter().filter(|(b, _)| r.overlaps(**b as u64, crate::idrange::COUNT as u64)).flat_map(|(_, p)| p.clone()).collect();
            users.retain(|b, _| !r.overlaps(*b as u64, crate::idrange::COUNT as u64));
            IdRangeEntry { session, base: r.base, count: r.count, pids }
        })
        .collect();
    let unledgered_ids = users.into_iter().map(|(base, pids)| UnledgeredIds { base, count: crate::idrange::COUNT, pids }).collect();
    Inventory {
        drums: crate::record::VERSION,
        kind: InventoryType::Tag,
        at: crate::state::now(),
        state_root: crate::state::state_root(),
        checkpoint_root: crate::state::checkpoint_root(),
        sessions: sessions(),
        processes: processes(),
        mounts: mounts(),
        cgroup_parents: parents,
        cgroups,
        links,
        nft_tables: nft_tables(),
        slots,
        checkpoints: checkpoints(),
        mapped,
        images: sorted_dirs(&crate::image::images_root()),
        pools,
        id_ranges,
        unledgered_ids,
    }
}
