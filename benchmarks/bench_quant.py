"""quantized_matmul against the float products it stands for (same-run ratios only).

Contenders for y = x @ W.T with W (N, K) given 4-bit affine (group 64):
  qmm      mx.quantized_matmul(x, wq, s, b)              (dequantized tiles + sgemm/sgemv)
  deq+mm   mx.dequantize(wq, s, b) then x @ w.T          (the whole matrix materialised first)
  float    x @ w.T with a float32 w already in memory    (what quantisation saves memory against)
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


if __name__ == "__main__":
    main()
