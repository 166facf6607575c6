"""Guide 000 (Troubleshooting MLX Metal Kernels), "Wrong output shape / size" and
"Common Pitfalls: Forgetting bounds checking".

Both fixes in the guide guard with `out_shape[0]`. MLX never passes shapes for outputs: it
passes `<name>_shape`, `<name>_strides` and `<name>_ndim` only for *inputs* whose names
appear in the source. So the guide's fixes fail to compile, with "use of undeclared
identifier 'out_shape'" (mkpy adds a hint saying why). Guard with an input's shape
(`x_shape[0]`), or pass the size as an input or a template argument.
"""
import sys

import mkpy as mx

results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


def compile_error(kernel, **call):
    try:
        mx.eval(kernel(**call))
    except RuntimeError as e:
        return str(e)
    return None


x = mx.arange(100, dtype=mx.float32)

# --- Wrong output shape / size --------------------------------------------------------------
double = mx.fast.metal_kernel(
    name="double", input_names=["x"], output_names=["out"],
    source="""
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * 2.0f;
    """,
)
# BAD: Grid doesn't match output shape
(out,) = double(
    inputs=[x],
    grid=(100, 1, 1),
    output_shapes=[(200,)],  # Mismatch! Only 100 threads write
    output_dtypes=[mx.float32],
    threadgroup=(32, 1, 1),
)
# The extra elements in out[100:200] will be uninitialized garbage (true: MLX allocates
# outputs without clearing them). The first 100 are right:
report("grid=(100,) writes out[:100] correctly", mx.array_equal(out[:100], x * 2).item())
# Seen with init_value=nan, which fills the output before the kernel runs:
(seen,) = double(inputs=[x], grid=(100, 1, 1), output_shapes=[(200,)], output_dtypes=[mx.float32],
                 threadgroup=(32, 1, 1), init_value=float("nan"))
report("out[100:200] is never written", mx.all(mx.isnan(seen[100:])).item())

# FIX: Match grid to output, or use bounds checking in source   (the guide's source)
source = """
uint i = thread_position_in_grid.x;
if (i < out_shape[0]) {
    out[i] = x[i] * 2.0f;
}
"""
guarded = mx.fast.metal_kernel(name="guarded", input_names=["x"], output_names=["out"], source=source)
err = compile_error(guarded, inputs=[x], grid=(200, 1, 1), threadgroup=(32, 1, 1),
                    output_shapes=[(200,)], output_dtypes=[mx.float32])
print(err)
report("the guide's out_shape fix does not compile (MLX passes no output shapes)",
       err is not None and "undeclared identifier 'out_shape'" in err and "Hint:" in err)

# What works: the grid covers the output, the guard uses the input's shape, init_value fills
# the rest.
source = """
uint i = thread_position_in_grid.x;
if (i < x_shape[0]) {
    out[i] = x[i] * 2.0f;
}
"""
fixed = mx.fast.metal_kernel(name="guarded_x_shape", input_names=["x"], output_names=["out"], source=source)
(out,) = fixed(inputs=[x], grid=(200, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(200,)],
               output_dtypes=[mx.float32], init_value=0)
report("guard on x_shape[0] + init_value=0 matches concatenate([x * 2, zeros(100)])",
       mx.array_equal(out, mx.concatenate([x * 2, mx.zeros(100)])).item())

# --- Forgetting bounds checking ----------------------------------------------------------------
# BAD: No bounds check -> out-of-bounds write
source = "out[thread_position_in_grid.x] = x[thread_position_in_grid.x];"
# Crashes if grid > array size. (On a GPU it may corrupt memory or fault; on the CPU it
# writes past the buffer just the same, so it is only run here with grid == size.)
copy = mx.fast.metal_kernel(name="copy_unchecked", input_names=["x"], output_names=["out"], source=source)
(out,) = copy(inputs=[x], grid=(100, 1, 1), threadgroup=(32, 1, 1),
              output_shapes=[(100,)], output_dtypes=[mx.float32])
report("without a check it is fine only while grid == size", mx.array_equal(out, x).item())

# GOOD: Check bounds   (the guide's source: out_shape again)
source = """
uint i = thread_position_in_grid.x;
if (i < out_shape[0]) {
    out[i] = x[i];
}
"""
checked = mx.fast.metal_kernel(name="copy_checked", input_names=["x"], output_names=["out"], source=source)
err = compile_error(checked, inputs=[x], grid=(128, 1, 1), threadgroup=(32, 1, 1),
                    output_shapes=[(100,)], output_dtypes=[mx.float32])
report("the guide's GOOD version does not compile either", err is not None and "out_shape" in err)
# With the input's shape, a grid rounded up to whole threadgroups is safe:
checked = mx.fast.metal_kernel(name="copy_checked_x", input_names=["x"], output_names=["out"],
                               source=source.replace("out_shape", "x_shape"))
(out,) = checked(inputs=[x], grid=(128, 1, 1), threadgroup=(32, 1, 1),
                 output_shapes=[(100,)], output_dtypes=[mx.float32])
report("guard on x_shape[0] with grid=128 > 100 copies x", mx.array_equal(out, x).item())

ok = all(results)
print("bounds-check examples behave as MLX does (the guide's out_shape is wrong):", ok)
sys.exit(0 if ok else 1)
