"""Threads (docs/design.md "Threads"): any number of Python threads build,
evaluate and read arrays at once, sharing inputs and lazy results, calling ops
and kernels. A primitive that two threads need runs once, on one of them, and
both see its result (or its error). Threads that exit leave no stacks behind.

Every result is checked against NumPy. The stress tests are bounded in time
(they loop until a deadline, after a minimum number of rounds), never timed."""
import os
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

import mkpy as mx

# where the mkpy under test lives (the tree, or `make tsan`'s separate build)
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(mx.__file__)))
UNDER_TSAN = "libtsan" in os.environ.get("LD_PRELOAD", "")

PLAIN = mx.fast.metal_kernel(name="thr_axpb", input_names=["x"], output_names=["y"], source="""
    uint i = thread_position_in_grid.x;
    y[i] = x[i] * 2.0f + 1.0f;""")

TREE_SOURCE = """
    threadgroup float s[1024];
    uint l = thread_position_in_threadgroup.x, n = threads_per_threadgroup.x;
    float v = x[thread_position_in_grid.x];
    float w = simd_sum(v);
    if (thread_index_in_simdgroup == 0) z[thread_position_in_grid.x / 32] = w;
    s[l] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint h = n / 2; h > 0; h >>= 1) {
        if (l < h) s[l] += s[l + h];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (l == 0) y[threadgroup_position_in_grid.x] = s[0];"""
TREE = mx.fast.metal_kernel(name="thr_tree_sum", input_names=["x"], output_names=["y", "z"], source=TREE_SOURCE)


def plain(x):
    y, = PLAIN(inputs=[x], grid=(x.size, 1, 1), threadgroup=(64, 1, 1), output_shapes=[x.shape],
               output_dtypes=[mx.float32])
    return y


