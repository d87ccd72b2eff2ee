#!/usr/bin/env python3
"""Drums density benchmark: restores of many siblings at once, then a machine filled with live sessions.

Bursts: N siblings of one checkpoint restored at once (N separate `drums-restore | drums-reseed |
drums-ready` chains started together, as N independent callers would), for each N of --counts, the counts
interleaved round by round so machine noise hits them alike. Per burst: the wall time from the start to
the last sibling agent-ready, that wall time per sibling, each sibling's own time to agent-ready (p50/p95
over the siblings of every round), and CPU seconds per sibling (the tools' and CRIU's CPU, from
getrusage of this process's children, plus the siblings' own processes', from their cgroups' CPU
accounting, read when the last is ready). The siblings are destroyed (untimed) before the next burst. The
figure that matters: per-sibling wall time at N over per-sibling wall time at 1 (p50 over rounds, one run).

Fill: siblings are restored --batch at once until --fill-max are live or host available memory would fall
below --headroom-mib with one more batch (the estimate: the slope so far). After each batch (and a settle
pause): host used memory (MemTotal - MemAvailable), the summed Pss of every session process, and a check
of --sample random live sessions (the guest answers GET /platform, drums-ready passes again). At the end
every live session is checked the same way, then all are destroyed with one drums-sweep call and the host's
counts of Drums objects (mounts, links, cgroups, state entries) must be back at their baseline. Memory per
session: the least-squares slope of host used memory over the live count, and the mean Pss, against cold
sessions (--cold-sessions started one by one in the same run, first, the same two figures).

Prints one JSON object; every figure carries its unit, sample count and method. Holds the suite's session
lock (/run/drums/test.lock) while it runs. Not part of the test suite (it fills the machine).
With --one-call a burst is one `drums-restore --ready --count N` call instead (pipelines/restore.sh's
path: the tool makes the N siblings concurrently), and a sibling's own time to ready is the call's.
With --userns every sibling is restored with `drums-restore --userns` (a user namespace and host id range of
its own) and the cold sessions are made with DRUMS_OVERLAY_ARGS=--userns (Chromium sandboxed); the fill
then also checks that every live session has an id range and no two share one.
Usage: pipelines/density-bench.py [--counts 1,4,16] [--rounds 5] [--fill-max 100] [--batch 10]
                                  [--headroom-mib 3072] [--sample 5] [--cold-sessions 6] [--no-fill]
                                  [--one-call] [--userns] [--out FILE]
Exit status: 0 measured and every check passed; 1 a check failed (a sibling not ready, a guest not
answering, something left after the teardown); the JSON says which.
"""
import argparse, json, os, random, resource, statistics, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (ENV, HERE, bench_lock, destroy, write_result, fresh_checkpoint, guest_answers, host_resources, meminfo_kib, pss_by_tree, session_pss_mib, remove_checkpoint,  # noqa: E402
                      restore_ready, session_cpu_s, sh, slope, summary, used_mib)

# --userns: every sibling restored with drums-restore --userns, every cold session made with
# DRUMS_OVERLAY_ARGS=--userns (set in main).
RESTORE_ARGS = []
COLD_ENV = None


COUNTED = ("mounts", "drums_links", "drums_cgroups", "state_entries")


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def restore_at_once(ckpt, n, one_call=False):
    """n usable restores started together; (wall s, [(s to ready, record text)], [errors], tool CPU s).
    one_call: one `drums-restore --ready --count n` (pipelines/restore.sh's path) instead of n chains; a
    sibling's own time to ready is then the call's wall time (the records come when all are done)."""
    done, errors = [None] * n, []
    cpu0 = children_cpu_s()
    t0 = time.monotonic()
    if one_call:
        try:
            out = restore_ready(ckpt, count=n, extra=RESTORE_ARGS)
            wall = time.monotonic() - t0
            return wall, [(wall, line + "\n") for line in out.splitlines() if line.strip()], [], children_cpu_s() - cpu0
        except Exception as e:  # noqa: BLE001 - reported in the result
            return time.monotonic() - t0, [], [str(e)[-600:]], children_cpu_s() - cpu0

    def one(i):
        try:
            out = restore_ready(ckpt, extra=RESTORE_ARGS)
            done[i] = (time.monotonic() - t0, out)
        except Exception as e:  # noqa: BLE001 - reported in the result
            errors.append(str(e)[-600:])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    return wall, [d for d in done if d], errors, children_cpu_s() - cpu0


