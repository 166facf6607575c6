"""Advanced indexing, take/take_along_axis/put_along_axis, __setitem__ and
x.at[...] against NumPy (np.add.at & co. for accumulation). Error messages
are MLX 0.32's. Where MLX has no bounds checks (array indices out of range)
mkpy clamps gathers and drops scatter updates (docs/design.md); Python ints
out of range raise IndexError as in NumPy."""
import numpy as np
import pytest

import mkpy as mx

DTYPES = [mx.bool_, mx.uint8, mx.int8, mx.int32, mx.int64, mx.uint32, mx.float16, mx.float32, mx.bfloat16,
          mx.complex64]
NUMERIC = [mx.uint8, mx.int32, mx.int64, mx.float16, mx.float32, mx.bfloat16]
INDEX_DTYPES = [mx.int8, mx.int16, mx.int32, mx.int64, mx.uint8, mx.uint16, mx.uint32, mx.uint64]


def npy(a):
    # bfloat16 has no NumPy dtype: compare it through float32 (exact)
    return np.array(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a)


def base(shape, dtype=mx.int32):
    n = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 97
    a = mx.array(n).astype(dtype)
    return a, npy(a)


def check(got, want):
    got_n = npy(got)
    assert got.shape == tuple(want.shape), (got.shape, want.shape)
    assert got_n.dtype == want.dtype, (got_n.dtype, want.dtype)
    np.testing.assert_array_equal(got_n, want)


def raises(exc, msg, fn):
    with pytest.raises(exc) as e:
        fn()
    if msg is not None:
        assert str(e.value) == msg, str(e.value)


def to_mx_key(key):
    """NumPy index arrays in a key become mkpy int32 arrays."""
    def one(k):
        return mx.array(k.astype(np.int32)) if isinstance(k, np.ndarray) else k
    return tuple(one(k) for k in key) if isinstance(key, tuple) else one(key)


# ------------------------------------------------------------------ getitem

GET_KEYS = [
    np.array([0, 1, -1]),
    [0, 1, 0],
    [[0, 1], [1, 1]],
    (slice(None), np.array([0, 2]), 1),            # adjacent: in place
    (np.array([0, 1]), slice(None), np.array([1, 2])),  # separated: first
    (np.array([0, 1]), slice(1, None), np.array([1, 2])),
    (1, slice(None), np.array([3, 0])),            # int and array separated
    (slice(None), 1, np.array([3, 0])),            # int and array adjacent
    (Ellipsis, np.array([0, 1])),
    (None, np.array([0, 1]), None),
    (Ellipsis, None, np.array([0, 1])),
    (np.array([[0, 1]]), None),
    (slice(None), None, np.array([0, 1])),
    (0, None, slice(None), np.array([1, 2])),
    (None, 0, slice(None), np.array([1, 2])),
    (slice(1, None), np.array([0]), slice(None, None, 2)),
    (slice(None, None, -1), np.array([0, 2])),
    (np.array([[0], [1]]), np.array([0, 1, 2])),   # broadcasting index shapes
    (np.array([1, 0]), np.array([[2], [0]]), np.array([3, 1])),
    (np.array(1), slice(None), np.array(2)),       # 0-d index arrays
    (np.array([0, 1]), np.array([0, 1]), np.array([0, 1]), None),
    (np.array([0, 1]), np.array([0, 1]), np.array([0, 1]), Ellipsis),
    ([0, 1], slice(None), [-1, -2]),
    (np.zeros((0,), np.int32), np.array([0])),
    (np.zeros((0, 2), np.int32),),
]


@pytest.mark.parametrize("key", GET_KEYS, ids=range(len(GET_KEYS)))
def test_getitem_keys(key):
    x, n = base((2, 3, 4))
    check(x[to_mx_key(key)], n[key])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_getitem_dtypes(dtype):
    x, n = base((4, 5), dtype)
    key = (mx.array([[3, 0], [1, -1]]), slice(1, None, 2))
    check(x[key], n[np.array([[3, 0], [1, -1]]), 1::2])
    check(x[[2, 0]], n[[2, 0]])


@pytest.mark.parametrize("itype", INDEX_DTYPES, ids=str)
def test_index_dtypes(itype):
    x, n = base((6, 3))
    idx = np.array([5, 0, 2, 2])
    check(x[mx.array(idx).astype(itype)], n[idx])
    check(x[:, mx.array([2, 0]).astype(itype)], n[:, [2, 0]])
    check(mx.take(x, mx.array(idx).astype(itype), axis=0), n[idx])


def test_negative_indices_wrap():
    x, n = base((5, 4))
    idx = np.array([-1, -5, 0, -2])
    check(x[mx.array(idx)], n[idx])
    check(x[mx.array(idx), mx.array([-4, -1, 3, 0])], n[idx, [-4, -1, 3, 0]])
    check(x[-1, mx.array([-1])], n[-1, [-1]])


def test_noncontiguous_sources_and_indices():
    big, bign = base((7, 9, 5))
    x, n = big[1::2, ::-2, 1:4], bign[1::2, ::-2, 1:4]
    idx = mx.array([[0, 2, 1, 2]]).T  # transposed index array
    check(x[idx, :, mx.array([2, 0, 1, 1])], n[np.array([[0, 2, 1, 2]]).T, :, [2, 0, 1, 1]])
    xt, nt = big.T, bign.T
    check(xt[mx.array([4, 0]), 3], nt[[4, 0], 3])
    r, rn = base((1, 5))
    b, bn = mx.broadcast_to(r, (6, 5)), np.broadcast_to(rn, (6, 5))
    check(b[mx.array([5, 0]), mx.array([[4], [1]])], bn[[5, 0], [[4], [1]]])
    sidx = mx.arange(9)[::-3]  # strided index array
    check(big[1][sidx], bign[1][np.arange(9)[::-3]])


def test_0d_and_empty():
    x, n = base((3, 4))
    check(x[mx.array(2)], n[2])
    check(x[mx.array([], dtype=mx.int32)], n[np.array([], dtype=np.int64)])
    check(x[:, mx.zeros((0, 2), mx.int32)], n[:, np.zeros((0, 2), np.int64)])
    e = mx.zeros((0, 3))
    check(e[:, mx.array([0, 2])], np.zeros((0, 2), np.float32))
    check(mx.zeros((2, 0))[mx.array([1, 0])], np.zeros((2, 0), np.float32))


