//! Preloaded into every CRIU that Drums runs. A session's desktop runs as its unprivileged user, and CRIU
//! reads each task's resource limits with prlimit64(pid, res, NULL, &old), which the kernel refuses unless
//! the caller's ids are the task's or it holds CAP_SYS_RESOURCE: root on machines like this one (a VM
//! whose root lacks CAP_SYS_RESOURCE) cannot, so no session with a non-root process could be dumped.
//! /proc/PID/limits shows the same two values to anyone. For exactly that case (another task, read only,
//! EPERM) the shim answers from there, and passes everything else to the kernel unchanged. CRIU makes the
//! call through syscall(3), so the shim wraps syscall(3) (and prlimit64(3), for the other callers).
//!
//! Second, for a restore that CRIU runs as root of a sibling's own user namespace (drums-restore
//! --userns): CRIU restores a UTS namespace's host and domain names by writing
//! /proc/sys/kernel/{hostname,domainname} from a task it moved into that namespace, and the kernel lets
//! only host root open those files for writing (their permission check knows no user namespace), while
//! sethostname(2)/setdomainname(2) are allowed to the root of the user namespace that owns the UTS
//! namespace. So when opening one of exactly those two files for writing is refused (EACCES), the shim
//! hands CRIU a stand-in descriptor (a memfd), and a write to it sets the name with sethostname(2) or
//! setdomainname(2) in the namespace of the task that writes, which is the one CRIU meant.

use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};

/// /proc/PID/limits rows, in the order of the RLIMIT_* numbers.
const ROWS: [&[u8]; 16] = [
    b"Max cpu time", b"Max file size", b"Max data size", b"Max stack size", b"Max core file size", b"Max resident set",
    b"Max processes", b"Max open files", b"Max locked memory", b"Max address space", b"Max file locks", b"Max pending signals",
    b"Max msgqueue size", b"Max nice priority", b"Max realtime priority", b"Max realtime timeout",
];

type Syscall = unsafe extern "C" fn(libc::c_long, ...) -> libc::c_long;
static REAL_SYSCALL: AtomicUsize = AtomicUsize::new(0);

/// The C library's syscall(3), behind this one.
unsafe fn real_syscall() -> Syscall {
    let mut f = REAL_SYSCALL.load(Ordering::Relaxed);
    if f == 0 {
        f = libc::dlsym(libc::RTLD_NEXT, c"syscall".as_ptr()) as usize;
        REAL_SYSCALL.store(f, Ordering::Relaxed);
    }
    std::mem::transmute::<usize, Syscall>(f)
}

/// syscall(3) as the C library has it, but for a refused read of another task's limits. Declared with
/// the six argument registers of x86_64's calling convention, which is how a variadic caller passes them;
/// unused ones carry whatever the caller left, which the kernel ignores for that call.
#[no_mangle]
pub unsafe extern "C" fn syscall(nr: libc::c_long, a1: libc::c_long, a2: libc::c_long, a3: libc::c_long, a4: libc::c_long, a5: libc::c_long, a6: libc::c_long) -> libc::c_long {
    let rc = real_syscall()(nr, a1, a2, a3, a4, a5, a6);
    if nr == libc::SYS_prlimit64 && rc == -1 && refused_read(a1 as libc::pid_t, a3, a4) {
        if let Some((cur, max)) = from_proc(a1 as libc::pid_t, a2 as libc::c_int) {
            let old = a4 as *mut libc::rlimit64;
            (*old).rlim_cur = cur;
            (*old).rlim_max = max;
            return 0;
        }
        *libc::__errno_location() = libc::EPERM;
    }
    rc
}

#[no_mangle]
pub unsafe extern "C" fn prlimit64(pid: libc::pid_t, resource: libc::c_int, new: *const libc::rlimit64, old: *mut libc::rlimit64) -> libc::c_int {
    syscall(libc::SYS_prlimit64, pid as libc::c_long, resource as libc::c_long, new as libc::c_long, old as libc::c_long, 0, 0) as libc::c_int
}

unsafe fn refused_read(pid: libc::pid_t, new: libc::c_long, old: libc::c_long) -> bool {
    *libc::__errno_location() == libc::EPERM && new == 0 && old != 0 && pid > 0
}

