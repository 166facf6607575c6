"""The lockstep engine (csrc/backend/cpu/cbs.c, csrc/backend/cpu/ir/cbs_ir.c): one test per
rule of docs/kernels.md "Execution model", checked against what an Apple GPU
gives, plus the fallback to fibers and how the engine is reported."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(kernel, inputs, grid, tg, shapes, dtypes=None, **kw):
    outs = kernel(inputs=inputs, grid=grid, threadgroup=tg, output_shapes=shapes,
                  output_dtypes=dtypes or [mx.float32] * len(shapes), **kw)
    mx.eval(*outs)
    return [np.array(o) for o in outs]


def engine_of(kernel, inputs, grid, tg, shapes, capfd, dtypes=None):
    """Runs with verbose=True on the CPU (the engines are the CPU back-end's; on a machine with a
    GPU the other calls of these tests run there) and returns the engine line it printed."""
    with mx.stream(mx.cpu):
        run(kernel, inputs, grid, tg, shapes, dtypes, verbose=True)
    out = capfd.readouterr().out
    return [line for line in out.splitlines() if line.startswith("mkpy: kernel")][-1]


# ---------------------------------------------------------------- the reproducers

def test_lanes_of_a_simdgroup_finish_a_statement_before_the_next(capfd):
    # all 32 lanes read t[0] before any lane clears its element (Metal: 7 everywhere)
    k = mx.fast.metal_kernel(name="lockstep_read_then_write", input_names=["x"], output_names=["y"], source="""
        threadgroup float t[32]; uint l = thread_position_in_threadgroup.x;
        if (l == 0) t[0] = x[0]; threadgroup_barrier(mem_flags::mem_threadgroup);
        float v = t[0]; t[l] = 0.0f; y[l] = v;""")
    y, = run(k, [mx.array([7.0])], (32, 1, 1), (32, 1, 1), [(32,)])
    np.testing.assert_array_equal(y, np.full(32, 7, np.float32))
    assert "runs on the lockstep engine" in engine_of(k, [mx.array([7.0])], (32, 1, 1), (32, 1, 1), [(32,)], capfd)


def test_simdgroups_advance_together_between_barriers():
    # both SIMD-groups read s[l] before either overwrites s[g] (Metal: [32, 32])
    k = mx.fast.metal_kernel(name="simdgroups_together", input_names=["x"], output_names=["y"], source="""
        threadgroup float s[32]; uint l = thread_index_in_simdgroup, g = simdgroup_index_in_threadgroup;
        if (thread_position_in_threadgroup.x < 32) s[l] = x[l]; threadgroup_barrier(mem_flags::mem_threadgroup);
        float v = simd_sum(s[l]); if (l == 0) s[g] = -1.0f; if (l == 0) y[g] = v;""")
    y, = run(k, [mx.ones(32)], (64, 1, 1), (64, 1, 1), [(2,)])
    np.testing.assert_array_equal(y, [32, 32])


# ---------------------------------------------------------------- one test per rule

def test_lockstep_without_barriers():
    # every lane stores, then every lane loads its neighbour's element
    k = mx.fast.metal_kernel(name="lockstep_store_then_load", input_names=["x"], output_names=["y"], source="""
        threadgroup float t[32]; uint l = thread_index_in_simdgroup;
        t[l] = x[l]; y[l] = t[(l + 1) % 32];""")
    x = np.arange(32, dtype=np.float32)
    y, = run(k, [mx.array(x)], (32, 1, 1), (32, 1, 1), [(32,)])
    np.testing.assert_array_equal(y, np.roll(x, -1))


# the three kernels below are also compiled for CUDA in test_cuda_simt.py (Metal's active mask)
DIVERGENT_SIDES = mx.fast.metal_kernel(name="divergent_sides", input_names=["x"], output_names=["y"], source="""
        threadgroup float s[1]; uint l = thread_index_in_simdgroup;
        if (l == 0) s[0] = x[0]; threadgroup_barrier(mem_flags::mem_threadgroup);
        if (l % 2 == 0) { s[0] = 5.0f; } else { y[l] = s[0]; }
        if (l % 2 == 0) y[l] = -1.0f;""")


def test_divergent_branch_runs_one_side_then_the_other():
    # the lanes of the `if` side run first: the `else` side sees their store
    k = DIVERGENT_SIDES
    y, = run(k, [mx.array([1.0])], (32, 1, 1), (32, 1, 1), [(32,)])
    np.testing.assert_array_equal(y, np.where(np.arange(32) % 2, 5, -1).astype(np.float32))


LOOP_MASKS = mx.fast.metal_kernel(name="loop_masks", input_names=["x"], output_names=["y", "z"], source="""
        uint l = thread_index_in_simdgroup;
        uint acc = 0;
        for (uint i = 0; i < l; i++) acc += simd_sum(1u);
        y[l] = acc;
        uint acc2 = 0;
        for (uint i = 0;; i++) {
            if (i == l) break;          // break deactivates the lane
            if (i % 2) continue;        // continue skips the rest of the iteration
            acc2 += simd_sum(1u);
        }
        z[l] = acc2;""")


def test_a_loop_runs_until_no_lane_is_active_in_it():
    # iteration i runs with the lanes l > i: simd_sum counts them
    k = LOOP_MASKS
    y, z = run(k, [mx.array([0.0])], (32, 1, 1), (32, 1, 1), [(32,), (32,)], [mx.uint32, mx.uint32])
    want = [sum(31 - i for i in range(l)) for l in range(32)]
    want2 = [sum(31 - i for i in range(0, l, 2)) for l in range(32)]
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(z, want2)


EARLY_RETURN = mx.fast.metal_kernel(name="early_return", input_names=["x"], output_names=["y"], source="""
        uint l = thread_index_in_simdgroup;
        y[l] = -1.0f;
        if (l >= 20) return;
        y[l] = simd_sum(x[l]);""")


def test_return_deactivates_lanes():
    k = EARLY_RETURN
    y, = run(k, [mx.ones(32)], (32, 1, 1), (32, 1, 1), [(32,)])
    np.testing.assert_array_equal(y, np.where(np.arange(32) < 20, 20, -1).astype(np.float32))


def test_simd_functions_inside_divergent_code():
    k = mx.fast.metal_kernel(name="divergent_simd_fns", input_names=["x"], output_names=["y"], source="""
        uint l = thread_index_in_simdgroup;
        float v = x[l];
        if (l < 12) v = simd_sum(v);
        else if (l < 20) v = simd_prefix_exclusive_sum(v);
        else v = simd_shuffle_down(v, 1u);
        y[l] = v;""")
    x = np.arange(32, dtype=np.float32)
    y, = run(k, [mx.array(x)], (32, 1, 1), (32, 1, 1), [(32,)])
    want = np.empty(32, np.float32)
    want[:12] = x[:12].sum()
    want[12:20] = np.cumsum(np.concatenate([[0], x[12:19]]))
    want[20:31] = x[21:32]
    want[31] = x[31]        # shuffle_down past the last lane keeps the value
    np.testing.assert_array_equal(y, want)


HELPERS = """
template <typename T>
T block_sum(T v, threadgroup T *s, uint lid, uint n) {
    s[lid] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint off = n / 2; off > 0; off >>= 1) {
        if (lid < off) s[lid] += s[lid + off];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    T r = s[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return r;
}
struct Acc {
    float v;
    void add(float x) { v += simd_sum(x); }
};
"""


def test_helpers_with_barriers_templates_and_methods(capfd):
    k = mx.fast.metal_kernel(name="engine_helpers", input_names=["x"], output_names=["y", "z"], header=HELPERS,
                             source="""
        threadgroup float s[64];
        uint lid = thread_position_in_threadgroup.x, gid = thread_position_in_grid.x;
        float a = block_sum(x[gid], s, lid, 64u);
        a += block_sum(2.0f * x[gid], s, lid, 64u);
        Acc c{0.0f};
        c.add(x[gid]);
        c.add(1.0f);
        y[gid] = a;
        z[gid] = c.v;""")
    x = np.random.default_rng(0).integers(-4, 5, 256).astype(np.float32)
    args = ([mx.array(x)], (256, 1, 1), (64, 1, 1), [(256,), (256,)])
    y, z = run(k, *args)
    np.testing.assert_array_equal(y, np.repeat(3 * x.reshape(4, 64).sum(1), 64))
    np.testing.assert_array_equal(z, np.repeat(x.reshape(8, 32).sum(1) + 32, 32))
    assert "runs on the lockstep engine" in engine_of(k, *args, capfd)


def test_a_value_from_a_loop_with_barriers_feeds_a_simd_function(capfd):
    # the loop's last value reaches simd_sum across two barriers: it is kept in
    # the frame, and its store into the exchange's temporary is a use like any
    # other (this once broke the pass, and the kernel fell back to fibers)
    k = mx.fast.metal_kernel(name="loop_then_simd_sum", input_names=["x"], output_names=["out"], source="""
        threadgroup float t[64];
        uint l = thread_position_in_threadgroup.x;
        float acc = 0.0f;
        for (int k = 0; k < 4; k++) {
            t[l] = x[l * 4 + k];
            threadgroup_barrier(mem_flags::mem_threadgroup);
            acc += t[(l + 1) % 64];
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        out[l] = simd_sum(acc);""")
    x = np.arange(256, dtype=np.float32)
    args = ([mx.array(x)], (64, 1, 1), (64, 1, 1), [(64,)])
    y, = run(k, *args)
    acc = x.reshape(64, 4)[(np.arange(64) + 1) % 64].sum(axis=1)
    np.testing.assert_array_equal(y, np.repeat([acc[:32].sum(), acc[32:].sum()], 32))
    assert "runs on the lockstep engine" in engine_of(k, *args, capfd)


def test_three_dimensional_threadgroups_and_partial_groups():
    k = mx.fast.metal_kernel(name="engine_3d", input_names=["x"], output_names=["y"], source="""
        threadgroup float t[4][4][4];
        uint3 p = thread_position_in_threadgroup, g = thread_position_in_grid, n = threads_per_threadgroup;
        uint3 sz = threads_per_grid;
        t[p.z][p.y][p.x] = x[(g.z * sz.y + g.y) * sz.x + g.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // each thread reads its mirror in the group (partial groups mirror within their real size)
        uint3 m = uint3(n.x - 1 - p.x, n.y - 1 - p.y, n.z - 1 - p.z);
        y[(g.z * sz.y + g.y) * sz.x + g.x] = t[m.z][m.y][m.x];""")
    shape = (6, 5, 7)  # z, y, x: partial groups along every axis
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    y, = run(k, [mx.array(x)], (7, 5, 6), (4, 4, 4), [shape])
    want = np.empty_like(x)
    for gz in range(0, 6, 4):
        for gy in range(0, 5, 4):
            for gx in range(0, 7, 4):
                blk = x[gz:gz + 4, gy:gy + 4, gx:gx + 4]
                want[gz:gz + 4, gy:gy + 4, gx:gx + 4] = blk[::-1, ::-1, ::-1]
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("active", [64, 40, 1])
def test_barrier_loop_counters_and_input_scalars_kept_once_per_group(active, capfd):
    """A barrier loop's counter and an input scalar are kept once per group in dense runs
    (every thread at one barrier) and per thread otherwise: threads that return early make
    the later runs not dense. Both must give the same numbers."""
    k = mx.fast.metal_kernel(name="engine_uniform_slots", input_names=["x", "n", "active"], output_names=["y"],
                             source="""
        threadgroup float s[64];
        uint lid = thread_position_in_threadgroup.x;
        if (lid >= uint(active)) return;
        float acc = 0.0f;
        int t = 0;
        for (; t < n; t += 3) {
            s[lid] = x[t * 64 + lid];
            threadgroup_barrier(mem_flags::mem_threadgroup);
            acc += s[(lid + 1) % uint(active)] * float(t + 1) + float(n);
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        y[threadgroup_position_in_grid.x * 64 + lid] = acc + float(t * 1000);""")
    n = 10
    x = np.random.default_rng(5).standard_normal((n * 64,)).astype(np.float32)
    args = [[mx.array(x), n, active], (128, 1, 1), (64, 1, 1), [(128,)]]
    assert "runs on the lockstep engine" in engine_of(k, *args, capfd)
    y, = run(k, *args)
    want = np.zeros(128, np.float32)
    ts = list(range(0, n, 3))
    for lid in range(active):
        acc = 0.0
        for t in ts:
            acc += x[t * 64 + (lid + 1) % active] * (t + 1) + n
        for g in range(2):
            want[g * 64 + lid] = acc + (ts[-1] + 3) * 1000
    written = (np.arange(128) % 64) < active  # threads past `active` return before writing
    np.testing.assert_allclose(y[written], want[written], rtol=1e-5)


def test_barrier_loop_counter_after_a_barrier_free_continue():
    """A barrier loop whose iterations sometimes `continue` before the barrier: after the
    barrier, a thread can go round the loop again without another barrier, so its counter
    in the latch must be its own, not the group's copy taken when the run began."""
    k = mx.fast.metal_kernel(name="engine_uniform_continue", input_names=["x", "n"], output_names=["y"],
                             source="""
        threadgroup float s[64];
        uint lid = thread_position_in_threadgroup.x;
        float acc = 0.0f;
        for (int t = 0; t < n; t++) {
            if (t % 3 == 1) { acc += float(t) * 100.0f; continue; }
            s[lid] = x[t * 64 + lid];
            threadgroup_barrier(mem_flags::mem_threadgroup);
            acc += s[63 - lid] * float(t + 1);
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        y[lid] = acc;""")
    n = 11
    x = np.random.default_rng(6).standard_normal((n * 64,)).astype(np.float32)
    y, = run(k, [mx.array(x), n], (64, 1, 1), (64, 1, 1), [(64,)])
    want = np.zeros(64, np.float64)
    for t in range(n):
        if t % 3 == 1:
            want += t * 100.0
        else:
            want += x[t * 64 + 63 - np.arange(64)] * (t + 1)
    np.testing.assert_allclose(y, want, rtol=1e-5)


# ---------------------------------------------------------------- engines reported, fallback

def test_divergent_barriers_name_the_engine():
    k = mx.fast.metal_kernel(name="engine_diverge", input_names=["x"], output_names=["y"], source="""
        uint l = thread_position_in_threadgroup.x;
        if (l < 16) threadgroup_barrier(mem_flags::mem_threadgroup);
        else threadgroup_barrier(mem_flags::mem_threadgroup);
        y[l] = x[l];""")
    with pytest.raises(RuntimeError, match=r"\(lockstep engine\).*different barriers"), mx.stream(mx.cpu):
        run(k, [mx.ones(32)], (32, 1, 1), (32, 1, 1), [(32,)])


def test_what_the_engine_cannot_take_runs_on_fibers(capfd):
    # a SIMD-group function reached through recursion cannot be inlined into
    # regions: the fibers run the kernel, with the same numbers (recursion is
    # not Metal: the opt-out lets it through, issue #11)
    k = mx.fast.metal_kernel(name="engine_fallback", input_names=["x"], output_names=["y"], header="""
        float deep(float v, int d) { return d > 0 ? deep(v, d - 1) + 1.0f : simd_sum(v); }
        """, source="""
        uint l = thread_index_in_simdgroup;
        y[l] = deep(x[l], int(l % 3));""", compile_options={"allow_non_metal": True})
    x = np.arange(32, dtype=np.float32)
    args = ([mx.array(x)], (32, 1, 1), (32, 1, 1), [(32,)])
    line = engine_of(k, *args, capfd)
    assert "runs on fibers" in line and "cannot be inlined" in line, line
    with mx.stream(mx.cpu):  # the CPU back-end's fallback (recursion is not Metal: no GPU promise)
        y, = run(k, *args)
    # lanes recursing to different depths meet at one simd_sum call site
    np.testing.assert_array_equal(y, x.sum() + np.arange(32) % 3)


def test_past_the_compact_budget_runs_on_fibers(capfd):
    # ~9,000 instructions between barriers: past the per-site run function's budget (sites + 1 copies
    # of the code) and the compact one's (3 copies), so the fibers run it, and say why
    body = "\n".join("    acc = acc * 0.999f + t[(l + %du) & 63u];" % (i * 7 % 64) for i in range(9000))
    k = mx.fast.metal_kernel(name="engine_past_budgets", input_names=["x"], output_names=["y"], source="""
        threadgroup float t[64];
        uint l = thread_position_in_threadgroup.x;
        t[l] = x[l];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float acc = 0.0f;
    %s
        for (int r = 0; r < 4; r++) {
            threadgroup_barrier(mem_flags::mem_threadgroup);
            t[(l + r) & 63u] += acc;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        y[l] = t[63 - l];""" % body)
    x = np.arange(64, dtype=np.float32) / 64
    args = ([mx.array(x)], (64, 1, 1), (64, 1, 1), [(64,)])
    line = engine_of(k, *args, capfd)
    assert "runs on fibers" in line and "compile budget" in line and "compact form" in line, line
    acc = np.zeros(64, np.float32)
    for i in range(9000):
        acc = acc * np.float32(0.999) + x[(np.arange(64) + i * 7 % 64) & 63]
    t = x.copy()
    for r in range(4):
        t[(np.arange(64) + r) & 63] += acc
    with mx.stream(mx.cpu):
        y, = run(k, *args)
    np.testing.assert_allclose(y, t[63 - np.arange(64)], rtol=1e-4)


def test_the_engine_tests_with_the_compact_form():
    """The lockstep engine's compact run function (built past the per-site form's budget) under
    the rule-per-test kernels of this file and the loop-step kernels: MKPY_CBS_COMPACT builds it
    for every cooperative kernel."""
    env = dict(os.environ, PYTHONPATH=ROOT, MKPY_CBS_COMPACT="1", MKPY_GPU="cpu")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        os.path.join(ROOT, "tests", "test_kernel_engine.py"),
                        os.path.join(ROOT, "tests", "test_kernel_loop_steps.py"),
                        "-k", "not under_fibers and not compact_form and not past_the_compact_budget"],
                       env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_mkpy_engine_fibers_runs_the_same_numbers():
    code = ("import mkpy as mx, numpy as np\n"
            "k = mx.fast.metal_kernel(name='env_engine', input_names=['x'], output_names=['y'], source='''\n"
            "    uint l = thread_index_in_simdgroup; y[l] = simd_prefix_inclusive_sum(x[l]);''')\n"
            "y, = k(inputs=[mx.arange(32, dtype=mx.float32)], grid=(32,1,1), threadgroup=(32,1,1),\n"
            "       output_shapes=[(32,)], output_dtypes=[mx.float32], verbose=True)\n"
            "mx.eval(y); print(np.array(y).tolist())\n")
    outs = {}
    for engine in ("fibers", "lockstep"):
        env = dict(os.environ, PYTHONPATH=ROOT, MKPY_ENGINE=engine, MKPY_GPU="cpu")
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs[engine] = r.stdout
    assert "runs on fibers (MKPY_ENGINE=fibers)" in outs["fibers"]
    assert "runs on the lockstep engine" in outs["lockstep"]
    want = str(np.cumsum(np.arange(32)).astype(float).tolist())
    assert outs["fibers"].strip().endswith(want) and outs["lockstep"].strip().endswith(want)


@pytest.mark.skipif(os.environ.get("MKPY_ENGINE") == "fibers", reason="already the fibers run")
def test_the_kernel_corpus_under_fibers():
    """The corpus (tests/test_kernel_corpus.py) runs under the lockstep engine in the
    suite; here it runs again with every cooperative kernel on fibers."""
    env = dict(os.environ, PYTHONPATH=ROOT, MKPY_ENGINE="fibers", MKPY_GPU="cpu")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        os.path.join(ROOT, "tests", "test_kernel_corpus.py")],
                       env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


# ------------------------------------------- the fiber engine's release order (issue #25)
# Fibers used to release waiting SIMD-group calls in the order of the program text, header first,
# and to match lanes by the call's text position. Now mkpy's compiler pass gives every call its
# rank in the inlined control flow (the lockstep engine's order), and loops with SIMD-group calls
# a wait at their latch. Each kernel runs on the three CPU engines, which must give what a GPU
# gives.

@pytest.fixture(params=["lockstep", "compact", "fibers", "checker"])
def cpu_engine(request, monkeypatch):
    if request.param == "fibers":
        monkeypatch.setenv("MKPY_ENGINE", "fibers")
    else:
        monkeypatch.delenv("MKPY_ENGINE", raising=False)
    if request.param == "compact":  # the lockstep engine's compact run function
        monkeypatch.setenv("MKPY_CBS_COMPACT", "1")
    with mx.metal.check(request.param == "checker"):
        yield request.param


def lanes_kernel(name, engine, source, header=""):
    k = mx.fast.metal_kernel(name="%s_%s" % (name, engine), input_names=["x"], output_names=["y"], source=source,
                             header=header)
    y, = run(k, [mx.zeros(1, dtype=mx.uint32)], (32, 1, 1), (32, 1, 1), [(32,)], [mx.uint32])
    return y


def test_header_simd_call_after_a_divergent_if_waits_for_the_branch(cpu_engine):
    # the fuzzer's seed 777 case, by hand: the helper's call comes after the if in the program,
    # so lane 0 (which skipped the branch) meets the other lanes there: the whole SIMD-group
    y = lanes_kernel("order_after_if", cpu_engine, header="""
        inline uint active() { return uint(static_cast<simd_vote::vote_t>(simd_active_threads_mask())); }""",
                     source="""
        uint lane = thread_index_in_simdgroup;
        uint m = 0;
        if (lane != 0) m = simd_max(lane);
        y[lane] = active() + m * 0u + x[0];""")
    np.testing.assert_array_equal(y, np.full(32, 0xFFFFFFFF, np.uint32))


def test_one_helper_called_from_two_places_is_two_call_sites(cpu_engine):
    # the same simd_sum text, reached from both sides of a divergent if: two calls on a GPU
    y = lanes_kernel("order_two_sites", cpu_engine, header="inline uint count() { return simd_sum(1u); }",
                     source="""
        uint lane = thread_index_in_simdgroup;
        uint a = 0, b = 0;
        if (lane < 8) a = count(); else b = count();
        y[lane] = a * 100u + b + x[0];""")
    np.testing.assert_array_equal(y, np.where(np.arange(32) < 8, 800, 24).astype(np.uint32))


def test_a_lane_that_continues_waits_for_its_iteration(cpu_engine):
    # lane t skips iteration t; the others' simd_sum of that iteration counts 31 lanes, and the lane
    # that continued does not join them from the next iteration
    y = lanes_kernel("order_latch", cpu_engine, source="""
        uint lane = thread_index_in_simdgroup;
        uint r = 0;
        for (uint t = x[0]; t < 4u; ++t) {
            if (lane == t) continue;
            r = r * 100u + simd_sum(1u);
        }
        y[lane] = r;""")
    want = [int("".join("31" for t in range(4) if t != lane)) for lane in range(32)]
    np.testing.assert_array_equal(y, np.array(want, np.uint32))
