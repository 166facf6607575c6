"""Kernels run with Metal's dispatchThreads semantics and give NumPy's numbers."""
import os
import platform

import numpy as np
import pytest

import mkpy as mx

UINT3 = ["dispatch_threads_per_threadgroup", "grid_origin", "grid_size", "thread_position_in_grid",
         "thread_position_in_threadgroup", "threadgroup_position_in_grid", "threadgroups_per_grid",
         "threads_per_grid", "threads_per_threadgroup"]
UINT = ["dispatch_quadgroups_per_threadgroup", "dispatch_simdgroups_per_threadgroup",
        "quadgroup_index_in_threadgroup", "quadgroups_per_threadgroup", "simdgroup_index_in_threadgroup",
        "simdgroups_per_threadgroup", "thread_execution_width", "thread_index_in_quadgroup",
        "thread_index_in_simdgroup", "thread_index_in_threadgroup", "threads_per_simdgroup"]

ATTR_SOURCE = "uint3 g = thread_position_in_grid;\n" \
    "uint i = (g.z * threads_per_grid.y + g.y) * threads_per_grid.x + g.x;\n" + "".join(
        f"{n}_out[3 * i] = {n}.x; {n}_out[3 * i + 1] = {n}.y; {n}_out[3 * i + 2] = {n}.z;\n" for n in UINT3) + "".join(
        f"{n}_out[i] = {n};\n" for n in UINT) + "count[i] += 1;\n"

ATTR_KERNEL = mx.fast.metal_kernel(name="attributes", input_names=[],
                                   output_names=[n + "_out" for n in UINT3 + UINT] + ["count"],
                                   source=ATTR_SOURCE)


