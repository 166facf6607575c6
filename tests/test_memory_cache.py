"""The buffer cache and memory counters as MLX's allocator keeps them: every
freed buffer (small ones too) waits in the cache up to the cache limit and is
reused; reset_peak_memory sets the peak to 0; the wired limit is bounded by
the recommended working set."""
import gc

import numpy as np
import pytest

import mkpy as mx


def test_small_buffer_goes_to_cache_and_is_reused():
    gc.collect()
    mx.clear_cache()
    assert mx.get_cache_memory() == 0
    a = mx.arange(4096, dtype=mx.float32)  # 16 KiB, below the mapped size
    mx.eval(a)
    del a
    assert mx.get_cache_memory() == 4096 * 4
    # the same size comes back out of the cache, with the new contents
    b = mx.full((4096,), 3.0)
    mx.eval(b)
    assert mx.get_cache_memory() < 4096 * 4  # (the freed scalar 3.0 may wait there)
    assert np.array_equal(np.array(b), np.full((4096,), 3.0, np.float32))
    # another size does not take it
    del b
    c = mx.zeros((100,), mx.float32)
    mx.eval(c)
    assert mx.get_cache_memory() >= 4096 * 4
    assert not np.array(c).any()
    mx.clear_cache()
    assert mx.get_cache_memory() == 0


def test_cache_limit_zero_keeps_nothing():
    gc.collect()
    mx.clear_cache()
    old = mx.set_cache_limit(0)
    try:
        a = mx.zeros((4096,))
        mx.eval(a)
        del a
        assert mx.get_cache_memory() == 0
        assert mx.set_cache_limit(old) == 0
    finally:
        mx.set_cache_limit(old)
    assert mx.set_cache_limit(old) == old


def test_cache_limit_releases_oldest_first():
    gc.collect()
    mx.clear_cache()
    a, b = mx.zeros((1024,)), mx.zeros((2048,))  # 4 KiB, 8 KiB
    mx.eval(a, b)
    del a
    del b  # b is the newest
    assert mx.get_cache_memory() == 12 * 1024
    old = mx.set_cache_limit(10 * 1024)
    try:
        assert mx.get_cache_memory() == 8 * 1024  # the older 4 KiB block went
        c = mx.zeros((2048,))
        mx.eval(c)
        assert mx.get_cache_memory() < 8 * 1024
    finally:
        mx.set_cache_limit(old)
    mx.clear_cache()


def test_many_small_buffers_cycle():
    # thousands of frees and reuses across sizes stay consistent
    gc.collect()
    mx.clear_cache()
    for i in range(200):
        xs = [mx.full((1 + (i * 7 + k) % 300,), float(k)) for k in range(10)]
        mx.eval(*xs)
        for k, x in enumerate(xs):
            assert np.all(np.array(x) == k)
    del xs
    assert mx.get_cache_memory() > 0
    mx.clear_cache()
    assert mx.get_cache_memory() == 0


def test_peak_reset_is_zero():
    a = mx.zeros((4096,))
    mx.eval(a)
    mx.reset_peak_memory()
    assert mx.get_peak_memory() == 0
    b = mx.ones((4096,))
    mx.eval(b)
    assert mx.get_peak_memory() >= 4096 * 4
    del a, b


def test_wired_limit_bounded_by_working_set():
    top = mx.device_info()["max_recommended_working_set_size"]
    old = mx.set_wired_limit(1000)
    assert mx.set_wired_limit(old) == 1000
    with pytest.raises(ValueError, match="wired limit larger than the maximum working set size"):
        mx.set_wired_limit(top + 10)
    assert mx.set_wired_limit(top) == old
    mx.set_wired_limit(old)
