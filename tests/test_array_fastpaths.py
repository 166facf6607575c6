"""Correctness of the array path's fast paths (issue #15, third pass): conversion
from NumPy straight into the result (memcpy, or one cast from aligned
float64), the type cache that sends ndarrays to the buffer protocol, the
vectorcall constructor, small graphs evaluated with the GIL held, transposing
copies by tiles, and small buffers allocated with their header. No timing
here: performance is measured by benchmarks/bench_array.py."""

import numpy as np
import pytest

import mkpy as mx

RNG = np.random.default_rng(15)


# ---------------------------------------------------------------- conversion

@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int8, np.uint16, np.int32, np.int64, np.uint64,
                                np.bool_, np.complex64])
@pytest.mark.parametrize("shape", [(), (0,), (1,), (7,), (1000,), (3, 0, 2), (4, 1, 5), (2, 3, 4)])
def test_contiguous_conversion_copies_exactly(dt, shape):
    a = (RNG.standard_normal(shape) * 50).astype(dt)
    m = mx.array(a)
    assert m.shape == a.shape and m.dtype == getattr(mx, np.dtype(dt).name if dt is not np.bool_ else "bool_")
    assert np.array_equal(np.array(m), a)


@pytest.mark.parametrize("shape", [(0,), (5,), (1000,), (3, 4), (2, 1, 9)])
def test_float64_converts_straight_to_float32(shape):
    a = RNG.standard_normal(shape) * 1e3
    a.flat[:1] = np.nan if a.size else 0
    m = mx.array(a)
    assert m.dtype == mx.float32
    assert np.array_equal(np.array(m), a.astype(np.float32), equal_nan=True)


def test_explicit_dtype_casts_from_the_source():
    a = RNG.standard_normal(100).astype(np.float32) * 100
    assert np.array_equal(np.array(mx.array(a, dtype=mx.int32)), a.astype(np.int32))
    assert np.array_equal(np.array(mx.array(a, mx.float16)), a.astype(np.float16))
    assert np.array_equal(np.array(mx.array(a.astype(np.float64), dtype=mx.float32)), a)
    b = np.arange(10, dtype=np.int64)
    assert np.array_equal(np.array(mx.array(b, dtype=mx.bfloat16).astype(mx.float32)), b.astype(np.float32))


def test_unaligned_source_is_converted_correctly():
    raw = np.zeros(8 * 101 + 1, np.uint8)
    vals = RNG.standard_normal(101)
    raw[1:].view(np.uint8)[:] = np.frombuffer(vals.tobytes(), np.uint8)
    a = raw[1:].view(np.float64)  # data address is odd
    assert a.ctypes.data % 8 != 0
    assert np.array_equal(np.array(mx.array(a)), vals.astype(np.float32))
    assert np.array_equal(np.array(mx.array(a, dtype=mx.float64)), vals)


@pytest.mark.parametrize("make", [
    lambda a: a[:, ::2],
    lambda a: a.T,
    lambda a: np.asfortranarray(a),
    lambda a: a[::-1],
    lambda a: a[:, 1:2],          # unit dim with a large stride
    lambda a: a[1:2, :],
    lambda a: np.broadcast_to(a[:1], a.shape),
])
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int16])
def test_non_contiguous_sources(make, dt):
    a = make((RNG.standard_normal((6, 8)) * 20).astype(dt))
    m = mx.array(a)
    want = a.astype(np.float32) if dt is np.float64 else a
    assert np.array_equal(np.array(m), want)


def test_memoryview_and_bytes_like_buffers():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    assert np.array_equal(np.array(mx.array(memoryview(a))), a)
    assert np.array_equal(np.array(mx.array(bytearray(b"\x01\x02\x03"))), np.array([1, 2, 3], np.uint8))


def test_scalar_and_array_types_are_not_taken_for_buffers():
    x = np.arange(4, dtype=np.float32)
    mx.array(x)  # the ndarray type is now known
    # NumPy scalars: float64 is a Python float subclass (a scalar), int32 a buffer
    s = mx.array(np.float64(2.5))
    assert s.dtype == mx.float32 and s.item() == 2.5
    assert mx.array(np.int32(7)).item() == 7
    assert mx.array(mx.array(x)).dtype == mx.float32

    class WithMlx:
        def __init__(self, v):
            self.v = v

        def __mlx_array__(self):
            return mx.array(self.v)

    assert np.array_equal(np.array(mx.array(WithMlx([1.0, 2.0]))), [1.0, 2.0])

    class Sub(np.ndarray):  # a heap type: never cached, still a buffer
        pass

    v = np.arange(3, dtype=np.float32).view(Sub)
    assert np.array_equal(np.array(mx.array(v)), [0, 1, 2])
    assert np.array_equal(np.array(mx.add(v, 1)), [1, 2, 3])


