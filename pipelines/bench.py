#!/usr/bin/env python3
"""Drums start-up benchmark: cold start against restore, arms interleaved, on this machine.

Time to agent-ready per start, measured as the wall time of the whole command chain, from the first tool
started to drums-ready's exit with the session ready:
  cold             pipelines/cold.sh (drums-overlay, drums-ns, drums-desktop, drums-ready)
  restore          drums-restore --ready (restore, reseed, ready check in one call, as pipelines/restore.sh
                   runs it: the usable restore, clone hygiene on)
  restore_raw      drums-restore | drums-ready                      (NOT usable: siblings are clones)
  cold_nocg, restore_nocg   cold and restore without cgroups (DRUMS_CGROUP_ARGS=none, drums-restore
                   --no-cgroup): the other arms run under the default limits; these two price them
  restore_chain    drums-restore | drums-reseed | drums-ready (the same steps as three tools, as before the
                   one call)
  cold_hostids, restore_hostids   cold and restore with host ids (DRUMS_OVERLAY_ARGS=--host-ids,
                   drums-restore --host-ids): the other arms run each session in a user namespace of its own
                   (the default); these two price it
Starts are interleaved (cold, restore, restore_raw, cold, ...) so that machine noise hits every arm alike;
each session is destroyed (untimed) before the next start. The ratio cold p50 / restore p50 comes with a
bootstrap 95% interval (resampling both arms, 2000 draws).

Memory per added session: for each arm, sessions are started one by one up to --mem-sessions and kept
alive; after each start (and a settle pause) host used memory (MemTotal - MemAvailable) is read; the slope
of a least-squares line over 1..N is the memory per added session. Beside it, the summed Pss of every
process in each session (smaps_rollup), the mean over the live sessions.

Prints one JSON object. Every figure carries its unit, sample count and method. The benchmark holds the test
suite's session lock (/run/drums/test.lock) while it runs, so it never measures beside the tests.
Usage: pipelines/bench.py [--starts 20] [--arms cold,restore,restore_raw] [--mem-sessions 6] [--out FILE]
       pipelines/bench.py --arms cold,restore,cold_nocg,restore_nocg --mem-sessions 0   (what the limits cost)
       pipelines/bench.py --arms cold,restore,cold_hostids,restore_hostids   (what the user namespace costs)
"""
import argparse, json, os, statistics, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import HERE, ENV, bench_lock, bootstrap_ratio, destroy, pct, remove_checkpoint, session_pss_mib, sh, slope, source_session, summary, used_mib, write_result  # noqa: E402

NO_CGROUP_ENV = dict(ENV, DRUMS_CGROUP_ARGS="none")


def start(arm, ckpt):
    """One start of an arm; returns (seconds to agent-ready, final record text)."""
    t0 = time.monotonic()
    if arm in ("cold", "cold_nocg", "cold_hostids"):
        env = NO_CGROUP_ENV if arm == "cold_nocg" else dict(ENV, DRUMS_OVERLAY_ARGS="--host-ids") if arm == "cold_hostids" else None
        out = sh([os.path.join(HERE, "pipelines/cold.sh")], env=env)
    elif arm in ("restore", "restore_nocg", "restore_hostids"):
        extra = {"restore_nocg": ["--no-cgroup"], "restore_hostids": ["--host-ids"]}.get(arm, [])
        out = sh(["drums-restore", "--ready"] + extra, stdin=ckpt)
    else:
        restored = sh(["drums-restore"], stdin=ckpt)
        try:
            mid = sh(["drums-reseed"], stdin=restored) if arm == "restore_chain" else restored
            out = sh(["drums-ready"], stdin=mid)
        except Exception:
            destroy(restored)
            raise
    dt = time.monotonic() - t0
    rec = json.loads(out)
    if not rec.get("ready", {}).get("ready"):
        destroy(out)
        raise RuntimeError(f"{arm}: not ready: {rec.get('ready')}")
    return dt, out


