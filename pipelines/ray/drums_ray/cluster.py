"""The driver's side: one Drums actor per node that offers the drums_session resource, a cluster-wide take
of a ready session of an environment from any node with capacity, release, snapshot, checkpoint moves.

A session's guest (and DevTools) answer only connections opened from its own host (drums(7), "Network
boundary"), so what uses a session must run on the session's node: a take returns where the session is
(node, node id, guest URL, DevTools port), and `on_node(lease)` is the scheduling strategy that puts a
Ray task or actor there. Nothing of the session (screenshots, files) goes through the object store.
"""
import time

import ray
from ray.exceptions import RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from . import config
from .node import DrumsNode, Full, NoEnvironment  # noqa: F401 (re-exported)


class NoCapacity(Exception):
    """No live node could hand out a session of the environment."""


def actor_name(node_id):
    return f"drums-node-{node_id}"


def on_node(node_id, soft=False):
    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=soft)


def drums_nodes():
    """Live Ray nodes that offer drums_session, as (node id, slots)."""
    return [(n["NodeID"], n["Resources"].get(config.RESOURCE, 0)) for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get(config.RESOURCE, 0) > 0]


def _dead(e):
    """Whether an exception says the actor (or its node) is gone."""
    return isinstance(e, RayActorError) or type(e).__name__ in ("ActorDiedError", "ActorUnavailableError", "NodeDiedError")


