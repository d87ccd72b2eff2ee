"""Drums sessions on a Ray cluster (docs/ray.md): one Drums actor per node (drums_ray.node.DrumsNode)
owning that node's checkpoints, warm pools and sessions; the driver's Cluster (take, release, snapshot,
copy_checkpoint, fill, status); rollouts as Ray tasks holding a drums_session slot (drums_ray.rollout);
a local two-node cluster for tests (drums_ray.local.LocalCluster)."""
import os, sys

# Ray as pipelines/setup.d/ray.sh installs it, when it is not importable otherwise.
_RAY_DIR = os.environ.get("DRUMS_RAY_DIR", "/var/lib/drums/ray")
try:
    import ray  # noqa: F401
except ImportError:
    if os.path.isdir(_RAY_DIR) and _RAY_DIR not in sys.path:
        sys.path.insert(0, _RAY_DIR)

from . import config  # noqa: E402,F401  (puts pipelines/ on sys.path for benchlib, osworld_task)
