//! Records checked against this host: what a record names must be this session's or this checkpoint's
//! own (its state directory, its cgroups, its live namespaces, addresses of the pool, paths under the
//! roots Drums keeps), or a tool would mount, remove, signal or write something else. The record types
//! and their checks that need nothing of the host live in crate::record; these `parse` and `validate`
//! methods are the ones every tool reads a record through.

use crate::error::{Error, Result};
use crate::record::{check_checkpoint_id, check_hostname, check_mac, check_session_id, from_value, parse_line, Checkpoint, Namespaces, Net, Session, CHECKPOINT, MAX_WIPE_BYTES, SESSION};

impl Checkpoint {
    /// A checkpoint record of this node: every check of `parse_elsewhere`, and its directories are where
    /// this node keeps checkpoint `id` (`$DRUMS_CHECKPOINT_DIR/<id>`, `$DRUMS_MAPPED_DIR/<id>`).
    pub fn parse(line: &str) -> Result<Checkpoint> {
        let c = Checkpoint::parse_elsewhere(line)?;
        let expected = crate::state::checkpoint_root().join(&c.id);
        if c.dir != expected {
            return Err(Error::bad_field("dir", format!("{} is not {} (where checkpoint {} lives)", c.dir.display(), expected.display(), c.id)));
        }
        if let Some(m) = &c.mapped {
            let expected = crate::mapped::mapped_root().join(&c.id);
            if m.dir != expected {
                return Err(Error::bad_field("mapped.dir", format!("{} is not {} (where checkpoint {}'s mapped files live)", m.dir.display(), expected.display(), c.id)));
            }
        }
        Ok(c)
    }

    /// A checkpoint record as another node wrote it (drums-ckpt check, import): its directories are
    /// named `<id>` under that node's roots, which may not be this node's; everything else is checked as
    /// `parse` checks it.
    pub fn parse_elsewhere(line: &str) -> Result<Checkpoint> {
        let c: Checkpoint = from_value(parse_line(line, CHECKPOINT)?)?;
        check_checkpoint_id(&c.id).map_err(|m| Error::bad_field("id", m))?;
        if !c.dir.is_absolute() || c.dir.file_name().is_none_or(|n| *n != *c.id) {
            return Err(Error::bad_field("dir", format!("{} is not an absolute path ending in the checkpoint's id {}", c.dir.display(), c.id)));
        }
        if c.images != c.dir.join("images") || c.layer != c.dir.join("layer") {
            return Err(Error::bad_field("images", "images and layer must be the checkpoint directory's images/ and layer/"));
        }
        if let Some(bad) = c.write_open.iter().find(|p| p.as_os_str().is_empty() || !p.components().all(|c| matches!(c, std::path::Component::Normal(_)))) {
            return Err(Error::bad_field("write_open", format!("{} is not a plain relative path inside the layer", bad.display())));
        }
        if c.layers.iter().enumerate().any(|(i, l)| *l != c.dir.join("layers").join(i.to_string())) {
            return Err(Error::bad_field("layers", "layers must be the checkpoint directory's layers/0, layers/1, ..."));
        }
        if let Some(i) = &c.image {
            i.validate("image")?;
        }
        if let Some(r) = &c.runtime {
            r.validate("runtime")?;
        }
        for (i, w) in c.wipe.iter().enumerate() {
            let ok = w.pid > 0 && w.start < w.end && w.end - w.start <= MAX_WIPE_BYTES && !w.comm.contains('\0') && w.comm.len() <= 64;
            if !ok {
                return Err(Error::bad_field(format!("wipe[{i}]"), format!("pid {} {:#x}..{:#x} is not a wipe-on-fork range (a process id, start < end, at most {MAX_WIPE_BYTES} bytes)", w.pid, w.start, w.end)));
            }
        }
        let src = &c.source;
        check_session_id(&src.session).map_err(|m| Error::bad_field("source.session", m))?;
        check_hostname(&src.hostname).map_err(|m| Error::bad_field("source.hostname", m))?;
        check_session_addr("source.session_addr", &src.session_addr)?;
        check_mac(&src.session_mac).map_err(|m| Error::bad_field("source.session_mac", m))?;
        src.desktop.validate("source.desktop", Some(&src.session_addr))?;
        if let Some(m) = &c.mapped {
            if !m.dir.is_absolute() || m.dir.file_name().is_none_or(|n| *n != *c.id) {
                return Err(Error::bad_field("mapped.dir", format!("{} is not an absolute path ending in the checkpoint's id {}", m.dir.display(), c.id)));
            }
            let files_dir = crate::mapped::layer_of(&m.dir).join(crate::mapped::inside_dir(&c.id).strip_prefix("/").expect("absolute"));
            if let Some(bad) = m.files.iter().find(|f| f.path.parent() != Some(files_dir.as_path()) || !f.path.file_name().is_some_and(|n| n.to_str().is_some_and(|n| n.ends_with(".bin")))) {
                return Err(Error::bad_field("mapped.files", format!("{} is not a .bin file directly in {}", bad.path.display(), files_dir.display())));
            }
        }
        Ok(c)
    }
}

