"""The checker mode (mx.metal.check, issue #12) against a normal run of the same
kernel, in the same run; the issue's target is <= 30x.

  element-wise   the exp kernel (plain path: no barriers) over 256K floats, threadgroups of 256
  reduction      a work-group tree reduction (threadgroup memory, log2(256) barriers) over 1M
                 floats, 256 groups of 256 threads

Both are timed as kernel call + mx.eval, wall clock, best of interleaved samples
(common.compare), on the pool's threads. The note adds the ratio of CPU time
(time.process_time per call, best of 7 alternated calls): on a loaded machine
a checked call of several milliseconds is preempted more often than a normal
call that fits in one time slice, so the wall-clock ratio reads high there.
Run alone: PYTHONPATH=. python3 benchmarks/bench_checker.py
"""
import time

import numpy as np

import mkpy as mx

from bench_kernels import EXP_SRC, REDUCE_SRC  # the same kernels as the kernels section
from common import Target, compare, fmt_time, progress, row, time_ratio

SECTION = "checker"

CHECKED_VS_NORMAL = Target("checked <= 30x a normal run", ratio_min=1 / 30)


def _cpu_best(fns, reps=7):
    best = {n: float("inf") for n in fns}
    for _ in range(reps):
        for n, f in fns.items():
            t = time.process_time()
            f()
            best[n] = min(best[n], time.process_time() - t)
    return best


def run(opts):
    rows = []
    rng = np.random.default_rng(3)
    budget = 2.0 if opts.quick else 4.0
    k_exp = mx.fast.metal_kernel(name="bench_checker_exp", input_names=["inp"], output_names=["out"],
                                 source=EXP_SRC)
    k_red = mx.fast.metal_kernel(name="bench_checker_reduce", input_names=["inp", "n"], output_names=["partial"],
                                 source=REDUCE_SRC)
    for label, n in (("element-wise exp 256K (plain)", 1 << 18), ("tree reduction 1M, 256 groups (barriers)", 1 << 20)):
        progress("checker mode: %s" % label)
        xm = mx.array(rng.standard_normal(n, dtype=np.float32))
        mx.eval(xm)

        def launcher(checked, n=n, label=label):
            def go():
                with mx.metal.check(checked):
                    if label.startswith("element"):
                        o, = k_exp(inputs=[xm], grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(n,)],
                                   output_dtypes=[mx.float32])
                    else:
                        o, = k_red(inputs=[xm, n], grid=(256 * 256, 1, 1), threadgroup=(256, 1, 1),
                                   output_shapes=[(256,)], output_dtypes=[mx.float32])
                mx.eval(o)
                return o
            return go
        checked, normal = launcher(True), launcher(False)
        a, b = np.array(checked(), np.float64), np.array(normal(), np.float64)
        ok = bool(np.allclose(a, b, rtol=1e-5))
        best = compare({"checked": checked, "normal": normal}, budget_s=budget)
        cpu = _cpu_best({"checked": checked, "normal": normal})
        cpu_ratio = cpu["checked"] / cpu["normal"] if cpu["normal"] > 0 else float("nan")
        note = "CPU time: %s vs %s (%.1fx)" % (fmt_time(cpu["checked"]), fmt_time(cpu["normal"]), cpu_ratio)
        rows.append(row(SECTION, label, value=best["checked"], value_text=fmt_time(best["checked"]),
                        ref_name="normal run", ref_value=best["normal"], ref_text=fmt_time(best["normal"]),
                        ratio=time_ratio(best["checked"], best["normal"]), target=CHECKED_VS_NORMAL, check=ok,
                        note=note if ok else "RESULT CHECK FAILED; " + note))
        del xm
    return rows


if __name__ == "__main__":
    import argparse

    from run_all import print_table
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    print_table(run(ap.parse_args()))