def test_large_gather_parallel():
    rng = np.random.default_rng(0)
    n = rng.standard_normal((64, 50, 40)).astype(np.float32)
    x = mx.array(n)
    i = rng.integers(-64, 64, size=(300, 1))
    j = rng.integers(0, 40, size=(1, 200))
    check(x[mx.array(i), :, mx.array(j)], n[i, :, j])
    check(x[mx.array(i), 3, mx.array(j)], n[i, 3, j])
    check(x[:, mx.array(j[0])], n[:, j[0]])


def test_gather_out_of_range_clamps():
    # MLX does no bounds check; mkpy clamps after wrapping once
    x, n = base((3, 4))
    check(x[mx.array([3, 7, -1, -9])], n[[2, 2, 2, 0]])
    check(mx.take(x, mx.array([12, -13]), axis=None), n.ravel()[[11, 0]])
    check(mx.take_along_axis(x, mx.array([[5], [-1], [-7]]), axis=1), n[[0, 1, 2], [3, 3, 0]][:, None])


def test_getitem_python_int_out_of_range():
    x, _ = base((2, 3, 4))
    raises(IndexError, "index 3 is out of bounds for axis 1 with size 3", lambda: x[mx.array([0, 1]), 3])
    raises(IndexError, "index -4 is out of bounds for axis 1 with size 3", lambda: x[mx.array([0, 1]), -4])
    raises(IndexError, "index 5 is out of bounds for axis 0 with size 2", lambda: x[5, mx.array([0])])


def test_grid_sample_gather():
    """The gather of the MLX docs' grid_sample reference: floor, astype(int32),
    x[b, iy, ix, :], out-of-range taps masked afterwards."""
    rng = np.random.default_rng(1)
    N, H, W, C = 2, 5, 7, 3
    xn = rng.standard_normal((N, H, W, C)).astype(np.float32)
    gn = rng.uniform(-1.2, 1.2, (N, 4, 6, 2)).astype(np.float32)
    x, grid = mx.array(xn), mx.array(gn)
    ix = ((grid[..., 0] + 1) * W - 1) / 2
    iy = ((grid[..., 1] + 1) * H - 1) / 2
    ix_nw = mx.floor(ix).astype(mx.int32)
    iy_nw = mx.floor(iy).astype(mx.int32)
    assert ix_nw.dtype == mx.int32
    b = mx.arange(N)[:, None, None]
    out = 0
    want = 0
    ixn = np.floor(((gn[..., 0] + 1) * W - 1) / 2).astype(np.int32)
    iyn = np.floor(((gn[..., 1] + 1) * H - 1) / 2).astype(np.int32)
    for dy in (0, 1):
        for dx in (0, 1):
            yy, xx = iy_nw + dy, ix_nw + dx
            mask = (yy >= 0) & (yy <= H - 1) & (xx >= 0) & (xx <= W - 1)
            out = out + x[b, yy, xx, :] * mask[..., None]
            yn, xn_ = iyn + dy, ixn + dx
            maskn = (yn >= 0) & (yn <= H - 1) & (xn_ >= 0) & (xn_ <= W - 1)
            got = xn[np.arange(N)[:, None, None], np.clip(yn, 0, H - 1), np.clip(xn_, 0, W - 1), :]
            want = want + got * maskn[..., None]
            check(x[b, yy, xx, :] * mask[..., None], got * maskn[..., None])
    np.testing.assert_allclose(npy(out), want, rtol=1e-6)
    assert np.isfinite(npy(out)).all()


def random_key(rng, shape):
    """A random key of ints, slices, index arrays, lists, None and an Ellipsis."""
    nd = len(shape)
    k = int(rng.integers(0, nd + 1))
    use_ell = rng.random() < 0.3
    split = int(rng.integers(0, k + 1))
    dims = list(range(split)) + list(range(nd - (k - split), nd)) if use_ell else list(range(k))
    items = []
    for d in dims:
        n = shape[d]
        r = rng.random()
        if r < 0.2:
            items.append(int(rng.integers(-n, n)))
        elif r < 0.6:
            ishape = tuple(int(s) for s in rng.choice([1, 2, 3], size=int(rng.integers(0, 3))))
            a = rng.integers(-n, n, size=ishape)
            items.append(a.tolist() if a.ndim == 1 and rng.random() < 0.3 else a)
        else:
            def bound():
                return None if rng.random() < 0.3 else int(rng.integers(-n - 1, n + 2))
            step = None if rng.random() < 0.4 else int(rng.choice([-2, -1, 1, 2, 3]))
            items.append(slice(bound(), bound(), step))
    if use_ell:
        items.insert(split, Ellipsis)
    for _ in range(int(rng.integers(0, 3))):
        if rng.random() < 0.4:
            items.insert(int(rng.integers(0, len(items) + 1)), None)
    return tuple(items)


def numpy_like(key, shape):
    """Whether NumPy places the index dims as MLX does: NumPy treats an Ellipsis
    between advanced indices as a separator even when it stands for no dims."""
    adv = [i for i, k in enumerate(key) if isinstance(k, (int, list, np.ndarray))]
    ell = [i for i, k in enumerate(key) if k is Ellipsis]
    if not any(isinstance(k, (list, np.ndarray)) for k in key) or not ell:
        return True
    return not (adv and adv[0] < ell[0] < adv[-1])


def separated(key, count_ints):
    """Whether the index arrays (and ints, if counted) are split by slices or
    Nones, which puts their dims first."""
    adv = [i for i, k in enumerate(key)
           if isinstance(k, (list, np.ndarray)) or (count_ints and isinstance(k, int))]
    return bool(adv) and any(not isinstance(k, (int, list, np.ndarray)) and k is not Ellipsis
                             for k in key[adv[0]:adv[-1]])


def test_random_keys_against_numpy():
    rng = np.random.default_rng(2)
    done = 0
    while done < 400:
        shape = tuple(int(s) for s in rng.integers(1, 5, size=int(rng.integers(1, 5))))
        key = random_key(rng, shape)
        if not numpy_like(key, shape):
            continue
        x, n = base(shape)
        try:
            want = n[key]
        except IndexError:
            continue  # index shapes that do not broadcast
        check(x[to_mx_key(key)], want)
        done += 1


