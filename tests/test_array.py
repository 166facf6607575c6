"""The array type: construction from Python values, NumPy and buffers,
properties, conversions back to Python, printing, the buffer protocol,
copying and pickling. Expected values and messages are MLX 0.32's."""
import copy
import math
import operator
import pickle

import numpy as np
import pytest

import mkpy as mx

DTYPES = [mx.bool_, mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.int16, mx.int32,
          mx.int64, mx.float16, mx.float32, mx.float64, mx.bfloat16, mx.complex64]
NAMES = ["bool_", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
         "float16", "float32", "float64", "bfloat16", "complex64"]
# NumPy equivalents (bfloat16 has none)
NP = {mx.bool_: np.bool_, mx.uint8: np.uint8, mx.uint16: np.uint16, mx.uint32: np.uint32,
      mx.uint64: np.uint64, mx.int8: np.int8, mx.int16: np.int16, mx.int32: np.int32,
      mx.int64: np.int64, mx.float16: np.float16, mx.float32: np.float32,
      mx.float64: np.float64, mx.complex64: np.complex64}
nan, inf = float("nan"), float("inf")


def to_np(x):
    """An mkpy array as NumPy (bfloat16 through float32)."""
    if x.dtype == mx.bfloat16:
        x = x.astype(mx.float32)
    return np.array(x)


# ------------------------------------------------------------ construction

def test_scalar_defaults():
    cases = [(3, mx.int32, 3), (-7, mx.int32, -7), (2.5, mx.float32, 2.5), (True, mx.bool_, True),
             (False, mx.bool_, False), (1 + 2j, mx.complex64, 1 + 2j),
             (2**31 - 1, mx.int32, 2**31 - 1), (-2**31, mx.int32, -2**31),
             (2**31, mx.int64, 2**31), (-2**31 - 1, mx.int64, -2**31 - 1),
             (2**40, mx.int64, 2**40), (2**63 - 1, mx.int64, 2**63 - 1), (-2**63, mx.int64, -2**63)]
    for v, t, item in cases:
        a = mx.array(v)
        assert a.dtype == t and a.shape == () and a.ndim == 0 and a.size == 1
        assert a.item() == item and type(a.item()) is type(item)


def test_scalar_too_big():
    # MLX reads Python ints as int64 and fails beyond (RuntimeError std::bad_cast);
    # mkpy says what did not fit (issue #11)
    for v in (2**63, -2**63 - 1, 2**64, 2**70):
        with pytest.raises(OverflowError, match=r"does not fit int64"):
            mx.array(v)
    with pytest.raises(OverflowError):
        mx.array(2**63, mx.uint64)
    with pytest.raises(OverflowError, match=r"^Python int 1180591620717411303424 does not fit int64"):
        mx.array([1, 2**70])


def test_scalar_with_dtype():
    assert mx.array(2**40, mx.int32).item() == 0  # int64 value, then cast (wraps)
    assert mx.array(300, mx.uint8).item() == 44
    assert mx.array(-1, mx.uint8).item() == 255
    assert mx.array(-1, mx.uint64).item() == 2**64 - 1
    assert mx.array(1.5, mx.int32).item() == 1
    assert mx.array(-3.7, mx.int32).item() == -3
    assert mx.array(0.1, mx.float64).item() == 0.1  # kept as a double
    assert mx.array(16777217, mx.float64).item() == 16777217.0
    assert mx.array(1 + 2j, mx.float32).item() == 1.0  # real part
    assert mx.array(True, mx.float32).item() == 1.0
    assert mx.array(1, mx.complex64).item() == 1 + 0j
    assert mx.array(2, mx.bool_).item() is True
    assert mx.array(0.5, mx.bool_).item() is True
    assert mx.array(1e40).item() == inf
    assert mx.array(1.0, dtype=mx.float16).dtype == mx.float16
    assert mx.array(val=1).dtype == mx.int32
    assert mx.array(1, dtype=None).dtype == mx.int32
    with pytest.raises(TypeError):
        mx.array(1, "float32")
    with pytest.raises(TypeError):
        mx.array(1, np.float32)