/// Soft and hard limit of `resource` from /proc/PID/limits ("unlimited" is RLIM64_INFINITY).
fn from_proc(pid: libc::pid_t, resource: libc::c_int) -> Option<(u64, u64)> {
    let row = *ROWS.get(usize::try_from(resource).ok()?)?;
    let mut buf = [0u8; 4096];
    let mut f = std::fs::File::open(format!("/proc/{pid}/limits")).ok()?;
    let mut len = 0;
    while len < buf.len() {
        match f.read(&mut buf[len..]).ok()? {
            0 => break,
            n => len += n,
        }
    }
    let line = buf[..len].split(|b| *b == b'\n').find(|l| l.starts_with(row))?;
    let mut fields = line[row.len()..].split(|b| *b == b' ').filter(|f| !f.is_empty());
    let value = |f: &[u8]| -> Option<u64> {
        if f == b"unlimited" {
            Some(u64::MAX)
        } else {
            std::str::from_utf8(f).ok()?.parse().ok()
        }
    };
    Some((value(fields.next()?)?, value(fields.next()?)?))
}

type Openat = unsafe extern "C" fn(libc::c_int, *const libc::c_char, libc::c_int, libc::mode_t) -> libc::c_int;
type Write = unsafe extern "C" fn(libc::c_int, *const libc::c_void, libc::size_t) -> libc::ssize_t;
static REAL_OPENAT: AtomicUsize = AtomicUsize::new(0);
static REAL_WRITE: AtomicUsize = AtomicUsize::new(0);
/// The stand-in descriptors: for the host name, for the domain name (-1: none).
static STAND_IN: [std::sync::atomic::AtomicI32; 2] = [std::sync::atomic::AtomicI32::new(-1), std::sync::atomic::AtomicI32::new(-1)];

unsafe fn next(cache: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    let mut f = cache.load(Ordering::Relaxed);
    if f == 0 {
        f = libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize;
        cache.store(f, Ordering::Relaxed);
    }
    f
}

/// Which UTS name a sysctl path names: 0 the host name, 1 the domain name.
fn uts_name(path: &[u8]) -> Option<usize> {
    let p = path.strip_prefix(b"/proc/sys/").unwrap_or(path);
    match p {
        b"kernel/hostname" => Some(0),
        b"kernel/domainname" => Some(1),
        _ => None,
    }
}

unsafe fn openat_impl(real: Openat, dirfd: libc::c_int, path: *const libc::c_char, flags: libc::c_int, mode: libc::mode_t) -> libc::c_int {
    let rc = real(dirfd, path, flags, mode);
    if rc >= 0 || *libc::__errno_location() != libc::EACCES || flags & libc::O_ACCMODE != libc::O_WRONLY || path.is_null() {
        return rc;
    }
    let Some(which) = uts_name(std::ffi::CStr::from_ptr(path).to_bytes()) else { return rc };
    let fd = libc::memfd_create(c"drums-uts-stand-in".as_ptr(), 0);
    if fd < 0 {
        *libc::__errno_location() = libc::EACCES;
        return rc;
    }
    STAND_IN[which].store(fd, Ordering::Relaxed);
    fd
}

#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: libc::c_int, path: *const libc::c_char, flags: libc::c_int, mode: libc::mode_t) -> libc::c_int {
    openat_impl(std::mem::transmute::<usize, Openat>(next(&REAL_OPENAT, c"openat")), dirfd, path, flags, mode)
}

#[no_mangle]
pub unsafe extern "C" fn openat64(dirfd: libc::c_int, path: *const libc::c_char, flags: libc::c_int, mode: libc::mode_t) -> libc::c_int {
    openat_impl(std::mem::transmute::<usize, Openat>(next(&REAL_OPENAT, c"openat")), dirfd, path, flags, mode)
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: libc::c_int, buf: *const libc::c_void, n: libc::size_t) -> libc::ssize_t {
    if fd >= 0 && !buf.is_null() {
        for (which, slot) in STAND_IN.iter().enumerate() {
            if slot.load(Ordering::Relaxed) == fd {
                let bytes = std::slice::from_raw_parts(buf as *const u8, n);
                let name = bytes.strip_suffix(b"\n").unwrap_or(bytes);
                let rc = match which {
                    0 => libc::sethostname(name.as_ptr().cast(), name.len()),
                    _ => libc::setdomainname(name.as_ptr().cast(), name.len()),
                };
                return if rc == 0 { n as libc::ssize_t } else { -1 };
            }
        }
    }
    std::mem::transmute::<usize, Write>(next(&REAL_WRITE, c"write"))(fd, buf, n)
}

type Close = unsafe extern "C" fn(libc::c_int) -> libc::c_int;
static REAL_CLOSE: AtomicUsize = AtomicUsize::new(0);

/// close(2), forgetting a stand-in descriptor first: its number, once reused, is an ordinary file's.
#[no_mangle]
pub unsafe extern "C" fn close(fd: libc::c_int) -> libc::c_int {
    for slot in &STAND_IN {
        let _ = slot.compare_exchange(fd, -1, Ordering::Relaxed, Ordering::Relaxed);
    }
    std::mem::transmute::<usize, Close>(next(&REAL_CLOSE, c"close"))(fd)
}
