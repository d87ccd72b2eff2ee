"""Where Drums is on this host and what the node's ceilings are, read from the environment the node's
`ray start` ran in (its raylet passes it on to every worker, so the node's actor sees the same).

  DRUMS_CHECKPOINT_DIR    the node's checkpoint root (drums(7)); DRUMS_MAPPED_DIR its mapped-files root
  DRUMS_STATE_DIR         the state root (default /run/drums)
  DRUMS_RAY_NODE          a name for the node in records (default: the host name)
  DRUMS_RAY_MAX_SESSIONS  count ceiling: sessions this node's actor holds at once, parked and taken
                          (default 32, drums-pool fill's --max-sessions)
  DRUMS_RAY_MIN_AVAILABLE memory ceiling: restore nothing while MemAvailable is below it (default 2G,
                          drums-pool fill's --min-available)
  DRUMS_RAY_SESSION_MIB   memory one session at work is planned with when the drums_session resource is
                          sized (default 320: the heaviest session measured in drums(7), "Default limits")
"""
import os, socket, sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PIPELINES = os.path.join(REPO, "pipelines")
# benchlib and osworld_task are imported, not copied (they are the pipelines' shared logic).
if PIPELINES not in sys.path:
    sys.path.insert(0, PIPELINES)

NAMESPACE = "drums"
RESOURCE = "drums_session"


def size_bytes(s):
    """'2G', '512M', '1024K' or bytes."""
    s = str(s).strip()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(s[-1:].upper())
    return int(float(s[:-1]) * mult) if mult else int(s)


def node_config(environ=None):
    e = os.environ if environ is None else environ
    return {
        "node": e.get("DRUMS_RAY_NODE") or socket.gethostname(),
        "checkpoint_dir": e.get("DRUMS_CHECKPOINT_DIR", "/var/lib/drums/checkpoints"),
        "mapped_dir": e.get("DRUMS_MAPPED_DIR", "/var/lib/drums-mapped"),
        "state_dir": e.get("DRUMS_STATE_DIR", "/run/drums"),
        "max_sessions": int(e.get("DRUMS_RAY_MAX_SESSIONS", "32")),
        "min_available_bytes": size_bytes(e.get("DRUMS_RAY_MIN_AVAILABLE", "2G")),
        "session_mib": int(e.get("DRUMS_RAY_SESSION_MIB", "320")),
    }


def mem_available_bytes():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def session_slots(cfg=None):
    """The node's drums_session resource: its count ceiling, or fewer when its memory above the memory
    ceiling does not hold that many sessions of DRUMS_RAY_SESSION_MIB each. (slots, why)."""
    cfg = cfg or node_config()
    by_memory = max(0, (mem_available_bytes() - cfg["min_available_bytes"]) // (cfg["session_mib"] << 20))
    slots = min(cfg["max_sessions"], by_memory)
    why = "count ceiling DRUMS_RAY_MAX_SESSIONS" if slots == cfg["max_sessions"] else \
        f"memory: (MemAvailable - DRUMS_RAY_MIN_AVAILABLE) / {cfg['session_mib']} MiB"
    return int(slots), why
