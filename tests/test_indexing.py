"""Basic indexing (ints, slices with any step, None, Ellipsis) against NumPy,
on contiguous and non-contiguous arrays, plus the error cases. Messages of the
errors MLX raises are MLX 0.32's; out-of-range ints raise IndexError as in
NumPy (MLX reads out of bounds)."""
import numpy as np
import pytest

import mkpy as mx

DTYPES = [mx.bool_, mx.uint8, mx.int8, mx.int16, mx.int32, mx.int64, mx.uint64, mx.float16, mx.float32,
          mx.float64, mx.bfloat16, mx.complex64]


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


def base(shape, dtype=mx.int32):
    n = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) % 97
    a = mx.array(n).astype(dtype)
    return a, npy(a)


def npy(a):
    # bfloat16 has no NumPy dtype: compare it through float32 (exact)
    return np.array(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a)


def random_key(rng, shape):
    """A random basic index for an array of this shape (ints sometimes out of range)."""
    nd = len(shape)
    k = int(rng.integers(0, nd + 1))
    use_ellipsis = rng.random() < 0.3
    split = int(rng.integers(0, k + 1))
    dims = list(range(split)) + list(range(nd - (k - split), nd)) if use_ellipsis else list(range(k))
    items = []
    for d in dims:
        n = shape[d]
        r = rng.random()
        if r < 0.05:
            items.append(int(rng.integers(-n - 2, n + 2)))
        elif r < 0.3 and n > 0:
            items.append(int(rng.integers(-n, n)))
        else:
            def bound():
                return None if rng.random() < 0.3 else int(rng.integers(-n - 3, n + 4))
            step = None if rng.random() < 0.3 else int(rng.choice([-7, -3, -2, -1, 1, 2, 3, 5]))
            items.append(slice(bound(), bound(), step))
    if use_ellipsis:
        items.insert(split, Ellipsis)
    for _ in range(int(rng.integers(0, 3))):
        if rng.random() < 0.5:
            items.insert(int(rng.integers(0, len(items) + 1)), None)
    if len(items) == 1 and rng.random() < 0.5:
        return items[0]
    return tuple(items)


def layouts(shape):
    """(mkpy, numpy) pairs with the same values and different layouts."""
    a, n = base(shape)
    yield a, n
    yield a.T.T, n
    if len(shape) >= 2:
        big, bign = base(tuple(2 * s + 1 for s in shape[::-1]))
        sl = tuple(slice(1, None, 2) for _ in shape)
        yield mx.transpose(big[sl]), bign[sl].T
    if len(shape) >= 1 and shape[-1] > 0:
        r, rn = base(shape[:-1] + (1,))
        yield mx.broadcast_to(r, shape), np.broadcast_to(rn, shape)
    flipped = tuple(slice(None, None, -1) for _ in shape)
    yield a[flipped], n[flipped]


@pytest.mark.parametrize("shape", [(5,), (4, 6), (3, 4, 5), (2, 3, 1, 4), (0,), (3, 0, 2), ()])
def test_fuzz_against_numpy(shape):
    rng = np.random.default_rng(len(shape) * 7 + sum(shape))
    for a, n in layouts(shape):
        for _ in range(150):
            key = random_key(rng, shape)
            try:
                want = n[key]
            except IndexError:
                if not (shape == () and isinstance(key, (int, slice))):
                    with pytest.raises(IndexError):
                        a[key]
                continue
            got = a[key]
            check(got, np.asarray(want))
            # a view of the view
            if want.ndim:
                k2 = random_key(rng, want.shape)
                try:
                    want2 = np.asarray(want)[k2]
                except IndexError:
                    with pytest.raises(IndexError):
                        got[k2]
                    continue
                check(got[k2], np.asarray(want2))


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes(dtype):
    a, n = base((3, 4, 5), dtype)
    for key in [0, -1, (1, 2), (slice(None, None, -1), 1), (Ellipsis, 2), (None, 1, slice(1, 4, 2)),
                (slice(None), None, slice(None, None, -2), 0), (2, 3, 4), (-1, -1, -1)]:
        check(a[key], np.asarray(n[key]))
        t = key[::-1] if isinstance(key, tuple) and Ellipsis not in key and None not in key else key
        check(a.T[t], np.asarray(n.T[t]))


