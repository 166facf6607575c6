"""Guide 002 (Production Error Handling for MLX Metal Kernels), "Errors Surface at mx.eval(),
Not at Kernel Call" and the `safe_kernel_call` logging pattern.

Both are right: the call only queues the kernel, the error comes at mx.eval. safe_kernel_call
evaluates inside its try, so it logs the failing kernel by name and re-raises. (mkpy's error
message also names the Python line that called the kernel.)
"""
import logging
import sys

import mkpy as mx

logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(levelname)s %(message)s")
results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


x = mx.arange(64, dtype=mx.float32)
call = dict(grid=(64, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(64,)], output_dtypes=[mx.float32])
kernel = mx.fast.metal_kernel(  # invalid: `y` is not declared
    name="invalid", input_names=["x"], output_names=["out"],
    source="uint i = thread_position_in_grid.x;\nout[i] = y[i];")

stage = "call"
try:
    out = kernel(inputs=[x], **call)   # No error yet — just queued
    stage = "eval"
    mx.eval(out)                     # Error happens HERE if kernel is invalid
    stage = "no error"
except RuntimeError:
    pass
report("the invalid kernel raised at mx.eval, not at the call", stage == "eval")

log = logging.getLogger(__name__)


def safe_kernel_call(name, kernel, **kwargs):
    log.debug(f"Dispatching kernel '{name}' grid={kwargs.get('grid')}")
    try:
        result = kernel(**kwargs)
        mx.eval(result)
        return result
    except RuntimeError as e:
        log.error(f"Kernel '{name}' failed: {e}")
        raise


good = mx.fast.metal_kernel(name="plus_one", input_names=["x"], output_names=["out"],
                            source="uint i = thread_position_in_grid.x;\nout[i] = x[i] + 1.0f;")
(out,) = safe_kernel_call("plus_one", good, inputs=[x], **call)
report("safe_kernel_call returns the evaluated outputs", mx.array_equal(out, x + 1).item())
try:
    safe_kernel_call("invalid", kernel, inputs=[x], **call)
    reraised = False
except RuntimeError as e:
    reraised = "undeclared identifier 'y'" in str(e)
report("safe_kernel_call logs the failing kernel and re-raises", reraised)

ok = all(results)
print("deferred errors behave as documented:", ok)
sys.exit(0 if ok else 1)
