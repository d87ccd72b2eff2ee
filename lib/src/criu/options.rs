//! CRIU's command lines, built in one place: a dump (`Dump`, drums-ckpt) and a restore (`Restore`,
//! drums-restore). Each gives its argv, the `criu_options` its record keeps (the options after the fixed
//! head, in the order CRIU is given them) and the command ready for `criu::run`. Every option is explained
//! where it is added; drums-ckpt(1) and drums-restore(1) explain them to the user.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The key under which a dump leaves the session's network namespace out of the images
/// (`--external net[INODE]:drums-net`); a restore hands CRIU the sibling's own namespace under it.
pub const EXTERNAL_NET: &str = "drums-net";
const EXTERNAL: &str = "--external";

/// `net[INODE]:drums-net`, the value of `--external` naming the network namespace `inode`.
fn external_net_value(inode: u64) -> String {
    format!("net[{inode}]:{EXTERNAL_NET}")
}

/// Whether options a dump was given (a checkpoint's `criu_options`) leave the network namespace out of
/// the images, as `Dump` does.
pub fn leaves_net_out(options: &[String]) -> bool {
    options.windows(2).any(|w| w[0] == EXTERNAL && w[1].strip_prefix("net[").and_then(|v| v.strip_suffix(&format!("]:{EXTERNAL_NET}"))).is_some())
}

/// The options of a dump that freezes through the cgroup `freezer` (the session's, `cgroup::freezer_dir`),
/// if it has one: the tree is frozen as a whole rather than task by task (a tree that forks while being
/// seized is frozen all the same).
pub fn freeze_cgroup_options(freezer: Option<&Path>) -> Vec<String> {
    match freezer {
        Some(d) => vec!["--freeze-cgroup".into(), d.display().to_string()],
        None => vec![],
    }
}

fn strings(s: &[&str]) -> Vec<String> {
    s.iter().map(|s| s.to_string()).collect()
}

/// `criu dump` of a session's tree.
pub struct Dump {
    /// The session's init (host PID): the whole tree from it.
    pub pid: i32,
    pub images: PathBuf,
    /// The log's file name, in `images`.
    pub log: String,
    /// The inode of the session's network namespace, left out of the images.
    pub external_net: u64,
    /// The session's freezer cgroup (`cgroup::freezer_dir`); None: no cgroups.
    pub freeze_cgroup: Option<PathBuf>,
    /// Run by CRIU at each of its actions (drums-ckpt's post-dump.sh).
    pub action_script: PathBuf,
    pub leave_running: bool,
}

impl Dump {
    /// The options after `dump -t PID -D IMAGES -o LOG`, as the checkpoint record keeps them.
    pub fn options(&self) -> Vec<String> {
        // Each is explained in drums-ckpt(1).
        let mut o = strings(&[
            "--file-locks",
            "--ghost-limit",
            "64M",
            "--irmap-scan-path",
            "/usr/share/zoneinfo",
            "--irmap-scan-path",
            "/usr/share/dbus-1",
            "--irmap-scan-path",
            "/etc/dbus-1",
            "--tcp-close",
            "--network-lock",
            "skip",
        ]);
        // The session's network namespace is left out of the images: each restore brings a namespace of
        // its own, built before CRIU runs (see EXTERNAL_NET).
        o.extend([EXTERNAL.to_string(), external_net_value(self.external_net)]);
        o.extend(freeze_cgroup_options(self.freeze_cgroup.as_deref()));
        o
    }

    /// CRIU's arguments: the fixed head, `options()`, then the action script and `--leave-running`
    /// (not part of the recorded options).
    pub fn argv(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["dump".into(), "-t".into(), self.pid.to_string().into(), "-D".into(), self.images.clone().into(), "-o".into(), self.log.clone().into()];
        a.extend(self.options().into_iter().map(OsString::from));
        a.extend(["--action-script".into(), self.action_script.clone().into()]);
        if self.leave_running {
            a.push("--leave-running".into());
        }
        a
    }

    /// `criu::command()` with `argv()`, ready for `criu::run`.
    pub fn command(&self) -> std::process::Command {
        let mut cmd = super::command();
        cmd.args(self.argv());
        cmd
    }
}

