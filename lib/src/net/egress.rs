//! A session's network policy on the host (drums(7), "Network boundary"): what leaves a session, through
//! which interface, and how its names are resolved. Everything lives on the host, none of it in the
//! session or its checkpoint, so a sibling can be restored under another policy than its source's.
//!
//! Under `none` nothing is made: the shared table `inet drums` drops whatever a session sends beyond its
//! link, as it always did. Under `internet` or an allow list, one ledger resource (`egress`) stands for
//! - the nftables table `inet drums_net_<slot>`, which filters the session's forwarded packets (before the
//!   shared table, which lets through only what this table marked with PERMIT_MARK), rejects at once what
//!   the policy or the always-denied ranges refuse (its chain `refuse`, which also logs the refusal to the
//!   auditor), masquerades what goes out through the uplink, and counts bytes and connections;
//! - policy routing: rules at preference `rule_pref(slot)` send what comes in on the session's link, and
//!   the queries its resolver sends from the host end's address (to port 53 only: the host's answers and
//!   refusals to sessions from that address follow the main table), to the routing table `route_table(slot)`, which
//!   holds only the uplink's route; a `prohibit` rule after it means that with the uplink gone, the packet
//!   is refused, never routed another way;
//! - the session's resolver, a dnsmasq on the host end of its link (its pid in the state directory's
//!   `resolver.pid`), which answers only what the policy allows and, for allow lists, puts the addresses
//!   it hands out into the table's set `resolved` (the set's timeout, crate::net::audit::TTL_FLOOR_S,
//!   which the auditor raises to the answer's TTL), the only addresses (with the allowed networks) that
//!   are forwarded;
//! - the session's connection auditor (crate::net::audit), its pid in the state directory's `audit.pid`.
//! Removing the resource (destroy, the sweep, a policy change) undoes all four; each step is idempotent.

use crate::error::{Error, IoContext, Result};
use crate::ledger::{Ledger, Resource};
use crate::record::egress::{Allow, ApplyTimes, Cidr, Policy, Resolver, Section};
use crate::record::Session;
pub use super::nft::{table_name, TABLE_PREFIX};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

mod options;
mod table;
pub use options::{parse_rate, Options, Proxy, Uplink, MIN_RATE, NO_PROXY};
pub use table::{create_table, table_text, CreateError, LOG_BURST, LOG_RATE};

/// The packet mark by which a session's own table tells the shared table `inet drums` that a packet from
/// or to a session is allowed by the session's policy. Packets from a session arrive with mark 0 (a veth
/// crossing namespaces scrubs it), so a session cannot forge it.
pub const PERMIT_MARK: u32 = 0x6472_6d01;
/// Routing tables of sessions: ROUTE_TABLE_BASE + slot.
pub const ROUTE_TABLE_BASE: u32 = 770_000;
/// Rule preferences of sessions: RULE_PREF_BASE + slot (below the main table's 32766).
pub const RULE_PREF_BASE: u32 = 10_000;
/// The nameserver address every session's /etc/resolv.conf names, whatever its slot or policy: the
/// session's table translates it to its own resolver on the host end of its link. One address for all
/// means a restored sibling's processes, which read their resolver before the checkpoint (Chromium,
/// glibc), never hold another session's; under `none` the session has no route to it and a lookup fails
/// at once.
pub const RESOLVER_ADDR: &str = "169.254.77.53";
pub const PID_FILE: &str = "resolver.pid";
/// The resolver's query log (the auditor names connections from it).
pub use super::audit::RESOLVER_LOG as LOG_FILE;

/// Always denied, whatever the policy (unless an operator excepts a network): this host's networks and
/// the other sessions' (10.77.0.0/16 is inside 10.0.0.0/8), RFC 1918, shared address space, loopback,
/// link-local (the cloud metadata address 169.254.169.254), "this network", multicast, reserved and
/// broadcast. The host's own addresses are refused on the input path (a session reaches only its
/// resolver there).
pub const ALWAYS_DENIED: &[&str] =
    &["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4"];

