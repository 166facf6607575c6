"""The ops and attributes issue #14 lists as missing, each checked against NumPy
(or against the op's definition where NumPy lacks it)."""
import math
import weakref

import numpy as np
import pytest

import mkpy as mx


def close(a, b, **kw):
    np.testing.assert_allclose(np.array(a), np.asarray(b), **kw)


def test_constants():
    assert mx.pi == math.pi and mx.e == math.e and mx.inf == float("inf")
    assert math.isnan(mx.nan) and mx.newaxis is None
    assert abs(mx.euler_gamma - 0.5772156649015329) < 1e-15
    assert mx.array([1, 2])[:, mx.newaxis].shape == (2, 1)


def test_finfo_iinfo():
    for dt, nt in [(mx.float32, np.float32), (mx.float16, np.float16), (mx.float64, np.float64)]:
        f, n = mx.finfo(dt), np.finfo(nt)
        assert (f.min, f.max, f.eps, f.smallest_normal, f.bits) == (n.min, n.max, n.eps, n.smallest_normal, n.bits)
        assert f.dtype == dt
    assert mx.finfo(mx.bfloat16).eps == 2.0**-7 and mx.finfo(mx.complex64).dtype == mx.float32
    for dt, nt in [(mx.int8, np.int8), (mx.uint32, np.uint32), (mx.int64, np.int64), (mx.uint64, np.uint64)]:
        i, n = mx.iinfo(dt), np.iinfo(nt)
        assert (i.min, i.max) == (n.min, n.max) and i.dtype == dt
    with pytest.raises(ValueError):
        mx.finfo(mx.int32)
    with pytest.raises(ValueError):
        mx.iinfo(mx.float32)


@pytest.mark.parametrize("name", ["hanning", "hamming", "bartlett", "blackman"])
def test_windows(name):
    for M in (0, 1, 2, 7, 16):
        close(getattr(mx, name)(M), getattr(np, name)(M), atol=1e-6)
        assert getattr(mx, name)(M).dtype == mx.float32


