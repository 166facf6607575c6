"""Linear algebra (matmul and @, addmm, inner, outer, tensordot) against NumPy,
with dtypes, shapes, layouts and error messages checked against values
obtained from MLX 0.32."""
import inspect
import itertools
import time

import numpy as np
import pytest

import mkpy as mx

FLOATS = ["float16", "float32", "float64", "bfloat16", "complex64"]
INTS = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"]
LOW = ("float16", "bfloat16")
# relative tolerance per dtype of a product computed from the rounded inputs
TOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-5, "float64": 1e-12, "complex64": 2e-5}


def dname(a):
    n = str(a.dtype).split(".")[-1]
    return "bool_" if n == "bool" else n


def npv(a):
    """The values of an mkpy array as float64 / complex128 NumPy values."""
    if dname(a) == "bfloat16":
        a = a.astype(mx.float32)
    v = np.array(a)
    return v.astype(np.complex128 if v.dtype.kind == "c" else np.float64)


def rand(shape, dt="float32", seed=0):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(shape)
    if dt == "complex64":
        v = v + 1j * rng.standard_normal(shape)
        return mx.array(v.astype(np.complex64))
    if dt in INTS or dt == "bool_":
        return mx.array(rng.integers(0, 3, size=shape).astype(np.int32)).astype(getattr(mx, dt))
    return mx.array(v.astype(np.float32)).astype(getattr(mx, dt))


def check(got, want, dt):
    assert got.shape == want.shape
    t = TOL[dt]
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(npv(got), want, rtol=t, atol=t * scale)


def ref_matmul(a, b):
    return np.matmul(npv(a), npv(b))


# ----------------------------------------------------------------- matmul


