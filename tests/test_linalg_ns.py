"""mx.linalg: factorizations through LAPACK and the composed ops, checked against NumPy."""
import numpy as np
import pytest

import mkpy as mx

C = mx.cpu
rng = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def arr(x):
    return mx.array(x, dtype=mx.float64) if x.dtype == np.float64 else mx.array(x)


def spd(*batch, n=4, dtype=np.float32):
    a = rand(*batch, n, n, dtype=dtype)
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def close(x, y, tol=1e-4):
    np.testing.assert_allclose(np.array(x), y, rtol=tol, atol=tol)


# ------------------------------------------------------------------ streams


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda a: mx.linalg.inv(a), "inv"),
        (lambda a: mx.linalg.qr(a), "qr"),
        (lambda a: mx.linalg.svd(a), "svd"),
        (lambda a: mx.linalg.cholesky(a), "cholesky"),
        (lambda a: mx.linalg.eigh(a), "eigh"),
        (lambda a: mx.linalg.eigvals(a), "eigvals"),
        (lambda a: mx.linalg.lu(a), "lu"),
        (lambda a: mx.linalg.solve(a, a), "solve"),
        (lambda a: mx.linalg.pinv(a), "pinv"),
    ],
)
def test_gpu_stream_refused(call, name):
    a = mx.array(spd())
    with pytest.raises(ValueError, match=rf"\[linalg::{name}\] This op is not yet supported on the GPU. "
                                         "Explicitly pass a CPU stream to run it."):
        call(a)
    with pytest.raises(ValueError, match="not yet supported on the GPU"):
        mx.linalg.inv(a, stream=mx.gpu)


def test_cpu_stream_forms():
    a = mx.array(spd())
    ref = np.linalg.inv(np.array(a))
    close(mx.linalg.inv(a, stream=mx.cpu), ref)
    close(mx.linalg.inv(a, stream=mx.Device(mx.cpu)), ref)
    close(mx.linalg.inv(a, stream=mx.default_stream(mx.cpu)), ref)
    with mx.stream(mx.cpu):
        close(mx.linalg.inv(a), ref)
    with pytest.raises(TypeError):
        mx.linalg.inv(a, stream="cpu")


def test_norm_runs_on_default_stream():
    x = rand(3, 4)
    close(mx.linalg.norm(mx.array(x)), np.linalg.norm(x))
    with pytest.raises(ValueError, match=r"\[linalg::svd\] This op is not yet supported"):
        mx.linalg.norm(mx.array(x), ord=2)


# ------------------------------------------------------------------ norm


@pytest.mark.parametrize("ord", [None, 0, 1, 2, -1, -2, 0.5, 3, np.inf, -np.inf])
def test_vector_norm(ord):
    x = rand(3, 5)
    ref = np.linalg.norm(x, ord=ord, axis=1)
    close(mx.linalg.norm(mx.array(x), ord=ord, axis=1), ref)
    r = mx.linalg.norm(mx.array(x), ord, 1, True)
    assert r.shape == (3, 1)


@pytest.mark.parametrize("ord", [None, "fro", "f", "nuc", 1, -1, 2, -2, np.inf, -np.inf])
@pytest.mark.parametrize("axis", [(0, 1), (1, 0), (-1, -3)])
def test_matrix_norm(ord, axis):
    x = rand(3, 4, 5)
    npord = "fro" if ord == "f" else ord
    ref = np.linalg.norm(x, ord=npord, axis=axis, keepdims=True)
    close(mx.linalg.norm(mx.array(x), ord=ord, axis=list(axis), keepdims=True, stream=C), ref)
    ref = np.linalg.norm(x, ord=npord, axis=axis)
    close(mx.linalg.norm(mx.array(x), ord=ord, axis=list(axis), stream=C), ref)


