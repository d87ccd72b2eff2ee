#!/usr/bin/env python3
"""Run one OSWorld task against a Drums session's guest server, the way OSWorld's harness drives its VM.

A subset of OSWorld's task format, the part the first-check driver's tasks use:
  config steps      execute, command (POST /setup/execute, retried as SetupController does with `until`;
                    a step's return code is recorded, not judged, as OSWorld does), launch (POST
                    /setup/launch), sleep
  evaluator         func exact_match or check_include_exclude, result vm_command_line (POST /execute,
                    the output), expected rule (the rules object); optional postconfig steps
  agent             the task file's agent_step (a Python string or a list of them), each sent as OSWorld's
                    PythonController.execute_python_command sends pyautogui code (POST /execute,
                    ["python", "-c", "import pyautogui; import time; pyautogui.FAILSAFE = False; CODE"])
Anything else in the task is refused (exit 3), never skipped.

Two phases, so that the driver can checkpoint or inject a fault between them:
  begin   wait for the guest (GET /terminal and /screenshot answer 200, as SetupController waits), check the
          interference canary, and with --setup run the task's config steps
  finish  score before the action, one observation (GET /screenshot), the agent's steps, the evaluation,
          then write the canary marker and read it back (a marker not in place is a fault)
Each prints one JSON object on stdout: the phase's seconds, results, and `fault` (null, or what failed).
Exit 0; 5 when a fault stopped the phase (the object says which step); 3 for a task outside the subset.

  pipelines/osworld_task.py begin  --url http://10.77.0.2:5000 --task tests/data/osworld-e0df059f.json --setup
  pipelines/osworld_task.py finish --url http://10.77.0.2:5000 --task tests/data/osworld-e0df059f.json --marker M
"""
import argparse, json, shlex, sys, time, urllib.error, urllib.request

CANARY_FILES = ["~/.drums-canary", "/tmp/.drums-canary"]
PYAUTOGUI_PREFIX = "import pyautogui; import time; pyautogui.FAILSAFE = False; {}"
SCREEN = {"SCREEN_WIDTH": 1920, "SCREEN_HEIGHT": 1080, "SCREEN_WIDTH_HALF": 960, "SCREEN_HEIGHT_HALF": 540}


class Fault(Exception):
    """A step that did not complete: the rollout is invalid."""


class Unsupported(Exception):
    """A task outside the subset this runner implements."""


def request(url, path, body=None, timeout=150.0):
    """One request; (status, bytes). Connection errors raise Fault."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method="GET" if body is None else "POST")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (OSError, urllib.error.URLError) as e:
        raise Fault(f"{path}: guest unreachable: {getattr(e, 'reason', e)}") from None


def execute(url, path, command, shell, tries=3, interval=0.5):
    """POST {command, shell} to /execute or /setup/execute; the result object. Retried like OSWorld's
    controllers retry a failed request; a guest that never answers 200 is a fault."""
    last = None
    for _ in range(tries):
        try:
            status, body = request(url, path, {"command": command, "shell": shell})
            if status == 200:
                return json.loads(body)
            last = f"{path}: HTTP {status}: {body[:300].decode(errors='replace')}"
        except Fault as e:
            last = str(e)
        time.sleep(interval)
    raise Fault(last)


def screen_env(command):
    """OSWorld's replace_screen_env_in_command: {SCREEN_WIDTH} and friends in a command."""
    def sub(s):
        for k, v in SCREEN.items():
            s = s.replace("{" + k + "}", str(v))
        return s
    return sub(command) if isinstance(command, str) else [sub(c) for c in command]


