"""Every instruction-set level mkpy's built-in kernels dispatch on at run time (baseline x86-64,
AVX2+FMA+F16C, AVX-512), forced on this machine with MKPY_ISA, gives the same results: each level
runs a representative set of ops in a child process and the bits are compared (a NaN by NaN-ness
only: which NaN an op passes on is the compiler's operand order in each version, not MLX's
behaviour). Levels above this CPU's run at the CPU's level, as `python -m mkpy` reports."""
import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 dispatch levels")

CHILD = r"""
import json, sys
import numpy as np
import mkpy as mx

rng = np.random.default_rng(7)
x32 = np.concatenate([rng.standard_normal(3000).astype(np.float32) * 4,
                      np.array([0, -0.0, np.inf, -np.inf, np.nan, 88.7, -104, 1e-40, 3e38], np.float32)])
out = {}
def put(k, a):
    a = np.array(a)
    if a.dtype == np.float16:
        bits = a.view(np.uint16).astype(np.uint64)
    elif a.dtype == np.float32:
        bits = a.view(np.uint32).astype(np.uint64)
    elif a.dtype == np.float64:
        bits = a.view(np.uint64)
    else:
        bits = a.astype(np.int64).view(np.uint64)
    nan = np.isnan(a) if a.dtype.kind == "f" else np.zeros(a.shape, bool)
    out[k] = [bits.ravel().tolist(), nan.ravel().tolist()]

for dt in (mx.float32, mx.float16, mx.bfloat16):
    x = mx.array(x32).astype(dt)
    for op in ("exp", "tanh", "sin", "cos", "erf", "sigmoid", "log1p", "sqrt", "abs", "square", "negative"):
        put("%s_%s" % (op, dt), getattr(mx, op)(x).astype(mx.float32))
    y = mx.array(x32[::-1].copy()).astype(dt)
    for op in ("add", "multiply", "divide", "maximum", "power", "logaddexp"):
        put("%s_%s" % (op, dt), getattr(mx, op)(x, y).astype(mx.float32))
m = mx.array(x32[:3000].reshape(50, 60))
for axis in (0, 1):
    for op in ("sum", "max", "min", "mean", "prod", "logsumexp", "argmax"):
        put("%s_%d" % (op, axis), getattr(mx, op)(m, axis=axis))
    put("softmax_%d" % axis, mx.softmax(m, axis=axis))
    put("sum16_%d" % axis, mx.sum(m.astype(mx.float16), axis=axis))
    put("cumsum_%d" % axis, mx.cumsum(m.astype(mx.float16), axis=axis))
i64 = mx.array(rng.integers(-2**62, 2**62, 500), mx.int64)
put("floor_divide_i64", mx.floor_divide(i64, mx.array(rng.integers(-9, 9, 500), mx.int64)))
put("remainder_i32", mx.remainder(i64.astype(mx.int32), mx.array(rng.integers(-9, 9, 500), mx.int32)))
put("left_shift", mx.left_shift(i64.astype(mx.uint32), mx.array(rng.integers(0, 40, 500), mx.uint32)))
k = mx.random.key(3)
put("uniform", mx.random.uniform(shape=(4000,), key=k))
put("normal", mx.random.normal(shape=(4000,), key=k))
put("normal16", mx.random.normal(shape=(4000,), dtype=mx.float16, key=k))
q = mx.array(rng.standard_normal((1, 4, 33, 64)).astype(np.float32))
kv = mx.array(rng.standard_normal((1, 4, 47, 64)).astype(np.float32))
put("sdpa", mx.fast.scaled_dot_product_attention(q, kv, kv, scale=0.125))
put("sdpa16", mx.fast.scaled_dot_product_attention(q.astype(mx.float16), kv.astype(mx.float16),
                                                   kv.astype(mx.float16), scale=0.125).astype(mx.float32))
put("rope", mx.fast.rope(q, 64, traditional=False, base=10000.0, scale=1.0, offset=3))
put("rms_norm", mx.fast.rms_norm(q, mx.ones((64,)), 1e-5))
put("layer_norm16", mx.fast.layer_norm(q.astype(mx.float16), None, None, 1e-5).astype(mx.float32))
put("to_f16", mx.array(x32 * 1000).astype(mx.float16))
put("matmul", mx.array(x32[:64 * 32].reshape(64, 32)) @ mx.array(x32[:32 * 16].reshape(32, 16)))
print(json.dumps(out))
"""


def run_level(level):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("MKPY_NO_F16C", None)
    if level:
        env["MKPY_ISA"] = level
    p = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    chk = subprocess.run([sys.executable, "-m", "mkpy"], env=env, capture_output=True, text=True, timeout=300)
    line = next(l for l in chk.stdout.splitlines() if "built-in kernels" in l)
    return json.loads(p.stdout.splitlines()[-1]), line


@pytest.fixture(scope="module")
def levels():
    return {lv: run_level(lv) for lv in ("baseline", "avx2", "avx512")}


def test_each_level_is_forced(levels):
    assert "baseline x86-64" in levels["baseline"][1] and "MKPY_ISA=baseline" in levels["baseline"][1]
    with open("/proc/cpuinfo") as f:
        flags = next((l for l in f if l.startswith("flags")), "").split()
    if {"avx2", "fma", "f16c"} <= set(flags):
        assert "x86-64-v3" in levels["avx2"][1]
    if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= set(flags):
        assert "x86-64-v4" in levels["avx512"][1]


def test_every_level_gives_the_same_results(levels):
    base = levels["baseline"][0]
    for lv in ("avx2", "avx512"):
        got = levels[lv][0]
        assert got.keys() == base.keys()
        bad = []
        for k in base:
            (b, bn), (g, gn) = base[k], got[k]
            b, g, bn, gn = np.array(b), np.array(g), np.array(bn), np.array(gn)
            if not (np.array_equal(bn, gn) and np.array_equal(b[~bn], g[~gn])):
                bad.append(k)
        assert not bad, (lv, bad)


def test_an_unknown_level_is_the_cpus():
    env = dict(os.environ, MKPY_ISA="bogus", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", "import mkpy as mx; print(mx.exp(mx.array([1.0])).item())"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip().startswith("2.718"), p.stderr
