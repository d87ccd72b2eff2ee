//! Reading /proc/self/mountinfo: the one parser of it in Drums. Not `procfs`: its MountInfo (0.18) leaves
//! the octal escapes of paths (`\040` for a space) in `root` and `mount_point`, and Drums compares those
//! paths with its own.

use std::path::PathBuf;

/// One line of mountinfo(5), the fields Drums uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Mount {
    /// Field 1: the mount's id.
    pub id: u32,
    /// Field 4: the path within the file system that this mount shows as its root.
    pub root: String,
    /// Field 5: where it is mounted.
    pub mount_point: PathBuf,
    /// The file system type, first field after ` - `.
    pub fstype: String,
    /// The super block's options, third field after ` - ` (for an overlay: its layers).
    pub super_options: String,
}

/// The mounts of this process's mount namespace, in mount order.
pub fn read() -> std::io::Result<Vec<Mount>> {
    Ok(std::fs::read_to_string("/proc/self/mountinfo")?.lines().filter_map(parse_line).collect())
}

/// One mountinfo line, or None if it does not have mountinfo's shape.
pub fn parse_line(l: &str) -> Option<Mount> {
    let f: Vec<&str> = l.split(' ').collect();
    let dash = f.iter().position(|w| *w == "-")?;
    if dash < 5 {
        return None;
    }
    Some(Mount {
        id: f[0].parse().ok()?,
        root: unescape(f[3]),
        mount_point: PathBuf::from(unescape(f[4])),
        fstype: f.get(dash + 1)?.to_string(),
        super_options: f.get(dash + 3).map(|s| s.to_string()).unwrap_or_default(),
    })
}

/// mountinfo escapes space, tab, newline and backslash in paths as `\ooo` (octal).
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn unescapes_octal() {
        assert_eq!(super::unescape("/a\\040b"), "/a b");
        assert_eq!(super::unescape("/a\\134b"), "/a\\b");
        assert_eq!(super::unescape("/plain"), "/plain");
    }

    #[test]
    fn lines_and_escapes() {
        let m = super::parse_line("36 25 0:32 / /run/drums/a\\040b rw,relatime shared:1 - tmpfs tmpfs rw,size=4k").unwrap();
        assert_eq!((m.id, m.root.as_str(), m.mount_point.to_str().unwrap(), m.fstype.as_str(), m.super_options.as_str()), (36, "/", "/run/drums/a b", "tmpfs", "rw,size=4k"));
        let m = super::parse_line("40 25 0:35 /drums /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory").unwrap();
        assert_eq!((m.root.as_str(), m.super_options.as_str()), ("/drums", "rw,memory"));
        assert!(super::parse_line("garbage").is_none());
    }
}