def test_getitem_errors():
    x, _ = base((2, 3))
    raises(ValueError, "boolean indices are not yet supported", lambda: x[mx.array([True, False])])
    raises(ValueError, "boolean indices are not yet supported", lambda: x[[True, False]])
    raises(ValueError, "[Gather] Boolean indices not supported.", lambda: x[mx.array([0]), mx.array([True])])
    raises(ValueError, "[gather] Got indices with invalid dtype. Indices must be integral.",
           lambda: x[mx.array([0.0])])
    raises(ValueError, "[gather] Got indices with invalid dtype. Indices must be integral.", lambda: x[[]])
    raises(ValueError, "[gather] Got indices with invalid dtype. Indices must be integral.",
           lambda: x[mx.array([0]), []])
    raises(ValueError, "Cannot index mlx array using the given type.", lambda: x[np.array([0, 1])])
    raises(ValueError, "Cannot index mlx array using the given type.", lambda: x[1.5])
    raises(ValueError, "Cannot index mlx array using the given type yet", lambda: x[np.array([0]), 0])
    raises(ValueError, "Cannot index mlx array using the given type yet", lambda: x[mx.array([0]), 1.5])
    raises(ValueError, "Cannot index mlx array using the given type yet", lambda: x[mx.array([0]), True])
    raises(ValueError, "Cannot index mlx array using the given type yet", lambda: x[(0, 1), ])
    raises(ValueError, "Too many indices for array with 2 dimensions.", lambda: x[[0], [0], [0]])
    raises(ValueError, "An index can only have a single ellipsis (...)", lambda: x[..., ..., [0]])
    raises(ValueError, "[broadcast_shapes] Shapes (2) and (3) cannot be broadcast.", lambda: x[[0, 1], [0, 1, 2]])
    raises(ValueError, "Slice indices must be integers or None.", lambda: x[[0], 0.5:])
    raises(ValueError, "Initialization encountered non-uniform length.", lambda: x[[[0, 1], [1]]])
    s = mx.array(5)
    raises(ValueError, "too many indices for array: array is 0-dimensional", lambda: s[mx.array([0])])
    raises(ValueError, "too many indices for array: array is 0-dimensional", lambda: s[[0]])
    raises(ValueError, "Too many indices for array with 0 dimensions.", lambda: s[None, mx.array(0)])
    raises(ValueError, "[take] Cannot do a non-empty take from an empty axis.", lambda: mx.zeros((0, 3))[[0, 1]])
    raises(ValueError, "[gather] If the input is empty, either the indices must be empty or the total slice "
           "size must be 0.", lambda: mx.zeros((0, 3))[[0], 1])


# --------------------------------------------------------------------- take

def test_take():
    x, n = base((2, 3, 4))
    idx = np.array([[0, -1], [2, 1]])
    check(mx.take(x, mx.array(idx)), np.take(n, idx))
    for axis in (0, 1, 2, -1, -3):
        i = np.array([[0, -1]])
        check(mx.take(x, mx.array(i), axis=axis), np.take(n, i, axis=axis))
        check(mx.take(x, 1, axis), np.take(n, 1, axis=axis))
    check(mx.take(x, mx.array(1), axis=1), np.take(n, 1, axis=1))
    check(mx.take(x, 5), np.take(n, 5))
    check(mx.take(x, True), np.take(n, 1))
    check(mx.take(x, indices=mx.array([3]), axis=None), n.ravel()[[3]])
    check(mx.take(mx.array(3), mx.array([0, 0])), np.array([3, 3], np.int32))
    check(mx.take(mx.array(3), 0), np.array(3, np.int32))
    t, tn = base((5, 6))
    check(mx.take(t.T[::2], mx.array([2, 0]), axis=1), tn.T[::2][:, [2, 0]])


def test_take_errors():
    x, _ = base((2, 3, 4))
    raises(IndexError, "[take] Received invalid axis 3 for array with 3 dimensions.",
           lambda: mx.take(x, mx.array([0]), axis=3))
    raises(IndexError, "[take] Received invalid axis -4 for array with 3 dimensions.",
           lambda: mx.take(x, mx.array([0]), axis=-4))
    raises(IndexError, "[take] Received invalid axis 0 for array with 0 dimensions.",
           lambda: mx.take(mx.array(3), mx.array([0]), axis=0))
    raises(ValueError, "[squeeze] Cannot squeeze axis 1 with size 0 which is not equal to 1.",
           lambda: mx.take(x, -1, axis=1))
    raises(ValueError, "[squeeze] Cannot squeeze axis 0 with size 0 which is not equal to 1.",
           lambda: mx.take(x, 30))
    raises(ValueError, "[take] Cannot do a non-empty take from an empty axis.",
           lambda: mx.take(mx.zeros((0, 3)), mx.array([0])))
    raises(ValueError, "[take] Cannot do a non-empty take from an array with zero elements.",
           lambda: mx.take(mx.zeros((0, 3)), 0))
    raises(ValueError, "[Gather] Boolean indices not supported.", lambda: mx.take(x, mx.array([True])))
    raises(ValueError, "[gather] Got indices with invalid dtype. Indices must be integral.",
           lambda: mx.take(x, mx.array([0.0]), axis=0))
    raises(RuntimeError, "std::bad_cast", lambda: mx.take(x, 2 ** 33))
    for bad in (lambda: mx.take(x, [0, 1]), lambda: mx.take(x, np.array([0])), lambda: mx.take(x, 1.0),
                lambda: mx.take(1, mx.array([0])), lambda: mx.take(a=x, indices=mx.array([0])),
                lambda: mx.take(x, mx.array([0]), axis=1.0), lambda: mx.take(x)):
        with pytest.raises(TypeError, match=r"take\(\): incompatible function arguments"):
            bad()


# ---------------------------------------------------------- take_along_axis

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_take_along_axis(dtype):
    x, n = base((2, 3, 4), dtype)
    rng = np.random.default_rng(3)
    for axis in (0, 1, 2, -1):
        ishape = [2, 3, 4]
        ishape[axis] = 5
        i = rng.integers(-x.shape[axis], x.shape[axis], size=ishape)
        check(mx.take_along_axis(x, mx.array(i), axis=axis), np.take_along_axis(n, i, axis=axis))
    i = np.array([[[0], [1], [2]]])  # broadcast against x (the axis excluded)
    check(mx.take_along_axis(x, mx.array(i), axis=2), np.take_along_axis(n, np.broadcast_to(i, (2, 3, 1)), 2))
    check(mx.take_along_axis(x, mx.array(i)), np.take_along_axis(n, np.broadcast_to(i, (2, 3, 1)), 2))
    check(mx.take_along_axis(x, mx.array([0, -1]), axis=None), n.ravel()[[0, -1]])


def test_take_along_axis_broadcasts_a():
    x, n = base((1, 4))
    i = np.array([[0], [1], [3]])
    check(mx.take_along_axis(x, mx.array(i), axis=1), np.take_along_axis(np.broadcast_to(n, (3, 4)), i, 1))
    xt, nt = base((5, 6))
    idx = np.argsort(nt.T[::2], axis=1)
    check(mx.take_along_axis(xt.T[::2], mx.array(idx), axis=1), np.take_along_axis(nt.T[::2], idx, 1))


