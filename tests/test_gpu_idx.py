"""GPU indexing and data movement (csrc/backend/cuda/ops_idx.c; argmax and argmin in ops_red.c)
against the CPU's evaluators: gathers, scatters, put_along_axis, concatenate, pad, fills, integer
arange, arg reductions and scans for every dtype, strided and broadcast, with negative,
out-of-range, repeated and uint64 indices. The same graphs run on the GPU stream and in a
subprocess under MKPY_GPU=cpu; results must be equal bit for bit, except float scatter sums and
products over repeated targets (docs/design.md, "GPU indexing and data movement"). Skipped without
a GPU unless MKPY_REQUIRE_GPU=1.
"""
import os

import numpy as np
import pytest

import mkpy as mx
from gpu_compare import TERMS, collector, cpu_results, magnitudes, mismatches

if not mx.cuda.is_available() and not os.environ.get("MKPY_GPU_OPS_CHILD"):
    if os.environ.get("MKPY_REQUIRE_GPU") == "1":
        raise RuntimeError("MKPY_REQUIRE_GPU=1 but mx.cuda.is_available() is False")
    pytest.skip("no NVIDIA GPU (mx.cuda.is_available() is False)", allow_module_level=True)

from test_gpu_ops import DTYPES, INEXACT, _arr, _values  # noqa: E402 (after the skip)


def _index(dtype, shape, lo, hi, seed):
    """Index values in [lo, hi) (negative ones and ones past the axis included) of an integer dtype."""
    rng = np.random.default_rng(seed)
    return mx.array(rng.integers(lo, hi, shape).astype(dtype))


