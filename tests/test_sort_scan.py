"""Sorting (sort, argsort, partition, argpartition, topk) and scans (cumsum,
cumprod, cummax, cummin, logcumsumexp) against NumPy, with orders, dtypes,
edge cases and error messages checked against values obtained from MLX 0.32."""
import numpy as np
import pytest

import mkpy as mx

NAN, INF = float("nan"), float("inf")

# name -> numpy dtype used to build inputs (bfloat16 goes through float32)
DTYPES = {
    "bool_": np.bool_, "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64, "bfloat16": np.float32,
    "complex64": np.complex64,
}
INTS = ["uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64"]
FLOATS = ["float16", "float32", "float64", "bfloat16"]
REAL = ["bool_"] + INTS + FLOATS
ALL = REAL + ["complex64"]


def dname(a):
    n = str(a.dtype).split(".")[-1]
    return "bool_" if n == "bool" else n


def npv(a):
    """The values of an mkpy array as a NumPy array (bfloat16 as float32)."""
    if dname(a) == "bfloat16":
        a = a.astype(mx.float32)
    return np.array(a)


def make(values, dt):
    """(mkpy array of dtype dt, NumPy array of the values it holds)."""
    x = mx.array(np.asarray(values).astype(DTYPES[dt]))
    if dt in ("bfloat16", "float64"):
        x = x.astype(getattr(mx, dt))
    assert dname(x) == dt
    return x, npv(x)


def data(shape, dt, seed=0, ties=True, specials=False):
    rng = np.random.default_rng(seed)
    if dt == "bool_":
        return rng.random(shape) > 0.5
    if dt in INTS:
        lo = 0 if dt.startswith("u") else -50
        return rng.integers(lo, 6 if ties else 100, size=shape)
    v = rng.integers(-6, 6, size=shape) / 2 if ties else rng.standard_normal(shape) * 3
    if dt == "complex64":
        v = v + 1j * (rng.integers(-2, 2, size=shape) if ties else rng.standard_normal(shape))
    elif specials and v.size >= 8:
        flat = v.reshape(-1)
        idx = rng.choice(flat.size, 6, replace=False)
        flat[idx] = [NAN, INF, -INF, -0.0, 0.0, NAN]
    return v


def same(got, ref):
    """Equal values (nan matches nan), same shape."""
    got = np.asarray(got)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if ref.dtype.kind in "fc":
        np.testing.assert_array_equal(got, ref)  # assert_array_equal treats nan == nan
    else:
        assert np.array_equal(got, ref), (got, ref)


def views(x):
    """The array, and non-contiguous views of it (transposed, stepped)."""
    out = [("c", x)]
    if x.ndim >= 2:
        out.append(("t", x.T))
    if x.ndim >= 1 and x.shape[-1] >= 4:
        out.append(("s", x[..., ::2]))
    return out


def np_view(ref, name):
    return {"c": ref, "t": ref.T, "s": ref[..., ::2] if ref.ndim else ref}[name]


def axes_of(v):
    return list(range(-v.ndim, v.ndim)) + [None]


# ================================================================ sort / argsort


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", REAL)
@pytest.mark.parametrize("shape", [(9,), (4, 7), (3, 4, 5)])
def test_sort_argsort_vs_numpy(dt, shape):
    x, ref = make(data(shape, dt, specials=True), dt)
    for vn, v in views(x):
        r = np_view(ref, vn)
        for ax in axes_of(v):
            s, a = mx.sort(v, axis=ax), mx.argsort(v, axis=ax)
            assert dname(s) == dt and dname(a) == "uint32"
            rr = r.reshape(-1) if ax is None else r
            nax = -1 if ax is None else ax
            same(npv(s), np.sort(rr, axis=nax, kind="stable"))
            same(npv(a), np.argsort(rr, axis=nax, kind="stable").astype(np.uint32))


def test_sort_default_axis_and_positional():
    x, ref = make([[3, 1, 2], [9, 7, 8]], "int32")
    same(npv(mx.sort(x)), np.sort(ref, axis=-1))
    same(npv(mx.sort(x, 0)), np.sort(ref, axis=0))
    same(npv(mx.argsort(x, -2)), np.argsort(ref, axis=0).astype(np.uint32))
    same(npv(mx.sort(x, axis=None)), np.sort(ref.reshape(-1)))


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_sort_nan_inf_zero_placement():
    x = mx.array(np.array([NAN, 1, NAN, 0, INF, -INF, -0.0, 0.0], np.float32))
    got = npv(mx.sort(x))
    assert got[:6].tolist() == [-INF, 0, 0, 0, 1, INF] and np.isnan(got[6:]).all()
    # stable: -0.0 (index 6) stays between the 0.0 at index 3 and the one at index 7
    assert np.signbit(got[1:4]).tolist() == [False, True, False]
    assert npv(mx.argsort(x)).tolist() == [5, 3, 6, 7, 1, 4, 0, 2]
    for dt in ("float16", "bfloat16", "float64"):
        y, _ = make([1, NAN, 0, 2], dt)
        assert npv(mx.argsort(y)).tolist() == [2, 0, 3, 1]
        assert np.isnan(npv(mx.sort(y))[-1])


def test_argsort_ties_are_stable():
    x = mx.array(np.array([1, 1, 0, 1, 0], np.int32))
    assert npv(mx.argsort(x)).tolist() == [2, 4, 0, 1, 3]
    b = mx.array(np.array([True, False, True]))
    assert npv(mx.argsort(b)).tolist() == [1, 0, 2]
    assert npv(mx.sort(b)).tolist() == [False, True, True]
    z = mx.array(np.array([0.0, -0.0, 0.0, -0.0], np.float32))
    assert npv(mx.argsort(z)).tolist() == [0, 1, 2, 3]


