"""mx.fft against numpy.fft: transforms, sizes, axes, norms, dtypes, errors, gradients."""
import numpy as np
import pytest

import mkpy as mx

RNG = np.random.default_rng(0)


def _c(shape):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(np.complex64)


def _r(shape):
    return RNG.standard_normal(shape).astype(np.float32)


def close(a, b, atol=1e-4, rtol=1e-4):
    a = np.array(a)
    assert a.shape == np.shape(b)
    np.testing.assert_allclose(a, b, atol=atol, rtol=rtol)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12, 17, 64, 97, 100, 128])
def test_fft_ifft_sizes(n):
    x = _c((3, n))
    close(mx.fft.fft(mx.array(x)), np.fft.fft(x), atol=1e-4 * n)
    close(mx.fft.ifft(mx.array(x)), np.fft.ifft(x), atol=1e-5 * n)
    r = _r((2, n))
    close(mx.fft.rfft(mx.array(r)), np.fft.rfft(r), atol=1e-4 * n)
    if n > 1:
        close(mx.fft.irfft(mx.array(x)), np.fft.irfft(x), atol=1e-5 * n)


def test_n_and_axis():
    x = _c((4, 6, 5))
    for n in (3, 6, 9):
        for axis in (0, 1, -1):
            close(mx.fft.fft(mx.array(x), n=n, axis=axis), np.fft.fft(x, n=n, axis=axis))
            close(mx.fft.ifft(mx.array(x), n, axis), np.fft.ifft(x, n, axis))
            r = x.real.copy()
            close(mx.fft.rfft(mx.array(r), n=n, axis=axis), np.fft.rfft(r, n=n, axis=axis))
            close(mx.fft.irfft(mx.array(x), n=n, axis=axis), np.fft.irfft(x, n=n, axis=axis))


def test_nd():
    x = _c((3, 4, 5, 6))
    r = x.real.copy()
    a, ar = mx.array(x), mx.array(r)
    close(mx.fft.fft2(a), np.fft.fft2(x), atol=1e-3)
    close(mx.fft.ifft2(a), np.fft.ifft2(x))
    close(mx.fft.fftn(a), np.fft.fftn(x), atol=1e-2)
    close(mx.fft.ifftn(a), np.fft.ifftn(x))
    close(mx.fft.rfft2(ar), np.fft.rfft2(r), atol=1e-3)
    close(mx.fft.irfft2(a), np.fft.irfft2(x))
    close(mx.fft.rfftn(ar), np.fft.rfftn(r), atol=1e-2)
    close(mx.fft.irfftn(a), np.fft.irfftn(x))
    for s, axes in (([3, 8], [0, 2]), ([7, 2, 4], [-1, 0, 1]), ([5], [1])):
        close(mx.fft.fftn(a, s, axes), np.fft.fftn(x, s, axes), atol=1e-3)
        close(mx.fft.ifftn(a, s=s, axes=axes), np.fft.ifftn(x, s=s, axes=axes))
        close(mx.fft.rfftn(ar, s, axes), np.fft.rfftn(r, s, axes), atol=1e-3)
        close(mx.fft.irfftn(a, s, axes), np.fft.irfftn(x, s, axes))
    close(mx.fft.fft2(a, axes=[0, 3]), np.fft.fft2(x, axes=[0, 3]), atol=1e-3)
    close(mx.fft.irfft2(a, s=[4, 6], axes=[1, 2]), np.fft.irfft2(x, s=[4, 6], axes=[1, 2]))


