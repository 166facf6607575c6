"""Metal's active mask on the CUDA target (docs/design.md, "Metal's SIMD-group semantics in
divergent code"; kernel/simt.c, mkpy_cuda.h's simt guards). Without a GPU: each kernel runs on the
CPU engines (Metal's model: the expected values) while NVRTC compiles its CUDA program for sm_80
and sm_90 (MKPY_CUDA_COMPILE_CHECK), and the program is checked for the mask plumbing at the
user's lines. On a GPU machine the same kernels run on the GPU (the default stream) and must give
the same values; test_kernel_corpus.py::test_simd_functions_in_divergent_code and
test_kernel_engine.py's divergent tests are the others that run there."""
import glob
import os

import numpy as np
import pytest

import mkpy as mx
from test_cuda_compile import nvrtc  # noqa: F401 (autouse: skips without NVRTC, else checks sm_80 and sm_90)
from test_kernel_corpus import DIVERGENT_SIMD
from test_kernel_engine import DIVERGENT_SIDES, EARLY_RETURN, LOOP_MASKS


def program(kernel, name, inputs, grid, tg, shapes, dtypes=None):
    """Runs the kernel on the default stream (the GPU where there is one) and returns its outputs
    and the user's source lines as the CUDA program has them (the CPU stream's compile check
    writes the program to the disk cache, <hex>.cu)."""
    dtypes = dtypes or [mx.float32] * len(shapes)
    outs = kernel(inputs=inputs, grid=grid, threadgroup=tg, output_shapes=shapes, output_dtypes=dtypes)
    mx.eval(*outs)
    with mx.stream(mx.cpu):
        mx.eval(*kernel(inputs=inputs, grid=grid, threadgroup=tg, output_shapes=shapes, output_dtypes=dtypes))
    texts = [open(p).read() for p in glob.glob(os.path.join(os.environ["MKPY_CACHE_DIR"], "*.cu"))]
    texts = [t for t in texts if f'#line 1 "<kernel {name} source>"' in t]
    assert texts, name
    text = texts[0]
    body = text.split(f'#line 1 "<kernel {name} source>"\n', 1)[1].split("\n#line ", 1)[0]
    return [np.array(o) for o in outs], text, body.split("\n")


def line_with(src, needle):
    """The one line of the program's user source holding `needle` (the guards go on the line of
    the statement they wrap: the #line markers hold)."""
    found = [s for s in src if needle in s]
    assert len(found) == 1, (needle, found)
    return found[0]


def per_simdgroup(n, f):
    """f(lanes of one SIMD-group, their indices) for each SIMD-group of a launch of n threads."""
    out = np.zeros(n, np.float64)
    for s0 in range(0, n, 32):
        idx = np.arange(s0, min(s0 + 32, n))
        out[idx] = f(idx - s0, idx)
    return out


# ------------------------------------------------- the kernels of the three GPU tests


def test_corpus_kernel_tracks_the_mask():
    x = np.arange(-20, 44, dtype=np.float32)
    _, text, src = program(DIVERGENT_SIMD, "divergent_simd", [mx.array(x)], (64, 1, 1), (64, 1, 1), [(64,)] * 5)
    assert "#define MKPY_SIMT 64" in text and "mkpy::simt_begin(mkpy_warp" in text
    assert "simt_if<0, 0> mkpy_g(static_cast<bool> (lane < 12))" in line_with(src, "(lane < 12)")
    assert "simt_if<0, 0> mkpy_g(static_cast<bool> (lane % 3 == 0))" in line_with(src, "(lane % 3 == 0)")
    assert "simt_" not in line_with(src, "y = simd_sum(v);")  # all lanes again: nothing added
    assert "simt_loop<0> mkpy_l; for (uint i = 0; mkpy_l.test(static_cast<bool>(i < lane % 4)); i++) { ::mkpy::simt_iter" in \
        line_with(src, "lane % 4")
    assert "::mkpy::simt_select(static_cast<bool>((lane & 1) ), [&]() { return ( simd_sum(v) ); }" in line_with(src, "e[thread_")


