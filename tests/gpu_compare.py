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


def mismatches(gpu, cpu, tolerance):
    """The cases whose GPU and CPU results differ (collector's entries): errors of different types,
    shapes or dtypes, or bits, except within tolerance(key, dtype) where that is not None (bfloat16
    compared as float32 within 1e-2, float16 within 2e-3)."""
    assert gpu.keys() == cpu.keys()
    bad = []
    for key, (gk, g) in gpu.items():
        ck, c = cpu[key]
        if gk == "error" or ck == "error":
            if (gk, g) != (ck, c):
                bad.append((key, "error mismatch", g, c))
            continue
        if gk == "bf16":
            # as float32 (exact), so that any nan equals any nan here too
            g = (g.astype(np.uint32) << 16).view(np.float32)
            c = (c.astype(np.uint32) << 16).view(np.float32)
            if same_bits(g, c):
                continue
            tol = tolerance(key, np.dtype(np.float32))
            tol = tol and 1e-2
        else:
            if g.shape != c.shape or g.dtype != c.dtype:
                bad.append((key, "shape/dtype", g.shape, c.shape))
                continue
            if same_bits(g, c):
                continue
            tol = tolerance(key, g.dtype)
            if tol and g.dtype == np.float16:
                tol = 2e-3
        if tol is None:
            bad.append((key, "not bit-exact", g.ravel()[:8], c.ravel()[:8]))
            continue
        try:
            np.testing.assert_allclose(g, c, rtol=tol, atol=1e-6, equal_nan=True)
        except AssertionError as e:
            bad.append((key, "beyond tolerance", str(e)[:300]))
    return bad
