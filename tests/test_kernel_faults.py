"""Faults in kernel code (issue #11): stray stores and loads, integer division, traps, global
constructors, Ctrl-C and the watchdog. None of them ends the process or changes another array."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.basename(__file__)
BARRIER = "threadgroup_barrier(mem_flags::mem_threadgroup);"

PLUS_ONE = mx.fast.metal_kernel(name="plus_one", input_names=["x"], output_names=["out"], source="""
    uint i = thread_position_in_grid.x;
    out[i] = x[i] + 1;
""")


def plus_one(x, grid):
    return PLUS_ONE(inputs=[x], output_shapes=[x.shape], output_dtypes=[mx.float32], grid=(grid, 1, 1),
                    threadgroup=(256, 1, 1))[0]


def still_works():
    """The library is usable: a kernel and an op give the right numbers."""
    x = mx.arange(300, dtype=mx.float32)
    np.testing.assert_array_equal(np.array(plus_one(x, 300)), np.arange(300, dtype=np.float32) + 1)
    assert mx.sum(x * 2).item() == 300 * 299


def test_the_guides_missing_bounds_check_is_an_error():
    """`out[i] = x[i] + 1` on 1000 floats with a grid of 1024 aborted the process (heap corruption)."""
    neighbours = [mx.full((1000,), float(k), mx.float32) for k in range(4)]
    mx.eval(*neighbours)
    x = mx.arange(1000, dtype=mx.float32)
    for _ in range(2):  # a fresh and a reused staging block
        o, = PLUS_ONE(inputs=[x], output_shapes=[x.shape], output_dtypes=[mx.float32], grid=(1024, 1, 1),
                      threadgroup=(256, 1, 1))
        line = sys._getframe().f_lineno - 2
        with pytest.raises(RuntimeError) as e:
            mx.eval(o)
        msg = str(e.value)
        assert "Kernel `plus_one`" in msg and "past the end of its output `out`" in msg, msg
        assert "of a buffer of 1000 4-byte elements" in msg, msg
        assert f"{HERE}:{line}" in msg, msg
        with pytest.raises(RuntimeError):  # the failed array raises again
            mx.eval(o)
    for k, n in enumerate(neighbours):
        np.testing.assert_array_equal(np.array(n), np.full(1000, k, np.float32))
    np.testing.assert_array_equal(np.array(x), np.arange(1000, dtype=np.float32))
    still_works()


@pytest.mark.parametrize("n", [1, 3, 5, 999, 1001, 4093, 1024 * 1024 // 4 - 1])
def test_odd_small_sizes(n):
    """Every small size: the buffer ends where the guard begins (or within 16 bytes of it, which
    the check after the launch covers)."""
    x = mx.zeros((n,), mx.float32)
    with pytest.raises(RuntimeError, match=r"past the end of its output `out`"):
        mx.eval(plus_one(x, n + 1))
    np.testing.assert_array_equal(np.array(plus_one(x, n)), np.ones(n, np.float32))


def test_overshoot_past_a_large_buffer_is_an_error_and_the_neighbour_is_unchanged():
    """1M+10 floats: the overshoot went into the mapping's last page and was silently accepted."""
    n = (1 << 20) + 10
    before = mx.full((n,), 7.0, mx.float32)
    x = mx.zeros((n,), mx.float32)
    after = mx.full((n,), 9.0, mx.float32)
    mx.eval(before, x, after)
    for grid in (n + 1, n + 246, n + 5000):
        with pytest.raises(RuntimeError) as e:
            mx.eval(plus_one(x, grid))
        msg = str(e.value)
        assert "past the end of its output `out`" in msg and f"buffer of {n} 4-byte elements" in msg, msg
    assert (np.array(before) == 7).all() and (np.array(after) == 9).all()
    np.testing.assert_array_equal(np.array(plus_one(x, n)), np.ones(n, np.float32))


