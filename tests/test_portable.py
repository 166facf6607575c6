"""Results that C leaves undefined, pinned to MLX's (issue #26): float to integer casts out of
range, and integer division at its edges, give the same values with every compiler."""
import math

import numpy as np
import pytest

import mkpy as mx

VALUES = [math.nan, math.inf, -math.inf, 3e9, -3e9, 1e20, -1.5, 300.7, 2.0 ** 63, 2.0 ** 64, -0.0, 70000.0, 2.5,
          -2.0 ** 31, 2.0 ** 31, 1.5e19, -2.0 ** 63, 255.9, -129.0]
INTS = [(mx.int8, np.int8), (mx.int16, np.int16), (mx.int32, np.int32), (mx.int64, np.int64), (mx.uint8, np.uint8),
        (mx.uint16, np.uint16), (mx.uint32, np.uint32), (mx.uint64, np.uint64)]


def x86_cast(v, nptype):
    """MLX's CPU build (GCC, x86-64): a truncating conversion to 32 bits (8-, 16-, 32-bit signed,
    8- and 16-bit unsigned targets) or 64 bits (int64, uint32) whose NaN and out-of-range
    results are that width's INT_MIN, wrapped to the target; uint64 converts values from 2^63
    up as v - 2^63 with the top bit set."""
    info = np.iinfo(nptype)
    bits, signed = info.bits, info.min < 0

    def cvt(x, w):
        if math.isnan(x) or not (-2.0 ** (w - 1) <= x < 2.0 ** (w - 1)):
            return -2 ** (w - 1)
        return int(x)

    if bits == 64 and not signed:
        r = cvt(v, 64) if not v >= 2.0 ** 63 else cvt(v - 2.0 ** 63, 64) ^ -2 ** 63
    else:
        r = cvt(v, 64 if bits == 64 or (bits == 32 and not signed) else 32)
    r &= 2 ** bits - 1
    if signed and r >= 2 ** (bits - 1):
        r -= 2 ** bits
    return r


@pytest.mark.parametrize("src", [mx.float32, mx.float64, mx.float16, mx.bfloat16])
@pytest.mark.parametrize("dst,nptype", INTS)
def test_float_to_int_casts_out_of_range_are_mlxs(src, dst, nptype):
    with mx.stream(mx.cpu):  # float64 runs on the CPU stream only
        x = mx.array(np.array(VALUES, np.float64)).astype(src)
        exact = np.array(x.astype(mx.float64)).tolist()  # the values src holds (float16 rounds 3e9 to inf)
        assert np.array(x.astype(dst)).tolist() == [x86_cast(v, nptype) for v in exact]


@pytest.mark.parametrize("dtype,nptype", [(mx.int8, np.int8), (mx.int16, np.int16), (mx.int32, np.int32),
                                          (mx.int64, np.int64)])
def test_integer_division_edges(dtype, nptype):
    info = np.iinfo(nptype)
    a = mx.array(np.array([info.min, info.min, info.max, -7, 7, info.min, 5], nptype))
    b = mx.array(np.array([-1, 1, -1, 0, -2, 0, 0], nptype))
    # MLX: INT_MIN // -1 wraps to INT_MIN, x // 0 is 0, x % 0 is x, x % -1 is 0
    assert np.array(a // b).tolist() == [info.min, info.min, -info.max, 0, -4, 0, 0]
    assert np.array(a % b).tolist() == [0, 0, 0, -7, -1, info.min, 5]


def test_shifts_out_of_range_are_zero_or_the_sign():
    # C leaves these undefined (x86 masks the count); mkpy gives NumPy's values on every compiler
    x = mx.array([1, -8, 5, -1], mx.int64)
    s = mx.array([64, 70, -1, 63], mx.int64)
    assert np.array(mx.left_shift(x, s)).tolist() == [0, 0, 0, -2 ** 63]
    assert np.array(mx.right_shift(x, s)).tolist() == [0, -1, 0, -1]
    u = mx.array(np.array([1, 2 ** 63], np.uint64))
    assert np.array(mx.left_shift(u, mx.array(np.array([64, 1], np.uint64)))).tolist() == [0, 0]