def model(grid, tg):
    """Metal's values for every thread, indexed like the kernel's i."""
    tg = [min(t, g) for t, g in zip(tg, grid)]
    groups = [(g + t - 1) // t for g, t in zip(grid, tg)]
    n = grid[0] * grid[1] * grid[2]
    vals = {k: np.zeros((n, 3), np.uint32) for k in UINT3}
    vals.update({k: np.zeros(n, np.uint32) for k in UINT})
    for gz in range(grid[2]):
        for gy in range(grid[1]):
            for gx in range(grid[0]):
                i = (gz * grid[1] + gy) * grid[0] + gx
                pos = (gx, gy, gz)
                b = [p // t for p, t in zip(pos, tg)]
                local = [p % t for p, t in zip(pos, tg)]
                actual = [min(t, g - bb * t) for t, g, bb in zip(tg, grid, b)]
                tid = local[0] + local[1] * actual[0] + local[2] * actual[0] * actual[1]
                count = actual[0] * actual[1] * actual[2]
                requested = tg[0] * tg[1] * tg[2]
                v3 = dict(dispatch_threads_per_threadgroup=tg, grid_origin=(0, 0, 0), grid_size=grid,
                          thread_position_in_grid=pos, thread_position_in_threadgroup=local,
                          threadgroup_position_in_grid=b, threadgroups_per_grid=groups, threads_per_grid=grid,
                          threads_per_threadgroup=actual)
                for k, v in v3.items():
                    vals[k][i] = v
                v1 = dict(dispatch_quadgroups_per_threadgroup=(requested + 3) // 4,
                          dispatch_simdgroups_per_threadgroup=(requested + 31) // 32,
                          quadgroup_index_in_threadgroup=tid // 4, quadgroups_per_threadgroup=(count + 3) // 4,
                          simdgroup_index_in_threadgroup=tid // 32, simdgroups_per_threadgroup=(count + 31) // 32,
                          thread_execution_width=32, thread_index_in_quadgroup=tid % 4,
                          thread_index_in_simdgroup=tid % 32, thread_index_in_threadgroup=tid,
                          threads_per_simdgroup=32)
                for k, v in v1.items():
                    vals[k][i] = v
    return vals


@pytest.mark.parametrize("grid,tg", [
    ((10, 1, 1), (4, 1, 1)),         # 1D, last group partial
    ((37, 1, 1), (32, 1, 1)),
    ((5, 7, 1), (4, 3, 1)),          # 2D, partial in both
    ((3, 5, 6), (2, 2, 4)),          # 3D
    ((3, 2, 1), (8, 8, 8)),          # threadgroup clamped to the grid
    ((70, 3, 1), (64, 2, 1)),        # several SIMD-groups, partial edge groups
    ((96, 1, 1), (32, 1, 1)),        # whole one-row groups (the GPU prologue's shortest path)
    ((12, 6, 4), (4, 3, 2)),         # whole groups of several rows and planes
    ((10, 3, 2), (4, 1, 1)),         # one-row groups in a 3D grid, partial along x
])
def test_every_attribute_has_its_metal_value(grid, tg):
    n = grid[0] * grid[1] * grid[2]
    shapes = [(n * 3,)] * len(UINT3) + [(n,)] * len(UINT) + [(n,)]
    outs = ATTR_KERNEL(inputs=[], output_shapes=shapes, output_dtypes=[mx.uint32] * len(shapes), grid=grid,
                       threadgroup=tg, init_value=0)
    mx.eval(outs)
    expected = model(grid, tg)
    names = UINT3 + UINT
    for name, out in zip(names, outs):
        got = np.array(out).reshape(expected[name].shape)
        np.testing.assert_array_equal(got, expected[name], err_msg=name)
    # exactly `grid` threads ran, each once
    np.testing.assert_array_equal(np.array(outs[-1]), np.ones(n, np.uint32))


GROUP_IDS = mx.fast.metal_kernel(name="group_ids", input_names=[], output_names=["seen", "gy", "gz"], source="""
    uint3 g = thread_position_in_grid;
    uint i = (g.z * threads_per_grid.y + g.y) * threads_per_grid.x + g.x;
    seen[i] = i + 1;
    gy[i] = threadgroup_position_in_grid.y;
    gz[i] = threadgroup_position_in_grid.z;
""")


@pytest.mark.parametrize("grid,tg", [
    ((1, 70000, 1), (1, 1, 1)),   # more groups along y than a CUDA grid has (65535): two launches there
    ((2, 1, 66000), (2, 1, 1)),   # along z
    ((3, 65537, 2), (2, 1, 1)),   # both, with a partial group along x
])
def test_grids_of_more_groups_than_a_cuda_launch(grid, tg):
    n = grid[0] * grid[1] * grid[2]
    seen, gy, gz = GROUP_IDS(inputs=[], output_shapes=[(n,)] * 3, output_dtypes=[mx.uint32] * 3, grid=grid,
                             threadgroup=tg, init_value=0)
    z, y, x = np.indices(grid[::-1]).reshape(3, -1)
    np.testing.assert_array_equal(np.array(seen), np.arange(1, n + 1, dtype=np.uint32))
    np.testing.assert_array_equal(np.array(gy), y // tg[1])
    np.testing.assert_array_equal(np.array(gz), z // tg[2])


def test_grid_and_threadgroup_from_mkpy_scalars():
    # the guides build them with mx ops: integer scalars are taken (a float
    # scalar is a TypeError, as in MLX: tests/test_kernel_parity.py)
    k = mx.fast.metal_kernel(name="fill_index", input_names=[], output_names=["out"],
                             source="out[thread_position_in_grid.x] = thread_position_in_grid.x;")
    tpg = mx.array(4, dtype=mx.uint32)
    one = mx.array(1, dtype=mx.uint32)
    total = mx.floor_divide(mx.array(20, dtype=mx.uint32), mx.array(2, dtype=mx.uint32))  # uint32 10
    out, = k(inputs=[], output_shapes=[(10,)], output_dtypes=[mx.int32], grid=(total, one, one),
             threadgroup=(tpg, one, one))
    assert out.tolist() == list(range(10))


def test_myexp_from_the_mlx_docs():
    source = """
        uint elem = thread_position_in_grid.x;
        T tmp = inp[elem];
        out[elem] = metal::exp(tmp);
    """
    kernel = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=source)
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float16)
    a = mx.array(x)
    outputs = kernel(inputs=[a], template=[("T", mx.float32)], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
                     output_shapes=[a.shape], output_dtypes=[a.dtype])
    expected = np.exp(x.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(np.array(outputs[0]), expected)


def test_myexp_strided_from_the_mlx_docs():
    source = """
        uint elem = thread_position_in_grid.x;
        uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);
        T tmp = inp[loc];
        out[elem] = metal::exp(tmp);
    """
    kernel = mx.fast.metal_kernel(name="myexp_strided", input_names=["inp"], output_names=["out"],
                                  source=source, ensure_row_contiguous=False)
    x = np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32)
    a = mx.array(x)[::2, 1:].T   # a non-contiguous view, passed with its real strides
    outputs = kernel(inputs=[a], template=[("T", mx.float32)], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
                     output_shapes=[a.shape], output_dtypes=[a.dtype])
    np.testing.assert_allclose(np.array(outputs[0]), np.exp(x[::2, 1:].T), rtol=1e-6)


def test_ensure_row_contiguous_copies_views():
    k = mx.fast.metal_kernel(name="copy_rows", input_names=["inp"], output_names=["out"],
                             source="out[thread_position_in_grid.x] = inp[thread_position_in_grid.x];")
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    a = mx.array(x).T
    out, = k(inputs=[a], output_shapes=[(24,)], output_dtypes=[mx.int32], grid=(24, 1, 1), threadgroup=(8, 1, 1))
    np.testing.assert_array_equal(np.array(out), x.T.reshape(-1))


def test_init_value_and_multiple_outputs_with_dtypes():
    k = mx.fast.metal_kernel(name="two_outputs", input_names=["a"], output_names=["s", "p"], source="""
        uint i = thread_position_in_grid.x;
        if (i % 2 == 0) { s[i] = a[i] + 1; p[i] = a[i] * 2; }
    """)
    a = mx.array(list(range(8)), dtype=mx.int32)
    s, p = k(inputs=[a], output_shapes=[(8,), (8,)], output_dtypes=[mx.int32, mx.float32], grid=(8, 1, 1),
             threadgroup=(8, 1, 1), init_value=-1)
    assert s.tolist() == [1, -1, 3, -1, 5, -1, 7, -1]
    assert p.dtype == mx.float32 and p.tolist() == [0.0, -1.0, 4.0, -1.0, 8.0, -1.0, 12.0, -1.0]


def test_one_kernel_object_with_different_dtypes_in_one_graph():
    k = mx.fast.metal_kernel(name="twice", input_names=["x"], output_names=["y"],
                             source="y[thread_position_in_grid.x] = x[thread_position_in_grid.x] * 2;")
    outs = []
    for dt in (mx.float32, mx.int32, mx.float16, mx.uint8):
        x = mx.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=dt)
        outs.append(k(inputs=[x], output_shapes=[(8,)], output_dtypes=[dt], grid=(8, 1, 1),
                       threadgroup=(4, 1, 1))[0])
    mx.eval(outs)
    for o in outs:
        assert o.tolist() == [2, 4, 6, 8, 10, 12, 14, 16]


def test_same_name_different_source_never_collide():
    a = mx.array([1.0] * 8)
    k1 = mx.fast.metal_kernel(name="same", input_names=["a"], output_names=["o"],
                              source="o[thread_position_in_grid.x] = a[thread_position_in_grid.x] + 1;")
    k2 = mx.fast.metal_kernel(name="same", input_names=["a"], output_names=["o"],
                              source="o[thread_position_in_grid.x] = a[thread_position_in_grid.x] + 2;")
    args = dict(inputs=[a], output_shapes=[(8,)], output_dtypes=[mx.float32], grid=(8, 1, 1), threadgroup=(8, 1, 1))
    o1, o2 = k1(**args)[0], k2(**args)[0]
    mx.eval(o1, o2)        # both in one eval
    assert o1.tolist() == [2.0] * 8 and o2.tolist() == [3.0] * 8
    assert k1(**args)[0].tolist() == [2.0] * 8   # and across evals


def test_vector_and_half_types_match_numpy():
    header = """
    inline float4 shade(float4 v, float s) { return v * s + float4(v.xy, 0, 1); }
    """
    source = """
        uint i = thread_position_in_grid.x;
        float4 v = float4(inp[4 * i], inp[4 * i + 1], inp[4 * i + 2], inp[4 * i + 3]);
        float4 w = shade(v, 2.0f);
        w.xy = w.yx;
        half4 h = half4(w);
        h *= half(0.5);
        float3 c = cross(v.xyz, float3(0, 0, 1));
        out[4 * i] = h.x; out[4 * i + 1] = h.y; out[4 * i + 2] = h.z; out[4 * i + 3] = h.w;
        extra[3 * i] = c.x; extra[3 * i + 1] = c.y; extra[3 * i + 2] = dot(v, float4(1)) + length(v.zw);
    """
    k = mx.fast.metal_kernel(name="vectors", input_names=["inp"], output_names=["out", "extra"], source=source,
                             header=header)
    x = np.random.default_rng(2).standard_normal(32).astype(np.float32)
    out, extra = k(inputs=[mx.array(x)], output_shapes=[(32,), (24,)], output_dtypes=[mx.float16, mx.float32],
                   grid=(8, 1, 1), threadgroup=(8, 1, 1))
    v = x.reshape(8, 4)
    w = v * 2 + np.stack([v[:, 0], v[:, 1], np.zeros(8), np.ones(8)], 1).astype(np.float32)
    w[:, [0, 1]] = w[:, [1, 0]]
    h = (w.astype(np.float16) * np.float16(0.5)).astype(np.float16)
    np.testing.assert_array_equal(np.array(out).reshape(8, 4), h)
    c = np.cross(v[:, :3], np.array([0, 0, 1], np.float32))
    e = np.array(extra).reshape(8, 3)
    np.testing.assert_allclose(e[:, :2], c[:, :2], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(e[:, 2], v.sum(1) + np.hypot(v[:, 2], v[:, 3]), rtol=1e-5)


def test_half_literals_and_bfloat16():
    k = mx.fast.metal_kernel(name="literals", input_names=["a"], output_names=["o"], source="""
        uint i = thread_position_in_grid.x;
        o[i] = bfloat16_t(float(a[i]) * 1.5h + 0.25h);
    """)
    a = mx.array([1.0, 2.0, -3.0, 0.5, 8.0, 1e3, -0.125, 4.0], dtype=mx.float16)
    o, = k(inputs=[a], output_shapes=[(8,)], output_dtypes=[mx.bfloat16], grid=(8, 1, 1), threadgroup=(8, 1, 1))
    expected = [v * 1.5 + 0.25 for v in [1.0, 2.0, -3.0, 0.5, 8.0, 1e3, -0.125, 4.0]]
    np.testing.assert_allclose(o.astype(mx.float32).tolist(), expected, rtol=1e-2)


@pytest.mark.parametrize("mode", ["safe", "relaxed", "fast"])
def test_math_modes(mode):
    src = """
        uint i = thread_position_in_grid.x;
    #ifdef __FAST_MATH__
        flag[0] = 1;
    #else
        flag[0] = 0;
    #endif
        o[i] = metal::exp(a[i]);
    """
    k = mx.fast.metal_kernel(name="modes", input_names=["a"], output_names=["o", "flag"], source=src,
                             compile_options={"math_mode": mode})
    a = mx.array([-float("inf"), 0.0, 1.0, float("nan"), 2.0, -1.0, 3.0, 0.5])
    o, flag = k(inputs=[a], output_shapes=[(8,), (1,)], output_dtypes=[mx.float32, mx.int32], grid=(8, 1, 1),
                threadgroup=(8, 1, 1))
    assert flag.item() == (1 if mode == "fast" else 0)
    vals = o.tolist()
    np.testing.assert_allclose([vals[i] for i in (1, 2, 4, 5, 6, 7)],
                               np.exp(np.array([0, 1, 2, -1, 3, 0.5], np.float32)), rtol=1e-5)
    if mode == "safe":
        assert vals[0] == 0.0 and np.isnan(vals[3])


SPECIAL = [float("inf"), -float("inf"), float("nan"), 0.0, -0.0, 88.5, 88.8, -87.5, -100.0, -104.0, 1e-30, -1e-30]


@pytest.mark.parametrize("mode", ["safe", "relaxed"])
def test_vectorised_exp_keeps_ieee_special_values(mode):
    """A long barrier-free exp kernel runs as a vectorised loop (libmvec on x86-64); in the safe and
    relaxed modes it keeps Inf, NaN, overflow, underflow to subnormals and zero, lane by lane."""
    k = mx.fast.metal_kernel(name="vexp", input_names=["a"], output_names=["o"],
                             source="uint i = thread_position_in_grid.x;\no[i] = metal::exp(a[i]);",
                             compile_options={"math_mode": mode})
    rng = np.random.default_rng(0)
    a = rng.normal(0, 20, 4099).astype(np.float32)
    a[::len(SPECIAL) + 5][:len(SPECIAL)] = SPECIAL[:len(a[::len(SPECIAL) + 5])]
    a[7:7 + len(SPECIAL)] = SPECIAL  # specials next to ordinary lanes in one vector
    o, = k(inputs=[mx.array(a)], output_shapes=[a.shape], output_dtypes=[mx.float32], grid=(a.size, 1, 1),
           threadgroup=(256, 1, 1))
    got = np.array(o)
    with np.errstate(over="ignore"):
        ref = np.exp(a.astype(np.float64)).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(ref))
    assert np.array_equal(np.isinf(got), np.isinf(ref)) and np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])
    fin = np.isfinite(ref) & (ref > np.finfo(np.float32).tiny)
    ulps = np.abs(got[fin].view(np.int32).astype(np.int64) - ref[fin].view(np.int32).astype(np.int64))
    assert ulps.max() <= 2
    sub = np.isfinite(ref) & (ref <= np.finfo(np.float32).tiny)
    np.testing.assert_allclose(got[sub], ref[sub], rtol=0, atol=2e-45)  # subnormals, not flushed


