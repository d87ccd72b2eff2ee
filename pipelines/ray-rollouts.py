#!/usr/bin/env python3
"""OSWorld task rollouts on Drums sessions taken from a Ray cluster (docs/ray.md).

  pipelines/ray-rollouts.py --address local --rollouts 8 --out DIR > DIR.jsonl
  pipelines/ray-rollouts.py --address HEAD:6379 --env c-0123456789ab --task tests/data/osworld-e0df059f.json --out DIR

--env is a task file (default tests/data/osworld-e0df059f.json: the environment is made from it, as
first-check.sh's post_setup block makes its checkpoint: a cold session on the driver's node, the task's
setup, drums-ckpt) or a checkpoint id some node has. The checkpoint is copied to every node that lacks it
(through Ray's object store, or --copy-via DIR), each node's pool is filled to --pool-depth outside the
clock, then --rollouts rollouts run, --concurrency at a time, each a Ray task holding one drums_session
slot: it takes a session on its node, runs the task's begin (no setup: the checkpoint has it) and finish
(the scripted action, the evaluation; pipelines/osworld_task.py), and releases it. A rollout whose node's
actor is gone or full before the take is sent to another node; one that loses its actor after the take
is invalid and run again elsewhere. --address local starts a two-node cluster on this machine
(drums_ray.local), runs, and stops it. --baseline also runs the same rollouts by direct use of the tools
on the driver's node (restore, reseed, ready per rollout; the same concurrency), in the same run.

--net POLICY gives the rollouts' sessions (and the pools filled for them) that network policy; each
ray_rollout record's `net` is the policy its session ran under, read from the session's record.

stdout: one ray_rollout line per rollout attempt that took a session (node, session, net, reset_s, score,
valid, ...), baseline_rollout lines, a ray_rollouts_summary line last; the same files in --out
(rollouts.jsonl, summary.json, nodes.json, held/). Exit 0 when every rollout is valid with score 1 and
nothing was left; 1 otherwise; 2 usage; 4 environment; 5 the driver failed.
"""
import argparse, concurrent.futures, json, os, subprocess, sys, threading, time, traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "ray"))
import drums_ray  # noqa: E402  (puts Ray and pipelines/ on sys.path)
from drums_ray import config  # noqa: E402
import benchlib, osworld_task  # noqa: E402


def log(msg):
    print(f"ray-rollouts: {msg}", file=sys.stderr, flush=True)


# Standard output carries the records only: Ray's driver prints its own notices (a worker that died, a
# raylet's messages) on file descriptor 1, so that goes to standard error and the records to a copy of it.
RECORDS = sys.stdout


def keep_stdout_for_records():
    global RECORDS
    sys.stdout.flush()
    RECORDS = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)


def emit(out_dir, rec, name="rollouts.jsonl"):
    line = json.dumps(rec, separators=(",", ":"))
    print(line, file=RECORDS, flush=True)
    with open(os.path.join(out_dir, name), "a") as f:
        f.write(line + "\n")


def stats_ms(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"p50_ms": round(benchlib.pct(xs, 0.5) * 1000, 2), "p95_ms": round(benchlib.pct(xs, 0.95) * 1000, 2),
            "min_ms": round(min(xs) * 1000, 2), "max_ms": round(max(xs) * 1000, 2), "n": len(xs)}


