"""quantized_matmul against the float products it stands for (same-run ratios only).

Contenders for y = x @ W.T with W (N, K) given 4-bit affine (group 64):
  qmm      mx.quantized_matmul(x, wq, s, b)              (dequantized tiles + sgemm/sgemv)
  deq+mm   mx.dequantize(wq, s, b) then x @ w.T          (the whole matrix materialised first)
  float    x @ w.T with a float32 w already in memory    (what quantisation saves memory against)

gather_mm's own primitive against the composition it replaced (take of the
picked matrices, then a batched matmul), y[i] = a[lhs[i]] @ b[rhs[i]]:
  gather_mm  mx.gather_mm(a, b, lhs, rhs)                 (pairs grouped per b matrix, one sgemm per group)
  composed   mx.take(a_flat, lhs, 0) @ mx.take(b_flat, rhs, 0)
Run: PYTHONPATH=. python3 benchmarks/bench_quant.py
"""
import time

import numpy as np

import mkpy as mx


def best(fn, rounds=5):
    fn()
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < 0.05 or n < 2:
            fn()
            n += 1
        ts.append((time.perf_counter() - t0) / n)
    return min(ts)


def main():
    rng = np.random.default_rng(0)
    print(f"{'M x K x N':>20} {'qmm ms':>8} {'deq+mm/qmm':>11} {'float/qmm':>10}")
    for M, K, N in [(1, 4096, 4096), (8, 4096, 4096), (128, 2048, 2048), (512, 1024, 4096)]:
        w = mx.array(rng.standard_normal((N, K)).astype(np.float32))
        x = mx.array(rng.standard_normal((M, K)).astype(np.float32))
        wq, s, b = mx.quantize(w)
        mx.eval(wq, s, b)
        t_q = best(lambda: mx.eval(mx.quantized_matmul(x, wq, s, b)))
        t_d = best(lambda: mx.eval(mx.matmul(x, mx.dequantize(wq, s, b).T)))
        t_f = best(lambda: mx.eval(mx.matmul(x, w.T)))
        print(f"{f'{M} x {K} x {N}':>20} {t_q * 1e3:8.2f} {t_d / t_q:11.2f} {t_f / t_q:10.2f}")

    gather_mm_rows(rng)


def gather_mm_rows(rng):
    print(f"\n{'gather_mm case':>34} {'gather_mm ms':>13} {'composed/gather_mm':>19}")
    # (name, a shape, b shape, lhs, rhs)
    cases = []
    for T, E, K, N in [(64, 8, 1024, 1024), (256, 8, 512, 1024), (1, 8, 2048, 2048)]:
        idx = rng.integers(0, E, (T, 2))
        cases.append((f"MoE T={T} top-2 E={E} {K}x{N}", (T, 1, K), (E, K, N), np.arange(T)[:, None], idx))
    cases.append(("batched 32 x (64x256 @ 256x256)", (32, 64, 256), (32, 256, 256), np.arange(32), np.arange(32)))
    for name, sa, sb, li, ri in cases:
        a = mx.array(rng.standard_normal(sa).astype(np.float32))
        b = mx.array(rng.standard_normal(sb).astype(np.float32))
        L, R = mx.array(li.astype(np.uint32)), mx.array(ri.astype(np.uint32))
        mx.eval(a, b, L, R)
        af, bf = a.reshape(-1, *sa[-2:]), b.reshape(-1, *sb[-2:])
        t_g = best(lambda: mx.eval(mx.gather_mm(a, b, L, R)))
        Lb, Rb = mx.broadcast_to(L, np.broadcast_shapes(li.shape, ri.shape)), mx.broadcast_to(R, np.broadcast_shapes(li.shape, ri.shape))
        t_c = best(lambda: mx.eval(mx.matmul(mx.take(af, Lb, 0), mx.take(bf, Rb, 0))))
        print(f"{name:>34} {t_g * 1e3:13.2f} {t_c / t_g:19.2f}")


if __name__ == "__main__":
    main()
