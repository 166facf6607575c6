"""Element-wise fusion in mx.compile: MLX's Compiled... nodes.

A compiled call outside transformations runs chains of unary, binary and
astype nodes (with the broadcasts feeding them) as one fused node; its
results must be those of the unfused graph, bit for bit."""
import io
import threading

import numpy as np
import pytest

import mkpy as mx

_UINT = {1: mx.uint8, 2: mx.uint16, 4: mx.uint32, 8: mx.uint64}


def dot_labels(*arrays):
    buf = io.StringIO()
    mx.export_to_dot(buf, *arrays)
    return [
        line.split('label ="')[1].split('"')[0]
        for line in buf.getvalue().splitlines()
        if "label =" in line
    ]


def fused_names(*arrays):
    return [n for n in dot_labels(*arrays) if n.startswith("Compiled")]


def bits(x):
    x = mx.array(x) if not isinstance(x, mx.array) else x
    if x.dtype == mx.bool_:
        return np.array(x.astype(mx.uint8))
    return np.array(x.view(_UINT[x.dtype.size]))


def assert_same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(bits(a), bits(b))


def compare(fun, *args):
    """fun compiled (fused) against fun uncompiled, bit for bit; returns
    the results and the fused nodes' names (read before evaluating)."""
    cf = mx.compile(fun)
    got = cf(*args)
    want = fun(*args)
    if isinstance(got, mx.array):
        got, want = [got], [want]
    names = fused_names(*got)
    for g, w in zip(got, want):
        assert_same_bits(g, w)
    return got, names


def test_shared_broadcast_name():
    def fun(x, y, z):
        yy = mx.broadcast_to(y, z.shape)
        return (x + yy * z), yy.sum()

    a, b, c = mx.random.normal((4, 4)), mx.random.normal((4,)), mx.random.normal((4, 4))
    d = mx.compile(fun)(a, b, c)
    assert fused_names(d[0], d[1]) == ["CompiledBroadcastMultiplyAdd"]
    e = fun(a, b, c)
    assert_same_bits(d[0], e[0])
    assert_same_bits(d[1], e[1])


def test_names_in_tape_order():
    def fun(x, y):
        return mx.exp(x * y) - mx.abs(y)

    out = mx.compile(fun)(mx.array([1.0, -2.0]), mx.array([0.5, 3.0]))
    assert fused_names(out) == ["CompiledMultiplyExpAbsSubtract"]


def test_single_op_not_fused():
    out = mx.compile(lambda x: x + 1)(mx.array([1.0, 2.0]))
    assert fused_names(out) == []
    assert dot_labels(out) == ["Add"]


def test_disable_compile_no_fusion():
    fun = lambda x: mx.sin(x) * 2 + 1  # noqa: E731
    cf = mx.compile(fun)
    x = mx.array([0.5, 1.5])
    assert fused_names(cf(x)) == ["CompiledSinMultiplyAdd"]
    mx.disable_compile()
    try:
        assert fused_names(cf(x)) == []
    finally:
        mx.enable_compile()
    assert fused_names(cf(x)) == ["CompiledSinMultiplyAdd"]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_float_chain_bits(dtype):
    t = getattr(mx, dtype)
    x = mx.random.normal((37, 53)).astype(t)
    y = mx.random.uniform(shape=(53,)).astype(t) + 0.5

    def fun(x, y):
        a = mx.exp(x) * y
        b = mx.sqrt(mx.abs(a)) - mx.log(y)
        return mx.tanh(b) / (a + 3) + mx.sigmoid(x) * 0.5

    got, names = compare(fun, x, y)
    assert names


def test_int_and_bool_outputs_bits():
    x = mx.random.randint(-50, 50, (23, 31), dtype=mx.int32)
    y = mx.random.randint(1, 9, (31,), dtype=mx.int32)

    def fun(x, y):
        a = (x * y + 7) // y - (x % y)
        return a, (a > 3) & (x < 10), mx.maximum(a, x) << 2

    got, names = compare(fun, x, y)
    assert got[1].dtype == mx.bool_


def test_comparison_of_floats_bits():
    x = mx.random.normal((64,)).astype(mx.float16)

    def fun(x):
        return mx.logical_not(mx.exp(x) >= 1.0) | (x * x < 0.25)

    got, names = compare(fun, x)
    assert got[0].dtype == mx.bool_
    assert names


def test_astype_in_chain_bits():
    x = mx.random.normal((1000,))

    def fun(x):
        return (x * 3).astype(mx.float16).astype(mx.float32) + mx.exp(x).astype(mx.bfloat16)

    got, names = compare(fun, x)
    assert any("AsType" in n for n in names)


def test_broadcasts_noncontiguous_scalars_bits():
    base = mx.random.normal((40, 70))
    x = base.T  # transposed
    y = mx.random.normal((140, 3))[::2, 1:2]  # sliced, strided, broadcast column
    z = mx.random.normal((70, 1, 1))

    def fun(x, y, z, s):
        yy = mx.broadcast_to(y, x.shape)
        return mx.expand_dims(x * yy + s, 0) * 2.5 + z.squeeze(-1) - yy, yy * 3

    got, names = compare(fun, x, y, z, mx.array(0.75))
    assert got[0].shape == (1, 70, 40)
    assert names


def test_large_parallel_bits():
    # more than one thread's share of elements, rows of odd lengths
    x = mx.random.normal((257, 301))
    y = mx.random.normal((301,))

    def fun(x, y):
        return mx.cos(x + y) * mx.sin(x) - mx.square(y) / 3

    compare(fun, x, y)
    compare(fun, x.T[:, :250].T, y)