def config_step(url, step):
    kind, p = step.get("type"), step.get("parameters", {})
    t0 = time.monotonic()
    if kind in ("execute", "command"):
        until, fails = p.get("until") or {}, 0
        while True:
            r = execute(url, "/setup/execute", screen_env(p["command"]), bool(p.get("shell", False)))
            done = not until or ("returncode" in until and r.get("returncode") == until["returncode"]) \
                or ("stdout" in until and until["stdout"] in r.get("output", "")) \
                or ("stderr" in until and until["stderr"] in r.get("error", ""))
            fails += 0 if done else 1
            if done:
                break
            if fails >= 5:
                raise Fault(f"setup {kind}: `until` {until} never held: {r}")
            time.sleep(0.3)
        out = {"type": kind, "returncode": r.get("returncode")}
    elif kind == "launch":
        command, shell = p["command"], bool(p.get("shell", False))
        if not shell and isinstance(command, str) and len(command.split()) > 1:
            command = command.split()  # as OSWorld's _launch_setup does
        status, body = request(url, "/setup/launch", {"command": command, "shell": shell})
        if status != 200:
            raise Fault(f"setup launch {command!r}: HTTP {status}: {body[:300].decode(errors='replace')}")
        out = {"type": kind}
    elif kind == "sleep":
        time.sleep(float(p["seconds"]))
        out = {"type": kind}
    else:
        raise Unsupported(f"config step type {kind!r} (supported: execute, command, launch, sleep)")
    out["seconds"] = round(time.monotonic() - t0, 4)
    return out


def metric(func, result, rules):
    """OSWorld's metrics, desktop_env/evaluators/metrics/general.py."""
    if func == "exact_match":
        return 1.0 if result == rules["expected"] else 0.0
    if func == "check_include_exclude":
        if result is None:
            return 0.0
        ok = all(r in result for r in rules.get("include", [])) and all(r not in result for r in rules.get("exclude", []))
        return 1.0 if ok else 0.0
    raise Unsupported(f"evaluator func {func!r} (supported: exact_match, check_include_exclude)")


def check_supported(task):
    for step in task.get("config", []) + task["evaluator"].get("postconfig", []):
        if step.get("type") not in ("execute", "command", "launch", "sleep"):
            raise Unsupported(f"config step type {step.get('type')!r} (supported: execute, command, launch, sleep)")
    ev = task["evaluator"]
    if ev.get("func") not in ("exact_match", "check_include_exclude"):
        raise Unsupported(f"evaluator func {ev.get('func')!r} (supported: exact_match, check_include_exclude)")
    if ev.get("result", {}).get("type") != "vm_command_line" or ev.get("expected", {}).get("type") != "rule":
        raise Unsupported("evaluator result must be vm_command_line and expected a rule")


def evaluate(url, task):
    """DesktopEnv.evaluate for the subset: postconfig, then getter and metric. A getter that gets no 200
    answer returns None, as OSWorld's does; the guest being gone is a fault here, not a score of 0."""
    ev = task["evaluator"]
    for step in ev.get("postconfig", []):
        config_step(url, step)
    res = ev["result"]
    output = execute(url, "/execute", res["command"], bool(res.get("shell", False)), tries=1)["output"]
    return metric(ev["func"], output, ev["expected"]["rules"])


def begin(a, task, out):
    t0 = time.monotonic()
    deadline = t0 + a.wait
    while True:
        try:
            if request(a.url, "/terminal", timeout=5)[0] == 200 and request(a.url, "/screenshot", timeout=10)[0] == 200:
                break
        except Fault:
            pass
        if time.monotonic() > deadline:
            raise Fault(f"wait: the guest at {a.url} did not answer /terminal and /screenshot within {a.wait} s")
        time.sleep(0.1)
    out["wait_s"] = round(time.monotonic() - t0, 4)
    t = time.monotonic()
    r = execute(a.url, "/execute", "cat " + " ".join(CANARY_FILES) + " 2>/dev/null; true", True)
    seen = [l for l in r["output"].splitlines() if l.strip()]
    out["canary"] = "clean" if not seen else "seen"
    out["canary_seen"] = seen
    out["canary_check_s"] = round(time.monotonic() - t, 4)
    if a.setup:
        t = time.monotonic()
        out["setup_steps"] = []
        for step in task.get("config", []):
            out["setup_steps"].append(config_step(a.url, step))
        out["setup_s"] = round(time.monotonic() - t, 4)


