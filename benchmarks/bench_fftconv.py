"""mx.fft against numpy.fft, convolutions against a NumPy reference
(sliding_window_view + tensordot, NumPy's fastest plain formulation), and
mkpy's convolution evaluators against each other (the rule in core/ops_conv.c
picks between direct and gemm, docs/design.md "FFT and convolutions"; the
default GPU stream takes Winograd where MLX's Metal back-end does, and the
note gives its time over the CPU stream's, docs/design.md "mlxleaks").

mkpy is timed as op + mx.eval(result) on evaluated inputs. When MLX is
importable (a CPU build in the environment) it is timed too, as a third
contender. Run alone: PYTHONPATH=. python3 benchmarks/bench_fftconv.py
"""
import os

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

import mkpy as mx

from common import Target, compare, fmt_time, progress, row, time_ratio

SECTION = "fftconv"
PARITY = Target(">= 0.5x (within 2x of NumPy)", ratio_min=0.5)

try:  # optional third contender
    import mlx.core as mlx  # noqa: F401
    if mlx is mx:
        mlx = None
except Exception:  # pragma: no cover - depends on the environment
    mlx = None

FFT_CASES = [
    ("fft c64 (64, 1024)", lambda m: m.fft.fft, np.fft.fft, (64, 1024), True),
    ("fft c64 (16, 1000)", lambda m: m.fft.fft, np.fft.fft, (16, 1000), True),
    ("rfft f32 (64, 4096)", lambda m: m.fft.rfft, np.fft.rfft, (64, 4096), False),
    ("fft2 c64 (8, 256, 256)", lambda m: m.fft.fft2, np.fft.fft2, (8, 256, 256), True),
    ("irfft c64 (64, 2049)", lambda m: m.fft.irfft, np.fft.irfft, (64, 2049), True),
]

# (name, input shape, weight shape, stride, padding, groups)
CONV_CASES = [
    ("conv1d (8,512,64) k3 64->64", (8, 512, 64), (64, 3, 64), 1, 1, 1),
    ("conv1d depthwise (8,512,64) k7 g64", (8, 512, 64), (64, 7, 1), 1, 3, 64),
    ("conv2d (4,56,56,64) 3x3 64->64", (4, 56, 56, 64), (64, 3, 3, 64), 1, 1, 1),
    ("conv2d (8,32,32,3) 3x3 3->16", (8, 32, 32, 3), (16, 3, 3, 3), 1, 1, 1),
    ("conv2d (4,28,28,128) 1x1 128->256", (4, 28, 28, 128), (256, 1, 1, 128), 1, 0, 1),
    ("conv2d (2,64,64,32) 3x3 s2 32->32", (2, 64, 64, 32), (32, 3, 3, 32), 2, 1, 1),
    ("conv2d depthwise (4,56,56,32) 3x3 g32", (4, 56, 56, 32), (32, 3, 3, 1), 1, 1, 32),
    ("conv2d (4,28,28,8) 3x3 8->8", (4, 28, 28, 8), (8, 3, 3, 8), 1, 1, 1),
    # MLX Metal's Winograd conditions: mkpy's default (GPU) stream takes Winograd here
    ("conv2d (4,56,56,128) 3x3 128->128", (4, 56, 56, 128), (128, 3, 3, 128), 1, 1, 1),
]


def np_conv(x, w, stride, pad, groups):
    nd = x.ndim - 2
    x = np.pad(x, [(0, 0)] + [(pad, pad)] * nd + [(0, 0)])
    K = w.shape[1:-1]
    win = sliding_window_view(x, K, axis=tuple(range(1, nd + 1)))  # (N, S'..., C, K...)
    win = win[(slice(None),) + (slice(None, None, stride),) * nd]
    Cg, Og = x.shape[-1] // groups, w.shape[0] // groups
    outs = []
    for g in range(groups):
        wg = np.moveaxis(w[g * Og:(g + 1) * Og], -1, 1)  # (Og, Cg, K...)
        outs.append(np.tensordot(win[..., g * Cg:(g + 1) * Cg, :, :] if nd == 2 else win[..., g * Cg:(g + 1) * Cg, :],
                                 wg, axes=(list(range(nd + 1, 2 * nd + 2)), list(range(1, nd + 2)))))
    return np.concatenate(outs, axis=-1) if groups > 1 else outs[0]


