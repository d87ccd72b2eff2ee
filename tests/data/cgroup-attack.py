# The cgroup escapes of issue 30, tried from inside a session (as its `user`, or as session root through
# sudo): write the session's own limits (memory, pids, cpu) or leave its cgroup, see other sessions'
# cgroups (their names, their figures), mount cgroupfs (v1 and v2, and sysfs to reach /sys/fs/cgroup).
# Run by tests/escape_cgroup.rs on this host (cgroup v1 hybrid) and by tests/data/v2-guest.sh in the
# cgroup-v2-only QEMU guest, both through `drums-ns exec`, with `python3 -c "$(cat this file)" OTHER...`,
# OTHER being the ids of other live sessions, which nothing readable here may name. Prints one line per
# attempt: `NAME: refused ...`, `NAME: ESCAPED ...`, or `NAME: info ...` for what is only reported; the
# host side (limits read back, the tree's directories, the mounts) is checked unchanged by the caller.
import ctypes, errno, os, sys

libc = ctypes.CDLL(None, use_errno=True)
others = [a for a in sys.argv[1:] if a]


def out(name, r):
    print(f"{name}: {r}", flush=True)


def err():
    e = ctypes.get_errno()
    return f"errno {e} {errno.errorcode.get(e, '?')}"


# ---- mount cgroupfs (v1 hierarchies, a named v1 hierarchy, v2) and sysfs, with mount(2) and fsopen(2) ----
target = f"/tmp/drums-cgroup-escape-{os.getpid()}"
os.makedirs(target, exist_ok=True)
for name, fstype, data in [
    ("mount cgroup v1 memory", b"cgroup", b"memory"),
    ("mount cgroup v1 pids", b"cgroup", b"pids"),
    ("mount cgroup v1 cpu", b"cgroup", b"cpu,cpuacct"),
    ("mount cgroup v1 named", b"cgroup", b"none,name=drums-escape"),
    ("mount cgroup v2", b"cgroup2", None),
    ("mount sysfs", b"sysfs", None),
]:
    r = libc.mount(fstype, target.encode(), fstype, 0, data)
    if r == 0:
        out(name, f"ESCAPED (mounted on {target}: {sorted(os.listdir(target))[:8]})")
        libc.umount2(target.encode(), 2)
    else:
        out(name, f"refused {err()}")
for fstype in [b"cgroup", b"cgroup2", b"sysfs"]:
    fd = libc.syscall(430, fstype, 0)  # fsopen
    out(f"fsopen {fstype.decode()}", f"refused {err()}" if fd < 0 else f"ESCAPED (fd {fd})")
r = libc.syscall(272, 0x02000000)  # unshare(CLONE_NEWCGROUP)
out("unshare cgroup namespace", f"refused {err()}" if r < 0 else "ESCAPED (a cgroup namespace of its own)")
os.rmdir(target)

# ---- write its own cgroup's limits, or leave its cgroup ----
# Every place a cgroup tree could show in the session, joined with every path /proc/self/cgroup names.
own = []
for line in open("/proc/self/cgroup").read().splitlines():
    _, ctrls, path = line.split(":", 2)
    own.append((ctrls, path))
out("own cgroups", "info " + " ".join(f"{c or 'v2'}={p}" for c, p in own))
roots = ["/sys/fs/cgroup", "/proc/1/root/sys/fs/cgroup", "/proc/self/root/sys/fs/cgroup"]
hier = ["", "unified", "memory", "pids", "cpu", "cpu,cpuacct", "cpuacct", "freezer", "systemd"]
dirs = set()
for r in roots:
    for h in hier:
        base = os.path.join(r, h) if h else r
        dirs.add(base)
        for _, p in own:
            dirs.add(os.path.normpath(base + "/" + p))
            # The drums parent and its parents: where a session could raise its parent's limit instead.
            q = os.path.dirname(p)
            while q and q != "/":
                dirs.add(os.path.normpath(base + "/" + q))
                q = os.path.dirname(q)
present = sorted(d for d in dirs if os.path.isdir(d))
# A plain directory of the session's own root (an image's empty /sys/fs/cgroup) is no cgroup: one is.
cgdirs = [d for d in present if os.path.exists(d + "/cgroup.procs") or os.path.exists(d + "/tasks")]
out("cgroup directories reachable", ("ESCAPED " + " ".join(cgdirs[:8])) if cgdirs else f"refused (none of {len(dirs)} places is a cgroup directory; plain directories there: {present[:4]})")
sysfs = "/sys/fs/cgroup"
out("sys/fs/cgroup", "info " + (f"{len(os.listdir(sysfs))} entries" if os.path.isdir(sysfs) else "absent") + f"; /sys has {sorted(os.listdir('/sys'))[:6] if os.path.isdir('/sys') else 'nothing'}")


