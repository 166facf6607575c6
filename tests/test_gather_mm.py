"""gather_mm's own primitive (GatherMM): out[i] = a[lhs[i]] @ b[rhs[i]] over the
broadcast index arrays, checked against NumPy on every layout the evaluator
reads in place or copies, every dtype, the errors, and the vjp / jvp / vmap
rules against the definition."""
import numpy as np
import pytest

import mkpy as mx

rng = np.random.default_rng(7)


def ref(a, b, li, ri):
    """NumPy: a, b with batch dims flattened; li, ri broadcast."""
    af = a.reshape((-1,) + a.shape[-2:]).astype(np.float64)
    bf = b.reshape((-1,) + b.shape[-2:]).astype(np.float64)
    li, ri = np.broadcast_arrays(li, ri)
    return np.matmul(af[li], bf[ri])


def close(x, y, tol=1e-4):
    np.testing.assert_allclose(np.array(x).astype(np.float64), y, rtol=tol, atol=tol)


def test_broadcast_indices_and_batch_dims():
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)  # 6 matrices
    b = rng.standard_normal((7, 5, 3)).astype(np.float32)
    li = np.array([[5], [0]], np.int32)  # (2, 1)
    ri = np.array([[6, 0, 3, 3]], np.uint32)  # (1, 4)
    y = mx.gather_mm(mx.array(a), mx.array(b), mx.array(li), mx.array(ri))
    assert y.shape == (2, 4, 4, 3) and y.dtype == mx.float32
    close(y, ref(a, b, li, ri))


def test_default_indices():
    a = rng.standard_normal((3, 2, 4)).astype(np.float32)
    b = rng.standard_normal((5, 4, 6)).astype(np.float32)
    ri = np.array([4, 4, 1])
    close(mx.gather_mm(mx.array(a), mx.array(b), None, mx.array(ri)), ref(a, b, np.arange(3), ri))
    li = np.array([2, 0, 0, 1, 2])
    close(mx.gather_mm(mx.array(a), mx.array(b), mx.array(li), None), ref(a, b, li, np.arange(5)))
    # sorted_indices changes nothing in the values
    s = mx.gather_mm(mx.array(a), mx.array(b), None, mx.array(np.sort(ri)), sorted_indices=True)
    close(s, ref(a, b, np.arange(3), np.sort(ri)))


def test_many_pairs_share_matrices():
    # a mixture-of-experts shape: groups of rows per b matrix, cut into stacks
    t, k, K, N, E = 300, 2, 16, 8, 4
    x = rng.standard_normal((t, 1, 1, K)).astype(np.float32)
    w = rng.standard_normal((E, K, N)).astype(np.float32)
    idx = rng.integers(0, E, (t, k))
    y = mx.gather_mm(mx.array(x), mx.array(w), None, mx.array(idx))
    assert y.shape == (t, k, 1, N)
    close(y, ref(x, w, np.arange(t).reshape(t, 1), idx))


@pytest.mark.parametrize("layout", ["transposed_b", "broadcast_b", "sliced_a", "transposed_a", "strided_a"])
def test_layouts(layout):
    a = rng.standard_normal((3, 4, 6)).astype(np.float32)
    b = rng.standard_normal((2, 6, 5)).astype(np.float32)
    A, B = mx.array(a), mx.array(b)
    if layout == "transposed_b":
        bt = rng.standard_normal((2, 5, 6)).astype(np.float32)
        B, b = mx.swapaxes(mx.array(bt), -1, -2), np.swapaxes(bt, -1, -2)
    elif layout == "broadcast_b":
        b1 = rng.standard_normal((1, 6, 5)).astype(np.float32)
        B, b = mx.broadcast_to(mx.array(b1), (2, 6, 5)), np.broadcast_to(b1, (2, 6, 5))
    elif layout == "sliced_a":
        big = rng.standard_normal((3, 4, 9)).astype(np.float32)
        A, a = mx.array(big)[:, :, 2:8], big[:, :, 2:8]
    elif layout == "transposed_a":
        at = rng.standard_normal((3, 6, 4)).astype(np.float32)
        A, a = mx.swapaxes(mx.array(at), -1, -2), np.swapaxes(at, -1, -2)
    else:
        big = rng.standard_normal((3, 8, 12)).astype(np.float32)
        A, a = mx.array(big)[:, ::2, ::2], big[:, ::2, ::2]
    li, ri = np.array([2, 0, 1, 2]), np.array([1, 1, 0, 0])
    close(mx.gather_mm(A, B, mx.array(li), mx.array(ri)), ref(a, b, li, ri))


@pytest.mark.parametrize("dt,tol", [(mx.float16, 2e-2), (mx.bfloat16, 1e-1), (mx.float64, 1e-10)])
def test_dtypes(dt, tol, cpu_device):  # float64 is refused on the GPU stream, as on a Mac
    a = rng.standard_normal((3, 4, 8)).astype(np.float32)
    b = rng.standard_normal((2, 8, 5)).astype(np.float32)
    A, B = mx.array(a).astype(dt), mx.array(b).astype(dt)
    li, ri = np.array([0, 2, 1]), np.array([1, 0, 1])
    y = mx.gather_mm(A, B, mx.array(li), mx.array(ri), stream=mx.cpu)
    assert y.dtype == dt
    a64 = np.array(A.astype(mx.float32)).astype(np.float64)
    b64 = np.array(B.astype(mx.float32)).astype(np.float64)
    close(y if dt == mx.float64 else y.astype(mx.float32), ref(a64, b64, li, ri), tol)
    # promotion: float16 with float32 gives float32
    assert mx.gather_mm(A, mx.array(b), mx.array(li), mx.array(ri)).dtype == (
        mx.float64 if dt == mx.float64 else mx.float32)


