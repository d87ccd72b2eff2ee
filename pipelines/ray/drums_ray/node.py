"""The Drums actor of one node: it owns that node's checkpoints, its warm pools and every session it hands
out, and does the work with the Drums tools, as the pipelines compose them.

Ownership follows the actor. Every tool runs with DRUMS_OWNER set to the actor's own process, so each
session it restores (parked or taken) belongs to it: when the actor dies (SIGKILL, its node's raylet, the
driver that owned it), `drums-sweep --orphans` on the node destroys all of them. That is why the actor
keeps its warm pool itself rather than through `drums-pool fill`: a drums-pool sibling is marked
parked so that it outlives its filler on purpose (a cron pool, drums-pool(7)), which is the opposite of
what a pool that dies with its actor needs. The steps are the same (restore, reseed, ready, freeze;
thaw and ready again at take), with the same tools.

Identity (drums(7), "Its own user namespace"): the cold session make_environment checkpoints has host ids
(drums-ckpt checkpoints no session in a user namespace of its own); every sibling the actor restores,
parked or taken, runs in a user namespace of its own, except one taken with take(env, host_ids=True),
restored on the spot with host ids so that snapshot can checkpoint it.
"""
import json, os, threading, time

from . import checkpoints, config

import benchlib  # noqa: E402  (config put pipelines/ on sys.path)


class Full(Exception):
    """The node is at a ceiling (sessions or memory) and has no parked session of the environment."""


class NoEnvironment(Exception):
    """The node has no checkpoint of that name."""


def pool_key(env, net):
    """The pool a sibling of ENV under the network policy NET is parked in: ENV itself under the node's
    own policy (net None), else `ENV net=POLICY` (siblings under different policies never stand in for
    each other)."""
    return env if net is None else f"{env} net={net}"


def policy_of(rec):
    """The network policy a session record says it runs under (`egress.policy`; absent: none)."""
    return (rec.get("egress") or {}).get("policy") or "none"


