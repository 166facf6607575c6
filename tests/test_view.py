"""mx.view / array.view: the bytes of each row of the last axis read as another dtype, as MLX
(expected values from NumPy's view of the row-major bytes, errors as MLX 0.32.4 words them)."""
import numpy as np
import pytest

import mkpy as mx

PAIRS = [("float32", "int32"), ("float32", "uint16"), ("float32", "float16"), ("int8", "int16"),
         ("int16", "int8"), ("uint8", "bool"), ("bool", "uint8"), ("int64", "float64"), ("uint8", "int64"),
         ("complex64", "float32"), ("float32", "complex64"), ("float16", "uint8"), ("uint32", "int32")]


def mx_dtype(name):
    return mx.bool_ if name == "bool" else getattr(mx, name)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("src,dst", PAIRS)
@pytest.mark.parametrize("layout", ["dense", "transposed", "sliced", "offset"])
def test_view_matches_numpy(src, dst, layout):
    """Expected: NumPy's view of the row-major copy of the same logical array."""
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, (8, 32), dtype=np.uint8)
    if src == "bool":
        raw = raw % 2
    base = raw.view(np.dtype(src))
    if src in ("float32", "float16", "float64", "complex64"):
        base = np.where(np.isfinite(base), base, 0).astype(base.dtype)  # NaN payloads are not preserved by copies
    pick = {"dense": lambda v: v, "transposed": lambda v: v.T, "sliced": lambda v: v[:, ::2],
            "offset": lambda v: v[1:, 2:]}[layout]
    x_np = pick(base)
    x = pick(mx.array(base))
    isz, osz = np.dtype(src).itemsize, np.dtype(dst).itemsize
    if osz > isz and (x_np.shape[-1] * isz) % osz:
        with pytest.raises(ValueError, match=r"\[view\] When viewing as a larger dtype"):
            mx.view(x, mx_dtype(dst))
        return
    want = np.ascontiguousarray(x_np).view(np.dtype(dst))
    got = mx.view(x, mx_dtype(dst))
    assert got.dtype == mx_dtype(dst) and got.shape == want.shape
    assert np.array(got).tobytes() == want.tobytes()


def test_view_bfloat16():
    x = mx.array([1.0, -2.0, 0.5]).astype(mx.bfloat16)
    want = (np.array([1.0, -2.0, 0.5], np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.int16)
    assert mx.view(x, mx.int16).tolist() == want.tolist()
    assert mx.view(mx.array(want), mx.bfloat16).astype(mx.float32).tolist() == [1.0, -2.0, 0.5]


def test_view_values_and_method():
    a = mx.array([1.0, -2.0, 3.5])
    assert a.view(mx.int32).tolist() == np.array([1.0, -2.0, 3.5], np.float32).view(np.int32).tolist()
    assert mx.view(a, mx.uint16).tolist() == np.array([1.0, -2.0, 3.5], np.float32).view(np.uint16).tolist()
    b = mx.arange(16, dtype=mx.int8).reshape(4, 4)
    assert mx.view(b.T, mx.int16).tolist() == np.ascontiguousarray(np.arange(16, dtype=np.int8).reshape(4, 4).T).view(np.int16).tolist()
    assert mx.view(b, mx.int8) is not None and mx.view(b, mx.int8).tolist() == b.tolist()
    assert mx.view(1.5, mx.int32).item() == 1069547520  # Python scalars become float32 arrays
    assert mx.view(mx.array(1.0), mx.int32).item() == 1065353216
    assert mx.view(mx.zeros((2, 0)), mx.int16).shape == (2, 0)
    # a view of a view of a large array (shared storage) after the source died
    big = mx.arange(1 << 20, dtype=mx.float32)
    v = mx.view(big[2:], mx.uint8)
    del big
    assert np.array_equal(np.array(v)[:8], np.arange(2, 4, dtype=np.float32).view(np.uint8))


def test_view_errors():
    with pytest.raises(ValueError, match=r"^\[view\] Changing the type of a scalar is only allowed for types with "
                                         r"the same size\.$"):
        mx.view(mx.array(1.0), mx.int16)
    with pytest.raises(ValueError, match=r"^\[view\] When viewing as a larger dtype, the size in bytes of the last "
                                         r"axis must be a multiple of the requested type size\.$"):
        mx.view(mx.arange(3, dtype=mx.int8), mx.int16)
    with pytest.raises(TypeError, match=r"view\(\): incompatible function arguments"):
        mx.view(mx.array([1.0]), "float32")
    with pytest.raises(TypeError, match=r"view\(\): incompatible function arguments"):
        mx.view([1.0, 2.0], mx.int32)
