"""float16 through F16C (issue #15): element-wise ops and casts give the bits
of the software path (MKPY_NO_F16C=1, run in a child process) and of NumPy
where NumPy rounds the same way."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ALL16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
UNARY = ["abs", "negative", "sqrt", "rsqrt", "exp", "expm1", "log", "log1p", "sin", "cos", "tanh", "arctan",
         "erf", "square", "floor", "ceil", "round", "sign", "isnan", "isinf", "sigmoid", "degrees"]
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "arctan2", "remainder",
          "floor_divide", "greater", "less_equal", "equal", "logaddexp"]

F32_EDGES = np.array([0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffbfffff,
                      0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff, 0x47800000,  # around the largest half
                      0x38800000, 0x387fffff, 0x387fe000, 0x33800000, 0x33800001, 0x337fffff, 0x33000000,
                      0x33000001, 0x3f801000, 0x3f803000, 0x3f801001, 0x3f802fff],  # ties and subnormals
                     dtype=np.uint32)


def pairs():
    rng = np.random.default_rng(3)
    b = rng.permutation(ALL16)
    return ALL16, b


def f32_inputs():
    rng = np.random.default_rng(4)
    r = rng.integers(0, 2 ** 32, 300_000, dtype=np.uint64).astype(np.uint32)
    # every float32 that is a tie between two halves, in part of the range
    ties = ((np.arange(0x3f800000 >> 13, (0x3f800000 >> 13) + 2048, dtype=np.uint32) << 13) | 0x1000)
    return np.concatenate([F32_EDGES, r, ties]).view(np.float32)


def compute():
    """Every op's result bits, as lists (json)."""
    x = mx.array(ALL16)
    a, b = pairs()
    ma, mb = mx.array(a), mx.array(b)
    out = {}
    for name in UNARY:
        r = np.array(getattr(mx, name)(x))
        out["u_" + name] = r.view(np.uint16 if r.dtype == np.float16 else np.uint8).tolist()
    # a strided and a broadcast operand
    xs = mx.array(np.stack([ALL16, ALL16[::-1]], axis=1))[:, 1]
    out["u_exp_strided"] = np.array(mx.exp(xs)).view(np.uint16).tolist()
    for name in BINARY:
        r = np.array(getattr(mx, name)(ma, mb))
        out["b_" + name] = r.view(np.uint16 if r.dtype == np.float16 else np.uint8).tolist()
    out["b_mul_bcast"] = np.array(ma * mx.array(np.float16(0.1))).view(np.uint16).tolist()
    out["b_sub_bcast_left"] = np.array(mx.array(np.float16(3.0)) - mb).view(np.uint16).tolist()
    out["to_f32"] = np.array(x.astype(mx.float32)).view(np.uint32).tolist()
    f = f32_inputs()
    out["to_f16"] = np.array(mx.array(f).astype(mx.float16)).view(np.uint16).tolist()
    fs = mx.array(np.stack([f, f], axis=1))[:, 0]  # strided float32 source
    out["to_f16_strided"] = np.array(fs.astype(mx.float16)).view(np.uint16).tolist()
    # chains that write over their own float16 input
    c = mx.exp(mx.array(ALL16) * 0.5) + 1
    out["chain"] = np.array(c).view(np.uint16).tolist()
    return out


@pytest.fixture(scope="module")
def software():
    env = dict(os.environ, MKPY_NO_F16C="1", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = "import json, sys; sys.path.insert(0, %r); import test_half_f16c as t; print(json.dumps(t.compute()))" % (
        os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def here():
    return json.loads(json.dumps(compute()))


def test_same_bits_as_the_software_path(software, here):
    """The same bits, except that a NaN result is compared by NaN-ness only: which operand's NaN an
    op passes on, and with which sign (erf of a negative NaN, say), is the compiler's operand order
    in each clone (AVX2, AVX-512) and not MLX's behaviour. Casts keep their NaN bits: NumPy's are
    pinned in test_casts_match_numpy."""
    assert software.keys() == here.keys()
    bad = []
    for k in here:
        h, s = np.array(here[k]), np.array(software[k])
        if k.startswith(("u_", "b_", "chain")) and h.dtype != np.uint8 and k != "b_logaddexp":
            hn = np.isnan(h.astype(np.uint16).view(np.float16))
            sn = np.isnan(s.astype(np.uint16).view(np.float16))
            if not (np.array_equal(hn, sn) and np.array_equal(h[~hn], s[~sn])):
                bad.append(k)
        elif not np.array_equal(h, s):
            bad.append(k)
    assert not bad, bad


def test_casts_match_numpy(here):
    np.testing.assert_array_equal(np.array(here["to_f32"], np.uint32).view(np.float32), ALL16.astype(np.float32))
    want = f32_inputs().astype(np.float16).view(np.uint16)
    got = np.array(here["to_f16"], np.uint16)
    nan = np.isnan(f32_inputs())
    np.testing.assert_array_equal(got[~nan], want[~nan])
    # a NaN stays a quiet NaN with its sign and high payload bits
    src = f32_inputs().view(np.uint32)[nan]
    np.testing.assert_array_equal(got[nan], ((src >> 16) & 0x8000) | 0x7e00 | ((src >> 13) & 0x3ff))
    np.testing.assert_array_equal(here["to_f16_strided"], here["to_f16"])


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide"])
def test_arithmetic_matches_numpy(here, name):
    a, b = pairs()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a, b)
    got = np.array(here["b_" + name], np.uint16).view(np.float16)
    np.testing.assert_array_equal(got, want)


def test_arithmetic_matches_numpy_broadcast(here):
    a, b = pairs()
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(np.array(here["b_mul_bcast"], np.uint16).view(np.float16), a * np.float16(0.1))
        np.testing.assert_array_equal(np.array(here["b_sub_bcast_left"], np.uint16).view(np.float16),
                                      np.float16(3.0) - b)


EXP_CHILD = r"""
import json, sys
import numpy as np
import mkpy as mx
a = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
out = {"all": np.array(mx.exp(mx.array(a))).view(np.uint16).tolist(),
       # an odd length at an odd offset: every vector tail of the one-pass kernel
       "tails": [np.array(mx.exp(mx.array(a[k:k + n]))).view(np.uint16).tolist()
                 for k, n in ((3, 1), (5, 7), (11, 9), (1, 15), (2, 17), (1000, 31), (31000, 40001))]}
print(json.dumps(out))
"""


@pytest.mark.parametrize("level", ["avx2", "avx512"])
def test_exp_one_pass_kernel_at_each_level(software, level):
    """float16 exp has a one-pass kernel per instruction-set level (half_fast.c): every float16
    input gives the software path's bits (a NaN by NaN-ness, as above), also at odd offsets and
    lengths, where the vectors have tails."""
    env = dict(os.environ, MKPY_ISA=level, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("MKPY_NO_F16C", None)
    p = subprocess.run([sys.executable, "-c", EXP_CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.splitlines()[-1])
    want = np.array(software["u_exp"], np.uint16)
    nan = np.isnan(want.view(np.float16))
    h = np.array(got["all"], np.uint16)
    np.testing.assert_array_equal(np.isnan(h.view(np.float16)), nan)
    np.testing.assert_array_equal(h[~nan], want[~nan])
    for (k, n), t in zip(((3, 1), (5, 7), (11, 9), (1, 15), (2, 17), (1000, 31), (31000, 40001)), got["tails"]):
        np.testing.assert_array_equal(np.array(t, np.uint16), h[k:k + n])
