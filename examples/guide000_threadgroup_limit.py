"""Guide 000 (Troubleshooting MLX Metal Kernels), "Threadgroup size exceeds maximum".

As in MLX, a threadgroup of more than 1024 threads is refused when the kernel is evaluated,
with a ValueError worded as MLX words it (MLX compares against the pipeline's
maxTotalThreadsPerThreadgroup, which is 1024 or less: register-hungry kernels can get a
lower limit on a real GPU). The guide's fix, clamping to 1024, works.
"""
import sys

import mkpy as mx

N = 4096
x = mx.arange(N, dtype=mx.float32)
kernel = mx.fast.metal_kernel(
    name="copy",
    input_names=["x"],
    output_names=["out"],
    source="""
    uint i = thread_position_in_grid.x;
    out[i] = x[i];
    """,
)
common = dict(inputs=[x], grid=(N, 1, 1), output_shapes=[(N,)], output_dtypes=[mx.float32])

# BAD: Threadgroup > 1024 (max on all Apple Silicon)
try:
    mx.eval(kernel(**common, threadgroup=(2048, 1, 1)))
    err = None
except ValueError as e:
    err = str(e)
print("threadgroup=(2048, 1, 1):", err)

# FIX: Clamp to max
desired_tg = 2048
tg = min(desired_tg, 1024)
(out,) = kernel(**common, threadgroup=(tg, 1, 1))
ok = (err is not None and "Thread group size (2048) is greater than" in err
      and mx.array_equal(out, x).item())
print("2048 threads refused at eval, clamped to 1024 matches the input:", ok)
sys.exit(0 if ok else 1)
