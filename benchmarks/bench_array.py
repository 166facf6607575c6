"""The array path against NumPy and MLX's CPU build side by side (issue #15):
conversion from NumPy, sort, argmax, half types (element-wise and
reductions), accumulating scatter, transpose + copy, small ops.

Each row times mkpy, NumPy and, when `mlx.core` is importable, MLX (CPU
device) in the same rounds; the ratio is against the faster peer (above 1
mkpy wins), the note gives both. Calls of about a microsecond (SMALL) are
timed with each library in processes of its own, the memory row too. MLX is
found by `import mlx.core`, else in the venv named by MKPY_BENCH_MLX_VENV,
which `make bench` makes (scripts/install-bench-mlx.sh):
    make bench BENCH_ARGS="--only array"
Run alone: MKPY_BENCH_MLX_VENV=... PYTHONPATH=. python3 benchmarks/bench_array.py
"""
import os

import numpy as np

import mkpy as mx

from child import import_lib
from common import Target, compare, compare_in_children, fmt_ratio, fmt_time, progress, row, run_child, time_ratio

SECTION = "array"
BEST = Target(">= 1.0x (no slower than the best peer)", ratio_min=1.0)

# The calls of about a microsecond. Timed with each library in processes of its own
# (common.compare_in_children): in one process, MLX's worker threads and allocator moved
# mkpy's and NumPy's sub-microsecond times by up to 4x between runs (docs/performance.md).
# (name, setup making NumPy data from np and rng, then mkpy's or MLX's arrays of it as mx,
#  the expression mkpy and MLX evaluate, NumPy's expression)
_T = "t = rng.standard_normal((25, 40)).astype(np.float32)"
SMALL = [
    ("array(numpy f32) 1e3 + eval", "a = rng.standard_normal(1000).astype(np.float32)", "",
     "mx.array(a)", "a.copy()"),
    ("transpose + copy 1e3", _T, "tm = mx.array(t)", "mx.contiguous(mx.transpose(tm))", "np.ascontiguousarray(t.T)"),
    ("multiply 1e3", _T, "tm = mx.array(t)", "mx.multiply(tm, tm)", "np.multiply(t, t)"),
    ("multiply 16 + eval", "s = np.arange(16, dtype=np.float32)", "sm = mx.array(s)", "mx.multiply(sm, sm)",
     "np.multiply(s, s)"),
]


def load_mlx():
    """MLX's CPU build if importable here or in MKPY_BENCH_MLX_VENV (child.import_lib), else None."""
    try:
        mlx = import_lib("mlx")
    except ImportError:
        return None
    progress("array: MLX %s (CPU) as a peer" % getattr(mlx, "__version__", "?"))
    return mlx


def _same(got, want):
    got, want = np.asarray(got), np.asarray(want)
    return got.shape == want.shape and bool(np.array_equal(got.astype(np.float64), want.astype(np.float64),
                                                      equal_nan=True))


