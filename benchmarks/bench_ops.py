"""Reference ops against NumPy: element-wise, unary, reductions, softmax,
matmul, and the fixed cost of one op + eval on a tiny array.

mkpy is timed as op + mx.eval(result) on evaluated inputs; NumPy as the op.
Both allocate their result. Run alone: PYTHONPATH=. python3 benchmarks/bench_ops.py
"""
import numpy as np

import mkpy as mx

from common import Target, compare, fmt_time, progress, row, size_label, time_ratio

SECTION = "ops"

# elements -> 2-D shape (per-axis sums and softmax run on the 2-D view)
SIZES = [(1_000, (25, 40)), (100_000, (250, 400)), (4_000_000, (2000, 2000))]
MATMUL_SIZES = [256, 1024, 2048]

BIG = Target(">= 1.0x (no slower than NumPy)", ratio_min=1.0)
MATMUL = Target(">= 0.91x (within 1.1x of NumPy)", ratio_min=1 / 1.1)
TINY = Target(">= 0.5x (within 2x of NumPy's op)", ratio_min=0.5)


def np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# name, mkpy op, numpy op, binary?, rtol for the check
OPS = [
    ("add", lambda a, b: mx.add(a, b), lambda a, b: np.add(a, b), True, 1e-6),
    ("multiply", lambda a, b: mx.multiply(a, b), lambda a, b: np.multiply(a, b), True, 1e-6),
    ("exp", lambda a, b: mx.exp(a), lambda a, b: np.exp(a), False, 1e-6),
    ("tanh", lambda a, b: mx.tanh(a), lambda a, b: np.tanh(a), False, 1e-5),
    ("sum (all)", lambda a, b: mx.sum(a), lambda a, b: np.sum(a), False, 1e-4),
    ("sum axis=0", lambda a, b: mx.sum(a, axis=0), lambda a, b: np.sum(a, axis=0), False, 1e-4),
    ("sum axis=1", lambda a, b: mx.sum(a, axis=1), lambda a, b: np.sum(a, axis=1), False, 1e-4),
    ("softmax axis=-1", lambda a, b: mx.softmax(a, axis=-1), lambda a, b: np_softmax(a), False, 1e-5),
]


def _check(got, want, rtol):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=rtol * scale))


