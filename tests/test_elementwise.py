"""Element-wise ops: every op of MK_UNARY_OPS / MK_BINARY_OPS plus where,
clip, round(decimals) and isclose, against NumPy across dtypes; result
dtypes and error messages as MLX 0.32 gives them (baked in); operators
with scalars on either side, broadcasting, strided inputs and IEEE and
integer edge cases."""
import math
import operator

import numpy as np
import pytest

import mkpy as mx

DTYPES = [mx.bool_, mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.int16, mx.int32,
          mx.int64, mx.float16, mx.float32, mx.float64, mx.bfloat16, mx.complex64]
ABBR = ["b_", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f2", "f4", "f8", "bf", "c8"]
BY_ABBR = dict(zip(ABBR, DTYPES))
NP = {mx.bool_: np.bool_, mx.uint8: np.uint8, mx.uint16: np.uint16, mx.uint32: np.uint32,
      mx.uint64: np.uint64, mx.int8: np.int8, mx.int16: np.int16, mx.int32: np.int32,
      mx.int64: np.int64, mx.float16: np.float16, mx.float32: np.float32,
      mx.float64: np.float64, mx.bfloat16: np.float32, mx.complex64: np.complex64}
INTS = [mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.int16, mx.int32, mx.int64]
FLOATS = [mx.float16, mx.float32, mx.float64, mx.bfloat16]
nan, inf = float("nan"), float("inf")

# Result dtype of op(x) / op(x, x) for x of each dtype (DTYPES order), or E
# for an error, from MLX 0.32.
RESULT_DTYPES = {
    "abs": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf f4",
    "negative": "E u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "sign": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "square": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "sqrt": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "rsqrt": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "reciprocal": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "exp": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "expm1": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf E",
    "log": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "log1p": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "log2": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "log10": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "sin": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "cos": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "tan": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "arcsin": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "arccos": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "arctan": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "sinh": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "cosh": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "tanh": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "arcsinh": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "arccosh": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "arctanh": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "sigmoid": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf E",
    "erf": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf E",
    "erfinv": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf E",
    "floor": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf E",
    "ceil": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf E",
    "isnan": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "isinf": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "isfinite": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "isposinf": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "isneginf": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "logical_not": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "bitwise_invert": "b_ u1 u2 u4 u8 i1 i2 i4 i8 E E E E E",
    "real": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf f4",
    "imag": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf f4",
    "conjugate": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "degrees": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "radians": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "stop_gradient": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "round": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "add": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "subtract": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "multiply": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "divide": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
    "floor_divide": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "remainder": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf E",
    "power": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "arctan2": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf E",
    "maximum": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "minimum": "b_ u1 u2 u4 u8 i1 i2 i4 i8 f2 f4 f8 bf c8",
    "equal": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "not_equal": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "greater": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "greater_equal": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "less": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "less_equal": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "logical_and": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "logical_or": "b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_ b_",
    "bitwise_and": "b_ u1 u2 u4 u8 i1 i2 i4 i8 E E E E E",
    "bitwise_or": "b_ u1 u2 u4 u8 i1 i2 i4 i8 E E E E E",
    "bitwise_xor": "b_ u1 u2 u4 u8 i1 i2 i4 i8 E E E E E",
    "left_shift": "u1 u1 u2 u4 u8 i1 i2 i4 i8 E E E E E",
    "right_shift": "u1 u1 u2 u4 u8 i1 i2 i4 i8 E E E E E",
    "logaddexp": "f4 f4 f4 f4 f4 f4 f4 f4 f4 f2 f4 f8 bf c8",
}
UNARY = list(RESULT_DTYPES)[:44]
BINARY = list(RESULT_DTYPES)[44:]


def to_np(x):
    if x.dtype == mx.bfloat16:
        x = x.astype(mx.float32)
    return np.array(x)


def rounded(vals, t):
    """vals as NumPy values of t's precision (bfloat16 through mkpy)."""
    if t == mx.bfloat16:
        return to_np(mx.array(np.asarray(vals, np.float32)).astype(mx.bfloat16))
    with np.errstate(over="ignore"):
        return np.asarray(vals).astype(NP[t])


def tol(t):
    return {mx.float16: 2e-3, mx.bfloat16: 1.6e-2, mx.float32: 2e-6, mx.float64: 1e-12,
            mx.complex64: 2e-6}.get(t, 0)


def assert_close(got, expect, t, atol=None):
    assert isinstance(got, mx.array)
    g = to_np(got)
    e = np.asarray(expect)
    assert g.shape == e.shape
    if got.dtype in (mx.bool_,) or got.dtype in INTS:
        np.testing.assert_array_equal(g, e)
    else:
        r = tol(t) or 2e-6
        np.testing.assert_allclose(g, e.astype(g.dtype), rtol=r, atol=r if atol is None else atol,
                                   equal_nan=True)


# ------------------------------------------------------------ result dtypes

UNARY_ERRORS = {
    ("negative", mx.bool_): "[negative] Not supported for bool, use logical_not instead.",
    ("expm1", mx.complex64): "[expm1] Not supported for complex64.",
    ("sigmoid", mx.complex64): "[sigmoid] Not supported for complex64.",
    ("erf", mx.complex64): "[erf] Not supported for complex64.",
    ("erfinv", mx.complex64): "[erfinv] Not supported for complex64.",
    ("floor", mx.complex64): "[floor] Not supported for complex64.",
    ("ceil", mx.complex64): "[ceil] Not supported for complex64.",
}


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("op", list(RESULT_DTYPES))
def test_result_dtypes_and_errors(op):
    n = 1 if op in UNARY else 2
    for t, expect in zip(DTYPES, RESULT_DTYPES[op].split()):
        x = mx.array([1], t)
        if expect == "E":
            if op == "bitwise_invert":
                exc, msg = ValueError, "[bitwise_invert] Bitwise inverse only allowed on integer types."
            elif op == "remainder":
                exc, msg = ValueError, "[remainder] Complex type not supported."
            elif op == "arctan2":
                exc, msg = ValueError, "[arctan2] Not supported for complex64."
            elif op in BINARY:
                name = str(t).split(".")[-1]
                exc, msg = RuntimeError, (f"[{op}] Only allowed on integer or boolean types but got types "
                                          f"{name} and {name}.")
            else:
                exc, msg = ValueError, UNARY_ERRORS[op, t]
            with pytest.raises(exc) as e:
                getattr(mx, op)(*[x] * n)
            assert str(e.value) == msg
        else:
            assert getattr(mx, op)(*[x] * n).dtype == BY_ABBR[expect], (op, t)


# ---------------------------------------------------------- unary vs NumPy

FVALS = [0.0, -0.0, 0.25, -0.5, 0.75, 1.0, -1.0, 1.5, -2.5, 2.5, 3.7, -3.7, 10.0, 0.999, -0.999, 1e-3]
IVALS = [0, 1, 2, 3, 7, 100, 127]
SIGNED_IVALS = IVALS + [-1, -2, -7, -100, -128]


def unary_inputs(t):
    if t == mx.bool_:
        return [True, False, True]
    if t in INTS:
        return SIGNED_IVALS if str(t).startswith("mkpy.int") else IVALS
    if t == mx.complex64:
        return [0j, 1 + 1j, -1 - 2j, 0.5j, 3 + 0j, 2 - 3j, -0.25 + 0.75j]
    return FVALS


def erf(v):
    return np.vectorize(math.erf, otypes=[np.float64])(v)


def sign_mlx(v):
    return (v > 0).astype(v.dtype) - (v < 0).astype(v.dtype)


def sign_complex(v):
    a = np.abs(v)
    return np.where(a == 0, 0, v / np.where(a == 0, 1, a))


# NumPy reference per op; math ops see integers as float32 (MLX)
NP_UNARY = {
    "abs": np.abs, "negative": np.negative, "square": np.square, "sqrt": np.sqrt,
    "rsqrt": lambda v: 1 / np.sqrt(v), "reciprocal": lambda v: 1 / v, "exp": np.exp,
    "expm1": np.expm1, "log": np.log, "log1p": np.log1p, "log2": np.log2, "log10": np.log10,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "arcsin": np.arcsin, "arccos": np.arccos,
    "arctan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh,
    "arcsinh": np.arcsinh, "arccosh": np.arccosh, "arctanh": np.arctanh,
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "erf": erf, "floor": np.floor, "ceil": np.ceil,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "isposinf": np.isposinf,
    "isneginf": np.isneginf, "logical_not": np.logical_not, "bitwise_invert": np.invert,
    "real": np.real, "imag": np.imag, "conjugate": np.conjugate, "degrees": np.degrees,
    "radians": np.radians, "stop_gradient": lambda v: v, "round": np.rint,
}
NP_UNARY_COMPLEX = {
    "degrees": lambda v: v * np.complex64(180 / np.pi), "radians": lambda v: v * np.complex64(np.pi / 180),
}


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("op", [op for op in UNARY if op not in ("sign", "erfinv")])
@pytest.mark.parametrize("t", DTYPES, ids=ABBR)
def test_unary_vs_numpy(op, t):
    if RESULT_DTYPES[op].split()[DTYPES.index(t)] == "E":
        return
    vals = unary_inputs(t)
    x = mx.array(vals, t)
    v = rounded(vals, t)
    out_t = BY_ABBR[RESULT_DTYPES[op].split()[DTYPES.index(t)]]
    if out_t in FLOATS + [mx.complex64] and v.dtype.kind in "biu":
        v = v.astype(np.float32)  # integers and bool compute in float32
    if t == mx.complex64 and op in ("isposinf", "isneginf"):
        expect = v == complex(inf if op == "isposinf" else -inf, 0)
    elif op in ("isposinf", "isneginf") and v.dtype.kind in "biu":
        expect = np.zeros(v.shape, bool)
    elif t == mx.complex64 and op in ("isnan", "isinf", "isfinite"):
        expect = getattr(np, op)(v)
    else:
        with np.errstate(all="ignore"):
            fn = NP_UNARY_COMPLEX.get(op, NP_UNARY[op]) if t == mx.complex64 else NP_UNARY[op]
            expect = fn(v)
    if t == mx.float16 or t == mx.bfloat16:
        # computed in float32 from the rounded inputs, rounded once
        with np.errstate(all="ignore"):
            expect = NP_UNARY[op](v.astype(np.float32)) if out_t not in (mx.bool_,) else expect
        expect = rounded(expect, out_t) if out_t in (mx.float16, mx.bfloat16) else expect
    got = getattr(mx, op)(x)
    assert got.dtype == out_t
    # MLX computes float64 exp/erf/erfinv/sigmoid around its float exp (tests/test_mlx_math.py)
    check_t = mx.float32 if t == mx.float64 and op in ("exp", "erf", "erfinv", "sigmoid") else out_t
    assert_close(got, expect, check_t if out_t != mx.bool_ else t, atol=1e-6 if t == mx.float64 else None)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("t", DTYPES, ids=ABBR)
def test_sign(t):
    vals = unary_inputs(t)
    x = mx.array(vals, t)
    v = rounded(vals, t)
    if t == mx.bool_:
        expect = v
    elif t == mx.complex64:
        expect = sign_complex(v)
    else:
        expect = sign_mlx(v)
    assert_close(mx.sign(x), expect, t)
    # MLX's sign: (x > 0) - (x < 0), so nan and -0 give 0
    if t in FLOATS:
        assert mx.sign(mx.array([nan, -0.0, inf, -inf], t)).tolist() == [0.0, 0.0, 1.0, -1.0]
    s = mx.sign(mx.array([complex(inf, 0), complex(0, nan)])).tolist()
    assert all(math.isnan(z.real) and math.isnan(z.imag) for z in s)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("t", FLOATS, ids=["f2", "f4", "f8", "bf"])
def test_erfinv(t):
    vals = [-0.999, -0.9, -0.5, -0.1, 0.0, 0.1, 0.5, 0.9, 0.999]
    y = mx.erfinv(mx.array(vals, t))
    back = erf(to_np(y).astype(np.float64))
    # MLX's float64 erfinv is its float approximation
    t_tol = tol(mx.float32) if t == mx.float64 else tol(t)
    np.testing.assert_allclose(back, rounded(vals, t), rtol=t_tol * 4, atol=t_tol * 4)
    r = mx.erfinv(mx.array([-1.0, 1.0, 2.0, -1.5], t)).tolist()
    assert r[0] == -inf and r[1] == inf and math.isnan(r[2]) and math.isnan(r[3])
    # integers go through float32
    assert mx.erfinv(mx.array([0, 1])).tolist() == [0.0, inf]


def test_unary_math_on_integers_uses_float32():
    x = mx.array([1, 4, 9], mx.int64)
    assert mx.sqrt(x).dtype == mx.float32 and mx.sqrt(x).tolist() == [1.0, 2.0, 3.0]
    assert mx.exp(mx.array([True])).item() == pytest.approx(math.e, rel=1e-6)
    assert mx.reciprocal(mx.array([4, 0])).tolist() == [0.25, inf]
    assert mx.rsqrt(mx.array([4, 0])).tolist() == [0.5, inf]


def test_unary_on_scalars_and_numpy():
    assert mx.exp(1).dtype == mx.float32
    assert mx.abs(-5).item() == 5
    assert mx.abs(-2**40).dtype == mx.int64
    assert mx.abs(np.float64(-5.5)).dtype == mx.float32
    assert mx.abs(np.int8(-5)).dtype == mx.int8
    assert mx.exp(np.array([1.0, 2.0])).shape == (2,)
    assert mx.sqrt(b"\x04").tolist() == [2.0]
    # lists are not array arguments, as in MLX
    with pytest.raises(ValueError, match=r"^Invalid type list received in array initialization\.$"):
        mx.exp([1, 2])
    with pytest.raises(ValueError, match=r"^Invalid type str received in array initialization\.$"):
        mx.exp("a")
    with pytest.raises(TypeError):
        mx.exp(None)
    with pytest.raises(OverflowError, match="does not fit int64"):
        mx.exp(2**70)


def test_complex_unary_specials():
    # nan and inf parts follow C99's complex functions, as MLX
    s = mx.sin(mx.array([complex(0, nan)])).item()
    assert s.real == 0 and math.isnan(s.imag)
    c = mx.cos(mx.array([complex(0, nan)])).item()
    assert math.isnan(c.real) and c.imag == 0
    assert mx.array([complex(-inf, nan)]).item().real == -inf  # built without mixing the parts
    # real, imag and conj of real arrays
    x = mx.array([1, -2], mx.int16)
    assert mx.real(x).tolist() == [1, -2] and mx.real(x).dtype == mx.int16
    assert mx.imag(x).tolist() == [0, 0] and mx.imag(x).dtype == mx.int16
    assert mx.conj(x).tolist() == [1, -2] and mx.conjugate(x).dtype == mx.int16
    assert mx.imag(mx.array([True])).tolist() == [False]
    c = mx.array([1 + 2j, -3 - 4j])
    assert c.real.tolist() == [1.0, -3.0] and c.imag.tolist() == [2.0, -4.0]
    assert c.real.dtype == mx.float32
    assert mx.conj(c).tolist() == [1 - 2j, -3 + 4j]
    assert mx.abs(c).tolist() == [pytest.approx(5 ** 0.5), 5.0]
    assert mx.isposinf(mx.array([complex(inf, -0.0), complex(inf, 1)])).tolist() == [True, False]
    assert mx.isneginf(mx.array([complex(-inf, 0)])).tolist() == [True]
    assert mx.isinf(mx.array([complex(0, inf)])).tolist() == [True]
    assert mx.degrees(mx.array([1 + 1j])).item() == pytest.approx(57.29578 + 57.29578j)


def test_round_half_to_even():
    x = mx.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6])
    assert mx.round(x).tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0]
    assert mx.round(mx.array([1.5 + 2.5j])).tolist() == [2 + 2j]
    assert mx.round(mx.array([3, -4], mx.int8)).tolist() == [3, -4]
    assert mx.round(2.5).item() == 2.0


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_round_decimals():
    # MLX: round(x * s) * (1 / s) with s = 10^d a float, in at least float32,
    # then back to the input dtype
    assert mx.round(mx.array([1.25, 2.5, -0.5, 3.14159]), 1).tolist() == pytest.approx(
        [1.2, 2.5, -0.5, 3.1], rel=1e-6)
    assert mx.round(mx.array([125, 250, -55, 15]), -1).tolist() == [120, 250, -60, 20]
    assert mx.round(mx.array([125, 250, -55]), 1).tolist() == [125, 250, -55]
    assert mx.round(mx.array([123456789]), 1).tolist() == [123456792]
    assert mx.round(mx.array([1.25, 2.5], mx.float16), 1).tolist() == [1.19921875, 2.5]
    assert mx.round(mx.array([1.25, 2.5], mx.bfloat16), 1).tolist() == [1.203125, 2.5]
    assert mx.round(mx.array([1255.5, 2.5]), -2).tolist() == [1300.0, 0.0]
    assert mx.round(mx.array([1.005, 2.675], mx.float64), 2).tolist() == [0.9999999776482582, 2.679999940097332]
    assert mx.round(mx.array([1.55 + 2.45j]), 1).item() == pytest.approx(1.6 + 2.4j, rel=1e-6)
    assert mx.round(mx.array([True, False]), 1).tolist() == [True, False]
    assert mx.round(mx.array([125, 250], mx.uint8), -1).tolist() == [120, 250]
    assert mx.round(mx.array([1.55]), decimals=1).item() == pytest.approx(1.6)
    assert mx.array([1.55]).round(1).item() == pytest.approx(1.6)
    assert mx.round(mx.array([1.2345678]), 10).tolist() == [1.2345677614212036]
    assert mx.round(mx.array([1, 2], mx.int64), 2).dtype == mx.int64
    with pytest.raises(TypeError):
        mx.round(mx.array([1.5]), 1.5)
    with pytest.raises(ValueError, match="Invalid type list"):
        mx.round([1.5])


