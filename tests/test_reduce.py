"""Reductions (sum, prod, max, min, all, any, mean, var, std, logsumexp,
softmax, argmax, argmin, allclose, array_equal) against NumPy, with dtypes,
edge cases and error messages checked against values obtained from MLX 0.32."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import mkpy as mx

NAN, INF = float("nan"), float("inf")

# name -> numpy dtype used to build inputs (bfloat16 goes through float32)
DTYPES = {
    "bool_": np.bool_, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64, "bfloat16": np.float32,
    "complex64": np.complex64,
}
INTS = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"]
FLOATS = ["float16", "float32", "float64", "bfloat16"]
LOW = ("float16", "bfloat16")

# Result dtypes, as MLX 0.32 gives them.
SUM_DTYPE = {"bool_": "int32", "uint8": "uint32", "uint16": "uint32", "uint32": "uint32", "uint64": "uint64",
             "int8": "int32", "int16": "int32", "int32": "int32", "int64": "int64"}


def result_dtype(op, dt):
    if op in ("sum", "prod"):
        return SUM_DTYPE.get(dt, dt)
    if op in ("max", "min"):
        return dt
    if op in ("all", "any"):
        return "bool_"
    if op in ("argmax", "argmin"):
        return "uint32"
    if op in ("var", "std"):
        return "float32" if dt not in FLOATS else dt
    # mean, logsumexp, softmax (last axis)
    return dt if dt in FLOATS or dt == "complex64" else "float32"


def dname(a):
    n = str(a.dtype).split(".")[-1]
    return "bool_" if n == "bool" else n


def npv(a):
    """The values of an mkpy array as a NumPy array."""
    if dname(a) == "bfloat16":
        a = a.astype(mx.float32)
    return np.array(a)


def make(values, dt):
    """(mkpy array, float64/complex128 reference values of what it holds)."""
    x = mx.array(np.asarray(values).astype(DTYPES[dt]))
    if dt in ("bfloat16", "float64"):  # (float64 NumPy input makes float32, as in MLX)
        x = x.astype(getattr(mx, dt))
    vals = npv(x)
    ref = vals.astype(np.complex128 if dt == "complex64" else np.float64) if dt != "bool_" else vals
    return x, ref


def data(shape, dt, seed=0):
    rng = np.random.default_rng(seed)
    if dt == "bool_":
        return rng.random(shape) > 0.4
    if dt in INTS:
        lo = 0 if dt.startswith("u") else -3
        return rng.integers(lo, 4, size=shape)
    v = rng.standard_normal(shape) * 2
    if dt == "complex64":
        v = v + 1j * rng.standard_normal(shape)
    return v


def tol(dt):
    return (2e-2, 2e-2) if dt in LOW else (1e-5, 1e-6)


def check(out, expected, dt_expected, shape, rtol=1e-5, atol=1e-6):
    assert dname(out) == dt_expected
    assert tuple(out.shape) == tuple(shape)
    got = npv(out)
    exp = np.asarray(expected)
    if dt_expected in ("bool_", "uint32", "int32", "uint64", "int64") and exp.dtype.kind in "biu":
        np.testing.assert_array_equal(got, exp.astype(got.dtype))
    else:
        np.testing.assert_allclose(got, exp, rtol=rtol, atol=atol, equal_nan=True)


AXES_3D = [None, 0, 1, 2, -1, -3, (0, 1), (0, 2), (1, 2), (2, 0), (0, 1, 2), [1]]


def np_axis(ax):
    return tuple(ax) if isinstance(ax, list) else ax


def np_reduce(op, ref, ax, keepdims, dt):
    ax = np_axis(ax)
    if op == "sum":
        if dt in INTS or dt == "bool_":
            r = np.sum(ref.astype(np.int64), axis=ax, keepdims=keepdims)
            return r.astype(np.dtype(SUM_DTYPE[dt]))
        return np.sum(ref, axis=ax, keepdims=keepdims)
    if op == "prod":
        if dt in INTS or dt == "bool_":
            r = np.prod(ref.astype(np.int64), axis=ax, keepdims=keepdims)
            return r.astype(np.dtype(SUM_DTYPE[dt]))
        return np.prod(ref, axis=ax, keepdims=keepdims)
    if op == "max":
        return np.max(ref, axis=ax, keepdims=keepdims)
    if op == "min":
        return np.min(ref, axis=ax, keepdims=keepdims)
    if op == "all":
        return np.all(ref, axis=ax, keepdims=keepdims)
    if op == "any":
        return np.any(ref, axis=ax, keepdims=keepdims)
    if op == "mean":
        return np.mean(ref, axis=ax, keepdims=keepdims)
    raise AssertionError(op)


# ------------------------------------------------------------ basic ops


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "all", "any", "mean"])
def test_reduce_matches_numpy(op, dt):
    for shape, axes in [((2, 3, 4), AXES_3D), ((5,), [None, 0, -1, (0,)]), ((3, 4), [None, 0, 1, (1, 0)])]:
        x, ref = make(data(shape, dt), dt)
        for ax in axes:
            for keepdims in (False, True):
                out = getattr(mx, op)(x, axis=ax, keepdims=keepdims)
                exp = np_reduce(op, ref, ax, keepdims, dt)
                rt, at = tol(dt)
                if op == "prod" and dt not in LOW:
                    rt = 1e-4
                check(out, exp, result_dtype(op, dt), np.shape(exp), rt, at)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16", "float64", "int32", "uint8", "bool_", "complex64"])
@pytest.mark.parametrize("fn", ["var", "std"])
def test_var_std(fn, dt):
    x, ref = make(data((3, 4, 5), dt, seed=1), dt)
    for ax in [None, 0, 2, -1, (0, 2), (1, 2)]:
        for keepdims in (False, True):
            for ddof in (0, 1, 2):
                out = getattr(mx, fn)(x, axis=ax, keepdims=keepdims, ddof=ddof)
                exp = getattr(np, fn)(ref, axis=ax, keepdims=keepdims, ddof=ddof)
                rt, at = tol(dt)
                check(out, exp, result_dtype(fn, dt), np.shape(exp), max(rt, 1e-5), max(at, 1e-5))


def test_var_ddof_edges():
    x = mx.array([1, 2, 3])
    assert mx.var(x, ddof=1).item() == 1.0
    assert mx.var(x, ddof=3).item() == INF  # divides by max(n - ddof, 0)
    assert mx.var(x, ddof=5).item() == INF
    assert mx.var(x, ddof=-1).item() == 0.5
    assert math.isnan(mx.std(mx.array([1.0]), ddof=1).item())
    assert mx.var(x, ddof=True).item() == 1.0
    v = mx.var(mx.array(np.ones((2, 3), np.float32)), axis=(), ddof=1)
    assert v.shape == (2, 3) and np.isnan(npv(v)).all()
    # positional axis, keepdims, ddof
    r = mx.var(mx.array([1.0, 2.0]), 0, True, 1)
    assert r.shape == (1,) and r.tolist() == [0.5]


def np_logsumexp(ref, ax, keepdims):
    ax = np_axis(ax)
    m = np.max(ref, axis=ax, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(ref - m), axis=ax, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=ax if ax is not None else tuple(range(ref.ndim)))


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16", "float64", "int32", "int8"])
def test_logsumexp(dt):
    x, ref = make(data((2, 3, 4), dt, seed=2), dt)
    for ax in AXES_3D:
        for keepdims in (False, True):
            out = mx.logsumexp(x, axis=ax, keepdims=keepdims)
            exp = np_logsumexp(ref, ax, keepdims)
            rt, at = tol(dt)
            check(out, exp, result_dtype("logsumexp", dt), np.shape(exp), rt, max(at, 1e-5))


def test_logsumexp_bool():
    # bool goes through MLX's generic path (bool subtraction): values from MLX 0.32
    b = mx.array([[True, False, True], [False, False, True]])
    np.testing.assert_allclose(mx.logsumexp(b, axis=0).tolist(), [2.3132615089416504, 0.6931471824645996,
                                                                  1.6931471824645996], rtol=1e-6)
    np.testing.assert_allclose(mx.logsumexp(b, axis=1).tolist(), [1.861994743347168, 1.5514447689056396], rtol=1e-6)
    np.testing.assert_allclose(mx.logsumexp(b).item(), 3.4118740558624268, rtol=1e-6)
    assert dname(mx.logsumexp(b)) == "float32"


def np_softmax(ref, ax):
    ax = np_axis(ax)
    e = np.exp(ref - np.max(ref, axis=ax, keepdims=True))
    return e / np.sum(e, axis=ax, keepdims=True)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("precise", [False, True])
def test_softmax(dt, precise):
    x, ref = make(data((2, 3, 4), dt, seed=3), dt)
    for ax in AXES_3D:
        out = mx.softmax(x, axis=ax, precise=precise)
        exp = np_softmax(ref, ax)
        rt, at = tol(dt)
        check(out, exp, dt, (2, 3, 4), rt, max(at, 1e-6))


def test_softmax_integer_dtypes():
    # the last axis makes a float32 result; other axes keep the input dtype (MLX)
    a = mx.array(np.arange(6, dtype=np.int32).reshape(2, 3))
    out = mx.softmax(a, axis=-1)
    assert dname(out) == "float32"
    np.testing.assert_allclose(npv(out), np_softmax(np.arange(6.0).reshape(2, 3), -1), rtol=1e-6)
    out = mx.softmax(a, axis=0)
    assert dname(out) == "int32" and out.tolist() == [[0, 0, 0], [0, 0, 0]]
    assert dname(mx.softmax(a, axis=(0, 1))) == "int32"
    assert dname(mx.softmax(mx.array([[True, False]]), axis=1)) == "float32"
    # leading size-1 axes still count as the last axis
    b = mx.array(np.arange(6, dtype=np.int32).reshape(2, 1, 3))
    assert dname(mx.softmax(b, axis=(1, 2))) == "float32"
    assert dname(mx.softmax(mx.array([1, 2, 3]))) == "float32"


def test_softmax_half_precision_values():
    # exact results of MLX 0.32: without precise, float16 math rounds at each step
    x = mx.array([1, 2, 3], dtype=mx.float16)
    assert mx.softmax(x).tolist() == [0.09002685546875, 0.24462890625, 0.6650390625]
    assert mx.softmax(x, precise=True).tolist() == [0.09002685546875, 0.2447509765625, 0.6650390625]
    y = mx.array([[1, 2], [3, 4]], dtype=mx.float16)
    assert mx.softmax(y, axis=0).tolist() == [[0.11920166015625, 0.11920166015625], [0.88037109375, 0.88037109375]]
    assert mx.softmax(y, axis=0, precise=True).tolist() == [[0.11920166015625, 0.11920166015625],
                                                           [0.880859375, 0.880859375]]
    b = mx.array([1, 2, 3], dtype=mx.bfloat16)
    assert mx.softmax(b).astype(mx.float32).tolist() == [0.0908203125, 0.2451171875, 0.66796875]
    assert mx.softmax(b, precise=True).astype(mx.float32).tolist() == [0.08984375, 0.2451171875, 0.6640625]
    v = np.array([4.078125, -5.109375, 0.83984375, -1.1396484375, -0.91015625, -0.429931640625, -4.0390625,
                  -0.4599609375, -1.73046875, 6.6484375, 0.449951171875, -0.7099609375], np.float16).reshape(2, 6)
    assert mx.softmax(mx.array(v), axis=-1).tolist() == [
        [0.94140625, 9.626150131225586e-05, 0.036956787109375, 0.005096435546875, 0.00641632080078125,
         0.0103759765625],
        [2.276897430419922e-05, 0.0008139610290527344, 0.0002295970916748047, 0.99609375, 0.0020236968994140625,
         0.0006341934204101562]]
    assert mx.softmax(mx.array(v), axis=-1, precise=True).tolist() == [
        [0.94091796875, 9.626150131225586e-05, 0.03692626953125, 0.005100250244140625, 0.00641632080078125,
         0.01036834716796875],
        [2.276897430419922e-05, 0.0008153915405273438, 0.00022876262664794922, 0.99609375, 0.002025604248046875,
         0.0006346702575683594]]


def test_half_precision_values():
    # mean multiplies by the reciprocal rounded to float16, as MLX does
    assert mx.mean(mx.array([1, 2, 2], dtype=mx.float16)).item() == 1.666015625
    assert mx.mean(mx.array([0.1, 0.2, 0.7], dtype=mx.float16)).item() == 0.333251953125
    x = mx.array([0.5, 1.25, 3.0, -2.0, 7.5, 0.1], dtype=mx.float16)
    assert mx.logsumexp(x).item() == 7.515625
    assert mx.var(x).item() == 8.8671875
    assert mx.var(x, ddof=1).item() == 10.640625
    assert mx.std(x).item() == 2.978515625
    # float16 and bfloat16 accumulate in float32
    assert mx.sum(mx.array(np.ones(10000, np.float16))).item() == 10000.0
    assert mx.sum(mx.array(np.ones(100000, np.float32)).astype(mx.bfloat16)).item() == 99840.0
    # ...but the sum is stored as float16 before mean scales it
    assert mx.mean(mx.array(np.ones(100000, np.float16))).item() == INF
    assert mx.prod(mx.array(np.full(100, 1.1, np.float16))).item() == 13296.0


# ------------------------------------------------------------ argmax / argmin


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", list(DTYPES))
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduce(op, dt):
    x, ref = make(data((3, 4, 5), dt, seed=4), dt)
    npf = getattr(np, op)
    for ax in [None, 0, 1, 2, -1, -2]:
        for keepdims in (False, True):
            out = getattr(mx, op)(x, axis=ax, keepdims=keepdims)
            exp = npf(ref, axis=ax, keepdims=keepdims)
            shape = (1, 1, 1) if ax is None and keepdims else np.shape(exp)
            check(out, np.reshape(exp, shape), "uint32", shape)


def test_arg_reduce_ties_and_nan():
    assert mx.argmax(mx.array([1, 3, 3])).item() == 1
    assert mx.argmin(mx.array([1, 1, 3])).item() == 0
    # a nan wins, the first one
    assert mx.argmax(mx.array([1.0, NAN, 3.0])).item() == 1
    assert mx.argmin(mx.array([1.0, NAN, 3.0])).item() == 1
    assert mx.argmax(mx.array([NAN, 1.0, NAN])).item() == 0
    assert mx.argmax(mx.array([1.0, 5.0, NAN, 9.0])).item() == 2
    assert mx.argmin(mx.array([1.0, -5.0, NAN, -9.0])).item() == 2
    assert mx.argmax(mx.array([1.0, INF, NAN])).item() == 2
    assert mx.argmin(mx.array([1.0, NAN, NAN])).item() == 1
    assert mx.argmax(mx.array([-INF, -INF])).item() == 0
    assert mx.argmax(mx.array([1, NAN], dtype=mx.float16)).item() == 1
    # complex compares lexicographically
    assert mx.argmax(mx.array([1 + 2j, 3 + 0j, 1 + 5j])).item() == 1
    m = np.array([[1.0, NAN, 2.0], [4.0, 3.0, NAN]], np.float32)
    assert mx.argmax(mx.array(m), axis=1).tolist() == [1, 2]
    assert mx.argmax(mx.array(m), axis=0).tolist() == [1, 0, 1]
    assert mx.argmin(mx.array(m.T), axis=0).tolist() == [1, 2]


def test_arg_reduce_shapes():
    a = mx.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    r = mx.argmax(a, keepdims=True)
    assert r.shape == (1, 1) and r.tolist() == [[5]]
    assert mx.argmax(a, axis=None, keepdims=True).shape == (1, 1)
    r = mx.argmax(mx.array(3.0))
    assert r.shape == () and r.item() == 0 and dname(r) == "uint32"
    assert mx.argmax(mx.array(np.ones((2, 1))), axis=1).tolist() == [0, 0]
    assert mx.argmax(mx.array(np.ones((2, 1))), axis=1, keepdims=True).tolist() == [[0], [0]]
    assert mx.argmax(mx.array([1.0, 2.0]), 0, True).tolist() == [1]


# ------------------------------------------------------------ special values


def test_max_min_nan_and_zero_sign():
    assert math.isnan(mx.max(mx.array([1.0, NAN, 3.0])).item())
    assert math.isnan(mx.min(mx.array([1.0, NAN, 3.0])).item())
    assert math.isnan(mx.max(mx.array([NAN, 1.0])).item())
    big = np.arange(1000, dtype=np.float32)
    big[537] = np.nan
    assert math.isnan(mx.max(mx.array(big)).item())
    assert np.isnan(npv(mx.min(mx.array(big.reshape(10, 100)), axis=1))).tolist() == [False] * 5 + [True] + [False] * 4
    assert math.copysign(1, mx.max(mx.array([-0.0, 0.0])).item()) == -1
    assert math.copysign(1, mx.min(mx.array([0.0, -0.0])).item()) == 1
    assert mx.all(mx.array([1.0, NAN])).item() is True
    assert mx.any(mx.array([0.0, -0.0])).item() is False
    assert mx.all(mx.array([0j, 1j])).item() is False
    assert mx.any(mx.array([0j, 1j])).item() is True
    assert mx.max(mx.array([1 + 2j, 3 + 0j])).item() == 3 + 0j


def test_logsumexp_softmax_infinities():
    assert mx.logsumexp(mx.array([-INF, -INF])).item() == -INF
    assert mx.logsumexp(mx.array([INF, 1.0])).item() == INF
    assert mx.logsumexp(mx.array([INF, -INF])).item() == INF
    assert math.isnan(mx.logsumexp(mx.array([NAN, 1.0])).item())
    assert mx.logsumexp(mx.array([[-INF, -INF], [1.0, 2.0]]), axis=0).tolist() == [1.0, 2.0]
    assert mx.logsumexp(mx.array([[INF], [-INF]]), axis=0).tolist() == [INF]
    assert np.isnan(npv(mx.softmax(mx.array([-INF, -INF])))).all()
    assert np.isnan(npv(mx.softmax(mx.array([INF, 1.0])))).all()
    assert mx.softmax(mx.array([1000.0, 1000.0])).tolist() == [0.5, 0.5]
    assert mx.softmax(mx.array([[-INF, -INF], [1.0, 2.0]]), axis=0).tolist() == [[0.0, 0.0], [1.0, 1.0]]
    # the generic path subtracts in the input dtype: uint8 wraps (as MLX)
    assert mx.logsumexp(mx.array([[1, 2], [3, 4]], dtype=mx.uint8), axis=0).tolist() == [INF, INF]
    np.testing.assert_allclose(mx.logsumexp(mx.array([[1, 2], [3, 4]], dtype=mx.int8), axis=0).tolist(),
                               [3.126928, 4.126928], rtol=1e-6)


def test_integer_wraparound():
    assert mx.sum(mx.array([2**31 - 1, 1], dtype=mx.int32)).item() == -(2**31)
    assert mx.sum(mx.array([200, 100], dtype=mx.uint8)).item() == 300
    assert mx.sum(mx.array([100, 100], dtype=mx.int8)).item() == 200
    assert mx.prod(mx.array([100, 100], dtype=mx.int8)).item() == 10000
    assert mx.sum(mx.array([2**40, 1], dtype=mx.int64)).item() == 2**40 + 1
    assert mx.sum(mx.array([2**63 - 1], dtype=mx.uint64)).item() == 2**63 - 1
    assert mx.sum(mx.array([True, True])).item() == 2
    assert mx.prod(mx.array([True, False])).item() == 0


# ------------------------------------------------------------ 0-d and empty


def test_zero_dim():
    r = mx.sum(mx.array(3.0))
    assert r.shape == () and r.item() == 3.0
    # no axes to reduce: sum, prod, max and min return the input as is
    assert dname(mx.sum(mx.array(2, dtype=mx.int8))) == "int8"
    assert dname(mx.prod(mx.array(2, dtype=mx.int8))) == "int8"
    assert dname(mx.max(mx.array(2, dtype=mx.int8))) == "int8"
    r = mx.sum(mx.array(True))
    assert dname(r) == "bool_" and r.item() is True
    r = mx.all(mx.array(2, dtype=mx.int8))
    assert dname(r) == "bool_" and r.item() is True
    r = mx.mean(mx.array(True))
    assert dname(r) == "float32" and r.item() == 1.0
    assert mx.mean(mx.array(3)).item() == 3.0
    assert mx.var(mx.array(3.0)).item() == 0.0
    assert mx.logsumexp(mx.array(3.0)).item() == 3.0
    assert mx.softmax(mx.array(3.0)).item() == 1.0
    r = mx.softmax(mx.array(3))
    assert dname(r) == "int32" and r.item() == 1
    assert mx.sum(mx.array(3.0), axis=()).item() == 3.0


def test_empty_axes_tuple():
    a = mx.array(np.ones((2, 1), np.int8))
    r = mx.sum(a, axis=())
    assert dname(r) == "int8" and r.shape == (2, 1)
    assert dname(mx.prod(a, axis=())) == "int8"
    # reducing size-1 axes still changes the dtype
    r = mx.prod(a, axis=1)
    assert dname(r) == "int32" and r.tolist() == [1, 1]
    assert dname(mx.sum(a, axis=1)) == "int32"
    b = mx.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    r = mx.all(b, axis=())
    assert dname(r) == "bool_" and r.tolist() == [[False, True, True], [True, True, True]]
    assert mx.max(b, axis=[]).tolist() == b.tolist()
    r = mx.mean(mx.array(np.ones((2, 3), np.int8)), axis=())
    assert dname(r) == "float32" and r.shape == (2, 3)
    assert mx.softmax(b, axis=()).tolist() == [[1.0] * 3] * 2
    assert mx.logsumexp(b, axis=()).tolist() == b.tolist()


def test_empty_arrays():
    e = mx.array(np.zeros((0, 3), np.float32))
    r = mx.sum(e)
    assert r.shape == () and r.item() == 0.0 and dname(r) == "float32"
    assert mx.sum(e, axis=0).tolist() == [0.0, 0.0, 0.0]
    assert mx.sum(e, axis=1).shape == (0,)
    assert mx.prod(e).item() == 1.0
    assert mx.all(e).item() is True
    assert mx.any(e).item() is False
    assert math.isnan(mx.mean(e).item())
    assert mx.mean(e, axis=1).shape == (0,)
    assert math.isnan(mx.var(e).item())
    assert np.isnan(npv(mx.var(e, axis=0))).all()
    assert mx.std(e, axis=1).shape == (0,)
    assert mx.max(e, axis=1).shape == (0,)
    assert mx.max(mx.array(np.zeros((3, 0))), axis=0).shape == (0,)
    assert mx.max(mx.array(np.zeros((0,))), axis=()).shape == (0,)
    s = mx.softmax(mx.array(np.zeros((0, 3), np.int32)))
    assert s.shape == (0, 3) and dname(s) == "int32"
    assert mx.softmax(e, axis=5).shape == (0, 3)  # returned before the axis is checked
    assert mx.sum(mx.array(np.zeros((2, 0, 3), np.int8)), axis=1).tolist() == [[0, 0, 0], [0, 0, 0]]


# ------------------------------------------------------------ errors


def raises(exc, msg, fn, *args, **kw):
    with pytest.raises(exc) as e:
        fn(*args, **kw)
    assert str(e.value) == msg


def test_errors():
    a = mx.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    for fn in ("sum", "prod", "max", "min", "all", "any", "logsumexp", "softmax"):
        f = getattr(mx, fn)
        raises(IndexError, "Invalid axis 2 for array with 2 dimensions.", f, a, axis=2)
        raises(IndexError, "Invalid axis -3 for array with 2 dimensions.", f, a, axis=-3)
        raises(ValueError, "Duplicate axes detected in reduction.", f, a, axis=(0, 0))
        raises(ValueError, "Duplicate axes detected in reduction.", f, a, axis=(0, -2))
        raises(IndexError, "Invalid axis 7 for array with 2 dimensions.", f, a, axis=(0, 0, 7))
    for fn in ("mean", "var", "std"):
        f = getattr(mx, fn)
        raises(IndexError, "[mean] axis 5 is out of bounds for array with 2 dimensions.", f, a, axis=5)
        raises(IndexError, "[mean] axis 7 is out of bounds for array with 2 dimensions.", f, a, axis=(0, 7))
        raises(ValueError, "Duplicate axes detected in reduction.", f, a, axis=(0, 0))
    raises(IndexError, "Invalid axis 5 for array with 2 dimensions.", mx.argmax, a, axis=5)
    raises(IndexError, "Invalid axis -3 for array with 2 dimensions.", mx.argmin, a, axis=-3)
    raises(IndexError, "Invalid axis 0 for array with 0 dimensions.", mx.sum, mx.array(3.0), axis=0)
    raises(IndexError, "Invalid axis 0 for array with 0 dimensions.", mx.argmax, mx.array(3.0), axis=0)


def test_empty_errors():
    e = mx.array(np.zeros((0, 3), np.float32))
    raises(ValueError, "[max] Cannot max reduce over axis 0 with size 0.", mx.max, e)
    raises(ValueError, "[min] Cannot min reduce over axis 0 with size 0.", mx.min, e)
    raises(ValueError, "[max] Cannot max reduce over axis 1 with size 0.", mx.max, mx.array(np.zeros((3, 0))))
    raises(ValueError, "[max] Cannot max reduce over axis 1 with size 0.", mx.max,
           mx.array(np.zeros((3, 0, 0))), axis=(2, 1))
    raises(ValueError, "[min] Cannot min reduce over axis 1 with size 0.", mx.min, mx.array(np.zeros((2, 0))), axis=-1)
    raises(IndexError, "Invalid axis 7 for array with 2 dimensions.", mx.max, e, axis=7)
    raises(ValueError, "[argmax] Cannot argmax reduce zero size array.", mx.argmax, e)
    raises(ValueError, "[argmin] Cannot argmin reduce zero size array.", mx.argmin, e, axis=1)
    raises(ValueError, "[argmax] Cannot argmax reduce zero size array.", mx.argmax, e, axis=5)
    raises(ValueError, "[logsumexp] Received empty array.", mx.logsumexp, e)
    raises(ValueError, "[logsumexp] Received empty array.", mx.logsumexp, e, axis=1)
    raises(ValueError, "[logsumexp] Received non-empty axes for array with 0 dimensions.", mx.logsumexp,
           mx.array(3.0), axis=0)
    raises(ValueError, "[softmax] Received non-empty axes for array with 0 dimensions.", mx.softmax,
           mx.array(3.0), axis=0)
    # what MLX 0.32 raises for argmax(0-d, keepdims=True)
    raises(ValueError, "cannot create std::vector larger than max_size()", mx.argmax, mx.array(3.0), keepdims=True)


def test_argument_errors():
    a = mx.array([1.0, 2.0])
    with pytest.raises(TypeError):
        mx.sum(a, axis=1.0)
    with pytest.raises(TypeError):
        mx.var(a, ddof=1.5)
    with pytest.raises(TypeError):
        mx.softmax(a, 0, True)  # precise is keyword-only
    with pytest.raises(TypeError):
        mx.sum(a, foo=1)
    with pytest.raises(TypeError):
        mx.argmax(a, axis=(0,))
    assert mx.sum(a, 0, True).tolist() == [3.0]
    assert mx.sum(mx.array(np.ones((2, 3))), axis=True).tolist() == [3.0, 3.0]
    assert mx.sum(a, stream=None).item() == 3.0


# ------------------------------------------------------------ layouts


VIEWS = {
    "T": lambda a: a.T,
    "step": lambda a: a[::2, ::-1],
    "slice": lambda a: a[1:, 2:7],
    "expand": lambda a: a[None].T,
}


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("dt", ["float32", "int32", "float16", "bool_"])
def test_non_contiguous(view, dt):
    base = data((8, 11), dt, seed=5)
    x, ref = make(base, dt)
    xv, rv = VIEWS[view](x), VIEWS[view](ref)
    axes = [None, 0, 1, -1, (0, 1)] + ([2, (1, 2), (0, 2)] if view == "expand" else [])
    rt, at = tol(dt)
    for ax in axes:
        for op in ("sum", "max", "min", "prod", "all", "any", "mean"):
            exp = np_reduce(op, rv, ax, False, dt)
            check(getattr(mx, op)(xv, axis=ax), exp, result_dtype(op, dt), np.shape(exp), max(rt, 1e-4), at)
        if dt != "bool_":
            check(mx.logsumexp(xv, axis=ax), np_logsumexp(rv, ax, False), result_dtype("logsumexp", dt),
                  np.shape(np_logsumexp(rv, ax, False)), rt, max(at, 1e-5))
        if not isinstance(ax, tuple):
            for op in ("argmax", "argmin"):
                exp = getattr(np, op)(rv, axis=ax)
                check(getattr(mx, op)(xv, axis=ax), exp, "uint32", np.shape(exp))
    if dt in ("float32", "float16"):
        for ax in (0, -1):
            check(mx.softmax(xv, axis=ax), np_softmax(rv, ax), dt, rv.shape, rt, 1e-6)


# ------------------------------------------------------------ large arrays


def test_large_float32_sum_accuracy():
    rng = np.random.default_rng(6)
    x = rng.random(1_000_000, dtype=np.float32)
    exact = x.astype(np.float64).sum()
    a = mx.array(x)
    assert abs(mx.sum(a).item() - exact) / exact < 1e-6
    assert abs(mx.mean(a).item() - exact / x.size) / (exact / x.size) < 1e-6
    # catastrophic-free but long: a constant plus noise
    y = (np.float32(1000.0) + rng.standard_normal(1_000_000).astype(np.float32))
    assert abs(mx.sum(mx.array(y)).item() - y.astype(np.float64).sum()) / y.astype(np.float64).sum() < 1e-6
    ex = np.log(np.exp(x.astype(np.float64)).sum())
    assert abs(mx.logsumexp(a).item() - ex) / ex < 1e-6
    s = npv(mx.softmax(a))
    np.testing.assert_allclose(s, np.exp(x.astype(np.float64)) / np.exp(x.astype(np.float64)).sum(), rtol=1e-5)


@pytest.mark.parametrize("shape,axes", [((1000, 1000), [0, 1, None]), ((3, 300_000), [0, 1]),
                                        ((300_000, 3), [0, 1]), ((40, 50, 60), [0, 1, 2, (0, 2), (1, 2)])])
def test_large_axes(shape, axes):
    rng = np.random.default_rng(7)
    x = rng.random(shape, dtype=np.float32)
    x64 = x.astype(np.float64)
    a = mx.array(x)
    for ax in axes:
        np.testing.assert_allclose(npv(mx.sum(a, axis=ax)), x64.sum(axis=ax), rtol=1e-5)
        np.testing.assert_allclose(npv(mx.max(a, axis=ax)), x.max(axis=ax))
        np.testing.assert_allclose(npv(mx.logsumexp(a, axis=ax)), np_logsumexp(x64, ax, False), rtol=1e-5)
        if not isinstance(ax, tuple):
            np.testing.assert_array_equal(npv(mx.argmax(a, axis=ax)), x.argmax(axis=ax))
            np.testing.assert_array_equal(npv(mx.argmin(a, axis=ax)), x.argmin(axis=ax))
    xi = rng.integers(-50, 50, size=shape).astype(np.int32)
    np.testing.assert_array_equal(npv(mx.sum(mx.array(xi), axis=axes[0])), xi.sum(axis=axes[0]))


def test_large_half_and_bool():
    rng = np.random.default_rng(8)
    x = rng.random(1_000_000, dtype=np.float32)
    h = mx.array(x[:100_000]).astype(mx.float16)  # sum below float16's max
    ref = npv(h).astype(np.float64).sum()
    assert abs(mx.sum(h).item() - ref) / ref < 1e-3
    b = mx.array(x > 0.5)
    assert mx.sum(b).item() == int((x > 0.5).sum())
    assert mx.any(b).item() is True and mx.all(b).item() is False
    big = np.zeros(2_000_000, np.float32)
    big[1_234_567] = 1.0
    big[1_500_000] = 1.0
    assert mx.argmax(mx.array(big)).item() == 1_234_567
    big[1_400_000] = np.nan
    assert mx.argmax(mx.array(big)).item() == 1_400_000
    assert math.isnan(mx.max(mx.array(big)).item())


# ------------------------------------------------------------ allclose, array_equal


def test_allclose():
    a = mx.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    r = mx.allclose(a, a)
    assert dname(r) == "bool_" and r.shape == () and r.item() is True
    assert mx.allclose(a, a + 1).item() is False
    assert mx.allclose(mx.array([1.0]), mx.array([1.1]), 0.2).item() is True
    assert mx.allclose(mx.array([1.0]), mx.array([1.1]), 0.0, 0.2).item() is True
    assert mx.allclose(mx.array([1.0]), mx.array([1.1]), rtol=0.0, atol=0.01).item() is False
    assert mx.allclose(mx.array([1.0]), mx.array([1.0, 1.0])).item() is True
    assert mx.allclose(mx.array([NAN]), mx.array([NAN])).item() is False
    assert mx.allclose(mx.array([NAN]), mx.array([NAN]), equal_nan=True).item() is True
    assert mx.allclose(mx.array([1, 2]), mx.array([1, 2])).item() is True
    assert mx.allclose(mx.array([True]), mx.array([True])).item() is True
    assert mx.allclose(mx.array([1.0, INF]), mx.array([1.0, INF])).item() is True
    with pytest.raises(ValueError):
        mx.allclose(mx.array(np.zeros(2)), mx.array(np.zeros(3)))


def test_allclose_infinities():
    assert mx.allclose(mx.array([1.0]), mx.array([INF])).item() is False
    assert mx.allclose(mx.array([INF]), mx.array([-INF])).item() is False


def test_array_equal():
    a = mx.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    r = mx.array_equal(a, a)
    assert dname(r) == "bool_" and r.shape == () and r.item() is True
    assert mx.array_equal(a, mx.array(np.zeros((3, 2)))).item() is False
    assert mx.array_equal(a, a.astype(mx.int32)).item() is True
    assert mx.array_equal(a, a + 1).item() is False
    assert mx.array_equal(mx.array([1, 2]), mx.array([1.0, 2.0])).item() is True
    assert mx.array_equal(mx.array([1, 2]), mx.array([1, 2, 3])).item() is False
    assert mx.array_equal(mx.array([1, 2]), mx.array([[1, 2]])).item() is False
    assert mx.array_equal(mx.array([NAN]), mx.array([NAN])).item() is False
    assert mx.array_equal(mx.array([NAN]), mx.array([NAN]), equal_nan=True).item() is True
    assert mx.array_equal(mx.array([NAN, 1.0]), mx.array([NAN, 1.0]), equal_nan=True).item() is True
    assert mx.array_equal(mx.array(np.zeros(0)), mx.array(np.zeros(0))).item() is True
    assert mx.array_equal(1, 1).item() is True
    assert mx.array_equal(a, 1).item() is False


# ------------------------------------------------------------ methods, chains


def test_array_methods():
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    a = mx.array(x)
    assert a.sum().item() == x.sum()
    assert a.sum(axis=0).tolist() == x.sum(axis=0).tolist()
    assert a.max(1, True).tolist() == x.max(1, keepdims=True).tolist()
    assert a.min().item() == x.min()
    assert a.prod(axis=1).tolist() == x.prod(axis=1).tolist()
    assert a.all().item() is False and a.any().item() is True
    assert a.argmax(axis=1, keepdims=True).tolist() == x.argmax(axis=1)[:, None].tolist()
    assert a.argmin().item() == x.argmin()
    np.testing.assert_allclose(a.mean(axis=1).tolist(), x.mean(axis=1))
    np.testing.assert_allclose(a.var(ddof=1).item(), x.var(ddof=1), rtol=1e-6)
    np.testing.assert_allclose(a.std(axis=0).tolist(), x.std(axis=0), rtol=1e-6)
    np.testing.assert_allclose(a.logsumexp(axis=1).tolist(), np_logsumexp(x.astype(np.float64), 1, False),
                               rtol=1e-6)


def test_lazy_inputs_and_chains():
    a = mx.array(np.arange(10, dtype=np.float32))
    b = mx.sum(mx.softmax(a * 2 + 1, axis=0) * 10)
    assert abs(b.item() - 10.0) < 1e-5
    assert mx.max(mx.sum(mx.array(np.ones((4, 5))), axis=1)).item() == 5.0


def test_long_chain():
    x = mx.array(1.0)
    for _ in range(100000):
        x = x + 1
    assert x.item() == 100001.0


# ------------------------------------------ vectorised softmax rows, column sums

def test_softmax_float32_bits_match_mlx():
    # MLX's CPU softmax and logsumexp use its own exp: with it, short rows are MLX's bits
    x = np.arange(26, dtype=np.float32).reshape(2, 13) * np.float32(0.37) - np.float32(4.1)
    want = [0x3b710b61, 0x3bae7bf4, 0x3bfc9b59, 0x3c36da95, 0x3c845ca7, 0x3cbf9ff9, 0x3d0ab605, 0x3d48d117,
            0x3d915d5c, 0x3dd2730e, 0x3e185666, 0x3e5c8b57, 0x3e9fa510, 0x3b710b5f, 0x3bae7bf7, 0x3bfc9b5d,
            0x3c36da94, 0x3c845ca6, 0x3cbf9ff8, 0x3d0ab606, 0x3d48d116, 0x3d915d5b, 0x3dd27314, 0x3e185667,
            0x3e5c8b55, 0x3e9fa50f]
    assert npv(mx.softmax(mx.array(x), axis=-1)).view(np.uint32).ravel().tolist() == want
    assert npv(mx.logsumexp(mx.array(x), axis=-1)).view(np.uint32).tolist() == [0x3fc0b015, 0x40ca178a]


@pytest.mark.parametrize("n", [7, 8, 1023, 1024, 1025, 3000, 70001])
def test_softmax_rows_nan_inf_and_strides(n):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((6, n)) * 5).astype(np.float32)
    a[1, n // 3] = NAN          # a nan inside the lanes
    a[2, n - 1] = NAN           # in the tail
    a[3, n // 2] = INF          # softmax gives nan, logsumexp inf
    a[4, :] = -INF              # all -inf: nan, logsumexp -inf
    a[5, 0] = -INF
    got = npv(mx.softmax(mx.array(a), axis=-1))
    lse = npv(mx.logsumexp(mx.array(a), axis=-1))
    assert np.isnan(got[1:5]).all()
    assert np.isnan(lse[1:3]).all() and lse[3] == INF and lse[4] == -INF
    for r in (0, 5):
        np.testing.assert_allclose(got[r], np_softmax(a[r].astype(np.float64), -1), rtol=2e-6, atol=1e-12)
        m = a[r].astype(np.float64).max()
        np.testing.assert_allclose(lse[r], m + np.log(np.exp(a[r].astype(np.float64) - m).sum()), rtol=2e-6)
    # strided rows give the same bits as their contiguous copies
    b = (rng.standard_normal((4, 2 * n)) * 3).astype(np.float32)
    b[1, 2 * (n // 2)] = NAN
    x = mx.array(b)
    for view, ref in [(x[:, ::2], b[:, ::2]), (x[::-1, 1::2], b[::-1, 1::2])]:
        for f in (lambda v: mx.softmax(v, axis=-1), lambda v: mx.logsumexp(v, axis=-1)):
            np.testing.assert_array_equal(npv(f(view)).view(np.uint32), npv(f(mx.array(ref.copy()))).view(np.uint32))
    # the last axis of a transposed array, and precise float16 rows
    t = mx.array(b[:, :n].T.copy()).T
    np.testing.assert_allclose(npv(mx.softmax(t, axis=-1))[0], np_softmax(b[0, :n].astype(np.float64), -1),
                               rtol=2e-6, atol=1e-12)
    h = npv(mx.softmax(mx.array(a[:1], mx.float16), axis=-1, precise=True).astype(mx.float32))
    np.testing.assert_allclose(h[0], np_softmax(a[0].astype(np.float16).astype(np.float64), -1), rtol=2e-3,
                               atol=1e-7)


@pytest.mark.parametrize("shape", [(2000, 300), (129, 5000), (300, 7), (3, 4100)])
def test_column_sums_accuracy_and_specials(shape):
    rng = np.random.default_rng(shape[0])
    a = rng.standard_normal(shape).astype(np.float32)
    want = a.astype(np.float64).sum(axis=0)
    scale = np.abs(a).astype(np.float64).sum(axis=0)
    # float lanes over blocks of rows, then double: as the row mode
    got = npv(mx.sum(mx.array(a), axis=0)).astype(np.float64)
    assert (np.abs(got - want) <= 1e-6 * scale + 1e-30).all()
    np.testing.assert_allclose(npv(mx.mean(mx.array(a), axis=0)), want / shape[0], rtol=1e-5, atol=1e-6)
    # nan and inf propagate through the float blocks
    b = a.copy()
    b[shape[0] // 2, 0] = NAN
    b[0, 1 % shape[1]] = INF
    b[-1, 2 % shape[1]] = -INF
    s = npv(mx.sum(mx.array(b), axis=0))
    np.testing.assert_array_equal(np.isnan(s), np.isnan(b.astype(np.float64).sum(axis=0)))
    np.testing.assert_array_equal(np.isinf(s), np.isinf(b.astype(np.float64).sum(axis=0)))
    for op, nop in [("max", np.max), ("min", np.min)]:
        np.testing.assert_array_equal(npv(getattr(mx, op)(mx.array(b), axis=0)), nop(b, axis=0))
    np.testing.assert_allclose(npv(mx.prod(mx.array(a[:20] * 0.5 + 1), axis=0)), np.prod(a[:20] * 0.5 + 1, axis=0),
                               rtol=1e-5)
    # non-contiguous: every other row and a column step; a transposed array reduced over axis 1
    x = mx.array(a)
    v = npv(mx.sum(x[::2, ::3], axis=0)).astype(np.float64)
    assert (np.abs(v - a[::2, ::3].astype(np.float64).sum(axis=0)) <= 1e-6 * scale[::3] + 1e-30).all()
    v = npv(mx.sum(x.T, axis=1)).astype(np.float64)
    assert (np.abs(v - want) <= 1e-6 * scale + 1e-30).all()
    # float16 columns go through the same blocks
    h = npv(mx.sum(mx.array(a[:, :64], mx.float16), axis=0)).astype(np.float64)
    np.testing.assert_allclose(h, a[:, :64].astype(np.float16).astype(np.float64).sum(axis=0), rtol=2e-3,
                               atol=2e-3 * scale[:64].max())


def test_column_sums_do_not_depend_on_thread_count():
    code = ("import mkpy as mx, numpy as np\n"
            "a = np.random.default_rng(7).standard_normal((3001, 300)).astype(np.float32)\n"
            "print(np.array(mx.sum(mx.array(a), axis=0)).tobytes().hex())\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    outs = set()
    for t in ("1", "2", "3"):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": root, "MKPY_NUM_THREADS": t})
        assert r.returncode == 0, r.stderr
        outs.add(r.stdout)
    assert len(outs) == 1


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int32, np.float16, np.uint8])
@pytest.mark.parametrize("n", [7, 8, 511, 512, 513, 1030, 5000])
def test_argmax_blocks_first_index_and_nan(dt, n):
    # the vectorised block pass: ties keep the first index, a nan wins (the first one)
    rng = np.random.default_rng(n)
    x = rng.integers(0, 40, n).astype(dt)
    for f in (mx.argmax, mx.argmin):
        want = np.argmax(x) if f is mx.argmax else np.argmin(x)
        assert int(f(mx.array(x))) == want
    x2 = np.stack([x, x[::-1]])
    assert np.array_equal(np.array(mx.argmax(mx.array(x2), axis=1)), np.argmax(x2, axis=1))
    assert np.array_equal(np.array(mx.argmin(mx.array(x2), axis=1)), np.argmin(x2, axis=1))
    assert int(mx.argmax(mx.array(x)[::3])) == np.argmax(x[::3])
    if np.issubdtype(dt, np.floating):
        for pos in (0, n // 2, n - 1):
            y = x.copy()
            y[pos] = np.nan
            y[-1] = np.nan
            assert int(mx.argmax(mx.array(y))) == pos
            assert int(mx.argmin(mx.array(y))) == pos


def test_argmax_signed_zeros_and_infs():
    x = np.zeros(2000, np.float32)
    x[0] = -0.0
    x[700] = 0.0
    assert int(mx.argmax(mx.array(x))) == 0 and int(mx.argmin(mx.array(x))) == 0
    x[1500] = np.inf
    x[1600] = -np.inf
    assert int(mx.argmax(mx.array(x))) == 1500 and int(mx.argmin(mx.array(x))) == 1600
    b = mx.array(x).astype(mx.bfloat16)
    assert int(mx.argmax(b)) == 1500 and int(mx.argmin(b)) == 1600