def test_sides_of_a_branch_are_ordered():
    (y,), text, src = program(DIVERGENT_SIDES, "divergent_sides", [mx.array([1.0])], (32, 1, 1), (32, 1, 1),
                              [(32,)])
    np.testing.assert_array_equal(y, np.where(np.arange(32) % 2, 5, -1).astype(np.float32))
    # no SIMD-group function, but threadgroup memory and a divergent if/else: the sides are ordered
    assert "#define MKPY_SIMT" in text
    side = line_with(src, "s[0] = 5.0f")
    assert "simt_if<1, 0>" in side and "mkpy_g.then_end(); } else if (mkpy_g.other())" in side
    # the uniform-looking `if (l == 0)` before the barrier and the last `if` have no else: unguarded
    assert sum("simt_if" in s for s in src) == 1


def test_loop_iterations_break_and_continue():
    (y, z), text, src = program(LOOP_MASKS, "loop_masks", [mx.array([0.0])], (32, 1, 1), (32, 1, 1),
                                [(32,), (32,)], [mx.uint32, mx.uint32])
    np.testing.assert_array_equal(y, [sum(31 - i for i in range(l)) for l in range(32)])
    np.testing.assert_array_equal(z, [sum(31 - i for i in range(0, l, 2)) for l in range(32)])
    code = "\n".join(src)
    assert "mkpy_l.test(static_cast<bool>(i < l))" in code
    assert "for (uint i = 0;mkpy_l.test(true); i++) { ::mkpy::simt_iter<decltype(mkpy_l), 1>" in code  # break
    assert "simt_if<0, 1> mkpy_g(static_cast<bool> (i == l)); if (mkpy_g.then()) { break; }" in code
    assert "{ mkpy_i.cont(); continue; }" in code


def test_early_return():
    (y,), text, src = program(EARLY_RETURN, "early_return", [mx.ones(32)], (32, 1, 1), (32, 1, 1), [(32,)])
    np.testing.assert_array_equal(y, np.where(np.arange(32) < 20, 20, -1).astype(np.float32))
    assert "simt_if<0, 1> mkpy_g(static_cast<bool> (l >= 20)); if (mkpy_g.then()) { return; }" in line_with(src, "return")


# ------------------------------------------------- more divergent shapes

NESTED = mx.fast.metal_kernel(name="simt_nested", input_names=["inp"], output_names=["out"], source="""
    uint lane = thread_index_in_simdgroup;
    float v = inp[thread_position_in_grid.x];
    float x = -1;
    if (lane < 16) {
        if (lane % 2) x = simd_sum(v);
        else x = simd_max(v) + 100;
    } else if (lane < 24) {
        x = simd_min(v) - 100;
    }
    out[thread_position_in_grid.x] = x + 1000 * simd_sum(1.0f);
""")


def test_nested_ifs():
    x = np.random.default_rng(1).integers(-50, 50, 64).astype(np.float32)
    (got,), text, src = program(NESTED, "simt_nested", [mx.array(x)], (64, 1, 1), (64, 1, 1), [(64,)])

    def want(l, idx):
        v = x[idx]
        odd, even, mid = (l < 16) & (l % 2 == 1), (l < 16) & (l % 2 == 0), (l >= 16) & (l < 24)
        r = np.full(len(l), -1.0)
        r[odd], r[even], r[mid] = v[odd].sum(), v[even].max() + 100, v[mid].min() - 100
        return r + 1000 * len(l)
    np.testing.assert_array_equal(got, per_simdgroup(64, want))
    assert "simt_if<1, 0> mkpy_g(static_cast<bool> (lane < 16))" in line_with(src, "(lane < 16)")  # if ... else if: divergent
    assert "simt_if<1, 0> mkpy_g(static_cast<bool> (lane % 2))" in line_with(src, "(lane % 2)")
    assert "else if (mkpy_g.other()) { ::mkpy::simt_if<0, 0> mkpy_g(static_cast<bool> (lane < 24))" in line_with(src, "lane < 24")


BREAK_CONTINUE = mx.fast.metal_kernel(name="simt_break_continue", input_names=["inp"], output_names=["out"],
                                      source="""
    uint lane = thread_index_in_simdgroup;
    uint acc = 0;
    for (uint i = 0; i < 8; i++) {
        if (lane % 8 == i) break;
        if ((i + lane) % 3 == 0) continue;
        acc += simd_sum(1u) * (i + 1);
    }
    out[thread_position_in_grid.x] = acc;
""")


