//! Host-side file operations confined to a tree.
//!
//! Drums' tools are root on the host, and much of their file work is in trees a session controls: its
//! root (through `/proc/PID/root` or its overlay mount), its upper directory, a checkpoint layer copied
//! from it. A path joined onto such a tree and given to a plain path call follows every symbolic link
//! the session planted, out of the tree and into the host's own files (a link `/etc/hostname -> /tmp/x`
//! made a restore write the host's `/tmp/x`). Every operation here resolves its path relative to a
//! directory descriptor with openat2(2), under the rule its `Root` was opened with:
//!
//! - `Links::InRoot` (RESOLVE_IN_ROOT): links are followed as the session would follow them, with the
//!   tree as `/` and `..` stopping there. A planted link can only lead to another file of the same tree,
//!   so what is written lands in the session (harmless: it is the session's own file).
//! - `Links::Refuse` (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): a link anywhere in the path is an error
//!   (ELOOP). For layers and uppers, where a link in a path the tool expects to be plain can only mean
//!   that the session changed the tree under the tool.
//!
//! Both add RESOLVE_NO_MAGICLINKS (no jump through a `/proc/PID/fd` or `/proc/PID/root` link) and
//! RESOLVE_NO_XDEV: the walk stays on the tree's own mount, so a link to a file of a proc or sys file
//! system mounted in the session (its `/proc/sys/kernel/core_pattern` is the host's) fails with EXDEV.
//!
//! A file is opened for reading or writing only once it is known to be a regular file: it is opened with
//! O_PATH first (which does nothing to whatever it is), checked with fstat, and only then reopened
//! through `/proc/self/fd` (opening a FIFO would block; opening a device node could act on the host's
//! hardware). The last component of a path is never followed by `create_new`, `replace_file`, `mkdir`
//! and `rename`: those act on the name itself.

use crate::error::{Error, Result};
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// How links inside a tree are treated (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Followed, with the tree as the root: RESOLVE_IN_ROOT.
    InRoot,
    /// Any link in the path is an error: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS.
    Refuse,
}

impl Links {
    fn resolve_flags(self) -> u64 {
        let always = libc::RESOLVE_NO_MAGICLINKS | libc::RESOLVE_NO_XDEV;
        match self {
            Links::InRoot => always | libc::RESOLVE_IN_ROOT,
            Links::Refuse => always | libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS,
        }
    }
}

/// A directory that paths are resolved in, and the rule for links inside it.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    /// The directory's host path, for messages only (never resolved again).
    shown: PathBuf,
    links: Links,
    /// The user and group id maps of the process whose root this is (its /proc/PID/uid_map and gid_map)
    /// when they are not the host's identity: the ids that functions here are given are ids inside the
    /// session, and files are owned by the host ids they map to (a session in its own user namespace,
    /// crate::idrange). Empty: ids are host ids.
    uid_map: Vec<(u32, u32, u32)>,
    gid_map: Vec<(u32, u32, u32)>,
}

/// The lines (inside, host, count) of a /proc/PID/uid_map or gid_map, none for the identity map.
fn read_id_map(path: &str) -> Vec<(u32, u32, u32)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let map: Vec<(u32, u32, u32)> = text
        .lines()
        .filter_map(|l| {
            let v: Vec<u32> = l.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            (v.len() == 3).then(|| (v[0], v[1], v[2]))
        })
        .collect();
    if map.iter().all(|&(a, b, _)| a == b) {
        return vec![];
    }
    map
}

fn map_id(map: &[(u32, u32, u32)], id: u32) -> u32 {
    if map.is_empty() {
        return id;
    }
    // An id the map does not name becomes the overflow id, as the kernel shows it.
    map.iter().find(|&&(a, _, n)| id >= a && id - a < n).map(|&(a, b, _)| b + (id - a)).unwrap_or(65534)
}

