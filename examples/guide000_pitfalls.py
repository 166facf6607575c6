"""Guide 000 (Troubleshooting MLX Metal Kernels), "Common Pitfalls": "Float16 precision loss"
and "Integer overflow in index computation".

Both pitfalls are real. The guide's sources are fragments (`for (...)`, `...`); the loops are
filled in minimally: sum every element of the float16 input `x`, write the sum to out[0].
"""
import sys

import mkpy as mx

results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


# --- Float16 precision loss -------------------------------------------------------------------
x = mx.ones((4096,), dtype=mx.float16)
call = dict(inputs=[x], template=[("T", mx.float16)], grid=(1, 1, 1), threadgroup=(1, 1, 1),
            output_shapes=[(1,)], output_dtypes=[mx.float16])

# BAD: Accumulating in float16
source = "half sum = 0.0h; for (uint i = 0; i < x_shape[0]; i++) sum += x[i]; out[0] = sum;"
(bad,) = mx.fast.metal_kernel(name="sum_half", input_names=["x"], output_names=["out"], source=source)(**call)

# GOOD: Accumulate in float32, cast at the end
source = "float sum = 0.0f; for (uint i = 0; i < x_shape[0]; i++) sum += (float)x[i]; out[0] = (T)sum;"
(good,) = mx.fast.metal_kernel(name="sum_float", input_names=["x"], output_names=["out"], source=source)(**call)

print("sum of 4096 float16 ones: half accumulator", bad.item(), "| float accumulator", good.item(),
      "| mx.sum", mx.sum(x).item())
report("a half accumulator stalls at 2048 (2048 + 1 rounds back to 2048)", bad.item() == 2048)
report("a float accumulator matches mx.sum", good.item() == mx.sum(x).item() == 4096)

# --- Integer overflow in index computation --------------------------------------------------------
D = 8
rows = 4
call = dict(inputs=[mx.zeros((rows, D))], template=[("D", D)], grid=(rows, 1, 1), threadgroup=(1, 1, 1),
            output_shapes=[(rows,)])
# BAD: uint overflow for negative values
source = "uint row = threadgroup_position_in_grid.x;\n"
source += "uint idx = row * D - 1;"  # Underflow if row*D == 0!
source += "\nout[row] = idx;"
(bad,) = mx.fast.metal_kernel(name="idx_uint", input_names=["x"], output_names=["out"], source=source)(
    **call, output_dtypes=[mx.uint32])
# GOOD: Use int for indices that can be negative
source = "uint row = threadgroup_position_in_grid.x;\n"
source += "int idx = (int)row * (int)D - 1;"
source += "\nout[row] = idx;"
(good,) = mx.fast.metal_kernel(name="idx_int", input_names=["x"], output_names=["out"], source=source)(
    **call, output_dtypes=[mx.int32])
print("row * D - 1 for rows 0..3: as uint", bad.tolist(), "| as int", good.tolist())
report("uint wraps to 4294967295 at row 0", bad.tolist() == [4294967295, 7, 15, 23])
report("int gives -1", good.tolist() == [-1, 7, 15, 23])

ok = all(results)
print("pitfall examples behave as documented:", ok)
sys.exit(0 if ok else 1)