def test_sort_complex():
    # lexicographic (real, then imaginary); nan in either part sorts last, in input order
    x = mx.array(np.array([complex(NAN, 0), 2 + 1j, complex(0, NAN), 1 + 5j, 2 + 0j], np.complex64))
    got = npv(mx.sort(x))
    assert got[:3].tolist() == [1 + 5j, 2 + 0j, 2 + 1j]
    assert np.isnan(got[3].real) and np.isnan(got[4].imag)
    assert npv(mx.argsort(x)).tolist() == [3, 4, 1, 0, 2]
    x, ref = make(data((5, 6), "complex64"), "complex64")
    for ax in (0, 1, None):
        rr = ref.reshape(-1) if ax is None else ref
        same(npv(mx.sort(x, axis=ax)), np.sort(rr, axis=-1 if ax is None else ax, kind="stable"))
        same(npv(mx.argsort(x, axis=ax)), np.argsort(rr, axis=-1 if ax is None else ax, kind="stable").astype(np.uint32))


def test_sort_0d_and_empty():
    s = mx.array(3.0)
    assert npv(mx.sort(s, axis=None)).tolist() == [3.0]
    assert npv(mx.argsort(s, axis=None)).tolist() == [0]
    for shape, ax in [((0,), -1), ((0, 3), -1), ((0, 3), 0), ((3, 0), 1), ((2, 0), None)]:
        e = mx.zeros(shape)
        r = mx.sort(e, axis=ax)
        assert r.shape == (shape if ax is not None else (0,)) and dname(r) == "float32"
        a = mx.argsort(e, axis=ax)
        assert a.shape == r.shape and dname(a) == "uint32"


@pytest.mark.parametrize("dt", ["float32", "int32", "float16", "uint8", "int64"])
def test_sort_long_rows(dt):
    # one long row takes the parallel merge path; many rows split over the pool
    x, ref = make(data((150000,), dt, seed=3, ties=dt != "float32", specials=True), dt)
    same(npv(mx.sort(x)), np.sort(ref, kind="stable"))
    same(npv(mx.argsort(x)), np.argsort(ref, kind="stable").astype(np.uint32))
    y, refy = make(data((300, 500), dt, seed=4), dt)
    same(npv(mx.argsort(y, axis=0)), np.argsort(refy, axis=0, kind="stable").astype(np.uint32))
    same(npv(mx.sort(y.T)), np.sort(refy.T, axis=-1, kind="stable"))


def test_sort_broadcast_input():
    x = mx.broadcast_to(mx.array(np.array([3, 1, 2], np.int32)), (4, 3))
    same(npv(mx.sort(x, axis=0)), np.broadcast_to(np.array([3, 1, 2]), (4, 3)).astype(np.int32))
    same(npv(mx.argsort(x)), np.tile(np.array([1, 2, 0], np.uint32), (4, 1)))


# ================================================================ partition / topk