def test_take_along_axis_errors():
    x, _ = base((2, 3, 4))
    i = mx.zeros((1, 1, 1), mx.int32)
    raises(ValueError, "[take_along_axis] Axis 3 is out of bounds for array with 3 dimensions.",
           lambda: mx.take_along_axis(x, i, axis=3))
    raises(ValueError, "[take_along_axis] Indices of dimension 3 does not match array of dimension 1.",
           lambda: mx.take_along_axis(x, i, axis=None))
    raises(ValueError, "[take_along_axis] Indices of dimension 1 does not match array of dimension 3.",
           lambda: mx.take_along_axis(x, mx.array([0]), axis=2))
    raises(ValueError, "[broadcast_shapes] Shapes (2,3) and (3,3) cannot be broadcast.",
           lambda: mx.take_along_axis(x, mx.zeros((3, 3, 1), mx.int32), axis=2))
    raises(RuntimeError, "[GatherAxis::eval_cpu] Cannot gather with indices type.",
           lambda: mx.eval(mx.take_along_axis(x, i.astype(mx.float32), axis=2)))
    with pytest.raises(TypeError, match=r"take_along_axis\(\): incompatible function arguments"):
        mx.take_along_axis(x, [1], axis=1)


# ----------------------------------------------------------- put_along_axis

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.usefixtures("cpu_device")  # 8-byte scatters run on a CPU stream, as on a Mac
def test_put_along_axis(dtype):
    rng = np.random.default_rng(4)
    x, n = base((3, 4, 5), dtype)
    for axis in (0, 1, 2, -2):
        # unique indices along the axis, so the order of writes does not matter
        perm = np.argsort(rng.random(x.shape), axis=axis)
        i = np.take(perm, [0, 2], axis=axis)
        v = np.take(np.flip(n, 0).copy(), [0, 2], axis=axis)
        want = n.copy()
        np.put_along_axis(want, i, v, axis=axis)
        vm = mx.array(v) if dtype != mx.bfloat16 else mx.array(v).astype(mx.bfloat16)
        check(mx.put_along_axis(x, mx.array(i), vm.astype(dtype), axis=axis), want)
    # axis=None: flattened, result in x's shape
    want = n.copy().ravel()
    want[[0, 7, 59]] = n.ravel()[1]
    check(mx.put_along_axis(x, mx.array([0, 7, -1]), x.reshape(-1)[1:2]), want.reshape(n.shape))


def test_put_along_axis_semantics():
    x = mx.zeros((3, 4))
    r = mx.put_along_axis(x, mx.array([[0, 0, 1]]), mx.array([[[1.0, 2.0, 3.0]]]), axis=1)  # leading dims squeezed
    check(r, np.array([[2, 3, 0, 0]] * 3, np.float32))  # the last of repeated indices wins
    r = mx.put_along_axis(mx.zeros((1, 4)), mx.array([[0], [1], [2]]), mx.array([[1], [2], [3]]), axis=1)
    check(r, np.array([[1, 0, 0, 0], [0, 2, 0, 0], [0, 0, 3, 0]], np.float32))  # x broadcast, as MLX
    r = mx.put_along_axis(mx.zeros((2, 4), mx.int32), mx.array([[0, 1]]), mx.array(1.7), axis=-1)
    check(r, np.array([[1, 1, 0, 0]] * 2, np.int32))
    r = mx.put_along_axis(mx.zeros((2, 4)), mx.array([0, -1, 9]), mx.array([1.0, 2.0, 3.0]))
    check(r, np.array([[1, 0, 0, 0], [0, 0, 0, 2]], np.float32))  # 9 is out of range: dropped
    check(mx.put_along_axis(mx.zeros((0, 4)), mx.array([[0]]), mx.array(1.0), axis=1), np.zeros((0, 4), np.float32))
    big = np.arange(200 * 300, dtype=np.float32).reshape(200, 300)
    i = np.argsort(np.sin(big), axis=1)[:, :50]
    want = big.copy()
    np.put_along_axis(want, i, -1.0, axis=1)
    check(mx.put_along_axis(mx.array(big), mx.array(i), mx.array(-1.0), axis=1), want)


def test_put_along_axis_errors():
    x = mx.zeros((2, 3, 4))
    i = mx.zeros((1, 3, 1), mx.int32)
    raises(ValueError, "[put_along_axis] Axis 5 is out of bounds for array with 3 dimensions.",
           lambda: mx.put_along_axis(x, i, mx.array(1), axis=5))
    raises(ValueError, "[put_along_axis] Indices of dimension 3 does not match array of dimension 1.",
           lambda: mx.put_along_axis(x, i, mx.array(1)))
    raises(ValueError, "[broadcast_shapes] Shapes (2,4) and (1,2) cannot be broadcast.",
           lambda: mx.put_along_axis(x, i, mx.array([[[1, 2]]]), axis=1))
    raises(ValueError, "[broadcast_shapes] Shapes (2) and (3) cannot be broadcast.",
           lambda: mx.put_along_axis(mx.zeros((2, 4)), mx.array([0, 1]), mx.array([1, 2, 3])))
    raises(RuntimeError, "[ScatterAxis::eval_cpu] Cannot scatter with indices type.",
           lambda: mx.eval(mx.put_along_axis(x, i.astype(mx.float32), mx.array(1), axis=1)))
    with pytest.raises(TypeError, match=r"put_along_axis\(\): incompatible function arguments"):
        mx.put_along_axis(x, i, 1, axis=1)


# ------------------------------------------------------------------ setitem

SET_CASES = [
    (1, 5),
    (-1, np.arange(4)),
    (slice(1, 3), 7),
    (slice(None), np.arange(4)),
    (slice(None), np.arange(4).reshape(1, 1, 1, 4)),  # leading size-1 dims are dropped
    ((0, 1), np.arange(4)),
    ((0, slice(None), 1), 7),
    ((slice(None), slice(None, None, 2)), 7),
    ((slice(None, None, -1), 0, slice(None, None, 2)), np.arange(4).reshape(2, 2)),
    ((Ellipsis, 1), np.arange(3)),
    ((Ellipsis, 1), np.arange(2).reshape(2, 1)),
    ((None, 0), 9),
    ((), 9),
    (np.array([1, 0]), np.arange(24).reshape(2, 3, 4) * 10),
    ([0, 1], 7),
    (([0, 1], [1, 2]), 7),
    (([0, 1], slice(None), [1, 2]), np.arange(3)),
    (([0, 1], slice(None), [1, 2]), np.arange(2).reshape(2, 1)),
    ((np.array([[0], [1]]), np.array([0, 1, 2])), np.arange(4)),
    ((slice(None), np.array([0, 2]), 1), np.array([5, 6])),
    ((slice(None), np.array([0, 2]), 1), np.array([[5], [6]])),
    ((slice(None, None, -1), np.array([0, 2])), np.arange(2).reshape(2, 1, 1)),
    ((1, np.array([2, 0]), np.array([3, 0])), np.array([5, 6])),
    ((np.array(1), slice(None), np.array(-1)), np.arange(3)),
    (np.zeros((0,), np.int32), 1),
    (slice(5, 9), 1),
]


