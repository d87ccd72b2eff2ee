#!/usr/bin/env python3
"""Drums warm-pool benchmark: cold starts against pool takes, interleaved, on this machine.

Time to an agent-ready, unique session, measured as the wall time of one command from its start to its
exit with the session's record (ready.ready true) on its standard output:
  cold   pipelines/cold.sh (drums-overlay, drums-ns, drums-desktop, drums-ready)
  take   drums-pool take (claim a parked sibling that was restored, reseeded and checked ahead of demand;
         thaw it when it was parked frozen; re-check its readiness; print the record; one process)
Starts alternate (cold, take, cold, take, ...), so machine noise hits both arms alike. Each session is
destroyed (untimed) before the next start; after each take the pool is refilled to its depth with
drums-pool fill (untimed for the take, timed for the fill rate). The ratio cold p50 / take p50
comes with a bootstrap 95% interval (resampling both arms, 2000 draws).

Fill rate: parked siblings per minute, from the wall time of drums-pool fill calls (each restores, reseeds,
readiness-checks and freezes siblings one after another on this machine), over every fill of the run.

Memory per parked sibling: the pool is filled one sibling at a time up to --mem-siblings; after each (and
a settle pause) host used memory (MemTotal - MemAvailable) is read; the slope of a least-squares line over
1..N is the memory per added parked sibling. Beside it, the summed Pss of every process in each parked
sibling (smaps_rollup), the mean over the parked siblings.

Prints one JSON object. Every figure carries its unit, sample count and method. Shares its helpers with
pipelines/bench.py through pipelines/benchlib.py.
With --host-ids-arm a third arm, take_hostids, takes from a second pool of the same checkpoint whose siblings
run with host ids (its own spool directory): take over take_hostids is what the user namespace costs a take.
Usage: pipelines/pool-bench.py [--takes 20] [--depth 4] [--mem-siblings 4] [--no-freeze] [--host-ids-arm] [--out FILE]
"""
import argparse, json, os, statistics, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import HERE, ENV, bench_lock, bootstrap_ratio, destroy, pct, remove_checkpoint, session_pss_mib, sh, slope, source_session, used_mib, write_result  # noqa: E402
from benchlib import summary as summary3  # noqa: E402


def summary(xs):
    return summary3(xs, digits=4)


def cgroup_memory_mib(rec):
    """The sibling's own memory cgroup's charge (v1 memory.usage_in_bytes, v2 memory.current): what it holds."""
    paths = (rec.get("cgroup") or {}).get("paths") or {}
    for key, name in (("memory", "memory.usage_in_bytes"), ("unified", "memory.current")):
        if key in paths:
            try:
                return int(open(os.path.join(paths[key], name)).read()) / 2**20
            except OSError:
                return None
    return None


class Pool:
    """One pool of the checkpoint. `host_ids`: its siblings run with host ids (drums-pool fill --host-ids),
    in a spool directory of their own (DRUMS_POOL_DIR), so the two identities never share a pool."""
    def __init__(self, ckpt_id, freeze, host_ids=False):
        self.ckpt_id = ckpt_id
        self.freeze = freeze
        self.host_ids = host_ids
        self.env = dict(ENV, DRUMS_POOL_DIR=os.path.join(os.environ.get("DRUMS_STATE_DIR", "/run/drums"), "pools-bench-hostids")) if host_ids else ENV
        self.fills = []  # (made, seconds)
        self.parked = []  # pool_parked records

    def fill(self, depth):
        args = ["drums-pool", "fill", "--checkpoint", self.ckpt_id, "--depth", str(depth)]
        if not self.freeze:
            args.append("--no-freeze")
        if self.host_ids:
            args.append("--host-ids")
        t0 = time.monotonic()
        out = sh(args, env=self.env)
        dt = time.monotonic() - t0
        recs = [json.loads(l) for l in out.splitlines() if l.strip()]
        made = [r for r in recs if r["type"] == "pool_parked"]
        self.parked += made
        if made:
            self.fills.append((len(made), dt))
        return recs[-1]

    def take(self):
        t0 = time.monotonic()
        out = sh(["drums-pool", "take", "--checkpoint", self.ckpt_id], env=self.env)
        return time.monotonic() - t0, out

    def destroy(self, out):
        """A taken sibling is destroyed with its pool's DRUMS_POOL_DIR, which drums-sweep checks its spool against."""
        if out.strip():
            sh(["drums-sweep"], stdin=out, check=False, env=self.env)

    def drain(self):
        sh(["drums-pool", "drain", "--checkpoint", self.ckpt_id], check=False, env=self.env)

    def ready_records(self):
        """The parked siblings' session records, oldest first, from the files drums-pool status names."""
        status = json.loads(sh(["drums-pool", "status", "--checkpoint", self.ckpt_id], env=self.env))
        return [json.loads(open(f).read()) for f in status["parked_files"]]


