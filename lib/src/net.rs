//! Session networking: an address-pool slot, a veth pair made with rtnetlink (host end in the root
//! namespace, `eth0` in the session), and the host firewall that lets only the host open connections.

use crate::error::{Error, IoContext, Result};
use crate::ledger::{Ledger, Resource};
use crate::nsenter::{Kind, NsFile};
use crate::record::Net;
use futures::TryStreamExt;
use rtnetlink::{LinkUnspec, LinkVeth};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;

pub mod audit;
pub mod egress;
pub mod nfbatch;
pub mod nft;

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
    crate::state::fill_random(&mut b);
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

fn nl_err(what: &str, e: rtnetlink::Error) -> Error {
    Error::failed(format!("netlink: {what}: {e}"))
}

pub(crate) async fn link_index(h: &rtnetlink::Handle, name: &str) -> Result<Option<u32>> {
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
    create_veth_in(slot, NsFile::open(init_pid, Kind::Net)?.file(), mac)
}

/// `create_veth` into the network namespace open as `netns`.
pub fn create_veth_in(slot: u32, netns: &std::fs::File, mac: &str) -> Result<String> {
    use rtnetlink::packet_route::link::{InfoData, InfoVeth};
    let host_if = host_if_name(slot);
    let (host_addr, _) = slot_addrs(slot);
    let mac = parse_mac(mac)?;
    let peer = rtnetlink::LinkMessageBuilder::<LinkUnspec>::new().name(SESSION_IF.to_string()).address(mac).setns_by_fd(netns.as_raw_fd()).build();
    let name = host_if.as_str();
    crate::netlink::run(|h| async move {
        let pair = LinkVeth::new(name, SESSION_IF).set_info_data(InfoData::Veth(InfoVeth::Peer(peer))).build();
        h.link().add(pair).execute().await.map_err(|e| nl_err(&format!("create veth {name}"), e))?;
        let idx = link_index(&h, name).await?.ok_or_else(|| Error::failed(format!("veth {name} vanished")))?;
        h.address().add(idx, host_addr.into(), PREFIX_LEN).execute().await.map_err(|e| nl_err(&format!("address {name}"), e))?;
        h.link().set(LinkUnspec::new_with_index(idx).up().build()).execute().await.map_err(|e| nl_err(&format!("raise {name}"), e))?;
        Ok::<_, Error>(())
    })?;
    Ok(host_if)
}

/// Inside the session's network namespace (entered by a dedicated thread, since setns changes only the
/// calling thread): rename the peer to `session_if` unless it already has that name, set its MAC (when
/// given), replace its addresses with the slot's, raise it and `lo`.
pub fn configure_session_end(init_pid: i32, current_name: &str, slot: u32, mac: Option<&str>) -> Result<()> {
    configure_session_end_in(NsFile::open(init_pid, Kind::Net)?, current_name, slot, mac)
}

/// `configure_session_end` in the network namespace `ns`.
pub fn configure_session_end_in(ns: NsFile, current_name: &str, slot: u32, mac: Option<&str>) -> Result<()> {
    let (_, session_addr) = slot_addrs(slot);
    let mac = mac.map(parse_mac).transpose()?;
    let current = current_name.to_string();
    let m_changes = mac.is_some();
    crate::nsenter::on_thread(vec![ns], move || {
        crate::netlink::run(|h| async move {
            let idx = link_index(&h, &current).await?.ok_or_else(|| Error::failed(format!("{current} is not in the session")))?;
            // Lowering the link drops the routes through it: a default route (a network policy's,
            // crate::net::egress) is put back once it is up again.
            let had_default = {
                let mut routes = h.route().get(rtnetlink::RouteMessageBuilder::<Ipv4Addr>::new().build()).execute();
                let mut found = false;
                while let Some(r) = routes.try_next().await.map_err(|e| nl_err("list routes", e))? {
                    found |= r.header.destination_prefix_length == 0;
                }
                found
            };
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
            if had_default {
                let gw = slot_addrs(slot).0;
                h.route().add(rtnetlink::RouteMessageBuilder::<Ipv4Addr>::new().gateway(gw).build()).replace().execute().await.map_err(|e| nl_err("restore the default route", e))?;
            }
            if let Some(lo) = link_index(&h, "lo").await? {
                h.link().set(LinkUnspec::new_with_index(lo).up().build()).execute().await.map_err(|e| nl_err("raise lo", e))?;
            }
            Ok::<_, Error>(())
        })
    })
}

