"""mx.compile's replay (core/compile.c): shapeless replays that follow new
shapes (BroadcastAxes, views), merging of equal nodes, random ops and
metal_kernel calls replayed, and mx.export_to_dot."""
import io
import re

import numpy as np
import pytest

import mkpy as mx


def counting(f):
    calls = [0]

    def g(*args):
        calls[0] += 1
        return f(*args)

    return g, calls


# ---------------------------------------------------------------- shapeless


def test_shapeless_grad_of_broadcasting_matmul_follows_new_batch_sizes():
    def loss(a, b):
        return ((a @ b) * 1.5).sum()

    g, calls = counting(mx.grad(loss, argnums=(0, 1)))
    c = mx.compile(g, shapeless=True)
    rng = np.random.default_rng(0)
    for sa, sb in [((2, 1, 4, 2), (3, 2, 5)), ((3, 1, 4, 2), (2, 2, 5)), ((1, 1, 3, 2), (4, 2, 2))]:
        a = mx.array(rng.standard_normal(sa).astype(np.float32))
        b = mx.array(rng.standard_normal(sb).astype(np.float32))
        ga, gb = c(a, b)
        ea, eb = mx.grad(loss, argnums=(0, 1))(a, b)
        assert ga.shape == sa and gb.shape == sb
        np.testing.assert_allclose(np.array(ga), np.array(ea), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.array(gb), np.array(eb), rtol=1e-5, atol=1e-5)
    assert calls[0] == 1


def test_shapeless_vmap_of_matmul_follows_new_shapes():
    f, calls = counting(lambda x, y: mx.matmul(x, y))
    v = mx.vmap(f, in_axes=(0, 1))
    c = mx.compile(v, shapeless=True)
    rng = np.random.default_rng(1)
    for sx, sy in [((2, 3, 1, 4, 5), (1, 2, 5, 6)), ((3, 2, 1, 4, 5), (2, 3, 5, 6))]:
        x = mx.array(rng.standard_normal(sx).astype(np.float32))
        y = mx.array(rng.standard_normal(sy).astype(np.float32))
        np.testing.assert_allclose(np.array(c(x, y)), np.array(v(x, y)), rtol=1e-5, atol=1e-5)
    # traced once by compile, once by each direct vmap call
    assert calls[0] == 3


def test_shapeless_views_follow_new_shapes():
    t = mx.compile(lambda x: mx.transpose(x) * 1, shapeless=True)
    e = mx.compile(lambda x: mx.expand_dims(x, 1) + 0, shapeless=True)
    s = mx.compile(lambda x: mx.squeeze(x, 0) - 0, shapeless=True)
    for shape in [(2, 3), (4, 5)]:
        x = mx.arange(int(np.prod(shape)), dtype=mx.float32).reshape(shape)
        assert np.array_equal(np.array(t(x)), np.array(x).T)
        assert np.array_equal(np.array(e(x)), np.array(x)[:, None])
        assert np.array_equal(np.array(s(x[None])), np.array(x))


def test_shapeless_slice_that_no_longer_fits_raises():
    c = mx.compile(lambda x: x[2:5] * 2, shapeless=True)
    assert c(mx.arange(8)).tolist() == [4, 6, 8]
    assert c(mx.arange(10)).tolist() == [4, 6, 8]  # the traced slice, as MLX
    with pytest.raises(ValueError):
        c(mx.arange(4))


def test_shapeless_sum_gradient_follows_new_shapes():
    g = mx.compile(mx.grad(lambda x: (x * x).sum(axis=1).mean()), shapeless=True)
    for shape in [(2, 1), (3, 4), (1, 5)]:
        x = mx.arange(int(np.prod(shape)), dtype=mx.float32).reshape(shape)
        want = 2 * np.array(x) / shape[0]
        np.testing.assert_allclose(np.array(g(x)), want, rtol=1e-6)


