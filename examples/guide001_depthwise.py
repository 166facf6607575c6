"""Guide 001 (MLX Metal Kernel Development Guide): "Example: Depthwise Convolution Kernel" and
the standalone check of "Testing Workflow".

The kernel body is correct; the launch is not:
1. `num_groups = mx.divide(...)` is float32 (mx.divide is true division). MLX 0.32 refuses a
   float32 grid entry with a TypeError ("incompatible function arguments"), and so does mkpy,
   with a hint (`//` or mx.floor_divide). Even as an integer it is a number of threadgroups
   where a number of threads belongs (point 2).
2. With mx.floor_divide the call is accepted, but `grid` counts threads (Metal's
   dispatchThreads), not threadgroups: grid=(num_groups, 1, 1) runs num_groups = 64 threads,
   MLX clamps the threadgroup to 64, and only the first 64 of 2 * 64 * 128 outputs are
   computed (the rest of `y` is whatever memory held).
3. grid=(total_threads, 1, 1) computes everything and matches the reference.
"""
import sys

import mkpy as mx

results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


_HEADER = """#include <metal_stdlib>
using namespace metal;
"""
_DEPTHWISE_KERNEL = None

_DEPTHWISE_SOURCE = r"""
    uint B = params[0];
    uint C = params[1];
    uint L = params[2];

    uint tid = thread_position_in_grid.x;
    uint total = B * C * L;
    if (tid >= total) return;

    uint b = tid / (C * L);
    uint rem = tid % (C * L);
    uint c = rem / L;
    uint t = rem % L;

    // Zero-pad access
    float v0 = (t >= 1) ? x[b * C * L + c * L + (t - 1)] : 0.0f;
    float v1 = x[b * C * L + c * L + t];
    float v2 = (t + 1 < L) ? x[b * C * L + c * L + (t + 1)] : 0.0f;

    float k0 = k[c * 3 + 0];
    float k1 = k[c * 3 + 1];
    float k2 = k[c * 3 + 2];

    // Fixed order for determinism
    float acc = v0 * k0;
    acc = fma(v1, k1, acc);
    acc = fma(v2, k2, acc);

    y[tid] = acc;
"""


def depthwise_conv_3tap(x, kernel):
    global _DEPTHWISE_KERNEL

    batch, channels, length = x.shape

    # Ensure float32
    x = x.astype(mx.float32)
    kernel = kernel.astype(mx.float32)

    if _DEPTHWISE_KERNEL is None:
        _DEPTHWISE_KERNEL = mx.fast.metal_kernel(
            name="depthwise3",
            input_names=["params", "x", "k"],
            output_names=["y"],
            header=_HEADER,
            source=_DEPTHWISE_SOURCE
        )

    # Params buffer
    params = mx.array([batch, channels, length], dtype=mx.uint32)

    # Grid calculation with MLX scalars
    batch_mx = mx.array(batch, dtype=mx.uint32)
    channels_mx = mx.array(channels, dtype=mx.uint32)
    length_mx = mx.array(length, dtype=mx.uint32)
    total_threads = mx.multiply(mx.multiply(batch_mx, channels_mx), length_mx)
    tpg = mx.array(256, dtype=mx.uint32)
    one = mx.array(1, dtype=mx.uint32)
    num_groups = mx.divide(mx.add(total_threads, mx.subtract(tpg, one)), tpg)
    grid = (num_groups, one, one)
    threadgroup = (tpg, one, one)

    (y,) = _DEPTHWISE_KERNEL(
        inputs=[params, x, kernel],
        output_shapes=[(batch, channels, length)],
        output_dtypes=[mx.float32],
        grid=grid,
        threadgroup=threadgroup
    )

    return y


def depthwise_conv_3tap_launch(x, kernel, grid_of, init_value=None):
    """The same function with only the grid changed: grid_of(total_threads, tpg, one)."""
    batch, channels, length = x.shape
    params = mx.array([batch, channels, length], dtype=mx.uint32)
    one = mx.array(1, dtype=mx.uint32)
    tpg = mx.array(256, dtype=mx.uint32)
    total_threads = mx.array(batch * channels * length, dtype=mx.uint32)
    extra = {} if init_value is None else {"init_value": init_value}
    (y,) = _DEPTHWISE_KERNEL(inputs=[params, x.astype(mx.float32), kernel.astype(mx.float32)],
                             output_shapes=[(batch, channels, length)], output_dtypes=[mx.float32],
                             grid=(grid_of(total_threads, tpg, one), one, one), threadgroup=(tpg, one, one),
                             **extra)
    return y


def reference(x, kernel):
    """Zero-padded 3-tap depthwise convolution with MLX ops."""
    xp = mx.pad(x, [(0, 0), (0, 0), (1, 1)])
    return (xp[..., :-2] * kernel[:, 0:1] + xp[..., 1:-1] * kernel[:, 1:2]
            + xp[..., 2:] * kernel[:, 2:3])


# The guide's "1. Test kernel standalone"
x = mx.random.normal((2, 64, 128), key=mx.random.key(0))
kernel = mx.random.normal((64, 3), key=mx.random.key(1))
expected = reference(x, kernel)

# 1. As written: the float32 grid entry is a TypeError, in MLX and in mkpy
try:
    depthwise_conv_3tap(x, kernel)
    err = None
except TypeError as e:
    err = str(e)
print("as written:", err)
report("as written, the float32 grid entry from mx.divide is refused (TypeError, hint: floor_divide)",
       err is not None and "floor_divide" in err)

# 2. floor_divide: an integer number of threadgroups passed as a number of threads
groups = lambda total, tpg, one: mx.floor_divide(mx.add(total, mx.subtract(tpg, one)), tpg)  # noqa: E731
y = depthwise_conv_3tap_launch(x, kernel, groups)
y_flat, ref_flat = y.reshape(-1), expected.reshape(-1)
n = groups(mx.array(x.size, dtype=mx.uint32), mx.array(256, dtype=mx.uint32), mx.array(1, dtype=mx.uint32)).item()
first_ok = mx.allclose(y_flat[:n], ref_flat[:n], atol=1e-5).item()
y_nan = depthwise_conv_3tap_launch(x, kernel, groups, init_value=float("nan"))
written = mx.sum(mx.logical_not(mx.isnan(y_nan))).item()
print(f"grid=({n}, 1, 1): {written} of {x.size} outputs written")
report(f"grid of {n} 'groups' runs {n} threads: only y.flat[:{n}] is computed", first_ok and written == n)

# 3. grid = total threads
y = depthwise_conv_3tap_launch(x, kernel, lambda total, tpg, one: total)
mx.eval(y)
ok3 = mx.allclose(y, expected, atol=1e-5).item()
if ok3:
    print("✓ Kernel works")
report("grid=(total_threads, 1, 1) matches the padded 3-tap reference", ok3)

ok = all(results)
print("depthwise kernel matches the reference once grid counts threads (the guide's launch is wrong):", ok)
sys.exit(0 if ok else 1)