def test_norms():
    x = _c((2, 8, 6))
    a = mx.array(x)
    for norm in ("backward", "ortho", "forward"):
        close(mx.fft.fft(a, norm=norm), np.fft.fft(x, norm=norm))
        close(mx.fft.ifft(a, norm=norm), np.fft.ifft(x, norm=norm))
        close(mx.fft.fftn(a, norm=norm), np.fft.fftn(x, norm=norm), atol=1e-3)
        close(mx.fft.irfft2(a, norm=norm), np.fft.irfft2(x, norm=norm), atol=1e-3)
        close(mx.fft.rfft(mx.array(x.real), norm=norm), np.fft.rfft(x.real, norm=norm))


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_dtypes_and_layouts():
    # real and integer inputs are promoted; results are complex64 (irfft: float32)
    assert mx.fft.fft(mx.arange(8)).dtype == mx.complex64
    assert mx.fft.rfft(mx.ones(8, dtype=mx.float16)).dtype == mx.complex64
    assert mx.fft.irfft(mx.ones(5, dtype=mx.complex64)).dtype == mx.float32
    # float64 is computed in single precision, as MLX's complex64 FFT
    d = np.linspace(0, 1, 16)
    out = mx.fft.fft(mx.array(d, dtype=mx.float64))
    assert out.dtype == mx.complex64
    close(out, np.fft.fft(d))
    # strided, transposed and broadcast inputs
    x = _c((6, 10))
    a = mx.array(x)
    close(mx.fft.fft(a[:, ::2]), np.fft.fft(x[:, ::2]))
    close(mx.fft.fft(a.T), np.fft.fft(x.T))
    close(mx.fft.fft(mx.broadcast_to(a[0], (3, 10))), np.fft.fft(np.broadcast_to(x[0], (3, 10))))
    close(mx.fft.rfft(mx.array(x.real)[::-1]), np.fft.rfft(x.real[::-1]))


def test_large_prime_and_long():
    # 7883 is prime (Bluestein), 1259 * 11 a large prime factor, 3**8 and 4096 * 3 small radices
    for n in (7883, 1259 * 11, 3**8, 4096 * 3, 67, 127 * 2):
        x = (RNG.random((1, n)) + 1j * RNG.random((1, n))).astype(np.complex64)
        close(mx.fft.fft(mx.array(x)), np.fft.fft(x), atol=1e-3, rtol=1e-4)
        close(mx.fft.ifft(mx.array(x)), np.fft.ifft(x), atol=1e-6, rtol=1e-4)
        close(mx.fft.irfft(mx.array(x)), np.fft.irfft(x), atol=1e-6, rtol=1e-3)


def test_long_four_step():
    # one long line: the four-step path (2**16 = 256 * 256, 3 * 2**17 = 512 * 768)
    for n in (2**16, 3 * 2**17):
        x = (RNG.random((1, n)) + 1j * RNG.random((1, n))).astype(np.complex64)
        close(mx.fft.fft(mx.array(x)), np.fft.fft(x), atol=1e-2, rtol=1e-3)
        close(mx.fft.ifft(mx.array(x)), np.fft.ifft(x), atol=1e-6, rtol=1e-3)


def test_shift_and_freq():
    x = np.arange(5 * 6).reshape(5, 6).astype(np.float32)
    a = mx.array(x)
    close(mx.fft.fftshift(a), np.fft.fftshift(x))
    close(mx.fft.ifftshift(a), np.fft.ifftshift(x))
    close(mx.fft.fftshift(a, axes=[1]), np.fft.fftshift(x, axes=[1]))
    close(mx.fft.ifftshift(a, axes=0), np.fft.ifftshift(x, axes=0))
    close(mx.fft.ifftshift(a, axes=[-1, 0]), np.fft.ifftshift(x, axes=[-1, 0]))
    for n in (1, 4, 7):
        for d in (1.0, 0.3):
            close(mx.fft.fftfreq(n, d), np.fft.fftfreq(n, d))
            close(mx.fft.rfftfreq(n, d=d), np.fft.rfftfreq(n, d))
    assert mx.fft.fftfreq(4).dtype == mx.float32