impl Root {
    /// A directory named by a host path that Drums controls (a state directory, a checkpoint's layer, an
    /// overlay mount, `/proc/PID/root`): that path itself is opened as given; only paths inside it are
    /// confined.
    pub fn open(dir: &Path, links: Links) -> Result<Root> {
        let c = cstring(dir)?;
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(Error::io("open directory", dir, std::io::Error::last_os_error()));
        }
        Ok(Root { fd: unsafe { OwnedFd::from_raw_fd(fd) }, shown: dir.to_path_buf(), links, uid_map: vec![], gid_map: vec![] })
    }

    /// The root directory of a session's process (its init's `/proc/PID/root`), with links followed
    /// inside it: what a write there reaches is the session's own. When `start_time` is given, the
    /// process is checked to be the same one after its root was opened, so a PID reused by a host
    /// process never lends its root. A process in this tool's own mount namespace is refused: its root
    /// is the host's `/`, never a session's.
    pub fn of_process(pid: i32, start_time: Option<u64>) -> Result<Root> {
        if pid <= 0 {
            return Err(Error::failed(format!("{pid} is not a process id")));
        }
        let mut root = Root::open(Path::new(&format!("/proc/{pid}/root")), Links::InRoot)?;
        root.uid_map = read_id_map(&format!("/proc/{pid}/uid_map"));
        root.gid_map = read_id_map(&format!("/proc/{pid}/gid_map"));
        if let Some(start) = start_time {
            if !crate::proc::alive(pid, start) {
                return Err(Error::failed(format!("process {pid} (started at {start}) is gone")));
            }
        }
        let ours = crate::proc::ns_inode(std::process::id() as i32, "mnt")?;
        if crate::proc::ns_inode(pid, "mnt")? == ours {
            return Err(Error::bad_input(format!("process {pid} is in this tool's own mount namespace: its root is the host's, not a session's")));
        }
        Ok(root)
    }

    pub fn links(&self) -> Links {
        self.links
    }

    /// The same root, its ids those of a session in its own user namespace with this range (None: host
    /// ids), for a root opened by path (`open`) rather than through a session's process.
    pub fn ids_of(mut self, r: Option<&crate::record::IdRange>) -> Root {
        if let Some(r) = r {
            self.uid_map = vec![(0, r.base, r.count)];
            self.gid_map = vec![(0, r.base, r.count)];
        }
        self
    }

    /// The host ids of ids `uid`, `gid` inside this root (see `uid_map`).
    pub fn host_ids(&self, uid: u32, gid: u32) -> (u32, u32) {
        (map_id(&self.uid_map, uid), map_id(&self.gid_map, gid))
    }

    /// `path` inside this root, as a host path for messages.
    pub fn shown(&self, path: &Path) -> PathBuf {
        self.shown.join(relative(path))
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// A directory inside this root as a root of its own, with the same rule.
    pub fn subdir(&self, path: &Path) -> Result<Root> {
        let fd = self.resolve(path, libc::O_PATH | libc::O_DIRECTORY).map_err(|e| self.err("open directory", path, e))?;
        Ok(Root { fd, shown: self.shown(path), links: self.links, uid_map: self.uid_map.clone(), gid_map: self.gid_map.clone() })
    }

    /// openat2(2) of `path` under this root's rule.
    pub fn resolve(&self, path: &Path, flags: i32) -> std::io::Result<OwnedFd> {
        openat2(self.fd.as_raw_fd(), &relative(path), flags, 0, self.links.resolve_flags())
    }

    fn err(&self, what: &str, path: &Path, e: std::io::Error) -> Error {
        let what = match e.raw_os_error() {
            Some(libc::ELOOP) if self.links == Links::Refuse => format!("{what} (a symbolic link in the path, refused)"),
            Some(libc::EXDEV) => format!("{what} (the path leaves the tree or its mount, refused)"),
            _ => what.to_string(),
        };
        Error::io(what, self.shown(path), e)
    }

    /// The directory holding `path`'s last component, and that component.
    fn parent_of<'p>(&self, path: &'p Path) -> Result<(OwnedFd, &'p OsStr)> {
        let name = match path.components().next_back() {
            Some(Component::Normal(n)) => n,
            _ => return Err(Error::bad_input(format!("{}: not a path to a named file", self.shown(path).display()))),
        };
        let parent = path.parent().unwrap_or(Path::new(""));
        let fd = self.resolve(parent, libc::O_PATH | libc::O_DIRECTORY).map_err(|e| self.err("open directory", parent, e))?;
        Ok((fd, name))
    }
}

