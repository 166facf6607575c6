"""float16 reductions through F16C and the vectorised float32 max/min (issue
#15): sum, prod, max, min and mean give the bits of the software path
(MKPY_NO_F16C=1, in a child process), agree with NumPy within float16
rounding, and float32 max/min keep the generic kernel's choices (NaN wins,
the first of equal zeros is kept)."""
import json
import os
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


def test_same_bits_as_the_software_path(software):
    here = json.loads(json.dumps(compute()))
    assert here.keys() == software.keys()
    bad = [k for k in here if here[k] != software[k]]
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
