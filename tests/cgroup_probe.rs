//! cgroup-probe: the test helper of the cgroup tests, used on the host and inside the QEMU guest (where
//! there is only busybox): makes a minimal real session by hand (a PID namespace whose init runs a shell
//! script, a ledger, a session record), and provides the workloads (CPU spin, memory hog, fork until the
//! kernel refuses) and record look-ups the scenario script needs without jq.
//!
//!   cgroup-probe spawn-session STATE_ROOT SCRIPT   print a session record; its init runs `sh -c SCRIPT`
//!   cgroup-probe spin SECONDS                      burn SECONDS of CPU time
//!   cgroup-probe hog BYTES [HOLD_SECONDS]          allocate and touch BYTES, then hold them
//!   cgroup-probe fork-until-fail MAX               fork until fork fails: {"forked":N,"errno":E}
//!   cgroup-probe get FIELD < record                a member of the session record on stdin: id, ns.init_pid
//!   cgroup-probe paths < record                    the cgroup section's directories, one a line
//!   cgroup-probe criu-restore-args < record        the cgroup options of a restore into it (criu::CgroupPlacement)
//!   cgroup-probe criu-dump-args < record           the cgroup options of a dump of it (criu::freeze_cgroup_options)

use drums::ledger::{Ledger, Resource};
use drums::record::{Namespaces, NsInodes, Owner, Session};
use std::io::Read;
use std::time::{Duration, Instant};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize| a.get(i).cloned().unwrap_or_else(|| die(&format!("missing argument {i}")));
    match a.get(1).map(String::as_str) {
        Some("spawn-session") => spawn_session(&arg(2), &arg(3)),
        Some("spin") => spin(arg(2).parse().unwrap_or_else(|_| die("spin SECONDS"))),
        Some("hog") => hog(arg(2).parse().unwrap_or_else(|_| die("hog BYTES")), a.get(3).and_then(|s| s.parse().ok()).unwrap_or(0.0)),
        Some("fork-until-fail") => fork_until_fail(arg(2).parse().unwrap_or_else(|_| die("fork-until-fail MAX"))),
        Some("get") => {
            let s = stdin_session();
            match arg(2).as_str() {
                "id" => println!("{}", s.id),
                "ns.init_pid" => println!("{}", s.ns.as_ref().map_or_else(|| die("the record has no ns"), |ns| ns.init_pid)),
                f => die(&format!("get {f}: not a member cgroup-probe knows (id, ns.init_pid)")),
            }
        }
        Some("criu-restore-args") => println!("{}", drums::criu::CgroupPlacement::of(stdin_session().cgroup.as_ref()).options().join(" ")),
        Some("criu-dump-args") => {
            let freezer = drums::cgroup::freezer_dir(stdin_session().cgroup.as_ref());
            println!("{}", drums::criu::freeze_cgroup_options(freezer.as_deref()).join(" "))
        }
        Some("paths") => {
            let mut seen = std::collections::BTreeSet::new();
            for p in stdin_session().cgroup.iter().flat_map(|c| c.paths.values()) {
                if seen.insert(p.clone()) {
                    println!("{}", p.display());
                }
            }
        }
        _ => die("usage: cgroup-probe spawn-session|spin|hog|fork-until-fail|get|paths ..."),
    }
}

fn die(m: &str) -> ! {
    eprintln!("cgroup-probe: {m}");
    std::process::exit(2)
}

/// The record on stdin (its last line) as the library types it (not validated: the guest has no Drums
/// roots).
fn stdin_session() -> Session {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).unwrap_or_else(|e| die(&format!("read stdin: {e}")));
    let line = s.lines().last().unwrap_or("");
    let mut de = serde_json::Deserializer::from_str(line);
    serde_path_to_error::deserialize(&mut de).unwrap_or_else(|e| die(&format!("not a session record: at `{}`: {}", e.path(), e.inner())))
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn null_stdio() {
    unsafe {
        let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for t in 0..3 {
            libc::dup2(fd, t);
        }
        if fd > 2 {
            libc::close(fd);
        }
    }
}

