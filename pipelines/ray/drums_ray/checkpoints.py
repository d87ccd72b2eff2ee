"""Moving a checkpoint to another node, through the tool that owns it: `drums-ckpt check`, `export` and
`import` (drums-ckpt(1), "Moving a checkpoint"). Whether a node can restore a checkpoint (image and
runtime digests, CRIU, kernel, CPU), the bundle's format, the manifest check and the `.partial` install
are decided there, once; this module only runs the tool with the node's environment (its roots in
DRUMS_CHECKPOINT_DIR and DRUMS_MAPPED_DIR) and turns its refusals into `Refused`.
"""
import json, os, subprocess

RECORD_FILE = "checkpoint.json"
# drums-ckpt exit codes (drums(7)): the bundle is damaged or not a bundle; this node cannot restore it.
BAD_INPUT, ENVIRONMENT = 3, 4


class Refused(Exception):
    """This node cannot or will not restore the checkpoint; nothing was left under its roots."""


def load(root, env):
    with open(os.path.join(root, env, RECORD_FILE)) as f:
        return json.load(f)


def _run(args, env, stdin=None, stdout=subprocess.PIPE):
    p = subprocess.run(["drums-ckpt"] + args, input=stdin, stdout=stdout, stderr=subprocess.PIPE, env=env)
    if p.returncode in (BAD_INPUT, ENVIRONMENT):
        try:
            msg = json.loads(p.stderr.decode().strip().splitlines()[-1])["message"]
        except (ValueError, IndexError, KeyError):
            msg = p.stderr.decode(errors="replace")[-800:]
        raise Refused(msg)
    if p.returncode != 0:
        raise RuntimeError(f"drums-ckpt {' '.join(args)}: exit {p.returncode}: {p.stderr.decode(errors='replace')[-800:]}")
    return p.stdout


def pack(rec, env):
    """The checkpoint as one bundle (bytes) for Ray's object store: `drums-ckpt export --out -`."""
    return _run(["export", "--checkpoint", rec["id"], "--out", "-"], env)


def export_to_path(rec, dest, env):
    """The checkpoint as a bundle file DEST/<id>.bundle for another node to import from a path both see;
    returns the file."""
    os.makedirs(dest, exist_ok=True)
    out = os.path.join(dest, rec["id"] + ".bundle")
    if os.path.exists(out):
        os.remove(out)
    _run(["export", "--checkpoint", rec["id"], "--out", out], env)
    return out


def install(bundle, env):
    """Put a bundle's checkpoint under this node's roots (`drums-ckpt import`, from bytes or a file path);
    the record as it is here. Refused (nothing left) when this node cannot restore it or the bundle is
    damaged."""
    if isinstance(bundle, (bytes, bytearray)):
        out = _run(["import"], env, stdin=bytes(bundle))
    else:
        out = _run(["import", bundle], env)
    return json.loads(out)


def why_not_restorable(rec, env):
    """Why this node cannot restore REC (`drums-ckpt check`; empty: it can)."""
    p = subprocess.run(["drums-ckpt", "check"], input=json.dumps(rec).encode(), capture_output=True, env=env)
    if p.returncode not in (0, 1):
        raise RuntimeError(f"drums-ckpt check: exit {p.returncode}: {p.stderr.decode(errors='replace')[-800:]}")
    return json.loads(p.stdout)["why_not"]