def compute():
    """Every case's result (gpu_compare.collector), keyed by name."""
    out, put = collector()
    idx_dtypes = ["uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"]
    # uint64 indices past int64's range read as its maximum (then clamped, or dropped)
    huge = mx.array(np.array([0, 2 ** 63 + 5, 3, 2 ** 64 - 1], dtype=np.uint64))
    for dt in DTYPES:
        x = _arr(dt, (7, 9), 11)
        xt = _arr(dt, (9, 7), 12).T  # strided
        x3 = _arr(dt, (4, 5, 6), 13)
        for it in idx_dtypes:
            signed = it.startswith("int")
            i1 = _index(it, (3, 4), -9 if signed else 0, 12, 21)  # negative and out-of-range entries
            put(("take", dt, it), lambda: mx.take(x, i1, axis=0))
            put(("take-axis1", dt, it), lambda: mx.take(xt, i1, axis=1))
            put(("take-flat", dt, it), lambda: mx.take(x, i1))
            put(("getitem-mid", dt, it), lambda: x3[1:4:2, i1, ::-2])
            ia = _index(it, (7, 3), -9 if signed else 0, 11, 22)
            put(("take_along_axis", dt, it), lambda: mx.take_along_axis(x, ia, axis=1))
            put(("take_along_axis-bcast", dt, it),
                lambda: mx.take_along_axis(xt[:, :1], _index(it, (1, 5), -2 if signed else 0, 3, 23), axis=0))
        put(("take-uint64-huge", dt), lambda: mx.take(x, huge, axis=0))
        j0, j1 = _index("int32", (2, 1, 3), -6, 6, 24), _index("int64", (4, 1), -6, 8, 25)
        put(("gather-2arrays", dt), lambda: x3[j0, :, j1])  # two arrays broadcast, apart: B first
        put(("gather-2arrays-adjacent", dt), lambda: x3[:, j0, j1])
        put(("gather-int-array", dt), lambda: x3[2, :, j1])
        put(("gather-strided", dt), lambda: mx.transpose(x3, (2, 0, 1))[j0, 1:3])
        # scatters: repeated, negative and out-of-range indices (dropped)
        iu = mx.array(np.array([2, -1, 2, 9, -8, 0, 6, 2], dtype=np.int32))
        v = _arr(dt, (8, 9), 14)
        vrow = _arr(dt, (9,), 15)

        def setitem(key, val, base=x):
            y = mx.array(base)
            y[key] = val
            return y

        put(("setitem-rows", dt), lambda: setitem(iu, v))  # repeated rows: the last one wins
        put(("setitem-bcast", dt), lambda: setitem(iu, vrow))
        put(("setitem-scalar", dt), lambda: setitem((iu, 3), _arr(dt, (1,), 16)[0]))
        put(("setitem-slices", dt), lambda: setitem((slice(1, 7, 2), slice(None, None, -3)), _arr(dt, (3, 3), 17)))
        put(("setitem-strided-base", dt), lambda: setitem((slice(1, 3), iu[:3]), _arr(dt, (2, 3), 18), xt))
        put(("setitem-2arrays", dt), lambda: setitem((j0, slice(None), j1), _arr(dt, (4, 3, 5), 19), x3))
        for op in ["add", "subtract", "multiply", "maximum", "minimum"]:
            put(("at-" + op, dt), lambda: getattr(x.at[iu], op)(v))
            put(("at-slices-" + op, dt), lambda: getattr(x.at[1:6:2, 2:], op)(_arr(dt, (3, 7), 20)))
            put(("at-2arrays-" + op, dt), lambda: getattr(x3.at[j0, :, j1], op)(_arr(dt, (4, 3, 5), 26)))
            if op in ("add", "subtract") and dt in INEXACT:
                # the terms' magnitudes of these float sums over repeated targets (gpu_compare.TERMS)
                put((TERMS, "at-" + op, dt), lambda: magnitudes(x).at[iu].add(magnitudes(v)))
                put((TERMS, "at-2arrays-" + op, dt),
                    lambda: magnitudes(x3).at[j0, :, j1].add(magnitudes(_arr(dt, (4, 3, 5), 26))))
        put(("slice_update", dt), lambda: mx.slice_update(x3, _arr(dt, (2, 5, 3), 27), mx.array([1, 2]), axes=(0, 2)))
        put(("slice_update-clamped", dt), lambda: mx.slice_update(x, _arr(dt, (3,), 28), mx.array([6, 8]), axes=(0, 1)))
        ip = _index("int32", (7, 5), -9, 9, 29)
        put(("put_along_axis", dt), lambda: mx.put_along_axis(x, ip, _arr(dt, (7, 5), 30), axis=1))
        put(("put_along_axis-bcast", dt), lambda: mx.put_along_axis(xt, ip[:2, :1], _arr(dt, (1,), 31), axis=0))
        if dt not in ("bool_", "complex64"):
            # take_along_axis's vjp is a put_along_axis with a sum
            put(("put_along_axis-sum", dt), lambda: mx.grad(lambda a: mx.take_along_axis(a, ip, axis=1).sum())(
                x.astype(mx.float32)))
        # copies
        put(("concatenate", dt), lambda: mx.concatenate([x, xt[:2], x[::-3]], axis=0))
        put(("concatenate-axis1", dt),
            lambda: mx.concatenate([x3[:, :2], mx.transpose(_arr(dt, (4, 6, 3), 38), (0, 2, 1))], axis=1))
        put(("concatenate-flat", dt), lambda: mx.concatenate([x, xt], axis=None))
        for mode in ["constant", "edge", "reflect", "symmetric"]:
            put(("pad-" + mode, dt), lambda: mx.pad(xt, ((2, 3), (4, 1)), mode=mode))
        put(("pad-value", dt), lambda: mx.pad(x3[:, ::2], ((0, 1), (2, 0), (1, 1)), constant_values=_arr(dt, (1,), 32)[0]))
        # arg reductions: ties, nans, signed zeros, long and strided runs
        z = _arr(dt, (6, 50, 70), 33)
        ties = mx.array(np.repeat(_values(dt, 12, 34), 37).reshape(12, 37))
        for f in (mx.argmax, mx.argmin):
            for axis in [None, 0, 1, 2]:
                put(("arg", f.__name__, dt, axis), lambda: f(z, axis=axis))
            put(("arg-ties", f.__name__, dt), lambda: f(ties, axis=0))
            put(("arg-ties-flat", f.__name__, dt), lambda: f(ties))
            put(("arg-strided", f.__name__, dt), lambda: f(mx.transpose(z, (2, 0, 1))[::2], axis=1, keepdims=True))
        # scans: along each axis, reversed, exclusive, strided
        for op in ["cumsum", "cumprod", "cummax", "cummin"]:
            f = getattr(mx, op)
            zs = z[:, :3, :] if op == "cumprod" else z  # (products of ~4s overflow to inf either way)
            for axis in [0, 1, 2]:
                put(("scan", op, dt, axis), lambda: f(zs, axis=axis))
            put(("scan-rev-excl", op, dt), lambda: f(zs, axis=1, reverse=True, inclusive=False))
            put(("scan-excl", op, dt), lambda: f(zs, axis=2, inclusive=False))
            put(("scan-strided", op, dt), lambda: f(mx.transpose(zs, (2, 0, 1))[::3], axis=2, reverse=True))
            put(("scan-flat", op, dt), lambda: f(ties))
        # fills
        put(("zeros", dt), lambda: mx.zeros((5, 3), getattr(mx, dt)))
        put(("ones", dt), lambda: mx.ones((5, 3), getattr(mx, dt)))
        put(("full", dt), lambda: mx.full((4, 3), -2.5, getattr(mx, dt)))
        put(("full-array", dt), lambda: mx.full((4, 9), xt[:1, :], getattr(mx, dt)))
        if dt not in ("bool_", "float16", "bfloat16", "float32", "complex64"):
            put(("arange", dt), lambda: mx.arange(-5, 300, 7, dtype=getattr(mx, dt)))
    for dt in ["float32", "int16"]:
        x = _arr(dt, (7, 9), 40)
        none = mx.array(np.zeros((0,), np.int32))
        put(("scatter-uint64-huge", dt), lambda: x.at[huge].add(_arr(dt, (4, 9), 41)))
        iu8 = mx.array(np.array([6, 0, 6], np.uint8))
        put(("scatter-uint8", dt), lambda: x.at[iu8].add(_arr(dt, (3, 9), 42)))
        if dt in INEXACT:
            put((TERMS, "scatter-uint8", dt), lambda: magnitudes(x).at[iu8].add(magnitudes(_arr(dt, (3, 9), 42))))
        put(("empty-scatter", dt), lambda: x.at[none].add(_arr(dt, (0, 9), 43)))
        put(("empty-slice-update", dt), lambda: x.at[2:2].add(_arr(dt, (1,), 44)))
        put(("empty-put_along_axis", dt), lambda: mx.put_along_axis(x, none.reshape(1, 0), x[:1, :1], axis=1))
        put(("empty-take", dt), lambda: mx.take(x, none, axis=1))
        put(("empty-concatenate", dt), lambda: mx.concatenate([x[:0], x[:2]]))
        put(("empty-pad", dt), lambda: mx.pad(x[:0], ((1, 2), (0, 1))))
    big = mx.array(np.random.default_rng(35).standard_normal(1 << 22).astype(np.float32))
    big_nan = mx.where(mx.arange(1 << 22) % 999983 == 0, mx.array(np.nan), big)
    for f in (mx.argmax, mx.argmin):
        put(("arg-big", f.__name__), lambda: f(big))
        put(("arg-big-nan", f.__name__), lambda: f(big_nan))
        put(("arg-big-cols", f.__name__), lambda: f(big.reshape(1024, 4096), axis=0))
        put(("arg-big-rows", f.__name__), lambda: f(big.reshape(4, 1 << 20), axis=1))
    emb = mx.array(np.random.default_rng(36).standard_normal((5000, 64)).astype(np.float32)).astype(mx.bfloat16)
    put(("embedding",), lambda: emb[_index("int32", (3, 17), -5000, 5000, 37)])
    return out