/// Where CRIU puts a restored tree's cgroups.
///
/// CRIU records each task's cgroups in the images and by default (`--manage-cgroups=soft`) puts restored
/// tasks back into *the same paths*, creating them when missing: a sibling would land in the source
/// session's cgroups, or recreate the source's directories after the source was destroyed, which then
/// nobody removes (tested: tests/cgroup.rs). `--cgroup-root CONTROLLER:/drums/<sibling>` rewrites the
/// dumped root cgroup of that controller to the sibling's own (made beforehand, with its limits, by
/// `cgroup::create`); soft mode leaves the properties of existing directories alone, so the sibling's
/// limits stay. Only the hierarchies Drums manages are named: the others keep the dumped paths (on this
/// machine the root). On v2 the one unified hierarchy has no controller name, so the root is given
/// without one.
#[derive(Debug, Clone, PartialEq)]
pub enum CgroupPlacement {
    /// The sibling has no cgroups: `--manage-cgroups=ignore`, CRIU leaves cgroups alone and the tree
    /// stays in the cgroups of the process running CRIU, so no source directory is recreated.
    Ignore,
    /// Into the sibling's own cgroups: per hierarchy its controller (None: v2's unified hierarchy) and
    /// its cgroup as /proc/PID/cgroup names it (`cgroup::Section::roots`).
    Own(Vec<(Option<String>, String)>),
}

impl CgroupPlacement {
    /// For a sibling with this cgroup section (None: no cgroups).
    pub fn of(section: Option<&crate::cgroup::Section>) -> CgroupPlacement {
        match section {
            None => CgroupPlacement::Ignore,
            Some(s) => CgroupPlacement::Own(s.roots().into_iter().map(|(c, p)| (c.map(str::to_string), p.to_string())).collect()),
        }
    }

    pub fn options(&self) -> Vec<String> {
        match self {
            CgroupPlacement::Ignore => vec!["--manage-cgroups=ignore".to_string()],
            CgroupPlacement::Own(roots) => {
                let mut o = vec!["--manage-cgroups=soft".to_string()];
                for (ctrl, p) in roots {
                    o.push("--cgroup-root".into());
                    o.push(match ctrl {
                        Some(c) => format!("{c}:{p}"),
                        None => p.clone(),
                    });
                }
                o
            }
        }
    }
}

/// `criu restore` of a checkpoint's images into a sibling.
pub struct Restore {
    pub images: PathBuf,
    /// CRIU's working directory (the sibling's state directory), where the log goes.
    pub work_dir: PathBuf,
    /// The log's file name, in `work_dir`.
    pub log: String,
    /// Where CRIU writes the restored init's host PID.
    pub pidfile: PathBuf,
    /// The sibling's merged overlay: the restored tree's `/`.
    pub root: PathBuf,
    pub cgroups: CgroupPlacement,
    /// The descriptor number at which CRIU finds the sibling's network namespace.
    pub inherit_netns_fd: i32,
    /// CRIU runs as root of the sibling's own user namespace (criu::AsUsernsRoot): `--unprivileged`,
    /// CRIU's mode for a restorer without the host's capabilities (socket buffers are set with
    /// SO_SNDBUF/SO_RCVBUF, bounded by the host's net.core.*mem_max, where SO_*BUFFORCE needs host
    /// root).
    pub as_userns_root: bool,
}

impl Restore {
    /// The options after `restore -D IMAGES -W WORK_DIR -o LOG --pidfile PIDFILE`, as the sibling's
    /// record keeps them.
    pub fn options(&self) -> Vec<String> {
        // Each is explained in drums-restore(1).
        let mut o = strings(&["--file-locks", "--tcp-close", "--restore-detached"]);
        o.extend(["--root".to_string(), self.root.display().to_string()]);
        // Always: without cgroups this says --manage-cgroups=ignore, else CRIU would put a sibling of a
        // source that had cgroups back into (and recreate) the source's cgroups.
        o.extend(self.cgroups.options());
        // The sibling's own network namespace, under the key the dump left the source's out with.
        o.extend(["--inherit-fd".to_string(), format!("fd[{}]:{EXTERNAL_NET}", self.inherit_netns_fd)]);
        if self.as_userns_root {
            o.push("--unprivileged".to_string());
        }
        o
    }

    pub fn argv(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec![
            "restore".into(),
            "-D".into(),
            self.images.clone().into(),
            "-W".into(),
            self.work_dir.clone().into(),
            "-o".into(),
            self.log.clone().into(),
            "--pidfile".into(),
            self.pidfile.clone().into(),
        ];
        a.extend(self.options().into_iter().map(OsString::from));
        a
    }