@pytest.mark.parametrize("key,value", SET_CASES, ids=range(len(SET_CASES)))
def test_setitem_keys(key, value):
    x, n = base((2, 3, 4))
    y = x  # an alias sees the update, as in MLX
    x[to_mx_key(key)] = mx.array(value) if isinstance(value, np.ndarray) else value
    n[key] = value
    assert y is x
    check(x, n)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.usefixtures("cpu_device")  # 8-byte scatters run on a CPU stream, as on a Mac
def test_setitem_dtypes(dtype):
    x, n = base((4, 5), dtype)
    v, vn = base((2, 5), dtype)
    x[mx.array([3, 0])] = v
    n[[3, 0]] = vn
    x[1, 1:4] = v[1, :3]
    n[1, 1:4] = vn[1, :3]
    x[mx.array([2]), mx.array([[4], [0]])] = v[0, 0]
    n[[2], [[4], [0]]] = vn[0, 0]
    check(x, n)


def test_setitem_value_conversion():
    x = mx.zeros((3,), mx.int32)
    x[mx.array([0, 2])] = 5.7  # truncated into x's dtype
    check(x, np.array([5, 0, 5], np.int32))
    x[1] = mx.array(2.5)
    check(x, np.array([5, 2, 5], np.int32))
    h = mx.zeros((2,), mx.float16)
    h[0] = 5.7
    assert h.dtype == mx.float16 and npy(h)[0] == np.float16(5.7)
    u = mx.zeros((2,), mx.uint8)
    raises(ValueError, "Converting 300 to uint8 would result in overflow.", lambda: u.__setitem__(mx.array([1]), 300))
    raises(ValueError, "Converting -1 to uint8 would result in overflow.", lambda: u.__setitem__(0, -1))
    raises(ValueError, "Invalid type list received in array initialization.",
           lambda: x.__setitem__(mx.array([1]), [1, 2]))
    with pytest.raises(TypeError, match=r"__setitem__\(\): incompatible function arguments"):
        x[0] = None
    with pytest.raises(AttributeError):
        del x[0]
    # bare Ellipsis / None replace the array by the broadcast value, dtype included (MLX)
    e = mx.zeros((2, 3), mx.int32)
    e[...] = 1.5
    check(e, np.full((2, 3), 1.5, np.float32))
    e = mx.zeros((2,), mx.int32)
    e[None] = mx.array([5, 6])
    check(e, np.array([5, 6], np.int32))
    raises(ValueError, "Cannot broadcast array of shape (1,2) into shape (2).",
           lambda: e.__setitem__(None, mx.array([[5, 6]])))
    e[...] = mx.array([[5, 6]])
    check(e, np.array([5, 6], np.int32))
    e = mx.zeros((2, 3), mx.int32)
    e[:] = 1.5  # a slice keeps the dtype
    check(e, np.ones((2, 3), np.int32))


def test_setitem_int_placement():
    # MLX places the index dims of x[0, :, idx] = v after the slice (its
    # gathers, like NumPy, put them first); mkpy follows MLX
    x = mx.zeros((2, 3, 4), mx.int32)
    assert x[0, :, mx.array([1, 2])].shape == (2, 3)
    x[0, :, mx.array([1, 2])] = mx.arange(6).reshape(3, 2)
    want = np.zeros((2, 3, 4), np.int32)
    want[0, :, 1:3] = np.arange(6).reshape(3, 2)
    check(x, want)
    check(mx.zeros((2, 3, 4), mx.int32).at[0, :, mx.array([1, 2])].add(mx.arange(6).reshape(3, 2)), want)
    raises(ValueError, "[broadcast_shapes] Shapes (2,3) and (3,2) cannot be broadcast.",
           lambda: x.__setitem__((0, slice(None), mx.array([1, 2])), mx.arange(6).reshape(2, 3)))
    # a 0-d array counts (it is an array)
    x = mx.zeros((2, 3, 4), mx.int32)
    x[mx.array(0), :, mx.array([1, 2])] = mx.arange(6).reshape(2, 3)
    want = np.zeros((2, 3, 4), np.int32)
    want[0, :, 1:3] = np.arange(6).reshape(2, 3).T
    check(x, want)


def test_setitem_repeated_indices_last_wins():
    x = mx.zeros((5,))
    x[mx.array([0, 0, 4, 0])] = mx.array([1.0, 2.0, 3.0, 4.0])
    check(x, np.array([4, 0, 0, 0, 3], np.float32))
    big = mx.zeros((1000,))
    idx = np.arange(100000) % 1000
    vals = np.arange(100000, dtype=np.float32)
    big[mx.array(idx)] = mx.array(vals)
    want = np.zeros(1000, np.float32)
    want[idx] = vals  # NumPy also keeps the last
    check(big, want)


def test_setitem_views_and_buffers_unaffected():
    x, n = base((4, 3))
    v = x[1:3]  # a view taken before the update keeps the old values
    w = x[mx.array([1])]
    mem = np.asarray(x)
    keep = mem.copy()
    x[1] = 100
    x[mx.array([2]), 0] = -1
    check(v, n[1:3])
    check(w, n[[1]])
    np.testing.assert_array_equal(mem, keep)
    n[1] = 100
    n[2, 0] = -1
    check(x, n)


def test_setitem_loop_reuses_buffer():
    x = mx.zeros((1000,))
    for i in range(200):
        x[i] = i
    mx.eval(x)
    for i in range(200, 400):
        x[mx.array([i])] = i
    want = np.zeros(1000, np.float32)
    want[:400] = np.arange(400)
    check(x, want)


def test_setitem_python_int_out_of_range():
    x = mx.zeros((2, 3))
    raises(IndexError, "index 5 is out of bounds for axis 0 with size 2", lambda: x.__setitem__(5, 1))
    raises(IndexError, "index -4 is out of bounds for axis 1 with size 3", lambda: x.__setitem__((0, -4), 1))


def test_setitem_array_out_of_range_dropped():
    x = mx.zeros((4,))
    x[mx.array([1, 9, -1, -9])] = mx.array([1.0, 2.0, 3.0, 4.0])
    check(x, np.array([0, 1, 0, 3], np.float32))


