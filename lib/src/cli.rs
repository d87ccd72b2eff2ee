//! What makes every tool behave alike: argument parsing, reading and writing records, errors on stderr
//! as one JSON object, exit codes, progress lines.

use crate::error::{exit, Error, Result};
use serde::Serialize;
use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

/// Parse arguments, run the tool, and turn its result into an exit code. `--help` and `--version` go to
/// stdout and exit 0; a usage error is a JSON error on stderr with exit 2.
pub fn run<C: clap::Parser>(tool: &str, body: impl FnOnce(C) -> Result<()>) -> ! {
    let code = match C::try_parse() {
        Ok(_) if crate::state::timeout_scale().is_err() => report(tool, &crate::state::timeout_scale().unwrap_err()),
        Ok(args) => match body(args) {
            Ok(()) => exit::OK,
            Err(e) => report(tool, &e),
        },
        Err(e) => match e.kind() {
            clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                // Not print!: it panics when stdout is a closed pipe (`drums-ns --help | head -1`).
                let mut out = std::io::stdout().lock();
                let _ = write!(out, "{e}").and_then(|_| out.flush());
                exit::OK
            }
            _ => report(tool, &Error::Usage(e.to_string().trim().replace('\n', " "))),
        },
    };
    std::process::exit(code)
}

/// Print an error as one JSON line on stderr; returns its exit code.
pub fn report(tool: &str, e: &Error) -> i32 {
    let line = serde_json::to_string(&e.to_record(tool)).unwrap_or_else(|_| "{}".into());
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    e.exit_code()
}

/// Read JSON lines from a file argument or stdin ("-" or None), skipping blank lines.
pub fn read_lines(input: Option<&Path>) -> Result<Vec<String>> {
    match input {
        Some(p) if p != Path::new("-") => {
            let f = std::fs::File::open(p).map_err(|e| input_error("open", &p.display().to_string(), e))?;
            lines_of(std::io::BufReader::new(f), &p.display().to_string())
        }
        _ => lines_of(std::io::stdin().lock(), "stdin"),
    }
}

fn lines_of(r: impl BufRead, name: &str) -> Result<Vec<String>> {
    let mut lines = vec![];
    for (i, l) in r.lines().enumerate() {
        let l = l.map_err(|e| input_error("read", &format!("{name}: line {}", i + 1), e))?;
        if !l.trim().is_empty() {
            lines.push(l);
        }
    }
    Ok(lines)
}

/// An input that does not exist, is a directory or is not text is the caller's mistake (bad input, and
/// nothing was done); any other I/O error is a failure of this machine.
fn input_error(what: &str, name: &str, e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::bad_input(format!("{name}: no such input file")),
        std::io::ErrorKind::InvalidData => Error::bad_input(format!("{name}: not UTF-8 text (records are JSON Lines)")),
        _ if e.raw_os_error() == Some(libc::EISDIR) => Error::bad_input(format!("{name}: a directory, not a file of records")),
        _ => Error::io(what, name, e),
    }
}

/// Read session records, refusing the whole input if any line is bad (nothing is acted on).
pub fn read_sessions(input: Option<&Path>) -> Result<Vec<crate::Session>> {
    let lines = read_lines(input)?;
    if lines.is_empty() {
        return Err(Error::bad_input("no record on input (expected one session record per line)"));
    }
    lines.iter().enumerate().map(|(i, l)| crate::Session::parse(l).map_err(|e| at_line(e, i + 1))).collect()
}

/// Read exactly one session record.
pub fn read_session(input: Option<&Path>) -> Result<crate::Session> {
    let mut v = read_sessions(input)?;
    if v.len() != 1 {
        return Err(Error::bad_input(format!("{} records on input, this command takes exactly one", v.len())));
    }
    Ok(v.remove(0))
}

fn at_line(e: Error, n: usize) -> Error {
    match e {
        Error::BadInput { msg, field } => Error::BadInput { msg: format!("line {n}: {msg}"), field },
        other => other,
    }
}

