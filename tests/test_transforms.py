"""Function transformations: grad, value_and_grad, vjp, jvp, vmap, stop_gradient.

Gradients are checked against central finite differences (in float64) and
against analytic results; jvp against vjp; vmap against a Python loop.
"""
import numpy as np
import pytest

import mkpy as mx

RNG = np.random.default_rng(0)


def _fd_grad(f, x, eps=1e-3):
    """central differences of the scalar function f (numpy in, float out) at x (a step of 1e-3:
    some of mkpy's float64 functions have float32 precision, as MLX's CPU ones)"""
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        xp = x.copy()
        xm = x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


def _arr(x):
    x = np.asarray(x)
    return mx.array(x, dtype=mx.float64 if x.dtype == np.float64 else mx.float32)


def _check_grad(fn, x, dtype=np.float64, rtol=1e-3, atol=5e-4):
    x = np.asarray(x, dtype=dtype)
    # a fixed random weighting makes the scalar depend on every output element
    w = None

    def loss(a):
        nonlocal w
        y = fn(a)
        if w is None:
            w = _arr(RNG.standard_normal(y.shape).astype(dtype))
        return (y * w).sum()

    loss(_arr(x))  # fixes w
    g = mx.grad(loss)(_arr(x))
    fd = _fd_grad(lambda a: loss(_arr(a)).item(), x)
    np.testing.assert_allclose(np.array(g), fd, rtol=rtol, atol=atol)


POS = RNG.uniform(0.5, 1.5, size=(3, 4))
ANY = RNG.standard_normal((3, 4))
UNIT = RNG.uniform(-0.8, 0.8, size=(3, 4))

