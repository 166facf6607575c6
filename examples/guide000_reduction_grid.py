"""Guide 000 (Troubleshooting MLX Metal Kernels), "Reduction kernel produces wrong results
(grid too small)".

The guide is right: `grid` counts threads (Metal's dispatchThreads), not threadgroups. A
row-reduction kernel that takes its row from `threadgroup_position_in_grid.x` needs
`grid = rows * threadgroup_size`. With `grid=(N, 1, 1)` and N < 256 there is a single
threadgroup (MLX clamps the threadgroup to the grid: N threads), so only row 0 is reduced.
"""
import sys

import mkpy as mx

N, D = 8, 1000
x = mx.random.uniform(shape=(N, D), key=mx.random.key(0))

# One threadgroup per row: each thread sums a strided slice of the row into threadgroup
# memory, then thread 0 adds the partial sums.
kernel = mx.fast.metal_kernel(
    name="row_sum",
    input_names=["x"],
    output_names=["out"],
    source="""
    uint row = threadgroup_position_in_grid.x;
    uint tid = thread_index_in_threadgroup;
    uint nthreads = threads_per_threadgroup.x;
    uint D = x_shape[1];
    threadgroup float partial[1024];
    float acc = 0.0f;
    for (uint j = tid; j < D; j += nthreads) {
        acc += x[row * D + j];
    }
    partial[tid] = acc;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid == 0) {
        float s = 0.0f;
        for (uint t = 0; t < nthreads; t++) s += partial[t];
        out[row] = s;
    }
    """,
)
common = dict(inputs=[x], output_shapes=[(N,)], output_dtypes=[mx.float32], init_value=0)
expected = mx.sum(x, axis=1)

# BAD: grid=(N, 1, 1) with tg=256 -> only 1 threadgroup for N < 256
# All threads think they're on row 0!
(bad,) = kernel(**common, grid=(N, 1, 1), threadgroup=(256, 1, 1))
# GOOD: One threadgroup per row
(good,) = kernel(**common, grid=(N * 256, 1, 1), threadgroup=(256, 1, 1))

print("grid=(N, 1, 1):      ", bad)
print("grid=(N * 256, 1, 1):", good)
print("mx.sum(x, axis=1):   ", expected)
bad_ok = (mx.allclose(bad[:1], expected[:1], rtol=1e-5).item()
          and mx.all(bad[1:] == 0).item())  # init_value=0: rows 1.. were never written
good_ok = mx.allclose(good, expected, rtol=1e-5).item()
print("grid=(N,1,1) reduces row 0 only:", bad_ok)
print("grid=(N*256,1,1) matches mx.sum(x, axis=1):", good_ok)
ok = bad_ok and good_ok
print("reduction grid example behaves as documented:", ok)
sys.exit(0 if ok else 1)
