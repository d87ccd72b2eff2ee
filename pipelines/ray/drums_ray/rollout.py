"""One OSWorld rollout as a Ray task that holds one drums_session slot of the node it runs on: it takes a
session from that node's Drums actor, drives the session's guest from the same host (the only place
the guest answers), scores it with pipelines/osworld_task.py's begin and finish, and releases it.

The task is where the session is: Ray's scheduler places it on a node with a free drums_session slot,
so placement honours the nodes' ceilings, and the guest's traffic never leaves the node.
"""
import argparse, json, os, time

import ray

from . import config
from .cluster import _dead, actor_name
from .node import Full

import osworld_task  # noqa: E402  (config put pipelines/ on sys.path)


def run(env, task_path, index, hold_s=0.0, marker_dir=None, submitted_at=None, net=None):
    """The rollout's record, on a session under network policy NET (None: its node's own; the record's
    `net` is the policy the session ran under, from its record). {"retry": true, ...} when this node's actor is gone or full before a session
    was taken (the driver sends the rollout elsewhere); a rollout that loses its actor after the take is
    invalid, and its session is left to the node's sweep (its owner is gone)."""
    t_start = time.time()
    node_id = ray.get_runtime_context().get_node_id()
    out = {"type": "ray_rollout", "rollout": index, "node_id": node_id, "node": None, "session": None, "net": None,
           "queue_s": round(t_start - submitted_at, 4) if submitted_at else None, "fault": None, "valid": False}
    try:
        actor = ray.get_actor(actor_name(node_id), namespace=config.NAMESPACE)
        t0 = time.monotonic()
        lease = ray.get(actor.take.remote(env, net))
        take_s = time.monotonic() - t0
    except Exception as e:  # noqa: BLE001
        # Ray raises an actor's exception as a class deriving from it; a named actor that is gone is
        # not found (ValueError) or dead.
        why = "full" if isinstance(e, Full) else "actor dead" if _dead(e) or isinstance(e, ValueError) else "take failed"
        return dict(out, retry=True, why=why, fault=f"take: {str(e)[-300:]}")
    out.update(node=lease["node"], session=lease["session"], net=lease["net"], reset_s=round(take_s, 4), take_kind=lease["kind"],
               take_actor_s=lease["actor_take_s"], take_ray_s=round(take_s - lease["actor_take_s"], 4),
               guest_url=lease["guest_url"], devtools_port=lease["devtools_port"], actor_pid=lease["actor_pid"])
    held = None
    if marker_dir:
        # Who holds what, for a watcher (the fault test): removed when the session is released.
        held = os.path.join(marker_dir, f"{lease['session']}.json")
        with open(held, "w") as f:
            rec = lease["record"]
            json.dump(dict({k: lease[k] for k in ("node", "node_id", "session", "actor_pid", "guest_url", "session_addr", "net")},
                           pidns=rec["ns"]["inodes"]["pid"], host_if=(rec.get("net") or {}).get("host_if"),
                           cgroups=sorted(((rec.get("cgroup") or {}).get("paths") or {}).values()),
                           state_dir=rec["state_dir"]), f)
    try:
        with open(task_path) as f:
            task = json.load(f)
        a = argparse.Namespace(url=lease["guest_url"], setup=False, wait=30.0,
                               marker=f"drums-ray rollout {index} session {lease['session']}")
        b, fin = {}, {}
        t = time.monotonic()
        osworld_task.begin(a, task, b)
        out["begin_s"] = round(time.monotonic() - t, 4)
        out["canary"], out["canary_seen"] = b.get("canary"), b.get("canary_seen")
        if hold_s:
            time.sleep(hold_s)  # an agent thinking; also the fault test's window
        t = time.monotonic()
        osworld_task.finish(a, task, fin)
        out["finish_s"] = round(time.monotonic() - t, 4)
        out.update(score=fin.get("score"), score_before_action=fin.get("score_before_action"),
                   action_s=fin.get("action_s"), eval_s=fin.get("eval_s"))
        if b.get("canary") != "clean":
            out["fault"] = f"interference: the canary saw {b.get('canary_seen')}"
    except (osworld_task.Fault, osworld_task.Unsupported, KeyError, OSError) as e:
        out["fault"] = f"task: {e}"
    t = time.monotonic()
    try:
        r = ray.get(actor.release.remote(lease["session"]))
        out["release_s"] = round(time.monotonic() - t, 4)
        if not r.get("released"):
            out["fault"] = out["fault"] or f"release: {r.get('why')}"
    except Exception as e:  # noqa: BLE001
        out["fault"] = out["fault"] or ("release: the node's Drums actor died; the session is its node's sweep's" if _dead(e) else f"release: {e}")
        out["actor_died"] = _dead(e)
    if held:
        try:
            os.unlink(held)
        except OSError:
            pass
    out["valid"] = out["fault"] is None and out.get("score") is not None
    out["wall_s"] = round(time.time() - t_start, 4)
    return out


remote_run = ray.remote(run)
