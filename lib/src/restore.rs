//! Restoring isolated siblings from a checkpoint: per sibling a ledger, a fresh overlay (empty upper over
//! the checkpoint layer, the runtime layer and the root image the checkpoint names), a fresh network
//! namespace with its own veth and address, its
//! own cgroups (drums-restore gives every sibling the default limits unless told otherwise), then
//! `criu restore`.

use crate::error::{Error, IoContext, Result};
use crate::ledger::{Ledger, Resource};
use crate::record::{Checkpoint, Namespaces, Restore, RestoreTimes, Session};
use std::os::unix::process::CommandExt;
use std::time::Instant;

pub struct RestoreOptions {
    pub tmpfs_bytes: u64,
    pub ttl_s: Option<u64>,
    /// Per-sibling cgroup limits; None: no cgroups (the opt-out, `--no-cgroup`).
    pub limits: Option<crate::cgroup::Limits>,
    /// Mark every restored process mergeable by KSM (PR_SET_MEMORY_MERGE); opt-in.
    pub ksm: bool,
    /// The siblings' network policy (default `none`, whatever the checkpoint's source ran under).
    pub net: crate::net::egress::Options,
    /// Each sibling in a user namespace of its own with a host id range of its own (drums(7), "Its own
    /// user namespace"): the range is ledgered first, the layers are shown through idmapped mounts, and
    /// CRIU runs as root of the sibling's user namespace (criu::AsUsernsRoot).
    pub userns: bool,
}

/// Where a restore hands CRIU the sibling's network namespace (`--inherit-fd fd[N]:drums-net`): a
/// descriptor number clear of CRIU's own.
const NETNS_FD: i32 = 100;

/// Restore one sibling. On failure everything it made is destroyed before the error is returned.
pub fn restore_one(c: &Checkpoint, o: &RestoreOptions) -> Result<Session> {
    let t0 = Instant::now();
    if !c.images.is_dir() || !c.layer.is_dir() {
        return Err(Error::bad_input(format!("checkpoint {}: {} or {} is missing", c.id, c.images.display(), c.layer.display())));
    }
    // Every sibling starts behind the firewall exactly as Drums installs it, also after a reboot or an
    // `nft flush ruleset` (drums-ns create does the same for cold sessions); before anything is made.
    crate::net::ensure_firewall()?;
    let id = crate::state::new_id('d');
    let dir = crate::state::session_dir(&id);
    let owner = crate::proc::session_owner()?;
    let ledger = Ledger::create(&dir, &id, owner.clone(), o.ttl_s)?;
    ledger.phase("restoring")?;
    let mut s = Session::new(id, dir.clone(), owner, o.ttl_s);
    let ledger_s = t0.elapsed().as_secs_f64();
    match build(&mut s, &ledger, c, o, t0, ledger_s) {
        Ok(()) => {
            ledger.phase("live")?;
            Ok(s)
        }
        Err(e) => {
            let cleanup = crate::destroy::destroy(&dir, &crate::destroy::DestroyOptions::default()).and_then(|r| {
                if r.clean() {
                    Ok(())
                } else {
                    Err(Error::failed(format!("destroying the failed sibling {} left {} resources", s.id, r.left.len())))
                }
            });
            Err(e.with_cleanup(cleanup))
        }
    }
}