# --------------------------------------------------------- binary vs NumPy

def binary_inputs(t):
    """Two same-length inputs; b has no zeros (division tested apart)."""
    if t == mx.bool_:
        return [True, False, True, False], [True, True, False, False]
    if t in (mx.uint8, mx.uint16, mx.uint32, mx.uint64):
        return [0, 1, 2, 3, 7, 100, 200, 255], [1, 3, 2, 5, 7, 9, 100, 1]
    if t in (mx.int8, mx.int16, mx.int32, mx.int64):
        return [0, 1, -2, 3, -7, 100, -128, 127], [1, -3, 2, 5, -7, 9, 100, -1]
    if t == mx.complex64:
        return [0j, 1 + 1j, -1 - 2j, 0.5j, 3 + 0j, 2 - 3j], [1 + 0j, 2 - 1j, -1 + 0.5j, 1j, 0.5 + 0.5j, -2 + 0j]
    return ([0.0, -0.0, 0.5, -1.5, 2.5, 3.7, -3.7, 10.0, 1e-3, 100.0],
            [1.0, -2.0, 0.25, 1.5, -2.5, 2.0, 0.3, 3.0, -1e-3, 7.0])


def logaddexp(a, b):
    return np.logaddexp(a, b)


NP_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.true_divide,
    "floor_divide": np.floor_divide, "remainder": np.remainder, "power": np.power,
    "arctan2": np.arctan2, "maximum": np.maximum, "minimum": np.minimum, "equal": np.equal,
    "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
    "less": np.less, "less_equal": np.less_equal, "logical_and": np.logical_and,
    "logical_or": np.logical_or, "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor, "left_shift": np.left_shift, "right_shift": np.right_shift,
    "logaddexp": logaddexp,
}


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("t", DTYPES, ids=ABBR)
def test_binary_vs_numpy(op, t):
    expect_t = RESULT_DTYPES[op].split()[DTYPES.index(t)]
    if expect_t == "E":
        return
    out_t = BY_ABBR[expect_t]
    av, bv = binary_inputs(t)
    if op in ("left_shift", "right_shift"):
        bits = 8 if t == mx.bool_ else t.size * 8
        bv = [abs(int(v)) % bits for v in bv]  # in-range shift counts
    if op == "power" and t in INTS:
        bv = [abs(int(v)) % 5 for v in bv]  # NumPy refuses negative integer powers
    a, b = mx.array(av, t), mx.array(bv, t)
    x, y = rounded(av, t), rounded(bv, t)
    if out_t in FLOATS + [mx.complex64] and x.dtype.kind in "biu":
        x, y = x.astype(np.float32), y.astype(np.float32)
    if t == mx.bool_ and op in ("add", "subtract", "multiply", "floor_divide", "remainder", "power"):
        # bool arithmetic stays bool in MLX: or, xor, and, and, and-not, or-not
        expect = {"add": x | y, "subtract": x ^ y, "multiply": x & y, "floor_divide": x & y,
                  "remainder": x & ~y, "power": x | ~y}[op]
    elif t == mx.bool_ and op in ("left_shift", "right_shift"):
        expect = NP_BINARY[op](x.astype(np.uint8), y.astype(np.uint8))
    elif t == mx.complex64 and op == "floor_divide":
        expect = x / y  # MLX divides complex numbers without flooring
    elif t == mx.complex64 and op == "logaddexp":
        hi = np.where((x.real > y.real) | ((x.real == y.real) & (x.imag > y.imag)), x, y)
        lo = np.where((x.real < y.real) | ((x.real == y.real) & (x.imag < y.imag)), x, y)
        expect = hi + np.log1p(np.exp(lo - hi))
    else:
        with np.errstate(all="ignore"):
            xs, ys = (x.astype(np.float32), y.astype(np.float32)) if t in (mx.float16, mx.bfloat16) else (x, y)
            expect = NP_BINARY[op](xs, ys)
    if out_t in (mx.float16, mx.bfloat16):
        expect = rounded(expect, out_t)
    got = getattr(mx, op)(a, b)
    assert got.dtype == out_t
    # MLX's float64 logaddexp takes its exp in float (tests/test_mlx_math.py has its bits)
    assert_close(got, expect, mx.float32 if op == "logaddexp" and t == mx.float64 else t)