def check(rec_text):
    """A live session still agent-ready: its guest answers and drums-ready passes again; (ok, detail)."""
    rec = json.loads(rec_text)
    ok, detail = guest_answers(rec)
    if not ok:
        return False, f"{rec['id']}: guest: {detail}"
    try:
        again = json.loads(sh(["drums-ready"], stdin=rec_text))
    except Exception as e:  # noqa: BLE001
        return False, f"{rec['id']}: drums-ready: {str(e)[-300:]}"
    return bool(again.get("ready", {}).get("ready")), f"{rec['id']}: ready {again.get('ready', {}).get('ready')}"


def check_all(recs, workers=8):
    results = [None] * len(recs)

    def run(idx):
        for i in idx:
            results[i] = check(recs[i])

    threads = [threading.Thread(target=run, args=(list(range(w, len(recs), workers)),)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def bursts(ckpt, counts, rounds, one_call=False):
    per = {n: {"wall_s": [], "per_sibling_s": [], "sibling_s": [], "cpu_per_sibling_s": [], "session_cpu_known": True, "errors": []} for n in counts}
    for r in range(rounds):
        for n in counts:
            wall, done, errors, tool_cpu = restore_at_once(ckpt, n, one_call)
            recs = [json.loads(out) for _, out in done]
            cpus = [session_cpu_s(rec) for rec in recs]
            destroy("".join(out for _, out in done))
            p = per[n]
            p["errors"] += errors
            if errors:
                continue
            p["wall_s"].append(wall)
            p["per_sibling_s"].append(wall / n)
            p["sibling_s"] += [s for s, _ in done]
            if any(c is None for c in cpus):
                p["session_cpu_known"] = False
            p["cpu_per_sibling_s"].append((tool_cpu + sum(c or 0 for c in cpus)) / n)
            print(f"density: round {r + 1}/{rounds} n={n}: {wall:.2f} s, {wall / n:.3f} s per sibling", file=sys.stderr)
    how = "one drums-restore --ready --count N call (pipelines/restore.sh's path)" if one_call else "N chains drums-restore | drums-reseed | drums-ready started together"
    out = {"method": how + "; wall time to the last agent-ready; siblings destroyed (untimed) between bursts; counts interleaved per round",
           "per_count": {}}
    for n, p in per.items():
        out["per_count"][str(n)] = {
            "wall_to_all_ready": summary(p["wall_s"]),
            "wall_per_sibling": summary(p["per_sibling_s"], 4),
            "each_sibling_to_ready": summary(p["sibling_s"]),
            "cpu_per_sibling_s": round(statistics.median(p["cpu_per_sibling_s"]), 3) if p["cpu_per_sibling_s"] else None,
            "cpu_method": "getrusage(RUSAGE_CHILDREN) of the tools and CRIU plus the siblings' cgroup CPU accounting, per sibling, median over rounds"
                          + ("" if p["session_cpu_known"] else "; some siblings had no readable cgroup CPU figure (counted as 0)"),
            "failed": len(p["errors"]), "errors": p["errors"][:5], "rounds": rounds,
        }
    base = per[counts[0]]["per_sibling_s"]
    out["per_sibling_over_n1"] = {}
    for n in counts[1:]:
        xs = per[n]["per_sibling_s"]
        out["per_sibling_over_n1"][str(n)] = round(statistics.median(xs) / statistics.median(base), 3) if xs and base and counts[0] == 1 else None
    out["per_sibling_over_n1_method"] = "median over rounds of (wall to all ready / N) over the median of the single restore's wall time, same run"
    return out


def cold_memory(n, settle):
    recs, used = [], []
    base = used_mib()
    try:
        for _ in range(n):
            recs.append(sh([os.path.join(HERE, "pipelines/cold.sh")], env=COLD_ENV))
            time.sleep(settle)
            used.append(used_mib())
        pss = pss_by_tree()
        pss_each = [session_pss_mib(json.loads(r), pss) for r in recs]
    finally:
        destroy("".join(recs))
    per = slope(list(range(1, n + 1)), used) if n >= 2 else None
    return {"per_added_session_mib": round(per, 1) if per and per > 0 else None,
            "per_added_session_reason": None if per and per > 0 else ("fewer than 2 sessions" if per is None else f"host used memory did not grow with the sessions (slope {per:.1f} MiB): noise exceeded the signal"),
            "host_used_mib_series": [round(u - base, 1) for u in used],
            "pss_mean_mib": round(statistics.mean(pss_each), 1) if pss_each else None, "n": n,
            "method": f"cold sessions (pipelines/cold.sh{' with DRUMS_OVERLAY_ARGS=--userns' if COLD_ENV else ''}) started one by one; slope of host used memory over 1..{n}, {settle} s settle; mean summed Pss of each init's process tree"}


def fill(ckpt, a):
    live, steps, stop = [], [], None
    base_used = used_mib()
    counts_before = host_resources()
    failures = []
    try:
        while len(live) < a.fill_max:
            b = min(a.batch, a.fill_max - len(live))
            if len(steps) >= 2:
                per = slope([s["live"] for s in steps], [s["host_used_mib"] for s in steps])
                avail = meminfo_kib()["MemAvailable"] / 1024
                if avail - per * b < a.headroom_mib:
                    stop = f"memory headroom: {avail:.0f} MiB available, the next {b} would take about {per * b:.0f} MiB, the headroom is {a.headroom_mib} MiB"
                    break
            wall, done, errors, _ = restore_at_once(ckpt, b)
            live += [out for _, out in done]
            if errors:
                stop = f"a restore failed at {len(live)} live: {errors[0][-400:]}"
                failures += errors
                break
            time.sleep(a.settle)
            pss = pss_by_tree()
            total_pss = sum(session_pss_mib(json.loads(r), pss) for r in live)
            sample = random.Random(len(live)).sample(live, min(a.sample, len(live)))
            checked = check_all(sample)
            bad = [d for ok, d in checked if not ok]
            steps.append({"live": len(live), "host_used_mib": round(used_mib() - base_used, 1), "pss_sum_mib": round(total_pss, 1),
                          "batch_wall_s": round(wall, 2), "sample_checked": len(sample), "sample_failed": bad})
            print(f"density: {len(live)} live, host used +{steps[-1]['host_used_mib']:.0f} MiB, Pss sum {total_pss:.0f} MiB, sample failures {len(bad)}", file=sys.stderr)
            if bad:
                stop = f"a live session failed its check at {len(live)} live: {bad[0]}"
                break
        if stop is None:
            stop = f"--fill-max {a.fill_max} reached"
        final = check_all(live)
        final_bad = [d for ok, d in final if not ok]
        pss = pss_by_tree()
        pss_each = [session_pss_mib(json.loads(r), pss) for r in live]
        ranges = [(json.loads(r).get("id_range") or {}).get("base") for r in live]
        threads = sum(len(os.listdir(f"/proc/{p}/task")) for p in os.listdir("/proc") if p.isdigit() and os.path.exists(f"/proc/{p}/task"))
    finally:
        t0 = time.monotonic()
        destroy("".join(live))
        teardown_s = time.monotonic() - t0
    counts_after = host_resources()
    left = {k: counts_after[k] - counts_before[k] for k in COUNTED if counts_after[k] != counts_before[k]}
    xs = [0] + [s["live"] for s in steps]
    ys = [0] + [s["host_used_mib"] for s in steps]
    return {
        "method": f"siblings restored {a.batch} at once up to --fill-max {a.fill_max} or --headroom-mib {a.headroom_mib}; {a.settle} s settle per batch; a random sample of {a.sample} checked per batch, every session at the end",
        "stopped_because": stop, "live_max": len(live), "steps": steps,
        "per_session_mib_slope": round(slope(xs, ys), 1) if len(xs) >= 2 else None,
        "per_session_slope_method": "least-squares slope of host used memory (MemTotal-MemAvailable, from before the first batch) over the live count",
        "pss_mean_mib_at_max": round(statistics.mean(pss_each), 1) if pss_each else None,
        "pss_method": "Pss summed over each session init's process tree (nested PID namespaces included), one pass over /proc",
        "final_check": {"checked": len(final), "failed": final_bad[:10], "failed_count": len(final_bad),
                        "method": "every live session: its guest answers GET /platform and drums-ready passes again"},
        "host_threads_at_max": threads,
        "id_ranges_at_max": {"sessions": len(ranges), "with_range": sum(b is not None for b in ranges), "distinct": len({b for b in ranges if b is not None}),
                             "method": "the live records' id_range.base"},
        "teardown": {"seconds": round(teardown_s, 2), "n": len(live), "method": "one drums-sweep call with every record"},
        "left_after_teardown": left, "counts_before": {k: counts_before[k] for k in COUNTED}, "restore_errors": failures[:5],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fill-max", type=int, default=100)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--headroom-mib", type=int, default=3072)
    ap.add_argument("--sample", type=int, default=5)
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--cold-sessions", type=int, default=6)
    ap.add_argument("--no-fill", action="store_true")
    ap.add_argument("--one-call", action="store_true", help="a burst is one drums-restore --ready --count N call, not N chains")
    ap.add_argument("--userns", action="store_true", help="siblings restored with drums-restore --userns, cold sessions with DRUMS_OVERLAY_ARGS=--userns")
    ap.add_argument("--out")
    a = ap.parse_args()
    global COLD_ENV
    if a.userns:
        RESTORE_ARGS.append("--userns")
        COLD_ENV = dict(ENV, DRUMS_OVERLAY_ARGS="--userns")
    counts = [int(x) for x in a.counts.split(",")]
    lock = bench_lock()  # noqa: F841 - held for the whole run
    result = {"drums": 1, "type": "density-benchmark", "userns": a.userns, "machine": {"cores": os.cpu_count(), "kernel": os.uname().release,
              "mem_total_mib": round(meminfo_kib()["MemTotal"] / 1024),
              "inotify_max_user_instances": int(open("/proc/sys/fs/inotify/max_user_instances").read())}}
    # Cold memory first, on a machine that has not just freed the memory of many destroyed sessions.
    if not a.no_fill:
        result["cold_memory"] = cold_memory(a.cold_sessions, a.settle) if a.cold_sessions else None
    ckpt = fresh_checkpoint()
    failed = False
    try:
        result["bursts"] = bursts(ckpt, counts, a.rounds, a.one_call)
        failed |= any(v["failed"] for v in result["bursts"]["per_count"].values())
        if not a.no_fill:
            time.sleep(10)  # the bursts' sessions' memory is given back lazily
            f = result["fill"] = fill(ckpt, a)
            failed |= bool(f["final_check"]["failed_count"] or f["left_after_teardown"] or f["restore_errors"])
            ir = f["id_ranges_at_max"]
            failed |= a.userns and not (ir["with_range"] == ir["sessions"] == ir["distinct"])
            cm = result["cold_memory"]
            if cm and cm["per_added_session_mib"] and f["per_session_mib_slope"]:
                result["memory_against_cold"] = {"slope_ratio": round(f["per_session_mib_slope"] / cm["per_added_session_mib"], 3),
                                                 "pss_ratio": round(f["pss_mean_mib_at_max"] / cm["pss_mean_mib"], 3) if cm["pss_mean_mib"] and f["pss_mean_mib_at_max"] else None}
    finally:
        remove_checkpoint(json.loads(ckpt))
    result["checks_passed"] = not failed
    write_result(result, a.out)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
