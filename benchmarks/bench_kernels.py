"""Metal kernels (mx.fast.metal_kernel) against PoCL running the same
algorithms in OpenCL (kernels.cl) and against NumPy/OpenBLAS doing the same math.

  exp        element-wise, no barriers, 16M floats
  trivial    x * 2 over 4M floats with one barrier (cooperative) against the same body without
             it (the plain path), at 32, 256 and 1024 threads per group: the engine's own cost
  sgemm      16x16 tiles in threadgroup memory, two barriers per tile, N=1024
  sgemm 3d   (16, 16, 3) threadgroups of 768 threads, N=960
  reduce     work-group tree reduction (grid-stride loop, then log2(256) barriers), 16M floats,
             at 1024 and at 4096 groups
  row sum    4096x4096, one 256-thread group per row; Metal with simd_sum twice, OpenCL with
             a local-memory tree reduction; also against mx.sum(axis=1)
  rms_norm   rows of 2048, one 32-thread threadgroup per row; Metal sums with simd_sum,
             OpenCL with a local-memory tree reduction

Every result is checked against NumPy before it is timed. mkpy is timed as
kernel call + mx.eval (a fresh output each call); PoCL as enqueue + finish on
buffers allocated once; NumPy as the expression (a fresh result each call).
Run alone: PYTHONPATH=. python3 benchmarks/bench_kernels.py
"""
import numpy as np

import mkpy as mx

from common import Target, compare, fmt_time, progress, row, time_ratio
from pocl import open_pocl

SECTION = "kernels"

EXP_SRC = """
    uint i = thread_position_in_grid.x;
    out[i] = metal::exp(inp[i]);
"""

SGEMM_SRC = """
    constexpr int TS = 16;
    threadgroup float As[TS][TS];
    threadgroup float Bs[TS][TS];
    const int lx = thread_position_in_threadgroup.x, ly = thread_position_in_threadgroup.y;
    const int col = thread_position_in_grid.x, row = thread_position_in_grid.y;
    const int N = n;
    float acc = 0.0f;
    for (int t = 0; t < N; t += TS) {
        As[ly][lx] = A[row * N + (t + lx)];
        Bs[ly][lx] = B[(t + ly) * N + col];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int k = 0; k < TS; ++k)
            acc += As[ly][k] * Bs[k][lx];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    C[row * N + col] = acc;
"""

REDUCE_SRC = """
    threadgroup float scratch[256];
    const uint lid = thread_position_in_threadgroup.x;
    const uint gsz = threads_per_grid.x;
    float s = 0.0f;
    for (uint i = thread_position_in_grid.x; i < uint(n); i += gsz) s += inp[i];
    scratch[lid] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint off = threads_per_threadgroup.x / 2; off > 0; off >>= 1) {
        if (lid < off) scratch[lid] += scratch[lid + off];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (lid == 0) partial[threadgroup_position_in_grid.x] = scratch[0];
"""

SGEMM3D_SRC = """
    constexpr int TS = 16, KZ = 3;
    threadgroup float As[KZ][TS][TS];
    threadgroup float Bs[KZ][TS][TS];
    threadgroup float part[KZ][TS][TS];
    const int lx = thread_position_in_threadgroup.x, ly = thread_position_in_threadgroup.y;
    const int lz = thread_position_in_threadgroup.z;
    const int col = thread_position_in_grid.x, row = thread_position_in_grid.y;
    const int N = n;
    float acc = 0.0f;
    for (int t = 0; t < N; t += TS * KZ) {
        As[lz][ly][lx] = A[row * N + (t + lz * TS + lx)];
        Bs[lz][ly][lx] = B[(t + lz * TS + ly) * N + col];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int k = 0; k < TS; ++k)
            acc += As[lz][ly][k] * Bs[lz][k][lx];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    part[lz][ly][lx] = acc;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (lz == 0) C[row * N + col] = part[0][ly][lx] + part[1][ly][lx] + part[2][ly][lx];
"""

ROWSUM_SRC = """
    threadgroup float part[8];
    const uint row = threadgroup_position_in_grid.x, lid = thread_position_in_threadgroup.x;
    const uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
    const uint ncols = uint(cols);
    const size_t base = size_t(row) * ncols;
    float s = 0.0f;
    for (uint c = lid; c < ncols; c += 256) s += x[base + c];
    s = simd_sum(s);
    if (lane == 0) part[sg] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (sg == 0) {
        float t = simd_sum(lane < 8 ? part[lane] : 0.0f);
        if (lane == 0) out[row] = t;
    }
"""