def ray_arm(a, ray, cluster, env, held_dir):
    """The rollouts on the cluster; (records, wall seconds)."""
    from drums_ray.rollout import remote_run
    records, pending, attempts, avoid = [], {}, {}, {}
    todo = list(range(1, a.rollouts + 1))
    t0 = time.monotonic()
    turn = [0]

    def submit(i):
        attempts[i] = attempts.get(i, 0) + 1
        opts = dict(num_cpus=0, resources={config.RESOURCE: 1}, max_retries=0)
        if cluster.dead or i in avoid:
            # A node whose actor is gone still offers its slots to Ray, and a node whose actor refused a
            # take as full (its parked sessions count against its ceiling, not against Ray's slots) may
            # still have slots: such a rollout goes to the other live nodes in turn.
            live = [n for n in cluster.live() if n != avoid.get(i)] or cluster.live()
            if not live:
                raise RuntimeError("no live Drums node is left")
            turn[0] += 1
            opts["scheduling_strategy"] = drums_ray.cluster.on_node(live[turn[0] % len(live)])
        else:
            opts["scheduling_strategy"] = "SPREAD"
        ref = remote_run.options(**opts).remote(env, a.task, i, a.hold, held_dir, time.time(), a.net)
        pending[ref] = i

    while todo or pending:
        while todo and len(pending) < a.concurrency:
            submit(todo.pop(0))
        done, _ = ray.wait(list(pending), num_returns=1, timeout=600)
        if not done:
            raise RuntimeError("no rollout finished in 600 s")
        for ref in done:
            i = pending.pop(ref)
            try:
                r = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - the task itself died (its worker, its node)
                r = {"type": "ray_rollout", "rollout": i, "node": None, "valid": False, "fault": f"task: {str(e)[-300:]}"}
            r["attempt"] = attempts[i]
            if r.get("retry"):
                if r.get("why") == "actor dead":
                    cluster.dead.add(r["node_id"])
                log(f"rollout {i}: {r['why']} on node {r.get('node_id', '')[:12]}, sent elsewhere")
                with open(os.path.join(a.out, "reroutes.jsonl"), "a") as f:
                    f.write(json.dumps(r) + "\n")
                # Full is a wait for capacity (up to about a minute); anything else gets 4 attempts.
                if attempts[i] >= (300 if r.get("why") == "full" else 4):
                    raise RuntimeError(f"rollout {i}: no node could take it after {attempts[i]} attempts: {r.get('fault')}")
                if r.get("why") == "full":
                    avoid[i] = r.get("node_id")
                    time.sleep(0.2)
                todo.insert(0, i)
                continue
            if r.get("actor_died"):
                cluster.dead.add(r["node_id"])
            r["node"] = r.get("node") or cluster.info.get(r.get("node_id"), {}).get("node")
            records.append(r)
            emit(a.out, r)
            log(f"rollout {i} (attempt {r['attempt']}) on {r['node']}: reset {r.get('reset_s')} s, score {r.get('score')}, valid {r['valid']}" + (f", FAULT {r['fault']}" if r.get("fault") else ""))
            if not r["valid"] and attempts[i] < 4 and (r.get("actor_died") or (r.get("fault") or "").startswith("task: ")):
                # Lost with its node's actor (or its worker): run it again, on a live node.
                todo.insert(0, i)
    return records, time.monotonic() - t0


