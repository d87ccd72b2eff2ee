//! The privilege boundary of every session process: a reduced capability bounding set and a seccomp
//! filter, set in the session's init before anything else of the session runs (every process inherits
//! both) and in every process that joins a session (`drums-ns exec`). CRIU saves and restores both with
//! each task, so restored siblings keep them; drums-audit checks that they did.
//!
//! The reference is a default Docker/runc container: its capability set without CAP_MKNOD and
//! CAP_NET_RAW, and its default seccomp profile (on x86_64: the syscalls it does not allow return EPERM,
//! syscalls newer than this build knows return ENOSYS as an allowlist would, namespace flags of clone and
//! unshare are refused, clone3 is ENOSYS so that the C library falls back to clone, personality only
//! takes the values Docker allows), plus the terminal injection ioctls TIOCSTI and TIOCLINUX
//! (bubblewrap's CVE-2017-5226). No-new-privileges is not set: `sudo` in a session must keep working,
//! and gives session root, which holds only the bounding set below.
//!
//! Everything that runs between fork and exec is allocation-free: the program is built before the fork.

use crate::error::Result;
pub use crate::record::boundary::{Boundary, ProcessBoundary};

/// The capabilities a session keeps (bounding, permitted, effective for its root): what a desktop and
/// OSWorld's tasks need, and nothing that reaches past the session's own namespaces.
pub const KEPT_CAPS: &[u32] = &[
    CAP_CHOWN,
    CAP_DAC_OVERRIDE,
    CAP_FOWNER,
    CAP_FSETID,
    CAP_KILL,
    CAP_SETGID,
    CAP_SETUID,
    CAP_SETPCAP,
    CAP_NET_BIND_SERVICE,
    CAP_SYS_CHROOT,
    CAP_AUDIT_WRITE,
    CAP_SETFCAP,
];

// Capability numbers (linux/capability.h).
const CAP_CHOWN: u32 = 0;
const CAP_DAC_OVERRIDE: u32 = 1;
const CAP_FOWNER: u32 = 3;
const CAP_FSETID: u32 = 4;
const CAP_KILL: u32 = 5;
const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const CAP_SETPCAP: u32 = 8;
const CAP_NET_BIND_SERVICE: u32 = 10;
const CAP_SYS_CHROOT: u32 = 18;
const CAP_AUDIT_WRITE: u32 = 29;
const CAP_SETFCAP: u32 = 31;

/// The kept capabilities as a mask (the form /proc/PID/status shows: CapBnd).
pub fn kept_mask() -> u64 {
    KEPT_CAPS.iter().fold(0u64, |m, c| m | (1u64 << c))
}

/// The highest capability this kernel knows (/proc/sys/kernel/cap_last_cap); read before a fork.
pub fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(40)
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
const CAP_V3: u32 = 0x2008_0522;

/// Reduce the calling process to the kept capabilities: the bounding set (which limits every later exec,
/// set-uid ones included), the ambient set, and its own permitted, effective and inheritable sets.
/// Allocation-free (between fork and exec). Returns the errno of the first failure.
pub fn drop_capabilities(last_cap: u32) -> std::result::Result<(), i32> {
    let kept = kept_mask();
    unsafe {
        for cap in 0..=last_cap {
            if kept & (1u64 << cap) == 0 && libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(errno());
            }
        }
        if libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(errno());
        }
        let mut hdr = CapHeader { version: CAP_V3, pid: 0 };
        let mut data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
        if libc::syscall(libc::SYS_capget, &mut hdr as *mut CapHeader, data.as_mut_ptr()) != 0 {
            return Err(errno());
        }
        for (i, d) in data.iter_mut().enumerate() {
            let k = (kept >> (32 * i)) as u32;
            d.effective &= k;
            d.permitted &= k;
            d.inheritable &= k;
        }
        if libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) != 0 {
            return Err(errno());
        }
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The highest syscall number this build knows (x86_64): higher ones are ENOSYS, as an allowlist gives.
const MAX_KNOWN_SYSCALL: i64 = libc::SYS_mseal;