def test_vectors_and_empty():
    a = rng.standard_normal((4,)).astype(np.float32)
    b = rng.standard_normal((3, 4, 5)).astype(np.float32)
    y = mx.gather_mm(mx.array(a), mx.array(b), mx.array([0, 0]), mx.array([2, 1]))
    assert y.shape == (2, 5)
    close(y, np.stack([a @ b[2], a @ b[1]]))
    # K == 0: zeros; M == 0: empty
    z = mx.gather_mm(mx.zeros((2, 3, 0)), mx.zeros((2, 0, 4)), mx.array([0, 1]), mx.array([1, 1]))
    assert z.shape == (2, 3, 4) and not np.array(z).any()
    e = mx.gather_mm(mx.zeros((2, 0, 3)), mx.zeros((2, 3, 4)), mx.array([0]), mx.array([1]))
    assert e.shape == (1, 0, 4)


def test_errors():
    with pytest.raises(ValueError, match=r"\[gather_mm\] Got 0 dimension input"):
        mx.gather_mm(mx.array(1.0), mx.ones((2, 2)), mx.array([0]), None)
    with pytest.raises(ValueError, match=r"must match second to last dimension"):
        mx.gather_mm(mx.ones((2, 3, 4)), mx.ones((2, 5, 4)), mx.array([0]), mx.array([0]))
    with pytest.raises(ValueError, match=r"Only real floating point types.*int32"):
        mx.gather_mm(mx.ones((2, 3, 4), mx.int32), mx.ones((2, 4, 4), mx.int32), mx.array([0]), None)
    with pytest.raises(ValueError, match=r"Indices must be integral"):
        mx.gather_mm(mx.ones((2, 3, 4)), mx.ones((2, 4, 4)), mx.array([0.0]), None)
    with pytest.raises(ValueError):  # index shapes that do not broadcast
        mx.gather_mm(mx.ones((2, 3, 4)), mx.ones((2, 4, 4)), mx.array([0, 1]), mx.array([0, 1, 1]))
    y = mx.gather_mm(mx.ones((2, 3, 4)), mx.ones((2, 4, 4)), mx.array([0, 2]), mx.array([0, 1]))
    with pytest.raises(IndexError, match=r"lhs index 2 is out of range for 2 matrices"):
        mx.eval(y)
    y = mx.gather_mm(mx.ones((2, 3, 4)), mx.ones((2, 4, 4)), mx.array([0, 1]), mx.array([-1, 1]))
    with pytest.raises(IndexError, match=r"rhs index 4294967295 is out of range"):
        mx.eval(y)


def test_vjp_against_definition():
    a = rng.standard_normal((4, 3, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5, 2)).astype(np.float32)
    li = np.array([[0, 3, 3], [1, 0, 2]])
    ri = np.array([[2], [0]])
    c = rng.standard_normal((2, 3, 3, 2)).astype(np.float32)

    def f(a_, b_):
        return (mx.gather_mm(a_, b_, mx.array(li), mx.array(ri)) * mx.array(c)).sum()

    ga, gb = mx.grad(f, argnums=(0, 1))(mx.array(a), mx.array(b))
    ra, rb = np.zeros_like(a, np.float64), np.zeros_like(b, np.float64)
    L, R = np.broadcast_arrays(li, ri)
    for i in np.ndindex(L.shape):
        ra[L[i]] += c[i] @ b[R[i]].T
        rb[R[i]] += a[L[i]].T @ c[i]
    close(ga, ra)
    close(gb, rb)
    with pytest.raises(ValueError, match=r"Cannot calculate VJP with respect to indices"):
        mx.grad(lambda l: mx.gather_mm(mx.array(a), mx.array(b), l, mx.array(ri)).sum())(
            mx.array(li).astype(mx.float32).astype(mx.int32))


def test_jvp_is_bilinear():
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((3, 4, 5)).astype(np.float32)
    ta = rng.standard_normal(a.shape).astype(np.float32)
    tb = rng.standard_normal(b.shape).astype(np.float32)
    li, ri = np.array([1, 0, 1]), np.array([2, 2, 0])
    _, (t,) = mx.jvp(lambda x, y: mx.gather_mm(x, y, mx.array(li), mx.array(ri)),
                     [mx.array(a), mx.array(b)], [mx.array(ta), mx.array(tb)])
    close(t, ref(ta, b, li, ri) + ref(a, tb, li, ri))


@pytest.mark.parametrize("which", ["a", "b", "lhs", "rhs", "all"])
def test_vmap_against_loop(which):
    V = 3
    a = rng.standard_normal((V, 2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((V, 3, 4, 5)).astype(np.float32)
    li = rng.integers(0, 2, (V, 4))
    ri = rng.integers(0, 3, (V, 4))
    batched = {"a": which in ("a", "all"), "b": which in ("b", "all"),
               "lhs": which in ("lhs", "all"), "rhs": which in ("rhs", "all")}
    args = [x if batched[k] else x[0] for k, x in zip("a b lhs rhs".split(), (a, b, li, ri))]
    axes = tuple(0 if batched[k] else None for k in "a b lhs rhs".split())
    f = mx.vmap(lambda x, y, l, r: mx.gather_mm(x, y, l, r), in_axes=axes)
    y = f(*[mx.array(x) for x in args])
    want = np.stack([ref(*[x[v] if batched[k] else x for k, x in zip("a b lhs rhs".split(), args)])
                     for v in range(V)])
    close(y, want)
