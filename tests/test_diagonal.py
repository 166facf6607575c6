"""mx.diagonal and mx.diag (and the array methods) against NumPy; error
classes, messages and the argument matching were taken from MLX 0.32.4."""
import numpy as np
import pytest

import mkpy as mx

DTYPES = [mx.bool_, mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.int16, mx.int32, mx.int64,
          mx.float16, mx.float32, mx.float64, mx.bfloat16, mx.complex64]


def npy(a):
    return np.array(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a)


def make(shape, dtype=mx.float32, seed=0):
    rng = np.random.default_rng(seed)
    n = rng.integers(1, 100, size=shape).astype(np.float32)
    a = mx.array(n).astype(dtype)
    return a, npy(a)


def check(got, want, dtype=None):
    assert got.shape == tuple(want.shape), (got.shape, want.shape)
    if dtype is not None:
        assert got.dtype == dtype
    np.testing.assert_array_equal(npy(got), want)


def raises(exc, msg, fn, *args, **kwargs):
    with pytest.raises(exc) as e:
        r = fn(*args, **kwargs)
        if isinstance(r, mx.array):
            mx.eval(r)
    assert str(e.value) == msg, str(e.value)


def bad_call(fname, sig, types):
    return (f"{fname}(): incompatible function arguments. The following argument types are supported:\n"
            f"    1. {sig}\n\nInvoked with types: {types}")


DIAGONAL_SIG = ("diagonal(a: array, offset: int = 0, axis1: int = 0, axis2: int = 1, "
                "stream: StreamOrDevice = None) -> array")
DIAG_SIG = "diag(a: array, /, k: int = 0, *, stream: StreamOrDevice = None) -> array"


# ---------------------------------------------------------------- diagonal

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_diagonal_dtypes(dtype):
    a, n = make((3, 4), dtype)
    for off in (0, 1, -1, 3, -2, 4, -3, 100, -100):
        check(mx.diagonal(a, off), np.diagonal(n, off), dtype)
        check(a.diagonal(off), np.diagonal(n, off), dtype)


@pytest.mark.parametrize("shape", [(2, 3, 4), (4, 3, 2), (2, 1, 3, 5), (3, 3)])
def test_diagonal_axes(shape):
    a, n = make(shape, mx.int32)
    nd = len(shape)
    for a1 in range(-nd, nd):
        for a2 in range(-nd, nd):
            if a1 % nd == a2 % nd:
                continue
            for off in (0, 1, -1, 2, -3):
                check(mx.diagonal(a, off, a1, a2), np.diagonal(n, off, a1, a2))
                check(mx.diagonal(a, offset=off, axis2=a2, axis1=a1), np.diagonal(n, off, a1, a2))


def test_diagonal_values_baked():
    # MLX 0.32.4
    b = mx.arange(24).reshape(2, 3, 4)
    assert mx.diagonal(b, 0, 0, 1).tolist() == [[0, 16], [1, 17], [2, 18], [3, 19]]
    assert mx.diagonal(b, 1, 0, 2).tolist() == [[1, 14], [5, 18], [9, 22]]
    assert mx.diagonal(b, -1, 2, 1).tolist() == [[1, 6, 11], [13, 18, 23]]
    a = mx.arange(12).reshape(3, 4)
    assert mx.diagonal(a, 1, 1, 0).tolist() == [4, 9]
    assert a.diagonal(0, 0, 1, None).tolist() == [0, 5, 10]
    assert mx.diagonal(a=a, offset=1).tolist() == [1, 6, 11]


def test_diagonal_non_contiguous():
    big, bn = make((8, 10, 6), mx.float32, seed=3)
    for x, n in [(big[::2, 1::3, ::-1], bn[::2, 1::3, ::-1]), (mx.transpose(big, (2, 0, 1)), bn.transpose(2, 0, 1)),
                 (mx.broadcast_to(big[:1, :1], (4, 5, 6)), np.broadcast_to(bn[:1, :1], (4, 5, 6)))]:
        for off in (0, 1, -2):
            check(mx.diagonal(x, off, 0, 2), np.diagonal(n, off, 0, 2))
            check(mx.diagonal(x, off, 2, 1), np.diagonal(n, off, 2, 1))
        # a diagonal of a diagonal, and ops on the view
        d = mx.diagonal(x, 0, 1, 2)
        check(mx.diagonal(d, 1, 1, 0), np.diagonal(np.diagonal(n, 0, 1, 2), 1, 1, 0))
        np.testing.assert_allclose(npv := np.array(d * 2 + 1), np.diagonal(n, 0, 1, 2) * 2 + 1)
        assert npv.dtype == np.float32