pub const SESSION_IF: &str = "eth0";

/// The UDP sockets of the network namespace of `init_pid` bound to `addr` (/proc/PID/net/udp), as
/// `ADDR:PORT` of each. CRIU restores such a socket by binding it to that address again, which a sibling
/// (an address of its own) refuses: the whole restore fails ("Can't bind inet socket: Cannot assign
/// requested address"). A DNS query over UDP in flight at the dump leaves one.
pub fn udp_bound_to(init_pid: i32, addr: std::net::Ipv4Addr) -> Result<Vec<String>> {
    let path = format!("/proc/{init_pid}/net/udp");
    let table = std::fs::read_to_string(&path).ctx("read", &path)?;
    // The local address is the hex of its four bytes read as a little-endian u32.
    let hex = format!("{:08X}:", u32::from_le_bytes(addr.octets()));
    Ok(table
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|local| local.strip_prefix(&hex))
        .map(|port| format!("{addr}:{}", u16::from_str_radix(port, 16).unwrap_or(0)))
        .collect())
}

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

/// The host group whose members may, beside root, open connections into sessions.
pub const ALLOWED_GROUP: &str = "drums";

/// The loopback ports drums-view's page may listen on (drums-view(1)): the firewall closes them, as it
/// closes sessions, to every user but root and group `drums`, so that the page's access rule is the
/// kernel's. Ten, so that several servers (one per person, a test's) can run at once.
pub const VIEW_PORTS: (u16, u16) = (3786, 3795);

