#!/usr/bin/env python3
"""What Chromium's sandbox costs a restored sibling (drums(7), "Chromium's sandbox in restored siblings").
A session whose Chromium runs its sandbox cannot be checkpointed (CRIU 4.2 does not dump nested PID
namespaces), so a sandboxed session is had two ways, measured side by side in one run, in random order
within each round:
  cold:             pipelines/cold.sh with DRUMS_OVERLAY_ARGS=--userns, to agent-ready (Chromium starts
                    sandboxed);
  sibling_sandbox:  drums-restore --userns from a clean checkpoint of an ordinary session (its Chromium
                    runs --no-sandbox) | drums-reseed --no-browser (the old Chromium is about to end: its
                    renderer is not renewed) | drums-desktop sandbox (that Chromium closed, a new one
                    started with its sandbox) | drums-ready, to agent-ready;
  sibling_plain:    drums-restore --userns --ready alone (the sibling keeps its checkpoint's unsandboxed
                    Chromium): what the restart adds.
Each time is the wall time of the whole chain (the tools' own, this process's clock). After each (and a
1 s settle) the Pss of every process below the session's init, Chromium's nested ones included. Each
session is destroyed (untimed) before the next. The figure: median(cold) / median(sibling_sandbox), with a
95% bootstrap interval (2000 resamples of both arms). Prints one JSON object (--out FILE: also written
there). Holds the tests' session lock.
Usage: pipelines/sibling-sandbox-bench.py [--rounds 20] [--out FILE]"""
import argparse, json, os, random, statistics, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ENV, HERE, bench_lock, bootstrap_ratio, destroy, remove_checkpoint, sh, source_session, summary, write_result  # noqa: E402


def children():
    m = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            pp = int(next(line for line in open(f"/proc/{p}/status") if line.startswith("PPid:")).split()[1])
            m.setdefault(pp, []).append(int(p))
        except (OSError, StopIteration):
            pass
    return m


def tree_pss_mib(root):
    """Summed Pss (MiB) of `root` and every descendant (nested PID namespaces included), and their count."""
    m, tot, n, todo = children(), 0, 0, [root]
    while todo:
        p = todo.pop()
        todo += m.get(p, [])
        try:
            tot += int(next(line for line in open(f"/proc/{p}/smaps_rollup") if line.startswith("Pss:")).split()[1])
            n += 1
        except (OSError, StopIteration):
            pass
    return tot / 1024, n


def sandboxed(rec):
    """Whether the session's Chromium runs without --no-sandbox (its command line, read from /proc)."""
    pid = next(p["host_pid"] for p in rec["desktop"]["processes"] if p["role"] == "chromium")
    args = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").split()
    return b"--no-sandbox" not in args


def cold():
    return sh([os.path.join(HERE, "pipelines/cold.sh")], env=dict(ENV, DRUMS_OVERLAY_ARGS="--userns"))


def sibling(ckpt, restart):
    if not restart:
        return sh(["drums-restore", "--userns", "--ready"], stdin=ckpt)
    out = sh(["drums-restore", "--userns"], stdin=ckpt)
    try:
        for step in (["drums-reseed", "--no-browser"], ["drums-desktop", "sandbox"], ["drums-ready"]):
            out = sh(step, stdin=out)
        return out
    except Exception:
        destroy(out)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out")
    a = ap.parse_args()
    lock = bench_lock()  # noqa: F841 - held for the whole run
    src = source_session()  # host ids: a session in its own user namespace cannot be checkpointed
    try:
        ckpt = sh(["drums-ckpt", "--clean"], stdin=src)
    except Exception:
        destroy(src)
        raise
    arms = {"cold": cold, "sibling_sandbox": lambda: sibling(ckpt, True), "sibling_plain": lambda: sibling(ckpt, False)}
    res = {k: {"s": [], "pss_mib": [], "processes": [], "sandboxed": []} for k in arms}
    try:
        for r in range(a.rounds):
            order = list(arms)
            random.shuffle(order)
            for k in order:
                t = time.monotonic()
                out = arms[k]()
                dt = time.monotonic() - t
                try:
                    rec = json.loads(out.strip().splitlines()[-1])
                    time.sleep(1)
                    pss, procs = tree_pss_mib(rec["ns"]["init_pid"])
                    res[k]["sandboxed"].append(sandboxed(rec))
                finally:
                    destroy(out)
                res[k]["s"].append(round(dt, 3))
                res[k]["pss_mib"].append(round(pss, 1))
                res[k]["processes"].append(procs)
            print(f"sibling-sandbox: round {r + 1}/{a.rounds}: " + ", ".join(f"{k} {res[k]['s'][-1]:.2f} s" for k in arms), file=sys.stderr)
    finally:
        remove_checkpoint(json.loads(ckpt))
    c, s, p = res["cold"]["s"], res["sibling_sandbox"]["s"], res["sibling_plain"]["s"]
    out = {
        "drums": 1, "type": "sibling-sandbox-benchmark", "rounds": a.rounds,
        "method": "wall time of each chain to agent-ready, arms in random order within each round, one run; Pss summed over the init's process tree after a 1 s settle",
        "machine": {"cores": os.cpu_count(), "kernel": os.uname().release, "load_avg_end": os.getloadavg()},
        "arms": {k: {"time": summary(v["s"]), "pss_mib_median": statistics.median(v["pss_mib"]), "processes_median": statistics.median(v["processes"]),
                     "chromium_sandboxed": f"{sum(v['sandboxed'])}/{len(v['sandboxed'])}", "raw_s": v["s"], "raw_pss_mib": v["pss_mib"]} for k, v in res.items()},
        "cold_over_sibling_sandbox": {"ratio": round(statistics.median(c) / statistics.median(s), 3), "ci95": [round(x, 3) for x in bootstrap_ratio(c, s)],
                                      "method": "median(cold) / median(sibling_sandbox); 95% bootstrap interval, 2000 resamples of both arms", "n": [len(c), len(s)]},
        "cold_over_sibling_plain": {"ratio": round(statistics.median(c) / statistics.median(p), 3), "ci95": [round(x, 3) for x in bootstrap_ratio(c, p)], "n": [len(c), len(p)]},
        "restart_cost_s": {"median_difference": round(statistics.median(s) - statistics.median(p), 3), "method": "median(sibling_sandbox) - median(sibling_plain)"},
    }
    write_result(out, a.out)


if __name__ == "__main__":
    main()
