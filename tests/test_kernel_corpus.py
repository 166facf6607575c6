"""A corpus of classic cooperative Metal kernels, written as MLX users write them
(body-only `source`, helpers in `header`), checked against NumPy.

Every kernel object is built once at module level and reused across sizes, so
each (kernel, template) pair compiles once. Sizes include ones that are not
multiples of the threadgroup, so partial threadgroups and partial SIMD-groups
run too.

Metal semantics come from Apple's Metal Shading Language Specification
(section 6.9 "Synchronization and SIMD-group functions": 6.9.1 barriers, 6.9.2
SIMD-group functions, 6.9.3 quad-group functions; 6.15 atomics; 4.4.1
SIMD-groups and quad-groups), and the grid_sample kernels are the ones of
MLX's documentation page "Custom Metal Kernels" (docs/src/dev/custom_metal_kernels.rst).
"""

import ast
import os
import pathlib

import numpy as np
import pytest

import mkpy as mx

RNG = np.random.default_rng(1234)


def as_f32(a):
    return np.array(a.astype(mx.float32)) if a.dtype in (mx.bfloat16,) else np.array(a).astype(np.float32)


# ---------------------------------------------------------------- matmul

MATMUL = mx.fast.metal_kernel(
    name="tiled_matmul", input_names=["a", "b"], output_names=["c"],
    source="""
    // 16x16 tiles of A and B in threadgroup memory, one output per thread
    threadgroup float As[16][16];
    threadgroup float Bs[16][16];
    uint row = thread_position_in_grid.y, col = thread_position_in_grid.x;
    uint ty = thread_position_in_threadgroup.y, tx = thread_position_in_threadgroup.x;
    int M = a_shape[0], K = a_shape[1], N = b_shape[1];
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        As[ty][tx] = (int(row) < M && k0 + int(tx) < K) ? float(a[row * K + k0 + tx]) : 0.0f;
        Bs[ty][tx] = (k0 + int(ty) < K && int(col) < N) ? float(b[(k0 + ty) * N + col]) : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int k = 0; k < 16; k++)
            acc += As[ty][k] * Bs[k][tx];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (int(row) < M && int(col) < N)
        c[row * N + col] = T(acc);
    """)


@pytest.mark.parametrize("M,K,N", [(16, 16, 16), (37, 50, 29), (1, 17, 33), (64, 48, 80)])
def test_tiled_matmul(M, K, N):
    A = RNG.standard_normal((M, K)).astype(np.float32)
    B = RNG.standard_normal((K, N)).astype(np.float32)
    c, = MATMUL(inputs=[mx.array(A), mx.array(B)], template=[("T", mx.float32)],
                grid=((N + 15) // 16 * 16, (M + 15) // 16 * 16, 1), threadgroup=(16, 16, 1),
                output_shapes=[(M, N)], output_dtypes=[mx.float32])
    np.testing.assert_allclose(np.array(c), A @ B, rtol=1e-4, atol=1e-4)


# ------------------------------------------------- row reductions (rms, softmax)

# the block reduction helpers MLX users put in `header`
ROW_HEADER = """
template <typename U>
U block_sum(U v, threadgroup U* scratch, uint lane, uint sg, uint nsg) {
    v = simd_sum(v);
    if (lane == 0) scratch[sg] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        U t = lane < nsg ? scratch[lane] : U(0);
        t = simd_sum(t);
        if (lane == 0) scratch[0] = t;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    U r = scratch[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return r;
}
"""

RMS_NORM = mx.fast.metal_kernel(
    name="rms_norm", input_names=["x", "w", "eps"], output_names=["out"], header=ROW_HEADER,
    source="""
    threadgroup float scratch[32];
    uint row = threadgroup_position_in_grid.x;
    uint lid = thread_position_in_threadgroup.x;
    uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
    int n = x_shape[1];
    float acc = 0.0f;
    for (int i = lid; i < n; i += threads_per_threadgroup.x) {
        float v = float(x[row * n + i]);
        acc += v * v;
    }
    float total = block_sum(acc, scratch, lane, sg, simdgroups_per_threadgroup);
    float inv = metal::rsqrt(total / n + eps);
    for (int i = lid; i < n; i += threads_per_threadgroup.x)
        out[row * n + i] = T(float(x[row * n + i]) * inv * float(w[i]));
    """)

SOFTMAX = mx.fast.metal_kernel(
    name="softmax_rows", input_names=["x"], output_names=["out"],
    source="""
    threadgroup float part[32];
    uint row = threadgroup_position_in_grid.x;
    uint lid = thread_position_in_threadgroup.x;
    uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
    uint nsg = simdgroups_per_threadgroup;
    int n = x_shape[1];

    float m = -INFINITY;
    for (int i = lid; i < n; i += threads_per_threadgroup.x)
        m = max(m, float(x[row * n + i]));
    m = simd_max(m);
    if (lane == 0) part[sg] = m;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    m = lane < nsg ? part[lane] : -INFINITY;
    m = simd_max(m);
    threadgroup_barrier(mem_flags::mem_threadgroup);

    float s = 0.0f;
    for (int i = lid; i < n; i += threads_per_threadgroup.x)
        s += metal::exp(float(x[row * n + i]) - m);
    s = simd_sum(s);
    if (lane == 0) part[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    s = lane < nsg ? part[lane] : 0.0f;
    s = simd_sum(s);

    for (int i = lid; i < n; i += threads_per_threadgroup.x)
        out[row * n + i] = T(metal::exp(float(x[row * n + i]) - m) / s);
    """)

ROW_CASES = [(3, 100, 128), (2, 257, 256), (2, 1024, 256), (1, 1, 128), (5, 33, 96)]


@pytest.mark.parametrize("rows,n,tg", ROW_CASES)
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16])
def test_rms_norm_rows(rows, n, tg, dtype):
    x = RNG.standard_normal((rows, n)).astype(np.float32)
    w = RNG.uniform(0.5, 1.5, n).astype(np.float32)
    xa, wa = mx.array(x).astype(dtype), mx.array(w).astype(dtype)
    out, = RMS_NORM(inputs=[xa, wa, 1e-5], template=[("T", dtype)], grid=(rows * tg, 1, 1),
                    threadgroup=(tg, 1, 1), output_shapes=[(rows, n)], output_dtypes=[dtype])
    xs, ws = as_f32(xa), as_f32(wa)
    expected = xs / np.sqrt((xs.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5) * ws
    tol = 1e-5 if dtype == mx.float32 else 2e-3
    np.testing.assert_allclose(as_f32(out), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("rows,n,tg", ROW_CASES)
@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16])
def test_softmax_rows(rows, n, tg, dtype):
    x = (RNG.standard_normal((rows, n)) * 4).astype(np.float32)
    xa = mx.array(x).astype(dtype)
    out, = SOFTMAX(inputs=[xa], template=[("T", dtype)], grid=(rows * tg, 1, 1), threadgroup=(tg, 1, 1),
                   output_shapes=[(rows, n)], output_dtypes=[dtype])
    xs = as_f32(xa).astype(np.float64)
    e = np.exp(xs - xs.max(1, keepdims=True))
    expected = e / e.sum(1, keepdims=True)
    tol = 1e-5 if dtype == mx.float32 else 1e-2
    np.testing.assert_allclose(as_f32(out), expected, rtol=tol, atol=tol * 0.1)


# --------------------------------------------------------- tree reduction

TREE_SUM = mx.fast.metal_kernel(
    name="tree_sum", input_names=["inp"], output_names=["partial"],
    source="""
    threadgroup T shared[1024];
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    uint n = inp_shape[0];
    shared[lid] = gid < n ? inp[gid] : T(0);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = threads_per_threadgroup.x / 2; s > 0; s >>= 1) {
        if (lid < s)
            shared[lid] += shared[lid + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (lid == 0)
        partial[threadgroup_position_in_grid.x] = shared[0];
    """)


@pytest.mark.parametrize("n,tg", [(1, 256), (1000, 256), (4096, 1024), (77, 64), (5000, 128)])
@pytest.mark.parametrize("dtype", [mx.float32, mx.int32])
def test_tree_reduction(n, tg, dtype):
    if dtype == mx.int32:
        x = RNG.integers(-1000, 1000, n).astype(np.int32)
    else:
        x = RNG.standard_normal(n).astype(np.float32)
    groups = (n + tg - 1) // tg
    partial, = TREE_SUM(inputs=[mx.array(x)], template=[("T", dtype)], grid=(groups * tg, 1, 1),
                        threadgroup=(tg, 1, 1), output_shapes=[(groups,)], output_dtypes=[dtype])
    pad = np.zeros(groups * tg, x.dtype)
    pad[:n] = x
    expected = pad.reshape(groups, tg).sum(1, dtype=np.float64 if dtype == mx.float32 else np.int64)
    if dtype == mx.int32:
        np.testing.assert_array_equal(np.array(partial), expected)
    else:
        np.testing.assert_allclose(np.array(partial), expected, rtol=1e-5, atol=1e-4)


# ------------------------------------------------------------ bitonic sort

BITONIC = mx.fast.metal_kernel(
    name="bitonic_rows", input_names=["inp"], output_names=["out"],
    source="""
    // one threadgroup per row; the row is padded to P = threads_per_threadgroup
    // (a power of two) with the largest value
    threadgroup T buf[1024];
    uint row = threadgroup_position_in_grid.x;
    uint i = thread_position_in_threadgroup.x;
    uint P = threads_per_threadgroup.x;
    int n = inp_shape[1];
    buf[i] = int(i) < n ? inp[row * n + i] : metal::numeric_limits<T>::max();
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint k = 2; k <= P; k <<= 1) {
        for (uint j = k >> 1; j > 0; j >>= 1) {
            uint ixj = i ^ j;
            if (ixj > i) {
                bool ascending = (i & k) == 0;
                T a = buf[i], b = buf[ixj];
                if ((a > b) == ascending) {
                    buf[i] = b;
                    buf[ixj] = a;
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
    }
    if (int(i) < n)
        out[row * n + i] = buf[i];
    """)


