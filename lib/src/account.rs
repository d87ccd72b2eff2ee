//! A session's accounts (the desktop user the guest acts as, the user drums-ns runs a command as): looked
//! up in the session's own /etc/passwd and /etc/group (the template layer's copies), not through NSS, so
//! the answer is the session's whatever the host uses.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
    pub shell: String,
    /// Supplementary groups from /etc/group, the primary group included.
    pub groups: Vec<u32>,
}

impl Account {
    /// Look `name` up in `<root>/etc/passwd` and `<root>/etc/group`. `root` is a session's root as the
    /// host sees it (`/proc/PID/root`) or `/` inside one: the files are read inside it, links in them
    /// followed as the session would, never out of it (crate::inroot); what they say is the session's.
    pub fn lookup_in(root: &Path, name: &str) -> Result<Account> {
        let tree = crate::inroot::Root::open(root, crate::inroot::Links::InRoot)?;
        let passwd_path = tree.shown(Path::new("etc/passwd"));
        let passwd = crate::inroot::read_to_string(&tree, Path::new("etc/passwd"))?;
        let mut acct = passwd
            .lines()
            .find_map(|l| parse_passwd_line(l).filter(|a| a.name == name))
            .ok_or_else(|| Error::env(format!("{}: no user `{name}` (is the session template layer mounted?)", passwd_path.display())))?;
        // A missing /etc/group only loses supplementary groups; the primary group still applies.
        if let Ok(group) = crate::inroot::read_to_string(&tree, Path::new("etc/group")) {
            for l in group.lines() {
                let f: Vec<&str> = l.split(':').collect();
                if f.len() < 4 {
                    continue;
                }
                let Ok(gid) = f[2].parse::<u32>() else { continue };
                if gid != acct.gid && f[3].split(',').any(|m| m == name) && !acct.groups.contains(&gid) {
                    acct.groups.push(gid);
                }
            }
        }
        Ok(acct)
    }

    pub fn lookup(name: &str) -> Result<Account> {
        Account::lookup_in(Path::new("/"), name)
    }

    /// The guest's own identity (for work done as the guest, not as the desktop user).
    pub fn current() -> Account {
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/"));
        Account { name: std::env::var("USER").unwrap_or_else(|_| uid.to_string()), uid, gid, home, shell: "/bin/sh".into(), groups: vec![gid] }
    }

    /// Whether the guest must change identity to act as this account.
    pub fn is_other(&self) -> bool {
        unsafe { libc::geteuid() != self.uid }
    }

    /// `~` and `~/...` expanded to this account's home; other strings unchanged.
    pub fn expand_tilde(&self, s: &str) -> String {
        if s == "~" {
            self.home.display().to_string()
        } else if let Some(rest) = s.strip_prefix("~/") {
            format!("{}/{rest}", self.home.display().to_string().trim_end_matches('/'))
        } else {
            s.to_string()
        }
    }
}

fn parse_passwd_line(l: &str) -> Option<Account> {
    let f: Vec<&str> = l.split(':').collect();
    if f.len() < 7 {
        return None;
    }
    let gid: u32 = f[3].parse().ok()?;
    Some(Account {
        name: f[0].to_string(),
        uid: f[2].parse().ok()?,
        gid,
        home: PathBuf::from(f[5]),
        shell: if f[6].is_empty() { "/bin/sh".into() } else { f[6].to_string() },
        groups: vec![gid],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_passwd_and_groups_of_a_tree() {
        let d = std::env::temp_dir().join(format!("drums-account-{}", std::process::id()));
        std::fs::create_dir_all(d.join("etc")).unwrap();
        std::fs::write(d.join("etc/passwd"), "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:user:/home/user:\n").unwrap();
        std::fs::write(d.join("etc/group"), "root:x:0:\nsudo:x:27:user,other\nuser:x:1000:\nvideo:x:44:other\n").unwrap();
        let a = Account::lookup_in(&d, "user").unwrap();
        assert_eq!((a.uid, a.gid, a.home.as_path(), a.shell.as_str()), (1000, 1000, Path::new("/home/user"), "/bin/sh"));
        assert_eq!(a.groups, vec![1000, 27]);
        assert_eq!(a.expand_tilde("~/Desktop/x"), "/home/user/Desktop/x");
        assert_eq!(a.expand_tilde("~"), "/home/user");
        assert_eq!(a.expand_tilde("a~/b"), "a~/b");
        let e = Account::lookup_in(&d, "nobody-here").unwrap_err();
        assert!(e.to_string().contains("etc/passwd"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
