//! Session networking: an address-pool slot, a veth pair made with rtnetlink (host end in the root
//! namespace, `eth0` in the session), and the host firewall that lets only the host open connections.

use crate::error::{Error, IoContext, Result};
use crate::ledger::{Ledger, Resource};
use crate::record::Net;
use futures::TryStreamExt;
use rtnetlink::{LinkUnspec, LinkVeth};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

/// Sessions get /30 networks out of 10.77.0.0/16: slot N is 10.77.0.0 + 4N.
pub const POOL_BASE: [u8; 4] = [10, 77, 0, 0];
pub const POOL_SLOTS: u32 = 16384;
pub const PREFIX_LEN: u8 = 30;

pub fn slots_dir() -> PathBuf {
    crate::state::state_root().join("slots")
}

pub fn host_if_name(slot: u32) -> String {
    format!("{}{slot}", crate::state::NAME_PREFIX)
}

pub fn slot_addrs(slot: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = u32::from(Ipv4Addr::from(POOL_BASE)) + slot * 4;
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

/// Take a free slot: ledgered before its file is created with O_EXCL (which settles races).
pub fn allocate_slot(ledger: &Ledger, session_id: &str) -> Result<u32> {
    let dir = slots_dir();
    std::fs::create_dir_all(&dir).ctx("create directory", &dir)?;
    for slot in 0..POOL_SLOTS {
        let path = dir.join(slot.to_string());
        // A link of that name left by anything (a half-restored tree) would make CRIU's veth creation
        // fail, and CRIU 4.2 then hangs instead of failing: skip such slots.
        if path.exists() || std::path::Path::new("/sys/class/net").join(host_if_name(slot)).exists() {
            continue;
        }
        let res = Resource::Slot { index: slot, path: path.clone() };
        ledger.create_res(res.clone())?;
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => {
                use std::io::Write;
                let _ = f.write_all(session_id.as_bytes());
                return Ok(slot);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => ledger.release(res)?,
            Err(e) => return Err(Error::io("create slot", &path, e)),
        }
    }
    Err(Error::failed(format!("the address pool is exhausted: {POOL_SLOTS} slots under {} are taken", dir.display())))
}

/// A locally administered unicast MAC from the kernel's random source.
pub fn random_mac() -> String {
    let mut b = [0u8; 6];
    let got = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 6, 0) };
    assert_eq!(got, 6);
    b[0] = (b[0] & 0xfc) | 0x02;
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(":")
}

fn parse_mac(s: &str) -> Result<Vec<u8>> {
    let v: std::result::Result<Vec<u8>, _> = s.split(':').map(|x| u8::from_str_radix(x, 16)).collect();
    match v {
        Ok(v) if v.len() == 6 => Ok(v),
        _ => Err(Error::bad_input(format!("`{s}` is not a MAC address"))),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| Error::failed(format!("tokio: {e}")))
}

fn nl_err(what: &str, e: rtnetlink::Error) -> Error {
    Error::failed(format!("netlink: {what}: {e}"))
}

async fn link_index(h: &rtnetlink::Handle, name: &str) -> Result<Option<u32>> {
    let mut links = h.link().get().match_name(name.to_string()).execute();
    match links.try_next().await {
        Ok(Some(l)) => Ok(Some(l.header.index)),
        Ok(None) => Ok(None),
        Err(rtnetlink::Error::NetlinkError(m)) if m.raw_code() == -libc::ENODEV => Ok(None),
        Err(e) => Err(nl_err(&format!("look up link {name}"), e)),
    }
}

/// Create the veth pair for `slot` with its peer born in the network namespace of `init_pid` as `eth0`
/// with `mac` (a peer created in the root namespace and moved there costs a network synchronisation,
/// 10-20 ms here), then address and raise the host end. The host end must already be in the ledger.
/// The session end is addressed by `configure_session_end`. Returns the host end's name.
pub fn create_veth(slot: u32, init_pid: i32, mac: &str) -> Result<String> {
    let nsfile = format!("/proc/{init_pid}/ns/net");
    let ns = std::fs::File::open(&nsfile).ctx("open network namespace", &nsfile)?;
    create_veth_in(slot, &ns, mac)
}

