#!/usr/bin/env python3
"""Drums live-view benchmark (issue 28): what the overview page and a live view cost, with many sessions.

A fresh checkpoint, then --sessions siblings restored and agent-ready (drums-restore | drums-reseed |
drums-ready, --parallel chains at once). Then, in one run:

1. Unwatched sessions. Windows of --window seconds in three arms, interleaved round by round (the order
   rotates each of --rounds rounds) so that the machine's other load hits them alike, and a fourth:
     none       no drums-view serve running, nobody watching;
     serve      drums-view serve running, no page open;
     live       the serve arm plus one session's live view open in headless Chromium (noVNC through
                serve's relay, view only);
     left       right after `live`: the viewer has left, the session's x11vnc still runs (it outlives its
                viewers until `drums-view stop`), no page open.
   The watched session shows a 400x300 window changing colour ten times a second in every arm (a screen
   at work; a still one costs its viewer less). Per window: the CPU share (CPU seconds per wall second,
   1.0 = one CPU) of the watched session's cgroup, the mean of the other sessions' cgroups, drums-view
   serve's process, the session's x11vnc and the browser (chromedriver's process tree); resident memory
   of serve and x11vnc (VmRSS, Pss); x11vnc processes in any session. "Nothing extra" is the unwatched
   sessions' mean share in `serve` and `live` over `none`, as ratios of medians over rounds.
2. The page with every session on it. --paints fresh navigations to the page: the time from navigation
   start to the session list painted (the page's own window.drums.firstPaintMs: the first animation frame
   after the first overview was rendered) and Chromium's first-contentful-paint; each time every session
   must be listed. Then the page is left open --window seconds (a 1600x1200 window; the rows in view fetch
   thumbnails): serve's CPU share and memory, the sessions' summed CPU share, the browser's, thumbnail
   frames per second of each session in view (and out of view: none), overview reads per second, and the
   latency of GET /api/overview from outside the page meanwhile (n = --paints).

Prints one JSON object (every figure with unit, n and method; docs/benchmarks.md). Holds the suite's
session lock (/run/drums/test.lock) for the whole run. Not part of the test suite (it fills the machine).
Needs Debian's chromium and chromium-driver (pipelines/setup.sh).
Usage: pipelines/view-bench.py [--sessions 50] [--parallel 4] [--rounds 3] [--window 10] [--paints 10] [--out FILE]
Exit status: 0 measured and every check passed; 1 a check failed (a session not ready or not listed, an
x11vnc in a session nobody watches, something left after the teardown); the JSON says which.
"""
import argparse, json, os, shutil, socket, statistics, subprocess, sys, tempfile, threading, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ENV, HERE, bench_lock, destroy, fresh_checkpoint, host_resources, meminfo_kib, pct, remove_checkpoint, restore_ready, session_cpu_s, write_result  # noqa: E402

PORT = 3794  # one of the firewall's view ports (3786-3795); the tests use 3795
CLK_TCK = os.sysconf("SC_CLK_TCK")
COUNTED = ("mounts", "drums_links", "drums_cgroups", "state_entries", "policy_tables")
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def proc_cpu_s(pid):
    """CPU seconds (user + system) of one process, from /proc/PID/stat; 0 when it is gone."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / CLK_TCK
    except (OSError, IndexError):
        return 0.0


def tree(pid):
    """pid and its descendants, from one /proc scan."""
    parent = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                parent[int(p)] = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                pass
    out, todo = set(), [pid]
    while todo:
        q = todo.pop()
        out.add(q)
        todo += [c for c, pp in parent.items() if pp == q and c not in out]
    return out


def mem_kib(pid, key):
    """VmRSS (from status) or Pss (from smaps_rollup) of one process in KiB; None when it is gone."""
    try:
        src = f"/proc/{pid}/status" if key == "VmRSS" else f"/proc/{pid}/smaps_rollup"
        for line in open(src):
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def x11vnc_pids(pidns_inodes):
    """Host PIDs of x11vnc processes in the given PID namespaces."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if open(f"/proc/{p}/comm").read().strip() == "x11vnc" and os.stat(f"/proc/{p}/ns/pid").st_ino in pidns_inodes:
                out.append(int(p))
        except OSError:
            pass
    return out


