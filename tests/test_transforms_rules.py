"""Transformation rules added for MLX's own tests (issue #13): complex gradients,
masked_scatter, scatter-prod, divmod, tuple subclasses in pytrees, compile under
a transformation and shapeless reshape.

Gradients are checked against central finite differences over float32 and
float64, jvp against vjp, vmap against a Python loop.
"""
import numpy as np
import pytest

import mkpy as mx

RNG = np.random.default_rng(13)


def _fd_grad(f, x, eps):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


DTYPES = [(np.float32, mx.float32, 1e-2, 2e-2), (np.float64, mx.float64, 1e-4, 1e-6)]


def _check(fn, xs, argnum, npdt, mxdt, eps, tol):
    """grad of sum(fn(*xs) * w) against central differences in argument argnum"""
    xs = [np.asarray(x, dtype=npdt) for x in xs]
    w = mx.array(RNG.standard_normal(np.array(fn(*[mx.array(x, dtype=mxdt) for x in xs])).shape).astype(npdt))

    def loss(*a):
        return (fn(*a) * w).sum()

    g = mx.grad(loss, argnums=argnum)(*[mx.array(x, dtype=mxdt) for x in xs])

    def f(a):
        args = [mx.array(x, dtype=mxdt) for x in xs]
        args[argnum] = mx.array(a, dtype=mxdt)
        return loss(*args).item()

    np.testing.assert_allclose(np.array(g), _fd_grad(f, xs[argnum], eps), rtol=tol, atol=tol)


# ------------------------------------------------------------- complex

def _cplx(shape):
    z = RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)
    return z.astype(np.complex64)


@pytest.mark.parametrize("fn,deriv", [
    (mx.exp, np.exp), (mx.log, lambda z: 1 / z), (mx.sin, np.cos), (mx.square, lambda z: 2 * z),
    (mx.tanh, lambda z: 1 - np.tanh(z) ** 2), (mx.log1p, lambda z: 1 / (1 + z)),
])
def test_complex_vjp_is_cotangent_times_conjugate_derivative(fn, deriv):
    z, c = _cplx((3, 4)), _cplx((3, 4))
    _, (g,) = mx.vjp(fn, [mx.array(z)], [mx.array(c)])
    np.testing.assert_allclose(np.array(g), c * np.conj(deriv(z)), rtol=1e-4, atol=1e-5)
    # the jvp carries no conjugate
    _, (t,) = mx.jvp(fn, [mx.array(z)], [mx.array(c)])
    np.testing.assert_allclose(np.array(t), c * deriv(z), rtol=1e-4, atol=1e-5)


def test_complex_binary_and_prod_vjps():
    a, b, c = _cplx((5,)), _cplx((5,)), _cplx((5,))
    _, (ga, gb) = mx.vjp(mx.multiply, [mx.array(a), mx.array(b)], [mx.array(c)])
    np.testing.assert_allclose(np.array(ga), c * np.conj(b), rtol=1e-5)
    np.testing.assert_allclose(np.array(gb), c * np.conj(a), rtol=1e-5)
    _, (gd,) = mx.vjp(lambda x: x / mx.array(b), [mx.array(a)], [mx.array(c)])
    np.testing.assert_allclose(np.array(gd), c / np.conj(b), rtol=1e-5)
    _, (gp,) = mx.vjp(lambda x: x.prod(axis=0), [mx.array(np.stack([a, b]))], [mx.array(c)])
    np.testing.assert_allclose(np.array(gp), np.stack([c * np.conj(b), c * np.conj(a)]), rtol=1e-5)