/// The host firewall, nftables table `inet drums`, shared by all sessions, with `allowed` (sorted uids)
/// the users whose sockets may open connections into sessions. Written as `nft list` prints it (nftables
/// 1.0.6), since the live table is compared with it line by line. A packet from a session whose source
/// is not routed back through the link it came in on (another session's address, the host's, anything)
/// is dropped before connection tracking sees it; otherwise sessions may only answer connections the host
/// opened; nothing is forwarded to or from a session, and nothing reaches the host from one, unless the
/// session's own policy table (`egress`, made only under a policy other than `none`) marked the packet
/// with `egress::PERMIT_MARK`, which no session can set. New connections to drums-view's ports on the
/// loopback (`VIEW_PORTS`) are refused to the same users as connections into sessions. (A socket-less
/// packet, which the kernel sends, has no owner: the owner rule passes it.)
pub fn firewall(allowed: &[u32]) -> String {
    let uids = match allowed {
        [one] => one.to_string(),
        _ => format!("{{ {} }}", allowed.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")),
    };
    format!(
        r#"table inet drums {{
  chain prerouting {{
    type filter hook prerouting priority raw; policy accept;
    iifname "drums*" fib saddr . iif oif missing counter drop
  }}

  chain input {{
    type filter hook input priority filter; policy accept;
    iifname "drums*" ct state established,related accept
    iifname "drums*" meta mark {mark:#010x} accept
    iifname "drums*" counter drop
  }}

  chain forward {{
    type filter hook forward priority filter; policy accept;
    iifname "drums*" meta mark != {mark:#010x} counter drop
    oifname "drums*" meta mark != {mark:#010x} counter drop
  }}

  chain output {{
    type filter hook output priority filter; policy accept;
    oifname "drums*" ct state new meta skuid != {uids} counter reject
    oifname "lo" tcp dport {view_lo}-{view_hi} ct state new meta skuid != {uids} counter reject
  }}
}}
"#,
        view_lo = VIEW_PORTS.0,
        view_hi = VIEW_PORTS.1,
        mark = egress::PERMIT_MARK,
    )
}

/// Who may open connections into sessions: root, the users whose primary group is `drums` and the
/// group's listed members, as uids (an owner match sees a socket's uid; its gid is only the primary
/// group's), read from /etc/passwd and /etc/group each time, so that a membership change applies at the
/// next session start. No such group: root alone.
pub fn allowed_uids() -> Result<Vec<u32>> {
    let read = |p: &str| match std::fs::read_to_string(p) {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(Error::io("read", p, e)),
    };
    Ok(allowed_uids_in(&read("/etc/passwd")?, &read("/etc/group")?))
}

fn allowed_uids_in(passwd: &str, group: &str) -> Vec<u32> {
    let fields = |l: &str| l.split(':').map(str::to_string).collect::<Vec<_>>();
    let users: Vec<(String, u32, u32)> = passwd
        .lines()
        .map(fields)
        .filter_map(|f| Some((f.first()?.clone(), f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?)))
        .collect();
    let mut uids = vec![0];
    // The first line of that name counts, as for getgrnam(3).
    if let Some(g) = group.lines().map(fields).find(|f| f.first().map(String::as_str) == Some(ALLOWED_GROUP)) {
        if let Some(gid) = g.get(2).and_then(|x| x.parse::<u32>().ok()) {
            uids.extend(users.iter().filter(|u| u.2 == gid).map(|u| u.1));
        }
        for name in g.get(3).map(String::as_str).unwrap_or("").split(',').map(str::trim).filter(|n| !n.is_empty()) {
            // The first user of that name, as for getpwnam(3); a member with no account is nobody.
            if let Some(u) = users.iter().find(|u| u.0 == name) {
                uids.push(u.1);
            }
        }
    }
    uids.sort_unstable();
    uids.dedup();
    uids
}

/// Make sure the firewall is installed exactly, with the allowed users as they are now: every path that
/// starts a session calls this first, and a session never runs unprotected. The live table is compared
/// with `firewall` block by block and line by line (counters aside); any difference (the table gone, a
/// chain flushed, a rule missing, changed or added, a set or flag added) replaces the whole table in one
/// nftables transaction, and a table that still differs then is a failure.
///
/// Listing the table runs `nft`, 5.6-7.9 ms (median of n=50, two runs of the firewall test
/// `cost_of_the_check` on the 2-core machine, loaded), against a restore of ~0.25 s; so a table found
/// exact is remembered with the ruleset generation it was listed at (`Verified`), and while the
/// generation (bumped by every committed change to any table of this network namespace), the boot, the
/// namespace and the allowed users are the same, the table cannot have changed and is not listed again:
/// one netlink round trip, no process, 0.14 ms (median, n=50). Once per drums-restore run would not do:
/// a pool fill runs drums-restore once per sibling.
pub fn ensure_firewall() -> Result<()> {
    let allowed = allowed_uids()?;
    let table: String = {
        use sha2::Digest;
        sha2::Sha256::digest(firewall(&allowed).as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    };
    let key = |generation| Verified { boot_id: boot_id(), netns: netns_inode(), generation, allowed: allowed.clone(), table: table.clone() };
    let unchanged = || nft_generation().is_ok_and(|g| read_verified().as_ref() == Some(&key(g)));
    if unchanged() {
        return Ok(());
    }
    let root = crate::state::state_root();
    std::fs::create_dir_all(&root).ctx("create state root", &root)?;
    // One process lists and replaces at a time: two replacing at once with different allowed users would
    // each find the other's table.
    let lock_path = root.join("firewall.lock");
    let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).ctx("open", &lock_path)?;
    let _lock = crate::flock::Flock::wait(lock, &lock_path, crate::flock::Mode::Exclusive)?;
    // Another process may have verified it meanwhile.
    if unchanged() {
        return Ok(());
    }
    let expected = firewall(&allowed);
    // The generation is read before the listing: a change made after it shows as a newer generation.
    let generation = nft_generation().ok();
    let differences = firewall_differences(&expected, &list_firewall()?);
    let generation = if differences.is_empty() {
        generation
    } else {
        replace_firewall(&expected)?;
        let generation = nft_generation().ok();
        let still = firewall_differences(&expected, &list_firewall()?);
        if !still.is_empty() {
            return Err(Error::failed(format!(
                "the session firewall (nftables table inet drums) still differs from Drums' after it was replaced, so no session may start: {}",
                still.join("; ")
            )));
        }
        generation
    };
    if let Some(g) = generation {
        write_verified(&key(g))?;
    }
    Ok(())
}

/// Run `commit`, one nftables transaction of Drums' own on a table other than `inet drums` (a session's
/// policy table, made or deleted), without costing the next `ensure_firewall` a listing: when the
/// firewall was verified at the generation read just before, and the generation just after is the next
/// one, the only transaction committed in between is `commit`'s, which left `inet drums` as it was, so
/// the table is as verified at the new generation too, which is recorded. Anything else committed in
/// between (another session's table, someone's change to `inet drums`) makes the generation jump further
/// and nothing is recorded: the next check lists the table as before. The cost is two netlink round
/// trips (0.14 ms each) against a listing (5.6-7.9 ms) at the next session start.
pub fn own_nft_transaction<T>(commit: impl FnOnce() -> Result<T>) -> Result<T> {
    let before = nft_generation().ok();
    let r = commit()?;
    let (Some(g0), Ok(g1)) = (before, nft_generation()) else { return Ok(r) };
    if g1 != g0.wrapping_add(1) {
        return Ok(r);
    }
    if let Some(mut v) = read_verified() {
        if v.generation == g0 && v.boot_id == boot_id() && v.netns == netns_inode() {
            v.generation = g1;
            // Another process may record its own generation at the same time: each record says a true
            // thing (the table was exact at that generation), and a stale one only costs a listing.
            let _ = write_verified(&v);
        }
    }
    Ok(r)
}

/// What a firewall found exact was listed with (`<state root>/firewall-verified.json`).
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Verified {
    boot_id: String,
    netns: u64,
    generation: u32,
    allowed: Vec<u32>,
    /// SHA-256 of the table this version expects: a Drums whose table differs (a rule added) lists and
    /// replaces the one an older version verified, instead of trusting the older verification.
    #[serde(default)]
    table: String,
}

fn verified_path() -> PathBuf {
    crate::state::state_root().join("firewall-verified.json")
}

fn read_verified() -> Option<Verified> {
    serde_json::from_slice(&std::fs::read(verified_path()).ok()?).ok()
}

fn write_verified(v: &Verified) -> Result<()> {
    let path = verified_path();
    // Its own temporary file: two processes may write at once (own_nft_transaction).
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec(v).map_err(|e| Error::failed(format!("firewall state: {e}")))?).ctx("write", &tmp)?;
    std::fs::rename(&tmp, &path).ctx("rename", &path)
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default().trim().to_string()
}

fn netns_inode() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").map(|m| m.ino()).unwrap_or(0)
}