class Serve:
    """drums-view serve on PORT, started and killed by this script."""

    def __init__(self):
        self.p = subprocess.Popen([os.path.join(HERE, "target/release/drums-view"), "serve", "--listen", f"127.0.0.1:{PORT}"], stdout=subprocess.PIPE, env=ENV, text=True)
        rec = json.loads(self.p.stdout.readline())
        assert rec["type"] == "view_serving", rec
        self.url = rec["url"].rstrip("/")

    def stop(self):
        self.p.kill()
        self.p.wait()


def wd(method, url, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with NO_PROXY.open(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


class Browser:
    """Debian's headless Chromium through chromedriver's WebDriver API, as tests/view.rs drives it."""

    def __init__(self):
        for p in ("/usr/bin/chromedriver", "/usr/bin/chromium"):
            if not os.path.exists(p):
                raise SystemExit(f"{p} is missing: Debian's chromium-driver and chromium (pipelines/setup.sh installs them)")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        self.driver = subprocess.Popen(["/usr/bin/chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{port}"
        self.profile = tempfile.mkdtemp(prefix="drums-view-bench-")
        t0 = time.monotonic()
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if time.monotonic() - t0 > 20:
                    raise RuntimeError("chromedriver did not listen")
                time.sleep(0.05)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1600,1200", f"--user-data-dir={self.profile}"]}}}}
        self.session = wd("POST", f"{self.base}/session", caps)["value"]["sessionId"]

    def go(self, url):
        wd("POST", f"{self.base}/session/{self.session}/url", {"url": url})

    def js(self, script):
        return wd("POST", f"{self.base}/session/{self.session}/execute/sync", {"script": script, "args": []})["value"]

    def wait(self, what, script, timeout):
        t0 = time.monotonic()
        while True:
            v = self.js(script)
            if v not in (None, False):
                return v
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"{what}: not within {timeout} s")
            time.sleep(0.05)

    def cpu_s(self):
        return sum(proc_cpu_s(p) for p in tree(self.driver.pid))

    def close(self):
        try:
            wd("DELETE", f"{self.base}/session/{self.session}", timeout=20)
        except Exception:  # noqa: BLE001 - the driver is killed next either way
            pass
        self.driver.kill()
        self.driver.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


def restore_many(ckpt, n, parallel):
    """n agent-ready siblings, `parallel` chains at a time; (records, errors)."""
    recs, errors, lock = [], [], threading.Lock()
    todo = list(range(n))

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            try:
                out = restore_ready(ckpt)
                with lock:
                    recs.append(out)
            except Exception as e:  # noqa: BLE001 - reported in the result
                with lock:
                    errors.append(str(e)[-600:])

    threads = [threading.Thread(target=worker) for _ in range(parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return recs, errors


def window(seconds, sessions, watched, serve, browser):
    """CPU shares over one window and memory at its end (see the module's docstring)."""
    inodes = {s["ns"]["inodes"]["pid"] for s in sessions}
    watched_ino = next(s["ns"]["inodes"]["pid"] for s in sessions if s["id"] == watched)
    vnc = x11vnc_pids(inodes)
    before = {s["id"]: session_cpu_s(s) for s in sessions}
    serve_pid = serve.p.pid if serve else None
    b0 = browser.cpu_s()
    s0 = proc_cpu_s(serve_pid) if serve_pid else None
    v0 = {p: proc_cpu_s(p) for p in vnc}
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    after = {s["id"]: session_cpu_s(s) for s in sessions}
    share = {k: (after[k] - before[k]) / wall for k in before if before[k] is not None and after[k] is not None}
    others = [v for k, v in share.items() if k != watched]
    vnc_now = x11vnc_pids(inodes)
    return {
        "wall_s": round(wall, 3),
        "watched_session_cpu_share": round(share[watched], 5),
        "unwatched_session_cpu_share_mean": round(statistics.mean(others), 5),
        "unwatched_sessions": len(others),
        "serve_cpu_share": round((proc_cpu_s(serve_pid) - s0) / wall, 5) if serve_pid else None,
        "serve_rss_kib": mem_kib(serve_pid, "VmRSS") if serve_pid else None,
        "serve_pss_kib": mem_kib(serve_pid, "Pss") if serve_pid else None,
        "x11vnc_cpu_share": round(sum(proc_cpu_s(p) - v0.get(p, 0) for p in vnc_now) / wall, 5) if vnc_now else None,
        "x11vnc_rss_kib": sum(mem_kib(p, "VmRSS") or 0 for p in vnc_now) if vnc_now else None,
        "x11vnc_pss_kib": sum(mem_kib(p, "Pss") or 0 for p in vnc_now) if vnc_now else None,
        "x11vnc_processes": len(vnc_now),
        "x11vnc_in_unwatched_sessions": len(x11vnc_pids(inodes - {watched_ino})),
        "browser_cpu_share": round((browser.cpu_s() - b0) / wall, 5),
    }


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(pct(xs, 0.5), 5) if xs else None


def ratio(a, b):
    return round(a / b, 3) if a is not None and b else None


# The watched session's screen changes all the time, in every arm: a 400x300 window that changes colour
# ten times a second (what a live view of an agent at work has to send; a still screen costs less).
BUSY_WINDOW = """import tkinter as t
r = t.Tk()
r.title('view-bench-busy')
r.geometry('400x300+60+60')
colours = ['#ff0000', '#00aa00', '#0000ff', '#ffaa00']
def tick(i=0):
    r.configure(bg=colours[i % 4])
    r.after(100, tick, i + 1)
tick()
r.mainloop()
"""


def launch_busy_window(rec):
    body = json.dumps({"command": ["python3", "-c", BUSY_WINDOW], "shell": False}).encode()
    req = urllib.request.Request(rec["desktop"]["guest_url"] + "/setup/launch", data=body, method="POST", headers={"Content-Type": "application/json"})
    with NO_PROXY.open(req, timeout=10) as r:
        r.read()


def unwatched_cost(sessions, rounds, seconds, browser):
    watched = sessions[0]["id"]
    launch_busy_window(sessions[0])
    time.sleep(3)
    arms = ["none", "serve", "live"]
    per = {k: [] for k in arms + ["left"]}
    order_log = []
    for r in range(rounds):
        order = arms[r % 3:] + arms[:r % 3]
        for arm in order:
            serve = Serve() if arm != "none" else None
            try:
                if arm == "live":
                    browser.go(f"{serve.url}/live?session={watched}&input=0")
                    browser.wait("the live view connected", "return window.drumsLive && (window.drumsLive.connected || window.drumsLive.error)", 60)
                    err = browser.js("return window.drumsLive.error")
                    if err:
                        raise RuntimeError(f"live view: {err}")
                time.sleep(2)  # settle: the server's start, the view's first full update
                per[arm].append(window(seconds, sessions, watched, serve, browser))
                order_log.append(arm)
                if arm == "live":
                    browser.go("about:blank")
                    time.sleep(2)
                    per["left"].append(window(seconds, sessions, watched, serve, browser))
                    order_log.append("left")
            finally:
                if arm == "live":
                    browser.go("about:blank")
                    subprocess.run([os.path.join(HERE, "target/release/drums-view"), "stop", "--session", watched], env=ENV, capture_output=True)
                if serve:
                    serve.stop()
    summary = {}
    for arm, ws in per.items():
        summary[arm] = {k: med([w[k] for w in ws]) for k in ws[0] if k not in ("wall_s", "unwatched_sessions")}
        summary[arm]["n"] = len(ws)
    base = summary["none"]["unwatched_session_cpu_share_mean"]
    return {
        "method": f"the watched session shows a 400x300 window changing colour 10 times a second in every arm; windows of {seconds} s, arms interleaved over {rounds} rounds (order rotating; `left` right after `live`), 2 s settle before each; "
                  "CPU shares from the sessions' cgroup CPU accounting and /proc/PID/stat (utime+stime) of serve, x11vnc and the browser's process tree; "
                  "memory VmRSS and Pss (smaps_rollup) at each window's end; figures are medians over rounds",
        "watched_session": watched,
        "sessions": len(sessions),
        "order": order_log,
        "windows": per,
        "median": summary,
        "unwatched_share_ratio_serve_over_none": ratio(summary["serve"]["unwatched_session_cpu_share_mean"], base),
        "unwatched_share_ratio_live_over_none": ratio(summary["live"]["unwatched_session_cpu_share_mean"], base),
        "watched_share_ratio_live_over_none": ratio(summary["live"]["watched_session_cpu_share"], summary["none"]["watched_session_cpu_share"]),
        "x11vnc_in_unwatched_sessions_max": max(w["x11vnc_in_unwatched_sessions"] for ws in per.values() for w in ws),
        "x11vnc_in_none_and_serve_max": max(w["x11vnc_processes"] for a in ("none", "serve") for w in per[a]),
    }


def page(sessions, paints, seconds, browser):
    ids = sorted(s["id"] for s in sessions)
    serve = Serve()
    try:
        # The overview alone, no page open: what one read of every session costs the server.
        idle_read, idle_latency = [], []
        for _ in range(paints):
            t1 = time.monotonic()
            with NO_PROXY.open(f"{serve.url}/api/overview", timeout=30) as r:
                idle_read.append(json.loads(r.read())["read_s"])
            idle_latency.append(time.monotonic() - t1)
        first, fcp, listed_ok = [], [], []
        for _ in range(paints):
            browser.go("about:blank")
            browser.go(f"{serve.url}/")
            first.append(browser.wait("the first overview painted", "return window.drums && window.drums.firstPaintMs", 20) / 1000)
            fcp.append((browser.js("const e = performance.getEntriesByName('first-contentful-paint')[0]; return e ? e.startTime : null") or 0) / 1000 or None)
            shown = browser.js("return [...document.querySelectorAll('#sessions tbody tr')].map(tr => tr.dataset.session)")
            listed_ok.append(all(i in shown for i in ids))
        # Open: the thumbnail loops of the rows in view fetch frames (the others wait until scrolled to).
        # Measured once every row in view has its first frame.
        thumbs = f"{json.dumps(ids)}.map(id => document.querySelector(`tr[data-session=\"${{id}}\"] img.thumb`))"
        browser.wait("a thumbnail of every session in view", f"const t = {thumbs}.filter(i => i.dataset.inView === '1'); return t.length > 0 && t.every(i => i.dataset.digest)", 60)
        frames_js = f"return {thumbs}.map(i => [i.dataset.inView === '1', Number(i.dataset.frames || 0)])"
        f0, o0 = browser.js(frames_js), browser.js("return window.drums.overviews")
        c0 = {s["id"]: session_cpu_s(s) for s in sessions}
        s0, b0, t0 = proc_cpu_s(serve.p.pid), browser.cpu_s(), time.monotonic()
        latency, read_s = [], []
        while time.monotonic() - t0 < seconds:
            t1 = time.monotonic()
            with NO_PROXY.open(f"{serve.url}/api/overview", timeout=30) as r:
                ov = json.loads(r.read())
            latency.append(time.monotonic() - t1)
            read_s.append(ov["read_s"])
            time.sleep(max(0.0, seconds / paints - (time.monotonic() - t1)))
        wall = time.monotonic() - t0
        f1, o1 = browser.js(frames_js), browser.js("return window.drums.overviews")
        c1 = {s["id"]: session_cpu_s(s) for s in sessions}
        fps = [(b[1] - a[1]) / wall for a, b in zip(f0, f1) if a[0] and b[0]]
        fps_out = [(b[1] - a[1]) / wall for a, b in zip(f0, f1) if not (a[0] or b[0])]
        return {
            "method": f"{paints} navigations (about:blank, then the page) in headless Chromium through chromedriver (window 1600x1200); the page open {seconds} s, the thumbnails of the rows in view "
                      f"fetched (240 px wide, one request after the last answered, 250 ms apart) and the overview every second; GET /api/overview from this script {paints} times meanwhile",
            "sessions": len(ids),
            "first_paint_s": {"p50_s": round(pct(first, 0.5), 3), "p95_s": round(pct(first, 0.95), 3), "min_s": round(min(first), 3), "max_s": round(max(first), 3), "n": len(first),
                              "values": [round(x, 3) for x in first], "what": "navigation start to the first animation frame after the first overview was rendered (window.drums.firstPaintMs)"},
            "first_contentful_paint_s": {"values": [round(x, 3) if x else None for x in fcp], "n": len(fcp), "what": "Chromium's first-contentful-paint entry"},
            "every_session_listed": all(listed_ok),
            "overview_alone": {"read_s": {"p50_s": round(pct(idle_read, 0.5), 3), "max_s": round(max(idle_read), 3), "n": len(idle_read)},
                               "latency_s": {"p50_s": round(pct(idle_latency, 0.5), 3), "max_s": round(max(idle_latency), 3), "n": len(idle_latency)},
                               "what": "GET /api/overview back to back from this script, no page open: the server's read_s and the wall clock here"},
            "open": {
                "wall_s": round(wall, 2),
                "serve_cpu_share": round((proc_cpu_s(serve.p.pid) - s0) / wall, 4),
                "serve_rss_kib": mem_kib(serve.p.pid, "VmRSS"), "serve_pss_kib": mem_kib(serve.p.pid, "Pss"),
                "sessions_cpu_share_sum": round(sum(c1[k] - c0[k] for k in c0 if c0[k] is not None and c1[k] is not None) / wall, 4),
                "browser_cpu_share": round((browser.cpu_s() - b0) / wall, 4),
                "thumbnail_frames_per_s_per_session_in_view": {"p50": round(pct(fps, 0.5), 2), "min": round(min(fps), 2), "max": round(max(fps), 2), "n": len(fps)} if fps else None,
                "thumbnail_frames_per_s_per_session_out_of_view": {"max": round(max(fps_out), 2), "n": len(fps_out)} if fps_out else None,
                "overview_reads_per_s": round((o1 - o0) / wall, 2),
                "overview_latency_s": {"p50_s": round(pct(latency, 0.5), 3), "max_s": round(max(latency), 3), "n": len(latency), "what": "GET /api/overview from outside the page, wall clock"},
                "overview_read_s": {"p50_s": round(pct(read_s, 0.5), 3), "max_s": round(max(read_s), 3), "n": len(read_s), "what": "the server's own read_s"},
            },
        }
    finally:
        browser.go("about:blank")
        serve.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--paints", type=int, default=10)
    ap.add_argument("--out")
    a = ap.parse_args()
    lock = bench_lock()  # noqa: F841 - held for the whole run
    result = {"drums": 1, "type": "view-benchmark", "machine": {"cores": os.cpu_count(), "kernel": os.uname().release, "mem_total_mib": round(meminfo_kib()["MemTotal"] / 1024)}}
    counts_before = host_resources()
    failures = []
    ckpt = fresh_checkpoint()
    recs, browser = [], None
    try:
        t0 = time.monotonic()
        recs, errors = restore_many(ckpt, a.sessions, a.parallel)
        result["restore"] = {"ready": len(recs), "asked": a.sessions, "seconds": round(time.monotonic() - t0, 1), "errors": errors[:5]}
        if errors:
            failures.append(f"{len(errors)} restores failed")
        print(f"view-bench: {len(recs)} sessions ready", file=sys.stderr)
        sessions = sorted((json.loads(r) for r in recs), key=lambda s: s["created_at"])
        browser = Browser()
        result["unwatched"] = u = unwatched_cost(sessions, a.rounds, a.window, browser)
        print(f"view-bench: unwatched {json.dumps(u['median'])}", file=sys.stderr)
        if u["x11vnc_in_unwatched_sessions_max"] or u["x11vnc_in_none_and_serve_max"]:
            failures.append("an x11vnc ran in a session nobody watched")
        result["page"] = p = page(sessions, a.paints, a.window, browser)
        print(f"view-bench: page {json.dumps(p['first_paint_s'])}", file=sys.stderr)
        if not p["every_session_listed"]:
            failures.append("a session was not listed")
    finally:
        if browser:
            browser.close()
        destroy("".join(recs))
        remove_checkpoint(json.loads(ckpt))
    counts_after = host_resources()
    left = {k: counts_after[k] - counts_before[k] for k in COUNTED if counts_after[k] != counts_before[k]}
    result["left_after_teardown"] = left
    if left:
        failures.append(f"left after the teardown: {left}")
    result["failures"] = failures
    result["checks_passed"] = not failures
    write_result(result, a.out)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
