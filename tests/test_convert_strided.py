"""Strided conversion from NumPy (issue #15): every-other-element rows and
big copies split over the pool give NumPy's values."""
import numpy as np
import pytest

import mkpy as mx


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16, np.uint8, np.complex64])
def test_every_other_element(dtype):
    base = (np.arange(2000 * 1200) % 251).astype(dtype).reshape(2000, 1200)
    for v in (base[:, ::2], base[::3, 1::2], base[:, ::2][:, :7], base.T[::2], base[:, ::4]):
        got = np.array(mx.array(v))
        assert got.dtype == (np.float32 if dtype == np.float64 else dtype)
        np.testing.assert_array_equal(got, v.astype(got.dtype))


def test_unaligned_source():
    raw = np.zeros(4 * 600 * 400 + 1, np.uint8)
    v = raw[1:].view(np.float32).reshape(600, 400)  # misaligned by one byte
    v[...] = np.arange(600 * 400, dtype=np.float32).reshape(600, 400)
    s = v[:, ::2]
    np.testing.assert_array_equal(np.array(mx.array(s)), s)


def test_big_3d_strided_copy():
    base = np.arange(64 * 300 * 200, dtype=np.float32).reshape(64, 300, 200)
    for v in (base[:, ::2, ::3], base.transpose(2, 0, 1), base[::2, :, ::2]):
        np.testing.assert_array_equal(np.array(mx.array(v)), v)
