#!/usr/bin/env python3
"""The cost of Chromium's own sandbox in a session with its own user namespace: cold starts
(pipelines/cold.sh with DRUMS_OVERLAY_ARGS=--userns, to agent-ready) from two image roots that differ
only in /etc/chromium.d/drums (SANDBOX_IMAGES: the file of this branch's pipelines/image.sh, which lets the
sandbox run; PLAIN_IMAGES: one that adds --no-sandbox everywhere, as images built before did), interleaved
in random order within each pair; after each start (and a 1 s settle) the Pss of every process below the
session's init, Chromium's nested renderers included. Prints one JSON object (docs/benchmarks.md).
Usage: pipelines/chromium-sandbox-bench.py SANDBOX_IMAGES PLAIN_IMAGES [PAIRS] (default 10). Takes the
tests' lock."""
import fcntl, json, os, random, statistics, subprocess, sys, time
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if len(sys.argv) < 3:
    sys.exit(__doc__)
roots = {"sandbox": sys.argv[1], "no_sandbox": sys.argv[2]}
n = int(sys.argv[3]) if len(sys.argv) > 3 else 10
env = dict(os.environ, PATH=f"{repo}/target/release:" + os.environ["PATH"], DRUMS_OWNER=str(os.getpid()), DRUMS_OVERLAY_ARGS="--userns")
lock = open("/run/drums/test.lock", "w"); fcntl.flock(lock, fcntl.LOCK_EX)

def children():
    m = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            pp = int(next(l for l in open(f"/proc/{p}/status") if l.startswith("PPid:")).split()[1])
            m.setdefault(pp, []).append(int(p))
        except (OSError, StopIteration):
            pass
    return m

def pss_kib(root):
    m, tot, n, todo = children(), 0, 0, [root]
    while todo:
        p = todo.pop(); todo += m.get(p, [])
        try:
            tot += int(next(l for l in open(f"/proc/{p}/smaps_rollup") if l.startswith("Pss:")).split()[1]); n += 1
        except (OSError, StopIteration):
            pass
    return tot, n

res = {k: {"cold_s": [], "pss_mib": [], "processes": []} for k in roots}
ratios = []
for i in range(n):
    order = list(roots); random.shuffle(order)
    got = {}
    for mode in order:
        e = dict(env, DRUMS_IMAGE_DIR=roots[mode])
        t = time.monotonic()
        o = subprocess.run([f"{repo}/pipelines/cold.sh"], env=e, capture_output=True, text=True)
        dt = time.monotonic() - t
        if o.returncode != 0:
            sys.exit(f"cold.sh ({mode}) failed: {o.stderr}")
        time.sleep(1)
        kib, procs = pss_kib(json.loads(o.stdout)["ns"]["init_pid"])
        subprocess.run(["drums-sweep"], input=o.stdout, env=e, capture_output=True, text=True)
        res[mode]["cold_s"].append(round(dt, 3)); res[mode]["pss_mib"].append(round(kib / 1024, 1)); res[mode]["processes"].append(procs)
        got[mode] = dt
    ratios.append(got["sandbox"] / got["no_sandbox"])
out = {"pairs": n, "method": "pipelines/cold.sh --userns wall time to agent-ready; Pss sum below the init after 1 s", **res,
       "median": {k: {"cold_s": statistics.median(v["cold_s"]), "pss_mib": statistics.median(v["pss_mib"])} for k, v in res.items()},
       "paired_cold_ratio_median": round(statistics.median(ratios), 3), "load_avg": os.getloadavg()}
print(json.dumps(out))