def test_nested_lists():
    a = mx.array([[1, 2, 3], [4, 5, 6]])
    assert a.shape == (2, 3) and a.dtype == mx.int32 and a.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert mx.array(((1, 2), (3, 4))).tolist() == [[1, 2], [3, 4]]
    assert mx.array([(1, 2), [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert mx.array([1, 2.5]).dtype == mx.float32
    assert mx.array([True, 2]).tolist() == [1, 2]
    assert mx.array([True, 2]).dtype == mx.int32
    assert mx.array([True, 2.5]).dtype == mx.float32
    assert mx.array([True, False]).dtype == mx.bool_
    assert mx.array([1, 2j]).tolist() == [1 + 0j, 2j]
    assert mx.array([True, 1.5, 2j]).dtype == mx.complex64
    assert mx.array([1, 2**40]).dtype == mx.int64
    assert mx.array([2**40, True]).tolist() == [2**40, 1]
    assert mx.array([1e40, 1]).tolist() == [inf, 1.0]
    e = mx.array([])
    assert e.shape == (0,) and e.dtype == mx.float32
    assert mx.array([[]]).shape == (1, 0)
    assert mx.array(()).shape == (0,)
    assert mx.array([[], []]).shape == (2, 0)
    assert mx.array([[[1]]]).shape == (1, 1, 1)


def test_nested_lists_with_dtype():
    assert mx.array([1, 2], mx.float16).tolist() == [1.0, 2.0]
    assert mx.array([300], mx.uint8).tolist() == [44]  # read as int32, then cast
    assert mx.array([2**31], mx.uint32).tolist() == [2**31]
    assert mx.array([2**32 - 1], mx.uint32).tolist() == [2**32 - 1]
    assert mx.array([2**63 - 1], mx.uint64).tolist() == [2**63 - 1]
    assert mx.array([2**40 + 1], mx.float64).tolist() == [2**40 + 1]
    assert mx.array([16777217.0], mx.int32).tolist() == [16777217]
    assert mx.array([16777217, 0.5], mx.int32).tolist() == [16777217, 0]
    assert mx.array([0.1, 1], mx.float64).tolist() == [0.1, 1.0]
    assert mx.array([1.5, True], mx.int32).tolist() == [1, 1]
    assert mx.array([1 + 2j, 3], mx.int32).tolist() == [1, 3]
    assert mx.array([2, 0], mx.bool_).tolist() == [True, False]
    assert mx.array([True, 2], mx.float16).tolist() == [1.0, 2.0]
    # ints that do not fit the C type MLX reads them into (MLX: std::bad_cast)
    for vals, t in [([2**31], mx.int32), ([-2**31 - 1], mx.int32), ([2**31], mx.uint8),
                    ([2**40], mx.bool_), ([-1], mx.uint32), ([2**32], mx.uint32),
                    ([-1], mx.uint64), ([2**63], mx.uint64), ([2**31, 1], mx.int32)]:
        with pytest.raises(OverflowError, match="does not fit"):
            mx.array(vals, t)


def test_ragged_and_invalid():
    with pytest.raises(ValueError, match=r"^Initialization encountered non-uniform length\.$"):
        mx.array([[1, 2], [3]])
    with pytest.raises(ValueError, match=r"^Initialization encountered non-uniform length\.$"):
        mx.array([[1, 2], 3])
    with pytest.raises(ValueError, match=r"^Initialization encountered non-uniform length\.$"):
        mx.array([[1], [2, 3]])
    with pytest.raises(ValueError, match=r"^Initialization encountered extra dimension\.$"):
        mx.array([1, [2]])
    with pytest.raises(ValueError, match=r"^Invalid type str received in array initialization\.$"):
        mx.array([1, "a"])
    with pytest.raises(ValueError, match=r"^Invalid type str received in array initialization\.$"):
        mx.array("a")
    with pytest.raises(ValueError, match=r"^Invalid type NoneType received in array initialization\.$"):
        mx.array([None])
    with pytest.raises(TypeError):
        mx.array(None)
    with pytest.raises(ValueError, match="Invalid type dict received"):
        mx.array({1: 2})
    with pytest.raises(ValueError, match="Invalid type range received"):
        mx.array(range(3))
    with pytest.raises(ValueError, match="Invalid type generator received"):
        mx.array(x for x in range(3))
    # C types print their short name, Python classes module.name
    with pytest.raises(ValueError, match="Invalid type float32 received"):
        mx.array([np.float32(1)])
    with pytest.raises(ValueError, match="Invalid type int64 received"):
        mx.array([np.int64(1)])

    class Foo:
        pass

    with pytest.raises(ValueError, match=f"Invalid type {__name__}.Foo received"):
        mx.array(Foo())
    with pytest.raises(ValueError, match=f"Invalid type {__name__}.Foo received"):
        mx.array([Foo()])


def test_from_arrays_and_arrays_in_lists():
    a = mx.array([1, 2], mx.int8)
    b = mx.array(a)
    assert b.dtype == mx.int8 and b.tolist() == [1, 2]
    assert mx.array(a, mx.float32).dtype == mx.float32
    assert mx.array(a.T).tolist() == [1, 2]
    assert mx.array([mx.array(1), 2]).tolist() == [1, 2]
    assert mx.array([mx.array([1, 2]), mx.array([3, 4])]).shape == (2, 2)
    assert mx.array([mx.array([1, 2]), [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert mx.array([[1, 2], mx.array([3, 4])]).tolist() == [[1, 2], [3, 4]]
    assert mx.array([[mx.array(1)], [mx.array(2)]]).shape == (2, 1)
    # dtypes: arrays promote together, and with the Python scalars' class
    assert mx.array([mx.array([1, 2], mx.int8), mx.array([3, 4], mx.int16)]).dtype == mx.int16
    assert mx.array([mx.array([1, 2], mx.int8), [3, 4]]).dtype == mx.int32
    assert mx.array([mx.array([1, 2], mx.int8), [3.5, 4]]).dtype == mx.float32
    assert mx.array([mx.array([1, 2], mx.int8), mx.array([1, 2], mx.float16)]).dtype == mx.float16
    assert mx.array([mx.array(1, mx.uint8), 2]).dtype == mx.int32
    assert mx.array([mx.array(1, mx.uint8), True]).dtype == mx.uint8
    assert mx.array([mx.array(1, mx.float16), 2.5]).dtype == mx.float32
    assert mx.array([mx.array(1, mx.bool_), True]).dtype == mx.bool_
    assert mx.array([mx.array(1, mx.int64), 2**40]).tolist() == [1, 2**40]
    assert mx.array([mx.array(1, mx.int8), 1j]).dtype == mx.complex64
    assert mx.array([mx.array(1.5), 1], mx.int32).tolist() == [1, 1]
    # lazy arrays inside lists are evaluated
    assert mx.array([mx.array([1, 2]) * 2, mx.array([3, 4]) + 1]).tolist() == [[2, 4], [4, 5]]
    for bad in ([mx.array([1, 2], mx.float16), 3], [mx.array([1, 2]), [1]],
                [mx.array([1, 2]), mx.array([[1, 2]])], [mx.array(1), mx.array([3, 4])],
                [1, mx.array([3, 4])]):
        with pytest.raises(ValueError, match="non-uniform length"):
            mx.array(bad)


@pytest.mark.parametrize("t", [t for t in DTYPES if t in NP], ids=lambda t: str(t))
def test_from_numpy_every_dtype(t):
    src = np.array([[0, 1, 2], [3, 4, 5]]).astype(NP[t])
    expect = mx.float32 if t == mx.float64 else t  # float64 -> float32 as MLX
    a = mx.array(src)
    assert a.dtype == expect and a.shape == (2, 3)
    np.testing.assert_array_equal(to_np(a), src.astype(to_np(mx.array(0, expect)).dtype))
    # explicit dtype keeps float64
    assert mx.array(src, mx.float64).dtype == mx.float64
    # non-contiguous sources are copied element by element
    for view in (src.T, src[:, ::2], src[::1, 1:], np.asfortranarray(src)):
        b = mx.array(view)
        assert b.shape == view.shape
        np.testing.assert_array_equal(to_np(b), view.astype(to_np(b).dtype))
    # 0-d
    assert mx.array(src[1, 2]).shape == ()
    assert mx.array(np.array(src[1, 2])).item() == src[1, 2]


def test_from_numpy_special_cases():
    assert mx.array(np.array([1, 2], np.int64)).dtype == mx.int64
    assert mx.array(np.array([1.5, 2], np.float64)).dtype == mx.float32
    c = mx.array(np.array([1 + 2j, -3j], np.complex128))
    assert c.dtype == mx.complex64 and c.tolist() == [1 + 2j, -3j]
    c = mx.array(np.array([complex(-inf, nan)], np.complex128))
    assert math.isinf(c.item().real) and c.item().real < 0 and math.isnan(c.item().imag)
    assert mx.array(np.array([1.7, -2.7], np.float32), mx.int32).tolist() == [1, -2]
    assert mx.array(np.array([1, 2], np.int64), mx.bool_).tolist() == [True, True]
    assert mx.array(np.zeros((0, 3), np.float32)).shape == (0, 3)
    assert mx.array(np.zeros((2, 0), np.int64), mx.float16).dtype == mx.float16
    assert mx.array(np.float64(1.5)).dtype == mx.float32  # a Python float subclass
    assert mx.array(np.int64(5)).dtype == mx.int64
    assert mx.array(np.bool_(True)).dtype == mx.bool_
    assert mx.array(np.uint64(3)).dtype == mx.uint64
    big = np.arange(300000, dtype=np.float32).reshape(300, 1000)[:, ::3]
    np.testing.assert_array_equal(np.array(mx.array(big)), big)
    # negative strides are copied (MLX refuses them; mkpy takes any non-contiguous input)
    assert mx.array(np.arange(6)[::-1]).tolist() == [5, 4, 3, 2, 1, 0]
    np.testing.assert_array_equal(np.array(mx.array(np.arange(12).reshape(3, 4)[:, ::-1])),
                                  np.arange(12).reshape(3, 4)[:, ::-1])
    # unsupported element types
    for bad in (np.array(["a"]), np.array([1, 2], ">i4"), np.array([1.0], np.longdouble),
                np.array([1], object)):
        with pytest.raises(RuntimeError):
            mx.array(bad)


def test_from_buffers():
    assert mx.array(memoryview(b"ab")).tolist() == [97, 98]
    assert mx.array(b"ab").dtype == mx.uint8
    assert mx.array(bytearray(b"ab")).tolist() == [97, 98]
    m = memoryview(np.arange(6, dtype=np.int16).reshape(2, 3))
    assert mx.array(m).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert mx.array(m).dtype == mx.int16
    assert mx.array(m[::2]).tolist() == [[0, 1, 2]]
    assert mx.array(memoryview(np.array([1.5], np.float64))).dtype == mx.float32


class OnlyInterface:
    """An object with only __array_interface__ (mkpy accepts it; MLX 0.32 does not)."""

    def __init__(self, a):
        self.a = a
        self.__array_interface__ = a.__array_interface__


def test_from_array_interface():
    a = mx.array(OnlyInterface(np.array([[1, 2], [3, 4]], np.int16)))
    assert a.dtype == mx.int16 and a.tolist() == [[1, 2], [3, 4]]
    a = mx.array(OnlyInterface(np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]))
    assert a.tolist() == [[0, 2], [4, 6], [8, 10]]
    assert mx.array(OnlyInterface(np.array([1.5])), mx.float64).dtype == mx.float64
    assert mx.array(OnlyInterface(np.array([1.5]))).dtype == mx.float32


class MlxArrayLike:
    def __mlx_array__(self):
        return mx.array([7, 8])


def test_mlx_array_protocol():
    assert mx.array(MlxArrayLike()).tolist() == [7, 8]
    assert mx.exp(MlxArrayLike()).shape == (2,)
    assert (mx.array([1]) + MlxArrayLike()).tolist() == [8, 9]
    assert (MlxArrayLike() + mx.array([1])).tolist() == [8, 9]
    with pytest.raises(ValueError, match="Invalid type"):
        mx.array([MlxArrayLike()])


# --------------------------------------------------------------- properties

def test_properties():
    a = mx.array([[1, 2, 3], [4, 5, 6]], mx.float16)
    assert a.shape == (2, 3) and isinstance(a.shape, tuple)
    assert a.dtype == mx.float16 and a.size == 6 and a.ndim == 2
    assert a.itemsize == 2 and a.nbytes == 12
    assert a.T.shape == (3, 2) and a.T.tolist() == [[1, 4], [2, 5], [3, 6]]
    s = mx.array(3)
    assert s.shape == () and s.ndim == 0 and s.size == 1 and s.T.item() == 3
    assert mx.array([1, 2, 3]).nbytes == 12
    assert mx.array([1, 2, 3], mx.complex64).nbytes == 24
    assert mx.array([]).size == 0 and mx.array([]).nbytes == 0
    for t in DTYPES:
        assert mx.array([0], t).itemsize == t.size


# -------------------------------------------------------------- conversions

def test_item_and_tolist():
    assert mx.array(3).tolist() == 3
    assert mx.array([3]).item() == 3
    assert mx.array([[3]]).item() == 3
    assert mx.array([1.5, 2]).tolist() == [1.5, 2.0]
    assert mx.array([1, 2], mx.bfloat16).tolist() == [1.0, 2.0]
    assert mx.array([1 + 2j]).tolist() == [1 + 2j]
    assert mx.array([True]).tolist() == [True]
    assert mx.array([], mx.int32).tolist() == []
    assert mx.array([[], []]).tolist() == [[], []]
    assert type(mx.array(1, mx.uint64).item()) is int
    assert type(mx.array(1, mx.float16).item()) is float
    assert type(mx.array(1, mx.complex64).item()) is complex
    assert mx.array(np.array([2**64 - 1], np.uint64)).item() == 2**64 - 1
    assert mx.array(0.1).item() == np.float32(0.1).item()
    assert mx.array(np.arange(6).reshape(2, 3)).T.tolist() == [[0, 3], [1, 4], [2, 5]]
    for bad in (mx.array([1, 2]), mx.array([])):
        with pytest.raises(ValueError, match=r"^\[convert\] Only length-1 arrays can be converted to Python scalars\.$"):
            bad.item()


def astype_values(t):
    """Values representable in every dtype (for comparisons with NumPy)."""
    if t == mx.bool_:
        return [0, 1, 1, 0, 1]
    return [0, 1, 2, 100, 7]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("src", DTYPES, ids=NAMES)
def test_astype_all_pairs(src):
    vals = astype_values(src)
    a = mx.array(vals, src)
    for dst in DTYPES:
        b = a.astype(dst)
        assert b.dtype == dst and b.shape == a.shape
        if dst == mx.bool_:
            assert b.tolist() == [bool(v) for v in vals]
        else:
            assert to_np(b).tolist() == pytest.approx(vals)
    # fractional and negative values through NumPy's C casts
    if src in (mx.float16, mx.float32, mx.float64):
        f = np.array([-3.7, -0.5, 0.0, 0.5, 2.5, 126.9], NP[src])
        x = mx.array(f)
        for dst in (mx.int8, mx.int16, mx.int32, mx.int64):
            assert x.astype(dst).tolist() == f.astype(NP[dst]).tolist()
        assert x.astype(mx.bool_).tolist() == f.astype(bool).tolist()
        assert x.astype(mx.complex64).tolist() == f.astype(np.complex64).tolist()
    if src in (mx.int8, mx.int16, mx.int32, mx.int64):
        i = np.array([-128, -1, 0, 1, 127], NP[src])
        x = mx.array(i)
        for dst in (mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.float16, mx.float32):
            assert x.astype(dst).tolist() == i.astype(NP[dst]).tolist()


def test_astype_rounding_and_specials():
    # float -> half: round to nearest even; overflow to inf
    f = mx.array([70000.0, -70000.0, 65519.0, 65520.0, 1e-8, 3e-8, 6e-8])
    with np.errstate(over="ignore"):
        assert f.astype(mx.float16).tolist() == np.array(f).astype(np.float16).tolist()
    b = mx.array([1.00390625, 1.01171875, -1.00390625, 3.4e38]).astype(mx.bfloat16)
    assert b.astype(mx.float32).tolist() == [1.0, 1.015625, -1.0, inf]  # 3.4e38 rounds past the max
    assert mx.array([nan]).astype(mx.float16).item() != mx.array([nan]).astype(mx.float16).item()
    assert math.isnan(mx.array([nan]).astype(mx.bfloat16).item())
    x = mx.array([0.5j, 0j, 1 + 0j])
    assert x.astype(mx.bool_).tolist() == [True, False, True]
    assert x.astype(mx.float32).tolist() == [0.0, 0.0, 1.0]
    # out-of-range float -> int follows the C conversion on x86 (as MLX's CPU build)
    g = mx.array([-1.5, 255.9, 256.0, 65543.0])
    assert g.astype(mx.uint8).tolist() == [255, 255, 0, 7]
    assert g.astype(mx.int16).tolist() == [-1, 255, 256, 7]
    assert mx.array([2**63 - 1, -2**63], mx.int64).astype(mx.float32).tolist() == [2.0**63, -(2.0**63)]


def test_astype_errors():
    with pytest.raises(TypeError):
        mx.array([1]).astype("float32")
    assert mx.array([1]).astype(dtype=mx.float16).dtype == mx.float16


def test_len_iter_bool_int_float_index():
    a = mx.array([[1, 2], [3, 4], [5, 6]])
    assert len(a) == 3
    with pytest.raises(TypeError, match=r"^len\(\) 0-dimensional array\.$"):
        len(mx.array(1))
    rows = list(a)
    assert len(rows) == 3 and all(isinstance(r, mx.array) for r in rows)
    assert [r.tolist() for r in rows] == [[1, 2], [3, 4], [5, 6]]
    assert [r.item() for r in mx.array([4, 5])] == [4, 5]
    assert list(mx.array([])) == []
    with pytest.raises(TypeError, match=r"^iter\(\) 0-dimensional array\.$"):
        iter(mx.array(1))
    assert bool(mx.array(3)) is True and bool(mx.array([0])) is False
    assert bool(mx.array(0.5)) is True and bool(mx.array(0j)) is False
    for bad in (mx.array([1, 2]), mx.array([])):
        with pytest.raises(ValueError, match="Only length-1 arrays"):
            bool(bad)
        with pytest.raises(ValueError, match="Only length-1 arrays"):
            int(bad)
        with pytest.raises(ValueError, match="Only length-1 arrays"):
            float(bad)
    assert int(mx.array(2.7)) == 2 and int(mx.array(-2.7)) == -2
    assert int(mx.array([[5]])) == 5
    assert float(mx.array(2)) == 2.0 and type(float(mx.array(2))) is float
    assert complex(mx.array(1 + 2j)) == 1 + 2j
    assert complex(mx.array(1.5)) == 1.5 + 0j
    with pytest.raises(TypeError):
        float(mx.array(1 + 2j))
    with pytest.raises(TypeError):
        int(mx.array(1 + 2j))
    with pytest.raises(ValueError):
        int(mx.array(nan))
    # __index__: 0-d integer arrays only (not bool)
    assert operator.index(mx.array(3, mx.uint64)) == 3
    assert [1, 2, 3][mx.array(1)] == 2
    assert range(mx.array(3)) == range(3)
    assert hex(mx.array(255)) == "0xff"
    msg = r"^Only 0-dimensional integer arrays can be converted to an index\.$"
    for bad in (mx.array(2.5), mx.array([2]), mx.array(True), mx.array(2 + 1j)):
        with pytest.raises(TypeError, match=msg):
            operator.index(bad)


def test_format():
    assert format(mx.array(1.23456), ".2f") == "1.23"
    assert f"{mx.array(3)}" == "3"
    assert f"{mx.array(7):04d}" == "0007"
    assert format(mx.array([1.5]), "") == "array([1.5], dtype=float32)"
    with pytest.raises(TypeError, match="unsupported format string"):
        format(mx.array([1.5]), ".2f")


def test_hash_and_no_round():
    a = mx.array([1])
    assert hash(a) == hash(a)
    assert {a: 1}[a] == 1
    with pytest.raises(TypeError):
        round(mx.array(2.5))
    with pytest.raises(TypeError):
        math.trunc(mx.array(2.5))


# ------------------------------------------------------------------ printing

REPRS = [
    ('mx.array(3)',
     'array(3, dtype=int32)'),
    ('mx.array(-2.5)',
     'array(-2.5, dtype=float32)'),
    ('mx.array(True)',
     'array(True, dtype=bool)'),
    ('mx.array(1+2j)',
     'array(1+2j, dtype=complex64)'),
    ('mx.array(2**40)',
     'array(1099511627776, dtype=int64)'),
    ('mx.array([1, 2, 3])',
     'array([1, 2, 3], dtype=int32)'),
    ('mx.array([[1, 2], [3, 4]])',
     'array([[1, 2],\n       [3, 4]], dtype=int32)'),
    ('mx.array([[[1, 2], [3, 4]], [[5, 6], [7, 8]]])',
     'array([[[1, 2],\n        [3, 4]],\n       [[5, 6],\n        [7, 8]]], dtype=int32)'),
    ('mx.array([True, False])',
     'array([True, False], dtype=bool)'),
    ('mx.array([1.5, 2, 3.25], mx.float16)',
     'array([1.5, 2, 3.25], dtype=float16)'),
    ('mx.array([0.1, 1 / 3], mx.float16)',
     'array([0.0999756, 0.333252], dtype=float16)'),
    ('mx.array([1.5, -2], mx.bfloat16)',
     'array([1.5, -2], dtype=bfloat16)'),
    ('mx.array([0.1, 1 / 3], mx.float64)',
     'array([0.1, 0.333333], dtype=float64)'),
    ('mx.array([0.1, 1 / 3])',
     'array([0.1, 0.333333], dtype=float32)'),
    ('mx.array([1e10, 1e-10, 123456789.0, 1e-5, 1e16])',
     'array([1e+10, 1e-10, 1.23457e+08, 1e-05, 1e+16], dtype=float32)'),
    ('mx.array([1 + 2j, -1.5 - 0.5j, 0j, complex(0, -0.0)])',
     'array([1+2j, -1.5-0.5j, 0+0j, 0+-0j], dtype=complex64)'),
    ('mx.array([nan, inf, -inf, -0.0, 0.0])',
     'array([nan, inf, -inf, -0, 0], dtype=float32)'),
    ('mx.array([complex(nan, inf), complex(-inf, 1)])',
     'array([nan+infj, -inf+1j], dtype=complex64)'),
    ('mx.array(list(range(7)))',
     'array([0, 1, 2, ..., 4, 5, 6], dtype=int32)'),
    ('mx.array(list(range(1001)))',
     'array([0, 1, 2, ..., 998, 999, 1000], dtype=int32)'),
    ('mx.array(np.arange(2000.0).reshape(40, 50))',
     'array([[0, 1, 2, ..., 47, 48, 49],\n       [50, 51, 52, ..., 97, 98, 99],\n       [100, 101, 102, ..., 147, 148, 149],\n       ...,\n       [1850, 1851, 1852, ..., 1897, 1898, 1899],\n       [1900, 1901, 1902, ..., 1947, 1948, 1949],\n       [1950, 1951, 1952, ..., 1997, 1998, 1999]], dtype=float32)'),
    ('mx.array(np.arange(24).reshape(2, 3, 4))',
     'array([[[0, 1, 2, 3],\n        [4, 5, 6, 7],\n        [8, 9, 10, 11]],\n       [[12, 13, 14, 15],\n        [16, 17, 18, 19],\n        [20, 21, 22, 23]]], dtype=int64)'),
    ('mx.array(np.arange(14.0).reshape(7, 2))',
     'array([[0, 1],\n       [2, 3],\n       [4, 5],\n       ...,\n       [8, 9],\n       [10, 11],\n       [12, 13]], dtype=float32)'),
    ('mx.array(np.arange(1200).reshape(10, 10, 12))',
     'array([[[0, 1, 2, ..., 9, 10, 11],\n        [12, 13, 14, ..., 21, 22, 23],\n        [24, 25, 26, ..., 33, 34, 35],\n        ...,\n        [84, 85, 86, ..., 93, 94, 95],\n        [96, 97, 98, ..., 105, 106, 107],\n        [108, 109, 110, ..., 117, 118, 119]],\n       [[120, 121, 122, ..., 129, 130, 131],\n        [132, 133, 134, ..., 141, 142, 143],\n        [144, 145, 146, ..., 153, 154, 155],\n        ...,\n        [204, 205, 206, ..., 213, 214, 215],\n        [216, 217, 218, ..., 225, 226, 227],\n        [228, 229, 230, ..., 237, 238, 239]],\n       [[240, 241, 242, ..., 249, 250, 251],\n        [252, 253, 254, ..., 261, 262, 263],\n        [264, 265, 266, ..., 273, 274, 275],\n        ...,\n        [324, 325, 326, ..., 333, 334, 335],\n        [336, 337, 338, ..., 345, 346, 347],\n        [348, 349, 350, ..., 357, 358, 359]],\n       ...,\n       [[840, 841, 842, ..., 849, 850, 851],\n        [852, 853, 854, ..., 861, 862, 863],\n        [864, 865, 866, ..., 873, 874, 875],\n        ...,\n        [924, 925, 926, ..., 933, 934, 935],\n        [936, 937, 938, ..., 945, 946, 947],\n        [948, 949, 950, ..., 957, 958, 959]],\n       [[960, 961, 962, ..., 969, 970, 971],\n        [972, 973, 974, ..., 981, 982, 983],\n        [984, 985, 986, ..., 993, 994, 995],\n        ...,\n        [1044, 1045, 1046, ..., 1053, 1054, 1055],\n        [1056, 1057, 1058, ..., 1065, 1066, 1067],\n        [1068, 1069, 1070, ..., 1077, 1078, 1079]],\n       [[1080, 1081, 1082, ..., 1089, 1090, 1091],\n        [1092, 1093, 1094, ..., 1101, 1102, 1103],\n        [1104, 1105, 1106, ..., 1113, 1114, 1115],\n        ...,\n        [1164, 1165, 1166, ..., 1173, 1174, 1175],\n        [1176, 1177, 1178, ..., 1185, 1186, 1187],\n        [1188, 1189, 1190, ..., 1197, 1198, 1199]]], dtype=int64)'),
    ('mx.array([])',
     'array([], dtype=float32)'),
    ('mx.array([[]])',
     'array([[]], dtype=float32)'),
    ('mx.array(np.zeros((2, 0), np.int32))',
     'array([[],\n       []], dtype=int32)'),
    ('mx.array(np.zeros((0, 2, 3)))',
     'array([], dtype=float32)'),
    ('mx.array([-1, 255], mx.uint8)',
     'array([255, 255], dtype=uint8)'),
    ('mx.array([-128, 127], mx.int8)',
     'array([-128, 127], dtype=int8)'),
    ('mx.array(np.array([2**64 - 1], np.uint64))',
     'array([18446744073709551615], dtype=uint64)'),
    ('mx.array([2**40, -5])',
     'array([1099511627776, -5], dtype=int64)'),
    ('mx.array([[1.5, -2], [3, 4]]).T',
     'array([[1.5, 3],\n       [-2, 4]], dtype=float32)'),
    ('mx.array(np.arange(6).reshape(2, 3))[:, ::2]',
     'array([[0, 2],\n       [3, 5]], dtype=int64)'),
    ('mx.array(np.zeros((1, 1, 1, 2)))',
     'array([[[[0, 0]]]], dtype=float32)'),
    ('mx.array([1e-40, 3.4e38, 65504])',
     'array([9.99995e-41, 3.4e+38, 65504], dtype=float32)'),
    ('mx.array([65504, 1e-7, 6e-8], mx.float16)',
     'array([65504, 1.19209e-07, 5.96046e-08], dtype=float16)'),
    ('mx.array([1.0, 100.0, 1e6, 1e7])',
     'array([1, 100, 1e+06, 1e+07], dtype=float32)'),
    ('mx.array([1234567.0, 12345678.0])',
     'array([1.23457e+06, 1.23457e+07], dtype=float32)'),

]


@pytest.mark.parametrize("expr,expect", REPRS, ids=[e for e, _ in REPRS])
def test_repr(expr, expect):
    a = eval(expr)
    assert repr(a) == expect
    assert str(a) == expect


def test_repr_special_values():
    # a NaN prints with its sign bit: x86's sqrt(-1) is the negative default NaN, a GPU's (CUDA's,
    # as Apple's) the positive one
    r = mx.sqrt(mx.array([-1.0]))
    sign = "-" if np.signbit(np.array(r))[0] else ""
    assert repr(r) == f"array([{sign}nan], dtype=float32)"
    assert repr(-mx.abs(mx.array([float("nan")]))) == "array([-nan], dtype=float32)"
    assert repr(mx.array([complex(-inf, -nan)])) == "array([-inf+-nanj], dtype=complex64)"
    assert repr(mx.array([1e10], mx.float64)) == "array([1e+10], dtype=float64)"
    assert repr(mx.array(1, mx.bfloat16) / 3) == "array(0.333984, dtype=bfloat16)"
    # lazy arrays are evaluated to print
    assert repr(mx.array([1, 2]) + 1) == "array([2, 3], dtype=int32)"


# -------------------------------------------------------------- buffer protocol

@pytest.mark.parametrize("t", [t for t in DTYPES if t in NP], ids=lambda t: str(t))
def test_numpy_from_mkpy_every_dtype(t):
    a = mx.array([[0, 1, 2], [3, 4, 5]], t)
    n = np.array(a)
    assert n.dtype == NP[t] and n.shape == (2, 3)
    assert n.tolist() == np.array([[0, 1, 2], [3, 4, 5]]).astype(NP[t]).tolist()
    assert np.asarray(a).dtype == NP[t]
    assert a.__array__().dtype == NP[t]
    m = memoryview(a)
    assert m.shape == (2, 3) and m.itemsize == t.size and m.ndim == 2
    assert m.format == BUFFER_FORMATS[t]


BUFFER_FORMATS = {mx.bool_: "?", mx.uint8: "B", mx.uint16: "H", mx.uint32: "I", mx.uint64: "Q",
                  mx.int8: "b", mx.int16: "h", mx.int32: "i", mx.int64: "q", mx.float16: "e",
                  mx.float32: "f", mx.float64: "d", mx.complex64: "Zf"}


def test_bfloat16_buffer_is_not_numpy_convertible():
    a = mx.array([1, 0], mx.bfloat16)
    assert memoryview(a).format == "bfloat16"
    with pytest.raises(ValueError):
        np.array(a)
    with pytest.raises(TypeError, match="bfloat16 arrays cannot be converted to NumPy"):
        a.__array__()


def test_buffer_shares_memory():
    x = mx.array([1, 2, 3])
    a = np.asarray(x)
    assert np.shares_memory(a, np.asarray(x))
    assert np.shares_memory(x.__array__(), a)
    assert not np.shares_memory(np.array(x), a)
    a[0] = 5  # writes go to the array, as in MLX
    assert x.tolist() == [5, 2, 3]
    assert a.flags.writeable
    y = mx.array([1.0, 2.0]) * 2  # evaluated on export
    b = np.asarray(y)
    del y
    assert b.tolist() == [2.0, 4.0]
    assert bytes(mx.array([1.5, 2])) == np.array([1.5, 2], np.float32).tobytes()


def test_buffer_survives_inplace_rebinding():
    # the exported memory stays valid after x is rebound and dropped (mkpy
    # keeps the old values there; MLX may reuse the buffer for the result)
    x = mx.array([1, 2])
    a = np.asarray(x)
    x += 1
    assert x.tolist() == [2, 3]
    del x
    import gc

    gc.collect()
    assert a.tolist() in ([1, 2], [2, 3])
    z = mx.array([5.0, 6.0]) + 0
    m = memoryview(z)
    z += 1
    del z
    assert m.tolist() == [5.0, 6.0]


def test_strided_views_exported():
    base = mx.array(np.arange(6).reshape(2, 3))
    t = base.T
    m = memoryview(t)
    assert m.shape == (3, 2) and m.strides == (8, 24)
    assert not m.c_contiguous and m.f_contiguous
    assert m.tolist() == [[0, 3], [1, 4], [2, 5]]
    np.testing.assert_array_equal(np.asarray(t), np.arange(6).reshape(2, 3).T)
    s = base[:, ::2]
    assert memoryview(s).strides == (24, 16)
    assert np.array(s).tolist() == [[0, 2], [3, 5]]
    r = base[::-1]
    assert memoryview(r).strides == (-24, 8)
    assert np.array(r).tolist() == [[3, 4, 5], [0, 1, 2]]
    assert np.array(base[:, ::-1]).tolist() == [[2, 1, 0], [5, 4, 3]]
    z = mx.array(3)
    mz = memoryview(z)
    assert mz.shape == () and mz.strides == () and mz.ndim == 0 and mz.format == "i" and mz.tolist() == 3
    e = memoryview(mx.array([]))
    assert e.shape == (0,) and e.strides == (4,)
    assert memoryview(mx.array([1, 2])).readonly is False


def test_array_namespace():
    assert mx.array([1]).__array_namespace__() is mx
    with pytest.raises(ValueError, match="api_version"):
        mx.array([1]).__array_namespace__("2023.12")


# -------------------------------------------------------- copy and pickle

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("t", DTYPES, ids=NAMES)
def test_copy_deepcopy_pickle(t):
    a = mx.array([[0, 1, 2], [3, 4, 5]], t)
    for b in (copy.copy(a), copy.deepcopy(a), pickle.loads(pickle.dumps(a))):
        assert isinstance(b, mx.array) and b is not a
        assert b.dtype == t and b.shape == (2, 3)
        assert b.tolist() == a.tolist()
    # views and lazy arrays pickle as their values
    v = pickle.loads(pickle.dumps((a + a).T))
    assert v.shape == (3, 2) and v.tolist() == (a + a).T.tolist()
    s = pickle.loads(pickle.dumps(mx.array(7, t)))
    assert s.shape == () and s.item() == mx.array(7, t).item()
    e = pickle.loads(pickle.dumps(mx.array([], t)))
    assert e.shape == (0,) and e.dtype == t


def test_copy_is_independent_of_inplace_ops():
    a = mx.array([1, 2])
    b = copy.copy(a)
    c = copy.deepcopy(a)
    a += 1
    assert a.tolist() == [2, 3] and b.tolist() == [1, 2] and c.tolist() == [1, 2]


def test_method_signatures_have_self():
    # the C docstrings' signature lines start with $self, so inspect shows self as MLX's do
    import inspect
    want = {
        "item": "(self, /)", "tolist": "(self, /)", "astype": "(self, /, dtype, stream=None)",
        "reshape": "(self, /, *shape, stream=None)", "transpose": "(self, /, *axes, stream=None)",
        "__array__": "(self, /, dtype=None, copy=None)", "__array_namespace__": "(self, /, api_version=None)",
    }
    for name, sig in want.items():
        assert str(inspect.signature(getattr(mx.array, name))) == sig, name
    at = type(mx.array([1, 2]).at[0])
    for name in ("add", "subtract", "multiply", "divide", "maximum", "minimum"):
        assert str(inspect.signature(getattr(at, name))) == "(self, /, value)", name
    # as MLX: astype's stream may be positional, dtype a keyword; at[].add(value=...)
    x = mx.array([1, 2])
    assert x.astype(mx.int8, None).dtype == mx.int8
    assert x.astype(dtype=mx.int16, stream=None).dtype == mx.int16
    assert x.at[0].add(value=1).tolist() == [2, 2]


def test_bad_call_type_names():
    # "Invoked with types:" names types as nanobind does (MLX 0.32.4): static
    # types by __name__ (ndarray, float32, Decimal), Python classes with
    # their module; mkpy's own types stand for mlx.core's. A NumPy dtype's class is
    # dtype[float32] in NumPy 1 and Float32DType in NumPy 2; Decimal is a static type before
    # Python 3.13 and a heap type (printed with its module) from 3.13.
    import collections
    import decimal
    import fractions

    class Foo:
        pass

    a = mx.array([1.0])
    cases = [(np.zeros(3), "ndarray"), (np.float32(1), "float32"), (np.int64(2), "int64"), (Foo(), "__main__.Foo"
             if Foo.__module__ == "__main__" else Foo.__module__ + ".Foo"),
             (decimal.Decimal(1), "decimal.Decimal" if decimal.Decimal.__flags__ & (1 << 9) else "Decimal"),
             (fractions.Fraction(1), "fractions.Fraction"), (collections.OrderedDict(), "OrderedDict"),
             (mx.float32, "mkpy.Dtype"), (mx.floating, "mkpy.DtypeCategory"), (b"x", "bytes"),
             (np.dtype("f4"), type(np.dtype("f4")).__name__), (range(3), "range"), (1.5, "float"), (None, "NoneType"),
             ([1], "list"), (mx.cpu, "mkpy.DeviceType")]
    head = ("sort(): incompatible function arguments. The following argument types are supported:\n"
            "    1. sort(a: array, /, axis: None | int = -1, *, stream: StreamOrDevice = None) -> array\n\n"
            "Invoked with types: ")
    for v, name in cases:
        with pytest.raises(TypeError) as e:
            mx.sort(v)
        assert str(e.value) == head + name
        if name in ("int64", "NoneType"):
            continue  # accepted as axes
        with pytest.raises(TypeError) as e:
            mx.sort(a, axis=v)
        assert str(e.value) == head + "mkpy.array, kwargs = { axis: " + name + " }"
    with pytest.raises(ValueError, match=r"^Cannot perform addition on an mkpy.array and mkpy.Dtype$"):
        a + mx.float32


def test_from_numpy_layouts_copy_exactly():
    # contiguous input is one copy; strided input moves whole inner rows
    rng = np.random.default_rng(1)
    base = rng.standard_normal((6, 7, 9)) * 50
    for dt in (np.float32, np.int8, np.float16, np.int64, np.complex64, np.bool_):
        b = base.astype(dt)
        views = [b, b[::2], b[:, ::3], b.transpose(2, 0, 1), b[..., 5], b[1:, 2:, 3:], b[:, :, ::2],
                 b[:, 1:2, :], b[None, :, None], b[:0], np.asfortranarray(b), b[:, ::4, ::3].T, b[0, 0, 0]]
        for w in views:
            got = np.array(mx.array(w))
            assert got.shape == w.shape and np.array_equal(got, w), (w.shape, w.strides, dt)
    # float64 input is copied and converted to float32
    d = rng.standard_normal((5, 8))
    assert np.array_equal(np.array(mx.array(d[:, ::3])), d[:, ::3].astype(np.float32))
    # a buffer (memoryview) with strides
    m = memoryview(np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::2])
    assert np.array_equal(np.array(mx.array(m)), np.arange(24, dtype=np.int32).reshape(4, 6)[:, ::2])


# --- lists holding arrays, asarray(copy=False), from_dlpack (mlxrest) ---


def test_list_of_arrays_keeps_the_graph():
    # [x, ...] built from arrays is a stack of them: gradients reach x
    def f(x):
        return (3 * mx.array([x, mx.array([2.0])])).sum()

    assert mx.grad(f)(mx.array([1.0])).tolist() == [3.0]
    # nested levels, plain numbers beside arrays, dtype promotion as before
    g = mx.grad(lambda x: mx.array([[x, 1.0], [2.0, x * x]]).sum())(mx.array(3.0))
    assert g.item() == 7.0
    assert mx.array([mx.array(1, mx.int8), 2]).dtype == mx.int32
    m = mx.array([[1, 2], mx.array([3, 4], mx.float16)])
    assert m.dtype == mx.float16 and m.tolist() == [[1, 2], [3, 4]]
    assert mx.array([mx.array(1), True], dtype=mx.float32).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="non-uniform length"):
        mx.array([1.0, mx.array([1.0])])


def test_asarray_copy_false_never_copies_silently():
    a = mx.array([1, 2, 3])
    for src in ([1, 2, 3], (1, 2), 5, a):
        with pytest.raises(ValueError, match="Unable to avoid copy"):
            mx.asarray(src, copy=False)
    with pytest.raises(ValueError, match="Unable to avoid copy"):
        mx.asarray(a, dtype=mx.float32, copy=False)
    # host buffers are adopted (tests/test_interop.py), never converted
    n = np.arange(3, dtype=np.float32)
    for kw in ({}, {"dtype": mx.float32}):
        assert mx.asarray(n, copy=False, **kw).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="Cannot import a CPU array without a copy"):
        mx.asarray(n.astype(np.float64), copy=False)
    with pytest.raises(ValueError, match="requested dtype without a copy"):
        mx.asarray(n, dtype=mx.int32, copy=False)
    assert mx.asarray(n).tolist() == [0.0, 1.0, 2.0]
    assert mx.asarray(n, copy=True).tolist() == [0.0, 1.0, 2.0]
    assert mx.asarray([1, 2], copy=None).tolist() == [1, 2]


def test_from_dlpack_dtypes_and_layout():
    pairs = [(np.bool_, mx.bool_), (np.uint16, mx.uint16), (np.uint64, mx.uint64), (np.int8, mx.int8),
             (np.float16, mx.float16), (np.float32, mx.float32), (np.float64, mx.float32),
             (np.complex64, mx.complex64), (np.complex128, mx.complex64)]
    for nt, mt in pairs:
        y = mx.from_dlpack(np.array([1, 0, 1], dtype=nt))
        assert y.dtype == mt and y.tolist() == [1, 0, 1]
    # the producer's strides are kept (over a copy of its storage)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = mx.from_dlpack(x.T)
    assert y.tolist() == x.T.tolist()
    assert memoryview(y).strides == x.T.strides and not memoryview(y).c_contiguous
    x[0, 0] = 100  # a copy: later writes to the source do not show
    assert y[0, 0].item() == 0
    s = np.arange(20, dtype=np.int32)[3:11:2]
    y = mx.from_dlpack(s)
    assert memoryview(y).strides == s.strides and (y + 1).tolist() == (s + 1).tolist()
    b = np.broadcast_to(np.array([7], dtype=np.int32), (2, 3))
    y = mx.from_dlpack(b)
    assert memoryview(y).strides == (0, 0) and y.tolist() == [[7] * 3] * 2
    assert mx.from_dlpack(np.zeros((0, 3), np.float32)).shape == (0, 3)
    assert mx.from_dlpack(mx.array([[1, 2]]).T).tolist() == [[1], [2]]
    with pytest.raises(ValueError, match="negative strides"):
        mx.from_dlpack(np.arange(5, dtype=np.float32)[::-1])
    with pytest.raises(ValueError, match="without a copy"):
        mx.from_dlpack(np.arange(5, dtype=np.float64), copy=False)
