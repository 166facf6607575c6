"""Guide 004 (Comprehensive Guide to Using Metal in MLX), "12) Integration With Compiled MLX".

As the guide says: mx.compile traces a function that drives a custom kernel and MLX ops; the
kernel's body is untouched (it is one opaque node in the compiled graph), the element-wise
MLX ops around it can be fused. Shapes must stay stable: a new shape re-traces.
"""
import sys

import mkpy as mx

kernel = mx.fast.metal_kernel(
    name="scaled_exp", input_names=["x", "scale"], output_names=["out"],
    source="""
    uint i = thread_position_in_grid.x;
    out[i] = metal::exp(x[i]) * scale[0];
    """,
)


def step(x, scale):
    (y,) = kernel(inputs=[x, scale], grid=(x.size, 1, 1), threadgroup=(256, 1, 1),
                  output_shapes=[x.shape], output_dtypes=[x.dtype])
    return mx.tanh(y) * 0.5 + x  # MLX ops around the kernel


compiled_step = mx.compile(step)

x = mx.random.normal((4096,), key=mx.random.key(0))
scale = mx.array([0.25])
eager = step(x, scale)
ok = True
for _ in range(3):  # the first call traces, later calls reuse the compiled graph
    out = compiled_step(x, scale)
    ok = ok and mx.allclose(out, eager, rtol=1e-6).item()
# the kernel's metal::exp and mx.exp are different float32 approximations (about
# 1 ulp apart), and `tanh(y) * 0.5 + x` cancels near zero: compare with an atol
reference = mx.tanh(mx.exp(x) * 0.25) * 0.5 + x
ok = ok and mx.allclose(out, reference, rtol=1e-6, atol=1e-6).item()
print("mx.compile(step) with a Metal kernel inside matches the eager function and MLX ops:", ok)
sys.exit(0 if ok else 1)
