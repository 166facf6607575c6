"""The kernel checker (issue #12's checker mode; docs/kernels.md "Checker mode").

One test per finding kind, the switches, and kernels that must stay clean."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mkpy as mx

F32 = mx.float32


def run(source, inputs, grid, tg, shapes, dtypes=None, name="k", check=True, input_names=(),
        output_names=("out",), atomic_outputs=False, **kw):
    k = mx.fast.metal_kernel(name=name, input_names=list(input_names), output_names=list(output_names),
                             source=source, atomic_outputs=atomic_outputs)
    with mx.metal.check(check):
        outs = k(inputs=inputs, grid=grid, threadgroup=tg, output_shapes=shapes,
                 output_dtypes=dtypes or [F32] * len(shapes), **kw)
    mx.eval(*outs)
    return outs


def checked_error(*a, **kw):
    with pytest.raises(RuntimeError) as ei:
        run(*a, **kw)
    msg = str(ei.value)
    assert "the checker (MKPY_CHECK) found" in msg, msg
    assert "test_kernel_checker.py" in msg, msg  # the Python call site
    return msg


def test_clean_kernel_reports_nothing():
    x = mx.arange(1000).astype(F32)
    out, = run("uint i = thread_position_in_grid.x;\nif (i < 1000) out[i] = x[i] * 2.0f;\n", [x],
               (1024, 1, 1), (256, 1, 1), [(1000,)], input_names=["x"], name="clean")
    assert np.array_equal(np.array(out), np.arange(1000, dtype=np.float32) * 2)


def test_clean_cooperative_reduction_reports_nothing():
    src = """
    threadgroup float s[64];
    uint l = thread_position_in_threadgroup.x;
    s[l] = x[thread_position_in_grid.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint stride = 32; stride > 0; stride /= 2) {
        if (l < stride) s[l] += s[l + stride];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (l == 0) out[threadgroup_position_in_grid.x] = s[0];
    """
    x = mx.ones((256,), dtype=F32)
    out, = run(src, [x], (256, 1, 1), (64, 1, 1), [(4,)], input_names=["x"], name="reduce_ok")
    assert np.array(out).tolist() == [64.0] * 4


def test_small_buffer_out_of_bounds_store():
    # the guides' most common bug: 1000 floats, a grid of 1024
    x = mx.arange(1000).astype(F32)
    msg = checked_error("uint i = thread_position_in_grid.x;\nout[i] = x[i] + 1;\n", [x], (1024, 1, 1),
                        (256, 1, 1), [(1000,)], input_names=["x"], name="overshoot")
    assert "out-of-bounds accesses (48)" in msg  # 24 loads past x and 24 stores past out
    assert "thread (1000, 0, 0) loaded element 1000 of input `x`" in msg, msg
    assert "stored element 1000 of output `out`" in msg, msg
    assert "<kernel overshoot source>:2:" in msg, msg  # the user's own line
    assert "... and" in msg and "more" in msg
    # the library stays usable and the guard kept the neighbours intact
    assert np.array(x).tolist() == list(range(1000))


def test_small_input_out_of_bounds_read():
    x = mx.arange(8).astype(F32)
    msg = checked_error("uint i = thread_position_in_grid.x;\nout[i] = x[i + 1];\n", [x], (8, 1, 1), (8, 1, 1),
                        [(8,)], input_names=["x"], name="readpast")
    assert "out-of-bounds accesses (1)" in msg
    assert "thread (7, 0, 0) loaded element 8 of input `x` (a buffer of 8 4-byte elements), past its end" in msg


def test_threadgroup_out_of_bounds():
    src = """threadgroup float t[32];
uint l = thread_position_in_threadgroup.x;
t[l + 1] = x[l];
threadgroup_barrier(mem_flags::mem_threadgroup);
out[l] = 1.0f;"""
    x = mx.ones((32,), dtype=F32)
    msg = checked_error(src, [x], (32, 1, 1), (32, 1, 1), [(32,)], input_names=["x"], name="tgoob")
    assert "thread (31, 0, 0) stored element 32 of threadgroup variable `t` (32 elements of 4 bytes)" in msg, msg
    assert "<kernel tgoob source>:3:" in msg


def test_issue10_lockstep_reproducer_is_a_race():
    src = """threadgroup float t[32]; uint l = thread_position_in_threadgroup.x;
if (l == 0) t[0] = x[0]; threadgroup_barrier(mem_flags::mem_threadgroup);
float v = t[0]; t[l] = 0.0f; y[l] = v;"""
    x = mx.array([7.0])
    msg = checked_error(src, [x], (32, 1, 1), (32, 1, 1), [(32,)], input_names=["x"], output_names=["y"],
                        name="repro1")
    assert "threadgroup memory races" in msg
    assert "threadgroup variable `t` element 0" in msg
    assert "<kernel repro1 source>:3:" in msg
    assert "with no threadgroup_barrier between them" in msg


def test_issue10_simdgroup_reproducer_is_a_race():
    src = """threadgroup float s[32]; uint l = thread_index_in_simdgroup, g = simdgroup_index_in_threadgroup;
if (thread_position_in_threadgroup.x < 32) s[l] = x[l]; threadgroup_barrier(mem_flags::mem_threadgroup);
float v = simd_sum(s[l]); if (l == 0) s[g] = -1.0f; if (l == 0) y[g] = v;"""
    x = mx.ones((32,), dtype=F32)
    msg = checked_error(src, [x], (64, 1, 1), (64, 1, 1), [(2,)], input_names=["x"], output_names=["y"],
                        name="repro2")
    assert "threadgroup memory races" in msg
    assert "threadgroup variable `s` element 1" in msg, msg


def test_neighbour_read_race_with_right_numbers():
    # no barrier between the store and the neighbour's load: the numbers come out right, the race is real
    src = """threadgroup float t[32]; uint l = thread_position_in_threadgroup.x;
t[l] = x[l];
y[l] = t[(l + 1) % 32];"""
    x = mx.arange(32).astype(F32)
    y, = run(src, [x], (32, 1, 1), (32, 1, 1), [(32,)], input_names=["x"], output_names=["y"],
             name="neighbour", check=False)
    assert np.array(y).tolist() == [float((i + 1) % 32) for i in range(32)]
    msg = checked_error(src, [x], (32, 1, 1), (32, 1, 1), [(32,)], input_names=["x"], output_names=["y"],
                        name="neighbour")
    assert "threadgroup memory races" in msg
    # both lines are named
    assert "<kernel neighbour source>:2:" in msg and "<kernel neighbour source>:3:" in msg, msg


def test_device_race():
    x = mx.arange(64).astype(F32)
    msg = checked_error("out[0] = x[thread_position_in_grid.x];", [x], (64, 1, 1), (32, 1, 1), [(1,)],
                        input_names=["x"], name="devrace")
    assert "device memory races" in msg
    assert "output `out` element 0: thread (0, 0, 0) stored it at <kernel devrace source>:1:" in msg, msg


def test_device_atomics_do_not_race():
    src = "atomic_fetch_add_explicit(&out[0], 1, memory_order_relaxed);"
    x = mx.zeros((1,), dtype=F32)
    out, = run(src, [x], (64, 1, 1), (32, 1, 1), [(1,)], [mx.int32], input_names=["x"], name="atom",
               atomic_outputs=True, init_value=0)
    assert np.array(out).tolist() == [64]


def test_uninitialised_threadgroup_read():
    src = """threadgroup float t[32]; uint l = thread_position_in_threadgroup.x;
if (l < 16) t[l] = x[l];
threadgroup_barrier(mem_flags::mem_threadgroup);
y[l] = t[l];"""
    x = mx.ones((32,), dtype=F32)
    msg = checked_error(src, [x], (32, 1, 1), (32, 1, 1), [(32,)], input_names=["x"], output_names=["y"],
                        name="uninit")
    assert "reads of uninitialised threadgroup memory (16)" in msg
    assert "thread (16, 0, 0) loaded element 16 of threadgroup variable `t` at <kernel uninit source>:4:" in msg


def test_unwritten_output_and_init_value():
    x = mx.ones((100,), dtype=F32)
    src = "uint i = thread_position_in_grid.x;\nif (i < 90) out[i] = x[i];"
    msg = checked_error(src, [x], (100, 1, 1), (32, 1, 1), [(100,)], input_names=["x"], name="unwritten")
    assert "output elements no thread wrote (10)" in msg
    assert "output `out` element 90 was stored by no thread" in msg
    # with init_value the untouched elements are meant
    out, = run(src, [x], (100, 1, 1), (32, 1, 1), [(100,)], input_names=["x"], name="unwritten", init_value=5)
    assert np.array(out)[95] == 5


def test_integer_division_by_zero():
    src = "uint i = thread_position_in_grid.x;\nout[i] = x[i] / z[0];\n"
    x = mx.array([6, 7, 8, 9], dtype=mx.int32)
    z = mx.array([0], dtype=mx.int32)
    out, = run(src, [x, z], (4, 1, 1), (4, 1, 1), [(4,)], [mx.int32], input_names=["x", "z"], name="div0",
               check=False)
    assert np.array(out).tolist() == [-1] * 4  # the GPU-like value, no trap
    with pytest.raises(RuntimeError) as ei:
        run(src, [x, z], (4, 1, 1), (4, 1, 1), [(4,)], [mx.int32], input_names=["x", "z"], name="div0")
    msg = str(ei.value)
    assert "integer division faults (4)" in msg
    assert "thread (0, 0, 0) divided by zero (`/` or `%`) at <kernel div0 source>:2:" in msg, msg


def test_int_min_by_minus_one():
    src = "uint i = thread_position_in_grid.x;\nout[i] = x[i] % z[i];\n"
    x = mx.array([-2**31, 5], dtype=mx.int32)
    z = mx.array([-1, 2], dtype=mx.int32)
    with pytest.raises(RuntimeError) as ei:
        run(src, [x, z], (2, 1, 1), (2, 1, 1), [(2,)], [mx.int32], input_names=["x", "z"], name="ovf")
    assert "integer division faults (1)" in str(ei.value)
    assert "thread (0, 0, 0) divided the most negative integer by -1 at <kernel ovf source>:2:" in str(ei.value)
    # without the checker: the GPU-like values, no trap (docs/kernels.md)
    out, = run(src, [x, z], (2, 1, 1), (2, 1, 1), [(2,)], [mx.int32], input_names=["x", "z"], name="ovf",
               check=False)
    assert np.array(out).tolist() == [0, 1]


def test_barrier_divergence_still_reported():
    src = """uint l = thread_position_in_threadgroup.x;
if (l < 16) { threadgroup_barrier(mem_flags::mem_threadgroup); }
else { threadgroup_barrier(mem_flags::mem_threadgroup); }
out[l] = 1.0f;"""
    x = mx.ones((1,), dtype=F32)
    with pytest.raises(RuntimeError, match="different barriers"):
        run(src, [x], (32, 1, 1), (32, 1, 1), [(32,)], input_names=["x"], name="diverge")


def test_switches():
    src = "out[0] = x[thread_position_in_grid.x];"  # a device race
    x = mx.arange(4).astype(F32)
    k = mx.fast.metal_kernel(name="switch", input_names=["x"], output_names=["out"], source=src)

    def call():
        return k(inputs=[x], grid=(4, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(1,)], output_dtypes=[F32])[0]

    assert not mx.metal.is_check_enabled() or os.environ.get("MKPY_CHECK")
    mx.eval(call())  # unchecked: no error
    mx.metal.set_check(True)
    try:
        assert mx.metal.is_check_enabled()
        out = call()
        with mx.metal.check(False):
            assert not mx.metal.is_check_enabled()
            quiet = call()
    finally:
        mx.metal.set_check(False)
    mx.eval(quiet)
    with pytest.raises(RuntimeError, match="device memory races"):
        mx.eval(out)  # checked because the call was made while the checker was on
    with mx.metal.check():
        out = call()
    with pytest.raises(RuntimeError, match="device memory races"):
        mx.eval(out)


def test_environment_variable():
    code = ("import mkpy as mx\n"
            "k = mx.fast.metal_kernel(name='envk', input_names=['x'], output_names=['out'],"
            " source='out[0] = x[thread_position_in_grid.x];')\n"
            "o, = k(inputs=[mx.ones((4,))], grid=(4,1,1), threadgroup=(4,1,1), output_shapes=[(1,)],"
            " output_dtypes=[mx.float32])\n"
            "try:\n    mx.eval(o)\nexcept RuntimeError as e:\n    print('RACE' if 'device memory races' in str(e) else e)\n")
    env = dict(os.environ, MKPY_CHECK="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "RACE" in r.stdout, r.stdout + r.stderr


def test_races_between_chunks_of_groups():
    # 64 groups in several chunks (run in parallel when the pool has threads):
    # thread i and thread i + 8192 store the same element, once each
    n = 16384
    x = mx.arange(n).astype(F32)
    src = "uint i = thread_position_in_grid.x;\nout[i % 8192] = x[i];\n"
    msg = checked_error(src, [x], (n, 1, 1), (256, 1, 1), [(8192,)], input_names=["x"], name="chunkrace")
    assert "device memory races (8192)" in msg, msg
    assert "output elements no thread wrote" not in msg
    # the same grid without the overlap is clean, and the numbers are right
    out, = run("uint i = thread_position_in_grid.x;\nout[i] = x[i] * 2.0f;\n", [x], (n, 1, 1), (256, 1, 1), [(n,)],
               input_names=["x"], name="chunkclean")
    assert np.array_equal(np.array(out), np.arange(n, dtype=np.float32) * 2)


def test_store_patterns_beyond_one_store_per_thread():
    x = mx.arange(256).astype(F32)
    # the same thread stores twice and reloads its element: no finding
    src = "uint i = thread_position_in_grid.x;\nout[i] = x[i];\nout[i] = out[i] + 1.0f;\n"
    out, = run(src, [x], (256, 1, 1), (64, 1, 1), [(256,)], input_names=["x"], name="rmw")
    assert np.array(out).tolist() == [float(v + 1) for v in range(256)]
    # each thread stores two elements (a stride the blocks do not describe): clean, all written
    src = "uint i = thread_position_in_grid.x;\nout[2 * i] = x[i];\nout[2 * i + 1] = -x[i];\n"
    out, = run(src, [x], (256, 1, 1), (64, 1, 1), [(512,)], input_names=["x"], name="stride2")
    assert np.array(out)[:4].tolist() == [0.0, -0.0, 1.0, -1.0]
    # a neighbour's element loaded after it was stored, with no barrier: a race
    src = "uint i = thread_position_in_grid.x;\nout[i] = x[i];\nif (i > 0) y[i] = out[i - 1];\n"
    msg = checked_error(src, [x], (256, 1, 1), (64, 1, 1), [(256,), (256,)], input_names=["x"],
                        output_names=["out", "y"], name="nbrload", init_value=0)
    assert "device memory races" in msg
    assert "output `out` element 0: thread (0, 0, 0) stored it at <kernel nbrload source>:2:" in msg, msg
    assert "thread (1, 0, 0) loaded it at <kernel nbrload source>:3:" in msg, msg