def test_constructor_arguments():
    assert mx.array(val=[1, 2], dtype=mx.int8).dtype == mx.int8
    assert mx.array([1, 2], None).dtype == mx.int32
    with pytest.raises(TypeError):
        mx.array()
    with pytest.raises(TypeError):
        mx.array([1], mx.int32, 3)
    with pytest.raises(TypeError):
        mx.array([1], dtype="float32")
    with pytest.raises(TypeError):
        mx.array([1], other=1)


# ------------------------------------------------------- small graphs, eval

def test_small_graphs_evaluate_like_big_ones():
    a = RNG.standard_normal((5, 7)).astype(np.float32)
    m = mx.array(a)
    t = mx.contiguous(mx.transpose(mx.multiply(m, m) + 1))
    u = mx.reshape(t, (35,)).astype(mx.float16)
    mx.eval(u, t)
    assert np.array_equal(np.array(t), (a * a + 1).T)
    assert np.array_equal(np.array(u), ((a * a + 1).T.reshape(35)).astype(np.float16))
    # a chain longer than the small-graph limit
    x = m
    for _ in range(20):
        x = x * 1.0 + 0.0
    mx.eval(x)
    assert np.array_equal(np.array(x), a)


def test_small_eval_reports_errors():
    big = mx.zeros((3,))
    with pytest.raises(ValueError):
        mx.eval(mx.add(big, mx.zeros((4,))))


def test_eval_of_evaluated_arrays_and_nesting():
    a = mx.array([1.0, 2.0])
    mx.eval(a, [a, (a,)], {"k": a})
    assert a.tolist() == [1.0, 2.0]


def test_small_evals_from_many_threads(in_threads):
    # as in MLX, a node several threads evaluate is made on a thread-unsafe stream
    shared_stream = mx.new_thread_unsafe_stream(mx.gpu)
    base = [mx.array(np.full(16, float(i), np.float32)) for i in range(4)]
    shared = mx.multiply(base[0], base[1], stream=shared_stream)  # one pending node several threads evaluate

    def work(k):
        for j in range(300):
            x = mx.contiguous(mx.transpose(mx.reshape(base[k] * j, (4, 4))))
            mx.eval(x, shared)
            assert np.array_equal(np.array(x), np.full((4, 4), float(k * j), np.float32))

    in_threads(work)
    assert np.array_equal(np.array(shared), np.zeros(16, np.float32))


# --------------------------------------------------------- transposing copies

@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (9, 1), (3, 5), (4, 4), (25, 40), (33, 65), (64, 64), (130, 7)])
@pytest.mark.parametrize("dt", [np.float32, np.int32, np.float16, np.int64, np.uint8, np.complex64])
def test_transpose_copy(shape, dt):
    a = (RNG.standard_normal(shape) * 100).astype(dt)
    t = mx.contiguous(mx.transpose(mx.array(a)))
    assert np.array_equal(np.array(t), a.T)


@pytest.mark.parametrize("perm", [(0, 2, 1), (2, 1, 0), (1, 0, 2)])
def test_batched_transpose_copy(perm):
    a = RNG.standard_normal((3, 37, 41)).astype(np.float32)
    t = mx.contiguous(mx.transpose(mx.array(a), perm))
    assert np.array_equal(np.array(t), np.ascontiguousarray(a.transpose(perm)))


def test_transpose_copy_keeps_nan_payloads():
    bits = np.array([0x7FC00001, 0xFFC12345, 0x7F800000, 0x00000001] * 9, np.uint32).reshape(6, 6)
    a = bits.view(np.float32)
    t = mx.contiguous(mx.transpose(mx.array(a)))
    assert np.array_equal(np.array(t).view(np.uint32), bits.T)


def test_transposed_slices_copy():
    a = RNG.standard_normal((40, 50)).astype(np.float32)
    m = mx.array(a)[3:37:2, 5:45]
    t = mx.contiguous(mx.transpose(m))
    assert np.array_equal(np.array(t), a[3:37:2, 5:45].T)


# ------------------------------------------------------------- small buffers

@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 1000, 1 << 17, (1 << 18) + 3])
def test_small_and_large_buffers_hold_their_data(n):
    a = np.arange(n, dtype=np.float32)
    m = mx.array(a)
    r = mx.add(m, 1)
    mx.eval(r)
    assert np.array_equal(np.array(r), a + 1)
    if n:
        mv = memoryview(r)
        assert mv.nbytes == 4 * n
        assert np.frombuffer(mv, np.float32).ctypes.data % 64 == 0
