"""Guide 002 (Production Error Handling for MLX Metal Kernels), "Device Availability Check".

The factory runs as written. The guide leaves RMSNORM_SOURCE undefined; here it is one
threadgroup per row (the launch uses grid=(N * tg, 1, 1), threads, as it should): strided
sums of squares, simd_sum, partial sums in threadgroup memory, a barrier, then the scale.
The row length comes from `x_shape[1]` (MLX passes shapes for inputs whose `<name>_shape`
appears in the source).

mkpy reports mx.metal.is_available() == True because it runs Metal kernels (on the CPU), so
the kernel path is taken. With MLX on a machine without Metal it is False and the
mx.fast.rms_norm fallback is used.
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


def create_rmsnorm_op():
    """Factory: returns kernel-backed op if Metal is available, else fallback."""
    if not mx.metal.is_available():
        def fallback(x, weight, eps=1e-5):
            return mx.fast.rms_norm(x, weight, eps)
        return fallback

    kernel = mx.fast.metal_kernel(
        name="rmsnorm", input_names=["x", "w", "eps"], output_names=["out"],
        source=RMSNORM_SOURCE,
    )
    def kernel_op(x, weight, eps=1e-5):
        D = x.shape[-1]
        x_2d = x.reshape(-1, D)
        N = x_2d.shape[0]
        tg = min(256, max(32, (D // 32) * 32))
        eps_buf = mx.array([eps], dtype=mx.float32)
        return kernel(
            inputs=[x_2d, weight, eps_buf], template=[("T", x.dtype)],
            grid=(N * tg, 1, 1), threadgroup=(tg, 1, 1),
            output_shapes=[(N, D)], output_dtypes=[x.dtype],
        )[0].reshape(x.shape)
    return kernel_op

rmsnorm = create_rmsnorm_op()

print("mx.metal.is_available():", mx.metal.is_available(), "->", rmsnorm.__name__)
ok = True
for shape, dtype, atol in [((2, 3, 100), mx.float32, 1e-5), ((8, 512), mx.float32, 1e-5),
                           ((4, 1000), mx.float16, 1e-2), ((5, 64), mx.bfloat16, 6e-2)]:
    x = mx.random.normal(shape, key=mx.random.key(shape[-1])).astype(dtype)
    w = mx.random.uniform(0.5, 1.5, (shape[-1],), key=mx.random.key(3)).astype(dtype)
    out = rmsnorm(x, w)
    ref = mx.fast.rms_norm(x, w, 1e-5)
    good = out.dtype == dtype and out.shape == x.shape and mx.allclose(out, ref, atol=atol).item()
    print(f"{shape} {dtype}: max diff {mx.max(mx.abs(out - ref)).item():.2e}, ok {good}")
    ok = ok and good
print("rms_norm kernel matches mx.fast.rms_norm:", ok)
sys.exit(0 if ok else 1)
