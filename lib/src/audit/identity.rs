//! The identity check of the audit (issue 27): which user namespace each session's init is in and which
//! host ids that namespace maps, read from /proc (never from the record, which is only compared with
//! it), and a verdict that no two sessions share a user namespace or an id. Sessions made with
//! `--host-ids` share the host's user namespace and its ids by design: a pair with one of them is
//! reported, not judged.

use crate::record::{IdRange, Session};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the audit read of one session's identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionIdentity {
    /// The inode of its init's user namespace; null when it could not be read.
    pub user_ns: Option<u64>,
    /// Whether that namespace is one of its own (not the host's, which the audit runs in).
    pub own_user_ns: bool,
    /// The host ids its uid_map and gid_map name: `(first inside, first on the host, count)` per line,
    /// as the host sees them; the host's identity map for a session in the host's user namespace.
    pub uid_map: Vec<[u64; 3]>,
    pub gid_map: Vec<[u64; 3]>,
    /// The range its record names (`id_range`), compared with the maps.
    pub record_id_range: Option<IdRange>,
}

/// The identity part of the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdentityReport {
    /// By session id.
    pub sessions: BTreeMap<String, SessionIdentity>,
    /// No finding and every session in a user namespace of its own; false: a finding; null: some session
    /// is in the host's user namespace (nothing to judge) and nothing else was found.
    pub pass: Option<bool>,
    /// Two sessions in one user namespace, two sessions whose maps share a host id, a session whose maps
    /// are not its record's range, or a map that could not be read. Each fails both rules.
    pub findings: Vec<String>,
    /// Pairs not judged, and why.
    pub not_judged: Vec<String>,
}

fn read_map(pid: i32, file: &str) -> Option<Vec<[u64; 3]>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .map(|l| {
            let v: Vec<u64> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (v.len() == 3).then(|| [v[0], v[1], v[2]])
        })
        .collect()
}

/// Read each session's identity.
pub fn read(sessions: &[Session]) -> (BTreeMap<String, SessionIdentity>, Vec<String>) {
    let host_userns = crate::proc::ns_inode(std::process::id() as i32, "user").ok();
    let mut out = BTreeMap::new();
    let mut problems = vec![];
    for s in sessions {
        let init = s.ns.as_ref().map(|n| n.init_pid).unwrap_or(0);
        let user_ns = crate::proc::ns_inode(init, "user").ok();
        let (uid_map, gid_map) = (read_map(init, "uid_map"), read_map(init, "gid_map"));
        if user_ns.is_none() || uid_map.is_none() || gid_map.is_none() {
            problems.push(format!("session {}: the user namespace or id maps of its init (pid {init}) could not be read", s.id));
        }
        out.insert(
            s.id.clone(),
            SessionIdentity { user_ns, own_user_ns: user_ns.is_some() && user_ns != host_userns, uid_map: uid_map.unwrap_or_default(), gid_map: gid_map.unwrap_or_default(), record_id_range: s.id_range },
        );
    }
    (out, problems)
}

fn overlap(a: &[[u64; 3]], b: &[[u64; 3]]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x[1] < y[1] + y[2] && y[1] < x[1] + x[2]))
}