/// `create_veth` into the network namespace open as `netns`.
pub fn create_veth_in(slot: u32, netns: &std::fs::File, mac: &str) -> Result<String> {
    use rtnetlink::packet_route::link::{InfoData, InfoVeth};
    let host_if = host_if_name(slot);
    let (host_addr, _) = slot_addrs(slot);
    let mac = parse_mac(mac)?;
    let peer = rtnetlink::LinkMessageBuilder::<LinkUnspec>::new().name(SESSION_IF.to_string()).address(mac).setns_by_fd(netns.as_raw_fd()).build();
    runtime()?.block_on(async {
        let (conn, h, _) = rtnetlink::new_connection().map_err(|e| Error::failed(format!("netlink socket: {e}")))?;
        tokio::spawn(conn);
        let pair = LinkVeth::new(&host_if, SESSION_IF).set_info_data(InfoData::Veth(InfoVeth::Peer(peer))).build();
        h.link().add(pair).execute().await.map_err(|e| nl_err(&format!("create veth {host_if}"), e))?;
        let idx = link_index(&h, &host_if).await?.ok_or_else(|| Error::failed(format!("veth {host_if} vanished")))?;
        h.address().add(idx, host_addr.into(), PREFIX_LEN).execute().await.map_err(|e| nl_err(&format!("address {host_if}"), e))?;
        h.link().set(LinkUnspec::new_with_index(idx).up().build()).execute().await.map_err(|e| nl_err(&format!("raise {host_if}"), e))?;
        Ok::<_, Error>(())
    })?;
    Ok(host_if)
}

/// Inside the session's network namespace (entered by a dedicated thread, since setns changes only the
/// calling thread): rename the peer to `session_if` unless it already has that name, set its MAC (when
/// given), replace its addresses with the slot's, raise it and `lo`.
pub fn configure_session_end(init_pid: i32, current_name: &str, slot: u32, mac: Option<&str>) -> Result<()> {
    let nsfile = format!("/proc/{init_pid}/ns/net");
    let ns = std::fs::File::open(&nsfile).ctx("open network namespace", &nsfile)?;
    configure_session_end_in(ns, current_name, slot, mac)
}

/// `configure_session_end` in the network namespace open as `ns`.
pub fn configure_session_end_in(ns: std::fs::File, current_name: &str, slot: u32, mac: Option<&str>) -> Result<()> {
    let (_, session_addr) = slot_addrs(slot);
    let mac = mac.map(parse_mac).transpose()?;
    let nsfile = format!("/proc/self/fd/{}", ns.as_raw_fd());
    let current = current_name.to_string();
    let m_changes = mac.is_some();
    std::thread::spawn(move || -> Result<()> {
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(Error::io("join network namespace", &nsfile, std::io::Error::last_os_error()));
        }
        runtime()?.block_on(async {
            let (conn, h, _) = rtnetlink::new_connection().map_err(|e| Error::failed(format!("netlink socket: {e}")))?;
            tokio::spawn(conn);
            let idx = link_index(&h, &current).await?.ok_or_else(|| Error::failed(format!("{current} is not in the session")))?;
            // A link must be down to be renamed or to change its MAC.
            h.link().set(LinkUnspec::new_with_index(idx).down().build()).execute().await.map_err(|e| nl_err("lower eth0", e))?;
            let mut m = LinkUnspec::new_with_index(idx);
            if let Some(mac) = mac {
                m = m.address(mac);
            }
            if current != SESSION_IF {
                m = m.name(SESSION_IF);
            }
            if current != SESSION_IF || m_changes {
                h.link().set(m.build()).execute().await.map_err(|e| nl_err("rename eth0 and set its MAC", e))?;
            }
            let mut addrs = h.address().get().set_link_index_filter(idx).execute();
            let mut old = vec![];
            while let Some(a) = addrs.try_next().await.map_err(|e| nl_err("list eth0 addresses", e))? {
                old.push(a);
            }
            for a in old {
                h.address().del(a).execute().await.map_err(|e| nl_err("remove an old eth0 address", e))?;
            }
            h.address().add(idx, session_addr.into(), PREFIX_LEN).execute().await.map_err(|e| nl_err("address eth0", e))?;
            h.link().set(LinkUnspec::new_with_index(idx).up().build()).execute().await.map_err(|e| nl_err("raise eth0", e))?;
            if let Some(lo) = link_index(&h, "lo").await? {
                h.link().set(LinkUnspec::new_with_index(lo).up().build()).execute().await.map_err(|e| nl_err("raise lo", e))?;
            }
            Ok(())
        })
    })
    .join()
    .map_err(|_| Error::failed("the network thread panicked"))?
}

