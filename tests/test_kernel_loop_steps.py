"""Loop steps of the lockstep engine (docs/design.md, "Loop-step regions"): a loop's running
value and the value after the loop share a slot, and a grid- or row-stride counter is read as
thread 0's value plus the thread's index when every thread's slot says so (checked before each
dense run). Each kernel here is built so that the check holds in some runs and fails in others
(different starts, strides, iteration counts, 2-D groups, 64-bit counters, wrap-around), and
every result is compared bit for bit with NumPy doing the same float32 operations in the same
order, and with the fiber engine (MKPY_ENGINE=fibers) in a child process."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# per-thread grid-stride sums of x with start `s0`, step `st` (as Metal code), 256-thread groups
KERNELS = {
    # the benchmark's shape: start gid, step the grid size (the check holds every iteration)
    "grid_stride": ("uint i = thread_position_in_grid.x", "i += threads_per_grid.x", "uint"),
    # odd threads take two steps: affine at the first iteration only
    "uneven_step": ("uint i = thread_position_in_grid.x", "i += threads_per_grid.x * (1 + (thread_position_in_grid.x & 1))", "uint"),
    # every thread starts at the same element: never affine (the group-uniform pattern)
    "same_start": ("uint i = threadgroup_position_in_grid.x", "i += threadgroups_per_grid.x", "uint"),
    # reversed order within the group: slot[t] = c - t
    "reversed": ("uint i = threadgroup_position_in_grid.x * 256 + 255 - thread_position_in_threadgroup.x",
                 "i += threads_per_grid.x", "uint"),
    # 64-bit counter
    "wide_counter": ("size_t i = thread_position_in_grid.x", "i += threads_per_grid.x", "size_t"),
    # starts near the top of uint: the counter wraps (the loop ends at the wrap, by the bound)
    "wrapping": ("uint i = 0xFFFFFF00u + thread_position_in_threadgroup.x", "i += 256u", "uint"),
}


def source(start, step, _):
    return """
    float s = 0.0f;
    uint cnt = 0;
    for (%s; i < uint(n) || (i >= 0xFFFFFF00u && cnt < 3); %s) {
        s += x[i %% uint(n)];
        cnt++;
    }
    out[thread_position_in_grid.x] = s;
    threadgroup float t[256];
    t[thread_position_in_threadgroup.x] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (thread_position_in_threadgroup.x == 0) {
        float r = 0.0f;
        for (uint k = 0; k < 256; k++) r += t[k];
        part[threadgroup_position_in_grid.x] = r;
    }
""" % (start, step)


def expected(name, x, groups):
    n = len(x)
    gsz = groups * 256
    out = np.zeros(gsz, np.float32)
    for g in range(groups):
        for l in range(256):
            gid = g * 256 + l
            s = np.float32(0)
            cnt = 0
            if name == "grid_stride" or name == "wide_counter":
                i, step = gid, lambda i: i + gsz
            elif name == "uneven_step":
                i, step = gid, lambda i, gid=gid: i + gsz * (1 + (gid & 1))
            elif name == "same_start":
                i, step = g, lambda i: i + groups
            elif name == "reversed":
                i, step = g * 256 + 255 - l, lambda i: i + gsz
            else:  # wrapping
                i, step = 0xFFFFFF00 + l, lambda i: (i + 256) & 0xFFFFFFFF
            while i < n or (i >= 0xFFFFFF00 and cnt < 3):
                s = np.float32(s + x[i % n])
                cnt += 1
                i = step(i)
            out[gid] = s
    part = np.zeros(groups, np.float32)
    for g in range(groups):
        r = np.float32(0)
        for k in range(256):
            r = np.float32(r + out[g * 256 + k])
        part[g] = r
    return out, part


CHILD = r"""
import json, sys
import numpy as np
import mkpy as mx
sys.path.insert(0, %r)
import test_kernel_loop_steps as t
res = {}
for name in t.KERNELS:
    o, p = t.run(name)
    res[name] = [o.view(np.uint32).tolist(), p.view(np.uint32).tolist()]
