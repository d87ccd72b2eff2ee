//! The one way Drums talks rtnetlink: a current-thread tokio runtime of its own and one connection, per
//! call. The tools are synchronous and a call makes a handful of requests, so a short-lived runtime is
//! enough; being current-thread, it runs on the calling thread, which keeps whatever network namespace
//! that thread joined (net::configure_session_end runs it on a thread inside the session's).

use std::future::Future;

/// The runtime or the netlink socket could not be made.
#[derive(Debug)]
pub struct Unavailable {
    what: &'static str,
    source: std::io::Error,
}

impl From<Unavailable> for crate::Error {
    fn from(u: Unavailable) -> crate::Error {
        crate::Error::failed(format!("{}: {}", u.what, u.source))
    }
}

impl From<Unavailable> for std::io::Error {
    fn from(u: Unavailable) -> std::io::Error {
        u.source
    }
}

/// Run `requests` with a handle on a fresh rtnetlink connection, on the calling thread, and wait for it.
pub fn run<T, E, F, Fut>(requests: F) -> Result<T, E>
where
    E: From<Unavailable>,
    F: FnOnce(rtnetlink::Handle) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|source| Unavailable { what: "tokio", source })?;
    rt.block_on(async {
        let (conn, handle, _) = rtnetlink::new_connection().map_err(|source| Unavailable { what: "netlink socket", source })?;
        let task = tokio::spawn(conn);
        let r = requests(handle).await;
        task.abort();
        r
    })
}