def test_complex_abs_jvp_is_real_and_vjp_is_the_phase():
    z, t = _cplx((4, 3)), _cplx((4, 3))
    _, (j,) = mx.jvp(mx.abs, [mx.array(z)], [mx.array(t)])
    assert j.dtype == mx.float32
    np.testing.assert_allclose(np.array(j), np.real(np.conj(z) * t) / np.abs(z), rtol=1e-5, atol=1e-6)
    c = RNG.standard_normal((4, 3)).astype(np.float32)
    _, (g,) = mx.vjp(mx.abs, [mx.array(z)], [mx.array(c)])
    np.testing.assert_allclose(np.array(g), c * z / np.abs(z), rtol=1e-5, atol=1e-6)
    # its real and imaginary parts are d|z|/dRe z and d|z|/dIm z
    re, im = np.real(z).astype(np.float64), np.imag(z).astype(np.float64)
    fd_re = _fd_grad(lambda r: (np.abs(r + 1j * im) * c).sum(), re, 1e-6)
    np.testing.assert_allclose(np.real(np.array(g)), fd_re, rtol=1e-3, atol=1e-4)


# ------------------------------------------------------------- masked_scatter

MASK = np.array([[True, False, True], [False, True, True]])


def _masked_set(dst, src):
    d = dst * 1
    d[mx.array(MASK)] = src
    return d


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("npdt,mxdt,eps,tol", DTYPES)
@pytest.mark.parametrize("argnum", [0, 1])
def test_masked_scatter_grad_matches_finite_differences(npdt, mxdt, eps, tol, argnum):
    dst = RNG.standard_normal((2, 3, 2))
    src = RNG.standard_normal((5, 2))  # one row more than the mask needs: its gradient is zero
    _check(_masked_set, [dst, src], argnum, npdt, mxdt, eps, tol)


def test_masked_scatter_jvp_agrees_with_vjp():
    dst = mx.array(RNG.standard_normal((2, 3)).astype(np.float32))
    src = mx.array(RNG.standard_normal((4,)).astype(np.float32))
    td = mx.array(RNG.standard_normal((2, 3)).astype(np.float32))
    ts = mx.array(RNG.standard_normal((4,)).astype(np.float32))
    c = mx.array(RNG.standard_normal((2, 3)).astype(np.float32))
    _, (j,) = mx.jvp(_masked_set, [dst, src], [td, ts])
    _, (gd, gs) = mx.vjp(_masked_set, [dst, src], [c])
    lhs = (j * c).sum().item()
    rhs = (gd * td).sum().item() + (gs * ts).sum().item()
    assert lhs == pytest.approx(rhs, rel=1e-5)
    # a constant destination: only the source's tangent shows
    _, (j,) = mx.jvp(lambda s: _masked_set(mx.zeros((2, 3)), s), [src], [mx.ones(4)])
    assert j.tolist() == MASK.astype(np.float32).tolist()


@pytest.mark.parametrize("axes", [(0, 0, 0), (0, 0, None), (None, 0, 0), (0, None, 0), (1, 0, 0)])
def test_masked_scatter_vmap_matches_a_loop(axes):
    def f(x, m, s):
        x = x * 1
        x[m] = s
        return x

    B = 3
    xs = RNG.standard_normal((B, 4)).astype(np.float32)
    ms = RNG.random((B, 4)) < 0.5
    ms[:, 0] = True  # every row takes one value at least
    ss = RNG.standard_normal((B, 4)).astype(np.float32)
    args = []
    for a, ax in zip((xs, ms, ss), axes):
        a = a if ax is not None else a[0]
        args.append(mx.array(np.moveaxis(a, 0, ax) if ax else a))
    out = mx.vmap(f, in_axes=axes)(*args)
    for b in range(B):
        row = [a[b] if ax is not None else a[0] for a, ax in zip((xs, ms, ss), axes)]
        want = f(mx.array(row[0]), mx.array(row[1]), mx.array(row[2]))
        np.testing.assert_array_equal(np.array(out[b]), np.array(want))


# ------------------------------------------------------------- scatter prod and divmod

@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("npdt,mxdt,eps,tol", DTYPES)
@pytest.mark.parametrize("argnum", [0, 1])
def test_scatter_prod_grad_matches_finite_differences(npdt, mxdt, eps, tol, argnum):
    x = RNG.uniform(0.5, 1.5, (5, 3))
    u = RNG.uniform(0.5, 1.5, (2, 2, 3))
    idx = mx.array([1, 3])
    _check(lambda a, b: a.at[idx].multiply(b[0] * b[1]), [x, u], argnum, npdt, mxdt, eps, tol)