def test_broadcast_axes_node_under_transformations():
    # the sum's vjp broadcasts through a BroadcastAxes node while tracing;
    # its own rules: grad of grad, jvp and vmap
    f = lambda x: (mx.sin(x) * x).sum(axis=0)  # noqa: E731
    x = mx.array([[0.5, 1.0], [1.5, -2.0], [0.1, 0.2]])
    hv = mx.grad(lambda x: mx.grad(lambda y: f(y).sum())(x).sum())(x)
    xn = np.array(x)
    want = 2 * np.cos(xn) - xn * np.sin(xn)
    np.testing.assert_allclose(np.array(hv), want, rtol=1e-5)
    vg = mx.vmap(mx.grad(lambda y: f(y).sum()))(mx.stack([x, 2 * x]))
    np.testing.assert_allclose(np.array(vg[1]), np.sin(2 * xn) + 2 * xn * np.cos(2 * xn), rtol=1e-5)
    _, jt = mx.jvp(lambda y: mx.grad(lambda z: f(z).sum())(y), [x], [mx.ones_like(x)])
    np.testing.assert_allclose(np.array(jt[0]), want, rtol=1e-5)


# ---------------------------------------------------------------- merging


def count_labels(*outs):
    buf = io.StringIO()
    mx.export_to_dot(buf, *outs)
    return len(re.findall(r"\[label =", buf.getvalue()))


def dot_text(*outs):
    buf = io.StringIO()
    mx.export_to_dot(buf, *outs)
    return buf.getvalue()


def test_compile_merges_equal_nodes_and_constants():
    def fun(x):
        return (x + 1) + (x + 1)

    # merging comes before element-wise fusion (as MLX): the fused node
    # holds two additions, not three
    c = mx.compile(fun)
    x = mx.array(1.0)
    out = c(x)
    assert "CompiledAddAdd\"" in dot_text(out)
    assert count_labels(out) == 1 < count_labels(fun(x)) == 3
    assert out.item() == 4.0
    # other constants do not merge
    d = mx.compile(lambda x: (x + 1) + (x + 2))
    assert "CompiledAddAddAdd\"" in dot_text(d(x)) and d(x).item() == 5.0
    # other ops on the same inputs do not merge
    e = mx.compile(lambda x: (x + 1) + (x * 1))
    assert "CompiledAddMultiplyAdd\"" in dot_text(e(x)) and e(x).item() == 3.0
    # without fusion (reductions are not fused) the merge shows in the counts
    v = mx.array([1.0, 2.0])
    s = mx.compile(lambda x: mx.sum(x) + mx.sum(x))
    assert count_labels(s(v)) == 2 < count_labels(mx.sum(v) + mx.sum(v)) == 3
    mx.disable_compile()
    try:
        assert count_labels(c(x)) == 3
    finally:
        mx.enable_compile()


# ---------------------------------------------------------------- random, kernels


@pytest.mark.parametrize("draw", [
    lambda x: x + mx.random.uniform(shape=x.shape),
    lambda x: mx.random.categorical(x),
    lambda x: mx.random.permutation(x),
    lambda x: mx.random.truncated_normal(x - 1, x + 1),
])
def test_compiled_random_replays_the_traced_key(draw):
    # as MLX: without the random state as input and output, the key is a
    # constant of the traced graph; the function is traced once
    f, calls = counting(draw)
    c = mx.compile(f)
    x = mx.array([0.5, 1.0, 2.0, 0.0])
    first = c(x)
    assert np.array_equal(np.array(c(x)), np.array(first))
    assert np.array_equal(np.array(c(x)), np.array(first))
    assert calls[0] == 1


def test_compiled_random_with_state_draws_new_numbers():
    c = mx.compile(lambda: mx.random.uniform(shape=(4,)), inputs=mx.random.state, outputs=mx.random.state)
    assert not np.array_equal(np.array(c()), np.array(c()))


SCALE = """
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * 2.0f + 1.0f;
"""


def test_compiled_metal_kernel_is_replayed():
    k = mx.fast.metal_kernel(name="cmp_scale", input_names=["x"], output_names=["out"], source=SCALE)

    def f(x):
        (y,) = k(inputs=[x * 3], grid=(x.size, 1, 1), threadgroup=(4, 1, 1), output_shapes=[x.shape],
                 output_dtypes=[mx.float32])
        return y - 1

    g, calls = counting(f)
    c = mx.compile(g)
    for v in ([1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 0.0, 8.0]):
        x = mx.array(v)
        np.testing.assert_allclose(np.array(c(x)), np.array(v) * 6, rtol=1e-6)
    assert calls[0] == 1
    # a new shape under shapeless=True: no batching rule, the function runs again
    s = mx.compile(g, shapeless=True)
    s(mx.ones((4,)))
    np.testing.assert_allclose(np.array(s(mx.ones((8,)))), np.full(8, 6.0))


