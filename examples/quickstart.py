"""Quick start: lazy arrays, then an MLX Metal kernel run on the CPU."""
import math

import mkpy as mx

a = mx.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
b = mx.exp(a) * 2 + 1          # nothing is computed yet
mx.eval(b)                      # ... until now
print("a:", a)
print("exp(a) * 2 + 1:", b)
print("dtype promotion: int32 array + 1.5 ->", (mx.array([1, 2]) + 1.5).dtype)
print("device:", mx.device_info()["device_name"])

# A Metal kernel, exactly as with MLX on a Mac: the body of the kernel function; mkpy generates
# the signature, compiles it with clang when the output is evaluated, and runs it on the CPU.
source = """
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp) * 2 + 1;
"""
kernel = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=source)
flat = a.reshape(-1)
(k_out,) = kernel(inputs=[flat], template=[("T", mx.float32)], grid=(flat.size, 1, 1), threadgroup=(256, 1, 1),
                  output_shapes=[flat.shape], output_dtypes=[flat.dtype])
print("the same with a Metal kernel:", k_out.reshape(a.shape))

expected = [[math.exp(v) * 2 + 1 for v in row] for row in a.tolist()]
ok = all(abs(g - e) <= 1e-5 * abs(e) for gr, er in zip(b.tolist(), expected) for g, e in zip(gr, er))
ok = ok and all(abs(g - e) <= 1e-5 * abs(e) for g, e in zip(k_out.tolist(), sum(expected, [])))
print("exp(a) * 2 + 1 matches Python's math.exp, with ops and with the Metal kernel:", ok)
raise SystemExit(0 if ok else 1)
