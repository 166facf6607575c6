"""Evaluation, memory counters, threads, devices and the module itself."""
import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1 << 20


def run_python(code, **env):
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": ROOT, **env}, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


# -------------------------------------------------------------------- eval

def test_ops_are_lazy():
    a = mx.array(np.ones((512, 1024), np.float32))  # 2 MiB, already evaluated
    base = mx.get_active_memory()
    b = a * 2 + 1
    c = mx.exp(b)
    # building the graph allocates no result buffers (only a small scalar)
    assert mx.get_active_memory() - base < 1024
    mx.eval(c)
    assert mx.get_active_memory() - base >= 2 * MB  # c; b's buffer is freed once c is done
    assert c.shape == (512, 1024) and c[0, 0].item() == pytest.approx(np.exp(3.0))


def test_eval_trees():
    a, b, c, d = (mx.array([i]) + 1 for i in range(4))
    assert mx.eval() is None
    assert mx.eval(a) is None
    assert mx.eval([b, (c, {"k": d, "x": "ignored"})], None, 3, "text") is None
    assert [x.item() for x in (a, b, c, d)] == [1, 2, 3, 4]
    # empty containers, dict keys are not arrays
    assert mx.eval([], {}, ()) is None
    e = mx.array([5]) * 2
    mx.eval({e.item() if False else "key": [[[[e]]]]})
    assert e.item() == 10


def test_eval_deep_nesting():
    x = mx.array(1) + 1
    tree = x
    for _ in range(5000):
        tree = [tree]
    mx.eval(tree)
    assert x.item() == 2


def test_eval_keywords_refused():
    with pytest.raises(TypeError):
        mx.eval(mx.array(1), stream=None)


def test_async_eval_and_synchronize():
    a = mx.array([1.0, 2.0]) * 3
    assert mx.async_eval(a) is None
    assert mx.async_eval([a, {"b": a + 1}]) is None
    assert mx.synchronize() is None
    assert mx.synchronize(mx.default_stream(mx.default_device())) is None
    assert a.tolist() == [3.0, 6.0]


def test_async_eval_error_is_raised_at_synchronize():
    # as MLX: the failure of work started by async_eval surfaces at the next
    # synchronize of its stream, once
    a = mx.linalg.inv(mx.array([[1.0, 2.0], [2.0, 4.0]]), stream=mx.cpu)
    assert mx.async_eval(a) is None
    assert mx.synchronize(mx.gpu) is None  # another stream: nothing to raise
    with pytest.raises(RuntimeError, match="LU factorization failed"):
        mx.synchronize(mx.cpu)
    assert mx.synchronize(mx.cpu) is None
    # the failed node stays unevaluated: using the array raises again
    with pytest.raises(RuntimeError, match="LU factorization failed"):
        mx.eval(a)
    # work that succeeds beside it is done
    b = mx.array([1.0, 2.0]) * 1
    c = mx.linalg.inv(mx.array([[0.0, 0.0], [0.0, 0.0]]), stream=mx.default_stream(mx.cpu))
    mx.async_eval(b, c)
    assert b.tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError):
        mx.synchronize(mx.default_stream(mx.cpu))
    with pytest.raises(TypeError):
        mx.synchronize(3)


def test_long_chain_evaluates_and_frees():
    gc.collect()
    base = mx.get_active_memory()
    x = mx.array(np.zeros(1000, np.float32))
    for _ in range(100_000):
        x = x + 1
    mx.eval(x)
    assert x[0].item() == 100_000.0
    del x
    assert mx.get_active_memory() == base
    # an unevaluated chain is freed without recursion too
    y = mx.array(1.0)
    for _ in range(100_000):
        y = y * 1.0
    del y
    assert mx.get_active_memory() == base