impl Session {
    pub fn parse(line: &str) -> Result<Session> {
        let s: Session = from_value(parse_line(line, SESSION)?)?;
        s.validate()?;
        Ok(s)
    }

    /// Refuse records whose names could point a tool at something that is not this session's.
    pub fn validate(&self) -> Result<()> {
        check_session_id(&self.id).map_err(|m| Error::bad_field("id", m))?;
        let expected = crate::state::session_dir(&self.id);
        if self.state_dir != expected {
            return Err(Error::bad_field(
                "state_dir",
                format!("{} is not {} (the state directory of session {})", self.state_dir.display(), expected.display(), self.id),
            ));
        }
        if let Some(ov) = &self.overlay {
            // Where drums-overlay mounts a session's root, always: any other path would point a tool's
            // mount, copy or removal at something that is not this session's.
            let rw = self.state_dir.join("rw");
            for (field, got, want) in [("overlay.merged", &ov.merged, self.state_dir.join("root")), ("overlay.tmpfs", &ov.tmpfs, rw.clone()), ("overlay.upper", &ov.upper, rw.join("upper")), ("overlay.work", &ov.work, rw.join("work"))] {
                if *got != want {
                    return Err(Error::bad_field(field, format!("{} is not {} (where drums-overlay mounts session {}'s root)", got.display(), want.display(), self.id)));
                }
            }
            if let Some(i) = &ov.image {
                i.validate("overlay.image")?;
            }
            if let Some(r) = &ov.runtime {
                r.validate("overlay.runtime")?;
            }
            if let Some(m) = &ov.mapped {
                let id = m.parent().filter(|d| d.parent() == Some(crate::mapped::mapped_root().as_path())).and_then(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned());
                if m.file_name().is_none_or(|n| n != "layer") || id.is_none_or(|id| check_checkpoint_id(&id).is_err()) {
                    return Err(Error::bad_field("overlay.mapped", format!("{} is not the layer of a checkpoint's mapped files under {}", m.display(), crate::mapped::mapped_root().display())));
                }
            }
            for (i, l) in ov.layers.iter().enumerate() {
                crate::overlay::check_layer_path(l).map_err(|m| Error::bad_field(format!("overlay.layers[{i}]"), m))?;
            }
        }
        if self.owner.pid <= 0 {
            return Err(Error::bad_field("owner.pid", format!("{} is not a process id", self.owner.pid)));
        }
        if let Some(ns) = &self.ns {
            ns.validate("ns")?;
        }
        if let Some(net) = &self.net {
            net.validate("net")?;
        }
        if let Some(d) = &self.desktop {
            d.validate("desktop", self.net.as_ref().map(|n| n.session_addr.as_str()))?;
        }
        self.validate_sections()
    }

    /// The sections whose paths and ids reach the tools: `cgroup` (mkdir, rmdir, writes and CRIU's command
    /// line), `restore` (drums-reseed loads the checkpoint it names), `pool` (drums-pool's spool).
    fn validate_sections(&self) -> Result<()> {
        if let Some(cg) = &self.cgroup {
            validate_cgroup(&self.id, cg)?;
        }
        if let Some(r) = &self.restore {
            check_checkpoint_id(&r.checkpoint).map_err(|m| Error::bad_field("restore.checkpoint", m))?;
            let want = crate::state::checkpoint_root().join(&r.checkpoint);
            if let Some(d) = r.checkpoint_dir.as_ref().filter(|d| **d != want) {
                return Err(Error::bad_field("restore.checkpoint_dir", format!("{} is not {} (where checkpoint {} lives)", d.display(), want.display(), r.checkpoint)));
            }
        }
        if let Some(p) = &self.pool {
            p.validate()?;
        }
        Ok(())
    }
}

impl Namespaces {
    pub fn validate(&self, field: &str) -> Result<()> {
        if self.init_pid <= 0 {
            return Err(Error::bad_field(format!("{field}.init_pid"), format!("{} is not a process id", self.init_pid)));
        }
        check_hostname(&self.hostname).map_err(|m| Error::bad_field(format!("{field}.hostname"), m))?;
        // Tools find the session's processes by its PID namespace (drums-reseed signals them and writes
        // into their memory): a session has one of its own, never the tool's. While its init lives, every
        // inode is its init's.
        let i = &self.inodes;
        if crate::proc::ns_inode(std::process::id() as i32, "pid").is_ok_and(|own| own == i.pid) {
            return Err(Error::bad_field(format!("{field}.inodes.pid"), format!("{} is this tool's own PID namespace, not a session's", i.pid)));
        }
        let init_alive = crate::proc::alive(self.init_pid, self.init_start_time);
        for (kind, ino) in [("pid", i.pid), ("mnt", i.mnt), ("net", i.net), ("ipc", i.ipc), ("uts", i.uts)] {
            // Unreadable (a zombie init has no namespaces any more): nothing to compare.
            if init_alive && crate::proc::ns_inode(self.init_pid, kind).is_ok_and(|theirs| theirs != ino) {
                return Err(Error::bad_field(format!("{field}.inodes.{kind}"), format!("{ino} is not the {kind} namespace of the session's init {}", self.init_pid)));
            }
        }
        Ok(())
    }
}