def test_break_and_continue_in_a_uniform_loop():
    (got,), text, src = program(BREAK_CONTINUE, "simt_break_continue", [mx.zeros(1)], (64, 1, 1), (64, 1, 1),
                                [(64,)], [mx.uint32])

    def want(l, idx):
        acc = np.zeros(len(l))
        gone = np.zeros(len(l), bool)
        for i in range(8):
            gone |= l % 8 == i
            runs = ~gone & ((i + l) % 3 != 0)
            acc[runs] += runs.sum() * (i + 1)
        return acc
    np.testing.assert_array_equal(got, per_simdgroup(64, want))
    # a uniform trip count, but a lane may break under a divergent if: the loop is guarded
    assert "simt_loop<0> mkpy_l; for (uint i = 0; mkpy_l.test(static_cast<bool>(i < 8)); i++)" in line_with(src, "i < 8")


RETURNS = mx.fast.metal_kernel(name="simt_returns", input_names=["inp"], output_names=["out"], source="""
    uint lane = thread_index_in_simdgroup, tid = thread_position_in_grid.x;
    out[tid] = -1;
    if (lane % 4 == 3) return;
    float s = simd_sum(1.0f);
    for (uint i = 0; i < lane % 5; i++) {
        if (i == 2 && lane % 2 == 0) return;
        s += simd_sum(1.0f);
    }
    out[tid] = s;
""")


def test_returns_from_a_branch_and_from_a_loop():
    (got,), text, src = program(RETURNS, "simt_returns", [mx.zeros(1)], (64, 1, 1), (64, 1, 1), [(64,)])

    def want(l, idx):
        alive = l % 4 != 3
        s = np.full(len(l), float(alive.sum()))
        for i in range(5):
            alive = alive & ~((i == 2) & (l % 2 == 0) & (l % 5 > i))
            runs = alive & (l % 5 > i)
            s[runs] += runs.sum()
        return np.where(alive, s, -1)
    np.testing.assert_array_equal(got, per_simdgroup(64, want))
    assert "simt_loop<1> mkpy_l;" in line_with(src, "lane % 5") and "simt_iter<decltype(mkpy_l), 1>" in \
        line_with(src, "lane % 5")
    assert "simt_if<0, 1>" in line_with(src, "i == 2") and "simt_if<0, 1>" in line_with(src, "lane % 4 == 3")


TERNARIES = mx.fast.metal_kernel(name="simt_ternaries", input_names=["inp"], output_names=["out"], source="""
    uint lane = thread_index_in_simdgroup;
    float v = inp[thread_position_in_grid.x];
    out[thread_position_in_grid.x] = lane < 10 ? simd_sum(v) : (lane < 20 ? simd_max(v) : simd_min(v));
""")


def test_conditional_operators_with_simd_calls():
    x = np.random.default_rng(2).integers(-50, 50, 64).astype(np.float32)
    (got,), text, src = program(TERNARIES, "simt_ternaries", [mx.array(x)], (64, 1, 1), (64, 1, 1), [(64,)])

    def want(l, idx):
        v = x[idx]
        a, b, c = l < 10, (l >= 10) & (l < 20), l >= 20
        return np.where(a, v[a].sum(), np.where(b, v[b].max(), v[c].min()))
    np.testing.assert_array_equal(got, per_simdgroup(64, want))
    assert line_with(src, "out[").count("::mkpy::simt_select(") == 2


HELPER = mx.fast.metal_kernel(name="simt_helper", input_names=["inp"], output_names=["out", "count"],
                              header="float group_total(float v) { return simd_sum(v); }\n", source="""
    uint lane = thread_index_in_simdgroup;
    float v = inp[thread_position_in_grid.x];
    float x = 0;
    uint k = lane % 6, n = 0, j = 0;
    if (lane >= 5) x = group_total(v);
    while (k > 0) { n += simd_sum(1u); k--; }
    do { n += 100 * simd_sum(1u); j++; } while (j < lane % 3);
    out[thread_position_in_grid.x] = x;
    count[thread_position_in_grid.x] = n;
""")


