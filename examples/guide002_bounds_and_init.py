"""Guide 002 (Production Error Handling for MLX Metal Kernels), "Defensive Kernel Patterns":
"Bounds Checking in Source" and "Safe Output Initialization".

* The bounds check uses `out_shape[0]`, which MLX never passes: shapes, strides and ndim are
  passed only for *inputs* (`x_shape`, ...). The guide's source fails to compile with "use of
  undeclared identifier 'out_shape'"; mkpy adds a hint. Guarding with `x_shape[0]` works.
* `init_value=0` is right: every output element is set before the kernel runs, so elements
  no thread writes read as 0.
"""
import sys

import mkpy as mx

results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


N, M = 100, 120
x = mx.linspace(-1, 1, N).astype(mx.float16)

# Bounds Checking in Source (the guide's Metal source, as written)
source = """
uint i = thread_position_in_grid.x;
if (i >= out_shape[0]) return;  // Guard excess threads
out[i] = (T)((float)x[i] * 2.0f);
"""
kernel = mx.fast.metal_kernel(name="bounds_out_shape", input_names=["x"], output_names=["out"], source=source)
try:
    mx.eval(kernel(inputs=[x], template=[("T", x.dtype)], grid=(128, 1, 1), threadgroup=(32, 1, 1),
                   output_shapes=[(N,)], output_dtypes=[x.dtype]))
    err = None
except RuntimeError as e:
    err = str(e)
print(err)
report("out_shape is undeclared (MLX passes no output shapes); mkpy hints why",
       err is not None and "undeclared identifier 'out_shape'" in err and "Hint:" in err)

# The same guard on the input's shape: a grid rounded up to 128 threads is safe.
kernel = mx.fast.metal_kernel(name="bounds_x_shape", input_names=["x"], output_names=["out"],
                              source=source.replace("out_shape", "x_shape"))
(out,) = kernel(inputs=[x], template=[("T", x.dtype)], grid=(128, 1, 1), threadgroup=(32, 1, 1),
                output_shapes=[(N,)], output_dtypes=[x.dtype])
report("guard on x_shape[0] with 128 threads matches x * 2", mx.array_equal(out, x * 2).item())

# Safe Output Initialization: M > N outputs, N threads.
out = kernel(
    inputs=[x],
    template=[("T", x.dtype)],
    grid=(N, 1, 1),
    threadgroup=(256, 1, 1),
    output_shapes=[(M,)],
    output_dtypes=[x.dtype],
    init_value=0,  # All output bytes zeroed before kernel executes
)
out = out[0]
report(f"init_value=0: out[:{N}] == x * 2 and out[{N}:] == 0",
       mx.array_equal(out[:N], x * 2).item() and mx.all(out[N:] == 0).item())

ok = all(results)
print("defensive patterns: out_shape fails as in MLX, x_shape guard and init_value work:", ok)
sys.exit(0 if ok else 1)
