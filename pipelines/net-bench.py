#!/usr/bin/env python3
"""Drums network benchmark (issue 26's "Done when"): what a network policy costs, on this machine, against
a stand-in internet the benchmark brings up itself (tests/data/standin.sh: a network namespace of its own
holding a web server and a DNS server on 198.51.100.0/24, TEST-NET-2, joined to the host by a veth that
the sessions use as their uplink). Nothing is sent to any other address: before anything is sent, the
route from the host and from every session under `internet` to the stand-in's addresses is checked to go
through that veth to the stand-in's own address; a failed check stops the run before sending.

In ONE run, interleaved (each round: cold_none, restore_none, cold_internet, restore_internet, take):
  cold_<policy>     pipelines/cold.sh under the policy (DRUMS_NET, DRUMS_UPLINK, DRUMS_NET_DNS)
  restore_<policy>  drums-restore --ready of one clean checkpoint (made under `none`; a restore applies
                    its own policy) under the policy
  take              drums-pool take from a pool of that checkpoint filled under `internet`; the pool is
                    refilled to its depth after each take (untimed)
  wall time of one command from its start to its exit with a ready record; each session destroyed
  (untimed) before the next start. Ratios cold p50 / restore p50 per policy, and cold_internet p50 / take
  p50, with a bootstrap 95% interval (benchlib.bootstrap_ratio, 2000 draws).
First request after a thaw: right after each take returned, `drums-ns exec` in the taken sibling runs a
  loop that fetches http://web.example.org/ (through the session's resolver and its NAT and filter) every
  10 ms until one succeeds; the time from take's return to that exec's exit with a success, and the time
  inside the loop (from its first attempt to its success), with the number of attempts.
Download throughput: a 100 MiB file of random bytes served by the stand-in's web server (python3
  http.server), fetched with the same Python reader (1 MiB reads) from inside a sibling under `internet`
  (http://198.51.100.10/big.bin: session veth, Drums' NAT and filter, the uplink veth) and from the host's
  side of the uplink (http://198.51.100.2/big.bin, the same server on its link address: the uplink veth
  only, no Drums), alternated, MB/s = 10^6 bytes over the reader's wall time from open to the last byte.

The teardown (also on failure) destroys every session, drains the pool, removes the checkpoint and takes
the stand-in down; the host inventory (drums-sweep --report) is read before and after and compared.
Holds the test suite's session lock (/run/drums/test.lock) for the whole run. Prints one JSON object;
every figure has its unit, n and method; what was not measured is null with a reason.
With --before-tools DIR (another build's tools, e.g. the commit before a change, copied to DIR): four
  more arms in every round, cold_none_before, restore_none_before, cold_internet_before and
  restore_internet_before, the same commands run with DIR's tools (PATH, and DRUMS_TOOLS_DIR for
  pipelines/cold.sh), interleaved with the others; then the ratios after/before per arm, same run.
With --other-tables N: one more arm in every round, restore_internet_tables, the restore under `internet`
  with N other policy tables on the host, as many sessions would leave them: before that start (untimed)
  one nft transaction adds N tables `inet netbench_other_<k>`, each a copy of the probe session's policy
  table (sets, counters, chains and rules) without its hooks (so no packet of anyone's passes through
  them), and after it (untimed) one transaction deletes them; its egress.apply_times.nft_ms against
  restore_internet's, same run, says what other tables cost the session's table.
Usage: pipelines/net-bench.py [--starts 20] [--depth 4] [--downloads 5] [--max-sessions 256] [--before-tools DIR] [--other-tables N] [--out FILE]
"""
import argparse, json, os, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import HERE, ENV, bench_lock, bootstrap_ratio, destroy, host_inventory, pct, remove_checkpoint, sh, source_session, write_result  # noqa: E402
from benchlib import summary as summary3  # noqa: E402

# The stand-in's names are the benchmark's own, not the egress tests' (tests/egress_common.rs), so that a
# leftover of one never meets the other.
NETNS = "netbench-standin"
UPLINK = "nbup0"
GATEWAY = "198.51.100.2"  # the stand-in's end of the uplink veth (the host's end is 198.51.100.1/30)
WEB = "198.51.100.10"
DNS = "198.51.100.53"
STANDIN_DIR = "/tmp/netbench-standin"
STANDIN = os.path.join(HERE, "tests/data/standin.sh")
FILE_BYTES = 100 * 1024 * 1024
POLICIES = ("none", "internet")
ENVS = {"none": dict(ENV, DRUMS_NET="none"),
        "internet": dict(ENV, DRUMS_NET="internet", DRUMS_UPLINK=f"{UPLINK}:{GATEWAY}", DRUMS_NET_DNS=DNS)}