def test_diagonal_empty():
    check(mx.diagonal(mx.zeros((0, 3))), np.zeros((0,), np.float32))
    check(mx.diagonal(mx.zeros((3, 0, 2)), 0, 0, 2), np.zeros((0, 2), np.float32))
    check(mx.diagonal(mx.zeros((2, 2, 0)), 0, 0, 1), np.zeros((0, 2), np.float32))
    check(mx.diagonal(mx.ones((2, 3)), 5), np.zeros((0,), np.float32))
    check(mx.diagonal(mx.ones((2, 3)), -5), np.zeros((0,), np.float32))


def test_diagonal_errors():
    a = mx.arange(12).reshape(3, 4)
    raises(ValueError, "[diagonal] Array must have at least two dimensions, but got 0 dimensions.",
           mx.diagonal, mx.array(1))
    raises(ValueError, "[diagonal] Array must have at least two dimensions, but got 1 dimensions.",
           mx.diagonal, mx.array([1, 2, 3]))
    raises(ValueError, "[diagonal] axis1 and axis2 cannot be the same axis", mx.diagonal, a, 0, 0, 0)
    raises(ValueError, "[diagonal] axis1 and axis2 cannot be the same axis", mx.diagonal, a, 0, 1, -1)
    raises(IndexError, "[diagonal] Invalid axis2 2 for array with 2 dimensions.", mx.diagonal, a, 0, 0, 2)
    raises(IndexError, "[diagonal] Invalid axis1 -3 for array with 2 dimensions.", mx.diagonal, a, 0, -3, 0)
    raises(IndexError, "[diagonal] Invalid axis2 -3 for array with 2 dimensions.", mx.diagonal, a, 0, 0, -3)
    raises(IndexError, "[diagonal] Invalid axis1 5 for array with 2 dimensions.", mx.diagonal, a, 0, 5, 5)


def test_diagonal_bad_calls():
    a = mx.arange(12).reshape(3, 4)
    raises(TypeError, bad_call("diagonal", DIAGONAL_SIG, "list"), mx.diagonal, [[1, 2], [3, 4]])
    raises(TypeError, bad_call("diagonal", DIAGONAL_SIG, "ndarray"), mx.diagonal, np.zeros((2, 2)))
    raises(TypeError, bad_call("diagonal", DIAGONAL_SIG, "mkpy.array, float"), mx.diagonal, a, 1.5)
    raises(TypeError, bad_call("diagonal", DIAGONAL_SIG, "mkpy.array, int"), mx.diagonal, a, 2**31)
    raises(TypeError, bad_call("diagonal", DIAGONAL_SIG, "mkpy.array, kwargs = { foo: int }"),
           mx.diagonal, a, foo=1)
    raises(TypeError, bad_call("diagonal", DIAGONAL_SIG, ""), mx.diagonal)
    raises(TypeError, bad_call("diagonal", DIAGONAL_SIG, "mkpy.array, int, int, int, NoneType, int"),
           mx.diagonal, a, 0, 0, 1, None, 3)
    # int-likes are accepted as MLX's int caster accepts them
    check(mx.diagonal(a, np.int64(1), np.int32(1), False), np.diagonal(np.array(a), 1, 1, 0))
    check(mx.diagonal(a, mx.array(-1)), np.diagonal(np.array(a), -1))


# -------------------------------------------------------------------- diag

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_diag_dtypes(dtype):
    v, vn = make((4,), dtype)
    m, mn = make((3, 5), dtype)
    for k in (0, 1, -1, 3, -4, 6, -7):
        check(mx.diag(v, k), np.diag(vn, k), dtype)
        check(v.diag(k), np.diag(vn, k), dtype)
        check(mx.diag(m, k=k), np.diag(mn, k), dtype)
        check(m.diag(k=k), np.diag(mn, k), dtype)


