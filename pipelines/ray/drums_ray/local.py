"""A local Ray cluster of two nodes on this one machine, for the tests and the demo: a head and a second
node, each started with `ray start --block` (so that stopping its process stops its node), each with its
own Ray temp directory, ports, resources, checkpoint root and mapped-files root.

What the two nodes share: Drums' kernel objects are named machine-wide (links drums<slot>, cgroups
drums/<id>, one address pool, one nftables table, one sweep state root /run/drums), so two state roots on
one machine would take each other's objects for leftovers. Both nodes therefore use the machine's state
root and address pool; each has its own checkpoint root and its own session owner (its actor). On real
hosts each node has its own everything (docs/ray.md).
"""
import ctypes, json, os, shutil, signal, socket, subprocess, sys, time

from . import config
from .proc import start_time

RAY_DIR = os.environ.get("DRUMS_RAY_DIR", "/var/lib/drums/ray")
LOCAL_ROOT = os.environ.get("DRUMS_RAY_LOCAL_ROOT", "/var/lib/drums/ray-local")
MARKER = "DRUMS_RAY_CLUSTER"
# The driver that started a local cluster, in its root: a cluster whose driver is gone is an orphan.
OWNER_FILE = "owner.json"
PR_SET_PDEATHSIG = 1


def tmp_dir(tag):
    return f"/tmp/drums-ray-{tag}"


def marker_pids(tag):
    """Every process that carries the marker of cluster `tag` (drums_ray.local.LocalCluster.our_pids)."""
    key = f"{MARKER}={tag}".encode()
    pids = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if key in open(f"/proc/{d}/environ", "rb").read().split(b"\0"):
                    pids.add(int(d))
            except OSError:
                pass
    pids.discard(os.getpid())
    return pids


def orphaned_tags(grace_s=60):
    """The local clusters under LOCAL_ROOT whose driver (its owner file) is gone, or that have had no
    owner file for `grace_s` (a driver killed before it wrote one; a younger root may be a cluster being
    started right now)."""
    tags = []
    for tag in sorted(os.listdir(LOCAL_ROOT)) if os.path.isdir(LOCAL_ROOT) else []:
        root = os.path.join(LOCAL_ROOT, tag)
        try:
            owner = json.load(open(os.path.join(root, OWNER_FILE)))
            alive = start_time(owner["pid"]) == owner["start_time"]
        except (OSError, ValueError, KeyError, TypeError):
            try:
                alive = time.time() - os.stat(root).st_mtime < grace_s
            except OSError:
                continue
        if not alive:
            tags.append(tag)
    return tags


def reap_orphans():
    """End what local clusters of dead drivers left: their processes (SIGKILL: no driver is left to stop
    them in order), their Ray temp directories and their roots. One record per cluster reaped. A killed
    driver's nodes mostly stop by themselves (each node's `ray start` gets SIGTERM when the driver dies);
    this is for what outlives them (agents, workers) and for the directories."""
    reaped = []
    for tag in orphaned_tags():
        killed = set()
        for _ in range(3):
            pids = marker_pids(tag)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except OSError:
                    pass
            time.sleep(0.5)
        left = sorted(marker_pids(tag))
        shutil.rmtree(tmp_dir(tag), ignore_errors=True)
        if not left:
            shutil.rmtree(os.path.join(LOCAL_ROOT, tag), ignore_errors=True)
        reaped.append({"type": "ray_local_reaped", "tag": tag, "killed": sorted(killed), "left_pids": left})
    return reaped