def test_stores_before_the_start_are_errors():
    k = mx.fast.metal_kernel(name="store_before", input_names=["x", "back"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        out[int(i) - back[0]] = x[i];
    """)
    for n in (1000, (1 << 20) + 10):
        x = mx.zeros((n,), mx.float32) + 1
        for back in (1, 3, 1000):
            o, = k(inputs=[x, mx.array([back], mx.int32)], output_shapes=[(n,)], output_dtypes=[mx.float32],
                   grid=(n, 1, 1), threadgroup=(256, 1, 1))
            with pytest.raises(RuntimeError) as e:
                mx.eval(o)
            assert "before the start of its output `out`" in str(e.value), str(e.value)
    still_works()


def test_loads_just_outside_read_zeros_for_every_size_view_and_offset():
    """Loads a little outside a buffer read zeros (MLX's grid_sample relies on it), for small and
    large buffers, views with offsets, and ensure_row_contiguous=False views."""
    k = mx.fast.metal_kernel(name="neighbours", input_names=["x"], output_names=["out"], source="""
        int i = int(thread_position_in_grid.x);
        out[i] = x[i - 2] * 1000.0f + x[i + 3];
    """)
    for n in (10, 1000, (1 << 20) + 10):
        base = (np.arange(n + 20) % 997 + 1).astype(np.float32)
        parent = mx.array(base)
        for lo in (0, 5, 10):
            view = parent[lo:lo + n] if lo else mx.array(base[:n])
            o, = k(inputs=[view], output_shapes=[(n,)], output_dtypes=[mx.float32], grid=(n, 1, 1),
                   threadgroup=(256, 1, 1))
            v = base[lo:lo + n]
            if lo == 0 or n < (1 << 20):
                pad = np.concatenate([[0, 0], v, [0, 0, 0]])  # staged: zeros outside the view
            else:  # a view of a large buffer is used in place: its parent's neighbours, as on Metal
                pad = np.concatenate([base[lo - 2:lo], v, base[lo + n:lo + n + 3]])
            want = pad[:n] * 1000 + pad[5:n + 5]
            np.testing.assert_array_equal(np.array(o), want.astype(np.float32))
    np.testing.assert_array_equal(np.array(parent), base)


def test_stores_into_an_input_view_never_change_the_parent():
    k = mx.fast.metal_kernel(name="cast_away_const", input_names=["x"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        ((device float*)x)[i + 2] = 5.0f;
        out[i] = 1.0f;
    """)
    parent = mx.arange(100, dtype=mx.float32)
    big = mx.arange((1 << 20) + 10, dtype=mx.float32)
    mid = mx.arange(30000, dtype=mx.float32)
    mx.eval(parent, big, mid)
    for view in (parent[10:20], parent[::3], parent, big[10:20], big[-10:], mid, mid[5:]):
        o, = k(inputs=[view], output_shapes=[(10,)], output_dtypes=[mx.float32], grid=(10, 1, 1),
               threadgroup=(10, 1, 1))
        with pytest.raises(RuntimeError, match=r"Kernel `cast_away_const` stored (into|past the end of) its input `x`"):
            mx.eval(o)
    np.testing.assert_array_equal(np.array(parent), np.arange(100, dtype=np.float32))
    np.testing.assert_array_equal(np.array(big), np.arange((1 << 20) + 10, dtype=np.float32))
    np.testing.assert_array_equal(np.array(mid), np.arange(30000, dtype=np.float32))
    still_works()


def test_a_far_wild_store_is_an_error():
    k = mx.fast.metal_kernel(name="far_store", input_names=["x"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        out[i + (1ul << 40)] = x[i];
    """)
    o, = k(inputs=[mx.zeros((64,))], output_shapes=[(64,)], output_dtypes=[mx.float32], grid=(64, 1, 1),
           threadgroup=(64, 1, 1))
    with pytest.raises(RuntimeError, match=r"Kernel `far_store` made an invalid memory access"):
        mx.eval(o)
    still_works()


# ------------------------------------------------------------------ integer division

INT_MIN = -(2 ** 31)


@pytest.mark.parametrize("cooperative", [False, True])
@pytest.mark.parametrize("dtype,nptype", [(mx.int32, np.int32), (mx.uint32, np.uint32), (mx.int64, np.int64),
                                          (mx.uint64, np.uint64), (mx.int16, np.int16)])
def test_integer_division_by_zero_gives_the_documented_values(dtype, nptype, cooperative):
    """x / 0 is all ones (-1, or the unsigned maximum), x % 0 is x, INT_MIN / -1 is INT_MAX
    (Metal's spec clamps out-of-range quotients) and INT_MIN % -1 is 0: no trap."""
    k = mx.fast.metal_kernel(name=f"divide_{'coop' if cooperative else 'plain'}", input_names=["a", "b"],
                             output_names=["q", "r"], source=(BARRIER if cooperative else "") + """
        uint i = thread_position_in_grid.x;
        q[i] = a[i] / b[i];
        r[i] = a[i] % b[i];
    """)
    info = np.iinfo(nptype)
    a = np.array([5, 7, 0, info.max, info.min, info.min, 9, 100], dtype=nptype)
    b = np.array([0, 2, 0, 0, 0, 1, 3, 0], dtype=nptype)
    if info.min < 0:
        b[5] = -1
    q, r = k(inputs=[mx.array(a), mx.array(b)], template=[], output_shapes=[(8,), (8,)],
             output_dtypes=[dtype, dtype], grid=(8, 1, 1), threadgroup=(8, 1, 1))
    bits = np.dtype(nptype).itemsize * 8
    want_q, want_r = [], []
    for x, y in zip(a.tolist(), b.tolist()):
        if y == 0:
            want_q.append(-1)  # all ones
            want_r.append(x)
        elif info.min < 0 and bits >= 32 and x == info.min and y == -1:
            want_q.append(info.max)
            want_r.append(0)
        else:  # C truncates toward zero (16-bit operands are promoted to int: -32768 / -1 = 32768)
            qq = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
            want_q.append(qq)
            want_r.append(x - qq * y)
    wrap = lambda vals: np.array([v & (2 ** bits - 1) for v in vals], dtype=np.uint64).astype(nptype)
    want_q, want_r = wrap(want_q), wrap(want_r)
    np.testing.assert_array_equal(np.array(q), want_q)
    np.testing.assert_array_equal(np.array(r), want_r)


# ------------------------------------------------------------------ signals

@pytest.mark.parametrize("engine", ["lockstep", "fibers"])
def test_overshoot_in_a_cooperative_kernel(engine, monkeypatch):
    if engine == "fibers":
        monkeypatch.setenv("MKPY_ENGINE", "fibers")
    k = mx.fast.metal_kernel(name="coop_overshoot", input_names=["x"], output_names=["out"], source="""
        threadgroup float t[64];
        uint l = thread_position_in_threadgroup.x, i = thread_position_in_grid.x;
        t[l] = x[i];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[i] = t[63 - l] + simd_sum(1.0f);
    """)
    keep = mx.full((1000,), 3.0)
    mx.eval(keep)
    for n in (1000, (1 << 20) + 10):
        o, = k(inputs=[mx.zeros((n,))], output_shapes=[(n,)], output_dtypes=[mx.float32],
               grid=((n + 63) // 64 * 64, 1, 1), threadgroup=(64, 1, 1))
        with pytest.raises(RuntimeError, match=r"Kernel `coop_overshoot` stored past the end of its output `out`"):
            mx.eval(o)
    assert (np.array(keep) == 3).all()
    still_works()


@pytest.mark.parametrize("cooperative,engine", [(False, None), (True, "lockstep"), (True, "fibers")])
def test_builtin_trap_is_an_error(cooperative, engine, monkeypatch):
    if engine == "fibers":
        monkeypatch.setenv("MKPY_ENGINE", "fibers")
    k = mx.fast.metal_kernel(name=f"trap_{cooperative}", input_names=["x"], output_names=["out"],
                             source=(BARRIER if cooperative else "") + """
        uint i = thread_position_in_grid.x;
        if (x[i] > 32700.0f) __builtin_trap();   // in the last threadgroups: on any of the pool's threads
        out[i] = x[i];
    """)
    n = 1 << 15
    for _ in range(2):
        o, = k(inputs=[mx.arange(n, dtype=mx.float32)], output_shapes=[(n,)], output_dtypes=[mx.float32],
               grid=(n, 1, 1), threadgroup=(32, 1, 1))
        with pytest.raises(RuntimeError, match=rf"Kernel `trap_{cooperative}` raised SIGILL"):
            mx.eval(o)
    still_works()


@pytest.mark.parametrize("cooperative", [False, True])
def test_a_trapping_global_constructor_is_an_error(cooperative):
    # a program-scope object with a constructor is C++ only: Metal refuses it (test_kernel_parity)
    k = mx.fast.metal_kernel(name="bad_constructor", input_names=["x"], output_names=["out"],
                             compile_options={"allow_non_metal": True},
                             header="""
        struct Boom { int v; Boom() : v(1) { __builtin_trap(); } };
        static Boom boom;
    """, source=(BARRIER if cooperative else "") +
        "out[thread_position_in_grid.x] = x[thread_position_in_grid.x] + float(boom.v);")
    for _ in range(2):
        o, = k(inputs=[mx.zeros((4,))], output_shapes=[(4,)], output_dtypes=[mx.float32], grid=(4, 1, 1),
               threadgroup=(4, 1, 1))
        with pytest.raises(RuntimeError, match=r"`bad_constructor`.*global constructor.*SIGILL"):
            mx.eval(o)
    still_works()


def test_a_global_constructor_that_works_still_runs():
    # a program-scope object with a constructor is C++ only: Metal refuses it (test_kernel_parity)
    k = mx.fast.metal_kernel(name="good_constructor", input_names=["x"], output_names=["out"],
                             compile_options={"allow_non_metal": True},
                             header="""
        struct Init { float v; Init() : v(41.0f) {} };
        static Init init;
    """, source="out[thread_position_in_grid.x] = x[thread_position_in_grid.x] + init.v;")
    o, = k(inputs=[mx.ones((4,))], output_shapes=[(4,)], output_dtypes=[mx.float32], grid=(4, 1, 1),
           threadgroup=(4, 1, 1))
    assert np.array(o).tolist() == [42.0] * 4


# ------------------------------------------------------------------ Ctrl-C and the watchdog

RUNAWAY = """
import os, sys, time, signal
# Ctrl-C raises KeyboardInterrupt even when this process was started with SIGINT ignored
# (Python then installs no handler: `make test &` from a script, nohup)
signal.signal(signal.SIGINT, signal.default_int_handler)
import mkpy as mx
kind = sys.argv[1]
coop = "threadgroup_barrier(mem_flags::mem_threadgroup);" if kind == "coop" else ""
k = mx.fast.metal_kernel(name="runaway_" + kind, input_names=["x"], output_names=["out"], source=coop + '''
    uint i = thread_position_in_grid.x;
    uint n = 0;
    while (x[0] == 0.0f) { n++; out[i] = float(n); }   // x is never written: runs forever
    out[i] = 1.0f;
''')
def run(v):
    return k(inputs=[mx.full((1,), v, mx.float32)], output_shapes=[(256,)], output_dtypes=[mx.float32],
             grid=(256, 1, 1), threadgroup=(64, 1, 1))[0]
def long_op():
    y = mx.zeros((1 << 18,))
    for _ in range(200000):
        y = y * 1.0001 + 1e-6
    return y
mx.eval(run(1.0))  # compiled and loaded before the clock starts
work = long_op if kind == "op" else (lambda: run(0.0))
arr = work()
print("ready", flush=True)
t0 = None
try:
    mx.eval(arr)
    print("finished?!", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
assert mx.sum(run(1.0)).item() == 256.0   # the pool is usable
print("ok", flush=True)
"""


@pytest.mark.parametrize("kind,engine", [("plain", None), ("coop", None), ("coop", "fibers"), ("op", None)])
def test_ctrl_c_interrupts_a_runaway_kernel_or_a_long_op(kind, engine):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("MKPY_ENGINE", None)
    if engine:
        env["MKPY_ENGINE"] = engine
    p = subprocess.Popen([sys.executable, "-c", RUNAWAY, kind], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(1.0)
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        line = p.stdout.readline().strip()
        latency = time.monotonic() - t0
        out = p.stdout.read()  # (not communicate: it would miss what readline buffered)
        err = p.stderr.read()
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert line == "interrupted", (line, err)
    assert out.split() == ["ok"], (out, err)
    assert p.returncode == 0, err
    # the issue asks for 0.5 s; a loaded test machine gets a wide margin (timing is measured in
    # benchmarks, never asserted tightly here)
    assert latency < 20, latency


def test_kernel_timeout_stops_a_runaway_kernel(monkeypatch):
    k = mx.fast.metal_kernel(name="runaway_timeout", input_names=["x"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        uint n = 0;
        while (x[0] == 0.0f) { n++; out[i] = float(n); }
        out[i] = 1.0f;
    """)
    run = lambda v: k(inputs=[mx.full((1,), v, mx.float32)], output_shapes=[(64,)], output_dtypes=[mx.float32],
                      grid=(64, 1, 1), threadgroup=(64, 1, 1))[0]
    mx.eval(run(1.0))
    monkeypatch.setenv("MKPY_KERNEL_TIMEOUT", "0.5")
    with pytest.raises(RuntimeError, match=r"Kernel `runaway_timeout` ran longer than MKPY_KERNEL_TIMEOUT \(0.5 s\)"):
        mx.eval(run(0.0))
    assert mx.sum(run(1.0)).item() == 64.0
    still_works()


HANDLED = """
import signal, sys, time
import numpy as np
import mkpy as mx
calls = []
signal.signal(signal.SIGINT, lambda *a: calls.append(1))   # a handler that does not raise
y = mx.zeros((1 << 16,))
for _ in range(4000):
    y = y + 1
print("ready", flush=True)
mx.eval(y)                     # interrupted, the handler runs, the eval goes on where it stopped
while not calls:
    time.sleep(0.01)
print("handled", len(calls), (np.array(y) == 4000).all(), flush=True)
"""


def test_ctrl_c_with_a_python_handler_that_does_not_raise():
    """signal.signal handlers still run; when they raise nothing the evaluation carries on."""
    p = subprocess.Popen([sys.executable, "-c", HANDLED], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        out = p.stdout.read()
        err = p.stderr.read()
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert out.split() == ["handled", "1", "True"], (out, err)
    assert p.returncode == 0, err
