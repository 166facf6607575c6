"""Guide 004 (Comprehensive Guide to Using Metal in MLX), "8) Debugging and Diagnostics":
`mlx.core.metal.start_capture()` / `stop_capture()` and "Start small: single thread".

On a Mac, start_capture(path) records a GPU trace for Xcode. mkpy has no GPU: it keeps MLX's
names and records what its CPU back-end runs in between (each kernel launch with its compile
and run times, grid, threadgroup and barriers, and each op) into a Chrome trace JSON at `path`,
which https://ui.perfetto.dev opens; mx.metal.capture_report() gives a table
(docs/debugging.md).
"""
import json
import os
import sys
import tempfile

import mkpy as mx

kernel = mx.fast.metal_kernel(name="one_thread", input_names=["x"], output_names=["out"],
                              source="out[0] = x[0] * 2.0f;")
path = os.path.join(tempfile.mkdtemp(), "kernel.json")
mx.metal.start_capture(path)
# Start small: single thread
(out,) = kernel(inputs=[mx.array([21.0])], grid=(1, 1, 1), threadgroup=(1, 1, 1),
                output_shapes=[(1,)], output_dtypes=[mx.float32])
mx.eval(out)
mx.metal.stop_capture()
print(mx.metal.capture_report())
with open(path) as f:
    events = json.load(f)["traceEvents"]
kernels = [e for e in events if e.get("cat") == "kernel"]
ok = out.item() == 42.0 and len(kernels) == 1 and kernels[0]["args"]["grid"] == [1, 1, 1]
print("the kernel ran and the capture recorded its launch:", ok)
sys.exit(0 if ok else 1)