/// How long one nft call may take (milliseconds, normally).
const NFT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `nft list table inet drums`: Ok(listing), or Err(why not) when there is no such table (or nft cannot
/// list it: replacing it then says why).
fn list_firewall() -> Result<std::result::Result<String, String>> {
    let o = crate::proc::output_within(std::process::Command::new("nft").args(["list", "table", "inet", "drums"]), None, crate::state::scaled(NFT_TIMEOUT)).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => Error::failed(format!("nft list: {e}")),
        _ => Error::env(format!("nft (package nftables) is needed for the session firewall: {e}")),
    })?;
    Ok(if o.status.success() { Ok(String::from_utf8_lossy(&o.stdout).into_owned()) } else { Err(String::from_utf8_lossy(&o.stderr).trim().to_string()) })
}

/// Replace the table in one transaction: packets see the old table or the new one, never none. (Adding
/// the table first makes the delete valid when there is none.)
fn replace_firewall(expected: &str) -> Result<()> {
    let input = format!("table inet drums {{}}\ndelete table inet drums\n{expected}");
    let o = crate::proc::output_within(std::process::Command::new("nft").args(["-f", "-"]), Some(input.as_bytes()), crate::state::scaled(NFT_TIMEOUT)).map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => Error::failed(format!("nft -f: {e}")),
        _ => Error::env(format!("nft (package nftables) is needed for the session firewall: {e}")),
    })?;
    if !o.status.success() {
        return Err(Error::failed(format!("installing the session firewall: nft -f: {}", String::from_utf8_lossy(&o.stderr).trim())));
    }
    Ok(())
}

/// A table listing as blocks (`chain input`, or anything else a table may hold: a set, a flowtable),
/// each with its lines, and the table's own lines (flags, comment).
#[derive(Default)]
struct Listing {
    own: Vec<String>,
    blocks: Vec<(String, Vec<String>)>,
}