def run(opts):
    mlx = load_mlx()
    rows = []
    rng = np.random.default_rng(0)
    budget = 1.0 if opts.quick else 2.0

    def case(name, fns, check=None):
        """fns: {'mkpy': f, 'numpy': g, 'mlx': h or None}"""
        progress("array: " + name)
        fns = {k: v for k, v in fns.items() if v is not None}
        # MLX leaves worker threads running for a while after a call: without a
        # pause, whichever contender is timed next pays for them (mostly mkpy,
        # which follows MLX in two rounds of three)
        best = compare(fns, budget_s=budget, max_reps=9, settle_s=0.01)
        add_row(name, best, check)

    def add_row(name, best, check):
        peers = {k: v for k, v in best.items() if k != "mkpy"}
        ref = min(peers, key=peers.get)
        note = ", ".join("%s %s" % (k, fmt_ratio(time_ratio(best["mkpy"], v))) for k, v in sorted(peers.items()))
        if "mlx" not in peers:
            note += " (mlx not installed)"
        rows.append(row(SECTION, name, value=best["mkpy"], value_text=fmt_time(best["mkpy"]) if opts.abs_times else "",
                        ref_name=ref, ref_value=peers[ref], ref_text=fmt_time(peers[ref]) if opts.abs_times else "",
                        ratio=time_ratio(best["mkpy"], peers[ref]), target=BEST, check=check,
                        note=note if check is not False else "RESULT DIFFERS; " + note))

    M = (lambda f: f) if mlx is not None else (lambda f: None)

    def small_case(name, np_setup, mx_setup, expr, np_expr):
        """A row timed by compare_in_children (see SMALL). The result check runs here, on
        mkpy, against NumPy."""
        progress("array: " + name)
        specs = {"mkpy": {"setup": np_setup + "\n" + mx_setup, "stmt": "mx.eval(%s)" % expr},
                 "numpy": {"setup": np_setup, "stmt": np_expr}}
        if mlx is not None:
            specs["mlx"] = specs["mkpy"]
        best = compare_in_children(specs, rounds=2 if opts.quick else 3)
        g = {"np": np, "rng": np.random.default_rng(0), "mx": mx}
        exec(np_setup + "\n" + mx_setup, g)
        add_row(name, best, check=_same(eval(expr, g), eval(np_expr, g)))

    # conversion from NumPy (+ eval)
    for n in (4_000_000,):
        a = rng.standard_normal(n).astype(np.float32)
        case("array(numpy f32) 4e6 + eval", {
            "mkpy": lambda: mx.eval(mx.array(a)), "numpy": lambda: a.copy(),
            "mlx": M(lambda: mlx.eval(mlx.array(a)))}, check=_same(mx.array(a), a))
    a2 = rng.standard_normal((2000, 2000)).astype(np.float32)[:, ::2]
    case("array(numpy f32 strided) 2e6 + eval", {
        "mkpy": lambda: mx.eval(mx.array(a2)), "numpy": lambda: np.ascontiguousarray(a2),
        "mlx": M(lambda: mlx.eval(mlx.array(a2)))}, check=_same(mx.array(a2), a2))

    # sort
    x = rng.standard_normal(1_000_000).astype(np.float32)
    xm = mx.array(x)
    xl = mlx.array(x) if mlx else None
    case("sort 1M f32", {"mkpy": lambda: mx.eval(mx.sort(xm)), "numpy": lambda: np.sort(x),
                         "mlx": M(lambda: mlx.eval(mlx.sort(xl)))}, check=_same(mx.sort(xm), np.sort(x)))
    case("argsort 1M f32", {"mkpy": lambda: mx.eval(mx.argsort(xm)), "numpy": lambda: np.argsort(x),
                            "mlx": M(lambda: mlx.eval(mlx.argsort(xl)))},
         check=_same(mx.argsort(xm), np.argsort(x, kind="stable")))
    r = rng.standard_normal((1024, 1024)).astype(np.float32)
    rm = mx.array(r)
    rl = mlx.array(r) if mlx else None
    case("sort 1024x1024 by rows", {"mkpy": lambda: mx.eval(mx.sort(rm, axis=1)), "numpy": lambda: np.sort(r, axis=1),
                                    "mlx": M(lambda: mlx.eval(mlx.sort(rl, axis=1)))},
         check=_same(mx.sort(rm, axis=1), np.sort(r, axis=1)))

    # argmax
    big = rng.standard_normal(4_000_000).astype(np.float32)
    bm = mx.array(big)
    bl = mlx.array(big) if mlx else None
    case("argmax 4M f32", {"mkpy": lambda: mx.eval(mx.argmax(bm)), "numpy": lambda: np.argmax(big),
                           "mlx": M(lambda: mlx.eval(mlx.argmax(bl)))}, check=bool(int(mx.argmax(bm)) == np.argmax(big)))
    sq = big.reshape(2000, 2000)
    sm = mx.array(sq)
    sl = mlx.array(sq) if mlx else None
    case("argmax 2000x2000 axis=1", {"mkpy": lambda: mx.eval(mx.argmax(sm, axis=1)),
                                     "numpy": lambda: np.argmax(sq, axis=1),
                                     "mlx": M(lambda: mlx.eval(mlx.argmax(sl, axis=1)))},
         check=_same(mx.argmax(sm, axis=1), np.argmax(sq, axis=1)))

    # half types
    h = rng.standard_normal(4_000_000).astype(np.float16)
    h2 = rng.standard_normal(4_000_000).astype(np.float16)
    hm, hm2 = mx.array(h), mx.array(h2)
    hl, hl2 = (mlx.array(h), mlx.array(h2)) if mlx else (None, None)
    case("exp f16 4e6", {"mkpy": lambda: mx.eval(mx.exp(hm)), "numpy": lambda: np.exp(h),
                         "mlx": M(lambda: mlx.eval(mlx.exp(hl)))})
    for nm, mf, nf, lf in (("add", mx.add, np.add, mlx.add if mlx else None),
                           ("multiply", mx.multiply, np.multiply, mlx.multiply if mlx else None)):
        case("%s f16 4e6" % nm, {"mkpy": lambda: mx.eval(mf(hm, hm2)), "numpy": lambda: nf(h, h2),
                                 "mlx": M(lambda: mlx.eval(lf(hl, hl2)))}, check=_same(mf(hm, hm2), nf(h, h2)))
    # float16 reductions (F16C widening into the float32 kernels)
    for nm in ("sum", "mean", "max"):
        case("%s f16 4e6" % nm, {"mkpy": lambda: mx.eval(getattr(mx, nm)(hm)),
                                 "numpy": lambda: getattr(np, nm)(h),
                                 "mlx": M(lambda: mlx.eval(getattr(mlx, nm)(hl)))},
             check=bool(np.isclose(float(getattr(mx, nm)(hm).item()), float(getattr(np, nm)(h.astype(np.float64))),
                                   rtol=2e-3, atol=0.5)))
    b16 = mx.array(h).astype(mx.bfloat16)
    b16b = mx.array(h2).astype(mx.bfloat16)
    bl16 = (mlx.array(h).astype(mlx.bfloat16), mlx.array(h2).astype(mlx.bfloat16)) if mlx else None
    case("add bf16 4e6", {"mkpy": lambda: mx.eval(mx.add(b16, b16b)),
                          "mlx": M(lambda: mlx.eval(mlx.add(*bl16))),
                          "numpy": lambda: np.add(h, h2)})
    # reductions over a leading axis (column mode: F16C / shift widening into the float32
    # column kernels); NumPy has no bfloat16, so its column is its float16 sum
    hs = h.reshape(2000, 2000)
    hsm = mx.array(hs)
    hsl = mlx.array(hs) if mlx else None
    case("sum f16 axis=0 2000x2000", {"mkpy": lambda: mx.eval(mx.sum(hsm, axis=0)),
                                      "numpy": lambda: np.sum(hs, axis=0),
                                      "mlx": M(lambda: mlx.eval(mlx.sum(hsl, axis=0)))},
         check=bool(np.allclose(np.array(mx.sum(hsm, axis=0)).astype(np.float64), hs.astype(np.float64).sum(axis=0),
                                rtol=2e-3, atol=0.5)))
    bs = mx.array(hs).astype(mx.bfloat16)
    mx.eval(bs)
    bsl = mlx.array(hs).astype(mlx.bfloat16) if mlx else None
    case("sum bf16 axis=0 2000x2000", {"mkpy": lambda: mx.eval(mx.sum(bs, axis=0)),
                                       "mlx": M(lambda: mlx.eval(mlx.sum(bsl, axis=0))),
                                       "numpy": lambda: np.sum(hs, axis=0)},
         check=bool(np.allclose(np.array(mx.sum(bs, axis=0).astype(mx.float32)),
                                np.array(bs.astype(mx.float32)).astype(np.float64).sum(axis=0), rtol=1e-2, atol=0.5)))

    # accumulating scatter: 16M updates into 256 bins (4M with --quick)
    n = 16_000_000 if not opts.quick else 4_000_000
    idx = rng.integers(0, 256, n).astype(np.int32)
    upd = rng.standard_normal(n).astype(np.float32)
    z = np.zeros(256, np.float32)
    im, um, zm = mx.array(idx), mx.array(upd), mx.array(z)
    il, ul, zl = (mlx.array(idx), mlx.array(upd), mlx.array(z)) if mlx else (None, None, None)
    want = z.copy()
    np.add.at(want, idx, upd)
    # NumPy's fastest way to this sum is np.bincount with weights (np.add.at is 10-20x slower);
    # its float64 sums differ from the float32 ones in the last bits, so the check is np.add.at's
    case("x.at[idx].add(v) 16M into 256" if not opts.quick else "x.at[idx].add(v) 4M into 256", {
        "mkpy": lambda: mx.eval(zm.at[im].add(um)), "numpy": lambda: np.bincount(idx, weights=upd, minlength=256),
        "mlx": M(lambda: mlx.eval(zl.at[il].add(ul)))}, check=_same(zm.at[im].add(um), want))

    # calls of about a microsecond: each library timed in processes of its own (below)
    for spec in SMALL:
        small_case(*spec)

    # peak memory of a 100-op element-wise chain on 64 MB (16M float32), each library in
    # fresh processes (child.py; the worst of a few heap layouts), as a multiple of the array
    progress("array: 100-op chain peak memory")
    libs = ["mkpy", "numpy"] + (["mlx"] if mlx is not None else [])
    env = {"MKPY_BENCH_CHAIN_N": str(16_000_000)}
    peak = {}
    for lib in libs:
        runs = [run_child("child.py", ["chain-" + lib, str(v)], env=env) for v in range(2 if opts.quick else 3)]
        peak[lib] = max(r["extra_kib"] / r["array_kib"] for r in runs)
    # compared at the figure's resolution, 1% of the array: between runs of one library the
    # extra peak moves by up to 0.4% of the array (page-sized heap noise), more than mkpy
    # and MLX, which both hold one extra array at the peak, differ by
    peak = {k: round(v, 2) for k, v in peak.items()}
    peers = {k: v for k, v in peak.items() if k != "mkpy"}
    ref = min(peers, key=peers.get)
    note = ", ".join("%s %.2fx array" % (k, v) for k, v in sorted(peak.items()))
    if "mlx" not in peers:
        note += " (mlx not installed)"
    rows.append(row(SECTION, "100-op chain peak memory 64 MB", value=peak["mkpy"],
                    value_text="%.2fx array" % peak["mkpy"], ref_name=ref, ref_value=peers[ref],
                    ref_text="%.2fx array" % peers[ref],
                    ratio=peers[ref] / peak["mkpy"] if peak["mkpy"] > 0 else None, target=BEST, note=note))
    return rows


if __name__ == "__main__":
    import run_all
    run_all.main(["--only", SECTION])