def baseline_arm(a, ckpt, task):
    """The same rollouts by direct use of the tools on this node, as first-check.sh's post_setup block
    resets (restore, reseed, ready per rollout), --concurrency at a time; (records, wall seconds)."""
    env = dict(benchlib.ENV)
    if a.net is not None:
        env["DRUMS_NET"] = a.net  # the same policy as the Ray arm's sessions
    env["DRUMS_CHECKPOINT_DIR"] = os.path.dirname(ckpt["dir"])
    if ckpt.get("mapped"):
        env["DRUMS_MAPPED_DIR"] = os.path.dirname(ckpt["mapped"]["dir"])
    text = json.dumps(ckpt)

    def one(i):
        r = {"type": "baseline_rollout", "rollout": i, "fault": None, "valid": False}
        t = time.monotonic()
        try:
            rec = benchlib.restore_ready(text, env=env)
        except Exception as e:  # noqa: BLE001
            r["fault"] = f"reset: {str(e)[-300:]}"
            return r
        r["reset_s"] = round(time.monotonic() - t, 4)
        s = json.loads(rec)
        r["session"] = s["id"]
        try:
            ns = argparse.Namespace(url=s["desktop"]["guest_url"], setup=False, wait=30.0, marker=f"drums-ray baseline {i}")
            b, fin = {}, {}
            osworld_task.begin(ns, task, b)
            osworld_task.finish(ns, task, fin)
            r.update(score=fin.get("score"), score_before_action=fin.get("score_before_action"), canary=b.get("canary"))
            if b.get("canary") != "clean":
                r["fault"] = "interference: the canary saw a marker"
        except (osworld_task.Fault, osworld_task.Unsupported) as e:
            r["fault"] = f"task: {e}"
        t = time.monotonic()
        benchlib.sh(["drums-sweep"], stdin=rec, check=False, env=env)
        r["release_s"] = round(time.monotonic() - t, 4)
        r["valid"] = r["fault"] is None and r.get("score") is not None
        return r

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(a.concurrency) as ex:
        recs = list(ex.map(one, range(1, a.rollouts + 1)))
    return recs, time.monotonic() - t0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--address", required=True, help="a Ray cluster's address, or local (start a two-node cluster here)")
    p.add_argument("--env", default=os.path.join(config.REPO, "tests/data/osworld-e0df059f.json"), help="a task file or a checkpoint id")
    p.add_argument("--task", default=None, help="the task file to score with (default: --env when it is a file, else e0df059f)")
    p.add_argument("--rollouts", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=2, help="rollouts in flight at once (default 2)")
    p.add_argument("--pool-depth", type=int, default=1, help="parked sessions per node, filled outside the clock (default 1)")
    p.add_argument("--slots", type=int, default=4, help="local: each node's count ceiling, DRUMS_RAY_MAX_SESSIONS (default 4)")
    p.add_argument("--copy-via", default=None, help="copy the checkpoint through this directory instead of Ray's object store")
    p.add_argument("--hold", type=float, default=0.0, help="seconds each rollout waits between begin and finish (an agent thinking)")
    p.add_argument("--baseline", action="store_true", help="also run the rollouts by direct use of the tools on this node")
    p.add_argument("--net", default=None, metavar="POLICY",
                   help="the network policy of the rollouts' sessions (none, internet, allow:ENTRY,...; drums(7), \"Network "
                   "boundary\"), their pools' too; default: each node's own (its DRUMS_NET, else none). The uplink and "
                   "resolver are each node's (DRUMS_UPLINK, DRUMS_NET_DNS where its `ray start` ran)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    keep_stdout_for_records()
    if a.rollouts < 1 or a.concurrency < 1 or a.pool_depth < 0:
        p.error("--rollouts and --concurrency must be positive, --pool-depth not negative")
    if os.geteuid() != 0:
        log("run as root (sessions need namespaces, mounts, cgroups)")
        return 4
    try:
        import ray
    except ImportError:
        log(f"Ray is not importable (install it: pipelines/setup.d/ray.sh, into {drums_ray._RAY_DIR})")
        return 4
    env_is_task = os.path.isfile(a.env)
    a.task = os.path.abspath(a.task or (a.env if env_is_task else os.path.join(config.REPO, "tests/data/osworld-e0df059f.json")))
    with open(a.task) as f:
        task = json.load(f)
    osworld_task.check_supported(task)
    os.makedirs(a.out, exist_ok=True)
    a.out = os.path.abspath(a.out)
    for n in ("rollouts.jsonl", "reroutes.jsonl", "baseline.jsonl"):
        if os.path.exists(os.path.join(a.out, n)):
            os.unlink(os.path.join(a.out, n))
    held_dir = os.path.join(a.out, "held")
    os.makedirs(held_dir, exist_ok=True)

    local = cluster = None
    made_env = None
    copied_to = []  # nodes this run copied a checkpoint it did not make to: the copies are removed at the end
    summary = {"type": "ray_rollouts_summary", "address": a.address, "rollouts_asked": a.rollouts, "concurrency": a.concurrency,
               "pool_depth": a.pool_depth, "hold_s": a.hold, "task": a.task, "net": a.net}
    rc = 5
    records, base = [], []
    try:
        if a.address == "local":
            from drums_ray.local import LocalCluster
            t = time.monotonic()
            local = LocalCluster(slots=a.slots).start()
            summary["cluster_start_s"] = round(time.monotonic() - t, 2)
            summary["local"] = {"address": local.address, "nodes": local.nodes}
            log(f"local cluster up at {local.address} in {summary['cluster_start_s']} s")
        else:
            ray.init(address=a.address, namespace=config.NAMESPACE, logging_level="ERROR", log_to_driver=False)
        from drums_ray.cluster import Cluster
        cluster = Cluster()
        with open(os.path.join(a.out, "nodes.json"), "w") as f:
            json.dump(cluster.status(), f)
        here = ray.get_runtime_context().get_node_id()
        # The environment: made on the driver's node from the task, or found where it is.
        t = time.monotonic()
        if env_is_task:
            m = cluster.make_environment(a.task, here if here in cluster.actors else None)
            env, src = m["env"], cluster.by_name(m["node"])
            made_env = env
            summary["environment"] = {"made_from": a.task, "env": env, "node": m["node"], "cold_setup_s": m["cold_setup_s"], "checkpoint_s": m["checkpoint_s"]}
            cluster.refresh()
        else:
            env = a.env
            src = next((n for n in cluster.live() if env in cluster.info[n]["environments"]), None)
            if src is None:
                log(f"no node has checkpoint {env}")
                return 4
            summary["environment"] = {"env": env, "node": cluster.info[src]["node"]}
        log(f"environment {env} on {cluster.info[src]['node']}")
        copies = []
        for n in cluster.live():
            if n != src and env not in cluster.info[n]["environments"]:
                c = cluster.copy_checkpoint(env, src, n, a.copy_via)
                copies.append(c)
                copied_to.append(n)
                log(f"checkpoint {env} copied to {c['node']} via {c['via']} in {c['copy_s']} s")
        cluster.refresh()
        summary["copies"] = copies
        # Outside the clock: the pools, and one idle Ray worker per slot in use (a worker's first start).
        t = time.monotonic()
        if a.pool_depth:
            summary["pools"] = cluster.fill(env, a.pool_depth, net=a.net)
        warm = [ray.remote(lambda: ray.get_runtime_context().get_node_id()).options(num_cpus=0, resources={config.RESOURCE: 1}, scheduling_strategy="SPREAD").remote()
                for _ in range(a.concurrency * 2)]
        ray.get(warm)
        summary["prep_outside_clock_s"] = round(time.monotonic() - t, 2)
        with open(os.path.join(a.out, "nodes.json"), "w") as f:
            json.dump(cluster.refresh(), f)

        records, wall = ray_arm(a, ray, cluster, env, held_dir)
        cluster.refresh()
        final = {}
        for r in records:
            final[r["rollout"]] = r  # the last attempt of each rollout
        ok = [r for r in final.values() if r["valid"] and r.get("score") == 1.0]
        per_node = {}
        for r in final.values():
            per_node[r["node"]] = per_node.get(r["node"], 0) + 1
        summary.update({
            "rollouts": len(final), "attempts": len(records), "valid": sum(1 for r in final.values() if r["valid"]),
            "score_1": len(ok), "lost_to_dead_actor": sum(1 for r in records if r.get("actor_died")),
            "per_node": per_node, "dead_nodes": [cluster.info.get(n, {}).get("node", n) for n in cluster.dead],
            "wall_s": round(wall, 3), "throughput_per_min": round(len(ok) / wall * 60, 2) if wall > 0 else None,
            "reset_s": benchlib.summary([r["reset_s"] for r in final.values() if r.get("reset_s") is not None]),
            "take_ray_overhead": stats_ms([r.get("take_ray_s") for r in records]),
            "take_actor": stats_ms([r.get("take_actor_s") for r in records]),
            "queue": stats_ms([r.get("queue_s") for r in records]),
            "take_kinds": {k: sum(1 for r in records if r.get("take_kind") == k) for k in ("pool", "restore")},
            "method": "wall_s: first rollout submitted to last finished; pools filled and Ray workers started before it. "
                      "reset_s: the take as the rollout task sees it (actor call, thaw or restore, ready); take_ray_overhead: "
                      "that minus the actor's own time for the take (the Ray call's cost); queue: submit to task start.",
        })
        if a.baseline:
            # The pools are emptied first so that both arms run beside the same idle cluster.
            for n in cluster.live():
                cluster.call(n, "shutdown")  # parked siblings destroyed; the actor stays up for the teardown
            ck = cluster.call(src, "checkpoint", env)
            base, bwall = baseline_arm(a, ck, task)
            for r in base:
                emit(a.out, r, "baseline.jsonl")
            bok = [r for r in base if r["valid"] and r.get("score") == 1.0]
            summary["baseline"] = {"rollouts": len(base), "valid": sum(1 for r in base if r["valid"]), "score_1": len(bok),
                                   "wall_s": round(bwall, 3), "throughput_per_min": round(len(bok) / bwall * 60, 2) if bwall > 0 else None,
                                   "reset_s": benchlib.summary([r["reset_s"] for r in base if r.get("reset_s") is not None]),
                                   "method": "direct tools on the driver's node: restore, reseed, ready (benchlib.restore_ready) per rollout, "
                                             "osworld_task begin and finish, drums-sweep; same concurrency; run after the Ray arm"}
            if summary["throughput_per_min"] and summary["baseline"]["throughput_per_min"]:
                summary["ray_over_baseline_throughput"] = round(summary["throughput_per_min"] / summary["baseline"]["throughput_per_min"], 3)
        rc = 0
    except Exception as e:  # noqa: BLE001
        summary["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
        rc = 5
    finally:
        summary["teardown"] = teardown(cluster, local, made_env, records, None if made_env else (a.env, copied_to))
    sessions = {r.get("session") for r in records + base if r.get("session")}
    held = {x["id"] for x in benchlib.host_inventory()["sessions"]}  # drums-sweep --report
    summary["left_on_machine"] = sorted(sessions & held)
    if rc == 0:
        want = summary.get("score_1") == a.rollouts and (not a.baseline or summary["baseline"]["score_1"] == a.rollouts)
        rc = 0 if want and not summary["left_on_machine"] and not summary["teardown"].get("left_pids") else 1
    emit(a.out, summary, "summary.jsonl")
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return rc


def teardown(cluster, local, made_env, records, copies=None):
    """The actors destroy what they hold; the environment this run made is removed from every node; the
    sessions of dead actors are left to their node's sweep, run here (drums-sweep --orphans with the
    node's roots); a local cluster is stopped. What was done, and anything left."""
    out = {}
    import ray
    try:
        if cluster:
            for n in cluster.live():
                try:
                    cluster.call(n, "shutdown")
                    if made_env and made_env in cluster.call(n, "environments"):
                        cluster.call(n, "remove_checkpoint", made_env)
                except Exception as e:  # noqa: BLE001
                    out.setdefault("errors", []).append(str(e)[:300])
            if copies:
                env, nodes = copies
                for n in nodes:
                    if n in cluster.live():
                        try:
                            cluster.call(n, "remove_checkpoint", env)
                        except Exception as e:  # noqa: BLE001
                            out.setdefault("errors", []).append(str(e)[:300])
            out["dead_nodes_swept"] = []
            for n in sorted(cluster.dead):
                i = cluster.info.get(n, {})
                # The dead actor's sessions (parked and taken) belong to nobody: destroyed on its node now
                # rather than at the node's next cron sweep, which waits out its grace period.
                try:
                    out["dead_nodes_swept"].append(dict(cluster.sweep_dead(n) or {}, node=i.get("node")))
                except Exception as e:  # noqa: BLE001 - the node itself may be gone: its cron sweep's work
                    out["dead_nodes_swept"].append({"node": i.get("node"), "error": str(e)[:300]})
                if made_env and local and i.get("checkpoint_dir"):
                    # A checkpoint has no owner: the run that made it removes it (a local node's roots are this machine's).
                    benchlib.remove_checkpoint({"dir": os.path.join(i["checkpoint_dir"], made_env), "mapped": {"dir": os.path.join(i["mapped_dir"], made_env)}})
            for a in cluster.actors.values():
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001
                    pass
    finally:
        if local:
            try:
                ray.shutdown()
            except Exception:  # noqa: BLE001
                pass
            out.update(local.stop())
            local.remove_roots()
    return out


if __name__ == "__main__":
    sys.exit(main())
