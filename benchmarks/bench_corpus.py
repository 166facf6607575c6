"""The test corpus's kernels (tests/test_kernel_corpus.py) at realistic sizes against
PoCL running their OpenCL twins (benchmarks/corpus.cl), and the compile budget.

Speed rows: the Metal kernel objects are imported from the test module (the same
source the tests check), run at a realistic size, checked against NumPy, and timed
against the twin (same algorithm, work-group shape and local-memory layout; where the
Metal kernel uses simd_sum/simd_max the twin uses a local-memory tree reduction, as
OpenCL 1.2 on PoCL has no sub-group functions). Target: no kernel more than 3x slower
than PoCL (issue #25).

Covered: tiled_matmul, rms_norm, softmax_rows, tree_sum, bitonic_rows, transpose_tiled,
hist_threadgroup_atomics, conv1d_shared, Sinkhorn-Knopp (its loop template on the lockstep
engine; its generated body, past the per-site form's compile budget, in the lockstep pass's
compact form), attention
with thread-0 statistics (bfloat16). Not covered by a speed row (no OpenCL twin): the
SIMD-group-function table (a conformance test, not a workload), block_scan
(simd_prefix_exclusive_sum), flash_attention (simd_shuffle), simdgroup_gemm
(simdgroup matrices), grid_sample (MLX's documentation example), the error-path kernels
(divergent barriers, stack and threadgroup-memory overflows, wild pointers) and the
device-atomics kernels without cooperation (hist_device, scatter_add: the plain path).

Compile rows: every test of the corpus is run once (its first parameter set) with an
empty kernel cache; the row is the CPU time the test took (this process and the compiler's
processes) divided by the kernels it compiled: compile time plus a small run and NumPy's
check, an upper bound on the compile time of an idle machine whatever the load.
Target: <= 2 s per kernel (issue #25).
Run alone: PYTHONPATH=. python3 benchmarks/bench_corpus.py
"""
import inspect
import os
import resource
import sys
import tempfile

import numpy as np

import mkpy as mx

from common import Target, compare, progress, row, time_ratio
from pocl import open_pocl

SECTION = "corpus"
HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS_CL = os.path.join(HERE, "corpus.cl")
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

VS_POCL = Target("no slower than 1/3 PoCL", ratio_min=1.0 / 3.0)
COMPILE_BUDGET = Target("<= 2 s per kernel", ratio_min=1.0)
SK = (12, 20, 20, 32)  # Sinkhorn: R, C, ITERS, threadgroup
SK_DEFS = ["-DSK_R=%d" % SK[0], "-DSK_C=%d" % SK[1], "-DSK_ITERS=%d" % SK[2], "-DSK_TG=%d" % SK[3],
           "-DSK_RC=%d" % max(SK[0], SK[1])]


def _ok(got, want, rtol, atol):
    return bool(np.allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol))