def _die_with_driver():
    """In each node's `ray start`, before exec: SIGTERM when the driver dies, which `ray start --block`
    answers by stopping its node's processes (what stop() relies on too)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pythonpath():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return ":".join([RAY_DIR, here, config.PIPELINES] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))


def require_ray():
    if not os.path.exists(os.path.join(RAY_DIR, "ray", "__init__.py")):
        raise SystemExit(f"drums_ray: Ray is not installed in {RAY_DIR} (run pipelines/setup.d/ray.sh)")


class LocalCluster:
    """start() the two nodes, stop() them and everything they ran; a context manager."""

    def __init__(self, tag=None, slots=4, object_store_bytes=1 << 30):
        self.tag = tag or f"{os.getpid()}"
        self.base = os.path.join(LOCAL_ROOT, self.tag)
        self.tmp = tmp_dir(self.tag)
        self.slots = slots
        self.store = object_store_bytes
        self.procs = {}
        # The address Ray itself would choose for this host (its GCS advertises it; a loopback address
        # given to --node-ip-address left the driver unable to reach the GCS here).
        from ray._private.services import get_node_ip_address
        self.ip = get_node_ip_address()
        self.address = None
        self.nodes = {}

    def node_env(self, name):
        e = dict(os.environ)
        d = os.path.join(self.base, name)
        e.update({"DRUMS_RAY_NODE": name, "DRUMS_CHECKPOINT_DIR": os.path.join(d, "checkpoints"),
                  "DRUMS_MAPPED_DIR": os.path.join(d, "mapped"), "PYTHONPATH": pythonpath(),
                  "RAY_USAGE_STATS_ENABLED": "0", "DRUMS_RAY_MAX_SESSIONS": str(self.slots), MARKER: self.tag})
        return e

    def _start(self, name, head):
        env = self.node_env(name)
        for k in ("DRUMS_CHECKPOINT_DIR", "DRUMS_MAPPED_DIR"):
            os.makedirs(env[k], mode=0o700, exist_ok=True)
        slots, _why = config.session_slots(config.node_config(env))
        temp = os.path.join(self.tmp, name)
        os.makedirs(temp, exist_ok=True)
        res = {config.RESOURCE: slots, f"drums_node_{name}": 1}
        args = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", "--temp-dir", temp, "--num-cpus", "2",
                "--resources", json.dumps(res), "--object-store-memory", str(self.store), "--disable-usage-stats",
                "--node-ip-address", self.ip,
                "--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
                "--metrics-export-port", str(free_port()), "--dashboard-agent-listen-port", str(free_port()),
                "--dashboard-agent-grpc-port", str(free_port()), "--runtime-env-agent-port", str(free_port())]
        if head:
            port = free_port()
            args += ["--head", "--port", str(port), "--include-dashboard=false"]
            self.address = f"{self.ip}:{port}"
        else:
            args += ["--address", self.address]
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        # A process group of its own: stop() ends the node's processes, and only those.
        self.procs[name] = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_driver)
        self.nodes[name] = {"slots": slots, "checkpoint_dir": env["DRUMS_CHECKPOINT_DIR"], "mapped_dir": env["DRUMS_MAPPED_DIR"], "temp_dir": temp}

    def start(self, timeout=120):
        """Start the head, connect this process to it (ray.init), start the second node; returns once
        both offer drums_session."""
        require_ray()
        self.reaped = reap_orphans()
        os.makedirs(self.tmp, exist_ok=True)
        os.makedirs(self.base, mode=0o700, exist_ok=True)
        with open(os.path.join(self.base, OWNER_FILE), "w") as f:
            json.dump({"pid": os.getpid(), "start_time": start_time(os.getpid())}, f)
        import ray
        self._start("head", True)
        t0 = time.monotonic()
        while True:
            self._check_procs()
            # ray.init waits a long time on a GCS that is not up: connect only once its port answers.
            try:
                socket.create_connection((self.ip, int(self.address.rsplit(":", 1)[1])), timeout=1).close()
            except OSError:
                if time.monotonic() - t0 > timeout:
                    raise RuntimeError(f"the head's GCS did not answer at {self.address} in {timeout} s")
                time.sleep(0.3)
                continue
            try:
                ray.init(address=self.address, namespace=config.NAMESPACE, logging_level="ERROR", log_to_driver=False)
                break
            except Exception:  # noqa: BLE001 - the GCS is not up yet
                if time.monotonic() - t0 > timeout:
                    raise
                time.sleep(0.5)
        self._wait(ray, 1, timeout)
        self._start("n2", False)
        self._wait(ray, 2, timeout)
        return self

    def _check_procs(self):
        for name, p in self.procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"ray start of node {name} exited {p.returncode}: {open(os.path.join(self.tmp, name + '.log')).read()[-1500:]}")

    def _wait(self, ray, n, timeout):
        """Until the cluster has N live nodes offering drums_session (a node's process that exits fails)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            self._check_procs()
            if sum(1 for x in ray.nodes() if x["Alive"] and x["Resources"].get(config.RESOURCE)) >= n:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the local cluster did not reach {n} nodes in {timeout} s")

    def our_pids(self):
        """The processes of this cluster and only its: every process Ray started for it inherits the
        marker DRUMS_RAY_CLUSTER=<tag> from its node's ray start (workers rename themselves ray::IDLE,
        agents outlive their raylet for a while, so neither command lines nor the process tree find them
        all). The Drums actor does not pass the marker to the tools, so no session process carries it."""
        return set(p.pid for p in self.procs.values() if p.poll() is None) | marker_pids(self.tag)

    def stop(self, timeout=30):
        """SIGTERM to each node's ray start (it stops its node's processes), then SIGKILL to whatever of
        this cluster is left; the temp directory and checkpoint roots are removed."""
        for name in ("n2", "head"):
            p = self.procs.get(name)
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    pass
        left = set()
        for _ in range(2):
            for pid in self.our_pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.5)
            left = self.our_pids()
            if not left:
                break
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
        return {"left_pids": sorted(left)}

    def remove_roots(self):
        shutil.rmtree(self.base, ignore_errors=True)
        try:
            os.rmdir(LOCAL_ROOT)
        except OSError:
            pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
