"""Devices and streams as MLX's: float64 refused on GPU streams when a node is made, CPU streams
taking it, streams per thread (another thread's stream raises when evaluated), thread-local and
thread-unsafe streams, clear_streams, and the objects' reprs, equality, hashing and errors."""
import threading

import numpy as np
import pytest

import mkpy as mx

F64 = "float64 is not supported on the GPU"


def in_thread(fn):
    """Runs fn on a new thread; returns its result, or raises what it raised."""
    out = {}

    def run():
        try:
            out["r"] = fn()
        except BaseException as e:  # noqa: BLE001
            out["e"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "e" in out:
        raise out["e"]
    return out.get("r")


# ------------------------------------------------------------ float64 rule

def test_float64_refused_on_the_default_gpu_stream_when_the_node_is_made():
    assert mx.default_device() == mx.gpu
    x = mx.array([1.0, 2.0])
    with pytest.raises(ValueError) as e:
        x.astype(mx.float64)  # raises at the call, as MLX's array constructor: nothing to evaluate
    assert str(e.value) == F64
    d = mx.array([1.0, 2.0], mx.float64)  # no node: a float64 array itself is fine
    assert d.dtype == mx.float64 and d.tolist() == [1.0, 2.0] and np.array(d).dtype == np.float64
    for f in (lambda: mx.abs(d), lambda: d + 1, lambda: mx.sum(d), lambda: d.reshape(2, 1) * x,
              lambda: mx.zeros((2,), mx.float64), lambda: mx.arange(3, dtype=mx.float64),
              lambda: d.astype(mx.float32)):  # a float64 input counts too
        with pytest.raises(ValueError, match="^float64 is not supported on the GPU$"):
            f()
    with pytest.raises(ValueError, match=F64):
        mx.add(d, 1, stream=mx.gpu)
    with pytest.raises(ValueError, match=F64):
        mx.add(d, 1, stream=mx.default_stream(mx.gpu))


def test_float64_works_on_cpu_streams():
    x = mx.array([0.5, 2.0])
    d = x.astype(mx.float64, stream=mx.cpu)
    assert d.dtype == mx.float64
    assert mx.sqrt(d, stream=mx.cpu).tolist() == np.sqrt([0.5, 2.0]).tolist()
    s = mx.new_stream(mx.cpu)
    assert mx.multiply(d, d, stream=s).tolist() == [0.25, 4.0]
    assert mx.add(d, 1, stream=mx.Device(mx.cpu)).tolist() == [1.5, 3.0]
    with mx.stream(mx.cpu):
        assert mx.default_device() == mx.cpu
        y = (d * 3 + 0.1).sum()
        assert y.dtype == mx.float64 and y.item() == pytest.approx(7.7, rel=1e-15)
        z = mx.zeros((2,), mx.float64) + mx.array(1.0, mx.float64) / 3
    assert mx.default_device() == mx.gpu
    # nodes keep the stream they were made on: evaluated later, outside the context, they run
    assert z.tolist() == [1 / 3, 1 / 3]
    old = mx.default_device()
    try:
        mx.set_default_device(mx.cpu)
        assert (mx.array([1.0], mx.float64) + 0.1).item() == 1.1
    finally:
        mx.set_default_device(old)


def test_gradients_use_the_stream_of_each_primitive():
    # the backward nodes of a primitive go on its stream, as MLX's vjp: no float64 on the GPU
    # (grad's seed cotangent is a constant in the output's dtype, as MLX's array(1.0, dtype))
    def f(a):
        return mx.sum(mx.sin(a, stream=mx.cpu), stream=mx.cpu)

    a = mx.array([0.1, 0.7], mx.float64)
    g = mx.grad(f)(a)
    assert g.dtype == mx.float64
    np.testing.assert_allclose(np.array(g), np.cos([0.1, 0.7]), rtol=1e-7)  # MLX: through float
    with mx.stream(mx.cpu):
        v, t = mx.jvp(mx.exp, [a], [mx.ones_like(a)])
    np.testing.assert_allclose(np.array(t[0]), np.exp([0.1, 0.7]), rtol=1e-7)
    with pytest.raises(ValueError, match=F64):
        mx.grad(lambda a: mx.sum(mx.sin(a)))(a)


def test_linalg_cpu_only_rule_reads_the_stream():
    a = mx.array([[2.0, 1.0], [1.0, 3.0]])
    msg = r"\[linalg::inv\] This op is not yet supported on the GPU. Explicitly pass a CPU stream to run it."
    with pytest.raises(ValueError, match=msg):
        mx.linalg.inv(a)
    with pytest.raises(ValueError, match=msg):
        mx.linalg.inv(a, stream=mx.new_stream(mx.gpu))
    np.testing.assert_allclose(np.array(mx.linalg.inv(a, stream=mx.cpu)), np.linalg.inv(np.array(a)), rtol=1e-6)
    with mx.stream(mx.cpu):
        ad = a.astype(mx.float64)
        inv = mx.linalg.inv(ad)
        assert inv.dtype == mx.float64
    np.testing.assert_allclose(np.array(inv), np.linalg.inv(np.array(a, dtype=np.float64)), rtol=1e-14)


def test_stream_argument_lasts_for_its_call_only():
    d = mx.array([1.0], mx.float64)
    assert mx.add(d, 1, stream=mx.cpu).item() == 2.0
    with pytest.raises(ValueError, match=F64):
        d + 1  # back on the default stream
    with pytest.raises(ValueError, match="Invalid type str"):
        mx.add(d, "x", stream=mx.cpu)  # fails after its stream was taken
    with pytest.raises(ValueError, match=F64):
        d * 2
    assert mx.array([1.0]).astype(mx.float64, mx.cpu).dtype == mx.float64  # positional stream
    with pytest.raises(ValueError, match=F64):
        mx.negative(d)
    x = mx.array([1.0, 2.0]).astype(mx.float64, stream=mx.cpu)
    assert x.sum(stream=mx.cpu).item() == 3.0  # a method forwarding to mkpy.sum
    with pytest.raises(ValueError, match=F64):
        x.sum()


def test_bad_stream_arguments():
    x = mx.array([1.0])
    with pytest.raises(TypeError, match="stream"):
        mx.add(x, 1, stream=3)
    with pytest.raises(TypeError, match="stream"):
        mx.exp(x, stream="cpu")
    with pytest.raises(IndexError, match=r"Device\(cpu, 1\)"):
        mx.exp(x, stream=mx.Device(mx.cpu, 1))
    assert mx.exp(x, stream=None).tolist() == pytest.approx([np.e])


# ------------------------------------------------------------ the objects

def test_device_and_stream_objects():
    cpu = mx.Device(mx.cpu)
    assert repr(cpu) == str(cpu) == "Device(cpu, 0)" and cpu.type == mx.cpu and cpu.index == 0
    assert repr(mx.cpu) == "DeviceType.cpu" and repr(mx.gpu) == "DeviceType.gpu"
    assert mx.Device(mx.gpu, 0) == mx.gpu and mx.gpu == mx.Device(mx.gpu) and mx.cpu != mx.Device(mx.gpu)
    assert mx.Device(mx.cpu, 1) != mx.cpu and mx.Device(mx.cpu) != 0
    assert mx.Device(1) == mx.gpu  # the enum's values convert, as nanobind's
    assert hash(mx.Device(mx.cpu)) == hash(cpu) and len({cpu, mx.Device(mx.cpu), mx.Device(mx.gpu)}) == 2
    with pytest.raises(TypeError, match="incompatible function arguments"):
        mx.Device(5)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        mx.Device("cpu")
    s = mx.default_stream(mx.cpu)
    assert repr(s) == f"Stream(Device(cpu, 0), {s.index})" and s.device == cpu
    assert s == mx.default_stream(mx.Device(mx.cpu)) and hash(s) == hash(mx.default_stream(mx.cpu))
    n = mx.new_stream(mx.gpu)
    assert n != s and n.device == mx.gpu and n.index > s.index
    with pytest.raises(TypeError, match="no constructor defined"):
        mx.Stream(0, cpu)
    t = mx.new_thread_local_stream(mx.cpu)
    assert repr(t).startswith("ThreadLocalStream(Device(cpu, 0), ") and t.device == cpu and t == t and t != s
    for bad in (lambda: mx.default_stream(None), lambda: mx.new_stream("cpu"), lambda: mx.set_default_stream(mx.cpu),
                lambda: mx.set_default_stream(t), lambda: mx.stream(None), lambda: mx.stream(3),
                lambda: mx.StreamContext(None), lambda: mx.set_default_device("cpu")):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            bad()
    assert mx.is_available(mx.gpu) and mx.is_available(cpu) and not mx.is_available(mx.Device(mx.cpu, 1))
    assert mx.device_count(mx.cpu) == 1 and mx.device_count(mx.gpu) == 1


def test_stream_context_restores_device_and_stream():
    old_dev, old_gpu, old_cpu = mx.default_device(), mx.default_stream(mx.gpu), mx.default_stream(mx.cpu)
    n = mx.new_stream(mx.cpu)
    ctx = mx.stream(n)
    assert ctx.__enter__() is None
    try:
        assert mx.default_device() == mx.cpu and mx.default_stream(mx.cpu) == n
        with mx.stream(mx.gpu):
            assert mx.default_device() == mx.gpu and mx.default_stream(mx.gpu) == old_gpu
        assert mx.default_device() == mx.cpu and mx.default_stream(mx.cpu) == n
    finally:
        ctx.__exit__(None, None, None)
    assert mx.default_device() == old_dev and mx.default_stream(mx.gpu) == old_gpu
    # as MLX's: the stream set for the other device stays its default
    assert mx.default_stream(mx.cpu) == n
    mx.set_default_stream(old_cpu)
    with pytest.raises(ZeroDivisionError):
        with mx.stream(mx.cpu):
            1 / 0
    assert mx.default_device() == old_dev


# ------------------------------------------------------------ threads

def test_default_streams_are_per_thread():
    main_gpu, main_cpu = mx.default_stream(mx.gpu), mx.default_stream(mx.cpu)
    other = in_thread(lambda: (mx.default_stream(mx.gpu), mx.default_stream(mx.cpu)))
    assert other[0] != main_gpu and other[1] != main_cpu and other[0].device == mx.gpu
    assert mx.default_stream(mx.gpu) == main_gpu  # unchanged here

    # set_default_stream is per thread; the default device is global, as MLX's
    n = mx.new_stream(mx.gpu)
    mx.set_default_stream(n)
    try:
        assert in_thread(lambda: mx.default_stream(mx.gpu)) != n
    finally:
        mx.set_default_stream(main_gpu)


def test_another_threads_stream_raises_when_evaluated():
    s = mx.new_stream(mx.default_device())

    def use():
        with mx.stream(s):
            y = 2 * mx.arange(10)  # made: nodes record the stream
        mx.eval(y)

    with pytest.raises(RuntimeError) as e:
        in_thread(use)
    assert str(e.value) == f"There is no Stream(gpu, {s.index}) in current thread."
    assert (2 * mx.arange(3, stream=s)).tolist() == [0, 2, 4]  # fine on its own thread

    lazy = mx.arange(4) * 3  # on the main thread's default stream
    with pytest.raises(RuntimeError, match=r"There is no Stream\(gpu, \d+\) in current thread\."):
        in_thread(lambda: mx.eval(lazy))
    assert lazy.tolist() == [0, 3, 6, 9]
    assert in_thread(lambda: (lazy + 1).tolist()) == [1, 4, 7, 10]  # evaluated: no stream needed

    made = in_thread(lambda: mx.arange(3) + 1)  # another thread's lazy node
    with pytest.raises(RuntimeError, match="in current thread"):
        mx.eval(made)


def test_thread_unsafe_stream_is_usable_everywhere():
    u = mx.new_thread_unsafe_stream(mx.gpu)
    with mx.stream(u):
        shared = mx.exp(mx.array([0.0, 1.0])) * 2
    results = [in_thread(lambda: (shared + 1).tolist()) for _ in range(2)]
    assert results[0] == results[1] == pytest.approx([3.0, 2 * np.e + 1])


def test_thread_local_stream_is_a_stream_per_thread():
    t = mx.new_thread_local_stream(mx.default_device())
    seen = []

    def work(k):
        with mx.stream(t):
            seen.append(mx.default_stream(mx.gpu))
            x = mx.arange(5) + k
            mx.eval(2 * x)
            assert x.tolist() == [k, k + 1, k + 2, k + 3, k + 4]
            again = mx.default_stream(mx.gpu)
        mx.clear_streams()
        return again

    a = in_thread(lambda: work(1))
    b = in_thread(lambda: work(2))
    assert seen == [a, b] and a != b
    with mx.stream(t):
        mine = mx.default_stream(mx.gpu)
        assert (mx.arange(2) * 5).tolist() == [0, 5]
    with mx.stream(t):
        assert mx.default_stream(mx.gpu) == mine  # the same stream again on this thread
    assert mine not in (a, b)


def test_clear_streams_destroys_this_threads_streams():
    def work():
        s = mx.default_stream(mx.gpu)
        assert (mx.arange(3) + 1).tolist() == [1, 2, 3]
        mx.clear_streams()
        assert mx.default_stream(mx.gpu) == s  # still the default, as MLX: but gone
        try:
            mx.eval(mx.arange(3) + 1)
        except RuntimeError as e:
            return s, str(e)
        return s, None

    s, err = in_thread(work)
    assert err == f"There is no Stream(gpu, {s.index}) in current thread."
    assert (mx.arange(3) + 1).tolist() == [1, 2, 3]  # other threads keep theirs


def test_dlpack_stream_is_not_an_mlx_stream():
    # DLPack's `stream` names a device queue: passed through, not resolved as MLX's
    a = mx.array([1.0, 2.0])
    assert a.__dlpack__(stream=None) is not None
    assert np.from_dlpack(a).tolist() == [1.0, 2.0]