def test_setitem_random_keys_against_numpy():
    rng = np.random.default_rng(5)
    done = 0
    while done < 300:
        shape = tuple(int(s) for s in rng.integers(1, 5, size=int(rng.integers(1, 5))))
        key = random_key(rng, shape)
        if not numpy_like(key, shape) or separated(key, True) != separated(key, False):
            continue  # MLX's scatters do not count ints when placing the index dims
        x, n = base(shape)
        try:
            target = np.arange(n.size).reshape(shape)[key]
        except IndexError:
            continue
        if len(np.unique(target)) != target.size:
            continue  # repeated targets: NumPy's order is not specified
        vshape = target.shape[int(rng.integers(0, target.ndim + 1)):]
        v = rng.integers(100, 200, size=vshape).astype(np.int32)
        n[key] = v
        x[to_mx_key(key)] = mx.array(v)
        check(x, n)
        done += 1


def test_setitem_large_parallel():
    rng = np.random.default_rng(6)
    n = rng.standard_normal((300, 200)).astype(np.float32)
    x = mx.array(n)
    rows = rng.permutation(300)[:150]
    vals = rng.standard_normal((150, 200)).astype(np.float32)
    x[mx.array(rows)] = mx.array(vals)
    n[rows] = vals
    x[:, 5:150:3] = 2.0
    n[:, 5:150:3] = 2.0
    x[7] = mx.arange(200).astype(mx.float32)
    n[7] = np.arange(200)
    check(x, n)


def test_setitem_mask():
    x, n = base((2, 3, 4))
    m = n % 3 == 0
    x[mx.array(m)] = -1
    n[m] = -1
    check(x, n)
    x, n = base((2, 3, 4))
    x[mx.array(m)] = mx.arange(100)  # values consumed in order (MLX takes the first ones)
    n[m] = np.arange(m.sum())
    check(x, n)
    x, n = base((2, 3, 4))
    rowmask = np.array([[True, True, False], [False, True, False]])
    x[mx.array(rowmask)] = mx.arange(12).reshape(3, 4) * 10
    n[rowmask] = np.arange(12).reshape(3, 4) * 10
    check(x, n)
    x, n = base((2, 3, 4))
    x[[True, False]] = mx.array([7, 8, 9, 10])
    n[[True, False]] = [7, 8, 9, 10]
    check(x, n)
    x, n = base((2, 3, 4))
    x[mx.array(True)] = 1
    check(x, np.ones_like(n))
    big = np.arange(100000, dtype=np.float32)
    xb = mx.array(big)
    xb[mx.array(big % 7 == 1)] = mx.arange(100000).astype(mx.float32)
    big[big % 7 == 1] = np.arange((big % 7 == 1).sum())
    check(xb, big)


def test_setitem_mask_errors():
    x, _ = base((2, 3, 4))
    raises(ValueError, "[masked_scatter] The boolean mask should have the same shape as the beginning of the "
           "indexed array but the mask has shape (1) and the array has shape (2,3,4)",
           lambda: x.__setitem__(mx.array([True]), 1))
    raises(ValueError, "[broadcast_shapes] Shapes (1,1,24) and (2,3,4) cannot be broadcast.",
           lambda: x.__setitem__(mx.array([True, True]), mx.arange(24)))
    x[mx.array([[True, True, False], [False, True, False]])] = mx.array([[1, 2, 3, 4]])
    raises(RuntimeError, "[MaskedScatter::eval_cpu] Source does not have enough elements for mask.",
           lambda: mx.eval(x))
    raises(ValueError, "[scatter] Boolean indices not supported.",
           lambda: x.__setitem__((mx.array([True, False]), 0), 1))


def test_setitem_errors():
    x, _ = base((2, 3, 4))
    raises(ValueError, "Cannot broadcast array of shape (2,1,1,4) into shape (2,3,4).",
           lambda: x.__setitem__(slice(None), mx.zeros((2, 1, 1, 4))))
    raises(ValueError, "[broadcast_shapes] Shapes (3,3,4) and (2,3,4) cannot be broadcast.",
           lambda: x.__setitem__(mx.array([0, 1]), mx.zeros((3, 3, 4))))
    raises(ValueError, "[broadcast_shapes] Shapes (2) and (3) cannot be broadcast.",
           lambda: x.__setitem__((mx.array([0, 1]), mx.array([0, 1, 2])), 1))
    raises(ValueError, "[scatter] Got indices with invalid dtype. Indices must be integral.",
           lambda: x.__setitem__(mx.array([0.0]), 1))
    raises(ValueError, "Too many indices for array with 3 dimensions.", lambda: x.__setitem__((0, 0, 0, 0), 1))
    raises(ValueError, "Cannot index mlx array using the given type.", lambda: x.__setitem__(1.5, 1))
    raises(ValueError, "too many indices for array: array is 0-dimensional",
           lambda: mx.array(3).__setitem__(mx.array([0]), 1))


# --------------------------------------------------------------------- x.at

AT_OPS = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
}


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
@pytest.mark.parametrize("op", list(AT_OPS))
@pytest.mark.usefixtures("cpu_device")  # 8-byte scatters run on a CPU stream, as on a Mac
def test_at_ops_accumulate(dtype, op):
    rng = np.random.default_rng(7)
    x, n = base((6, 3), dtype)
    idx = np.array([0, 5, 0, 2, 0, 5])
    v, vn = base((6, 3), dtype)
    if op == "multiply":
        v, vn = (v % 3).astype(dtype), (vn % 3).astype(vn.dtype)
    got = getattr(x.at[mx.array(idx)], op)(v)
    want = n.copy()
    if dtype in (mx.float16, mx.bfloat16):
        # reduced precision rounds after each update, in order
        want = want.astype(np.float16 if dtype == mx.float16 else np.float32)
    getattr(AT_OPS[op], "at")(want, idx, vn.astype(want.dtype))
    if dtype == mx.bfloat16:
        np.testing.assert_allclose(npy(got), want, rtol=2e-2)
    else:
        check(got, want)
    check(x, n)  # x itself is unchanged
    del rng


def test_at_add_scatter_semantics():
    a = mx.array([0, 0])
    idx = mx.array([0, 1, 0, 1])
    a2 = mx.array([0, 0])
    a2[idx] += 1  # plain assignment: one update per index
    check(a2, np.array([1, 1], np.int32))
    check(a.at[idx].add(1), np.array([2, 2], np.int32))
    x, n = base((2, 3, 4))
    want = n.copy()
    np.add.at(want, (slice(None), [0, 0, 2], 1), np.array([[1, 2, 3]]))
    check(x.at[:, [0, 0, 2], 1].add(mx.array([[1, 2, 3]])), want)
    want = n.copy()
    np.add.at(want, ([0, 0], slice(1, None), [3, 3]), 5)
    check(x.at[[0, 0], 1:, [3, 3]].add(5), want)
    want = n.copy()
    want[0] += 1
    check(x.at[0].add(1), want)


