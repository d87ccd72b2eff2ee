#!/usr/bin/python3
"""Run OSWorld task files through OSWorld's own DesktopEnv with the Drums provider (docs/osworld.md).

  pipelines/osworld-run.py --checkpoint ckpt.json [--agent none|scripted [--actions FILE]] [--settle S] [--eval-wait S] [TASK ...]
  pipelines/osworld-run.py --list [--image-root DIR] [--internet] [TASK ...]

TASK: task files or directories of them (default: the shared OSWorld tasks, ../shared/osworld/examples).
Each task is first classified: it runs here when its setup and evaluation need no internet (with
--internet: when the sessions' network policy, $DRUMS_NET, lets them open the pages they open, and the
operator's proxy, $DRUMS_OSWORLD_PROXY, is named for a task asking for one) and the applications of its
domain are in the checkpoint's root image; otherwise it is skipped with the reason.

One JSON line per task on stdout:
  {"type": "osworld_task", "id", "domain", "runnable", "skip_reason", "network", "session_hosts", "proxy",
   "programs", "missing_programs",
   "setup_ok", "reset_s", "take_s", "take_source", "setup_s", "settle_s", "agent", "solution", "actions_s",
   "agent_error", "eval_wait_s", "eval_s", "score", "error", "session"}
network: where the task's setup and evaluation fetch from the internet: offline (they name no http(s) URL),
host (only the harness on the host fetches: SetupController's downloads, which it uploads to the session,
and expected files), session (the session opens pages itself: the task's browser, the evaluator through it,
or the agent browsing); session_hosts: the host names the session opens (empty unless network is session),
what an allow list names; proxy: the task's "proxy" (it wants the operator's upstream proxy).
programs: what the task's setup, post-config and evaluation getters start in the session (the first word of
each command, read as a shell reads it); missing_programs: those the root image has in none of PROGRAM_DIRS
(null: no image to look in). A missing program does not skip the task: it runs, and its setup or evaluation
shows what the program's absence does.
reset_s is DesktopEnv.reset (take_s of it the provider's take of a fresh sibling, null when the reset
reused a clean one; setup_s the task's setup, SetupController.setup, all tries); settle_s the wait after
the reset (--settle: the applications the setup launched come up before the agent's first observation and
action, or before the evaluation with agent none); eval_wait_s the wait between the agent's last action and
the evaluation (--eval-wait: what the last action started is written, a browser's Bookmarks or Preferences
say, before the evaluator reads or kills it; null when the agent did not act); eval_s is evaluate();
score the metric's value (null when evaluation raised: error says what). agent: none or scripted;
solution: the scripted agent's solution file run for the task (relative to the repository; null: none, or
--actions gave the actions); actions_s: the seconds the agent acted (null with agent none or nothing to
run); agent_error: why the solution stopped early (it raised), null when it ran to its end; the task is
evaluated either way. setup_ok is what
SetupController.setup returned (DesktopEnv retries a failed setup up to 5 times, 5 s apart, and goes on).
A summary line comes last: {"type": "osworld_summary", "agent", "domains": per domain {tasks, offline,
fetch_on_host, fetch_in_session, proxy (the tasks of each network kind, and those asking for a proxy),
runnable, setup_ok, evaluated, score_0, score_1}, "seconds": per phase (reset, setup, actions, eval) {n, p50, p95}
over the tasks run (nearest-rank percentiles; null with n = 0)}.

Agents: none (evaluate right after setup: a correct environment scores 0); scripted: the reference
solution pipelines/osworld/solutions/<domain>/<first 8 characters of the task id>.py, whose solve(env, obs)
acts through env.step as an agent does (docs/osworld.md, "Reference solutions"); a task without one is
evaluated after no action. With --actions FILE (a JSON object of task id -> list of pyautogui code
strings, each sent with env.step) the scripted agent sends those instead, for the tasks the file names.
Needs PYTHONPATH with pipelines/osworld and the harness (pipelines/setup.d/osworld-harness.sh); this
script adds both when they are at their default places. Exit 0 when every runnable task was set up and
evaluated without error, 1 otherwise, 2 usage.
"""
import argparse
import glob
import importlib.util
import json
import math
import os
import re
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "osworld" / "examples"
SOLUTIONS = REPO / "pipelines" / "osworld" / "solutions"
# The phases of a task timed in its record (<phase>_s) and summed up in the summary.
PHASES = ("reset", "setup", "actions", "eval")
HARNESS = Path(os.environ.get("DRUMS_OSWORLD_HARNESS", "/var/lib/drums/osworld-harness"))

