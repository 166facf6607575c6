"""Guide 000 (Troubleshooting MLX Metal Kernels), "Debugging Techniques": `verbose=True` and
"Print intermediate values via output buffers".

Both work as the guide says. `verbose=True` prints MLX's generated Metal source (the
signature built from input_names/output_names, then your body) when the kernel is *called*.
"""
import contextlib
import io
import sys

import mkpy as mx

N = 32
x = mx.linspace(-2, 2, N)

# Use verbose=True to inspect generated Metal source
kernel = mx.fast.metal_kernel(  # any one-output kernel; the guide leaves it undefined
    name="scale_kernel",
    input_names=["x"],
    output_names=["out"],
    source="""
    uint i = thread_position_in_grid.x;
    out[i] = (T)(x[i] * 2.0f);
    """,
)
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    out = kernel(
        inputs=[x],
        template=[("T", mx.float32)],
        grid=(N, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[(N,)],
        output_dtypes=[mx.float32],
        verbose=True,  # Prints the complete Metal source
    )
source_text = printed.getvalue()
print(source_text)
verbose_ok = ("[[kernel]]" in source_text and "const device float* x" in source_text
              and "device float* out" in source_text and "template <typename T>" in source_text
              and mx.array_equal(out[0], x * 2).item())
print("verbose=True printed the generated signature at call time:", verbose_ok)

# Print intermediate values via output buffers
kernel = mx.fast.metal_kernel(
    name="debug_kernel",
    input_names=["x"],
    output_names=["out", "debug"],
    source="""
    uint i = thread_position_in_grid.x;
    float val = (float)x[i];
    float result = metal::exp(val);
    out[i] = (T)result;
    debug[i] = val;  // Capture intermediate value
    """,
)

out, debug = kernel(
    inputs=[x],
    template=[("T", mx.float32)],
    grid=(N, 1, 1),
    threadgroup=(256, 1, 1),
    output_shapes=[(N,), (N,)],
    output_dtypes=[mx.float32, mx.float32],
)
mx.eval(out, debug)
print("Debug values:", debug[:10])
debug_ok = mx.array_equal(debug, x).item() and mx.allclose(out, mx.exp(x)).item()
print("debug buffer holds the inputs and out matches mx.exp:", debug_ok)

ok = verbose_ok and debug_ok
print("debugging techniques work as documented:", ok)
sys.exit(0 if ok else 1)
