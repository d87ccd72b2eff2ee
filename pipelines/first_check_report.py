#!/usr/bin/env python3
"""Helpers of pipelines/first-check.sh (stdlib only).

  hostmon     host telemetry for one block: /proc/stat and /proc/meminfo read at start, every 0.25 s, and at
              SIGTERM; prints one JSON object when stopped (host-wide figures: everything the machine ran)
  summarize   reads OUT/raw/ (the driver's rollout and block records), OUT/samples/ (drums-cgroup watch),
              OUT/host/; writes OUT/rollouts.jsonl, blocks.jsonl, summary.json, report.txt, reset_times.png;
              prints the records as JSON Lines on stdout and the table on stderr. Exit 0 when every rollout
              is valid and nothing of the run is left on the machine, else 1.
Exit 5 when the helper itself fails (a traceback on stderr): the driver then exits 5, not 1.

The summary computes no verdict: it counts, sums and lists. The one ratio between arms is named
..._NOT_A_CLAIM. There is no price: the price field is a placeholder and no cost is computed.
"""
import argparse, glob, json, os, platform, signal, struct, subprocess, sys, time, zlib

CLK_TCK = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024


def cpu_times():
    f = open("/proc/stat").readline().split()[1:]
    v = [int(x) for x in f]
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)  # user nice system irq softirq steal
    return busy / CLK_TCK, (busy + v[3] + v[4]) / CLK_TCK


def mem_used():
    m = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":", 1)
        m[k] = int(v.split()[0]) * 1024
    return m["MemTotal"] - m["MemAvailable"], m["MemTotal"]


def hostmon():
    """SIGTERM stops it. SIGUSR1 pauses it and SIGUSR2 resumes it: what the machine does in between (the
    driver's external preparation inside a block) is left out of the CPU figures and the memory samples."""
    stop, paused = [], {"at": None, "s": 0.0, "busy": 0.0, "all": 0.0}
    def pause(*_):
        if paused["at"] is None:
            paused["at"], paused["cpu"] = time.time(), cpu_times()
    def resume(*_):
        if paused["at"] is not None:
            b, a = cpu_times()
            paused["s"] += time.time() - paused["at"]
            paused["busy"] += b - paused["cpu"][0]
            paused["all"] += a - paused["cpu"][1]
            paused["at"] = None
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGUSR1, pause)
    signal.signal(signal.SIGUSR2, resume)
    t0, (busy0, all0), (used0, total) = time.time(), cpu_times(), mem_used()
    load0 = open("/proc/loadavg").read().split()[:3]
    peak, n = used0, 1
    while not stop:
        time.sleep(0.25)
        if paused["at"] is None:
            peak, n = max(peak, mem_used()[0]), n + 1
    resume()
    busy1, all1 = cpu_times()
    busy, cpu_all = busy1 - busy0 - paused["busy"], all1 - all0 - paused["all"]
    used1 = mem_used()[0]
    print(json.dumps({
        "scope": "host-wide: every process on the machine, not only this run's",
        "seconds": round(time.time() - t0 - paused["s"], 3), "cpus": os.cpu_count(),
        "paused_s": round(paused["s"], 3), "paused_for": "external preparation inside the block (left out of every figure)",
        "cpu_busy_s": round(busy, 2), "cpu_total_s": round(cpu_all, 2),
        "cpu_busy_fraction": round(busy / cpu_all, 3) if cpu_all > 0 else None,
        "mem_total_mib": round(total / MIB, 1), "mem_used_start_mib": round(used0 / MIB, 1),
        "mem_used_end_mib": round(used1 / MIB, 1), "mem_used_peak_mib": round(max(peak, used1) / MIB, 1),
        "mem_samples": n + 1, "mem_method": "MemTotal - MemAvailable every 0.25 s",
        "loadavg_start": load0, "loadavg_end": open("/proc/loadavg").read().split()[:3]}), flush=True)


