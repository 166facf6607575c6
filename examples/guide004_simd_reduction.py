"""Guide 004 (Comprehensive Guide to Using Metal in MLX), "3) Synchronization and Reductions"
and "2) Thread Indices ... Launch Sizes".

The guide gives the recipe in prose; here it is as a kernel, a row softmax: one threadgroup
per row (grid = rows * threadgroup size: grid counts threads); `simd_max` / `simd_sum` reduce
within a SIMD-group (32 lanes on Apple GPUs, and in mkpy); one partial per SIMD-group goes to
threadgroup memory; thread 0 combines them and broadcasts through threadgroup memory, with
`threadgroup_barrier(mem_flags::mem_threadgroup)` between the phases.
"""
import sys

import mkpy as mx

SOFTMAX_SOURCE = """
    uint row = threadgroup_position_in_grid.x;
    uint tid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint warp = simdgroup_index_in_threadgroup;
    uint nthreads = threads_per_threadgroup.x;
    uint nwarps = (nthreads + 31) / 32;
    uint D = x_shape[1];
    const device T* xr = x + row * D;
    device T* outr = out + row * D;
    threadgroup float partial[32];
    threadgroup float broadcast;

    // Phase 1: row maximum
    float m = -INFINITY;
    for (uint j = tid; j < D; j += nthreads) m = max(m, (float)xr[j]);
    m = simd_max(m);                       // within the SIMD-group
    if (lane == 0) partial[warp] = m;      // one partial per SIMD-group
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {                        // combine on thread 0 ...
        float r = partial[0];
        for (uint w = 1; w < nwarps; w++) r = max(r, partial[w]);
        broadcast = r;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float row_max = broadcast;             // ... then broadcast

    // Phase 2: sum of exponentials
    float s = 0.0f;
    for (uint j = tid; j < D; j += nthreads) s += metal::exp((float)xr[j] - row_max);
    s = simd_sum(s);
    if (lane == 0) partial[warp] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        float r = 0.0f;
        for (uint w = 0; w < nwarps; w++) r += partial[w];
        broadcast = r;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float inv = 1.0f / broadcast;

    // Phase 3: normalise
    for (uint j = tid; j < D; j += nthreads) outr[j] = (T)(metal::exp((float)xr[j] - row_max) * inv);
"""
kernel = mx.fast.metal_kernel(name="row_softmax", input_names=["x"], output_names=["out"], source=SOFTMAX_SOURCE)


def softmax_rows(x, tg=256):
    rows, D = x.shape
    (out,) = kernel(inputs=[x], template=[("T", x.dtype)], grid=(rows * tg, 1, 1), threadgroup=(tg, 1, 1),
                    output_shapes=[x.shape], output_dtypes=[x.dtype])
    return out


ok = True
for (rows, D), tg, dtype, atol in [((8, 1000), 256, mx.float32, 1e-6), ((5, 37), 32, mx.float32, 1e-6),
                                   ((3, 4096), 1024, mx.float32, 1e-6), ((4, 300), 96, mx.float16, 1e-3)]:
    x = (mx.random.normal((rows, D), key=mx.random.key(D)) * 4).astype(dtype)
    out = softmax_rows(x, tg)
    # The kernel computes in float32 and rounds once, as mx.softmax(..., precise=True) does
    # for float16 (without precise=True, MLX's float16 softmax rounds each step).
    good = mx.allclose(out, mx.softmax(x, axis=-1, precise=True), atol=atol).item()
    print(f"rows={rows} D={D} threadgroup={tg} {dtype}: matches mx.softmax: {good}")
    ok = ok and good
print("SIMD/threadgroup-memory softmax matches mx.softmax:", ok)
sys.exit(0 if ok else 1)