/// `path` without its leading `/`: openat2 resolves an absolute path from the root only under
/// RESOLVE_IN_ROOT, and refuses it under RESOLVE_BENEATH; as relative paths both mean the same file.
fn relative(path: &Path) -> PathBuf {
    let rel: PathBuf = path.components().filter(|c| !matches!(c, Component::RootDir | Component::CurDir)).collect();
    if rel.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        rel
    }
}

fn cstring(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::bad_input(format!("{}: path has a NUL", p.display())))
}

fn c_name(n: &OsStr) -> std::io::Result<CString> {
    CString::new(n.as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// openat2(2): `path` relative to `dirfd` with `resolve` flags; O_CLOEXEC always.
pub fn openat2(dirfd: RawFd, path: &Path, flags: i32, mode: u32, resolve: u64) -> std::io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // open_how is non-exhaustive in libc: made zeroed, then filled in.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = mode as u64;
    how.resolve = resolve;
    loop {
        let fd = unsafe { libc::syscall(libc::SYS_openat2, dirfd, c.as_ptr(), &how as *const libc::open_how, std::mem::size_of::<libc::open_how>()) };
        if fd >= 0 {
            return Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        }
        let e = std::io::Error::last_os_error();
        // The kernel asks for a retry when a rename raced the walk (RESOLVE_IN_ROOT, RESOLVE_BENEATH).
        if e.raw_os_error() != Some(libc::EAGAIN) {
            return Err(e);
        }
    }
}

/// fstat(2) of any descriptor, an O_PATH one included.
pub fn fstat(fd: BorrowedFd) -> std::io::Result<libc::stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

/// fstatat(2) of one name in a directory, not followed if it is a link.
pub fn lstat_at(dir: BorrowedFd, name: &OsStr) -> std::io::Result<libc::stat> {
    let c = c_name(name)?;
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    check(unsafe { libc::fstatat(dir.as_raw_fd(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st)
}

pub fn is_kind(st: &libc::stat, kind: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

/// Reopen an O_PATH descriptor of a regular file for reading or writing, through `/proc/self/fd`: the
/// same file, whatever its name points at by now.
fn reopen(fd: &OwnedFd, flags: i32) -> std::io::Result<File> {
    let p = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL");
    let f = unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NOCTTY) };
    if f < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(unsafe { File::from_raw_fd(f) })
}

fn not_regular() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file")
}

/// The metadata of `path`, its last component not followed (like lstat(2)).
pub fn symlink_metadata(root: &Root, path: &Path) -> Result<std::fs::Metadata> {
    let fd = root.resolve(path, libc::O_PATH | libc::O_NOFOLLOW).map_err(|e| root.err("stat", path, e))?;
    File::from(fd).metadata().map_err(|e| root.err("stat", path, e))
}

/// A regular file, open for reading. Anything else (a FIFO, a device node, a directory) is refused
/// without being opened.
pub fn open_regular(root: &Root, path: &Path) -> Result<File> {
    let fd = root.resolve(path, libc::O_PATH).map_err(|e| root.err("open", path, e))?;
    let st = fstat(fd.as_fd()).map_err(|e| root.err("stat", path, e))?;
    if !is_kind(&st, libc::S_IFREG) {
        return Err(root.err("open", path, not_regular()));
    }
    reopen(&fd, libc::O_RDONLY).map_err(|e| root.err("open", path, e))
}

/// The whole of a regular file.
pub fn read(root: &Root, path: &Path) -> Result<Vec<u8>> {
    let mut out = vec![];
    open_regular(root, path)?.read_to_end(&mut out).map_err(|e| root.err("read", path, e))?;
    Ok(out)
}

pub fn read_to_string(root: &Root, path: &Path) -> Result<String> {
    String::from_utf8(read(root, path)?).map_err(|_| root.err("read", path, std::io::Error::from(std::io::ErrorKind::InvalidData)))
}

/// At most the last `bytes` bytes of a regular file (a log's tail, without reading the whole log).
pub fn read_tail(root: &Root, path: &Path, bytes: u64) -> Result<Vec<u8>> {
    let mut f = open_regular(root, path)?;
    let len = f.metadata().map_err(|e| root.err("stat", path, e))?.len();
    f.seek(std::io::SeekFrom::Start(len.saturating_sub(bytes))).map_err(|e| root.err("seek", path, e))?;
    let mut out = vec![];
    f.take(bytes).read_to_end(&mut out).map_err(|e| root.err("read", path, e))?;
    Ok(out)
}

/// Give the file open as `fd` its owner and mode (after the owner: chown clears set-id bits).
fn own(fd: &File, mode: u32, (uid, gid): (u32, u32)) -> std::io::Result<()> {
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })?;
    check(unsafe { libc::fchmod(fd.as_raw_fd(), mode & 0o7777) })
}