def try_writes(name, files, value):
    tried, escaped, errs = 0, [], set()
    for d in sorted(dirs):
        for f in files:
            p = os.path.join(d, f)
            tried += 1
            try:
                fd = os.open(p, os.O_WRONLY)
            except OSError as e:
                errs.add(errno.errorcode.get(e.errno, str(e.errno)))
                continue
            try:
                os.write(fd, value)
                escaped.append(p)
            except OSError as e:
                errs.add(errno.errorcode.get(e.errno, str(e.errno)) + " on write")
            finally:
                os.close(fd)
    out(name, f"ESCAPED (wrote {value!r} to {escaped})" if escaped else f"refused ({tried} files tried: {' '.join(sorted(errs))})")


try_writes("write own memory limit", ["memory.max", "memory.high", "memory.swap.max", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.soft_limit_in_bytes"], b"max\n")
try_writes("write own memory limit (v1 value)", ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"], b"-1\n")
try_writes("write own pids limit", ["pids.max"], b"max\n")
try_writes("write own cpu limit", ["cpu.max", "cpu.weight", "cpu.cfs_quota_us", "cpu.shares"], b"max\n")
try_writes("write own cpu limit (v1 value)", ["cpu.cfs_quota_us"], b"-1\n")
try_writes("thaw or freeze through the freezer", ["cgroup.freeze", "freezer.state"], b"0\n")
try_writes("leave its cgroup", ["cgroup.procs", "tasks"], f"{os.getpid()}\n".encode())
try_writes("give controllers away", ["cgroup.subtree_control"], b"-memory -pids -cpu\n")
try_writes("make a cgroup release agent", ["release_agent", "notify_on_release"], b"1\n")
made = []
for d in cgdirs:
    try:
        os.mkdir(os.path.join(d, "drums-escape"))
        made.append(d)
        os.rmdir(os.path.join(d, "drums-escape"))
    except OSError:
        pass
out("make a cgroup", f"ESCAPED (made drums-escape in {made})" if made else f"refused ({len(cgdirs)} cgroup directories to make one in)")

# ---- see other sessions' cgroups: their names anywhere readable, the tree, their figures ----
seen = []
sources = ["/proc/self/mountinfo", "/proc/self/cgroup", "/proc/cgroups", "/proc/self/mounts"]
for pid in os.listdir("/proc"):
    if pid.isdigit():
        sources += [f"/proc/{pid}/cgroup", f"/proc/{pid}/mountinfo"]
read = 0
for s in sources:
    try:
        t = open(s, "rb").read().decode(errors="replace")
    except OSError:
        continue
    read += 1
    for o in others:
        if o in t:
            seen.append(f"{s} names {o}")
out("other sessions' names", f"ESCAPED {seen[:6]}" if seen else f"refused ({read} files read, none names any of {len(others)} other sessions)")
paths = set()
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            for line in open(f"/proc/{pid}/cgroup").read().splitlines():
                paths.add(line.split(":", 2)[2])
        except OSError:
            pass
mine = {p for _, p in own}
foreign = sorted(p for p in paths - mine if "/d-" in p or "/drums" in p)
out("cgroups of the session's processes", f"ESCAPED (a process in another drums cgroup: {foreign})" if foreign else f"refused (every drums cgroup shown is its own: {sorted(p for p in paths if '/drums' in p)})")
walked, named = 0, []
for top in ["/sys", "/proc/1/root/sys"]:
    for d, subdirs, files in os.walk(top):
        walked += 1
        if walked > 20000:
            break
        for n in subdirs + files:
            if any(o in n for o in others) or n.startswith("d-") and len(n) > 8:
                named.append(os.path.join(d, n))
out("other sessions' cgroup directories", f"ESCAPED {named[:6]}" if named else f"refused ({walked} directories of /sys walked, no session's cgroup)")
fig = []
for d in cgdirs:
    for f in ["memory.current", "memory.usage_in_bytes", "pids.current", "cpu.stat", "cpuacct.usage"]:
        if os.path.exists(os.path.join(d, f)):
            fig.append(os.path.join(d, f))
out("other sessions' figures", f"ESCAPED (cgroup figures readable: {fig[:6]})" if fig else "refused (no cgroup figure file is reachable)")
# The host's count of cgroups (how many sessions run beside this one): /proc/cgroups is masked.
try:
    counts = [l for l in open("/proc/cgroups").read().splitlines()[1:] if l.strip()]
    out("host cgroup counts", f"ESCAPED (/proc/cgroups: {counts[:3]})" if counts else "refused (/proc/cgroups is empty: masked)")
except OSError as e:
    out("host cgroup counts", f"refused (/proc/cgroups unreadable: {e.strerror})")
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
out("boundary", f"info CapEff={status['CapEff'].strip()} Seccomp={status['Seccomp'].strip()} uid={os.getuid()}")