def _tolerance(key, dtype):
    # float sums and products over repeated targets: the GPU's order of atomic updates. Sums are
    # within eps times their terms' magnitudes (gpu_compare.TERMS), products within a few roundings
    # relative to the result. (put_along_axis-sum adds ones: exact in any order.)
    if dtype.kind not in "fc":
        return None
    if key[0] in ("at-add", "at-subtract", "at-2arrays-add", "at-2arrays-subtract", "scatter-uint8"):
        return TERMS
    if key[0] in ("at-multiply", "at-2arrays-multiply"):
        return 1e-5
    return None


@pytest.fixture(scope="module")
def both():
    return compute(), cpu_results("test_gpu_idx")


def test_indexing_and_data_movement_match_the_cpu(both):
    gpu, cpu = both
    bad = mismatches(gpu, cpu, _tolerance)
    assert not bad, "\n".join(map(str, bad[:40])) + f"\n({len(bad)} cases)"


def test_an_llm_step_stays_on_the_gpu():
    """An mlx-lm-like decoding step on GPU-resident arrays: an embedding lookup (gather), keys written into
    a cache by slice assignment (as mlx-lm's KVCache) and by slice_update, the cache's window concatenated
    with them, scores and argmax. Nothing comes down; what goes up is slice_update's three scalar constants
    (its window's clamp bounds). The results are then checked against NumPy."""
    rng = np.random.default_rng(0)
    emb_np = rng.standard_normal((1000, 64)).astype(np.float32)
    ids_np = np.array([[5, 17, 999, -1]], dtype=np.int32)
    emb = mx.array(emb_np).astype(mx.float16)
    ids, start, q = mx.array(ids_np), mx.array(np.array([6], np.int32)), mx.array(np.ones(16, np.float16))
    cache = mx.zeros((1, 4, 32, 16), mx.float16)
    mx.eval(emb, cache, ids + ids, start + start, q + q)  # every input on the GPU
    down0, up0 = mx.cuda._transfers()
    h = emb[ids]                                             # (1, 4 tokens, 64)
    k = h.reshape(1, 4, 4, 16).transpose(0, 2, 1, 3)         # (1, 4 heads, 4 tokens, 16)
    cache[..., 2:6, :] = k                                   # mlx-lm's KVCache update
    cache = mx.slice_update(cache, k * k, start, axes=(2,))  # positions 6..9
    keys = mx.concatenate([cache[..., :10, :], k], axis=2)   # (1, 4, 14, 16)
    scores = (keys * q).sum(-1)
    best = mx.argmax(scores, axis=-1)
    mx.eval(best, keys)
    down1, up1 = mx.cuda._transfers()
    assert (down1 - down0, up1 - up0) == (0, 3)
    e = emb_np.astype(np.float16)[np.where(ids_np < 0, ids_np + 1000, ids_np)]
    kk = e.reshape(1, 4, 4, 16).transpose(0, 2, 1, 3)
    c = np.zeros((1, 4, 32, 16), np.float16)
    c[..., 2:6, :] = kk
    c[..., 6:10, :] = kk * kk
    ref_keys = np.concatenate([c[..., :10, :], kk], axis=2)
    np.testing.assert_array_equal(np.array(keys), ref_keys)
    np.testing.assert_array_equal(np.array(best), np.argmax(np.array(scores), axis=-1))