UNARY = [
    ("abs", mx.abs, ANY), ("negative", mx.negative, ANY), ("square", mx.square, ANY), ("sqrt", mx.sqrt, POS),
    ("rsqrt", mx.rsqrt, POS), ("reciprocal", mx.reciprocal, POS), ("exp", mx.exp, ANY), ("expm1", mx.expm1, ANY),
    ("log", mx.log, POS), ("log1p", mx.log1p, POS), ("log2", mx.log2, POS), ("log10", mx.log10, POS),
    ("sin", mx.sin, ANY), ("cos", mx.cos, ANY), ("tan", mx.tan, UNIT), ("arcsin", mx.arcsin, UNIT),
    ("arccos", mx.arccos, UNIT), ("arctan", mx.arctan, ANY), ("sinh", mx.sinh, ANY), ("cosh", mx.cosh, ANY),
    ("tanh", mx.tanh, ANY), ("arcsinh", mx.arcsinh, ANY), ("arccosh", mx.arccosh, POS + 1.0),
    ("arctanh", mx.arctanh, UNIT), ("sigmoid", mx.sigmoid, ANY), ("erf", mx.erf, ANY), ("erfinv", mx.erfinv, UNIT),
    ("degrees", mx.degrees, ANY), ("radians", mx.radians, ANY),
]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("name,fn,x", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unary_grad_matches_finite_differences(name, fn, x, dtype):
    if dtype == np.float32:
        # float32: compare against the float64 gradient instead of differences
        g32 = mx.grad(lambda a: fn(a).sum())(mx.array(x.astype(np.float32)))
        g64 = mx.grad(lambda a: fn(a).sum())(_arr(x))
        np.testing.assert_allclose(np.array(g32), np.array(g64), rtol=2e-3, atol=1e-4)
    else:
        _check_grad(fn, x)


B1 = RNG.uniform(0.5, 1.5, size=(3, 4))
B2 = RNG.uniform(0.5, 1.5, size=(4,))

BINARY = [
    ("add", mx.add), ("subtract", mx.subtract), ("multiply", mx.multiply), ("divide", mx.divide),
    ("power", mx.power), ("arctan2", mx.arctan2), ("maximum", mx.maximum), ("minimum", mx.minimum),
    ("logaddexp", mx.logaddexp), ("remainder", mx.remainder),
]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("name,fn", BINARY, ids=[b[0] for b in BINARY])
def test_binary_grad_both_arguments_with_broadcasting(name, fn):
    _check_grad(lambda a: fn(a, _arr(B2)), B1)
    _check_grad(lambda b: fn(_arr(B1), b), B2)


SHAPE_OPS = [
    ("reshape", lambda a: a.reshape(4, 3)),
    ("transpose", lambda a: a.T),
    ("slice", lambda a: a[1:, ::2]),
    ("negative_step", lambda a: a[::-1, 1:3]),
    ("int_index", lambda a: a[1]),
    ("broadcast", lambda a: mx.broadcast_to(a[:, :1], (2, 3, 4))),
    ("expand_squeeze", lambda a: mx.squeeze(mx.expand_dims(a, 0), 0) * 2),
    ("concatenate", lambda a: mx.concatenate([a, a * 2], axis=1)),
    ("stack", lambda a: mx.stack([a, a * a])),
    ("pad", lambda a: mx.pad(a, [(1, 0), (0, 2)])),
    ("gather", lambda a: a[mx.array([0, 2, 0])]),
    ("take", lambda a: mx.take(a, mx.array([3, 1, 1]), axis=1)),
    ("take_along_axis", lambda a: mx.take_along_axis(a, mx.array([[0], [3], [1]]), axis=1)),
    ("split", lambda a: mx.split(a, 2, axis=1)[1]),
    ("moveaxis", lambda a: mx.moveaxis(mx.expand_dims(a, 2), 2, 0)),
    ("diagonal", lambda a: mx.diagonal(a, 1)),
    ("where", lambda a: mx.where(a > 0, a * 3, a * a)),
    ("sort", lambda a: mx.sort(a, axis=1)),
    ("topk", lambda a: mx.topk(a, 2, axis=1)),
    ("cumsum", lambda a: mx.cumsum(a, axis=1)),
    ("cumsum_reverse", lambda a: mx.cumsum(a, axis=0, reverse=True)),
    ("cummax", lambda a: mx.cummax(a, axis=1)),
    ("cummin_reverse", lambda a: mx.cummin(a, axis=0, reverse=True)),
    ("cummax_exclusive", lambda a: mx.cummax(a, axis=1, inclusive=False)[:, 1:]),
    ("cummin_exclusive_reverse", lambda a: mx.cummin(a, axis=1, reverse=True, inclusive=False)[:, :-1]),
]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("name,fn", SHAPE_OPS, ids=[s[0] for s in SHAPE_OPS])
def test_shape_and_index_ops_grad(name, fn):
    _check_grad(fn, ANY)


REDUCE_OPS = [
    ("sum", lambda a: a.sum(axis=1)), ("sum_all", lambda a: a.sum()), ("mean", lambda a: a.mean(axis=0)),
    ("max", lambda a: a.max(axis=1)), ("min", lambda a: a.min()), ("prod", lambda a: a.prod(axis=1)),
    ("logsumexp", lambda a: mx.logsumexp(a, axis=1)), ("logsumexp_axis0", lambda a: mx.logsumexp(a, axis=0)),
    ("softmax", lambda a: mx.softmax(a, axis=-1)), ("softmax_axis0", lambda a: mx.softmax(a, axis=0)),
    ("var", lambda a: mx.var(a, axis=1)), ("std", lambda a: mx.std(a)),
    ("matmul", lambda a: a @ _arr(B1.T)), ("matmul_left", lambda a: _arr(B1.T) @ a),
    ("addmm", lambda a: mx.addmm(mx.ones((3, 3), dtype=a.dtype), a, _arr(B1.T), alpha=2.0, beta=0.5)),
    ("cumprod", lambda a: mx.cumprod(a, axis=1)),
]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("name,fn", REDUCE_OPS, ids=[r[0] for r in REDUCE_OPS])
def test_reductions_and_matmul_grad(name, fn):
    _check_grad(fn, POS if name in ("prod", "cumprod") else ANY)


def test_prod_grad_with_a_zero_is_exact():
    g = mx.grad(lambda a: a.prod())(mx.array([2.0, 0.0, 3.0]))
    assert g.tolist() == [0.0, 6.0, 0.0]


def test_cumulative_gradients_with_zeros_and_ties():
    f = lambda y: mx.cumprod(y).sum()  # noqa: E731
    assert mx.grad(f)(mx.array([2.0, 1.0, 2.0, 2.0, 3.0])).tolist() == [20.0, 38.0, 18.0, 16.0, 8.0]
    assert mx.grad(f)(mx.array([2.0, 0.0, 2.0, 2.0, 3.0])).tolist() == [1.0, 38.0, 0.0, 0.0, 0.0]
    w = mx.array([1.0, 2.0, 3.0, 4.0])
    # a tie goes to the latest element in scan order
    assert mx.grad(lambda y: (mx.cummax(y) * w).sum())(mx.array([1.0, 3.0, 2.0, 3.0])).tolist() == [1, 5, 0, 4]
    g = mx.grad(lambda y: (mx.cummin(y, reverse=True) * w).sum())(mx.array([1.0, 3.0, 2.0, 3.0]))
    assert g.tolist() == [1, 0, 5, 4]


def test_max_ties_share_the_gradient():
    g = mx.grad(lambda a: a.max())(mx.array([1.0, 3.0, 3.0]))
    assert g.tolist() == [0.0, 0.5, 0.5]


def test_analytic_results():
    x = mx.array([1.0, 2.0, 3.0])
    assert mx.grad(lambda a: (a * a).sum())(x).tolist() == [2.0, 4.0, 6.0]
    np.testing.assert_allclose(np.array(mx.grad(lambda a: mx.sin(a).sum())(x)), np.cos([1.0, 2.0, 3.0]), rtol=1e-6)


def test_grad_of_grad():
    f = lambda a: a ** 3  # noqa: E731
    assert mx.grad(mx.grad(f))(mx.array(2.0)).item() == pytest.approx(12.0)
    assert mx.grad(mx.grad(mx.grad(f)))(mx.array(2.0)).item() == pytest.approx(6.0)
    d2 = mx.grad(mx.grad(lambda a: mx.sin(a) * mx.exp(a)))(mx.array(0.7))
    assert d2.item() == pytest.approx(2 * np.cos(0.7) * np.exp(0.7), rel=1e-5)


def test_evaluating_inside_the_function_keeps_the_graph():
    def f(a):
        y = mx.exp(a)
        mx.eval(y)
        _ = y.tolist()
        return (y * y).sum()

    g = mx.grad(f)(mx.array([0.5, 1.0]))
    np.testing.assert_allclose(np.array(g), 2 * np.exp(2 * np.array([0.5, 1.0])), rtol=1e-5)


def test_value_and_grad_argnums_argnames_and_aux():
    def f(a, b, *, c):
        return (a * b + c).sum(), {"aux": a + 1}

    (v, aux), (gpos, gkw) = mx.value_and_grad(f, argnums=(0, 1), argnames="c")(
        mx.array([1.0, 2.0]), mx.array([3.0, 4.0]), c=mx.array([1.0, 1.0]))
    assert v.item() == 13.0
    assert aux["aux"].tolist() == [2.0, 3.0]
    assert gpos[0].tolist() == [3.0, 4.0] and gpos[1].tolist() == [1.0, 2.0]
    assert gkw["c"].tolist() == [1.0, 1.0]


def test_grad_over_pytrees():
    params = {"w": mx.array([1.0, 2.0]), "b": [mx.array(3.0), (mx.array([1.0]),)]}

    def loss(p):
        return (p["w"] ** 2).sum() + p["b"][0] * 2 + p["b"][1][0].sum()

    g = mx.grad(loss)(params)
    assert g["w"].tolist() == [2.0, 4.0]
    assert g["b"][0].item() == 2.0
    assert g["b"][1][0].tolist() == [1.0]


def test_stop_gradient():
    g = mx.grad(lambda a: (mx.stop_gradient(a) * a).sum())(mx.array([2.0, 3.0]))
    assert g.tolist() == [2.0, 3.0]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_vjp_and_jvp_agree():
    a = _arr(RNG.standard_normal((3, 4)))
    f = lambda x: mx.tanh(x @ x.T).sum(axis=0)  # noqa: E731
    t = _arr(RNG.standard_normal((3, 4)))
    u = _arr(RNG.standard_normal((3,)))
    (out,), (jv,) = mx.jvp(f, [a], [t])
    (out2,), (vj,) = mx.vjp(f, [a], [u])
    np.testing.assert_allclose(np.array(out), np.array(out2))
    # <u, J t> == <J^T u, t>
    assert (u * jv).sum().item() == pytest.approx((vj * t).sum().item(), rel=1e-6)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("name,fn", SHAPE_OPS + REDUCE_OPS, ids=[s[0] for s in SHAPE_OPS + REDUCE_OPS])
def test_jvp_matches_vjp_per_op(name, fn):
    a = _arr(POS if name in ("prod", "cumprod") else ANY)
    t = _arr(RNG.standard_normal(a.shape))
    (out,), (jv,) = mx.jvp(fn, [a], [t])
    u = _arr(RNG.standard_normal(out.shape))
    _, (vj,) = mx.vjp(fn, [a], [u])
    assert (u * jv).sum().item() == pytest.approx((vj * t).sum().item(), rel=1e-6, abs=1e-9)


def test_vmap_matches_a_loop():
    x = mx.array(RNG.standard_normal((5, 3, 4)).astype(np.float32))
    w = mx.array(RNG.standard_normal((4, 2)).astype(np.float32))

    def f(a, b):
        return mx.softmax(a @ b, axis=-1).sum(axis=0) + mx.exp(a).max()

    got = mx.vmap(f, in_axes=(0, None))(x, w)
    want = mx.stack([f(x[i], w) for i in range(5)])
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-6)
    got1 = mx.vmap(lambda a: mx.sort(a.T, axis=-1), in_axes=2, out_axes=1)(x)
    want1 = mx.stack([mx.sort(x[:, :, i].T, axis=-1) for i in range(4)], axis=1)
    np.testing.assert_allclose(np.array(got1), np.array(want1))


