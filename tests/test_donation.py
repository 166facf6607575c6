"""Buffer donation (issue #15): an element-wise op writes its result over an
input that nothing else can see; an array anyone still holds never changes."""

import numpy as np
import pytest

import mkpy as mx

N = 1 << 20  # 4 MiB of float32


def chain_np(x, steps):
    y = x
    for i in range(steps):
        y = [lambda v: v * np.float32(1.0001), lambda v: v + np.float32(0.5), np.tanh,
             lambda v: v - np.float32(0.25)][i % 4](y)
    return y


def chain_mx(x, steps):
    y = x
    for i in range(steps):
        y = [lambda v: v * 1.0001, lambda v: v + 0.5, mx.tanh, lambda v: v - 0.25][i % 4](y)
    return y


def test_chain_reuses_one_buffer_and_keeps_the_input():
    xn = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    x = mx.array(xn)
    mx.eval(x)
    mx.reset_peak_memory()
    base = mx.get_active_memory()
    y = chain_mx(x, 40)
    mx.eval(y)
    # the first op needs a new buffer (x is held); the other 39 write over their input
    extra = mx.get_peak_memory() - base
    assert extra < 1.5 * xn.nbytes, extra / xn.nbytes
    np.testing.assert_allclose(np.array(y), chain_np(xn, 40), rtol=2e-6, atol=1e-6)
    assert np.array_equal(np.array(x), xn)


def test_held_intermediates_are_not_overwritten():
    xn = np.linspace(-2, 2, N, dtype=np.float32)
    x = mx.array(xn)
    a = mx.exp(x)  # held by Python while b is evaluated
    b = mx.sin(a) + 1
    mx.eval(b)
    np.testing.assert_allclose(np.array(a), np.exp(xn), rtol=1e-6)
    np.testing.assert_allclose(np.array(b), np.sin(np.exp(xn)) + 1, rtol=1e-5, atol=1e-6)


def test_evaluated_intermediate_held_by_python_keeps_its_values():
    xn = np.linspace(-2, 2, N, dtype=np.float32)
    a = mx.exp(mx.array(xn))
    mx.eval(a)
    c = mx.negative(a)
    mx.eval(c)
    np.testing.assert_allclose(np.array(a), np.exp(xn), rtol=1e-6)
    np.testing.assert_array_equal(np.array(c), -np.array(a))


def test_views_of_a_buffer_are_not_overwritten():
    xn = np.arange(N, dtype=np.float32)
    t = mx.exp(mx.array(xn) * 1e-6)
    mx.eval(t)
    want = np.array(t)
    # a reshape view shares t's buffer (dense, offset 0): the op may not write over it
    y = mx.sin(t.reshape(1024, -1))
    mx.eval(y)
    assert np.array_equal(np.array(t), want)
    # a slice (held only by the op) whose base died: its buffer is larger than it
    s = mx.exp(mx.array(xn) * 1e-6)
    mx.eval(s)
    v = s[1:]
    del s
    z = mx.cos(v)
    mx.eval(z)
    np.testing.assert_allclose(np.array(v), want[1:], rtol=1e-6)
    np.testing.assert_allclose(np.array(z), np.cos(want[1:]), rtol=1e-6)
    # a broadcast view as input
    row = mx.exp(mx.array(xn[:1024] * 1e-3))
    w = mx.broadcast_to(row, (8, 1024)) + mx.zeros((8, 1024))
    np.testing.assert_allclose(np.array(w), np.broadcast_to(np.exp(xn[:1024] * 1e-3), (8, 1024)), rtol=1e-6)


def test_numpy_view_of_an_array_keeps_its_values():
    xn = np.linspace(0, 1, N, dtype=np.float32)
    a = mx.exp(mx.array(xn))
    mx.eval(a)
    m = np.asarray(a)  # may share a's memory through the buffer protocol
    want = m.copy()
    b = mx.sqrt(a)
    del a
    mx.eval(b)
    assert np.array_equal(m, want)
    np.testing.assert_allclose(np.array(b), np.sqrt(want), rtol=1e-6)


def test_same_intermediate_twice_and_broadcasting():
    xn = np.linspace(-1, 1, 4096, dtype=np.float32).reshape(64, 64)
    x = mx.array(xn)
    t = mx.exp(x)
    sq = mx.multiply(t, t)  # t feeds both operands of one op
    del t
    np.testing.assert_allclose(np.array(sq), np.exp(xn) ** 2, rtol=1e-6)
    # donated operand on either side, with the other broadcast
    r1 = mx.exp(x) - mx.array(np.float32(1.0))
    r2 = mx.array(np.arange(64, dtype=np.float32)) - mx.exp(x)
    r3 = mx.exp(x[:1]) + mx.exp(x)  # first operand broadcast, second donated
    np.testing.assert_allclose(np.array(r1), np.exp(xn) - 1, rtol=1e-6, atol=2e-6)
    np.testing.assert_allclose(np.array(r2), np.arange(64, dtype=np.float32) - np.exp(xn), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(r3), np.exp(xn[:1]) + np.exp(xn), rtol=1e-6)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "uint8", "complex64", "float64"])
