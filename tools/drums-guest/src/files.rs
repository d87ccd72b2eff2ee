//! Paths a request names, and the file endpoints' work: every file operation runs on a blocking thread
//! with the desktop user's file-system identity, so permissions and new files' owners are the user's.

use super::user::{with_fs_identity, Account};
use serde_json::{json, Value};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Kernel interfaces, not the session's files: /proc/PID/root, /proc/PID/fd/N and friends name objects by
/// reference and can reach outside the session's own tree (a descriptor inherited from the host).
const NOT_SESSION_FILES: &[&str] = &["/proc", "/sys", "/dev"];

/// Expand `~`, `$VAR` and `${VAR}` (as Python's expanduser + expandvars do; HOME, USER and LOGNAME are the
/// desktop user's), then require an absolute path in the session's own file tree. The error is the
/// answer's message.
pub fn session_path(acct: &Account, raw: &str) -> Result<PathBuf, String> {
    if raw.is_empty() {
        return Err("empty path".into());
    }
    if raw.contains('\0') {
        return Err("path contains a NUL byte".into());
    }
    let expanded = expand_vars(acct, &acct.expand_tilde(raw));
    let p = Path::new(&expanded);
    if !p.is_absolute() {
        return Err(format!("{expanded}: not an absolute path (relative to what? give /... or ~/...)"));
    }
    let norm = normalize(p);
    refuse_outside(&norm, &expanded)?;
    // A symbolic link may lead where the lexical path does not: check where it resolves too.
    if let Ok(real) = std::fs::canonicalize(&norm) {
        refuse_outside(&real, &expanded)?;
    } else if let Some(real_parent) = norm.parent().and_then(|d| std::fs::canonicalize(d).ok()) {
        refuse_outside(&real_parent, &expanded)?;
    }
    Ok(norm)
}

fn refuse_outside(p: &Path, shown: &str) -> Result<(), String> {
    for k in NOT_SESSION_FILES {
        if p.starts_with(k) {
            return Err(format!("{shown}: outside the session's files ({k} is a kernel interface)"));
        }
    }
    Ok(())
}