def read_jsonl(path):
    out = []
    for line in open(path):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass  # a watcher stopped mid-line
    return out


def session_telemetry(path):
    """Peaks of one session's drums-cgroup watch samples; null when the kernel gave no figure."""
    s = read_jsonl(path) if os.path.exists(path) else []
    def peak(k, scale=1):
        v = [x[k] for x in s if x.get(k) is not None]
        return round(max(v) / scale, 3) if v else None
    # Figure: (sample field, scale).
    fields = {"memory_peak_mib_kernel": ("memory_peak_bytes", MIB), "memory_current_max_mib": ("memory_current_bytes", MIB),
              "cpu_usage_s": ("cpu_usage_ns", 1e9), "cpu_throttled_s": ("cpu_throttled_ns", 1e9),
              # pids.peak where the kernel keeps it (null otherwise, why_null says so); the highest sampled
              # pids.current beside it, under its own name: a sampled maximum is not the kernel's peak.
              "tasks_peak": ("tasks_peak", 1), "tasks_max_sampled": ("tasks", 1), "processes_max": ("processes", 1),
              "memory_limit_hits": ("memory_limit_hits", 1), "memsw_limit_hits": ("memsw_limit_hits", 1), "oom_kills": ("oom_kills", 1)}
    t = {"samples": len(s), "final_sample": any(x.get("final") for x in s)}
    t.update({k: peak(f, scale) for k, (f, scale) in fields.items()})
    # The reasons of the figures that stayed null only: a sample taken as the session went (its cgroup
    # gone) has reasons for figures that earlier samples gave.
    why = {}
    for k, (f, _) in fields.items():
        if t[k] is None:
            r = [x["why_null"][f] for x in s if (x.get("why_null") or {}).get(f)]
            why[k] = r[0] if r else "no sample" if not s else "no sample gave it"
    t["why_null"] = why or None
    return t


def span(v):
    v = [x for x in v if x is not None]
    return [min(v), max(v)] if v else None


def total(v):
    v = [x for x in v if x is not None]
    return round(sum(v), 3) if v else None


