"""OSWorld's provider interface (desktop_env.providers.base) over Drums sessions.

A "VM" here is a checkpoint: `path_to_vm` names a checkpoint record file (what `drums-ckpt` prints) or a
checkpoint id (`c-...`). The provider holds at most one session at a time, a sibling restored from that
checkpoint (taken from its warm pool when one is filled, drums-pool(7)), and owns it: every tool runs with
DRUMS_OWNER set to this process, so when the harness dies without stop_emulator, `drums-sweep --orphans`
destroys the session. Records and exit codes of the tools: drums(7), docs/record.md.

Identity (drums(7), "Its own user namespace"): the checkpoint get_vm_path makes is of a cold session with
host ids (drums-ckpt checkpoints no session in a user namespace of its own); the siblings the provider
restores run in user namespaces of their own, the default, unless DRUMS_OSWORLD_HOST_IDS=1 (then with host
ids, so that save_state can checkpoint them). A pool sibling is as its filler made it (drums-pool fill
--host-ids or not).
"""
import atexit
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from desktop_env.providers.base import Provider, VMManager

REPO = Path(__file__).resolve().parents[3]
PIPELINES = REPO / "pipelines"
# Where get_vm_path keeps the record of the checkpoint it makes when the harness names none.
DEFAULT_CHECKPOINT_RECORD = Path(os.environ.get("DRUMS_OSWORLD_DIR", "/var/lib/drums/osworld")) / "checkpoint.json"
# The ports DesktopEnv reads from get_ip_address. The guest's is the session's; Chromium's DevTools and
# VLC's HTTP interface are OSWorld's fixed ports: on 9222 the chrome tasks forward DevTools to the browser
# they start (Drums' own is on the loopback's 9229), and VLC's HTTP interface is not set up yet
# (docs/osworld.md, "What works"). VNC is drums-view's server on the session's address (drums-view(1)),
# started by get_ip_address when DRUMS_OSWORLD_VNC asks for it: `view` (view only) or `input`; unset or
# `off`, no server runs (a session nobody watches pays nothing) and the port answers nothing.
CHROMIUM_PORT, VNC_PORT, VLC_PORT = 9222, 5900, 8080
VNC_MODE = os.environ.get("DRUMS_OSWORLD_VNC", "off")
# The operator's upstream proxy for the tasks that set `"proxy": true` (docs/osworld.md, "Tasks that ask for
# a proxy"): http://IPV4:PORT, as drums-net set --proxy takes it; unset, such a task fails before it starts.
PROXY_ENV = "DRUMS_OSWORLD_PROXY"
TAKE_TIMEOUT = 300
# DRUMS_OSWORLD_HOST_IDS=1: the siblings this provider restores run with host ids (drums-restore
# --host-ids), which save_state needs; unset or 0, each gets a user namespace of its own.
HOST_IDS_ENV = "DRUMS_OSWORLD_HOST_IDS"


def _identity_args():
    """drums-restore's identity arguments for the siblings the provider restores."""
    v = os.environ.get(HOST_IDS_ENV, "0")
    if v not in ("0", "1", ""):
        raise DrumsError(f"{HOST_IDS_ENV}={v!r}: expected 1 (host ids) or 0 (a user namespace of its own, the default)")
    return ["--host-ids"] if v == "1" else []
# How long closing the readiness page may take: Chromium is asked to quit (SIGTERM), killed after
# CLOSE_KILL_AFTER seconds, and the close fails when its window is still on the screen after CLOSE_TIMEOUT.
CLOSE_KILL_AFTER, CLOSE_TIMEOUT = 5, 10
# Run by the session's guest, as the desktop user (who owns the desktop's Chromium): $1 Chromium's PID in
# the session, $2 the readiness page's window title, $3 and $4 the two limits above in tenths of a second.
CLOSE_PAGE = r"""
pid=$1 title=$2 kill_after=$3 give_up=$4 i=0
kill -TERM "$pid" 2>/dev/null
while :; do
  # A window that goes away while xwininfo walks the tree fails the walk (BadWindow): read it again.
  if tree=$(xwininfo -root -tree 2>/dev/null); then
    case $tree in *"\"$title\":"*) ;; *) exit 0 ;; esac
  fi
  i=$((i + 1))
  [ "$i" -eq "$kill_after" ] && kill -KILL "$pid" 2>/dev/null
  [ "$i" -ge "$give_up" ] && { echo "a window titled $title is still on the screen (or the screen's windows could not be read)" >&2; exit 1; }
  sleep 0.1
done
"""


class DrumsError(RuntimeError):
    """A Drums tool failed; the message holds its error object (drums(7))."""


