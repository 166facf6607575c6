"""Guide 004 (Comprehensive Guide to Using Metal in MLX), "1) MLX Metal Kernel API: What
Actually Works": create once, reuse; header vs source; `<name>_shape`; parameter buffers.

Runs as written (the guide leaves `ceil_mul`, `x` and `m` undefined). The launch is right:
`grid` is the number of threads, rounded up to whole threadgroups, and the source guards
`tid >= m`. Its claim that MLX provides `<name>_shape` for inputs is right too (only when the
name appears in the source); there is no `<name>_shape` for outputs.
"""
import sys

import mkpy as mx


def ceil_mul(n, k):
    """n rounded up to a multiple of k."""
    return (n + k - 1) // k * k


results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


kernel = mx.fast.metal_kernel(
    name="my_kernel",
    input_names=["A", "shape"],
    output_names=["out"],
    header="#include <metal_stdlib>\nusing namespace metal;\n",
    source=r"""
        uint tid = thread_position_in_grid.x;
        uint m = (uint)shape[0];
        if (tid >= m) return;
        out[tid] = A[tid] + 1.0f;
    """,
    ensure_row_contiguous=True,
)
# Reused for several sizes without recompiling: the size travels in the `shape` buffer.
compiles_before = mx.metal.kernel_cache_info()["compiles"] if hasattr(mx.metal, "kernel_cache_info") else None
for m in (1000, 77, 4096):
    x = mx.random.normal((m,), key=mx.random.key(m))
    # Call (bind inputs/outputs, explicit launch sizes)
    (y,) = kernel(
        inputs=[x, mx.array([m], dtype=mx.uint32)],
        output_shapes=[(m,)],
        output_dtypes=[x.dtype],
        grid=(ceil_mul(m, 256), 1, 1),
        threadgroup=(256, 1, 1),
    )
    report(f"m={m}: kernel matches x + 1", mx.array_equal(y, x + 1).item())
if compiles_before is not None:  # mkpy's cache counters (not an MLX API)
    report("one compile served every size", mx.metal.kernel_cache_info()["compiles"] - compiles_before <= 1)

# `A_shape` instead of a shape buffer: MLX passes it because the source names it.
with_shape = mx.fast.metal_kernel(
    name="my_kernel_A_shape", input_names=["A"], output_names=["out"],
    source=r"""
        uint tid = thread_position_in_grid.x;
        if (tid >= A_shape[0]) return;
        out[tid] = A[tid] + 1.0f;
    """,
)
x = mx.random.normal((300,), key=mx.random.key(0))
(y,) = with_shape(inputs=[x], output_shapes=[(300,)], output_dtypes=[x.dtype],
                  grid=(ceil_mul(300, 256), 1, 1), threadgroup=(256, 1, 1))
report("A_shape[0] guard matches x + 1", mx.array_equal(y, x + 1).item())

# A transposed (non-contiguous) input is copied to row-contiguous order first
# (ensure_row_contiguous=True, the default).
t = mx.arange(12, dtype=mx.float32).reshape(3, 4).T
(y,) = kernel(inputs=[t, mx.array([12], dtype=mx.uint32)], output_shapes=[(4, 3)], output_dtypes=[mx.float32],
              grid=(256, 1, 1), threadgroup=(256, 1, 1))
report("a transposed input is seen in row-major order", mx.array_equal(y, t + 1).item())

ok = all(results)
print("create-once kernel with a shape buffer matches x + 1:", ok)
sys.exit(0 if ok else 1)