RMS_SRC = """
    const uint lane = thread_position_in_threadgroup.x;
    const uint ls = threads_per_threadgroup.x;
    const uint ncols = uint(cols);
    const size_t base = size_t(threadgroup_position_in_grid.x) * ncols;
    float s = 0.0f;
    for (uint c = lane; c < ncols; c += ls) {
        float v = x[base + c];
        s += v * v;
    }
    s = simd_sum(s);
    const float inv = metal::rsqrt(s / float(ncols) + eps);
    for (uint c = lane; c < ncols; c += ls)
        out[base + c] = x[base + c] * inv * w[c];
"""

EXP_VS_POCL = Target(">= 1.5x PoCL throughput", ratio_min=1.5)
EXP_VS_NUMPY = Target(">= 1.0x (>= np.exp)", ratio_min=1.0)

# issue #10's targets for the lockstep engine
SGEMM_VS_POCL = Target(">= 3x PoCL", ratio_min=3.0)
REDUCE_VS_POCL = Target(">= 2x PoCL", ratio_min=2.0)
ROWSUM_VS_POCL = Target(">= 2x PoCL", ratio_min=2.0)
ROWSUM_VS_MX = Target("within 3x of mx.sum(axis=1)", ratio_min=1.0 / 3.0)
ENGINE_NOTE = "lockstep engine"
TRIVIAL_VS_PLAIN = Target("cooperative <= 2x the plain path", ratio_min=0.5)

# The same trivial body with and without a barrier: the barrier makes the
# kernel cooperative, so the difference is the engine's own cost.
TRIVIAL_PLAIN_SRC = """
    uint i = thread_position_in_grid.x;
    out[i] = inp[i] * 2.0f;
"""
TRIVIAL_COOP_SRC = """
    uint i = thread_position_in_grid.x;
    float v = inp[i] * 2.0f;
    threadgroup_barrier(mem_flags::mem_none);
    out[i] = v;
"""


def _rel_err(got, want):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(1e-30, np.abs(want).max()))


def _close(got, want, rtol, atol=0.0):
    """Element-wise check (not only relative to the largest value)."""
    return bool(np.allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol))


def _pair_rows(rows, name, unit, work, best, ok, targets=(None, None), note=""):
    """Two rows per kernel: vs PoCL and vs NumPy. `work` is bytes or flops per call."""
    scale = 1e9
    fmt = "%.3g " + unit
    mk = work / best["mkpy"] / scale
    for i, ref in enumerate(["pocl", "numpy"]):
        t = best.get(ref)
        ref_label = {"pocl": "PoCL", "numpy": "NumPy/OpenBLAS" if "GFLOP" in unit else "NumPy"}[ref]
        if t is None:
            rows.append(row(SECTION, name, value=mk, value_text=fmt % mk, ref_name=ref_label, ref_text="n/a",
                            target=targets[i], check=ok, note=best.get("pocl_reason", "") if ref == "pocl" else ""))
            continue
        rv = work / t / scale
        rows.append(row(SECTION, name, value=mk, value_text=fmt % mk, ref_name=ref_label, ref_value=rv,
                        ref_text=fmt % rv, ratio=time_ratio(best["mkpy"], t), target=targets[i], check=ok,
                        note=note if ok is not False else "RESULT CHECK FAILED"))