pub fn route_table(slot: u32) -> u32 {
    ROUTE_TABLE_BASE + slot
}
pub fn rule_pref(slot: u32) -> u32 {
    RULE_PREF_BASE + slot
}

/// The host's /etc/resolv.conf's IPv4 nameservers.
fn host_nameservers() -> Vec<Ipv4Addr> {
    std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse::<Ipv4Addr>().ok())
        .collect()
}


fn set_forwarding(ifname: &str) -> Result<()> {
    let p = PathBuf::from(format!("/proc/sys/net/ipv4/conf/{ifname}/forwarding"));
    if !p.exists() {
        return Err(Error::env(format!("the uplink {ifname} does not exist on this host")));
    }
    std::fs::write(&p, "1").ctx("enable forwarding", &p)
}

/// The resource that stands for a session's egress state (see the module's comment).
pub fn resource(slot: u32, state_dir: &Path) -> Resource {
    Resource::Egress { slot, host_if: super::host_if_name(slot), pid_file: state_dir.join(PID_FILE) }
}

/// What applying a policy needs of a session, owned, so that a restore can apply it on a thread of its
/// own while CRIU restores the sibling's processes (crate::restore).
#[derive(Debug, Clone)]
pub struct Target {
    pub id: String,
    pub state_dir: PathBuf,
    pub net: crate::record::Net,
    /// The session's root seen from the host (its overlay's `merged`).
    pub merged: PathBuf,
    pub id_range: Option<crate::record::IdRange>,
}

impl Target {
    /// The session `s`, whose `net` and `overlay` are made.
    pub fn of(s: &Session) -> Result<Target> {
        Ok(Target { id: s.id.clone(), state_dir: s.state_dir.clone(), net: s.net()?.clone(), merged: s.overlay()?.merged.clone(), id_range: s.id_range })
    }
}

/// The name of the thread a restore applies its sibling's policy on (tests find it by this name).
pub const APPLY_THREAD: &str = "drums-egress";

/// A policy being applied on a thread of its own (`apply_beside`); `join` it on every path, so that
/// nothing of it is still being made when the caller goes on (or destroys the session).
pub struct Applying<'scope>(std::thread::ScopedJoinHandle<'scope, (Result<Option<Section>>, f64)>);

impl Applying<'_> {
    /// The application's result (`apply_to`'s) and how long it took, in seconds.
    pub fn join(self) -> Result<(Result<Option<Section>>, f64)> {
        self.0.join().map_err(|_| Error::failed("the thread that applies the network policy panicked"))
    }
}

/// `apply_to` on a thread of its own, named APPLY_THREAD, inside `scope`, while the caller does what
/// `beside` names (a restore's CRIU, a cold session's init start-up).
pub fn apply_beside<'scope, 'env>(
    scope: &'scope std::thread::Scope<'scope, 'env>,
    ledger: &'env Ledger,
    t: Target,
    o: &'env Options,
    netns: crate::nsenter::NsFile,
    beside: &'static str,
) -> Result<Applying<'scope>> {
    std::thread::Builder::new()
        .name(APPLY_THREAD.into())
        .spawn_scoped(scope, move || {
            let t0 = std::time::Instant::now();
            (apply_to(ledger, &t, o, netns, Some(beside)), t0.elapsed().as_secs_f64())
        })
        .map(Applying)
        .map_err(|e| Error::failed(format!("start the thread that applies the network policy: {e}")))
}

/// Apply `o` to the session `s` (its `net` made): replace whatever egress state it had, write its
/// resolv.conf into its root (`merged`: the overlay, seen from the host) and its default route into its
/// network namespace `netns`, and set `s.egress`. Under `none` it removes the state and the route.
pub fn apply(ledger: &Ledger, s: &mut Session, o: &Options, netns: crate::nsenter::NsFile) -> Result<()> {
    s.egress = apply_to(ledger, &Target::of(s)?, o, netns, None)?;
    Ok(())
}