impl Net {
    /// Every member follows from the slot (net::net_record); only the MAC is the session's own.
    pub fn validate(&self, field: &str) -> Result<()> {
        if self.slot >= crate::net::POOL_SLOTS {
            return Err(Error::bad_field(format!("{field}.slot"), format!("{} is not below {}", self.slot, crate::net::POOL_SLOTS)));
        }
        let want = crate::net::net_record(self.slot, &self.session_mac);
        for (name, got, want) in [("host_if", &self.host_if, &want.host_if), ("session_if", &self.session_if, &want.session_if), ("host_addr", &self.host_addr, &want.host_addr), ("session_addr", &self.session_addr, &want.session_addr)] {
            if got != want {
                return Err(Error::bad_field(format!("{field}.{name}"), format!("`{got}` is not `{want}` (what slot {} has)", self.slot)));
            }
        }
        if self.prefix_len != want.prefix_len {
            return Err(Error::bad_field(format!("{field}.prefix_len"), format!("{} is not {}", self.prefix_len, want.prefix_len)));
        }
        check_mac(&self.session_mac).map_err(|m| Error::bad_field(format!("{field}.session_mac"), m))
    }
}

/// The `cgroup` section: every path must be this session's own directory, `<a cgroup mount of this
/// machine>/drums/<id>` in a hierarchy of that key (a v1 controller the mount carries, or v2's
/// `unified`), and every `proc_paths` entry that cgroup as /proc/PID/cgroup names it (`<the mount's
/// root>/drums/<id>`): CRIU gets them on its command line (`--cgroup-root`, `--freeze-cgroup`).
fn validate_cgroup(id: &str, sec: &crate::cgroup::Section) -> Result<()> {
    use crate::cgroup::{Version, PARENT};
    let mounts = crate::cgroup::detect::mounts()?;
    let of_key = |k: &str| -> Vec<&crate::cgroup::detect::Mount> {
        match sec.version {
            Version::V1 => mounts.v1.iter().filter(|m| m.controllers.iter().any(|c| c == k)).collect(),
            Version::V2 if k == "unified" => mounts.v2.iter().collect(),
            Version::V2 => vec![],
        }
    };
    // v1: `<mount>/drums/<id>`; v2: `<mount>/<base>/drums/<id>`, the base Drums is given (cgroup::detect::v2_base).
    let base = |m: &crate::cgroup::detect::Mount| -> String {
        match sec.version {
            Version::V1 => "/".into(),
            Version::V2 => crate::cgroup::detect::v2_base(m).unwrap_or_else(|_| "/".into()),
        }
    };
    for (k, p) in &sec.paths {
        if !of_key(k).iter().any(|m| *p == m.path.join(base(m).trim_start_matches('/')).join(PARENT).join(id)) {
            return Err(Error::bad_field(format!("cgroup.paths.{k}"), format!("{} is not session {id}'s own cgroup directory (<a {k} cgroup mount>/{PARENT}/{id})", p.display())));
        }
    }
    for (k, p) in &sec.proc_paths {
        let root = |m: &crate::cgroup::detect::Mount| format!("{}{}", m.root.trim_end_matches('/'), base(m).trim_end_matches('/'));
        if !of_key(k).iter().any(|m| *p == format!("{}/{PARENT}/{id}", root(m))) {
            return Err(Error::bad_field(format!("cgroup.proc_paths.{k}"), format!("`{p}` is not session {id}'s cgroup as /proc/PID/cgroup names it (<the mount's root>/{PARENT}/{id})")));
        }
    }
    Ok(())
}

/// A session's address: the session end of some slot's /30 (docs/record.md, "Addresses").
fn check_session_addr(field: &str, a: &str) -> Result<()> {
    let slot = a.parse::<std::net::Ipv4Addr>().ok().and_then(|ip| u32::from(ip).checked_sub(u32::from(std::net::Ipv4Addr::from(crate::net::POOL_BASE)))).map(|off| off / 4);
    match slot {
        Some(slot) if slot < crate::net::POOL_SLOTS && crate::net::slot_addrs(slot).1.to_string() == a => Ok(()),
        _ => Err(Error::bad_field(field, format!("`{a}` is not a session address of the pool"))),
    }
}

