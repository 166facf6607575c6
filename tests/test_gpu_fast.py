"""mx.fast on the GPU (csrc/backend/cuda/ops_fast.c) against the CPU's evaluators.

rms_norm, layer_norm, rope, scaled_dot_product_attention and the softmax rows (softmax,
logsumexp) run here on the GPU stream and in a subprocess under MKPY_GPU=cpu (the CPU's
evaluators, csrc/core/ops_fast.c and ops_reduce.c). The GPU kernels take every float sum in the
CPU's order, so results must be equal bit for bit (nans compared as nans), except where
docs/design.md ("mx.fast on the GPU") says otherwise: logsumexp's log and the float16/bfloat16
softmax without precise (glibc's logf/expf against CUDA's), and the gradients (compositions of
ordinary ops whose float sums the GPU reduces in another order), within their dtype's tolerance.
Skipped without a GPU unless MKPY_REQUIRE_GPU=1.
"""
import os

import numpy as np
import pytest

import mkpy as mx
from gpu_compare import collector, compared, cpu_results, same_bits

if not mx.cuda.is_available() and not os.environ.get("MKPY_GPU_OPS_CHILD"):
    if os.environ.get("MKPY_REQUIRE_GPU") == "1":
        raise RuntimeError("MKPY_REQUIRE_GPU=1 but mx.cuda.is_available() is False")
    pytest.skip("no NVIDIA GPU (mx.cuda.is_available() is False)", allow_module_level=True)

FLOATS = ["float16", "bfloat16", "float32"]


def _arr(shape, dtype, seed, scale=1.0, special=False):
    rng = np.random.default_rng(seed)
    v = (rng.standard_normal(shape) * scale).astype(np.float32)
    if special:  # infinities and nans in a few rows
        flat = v.reshape(-1, v.shape[-1])
        flat[0, 1] = np.inf
        flat[1, 2] = -np.inf
        flat[2, 0] = np.nan
        flat[3, :] = -np.inf
    return mx.array(v).astype(getattr(mx, dtype))


def _strided(shape, dtype, seed):
    """An array of `shape` whose last two dims are a transposed view."""
    s = list(shape)
    s[-1], s[-2] = s[-2], s[-1]
    return mx.swapaxes(_arr(tuple(s), dtype, seed), -1, -2)


