"""Guide 000 (Troubleshooting MLX Metal Kernels), '"Grid size must be > 0"'.

MLX itself does not check the grid: it hands `grid=(0, 1, 1)` to Metal's dispatchThreads,
which launches nothing (or trips an assertion when Metal's API validation is on), leaving the
outputs as they were allocated. mkpy refuses a zero grid or threadgroup dimension with a
ValueError when the kernel is evaluated, and launches nothing. Either way the guide's fix is
right: return early for empty inputs and never launch.
"""
import sys

import mkpy as mx

kernel = mx.fast.metal_kernel(
    name="double",
    input_names=["x"],
    output_names=["out"],
    source="""
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * 2.0f;
    """,
)


def call(x):
    (out,) = kernel(inputs=[x], grid=(x.size, 1, 1), threadgroup=(256, 1, 1),
                    output_shapes=[x.shape], output_dtypes=[x.dtype])
    return out


# BAD: Empty input
x = mx.array([])
try:
    mx.eval(kernel(inputs=[x], grid=(0, 1, 1), threadgroup=(256, 1, 1),
                   output_shapes=[(0,)], output_dtypes=[mx.float32]))  # Error
    err = None
except ValueError as e:
    err = str(e)
print("unguarded launch:", err)


# FIX: Guard against empty inputs
def double(x):
    N = x.size
    if N == 0:
        return mx.array([], dtype=x.dtype)
    return call(x)


empty = double(x)
full = double(mx.arange(5, dtype=mx.float32))
ok = (err is not None and "must be positive" in err
      and empty.shape == (0,) and empty.dtype == mx.float32
      and mx.array_equal(full, mx.arange(5, dtype=mx.float32) * 2).item())
print("zero grid refused at eval; guarded wrapper returns an empty array and doubles a non-empty one:", ok)
sys.exit(0 if ok else 1)