/// A session as drums-ns would make one, minus the mounts and the network: a reaper process outside,
/// an init (PID 1, session leader) inside a new PID namespace, a ledger naming the init, a record.
fn spawn_session(state_root: &str, script: &str) {
    let mut fds = [0i32; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let sh = std::ffi::CString::new("/bin/sh").unwrap();
    let argv_s = [std::ffi::CString::new("sh").unwrap(), std::ffi::CString::new("-c").unwrap(), std::ffi::CString::new(script).unwrap()];
    match unsafe { libc::fork() } {
        -1 => die("fork"),
        0 => unsafe {
            // The reaper: holds nothing of the caller's (its stdout would keep the caller's pipe open).
            libc::close(fds[0]);
            libc::setsid();
            if libc::unshare(libc::CLONE_NEWPID) != 0 {
                libc::_exit(100);
            }
            let init = libc::fork();
            if init == 0 {
                libc::close(fds[1]);
                null_stdio();
                libc::setsid();
                let argv = [argv_s[0].as_ptr(), argv_s[1].as_ptr(), argv_s[2].as_ptr(), std::ptr::null()];
                libc::execv(sh.as_ptr(), argv.as_ptr());
                libc::_exit(127);
            }
            let b = init.to_le_bytes();
            libc::write(fds[1], b.as_ptr().cast(), 4);
            libc::close(fds[1]);
            null_stdio();
            let mut st = 0;
            while libc::waitpid(init, &mut st, 0) < 0 && errno() == libc::EINTR {}
            libc::_exit(if libc::WIFEXITED(st) { libc::WEXITSTATUS(st) } else { 128 + libc::WTERMSIG(st) });
        },
        reaper => {
            unsafe { libc::close(fds[1]) };
            let mut b = [0u8; 4];
            let n = unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 4) };
            if n != 4 {
                die("the reaper did not report the init (unshare(CLONE_NEWPID) failed?)");
            }
            let init = i32::from_le_bytes(b);
            // The init execs /bin/sh: wait for it, so its namespaces and start time are final.
            let t0 = Instant::now();
            let me = std::fs::read_link("/proc/self/exe").ok();
            while std::fs::read_link(format!("/proc/{init}/exe")).ok() == me && t0.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let start = |p: i32| drums::proc::start_time(p).unwrap_or_else(|| die("process vanished"));
            let ino = |ns: &str| drums::proc::ns_inode(init, ns).unwrap_or_else(|e| die(&e.to_string()));
            let id = drums::state::new_id('d');
            let state_dir = std::path::Path::new(state_root).join("sessions").join(&id);
            let owner = Owner { pid: reaper, start_time: start(reaper) };
            let ledger = Ledger::create(&state_dir, &id, owner.clone(), Some(3600)).unwrap_or_else(|e| die(&e.to_string()));
            let init_start = start(init);
            ledger
                .create_res(Resource::Process { pid: init, start_time: init_start, role: "init".into(), init: true })
                .unwrap_or_else(|e| die(&e.to_string()));
            let s = Session {
                ns: Some(Namespaces {
                    init_pid: init,
                    init_start_time: init_start,
                    hostname: id.clone(),
                    inodes: NsInodes { pid: ino("pid"), mnt: ino("mnt"), net: ino("net"), ipc: ino("ipc"), uts: ino("uts") },
                }),
                ..Session::new(id, state_dir, owner, Some(3600))
            };
            println!("{}", serde_json::to_string(&s).unwrap());
        }
    }
}

/// Burn `secs` of this process's own CPU time (not wall time: the telemetry check must not depend on how
/// busy the machine is).
fn spin(secs: f64) {
    let cpu = || {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
    };
    let mut x = 0u64;
    while cpu() < secs {
        for i in 0..100_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
    }
}

fn hog(bytes: u64, hold: f64) {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut got = 0u64;
    while got < bytes {
        let n = (1u64 << 20).min(bytes - got) as usize;
        // Touch every page: untouched memory is not charged.
        let c = vec![1u8; n];
        chunks.push(c);
        got += n as u64;
    }
    std::hint::black_box(&chunks);
    std::thread::sleep(Duration::from_secs_f64(hold));
    println!("{{\"hogged\":{got}}}");
}

fn fork_until_fail(max: u32) {
    let mut kids = vec![];
    let mut err: Option<i32> = None;
    for _ in 0..max {
        match unsafe { libc::fork() } {
            -1 => {
                err = Some(errno());
                break;
            }
            0 => unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                loop {
                    libc::pause();
                }
            },
            pid => kids.push(pid),
        }
    }
    let forked = kids.len();
    for k in &kids {
        unsafe { libc::kill(*k, libc::SIGKILL) };
    }
    for k in &kids {
        unsafe { libc::waitpid(*k, std::ptr::null_mut(), 0) };
    }
    println!("{{\"forked\":{forked},\"errno\":{}}}", err.map(|e| e.to_string()).unwrap_or("null".into()));
}
