"""Moving a checkpoint to another node: pack it (its directory and its mapped-files directory, drums-ckpt(1)),
check on arrival that this node can restore it, unpack it under this node's roots, verify every file
against the sender's manifest, and only then rename it into place.

A checkpoint record names its directories by absolute path under the roots of the node that made it
($DRUMS_CHECKPOINT_DIR/<id>, $DRUMS_MAPPED_DIR/<id>); the tools refuse a record naming any other
directory, so the arriving record is rewritten to this node's roots. Everything else in it (the root
image and runtime layer it names by directory and digest, CRIU's version, the kernel) must hold here as
it is: those are refused, not rewritten.
"""
import hashlib, json, os, shutil, subprocess

RECORD_FILE = "checkpoint.json"
# The mapped-files directory names the checkpoint directory it belongs to (the sweep reads it).
MAPPED_OWNER_FILE = "checkpoint"
# Archives keep owners, modes, hard links, device nodes (overlayfs whiteouts) and every extended
# attribute (overlayfs' trusted.overlay.* marks): the layer is an overlay layer.
TAR = ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "--acls"]


class Refused(Exception):
    """This node cannot or will not restore the checkpoint; nothing was left under its roots."""


def load(root, env):
    with open(os.path.join(root, env, RECORD_FILE)) as f:
        return json.load(f)


def _files(top):
    for d, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            p = os.path.join(d, name)
            if os.path.isfile(p) and not os.path.islink(p):
                yield os.path.relpath(p, top), p


