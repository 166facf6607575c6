"""Guide 000 (Troubleshooting MLX Metal Kernels), "Metal Compilation Errors".

Every BAD/GOOD pair of the section, run for real. The guide's sources use an index `i`
that they never declare; each source here is prefixed with the one line that declares it
(`uint i = thread_position_in_grid.x;`), otherwise the snippets are as written.

Compile errors surface when the kernel is evaluated (mx.eval), as a RuntimeError that quotes
the compiler's diagnostics with the line numbers of your own `source`.
"""
import sys

import mkpy as mx

INDEX = "uint i = thread_position_in_grid.x;\n"
N = 64
x = mx.arange(N, dtype=mx.float32)
results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


def run(kernel, inputs, **extra):
    """Call and evaluate a one-output kernel: (output, None) or (None, error text)."""
    try:
        (out,) = kernel(inputs=inputs, grid=(N, 1, 1), threadgroup=(32, 1, 1),
                        output_shapes=[(N,)], output_dtypes=[mx.float32], **extra)
        mx.eval(out)
        return out, None
    except RuntimeError as e:
        return None, str(e)


def make(name, source, input_names=("x",), header=""):
    return mx.fast.metal_kernel(name=name, input_names=list(input_names), output_names=["out"],
                                source=source, header=header)


# --- "Missing semicolon" ------------------------------------------------------------------
# BAD: Missing semicolon
source = "out[i] = x[i] * 2.0f"
_, err = run(make("semicolon_bad", INDEX + source), [x])
print(err)
report("missing ';' is a compile error at eval", err is not None and "expected ';'" in err)
# GOOD
source = "out[i] = x[i] * 2.0f;"
out, _ = run(make("semicolon_good", INDEX + source), [x])
report("with the ';' the kernel matches x * 2", out is not None and mx.array_equal(out, x * 2).item())

# --- 'auto' ---------------------------------------------------------------------------------
# The guide calls `auto` "not always supported". The Metal Shading Language is C++14 based and
# `auto` always works in a kernel body; both versions compile and give the same result.
source = "auto val = x[i];"  # the guide's line, then a store so the kernel has an effect
out_auto, err = run(make("auto_val", INDEX + source + "\nout[i] = val;"), [x])
source = "float val = (float)x[i];"
out_float, _ = run(make("float_val", INDEX + source + "\nout[i] = val;"), [x])
report("'auto' compiles (the guide is wrong) and equals the explicit-type version",
       err is None and mx.array_equal(out_auto, out_float).item() and mx.array_equal(out_auto, x).item())

# --- CUDA-style functions ---------------------------------------------------------------------
PRELUDE = INDEX + "float val = x[i];\nushort offset = 1;\n"
source = "__shfl_xor_sync(0xffffffff, val, offset);"
_, err = run(make("cuda_shfl", PRELUDE + source + "\nout[i] = val;"), [x])
print(err)
report("__shfl_xor_sync is an undeclared identifier", err is not None and "__shfl_xor_sync" in err)
# GOOD (as the guide writes it): compiles, but the statement throws its result away, so `val`
# is unchanged. The value must be assigned: val = simd_shuffle_xor(val, offset);
source = "simd_shuffle_xor(val, offset);"
out_discard, _ = run(make("simd_shfl_discard", PRELUDE + source + "\nout[i] = val;"), [x])
source = "val = simd_shuffle_xor(val, offset);"
out_shfl, _ = run(make("simd_shfl", PRELUDE + source + "\nout[i] = val;"), [x])
partner = mx.arange(N, dtype=mx.uint32) ^ 1  # lane i reads lane i ^ 1
report("simd_shuffle_xor compiles; as written its result is discarded (out == x)",
       out_discard is not None and mx.array_equal(out_discard, x).item())
report("assigned, simd_shuffle_xor(val, 1) swaps neighbouring lanes",
       out_shfl is not None and mx.array_equal(out_shfl, partner.astype(mx.float32)).item())

# --- "Use of undeclared identifier" -----------------------------------------------------------
# BAD: 'scale' is not declared anywhere
kernel = mx.fast.metal_kernel(
    name="bad",
    input_names=["x"],
    output_names=["out"],
    source=INDEX + "out[i] = x[i] * scale;",  # Error: 'scale' undeclared
)
_, err = run(kernel, [x])
print(err)
report("'scale' is reported as an undeclared identifier",
       err is not None and "undeclared identifier 'scale'" in err)

# FIX Option 1: Add as input
kernel = mx.fast.metal_kernel(
    name="fix1",
    input_names=["x", "scale"],  # Pass scale as a 1-element array
    output_names=["out"],
    source=INDEX + "out[i] = x[i] * scale[0];",
)
out1, _ = run(kernel, [x, mx.array([2.0])])

# FIX Option 2: Use header for constants
kernel = mx.fast.metal_kernel(
    name="fix2",
    input_names=["x"],
    output_names=["out"],
    source=INDEX + "out[i] = x[i] * SCALE;",
    header="constant float SCALE = 2.0f;",
)
out2, _ = run(kernel, [x])
report("both fixes match x * 2", out1 is not None and out2 is not None
       and mx.array_equal(out1, x * 2).item() and mx.array_equal(out2, x * 2).item())

# --- "member reference base type 'uint' is not a structure or union" --------------------------
# BAD: thread_index_in_threadgroup is uint, not uint3
source = "uint tid = thread_index_in_threadgroup.x;"  # Error!
_, err = run(make("scalar_dot_x", source + "\nout[tid] = x[tid];"), [x])
print(err)
report("'.x' on a scalar attribute is the documented compile error",
       err is not None and "member reference base type 'uint'" in err
       and "is not a structure or union" in err)
# GOOD: Use directly (it's already a scalar)
source = "uint tid = thread_index_in_threadgroup;"
out, _ = run(make("scalar_ok", source + "\nout[thread_position_in_grid.x] = (float)tid;"), [x])
report("thread_index_in_threadgroup used directly", out is not None
       and mx.array_equal(out, (mx.arange(N) % 32).astype(mx.float32)).item())

# The guide's lists of scalar and vector attributes, checked in one kernel.
attrs = mx.fast.metal_kernel(
    name="attribute_kinds",
    input_names=["x"],
    output_names=["out"],
    source="""
    uint i = thread_position_in_grid.x;
    uint a = thread_index_in_threadgroup;      // uint
    uint b = thread_index_in_simdgroup;        // uint
    uint c = simdgroup_index_in_threadgroup;   // uint
    uint3 g = threadgroup_position_in_grid;    // uint3
    uint3 t = threads_per_threadgroup;         // uint3
    uint3 n = threads_per_grid;                // uint3
    out[i] = (float)(a + 1000 * b + 100000 * c + g.x + t.x + n.x);
    """,
)
tg = 16
(o,) = attrs(inputs=[x], grid=(N, 1, 1), threadgroup=(tg, 1, 1),
             output_shapes=[(N,)], output_dtypes=[mx.float32])
ii = mx.arange(N)
expect = (ii % tg) + 1000 * ((ii % tg) % 32) + 100000 * ((ii % tg) // 32) + ii // tg + tg + N
report("scalar/vector attribute lists are right", mx.array_equal(o, expect.astype(mx.float32)).item())

ok = all(results)
print("compile-error examples behave as documented (with the corrections above):", ok)
sys.exit(0 if ok else 1)