def run(opts):
    rows = []
    rng = np.random.default_rng(1)
    pocl, why = open_pocl()
    if pocl is None:
        progress("PoCL columns n/a: " + why)
    budget = 2.0 if opts.quick else 4.0

    # ------------------------------------------------------------- exp
    progress("kernel: exp 16M")
    n = 1 << 24
    xn = rng.uniform(-10, 10, n).astype(np.float32)
    xm = mx.array(xn)
    mx.eval(xm)
    k_exp = mx.fast.metal_kernel(name="bench_exp", input_names=["inp"], output_names=["out"], source=EXP_SRC)

    def mk_exp():
        out, = k_exp(inputs=[xm], grid=(n, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(n,)],
                     output_dtypes=[mx.float32])
        mx.eval(out)
        return out
    want = np.exp(xn)
    ok = _close(mk_exp(), want, 1e-5)
    contenders = {"mkpy": mk_exp, "numpy": lambda: np.exp(xn)}
    if pocl:
        bi, bo = pocl.buffer(xn), pocl.buffer(nbytes=4 * n)
        contenders["pocl"] = pocl.launcher("vexp", (n,), (256,), bi, bo, np.uint32(n))
        contenders["pocl"]()
        ok = ok and _close(pocl.read(bo, n), want, 1e-5)
    best = compare(contenders, budget_s=budget)
    best["pocl_reason"] = why
    _pair_rows(rows, "exp 16M f32 (no barriers)", "GB/s", 8.0 * n, best, ok, (EXP_VS_POCL, EXP_VS_NUMPY))
    del xm

    # ------------------------------------------------ a trivial cooperative body vs the plain path
    n = 1 << 22
    xn = rng.standard_normal(n, dtype=np.float32)
    xm = mx.array(xn)
    mx.eval(xm)
    k_plain = mx.fast.metal_kernel(name="bench_trivial_plain", input_names=["inp"], output_names=["out"],
                                   source=TRIVIAL_PLAIN_SRC)
    k_coop = mx.fast.metal_kernel(name="bench_trivial_coop", input_names=["inp"], output_names=["out"],
                                  source=TRIVIAL_COOP_SRC)
    for tg in (32, 256, 1024):
        progress("kernel: trivial body 4M, %d-thread groups, cooperative vs plain" % tg)

        def launcher(k, tg=tg):
            def go():
                o, = k(inputs=[xm], grid=(n, 1, 1), threadgroup=(tg, 1, 1), output_shapes=[(n,)],
                       output_dtypes=[mx.float32])
                mx.eval(o)
                return o
            return go
        coop, plain = launcher(k_coop), launcher(k_plain)
        ok = _close(coop(), xn * 2, 0) and _close(plain(), xn * 2, 0)
        best = compare({"coop": coop, "plain": plain}, budget_s=budget)
        gbs = 8.0 * n / best["coop"] / 1e9
        rows.append(row(SECTION, "trivial body 4M, tg=%d: cooperative vs plain" % tg, value=gbs,
                        value_text="%.3g GB/s" % gbs, ref_name="plain path", ref_value=8.0 * n / best["plain"] / 1e9,
                        ref_text="%.3g GB/s" % (8.0 * n / best["plain"] / 1e9),
                        ratio=time_ratio(best["coop"], best["plain"]), target=TRIVIAL_VS_PLAIN, check=ok,
                        note=ENGINE_NOTE if ok else "RESULT CHECK FAILED"))
    del xm

    # ------------------------------------------------------------- tiled sgemm
    N = 512 if opts.quick else 1024
    progress("kernel: tiled sgemm %d (slow under fibers: tens of seconds)" % N)
    k_gemm = mx.fast.metal_kernel(name="bench_sgemm_tiled", input_names=["A", "B", "n"], output_names=["C"],
                                  source=SGEMM_SRC)

    def gemm_launcher(a, b, size):
        def go():
            c, = k_gemm(inputs=[a, b, size], grid=(size, size, 1), threadgroup=(16, 16, 1),
                        output_shapes=[(size, size)], output_dtypes=[mx.float32])
            mx.eval(c)
            return c
        return go
    # warm-up (compile, fiber stacks) on a small size
    s = 64
    an, bn = rng.standard_normal((s, s), dtype=np.float32), rng.standard_normal((s, s), dtype=np.float32)
    ok = _rel_err(np.array(gemm_launcher(mx.array(an), mx.array(bn), s)()), an @ bn) < 1e-5
    an = rng.standard_normal((N, N), dtype=np.float32)
    bn = rng.standard_normal((N, N), dtype=np.float32)
    am, bm = mx.array(an), mx.array(bn)
    mx.eval(am, bm)
    contenders = {"mkpy": gemm_launcher(am, bm, N), "numpy": lambda: an @ bn}
    want = an @ bn
    if pocl:
        ba, bb, bc = pocl.buffer(an), pocl.buffer(bn), pocl.buffer(nbytes=4 * N * N)
        contenders["pocl"] = pocl.launcher("sgemm_tiled", (N, N), (16, 16), ba, bb, bc, np.int32(N))
        contenders["pocl"]()
        ok = ok and _rel_err(pocl.read(bc, (N, N)), want) < 1e-5
    # the first mkpy call is also its check (a call takes seconds)
    first = {}

    def mk_first():
        c = contenders["mkpy"]()
        if "c" not in first:
            first["c"] = np.array(c)
    best = compare({"mkpy": mk_first, "numpy": contenders["numpy"], "pocl": contenders.get("pocl")},
                   warmup=0, min_reps=2, max_reps=3, budget_s=budget)
    ok = ok and _rel_err(first["c"], want) < 1e-5
    best["pocl_reason"] = why
    _pair_rows(rows, "tiled sgemm %d (barriers)" % N, "GFLOP/s", 2.0 * N ** 3, best, ok, (SGEMM_VS_POCL, None),
               note=ENGINE_NOTE)
    del am, bm

    # ------------------------------------------------------------- 768-thread 3D tiled matmul
    N3 = 480 if opts.quick else 960
    progress("kernel: 768-thread 3D tiled matmul %d" % N3)
    k_g3 = mx.fast.metal_kernel(name="bench_sgemm_3d", input_names=["A", "B", "n"], output_names=["C"],
                                source=SGEMM3D_SRC)
    an = rng.standard_normal((N3, N3), dtype=np.float32)
    bn = rng.standard_normal((N3, N3), dtype=np.float32)
    am, bm = mx.array(an), mx.array(bn)
    mx.eval(am, bm)

    def mk_g3():
        c, = k_g3(inputs=[am, bm, N3], grid=(N3, N3, 3), threadgroup=(16, 16, 3), output_shapes=[(N3, N3)],
                  output_dtypes=[mx.float32])
        mx.eval(c)
        return c
    want = an @ bn
    ok = _rel_err(np.array(mk_g3()), want) < 1e-5
    contenders = {"mkpy": mk_g3, "numpy": lambda: an @ bn}
    if pocl:
        ba, bb, bc = pocl.buffer(an), pocl.buffer(bn), pocl.buffer(nbytes=4 * N3 * N3)
        contenders["pocl"] = pocl.launcher("sgemm_3d", (N3, N3, 3), (16, 16, 3), ba, bb, bc, np.int32(N3))
        contenders["pocl"]()
        ok = ok and _rel_err(pocl.read(bc, (N3, N3)), want) < 1e-5
    best = compare(contenders, min_reps=2, max_reps=5, budget_s=budget)
    best["pocl_reason"] = why
    _pair_rows(rows, "3D-tiled matmul %d, 768 threads" % N3, "GFLOP/s", 2.0 * N3 ** 3, best, ok,
               note=ENGINE_NOTE)
    del am, bm

    # ------------------------------------------------------------- tree reduction
    n = 1 << 24
    xn = rng.uniform(0, 1, n).astype(np.float32)
    xm = mx.array(xn)
    mx.eval(xm)
    k_red = mx.fast.metal_kernel(name="bench_reduce_sum", input_names=["inp", "n"], output_names=["partial"],
                                 source=REDUCE_SRC)
    want = float(np.sum(xn, dtype=np.float64))
    bi = pocl.buffer(xn) if pocl else None
    for groups in (1024, 4096):
        progress("kernel: tree reduction 16M, %d groups" % groups)
        ls = 256

        def mk_red(groups=groups):
            p, = k_red(inputs=[xm, n], grid=(groups * ls, 1, 1), threadgroup=(ls, 1, 1), output_shapes=[(groups,)],
                       output_dtypes=[mx.float32])
            mx.eval(p)
            return p
        ok = abs(float(np.array(mk_red(), np.float64).sum()) - want) / want < 1e-5
        contenders = {"mkpy": mk_red, "numpy": lambda: np.sum(xn)}
        if pocl:
            bp = pocl.buffer(nbytes=4 * groups)
            contenders["pocl"] = pocl.launcher("reduce_sum", (groups * ls,), (ls,), bi, bp, pocl.local(4 * ls),
                                               np.uint32(n))
            contenders["pocl"]()
            ok = ok and abs(float(pocl.read(bp, groups).astype(np.float64).sum()) - want) / want < 1e-5
        best = compare(contenders, min_reps=3, budget_s=budget)
        best["pocl_reason"] = why
        _pair_rows(rows, "tree reduce 16M, %d groups" % groups, "GB/s", 4.0 * n, best, ok, (REDUCE_VS_POCL, None),
                   note=ENGINE_NOTE)
    del xm

    # ------------------------------------------------------------- simd_sum row reduction
    R = C = 2048 if opts.quick else 4096
    progress("kernel: simd_sum row reduction %dx%d" % (R, C))
    xn = rng.standard_normal((R, C), dtype=np.float32)
    xm = mx.array(xn)
    mx.eval(xm)
    k_rows = mx.fast.metal_kernel(name="bench_row_sum", input_names=["x", "cols"], output_names=["out"],
                                  source=ROWSUM_SRC)

    def mk_rows():
        o, = k_rows(inputs=[xm, C], grid=(R * 256, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(R,)],
                    output_dtypes=[mx.float32])
        mx.eval(o)
        return o

    def mx_rows():
        o = mx.sum(xm, axis=1)
        mx.eval(o)
        return o
    want = xn.sum(axis=1, dtype=np.float64)
    ok = _close(mk_rows(), want, 1e-4, 1e-3)
    contenders = {"mkpy": mk_rows, "numpy": mx_rows}
    if pocl:
        bx, bo = pocl.buffer(xn), pocl.buffer(nbytes=4 * R)
        contenders["pocl"] = pocl.launcher("row_sum", (R * 256,), (256,), bx, bo, pocl.local(4 * 256), np.uint32(C))
        contenders["pocl"]()
        ok = ok and _close(pocl.read(bo, R), want, 1e-4, 1e-3)
    best = compare(contenders, min_reps=3, budget_s=budget)
    best["pocl_reason"] = why
    rows_before = len(rows)
    _pair_rows(rows, "simd_sum row reduction %dx%d" % (R, C), "GB/s", 4.0 * R * C, best, ok,
               (ROWSUM_VS_POCL, ROWSUM_VS_MX), note=ENGINE_NOTE)
    rows[rows_before + 1]["ref_name"] = "mx.sum(axis=1)"  # the second reference here is mkpy's own op
    del xm

    # ------------------------------------------------------------- rms_norm
    progress("kernel: rms_norm 8192x2048")
    R, C, eps = 8192, 2048, 1e-5
    xn = rng.standard_normal((R, C), dtype=np.float32)
    wn = rng.uniform(0.5, 1.5, C).astype(np.float32)
    xm, wm = mx.array(xn), mx.array(wn)
    mx.eval(xm, wm)
    k_rms = mx.fast.metal_kernel(name="bench_rms_norm", input_names=["x", "w", "cols", "eps"], output_names=["out"],
                                 source=RMS_SRC)

    def mk_rms():
        o, = k_rms(inputs=[xm, wm, C, eps], grid=(R * 32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(R, C)],
                   output_dtypes=[mx.float32])
        mx.eval(o)
        return o

    def np_rms():
        return xn * (1.0 / np.sqrt(np.mean(xn * xn, axis=1, keepdims=True) + np.float32(eps))) * wn
    want = np_rms()
    ok = _close(mk_rms(), want, 1e-5, 1e-6)
    contenders = {"mkpy": mk_rms, "numpy": np_rms}
    if pocl:
        bx, bw, bo = pocl.buffer(xn), pocl.buffer(wn), pocl.buffer(nbytes=4 * R * C)
        contenders["pocl"] = pocl.launcher("rms_norm", (R * 32,), (32,), bx, bw, bo, pocl.local(4 * 32),
                                           np.uint32(C), np.float32(eps))
        contenders["pocl"]()
        ok = ok and _close(pocl.read(bo, (R, C)), want, 1e-5, 1e-6)
    best = compare(contenders, min_reps=3, budget_s=budget)
    best["pocl_reason"] = why
    _pair_rows(rows, "rms_norm 8192x2048 (simd_sum)", "GB/s", 8.0 * R * C, best, ok, note=ENGINE_NOTE)
    return rows


if __name__ == "__main__":
    import run_all
    run_all.main(["--only", SECTION])
