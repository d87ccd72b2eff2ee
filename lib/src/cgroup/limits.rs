//! The limits a session's cgroups are made with, in the kernel's units, and their defaults.

use crate::error::{Error, Result};
pub use crate::record::cgroup::Limits;

/// The limits every session gets unless told otherwise (drums-cgroup create without options, cold.sh,
/// drums-restore, the pool). The one place these numbers live: the tools and pipelines take them from here.
/// Memory 4 GiB: OSWorld's own VMs (its Docker provider) run the whole Ubuntu desktop, LibreOffice and
/// Chrome included, in 4 GiB; a session here peaks at 122 MiB at ready and at 969 MiB with ten tabs of
/// 64 MiB each. Tasks 4096: a session runs about 77 at ready and 212 with those ten tabs. Measured and
/// argued in drums(7), "Default limits". CPUs 2: the shape of the source report's sessions.
pub const DEFAULT_CPUS: f64 = 2.0;
pub const DEFAULT_MEMORY_BYTES: u64 = 4 << 30;
/// DEFAULT_MEMORY_BYTES as --memory takes it, which --help and the man page show (a test ties the two).
pub const DEFAULT_MEMORY: &str = "4G";
pub const DEFAULT_PIDS: u64 = 4096;


impl Limits {
    /// The CFS period both versions default to.
    pub const PERIOD_US: u64 = 100_000;

    /// `cpus` CPUs' worth of time per period, `memory_bytes` of memory (swap included: none beyond it),
    /// at most `pids_max` tasks.
    pub fn new(cpus: f64, memory_bytes: u64, pids_max: u64) -> Result<Limits> {
        if !(cpus.is_finite() && cpus > 0.0) {
            return Err(Error::Usage(format!("--cpus {cpus}: must be a positive number of CPUs")));
        }
        if memory_bytes == 0 || pids_max == 0 {
            return Err(Error::Usage("memory and pids limits must be positive".into()));
        }
        let quota = (cpus * Self::PERIOD_US as f64).round() as u64;
        Ok(Limits { cpu_quota_us: quota.max(1), cpu_period_us: Self::PERIOD_US, memory_bytes, pids_max })
    }

    /// A compact form for other tools' options: `cpus=2,memory=4G,pids=4096`, or positionally
    /// `2,4G,4096` (CPUS,MEMORY,PIDS); any subset, the rest default.
    pub fn parse_spec(spec: &str) -> Result<Limits> {
        let (mut cpus, mut mem, mut pids) = (DEFAULT_CPUS, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS);
        const KEYS: [&str; 3] = ["cpus", "memory", "pids"];
        for (i, part) in spec.split(',').map(str::trim).enumerate() {
            if part.is_empty() {
                continue;
            }
            let (k, v) = match part.split_once('=') {
                Some(kv) => kv,
                None => (*KEYS.get(i).ok_or_else(|| Error::Usage(format!("limits `{spec}`: at most CPUS,MEMORY,PIDS")))?, part),
            };
            match k {
                "cpus" => cpus = v.parse().map_err(|_| Error::Usage(format!("cpus={v}: not a number")))?,
                "memory" => mem = crate::cli::parse_bytes(v).map_err(Error::Usage)?,
                "pids" => pids = v.parse().map_err(|_| Error::Usage(format!("pids={v}: not a count")))?,
                _ => return Err(Error::Usage(format!("limit `{k}`: expected cpus, memory or pids"))),
            }
        }
        Limits::new(cpus, mem, pids)
    }
}

impl Default for Limits {
    /// DEFAULT_CPUS, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS.
    fn default() -> Limits {
        Limits::new(DEFAULT_CPUS, DEFAULT_MEMORY_BYTES, DEFAULT_PIDS).expect("valid defaults")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn default_memory_text_is_default_memory_bytes() {
        assert_eq!(crate::cli::parse_bytes(super::DEFAULT_MEMORY), Ok(super::DEFAULT_MEMORY_BYTES));
    }

    use super::*;

    #[test]
    fn limits_in_kernel_units() {
        let l = Limits::default();
        assert_eq!((l.cpu_quota_us, l.cpu_period_us, l.memory_bytes, l.pids_max), (200000, 100000, 4294967296, 4096));
        let l = Limits::parse_spec("cpus=0.5,memory=64M").unwrap();
        assert_eq!((l.cpu_quota_us, l.memory_bytes, l.pids_max), (50000, 64 << 20, 4096));
        assert!(Limits::parse_spec("gpus=1").is_err());
        assert_eq!(Limits::parse_spec("2,4G,4096").unwrap(), Limits::default());
        let l = Limits::parse_spec("1.5,256M").unwrap();
        assert_eq!((l.cpu_quota_us, l.memory_bytes, l.pids_max), (150000, 256 << 20, 4096));
        assert!(Limits::parse_spec("1,2G,3,4").is_err());
        assert!(Limits::new(0.0, 1, 1).is_err());
    }
}
