"""sin, cos and logaddexp bit for bit against MLX 0.32.4's CPU back end
(values baked from it). MLX computes float sin/cos with its own Cephes-style
approximation (through float for float16, bfloat16 and float64 too) and
libm's sinf/cosf beyond |x| = 2^23; logaddexp uses its own exp (through float
for float64 as well) and libm's log1p, float16/bfloat16 rounding each step."""
import numpy as np
import pytest

import mkpy as mx

# float16/bfloat16 nan results are compared as nan only: MLX's float to
# float16 conversion writes another nan payload than mkpy's
F32_IN = [
    0xc6016117, 0xc61249b0, 0x407ab9c7, 0x40280536, 0xc0bf7e5e, 0xc1139d16, 0xc0469c41, 0x411927ac,
    0x4607a46b, 0x41137c78, 0xc0c65b49, 0xc01af75d, 0xc1146957, 0xc06b6c65, 0xc0bccd9e, 0x40c6c589,
    0x0, 0x80000000, 0xda24260, 0x80000001, 0x3f490fdb, 0x3fc90fdb, 0x40490fdb, 0xc016cbe4,
    0x42c80000, 0xc47a2000, 0x4affffff, 0x4b000000, 0xcb000000, 0x4b000001, 0x4e6e6b28, 0xff7fc99e,
    0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001]
F32_SIN = [
    0x3f528ea9, 0xbeea81b0, 0xbf334f37, 0x3efcbee0, 0x3e96d264, 0xbe4a5c3e, 0xbd1cdc97, 0xbe166638,
    0xbf45f55c, 0x3e5258e9, 0x3dacefa1, 0xbf28d97f, 0xbe1812b3, 0x3f02efe6, 0x3ebf60a2, 0xbd927462,
    0x0, 0x0, 0xda24260, 0x80000001, 0x3f3504f4, 0x3f800000, 0xb3bbbd2e, 0xbf3504f3, 0xbf01a12e,
    0xbf7eca46, 0x3f4fc8cc, 0x3edd4fa3, 0xbedd4fa3, 0xbf067728, 0x3f0bbc65, 0x3e79f163, 0xffc00000,
    0xffc00000, 0x7fc00000, 0x7fc00001]
F32_COS = [
    0x3f119b9a, 0x3f6391ac, 0xbf36b696, 0xbf5ea250, 0x3f74a415, 0xbf7af394, 0xbf7fcfed, 0xbf7d3946,
    0xbf225273, 0xbf7a8a69, 0x3f7f15ef, 0xbf406bc2, 0xbf7d2947, 0xbf5bfb0a, 0x3f6d71ac, 0x3f7f5837,
    0x3f800000, 0x3f800000, 0x3f800000, 0x3f800000, 0x3f3504f3, 0xb33bbd2e, 0xbf800000, 0xbf3504f3,
    0x3f5cc0ee, 0x3dc6dffc, 0xbf1589c3, 0xbf66d965, 0xbf66d965, 0xbf59d77f, 0x3f567fc6, 0x3f7841ca,
    0xffc00000, 0xffc00000, 0x7fc00000, 0x7fc00001]
F16_IN = [
    0x2e66, 0xb800, 0x3c00, 0x4248, 0xc740, 0x5640, 0x63d0, 0x7bff, 0xfbff, 0x3ef, 0x8000, 0x7c00,
    0xfc00, 0x7e00]
F16_SIN = [
    0x2e63, 0xb7ac, 0x3abb, 0x13ed, 0xba96, 0xb80d, 0x3a9d, 0x3bce, 0xbbce, 0x3ef, 0x0, 0xfd00,
    0xfd00, 0x7d00]
F16_COS = [
    0x3bf6, 0x3b05, 0x3853, 0xbc00, 0x388b, 0x3ae6, 0x3880, 0xb30f, 0xb30f, 0x3c00, 0x3c00, 0xfd00,
    0xfd00, 0x7d00]
BF16_IN = [
    0x3dcd0000, 0xbf000000, 0x3f800000, 0x40490000, 0xc0e80000, 0x42c80000, 0x447a0000, 0x7f620000,
    0xe0ad0000, 0x80000000, 0x7f800000, 0x7fc00000]