/// Make a new regular file with `data`, `mode` and owner, if nothing has that name: Ok(false) when
/// something (of any kind, a link included, which is not followed) is there already.
pub fn create_new(root: &Root, path: &Path, data: &[u8], mode: u32, uid: u32, gid: u32) -> Result<bool> {
    let (dir, name) = root.parent_of(path)?;
    let fd = match openat2(dir.as_raw_fd(), Path::new(name), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW, 0o600, libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => return Ok(false),
        Err(e) => return Err(root.err("create", path, e)),
    };
    let mut f = File::from(fd);
    f.write_all(data).and_then(|_| own(&f, mode, root.host_ids(uid, gid))).map_err(|e| root.err("write", path, e))?;
    Ok(true)
}

/// Make a symbolic link `path` -> `target` owned by `uid`:`gid`, if nothing has that name: Ok(false) when
/// something is there already. The target is not resolved here: it is read inside the session.
pub fn symlink_new(root: &Root, path: &Path, target: &Path, uid: u32, gid: u32) -> Result<bool> {
    let (dir, name) = root.parent_of(path)?;
    let (cn, ct) = (c_name(name).map_err(|e| root.err("link", path, e))?, c_name(target.as_os_str()).map_err(|e| root.err("link", path, e))?);
    if let Err(e) = check(unsafe { libc::symlinkat(ct.as_ptr(), dir.as_raw_fd(), cn.as_ptr()) }) {
        return if e.raw_os_error() == Some(libc::EEXIST) { Ok(false) } else { Err(root.err("link", path, e)) };
    }
    let (uid, gid) = root.host_ids(uid, gid);
    check(unsafe { libc::fchownat(dir.as_raw_fd(), cn.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) }).map_err(|e| root.err("chown", path, e))?;
    Ok(true)
}

/// Put a regular file with `data`, `mode` and owner at `path`, replacing whatever has that name (a file,
/// a link, which is not followed, a FIFO, a device node; not a directory) in one rename: a new file is
/// written beside it first, so a reader never sees it half written.
pub fn replace_file(root: &Root, path: &Path, data: &[u8], mode: u32, uid: u32, gid: u32) -> Result<()> {
    let (dir, name) = root.parent_of(path)?;
    let mut tmp_name = OsString::from(".drums-");
    tmp_name.push(crate::state::random_hex(6));
    tmp_name.push(".");
    tmp_name.push(name);
    let fd = openat2(dir.as_raw_fd(), Path::new(&tmp_name), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW, 0o600, libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS)
        .map_err(|e| root.err("create", path, e))?;
    let mut f = File::from(fd);
    let (ct, cn) = (c_name(&tmp_name).expect("no NUL"), c_name(name).map_err(|e| root.err("write", path, e))?);
    let written = f.write_all(data).and_then(|_| own(&f, mode, root.host_ids(uid, gid))).and_then(|_| check(unsafe { libc::renameat(dir.as_raw_fd(), ct.as_ptr(), dir.as_raw_fd(), cn.as_ptr()) }));
    if let Err(e) = written {
        unsafe { libc::unlinkat(dir.as_raw_fd(), ct.as_ptr(), 0) };
        return Err(root.err("write", path, e));
    }
    Ok(())
}

/// Make a directory (its parent must exist) with exactly `mode` and owner, or give the directory already
/// there (not a link to one) that mode and owner. Returns it, open.
pub fn mkdir(root: &Root, path: &Path, mode: u32, uid: u32, gid: u32) -> Result<OwnedFd> {
    let (dir, name) = root.parent_of(path)?;
    mkdir_in(root, dir.as_fd(), name, path, mode, uid, gid)
}

