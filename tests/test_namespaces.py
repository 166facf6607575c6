"""Namespaces MLX code reaches for: mkpy.cuda, mkpy.distributed (a singleton group when no
backend is configured), devices and per-thread streams, and mkpy.contiguous."""
import gc
import threading

import numpy as np
import pytest

import mkpy as mx


# ------------------------------------------------------------------ cuda

def test_cuda():
    assert mx.cuda.is_available() is False
    import mkpy.cuda
    assert mkpy.cuda.is_available is mx.cuda.is_available
    from mkpy.distributed import Group, init
    assert isinstance(init(), Group) and mx.distributed.Group is Group
    with pytest.raises(TypeError):
        mx.cuda.is_available(1)


# ----------------------------------------------------------- distributed

def test_distributed_init_singleton():
    import ctypes.util
    # MPI is available where Open MPI's libmpi is installed (make deps); this process was not
    # started by mpirun, so init() still gives the group of one
    has_mpi = ctypes.util.find_library("mpi") is not None
    assert mx.distributed.is_available() is has_mpi and mx.distributed.is_available(backend="mpi") is has_mpi
    assert mx.distributed.is_available("ring") is False and mx.distributed.is_available("nccl") is False
    g = mx.distributed.init()
    assert isinstance(g, mx.distributed.Group)
    assert g.rank() == 0 and g.size() == 1
    for kw in ({"strict": False}, {"backend": "any"}, {"strict": False, "backend": "mpi"}):
        h = mx.distributed.init(**kw)
        assert (h.rank(), h.size()) == (0, 1)
    assert mx.distributed.init(False, "ring").size() == 1  # positional, as MLX


def test_distributed_init_errors():
    with pytest.raises(ValueError, match=r"\[distributed\] The only valid values for backend are 'any', "
                                         r"'mpi', 'nccl', 'jaccl' and 'ring' but 'tcp' was provided."):
        mx.distributed.init(backend="tcp")
    with pytest.raises(RuntimeError, match=r"\[distributed\] Couldn't initialize any backend"):
        mx.distributed.init(strict=True)
    with pytest.raises(RuntimeError, match="mpi"):
        mx.distributed.init(True, "mpi")
    with pytest.raises(ValueError, match="all_gather_factory is only supported with backend='jaccl'"):
        mx.distributed.init(all_gather_factory=lambda r, s: None)
    with pytest.raises(TypeError):
        mx.distributed.init(backend=1)
    with pytest.raises(TypeError):
        mx.distributed.Group()


def test_group_split():
    g = mx.distributed.init()
    with pytest.raises(RuntimeError, match="Cannot split the distributed group further."):
        g.split(0)
    with pytest.raises(RuntimeError, match="Cannot split"):
        g.split(color=1, key=0)
    with pytest.raises(TypeError):
        g.split()
    with pytest.raises(TypeError):
        g.split("a")


@pytest.mark.parametrize("name", ["all_sum", "all_max", "all_min", "all_gather"])
def test_collectives_size_one(name):
    f = getattr(mx.distributed, name)
    g = mx.distributed.init()
    x = mx.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    for y in (f(x), f(x, group=g), f(x, group=None, stream=mx.cpu), f(x, stream=mx.gpu)):
        assert y.shape == x.shape and y.dtype == x.dtype
        np.testing.assert_array_equal(np.array(y), np.array(x))
    # scalars convert as MLX's ScalarOrArray
    s = f(3)
    assert s.dtype == mx.int32 and s.item() == 3 and s.ndim == 0
    assert f(2.5).dtype == mx.float32
    # a lazy input stays lazy and evaluates to the same values
    z = f(x * 2 + 1)
    np.testing.assert_array_equal(np.array(z), np.arange(12).reshape(3, 4) * 2 + 1)
    with pytest.raises(TypeError):
        f(x, g)  # group is keyword-only
    with pytest.raises(TypeError):
        f(x, group=1)
    with pytest.raises(TypeError):
        f()