def _env():
    env = dict(os.environ)
    built = REPO / "target" / "release"
    if (built / "drums-restore").exists():
        env["PATH"] = f"{built}:{env.get('PATH', '/usr/bin:/bin')}"
    # The harness owns its sessions: the sweep destroys them once this process is gone.
    env["DRUMS_OWNER"] = str(os.getpid())
    return env


def _run(argv, stdin="", timeout=TAKE_TIMEOUT):
    """Run a Drums tool or pipeline; its standard output. DrumsError when it fails."""
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=_env(), timeout=timeout)
    if p.returncode != 0:
        raise DrumsError(f"{' '.join(map(str, argv))} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p.stdout


def _one_record(out, kind):
    lines = [line for line in out.splitlines() if line.strip()]
    if len(lines) != 1:
        raise DrumsError(f"expected one {kind} record, got {len(lines)} lines")
    rec = json.loads(lines[0])
    if rec.get("type") != kind:
        raise DrumsError(f"expected a {kind} record, got type {rec.get('type')!r}")
    return lines[0], rec


class Checkpoint:
    """A checkpoint the provider restores from: its id, and its record when known. `page_closed`: a
    checkpoint of a session whose readiness page the provider had closed (save_state's), whose siblings
    have no browser to reseed or to check readiness with."""

    def __init__(self, ident, record=None, page_closed=False):
        self.id, self.record, self.page_closed = ident, record, page_closed

    @classmethod
    def named(cls, path_to_vm):
        s = str(path_to_vm)
        if s.startswith("c-") and "/" not in s:
            return cls(s)
        text = Path(s).read_text()
        line, rec = _one_record(text, "checkpoint")
        return cls(rec["id"], line)

    def pool_has_siblings(self):
        """Whether the checkpoint's warm pool holds a parked sibling now, as drums-pool status says."""
        out = _run(["drums-pool", "status", "--checkpoint", self.id], timeout=30)
        _, rec = _one_record(out, "pool_status")
        return bool(rec["parked"])


class DrumsProvider(Provider):
    def __init__(self, region=None):
        super().__init__(region)
        self.session = None  # the session record (one JSON line) of the sibling held now
        self.snapshots = {}  # save_state's name -> Checkpoint
        # One entry per session taken: {"session", "checkpoint", "source": "pool"|"restore", "seconds"}.
        self.takes = []
        # Whether the current task asked for a proxy (its "proxy"; drums_osworld.register's reset hook sets it).
        self.proxy_wanted = False
        # Siblings taken from a warm pool and destroyed unused because their network policy was not the
        # harness's: {"checkpoint", "policy", "wanted"}.
        self.pool_refused = []
        atexit.register(self._destroy)

    # -- the interface ---------------------------------------------------------------------------------

    def start_emulator(self, path_to_vm, headless=True, os_type=None, *args, **kwargs):
        # DesktopEnv calls this at construction and again after every revert_to_snapshot, which already
        # took the fresh sibling: only take one when none is held.
        if self.session is None:
            self._take(Checkpoint.named(path_to_vm))

    def get_ip_address(self, path_to_vm):
        if self.session is None:
            raise DrumsError("no session: start_emulator first")
        rec = json.loads(self.session)
        url = urlparse(rec["desktop"]["guest_url"])
        vnc_port = VNC_PORT
        if VNC_MODE in ("view", "input"):
            # Started once per session; drums-view reports a server already running in this mode.
            args = ["drums-view", "vnc", "--session", rec["id"]] + (["--input"] if VNC_MODE == "input" else [])
            _, vnc = _one_record(_run(args), "vnc")
            vnc_port = vnc["port"]
        elif VNC_MODE != "off":
            raise DrumsError(f"DRUMS_OSWORLD_VNC={VNC_MODE!r}: expected view, input or off")
        return f"{url.hostname}:{url.port or 5000}:{CHROMIUM_PORT}:{vnc_port}:{VLC_PORT}"

    def save_state(self, path_to_vm, snapshot_name):
        """Checkpoint the held session under `snapshot_name` (it keeps running). The checkpoint persists
        on disk like a VM snapshot; revert_to_snapshot with that name restores from it. The held session
        must have host ids (DRUMS_OSWORLD_HOST_IDS=1): drums-ckpt refuses one in its own user namespace."""
        if self.session is None:
            raise DrumsError("no session to save: start_emulator first")
        line, rec = _one_record(_run(["drums-ckpt", "--leave-running"], self.session), "checkpoint")
        self.snapshots[snapshot_name] = Checkpoint(rec["id"], line, page_closed=True)

    def revert_to_snapshot(self, path_to_vm, snapshot_name):
        """Destroy the held session and take a fresh sibling of the snapshot: one saved by save_state
        under that name, else the checkpoint `path_to_vm` names (OSWorld's "init_state")."""
        ckpt = self.snapshots.get(snapshot_name) or Checkpoint.named(path_to_vm)
        self._destroy()
        self._take(ckpt)
        return path_to_vm

    def stop_emulator(self, path_to_vm=None, *args, **kwargs):
        self._destroy()

    # -- the task's proxy ------------------------------------------------------------------------------

    def want_proxy(self, wanted):
        """The next task's `"proxy"` (called by DesktopEnv.reset, through register(), before anything of
        the task runs): the sessions it runs on get the operator's proxy ($DRUMS_OSWORLD_PROXY) or none.
        A task that asks for one when the operator named none fails here, before it starts."""
        if wanted and not os.environ.get(PROXY_ENV):
            raise DrumsError(f'the task asks for a proxy ("proxy": true) and the operator named none: set {PROXY_ENV}='
                             'http://IPV4:PORT, an upstream HTTP proxy sessions reach through their network policy '
                             '(drums(7), "Network boundary"; docs/osworld.md)')
        self.proxy_wanted = bool(wanted)
        if self.session is not None:
            self._apply_proxy()

    def _apply_proxy(self):
        """Give the held session the proxy the task wants, or take it away (drums-net set, the session's
        own policy kept); nothing when it already has what is wanted."""
        rec = json.loads(self.session)
        egress = rec.get("egress") or {}
        want = _proxy_url(os.environ[PROXY_ENV]) if self.proxy_wanted else None
        if egress.get("proxy") == want:
            return
        if not egress:
            raise DrumsError(f"session {rec['id']} runs under network policy none, so it cannot reach the proxy "
                             f"{want}: give the harness DRUMS_NET=internet or allow:... (drums(7), \"Network boundary\")")
        uplink = egress["uplink"] + (f":{egress['gateway']}" if egress.get("gateway") else "")
        args = ["drums-net", "set", "--session", rec["id"], "--net", egress["policy"], "--uplink", uplink,
                "--proxy", want or "none", "--net-rate", str(egress["rate_bytes_s"]) if egress.get("rate_bytes_s") else "none"]
        for c in egress.get("except", []):
            args += ["--net-except", c]
        for d in egress["resolver"]["upstream"]:
            args += ["--dns", d]
        self.session, _ = _one_record(_run(args), "session")

    # -- sessions --------------------------------------------------------------------------------------

    def _take(self, ckpt):
        t0 = time.monotonic()
        out, source = None, "pool"
        if ckpt.pool_has_siblings():
            p = subprocess.run(["drums-pool", "take", "--checkpoint", ckpt.id], capture_output=True, text=True, env=_env(), timeout=TAKE_TIMEOUT)
            # Exit 1: the pool emptied meanwhile (or refused every sibling); restore one instead.
            if p.returncode == 0:
                out = p.stdout
                # A pool's siblings run under the policy it was filled with (drums-pool fill --net); the
                # harness's sessions must run under its own ($DRUMS_NET, as a restore here applies it), never
                # under a wider one it did not ask for: another policy's sibling is destroyed, and one restored.
                got = _policy_of(json.loads(out.splitlines()[0]) if out.strip() else {})
                if got != wanted_policy():
                    subprocess.run(["drums-sweep"], input=out, capture_output=True, text=True, env=_env())
                    self.pool_refused.append({"checkpoint": ckpt.id, "policy": got, "wanted": wanted_policy()})
                    out = None
            elif p.returncode != 1:
                raise DrumsError(f"drums-pool take --checkpoint {ckpt.id} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
        if out is None:
            source = "restore"
            if ckpt.page_closed:
                # A snapshot of a session the harness had: no readiness page to reseed or wait for; the
                # harness waits for the guest as it waits for a VM's server.
                restored = _run(["drums-restore"] + _identity_args(), ckpt.record + "\n")
                try:
                    out = _run(["drums-reseed", "--no-browser"], restored)
                except Exception:
                    subprocess.run(["drums-sweep"], input=restored, capture_output=True, text=True, env=_env())
                    raise
            elif ckpt.record is not None:
                out = _run([str(PIPELINES / "restore.sh")] + _identity_args(), ckpt.record + "\n")
            else:
                out = _run([str(PIPELINES / "restore.sh"), "--checkpoint", ckpt.id] + _identity_args())
        try:
            line, rec = _one_record(out, "session")
            if not ckpt.page_closed:
                self._close_ready_page(rec)
        except Exception:
            subprocess.run(["drums-sweep"], input=out, capture_output=True, text=True, env=_env())
            raise
        self.session = line
        try:
            self._apply_proxy()
        except Exception:
            self._destroy()
            raise
        self.takes.append({"session": rec["id"], "checkpoint": ckpt.id, "source": source, "seconds": round(time.monotonic() - t0, 4)})

    def _close_ready_page(self, rec):
        """Close Drums' readiness page before the harness sees the session: the first screen is then the
        desktop as OSWorld's VM shows it at a task's start, not a Chromium window titled drums-ready.
        drums-ready has already used the page (the sibling is agent-ready); the desktop's Chromium, which
        only shows that page, is stopped through the session's guest, and the close holds once no window
        with the page's title is left on the screen (read from X)."""
        desktop = rec.get("desktop") or {}
        pids = [p["pid"] for p in desktop.get("processes", []) if p.get("role") == "chromium"]
        if not pids:
            return
        body = json.dumps({"command": ["sh", "-c", CLOSE_PAGE, "close-ready-page", str(pids[0]), desktop["title"],
                                       str(CLOSE_KILL_AFTER * 10), str(CLOSE_TIMEOUT * 10)], "shell": False}).encode()
        req = urllib.request.Request(desktop["guest_url"].rstrip("/") + "/execute", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=CLOSE_TIMEOUT + 20) as r:
                answer = json.loads(r.read())
        except Exception as e:
            raise DrumsError(f"closing the readiness page of {rec['id']} through its guest failed: {e}") from e
        if answer.get("returncode") != 0:
            raise DrumsError(f"closing the readiness page of {rec['id']} failed: {answer}")

    def _destroy(self):
        if self.session is not None:
            rec, self.session = self.session, None
            _run(["drums-sweep"], rec + "\n")


def wanted_policy():
    """The network policy the harness's sessions run under: $DRUMS_NET as drums-restore reads it (the
    sessions the provider restores get it from there), else none."""
    return (os.environ.get("DRUMS_NET") or "none").strip()


def _policy_of(rec):
    """The network policy a session record says it runs under (`egress.policy`; absent: none)."""
    return (rec.get("egress") or {}).get("policy") or "none"


def _proxy_url(p):
    """`http://IPV4:PORT` as the session record writes it, from what the operator wrote."""
    p = p.strip().rstrip("/")
    return p if p.startswith("http://") else f"http://{p}"


class DrumsVMManager(VMManager):
    """OSWorld's VM registry, for the harness's bookkeeping: Drums keeps its own (the ledgers), so only
    get_vm_path does anything: the checkpoint to use when DesktopEnv is given no path_to_vm."""

    def initialize_registry(self, **kwargs):
        pass

    def add_vm(self, vm_path, *args, **kwargs):
        pass

    def delete_vm(self, vm_path, *args, **kwargs):
        pass

    def occupy_vm(self, vm_path, pid, *args, **kwargs):
        pass

    def list_free_vms(self, *args, **kwargs):
        return []

    def check_and_clean(self, *args, **kwargs):
        pass

    def get_vm_path(self, *args, **kwargs):
        """$DRUMS_OSWORLD_CHECKPOINT (a checkpoint record file or id); else the checkpoint this manager
        made before (its record in $DRUMS_OSWORLD_DIR/checkpoint.json) while its directory exists; else a
        new one: a cold session with host ids (pipelines/cold.sh with drums-overlay create --host-ids, on
        the image $DRUMS_OSWORLD_IMAGE when set) checkpointed clean."""
        named = os.environ.get("DRUMS_OSWORLD_CHECKPOINT")
        if named:
            return named
        rec = DEFAULT_CHECKPOINT_RECORD
        try:
            if Path(json.loads(rec.read_text())["dir"]).is_dir():
                return str(rec)
        except (OSError, ValueError, KeyError, TypeError):
            pass
        env = _env()
        # Host ids: drums-ckpt refuses a session in its own user namespace (the default).
        env["DRUMS_OVERLAY_ARGS"] = "--host-ids"
        if os.environ.get("DRUMS_OSWORLD_IMAGE"):
            env["DRUMS_OVERLAY_ARGS"] += f" --image {os.environ['DRUMS_OSWORLD_IMAGE']}"
        cold = subprocess.run([str(PIPELINES / "cold.sh")], capture_output=True, text=True, env=env, timeout=TAKE_TIMEOUT)
        if cold.returncode != 0:
            raise DrumsError(f"pipelines/cold.sh exited {cold.returncode}: {cold.stderr.strip()[-2000:]}")
        try:
            # drums-ckpt destroys the source after its dump; a failed dump may leave it running.
            line, _ = _one_record(_run(["drums-ckpt", "--clean"], cold.stdout), "checkpoint")
        except Exception:
            subprocess.run(["drums-sweep"], input=cold.stdout, capture_output=True, text=True, env=env)
            raise
        rec.parent.mkdir(parents=True, exist_ok=True)
        tmp = rec.with_suffix(".tmp")
        tmp.write_text(line + "\n")
        tmp.replace(rec)
        return str(rec)