# What each domain's tasks start, as programs the image must hold (looked up in its /usr/bin).
DOMAIN_PROGRAMS = {
    "os": [],
    "chrome": ["chromium"],
    "gimp": ["gimp"],
    "vlc": ["vlc"],
    "thunderbird": ["thunderbird"],
    "libreoffice_calc": ["soffice"],
    "libreoffice_writer": ["soffice"],
    "libreoffice_impress": ["soffice"],
    "multi_apps": ["soffice", "gimp", "vlc", "thunderbird"],
}
URL = re.compile(r"https?://")
URL_HOST = re.compile(r"https?://([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)")
# Where a task's URLs are fetched (network_of): the steps and getters whose URLs the harness fetches on the
# host (SetupController downloads, then uploads the file to the session; the cloud_file getter downloads
# the expected file; googledrive talks to Google's API), and those whose URLs are compared, never fetched
# (the tabs to close, the history entries written, a rule's expected URLs). Any other URL of a task's setup
# or evaluation is opened in the session: by the task's browser (chrome_open_tabs, a start page), by the
# evaluator through the session's browser (page_info, info_from_website, pdf_from_url), or by the agent
# browsing to the page the evaluator reads (active_tab_*, active_url_from_accessTree, url_*).
FETCHED_ON_HOST = {"download", "cloud_file", "googledrive"}
NOT_FETCHED = {"chrome_close_tabs", "update_browse_history", "rule"}
# Where a program a task runs is looked up in the root image (the session's PATH, drums-desktop(1)).
PROGRAM_DIRS = ["usr/local/bin", "usr/bin", "bin", "usr/sbin", "sbin"]
# Words of a shell command line that are no program of the image: bash's keywords, after which a command
# starts, and its builtins, whose arguments are no commands.
SHELL_KEYWORDS = {"!", "{", "}", "do", "done", "elif", "else", "fi", "if", "then", "time", "until", "while"}
# What follows a command substitution inside a test (`[ "$(...)" = 1 ]`): operands and operators, no program.
TEST_WORDS = {"=", "==", "!=", "]", "]]", "-eq", "-ne", "-gt", "-ge", "-lt", "-le"}
SHELL_BUILTINS = {"[", "[[", ".", ":", "case", "cd", "echo", "eval", "exit", "export", "false", "for", "function", "local",
                  "printf", "read", "return", "set", "source", "test", "true", "unset"}
# Programs that run the rest of their arguments as another command.
WRAPPERS = {"sudo": {"-u", "-g", "-p"}, "timeout": set(), "env": set(), "nohup": set(), "xargs": set()}
COMMAND_STEPS = {"execute", "command", "launch"}
COMMAND_GETTERS = {"vm_command_line", "vm_command_error"}


def unquote_substitutions(script):
    """The script with the double quotes around each "$(...)" taken away (the parenthesis that closes it
    found by counting; the rest unchanged)."""
    out, i = [], 0
    while True:
        start = script.find('"$(', i)
        if start < 0:
            return "".join(out) + script[i:]
        depth, j = 0, start + 1
        while j < len(script):
            depth += {"(": 1, ")": -1}.get(script[j], 0)
            if depth == 0 and script[j] == ")":
                break
            j += 1
        if j + 1 < len(script) and script[j + 1] == '"':
            out.append(script[i:start] + script[start + 1:j + 1])
            i = j + 2
        else:
            out.append(script[i:start + 1])
            i = start + 1


