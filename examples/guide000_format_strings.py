"""Guide 000 (Troubleshooting MLX Metal Kernels), "Python format strings vs Metal braces".

The guide labels its f-string "BAD", but with the braces doubled (as written) the f-string is
correct: it produces single braces. The real mistake is a *single* brace inside an f-string or
a .format() template, which Python rejects before Metal sees anything. All three of the
guide's sources compile and give the same result.

The fragments treat `x` as a value; here the input is named `inp` and each source is
prefixed with `uint i = thread_position_in_grid.x; float x = inp[i];`. Outputs start at zero
(`init_value=0`), so each kernel computes max(x, 0).
"""
import sys

import mkpy as mx

PREFIX = "uint i = thread_position_in_grid.x;\nfloat x = inp[i];\n"
inp = mx.linspace(-3, 3, 64)
expected = mx.maximum(inp, 0)
results = []


def relu(name, source):
    kernel = mx.fast.metal_kernel(name=name, input_names=["inp"], output_names=["out"], source=PREFIX + source)
    (out,) = kernel(inputs=[inp], template=[("T", mx.float32)], grid=(64, 1, 1), threadgroup=(64, 1, 1),
                    output_shapes=[(64,)], output_dtypes=[mx.float32], init_value=0)
    return out


# "BAD": Metal braces conflict with Python format
source = f"if (x > 0) {{ out[i] = x; }}"  # Need double braces
print("the f-string gives:", repr(source))
results.append(source == "if (x > 0) { out[i] = x; }")
results.append(mx.array_equal(relu("fstring", source), expected).item())

# GOOD: Use .format() with double braces
source = """
if (x > 0) {{
    out[i] = ({T})x;
}}
""".format(T="float")
results.append(mx.array_equal(relu("format", source), expected).item())

# OR: Use template parameter instead of format strings
source = """
if (x > 0) {
    out[i] = (T)x;  // T comes from template=[("T", dtype)]
}
"""
results.append(mx.array_equal(relu("template", source), expected).item())

# The actual pitfall: a single brace in a .format() template.
try:
    "if (x > 0) { out[i] = ({T})x; }".format(T="float")
    results.append(False)
except (KeyError, ValueError, IndexError) as e:
    print("single braces in .format():", type(e).__name__, e)
    results.append(True)

ok = all(results)
print("all three sources compile and match mx.maximum(x, 0); single braces fail in Python:", ok)
sys.exit(0 if ok else 1)