for _k in ("DRUMS_NET_PROXY", "DRUMS_NET_RATE", "DRUMS_NET_EXCEPT"):
    for _e in ENVS.values():
        _e.pop(_k, None)

# Fetch argv[1] without any proxy, reading 1 MiB at a time: "OK seconds bytes" or "ERR seconds why".
FETCH = r"""
import sys, time, urllib.request
t = time.monotonic()
try:
    r = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(sys.argv[1], timeout=30)
    n = 0
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        n += len(b)
    print(f"OK {time.monotonic() - t:.4f} {n}")
except Exception as e:
    print(f"ERR {time.monotonic() - t:.4f} {type(e).__name__} {e}")
"""

# Fetch argv[1] every 10 ms until one fetch succeeds (at most 10 s): "OK seconds attempts" or "ERR ...".
FIRST = r"""
import sys, time, urllib.request
t = time.monotonic()
o = urllib.request.build_opener(urllib.request.ProxyHandler({}))
k, last = 0, ""
while time.monotonic() - t < 10:
    k += 1
    try:
        with o.open(sys.argv[1], timeout=2) as r:
            if r.status == 200 and b"Stand-in page" in r.read():
                print(f"OK {time.monotonic() - t:.4f} {k}")
                sys.exit(0)
    except Exception as e:
        last = f"{type(e).__name__} {e}"
    time.sleep(0.01)
print(f"ERR {time.monotonic() - t:.4f} {k} {last}")
"""


def summary(xs):
    return summary3(xs, digits=4)


def route(args):
    return subprocess.run(["ip", "route", "get"] + args, capture_output=True, text=True).stdout


def standin_up():
    subprocess.run([STANDIN, "down", NETNS, UPLINK], capture_output=True)
    # Another link on the host with the stand-in's range (the egress tests' stand-in, left behind) would
    # make the routes below ambiguous: refuse rather than guess.
    taken = [l for l in sh(["ip", "-4", "-o", "addr", "show"]).splitlines() if " 198.51.100." in l]
    if taken:
        raise RuntimeError(f"another host link already holds an address in 198.51.100.0/24 (nothing was sent): {taken}")
    p = subprocess.run([STANDIN, "up", NETNS, UPLINK, STANDIN_DIR], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"the stand-in internet did not come up (dnsmasq-base, python3, iproute2 needed): {p.stderr.strip()[-600:]}")
    addrs = sh(["ip", "-n", NETNS, "-4", "-o", "addr", "show"])
    for a in (GATEWAY, WEB, DNS):
        if f" {a}/" not in addrs:
            raise RuntimeError(f"the stand-in namespace lacks {a} (nothing was sent): {addrs}")
    r = route([GATEWAY])
    if f"dev {UPLINK}" not in r:
        raise RuntimeError(f"the stand-in's address {GATEWAY} is not reached through {UPLINK} from the host (nothing was sent): {r}")


def check_session_routes(rec):
    """Before a session under `internet` sends anything of the benchmark's: its packets to the stand-in's
    addresses, and its resolver's queries, go into the stand-in (tests/egress_common.rs check_routes)."""
    net = rec["net"]
    for dst in (WEB, DNS):
        r = route([dst, "from", net["session_addr"], "iif", net["host_if"]])
        if f"via {GATEWAY} dev {UPLINK}" not in r:
            raise RuntimeError(f"{dst} from session {rec['id']} is not routed into the stand-in (nothing was sent): {r}")
    r = route([DNS, "from", net["host_addr"], "ipproto", "udp", "dport", "53"])
    if f"via {GATEWAY} dev {UPLINK}" not in r:
        raise RuntimeError(f"the resolver of {rec['id']} is not routed into the stand-in (nothing was sent): {r}")


def check_ready(arm, out, policy):
    rec = json.loads(out)
    if not rec.get("ready", {}).get("ready"):
        destroy(out)
        raise RuntimeError(f"{arm}: not ready: {rec.get('ready')}")
    got = (rec.get("egress") or {}).get("policy", "none")
    if got != policy:
        destroy(out)
        raise RuntimeError(f"{arm}: the session's policy is {got}, not {policy}")
    if policy != "none":
        try:
            check_session_routes(rec)
        except Exception:
            destroy(out)
            raise
    return rec