@pytest.mark.parametrize("rows,n", [(3, 100), (2, 257), (1, 1024), (4, 1), (2, 32)])
@pytest.mark.parametrize("dtype", [mx.float32, mx.int32])
def test_bitonic_sort_rows(rows, n, dtype):
    if dtype == mx.int32:
        x = RNG.integers(-50, 50, (rows, n)).astype(np.int32)
    else:
        x = RNG.standard_normal((rows, n)).astype(np.float32)
    P = 1 << (n - 1).bit_length()
    out, = BITONIC(inputs=[mx.array(x)], template=[("T", dtype)], grid=(rows * P, 1, 1), threadgroup=(P, 1, 1),
                   output_shapes=[(rows, n)], output_dtypes=[dtype])
    np.testing.assert_array_equal(np.array(out), np.sort(x, axis=1))


# ------------------------------------------------------------- prefix scan

SCAN_BLOCK = mx.fast.metal_kernel(
    name="block_scan", input_names=["inp"], output_names=["out", "block_sums"],
    source="""
    // scan within each SIMD-group with simd_prefix_exclusive_sum, then across
    // the SIMD-groups of the threadgroup through threadgroup memory
    threadgroup T sg_offsets[32];
    uint lid = thread_position_in_threadgroup.x;
    uint gid = thread_position_in_grid.x;
    uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
    uint count = threads_per_threadgroup.x;
    T v = inp[gid];
    T excl = simd_prefix_exclusive_sum(v);
    if (lane == threads_per_simdgroup - 1 || lid == count - 1)
        sg_offsets[sg] = excl + v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        T t = lane < simdgroups_per_threadgroup ? sg_offsets[lane] : T(0);
        T te = simd_prefix_exclusive_sum(t);
        if (lane < simdgroups_per_threadgroup)
            sg_offsets[lane] = te;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    T result = sg_offsets[sg] + excl;
    out[gid] = INCLUSIVE ? T(result + v) : result;
    if (lid == count - 1)
        block_sums[threadgroup_position_in_grid.x] = result + v;
    """)

SCAN_ADD = mx.fast.metal_kernel(
    name="scan_add_offsets", input_names=["partial", "offsets"], output_names=["out"],
    source="""
    uint gid = thread_position_in_grid.x;
    out[gid] = partial[gid] + offsets[threadgroup_position_in_grid.x];
    """)


def full_scan(x, dtype, tg, inclusive=True):
    n = x.shape[0]
    groups = (n + tg - 1) // tg
    out, sums = SCAN_BLOCK(inputs=[x], template=[("T", dtype), ("INCLUSIVE", inclusive)], grid=(n, 1, 1),
                           threadgroup=(tg, 1, 1), output_shapes=[(n,), (groups,)],
                           output_dtypes=[dtype, dtype])
    if groups == 1:
        return out
    offsets = full_scan(sums, dtype, tg, inclusive=False)
    res, = SCAN_ADD(inputs=[out, offsets], grid=(n, 1, 1), threadgroup=(tg, 1, 1), output_shapes=[(n,)],
                    output_dtypes=[dtype])
    return res


@pytest.mark.parametrize("n,tg", [(1, 256), (31, 256), (100, 64), (1000, 256), (5000, 256), (40000, 128),
                                  (3000, 1024)])
@pytest.mark.parametrize("dtype", [mx.int32, mx.float32])
def test_prefix_scan(n, tg, dtype):
    if dtype == mx.int32:
        x = RNG.integers(-100, 100, n).astype(np.int32)
    else:
        x = RNG.integers(-8, 8, n).astype(np.float32)   # exact sums in float32
    res = full_scan(mx.array(x), dtype, tg)
    np.testing.assert_array_equal(np.array(res), np.cumsum(x).astype(x.dtype))
    # the exclusive variant of one block
    m = min(n, tg)
    ex, _ = SCAN_BLOCK(inputs=[mx.array(x[:m])], template=[("T", dtype), ("INCLUSIVE", False)], grid=(m, 1, 1),
                       threadgroup=(tg, 1, 1), output_shapes=[(m,), (1,)], output_dtypes=[dtype, dtype])
    np.testing.assert_array_equal(np.array(ex), np.concatenate([[0], np.cumsum(x[:m])[:-1]]).astype(x.dtype))


# -------------------------------------------------------------- histograms

HIST_DEVICE = mx.fast.metal_kernel(
    name="hist_device_atomics", input_names=["data"], output_names=["bins"], atomic_outputs=True,
    source="""
    uint i = thread_position_in_grid.x;
    uint nb = NB;
    if (i < uint(data_shape[0])) {
        uint b = min(uint(data[i] * float(nb)), nb - 1);
        atomic_fetch_add_explicit(&bins[b], 1u, memory_order_relaxed);
    }
    """)

HIST_THREADGROUP = mx.fast.metal_kernel(
    name="hist_threadgroup_atomics", input_names=["data", "weights"], output_names=["bins", "wbins", "bins2"],
    source="""
    // private bins per threadgroup, merged into the outputs with device atomics
    // (atomic_outputs=False: the outputs are cast to atomics where needed)
    threadgroup atomic<uint> local_bins[NB];
    threadgroup atomic_uint local_bins2[NB];
    uint lid = thread_position_in_threadgroup.x;
    uint tpg = threads_per_threadgroup.x;
    for (uint b = lid; b < NB; b += tpg) {
        atomic_store_explicit(&local_bins[b], 0u, memory_order_relaxed);
        atomic_store_explicit(&local_bins2[b], 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint n = data_shape[0];
    for (uint i = thread_position_in_grid.x; i < n; i += threads_per_grid.x) {
        uint b = min(uint(data[i] * float(NB)), uint(NB - 1));
        atomic_fetch_add_explicit(&local_bins[b], 1u, memory_order_relaxed);
        atomic_fetch_add_explicit(&local_bins2[NB - 1 - b], 2u, memory_order_relaxed);
        atomic_fetch_add_explicit((device atomic<float>*)&wbins[b], weights[i], memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint b = lid; b < NB; b += tpg) {
        uint c = atomic_load_explicit(&local_bins[b], memory_order_relaxed);
        if (c)
            atomic_fetch_add_explicit((device atomic<uint>*)&bins[b], c, memory_order_relaxed);
        uint c2 = atomic_load_explicit(&local_bins2[b], memory_order_relaxed);
        atomic_fetch_add_explicit((device atomic_uint*)&bins2[b], c2, memory_order_relaxed);
    }
    """)


@pytest.mark.parametrize("n", [1, 100, 1000, 33333])
@pytest.mark.parametrize("nb", [16, 100])
def test_histogram_device_atomics(n, nb):
    x = RNG.random(n).astype(np.float32)
    bins, = HIST_DEVICE(inputs=[mx.array(x)], template=[("NB", nb)], grid=(n, 1, 1), threadgroup=(256, 1, 1),
                        output_shapes=[(nb,)], output_dtypes=[mx.uint32], init_value=0)
    expected = np.bincount(np.minimum((x * nb).astype(np.int64), nb - 1), minlength=nb)
    np.testing.assert_array_equal(np.array(bins), expected)


@pytest.mark.parametrize("n,grid,tg", [(1, 64, 64), (1000, 256, 64), (33333, 2048, 256), (5000, 1000, 96)])
def test_histogram_threadgroup_atomics(n, grid, tg):
    nb = 64
    x = RNG.random(n).astype(np.float32)
    w = RNG.integers(1, 5, n).astype(np.float32)      # exact float sums
    bins, wbins, bins2 = HIST_THREADGROUP(
        inputs=[mx.array(x), mx.array(w)], template=[("NB", nb)], grid=(grid, 1, 1), threadgroup=(tg, 1, 1),
        output_shapes=[(nb,)] * 3, output_dtypes=[mx.uint32, mx.float32, mx.uint32], init_value=0)
    idx = np.minimum((x * nb).astype(np.int64), nb - 1)
    np.testing.assert_array_equal(np.array(bins), np.bincount(idx, minlength=nb))
    np.testing.assert_array_equal(np.array(wbins), np.bincount(idx, weights=w, minlength=nb).astype(np.float32))
    np.testing.assert_array_equal(np.array(bins2), 2 * np.bincount(nb - 1 - idx, minlength=nb))


# ------------------------------------------------------------- scatter-add

SCATTER_ADD = mx.fast.metal_kernel(
    name="scatter_add", input_names=["idx", "vals"], output_names=["out"], atomic_outputs=True,
    source="""
    uint d = thread_position_in_grid.x, i = thread_position_in_grid.y;
    uint D = vals_shape[1];
    atomic_fetch_add_explicit(&out[idx[i] * D + d], vals[i * D + d], memory_order_relaxed);
    """)