pub const SESSION_IF: &str = "eth0";

/// A new, empty network namespace, held by the returned descriptor. A thread of its own makes it and
/// ends (unsharing changes only the calling thread's namespace).
pub fn new_netns() -> Result<std::fs::File> {
    std::thread::spawn(|| -> Result<std::fs::File> {
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(Error::io("make a network namespace", std::path::Path::new("/proc/thread-self/ns/net"), std::io::Error::last_os_error()));
        }
        std::fs::File::open("/proc/thread-self/ns/net").ctx("open network namespace", "/proc/thread-self/ns/net")
    })
    .join()
    .map_err(|_| Error::failed("the network thread panicked"))?
}

/// Give the session's eth0 a new MAC (clone hygiene), keeping its address.
pub fn set_session_mac(init_pid: i32, slot: u32, mac: &str) -> Result<()> {
    configure_session_end(init_pid, SESSION_IF, slot, Some(mac))
}

pub fn net_record(slot: u32, mac: &str) -> Net {
    let (h, s) = slot_addrs(slot);
    Net {
        slot,
        host_if: host_if_name(slot),
        session_if: SESSION_IF.into(),
        host_addr: h.to_string(),
        session_addr: s.to_string(),
        prefix_len: PREFIX_LEN,
        session_mac: mac.to_string(),
    }
}

/// The host firewall, nftables table `inet drums`: sessions may answer connections the host opened,
/// nothing else; nothing is forwarded to or from a session. Installed once, shared by all sessions.
pub const FIREWALL: &str = r#"table inet drums {
  chain input {
    type filter hook input priority filter; policy accept;
    iifname "drums*" ct state established,related accept
    iifname "drums*" counter drop
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    iifname "drums*" counter drop
    oifname "drums*" counter drop
  }
}
"#;

pub fn ensure_firewall() -> Result<()> {
    let listed = std::process::Command::new("nft").args(["list", "table", "inet", "drums"]).output();
    match listed {
        Err(e) => return Err(Error::env(format!("nft (package nftables) is needed for the session firewall: {e}"))),
        Ok(o) if o.status.success() => return Ok(()),
        Ok(_) => {}
    }
    use std::io::Write;
    let mut child = std::process::Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| Error::env(format!("run nft: {e}")))?;
    child.stdin.take().unwrap().write_all(FIREWALL.as_bytes()).map_err(|e| Error::failed(format!("nft: {e}")))?;
    let o = child.wait_with_output().map_err(|e| Error::failed(format!("nft: {e}")))?;
    if !o.status.success() {
        return Err(Error::failed(format!("nft -f: {}", String::from_utf8_lossy(&o.stderr).trim())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn pool_addresses() {
        assert_eq!(slot_addrs(0), (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 0, 2)));
        assert_eq!(slot_addrs(64), (Ipv4Addr::new(10, 77, 1, 1), Ipv4Addr::new(10, 77, 1, 2)));
        assert_eq!(slot_addrs(POOL_SLOTS - 1).1, Ipv4Addr::new(10, 77, 255, 254));
        assert!(host_if_name(POOL_SLOTS - 1).len() <= 15);
    }
    #[test]
    fn macs_are_local_unicast() {
        let m = parse_mac(&random_mac()).unwrap();
        assert_eq!(m[0] & 0x03, 0x02);
    }
}