def _sha256(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def manifest(ckpt_dir, mapped_dir):
    """SHA-256 and size of every regular file of the checkpoint, but the two files a move rewrites."""
    out = {}
    for rel, p in _files(ckpt_dir):
        if rel != RECORD_FILE:
            out["checkpoint/" + rel] = [os.path.getsize(p), _sha256(p)]
    if mapped_dir:
        for rel, p in _files(mapped_dir):
            if rel != MAPPED_OWNER_FILE:
                out["mapped/" + rel] = [os.path.getsize(p), _sha256(p)]
    return out


def mapped_dir_of(rec):
    return (rec.get("mapped") or {}).get("dir")


def pack(rec):
    """The checkpoint as bytes for Ray's object store: the record, the manifest and two tar archives."""
    ckpt_dir, mdir = rec["dir"], mapped_dir_of(rec)
    def tar(d):
        p = subprocess.run(TAR + ["-cf", "-", "-C", os.path.dirname(d), os.path.basename(d)], capture_output=True)
        if p.returncode != 0:
            raise RuntimeError(f"tar {d}: {p.stderr.decode(errors='replace')[-400:]}")
        return p.stdout
    return {"record": rec, "manifest": manifest(ckpt_dir, mdir), "checkpoint_tar": tar(ckpt_dir),
            "mapped_tar": tar(mdir) if mdir else None}


def export_to_path(rec, dest):
    """The checkpoint copied into DEST/<id>/ (checkpoint/, mapped/, bundle.json) for another node to
    import from a path both see; returns that directory."""
    out = os.path.join(dest, rec["id"])
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    subprocess.run(["cp", "-a", "--preserve=all", rec["dir"], os.path.join(out, "checkpoint")], check=True)
    if mapped_dir_of(rec):
        subprocess.run(["cp", "-a", "--preserve=all", mapped_dir_of(rec), os.path.join(out, "mapped")], check=True)
    with open(os.path.join(out, "bundle.json"), "w") as f:
        json.dump({"record": rec, "manifest": manifest(os.path.join(out, "checkpoint"), mapped_dir_of(rec) and os.path.join(out, "mapped"))}, f)
    return out


def criu_version():
    criu = os.environ.get("DRUMS_CRIU") or ("/opt/drums/criu/bin/criu" if os.path.exists("/opt/drums/criu/bin/criu") else "criu")
    try:
        out = subprocess.run([criu, "--version"], capture_output=True, text=True, timeout=20).stdout
    except OSError:
        return None
    for line in out.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def _ver(s):
    return tuple(int(x) for x in s.split(".") if x.isdigit())


def _digest_of(dir_, name):
    try:
        with open(os.path.join(dir_, name)) as f:
            return json.load(f).get("digest")
    except (OSError, ValueError):
        return None


def why_not_restorable(rec):
    """Why this node cannot restore REC (a list of reasons; empty: it can), before anything is copied."""
    why = []
    img = rec.get("image") or {}
    if not img:
        why.append("the checkpoint names no root image (made on the host's / by older tools)")
    elif not os.path.isdir(img.get("root", "")):
        why.append(f"root image {img.get('name')} ({img.get('digest')}) is not on this node: no {img.get('dir')} (build it with pipelines/image.sh from the same inputs)")
    elif _digest_of(img["dir"], "image.json") != img.get("digest"):
        why.append(f"root image {img.get('dir')} on this node has digest {_digest_of(img['dir'], 'image.json')}, the checkpoint's is {img.get('digest')}")
    rt = rec.get("runtime") or {}
    if not rt or not os.path.isdir(rt.get("layer", "")):
        why.append(f"runtime layer {rt.get('dir')} is not on this node (the same Drums build makes it: run pipelines/setup.sh)")
    elif _digest_of(rt["dir"], "runtime.json") != rt.get("digest"):
        why.append(f"runtime layer {rt.get('dir')} has another digest here than the checkpoint's {rt.get('digest')}")
    here_criu, made_criu = criu_version(), rec.get("criu_version")
    if here_criu is None:
        why.append("no CRIU on this node (pipelines/install-criu.sh)")
    elif made_criu and _ver(here_criu)[:2] < _ver(made_criu)[:2]:
        why.append(f"CRIU here is {here_criu}, older than the {made_criu} that made the images")
    # CRIU restores only onto a kernel that offers what the dump used; Drums has tested restores on the
    # kernel that made them only, so another kernel release is refused rather than tried.
    if rec.get("kernel") and rec["kernel"] != os.uname().release:
        why.append(f"kernel here is {os.uname().release}, the images were made on {rec['kernel']} (restores across kernels are not tested: refused)")
    return why


def rewrite(obj, old, new):
    """Every string in OBJ starting with one of the OLD prefixes, re-rooted at the matching NEW one."""
    if isinstance(obj, dict):
        return {k: rewrite(v, old, new) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rewrite(v, old, new) for v in obj]
    if isinstance(obj, str):
        for o, n in zip(old, new):
            if obj == o or obj.startswith(o + "/"):
                return n + obj[len(o):]
    return obj


def install(rec, man, fill, checkpoint_root, mapped_root):
    """Put a checkpoint arriving from another node under this node's roots. FILL(ckpt_partial,
    mapped_partial) writes its files there. Refused (nothing left) when this node cannot restore it or a
    file does not match the manifest. Returns the record as it is here."""
    cid = rec["id"]
    why = why_not_restorable(rec)
    if why:
        raise Refused(f"checkpoint {cid} cannot be restored on this node: " + "; ".join(why))
    dst, mdst = os.path.join(checkpoint_root, cid), os.path.join(mapped_root, cid)
    if os.path.exists(os.path.join(dst, RECORD_FILE)):
        here = load(checkpoint_root, cid)
        if manifest(dst, mapped_dir_of(here)) == man:
            return here  # already here, the same files
        raise Refused(f"checkpoint {cid} is already on this node with other files")
    for root in (checkpoint_root, mapped_root):
        os.makedirs(root, mode=0o700, exist_ok=True)
        os.chmod(root, 0o700)  # closed to other host users, as the tools keep their roots
    # `.partial` while it arrives, as drums-ckpt names a checkpoint being made: a killed import leaves
    # a directory the sweep recognises as unfinished.
    part, mpart = dst + ".partial", mdst + ".partial"
    for p in (part, mpart):
        shutil.rmtree(p, ignore_errors=True)
    try:
        fill(part, mpart if mapped_dir_of(rec) else None)
        got = manifest(part, mpart if mapped_dir_of(rec) else None)
        if got != man:
            bad = sorted(k for k in set(got) | set(man) if got.get(k) != man.get(k))
            raise Refused(f"checkpoint {cid}: {len(bad)} files differ from the sender's manifest after the copy: {bad[:5]}")
        old = [rec["dir"]] + ([mapped_dir_of(rec)] if mapped_dir_of(rec) else [])
        new = [dst] + ([mdst] if mapped_dir_of(rec) else [])
        here = rewrite(rec, old, new)
        for f in (here.get("mapped") or {}).get("files", []):
            p = mpart + f["path"][len(mdst):]
            if not os.path.isfile(p) or os.path.getsize(p) != f["bytes"]:
                raise Refused(f"checkpoint {cid}: mapped file {f['path']} is missing or not {f['bytes']} bytes")
        with open(os.path.join(part, RECORD_FILE), "w") as fh:
            fh.write(json.dumps(here, separators=(",", ":")) + "\n")
        if mapped_dir_of(rec):
            with open(os.path.join(mpart, MAPPED_OWNER_FILE), "w") as fh:
                fh.write(dst)
            os.rename(mpart, mdst)
        os.rename(part, dst)
    except BaseException:
        for p in (part, mpart):
            shutil.rmtree(p, ignore_errors=True)
        if not os.path.exists(os.path.join(dst, RECORD_FILE)):
            shutil.rmtree(mdst, ignore_errors=True)
        raise
    # The image and runtime layer keep a note of the checkpoints that use them, so that
    # drums-sweep --prune-root-images keeps them (drums-ckpt(1)). One note per id: a note already naming
    # a live copy of this checkpoint elsewhere is left (that copy keeps the image too).
    for d in (here["image"]["dir"], here["runtime"]["dir"]):
        ref = os.path.join(d, "refs", cid)
        try:
            at = open(ref).read()
        except OSError:
            at = ""
        if not at or not os.path.exists(os.path.join(at, RECORD_FILE)):
            os.makedirs(os.path.dirname(ref), exist_ok=True)
            with open(ref, "w") as fh:
                fh.write(dst)
    return here


def unpack_into(bundle):
    """FILL for install(): the tar archives of pack()."""
    def fill(part, mpart):
        for data, target in ((bundle["checkpoint_tar"], part), (bundle.get("mapped_tar"), mpart)):
            if data is None or target is None:
                continue
            tmp = target + ".x"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            p = subprocess.run(TAR + ["-xpf", "-", "-C", tmp], input=data, capture_output=True)
            if p.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise RuntimeError(f"tar -x: {p.stderr.decode(errors='replace')[-400:]}")
            (only,) = os.listdir(tmp)
            os.rename(os.path.join(tmp, only), target)
            os.rmdir(tmp)
    return fill


def copy_from(path):
    """FILL for install(): a directory written by export_to_path()."""
    def fill(part, mpart):
        subprocess.run(["cp", "-a", "--preserve=all", os.path.join(path, "checkpoint"), part], check=True)
        if mpart:
            subprocess.run(["cp", "-a", "--preserve=all", os.path.join(path, "mapped"), mpart], check=True)
    return fill
