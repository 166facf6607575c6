"""Guide 001 (MLX Metal Kernel Development Guide): "1. Kernel Source is Body-Only" and
"Mistake: Using .metal Files Directly".

Right as the guide says: MLX writes the kernel signature itself from input_names and
output_names and pastes `source` in as the body. The guide's body uses `n`, which it never
declares; here it is a template argument (`template=[("n", N)]`), a compile-time constant.
A source with its own `kernel void ...(...) { }` fails to compile (a function definition
inside the generated function), and metal_kernel(source=...) alone is a TypeError: name,
input_names and output_names are required.
"""
import sys

import mkpy as mx

results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


N = 100
inp = mx.linspace(0, 1, N)
call = dict(inputs=[inp], template=[("n", N)], grid=(128, 1, 1), threadgroup=(64, 1, 1),
            output_shapes=[(N,)], output_dtypes=[mx.float32])

# CORRECT - body only
_KERNEL_SOURCE = r"""
    uint tid = thread_position_in_grid.x;
    if (tid >= n) return;
    out[tid] = inp[tid] * 2.0f;
"""
body = mx.fast.metal_kernel(name="times_two", input_names=["inp"], output_names=["out"], source=_KERNEL_SOURCE)
(out,) = body(**call)
report("body-only source matches inp * 2", mx.array_equal(out, inp * 2).item())

# WRONG - don't include function signature
_KERNEL_SOURCE = r"""
kernel void my_kernel(device float* out [[buffer(0)]]) {  // BAD
    out[0] = 1.0f;
}
"""
full = mx.fast.metal_kernel(name="my_kernel", input_names=["inp"], output_names=["out"], source=_KERNEL_SOURCE)
try:
    mx.eval(full(**call))
    err = None
except RuntimeError as e:
    err = str(e)
print(err)
report("a source with its own signature fails to compile", err is not None and "my_kernel" in err)

# Mistake: Using .metal Files Directly
# WRONG - can't load .metal files with full signatures
source = _KERNEL_SOURCE  # stands in for open("MyKernel.metal").read()
try:
    kernel = mx.fast.metal_kernel(source=source)  # Will fail
    err = None
except TypeError as e:
    err = str(e)
print("metal_kernel(source=...):", err)
report("metal_kernel(source=...) is a TypeError (name, input_names, output_names are required)", err is not None)

ok = all(results)
print("body-only kernels behave as documented:", ok)
sys.exit(0 if ok else 1)
