"""Shape ops against NumPy: views (reshape, transpose, ...), copies (concatenate,
stack, tile, repeat, pad), split and broadcasting helpers. Error classes and
messages were taken from MLX 0.32."""
import numpy as np
import pytest

import mkpy as mx

# Every dtype: shape ops only move data, so bfloat16 is compared bit for bit
# (its buffer export is the raw uint16 pattern).
DTYPES = [mx.bool_, mx.uint8, mx.uint16, mx.uint32, mx.uint64, mx.int8, mx.int16, mx.int32, mx.int64,
          mx.float16, mx.float32, mx.float64, mx.bfloat16, mx.complex64]
MAIN_DTYPES = [mx.float32, mx.float16, mx.bfloat16, mx.int32, mx.int64, mx.uint8, mx.bool_]


def make(shape, dtype=mx.float32, seed=0):
    """An mkpy array of the given shape and dtype, and its NumPy twin."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 100, size=shape).astype(np.float32) if shape else np.float32(7)
    a = mx.array(np.asarray(base)).astype(dtype)
    return a, npy(a)


def npy(a):
    # bfloat16 has no NumPy dtype: compare it through float32 (exact)
    return np.array(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a)


def check(got, want):
    got_n = npy(got)
    assert got.shape == tuple(want.shape), (got.shape, want.shape)
    assert got_n.dtype == want.dtype, (got_n.dtype, want.dtype)
    np.testing.assert_array_equal(got_n, want)


def raises(exc, msg, fn, *args, **kwargs):
    with pytest.raises(exc) as e:
        r = fn(*args, **kwargs)
        if isinstance(r, mx.array):
            mx.eval(r)
    if msg is not None:
        assert str(e.value) == msg, str(e.value)


def views(shape, dtype=mx.float32):
    """(mkpy, numpy) pairs holding the same values with different layouts:
    contiguous, transposed, strided slices, broadcast."""
    a, n = make(shape, dtype)
    out = [(a, n)]
    if len(shape) >= 2:
        big, bign = make(tuple(s * 2 for s in shape[::-1]), dtype, seed=1)
        sl = tuple(slice(None, None, 2) for _ in shape)
        out.append((mx.transpose(big[sl]), bign[sl].T))
        out.append((a.T.T, n))
    if len(shape) >= 1 and shape[-1] > 0:
        b, bn = make(shape[:-1] + (1,), dtype, seed=2)
        out.append((mx.broadcast_to(b, shape), np.broadcast_to(bn, shape)))
    return out


# --------------------------------------------------------------------- reshape

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_dtypes(dtype):
    a, n = make((2, 3, 4), dtype)
    for shape in [(24,), (4, 6), (2, 12), (-1, 3), (2, -1, 2), (1, 24, 1), (4, 1, 3, 2)]:
        check(mx.reshape(a, shape), n.reshape(shape))
        check(mx.reshape(a.T, shape), n.T.reshape(shape))
        check(mx.reshape(a[:, ::-2, 1:], (-1,)), n[:, ::-2, 1:].reshape(-1))


def test_reshape_layouts():
    for shape in [(6, 4), (3, 8), (5, 1, 7)]:
        for a, n in views(shape):
            for new in [(-1,), (shape[0], -1), (-1, shape[-1]), (1, -1, 1)]:
                check(mx.reshape(a, new), n.reshape(new))
                check(a.reshape(new), n.reshape(new))


def test_reshape_views_and_copies():
    # merging the dims of a transposed array needs a copy; splitting one does not
    a, n = make((4, 6))
    t = a.T
    check(t.reshape(24), n.T.reshape(24))
    check(t.reshape(2, 3, 2, 2), n.T.reshape(2, 3, 2, 2))
    check(t.reshape(6, 2, 2).reshape(-1), n.T.reshape(-1))
    s = a[::2, 1::2]
    check(s.reshape(-1), n[::2, 1::2].reshape(-1))
    check(s.reshape(3, 2).T.reshape(6), n[::2, 1::2].reshape(3, 2).T.reshape(6))
    # broadcast dims merge without a copy
    b = mx.broadcast_to(mx.array([[1], [2], [3]]), (2, 3, 4))
    bn = np.broadcast_to(np.array([[1], [2], [3]], np.int32), (2, 3, 4))
    for shape in [(-1,), (6, 4), (2, 12), (2, 3, 2, 2)]:
        check(b.reshape(shape), bn.reshape(shape))


def test_reshape_big_noncontiguous():
    n = np.arange(300 * 500, dtype=np.float32).reshape(300, 500)
    a = mx.array(n)
    check(a.T.reshape(-1), n.T.reshape(-1))
    check(a[::3, ::-2].reshape(50, -1), n[::3, ::-2].reshape(50, -1))
    c = mx.array(np.arange(2 ** 17, dtype=np.int64).reshape(2 ** 8, 2 ** 9))
    check(mx.reshape(mx.swapaxes(c, 0, 1), (2, -1)), np.arange(2 ** 17).reshape(2 ** 8, 2 ** 9).T.reshape(2, -1))


@pytest.mark.parametrize("dtype", [mx.uint8, mx.float16, mx.int32, mx.complex64, mx.bool_])
def test_transposed_copies(dtype):
    # copies of transposed data go by tiles: odd sizes, outer dims, negative strides
    a, n = make((3, 45, 70), dtype)
    check(mx.swapaxes(a, 1, 2).reshape(3, -1), np.swapaxes(n, 1, 2).reshape(3, -1))
    check(a.T.reshape(-1), n.T.reshape(-1))
    check(a[:, ::-1, 3:].T.reshape(67, -1), n[:, ::-1, 3:].T.reshape(67, -1))
    check(mx.concatenate([a.T, a.T], 1), np.concatenate([n.T, n.T], 1))


def test_reshape_edge_cases():
    check(mx.reshape(mx.array(5), (1, 1)), np.array([[5]], np.int32))
    check(mx.reshape(mx.array(5), (-1,)), np.array([5], np.int32))
    check(mx.reshape(mx.array([5]), ()), np.array(5, np.int32))
    e = mx.array(np.zeros((0, 3), np.float32))
    check(mx.reshape(e, (-1, 3)), np.zeros((0, 3), np.float32))
    check(mx.reshape(e, (3, 0, 5)), np.zeros((3, 0, 5), np.float32))
    check(mx.reshape(mx.array(np.zeros(0, np.float32)), (2, -1)), np.zeros((2, 0), np.float32))
    a, n = make((2, 3))
    check(a.reshape(2, 3), n)
    check(a.reshape([6]), n.reshape(6))
    check(a.reshape(np.array([3, 2])), n.reshape(3, 2))
    check(a.reshape(mx.array([3, 2])), n.reshape(3, 2))
    check(a.reshape(-1), n.reshape(-1))
    check(a.reshape((np.int64(3), 2)), n.reshape(3, 2))
    check(mx.reshape(a, shape=(3, 2)), n.reshape(3, 2))


def test_reshape_errors():
    x, _ = make((2, 3, 4), mx.int32)
    e = mx.array(np.zeros((0, 3), np.float32))
    raises(ValueError, "[reshape] Cannot reshape array of size 24 into shape (5,5).", mx.reshape, x, (5, 5))
    raises(ValueError, "[reshape] Reshape can only infer one dimension.", mx.reshape, x, (-1, -1))
    raises(ValueError, "[reshape] Reshape can only infer one dimension.", mx.reshape, x, (2, -1, -1))
    raises(ValueError, "[reshape] Cannot reshape array of size 24 into shape (-2,12).", mx.reshape, x, (-2, 12))
    raises(ValueError, "[reshape] Cannot reshape array of size 24 into shape (4,5).", mx.reshape, x, (-1, 5))
    raises(ValueError, "[reshape] Cannot infer the shape of an empty array", mx.reshape, x, (0, -1))
    raises(ValueError, "[reshape] Cannot infer the shape of an empty array", mx.reshape, e, (-1, 0))
    raises(ValueError, "[reshape] Cannot infer the shape of an empty array", mx.reshape, e, (3, -1, 0))
    raises(ValueError, "[reshape] Cannot reshape array of size 24 into shape ().", mx.reshape, x, ())
    raises(TypeError, None, mx.reshape, x, (24.0,))
    raises(TypeError, None, mx.reshape, x, "ab")


# ------------------------------------------------------- transpose and friends

@pytest.mark.parametrize("dtype", MAIN_DTYPES)
def test_transpose(dtype):
    a, n = make((2, 3, 4), dtype)
    check(mx.transpose(a), n.T)
    check(a.T, n.T)
    check(a.transpose(), n.T)
    for axes in [(0, 1, 2), (2, 0, 1), (1, 2, 0), (0, -1, 1), (-3, -2, -1)]:
        check(mx.transpose(a, axes), np.transpose(n, axes))
        check(mx.transpose(a, axes=list(axes)), np.transpose(n, axes))
        check(a.transpose(*axes), np.transpose(n, axes))
        check(a.transpose(axes), np.transpose(n, axes))
        check(mx.permute_dims(a, axes), np.transpose(n, axes))
    check(mx.transpose(a, np.array([2, 1, 0])), n.T)
    check(mx.transpose(mx.array(3)), np.array(3, np.int32))
    check(mx.transpose(mx.array(3), ()), np.array(3, np.int32))
    check(mx.array(np.zeros((0, 2), np.float32)).T, np.zeros((2, 0), np.float32))
    # views of views
    check(a.T[1:, ::2].T, n.T[1:, ::2].T)
    check(mx.transpose(a[:, ::-1], (2, 0, 1))[::2], np.transpose(n[:, ::-1], (2, 0, 1))[::2])


def test_transpose_errors():
    x, _ = make((2, 3, 4))
    raises(ValueError, "[transpose] Received 2 axes for array with 3 dimensions.", mx.transpose, x, (0, 1))
    raises(ValueError, "[transpose] Received 4 axes for array with 3 dimensions.", mx.transpose, x, (0, 1, 2, 3))
    raises(IndexError, "[transpose] Invalid axis (3) for array with 3 dimensions.", mx.transpose, x, (0, 1, 3))
    raises(IndexError, "[transpose] Invalid axis (-1) for array with 3 dimensions.", mx.transpose, x, (0, 1, -4))
    raises(IndexError, "[transpose] Invalid axis (-2) for array with 3 dimensions.", mx.transpose, x, (-5, 1, 2))
    raises(IndexError, "[transpose] Invalid axis (5) for array with 3 dimensions.", mx.transpose, x, (5, 1, 1))
    raises(ValueError, "[transpose] Repeat axes not allowed.", mx.transpose, x, (0, 1, 1))
    raises(ValueError, "[transpose] Repeat axes not allowed.", mx.transpose, x, (1, 1, 5))


def test_swapaxes_moveaxis():
    for a, n in views((3, 4, 5)):
        for i in range(-3, 3):
            for j in range(-3, 3):
                check(mx.swapaxes(a, i, j), np.swapaxes(n, i, j))
                check(mx.moveaxis(a, i, j), np.moveaxis(n, i, j))
        check(a.swapaxes(0, 2), np.swapaxes(n, 0, 2))
        check(a.moveaxis(0, -1), np.moveaxis(n, 0, -1))
    a, n = make((2, 3, 4))
    check(mx.swapaxes(a, axis1=0, axis2=2), np.swapaxes(n, 0, 2))
    check(mx.moveaxis(a, source=0, destination=-1), np.moveaxis(n, 0, -1))
    check(mx.swapaxes(a, np.int64(0), 1), np.swapaxes(n, 0, 1))
    raises(IndexError, "[swapaxes] Invalid axis 3 for array with 3 dimensions.", mx.swapaxes, a, 0, 3)
    raises(IndexError, "[swapaxes] Invalid axis -4 for array with 3 dimensions.", mx.swapaxes, a, -4, 0)
    raises(IndexError, "[moveaxis] Invalid axis 3 for array with 3 dimensions.", mx.moveaxis, a, 3, 0)
    raises(IndexError, "[moveaxis] Invalid axis -4 for array with 3 dimensions.", mx.moveaxis, a, 0, -4)
    raises(TypeError, None, mx.swapaxes, a, 0.0, 1)


def test_expand_dims():
    for a, n in views((3, 4)):
        for ax in [0, 1, 2, -1, -2, -3, (0, 1), (0, 3), (-1, 0, 2), [1], ()]:
            check(mx.expand_dims(a, ax), np.expand_dims(n, ax))
    check(mx.expand_dims(mx.array(1.5), (0, 1, -1)), np.full((1, 1, 1), 1.5, np.float32))
    a, n = make((2, 3, 4))
    check(mx.expand_dims(a, axis=np.int64(0)), n[None])
    check(mx.expand_dims(a, mx.array([0])), n[None])
    raises(ValueError, "[expand_dims] Axis 4 is out of bounds for array with 4 dimensions.", mx.expand_dims, a, 4)
    raises(ValueError, "[expand_dims] Axis -5 is out of bounds for array with 4 dimensions.", mx.expand_dims, a, -5)
    raises(ValueError, "[expand_dims] Axis 5 is out of bounds for array with 5 dimensions.", mx.expand_dims, a,
           (0, 5))
    raises(ValueError, "[expand_dims] Axis 7 is out of bounds for array with 6 dimensions.", mx.expand_dims, a,
           (0, 0, 7))
    raises(ValueError, "[expand_dims] Received duplicate axes.", mx.expand_dims, a, (0, 0))
    raises(ValueError, "[expand_dims] Received duplicate axes.", mx.expand_dims, a, (0, -5))
    raises(ValueError, "[expand_dims] Received duplicate axes.", mx.expand_dims, a, (-1, 4))
    raises(TypeError, None, mx.expand_dims, a, None)


def test_squeeze():
    a = mx.array(np.arange(6, dtype=np.float32).reshape(1, 2, 1, 3, 1))
    n = np.arange(6, dtype=np.float32).reshape(1, 2, 1, 3, 1)
    for ax in [None, 0, 2, -1, (0, 2), (0, -1, 2), [4], ()]:
        check(mx.squeeze(a, ax), np.squeeze(n, tuple(ax) if isinstance(ax, list) else ax))
    check(a.squeeze(), n.squeeze())
    check(a.squeeze(0), n.squeeze(0))
    check(mx.squeeze(a, axis=np.int64(0)), n.squeeze(0))
    check(mx.squeeze(a.T, 2), n.T.squeeze(2))
    check(mx.squeeze(mx.array(1)), np.array(1, np.int32))
    x = mx.array(np.zeros((1, 2, 1), np.float32))
    raises(ValueError, "[squeeze] Cannot squeeze axis 1 with size 2 which is not equal to 1.", mx.squeeze, a, 1)
    raises(ValueError, "[squeeze] Cannot squeeze axis -4 with size 2 which is not equal to 1.", mx.squeeze, a, -4)
    raises(ValueError, "[squeeze] Axis 5 is out of bounds for array with 5 dimensions.", mx.squeeze, a, 5)
    raises(ValueError, "[squeeze] Axis -6 is out of bounds for array with 5 dimensions.", mx.squeeze, a, -6)
    raises(ValueError, "[squeeze] Axis 3 is out of bounds for array with 3 dimensions.", mx.squeeze, x, (0, 3))
    raises(ValueError, "[squeeze] Received duplicate axes.", mx.squeeze, x, (0, 0))
    raises(ValueError, "[squeeze] Received duplicate axes.", mx.squeeze, x, (0, -3))
    raises(ValueError, "[squeeze] Cannot squeeze axis 1 with size 2 which is not equal to 1.", mx.squeeze, x, (1, 1))
    raises(ValueError, "[squeeze] Axis 0 is out of bounds for array with 0 dimensions.", mx.squeeze, mx.array(1), 0)


def test_squeeze_message_uses_given_axis():
    a, _ = make((2, 3, 4))
    raises(ValueError, "[squeeze] Cannot squeeze axis -3 with size 2 which is not equal to 1.", mx.squeeze, a, -3)


def test_flatten():
    for a, n in views((2, 3, 4)):
        check(mx.flatten(a), n.reshape(-1))
        check(a.flatten(), n.reshape(-1))
        check(mx.flatten(a, 1), n.reshape(2, 12))
        check(a.flatten(1), n.reshape(2, 12))
        check(mx.flatten(a, end_axis=1), n.reshape(6, 4))
        check(mx.flatten(a, 1, 1), n)
        check(mx.flatten(a, -2, -1), n.reshape(2, 12))
        # out-of-range axes are clamped, as in MLX
        check(mx.flatten(a, -4), n.reshape(-1))
        check(mx.flatten(a, 0, 5), n.reshape(-1))
    for s, e in [(0, 0), (1, 1), (-1, -1), (2, 3), (-2, 0)]:
        check(mx.flatten(mx.array(2.0), s, e), np.array([2.0], np.float32))
    a, _ = make((2, 3, 4))
    msg = "[flatten] start_axis must be less than or equal to end_axis"
    for s, e in [(2, 1), (3, -1), (-10, -10), (0, -5), (5, 10)]:
        raises(ValueError, msg, mx.flatten, a, s, e)
    raises(TypeError, None, mx.flatten, a, 0.0)


def test_unflatten():
    a, n = make((2, 6))
    check(mx.unflatten(a, 1, (2, 3)), n.reshape(2, 2, 3))
    check(mx.unflatten(a, -1, (2, -1, 1)), n.reshape(2, 2, 3, 1))
    check(mx.unflatten(a.T, 0, (3, 2)), n.T.reshape(3, 2, 2))
    check(mx.unflatten(a, 0, (2,)), n)
    raises(IndexError, "[unflatten] Invalid axes 2 for array with 2 dimensions.", mx.unflatten, a, 2, (2, 3))
    raises(ValueError, "[unflatten] Shape to unflatten to cannot be empty.", mx.unflatten, a, 1, ())
    raises(ValueError, "[Unflatten] Can only infer one dimension.", mx.unflatten, a, 1, (-1, -1))
    raises(ValueError, "[Unflatten] Cannot unflatten axis 1 with size 6 into shape (4,1).", mx.unflatten, a, 1,
           (4, -1))


# ------------------------------------------------------------------ broadcasting

def test_broadcast_to():
    for dtype in MAIN_DTYPES:
        a, n = make((3, 1), dtype)
        for shape in [(3, 1), (3, 4), (2, 3, 4), (0, 3, 5), (1, 3, 0)]:
            check(mx.broadcast_to(a, shape), np.broadcast_to(n, shape))
    a, n = make((3, 1))
    check(mx.broadcast_to(a.T, (5, 1, 3)), np.broadcast_to(n.T, (5, 1, 3)))
    check(mx.broadcast_to(a[::-1], [2, 3, 2]), np.broadcast_to(n[::-1], (2, 3, 2)))
    check(mx.broadcast_to(1.5, (2, 3)), np.full((2, 3), 1.5, np.float32))
    check(mx.broadcast_to(mx.array(2), ()), np.array(2, np.int32))
    check(mx.broadcast_to(mx.array(np.zeros(0, np.float32)), (3, 0)), np.zeros((3, 0), np.float32))
    b = mx.broadcast_to(a, (2, 3, 4))
    check(b[1, ::2, 1:3], np.broadcast_to(n, (2, 3, 4))[1, ::2, 1:3])
    check(mx.broadcast_to(b, (5, 2, 3, 4)).reshape(-1), np.broadcast_to(n, (5, 2, 3, 4)).reshape(-1))


def test_broadcast_to_errors():
    x, _ = make((2, 3, 4))
    raises(ValueError, "Cannot broadcast array of shape (2,3,4) into shape (3,4).", mx.broadcast_to, x, (3, 4))
    raises(ValueError, "Cannot broadcast array of shape (2,3,4) into shape ().", mx.broadcast_to, x, ())
    raises(ValueError, "Cannot broadcast array of shape (2,3,4) into shape (2,3,1).", mx.broadcast_to, x, (2, 3, 1))
    raises(ValueError, "Cannot broadcast array of shape (0) into shape (3,1).", mx.broadcast_to,
           mx.array(np.zeros(0, np.float32)), (3, 1))
    raises(ValueError, "[broadcast_shapes] Shapes (2,3,4) and (2,2,4) cannot be broadcast.", mx.broadcast_to, x,
           (2, 2, 4))
    raises(ValueError, "[broadcast_to] Negative dimensions not allowed.", mx.broadcast_to, x, (-1, 3, 4))
    raises(ValueError, "[broadcast_to] Negative dimensions not allowed.", mx.broadcast_to, x, (2, 3, 4, -1))
    raises(ValueError, "Invalid type list received in array initialization.", mx.broadcast_to, [1, 2], (2, 2))


def test_broadcast_arrays_and_shapes():
    a, an = make((3, 1), mx.int32)
    b, bn = make((2, 1, 4), mx.float16)
    c = mx.array(1.0)
    out = mx.broadcast_arrays(a, b, c)
    assert isinstance(out, list) and len(out) == 3
    for got, want in zip(out, np.broadcast_arrays(an, bn, np.float32(1.0))):
        check(got, want)
    assert [o.dtype for o in out] == [mx.int32, mx.float16, mx.float32]
    assert mx.broadcast_arrays() == []
    (one,) = mx.broadcast_arrays(a)
    check(one, an)
    check(mx.broadcast_arrays(a.T, a)[0], np.broadcast_arrays(an.T, an)[0])
    raises(ValueError, "[broadcast_shapes] Shapes (3,1) and (2,2,5) cannot be broadcast.", mx.broadcast_arrays, a,
           mx.broadcast_to(b[..., :1], (2, 2, 5)))
    raises(TypeError, None, mx.broadcast_arrays, a, 1.0)
    raises(TypeError, None, mx.broadcast_arrays, [a, a])

    assert mx.broadcast_shapes((2, 3), (3,)) == (2, 3)
    assert mx.broadcast_shapes((2, 3)) == (2, 3)
    assert mx.broadcast_shapes([2, 3], (1, 1, 3)) == (1, 2, 3)
    assert mx.broadcast_shapes((2, 3), [1, 3], (3,)) == (2, 3)
    assert mx.broadcast_shapes((), ()) == ()
    assert mx.broadcast_shapes((0, 3), (1, 3)) == (0, 3)
    assert mx.broadcast_shapes(np.array([2, 3]), (3,)) == (2, 3)
    for shapes in [((5, 1, 4), (3, 1)), ((1,), (7, 2, 1)), ((4, 0), (1,))]:
        assert mx.broadcast_shapes(*shapes) == np.broadcast_shapes(*shapes)
    raises(ValueError, "[broadcast_shapes] Shapes (2,3) and (4) cannot be broadcast.", mx.broadcast_shapes, (2, 3),
           (4,))
    raises(ValueError, "[broadcast_shapes] Shapes (0,3) and (2,3) cannot be broadcast.", mx.broadcast_shapes,
           (0, 3), (2, 3))
    raises(ValueError, "[broadcast_shapes] Shapes (2,3) and (4,3) cannot be broadcast.", mx.broadcast_shapes,
           (2, 3), (4, 3), (1,))
    raises(ValueError, "[broadcast_shapes] Must provide at least one shape.", mx.broadcast_shapes)
    raises(ValueError, "[broadcast_shapes] Expects a sequence of shapes (tuple or list of ints).",
           mx.broadcast_shapes, (2, 3), mx.array([1, 3]))


def test_atleast():
    s, v, m = mx.array(1.0), mx.array([1, 2]), mx.array([[1, 2]])
    check(mx.atleast_1d(s), np.atleast_1d(np.float32(1.0)))
    check(mx.atleast_2d(s), np.atleast_2d(np.float32(1.0)))
    check(mx.atleast_3d(s), np.atleast_3d(np.float32(1.0)))
    check(mx.atleast_2d(v), np.atleast_2d(np.array([1, 2], np.int32)))
    check(mx.atleast_3d(v), np.atleast_3d(np.array([1, 2], np.int32)))
    check(mx.atleast_3d(m), np.atleast_3d(np.array([[1, 2]], np.int32)))
    big, bn = make((2, 3, 4, 5))
    check(mx.atleast_3d(big), bn)
    out = mx.atleast_1d(s, v)
    assert isinstance(out, list) and [o.shape for o in out] == [(1,), (2,)]
    assert mx.atleast_1d() == []


# -------------------------------------------------------------------- concatenate

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_concatenate_dtypes(dtype):
    a, an = make((2, 3), dtype, seed=1)
    b, bn = make((2, 5), dtype, seed=2)
    check(mx.concatenate([a, b], axis=1), np.concatenate([an, bn], 1))
    check(mx.concatenate([a, a, a]), np.concatenate([an, an, an]))
    check(mx.concatenate([a, b], axis=None), np.concatenate([an.ravel(), bn.ravel()]))


def test_concatenate_layouts():
    for shape in [(4, 6), (3, 5, 2)]:
        vs = views(shape)
        for axis in range(-len(shape), len(shape)):
            got = mx.concatenate([v[0] for v in vs], axis=axis)
            want = np.concatenate([v[1] for v in vs], axis=axis)
            check(got, want)
        check(mx.concatenate([v[0] for v in vs], axis=None), np.concatenate([v[1].ravel() for v in vs]))


def test_concatenate_cases():
    a, an = make((2, 3, 4))
    check(mx.concatenate((a, a)), np.concatenate((an, an)))
    check(mx.concatenate([a]), an)
    check(mx.concatenate([a], 5), an)  # a single array is returned as is, as MLX
    check(mx.concatenate(a), np.concatenate(list(an)))  # an array is a sequence of arrays
    check(mx.concatenate([a, a], np.int64(1)), np.concatenate([an, an], 1))
    check(mx.concatenate([a, a], True), np.concatenate([an, an], 1))
    check(mx.concat([a, a], 2), np.concatenate([an, an], 2))
    check(mx.concatenate([a, a[0]], axis=None), np.concatenate([an.ravel(), an[0].ravel()]))
    check(mx.concatenate([mx.array(1), mx.array(2)], axis=None), np.array([1, 2], np.int32))
    e = mx.array(np.zeros((0, 3), np.float32))
    check(mx.concatenate([e, mx.array(np.ones((2, 3), np.float32))]), np.ones((2, 3), np.float32))
    check(mx.concatenate([e, mx.array(np.zeros((0, 2), np.float32))], 1), np.zeros((0, 5), np.float32))
    check(mx.concatenate([e, e]), np.zeros((0, 3), np.float32))
    # big enough to be split over threads
    n1 = np.arange(200 * 300, dtype=np.float32).reshape(200, 300)
    m1 = mx.array(n1)
    check(mx.concatenate([m1, m1.T[:200, :200] * 1, m1[:, ::-1]], axis=1),
          np.concatenate([n1, n1.T[:200, :200], n1[:, ::-1]], axis=1))
    check(mx.concatenate([m1.T, m1.T]), np.concatenate([n1.T, n1.T]))
    many = [mx.array([i]) for i in range(300)]
    check(mx.concatenate(many), np.arange(300, dtype=np.int32))


def test_concatenate_promotion():
    cases = [  # from MLX 0.32
        (mx.int32, mx.float32, mx.float32), (mx.uint8, mx.int8, mx.int16), (mx.uint8, mx.bool_, mx.uint8),
        (mx.float16, mx.bfloat16, mx.float32), (mx.int64, mx.float16, mx.float16),
        (mx.uint32, mx.int32, mx.int64), (mx.bool_, mx.complex64, mx.complex64),
    ]
    for t1, t2, want in cases:
        a = mx.array([1, 0]).astype(t1)
        b = mx.array([1]).astype(t2)
        r = mx.concatenate([a, b])
        assert r.dtype == want, (t1, t2, r.dtype)
        assert mx.stack([a[:1], b]).dtype == want
    r = mx.concatenate([mx.array([1, 2]), mx.array([2.5])])
    np.testing.assert_array_equal(npy(r), np.array([1, 2, 2.5], np.float32))
    r = mx.concatenate([mx.array([True]), mx.array([0.5], mx.float16), mx.array([3], mx.int8)])
    assert r.dtype == mx.float16 and r.tolist() == [1.0, 0.5, 3.0]


def test_concatenate_errors():
    x, _ = make((2, 3, 4))
    raises(ValueError, "[concatenate] Axis 3 is out of bounds for array with 3 dimensions.", mx.concatenate, [x, x], 3)
    raises(ValueError, "[concatenate] Axis -4 is out of bounds for array with 3 dimensions.", mx.concatenate,
           [x, x], -4)
    raises(ValueError, "[concatenate] Axis 5 is out of bounds for array with 3 dimensions.", mx.concatenate,
           [x, x[0]], 5)
    raises(ValueError, "[concatenate] Axis 0 is out of bounds for array with 0 dimensions.", mx.concatenate,
           [mx.array(1), mx.array(2)])
    raises(ValueError, "[concatenate] All the input arrays must have the same number of dimensions. However, got "
           "arrays with dimensions 3 and 2.", mx.concatenate, [x, x[0]])
    raises(ValueError, "[concatenate] All the input array dimensions must match exactly except for the "
           "concatenation axis. However, the provided shapes are (2,3,4), (2,2,4), and the concatenation axis is 0.",
           mx.concatenate, [x, x[:, :2]])
    raises(ValueError, "[concatenate] All the input array dimensions must match exactly except for the "
           "concatenation axis. However, the provided shapes are (2,3,4), (2,2,4), and the concatenation axis is -3.",
           mx.concatenate, [x, x[:, :2]], -3)
    raises(ValueError, "[concatenate] No arrays provided for concatenation", mx.concatenate, [])
    raises(ValueError, "[concatenate] No arrays provided for concatenation", mx.concatenate, [], axis=None)
    raises(TypeError, None, mx.concatenate, [x, [1, 2]])
    raises(TypeError, None, mx.concatenate, [x, 2])
    raises(TypeError, None, mx.concatenate, [x, np.zeros((2, 3, 4))])
    raises(TypeError, None, mx.concatenate, [x, x], axis=1.0)


# ------------------------------------------------------------------------ stack

@pytest.mark.parametrize("dtype", MAIN_DTYPES)
def test_stack(dtype):
    a, an = make((2, 3), dtype, seed=1)
    b, bn = make((3, 2), dtype, seed=2)
    for axis in [0, 1, 2, -1, -2, -3]:
        check(mx.stack([a, b.T, a.T.T], axis=axis), np.stack([an, bn.T, an], axis=axis))
    check(mx.stack([a]), an[None])
    check(mx.stack([a, a], axis=None), np.stack([an, an]))
    check(mx.stack(a), np.stack(list(an)))
    check(mx.stack([mx.array(1), mx.array(2.0)]), np.array([1, 2], np.float32))
    check(mx.stack([mx.array(1), mx.array(2)], axis=-1), np.array([1, 2], np.int32))
    e = mx.array(np.zeros((0, 2), np.float32))
    check(mx.stack([e, e], 1), np.zeros((0, 2, 2), np.float32))


def test_stack_errors():
    x, _ = make((2, 3, 4))
    raises(ValueError, "[stack] Axis 4 is out of bounds for array with 4 dimensions.", mx.stack, [x, x], 4)
    raises(ValueError, "[stack] Axis -5 is out of bounds for array with 4 dimensions.", mx.stack, [x, x], -5)
    raises(ValueError, "[stack] Axis 1 is out of bounds for array with 1 dimensions.", mx.stack,
           [mx.array(1), mx.array(2)], 1)
    raises(ValueError, "[stack] All arrays must have the same shape", mx.stack, [x, x[0]])
    raises(ValueError, "[stack] All arrays must have the same shape", mx.stack, [x, x[0]], 7)
    raises(ValueError, "[stack] No arrays provided for stacking", mx.stack, [])
    raises(ValueError, "[stack] No arrays provided for stacking", mx.stack, [], 7)
    raises(TypeError, None, mx.stack, [[1, 2], [3, 4]])


# ------------------------------------------------------------------------ split

@pytest.mark.parametrize("dtype", MAIN_DTYPES)
def test_split_sections(dtype):
    for a, n in views((6, 4), dtype):
        for sections, axis in [(1, 0), (2, 0), (3, 0), (6, 0), (2, 1), (4, -1), (3, -2)]:
            got = mx.split(a, sections, axis)
            want = np.split(n, sections, axis)
            assert isinstance(got, list) and len(got) == len(want)
            for g, w in zip(got, want):
                check(g, w)
    a, n = make((6, 4), dtype)
    for g, w in zip(a.split(2), np.split(n, 2)):
        check(g, w)
    for g, w in zip(mx.split(a, indices_or_sections=2, axis=1), np.split(n, 2, 1)):
        check(g, w)


def test_split_indices():
    a, n = make((2, 3, 4))
    for idx in [[1, 2], [], [3, 1], [-1], [-5], [10], [2, 2], (1, 3), [0], [4], [-2, -1, 10, 0]]:
        got = mx.split(a, idx, 2)
        want = np.split(n, idx, 2)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            check(g, w)
    for g, w in zip(mx.split(a, np.array([1]), 2), np.split(n, [1], 2)):
        check(g, w)
    for g, w in zip(mx.split(a, mx.array([1, 2]), axis=1), np.split(n, [1, 2], 1)):
        check(g, w)
    for g, w in zip(mx.split(a.T, [1, 3]), np.split(n.T, [1, 3])):
        check(g, w)
    # an int-like (numpy integer, bool, 0-d array) means sections
    assert len(mx.split(a, np.int64(2))) == 2
    assert len(mx.split(a, True)) == 1
    assert len(mx.split(a, mx.array(1))) == 1
    e = mx.array(np.zeros((0, 3), np.float32))
    assert [p.shape for p in mx.split(e, 2)] == [(0, 3), (0, 3)]
    # parts are usable views: slice them again
    p = mx.split(a, [1], 2)[1]
    check(p[:, ::-1, 1:], np.split(n, [1], 2)[1][:, ::-1, 1:])


def test_split_errors():
    x, _ = make((2, 3, 4))
    raises(ValueError, "Array split does not result in sub arrays with equal size: attempting 4 splits along axis 0 "
           "for shape (2,3,4).", mx.split, x, 4)
    raises(ValueError, "Array split does not result in sub arrays with equal size: attempting 4 splits along axis -3 "
           "for shape (2,3,4).", mx.split, x, 4, -3)
    raises(ValueError, "[split] num_splits must be positive and non-zero but got 0.", mx.split, x, 0)
    raises(ValueError, "[split] num_splits must be positive and non-zero but got -1.", mx.split, x, -1)
    raises(ValueError, "[split] Axis 3 is out of bounds for array with 3 dimensions.", mx.split, x, 2, 3)
    raises(ValueError, "[split] Axis -4 is out of bounds for array with 3 dimensions.", mx.split, x, 2, -4)
    raises(ValueError, "[split] Axis 5 is out of bounds for array with 3 dimensions.", mx.split, x, 0, 5)
    raises(ValueError, "[split] Axis 3 is out of bounds for array with 3 dimensions.", mx.split, x, [1], 3)
    raises(ValueError, "[split] Axis 0 is out of bounds for array with 0 dimensions.", mx.split, mx.array(1), 1)
    raises(ValueError, "[split] Axis 0 is out of bounds for array with 0 dimensions.", mx.split, mx.array(1), [1])
    raises(TypeError, None, mx.split, x, 2.0)
    raises(TypeError, None, mx.split, x, [1.0])
    raises(TypeError, None, mx.split, x, np.array([1.5]))


def test_unstack():
    a, n = make((2, 3))
    out = mx.unstack(a)
    assert isinstance(out, tuple) and len(out) == 2
    for g, w in zip(out, n):
        check(g, w)
    for g, w in zip(mx.unstack(a, axis=1), n.T):
        check(g, w)
    raises(ValueError, "[unstack] Axis 0 is out of bounds for array with 0 dimensions.", mx.unstack, mx.array(1))


# ------------------------------------------------------------------ tile, repeat

@pytest.mark.parametrize("dtype", MAIN_DTYPES)
def test_tile(dtype):
    for a, n in views((2, 3), dtype):
        for reps in [2, (2,), (1, 1), (2, 3), (3, 1, 2), (0, 2), [], (1, 2, 1, 1), 1]:
            check(mx.tile(a, reps), np.tile(n, reps))
    check(mx.tile(mx.array(1), 3), np.tile(np.int32(1), 3))
    check(mx.tile(mx.array(1), []), np.array(1, np.int32))
    a, n = make((2, 3, 4))
    check(mx.tile(a, np.array([2])), np.tile(n, 2))
    check(mx.tile(a, mx.array([2, 1])), np.tile(n, (2, 1)))
    check(mx.tile(a, (np.int64(2),)), np.tile(n, 2))
    check(mx.tile(mx.array(np.zeros((0, 2), np.float32)), 3), np.zeros((0, 6), np.float32))
    big = np.arange(100 * 150, dtype=np.float32).reshape(100, 150)
    check(mx.tile(mx.array(big).T, (3, 2)), np.tile(big.T, (3, 2)))
    raises(ValueError, "[broadcast_to] Negative dimensions not allowed.", mx.tile, a, -1)
    raises(ValueError, "[broadcast_to] Negative dimensions not allowed.", mx.tile, a, (1, -2))
    raises(ValueError, "[broadcast_to] Negative dimensions not allowed.", mx.tile, a, (-1, 0))
    raises(TypeError, None, mx.tile, a, 2.0)
    raises(TypeError, None, mx.tile, a, (2.0,))


@pytest.mark.parametrize("dtype", MAIN_DTYPES)
def test_repeat(dtype):
    for a, n in views((2, 3), dtype):
        for r in [0, 1, 2, 3]:
            check(mx.repeat(a, r), np.repeat(n, r))
            for axis in [0, 1, -1, -2]:
                check(mx.repeat(a, r, axis), np.repeat(n, r, axis))
    check(mx.repeat(mx.array(1), 3), np.repeat(np.int32(1), 3))
    a, n = make((2, 3, 4))
    check(mx.repeat(a, repeats=2, axis=0), np.repeat(n, 2, 0))
    check(mx.repeat(a, np.int64(2)), np.repeat(n, 2))
    check(mx.repeat(a, mx.array(2), 1), np.repeat(n, 2, 1))
    check(mx.repeat(a, True), n.ravel())
    check(mx.repeat(a, 0, 1), np.zeros((2, 0, 4), np.float32))
    big = np.arange(200 * 100, dtype=np.int32).reshape(200, 100)
    check(mx.repeat(mx.array(big)[::-1], 3, 1), np.repeat(big[::-1], 3, 1))
    raises(ValueError, "[repeat] Axis 3 is out of bounds for array with 3 dimensions.", mx.repeat, a, 2, 3)
    raises(ValueError, "[repeat] Axis -4 is out of bounds for array with 3 dimensions.", mx.repeat, a, 2, -4)
    raises(ValueError, "[repeat] Axis 5 is out of bounds for array with 3 dimensions.", mx.repeat, a, -1, 5)
    raises(ValueError, "[repeat] Axis 0 is out of bounds for array with 0 dimensions.", mx.repeat, mx.array(1), 3, 0)
    raises(ValueError, "[repeat] Number of repeats cannot be negative", mx.repeat, a, -1)
    raises(ValueError, "[repeat] Number of repeats cannot be negative", mx.repeat, a, -1, 0)
    raises(TypeError, None, mx.repeat, a, 2.0)
    raises(TypeError, None, mx.repeat, a, [1, 2], 0)


# --------------------------------------------------------------------------- pad

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_pad_dtypes(dtype):
    a, n = make((3, 4), dtype)
    check(mx.pad(a, 1), np.pad(n, 1))
    check(mx.pad(a, ((1, 2), (0, 3))), np.pad(n, ((1, 2), (0, 3))))
    for mode in ["edge", "reflect", "symmetric"]:
        check(mx.pad(a, (2, 1), mode), np.pad(n, (2, 1), mode))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric"])
def test_pad_modes(mode):
    for a, n in views((3, 5)):
        for pw in [0, 1, 2, 4, 7, (3,), (0, 2), [(1, 3)], [(2, 0), (5, 1)], ((0, 0), (0, 9))]:
            npw = pw if not (isinstance(pw, list) and len(pw) == 1) else pw[0]
            check(mx.pad(a, pw, mode), np.pad(n, npw, mode))
    v, vn = make((1,))
    check(mx.pad(v, 3, mode), np.pad(vn, 3, mode))
    c, cn = make((2, 3, 2))
    check(mx.pad(c, [(1, 2), (3, 0), (2, 2)], mode), np.pad(cn, [(1, 2), (3, 0), (2, 2)], mode))
    check(mx.pad(c.T, (1, 1), mode=mode), np.pad(cn.T, 1, mode))


def test_pad_big():
    n = np.arange(300 * 400, dtype=np.float32).reshape(300, 400)
    a = mx.array(n)
    check(mx.pad(a, ((3, 4), (5, 6)), constant_values=-1), np.pad(n, ((3, 4), (5, 6)), constant_values=-1))
    check(mx.pad(a.T, 9, "reflect"), np.pad(n.T, 9, "reflect"))
    check(mx.pad(a[:, :1], ((0, 0), (0, 50000)), "edge"), np.pad(n[:, :1], ((0, 0), (0, 50000)), "edge"))


def test_pad_values():
    a = mx.array([1, 2, 3])
    assert mx.pad(a, (1, 0), constant_values=5).tolist() == [5, 1, 2, 3]
    assert mx.pad(a, (1, 0), "constant", 5).tolist() == [5, 1, 2, 3]
    assert mx.pad(a, 1, constant_values=1.7).tolist() == [1, 1, 2, 3, 1]
    assert mx.pad(a, 1, constant_values=-1.7).tolist() == [-1, 1, 2, 3, -1]
    assert mx.pad(a, 1, constant_values=np.float64(2.0)).tolist() == [2, 1, 2, 3, 2]
    assert mx.pad(a, 1, constant_values=mx.array(2.5)).tolist() == [2, 1, 2, 3, 2]
    # an array of values: its first element is used, as MLX does
    assert mx.pad(a, (1, 0), constant_values=mx.array([7, 8])).tolist() == [7, 1, 2, 3]
    m = mx.array([[1, 2], [3, 4]])
    assert mx.pad(m, 1, constant_values=mx.array([[7], [8]])).tolist() == [[7] * 4, [7, 1, 2, 7], [7, 3, 4, 7], [7] * 4]
    # an empty array of values: MLX reads past its end; mkpy pads with 0
    assert mx.pad(a, (1, 0), constant_values=mx.array(np.zeros(0, np.int32))).tolist() == [0, 1, 2, 3]
    # the value is cast to the array's dtype
    b = mx.array([True, False])
    assert mx.pad(b, 1).tolist() == [False, True, False, False]
    assert mx.pad(b, 1, constant_values=2).tolist() == [True, True, False, True]
    assert mx.pad(mx.array([1.5, 2]), 1, constant_values=1 + 2j).tolist() == [1.0, 1.5, 2.0, 1.0]
    assert mx.pad(mx.array([1, 2], mx.uint8), 1, constant_values=mx.array(300)).tolist() == [44, 1, 2, 44]
    assert mx.pad(mx.array([1, 2], mx.uint8), 1, constant_values=255).tolist() == [255, 1, 2, 255]
    assert mx.pad(mx.array([1], mx.float16), 1, constant_values=2 ** 40).tolist() == [np.inf, 1.0, np.inf]
    assert mx.pad(mx.array([1], mx.int8), 1, constant_values=True).tolist() == [1, 1, 1]
    h = mx.pad(mx.array([1.0]).astype(mx.bfloat16), 1, constant_values=0.5).astype(mx.float32)
    assert h.tolist() == [0.5, 1.0, 0.5]
    # edge padding of an empty array gives zeros (MLX)
    e = mx.array(np.zeros((2, 0), np.float32)) + 3
    check(mx.pad(e, [(1, 1), (1, 1)], "edge"), np.zeros((4, 2), np.float32))
    check(mx.pad(e, (1, 2), "edge"), np.zeros((5, 3), np.float32))
    check(mx.pad(e, [(1, 1), (0, 0)], "reflect"), np.zeros((4, 0), np.float32))
    check(mx.pad(mx.array(np.zeros((0, 2), np.float32)), 1), np.zeros((2, 4), np.float32))


def test_pad_width_forms():
    x, n = make((2, 3, 4))
    check(mx.pad(x, (1,)), np.pad(n, 1))
    check(mx.pad(x, [1]), np.pad(n, 1))
    check(mx.pad(x, [1, 2]), np.pad(n, (1, 2)))
    check(mx.pad(x, ((1, 2),)), np.pad(n, (1, 2)))
    check(mx.pad(x, [[1, 2], [1, 1], [0, 0]]), np.pad(n, [(1, 2), (1, 1), (0, 0)]))
    check(mx.pad(x, np.array([1, 2])), np.pad(n, (1, 2)))
    check(mx.pad(x, np.array([[1, 2]] * 3)), np.pad(n, (1, 2)))
    check(mx.pad(x, mx.array([1, 2])), np.pad(n, (1, 2)))
    check(mx.pad(x, np.int64(1)), np.pad(n, 1))
    check(mx.pad(x, [(True, 1)] * 3), np.pad(n, 1))
    s = mx.array(1.0)
    for pw in [1, (1, 2), [(1, 2)], []]:
        check(mx.pad(s, pw), np.array(1.0, np.float32))


def test_pad_errors():
    x, _ = make((2, 3, 4))
    bad_n = "Invalid number of padding sizes passed to pad with axes of size 3"
    raises(ValueError, bad_n, mx.pad, x, [(1, 2), (0, 1)])
    raises(ValueError, bad_n, mx.pad, x, [(1, 2), (0, 1), (2, 0), (1, 1)])
    raises(ValueError, bad_n, mx.pad, x, ((1, 2), (1, 1)))
    raises(ValueError, bad_n, mx.pad, x, [])
    raises(ValueError, bad_n, mx.pad, x, ())
    raises(ValueError, "Invalid number of padding sizes passed to pad with axes of size 0", mx.pad, mx.array(1),
           ((1, 2), (3, 4)))
    raises(ValueError, "Invalid low padding size (-1) passed to pad for axis 0. Padding sizes must be non-negative",
           mx.pad, x, -1)
    raises(ValueError, "Invalid high padding size (-1) passed to pad for axis 0. Padding sizes must be non-negative",
           mx.pad, x, (0, -1))
    raises(ValueError, "Invalid low padding size (-1) passed to pad for axis 1. Padding sizes must be non-negative",
           mx.pad, x, [(0, 0), (-1, 0), (0, 0)])
    raises(ValueError, "Invalid high padding size (-1) passed to pad for axis 0. Padding sizes must be non-negative",
           mx.pad, x, [(0, -1), (-1, 0), (0, 0)])
    raises(ValueError, "Invalid padding mode (foo) passed to pad", mx.pad, x, 1, "foo")
    raises(ValueError, "Invalid padding mode (wrap) passed to pad", mx.pad, x, 1, mode="wrap")
    e = mx.array(np.zeros((2, 0), np.float32))
    raises(ValueError, "[pad] Cannot pad empty axis 1 using mode 'reflect'.", mx.pad, e, 1, "reflect")
    raises(ValueError, "[pad] Cannot pad empty axis 1 using mode 'symmetric'.", mx.pad, e, [(1, 1), (1, 0)],
           "symmetric")
    raises(ValueError, "Converting 300 to uint8 would result in overflow.", mx.pad, mx.array([1], mx.uint8), 1,
           constant_values=300)
    raises(ValueError, "Converting -1 to uint8 would result in overflow.", mx.pad, mx.array([1], mx.uint8), 1,
           constant_values=-1)
    raises(ValueError, "Converting 200 to int8 would result in overflow.", mx.pad, mx.array([1], mx.int8), 1,
           constant_values=200)
    raises(ValueError, "Converting -200 to int8 would result in overflow.", mx.pad, mx.array([1], mx.int8), 1,
           constant_values=-200)
    raises(ValueError, "Converting 1099511627776 to int32 would result in overflow.", mx.pad, mx.array([1]), 1,
           constant_values=2 ** 40)
    raises(ValueError, "Invalid type list received in array initialization.", mx.pad, x, 1, constant_values=[5])
    for pw in [[1, 2, 3], (1, 2, 3), ((1,), (2,), (3,)), [(1, 2, 3)], 1.0, (1.0, 2), [(1, 1), (1, 1), 1], {1: 2}]:
        raises(TypeError, None, mx.pad, x, pw)
    raises(TypeError, None, mx.pad, x, 1, None)
    raises(TypeError, None, mx.pad, x, 1, constant_values=None)
    raises(TypeError, None, mx.pad, x, 1, "constant", 5, None)


# ------------------------------------------------------------- inputs and laziness

def test_numpy_noncontiguous_input():
    n = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    for v in [n.T, n[:, ::2, ::-1], n[1:, 1:3].transpose(2, 0, 1), np.broadcast_to(n[:1], (4, 4, 5))]:
        a = mx.array(v)
        check(a, np.ascontiguousarray(v))
        check(a.reshape(-1), v.reshape(-1))
        check(mx.concatenate([a, a], 0), np.concatenate([v, v], 0))


def test_chain_of_views_and_copies():
    n = np.arange(2 * 3 * 4 * 5, dtype=np.int64).reshape(2, 3, 4, 5)
    a = mx.array(n)
    r = mx.moveaxis(a, 0, -1)[1:, ::-2].reshape(2, -1, 2)
    w = np.moveaxis(n, 0, -1)[1:, ::-2].reshape(2, -1, 2)
    check(r, w)
    r2 = mx.pad(mx.tile(r.T, (1, 2, 1)), 1, "edge")[::3]
    w2 = np.pad(np.tile(w.T, (1, 2, 1)), 1, "edge")[::3]
    check(r2, w2)
    check(mx.swapaxes(mx.stack(mx.split(r2, 2, axis=1), axis=0), 0, 3), np.swapaxes(np.stack(np.split(w2, 2, 1)), 0, 3))
    # an unevaluated graph is evaluated once and reused
    mx.eval(r2)
    check(r2.reshape(-1), w2.reshape(-1))


def test_stream_keyword():
    a, n = make((2, 3))
    check(mx.reshape(a, (3, 2), stream=mx.cpu), n.reshape(3, 2))
    check(mx.transpose(a, stream=None), n.T)
    check(mx.concatenate([a, a], stream=mx.cpu), np.concatenate([n, n]))
    check(mx.pad(a, 1, stream=None), np.pad(n, 1))
    check(a.reshape(3, 2, stream=mx.cpu), n.reshape(3, 2))