def test_interior_output_not_fused_away():
    def fun(x):
        a = mx.exp(x) + 1
        b = a * a - x
        return a, mx.sqrt(b)

    got, names = compare(fun, mx.random.uniform(shape=(50,)))
    # `a` is a graph output: it is computed once and read by the second group
    assert len(names) == 2


def test_long_chain_split_by_depth():
    def fun(x):
        for k in range(30):
            x = x * 1.01 + (k % 3)
        return x

    got, names = compare(fun, mx.random.normal((100,)))
    assert len(names) > 1
    assert sum(n.count("Multiply") for n in names) == 30


def test_many_inputs_bits():
    args = [mx.random.normal((8,)) for _ in range(30)]

    def fun(*xs):
        acc = xs[0]
        for x in xs[1:]:
            acc = mx.maximum(acc, x) + x
        return acc

    got, names = compare(fun, *args)
    assert names


def test_grad_and_vmap_of_compiled_unfused():
    def fun(x):
        return (mx.exp(x) * mx.sin(x) + x).sum()

    x = mx.random.normal((6,))
    g = mx.grad(mx.compile(fun))(x)
    assert_same_bits(g, mx.grad(fun)(x))
    assert fused_names(g) == []
    inner = lambda x: mx.exp(x) * mx.sin(x) + x  # noqa: E731
    v = mx.vmap(mx.compile(inner))(mx.random.normal((3, 4)))
    assert fused_names(v) == []
    xs = mx.random.normal((3, 4))
    assert_same_bits(mx.vmap(mx.compile(inner))(xs), mx.vmap(inner)(xs))


def test_compile_of_grad_fuses_forward_only_outside():
    def loss(w, x):
        y = x * w
        return (y * mx.exp(y)).sum()

    w, x = mx.random.normal((5,)), mx.random.normal((5,))
    cg = mx.compile(mx.grad(loss))
    assert np.allclose(np.array(cg(w, x)), np.array(mx.grad(loss)(w, x)))


def test_shapeless_new_shapes():
    def fun(x, y):
        return mx.exp(x) * y + 1

    cf = mx.compile(fun, shapeless=True)
    for shape in [(3, 4), (5, 4), (2, 7)]:
        x, y = mx.random.normal(shape), mx.random.normal(shape[-1:])
        assert_same_bits(cf(x, y), fun(x, y))


def test_threads_call_one_compiled():
    def fun(x, y):
        return mx.tanh(x * y + 1) - y

    cf = mx.compile(fun)
    xs = [mx.random.normal((300, 40)) for _ in range(4)]
    y = mx.random.normal((40,))
    want = [fun(x, y) for x in xs]
    mx.eval(*want)
    errors = []

    def work(i):
        try:
            for _ in range(10):
                assert_same_bits(cf(xs[i], y), want[i])
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_random_in_compiled_with_fusion():
    def fun(x):
        return mx.exp(x + mx.random.uniform(shape=x.shape)) * 2

    cf = mx.compile(fun)
    x = mx.zeros((10,))
    a = cf(x)
    assert fused_names(a)
    assert_same_bits(a, cf(x))


def test_complex_chain_bits():
    x = mx.array([1 + 2j, -0.5 + 0.25j, 3 - 1j])

    def fun(x):
        return mx.exp(x) * x - mx.abs(x)

    compare(fun, x)


def test_merged_nodes_inside_and_outside_groups():
    x = mx.random.normal((33,))

    def inside(x):
        return mx.exp(x) * 2 + mx.exp(x) * 3

    got, names = compare(inside, x)
    assert names == ["CompiledExpMultiplyMultiplyAdd"]

    def outside(x):
        a, b = mx.exp(x), mx.exp(x)
        return a * b + a, b

    got, names = compare(outside, x)
    assert names == ["CompiledMultiplyAdd"]


def test_env_switch_turns_fusion_off():
    import os
    import subprocess
    import sys

    code = (
        "import io, mkpy as mx\n"
        "o = mx.compile(lambda x: mx.exp(x) * 2 + 1)(mx.array([1.0]))\n"
        "b = io.StringIO(); mx.export_to_dot(b, o); print('Compiled' in b.getvalue())\n"
    )
    env = dict(os.environ, MKPY_COMPILE_FUSE="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_where_fuses_as_select_bits():
    x = mx.random.normal((17, 9))
    y = mx.random.normal((9,)).astype(mx.float16)

    def fun(x, y):
        return mx.where(x > 0, mx.exp(x), y * 2) - 1

    got, names = compare(fun, x, y)
    assert names and "Select" in names[0]


def test_metal_kernel_between_fused_groups():
    source = """
        uint i = thread_position_in_grid.x;
        out[i] = inp[i] * inp[i];
    """
    k = mx.fast.metal_kernel(name="fusion_sq", input_names=["inp"], output_names=["out"], source=source)

    def fun(x):
        (y,) = k(inputs=[mx.exp(x) * 0.5 + 1], grid=(x.size, 1, 1), threadgroup=(4, 1, 1),
                 output_shapes=[x.shape], output_dtypes=[mx.float32])
        return mx.sqrt(y) * 2 - x

    x = mx.array([0.5, -1.0, 2.0, 0.0])
    got, names = compare(fun, x)
    assert sorted(names) == ["CompiledExpMultiplyAdd", "CompiledSqrtMultiplySubtract"]
    want = np.sqrt((np.exp(np.array(x)) * 0.5 + 1) ** 2) * 2 - np.array(x)
    np.testing.assert_allclose(np.array(got[0]), want, rtol=1e-6)
