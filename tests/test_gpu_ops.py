"""GPU op evaluators (csrc/backend/cuda/ops_ew.c, ops_red.c) against the CPU's.

The same graphs run here on the GPU stream and in a subprocess under
MKPY_GPU=cpu (the CPU's evaluators); results must be equal bit for bit
(nans compared as nans), except the ops docs/design.md ("GPU op evaluators")
lists as CUDA's libm against glibc's, compared within a few ulp, float sums,
within eps times the sum of their terms' magnitudes (gpu_compare.TERMS), and
float products, within their dtype's tolerance. Skipped without a GPU
unless MKPY_REQUIRE_GPU=1.
"""
import os

import numpy as np
import pytest

import mkpy as mx
from gpu_compare import TERMS, collector, cpu_results, magnitudes, mismatches

if not mx.cuda.is_available() and not os.environ.get("MKPY_GPU_OPS_CHILD"):
    if os.environ.get("MKPY_REQUIRE_GPU") == "1":
        raise RuntimeError("MKPY_REQUIRE_GPU=1 but mx.cuda.is_available() is False")
    pytest.skip("no NVIDIA GPU (mx.cuda.is_available() is False)", allow_module_level=True)

DTYPES = ["bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "bfloat16", "float32", "complex64"]
UNARY = ["abs", "negative", "sign", "square", "sqrt", "rsqrt", "reciprocal", "exp", "expm1", "log", "log1p",
         "log2", "log10", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh",
         "arccosh", "arctanh", "sigmoid", "erf", "erfinv", "floor", "ceil", "isnan", "isinf", "isfinite",
         "isposinf", "isneginf", "logical_not", "bitwise_invert", "real", "imag", "conjugate", "degrees",
         "radians", "stop_gradient", "round"]
BINARY = ["add", "subtract", "multiply", "divide", "floor_divide", "remainder", "power", "arctan2", "maximum",
          "minimum", "equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "logical_and",
          "logical_or", "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "logaddexp"]
# CUDA's libm against glibc's (within a few ulp), and complex results from
# glibc's complex functions
APPROX_UNARY = {"expm1", "log", "log1p", "log2", "log10", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh",
                "arcsinh", "arccosh", "arctanh", "erfinv", "sin", "cos"}
APPROX_BINARY = {"power", "arctan2", "logaddexp"}
REDUCE = ["sum", "prod", "max", "min", "all", "any"]
INEXACT = ("float16", "bfloat16", "float32", "complex64")


def _values(dtype, n, seed):
    """n values of a dtype with its special cases first."""
    rng = np.random.default_rng(seed)
    if dtype == "bool_":
        return rng.integers(0, 2, n).astype(bool)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        special = [0, 1, -1, 2, 3, 7, 8, 63, 64, info.min, info.max, info.min + 1, info.max - 1]
        v = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        small = rng.integers(max(info.min, -9), 10, n).astype(dtype)
        v[n // 2:] = small[n // 2:]  # small divisors and shift counts
        sp = np.array([s for s in special if info.min <= s <= info.max], dtype=dtype)[:n]
        v[:len(sp)] = sp
        return v
    special = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, np.inf, -np.inf, np.nan, 1e-30, 70000.0, -3e9, 1e20,
               0.999, -0.999, 88.5, -88.5, 300.7, -129.5]
    special = special[:n]
    v = rng.standard_normal(n).astype(np.float32) * 4
    v[: len(special)] = special
    if dtype == "complex64":
        w = rng.standard_normal(n).astype(np.float32)
        w[: len(special)] = special[::-1]
        out = np.empty(n, np.complex64)
        out.real, out.imag = v, w
        return out
    return v


def _arr(dtype, shape, seed):
    n = int(np.prod(shape))
    v = _values(dtype, n, seed).reshape(shape)
    a = mx.array(v)
    return a.astype(getattr(mx, dtype)) if dtype in ("bfloat16", "float16") else a


def compute():
    """Every case's result as NumPy (bfloat16 as its bits), keyed by name."""
    out, put = collector()

    for dt in DTYPES:
        x = _arr(dt, (5, 37), 1)
        y = _arr(dt, (37,), 2)  # broadcast
        xt = _arr(dt, (37, 5), 3).T  # strided
        for op in UNARY:
            f = getattr(mx, op)
            put(("unary", op, dt), lambda: f(x))
            put(("unary-strided", op, dt), lambda: f(xt))
        for op in BINARY:
            f = getattr(mx, op)
            put(("binary", op, dt), lambda: f(x, y))
            put(("binary-strided", op, dt), lambda: f(xt, x))
        for dt2 in DTYPES:
            src = xt
            if dt in ("float16", "bfloat16", "float32", "complex64") and dt2 not in ("float16", "bfloat16", "float32",
                                                                                     "complex64", "bool_"):
                # C leaves out-of-range float-to-integer conversions undefined, and the CPU's vector
                # and scalar loops differ there: compare in-range values (nan, inf, 1e20 become 0)
                src = mx.where(mx.abs(xt) < 2e9, xt, mx.zeros_like(xt))
            put(("astype", dt, dt2), lambda: src.astype(getattr(mx, dt2)))
        c = _arr("bool_", (5, 1), 4)
        put(("where", dt), lambda: mx.where(c, x, y))
        put(("reshape-copy", dt), lambda: mx.reshape(xt, (37, 5)))
        put(("transpose-copy", dt), lambda: mx.reshape(mx.transpose(_arr(dt, (4, 6, 5), 5), (2, 0, 1)), (-1,)))
        z = _arr(dt, (6, 50, 70), 6)
        za = magnitudes(z)  # float sums: their terms' magnitudes (gpu_compare.TERMS)
        for op in REDUCE:
            f = getattr(mx, op)
            # complex products that overflow: which of the parts become nan depends on the order of
            # the multiplications (inf * 0 terms of the complex product): at most 54 values per output
            zr = z[:, :3, :3] if op == "prod" and dt.startswith("complex") else z
            for axes in [None, 0, 1, 2, (0, 2), (1, 2)]:
                put(("reduce", op, dt, axes), lambda: f(zr, axis=axes))
                if op == "sum" and dt in INEXACT:
                    put((TERMS, "reduce", op, dt, axes), lambda: mx.sum(za, axis=axes))
            # a product of 300 values of magnitude ~4 overflows, and whether inf meets a 0 depends on
            # the order of the multiplications (NaN on one side, 0 on the other): 18 values per output
            zs = z[:, :3, :] if op == "prod" else z
            put(("reduce-strided", op, dt), lambda: f(mx.transpose(zs, (2, 0, 1)), axis=(1, 2), keepdims=True))
            if op == "sum" and dt in INEXACT:
                put((TERMS, "reduce-strided", op, dt),
                    lambda: mx.sum(mx.transpose(za, (2, 0, 1)), axis=(1, 2), keepdims=True))
    big = mx.array(np.random.default_rng(7).standard_normal(1 << 22).astype(np.float32))
    for op in REDUCE:
        put(("reduce-big", op), lambda: getattr(mx, op)(big))
        put(("reduce-big-cols", op), lambda: getattr(mx, op)(big.reshape(1024, 4096), axis=0))
    put((TERMS, "reduce-big", "sum"), lambda: mx.sum(mx.abs(big)))
    put((TERMS, "reduce-big-cols", "sum"), lambda: mx.sum(mx.abs(big).reshape(1024, 4096), axis=0))
    ib = mx.array(np.random.default_rng(8).integers(-1000, 1000, 1 << 21).astype(np.int32))
    put(("reduce-big-int",), lambda: mx.sum(ib))
    return out


@pytest.fixture(scope="module")
def both():
    return compute(), cpu_results("test_gpu_ops")


def _tolerance(key, dtype):
    kind = key[0]
    if kind in ("unary", "unary-strided") and (key[1] in APPROX_UNARY or dtype == np.complex64):
        return 2e-6
    if kind in ("binary", "binary-strided") and key[1] in APPROX_BINARY:
        return 2e-6
    if kind.startswith("reduce") and len(key) > 1 and dtype.kind in "fc":
        # float sums: within eps times the sum of their terms' magnitudes (gpu_compare.TERMS);
        # products: a few roundings relative to the result (each rounding is relative to it)
        if key[1] == "sum":
            return TERMS
        if key[1] == "prod":
            return 1e-5
    return None


def test_every_op_and_dtype_matches_the_cpu(both):
    gpu, cpu = both
    bad = mismatches(gpu, cpu, _tolerance)
    assert not bad, "\n".join(map(str, bad[:40])) + f"\n({len(bad)} cases)"


def test_a_chain_stays_on_the_gpu():
    x = mx.array(np.arange(1 << 16, dtype=np.float32))
    mx.eval(x + 0)  # x is on the GPU now
    down0, up0 = mx.cuda._transfers()
    y = mx.sum(mx.where(x > 100, mx.exp(x * 1e-5), -x).astype(mx.float16).T.reshape(256, 256), axis=1)
    mx.eval(y)
    down1, up1 = mx.cuda._transfers()
    # nothing comes down; the two Python scalars (100, 1e-5) are host arrays that go up once each
    assert (down1 - down0, up1 - up0) == (0, 2)
    ref = np.where(np.arange(1 << 16) > 100, np.exp(np.arange(1 << 16, dtype=np.float32) * 1e-5),
                   -np.arange(1 << 16, dtype=np.float32)).astype(np.float16).reshape(256, 256).sum(1)
    np.testing.assert_allclose(np.array(y).astype(np.float32), ref.astype(np.float32), rtol=2e-3)
