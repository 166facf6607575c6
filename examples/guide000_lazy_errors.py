"""Guide 000 (Troubleshooting MLX Metal Kernels), "Lazy Evaluation and Error Surfacing".

As the guide says, calling a kernel only queues it: a compile error surfaces at mx.eval (or
anything else that evaluates), and the traceback points there. mkpy's RuntimeError also names
the Python file:line where the kernel was *called*, so the bug is found without the
eval-after-each-kernel pattern (which still works). Small correction: verbose=True prints
when the kernel is called, not when it is created with metal_kernel() (the heading says
"at Creation Time", the text says "when called").
"""
import contextlib
import io
import os
import sys
import traceback

import mkpy as mx

results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


x = mx.arange(16, dtype=mx.float32)
call = dict(grid=(16, 1, 1), threadgroup=(16, 1, 1), output_shapes=[(16,)], output_dtypes=[mx.float32])
my_kernel = mx.fast.metal_kernel(  # a bug: `inp` is not an input name (the input is `x`)
    name="my_kernel", input_names=["x"], output_names=["out"],
    source="uint i = thread_position_in_grid.x;\nout[i] = inp[i] + 1.0f;")

# --- The Confusing Traceback ----------------------------------------------------------------
# Line 10: kernel with a bug (wrong variable name)
out = my_kernel(inputs=[x], **call)[0]  # (a kernel call returns a list of outputs)
call_line = sys._getframe().f_lineno - 1
report("calling the broken kernel raised nothing (it is only queued)", True)

# Line 20: some other work
y = mx.add(out, 1.0)

# Line 30: error surfaces HERE, not at line 10
try:
    mx.eval(y)
    err, frames = None, []
except RuntimeError as e:
    err = str(e)
    frames = traceback.extract_tb(e.__traceback__)
# RuntimeError: ... Failed to compile Metal kernel ...
print(err)
report("the error surfaces at mx.eval(y), and the traceback points there",
       err is not None and "mx.eval(y)" in (frames[-1].line or ""))
report("mkpy's message also names the line that called the kernel",
       err is not None and f"{os.path.basename(__file__)}:{call_line}" in err)
try:
    mx.eval(out)
    again = False
except RuntimeError:
    again = True
report("evaluating `out` again raises again (a failed kernel stays failed)", again)

# --- Debugging Pattern: Eval After Each Kernel ----------------------------------------------
fixed = mx.fast.metal_kernel(
    name="my_kernel_fixed", input_names=["x"], output_names=["out"],
    source="uint i = thread_position_in_grid.x;\nout[i] = x[i] + 1.0f;")
another_kernel = mx.fast.metal_kernel(
    name="another_kernel", input_names=["x"], output_names=["out"],
    source="uint i = thread_position_in_grid.x;\nout[i] = x[i] * 2.0f;")
# Debug mode: eval after each kernel to get accurate error locations
(out,) = fixed(inputs=[x], **call)
mx.eval(out)  # If the kernel has a bug, error surfaces HERE

(out2,) = another_kernel(inputs=[out], **call)
mx.eval(out2)  # Isolates errors to the specific kernel
report("eval-after-each-kernel chain gives (x + 1) * 2", mx.array_equal(out2, (x + 1) * 2).item())
# Without the intermediate mx.eval the result is the same. (MLX does not fuse custom kernels
# with anything, so removing the evals saves synchronisations, not fusion.)
(lazy2,) = another_kernel(inputs=[fixed(inputs=[x], **call)[0]], **call)
report("the same chain without intermediate evals", mx.array_equal(lazy2, out2).item())

# --- verbose=True prints when the kernel is called ------------------------------------------
events = []
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    out = my_kernel(inputs=[x], **call, verbose=True)[0]
events.append("printed" if "my_kernel" in printed.getvalue() else "nothing printed")
# ^^^ Metal source printed here
try:
    mx.eval(out)
except RuntimeError:
    events.append("error")
# ^^^ Compilation error surfaces here (if any)
report("verbose source printed at the call, the error came at eval", events == ["printed", "error"])

ok = all(results)
print("lazy error surfacing behaves as documented:", ok)
sys.exit(0 if ok else 1)