def finish(a, task, out):
    t = time.monotonic()
    out["score_before_action"] = evaluate(a.url, task)
    out["precheck_s"] = round(time.monotonic() - t, 4)
    steps = task.get("agent_step")
    steps = [steps] if isinstance(steps, str) else steps
    if not steps:
        raise Unsupported("the task file has no agent_step for the scripted agent")
    t = time.monotonic()
    status, png = request(a.url, "/screenshot")
    if status != 200 or not png.startswith(b"\x89PNG"):
        raise Fault(f"action: observation GET /screenshot answered {status}")
    agent_error = None
    for code in steps:
        r = execute(a.url, "/execute", ["python", "-c", PYAUTOGUI_PREFIX.format(code)], False)
        if r.get("returncode") != 0 and agent_error is None:
            err = (r.get("error") or "").strip().splitlines()
            agent_error = f"exited {r.get('returncode')}" + (f": {err[-1][:300]}" if err else "")
    out["action_s"] = round(time.monotonic() - t, 4)
    t = time.monotonic()
    out["score"] = evaluate(a.url, task)
    out["eval_s"] = round(time.monotonic() - t, 4)
    t = time.monotonic()
    canary_error = write_canary(a.url, a.marker)
    out["canary_written"] = None if canary_error else a.marker
    out["canary_write_s"] = round(time.monotonic() - t, 4)
    faults = []
    if agent_error:
        # The scripted agent's steps are known to work, so a failing step is the environment's fault.
        # OSWorld would only score it: the score is kept, and the rollout is marked.
        faults.append(f"action: the scripted agent's step {agent_error}")
    if canary_error:
        # A marker that is not there cannot be seen by the next rollout: its clean canary would prove nothing.
        faults.append(f"canary: {canary_error}")
    if faults:
        raise Fault("; ".join(faults))


def write_canary(url, marker):
    """Write the marker to every canary file, then read each back in a second request; None when every
    file holds exactly the marker, else what went wrong."""
    q = shlex.quote(marker)
    r = execute(url, "/execute", "set -e; " + "; ".join(f"printf '%s\\n' {q} > {f}" for f in CANARY_FILES), True)
    if r.get("returncode") != 0:
        err = (r.get("error") or "").strip().splitlines()
        return f"writing the marker exited {r.get('returncode')}" + (f": {err[-1][:300]}" if err else "")
    for f in CANARY_FILES:
        r = execute(url, "/execute", f"cat {f}", True)
        if r.get("returncode") != 0 or r.get("output") != marker + "\n":
            return f"the marker read back from {f} is {r.get('output')!r} (exit {r.get('returncode')}), not what was written"
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("phase", choices=["begin", "finish"])
    p.add_argument("--url", required=True, help="the session's desktop.guest_url")
    p.add_argument("--task", required=True, help="an OSWorld task JSON file")
    p.add_argument("--setup", action="store_true", help="begin: run the task's config steps")
    p.add_argument("--marker", default="drums-canary", help="finish: the canary text to leave in the session")
    p.add_argument("--wait", type=float, default=30.0, help="begin: seconds to wait for the guest")
    a = p.parse_args()
    out = {"phase": a.phase, "fault": None}
    try:
        with open(a.task) as f:
            task = json.load(f)
        check_supported(task)
        (begin if a.phase == "begin" else finish)(a, task, out)
    except (Unsupported, KeyError) as e:
        out["fault"] = f"unsupported task: {e}"
        print(json.dumps(out), flush=True)
        return 3
    except Fault as e:
        out["fault"] = f"{a.phase}: {e}"
        print(json.dumps(out), flush=True)
        return 5
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
