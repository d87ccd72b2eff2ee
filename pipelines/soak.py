#!/usr/bin/env python3
"""Drums soak: the whole life of a sibling, many times over, with the host's resources watched for growth.

One cycle: drums-restore | drums-reseed | drums-ready from one checkpoint, one command through the guest
(POST /execute, `echo`), then drums-sweep on the record, which must exit 0 (nothing left). Between cycles
(no session alive) every --sample-every cycles the host is sampled: Drums' mounts, links named drums*,
cgroup directories below drums/, session directories and address slots (all four from the host inventory
of drums-sweep --report, benchlib.host_resources), open file handles (/proc/sys/fs/file-nr), unreclaimable
and reclaimable slab and MemAvailable (/proc/meminfo).

Growth beyond noise, any of which fails the soak (exit 1):
  - a Drums count (mounts, links, cgroups, state entries) differs from its value before the first cycle;
  - open file handles: the median of the last three samples above the median of the first three (taken
    after --warmup cycles) by more than --fd-slack (default 256; the figure is host-wide);
  - unreclaimable slab: the same medians differ by more than max(8 MiB, 5%);
  - MemAvailable: the same medians fall by more than 256 MiB.
Reclaimable slab is reported, not judged (the kernel frees it under pressure).

--race-sweep: a second thread runs `drums-sweep --orphans` in a loop (as cron would, default grace) while
the cycles make sessions; each session is checked agent-ready (guest answers, drums-ready passes) after at
least one sweep ran during its life; a session a sweep destroyed or damaged is counted lost and fails the
run. --cycles 50 is the documented variant.

Prints one JSON object (with the samples); exit 0 when nothing grew and nothing was lost. Holds the suite's
session lock (/run/drums/test.lock). Not part of the test suite (1000 cycles take minutes).
Usage: pipelines/soak.py --cycles 1000 [--sample-every 50] [--warmup 50] [--out FILE]
       pipelines/soak.py --race-sweep --cycles 50 [--out FILE]      (samples every 5 cycles, warm-up 10)
"""
import argparse, json, os, statistics, sys, threading, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import bench_lock, fresh_checkpoint, guest_answers, host_resources, remove_checkpoint, restore_ready, sh, write_result  # noqa: E402

COUNTED = ("mounts", "drums_links", "drums_cgroups", "state_entries")