def _conv(m, x, w, stride, pad, groups, stream=None):
    if x.ndim == 3:
        return m.conv1d(x, w, stride, pad, 1, groups, stream=stream)
    return m.conv2d(x, w, stride, pad, 1, groups, stream=stream)


def _with_algo(algo, fn):
    def run():
        old = os.environ.get("MKPY_CONV_ALGO")
        os.environ["MKPY_CONV_ALGO"] = algo
        try:
            fn()
        finally:
            if old is None:
                del os.environ["MKPY_CONV_ALGO"]
            else:
                os.environ["MKPY_CONV_ALGO"] = old
    return run


def run(opts):
    rows = []
    rng = np.random.default_rng(0)
    budget = 1.0 if opts.quick else 2.0
    for name, mop, nop, shape, cplx in FFT_CASES:
        progress(name)
        xn = rng.standard_normal(shape).astype(np.float32)
        if cplx:
            xn = (xn + 1j * rng.standard_normal(shape)).astype(np.complex64)
        xm = mx.array(xn)
        mx.eval(xm)
        got, want = np.array(mop(mx)(xm)), nop(xn)
        ok = got.shape == want.shape and np.allclose(got, want, atol=1e-3 * np.abs(want).max())
        c = {"mkpy": lambda: mx.eval(mop(mx)(xm)), "numpy": lambda: nop(xn)}
        if mlx is not None:
            xl = mlx.array(xn)
            c["mlx"] = lambda: mlx.eval(mop(mlx)(xl))
        best = compare(c, budget_s=budget)
        note = "" if ok else "RESULT DIFFERS FROM NUMPY"
        if "mlx" in best:
            note = (note + " " if note else "") + "mlx-cpu/mkpy %.2fx" % (best["mlx"] / best["mkpy"])
        rows.append(row(SECTION, name, value=best["mkpy"], value_text=fmt_time(best["mkpy"]) if opts.abs_times else "",
                        ref_name="numpy", ref_value=best["numpy"],
                        ref_text=fmt_time(best["numpy"]) if opts.abs_times else "",
                        ratio=time_ratio(best["mkpy"], best["numpy"]), target=PARITY, check=ok, note=note))
    for name, xs, ws, stride, pad, groups in CONV_CASES:
        progress(name)
        xn = rng.standard_normal(xs).astype(np.float32)
        wn = rng.standard_normal(ws).astype(np.float32)
        xm, wm = mx.array(xn), mx.array(wn)
        mx.eval(xm, wm)
        want = np_conv(xn, wn, stride, pad, groups)
        got = np.array(_conv(mx, xm, wm, stride, pad, groups))
        ok = got.shape == want.shape and np.allclose(got, want, atol=1e-3 * max(1.0, np.abs(want).max()))
        c = {"mkpy": lambda: mx.eval(_conv(mx, xm, wm, stride, pad, groups)),
             "numpy": lambda: np_conv(xn, wn, stride, pad, groups),
             "direct": _with_algo("direct", lambda: mx.eval(_conv(mx, xm, wm, stride, pad, groups))),
             "gemm": _with_algo("gemm", lambda: mx.eval(_conv(mx, xm, wm, stride, pad, groups))),
             "cpu": lambda: mx.eval(_conv(mx, xm, wm, stride, pad, groups, mx.cpu))}
        if mlx is not None:
            xl, wl = mlx.array(xn), mlx.array(wn)
            c["mlx"] = lambda: mlx.eval(_conv(mlx, xl, wl, stride, pad, groups))
        best = compare(c, budget_s=budget * 2)
        note = "gemm/direct time %.2f; gpu/cpu stream %.2f" % (best["gemm"] / best["direct"], best["mkpy"] / best["cpu"])
        if not ok:
            note = "RESULT DIFFERS FROM NUMPY; " + note
        if "mlx" in best:
            note += "; mlx-cpu/mkpy %.2fx" % (best["mlx"] / best["mkpy"])
        rows.append(row(SECTION, name, value=best["mkpy"], value_text=fmt_time(best["mkpy"]) if opts.abs_times else "",
                        ref_name="numpy", ref_value=best["numpy"],
                        ref_text=fmt_time(best["numpy"]) if opts.abs_times else "",
                        ratio=time_ratio(best["mkpy"], best["numpy"]), target=PARITY, check=ok, note=note))
    return rows


if __name__ == "__main__":
    import run_all
    run_all.main(["--only", SECTION])
