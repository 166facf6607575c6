"""Guide 001 (MLX Metal Kernel Development Guide): "2. Compilation Pattern" and
"3. Grid/Threadgroup Must Use MLX Scalars in Tuples".

What MLX really does with `grid` and `threadgroup`:
* They are launch sizes read on the host: `tuple[int, int, int]`. An entry may be a Python
  int or anything with __index__, which for an mx.array means a 0-d *integer* array (it is
  evaluated and read, a synchronisation point, so MLX scalars buy nothing here). Python ints
  "break" nothing.
* `mx.divide` is true division: uint32 / uint32 gives float32. So the guide's
  `num_groups = mx.divide(...)` is a float32 array. MLX 0.32 refuses a float32 entry with a
  TypeError ("incompatible function arguments"), and so does mkpy, with a hint: use `//` or
  mx.floor_divide, which keep uint32 (what fails on a Mac fails here).
* `grid` counts *threads* (Metal's dispatchThreads), not threadgroups. A grid of `num_groups`
  runs num_groups threads; with (total + 255) // 256 only the first few elements are computed.
  The grid should be the total number of threads, e.g. (total, 1, 1).

The guide's snippet leaves `params`, `x`, `shape`, `num_groups`, `threads_per_group` and the
body undefined; here the body scales x by params[0].
"""
import sys

import mkpy as mx

results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


_KERNEL = None

_HEADER = """#include <metal_stdlib>
using namespace metal;
"""

_SOURCE = r"""
    // kernel body here
    uint i = thread_position_in_grid.x;
    if (i >= x_shape[0]) return;
    y[i] = x[i] * params[0];
"""

total = 1000
x = mx.linspace(-1, 1, total)
params = mx.array([3.0])
shape = total
expected = x * 3


def my_operation(x):
    global _KERNEL

    # Compile once on first use
    if _KERNEL is None:
        _KERNEL = mx.fast.metal_kernel(
            name="my_kernel",
            input_names=["params", "x"],
            output_names=["y"],
            header=_HEADER,
            source=_SOURCE
        )

    # Dispatch
    (result,) = _KERNEL(
        inputs=[params, x],
        output_shapes=[(shape,)],
        output_dtypes=[mx.float32],
        grid=(num_groups, mx.array(1, dtype=mx.uint32), mx.array(1, dtype=mx.uint32)),
        threadgroup=(threads_per_group, mx.array(1, dtype=mx.uint32), mx.array(1, dtype=mx.uint32))
    )
    return result


def written(num_threads):
    """How many outputs a launch of `num_threads` threads writes (outputs pre-filled with NaN)."""
    (y,) = _KERNEL(inputs=[params, x], output_shapes=[(shape,)], output_dtypes=[mx.float32],
                   grid=(num_threads, 1, 1), threadgroup=(256, 1, 1), init_value=float("nan"))
    return mx.sum(mx.logical_not(mx.isnan(y))).item()


# --- "WRONG - Python arithmetic": valid for MLX (ints), but a threadgroup count --------------
tpg = 256
grid = ((total + tpg - 1) // tpg, 1, 1)  # Python scalars break buffer connections  <- they don't
num_groups, threads_per_group = grid[0], tpg
y = my_operation(x)
report(f"Python-int grid {grid} is accepted; its {grid[0]} threads compute y[:{grid[0]}] only",
       mx.array_equal(y[:grid[0]], expected[:grid[0]]).item() and written(grid[0]) == grid[0])

# --- "CORRECT - MLX ops, MLX scalars in tuples" --------------------------------------------------
tpg = mx.array(256, dtype=mx.uint32)
one = mx.array(1, dtype=mx.uint32)
total_mx = mx.array(total, dtype=mx.uint32)
num_groups = mx.divide(mx.add(total_mx, mx.subtract(tpg, one)), tpg)
grid = (num_groups, one, one)  # MLX scalars in tuple - GOOD
threadgroup = (tpg, one, one)
threads_per_group = tpg
print("num_groups =", num_groups, "(mx.divide is true division)")
try:
    my_operation(x)   # BAD: a float32 grid entry; MLX raises TypeError here, and so does mkpy
    err = None
except TypeError as e:
    err = str(e)
print("float32 grid entry:", err)
report(f"float32 num_groups={num_groups.item()} is refused with a TypeError that suggests // or mx.floor_divide",
       num_groups.dtype == mx.float32 and err is not None and "floor_divide" in err)

# FIX: mx.floor_divide (or //) keeps uint32: accepted, but it is still a number of threadgroups.
num_groups = mx.floor_divide(mx.add(total_mx, mx.subtract(tpg, one)), tpg)
y = my_operation(x)
n = num_groups.item()
report(f"uint32 num_groups={n} is accepted and launches {n} threads (y[:{n}] only)",
       num_groups.dtype == mx.uint32 and mx.array_equal(y[:n], expected[:n]).item() and written(n) == n)

# --- What works: grid = total number of threads -----------------------------------------------------
num_groups = total_mx  # as an MLX uint32 scalar; the Python int `total` works the same
y = my_operation(x)
report("grid=(total, 1, 1) computes every element (matches x * 3)", mx.array_equal(y, expected).item())

ok = all(results)
print("grid entries are thread counts, not threadgroup counts (the guide is wrong):", ok)
sys.exit(0 if ok else 1)