def check_partition(vals, kth, axis):
    """vals is partitioned at kth along axis (nan sorts last)."""
    v = np.moveaxis(vals, axis, -1)
    srt = np.sort(v, axis=-1)
    np.testing.assert_array_equal(v[..., kth], srt[..., kth])
    key = np.where(np.isnan(v), np.inf, v) if v.dtype.kind == "f" else v
    k = key[..., kth:kth + 1]
    assert (key[..., :kth] <= k).all() and (key[..., kth + 1:] >= k).all()


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", REAL)
def test_partition_property(dt):
    x, ref = make(data((6, 11), dt, specials=True), dt)
    for vn, v in views(x):
        r = np_view(ref, vn)
        for ax in axes_of(v):
            rr, nax = (r.reshape(-1), 0) if ax is None else (r, ax % v.ndim)
            n = rr.shape[nax]
            for kth in sorted({0, 1, n // 2, n - 1, -1, -n}):
                k = kth % n
                p = mx.partition(v, kth, axis=ax)
                assert dname(p) == dt
                check_partition(npv(p), k, nax)
                ip = mx.argpartition(v, kth, axis=ax)
                assert dname(ip) == "uint32"
                idx = npv(ip).astype(np.int64)
                assert (np.sort(idx, axis=nax) == np.arange(n).reshape([-1 if d == nax else 1 for d in range(rr.ndim)])).all()
                check_partition(np.take_along_axis(rr, idx, axis=nax), k, nax)


def test_partition_order_is_mlx():
    # the elements besides kth are where libstdc++'s nth_element leaves them, as in MLX
    x = mx.array(np.array([9, 3, 7, 1, 8, 2, 6, 0, 5, 4, 3, 7], np.int32))
    expect = {
        0: ([0, 1, 2, 3, 4, 3, 5, 6, 9, 8, 7, 7], [7, 3, 5, 1, 9, 10, 8, 6, 0, 4, 2, 11]),
        3: ([1, 0, 2, 3, 4, 3, 5, 6, 9, 8, 7, 7], [3, 7, 5, 1, 9, 10, 8, 6, 0, 4, 2, 11]),
        6: ([3, 0, 2, 1, 3, 4, 5, 6, 9, 8, 7, 7], [1, 7, 5, 3, 10, 9, 8, 6, 0, 4, 2, 11]),
        -1: ([6, 3, 3, 1, 4, 2, 5, 0, 7, 7, 8, 9], [6, 1, 10, 3, 9, 5, 8, 7, 11, 2, 4, 0]),
        -4: ([6, 3, 3, 1, 4, 2, 5, 0, 7, 7, 9, 8], [6, 1, 10, 3, 9, 5, 8, 7, 2, 11, 4, 0]),
    }
    for kth, (vals, idx) in expect.items():
        assert npv(mx.partition(x, kth)).tolist() == vals
        assert npv(mx.argpartition(x, kth)).tolist() == idx
    y = mx.array((np.arange(40)[::-1] % 7).astype(np.float32))
    assert npv(mx.argpartition(y, 13)).tolist() == [
        39, 18, 25, 11, 4, 32, 38, 24, 31, 17, 10, 3, 2, 9, 16, 23, 30, 37, 1, 19,
        20, 21, 22, 15, 14, 13, 26, 27, 28, 29, 12, 8, 7, 33, 34, 35, 36, 6, 5, 0]
    assert npv(mx.partition(mx.array(np.array([5, 1, 4, 2, 3], np.int32)), 2)).tolist() == [1, 2, 3, 4, 5]
    assert npv(mx.argpartition(mx.array(np.array([5, 1, 4, 2, 3], np.int32)), 2)).tolist() == [1, 3, 4, 2, 0]


def test_partition_long_and_adversarial():
    # sorted, reversed and constant rows; a long row (deep introselect)
    for a in [np.arange(3000, dtype=np.float32), np.arange(3000, 0, -1).astype(np.int32),
              np.zeros(2000, np.float32), (np.arange(5000) % 3).astype(np.int64),
              np.random.default_rng(5).standard_normal(100000).astype(np.float32)]:
        x = mx.array(a)
        for kth in (0, 17, a.size // 2, a.size - 1):
            check_partition(npv(mx.partition(x, kth)), kth, 0)
            idx = npv(mx.argpartition(x, kth)).astype(np.int64)
            assert np.array_equal(np.sort(idx), np.arange(a.size))
            check_partition(a[idx], kth, 0)


def test_topk():
    x = mx.array(np.array([5, 1, 4, 2, 3], np.int32))
    assert npv(mx.topk(x, 2)).tolist() == [4, 5]
    assert npv(mx.topk(x, 5)).tolist() == [5, 1, 4, 2, 3]  # k == size: the input as is
    assert npv(mx.topk(x, 0)).tolist() == []
    assert npv(mx.topk(mx.array(np.array([5, 1, 4, 2, 3, 9, 7, 8], np.int32)), 3)).tolist() == [7, 8, 9]
    y = mx.array(np.array([9, 3, 7, 1, 8, 2, 6, 0, 5, 4, 3, 7], np.int32))
    assert npv(mx.topk(y, 4)).tolist() == [7, 7, 9, 8]
    assert npv(mx.topk(y.reshape(3, 4), 2, axis=0)).tolist() == [[8, 3, 6, 1], [9, 4, 7, 7]]
    b = mx.array(np.array([[5, 1, 4], [2, 3, 0]], np.int32))
    assert npv(mx.topk(b, 2, axis=None)).tolist() == [4, 5]
    assert npv(mx.topk(b, 1, axis=0)).tolist() == [[5, 3, 4]]
    assert npv(mx.topk(b, True)).tolist() == [[5], [3]]
    assert npv(mx.topk(b, k=1, axis=np.int64(0))).tolist() == [[5, 3, 4]]
    assert npv(mx.topk(mx.array(3), 1, axis=None)).tolist() == [3]
    f = npv(mx.topk(mx.array(np.array([1.0, NAN, 3, 2], np.float32)), 2))
    assert f[0] == 3 and np.isnan(f[1])
    assert mx.topk(mx.zeros((2, 0)), 0).shape == (2, 0)
    assert mx.topk(mx.zeros((2, 0)), 1, axis=0).shape == (1, 0)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", REAL)
def test_topk_vs_numpy(dt):
    x, ref = make(data((5, 9), dt, seed=2), dt)
    for vn, v in views(x):
        r = np_view(ref, vn)
        for ax in axes_of(v):
            rr, nax = (r.reshape(-1), 0) if ax is None else (r, ax % v.ndim)
            for k in (1, 3, rr.shape[nax]):
                t = mx.topk(v, k, axis=ax)
                assert dname(t) == dt
                exp = np.sort(rr, axis=nax)
                exp = np.take(exp, np.arange(rr.shape[nax] - k, rr.shape[nax]), axis=nax)
                same(np.sort(npv(t), axis=nax), exp)


# ================================================================ scans

SCANS = ["cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"]


def scan_dtype(op, dt):
    if op == "cumsum" and dt == "bool_":
        return "int32"
    if op == "logcumsumexp" and dt not in FLOATS + ["complex64"]:
        return "float32"
    return dt


def np_scan(op, r, axis, reverse, inclusive, out_dt):
    """NumPy reference, computed in the result dtype (bfloat16: float64)."""
    odt = {"bfloat16": np.float64, "float16": np.float16}.get(out_dt, np.dtype(DTYPES[out_dt]))
    if op == "logcumsumexp":
        odt = np.float64
    a = r.astype(odt)
    if reverse:
        a = np.flip(a, axis)
    uf = {"cumsum": np.add, "cumprod": np.multiply, "cummax": np.maximum, "cummin": np.minimum,
          "logcumsumexp": np.logaddexp}[op]
    res = uf.accumulate(a, axis=axis, dtype=odt)
    if not inclusive:
        if odt == np.bool_:
            init = {"cumprod": True, "cummax": False, "cummin": True}[op]
        elif np.dtype(odt).kind in "iu":
            info = np.iinfo(odt)
            init = {"cumsum": 0, "cumprod": 1, "cummax": info.min, "cummin": info.max}[op]
        else:
            init = {"cumsum": 0, "cumprod": 1, "cummax": -np.inf, "cummin": np.inf, "logcumsumexp": -np.inf}[op]
        shape = list(res.shape)
        shape[axis] = 1
        first = np.full(shape, init, dtype=odt)
        res = np.concatenate([first, np.delete(res, -1, axis=axis)], axis=axis)
    if reverse:
        res = np.flip(res, axis)
    return res


def close(got, ref, dt, op):
    assert got.shape == ref.shape
    if dt in ("float16", "bfloat16") or op == "logcumsumexp" or (dt == "float32" and op == "cumprod"):
        rt = {"float16": 2e-2, "bfloat16": 6e-2}.get(dt, 2e-5)
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rt, atol=rt)
    elif ref.dtype.kind in "fc":
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    else:
        assert np.array_equal(got, ref.astype(got.dtype)), (got, ref)


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
@pytest.mark.parametrize("dt", REAL)
@pytest.mark.parametrize("op", SCANS)
def test_scan_vs_numpy(op, dt):
    vals = data((3, 4, 5), dt, seed=1)
    if op == "cumprod" and dt in FLOATS:
        vals = np.random.default_rng(1).uniform(0.5, 1.5, (3, 4, 5))
    x, ref = make(vals, dt)
    odt = scan_dtype(op, dt)
    f = getattr(mx, op)
    for vn, v in views(x):
        r = np_view(ref, vn)
        for ax in axes_of(v):
            rr, nax = (r.reshape(-1), 0) if ax is None else (r, ax % v.ndim)
            for rev in (False, True):
                for inc in (False, True):
                    got = f(v, axis=ax, reverse=rev, inclusive=inc)
                    assert dname(got) == odt, (op, dt, dname(got))
                    close(npv(got), np_scan(op, rr, nax, rev, inc, odt), odt, op)


def test_scan_default_is_flattened():
    x, ref = make([[5, 1, 4], [2, 3, 0]], "int32")
    assert npv(mx.cumsum(x)).tolist() == [5, 6, 10, 12, 15, 15]
    assert npv(mx.cumsum(x, 0)).tolist() == [[5, 1, 4], [7, 4, 4]]
    assert npv(mx.cumsum(x, axis=None, reverse=True)).tolist() == [15, 10, 9, 5, 3, 0]
    assert npv(mx.cumsum(mx.array(3))).tolist() == [3]
    assert npv(mx.cumsum(x, axis=True)).tolist() == [[5, 6, 10], [2, 5, 5]]  # bool axis is an int
    # array methods forward to the module functions
    assert npv(x.cumsum(axis=1)).tolist() == [[5, 6, 10], [2, 5, 5]]
    assert npv(x.cumprod()).tolist() == [5, 5, 20, 40, 120, 0]
    assert npv(x.cummax(axis=0, reverse=True)).tolist() == [[5, 3, 4], [2, 3, 0]]
    assert npv(x.cummin(inclusive=False)).tolist() == [2147483647, 5, 1, 1, 1, 1]
    assert dname(x.logcumsumexp()) == "float32"


def test_scan_small_values():
    x = mx.array(np.array([1, 2, 3, 4], np.int32))
    assert npv(mx.cumsum(x, inclusive=False)).tolist() == [0, 1, 3, 6]
    assert npv(mx.cumsum(x, reverse=True)).tolist() == [10, 9, 7, 4]
    assert npv(mx.cumsum(x, reverse=True, inclusive=False)).tolist() == [9, 7, 4, 0]
    assert npv(mx.cumprod(x, inclusive=False)).tolist() == [1, 1, 2, 6]
    assert npv(mx.cummax(x, inclusive=False)).tolist() == [-2147483648, 1, 2, 3]
    assert npv(mx.cummin(x, inclusive=False)).tolist() == [2147483647, 1, 1, 1]
    u = mx.array(np.array([1, 3, 2], np.uint64))
    assert npv(mx.cummax(u, inclusive=False)).tolist() == [0, 1, 3]
    assert npv(mx.cummin(u, inclusive=False)).tolist() == [18446744073709551615, 1, 1]
    # integers wrap in their own dtype
    assert npv(mx.cumsum(mx.array(np.array([100, 100, 100], np.int8)))).tolist() == [100, -56, 44]
    assert npv(mx.cumsum(mx.array(np.array([200, 100], np.uint8)))).tolist() == [200, 44]
    big = mx.array(np.array([2**62, 2**62, 2**62], np.int64))
    assert npv(mx.cumsum(big)).tolist() == [2**62, 2**63 - 2**63 * 2, -(2**62)]


def test_scan_bool():
    b = mx.array(np.array([True, False, True]))
    assert dname(mx.cumsum(b)) == "int32" and npv(mx.cumsum(b)).tolist() == [1, 1, 2]
    assert npv(mx.cumsum(b, reverse=True, inclusive=False)).tolist() == [1, 1, 0]
    assert dname(mx.cumprod(b)) == "bool_" and npv(mx.cumprod(b)).tolist() == [True, False, False]
    assert npv(mx.cumprod(b, reverse=True, inclusive=False)).tolist() == [False, True, True]
    c = mx.array(np.array([False, False, True]))
    assert npv(mx.cummax(c, reverse=True, inclusive=False)).tolist() == [True, True, False]
    d = mx.array(np.array([False, True, True]))
    assert npv(mx.cummin(d, reverse=True, inclusive=False)).tolist() == [True, True, True]
    assert npv(mx.logcumsumexp(mx.array(np.array([True, False])))).tolist() == pytest.approx([1, 1.3132616])


def test_scan_dtype_argument():
    i8 = mx.array(np.array([100, 100, 100], np.int8))
    r = mx.cumsum(i8, dtype=mx.int32)
    assert dname(r) == "int32" and npv(r).tolist() == [100, 200, 300]
    r = mx.cumsum(mx.array(np.array([1.5, 2.5], np.float32)), dtype=mx.int32)  # cast first
    assert dname(r) == "int32" and npv(r).tolist() == [1, 3]
    r = mx.cumsum(mx.array(np.array([True, True])), dtype=mx.bool_)
    assert dname(r) == "int32" and npv(r).tolist() == [1, 2]
    r = mx.cumprod(mx.array(np.array([True, True])), dtype=mx.int32)
    assert dname(r) == "int32" and npv(r).tolist() == [1, 1]
    r = mx.cumsum(mx.array(np.array([1, 2, 3], np.int32)), dtype=mx.float16)
    assert dname(r) == "float16" and npv(r).tolist() == [1, 3, 6]
    assert dname(mx.cumsum(i8, dtype=None)) == "int8"


def test_scan_half_precision_is_mlx():
    # MLX keeps the running value in the output dtype: float16 sums stall at 2048
    assert npv(mx.cumsum(mx.ones(3000, dtype=mx.float16)))[-1] == 2048
    assert npv(mx.cumsum(mx.ones(3000, dtype=mx.bfloat16)))[-1] == 256
    p = npv(mx.cumprod(mx.full(30, 1.5, dtype=mx.float16)))
    assert p[-5:-3].tolist() == [37888, 56832] and np.isinf(p[-3:]).all()


@pytest.mark.usefixtures("cpu_device")  # float64: on the CPU stream, as on a Mac
def test_scan_nan_rules():
    nanv = np.array([1.0, NAN, 3.0], np.float32)
    for dt in ("float32", "float64"):
        x, _ = make(nanv, dt)
        assert np.isnan(npv(mx.cummax(x))[1:]).all() and npv(mx.cummax(x))[0] == 1
        assert np.isnan(npv(mx.cummin(x))[1:]).all()
        y, _ = make([NAN, 1.0], dt)
        assert np.isnan(npv(mx.cummax(y))).all()
        assert np.isnan(npv(mx.cummax(y, axis=0))).all()
    # MLX 0.32's float16/bfloat16 cummax/cummin give 0 (its quiet_NaN() for those types)
    for dt in ("float16", "bfloat16"):
        x, _ = make(nanv, dt)
        assert npv(mx.cummax(x)).tolist() == [1, 0, 3]
        assert npv(mx.cummin(x)).tolist() == [1, 0, 0]
        y, _ = make([NAN, 3.0], dt)
        got = npv(mx.cummax(y))
        assert np.isnan(got[0]) and got[1] == 0
    # signed zeros: max keeps the later of equal values, min the earlier
    z = mx.array(np.array([0.0, -0.0], np.float32))
    assert np.signbit(npv(mx.cummax(z))).tolist() == [False, True]
    assert np.signbit(npv(mx.cummin(z))).tolist() == [False, False]
    # logcumsumexp: nan propagates; infinities short-cut
    got = npv(mx.logcumsumexp(mx.array(np.array([1.0, NAN, 1.0], np.float32))))
    assert got[0] == 1 and np.isnan(got[1:]).all()
    got = npv(mx.logcumsumexp(mx.array(np.array([0.0, INF, 1.0, -INF], np.float32))))
    assert got.tolist() == [0, INF, INF, INF]
    assert npv(mx.logcumsumexp(mx.array(np.array([-INF, -INF], np.float32)))).tolist() == [-INF, -INF]


def _ulps(got_bits, want_bits):
    return [abs(int(g) - int(w)) for g, w in zip(got_bits, want_bits)]


def test_logcumsumexp_bits_match_mlx():
    # MLX's LogAddExp with its own float32 exp and the C library's log1pf: bit for bit up to
    # the last bit of log1pf, which is the platform's (glibc 2.41 rounds some values the other way)
    z = np.array([0.5, -1.25, 3.0, 2.5, -0.75, 1.0, 4.0], np.float32)
    x = mx.array(z)
    assert max(_ulps(npv(mx.logcumsumexp(x)).view(np.uint32).tolist(), [
        1056964608, 1059652723, 1078321944, 1080168843, 1080226372, 1080542919, 1083224521])) <= 1
    assert max(_ulps(npv(mx.logcumsumexp(x, reverse=True, inclusive=False)).view(np.uint32).tolist(), [
        1083186594, 1083179933, 1082650704, 1082249540, 1082232327, 1082130432, 4286578688])) <= 1
    assert npv(mx.logcumsumexp(x.astype(mx.float16))).view(np.uint16).tolist() == [
        14336, 14664, 16943, 17168, 17175, 17214, 17542]
    w = mx.array(np.array([0.1, 0.7, 0.2, 0.9, 0.3, 0.3, 0.8], np.float32)).reshape(1, 7).T
    assert max(_ulps(npv(mx.logcumsumexp(w, axis=0)).view(np.uint32).ravel().tolist(), [
        1036831949, 1066506548, 1069278661, 1073044833, 1074152832, 1074795662, 1075678499])) <= 1


def test_scan_complex():
    c = mx.array(np.array([1 + 1j, 2 + 3j, 2 + 1j, 1 + 5j], np.complex64))
    assert npv(mx.cumsum(c)).tolist() == [1 + 1j, 3 + 4j, 5 + 5j, 6 + 10j]
    assert npv(mx.cumprod(mx.array(np.array([1 + 2j, 3 - 1j, 0.5j], np.complex64)))).tolist() == [
        1 + 2j, 5 + 5j, -2.5 + 2.5j]
    assert npv(mx.cummax(c)).tolist() == [1 + 1j, 2 + 3j, 2 + 3j, 2 + 3j]
    assert npv(mx.cummin(c)).tolist() == [1 + 1j, 1 + 1j, 1 + 1j, 1 + 1j]
    e = npv(mx.cummax(c[:2], inclusive=False))
    assert np.isneginf(e[0].real) and np.isneginf(e[0].imag) and e[1] == 1 + 1j
    e = npv(mx.cummin(c[:2], inclusive=False))
    assert np.isposinf(e[0].real) and np.isposinf(e[0].imag)
    e = npv(mx.logcumsumexp(c[:2], inclusive=False))
    assert np.isneginf(e[0].real) and e[0].imag == 0 and e[1] == 1 + 1j
    got = npv(mx.logcumsumexp(c[:2]))
    np.testing.assert_allclose(got, [1 + 1j, 1.9063238 + 2.6238286j], rtol=1e-6)
    # max/min are plain lexicographic selects (no nan rule): a nan is replaced by a later value
    n = mx.array(np.array([complex(NAN, 0), 3 + 0j], np.complex64))
    assert npv(mx.cummax(n))[1] == 3 and np.isnan(npv(mx.cummin(n))[1].real)


def test_scan_empty_and_noncontiguous():
    assert mx.cumsum(mx.zeros((0, 3)), axis=1).shape == (0, 3)
    assert mx.cumsum(mx.zeros((0, 3))).shape == (0,)
    assert mx.cumsum(mx.zeros((2, 0)), axis=1, inclusive=False).shape == (2, 0)
    assert mx.logcumsumexp(mx.zeros((0,), dtype=mx.int32)).shape == (0,)
    x = mx.array(np.array([[1, 2], [3, 4]], np.int32))
    assert npv(mx.cumsum(x.T, axis=1)).tolist() == [[1, 4], [2, 6]]
    assert npv(mx.cumsum(x.T, axis=0, reverse=True, inclusive=False)).tolist() == [[2, 4], [0, 0]]
    bc = mx.broadcast_to(mx.array(np.array([1, 2, 3], np.int32)), (2, 3))
    assert npv(mx.cumsum(bc, axis=0)).tolist() == [[1, 2, 3], [2, 4, 6]]


def test_scan_large():
    rng = np.random.default_rng(7)
    a = rng.integers(-1000, 1000, (300, 700)).astype(np.int32)
    x = mx.array(a)
    same(npv(mx.cumsum(x, axis=0)), np.cumsum(a, axis=0, dtype=np.int32))
    same(npv(mx.cumsum(x, axis=1, reverse=True)), np.flip(np.cumsum(np.flip(a, 1), axis=1, dtype=np.int32), 1))
    same(npv(mx.cummax(x.T, axis=0)), np.maximum.accumulate(a.T, axis=0))
    same(npv(mx.cumsum(x)), np.cumsum(a.reshape(-1), dtype=np.int32))
    f = rng.standard_normal((257, 513)).astype(np.float32)
    np.testing.assert_allclose(npv(mx.cumsum(mx.array(f), axis=0)), np.cumsum(f.astype(np.float64), axis=0),
                               rtol=1e-4, atol=1e-3)


# ================================================================ errors

SORT_SIG = "    1. sort(a: array, /, axis: None | int = -1, *, stream: StreamOrDevice = None) -> array"
TOPK_SIG = "    1. topk(a: array, /, k: int, axis: None | int = -1, *, stream: StreamOrDevice = None) -> array"
PART_SIG = "    1. partition(a: array, /, kth: int, axis: None | int = -1, *, stream: StreamOrDevice = None) -> array"
CUMSUM_SIG = ("    1. cumsum(a: array, /, axis: int | None = None, *, reverse: bool = False, inclusive: bool = True, "
              "dtype: Dtype | None = None, stream: StreamOrDevice = None) -> array")
CUMMAX_SIG = ("    1. cummax(a: array, /, axis: int | None = None, *, reverse: bool = False, inclusive: bool = True, "
              "stream: StreamOrDevice = None) -> array")


def bad_call(fname, sig, types):
    return (f"{fname}(): incompatible function arguments. The following argument types are supported:\n"
            f"{sig}\n\nInvoked with types: {types}")


B = mx.array(np.array([[5, 1, 4], [2, 3, 0]], np.int32))
S0 = mx.array(3.0)

ERRORS = [
    (lambda: mx.sort(B, 2), ValueError, "[sort] Axis 2 is out of bounds for array with 2 dimensions."),
    (lambda: mx.sort(B, -3), ValueError, "[sort] Axis -3 is out of bounds for array with 2 dimensions."),
    (lambda: mx.sort(S0), ValueError, "[sort] Axis -1 is out of bounds for array with 0 dimensions."),
    (lambda: mx.argsort(S0), ValueError, "[argsort] Axis -1 is out of bounds for array with 0 dimensions."),
    (lambda: mx.argsort(B, axis=5), ValueError, "[argsort] Axis 5 is out of bounds for array with 2 dimensions."),
    (lambda: mx.topk(B, 7, axis=None), ValueError, "[topk] Received invalid k=7 along axis 0 for array with shape: (6)"),
    (lambda: mx.topk(B, 4, axis=0), ValueError, "[topk] Received invalid k=4 along axis 0 for array with shape: (2,3)"),
    (lambda: mx.topk(B, -1), ValueError, "[topk] Received invalid k=-1 along axis -1 for array with shape: (2,3)"),
    (lambda: mx.topk(B, 4, axis=-2), ValueError, "[topk] Received invalid k=4 along axis -2 for array with shape: (2,3)"),
    (lambda: mx.topk(B, 1, axis=2), ValueError, "[topk] Axis 2 is out of bounds for array with 2 dimensions."),
    (lambda: mx.topk(S0, 1), ValueError, "[topk] Axis -1 is out of bounds for array with 0 dimensions."),
    (lambda: mx.partition(B, 4, axis=-2), ValueError,
     "[partition] Received invalid kth 4along axis -2 for array with shape: (2,3)"),
    (lambda: mx.argpartition(B, 4, axis=-2), ValueError,
     "[argpartition] Received invalid kth 4 along axis -2 for array with shape: (2,3)"),
    (lambda: mx.partition(B, 7, axis=None), ValueError,
     "[partition] Received invalid kth 7along axis 0 for array with shape: (6)"),
    (lambda: mx.argpartition(B, -7, axis=None), ValueError,
     "[argpartition] Received invalid kth -7 along axis 0 for array with shape: (6)"),
    (lambda: mx.partition(mx.zeros((0,)), 0), ValueError,
     "[partition] Received invalid kth 0along axis -1 for array with shape: (0)"),
    (lambda: mx.partition(B, 0, axis=3), ValueError, "[partition] Axis 3 is out of bounds for array with 2 dimensions."),
    (lambda: mx.argpartition(B, 0, axis=-3), ValueError,
     "[argpartition] Axis -3 is out of bounds for array with 2 dimensions."),
    (lambda: mx.partition(S0, 0), ValueError, "[partition] Axis -1 is out of bounds for array with 0 dimensions."),
    (lambda: mx.cumsum(B, axis=2), ValueError, "[cumsum] Axis 2 is out of bounds for array with 2 dimensions."),
    (lambda: mx.cumprod(B, axis=9), ValueError, "[cumprod] Axis 9 is out of bounds for array with 2 dimensions."),
    (lambda: mx.cummax(B, axis=-3), ValueError, "[cummax] Axis -3 is out of bounds for array with 2 dimensions."),
    (lambda: mx.cummin(B, axis=2), ValueError, "[cummin] Axis 2 is out of bounds for array with 2 dimensions."),
    (lambda: mx.logcumsumexp(B, axis=2), ValueError,
     "[logcumsumexp] Axis 2 is out of bounds for array with 2 dimensions."),
    (lambda: mx.cumsum(S0, axis=0), ValueError, "[cumsum] Axis 0 is out of bounds for array with 0 dimensions."),
    (lambda: mx.cumsum(S0, axis=-1), ValueError, "[cumsum] Axis -1 is out of bounds for array with 0 dimensions."),
    # argument types, as nanobind refuses them
    (lambda: mx.topk(B), TypeError, bad_call("topk", TOPK_SIG, "mkpy.array")),
    (lambda: mx.topk(B, 1.0), TypeError, bad_call("topk", TOPK_SIG, "mkpy.array, float")),
    (lambda: mx.topk(B, 2**40), TypeError, bad_call("topk", TOPK_SIG, "mkpy.array, int")),
    (lambda: mx.topk(B, k=1, foo=2), TypeError, bad_call("topk", TOPK_SIG, "mkpy.array, kwargs = { k: int, foo: int }")),
    (lambda: mx.topk(a=B, k=1), TypeError, bad_call("topk", TOPK_SIG, "kwargs = { a: mkpy.array, k: int }")),
    (lambda: mx.topk(B, 1, 1, 1), TypeError, bad_call("topk", TOPK_SIG, "mkpy.array, int, int, int")),
    (lambda: mx.partition(B), TypeError, bad_call("partition", PART_SIG, "mkpy.array")),
    (lambda: mx.sort(a=B), TypeError, bad_call("sort", SORT_SIG, "kwargs = { a: mkpy.array }")),
    (lambda: mx.sort(), TypeError, bad_call("sort", SORT_SIG, "")),
    (lambda: mx.sort(B, 1, 2), TypeError, bad_call("sort", SORT_SIG, "mkpy.array, int, int")),
    (lambda: mx.sort([3, 1]), TypeError, bad_call("sort", SORT_SIG, "list")),
    (lambda: mx.sort(3), TypeError, bad_call("sort", SORT_SIG, "int")),
    (lambda: mx.sort(B, axis=1.5), TypeError, bad_call("sort", SORT_SIG, "mkpy.array, kwargs = { axis: float }")),
    (lambda: mx.sort(B, axis=2**40), TypeError, bad_call("sort", SORT_SIG, "mkpy.array, kwargs = { axis: int }")),
    (lambda: mx.cumsum([1, 2]), TypeError, bad_call("cumsum", CUMSUM_SIG, "list")),
    (lambda: mx.cumsum(3), TypeError, bad_call("cumsum", CUMSUM_SIG, "int")),
    (lambda: mx.cumsum(B, reverse=1), TypeError, bad_call("cumsum", CUMSUM_SIG, "mkpy.array, kwargs = { reverse: int }")),
    (lambda: mx.cumsum(B, reverse=None), TypeError,
     bad_call("cumsum", CUMSUM_SIG, "mkpy.array, kwargs = { reverse: NoneType }")),
    (lambda: mx.cumsum(B, 0, True), TypeError, bad_call("cumsum", CUMSUM_SIG, "mkpy.array, int, bool")),
    (lambda: mx.cumsum(B, axis=1.0), TypeError, bad_call("cumsum", CUMSUM_SIG, "mkpy.array, kwargs = { axis: float }")),
    (lambda: mx.cumsum(B, axis=2**40), TypeError, bad_call("cumsum", CUMSUM_SIG, "mkpy.array, kwargs = { axis: int }")),
    (lambda: mx.cumsum(B, dtype="float32"), TypeError, bad_call("cumsum", CUMSUM_SIG, "mkpy.array, kwargs = { dtype: str }")),
    (lambda: mx.cumsum(a=B), TypeError, bad_call("cumsum", CUMSUM_SIG, "kwargs = { a: mkpy.array }")),
    (lambda: mx.cummax(B, dtype=mx.float32), TypeError,
     bad_call("cummax", CUMMAX_SIG, "mkpy.array, kwargs = { dtype: mkpy.Dtype }")),
]


@pytest.mark.parametrize("i", range(len(ERRORS)))
def test_errors(i):
    fn, exc, msg = ERRORS[i]
    with pytest.raises(exc) as e:
        fn()
    assert str(e.value) == msg


def test_accepted_argument_forms():
    assert npv(mx.sort(B, -1, stream=None)).tolist() == [[1, 4, 5], [0, 2, 3]]
    assert npv(mx.argsort(B, stream=mx.cpu)).tolist() == [[1, 2, 0], [2, 0, 1]]
    assert npv(mx.sort(B, axis=np.int64(0))).tolist() == [[2, 1, 0], [5, 3, 4]]
    assert npv(mx.partition(B, kth=1, axis=0)).tolist() == [[2, 1, 0], [5, 3, 4]]
    assert npv(mx.cumsum(B, dtype=None)).tolist() == [5, 6, 10, 12, 15, 15]
    assert npv(mx.logcumsumexp(B, axis=1, reverse=True, inclusive=True, stream=None)).shape == (2, 3)


def test_signatures():
    import inspect

    for name in ("sort", "argsort", "partition", "argpartition", "topk", "cumsum", "cumprod", "cummax", "cummin",
                 "logcumsumexp"):
        inspect.signature(getattr(mx, name))
    assert str(inspect.signature(mx.topk)) == "(a, /, k, axis=-1, *, stream=None)"
    assert str(inspect.signature(mx.cumsum)) == "(a, /, axis=None, *, reverse=False, inclusive=True, dtype=None, stream=None)"


@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int32, np.uint32])
@pytest.mark.parametrize("n", [255, 256, 4097])
def test_radix_rows_match_stable_sort(dt, n):
    # rows of >= 256 elements of 32-bit compute types take the radix sort
    rng = np.random.default_rng(n)
    if dt == np.uint32:
        x = rng.integers(0, 2**32, (3, n), dtype=np.uint64).astype(dt)
        x[:, ::5] = x[0, 0]  # ties
    elif dt == np.int32:
        x = rng.integers(-2**31, 2**31, (3, n), dtype=np.int64).astype(dt)
        x[:, ::4] = -7
    else:
        x = (rng.standard_normal((3, n)) * 1000).astype(dt)
        x[:, ::7] = np.nan
        x[:, ::11] = -0.0
        x[:, ::13] = 0.0
        x[:, ::17] = np.inf
        x[:, ::19] = -np.inf
        x[:, ::23] = 1.5  # ties
    m = mx.array(x)
    for ax in (1, 0):
        got = np.array(mx.sort(m, axis=ax))
        ref = np.sort(x, axis=ax, kind="stable")
        assert np.array_equal(got, ref, equal_nan=True)
        assert np.array_equal(np.signbit(got), np.signbit(ref))
        assert np.array_equal(np.array(mx.argsort(m, axis=ax)), np.argsort(x, axis=ax, kind="stable"))
    # strided and transposed views
    v = m[:, ::2]
    assert np.array_equal(np.array(mx.sort(v)), np.sort(x[:, ::2], kind="stable"), equal_nan=True)
    assert np.array_equal(np.array(mx.argsort(m.T, axis=0)), np.argsort(x.T, axis=0, kind="stable"))


def test_radix_sort_keeps_signed_zero_order():
    # -0.0 and 0.0 compare equal: a stable sort keeps them in input order
    rng = np.random.default_rng(5)
    x = np.concatenate([np.where(rng.random(600) < 0.5, -0.0, 0.0), rng.standard_normal(400)]).astype(np.float32)
    rng.shuffle(x)
    got = np.array(mx.sort(mx.array(x)))
    zeros = x[x == 0]
    lo = int(np.sum(x < 0))
    assert np.array_equal(np.signbit(got[lo:lo + len(zeros)]), np.signbit(zeros))
    idx = np.array(mx.argsort(mx.array(x)))
    assert np.array_equal(idx, np.argsort(x, kind="stable"))
    bf = mx.array(x).astype(mx.bfloat16)
    got = np.array(mx.sort(bf).astype(mx.float32))
    assert np.array_equal(np.signbit(got[lo:lo + len(zeros)]), np.signbit(zeros))
    xb = np.array(bf.astype(mx.float32))  # rounding to bfloat16 makes new ties
    assert np.array_equal(np.array(mx.argsort(bf)), np.argsort(xb, kind="stable"))
