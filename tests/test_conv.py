"""Convolutions against a direct NumPy reference: conv1d/2d/3d, conv_general
(strides, asymmetric padding, kernel and input dilation, groups, flip),
conv_transpose1d/2d/3d, convolve; the evaluators (direct, gemm, and Winograd on
a GPU stream); errors; gradients."""
import itertools
import os

import numpy as np
import pytest

import mkpy as mx

RNG = np.random.default_rng(1)


def ref_conv(x, w, stride, plo, phi, kdil, idil, groups=1, flip=False):
    """Direct reference: x (N, S..., C), w (O, K..., C/g), channels last."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    nd = x.ndim - 2
    N, C, O = x.shape[0], x.shape[-1], w.shape[0]
    # dilate the input
    dshape = [N] + [(s - 1) * d + 1 for s, d in zip(x.shape[1:-1], idil)] + [C]
    xd = np.zeros(dshape)
    xd[(slice(None),) + tuple(slice(None, None, d) for d in idil)] = x
    # pad (negative padding crops)
    for i in range(nd):
        lo, hi = plo[i], phi[i]
        if lo < 0:
            xd = np.take(xd, range(-lo, xd.shape[i + 1]), axis=i + 1)
            lo = 0
        if hi < 0:
            xd = np.take(xd, range(0, xd.shape[i + 1] + hi), axis=i + 1)
            hi = 0
        pw = [(0, 0)] * xd.ndim
        pw[i + 1] = (lo, hi)
        xd = np.pad(xd, pw)
    if flip:
        w = w[(slice(None),) + (slice(None, None, -1),) * nd]
    K = w.shape[1:-1]
    kd = [(k - 1) * d + 1 for k, d in zip(K, kdil)]
    out_sp = [(xd.shape[i + 1] - kd[i]) // stride[i] + 1 for i in range(nd)]
    out = np.zeros([N] + out_sp + [O])
    Cg, Og = C // groups, O // groups
    for pos in itertools.product(*[range(o) for o in out_sp]):
        for taps in itertools.product(*[range(k) for k in K]):
            idx = tuple(p * s + t * d for p, s, t, d in zip(pos, stride, taps, kdil))
            xin = xd[(slice(None),) + idx]  # (N, C)
            wt = w[(slice(None),) + taps]  # (O, Cg)
            for g in range(groups):
                out[(slice(None),) + pos + (slice(g * Og, (g + 1) * Og),)] += (
                    xin[:, g * Cg:(g + 1) * Cg] @ wt[g * Og:(g + 1) * Og].T
                )
    return out


def ref_conv_transpose(x, w, stride, pad, dil, opad, groups=1):
    nd = x.ndim - 2
    plo, phi = [], []
    for i in range(nd):
        ws = dil[i] * (w.shape[1 + i] - 1) + 1
        plo.append(ws - pad[i] - 1)
        cos = (x.shape[i + 1] - 1) * stride[i] - 2 * pad[i] + dil[i] * (w.shape[i + 1] - 1) + 1
        phi.append(cos - (1 + stride[i] * (x.shape[1 + i] - 1)) + pad[i] + opad[i])
    return ref_conv(x, w, [1] * nd, plo, phi, dil, stride, groups, True)


@pytest.fixture(params=["auto", "direct", "gemm"])
def algo(request, monkeypatch):
    if request.param != "auto":
        monkeypatch.setenv("MKPY_CONV_ALGO", request.param)
    return request.param


def check(out, want, atol=1e-4):
    out = np.array(out)
    assert out.shape == want.shape, (out.shape, want.shape)
    np.testing.assert_allclose(out, want, atol=atol, rtol=1e-4)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_conv1d(algo):
    for (N, L, C, O, K), s, p, d, g in [
        ((2, 9, 4, 6, 3), 1, 0, 1, 1),
        ((1, 10, 4, 4, 3), 2, 1, 1, 2),
        ((3, 12, 6, 6, 2), 3, 2, 2, 3),
        ((2, 8, 1, 5, 4), 1, 3, 1, 1),
        ((2, 7, 32, 32, 3), 1, 1, 1, 1),
    ]:
        x, w = f32(N, L, C), f32(O, K, C // g)
        check(mx.conv1d(mx.array(x), mx.array(w), s, p, d, g), ref_conv(x, w, [s], [p], [p], [d], [1], g))


def test_conv2d(algo):
    for (N, H, W, C, O, KH, KW), s, p, d, g in [
        ((2, 6, 7, 3, 4, 3, 2), (1, 1), (0, 0), (1, 1), 1),
        ((1, 8, 8, 4, 8, 3, 3), (2, 1), (1, 2), (1, 2), 2),
        ((2, 5, 5, 4, 4, 1, 1), 1, 0, 1, 4),
        ((1, 9, 6, 16, 32, 3, 3), 2, 1, 1, 1),
    ]:
        x, w = f32(N, H, W, C), f32(O, KH, KW, C // g)
        s2 = (s, s) if isinstance(s, int) else s
        p2 = (p, p) if isinstance(p, int) else p
        d2 = (d, d) if isinstance(d, int) else d
        out = mx.conv2d(mx.array(x), mx.array(w), stride=s, padding=p, dilation=d, groups=g)
        check(out, ref_conv(x, w, s2, p2, p2, d2, [1, 1], g))


def test_conv3d(algo):
    x, w = f32(2, 4, 5, 3, 3), f32(4, 2, 3, 2, 3)
    check(mx.conv3d(mx.array(x), mx.array(w)), ref_conv(x, w, [1] * 3, [0] * 3, [0] * 3, [1] * 3, [1] * 3))
    out = mx.conv3d(mx.array(x), mx.array(w), stride=(1, 2, 1), padding=(1, 0, 2), dilation=(2, 1, 1))
    check(out, ref_conv(x, w, [1, 2, 1], [1, 0, 2], [1, 0, 2], [2, 1, 1], [1] * 3))


def test_conv_general(algo):
    x, w = f32(2, 7, 6, 4), f32(6, 3, 2, 2)
    cases = [
        dict(stride=[2, 1], padding=([1, 0], [2, 3]), kernel_dilation=[1, 2], input_dilation=[2, 1], groups=2, flip=True),
        dict(stride=1, padding=([0, 2], [1, 0]), kernel_dilation=2, input_dilation=1, groups=1, flip=False),
        dict(stride=[1, 3], padding=[2, 1], input_dilation=[1, 3], groups=2),
        dict(padding=([-1, 0], [0, -2]), groups=1),
    ]
    for kw in cases:
        g = kw.get("groups", 1)
        ww = w if g == 2 else f32(6, 3, 2, 4)
        out = mx.conv_general(mx.array(x), mx.array(ww), **kw)
        s = kw.get("stride", 1)
        s = [s] * 2 if isinstance(s, int) else s
        p = kw.get("padding", 0)
        plo, phi = (p if isinstance(p, tuple) else ([p] * 2 if isinstance(p, int) else p, [p] * 2 if isinstance(p, int) else p))
        kd = kw.get("kernel_dilation", 1)
        kd = [kd] * 2 if isinstance(kd, int) else kd
        idl = kw.get("input_dilation", 1)
        idl = [idl] * 2 if isinstance(idl, int) else idl
        check(out, ref_conv(x, ww, s, plo, phi, kd, idl, g, kw.get("flip", False)))


def test_conv_transpose(algo):
    x, w = f32(2, 5, 4), f32(6, 3, 4)
    for s, p, d, op in [(1, 0, 1, 0), (2, 1, 1, 1), (3, 0, 2, 0), (2, 2, 1, 0)]:
        check(mx.conv_transpose1d(mx.array(x), mx.array(w), s, p, d, op), ref_conv_transpose(x, w, [s], [p], [d], [op]))
    x2, w2 = f32(1, 4, 5, 4), f32(2, 3, 2, 2)
    out = mx.conv_transpose2d(mx.array(x2), mx.array(w2), stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=2)
    check(out, ref_conv_transpose(x2, w2, [2, 1], [1, 0], [1, 1], [1, 0], 2))
    x3, w3 = f32(1, 3, 2, 3, 2), f32(3, 2, 2, 2, 2)
    out = mx.conv_transpose3d(mx.array(x3), mx.array(w3), stride=2, padding=1)
    check(out, ref_conv_transpose(x3, w3, [2] * 3, [1] * 3, [1] * 3, [0] * 3))


def test_convolve():
    a, v = f32(11), f32(4)
    for mode in ("full", "same", "valid"):
        check(mx.convolve(mx.array(a), mx.array(v), mode=mode), np.convolve(a, v, mode=mode))
        check(mx.convolve(mx.array(v), mx.array(a), mode), np.convolve(v, a, mode=mode))
    v3 = f32(3)
    check(mx.convolve(mx.array(a), mx.array(v3), "same"), np.convolve(a, v3, "same"))


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_dtypes_and_layouts():
    x, w = f32(2, 8, 4), f32(3, 3, 4)
    want = ref_conv(x, w, [1], [0], [0], [1], [1])
    for t, atol in ((mx.float16, 5e-2), (mx.bfloat16, 2e-1), (mx.float64, 1e-6)):
        out = mx.conv1d(mx.array(x).astype(t), mx.array(w).astype(t))
        assert out.dtype == t
        check(out.astype(mx.float32), want, atol=atol)
    # promotion: a float16 input with a float32 weight gives float32
    assert mx.conv1d(mx.array(x).astype(mx.float16), mx.array(w)).dtype == mx.float32
    # transposed / strided views as operands
    xt = f32(4, 8, 2).transpose(2, 1, 0)
    check(mx.conv1d(mx.array(f32(4, 8, 2)).transpose(2, 1, 0) * 0 + mx.array(xt), mx.array(w)),
          ref_conv(xt, w, [1], [0], [0], [1], [1]))
    big = f32(2, 16, 8)
    check(mx.conv1d(mx.array(big)[:, ::2, ::2], mx.array(w)), ref_conv(big[:, ::2, ::2], w, [1], [0], [0], [1], [1]))


def test_errors():
    x, w = mx.ones((1, 5, 4)), mx.ones((2, 3, 4))
    with pytest.raises(ValueError, match=r"\[conv\] Invalid input array with type int32"):
        mx.conv1d(mx.ones((1, 5, 4), dtype=mx.int32), w)
    with pytest.raises(ValueError, match=r"\[conv\] Only works for inputs with 1-3 spatial dimensions"):
        mx.conv1d(mx.ones((5, 4)), w)
    with pytest.raises(ValueError, match=r"\[conv\] Invalid strides \(1,1\) for 1D convolution."):
        mx.conv2d(x, mx.ones((2, 3, 4)))
    with pytest.raises(ValueError, match=r"\[conv\] Invalid weight array with 2 dimensions"):
        mx.conv1d(x, mx.ones((2, 4)))
    with pytest.raises(ValueError, match=r"\[conv\] Expect the input channels in the input and weight array to match"):
        mx.conv1d(x, mx.ones((2, 3, 3)))
    with pytest.raises(ValueError, match=r"\[conv\] The input channels must be divisible by the number of groups"):
        mx.conv1d(x, mx.ones((2, 3, 1)), groups=3)
    with pytest.raises(ValueError, match=r"output channels must be divisible"):
        mx.conv1d(x, mx.ones((3, 3, 2)), groups=2)
    with pytest.raises(ValueError, match=r"Given groups=2 and weights of shape \(2,3,1\)"):
        mx.conv1d(x, mx.ones((2, 3, 1)), groups=2)
    with pytest.raises(ValueError, match=r"\[conv\] Spatial dimensions of input after padding cannot be smaller"):
        mx.conv1d(x, mx.ones((2, 7, 4)))
    with pytest.raises(ValueError, match=r"\[conv\] Stride sizes must be positive"):
        mx.conv1d(x, w, stride=0)
    with pytest.raises(ValueError, match=r"\[conv\] Kernel dilation sizes must be positive"):
        mx.conv1d(x, w, dilation=0)
    with pytest.raises(ValueError, match=r"\[conv\] Invalid strides \(1,2\) for 1D convolution."):
        mx.conv_general(x, w, stride=[1, 2])
    with pytest.raises(ValueError, match=r"\[conv\] Can only handle groups != 1 in 1D or 2D convolutions."):
        mx.conv3d(mx.ones((1, 3, 3, 3, 4)), mx.ones((2, 1, 1, 1, 2)), groups=2)
    with pytest.raises(ValueError, match=r"\[conv\] Only works for inputs with 1-3 spatial dimensions"):
        mx.conv_general(mx.ones((1, 2, 2, 2, 2, 1)), mx.ones((1, 1, 1, 1, 1, 1)))
    with pytest.raises(ValueError, match=r"\[convolve\] Inputs must be 1D."):
        mx.convolve(mx.ones((2, 2)), mx.ones(2))
    with pytest.raises(ValueError, match=r"\[convolve\] Invalid mode."):
        mx.convolve(mx.ones(3), mx.ones(2), mode="other")
    with pytest.raises(TypeError):
        mx.conv2d(mx.ones((1, 3, 3, 1)), mx.ones((1, 1, 1, 1)), stride=(1, 2, 3))


def _fd(f, x, eps=1e-3):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


@pytest.mark.parametrize("kw", [
    dict(stride=[1], padding=([1], [0]), kernel_dilation=[1], input_dilation=[1], groups=1, flip=False),
    dict(stride=[2], padding=([2], [1]), kernel_dilation=[2], input_dilation=[1], groups=2, flip=False),
    dict(stride=[1], padding=([0], [2]), kernel_dilation=[1], input_dilation=[2], groups=1, flip=True),
    dict(stride=[3], padding=([0], [0]), kernel_dilation=[1], input_dilation=[1], groups=1, flip=False),
])
def test_grads_finite_differences(kw):
    x = RNG.standard_normal((2, 8, 4))
    w = RNG.standard_normal((4, 3, 4 // kw["groups"]))
    out_shape = mx.conv_general(mx.array(x, mx.float32), mx.array(w, mx.float32), **kw).shape
    c = mx.array(RNG.standard_normal(out_shape), mx.float32)

    def loss(a, b):
        return (mx.conv_general(a, b, **kw) * c).sum()

    gx, gw = mx.grad(loss, argnums=(0, 1))(mx.array(x, mx.float32), mx.array(w, mx.float32))
    fx = _fd(lambda v: loss(mx.array(v, mx.float32), mx.array(w, mx.float32)).item(), x)
    fw = _fd(lambda v: loss(mx.array(x, mx.float32), mx.array(v, mx.float32)).item(), w)
    np.testing.assert_allclose(np.array(gx), fx, atol=3e-2, rtol=3e-2)
    np.testing.assert_allclose(np.array(gw), fw, atol=3e-2, rtol=3e-2)


def test_grad_conv2d_and_transpose():
    x = RNG.standard_normal((1, 5, 4, 2))
    w = RNG.standard_normal((3, 2, 3, 2))

    def loss(a, b):
        return (mx.conv2d(a, b, stride=(2, 1), padding=1) ** 2).sum() * 0.1

    gx, gw = mx.grad(loss, argnums=(0, 1))(mx.array(x, mx.float32), mx.array(w, mx.float32))
    np.testing.assert_allclose(np.array(gx), _fd(lambda v: loss(mx.array(v, mx.float32), mx.array(w, mx.float32)).item(), x),
                               atol=3e-2, rtol=3e-2)
    np.testing.assert_allclose(np.array(gw), _fd(lambda v: loss(mx.array(x, mx.float32), mx.array(v, mx.float32)).item(), w),
                               atol=3e-2, rtol=3e-2)
    xt = RNG.standard_normal((1, 4, 3))
    wt = RNG.standard_normal((2, 3, 3))

    def lt(a):
        return (mx.conv_transpose1d(a, mx.array(wt, mx.float32), stride=2, padding=1) ** 2).sum() * 0.1

    np.testing.assert_allclose(np.array(mx.grad(lt)(mx.array(xt, mx.float32))),
                               _fd(lambda v: lt(mx.array(v, mx.float32)).item(), xt), atol=3e-2, rtol=3e-2)


def test_jvp_and_vmap():
    x, w = f32(2, 8, 4), f32(3, 3, 4)
    tx, tw = f32(2, 8, 4), f32(3, 3, 4)
    _, (jt,) = mx.jvp(lambda a, b: mx.conv1d(a, b), [mx.array(x), mx.array(w)], [mx.array(tx), mx.array(tw)])
    want = ref_conv(tx, w, [1], [0], [0], [1], [1]) + ref_conv(x, tw, [1], [0], [0], [1], [1])
    check(jt, want, atol=1e-3)
    xb = f32(3, 2, 8, 4)
    out = mx.vmap(lambda a: mx.conv1d(a, mx.array(w)))(mx.array(xb))
    check(out, np.stack([ref_conv(xb[i], w, [1], [0], [0], [1], [1]) for i in range(3)]), atol=1e-3)
    wb = f32(3, 3, 3, 4)
    out = mx.vmap(lambda a, b: mx.conv1d(a, b))(mx.array(xb), mx.array(wb))
    check(out, np.stack([ref_conv(xb[i], wb[i], [1], [0], [0], [1], [1]) for i in range(3)]), atol=1e-3)


def test_empty():
    # no input channels: an empty reduction gives zeros; an empty batch an empty result
    out = mx.conv1d(mx.ones((1, 5, 0)), mx.ones((2, 3, 0)))
    assert out.shape == (1, 3, 2)
    assert np.array(out).sum() == 0
    assert mx.conv2d(mx.ones((0, 4, 4, 2)), mx.ones((3, 2, 2, 2))).shape == (0, 3, 3, 3)


def test_transpose_rank_errors():
    with pytest.raises(ValueError, match=r"\[conv\] Invalid strides \(1,1\) for 1D convolution."):
        mx.conv_transpose2d(mx.ones((1, 5, 4)), mx.ones((2, 3, 4)))
    with pytest.raises(ValueError, match=r"\[conv\] Invalid weight array"):
        mx.conv_transpose1d(mx.ones((1, 5, 4)), mx.ones((2, 4)))


# Winograd F(6x6, 3x3): MLX's Metal path, taken on a GPU stream (mkpy's stand-in for
# Metal) for 3x3 stride-1 convs with C, O multiples of 32, C + O >= 256, N*H*W >= 4096.
WG_TILE, WG_WS = "MLX_CONV_WINOGRAD_TILE_BATCH", "MLX_CONV_WINOGRAD_WORKING_SET"


def ref_conv3x3(x, w, plo, phi):
    """float64 correlation of x (N, H, W, C) with w (O, 3, 3, C), padded (lo, hi) per dim"""
    xp = np.pad(np.float64(x), ((0, 0), (plo[0], phi[0]), (plo[1], phi[1]), (0, 0)))
    H, W = xp.shape[1] - 2, xp.shape[2] - 2
    out = np.zeros((x.shape[0], H, W, w.shape[0]))
    for i in range(3):
        for j in range(3):
            out += xp[:, i:i + H, j:j + W, :] @ np.float64(w[:, i, j, :]).T
    return out


def wg_case(N, H, W, C, O):
    return mx.array(f32(N, H, W, C)), mx.array(f32(O, 3, 3, C) * np.float32(0.05))


@pytest.mark.parametrize("N,H,W,C,O,plo,phi", [
    (8, 24, 24, 64, 192, (1, 1), (1, 1)),   # output a multiple of 6
    (4, 35, 33, 128, 128, (1, 1), (1, 1)),  # partial last tiles
    (3, 40, 41, 96, 160, (0, 0), (0, 0)),   # no padding
    (2, 50, 47, 32, 224, (2, 0), (1, 2)),   # asymmetric padding
])
def test_winograd_on_the_gpu_stream(monkeypatch, N, H, W, C, O, plo, phi):
    monkeypatch.delenv(WG_TILE, raising=False)
    monkeypatch.delenv(WG_WS, raising=False)
    x, w = wg_case(N, H, W, C, O)
    want = ref_conv3x3(np.array(x), np.array(w), plo, phi)
    gpu = np.array(mx.conv_general(x, w, padding=(list(plo), list(phi)), stream=mx.gpu))
    cpu = np.array(mx.conv_general(x, w, padding=(list(plo), list(phi)), stream=mx.cpu))
    np.testing.assert_allclose(gpu, want, atol=1e-3, rtol=0)
    np.testing.assert_allclose(cpu, want, atol=1e-4, rtol=0)
    # a different algorithm than the CPU stream's gemm, so different rounding
    assert not np.array_equal(gpu, cpu)
    # MKPY_CONV_ALGO forces mkpy's own evaluators on any stream
    monkeypatch.setenv("MKPY_CONV_ALGO", "gemm")
    assert np.array_equal(np.array(mx.conv_general(x, w, padding=(list(plo), list(phi)))), cpu)


def test_winograd_batch_steps_change_memory_not_results(monkeypatch):
    monkeypatch.delenv(WG_TILE, raising=False)
    monkeypatch.delenv(WG_WS, raising=False)
    N, H, W, C, O = 5, 30, 28, 128, 128
    x, w = wg_case(N, H, W, C, O)
    whole = np.array(mx.conv2d(x, w, padding=1))
    cpu = np.array(mx.conv2d(x, w, padding=1, stream=mx.cpu))
    for tile in ("1", "2", "3", "5", "9"):   # 2 and 3 leave a short last step
        monkeypatch.setenv(WG_TILE, tile)
        assert np.array_equal(np.array(mx.conv2d(x, w, padding=1)), whole), tile
    monkeypatch.delenv(WG_TILE)
    # MLX's budget: 3/4 of the working set, less the inputs, outputs and filters,
    # over each batch element's scratch; room for 2 elements gives steps of 2
    tiles = 5 * 5
    used = (N * H * W * (C + O) + 64 * C * O) * 4
    per_n = (32 * 32 * C + 64 * tiles * (C + O)) * 4
    monkeypatch.setenv(WG_WS, str(int((used + 5 * per_n // 2) / 0.75)))
    assert np.array_equal(np.array(mx.conv2d(x, w, padding=1)), whole)
    # no room for one element: the gemm path, the CPU stream's bits
    monkeypatch.setenv(WG_WS, "1")
    assert np.array_equal(np.array(mx.conv2d(x, w, padding=1)), cpu)
    monkeypatch.setenv(WG_TILE, "1")   # a forced step is capped by the budget
    assert np.array_equal(np.array(mx.conv2d(x, w, padding=1)), cpu)


def test_winograd_conditions(monkeypatch):
    monkeypatch.delenv(WG_TILE, raising=False)
    monkeypatch.delenv(WG_WS, raising=False)

    def same_as_cpu(x, w, **kw):
        return np.array_equal(np.array(mx.conv_general(x, w, **kw)),
                              np.array(mx.conv_general(x, w, stream=mx.cpu, **kw)))

    x, w = wg_case(4, 32, 32, 128, 128)
    assert not same_as_cpu(x, w, padding=1)
    # each condition that MLX's Metal path checks, broken once
    assert same_as_cpu(x, w, padding=1, stride=2)
    assert same_as_cpu(x, w, padding=2, kernel_dilation=2)
    assert same_as_cpu(x, w, padding=1, input_dilation=2)
    assert same_as_cpu(x, w, padding=1, flip=True)
    assert same_as_cpu(x, w[:, :2, :2], padding=1)             # not 3x3
    assert same_as_cpu(x, w[:, :, :, :64], padding=1, groups=2)
    assert same_as_cpu(*wg_case(4, 32, 32, 112, 160), padding=1)  # C not a multiple of 32
    assert same_as_cpu(*wg_case(4, 32, 32, 96, 128), padding=1)   # C + O < 256
    assert same_as_cpu(*wg_case(3, 32, 32, 128, 128), padding=1)  # N * H * W < 4096


def test_winograd_half_precision_and_gradients(monkeypatch):
    monkeypatch.delenv(WG_TILE, raising=False)
    monkeypatch.delenv(WG_WS, raising=False)
    x, w = wg_case(4, 32, 32, 128, 128)
    for dt in (mx.float16, mx.bfloat16):
        xh, wh = x.astype(dt), w.astype(dt)
        out = mx.conv2d(xh, wh, padding=1)
        assert out.dtype == dt
        want = ref_conv3x3(np.array(xh.astype(mx.float32)), np.array(wh.astype(mx.float32)), (1, 1), (1, 1))
        np.testing.assert_allclose(np.array(out.astype(mx.float32)), want, atol=0.05, rtol=0.02)
    # the gradients are convolutions again; they follow the CPU stream's closely
    def loss(a, b):
        return (mx.conv2d(a, b, padding=1) ** 2).sum()
    gx, gw = mx.grad(loss, argnums=(0, 1))(x, w)
    with mx.stream(mx.cpu):
        cx, cw = mx.grad(loss, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(np.array(gx), np.array(cx), rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(np.array(gw), np.array(cw), rtol=1e-3, atol=1e-2)