def compute():
    """Every case's result as NumPy (bfloat16 as its bits), keyed by name."""
    out, put = collector()

    F = mx.fast
    for dt in FLOATS:
        t = getattr(mx, dt)
        # ---- norms: rows of 64 (many rows), 4096 (a few), 1000 (odd), strided, 1-d
        for shape in [(3, 5, 64), (3, 4096), (7, 1000), (64,)]:
            x = _arr(shape, dt, 1, 3.0)
            n = shape[-1]
            w, b = _arr((n,), dt, 2), _arr((n,), dt, 3)
            w32 = _arr((n,), "float32", 4)
            for eps in [1e-5, 0.5]:
                put(("rms", dt, shape, eps), lambda: F.rms_norm(x, w, eps))
                put(("rms-noweight", dt, shape, eps), lambda: F.rms_norm(x, None, eps))
                put(("rms-w32", dt, shape, eps), lambda: F.rms_norm(x, w32, eps))
                put(("ln", dt, shape, eps), lambda: F.layer_norm(x, w, b, eps))
                put(("ln-w", dt, shape, eps), lambda: F.layer_norm(x, w, None, eps))
                put(("ln-b", dt, shape, eps), lambda: F.layer_norm(x, None, b, eps))
                put(("ln-none", dt, shape, eps), lambda: F.layer_norm(x, None, None, eps))
                put(("ln-w32", dt, shape, eps), lambda: F.layer_norm(x, w32, b.astype(mx.float32), eps))
        xs = _strided((6, 96), dt, 5)
        wb = mx.broadcast_to(_arr((1,), dt, 6), (6,))  # a weight of stride 0
        put(("rms-strided", dt), lambda: F.rms_norm(xs, _arr((96,), dt, 7), 1e-5))
        put(("ln-strided", dt), lambda: F.layer_norm(xs.T, wb, _arr((6,), dt, 8), 1e-5))
        put(("rms-special", dt), lambda: F.rms_norm(_arr((5, 33), dt, 9, special=True), None, 1e-5))
        put(("ln-special", dt), lambda: F.layer_norm(_arr((5, 33), dt, 9, special=True), None, None, 1e-5))
        put(("rms-int", dt), lambda: F.rms_norm(mx.arange(24, dtype=mx.int32).reshape(4, 6), _arr((6,), dt, 10),
                                                1e-5))

        # ---- rope
        x4 = _arr((2, 3, 11, 16), dt, 11, 2.0)
        x3 = _arr((4, 9, 32), dt, 12, 2.0)
        xt = mx.transpose(_arr((2, 11, 3, 16), dt, 13), (0, 2, 1, 3))  # (B, T, H, D) seen as (B, H, T, D)
        offs = mx.array([3, 40], dtype=mx.int32)
        offs_u = mx.array([7, 0], dtype=mx.uint32)
        freqs = mx.array(np.geomspace(1.0, 5000.0, 4).astype(np.float32))
        for trad in [False, True]:
            for dims in [16, 8]:
                put(("rope", dt, trad, dims), lambda: F.rope(x4, dims, traditional=trad, base=10000.0, scale=1.0,
                                                              offset=5))
                put(("rope-scale", dt, trad, dims),
                    lambda: F.rope(x4, dims, traditional=trad, base=500.0, scale=0.25, offset=1000))
                put(("rope-offs", dt, trad, dims),
                    lambda: F.rope(x4, dims, traditional=trad, base=10000.0, scale=1.0, offset=offs))
                put(("rope-offs-u32", dt, trad, dims),
                    lambda: F.rope(x4, dims, traditional=trad, base=10000.0, scale=1.0, offset=offs_u))
                put(("rope-strided", dt, trad, dims),
                    lambda: F.rope(xt, dims, traditional=trad, base=10000.0, scale=2.0, offset=-3))
            put(("rope-freqs", dt, trad), lambda: F.rope(x4, 8, traditional=trad, base=None, scale=1.0, offset=2,
                                                          freqs=freqs))
            put(("rope-3d", dt, trad), lambda: F.rope(x3, 32, traditional=trad, base=10000.0, scale=1.0,
                                                       offset=mx.array(7)))
            put(("rope-5d", dt, trad), lambda: F.rope(_arr((2, 2, 3, 5, 8), dt, 14), 6, traditional=trad,
                                                       base=10000.0, scale=1.0, offset=0))
        put(("rope-vjp", dt), lambda: mx.grad(lambda a: (F.rope(a, 16, traditional=False, base=10000.0, scale=1.0,
                                                                 offset=3) * x4).sum())(x4))

        # ---- attention: GQA, lengths across tiles, masks, sinks, strided q
        for (B, Nq, Nkv, Tq, Tk, D, Dv) in [(2, 4, 4, 7, 13, 32, 32), (1, 8, 2, 70, 150, 64, 48),
                                            (2, 6, 1, 1, 200, 80, 80), (1, 4, 2, 9, 9, 16, 16),
                                            (1, 2, 2, 20, 5, 8, 8)]:
            q = _arr((B, Nq, Tq, D), dt, 20, 1.5)
            k = _arr((B, Nkv, Tk, D), dt, 21, 1.5)
            v = _arr((B, Nkv, Tk, Dv), dt, 22)
            sc = 1.0 / np.sqrt(D)
            key = (dt, B, Nq, Nkv, Tq, Tk, D, Dv)
            bmask = mx.array(np.random.default_rng(23).random((Tq, Tk)) > 0.3)
            amask = _arr((1, Nq, Tq, Tk), dt, 24)
            sinks = _arr((Nq,), dt, 25)
            put(("sdpa",) + key, lambda: F.scaled_dot_product_attention(q, k, v, scale=sc))
            put(("sdpa-causal",) + key, lambda: F.scaled_dot_product_attention(q, k, v, scale=sc, mask="causal"))
            put(("sdpa-bool",) + key, lambda: F.scaled_dot_product_attention(q, k, v, scale=sc, mask=bmask))
            put(("sdpa-add",) + key, lambda: F.scaled_dot_product_attention(q, k, v, scale=sc, mask=amask))
            put(("sdpa-sinks",) + key, lambda: F.scaled_dot_product_attention(q, k, v, scale=sc, mask="causal",
                                                                              sinks=sinks))
        qt = mx.transpose(_arr((2, 33, 4, 32), dt, 26), (0, 2, 1, 3))
        kt = mx.transpose(_arr((2, 40, 2, 32), dt, 27), (0, 2, 1, 3))
        vt = mx.transpose(_arr((2, 40, 2, 32), dt, 28), (0, 2, 1, 3))
        put(("sdpa-strided", dt), lambda: F.scaled_dot_product_attention(qt, kt, vt, scale=0.2, mask="causal"))
        qs = _arr((1, 2, 4, 8), dt, 29, special=True)
        ks = _arr((1, 2, 6, 8), dt, 30)
        put(("sdpa-special", dt), lambda: F.scaled_dot_product_attention(qs, ks, ks, scale=1.0))
        ninf = mx.array(np.where(np.arange(6) < 3, 0.0, -np.inf).astype(np.float32)).astype(t)
        put(("sdpa-neginf-mask", dt), lambda: F.scaled_dot_product_attention(_arr((1, 2, 3, 8), dt, 36), ks, ks,
                                                                              scale=1.0, mask=ninf))
        if dt == "float32":
            # 8256 x 8192 scores: more than the GPU's 256 MiB of scratch per launch, so the three
            # kernels run in two chunks of query tiles
            qc, kc = _arr((1, 1, 8256, 16), dt, 37), _arr((1, 1, 8192, 16), dt, 38)
            put(("sdpa-chunked", dt), lambda: F.scaled_dot_product_attention(qc, kc, kc, scale=0.25,
                                                                              mask="causal"))
        put(("sdpa-vjp", dt), lambda: mx.grad(lambda a: F.scaled_dot_product_attention(
            a, kt, vt, scale=0.2, mask="causal").astype(mx.float32).sum())(qt))

        # ---- softmax rows (many short rows; a few long rows that the CPU splits into parts)
        for shape in [(20, 300), (3, 70000), (1, 300000), (40, 5)]:
            x = _arr(shape, dt, 31, 4.0)
            put(("softmax", dt, shape), lambda: mx.softmax(x, axis=-1, precise=True))
            put(("softmax-low", dt, shape), lambda: mx.softmax(x, axis=-1))
            put(("logsumexp", dt, shape), lambda: mx.logsumexp(x, axis=-1))
        xsp = _arr((6, 40), dt, 32, special=True)
        put(("softmax-special", dt), lambda: mx.softmax(xsp, axis=-1, precise=True))
        put(("logsumexp-special", dt), lambda: mx.logsumexp(xsp, axis=-1, keepdims=True))
        xst = _strided((9, 50), dt, 33)
        put(("softmax-strided", dt), lambda: mx.softmax(xst, axis=-1, precise=True))
        put(("logsumexp-strided", dt), lambda: mx.logsumexp(xst, axis=-1))
        x2 = _arr((6, 64), dt, 34)
        w2 = _arr((64,), dt, 35)
        put(("rms-vjp", dt), lambda: mx.grad(lambda a: F.rms_norm(a, w2, 1e-5).astype(mx.float32).sum())(x2))
        put(("ln-vjp", dt), lambda: mx.grad(lambda a: (F.layer_norm(a, w2, w2, 1e-5) * x2).astype(mx.float32)
                                            .sum())(x2))
    return out