def test_grad_of_vmap_and_vmap_of_grad():
    x = mx.array(RNG.standard_normal((3, 4)))
    g1 = mx.grad(lambda a: mx.vmap(lambda r: mx.sin(r).sum())(a).sum())(x)
    g2 = mx.vmap(mx.grad(lambda r: mx.sin(r).sum()))(x)
    np.testing.assert_allclose(np.array(g1), np.cos(np.array(x)), rtol=1e-6)
    np.testing.assert_allclose(np.array(g2), np.cos(np.array(x)), rtol=1e-6)


def test_jvp_of_integer_and_bool_outputs_is_float32_zero():
    _, (t,) = mx.jvp(lambda a: a > 0, [mx.array([1.0, -1.0])], [mx.array([1.0, 1.0])])
    assert t.dtype == mx.float32 and t.tolist() == [0.0, 0.0]


def test_errors_as_mlx():
    with pytest.raises(ValueError, match=r"\[vjp\] Output shape \(2\) does not match cotangent shape \(\)"):
        mx.grad(lambda a: a * 2)(mx.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"\[grad\] The return value of the function whose gradient we want "
                                         r"to compute should be a scalar array; but tuple was returned"):
        mx.grad(lambda a: (a.sum(), 1))(mx.array([1.0]))
    with pytest.raises(ValueError, match=r"\[grad\] Can't compute the gradient of argument index 1"):
        mx.grad(lambda a, b: a.sum(), argnums=1)(mx.array([1.0]))
    with pytest.raises(ValueError, match=r"\[tree_flatten\] The argument should contain only arrays"):
        mx.grad(lambda a: a[0].sum())([mx.array([1.0]), "x"])
    with pytest.raises(ValueError, match=r"\[jvp\] Number of inputs does not match number of tangents."):
        mx.jvp(lambda a: a, [mx.array(1.0)], [])
    with pytest.raises(ValueError, match=r"\[vmap\] Inconsistent axis sizes: 4 and 3."):
        mx.vmap(lambda a, b: a + b)(mx.ones((3,)), mx.ones((4,)))