fn parse_listing(text: &str) -> std::result::Result<Listing, String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    if lines.next() != Some("table inet drums {") {
        return Err("the listing does not start with `table inet drums {`".into());
    }
    let mut l = Listing::default();
    let mut depth = 1i32;
    for line in lines {
        let at = depth;
        depth += line.matches('{').count() as i32 - line.matches('}').count() as i32;
        match at {
            1 if depth > 1 => l.blocks.push((line.trim_end_matches('{').trim().to_string(), vec![])),
            1 if depth == 1 => l.own.push(normalise_line(line)),
            1 => {}
            _ if depth >= 1 && line != "}" => match l.blocks.last_mut() {
                Some(b) => b.1.push(normalise_line(line)),
                None => return Err(format!("`{line}` outside any block")),
            },
            _ => {}
        }
    }
    if depth != 0 {
        return Err("the listing's braces do not balance".into());
    }
    Ok(l)
}

/// A line without counters' values, with the elements of `{ ... }` sets in sorted order.
fn normalise_line(line: &str) -> String {
    let t: Vec<&str> = line.split_whitespace().collect();
    let mut out: Vec<String> = vec![];
    let mut i = 0;
    while i < t.len() {
        if t[i] == "counter" && t.get(i + 1) == Some(&"packets") && t.get(i + 3) == Some(&"bytes") {
            out.push("counter".into());
            i += 5;
        } else if let (true, Some(end)) = (t[i] == "{", t[i..].iter().position(|x| *x == "}")) {
            let inner = t[i + 1..i + end].join(" ");
            let mut elems: Vec<&str> = inner.split(',').map(str::trim).filter(|e| !e.is_empty()).collect();
            elems.sort_by(|a, b| (a.len(), a).cmp(&(b.len(), b)));
            out.push(format!("{{ {} }}", elems.join(", ")));
            i += end + 1;
        } else {
            out.push(t[i].to_string());
            i += 1;
        }
    }
    out.join(" ")
}

/// How the live table (`live`: a listing, or why there is none) differs from `expected`, one sentence per
/// difference; empty when it is the same.
fn firewall_differences(expected: &str, live: &std::result::Result<String, String>) -> Vec<String> {
    let want = parse_listing(expected).expect("Drums' own firewall parses");
    let have = match live.as_ref().map(|t| parse_listing(t)) {
        Err(why) => return vec![format!("the table is missing ({why})")],
        Ok(Err(why)) => return vec![why],
        Ok(Ok(l)) => l,
    };
    let mut d = vec![];
    for (name, lines) in &want.blocks {
        let Some((_, got)) = have.blocks.iter().find(|b| &b.0 == name) else {
            d.push(format!("`{name}` is missing"));
            continue;
        };
        for i in 0..lines.len().max(got.len()) {
            match (lines.get(i), got.get(i)) {
                (Some(w), Some(g)) if w != g => d.push(format!("`{name}` line {}: `{g}` instead of `{w}`", i + 1)),
                (Some(w), None) => d.push(format!("`{name}` lacks `{w}`")),
                (None, Some(g)) => d.push(format!("`{name}` has an extra `{g}`")),
                _ => {}
            }
        }
    }
    d.extend(have.blocks.iter().filter(|b| !want.blocks.iter().any(|w| w.0 == b.0)).map(|b| format!("an extra `{}`", b.0)));
    d.extend(have.own.iter().filter(|l| !want.own.contains(l)).map(|l| format!("an extra `{l}`")));
    d
}