def test_header_function_and_while_loops():
    x = np.random.default_rng(3).integers(-50, 50, 64).astype(np.float32)
    (got, count), text, src = program(HELPER, "simt_helper", [mx.array(x)], (64, 1, 1), (64, 1, 1), [(64,), (64,)],
                                      [mx.float32, mx.uint32])

    def total(l, idx):
        hi = l >= 5
        return np.where(hi, x[idx][hi].sum(), 0)

    def counts(l, idx):
        n = np.zeros(len(l))
        for t in range(6):
            n[l % 6 > t] += (l % 6 > t).sum()
        trips = np.maximum(1, l % 3)
        for t in range(3):
            n[trips > t] += 100 * (trips > t).sum()
        return n
    np.testing.assert_array_equal(got, per_simdgroup(64, total))
    np.testing.assert_array_equal(count, per_simdgroup(64, counts))
    assert "simt_if<0, 0> mkpy_g(static_cast<bool> (lane >= 5))" in line_with(src, "group_total")  # the helper's caller
    assert "simt_loop<0> mkpy_l; while (mkpy_l.test(static_cast<bool>(k > 0)))" in line_with(src, "k > 0")
    do = line_with(src, "j++")
    assert "simt_loop<0> mkpy_l; do { ::mkpy::simt_iter" in do and "while (mkpy_l.test(static_cast<bool>(j < lane % 3)))" in do
    assert "float group_total(float v) { return simd_sum(v); }" in text  # the helper itself is unchanged


# ------------------------------------------------- what stays as it was

UNIFORM = mx.fast.metal_kernel(name="simt_uniform", input_names=["inp"], output_names=["out"], source="""
    uint sg = simdgroup_index_in_threadgroup, lane = thread_index_in_simdgroup;
    float v = inp[thread_position_in_grid.x], x = 0;
    for (uint c = lane; c < 40; c += 32) x += 1;   // divergent, but no SIMD-group call inside
    if (sg == 0) x += simd_sum(v);                   // uniform within the SIMD-group
    for (uint i = 0; i < 3; i++) x += simd_max(v);   // a uniform trip count
    if (lane == 0) out[thread_position_in_grid.x / 32] = x;
""")


def test_uniform_branches_are_left_alone():
    x = np.random.default_rng(4).integers(-50, 50, 64).astype(np.float32)
    (got,), text, src = program(UNIFORM, "simt_uniform", [mx.array(x)], (64, 1, 1), (64, 1, 1), [(2,)])
    np.testing.assert_array_equal(got, [2 + x[:32].sum() + 3 * x[:32].max(), 2 + 3 * x[32:].max()])
    assert "MKPY_SIMT" not in text and "simt_" not in "\n".join(src)


def test_errors_keep_the_users_line():
    # NVRTC refuses line 5 (clang, the CPU, accepts it); the guard goes on line 4
    k = mx.fast.metal_kernel(name="simt_bad_line", input_names=["inp"], output_names=["out"], source="""
    uint lane = thread_index_in_simdgroup;
    float x = 0;
    if (lane < 3) x = simd_sum(inp[lane]);
    out[0] = x + float(__builtin_readcyclecounter() & 0);
""")
    with pytest.raises(RuntimeError) as e, mx.stream(mx.cpu):
        mx.eval(k(inputs=[mx.ones(32)], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(1,)],
                  output_dtypes=[mx.float32])[0])
    assert "<kernel simt_bad_line source>:5: error:" in str(e.value)


MACRO = mx.fast.metal_kernel(name="simt_macro", input_names=["inp"], output_names=["out"],
                             header="#define GROUP_MAX(v) simd_max(v)\n", source="""
    uint lane = thread_index_in_simdgroup;
    float v = inp[thread_position_in_grid.x], x = 0;
    if (lane % 5 == 1) x = GROUP_MAX(v);
    out[thread_position_in_grid.x] = x;
""")


def test_macro_with_a_simd_call():
    x = np.random.default_rng(5).integers(-50, 50, 32).astype(np.float32)
    (got,), text, src = program(MACRO, "simt_macro", [mx.array(x)], (32, 1, 1), (32, 1, 1), [(32,)])
    sel = np.arange(32) % 5 == 1
    np.testing.assert_array_equal(got, np.where(sel, x[sel].max(), 0))
    assert "simt_if<0, 0>" in line_with(src, "GROUP_MAX(v)")