def test_evaluated_intermediates_are_freed():
    gc.collect()
    base = mx.get_active_memory()
    a = mx.array(np.ones(MB // 4, np.float32))  # 1 MiB
    x = a
    for _ in range(50):
        x = x + 1
    mx.eval(x)
    # only a and x remain: intermediates died as soon as they were used
    assert mx.get_active_memory() - base <= 2 * MB + 1024
    del a, x


def test_threads_evaluate_independently():
    results = {}

    def work(k):
        x = mx.array(np.full(100_000, k, np.float32))
        for _ in range(50):
            x = x * 1.0 + 1.0
        results[k] = x.tolist()[:3]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: [k + 50.0] * 3 for k in range(4)}


def test_one_thread_gives_identical_results():
    code = (
        "import mkpy as mx, numpy as np\n"
        "x = mx.array(np.linspace(-3, 3, 300001, dtype=np.float32))\n"
        "y = mx.tanh(x) * mx.exp(x / 3) + x.astype(mx.float16).astype(mx.float32) % 0.7\n"
        "z = (mx.array(np.arange(300001)) * 7919) % 10007\n"
        "print(mx.device_info()['threads'])\n"
        "print(np.array(y).tobytes().hex()[:4000], np.array(y).sum())\n"
        "print(np.array(z).sum())\n"
    )
    one = run_python(code, MKPY_NUM_THREADS="1").split("\n")
    many = run_python(code, MKPY_NUM_THREADS="4").split("\n")
    assert one[0] == "1" and many[0] == "4"
    assert one[1:] == many[1:]


# -------------------------------------------------------------------- memory

def test_memory_counters():
    gc.collect()
    base = mx.get_active_memory()
    assert isinstance(base, int) and base >= 0
    mx.reset_peak_memory()
    assert mx.get_peak_memory() == 0  # MLX's reset: 0, not the active memory
    a = mx.array(np.zeros((1024, 1024), np.float32))  # 4 MiB
    assert mx.get_active_memory() - base == 4 * MB
    b = a + 1
    mx.eval(b)
    assert mx.get_active_memory() - base == 8 * MB  # the scalar 1 died with the graph
    peak = mx.get_peak_memory()
    assert peak >= base + 8 * MB
    del a, b
    assert mx.get_active_memory() == base
    assert mx.get_peak_memory() == peak  # the peak stays until reset
    mx.reset_peak_memory()
    assert mx.get_peak_memory() == 0
    # the freed buffers wait in the buffer cache, as in MLX
    assert mx.get_cache_memory() >= 8 * MB
    assert mx.clear_cache() is None
    assert mx.get_cache_memory() == 0
    # mkpy.metal has the same counters
    assert mx.metal.get_active_memory() == mx.get_active_memory()
    assert mx.metal.get_peak_memory() == mx.get_peak_memory()
    mx.metal.reset_peak_memory()
    assert mx.metal.get_cache_memory() == 0


def test_buffer_cache_reuse_and_limit():
    gc.collect()
    mx.clear_cache()
    a = mx.arange(1 << 20, dtype=mx.float32)  # 4 MiB
    mx.eval(a)
    del a
    assert mx.get_cache_memory() == 4 * MB
    # a buffer of about the same size comes from the cache, with correct contents
    b = mx.arange(1 << 20, dtype=mx.float32)
    mx.eval(b)
    assert mx.get_cache_memory() == 0
    assert np.array_equal(np.array(b), np.arange(1 << 20, dtype=np.float32))
    # a much smaller one does not take it
    del b
    c = mx.zeros((1 << 18,), mx.float32)  # 1 MiB
    mx.eval(c)
    assert mx.get_cache_memory() == 4 * MB
    assert not np.array(c).any()
    # the limit trims the cache and bounds what it keeps
    old = mx.set_cache_limit(2 * MB)
    try:
        assert mx.get_cache_memory() == 0
        d = mx.ones((1 << 20,), mx.float32)
        mx.eval(d)
        del d
        assert mx.get_cache_memory() == 0  # 4 MiB is above the limit: unmapped
        del c
        assert mx.get_cache_memory() == 1 * MB
        assert mx.set_cache_limit(0) == 2 * MB
        assert mx.get_cache_memory() == 0
    finally:
        mx.set_cache_limit(old)
    assert mx.set_cache_limit(old) == old


def test_views_share_memory():
    gc.collect()
    base = mx.get_active_memory()
    a = mx.array(np.zeros((1024, 1024), np.float32))
    t = a.T
    s = a[::2]
    mx.eval(t, s)
    assert mx.get_active_memory() - base == 4 * MB  # views, no copies
    del a
    assert mx.get_active_memory() - base == 4 * MB  # the views keep the buffer
    del t, s
    assert mx.get_active_memory() == base


def test_memory_limits():
    limit = mx.get_memory_limit()
    assert isinstance(limit, int) and limit > 0
    old = mx.set_memory_limit(limit // 2)
    assert old == limit and mx.get_memory_limit() == limit // 2
    assert mx.set_memory_limit(limit) == limit // 2
    old_cache = mx.set_cache_limit(0)
    assert isinstance(old_cache, int)
    assert mx.set_cache_limit(old_cache) == 0
    assert mx.set_wired_limit(0) == 0
    assert mx.metal.set_wired_limit(0) == 0
    assert isinstance(mx.metal.set_memory_limit(limit), int)


# ---------------------------------------------------------------- devices

def test_device_info():
    info = mx.device_info()
    mlx_keys = {"architecture", "device_name", "max_buffer_length", "max_recommended_working_set_size",
                "memory_size", "resource_limit"}
    assert mlx_keys <= set(info)
    assert {"backend", "threads"} <= set(info)
    assert isinstance(info["device_name"], str) and isinstance(info["architecture"], str)
    assert info["memory_size"] > 0 and info["max_recommended_working_set_size"] <= info["memory_size"]
    assert isinstance(info["threads"], int) and info["threads"] >= 1
    assert mx.metal.device_info() == info


def test_metal():
    assert mx.metal.is_available() is True


def test_devices():
    assert repr(mx.cpu) == "DeviceType.cpu" and repr(mx.gpu) == "DeviceType.gpu"
    assert mx.cpu != mx.gpu
    d = mx.Device(mx.cpu)
    assert repr(d) == "Device(cpu, 0)" and d.type == mx.cpu
    assert repr(mx.Device(mx.gpu, 1)) == "Device(gpu, 1)"
    assert mx.Device(mx.cpu) == mx.Device(mx.cpu, 0)
    assert mx.Device(mx.cpu) != mx.Device(mx.gpu)
    assert mx.Device(mx.cpu) == mx.cpu
    assert mx.Device(1) == mx.Device(mx.gpu)  # an int converts, as MLX
    assert len({mx.Device(mx.cpu), mx.Device(mx.cpu, 0), mx.Device(mx.gpu)}) == 2
    with pytest.raises(TypeError):
        mx.Device("cpu")
    assert mx.is_available(mx.cpu) and mx.is_available(mx.gpu)
    assert mx.device_count(mx.gpu) == 1


def test_default_device_and_streams():
    old = mx.default_device()
    assert old == mx.Device(mx.gpu)  # as on a Mac with Metal
    try:
        mx.set_default_device(mx.cpu)
        assert mx.default_device() == mx.Device(mx.cpu)
        mx.set_default_device(mx.Device(mx.gpu, 0))
        assert mx.default_device() == mx.Device(mx.gpu)
        with pytest.raises(TypeError):
            mx.set_default_device("cpu")
        s = mx.default_stream(mx.cpu)
        # the importing thread's default streams: gpu 0, then cpu 1
        assert repr(s) == "Stream(Device(cpu, 0), 1)" and s.device == mx.Device(mx.cpu)
        assert repr(mx.default_stream(mx.gpu)) == "Stream(Device(gpu, 0), 0)"
        assert mx.default_stream(mx.Device(mx.cpu)) == s
        n1, n2 = mx.new_stream(mx.cpu), mx.new_stream(mx.gpu)
        assert n1 != n2 and n2.index == n1.index + 1
        with mx.stream(mx.cpu):
            assert mx.default_device() == mx.Device(mx.cpu)
            assert (mx.array([1]) + 1).tolist() == [2]
        assert mx.default_device() == mx.Device(mx.gpu)
        with mx.stream(n1):
            assert mx.default_device() == mx.Device(mx.cpu)
        # ops take a stream or a device (its default stream); their nodes run on it (tests/test_streams.py)
        assert mx.add(mx.array([1]), 1, stream=mx.cpu).tolist() == [2]
        assert mx.exp(mx.array([0.0]), stream=n1).tolist() == [1.0]
    finally:
        mx.set_default_device(old)


# ----------------------------------------------------------------- module

def test_version():
    v = mx.__version__
    assert isinstance(v, str) and len(v.split(".")) >= 2 and all(p.isdigit() for p in v.split(".")[:2])


def test_import_without_numpy():
    code = ("import sys; sys.modules['numpy'] = None\n"
            "import mkpy as mx\n"
            "a = mx.array([[1, 2], [3, 4]], mx.float16) * 2\n"
            "print(a.tolist(), repr(a.dtype), memoryview(a).format)\n"
            "try:\n"
            "    a.__array__()\n"
            "except ImportError:\n"
            "    print('no numpy')\n")
    out = run_python(code).strip().split("\n")
    assert out == ["[[2.0, 4.0], [6.0, 8.0]] mkpy.float16 e", "no numpy"]


def test_star_import_keeps_builtins():
    ns = {}
    exec("from mkpy import *", ns)
    assert "bool" not in ns and "float32" in ns and "array" in ns


def test_compile_gives_the_functions_outputs():
    def f(x, y):
        return mx.exp(x) * y + 1

    x, y = mx.array([0.0, 1.0, 2.0]), mx.array(2.0)
    assert mx.compile(f)(x, y).tolist() == f(x, y).tolist()

    @mx.compile
    def g(x):
        return x * 2

    assert g(x).tolist() == [0.0, 2.0, 4.0]
    assert mx.compile(shapeless=True)(g)(x).tolist() == [0.0, 2.0, 4.0]
    mx.disable_compile()
    mx.enable_compile()


def test_async_eval_inside_a_transformation():
    # MLX refuses async_eval of an array that depends on a transformation's tracer
    def fun(x):
        y = x + 1.0
        mx.async_eval(y)
        return mx.exp(y)

    with pytest.raises(ValueError, match=r"\[async_eval\] Not allowed inside a graph transformation"):
        mx.grad(fun)(mx.array(1.0))
    with pytest.raises(ValueError, match=r"\[async_eval\] Not allowed inside a graph transformation"):
        mx.vmap(fun)(mx.ones((2, 2)))

    # an array that does not depend on the tracers is evaluated as usual
    def g(x):
        c = mx.ones((3,)) * 2
        mx.async_eval(c)
        return (x * c).sum()

    assert np.array_equal(np.array(mx.grad(g)(mx.ones((3,)))), [2.0, 2.0, 2.0])
    a = mx.ones((2,)) + 1
    mx.async_eval(a)
    assert a.tolist() == [2.0, 2.0]