BF16_SIN = [
    0x3dcd0000, 0xbef50000, 0x3f570000, 0x3a7e0000, 0xbf530000, 0xbf020000, 0x3f540000, 0x3ec90000,
    0x3f800000, 0x0, 0x7fc00000, 0x7fc00000]
BF16_COS = [
    0x3f7f0000, 0x3f610000, 0x3f0a0000, 0xbf800000, 0x3f110000, 0x3f5d0000, 0x3f100000, 0x3f6b0000,
    0xbcf10000, 0x3f800000, 0x7fc00000, 0x7fc00000]
F64_IN = [
    0x3fe0000000000000, 0xc006000000000000, 0x7e8, 0x80000000000007e8, 0x4202a05f20000000,
    0x4341c37937e08000, 0xfe37e43c8800759c, 0x405edd3c07ee0b0b, 0x7ff0000000000000,
    0x7ff8000000000000]
F64_SIN = [
    0x3fdeaee880000000, 0xbfd86d2240000000, 0x0, 0x8000000000000000, 0xbfdf334c80000000,
    0xbfdfc7e100000000, 0xfff8000000000000, 0xbfe9bdb000000000, 0xfff8000000000000,
    0x7ff8000000000000]
F64_COS = [
    0x3fec152800000000, 0xbfed93e2a0000000, 0x3ff0000000000000, 0x3ff0000000000000,
    0x3febf098a0000000, 0x3febc69b60000000, 0xfff8000000000000, 0xbfe302b620000000,
    0xfff8000000000000, 0x7ff8000000000000]
LAE_A = [
    0x40da0fc2, 0x3efd96fc, 0x414ab619, 0x3ffb43f0, 0x4199e472, 0xc13d1d2b, 0x40098cbb, 0xbf27aee0,
    0xc0bbcee5, 0x406a7be6, 0xc129683f, 0x414168e3, 0x416b17ee, 0xc16d9804, 0x0, 0x80000000,
    0x7f800000, 0xff800000, 0x7f800000, 0x40a00000, 0x7fc00000, 0x7149f2ca, 0xc2c80000, 0x42b00000]
LAE_B = [
    0xbfa895ce, 0xc10ea095, 0xc185670e, 0x417d6784, 0xc03354d3, 0xc1617a42, 0x40dde761, 0xc13e94ed,
    0x4180753c, 0xc135066e, 0xc1956a86, 0xc13f8204, 0xc0c57156, 0xbf9f30b1, 0x0, 0x0, 0x3f800000,
    0xff800000, 0x7f800000, 0xff800000, 0x3f800000, 0xf149f2ca, 0xc2f00000, 0x42b20000]
LAE_F32 = [
    0x40da122b, 0x3efda1b9, 0x414ab619, 0x417d6785, 0x4199e472, 0xc13b8b82, 0x40de2b83, 0xbf27ae07,
    0x4180753c, 0x406a7be7, 0xc12966fd, 0x414168e3, 0x416b17ee, 0xbf9f30a7, 0x3f317218, 0x3f317218,
    0x7f800000, 0xff800000, 0x7f800000, 0x40a00000, 0x7fc00000, 0x7149f2ca, 0xc2c80000, 0x42b2a064]
LAE_F16 = [
    0x46d0, 0x37ed, 0x4a56, 0x4beb, 0x4ccf, 0xc9dc, 0x46f1, 0xb93d, 0x4c04, 0x4354, 0xc94b, 0x4a0b,
    0x4b59, 0xbcfa]
LAE_BF16 = [
    0x40da0000, 0x3efe0000, 0x414b0000, 0x417d0000, 0x419a0000, 0xc13b0000, 0x40de0000, 0xbf280000,
    0x41800000, 0x406a0000, 0xc1290000, 0x41410000, 0x416b0000, 0xbf9f0000]
