"""The Drums actor of one node: it owns that node's checkpoints, its warm pools and every session it hands
out, and does the work with the Drums tools, as the pipelines compose them.

Ownership follows the actor. Every tool runs with DRUMS_OWNER set to the actor's own process, so each
session it restores (parked or taken) belongs to it: when the actor dies (SIGKILL, its node's raylet, the
driver that owned it), `drums-sweep --orphans` on the node destroys all of them. The warm pool is
drums-pool's, bound to the actor (`drums-pool fill --bound --loop`, its spool in a directory of the
actor's own through DRUMS_POOL_DIR): its siblings are the actor's, and once the actor is gone the filler
drains the pool. A take is `drums-pool take`; when the pool has nothing parked, the session is restored
on demand with `drums-restore --ready`.

Network policy: a rollout asks for one (net=) or gets the node's own (its DRUMS_NET, else none); each
policy has a pool of its own (a spool directory of its own: siblings under different policies never stand
in for each other). The uplink, resolver, exceptions and cap stay the node's.

Identity (drums(7), "Its own user namespace"): the cold session make_environment checkpoints has host ids
(drums-ckpt checkpoints no session in a user namespace of its own); every sibling the actor restores,
parked or taken, runs in a user namespace of its own, except one taken with take(env, host_ids=True),
restored on the spot with host ids so that snapshot can checkpoint it.
"""
import hashlib, json, os, shutil, subprocess, tempfile, threading, time

from . import checkpoints, config
from .proc import start_time

import benchlib  # noqa: E402  (config put pipelines/ on sys.path)


POOL_BASES = os.path.join(tempfile.gettempdir(), "drums-ray-pools")


def reap_dead_pool_bases():
    """Remove the pool directories of actors that are gone (named PID-STARTTIME, drums_ray.proc.start_time):
    what an actor killed before its stop() left. The names that are removed."""
    gone = []
    for name in sorted(os.listdir(POOL_BASES)) if os.path.isdir(POOL_BASES) else []:
        pid, _, start = name.partition("-")
        if pid.isdigit() and start.isdigit() and start_time(int(pid)) != int(start):
            shutil.rmtree(os.path.join(POOL_BASES, name), ignore_errors=True)
            gone.append(name)
    return gone


class Full(Exception):
    """The node is at a ceiling (sessions or memory) and has no parked session of the environment."""


class NoEnvironment(Exception):
    """The node has no checkpoint of that name."""