def host_inventory():
    """What Drums holds on this host: the host_inventory record of `drums-sweep --report` (docs/record.md)."""
    p = subprocess.run(["drums-sweep", "--report"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"drums-sweep --report exited {p.returncode}: {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout)


def leftovers(inv, ids, spools, ckpts):
    """What of this run is still on the machine, from the host inventory: the state directories, cgroup
    directories and slots of its sessions, its pools' spools and its checkpoints."""
    ids, spools, ckpts = set(ids), set(spools), set(ckpts)
    left = [s["state_dir"] for s in inv["sessions"] if s["id"] in ids]
    left += [c for c in inv["cgroups"] if os.path.basename(c) in ids]
    left += [s["path"] for s in inv["slots"] if s["session"] in ids]
    left += [p["spool"] for p in inv["pools"] if p["spool"] in spools or p["checkpoint"] in ckpts]
    left += [c["dir"] for c in inv["checkpoints"] if c["id"] in ckpts]
    return left


def summarize(a):
    out = a.out
    raw = sorted(glob.glob(f"{out}/raw/b*_r*.json"), key=lambda p: json.load(open(p))["rollout"])
    rollouts = [json.load(open(p)) for p in raw]
    for r in rollouts:
        valid = r["fault"] is None and r["canary"] == "clean" and r["score"] is not None
        r["valid"] = valid
        if r["canary"] not in (None, "clean"):
            # Interference first: a fault that follows from it (a task already done) is kept after it.
            r["fault"] = "interference: the canary of an earlier rollout was seen: " + "; ".join(r["canary_seen"]) \
                + (f"; {r['fault']}" if r["fault"] else "")
        r["telemetry"] = session_telemetry(f"{out}/samples/{r['session']}.jsonl") if r["session"] else None
    blocks = [json.load(open(p)) for p in sorted(glob.glob(f"{out}/raw/block*.json"), key=lambda p: int(p.split("block")[-1][:-5]))]
    for b in blocks:
        rs = [r for r in rollouts if r["block"] == b["block"]]
        host = f"{out}/host/block{b['block']}.json"
        b["valid"] = sum(r["valid"] for r in rs)
        b["faults"] = [{"rollout": r["rollout"], "index": r["index"], "fault": r["fault"]} for r in rs if r["fault"]]
        if b["fault"]:
            b["faults"].append({"rollout": None, "index": None, "fault": b["fault"]})
        if len(rs) < b["rollouts"]:
            b["faults"].append({"rollout": None, "index": None,
                                "fault": f"{b['rollouts'] - len(rs)} of {b['rollouts']} rollout records are missing (the driver failed mid-rollout)"})
        b["canary"] = ["clean" if r["canary"] == "clean" else r["canary"] for r in rs]
        b["first_rollout_work_s"] = total([r["first_rollout_work_s"] for r in rs])
        b["why_null"] = None
        if b["first_rollout_work_s"] is None:
            b["why_null"] = {"first_rollout_work_s": (
                "not applicable: drums_no_reuse makes no checkpoint, every rollout does the setup"
                if b["arm"] == "drums_no_reuse" else "not measured: no rollout of the block did the setup and the checkpoint")}
        b["host"] = json.load(open(host)) if os.path.exists(host) and os.path.getsize(host) else None
        cg = [r["cgroup"] for r in rs if r["cgroup"]]
        tel = [r["telemetry"] for r in rs if r["telemetry"]]
        b["sessions"] = {
            "count": len(cg), "cgroup_version": sorted({c["version"] for c in cg}),
            "limits_read_back": [dict(t) for t in {tuple(sorted((k, v) for k, v in c["read_back"].items() if k != "why_null")) for c in cg}],
            "limits_applied_every_session": all(c.get("applied") for c in cg) if cg else None,
            "memory_peak_mib_kernel": span([t["memory_peak_mib_kernel"] for t in tel]),
            "cpu_usage_s": span([t["cpu_usage_s"] for t in tel]),
            "tasks_peak": span([t["tasks_peak"] for t in tel]), "tasks_max_sampled": span([t["tasks_max_sampled"] for t in tel]),
            "processes_max": span([t["processes_max"] for t in tel]),
            "oom_kills": total([t["oom_kills"] for t in tel]), "memory_limit_hits": total([t["memory_limit_hits"] for t in tel]),
            "samples": sum(t["samples"] for t in tel)}
    arms = {}
    for arm in dict.fromkeys(b["arm"] for b in blocks):
        bs = [b for b in blocks if b["arm"] == arm]
        rs = [r for r in rollouts if r["arm"] == arm]
        resets = [r["reset_s"] for r in rs if r["reset_kind"] in ("restore", "pool", "recreate")]
        arms[arm] = {
            "blocks": [b["block"] for b in bs], "rollouts": len(rs), "valid": sum(r["valid"] for r in rs),
            "faults": sum(len(b["faults"]) for b in bs), "canary_clean": sum(r["canary"] == "clean" for r in rs),
            "scores": [r["score"] for r in rs], "wall_s": total([b["wall_s"] for b in bs]),
            "first_rollout_work_s": total([b["first_rollout_work_s"] for b in bs]),
            "external_prep_s": total([b["external_prep_s"] for b in bs]),
            "reset_s_per_rollout": [{"block": r["block"], "index": r["index"], "kind": r["reset_kind"], "reset_s": r["reset_s"]} for r in rs],
            "reset_s_by_revert_or_recreate": {"n": len(resets), "min": min(resets) if resets else None,
                                              "max": max(resets) if resets else None,
                                              "mean": round(sum(resets) / len(resets), 3) if resets else None},
            "host_cpu_busy_s": [b["host"]["cpu_busy_s"] if b["host"] else None for b in bs]}
        arms[arm]["why_null"] = {k: v for b in bs for k, v in (b["why_null"] or {}).items() if arms[arm].get(k) is None} or None
    ids = [r["session"] for r in rollouts if r["session"]] + [os.path.basename(p)[:-6] for p in glob.glob(f"{out}/samples/*.jsonl")]
    # Every sibling a pool filler parked, taken or not, and the spools themselves.
    for p in glob.glob(f"{out}/pool/*.fill.jsonl"):
        ids += [x["session"] for x in read_jsonl(p) if x.get("type") == "pool_parked" and x.get("session")]
    spools = [b["pool"]["spool"] for b in blocks if b.get("pool") and b["pool"].get("spool")]
    ckpts = [b["checkpoint"]["id"] for b in blocks if b["checkpoint"]]
    left = leftovers(host_inventory(), ids, spools, ckpts) + [p for p in glob.glob(f"{out}/live/*")]
    names = list(arms)
    ratio, ratio_why = None, None
    parts = [arms[n][k] for n in names for k in ("wall_s", "external_prep_s")] if len(names) == 2 else [None]
    if None not in parts and parts[2] + parts[3] > 0:
        ratio = round((parts[0] + parts[1]) / (parts[2] + parts[3]), 3)
    else:
        ratio_why = "the run has not exactly two arms" if len(names) != 2 else "a wall or external preparation figure of an arm is null or zero"
    try:
        commit = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip() or None
    except OSError:
        commit = None
    task = json.load(open(a.task))
    summary = {
        "drums": 1, "type": "first_check_summary",
        "engineering_validation_only": True, "no_headline_claim": True, "no_training_claim": True,
        "resource_parity_claimed": False, "verdict": None, "verdict_note": "this driver computes no verdict",
        "task": {"id": task.get("id"), "file": os.path.abspath(a.task)},
        "design": {"blocks": a.blocks.split(","), "order": "as given (default ABBA)", "rollouts_per_block": max([b["rollouts"] for b in blocks] or [0]),
                   "concurrency": a.concurrency, "limits_requested": a.limits,
                   "post_setup_reset": a.reset,
                   "arms": {"drums_post_setup": "block's first rollout: setup on a cold session, checkpoint (drums-ckpt --leave-running); later rollouts: "
                            + ("take a parked sibling from a warm pool of the checkpoint (drums-pool take; restored, reseeded and ready before, by drums-pool fill outside the block clock), no setup"
                               if a.reset == "pool" else "restore, reseed, ready (pipelines/restore.sh), no setup"),
                            "drums_no_reuse": "a cold session per rollout, destroyed at the next reset; setup every rollout"},
                   "reset": "destroy of the previous session plus the new one ready (restore, pool take or cold); a block's first rollout starts on a session made by external preparation and has no reset (null)",
                   "external_prep": "sessions made before the block clock starts (outside wall_s), as a pool would"
                                     + ("; with the pool reset also the pool fill, during which the block clock and host telemetry pause" if a.reset == "pool" else ""),
                   "canary": "each rollout writes a marker in its session after evaluation; each rollout checks, before setup, that no marker is present"},
        "host": {"cpus": os.cpu_count(), "kernel": platform.release(), "mem_total_mib": round(mem_used()[1] / MIB), "shared": "host-wide figures include other work on the machine"},
        "tools": a.tools, "commit": commit, "run_s": a.run_s, "at": int(time.time()),
        "rollouts": len(rollouts), "valid": sum(r["valid"] for r in rollouts),
        "canary_clean_every_block": all(all(c == "clean" for c in b["canary"]) for b in blocks),
        "arms": arms,
        "raw_ratio_first_over_second_arm_wall_with_prep_NOT_A_CLAIM": ratio,
        "raw_ratio_arms": names, "raw_ratio_why_null": ratio_why,
        "prices": {"placeholder": True, "usd_per_hour": None, "note": "not a price; no cost, cost per valid or valid per hour is computed"},
        "left_on_machine": left,
    }
    with open(f"{out}/rollouts.jsonl", "w") as f:
        for r in rollouts:
            f.write(json.dumps({"drums": 1, "type": "first_check_rollout", **r}) + "\n")
    with open(f"{out}/blocks.jsonl", "w") as f:
        for b in blocks:
            f.write(json.dumps({"drums": 1, "type": "first_check_block", **b}) + "\n")
    with open(f"{out}/summary.json", "w") as f:
        json.dump(summary, f, indent=1)
    for path in ("rollouts.jsonl", "blocks.jsonl"):
        sys.stdout.write(open(f"{out}/{path}").read())
    sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()
    text = table(rollouts, blocks, summary)
    open(f"{out}/report.txt", "w").write(text)
    sys.stderr.write(text)
    chart(rollouts, f"{out}/reset_times.png")
    missing = sum(b["rollouts"] for b in blocks) - len(rollouts)
    return 0 if summary["valid"] == summary["rollouts"] and not missing and not left else 1


def fmt(v, w=6, p=2):
    return ("-" if v is None else f"{v:.{p}f}" if isinstance(v, float) else str(v)).rjust(w)


def table(rollouts, blocks, s):
    L = ["", "first-check: engineering validation only, no verdict; the ratio between arms is NOT_A_CLAIM", ""]
    L.append(f"{'arm':<17}{'blk':>4}{'#':>3} {'reset':<9}{'reset_s':>8}{'setup_s':>8}{'ckpt_s':>7}{'act_s':>7}{'eval_s':>7}{'wall_s':>7}{'score':>6} {'valid':<6}{'canary':<7}fault")
    for r in rollouts:
        L.append(f"{r['arm']:<17}{r['block']:>4}{r['index']:>3} {r['reset_kind']:<9}{fmt(r['reset_s'], 8)}{fmt(r['setup_s'], 8)}"
                 f"{fmt(r['checkpoint_s'], 7)}{fmt(r['action_s'], 7)}{fmt(r['evaluation_s'], 7)}{fmt(r['wall_s'], 7)}"
                 f"{fmt(r['score'], 6, 1)} {str(r['valid']).lower():<6}{r['canary'] or '-':<7}{r['fault'] or ''}")
    L += ["", f"{'block':<6}{'arm':<17}{'valid':>6}{'faults':>7}{'wall_s':>8}{'prep_s':>7}{'1st_work_s':>11}{'host_cpu_s':>11}{'host_mem_peak':>14}{'sess_mem_peak_MiB':>19}"]
    for b in blocks:
        h, m = b["host"] or {}, b["sessions"]["memory_peak_mib_kernel"]
        L.append(f"{b['block']:<6}{b['arm']:<17}{str(b['valid']) + '/' + str(b['rollouts']):>6}{len(b['faults']):>7}{fmt(b['wall_s'], 8)}"
                 f"{fmt(b['external_prep_s'], 7)}{fmt(b['first_rollout_work_s'], 11)}{fmt(h.get('cpu_busy_s'), 11)}"
                 f"{fmt(h.get('mem_used_peak_mib'), 14, 0)}{('-' if not m else f'{m[0]:.1f}..{m[1]:.1f}'):>19}")
    lim = {json.dumps(l, sort_keys=True) for b in blocks for l in b["sessions"]["limits_read_back"]}
    L += ["", "per-session limits read back from the kernel: " + ("; ".join(sorted(lim)) or "none")]
    for arm, v in s["arms"].items():
        rs = ", ".join(f"{x['reset_s']:.3f}" for x in v["reset_s_per_rollout"] if x["reset_s"] is not None)
        L.append(f"{arm}: {v['valid']}/{v['rollouts']} valid, wall {fmt(v['wall_s'], 0)} s, reset s per rollout: {rs or '-'}")
    L.append(f"raw ratio {'/'.join(s['raw_ratio_arms'])} (wall + prep), NOT_A_CLAIM: {s['raw_ratio_first_over_second_arm_wall_with_prep_NOT_A_CLAIM']}")
    L.append(f"valid {s['valid']}/{s['rollouts']}; canary clean in every block: {str(s['canary_clean_every_block']).lower()}; "
             f"left on the machine: {len(s['left_on_machine'])}")
    return "\n".join(L) + "\n"


# A 5x7 bitmap font for the chart's labels (upper case, digits, a little punctuation).
FONT = dict(zip(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:()/ ,",
    """.###./#...#/#...#/#####/#...#/#...#/#...#|####./#...#/#...#/####./#...#/#...#/####.|.###./#...#/#..../#..../#..../#...#/.###.|####./#...#/#...#/#...#/#...#/#...#/####.|#####/#..../#..../####./#..../#..../#####|#####/#..../#..../####./#..../#..../#....|.###./#...#/#..../#.###/#...#/#...#/.####|#...#/#...#/#...#/#####/#...#/#...#/#...#|.###./..#../..#../..#../..#../..#../.###.|..###/...#./...#./...#./...#./#..#./.##..|#...#/#..#./#.#../##.../#.#../#..#./#...#|#..../#..../#..../#..../#..../#..../#####|#...#/##.##/#.#.#/#.#.#/#...#/#...#/#...#|#...#/#...#/##..#/#.#.#/#..##/#...#/#...#|.###./#...#/#...#/#...#/#...#/#...#/.###.|####./#...#/#...#/####./#..../#..../#....|.###./#...#/#...#/#...#/#.#.#/#..#./.##.#|####./#...#/#...#/####./#.#../#..#./#...#|.####/#..../#..../.###./....#/....#/####.|#####/..#../..#../..#../..#../..#../..#..|#...#/#...#/#...#/#...#/#...#/#...#/.###.|#...#/#...#/#...#/#...#/#...#/.#.#./..#..|#...#/#...#/#...#/#.#.#/#.#.#/#.#.#/.#.#.|#...#/#...#/.#.#./..#../.#.#./#...#/#...#|#...#/#...#/.#.#./..#../..#../..#../..#..|#####/....#/...#./..#../.#.../#..../#####|.###./#...#/#..##/#.#.#/##..#/#...#/.###.|..#../.##../..#../..#../..#../..#../.###.|.###./#...#/....#/...#./..#../.#.../#####|#####/...#./..#../...#./....#/#...#/.###.|...#./..##./.#.#./#..#./#####/...#./...#.|#####/#..../####./....#/....#/#...#/.###.|..##./.#.../#..../####./#...#/#...#/.###.|#####/....#/...#./..#../.#.../.#.../.#...|.###./#...#/#...#/.###./#...#/#...#/.###.|.###./#...#/#...#/.####/....#/...#./.##..|...../...../...../...../...../.##../.##..|...../...../...../...../...../...../#####|...../...../...../#####/...../...../.....|...../.##../.##../...../.##../.##../.....|...#./..#../.#.../.#.../.#.../..#../...#.|.#.../..#../...#./...#./...#./..#../.#...|....#/...#./...#./..#../.#.../.#.../#....|...../...../...../...../...../...../.....|...../...../...../...../.##../..#../.#...""".split("|")))


class Canvas:
    def __init__(self, w, h):
        self.w, self.h, self.px = w, h, bytearray(b"\xff" * (w * h * 3))

    def rect(self, x0, y0, x1, y1, rgb):
        for y in range(max(0, int(y0)), min(self.h, int(y1))):
            for x in range(max(0, int(x0)), min(self.w, int(x1))):
                self.px[(y * self.w + x) * 3:(y * self.w + x) * 3 + 3] = bytes(rgb)

    def text(self, x, y, s, rgb=(0, 0, 0), scale=2):
        for ch in s.upper():
            rows = FONT.get(ch, FONT[" "]).split("/")
            for j, row in enumerate(rows):
                for i, c in enumerate(row):
                    if c == "#":
                        self.rect(x + i * scale, y + j * scale, x + (i + 1) * scale, y + (j + 1) * scale, rgb)
            x += 6 * scale

    def png(self, path):
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3]) for y in range(self.h))
        def chunk(tag, data):
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                    + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


