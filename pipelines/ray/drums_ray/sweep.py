"""Destroying the sessions of a Drums actor that died, on its node, at once.

`drums-sweep --orphans` (the node's cron sweep) destroys them too, but leaves alone any session whose
ledger was written in the last 60 s (its grace period, there for sessions being made), so a sibling
parked or taken a moment before its actor died waits for the next cron run. The driver that saw the
actor die knows its pid: the sessions whose ledger names that pid as owner, with a start time the pid no
longer has, belong to nobody, which is exactly the sweep's own orphan rule; they are destroyed with
`drums-sweep --session`.
"""
import json, os, subprocess

from . import config

import benchlib  # noqa: E402


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def sessions_of_dead_owner(pid, state_dir=None):
    root = os.path.join(state_dir or config.node_config()["state_dir"], "sessions")
    out = []
    for sid in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        try:
            with open(os.path.join(root, sid, "ledger.jsonl")) as f:
                first = json.loads(f.readline())
        except (OSError, ValueError):
            continue
        owner = first.get("owner") or {}
        if first.get("op") == "owner" and owner.get("pid") == pid and start_time(pid) != owner.get("start_time"):
            out.append(sid)
    return out


def destroy_sessions_of(pid):
    """On the dead actor's node: destroy the sessions it owned; what was destroyed and the sweep's exit."""
    ids = sessions_of_dead_owner(pid)
    if not ids:
        return {"owner": pid, "sessions": [], "exit": None}
    args = ["drums-sweep"] + [a for s in ids for a in ("--session", s)]
    p = subprocess.run(args, env=benchlib.ENV, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return {"owner": pid, "sessions": ids, "exit": p.returncode, "stderr": p.stderr[-400:]}
