//! Running what a harness sends: OSWorld's command forms (a list, or a string split like Python's
//! `shlex.split`, or a shell string), as the desktop user, with a deadline.

use super::user::Account;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// What a child produced. `code` follows Python's `returncode`: the exit status, or minus the signal
/// that killed it. Each stream holds at most `Spec::max_output` bytes; what came beyond is counted in
/// `*_dropped`.
#[derive(Debug)]
pub struct Outcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_dropped: u64,
    pub stderr_dropped: u64,
    pub code: i32,
}

#[derive(Debug)]
pub enum RunError {
    /// The program could not be started (Python's FileNotFoundError and friends); the text is the errno's.
    Spawn(std::io::Error),
    /// The deadline passed; the child's process group was killed.
    Timeout,
}

/// How a child is started.
pub struct Spec<'a> {
    pub argv: Vec<String>,
    pub acct: &'a Account,
    pub display: &'a str,
    pub cwd: Option<PathBuf>,
    /// Send stderr into the stdout pipe (the bash-script endpoint merges them).
    pub merge_stderr: bool,
    pub timeout: Duration,
    /// Most bytes kept of each stream (drums-guest --max-output).
    pub max_output: usize,
}

/// Once the direct child has exited, how long to keep reading from pipes a background grandchild may hold
/// open. Python's `subprocess.run` waits for end-of-file until its timeout; answering sooner keeps
/// `cmd &` from costing the whole 120 s.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(2);

/// How long a killed child is waited for before the answer goes out without its reaping.
pub const KILL_WAIT: Duration = Duration::from_secs(5);