LAE_F64 = [
    0x401b424557b284e8, 0x3fdfb4372d1736fa, 0x402956c320000065, 0x402facf09f9fc0c6,
    0x40333c8e40012718, 0xc02771703ba42552, 0x401bc5706733a1fb, 0xbfe4f5c0e4fbdada,
    0x40300ea780014a2e, 0x400d4f7ce9f9c892, 0xc0252cdfa87ce3d7, 0x40282d1c60004e64,
    0x402d62fdc007776f, 0xbff3e614d4faab60]


def bits(a, u):
    return [int(v) for v in np.atleast_1d(np.array(a)).view(u)]


def h(xs):
    return [int(v) for v in xs]


def f32_of(xs):
    return np.array(h(xs), np.uint32).view(np.float32)


def same_or_nan(got, want, to_float):
    g, w = to_float(np.array(got)), to_float(np.array(want))
    for a, b, gv, wv in zip(got, want, g, w):
        assert a == b or (np.isnan(gv) and np.isnan(wv)), (hex(a), hex(b))


@pytest.mark.parametrize("op", ["sin", "cos"])
def test_sincos_float32_bits(op):
    x = mx.array(f32_of(F32_IN))
    want = h(F32_SIN if op == "sin" else F32_COS)
    assert bits(getattr(mx, op)(x), np.uint32) == want
    # strided and transposed inputs, and arrays where only some elements take the libm path
    x2 = mx.array(np.stack([f32_of(F32_IN)] * 3, 1))
    assert bits(getattr(mx, op)(x2[:, 1]), np.uint32) == want
    assert bits(getattr(mx, op)(x2.T)[2], np.uint32) == want
    big = np.tile(f32_of(F32_IN), 50)
    assert bits(getattr(mx, op)(mx.array(big)), np.uint32) == want * 50
    assert bits(x.sin() if op == "sin" else x.cos(), np.uint32) == want


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("op", ["sin", "cos"])
def test_sincos_half_and_double_bits(op):
    s = op == "sin"
    x16 = mx.array(np.array(h(F16_IN), np.uint16).view(np.float16))
    same_or_nan(bits(getattr(mx, op)(x16), np.uint16), h(F16_SIN if s else F16_COS),
                lambda a: a.astype(np.uint16).view(np.float16))
    xb = mx.array(f32_of(BF16_IN)).astype(mx.bfloat16)
    got = getattr(mx, op)(xb)
    assert got.dtype == mx.bfloat16
    same_or_nan(bits(got.astype(mx.float32), np.uint32), h(BF16_SIN if s else BF16_COS),
                lambda a: a.astype(np.uint32).view(np.float32))
    xd = mx.array(np.array(h(F64_IN), np.uint64).view(np.float64), dtype=mx.float64)
    got = getattr(mx, op)(xd)
    assert got.dtype == mx.float64
    assert bits(got, np.uint64) == h(F64_SIN if s else F64_COS)


def test_sincos_ints_and_errors():
    assert mx.sin(mx.array([0, 1, 2])).dtype == mx.float32
    assert bits(mx.sin(mx.array([0, 1, 2])), np.uint32) == bits(mx.sin(mx.array([0.0, 1.0, 2.0])), np.uint32)
    assert mx.cos(mx.zeros((0, 3))).shape == (0, 3)
    # complex stays C's csinf / ccosf
    c = np.array([1 + 2j, -0.5 + 0.25j], np.complex64)
    np.testing.assert_allclose(np.array(mx.sin(mx.array(c))), np.sin(c), rtol=1e-6)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_logaddexp_bits():
    a, b = f32_of(LAE_A), f32_of(LAE_B)
    assert bits(mx.logaddexp(mx.array(a), mx.array(b)), np.uint32) == h(LAE_F32)
    # broadcast and scalar operands go through the same kernel
    assert bits(mx.logaddexp(mx.array(a[:1]), mx.array(b[:14]))[0], np.uint32) == bits(
        mx.logaddexp(mx.array(a[:1]), mx.array(b[:1])), np.uint32)
    a16, b16 = a[:14].astype(np.float16), b[:14].astype(np.float16)
    assert bits(mx.logaddexp(mx.array(a16), mx.array(b16)), np.uint16) == h(LAE_F16)
    ab, bb = mx.array(a[:14]).astype(mx.bfloat16), mx.array(b[:14]).astype(mx.bfloat16)
    got = mx.logaddexp(ab, bb)
    assert got.dtype == mx.bfloat16
    assert bits(got.astype(mx.float32), np.uint32) == h(LAE_BF16)
    ad = mx.array(a[:14].astype(np.float64), dtype=mx.float64)
    bd = mx.array(b[:14].astype(np.float64), dtype=mx.float64)
    assert bits(mx.logaddexp(ad, bd), np.uint64) == h(LAE_F64)


