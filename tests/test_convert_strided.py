"""Strided conversion from NumPy (issue #15): every-other-element rows and
big copies split over the pool (strided and dense) give NumPy's values."""
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


@pytest.mark.parametrize("n", [(4 << 20) // 4, (4 << 20) // 4 + 12345, 3 * (1 << 20) + 7])
def test_big_dense_copy_split_over_the_pool(n, in_threads):
    # from 4 MB on, a dense copy is split into 1 MB slices over the pool, the tail
    # copied after them; several threads convert at once
    src = np.random.default_rng(n).standard_normal(n).astype(np.float32)

    def work(i):
        for _ in range(3):
            np.testing.assert_array_equal(np.array(mx.array(src)), src)
        u8 = src.view(np.uint8)[i:]  # odd byte counts, any alignment
        np.testing.assert_array_equal(np.array(mx.array(u8)), u8)

    in_threads(work, 3)
