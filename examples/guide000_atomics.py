"""Guide 000 (Troubleshooting MLX Metal Kernels), "Race Conditions: Multiple threads writing
to the same index".

A scatter-add. The guide's sources use an undeclared index `i`; each is prefixed with
`uint i = thread_position_in_grid.x;`. `grad` is an output, so it is zero-filled with
`init_value=0` before the kernel adds into it.

The plain `+=` is a data race: on a GPU, concurrent read-modify-writes lose updates. On the
CPU mkpy runs the threads of one threadgroup one after the other and threadgroups in parallel,
so the race shows less often, but it is still a race: only the atomic version is correct.
"""
import sys

import mkpy as mx

INDEX = "uint i = thread_position_in_grid.x;\n"
M, N = 16, 8192
indices = mx.random.randint(0, M, (N,), key=mx.random.key(1)).astype(mx.uint32)
values = mx.random.randint(-8, 8, (N,), key=mx.random.key(2)).astype(mx.float32)
# Reference: one-hot matrix times values, summed per bin (small integers: exact in any order).
one_hot = indices[:, None] == mx.arange(M, dtype=mx.uint32)[None, :]
expected = mx.sum(mx.where(one_hot, values[:, None], 0.0), axis=0)
call = dict(inputs=[indices, values], grid=(N, 1, 1), threadgroup=(256, 1, 1),
            output_shapes=[(M,)], output_dtypes=[mx.float32], init_value=0)

# BAD: Multiple threads write to grad[target] without atomics
source = "grad[indices[i]] += values[i];"  # Race condition!
racy = mx.fast.metal_kernel(name="scatter_add_racy", input_names=["indices", "values"],
                            output_names=["grad"], source=INDEX + source)
(grad_racy,) = racy(**call)
print("plain += happened to match this time:", mx.array_equal(grad_racy, expected).item(),
      "(a race: not guaranteed, and on a GPU it loses updates)")

# FIX: Use atomic operations
kernel = mx.fast.metal_kernel(
    name="scatter_add_atomic",
    input_names=["indices", "values"],
    output_names=["grad"],
    source=INDEX + """
    atomic_fetch_add_explicit(
        (device atomic<float>*)&grad[indices[i]],
        (float)values[i],
        memory_order_relaxed
    );
    """,
    atomic_outputs=True,
)
(grad,) = kernel(**call)
ok = mx.array_equal(grad, expected).item()
print("atomic scatter-add matches the one-hot reference:", ok)
sys.exit(0 if ok else 1)