def shell_programs(script):
    """The programs a shell script starts, in order: the first word of each simple command (after variable
    assignments), also inside $(...) and after a wrapper such as sudo or timeout, without builtins."""
    # A command substitution in double quotes ("$(...)") is a command line all the same: the quotes go, so
    # that the words inside are read as words.
    script = unquote_substitutions(script)
    text = script.replace("$(", " ; ").replace("`", " ; ").replace(")", " ; ").replace("\n", " ; ").replace("\r", " ")
    lex = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    out, at_start, skip_wrapper_arg = [], True, None
    try:
        tokens = list(lex)
    except ValueError:  # an unbalanced quote: read what splits
        tokens = text.split()
    for tok in tokens:
        if tok and set(tok) <= set(";&|()<>"):
            at_start = not tok.startswith(">") and not tok.startswith("<")
            continue
        if not at_start:
            continue
        if skip_wrapper_arg is not None:
            if tok.startswith("-"):
                if tok in skip_wrapper_arg:
                    skip_wrapper_arg = {"<value>"}
                continue
            if skip_wrapper_arg == {"<value>"}:
                skip_wrapper_arg = set()
                continue
            if tok.replace(".", "").isdigit() or re.fullmatch(r"[0-9.]+[smhd]", tok):  # timeout's duration
                continue
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tok) or tok in SHELL_KEYWORDS:
            continue
        if tok in TEST_WORDS:
            at_start = False
            continue
        if tok in SHELL_BUILTINS:
            at_start, skip_wrapper_arg = False, None
            continue
        prog = os.path.basename(tok)
        out.append(prog)
        if prog in WRAPPERS:
            skip_wrapper_arg = WRAPPERS[prog]
        else:
            at_start, skip_wrapper_arg = False, None
    return out


def command_programs(command):
    """The programs an OSWorld command runs: a list is an argv (a shell's -c script is read as a script),
    a string is a shell command line (OSWorld's server runs those with shell=True)."""
    if isinstance(command, str):
        return shell_programs(command)
    if not isinstance(command, list) or not command or not isinstance(command[0], str):
        return []
    head = os.path.basename(command[0])
    if head in ("bash", "sh") and "-c" in command[1:-1]:
        return [head] + shell_programs(command[command.index("-c") + 1])
    return shell_programs(" ".join(shlex.quote(str(c)) for c in command))


def programs_run_by(task):
    """Every program a task's setup, post-config and evaluation getters start in the session."""
    steps = list(task.get("config", [])) + list(task.get("evaluator", {}).get("postconfig", []))
    out = []
    for step in steps:
        if step.get("type") in COMMAND_STEPS:
            out += command_programs(step.get("parameters", {}).get("command"))
    ev = task.get("evaluator", {})
    for key in ("result", "expected"):
        getters = ev.get(key)
        for g in getters if isinstance(getters, list) else [getters]:
            if isinstance(g, dict) and g.get("type") in COMMAND_GETTERS:
                out += command_programs(g.get("command"))
    return list(dict.fromkeys(out))


def missing_programs(task, image_root):
    """The programs of programs_run_by(task) that the image has in none of PROGRAM_DIRS; None: no image."""
    if not image_root:
        return None
    return [p for p in programs_run_by(task) if not any((Path(image_root) / d / p).exists() for d in PROGRAM_DIRS)]