/// Write one record as one line with a single write and a flush: a record that did not reach stdout
/// (a closed pipe) is a failure.
pub fn emit(rec: &impl Serialize) -> Result<()> {
    let mut line = serde_json::to_vec(rec).map_err(|e| Error::failed(format!("serialize record: {e}")))?;
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    out.write_all(&line).and_then(|_| out.flush()).map_err(|e| Error::failed(format!("write record to stdout: {e}")))
}

/// A human-friendly progress line on stderr, only when stderr is a terminal.
pub fn progress(tool: &str, msg: &str) {
    let err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err.lock(), "\r\x1b[K{tool}: {msg}");
    }
}
pub fn progress_done() {
    let err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err.lock(), "\r\x1b[K");
    }
}

/// Refuse to run without root: every Drums tool that touches the kernel needs it.
pub fn require_root() -> Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        return Err(Error::env("this tool needs root (namespaces, mounts, cgroups)"));
    }
    Ok(())
}

/// The clap `long_version` every tool shows.
pub const VERSION_TEXT: &str = concat!(env!("CARGO_PKG_VERSION"), " (record format 1)");

/// The top of the command line of a tool that is one of its subcommands (drums-ns, drums-cgroup, ...):
/// `pub struct Args { pub cmd: Cmd }`, named as given and versioned as every tool is, with the `///` text
/// given as the tool's description. The tool's `cli.rs` keeps what is its own, the name, the description
/// and its `Cmd` enum; this holds the part that is the same in each.
///
/// ```ignore
/// drums::subcommand_args! {
///     /// What the tool does (the first line of --help and the man page's NAME).
///     "drums-NAME"
/// }
/// ```
#[macro_export]
macro_rules! subcommand_args {
    ($(#[$($attr:tt)*])* $name:literal) => {
        $(#[$($attr)*])*
        #[derive(clap::Parser)]
        #[command(name = $name, version = $crate::cli::VERSION_TEXT)]
        pub struct Args {
            // Required: without one the tool is a usage error at once, before reading anything (a terminal
            // on stdin would otherwise be waited on for a record).
            #[command(subcommand)]
            pub cmd: Cmd,
        }
    };
}

/// The one byte-size grammar of every Drums option: a non-negative number, integer or decimal, with an
/// optional unit K, M, G or T (powers of 1024, either case), which may be followed by `i`, `B` or `iB`:
/// `4096`, `512K`, `64M`, `1.5G`, `4GB`, `4GiB`, `1T`. A decimal size is rounded to the nearest byte. Documented in
/// drums(7), "Sizes and durations"; each size option's help points there.
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let bad = || format!("`{s}` is not a size (examples: 4096, 512M, 4G, 4GiB)");
    let unitless = t.trim_end_matches(['B', 'b']).trim_end_matches('i');
    let (num, mult) = match unitless.chars().last() {
        Some('K') | Some('k') => (&unitless[..unitless.len() - 1], 1u64 << 10),
        Some('M') | Some('m') => (&unitless[..unitless.len() - 1], 1 << 20),
        Some('G') | Some('g') => (&unitless[..unitless.len() - 1], 1 << 30),
        Some('T') | Some('t') => (&unitless[..unitless.len() - 1], 1 << 40),
        _ => (unitless, 1),
    };
    let num = num.trim();
    // Integers exactly (a float would lose bytes above 2^53); decimals through f64.
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(bad);
    }
    let n: f64 = num.parse().map_err(|_| bad())?;
    let v = n * mult as f64;
    if !(n.is_finite() && n >= 0.0 && v < u64::MAX as f64) {
        return Err(bad());
    }
    Ok(v.round() as u64)
}

/// The one duration grammar of every Drums option: a non-negative number, integer or decimal, with an
/// optional unit `ms`, `s` or `m` (none: seconds): `200ms`, `1s`, `0.5`, `2m`, `0`. Documented in
/// drums(7), "Sizes and durations". Zero is a duration (a grace period of none, a wait of none); the
/// options where it would mean a busy loop take `parse_positive_duration`, the ones a record keeps in
/// whole seconds take `parse_seconds`: the same grammar with a narrower range.
pub fn parse_duration(s: &str) -> std::result::Result<std::time::Duration, String> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else {
        (t, 1.0)
    };
    let bad = || format!("`{s}` is not a duration (examples: 1s, 200ms, 0.5, 2m)");
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    if !(v.is_finite() && v >= 0.0) {
        return Err(bad());
    }
    std::time::Duration::try_from_secs_f64(v * mult).map_err(|_| bad())
}