/// Split a command string as Python's `shlex.split` does (POSIX mode, comments off).
pub fn shlex_split(s: &str) -> Result<Vec<String>, String> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("No closing quotation".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("No closing quotation".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("No closing quotation".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push(c),
                    None => return Err("No escaped character".into()),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

/// The environment a child gets: the guest's own (D-Bus and AT-SPI addresses set by drums-desktop), with
/// the user's identity and the session's display.
fn child_env(acct: &Account, display: &str) -> Vec<(String, String)> {
    let mut env = vec![
        ("HOME".into(), acct.home.display().to_string()),
        ("USER".into(), acct.name.clone()),
        ("LOGNAME".into(), acct.name.clone()),
        ("SHELL".into(), acct.shell.clone()),
        ("DISPLAY".into(), display.to_string()),
    ];
    // GSettings (gsettings, and GNOME applications' settings) keeps its values through dconf, which needs
    // a session bus of the user's own; a guest acting for another account (root, with --user) has no bus of that
    // user's. GLib's keyfile back end keeps them in
    // ~/.config/glib-2.0/settings/keyfile instead, so that what one process sets (OSWorld's
    // /setup/change_wallpaper, a task's `gsettings set`) the next one reads.
    if acct.is_other() && std::env::var_os("GSETTINGS_BACKEND").is_none() {
        env.push(("GSETTINGS_BACKEND".into(), "keyfile".into()));
    }
    env.extend(proxy_env(&std::fs::read_to_string(PROXY_PROFILE).unwrap_or_default()));
    env
}

/// The session's upstream proxy, written by the host when a policy names one (drums(7), "Network
/// boundary"): read again for every command, since a live session's proxy can change (drums-net set) and
/// a restored sibling's differs from its checkpoint's.
const PROXY_PROFILE: &str = "/etc/profile.d/drums-proxy.sh";

/// The `export NAME=VALUE` lines of PROXY_PROFILE whose NAME is a proxy variable; anything else in the file
/// (which the session may have changed) is ignored.
fn proxy_env(text: &str) -> Vec<(String, String)> {
    const NAMES: [&str; 6] = ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY"];
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("export ")?.split_once('='))
        .filter(|(k, v)| NAMES.contains(k) && !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic() && b != b'\'' && b != b'"'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = std::io::pipe()?;
    Ok((r.into(), w.into()))
}

/// A command ready to spawn as the account, in its own process group (so a deadline can kill all of it).
fn command(argv: &[String], acct: &Account, display: &str, cwd: Option<PathBuf>, new_session: bool) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]).stdin(Stdio::null());
    for (k, v) in child_env(acct, display) {
        cmd.env(k, v);
    }
    // The guest's XDG_RUNTIME_DIR is root's (mode 0700): a program of another user would only fail on it.
    if acct.is_other() {
        cmd.env_remove("XDG_RUNTIME_DIR");
    }
    let dir = cwd.unwrap_or_else(|| acct.home.clone());
    cmd.current_dir(if dir.is_dir() { dir } else { PathBuf::from("/") });
    let switch = acct.is_other();
    let (uid, gid) = (acct.uid, acct.gid);
    let groups: Vec<libc::gid_t> = acct.groups.clone();
    // The groups were read from the session's /etc/group before forking: between fork and exec the child
    // only makes system calls (no NSS lookups, no allocation).
    unsafe {
        cmd.pre_exec(move || {
            if new_session {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::setpgid(0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if switch && (libc::setgroups(groups.len(), groups.as_ptr()) < 0 || libc::setgid(gid) < 0 || libc::setuid(uid) < 0) {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// A stream's first bytes, and how many more came.
#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}
type Shared = std::sync::Arc<std::sync::Mutex<Captured>>;

/// Read a pipe to its end into a buffer shared with the caller, who may stop waiting and keep what came.
/// Past `max` bytes the rest is read and dropped, not left in the pipe: a child blocked on a full pipe
/// would never exit, and OSWorld's server reads a command's output to its end too.
async fn read_all(fd: OwnedFd, into: Shared, max: usize) {
    if let Ok(mut rx) = tokio::net::unix::pipe::Receiver::from_owned_fd(fd) {
        let mut chunk = [0u8; 16384];
        loop {
            match rx.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let mut c = into.lock().unwrap_or_else(|p| p.into_inner());
                    let keep = n.min(max.saturating_sub(c.kept.len()));
                    c.kept.extend_from_slice(&chunk[..keep]);
                    c.dropped += (n - keep) as u64;
                }
            }
        }
    }
}

fn code_of(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code().unwrap_or_else(|| -st.signal().unwrap_or(0))
}

/// Run to completion (or the deadline) and collect the output.
pub async fn run(spec: Spec<'_>) -> Result<Outcome, RunError> {
    let (out_r, out_w) = pipe().map_err(RunError::Spawn)?;
    let (err_r, err_w) = if spec.merge_stderr {
        (None, out_w.try_clone().map_err(RunError::Spawn)?)
    } else {
        let (r, w) = pipe().map_err(RunError::Spawn)?;
        (Some(r), w)
    };
    let mut cmd = command(&spec.argv, spec.acct, spec.display, spec.cwd, false);
    cmd.stdout(Stdio::from(out_w)).stderr(Stdio::from(err_w));
    let mut child = cmd.spawn().map_err(RunError::Spawn)?;
    // The Command holds the write ends: drop it, or end-of-file never comes.
    drop(cmd);
    let pgid = child.id().map(|p| p as i32);

    let (out_buf, err_buf) = (Shared::default(), Shared::default());
    let out_task = tokio::spawn(read_all(out_r, out_buf.clone(), spec.max_output));
    let err_task = err_r.map(|r| tokio::spawn(read_all(r, err_buf.clone(), spec.max_output)));
    let deadline = tokio::time::Instant::now() + spec.timeout;

    let status = match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(Ok(st)) => st,
        Ok(Err(e)) => return Err(RunError::Spawn(e)),
        Err(_) => {
            kill_group(pgid);
            // The child itself too, should it have left its group; reaped if it goes in KILL_WAIT (a
            // process in uninterruptible sleep dies only when that ends: tokio reaps it later).
            let _ = child.start_kill();
            let _ = tokio::time::timeout(KILL_WAIT, child.wait()).await;
            return Err(RunError::Timeout);
        }
    };
    let drain = std::cmp::min(deadline, tokio::time::Instant::now() + DRAIN_AFTER_EXIT);
    finish(out_task, drain).await;
    if let Some(t) = err_task {
        finish(t, drain).await;
    }
    let take = |b: Shared| std::mem::take(&mut *b.lock().unwrap_or_else(|p| p.into_inner()));
    let (out, err) = (take(out_buf), take(err_buf));
    Ok(Outcome { stdout: out.kept, stderr: err.kept, stdout_dropped: out.dropped, stderr_dropped: err.dropped, code: code_of(status) })
}

/// Wait for a reader until `until`; past it a grandchild still holds the pipe, and the answer goes out
/// with what was read so far (the grandchild lives on, its later output unread).
async fn finish(mut t: tokio::task::JoinHandle<()>, until: tokio::time::Instant) {
    if tokio::time::timeout_at(until, &mut t).await.is_err() {
        t.abort();
    }
}

fn kill_group(pgid: Option<i32>) {
    if let Some(p) = pgid.filter(|p| *p > 0) {
        unsafe {
            libc::kill(-p, libc::SIGKILL);
        }
    }
}

/// A program started detached in its own session (as `launch`) and kept watched: its exit status can be
/// polled, its standard error is captured (the first `WATCH_STDERR` bytes), and its standard input is a
/// pipe when asked for. For openers whose failure must be answered at once (/setup/open_file) and for
/// the recorder (/start_recording, stopped by writing `q` to its standard input).
pub struct Watched {
    pub child: tokio::process::Child,
    pub stdin: Option<tokio::process::ChildStdin>,
    stderr: Shared,
}

/// Enough of a program's standard error to say why it failed.
const WATCH_STDERR: usize = 64 << 10;

impl Watched {
    pub fn stderr_text(&self) -> String {
        let c = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&c.kept).trim().to_string()
    }
}

pub fn spawn_watched(argv: &[String], acct: &Account, display: &str, with_stdin: bool) -> std::io::Result<Watched> {
    let (err_r, err_w) = pipe()?;
    let mut cmd = command(argv, acct, display, None, true);
    cmd.stdout(Stdio::null()).stderr(Stdio::from(err_w));
    if with_stdin {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn()?;
    drop(cmd);
    let stderr = Shared::default();
    // The reader ends when the last holder of the pipe (the program, or what it started) closes it.
    tokio::spawn(read_all(err_r, stderr.clone(), WATCH_STDERR));
    let stdin = child.stdin.take();
    Ok(Watched { child, stdin, stderr })
}

/// Start a program and leave it running, detached in its own session, output on the guest's log.
pub fn launch(argv: &[String], acct: &Account, display: &str) -> std::io::Result<u32> {
    let mut cmd = command(argv, acct, display, None, true);
    cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
    let child = cmd.spawn()?;
    // Dropping a tokio Child leaves the process running; tokio reaps it when it exits.
    Ok(child.id().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::shlex_split;

    #[test]
    fn a_desktop_user_gets_the_keyfile_settings_back_end() {
        let user = super::Account { name: "user".into(), uid: 1000, gid: 1000, home: "/home/user".into(), shell: "/bin/bash".into(), groups: vec![1000] };
        let env = super::child_env(&user, ":5");
        if std::env::var_os("GSETTINGS_BACKEND").is_none() {
            assert!(env.contains(&("GSETTINGS_BACKEND".into(), "keyfile".into())), "{env:?}");
        }
        assert!(env.contains(&("DISPLAY".into(), ":5".into())));
    }

    #[test]
    fn the_proxy_profile_gives_only_proxy_variables() {
        let text = "# Drums\nexport http_proxy=http://10.0.0.10:3128\nexport no_proxy=localhost,127.0.0.1,::1\nexport LD_PRELOAD=/x.so\nexport https_proxy='http://a b'\nhttps_proxy=http://x:1\n";
        assert_eq!(
            super::proxy_env(text),
            vec![("http_proxy".to_string(), "http://10.0.0.10:3128".to_string()), ("no_proxy".to_string(), "localhost,127.0.0.1,::1".to_string())]
        );
        assert!(super::proxy_env("# Drums: none\n").is_empty());
    }

    #[test]
    fn splits_like_python_shlex() {
        let v = |s: &str| shlex_split(s).unwrap();
        assert_eq!(v("python -c \"import pyautogui; pyautogui.click(960, 540)\""), ["python", "-c", "import pyautogui; pyautogui.click(960, 540)"]);
        assert_eq!(v("  a   'b c'd \\ e  "), ["a", "b cd", " e"]);
        assert_eq!(v(r#""a\"b\n" ''"#), [r#"a"b\n"#, ""]);
        assert_eq!(v(""), Vec::<String>::new());
        assert!(shlex_split("'open").is_err());
        assert!(shlex_split("x\\").is_err());
    }
}