fn mkdir_in(root: &Root, dir: BorrowedFd, name: &OsStr, shown: &Path, mode: u32, uid: u32, gid: u32) -> Result<OwnedFd> {
    let cn = c_name(name).map_err(|e| root.err("create directory", shown, e))?;
    if unsafe { libc::mkdirat(dir.as_raw_fd(), cn.as_ptr(), 0o700) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(root.err("create directory", shown, e));
        }
    }
    let fd = openat2(dir.as_raw_fd(), Path::new(name), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW, 0, libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS)
        .map_err(|e| root.err("open directory", shown, e))?;
    let f = File::from(fd);
    own(&f, mode, root.host_ids(uid, gid)).map_err(|e| root.err("chown and chmod", shown, e))?;
    Ok(f.into())
}

/// `mkdir -p` inside the root: the directories of `path` that exist are resolved under the root's rule,
/// the missing ones are made; every directory made, and the last one whether made or not, gets `mode`
/// and owner. Returns the last one, open.
pub fn mkdir_all(root: &Root, path: &Path, mode: u32, uid: u32, gid: u32) -> Result<OwnedFd> {
    let rel = relative(path);
    let parts: Vec<&OsStr> = rel.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n),
        _ => None,
    }).collect();
    if parts.len() != rel.components().filter(|c| !matches!(c, Component::CurDir)).count() {
        return Err(Error::bad_input(format!("{}: `..` in a directory to make", root.shown(path).display())));
    }
    // The longest prefix that exists, resolved as a whole under the root's rule.
    let mut have = parts.len();
    let mut fd = loop {
        let prefix: PathBuf = parts[..have].iter().collect();
        match root.resolve(&prefix, libc::O_PATH | libc::O_DIRECTORY) {
            Ok(fd) => break fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && have > 0 => have -= 1,
            Err(e) => return Err(root.err("open directory", &prefix, e)),
        }
    };
    if have == parts.len() {
        let f = reopen_dir(&fd).map_err(|e| root.err("open directory", path, e))?;
        own(&f, mode, root.host_ids(uid, gid)).map_err(|e| root.err("chown and chmod", path, e))?;
        return Ok(f.into());
    }
    for (i, name) in parts.iter().enumerate().skip(have) {
        let shown: PathBuf = parts[..=i].iter().collect();
        fd = mkdir_in(root, fd.as_fd(), name, &shown, mode, uid, gid)?;
    }
    Ok(fd)
}

fn reopen_dir(fd: &OwnedFd) -> std::io::Result<File> {
    reopen(fd, libc::O_RDONLY | libc::O_DIRECTORY)
}

/// Give `path` (followed under the root's rule; not a link itself) a mode and owner.
pub fn set_owner_mode(root: &Root, path: &Path, mode: u32, uid: u32, gid: u32) -> Result<()> {
    let fd = root.resolve(path, libc::O_PATH | libc::O_NOFOLLOW).map_err(|e| root.err("open", path, e))?;
    let st = fstat(fd.as_fd()).map_err(|e| root.err("stat", path, e))?;
    if is_kind(&st, libc::S_IFLNK) {
        return Err(root.err("chown", path, std::io::Error::from_raw_os_error(libc::ELOOP)));
    }
    let (uid, gid) = root.host_ids(uid, gid);
    check(unsafe { libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, libc::AT_EMPTY_PATH) }).map_err(|e| root.err("chown", path, e))?;
    let p = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd())).expect("no NUL");
    check(unsafe { libc::chmod(p.as_ptr(), mode & 0o7777) }).map_err(|e| root.err("chmod", path, e))
}

/// rename(2) of `from` in `from_root` to `to` in `to_root` (two trees on one file system), each name's
/// directory resolved under its root's rule; the names themselves are not followed.
pub fn rename(from_root: &Root, from: &Path, to_root: &Root, to: &Path) -> Result<()> {
    let (fd_dir, f_name) = from_root.parent_of(from)?;
    let (td_dir, t_name) = to_root.parent_of(to)?;
    let (cf, ct) = (c_name(f_name).map_err(|e| from_root.err("rename", from, e))?, c_name(t_name).map_err(|e| to_root.err("rename", to, e))?);
    check(unsafe { libc::renameat(fd_dir.as_raw_fd(), cf.as_ptr(), td_dir.as_raw_fd(), ct.as_ptr()) }).map_err(|e| to_root.err(&format!("rename {} to", from_root.shown(from).display()), to, e))
}