def test_custom_function_vjp_jvp_vmap():
    @mx.custom_function
    def f(x, y):
        return mx.sin(x) * y

    x, y = mx.array(0.5), mx.array(2.0)
    # no rules yet: the function's own derivative
    gx, gy = mx.grad(f, argnums=(0, 1))(x, y)
    assert gx.item() == pytest.approx(np.cos(0.5) * 2.0, rel=1e-6)

    @f.vjp
    def f_vjp(primals, cotangent, output):
        a, b = primals
        assert output.item() == pytest.approx(np.sin(0.5) * 2.0, rel=1e-6)
        return 3 * cotangent, 5 * cotangent

    gx, gy = mx.grad(f, argnums=(0, 1))(x, y)
    assert (gx.item(), gy.item()) == (3.0, 5.0)

    @f.jvp
    def f_jvp(primals, tangents):
        return 7 * tangents[0] + 11 * tangents[1]

    _, (t,) = mx.jvp(f, [x, y], [mx.array(1.0), mx.array(1.0)])
    assert t.item() == 18.0

    @f.vmap
    def f_vmap(inputs, axes):
        a, b = inputs
        return a + b, axes[0]

    out = mx.vmap(f)(mx.array([1.0, 2.0]), mx.array([10.0, 20.0]))
    assert out.tolist() == [11.0, 22.0]
    # the plain call is unchanged
    assert f(x, y).item() == pytest.approx(np.sin(0.5) * 2.0, rel=1e-6)


