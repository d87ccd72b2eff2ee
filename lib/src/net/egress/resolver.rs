//! The session's resolver on the host (dnsmasq, one per session under a policy other than `none`): its
//! command line, which is where the policy's names are enforced, its start, and killing it (or the
//! connection auditor) by its pid file at removal. Apart from the table and routes in `egress`: a daemon
//! of its own, with its own life.

use super::{table_name, LOG_FILE, PID_FILE};
use crate::error::{Error, IoContext, Result};
use crate::record::egress::{Allow, Policy};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The dnsmasq command line of a session's resolver. Without dnsmasq's --stop-dns-rebind: it also
/// refuses the documentation ranges (TEST-NET-1..3), where the tests' stand-in internet lives, and a
/// private answer gets nowhere anyway, since the session's table refuses every connection to a private,
/// shared, link-local or host address whatever name it was resolved from (DNS rebinding included).
pub fn resolver_args(state_dir: &Path, slot: u32, policy: &Policy, upstream: &[Ipv4Addr]) -> Vec<String> {
    let (host, _) = crate::net::slot_addrs(slot);
    let mut a: Vec<String> = [
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--no-poll",
        "--bind-interfaces",
        "--port=53",
        "--user=nobody",
        "--group=nogroup",
        "--cache-size=1000",
        "--filter-AAAA",
        "--log-queries",
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    a.push(format!("--listen-address={host}"));
    a.push(format!("--pid-file={}", state_dir.join(PID_FILE).display()));
    a.push(format!("--log-facility={}", state_dir.join(LOG_FILE).display()));
    let servers = |dom: &str| upstream.iter().map(|u| format!("--server={dom}{u}@{host}")).collect::<Vec<_>>();
    let set = format!("4#inet#{}#resolved", table_name(slot));
    match policy {
        Policy::Internet => a.extend(servers("")),
        Policy::Allow(list) => {
            // Everything the list does not name: no such domain.
            a.push("--address=/#/".into());
            // No answer's TTL exceeds the cap for which its addresses are allowed (crate::net::audit).
            a.push(format!("--max-ttl={}", crate::net::audit::TTL_CAP_S));
            for e in list {
                match e {
                    Allow::Name(n) => {
                        a.extend(servers(&format!("/{n}/")));
                        // `/n/` would also forward its subdomains: only `*.n` admits those.
                        if !list.contains(&Allow::Subdomains(n.clone())) {
                            a.push(format!("--address=/*.{n}/"));
                        }
                        a.push(format!("--nftset=/{n}/{set}"));
                    }
                    Allow::Subdomains(n) => {
                        a.extend(servers(&format!("/*.{n}/")));
                        // dnsmasq's nftset takes no `*.` form; `/n/` covers the subdomains, and n itself
                        // is never answered (no such domain, unless n is listed too).
                        a.push(format!("--nftset=/{n}/{set}"));
                    }
                    Allow::Net(_) => {}
                }
            }
        }
        Policy::None => {}
    }
    a
}

/// Start the session's resolver; `wait_resolver` waits until it runs. dnsmasq forks its daemon and
/// exits once it runs (or with the reason it cannot): a started resolver is known by its pid file, which
/// the ledgered resource names (killed at removal).
pub(super) fn spawn_resolver(state_dir: &Path, slot: u32, policy: &Policy, upstream: &[Ipv4Addr]) -> Result<(std::process::Child, PathBuf)> {
    let pid_file = state_dir.join(PID_FILE);
    let _ = std::fs::remove_file(&pid_file);
    let child = std::process::Command::new("dnsmasq")
        .args(resolver_args(state_dir, slot, policy, upstream))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::env(format!("dnsmasq (package dnsmasq-base) is needed for a session's resolver: {e}")))?;
    Ok((child, pid_file))
}

pub(super) fn wait_resolver((child, pid_file): (std::process::Child, PathBuf)) -> Result<i32> {
    let o = child.wait_with_output().map_err(|e| Error::failed(format!("the session's resolver (dnsmasq): {e}")))?;
    if !o.status.success() {
        return Err(Error::failed(format!("the session's resolver (dnsmasq) did not start: {}", String::from_utf8_lossy(&o.stderr).trim())));
    }
    let pid = std::fs::read_to_string(&pid_file).ctx("read", &pid_file)?;
    pid.trim().parse::<i32>().map_err(|_| Error::failed(format!("{}: `{}` is no pid", pid_file.display(), pid.trim())))
}

/// SIGKILL the daemon (the resolver, the auditor) named by `pid_file` if it is still the one that wrote
/// it (its command line has `--pid-file=<pid_file>`). Without a pid file, the daemon may still be starting
/// (its starter killed before it wrote the file, and this is the sweep): every process whose command line
/// has that argument is killed instead, found in /proc (only then: a few ms).
pub fn kill_daemon(pid_file: &Path) -> Result<()> {
    let want = format!("--pid-file={}", pid_file.display());
    if let Some(pid) = std::fs::read_to_string(pid_file).ok().and_then(|t| t.trim().parse::<i32>().ok()) {
        kill_if_arg(pid, &want);
        let _ = std::fs::remove_file(pid_file);
        return Ok(());
    }
    // dnsmasq forks twice before its daemon writes the pid file: a process killed midway may already
    // have forked the next one, so /proc is read again until no process has the argument (only a
    // process that exists can fork one).
    for _ in 0..100 {
        let pids: Vec<i32> = std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| has_arg(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default(), &want))
            .collect();
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            kill_if_arg(pid, &want);
        }
    }
    let _ = std::fs::remove_file(pid_file);
    Ok(())
}

fn has_arg(cmdline: &[u8], arg: &str) -> bool {
    cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes())
}

/// SIGKILL `pid` if its command line has `arg`, and wait (up to 1 s) until it is gone.
fn kill_if_arg(pid: i32, arg: &str) {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if !has_arg(&cmd, arg) {
        return;
    }
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    if fd < 0 {
        return;
    }
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // Checked again through the pidfd's process: the pid was not reused between the read and the open.
    let cmd2 = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    if cmd2 != cmd {
        return;
    }
    unsafe { libc::syscall(libc::SYS_pidfd_send_signal, std::os::fd::AsRawFd::as_raw_fd(&fd), libc::SIGKILL, std::ptr::null::<libc::siginfo_t>(), 0) };
    for _ in 0..200 {
        if !Path::new(&format!("/proc/{pid}")).exists() || std::fs::read(format!("/proc/{pid}/cmdline")).map(|c| c.is_empty()).unwrap_or(true) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolver_admits_what_the_list_names() {
        let p = Policy::parse("allow:example.org,*.cdn.example.net").unwrap();
        let a = resolver_args(Path::new("/s"), 3, &p, &["198.51.100.53".parse().unwrap()]).join(" ");
        assert!(a.contains("--address=/#/ "), "{a}");
        assert!(a.contains("--server=/example.org/198.51.100.53@10.77.0.13"), "{a}");
        assert!(a.contains("--address=/*.example.org/"), "{a}");
        assert!(a.contains("--server=/*.cdn.example.net/198.51.100.53@10.77.0.13"), "{a}");
        assert!(a.contains("--nftset=/example.org/4#inet#drums_net_3#resolved"), "{a}");
        assert!(a.contains("--nftset=/cdn.example.net/4#inet#drums_net_3#resolved"), "{a}");
        assert!(a.contains("--max-ttl=3600"), "{a}");
    }
}