def test_norm_defaults_and_errors():
    x = rand(2, 3, 4)
    close(mx.linalg.norm(mx.array(x)), np.linalg.norm(x.ravel()))
    assert mx.linalg.norm(mx.array(x), keepdims=True).shape == (1, 1, 1)
    assert mx.linalg.norm(mx.arange(4)).dtype == mx.float32
    assert mx.linalg.norm(mx.array(x, dtype=mx.float16), ord=1, axis=0).dtype == mx.float16
    close(mx.linalg.norm(mx.array(x[0]), ord="fro"), np.linalg.norm(x[0]))
    c = (rand(4) + 1j * rand(4)).astype(np.complex64)
    close(mx.linalg.norm(mx.array(c)), np.linalg.norm(c))
    with pytest.raises(ValueError, match=r"\[linalg::norm\] Received too many axes for norm."):
        mx.linalg.norm(mx.array(x), axis=[0, 1, 2])
    with pytest.raises(ValueError, match=r"Norm 'fro' only supported for matrices, but received 1 axis/axes."):
        mx.linalg.norm(mx.array(x), "fro", axis=0)
    with pytest.raises(ValueError, match=r"Invalid ord value 'bad' for matrix norm."):
        mx.linalg.norm(mx.array(x), "bad", axis=[0, 1])
    with pytest.raises(ValueError, match=r"Invalid ord 3 for matrix norm."):
        mx.linalg.norm(mx.array(x), 3, axis=[0, 1])
    with pytest.raises(TypeError):
        mx.linalg.norm(x)


# ------------------------------------------------------------------ factorizations


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6), (2, 3, 5, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_qr(shape, dtype):
    a = rand(*shape, dtype=dtype)
    q, r = mx.linalg.qr(arr(a), stream=C)
    k = min(shape[-2:])
    assert q.shape == shape[:-1] + (k,) and r.shape == shape[:-2] + (k, shape[-1])
    assert q.dtype == r.dtype == (mx.float64 if dtype == np.float64 else mx.float32)
    close(q @ r, a)
    close(np.swapaxes(np.array(q), -1, -2) @ np.array(q), np.broadcast_to(np.eye(k), shape[:-2] + (k, k)))
    assert np.allclose(np.tril(np.array(r), -1), 0)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 4, 3)])
def test_svd(shape):
    a = rand(*shape)
    u, s, vt = mx.linalg.svd(mx.array(a), stream=C)
    m, n = shape[-2:]
    assert u.shape == shape[:-2] + (m, m) and vt.shape == shape[:-2] + (n, n) and s.shape == shape[:-2] + (min(m, n),)
    close(s, np.linalg.svd(a, compute_uv=False))
    k = min(m, n)
    rec = (np.array(u)[..., :, :k] * np.array(s)[..., None, :]) @ np.array(vt)[..., :k, :]
    close(rec, a)
    s2 = mx.linalg.svd(mx.array(a), compute_uv=False, stream=C)
    assert isinstance(s2, mx.array)
    close(s2, np.array(s))


def test_svd_complex_and_float64():
    a = (rand(3, 4) + 1j * rand(3, 4)).astype(np.complex64)
    u, s, vt = mx.linalg.svd(mx.array(a), stream=C)
    assert s.dtype == mx.float32 and u.dtype == mx.complex64
    close((np.array(u)[:, :3] * np.array(s)) @ np.array(vt)[:3], a)
    d = rand(4, 3, dtype=np.float64)
    s = mx.linalg.svd(mx.array(d, dtype=mx.float64), compute_uv=False, stream=C)
    assert s.dtype == mx.float64
    close(s, np.linalg.svd(d, compute_uv=False), 1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_inv_and_tri_inv(dtype):
    a = spd(3, n=5, dtype=dtype)
    close(mx.linalg.inv(arr(a), stream=C), np.linalg.inv(a))
    for upper in (False, True):
        t = np.triu(a) if upper else np.tril(a)
        r = mx.linalg.tri_inv(arr(a), upper=upper, stream=C)
        close(r, np.linalg.inv(t))
    with pytest.raises(ValueError, match=r"\[linalg::inv\] Inverses are only defined for square matrices."):
        mx.linalg.inv(mx.zeros((2, 3)), stream=C)
    with pytest.raises(ValueError, match=r"Arrays must have type float32 or float64. Received array with type int32."):
        mx.linalg.inv(mx.zeros((2, 2), dtype=mx.int32), stream=C)
    with pytest.raises(ValueError, match=r"Arrays must have >= 2 dimensions. Received array with 1 dimensions."):
        mx.linalg.inv(mx.zeros((2,)), stream=C)
    with pytest.raises(RuntimeError, match=r"\[Inverse::eval_cpu\] LU factorization failed"):
        mx.eval(mx.linalg.inv(mx.zeros((2, 2)), stream=C))


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_and_inv(upper):
    a = spd(2, n=5)
    L = mx.linalg.cholesky(mx.array(a), upper=upper, stream=C)
    Ln = np.array(L)
    rec = np.swapaxes(Ln, -1, -2) @ Ln if upper else Ln @ np.swapaxes(Ln, -1, -2)
    close(rec, a, 1e-3)
    assert np.allclose(np.tril(Ln, -1) if upper else np.triu(Ln, 1), 0)
    close(mx.linalg.cholesky_inv(L, upper=upper, stream=C), np.linalg.inv(a), 1e-3)
    with pytest.raises(ValueError, match=r"Cholesky decomposition is only defined for square matrices."):
        mx.linalg.cholesky(mx.zeros((2, 3)), stream=C)


def test_pinv():
    for shape in [(4, 3), (3, 5), (2, 4, 4)]:
        a = rand(*shape)
        close(mx.linalg.pinv(mx.array(a), stream=C), np.linalg.pinv(a), 1e-3)
    assert mx.linalg.pinv(mx.zeros((0, 3)), stream=C).shape == (3, 0)


@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 3, 3)])
def test_lu(shape):
    a = rand(*shape)
    p, l, u = mx.linalg.lu(mx.array(a), stream=C)
    assert p.dtype == mx.uint32
    pn = np.array(p).astype(np.int64)
    # MLX's convention: L[P] @ U == a
    rec = np.take_along_axis(np.array(l), pn[..., None], -2) @ np.array(u)
    np.testing.assert_allclose(rec, a, rtol=1e-4, atol=1e-4)
    lu, piv = mx.linalg.lu_factor(mx.array(a), stream=C)
    assert lu.shape == a.shape and piv.shape == shape[:-2] + (min(shape[-2:]),)