def test_specific_keys():
    a, n = base((2, 3, 4))
    for key in [(Ellipsis, 0), (0, Ellipsis, 0), (None, Ellipsis, None, 0), (0, None, slice(1, None), Ellipsis,
                slice(None, None, -2)), (slice(None, None, -1), slice(None, None, -1)), slice(10, None),
                slice(-10, None), slice(None, -10), None, (), Ellipsis, slice(None, None, -3), slice(5, 1, -1),
                slice(1, 5, -1), slice(1, 1), (1, slice(None), None, slice(2, None)), (None, None, None),
                (slice(None), None, slice(None), None, slice(None), None), slice(None, 1, -1),
                (slice(-1, -3, -1), slice(2, 0, -1), slice(None, None, -3)), slice(1, None, -5), slice(0, 2, 3),
                (0, 0), (1, -1, -4), (Ellipsis, None), (None, Ellipsis), (Ellipsis, 1, 2, 3)]:
        check(a[key], np.asarray(n[key]))
    # integer-like keys
    check(a[np.int64(1)], n[1])
    check(a[np.int32(-1), np.uint8(2)], n[-1, 2])
    check(a[np.array(1)], n[1])
    check(a[mx.array(1)], n[1])
    check(a[mx.array(1, mx.uint8), 0], n[1, 0])
    check(a[:, np.int64(1)], n[:, 1])
    check(a[np.int64(0):np.int64(1)], n[0:1])
    check(a[slice(2 ** 31 - 1, None)], n[2 ** 31 - 1:])
    check(a[::-(2 ** 31)], n[::-(2 ** 31)])
    # MLX converts ints and slice bounds to int32 (issue #14: indices >= 2^32 raise as MLX)
    for key in (slice(2 ** 62, None), slice(None, 2 ** 32), slice(-2 ** 62, None, 2 ** 62), 2 ** 32):
        with pytest.raises(ValueError, match="32-bit"):
            a[key]
    # tuple key
    check(a[(0, 1)], n[0, 1])


def test_zero_d_and_empty():
    s = mx.array(5)
    for key in [Ellipsis, None, (), (None, Ellipsis, None), (Ellipsis, None)]:
        check(s[key], np.asarray(np.array(5, np.int32)[key]))
    e = mx.array(np.zeros((0, 3), np.float32))
    check(e[:, 1], np.zeros(0, np.float32))
    check(e[::-1, ::-2], np.zeros((0, 2), np.float32))
    check(e[1:], np.zeros((0, 3), np.float32))
    check(e[None, ..., 2], np.zeros((1, 0), np.float32))


def test_views_of_views():
    n = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    a = mx.array(n)
    check(a.T[1:, ::2], n.T[1:, ::2])
    check(a[:, ::-1].T[::2], n[:, ::-1].T[::2])
    check(a[..., 1][None], n[..., 1][None])
    check(mx.transpose(a[1:, ::2], (2, 0, 1))[::-2, 1], np.transpose(n[1:, ::2], (2, 0, 1))[::-2, 1])
    check(a[::2].reshape(-1)[::7], n[::2].reshape(-1)[::7])
    check(a.T[::-1].reshape(6, 20)[2:5, ::3], n.T[::-1].reshape(6, 20)[2:5, ::3])
    check(mx.swapaxes(a, 0, 2)[1][::-1, 1:3], np.swapaxes(n, 0, 2)[1][::-1, 1:3])
    # indexing results feed other ops
    check(a[1:3, ::2] * 2 + a[:2, ::-2], n[1:3, ::2] * 2 + n[:2, ::-2])
    v = mx.array(np.ascontiguousarray(n.T)[::2, 1:, ::-1])
    check(v[1], np.ascontiguousarray(n.T)[::2, 1:, ::-1][1])
    # iteration goes along the first axis
    for got, want in zip(a.T, n.T):
        check(got, want)


def test_large_slices():
    n = np.arange(512 * 300, dtype=np.float32).reshape(512, 300)
    a = mx.array(n)
    check(a[::-3, 7:250:2] + 1, n[::-3, 7:250:2] + 1)
    check(a.T[100:, ::5].reshape(-1), n.T[100:, ::5].reshape(-1))