# ---------------------------------------------------------------- export_to_dot


def test_export_to_dot_format_as_mlx(tmp_path):
    a, b = mx.array(1.0), mx.array(2.0)
    c = a + b
    buf = io.StringIO()
    mx.export_to_dot(buf, c, a=a)
    text = buf.getvalue()
    lines = text.splitlines()
    assert lines[0] == "digraph {" and lines[-1] == "}"
    assert '{ rank=source; "a"; }' in lines and '{ rank=source; "B"; }' in lines
    node = re.search(r'\{ (\d+) \[label ="Add", shape=rectangle\]; \}', text)
    assert node
    ident = node.group(1)
    assert f'"a" -> {ident}' in lines and f'"B" -> {ident}' in lines
    assert '{ rank=sink; "C"; }' in lines and f'{ident} -> "C"' in lines
    # intermediate arrays are neither sources nor sinks; trees of outputs; a path
    d = mx.exp(c) * 2
    path = tmp_path / "g.dot"
    mx.export_to_dot(str(path), [d, {"k": (c,)}])
    text = path.read_text()
    assert 'label ="Exp"' in text and 'label ="Multiply"' in text
    buf = io.StringIO()
    x = mx.ones((2, 3)) * 2
    mx.export_to_dot(buf, mx.argmax(x.T, axis=0), mx.sum(mx.broadcast_to(x, (4, 2, 3)), axis=1))
    text = buf.getvalue()
    for name in ("Transpose", "ArgMax", "Broadcast", "Sum"):
        assert f'label ="{name}"' in text, name
    assert re.search(r'\{ "[A-Z]+"; \}', text)


def test_export_to_dot_errors_as_mlx():
    x = mx.array(1.0)
    with pytest.raises(ValueError, match=r"\[export_to_dot\] Accepts file-like objects or strings"):
        mx.export_to_dot(3, x)
    with pytest.raises(ValueError, match=r"\[tree_flatten\] The argument should contain only arrays"):
        mx.export_to_dot(io.StringIO(), [x, "a"])
    with pytest.raises(ValueError, match=r"\[tree_flatten\]"):
        mx.export_to_dot(io.StringIO(), x, name=1)


# ------------------------------------------- every op MLX compiles shapeless, on new shapes

def _sdpa(mask=None):
    def f(x):
        q = x[None]
        m = mask(x) if callable(mask) else mask
        return mx.fast.scaled_dot_product_attention(q, q * 0.5, q + 1.0, scale=0.5, mask=m)
    return f


