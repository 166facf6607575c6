"""Metal kernels on an NVIDIA GPU (the CUDA back-end) against the same algorithms
written in CUDA and run by CuPy (RawKernel, cuBLAS), measured side by side in one run.

  sgemm      the kernels section's 16x16 tiled SGEMM as a Metal kernel, N = 1024 and 4096
  hgemm      a simdgroup_matrix half GEMM at 4096^3 against cuBLAS HGEMM (cupy.matmul)
  exp        exp over 256M floats, one element per thread
  call       a cached 1-thread kernel call + eval against RawKernel call + synchronize
  first      a new kernel's first result against a new RawKernel's first call
  cpu rows   the kernels section's tree reduction and simd_sum row sum: the GPU against the CPU
             engine on this machine's cores (a child process with MKPY_GPU=cpu)
  fast       mx.fast on a 7B-like layer in float16 (rms_norm, rope, attention prefill and decode,
             softmax): the GPU's evaluators against the CPU's on this machine's cores (a child
             process with MKPY_GPU=cpu; both give the same bits), and prefill attention against
             the same graph in CuPy (cuBLAS GEMMs and a softmax: the speed that bit-equality costs)

mkpy is timed as kernel call + mx.eval (the eval waits for the GPU); CuPy as the launch plus
cupy.cuda.Device().synchronize(). Absolute times are given for the GPU only.
Skipped (no rows) where mx.cuda.is_available() is false or CuPy is missing.
Run alone: PYTHONPATH=. python3 benchmarks/bench_gpu.py [--quick] [--only=sgemm,exp,call,cpu,fast,hgemm]
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

import mkpy as mx

from bench_kernels import REDUCE_SRC, ROWSUM_SRC, SGEMM_SRC
from common import Target, compare, fmt_time, progress, row, time_ratio

SECTION = "gpu"

CUDA_SGEMM = r"""
extern "C" __global__ void sgemm(const float *A, const float *B, float *C, int N) {
    __shared__ float As[16][16];
    __shared__ float Bs[16][16];
    int lx = threadIdx.x, ly = threadIdx.y;
    int col = blockIdx.x * 16 + lx, row = blockIdx.y * 16 + ly;
    float acc = 0.0f;
    for (int t = 0; t < N; t += 16) {
        As[ly][lx] = A[row * N + (t + lx)];
        Bs[ly][lx] = B[(t + ly) * N + col];
        __syncthreads();
        for (int k = 0; k < 16; ++k) acc += As[ly][k] * Bs[k][lx];
        __syncthreads();
    }
    C[row * N + col] = acc;
}
"""

CUDA_EXP = r"""
extern "C" __global__ void vexp(const float *x, float *y, unsigned long long n) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = expf(x[i]);
}
"""

EXP_SRC = """
    uint i = thread_position_in_grid.x;
    out[i] = metal::exp(inp[i]);