/// `apply` to the session `t`: its egress section (None under `none`). `beside` names what runs at the
/// same time as this application (recorded in `apply_times.beside`). Fail-closed whatever runs beside
/// it: the session's default route, without which nothing it sends goes beyond its link (a connection
/// fails at once, unreachable), is added only once the table, the policy routing, the resolver and the
/// auditor are all in place; until then the shared table `inet drums` would drop anything unmarked, too.
pub fn apply_to(ledger: &Ledger, t: &Target, o: &Options, netns: crate::nsenter::NsFile, beside: Option<&str>) -> Result<Option<Section>> {
    let mut lap = Lap::new();
    let mut times = ApplyTimes { beside: beside.map(str::to_string), ..Default::default() };
    let net = &t.net;
    let slot = net.slot;
    let (host, _) = super::slot_addrs(slot);
    let merged = &t.merged;
    let res = resource(slot, &t.state_dir);
    let had = ledger.read()?.live().contains(&res);
    if had {
        remove(&res)?;
    }
    times.remove_ms = lap.ms();
    if o.policy.is_none() {
        if had {
            ledger.release(res)?;
        }
        session_route(netns, None)?;
        write_resolv_conf(merged, t.id_range.as_ref())?;
        write_proxy_files(merged, t.id_range.as_ref(), None)?;
        return Ok(None);
    }
    let uplink = match &o.uplink {
        Some(u) => u.clone(),
        None => Uplink::host_default()?,
    };
    let upstream = if o.dns.is_empty() { host_nameservers() } else { o.dns.clone() };
    if upstream.is_empty() {
        return Err(Error::env("no upstream DNS server for the session's resolver: the host's /etc/resolv.conf names no IPv4 nameserver (--dns IP)"));
    }
    if !had {
        ledger.create_res(res.clone())?;
    }
    set_forwarding(&uplink.ifname)?;
    set_forwarding(&net.host_if)?;
    times.prepare_ms = lap.ms();
    // The resolver and the auditor start first and are waited for last: their start-up (a fork and
    // exec each, dnsmasq's set-up, the auditor's sockets) runs beside the table and the routes, on the
    // other core. Neither needs them to start: the resolver binds the host end's address, which the link
    // has; the auditor binds log groups, which need no table. Once spawned they are always waited for,
    // even when the table or the routes failed, so that their pid files exist and the removal of the
    // ledgered resource finds and kills them.
    let table = table_name(slot);
    let (rt, pref) = (route_table(slot), rule_pref(slot));
    let resolver = spawn_resolver(&t.state_dir, slot, &o.policy, &upstream);
    let auditor = super::audit::spawn(&t.state_dir, &t.id, slot);
    times.spawn_ms = lap.ms();
    let made = (|| {
        if resolver.is_err() || auditor.is_err() {
            // Said below, once the other one was waited for.
            return Ok(());
        }
        // One nftables transaction, the table with its sets, counters and chains, sent to the kernel
        // directly (crate::net::nfbatch: nft would list every other table first). A table of that name
        // left by a session of this slot that died unswept is deleted, and the table made again.
        let create = || create_table(slot, &o.policy, &uplink.ifname, &o.except, o.rate, o.proxy.as_ref());
        match super::own_nft_transaction(|| Ok(create()))? {
            Ok(()) => {}
            Err(CreateError::Exists) => {
                super::nft::delete_table(&table)?;
                create().map_err(|e| match e {
                    CreateError::Exists => Error::failed(format!("nftables: table inet {table} came back while it was being replaced")),
                    CreateError::Other(e) => e,
                })?;
            }
            Err(CreateError::Other(e)) => return Err(e),
        }
        times.nft_ms = lap.ms();
        policy_routes(slot, &uplink, &net.host_if)?;
        times.routes_ms = lap.ms();
        Ok::<_, Error>(())
    })();
    let resolver = resolver.and_then(wait_resolver);
    let auditor = auditor.and_then(|st| super::audit::wait_replacing_stale(st, &t.state_dir, &t.id, slot));
    times.wait_ms = lap.ms();
    made?;
    let pid = resolver?;
    auditor?;
    // The moment the session may reach beyond its link: taken before its route exists, so that nothing
    // it sends gets through before `applied_at`.
    let applied_at = crate::state::now();
    session_route(netns, Some(host))?;
    times.session_route_ms = lap.ms();
    write_resolv_conf(merged, t.id_range.as_ref())?;
    write_proxy_files(merged, t.id_range.as_ref(), o.proxy.as_ref())?;
    times.files_ms = lap.ms();
    times.total_ms = lap.total_ms();
    Ok(Some(Section {
        policy: o.policy.clone(),
        uplink: uplink.ifname.clone(),
        gateway: uplink.gateway.map(|g| g.to_string()),
        except: o.except.iter().map(Cidr::to_string).collect(),
        rate_bytes_s: o.rate,
        proxy: o.proxy.map(|p| p.url()),
        nft_table: format!("inet {table}"),
        route_table: rt,
        rule_pref: pref,
        resolver: Resolver { listen: host.to_string(), upstream: upstream.iter().map(Ipv4Addr::to_string).collect(), pid: Some(pid) },
        applied_at,
        apply_times: Some(times),
        extra: Default::default(),
    }))
}

