"""Destroying the sessions of a Drums actor that died, on its node, at once.

`drums-sweep --orphans` (the node's cron sweep) destroys them too, but leaves alone any session whose
ledger was written in the last 60 s (its grace period, there for sessions being made), so a sibling
parked or taken a moment before its actor died waits for the next cron run. The driver that saw the
actor die knows its pid: the sessions whose ledger names that pid as owner, with a start time the pid no
longer has, belong to nobody, which is exactly the sweep's own orphan rule; the host inventory
(`drums-sweep --report`) names them, and they are destroyed with `drums-sweep --session`.
"""
import subprocess

from . import config  # noqa: F401  (puts pipelines/ on sys.path for benchlib)

import benchlib  # noqa: E402


def sessions_of_dead_owner(pid):
    """The sessions whose ledger names PID as owner with a start time that pid no longer has, as the
    host inventory (`drums-sweep --report`, docs/record.md) says."""
    inv = benchlib.host_inventory()
    return [s["id"] for s in inv["sessions"] if (s.get("owner") or {}).get("pid") == pid and s.get("owner_alive") is False]


def destroy_sessions_of(pid):
    """On the dead actor's node: destroy the sessions it owned; what was destroyed and the sweep's exit."""
    ids = sessions_of_dead_owner(pid)
    if not ids:
        return {"owner": pid, "sessions": [], "exit": None}
    args = ["drums-sweep"] + [a for s in ids for a in ("--session", s)]
    p = subprocess.run(args, env=benchlib.ENV, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return {"owner": pid, "sessions": ids, "exit": p.returncode, "stderr": p.stderr[-400:]}
