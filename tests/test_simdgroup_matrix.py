"""simdgroup_matrix (MSL 6.7): 8x8 matrices spread over a SIMD-group, checked
against NumPy on both engines: the lane layout of thread_elements(), loads and
stores (stride, origin, transpose; device and threadgroup memory), the
multiplies in float, half and bfloat, filled and diagonal matrices, and a tiled
GEMM built on them."""
import numpy as np
import pytest

import mkpy as mx


@pytest.fixture(params=["lockstep", "fibers"])
def engine(request, monkeypatch):
    if request.param == "fibers":
        monkeypatch.setenv("MKPY_ENGINE", "fibers")
    else:
        monkeypatch.delenv("MKPY_ENGINE", raising=False)
    return request.param


def run(name, source, inputs, shapes, grid=(32, 1, 1), tg=(32, 1, 1), dtypes=None, template=None, names=None):
    k = mx.fast.metal_kernel(name=name, input_names=names or [f"in{i}" for i in range(len(inputs))],
                             output_names=[f"out{i}" for i in range(len(shapes))], source=source)
    outs = k(inputs=inputs, grid=grid, threadgroup=tg, output_shapes=shapes,
             output_dtypes=dtypes or [mx.float32] * len(shapes), template=template)
    mx.eval(*outs)
    return [np.array(o.astype(mx.float32) if o.dtype == mx.bfloat16 else o) for o in outs]


def expected_layout():
    # lane l holds row (q & 4) + (l / 2) % 4, columns (q & 2) * 2 + (l % 2) * 2 and +1, q = l / 4
    rows, cols = np.zeros(32, np.int32), np.zeros(32, np.int32)
    for lane in range(32):
        q = lane // 4
        rows[lane] = (q & 4) + (lane // 2) % 4
        cols[lane] = (q & 2) * 2 + (lane % 2) * 2
    return rows, cols


def test_thread_elements_follow_the_apple_layout(engine):
    # each lane reports the two elements it holds of a loaded matrix m[r][c] = 8r + c
    src = """
        uint l = thread_index_in_simdgroup;
        simdgroup_float8x8 m;
        simdgroup_load(m, in0, 8);
        out0[2 * l] = m.thread_elements()[0];
        out0[2 * l + 1] = m.thread_elements()[1];"""
    a = np.arange(64, dtype=np.float32)
    out, = run("sgm_layout", src, [mx.array(a)], [(64,)])
    rows, cols = expected_layout()
    np.testing.assert_array_equal(out[0::2], rows * 8 + cols)
    np.testing.assert_array_equal(out[1::2], rows * 8 + cols + 1)
    # every element is held by exactly one lane
    assert sorted(out.tolist()) == list(range(64))


@pytest.mark.parametrize("transpose", [False, True])
def test_load_store_with_stride_and_origin_in_device_memory(engine, transpose):
    # an 8x8 block at (column 3, row 2) of a 12x16 matrix, stored at (column 5, row 1) of a 10x20 output
    src = f"""
        simdgroup_float8x8 m;
        simdgroup_load(m, in0, 16, ulong2(3, 2), {str(transpose).lower()});
        for (uint i = thread_index_in_simdgroup; i < 200; i += 32) out0[i] = -1.0f;
        simdgroup_barrier(mem_flags::mem_device);
        simdgroup_store(m, out0, 20, ulong2(5, 1));"""
    a = np.random.default_rng(0).standard_normal((12, 16)).astype(np.float32)
    out, = run("sgm_ldst_dev_" + str(transpose), src, [mx.array(a)], [(10, 20)])
    block = a[2:10, 3:11]
    want = np.full((10, 20), -1, np.float32)
    want[1:9, 5:13] = block.T if transpose else block
    np.testing.assert_array_equal(out, want)


def test_load_store_in_threadgroup_memory_with_transpose(engine):
    src = """
        threadgroup float t[64];
        threadgroup float u[80];
        uint l = thread_index_in_simdgroup;
        for (uint i = l; i < 64; i += 32) t[i] = in0[i];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        simdgroup_float8x8 m;
        simdgroup_load(m, t, 8);
        simdgroup_store(m, u, 10, ulong2(2, 0), true);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint i = l; i < 80; i += 32) out0[i] = (i % 10 < 2) ? 0.0f : u[i];"""
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    out, = run("sgm_ldst_tg", src, [mx.array(a)], [(8, 10)])
    want = np.zeros((8, 10), np.float32)
    want[:, 2:] = a.T
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("T,np_t,tol", [("float", np.float32, 1e-5), ("half", np.float16, 2e-2),
                                        ("bfloat", None, 6e-2)])
def test_multiply_and_multiply_accumulate(engine, T, np_t, tol):
    src = f"""
        simdgroup_matrix<{T}, 8, 8> a, b, c, d, e;
        simdgroup_load(a, in0, 8);
        simdgroup_load(b, in1, 8);
        simdgroup_load(c, in2, 8);
        simdgroup_multiply(d, a, b);
        simdgroup_multiply_accumulate(e, a, b, c);
        simdgroup_store(d, out0, 8);
        simdgroup_store(e, out1, 8);"""
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal((8, 8)).astype(np.float32) for _ in range(3))
    dt = {"float": mx.float32, "half": mx.float16, "bfloat": mx.bfloat16}[T]
    ins = [mx.array(m).astype(dt) for m in (a, b, c)]
    a, b, c = (np.array(m.astype(mx.float32)) for m in ins)   # the values the kernel sees
    d, e = run("sgm_mma_" + T, src, ins, [(8, 8), (8, 8)], dtypes=[dt, dt])
    d, e = d.astype(np.float32), e.astype(np.float32)
    np.testing.assert_allclose(d, a @ b, rtol=tol, atol=tol * 4)
    np.testing.assert_allclose(e, a @ b + c, rtol=tol, atol=tol * 4)