def test_errors():
    with pytest.raises(ValueError, match=r"\[fftn\] Requires array with at least one dimension."):
        mx.fft.fft(mx.array(3.0))
    with pytest.raises(ValueError, match=r"\[fftn\] Requires array with at least one dimension."):
        mx.fft.irfftn(mx.array(3.0))
    a = mx.ones((4, 4))
    with pytest.raises(ValueError, match=r"\[fftn\] Invalid axis received for array with 2 dimensions."):
        mx.fft.fft(a, axis=2)
    with pytest.raises(ValueError, match=r"\[fftn\] Duplicated axis received"):
        mx.fft.fftn(a, axes=[0, 0])
    with pytest.raises(ValueError, match=r"\[fftn\] Invalid FFT output size requested"):
        mx.fft.fft(a, n=0)
    with pytest.raises(ValueError, match=r"\[fftn\] Shape and axes have different sizes."):
        mx.fft.fftn(a, s=[4], axes=[0, 1])
    with pytest.raises(ValueError, match=r"\[fft2\] `axes` should not be `None` if `s` is not `None`."):
        mx.fft.fft2(a, s=[2, 2], axes=None)
    with pytest.raises(ValueError, match=r"\[fft\] Invalid norm."):
        mx.fft.fft(a, norm="invalid")
    with pytest.raises(ValueError, match=r"\[fftshift\] Invalid axis 2 for array with 2 dimensions."):
        mx.fft.fftshift(a, axes=[2])
    with pytest.raises(ValueError, match=r"\[ifftshift\] Invalid axis -3"):
        mx.fft.ifftshift(a, axes=[-3])
    with pytest.raises(ValueError, match=r"\[fftfreq\] `n` must be greater than 0."):
        mx.fft.fftfreq(0)
    with pytest.raises(ValueError, match=r"\[rfftfreq\] `d` must be non-zero."):
        mx.fft.rfftfreq(4, d=0.0)
    # a 0-d array is returned by fftshift unchanged
    assert mx.fft.fftshift(mx.array(2.0)).item() == 2.0


def _fd_grad(f, x, eps=1e-3):
    """Central differences of a real scalar function of a float64 numpy array."""
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


def test_grads_real_finite_differences():
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    wi = RNG.standard_normal((3, 6)).astype(np.float32)

    def f_rfft(v):
        y = mx.fft.rfft(v)
        return (mx.real(y) * mx.array(w)).sum() + (mx.imag(y) * mx.array(w[:, ::-1].copy())).sum()

    def f_irfft(v):
        z = mx.fft.rfft(v)  # a complex input for irfft with a real path
        return (mx.fft.irfft(z * 1.5, n=6) * mx.array(wi)).sum()

    def f_fft(v):
        y = mx.fft.fft2(v.astype(mx.complex64))
        return (mx.real(y) * mx.array(wi)).sum() + (mx.imag(y) * mx.array(wi[::-1].copy())).sum()

    for f in (f_rfft, f_irfft, f_fft):
        g = np.array(mx.grad(f)(mx.array(x)))
        fd = _fd_grad(lambda v: f(mx.array(v.astype(np.float32))).item(), x.astype(np.float64))
        np.testing.assert_allclose(g, fd, atol=2e-2, rtol=2e-2)


def test_grads_match_mlx_rules():
    # d/dx sum(real(fft(x)) * w) for complex x: the rule gives ifft(w) * n
    x = _c((8,))
    w = _r((8,))
    g = mx.grad(lambda v: (mx.real(mx.fft.fft(v)) * mx.array(w)).sum())(mx.array(x))
    close(g, np.fft.ifft(w) * 8, atol=1e-4)
    g = mx.grad(lambda v: (mx.real(mx.fft.ifft(v)) * mx.array(w)).sum())(mx.array(x))
    close(g, np.fft.fft(w) / 8, atol=1e-4)


