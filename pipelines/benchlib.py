"""What the Drums benchmarks (bench.py, pool-bench.py) share: running the tools, percentiles, a bootstrap
interval for a ratio of medians, removing a checkpoint, host memory, a session's summed Pss, a least-squares slope."""
import json, os, random, statistics, subprocess, urllib.request

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ)
ENV["PATH"] = os.path.join(HERE, "target/release") + ":" + ENV.get("PATH", "")
# Sessions made by a benchmark belong to it: the cron sweep removes them if the benchmark dies.
ENV["DRUMS_OWNER"] = str(os.getpid())


def sh(cmd, stdin=None, check=True, env=None):
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env or ENV, shell=isinstance(cmd, str))
    if check and p.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
    return p.stdout


def destroy(records):
    if records.strip():
        sh(["drums-sweep"], stdin=records, check=False)


def remove_checkpoint(c):
    """A checkpoint record's directory and its mapped files (drums-ckpt(1)), which live in one of their own."""
    subprocess.run(["rm", "-rf", c["dir"]] + ([c["mapped"]["dir"]] if c.get("mapped") else []))


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def bootstrap_ratio(a, b, q=0.5, draws=2000, seed=1):
    """95% interval of quantile-q(a) / quantile-q(b), resampling both samples."""
    rnd = random.Random(seed)
    rs = []
    for _ in range(draws):
        ra = [rnd.choice(a) for _ in a]
        rb = [rnd.choice(b) for _ in b]
        rs.append(pct(ra, q) / pct(rb, q))
    return [pct(rs, 0.025), pct(rs, 0.975)]


