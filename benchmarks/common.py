"""Shared pieces of the mkpy benchmark suite: timing, result rows, targets.

Timing rules (machines are shared and noisy, so only ratios are quoted):
  * every contender is warmed up first (compiles, page faults, pool start-up);
  * contenders are interleaved: each round runs every contender once, in a
    rotating order, so a burst of load from elsewhere hits all of them alike;
  * a sample repeats the call enough times to last >= ~20 ms, and the best
    sample (seconds per call) is kept: best-of-N.

A row compares mkpy with one reference. `ratio` is always "how many times
better mkpy is": reference time / mkpy time, mkpy throughput / reference
throughput, reference memory / mkpy memory. Above 1 mkpy wins.
"""
import gc
import math
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# ------------------------------------------------------------------ timing

def _sample(fn, inner):
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def compare(contenders, *, warmup=2, min_reps=3, max_reps=9, budget_s=3.0, sample_s=0.02, settle_s=0.0):
    """Best seconds per call of each contender ({name: fn}), interleaved.

    Runs `warmup` interleaved calls of each, sizes each contender's sample to
    about `sample_s`, then runs rounds until `min_reps` are done and either
    `max_reps` are done or `budget_s` has passed. With warmup=0 (for calls of
    seconds, warmed up by the caller on a smaller size) the sizing call counts
    as the first round. settle_s: a pause before each timed sample, so that
    worker threads a library leaves running after its calls (MLX's) are done
    before the next contender is timed."""
    names = [n for n, f in contenders.items() if f is not None]
    gc_was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        first = {}
        for w in range(max(1, warmup)):
            for n in names:
                t = _sample(contenders[n], 1)
                first[n] = t if w == 0 else min(first[n], t)
        inner = {n: max(1, min(100000, int(math.ceil(sample_s / max(first[n], 1e-9))))) for n in names}
        best = dict.fromkeys(names, math.inf)
        start = time.perf_counter()
        rounds = 0
        if warmup == 0:
            best, rounds = dict(first), 1
        while rounds < min_reps or (rounds < max_reps and time.perf_counter() - start < budget_s):
            k = rounds % len(names)
            for n in names[k:] + names[:k]:
                if settle_s:
                    time.sleep(settle_s)
                best[n] = min(best[n], _sample(contenders[n], inner[n]))
            rounds += 1
    finally:
        if gc_was:
            gc.enable()
    return best


def compare_in_children(specs, *, rounds=3, env=None):
    """Best seconds per call of each contender, each timed in fresh processes of its own
    (child.py timeit): specs is {lib: {"setup": code, "stmt": code}} with lib one of mkpy,
    numpy, mlx. Rounds rotate the order, as compare() does. For calls of about a microsecond,
    where a library loaded in the same process (its worker threads, its allocator) moves the
    others' times by more than the differences being measured."""
    import json
    names = list(specs)
    best = dict.fromkeys(names, math.inf)
    for r in range(rounds):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            res = run_child("child.py", ["timeit", n], env=env, stdin=json.dumps(specs[n]))
            best[n] = min(best[n], res["seconds"])
    return best


# ------------------------------------------------------------------ rows

class Target:
    """A pass/fail rule on a row: on the ratio (`ratio >= x`) or on mkpy's
    own figure (`value <= x` or `value < x`)."""

    def __init__(self, text, ratio_min=None, value_max=None, strict=False):
        self.text, self.ratio_min, self.value_max, self.strict = text, ratio_min, value_max, strict

    def met(self, row):
        if self.ratio_min is not None:
            return None if row.get("ratio") is None else row["ratio"] >= self.ratio_min
        v = row.get("value")
        if v is None:
            return None
        return v < self.value_max if self.strict else v <= self.value_max

    def as_dict(self):
        return {"text": self.text, "ratio_min": self.ratio_min, "value_max": self.value_max, "strict": self.strict}


def row(section, name, *, value=None, value_text="", ref_name="", ref_value=None, ref_text="", ratio=None,
        target=None, note="", check=None, extra=None):
    """One line of the table. `value`/`ref_value` are in the row's own unit
    (seconds, GB/s, ...); `*_text` is how they print."""
    r = {
        "section": section,
        "name": name,
        "value": value,
        "value_text": value_text,
        "ref_name": ref_name,
        "ref_value": ref_value,
        "ref_text": ref_text,
        "ratio": ratio,
        "target": target.as_dict() if target else None,
        "note": note,
        "check": check,
    }
    if extra:
        r["extra"] = extra
    r["met"] = target.met(r) if target else None
    if check is False:
        r["met"] = False
    return r


def time_ratio(t_mkpy, t_ref):
    if t_mkpy is None or t_ref is None or not math.isfinite(t_mkpy) or not math.isfinite(t_ref) or t_mkpy <= 0:
        return None
    return t_ref / t_mkpy


def fmt_time(s):
    if s is None or not math.isfinite(s):
        return "n/a"
    if s < 1e-3:
        return "%.1f us" % (s * 1e6)
    if s < 1:
        return "%.1f ms" % (s * 1e3)
    return "%.2f s" % s


def fmt_ratio(r):
    if r is None:
        return "n/a"
    if r >= 100:
        return "%.0fx" % r
    if r >= 10:
        return "%.1fx" % r
    if r >= 0.1:
        return "%.2fx" % r
    return "%.2gx" % r


def size_label(n):
    e = int(math.floor(math.log10(n) + 1e-9))
    m = n / 10 ** e
    return ("%de%d" % (m, e)) if m == int(m) else "%g" % n


# ------------------------------------------------------------------ machine

def machine_info():
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {"cpu": model, "cores": os.cpu_count(), "python": sys.version.split()[0], "platform": platform.platform()}
    try:
        info["virtualised"] = "hypervisor" in open("/proc/cpuinfo").read()
    except OSError:
        pass
    try:
        info["loadavg_start"] = os.getloadavg()
    except OSError:
        pass
    try:
        import numpy
        info["numpy"] = numpy.__version__
    except ImportError:
        pass
    info["mkpy_threads"] = int(os.environ.get("MKPY_NUM_THREADS", "0") or 0) or os.cpu_count()
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        info["commit"] = out.stdout.strip()
    except OSError:
        pass
    return info


def run_child(script, args, env=None, timeout=600, stdin=None):
    """Runs benchmarks/<script> in a fresh interpreter (stdin: text for its standard
    input); returns its last stdout line parsed as JSON."""
    import json
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    if env:
        full_env.update(env)
    p = subprocess.run([sys.executable, os.path.join(HERE, script)] + list(args), env=full_env,
                       capture_output=True, text=True, timeout=timeout, input=stdin)
    if p.returncode != 0:
        raise RuntimeError("%s %s failed (%d):\n%s" % (script, " ".join(args), p.returncode, p.stderr[-3000:]))
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    return json.loads(lines[-1])


def progress(msg):
    print("  ... " + msg, file=sys.stderr, flush=True)
