//! Finding and running CRIU.

use std::path::PathBuf;

/// The private CRIU that pipelines/install-criu.sh installs.
pub const DEFAULT_PRIVATE: &str = "/opt/drums/criu/bin/criu";

/// CRIU: $DRUMS_CRIU, else the private install when present, else `criu` on PATH.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("DRUMS_CRIU") {
        return p.into();
    }
    if std::path::Path::new(DEFAULT_PRIVATE).exists() {
        return DEFAULT_PRIVATE.into();
    }
    "criu".into()
}

/// How long a CRIU call may take: $DRUMS_CRIU_TIMEOUT seconds, default 60. CRIU 4.2 can hang instead of
/// failing (a veth name that already exists, a task that vanished mid-restore), so every call has a limit.
pub fn timeout() -> std::time::Duration {
    let s = std::env::var("DRUMS_CRIU_TIMEOUT").ok().and_then(|v| v.parse::<f64>().ok()).filter(|s| *s > 0.0).unwrap_or(60.0);
    std::time::Duration::from_secs_f64(s)
}

/// Run a prepared CRIU command to its end, or kill it when it exceeds `timeout()`. Its output goes to
/// its log file (-o), so nothing is read from its pipes.
pub fn run(cmd: &mut std::process::Command) -> crate::Result<std::process::ExitStatus> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    // CRIU must not outlive the tool that runs it unledgered: if the tool dies, so does the call in flight.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| crate::Error::env(format!("run CRIU ({}): {e}", binary().display())))?;
    let limit = timeout();
    let t0 = std::time::Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(st)) => return Ok(st),
            Ok(None) if t0.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(crate::Error::failed(format!("CRIU did not finish within {limit:?} and was killed (DRUMS_CRIU_TIMEOUT)")));
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(2)),
            Err(e) => return Err(crate::Error::failed(format!("wait for CRIU: {e}"))),
        }
    }
}