def test_scatter_prod_source_gradient_is_exact_with_zeros():
    x = mx.array([1.0, 0.0, 3.0, 4.0])
    u = mx.array([0.0, 3.0])
    c = mx.array([4.0, 5.0, 6.0, 7.0])
    _, (gx, gu) = mx.vjp(lambda a, b: a.at[1:3].multiply(b), [x, u], [c])
    assert gx.tolist() == [4.0, 0.0, 18.0, 7.0]
    assert gu.tolist()[1] == 18.0  # cot * x at that slot


def test_divmod_has_zero_derivatives_as_mlx():
    def f(x):
        q, r = mx.divmod(x, mx.array(3.0))
        return q, -r

    _, (dq, dr) = mx.jvp(f, [mx.array(7.0)], [mx.array(1.0)])
    assert dq.item() == 0.0 and dr.item() == 0.0
    assert mx.grad(lambda x: mx.divmod(x, mx.array(3.0))[1])(mx.array(7.0)).item() == 0.0
    # remainder itself keeps its derivative
    assert mx.grad(lambda x: mx.remainder(x, mx.array(3.0)))(mx.array(7.0)).item() == 1.0


# ------------------------------------------------------------- pytrees, compile

class _Vec(tuple):
    pass


def test_tuple_subclasses_keep_their_type():
    from collections import namedtuple
    Pair = namedtuple("Pair", "a b")
    for make in (tuple, _Vec, lambda it: Pair(*it)):
        x = make([mx.array([1.0, 2.0]), mx.array([3.0, 4.0])])
        g = mx.grad(lambda t: (t[0] * t[1]).sum())(x)
        assert type(g) is type(x)
        assert g[0].tolist() == [3.0, 4.0] and g[1].tolist() == [1.0, 2.0]
        v = mx.vmap(lambda t: make([t[0] + 1, t[1] * 2]))(x)
        assert type(v) is type(x) and v[1].tolist() == [6.0, 8.0]
        c = mx.compile(lambda t: make([t[0] + 1, t[1] * 2]))(x)
        assert type(c) is type(x) and c[0].tolist() == [2.0, 3.0]


def test_compile_under_a_transformation_calls_the_function():
    x = mx.array([[1.0, 2.0], [-2.0, 3.0]])

    def outer(x):
        x = mx.abs(x)

        @mx.compile
        def inner(z):
            return -mx.exp(x)  # reads the enclosing x, not z

        return inner(x)

    out = mx.vmap(outer)(x)
    np.testing.assert_allclose(np.array(out), -np.exp(np.abs(np.array(x))), rtol=1e-6)


def test_shapeless_reshape_infers_its_free_dim_again():
    f = mx.compile(lambda x: x.reshape(x.shape[0] * x.shape[1], -1), shapeless=True)
    assert f(mx.zeros((2, 3, 4))).shape == (6, 4)
    assert f(mx.zeros((2, 3, 8))).shape == (6, 8)
    with pytest.raises(ValueError, match=r"\[reshape\]"):
        f(mx.zeros((5, 5, 5)))