/// The names in an open directory (not `.` and `..`), read from a descriptor of its own.
pub fn list_dir(dir: BorrowedFd) -> std::io::Result<Vec<OsString>> {
    let own = openat2(dir.as_raw_fd(), Path::new("."), libc::O_RDONLY | libc::O_DIRECTORY, 0, libc::RESOLVE_BENEATH)?;
    let d = unsafe { libc::fdopendir(own.as_raw_fd()) };
    if d.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    // The stream owns the descriptor from here on; closedir closes it.
    std::mem::forget(own);
    let mut out = vec![];
    let result = loop {
        unsafe { *libc::__errno_location() = 0 };
        let e = unsafe { libc::readdir(d) };
        if e.is_null() {
            let err = std::io::Error::last_os_error();
            break if err.raw_os_error().unwrap_or(0) == 0 { Ok(()) } else { Err(err) };
        }
        let name = unsafe { std::ffi::CStr::from_ptr((*e).d_name.as_ptr()) };
        if name != c"." && name != c".." {
            out.push(OsStr::from_bytes(name.to_bytes()).to_os_string());
        }
    };
    unsafe { libc::closedir(d) };
    result.map(|_| out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn tree(name: &str) -> PathBuf {
        let t = std::env::temp_dir().join(format!("drums-inroot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        std::fs::create_dir_all(t.join("root/etc")).unwrap();
        std::fs::create_dir_all(t.join("outside")).unwrap();
        t
    }

    #[test]
    fn links_stay_inside_the_root_or_are_refused() {
        let t = tree("links");
        let root_dir = t.join("root");
        // An absolute link and a relative one that climbs, both aimed at the host's side of the tree.
        std::os::unix::fs::symlink(t.join("outside/abs"), root_dir.join("etc/hostname")).unwrap();
        std::os::unix::fs::symlink("../../outside/rel", root_dir.join("etc/machine-id")).unwrap();
        std::os::unix::fs::symlink(t.join("outside"), root_dir.join("etc/dir")).unwrap();
        std::fs::write(t.join("outside/secret"), b"host").unwrap();
        let inroot = Root::open(&root_dir, Links::InRoot).unwrap();
        let refuse = Root::open(&root_dir, Links::Refuse).unwrap();

        replace_file(&inroot, Path::new("/etc/hostname"), b"h\n", 0o644, 0, 0).unwrap();
        assert!(!t.join("outside/abs").exists(), "the write left the root");
        assert!(std::fs::symlink_metadata(root_dir.join("etc/hostname")).unwrap().is_file(), "the link is replaced, not followed");
        assert_eq!(std::fs::read(root_dir.join("etc/hostname")).unwrap(), b"h\n");
        assert!(!create_new(&inroot, Path::new("/etc/machine-id"), b"x", 0o644, 0, 0).unwrap(), "a link is something: not followed");
        assert!(!t.join("outside/rel").exists());
        assert!(symlink_new(&inroot, Path::new("/etc/dir/bus"), Path::new("/tmp/drums/bus"), 0, 0).is_err(), "a link's directory is resolved inside the root");
        assert!(std::fs::symlink_metadata(t.join("outside/bus")).is_err(), "the link was made outside the root");

        // Reading through links: inside the root, the host's file is not what is found.
        assert!(read(&inroot, Path::new("/etc/dir/secret")).is_err(), "the link's target is resolved inside the root");
        std::os::unix::fs::symlink("/etc/hostname", root_dir.join("etc/again")).unwrap();
        assert_eq!(read(&inroot, Path::new("etc/again")).unwrap(), b"h\n", "an absolute link means the root's /");
        let e = read(&refuse, Path::new("etc/again")).unwrap_err();
        assert!(e.to_string().contains("refused"), "{e}");
        assert!(symlink_metadata(&refuse, Path::new("etc/dir/secret")).is_err());
        assert!(symlink_metadata(&refuse, Path::new("etc/dir")).unwrap().file_type().is_symlink(), "the last component is not followed");
        assert!(mkdir_all(&refuse, Path::new("etc/dir/new"), 0o700, 0, 0).is_err());
        assert!(!t.join("outside/new").exists());
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn makes_directories_and_files_with_modes_and_owners() {
        let t = tree("modes");
        let root = Root::open(&t.join("root"), Links::InRoot).unwrap();
        mkdir_all(&root, Path::new("/tmp/drums/xdg"), 0o700, 1000, 1000).unwrap();
        let m = std::fs::metadata(t.join("root/tmp/drums/xdg")).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o700, 1000, 1000));
        std::fs::set_permissions(t.join("root/tmp/drums/xdg"), std::fs::Permissions::from_mode(0o755)).unwrap();
        mkdir_all(&root, Path::new("/tmp/drums/xdg"), 0o700, 1000, 1000).unwrap();
        assert_eq!(std::fs::metadata(t.join("root/tmp/drums/xdg")).unwrap().mode() & 0o7777, 0o700, "fixed on every use");
        assert!(create_new(&root, Path::new("tmp/drums/f"), b"1", 0o640, 2, 3).unwrap());
        assert!(!create_new(&root, Path::new("tmp/drums/f"), b"2", 0o640, 2, 3).unwrap());
        let m = std::fs::metadata(t.join("root/tmp/drums/f")).unwrap();
        assert_eq!((m.mode() & 0o7777, m.uid(), m.gid(), std::fs::read(t.join("root/tmp/drums/f")).unwrap()), (0o640, 2, 3, b"1".to_vec()));
        assert_eq!(read_tail(&root, Path::new("tmp/drums/f"), 10).unwrap(), b"1");
        set_owner_mode(&root, Path::new("tmp/drums/f"), 0o600, 0, 0).unwrap();
        assert_eq!(std::fs::metadata(t.join("root/tmp/drums/f")).unwrap().mode() & 0o7777, 0o600);
        assert!(mkdir_all(&root, Path::new("tmp/../x"), 0o700, 0, 0).is_err(), "..");
        let mut names = list_dir(root.subdir(Path::new("tmp/drums")).unwrap().fd()).unwrap();
        names.sort();
        assert_eq!(names, vec![OsString::from("f"), OsString::from("xdg")]);
        // A link, owned as asked, its target kept as given; never made over what is there.
        mkdir_all(&root, Path::new("/run/user/1000"), 0o700, 1000, 1000).unwrap();
        assert!(symlink_new(&root, Path::new("/run/user/1000/bus"), Path::new("/tmp/drums/bus"), 1000, 1000).unwrap());
        assert!(!symlink_new(&root, Path::new("/run/user/1000/bus"), Path::new("/elsewhere"), 1000, 1000).unwrap());
        let link = t.join("root/run/user/1000/bus");
        let m = std::fs::symlink_metadata(&link).unwrap();
        assert_eq!((m.file_type().is_symlink(), m.uid(), m.gid(), std::fs::read_link(&link).unwrap()), (true, 1000, 1000, PathBuf::from("/tmp/drums/bus")));
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn never_opens_what_is_not_a_regular_file() {
        let t = tree("fifo");
        let fifo = CString::new(t.join("root/etc/fifo").as_os_str().as_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let root = Root::open(&t.join("root"), Links::InRoot).unwrap();
        // Opening a FIFO for reading would block this test forever.
        assert!(read(&root, Path::new("etc/fifo")).is_err());
        replace_file(&root, Path::new("etc/fifo"), b"x", 0o644, 0, 0).unwrap();
        assert!(std::fs::symlink_metadata(t.join("root/etc/fifo")).unwrap().is_file());
        std::fs::remove_dir_all(&t).unwrap();
    }

    #[test]
    fn the_walk_stays_on_the_tree_s_mount() {
        let t = tree("xdev");
        // /proc is another mount than the temporary directory's: a link into it is refused.
        std::os::unix::fs::symlink("/proc/sys/kernel/core_pattern", t.join("root/etc/hostname")).unwrap();
        std::os::unix::fs::symlink("/proc", t.join("root/proc")).unwrap();
        let root = Root::open(&t.join("root"), Links::InRoot).unwrap();
        assert!(read(&root, Path::new("etc/hostname")).is_err());
        let real = Root::open(Path::new("/"), Links::InRoot).unwrap();
        let e = read(&real, Path::new("/proc/sys/kernel/core_pattern")).unwrap_err();
        assert!(e.to_string().contains("refused"), "{e}");
        std::fs::remove_dir_all(&t).unwrap();
    }
}