def test_relaxed_mode_honours_inf_and_nan():
    k = mx.fast.metal_kernel(name="relaxed_checks", input_names=["a"], output_names=["o"], source="""
        uint i = thread_position_in_grid.x;
        float x = a[i];
        o[i] = (isnan(x) ? 1.0f : 0.0f) + (isinf(x) ? 2.0f : 0.0f) + x * 0.0f;
    """, compile_options={"math_mode": "relaxed"})
    a = mx.array([1.0, float("nan"), float("inf"), -float("inf")])
    o, = k(inputs=[a], output_shapes=[(4,)], output_dtypes=[mx.float32], grid=(4, 1, 1), threadgroup=(4, 1, 1))
    got = o.tolist()
    assert got[0] == 1.0 - 1.0 and np.isnan(got[1]) and np.isnan(got[2]) and np.isnan(got[3])


@pytest.mark.skipif(mx.cuda.is_available(), reason="tests the CPU back-end's link step (a GPU runs kernels through NVRTC)")
def test_kernel_needing_the_cxx_library_links_it():
    """The runtime links no C++ library; a kernel whose own header needs one (a function-local
    static with a constructor uses __cxa_guard_*) is linked again with it."""
    k = mx.fast.metal_kernel(name="needs_libstdcxx", input_names=["a"], output_names=["o"], header="""
        struct Table { float v[4]; Table() { for (int j = 0; j < 4; j++) v[j] = float(j * j); } };
        float lookup(uint j, float s) { static Table t; t.v[0] = s; return t.v[j % 4]; }
    """, source="uint i = thread_position_in_grid.x;\no[i] = lookup(i, a[0]);")
    o, = k(inputs=[mx.array([0.0])], output_shapes=[(8,)], output_dtypes=[mx.float32], grid=(8, 1, 1),
           threadgroup=(8, 1, 1))
    assert o.tolist() == [0.0, 1.0, 4.0, 9.0] * 2