/// Syscalls a session may not make (EPERM): Docker's default profile leaves them out on x86_64 (time,
/// modules, kexec, mounts and file-system contexts, namespaces by setns, keyrings, BPF, perf, swap,
/// quotas, reboot, raw I/O ports, NUMA policy, handles, userfaultfd, io_uring, the kernel log, obsolete
/// calls), and beyond Docker's: io_setup, since kernel AIO contexts come out of one host-wide pool
/// (fs.aio-max-nr) that a single session could take whole, leaving the host and every other session
/// without (measured: one session held all 65536). POSIX AIO in the C library uses threads, not
/// this call; nothing a session runs needs it.
const DENIED: &[i64] = &[
    libc::SYS_acct,
    libc::SYS_add_key,
    libc::SYS_adjtimex,
    libc::SYS_bpf,
    libc::SYS_clock_adjtime,
    libc::SYS_clock_settime,
    libc::SYS_settimeofday,
    174, // create_module (obsolete; not in libc)
    libc::SYS_delete_module,
    libc::SYS_finit_module,
    libc::SYS_init_module,
    177, // get_kernel_syms
    178, // query_module
    libc::SYS_nfsservctl,
    libc::SYS_uselib,
    libc::SYS_ustat,
    libc::SYS_sysfs,
    libc::SYS__sysctl,
    libc::SYS_get_mempolicy,
    libc::SYS_set_mempolicy,
    libc::SYS_set_mempolicy_home_node,
    libc::SYS_mbind,
    libc::SYS_move_pages,
    libc::SYS_iopl,
    libc::SYS_ioperm,
    libc::SYS_kexec_file_load,
    libc::SYS_kexec_load,
    libc::SYS_keyctl,
    libc::SYS_request_key,
    libc::SYS_lookup_dcookie,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_mount_setattr,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_pivot_root,
    libc::SYS_name_to_handle_at,
    libc::SYS_open_by_handle_at,
    libc::SYS_perf_event_open,
    libc::SYS_quotactl,
    libc::SYS_quotactl_fd,
    libc::SYS_reboot,
    libc::SYS_setns,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_syslog,
    libc::SYS_userfaultfd,
    libc::SYS_vhangup,
    libc::SYS_io_uring_setup,
    libc::SYS_io_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_fanotify_init,
    libc::SYS_kcmp,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
];

/// Every namespace flag of clone(2) and unshare(2).
const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS | libc::CLONE_NEWCGROUP | libc::CLONE_NEWUTS | libc::CLONE_NEWIPC | libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNET | crate::nsenter::CLONE_NEWTIME) as u32;
/// The namespace flags a session in its own user namespace may pass to clone(2) and unshare(2): the
/// nested user, PID and network namespaces that Chromium's namespace sandbox makes for its zygote and
/// renderers (its zygote is cloned with all three; each renderer is forked into a PID namespace of its
/// own). Mount, IPC, UTS, cgroup and time namespaces stay refused, and so do mount(2), setns(2) and the
/// rest of DENIED inside a nested namespace: its full capability set is over that namespace only, and
/// the kernel gives a nested user namespace no ids its parent (the session's range) does not map.
/// A session without a user namespace of its own keeps every namespace flag refused: its root is host
/// root, and a user namespace it made would give its processes capabilities over new namespaces of the
/// host's user namespace's children, with host root's ids to map.
pub const NESTED_SANDBOX_FLAGS: u32 = (libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNET) as u32;
/// personality(2) values Docker's profile allows: PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32,
/// and the query.
const PERSONALITIES: &[u32] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];
const TIOCSTI: u32 = 0x5412;
const TIOCLINUX: u32 = 0x541c;

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
// struct seccomp_data: nr, arch, instruction_pointer, args[6] (the low 32 bits of each first, x86_64 being
// little-endian).
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
fn off_arg_low(i: u32) -> u32 {
    16 + 8 * i
}

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt: 0, jf: 0, k }
}
fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code: code as u16, jt, jf, k }
}
const LD_ABS: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
const JGE: u32 = libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K;
const JGT: u32 = libc::BPF_JMP | libc::BPF_JGT | libc::BPF_K;
const JSET: u32 = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
const RET: u32 = libc::BPF_RET | libc::BPF_K;

/// The session's seccomp filter, built before a fork and installed after it.
pub struct Seccomp(Vec<libc::sock_filter>);

impl Seccomp {
    /// The filter of a session's processes: `own_userns` for a session in a user namespace of its own
    /// (crate::idrange), whose processes may make Chromium's nested namespaces (NESTED_SANDBOX_FLAGS).
    pub fn for_session(own_userns: bool) -> Seccomp {
        Seccomp::build(if own_userns { NESTED_SANDBOX_FLAGS } else { 0 })
    }

    /// The filter of a session whose root is host root: no namespace flag at all.
    pub fn session() -> Seccomp {
        Seccomp::build(0)
    }

