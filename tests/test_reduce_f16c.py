"""float16 reductions through F16C and the vectorised float32 max/min (issue
#15): sum, prod, max, min, mean, argmax and argmin give the bits of the
software path (MKPY_NO_F16C=1, in a child process) over rows, leading axes
(column mode), middle axes, several axes, keepdims and strided or transposed
inputs, agree with NumPy within float16 rounding, and float32 max/min keep
the generic kernel's choices (NaN wins, the first of equal zeros is kept).
bfloat16 reductions (widened by a shift into the float32 kernels) give the
bits of the float32 kernels on the widened input."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import mkpy as mx

HERE = os.path.dirname(os.path.abspath(__file__))

SHAPES = [(5000,), (1000, 37), (37, 1000), (3, 40, 17), (200_000,), (2, 7), (9,), (33, 2049), (0,), (16,), (17,)]
OPS = ["sum", "prod", "max", "min", "mean"]


def inputs():
    rng = np.random.default_rng(11)
    out = []
    for dt in (np.float16, np.float32):
        for shape in SHAPES:
            a = (rng.standard_normal(shape) * 4).astype(dt)
            if a.size > 100:
                a.flat[7] = np.nan
                a.flat[50] = -np.inf
                a.flat[60] = 0.0
                a.flat[61] = -0.0
            z = np.full(shape, -0.0, dt)
            z.flat[::3] = 0.0
            out += [a, z]
    sig = np.full(64, 1.0, np.float16)
    sig.view(np.uint16)[5] = 0x7D01  # a signalling NaN: the software widening keeps it
    out.append(sig)
    return out


def compute():
    res = {}
    for i, a in enumerate(inputs()):
        m = mx.array(a)
        for op in OPS:
            if a.size == 0 and op in ("max", "min"):
                continue
            for ax in [None] + list(range(a.ndim)):
                r = getattr(mx, op)(m) if ax is None else getattr(mx, op)(m, axis=ax)
                r = np.array(r)
                res["%d_%s_%s" % (i, op, ax)] = r.view(np.uint16 if r.dtype == np.float16 else np.uint32).tolist()
    # a strided float16 source (every other element)
    h = np.random.default_rng(2).standard_normal((300, 64)).astype(np.float16)
    s = mx.array(h)[:, ::2]
    for op in OPS:
        res["strided_" + op] = np.array(getattr(mx, op)(s, axis=1)).view(np.uint16).tolist()
    res.update(compute_axes(np.float16))
    res.update(compute_scans())
    return res


def compute_scans():
    # float16 cumsum/cumprod/cummax/cummin (F16C: runs widened, the running value rounded
    # by vcvtps2ph) against the software kernels: lines of lanes (leading axes), single
    # lines (the last axis, reversed too), a last block of one lane, strided input
    rng = np.random.default_rng(9)
    res = {}
    for j, (shape, axis) in enumerate([((300, 70), 0), ((7, 900), 1), ((40, 257), 0), ((3, 20, 33), 1), ((5000,), 0)]):
        a = (rng.standard_normal(shape) * 2).astype(np.float16)
        f = a.reshape(-1)
        f[13] = np.nan
        f[len(f) // 2] = np.inf
        f.view(np.uint16)[len(f) // 3] = 0x7D01  # a signalling NaN
        for v in ("", "T"):
            m = mx.array(a)
            if v:
                m = mx.transpose(mx.array(np.ascontiguousarray(np.swapaxes(a, 0, -1))), list(range(a.ndim))[::-1])
            for op in ("cumsum", "cumprod", "cummax", "cummin"):
                for rev in (False, True):
                    for incl in (True, False):
                        r = getattr(mx, op)(m, axis=axis, reverse=rev, inclusive=incl)
                        res["scan%d%s_%s_%s_%s" % (j, v, op, rev, incl)] = bits(r)
    return res


# (shape, view, axes): view is applied to the mkpy array; axes as passed
AXIS_CASES = [
    ((300, 70), None, 0),         # column mode, one piece of columns
    ((130, 1100), None, 0),       # several pieces, COLB blocks crossed
    ((600, 700), None, 0),        # the reduced range split into parts
    ((5, 9), None, 0),            # narrow: the per-element column loop
    ((4, 150, 40), None, 1),      # a middle axis
    ((6, 300, 33), None, (0, 1)),  # two leading axes merged
    ((40, 60, 50), "head", (0, 1)),  # two reduced dims that do not merge
    ((200, 90), "cols2", 0),      # strided columns (column mode, stride 2)
    ((200, 90), "rows2", 0),      # every other row
    ((90, 200), "T", 0),          # a transposed input
    ((90, 200), "T", 1),
    ((3, 50, 70), "T3", 1),
]
AXIS_OPS = ["sum", "prod", "max", "min", "mean", "argmax", "argmin"]


def view(m, v):
    if v == "head":
        return m[:, :30, :]
    if v == "cols2":
        return m[:, ::2]
    if v == "rows2":
        return m[::2]
    if v == "T":
        return m.T
    if v == "T3":
        return mx.transpose(m, (2, 0, 1))
    return m


def axis_inputs(dt):
    rng = np.random.default_rng(5)
    out = []
    for shape, v, axes in AXIS_CASES:
        a = (rng.standard_normal(shape) * 3).astype(np.float32)
        if a.size > 1000:
            f = a.reshape(-1)
            f[11] = np.nan
            f[a.shape[-1] + 3] = -np.inf
            f[2 * a.shape[-1] + 5] = np.inf
            f[3 * a.shape[-1] + 1] = 0.0
            f[4 * a.shape[-1] + 1] = -0.0
        out.append((a, v, axes))
    # a big term that a later one cancels: the float rounding of the small terms summed
    # with it shows in the result, so the grouping of terms (blocks of rows at fixed
    # positions of the reduced range) must be the software path's
    # (the big term at reduced index 120 = 4 * 30: a block ends at 128 inside that run of 30)
    for shape, v, axes, big in [((300, 40), None, 0, (0,)), ((40, 60, 50), "head", (0, 1), (4, 0))]:
        a = np.full(shape, 3 * 2.0 ** -12, np.float32)
        a[big] = 4096
        a[(shape[0] - 1,) + ((29,) if v == "head" else ())] = -4096
        out.append((a, v, axes))
    # signalling NaNs in a column (the software widening keeps them)
    sig = np.ones((40, 64), np.float16)
    sig.view(np.uint16)[7, 9] = 0x7D01
    sig.view(np.uint16)[30, 20] = 0xFD02
    out.append((sig, None, 0))
    return out


def to_mx(a, dt):
    if dt == np.float16 or a.dtype == np.float16:
        return mx.array(a.astype(np.float16))
    return mx.array(a).astype(mx.bfloat16)


def bits(r):
    r = np.array(r) if not isinstance(r, mx.array) or r.dtype != mx.bfloat16 else np.array(r.view(mx.uint16))
    return r.view(np.uint16 if r.dtype in (np.float16, np.uint16) else np.uint32).tolist()


def compute_axes(dt):
    res = {}
    for i, (a, v, axes) in enumerate(axis_inputs(dt)):
        m = view(to_mx(a, dt), v)
        for op in AXIS_OPS:
            for keep in (False, True):
                if op.startswith("arg") and isinstance(axes, tuple):
                    continue
                r = getattr(mx, op)(m, axis=axes, keepdims=keep)
                res["ax%d_%s_%s_%s" % (i, op, axes, keep)] = bits(r)
    return res


@pytest.fixture(scope="module")
def software():
    # the child imports the same mkpy build as this process (a sanitizer build too)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(mx.__file__)))
    env = dict(os.environ, MKPY_NO_F16C="1", PYTHONPATH=pkg_root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = ("import json, sys; sys.path[:0] = [%r, %r]; import test_reduce_f16c as t; "
            "print(json.dumps(t.compute()))" % (pkg_root, HERE))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.splitlines()[-1])


ARITH = re.compile(r"_(sum|prod|mean|cumsum|cumprod)(_|$)")


def nan_bits(b, half):
    return (b & 0x7C00) == 0x7C00 and b & 0x3FF if half else (b & 0x7F800000) == 0x7F800000 and b & 0x7FFFFF


def same_bits(key, a, b):
    """Equal bits; where sums and products give NaN, equal NaN-ness: when two NaNs meet (a NaN of the
    data and the one inf * 0 makes), the result is the first source operand of the instruction, an
    operand order the compiler picks per kernel (gcc 14 picked other orders for the float16 and the
    float32 product kernels: 0x7e00 against 0xfe00). Selections (max, min, args, cummax) keep their
    bits, a signalling NaN too."""
    a, b = (a, b) if isinstance(a, list) else ([a], [b])
    if a == b:
        return True
    if len(a) != len(b) or not ARITH.search(key):
        return False
    half = max(a + b) <= 0xFFFF  # float16 bits (a float32 NaN is above 0xFFFF)
    return all(x == y or (nan_bits(x, half) and nan_bits(y, half)) for x, y in zip(a, b))


def test_same_bits_as_the_software_path(software):
    here = json.loads(json.dumps(compute()))
    assert here.keys() == software.keys()
    bad = [k for k in here if not same_bits(k, here[k], software[k])]
    assert not bad, bad[:10]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_float16_reductions_match_numpy(op, axis):
    a = (np.random.default_rng(7).standard_normal((257, 1031)) * 2).astype(np.float16)
    if op == "prod":
        a = (1 + a.astype(np.float32) / 64).astype(np.float16)
    got = np.array(getattr(mx, op)(mx.array(a), axis=axis)).astype(np.float64)
    want = getattr(np, op)(a.astype(np.float64), axis=axis)
    if op in ("max", "min"):
        assert np.array_equal(got, want)
    else:
        # float32 lanes into a double, rounded once to float16
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3 if op != "sum" else 0.5)


@pytest.mark.parametrize("dt", [np.float16, np.float32])
def test_max_min_nan_and_zeros(dt):
    a = np.arange(5000, dtype=dt) % 100
    a[4321] = np.nan
    assert np.isnan(np.array(mx.max(mx.array(a))))
    assert np.isnan(np.array(mx.min(mx.array(a))))
    rows = np.array(mx.max(mx.array(a.reshape(50, 100)), axis=1))
    assert np.isnan(rows[43]) and not np.isnan(np.delete(rows, 43)).any()
    z = np.zeros(4096, dt)
    z[1::2] = -0.0
    assert not np.signbit(np.array(mx.max(mx.array(z))))  # the first zero (+0) is kept
    z2 = -z
    assert np.signbit(np.array(mx.min(mx.array(z2))))  # the first zero (-0) is kept
    inf = np.full(100, -np.inf, dt)
    assert np.array(mx.max(mx.array(inf))) == -np.inf


def test_bfloat16_gives_the_float32_kernels_bits():
    # widening bfloat16 is exact, and its kernels have the float32 ones' lanes, blocks and
    # accumulators: the result is the float32 reduction of the widened input, rounded once
    for a, v, axes in axis_inputs(np.float32) + [(a.astype(np.float32), None, None) for a in inputs()[:12]]:
        if a.dtype == np.float16 and v is None and axes == 0:  # the signalling NaN case is float16 only
            continue
        b = mx.array(a).astype(mx.bfloat16)
        m = view(b, v)
        w = view(b.astype(mx.float32), v)  # the same layout: the same order of terms
        for op in ["sum", "prod", "max", "min", "argmax", "argmin"]:
            if a.size == 0 and op != "sum" and op != "prod":
                continue
            if op.startswith("arg") and isinstance(axes, tuple):
                continue
            got = getattr(mx, op)(m, axis=axes)
            want = getattr(mx, op)(w, axis=axes)
            if not op.startswith("arg"):
                want = want.astype(mx.bfloat16)
            assert bits(got) == bits(want), (a.shape, v, axes, op)


@pytest.mark.parametrize("dt", [np.float16, np.float32])
@pytest.mark.parametrize("op", ["sum", "max", "argmax", "argmin"])
def test_columns_match_numpy(op, dt):
    # float16 columns (F16C widening), float32 arg columns (vector compares and blends):
    # ties keep the first row, a nan wins (the first nan), as NumPy
    a = (np.random.default_rng(3).standard_normal((700, 300)) * 2).astype(np.float16).astype(dt)
    a[5, 7] = a[600, 7] = np.nan
    a[650, 8] = np.nan
    a[:, 9] = 1.0
    a[[3, 400], 10] = 9.0
    for axes, v in [(0, lambda x: x), (1, lambda x: x.T), (0, lambda x: x[:, ::3])]:
        got = np.array(getattr(mx, op)(v(mx.array(a)), axis=axes))
        want = getattr(np, op)(v(a).astype(np.float64), axis=axes)
        if op == "sum":
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=0.5)
        else:
            assert np.array_equal(got, want, equal_nan=op == "max")