/// `parse_duration`, refusing zero: for periods between polls and samples.
pub fn parse_positive_duration(s: &str) -> std::result::Result<std::time::Duration, String> {
    parse_duration(s).and_then(|d| if d.is_zero() { Err(format!("`{s}`: this duration must be more than zero")) } else { Ok(d) })
}

/// `parse_duration` as whole seconds, for the figures records keep in seconds (`ttl_s`): `90`, `90s`,
/// `2m`; `1.5s` is refused rather than rounded.
pub fn parse_seconds(s: &str) -> std::result::Result<u64, String> {
    parse_duration(s).and_then(|d| if d.subsec_nanos() == 0 { Ok(d.as_secs()) } else { Err(format!("`{s}`: whole seconds here (examples: 90, 90s, 2m)")) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit_of(r: Result<Vec<String>>) -> i32 {
        r.expect_err("an error").exit_code()
    }

    #[test]
    fn input_that_is_not_text_or_not_there_is_bad_input() {
        assert_eq!(exit_of(lines_of(&b"{\"drums\":1}\n\xff\xfe\n"[..], "stdin")), exit::BAD_INPUT);
        assert_eq!(exit_of(read_lines(Some(Path::new("/nonexistent/records.jsonl")))), exit::BAD_INPUT);
        assert_eq!(exit_of(read_lines(Some(Path::new("/")))), exit::BAD_INPUT);
        assert_eq!(lines_of(&b"a\n\n  \nb\n"[..], "stdin").unwrap(), vec!["a", "b"], "blank lines are skipped");
    }

    #[test]
    fn sizes_and_durations() {
        use std::time::Duration;
        assert_eq!(parse_bytes("4G").unwrap(), 4294967296);
        assert_eq!(parse_bytes("4GiB").unwrap(), 4294967296);
        assert_eq!(parse_bytes("4gb").unwrap(), 4294967296);
        assert_eq!(parse_bytes("64M").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("512k").unwrap(), 512 << 10);
        assert_eq!(parse_bytes("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("4096B").unwrap(), 4096);
        assert_eq!(parse_bytes("18446744073709551615").unwrap(), u64::MAX);
        for bad in ["lots", "", "G", "-1", "-1G", "99999999999T", "1e400", "NaN"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_duration("200ms").unwrap(), Duration::from_millis(200));
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("0s").unwrap(), Duration::ZERO);
        for bad in ["", "s", "-1s", "1h", "NaN", "inf", "1e30"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_positive_duration("0ms").is_err());
        assert_eq!(parse_positive_duration("20ms").unwrap(), Duration::from_millis(20));
        assert_eq!(parse_seconds("2m").unwrap(), 120);
        assert_eq!(parse_seconds("60").unwrap(), 60);
        assert_eq!(parse_seconds("0").unwrap(), 0);
        assert!(parse_seconds("1.5s").is_err());
    }
}

/// A session's network options, the same in every tool that makes sessions (drums-ns create,
/// drums-restore, drums-pool fill): drums(7), "Network boundary".
#[derive(clap::Args, Debug, Clone, Default)]
pub struct NetArgs {
    /// Network policy: none (nothing leaves the session), internet, or allow:ENTRY,... with ENTRY a
    /// name, *.NAME (its subdomains only) or an IPv4 CIDR. Default: $DRUMS_NET, else none.
    ///
    /// Whatever the policy, the host's addresses, other sessions, RFC 1918, 100.64.0.0/10,
    /// 169.254.0.0/16, multicast and 240.0.0.0/4 stay refused (unless --net-except names them), and
    /// there is no IPv6. A refused connection fails at once. drums(7), "Network boundary".
    #[arg(long = "net", value_name = "POLICY")]
    pub net: Option<String>,
    /// The host interface (and gateway) sessions leave through, IF or IF:GATEWAY. Default:
    /// $DRUMS_UPLINK, else the host's IPv4 default route when the policy is applied.
    ///
    /// A session's packets are routed only through it: with the uplink gone they are refused, never
    /// routed another way.
    #[arg(long, value_name = "UPLINK")]
    pub uplink: Option<String>,
    /// An IPv4 network excepted from the always-refused ranges (a package mirror on the LAN, say);
    /// repeatable or comma-separated. Default: $DRUMS_NET_EXCEPT.
    #[arg(long = "net-except", value_name = "CIDR")]
    pub net_except: Vec<String>,
    /// Upstream DNS server of the session's resolver; repeatable or comma-separated. Default:
    /// $DRUMS_NET_DNS, else the host's /etc/resolv.conf's IPv4 nameservers.
    #[arg(long = "dns", value_name = "IP")]
    pub dns: Vec<String>,
    /// Bandwidth cap of the session under a policy other than none, each way: bytes a second, with K, M
    /// or G for 1024, 1024^2 or 1024^3 (8M: 8 MiB/s out and 8 MiB/s in); none: no cap. Default:
    /// $DRUMS_NET_RATE, else none.
    ///
    /// What goes beyond it is dropped (TCP slows down to it); connections the host opens into the session
    /// are not counted against it.
    #[arg(long = "net-rate", value_name = "RATE")]
    pub net_rate: Option<String>,
    /// Upstream HTTP proxy of the session, http://IPV4:PORT (https goes through it with CONNECT); none:
    /// no proxy. Needs a policy other than none. Default: $DRUMS_NET_PROXY, else none.
    ///
    /// The session's table lets its connections to that address and port through, even into an
    /// always-refused range (a proxy box on the LAN); Chromium started in the session afterwards gets
    /// --proxy-server, and the session's commands (drums-ns exec, the guest's, login shells) http_proxy
    /// and https_proxy. What the proxy fetches is its own decision: an allow list limits only direct
    /// connections.
    #[arg(long = "proxy", value_name = "URL")]
    pub proxy: Option<String>,
}

impl NetArgs {
    pub fn options(&self) -> Result<crate::net::egress::Options> {
        // A policy, uplink or network that does not parse is a usage error, found before anything is read.
        crate::net::egress::Options::from_args(self.net.as_deref(), self.uplink.as_deref(), &self.net_except, &self.dns, self.net_rate.as_deref(), self.proxy.as_deref()).map_err(|e| Error::Usage(e.to_string()))
    }
}

/// Whose ids a new session runs with, the same in every tool that makes sessions (drums-overlay create,
/// drums-restore, drums-pool fill): drums(7), "Its own user namespace". A user namespace of its own is
/// the default; `--host-ids` is the opt-out a session to be checkpointed needs (drums-ckpt refuses a
/// session in its own user namespace).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct IdentityArgs {
    /// Run the session with host ids, in the host's user namespace, as sessions were before user
    /// namespaces were the default: session root is host uid 0 (with the reduced capability set) and
    /// `user` host uid 1000. What a session to be checkpointed needs: drums-ckpt refuses a session in a
    /// user namespace of its own (drums(7), "Its own user namespace").
    ///
    /// Without it (the default) the session takes a host id range of 65536 ids (written to its ledger
    /// first, record field id_range; the band is $DRUMS_ID_BAND) and runs in a user namespace that maps
    /// ids 0-65535 inside to it: root and `user` inside are unprivileged host ids and the kernel's per-user
    /// counts (inotify, message queues, pending signals, processes) are the session's own. The layers are
    /// shown through idmapped mounts; nothing is copied or chowned.
    #[arg(long, conflicts_with = "userns")]
    pub host_ids: bool,
    /// A user namespace of its own with a host id range of its own: the default, accepted to say so
    /// explicitly.
    #[arg(long)]
    pub userns: bool,
}

impl IdentityArgs {
    /// Whether the session gets a user namespace of its own: unless --host-ids.
    pub fn userns(&self) -> bool {
        !self.host_ids
    }
}