def guest_execute(rec):
    url = rec["desktop"]["guest_url"] + "/execute"
    req = urllib.request.Request(url, data=json.dumps({"command": ["echo", "soak"]}).encode(), headers={"Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=30) as r:
        v = json.loads(r.read())
    if v.get("status") != "success" or v.get("output", "").strip() != "soak":
        raise RuntimeError(f"{rec['id']}: /execute answered {v}")


def median_of(samples, key, which):
    xs = [s[key] for s in samples]
    part = xs[:3] if which == "first" else xs[-3:]
    return statistics.median(part)


def judge(baseline, samples, fd_slack):
    """The reasons the samples show growth; empty when none."""
    bad = []
    for s in samples:
        for k in COUNTED:
            if s[k] != baseline[k]:
                bad.append(f"after cycle {s['cycle']}: {k} is {s[k]}, {baseline[k]} before the first cycle")
    judged = [s for s in samples if s["judged"]]
    if len(judged) >= 6:
        d = median_of(judged, "open_files", "last") - median_of(judged, "open_files", "first")
        if d > fd_slack:
            bad.append(f"open file handles grew by {d} (slack {fd_slack})")
        a, b = median_of(judged, "slab_unreclaimable_kib", "first"), median_of(judged, "slab_unreclaimable_kib", "last")
        if b - a > max(8192, 0.05 * a):
            bad.append(f"unreclaimable slab grew by {(b - a) / 1024:.1f} MiB ({a / 1024:.1f} -> {b / 1024:.1f})")
        a, b = median_of(judged, "mem_available_kib", "first"), median_of(judged, "mem_available_kib", "last")
        if a - b > 256 * 1024:
            bad.append(f"MemAvailable fell by {(a - b) / 1024:.0f} MiB")
    elif samples:
        bad.append(f"too few samples after the warm-up to judge growth ({len(judged)}; need 6: raise --cycles or lower --sample-every)")
    return bad


class Sweeper(threading.Thread):
    """drums-sweep --orphans in a loop until stopped; counts the runs and keeps their failures."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop, self.runs, self.errors = threading.Event(), 0, []
        self.destroyed = []

    def run(self):
        while not self.stop.is_set():
            out = sh(["drums-sweep", "--orphans"], check=False)
            try:
                rep = json.loads(out)
                self.destroyed += [d.get("id") for d in rep.get("destroyed", [])]
            except ValueError:
                self.errors.append(out[-300:])
            self.runs += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--sample-every", type=int, help="default 50; 5 with --race-sweep")
    ap.add_argument("--warmup", type=int, help="cycles before the growth figures count; default 50, 10 with --race-sweep")
    ap.add_argument("--fd-slack", type=int, default=256)
    ap.add_argument("--race-sweep", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args()
    a.sample_every = a.sample_every or (5 if a.race_sweep else 50)
    a.warmup = a.warmup if a.warmup is not None else (10 if a.race_sweep else 50)
    lock = bench_lock()  # noqa: F841 - held for the whole run
    baseline = host_resources()
    ckpt = fresh_checkpoint()
    samples, failures, lost, cycle_s = [], [], [], []
    sweeper = Sweeper() if a.race_sweep else None
    if sweeper:
        sweeper.start()
    t_start = time.monotonic()
    try:
        for i in range(1, a.cycles + 1):
            t0 = time.monotonic()
            try:
                out = restore_ready(ckpt)
            except Exception as e:  # noqa: BLE001
                failures.append(f"cycle {i}: restore: {str(e)[-400:]}")
                break
            rec = json.loads(out)
            try:
                guest_execute(rec)
                if sweeper:
                    runs = sweeper.runs
                    while sweeper.runs < runs + 2 and sweeper.is_alive():
                        time.sleep(0.05)
                    ok, detail = guest_answers(rec)
                    again = json.loads(sh(["drums-ready"], stdin=out, check=False) or "{}")
                    if not ok or not again.get("ready", {}).get("ready"):
                        lost.append(f"cycle {i}: {rec['id']}: guest {detail}; ready {again.get('ready')}")
            except Exception as e:  # noqa: BLE001
                failures.append(f"cycle {i}: {rec['id']}: {str(e)[-400:]}")
            d = subprocess_sweep(out)
            if d:
                failures.append(f"cycle {i}: drums-sweep: {d}")
            cycle_s.append(time.monotonic() - t0)
            if i % a.sample_every == 0 or i == a.cycles:
                s = host_resources()
                s["cycle"], s["judged"] = i, i >= a.warmup
                samples.append(s)
                print(f"soak: cycle {i}/{a.cycles}: mounts {s['mounts']} links {s['drums_links']} cgroups {s['drums_cgroups']} "
                      f"state {s['state_entries']} files {s['open_files']} SUnreclaim {s['slab_unreclaimable_kib']} kB "
                      f"MemAvailable {s['mem_available_kib'] // 1024} MiB", file=sys.stderr)
            if failures:
                break
    finally:
        if sweeper:
            sweeper.stop.set()
            sweeper.join()
        remove_checkpoint(json.loads(ckpt))
    growth = judge(baseline, samples, a.fd_slack)
    cycles_done = len(cycle_s)
    result = {"drums": 1, "type": "soak", "race_sweep": a.race_sweep, "cycles": a.cycles, "cycles_done": cycles_done,
              "seconds": round(time.monotonic() - t_start, 1),
              "cycle_s_p50": round(statistics.median(cycle_s), 3) if cycle_s else None,
              "method": "restore, reseed, ready, one /execute, drums-sweep per cycle; host sampled between cycles",
              "baseline": baseline, "samples": samples, "growth": growth, "failures": failures[:10]}
    if sweeper:
        result["sweeps"] = {"runs": sweeper.runs, "destroyed": sweeper.destroyed[:20], "unreadable_reports": sweeper.errors[:5]}
        result["lost"] = lost
    ok = not growth and not failures and not lost and cycles_done == a.cycles
    result["passed"] = ok
    write_result(result, a.out)
    sys.exit(0 if ok else 1)


def subprocess_sweep(out):
    """Destroys one session; '' when drums-sweep says nothing was left, else its report's tail."""
    try:
        sh(["drums-sweep"], stdin=out)
        return ""
    except RuntimeError as e:
        return str(e)[-400:]


if __name__ == "__main__":
    main()
