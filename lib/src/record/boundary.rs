//! A process's boundary as a checkpoint record and an audit report name it (read from the kernel by
//! crate::boundary).

/// A process's boundary as the kernel reports it (/proc/PID/status): what drums-audit compares between a
/// checkpoint's source and each sibling.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Boundary {
    /// CapBnd, CapEff and CapPrm as hex masks.
    pub cap_bnd: String,
    pub cap_eff: String,
    pub cap_prm: String,
    /// 0 none, 1 strict, 2 filter.
    pub seccomp: u8,
    /// Seccomp_filters: how many filters are stacked.
    pub seccomp_filters: u32,
    pub no_new_privs: bool,
    /// The inode of the process's user namespace.
    pub user_ns: u64,
}

/// One process's boundary, named as a checkpoint and an audit name it: PID inside the session, command.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessBoundary {
    pub pid: i32,
    pub comm: String,
    #[serde(flatten)]
    pub boundary: Boundary,
}
