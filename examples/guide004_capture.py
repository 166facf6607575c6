"""Guide 004 (Comprehensive Guide to Using Metal in MLX), "8) Debugging and Diagnostics":
`mlx.core.metal.start_capture()` / `stop_capture()` and "Start small: single thread".

start_capture(path) records a GPU trace for Xcode. There is no GPU trace to take on a machine
without Metal: MLX's CPU-only build keeps both functions and they do nothing (no file is
written). mkpy runs kernels on the CPU, so it does the same; the kernel in between runs as
usual.
"""
import os
import sys
import tempfile

import mkpy as mx

kernel = mx.fast.metal_kernel(name="one_thread", input_names=["x"], output_names=["out"],
                              source="out[0] = x[0] * 2.0f;")
path = os.path.join(tempfile.mkdtemp(), "kernel.gputrace")
mx.metal.start_capture(path)
# Start small: single thread
(out,) = kernel(inputs=[mx.array([21.0])], grid=(1, 1, 1), threadgroup=(1, 1, 1),
                output_shapes=[(1,)], output_dtypes=[mx.float32])
mx.eval(out)
mx.metal.stop_capture()
ok = out.item() == 42.0 and not os.path.exists(path)
print("capture calls are accepted without a GPU (no trace written); the kernel ran:", ok)
sys.exit(0 if ok else 1)