def test_divmod():
    a = np.array([7, -7, 5, -3], np.int32)
    b = np.array([2, 2, -3, -3], np.int32)
    q, r = mx.divmod(mx.array(a), mx.array(b))
    close(q, a // b)
    close(r, a % b)
    q, r = mx.divmod(mx.array([7.5, -7.5]), 2.0)
    close(q, [3.0, -4.0])
    close(r, [1.5, 0.5])


def test_as_strided():
    x = np.arange(12, dtype=np.float32)
    y = mx.as_strided(mx.array(x), (3, 3), (2, 1), 1)
    close(y, np.lib.stride_tricks.as_strided(x[1:], (3, 3), (8, 4)))
    xt = mx.array(x.reshape(3, 4)).T  # not row-contiguous: its row-major elements are used
    close(mx.as_strided(xt, (12,), (1,)), x.reshape(3, 4).T.ravel())
    close(mx.as_strided(mx.array(x), (2, 2)), x[:4].reshape(2, 2))
    with pytest.raises(ValueError):
        mx.as_strided(mx.array(x), (-1, 2))


def _hadamard(n):
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def test_hadamard_transform():
    x = np.random.RandomState(0).randn(3, 16).astype(np.float32)
    close(mx.hadamard_transform(mx.array(x)), x @ _hadamard(16).T / 4.0, atol=1e-5)
    close(mx.hadamard_transform(mx.array(x), scale=1.0), x @ _hadamard(16).T, atol=1e-4)
    assert mx.hadamard_transform(mx.array([1, 2])).dtype == mx.float32
    with pytest.raises(ValueError):
        mx.hadamard_transform(mx.zeros((0,)))


def test_median():
    x = np.random.RandomState(1).randn(4, 5, 6).astype(np.float32)
    a = mx.array(x)
    close(mx.median(a), np.median(x), rtol=1e-6)
    close(mx.median(a, axis=1), np.median(x, axis=1), rtol=1e-6)
    close(mx.median(a, axis=(0, 2), keepdims=True), np.median(x, axis=(0, 2), keepdims=True), rtol=1e-6)
    assert mx.median(mx.array([1, 2, 3, 4])).item() == 2.5
    assert math.isnan(mx.median(mx.array([1.0, float("nan"), 0.0])).item())
    with pytest.raises(ValueError):
        mx.median(a, axis=3)
    with pytest.raises(ValueError):
        mx.median(a, axis=(1, 1))


def test_roll_flip_kron():
    x = np.arange(24).reshape(2, 3, 4)
    a = mx.array(x)
    close(mx.roll(a, 5), np.roll(x, 5))
    close(mx.roll(a, -2, axis=2), np.roll(x, -2, axis=2))
    close(mx.roll(a, (1, 2), axis=(0, 2)), np.roll(x, (1, 2), axis=(0, 2)))
    close(mx.roll(a, 7, axis=(1, 2)), np.roll(x, 7, axis=(1, 2)))
    close(mx.roll(a, (1, 2), axis=1), np.roll(x, (1, 2), axis=1))
    close(mx.flip(a), np.flip(x))
    close(mx.flip(a, axis=1), np.flip(x, axis=1))
    close(mx.flip(a, axis=(0, -1)), np.flip(x, axis=(0, -1)))
    with pytest.raises(ValueError):
        mx.flip(a, axis=3)
    p, q = np.arange(6).reshape(2, 3), np.array([[0, 5], [6, 7]])
    close(mx.kron(mx.array(p), mx.array(q)), np.kron(p, q))
    close(mx.kron(mx.array([1, 2]), mx.array(q)), np.kron([1, 2], q))


def test_dynamic_slice_and_update():
    x = np.arange(30).reshape(5, 6)
    a = mx.array(x)
    close(mx.slice(a, mx.array([1, 2]), [0, 1], [2, 3]), x[1:3, 2:5])
    close(mx.slice(a, mx.array([3]), [1], [5, 2]), x[:, 3:5])
    u = np.full((2, 2), -1)
    ref = x.copy()
    ref[2:4, 1:3] = u
    close(mx.slice_update(a, mx.array(u), mx.array([2, 1]), [0, 1]), ref)
    ref = x.copy()
    ref[:2, 4:6] = 9
    close(mx.slice_update(a, mx.full((2, 2), 9), mx.array([4]), [1]), ref)
    with pytest.raises(ValueError):
        mx.slice(a, mx.array([1, 2]), [0], [1, 1])


def test_searchsorted():
    s = np.array([1.0, 2.0, 2.0, 3.0, 5.0], np.float32)
    v = np.array([[0.0, 2.0], [2.5, 6.0]], np.float32)
    for side in ("left", "right"):
        r = mx.searchsorted(mx.array(s), mx.array(v), side=side)
        assert r.dtype == mx.uint32
        close(r, np.searchsorted(s, v, side=side))
    with pytest.raises(ValueError):
        mx.searchsorted(mx.array(s), mx.array(v), side="middle")
    # NaN sorts after everything, as np.searchsorted assumes
    s2 = np.array([1.0, 2.0, np.nan], np.float32)
    v2 = np.array([np.nan, 1.5, 3.0], np.float32)
    for side in ("left", "right"):
        close(mx.searchsorted(mx.array(s2), mx.array(v2), side=side), np.searchsorted(s2, v2, side=side))


def test_searchsorted_is_one_binary_search_per_value():
    # MLX's SearchSorted primitive: views of either input, every dtype, sort's order
    rng = np.random.default_rng(3)
    s = np.sort(rng.standard_normal(1001).astype(np.float32))
    v = (rng.standard_normal((7, 40)) * 2).astype(np.float32)
    S, V = mx.array(np.stack([s, s])), mx.array(v)
    for side in ("left", "right"):
        close(mx.searchsorted(S[1], V.T[::3], side=side), np.searchsorted(s, v.T[::3], side=side))
        close(mx.searchsorted(S[0, ::2], mx.broadcast_to(V[2], (3, 40)), side=side),
              np.searchsorted(s[::2], np.broadcast_to(v[2], (3, 40)), side=side))
        close(mx.searchsorted(S[0, ::-1][::-1], V, side=side), np.searchsorted(s, v, side=side))
    for dt in (mx.int8, mx.uint16, mx.int64, mx.float16, mx.bfloat16):
        seq = mx.array([0, 0, 1, 1, 3]).astype(dt)
        close(mx.searchsorted(seq, mx.array([1, 0, 3]).astype(dt)), [2, 0, 4])
        close(mx.searchsorted(seq, mx.array([1, 0, 3]).astype(dt), side="right"), [4, 2, 5])
    b = mx.array([False, False, True])
    close(mx.searchsorted(b, mx.array([True, False])), [2, 0])
    close(mx.searchsorted(b, mx.array([True, False]), side="right"), [3, 2])
    c = mx.array([1 + 1j, 1 + 2j, 2 + 0j], mx.complex64)  # lexicographic, as sort
    close(mx.searchsorted(c, mx.array([1 + 1.5j, 2 + 0j], mx.complex64)), [1, 2])
    assert mx.searchsorted(mx.array([1, 2], mx.int32), mx.array(1.5, mx.float32)).item() == 1  # promoted


def test_searchsorted_transformations():
    seq = mx.arange(8, dtype=mx.float32)
    vs = mx.array(np.random.default_rng(4).uniform(0, 10, (3, 5)).astype(np.float32))
    assert mx.array_equal(mx.vmap(lambda x: mx.searchsorted(seq, x))(vs), mx.searchsorted(seq, vs))
    assert mx.array_equal(mx.vmap(lambda x: mx.searchsorted(seq, x), in_axes=1, out_axes=1)(vs),
                          mx.searchsorted(seq, vs))
    # MLX's SearchSorted has no batching rule for the sequence
    with pytest.raises(ValueError, match="Cannot vmap over the sorted sequence"):
        mx.vmap(lambda s: mx.searchsorted(s, mx.array([1.0])))(mx.zeros((3, 4)))
    with pytest.raises(ValueError, match="Cannot vmap over the sorted sequence"):
        mx.vmap(lambda s, x: mx.searchsorted(s, x))(mx.zeros((3, 4)), vs[:, :2])
    # no gradient flows through it (MLX's vjp and jvp are zeros)
    f = lambda x: (mx.searchsorted(x, x * 0.5).astype(mx.float32) * x).sum()
    close(mx.grad(f)(mx.array([1.0, 2.0, 4.0])), np.array([0.0, 0.0, 1.0]))
    _, t = mx.jvp(lambda x: mx.searchsorted(x, mx.array([1.5])), [mx.array([1.0, 2.0])], [mx.ones(2)])
    assert t[0].tolist() == [0] and t[0].dtype == mx.uint32
    # compiled and shapeless: the output follows the values
    g = mx.compile(lambda s, x: mx.searchsorted(s, x, side="right"), shapeless=True)
    close(g(seq, vs), np.searchsorted(np.arange(8), np.array(vs), side="right"))
    close(g(seq, vs[0]), np.searchsorted(np.arange(8), np.array(vs[0]), side="right"))


def test_dtype_queries():
    assert mx.result_type(mx.int8, mx.uint8) == mx.int16
    assert mx.result_type(mx.array([1.0]), mx.int32) == mx.float32
    assert mx.can_cast(mx.int8, mx.int32) and not mx.can_cast(mx.float32, mx.int32)
    assert mx.isdtype(mx.int8, "signed integer") and not mx.isdtype(mx.uint8, "signed integer")
    assert mx.isdtype(mx.float16, ("integral", "real floating"))
    assert mx.isdtype(mx.complex64, "complex floating") and mx.isdtype(mx.bool_, mx.bool_)
    with pytest.raises(ValueError):
        mx.isdtype(mx.int8, "whatever")
    with pytest.raises(ValueError):
        mx.result_type()


def test_small_ops():
    x = np.array([[0.0, 1.5, -2.7], [3.2, 0.0, -0.5]], np.float32)
    a = mx.array(x)
    close(mx.count_nonzero(a), np.count_nonzero(x))
    close(mx.count_nonzero(a, axis=1), np.count_nonzero(x, axis=1))
    assert mx.count_nonzero(a).dtype == mx.int32
    close(mx.logical_xor(a, mx.array([1.0, 0.0, 0.0])), np.logical_xor(x, [1, 0, 0]))
    close(mx.trunc(a), np.trunc(x))
    assert mx.trunc(mx.array([3, -3])).dtype == mx.int32
    y = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    close(mx.nan_to_num(mx.array(y)), np.nan_to_num(y))
    close(mx.nan_to_num(mx.array(y), nan=2.0, posinf=9.0, neginf=-9.0), [1, 2, 9, -9])
    z = np.array([[1, 4, 9, 16], [2, 3, 5, 8]])
    close(mx.diff(mx.array(z)), np.diff(z))
    close(mx.diff(mx.array(z), n=2, axis=1), np.diff(z, n=2, axis=1))
    close(mx.diff(mx.array(z), axis=0), np.diff(z, axis=0))
    with pytest.raises(ValueError):
        mx.diff(mx.array(z), axis=2)
    m = np.arange(24).reshape(2, 3, 4)
    close(mx.trace(mx.array(m)), np.trace(m))
    close(mx.trace(mx.array(m), 1, 1, 2), np.trace(m, 1, 1, 2))
    assert mx.trace(mx.array(m), dtype=mx.float32).dtype == mx.float32
    with pytest.raises(IndexError):
        mx.trace(mx.array(m), axis1=5)
    p, q = np.random.RandomState(2).randn(2, 3, 4), np.random.RandomState(3).randn(1, 3, 4)
    close(mx.vecdot(mx.array(p), mx.array(q)), np.sum(p * q, -1), rtol=1e-5)
    close(mx.vecdot(mx.array(p), mx.array(q), axis=1), np.sum(p * q, 1), rtol=1e-5)
    with pytest.raises(ValueError):
        mx.vecdot(mx.array(p), mx.array(q[0]))  # MLX: the axis must be the same dim of both
    e = mx.empty_like(a)
    assert e.shape == a.shape and e.dtype == a.dtype


def test_meshgrid():
    x, y = np.arange(3), np.arange(4) * 10
    for idx in ("xy", "ij"):
        for sparse in (False, True):
            got = mx.meshgrid(mx.array(x), mx.array(y), sparse=sparse, indexing=idx)
            want = np.meshgrid(x, y, sparse=sparse, indexing=idx)
            assert len(got) == 2
            for g, w in zip(got, want):
                close(g, w)
    with pytest.raises(ValueError):
        mx.meshgrid(mx.array(x), indexing="yx")


def test_depends():
    a, b = mx.array([1.0, 2.0]), mx.array([3.0])
    c = mx.depends(a, b)
    close(c, [1.0, 2.0])
    out = mx.depends([a, a * 2], [b])
    close(out[1], [2.0, 4.0])
    g = mx.grad(lambda t: mx.depends(t * t, b).sum())(mx.array(3.0))
    assert g.item() == 6.0


def test_weakref_and_printoptions():
    a = mx.array([1.0])
    r = weakref.ref(a)
    assert r() is a
    del a
    assert r() is None
    x = mx.array([1.0 / 3])
    with mx.printoptions(precision=3):
        assert "0.333]" in repr(x)
    assert "0.333333" in repr(x)
    mx.set_printoptions(precision=2)
    try:
        assert "0.33]" in repr(x) and mx.get_printoptions().precision == 2
    finally:
        mx.set_printoptions(precision=-1)


def test_array_is_a_python_sequence_for_numpy():
    # x[i] through the sequence protocol too (as MLX's class has it): NumPy then builds nested
    # structures of arrays without its "not a sequence" coercion
    import operator
    x = mx.array([[1.0, 2.0], [3.0, 4.0]])
    assert operator.getitem(x, -1).tolist() == [3.0, 4.0]
    assert [r.tolist() for r in reversed(x)] == [[3.0, 4.0], [1.0, 2.0]]
    got = np.asanyarray(([x, x + 1], [x * 2, x * 3]))
    assert got.shape == (2, 2, 2, 2) and got.dtype == np.float32
    np.testing.assert_array_equal(got[1, 1], np.array(x) * 3)
    with pytest.raises(TypeError):
        reversed(mx.array(1.0))