def test_out_of_range_int():
    a, _ = base((2, 3, 4))
    raises(IndexError, "index 2 is out of bounds for axis 0 with size 2", lambda: a[2])
    raises(IndexError, "index 5 is out of bounds for axis 0 with size 2", lambda: a[5])
    raises(IndexError, "index -3 is out of bounds for axis 0 with size 2", lambda: a[-3])
    raises(IndexError, "index 3 is out of bounds for axis 1 with size 3", lambda: a[0, 3])
    raises(IndexError, "index -4 is out of bounds for axis 1 with size 3", lambda: a[0, -4])
    raises(IndexError, "index 4 is out of bounds for axis 2 with size 4", lambda: a[0, 0, 4])
    raises(IndexError, "index 4 is out of bounds for axis 2 with size 4", lambda: a[..., 4])
    raises(IndexError, "index 4 is out of bounds for axis 0 with size 4", lambda: a[0][0][4])
    raises(IndexError, "index 0 is out of bounds for axis 0 with size 0", lambda: mx.array(np.zeros((0, 3)))[0])
    raises(IndexError, None, lambda: a[2 ** 31 - 1])
    # beyond int32: MLX's ValueError (issue #14)
    raises(ValueError, None, lambda: a[2 ** 70])
    raises(ValueError, None, lambda: a[-2 ** 70])


def test_errors():
    a, _ = base((2, 3, 4))
    s = mx.array(5)
    too_many = "Too many indices for array with 3 dimensions."
    raises(ValueError, too_many, lambda: a[0, 0, 0, 0])
    raises(ValueError, too_many, lambda: a[0, None, 0, 0, 0])
    raises(ValueError, too_many, lambda: a[..., 0, 0, 0, 0])
    raises(ValueError, too_many, lambda: a[:, :, :, :])
    raises(ValueError, "too many indices for array: array is 0-dimensional", lambda: s[0])
    raises(ValueError, "too many indices for array: array is 0-dimensional", lambda: s[:])
    raises(ValueError, "too many indices for array: array is 0-dimensional", lambda: a[0, 0, 0][0])
    raises(ValueError, "Too many indices for array with 0 dimensions.", lambda: s[..., 0])
    raises(ValueError, "Too many indices for array with 0 dimensions.", lambda: s[None, 0])
    ell = "An index can only have a single ellipsis (...)"
    raises(ValueError, ell, lambda: a[..., ..., 0])
    raises(ValueError, ell, lambda: a[..., None, ...])
    raises(ValueError, ell, lambda: s[..., ...])
    raises(ValueError, "slice step cannot be zero", lambda: a[::0])
    raises(ValueError, "Slice indices must be integers or None.", lambda: a[0.0:2])
    raises(ValueError, "Slice indices must be integers or None.", lambda: a[mx.array(0):mx.array(1)])
    raises(ValueError, "Slice indices must be integers or None.", lambda: a[::1.5])


def test_non_basic_keys_forward():
    """Keys that are not basic go to mkpy._core._advanced_getitem when it exists;
    without it they raise MLX's ValueError."""
    a, n = base((2, 3, 4))
    core = mx._core
    saved = getattr(core, "_advanced_getitem", None)
    try:
        if saved is not None:
            del core._advanced_getitem
        for key in [1.0, "a", True, False, [0, 1], (0, [0, 1]), mx.array([0, 1]), np.array([0, 1]),
                    mx.array(1.0), (slice(None), 1.5)]:
            raises(ValueError, "Cannot index mlx array using the given type.", lambda: a[key])
        seen = []

        def fake(arr, key):
            seen.append(key)
            return "advanced"

        core._advanced_getitem = fake
        assert a[[0, 1]] == "advanced"
        assert a[0, [0, 1]] == "advanced"
        assert a[True] == "advanced"
        assert a[np.array([1, 0])] == "advanced"
        assert seen[1] == (0, [0, 1])
        # basic keys never reach it
        check(a[0, 1:], n[0, 1:])
        check(a[mx.array(1)], n[1])
        assert len(seen) == 4
    finally:
        if hasattr(core, "_advanced_getitem"):
            del core._advanced_getitem
        if saved is not None:
            core._advanced_getitem = saved
