"""Test helpers (mkpy only; MLX has none): :func:`assert_allclose`."""
from . import _core as _mx

__all__ = ["assert_allclose"]

_WIDE = ("float64", "int64", "uint64", "int32", "uint32")


def _dtype_name(x):
    return str(x.dtype).rsplit(".", 1)[-1]


def _index(flat, shape):
    idx = []
    for n in reversed(shape):
        idx.append(flat % n)
        flat //= n
    return tuple(reversed(idx))


def assert_allclose(actual, expected, rtol=1e-05, atol=1e-08, equal_nan=True, err_msg=""):
    """Raise ``AssertionError`` unless ``|actual - expected| <= atol + rtol * |expected|`` everywhere.

    Works for every dtype, float16 and bfloat16 included (both sides are compared in float32, or
    in float64 when either is float64 or a 32/64-bit integer), and for complex values (the modulus
    of the difference). ``actual`` and ``expected`` may be arrays, scalars, lists or anything
    ``mx.array`` takes; their shapes must be equal (a scalar ``expected`` is broadcast).
    Infinities must match exactly; NaNs match NaNs when ``equal_nan`` (numpy's default).
    A float64 comparison runs on the CPU stream (``mx.stream(mx.cpu)``): GPU streams refuse float64,
    as MLX's do.

    The message gives the number of mismatched elements, the worst element (index, both
    values) and the largest absolute and relative errors, for example::

        Not equal to tolerance rtol=1e-05, atol=1e-08 (actual bfloat16, expected float32)
        Mismatched elements: 2 / 6 (33.3%)
        Worst element: index (1, 2): actual 6.5, expected 6.0
        Max absolute difference: 0.5
        Max relative difference: 0.0833333

    Args:
        actual: The values to check (an ``mx.array`` or anything ``mx.array`` accepts).
        expected: The reference values.
        rtol (float): Relative tolerance. Default ``1e-05`` (``mx.allclose``'s).
        atol (float): Absolute tolerance. Default ``1e-08``.
        equal_nan (bool): Whether NaN equals NaN. Default ``True``.
        err_msg (str): Put at the start of the message.
    """
    a = actual if isinstance(actual, _mx.array) else _mx.array(actual)
    e = expected if isinstance(expected, _mx.array) else _mx.array(expected)
    header = "Not equal to tolerance rtol=%g, atol=%g (actual %s, expected %s)" % (
        rtol, atol, _dtype_name(a), _dtype_name(e))
    if err_msg:
        header = err_msg + "\n" + header
    if any(_dtype_name(x) in _WIDE for x in (a, e)):
        # computed in float64, which GPU streams refuse (as MLX's): on the CPU stream
        with _mx.stream(_mx.cpu):
            return _check(a, e, header, rtol, atol, equal_nan)
    return _check(a, e, header, rtol, atol, equal_nan)


def _check(a, e, header, rtol, atol, equal_nan):
    if e.ndim == 0 and a.ndim > 0:
        e = _mx.broadcast_to(e, a.shape)
    if tuple(a.shape) != tuple(e.shape):
        raise AssertionError("%s\nShapes differ: actual %s, expected %s" % (header, tuple(a.shape), tuple(e.shape)))
    if a.size == 0:
        return
    names = (_dtype_name(a), _dtype_name(e))
    is_complex = any(n.startswith("complex") for n in names)
    if is_complex:
        ct = _mx.complex64
    elif any(n in _WIDE for n in names):
        ct = _mx.float64
    else:
        ct = _mx.float32
    A = a.astype(ct).reshape(-1)
    E = e.astype(ct).reshape(-1)
    diff = _mx.abs(A - E)
    absE = _mx.abs(E)
    if is_complex:
        nanA = _mx.logical_or(_mx.isnan(A.real), _mx.isnan(A.imag))
        nanE = _mx.logical_or(_mx.isnan(E.real), _mx.isnan(E.imag))
    else:
        nanA, nanE = _mx.isnan(A), _mx.isnan(E)
    ok = _mx.logical_or(diff <= atol + rtol * absE, A == E)  # A == E: equal infinities
    if equal_nan:
        ok = _mx.logical_or(ok, _mx.logical_and(nanA, nanE))
    bad = _mx.logical_not(ok)
    count = int(bad.astype(_mx.int64).sum().item())
    if count == 0:
        return
    # the worst element: a NaN mismatch first, else the largest excess over the tolerance
    excess = _mx.where(bad, diff - (atol + rtol * absE), _mx.array(-1.0, dtype=diff.dtype))
    excess = _mx.where(_mx.logical_and(bad, _mx.isnan(diff)), _mx.array(float("inf"), dtype=diff.dtype), excess)
    worst = int(_mx.argmax(excess).item())
    finite_bad = _mx.logical_and(bad, _mx.logical_not(_mx.isnan(diff)))
    max_abs = _mx.max(_mx.where(finite_bad, diff, _mx.array(0.0, dtype=diff.dtype))).item()
    rel = _mx.where(_mx.logical_and(finite_bad, absE > 0), diff / _mx.where(absE > 0, absE, 1.0),
                    _mx.array(0.0, dtype=diff.dtype))
    max_rel = _mx.max(rel).item()
    idx = _index(worst, tuple(a.shape)) if a.ndim else ()
    av = a.reshape(-1)[worst].item()
    ev = e.reshape(-1)[worst].item()
    lines = [
        header,
        "Mismatched elements: %d / %d (%.3g%%)" % (count, a.size, 100.0 * count / a.size),
        "Worst element: index %s: actual %r, expected %r" % (idx, av, ev),
        "Max absolute difference: %.6g" % max_abs,
        "Max relative difference: %.6g" % max_rel,
    ]
    raise AssertionError("\n".join(lines))