/// Milliseconds since the last lap (and since the start), for ApplyTimes.
struct Lap {
    start: std::time::Instant,
    last: std::time::Instant,
}

impl Lap {
    fn new() -> Lap {
        let now = std::time::Instant::now();
        Lap { start: now, last: now }
    }
    fn ms(&mut self) -> f64 {
        let now = std::time::Instant::now();
        let d = now - self.last;
        self.last = now;
        round_ms(d)
    }
    fn total_ms(&self) -> f64 {
        round_ms(self.start.elapsed())
    }
}

/// Milliseconds to the microsecond.
fn round_ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}


/// The dnsmasq command line of a session's resolver. Without dnsmasq's --stop-dns-rebind: it also
/// refuses the documentation ranges (TEST-NET-1..3), where the tests' stand-in internet lives, and a
/// private answer gets nowhere anyway, since the session's table refuses every connection to a private,
/// shared, link-local or host address whatever name it was resolved from (DNS rebinding included).
pub fn resolver_args(state_dir: &Path, slot: u32, policy: &Policy, upstream: &[Ipv4Addr]) -> Vec<String> {
    let (host, _) = super::slot_addrs(slot);
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
            a.push(format!("--max-ttl={}", super::audit::TTL_CAP_S));
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
fn spawn_resolver(state_dir: &Path, slot: u32, policy: &Policy, upstream: &[Ipv4Addr]) -> Result<(std::process::Child, PathBuf)> {
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

fn wait_resolver((child, pid_file): (std::process::Child, PathBuf)) -> Result<i32> {
    let o = child.wait_with_output().map_err(|e| Error::failed(format!("the session's resolver (dnsmasq): {e}")))?;
    if !o.status.success() {
        return Err(Error::failed(format!("the session's resolver (dnsmasq) did not start: {}", String::from_utf8_lossy(&o.stderr).trim())));
    }
    let pid = std::fs::read_to_string(&pid_file).ctx("read", &pid_file)?;
    pid.trim().parse::<i32>().map_err(|_| Error::failed(format!("{}: `{}` is no pid", pid_file.display(), pid.trim())))
}

/// The session's default route: via the host end of its link under a policy, none under `none` (a
/// connection beyond the link then fails at once, unreachable).
fn session_route(ns: crate::nsenter::NsFile, via: Option<Ipv4Addr>) -> Result<()> {
    use futures::TryStreamExt;
    use rtnetlink::RouteMessageBuilder;
    crate::nsenter::on_thread(vec![ns], move || {
        crate::netlink::run(|h| async move {
            let nl = |what: &str, e: rtnetlink::Error| Error::failed(format!("netlink: {what}: {e}"));
            match via {
                Some(gw) => {
                    h.route().add(RouteMessageBuilder::<Ipv4Addr>::new().gateway(gw).build()).replace().execute().await.map_err(|e| nl("the session's default route", e))?;
                }
                None => {
                    let mut routes = h.route().get(RouteMessageBuilder::<Ipv4Addr>::new().build()).execute();
                    let mut defaults = vec![];
                    while let Some(r) = routes.try_next().await.map_err(|e| nl("list the session's routes", e))? {
                        if r.header.destination_prefix_length == 0 {
                            defaults.push(r);
                        }
                    }
                    for r in defaults {
                        h.route().del(r).execute().await.map_err(|e| nl("remove the session's default route", e))?;
                    }
                }
            }
            Ok::<_, Error>(())
        })
    })
}

/// The session's /etc/resolv.conf, written into its own upper layer (the image's is shared, read-only
/// and empty; a session may have changed its own): RESOLVER_ADDR.
fn write_resolv_conf(merged: &Path, id_range: Option<&crate::record::IdRange>) -> Result<()> {
    let root = crate::inroot::Root::open(merged, crate::inroot::Links::InRoot)?.ids_of(id_range);
    let text = format!("# Drums: the session's resolver (drums(7), \"Network boundary\"); none under policy none\nnameserver {RESOLVER_ADDR}\noptions timeout:2 attempts:2\n");
    crate::inroot::replace_file(&root, Path::new("etc/resolv.conf"), text.as_bytes(), 0o644, 0, 0)
}

/// Where a session's programs find the proxy (drums(7), "Network boundary"), in its own upper layer:
/// PROXY_CHROMIUM, which Debian's chromium wrapper and the images' google-chrome source at every start
/// (`--proxy-server`), and PROXY_PROFILE, `export NAME=VALUE` lines read by login shells and by the
/// session's guest for every command it runs. Without a proxy both say nothing (a comment) when they
/// exist, so a session whose proxy is taken away (drums-net set), or a sibling of a checkpoint that had
/// one, does not keep it. Processes already running keep what they
/// started with: a restored sibling's desktop Chromium was started by its checkpoint's session.
pub const PROXY_CHROMIUM: &str = "etc/chromium.d/drums-proxy";
pub const PROXY_PROFILE: &str = "etc/profile.d/drums-proxy.sh";

fn write_proxy_files(merged: &Path, id_range: Option<&crate::record::IdRange>, proxy: Option<&Proxy>) -> Result<()> {
    // Without a proxy, only a session that has the files (an earlier policy's, its checkpoint's) needs
    // them emptied: the common path (no proxy ever) writes nothing. A stat from the host is enough to
    // tell; the writing goes through the session's root.
    if proxy.is_none() && [PROXY_CHROMIUM, PROXY_PROFILE].iter().all(|p| merged.join(p).symlink_metadata().is_err()) {
        return Ok(());
    }
    let root = crate::inroot::Root::open(merged, crate::inroot::Links::InRoot)?.ids_of(id_range);
    let head = "# Drums: the session's upstream proxy (drums(7), \"Network boundary\"); none: nothing below\n";
    let (chromium, profile) = match proxy {
        Some(p) => (
            format!("{head}export CHROMIUM_FLAGS=\"$CHROMIUM_FLAGS --proxy-server={}\"\n", p.url()),
            format!("{head}{}", p.env().iter().map(|(k, v)| format!("export {k}={v}\n")).collect::<String>()),
        ),
        None => (head.to_string(), head.to_string()),
    };
    for (path, text) in [(PROXY_CHROMIUM, chromium), (PROXY_PROFILE, profile)] {
        let path = Path::new(path);
        // An image without Chromium has no /etc/chromium.d: made, so that a Chromium installed later finds it.
        crate::inroot::mkdir_all(&root, path.parent().unwrap(), 0o755, 0, 0)?;
        crate::inroot::replace_file(&root, path, text.as_bytes(), 0o644, 0, 0)?;
    }
    Ok(())
}

/// Undo a session's egress state: kill its resolver, delete its table, rules and routes. Idempotent.
pub fn remove(res: &Resource) -> Result<()> {
    let Resource::Egress { slot, pid_file, .. } = res else {
        return Err(Error::failed("not an egress resource"));
    };
    kill_daemon(pid_file)?;
    if let Some(dir) = pid_file.parent() {
        kill_daemon(&dir.join(super::audit::PID_FILE))?;
    }
    let t = table_name(*slot);
    super::own_nft_transaction(|| super::nft::delete_table(&t))?;
    remove_policy_routes(*slot)
}

/// Delete every rule at the session's preference, whatever it says (iif, from, prohibit), and every route
/// of its routing table; then check that no rule is left there. Idempotent.
fn remove_policy_routes(slot: u32) -> Result<()> {
    use futures::TryStreamExt;
    use rtnetlink::packet_route::{route::RouteAttribute, rule::RuleAttribute};
    let (rt, pref) = (route_table(slot), rule_pref(slot));
    let nl = |what: &str, e: rtnetlink::Error| Error::failed(format!("netlink: {what}: {e}"));
    crate::netlink::run(|h| async move {
        let at_pref = |h: rtnetlink::Handle| async move {
            let mut rules = h.rule().get(rtnetlink::IpVersion::V4).execute();
            let mut found = vec![];
            while let Some(r) = rules.try_next().await.map_err(|e| nl("list rules", e))? {
                if r.attributes.iter().any(|a| *a == RuleAttribute::Priority(pref)) {
                    found.push(r);
                }
            }
            Ok::<_, Error>(found)
        };
        for r in at_pref(h.clone()).await? {
            match h.rule().del(r).execute().await {
                Ok(()) => {}
                // Gone meanwhile (another removal of the same session's state): what was wanted.
                Err(rtnetlink::Error::NetlinkError(m)) if m.raw_code() == -libc::ENOENT => {}
                Err(e) => return Err(nl(&format!("delete a rule at preference {pref}"), e)),
            }
        }
        let mut routes = h.route().get(rtnetlink::RouteMessageBuilder::<Ipv4Addr>::new().build()).execute();
        let mut mine = vec![];
        while let Some(r) = routes.try_next().await.map_err(|e| nl("list routes", e))? {
            if r.attributes.iter().any(|a| *a == RouteAttribute::Table(rt)) {
                mine.push(r);
            }
        }
        for r in mine {
            match h.route().del(r).execute().await {
                Ok(()) => {}
                Err(rtnetlink::Error::NetlinkError(m)) if [-libc::ENOENT, -libc::ESRCH].contains(&m.raw_code()) => {}
                Err(e) => return Err(nl(&format!("delete a route of table {rt}"), e)),
            }
        }
        if !at_pref(h.clone()).await?.is_empty() {
            return Err(Error::failed(format!("rules at preference {pref} remain after removal")));
        }
        Ok(())
    })
}

/// The session's policy routing (see the module's comment): its routing table `route_table(slot)` with
/// the uplink's default route and the session's own network (the resolver's answers go back through the
/// link), and at `rule_pref(slot)` what comes in on the link and the resolver's queries (from the host
/// end's address to port 53) go to that table, else are refused (`prohibit`). One rtnetlink connection,
/// no `ip` process (which cost 3-4 ms a start).
fn policy_routes(slot: u32, uplink: &Uplink, host_if: &str) -> Result<()> {
    use rtnetlink::packet_route::{
        route::RouteScope,
        rule::{RuleAction, RuleAttribute, RulePortRange},
        IpProtocol,
    };
    let (rt, pref) = (route_table(slot), rule_pref(slot));
    let (host, _) = super::slot_addrs(slot);
    let net = Ipv4Addr::from(u32::from(host) - 1);
    let (uplink, host_if) = (uplink.clone(), host_if.to_string());
    let nl = |what: &str, e: rtnetlink::Error| Error::failed(format!("netlink: {what}: {e}"));
    crate::netlink::run(|h| async move {
        let index = |name: String| {
            let h = h.clone();
            async move { super::link_index(&h, &name).await?.ok_or_else(|| Error::env(format!("the link {name} does not exist on this host"))) }
        };
        let up = index(uplink.ifname.clone()).await?;
        let hif = index(host_if.clone()).await?;
        let mut default = rtnetlink::RouteMessageBuilder::<Ipv4Addr>::new().table_id(rt).output_interface(up);
        default = match uplink.gateway {
            Some(g) => default.gateway(g),
            None => default.scope(RouteScope::Link),
        };
        h.route().add(default.build()).replace().execute().await.map_err(|e| nl(&format!("the default route of table {rt}"), e))?;
        let link = rtnetlink::RouteMessageBuilder::<Ipv4Addr>::new()
            .table_id(rt)
            .destination_prefix(net, super::PREFIX_LEN)
            .output_interface(hif)
            .scope(RouteScope::Link)
            .pref_source(host)
            .build();
        h.route().add(link).replace().execute().await.map_err(|e| nl(&format!("the session's network in table {rt}"), e))?;
        // Lookups first, then the refusals, in the order `ip rule` lists them.
        for action in [RuleAction::ToTable, RuleAction::Prohibit] {
            for sel in [None, Some(IpProtocol::Udp), Some(IpProtocol::Tcp)] {
                let mut r = h.rule().add().v4().priority(pref).action(action);
                r = match action {
                    RuleAction::ToTable => r.table_id(rt),
                    _ => r.table_id(0),
                };
                r = match sel {
                    None => r.input_interface(host_if.clone()),
                    Some(p) => {
                        let mut r = r.source_prefix(host, 32);
                        r.message_mut().attributes.push(RuleAttribute::IpProtocol(p));
                        r.message_mut().attributes.push(RuleAttribute::DestinationPortRange(RulePortRange { start: 53, end: 53 }));
                        r
                    }
                };
                r.execute().await.map_err(|e| nl(&format!("a rule at preference {pref}"), e))?;
            }
        }
        Ok::<_, Error>(())
    })
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

/// The session's counters (bytes and connections), read from its table: None when it has no table.
pub fn counters(slot: u32) -> Option<serde_json::Map<String, serde_json::Value>> {
    let o = std::process::Command::new("nft").args(["-j", "list", "counters", "table", "inet", &table_name(slot)]).output().ok()?;
    if !o.status.success() {
        return None;
    }
    counters_by_table(&o.stdout)?.remove(&table_name(slot))
}

/// The counters of every session's policy table, by table name, from one `nft` run: what a reader of
/// many sessions at once uses (the overview page reads every session each second; one `nft` per session
/// cost 15 ms each, most of a 50-session read). None when nft could not list them.
pub fn all_counters() -> Option<std::collections::HashMap<String, serde_json::Map<String, serde_json::Value>>> {
    let o = std::process::Command::new("nft").args(["-j", "list", "counters", "inet"]).output().ok()?;
    if !o.status.success() {
        return None;
    }
    counters_by_table(&o.stdout)
}

/// `nft -j list counters` output: each table's named counters, `NAME` (bytes) and `NAME_packets`.
fn counters_by_table(json: &[u8]) -> Option<std::collections::HashMap<String, serde_json::Map<String, serde_json::Value>>> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    let mut out: std::collections::HashMap<String, serde_json::Map<String, serde_json::Value>> = Default::default();
    for item in v.get("nftables")?.as_array()? {
        if let Some(c) = item.get("counter") {
            let table = c.get("table")?.as_str()?;
            if !table.starts_with(TABLE_PREFIX) {
                continue;
            }
            let m = out.entry(table.to_string()).or_default();
            let name = c.get("name")?.as_str()?.to_string();
            m.insert(format!("{name}_packets"), c.get("packets")?.clone());
            m.insert(name, c.get("bytes")?.clone());
        }
    }
    Some(out)
}

/// Put the live session `s` under `o` (drums-net set): its ledger, root and network namespace as its
/// record names them.
pub fn set(s: &mut Session, o: &Options) -> Result<()> {
    let ns = s.ns.as_ref().ok_or_else(|| Error::bad_field("ns", "missing: the session has no namespaces"))?;
    if !crate::proc::alive(ns.init_pid, ns.init_start_time) {
        return Err(Error::bad_input(format!("session {}: its init is gone", s.id)));
    }
    let netns = crate::nsenter::NsFile::open(ns.init_pid, crate::nsenter::Kind::Net)?;
    crate::net::ensure_firewall()?;
    let ledger = Ledger::open(&s.state_dir)?;
    apply(&ledger, s, o, netns)
}

/// The session's policy and counters now (drums-net show).
pub fn status(s: &Session) -> crate::record::egress::Status {
    let (counters, why) = match (&s.egress, &s.net) {
        (None, _) => (None, Some("policy none: no table, nothing can leave to be counted".to_string())),
        (Some(_), None) => (None, Some("the record has no net section".to_string())),
        (Some(_), Some(n)) => match counters(n.slot) {
            Some(c) => (Some(c), None),
            None => (None, Some(format!("nft could not list the counters of table inet {}", table_name(n.slot)))),
        },
    };
    crate::record::egress::Status {
        drums: crate::record::VERSION,
        record_type: Default::default(),
        session: s.id.clone(),
        policy: s.egress.as_ref().map(|e| e.policy.clone()).unwrap_or_default(),
        uplink: s.egress.as_ref().map(|e| e.uplink.clone()),
        counters,
        counters_null_reason: why,
        at: crate::state::now(),
    }
}

/// Tables named like a session's (`inet drums_net_*`) on this host, by slot.
pub fn live_tables() -> Vec<u32> {
    let Ok(o) = std::process::Command::new("nft").args(["list", "tables", "inet"]).output() else { return vec![] };
    String::from_utf8_lossy(&o.stdout).lines().filter_map(|l| l.trim().strip_prefix("table inet ")?.strip_prefix(TABLE_PREFIX)?.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_policy_table_s_counters_from_one_listing() {
        let listing = br#"{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
            {"counter": {"family": "inet", "name": "bytes_out", "table": "drums_net_3", "handle": 4, "packets": 2, "bytes": 120}},
            {"counter": {"family": "inet", "name": "refused", "table": "drums_net_3", "handle": 5, "packets": 1, "bytes": 60}},
            {"counter": {"family": "inet", "name": "bytes_out", "table": "drums_net_7", "handle": 4, "packets": 0, "bytes": 0}},
            {"counter": {"family": "inet", "name": "other", "table": "someone_else", "handle": 1, "packets": 9, "bytes": 9}}]}"#;
        let all = counters_by_table(listing).unwrap();
        assert_eq!(all.len(), 2, "only Drums' policy tables: {all:?}");
        assert_eq!(all["drums_net_3"]["bytes_out"], 120);
        assert_eq!(all["drums_net_3"]["bytes_out_packets"], 2);
        assert_eq!(all["drums_net_3"]["refused_packets"], 1);
        assert_eq!(all["drums_net_7"]["bytes_out"], 0);
    }

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
        let t = table_text(3, &p, "up0", &[], None, None);
        assert!(t.contains("iifname \"drums3\" jump egress"), "{t}");
        assert!(t.contains("th sport 53 log group 40003") && t.contains("timeout 60s"), "{t}");
        assert!(!table_text(3, &Policy::Internet, "up0", &[], None, None).contains("log group 4"));
        assert!(!t.contains("limit rate over"), "{t}");
        let t = table_text(3, &Policy::Internet, "up0", &[], Some(8 << 20), None);
        assert!(t.contains("iifname \"drums3\" limit rate over 8388608 bytes/second burst 2097152 bytes counter name rate_dropped drop"), "{t}");
        assert!(t.contains("oifname \"drums3\" limit rate over 8388608 bytes/second burst 2097152 bytes"), "{t}");
    }
    #[test]
    fn the_table_admits_the_proxy_before_it_refuses() {
        let p = Proxy::parse("http://10.0.0.10:3128/").unwrap().unwrap();
        let t = table_text(3, &Policy::parse("allow:example.org").unwrap(), "up0", &[], None, Some(&p));
        let (proxy_at, denied_at) = (t.find("ip daddr 10.0.0.10 tcp dport 3128 meta mark set").expect(&t), t.find("ip daddr @denied goto refuse").unwrap());
        assert!(proxy_at < denied_at, "{t}");
    }
}
