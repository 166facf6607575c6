"""Guide 001 (MLX Metal Kernel Development Guide): "Golden Rule", "No Python Arithmetic
Operators", "No Scalar Extraction", "Mistake: Python Integer Loop Indices" and
"Mistake: Assuming NumPy Broadcasting".

These sections are wrong about MLX:
* MLX overloads + - * / % ** and comparisons on arrays, exactly like the mx.add / mx.multiply
  spelling; the result is the same lazy graph node with the same dtype.
* Python scalars are "weak": `x * 2 + 1` on a float32 array stays float32. MLX has no implicit
  float64 promotion (there is no float64 on the GPU at all).
* `.item()`, `float()` and `if array:` evaluate the array and copy a value to Python. That is
  a synchronisation point (and, under mx.grad, a constant), but nothing is "destroyed": the
  array keeps its buffer and stays usable.
* Shapes are plain Python ints in MLX; `mx.array(x.shape[0])` loses nothing.
"""
import sys

import mkpy as mx

results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


# --- Golden Rule --------------------------------------------------------------------------------
# "WRONG - buffer destroyed"
x = mx.array([1, 2, 3])
val = x[0].item()  # GPU->CPU copy, graph break
y = mx.array(val)  # New buffer, original x connection lost
report("after x[0].item(), x is intact and usable", (x + 1).tolist() == [2, 3, 4])
report("mx.array(val) is an equal int32 scalar", y.dtype == mx.int32 and (y == x[0]).item())
# "CORRECT - stay in MLX"
x = mx.array([1, 2, 3])
y = x[0]  # Still an mx.array, lazy, same buffer family
report("x[0] is an mx.array", isinstance(y, mx.array) and y.item() == 1)

# --- No Python Arithmetic Operators -------------------------------------------------------------
x = mx.array([0.5, 1.5, -2.0, 3.25], dtype=mx.float32)
n = 3
# "WRONG - Python operators" (they are overloaded)
y_ops = x * 2 + 1  # Triggers float64 promotion, breaks lazy graph   <- neither happens
z_ops = x / n      # Python scalar division
# "CORRECT - Backend operations"
two = mx.array(2.0, dtype=mx.float32)
one = mx.array(1.0, dtype=mx.float32)
y = mx.add(mx.multiply(x, two), one)

n_mx = mx.array(n, dtype=mx.float32)
z = mx.divide(x, n_mx)
report("x * 2 + 1 == mx.add(mx.multiply(x, two), one), both float32",
       mx.array_equal(y_ops, y).item() and y_ops.dtype == y.dtype == mx.float32)
report("x / n == mx.divide(x, n_mx), both float32",
       mx.array_equal(z_ops, z).item() and z_ops.dtype == mx.float32)
report("%, **, unary - and comparisons are overloaded too",
       mx.array_equal(x % 2, mx.remainder(x, 2)).item() and mx.array_equal(x ** 2, mx.power(x, 2)).item()
       and mx.array_equal(-x, mx.negative(x)).item() and mx.array_equal(x > 1, mx.greater(x, 1)).item())

# --- No Scalar Extraction -----------------------------------------------------------------------
threshold = 1.0
# "WRONG - Graph breaks" (it works: the comparison is an mx.array, `if` evaluates it)
branch = None
if x.max() > threshold:  # .max() returns mx.array, comparison converts to Python
    branch = "taken"
report("`if x.max() > threshold:` works (x.max() > threshold is an mx.array of bool)",
       branch == "taken" and isinstance(x.max() > threshold, mx.array))
# "WRONG - Explicit extraction" (it works)
val = float(x[0])  # Destroys buffer connection
val2 = x[0].item()  # Forces GPU->CPU copy
report("float(x[0]) and x[0].item() give 0.5, x unchanged", val == val2 == 0.5 and x[0].item() == 0.5)
# "CORRECT - Stay in MLX"
threshold_mx = mx.array(threshold, dtype=x.dtype)
mask = mx.greater(x, threshold_mx)
result = mx.where(mask, x, mx.zeros_like(x))
report("mx.where(x > 1, x, 0) with operators equals the spelled-out version",
       mx.array_equal(mx.where(x > threshold, x, 0), result).item())

# --- Mistake: Python Integer Loop Indices ------------------------------------------------------------
channels = 4
for i in range(channels):  # OK - loop index
    pass
# "WRONG - tensor operations with Python scalars"
y = x * 0.5  # BAD - Python float    <- fine: float32 stays float32
report("x * 0.5 == mx.multiply(x, mx.array(0.5, dtype=mx.float32))",
       mx.array_equal(y, mx.multiply(x, mx.array(0.5, dtype=mx.float32))).item() and y.dtype == mx.float32)

# --- Mistake: Assuming NumPy Broadcasting -------------------------------------------------------------
# "WRONG - shape extraction loses buffer connection"
shape = x.shape
scale = mx.array(shape[0])  # New buffer, x connection lost   <- shapes are Python ints anyway
report("x.shape is a tuple of ints; mx.array(shape[0]) is a 0-d int32 array",
       shape == (4,) and scale.dtype == mx.int32 and scale.item() == 4)

ok = all(results)
print("MLX overloads operators and scalar extraction keeps arrays usable (the guide is wrong):", ok)
sys.exit(0 if ok else 1)
