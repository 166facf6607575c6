"""Shared by the tests that run graphs on the GPU and on the CPU's evaluators and compare
(test_gpu_ops.py, test_gpu_fast.py): results collected as NumPy, the CPU's computed by the
same module's compute() in a subprocess under MKPY_GPU=cpu, and bit comparison."""
import os
import pickle
import subprocess
import sys

import numpy as np

import mkpy as mx


def collector():
    """(out, put): put(key, fn) evaluates fn() into out[key] as ("ok", NumPy), ("bf16", its
    bits) or ("error", the exception's type name)."""
    out = {}

    def put(key, fn):
        try:
            r = fn()
            mx.eval(r)
        except (ValueError, TypeError, RuntimeError) as e:
            out[key] = ("error", type(e).__name__)
            return
        if r.dtype == mx.bfloat16:
            out[key] = ("bf16", np.array(r.view(mx.uint16)))
        else:
            out[key] = ("ok", np.array(r))

    return out, put


def cpu_results(module):
    """`module`.compute() run under MKPY_GPU=cpu (the CPU's evaluators) in a subprocess."""
    code = ("import pickle, sys; sys.path.insert(0, %r); import %s as t; "
            "sys.stdout.buffer.write(pickle.dumps(t.compute()))" % (os.path.dirname(__file__), module))
    env = dict(os.environ, MKPY_GPU="cpu", MKPY_REQUIRE_GPU="0", MKPY_GPU_OPS_CHILD="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    return pickle.loads(r.stdout)


def same_bits(a, b):
    """Equal shapes, dtypes and bits, any nan equal to any nan."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    # (1-d: NumPy 1.x's np.where promotes a 0-d float32 and a zero to float64)
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    if a.dtype.kind in "fc":
        na, nb = np.isnan(a), np.isnan(b)
        if not np.array_equal(na, nb):
            return False
        view = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        return np.array_equal(np.where(na, 0, a).view(view), np.where(nb, 0, b).view(view))
    return np.array_equal(a, b)


def compared(kind, a):
    """A collector's result as compared: bfloat16 bits as float32 (exact), so that any nan equals
    any nan there too."""
    if kind != "bf16":
        return a
    # (1-d first: a 0-d array shifted is a NumPy scalar, whose dtype cannot change)
    return (np.atleast_1d(a).astype(np.uint32) << 16).view(np.float32).reshape(a.shape)


# tolerance(key, dtype) -> TERMS: a float sum whose terms the GPU adds in another order (a
# reduction's tree, a scatter's atomics). Each rounding of a sum of terms t_i moves it by at most
# eps/2 times a partial sum, and a partial sum is at most S = sum |t_i|, so two orders with k
# roundings each differ by at most k * eps * S: TERMS_FACTOR * eps * S bounds a scatter with up to
# 4 updates per target outright; the reductions' long sums have rounding errors of mixed signs
# that grow far slower than k (the case that failed relative to its result was 0.27 eps S). A
# dropped or doubled term t moves the sum by |t|, beyond the tolerance unless |t| < TERMS_FACTOR *
# eps * S (0.4% of S in float16, 3% in bfloat16; tests/test_gpu_compare.py). The case's S per
# output element is the collector's entry ("terms",) + key: the same op on the terms' magnitudes
# in float32 (the CPU's is used).
TERMS = "terms"
TERMS_FACTOR = 4


def magnitudes(a):
    """The magnitudes of a float sum's terms, in float32: |a|, or for complex terms |re| + |im| i
    (the real and imaginary sums are separate sums, each bounded by its own part's magnitudes, and
    an infinite imaginary part leaves the real sum's bound finite)."""
    if a.dtype == mx.complex64:
        # (interleaved and viewed: 1j * inf would be nan + inf i)
        parts = mx.stack([mx.abs(mx.real(a)), mx.abs(mx.imag(a))], axis=-1)
        return parts.view(mx.complex64).squeeze(-1)
    return mx.abs(a).astype(mx.float32)


def within_terms(g, c, s, eps):
    """Per element: g and c equal where either is not finite (any nan equal to any nan), elsewhere
    |g - c| <= TERMS_FACTOR * eps * s (s finite); complex parts each against their own part of s
    (magnitudes)."""
    if g.dtype.kind == "c":
        s = np.asarray(s)
        return (within_terms(g.real, c.real, s.real, eps) & within_terms(g.imag, c.imag, s.imag, eps))
    wide = np.float64
    g, c, s = g.astype(wide), c.astype(wide), np.asarray(s, np.float64)
    fin = np.isfinite(g) & np.isfinite(c) & np.isfinite(s)
    same = (g == c) | (np.isnan(g) & np.isnan(c))
    with np.errstate(invalid="ignore"):  # (inf - inf where either is not finite: not used)
        return same | (fin & (np.abs(g - c) <= TERMS_FACTOR * eps * s))


def mismatches(gpu, cpu, tolerance):
    """The cases whose GPU and CPU results differ (collector's entries): errors of different types,
    shapes or dtypes, or bits, except within tolerance(key, dtype) where that is not None: TERMS
    (within_terms, eps of the dtype, bfloat16's 2^-7), or a relative tolerance (bfloat16
    compared within 1e-2, float16 within 2e-3). The ("terms", ...) entries are magnitudes, not
    compared."""
    assert gpu.keys() == cpu.keys()
    bad = []
    for key, (gk, g) in gpu.items():
        ck, c = cpu[key]
        if key[0] == TERMS:
            continue
        if gk == "error" or ck == "error":
            if (gk, g) != (ck, c):
                bad.append((key, "error mismatch", g, c))
            continue
        if gk != ck:
            bad.append((key, "kind", gk, ck))
            continue
        g, c = compared(gk, g), compared(ck, c)
        if g.shape != c.shape or g.dtype != c.dtype:
            bad.append((key, "shape/dtype", g.shape, c.shape))
            continue
        if same_bits(g, c):
            continue
        tol = tolerance(key, g.dtype)
        if tol is None:
            bad.append((key, "not bit-exact", g.ravel()[:8], c.ravel()[:8]))
            continue
        if tol == TERMS:
            eps = 2.0 ** -7 if gk == "bf16" else float(np.finfo(g.dtype).eps)
            ok = within_terms(g, c, cpu[(TERMS,) + key][1], eps)
            if not ok.all():
                i = np.flatnonzero(~ok.ravel())[:5]
                bad.append((key, "beyond tolerance", i, g.ravel()[i], c.ravel()[i],
                            np.ravel(cpu[(TERMS,) + key][1])[i]))
            continue
        if gk == "bf16":
            tol = 1e-2
        elif g.dtype == np.float16:
            tol = 2e-3
        try:
            np.testing.assert_allclose(g, c, rtol=tol, atol=1e-6, equal_nan=True)
        except AssertionError as e:
            bad.append((key, "beyond tolerance", str(e)[:300]))
    return bad
