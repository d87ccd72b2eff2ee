#!/usr/bin/python3
"""OSWorld's reset on Drums, two ways, interleaved in one run (docs/osworld.md, "Reset, measured"):

  provider  DrumsProvider.revert_to_snapshot, what DesktopEnv.reset calls after a used episode: the held
            session destroyed, a fresh sibling of the checkpoint taken from its warm pool (refilled to
            depth 1 with `drums-pool fill` before each, outside the clock; a take that finds the
            pool empty restores instead, and is counted as `source: restore`)
  cold      what OSWorld's docker provider does with its VM: the session destroyed (drums-sweep) and a
            new one cold-started (pipelines/cold.sh), on the same image

  pipelines/osworld-reset-bench.py --checkpoint ckpt.json [--rounds 10] > result.json

Each round runs both, in alternating order (ABBA...), timing each from the call until the new session is
agent-ready. Prints one JSON object: both arms' p50, p95, min, max (seconds, n), the provider's
sources, the image, the machine's load before and after. Needs PYTHONPATH as docs/osworld.md says
(added here when at its default places). Exit 0, 1 on a failed reset, 2 usage.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "pipelines"))
for p in (str(REPO / "pipelines" / "osworld"), os.environ.get("DRUMS_OSWORLD_HARNESS", "/var/lib/drums/osworld-harness")):
    if p not in sys.path:
        sys.path.insert(0, p)
import benchlib  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True, help="checkpoint record file")
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    ckpt_line = Path(a.checkpoint).read_text().strip()
    ckpt = json.loads(ckpt_line)
    image = ckpt["image"]["name"]
    import drums_osworld
    drums_osworld.register()
    from drums_osworld.provider import DrumsProvider

    env = dict(benchlib.ENV)
    env["DRUMS_OVERLAY_ARGS"] = f"--image {image}"
    prov = DrumsProvider()
    fill = ["drums-pool", "fill", "--checkpoint", ckpt["id"], "--depth", "1"]
    times = {"provider": [], "cold": []}
    sources = []
    cold_rec = None
    load0 = os.getloadavg()
    try:
        prov.start_emulator(a.checkpoint)
        cold_rec = benchlib.sh([str(REPO / "pipelines/cold.sh")], env=env)
        for i in range(a.rounds):
            order = ["provider", "cold"] if i % 2 == 0 else ["cold", "provider"]
            for arm in order:
                if arm == "provider":
                    benchlib.sh(fill)  # outside the clock
                    t0 = time.monotonic()
                    prov.revert_to_snapshot(a.checkpoint, "init_state")
                    times["provider"].append(time.monotonic() - t0)
                    sources.append(prov.takes[-1]["source"])
                else:
                    t0 = time.monotonic()
                    old, cold_rec = cold_rec, None
                    benchlib.destroy(old)
                    cold_rec = benchlib.sh([str(REPO / "pipelines/cold.sh")], env=env)
                    times["cold"].append(time.monotonic() - t0)
    finally:
        prov.stop_emulator(a.checkpoint)
        if cold_rec:
            benchlib.destroy(cold_rec)
        subprocess.run(["drums-pool", "drain", "--checkpoint", ckpt["id"]], capture_output=True, env=benchlib.ENV)
    out = {
        "type": "osworld_reset_bench",
        "method": "interleaved rounds (ABBA); provider = DrumsProvider.revert_to_snapshot (destroy + take from a warm pool of depth 1, refilled outside the clock); cold = drums-sweep + pipelines/cold.sh; each timed until the new session is agent-ready",
        "image": image,
        "checkpoint": ckpt["id"],
        "rounds": a.rounds,
        "provider": benchlib.summary(times["provider"]),
        "cold": benchlib.summary(times["cold"]),
        "provider_sources": {s: sources.count(s) for s in set(sources)},
        "p50_ratio_cold_over_provider": round(benchlib.pct(times["cold"], 0.5) / benchlib.pct(times["provider"], 0.5), 2),
        "loadavg_before": load0,
        "loadavg_after": os.getloadavg(),
        "raw_s": {k: [round(x, 4) for x in v] for k, v in times.items()},
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