def session_fetch(rec, script, url):
    p = subprocess.run(["drums-ns", "exec", "--session", rec["id"], "--", "python3", "-c", script, url], capture_output=True, text=True, env=ENV)
    return p.stdout.strip() or f"ERR 0 exit {p.returncode}: {p.stderr.strip()[-300:]}"


def bytes_in(rec):
    """The session's kernel counter bytes_in (bytes forwarded to it, headers included; its policy table's
    named counter, docs/record.md), or None."""
    table = rec["egress"]["nft_table"].split()[-1]
    p = subprocess.run(["nft", "-j", "list", "counters", "table", "inet", table], capture_output=True, text=True)
    try:
        for o in json.loads(p.stdout)["nftables"]:
            c = o.get("counter")
            if c and c.get("name") == "bytes_in":
                return c["bytes"]
    except (ValueError, KeyError):
        return None
    return None


def hookless_table(rec):
    """The probe session's policy table as `nft list` prints it, with TABLE for its name and without the
    lines that hook its chains (type ... hook ...), so that copies of it cost nft's cache what another
    session's table does and touch no packet."""
    name = rec["egress"]["nft_table"].split()[-1]
    listing = sh(["nft", "list", "table", "inet", name])
    lines = [l for l in listing.splitlines() if " hook " not in l]
    return "\n".join(lines).replace(f"table inet {name} ", "table inet TABLE ") + "\n"


def delete_other_tables(n):
    sh(["nft", "-f", "-"], stdin="".join(f"add table inet netbench_other_{k}\ndelete table inet netbench_other_{k}\n" for k in range(n)))