def test_fast_math_kernel_leaves_the_process_fp_environment_alone():
    """Loading a kernel built with -ffast-math must not switch on flush-to-zero for the process."""
    k = mx.fast.metal_kernel(name="fast_env", input_names=["a"], output_names=["o"], source="o[0] = a[0] * 2.0f;",
                             compile_options={"math_mode": "fast"})
    o, = k(inputs=[mx.array([1.5])], output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(1, 1, 1),
           threadgroup=(1, 1, 1))
    assert o.item() == 3.0
    assert np.float32(1e-40) * np.float32(1.0) != 0  # subnormals survive in NumPy
    assert (mx.array([1e-40]) * 1.0).item() != 0  # and in mkpy


def test_loads_just_outside_a_large_buffer_read_zeros_and_stores_fault():
    """Kernels often load a neighbour outside the buffer and mask the value afterwards (MLX's
    grid_sample example does); that is harmless on Metal, so here such loads read zeros. A store
    outside a buffer is an error naming the kernel."""
    n = 1 << 20  # 4 MiB: a mapped buffer
    peek = mx.fast.metal_kernel(name="peek_outside", input_names=["a"], output_names=["o"], source="""
        uint i = thread_position_in_grid.x;
        int n = int(a_shape[0]);
        float before = a[int(i) - 4096];        // up to 16 KiB before the first element
        float after = a[i + 4096];              // up to 16 KiB after the last
        o[i] = (int(i) >= 4096 ? before : 0.0f) + (int(i) + 4096 < n ? after : 0.0f);
    """)
    a = np.arange(n, dtype=np.float32) % 1000
    for _ in range(3):  # fresh and cached buffers alike
        o, = peek(inputs=[mx.array(a)], output_shapes=[(n,)], output_dtypes=[mx.float32], grid=(n, 1, 1),
                  threadgroup=(256, 1, 1))
        want = np.zeros(n, np.float32)
        want[4096:] += a[:-4096]
        want[:-4096] += a[4096:]
        np.testing.assert_array_equal(np.array(o), want)
    poke = mx.fast.metal_kernel(name="poke_outside", input_names=["a"], output_names=["o"], source="""
        uint i = thread_position_in_grid.x;
        o[i + 8192] = a[i];
    """)
    with pytest.raises(RuntimeError, match="Kernel `poke_outside` stored past the end of its output `o`"):
        poke(inputs=[mx.array(a)], output_shapes=[(n,)], output_dtypes=[mx.float32], grid=(n, 1, 1),
             threadgroup=(256, 1, 1))[0].tolist()