def solution(domain, task_id):
    """The reference solution of a task: (its solve function, its path relative to the repository), or
    (None, None) when it has none."""
    path = SOLUTIONS / domain / f"{task_id[:8]}.py"
    if not path.exists():
        return None, None
    if str(SOLUTIONS) not in sys.path:
        sys.path.insert(0, str(SOLUTIONS))  # solutions import their means as `agent`
    spec = importlib.util.spec_from_file_location(f"solution_{domain}_{task_id[:8]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.solve, str(path.relative_to(REPO))


def percentiles(values):
    """n, p50 and p95 (nearest rank) of a list of seconds; null figures when it is empty."""
    v = sorted(values)
    rank = lambda p: v[max(0, math.ceil(p * len(v)) - 1)]
    return {"n": len(v), "p50": rank(0.5) if v else None, "p95": rank(0.95) if v else None}


def task_files(args):
    out = []
    for a in args or [str(SHARED)]:
        p = Path(a)
        out.extend(sorted(p.glob("*/*.json")) + sorted(p.glob("*.json")) if p.is_dir() else [p])
    return [f for f in out if f.name != "test_all.json"]


def network_of(task):
    """Where the task's setup and evaluation fetch from the internet: ("offline", []) when they name no
    http(s) URL; ("host", []) when only the harness on the host fetches (downloads it uploads, expected
    files); ("session", hosts) when the session itself opens pages, with the host names it opens (what an
    allow list would name). The task's `source` and `instruction` are not read."""
    ev = task.get("evaluator", {})
    units = [(st.get("type"), st) for st in list(task.get("config", [])) + list(ev.get("postconfig", []))]
    for key in ("result", "expected"):
        getters = ev.get(key)
        units += [(g.get("type"), g) for g in (getters if isinstance(getters, list) else [getters]) if isinstance(g, dict)]
    named, session = False, []
    for kind, unit in units:
        text = json.dumps(unit)
        if not URL.search(text):
            continue
        named = True
        if kind not in FETCHED_ON_HOST and kind not in NOT_FETCHED:
            session += URL_HOST.findall(text)
    if not named:
        return "offline", []
    return ("session", sorted(set(h.lower() for h in session))) if session else ("host", [])


def classify(task, domain, image_root, internet=False, policy="none", proxy_named=False):
    """None when the task can run here, else why not. internet: the harness's host reaches the pages the
    tasks name (--internet); policy: the sessions' network policy ($DRUMS_NET); proxy_named: the operator
    named an upstream proxy ($DRUMS_OSWORLD_PROXY)."""
    if domain == "vs_code":
        return "VS Code: not packaged by Debian, so no Drums image has it"
    network, _ = network_of(task)
    if network != "offline" and not internet:
        return "internet: its setup or evaluation names an http(s) URL (downloads, pages), and these machines have no internet"
    if network == "session" and policy == "none":
        return "network policy none: the task opens pages in the session (give the harness DRUMS_NET=internet or allow:...)"
    if task.get("proxy") and not proxy_named:
        return "proxy: the task asks for one (\"proxy\": true) and DRUMS_OSWORLD_PROXY names none"
    if domain == "chrome" and image_root:
        # The tasks start `google-chrome --remote-debugging-port=1337` and forward the session's 9222 to it
        # with socat; the getters read the profile ~/.config/google-chrome, which the image's google-chrome
        # (a script since pipelines/image.sh made it one; a link to chromium before) gives.
        if not (Path(image_root) / "usr/bin/socat").exists():
            return "chrome: the root image has no socat, which the tasks forward DevTools (9222) with"
        if (Path(image_root) / "usr/bin/google-chrome").is_symlink():
            return "chrome: the root image's google-chrome is a link to chromium, without OSWorld's profile path (rebuild it with pipelines/image.sh)"
    missing = [p for p in DOMAIN_PROGRAMS.get(domain, []) if image_root and not (Path(image_root) / "usr/bin" / p).exists()]
    if missing:
        return f"the root image has no {', '.join(missing)}"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tasks", nargs="*")
    ap.add_argument("--checkpoint", help="checkpoint record file or id (DesktopEnv's path_to_vm)")
    ap.add_argument("--agent", choices=["none", "scripted"], default="none")
    ap.add_argument("--actions", help="scripted agent: JSON object task id -> list of pyautogui actions (instead of "
                    "the solutions in pipelines/osworld/solutions/)")
    ap.add_argument("--list", action="store_true", help="classify only: which tasks run here, and why not")
    ap.add_argument("--image-root", help="with --list: the root image to classify against (default: the checkpoint's, "
                    "else the default image's, $DRUMS_IMAGE_DIR/desktop/root)")
    ap.add_argument("--settle", type=float, default=20.0, metavar="SECONDS",
                    help="wait this long after each reset before the agent observes and acts (with agent none, before "
                    "the evaluation), as OSWorld's run_single_example waits after its reset (default: 20)")
    ap.add_argument("--eval-wait", type=float, default=20.0, metavar="SECONDS",
                    help="wait this long after the agent's last action before the evaluation, as OSWorld's "
                    "run_single_example waits before evaluate() (default: 20; no wait when the agent did not act)")
    ap.add_argument("--internet", action="store_true",
                    help="the harness's host reaches the pages and files the tasks name (or $DRUMS_OSWORLD_URL_MAP maps "
                    "them onto a mirror): tasks naming URLs are not skipped for that; those that open pages in the session "
                    "also need a network policy ($DRUMS_NET other than none), those asking for a proxy $DRUMS_OSWORLD_PROXY")
    ap.add_argument("--cache", default="/tmp/drums-osworld-cache")
    a = ap.parse_args()
    # The records alone on stdout: OSWorld's getters and metrics print as they go (and so do the programs
    # they run), so from here on descriptor 1 is stderr and the records keep the original stdout.
    records = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    if not (a.settle >= 0 and math.isfinite(a.settle)):
        ap.error("--settle: seconds, 0 or more")
    if not (a.eval_wait >= 0 and math.isfinite(a.eval_wait)):
        ap.error("--eval-wait: seconds, 0 or more")
    if a.actions and a.agent != "scripted":
        ap.error("--actions goes with --agent scripted")
    if not a.list and not a.checkpoint:
        ap.error("give --checkpoint (or --list)")
    image_root = None
    if a.image_root:
        if not a.list:
            ap.error("--image-root goes with --list (a run uses its checkpoint's image)")
        if not Path(a.image_root, "usr/bin").is_dir():
            ap.error(f"--image-root {a.image_root}: no usr/bin there, not a root image")
        image_root = a.image_root
    elif a.checkpoint and os.path.exists(a.checkpoint):
        image_root = json.loads(Path(a.checkpoint).read_text())["image"]["root"]
    elif a.list:
        image_root = os.path.join(os.environ.get("DRUMS_IMAGE_DIR", "/var/lib/drums/images"), "desktop", "root")
    actions = json.loads(Path(a.actions).read_text()) if a.actions else {}

    # What the tools the provider runs read: the sessions' policy (drums-restore, drums-pool) and the
    # operator's proxy (the provider).
    policy = os.environ.get("DRUMS_NET") or "none"
    proxy_named = bool(os.environ.get("DRUMS_OSWORLD_PROXY"))
    tasks = []
    for f in task_files(a.tasks):
        t = json.loads(f.read_text())
        domain = f.parent.name
        tasks.append((t, domain, classify(t, domain, image_root, a.internet, policy, proxy_named)))
    missing = {t["id"]: missing_programs(t, image_root) for t, _, _ in tasks}
    summary = {}
    seconds = {phase: [] for phase in PHASES}

    def emit(rec):
        d = summary.setdefault(rec["domain"], {"tasks": 0, "offline": 0, "fetch_on_host": 0, "fetch_in_session": 0, "proxy": 0,
                                               "runnable": 0, "setup_ok": 0, "evaluated": 0, "score_0": 0, "score_1": 0})
        d["tasks"] += 1
        d[{"offline": "offline", "host": "fetch_on_host", "session": "fetch_in_session"}[rec["network"]]] += 1
        d["proxy"] += rec["proxy"]
        d["runnable"] += rec["runnable"]
        d["setup_ok"] += bool(rec.get("setup_ok"))
        d["evaluated"] += rec.get("score") is not None
        d["score_0"] += rec.get("score") == 0
        d["score_1"] += rec.get("score") == 1
        for phase in PHASES:
            if rec.get(phase + "_s") is not None:
                seconds[phase].append(rec[phase + "_s"])
        print(json.dumps(rec), file=records, flush=True)

    env = None
    if not a.list and any(r is None for _, _, r in tasks):
        for p in (str(REPO / "pipelines" / "osworld"), str(HARNESS)):
            if p not in sys.path:
                sys.path.insert(0, p)
        import drums_osworld
        drums_osworld.register()
        from desktop_env.controllers.setup import SetupController
        from desktop_env.desktop_env import DesktopEnv

        # The runner's own instrument: what SetupController.setup returned, and how long it took (OSWorld
        # only logs a failed setup). The method is OSWorld's, called unchanged.
        setups = []
        original_setup = SetupController.setup

        def timed_setup(self, *args, **kwargs):
            t0 = time.monotonic()
            ok = original_setup(self, *args, **kwargs)
            setups.append((ok, time.monotonic() - t0))
            return ok

        SetupController.setup = timed_setup
        env = DesktopEnv(provider_name="drums", path_to_vm=a.checkpoint, action_space="pyautogui", headless=True,
                         require_a11y_tree=False, cache_dir=a.cache)
    failed = 0
    try:
        for t, domain, reason in tasks:
            network, hosts = network_of(t)
            rec = {"type": "osworld_task", "id": t["id"], "domain": domain, "runnable": reason is None, "skip_reason": reason,
                   "network": network, "session_hosts": hosts, "proxy": bool(t.get("proxy", False)),
                   "programs": programs_run_by(t), "missing_programs": missing[t["id"]],
                   "setup_ok": None, "reset_s": None, "take_s": None, "take_source": None, "setup_s": None, "settle_s": None,
                   "agent": a.agent, "solution": None, "actions_s": None, "agent_error": None, "eval_wait_s": None, "eval_s": None,
                   "score": None, "error": None, "session": None}
            if reason is not None or a.list:
                emit(rec)
                continue
            try:
                takes, setups[:] = len(env.provider.takes), []
                t0 = time.monotonic()
                obs = env.reset(task_config=t)
                rec["reset_s"] = round(time.monotonic() - t0, 3)
                if len(env.provider.takes) > takes:
                    rec["take_s"], rec["take_source"] = env.provider.takes[-1]["seconds"], env.provider.takes[-1]["source"]
                rec["session"] = json.loads(env.provider.session)["id"]
                # The setup's tries: ok when the last one was.
                rec["setup_ok"] = bool(setups) and bool(setups[-1][0])
                rec["setup_s"] = round(sum(s for _, s in setups), 3) if setups else None
                # What the setup launched comes up (LibreOffice, GIMP, a browser) before the first look at the
                # screen; the observation the agent starts from is taken after the wait.
                if a.settle > 0:
                    time.sleep(a.settle)
                    obs = env._get_obs()
                rec["settle_s"] = a.settle
                if a.agent == "scripted":
                    t0 = time.monotonic()
                    if a.actions:
                        for act in actions.get(t["id"], []):
                            env.step(act, pause=0.5)
                        ran = t["id"] in actions
                    else:
                        solve, rec["solution"] = solution(domain, t["id"])
                        ran = solve is not None
                        try:
                            if solve is not None:
                                solve(env, obs)
                        except Exception as e:  # the agent gave up: what it did so far is evaluated
                            rec["agent_error"] = f"{type(e).__name__}: {e}"[:2000]
                    rec["actions_s"] = round(time.monotonic() - t0, 3) if ran else None
                    # What the last action started settles before the evaluator reads (or pkills) the
                    # application: chrome/2ad9387a's Bookmarks file was read before Chromium wrote it.
                    if ran:
                        if a.eval_wait > 0:
                            time.sleep(a.eval_wait)
                        rec["eval_wait_s"] = a.eval_wait
                t0 = time.monotonic()
                rec["score"] = env.evaluate()
                rec["eval_s"] = round(time.monotonic() - t0, 3)
                # Whatever the task did, the next one starts on a fresh sibling.
                env.is_environment_used = True
            except Exception as e:  # the task's failure is recorded; the run goes on with a fresh sibling
                rec["error"] = f"{type(e).__name__}: {e}"[:2000]
                env.is_environment_used = True
            if not rec["setup_ok"] or rec["score"] is None:
                failed += 1
            emit(rec)
    finally:
        if env is not None:
            env.close()
    print(json.dumps({"type": "osworld_summary", "agent": a.agent, "domains": summary,
                      "seconds": {phase: percentiles(v) for phase, v in seconds.items()}}), file=records, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