def test_custom_function_errors_propagate():
    @mx.custom_function
    def f(x):
        return x * 2

    @f.vjp
    def f_vjp(primals, cotangent, output):
        raise KeyError("from the rule")

    with pytest.raises(KeyError, match="from the rule"):
        mx.grad(lambda a: f(a).sum())(mx.array([1.0]))


def test_custom_function_pytree_outputs_and_grad_of_grad():
    @mx.custom_function
    def f(d):
        return {"s": mx.sin(d["x"]), "c": mx.cos(d["x"])}

    @f.vjp
    def f_vjp(d, cot, out):
        return {"x": cot["s"] * mx.cos(d["x"]) - cot["c"] * mx.sin(d["x"])}

    g = mx.grad(lambda x: (lambda o: o["s"] + o["c"])(f({"x": x})))(mx.array(0.3))
    assert g.item() == pytest.approx(np.cos(0.3) - np.sin(0.3), rel=1e-6)
    # the rule is built from ops, so it differentiates again
    g2 = mx.grad(mx.grad(lambda x: f({"x": x})["s"]))(mx.array(0.3))
    assert g2.item() == pytest.approx(-np.sin(0.3), rel=1e-6)


FAST_OPS = [
    ("rms_norm", lambda a: mx.fast.rms_norm(a, _arr(B2), 1e-5)),
    ("rms_norm_no_weight", lambda a: mx.fast.rms_norm(a, None, 1e-5)),
    ("layer_norm", lambda a: mx.fast.layer_norm(a, _arr(B2), _arr(B2 * 0.5), 1e-5)),
    ("layer_norm_bias_only", lambda a: mx.fast.layer_norm(a, None, _arr(B2), 1e-5)),
    ("sdpa", lambda a: mx.fast.scaled_dot_product_attention(
        a.reshape(1, 1, 3, 4), a.reshape(1, 1, 3, 4) * 0.5, a.reshape(1, 1, 3, 4).square(), scale=0.7)),
    ("sdpa_causal", lambda a: mx.fast.scaled_dot_product_attention(
        a.reshape(1, 1, 3, 4), a.reshape(1, 1, 3, 4) * 0.5, a.reshape(1, 1, 3, 4), scale=0.5, mask="causal")),
    ("sdpa_gqa_mask", lambda a: mx.fast.scaled_dot_product_attention(
        mx.concatenate([a, a * 2]).reshape(1, 2, 3, 4), a.reshape(1, 1, 3, 4), a.reshape(1, 1, 3, 4),
        scale=0.5, mask=mx.array([[True, False, True]] * 3))),
]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("name,fn", FAST_OPS, ids=[f[0] for f in FAST_OPS])
def test_fast_ops_grad_and_jvp(name, fn):
    # the fused ops compute in float32: compare with the differences of the float64 inputs loosely
    _check_grad(fn, ANY, rtol=2e-2, atol=2e-3)
    a = _arr(ANY)
    t = _arr(RNG.standard_normal(a.shape))
    (out,), (jv,) = mx.jvp(fn, [a], [t])
    u = _arr(RNG.standard_normal(out.shape))
    _, (vj,) = mx.vjp(fn, [a], [u])
    assert (u * jv).sum().item() == pytest.approx((vj * t).sum().item(), rel=1e-4, abs=1e-5)


def test_fast_ops_vmap_matches_a_loop():
    x = mx.array(RNG.standard_normal((4, 3, 5)).astype(np.float32))
    w = mx.array(RNG.standard_normal((5,)).astype(np.float32))
    got = mx.vmap(lambda r: mx.fast.rms_norm(r, w, 1e-5))(x)
    want = mx.stack([mx.fast.rms_norm(x[i], w, 1e-5) for i in range(4)])
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-5, atol=1e-6)


