"""64-bit values are checked, never wrapped (issue #17): axes, shapes, sizes, grids and
threadgroups; sizes too large to allocate raise before any allocation."""
import numpy as np
import pytest

import mkpy as mx

launch_geometry = mx.metal._launch_geometry


@pytest.mark.parametrize("axis", [2**32, 2**32 + 1, -2**32, 2**40, 2**63 - 1])
def test_axis_is_never_truncated(axis):
    x = mx.ones((2, 3))
    # 2**32 truncated to a C int is 0: it used to sum axis 0
    with pytest.raises(OverflowError, match=r"outside the supported range \[-2147483648, 2147483647\]"):
        mx.sum(x, axis=axis)
    with pytest.raises(OverflowError):
        mx.sum(x, axis=(0, axis))
    with pytest.raises(OverflowError):
        mx.argmax(x, axis=axis)
    with pytest.raises(OverflowError):
        mx.var(x, axis=0, ddof=axis)
    with pytest.raises(OverflowError):
        mx.random.permutation(x, axis=axis)
    with pytest.raises(OverflowError):
        mx.random.categorical(x, axis=axis)


def test_axis_in_int_range_but_invalid_is_mlx_index_error():
    with pytest.raises(IndexError, match="Invalid axis"):
        mx.sum(mx.ones((2, 3)), axis=2)
    with pytest.raises(IndexError, match="Invalid axis"):
        mx.sum(mx.ones((2, 3)), axis=-3)
    with pytest.raises(OverflowError):
        mx.sum(mx.ones((2, 3)), axis=2**64)


def test_size_in_bytes_overflow_is_refused_at_construction():
    # (2^31 - 1)^3 float32 elements overflow int64 bytes: the byte count used to wrap
    with pytest.raises(ValueError, match="overflows"):
        mx.ones((2**31 - 1, 2**31 - 1, 2**31 - 1))
    with pytest.raises(ValueError, match="overflows"):
        mx.zeros((2**31 - 1,) * 4, dtype=mx.uint8)
    with pytest.raises(ValueError, match="Negative"):
        mx.zeros((-1,))


@pytest.mark.parametrize("shape", [(2**31,), (2**31, 2**31), [2**62], (4, 2**40), 2**31, [-2**31 - 1]])
def test_dims_beyond_int32_are_mlx_overflow_errors(shape):
    # MLX's dims are C ints: nanobind's OverflowError naming the value, before anything is built
    bad = [v for v in (shape if isinstance(shape, (list, tuple)) else [shape]) if not -2**31 <= v < 2**31][0]
    for make in (mx.zeros, mx.ones, lambda s: mx.full(s, 1.5), lambda s: mx.reshape(mx.zeros(4), s),
                 lambda s: mx.broadcast_to(mx.zeros(1), s)):
        with pytest.raises(OverflowError, match=f"Integer value {bad} is outside the supported range"):
            make(shape)


def test_computed_dims_beyond_int32_are_overflow_errors():
    big = mx.zeros(2**30)  # lazy: nothing of this size is allocated
    msg = "Shape dimension {} is outside the supported range .* 32-bit integers for shape dimensions"
    with pytest.raises(OverflowError, match=r"\[concatenate\] " + msg.format(3 * 2**30)):
        mx.concatenate([big] * 3)
    with pytest.raises(OverflowError, match=r"\[repeat\] " + msg.format(2**31)):
        mx.repeat(big, 2)
    with pytest.raises(OverflowError, match=r"\[tile\] " + msg.format(2**32)):
        mx.tile(big, 4)
    with pytest.raises(OverflowError, match=r"\[kron\] " + msg.format(2**32)):
        mx.kron(mx.zeros(2**16), mx.zeros(2**16))
    # the largest int32 dims still build
    assert mx.concatenate([mx.zeros(2**30 - 1), mx.zeros(2**30)]).shape == (2**31 - 1,)


def test_numpy_dim_beyond_int32_is_refused():
    a = np.lib.stride_tricks.as_strided(np.zeros(1, np.bool_), shape=(2**31,), strides=(0,))
    with pytest.raises(OverflowError, match="Shape dimension 2147483648 is outside the supported range "
                       r"\[-2147483648, 2147483647\]. MLX currently uses 32-bit integers for shape dimensions."):
        mx.array(a)


def test_too_large_to_allocate_is_a_memory_error_before_allocating():
    # 4 TiB: mapped without reservation it used to "succeed", then the OOM killer ended the process
    for make in (lambda: mx.zeros((2**20, 2**20)), lambda: mx.ones((2**20, 2**20)),
                 lambda: mx.full((2**21, 2**20), 1, dtype=mx.uint8)):
        with pytest.raises(MemoryError, match="bytes"):
            mx.eval(make())
    # the library stays usable
    assert mx.sum(mx.ones((3,))).item() == 3