/// `a/./b/../c` → `a/c` without touching the file system (`..` at the root stays at the root).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(s) => out.push(s),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn expand_vars(acct: &Account, s: &str) -> String {
    let var = |name: &str| -> Option<String> {
        match name {
            "HOME" => Some(acct.home.display().to_string()),
            "USER" | "LOGNAME" => Some(acct.name.clone()),
            _ => std::env::var(name).ok(),
        }
    };
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, len) = if let Some(b) = after.strip_prefix('{') {
            match b.find('}') {
                Some(j) => (&b[..j], j + 2),
                None => ("", 0),
            }
        } else {
            let n = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
            (&after[..n], n)
        };
        // Unknown variables and lone `$` stay as written, as in Python.
        match (len, var(name)) {
            (l, Some(v)) if l > 0 && !name.is_empty() => {
                out.push_str(&v);
                rest = &after[len..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Open a file for reading as the user. Err((status, message)).
pub fn open_for_send(acct: &Account, p: &Path) -> Result<(std::fs::File, u64), (u16, String)> {
    with_fs_identity(acct, || {
        let md = match std::fs::metadata(p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err((404, "File not found".into())),
            Err(e) => return Err((403, format!("{}: {e}", p.display()))),
        };
        if !md.is_file() {
            return Err((400, format!("{}: not a regular file", p.display())));
        }
        let f = std::fs::File::open(p).map_err(|e| (403, format!("{}: open: {e}", p.display())))?;
        Ok((f, md.len()))
    })
}

/// A file being uploaded and the directories made for it, outermost first: what a failed upload removes.
pub struct Upload {
    pub file: std::fs::File,
    pub made_dirs: Vec<PathBuf>,
}

/// Create (or truncate) a file for an upload as the user, with its missing parent directories.
pub fn create_for_upload(acct: &Account, p: &Path) -> Result<Upload, String> {
    with_fs_identity(acct, || {
        let mut made_dirs = vec![];
        if let Some(d) = p.parent() {
            let absent = |a: &&Path| matches!(std::fs::symlink_metadata(a), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
            let missing: Vec<&Path> = d.ancestors().take_while(absent).collect();
            std::fs::create_dir_all(d).map_err(|e| format!("{}: create directory: {e}", d.display()))?;
            made_dirs = missing.into_iter().rev().map(Path::to_path_buf).collect();
        }
        let file = std::fs::File::create(p).map_err(|e| format!("{}: create: {e}", p.display()))?;
        Ok(Upload { file, made_dirs })
    })
}

pub fn remove_as(acct: &Account, p: &Path) {
    with_fs_identity(acct, || {
        let _ = std::fs::remove_file(p);
    })
}

/// Undo a failed upload: the file, then the directories made for it, innermost first, each only if empty.
pub fn remove_upload(acct: &Account, p: &Path, made_dirs: &[PathBuf]) {
    with_fs_identity(acct, || {
        let _ = std::fs::remove_file(p);
        for d in made_dirs.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    })
}

/// OSWorld's directory tree: `{type, name, children}`, recursing into directories (symbolic links to
/// directories included, as `os.path.isdir` does); an unreadable directory becomes `{error}`.
pub fn tree(acct: &Account, p: &Path) -> Value {
    with_fs_identity(acct, || {
        let mut budget = MAX_ENTRIES;
        let mut seen = vec![];
        walk(p, &mut seen, &mut budget)
    })
}

/// Bounds on one listing, so a link cycle or a huge tree cannot exhaust the guest.
const MAX_ENTRIES: usize = 200_000;
const MAX_DEPTH: usize = 64;

fn walk(p: &Path, seen: &mut Vec<(u64, u64)>, budget: &mut usize) -> Value {
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let id = std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    if seen.len() >= MAX_DEPTH || id.is_some_and(|id| seen.contains(&id)) {
        // A directory already on the path from the root: a link cycle. Shown, not entered.
        return json!({"type": "directory", "name": name, "children": []});
    }
    let rd = match std::fs::read_dir(p) {
        Ok(rd) => rd,
        Err(e) => return json!({"error": format!("[Errno {}] {}: '{}'", e.raw_os_error().unwrap_or(0), e, p.display())}),
    };
    let mut names: Vec<_> = rd.flatten().map(|e| e.file_name()).collect();
    names.sort();
    if let Some(id) = id {
        seen.push(id);
    }
    let mut children = vec![];
    for n in names {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        let full = p.join(&n);
        if full.is_dir() {
            children.push(walk(&full, seen, budget));
        } else {
            children.push(json!({"type": "file", "name": n.to_string_lossy()}));
        }
    }
    if id.is_some() {
        seen.pop();
    }
    json!({"type": "directory", "name": name, "children": children})
}

pub fn is_dir_as(acct: &Account, p: &Path) -> bool {
    with_fs_identity(acct, || p.is_dir())
}

/// A Content-Type from the file name, for the common types tasks move around.
pub fn mime_of(p: &Path) -> &'static str {
    let ext = p.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "txt" | "log" | "md" | "py" | "sh" => "text/plain; charset=utf-8",
        "csv" => "text/csv; charset=utf-8",
        "html" | "htm" => "text/html; charset=utf-8",
        "json" => "application/json",
        "xml" => "application/xml",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        "zip" => "application/zip",
        "mp4" => "video/mp4",
        "mp3" => "audio/mpeg",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "odt" => "application/vnd.oasis.opendocument.text",
        "ods" => "application/vnd.oasis.opendocument.spreadsheet",
        "odp" => "application/vnd.oasis.opendocument.presentation",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acct() -> Account {
        Account { name: "user".into(), uid: 1000, gid: 1000, home: "/home/user".into(), shell: "/bin/bash".into(), groups: vec![1000] }
    }

    #[test]
    fn paths_are_expanded_and_kept_in_the_session() {
        let a = acct();
        assert_eq!(session_path(&a, "~/Desktop/x.txt").unwrap(), Path::new("/home/user/Desktop/x.txt"));
        assert_eq!(session_path(&a, "$HOME/a/../b").unwrap(), Path::new("/home/user/b"));
        assert!(session_path(&a, "${USER}x").unwrap_err().contains("not an absolute path"));
        assert_eq!(session_path(&a, "/tmp/$NO_SUCH_VAR_X/y").unwrap(), Path::new("/tmp/$NO_SUCH_VAR_X/y"));
        for bad in ["", "rel/x", "/proc/1/root/etc/passwd", "/home/../proc/self/environ", "/sys/kernel", "/dev/sda", "a\0b"] {
            assert!(session_path(&a, bad).is_err(), "{bad:?} must be refused");
        }
    }
}