def _bf16_bits(a):
    """float32 -> bfloat16 bits as uint16 (round to nearest even), as mkpy's astype does."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _cases(C, quick):
    """(name, mkpy launcher, pocl set-up (pocl -> launcher, reader), reference, rtol, atol)."""
    rng = np.random.default_rng(7)
    f32 = mx.float32
    cases = []

    def add(name, mk, pocl_setup, want, rtol=1e-4, atol=1e-4):
        cases.append((name, mk, pocl_setup, want, rtol, atol))

    # tiled matmul
    M = K = N = 384 if quick else 512
    A, B = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
    Am, Bm = mx.array(A), mx.array(B)

    def mk_mm():
        c, = C.MATMUL(inputs=[Am, Bm], template=[("T", f32)], grid=(N, M, 1), threadgroup=(16, 16, 1),
                      output_shapes=[(M, N)], output_dtypes=[f32])
        mx.eval(c)
        return c

    def cl_mm(p):
        ba, bb, bc = p.buffer(A), p.buffer(B), p.buffer(nbytes=4 * M * N)
        return p.launcher("c_tiled_matmul", (N, M), (16, 16), ba, bb, bc, np.int32(M), np.int32(K),
                          np.int32(N)), lambda: p.read(bc, (M, N))
    add("tiled_matmul %d^3" % M, mk_mm, cl_mm, A @ B, 1e-3, 1e-3)

    # row kernels
    R, n, tg = (1024 if quick else 4096), 2048, 256
    X = rng.standard_normal((R, n), dtype=np.float32)
    W = rng.uniform(0.5, 1.5, n).astype(np.float32)
    Xm, Wm = mx.array(X), mx.array(W)

    def mk_rms():
        o, = C.RMS_NORM(inputs=[Xm, Wm, 1e-5], template=[("T", f32)], grid=(R * tg, 1, 1), threadgroup=(tg, 1, 1),
                        output_shapes=[(R, n)], output_dtypes=[f32])
        mx.eval(o)
        return o

    def cl_rms(p):
        bx, bw, bo = p.buffer(X), p.buffer(W), p.buffer(nbytes=4 * R * n)
        return p.launcher("c_rms_norm", (R * tg,), (tg,), bx, bw, bo, p.local(4 * tg), np.int32(n),
                          np.float32(1e-5)), lambda: p.read(bo, (R, n))
    add("rms_norm %dx%d" % (R, n), mk_rms, cl_rms,
        X / np.sqrt((X.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5) * W)

    def mk_sm():
        o, = C.SOFTMAX(inputs=[Xm], template=[("T", f32)], grid=(R * tg, 1, 1), threadgroup=(tg, 1, 1),
                       output_shapes=[(R, n)], output_dtypes=[f32])
        mx.eval(o)
        return o

    def cl_sm(p):
        bx, bo = p.buffer(X), p.buffer(nbytes=4 * R * n)
        return p.launcher("c_softmax_rows", (R * tg,), (tg,), bx, bo, p.local(4 * tg), np.int32(n)), \
            lambda: p.read(bo, (R, n))
    e = np.exp(X.astype(np.float64) - X.max(1, keepdims=True))
    add("softmax_rows %dx%d" % (R, n), mk_sm, cl_sm, e / e.sum(1, keepdims=True), 1e-4, 1e-7)

    # tree reduction
    nt, tg = (1 << 22 if quick else 1 << 24), 256
    T = rng.standard_normal(nt, dtype=np.float32)
    Tm = mx.array(T)
    groups = nt // tg

    def mk_tree():
        o, = C.TREE_SUM(inputs=[Tm], template=[("T", f32)], grid=(nt, 1, 1), threadgroup=(tg, 1, 1),
                        output_shapes=[(groups,)], output_dtypes=[f32])
        mx.eval(o)
        return o

    def cl_tree(p):
        bi, bo = p.buffer(T), p.buffer(nbytes=4 * groups)
        return p.launcher("c_tree_sum", (nt,), (tg,), bi, bo, p.local(4 * tg), np.uint32(nt)), \
            lambda: p.read(bo, groups)
    add("tree_sum %dM" % (nt >> 20), mk_tree, cl_tree, T.reshape(groups, tg).astype(np.float64).sum(1))

    # bitonic sort rows
    rows, P = (512 if quick else 2048), 1024
    S = rng.standard_normal((rows, P), dtype=np.float32)
    Sm = mx.array(S)

    def mk_bit():
        o, = C.BITONIC(inputs=[Sm], template=[("T", f32)], grid=(rows * P, 1, 1), threadgroup=(P, 1, 1),
                       output_shapes=[(rows, P)], output_dtypes=[f32])
        mx.eval(o)
        return o

    def cl_bit(p):
        bi, bo = p.buffer(S), p.buffer(nbytes=4 * rows * P)
        return p.launcher("c_bitonic_rows", (rows * P,), (P,), bi, bo, p.local(4 * P), np.int32(P)), \
            lambda: p.read(bo, (rows, P))
    add("bitonic_rows %dx%d" % (rows, P), mk_bit, cl_bit, np.sort(S, axis=1), 0, 0)

    # transpose
    TR, TC = (2048, 2048) if quick else (4096, 4096)
    Y = rng.standard_normal((TR, TC), dtype=np.float32)
    Ym = mx.array(Y)

    def mk_tr():
        o, = C.TRANSPOSE(inputs=[Ym], grid=(TC, TR // 4, 1), threadgroup=(32, 8, 1), output_shapes=[(TC, TR)],
                         output_dtypes=[f32])
        mx.eval(o)
        return o

    def cl_tr(p):
        bi, bo = p.buffer(Y), p.buffer(nbytes=4 * TR * TC)
        return p.launcher("c_transpose", (TC, TR // 4), (32, 8), bi, bo, np.int32(TR), np.int32(TC)), \
            lambda: p.read(bo, (TC, TR))
    add("transpose_tiled %dx%d" % (TR, TC), mk_tr, cl_tr, Y.T, 0, 0)

    # threadgroup histogram
    nh, grid, tg, nb = (1 << 22 if quick else 1 << 24), 1 << 16, 256, 64
    H = rng.random(nh).astype(np.float32)
    Hw = rng.integers(1, 5, nh).astype(np.float32)
    Hm, Hwm = mx.array(H), mx.array(Hw)
    idx = np.minimum((H * nb).astype(np.int64), nb - 1)
    want_h = np.concatenate([np.bincount(idx, minlength=nb), np.bincount(idx, weights=Hw, minlength=nb),
                             2 * np.bincount(nb - 1 - idx, minlength=nb)])

    def mk_hist():
        outs = C.HIST_THREADGROUP(inputs=[Hm, Hwm], template=[("NB", nb)], grid=(grid, 1, 1), threadgroup=(tg, 1, 1),
                                  output_shapes=[(nb,)] * 3, output_dtypes=[mx.uint32, f32, mx.uint32], init_value=0)
        mx.eval(*outs)
        return np.concatenate([np.array(o).astype(np.float64) for o in outs])

    def cl_hist(p):
        bd, bw = p.buffer(H), p.buffer(Hw)
        zeros = np.zeros(nb, np.uint32)
        bufs = [p.buffer(zeros) for _ in range(3)]
        launch = p.launcher("c_hist_tg", (grid,), (tg,), bd, bw, *bufs, np.uint32(nh))

        def go():  # outputs start at zero on each call, as init_value=0 does
            for b in bufs:
                p.cl.enqueue_copy(p.queue, b, zeros)
            launch()

        def read():
            return np.concatenate([p.read(bufs[0], nb, np.uint32), p.read(bufs[1], nb, np.float32),
                                   p.read(bufs[2], nb, np.uint32)]).astype(np.float64)
        return go, read
    add("hist_threadgroup %dM, 64 bins" % (nh >> 20), mk_hist, cl_hist, want_h, 0, 0)

    # conv1d in blocks of 8
    nc, kc = (1 << 18 if quick else 1 << 20), 4
    Ca = rng.integers(-5, 6, nc).astype(np.float32)
    Cb = rng.integers(-3, 4, kc).astype(np.float32)
    Cam, Cbm = mx.array(Ca), mx.array(Cb)

    def mk_conv():
        o, = C.CONV1D(inputs=[Cam, Cbm], grid=(nc, 1, 1), threadgroup=(8, 1, 1), output_shapes=[(nc,)],
                      output_dtypes=[f32])
        mx.eval(o)
        return o

    def cl_conv(p):
        ba, bb, bo = p.buffer(Ca), p.buffer(Cb), p.buffer(nbytes=4 * nc)
        return p.launcher("c_conv1d", (nc,), (8,), ba, bb, bo, np.uint32(nc), np.uint32(kc)), lambda: p.read(bo, nc)
    pad = np.concatenate([Ca, np.zeros(kc, np.float32)]).astype(np.float64)
    want_c = sum(pad[j:j + nc] * Cb[j] for j in range(kc)) * np.where(np.arange(nc) % 2, 0.5, 1)
    add("conv1d_shared %dK, 8-thread groups" % (nc >> 10), mk_conv, cl_conv, want_c, 0, 0)

    # Sinkhorn-Knopp: the loop template (lockstep, per-site form) and the generated body (past the
    # per-site form's compile budget: the compact form)
    G = 256 if quick else 1024
    Z = rng.standard_normal((G, SK[0], SK[1])).astype(np.float32)
    Zm = mx.array(Z)
    want_sk = C.sinkhorn_reference(Z, SK[2])

    def cl_sk(p):
        bi, bo = p.buffer(Z), p.buffer(nbytes=Z.nbytes)
        return p.launcher("c_sinkhorn", (G * SK[3],), (SK[3],), bi, bo), lambda: p.read(bo, Z.shape)
    for label, table in (("loops", C.SINKHORN_LOOPS), ("generated, compact form", C.SINKHORN)):
        def mk_sk(sk=table[SK]):
            o, = sk(inputs=[Zm], grid=(G * SK[3], 1, 1), threadgroup=(SK[3], 1, 1), output_shapes=[Z.shape],
                    output_dtypes=[f32])
            mx.eval(o)
            return o
        add("sinkhorn %dx%d x%d (%s), %d groups" % (SK[0], SK[1], SK[2], label, G), mk_sk, cl_sk, want_sk,
            1e-4, 1e-6)

    # attention, thread 0 computing the softmax statistics, bfloat16
    Lq, Lk, D = (256, 1024, 128) if quick else (1024, 2048, 128)
    qkv = [rng.standard_normal((m, D)).astype(np.float32) for m in (Lq, Lk, Lk)]
    qkv_m = [mx.array(a).astype(mx.bfloat16) for a in qkv]
    mx.eval(*qkv_m)
    scale = 1.0 / np.sqrt(D)
    qf, kf, vf = (C.as_f32(a) for a in qkv_m)
    want_a = C.attention_reference(qf, kf, vf, scale, False)

    def mk_att():
        o = C.attention_t0(*qkv_m, scale)
        mx.eval(o)
        return C.as_f32(o)

    def cl_att(p):
        bq, bk, bv = (p.buffer(_bf16_bits(a)) for a in qkv)
        bs, bo = p.buffer(np.array([scale], np.float32)), p.buffer(nbytes=2 * Lq * D)

        def read():
            return (p.read(bo, (Lq, D), np.uint16).astype(np.uint32) << 16).view(np.float32)
        return p.launcher("c_attention_t0", (Lq * D,), (D,), bq, bk, bv, bs, bo, np.int32(Lk)), read
    add("attention, thread-0 stats, bf16 %dx%dx%d" % (Lq, Lk, D), mk_att, cl_att, want_a, 2e-2, 2e-2)
    return cases


def _cpu_s():
    """CPU seconds of this process and its waited-for children (the compiler and the pass):
    the compile time on an idle machine, whatever the load while the benchmark runs."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def _compile_rows(C, rows):
    """Every corpus test once, first parameter set, with an empty kernel cache."""
    tests = [(n, f) for n, f in inspect.getmembers(C, inspect.isfunction) if n.startswith("test_")]
    # the compiler and the pass as programs per kernel: their CPU time is then a waited-for
    # child's (the servers kept up would not count until they exit)
    names = ("MKPY_CACHE_DIR", "MKPY_NO_PASS_SERVER", "MKPY_NO_CC_SERVER")
    saved = {k: os.environ.get(k) for k in names}
    with tempfile.TemporaryDirectory(prefix="mkpy-bench-corpus-") as d:
        os.environ.update(MKPY_CACHE_DIR=d, MKPY_NO_PASS_SERVER="1", MKPY_NO_CC_SERVER="1")
        try:
            for name, fn in sorted(tests):
                params = {}
                for m in getattr(fn, "pytestmark", []):
                    if m.name == "parametrize":
                        names = [s.strip() for s in m.args[0].split(",")] if isinstance(m.args[0], str) else m.args[0]
                        first = m.args[1][0]
                        params.update(zip(names, first if len(names) > 1 else [first]))
                want = list(inspect.signature(fn).parameters)
                if any(w not in params for w in want):
                    continue  # needs a fixture
                mx.metal.clear_kernel_cache()
                before = mx.metal.kernel_cache_info()["compiles"]
                t0 = _cpu_s()
                ok = True
                try:
                    fn(**params)
                except Exception as e:  # a failing test is a failed check, not a crash of the run
                    ok = False
                    progress("corpus compile: %s failed: %s" % (name, str(e).splitlines()[0][:100]))
                dt = _cpu_s() - t0
                n = mx.metal.kernel_cache_info()["compiles"] - before
                if n == 0:
                    continue
                per = dt / n
                rows.append(row(SECTION, "compile: %s" % name[5:], value=per, value_text="%.2f s/kernel" % per,
                                ref_name="budget", ref_value=2.0, ref_text="2 s", ratio=2.0 / per,
                                target=COMPILE_BUDGET, check=ok,
                                note="%d kernel%s" % (n, "s" if n > 1 else "") if ok else "TEST FAILED"))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            mx.metal.clear_kernel_cache()