fn build(s: &mut Session, ledger: &Ledger, c: &Checkpoint, o: &RestoreOptions, t0: Instant, ledger_s: f64) -> Result<()> {
    let t = Instant::now();
    // The range first (its ledger line before anything that uses it), then the user namespace: both
    // are needed by the overlay's idmapped lowers.
    let userns = match o.userns {
        true => {
            let r = crate::idrange::allocate(ledger)?;
            s.id_range = Some(r);
            let u = crate::idrange::session_userns(&r)?;
            crate::ns::set_userns_limits(&crate::nsenter::NsFile::from_file(u.try_clone().ctx("duplicate", "the user namespace descriptor")?, crate::nsenter::Kind::User))?;
            Some(u)
        }
        false => None,
    };
    let mut layers = vec![c.layer.clone()];
    layers.extend(c.layers.iter().cloned());
    let (image, runtime) = lowers_of(c)?;
    // Checked again under the use lock, which `drums-sweep --prune-root-images` takes exclusively.
    let _use = crate::image::lock(false)?;
    crate::image::check(image, "image")?;
    crate::runtime::check(runtime, "runtime")?;
    let mapped = c.mapped.as_ref().map(|m| crate::mapped::layer_of(&m.dir));
    let lowers = crate::overlay::Lowers { layers: &layers, layer_mount: crate::overlay::LayerMount::InPlace, mapped: mapped.as_deref(), runtime, image, id_range: s.id_range.as_ref() };
    let overlay = crate::overlay::mount_root(ledger, &s.state_dir, &lowers, o.tmpfs_bytes, &[])?;
    drop(_use);
    let merged = overlay.merged.clone();
    s.overlay = Some(overlay);
    let overlay_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let slot = crate::net::allocate_slot(ledger, &s.id)?;
    let host_if = crate::net::host_if_name(slot);
    ledger.create_res(Resource::Link { name: host_if.clone() })?;
    if let Some(limits) = &o.limits {
        crate::cgroup::create(s, limits)?;
    }
    let cgroup_s = t.elapsed().as_secs_f64();

    // The sibling's network, before CRIU: a namespace held by a descriptor until the restored tree joins
    // it, the veth peer born in it as eth0, addresses, lo up. The MAC stays the source's until
    // drums-reseed: a restore without hygiene is a clone, visibly. CRIU only restores the sockets into it
    // (drums-ckpt left the source's namespace out of the images): its own network restore ran `ip` five
    // times and iptables-restore twice, and building the namespace from CRIU's action script instead cost
    // seven runs of sh, one per CRIU action (criu_s 0.129 -> 0.107 s without them).
    let t = Instant::now();
    // In its own user namespace, the network namespace is that namespace's (CRIU joins it from there).
    let netns = match &userns {
        Some(u) => crate::idrange::netns_in(u)?,
        None => crate::net::new_netns()?,
    };
    crate::net::create_veth_in(slot, &netns, &c.source.session_mac)?;
    let netns_dup = netns.try_clone().ctx("duplicate", "the network namespace descriptor")?;
    crate::net::configure_session_end_in(crate::nsenter::NsFile::from_file(netns_dup, crate::nsenter::Kind::Net), crate::net::SESSION_IF, slot, None)?;
    s.net = Some(crate::net::net_record(slot, &c.source.session_mac));
    // The sibling's own policy is applied on the host beside CRIU (below), not before it: its table,
    // routing, resolver and auditor (70 ms p50 on a quiet host, more with many other sessions' tables)
    // then cost the restore only what outlasts CRIU. Fail-closed: the sibling's default route is the
    // policy's last step (egress::apply_to), so a restored process that connects before then finds no
    // route (unreachable, at once), and a failure of either side destroys the sibling.
    let egress_netns = crate::nsenter::NsFile::from_file(netns.try_clone().ctx("duplicate", "the network namespace descriptor")?, crate::nsenter::Kind::Net);
    let egress_target = crate::net::egress::Target::of(s)?;
    let network_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let (work_dir, images, cgroups, as_userns_root) = match (userns, s.id_range) {
        (Some(u), Some(r)) => {
            // CRIU as root of the sibling's user namespace: it works in a directory of the range's root
            // and sees the images at <state_dir>/images, in a mount namespace of its own.
            let work = s.state_dir.join(crate::criu::USERNS_WORK_DIR);
            std::fs::create_dir(&work).ctx("create directory", &work)?;
            std::os::unix::fs::chown(&work, Some(r.base), Some(r.base)).ctx("chown", &work)?;
            let images = s.state_dir.join("images");
            let cgroup_dirs: Vec<std::path::PathBuf> = s.cgroup.as_ref().map(|c| {
                let mut d: Vec<_> = c.paths.values().cloned().collect();
                d.sort();
                d.dedup();
                d
            }).unwrap_or_default();
            let view_root = crate::state::state_root();
            let timens = crate::criu::dump_clocks(&c.images)?.map(crate::criu::timens_offsets);
            let enter = crate::criu::AsUsernsRoot::new(u, &cgroup_dirs, &view_root, (&merged, &merged), (&work, &work), (&c.images, &images), timens)?;
            (work, images, crate::criu::CgroupPlacement::Ignore, Some(enter))
        }
        _ => (s.state_dir.clone(), c.images.clone(), crate::criu::CgroupPlacement::of(s.cgroup.as_ref()), None),
    };
    let pidfile = work_dir.join("init.pid");
    let call = crate::criu::Restore {
        images,
        work_dir: work_dir.clone(),
        log: "restore.log".into(),
        pidfile: pidfile.clone(),
        root: merged,
        cgroups,
        inherit_netns_fd: NETNS_FD,
        as_userns_root: as_userns_root.is_some(),
    };
    let mut cmd = call.command();
    let ksm = o.ksm;
    let netns_fd = std::os::fd::AsRawFd::as_raw_fd(&netns);
    // CRIU itself stays in this tool's cgroups: with --cgroup-root the tree's root task moves itself into
    // the sibling's cgroups as soon as it is forked, before it restores any memory or forks the others, so
    // every restored page is charged to the sibling (v1 never moves charges afterwards). Moving CRIU in
    // first as well (as this tool did) made each restore wait on the kernel's cgroup migration lock once
    // more: CRIU's time outside its own log (fork, that move, exec) was 24.9 ms p50 with it, 13.2 ms
    // without it, 12.4 ms for a sibling without cgroups (n=10 each, 2026-12-01).
    unsafe {
        cmd.pre_exec(move || {
            // dup2 leaves the copy open across exec, unlike the original.
            if libc::dup2(netns_fd, NETNS_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if ksm {
                // PR_SET_MEMORY_MERGE: inherited by the tasks CRIU creates, whose memory the restorer
                // rebuilds, so every restored process is mergeable.
                if libc::prctl(67, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if let Some(a) = &as_userns_root {
                a.enter()?;
            }
            Ok(())
        });
    }
    // CRIU forks the tree's root task (PID 1 of a new PID namespace) within milliseconds: it is ledgered
    // as the sibling's init as soon as it shows, so that a restore killed midway (CRIU dies with this
    // tool, leaving its half-restored tasks waiting forever) is destroyed with everything it made
    // (killing the init ends the whole namespace); until then destroy finds CRIU's tasks by their command
    // line (criu::kill_stray_restores).
    let mut ledger_err = None;
    let (status, criu_s, egress, egress_s, egress_wait_s) = std::thread::scope(|sc| -> Result<_> {
        let egress = crate::net::egress::apply_beside(sc, ledger, egress_target, &o.net, egress_netns, "criu restore")?;
        let status = crate::criu::run_watching(&mut cmd, |criu| match restored_root_task(criu) {
            Some((pid, start_time)) => {
                if let Err(e) = ledger.create_res(Resource::Process { pid, start_time, role: "init".into(), init: true }) {
                    ledger_err = Some(e);
                }
                true
            }
            None => false,
        });
        let criu_s = t.elapsed().as_secs_f64();
        let w = Instant::now();
        let (egress, egress_s) = egress.join()?;
        Ok((status, criu_s, egress, egress_s, w.elapsed().as_secs_f64()))
    })?;
    drop(netns);
    if let Some(e) = ledger_err {
        return Err(e);
    }
    let pid_text = std::fs::read_to_string(&pidfile).unwrap_or_default();
    if let Ok(pid) = pid_text.trim().parse::<i32>() {
        let known = ledger.read()?.live().iter().any(|r| matches!(r, Resource::Process { pid: p, .. } if *p == pid));
        if let (false, Some(start)) = (known, crate::proc::start_time(pid)) {
            ledger.create_res(Resource::Process { pid, start_time: start, role: "init".into(), init: true })?;
        }
    }
    let log_tail = || crate::criu::log_tail(&work_dir.join(&call.log));
    match status {
        Ok(st) if st.success() => {}
        Ok(_) => return Err(Error::failed(format!("criu restore failed: {}", log_tail()))),
        Err(e) => return Err(Error::failed(format!("criu restore: {e}: {}", log_tail()))),
    }
    s.egress = egress?;
    let init_pid: i32 = pid_text.trim().parse().map_err(|_| Error::failed(format!("criu restore wrote no pid to {}", pidfile.display())))?;
    let init_start = crate::proc::start_time(init_pid).ok_or_else(|| Error::failed("the restored init vanished"))?;

    let inodes = crate::ns::inodes(init_pid)?;
    let mut desktop = c.source.desktop.clone();
    if desktop.guest_url.is_some() {
        desktop.guest_url = Some(format!("http://{}:{}", s.net()?.session_addr, crate::record::GUEST_PORT));
    }
    let host_pids = crate::proc::host_pids_by_ns_pid(inodes.pid);
    for p in &mut desktop.processes {
        p.host_pid = host_pids.get(&p.pid).copied();
    }
    s.ns = Some(Namespaces { init_pid, init_start_time: init_start, hostname: c.source.hostname.clone(), inodes });
    s.desktop = Some(desktop);
    if o.limits.is_some() {
        // Catches anything CRIU placed outside the sibling's cgroups.
        crate::cgroup::enter_all(s)?;
    }
    let _ = std::fs::remove_file(&pidfile);
    s.restore = Some(Restore {
        checkpoint: c.id.clone(),
        checkpoint_dir: Some(c.dir.clone()),
        clean: c.clean,
        ksm: o.ksm,
        times: RestoreTimes { ledger_s, overlay_s, cgroup_s, criu_s, network_s, egress_s: Some(egress_s), egress_wait_s: Some(egress_wait_s), total_s: t0.elapsed().as_secs_f64() },
        criu_options: call.options(),
        extra: Default::default(),
    });
    Ok(())
}

/// The restored tree's root task among CRIU's children: the one in a PID namespace other than CRIU's.
fn restored_root_task(criu: i32) -> Option<(i32, u64)> {
    let pidns = |p: i32| crate::proc::ns_inode(p, "pid").ok();
    let own = pidns(criu)?;
    let children = std::fs::read_to_string(format!("/proc/{criu}/task/{criu}/children")).ok()?;
    children.split_whitespace().filter_map(|c| c.parse::<i32>().ok()).find(|&c| pidns(c).is_some_and(|ns| ns != own)).and_then(|c| Some((c, crate::proc::start_time(c)?)))
}

/// The root image and runtime layer a checkpoint was taken on; a checkpoint of older tools, taken on the
/// host's `/`, has neither and is refused.
fn lowers_of(c: &Checkpoint) -> Result<(&crate::image::ImageRef, &crate::runtime::RuntimeRef)> {
    match (&c.image, &c.runtime) {
        (Some(i), Some(r)) => Ok((i, r)),
        _ => Err(Error::bad_field("image", format!("checkpoint {}: taken on the host's / by an older drums-ckpt, which this drums-restore no longer restores: make the checkpoint again on a root image", c.id))),
    }
}

/// Whether a checkpoint can be restored here; bad input (exit 3) when not, before anything is made.
pub fn check_checkpoint(c: &Checkpoint) -> Result<()> {
    // Closed to other host users at every use (drums(7), "Host-side file safety").
    crate::state::private_root(&crate::state::checkpoint_root())?;
    if c.mapped.is_some() {
        crate::state::private_root(&crate::mapped::mapped_root())?;
    }
    let inv = c.images.join("inventory.img");
    std::fs::metadata(&inv).ctx("checkpoint images", &inv)?;
    let (image, runtime) = lowers_of(c)?;
    crate::image::check(image, "image")?;
    crate::runtime::check(runtime, "runtime")?;
    if !crate::criu::leaves_net_out(&c.criu_options) {
        return Err(Error::bad_input(format!(
            "checkpoint {}: made by an older drums-ckpt, its images hold the source's network namespace, which this drums-restore no longer restores: make the checkpoint again",
            c.id
        )));
    }
    if let Some(m) = &c.mapped {
        m.check().map_err(|e| Error::bad_input(format!("checkpoint {}: {e}", c.id)))?;
    }
    Ok(())
}