@pytest.mark.usefixtures("cpu_device")  # 8-byte scatters run on a CPU stream, as on a Mac
def test_at_divide_and_dtypes():
    xf = mx.array([1.0, 2.0, 3.0])
    i = mx.array([0, 0, 1])
    check(xf.at[i].divide(2), np.array([0.25, 1.0, 3.0], np.float32))
    # integers: MLX multiplies by the reciprocal cast to the dtype
    check(mx.array([4, 5]).at[mx.array([0, 0])].divide(2), np.array([0, 5], np.int32))
    check(mx.array([1, 2]).at[mx.array([0, 0, 0])].divide(mx.array(0.5)), np.array([8, 2], np.int32))
    h = mx.array([1.0, 2.0], mx.float16).at[mx.array([0, 0, 0])].add(0.1)
    want = np.array([1.0, 2.0], np.float16)
    np.add.at(want, [0, 0, 0], np.float16(0.1))
    check(h, want)
    b = mx.array([True, False, False, True])
    j = mx.array([0, 1, 2, 3])
    bv = mx.array([False, True, False, True])
    check(b.at[j].add(bv), np.array([True, True, False, True]))
    check(b.at[j].multiply(bv), np.array([False, False, False, True]))
    check(b.at[j].maximum(bv), np.array([True, True, False, True]))
    check(b.at[j].minimum(bv), np.array([False, False, False, True]))
    c = mx.array([1 + 2j, 3 + 0j])
    check(c.at[mx.array([0, 1])].maximum(mx.array([1 + 3j, 2 + 5j])), np.array([1 + 3j, 3 + 0j], np.complex64))
    check(c.at[mx.array([0, 0])].add(mx.array([1 + 3j, 2 + 5j])), np.array([4 + 10j, 3], np.complex64))
    u = mx.array([1, 2], mx.uint8).at[mx.array([0, 0])].subtract(3)
    check(u, np.array([251, 2], np.uint8))
    nan = float("nan")
    f = mx.array([nan, 1.0, 1.0, nan]).at[mx.array([0, 1, 2, 3])]
    np.testing.assert_array_equal(npy(f.maximum(mx.array([2.0, nan, 0.5, nan]))), [2, nan, 1, nan])
    np.testing.assert_array_equal(npy(f.minimum(mx.array([2.0, nan, 0.5, nan]))), [2, nan, 0.5, nan])


def test_at_bare_keys():
    x = mx.arange(6).reshape(2, 3)
    check(x.at[...].add(1.5), (np.arange(6).reshape(2, 3) + 1.5).astype(np.float32))  # plain op, promoted
    check(x.at[None].add(1.5), (np.arange(6).reshape(2, 3) + 1.5).astype(np.float32))
    check(x.at[...].divide(2), (np.arange(6).reshape(2, 3) / 2).astype(np.float32))
    check(x.at[:].add(1.5), np.arange(6).reshape(2, 3).astype(np.int32) + 1)  # scatter keeps the dtype
    check(x.at[()].add(1.5), np.arange(6).reshape(2, 3).astype(np.int32) + 1)
    check(x.at[...].maximum(mx.array([[[1]]])), np.maximum(np.arange(6).reshape(2, 3), 1).astype(np.int32))
    raises(ValueError, "Cannot broadcast array of shape (2,2,3) into shape (2,3).",
           lambda: x.at[...].add(mx.zeros((2, 2, 3))))


def test_at_large_parallel_accumulation():
    rng = np.random.default_rng(8)
    idx = rng.integers(-1000, 1000, size=200000)
    vals = rng.integers(-5, 6, size=200000).astype(np.int32)
    z = mx.zeros((1000,), mx.int32)
    want = np.zeros(1000, np.int32)
    np.add.at(want, idx, vals)
    check(z.at[mx.array(idx)].add(mx.array(vals)), want)
    # float32: updates applied in order per element, so NumPy's sequential sums match exactly
    fv = rng.standard_normal(200000).astype(np.float32)
    wf = np.zeros(1000, np.float32)
    np.add.at(wf, idx, fv)
    check(mx.zeros((1000,)).at[mx.array(idx)].add(mx.array(fv)), wf)
    wm = np.full(1000, -np.inf, np.float32)
    np.maximum.at(wm, idx, fv)
    check(mx.full((1000,), -np.inf).at[mx.array(idx)].maximum(mx.array(fv)), wm)
    # few rows, long blocks
    rows = np.array([0, 1, 0, 3, 0])
    block = rng.standard_normal((5, 40000)).astype(np.float32)
    wb = np.zeros((4, 40000), np.float32)
    np.add.at(wb, rows, block)
    check(mx.zeros((4, 40000)).at[mx.array(rows)].add(mx.array(block)), wb)
    # many rows of a few elements, with a slice after the index
    r2 = rng.integers(0, 50, size=20000)
    blk = rng.standard_normal((20000, 3)).astype(np.float32)
    w2 = np.zeros((50, 3), np.float32)
    np.add.at(w2, r2, blk)
    check(mx.zeros((50, 3)).at[mx.array(r2)].add(mx.array(blk)), w2)


def test_at_out_of_range():
    x = mx.zeros((3,))
    check(x.at[mx.array([0, 5, -1, -7])].add(1.0), np.array([1, 0, 1], np.float32))  # dropped
    raises(IndexError, "index 5 is out of bounds for axis 0 with size 3", lambda: x.at[5].add(1))


def test_at_errors():
    x = mx.arange(6).reshape(2, 3)
    raises(ValueError, "Must give indices to array.at (e.g. `x.at[0].add(4)`).", lambda: x.at.add(1))
    raises(ValueError, "[scatter] Boolean indices not supported.", lambda: x.at[mx.array([True, False])].add(1))
    raises(ValueError, "Invalid type list received in array initialization.", lambda: x.at[mx.array([0])].add([1]))
    raises(ValueError, "Converting 300 to uint8 would result in overflow.",
           lambda: x.astype(mx.uint8).at[mx.array([0])].add(300))
    raises(ValueError, "[negative] Not supported for bool, use logical_not instead.",
           lambda: mx.array([True]).at[mx.array([0])].subtract(mx.array([True])))
    raises(ValueError, "too many indices for array: array is 0-dimensional", lambda: mx.array(3).at[0].add(1))
    for bad in (lambda: x.at[0].add(), lambda: x.at[0].add(1, stream=None), lambda: x.at[0].add(y=1)):
        with pytest.raises(TypeError, match=r"add\(\): incompatible function arguments"):
            bad()
    assert isinstance(x.at, mx.ArrayAt) and isinstance(x.at[0], mx.ArrayAt)
    check(mx.array(3).at[...].add(1), np.array(4, np.int32))