def test_jvp_and_vmap():
    x = _c((4, 8))
    t = _c((4, 8))
    _, (jt,) = mx.jvp(lambda v: mx.fft.fft(v), [mx.array(x)], [mx.array(t)])
    close(jt, np.fft.fft(t), atol=1e-4)
    r = _r((4, 8))
    tr = _r((4, 8))
    _, (jt,) = mx.jvp(lambda v: mx.fft.rfft(v), [mx.array(r)], [mx.array(tr)])
    close(jt, np.fft.rfft(tr), atol=1e-4)
    out = mx.vmap(lambda v: mx.fft.fft(v), in_axes=1)(mx.array(x))
    close(out, np.fft.fft(x.T), atol=1e-4)
    out = mx.vmap(lambda v: mx.fft.irfft(v, n=7))(mx.array(x))
    close(out, np.fft.irfft(x, n=7), atol=1e-4)


def test_threads():
    import threading

    x = _c((16, 256))
    want = np.fft.fft(x)
    errs = []

    def run():
        try:
            for _ in range(5):
                close(mx.fft.fft(mx.array(x)), want, atol=1e-3)
        except Exception as e:  # pragma: no cover
            errs.append(e)

    ts = [threading.Thread(target=run) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errs


def test_grads_complex_convention():
    # real losses of complex inputs: the gradient is dL/dRe + i dL/dIm (torch's and MLX's convention)
    x = _c((2, 7))
    g = mx.grad(lambda v: (mx.abs(mx.fft.fftn(v)) ** 2).sum())(mx.array(x))
    close(g, 2 * 14 * x, atol=1e-4)
    g = mx.grad(lambda v: (mx.abs(mx.fft.ifftn(v)) ** 2).sum())(mx.array(x))
    close(g, 2 / 14 * x, atol=1e-6)
    z = np.fft.rfftn(_r((4, 4))).astype(np.complex64)

    def L(v):
        return float((np.fft.irfftn(v) ** 2).sum())

    eps = 1e-3
    fd = np.zeros_like(z)
    for i in np.ndindex(z.shape):
        for unit in (1, 1j):
            zp, zm = z.copy(), z.copy()
            zp[i] += unit * eps
            zm[i] -= unit * eps
            fd[i] += unit * (L(zp) - L(zm)) / (2 * eps)
    g = mx.grad(lambda v: (mx.fft.irfftn(v) ** 2).sum())(mx.array(z))
    close(g, fd, atol=1e-3, rtol=1e-3)


def test_gpu_stream_keeps_metals_plan_limit():
    # Metal's FFT plan has no four-step decomposition beyond 4096 * 4096 points, and lengths that
    # are not powers of two above 4096 run Bluestein on the next power of two >= 2n - 1: MLX's GPU
    # stream raises at eval for those (test_fft_too_large); its CPU stream computes them.
    # mkpy's GPU stream keeps the refusal on every back-end.
    def zeros(n, dtype=mx.float32):  # broadcast: no memory to fill
        return mx.broadcast_to(mx.zeros(1, dtype), (n,))

    for make in (lambda: mx.fft.fft(zeros(2**25, mx.complex64), stream=mx.gpu),
                 lambda: mx.fft.rfft(zeros(2**25), stream=mx.gpu),
                 lambda: mx.fft.fft(zeros(2**23 + 1, mx.complex64), stream=mx.gpu),
                 lambda: mx.fft.irfft(zeros(2**24 + 1, mx.complex64), stream=mx.gpu),
                 lambda: mx.fft.fft2(zeros(2**25, mx.complex64).reshape(1, -1), stream=mx.gpu)):
        y = make()  # lazily made: the refusal is the evaluation's
        with pytest.raises(RuntimeError, match=r"\[FFT\] GPU FFT is not supported for size 33554432, the "
                                               r"largest supported size is 16777216"):
            mx.eval(y)
    # lengths that plan: four steps (2^13), Bluestein (5000 = 2^3 5^4 is not a power of two),
    # a batch of them; the CPU stream refuses nothing (its evaluation of 2^25 points takes
    # seconds on this machine: MLX's test_fft_too_large, run on the GPU stream, is the check of
    # the stream's part)
    for n in (2**13, 5000):
        y = mx.fft.fft(mx.ones((2, n), mx.complex64), stream=mx.gpu)
        assert y[:, 0].tolist() == [n, n] and abs(y[1, 1].item()) < 1e-2