def test_send_recv_singleton():
    x = mx.array([1.0, 2.0])
    g = mx.distributed.init()
    with pytest.raises(ValueError, match="Cannot send to a singleton group"):
        mx.distributed.send(x, 0)
    with pytest.raises(ValueError, match="Cannot send to a singleton group"):
        mx.distributed.send(x, dst=0, group=g, stream=mx.cpu)
    with pytest.raises(ValueError, match="Cannot recv from a singleton group"):
        mx.distributed.recv((2,), mx.float32, 0)
    with pytest.raises(ValueError, match="Cannot recv from a singleton group"):
        mx.distributed.recv(shape=[2, 3], dtype=mx.int32, src=0, group=g)
    with pytest.raises(ValueError, match="Cannot recv from a singleton group"):
        mx.distributed.recv_like(x, 0)
    with pytest.raises(ValueError, match="Cannot recv from a singleton group"):
        mx.distributed.recv_like(x, src=0, group=g)
    with pytest.raises(TypeError):
        mx.distributed.send(x)
    with pytest.raises(TypeError):
        mx.distributed.recv((2,), "float32", 0)
    with pytest.raises(TypeError):
        mx.distributed.recv_like(x, 0, g)  # group is keyword-only


def test_distributed_threads():
    out = []

    def work():
        g = mx.distributed.init()
        out.append((g.size(), mx.distributed.all_sum(mx.array([1, 2]), group=g).tolist()))

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert out == [(1, [1, 2])] * 4


# ------------------------------------------------------- devices, streams

def test_default_device_names():
    # MLX has no get_default_device (guide 003's snippet fails on a Mac, and here too)
    assert not hasattr(mx, "get_default_device")
    old = mx.default_device()
    try:
        mx.set_default_device(mx.cpu)
        assert mx.default_device() == mx.Device(mx.cpu)
        with pytest.raises(TypeError):
            mx.set_default_device(None)
    finally:
        mx.set_default_device(old)
    assert mx.Device(mx.cpu).type == mx.cpu and mx.Device(mx.gpu, 0).index == 0


def test_set_default_stream_and_context():
    old_dev = mx.default_device()
    old_cpu = mx.default_stream(mx.cpu)
    s = mx.new_stream(mx.cpu)
    assert isinstance(s, mx.Stream) and s.device == mx.Device(mx.cpu) and s != old_cpu
    try:
        mx.set_default_stream(s)
        assert mx.default_stream(mx.cpu) == s
        assert mx.default_device() == old_dev  # the default device is unchanged
        with pytest.raises(TypeError):
            mx.set_default_stream(mx.cpu)
    finally:
        mx.set_default_stream(old_cpu)
    # the context manager sets device and stream, and restores both, also on an exception
    gpu_default = mx.default_stream(mx.gpu)
    with mx.stream(s) as ctx:
        assert ctx is None  # MLX's __enter__ returns None
        assert mx.default_device() == mx.Device(mx.cpu) and mx.default_stream(mx.cpu) == s
    # as MLX's StreamContext: on exit the default device and *its* default stream are restored;
    # the stream set for another device stays its default
    assert mx.default_device() == old_dev and mx.default_stream(old_dev) == mx.default_stream(mx.gpu)
    assert mx.default_stream(mx.cpu) == s
    mx.set_default_stream(old_cpu)
    mx.set_default_device(mx.cpu)
    try:
        with mx.stream(s):
            assert mx.default_stream(mx.cpu) == s
        assert mx.default_stream(mx.cpu) == old_cpu  # same device: restored
    finally:
        mx.set_default_device(old_dev)
    with pytest.raises(KeyError):
        with mx.stream(mx.cpu):
            assert mx.default_device() == mx.cpu
            raise KeyError
    assert mx.default_device() == old_dev and mx.default_stream(mx.gpu) == gpu_default
    with mx.stream(mx.cpu):
        with mx.stream(mx.new_stream(mx.gpu)) as inner:
            assert mx.default_device() == mx.gpu
        assert mx.default_device() == mx.cpu
        assert (mx.array([1.5]) * 2).tolist() == [3.0]
    assert mx.default_device() == old_dev
    with pytest.raises(TypeError, match="incompatible function arguments"):  # as MLX 0.32's binding
        mx.stream(None)
    with pytest.raises(TypeError):
        mx.stream("cpu")
    del inner