def run(opts):
    import test_kernel_corpus as C
    rows = []
    progress("corpus: compile budget, every test once with an empty cache")
    _compile_rows(C, rows)
    pocl, why = open_pocl(CORPUS_CL, SK_DEFS)  # after the tests, some of which fault on purpose
    if pocl is None:
        progress("PoCL columns n/a: " + why)
    budget = 2.0 if opts.quick else 4.0
    for name, mk, pocl_setup, want, rtol, atol in _cases(C, opts.quick):
        progress("corpus: " + name)
        ok = _ok(mk(), want, rtol, atol)
        contenders = {"mkpy": mk}
        if pocl:
            launch, read = pocl_setup(pocl)
            launch()
            ok = ok and _ok(read(), want, rtol, atol)
            contenders["pocl"] = launch
        best = compare(contenders, warmup=1, min_reps=2, max_reps=5, budget_s=budget)
        t = best["mkpy"]
        if "pocl" in best:
            rows.append(row(SECTION, name, value=t, value_text="%.3g ms" % (t * 1e3), ref_name="PoCL",
                            ref_value=best["pocl"], ref_text="%.3g ms" % (best["pocl"] * 1e3),
                            ratio=time_ratio(t, best["pocl"]), target=VS_POCL, check=ok,
                            note="" if ok else "RESULT CHECK FAILED"))
        else:
            rows.append(row(SECTION, name, value=t, value_text="%.3g ms" % (t * 1e3), ref_name="PoCL", ref_text="n/a",
                            target=VS_POCL, check=ok, note=why))
    return rows


if __name__ == "__main__":
    import run_all
    run_all.main(["--only", SECTION])
