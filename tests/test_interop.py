"""Arrays of other libraries, as MLX's nanobind ndarray reads them (issue #24): DLPack producers
(PyTorch, JAX, a bare ``__dlpack__``) in ``mx.array`` and as operands, NumPy arrays of ml_dtypes'
bfloat16, and host memory adopted without a copy (``mx.asarray(x, copy=False)``). PyTorch and
ml_dtypes are optional: their tests skip where they are missing."""
import gc
import importlib.util
import sys

import numpy as np
import pytest

import mkpy as mx

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_ML_DTYPES = importlib.util.find_spec("ml_dtypes") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed")
needs_ml_dtypes = pytest.mark.skipif(not HAVE_ML_DTYPES, reason="ml_dtypes is not installed")


class DLPackOnly:
    """An array-like that offers DLPack and nothing else (no buffer, no __array__), as PyTorch's
    and JAX's tensors do."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class ArrayOnly:
    """Only NumPy's __array__: MLX's ndarray caster does not read it."""

    def __array__(self, dtype=None, copy=None):
        return np.array([1.0, 2.0, 3.0])


# --- DLPack in mx.array and as an operand -------------------------------------------------


def test_array_reads_a_dlpack_producer():
    n = np.arange(12, dtype=np.int16).reshape(3, 4)
    a = mx.array(DLPackOnly(n))
    assert a.dtype == mx.int16 and a.tolist() == n.tolist()
    # MLX's dtype rules: float64 becomes float32; dtype= converts
    assert mx.array(DLPackOnly(np.array([1.5, 2.5]))).dtype == mx.float32
    b = mx.array(DLPackOnly(n.T), dtype=mx.float16)
    assert b.dtype == mx.float16 and b.tolist() == n.T.tolist()
    assert mx.asarray(DLPackOnly(n)).tolist() == n.tolist()
    # a capsule itself, as nanobind takes one
    assert mx.array(n.__dlpack__()).tolist() == n.tolist()
    with pytest.raises(ValueError, match="Invalid type .*ArrayOnly received in array initialization"):
        mx.array(ArrayOnly())


def test_dlpack_producers_are_operands_in_either_order():
    x = mx.array([1.0, 2.0, 4.0])
    d = DLPackOnly(np.array([1.0, 1.0, 2.0]))  # float64: weakly typed, taken as x's float32
    for r, want in [(x - d, [0, 1, 2]), (d - x, [0, -1, -2]), (x * d, [1, 2, 8]), (d / x, [1, 0.5, 0.5]),
                    (x ** d, [1, 2, 16]), (mx.maximum(d, x), [1, 2, 4]), (mx.add(x, d), [2, 3, 6])]:
        assert isinstance(r, mx.array) and r.dtype == mx.float32 and r.tolist() == want
    assert (d < x).tolist() == [False, True, True] and (x == d).tolist() == [True, False, False]
    i = mx.array([1, 2, 3], dtype=mx.int32)
    assert (i + DLPackOnly(np.array([1, 1, 1], dtype=np.int64))).dtype == mx.int32
    with pytest.raises(ValueError, match="Floating point types not allowed with bitwise and"):
        x & d
    with pytest.raises(TypeError):
        x @ d  # matmul takes arrays only
    with pytest.raises(ValueError, match="Cannot perform subtraction on an mkpy.array and .*ArrayOnly"):
        x - ArrayOnly()


@needs_torch
def test_torch_tensors_convert_and_combine():
    import torch

    t = torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)
    a = mx.array(t)
    assert a.dtype == mx.bfloat16 and mx.array_equal(a, mx.array([1.0, 2.0, 3.0], mx.bfloat16)).item()
    x = mx.array([3.0, 3.0, 3.0])
    tt = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    # torch's operators give way (NotImplemented) to mkpy's reflected ones: an mkpy array either way
    for r, want in [(x - tt, [2, 1, 0]), (tt - x, [-2, -1, 0]), (tt * x, [3, 6, 9])]:
        assert isinstance(r, mx.array) and r.dtype == mx.float32 and r.tolist() == want
    assert isinstance(tt == x, mx.array)
    # a tensor that requires grad refuses __dlpack__; torch's to_dlpack reads it, as nanobind does
    g = torch.tensor([1.0, 2.0], requires_grad=True)
    assert mx.array(g).tolist() == [1.0, 2.0] and (x[:2] + g).tolist() == [4.0, 5.0]


# --- ml_dtypes' bfloat16 -------------------------------------------------------------------


@needs_ml_dtypes
def test_ml_dtypes_bfloat16_arrays_become_bfloat16():
    import ml_dtypes

    s = np.array(1.5, dtype=ml_dtypes.bfloat16)
    a = mx.array(s)
    assert a.dtype == mx.bfloat16 and a.shape == () and a.item() == 1.5
    v = np.array([1.5, 2.5, -3.0, 1e30], dtype=ml_dtypes.bfloat16)
    for b in (mx.array(v), mx.asarray(v)):
        assert b.dtype == mx.bfloat16 and b.shape == (4,)
        assert mx.array_equal(b, mx.array([1.5, 2.5, -3.0, 1e30], mx.bfloat16)).item()
    c = mx.array(s, dtype=mx.float32)
    assert c.dtype == mx.float32 and c.item() == 1.5
    assert mx.asarray(v, dtype=mx.float16).dtype == mx.float16
    assert mx.array(v[::2]).tolist() == [1.5, -3.0]
    assert mx.array(ml_dtypes.bfloat16(2.5)).dtype == mx.bfloat16  # a scalar
    # as an operand it takes the array's dtype, as NumPy arrays do
    assert (mx.array([1.0, 1.0, 1.0, 1.0]) + v).tolist()[:3] == [2.5, 3.5, -2.0]
    # adopted without a copy: the same 16-bit words
    w = mx.asarray(v, copy=False)
    assert w.dtype == mx.bfloat16 and w.tolist()[:3] == [1.5, 2.5, -3.0]


# --- adoption without a copy ---------------------------------------------------------------


def test_asarray_copy_false_adopts_host_memory():
    a = np.arange(8, dtype=np.float32)
    x = mx.asarray(a, copy=False)
    assert x.dtype == mx.float32 and x.tolist() == list(range(8))
    a[1] = 99  # the same memory, as on a Mac's unified memory
    assert x[1].item() == 99 and (x * 2).tolist()[1] == 198
    # strides are kept (a transposed view), and dtype= may name the source's own dtype
    m = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = m.T
    y = mx.asarray(t, dtype=mx.int32, copy=False)
    assert y.tolist() == t.tolist() and memoryview(y).strides == t.strides
    m[0, 1] = -5
    assert y[1, 0].item() == -5
    # from_dlpack and DLPack producers too
    z = mx.from_dlpack(a, copy=False)
    a[2] = 7
    assert z[2].item() == 7 and mx.asarray(DLPackOnly(a), copy=False)[2].item() == 7
    assert mx.asarray(b"\x01\x02", copy=False).tolist() == [1, 2]  # any buffer: uint8
    # a size-1 dimension's stride is never read (NumPy may leave any value there)
    col = np.arange(6, dtype=np.float32)[:, None][::2]
    assert mx.asarray(col, copy=False).tolist() == [[0.0], [2.0], [4.0]]
    with pytest.raises(TypeError, match="not a DLPack tensor or buffer"):
        mx.from_dlpack([1, 2], copy=False)


def test_asarray_copy_false_refuses_what_needs_a_copy():
    n = np.arange(4, dtype=np.float64)  # read as float32: 8-byte elements need converting
    with pytest.raises(ValueError, match="Cannot import a CPU array without a copy"):
        mx.asarray(n, copy=False)
    with pytest.raises(ValueError, match="requested dtype without a copy"):
        mx.asarray(np.arange(4, dtype=np.float32), dtype=mx.int32, copy=False)
    with pytest.raises(ValueError, match="negative strides"):
        mx.asarray(np.arange(4, dtype=np.float32)[::-1], copy=False)
    odd = np.frombuffer(bytes(20), dtype=np.uint8)[1:17].view(np.int32)  # misaligned int32
    with pytest.raises(ValueError, match="Cannot import a CPU array without a copy"):
        mx.asarray(odd, copy=False)
    for src in ([1, 2, 3], 5, mx.array([1, 2]), "ab"):
        with pytest.raises(ValueError, match="Unable to avoid copy"):
            mx.asarray(src, copy=False)
    # copy=None and copy=True copy, as before
    c = np.arange(3, dtype=np.float32)
    y, z = mx.asarray(c), mx.asarray(c, copy=True)
    mx.eval(y, z)
    c[0] = 9
    assert y[0].item() == 0 and z[0].item() == 0


def test_adopted_memory_is_released_and_never_recycled():
    a = np.full(1 << 16, 3.0, dtype=np.float32)
    refs = sys.getrefcount(a)
    x = mx.asarray(a, copy=False)
    assert sys.getrefcount(a) > refs  # held while x lives
    y = x.sum()
    mx.eval(y)
    assert y.item() == 3.0 * a.size
    del x, y
    gc.collect()
    assert sys.getrefcount(a) == refs  # let go of
    # not put in mkpy's cache: new arrays of its size never land in the caller's memory
    for _ in range(20):
        mx.eval(mx.zeros(1 << 16) - 7)
    assert (a == 3.0).all()


def test_adopt_in_a_loop_gives_right_results(in_threads):
    # MLX's test_adopt_in_loop_not_recycled, with its results checked, on several threads
    w = mx.random.normal((64, 64), key=mx.random.key(1))
    wn = np.array(w)

    def work(k):
        rng = np.random.default_rng(k)
        for _ in range(50):
            a = rng.random((256, 64), dtype=np.float32)
            r = mx.sum(mx.asarray(a, copy=False) @ w)
            p = a.astype(np.float64) @ wn
            assert abs(r.item() - p.sum()) <= 1e-5 * np.abs(p).sum()  # float32 sums' rounding

    in_threads(work, 3)