/// The verdict over what was read (`problems`: maps that could not be read, findings already).
pub fn judge(sessions: BTreeMap<String, SessionIdentity>, problems: Vec<String>) -> IdentityReport {
    let mut findings = problems;
    let mut not_judged = vec![];
    for (id, s) in &sessions {
        let want = s.record_id_range.map(|r| vec![[0, r.base as u64, r.count as u64]]);
        match (&want, s.own_user_ns) {
            (Some(w), true) if &s.uid_map != w || &s.gid_map != w => findings.push(format!("session {id}: its maps (uid {:?}, gid {:?}) are not its record's id range {:?}", s.uid_map, s.gid_map, s.record_id_range)),
            (Some(_), false) => findings.push(format!("session {id}: its record names id range {:?} but its init is in the host's user namespace", s.record_id_range)),
            (None, true) => findings.push(format!("session {id}: its init is in a user namespace of its own, which its record does not name")),
            _ => {}
        }
    }
    let list: Vec<(&String, &SessionIdentity)> = sessions.iter().collect();
    for (i, (a, x)) in list.iter().enumerate() {
        for (b, y) in &list[i + 1..] {
            if !x.own_user_ns || !y.own_user_ns {
                not_judged.push(format!("{a} and {b}: {} in the host's user namespace, whose ids every such session shares by design", if !x.own_user_ns && !y.own_user_ns { "both are" } else if x.own_user_ns { "the second is" } else { "the first is" }));
                continue;
            }
            if x.user_ns == y.user_ns {
                findings.push(format!("{a} and {b} share the user namespace {:?}", x.user_ns));
            }
            if overlap(&x.uid_map, &y.uid_map) || overlap(&x.gid_map, &y.gid_map) {
                findings.push(format!("{a} and {b} share host ids: uid maps {:?} and {:?}, gid maps {:?} and {:?}", x.uid_map, y.uid_map, x.gid_map, y.gid_map));
            }
        }
    }
    let pass = if !findings.is_empty() {
        Some(false)
    } else if sessions.values().all(|s| s.own_user_ns) {
        Some(true)
    } else {
        None
    };
    IdentityReport { sessions, pass, findings, not_judged }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(ns: u64, base: u64) -> SessionIdentity {
        let m = vec![[0, base, 65536]];
        SessionIdentity { user_ns: Some(ns), own_user_ns: true, uid_map: m.clone(), gid_map: m, record_id_range: Some(IdRange { base: base as u32, count: 65536 }) }
    }
    fn host() -> SessionIdentity {
        let m = vec![[0, 0, 4294967295]];
        SessionIdentity { user_ns: Some(1), own_user_ns: false, uid_map: m.clone(), gid_map: m, record_id_range: None }
    }
    fn of(v: Vec<(&str, SessionIdentity)>) -> IdentityReport {
        judge(v.into_iter().map(|(k, s)| (k.to_string(), s)).collect(), vec![])
    }

    #[test]
    fn distinct_namespaces_and_ranges_pass() {
        let r = of(vec![("a", own(10, 1 << 30)), ("b", own(11, (1 << 30) + 65536))]);
        assert_eq!((r.pass, r.findings.len()), (Some(true), 0), "{r:?}");
    }

    #[test]
    fn a_shared_namespace_or_overlapping_ranges_is_a_finding() {
        let r = of(vec![("a", own(10, 1 << 30)), ("b", own(10, (1 << 30) + 65536))]);
        assert_eq!(r.pass, Some(false));
        assert!(r.findings.iter().any(|f| f.contains("share the user namespace")), "{r:?}");
        let r = of(vec![("a", own(10, 1 << 30)), ("b", own(11, (1 << 30) + 65535))]);
        assert_eq!(r.pass, Some(false));
        assert!(r.findings.iter().any(|f| f.contains("share host ids")), "{r:?}");
    }

    #[test]
    fn maps_that_are_not_the_records_range_are_a_finding() {
        let mut b = own(11, (1 << 30) + 65536);
        b.record_id_range = Some(IdRange { base: 1 << 30, count: 65536 });
        assert_eq!(of(vec![("a", own(10, 1 << 30)), ("b", b)]).pass, Some(false));
        let mut c = host();
        c.record_id_range = Some(IdRange { base: 1 << 30, count: 65536 });
        assert_eq!(of(vec![("a", own(10, 1 << 31)), ("c", c)]).pass, Some(false));
    }

    #[test]
    fn sessions_in_the_hosts_namespace_are_not_judged() {
        let r = of(vec![("a", host()), ("b", host())]);
        assert_eq!((r.pass, r.findings.len(), r.not_judged.len()), (None, 0, 1), "{r:?}");
        let r = of(vec![("a", own(10, 1 << 30)), ("b", host())]);
        assert_eq!(r.pass, None);
    }
}
