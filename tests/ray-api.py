#!/usr/bin/env python3
"""The driver's API of drums_ray on a local two-node cluster of 2 slots a node (tests/ray.rs): take from a
preferred node until it is full, the next take served by the other node; the guest of a taken session
answers from this host; each taken session runs in a user namespace of its own (its desktop's uid_map is
not the host's identity map) except one taken with host_ids=True; a snapshot of a session in its own user
namespace is refused; snapshot the host-ids session on its node (a new environment there) and take from
it; release everything; the cluster stopped. Prints one JSON object of what happened."""
import json, os, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pipelines", "ray"))
import drums_ray  # noqa: E402
from drums_ray import config  # noqa: E402
from drums_ray.local import LocalCluster  # noqa: E402
import benchlib  # noqa: E402

task = os.path.join(config.REPO, "tests/data/osworld-e0df059f.json")


def own_userns(rec):
    """Whether the session's guest process runs in a user namespace of its own: its uid_map, read from the
    host's /proc, is not the host's identity map."""
    pid = next(p["host_pid"] for p in rec["desktop"]["processes"] if p["role"] == "guest")
    with open(f"/proc/{pid}/uid_map") as f:
        return f.read().split() != ["0", "0", "4294967295"]


out = {"leases": [], "errors": []}
lc = LocalCluster(tag=f"api-{os.getpid()}", slots=2).start()
import ray  # noqa: E402
from drums_ray.cluster import Cluster, NoCapacity  # noqa: E402
c = Cluster()
held = []
try:
    head, n2 = c.by_name("head"), c.by_name("n2")
    out["slots"] = {i["node"]: i["ceilings"]["max_sessions"] for i in c.status()}
    env = c.make_environment(task, head)["env"]
    c.refresh()
    out["copy"] = c.copy_checkpoint(env, head, n2)
    c.refresh()
    for i in range(3):
        # The third (on n2) with host ids: it is snapshot below.
        lease = c.take(env, prefer=head, host_ids=(i == 2))
        held.append(lease)
        ok, detail = benchlib.guest_answers(lease["record"])
        out["leases"].append({"node": lease["node"], "kind": lease["kind"], "guest": ok, "env": env, "own_userns": own_userns(lease["record"])})
    # A session in its own user namespace is no checkpoint source: drums-ckpt refuses it, naming --host-ids.
    try:
        c.snapshot(held[0])
        out["snapshot_userns"] = None
    except Exception as e:  # noqa: BLE001
        out["snapshot_userns"] = str(e)[-600:]
    # Snapshot the session on n2: a new environment there, which only n2 has.
    snap = c.snapshot(held[2])
    env2 = snap["env"]
    out["snapshot"] = {"node": snap["node"], "env": env2, "dir": snap["record"]["dir"]}
    out["env2_on"] = [i["node"] for i in c.status() if env2 in i.get("environments", [])]
    out["release"] = c.release(held.pop(0))
    lease = c.take(env2, prefer=head)
    held.append(lease)
    out["from_snapshot"] = {"node": lease["node"], "checkpoint": lease["record"].get("restore", {}).get("checkpoint"),
                            "guest": benchlib.guest_answers(lease["record"])[0], "own_userns": own_userns(lease["record"])}
    # Both nodes at their ceilings now (head 1 + n2 2 ... one more on head, then none anywhere).
    held.append(c.take(env, prefer=head))
    try:
        held.append(c.take(env))
        out["full_everywhere"] = None
    except NoCapacity as e:
        out["full_everywhere"] = str(e)
finally:
    for lease in held:
        try:
            c.release(lease)
        except Exception as e:  # noqa: BLE001
            out["errors"].append(str(e)[:300])
    out["shutdown"] = c.shutdown()
    ray.shutdown()
    out["stop"] = lc.stop()
    lc.remove_roots()
    out["sessions"] = [l["session"] for l in held]
print(json.dumps(out))