def inventory_counts(inv):
    return {"sessions": len(inv["sessions"]), "slots": len(inv["slots"]), "mounts": len(inv["mounts"]), "links": len(inv["links"]),
            "cgroups": len(inv["cgroups"]), "processes": sum(not p["zombie"] for p in inv["processes"]),
            "nft_tables": sorted(inv["nft_tables"])}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--starts", type=int, default=20, help="starts per arm (and first requests after a take)")
    ap.add_argument("--depth", type=int, default=4, help="pool depth kept during the interleaved starts")
    ap.add_argument("--downloads", type=int, default=5, help="downloads of the 100 MiB file per side")
    ap.add_argument("--max-sessions", type=int, default=256,
                    help="the pool fill's count ceiling (drums-pool fill --max-sessions): other work's sessions on the host count too, and at the "
                         "default 32 a busy host stops the refills and every take fails")
    ap.add_argument("--before-tools", metavar="DIR", help="another build's tools: run the cold and restore arms with them too, interleaved")
    ap.add_argument("--other-tables", type=int, default=0, metavar="N", help="an arm restore_internet_tables: the restore with N other (hookless) policy tables on the host")
    ap.add_argument("--out")
    a = ap.parse_args()
    lock = bench_lock()  # noqa: F841 - held for the whole run
    result = {"drums": 1, "type": "net_benchmark", "machine": {"cores": os.cpu_count(), "kernel": os.uname().release},
              "head": sh(["git", "-C", HERE, "rev-parse", "--short", "HEAD"]).strip(),
              "standin": {"netns": NETNS, "uplink": f"{UPLINK}:{GATEWAY}", "dns": DNS, "web": WEB,
                          "how": "tests/data/standin.sh up: a namespace of the benchmark's own, no default route in it; routes checked before sending"},
              "method": "one run, arms interleaved per round (cold_none, restore_none, cold_internet, restore_internet, take), wall time of one "
                        "command from its start to its exit with a ready record; sessions destroyed between starts and the pool refilled after "
                        "each take (untimed); release build; the test suite's lock held"}
    before = host_inventory()
    result["host_inventory_before"] = inventory_counts(before)
    ckpt, c, pool_filled, live = "", None, False, []
    arms = [f"{k}_{p}" for p in POLICIES for k in ("cold", "restore")] + ["take"]
    envs = {arm: ENVS[(arm.split("_") + ["internet"])[1]] for arm in arms}
    if a.before_tools:
        before = os.path.abspath(a.before_tools)
        if not os.access(os.path.join(before, "drums-restore"), os.X_OK):
            raise SystemExit(f"--before-tools {before}: no drums-restore there")
        result["before_tools"] = {"dir": before, "drums_restore_sha256": sh(["sha256sum", os.path.join(before, "drums-restore")]).split()[0]}
        for p in POLICIES:
            for k in ("cold", "restore"):
                arm = f"{k}_{p}_before"
                arms.insert(arms.index(f"{k}_{p}") + 1, arm)
                envs[arm] = dict(ENVS[p], PATH=before + ":" + ENVS[p]["PATH"], DRUMS_TOOLS_DIR=before)
    if a.other_tables:
        arms.insert(arms.index("restore_internet") + 1, "restore_internet_tables")
        envs["restore_internet_tables"] = ENVS["internet"]
    other_template, other_made = "", False
    times = {arm: [] for arm in arms}
    first_wall, first_inner, first_attempts, first_fail = [], [], [], []
    dl = {"drums_session": [], "host_uplink": []}
    dl_fail, counted, take_fail = [], [], []
    parts = {arm: [] for arm in arms if arm.startswith("restore_")}
    try:
        standin_up()
        # A probe of the configuration before any desktop starts: a namespace under `internet`, its routes
        # checked, then destroyed (nothing sent).
        ov = sh(["drums-overlay", "create"], env=ENVS["internet"])
        try:
            ns = sh(["drums-ns", "create"], stdin=ov, env=ENVS["internet"])
        except Exception:
            destroy(ov)
            raise
        try:
            check_session_routes(json.loads(ns))
            if a.other_tables:
                other_template = hookless_table(json.loads(ns))
        finally:
            destroy(ns)
        src = source_session(ENVS["none"])  # host ids: drums-ckpt's source
        try:
            ckpt = sh(["drums-ckpt", "--clean"], stdin=src)
        except Exception:
            destroy(src)
            raise
        c = json.loads(ckpt)
        result["checkpoint"] = {"id": c["id"], "made_under": "none", "image_mib": round(c["image_bytes"] / 2**20, 1)}
        pool_filled = True
        sh(["drums-pool", "fill", "--checkpoint", c["id"], "--depth", str(a.depth), "--max-sessions", str(a.max_sessions)], env=ENVS["internet"])
        for i in range(a.starts):
            for arm in arms:
                kind, policy = (arm.split("_") + ["internet"])[:2]
                env = envs[arm]
                if arm == "restore_internet_tables":
                    sh(["nft", "-f", "-"], stdin="".join(other_template.replace("TABLE", f"netbench_other_{k}") for k in range(a.other_tables)))
                    other_made = True
                t0 = time.monotonic()
                if kind == "cold":
                    out = sh([os.path.join(HERE, "pipelines/cold.sh")], env=env)
                elif kind == "restore":
                    out = sh(["drums-restore", "--ready"], stdin=ckpt, env=env)
                else:
                    try:
                        out = sh(["drums-pool", "take", "--checkpoint", c["id"]], env=env)
                    except RuntimeError as e:
                        # Said in the result (take_failures), the pool refilled, the round goes on.
                        take_fail.append(f"round {i + 1}: {str(e)[-400:]}")
                        sh(["drums-pool", "fill", "--checkpoint", c["id"], "--depth", str(a.depth), "--max-sessions", str(a.max_sessions)], env=env)
                        continue
                dt = time.monotonic() - t0
                if other_made:
                    delete_other_tables(a.other_tables)
                    other_made = False
                live.append(out)
                rec = check_ready(arm, out, policy)
                times[arm].append(dt)
                if kind == "restore":
                    parts[arm].append(dict(rec["restore"]["times"], reseed_s=rec["reseed"]["total_s"], ready_s=rec["ready"]["ready_s"],
                                           **{f"egress_{k}": v for k, v in ((rec.get("egress") or {}).get("apply_times") or {}).items() if isinstance(v, (int, float))}))
                if kind == "take":
                    t1 = time.monotonic()
                    got = session_fetch(rec, FIRST, "http://web.example.org/")
                    wall = time.monotonic() - t1
                    f = got.split()
                    if f[0] == "OK":
                        first_wall.append(wall)
                        first_inner.append(float(f[1]))
                        first_attempts.append(int(f[2]))
                    else:
                        first_fail.append(got[:300])
                destroy(out)
                live.remove(out)
                if kind == "take":
                    sh(["drums-pool", "fill", "--checkpoint", c["id"], "--depth", str(a.depth), "--max-sessions", str(a.max_sessions)], env=env)
            print(f"net-bench: round {i + 1}/{a.starts}: " + ", ".join(f"{k} {times[k][-1]:.3f} s" for k in arms if times[k]), file=sys.stderr)
        # Throughput: one sibling under `internet`, the host's side of the uplink, alternated.
        out = sh(["drums-restore", "--ready"], stdin=ckpt, env=ENVS["internet"])
        live.append(out)
        rec = check_ready("download", out, "internet")
        if f"dev {UPLINK}" not in route([GATEWAY]):
            raise RuntimeError(f"{GATEWAY} is no longer reached through {UPLINK} (nothing was sent)")
        for j in range(a.downloads):
            for side in ("drums_session", "host_uplink"):
                if side == "drums_session":
                    b0 = bytes_in(rec)
                    got = session_fetch(rec, FETCH, f"http://{WEB}/big.bin")
                    b1 = bytes_in(rec)
                    if b0 is not None and b1 is not None:
                        counted.append(b1 - b0)
                else:
                    p = subprocess.run(["python3", "-c", FETCH, f"http://{GATEWAY}/big.bin"], capture_output=True, text=True)
                    got = p.stdout.strip() or f"ERR 0 {p.stderr.strip()[-300:]}"
                f = got.split()
                if f[0] == "OK" and int(f[2]) == FILE_BYTES:
                    dl[side].append(FILE_BYTES / 1e6 / float(f[1]))
                else:
                    dl_fail.append(f"{side}: {got[:300]}")
            print(f"net-bench: download {j + 1}/{a.downloads}: " + ", ".join(f"{k} {v[-1]:.0f} MB/s" for k, v in dl.items() if v), file=sys.stderr)
        destroy(out)
        live.remove(out)
    finally:
        if other_made:
            delete_other_tables(a.other_tables)
        for out in live:
            destroy(out)
        if pool_filled:
            sh(["drums-pool", "drain", "--checkpoint", c["id"]], check=False)
        if c:
            remove_checkpoint(c)
        subprocess.run([STANDIN, "down", NETNS, UPLINK], capture_output=True)
        subprocess.run(["rm", "-rf", STANDIN_DIR])  # its web root holds the 100 MiB file
    n = a.starts
    t = result["time_to_agent_ready"] = {arm: summary(times[arm]) for arm in arms}
    result["take_failures"] = take_fail
    result["ratio_cold_over_restore"] = {}
    for p in POLICIES:
        cold, rest = times[f"cold_{p}"], times[f"restore_{p}"]
        result["ratio_cold_over_restore"][p] = {"p50": round(pct(cold, 0.5) / pct(rest, 0.5), 2), "p50_bootstrap_95": [round(x, 2) for x in bootstrap_ratio(cold, rest)],
                                                "n_each": n, "target": "p50 ratio >= 2 (issue 26)"}
    if times["take"]:
        result["ratio_cold_internet_over_take"] = {"p50": round(pct(times["cold_internet"], 0.5) / pct(times["take"], 0.5), 1),
                                                   "p50_bootstrap_95": [round(x, 1) for x in bootstrap_ratio(times["cold_internet"], times["take"])], "n_each": {"cold_internet": len(times["cold_internet"]), "take": len(times["take"])}}
    else:
        result["ratio_cold_internet_over_take"] = {"p50": None, "null_reason": "no take succeeded (take_failures)"}
    result["internet_over_none"] = {k: {"p50_ratio": round(pct(times[f"{k}_internet"], 0.5) / pct(times[f"{k}_none"], 0.5), 3),
                                        "bootstrap_95": [round(x, 3) for x in bootstrap_ratio(times[f"{k}_internet"], times[f"{k}_none"])], "n_each": n}
                                    for k in ("cold", "restore")}
    result["restore_breakdown_p50_s"] = {arm: {k: round(pct([b[k] for b in parts[arm] if k in b], 0.5), 4) for k in parts[arm][0]} for arm in parts if parts[arm]}
    result["restore_breakdown_p50_s"]["method"] = ("p50 of the restore record's times (docs/record.md, restore.times; egress_s: applying the policy, the "
                                                   "session's table, routes, resolver and auditor, on its own thread beside criu_s; egress_wait_s: what the "
                                                   "restore waited for it after CRIU; records of tools before that change have network_s including the policy "
                                                   "and neither field), reseed.total_s and ready.ready_s, and egress_* the steps of applying the policy "
                                                   "(egress.apply_times, milliseconds, where the record has them), per arm, n = starts")
    if a.other_tables:
        result["other_tables"] = {"n_tables": a.other_tables, "template_lines": other_template.count("\n"),
                                  "method": "restore_internet_tables: the restore under internet with n_tables other policy tables on the host (copies of "
                                            "the probe session's table without hooks, added before the start and deleted after it, untimed), against "
                                            "restore_internet in the same rounds; compare egress_nft_ms in restore_breakdown_p50_s"}
    if a.before_tools:
        result["after_over_before"] = {arm: {"p50_ratio": round(pct(times[arm], 0.5) / pct(times[f"{arm}_before"], 0.5), 3),
                                             "bootstrap_95": [round(x, 3) for x in bootstrap_ratio(times[arm], times[f"{arm}_before"])], "n_each": n}
                                       for arm in times if f"{arm}_before" in times}
        result["after_over_before"]["method"] = "p50 with this tree's tools over p50 with --before-tools' tools, same run, interleaved per round"
        result["ratio_cold_over_restore_before"] = {
            p: {"p50": round(pct(times[f"cold_{p}_before"], 0.5) / pct(times[f"restore_{p}_before"], 0.5), 2),
                "p50_bootstrap_95": [round(x, 2) for x in bootstrap_ratio(times[f"cold_{p}_before"], times[f"restore_{p}_before"])], "n_each": n}
            for p in POLICIES}
    result["internet_over_none"]["method"] = "p50 under internet over p50 under none, same run, interleaved: what applying the policy costs a start"
    result["first_request_after_take"] = {
        "take_return_to_success_s": summary(first_wall), "inside_loop_s": summary(first_inner),
        "attempts_max": max(first_attempts) if first_attempts else None, "attempts_p50": pct(first_attempts, 0.5),
        "failures": first_fail, "n": len(first_wall),
        "method": "after drums-pool take returned (under internet): drums-ns exec in the sibling running python3, fetching http://web.example.org/ "
                  "(session resolver, NAT, filter) every 10 ms until a 200 with the stand-in page; take_return_to_success_s: from take's return to "
                  "the exec's exit (includes drums-ns exec and python3 start, ~what an agent's first command pays); inside_loop_s: from the loop's "
                  "first attempt to its success"}
    dls = {}
    for side, xs in dl.items():
        dls[side] = {"p50_MB_s": round(pct(xs, 0.5), 1), "min_MB_s": round(min(xs), 1), "max_MB_s": round(max(xs), 1), "n": len(xs)} if xs else None
    dls["drums_over_host_p50"] = round(pct(dl["drums_session"], 0.5) / pct(dl["host_uplink"], 0.5), 3) if dl["drums_session"] and dl["host_uplink"] else None
    if len(dl["drums_session"]) >= 2 and len(dl["host_uplink"]) >= 2:
        dls["drums_over_host_bootstrap_95"] = [round(x, 3) for x in bootstrap_ratio(dl["drums_session"], dl["host_uplink"])]
    dls["session_counter_bytes_in_over_file"] = {"min": round(min(counted) / FILE_BYTES, 4), "max": round(max(counted) / FILE_BYTES, 4), "n": len(counted),
                                                 "method": "the session's kernel counter bytes_in (its policy table, IP headers included) over one download, divided by the file's size: the download went through Drums' filter"} if counted else None
    dls["failures"] = dl_fail
    dls["file_bytes"] = FILE_BYTES
    dls["method"] = ("the same 100 MiB file of random bytes from the stand-in's python3 http.server, read by the same python3 reader (1 MiB reads, "
                     "no proxy); drums_session: from inside a restored sibling under internet, http://198.51.100.10/big.bin (session veth, Drums' "
                     "NAT and filter, uplink veth); host_uplink: from the host, http://198.51.100.2/big.bin (the uplink veth only, no Drums); "
                     "alternated; MB = 10^6 bytes over the reader's wall time from open to the last byte. The server (one Python thread per "
                     "connection, 64 KiB copies) may be the ceiling of both sides")
    result["download_throughput"] = dls
    after = host_inventory()
    result["host_inventory_after"] = inventory_counts(after)
    leftover_ns = NETNS in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    leftover_link = subprocess.run(["ip", "link", "show", UPLINK], capture_output=True).returncode == 0
    result["teardown"] = {"inventory_unchanged": result["host_inventory_after"] == result["host_inventory_before"],
                          "standin_netns_left": leftover_ns, "uplink_left": leftover_link, "standin_dir_left": os.path.exists(STANDIN_DIR),
                          "method": "drums-sweep --report (host_inventory) counts before the stand-in came up and after the teardown; ip netns list; ip link show"}
    write_result(result, a.out)


if __name__ == "__main__":
    main()