@pytest.mark.parametrize("dt", [np.int32, np.float32, np.uint8, np.int64])
@pytest.mark.usefixtures("cpu_device")  # 8-byte scatters run on a CPU stream, as on a Mac
def test_at_add_many_updates_few_bins_matches_sequential(dt):
    # many single-element updates into a few bins: per-thread partials (integers)
    # or per-thread target ranges (floats, in update order), same result as np.add.at
    rng = np.random.default_rng(3)
    n, bins = 200_000, 37
    idx = rng.integers(0, bins, n)
    v = (rng.standard_normal(n) * 100).astype(dt) if dt == np.float32 else rng.integers(0, 100, n).astype(dt)
    x = np.arange(bins).astype(dt)
    want = x.copy()
    np.add.at(want, idx, v)
    got = np.array(mx.array(x).at[mx.array(idx)].add(mx.array(v)))
    # floats: the same order of additions per bin as the sequential loop, so bit-identical
    assert np.array_equal(got, want)
    # other ops and dropped (out-of-range) indices take the target-range path
    idx2 = idx.copy()
    idx2[::5] = bins + 3
    got = np.array(mx.array(x).at[mx.array(idx2)].maximum(mx.array(v)))
    want = x.copy()
    keep = idx2 < bins
    np.maximum.at(want, idx2[keep], v[keep])
    assert np.array_equal(got, want)
    # rows of several elements
    x2 = np.zeros((bins, 3), dt)
    v2 = np.repeat(v[:, None], 3, axis=1)
    want = x2.copy()
    np.add.at(want, idx, v2)
    got = np.array(mx.array(x2).at[mx.array(idx)].add(mx.array(v2)))
    assert np.array_equal(got, want)


def test_gpu_stream_scatter_refuses_8_byte_outputs():
    # Metal's scatter kernels have no int64/uint64 outputs (complex64 only summed): MLX refuses
    # them on a GPU stream at eval; CPU streams run them. Slice updates are not scatters.
    idx = mx.array([[0], [1], [2], [3]])
    for dt in (mx.int64, mx.uint64):
        x = mx.zeros((4, 8), dtype=dt)
        out = mx.put_along_axis(x, idx, mx.ones((4, 1), dtype=dt), axis=1)  # queued: no error yet
        with pytest.raises(ValueError, match=r"\[ScatterAxis::eval_gpu\] Does not support " + str(dt).split(".")[-1]):
            mx.eval(out)
        y = mx.zeros(5, dtype=dt)
        y[mx.array([1, 2])] = 3
        with pytest.raises(ValueError, match=r"\[Scatter::eval_gpu\] Does not support"):
            mx.eval(y)
        with pytest.raises(ValueError, match=r"\[Scatter::eval_gpu\]"):
            mx.eval(mx.zeros(5, dtype=dt).at[mx.array([0, 0])].add(2))
        # the CPU stream runs them
        assert mx.put_along_axis(x, idx, mx.ones((4, 1), dtype=dt), axis=1, stream=mx.cpu).sum().item() == 4
        with mx.stream(mx.cpu):
            z = mx.zeros(5, dtype=dt)
            z[mx.array([1, 2])] = 3
            assert z.tolist() == [0, 3, 3, 0, 0]
        # slice updates (MLX's SliceUpdate / DynamicSliceUpdate) are not scatters
        w = mx.zeros(5, dtype=dt)
        w[1:3] = 7
        w[0] = 1
        assert w.tolist() == [1, 7, 7, 0, 0]
        d = mx.slice_update(mx.zeros(6, dtype=dt), mx.ones(2, dtype=dt), mx.array([2]), axes=(0,))
        assert d.tolist() == [0, 0, 1, 1, 0, 0]
    # complex64: summed on the GPU, but not assigned
    c = mx.zeros(4, dtype=mx.complex64).at[mx.array([1, 1])].add(1 + 1j)
    assert c.tolist() == [0j, 2 + 2j, 0j, 0j]
    c = mx.zeros(4, dtype=mx.complex64)
    c[mx.array([1])] = 1j
    with pytest.raises(ValueError, match="Does not support complex64"):
        mx.eval(c)


def test_at_add_single_elements_every_layout_matches_sequential():
    # rows of one element through the pipelined path (more rows than one block of targets):
    # one or two index arrays, 1-D or 2-D (update offsets as a stride or as a list), strided,
    # broadcast and negative indices, a slice before the index; float sums bit-identical
    rng = np.random.default_rng(11)
    n = 150_000
    i1 = rng.integers(-64, 64, n)
    v = rng.standard_normal(n).astype(np.float32)
    want = np.zeros(64, np.float32)
    np.add.at(want, i1, v)
    check(mx.zeros((64,)).at[mx.array(i1)].add(mx.array(v)), want)
    # strided index and updates (every other element of larger arrays)
    i2 = rng.integers(0, 64, 2 * n)
    v2 = rng.standard_normal(2 * n).astype(np.float32)
    want = np.zeros(64, np.float32)
    np.add.at(want, i2[::2], v2[::2])
    check(mx.zeros((64,)).at[mx.array(i2)[::2]].add(mx.array(v2)[::2]), want)
    # a broadcast update
    want = np.zeros(64, np.float32)
    np.add.at(want, i1, np.float32(0.1))
    check(mx.zeros((64,)).at[mx.array(i1)].add(mx.array(np.float32(0.1))), want)
    # 2-D index arrays (two loop dimensions), two of them into a 2-D target
    a = rng.integers(0, 8, (300, 500))
    b = rng.integers(-8, 8, (300, 500))
    v3 = rng.standard_normal((300, 500)).astype(np.float32)
    want = np.zeros((8, 8), np.float32)
    np.add.at(want, (a, b), v3)
    check(mx.zeros((8, 8)).at[mx.array(a), mx.array(b)].add(mx.array(v3)), want)
    # a slice before the index: rows of one element, target stride 8 apart
    want = np.zeros((1, 64), np.float32)
    np.add.at(want, (slice(None), i1), v[None, :])
    check(mx.zeros((1, 64)).at[:, mx.array(i1)].add(mx.array(v[None, :])), want)
