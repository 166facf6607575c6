"""Guide 004 (Comprehensive Guide to Using Metal in MLX), "5.1 Element-wise exp".

Runs as written and matches mx.exp. (The function builds the kernel object on every call,
against the guide's own "create once" advice; the compiled code is cached by source, so
only the first call compiles.)
"""
import sys

import mkpy as mx


def exp_elementwise(a: mx.array) -> mx.array:
    header = """#include <metal_stdlib>\nusing namespace metal;\n"""
    source = r"""
        uint tid = thread_position_in_grid.x;
        uint n = (uint)shape[0];
        if (tid >= n) return;
        out[tid] = exp(a[tid]);
    """
    ker = mx.fast.metal_kernel(
        name="exp1d", input_names=["a", "shape"], output_names=["out"],
        header=header, source=source, ensure_row_contiguous=True)
    n = int(a.size)
    shape = mx.array([n], dtype=mx.uint32)
    (y,) = ker(inputs=[a, shape], output_shapes=[a.shape], output_dtypes=[a.dtype],
               grid=( (n+255)//256*256, 1, 1), threadgroup=(256,1,1))
    return y


ok = True
for n in (1, 255, 1000, 70000):
    a = mx.random.uniform(-10, 10, (n,), key=mx.random.key(n))
    good = mx.allclose(exp_elementwise(a), mx.exp(a), rtol=1e-6).item()
    print(f"n={n}: matches mx.exp: {good}")
    ok = ok and good
a = mx.random.uniform(-4, 4, (8, 16), key=mx.random.key(0)).astype(mx.float16)
good = mx.allclose(exp_elementwise(a), mx.exp(a), rtol=1e-3).item()
print("2-D float16 input (n = a.size): matches mx.exp:", good)
ok = ok and good
print("exp_elementwise matches mx.exp:", ok)
sys.exit(0 if ok else 1)