def test_mixed_precision_accumulate_into_float(engine):
    # half operands, float accumulator, as MLX's steel GEMMs do
    src = """
        simdgroup_half8x8 a, b;
        simdgroup_float8x8 c = make_filled_simdgroup_matrix<float, 8, 8>(0.5f);
        simdgroup_load(a, in0, 8);
        simdgroup_load(b, in1, 8);
        simdgroup_multiply_accumulate(c, a, b, c);
        simdgroup_store(c, out0, 8);"""
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((8, 8)).astype(np.float16) for _ in range(2))
    out, = run("sgm_mixed", src, [mx.array(a), mx.array(b)], [(8, 8)])
    np.testing.assert_allclose(out, a.astype(np.float32) @ b.astype(np.float32) + 0.5, rtol=1e-5, atol=1e-5)


def test_filled_and_diagonal_matrices(engine):
    src = """
        simdgroup_float8x8 f = make_filled_simdgroup_matrix<float, 8, 8>(in0[0]);
        simdgroup_float8x8 d = simdgroup_float8x8(in0[1]);
        simdgroup_float8x8 p;
        simdgroup_multiply(p, f, d);
        simdgroup_store(f, out0, 8);
        simdgroup_store(d, out1, 8);
        simdgroup_store(p, out2, 8);"""
    out = run("sgm_fill_diag", src, [mx.array([2.5, -3.0])], [(8, 8)] * 3)
    np.testing.assert_array_equal(out[0], np.full((8, 8), 2.5, np.float32))
    np.testing.assert_array_equal(out[1], np.eye(8, dtype=np.float32) * -3)
    np.testing.assert_array_equal(out[2], np.full((8, 8), -7.5, np.float32))


def test_matrices_per_simdgroup_in_a_larger_threadgroup(engine):
    # 4 SIMD-groups, each multiplies its own 8x8 pair: lanes exchange only within their SIMD-group
    src = """
        uint g = simdgroup_index_in_threadgroup;
        simdgroup_float8x8 a, b, c;
        simdgroup_load(a, in0 + 64 * g, 8);
        simdgroup_load(b, in1 + 64 * g, 8);
        simdgroup_multiply(c, a, b);
        simdgroup_store(c, out0 + 64 * g, 8);"""
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((4, 8, 8)).astype(np.float32) for _ in range(2))
    out, = run("sgm_groups", src, [mx.array(a), mx.array(b)], [(4, 8, 8)], grid=(128, 1, 1), tg=(128, 1, 1))
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_tiled_gemm_on_simdgroup_matrices(engine):
    # C = A @ B, M=N=64, K=48: each threadgroup of 4 SIMD-groups computes a 16x16 tile of C,
    # staging 16x8 panels of A and 8x16 panels of B in threadgroup memory; templated on T
    src = """
        threadgroup T As[16 * 8];
        threadgroup T Bs[8 * 16];
        uint lid = thread_index_in_threadgroup;
        uint sg = simdgroup_index_in_threadgroup;
        uint tr = sg / 2, tc = sg % 2;                      // this SIMD-group's 8x8 sub-tile
        uint row0 = threadgroup_position_in_grid.y * 16, col0 = threadgroup_position_in_grid.x * 16;
        simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        for (uint k0 = 0; k0 < K; k0 += 8) {
            for (uint i = lid; i < 128; i += 128) {
                As[i] = A[(row0 + i / 8) * K + k0 + i % 8];
                Bs[i] = B[(k0 + i / 16) * N + col0 + i % 16];
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            simdgroup_matrix<T, 8, 8> a, b;
            simdgroup_load(a, As, 8, ulong2(0, tr * 8));
            simdgroup_load(b, Bs, 16, ulong2(tc * 8, 0));
            simdgroup_multiply_accumulate(acc, a, b, acc);
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        simdgroup_store(acc, C, N, ulong2(col0 + tc * 8, row0 + tr * 8));"""
    M, N, K = 64, 64, 48
    rng = np.random.default_rng(4)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    k = mx.fast.metal_kernel(name="sgm_gemm", input_names=["A", "B"], output_names=["C"], source=src)
    out, = k(inputs=[mx.array(a), mx.array(b)], grid=(128 * N // 16, M // 16, 1), threadgroup=(128, 1, 1),
             output_shapes=[(M, N)], output_dtypes=[mx.float32],
             template=[("T", mx.float32), ("K", K), ("N", N)])
    np.testing.assert_allclose(np.array(out), a @ b, rtol=1e-4, atol=1e-4)