def cold():
    t0 = time.monotonic()
    out = sh([os.path.join(HERE, "pipelines/cold.sh")])
    return time.monotonic() - t0, out


def check(arm, out):
    rec = json.loads(out)
    if not rec.get("ready", {}).get("ready"):
        destroy(out)
        raise RuntimeError(f"{arm}: not ready: {rec.get('ready')}")
    if arm.startswith("take") and not (rec.get("reseed") and rec.get("pool", {}).get("taken_at")):
        destroy(out)
        raise RuntimeError(f"take: not a reseeded, taken sibling: {rec.get('pool')}")
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--takes", type=int, default=20, help="starts per arm")
    ap.add_argument("--depth", type=int, default=4, help="pool depth kept during the interleaved starts")
    ap.add_argument("--mem-siblings", type=int, default=4, help="parked siblings for the memory slope")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds between a fill and a memory reading")
    ap.add_argument("--no-freeze", action="store_true", help="park siblings running instead of frozen")
    ap.add_argument("--host-ids-arm", action="store_true",
                    help="a third arm, take_hostids: takes from a pool whose siblings run with host ids, interleaved, to price the user namespace")
    ap.add_argument("--out")
    a = ap.parse_args()
    arms = ["cold", "take"] + (["take_hostids"] if a.host_ids_arm else [])
    lock = bench_lock()  # noqa: F841 - held for the whole run
    result = {"drums": 1, "type": "pool_benchmark", "machine": {"cores": os.cpu_count(), "kernel": os.uname().release},
              "parked": "running" if a.no_freeze else "frozen (cgroup freezer); the taker thaws and re-checks within the measured time",
              "method": "interleaved starts (cold, take, ...), wall time of one command from its start to its exit with a ready record; "
                        "sessions destroyed between starts and the pool refilled after each take (both untimed); release build"}
    src = source_session()  # host ids: drums-ckpt's source
    ckpt = sh(["drums-ckpt", "--clean"], stdin=src)
    c = json.loads(ckpt)
    result["checkpoint"] = {"id": c["id"], "dump_s": round(c["dump_s"], 3), "image_mib": round(c["image_bytes"] / 2**20, 1)}
    pools = {"take": Pool(c["id"], not a.no_freeze)}
    if a.host_ids_arm:
        pools["take_hostids"] = Pool(c["id"], not a.no_freeze, host_ids=True)
    pool = pools["take"]
    times = {arm: [] for arm in arms}
    take_internal, ready_s, ages = [], [], []
    try:
        # Memory per parked sibling: one more parked sibling at a time.
        time.sleep(a.settle)
        base = used_mib()
        used = []
        for k in range(1, a.mem_siblings + 1):
            pool.fill(k)
            time.sleep(a.settle)
            used.append(used_mib())
        parked = pool.ready_records()
        pss = [session_pss_mib(r) for r in parked]
        cg = [m for m in (cgroup_memory_mib(r) for r in parked) if m is not None]
        xs = list(range(1, a.mem_siblings + 1))
        result["memory_per_parked_sibling"] = {
            "slope_mib": round(slope(xs, used), 1) if len(xs) >= 2 else None,
            "slope_method": f"least-squares slope of host used memory (MemTotal-MemAvailable) over 1..{a.mem_siblings} parked siblings, {a.settle} s settle after each",
            "host_used_mib_series": [round(u - base, 1) for u in used],
            "pss_mean_mib": round(statistics.mean(pss), 1) if pss else None,
            "pss_method": "sum of Pss (smaps_rollup) over a parked sibling's init and every descendant (nested PID namespaces included), mean over the parked siblings",
            "cgroup_mean_mib": round(statistics.mean(cg), 1) if cg else None,
            "cgroup_method": "the parked sibling's own memory cgroup charge (v1 memory.usage_in_bytes, v2 memory.current), mean over the parked siblings. CRIU's root task moves itself into the sibling's cgroups before it restores any memory, so the pages it restores are charged there (cgroup v1 never moves charges afterwards)",
            "n": len(pss),
        }
        for p in pools.values():
            p.fill(a.depth)
        for i in range(a.takes):
            for arm in arms:
                if arm == "cold":
                    dt, out = cold()
                    check(arm, out)
                    destroy(out)
                else:
                    dt, out = pools[arm].take()
                    rec = check(arm, out)
                    if arm == "take":
                        take_internal.append(rec["ready"]["checked_at"] - rec["pool"]["take_started_at"])
                        ready_s.append(rec["ready"]["ready_s"])
                        ages.append(rec["pool"]["taken_at"] - rec["pool"]["parked_at"])
                    pools[arm].destroy(out)
                    pools[arm].fill(a.depth)
                times[arm].append(dt)
            print(f"pool-bench: {i + 1}/{a.takes}: " + ", ".join(f"{arm} {times[arm][-1]:.3f} s" for arm in arms), file=sys.stderr)
        t = result["time_to_agent_ready"] = {arm: summary(times[arm]) for arm in arms}
        t["take"]["inside_pool_take_p50_s"] = round(pct(take_internal, 0.5), 4)
        t["take"]["drums_ready_p50_s"] = round(pct(ready_s, 0.5), 4)
        t["take"]["parked_age_p50_s"] = round(pct(ages, 0.5), 1)
        c50, t50 = pct(times["cold"], 0.5), pct(times["take"], 0.5)
        result["ratio_cold_over_take"] = {
            "p50": round(c50 / t50, 1), "p50_bootstrap_95": [round(x, 1) for x in bootstrap_ratio(times["cold"], times["take"])],
            "p95": round(pct(times["cold"], 0.95) / pct(times["take"], 0.95), 1), "n_each": a.takes,
            "target": "p50 ratio >= 20 (issue 18)"}
        if a.host_ids_arm:
            result["userns_cost_take"] = {
                "p50_ratio": round(pct(times["take"], 0.5) / pct(times["take_hostids"], 0.5), 3),
                "bootstrap_95": [round(x, 3) for x in bootstrap_ratio(times["take"], times["take_hostids"])],
                "p50_difference_s": round(pct(times["take"], 0.5) - pct(times["take_hostids"], 0.5), 4), "n_each": a.takes,
                "method": "take p50 from a pool of siblings in user namespaces of their own (the default) over take p50 from a pool with host ids, same run, interleaved"}
        made = sum(m for m, _ in pool.fills)
        secs = sum(s for _, s in pool.fills)
        per = [p["fill_s"]["total_s"] for p in pool.parked]
        result["fill"] = {"sessions_per_minute": round(60 * made / secs, 1), "sessions": made, "fill_calls": len(pool.fills),
                          "method": "parked siblings over the summed wall time of the drums-pool fill calls that parked them (restore, reseed, ready, freeze, one after another; 2 cores)",
                          "per_sibling_p50_s": round(pct(per, 0.5), 3),
                          "per_sibling_breakdown_p50_s": {k: round(pct([p["fill_s"][k] for p in pool.parked], 0.5), 3) for k in pool.parked[0]["fill_s"]}}
    finally:
        for p in pools.values():
            p.drain()
        remove_checkpoint(c)
    write_result(result, a.out)


if __name__ == "__main__":
    main()