def test_dtypes_and_casts(dtype):
    d = getattr(mx, dtype)
    x = mx.array(np.arange(-500, 500, dtype=np.float64)).astype(d)
    y = mx.abs(x * 2) - 1  # both intermediates may be donated
    z = mx.abs(x * 2) > 100  # bool output: a different element size
    # the same ops with every intermediate held (nothing donated)
    t = x * 2
    mx.eval(t)
    u = mx.abs(t)
    mx.eval(u)
    v = u - 1
    w = u > 100
    mx.eval(y, z, v, w)
    assert y.dtype == v.dtype
    assert mx.array_equal(y, v).item() and mx.array_equal(z, w).item()
    assert mx.array_equal(u, mx.abs(t)).item()
    # a cast between types of one size writes over its input
    f = (mx.array(np.linspace(-5, 5, 1000, dtype=np.float32)) * 3).astype(mx.int32)
    np.testing.assert_array_equal(np.array(f), (np.linspace(-5, 5, 1000, dtype=np.float32) * 3).astype(np.int32))


def test_gradients_see_the_original_intermediates():
    xn = np.linspace(-1, 1, 1000, dtype=np.float32)
    x = mx.array(xn)

    def f(v):
        return mx.sum(mx.sin(mx.exp(v) * 2))

    g = mx.grad(f)(x)
    want = np.cos(np.exp(xn) * 2) * 2 * np.exp(xn)
    np.testing.assert_allclose(np.array(g), want, rtol=1e-5, atol=2e-5)
    v, g2 = mx.value_and_grad(f)(x)
    np.testing.assert_allclose(v.item(), np.sum(np.sin(np.exp(xn) * 2)), rtol=1e-5)
    np.testing.assert_array_equal(np.array(g2), np.array(g))


def test_sin_and_cos_of_temporaries():
    # their kernels read the input again for |x| > 2^23, inf and nan
    xn = np.array([np.inf, -np.inf, np.nan, 1.0, 3e9, -2e8] * 200, np.float32)
    for f, g in ((mx.sin, np.sin), (mx.cos, np.cos)):
        r = np.array(f(mx.array(xn) * 1))
        with np.errstate(invalid="ignore"):
            want = g(xn)
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-6)


def test_scatter_into_a_temporary():
    xn = np.zeros(1000, np.float32)
    idx = mx.array(np.array([1, 5, 5, 999], np.int32))
    y = (mx.array(xn) + 1).at[idx].add(mx.array(np.float32(2)))
    want = xn + 1
    np.add.at(want, [1, 5, 5, 999], 2)
    np.testing.assert_array_equal(np.array(y), want)


def test_threads_sharing_a_graph(in_threads):
    xn = np.linspace(-1, 1, N, dtype=np.float32)
    x = mx.array(xn)
    # lazy, held by every thread's graph: on a stream every thread may evaluate (as MLX, a thread
    # cannot evaluate nodes of another thread's own streams)
    with mx.stream(mx.new_thread_unsafe_stream(mx.gpu)):
        shared = mx.exp(x) * 0.5
    want = np.exp(xn) * np.float32(0.5)

    def work(k):
        for _ in range(3):
            y = chain_mx(shared + k, 12)
            mx.eval(y)
            np.testing.assert_allclose(np.array(y), chain_np(want + np.float32(k), 12), rtol=2e-6, atol=1e-6)

    in_threads(work)
    np.testing.assert_allclose(np.array(shared), want, rtol=1e-6)


def test_sin_and_cos_write_over_a_temporary_input():
    # out-of-range elements (|x| > 2^23, inf, nan) are kept in the output for libm's second pass
    xn = np.tile(np.array([np.inf, -np.inf, np.nan, 1.0, 3e9, -2e8, 0.5, -7.0], np.float32), N // 8)
    x = mx.array(xn)
    mx.eval(x)
    for f, g in ((mx.sin, np.sin), (mx.cos, np.cos)):
        mx.reset_peak_memory()
        base = mx.get_active_memory()
        y = f(x * 1)
        mx.eval(y)
        assert mx.get_peak_memory() - base < 1.5 * xn.nbytes
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(np.array(y), g(xn), rtol=1e-5, atol=1e-6)
        del y
    for dt, npt in ((mx.float16, np.float16), (mx.bfloat16, None)):
        y = mx.sin(mx.array(xn).astype(dt) * 1)
        want = np.sin(np.array(mx.array(xn).astype(dt).astype(mx.float32)))
        with np.errstate(invalid="ignore"):
            np.testing.assert_allclose(np.array(y.astype(mx.float32)), want, rtol=1e-2, atol=1e-2)


def test_compiled_function_writes_over_its_input():
    # as MLX's test_compile_donates_input_buffer: sin's and the sum's results take the input's buffer
    fun = mx.compile(lambda x: mx.sin(x) + 1)
    xn = np.linspace(-3, 3, 4096, dtype=np.float32)
    with mx.stream(mx.cpu):
        x = mx.array(xn) * 1
        mx.eval(x)
        ptr = np.asarray(x).__array_interface__["data"][0]
        out = fun(x)
        del x
        mx.eval(out)
    assert np.asarray(out).__array_interface__["data"][0] == ptr
    np.testing.assert_allclose(np.array(out), np.sin(xn) + 1, rtol=1e-6, atol=1e-6)
