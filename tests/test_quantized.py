"""Quantisation: quantize / dequantize in MLX's affine, mxfp4, mxfp8 and nvfp4
formats (bit layout checked against fixed words derived from the format and a
NumPy decoder of it), fp8 e4m3 conversion, quantized_matmul, gather_qmm,
gather_mm and segmented_mm (against NumPy), their gradients, and a
metal_kernel that unpacks 4-bit affine weights as a kernel author writes it."""
import numpy as np
import pytest

import mkpy as mx

rng = np.random.default_rng(7)


def f32(a):
    return np.array(a.astype(mx.float32))


# ------------------------------------------------------------ NumPy format decoders


def unpack_bits(wq, bits, n):
    """Element j of each row sits at bits [j*bits, (j+1)*bits) of the row's
    little-endian byte stream."""
    raw = np.ascontiguousarray(np.array(wq)).view(np.uint8)
    raw = raw.reshape(-1, raw.shape[-1])
    stream = np.unpackbits(raw, axis=-1, bitorder="little")
    stream = stream[:, : n * bits].reshape(raw.shape[0], n, bits).astype(np.uint32)
    return (stream << np.arange(bits, dtype=np.uint32)).sum(-1).astype(np.uint32)


def affine_ref(wq, scales, biases, gs, bits):
    s, b = f32(scales), f32(biases)
    n = s.shape[-1] * gs
    q = unpack_bits(wq, bits, n).astype(np.float32).reshape(*s.shape, gs)
    return (q * s[..., None] + b[..., None]).reshape(*s.shape[:-1], n)


def e4m3(b):
    """fp8 e4m3 (bias 7, 3 mantissa bits, subnormals) as MLX decodes it."""
    b = np.asarray(b, np.uint32)
    e, m = (b >> 3) & 15, (b & 7).astype(np.float64)
    v = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * 2.0 ** (e.astype(np.float64) - 7))
    return np.where(b & 128, -v, v)


FP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])


def fp_ref(wq, scales, mode):
    sb = np.array(scales).astype(np.uint32)
    gs = 16 if mode == "nvfp4" else 32
    n = sb.shape[-1] * gs
    if mode == "mxfp8":
        v = e4m3(np.ascontiguousarray(np.array(wq)).view(np.uint8).reshape(*sb.shape[:-1], n))
    else:
        v = FP4[unpack_bits(wq, 4, n)].reshape(*sb.shape[:-1], n)
    s = e4m3(sb) if mode == "nvfp4" else 2.0 ** (sb.astype(np.float64) - 127)
    return (v.reshape(*sb.shape, gs) * s[..., None]).reshape(v.shape)


# ------------------------------------------------------------ affine format