class Cluster:
    """The Drums actors of a Ray cluster. Made by the driver; the actors are the driver's (they die with
    it, and with them the ownership of their sessions) unless detached=True."""

    def __init__(self, pool_depth=0, detached=False, max_concurrency=16):
        self.actors = {}   # node id -> handle
        self.info = {}     # node id -> last info()
        self.dead = set()
        remote = ray.remote(DrumsNode)
        for node_id, _slots in drums_nodes():
            opts = dict(name=actor_name(node_id), namespace=config.NAMESPACE, num_cpus=0, max_concurrency=max_concurrency,
                        scheduling_strategy=on_node(node_id), max_restarts=0)
            if detached:
                opts["lifetime"] = "detached"
            self.actors[node_id] = remote.options(**opts).remote(pool_depth)
        if not self.actors:
            raise NoCapacity(f"no live Ray node offers the {config.RESOURCE} resource (start nodes with "
                             f"--resources from `python3 -m drums_ray resources`)")
        self.refresh()

    def refresh(self):
        for node_id, a in self.actors.items():
            if node_id in self.dead:
                continue
            try:
                self.info[node_id] = ray.get(a.info.remote(), timeout=60)
            except Exception as e:  # noqa: BLE001
                if not _dead(e):
                    raise
                self.dead.add(node_id)
        return self.status()

    def live(self):
        return [n for n in self.actors if n not in self.dead]

    def by_name(self, name):
        for n, i in self.info.items():
            if i["node"] == name:
                return n
        raise KeyError(f"no Drums node named {name}")

    def status(self):
        """Per node: name, pid of its actor, ceilings, sessions held, pool depth, environments; dead nodes
        marked dead."""
        out = []
        for n in self.actors:
            i = dict(self.info.get(n, {"node_id": n}))
            i["alive"] = n not in self.dead
            out.append(i)
        return out

    def call(self, node_id, method, *args, timeout=300):
        """One actor call; a dead actor marks its node dead and raises."""
        try:
            return ray.get(getattr(self.actors[node_id], method).remote(*args), timeout=timeout)
        except Exception as e:  # noqa: BLE001
            if _dead(e):
                self.dead.add(node_id)
            raise

    # ---- environments

    def make_environment(self, task_path, node_id=None):
        node_id = node_id or self.live()[0]
        return self.call(node_id, "make_environment", task_path, timeout=600)

    def copy_checkpoint(self, env, src, dst, via_path=None):
        """Copy ENV from node SRC to node DST: through Ray's object store (the bundle goes from the one
        actor to the other, not through the driver) or through a directory both nodes see."""
        t0 = time.monotonic()
        if via_path:
            path = self.call(src, "export_to_path", env, via_path)
            try:
                r = self.call(dst, "import_from_path", path)
            finally:
                # The copy in the shared directory was only the way there.
                self.call(src, "remove_export", path)
        else:
            bundle = self.actors[src].export_checkpoint.remote(env)
            r = self.call(dst, "import_checkpoint", bundle)
        r["copy_s"] = round(time.monotonic() - t0, 3)
        r["via"] = "path" if via_path else "ray"
        return r

    def spread_environment(self, env, src):
        """Copy ENV from SRC to every other live node that lacks it."""
        out = []
        for n in self.live():
            if n != src and env not in self.info.get(n, {}).get("environments", []):
                out.append(self.copy_checkpoint(env, src, n))
        self.refresh()
        return out

    def fill(self, env, depth, wait=True, timeout=300, net=None):
        """Every live node keeps DEPTH parked siblings of ENV under network policy NET (None: each node's
        own, its DRUMS_NET)."""
        for n in self.live():
            self.call(n, "fill", env, depth, net)
        if wait:
            return {self.info[n]["node"]: self.call(n, "wait_filled", env, timeout, net, timeout=timeout + 30) for n in self.live()}

    # ---- sessions

    def take(self, env, prefer=None, net=None, host_ids=False):
        """A ready session of ENV under network policy NET (None: the node's own) from a node with
        capacity: the preferred node first, then the others by free slots; a dead or full node is skipped.
        The session has a user namespace of its own, or host ids with `host_ids` (what snapshot needs:
        DrumsNode.take). The lease: node, node_id, session, guest_url, devtools_port, net (the policy the
        session runs under, from its record), record."""
        order = sorted(self.live(), key=lambda n: -(self.info[n]["ceilings"]["max_sessions"] - self.info[n]["sessions"]["held"]))
        if prefer in order:
            order.remove(prefer)
            order.insert(0, prefer)
        why = []
        for n in order:
            if env not in self.info[n].get("environments", []):
                why.append(f"{self.info[n]['node']}: no checkpoint {env}")
                continue
            try:
                lease = self.call(n, "take", env, net, host_ids)
                self.info[n]["sessions"]["held"] += 1
                return lease
            except Exception as e:  # noqa: BLE001
                # Ray's text of an actor's exception holds its traceback: its last line is the message.
                why.append(f"{self.info[n]['node']}: {'actor dead' if _dead(e) else (str(e).strip().splitlines() or [''])[-1]}")
        raise NoCapacity(f"no node could hand out a session of {env}: " + "; ".join(why))

    def release(self, lease):
        r = self.call(lease["node_id"], "release", lease["session"])
        if lease["node_id"] in self.info:
            self.info[lease["node_id"]]["sessions"]["held"] -= 1
        return r

    def snapshot(self, lease, leave_running=True):
        r = self.call(lease["node_id"], "snapshot", lease["session"], leave_running, timeout=600)
        self.refresh()
        return r

    def sweep_dead(self, node_id):
        """Destroy, on its node (a Ray task there: its raylet outlives the actor), the sessions a dead
        actor owned (drums_ray.sweep)."""
        from . import sweep
        pid = self.info.get(node_id, {}).get("pid")
        if pid is None:
            return None
        task = ray.remote(sweep.destroy_sessions_of).options(num_cpus=0, scheduling_strategy=on_node(node_id), max_retries=0)
        return ray.get(task.remote(pid), timeout=300)

    def shutdown(self):
        """Every live actor destroys what it holds; the actors are ended."""
        out = []
        for n in self.live():
            try:
                out.append(self.call(n, "shutdown", timeout=300))
            except Exception as e:  # noqa: BLE001
                out.append({"node_id": n, "error": str(e)[:300]})
        for a in self.actors.values():
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001
                pass
        return out