def used_mib():
    info = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        info[k] = int(v.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


def pss_by_tree():
    """A function giving the summed Pss (MiB) of a process and all its descendants, nested PID namespaces
    included (Chromium's sandboxed renderers), from one pass over /proc taken now."""
    kids, pss = {}, {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            pp = int(next(line for line in open(f"/proc/{p}/status") if line.startswith("PPid:")).split()[1])
            pss[int(p)] = int(next(line for line in open(f"/proc/{p}/smaps_rollup") if line.startswith("Pss:")).split()[1]) / 1024
            kids.setdefault(pp, []).append(int(p))
        except (OSError, StopIteration):
            pass

    def of(root):
        tot, todo = 0, [root]
        while todo:
            q = todo.pop()
            tot += pss.get(q, 0)
            todo += kids.get(q, [])
        return tot
    return of


def session_pss_mib(rec, pss=None):
    """A session's summed Pss (MiB): its init and every descendant, nested PID namespaces included (a
    sandboxed Chromium's zygote and renderers live in PID namespaces of their own, so counting the session's
    PID namespace alone misses them). `pss`: a pss_by_tree() already taken, for reading many sessions at one
    moment."""
    return (pss or pss_by_tree())(rec["ns"]["init_pid"])


def slope(xs, ys):
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def summary(xs, digits=3):
    if not xs:
        return None
    return {"p50_s": round(pct(xs, 0.5), digits), "p95_s": round(pct(xs, 0.95), digits), "min_s": round(min(xs), digits), "max_s": round(max(xs), digits), "n": len(xs)}


def restore_ready(ckpt, env=None, count=1, host_ids=False, extra=()):
    """Usable restores: `drums-restore --ready --count COUNT` (restore, reseed and ready check in the tool,
    the siblings of one call concurrently), with `extra` arguments; the ready records' text, one line each.
    Each sibling runs in a user namespace of its own (the default), or with host ids when `host_ids`
    (drums-restore --host-ids: a sibling to be checkpointed). A sibling that fails a step is destroyed by
    the tool; the others are destroyed here before the error is raised."""
    p = subprocess.run(["drums-restore", "--ready", "--count", str(count)] + (["--host-ids"] if host_ids else []) + list(extra), input=ckpt, capture_output=True, text=True, env=env or ENV)
    if p.returncode != 0:
        destroy(p.stdout)
        raise RuntimeError(f"drums-restore --ready: exit {p.returncode}: {p.stderr.strip()[-800:]}")
    return p.stdout


def session_cpu_s(rec):
    """CPU seconds the session's processes used so far, from its own cgroup (v2 cpu.stat usage_usec, v1
    cpuacct.usage); None when the session has no cgroup or the file cannot be read."""
    paths = (rec.get("cgroup") or {}).get("paths") or {}
    try:
        if "unified" in paths:
            for line in open(os.path.join(paths["unified"], "cpu.stat")):
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        if "cpuacct" in paths:
            return int(open(os.path.join(paths["cpuacct"], "cpuacct.usage")).read()) / 1e9
    except OSError:
        return None
    return None


def guest_answers(rec, timeout=10):
    """Whether the session's guest answers GET /platform with "Linux"; (ok, detail)."""
    url = (rec.get("desktop") or {}).get("guest_url")
    if not url:
        return False, "the record has no guest"
    try:
        # No proxy from the environment: the guest is on this host's link to the session.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url + "/platform", timeout=timeout) as r:
            body = r.read().decode(errors="replace")
            return body.strip() == "Linux", body[:80]
    except Exception as e:  # noqa: BLE001 - any failure to answer is the answer
        return False, str(e)[:200]


def meminfo_kib():
    info = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        info[k] = int(v.split()[0])
    return info


def host_inventory(env=None):
    """What Drums holds on this host: the host_inventory record of `drums-sweep --report` (docs/record.md)."""
    return json.loads(sh(["drums-sweep", "--report"], env=env))


def host_resources(env=None):
    """What a session leaves on the host when it is not destroyed: counts of Drums' kernel objects and
    files from drums-sweep --report (mounts below Drums' roots, drums* links, cgroup directories below the
    drums cgroup directories, session directories plus address slots, processes outside the host's PID
    namespace, sessions' policy tables), and the host's open files and memory. Read between sessions,
    every count must come back to its baseline."""
    inv = host_inventory(env)
    m = meminfo_kib()
    open_files = int(open("/proc/sys/fs/file-nr").read().split()[0])
    return {"mounts": len(inv["mounts"]), "drums_links": len(inv["links"]), "drums_cgroups": len(inv["cgroups"]),
            "state_entries": len(inv["sessions"]) + len(inv["slots"]),
            "processes": sum(not p["zombie"] for p in inv["processes"]),
            "policy_tables": sum(t.startswith("inet drums_net_") for t in inv["nft_tables"]),
            "open_files": open_files, "slab_unreclaimable_kib": m["SUnreclaim"], "slab_reclaimable_kib": m["SReclaimable"],
            "mem_available_kib": m["MemAvailable"]}


def bench_lock():
    """The test suite's session lock (/run/drums/test.lock), held until the process exits: a benchmark
    never measures beside the tests or another benchmark."""
    import fcntl
    os.makedirs("/run/drums", exist_ok=True)
    lock = open("/run/drums/test.lock", "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def source_env(env=None):
    """The environment of pipelines/cold.sh for a session to be checkpointed: host ids (drums-overlay create
    --host-ids), since drums-ckpt refuses a session in a user namespace of its own, the default; any other
    DRUMS_OVERLAY_ARGS are kept."""
    e = dict(env or ENV)
    e["DRUMS_OVERLAY_ARGS"] = ("--host-ids " + e.get("DRUMS_OVERLAY_ARGS", "")).strip()
    return e


def source_session(env=None):
    """A new cold session to be checkpointed (host ids, `source_env`): its record text."""
    return sh([os.path.join(HERE, "pipelines/cold.sh")], env=source_env(env))


def fresh_checkpoint():
    """A clean checkpoint (record text) of a new cold session made with host ids; the session is destroyed
    either way. Its siblings get user namespaces of their own (the default of drums-restore)."""
    src = source_session()
    try:
        return sh(["drums-ckpt", "--clean"], stdin=src)
    except Exception:
        destroy(src)
        raise


def write_result(result, out=None):
    """A benchmark's result: indented JSON on stdout, and in the file `out` when one is given."""
    text = json.dumps(result, indent=1)
    if out:
        open(out, "w").write(text + "\n")
    print(text)