def run(opts):
    rows = []
    rng = np.random.default_rng(0)
    budget = 1.0 if opts.quick else 2.5

    for n, shape in SIZES:
        xn = rng.standard_normal(shape, dtype=np.float32)
        yn = rng.standard_normal(shape, dtype=np.float32)
        xm, ym = mx.array(xn), mx.array(yn)
        mx.eval(xm, ym)
        progress("ops at %s elements" % size_label(n))
        for name, mop, nop, binary, rtol in OPS:
            ok = _check(np.array(mop(xm, ym)), nop(xn, yn), rtol)
            # the rows with targets get more rounds: on a shared machine the best of many is steadier
            best = compare({"mkpy": lambda: mx.eval(mop(xm, ym)), "numpy": lambda: nop(xn, yn)},
                           max_reps=15 if n >= 1_000_000 else 9, budget_s=budget * (2 if n >= 1_000_000 else 1))
            r = time_ratio(best["mkpy"], best["numpy"])
            rows.append(row(SECTION, "%s f32 %s" % (name, size_label(n)), value=best["mkpy"],
                            value_text=fmt_time(best["mkpy"]) if opts.abs_times else "",
                            ref_name="numpy", ref_value=best["numpy"],
                            ref_text=fmt_time(best["numpy"]) if opts.abs_times else "", ratio=r,
                            target=BIG if n >= 1_000_000 else None, check=ok,
                            note="" if ok else "RESULT DIFFERS FROM NUMPY"))

    # matmul: written in parallel by someone else; may be missing
    for n in MATMUL_SIZES:
        name = "matmul f32 %dx%d" % (n, n)
        if not hasattr(mx, "matmul"):
            rows.append(row(SECTION, name, value_text="n/a", ref_name="numpy", ref_text="OpenBLAS",
                            target=MATMUL, note="mx.matmul missing"))
            continue
        progress("matmul %d" % n)
        an = rng.standard_normal((n, n), dtype=np.float32)
        bn = rng.standard_normal((n, n), dtype=np.float32)
        am, bm = mx.array(an), mx.array(bn)
        mx.eval(am, bm)
        try:
            ok = _check(np.array(mx.matmul(am, bm)), an @ bn, 1e-4)
        except Exception as e:  # an unfinished op must not stop the suite
            rows.append(row(SECTION, name, value_text="error", ref_name="numpy", target=MATMUL,
                            note="%s: %s" % (type(e).__name__, str(e)[:60])))
            continue
        best = compare({"mkpy": lambda: mx.eval(mx.matmul(am, bm)), "numpy": lambda: an @ bn},
                       min_reps=2 if n >= 2048 else 3, budget_s=budget * 2)
        flops = 2.0 * n ** 3
        rows.append(row(SECTION, name, value=flops / best["mkpy"] / 1e9,
                        value_text="%.3g GFLOP/s" % (flops / best["mkpy"] / 1e9), ref_name="numpy",
                        ref_value=flops / best["numpy"] / 1e9,
                        ref_text="%.3g GFLOP/s" % (flops / best["numpy"] / 1e9),
                        ratio=time_ratio(best["mkpy"], best["numpy"]), target=MATMUL, check=ok,
                        note="" if ok else "RESULT DIFFERS FROM NUMPY"))

    # a compiled 5-op element-wise chain (fused into one node, "Element-wise
    # fusion in compile" in docs/design.md) against the same chain op by op
    # and NumPy's
    progress("compiled chain")
    cn = 4_000_000
    xn = rng.standard_normal((2000, 2000), dtype=np.float32)
    yn = rng.standard_normal((2000, 2000), dtype=np.float32)
    xm, ym = mx.array(xn), mx.array(yn)
    mx.eval(xm, ym)

    def chain(x, y):
        return mx.tanh(x * y + 1.0) * x - y

    cchain = mx.compile(chain)
    want = np.tanh(xn * yn + np.float32(1.0)) * xn - yn
    ok = _check(np.array(cchain(xm, ym)), want, 1e-5) and bool(mx.array_equal(cchain(xm, ym), chain(xm, ym)))
    best = compare({"compiled": lambda: mx.eval(cchain(xm, ym)), "eager": lambda: mx.eval(chain(xm, ym)),
                    "numpy": lambda: np.tanh(xn * yn + np.float32(1.0)) * xn - yn},
                   max_reps=9, budget_s=budget * 2)
    rows.append(row(SECTION, "compiled 5-op chain f32 %s" % size_label(cn), value=best["compiled"],
                    value_text=fmt_time(best["compiled"]) if opts.abs_times else "",
                    ref_name="numpy", ref_value=best["numpy"],
                    ref_text=fmt_time(best["numpy"]) if opts.abs_times else "",
                    ratio=time_ratio(best["compiled"], best["numpy"]), check=ok,
                    note=("%.2fx the same chain uncompiled" % time_ratio(best["compiled"], best["eager"]))
                    + ("" if ok else "; RESULT DIFFERS"),
                    extra={"eager_s": best["eager"]}))

    # fixed cost: one op + eval on 16 elements
    progress("tiny op")
    an = np.arange(16, dtype=np.float32)
    bn = np.ones(16, dtype=np.float32)
    am, bm = mx.array(an), mx.array(bn)
    mx.eval(am, bm)
    for name, mop, nop in [("add", mx.add, np.add), ("exp", lambda a, b: mx.exp(a), lambda a, b: np.exp(a))]:
        best = compare({"mkpy": lambda: mx.eval(mop(am, bm)), "numpy": lambda: nop(an, bn)},
                       min_reps=5, max_reps=15, budget_s=budget)
        rows.append(row(SECTION, "%s 16 elems + eval" % name, value=best["mkpy"], value_text=fmt_time(best["mkpy"]),
                        ref_name="numpy", ref_value=best["numpy"], ref_text=fmt_time(best["numpy"]),
                        ratio=time_ratio(best["mkpy"], best["numpy"]), target=TINY))
    return rows


if __name__ == "__main__":
    import run_all
    run_all.main(["--only", SECTION])