def tree(x, tg):
    """Sums of each threadgroup (tree reduction with barriers) and of each SIMD-group (simd_sum)."""
    return TREE(inputs=[x], grid=(x.size, 1, 1), threadgroup=(tg, 1, 1),
                output_shapes=[(x.size // tg,), (x.size // 32,)], output_dtypes=[mx.float32, mx.float32])


def new_kernel():
    """A kernel no cache has seen: its source carries a fresh constant."""
    c = uuid.uuid4().int % 1000
    k = mx.fast.metal_kernel(name="thr_new_%s" % uuid.uuid4().hex[:8], input_names=["x"], output_names=["y"],
                             source="uint i = thread_position_in_grid.x; y[i] = x[i] + %d.0f;" % c)
    return k, c


# As in MLX, a thread can evaluate only nodes of its own streams or of thread-unsafe ones: the
# graphs these tests share between threads are built on one thread-unsafe stream, by every thread
SHARED = mx.new_thread_unsafe_stream(mx.gpu)


@pytest.fixture(autouse=True)
def _shared_stream():
    with mx.stream(SHARED):
        yield


def run_threads(fns, timeout=120):
    """Runs each fn on its own thread (on the shared stream); re-raises the first failure."""
    errors = []

    def wrap(fn):
        try:
            with mx.stream(SHARED):
                fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    assert not any(t.is_alive() for t in ts), "a thread hangs"
    if errors:
        raise errors[0]


def warm():
    x = mx.array(np.arange(2048, dtype=np.float32))
    mx.eval(plain(x), *tree(x, 256))


def test_the_cooperative_kernel_runs_on_the_lockstep_engine(capfd):
    # (the short-lived thread test below runs it on both engines)
    if os.environ.get("MKPY_ENGINE") == "fibers":
        pytest.skip("MKPY_ENGINE=fibers")
    x = mx.ones(1024)
    mx.eval(*TREE(inputs=[x], grid=(1024, 1, 1), threadgroup=(1024, 1, 1), output_shapes=[(1,), (32,)],
                  output_dtypes=[mx.float32, mx.float32], verbose=True))
    assert "`thr_tree_sum` runs on the lockstep engine" in capfd.readouterr().out


@pytest.fixture(scope="module", autouse=True)
def compiled_kernels():
    warm()  # the cached kernels of the stress tests compile once, here


# ---------------------------------------------------------------- one graph, many threads

def test_four_threads_evaluate_one_graph_100_times():
    rng = np.random.default_rng(0)
    for r in range(100):
        a = rng.standard_normal((32, 32)).astype(np.float32)
        x = mx.array(a)
        # well-conditioned: the values stay near 10 (a sum over axis 0 would grow them to ~1e5,
        # where sin amplifies the BLAS kernel's rounding past any tolerance); the reference is float64
        y = mx.exp(x) @ x + 1
        for _ in range(3):
            y = mx.sin(y) * 2 - mx.mean(y, axis=0)
        a64 = a.astype(np.float64)
        ref = np.exp(a64) @ a64 + 1
        for _ in range(3):
            ref = np.sin(ref) * 2 - ref.mean(axis=0)
        start = threading.Barrier(4)
        seen = [None] * 4

        def one(i):
            start.wait()
            mx.eval(y)
            seen[i] = np.array(y)

        run_threads([lambda i=i: one(i) for i in range(4)])
        for s in seen:
            np.testing.assert_array_equal(s, seen[0])
        np.testing.assert_allclose(seen[0], ref, rtol=1e-4, atol=1e-3)


def test_a_node_two_threads_need_runs_once():
    # every run of a kernel node looks it up in the in-memory cache once
    x = mx.array(np.arange(4096, dtype=np.float32))
    for _ in range(20):
        y = plain(x) + 1
        before = mx.metal.kernel_cache_info()["memory_hits"]
        start = threading.Barrier(4)

        def one():
            start.wait()
            mx.eval(y)

        run_threads([one] * 4)
        assert mx.metal.kernel_cache_info()["memory_hits"] - before == 1
        np.testing.assert_array_equal(np.array(y), np.arange(4096, dtype=np.float32) * 2 + 2)


WILD = mx.fast.metal_kernel(name="thr_wild", input_names=["x"], output_names=["y"], source="""
    uint i = thread_position_in_grid.x;
    y[i + (1ul << 40)] = x[i];""")


def test_a_failure_is_seen_by_every_thread_and_the_graph_stays_usable():
    x = mx.array(np.ones(256, np.float32))
    bad, = WILD(inputs=[x], grid=(256, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(256,)],
                output_dtypes=[mx.float32])
    y = bad + 1
    good = mx.exp(x) * 3
    start = threading.Barrier(4)
    messages = [None] * 4

    def one(i):
        start.wait()
        try:
            mx.eval(y)
        except RuntimeError as e:
            messages[i] = str(e)

    run_threads([lambda i=i: one(i) for i in range(4)])
    assert all(m and "Kernel `thr_wild` made an invalid memory access" in m for m in messages), messages
    with pytest.raises(RuntimeError, match="invalid memory access"):
        mx.eval(y)  # still unevaluated: raises again
    np.testing.assert_allclose(np.array(good), np.exp(np.ones(256)) * 3, rtol=1e-6)


def test_threads_share_lazy_intermediates():
    # a shared lazy base, and each thread's own graph on top of it
    a = np.linspace(0, 2, 4096, dtype=np.float32)
    base = mx.tanh(mx.array(a)) * 3
    results = [None] * 6

    def one(i):
        z = mx.sum(base * (i + 1)) + mx.max(base)
        results[i] = z.item()

    run_threads([lambda i=i: one(i) for i in range(6)])
    b = np.tanh(a) * 3
    for i, v in enumerate(results):
        assert v == pytest.approx(float((b * (i + 1)).sum() + b.max()), rel=1e-4)


def test_rebinding_an_array_while_others_read_it():
    # x[0] = v replaces the Python object's array; readers hold what they read
    x = mx.zeros((64, 64)) + 5
    stop = time.monotonic() + 1.5

    def writer():
        i = 0
        while time.monotonic() < stop:
            x[0] = i
            i += 1

    def reader():
        n = 0
        while time.monotonic() < stop or n < 20:
            v = np.array(x)
            assert (v[1:] == 5).all()
            assert (v[0] == v[0, 0]).all()
            assert float(x[1, 1].item()) == 5.0
            assert "5" in repr(x)
            n += 1

    run_threads([writer, reader, reader, reader])


# ---------------------------------------------------------------- the GIL

def test_the_gil_is_released_while_a_kernel_compiles():
    k, c = new_kernel()
    x = mx.array(np.arange(64, dtype=np.float32))
    done = threading.Event()
    result = {}

    def compile_it():
        y, = k(inputs=[x], grid=(64, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(64,)],
               output_dtypes=[mx.float32])
        mx.eval(y)
        result["y"] = np.array(y)
        done.set()

    before = mx.metal.kernel_cache_info()["compiles"]
    t = threading.Thread(target=compile_it)
    t.start()
    spins = 0
    while not done.is_set():  # pure Python: runs only while the compiling thread lets go of the GIL
        spins += 1
    t.join()
    assert mx.metal.kernel_cache_info()["compiles"] == before + 1
    np.testing.assert_array_equal(result["y"], np.arange(64) + c)
    assert spins > 10000


# ---------------------------------------------------------------- the pool

def test_two_threads_submit_parallel_work_at_once():
    # both run parallel ops over the pool (one holds it, the other runs its
    # slices itself): neither waits for the other, both are right
    a = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)
    x = mx.array(a)
    stop = time.monotonic() + 2

    def worker(scale):
        n = 0
        while time.monotonic() < stop or n < 5:
            s = mx.sum(mx.exp(x * scale)).item()
            assert s == pytest.approx(float(np.exp(a.astype(np.float64) * scale).sum()), rel=1e-4)
            t, _ = tree(x[:4096] * scale, 1024)
            np.testing.assert_allclose(np.array(t), (a[:4096] * scale).reshape(4, 1024).sum(1), rtol=1e-4,
                                       atol=1e-3)
            n += 1

    run_threads([lambda: worker(0.5), lambda: worker(0.25)])


# ---------------------------------------------------------------- stress

def test_stress_8_threads_ops_shared_graphs_kernels_and_compiles():
    rng = np.random.default_rng(2)
    shared_np = rng.standard_normal((64, 64)).astype(np.float32)
    shared = mx.array(shared_np)
    lazy = mx.softmax(shared @ shared.T, axis=-1) * 4  # shared, unevaluated
    lazy_ref = np.exp(shared_np @ shared_np.T - (shared_np @ shared_np.T).max(-1, keepdims=True))
    lazy_ref = lazy_ref / lazy_ref.sum(-1, keepdims=True) * 4
    deadline = time.monotonic() + 6
    counts = [0] * 8

    def worker(i):
        r = np.random.default_rng(100 + i)
        compiles = 1 if i in (3, 6) else 0  # two threads each compile one new kernel
        n = 0
        while n < 12 or (time.monotonic() < deadline and n < 400):
            kind = (n + i) % 6
            if kind == 0:
                a = r.standard_normal((17, 33)).astype(np.float32)
                b = r.standard_normal((33,)).astype(np.float32)
                got = mx.maximum(mx.array(a) * mx.array(b), 0) - mx.mean(mx.array(a), axis=1, keepdims=True)
                ref = np.maximum(a * b, 0) - a.mean(axis=1, keepdims=True)
                np.testing.assert_allclose(np.array(got), ref, rtol=1e-5, atol=1e-5)
            elif kind == 1:
                np.testing.assert_allclose(np.array(lazy), lazy_ref, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(np.array(mx.sum(lazy, axis=1)), np.full(64, 4), rtol=1e-4)
            elif kind == 2:
                a = r.standard_normal(2048).astype(np.float32)
                np.testing.assert_array_equal(np.array(plain(mx.array(a))), a * 2 + 1)
            elif kind == 3:
                a = r.integers(-50, 50, 2048).astype(np.float32)
                tg = 256 if n % 2 else 1024
                y, z = tree(mx.array(a), tg)
                np.testing.assert_array_equal(np.array(y), a.reshape(-1, tg).sum(1))
                np.testing.assert_array_equal(np.array(z), a.reshape(-1, 32).sum(1))
            elif kind == 4:
                a = r.standard_normal((48, 40)).astype(np.float32)
                b = r.standard_normal((40, 24)).astype(np.float32)
                np.testing.assert_allclose(np.array(mx.array(a) @ mx.array(b)), a @ b, rtol=1e-4, atol=1e-4)
            elif compiles:
                k, c = new_kernel()
                a = r.standard_normal(128).astype(np.float32)
                y, = k(inputs=[mx.array(a)], grid=(128, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(128,)],
                       output_dtypes=[mx.float32])
                np.testing.assert_array_equal(np.array(y), a + np.float32(c))
                compiles -= 1
            n += 1
        counts[i] = n

    run_threads([lambda i=i: worker(i) for i in range(8)], timeout=300)
    assert min(counts) >= 12


def test_six_threads_cooperative_kernels_new_compiles_and_matmuls():
    rng = np.random.default_rng(3)
    deadline = time.monotonic() + 4

    def coop(i):
        n = 0
        while n < 10 or time.monotonic() < deadline:
            a = rng.integers(-9, 9, 4096).astype(np.float32)
            y, z = tree(mx.array(a), 1024)
            np.testing.assert_array_equal(np.array(y), a.reshape(4, 1024).sum(1))
            np.testing.assert_array_equal(np.array(z), a.reshape(-1, 32).sum(1))
            n += 1

    def compile_new():
        k, c = new_kernel()
        a = np.arange(96, dtype=np.float32)
        y, = k(inputs=[mx.array(a)], grid=(96, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(96,)],
               output_dtypes=[mx.float32])
        np.testing.assert_array_equal(np.array(y), a + c)

    def matmul(i):
        r = np.random.default_rng(10 + i)
        n = 0
        while n < 10 or time.monotonic() < deadline:
            a = r.standard_normal((96, 64)).astype(np.float32)
            b = r.standard_normal((64, 80)).astype(np.float32)
            np.testing.assert_allclose(np.array(mx.array(a) @ mx.array(b)), a @ b, rtol=1e-4, atol=1e-4)
            n += 1

    run_threads([lambda: coop(0), lambda: coop(1), compile_new, compile_new, lambda: matmul(0),
                 lambda: matmul(1)], timeout=300)


# ---------------------------------------------------------------- per-thread resources

SHORT_LIVED = r"""
import sys, threading
import numpy as np
import mkpy as mx
k = mx.fast.metal_kernel(name="thr_tree_sum", input_names=["x"], output_names=["y", "z"], source=sys.argv[2])
x = mx.ones(1024)
def call():
    y, z = k(inputs=[x], grid=(1024, 1, 1), threadgroup=(1024, 1, 1), output_shapes=[(1,), (32,)],
             output_dtypes=[mx.float32, mx.float32])
    assert y.item() == 1024.0 and (np.array(z) == 32).all()
def stats():
    maps = sum(1 for _ in open("/proc/self/maps"))
    vm = [l for l in open("/proc/self/status") if l.startswith("VmSize")][0].split()[1]
    return maps, int(vm) // 1024
import os, time
def thread():
    t = threading.Thread(target=call)
    t.start()
    t.join()
    # join() returns before the OS thread is gone: wait for it, so that its
    # exit (key destructors, glibc's arena and stack caches) is complete and
    # the next thread reuses what it left instead of making its own
    t = time.monotonic() + 2
    while len(os.listdir("/proc/self/task")) > TASKS and time.monotonic() < t:
        time.sleep(0.0001)
y, z = k(inputs=[x], grid=(1024, 1, 1), threadgroup=(1024, 1, 1), output_shapes=[(1,), (32,)],
         output_dtypes=[mx.float32, mx.float32], verbose=True)  # says which engine runs it
mx.eval(y)
call()  # starts the pool's workers
TASKS = len(os.listdir("/proc/self/task"))
for _ in range(10):  # the first threads make malloc arenas and thread stacks that later ones reuse
    thread()
start = stats()
for _ in range(int(sys.argv[1])):
    thread()
print(*start, *stats())
"""


@pytest.mark.skipif(UNDER_TSAN, reason="ThreadSanitizer's shadow memory hides the address space measured here")
def test_1000_short_lived_threads_leave_no_stacks():
    # one process per engine, run side by side: the default (lockstep) and
    # fibers, which make a 132 KiB stack per GPU thread
    procs = {}
    for engine in ["lockstep", "fibers"]:
        env = dict(os.environ, PYTHONPATH=PKG_PARENT)
        env.pop("MKPY_ENGINE", None)
        if engine == "fibers":
            env["MKPY_ENGINE"] = "fibers"
        procs[engine] = subprocess.Popen([sys.executable, "-c", SHORT_LIVED, "1000", TREE_SOURCE], env=env,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PKG_PARENT)
    try:
        outs = {engine: p.communicate(timeout=300) for engine, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    for engine, p in procs.items():
        out, err = outs[engine]
        assert p.returncode == 0, (engine, err)
        assert ("`thr_tree_sum` runs on fibers" if engine == "fibers" else
                "`thr_tree_sum` runs on the lockstep engine") in out, out
        maps0, vm0, maps1, vm1 = map(int, out.splitlines()[-1].split())
        # before: each thread kept 8 MiB and 2 mappings (lockstep), or also
        # 2,048 mappings and 150 MiB of fiber stacks (fibers)
        assert maps1 - maps0 <= 16, (engine, maps0, maps1)
        assert vm1 - vm0 <= 16, (engine, vm0, vm1)  # MiB