def test_integer_arithmetic_wraps():
    assert (mx.array([127], mx.int8) + mx.array([1], mx.int8)).tolist() == [-128]
    assert (mx.array([0], mx.uint8) - mx.array([1], mx.uint8)).tolist() == [255]
    assert (mx.array([2**62], mx.int64) * mx.array([4], mx.int64)).tolist() == [0]
    assert mx.negative(mx.array([1], mx.uint8)).tolist() == [255]
    assert mx.abs(mx.array([-128], mx.int8)).tolist() == [-128]
    assert mx.square(mx.array([16], mx.int8)).tolist() == [0]
    assert mx.power(mx.array([2], mx.uint8), mx.array([9], mx.uint8)).tolist() == [0]
    assert mx.power(mx.array([3], mx.int64), mx.array([40], mx.int64)).tolist() == [-6289078614652622815]
    # negative integer powers give 0 (MLX)
    assert mx.power(mx.array([2, 3, -2, 0, 1, -1]), mx.array([-1, -2, -1, -1, -1, -1])).tolist() == [0] * 6
    assert mx.power(mx.array([0]), mx.array([0])).tolist() == [1]


@pytest.mark.parametrize("t", INTS + [mx.bool_], ids=lambda t: str(t))
def test_integer_division_by_zero(t):
    a = mx.array([5, 0, 7], t) if t != mx.bool_ else mx.array([True, False, True])
    z = mx.array([0, 0, 0], t)
    assert (a // z).tolist() == [0, 0, 0] if t != mx.bool_ else [False] * 3
    # MLX's remainder by zero gives the dividend
    assert (a % z).tolist() == a.tolist()
    assert (a / z).tolist()[0] == inf and math.isnan((a / z).tolist()[1])
    if t in (mx.int8, mx.int16, mx.int32, mx.int64):
        n = mx.array([-5], t)
        assert (n // mx.array([0], t)).tolist() == [0] and (n % mx.array([0], t)).tolist() == [-5]
    if t in (mx.uint8, mx.uint32, mx.uint64):
        n = mx.array([-5], mx.int64).astype(t)
        assert (n % mx.array([0], t)).tolist() == n.tolist()


@pytest.mark.parametrize("t,lo", [(mx.int8, -128), (mx.int16, -2**15), (mx.int32, -2**31), (mx.int64, -2**63)])
def test_int_min_floor_divide_minus_one(t, lo):
    # does not trap (MLX's CPU build crashes on int32 and int64); wraps
    a, m1 = mx.array([lo, lo], t), mx.array([-1, 1], t)
    assert (a // m1).tolist() == [lo, lo]
    assert (a % m1).tolist() == [0, 0]
    assert (a * m1).tolist() == [lo, lo]
    assert (-a).tolist() == [lo, lo]


def test_floor_divide_and_remainder_signs():
    a, b = mx.array([7, -7, 7, -7]), mx.array([3, 3, -3, -3])
    assert (a % b).tolist() == [1, 2, -2, -1] and (a // b).tolist() == [2, -3, -3, 2]
    f, g = mx.array([5.5, -5.5, 5.5, -5.5]), mx.array([2.0, 2.0, -2.0, -2.0])
    assert (f % g).tolist() == [1.5, 0.5, -0.5, -1.5] and (f // g).tolist() == [2.0, -3.0, -3.0, 2.0]
    r = (mx.array([5.0, -5.0, 0.0]) // mx.array([0.0, 0.0, 0.0])).tolist()
    assert r[:2] == [inf, -inf] and math.isnan(r[2])
    assert all(math.isnan(v) for v in (mx.array([5.0, 0.0]) % mx.array([0.0, 0.0])).tolist())
    q = (mx.array([1 + 2j]) // mx.array([2 + 1j])).item()
    assert q == pytest.approx(0.8 + 0.6j)


def test_ieee_specials():
    a = mx.array([nan, 1.0, 2.0, nan])
    b = mx.array([1.0, nan, 1.0, nan])
    mxr, mnr = mx.maximum(a, b).tolist(), mx.minimum(a, b).tolist()
    assert math.isnan(mxr[0]) and math.isnan(mxr[1]) and mxr[2] == 2.0 and math.isnan(mxr[3])
    assert math.isnan(mnr[0]) and math.isnan(mnr[1]) and mnr[2] == 1.0
    assert mx.exp(mx.array([-inf, inf])).tolist() == [0.0, inf]
    assert math.isnan(mx.exp(mx.array([nan])).item())
    assert mx.log(mx.array([0.0])).item() == -inf and math.isnan(mx.log(mx.array([-1.0])).item())
    assert mx.log1p(mx.array([-1.0])).item() == -inf
    p = mx.power(mx.array([0.0, -1.0, 2.0]), mx.array([-1.0, 0.5, inf])).tolist()
    assert p[0] == inf and math.isnan(p[1]) and p[2] == inf
    assert mx.arctan2(mx.array([0.0, -0.0, 1.0]), mx.array([-0.0, -0.0, 0.0])).tolist() == pytest.approx(
        [math.pi, -math.pi, math.pi / 2])
    assert math.isnan(mx.sqrt(mx.array([-1.0])).item())
    assert mx.sqrt(mx.array([-1 + 0j])).item() == 1j
    assert (mx.array([1.0]) / mx.array([0.0])).item() == inf
    assert (mx.array([-1.0]) / mx.array([-0.0])).item() == inf
    le = mx.logaddexp(mx.array([-inf, inf, nan, 1.0, 1.0]), mx.array([-inf, -inf, 1.0, nan, 1.0])).tolist()
    assert le[0] == -inf and le[1] == inf and math.isnan(le[2]) and math.isnan(le[3])
    assert le[4] == pytest.approx(1 + math.log(2))
    assert mx.maximum(mx.array([0.0]), mx.array([-0.0])).item() == 0.0
    assert mx.isnan(mx.array([nan, inf, 1.0])).tolist() == [True, False, False]
    assert mx.isfinite(mx.array([nan, inf, -inf, 1.0])).tolist() == [False, False, False, True]
    assert (mx.array([nan]) == mx.array([nan])).item() is False
    assert (mx.array([nan]) != mx.array([nan])).item() is True
    assert mx.isnan(mx.array([complex(nan, 0)])).item() is True
    assert mx.isfinite(mx.array([1j, complex(inf)])).tolist() == [True, False]


def test_complex_comparisons_and_extrema():
    a = mx.array([1 + 1j, 2 - 1j, 1 + 2j])
    b = mx.array([1 + 2j, 1 + 5j, 1 + 2j])
    # ordered by real part, then imaginary part
    assert (a > b).tolist() == [False, True, False]
    assert (a >= b).tolist() == [False, True, True]
    assert (a < b).tolist() == [True, False, False]
    assert (a <= b).tolist() == [True, False, True]
    assert mx.maximum(a, b).tolist() == [1 + 2j, 2 - 1j, 1 + 2j]
    assert mx.minimum(a, b).tolist() == [1 + 1j, 1 + 5j, 1 + 2j]
    assert mx.logaddexp(mx.array([1 + 2j]), mx.array([2 + 1j])).item() == pytest.approx(2.21357 + 1.25271j, rel=1e-5)


def test_bitwise_and_shifts_on_bool():
    t, f = mx.array([True, True, False]), mx.array([True, False, False])
    assert (t & f).tolist() == [True, False, False] and (t & f).dtype == mx.bool_
    assert (t | f).tolist() == [True, True, False]
    assert (t ^ f).tolist() == [False, True, False]
    assert (~t).tolist() == [False, False, True]
    assert mx.bitwise_invert(t).tolist() == [False, False, True]
    assert (mx.array([True]) << True).tolist() == [2] and (mx.array([True]) << True).dtype == mx.uint8
    assert (mx.array([True]) << 1).dtype == mx.int32
    assert mx.right_shift(mx.array([True]), mx.array([True])).tolist() == [0]


def test_shifts_vs_numpy_signed():
    x = np.array([-128, -7, -1, 0, 1, 5, 127], np.int8)
    for s in range(8):
        assert (mx.array(x) >> s).tolist() == (x >> s).tolist()
        assert (mx.array(x) << s).tolist() == (x << np.int8(s)).tolist()
    y = np.array([-2**63, -5, 5, 2**62], np.int64)
    for s in (0, 1, 31, 32, 63):
        assert mx.right_shift(mx.array(y), mx.array(s, mx.int64)).tolist() == (y >> s).tolist()
        assert mx.left_shift(mx.array(y), mx.array(s, mx.int64)).tolist() == (y << s).tolist()


def test_logical_ops_cast_to_bool():
    assert mx.logical_not(mx.array([1, 0])).tolist() == [False, True]
    assert mx.logical_not(mx.array([1.5, 0])).tolist() == [False, True]
    assert mx.logical_not(mx.array([1j, 0])).tolist() == [False, True]
    assert mx.logical_and(mx.array([1, 0]), mx.array([2.5, 1])).tolist() == [True, False]
    assert mx.logical_or(mx.array([1j, 0]), 0).tolist() == [True, False]


# ----------------------------------------------------------------- operators

OPERATORS = [
    ("+", operator.add, np.add), ("-", operator.sub, np.subtract), ("*", operator.mul, np.multiply),
    ("/", operator.truediv, np.true_divide), ("//", operator.floordiv, np.floor_divide),
    ("%", operator.mod, np.remainder), ("**", operator.pow, np.power),
    ("==", operator.eq, np.equal), ("!=", operator.ne, np.not_equal), ("<", operator.lt, np.less),
    ("<=", operator.le, np.less_equal), (">", operator.gt, np.greater),
    (">=", operator.ge, np.greater_equal),
]
BITWISE = [("&", operator.and_, np.bitwise_and), ("|", operator.or_, np.bitwise_or),
           ("^", operator.xor, np.bitwise_xor), ("<<", operator.lshift, np.left_shift),
           (">>", operator.rshift, np.right_shift)]


@pytest.mark.parametrize("sym,f,nf", OPERATORS, ids=[o[0] for o in OPERATORS])
def test_operators_arrays_and_scalars(sym, f, nf):
    xv = np.array([[1.5, -2.0, 3.0], [4.0, 0.5, -6.0]], np.float32)
    yv = np.array([2.0, -3.0, 1.5], np.float32)
    x, y = mx.array(xv), mx.array(yv)
    with np.errstate(all="ignore"):
        assert_close(f(x, y), nf(xv, yv), mx.float32)
        assert_close(f(x, 2), nf(xv, np.float32(2)), mx.float32)
        assert_close(f(2, x), nf(np.float32(2), xv), mx.float32)
        assert_close(f(x, 2.5), nf(xv, np.float32(2.5)), mx.float32)
        assert_close(f(2.5, x), nf(np.float32(2.5), xv), mx.float32)
    iv = np.array([1, 7, -9, 12], np.int32)
    i = mx.array(iv)
    with np.errstate(all="ignore"):
        if sym != "**":
            assert_close(f(i, 3), nf(iv, np.int32(3)), mx.int32)
            assert_close(f(5, i), nf(np.int32(5), iv), mx.int32 if sym != "/" else mx.float32)
        else:
            assert f(i, 2).tolist() == (iv ** 2).tolist()
            assert f(2, mx.array([0, 3])).tolist() == [1, 8]
    assert f(x, y).dtype == (mx.bool_ if sym in ("==", "!=", "<", "<=", ">", ">=") else mx.float32)


@pytest.mark.parametrize("sym,f,nf", BITWISE, ids=[o[0] for o in BITWISE])
def test_bitwise_operators(sym, f, nf):
    av = np.array([0, 1, 6, 12, 255], np.int32)
    bv = np.array([3, 1, 2, 5, 4], np.int32)
    a, b = mx.array(av), mx.array(bv)
    assert f(a, b).tolist() == nf(av, bv).tolist()
    assert f(a, 2).tolist() == nf(av, np.int32(2)).tolist()
    assert f(a, True).tolist() == nf(av, np.int32(1)).tolist()
    # MLX defines no reflected bitwise operators
    with pytest.raises(TypeError, match="unsupported operand"):
        f(2, a)
    names = {"&": "bitwise and", "|": "bitwise or", "^": "bitwise xor", "<<": "left shift", ">>": "right shift"}
    with pytest.raises(ValueError, match=rf"^Floating point types not allowed with {names[sym]}\.$"):
        f(a, 1.5)
    with pytest.raises(ValueError, match=rf"^Floating point types not allowed with {names[sym]}\.$"):
        f(mx.array([1.5]), a)
    with pytest.raises(ValueError, match=rf"^Floating point types not allowed with {names[sym]}\.$"):
        f(a, mx.array([1j]))
    # the functions raise MLX's core error instead
    with pytest.raises(RuntimeError, match="Only allowed on integer or boolean types"):
        nf_name = {"&": "bitwise_and", "|": "bitwise_or", "^": "bitwise_xor", "<<": "left_shift", ">>": "right_shift"}[sym]
        getattr(mx, nf_name)(mx.array([1.5]), a)


def test_unary_operators():
    x = mx.array([1.5, -2.0])
    assert (-x).tolist() == [-1.5, 2.0]
    assert (+x).tolist() == [1.5, -2.0]
    assert abs(x).tolist() == [1.5, 2.0]
    assert abs(mx.array([True])).tolist() == [True]
    assert (~mx.array([1], mx.int8)).tolist() == [-2]
    assert (~mx.array([1], mx.uint8)).tolist() == [254]
    with pytest.raises(ValueError, match=r"^\[negative\] Not supported for bool, use logical_not instead\.$"):
        -mx.array([True])
    with pytest.raises(ValueError, match=r"^Floating point types not allowed with bitwise inversion\.$"):
        ~mx.array([1.0])
    with pytest.raises(ValueError, match=r"^Floating point types not allowed with bitwise inversion\.$"):
        ~mx.array([1j])


def test_operands_by_the_number_protocols_as_mlx():
    """MLX converts any other operand that has __complex__, __float__ or __index__ (nanobind's complex
    caster: Fraction, Decimal, unittest.mock.MagicMock) to a complex64 scalar (checked with MLX 0.32)."""
    import fractions
    from unittest.mock import MagicMock

    class Index:
        def __index__(self):
            return 3

    class Float:
        def __float__(self):
            return 2.5

    class Complex:
        def __complex__(self):
            return 1 + 2j

    x = mx.array([1.0, 2.0])
    for other, value in ((fractions.Fraction(1, 2), 0.5), (Index(), 3), (Float(), 2.5), (Complex(), 1 + 2j),
                         (MagicMock(), 1j)):
        for r, want in ((x + other, [1 + value, 2 + value]), (other * x if not isinstance(other, MagicMock) else
                                                              x * other, [value, 2 * value]),
                        (mx.add(other, 1), 1 + value), (mx.maximum(mx.array([1], mx.int32), other), None)):
            assert r.dtype == mx.complex64
            if want is not None:
                np.testing.assert_allclose(np.array(r), want, rtol=1e-6)
    assert mx.exp(fractions.Fraction(0)).item() == 1
    assert (x == Float()).tolist() == [False, False]
    with pytest.raises(ValueError, match="Invalid type"):  # the constructor takes no such object, as MLX's
        mx.array(fractions.Fraction(1, 2))

    class Broken:
        def __float__(self):
            raise ValueError("no")
    with pytest.raises(ValueError, match=r"^Cannot perform addition on an mkpy\.array and "):
        x + Broken()


def test_operator_with_invalid_operands():
    a = mx.array([1, 2])
    for other, name in (([1, 2], "list"), ((1,), "tuple"), ("ab", "str"), ({}, "dict"), (object(), "object")):
        with pytest.raises(ValueError, match=rf"^Cannot perform addition on an mkpy\.array and {name}$"):
            a + other
        with pytest.raises(ValueError, match=rf"^Cannot perform addition on an mkpy\.array and {name}$"):
            other + a
        with pytest.raises(ValueError, match=rf"^Cannot perform multiplication on an mkpy\.array and {name}$"):
            other * a
        with pytest.raises(ValueError, match=rf"^Cannot perform less than on an mkpy\.array and {name}$"):
            a < other
        assert (a == other) is False
        assert (a != other) is True
    with pytest.raises(ValueError, match="Cannot perform bitwise and on an mkpy.array and list"):
        a & [1]
    with pytest.raises(ValueError, match="Cannot perform subtraction"):
        a - Ellipsis
    # None is refused by argument matching: TypeError
    for f in (operator.add, operator.sub, operator.pow, operator.lt, operator.eq, operator.ne):
        with pytest.raises(TypeError):
            f(a, None)
        with pytest.raises(TypeError):
            f(None, a)
    with pytest.raises(TypeError):
        divmod(a, 2)
    with pytest.raises(TypeError):
        pow(a, 2, 5)
    with pytest.raises(TypeError):
        a @ [1, 2]
    with pytest.raises(TypeError):
        2 @ a


def test_inplace_operators_modify_the_object():
    x = mx.array([1, 2])
    y = x
    x += 1
    assert x is y and y.tolist() == [2, 3]
    x *= 2.5
    assert y.dtype == mx.float32 and y.tolist() == [5.0, 7.5]
    z = mx.array([7, 9])
    w = z
    z -= 1
    z //= 2
    z %= 3
    z **= 2
    z &= 3
    z |= 4
    z ^= 1
    z <<= 1
    z >>= 1
    assert z is w and w.tolist() == [5, 4]
    f = mx.array([1.0, 2.0])
    g = f
    f /= 2
    assert f is g and g.tolist() == [0.5, 1.0]
    with pytest.raises(ValueError, match=r"^In place division cannot cast to non-floating point type\.$"):
        i = mx.array([1, 2])
        i /= 2
    with pytest.raises(ValueError, match=r"^Floating point types not allowed with bitwise and\.$"):
        h = mx.array([1.5])
        h &= 1
    with pytest.raises(ValueError, match=r"^Floating point types not allowed bitwise xor\.$"):
        h = mx.array([1.5])
        h ^= 1
    with pytest.raises(ValueError, match=r"^Cannot perform inplace addition on an mkpy\.array and list$"):
        h = mx.array([1])
        h += [1, 2]
    with pytest.raises(ValueError, match="overflow"):
        k = mx.array([1], mx.int8)
        k += 1000


def test_comparisons_with_numpy_and_buffers():
    r = mx.array(5) == np.array([5, 6])
    assert isinstance(r, mx.array) and r.tolist() == [True, False]
    assert (mx.array(5) == np.int64(5)).item() is True
    assert (mx.array(5) == b"a").tolist() == [False]
    assert (mx.array([1, 2]) < np.array([2, 2])).tolist() == [True, False]


# -------------------------------------------------------------- broadcasting

def test_broadcasting():
    a = mx.array(np.arange(3, dtype=np.float32).reshape(3, 1))
    b = mx.array(np.arange(4, dtype=np.float32).reshape(1, 4))
    assert (a + b).shape == (3, 4)
    np.testing.assert_array_equal(np.array(a * b), np.arange(3).reshape(3, 1) * np.arange(4).reshape(1, 4))
    s = mx.array(2.0)
    c = mx.array(np.ones((2, 3, 4), np.float32))
    assert (s * c).shape == (2, 3, 4) and (c - s).shape == (2, 3, 4)
    assert (mx.array([1, 2, 3]) + mx.array([[10], [20]])).tolist() == [[11, 12, 13], [21, 22, 23]]
    e = mx.array(np.zeros((0, 3), np.float32))
    assert (e + mx.array([1.0, 2.0, 3.0])).shape == (0, 3)
    assert (e + 1).shape == (0, 3)
    assert (mx.array(np.zeros((2, 0, 1))) * mx.array(np.zeros((5,)))).shape == (2, 0, 5)
    assert (mx.array(np.zeros((1, 0))) + mx.array(np.zeros((3, 1)))).shape == (3, 0)
    assert mx.where(mx.array([[True], [False]]), mx.array([1, 2]), 0).tolist() == [[1, 2], [0, 0]]


def test_broadcast_errors():
    with pytest.raises(ValueError, match=r"^\[broadcast_shapes\] Shapes \(2,3\) and \(4,5\) cannot be broadcast\.$"):
        mx.array(np.zeros((2, 3))) + mx.array(np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r"^\[broadcast_shapes\] Shapes \(2\) and \(3\) cannot be broadcast\.$"):
        mx.array([1, 2]) * mx.array([1, 2, 3])
    with pytest.raises(ValueError, match=r"^\[broadcast_shapes\] Shapes \(2,3\) and \(4,5\) cannot be broadcast\.$"):
        mx.where(mx.array(np.ones((2, 3))) > 0, mx.array(np.zeros((4, 5))), 1)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        mx.where(mx.array([True, False]), mx.array([1, 2, 3]), 0)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        mx.array(np.zeros((0, 3))) + mx.array(np.zeros((2, 3)))


# --------------------------------------------------------- strided inputs

def test_non_contiguous_inputs():
    base = np.arange(60, dtype=np.float32).reshape(6, 10) - 30
    x = mx.array(base)
    views = [(x.T, base.T), (x[::2], base[::2]), (x[:, ::3], base[:, ::3]), (x[::-1, 1::2], base[::-1, 1::2]),
             (x[1:4, 2:9:2].T, base[1:4, 2:9:2].T)]
    for v, nv in views:
        assert_close(mx.abs(v), np.abs(nv), mx.float32)
        assert_close(mx.exp(v / 30), np.exp(nv / 30), mx.float32)
        assert_close(v * v + 1, nv * nv + 1, mx.float32)
        assert_close(mx.maximum(v, v.T.T * 0.5), np.maximum(nv, nv * 0.5), mx.float32)
        assert_close(v.astype(mx.int32), nv.astype(np.int32), mx.int32)
        assert_close(mx.where(v > 0, v, -v), np.where(nv > 0, nv, -nv), mx.float32)
    # a transposed operand with a contiguous one, and broadcasting a strided row
    assert_close(x.T + mx.array(base.T.copy()), base.T * 2, mx.float32)
    assert_close(x[::2] + x[0], base[::2] + base[0], mx.float32)


def test_large_inputs_use_the_pool():
    n = 200_003
    a = np.linspace(-5, 5, n, dtype=np.float32)
    b = np.linspace(3, -2, n, dtype=np.float32)
    assert_close(mx.array(a) * mx.array(b) + 1, a * b + 1, mx.float32)
    assert_close(mx.tanh(mx.array(a)), np.tanh(a), mx.float32)
    big = mx.array(np.arange(n, dtype=np.int64))
    assert_close(big % 7, np.arange(n) % 7, mx.int64)
    t = mx.array(np.arange(400 * 500, dtype=np.float32).reshape(400, 500))
    assert_close(t.T - 1, np.arange(400 * 500, dtype=np.float32).reshape(400, 500).T - 1, mx.float32)



# ------------------------------------------------------------------- tanh
# float32 tanh is mkpy's own branch-free polynomial/exp (MLX's CPU back end
# calls std::tanh): within 1 ulp of the correctly rounded result over every
# float32 (checked exhaustively when it was written), 2 ulp of glibc's tanhf.

def _ulp_distance(a, b):
    """ulps between float32 arrays (sign-magnitude bits mapped to a line)."""
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def test_tanh_float32_accuracy_dense_sample():
    # every 1021st positive float32 bit pattern (subnormals to inf), and their negatives
    bits = np.arange(0, 0x7F800000, 1021, dtype=np.uint32)
    x = bits.view(np.float32)
    x = np.concatenate([x, -x])
    got = np.array(mx.tanh(mx.array(x)))
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    d = _ulp_distance(got, want)
    assert d.max() <= 1, (x[d.argmax()], got[d.argmax()], want[d.argmax()])
    # odd, bit for bit
    n = len(x) // 2
    np.testing.assert_array_equal(got[:n].view(np.uint32) ^ np.uint32(0x80000000), got[n:].view(np.uint32))
    # around the switch from the polynomial to exp, and where tanh rounds to 1
    for lo, hi in [(0.79, 0.81), (8.9, 9.1)]:
        x = np.linspace(lo, hi, 200_001, dtype=np.float32)
        got = np.array(mx.tanh(mx.array(x)))
        assert _ulp_distance(got, np.tanh(x.astype(np.float64)).astype(np.float32)).max() <= 1


def test_tanh_special_values():
    tiny = np.float32(1e-30)
    sub = np.float32(1e-45)
    x = np.array([0.0, -0.0, inf, -inf, nan, tiny, -tiny, sub, -sub, 20.0, -20.0, 88.0, 100.0, -1e30, 3e38],
                 np.float32)
    got = np.array(mx.tanh(mx.array(x)))
    want = np.array([0.0, -0.0, 1, -1, nan, tiny, -tiny, sub, -sub, 1, -1, 1, 1, -1, 1], np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[1]) and not np.signbit(got[0])
    # float16 and bfloat16 go through float32
    for t in (mx.float16, mx.bfloat16):
        g = to_np(mx.tanh(mx.array(x, t)))
        np.testing.assert_array_equal(np.signbit(g[:2]), [False, True])
        assert np.isnan(g[4]) and list(g[2:4]) == [1, -1]
    a = np.linspace(-6, 6, 4001, dtype=np.float32)
    assert_close(mx.tanh(mx.array(a, mx.float16)), np.tanh(a.astype(np.float16).astype(np.float32)), mx.float16)
    # non-contiguous input
    b = np.linspace(-3, 3, 3000, dtype=np.float32).reshape(60, 50)
    assert_close(mx.tanh(mx.array(b)[::2, ::-3].T), np.tanh(b[::2, ::-3].T), mx.float32)

# -------------------------------------------------------- where, clip, isclose

def test_where():
    c = mx.array([True, False, True])
    assert mx.where(c, mx.array([1, 2, 3]), mx.array([10, 20, 30])).tolist() == [1, 20, 3]
    assert mx.where(1, 2, 3).tolist() == 2
    assert mx.where(mx.array([1.5, 0]), 1, 2).tolist() == [1, 2]  # any dtype as condition
    assert mx.where(mx.array([1, 0], mx.float32), 1, 2.5).dtype == mx.float32
    assert mx.where(True, mx.array([1], mx.int8), mx.array([1], mx.uint8)).dtype == mx.int16
    assert mx.where(c, mx.array([1], mx.int8), 2.5).dtype == mx.float32
    assert mx.where(c, mx.array([1], mx.int8), 3).dtype == mx.int8
    assert mx.where(np.array([True, False]), mx.array([1]), 2).tolist() == [1, 2]
    for t in (mx.float16, mx.bfloat16, mx.complex64, mx.uint64, mx.bool_):
        r = mx.where(mx.array([True, False]), mx.array([1, 1], t), mx.array([0, 0], t))
        assert r.dtype == t and r.astype(mx.int32).tolist() == [1, 0]
    with pytest.raises(ValueError, match="Invalid type list"):
        mx.where([True, False], mx.array([1]), 2)
    with pytest.raises(ValueError, match="Invalid type list"):
        mx.where(mx.array([True]), [1], 2)
    with pytest.raises(TypeError):
        mx.where(mx.array([True]), 1, None)


def test_clip():
    x = mx.array([1.0, 5.0, 10.0, nan])
    r = mx.clip(x, 2, 8).tolist()
    assert r[:3] == [2.0, 5.0, 8.0] and math.isnan(r[3])
    assert mx.clip(x, None, 8).tolist()[:3] == [1.0, 5.0, 8.0]
    assert mx.clip(x, 2, None).tolist()[:3] == [2.0, 5.0, 10.0]
    assert mx.clip(x, mx.array([0, 6, 0, 0]), 8).tolist()[:3] == [1.0, 6.0, 8.0]
    assert mx.clip(mx.array([1.0, 5, 10]), 8, 2).tolist() == [2.0, 2.0, 2.0]
    assert mx.clip(mx.array([1, 5, 10], mx.uint8), 0, 8).tolist() == [1, 5, 8]
    assert mx.clip(mx.array([1, 5, 10], mx.uint8), 0, 8).dtype == mx.uint8
    assert mx.clip(mx.array([1, 5, 10], mx.int8), 2.5, 8).tolist() == [2.5, 5.0, 8.0]
    assert mx.clip(mx.array([1, 5, 10], mx.uint8), mx.array(2.5), None).dtype == mx.float32
    assert mx.clip(mx.array([1, 5]), a_min=2, a_max=None).tolist() == [2, 5]
    assert mx.clip(mx.array([1, 5]), np.array([2, 2]), 3).tolist() == [2, 3]
    assert mx.clip(mx.array([1 + 1j]), 0, 1).tolist() == [1 + 0j]
    with pytest.raises(ValueError, match=r"^At most one of a_min and a_max may be None$"):
        mx.clip(mx.array([1.0]), None, None)
    with pytest.raises(ValueError, match=r"^Converting -1 to uint8 would result in overflow\.$"):
        mx.clip(mx.array([1, 5, 10], mx.uint8), -1, 8)
    with pytest.raises(ValueError, match="Invalid type list"):
        mx.clip(mx.array([1.0, 5, 10]), [2, 3, 4], 8)
    with pytest.raises(TypeError):
        mx.clip([1, 2, 3], 2, 3)
    with pytest.raises(TypeError):
        mx.clip(mx.array([1, 5]))


def test_isclose():
    a = mx.array([1.0, inf, inf, nan, 0.0, 1e-9, -inf])
    b = mx.array([1.0 + 1e-6, inf, -inf, nan, 1e-9, 0.0, -inf])
    assert mx.isclose(a, b).tolist() == [True, True, False, False, True, True, True]
    assert mx.isclose(a, b, equal_nan=True).tolist() == [True, True, False, True, True, True, True]
    assert mx.isclose(mx.array([1.0, 2.0]), mx.array([1.05, 2.5]), rtol=0.1).tolist() == [True, False]
    assert mx.isclose(mx.array([1.0]), mx.array([1.1]), 0, 0.2).tolist() == [True]
    assert mx.isclose(mx.array([1.0]), mx.array([1.1]), atol=0.2).tolist() == [True]
    assert mx.isclose(mx.array([1, 2]), mx.array([1, 3])).tolist() == [True, False]
    assert mx.isclose(mx.array([1, 2]), mx.array([2])).tolist() == [False, True]
    assert mx.isclose(mx.array([1 + 1j]), mx.array([1 + 1j])).tolist() == [True]
    assert mx.isclose(mx.array([complex(0, inf)]), mx.array([complex(0, inf)])).tolist() == [False]
    assert mx.isclose(mx.array([1.0], mx.float16), mx.array([1.001], mx.float16)).tolist() == [False]
    assert mx.isclose(mx.array([1e10]), mx.array([1.00001e10])).tolist() == [False]
    # uint8 differences wrap, as MLX
    assert mx.isclose(mx.array([1, 2], mx.uint8), mx.array([2, 1], mx.uint8)).tolist() == [False, False]
    # the tolerance is computed with float32 constants (MLX's array(double))
    assert mx.isclose(mx.array(np.array([80.484276], np.float32)), mx.array(np.array([54.818874], np.float32)),
                      0.4681854876560064, 0.0).item() is True
    np.testing.assert_array_equal(
        np.array(mx.isclose(mx.array([1.0, 2.0, 3.0]), mx.array([1.0, 2.0001, 3.1]), rtol=1e-4)),
        np.isclose([1.0, 2.0, 3.0], [1.0, 2.0001, 3.1], rtol=1e-4, atol=1e-8))
    with pytest.raises(ValueError, match="cannot be broadcast"):
        mx.isclose(mx.array([1, 2]), mx.array([2, 3, 4]))
    for bad in ((mx.array([1.0]), 1), (1.0, 1), (mx.array([1.0]), np.array([1.0])), (mx.array([1.0]), [1.0])):
        with pytest.raises(TypeError):
            mx.isclose(*bad)
    with pytest.raises(TypeError):
        mx.isclose(mx.array([1.0]), mx.array([1.1]), 0, 0.2, True)  # equal_nan is keyword-only


# ---------------------------------------------------------- misc arguments

def test_binary_functions_take_scalars_and_numpy():
    assert mx.add(np.array([1.5, 2.5]), mx.array([1, 2])).tolist() == [2, 4]  # numpy takes the array's dtype
    assert mx.add(mx.array([1, 2]), np.array([1.5, 2.5])).tolist() == [2, 4]
    assert mx.add(np.array([1.5]), 1).dtype == mx.float32
    assert mx.add(np.float32(1.5), 1).dtype == mx.float32
    assert mx.add(np.int8(100), np.int8(100)).tolist() == -56
    assert mx.maximum(mx.array([1, 5]), 3).tolist() == [3, 5]
    with pytest.raises(ValueError, match=r"^Invalid type list received in array initialization\.$"):
        mx.add([1, 2], 1.5)
    with pytest.raises(ValueError, match="Invalid type tuple"):
        mx.add(mx.array([1]), (1000,))
    with pytest.raises(TypeError):
        mx.add(mx.array([1]), None)
    with pytest.raises(ValueError, match="Invalid type str"):
        mx.add(mx.array([1]), "a")
    assert mx.add(mx.array([1.0]), mx.array([2.0]), stream=None).tolist() == [3.0]
    with pytest.raises(TypeError):
        mx.add(mx.array([1]))