print(json.dumps(res))
"""


def data():
    return np.random.default_rng(5).standard_normal(3000).astype(np.float32)


def run(name, groups=3):
    x = data()
    k = mx.fast.metal_kernel(name="loop_steps_" + name, input_names=["x", "n"], output_names=["out", "part"],
                             source=source(*KERNELS[name]))
    o, p = k(inputs=[mx.array(x), len(x)], grid=(groups * 256, 1, 1), threadgroup=(256, 1, 1),
             output_shapes=[(groups * 256,), (groups,)], output_dtypes=[mx.float32, mx.float32])
    return np.array(o), np.array(p)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_stride_counters_give_numpys_bits(name):
    o, p = run(name)
    wo, wp = expected(name, data(), 3)
    np.testing.assert_array_equal(o.view(np.uint32), wo.view(np.uint32))
    np.testing.assert_array_equal(p.view(np.uint32), wp.view(np.uint32))


def test_fibers_agree():
    env = dict(os.environ, MKPY_ENGINE="fibers", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = CHILD % os.path.dirname(os.path.abspath(__file__))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    fib = json.loads(p.stdout.splitlines()[-1])
    for name in KERNELS:
        o, q = run(name)
        assert fib[name][0] == o.view(np.uint32).tolist(), name
        assert fib[name][1] == q.view(np.uint32).tolist(), name


def test_nested_loops_meet_at_the_step_after_different_counts():
    # the inner counter restarts at lid + o for each outer iteration; threads leave the inner
    # loop after different counts, so the check must fail whenever their slots disagree
    k = mx.fast.metal_kernel(name="loop_steps_nested", input_names=["x"], output_names=["out"], source="""
        uint l = thread_position_in_threadgroup.x;
        float s = 0.0f;
        for (uint o = 0; o < 4; o++)
            for (uint i = l + o * (l & 3); i < 700u + 37u * o; i += 128u)
                s += x[i];
        out[thread_position_in_grid.x] = s;""")
    x = np.random.default_rng(6).standard_normal(1024).astype(np.float32)
    o, = k(inputs=[mx.array(x)], grid=(256, 1, 1), threadgroup=(128, 1, 1), output_shapes=[(256,)],
           output_dtypes=[mx.float32])
    want = np.zeros(256, np.float32)
    for t in range(256):
        l = t % 128
        s = np.float32(0)
        for oo in range(4):
            i = l + oo * (l & 3)
            while i < 700 + 37 * oo:
                s = np.float32(s + x[i])
                i += 128
        want[t] = s
    np.testing.assert_array_equal(np.array(o).view(np.uint32), want.view(np.uint32))


def test_two_dimensional_groups():
    # a counter that starts at the thread's x position: in a 16x16 group thread t = 16y + x, so
    # slot[t] = x is not thread 0's value plus t, and the plain nest runs
    k = mx.fast.metal_kernel(name="loop_steps_2d", input_names=["x"], output_names=["out"], source="""
        uint2 l = thread_position_in_threadgroup.xy;
        float s = 0.0f;
        for (uint i = l.x; i < 500u; i += 16u) s += x[i + l.y];
        out[l.y * 16 + l.x] = s;""")
    x = np.random.default_rng(7).standard_normal(600).astype(np.float32)
    o, = k(inputs=[mx.array(x)], grid=(16, 16, 1), threadgroup=(16, 16, 1), output_shapes=[(256,)],
           output_dtypes=[mx.float32])
    want = np.zeros(256, np.float32)
    for y in range(16):
        for xx in range(16):
            s = np.float32(0)
            for i in range(xx, 500, 16):
                s = np.float32(s + x[i + y])
            want[y * 16 + xx] = s
    np.testing.assert_array_equal(np.array(o).view(np.uint32), want.view(np.uint32))