# Cases compared within a tolerance (docs/design.md, "mx.fast on the GPU"): logsumexp's logf and
# softmax's expf (without precise) are glibc's on the CPU and CUDA's double functions rounded to
# float here; the gradients are compositions of ordinary ops, whose float sums the GPU's
# reductions take in another order.
# (rope's vjp is rope itself, with the scale negated: bit for bit.)
APPROX = {"logsumexp", "logsumexp-special", "logsumexp-strided", "softmax-low", "sdpa-vjp", "rms-vjp", "ln-vjp"}


@pytest.fixture(scope="module")
def both():
    return compute(), cpu_results("test_gpu_fast")


def _as_float(kind, a):
    return compared(kind, a).astype(np.float32)


def test_fast_ops_match_the_cpu(both):
    gpu, cpu = both
    assert gpu.keys() == cpu.keys()
    errors = [k for k, (kind, _) in cpu.items() if kind == "error"]
    assert not errors, errors  # every case is valid input
    bad = []
    for key, (gk, g) in gpu.items():
        ck, c = cpu[key]
        if gk != ck:
            bad.append((key, "kind", gk, ck))
            continue
        if same_bits(compared(gk, g), compared(ck, c)):  # (bfloat16 as float32: any nan equals any nan)
            continue
        if key[0] not in APPROX:
            diff = np.flatnonzero(~((g == c) | (np.isnan(_as_float(gk, g)) & np.isnan(_as_float(ck, c)))))
            bad.append((key, "not bit-exact", diff[:5], g.ravel()[diff[:5]], c.ravel()[diff[:5]]))
            continue
        dt = key[1]
        gf, cf = _as_float(gk, g), _as_float(ck, c)
        if key[0].endswith("vjp"):
            rtol = {"float16": 1e-2, "bfloat16": 5e-2, "float32": 1e-5}[dt]
            atol = rtol * float(np.max(np.abs(cf[np.isfinite(cf)]), initial=1.0))
        else:
            # a few ulp (softmax without precise: an exponential an ulp off moves the row's sum and
            # so every output an ulp or two); logsumexp's log(sum) + max may cancel: absolute too
            rtol, atol = {"float16": (4e-3, 1e-3), "bfloat16": (3e-2, 1e-2), "float32": (3e-7, 5e-6)}[dt]
        try:
            np.testing.assert_allclose(gf, cf, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            bad.append((key, "beyond tolerance", str(e)[:300]))
    assert not bad, "\n".join(map(str, bad[:40])) + f"\n({len(bad)} cases)"


def test_a_transformer_block_stays_on_the_gpu():
    """rms_norm -> matmul -> rope -> sdpa -> matmul, and a softmax: nothing comes down to the host."""
    rng = np.random.default_rng(0)
    B, T, H, Dh = 2, 24, 4, 16
    dim = H * Dh
    x = mx.array(rng.standard_normal((B, T, dim)).astype(np.float32))
    wn = mx.array(rng.standard_normal(dim).astype(np.float32))
    wq, wk, wv, wo = (mx.array((rng.standard_normal((dim, dim)) / 8).astype(np.float32)) for _ in range(4))
    mx.eval(x + 0, wn + 0, wq + 0, wk + 0, wv + 0, wo + 0)  # every input is on the GPU now

    def block(x):
        h = mx.fast.rms_norm(x, wn, 1e-5)
        q, k, v = (mx.transpose((h @ w.T).reshape(B, T, H, Dh), (0, 2, 1, 3)) for w in (wq, wk, wv))
        q = mx.fast.rope(q, Dh, traditional=False, base=10000.0, scale=1.0, offset=4)
        k = mx.fast.rope(k, Dh, traditional=False, base=10000.0, scale=1.0, offset=4)
        o = mx.fast.scaled_dot_product_attention(q, k, v, scale=Dh ** -0.5, mask="causal")
        y = mx.transpose(o, (0, 2, 1, 3)).reshape(B, T, dim) @ wo.T
        return y, mx.softmax(y, axis=-1, precise=True)

    down0, up0 = mx.cuda._transfers()
    y, p = block(x)
    mx.eval(y, p)
    down1, up1 = mx.cuda._transfers()
    # nothing comes down; the two rope offsets (Python ints) are host arrays that go up once each
    assert (down1 - down0, up1 - up0) == (0, 2)
    # the same block on the CPU stream
    with mx.stream(mx.cpu):
        yc, pc = block(x)
        mx.eval(yc, pc)
    # cuBLAS's matmuls sum in another order than the CPU's: a tolerance
    np.testing.assert_allclose(np.array(y), np.array(yc), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.array(p), np.array(pc), rtol=1e-4, atol=1e-6)
