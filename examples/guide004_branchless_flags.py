"""Guide 004 (Comprehensive Guide to Using Metal in MLX), "4) Branchless Guards and 'where'
Equivalents" and "Recommended parameter passing" (small parameter and flag buffers).

The guide's two guard lines in one kernel, switched by a uint32 flags bitmask so one compiled
kernel serves every combination (bit 0: flush tiny values to zero, bit 1: clamp to +-cap),
with eps and cap in a float parameter buffer. Checked against mx.where / mx.clip.
"""
import sys

import mkpy as mx

kernel = mx.fast.metal_kernel(
    name="guards",
    input_names=["inp", "params", "flags"],
    output_names=["out"],
    source="""
    uint i = thread_position_in_grid.x;
    if (i >= inp_shape[0]) return;
    float x = inp[i];
    float eps = params[0];
    float cap = params[1];
    uint f = flags[0];
    float flushed = (fabs(x) < eps) ? 0.0f : x;
    x = (f & 1u) ? flushed : x;
    float clamped = fmin(fmax(x, -cap), cap);
    x = (f & 2u) ? clamped : x;
    out[i] = x;
    """,
)

eps, cap = 0.25, 2.0
x = mx.random.normal((1000,), key=mx.random.key(0)) * 2
params = mx.array([eps, cap], dtype=mx.float32)
ok = True
for f in range(4):
    (out,) = kernel(inputs=[x, params, mx.array([f], dtype=mx.uint32)], grid=(1024, 1, 1),
                    threadgroup=(256, 1, 1), output_shapes=[x.shape], output_dtypes=[x.dtype])
    ref = x
    if f & 1:
        ref = mx.where(mx.abs(ref) < eps, 0.0, ref)
    if f & 2:
        ref = mx.clip(ref, -cap, cap)
    good = mx.array_equal(out, ref).item()
    print(f"flags={f:02b}: matches mx.where/mx.clip: {good}")
    ok = ok and good
print("flag-switched branchless guards match mx.where and mx.clip:", ok)
sys.exit(0 if ok else 1)