    /// The filter with the namespace flags of `allowed_ns` let through clone and unshare.
    fn build(allowed_ns: u32) -> Seccomp {
        let eperm = RET_ERRNO | libc::EPERM as u32;
        let enosys = RET_ERRNO | libc::ENOSYS as u32;
        let mut p = vec![
            stmt(LD_ABS, OFF_ARCH),
            // Another architecture's calling convention (i386 through int 0x80): refused whole.
            jump(JEQ, AUDIT_ARCH_X86_64, 1, 0),
            stmt(RET, eperm),
            stmt(LD_ABS, OFF_NR),
            jump(JGE, X32_SYSCALL_BIT, 0, 1),
            stmt(RET, eperm),
            jump(JGT, MAX_KNOWN_SYSCALL as u32, 0, 1),
            stmt(RET, enosys),
            jump(JEQ, libc::SYS_clone3 as u32, 0, 1),
            stmt(RET, enosys),
        ];
        // A call whose first argument must not carry a namespace flag: the flags are in its low 32 bits.
        for nr in [libc::SYS_clone, libc::SYS_unshare] {
            p.push(jump(JEQ, nr as u32, 0, 4));
            p.push(stmt(LD_ABS, off_arg_low(0)));
            p.push(jump(JSET, NAMESPACE_FLAGS & !allowed_ns, 0, 1));
            p.push(stmt(RET, eperm));
            p.push(stmt(RET, RET_ALLOW));
        }
        let n = PERSONALITIES.len() as u8;
        p.push(jump(JEQ, libc::SYS_personality as u32, 0, 2 * n + 2));
        p.push(stmt(LD_ABS, off_arg_low(0)));
        for v in PERSONALITIES {
            p.push(jump(JEQ, *v, 0, 1));
            p.push(stmt(RET, RET_ALLOW));
        }
        p.push(stmt(RET, eperm));
        p.push(jump(JEQ, libc::SYS_ioctl as u32, 0, 5));
        p.push(stmt(LD_ABS, off_arg_low(1)));
        p.push(jump(JEQ, TIOCSTI, 2, 0));
        p.push(jump(JEQ, TIOCLINUX, 1, 0));
        p.push(stmt(RET, RET_ALLOW));
        p.push(stmt(RET, eperm));
        for nr in DENIED {
            p.push(jump(JEQ, *nr as u32, 0, 1));
            p.push(stmt(RET, eperm));
        }
        p.push(stmt(RET, RET_ALLOW));
        Seccomp(p)
    }

    /// Install the filter on the calling thread (and so every process it forks or execs). Needs
    /// CAP_SYS_ADMIN, which the session's init and a joining process still hold at that point (so no
    /// no-new-privileges). Allocation-free. Returns the errno on failure.
    pub fn install(&self) -> std::result::Result<(), i32> {
        let prog = libc::sock_fprog { len: self.0.len() as u16, filter: self.0.as_ptr() as *mut libc::sock_filter };
        let rc = unsafe { libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER as libc::c_ulong, &prog as *const libc::sock_fprog as libc::c_ulong, 0, 0) };
        if rc != 0 {
            return Err(errno());
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}


impl Boundary {
    pub fn of(pid: i32) -> Result<Boundary> {
        let f = crate::proc::confinement(pid)?;
        Ok(Boundary {
            cap_bnd: f["CapBnd"].clone(),
            cap_eff: f["CapEff"].clone(),
            cap_prm: f["CapPrm"].clone(),
            seccomp: f["Seccomp"].parse().unwrap_or(0),
            seccomp_filters: f["Seccomp_filters"].parse().unwrap_or(0),
            no_new_privs: f["NoNewPrivs"] == "1",
            user_ns: crate::proc::ns_inode(pid, "user")?,
        })
    }

