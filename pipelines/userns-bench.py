#!/usr/bin/env python3
"""The cost of a session's own user namespace on the cold path: the stages with and without
`drums-overlay create --userns`, interleaved in random order within each pair; prints one JSON object
(docs/benchmarks.md). Usage: pipelines/userns-bench.py [PAIRS] (default 10). Takes the tests' lock."""
import fcntl, json, os, random, statistics, subprocess, sys, time
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
env = dict(os.environ, PATH=f"{repo}/target/release:" + os.environ["PATH"], DRUMS_OWNER=str(os.getpid()))
lock = open("/run/drums/test.lock", "w"); fcntl.flock(lock, fcntl.LOCK_EX)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
res = {"plain": [], "userns": []}
pairs = []
for i in range(n):
    order = ["plain", "userns"]; random.shuffle(order)
    got = {}
    for mode in order:
        e = dict(env)
        if mode == "userns": e["DRUMS_OVERLAY_ARGS"] = "--userns"
        t = time.monotonic()
        rec = ""; t_ns = None
        for argv in (["drums-overlay", "create"] + (["--userns"] if mode == "userns" else []), ["drums-ns", "create"], ["drums-cgroup", "create"], ["drums-desktop", "start"], ["drums-ready"]):
            o = subprocess.run(argv, input=rec, env=e, capture_output=True, text=True)
            if o.returncode != 0:
                print("fail", mode, argv, o.stderr, file=sys.stderr); break
            if argv[0] != "drums-ready": rec = o.stdout
            if argv[0] == "drums-ns": t_ns = time.monotonic() - t
        dt = time.monotonic() - t
        subprocess.run(["drums-sweep"], input=rec, env=env, capture_output=True, text=True)
        res[mode].append(dt); got[mode] = dt
        res.setdefault(mode + "_ns", []).append(t_ns); got[mode + "_ns"] = t_ns
    pairs.append(got["userns"] / got["plain"])
    res.setdefault("pairs_ns", []).append(got["userns_ns"] / got["plain_ns"])
print(json.dumps({"n": n, "plain_median_s": statistics.median(res["plain"]), "userns_median_s": statistics.median(res["userns"]),
  "paired_ratio_median": statistics.median(pairs),
  "plain_overlay_ns_median_s": statistics.median(res["plain_ns"]), "userns_overlay_ns_median_s": statistics.median(res["userns_ns"]),
  "paired_ratio_overlay_ns_median": statistics.median(res["pairs_ns"]), "plain": res["plain"], "userns": res["userns"]}))
