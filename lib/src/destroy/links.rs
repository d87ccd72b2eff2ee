//! Network links of the host's network namespace, through crate::netlink (the sweep runs there, so no
//! thread ever changes namespace).

use futures::stream::TryStreamExt;
use rtnetlink::packet_route::link::{InfoKind, LinkAttribute, LinkInfo, LinkMessage};
use std::io;

/// One link of the host's network namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// `veth`, `dummy`, ... when the kernel says.
    pub kind: Option<String>,
    /// The other end of a veth pair, when it is in this namespace too (no link-netnsid).
    pub peer_here: Option<u32>,
}

fn to_io(e: rtnetlink::Error) -> io::Error {
    match e {
        rtnetlink::Error::NetlinkError(m) => m.to_io(),
        other => io::Error::other(other.to_string()),
    }
}

fn link_of(m: &LinkMessage) -> Option<Link> {
    let mut name = None;
    let mut kind = None;
    let mut peer = None;
    let mut peer_elsewhere = false;
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => name = Some(n.clone()),
            LinkAttribute::Link(i) => peer = Some(*i),
            LinkAttribute::LinkNetNsId(_) => peer_elsewhere = true,
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    if let LinkInfo::Kind(k) = i {
                        kind = Some(match k {
                            InfoKind::Veth => "veth".to_string(),
                            other => format!("{other:?}").to_lowercase(),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    let peer_here = if peer_elsewhere { None } else { peer.filter(|p| *p != 0 && *p != m.header.index) };
    Some(Link { index: m.header.index, name: name?, kind, peer_here })
}

/// Every link of the host's network namespace.
pub fn list() -> io::Result<Vec<Link>> {
    crate::netlink::run(|handle| async move {
        let msgs: Vec<LinkMessage> = handle.link().get().execute().try_collect().await.map_err(to_io)?;
        Ok(msgs.iter().filter_map(link_of).collect())
    })
}

/// Delete the link called `name`. Ok(false): there was no such link (already gone).
/// Deleting one end of a veth pair deletes both.
pub fn delete(name: &str) -> io::Result<bool> {
    crate::netlink::run(|handle| async move {
        let found: Vec<LinkMessage> = match handle.link().get().match_name(name.to_string()).execute().try_collect().await {
            Ok(v) => v,
            Err(e) => {
                let e = to_io(e);
                return if e.raw_os_error() == Some(libc::ENODEV) { Ok(false) } else { Err(e) };
            }
        };
        let Some(m) = found.first() else { return Ok(false) };
        match handle.link().del(m.header.index).execute().await.map_err(to_io) {
            Ok(()) => Ok(true),
            // The kernel removed it meanwhile (its peer's namespace went away).
            Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(false),
            Err(e) => Err(e),
        }
    })
}