def test_shapeless_mean_counts_the_new_shape():
    f = mx.compile(lambda x: mx.mean(x, axis=-1, keepdims=True), shapeless=True)
    for n in (2, 4, 7):
        x = np.arange(3 * n, dtype=np.float32).reshape(3, n)
        np.testing.assert_allclose(np.array(f(mx.array(x))), x.mean(axis=-1, keepdims=True), rtol=1e-6)
    # the count carries no gradient and batches as a constant
    g = mx.grad(lambda x: mx.mean(x * x))(mx.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(np.array(g), [2 / 3, 4 / 3, 2.0], rtol=1e-6)
    v = mx.vmap(lambda x: mx.mean(x, axis=0), in_axes=1)(mx.arange(6.0).reshape(2, 3))
    assert v.tolist() == [1.5, 2.5, 3.5]


def test_shapeless_gather_keeps_whole_axes_whole():
    b = mx.array(RNG.standard_normal((4, 16, 8)).astype(np.float32))
    idx = mx.array([0, 1, 2, 3])

    def fn(x):
        return mx.gather_mm(x, b, lhs_indices=idx, rhs_indices=idx)

    c = mx.compile(fn, shapeless=True)
    for m in (4, 8):
        x = mx.array(RNG.standard_normal((4, m, 16)).astype(np.float32))
        np.testing.assert_allclose(np.array(c(x)), np.array(fn(x)), rtol=1e-5, atol=1e-5)
    t = mx.compile(lambda x: mx.take(x, mx.array([0, 2]), axis=0), shapeless=True)
    assert t(mx.ones((3, 2))).shape == (2, 2) and t(mx.ones((4, 5))).shape == (2, 5)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("npdt,mxdt,eps,tol", DTYPES)
@pytest.mark.parametrize("reverse,inclusive", [(False, True), (True, True), (False, False), (True, False)])
def test_logcumsumexp_grad_matches_finite_differences(npdt, mxdt, eps, tol, reverse, inclusive):
    # mkpy's logcumsumexp computes in float32 for float64 too (MLX's CPU kernel): float32 steps
    eps, tol = 1e-2, 2e-2
    x = RNG.standard_normal((3, 5)) * 2
    # an exclusive scan's empty window is -inf: left out of the weighted sum
    keep = slice(None) if inclusive else (slice(None, -1) if reverse else slice(1, None))
    _check(lambda a: mx.logcumsumexp(a, axis=1, reverse=reverse, inclusive=inclusive)[:, keep], [x], 0, npdt, mxdt,
           eps, tol)


def test_logcumsumexp_grad_stays_finite_for_large_inputs():
    x = mx.array([0.0, 100.0, -50.0, 200.0])
    g = mx.grad(lambda a: mx.logcumsumexp(a).sum())(x)
    assert np.isfinite(np.array(g)).all()
    # jvp (derived from the vjp) agrees with it
    t = mx.array([1.0, 2.0, 0.5, 3.0])
    _, (j,) = mx.jvp(lambda a: mx.logcumsumexp(a), [x], [t])
    _, (v,) = mx.vjp(lambda a: mx.logcumsumexp(a), [x], [mx.ones(4)])
    assert mx.sum(j).item() == pytest.approx(mx.sum(v * t).item(), rel=1e-5, abs=1e-3)
    np.testing.assert_allclose(np.array(j), [1.0, 2.0, 2.0, 3.0], rtol=1e-5)


def _rope(traditional, freqs=None):
    if freqs is None:
        return lambda a: mx.fast.rope(a, 4, traditional=traditional, base=100.0, scale=0.7, offset=2)
    return lambda a: mx.fast.rope(a, 4, traditional=traditional, base=None, scale=1.0, offset=1, freqs=freqs)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("npdt,mxdt,eps,tol", DTYPES)
@pytest.mark.parametrize("traditional", [False, True])
def test_rope_grad_matches_finite_differences(npdt, mxdt, eps, tol, traditional):
    x = RNG.standard_normal((1, 2, 3, 6))  # 2 features past dims are copied
    _check(_rope(traditional), [x], 0, npdt, mxdt, eps, tol)
    _check(_rope(traditional, mx.array([1.0, 3.0])), [x], 0, npdt, mxdt, eps, tol)


def test_rope_jvp_vjp_and_vmap():
    f = _rope(False)
    x = mx.array(RNG.standard_normal((2, 3, 4)).astype(np.float32))
    t = mx.array(RNG.standard_normal((2, 3, 4)).astype(np.float32))
    c = mx.array(RNG.standard_normal((2, 3, 4)).astype(np.float32))
    _, (j,) = mx.jvp(f, [x], [t])
    _, (v,) = mx.vjp(f, [x], [c])
    assert (j * c).sum().item() == pytest.approx((v * t).sum().item(), rel=1e-5)
    xs = mx.array(RNG.standard_normal((3, 2, 3, 4)).astype(np.float32))
    for ax in (0, 2):
        out = mx.vmap(f, in_axes=ax)(mx.moveaxis(xs, 0, ax))
        for b in range(3):
            np.testing.assert_allclose(np.array(out[b]), np.array(f(xs[b])), rtol=1e-6, atol=1e-6)
