"""Guide 000 (Troubleshooting MLX Metal Kernels), '"Invalid type" or template errors'.

The guide says bfloat16 kernels are "not supported" on M1/M2 and falls back to float16 there
through an undefined `supports_bf16()`. That is not MLX's behaviour: MLX's Metal kernels
support bfloat16 on every Apple GPU (where the GPU has no native bfloat, MLX's headers emulate
it), so `template=[("T", mx.bfloat16)]` just works. mkpy runs it too (on the CPU).
"""
import sys

import mkpy as mx


def supports_bf16():
    # The guide leaves this undefined. With MLX the honest answer is always True.
    return True


kernel = mx.fast.metal_kernel(
    name="scale_bf16",
    input_names=["x"],
    output_names=["out"],
    source="""
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * T(2) + T(1);
    """,
)

# FIX: Check device support  (the guide's snippet, made runnable)
dtype = mx.float16
if mx.metal.is_available():
    # bfloat16 requires M3+ (Apple GPU family 9)   <- the guide's claim; see the docstring
    # Fall back to float16 on older chips
    dtype = mx.bfloat16 if supports_bf16() else mx.float16

bf16_array = mx.linspace(-4, 4, 1000).astype(dtype)
(out,) = kernel(inputs=[bf16_array], template=[("T", mx.bfloat16)], grid=(bf16_array.size, 1, 1),
                threadgroup=(256, 1, 1), output_shapes=[bf16_array.shape], output_dtypes=[mx.bfloat16])
expected = bf16_array * 2 + 1  # MLX's own bfloat16 arithmetic
ok = out.dtype == mx.bfloat16 and mx.array_equal(out, expected).item()
print("dtype used:", dtype)
print("bfloat16 kernel matches bfloat16 x * 2 + 1 (bfloat16 works, whatever the chip):", ok)
sys.exit(0 if ok else 1)