SHAPELESS_OPS = {
    "softmax": lambda x: mx.softmax(x, axis=-1),
    "softmax_precise_f16": lambda x: mx.softmax(x.astype(mx.float16), axis=-1, precise=True),
    "softmax_axis1": lambda x: mx.softmax(x, axis=1),
    "softmax_all": lambda x: mx.softmax(x),
    "log_softmax": lambda x: x - mx.logsumexp(x, axis=-1, keepdims=True),  # mlx.nn.log_softmax
    "softmin": lambda x: mx.softmax(-x, axis=-1),                          # mlx.nn.softmin
    "logsumexp": lambda x: mx.logsumexp(x, axis=-1),
    "logsumexp_keepdims": lambda x: mx.logsumexp(x, axis=-1, keepdims=True),
    "logsumexp_all": lambda x: mx.logsumexp(x),
    "logcumsumexp": lambda x: mx.logcumsumexp(x, axis=-1),
    "cumsum": lambda x: mx.cumsum(x, axis=1),
    "mean": lambda x: x.mean(axis=(0, 2)),
    "var": lambda x: x.var(axis=-1),
    "std_ddof": lambda x: x.std(axis=1, keepdims=True, ddof=1),
    "argmax": lambda x: mx.argmax(x, axis=-1),
    "sort": lambda x: mx.sort(x, axis=-1),
    "argpartition": lambda x: mx.argpartition(x, 1, axis=-1),
    "transpose": lambda x: mx.transpose(x, (2, 0, 1)),
    "flatten": lambda x: mx.flatten(x),
    "flatten_1_2": lambda x: mx.flatten(x, 1, 2),
    "reshape_-1": lambda x: x.reshape(-1),
    "concatenate": lambda x: mx.concatenate([x, x * 2], axis=-1),
    "stack": lambda x: mx.stack([x, x], axis=1),
    "matmul": lambda x: x @ mx.swapaxes(x, -1, -2),
    "einsum": lambda x: mx.einsum("bij,bkj->bik", x, x),
    "take_along_axis": lambda x: mx.take_along_axis(x, mx.argsort(x, axis=-1), axis=-1),
    "rms_norm": lambda x: mx.fast.rms_norm(x, None, 1e-5),
    "rms_norm_weight": lambda x: mx.fast.rms_norm(x, mx.arange(1, 5, dtype=mx.float32), 1e-5),
    "layer_norm": lambda x: mx.fast.layer_norm(x, None, None, 1e-5),
    "layer_norm_affine": lambda x: mx.fast.layer_norm(x, mx.arange(1, 5, dtype=mx.float32), mx.ones((4,)), 1e-5),
    "rope": lambda x: mx.fast.rope(x[None], 4, traditional=False, base=10000.0, scale=1.0, offset=1),
    "sdpa": _sdpa(),
    "sdpa_causal": _sdpa("causal"),
    "sdpa_array_mask": _sdpa(mx.zeros((3, 3))),
    "unflatten": lambda x: mx.unflatten(x, -1, (2, 2)),
    "unflatten_infer": lambda x: mx.unflatten(x, 2, (-1, 2)) * 2,
    "unflatten_flatten": lambda x: mx.flatten(mx.unflatten(x, 2, (2, -1)), 0, 1),
    "hadamard_transform": lambda x: mx.hadamard_transform(x),
}
# the last dim stays 4 (the weights above are constants of 4); the other dims change
SHAPE_PAIRS = [((2, 3, 4), (2, 5, 4)), ((2, 3, 4), (3, 3, 4))]


@pytest.mark.parametrize("name", sorted(SHAPELESS_OPS))
def test_shapeless_output_shapes_follow_the_inputs(name):
    f = SHAPELESS_OPS[name]
    rng = np.random.default_rng(3)
    for first, second in SHAPE_PAIRS:
        if name == "sdpa_array_mask" and first[1] != second[1]:
            continue  # the (3, 3) mask is a constant of the traced length
        c = mx.compile(f, shapeless=True)
        for shape in (first, second, first):
            x = mx.array(rng.standard_normal(shape).astype(np.float32))
            got, want = c(x), f(x)
            assert got.shape == want.shape, (name, shape)
            np.testing.assert_allclose(np.array(got.astype(mx.float32)), np.array(want.astype(mx.float32)),
                                       rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("n", [12, 20, 56])
def test_shapeless_hadamard_of_m_times_power_of_two(n):
    # the H_m mixing step too: the leading dims follow the input (MLX's Hadamard primitive)
    c = mx.compile(lambda x: mx.hadamard_transform(x, scale=0.5), shapeless=True)
    rng = np.random.default_rng(n)
    for shape in ((2, 3, n), (4, 1, n), (1, 6, n), (2, 3, n)):
        x = mx.array(rng.standard_normal(shape).astype(np.float32))
        got = c(x)
        assert got.shape == shape
        np.testing.assert_allclose(np.array(got), np.array(mx.hadamard_transform(x, scale=0.5)), rtol=1e-5,
                                   atol=1e-5)


def test_shapeless_softmax_of_the_issue():
    f = mx.compile(lambda x: mx.softmax(x, axis=-1), shapeless=True)
    assert f(mx.ones((1, 2, 4))).shape == (1, 2, 4)
    assert f(mx.ones((1, 1, 4))).shape == (1, 1, 4)
    g = mx.compile(lambda x: mx.fast.scaled_dot_product_attention(x, x, x, scale=1.0, mask="causal"), shapeless=True)
    assert g(mx.ones((1, 2, 3, 8))).shape == (1, 2, 3, 8)
    assert g(mx.ones((1, 2, 5, 8))).shape == (1, 2, 5, 8)