    /// Whether a process holds no more than a session may: the kept bounding set, a filter.
    pub fn is_confined(&self) -> bool {
        u64::from_str_radix(&self.cap_bnd, 16).is_ok_and(|b| b & !kept_mask() == 0) && self.seccomp == 2
    }
}


/// The boundary of every process in the PID namespace `pidns`, by PID inside it.
pub fn of_pidns(pidns: u64) -> Vec<ProcessBoundary> {
    let mut out: Vec<ProcessBoundary> = crate::proc::pids_in_pidns(pidns)
        .into_iter()
        .filter_map(|p| Some(ProcessBoundary { pid: crate::proc::ns_pid(p)?, comm: crate::proc::comm(p), boundary: Boundary::of(p).ok()? }))
        .collect();
    out.sort_by_key(|b| b.pid);
    out
}

/// How a session's processes compare with the boundary they must have: each confined, and each that
/// the checkpoint's source had (same PID and command) with exactly the source's boundary.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Comparison {
    pub processes: Vec<ProcessBoundary>,
    /// Every process holds no more than a session may (the kept bounding set and a filter).
    pub confined: bool,
    /// The checkpoint the session was restored from, whose source's boundary it is compared with; null
    /// for a cold session.
    pub checkpoint: Option<String>,
    /// Processes compared with their counterpart in the checkpoint's source.
    pub compared: usize,
    /// What differs: a process not confined, or whose boundary is not its source's.
    pub differences: Vec<String>,
}

