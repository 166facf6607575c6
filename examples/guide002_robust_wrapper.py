"""Guide 002 (Production Error Handling for MLX Metal Kernels), "Graceful Degradation Pattern"
(RobustKernelOp and its usage).

RobustKernelOp runs as written. What it catches and what it cannot:
* A kernel that fails to compile is caught on the first call, because validation calls
  mx.eval inside the try.
* A kernel that gives wrong numbers is caught by the comparison (here: the classic
  grid=(rows, 1, 1) bug, which reduces row 0 only).
* After validation, `return self._kernel_fn(...)` only *queues* the kernel: errors raised at
  evaluation time (a compile error for a new template, a threadgroup over 1024 threads for a
  new shape) surface later at the caller's mx.eval, outside the try, and the fallback is never
  used for them. (Also: a NaN difference compares False with `>`, so NaN outputs would pass
  validation.)
"""
import sys

import mkpy as mx

RMSNORM_SOURCE = """
    uint row = threadgroup_position_in_grid.x;
    uint tid = thread_index_in_threadgroup;
    uint lane = thread_index_in_simdgroup;
    uint sg = simdgroup_index_in_threadgroup;
    uint nthreads = threads_per_threadgroup.x;
    uint D = x_shape[1];
    threadgroup float partial[32];

    float acc = 0.0f;
    for (uint j = tid; j < D; j += nthreads) {
        float v = (float)x[row * D + j];
        acc += v * v;
    }
    acc = simd_sum(acc);
    if (lane == 0) partial[sg] = acc;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float p = (lane < (nthreads + 31) / 32) ? partial[lane] : 0.0f;
        p = simd_sum(p);
        if (lane == 0) partial[0] = p;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float scale = metal::rsqrt(partial[0] / float(D) + eps[0]);
    for (uint j = tid; j < D; j += nthreads) {
        out[row * D + j] = (T)((float)x[row * D + j] * scale * (float)w[j]);
    }
"""


class RobustKernelOp:
    """Wraps a kernel with automatic fallback and one-time validation."""

    def __init__(self, kernel_fn, fallback_fn, atol=1e-3):
        self._kernel_fn = kernel_fn
        self._fallback_fn = fallback_fn
        self._atol = atol
        self._use_kernel = True
        self._validated = False

    def __call__(self, *args, **kwargs):
        if not self._validated and self._use_kernel:
            self._validated = True
            try:
                kernel_out = self._kernel_fn(*args, **kwargs)
                ref_out = self._fallback_fn(*args, **kwargs)
                mx.eval(kernel_out, ref_out)
                max_diff = mx.max(mx.abs(kernel_out - ref_out)).item()
                if max_diff > self._atol:
                    print(f"[WARN] Kernel validation failed (diff={max_diff:.2e}), "
                          f"using fallback")
                    self._use_kernel = False
                    return ref_out
                return kernel_out
            except Exception as e:
                print(f"[WARN] Kernel failed ({e}), using fallback")
                self._use_kernel = False
                return self._fallback_fn(*args, **kwargs)

        if self._use_kernel:
            try:
                return self._kernel_fn(*args, **kwargs)
            except Exception as e:
                print(f"[WARN] Kernel runtime error ({e}), switching to fallback")
                self._use_kernel = False
                return self._fallback_fn(*args, **kwargs)

        return self._fallback_fn(*args, **kwargs)


def make_kernel_rmsnorm(source, name, grid_rows_only=False, tg_is_row=False):
    kernel = mx.fast.metal_kernel(name=name, input_names=["x", "w", "eps"], output_names=["out"], source=source)

    def kernel_rmsnorm(x, weight, eps=1e-5):
        D = x.shape[-1]
        x_2d = x.reshape(-1, D)
        N = x_2d.shape[0]
        tg = D if tg_is_row else min(256, max(32, (D // 32) * 32))
        grid = (N, 1, 1) if grid_rows_only else (N * tg, 1, 1)
        return kernel(inputs=[x_2d, weight, mx.array([eps], dtype=mx.float32)], template=[("T", x.dtype)],
                      grid=grid, threadgroup=(tg, 1, 1), output_shapes=[(N, D)], output_dtypes=[x.dtype],
                      init_value=0)[0].reshape(x.shape)
    return kernel_rmsnorm


results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


x = mx.random.normal((6, 256), key=mx.random.key(0))
w = mx.random.uniform(0.5, 1.5, (256,), key=mx.random.key(1))
expected = mx.fast.rms_norm(x, w, 1e-5)

# Usage (the guide's)
my_kernel_rmsnorm = make_kernel_rmsnorm(RMSNORM_SOURCE, "rmsnorm")
rmsnorm = RobustKernelOp(
    kernel_fn=my_kernel_rmsnorm,
    fallback_fn=lambda x, w, eps=1e-5: mx.fast.rms_norm(x, w, eps),
)
out = rmsnorm(x, w)
report("a correct kernel validates and stays in use", rmsnorm._use_kernel and mx.allclose(out, expected).item())
out = rmsnorm(x * 2, w)
report("later calls use the kernel", rmsnorm._use_kernel and mx.allclose(out, mx.fast.rms_norm(x * 2, w, 1e-5)).item())

# A kernel that does not compile: caught during validation.
broken = RobustKernelOp(make_kernel_rmsnorm(RMSNORM_SOURCE.replace("eps[0]", "epsilon"), "rmsnorm_broken"),
                        lambda x, w, eps=1e-5: mx.fast.rms_norm(x, w, eps))
out = broken(x, w)
report("a compile error is caught on the first call; the fallback answers",
       not broken._use_kernel and mx.allclose(out, expected).item())

# A kernel with wrong numbers (grid counts threads, not rows): caught by the comparison.
wrong = RobustKernelOp(make_kernel_rmsnorm(RMSNORM_SOURCE, "rmsnorm", grid_rows_only=True),
                       lambda x, w, eps=1e-5: mx.fast.rms_norm(x, w, eps))
out = wrong(x, w)
report("a wrong result is caught by validation; the fallback answers",
       not wrong._use_kernel and mx.allclose(out, expected).item())

# An error at evaluation time after validation escapes the wrapper.
lazy = RobustKernelOp(make_kernel_rmsnorm(RMSNORM_SOURCE, "rmsnorm", tg_is_row=True),
                      lambda x, w, eps=1e-5: mx.fast.rms_norm(x, w, eps))
lazy(x, w)  # D = 256 threads per threadgroup: fine, validated
x_wide = mx.random.normal((2, 2048), key=mx.random.key(2))
w_wide = mx.ones((2048,))
out = lazy(x_wide, w_wide)  # D = 2048 threads: queued without error
try:
    mx.eval(out)
    escaped = None
except ValueError as e:
    escaped = str(e)
print("after validation, at the caller's mx.eval:", escaped)
report("an eval-time error after validation escapes the wrapper (no fallback)",
       escaped is not None and "Thread group size (2048)" in escaped and lazy._use_kernel)

ok = all(results)
print("RobustKernelOp behaves as shown (validation catches compile and numeric errors only):", ok)
sys.exit(0 if ok else 1)