@pytest.mark.parametrize("n,rows,D", [(1, 1, 1), (1000, 7, 3), (20000, 50, 16), (333, 1000, 5)])
def test_scatter_add_float_atomics(n, rows, D):
    idx = RNG.integers(0, rows, n).astype(np.int32)
    vals = RNG.standard_normal((n, D)).astype(np.float32)
    out, = SCATTER_ADD(inputs=[mx.array(idx), mx.array(vals)], grid=(D, n, 1), threadgroup=(D, max(1, 64 // D), 1),
                       output_shapes=[(rows, D)], output_dtypes=[mx.float32], init_value=0)
    expected = np.zeros((rows, D))
    np.add.at(expected, idx, vals.astype(np.float64))
    np.testing.assert_allclose(np.array(out), expected, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------- transpose

TRANSPOSE = mx.fast.metal_kernel(
    name="transpose_tiled", input_names=["inp"], output_names=["out"],
    source="""
    // 32x32 tile, padded to 33 columns against bank conflicts; 32x8 threads
    threadgroup float tile[32][33];
    int R = inp_shape[0], C = inp_shape[1];
    uint bx = threadgroup_position_in_grid.x * 32, by = threadgroup_position_in_grid.y * 32;
    uint tx = thread_position_in_threadgroup.x, ty = thread_position_in_threadgroup.y;
    for (uint j = ty; j < 32; j += 8) {
        int r = by + j, c = bx + tx;
        if (r < R && c < C)
            tile[j][tx] = inp[r * C + c];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint j = ty; j < 32; j += 8) {
        int r = bx + j, c = by + tx;      // row r of the output is column r of the input
        if (r < C && c < R)
            out[r * R + c] = tile[tx][j];
    }
    """)


@pytest.mark.parametrize("R,C", [(1, 1), (32, 32), (33, 70), (100, 31), (64, 200)])
def test_transpose_padded_tile(R, C):
    x = RNG.standard_normal((R, C)).astype(np.float32)
    out, = TRANSPOSE(inputs=[mx.array(x)], grid=((C + 31) // 32 * 32, (R + 31) // 32 * 8, 1),
                     threadgroup=(32, 8, 1), output_shapes=[(C, R)], output_dtypes=[mx.float32])
    np.testing.assert_array_equal(np.array(out), x.T)


# ------------------------------------- every SIMD-group and quad-group function
#
# Semantics (Metal Shading Language Specification, 6.9.2 and 6.9.3):
#   * reductions and prefixes run over the *active* lanes only (lanes that
#     returned early, or past the end of a partial SIMD-group, are inactive);
#   * simd_shuffle_up leaves the lower `delta` lanes unchanged and
#     simd_shuffle_down the upper `delta` lanes ("doesn't wrap values around");
#   * rotate_up/down wrap around the SIMD-group (quad-group);
#   * shuffle_and_fill_up: lanes below delta take filling_data from the upper
#     delta lanes of their vector of `modulo` lanes (default: the group size);
#     shuffle_and_fill_down: the upper delta lanes take filling_data from the
#     lower delta lanes;
#   * reading an inactive lane (shuffle, broadcast, rotate...) is undefined, so
#     those results are not checked;
#   * simd_ballot: bit i for active lane i with expr true; quad_ballot: bit k
#     for lane k of the quad-group (quad_vote); simd_is_first: the active lane
#     with the smallest index; simd_active_threads_mask == simd_ballot(true).

def _seg(lane, width):
    lo = lane // width * width
    return lo, range(lo, lo + width)


def _red(op):
    def f(g, lane, width):
        lo, seg = _seg(lane, width)
        vals = [g.V[i] for i in seg if g.act[i]]
        acc = vals[0]
        for v in vals[1:]:
            acc = g.wrap(op(acc, v))
        return acc, True
    return f


def _prefix(op, ident, incl, src="V"):
    def f(g, lane, width):
        lo, _ = _seg(lane, width)
        arr = getattr(g, src)
        acc = np.full_like(arr[0], ident)
        for i in range(lo, lane + (1 if incl else 0)):
            if g.act[i]:
                acc = g.wrap(op(acc, arr[i]))
        return acc, True
    return f


def _take(pick):
    def f(g, lane, width):
        lo, _ = _seg(lane, width)
        src = pick(lane - lo, width, g, lane)
        if src < 0 or src >= width:
            return g.V[lane], True          # not wrapped: unchanged
        src += lo
        return g.V[src], bool(g.act[src])   # an inactive source is undefined
    return f


def _fill(delta, modulo, up):
    def f(g, lane, width):
        mod = modulo or width
        lo = lane // mod * mod
        j = lane - lo
        if up:
            fill, src = (True, lo + j - delta + mod) if j < delta else (False, lane - delta)
        else:
            fill, src = (True, lo + j + delta - mod) if j + delta >= mod else (False, lane + delta)
        return (g.F if fill else g.V)[src], bool(g.act[src])
    return f


def _first(g, lane, width):
    lo, seg = _seg(lane, width)
    return g.V[next(i for i in seg if g.act[i])], True


def _prod(op):
    red = _red(op)

    def f(g, lane, width):
        return red(_Group(g.Q, g.F, g.Q, g.act, g.wrap), lane, width)
    return f


class _Group:
    def __init__(self, V, F, Q, act, wrap):
        self.V, self.F, self.Q, self.act, self.wrap = V, F, Q, act, wrap


# (suffix, Metal call for simd / quad, model, bitwise only)
GROUP_FUNCS = [
    ("sum", "{p}_sum(a)", _red(np.add), False),
    ("product", "{p}_product(q)", _prod(np.multiply), False),
    ("min", "{p}_min(a)", _red(np.minimum), False),
    ("max", "{p}_max(a)", _red(np.maximum), False),
    ("and", "{p}_and(a)", _red(np.bitwise_and), True),
    ("or", "{p}_or(a)", _red(np.bitwise_or), True),
    ("xor", "{p}_xor(a)", _red(np.bitwise_xor), True),
    ("prefix_inclusive_sum", "{p}_prefix_inclusive_sum(a)", _prefix(np.add, 0, True), False),
    ("prefix_exclusive_sum", "{p}_prefix_exclusive_sum(a)", _prefix(np.add, 0, False), False),
    ("prefix_inclusive_product", "{p}_prefix_inclusive_product(q)", _prefix(np.multiply, 1, True, "Q"), False),
    ("prefix_exclusive_product", "{p}_prefix_exclusive_product(q)", _prefix(np.multiply, 1, False, "Q"), False),
    ("shuffle", "{p}_shuffle(a, ushort(s % {w}))", _take(lambda j, w, g, lane: g.src[lane] % w), False),
    ("shuffle_up", "{p}_shuffle_up(a, {u})", None, False),
    ("shuffle_down", "{p}_shuffle_down(a, {d})", None, False),
    ("shuffle_xor", "{p}_shuffle_xor(a, {x})", None, False),
    ("shuffle_rotate_up", "{p}_shuffle_rotate_up(a, {ru})", None, False),
    ("shuffle_rotate_down", "{p}_shuffle_rotate_down(a, {rd})", None, False),
    ("shuffle_and_fill_up", "{p}_shuffle_and_fill_up(a, f, {fu})", None, False),
    ("shuffle_and_fill_down", "{p}_shuffle_and_fill_down(a, f, {fd})", None, False),
    ("shuffle_and_fill_up_mod", "{p}_shuffle_and_fill_up(a, f, {fum}, {m})", None, False),
    ("shuffle_and_fill_down_mod", "{p}_shuffle_and_fill_down(a, f, {fdm}, {m})", None, False),
    ("broadcast", "{p}_broadcast(a, {b})", None, False),
    ("broadcast_first", "{p}_broadcast_first(a)", _first, False),
]
# constant arguments (uniform across the group, as Metal requires)
GROUP_ARGS = {
    "simd": dict(w=32, u=3, d=5, x=6, ru=7, rd=9, fu=4, fd=6, fum=2, fdm=3, m=8, b=5),
    "quad": dict(w=4, u=1, d=2, x=3, ru=1, rd=3, fu=1, fd=2, fum=1, fdm=1, m=2, b=2),
}


def _model(name, a):
    if name == "shuffle_up":
        return _take(lambda j, w, g, lane: j - a["u"])
    if name == "shuffle_down":
        return _take(lambda j, w, g, lane: j + a["d"])
    if name == "shuffle_xor":
        return _take(lambda j, w, g, lane: j ^ a["x"])
    if name == "shuffle_rotate_up":
        return _take(lambda j, w, g, lane: (j - a["ru"]) % w)
    if name == "shuffle_rotate_down":
        return _take(lambda j, w, g, lane: (j + a["rd"]) % w)
    if name == "shuffle_and_fill_up":
        return _fill(a["fu"], None, True)
    if name == "shuffle_and_fill_down":
        return _fill(a["fd"], None, False)
    if name == "shuffle_and_fill_up_mod":
        return _fill(a["fum"], a["m"], True)
    if name == "shuffle_and_fill_down_mod":
        return _fill(a["fdm"], a["m"], False)
    if name == "broadcast":
        return _take(lambda j, w, g, lane: a["b"])
    raise KeyError(name)


# votes: (Metal expression as uint, model(pred, act, lane) -> value)
def _vote_models():
    def seg_of(lane, w):
        lo = lane // w * w
        return lo, range(lo, lo + w)

    def all_(w):
        return lambda p, act, lane: int(all(p[i] for i in seg_of(lane, w)[1] if act[i]))

    def any_(w):
        return lambda p, act, lane: int(any(p[i] for i in seg_of(lane, w)[1] if act[i]))

    def ballot(w, rel):
        def f(p, act, lane):
            lo, seg = seg_of(lane, w)
            return sum(1 << (i - (lo if rel else 0)) for i in seg if act[i] and p[i])
        return f

    def active(w, rel):
        return lambda p, act, lane: ballot(w, rel)([True] * 32, act, lane)

    def first(w):
        return lambda p, act, lane: int(lane == next(i for i in seg_of(lane, w)[1] if act[i]))

    return [
        ("uint(simd_all(pr))", all_(32)),
        ("uint(simd_any(pr))", any_(32)),
        ("uint(static_cast<simd_vote::vote_t>(simd_ballot(pr)))", ballot(32, False)),
        ("uint(static_cast<simd_vote::vote_t>(simd_active_threads_mask()))", active(32, False)),
        ("uint(simd_is_first())", first(32)),
        ("uint(simd_ballot(pr).any())", any_(32)),
        ("uint(simd_ballot(true).all())", lambda p, act, lane: int(all(act))),
        ("uint(simd_is_helper_thread())", lambda p, act, lane: 0),
        ("uint(quad_all(pr))", all_(4)),
        ("uint(quad_any(pr))", any_(4)),
        ("uint(static_cast<quad_vote::vote_t>(quad_ballot(pr)))", ballot(4, True)),
        ("uint(static_cast<quad_vote::vote_t>(quad_active_threads_mask()))", active(4, True)),
        ("uint(quad_is_first())", first(4)),
        ("uint(quad_is_helper_thread())", lambda p, act, lane: 0),
    ]


VOTES = _vote_models()

# name: (Metal type, I/O dtype, components, kind, bitwise)
SIMD_TYPES = {
    "float": ("float", np.float32, 1, "f", False),
    "int": ("int", np.int32, 1, "i", True),
    "uint": ("uint", np.uint32, 1, "u", True),
    "half": ("half", np.float32, 1, "f", False),
    "bfloat": ("bfloat", np.float32, 1, "f", False),
    "float4": ("float4", np.float32, 4, "f", False),
    "int2": ("int2", np.int32, 2, "i", True),
}


def _group_calls(bitwise):
    calls = []
    for p in ("simd", "quad"):
        a = GROUP_ARGS[p]
        for name, expr, model, bit in GROUP_FUNCS:
            if bit and not bitwise:
                continue
            calls.append((f"{p}_{name}", expr.format(p=p, **a), model or _model(name, a), a["w"]))
    return calls


def _simd_kernel(tname):
    T, io, C, kind, bitwise = SIMD_TYPES[tname]
    cio = {np.float32: "float", np.int32: "int", np.uint32: "uint"}[io]
    calls = _group_calls(bitwise)

    def load(arr):
        if C == 1:
            return f"T({arr}[tid])"
        return "T(" + ", ".join(f"{arr}[{C} * tid + {c}]" for c in range(C)) + ")"

    lines = [
        f"typedef {T} T;",
        "uint tid = thread_position_in_grid.x;",
        "uint n = threads_per_grid.x;",
        "if (dead[tid]) return;   // these lanes take part in nothing below",
        f"T a = {load('x')}, f = {load('y')}, q = {load('pv')};",
        "ushort s = ushort(src[tid]);",
        "bool pr = p[tid] != 0;",
    ]
    for k, (_, expr, _, _) in enumerate(calls):
        if C == 1:
            lines.append(f"r[{k} * n + tid] = {cio}({expr});")
        else:
            lines.append(f"{{ T t = {expr}; " +
                         " ".join(f"r[({k} * n + tid) * {C} + {c}] = t[{c}];" for c in range(C)) + " }")
    for k, (expr, _) in enumerate(VOTES):
        lines.append(f"v[{k} * n + tid] = {expr};")
    kernel = mx.fast.metal_kernel(name=f"simd_table_{tname}", input_names=["x", "y", "pv", "src", "p", "dead"],
                                  output_names=["r", "v"], source="\n".join(lines))
    return kernel, calls


SIMD_KERNELS = {}
MX_DTYPE = {np.float32: mx.float32, np.int32: mx.int32, np.uint32: mx.uint32}


def _wrapper(kind):
    if kind == "i":
        return lambda v: ((v + 2 ** 31) % 2 ** 32) - 2 ** 31
    if kind == "u":
        return lambda v: v & np.uint64(0xffffffff)
    return lambda v: v


# (grid, threadgroup): full SIMD-groups, a partial threadgroup whose second
# SIMD-group has 8 lanes, and a grid of 40 threads in one partial 64-thread group
# (one threadgroup size: both launches share one compiled kernel, which is most of
# this test's time)
SIMD_CONFIGS = [(104, 64), (40, 64)]


@pytest.mark.parametrize("tname", list(SIMD_TYPES))
def test_every_simd_and_quad_function(tname):
    if tname not in SIMD_KERNELS:
        SIMD_KERNELS[tname] = _simd_kernel(tname)
    kernel, calls = SIMD_KERNELS[tname]
    T, io, C, kind, bitwise = SIMD_TYPES[tname]
    rng = np.random.default_rng(7)
    for grid, tg in SIMD_CONFIGS:
        n = grid
        xs = rng.integers(-8, 9, (n, C))
        ys = rng.integers(-8, 9, (n, C))
        ps = rng.choice([1, -1, 2], size=(n, C), p=[0.45, 0.45, 0.1])
        if kind == "u":
            xs, ys, ps = (v.astype(np.int64) % 2 ** 32 for v in (xs, ys, ps))
        src = rng.integers(0, 32, n).astype(np.uint32)
        pred = rng.random(n) < 0.5
        pred[64:96] = True                              # a SIMD-group where simd_all holds
        dead = rng.random(n) < 0.2
        dead[0] = True                                  # the first lane is not the first active one
        x = mx.array(xs.astype(io).reshape(-1))
        y = mx.array(ys.astype(io).reshape(-1))
        pv = mx.array(ps.astype(io).reshape(-1))
        r, v = kernel(inputs=[x, y, pv, mx.array(src), mx.array(pred.astype(np.int32)),
                              mx.array(dead.astype(np.int32))],
                      grid=(grid, 1, 1), threadgroup=(tg, 1, 1),
                      output_shapes=[(len(calls), n * C), (len(VOTES), n)], output_dtypes=[MX_DTYPE[io], mx.uint32],
                      init_value=0)
        mx.eval(r, v)   # (np.array would hide an evaluation error)
        r = np.array(r).reshape(len(calls), n, C)
        v = np.array(v)
        ar = np.uint64 if kind == "u" else (np.int64 if kind == "i" else np.float64)
        wrap = _wrapper(kind)
        want_r = np.zeros_like(r)
        want_v = np.zeros_like(v)
        defined = np.zeros(r.shape[:2], bool)
        for g0 in range(0, n, tg):
            count = min(tg, n - g0)
            for s0 in range(0, count, 32):
                lanes = [g0 + s0 + i for i in range(32)]
                act = [s0 + i < count and not dead[g0 + s0 + i] for i in range(32)]
                pad = lambda a: np.array([a[t] if s0 + i < count else a[g0] for i, t in enumerate(lanes)], ar)
                g = _Group(pad(xs), pad(ys), pad(ps), act, wrap)
                g.src = [int(src[t]) if s0 + i < count else 0 for i, t in enumerate(lanes)]
                pr = [bool(pred[t]) if s0 + i < count else False for i, t in enumerate(lanes)]
                for lane in range(32):
                    if not act[lane]:
                        continue
                    t = lanes[lane]
                    for k, (fname, expr, model, width) in enumerate(calls):
                        want, defined[k, t] = model(g, lane, width)
                        want_r[k, t] = np.asarray(want).astype(io)
                    for k, (expr, vm) in enumerate(VOTES):
                        want_v[k, t] = vm(pr, act, lane)
        for k, t in zip(*np.nonzero(defined & (r != want_r).any(-1))):
            pytest.fail(f"{calls[k][0]} [{calls[k][1]}] ({tname}) thread {t}, grid {grid} tg {tg}: "
                        f"got {r[k, t]}, want {want_r[k, t]}")
        for k, t in zip(*np.nonzero(v != want_v)):
            pytest.fail(f"{VOTES[k][0]} thread {t}, grid {grid} tg {tg}: got {v[k, t]}, want {want_v[k, t]}")
        checked = defined.sum()
        # lanes that returned early wrote nothing
        assert (r[:, dead] == 0).all() and (v[:, dead] == 0).all()
        assert checked > len(calls) * n // 2


# ------------------------------------- grid_sample, from MLX's documentation
# The forward and backward kernels of the "Custom Metal Kernels" page of the MLX
# docs, verbatim. They live once, in examples/mlx_docs_grid_sample.py; their
# metal_kernel(...) arguments are read from that file's syntax tree (the example
# itself runs under tests/test_examples.py).

def _example_kernels(path):
    """{variable: metal_kernel keyword arguments} of the literal metal_kernel calls in an example."""
    kernels = {}
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "mx.fast.metal_kernel"):
            kernels[node.targets[0].id] = {k.arg: ast.literal_eval(k.value) for k in node.value.keywords}
    return kernels


_GRID_SAMPLE = _example_kernels(pathlib.Path(__file__).parent.parent / "examples" / "mlx_docs_grid_sample.py")
GRID_SAMPLE_FWD = mx.fast.metal_kernel(**_GRID_SAMPLE["kernel"])
GRID_SAMPLE_BWD = mx.fast.metal_kernel(**_GRID_SAMPLE["grad_kernel"])


def _corners(x, grid):
    """The bilinear corners of grid_sample_ref (MLX docs): (weight, y, x, mask) and the coordinates."""
    N, H, W, _ = x.shape
    ix = ((grid[..., 0] + 1) * W - 1) / 2
    iy = ((grid[..., 1] + 1) * H - 1) / 2
    ix_nw, iy_nw = np.floor(ix).astype(np.int64), np.floor(iy).astype(np.int64)
    ix_se, iy_se = ix_nw + 1, iy_nw + 1
    corners = [((ix_se - ix) * (iy_se - iy), iy_nw, ix_nw), ((ix - ix_nw) * (iy_se - iy), iy_nw, ix_se),
               ((ix_se - ix) * (iy - iy_nw), iy_se, ix_nw), ((ix - ix_nw) * (iy - iy_nw), iy_se, ix_se)]
    out = []
    for w, yy, xx in corners:
        m = (yy >= 0) & (yy <= H - 1) & (xx >= 0) & (xx <= W - 1)
        out.append((w, np.clip(yy, 0, H - 1), np.clip(xx, 0, W - 1), m))
    return out, ix, iy, ix_nw, iy_nw


def grid_sample_np(x, grid):
    N = x.shape[0]
    n = np.arange(N)[:, None, None]
    corners, *_ = _corners(x, grid)
    return sum(w[..., None] * x[n, yy, xx, :] * m[..., None] for w, yy, xx, m in corners)


def grid_sample_vjp_np(x, grid, cot):
    N, H, W, C = x.shape
    n = np.broadcast_to(np.arange(N)[:, None, None], grid.shape[:3])
    corners, ix, iy, ix_nw, iy_nw = _corners(x, grid)
    x_grad = np.zeros_like(x)
    for w, yy, xx, m in corners:
        np.add.at(x_grad, (n[m], yy[m], xx[m]), (w[..., None] * cot)[m])
    (_, y0, x0, m_nw), (_, _, x1, m_ne), (_, y1, _, m_sw), (_, _, _, m_se) = corners
    I = lambda yy, xx, m: x[n, yy, xx, :] * m[..., None]
    fy, fx = (iy - iy_nw)[..., None], (ix - ix_nw)[..., None]
    gix = (-I(y0, x0, m_nw) * (1 - fy) + I(y0, x1, m_ne) * (1 - fy) - I(y1, x0, m_sw) * fy + I(y1, x1, m_se) * fy)
    giy = (-I(y0, x0, m_nw) * (1 - fx) - I(y0, x1, m_ne) * fx + I(y1, x0, m_sw) * (1 - fx) + I(y1, x1, m_se) * fx)
    # the kernel's multipliers are integer divisions (T gix_mult = W / 2)
    grid_grad = np.stack([(gix * cot).sum(-1) * (W // 2), (giy * cot).sum(-1) * (H // 2)], -1)
    return x_grad, grid_grad


@pytest.mark.parametrize("xshape,gshape", [((1, 4, 4, 1), (1, 3, 3)), ((2, 5, 7, 3), (2, 4, 6)),
                                           ((2, 8, 6, 40), (2, 5, 5)), ((1, 16, 16, 32), (1, 9, 7))])
def test_grid_sample_forward_and_backward_from_mlx_docs(xshape, gshape):
    x = RNG.standard_normal(xshape).astype(np.float32)
    grid = RNG.uniform(-1, 1, gshape + (2,)).astype(np.float32)
    B, _, _, C = x.shape
    _, gN, gM, D = grid.shape
    out_shape = (B, gN, gM, C)
    out, = GRID_SAMPLE_FWD(inputs=[mx.array(x), mx.array(grid)], template=[("T", mx.float32)],
                           output_shapes=[out_shape], output_dtypes=[mx.float32],
                           grid=(int(np.prod(out_shape)), 1, 1), threadgroup=(256, 1, 1))
    np.testing.assert_allclose(np.array(out), grid_sample_np(x.astype(np.float64), grid.astype(np.float64)),
                               rtol=1e-4, atol=1e-5)

    cot = RNG.standard_normal(out_shape).astype(np.float32)
    simdgroup_size = 32
    C_padded = (C + simdgroup_size - 1) // simdgroup_size * simdgroup_size
    grid_size = B * gN * gM * C_padded
    x_grad, grid_grad = GRID_SAMPLE_BWD(
        inputs=[mx.array(x), mx.array(grid), mx.array(cot)], template=[("T", mx.float32)],
        output_shapes=[x.shape, grid.shape], output_dtypes=[mx.float32, mx.float32],
        grid=(grid_size, 1, 1), threadgroup=(256, 1, 1), init_value=0)
    want_x, want_g = grid_sample_vjp_np(x.astype(np.float64), grid.astype(np.float64), cot.astype(np.float64))
    np.testing.assert_allclose(np.array(x_grad), want_x, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.array(grid_grad), want_g, rtol=1e-4, atol=1e-3)


# ------------------------------------------- synchronisation and its limits

def _line_of(source, needle, nth=1):
    """1-based line of the nth line of `source` containing needle."""
    hits = [i + 1 for i, l in enumerate(source.split("\n")) if needle in l]
    return hits[nth - 1]


def run1(kernel, inputs, n, tg, dtype=mx.float32, **kw):
    out, = kernel(inputs=inputs, grid=(n, 1, 1), threadgroup=(tg, 1, 1), output_shapes=[(n,)],
                  output_dtypes=[dtype], **kw)
    mx.eval(out)
    return np.array(out)


DIVERGE_SRC = """
    uint lid = thread_position_in_threadgroup.x;
    if (lid < 16) {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    } else {
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[thread_position_in_grid.x] = inp[thread_position_in_grid.x];
"""

DIVERGE_LOOP_SRC = """
    uint lid = thread_position_in_threadgroup.x;
    for (uint i = 0; i < lid % 3; i++)
        threadgroup_barrier(mem_flags::mem_threadgroup);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[thread_position_in_grid.x] = inp[thread_position_in_grid.x];
"""


@pytest.mark.parametrize("src", [DIVERGE_SRC, DIVERGE_LOOP_SRC], ids=["if_else", "loop"])
def test_divergent_barriers_raise_naming_kernel_and_lines(src):
    k = mx.fast.metal_kernel(name="diverge", input_names=["inp"], output_names=["out"], source=src)
    x = mx.array(np.arange(64, dtype=np.float32))
    with pytest.raises(RuntimeError) as e:
        run1(k, [x], 64, 64)
    msg = str(e.value)
    first = _line_of(src, "threadgroup_barrier", 1)
    second = _line_of(src, "threadgroup_barrier", 2)
    assert "Kernel `diverge`" in msg
    assert f"<kernel diverge source>:{first}" in msg and f"<kernel diverge source>:{second}" in msg, msg
    assert "different barriers" in msg
    # the library stays usable, the same kernel object too
    ok = mx.fast.metal_kernel(name="after_diverge", input_names=["inp"], output_names=["out"],
                              source="out[thread_position_in_grid.x] = inp[thread_position_in_grid.x] * 2;")
    np.testing.assert_array_equal(run1(ok, [x], 64, 64), np.arange(64) * 2)
    with pytest.raises(RuntimeError, match="different barriers"):
        run1(k, [x], 64, 64)


EARLY_RETURN = mx.fast.metal_kernel(
    name="early_return_barrier", input_names=["inp"], output_names=["out"],
    source="""
    threadgroup float s[256];
    uint lid = thread_position_in_threadgroup.x, gid = thread_position_in_grid.x;
    uint n = inp_shape[0];
    if (gid >= n)
        return;                       // counts as arrived at every later barrier
    s[lid] = inp[gid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint partner = lid ^ 1;
    bool live = threadgroup_position_in_grid.x * threads_per_threadgroup.x + partner < n;
    float v = live ? s[partner] : s[lid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    s[lid] = v * 2;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[gid] = s[lid] + (live ? 0.5f : 0.0f);
    """)


@pytest.mark.parametrize("n,tg", [(1, 64), (63, 64), (100, 64), (130, 128)])
def test_early_return_then_barriers(n, tg):
    x = np.arange(n, dtype=np.float32) + 1
    grid = (n + tg - 1) // tg * tg          # more threads than elements: the rest return
    out, = EARLY_RETURN(inputs=[mx.array(x)], grid=(grid, 1, 1), threadgroup=(tg, 1, 1), output_shapes=[(n,)],
                        output_dtypes=[mx.float32])
    idx = np.arange(n)
    partner = idx ^ 1
    live = partner < n
    want = np.where(live, x[np.minimum(partner, n - 1)], x) * 2 + np.where(live, 0.5, 0)
    np.testing.assert_array_equal(np.array(out), want)


def test_threadgroup_memory_limit():
    def kernel(floats_a, floats_b):
        return mx.fast.metal_kernel(name=f"tgmem_{floats_a}_{floats_b}", input_names=["inp"], output_names=["out"],
                                    source=f"""
            threadgroup float a[{floats_a}];
            threadgroup float b[{floats_b}];
            uint lid = thread_position_in_threadgroup.x;
            a[lid] = inp[lid];
            b[lid] = 2 * inp[lid];
            threadgroup_barrier(mem_flags::mem_threadgroup);
            out[lid] = a[(lid + 1) % 32] + b[lid];
            """)
    x = mx.array(np.arange(32, dtype=np.float32))
    # exactly 32 KiB is allowed
    got = run1(kernel(4096, 4096), [x], 32, 32)
    np.testing.assert_array_equal(got, (np.arange(32) + 1) % 32 + 2 * np.arange(32))
    with pytest.raises(RuntimeError) as e:
        run1(kernel(4096, 4097), [x], 32, 32)
    msg = str(e.value)
    assert "Kernel `tgmem_4096_4097`" in msg and "32768 bytes (32 KiB)" in msg and "32772 bytes" in msg, msg
    assert "<kernel tgmem_4096_4097 source>:3" in msg, msg


STACK_SRC = """
    uint lid = thread_position_in_threadgroup.x;
    uint simd_lane = thread_index_in_simdgroup, quad_id = quadgroup_index_in_threadgroup;  // names, not calls
    float r = inp[lid] + 0 * (simd_lane + quad_id);
    {sync}
    if (lid == 5) {{
        float big[{n}];                  // {kib} KiB on one thread's stack
        for (int i = 0; i < {n}; i++)
            big[i] = inp[i % 32] * i;
        r = big[int(inp[lid] * 1000) % {n}];
    }}
    out[lid] = r;
"""


@pytest.mark.usefixtures("cpu_device")  # the CPU back-end's own behaviour
def test_stack_overflow_is_an_error_and_the_process_survives():
    x = mx.array(np.arange(32, dtype=np.float32))
    n = 256 * 1024 // 4                 # 256 KiB: over the 128 KiB of a cooperative thread
    coop = mx.fast.metal_kernel(name="stack_hog", input_names=["inp"], output_names=["out"],
                                source=STACK_SRC.format(sync="threadgroup_barrier(mem_flags::mem_threadgroup);",
                                                        n=n, kib=256))
    for _ in range(2):
        with pytest.raises(RuntimeError) as e:
            run1(coop, [x], 32, 32)
        msg = str(e.value)
        assert "Kernel `stack_hog` overflowed a thread's stack" in msg and "128 KiB" in msg, msg
    # the same kernel without cooperation takes the plain path, where a
    # thread has 8 MiB of stack, and runs (variables named simd_lane or
    # quad_id do not make a kernel cooperative)
    plain = mx.fast.metal_kernel(name="stack_hog_plain", input_names=["inp"], output_names=["out"],
                                 source=STACK_SRC.format(sync="", n=n, kib=256))
    got = run1(plain, [x], 32, 32)
    want = np.arange(32, dtype=np.float32)
    want[5] = (5000 % 32) * 5000        # big[5000]
    np.testing.assert_array_equal(got, want)
    # a plain-path overflow is an error too
    huge = 16 * 1024 * 1024 // 4
    plain_huge = mx.fast.metal_kernel(name="stack_hog_huge", input_names=["inp"], output_names=["out"],
                                      source=STACK_SRC.format(sync="", n=huge, kib=16384))
    with pytest.raises(RuntimeError, match="overflowed a thread's stack"):
        run1(plain_huge, [x], 32, 32)
    # and everything still works
    np.testing.assert_array_equal(run1(plain, [x], 32, 32), want)


HELPER_HEADER = """
// a block reduction helper taking threadgroup memory, with barriers in a loop
float block_reduce_sum(float v, threadgroup float* scratch, uint lid, uint n) {
    scratch[lid] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = n / 2; s > 0; s >>= 1) {
        if (lid < s)
            scratch[lid] += scratch[lid + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    float r = scratch[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return r;
}

struct Stats {
    float sum;
    float maxv;
    uint count;
};

void publish(threadgroup Stats& st, float sum, float maxv, uint count) {
    st.sum = sum;
    st.maxv = maxv;
    st.count = count;
}
"""

HELPERS = mx.fast.metal_kernel(
    name="helpers_structs_scalars", input_names=["inp"], output_names=["out"], header=HELPER_HEADER,
    source="""
    threadgroup float scratch[128];
    threadgroup Stats st;
    threadgroup float scale;
    threadgroup atomic_uint positives;
    uint lid = thread_position_in_threadgroup.x, gid = thread_position_in_grid.x;
    uint n = threads_per_threadgroup.x;   // a power of two here
    float v = inp[gid];
    if (lid == 0) {
        scale = 0.5f;
        atomic_store_explicit(&positives, 0u, memory_order_relaxed);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (v > 0)
        atomic_fetch_add_explicit(&positives, 1u, memory_order_relaxed);
    float total = block_reduce_sum(v, scratch, lid, n);          // called twice:
    float total2 = block_reduce_sum(v * v, scratch, lid, n);     // the same barriers
    float m = v;
    for (uint k = 1; k < 32; k <<= 1)                            // SIMD-group max
        m = max(m, simd_shuffle_xor(m, k));
    if (lid == 0)
        publish(st, total, m, atomic_load_explicit(&positives, memory_order_relaxed));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[gid] = st.sum * scale + total2 + st.maxv * 1000 + st.count * 100000;
    """)


@pytest.mark.parametrize("groups,tg", [(1, 32), (3, 64), (2, 128)])
def test_barriers_in_loops_and_helpers_structs_and_scalars(groups, tg):
    x = RNG.integers(-5, 6, groups * tg).astype(np.float32)
    got = run1(HELPERS, [mx.array(x)], groups * tg, tg)
    g = x.reshape(groups, tg)
    want = (g.sum(1) * 0.5 + (g * g).sum(1) + g[:, :32].max(1) * 1000 + (g > 0).sum(1) * 100000)
    np.testing.assert_array_equal(got, np.repeat(want, tg).astype(np.float32))


PREPROCESSOR = mx.fast.metal_kernel(
    name="preprocessor_then_threadgroup", input_names=["inp"], output_names=["out"],
    header="#define TILE 64\n#define DECLARE_SHARED(name, n) threadgroup float name[n];\n",
    source="""
#if TILE > 32
    threadgroup float tile[TILE];
#else
    threadgroup float tile[32];
#endif
#define OTHER_SIZE TILE
    threadgroup float /* one per thread */ other[OTHER_SIZE];
    DECLARE_SHARED(third, TILE)
    uint lid = thread_position_in_threadgroup.x;
    tile[lid] = inp[thread_position_in_grid.x];
    other[lid] = 1.0f;
    third[lid] = 10.0f * lid;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[thread_position_in_grid.x] = tile[TILE - 1 - lid] + other[lid] + third[(lid + 1) % TILE];
    """)


def test_threadgroup_declarations_after_directives_in_macros_and_with_comments():
    x = np.arange(128, dtype=np.float32)
    got = run1(PREPROCESSOR, [mx.array(x)], 128, 64)
    lid = np.arange(128) % 64
    np.testing.assert_array_equal(got, x.reshape(2, 64)[:, ::-1].reshape(-1) + 1 + 10.0 * ((lid + 1) % 64))


# ------------------------------------------- SIMD-group functions in divergent code

DIVERGENT_SIMD = mx.fast.metal_kernel(
    name="divergent_simd", input_names=["inp"], output_names=["a", "b", "c", "d", "e"],
    source="""
    uint lid = thread_position_in_threadgroup.x;
    uint lane = thread_index_in_simdgroup;
    float v = inp[thread_position_in_grid.x];
    float x = -1, y = -1;
    // a SIMD-group function inside a branch: only the lanes in the branch are active
    if (lane < 12)
        x = simd_sum(v);
    // ... and after it, all lanes again
    y = simd_sum(v);
    // a branch, then a threadgroup barrier the other lanes wait at
    float z = -1;
    if (lane % 3 == 0)
        z = simd_max(v);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // loops with different trip counts per lane: simd_sum(1) counts the active lanes
    float acc = 0;
    for (uint i = 0; i < lane % 4; i++)
        acc += simd_sum(1.0f);
    a[thread_position_in_grid.x] = x;
    b[thread_position_in_grid.x] = y;
    c[thread_position_in_grid.x] = z;
    d[thread_position_in_grid.x] = acc + 1000 * simd_sum(acc);
    // two SIMD-group functions on one line, in the two arms of a conditional
    e[thread_position_in_grid.x] = (lane & 1) ? simd_sum(v) : simd_max(v) + 1000;
    """)


@pytest.mark.parametrize("n,tg", [(64, 64), (40, 40), (100, 64)])
def test_simd_functions_in_divergent_code(n, tg):
    x = RNG.integers(-9, 10, n).astype(np.float32)
    outs = DIVERGENT_SIMD(inputs=[mx.array(x)], grid=(n, 1, 1), threadgroup=(tg, 1, 1),
                          output_shapes=[(n,)] * 5, output_dtypes=[mx.float32] * 5)
    mx.eval(outs)
    a, b, c, d, e = (np.array(o) for o in outs)
    wa, wb, wc, wd, we = (np.zeros(n, np.float32) for _ in range(5))
    for g0 in range(0, n, tg):
        for s0 in range(g0, min(g0 + tg, n), 32):
            idx = np.arange(s0, min(s0 + 32, g0 + tg, n))
            lane = idx - s0
            vals = x[idx]
            wa[idx] = np.where(lane < 12, vals[lane < 12].sum(), -1)
            wb[idx] = vals.sum()
            wc[idx] = np.where(lane % 3 == 0, vals[lane % 3 == 0].max(), -1)
            trips = lane % 4
            acc = np.array([sum((trips > k).sum() for k in range(t)) for t in trips], np.float32)
            wd[idx] = acc + 1000 * acc.sum()
            odd = (lane & 1) == 1
            we[idx] = np.where(odd, vals[odd].sum(), vals[~odd].max() + 1000 if (~odd).any() else 0)
    for got, want, name in [(a, wa, "branch"), (b, wb, "after branch"), (c, wc, "before barrier"), (d, wd, "loops"),
                            (e, we, "conditional")]:
        np.testing.assert_array_equal(got, want, err_msg=name)


# ------------------------------------------- the plain path

PLAIN = mx.fast.metal_kernel(
    name="plain_saxpy", input_names=["x", "y", "alpha"], output_names=["out"],
    source="""
    // no threadgroup memory, barriers or SIMD-group functions: threads run
    // one after another (device atomics are fine)
    uint i = thread_position_in_grid.x;
    out[i] = alpha * x[i] + y[i];
    """)


@pytest.mark.parametrize("n,tg", [(1, 256), (1000, 256), (100003, 1024)])
def test_kernels_without_cooperation_take_the_plain_path(n, tg):
    x = RNG.standard_normal(n).astype(np.float32)
    y = RNG.standard_normal(n).astype(np.float32)
    got = run1(PLAIN, [mx.array(x), mx.array(y), 2.5], n, tg)
    np.testing.assert_allclose(got, 2.5 * x + y, rtol=1e-6, atol=1e-6)


# ------------------------------------------- patterns from tutorial-style kernels

# Program-scope `constant` sizes in the header used as threadgroup array bounds,
# a threadgroup array declared in a nested block, and barriers inside the
# bounds check (threads past the end skip them and count as arrived), as in
# "Metal Puzzles"-style MLX exercises.
CONV1D = mx.fast.metal_kernel(
    name="conv1d_shared", input_names=["a", "b"], output_names=["out"],
    header="""
    constant uint TPB = 8;
    constant uint MAX_CONV = 4;
    constant float SCALE[2] = {1.0f, 0.5f};
    """,
    source="""
    uint i = threadgroup_position_in_grid.x * threads_per_threadgroup.x + thread_position_in_threadgroup.x;
    uint local_i = thread_position_in_threadgroup.x;
    uint n = a_shape[0], k = b_shape[0];
    threadgroup float shared_a[TPB + MAX_CONV];
    shared_a[local_i] = i < n ? a[i] : 0.0f;
    if (local_i < MAX_CONV - 1)          // the halo after the block
        shared_a[TPB + local_i] = i + TPB < n ? a[i + TPB] : 0.0f;
    if (i < n) {
        threadgroup float shared_b[MAX_CONV];
        if (local_i < k)
            shared_b[local_i] = b[local_i];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float acc = 0;
        for (uint j = 0; j < k; j++)
            acc += shared_a[local_i + j] * shared_b[j];
        out[i] = acc * SCALE[i % 2];
    }
    """)


@pytest.mark.parametrize("n,k", [(6, 3), (8, 4), (21, 2), (1, 1)])
def test_conv1d_with_program_scope_constants(n, k):
    a = RNG.integers(-5, 6, n).astype(np.float32)
    b = RNG.integers(-3, 4, k).astype(np.float32)
    grid = (n + 7) // 8 * 8
    out, = CONV1D(inputs=[mx.array(a), mx.array(b)], grid=(grid, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(n,)],
                  output_dtypes=[mx.float32])
    pad = np.concatenate([a, np.zeros(k, np.float32)])
    want = np.array([sum(pad[i + j] * b[j] for j in range(k)) for i in range(n)]) * np.where(np.arange(n) % 2, 0.5, 1)
    np.testing.assert_array_equal(np.array(out), want.astype(np.float32))


WILD = mx.fast.metal_kernel(
    name="wild_pointer", input_names=["inp"], output_names=["out"],
    source="""
    threadgroup float s[64];
    uint lid = thread_position_in_threadgroup.x;
    s[lid] = inp[thread_position_in_grid.x];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float v = simd_sum(s[lid]);
    if (threadgroup_position_in_grid.x == 2 && lid == 37)
        v += inp[thread_position_in_grid.x + (1ul << 40)];   // far outside any buffer
    threadgroup_barrier(mem_flags::mem_threadgroup);
    out[thread_position_in_grid.x] = v;
    """)


@pytest.mark.usefixtures("cpu_device")  # the CPU back-end's own behaviour
def test_wild_pointer_in_a_cooperative_kernel_is_an_error_and_the_workers_recover():
    x = np.arange(64 * 8, dtype=np.float32)
    for _ in range(2):
        with pytest.raises(RuntimeError) as e:
            run1(WILD, [mx.array(x)], x.size, 64)
        assert "Kernel `wild_pointer` made an invalid memory access" in str(e.value), str(e.value)
    # the same workers, with fibers abandoned mid-threadgroup, run the next kernels
    for n, tg in [(5000, 128), (4096, 1024)]:
        v = RNG.integers(-1000, 1000, n).astype(np.int32)
        groups = (n + tg - 1) // tg
        partial, = TREE_SUM(inputs=[mx.array(v)], template=[("T", mx.int32)], grid=(groups * tg, 1, 1),
                            threadgroup=(tg, 1, 1), output_shapes=[(groups,)], output_dtypes=[mx.int32])
        pad = np.zeros(groups * tg, np.int64)
        pad[:n] = v
        np.testing.assert_array_equal(np.array(partial), pad.reshape(groups, tg).sum(1))


# ------------------------------------------- attention with an online softmax

# Flash-attention style: one SIMD-group per query row, four rows per
# threadgroup. Key/value tiles of 32 rows are staged in threadgroup memory;
# lane j scores key j of the tile, the running max and sum are rescaled per
# tile, and each lane accumulates its D/32 output columns from the tile's
# probabilities, broadcast lane by lane with simd_shuffle.
FLASH_ATTENTION = mx.fast.metal_kernel(
    name="flash_attention_rows", input_names=["q", "k", "v", "scale"], output_names=["out"],
    source="""
    constexpr int BK = 32, PER = D / 32;
    threadgroup T Ks[BK][D];
    threadgroup T Vs[BK][D];
    uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
    uint lid = thread_index_in_threadgroup, nthreads = threads_per_threadgroup.x;
    int Lq = q_shape[0], Lk = k_shape[0];
    int row = int(threadgroup_position_in_grid.x * simdgroups_per_threadgroup + sg);
    bool live = row < Lq;
    float qv[D];
    for (int d = 0; d < D; d++) qv[d] = live ? float(q[row * D + d]) * scale[0] : 0.0f;
    float m = -INFINITY, l = 0.0f, o[PER];
    for (int i = 0; i < PER; i++) o[i] = 0.0f;
    for (int k0 = 0; k0 < Lk; k0 += BK) {
        for (uint i = lid; i < BK * D; i += nthreads) {
            int r = k0 + int(i / D);
            Ks[i / D][i % D] = r < Lk ? k[r * D + i % D] : T(0);
            Vs[i / D][i % D] = r < Lk ? v[r * D + i % D] : T(0);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        int key = k0 + int(lane);
        float s = -INFINITY;
        if (key < Lk && (!CAUSAL || key <= row)) {
            s = 0.0f;
            for (int d = 0; d < D; d++) s += qv[d] * float(Ks[lane][d]);
        }
        float m_new = max(m, simd_max(s));
        if (m_new > -INFINITY) {
            float p = exp(s - m_new);
            float corr = exp(m - m_new);
            l = l * corr + simd_sum(p);
            for (int i = 0; i < PER; i++) o[i] *= corr;
            for (int j = 0; j < BK; j++) {
                float pj = simd_shuffle(p, ushort(j));
                for (int i = 0; i < PER; i++) o[i] += pj * float(Vs[j][lane + 32 * i]);
            }
            m = m_new;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (live)
        for (int i = 0; i < PER; i++) out[row * D + lane + 32 * i] = T(o[i] / l);
    """)


def attention_reference(q, k, v, scale, causal):
    s = (q.astype(np.float64) * scale) @ k.astype(np.float64).T
    if causal:
        s = np.where(np.arange(k.shape[0])[None, :] <= np.arange(q.shape[0])[:, None], s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("Lq,Lk,D", [(8, 100, 64), (13, 33, 32), (4, 256, 128)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16])
def test_flash_attention_online_softmax(Lq, Lk, D, causal, dtype):
    if causal and Lk < Lq:
        pytest.skip("every query row needs a key")
    q, k, v = (RNG.standard_normal((n, D)).astype(np.float32) for n in (Lq, Lk, Lk))
    ins = [mx.array(a).astype(dtype) for a in (q, k, v)]
    q, k, v = (as_f32(a) for a in ins)
    scale = 1.0 / np.sqrt(D)
    groups = (Lq + 3) // 4
    out, = FLASH_ATTENTION(inputs=ins + [mx.array([scale], dtype=mx.float32)],
                           template=[("T", dtype), ("D", D), ("CAUSAL", causal)], grid=(groups * 128, 1, 1),
                           threadgroup=(128, 1, 1), output_shapes=[(Lq, D)], output_dtypes=[dtype])
    tol = 1e-4 if dtype == mx.float32 else 2e-3
    np.testing.assert_allclose(as_f32(out), attention_reference(q, k, v, scale, causal), rtol=tol, atol=tol)


# -------------------------------------- GEMM on simdgroup matrices, MLX style

# As MLX's steel GEMMs: each SIMD-group owns a 16x16 block of C as 2x2
# simdgroup_float8x8 accumulators; A and B tiles are staged in threadgroup
# memory (A padded against bank conflicts), and the result is written through
# thread_elements() with the lane layout (row (q&4) + (l/2)%4, column
# (q&2)*2 + (l%2)*2), bounds-checked for partial tiles.
SIMDGROUP_GEMM = mx.fast.metal_kernel(
    name="simdgroup_gemm", input_names=["a", "b"], output_names=["c"],
    source="""
    constexpr int BM = 32, BN = 32, BK = 16, PAD = 4;
    threadgroup T As[BM][BK + PAD];
    threadgroup T Bs[BK][BN + PAD];
    int M = a_shape[0], K = a_shape[1], N = b_shape[1];
    uint lid = thread_index_in_threadgroup, lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;                  // 4 SIMD-groups: a 2x2 grid of 16x16 blocks
    int m0 = int(threadgroup_position_in_grid.y) * BM, n0 = int(threadgroup_position_in_grid.x) * BN;
    int sm = int(sg / 2) * 16, sn = int(sg % 2) * 16;
    simdgroup_float8x8 acc[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (uint i = lid; i < BM * BK; i += 128) {
            int r = int(i / BK), kk = int(i % BK);
            As[r][kk] = (m0 + r < M && k0 + kk < K) ? a[(m0 + r) * K + k0 + kk] : T(0);
        }
        for (uint i = lid; i < BK * BN; i += 128) {
            int kk = int(i / BN), cc = int(i % BN);
            Bs[kk][cc] = (k0 + kk < K && n0 + cc < N) ? b[(k0 + kk) * N + n0 + cc] : T(0);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int kk = 0; kk < BK; kk += 8) {
            simdgroup_matrix<T, 8, 8> fa[2], fb[2];
            for (int i = 0; i < 2; i++) simdgroup_load(fa[i], &As[sm + 8 * i][kk], BK + PAD);
            for (int j = 0; j < 2; j++) simdgroup_load(fb[j], &Bs[kk][sn + 8 * j], BN + PAD);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++) simdgroup_multiply_accumulate(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    uint qid = lane / 4;
    int fr = int((qid & 4) + (lane / 2) % 4), fc = int((qid & 2) * 2 + (lane % 2) * 2);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            auto e = acc[i][j].thread_elements();
            int r = m0 + sm + 8 * i + fr, c0 = n0 + sn + 8 * j + fc;
            for (int t = 0; t < 2; t++)
                if (r < M && c0 + t < N) c[r * N + c0 + t] = T(e[t]);
        }
    """)


@pytest.mark.parametrize("M,K,N", [(32, 16, 32), (64, 48, 96), (37, 50, 29), (100, 33, 70)])
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16])
def test_gemm_on_simdgroup_matrices(M, K, N, dtype):
    ins = [mx.array(RNG.standard_normal(s).astype(np.float32)).astype(dtype) for s in ((M, K), (K, N))]
    a, b = (as_f32(x) for x in ins)
    c, = SIMDGROUP_GEMM(inputs=ins, template=[("T", dtype)], grid=((N + 31) // 32 * 128, (M + 31) // 32, 1),
                        threadgroup=(128, 1, 1), output_shapes=[(M, N)], output_dtypes=[dtype])
    tol = 1e-4 if dtype == mx.float32 else 1e-2
    np.testing.assert_allclose(as_f32(c), a @ b, rtol=tol, atol=tol * 4)


# ------------------------- Sinkhorn-Knopp in threadgroup memory (generated body)

# The body is generated from Python templates ({{ }} are their literal
# braces), as kernels built by string formatting are: an R x C matrix per
# threadgroup, ITERS alternating row and column normalisations, each row's
# and each column's sum a non-power-of-two tree reduction written out level
# by level with a barrier after each, and thread 0 writing the scale. That is
# hundreds of barriers in one loop: past the budget of the lockstep pass's
# per-site run function (tens of seconds to compile), so the pass builds its
# compact run function (docs/design.md, "A compact lockstep run function").
SINKHORN_HEAD = """
    threadgroup float P[{R}][{C}];
    threadgroup float red[{TG}];
    threadgroup float scale[{RC}];
    uint tid = thread_position_in_threadgroup.x;
    uint g = threadgroup_position_in_grid.x;
    for (uint i = tid; i < {R} * {C}; i += {TG})
        P[i / {C}][i % {C}] = metal::exp(float(x[g * {R} * {C} + i]));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int it = 0; it < {ITERS}; ++it) {{
"""
SINKHORN_REDUCE = """
        red[tid] = tid < {n} ? P[{row}][{col}] : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);
{levels}        if (tid == 0) scale[{k}] = 1.0f / red[0];
        threadgroup_barrier(mem_flags::mem_threadgroup);
"""
SINKHORN_LEVEL = """        if (tid < {lo}) red[tid] += red[tid + {h}];
        threadgroup_barrier(mem_flags::mem_threadgroup);
"""
SINKHORN_APPLY = """
        for (uint i = tid; i < {R} * {C}; i += {TG}) P[i / {C}][i % {C}] *= scale[i {op} {C}];
        threadgroup_barrier(mem_flags::mem_threadgroup);
"""
SINKHORN_TAIL = """    }}
    for (uint i = tid; i < {R} * {C}; i += {TG})
        out[g * {R} * {C} + i] = P[i / {C}][i % {C}];
"""


def _sinkhorn_levels(n):
    s = ""
    while n > 1:
        h = (n + 1) // 2
        s += SINKHORN_LEVEL.format(lo=n - h, h=h)
        n = h
    return s


def sinkhorn_source(R, C, iters, tg):
    f = dict(R=R, C=C, TG=tg, RC=max(R, C), ITERS=iters)
    s = SINKHORN_HEAD.format(**f)
    s += "".join(SINKHORN_REDUCE.format(n=C, row=r, col="tid", levels=_sinkhorn_levels(C), k=r) for r in range(R))
    s += SINKHORN_APPLY.format(op="/", **f)
    s += "".join(SINKHORN_REDUCE.format(n=R, row="tid", col=c, levels=_sinkhorn_levels(R), k=c) for c in range(C))
    s += SINKHORN_APPLY.format(op="%", **f)
    return s + SINKHORN_TAIL.format(**f)


# The same computation with the loops left to the compiler (one template,
# constants filled in): about 60 resume points, inside the budget, so the
# lockstep engine runs it.
SINKHORN_LOOPS_TEMPLATE = """
    threadgroup float P[{R}][{C}];
    threadgroup float red[{TG}];
    threadgroup float scale[{RC}];
    uint tid = thread_position_in_threadgroup.x;
    uint g = threadgroup_position_in_grid.x;
    for (uint i = tid; i < {R} * {C}; i += {TG})
        P[i / {C}][i % {C}] = metal::exp(float(x[g * {R} * {C} + i]));
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int it = 0; it < {ITERS}; ++it) {{
        // rows: one reduction per row, over {C} columns
        for (int r = 0; r < {R}; ++r) {{
            red[tid] = tid < {C} ? P[r][tid] : 0.0f;
            threadgroup_barrier(mem_flags::mem_threadgroup);
            for (uint n = {C}; n > 1; ) {{
                uint h = (n + 1) / 2;
                if (tid < n - h) red[tid] += red[tid + h];
                threadgroup_barrier(mem_flags::mem_threadgroup);
                n = h;
            }}
            if (tid == 0) scale[r] = 1.0f / red[0];
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }}
        for (uint i = tid; i < {R} * {C}; i += {TG}) P[i / {C}][i % {C}] *= scale[i / {C}];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        // columns
        for (int c = 0; c < {C}; ++c) {{
            red[tid] = tid < {R} ? P[tid][c] : 0.0f;
            threadgroup_barrier(mem_flags::mem_threadgroup);
            for (uint n = {R}; n > 1; ) {{
                uint h = (n + 1) / 2;
                if (tid < n - h) red[tid] += red[tid + h];
                threadgroup_barrier(mem_flags::mem_threadgroup);
                n = h;
            }}
            if (tid == 0) scale[c] = 1.0f / red[0];
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }}
        for (uint i = tid; i < {R} * {C}; i += {TG}) P[i / {C}][i % {C}] *= scale[i % {C}];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }}
    for (uint i = tid; i < {R} * {C}; i += {TG})
        out[g * {R} * {C} + i] = P[i / {C}][i % {C}];
"""


def sinkhorn_kernel(R, C, iters, tg, loops=False):
    f = dict(R=R, C=C, ITERS=iters, TG=tg, RC=max(R, C))
    src = SINKHORN_LOOPS_TEMPLATE.format(**f) if loops else sinkhorn_source(R, C, iters, tg)
    return mx.fast.metal_kernel(name=f"sinkhorn_{'loops' if loops else 'unrolled'}_{R}x{C}_{iters}",
                                input_names=["x"], output_names=["out"], source=src)


SINKHORN = {(12, 20, 20, 32): sinkhorn_kernel(12, 20, 20, 32)}
SINKHORN_LOOPS = {(12, 20, 20, 32): sinkhorn_kernel(12, 20, 20, 32, loops=True)}


def sinkhorn_reference(x, iters):
    p = np.exp(x.astype(np.float64))
    for _ in range(iters):
        p /= p.sum(2, keepdims=True)
        p /= p.sum(1, keepdims=True)
    return p


def run_sinkhorn(table, groups, verbose=False):
    R, C, iters, tg = 12, 20, 20, 32
    x = RNG.standard_normal((groups, R, C)).astype(np.float32)
    out, = table[(R, C, iters, tg)](inputs=[mx.array(x)], grid=(groups * tg, 1, 1), threadgroup=(tg, 1, 1),
                                    output_shapes=[(groups, R, C)], output_dtypes=[mx.float32], verbose=verbose)
    np.testing.assert_allclose(np.array(out), sinkhorn_reference(x, iters), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("groups", [1, 5])
def test_sinkhorn_knopp_generated_tree_reductions(groups):
    run_sinkhorn(SINKHORN, groups)


@pytest.mark.parametrize("groups", [1, 5])
def test_sinkhorn_knopp_loop_template(groups):
    run_sinkhorn(SINKHORN_LOOPS, groups)


@pytest.mark.skipif(os.environ.get("MKPY_ENGINE", "") == "fibers", reason="MKPY_ENGINE=fibers")
@pytest.mark.usefixtures("cpu_device")  # the CPU back-end's own behaviour
def test_sinkhorn_engines_and_the_compile_budget(capfd):
    # hundreds of barriers: past the per-site form's compile budget the lockstep pass builds its
    # compact run function and says so; the loop template (about 60 sites) keeps the per-site one
    if mx.metal.is_check_enabled():
        pytest.skip("the checker mode runs every kernel instrumented")
    if os.environ.get("MKPY_CBS_COMPACT", "0") not in ("", "0"):
        pytest.skip("MKPY_CBS_COMPACT builds every kernel's compact form")
    for table, want in ((SINKHORN, "runs on the lockstep engine (the compact form: 330 resume points"),
                        (SINKHORN_LOOPS, "runs on the lockstep engine")):
        run_sinkhorn(table, 2, verbose=True)
        line = [l for l in capfd.readouterr().out.splitlines() if "runs on" in l][0]
        assert want in line, line
        assert ("compact" in line) == (table is SINKHORN), line


@pytest.mark.skipif(os.environ.get("MKPY_ENGINE", "") == "fibers", reason="MKPY_ENGINE=fibers")
@pytest.mark.usefixtures("cpu_device")  # the CPU back-end's engines
def test_sinkhorn_generated_same_bits_on_lockstep_and_fibers(monkeypatch):
    # the compact run function against the fiber engine: the same bits, 3 groups of 32 threads
    if mx.metal.is_check_enabled():
        pytest.skip("the checker mode runs every kernel instrumented")
    R, C, iters, tg = 12, 20, 20, 32
    x = mx.array(np.random.default_rng(3).standard_normal((3, R, C)).astype(np.float32))
    outs = []
    for engine in ("lockstep", "fibers"):
        if engine == "fibers":
            monkeypatch.setenv("MKPY_ENGINE", "fibers")
        out, = SINKHORN[(R, C, iters, tg)](inputs=[x], grid=(3 * tg, 1, 1), threadgroup=(tg, 1, 1),
                                             output_shapes=[(3, R, C)], output_dtypes=[mx.float32])
        outs.append(np.array(out))
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    np.testing.assert_allclose(outs[0], sinkhorn_reference(np.array(x), iters), rtol=1e-4, atol=1e-6)


# ----------------- tiled attention with thread-0 softmax statistics (bfloat16)

# One query row per threadgroup and one output dimension per thread; K/V
# tiles, the scores and threadgroup scalars (running max, sum, correction) in
# threadgroup memory; thread 0 alone computes the softmax statistics of a
# tile between two barriers.
ATTENTION_T0_SRC = """
    // one query row per threadgroup, one output dimension per thread;
    // K/V tiles, the scores and the running softmax statistics in threadgroup memory
    threadgroup bfloat Ks[BK][D];
    threadgroup bfloat Vs[BK][D];
    threadgroup float qs[D];
    threadgroup float S[BK];
    threadgroup float m_run, l_run, corr;
    uint tid = thread_position_in_threadgroup.x;
    uint row = threadgroup_position_in_grid.x;
    int Lk = k_shape[0];
    qs[tid] = float(q[row * D + tid]) * scale[0];
    if (tid == 0) { m_run = -INFINITY; l_run = 0.0f; }
    float acc = 0.0f;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int k0 = 0; k0 < Lk; k0 += BK) {
        for (uint i = tid; i < BK * D; i += D) {
            int r = k0 + int(i / D);
            Ks[i / D][i % D] = r < Lk ? k[r * D + i % D] : bfloat(0.0f);
            Vs[i / D][i % D] = r < Lk ? v[r * D + i % D] : bfloat(0.0f);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (tid < BK) {
            float s = 0.0f;
            for (int d = 0; d < D; d++) s += qs[d] * float(Ks[tid][d]);
            S[tid] = k0 + int(tid) < Lk ? s : -INFINITY;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (tid == 0) {
            float mx = m_run;
            for (int j = 0; j < BK; j++) mx = max(mx, S[j]);
            float sum = 0.0f;
            for (int j = 0; j < BK; j++) {
                float p = exp(S[j] - mx);
                S[j] = p;
                sum += p;
            }
            corr = exp(m_run - mx);
            l_run = l_run * corr + sum;
            m_run = mx;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        acc *= corr;
        for (int j = 0; j < BK; j++) acc += S[j] * float(Vs[j][tid]);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    out[row * D + tid] = bfloat(acc / l_run);
"""

ATTENTION_T0 = mx.fast.metal_kernel(name="attention_thread0_stats", input_names=["q", "k", "v", "scale"],
                                    output_names=["out"], source=ATTENTION_T0_SRC)


def attention_t0(qa, ka, va, scale, D=128, BK=32):
    Lq = qa.shape[0]
    o, = ATTENTION_T0(inputs=[qa, ka, va, mx.array([scale], dtype=mx.float32)], template=[("D", D), ("BK", BK)],
                      grid=(Lq * D, 1, 1), threadgroup=(D, 1, 1), output_shapes=[(Lq, D)],
                      output_dtypes=[mx.bfloat16])
    return o


@pytest.mark.parametrize("Lq,Lk", [(3, 32), (5, 77), (2, 300)])
def test_attention_with_thread0_statistics_bfloat16(Lq, Lk):
    D = 128
    ins = [mx.array(RNG.standard_normal((n, D)).astype(np.float32)).astype(mx.bfloat16) for n in (Lq, Lk, Lk)]
    q, k, v = (as_f32(a) for a in ins)
    scale = 1.0 / np.sqrt(D)
    out = attention_t0(*ins, scale)
    np.testing.assert_allclose(as_f32(out), attention_reference(q, k, v, scale, False), rtol=2e-2, atol=2e-2)


# ------------------------------------------------ Metal's long vectors

# vec<bfloat, 8> as shipped kernels use it: 16-byte loads through a pointer
# cast, as_type from uint4, component-wise arithmetic.
LONG_VECTORS = mx.fast.metal_kernel(
    name="long_vectors", input_names=["x", "bits"], output_names=["out"],
    source="""
    uint i = thread_position_in_grid.x;
    vec<bfloat, 8> a = reinterpret_cast<device const vec<bfloat, 8>*>(x)[i];
    vec<bfloat, 8> b = as_type<vec<bfloat, 8>>(reinterpret_cast<device const uint4*>(bits)[i]);
    vec<float, 8> s = vec<float, 8>(a) * 2.0f + vec<float, 8>(b);
    vec<float, 16> w(s, s * -1.0f);
    for (int j = 0; j < 16; j++) out[i * 16 + j] = w[j];
    """)


def test_vec_of_8_and_16_components():
    n = 5
    xa = mx.array(RNG.standard_normal((n, 8)).astype(np.float32)).astype(mx.bfloat16)
    ba = mx.array(RNG.standard_normal((n, 8)).astype(np.float32)).astype(mx.bfloat16)
    bits = mx.view(ba, mx.uint32).reshape(n, 4)
    out, = LONG_VECTORS(inputs=[xa, bits], grid=(n, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(n, 16)],
                        output_dtypes=[mx.float32])
    s = as_f32(xa) * 2 + as_f32(ba)
    np.testing.assert_allclose(np.array(out), np.concatenate([s, -s], axis=1), rtol=1e-6)
