"""Drums sessions on a Ray cluster (docs/ray.md): one Drums actor per node (drums_ray.node.DrumsNode)
owning that node's checkpoints, warm pools and sessions; the driver's Cluster (take, release, snapshot,
copy_checkpoint, fill, status); rollouts as Ray tasks holding a drums_session slot (drums_ray.rollout);
a local two-node cluster for tests (drums_ray.local.LocalCluster)."""
import os, sys

# Ray as pipelines/setup.d/ray.sh installs it, when it is not importable otherwise. With pipelines/ on
# sys.path, this package's own directory pipelines/ray/ looks like a namespace package `ray`; the real
# one, a regular package, wins wherever it is on the path, so it only has to be there.
_RAY_DIR = os.environ.get("DRUMS_RAY_DIR", "/var/lib/drums/ray")
_m = sys.modules.get("ray")
if _m is not None and getattr(_m, "__file__", None) is None:
    del sys.modules["ray"]  # the namespace stand-in, imported before the real Ray was on the path
import importlib.util  # noqa: E402
_spec = importlib.util.find_spec("ray") if "ray" not in sys.modules else None
if "ray" not in sys.modules and (_spec is None or _spec.origin is None) and os.path.isdir(_RAY_DIR) and _RAY_DIR not in sys.path:
    sys.path.insert(0, _RAY_DIR)

from . import config  # noqa: E402,F401  (puts pipelines/ on sys.path for benchlib, osworld_task)
