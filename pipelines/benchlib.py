"""What the Drums benchmarks (bench.py, pool-bench.py) share: running the tools, percentiles, a bootstrap
interval for a ratio of medians, removing a checkpoint, host memory, a session's summed Pss, a least-squares slope."""
import os, random, statistics, subprocess

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ)
ENV["PATH"] = os.path.join(HERE, "target/release") + ":" + ENV.get("PATH", "")
# Sessions made by a benchmark belong to it: the cron sweep removes them if the benchmark dies.
ENV["DRUMS_OWNER"] = str(os.getpid())


def sh(cmd, stdin=None, check=True, env=None):
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=env or ENV, shell=isinstance(cmd, str))
    if check and p.returncode != 0:
        raise RuntimeError(f"{cmd}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
    return p.stdout


def destroy(records):
    if records.strip():
        sh(["drums-sweep"], stdin=records, check=False)


def remove_checkpoint(c):
    """A checkpoint record's directory and its mapped files (drums-ckpt(1)), which live in one of their own."""
    subprocess.run(["rm", "-rf", c["dir"]] + ([c["mapped"]["dir"]] if c.get("mapped") else []))


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def bootstrap_ratio(a, b, q=0.5, draws=2000, seed=1):
    """95% interval of quantile-q(a) / quantile-q(b), resampling both samples."""
    rnd = random.Random(seed)
    rs = []
    for _ in range(draws):
        ra = [rnd.choice(a) for _ in a]
        rb = [rnd.choice(b) for _ in b]
        rs.append(pct(ra, q) / pct(rb, q))
    return [pct(rs, 0.025), pct(rs, 0.975)]


def used_mib():
    info = {}
    for line in open("/proc/meminfo"):
        k, v = line.split(":")
        info[k] = int(v.split()[0])
    return (info["MemTotal"] - info["MemAvailable"]) / 1024


def session_pss_mib(rec):
    pidns = rec["ns"]["inodes"]["pid"]
    total = 0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if os.stat(f"/proc/{p}/ns/pid").st_ino != pidns:
                continue
            for line in open(f"/proc/{p}/smaps_rollup"):
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def slope(xs, ys):
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def summary(xs, digits=3):
    if not xs:
        return None
    return {"p50_s": round(pct(xs, 0.5), digits), "p95_s": round(pct(xs, 0.95), digits), "min_s": round(min(xs), digits), "max_s": round(max(xs), digits), "n": len(xs)}
