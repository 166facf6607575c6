"""What fails on a Mac fails here: C++ that Metal's compiler rejects, the error mkpy gives at
your own line, and the Metal way to write it (docs/kernels.md, "What fails on a Mac fails here").

mkpy compiles kernels with clang as C++, which would accept `double`, `printf` or a mutable
global. A kernel relying on that would break on a Mac, so mkpy refuses these constructs
itself, at eval (where MLX reports compile errors). Each case below shows the error and the
fix; the last one shows the documented opt-out for C++ you knowingly run only here.
"""
import sys

import mkpy as mx

results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


def run(name, source, header="", **kw):
    k = mx.fast.metal_kernel(name=name, input_names=["x"], output_names=["out"], source=source, header=header, **kw)
    (out,) = k(inputs=[x], output_shapes=[x.shape], output_dtypes=[mx.float32], grid=(x.size, 1, 1),
               threadgroup=(64, 1, 1))
    mx.eval(out)
    return out


def error_of(name, source, header=""):
    try:
        run(name, source, header)
    except RuntimeError as e:
        return str(e)
    return None


x = mx.linspace(0, 1, 64)

# --- double: Metal has no 64-bit floating point ----------------------------------------------
bad = """
uint i = thread_position_in_grid.x;
double acc = x[i];          // BAD: Metal does not support double
out[i] = float(acc * 2.0);
"""
err = error_of("twice_double", bad)
print("double:", err.splitlines()[0] if err else None)
report("`double` is refused at source line 3", err is not None and "<kernel twice_double source>:3:" in err
       and "Metal does not support `double`" in err)
good = """
uint i = thread_position_in_grid.x;
float acc = x[i];           // GOOD: float (or a float2 pair for extra precision)
out[i] = acc * 2.0;
"""
report("with float it matches x * 2", mx.allclose(run("twice_float", good), x * 2).item())

# --- printf and C headers: write debug values to an output instead -----------------------------
bad_header = "#include <stdio.h>\n"
bad = """
uint i = thread_position_in_grid.x;
printf("x[%u] = %f\\n", i, x[i]);   // BAD: no printf, no <stdio.h>
out[i] = x[i];
"""
err = error_of("debug_printf", bad, bad_header)
print("printf:", err.splitlines()[0] if err else None)
report("`#include <stdio.h>` is refused at header line 1", err is not None
       and "<kernel debug_printf header>:1:" in err and "Metal does not support `#include <stdio.h>`" in err)
good = """
uint i = thread_position_in_grid.x;
out[i] = x[i];   // GOOD: the value to inspect goes to an output (or a second, debug output)
"""
report("the debug value read back from the output matches x", mx.array_equal(run("debug_out", good), x).item())

# --- a mutable global: program-scope variables live in `constant` ----------------------------
bad_header = "#include <metal_stdlib>\nusing namespace metal;\nfloat scale = 3.0f;   // BAD: mutable global\n"
src = """
uint i = thread_position_in_grid.x;
out[i] = x[i] * scale;
"""
err = error_of("scale_global", src, bad_header)
print("global:", err.splitlines()[0] if err else None)
report("a mutable global is refused with Metal's message at header line 3", err is not None
       and "<kernel scale_global header>:3:" in err
       and "program scope variable must reside in constant address space" in err)
good_header = "#include <metal_stdlib>\nusing namespace metal;\nconstant float scale = 3.0f;   // GOOD\n"
report("a `constant` global matches x * 3", mx.allclose(run("scale_constant", src, good_header), x * 3).item())

# --- the opt-out, for C++ you knowingly run only on mkpy --------------------------------------
bad = """
uint i = thread_position_in_grid.x;
double acc = x[i];
out[i] = float(acc * 2.0);
"""
out = run("twice_double_cpp", bad, compile_options={"allow_non_metal": True})
report("compile_options={'allow_non_metal': True} runs the C++ (it would not compile on a Mac)",
       mx.allclose(out, x * 2).item())

ok = all(results)
print("Metal-only constructs are refused at the user's line, and each fix works:", ok)
sys.exit(0 if ok else 1)