"""

# Each SIMD-group computes a 32x32 block of C as 4x4 8x8 fragments; 4 SIMD-groups per
# threadgroup (2x2) make a 64x64 tile. A and B are row-major n x n half, C float.
HGEMM_SRC = """
    const uint sg = simdgroup_index_in_threadgroup;
    const uint N = n;
    const uint r0 = threadgroup_position_in_grid.y * 64 + (sg / 2) * 32;
    const uint c0 = threadgroup_position_in_grid.x * 64 + (sg % 2) * 32;
    simdgroup_float8x8 acc[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i][j] = simdgroup_float8x8(0.0f);
    for (uint k = 0; k < N; k += 8) {
        simdgroup_half8x8 a[4], b[4];
        for (int i = 0; i < 4; ++i) simdgroup_load(a[i], A + (r0 + 8 * i) * N + k, N);
        for (int j = 0; j < 4; ++j) simdgroup_load(b[j], B + k * N + c0 + 8 * j, N);
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) simdgroup_store(acc[i][j], C + (r0 + 8 * i) * N + c0 + 8 * j, N);
"""

TILED_VS_CUDA = Target(">= 0.8x the CUDA kernel", ratio_min=0.8)
HGEMM_VS_CUBLAS = Target(">= 0.5x cuBLAS", ratio_min=0.5)
EXP_VS_CUDA = Target(">= 0.9x the CUDA kernel", ratio_min=0.9)
CALL_VS_CUPY = Target("<= CuPy", ratio_min=1.0)
FIRST_VS_CUPY = Target("<= CuPy", ratio_min=1.0)
CPU_ROWS = Target(">= 10x the CPU engine", ratio_min=10.0)
FAST_VS_CPU = Target(">= 5x the CPU's evaluators", ratio_min=5.0)


def _cupy():
    try:
        import cupy
        return cupy
    except Exception:
        return None


def _sgemm_rows(cp, n, rows, quick):
    k = mx.fast.metal_kernel(name="bench_sgemm_gpu", input_names=["A", "B", "n"], output_names=["C"],
                             source=SGEMM_SRC)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    A, B, N = mx.array(a), mx.array(b), mx.array(n, dtype=mx.int32)
    mx.eval(A, B)

    def run_mx():
        c, = k(inputs=[A, B, N], grid=(n, n, 1), threadgroup=(16, 16, 1), output_shapes=[(n, n)],
               output_dtypes=[mx.float32])
        mx.eval(c)
        return c

    c = np.array(run_mx())
    ref = a.astype(np.float64) @ b.astype(np.float64)
    ok = bool(np.allclose(c, ref, rtol=1e-3, atol=1e-2 * np.sqrt(n)))
    f = cp.RawKernel(CUDA_SGEMM, "sgemm")
    ga, gb = cp.asarray(a), cp.asarray(b)
    gc = cp.empty((n, n), dtype=cp.float32)

    def run_cp():
        f((n // 16, n // 16), (16, 16), (ga, gb, gc, np.int32(n)))
        cp.cuda.Device().synchronize()

    run_cp()
    best = compare({"mkpy": run_mx, "cuda": run_cp}, budget_s=1.0 if quick else 3.0)
    flops = 2.0 * n ** 3
    rows.append(row(SECTION, "tiled SGEMM %d (Metal vs CUDA)" % n, value=best["mkpy"],
                    value_text="%s %.1f TF/s" % (fmt_time(best["mkpy"]), flops / best["mkpy"] / 1e12),
                    ref_name="CUDA (CuPy RawKernel)", ref_value=best["cuda"],
                    ref_text=fmt_time(best["cuda"]), ratio=time_ratio(best["mkpy"], best["cuda"]),
                    target=TILED_VS_CUDA, check=ok))


def _hgemm_row(cp, n, rows, quick):
    k = mx.fast.metal_kernel(name="bench_hgemm_gpu", input_names=["A", "B", "n"], output_names=["C"],
                             source=HGEMM_SRC)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n)).astype(np.float16)
    b = rng.standard_normal((n, n)).astype(np.float16)
    A, B, N = mx.array(a), mx.array(b), mx.array(n, dtype=mx.int32)
    mx.eval(A, B)

    def run_mx():
        c, = k(inputs=[A, B, N], grid=(n // 64 * 128, n // 64, 1), threadgroup=(128, 1, 1),
               output_shapes=[(n, n)], output_dtypes=[mx.float32])
        mx.eval(c)
        return c

    c = np.array(run_mx())
    ref = a.astype(np.float32) @ b.astype(np.float32)
    ok = bool(np.allclose(c, ref, rtol=1e-2, atol=1e-1 * np.sqrt(n) / 8))
    ga, gb = cp.asarray(a), cp.asarray(b)

    def run_cp():
        cp.matmul(ga, gb)
        cp.cuda.Device().synchronize()

    run_cp()
    best = compare({"mkpy": run_mx, "cublas": run_cp}, budget_s=1.0 if quick else 3.0, min_reps=2)
    flops = 2.0 * n ** 3
    rows.append(row(SECTION, "simdgroup_matrix HGEMM %d" % n, value=best["mkpy"],
                    value_text="%s %.1f TF/s" % (fmt_time(best["mkpy"]), flops / best["mkpy"] / 1e12),
                    ref_name="cuBLAS HGEMM", ref_value=best["cublas"],
                    ref_text="%s %.0f TF/s" % (fmt_time(best["cublas"]), flops / best["cublas"] / 1e12),
                    ratio=time_ratio(best["mkpy"], best["cublas"]), target=HGEMM_VS_CUBLAS, check=ok))


def _exp_row(cp, n, rows, quick):
    k = mx.fast.metal_kernel(name="bench_exp_gpu", input_names=["inp"], output_names=["out"], source=EXP_SRC)
    x = mx.random.normal((n,))
    mx.eval(x)

    def run_mx():
        o, = k(inputs=[x], grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(n,)],
               output_dtypes=[mx.float32])
        mx.eval(o)
        return o

    o = run_mx()
    sample = np.array(o[:1000]), np.array(x[:1000])
    ok = bool(np.allclose(sample[0], np.exp(sample[1]), rtol=1e-6))
    f = cp.RawKernel(CUDA_EXP, "vexp")
    gx = cp.asarray(np.array(x))
    gy = cp.empty_like(gx)

    def run_cp():
        f(((n + 255) // 256,), (256,), (gx, gy, np.uint64(n)))
        cp.cuda.Device().synchronize()

    run_cp()
    best = compare({"mkpy": run_mx, "cuda": run_cp}, budget_s=1.0 if quick else 3.0)
    gbs = lambda t: 8.0 * n / t / 1e9  # noqa: E731
    rows.append(row(SECTION, "exp %dM floats" % (n >> 20), value=best["mkpy"],
                    value_text="%.0f GB/s" % gbs(best["mkpy"]), ref_name="CUDA (CuPy RawKernel)",
                    ref_value=best["cuda"], ref_text="%.0f GB/s" % gbs(best["cuda"]),
                    ratio=time_ratio(best["mkpy"], best["cuda"]), target=EXP_VS_CUDA, check=ok))


def _call_rows(cp, rows, quick):
    k = mx.fast.metal_kernel(name="bench_call_gpu", input_names=["x"], output_names=["o"],
                             source="o[0] = x[0] + 1.0f;")
    x = mx.array([1.0])
    mx.eval(x)

    def run_mx():
        o, = k(inputs=[x], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)], output_dtypes=[mx.float32])
        mx.eval(o)

    f = cp.RawKernel('extern "C" __global__ void one(const float *x, float *o) { o[0] = x[0] + 1.0f; }', "one")
    gx = cp.asarray(np.array([1.0], np.float32))
    go = cp.empty_like(gx)

    def run_cp():
        f((1,), (1,), (gx, go))
        cp.cuda.Device().synchronize()

    run_mx()
    run_cp()
    best = compare({"mkpy": run_mx, "cupy": run_cp}, budget_s=1.0 if quick else 3.0)
    rows.append(row(SECTION, "cached kernel call + eval", value=best["mkpy"], value_text=fmt_time(best["mkpy"]),
                    ref_name="CuPy RawKernel + sync", ref_value=best["cupy"], ref_text=fmt_time(best["cupy"]),
                    ratio=time_ratio(best["mkpy"], best["cupy"]), target=CALL_VS_CUPY))
    # a new kernel each time: a constant nobody compiled before (time.time_ns) defeats every cache
    tm, tc = [], []
    for r in range(2 if quick else 4):
        tag = time.time_ns() + r
        kn = mx.fast.metal_kernel(name="bench_first_gpu", input_names=["x"], output_names=["o"],
                                  source="o[0] = x[0] + %d.0f;" % (tag % 100000))
        t0 = time.perf_counter()
        o, = kn(inputs=[x], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)], output_dtypes=[mx.float32])
        mx.eval(o)
        tm.append(time.perf_counter() - t0)
        src = 'extern "C" __global__ void one(const float *x, float *o) { o[0] = x[0] + %d.0f; }' % (tag % 100000 + 7)
        t0 = time.perf_counter()
        g = cp.RawKernel(src, "one")
        g((1,), (1,), (gx, go))
        cp.cuda.Device().synchronize()
        tc.append(time.perf_counter() - t0)
    m, c = sorted(tm)[len(tm) // 2], sorted(tc)[len(tc) // 2]
    rows.append(row(SECTION, "new kernel, first result", value=m, value_text=fmt_time(m),
                    ref_name="CuPy RawKernel first call", ref_value=c, ref_text=fmt_time(c),
                    ratio=time_ratio(m, c), target=FIRST_VS_CUPY, note="median of %d" % len(tm)))




def _coop_kernels():
    red = mx.fast.metal_kernel(name="bench_reduce_gpu", input_names=["inp", "n"], output_names=["partial"],
                               source=REDUCE_SRC)
    rs = mx.fast.metal_kernel(name="bench_rowsum_gpu", input_names=["x", "cols"], output_names=["out"],
                              source=ROWSUM_SRC)
    return red, rs


def coop_times(budget):
    """Best seconds of the tree reduction (16M floats, 4096 groups) and the simd_sum row sum
    (4096^2), on whichever back-end this process has."""
    red, rs = _coop_kernels()
    n = 1 << 24
    x = mx.random.normal((n,))
    m = mx.random.normal((4096, 4096))
    N = mx.array(n, dtype=mx.int32)
    C = mx.array(4096, dtype=mx.int32)
    mx.eval(x, m)

    def run_red():
        p, = red(inputs=[x, N], grid=(4096 * 256, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(4096,)],
                 output_dtypes=[mx.float32])
        mx.eval(p)
        return p

    def run_rs():
        o, = rs(inputs=[m, C], grid=(4096 * 256, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(4096,)],
                output_dtypes=[mx.float32])
        mx.eval(o)
        return o

    ok = bool(abs(float(np.array(run_red()).sum()) - float(np.array(x).astype(np.float64).sum())) < 1e-2 * np.sqrt(n))
    ok = ok and bool(np.allclose(np.array(run_rs()), np.array(m).sum(axis=1), rtol=1e-3, atol=1e-2))
    best = compare({"reduce": run_red, "rowsum": run_rs}, budget_s=budget)
    return {"reduce": best["reduce"], "rowsum": best["rowsum"], "ok": ok}


def _cpu_rows(rows, quick):
    gpu = coop_times(1.0 if quick else 2.0)
    env = dict(os.environ, MKPY_GPU="cpu")
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, os.path.join(here, "bench_gpu.py"), "--coop-child"], env=env,
                         capture_output=True, text=True, timeout=900)
    try:
        cpu = json.loads(out.stdout.strip().splitlines()[-1])
    except Exception:
        cpu = {"reduce": None, "rowsum": None, "ok": False}
    for key, name in (("reduce", "tree reduction 16M, 4096 groups"), ("rowsum", "simd_sum row sum 4096^2")):
        rows.append(row(SECTION, name + " (GPU vs CPU)", value=gpu[key], value_text=fmt_time(gpu[key]),
                        ref_name="CPU engine, %d cores" % os.cpu_count(), ref_value=cpu[key],
                        ref_text=fmt_time(cpu[key]), ratio=time_ratio(gpu[key], cpu[key]), target=CPU_ROWS,
                        check=gpu["ok"] and cpu["ok"]))


# (B, heads, kv heads, head dim) of a 7B-like layer; prefill over 2048 tokens, decode one
# token against 4096
FAST_H, FAST_KV, FAST_D = 32, 8, 128


def fast_cases():
    """The mx.fast graphs the fast rows time, as {name: fn}, inputs evaluated."""
    f16 = mx.float16
    x = mx.random.normal((2048, 4096)).astype(f16)
    w = mx.random.normal((4096,)).astype(f16)
    q = mx.random.normal((1, FAST_H, 2048, FAST_D)).astype(f16)
    k = mx.random.normal((1, FAST_KV, 2048, FAST_D)).astype(f16)
    v = mx.random.normal((1, FAST_KV, 2048, FAST_D)).astype(f16)
    qd = mx.random.normal((1, FAST_H, 1, FAST_D)).astype(f16)
    kd = mx.random.normal((1, FAST_KV, 4096, FAST_D)).astype(f16)
    vd = mx.random.normal((1, FAST_KV, 4096, FAST_D)).astype(f16)
    s = mx.random.normal((4096, 4096))
    mx.eval(x, w, q, k, v, qd, kd, vd, s)
    sc = FAST_D ** -0.5
    F = mx.fast
    return {
        "rms_norm 2048x4096": lambda: F.rms_norm(x, w, 1e-5),
        "rope 32x2048x128": lambda: F.rope(q, FAST_D, traditional=False, base=10000.0, scale=1.0, offset=7),
        "sdpa prefill 2048, 32/8 heads": lambda: F.scaled_dot_product_attention(q, k, v, scale=sc, mask="causal"),
        "sdpa decode 1 of 4096": lambda: F.scaled_dot_product_attention(qd, kd, vd, scale=sc),
        "softmax 4096x4096 float32": lambda: mx.softmax(s, axis=-1, precise=True),
    }


def fast_times(budget):
    """Best seconds of each fast case on whichever back-end this process has."""
    fns = {name: (lambda f=fn: mx.eval(f())) for name, fn in fast_cases().items()}
    return compare(fns, budget_s=budget, min_reps=2, max_reps=5)


def _fast_rows(cp, rows, quick):
    mx.random.seed(0)
    gpu = fast_times(1.0 if quick else 3.0)
    env = dict(os.environ, MKPY_GPU="cpu")
    here = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, os.path.join(here, "bench_gpu.py"), "--fast-child"], env=env,
                         capture_output=True, text=True, timeout=1800)
    try:
        cpu = json.loads(out.stdout.strip().splitlines()[-1])
    except Exception:
        cpu = {}
    for name, t in gpu.items():
        rows.append(row(SECTION, name + " (GPU vs CPU)", value=t, value_text=fmt_time(t),
                        ref_name="CPU evaluators, %d cores" % os.cpu_count(), ref_value=cpu.get(name),
                        ref_text=fmt_time(cpu.get(name)), ratio=time_ratio(t, cpu.get(name)), target=FAST_VS_CPU))
    # prefill attention in CuPy: cuBLAS GEMMs (tensor cores) and a softmax, GQA by repeating kv heads
    rng = np.random.default_rng(0)
    T, rep = 2048, FAST_H // FAST_KV
    q = cp.asarray(rng.standard_normal((FAST_H, T, FAST_D)).astype(np.float16))
    k = cp.asarray(np.repeat(rng.standard_normal((FAST_KV, T, FAST_D)).astype(np.float16), rep, axis=0))
    v = cp.asarray(np.repeat(rng.standard_normal((FAST_KV, T, FAST_D)).astype(np.float16), rep, axis=0))
    causal = cp.asarray(np.triu(np.full((T, T), -np.inf, np.float32), 1))

    def run_cp():
        sc = cp.matmul(q, k.transpose(0, 2, 1)).astype(cp.float32) * (FAST_D ** -0.5) + causal
        p = cp.exp(sc - sc.max(axis=-1, keepdims=True))
        p = (p / p.sum(axis=-1, keepdims=True)).astype(cp.float16)
        cp.matmul(p, v)
        cp.cuda.Device().synchronize()

    run_cp()
    ref = compare({"cupy": run_cp}, budget_s=1.0 if quick else 3.0)["cupy"]
    name = "sdpa prefill 2048, 32/8 heads"
    rows.append(row(SECTION, name + " (vs cuBLAS)", value=gpu[name], value_text=fmt_time(gpu[name]),
                    ref_name="CuPy: cuBLAS GEMMs + softmax", ref_value=ref, ref_text=fmt_time(ref),
                    ratio=time_ratio(gpu[name], ref), target=None,
                    note="in-order float sums (bit-equal to the CPU) against tensor cores"))


def run(opts):
    if not mx.cuda.is_available():
        progress("gpu: no CUDA GPU here (mx.cuda.is_available() is False): section skipped")
        return []
    cp = _cupy()
    if cp is None:
        progress("gpu: CuPy is not importable: section skipped")
        return []
    quick = getattr(opts, "quick", False)
    rows = []
    steps = [("sgemm 1024", lambda: _sgemm_rows(cp, 1024, rows, quick)),
             ("sgemm 4096", lambda: _sgemm_rows(cp, 4096, rows, quick)),
             ("hgemm", lambda: _hgemm_row(cp, 4096, rows, quick)),
             ("exp", lambda: _exp_row(cp, 1 << 28, rows, quick)),
             ("call", lambda: _call_rows(cp, rows, quick)),
             ("cpu rows", lambda: _cpu_rows(rows, quick)),
             ("fast", lambda: _fast_rows(cp, rows, quick))]
    only = getattr(opts, "only", None)
    for name, step in steps:
        if only and not any(name.startswith(o) for o in only):
            continue
        progress("gpu: " + name)
        try:
            step()
        except Exception as e:  # a row that fails says so, and the others still run
            rows.append(row(SECTION, name, value_text="failed", note="%s: %s" % (type(e).__name__, e), check=False,
                            target=Target("runs", ratio_min=0.0)))
    return rows


if __name__ == "__main__":
    if "--coop-child" in sys.argv:
        print(json.dumps(coop_times(2.0)))
        sys.exit(0)
    if "--fast-child" in sys.argv:
        mx.random.seed(0)
        print(json.dumps(fast_times(3.0)))
        sys.exit(0)
    import types
    only = [a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--only=")]
    rs = run(types.SimpleNamespace(quick="--quick" in sys.argv, only=only[0] if only else None))
    from run_all import print_table
    print_table(rs)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "bench_gpu.json"), "w") as f:
            json.dump(rs, f, indent=1)