def test_solve():
    a = spd(2, n=4) + rand(2, 4, 4)
    b = rand(2, 4, 3)
    close(mx.linalg.solve(mx.array(a), mx.array(b), stream=C), np.linalg.solve(a, b), 1e-3)
    v = rand(4)
    close(mx.linalg.solve(mx.array(a[0]), mx.array(v), stream=C), np.linalg.solve(a[0], v), 1e-3)
    t = np.tril(a[0])
    close(mx.linalg.solve_triangular(mx.array(t), mx.array(v), upper=False, stream=C), np.linalg.solve(t, v), 1e-3)
    with pytest.raises(ValueError, match=r"\[linalg::solve\] First input must be a square matrix"):
        mx.linalg.solve(mx.zeros((2, 3)), mx.zeros((2,)), stream=C)
    with pytest.raises(ValueError, match=r"Input arrays must promote to float32 or float64."):
        mx.linalg.solve(mx.zeros((2, 2), dtype=mx.int32), mx.zeros((2,), dtype=mx.int32), stream=C)
    with pytest.raises(TypeError):
        mx.linalg.solve_triangular(mx.array(t), mx.array(v), True, stream=C)  # upper is keyword-only


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_eigh(dtype):
    a = spd(3, n=5, dtype=dtype)
    w, v = mx.linalg.eigh(arr(a), stream=C)
    close(w, np.linalg.eigvalsh(a), 1e-3)
    close(arr(a) @ v, np.array(v) * np.array(w)[..., None, :], 1e-3)
    close(mx.linalg.eigvalsh(arr(a), UPLO="U", stream=C), np.linalg.eigvalsh(a, UPLO="U"), 1e-3)
    h = (rand(4, 4) + 1j * rand(4, 4)).astype(np.complex64)
    h = h + h.conj().T
    w, v = mx.linalg.eigh(mx.array(h), stream=C)
    assert w.dtype == mx.float32 and v.dtype == mx.complex64
    close(w, np.linalg.eigvalsh(h), 1e-3)
    close(mx.array(h) @ v, np.array(v) * np.array(w)[None, :], 1e-3)


def test_eig():
    a = rand(3, 5, 5)
    w, v = mx.linalg.eig(mx.array(a), stream=C)
    assert w.dtype == v.dtype == mx.complex64 and w.shape == (3, 5) and v.shape == (3, 5, 5)
    close(np.array(mx.array(a.astype(np.complex64)) @ v), np.array(v) * np.array(w)[..., None, :], 1e-3)
    close(np.sort_complex(np.array(mx.linalg.eigvals(mx.array(a), stream=C)).ravel()),
          np.sort_complex(np.linalg.eigvals(a).ravel()), 1e-3)
    with pytest.raises(ValueError, match=r"\[linalg::eig\] Only defined for square matrices."):
        mx.linalg.eig(mx.zeros((2, 3)), stream=C)