SHAPES = [
    ((3, 3), (3, 3)),
    ((2, 5), (5, 3)),
    ((7, 1), (1, 4)),
    ((1, 6), (6, 1)),
    ((4,), (4, 3)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((1,), (1,)),
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((3, 4), (2, 5, 4, 6)),
    ((4,), (2, 5, 4, 6)),
    ((7, 2, 3, 4), (4,)),
    ((6, 3, 4), (4, 5)),
    ((6, 1, 4), (4, 5)),
    ((6, 3, 4), (6, 4, 1)),
    ((2, 3, 4), (1, 4, 5)),
    ((1, 3, 4), (5, 4, 2)),
    ((0, 3), (3, 2)),
    ((2, 0), (0, 2)),
    ((0,), (0,)),
    ((2, 3), (3, 0)),
    ((0, 2, 3), (3, 2)),
    ((2, 0, 3), (2, 3, 4)),
    ((3, 2, 0), (0, 5)),
]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_matmul_shapes(sa, sb, dt):
    a, b = rand(sa, dt, 1), rand(sb, dt, 2)
    r = mx.matmul(a, b)
    assert dname(r) == dt
    check(r, ref_matmul(a, b), dt)
    r2 = a @ b
    assert r2.shape == r.shape and np.array_equal(npv(r2), npv(r))


def test_matmul_zero_k_gives_zeros():
    r = mx.matmul(mx.ones((2, 0)), mx.ones((0, 3)))
    assert r.shape == (2, 3) and r.tolist() == [[0.0] * 3] * 2
    r = mx.matmul(mx.ones((0,)), mx.ones((0,)))
    assert r.shape == () and r.item() == 0.0


# (a dtype, b dtype) -> result dtype, as MLX 0.32
PROMOTION = [
    ("float16", "float32", "float32"),
    ("bfloat16", "float16", "float32"),
    ("int32", "float32", "float32"),
    ("bool_", "float16", "float16"),
    ("int64", "float16", "float16"),
    ("uint8", "bfloat16", "bfloat16"),
    ("float64", "complex64", "complex64"),
    ("float64", "float16", "float64"),
    ("float32", "float64", "float64"),
    ("int32", "complex64", "complex64"),
]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("da,db,dr", PROMOTION)
def test_matmul_promotion(da, db, dr):
    a, b = rand((3, 4), da, 1), rand((4, 2), db, 2)
    r = a @ b
    assert dname(r) == dr
    check(r, ref_matmul(a, b), dr)


@pytest.mark.parametrize("dt", INTS + ["bool_"])
def test_matmul_integer_inputs_raise(dt):
    a, b = rand((2, 3), dt), rand((3, 2), dt)
    msg = (f"[matmul] Only inexact types are supported but {dt.rstrip('_')} and {dt.rstrip('_')} were provided "
           f"which results in {dt.rstrip('_')}, which is not a floating point type.")
    with pytest.raises(ValueError) as e:
        mx.matmul(a, b)
    assert str(e.value) == msg
    with pytest.raises(ValueError):
        a @ b


def test_matmul_mixed_integer_message():
    with pytest.raises(ValueError) as e:
        mx.matmul(rand((2, 3), "uint8"), rand((3, 2), "int8"))
    assert str(e.value) == ("[matmul] Only inexact types are supported but uint8 and int8 were provided which "
                            "results in int16, which is not a floating point type.")


MATMUL_ERRORS = [
    ((2, 3), (4, 5), "[matmul] Last dimension of first input with shape (2,3) must match second to last "
     "dimension of second input with shape (4,5)."),
    ((3,), (4,), "[matmul] Last dimension of first input with shape (1,3) must match second to last "
     "dimension of second input with shape (4,1)."),
    ((2, 3), (4,), "[matmul] Last dimension of first input with shape (2,3) must match second to last "
     "dimension of second input with shape (4,1)."),
    ((4,), (3, 2), "[matmul] Last dimension of first input with shape (1,4) must match second to last "
     "dimension of second input with shape (3,2)."),
    ((), (3,), "[matmul] Got 0 dimension input. Inputs must have at least one dimension."),
    ((3,), (), "[matmul] Got 0 dimension input. Inputs must have at least one dimension."),
    ((2, 3, 4), (5, 4, 6), "[broadcast_shapes] Shapes (2) and (5) cannot be broadcast."),
    ((2, 3, 3, 4), (5, 4, 6), "[broadcast_shapes] Shapes (2,3) and (5) cannot be broadcast."),
    ((2, 3, 4), (2, 5, 4, 6), "[broadcast_shapes] Shapes (2) and (2,5) cannot be broadcast."),
]


@pytest.mark.parametrize("sa,sb,msg", MATMUL_ERRORS)
def test_matmul_shape_errors(sa, sb, msg):
    with pytest.raises(ValueError) as e:
        mx.matmul(mx.ones(sa), mx.ones(sb))
    assert str(e.value) == msg


def test_matmul_shape_checked_before_dtype():
    with pytest.raises(ValueError, match=r"Last dimension of first input with shape \(2,3\)"):
        mx.matmul(mx.ones((2, 3), dtype=mx.int32), mx.ones((4, 6), dtype=mx.int32))


@pytest.mark.parametrize("other", [1.0, 2, [1.0, 2.0, 3.0], np.ones((3, 2), np.float32), None])
def test_matmul_needs_arrays(other):
    x = mx.ones((2, 3))
    with pytest.raises(TypeError, match=r"^matmul\(\): incompatible function arguments"):
        mx.matmul(x, other)
    with pytest.raises(TypeError, match=r"^matmul\(\): incompatible function arguments"):
        mx.matmul(other, x)
    with pytest.raises(TypeError, match=r"^__matmul__\(\): incompatible function arguments"):
        x @ other
    y = mx.ones((3, 3))
    with pytest.raises(TypeError, match=r"^__imatmul__\(\): incompatible function arguments"):
        y @= other


def test_matmul_signature_and_positional_only():
    x = mx.ones((2, 2))
    assert str(inspect.signature(mx.matmul)) == "(a, b, /, *, stream=None)"
    assert mx.matmul(x, x, stream=mx.cpu).shape == (2, 2)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        mx.matmul(a=x, b=x)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        mx.matmul(x)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        mx.matmul(x, x, x)


def test_matmul_operator_forms():
    a, b = rand((2, 3), seed=1), rand((3, 2), seed=2)
    with pytest.raises(TypeError):
        1.0 @ a  # no reflected form, as MLX
    # NumPy's operator converts the mkpy array
    r = np.ones((4, 2), np.float32) @ a
    assert isinstance(r, np.ndarray) and r.shape == (4, 3)
    # @= replaces the array in place: aliases see it, the dtype may change
    x = mx.ones((2, 2), dtype=mx.float16)
    alias = x
    x @= mx.full((2, 2), 2.0)
    assert alias is x and dname(x) == "float32" and x.tolist() == [[4.0, 4.0], [4.0, 4.0]]
    with pytest.raises(ValueError, match=r"\[matmul\] Last dimension"):
        x @= mx.ones((3, 3))
    c = mx.ones((2, 2), dtype=mx.int32)
    with pytest.raises(ValueError, match=r"\[matmul\] Only inexact types"):
        c @= c


def test_matmul_lazy_inputs():
    a, b = rand((4, 5), seed=3), rand((5, 6), seed=4)
    r = (a + 1) @ (b * 2)
    check(r, (npv(a) + 1) @ (npv(b) * 2), "float32")


# ---------------------------------------------------------------- layouts


def layouts(shape, seed):
    """(name, mkpy array, NumPy values) with the same values in different
    memory layouts: transposed, sliced with steps, negative steps, padded
    rows, broadcast rows, permuted batch dims."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(shape).astype(np.float32)
    out = [("dense", mx.array(base), base)]
    nd = len(shape)
    if nd >= 2:
        t = np.ascontiguousarray(np.swapaxes(base, -1, -2))
        out.append(("transposed", mx.swapaxes(mx.array(t), -1, -2), base))
        pad = rng.standard_normal(shape[:-1] + (shape[-1] + 3,)).astype(np.float32)
        out.append(("padded rows", mx.array(pad)[..., : shape[-1]], pad[..., : shape[-1]]))
    big = rng.standard_normal([2 * s + 1 for s in shape]).astype(np.float32)
    sl = tuple(slice(1, None, 2) for _ in shape)
    out.append(("step 2", mx.array(big)[sl], big[sl]))
    neg = tuple(slice(2 * s - 1, None, -2) if s else slice(0, 0) for s in shape)
    out.append(("step -2", mx.array(big)[neg], big[neg]))
    row = rng.standard_normal(shape[-1]).astype(np.float32)
    out.append(("broadcast", mx.broadcast_to(mx.array(row), shape), np.broadcast_to(row, shape)))
    if nd >= 3:
        perm = [1, 0] + list(range(2, nd))
        p = np.ascontiguousarray(np.transpose(base, perm))
        out.append(("batch permuted", mx.transpose(mx.array(p), perm), base))
    return out


LAYOUT_SHAPES = [
    ((5, 6), (6, 4)),
    ((1, 6), (6, 4)),
    ((5, 6), (6, 1)),
    ((6,), (6, 4)),
    ((5, 6), (6,)),
    ((6,), (6,)),
    ((3, 5, 6), (3, 6, 4)),
    ((3, 5, 6), (6, 4)),
    ((3, 1, 6), (6, 4)),
    ((2, 3, 5, 6), (3, 6, 1)),
]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", ["float32", "float16", "float64"])
@pytest.mark.parametrize("sa,sb", LAYOUT_SHAPES)
def test_matmul_layouts(sa, sb, dt):
    t = getattr(mx, dt)
    for (na, xa, va), (nb, xb, vb) in itertools.product(layouts(sa, 1), layouts(sb, 2)):
        a, b = xa.astype(t), xb.astype(t)
        r = a @ b
        want = np.matmul(npv(a), npv(b))
        assert r.shape == want.shape, (na, nb)
        np.testing.assert_allclose(npv(r), want, rtol=TOL[dt], atol=TOL[dt] * 4, err_msg=f"{na} @ {nb}")


def test_matmul_transposed_input_is_not_copied():
    a = rand((1024, 1024), seed=5)
    b = rand((1024, 1024), seed=6)
    v = rand((1024,), seed=7)
    big = rand((2048, 2048), seed=8)
    mx.eval(a, b, v, big)
    out_bytes = 1024 * 1024 * 4

    def extra(fn):
        base = mx.get_active_memory()
        mx.reset_peak_memory()
        r = fn()
        mx.eval(r)
        return mx.get_peak_memory() - base - r.nbytes

    # transposed operands are read as CblasTrans, sliced ones through lda
    assert extra(lambda: a.T @ b) == 0
    assert extra(lambda: a @ b.T) == 0
    assert extra(lambda: a.T @ b.T) == 0
    assert extra(lambda: big[:1024, 1024:] @ big[1024:, :1024].T) == 0
    # vector operands go through gemv with their stride
    assert extra(lambda: big[3, ::2] @ a) == 0
    assert extra(lambda: a.T @ big[:1024, 5]) == 0
    # broadcast batch dims are not materialised
    assert extra(lambda: mx.broadcast_to(a[:256, :256], (16, 256, 256)) @ b[:256, :256]) == 0
    assert extra(lambda: mx.reshape(a, (16, 256, 256)) @ mx.swapaxes(mx.reshape(b, (16, 256, 256)), 1, 2)) == 0
    # a layout BLAS cannot read (unit stride in neither dim) is copied once
    assert extra(lambda: big[:1024, ::2] @ b) == out_bytes
    check(big[:1024, ::2] @ b, np.ascontiguousarray(npv(big)[:1024, ::2]) @ npv(b), "float32")


def test_matmul_1024_uses_blas():
    a, b = rand((1024, 1024), seed=9), rand((1024, 1024), seed=10)
    mx.eval(a, b)
    t = time.perf_counter()
    r = a @ b
    mx.eval(r)
    assert time.perf_counter() - t < 1.0
    check(r, npv(a) @ npv(b), "float32")


def test_matmul_batched_broadcast_paths():
    # many small products (spread over the pool), a batch folded into one
    # product, batched vector products
    for sa, sb in [((300, 8, 8), (300, 8, 8)), ((4, 300, 1, 16), (300, 16, 16)), ((300, 16, 16), (16, 1)),
                   ((300, 16), (300, 16, 1)), ((64, 32, 16), (16, 8)), ((16,), (300, 16, 8)),
                   ((2, 1, 8, 4), (1, 5, 4, 3))]:
        a, b = rand(sa, seed=11), rand(sb, seed=12)
        check(a @ b, ref_matmul(a, b), "float32")
        check(mx.swapaxes(a, -1, -2) @ b if len(sa) > 1 and sa[-1] == sa[-2] else a @ b, np.matmul(
            np.swapaxes(npv(a), -1, -2) if len(sa) > 1 and sa[-1] == sa[-2] else npv(a), npv(b)), "float32")


@pytest.mark.parametrize("sa,sb", [
    ((4, 100, 130), (4, 130, 90)),  # split into blocks over the pool
    ((20, 1, 600), (20, 600, 50)),  # batched vector @ matrix as one-row gemm calls
    ((20, 1, 100), (20, 100, 64)),  # batched gemv
    ((20, 100, 200), (20, 200, 1)),  # batched matrix @ vector as gemm calls
    ((3, 40, 2048), (3, 2048, 40)),  # K too large for blocks: OpenBLAS threads each
])
@pytest.mark.parametrize("dt", ["float32", "complex64", "float16"])
def test_matmul_batched_blocks(sa, sb, dt):
    a, b, c = rand(sa, dt, 1), rand(sb, dt, 2), rand(sa[:-1] + sb[-1:], dt, 3)
    check(a @ b, ref_matmul(a, b), dt)
    at = mx.swapaxes(mx.array(np.ascontiguousarray(np.swapaxes(np.array(a), -1, -2))), -1, -2)
    bt = mx.swapaxes(mx.array(np.ascontiguousarray(np.swapaxes(np.array(b), -1, -2))), -1, -2)
    check(at @ bt, ref_matmul(a, b), dt)
    check(mx.addmm(c, at, b, 0.5, 2.0), 0.5 * ref_matmul(a, b) + 2.0 * npv(c), dt)


# --------------------------------------------------------- half precision


@pytest.mark.parametrize("dt", LOW)
@pytest.mark.parametrize("k", [7, 100, 1000])
def test_half_precision_rounds_once(dt, k):
    """float16/bfloat16 products are computed in float32 and rounded once:
    compare with the float64 product of the same (rounded) inputs, rounded
    to the half type; only rare ties of accumulation order may differ by an
    ulp."""
    t = getattr(mx, dt)
    a, b = rand((16, k), dt, 1), rand((k, 12), dt, 2)
    r = npv(a @ b)
    want = npv(mx.array((npv(a) @ npv(b)).astype(np.float32)).astype(t))
    ulp = 2.0 ** -10 if dt == "float16" else 2.0 ** -7
    np.testing.assert_allclose(r, want, rtol=ulp, atol=ulp * 1e-2)
    assert np.mean(r == want) > 0.95


def test_half_precision_large_values_overflow_to_inf():
    a = mx.full((2, 4), 200.0, dtype=mx.float16)
    r = a @ mx.transpose(a)
    assert dname(r) == "float16" and np.all(np.isinf(npv(r)))


# ------------------------------------------------------------------ addmm


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", FLOATS)
def test_addmm_values(dt):
    c, a, b = rand((3, 5), dt, 1), rand((3, 4), dt, 2), rand((4, 5), dt, 3)
    r = mx.addmm(c, a, b, 0.5, 2.0)
    assert dname(r) == dt
    check(r, 0.5 * ref_matmul(a, b) + 2.0 * npv(c), dt)
    check(mx.addmm(c, a, b), ref_matmul(a, b) + npv(c), dt)
    check(mx.addmm(c, a, b, beta=-1.5, alpha=3), 3 * ref_matmul(a, b) - 1.5 * npv(c), dt)


# (c, a, b) shapes -> result shape or error, as MLX 0.32
ADDMM_SHAPES = [
    ((2, 2), (2, 3), (3, 2), (2, 2)),
    ((2,), (2, 3), (3, 2), (2, 2)),
    ((), (2, 3), (3, 2), (2, 2)),
    ((2,), (3,), (3, 2), (2,)),
    ((2,), (2, 3), (3,), (2,)),
    ((), (3,), (3,), ()),
    ((1,), (3,), (3,), "[addmm] input c must broadcast to the output shape"),
    ((1, 1), (3,), (3,), "[addmm] input c must broadcast to the output shape"),
    ((3, 1, 2), (2, 3), (3, 2), "[addmm] input c must broadcast to the output shape"),
    ((3, 2), (2, 3), (3, 2), "[broadcast_shapes] Shapes (3,2) and (2,2) cannot be broadcast."),
    ((2, 2), (2, 4), (3, 2), "[addmm] Last dimension of first input with shape (2,4) must match second to "
     "last dimension of second input with shape (3,2)."),
    ((2, 2), (), (3, 2), "[addmm] Got 0 dimension input. Inputs must have at least one dimension."),
    ((2, 2), (0, 3), (3, 2), "[broadcast_shapes] Shapes (2,2) and (0,2) cannot be broadcast."),
    ((0, 2), (0, 3), (3, 2), (0, 2)),
    ((2, 0), (2, 3), (3, 0), (2, 0)),
    ((5, 1, 2, 2), (2, 2, 3), (5, 1, 3, 2), (5, 2, 2, 2)),
    ((3,), (4, 2, 3), (3, 2), "[broadcast_shapes] Shapes (3) and (8,2) cannot be broadcast."),
    ((2,), (4, 2, 3), (3, 2), (4, 2, 2)),
    ((1,), (4, 2, 3), (3, 2), (4, 2, 2)),
    ((), (4, 2, 3), (3, 2), (4, 2, 2)),
    ((4, 1, 1), (4, 2, 3), (3, 2), (4, 2, 2)),
    ((3,), (4, 2, 3), (3,), "Cannot broadcast array of shape (3) into shape (8,1)."),
    ((2,), (4, 2, 3), (3,), "Cannot broadcast array of shape (2) into shape (8,1)."),
    ((2, 1), (4, 2, 3), (3,), "[broadcast_shapes] Shapes (2,1) and (4,2) cannot be broadcast."),
    ((4, 2), (4, 2, 3), (3,), (4, 2)),
    ((4, 1), (4, 2, 3), (3,), (4, 2)),
    ((5, 4, 2), (4, 2, 3), (3,), "[addmm] input c must broadcast to the output shape"),
    ((2,), (3,), (4, 3, 2), (4, 2)),
    ((4, 2), (3,), (4, 3, 2), (4, 2)),
    ((4, 1, 2), (3,), (4, 3, 2), "[addmm] input c must broadcast to the output shape"),
    ((3, 2, 2), (3, 2, 4), (4, 2), (3, 2, 2)),
    ((6, 2), (3, 2, 4), (4, 2), "[broadcast_shapes] Shapes (6,2) and (3,2,2) cannot be broadcast."),
]


@pytest.mark.parametrize("sc,sa,sb,want", ADDMM_SHAPES)
def test_addmm_shapes(sc, sa, sb, want):
    c, a, b = rand(sc, seed=1), rand(sa, seed=2), rand(sb, seed=3)
    if isinstance(want, str):
        with pytest.raises(ValueError) as e:
            mx.addmm(c, a, b, 0.5, 2.0)
        assert str(e.value) == want
        return
    r = mx.addmm(c, a, b, 0.5, 2.0)
    assert r.shape == want
    check(r, 0.5 * ref_matmul(a, b) + 2.0 * npv(c), "float32")


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_addmm_dtypes():
    f = lambda s, dt: rand(s, dt, 4)
    assert dname(mx.addmm(f((2, 2), "float32"), f((2, 3), "int32"), f((3, 2), "int32"))) == "float32"
    assert dname(mx.addmm(f((2, 2), "int32"), f((2, 3), "float32"), f((3, 2), "float32"))) == "float32"
    assert dname(mx.addmm(f((2, 2), "float16"), f((2, 3), "float32"), f((3, 2), "float32"))) == "float32"
    assert dname(mx.addmm(f((2, 2), "float64"), f((2, 3), "float32"), f((3, 2), "float32"))) == "float64"
    assert dname(mx.addmm(f((2, 2), "bool_"), f((2, 3), "float16"), f((3, 2), "bool_"))) == "float16"
    c, a, b = f((2, 2), "complex64"), f((2, 3), "float32"), f((3, 2), "float32")
    r = mx.addmm(c, a, b, 2.0, 0.5)
    assert dname(r) == "complex64"
    check(r, 2 * ref_matmul(a, b) + 0.5 * npv(c), "complex64")
    r = mx.addmm(a[:, :2], f((2, 3), "complex64"), b, 2.0, 0.5)
    assert dname(r) == "complex64"
    with pytest.raises(ValueError) as e:
        mx.addmm(f((2, 2), "int32"), f((2, 3), "int32"), f((3, 2), "int32"))
    assert str(e.value) == ("[addmm] Only real floating point types are supported but int32, int32 and int32 "
                            "were provided which results in int32, which is not a real floating point type.")
    # complex goes through matmul, whose messages it then gives
    with pytest.raises(ValueError, match=r"^\[matmul\] Only inexact types"):
        mx.addmm(f((2, 2), "complex64"), f((2, 3), "int32"), f((3, 2), "int32"))
    with pytest.raises(ValueError, match=r"^\[matmul\] Last dimension of first input with shape \(2,4\)"):
        mx.addmm(f((2, 2), "complex64"), f((2, 4), "float32"), f((3, 2), "float32"))


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_addmm_scalars_are_float32():
    # alpha and beta are C floats in MLX: 0.1 is rounded to float32 first
    r = mx.addmm(mx.ones((2, 2), dtype=mx.float64), mx.ones((2, 3), dtype=mx.float64),
                 mx.ones((3, 2), dtype=mx.float64), 0.1, 0.5)
    assert r.tolist()[0][0] == float(np.float32(0.1)) * 3 + 0.5
    r = mx.addmm(mx.ones((2, 2)), mx.ones((2, 3)), mx.ones((3, 2)), 1e300, 0.5)
    assert np.all(np.isinf(npv(r)))
    r = mx.addmm(mx.ones((2, 2)), mx.ones((2, 3)), mx.ones((3, 2)), alpha=mx.array(2.0), beta=True)
    assert r.tolist() == [[7.0, 7.0], [7.0, 7.0]]


def test_addmm_beta_zero_and_empty_k():
    nan = mx.full((2, 2), float("nan"))
    assert mx.addmm(nan, mx.ones((2, 3)), mx.ones((3, 2)), 2.0, 0.0).tolist() == [[6.0, 6.0], [6.0, 6.0]]
    r = mx.addmm(mx.full((2, 2), 1.5), mx.ones((2, 0)), mx.ones((0, 2)), 2.0, 3.0)
    assert r.tolist() == [[4.5, 4.5], [4.5, 4.5]]
    r = mx.addmm(mx.full((2, 2), 1.5, dtype=mx.float16), mx.ones((2, 0), dtype=mx.float16),
                 mx.ones((0, 2), dtype=mx.float16), 2.0, 0.0)
    assert r.tolist() == [[0.0, 0.0], [0.0, 0.0]]


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", ["float32", "float16", "float64"])
def test_addmm_layouts(dt):
    t = getattr(mx, dt)
    for (na, xa, _), (nb, xb, _), (nc, xc, _) in itertools.product(
            layouts((3, 4), 1), layouts((4, 5), 2), layouts((3, 5), 3)):
        a, b, c = xa.astype(t), xb.astype(t), xc.astype(t)
        want = 0.5 * np.matmul(npv(a), npv(b)) + 2.0 * npv(c)
        np.testing.assert_allclose(npv(mx.addmm(c, a, b, 0.5, 2.0)), want, rtol=TOL[dt], atol=TOL[dt] * 10,
                                   err_msg=f"{nc} + {na} @ {nb}")


@pytest.mark.parametrize("args,kwargs", [
    ((1.0, "A", "B"), {}),
    (("C", "A", 1.0), {}),
    (("C", "A", np.ones((3, 2), np.float32)), {}),
    (("C", "A", "B"), {"alpha": 1j}),
    (("C", "A", "B"), {"alpha": None}),
    (("C", "A", "B"), {"beta": "x"}),
    (("C", "A", "B", 1, 1, 1), {}),
    (("C", "A"), {}),
])
def test_addmm_bad_arguments(args, kwargs):
    arrs = {"C": mx.ones((2, 2)), "A": mx.ones((2, 3)), "B": mx.ones((3, 2))}
    args = [arrs.get(x, x) if isinstance(x, str) and x in arrs else x for x in args]
    with pytest.raises(TypeError, match=r"^addmm\(\): incompatible function arguments"):
        mx.addmm(*args, **kwargs)


def test_addmm_signature():
    assert str(inspect.signature(mx.addmm)) == "(c, a, b, /, alpha=1.0, beta=1.0, *, stream=None)"


# ------------------------------------------------------------ inner, outer


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("sa,sb", [((3,), (3,)), ((2, 3), (4, 3)), ((2, 3), (3,)), ((2, 3, 4), (5, 4)),
                                   ((2, 3, 4), (5, 1, 4)), ((0,), (0,)), ((2, 0), (3, 0))])
@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_inner(sa, sb, dt):
    a, b = rand(sa, dt, 1), rand(sb, dt, 2)
    r = mx.inner(a, b)
    assert dname(r) == dt
    check(r, np.inner(npv(a), npv(b)), dt)


def test_inner_scalars_multiply():
    r = mx.inner(mx.array(2.0), mx.array([1.0, 2.0, 3.0]))
    assert r.tolist() == [2.0, 4.0, 6.0]
    r = mx.inner(mx.array([1, 2, 3]), mx.array(2))
    assert dname(r) == "int32" and r.tolist() == [2, 4, 6]
    assert mx.inner(mx.array(2.0), mx.array(3.0)).item() == 6.0


def test_inner_errors():
    with pytest.raises(ValueError) as e:
        mx.inner(mx.ones(3), mx.ones(4))
    assert str(e.value) == "[inner] a and b must have the same last dimension."
    with pytest.raises(ValueError, match=r"^\[matmul\] Only inexact types are supported but int32 and int32"):
        mx.inner(mx.ones(3, dtype=mx.int32), mx.ones(3, dtype=mx.int32))
    with pytest.raises(TypeError, match=r"^inner\(\): incompatible function arguments"):
        mx.inner(2.0, mx.ones(3))
    with pytest.raises(TypeError, match=r"^inner\(\): incompatible function arguments"):
        mx.inner(mx.ones(3), np.ones(3))
    assert dname(mx.inner(mx.ones(3, dtype=mx.float16), mx.ones(3))) == "float32"


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", FLOATS + ["int32", "uint8", "bool_"])
def test_outer(dt):
    a, b = rand((3,), dt, 1), rand((4,), dt, 2)
    r = mx.outer(a, b)
    assert dname(r) == dt and r.shape == (3, 4)
    want = np.outer(npv(a), npv(b))
    if dt in FLOATS:
        check(r, want, dt)
    else:
        assert np.array_equal(npv(r), want if dt != "bool_" else want != 0)


def test_outer_shapes_and_dtypes():
    a, b = rand((3, 2), seed=1), rand((2, 2), seed=2)
    check(mx.outer(a, b), np.outer(npv(a), npv(b)), "float32")
    check(mx.outer(a.T, b[:, 1]), np.outer(npv(a).T, npv(b)[:, 1]), "float32")
    assert mx.outer(mx.array(2.0), mx.ones(2)).shape == (1, 2)
    assert mx.outer(mx.ones(0), mx.ones(2)).shape == (0, 2)
    assert dname(mx.outer(rand((3,), "int32"), rand((2,), "float16"))) == "float16"
    assert dname(mx.outer(rand((3,), "uint8"), rand((2,), "int8"))) == "int16"
    with pytest.raises(TypeError, match=r"^outer\(\): incompatible function arguments"):
        mx.outer(mx.ones(2, dtype=mx.uint8), 2)


# -------------------------------------------------------------- tensordot


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("sa,sb,axes", [
    ((3, 4, 5), (4, 5, 6), 2),
    ((3, 4, 5), (5, 6), 1),
    ((3, 4), (4, 3), 0),
    ((2, 3), (2, 3), 2),
    ((3,), (3,), 1),
    ((), (), 0),
    ((0, 3), (3, 2), 1),
    ((3, 4, 5), (4, 3, 6), [[0, 1], [1, 0]]),
    ((3, 4, 5), (4, 3, 6), ([0, 1], [1, 0])),
    ((3, 4, 5), (4, 3, 6), [[0], [1]]),
    ((3, 4, 5), (4, 3, 6), [[-3], [-2]]),
    ((2, 3, 4), (4, 3, 2), [[2, 1], [0, 1]]),
    ((2, 3, 4), (4, 3, 2), [[-1, 1], [0, -2]]),
    ((3, 4), (4, 3), [(1,), (0,)]),
    ((3, 4), (4, 3), [[], []]),
])
@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_tensordot(sa, sb, axes, dt):
    a, b = rand(sa, dt, 1), rand(sb, dt, 2)
    r = mx.tensordot(a, b, axes) if axes != 2 else mx.tensordot(a, b)
    want = np.tensordot(npv(a), npv(b), axes=axes if isinstance(axes, int) else tuple(list(x) for x in axes))
    assert dname(r) == dt
    check(r, want, dt)


def test_tensordot_axes_forms():
    a, b = rand((3, 4), seed=1), rand((4, 3), seed=2)
    want = npv(a) @ npv(b)
    check(mx.tensordot(a, b, axes=True), want, "float32")
    check(mx.tensordot(a, b, axes=np.int64(1)), want, "float32")
    check(mx.tensordot(a, b, axes=[[np.int64(1)], [0]]), want, "float32")
    check(mx.tensordot(a, b, 1, stream=mx.cpu), want, "float32")
    assert str(inspect.signature(mx.tensordot)) == "(a, b, /, axes=2, *, stream=None)"


@pytest.mark.parametrize("sa,sb,axes,cls,msg", [
    ((3, 4, 5), (4, 5, 6), 1, ValueError, "[tensordot] a and b must have the same shape on the contracted axes."),
    ((3, 4), (4, 3), 3, ValueError, "[tensordot] axis must be less than the number of dimensions of a and b."),
    ((3, 4), (4, 3), -1, ValueError, "[tensordot] axis must be greater or equal to 0."),
    ((3, 4), (4, 3), [[0, 1], [1]], ValueError, "[tensordot] axes must have the same size."),
    ((3, 4), (4, 3), [[0], [1], [0]], ValueError, "[tensordot] axes must be a list of two lists."),
    ((3, 4), (4, 3), [[0]], ValueError, "[tensordot] axes must be a list of two lists."),
    ((3, 4), (4, 3), [], ValueError, "[tensordot] axes must be a list of two lists."),
    ((3, 4), (4, 3), [[0], [0]], ValueError, "[tensordot] a and b must have the same shape on the contracted axes."),
    ((3, 4), (4, 3), [[0, 0], [1, 1]], ValueError, "[transpose] Received 3 axes for array with 2 dimensions."),
    ((3, 4), (4, 3), [[5], [0]], IndexError, "SmallVector out of range."),
    ((3, 4), (4, 3), [[0], [5]], IndexError, "SmallVector out of range."),
    ((3, 4), (4, 3), [[-3], [0]], IndexError, "SmallVector out of range."),
])
def test_tensordot_errors(sa, sb, axes, cls, msg):
    with pytest.raises(cls) as e:
        mx.tensordot(mx.ones(sa), mx.ones(sb), axes)
    assert str(e.value) == msg


@pytest.mark.parametrize("axes", [1.5, [0, 1], (1, 0), None, "ab", ["a", "b"], [[1.0], [0]]])
def test_tensordot_bad_axes(axes):
    with pytest.raises(TypeError, match=r"^tensordot\(\): incompatible function arguments"):
        mx.tensordot(mx.ones((3, 4)), mx.ones((4, 3)), axes=axes)


def test_tensordot_dtype_errors():
    i = mx.ones((3, 4), dtype=mx.int32)
    for axes in (0, 1):
        with pytest.raises(ValueError, match=r"^\[matmul\] Only inexact types are supported but int32 and int32"):
            mx.tensordot(i, mx.ones((4, 3), dtype=mx.int32), axes)
    assert dname(mx.tensordot(i, mx.ones((4, 3), dtype=mx.float16), 1)) == "float16"
    with pytest.raises(TypeError, match=r"^tensordot\(\): incompatible function arguments"):
        mx.tensordot(2.0, mx.ones(2), 0)
