#!/usr/bin/env python3
"""The cost of a session's own user namespace: on the cold path, the stages with `drums-overlay create
--host-ids` and with `--userns` (the default); with `--restore`, a restore of one checkpoint (of a cold
session made with --host-ids) with `drums-restore --host-ids` and with `--userns`, then drums-reseed and
drums-ready. Interleaved in
random order within each pair; prints one JSON object (docs/benchmarks.md).
Usage: pipelines/userns-bench.py [--restore] [PAIRS] (default 10). Takes the tests' lock."""
import fcntl, json, os, random, shutil, statistics, subprocess, sys, time
repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
env = dict(os.environ, PATH=f"{repo}/target/release:" + os.environ["PATH"], DRUMS_OWNER=str(os.getpid()))
lock = open("/run/drums/test.lock", "w"); fcntl.flock(lock, fcntl.LOCK_EX)
args = [a for a in sys.argv[1:] if a != "--restore"]
n = int(args[0]) if args else 10

def sh(argv, rec):
    o = subprocess.run(argv, input=rec, env=env, capture_output=True, text=True)
    if o.returncode != 0:
        raise SystemExit(f"{argv}: {o.stderr}")
    return o.stdout

if "--restore" in sys.argv[1:]:
    source = subprocess.run([f"{repo}/pipelines/cold.sh"], env=dict(env, DRUMS_OVERLAY_ARGS="--host-ids"), capture_output=True, text=True, check=True).stdout
    ckpt = sh(["drums-ckpt"], source)
    res = {m: {"restore_wall_s": [], "restore_total_s": [], "criu_s": [], "usable_s": []} for m in ("plain", "userns")}
    ratios = {"restore_wall": [], "usable": []}
    try:
        for i in range(n):
            order = ["plain", "userns"]; random.shuffle(order)
            got = {}
            for mode in order:
                t = time.monotonic()
                sib = sh(["drums-restore"] + (["--userns"] if mode == "userns" else ["--host-ids"]), ckpt)
                wall = time.monotonic() - t
                ready = sh(["drums-ready"], sh(["drums-reseed"], sib))
                usable = time.monotonic() - t
                sh(["drums-sweep"], ready)
                times = json.loads(sib)["restore"]["times"]
                r = res[mode]
                r["restore_wall_s"].append(wall); r["restore_total_s"].append(times["total_s"]); r["criu_s"].append(times["criu_s"]); r["usable_s"].append(usable)
                got[mode] = (wall, usable)
            ratios["restore_wall"].append(got["userns"][0] / got["plain"][0])
            ratios["usable"].append(got["userns"][1] / got["plain"][1])
    finally:
        shutil.rmtree(json.loads(ckpt)["dir"], ignore_errors=True)
        subprocess.run(["drums-sweep"], input=source, env=env, capture_output=True, text=True)
    med = lambda v: round(statistics.median(v), 4)
    print(json.dumps({"n": n, "method": "pairs of drums-restore (with and without --userns) of one checkpoint, random order within each pair, each followed by drums-reseed and drums-ready and destroyed",
        "median_s": {m: {k: med(v) for k, v in r.items()} for m, r in res.items()},
        "paired_ratio_median": {k: med(v) for k, v in ratios.items()},
        "paired_ratio_range": {k: [round(min(v), 3), round(max(v), 3)] for k, v in ratios.items()}, "raw": res}))
    sys.exit(0)
res = {"plain": [], "userns": []}
pairs = []
for i in range(n):
    order = ["plain", "userns"]; random.shuffle(order)
    got = {}
    for mode in order:
        e = dict(env)
        e["DRUMS_OVERLAY_ARGS"] = "--userns" if mode == "userns" else "--host-ids"
        t = time.monotonic()
        rec = ""; t_ns = None
        for argv in (["drums-overlay", "create"] + (["--userns"] if mode == "userns" else ["--host-ids"]), ["drums-ns", "create"], ["drums-cgroup", "create"], ["drums-desktop", "start"], ["drums-ready"]):
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