/// `own_userns`: the inode of the session's own user namespace, for a session that has one (a restored
/// sibling in its own user namespace, the default, whose source ran in the host's): every process must be in it, and it stands
/// for the source's user namespace in the comparison.
pub fn compare(processes: Vec<ProcessBoundary>, checkpoint: Option<(&str, &[ProcessBoundary])>, own_userns: Option<u64>) -> Comparison {
    let mut differences = vec![];
    let mut compared = 0;
    for p in &processes {
        if !p.boundary.is_confined() {
            differences.push(format!("pid {} ({}) is not confined: {:?}", p.pid, p.comm, p.boundary));
        }
        if let Some(u) = own_userns.filter(|u| *u != p.boundary.user_ns) {
            differences.push(format!("pid {} ({}) is in user namespace {}, not the session's own {u}", p.pid, p.comm, p.boundary.user_ns));
        }
        if let Some(src) = checkpoint.and_then(|(_, src)| src.iter().find(|s| s.pid == p.pid && s.comm == p.comm)) {
            compared += 1;
            let mut want = src.boundary.clone();
            if let Some(u) = own_userns {
                want.user_ns = u;
            }
            if want != p.boundary {
                differences.push(format!("pid {} ({}) has {:?}, its checkpoint's source had {:?}", p.pid, p.comm, p.boundary, src.boundary));
            }
        }
    }
    let confined = processes.iter().all(|p| p.boundary.is_confined());
    Comparison { processes, confined, checkpoint: checkpoint.map(|(id, _)| id.to_string()), compared, differences }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `body` in a forked child with the boundary set; the child's exit code is what body returns.
    fn in_child(body: fn() -> i32) -> i32 {
        in_child_with(Seccomp::session(), body)
    }

    fn in_child_with(prog: Seccomp, body: fn() -> i32) -> i32 {
        let last = last_cap();
        match unsafe { libc::fork() } {
            0 => {
                if prog.install().is_err() || drop_capabilities(last).is_err() {
                    unsafe { libc::_exit(100) };
                }
                unsafe { libc::_exit(body()) }
            }
            pid => {
                let mut st = 0;
                unsafe { libc::waitpid(pid, &mut st, 0) };
                assert!(libc::WIFEXITED(st), "child died: {st}");
                libc::WEXITSTATUS(st)
            }
        }
    }

    fn err_of(rc: libc::c_long) -> i32 {
        if rc == -1 {
            errno()
        } else {
            0
        }
    }

    #[test]
    fn the_filter_refuses_what_a_session_may_not_do_and_allows_the_rest() {
        assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (the filter is installed without no-new-privileges)");
        // Each check returns 0 when it holds; the first that does not, its number.
        let code = in_child(|| unsafe {
            // Each call's errno is read right after it (a later call would overwrite it).
            let mut aio_ctx: libc::c_ulong = 0;
            let checks: [(i32, i32); 10] = [
                (err_of(libc::syscall(libc::SYS_mount, c"none".as_ptr(), c"/mnt".as_ptr(), c"tmpfs".as_ptr(), 0, 0)), libc::EPERM),
                (err_of(libc::syscall(libc::SYS_clock_settime, libc::CLOCK_REALTIME, &libc::timespec { tv_sec: 0, tv_nsec: 0 })), libc::EPERM),
                (err_of(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER)), libc::EPERM),
                (err_of(libc::syscall(libc::SYS_clone3, 0, 0)), libc::ENOSYS),
                (err_of(libc::syscall(libc::SYS_ioctl, 0, TIOCSTI, c"x".as_ptr())), libc::EPERM),
                (err_of(libc::syscall(libc::SYS_keyctl, 0, 0, 0, 0, 0)), libc::EPERM),
                (err_of(libc::syscall(libc::SYS_bpf, 0, 0, 0)), libc::EPERM),
                (err_of(libc::syscall(libc::SYS_userfaultfd, 0)), libc::EPERM),
                (err_of(libc::syscall(libc::SYS_io_setup, 1, std::ptr::addr_of_mut!(aio_ctx))), libc::EPERM),
                (err_of(libc::syscall(MAX_KNOWN_SYSCALL + 1)), libc::ENOSYS),
            ];
            for (i, (got, want)) in checks.iter().enumerate() {
                if got != want {
                    return 10 + i as i32;
                }
            }
            if libc::personality(0xffff_ffff) < 0 || libc::personality(0x0400000) != -1 {
                return 30;
            }
            // What a desktop does: fork, a thread-like clone without namespace flags, files, time reads.
            let child = libc::fork();
            if child == 0 {
                libc::_exit(7);
            }
            let mut st = 0;
            if libc::waitpid(child, &mut st, 0) != child || libc::WEXITSTATUS(st) != 7 {
                return 40;
            }
            if libc::open(c"/proc/self/status".as_ptr(), libc::O_RDONLY) < 0 || libc::getpid() <= 0 {
                return 41;
            }
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            if libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) != 0 {
                return 42;
            }
            // Root without the capabilities: setting the clock fails even through settimeofday.
            if libc::settimeofday(&libc::timeval { tv_sec: 0, tv_usec: 0 }, std::ptr::null()) == 0 {
                return 43;
            }
            0
        });
        assert_eq!(code, 0, "check {code} failed (see the test's list)");
    }

    #[test]
    fn a_userns_session_may_make_only_chromiums_nested_namespaces() {
        assert_eq!(unsafe { libc::geteuid() }, 0, "needs root (the filter is installed without no-new-privileges)");
        let code = in_child_with(Seccomp::for_session(true), || unsafe {
            let checks: [(i32, i32); 5] = [
                (err_of(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWNS)), libc::EPERM),
                (err_of(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER | libc::CLONE_NEWIPC)), libc::EPERM),
                (err_of(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER | crate::nsenter::CLONE_NEWTIME)), libc::EPERM),
                (err_of(libc::syscall(libc::SYS_clone3, 0, 0)), libc::ENOSYS),
                // What Chromium's zygote is made with.
                (err_of(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNET)), 0),
            ];
            for (i, (got, want)) in checks.iter().enumerate() {
                if got != want {
                    return 10 + i as i32;
                }
            }
            // Full capabilities in the new user namespace, and still no mount: the filter holds there.
            if err_of(libc::syscall(libc::SYS_mount, c"none".as_ptr(), c"/mnt".as_ptr(), c"tmpfs".as_ptr(), 0, 0)) != libc::EPERM {
                return 30;
            }
            if err_of(libc::syscall(libc::SYS_setns, 0, 0)) != libc::EPERM {
                return 31;
            }
            0
        });
        assert_eq!(code, 0, "check {code} failed (see the test's list)");
        // The host-root session's filter still refuses every namespace flag.
        let code = in_child_with(Seccomp::for_session(false), || unsafe {
            for f in [libc::CLONE_NEWUSER, libc::CLONE_NEWPID, libc::CLONE_NEWNET] {
                if err_of(libc::syscall(libc::SYS_unshare, f)) != libc::EPERM {
                    return 1;
                }
            }
            0
        });
        assert_eq!(code, 0);
    }

    #[test]
    fn capabilities_are_cut_to_the_kept_set() {
        let code = in_child(|| {
            let b = Boundary::of(std::process::id() as i32).unwrap();
            let want = format!("{:016x}", kept_mask());
            i32::from(!(b.cap_bnd == want && b.cap_eff == want && b.seccomp == 2 && b.is_confined()))
        });
        assert_eq!(code, 0);
        let me = Boundary::of(std::process::id() as i32).unwrap();
        assert!(!me.is_confined(), "the test runner itself is not confined: {me:?}");
    }

    #[test]
    fn jumps_stay_inside_the_program() {
        for p in [Seccomp::for_session(false), Seccomp::for_session(true)] {
        for (i, ins) in p.0.iter().enumerate() {
            if ins.code as u32 & 0x07 == libc::BPF_JMP {
                assert!(i + 1 + (ins.jt.max(ins.jf) as usize) < p.0.len(), "instruction {i} jumps out");
            }
        }
        assert!(p.len() < 4096);
        }
    }
}