def test_python_int_beyond_int64_is_a_clear_overflow_error():
    for v in (2**70, [2**70], [[1], [2**64]], -2**63 - 1):
        with pytest.raises(OverflowError, match="does not fit int64"):
            mx.array(v)


# ------------------------------------------------------------------ launch arithmetic

def test_launch_geometry_small_grids_cover_every_thread():
    for grid, tg in [((10, 1, 1), (4, 1, 1)), ((7, 5, 3), (2, 2, 2)), ((1, 1, 1), (32, 1, 1)),
                     ((33, 2, 1), (32, 1, 1))]:
        ngroups, total, _, _ = launch_geometry(grid, tg, 0)
        covered = 0
        for g in range(total):
            _, _, ext, origin = launch_geometry(grid, tg, g)
            for d in range(3):
                assert 1 <= ext[d] <= tg[d] and origin[d] + ext[d] <= grid[d]
            covered += ext[0] * ext[1] * ext[2]
        assert covered == grid[0] * grid[1] * grid[2]
        with pytest.raises(IndexError):
            launch_geometry(grid, tg, total)


@pytest.mark.parametrize("n", [2**32 - 1, 2**32 - 2, 2**32 - 1024, 2**32 - 1025, 2**31 + 1])
def test_launch_geometry_near_two_to_the_32(n):
    """The last threadgroups of a grid near 2^32: b * tg + tg passes 2^32, and used to wrap
    (the last group was skipped, or taken as full)."""
    for d in range(3):
        grid = [1, 1, 1]
        grid[d] = n
        tg = [1, 1, 1]
        tg[d] = 1024
        ngroups, total, _, _ = launch_geometry(tuple(grid), tuple(tg), 0)
        groups = (n + 1023) // 1024
        assert ngroups[d] == groups and total == groups
        _, _, ext, origin = launch_geometry(tuple(grid), tuple(tg), total - 1)
        assert origin[d] == (groups - 1) * 1024
        assert origin[d] + ext[d] == n  # the last group ends exactly at the grid's end
        assert ext[d] == n - (groups - 1) * 1024
        _, _, ext, origin = launch_geometry(tuple(grid), tuple(tg), total - 2)
        assert ext[d] == 1024 and origin[d] == (groups - 2) * 1024


def test_launch_geometry_three_large_dimensions():
    grid = (2**32 - 1, 2**16 + 3, 5)
    tg = (256, 2, 2)
    ngroups, total, _, _ = launch_geometry(grid, tg, 0)
    assert ngroups == (2**24, 2**15 + 2, 3) and total == 2**24 * (2**15 + 2) * 3
    _, _, ext, origin = launch_geometry(grid, tg, total - 1)
    assert ext == (255, 1, 1) and origin == (2**32 - 256, 2**16 + 2, 4)
    # more than 2^64 threadgroups cannot be counted: refused instead of wrapping
    with pytest.raises(ValueError, match="2\\^64 threadgroups"):
        launch_geometry((2**32 - 1,) * 3, (1, 1, 1), 0)


def test_launch_geometry_refuses_what_the_launch_refuses():
    with pytest.raises(ValueError, match="Thread group size"):
        launch_geometry((4, 1, 1), (2**62, 4, 1), 0)
    with pytest.raises(ValueError, match="below 2"):
        launch_geometry((2**32, 1, 1), (1, 1, 1), 0)
    with pytest.raises(ValueError, match="positive"):
        launch_geometry((0, 1, 1), (1, 1, 1), 0)


def test_partial_last_threadgroup_runs_every_thread():
    """A real launch whose last threadgroup is partial, on every engine."""
    n = 3 * 1024 + 5
    for source in ("uint i = thread_position_in_grid.x;\nout[i] = inp[i] + 1.0f;",
                   "threadgroup float t[1];\nuint i = thread_position_in_grid.x;\n"
                   "threadgroup_barrier(mem_flags::mem_threadgroup);\nout[i] = inp[i] + 1.0f;"):
        k = mx.fast.metal_kernel(name="partial", input_names=["inp"], output_names=["out"], source=source)
        x = mx.arange(n, dtype=mx.float32)
        (out,) = k(inputs=[x], output_shapes=[(n,)], output_dtypes=[mx.float32], grid=(n, 1, 1),
                   threadgroup=(1024, 1, 1), init_value=-1.0)
        assert mx.array_equal(out, x + 1).item()