def memory(arm, ckpt, n, settle):
    recs, used, pss = [], [], []
    base = used_mib()
    try:
        for i in range(n):
            _, out = start(arm, ckpt)
            recs.append(out)
            time.sleep(settle)
            used.append(used_mib())
        pss = [session_pss_mib(json.loads(r)) for r in recs]
    finally:
        for r in recs:
            destroy(r)
    xs = list(range(1, n + 1))
    return {
        "per_added_session_mib": round(slope(xs, used), 1) if n >= 2 else None,
        "per_added_session_method": f"least-squares slope of host used memory (MemTotal-MemAvailable) over 1..{n} live sessions, {settle} s settle after each start",
        "host_used_mib_series": [round(u - base, 1) for u in used],
        "pss_mean_mib": round(statistics.mean(pss), 1) if pss else None,
        "pss_method": "sum of Pss (smaps_rollup) over a session's init and every descendant (nested PID namespaces included), mean over the live sessions",
        "n": n,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--arms", default="cold,restore,restore_raw")
    ap.add_argument("--mem-sessions", type=int, default=6)
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--out")
    a = ap.parse_args()
    arms = a.arms.split(",")
    lock = bench_lock()  # noqa: F841 - held for the whole run
    result = {"drums": 1, "type": "benchmark", "machine": {"cores": os.cpu_count(), "kernel": os.uname().release},
              "method": "interleaved starts, wall time from the first tool to drums-ready's exit; sessions destroyed between starts (untimed); release build"}
    ckpt = ""
    if any(x.startswith("restore") for x in arms):
        src = source_session()  # host ids: drums-ckpt's source
        t0 = time.monotonic()
        ckpt = sh(["drums-ckpt", "--clean"], stdin=src)
        c = json.loads(ckpt)
        result["checkpoint"] = {"dump_s": round(c["dump_s"], 3), "ckpt_tool_s": round(time.monotonic() - t0, 3), "image_mib": round(c["image_bytes"] / 2**20, 1),
                                "layer_kib": round(c["layer_bytes"] / 1024, 1), "n": 1, "method": "criu dump wall time inside drums-ckpt; whole drums-ckpt call"}
    times = {arm: [] for arm in arms}
    limits = {}
    breakdown, breakdown_nocg = [], []
    try:
        for i in range(a.starts):
            for arm in arms:
                dt, out = start(arm, ckpt)
                times[arm].append(dt)
                rec = json.loads(out)
                limits.setdefault(arm, (rec.get("cgroup") or {}).get("requested"))
                if arm == "restore_nocg":
                    breakdown_nocg.append(rec["restore"]["times"])
                if arm == "restore":
                    breakdown.append({"restore": rec["restore"]["times"], "reseed_s": rec["reseed"]["total_s"], "reseed": rec["reseed"]["times"], "ready_s": rec["ready"]["ready_s"]})
                destroy(out)
            print(f"bench: start {i + 1}/{a.starts}", file=sys.stderr)
        result["time_to_agent_ready"] = {arm: summary(times[arm]) for arm in arms}
        result["session_limits"] = dict(limits, method="cgroup.requested of each arm's first session (the tools' default limits unless DRUMS_CGROUP_ARGS says others); null: no cgroups")
        if "restore_raw" in times:
            result["time_to_agent_ready"]["restore_raw"]["label"] = "NOT a usable restore: no clone hygiene"
        if "cold" in times and "restore" in times:
            c50, r50 = statistics.median(times["cold"]), statistics.median(times["restore"])
            result["ratio_cold_p50_over_restore_p50"] = {"value": round(c50 / r50, 2), "bootstrap_95": [round(x, 2) for x in bootstrap_ratio(times["cold"], times["restore"])],
                                                         "p95_restore_not_worse": pct(times["restore"], 0.95) <= pct(times["cold"], 0.95), "n_each": a.starts}
        # Each variant arm pair prices one thing: its own cold/restore ratio, and each arm against it.
        variants = {"hostids": ("userns_cost", "p50 in a user namespace of its own (the default) over p50 with host ids, bootstrap 95%, same run, interleaved"),
                    "nocg": ("limits_cost", "p50 with the default limits over p50 without cgroups, bootstrap 95%, same run, interleaved")}
        for v, (cost_key, method) in variants.items():
            cv, rv = "cold_" + v, "restore_" + v
            if cv in times and rv in times:
                result[f"ratio_{cv}_p50_over_{rv}_p50"] = {"value": round(statistics.median(times[cv]) / statistics.median(times[rv]), 2),
                                                            "bootstrap_95": [round(x, 2) for x in bootstrap_ratio(times[cv], times[rv])], "n_each": a.starts}
            for arm in ("cold", "restore"):
                if arm in times and f"{arm}_{v}" in times:
                    other = times[f"{arm}_{v}"]
                    result.setdefault(cost_key, {"method": method})[arm] = {
                        "p50_ratio": round(statistics.median(times[arm]) / statistics.median(other), 3),
                        "bootstrap_95": [round(x, 3) for x in bootstrap_ratio(times[arm], other)],
                        "p50_difference_s": round(statistics.median(times[arm]) - statistics.median(other), 4)}
        if breakdown_nocg:
            result["restore_nocg_breakdown_p50_s"] = {k: round(statistics.median(b[k] for b in breakdown_nocg), 4) for k in breakdown_nocg[0]}
        if breakdown:
            keys = breakdown[0]["restore"].keys()
            result["restore_breakdown_p50_s"] = {k: round(statistics.median(b["restore"][k] for b in breakdown), 3) for k in keys}
            result["restore_breakdown_p50_s"]["reseed_s"] = round(statistics.median(b["reseed_s"] for b in breakdown), 3)
            result["restore_breakdown_p50_s"]["ready_s"] = round(statistics.median(b["ready_s"] for b in breakdown), 3)
            for k in breakdown[0]["reseed"].keys():
                result["restore_breakdown_p50_s"]["reseed." + k] = round(statistics.median(b["reseed"][k] for b in breakdown), 4)
        if a.mem_sessions > 0:
            result["memory"] = {arm: memory(arm, ckpt, a.mem_sessions, a.settle) for arm in arms if arm in ("cold", "restore", "cold_hostids", "restore_hostids")}
            if "cold" in result["memory"] and "restore" in result["memory"]:
                m = result["memory"]
                result["memory"]["restore_over_cold_slope"] = round(m["restore"]["per_added_session_mib"] / m["cold"]["per_added_session_mib"], 3)
                result["memory"]["restore_over_cold_pss"] = round(m["restore"]["pss_mean_mib"] / m["cold"]["pss_mean_mib"], 3)
            if "cold_hostids" in result["memory"] and "restore_hostids" in result["memory"]:
                m = result["memory"]
                result["memory"]["restore_hostids_over_cold_hostids_slope"] = round(m["restore_hostids"]["per_added_session_mib"] / m["cold_hostids"]["per_added_session_mib"], 3)
                result["memory"]["restore_hostids_over_cold_hostids_pss"] = round(m["restore_hostids"]["pss_mean_mib"] / m["cold_hostids"]["pss_mean_mib"], 3)
    finally:
        if ckpt:
            remove_checkpoint(json.loads(ckpt))
    write_result(result, a.out)


if __name__ == "__main__":
    main()