def test_diag_values_baked():
    # MLX 0.32.4
    x = mx.array([1, 2, 3])
    assert mx.diag(x).tolist() == [[1, 0, 0], [0, 2, 0], [0, 0, 3]]
    assert mx.diag(x, 1).tolist() == [[0, 1, 0, 0], [0, 0, 2, 0], [0, 0, 0, 3], [0, 0, 0, 0]]
    assert mx.diag(x, -2).tolist() == [[0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 2, 0, 0, 0],
                                       [0, 0, 3, 0, 0]]
    assert mx.diag(x, 7).shape == (10, 10)
    assert mx.diag(mx.array([True, False])).tolist() == [[True, False], [False, False]]
    b = mx.diag(mx.array([1, 2], dtype=mx.bfloat16), -1)
    assert b.dtype == mx.bfloat16 and b.tolist() == [[0, 0, 0], [1, 0, 0], [0, 2, 0]]
    a = mx.arange(12).reshape(3, 4)
    assert mx.diag(a, -2).tolist() == [8]
    assert mx.diag(a, np.int64(1)).tolist() == [1, 6, 11]
    assert mx.diag(a, mx.array(1)).tolist() == [1, 6, 11]
    assert mx.diag(a, True).tolist() == [1, 6, 11]


def test_diag_non_contiguous_and_empty():
    big, bn = make((9, 8), mx.int32, seed=4)
    for x, n in [(big[::3, 2], bn[::3, 2]), (big[1, ::-2], bn[1, ::-2]), (mx.broadcast_to(big[0, :1], (5,)),
                                                                         np.broadcast_to(bn[0, :1], (5,)))]:
        for k in (0, 2, -1):
            check(mx.diag(x, k), np.diag(n, k))
    for x, n in [(big.T[1::2, ::3], bn.T[1::2, ::3]), (big[::-1], bn[::-1])]:
        for k in (0, 2, -1):
            check(mx.diag(x, k), np.diag(n, k))
    # MLX: an empty vector gives a |k| x |k| matrix of zeros
    check(mx.diag(mx.zeros((0,))), np.zeros((0, 0), np.float32))
    check(mx.diag(mx.zeros((0,)), 1), np.zeros((1, 1), np.float32))
    check(mx.diag(mx.zeros((0,)), -2), np.zeros((2, 2), np.float32))
    check(mx.diag(mx.zeros((0, 3)), 1), np.zeros((0,), np.float32))


def test_diag_errors():
    a = mx.arange(12).reshape(3, 4)
    raises(ValueError, "[diag] array must be 1-D or 2-D, got array with 0 dimensions.", mx.diag, mx.array(1))
    raises(ValueError, "[diag] array must be 1-D or 2-D, got array with 3 dimensions.", mx.diag,
           mx.zeros((2, 3, 4)), 1)
    raises(TypeError, bad_call("diag", DIAG_SIG, "list"), mx.diag, [1, 2])
    raises(TypeError, bad_call("diag", DIAG_SIG, "int"), mx.diag, 3)
    raises(TypeError, bad_call("diag", DIAG_SIG, "ndarray"), mx.diag, np.arange(4))
    raises(TypeError, bad_call("diag", DIAG_SIG, "ndarray, int64"), mx.diag, np.zeros(3), np.int64(1))
    raises(TypeError, bad_call("diag", DIAG_SIG, "mkpy.array, int, int"), mx.diag, a, 1, 2)
    raises(TypeError, bad_call("diag", DIAG_SIG, "mkpy.array, int, NoneType"), mx.diag, a, 0, None)
    raises(TypeError, bad_call("diag", DIAG_SIG, "mkpy.array, float"), mx.diag, a, 1.5)
    raises(TypeError, bad_call("diag", DIAG_SIG, "mkpy.array, NoneType"), mx.diag, a, None)
    raises(TypeError, bad_call("diag", DIAG_SIG, "mkpy.array, int"), mx.diag, a, 2**40)
    raises(TypeError, bad_call("diag", DIAG_SIG, "mkpy.array, mkpy.array"), mx.diag, a, mx.array(1.0))
    raises(TypeError, bad_call("diag", DIAG_SIG, "kwargs = { a: mkpy.array }"), mx.diag, a=a)
    raises(TypeError, bad_call("diag", DIAG_SIG, ""), mx.diag)