def test_affine_fixed_words():
    # 0..15 repeated: max 15 is the larger edge, so scale = -1, bias = 15 and q = 15 - w
    w = np.tile(np.arange(16, dtype=np.float32), 8).reshape(2, 64)
    wq, s, b = mx.quantize(mx.array(w), group_size=64, bits=4)
    assert wq.dtype == mx.uint32 and wq.shape == (2, 8)
    assert np.array(wq)[0, 0] == 0x89ABCDEF
    assert np.array(s).tolist() == [[-1.0], [-1.0]] and np.array(b).tolist() == [[15.0], [15.0]]
    # the negated row: min -15 is the larger edge, scale = 1, bias = -15, q = w + 15
    wq, s, b = mx.quantize(mx.array(-w), group_size=64, bits=4)
    assert np.array(wq)[0, 0] == 0x89ABCDEF and np.array(s)[0, 0] == 1.0 and np.array(b)[0, 0] == -15.0
    # 8 bits: one byte per value, little-endian in the word
    # min -255, max 0: scale 1, bias -255, q = w + 255
    w8 = np.array([[-255, 0] + [-k for k in range(1, 31)]], np.float32)
    wq, s, b = mx.quantize(mx.array(w8), group_size=32, bits=8)
    assert np.array(wq)[0, 0] == 0xFDFEFF00 and np.array(s)[0, 0] == 1.0 and np.array(b)[0, 0] == -255.0
    # 3 bits: 8 values in 3 bytes, a continuous bit stream
    w3 = np.tile(np.array([-7, -6, -5, -4, -3, -2, -1, 0], np.float32), 4).reshape(1, 32)
    wq, s, b = mx.quantize(mx.array(w3), group_size=32, bits=3)
    assert wq.shape == (1, 3)
    bits = sum(k << (3 * k) for k in range(8))
    assert np.array(wq).view(np.uint8)[0, :3].tolist() == [bits & 255, (bits >> 8) & 255, bits >> 16]


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize("gs", [32, 64, 128])
def test_affine_round_trip(bits, gs):
    w = rng.standard_normal((4, 256)).astype(np.float32)
    wq, s, b = mx.quantize(mx.array(w), group_size=gs, bits=bits)
    assert wq.shape == (4, 256 * bits // 32) and s.shape == b.shape == (4, 256 // gs)
    d = np.array(mx.dequantize(wq, s, b, group_size=gs, bits=bits))
    np.testing.assert_allclose(d, affine_ref(wq, s, b, gs, bits), rtol=1e-6, atol=1e-6)
    step = np.abs(np.repeat(np.array(s), gs, axis=-1))
    # within half a step, or a step where the far edge was clipped by moving the scale
    assert np.all(np.abs(d - w) <= step + 1e-5)
    assert np.mean(np.abs(d - w) <= step / 2 + 1e-5) > 0.95
    q = unpack_bits(wq, bits, 256)
    assert q.max() <= 2**bits - 1
    # each group's edge of larger magnitude is represented exactly
    g = w.reshape(4, -1, gs)
    edge = np.where(np.abs(g.min(-1)) > np.abs(g.max(-1)), g.min(-1), g.max(-1))
    dg = d.reshape(4, -1, gs)
    assert np.all(np.any(dg == edge[..., None], axis=-1))


def test_affine_half_dtypes_and_batch():
    w = rng.standard_normal((2, 3, 128)).astype(np.float32)
    for t in (mx.float16, mx.bfloat16):
        wq, s, b = mx.quantize(mx.array(w).astype(t))
        assert s.dtype == t and b.dtype == t and wq.shape == (2, 3, 16)
        d = mx.dequantize(wq, s, b)
        assert d.dtype == t
        np.testing.assert_allclose(f32(d), affine_ref(wq, s, b, 64, 4), rtol=1e-2, atol=1e-2)
        assert mx.dequantize(wq, s, b, dtype=mx.float32).dtype == mx.float32
    # a zero group quantizes to zeros exactly
    wq, s, b = mx.quantize(mx.zeros((1, 64)))
    assert np.all(np.array(mx.dequantize(wq, s, b)) == 0)


# ------------------------------------------------------------ fp8 and fp formats


def test_fp8_fixed_values():
    x = mx.array([0.0, 1.0, -2.0, 448.0, 1e6, float("inf"), 2.0**-9, 0.3125, -0.0])
    assert np.array(mx.to_fp8(x)).tolist() == [0, 0x38, 0xC0, 0x7E, 0x7E, 0x7E, 0x01, 0x2A, 0x80]
    b = np.arange(256, dtype=np.uint8)
    v = np.array(mx.from_fp8(mx.array(b), mx.float32))
    ok = (b & 127) != 127  # 0x7f / 0xff are e4m3's nan
    np.testing.assert_array_equal(v[ok], e4m3(b)[ok].astype(np.float32))
    assert np.isnan(v[127]) and np.isnan(v[255])
    assert mx.from_fp8(mx.array(b)).dtype == mx.bfloat16
    # every finite code survives the round trip
    rt = np.array(mx.to_fp8(mx.from_fp8(mx.array(b), mx.float32)))
    np.testing.assert_array_equal(rt[ok], b[ok])
    # round to nearest even between neighbours 1.0 (0x38) and 1.125 (0x39)
    assert np.array(mx.to_fp8(mx.array([1.0625, 1.0626, 1.1875]))).tolist() == [0x38, 0x39, 0x3A]


def test_mx_fp_fixed_words():
    w = np.zeros((1, 32), np.float32)
    w[0, :4] = [6, -6, 0.5, 3]
    wq, s = mx.quantize(mx.array(w), mode="mxfp4")
    assert wq.dtype == mx.uint32 and wq.shape == (1, 4) and s.dtype == mx.uint8 and s.shape == (1, 1)
    assert np.array(s)[0, 0] == 127  # 2^0
    assert np.array(wq)[0, 0] == 0x0000_51F7  # codes 7, 15, 1, 5, low nibble first
    wq, s = mx.quantize(mx.array(w), mode="mxfp8")
    assert wq.shape == (1, 8) and np.array(s)[0, 0] == 127 - 6  # 6 / 448 -> 2^-6
    assert np.array(wq).view(np.uint8)[0, :4].tolist() == [0x7C, 0xFC, 0x60, 0x74]  # 384, -384, 32, 192
    w16 = w[:, :16] * 4
    wq, s = mx.quantize(mx.array(w16), mode="nvfp4")
    assert wq.shape == (1, 2) and np.array(s)[0, 0] == 0x48  # e4m3 4.0
    assert np.array(wq)[0, 0] == 0x0000_51F7


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8", "nvfp4"])
def test_fp_modes_round_trip(mode):
    w = (rng.standard_normal((8, 128)) * 3).astype(np.float32)
    wq, s = mx.quantize(mx.array(w), mode=mode)
    d = mx.dequantize(wq, s, mode=mode)
    assert d.dtype == mx.bfloat16
    d = np.array(mx.dequantize(wq, s, mode=mode, dtype=mx.float32))
    np.testing.assert_allclose(d, fp_ref(wq, s, mode), rtol=1e-6)
    gs = 16 if mode == "nvfp4" else 32
    amax = np.repeat(np.abs(w).reshape(8, -1, gs).max(-1), gs, axis=-1)
    assert np.all(np.abs(d - w) <= 0.3 * amax)
    # values on the grid come back exactly
    grid = np.tile(FP4[:8], 4).reshape(1, 32).astype(np.float32)
    wq, s = mx.quantize(mx.array(grid), mode="mxfp4")
    np.testing.assert_array_equal(np.array(mx.dequantize(wq, s, mode="mxfp4", dtype=mx.float32)), grid)


def test_nvfp4_global_scale():
    w = rng.standard_normal((4, 64)).astype(np.float32)
    g = mx.array(np.float32(np.abs(w).max()))
    wq, s = mx.quantize(mx.array(w), mode="nvfp4", global_scale=g)
    d = mx.dequantize(wq, s, mode="nvfp4", global_scale=g)
    assert d.dtype == mx.float32
    ref = fp_ref(wq, s, "nvfp4") * float(np.array(g)) / (448 * 6)
    np.testing.assert_allclose(np.array(d), ref, rtol=1e-6)
    assert np.abs(np.array(d) - w).max() < 0.3 * np.abs(w).max()


# ------------------------------------------------------------ errors


def test_errors():
    w = mx.ones((4, 64))
    with pytest.raises(ValueError, match=r"\[quantize\] Invalid quantization mode 'foo'\."):
        mx.quantize(w, mode="foo")
    with pytest.raises(ValueError, match=r"\[quantize\] Only real floating types can be quantized but w has type int32"):
        mx.quantize(mx.ones((4, 64), dtype=mx.int32))
    with pytest.raises(ValueError, match=r"divisible by the quantization group size 64.*\(4,60\)"):
        mx.quantize(mx.ones((4, 60)))
    with pytest.raises(ValueError, match="The requested number of bits 7 is not supported"):
        mx.quantize(w, bits=7)
    with pytest.raises(ValueError, match="The requested group size 16 is not supported"):
        mx.quantize(w, group_size=16)
    with pytest.raises(ValueError, match="mxfp4 quantization requires group size 32 but got 64"):
        mx.quantize(w, group_size=64, mode="mxfp4")
    with pytest.raises(ValueError, match="at least 2 dimension but it has only 1"):
        mx.quantize(mx.ones((64,)))
    with pytest.raises(ValueError, match="Global scale is only supported for 'nvfp4'"):
        mx.quantize(w, global_scale=mx.array(1.0))
    wq, s, b = mx.quantize(w)
    with pytest.raises(ValueError, match=r"\[dequantize\] Biases must be provided for affine quantization"):
        mx.dequantize(wq, s)
    with pytest.raises(ValueError, match=r"\[dequantize\] The matrix should be given as a uint32"):
        mx.dequantize(wq.astype(mx.int32), s, b)
    with pytest.raises(ValueError, match="Shape of scales and biases does not match the matrix given"):
        mx.dequantize(wq, s, b, group_size=32)
    with pytest.raises(ValueError, match=r"\[quantized_matmul\] Last dimension of first input with shape \(\.\.\., 60\)"):
        mx.quantized_matmul(mx.ones((2, 60)), wq, s, b)
    with pytest.raises(ValueError, match="Scale type must be uint8"):
        mx.dequantize(wq, s, mode="mxfp4")
    with pytest.raises(ValueError, match=r"\[to_fp8\] Only real floating types"):
        mx.to_fp8(mx.ones((2,), dtype=mx.int32))
    with pytest.raises(ValueError, match=r"\[from_fp8\] Input must have type uint8"):
        mx.from_fp8(mx.ones((2,)))
    with pytest.raises(ValueError, match=r"\[gather_mm\] Last dimension of first input with shape \(2,3\)"):
        mx.gather_mm(mx.ones((2, 3)), mx.ones((4, 5)), mx.array([0]), None)
    with pytest.raises(ValueError, match=r"\[segmented_mm\] The segments should have shape \(\.\.\., 2\)"):
        mx.segmented_mm(mx.ones((2, 3)), mx.ones((3, 5)), mx.array([0, 1, 2]))
    with pytest.raises(TypeError):
        mx.quantize(np.ones((4, 64), np.float32))


# ------------------------------------------------------------ products


@pytest.mark.parametrize("bits", [2, 3, 4, 6, 8])
def test_quantized_matmul(bits):
    K, N = 128, 96
    w = rng.standard_normal((N, K)).astype(np.float32)
    wq, s, b = mx.quantize(mx.array(w), group_size=32, bits=bits)
    wd = affine_ref(wq, s, b, 32, bits)
    for shape in [(K,), (1, K), (5, K), (2, 3, K)]:
        x = rng.standard_normal(shape).astype(np.float32)
        y = mx.quantized_matmul(mx.array(x), wq, s, b, group_size=32, bits=bits)
        assert y.shape == shape[:-1] + (N,)
        np.testing.assert_allclose(np.array(y), x @ wd.T, rtol=1e-4, atol=1e-4)
    # transpose=False: w is (K, N) quantized along N
    w2 = rng.standard_normal((K, N)).astype(np.float32)
    wq2, s2, b2 = mx.quantize(mx.array(w2), group_size=32, bits=bits)
    x = rng.standard_normal((3, K)).astype(np.float32)
    y = mx.quantized_matmul(mx.array(x), wq2, s2, b2, transpose=False, group_size=32, bits=bits)
    np.testing.assert_allclose(np.array(y), x @ affine_ref(wq2, s2, b2, 32, bits), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8", "nvfp4"])
def test_quantized_matmul_fp_modes(mode):
    w = rng.standard_normal((64, 128)).astype(np.float32)
    wq, s = mx.quantize(mx.array(w), mode=mode)
    x = rng.standard_normal((4, 128)).astype(np.float32)
    y = mx.quantized_matmul(mx.array(x), wq, s, mode=mode)
    assert y.dtype == mx.float32
    np.testing.assert_allclose(np.array(y), x @ fp_ref(wq, s, mode).T, rtol=1e-4, atol=1e-4)


def test_quantized_matmul_batched_and_dtypes():
    w = rng.standard_normal((2, 32, 64)).astype(np.float32)
    wq, s, b = mx.quantize(mx.array(w))
    x = rng.standard_normal((3, 2, 5, 64)).astype(np.float32)
    y = mx.quantized_matmul(mx.array(x), wq, s, b)
    assert y.shape == (3, 2, 5, 32)
    np.testing.assert_allclose(np.array(y), x @ np.swapaxes(affine_ref(wq, s, b, 64, 4), -1, -2), rtol=1e-4,
                               atol=1e-4)
    wq, s, b = mx.quantize(mx.array(w[0]).astype(mx.float16))
    y = mx.quantized_matmul(mx.array(x[0, 0]).astype(mx.float16), wq, s, b)
    assert y.dtype == mx.float16
    np.testing.assert_allclose(f32(y), x[0, 0].astype(np.float16).astype(np.float32) @ affine_ref(wq, s, b, 64, 4).T,
                               rtol=2e-2, atol=2e-2)


def test_quantized_matmul_grads():
    w = rng.standard_normal((32, 64)).astype(np.float32)
    wq, s, b = mx.quantize(mx.array(w), group_size=32)
    wd = affine_ref(wq, s, b, 32, 4)
    x = mx.array(rng.standard_normal((3, 64)).astype(np.float32))
    c = rng.standard_normal((3, 32)).astype(np.float32)

    def f(x, s, b):
        return (mx.quantized_matmul(x, wq, s, b, group_size=32) * mx.array(c)).sum()

    gx, gs, gb = mx.grad(f, argnums=(0, 1, 2))(x, s, b)
    np.testing.assert_allclose(np.array(gx), c @ wd, rtol=1e-4, atol=1e-4)
    dw = (c.T @ np.array(x)).reshape(32, 2, 32)
    q = unpack_bits(wq, 4, 64).astype(np.float32).reshape(32, 2, 32)
    np.testing.assert_allclose(np.array(gb), dw.sum(-1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.array(gs), (dw * q).sum(-1), rtol=1e-4, atol=1e-3)
    with pytest.raises(Exception, match="no gradient wrt the quantized weights"):
        mx.grad(lambda w: mx.quantized_matmul(x, w, s, b, group_size=32).sum())(wq)
    # jvp in x
    t = mx.array(rng.standard_normal((3, 64)).astype(np.float32))
    _, (jt,) = mx.jvp(lambda x: mx.quantized_matmul(x, wq, s, b, group_size=32), [x], [t])
    np.testing.assert_allclose(np.array(jt), np.array(t) @ wd.T, rtol=1e-4, atol=1e-4)


def test_gather_mm_and_grads():
    a = rng.standard_normal((4, 3, 8)).astype(np.float32)
    b = rng.standard_normal((5, 8, 6)).astype(np.float32)
    li = np.array([[0, 3], [2, 2]], np.uint32)
    ri = np.array([4, 1], np.uint32)
    y = mx.gather_mm(mx.array(a), mx.array(b), mx.array(li), mx.array(ri))
    assert y.shape == (2, 2, 3, 6)
    ref = np.einsum("ijmk,ijkn->ijmn", a[li], b[np.broadcast_to(ri, li.shape)])
    np.testing.assert_allclose(np.array(y), ref, rtol=1e-5, atol=1e-5)
    # default lhs indices: one per matrix of a
    y = mx.gather_mm(mx.array(a), mx.array(b), None, mx.array([0, 1, 2, 3], dtype=mx.int32))
    np.testing.assert_allclose(np.array(y), a @ b[:4], rtol=1e-5, atol=1e-5)
    c = rng.standard_normal((2, 2, 3, 6)).astype(np.float32)

    def f(a_, b_):
        return (mx.gather_mm(a_, b_, mx.array(li), mx.array(ri)) * mx.array(c)).sum()

    ga, gb = mx.grad(f, argnums=(0, 1))(mx.array(a), mx.array(b))
    ra, rb = np.zeros_like(a), np.zeros_like(b)
    rib = np.broadcast_to(ri, li.shape)
    for i in range(2):
        for j in range(2):
            ra[li[i, j]] += c[i, j] @ b[rib[i, j]].T
            rb[rib[i, j]] += a[li[i, j]].T @ c[i, j]
    np.testing.assert_allclose(np.array(ga), ra, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.array(gb), rb, rtol=1e-4, atol=1e-4)
    # no indices: matmul
    np.testing.assert_allclose(np.array(mx.gather_mm(mx.array(a[0]), mx.array(b[0]))), a[0] @ b[0], rtol=1e-5)


def test_gather_qmm():
    w = rng.standard_normal((3, 16, 64)).astype(np.float32)
    wq, s, b = mx.quantize(mx.array(w), group_size=32, bits=4)
    wd = affine_ref(wq, s, b, 32, 4)
    x = rng.standard_normal((4, 1, 64)).astype(np.float32)
    li, ri = np.array([0, 1, 3, 3, 2], np.uint32), np.array([2, 0, 1, 2, 2], np.uint32)
    y = mx.gather_qmm(mx.array(x), wq, s, b, mx.array(li), mx.array(ri), group_size=32)
    assert y.shape == (5, 1, 16)
    ref = np.stack([x[i] @ wd[j].T for i, j in zip(li, ri)])
    np.testing.assert_allclose(np.array(y), ref, rtol=1e-4, atol=1e-4)
    y = mx.gather_qmm(mx.array(x[:3]), wq, s, b, rhs_indices=mx.array([2, 2, 0]), group_size=32, sorted_indices=True)
    ref = np.stack([x[i] @ wd[j].T for i, j in enumerate([2, 2, 0])])
    np.testing.assert_allclose(np.array(y), ref, rtol=1e-4, atol=1e-4)


def test_segmented_mm():
    a = rng.standard_normal((3, 10)).astype(np.float32)
    b = rng.standard_normal((10, 4)).astype(np.float32)
    seg = np.array([[0, 4], [4, 10], [2, 2], [0, 10]], np.uint32)
    y = mx.segmented_mm(mx.array(a), mx.array(b), mx.array(seg))
    assert y.shape == (4, 3, 4)
    ref = np.stack([a[:, s:e] @ b[s:e] for s, e in seg])
    np.testing.assert_allclose(np.array(y), ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ a kernel unpacking MLX's weights

UNPACK4 = """
    uint elem = thread_position_in_grid.x;
    uint row = thread_position_in_grid.y;
    uint K = w_shape[1] * 8;
    uint word = w[row * w_shape[1] + elem / 8];
    uint q = (word >> (4 * (elem % 8))) & 0xf;
    uint g = row * (K / 64) + elem / 64;
    out[row * K + elem] = static_cast<T>(scales[g]) * static_cast<T>(q) + static_cast<T>(biases[g]);
"""


def test_metal_kernel_unpacks_affine_4bit():
    kernel = mx.fast.metal_kernel(name="unpack_affine4", input_names=["w", "scales", "biases"],
                                  output_names=["out"], source=UNPACK4)
    w = rng.standard_normal((16, 256)).astype(np.float32)
    wq, s, b = mx.quantize(mx.array(w), group_size=64, bits=4)
    (out,) = kernel(inputs=[wq, s, b], template=[("T", mx.float32)], grid=(256, 16, 1), threadgroup=(64, 1, 1),
                    output_shapes=[(16, 256)], output_dtypes=[mx.float32])
    d = mx.dequantize(wq, s, b, group_size=64, bits=4)
    np.testing.assert_allclose(np.array(out), np.array(d), rtol=1e-6, atol=1e-6)
    x = rng.standard_normal((2, 256)).astype(np.float32)
    np.testing.assert_allclose(np.array(mx.matmul(mx.array(x), out.T)),
                               np.array(mx.quantized_matmul(mx.array(x), wq, s, b)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["nvfp4", "mxfp8", "mxfp4"])
def test_qqmm_and_gather_qqmm(mode):
    x = rng.standard_normal((3, 64)).astype(np.float32)
    w = rng.standard_normal((2, 16, 64)).astype(np.float32)
    gx = mx.array(np.float32(np.abs(x).max())) if mode == "nvfp4" else None
    gw = mx.array(np.float32(np.abs(w).max())) if mode == "nvfp4" else None
    wq, s = mx.quantize(mx.array(w[0]), mode=mode, global_scale=gw)
    xq, xs = mx.quantize(mx.array(x), mode=mode, global_scale=gx)
    scale_x = 1.0 if gx is None else float(np.array(gx)) / 2688
    scale_w = 1.0 if gw is None else float(np.array(gw)) / 2688
    x_hat = fp_ref(xq, xs, mode) * scale_x
    w_hat = fp_ref(wq, s, mode) * scale_w
    y = mx.qqmm(mx.array(x), wq, s, mode=mode, global_scale_x=gx, global_scale_w=gw)
    assert y.shape == (3, 16) and y.dtype == mx.float32
    np.testing.assert_allclose(np.array(y), x_hat @ w_hat.T, rtol=1e-4, atol=1e-4)
    # w given unquantized is quantized the same way
    y2 = mx.qqmm(mx.array(x), mx.array(w[0]), mode=mode, global_scale_x=gx, global_scale_w=gw)
    np.testing.assert_allclose(np.array(y2), np.array(y), rtol=1e-6, atol=1e-6)
    wq, s = mx.quantize(mx.array(w), mode=mode, global_scale=gw)
    y = mx.gather_qqmm(mx.array(x[None]), wq, s, None, mx.array([1, 0]), mode=mode, global_scale_x=gx,
                       global_scale_w=gw)
    w_hat = fp_ref(wq, s, mode) * scale_w
    assert y.shape == (2, 3, 16)
    np.testing.assert_allclose(np.array(y), np.stack([x_hat @ w_hat[1].T, x_hat @ w_hat[0].T]), rtol=1e-4,
                               atol=1e-4)