    /// `criu::command()` with `argv()`, ready for `criu::run`; the caller still places the network
    /// namespace at `inherit_netns_fd` (in a pre_exec).
    pub fn command(&self) -> std::process::Command {
        let mut cmd = super::command();
        cmd.args(self.argv());
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::Section;
    use serde_json::json;

    fn v1() -> Section {
        serde_json::from_value(json!({
            "version": "v1",
            "paths": {"cpu": "/sys/fs/cgroup/cpu/drums/d-2", "freezer": "/sys/fs/cgroup/freezer/drums/d-2", "memory": "/sys/fs/cgroup/memory/drums/d-2"},
            "proc_paths": {"cpu": "/drums/d-2", "freezer": "/drums/d-2", "memory": "/drums/d-2"},
            "requested": crate::cgroup::Limits::default(), "read_back": {}, "applied": true, "processes_moved": null, "created_at": 0.0
        }))
        .unwrap()
    }

    fn v2() -> Section {
        serde_json::from_value(json!({
            "version": "v2",
            "paths": {"unified": "/sys/fs/cgroup/drums/d-2"},
            "proc_paths": {"unified": "/drums/d-2"},
            "requested": crate::cgroup::Limits::default(), "read_back": {}, "applied": true, "processes_moved": null, "created_at": 0.0
        }))
        .unwrap()
    }

    fn restore(section: Option<&Section>) -> Vec<String> {
        let r = Restore {
            images: "/ck/c-1/images".into(),
            work_dir: "/run/drums/sessions/d-2".into(),
            log: "restore.log".into(),
            pidfile: "/run/drums/sessions/d-2/init.pid".into(),
            root: "/run/drums/sessions/d-2/root".into(),
            cgroups: CgroupPlacement::of(section),
            inherit_netns_fd: 100,
            as_userns_root: false,
        };
        let argv: Vec<String> = r.argv().into_iter().map(|a| a.into_string().unwrap()).collect();
        assert_eq!(argv[9..], r.options()[..], "the recorded options are the argv after its head");
        argv
    }

    fn dump(section: Option<&Section>, leave_running: bool) -> Vec<String> {
        let d = Dump {
            pid: 4242,
            images: "/ck/c-1.partial/images".into(),
            log: "dump.log".into(),
            external_net: 4026532999,
            freeze_cgroup: crate::cgroup::freezer_dir(section),
            action_script: "/ck/c-1.partial/post-dump.sh".into(),
            leave_running,
        };
        let argv: Vec<String> = d.argv().into_iter().map(|a| a.into_string().unwrap()).collect();
        let n = d.options().len();
        assert_eq!(argv[7..7 + n], d.options()[..], "the recorded options are the argv after its head");
        argv
    }

    const RESTORE_HEAD: &str = "restore -D /ck/c-1/images -W /run/drums/sessions/d-2 -o restore.log --pidfile /run/drums/sessions/d-2/init.pid \
        --file-locks --tcp-close --restore-detached --root /run/drums/sessions/d-2/root";
    const DUMP_HEAD: &str = "dump -t 4242 -D /ck/c-1.partial/images -o dump.log --file-locks --ghost-limit 64M \
        --irmap-scan-path /usr/share/zoneinfo --irmap-scan-path /usr/share/dbus-1 --irmap-scan-path /etc/dbus-1 \
        --tcp-close --network-lock skip --external net[4026532999]:drums-net";

    #[test]
    fn restore_argv_of_a_v1_section_names_each_controller() {
        assert_eq!(
            restore(Some(&v1())).join(" "),
            format!("{RESTORE_HEAD} --manage-cgroups=soft --cgroup-root cpu:/drums/d-2 --cgroup-root freezer:/drums/d-2 --cgroup-root memory:/drums/d-2 --inherit-fd fd[100]:drums-net")
        );
    }

    #[test]
    fn restore_argv_of_a_v2_section_names_the_root_alone() {
        assert_eq!(restore(Some(&v2())).join(" "), format!("{RESTORE_HEAD} --manage-cgroups=soft --cgroup-root /drums/d-2 --inherit-fd fd[100]:drums-net"));
    }

    #[test]
    fn restore_argv_without_a_section_ignores_cgroups() {
        assert_eq!(restore(None).join(" "), format!("{RESTORE_HEAD} --manage-cgroups=ignore --inherit-fd fd[100]:drums-net"));
    }

    #[test]
    fn dump_argv_freezes_through_the_sessions_freezer() {
        assert_eq!(
            dump(Some(&v1()), false).join(" "),
            format!("{DUMP_HEAD} --freeze-cgroup /sys/fs/cgroup/freezer/drums/d-2 --action-script /ck/c-1.partial/post-dump.sh")
        );
        assert_eq!(
            dump(Some(&v2()), true).join(" "),
            format!("{DUMP_HEAD} --freeze-cgroup /sys/fs/cgroup/drums/d-2 --action-script /ck/c-1.partial/post-dump.sh --leave-running")
        );
        assert_eq!(dump(None, false).join(" "), format!("{DUMP_HEAD} --action-script /ck/c-1.partial/post-dump.sh"));
    }

    #[test]
    fn a_dumps_options_say_the_net_was_left_out() {
        let d = Dump { pid: 1, images: "/i".into(), log: "dump.log".into(), external_net: 7, freeze_cgroup: None, action_script: "/s".into(), leave_running: false };
        assert!(leaves_net_out(&d.options()));
        assert!(!leaves_net_out(&strings(&["--file-locks", "--tcp-close"])));
        assert!(!leaves_net_out(&strings(&["--external", "net[7]:other"])));
    }
}