/// The nftables ruleset generation of this network namespace, from the kernel (NFT_MSG_GETGEN).
pub fn nft_generation() -> std::io::Result<u32> {
    use std::os::fd::{FromRawFd, OwnedFd};
    const NFNL_SUBSYS_NFTABLES: u16 = 10;
    const NFT_MSG_NEWGEN: u16 = 15;
    const NFT_MSG_GETGEN: u16 = 16;
    const NFTA_GEN_ID: u16 = 1;
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_NETFILTER) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let timeout = libc::timeval { tv_sec: 2, tv_usec: 0 };
    unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&timeout as *const libc::timeval).cast(), std::mem::size_of::<libc::timeval>() as u32) };
    // struct nlmsghdr, then struct nfgenmsg (family AF_UNSPEC, version NFNETLINK_V0, res_id 0).
    let mut req = [0u8; 20];
    req[0..4].copy_from_slice(&20u32.to_ne_bytes());
    req[4..6].copy_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN).to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    if unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) } != req.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    let mut buf = [0u8; 4096];
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let msg = &buf[..n as usize];
    let bad = || std::io::Error::other("unexpected nfnetlink reply");
    let u16_at = |i: usize| msg.get(i..i + 2).map(|b| u16::from_ne_bytes([b[0], b[1]])).ok_or_else(bad);
    match u16_at(4)? {
        t if t == libc::NLMSG_ERROR as u16 => {
            let errno = msg.get(16..20).map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]])).ok_or_else(bad)?;
            return Err(std::io::Error::from_raw_os_error(-errno));
        }
        t if t == (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN => {}
        _ => return Err(bad()),
    }
    let end = (u32::from_ne_bytes(msg[0..4].try_into().unwrap()) as usize).min(msg.len());
    let mut at = 20;
    while at + 4 <= end {
        let len = u16_at(at)? as usize;
        if len < 4 {
            break;
        }
        if u16_at(at + 2)? & 0x3fff == NFTA_GEN_ID && len >= 8 {
            return Ok(u32::from_be_bytes(msg[at + 4..at + 8].try_into().unwrap()));
        }
        at += (len + 3) & !3;
    }
    Err(bad())
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
    fn allowed_users_are_root_and_group_drums() {
        let passwd = "root:x:0:0::/root:/bin/sh\ndaemon:x:1:1::/:/bin/sh\nalice:x:1000:1000::/home/a:/bin/sh\nbob:x:1001:990::/home/b:/bin/sh\n";
        assert_eq!(allowed_uids_in(passwd, "root:x:0:\n"), vec![0]);
        assert_eq!(allowed_uids_in(passwd, ""), vec![0]);
        // bob by his primary group, daemon by the member list; a member without an account is nobody.
        assert_eq!(allowed_uids_in(passwd, "users:x:100:alice\ndrums:x:990:daemon,ghost\ndrums:x:991:alice\n"), vec![0, 1, 1001]);
    }
    #[test]
    fn firewall_comparison() {
        let want = firewall(&[0, 1001, 7]);
        assert!(want.contains("meta skuid != { 0, 1001, 7 }"));
        assert!(firewall(&[0]).contains("meta skuid != 0 counter"));
        // As nft lists it: tabs, counters with values, set elements in its order.
        let listed = want.replace("  ", "\t").replace("counter", "counter packets 12 bytes 3456").replace("{ 0, 1001, 7 }", "{ 7, 0, 1001 }");
        assert_eq!(firewall_differences(&want, &Ok(listed.clone())), Vec::<String>::new());
        assert_eq!(firewall_differences(&want, &Err("No such file or directory".into())).len(), 1);
        let flushed = listed.replace("\t\tiifname \"drums*\" ct state established,related accept\n\t\tiifname \"drums*\" meta mark 0x64726d01 accept\n\t\tiifname \"drums*\" counter packets 12 bytes 3456 drop\n", "");
        assert_eq!(firewall_differences(&want, &Ok(flushed)).len(), 3);
        let extra = listed.replace("\tchain input {\n", "\tflags dormant\n\tset s {\n\t\ttype ipv4_addr\n\t\telements = { 1.2.3.4,\n\t\t\t     5.6.7.8 }\n\t}\n\tchain input {\n");
        assert_eq!(firewall_differences(&want, &Ok(extra)), vec!["an extra `set s`".to_string(), "an extra `flags dormant`".to_string()]);
        let changed = listed.replace("policy accept;\n\t\tiifname \"drums*\" ct", "policy accept;\n\t\tiifname \"drums*\" accept\n\t\tiifname \"drums*\" ct");
        let d = firewall_differences(&want, &Ok(changed));
        assert_eq!(d.len(), 4, "{d:?}");
        assert!(d[0].starts_with("`chain input` line 2: `iifname \"drums*\" accept`"), "{d:?}");
    }
    #[test]
    fn macs_are_local_unicast() {
        let m = parse_mac(&random_mac()).unwrap();
        assert_eq!(m[0] & 0x03, 0x02);
    }
}