@pytest.mark.skipif(platform.machine() != "x86_64" or not os.path.exists("/usr/lib/x86_64-linux-gnu/libmvec.so.1"),
                    reason="libmvec's vector math is used on x86-64 glibc only")
@pytest.mark.usefixtures("cpu_device")  # the CPU back-end's own behaviour
def test_barrier_free_exp_kernel_is_vectorised_across_threads():
    """The plain loop vectorises across GPU threads: the object calls glibc's vector expf."""
    k = mx.fast.metal_kernel(name="vectorised_probe", input_names=["a"], output_names=["o"],
                             source="uint i = thread_position_in_grid.x;\no[i] = metal::exp(a[i]);")
    a = mx.array(np.linspace(-5, 5, 1000, dtype=np.float32))
    o, = k(inputs=[a], output_shapes=[(1000,)], output_dtypes=[mx.float32], grid=(1000, 1, 1),
           threadgroup=(256, 1, 1))
    np.testing.assert_allclose(np.array(o), np.exp(np.array(a)), rtol=3e-7)
    cache = os.environ["MKPY_CACHE_DIR"]
    cpps = [f for f in os.listdir(cache) if f.endswith(".cpp") and "vectorised_probe" in open(os.path.join(cache, f)).read()]
    assert len(cpps) == 1
    obj = open(os.path.join(cache, cpps[0][:-4] + ".so"), "rb").read()
    assert b"_ZGV" in obj and b"v_expf" in obj  # e.g. _ZGVdN8v_expf, the 8-wide AVX2 expf
