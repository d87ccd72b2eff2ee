//! Benchmark results for the page's charts (docs/view.md, "Charts"): the `.json` files of one directory
//! the operator names (`drums-view serve --results DIR`, the repository's docs/results), listed with the
//! `type` each declares, and each file as it is. The directory is the operator's, not a session's: still,
//! only plain names are served, never through a link, and never more than RESULT_MAX_BYTES.

use crate::error::{Error, Result};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Larger than any result Drums writes (the density run's is 60 KiB); a bound so that a stray file in the
/// directory cannot make the server read gigabytes.
pub const RESULT_MAX_BYTES: u64 = 16 << 20;

crate::record_type!(ResultsType = "view_results");

/// `GET /api/results` (docs/view.md).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ResultsList {
    pub drums: u32,
    #[serde(rename = "type")]
    pub kind: ResultsType,
    /// The directory served; null when serve was given none.
    pub dir: Option<String>,
    /// Why `dir` is null, or why it could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why_null: Option<String>,
    pub files: Vec<ResultFile>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ResultFile {
    pub name: String,
    /// The file's own `type` member (`benchmark`, `pool_benchmark`, `density-benchmark`, `soak`, ...);
    /// null when it is not a JSON object with a string `type`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub bytes: u64,
    /// Last modification, Unix seconds.
    pub modified: Option<f64>,
}

/// A name the API serves: one plain file name ending in `.json`, of the characters result files use.
pub fn valid_name(name: &str) -> bool {
    name.len() <= 255
        && name.ends_with(".json")
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// Read one result file: a regular file opened without following a link, at most RESULT_MAX_BYTES.
pub fn read(dir: &Path, name: &str) -> Result<Vec<u8>> {
    if !valid_name(name) {
        return Err(Error::bad_input(format!("{name:?}: not a result file name (letters, digits, '.', '_', '-', ending in .json)")));
    }
    let path = dir.join(name);
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(&path).map_err(|e| Error::io("open", &path, e))?;
    let md = f.metadata().map_err(|e| Error::io("stat", &path, e))?;
    if !md.is_file() {
        return Err(Error::bad_input(format!("{}: not a regular file", path.display())));
    }
    if md.len() > RESULT_MAX_BYTES {
        return Err(Error::bad_input(format!("{}: {} bytes, more than the {RESULT_MAX_BYTES} a result may have", path.display(), md.len())));
    }
    let mut body = Vec::with_capacity(md.len() as usize);
    f.take(RESULT_MAX_BYTES + 1).read_to_end(&mut body).map_err(|e| Error::io("read", &path, e))?;
    if body.len() as u64 > RESULT_MAX_BYTES {
        return Err(Error::bad_input(format!("{}: grew past {RESULT_MAX_BYTES} bytes while read", path.display())));
    }
    Ok(body)
}

/// Every result file of `dir`, by name.
pub fn list(dir: Option<&Path>) -> ResultsList {
    let mut out = ResultsList { drums: crate::record::VERSION, kind: ResultsType::Tag, dir: dir.map(|d| d.display().to_string()), why_null: None, files: vec![] };
    let Some(dir) = dir else {
        out.why_null = Some("drums-view serve was given no --results DIR".into());
        return out;
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            out.why_null = Some(format!("{}: {e}", dir.display()));
            return out;
        }
    };
    for entry in entries.flatten() {
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        if !valid_name(&name) {
            continue;
        }
        // A link or anything but a regular file is left out, as `read` would refuse it.
        let Ok(md) = entry.path().symlink_metadata() else { continue };
        if !md.is_file() {
            continue;
        }
        let kind = read(dir, &name).ok().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok()).and_then(|v| v.get("type")?.as_str().map(str::to_string));
        let modified = md.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map(|d| d.as_secs_f64());
        out.files.push(ResultFile { name, kind, bytes: md.len(), modified });
    }
    out.files.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_json_names_are_served() {
        assert!(valid_name("bench-2026-12-02-typed.json"));
        for bad in ["../x.json", "a/b.json", ".hidden.json", "x.jsonl", "x.json/", "x y.json", ""] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn links_other_files_and_large_files_are_refused() {
        let d = std::env::temp_dir().join(format!("drums-results-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("a.json"), br#"{"type": "benchmark", "x": 1}"#).unwrap();
        std::fs::write(d.join("notes.txt"), b"x").unwrap();
        std::fs::write(d.join("plain.json"), b"[1, 2]").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("link.json")).unwrap();
        std::fs::create_dir(d.join("dir.json")).unwrap();
        let big = std::fs::File::create(d.join("big.json")).unwrap();
        big.set_len(RESULT_MAX_BYTES + 1).unwrap();
        let l = list(Some(&d));
        let names: Vec<_> = l.files.iter().map(|f| (f.name.as_str(), f.kind.as_deref())).collect();
        assert_eq!(names, [("a.json", Some("benchmark")), ("big.json", None), ("plain.json", None)]);
        assert_eq!(read(&d, "a.json").unwrap(), br#"{"type": "benchmark", "x": 1}"#);
        for refused in ["link.json", "dir.json", "big.json", "notes.txt", "../a.json"] {
            assert!(read(&d, refused).is_err(), "{refused}");
        }
        assert!(list(None).why_null.is_some());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
