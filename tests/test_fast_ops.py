"""mx.fast reference ops (rms_norm, layer_norm, rope, scaled_dot_product_attention)
against NumPy references, with signatures, dtypes, error messages and exact values
obtained from MLX 0.32.4 (CPU).

MLX's CPU back end runs these ops as graphs of ordinary ops: sums are sequential in
float32, each op rounds to the array's dtype. The norm references below replay those
steps in NumPy float32 with mkpy's own mean (a fused norm gives the bits of its composition,
as in MLX) and must match to the bit; rope and attention use MLX's own
exp/sin/cos, so they are compared with float64 references within tolerance, plus
exact values baked from MLX for small inputs."""
import inspect
import re

import numpy as np
import pytest

import mkpy as mx

F32 = np.float32
HALF = ("float16", "bfloat16")
FLOATS = ("float32", "float16", "bfloat16")


def det(shape, seed):
    """Deterministic dyadic values in [-3, 3] (exact in every float dtype)."""
    n = int(np.prod(shape))
    return ((((np.arange(n) * (7 + 2 * seed) + seed * 13) % 97) - 48) / 16).reshape(shape).astype(F32)


def randn(shape, seed, s=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * s).astype(F32)


def bf16_round(a):
    a = np.asarray(a, F32)
    u = a.view(np.uint32).astype(np.uint64)
    r = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(F32)
    return np.where(np.isnan(a), a, r)


def rnd(a, dt):
    """float32 values rounded to dtype dt (and back to float32)."""
    a = np.asarray(a, F32)
    if dt == "float16":
        return a.astype(np.float16).astype(F32)
    if dt == "bfloat16":
        return bf16_round(a)
    return a


def arr(a, dt):
    return mx.array(np.asarray(a, F32)).astype(getattr(mx, dt))


def dname(a):
    return str(a.dtype).split(".")[-1]


def npv(a):
    if dname(a) == "bfloat16":
        a = a.astype(mx.float32)
    return np.array(a)


