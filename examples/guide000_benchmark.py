"""Guide 000 (Troubleshooting MLX Metal Kernels), "Performance Issues": "Benchmark doesn't
show improvement" and "Memory bandwidth calculation".

The timing advice holds as written: kernel calls are lazy, so a loop without mx.eval times
only the graph building. The bandwidth numbers printed here are the CPU's (mkpy runs the
kernel on the CPU); the guide's per-chip peaks are for Apple GPUs.
"""
import sys
import time

import mkpy as mx

N = 1 << 18
x = mx.random.normal((N,), key=mx.random.key(0))
mx.eval(x)
kernel = mx.fast.metal_kernel(  # created once and reused (the guide's point 2)
    name="exp_bench",
    input_names=["x"],
    output_names=["out"],
    source="""
    uint i = thread_position_in_grid.x;
    out[i] = metal::exp(x[i]);
    """,
)
call = dict(inputs=[x], grid=(N, 1, 1), threadgroup=(256, 1, 1),
            output_shapes=[(N,)], output_dtypes=[mx.float32])
mx.eval(kernel(**call))  # warm up: the first evaluation compiles the kernel

# BAD: Not forcing evaluation
t0 = time.perf_counter()
for _ in range(100):
    out = kernel(**call)
# All 100 calls are lazily queued but not timed
lazy_s = time.perf_counter() - t0

# GOOD: Force evaluation each iteration
for _ in range(100):
    out = kernel(**call)
    mx.eval(out)  # Forces synchronous execution

# EVEN BETTER: Use mx.synchronize() around the timing loop
mx.synchronize()
t0 = time.perf_counter()
for _ in range(100):
    out = kernel(**call)
    mx.eval(out)
mx.synchronize()
elapsed = time.perf_counter() - t0
print(f"100 calls without eval: {lazy_s * 1e3:.2f} ms (nothing ran); with eval: {elapsed * 1e3:.1f} ms")

# Memory bandwidth calculation
input_bytes = x.nbytes * 100
output_bytes = out[0].nbytes * 100
elapsed_seconds = elapsed
bytes_accessed = input_bytes + output_bytes  # Total bytes read + written
bandwidth_gbps = bytes_accessed / elapsed_seconds / 1e9

# Compare against your chip's theoretical max
# M1: 68 GB/s, M2: 100 GB/s, M3: 100 GB/s, M4: 120-546 GB/s
peak_bw = 120  # M4 base, adjust for your chip
efficiency = bandwidth_gbps / peak_bw * 100
print(f"Bandwidth: {bandwidth_gbps:.1f} GB/s ({efficiency:.1f}% of peak)")

ok = mx.allclose(out[0], mx.exp(x), rtol=1e-6).item() and elapsed > 0
print("benchmarked kernel matches mx.exp:", ok)
sys.exit(0 if ok else 1)