def pool_key(env, net):
    """The pool a sibling of ENV under the network policy NET is parked in: ENV itself under the node's
    own policy (net None), else `ENV net=POLICY`."""
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
        # The actor's pools: spools of its own (one directory per network policy, _pool_env), beside any
        # pool of the same checkpoint on the machine, in a directory named by this process's pid and start
        # time, so that the next actor on the node removes what a killed one left (its sessions are the
        # sweep's: drums-sweep finds them from their ledgers, not their spools).
        reap_dead_pool_bases()
        self.pool_base = os.path.join(POOL_BASES, f"{os.getpid()}-{start_time(os.getpid())}")
        os.makedirs(self.pool_base, mode=0o700, exist_ok=True)
        self.lock = threading.Lock()
        self.taken = {}       # session id -> (record text, the environment its tools ran in)
        self.inflight = 0     # sessions being restored at take
        self.depth = {}       # pool_key(env, net) -> wanted pool depth
        self.pools = {}       # pool_key(env, net) -> (env, net)
        self.fillers = {}     # pool_key(env, net) -> `drums-pool fill --bound --loop` process
        self.stopping = False
        self.default_depth = pool_depth
        self.counts = {"taken": 0, "from_pool": 0, "restored_at_take": 0, "refused_full": 0}

    # ---- what the node is and holds

    def info(self):
        import ray
        parked = {k: self._parked(k) for k in list(self.depth)}
        with self.lock:
            held = self.inflight + len(self.taken) + sum(parked.values())
            return {
                "node": self.cfg["node"], "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "checkpoint_dir": self.cfg["checkpoint_dir"], "mapped_dir": self.cfg["mapped_dir"],
                "ceilings": {"max_sessions": self.cfg["max_sessions"], "min_available_bytes": self.cfg["min_available_bytes"]},
                "mem_available_bytes": config.mem_available_bytes(),
                "sessions": {"held": held, "taken": len(self.taken), "parked": parked, "inflight": self.inflight},
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

    def _pool_env(self, env, net):
        """The tools' environment for the pool of ENV under NET: _net_env and a spool directory of that
        policy's own (DRUMS_POOL_DIR)."""
        tag = "node" if net is None else hashlib.sha256(net.encode()).hexdigest()[:16]
        d = os.path.join(self.pool_base, tag)
        os.makedirs(d, exist_ok=True)
        return dict(self._net_env(net), DRUMS_POOL_DIR=d)

    def _pool(self, key, args, check=True):
        """`drums-pool ARGS` on the actor's own spools of pool KEY (pool_key)."""
        env, net = self.pools[key]
        return benchlib.sh(["drums-pool"] + args, check=check, env=self._pool_env(env, net))

    def _parked(self, key):
        """How many siblings the actor's pool KEY holds parked (drums-pool status)."""
        try:
            return len(json.loads(self._pool(key, ["status", "--checkpoint", self.pools[key][0]]))["parked"])
        except Exception:
            return 0

    def _ceiling(self, parked=0):
        """Why no session may be made now (None: one may). Called with the lock held."""
        if self.inflight + len(self.taken) + parked >= self.cfg["max_sessions"]:
            return f"count ceiling ({self.cfg['max_sessions']} sessions held)"
        if config.mem_available_bytes() < self.cfg["min_available_bytes"]:
            return "memory ceiling (MemAvailable below DRUMS_RAY_MIN_AVAILABLE)"
        return None

    def _restore(self, ckpt_text, net=None, host_ids=False):
        """A usable sibling from `drums-restore --ready` (benchlib.restore_ready: restore, reseed and ready
        check in the tool, as drums-pool's filler makes its siblings) under network policy NET, in a user
        namespace of its own unless `host_ids`; the record text."""
        return benchlib.restore_ready(ckpt_text, env=self._net_env(net), host_ids=host_ids)

    def _stop_filler(self, key):
        p = self.fillers.pop(key, None)
        if p and p.poll() is None:
            p.terminate()  # SIGTERM: a sibling not yet parked is destroyed, the parked ones stay
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def fill(self, env, depth, net=None):
        """Keep DEPTH parked siblings of ENV under network policy NET (None: the node's own) on this node
        (0 stops the filler and drains the pool), within the ceilings: `drums-pool fill --bound --loop`,
        bound to the actor."""
        self.checkpoint(env)
        self._net_env(net)  # a malformed policy fails the call, not the filler
        depth = int(depth)
        key = pool_key(env, net)
        with self.lock:
            self.pools[key] = (env, net)
            if self.depth.get(key) != depth:
                self._stop_filler(key)
            self.depth[key] = depth
            p = self.fillers.get(key)
            if depth > 0 and not (p and p.poll() is None) and not self.stopping:
                args = ["drums-pool", "fill", "--bound", "--loop", "0.1", "--depth", str(depth), "--checkpoint", env,
                        "--max-sessions", str(self.cfg["max_sessions"]), "--min-available", str(self.cfg["min_available_bytes"])]
                self.fillers[key] = subprocess.Popen(args, env=self._pool_env(env, net), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if depth == 0:
            self._pool(key, ["drain", "--checkpoint", env], check=False)
        return {"node": self.cfg["node"], "env": env, "net": net, "depth": depth}

    def wait_filled(self, env, timeout=120.0, net=None):
        key = pool_key(env, net)
        if key not in self.pools:
            return 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            n = self._parked(key)
            if n >= self.depth.get(key, 0):
                return n
            p = self.fillers.get(key)
            if not (p and p.poll() is None):
                break
            time.sleep(0.05)
        return self._parked(key)

    # ---- take, release, snapshot

    def take(self, env, net=None, host_ids=False):
        """A ready session of ENV under network policy NET (None: the node's own; _net_env): a parked
        sibling of that policy's pool thawed and checked again (`drums-pool take`), or, when none is parked
        and the ceilings allow, one restored now. Each runs in a user namespace of its own; with
        `host_ids`, one is restored now with host ids (parked siblings have user namespaces), a session
        snapshot can checkpoint. Raises Full, NoEnvironment."""
        t0 = time.monotonic()
        ckpt = self.checkpoint(env)
        self._net_env(net)
        key = pool_key(env, net)
        if host_ids or key not in self.pools:
            p = subprocess.CompletedProcess([], 1, "", "")  # no pool to take from: restore on demand
        else:
            p = subprocess.run(["drums-pool", "take", "--checkpoint", env], capture_output=True, text=True, env=self._pool_env(env, net))
        if p.returncode == 0:
            ready, kind, tools_env = p.stdout, "pool", self._pool_env(env, net)
        elif p.returncode == 1:  # nothing parked (drums-pool(1), EXIT STATUS): restore on demand
            with self.lock:
                why = self._ceiling(sum(self._parked(k) for k in list(self.pools)))
                if why:
                    self.counts["refused_full"] += 1
                    raise Full(f"node {self.cfg['node']}: {why}, and no parked session of {env}")
                self.inflight += 1
            try:
                ready, kind, tools_env = self._restore(json.dumps(ckpt), net=net, host_ids=host_ids), "restore", self._net_env(net)
            finally:
                with self.lock:
                    self.inflight -= 1
        else:
            raise RuntimeError(f"drums-pool take: exit {p.returncode}: {p.stderr.strip()[-800:]}")
        r = json.loads(ready)
        with self.lock:
            # With the environment its tools ran in: drums-sweep checks a pool sibling's spool against
            # DRUMS_POOL_DIR.
            self.taken[r["id"]] = (ready, tools_env)
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
            held = self.taken.pop(session, None)
        if held is None:
            return {"session": session, "released": False, "why": "not a session this node's actor handed out"}
        rec, tools_env = held
        t0 = time.monotonic()
        p = benchlib.sh(["drums-sweep"], stdin=rec, check=False, env=tools_env)
        return {"session": session, "released": True, "sweep_s": round(time.monotonic() - t0, 4), "sweep": p[-400:]}

    def snapshot(self, session, leave_running=True):
        """Checkpoint a taken session on this node (drums-ckpt): a new environment here. The session must
        have been taken with host_ids=True: drums-ckpt refuses one in its own user namespace (exit 7)."""
        with self.lock:
            rec, _ = self.taken.get(session, (None, None))
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
        """Stop the fillers, drain the pools, destroy every taken session; what was destroyed."""
        self.stopping = True
        destroyed = 0
        with self.lock:
            keys = list(self.pools)
            for key in keys:
                self._stop_filler(key)
            recs = list(self.taken.values())
            self.taken = {}
        for key in keys:
            try:
                destroyed += json.loads(self._pool(key, ["drain", "--checkpoint", self.pools[key][0]], check=False) or "{}").get("destroyed", 0)
            except ValueError:
                pass
        for r, tools_env in recs:
            benchlib.sh(["drums-sweep"], stdin=r, check=False, env=tools_env)
        # The drains removed the spools; only the empty directories are left.
        shutil.rmtree(self.pool_base, ignore_errors=True)
        return {"node": self.cfg["node"], "destroyed": destroyed + len(recs)}
