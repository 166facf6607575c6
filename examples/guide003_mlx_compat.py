"""Guide 003 (Triton Metal Backend Troubleshooting Guide), "Check MLX Compatibility".

The only snippet of guide 003 that is plain MLX code (the rest is the triton_metal package,
which does not apply to mkpy). It fails on MLX as written: MLX has no
`mx.get_default_device()`; the function is `mx.default_device()`. The rest runs.
(mkpy reports the GPU as its default device: it runs MLX's GPU-side API, Metal kernels
included, on the CPU.)
"""
import sys

import mkpy as mx

# Check MLX version
print(f"MLX version: {mx.__version__}")

# Verify MLX device
try:
    print(f"MLX device: {mx.get_default_device()}")
    missing = False
except AttributeError as e:
    print("mx.get_default_device():", e)
    missing = True
print(f"MLX device: {mx.default_device()}")

# Run basic MLX test
a = mx.array([1, 2, 3])
b = a + 1
mx.eval(b)
print("MLX basic test passed")

ok = missing and b.tolist() == [2, 3, 4] and isinstance(mx.__version__, str)
print("compat check runs once get_default_device is spelled default_device:", ok)
sys.exit(0 if ok else 1)
