"""Guide 000 (Troubleshooting MLX Metal Kernels), "Correctness validation".

The guide compares a custom RMSNorm kernel (`my_rmsnorm`, left undefined there) with
`mx.fast.rms_norm`. `my_rmsnorm` here is one threadgroup per row: strided sums of squares,
`simd_sum` per SIMD-group, partial sums in threadgroup memory, a barrier, then the scale.
It is validated across several sizes, as the guide's "works with small inputs, fails with
large" section advises.
"""
import sys

import mkpy as mx

RMSNORM_SOURCE = """
    uint row = threadgroup_position_in_grid.x;
    uint tid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint nthreads = threads_per_threadgroup.x;
    uint D = x_shape[1];
    threadgroup float partial[32];

    float acc = 0.0f;
    for (uint j = tid; j < D; j += nthreads) {
        float v = (float)x[row * D + j];
        acc += v * v;
    }
    acc = simd_sum(acc);
    if (lane == 0) partial[sg] = acc;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float p = (lane < (nthreads + 31) / 32) ? partial[lane] : 0.0f;
        p = simd_sum(p);
        if (lane == 0) partial[0] = p;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float scale = metal::rsqrt(partial[0] / float(D) + eps[0]);
    for (uint j = tid; j < D; j += nthreads) {
        out[row * D + j] = (T)((float)x[row * D + j] * scale * (float)w[j]);
    }
"""
_kernel = mx.fast.metal_kernel(name="rmsnorm", input_names=["x", "w", "eps"], output_names=["out"],
                               source=RMSNORM_SOURCE)


def my_rmsnorm(x, weight, eps=1e-5):
    D = x.shape[-1]
    x_2d = x.reshape(-1, D)
    N = x_2d.shape[0]
    tg = min(256, max(32, (D // 32) * 32))
    (out,) = _kernel(inputs=[x_2d, weight, mx.array([eps], dtype=mx.float32)],
                     template=[("T", x.dtype)], grid=(N * tg, 1, 1), threadgroup=(tg, 1, 1),
                     output_shapes=[(N, D)], output_dtypes=[x.dtype])
    return out.reshape(x.shape)


ok = True
for shape in [(4, 16), (3, 100), (2, 5, 512), (1, 4096)]:
    x = mx.random.normal(shape, key=mx.random.key(shape[-1]))
    weight = mx.random.uniform(0.5, 1.5, (shape[-1],), key=mx.random.key(7))

    # Reference
    expected = mx.fast.rms_norm(x, weight, eps=1e-5)

    # Custom
    actual = my_rmsnorm(x, weight, eps=1e-5)

    mx.eval(expected, actual)

    max_diff = mx.max(mx.abs(expected - actual)).item()
    print(f"shape {shape}: Max absolute difference: {max_diff:.2e}")
    assert mx.allclose(expected, actual, atol=1e-5), f"Mismatch: max diff {max_diff}"
    ok = ok and mx.allclose(expected, actual, atol=1e-5).item()

print("rms_norm kernel matches mx.fast.rms_norm:", ok)
sys.exit(0 if ok else 1)