def test_cross():
    a, b = rand(4, 3), rand(4, 3)
    close(mx.linalg.cross(mx.array(a), mx.array(b)), np.cross(a, b))
    a2 = rand(3, 2)
    # a 2-element vector is one with a zero third component (NumPy 2 refuses 2-element vectors)
    a3 = np.concatenate([a2.T, np.zeros((1, 3), a2.dtype)], axis=0)
    close(mx.linalg.cross(mx.array(a2.T), mx.array(b[:3].T), axis=0), np.cross(a3, b[:3].T, axis=0))
    with pytest.raises(ValueError, match="The specified axis must have size 2 or 3."):
        mx.linalg.cross(mx.zeros((4,)), mx.zeros((4,)))


def test_det_slogdet():
    for n in (2, 3, 5):
        a = rand(2, n, n)
        close(mx.linalg.det(mx.array(a), stream=C), np.linalg.det(a), 1e-3)
        s, l = mx.linalg.slogdet(mx.array(a), stream=C)
        ns, nl = np.linalg.slogdet(a)
        close(s, ns)
        close(l, nl, 1e-3)


def test_batched_broadcast_and_views():
    a = spd(n=3)
    b = mx.broadcast_to(mx.array(a), (4, 3, 3))
    close(mx.linalg.inv(b, stream=C), np.broadcast_to(np.linalg.inv(a), (4, 3, 3)))
    t = mx.array(rand(3, 3)).T  # a transposed view
    close(mx.linalg.inv(t, stream=C), np.linalg.inv(np.array(t)), 1e-3)


def test_empty():
    q, r = mx.linalg.qr(mx.zeros((0, 3)), stream=C)
    assert q.shape == (0, 0) and r.shape == (0, 3)
    assert mx.linalg.inv(mx.zeros((2, 0, 0)), stream=C).shape == (2, 0, 0)
    w, v = mx.linalg.eig(mx.zeros((0, 0)), stream=C)
    mx.eval(w, v)
    assert w.shape == (0,)


def test_transforms():
    a = mx.array(spd(3, n=4))
    f = mx.vmap(lambda x: mx.linalg.inv(x, stream=C))
    close(f(a), np.linalg.inv(np.array(a)), 1e-3)
    g = mx.vmap(lambda x: mx.linalg.cholesky(x, stream=C), in_axes=2, out_axes=0)
    close(g(mx.moveaxis(a, 0, 2)), np.linalg.cholesky(np.array(a)), 1e-3)
    h = mx.vmap(lambda x: mx.linalg.svd(x, compute_uv=False, stream=C))
    close(h(a), np.linalg.svd(np.array(a), compute_uv=False), 1e-3)
    with pytest.raises(ValueError, match=r"\[Primitive::vjp\] Not implemented for Inverse."):
        mx.grad(lambda x: mx.linalg.inv(x, stream=C).sum())(a[0])
    with pytest.raises(ValueError, match=r"\[Primitive::vmap\] Not implemented for QRF."):
        mx.vmap(lambda x: mx.linalg.qr(x, stream=C)[0])(a)


def _expand(mask, bs, Y, X):
    ty, tx = -(-Y // bs), -(-X // bs)
    mask = np.broadcast_to(mask, mask.shape[:-2] + (ty, tx))
    return np.repeat(np.repeat(mask, bs, -2), bs, -1)[..., :Y, :X]


def test_block_masked_mm():
    a, b = rand(2, 70, 40), rand(40, 33)
    mo = rng.standard_normal((2, 3, 1)) > 0
    ml = rng.standard_normal((3, 1)).astype(np.float32)
    mr = rng.standard_normal((1, 1)) > -10
    r = mx.block_masked_mm(mx.array(a), mx.array(b), 32, mx.array(mo), mx.array(ml), mx.array(mr))
    ref = ((_expand(ml, 32, 70, 40) * a) @ (_expand(mr, 32, 40, 33) * b)) * _expand(mo, 32, 70, 33)
    close(r, ref, 1e-3)
    close(mx.block_masked_mm(mx.array(a), mx.array(b)), a @ b, 1e-3)
    # gradients through the composition, also for a float mask
    g = mx.grad(lambda m: mx.block_masked_mm(mx.array(a), mx.array(b), 32, None, m, None).sum())(mx.array(ml))
    assert g.shape == ml.shape
    with pytest.raises(ValueError, match=r"\[block_masked_mm\] Only block_sizes 32, 64 are supported."):
        mx.block_masked_mm(mx.array(a), mx.array(b), 16, mx.array(mo))