class DrumsNode:
    def __init__(self, pool_depth=0):
        self.cfg = config.node_config()
        self.env = dict(benchlib.ENV)
        # The owner is this process, whichever process imported benchlib first.
        self.env["DRUMS_OWNER"] = str(os.getpid())
        self.env.pop("DRUMS_RAY_CLUSTER", None)  # the local cluster's process marker is not the sessions'
        for k in ("DRUMS_CHECKPOINT_DIR", "DRUMS_MAPPED_DIR", "DRUMS_STATE_DIR"):
            if k in os.environ:
                self.env[k] = os.environ[k]
        self.lock = threading.Lock()
        # Keyed by pool_key(env, net): a rollout asks for a network policy (net=) or gets the node's own.
        self.parked = {}      # env -> [session record text], frozen siblings ready to hand out
        self.taken = {}       # session id -> record text
        self.inflight = 0     # sessions being restored
        self.depth = {}       # env -> wanted pool depth
        self.fillers = {}     # env -> thread
        self.stopping = False
        self.default_depth = pool_depth
        self.counts = {"taken": 0, "from_pool": 0, "restored_at_take": 0, "refused_full": 0, "fill_failed": 0}

    # ---- what the node is and holds

    def info(self):
        import ray
        with self.lock:
            held = self.inflight + len(self.taken) + sum(len(v) for v in self.parked.values())
            return {
                "node": self.cfg["node"], "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "checkpoint_dir": self.cfg["checkpoint_dir"], "mapped_dir": self.cfg["mapped_dir"],
                "ceilings": {"max_sessions": self.cfg["max_sessions"], "min_available_bytes": self.cfg["min_available_bytes"]},
                "mem_available_bytes": config.mem_available_bytes(),
                "sessions": {"held": held, "taken": len(self.taken), "parked": {k: len(v) for k, v in self.parked.items()}, "inflight": self.inflight},
                "pool_depth": dict(self.depth), "environments": self.environments(), "counts": dict(self.counts),
                "kernel": os.uname().release,
            }

    def environments(self):
        root = self.cfg["checkpoint_dir"]
        try:
            return sorted(n for n in os.listdir(root) if n.startswith("c-") and os.path.exists(os.path.join(root, n, checkpoints.RECORD_FILE)))
        except OSError:
            return []

    def checkpoint(self, env):
        try:
            return checkpoints.load(self.cfg["checkpoint_dir"], env)
        except OSError:
            raise NoEnvironment(f"node {self.cfg['node']} has no checkpoint {env} in {self.cfg['checkpoint_dir']}") from None

    # ---- making an environment

    def make_environment(self, task_path):
        """A post-setup checkpoint of an OSWorld task, as first-check.sh's post_setup block makes it: a cold
        session, the task's setup through its guest, drums-ckpt (the source ends with the dump)."""
        import osworld_task, argparse
        with open(task_path) as f:
            task = json.load(f)
        osworld_task.check_supported(task)
        t0 = time.monotonic()
        cold = benchlib.source_session(self.env)  # host ids: drums-ckpt's source
        try:
            rec = json.loads(cold)
            out = {"fault": None}
            a = argparse.Namespace(url=rec["desktop"]["guest_url"], setup=True, wait=30.0, marker="drums-ray")
            osworld_task.begin(a, task, out)
            t1 = time.monotonic()
            ckpt = benchlib.sh(["drums-ckpt"], stdin=cold, env=self.env)
        except BaseException:
            benchlib.sh(["drums-sweep"], stdin=cold, check=False, env=self.env)
            raise
        c = json.loads(ckpt)
        return {"env": c["id"], "node": self.cfg["node"], "record": c, "cold_setup_s": round(t1 - t0, 3),
                "checkpoint_s": round(time.monotonic() - t1, 3), "setup": out}

    # ---- the pool

    def _held(self):
        return self.inflight + len(self.taken) + sum(len(v) for v in self.parked.values())

    def _ceiling(self):
        """Why no session may be made now (None: one may). Called with the lock held."""
        if self._held() >= self.cfg["max_sessions"]:
            return f"count ceiling ({self.cfg['max_sessions']} sessions held)"
        if config.mem_available_bytes() < self.cfg["min_available_bytes"]:
            return "memory ceiling (MemAvailable below DRUMS_RAY_MIN_AVAILABLE)"
        return None

    def _net_env(self, net):
        """The tools' environment for a sibling under network policy NET: the node's own (its DRUMS_NET,
        else none) when NET is None, else DRUMS_NET=NET. The uplink, resolver, exceptions and cap stay the
        node's (DRUMS_UPLINK, DRUMS_NET_DNS, ... of its `ray start`): where a node's sessions reach the
        network is the operator's choice for that host, the policy the rollout's."""
        if net is None:
            return self.env
        if not isinstance(net, str) or not net:
            raise ValueError(f"net={net!r}: a network policy (none, internet, allow:ENTRY,...) or None")
        return dict(self.env, DRUMS_NET=net)

    def _restore(self, ckpt_text, freeze, net=None, host_ids=False):
        """A usable sibling from `drums-restore --ready` (benchlib.restore_ready: restore, reseed and ready
        check in the tool, as drums-pool's filler makes its siblings) under network policy NET (_net_env),
        in a user namespace of its own unless `host_ids`, then frozen; the record text. A failure destroys
        the sibling (the tool does for its steps; the freeze here)."""
        rec = benchlib.restore_ready(ckpt_text, env=self._net_env(net), host_ids=host_ids)
        if freeze:
            try:
                rec = benchlib.sh(["drums-cgroup", "freeze"], stdin=rec, env=self.env)
            except Exception:
                benchlib.sh(["drums-sweep"], stdin=rec, check=False, env=self.env)
                raise
        return rec

    def fill(self, env, depth, net=None):
        """Keep DEPTH parked siblings of ENV under network policy NET (None: the node's own) on this node
        (0 stops the filler), within the ceilings."""
        ckpt = json.dumps(self.checkpoint(env))
        self._net_env(net)  # a malformed policy fails the call, not the filler
        key = pool_key(env, net)
        with self.lock:
            self.depth[key] = int(depth)
            self.parked.setdefault(key, [])
            t = self.fillers.get(key)
            if depth > 0 and not (t and t.is_alive()):
                t = threading.Thread(target=self._filler, args=(key, ckpt, net), daemon=True)
                self.fillers[key] = t
                t.start()
        return {"node": self.cfg["node"], "env": env, "net": net, "depth": depth}

    def _filler(self, env, ckpt, net=None):
        # env: the pool's key (pool_key).
        fails = 0
        while not self.stopping:
            with self.lock:
                want = self.depth.get(env, 0) - len(self.parked.get(env, [])) - 0
                why = self._ceiling() if want > 0 else "depth reached"
                if want > 0 and why is None:
                    self.inflight += 1
            if want <= 0 or why is not None:
                time.sleep(0.1)
                if self.depth.get(env, 0) == 0:
                    return
                continue
            try:
                rec = self._restore(ckpt, freeze=True, net=net)
                fails = 0
                with self.lock:
                    self.inflight -= 1
                    if self.stopping:
                        benchlib.sh(["drums-sweep"], stdin=rec, check=False, env=self.env)
                    else:
                        self.parked[env].append(rec)
            except Exception:
                with self.lock:
                    self.inflight -= 1
                    self.counts["fill_failed"] += 1
                fails += 1
                if fails >= 3:  # as drums-pool fill: three failures in a row stop the filler
                    return
                time.sleep(0.5)

    def wait_filled(self, env, timeout=120.0, net=None):
        env = pool_key(env, net)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            with self.lock:
                if len(self.parked.get(env, [])) >= self.depth.get(env, 0):
                    return len(self.parked[env])
                t = self.fillers.get(env)
                if not (t and t.is_alive()):
                    break
            time.sleep(0.05)
        with self.lock:
            return len(self.parked.get(env, []))

    # ---- take, release, snapshot

    def take(self, env, net=None, host_ids=False):
        """A ready session of ENV under network policy NET (None: the node's own; _net_env): a parked
        sibling of that policy's pool thawed and checked again (as drums-pool take does), or, when none is
        parked and the ceilings allow, one restored now. Each runs in a user namespace of its own; with
        `host_ids`, one is restored now with host ids (parked siblings have user namespaces), a session
        snapshot can checkpoint. Raises Full, NoEnvironment."""
        t0 = time.monotonic()
        rec, kind = None, None
        key = pool_key(env, net)
        self._net_env(net)
        with self.lock:
            if self.parked.get(key) and not host_ids:
                rec, kind = self.parked[key].pop(0), "pool"
            else:
                why = self._ceiling()
                if why:
                    self.counts["refused_full"] += 1
                    raise Full(f"node {self.cfg['node']}: {why}, and no parked session of {env}")
                self.inflight += 1
                kind = "restore"
        if kind == "restore":
            try:
                rec = self._restore(json.dumps(self.checkpoint(env)), freeze=False, net=net, host_ids=host_ids)
            finally:
                with self.lock:
                    self.inflight -= 1
            ready = rec
        else:
            try:
                benchlib.sh(["drums-cgroup", "thaw"], stdin=rec, env=self.env)
                ready = benchlib.sh(["drums-ready", "--timeout", "5"], stdin=rec, env=self.env)
            except Exception:
                benchlib.sh(["drums-sweep"], stdin=rec, check=False, env=self.env)
                raise
        r = json.loads(ready)
        with self.lock:
            self.taken[r["id"]] = ready
            self.counts["taken"] += 1
            self.counts["from_pool" if kind == "pool" else "restored_at_take"] += 1
        d = r.get("desktop") or {}
        return {"node": self.cfg["node"], "node_id": self._node_id(), "actor_pid": os.getpid(), "env": env,
                "session": r["id"], "guest_url": d.get("guest_url"), "devtools_port": d.get("devtools_port"),
                "session_addr": (r.get("net") or {}).get("session_addr"), "kind": kind, "net": policy_of(r),
                "actor_take_s": round(time.monotonic() - t0, 4), "record": r}

    def _node_id(self):
        import ray
        return ray.get_runtime_context().get_node_id()

    def release(self, session):
        """Destroy a taken session (drums-sweep)."""
        with self.lock:
            rec = self.taken.pop(session, None)
        if rec is None:
            return {"session": session, "released": False, "why": "not a session this node's actor handed out"}
        t0 = time.monotonic()
        p = benchlib.sh(["drums-sweep"], stdin=rec, check=False, env=self.env)
        return {"session": session, "released": True, "sweep_s": round(time.monotonic() - t0, 4), "sweep": p[-400:]}

    def snapshot(self, session, leave_running=True):
        """Checkpoint a taken session on this node (drums-ckpt): a new environment here. The session must
        have been taken with host_ids=True: drums-ckpt refuses one in its own user namespace (exit 7)."""
        with self.lock:
            rec = self.taken.get(session)
        if rec is None:
            raise NoEnvironment(f"session {session} is not one this node's actor handed out")
        args = ["drums-ckpt"] + (["--leave-running"] if leave_running else [])
        t0 = time.monotonic()
        c = json.loads(benchlib.sh(args, stdin=rec, env=self.env))
        if not leave_running:
            with self.lock:
                self.taken.pop(session, None)
        return {"env": c["id"], "node": self.cfg["node"], "checkpoint_s": round(time.monotonic() - t0, 3), "record": c}

    # ---- checkpoints across nodes

    def export_checkpoint(self, env):
        """The checkpoint as one bundle for Ray's object store (drums-ckpt export --out -)."""
        return checkpoints.pack(self.checkpoint(env), self.env)

    def export_to_path(self, env, dest):
        """The checkpoint as a bundle file in DEST, a directory the other node sees."""
        return checkpoints.export_to_path(self.checkpoint(env), dest, self.env)

    def remove_export(self, path):
        """Remove a bundle export_to_path wrote (a file named by a checkpoint id)."""
        name = os.path.basename(path)
        if name.startswith("c-") and name.endswith(".bundle") and os.path.isfile(path):
            os.remove(path)
        return path

    def import_checkpoint(self, bundle):
        """Install a bundle (bytes) under this node's roots (drums-ckpt import)."""
        t0 = time.monotonic()
        rec = checkpoints.install(bundle, self.env)
        return {"env": rec["id"], "node": self.cfg["node"], "dir": rec["dir"], "import_s": round(time.monotonic() - t0, 3)}

    def import_from_path(self, path):
        t0 = time.monotonic()
        rec = checkpoints.install(path, self.env)
        return {"env": rec["id"], "node": self.cfg["node"], "dir": rec["dir"], "import_s": round(time.monotonic() - t0, 3)}

    def restorable(self, record):
        """Why this node could not restore a checkpoint record ([]: it could; drums-ckpt check)."""
        return checkpoints.why_not_restorable(record, self.env)

    def remove_checkpoint(self, env):
        benchlib.remove_checkpoint(self.checkpoint(env))
        return env

    # ---- the end

    def shutdown(self):
        """Stop the fillers, destroy every parked and taken session; what was destroyed."""
        self.stopping = True
        for t in list(self.fillers.values()):
            t.join(timeout=60)
        with self.lock:
            recs = [r for v in self.parked.values() for r in v] + list(self.taken.values())
            self.parked, self.taken = {}, {}
        for r in recs:
            benchlib.sh(["drums-sweep"], stdin=r, check=False, env=self.env)
        return {"node": self.cfg["node"], "destroyed": len(recs)}