# sigmoid (float32, float64), exp and erf (float64: MLX computes them in float), baked from MLX 0.32.4
S32_IN = [0x0, 0x80000000, 0x3f800000, 0xbf800000, 0x3dcccccd, 0xc0533333, 0x41a00000, 0xc1a00000, 0x42b10000, 0xc2b10000, 0x42c80000, 0xc2d00000, 0xda24260, 0x40b00000, 0xbf400000, 0x7f800000, 0xff800000]
S32 = [0x3f000000, 0x3f000000, 0x3f3b26a8, 0x3e89b2b1, 0x3f06650a, 0x3d11b31a, 0x3f800000, 0x310da432, 0x3f800000, 0x0, 0x3f800000, 0x0, 0x3f000000, 0x3f7ef542, 0x3ea442b1, 0x3f800000, 0x0]
S64_IN = [0x0, 0x8000000000000000, 0x3ff000001ad7f29b, 0xbff000001ad7f29b, 0x3fb99999caf31dd0, 0xc00a66668c4ab6a8, 0x40340000218def42, 0xc0340000218def42, 0x40562000251e9d7a, 0xc0562000251e9d7a, 0x4059000029f16b12, 0xc05a00002b9eea3c, 0x39b4484c22073a87, 0x4016000024e8ed95, 0xbfe800002843ebe8, 0x7ff0000000000000, 0xfff0000000000000]
S64 = [0x3fe0000000000000, 0x3fe0000000000000, 0x3fe764d4fbe31fb1, 0x3fd136560839c09e, 0x3fe0cca12cdef5e0, 0x3fa23662e89c2595, 0x3feffffffee4b7b4, 0x3e21b484c0e42ef0, 0x3ff0000000000000, 0x0, 0x3ff0000000000000, 0x0, 0x3fe0000000000000, 0x3fefdea84e9c15d1, 0x3fd48856072db97a, 0x3ff0000000000000, 0x0]
E64 = [0x3ff0000000000000, 0x3ff0000000000000, 0x4005bf0aa0000000, 0x3fd78b5620000000, 0x3ff1aec7c0000000, 0x3fa2e25980000000, 0x41bceb0b20000000, 0x3e21b484c0000000, 0x7ff0000000000000, 0x0, 0x7ff0000000000000, 0x0, 0x3ff0000000000000, 0x406e962560000000, 0x3fde3b40e0000000, 0x7ff0000000000000, 0x0]
ERF64 = [0x8000000000000000, 0x8000000000000000, 0x3feaf767a0000000, 0xbfeaf767a0000000, 0x3fbcca5fa0000000, 0xbfeffff9a0000000, 0x3ff0000000000000, 0xbff0000000000000, 0x3ff0000000000000, 0xbff0000000000000, 0x3ff0000000000000, 0xbff0000000000000, 0x0, 0x3ff0000000000000, 0xbfe6c1c960000000, 0x3ff0000000000000, 0xbff0000000000000]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_sigmoid_exp_erf_bits():
    x32 = np.array(S32_IN, np.uint32).view(np.float32)
    got = np.array(mx.sigmoid(mx.array(x32))).view(np.uint32)
    assert [hex(v) for v in got] == [hex(v) for v in S32]
    x64 = np.array(S64_IN, np.uint64).view(np.float64)
    for f, want in [(mx.sigmoid, S64), (mx.exp, E64), (mx.erf, ERF64)]:
        got = np.array(f(mx.array(x64, dtype=mx.float64))).view(np.uint64)
        assert [hex(v) for v in got] == [hex(v) for v in want], f.__name__