COLORS = {"drums_post_setup": (31, 119, 180), "drums_no_reuse": (255, 127, 14)}


def chart(rollouts, path):
    """Bars: each rollout's reset seconds in run order, coloured by arm; a grey stub where a rollout had no
    reset (a fresh session of external preparation); a red mark under a rollout that was not valid."""
    n = max(len(rollouts), 1)
    bw = max(8, min(40, 720 // n))
    left, top, bottom = 70, 70, 60
    w, h = max(left + n * (bw + 6) + 30, 780), 380
    c = Canvas(w, h)
    ymax = max([r["reset_s"] or 0 for r in rollouts] + [1.0])
    step = 0.5 if ymax <= 4 else 1.0
    ymax = (int(ymax / step) + 1) * step
    ph = h - top - bottom
    y_of = lambda v: top + ph - v / ymax * ph
    c.text(left, 12, "reset seconds per rollout (run order), by arm", scale=2)
    lx = left
    legend = [(arm.replace("drums_", ""), rgb, 40) for arm, rgb in COLORS.items()]
    for label, rgb, y0 in legend + [("fresh (no reset)", (160, 160, 160), 47), ("not valid", (214, 39, 40), 47)]:
        c.rect(lx, y0, lx + 14, 54, rgb)
        c.text(lx + 20, 41, label, scale=2)
        lx += 20 + 12 * len(label) + 16
    v = 0.0
    while v <= ymax + 1e-9:
        y = y_of(v)
        c.rect(left, y, w - 20, y + 1, (225, 225, 225))
        c.text(8, y - 6, f"{v:.1f}", scale=2)
        v += step
    c.rect(left, top, left + 1, top + ph + 1, (0, 0, 0))
    c.rect(left, top + ph, w - 20, top + ph + 1, (0, 0, 0))
    for k, r in enumerate(rollouts):
        x = left + 6 + k * (bw + 6)
        if r["reset_s"] is None:
            c.rect(x, top + ph - 4, x + bw, top + ph, (160, 160, 160))
        else:
            c.rect(x, y_of(r["reset_s"]), x + bw, top + ph, COLORS.get(r["arm"], (90, 90, 90)))
            c.text(x + (bw - 23) // 2, y_of(r["reset_s"]) - 10, f"{r['reset_s']:.2f}", scale=1)
        if not r["valid"]:
            c.rect(x, top + ph + 4, x + bw, top + ph + 10, (214, 39, 40))
        c.text(x + (bw - 10) // 2, top + ph + 14, str(r["block"]), scale=1)
        c.text(x + (bw - 10) // 2, top + ph + 24, str(r["index"]), scale=1)
    c.text(8, top + ph + 14, "BLOCK", scale=1)
    c.text(8, top + ph + 24, "ROLLOUT", scale=1)
    c.png(path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("hostmon")
    s = sub.add_parser("summarize")
    s.add_argument("--out", required=True)
    s.add_argument("--task", required=True)
    s.add_argument("--limits", default=None)
    s.add_argument("--concurrency", type=int, default=1)
    s.add_argument("--blocks", default="")
    s.add_argument("--reset", default="restore", choices=["restore", "pool"])
    s.add_argument("--run-s", type=float, default=None)
    s.add_argument("--tools", default=None)
    a = p.parse_args()
    try:
        if a.cmd == "hostmon":
            hostmon()
            return 0
        return summarize(a)
    except Exception:
        # Not an answer about the rollouts: the helper failed (exit 5, as drums(7) has it).
        import traceback
        traceback.print_exc()
        return 5


if __name__ == "__main__":
    sys.exit(main())