def test_streams_are_per_thread():
    main = mx.default_stream(mx.cpu)
    s = mx.new_stream(mx.cpu)
    mx.set_default_stream(s)
    seen = {}

    def work():
        seen["first"] = mx.default_stream(mx.cpu)
        seen["again"] = mx.default_stream(mx.cpu)
        mx.set_default_stream(mx.new_stream(mx.cpu))
        seen["set"] = mx.default_stream(mx.cpu)

    try:
        t = threading.Thread(target=work)
        t.start()
        t.join()
        # the other thread neither sees this thread's default nor changes it
        assert seen["first"] != s and seen["first"] != main and seen["first"] == seen["again"]
        assert seen["set"] != seen["first"]
        assert mx.default_stream(mx.cpu) == s
    finally:
        mx.set_default_stream(main)
    assert mx.default_stream(mx.cpu) == main


@pytest.mark.parametrize("call", [
    lambda st: mx.add(mx.array([1]), 2, stream=st),
    lambda st: mx.sum(mx.array([1, 2]), stream=st),
    lambda st: mx.reshape(mx.array([1, 2]), (2, 1), stream=st),
    lambda st: mx.zeros((2,), stream=st),
    lambda st: mx.matmul(mx.ones((2, 2)), mx.ones((2, 2)), stream=st),
    lambda st: mx.sort(mx.array([2, 1]), stream=st),
    lambda st: mx.take(mx.array([2, 1]), mx.array([0]), stream=st),
    lambda st: mx.random.normal((2,), stream=st),
    lambda st: mx.contiguous(mx.array([1]), stream=st),
    lambda st: mx.distributed.all_sum(mx.array([1]), stream=st),
])
def test_ops_take_stream(call):
    for st in (None, mx.cpu, mx.gpu, mx.Device(mx.cpu), mx.new_stream(mx.cpu), mx.default_stream(mx.gpu)):
        assert isinstance(call(st), mx.array)


# ------------------------------------------------------------ contiguous

def test_contiguous():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = mx.array(a)
    for view, ref in ((x, a), (x.T, a.T), (x[:, ::2], a[:, ::2]), (mx.transpose(x, (1, 0, 2)), a.transpose(1, 0, 2)),
                      (mx.broadcast_to(mx.array([1.0, 2.0]), (3, 2)), np.broadcast_to([1.0, 2.0], (3, 2)))):
        for col in (False, True):
            y = mx.contiguous(view, col)
            assert y.shape == view.shape and y.dtype == view.dtype
            np.testing.assert_array_equal(np.array(y), ref)
    y = mx.contiguous(x.T, allow_col_major=False)
    # row-contiguous: its buffer reads back in row-major order
    assert np.frombuffer(memoryview(y), dtype=np.float32).tolist() == a.T.ravel().tolist()
    assert mx.contiguous(mx.array([1, 2]), allow_col_major=True).tolist() == [1, 2]
    assert mx.contiguous(mx.array(3)).item() == 3
    assert mx.contiguous(mx.array(np.zeros((0, 3)))).shape == (0, 3)
    assert mx.contiguous(mx.array([1, 2], mx.int8)).dtype == mx.int8
    with pytest.raises(TypeError):
        mx.contiguous()
    with pytest.raises((TypeError, ValueError)):
        mx.contiguous([1, 2])


def test_contiguous_shares_or_copies():
    # a row-contiguous input is not copied: the active memory does not grow
    x = mx.arange(1024 * 1024, dtype=mx.float32).reshape(1024, 1024)
    mx.eval(x)
    gc.collect()
    before = mx.get_active_memory()
    y = mx.contiguous(x)
    mx.eval(y)
    assert mx.get_active_memory() - before < 1024 * 1024
    # a transposed one is copied (4 MB more)
    z = mx.contiguous(x.T)
    mx.eval(z)
    assert mx.get_active_memory() - before >= 4 * 1024 * 1024
    # allowing column-major, the transpose is not copied
    w = mx.contiguous(x.T, True)
    mx.eval(w)
    assert mx.get_active_memory() - before < 5 * 1024 * 1024
    del y, z, w