def test_vmap_of_indexing_matches_a_loop():
    x = mx.array(np.arange(24, dtype=np.float32).reshape(4, 6))
    idx = mx.array([[0, 5], [1, 1], [2, 3], [4, 0]])

    def setf(r, i):
        r = r * 1
        r[i] = 0.0
        return r

    cases = [
        (lambda r, i: r[i], (x, idx), lambda k: x[k][idx[k]]),
        (setf, (x, idx), lambda k: setf(x[k], idx[k])),
        (lambda r, i: mx.take_along_axis(r, i, axis=0), (x, idx), lambda k: mx.take_along_axis(x[k], idx[k], axis=0)),
        (lambda r, i: mx.put_along_axis(r, i, mx.array(-1.0), axis=0), (x, idx),
         lambda k: mx.put_along_axis(x[k], idx[k], mx.array(-1.0), axis=0)),
    ]
    for f, args, one in cases:
        assert mx.array_equal(mx.vmap(f)(*args), mx.stack([one(k) for k in range(4)])).item()
    # a 0-d index array per batch element: a gather, not a Python int
    i = mx.array([0, 2, 3])
    assert mx.array_equal(mx.vmap(lambda j: x[j])(i), x[i]).item()
    y = mx.array(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    got = mx.vmap(lambda m: m[mx.array([0, 2]), 1:3], in_axes=2)(y)
    assert mx.array_equal(got, mx.stack([y[:, :, k][mx.array([0, 2]), 1:3] for k in range(4)])).item()


def test_index_gradients_need_stop_gradient():
    x = mx.array([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match=r"\[gather\] Cannot calculate VJP with respect to indices"):
        mx.vjp(lambda a, i: mx.take(a, i), [x, mx.array([1, 3])], [mx.ones((2,))])
    g = mx.grad(lambda w: mx.take(w, mx.stop_gradient(mx.argsort(w)[:2])).sum())(mx.array([4.0, 3.0, 2.0, 1.0]))
    assert g.tolist() == [0.0, 0.0, 1.0, 1.0]
    # second order through sort (its rule's permutation is not differentiated)
    h = mx.grad(lambda v: mx.grad(lambda w: (mx.sort(w) ** 3).sum())(v).sum())(mx.array([3.0, 1.0, 2.0]))
    assert h.tolist() == [18.0, 6.0, 12.0]


def test_grad_restores_the_callers_containers():
    def loss(model):
        model[1] = mx.array(2.0)
        return model[0] * 3

    model = [mx.array(1.0), mx.array(1.0)]
    first = model[0]
    g = mx.grad(loss)(model)
    assert g[0].item() == 3.0
    assert model[0] is first and model[1].item() == 2.0


def test_scatter_max_min_grads():
    x = mx.array([1.0, 5.0, 3.0])
    u = mx.array([4.0, 2.0])
    i = mx.array([0, 1])
    w = mx.array([1.0, 2.0, 3.0])
    gx, gu = mx.grad(lambda a, b: (a.at[i].maximum(b) * w).sum(), argnums=(0, 1))(x, u)
    assert gx.tolist() == [0.0, 2.0, 3.0] and gu.tolist() == [1.0, 0.0]
    gx, gu = mx.grad(lambda a, b: (a.at[i].minimum(b) * w).sum(), argnums=(0, 1))(x, u)
    assert gx.tolist() == [1.0, 0.0, 3.0] and gu.tolist() == [0.0, 2.0]


def test_compile_traces_once_and_replays():
    calls = [0]
    x = mx.array(1.0)

    def f(a):
        calls[0] += 1
        return mx.exp(a) * x

    c = mx.compile(f)
    assert c(mx.array(0.0)).item() == 1.0
    x = mx.array(5.0)  # closures are captured at trace time
    assert c(mx.array(1.0)).item() == pytest.approx(np.e)
    assert calls[0] == 1
    # a new shape traces again; shapeless does not
    c(mx.ones((2,)))
    assert calls[0] == 2
    s = mx.compile(lambda a: a.sum(axis=-1) * 2, shapeless=True)
    assert s(mx.ones((2, 3))).tolist() == [6.0, 6.0] and s(mx.ones((4, 5))).tolist() == [10.0] * 4
    # composes with grad and vmap: under a transformation the function is called
    # as is (as MLX), so it reads the closure's current x = 5
    g = mx.grad(lambda a: c(a).sum())(mx.array([0.0, 1.0]))
    np.testing.assert_allclose(np.array(g), 5 * np.exp([0.0, 1.0]), rtol=1e-6)
    v = mx.vmap(c)(mx.array([0.0, 1.0]))
    np.testing.assert_allclose(np.array(v), 5 * np.exp([0.0, 1.0]), rtol=1e-6)


def test_compile_refuses_bad_inputs_as_mlx():
    class Thing:
        value = 1

    with pytest.raises(ValueError, match=r"\[compile\] Function arguments must be trees of arrays or constants"):
        mx.compile(lambda a, b: a + b.value)(mx.array(0.0), Thing())
    y = mx.array([1.0, 2.0]) + 2

    def f(a):
        return a + (y + 1)

    with pytest.raises(ValueError, match=r"uncaptured inputs"):
        mx.compile(f)(y)