def lanesum(a):
    """mkpy's float32 sums over the last axis of rows shorter than 32768, keepdims: under 16
    terms in order in double; else each block of 1024 in 8 float lanes (each in order, then
    added in order, then the block's tail), the blocks' sums added in order in double."""
    a = np.asarray(a, F32)
    n = a.shape[-1]
    if n < 16:
        return np.cumsum(a, axis=-1, dtype=np.float64)[..., -1:].astype(F32) if n else \
            np.zeros(a.shape[:-1] + (1,), F32)
    total = np.zeros(a.shape[:-1], np.float64)
    with np.errstate(all="ignore"):
        for b in range(0, n, 1024):
            m = min(1024, n - b)
            full = m - m % 8
            blk = a[..., b:b + full].reshape(a.shape[:-1] + (full // 8, 8))
            lanes = np.cumsum(blk, axis=-2, dtype=F32)[..., -1, :] if full else np.zeros(a.shape[:-1] + (8,), F32)
            t = lanes[..., 0]
            for k in range(1, 8):
                t = t + lanes[..., k]
            for i in range(b + full, b + m):
                t = t + a[..., i]
            total = total + t.astype(np.float64)
    return total.astype(F32)[..., None]


def assert_same(got, exp):
    np.testing.assert_array_equal(np.asarray(got, F32), np.asarray(exp, F32))


# ------------------------------------------------------------- signatures


@pytest.mark.parametrize("name, sig", [
    ("rms_norm", "(x, weight, eps, *, stream=None)"),
    ("layer_norm", "(x, weight, bias, eps, *, stream=None)"),
    ("rope", "(a, dims, *, traditional, base, scale, offset, freqs=None, stream=None)"),
    ("scaled_dot_product_attention", "(q, k, v, *, scale, mask=None, sinks=None, force_fused=False, stream=None)"),
])
def test_signatures(name, sig):
    assert str(inspect.signature(getattr(mx.fast, name))) == sig


# ------------------------------------------------------------------ norms


def ref_norm(x, w, b, eps, dt, layer):
    """MLX's fallback: float32 stats (mkpy's mean), cast to dt, then * w and + b in dt."""
    n = x.shape[-1]
    inv = F32(1.0 / n) if n else F32(np.inf)
    with np.errstate(all="ignore"):
        if layer:
            x = x - lanesum(x) * inv
        y = x * (F32(1) / np.sqrt(lanesum(x * x) * inv + F32(eps)))
        y = rnd(y, dt)
        if w is not None:
            y = rnd(y * w, dt)
        if b is not None:
            y = rnd(y + b, dt)
    return y


NORM_SHAPES = [(7,), (3, 5, 33), (2, 3, 4, 64), (4, 1000), (1, 1), (2, 4099)]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_rms_norm(dt, shape):
    x = rnd(randn(shape, 1, 2) + 0.5, dt)
    w = rnd(randn(shape[-1:], 2), dt)
    for weight in (w, None):
        out = mx.fast.rms_norm(arr(x, dt), None if weight is None else arr(weight, dt), 1e-5)
        assert dname(out) == dt and out.shape == shape
        assert_same(npv(out), ref_norm(x, weight, None, 1e-5, dt, False))


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("shape", NORM_SHAPES)
def test_layer_norm(dt, shape):
    x = rnd(randn(shape, 3, 2) + 0.5, dt)
    w = rnd(randn(shape[-1:], 4), dt)
    b = rnd(randn(shape[-1:], 5), dt)
    for weight, bias in ((w, b), (w, None), (None, b), (None, None)):
        out = mx.fast.layer_norm(arr(x, dt), None if weight is None else arr(weight, dt),
                                 None if bias is None else arr(bias, dt), 1e-4)
        assert dname(out) == dt and out.shape == shape
        assert_same(npv(out), ref_norm(x, weight, bias, 1e-4, dt, True))


def composed_norm(x, w, b, eps, layer):
    """MLX's fallback graph written with mkpy's ops (MLX's test_fast compares the fused ops with it)."""
    y = x.astype(mx.float32)
    if layer:
        y = y - y.mean(-1, keepdims=True)
    y = y * mx.rsqrt(y.square().mean(-1, keepdims=True) + eps)
    y = y.astype(x.dtype if w is None else w.dtype)
    if w is not None:
        y = y * w
    return y if b is None else y + b


@pytest.mark.parametrize("shape", [(4099,), (2, 4099), (3, 1025), (1, 70001), (2, 100000), (130, 300)])
def test_norm_is_its_composition(shape):
    # the same bits as the composition, also where mean() splits a long row into parts (the
    # wide range of magnitudes makes the grouping of the terms show in the sums' bits)
    x = mx.array((randn(shape, 13, 2) + 1) * np.exp(randn(shape, 113, 2)))
    w = mx.array(randn(shape[-1:], 12))
    b = mx.array(randn(shape[-1:], 13))
    assert_same(npv(mx.fast.rms_norm(x, w, 1e-5)), npv(composed_norm(x, w, None, 1e-5, False)))
    assert_same(npv(mx.fast.rms_norm(x, None, 1e-5)), npv(composed_norm(x, None, None, 1e-5, False)))
    assert_same(npv(mx.fast.layer_norm(x, w, b, 1e-5)), npv(composed_norm(x, w, b, 1e-5, True)))


def test_norm_eps_and_constant_rows():
    x = np.zeros((2, 8), F32)
    x[1] = 3.0
    # a constant row has zero variance: the result is 0 * rsqrt(eps)
    out = npv(mx.fast.layer_norm(arr(x, "float32"), None, None, 0.25))
    assert_same(out, np.zeros((2, 8)))
    out = npv(mx.fast.rms_norm(arr(x, "float32"), None, 0.0))
    assert np.isnan(out[0]).all() and (out[1] == 1).all()


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_norm_float64_computes_in_float32():
    x = randn((3, 17), 6, 3)
    w = randn((17,), 7)
    xd = mx.array(x).astype(mx.float64)
    wd = mx.array(w).astype(mx.float64)
    out = mx.fast.rms_norm(xd, wd, 1e-5)
    assert dname(out) == "float64"
    exp = ref_norm(x, None, None, 1e-5, "float32", False).astype(np.float64) * w.astype(np.float64)
    np.testing.assert_array_equal(np.array(out), exp)
    out = mx.fast.layer_norm(xd, None, wd, 1e-5)
    exp = ref_norm(x, None, None, 1e-5, "float32", True).astype(np.float64) + w.astype(np.float64)
    np.testing.assert_array_equal(np.array(out), exp)


def test_norm_dtype_rules():
    # as MLX: x with the weight (and the bias after a weight); without a weight, x's dtype
    x16 = arr(det((4, 6), 1), "float16")
    w32 = arr(det((6,), 2), "float32")
    b16 = arr(det((6,), 3), "float16")
    bb = arr(det((6,), 4), "bfloat16")
    assert dname(mx.fast.rms_norm(x16, w32, 1e-5)) == "float32"
    assert dname(mx.fast.rms_norm(x16, bb, 1e-5)) == "float32"
    assert dname(mx.fast.layer_norm(x16, None, w32, 1e-5)) == "float16"  # the bias is cast to x's dtype
    assert dname(mx.fast.layer_norm(x16, b16, w32, 1e-5)) == "float32"
    assert dname(mx.fast.layer_norm(arr(det((4, 6), 1), "float32"), None, b16, 1e-5)) == "float32"
    # integer and bool inputs normalise in float32 when the weight makes the result floating
    xi = mx.array((det((4, 6), 1) * 16).astype(np.int32))
    out = mx.fast.rms_norm(xi, b16, 1e-5)
    assert dname(out) == "float16"
    exp = ref_norm((det((4, 6), 1) * 16), det((6,), 3), None, 1e-5, "float16", False)
    assert_same(npv(out), exp)
    out = mx.fast.rms_norm(mx.array(np.array([[True, False, True]])), arr([1, 2, 3], "float32"), 1e-5)
    assert dname(out) == "float32"
    # a float16 bias without weight is rounded to float16 first
    x = det((2, 5), 5)
    bias = np.array([0.1, 0.2, 0.3, 0.4, 1e-4], F32)
    out = mx.fast.layer_norm(arr(x, "float16"), None, arr(bias, "float32"), 1e-5)
    assert_same(npv(out), ref_norm(x, None, rnd(bias, "float16"), 1e-5, "float16", True))


@pytest.mark.parametrize("dt", FLOATS)
def test_norm_views(dt):
    base = randn((6, 40, 9), 8, 2)
    x = arr(base, dt)
    w = arr(randn((18,), 9), dt)
    views = [x.transpose(2, 1, 0)[:, ::3], x.transpose(0, 2, 1), x[::2, 3:30:4, 1:]]
    for v in views:
        n = v.shape[-1]
        wv = w[: 2 * n : 2] if 2 * n <= 18 else None
        c = mx.array(np.array(v.astype(mx.float32))).astype(getattr(mx, dt))
        assert_same(npv(mx.fast.rms_norm(v, wv, 1e-5)), npv(mx.fast.rms_norm(c, wv, 1e-5)))
        assert_same(npv(mx.fast.layer_norm(v, wv, wv, 1e-5)), npv(mx.fast.layer_norm(c, wv, wv, 1e-5)))
    # broadcast input (zero strides)
    b = mx.broadcast_to(arr(det((1, 12), 3), dt), (5, 12))
    out = npv(mx.fast.rms_norm(b, None, 1e-5))
    assert_same(out, np.broadcast_to(ref_norm(rnd(det((1, 12), 3), dt), None, None, 1e-5, dt, False), (5, 12)))


def test_norm_special_values():
    x = randn((4, 9), 10)
    x[1, 3] = np.inf
    x[2, 0] = np.nan
    for layer in (False, True):
        xa = arr(x, "float32")
        out = npv(mx.fast.layer_norm(xa, None, None, 1e-5) if layer else mx.fast.rms_norm(xa, None, 1e-5))
        assert_same(out, ref_norm(x, None, None, 1e-5, "float32", layer))
        assert np.isnan(out[1:3]).any() and np.isfinite(out[[0, 3]]).all()


def test_norm_empty():
    for f in (lambda a, w: mx.fast.rms_norm(a, w, 1e-5), lambda a, w: mx.fast.layer_norm(a, w, w, 1e-5)):
        assert f(mx.zeros((0, 4)), None).shape == (0, 4)
        assert f(mx.zeros((0, 4)), mx.ones(4)).shape == (0, 4)
        assert f(mx.zeros((3, 0)), mx.ones(0)).shape == (3, 0)
        assert f(mx.zeros((2, 0, 5)), None).shape == (2, 0, 5)


def test_norm_big_half_row():
    # float16 accumulates in float32: a long row of 1000s overflows float16 sums but not float32
    x = np.full((2, 5000), 1000.0, F32)
    out = npv(mx.fast.rms_norm(arr(x, "float16"), None, 1e-5))
    assert_same(out, np.ones((2, 5000)))


def raises(exc, msg, f):
    with pytest.raises(exc) as e:
        f()
    assert str(e.value) == msg, str(e.value)


def test_norm_errors():
    x = mx.ones((2, 3, 4))
    raises(ValueError, "[rms_norm] (*weight) must have the same size as the last dimension of x but has 5 elements.",
           lambda: mx.fast.rms_norm(x, mx.ones(5), 1e-5))
    raises(ValueError, "[rms_norm] (*weight) must have 1 dimension but has 2 dimensions.",
           lambda: mx.fast.rms_norm(x, mx.ones((1, 4)), 1e-5))
    raises(ValueError, "[rms_norm] Input must have at least 1 dimension but got input with 0 dimensions.",
           lambda: mx.fast.rms_norm(mx.array(1.0), None, 1e-5))
    raises(ValueError, "[rms_norm] Received unsupported type int32.",
           lambda: mx.fast.rms_norm(mx.ones(4, dtype=mx.int32), None, 1e-5))
    raises(ValueError, "[rms_norm] Received unsupported type complex64.",
           lambda: mx.fast.rms_norm(mx.ones(4, dtype=mx.complex64), None, 1e-5))
    raises(ValueError, "[layer_norm] weight must have the same size as the last dimension of x but has 5 elements.",
           lambda: mx.fast.layer_norm(x, mx.ones(5), None, 1e-5))
    raises(ValueError, "[layer_norm] bias must have the same size as the last dimension of x but has 5 elements.",
           lambda: mx.fast.layer_norm(x, None, mx.ones(5), 1e-5))
    raises(ValueError, "[layer_norm] bias must have 1 dimension but has 2 dimensions.",
           lambda: mx.fast.layer_norm(x, None, mx.ones((4, 1)), 1e-5))
    raises(ValueError, "[layer_norm] weight must have 1 dimension but has 2 dimensions.",
           lambda: mx.fast.layer_norm(x, mx.ones((4, 1)), None, 1e-5))
    raises(ValueError, "[layer_norm] Input must have at least 1 dimension but got input with 0 dimensions.",
           lambda: mx.fast.layer_norm(mx.array(2.0), None, None, 1e-5))
    raises(ValueError, "[layer_norm] Received unsupported type int32.",
           lambda: mx.fast.layer_norm(x.astype(mx.int32), None, mx.ones(4, dtype=mx.float16), 1e-5))
    raises(ValueError, "[layer_norm] Received unsupported type int32.",
           lambda: mx.fast.layer_norm(x.astype(mx.int32), mx.ones(4, dtype=mx.int32), None, 1e-5))


def bad_call(f, name):
    with pytest.raises(TypeError) as e:
        f()
    assert str(e.value).startswith(f"{name}(): incompatible function arguments."), str(e.value)


def test_norm_argument_errors():
    x = mx.ones((2, 4))
    for f in [lambda: mx.fast.rms_norm(x, None), lambda: mx.fast.rms_norm(x),
              lambda: mx.fast.rms_norm(x, 2.0, eps=1e-5), lambda: mx.fast.rms_norm([1.0, 2.0], None, 1e-5),
              lambda: mx.fast.rms_norm(np.ones(4, F32), None, 1e-5), lambda: mx.fast.rms_norm(x, None, None),
              lambda: mx.fast.rms_norm(x, None, "a"), lambda: mx.fast.rms_norm(x, None, 1e-5, 1),
              lambda: mx.fast.rms_norm(x, None, eps=1e-5, foo=1), lambda: mx.fast.rms_norm(x, np.ones(4, F32), 1e-5)]:
        bad_call(f, "rms_norm")
    for f in [lambda: mx.fast.layer_norm(x), lambda: mx.fast.layer_norm(x, None, None),
              lambda: mx.fast.layer_norm(x, None, None, 1e-5, None),
              lambda: mx.fast.layer_norm(x, None, np.ones(4), 1e-5)]:
        bad_call(f, "layer_norm")
    # keywords, ints for eps, stream=
    assert mx.fast.rms_norm(x=x, weight=None, eps=1).shape == (2, 4)
    assert mx.fast.layer_norm(x, weight=None, bias=None, eps=1e-5, stream=mx.cpu).shape == (2, 4)


# ------------------------------------------------------------------- rope


def ref_rope(x, dims, trad, base, scale, offset, freqs, dt):
    """float64 rotation with MLX's float32 positions and frequencies; cos and sin
    are rounded to dt, and each product and sum in dt."""
    shape = x.shape
    B, T = shape[0], shape[-2]
    half = dims // 2
    off = np.asarray(offset).reshape(-1).astype(np.int64).astype(np.int32)
    off = np.broadcast_to(off, (B,)).astype(F32)
    pos = (np.arange(T, dtype=F32)[None, :] + off[:, None]) * F32(scale)
    if freqs is None:
        inv = np.exp(-np.arange(half, dtype=F32) * F32(np.log(F32(base)) / F32(half)))
    else:
        inv = F32(1) / np.asarray(freqs, F32)
    theta = (pos[:, :, None] * inv).astype(np.float64)  # (B, T, half)
    c = rnd(np.cos(theta), dt)
    s = rnd(np.sin(theta), dt)
    xs = x.reshape(B, -1, T, shape[-1])
    c, s = c[:, None], s[:, None]
    if trad:
        x1, x2 = xs[..., 0:dims:2], xs[..., 1:dims:2]
    else:
        x1, x2 = xs[..., :half], xs[..., half:dims]
    o1 = rnd(rnd(x1 * c, dt) - rnd(x2 * s, dt), dt)
    o2 = rnd(rnd(x1 * s, dt) + rnd(x2 * c, dt), dt)
    out = xs.copy()
    if trad:
        out[..., 0:dims:2], out[..., 1:dims:2] = o1, o2
    else:
        out[..., :half], out[..., half:dims] = o1, o2
    return out.reshape(shape)


def rope_tol(dt):
    return {"float32": 2e-5, "float16": 4e-3, "bfloat16": 3e-2}[dt]


ROPE_CASES = [
    ((2, 3, 5, 8), 8), ((2, 7, 16), 10), ((1, 2, 3, 4, 12), 12), ((3, 2, 9, 64), 32), ((1, 1, 1, 2), 2),
]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("shape, dims", ROPE_CASES)
def test_rope(dt, shape, dims):
    x = rnd(randn(shape, 11), dt)
    for trad in (False, True):
        for off in (0, 5, mx.array(np.arange(shape[0], dtype=np.int32) * 3 + 1)):
            out = mx.fast.rope(arr(x, dt), dims, traditional=trad, base=10000.0, scale=1.0, offset=off)
            assert dname(out) == dt and out.shape == shape
            o = np.array(off) if isinstance(off, mx.array) else off
            exp = ref_rope(x, dims, trad, 10000.0, 1.0, o, None, dt)
            np.testing.assert_allclose(npv(out), exp, rtol=rope_tol(dt), atol=rope_tol(dt))
            # the features past dims pass through untouched
            assert_same(npv(out)[..., dims:], x[..., dims:])
        fr = np.linspace(1, 50, dims // 2).astype(F32)
        out = mx.fast.rope(arr(x, dt), dims, traditional=trad, base=None, scale=0.5, offset=3, freqs=arr(fr, "float32"))
        exp = ref_rope(x, dims, trad, None, 0.5, 3, fr, dt)
        np.testing.assert_allclose(npv(out), exp, rtol=rope_tol(dt), atol=rope_tol(dt))


@pytest.mark.parametrize("dt", FLOATS)
def test_rope_matches_mlx_exactly(dt):
    x = arr(det((2, 3, 8), 1), dt)
    out = mx.fast.rope(x, 6, traditional=False, base=10000.0, scale=1.0, offset=3)
    assert_same(npv(out).ravel(), MLX[f"rope_{dt}_halves"])
    out = mx.fast.rope(x, 8, traditional=True, base=500.0, scale=0.5, offset=mx.array([2, 1000]))
    assert_same(npv(out).ravel(), MLX[f"rope_{dt}_trad"])
    out = mx.fast.rope(x, 4, traditional=False, base=None, scale=2.0, offset=7, freqs=mx.array([1.5, 30.0]))
    assert_same(npv(out).ravel(), MLX[f"rope_{dt}_freqs"])


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_rope_float64():
    x = randn((2, 3, 4, 8), 12)
    out = mx.fast.rope(mx.array(x).astype(mx.float64), 8, traditional=False, base=10000.0, scale=1.0, offset=2)
    assert dname(out) == "float64"
    exp = ref_rope(x.astype(np.float64), 8, False, 10000.0, 1.0, 2, None, "float64")
    np.testing.assert_allclose(np.array(out), exp, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dt", FLOATS)
def test_rope_views_and_offsets(dt):
    xr = arr(randn((3, 4, 10, 16), 13), dt)
    for v, dims, trad in [(xr.transpose(0, 2, 1, 3), 8, False), (xr.swapaxes(2, 3), 4, True),
                          (xr[:, ::2, :, ::2], 6, False), (xr[::-1, :, 1:9], 16, True)]:
        c = mx.array(np.array(v.astype(mx.float32))).astype(getattr(mx, dt))
        for off in (2, mx.array([1, 5, 9]), mx.array([7, 1, 3], dtype=mx.int64)[::-1], np.array([4, 2, 0])):
            a = mx.fast.rope(v, dims, traditional=trad, base=10000.0, scale=1.0, offset=off)
            b = mx.fast.rope(c, dims, traditional=trad, base=10000.0, scale=1.0, offset=off)
            assert_same(npv(a), npv(b))
    # offsets of any integer dtype act as int32, 0-d arrays as ints
    x = arr(randn((2, 3, 5, 8), 14), dt)
    r0 = npv(mx.fast.rope(x, 8, traditional=False, base=100.0, scale=1.0, offset=mx.array([3, 4])))
    for off in (mx.array([3, 4], dtype=mx.uint8), mx.array([3, 4], dtype=mx.int64), mx.array([3, 4], dtype=mx.uint32)):
        assert_same(npv(mx.fast.rope(x, 8, traditional=False, base=100.0, scale=1.0, offset=off)), r0)
    r1 = npv(mx.fast.rope(x, 8, traditional=False, base=100.0, scale=1.0, offset=4))
    assert_same(npv(mx.fast.rope(x, 8, traditional=False, base=100.0, scale=1.0, offset=mx.array(4))), r1)
    assert_same(npv(mx.fast.rope(x, 8, traditional=False, base=100.0, scale=1.0, offset=mx.array([4]))), r1)
    assert_same(npv(mx.fast.rope(x, 8, traditional=False, base=100.0, scale=1.0, offset=np.int32(4))), r1)
    # negative offsets, and ints beyond int32 go through int64 -> int32 (2**32 + 4 wraps to 4)
    mx.eval(mx.fast.rope(x, 8, traditional=False, base=100.0, scale=1.0, offset=-3))
    assert_same(npv(mx.fast.rope(x, 8, traditional=False, base=100.0, scale=1.0, offset=2**32 + 4)), r1)


def test_rope_empty():
    assert mx.fast.rope(mx.zeros((2, 0, 8)), 8, traditional=False, base=10.0, scale=1.0, offset=0).shape == (2, 0, 8)
    assert mx.fast.rope(mx.zeros((0, 3, 8)), 4, traditional=True, base=10.0, scale=1.0, offset=0).shape == (0, 3, 8)


def test_rope_errors():
    x = mx.ones((2, 3, 5, 8))

    def R(a=x, dims=8, **kw):
        args = dict(traditional=False, base=10000.0, scale=1.0, offset=0)
        args.update(kw)
        return lambda: mx.fast.rope(a, dims, **args)

    raises(ValueError, "[rope] Neither base nor freqs has a value.", R(base=None))
    raises(ValueError, "[rope] Only one of base or freqs can have a value.", R(freqs=mx.ones(4)))
    raises(ValueError, "[rope] freqs must be one dimensional with size 4 but got shape (3).",
           R(base=None, freqs=mx.ones(3)))
    raises(ValueError, "[rope] freqs must be one dimensional with size 4 but got shape (4,1).",
           R(base=None, freqs=mx.ones((4, 1))))
    raises(ValueError, "[rope] dims must be even but got 7.", R(dims=7))
    raises(ValueError, "[rope] dims must be positive but got 0.", R(dims=0))
    raises(ValueError, "[rope] dims must be positive but got -2.", R(dims=-2))
    raises(ValueError, "[rope] dims must not exceed the input's last dimension (8) but got 10.", R(dims=10))
    raises(ValueError, "[rope] Input must have at least 3 dimensions but got input with 2 dimensions.",
           R(a=mx.ones((5, 8))))
    raises(ValueError, "[rope] Input must be a floating type but got int32.", R(a=mx.ones((2, 5, 8), dtype=mx.int32)))
    raises(ValueError, "[rope] offset must be a scalar or vector with 2 elements but has shape (3).",
           R(offset=mx.array([3, 4, 5])))
    raises(ValueError, "[rope] offset must have at most one dimension but has shape (1,2).",
           R(offset=mx.array([[3, 4]])))
    raises(ValueError, "[rope] offset must be an integer but got type float32.", R(offset=mx.array([3.0, 4.0])))
    raises(ValueError, "[rope] offset must be an integer but got type float32.", R(offset=2.5))
    raises(ValueError, "[rope] offset must be an integer but got type bool.", R(offset=True))
    raises(ValueError, "Invalid type list received in array initialization.", R(offset=[1, 2]))
    for f in [lambda: mx.fast.rope(x, 8, traditional=False, base=1.0, scale=1.0),
              lambda: mx.fast.rope(x, 8, traditional=False, scale=1.0, offset=0),
              lambda: mx.fast.rope(x, 8, False, 10000.0, 1.0, 0), R(offset=None), R(traditional=1),
              R(traditional=np.bool_(True)), R(dims=8.0), R(dims=2**40), R(base="a"), R(scale=None),
              R(freqs=np.ones(4, F32), base=None), R(a=np.ones((2, 3, 8), F32))]:
        bad_call(f, "rope")
    # accepted: keywords, ints for floats, numpy ints for dims, bool dims, stream=
    out = mx.fast.rope(a=x, dims=np.int32(8), traditional=True, base=10, scale=1, offset=0, stream=mx.cpu)
    assert out.shape == x.shape
    raises(ValueError, "[rope] dims must be even but got 1.", R(dims=True))


# -------------------------------------------------------------- attention


LOWEST = {"float32": np.finfo(F32).min, "float16": -65504.0, "bfloat16": -3.3895313892515355e38}


def ref_sdpa(q, k, v, scale, mask=None, sinks=None, dt="float32"):
    """float64 attention; mask "causal" (lower right), bool or additive, broadcast."""
    B, Nq, Tq, D = q.shape
    Nkv, Tk = k.shape[1], k.shape[2]
    rep = Nq // Nkv
    k = np.repeat(k.astype(np.float64), rep, axis=1)
    v = np.repeat(v.astype(np.float64), rep, axis=1)
    s = (q.astype(np.float64) * scale) @ k.swapaxes(-1, -2)
    if isinstance(mask, str):
        allowed = np.arange(Tq)[:, None] + (Tk - Tq) >= np.arange(Tk)[None, :]
        s = np.where(allowed, s, LOWEST[dt])
    elif mask is not None and mask.dtype == np.bool_:
        s = np.where(mask, s, LOWEST[dt])
    elif mask is not None:
        s = s + mask
    if sinks is not None:
        s = np.concatenate([np.broadcast_to(sinks.astype(np.float64)[None, :, None, None], (B, Nq, Tq, 1)), s], -1)
    with np.errstate(all="ignore"):
        m = s.max(-1, keepdims=True)
        e = np.exp(s - m)
        p = e / e.sum(-1, keepdims=True)
    if sinks is not None:
        p = p[..., 1:]
    return p @ v


def sdpa_tol(dt):
    return {"float32": 1e-5, "float16": 1e-2, "bfloat16": 6e-2}[dt]


SDPA_SHAPES = [  # B, Nq, Nkv, Tq, Tk, D, Dv
    (1, 1, 1, 1, 1, 4, 4), (2, 4, 2, 3, 5, 8, 6), (1, 8, 2, 17, 40, 64, 64), (2, 2, 2, 9, 9, 32, 16),
    (1, 4, 1, 1, 300, 16, 16), (1, 3, 3, 7, 5, 5, 3), (1, 2, 1, 33, 33, 20, 17),
]


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("shape", SDPA_SHAPES)
def test_sdpa(dt, shape):
    B, Nq, Nkv, Tq, Tk, D, Dv = shape
    q, k, v = (rnd(randn(s, i), dt) for i, s in enumerate([(B, Nq, Tq, D), (B, Nkv, Tk, D), (B, Nkv, Tk, Dv)]))
    scale = 1.0 / np.sqrt(D)
    add = rnd(randn((Tq, Tk), 7), dt)
    add_b = rnd(randn((B, 1, Tq, Tk), 8), dt)
    add_h = rnd(randn((Nq, 1, Tk), 9), dt)
    bm = np.random.default_rng(10).random((B, 1, Tq, Tk)) > 0.3
    bm2 = np.random.default_rng(11).random((Tk,)) > 0.5
    sinks = rnd(randn((Nq,), 12), dt)
    for mask, sk in [(None, None), ("causal", None), (add, None), (add_b, None), (add_h, None), (bm, None),
                     (bm2, None), (None, sinks), ("causal", sinks), (bm, sinks)]:
        if isinstance(mask, np.ndarray):
            mmx = mx.array(mask) if mask.dtype == np.bool_ else arr(mask, dt)
        else:
            mmx = mask
        out = mx.fast.scaled_dot_product_attention(arr(q, dt), arr(k, dt), arr(v, dt), scale=scale, mask=mmx,
                                                   sinks=None if sk is None else arr(sk, dt))
        assert dname(out) == dt and out.shape == (B, Nq, Tq, Dv)
        exp = ref_sdpa(q, k, v, scale, mask, sk, dt)
        np.testing.assert_allclose(npv(out), exp, rtol=sdpa_tol(dt), atol=sdpa_tol(dt))


@pytest.mark.parametrize("dt", FLOATS)
def test_sdpa_matches_mlx_exactly(dt):
    q, k, v = arr(det((1, 4, 3, 8), 2), dt), arr(det((1, 2, 5, 8), 3), dt), arr(det((1, 2, 5, 4), 4), dt)
    m = det((3, 5), 5)
    S = mx.fast.scaled_dot_product_attention
    assert_same(npv(S(q, k, v, scale=0.35, mask="causal")).ravel(), MLX[f"sdpa_{dt}_gqa_causal"])
    out = S(q, k, v, scale=0.35, mask=arr(m, dt), sinks=arr(det((4,), 6), dt))
    assert_same(npv(out).ravel(), MLX[f"sdpa_{dt}_add_sinks"])
    assert_same(npv(S(q, k, v, scale=0.35, mask=mx.array(m > -1.5))).ravel(), MLX[f"sdpa_{dt}_bool"])


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_sdpa_float64_and_mixed_dtypes():
    q, k, v = randn((1, 2, 4, 8), 1), randn((1, 1, 6, 8), 2), randn((1, 1, 6, 3), 3)
    f64 = [mx.array(a).astype(mx.float64) for a in (q, k, v)]
    out = mx.fast.scaled_dot_product_attention(*f64, scale=0.3, mask="causal")
    assert dname(out) == "float64"
    np.testing.assert_allclose(np.array(out), ref_sdpa(q, k, v, np.float64(F32(0.3)), "causal"), rtol=1e-6, atol=1e-6)
    # promotion: float16 with float32 gives float32; float16 with bfloat16 gives float32
    S = mx.fast.scaled_dot_product_attention
    assert dname(S(arr(q, "float16"), arr(k, "float32"), arr(v, "float16"), scale=0.3)) == "float32"
    assert dname(S(arr(q, "float16"), arr(k, "bfloat16"), arr(v, "float16"), scale=0.3)) == "float32"
    # integer and float16 masks promote to float32
    mi = (det((4, 6), 1) * 2).astype(np.int32)
    out = S(arr(q, "float32"), arr(k, "float32"), arr(v, "float32"), scale=0.3, mask=mx.array(mi))
    np.testing.assert_allclose(npv(out), ref_sdpa(q, k, v, 0.3, mi.astype(np.float64)), rtol=1e-5, atol=1e-5)
    out2 = S(arr(q, "float32"), arr(k, "float32"), arr(v, "float32"), scale=0.3, mask=arr(mi, "float16"))
    assert_same(npv(out), npv(out2))


@pytest.mark.parametrize("dt", FLOATS)
def test_sdpa_views(dt):
    q = arr(randn((2, 6, 4, 8), 1), dt).transpose(0, 2, 1, 3)
    k = arr(randn((2, 7, 2, 8), 2), dt).transpose(0, 2, 1, 3)
    v = arr(randn((2, 7, 2, 20), 3), dt).transpose(0, 2, 1, 3)[..., ::2]
    m = arr(randn((7, 6), 4), dt).T
    c = [mx.array(np.array(a.astype(mx.float32))).astype(getattr(mx, dt)) for a in (q, k, v, m)]
    S = mx.fast.scaled_dot_product_attention
    for mask, cmask in [(None, None), ("causal", "causal"), (m, c[3])]:
        assert_same(npv(S(q, k, v, scale=0.4, mask=mask)), npv(S(*c[:3], scale=0.4, mask=cmask)))


def test_sdpa_special_cases():
    S = mx.fast.scaled_dot_product_attention
    vals = np.arange(5, dtype=F32).reshape(1, 1, 5, 1)
    # causal with more queries than keys: rows before the first key see nothing (uniform weights)
    out = npv(S(mx.ones((1, 1, 7, 8)), mx.ones((1, 1, 5, 8)), mx.array(vals), scale=0.5, mask="causal")).ravel()
    assert_same(out, [2, 2, 0, 0.5, 1, 1.5, 2])
    # an all-false boolean row is uniform too; an all -inf additive row is nan
    out = npv(S(mx.ones((1, 1, 2, 2)), mx.ones((1, 1, 5, 2)), mx.array(vals), scale=1.0,
                mask=mx.array(np.array([[True] + [False] * 4, [False] * 5])))).ravel()
    assert_same(out, [0, 2])
    m = np.full((2, 5), -np.inf, F32)
    m[0, 1] = 0
    out = npv(S(mx.ones((1, 1, 2, 2)), mx.ones((1, 1, 5, 2)), mx.array(vals), scale=1.0, mask=mx.array(m))).ravel()
    assert out[0] == 1 and np.isnan(out[1])
    # no keys: zeros (with or without sinks); no queries: empty
    for kw in ({}, {"sinks": mx.ones(4)}, {"mask": "causal"}):
        out = S(mx.ones((2, 4, 3, 8)), mx.ones((2, 2, 0, 8)), mx.ones((2, 2, 0, 6)), scale=0.5, **kw)
        assert out.shape == (2, 4, 3, 6) and not np.array(out).any()
    assert S(mx.ones((2, 4, 0, 8)), mx.ones((2, 2, 5, 8)), mx.ones((2, 2, 5, 6)), scale=0.5).shape == (2, 4, 0, 6)
    # D = 0: every score is 0
    out = npv(S(mx.ones((1, 1, 2, 0)), mx.ones((1, 1, 5, 0)), mx.array(vals), scale=1.0)).ravel()
    assert_same(out, [2, 2])
    # infinite values: masked keys' probabilities of 0 still multiply them (0 * inf = nan), as a matmul does
    vinf = vals.copy()
    vinf[0, 0, 4, 0] = np.inf
    for mask in ("causal", mx.array(np.array([[True] * 4 + [False], [True] * 5]))):
        out = npv(S(mx.ones((1, 1, 2, 2)), mx.ones((1, 1, 5, 2)), mx.array(vinf), scale=1.0, mask=mask)).ravel()
        assert np.isnan(out[0]) and out[1] == np.inf


def test_sdpa_large_half_accumulates_in_float32():
    # 2048 keys of equal scores: float16 sums of the weights would stall, float32 ones do not
    S = mx.fast.scaled_dot_product_attention
    v = (np.arange(2048, dtype=F32) % 7).reshape(1, 1, 2048, 1)
    out = npv(S(mx.zeros((1, 1, 1, 4), dtype=mx.float16), mx.zeros((1, 1, 2048, 4), dtype=mx.float16),
                arr(v, "float16"), scale=1.0)).ravel()
    np.testing.assert_allclose(out, [v.mean()], rtol=2e-3)


def test_sdpa_errors():
    q, k, v = mx.ones((2, 4, 3, 8)), mx.ones((2, 2, 5, 8)), mx.ones((2, 2, 5, 6))
    S = mx.fast.scaled_dot_product_attention
    P = "[scaled_dot_product_attention] "
    raises(ValueError, P + "invalid mask option 'foo'. Must be 'causal', or an array.",
           lambda: S(q[0], k, v, scale=0.5, mask="foo"))
    raises(ValueError, P + "invalid mask option ''. Must be 'causal', or an array.",
           lambda: S(q, k, v, scale=0.5, mask=""))
    raises(ValueError, P + "input with shape (4,3,8) expected to be rank 4", lambda: S(q[0], k, v, scale=0.5))
    raises(ValueError, P + "the mask with shape (1,1,1,1,5) expected to have at most rank 4.",
           lambda: S(q, k, v, scale=0.5, mask=mx.zeros((1, 1, 1, 1, 5))))
    raises(ValueError, P + "mismatching batch dimension for input with shape (1,2,5,8).",
           lambda: S(q, mx.ones((1, 2, 5, 8)), v, scale=0.5))
    raises(ValueError, P + "mismatching batch dimension for input with shape (3,2,5,6).",
           lambda: S(q.astype(mx.int32), k, mx.ones((3, 2, 5, 6)), scale=0.5))
    raises(ValueError, P + "query, keys expected to have matching last dimension; found query shape (2,4,3,8) for keys "
           "shape (2,2,5,7).", lambda: S(q, mx.ones((2, 2, 5, 7)), v, scale=0.5))
    raises(ValueError, P + "keys, values expected to have matching n_kv_heads; found keys with n_heads 2 for values "
           "with n_heads 1.", lambda: S(q, k, mx.ones((2, 1, 5, 8)), scale=0.5))
    raises(ValueError, P + "n_heads must be a multiple of n_kv_heads, found n_heads 3 for n_kv_heads 2.",
           lambda: S(mx.ones((2, 3, 3, 8)), k, v, scale=0.5))
    raises(ValueError, P + "Received unsupported type int32.",
           lambda: S(q.astype(mx.int32), k.astype(mx.int32), v.astype(mx.int32), scale=0.5))
    raises(ValueError, P + "Received unsupported type complex64.", lambda: S(q.astype(mx.complex64), k, v, scale=0.5))
    raises(ValueError, P + "Mask type must promote to output type float32.",
           lambda: S(q, k, v, scale=0.5, mask=mx.zeros((3, 5), dtype=mx.float64, stream=mx.cpu)))
    raises(ValueError, P + "Mask type must promote to output type float16.",
           lambda: S(*(a.astype(mx.float16) for a in (q, k, v)), scale=0.5, mask=mx.zeros((3, 5))))
    raises(ValueError, "[broadcast_shapes] Shapes (2,3,5) and (2,4,3,5) cannot be broadcast.",
           lambda: S(q, k, v, scale=0.5, mask=mx.zeros((2, 3, 5))))
    raises(ValueError, "Cannot broadcast array of shape (2,1,3,5) into shape (1,4,3,5).",
           lambda: S(q[:1], k[:1], v[:1], scale=0.5, mask=mx.zeros((2, 1, 3, 5))))
    raises(ValueError, P + "Received invalid shape for sinks (2).", lambda: S(q, k, v, scale=0.5, sinks=mx.zeros(2)))
    raises(ValueError, P + "Received invalid shape for sinks (4,1).",
           lambda: S(q, k, v, scale=0.5, sinks=mx.zeros((4, 1))))
    raises(ValueError, P + "Type of sinks must promote to output type float32.",
           lambda: S(q, k, v, scale=0.5, sinks=mx.zeros(4, dtype=mx.float64, stream=mx.cpu)))
    raises(ValueError, P + "force_fused=True but no fused kernel is available: the vector attention kernel supports "
           "head dims {64, 96, 128, 192, 256} with matching query/value head dims, or query head dim 192 with value "
           "head dim 128; got query head dim 8 and value head dim 6.",
           lambda: S(q, k, v[:, :, :4], scale=0.5, force_fused=True))
    raises(ValueError, "[matmul] Last dimension of first input with shape (2,2,2,3,5) must match second to last "
           "dimension of second input with shape (2,2,1,4,8).", lambda: S(q, k, mx.ones((2, 2, 4, 8)), scale=0.5))
    raises(ValueError, "[matmul] Last dimension of first input with shape (2,2,3,5) must match second to last "
           "dimension of second input with shape (2,2,4,8).", lambda: S(q[:, :2], k, mx.ones((2, 2, 4, 8)), scale=0.5))
    for f in [lambda: S(q, k, v), lambda: S(q, k, v, 0.5), lambda: S(q, k, v, scale=None),
              lambda: S(q, k, v, scale="1"),
              lambda: S(q, k, v, scale=0.5, force_fused=1), lambda: S(q, k, v, scale=0.5, mask=3.0),
              lambda: S(q, k, v, scale=0.5, mask=np.zeros((3, 5), F32)), lambda: S(q, k, v, scale=0.5, mask=[0.0]),
              lambda: S(q, k, v, scale=0.5, mask=np.bool_(True)),
              lambda: S(np.ones((2, 4, 3, 8), F32), k, v, scale=0.5)]:
        bad_call(f, "scaled_dot_product_attention")
    # accepted: keywords, bool/array scales, stream=, force_fused=False, mask=None
    assert S(q=q, k=k, v=v, scale=True, mask=None, sinks=None, force_fused=False, stream=mx.cpu).shape == (2, 4, 3, 6)
    assert S(q, k, v, scale=mx.array(0.5)).shape == (2, 4, 3, 6)


# Exact outputs of MLX 0.32.4 (CPU) for the inputs of the *_matches_mlx_exactly tests.
MLX = {
    'rope_float32_halves': [
        2.2361686, -1.6179459, -1.0665174, 0.18629625, -0.16365187, 0.6181197, 1.1875, 1.75, -3.072456, 3.1024883,
        -2.6168234, -0.40196574, -0.9434996, -0.96008646, -0.375, 0.1875, 2.5501246, 0.587307, 1.9018213,
        -0.027766705, 3.221448, -2.4796576, -1.9375, -1.375, 0.6808889, -0.44710243, 0.29956695, -0.98090345,
        1.3888865, 2.0019782, 2.5625, -2.9375, 1.0321019, -1.7582754, -1.2537239, 2.2467859, -0.45743698, 0.4267117,
        1.0, 1.5625, -1.5547975, 3.0035768, -2.8002183, -2.6759539, -1.0241289, -1.155231, -0.5625, 0.0
    ],
    'rope_float32_trad': [
        0.18547904, -2.718709, -0.9338794, -0.71188164, 0.034495976, 0.62716925, 1.1708968, 1.7611523, -2.7042184,
        2.5100765, -1.8507044, -2.7783852, -1.433784, -1.035939, -0.37762207, 0.18216152, -1.505563, 0.13578033,
        0.7093059, 2.9923098, 3.2113168, -2.2220361, -1.9111471, -1.4113994, 0.6011846, 0.6010269, 0.91859055,
        0.13954458, -0.6181032, -2.3841884, -2.895296, -2.6100905, -0.20252621, 2.9807322, -1.2729115, 0.64409053,
        0.28262153, -0.35658985, 1.583199, -0.9668955, 2.4996676, -2.3430626, -3.536395, 0.6830565, 1.0919476,
        1.7090733, -0.014497082, 0.56231314
    ],
    'rope_float32_freqs': [
        2.2753844, -1.2262876, 0.8583057, -1.1776433, 0.0625, 0.625, 1.1875, 1.75, -3.2312477, 3.5243003,
        -1.3406415, -0.31438506, -1.5, -0.9375, -0.375, 0.1875, 1.6389647, -0.29306304, 1.1797965, 2.7528486, 3.0,
        -2.5, -1.9375, -1.375, 0.78056884, -0.6169412, -0.38538906, 0.66896087, 1.4375, 2.0, 2.5625, -2.9375,
        -0.4158482, -1.2112453, 2.6514516, -1.513505, -0.125, 0.4375, 1.0, 1.5625, 0.28407824, 3.4885352,
        -3.5135567, -0.33952844, -1.6875, -1.125, -0.5625, 0.0
    ],
    'sdpa_float32_gqa_causal': [
        0.23061122, 1.1681112, 1.5633912, -2.631503, 0.025360957, 0.9628609, 0.61138797, -0.7431271, -0.86882377,
        0.06867623, 0.2952031, -0.28779125, -0.01456517, 0.92293483, -0.7930066, -0.9215388, -0.61404717,
        0.32345283, 0.9401326, 1.7226152, -1.5705059, -0.63300586, 0.25198522, 1.184719, -0.27805573, 0.62148273,
        1.5589827, -0.6454335, -0.34523544, 0.42308488, 1.3605851, -0.33235776, -0.48694432, -0.09082996, 0.84667,
        0.20286313, 0.16670623, 0.25320894, 1.1907089, -0.86126846, 0.5554395, -0.38561007, 0.5518899, 0.24968326,
        -2.1617804, -1.3874121, -0.4499122, 0.46736392
    ],
    'sdpa_float32_add_sinks': [
        -0.037913702, 0.1592863, 0.3543517, -0.48478046, 0.0709862, 0.15248287, -0.12616774, -0.121156394,
        -0.06780208, 0.09311572, 0.12727718, 0.2558188, -1.8894821, -1.0112133, -0.1540077, 0.2902321, -0.062045082,
        0.82562923, -1.2386687, -0.52134943, -0.62752724, 0.30984664, 1.2156881, 2.1527202, -0.86600393, 0.07005754,
        1.0065093, 0.2864729, -0.5579154, -0.3110332, 0.53469074, 0.26838478, -0.0038451315, 0.052416544, 0.636484,
        1.0364287, -0.22540642, 0.040239252, 0.30887437, 0.038873915, 0.41669682, -0.7489012, -0.41868618,
        -0.20636694, 0.06483546, -0.14583446, 0.7303415, 1.5904251
    ],
    'sdpa_float32_bool': [
        -0.04172367, 0.8957763, 1.8332763, -2.6249356, 0.29047146, 1.2279714, 0.3510667, -1.9377561, -0.23038289,
        0.7071171, 0.71422136, -0.3380323, -2.7662504, -1.8287504, -0.8912503, -0.15689467, -0.5611589, 0.37634116,
        -0.5561348, -0.52218986, -0.61910075, 0.3183993, 1.1668452, 2.0962615, -0.2946666, 0.6428335, 1.5803335,
        -0.64284563, -0.3547401, 0.40789285, 1.345393, -0.4359771, -0.20110026, 0.113050476, 1.0505506, 0.16734013,
        -0.5402671, 0.3972329, 1.3347328, -0.62600565, 0.8110016, -0.9069623, 0.030537665, -0.7843763, 0.8303606,
        -0.6845228, 0.2529772, 0.886449
    ],
    'rope_float16_halves': [
        2.2363281, -1.6181641, -1.0664062, 0.18652344, -0.16369629, 0.61816406, 1.1875, 1.75, -3.0722656, 3.1035156,
        -2.6171875, -0.4013672, -0.94384766, -0.95996094, -0.375, 0.1875, 2.5507812, 0.58740234, 1.9023438,
        -0.027832031, 3.2226562, -2.4804688, -1.9375, -1.375, 0.68115234, -0.44702148, 0.29956055, -0.98095703,
        1.3886719, 2.0019531, 2.5625, -2.9375, 1.0322266, -1.7578125, -1.2539062, 2.2480469, -0.4572754, 0.4267578,
        1.0, 1.5625, -1.5546875, 3.0039062, -2.8007812, -2.6757812, -1.0244141, -1.1552734, -0.5625, 0.0
    ],
    'rope_float16_trad': [
        0.18457031, -2.71875, -0.93408203, -0.71191406, 0.034484863, 0.6274414, 1.1708984, 1.7617188, -2.703125,
        2.5097656, -1.8505859, -2.7792969, -1.4335938, -1.0351562, -0.37768555, 0.1821289, -1.5058594, 0.1352539,
        0.70996094, 2.9921875, 3.2109375, -2.2226562, -1.9111328, -1.4121094, 0.6015625, 0.6010742, 0.91845703,
        0.1394043, -0.61865234, -2.3847656, -2.8964844, -2.6113281, -0.203125, 2.9804688, -1.2734375, 0.64404297,
        0.2824707, -0.3564453, 1.5839844, -0.96728516, 2.5, -2.34375, -3.5371094, 0.6816406, 1.0917969, 1.7089844,
        -0.01449585, 0.5620117
    ],
    'rope_float16_freqs': [
        2.2753906, -1.2265625, 0.85791016, -1.1777344, 0.0625, 0.625, 1.1875, 1.75, -3.2304688, 3.5253906,
        -1.3398438, -0.3154297, -1.5, -0.9375, -0.375, 0.1875, 1.6386719, -0.29296875, 1.1796875, 2.7519531, 3.0,
        -2.5, -1.9375, -1.375, 0.7807617, -0.6171875, -0.3852539, 0.6689453, 1.4375, 2.0, 2.5625, -2.9375,
        -0.41552734, -1.2119141, 2.6523438, -1.5136719, -0.125, 0.4375, 1.0, 1.5625, 0.2841797, 3.4863281,
        -3.5136719, -0.33984375, -1.6875, -1.125, -0.5625, 0.0
    ],
    'sdpa_float16_gqa_causal': [
        0.23071289, 1.1679688, 1.5634766, -2.6308594, 0.025665283, 0.9633789, 0.61083984, -0.7426758, -0.8691406,
        0.068359375, 0.29467773, -0.2878418, -0.014434814, 0.92333984, -0.79296875, -0.921875, -0.6142578,
        0.32348633, 0.9404297, 1.7226562, -1.5703125, -0.6323242, 0.2524414, 1.1855469, -0.2783203, 0.62109375,
        1.5585938, -0.64501953, -0.34545898, 0.42285156, 1.3603516, -0.33203125, -0.48706055, -0.08984375,
        0.84765625, 0.20300293, 0.16809082, 0.2536621, 1.1914062, -0.86279297, 0.5551758, -0.3869629, 0.55029297,
        0.25048828, -2.1621094, -1.3876953, -0.44995117, 0.46728516
    ],
    'sdpa_float16_add_sinks': [
        -0.037719727, 0.15930176, 0.35424805, -0.48461914, 0.07104492, 0.15246582, -0.1262207, -0.121154785,
        -0.06774902, 0.09307861, 0.1270752, 0.25561523, -1.890625, -1.0117188, -0.15454102, 0.2902832, -0.062408447,
        0.8251953, -1.2382812, -0.5209961, -0.6274414, 0.30981445, 1.2158203, 2.1523438, -0.86621094, 0.069885254,
        1.0068359, 0.28686523, -0.55810547, -0.31103516, 0.53466797, 0.2685547, -0.004322052, 0.052856445,
        0.63671875, 1.0361328, -0.22473145, 0.040405273, 0.30859375, 0.03842163, 0.4169922, -0.74902344, -0.4189453,
        -0.20629883, 0.064331055, -0.14587402, 0.72998047, 1.5898438
    ],
    'sdpa_float16_bool': [
        -0.04135132, 0.8959961, 1.8339844, -2.625, 0.29125977, 1.2285156, 0.35058594, -1.9384766, -0.23034668,
        0.70703125, 0.7133789, -0.3383789, -2.765625, -1.8291016, -0.89160156, -0.15686035, -0.56103516, 0.37670898,
        -0.5566406, -0.52197266, -0.6191406, 0.31835938, 1.1669922, 2.0976562, -0.2944336, 0.6430664, 1.5810547,
        -0.6430664, -0.3552246, 0.40771484, 1.3457031, -0.43554688, -0.2019043, 0.11352539, 1.0507812, 0.16784668,
        -0.5390625, 0.3984375, 1.3359375, -0.6274414, 0.8105469, -0.9086914, 0.028915405, -0.7832031, 0.8305664,
        -0.6845703, 0.2529297, 0.88623047
    ],
    'rope_bfloat16_halves': [
        2.234375, -1.6171875, -1.0703125, 0.18359375, -0.1640625, 0.6171875, 1.1875, 1.75, -3.0625, 3.109375,
        -2.609375, -0.40625, -0.9453125, -0.9609375, -0.375, 0.1875, 2.546875, 0.58203125, 1.8984375, -0.02734375,
        3.21875, -2.484375, -1.9375, -1.375, 0.6796875, -0.44726562, 0.29882812, -0.9765625, 1.3984375, 2.0, 2.5625,
        -2.9375, 1.03125, -1.7578125, -1.25, 2.25, -0.45703125, 0.42578125, 1.0, 1.5625, -1.5546875, 3.0, -2.796875,
        -2.671875, -1.015625, -1.15625, -0.5625, 0.0
    ],
    'rope_bfloat16_trad': [
        0.1875, -2.71875, -0.93359375, -0.7109375, 0.03466797, 0.62890625, 1.171875, 1.7578125, -2.6875, 2.5,
        -1.84375, -2.78125, -1.4296875, -1.03125, -0.37695312, 0.18261719, -1.5078125, 0.13671875, 0.703125,
        2.984375, 3.203125, -2.21875, -1.9140625, -1.4140625, 0.6015625, 0.6015625, 0.91796875, 0.140625,
        -0.62109375, -2.390625, -2.890625, -2.609375, -0.2109375, 2.984375, -1.265625, 0.64453125, 0.28320312,
        -0.35546875, 1.5859375, -0.96875, 2.5, -2.328125, -3.53125, 0.6796875, 1.0859375, 1.7109375, -0.014465332,
        0.5625
    ],
    'rope_bfloat16_freqs': [
        2.265625, -1.2265625, 0.85546875, -1.1796875, 0.0625, 0.625, 1.1875, 1.75, -3.234375, 3.515625, -1.34375,
        -0.3125, -1.5, -0.9375, -0.375, 0.1875, 1.6328125, -0.3046875, 1.171875, 2.75, 3.0, -2.5, -1.9375, -1.375,
        0.78125, -0.6171875, -0.38476562, 0.66796875, 1.4375, 2.0, 2.5625, -2.9375, -0.4140625, -1.203125, 2.65625,
        -1.515625, -0.125, 0.4375, 1.0, 1.5625, 0.2890625, 3.5, -3.515625, -0.328125, -1.6875, -1.125, -0.5625, 0.0
    ],
    'sdpa_bfloat16_gqa_causal': [
        0.22949219, 1.171875, 1.5625, -2.640625, 0.028320312, 0.96875, 0.6015625, -0.7421875, -0.8671875,
        0.06933594, 0.296875, -0.29296875, -0.026733398, 0.9140625, -0.7890625, -0.9140625, -0.61328125, 0.32226562,
        0.94140625, 1.7265625, -1.5703125, -0.6328125, 0.25390625, 1.1875, -0.2734375, 0.625, 1.5625, -0.65234375,
        -0.34179688, 0.42773438, 1.3671875, -0.33984375, -0.47851562, -0.078125, 0.859375, 0.1953125, 0.16503906,
        0.25585938, 1.1953125, -0.86328125, 0.5546875, -0.38085938, 0.5546875, 0.24316406, -2.15625, -1.390625,
        -0.44921875, 0.46875
    ],
    'sdpa_bfloat16_add_sinks': [
        -0.03857422, 0.15820312, 0.3515625, -0.48242188, 0.071777344, 0.15429688, -0.12792969, -0.12207031,
        -0.067871094, 0.09326172, 0.12792969, 0.25585938, -1.890625, -1.015625, -0.15429688, 0.29101562,
        -0.061523438, 0.82421875, -1.234375, -0.51953125, -0.62890625, 0.31054688, 1.21875, 2.15625, -0.859375,
        0.07519531, 1.0078125, 0.27734375, -0.55859375, -0.3046875, 0.5390625, 0.265625, -0.004638672, 0.056884766,
        0.640625, 1.0390625, -0.22558594, 0.041015625, 0.31054688, 0.038085938, 0.41601562, -0.74609375,
        -0.41796875, -0.20605469, 0.06591797, -0.140625, 0.73828125, 1.6015625
    ],
    'sdpa_bfloat16_bool': [
        -0.04345703, 0.89453125, 1.8359375, -2.625, 0.29101562, 1.2265625, 0.33789062, -1.921875, -0.22753906,
        0.7109375, 0.71875, -0.34570312, -2.765625, -1.828125, -0.890625, -0.15625, -0.5625, 0.375, -0.55859375,
        -0.51953125, -0.62109375, 0.31835938, 1.1640625, 2.09375, -0.29101562, 0.6484375, 1.5859375, -0.6484375,
        -0.35546875, 0.41015625, 1.3515625, -0.4375, -0.19726562, 0.123046875, 1.0546875, 0.15917969, -0.546875,
        0.39257812, 1.328125, -0.62109375, 0.8046875, -0.8984375, 0.040771484, -0.78515625, 0.82421875, -0.67578125,
        0.25976562, 0.890625
    ],
}


def test_sdpa_force_fused_follows_metal_kernels():
    # force_fused=True runs where a Mac's Metal fused kernels exist (mkpy's
    # path computes the same) and names Metal's reason elsewhere
    S = mx.fast.scaled_dot_product_attention
    P = "[scaled_dot_product_attention] force_fused=True but no fused kernel is available: "
    mx.random.seed(3)

    def qkv(ql, kl, d, qh=4, kh=4, vd=None):
        return (mx.random.normal((1, qh, ql, d)), mx.random.normal((1, kh, kl, d)),
                mx.random.normal((1, kh, kl, vd or d)))

    for ql, d, mask, heads in ((12, 64, None, (4, 2)), (12, 72, "causal", (4, 4)), (3, 128, None, (8, 2)),
                               (2, 192, None, (4, 4))):
        q, k, v = qkv(ql, 16, d, *heads)
        ref = S(q, k, v, scale=d ** -0.5, mask=mask)
        out = S(q, k, v, scale=d ** -0.5, mask=mask, force_fused=True)
        assert mx.allclose(ref, out).item()
    q, k, v = qkv(2, 16, 192, vd=128)
    assert S(q, k, v, scale=0.1, force_fused=True).shape == (1, 4, 2, 128)
    with pytest.raises(ValueError, match=re.escape(P + "the full attention kernel supports head dims")):
        S(*qkv(12, 16, 32), scale=0.1, force_fused=True)
    with pytest.raises(ValueError, match=re.escape(P + "the full attention kernel with a causal mask requires the "
                                                   "query sequence to be no longer than the key sequence; got query "
                                                   "length 12 and key length 10.")):
        S(*qkv(12, 10, 64), scale=0.1, mask="causal", force_fused=True)
    with pytest.raises(ValueError, match="vector attention kernel requires the query sequence to be no longer"):
        S(*qkv(6, 4, 64), scale=0.1, force_fused=True)
    with pytest.raises(ValueError, match=re.escape("query length times the GQA factor to be at most 32; got query "
                                                   "length 8 and GQA factor 8.")):
        S(*qkv(8, 16, 64, 8, 1), scale=0.1, force_fused=True)
    with pytest.raises(ValueError, match=re.escape(P + "the fused kernels require a GPU (Metal) stream.")):
        S(*qkv(8, 16, 64), scale=0.1, force_fused=True, stream=mx.cpu)
    with mx.stream(mx.cpu):
        with pytest.raises(ValueError, match="require a GPU"):
            S(*qkv(8, 16, 64), scale=0.1, force_fused=True)


def test_cross_entropy_as_mlx():
    """mx.fast.cross_entropy (MLX 0.32.4; mlx.nn.losses.cross_entropy calls it on the GPU): float32
    losses, accumulated in float32 on the GPU stream and in the logits' dtype on the CPU (values
    checked against MLX 0.32.4's CPU build: 0.0485873; bfloat16 on its CPU 0.046875)."""
    logits = mx.array([[2.0, -1.0], [-1.0, 2.0]])
    targets = mx.array([0, 1])
    for lg in (logits, logits.astype(mx.bfloat16), logits.astype(mx.float16)):
        r = mx.fast.cross_entropy(lg, targets.astype(mx.uint8))
        assert r.dtype == mx.float32 and r.shape == (2,)
        np.testing.assert_allclose(np.array(r), [0.0485873] * 2, rtol=1e-5)
    with mx.stream(mx.cpu):
        assert mx.fast.cross_entropy(logits.astype(mx.bfloat16), targets).tolist() == [0.046875] * 2
    x = mx.random.normal((3, 7))
    y = mx.array([1, 2, 3])
    g = mx.grad(lambda x: mx.fast.cross_entropy(x, y).sum())(x)
    np.testing.assert_allclose(np.array(g), np.array(mx.softmax(x, axis=-1) - (mx.arange(7) == y[:, None])),
                               atol=1e-6)
    assert mx.vmap(lambda x: mx.fast.cross_entropy(x, y))(mx.ones((2, 3, 7))).shape == (2, 3)
    for bad, msg in (((logits, mx.array([[0], [1]])), r"targets shape \(2,1\) does not match logits shape \(2,2\)"),
                     ((logits, targets.astype(mx.float32)), "targets must be integer class indices but got float32"),
                     ((logits.astype(mx.int32), targets), "Received unsupported logits type int32"),
                     ((mx.array(1.0), mx.array(0)), "logits must have at least 1 dimension")):
        with pytest.raises(ValueError, match=msg):
            mx.fast.cross_entropy(*bad)
    with pytest.raises(TypeError):
        mx.fast.cross_entropy(np.ones((2, 2), np.float32), targets)


def test_cross_entropy_shared_offset_on_the_gpu_stream():
    # the fused kernel's float32 reduction from the row's max: an offset of 1e6 changes nothing
    # (MLX's CPU fallback, which mkpy's CPU stream follows, gives 0.0625 there)
    base = mx.array([[2.0, -1.0]])
    t = mx.array([0])
    for off in (1e4, 1e6):
        np.testing.assert_allclose(np.array(mx.fast.cross_entropy(base + off, t)), [0.0485873], rtol=1e-5)
    with mx.stream(mx.cpu):
        assert mx.fast.cross_entropy(base + 1e6, t).tolist() == [0.0625]
    assert mx.fast.cross_entropy(mx.array([[0.0, -float("inf")], [-float("inf"), 0.0]]), mx.array([0, 1])).tolist() == [0, 0]
