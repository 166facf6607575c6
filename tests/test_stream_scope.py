"""The stream= override lasts for its call only (docs/design.md, "Stream scope"): after an op
called with stream= returns, normally or by raising, the next op records the default stream again;
nested calls restore the outer call's stream; array methods behave as the functions; threads keep
their own overrides; and the binding layer refuses to set an override outside a stream binding's
call, so a binding not declared with MKPY_STREAM_BINDING cannot leak one.

The stream an op records is observed as MLX shows it: a node on a GPU stream (the default) refuses
float64 ("float64 is not supported on the GPU"), one on a CPU stream takes it. The override itself
is read through the core's exported C function (ctypes), to check it is unset between calls."""
import ctypes
import inspect
import re
import threading
import time
import types

import numpy as np
import pytest

import mkpy as mx
import mkpy._core as _core

F64 = "^float64 is not supported on the GPU$"
NONE = 0xFFFFFFFF  # MK_STREAM_NONE: no override

_lib = ctypes.PyDLL(_core.__file__)
_lib.mk_stream_override.restype = ctypes.c_uint32
_lib.mk_stream_override.argtypes = []
_lib.mk_stream_call_begin.restype = ctypes.c_uint32
_lib.mk_stream_call_begin.argtypes = []
_lib.mk_stream_call_end.restype = None
_lib.mk_stream_call_end.argtypes = [ctypes.c_uint32]
_lib.mkpy_stream_arg.restype = ctypes.c_int
_lib.mkpy_stream_arg.argtypes = [ctypes.c_char_p, ctypes.py_object]


def override():
    """This thread's current-stream override (NONE when unset)."""
    return _lib.mk_stream_override()


def d64():
    return mx.array([1.0, 2.0], mx.float64)


def on_default_stream():
    """True when an op without stream= records the default (GPU) stream: float64 is refused."""
    with pytest.raises(ValueError, match=F64):
        mx.add(d64(), 1)
    with pytest.raises(ValueError, match=F64):
        d64() * 2
    return override() == NONE


# ------------------------------------------------------ returning and raising


def test_override_ends_when_the_call_returns():
    d = d64()
    assert override() == NONE
    assert mx.add(d, 1, stream=mx.cpu).tolist() == [2.0, 3.0]
    assert on_default_stream()
    assert mx.sum(d, stream=mx.default_stream(mx.cpu)).item() == 3.0
    assert on_default_stream()
    assert mx.zeros((2,), mx.float64, stream=mx.Device(mx.cpu)).dtype == mx.float64
    assert on_default_stream()
    assert mx.linalg.inv(mx.eye(2, dtype=mx.float64, stream=mx.cpu), stream=mx.cpu).dtype == mx.float64
    assert on_default_stream()
    assert mx.random.uniform(shape=(2,), dtype=mx.float32, stream=mx.cpu).shape == (2,)
    assert on_default_stream()
    assert mx.fft.fft(mx.array([1.0, 0.0]), stream=mx.cpu).shape == (2,)
    assert on_default_stream()


@pytest.mark.parametrize(
    "call",
    [
        lambda d: mx.add(d, "x", stream=mx.cpu),  # conversion fails after the stream was taken
        lambda d: mx.add(d, mx.ones((3,), mx.float64), stream=mx.cpu),  # the core op raises
        lambda d: mx.reshape(d, (5,), stream=mx.cpu),
        lambda d: mx.sum(d, axis=4, stream=mx.cpu),
        lambda d: mx.concatenate([d, mx.ones((2, 2))], stream=mx.cpu),
        lambda d: mx.broadcast_arrays(d, mx.ones((3,)), stream=mx.cpu),  # parses stream by hand
        lambda d: mx.meshgrid(d, "x", stream=mx.cpu),
        lambda d: mx.arange(0, 3, 0, stream=mx.cpu),
        lambda d: mx.einsum("ij", d, stream=mx.cpu),
        lambda d: mx.atleast_2d(d, "x", stream=mx.cpu),
        lambda d: d.astype("float64", stream=mx.cpu),  # a method that parses stream itself
        lambda d: d.sum(axis=3, stream=mx.cpu),  # a method forwarding to mkpy.sum
        lambda d: d.reshape(7, stream=mx.cpu),
        lambda d: mx.linalg.inv(d, stream=mx.cpu),
        lambda d: mx.fft.fft(d, n=-1, stream=mx.cpu),
        lambda d: mx.random.normal(shape=(-1,), stream=mx.cpu),
        lambda d: mx.fast.rms_norm(d, mx.ones((3,)), 1e-5, stream=mx.cpu),
        lambda d: mx.conv1d(d, d, stream=mx.cpu),
        lambda d: mx.add(d, 1, stream=3),  # a bad stream
        lambda d: mx.add(d, 1, stream=mx.Device(mx.cpu, 1)),
    ],
)
def test_override_ends_when_the_call_raises(call):
    d = d64()
    with pytest.raises((ValueError, TypeError, IndexError)):
        call(d)
    assert on_default_stream()


def test_stream_is_taken_positionally_and_by_keyword():
    x = mx.array([1.0])
    assert x.astype(mx.float64, mx.cpu).dtype == mx.float64  # astype(dtype, stream)
    assert on_default_stream()
    assert mx.fft.fftfreq(4, 1.0, mx.cpu).shape == (4,)  # positional in fftfreq's signature
    assert on_default_stream()


# ----------------------------------------------------------------- methods


def test_array_methods_taking_stream():
    x = mx.array([[1.0, 2.0], [3.0, 4.0]])
    d = x.astype(mx.float64, stream=mx.cpu)
    assert on_default_stream()
    with pytest.raises(ValueError, match=F64):
        x.astype(mx.float64)
    assert d.sum(stream=mx.cpu).item() == 10.0
    assert on_default_stream()
    with pytest.raises(ValueError, match=F64):
        d.sum()
    assert d.reshape(4, stream=mx.cpu).shape == (4,)
    assert d.transpose(1, 0, stream=mx.cpu).tolist() == [[1.0, 3.0], [2.0, 4.0]]
    assert d.max(axis=0, stream=mx.cpu).tolist() == [3.0, 4.0]
    assert d.astype(mx.float32, stream=mx.cpu).dtype == mx.float32
    assert on_default_stream()
    with pytest.raises(ValueError, match=F64):
        d.reshape(4)


# ------------------------------------------------------------------ nesting


class _Nested:
    """An operand whose conversion (__mlx_array__) runs while the outer binding's call is open and
    calls other bindings: one with another stream, one raising."""

    def __init__(self, value, inner):
        self.value, self.inner = value, inner

    def __mlx_array__(self):
        self.inner()
        return self.value


def test_nested_binding_restores_the_outer_calls_stream():
    d = d64()

    def inner():
        # another stream inside, then an error inside
        assert mx.add(mx.array([1.0]), 1, stream=mx.gpu).item() == 2.0
        with pytest.raises(ValueError, match=F64):
            mx.add(d, 1, stream=mx.new_stream(mx.gpu))

    # the outer op's node is made after the nested calls returned: still on the CPU stream
    r = mx.multiply(_Nested(d, inner), d, stream=mx.cpu)
    assert r.dtype == mx.float64 and r.tolist() == [1.0, 4.0]
    assert on_default_stream()
    # and the other way round: a GPU outer call around a CPU inner one still refuses float64
    with pytest.raises(ValueError, match=F64):
        mx.multiply(_Nested(d, lambda: mx.sin(d, stream=mx.cpu)), d, stream=mx.gpu)
    assert on_default_stream()


def raw(stream):
    """The core's value of a Stream (device bit 31, index)."""
    return (1 << 31 if stream.device == mx.gpu else 0) | stream.index


def test_nested_through_custom_function_vjp_and_grad():
    seen = []

    @mx.custom_function
    def f(x):
        return mx.sin(x, stream=mx.cpu)

    @f.vjp
    def f_vjp(primals, cotangent, output):
        # the rule runs with its primitive's stream as the override (MLX: the primitive's stream);
        # bindings called with other streams inside, returning or raising, give it back
        entry = override()
        assert mx.add(mx.array([1.0]), 1, stream=mx.cpu).item() == 2.0
        assert override() == entry
        with pytest.raises(ValueError, match=F64):
            mx.add(d64(), 1, stream=mx.new_stream(mx.gpu))
        assert override() == entry
        seen.append(entry)
        x = primals[0] if isinstance(primals, (tuple, list)) else primals
        return (mx.multiply(cotangent, mx.cos(x, stream=mx.cpu), stream=mx.cpu),)

    x = mx.array([1.0, 2.0])
    g = mx.grad(lambda x: mx.sum(f(x), stream=mx.cpu))(x)
    np.testing.assert_allclose(np.array(g), np.cos([1.0, 2.0]), rtol=1e-6)
    assert seen == [raw(mx.default_stream(mx.gpu))]  # the custom primitive's (default) stream
    assert on_default_stream()
    v, vjps = mx.vjp(f, [x], [mx.ones_like(x)])
    np.testing.assert_allclose(np.array(vjps[0]), np.cos([1.0, 2.0]), rtol=1e-6)
    assert len(seen) == 2 and seen[1] == seen[0]
    assert on_default_stream()


def test_nested_through_compile():
    seen = []

    def fun(x):
        entry = override()  # compile's call is no stream binding: nothing set
        y = mx.exp(x, stream=mx.cpu)
        seen.append((entry, override()))
        return mx.add(y, 1, stream=mx.cpu)

    cf = mx.compile(fun)
    x = mx.array([1.0, 2.0])
    for _ in range(2):  # the trace, then the replay
        np.testing.assert_allclose(np.array(cf(x)), np.exp([1.0, 2.0]) + 1, rtol=1e-6)
        assert on_default_stream()
    assert seen and all(s == (NONE, NONE) for s in seen)
    with pytest.raises(ValueError, match=F64):
        mx.compile(lambda x: mx.exp(x))(d64())
    assert on_default_stream()


def test_stream_context_and_stream_argument_together():
    d = d64()
    with mx.stream(mx.cpu):
        assert (d + 1).dtype == mx.float64  # the context's default
        with pytest.raises(ValueError, match=F64):
            mx.add(d, 1, stream=mx.gpu)  # the argument wins for its call
        assert (d * 2).tolist() == [2.0, 4.0]  # and ends with it
        assert override() == NONE
    assert on_default_stream()


# ------------------------------------------------------------------ threads


def test_threads_keep_their_own_overrides():
    d = d64()
    inside = threading.Event()
    release = threading.Event()
    seen = {}

    def inner():
        # thread A is inside mx.add(..., stream=cpu) with its override set, and waits
        seen["a_inside"] = override()
        inside.set()
        release.wait(10)

    def thread_a():
        r = mx.add(_Nested(d, inner), d, stream=mx.cpu)
        seen["a_result"] = r.tolist()
        seen["a_after"] = override()

    t = threading.Thread(target=thread_a)
    t.start()
    assert inside.wait(10)
    try:
        # this thread meanwhile: no override, float64 refused on the default stream
        assert override() == NONE
        with pytest.raises(ValueError, match=F64):
            d + 1
        assert mx.add(d, 1, stream=mx.cpu).tolist() == [2.0, 3.0]
        assert override() == NONE
    finally:
        release.set()
        t.join()
    assert seen["a_inside"] != NONE
    assert seen["a_result"] == [2.0, 4.0] and seen["a_after"] == NONE
    assert on_default_stream()


def test_threads_switching_mid_call(in_threads):
    d = d64()

    def work(k):
        for i in range(30):
            if (i + k) % 2:
                # sleeps inside the call's scope: the GIL goes to the other threads
                r = mx.add(_Nested(d, lambda: time.sleep(0.0005)), d, stream=mx.cpu)
                assert r.tolist() == [2.0, 4.0]
            else:
                with pytest.raises(ValueError, match=F64):
                    mx.add(_Nested(d, lambda: time.sleep(0.0005)), d)
            assert override() == NONE

    in_threads(work, 4)


# ------------------------------------------------------------------ the guard


def test_stream_arg_refused_outside_a_stream_binding_call():
    # what a binding not declared with MKPY_STREAM_BINDING would do: parse stream= with no call open
    with pytest.raises(SystemError, match=r"f\(\): stream= set outside a stream binding call"):
        _lib.mkpy_stream_arg(b"f", mx.cpu)
    assert override() == NONE
    assert _lib.mkpy_stream_arg(b"f", None) == 0  # no stream: nothing to set, nothing refused
    # inside an open call it is set, and the call's end restores it
    saved = _lib.mk_stream_call_begin()
    try:
        assert _lib.mkpy_stream_arg(b"f", mx.cpu) == 0
        assert override() != NONE
    finally:
        _lib.mk_stream_call_end(saved)
    assert on_default_stream()


_STREAM_PARAM = re.compile(r"\bstream\s*[:=]")


def _stream_callables():
    """Every public function and array method whose signature has a `stream` parameter."""
    out = {}
    spaces = [("mx", mx)] + [(n, getattr(mx, n)) for n in ("random", "fft", "linalg", "fast", "distributed")]
    for prefix, ns in spaces:
        for name in dir(ns):
            f = getattr(ns, name)
            if name.startswith("_") or isinstance(f, (type, types.ModuleType)) or not callable(f):
                continue
            out[f"{prefix}.{name}"] = f
    for name in dir(mx.array):
        if not name.startswith("__"):
            out[f"array.{name}"] = getattr(mx.array, name)
    found = {}
    for name, f in out.items():
        try:
            sig = str(inspect.signature(f))
        except (TypeError, ValueError):
            sig = (getattr(f, "__doc__", "") or "").split("\n\n")[0]
        if _STREAM_PARAM.search(sig):
            found[name] = f
    return found


def _explicit_calls(tmp_path):
    """Calls (taking the stream) for the functions the generic argument patterns do not fit."""
    x = mx.ones((2, 2))
    i = mx.zeros((2, 1), mx.int32)
    q = mx.ones((1, 1, 2, 4))
    w, sc, b = mx.quantize(mx.ones((2, 64)))
    path = str(tmp_path / "a.npy")
    mx.save(path, x)
    return {
        "array.astype": lambda s: x.astype(mx.float16, stream=s),
        "array.reshape": lambda s: x.reshape(4, stream=s),
        "fast.cross_entropy": lambda s: mx.fast.cross_entropy(x, mx.array([0, 1]), stream=s),
        "fast.layer_norm": lambda s: mx.fast.layer_norm(x, None, None, 1e-5, stream=s),
        "fast.rms_norm": lambda s: mx.fast.rms_norm(x, mx.ones((2,)), 1e-5, stream=s),
        "fast.rope": lambda s: mx.fast.rope(
            mx.ones((1, 2, 4)), 4, traditional=False, base=10000.0, scale=1.0, offset=0, stream=s
        ),
        "fast.scaled_dot_product_attention": lambda s: mx.fast.scaled_dot_product_attention(
            q, q, q, scale=1.0, stream=s
        ),
        "mx.conv1d": lambda s: mx.conv1d(mx.ones((1, 4, 1)), mx.ones((1, 2, 1)), stream=s),
        "mx.conv2d": lambda s: mx.conv2d(mx.ones((1, 4, 4, 1)), mx.ones((1, 2, 2, 1)), stream=s),
        "mx.conv3d": lambda s: mx.conv3d(mx.ones((1, 3, 3, 3, 1)), mx.ones((1, 2, 2, 2, 1)), stream=s),
        "mx.conv_general": lambda s: mx.conv_general(mx.ones((1, 4, 1)), mx.ones((1, 2, 1)), stream=s),
        "mx.conv_transpose1d": lambda s: mx.conv_transpose1d(mx.ones((1, 4, 1)), mx.ones((1, 2, 1)), stream=s),
        "mx.conv_transpose2d": lambda s: mx.conv_transpose2d(
            mx.ones((1, 4, 4, 1)), mx.ones((1, 2, 2, 1)), stream=s
        ),
        "mx.conv_transpose3d": lambda s: mx.conv_transpose3d(
            mx.ones((1, 3, 3, 3, 1)), mx.ones((1, 2, 2, 2, 1)), stream=s
        ),
        "mx.convolve": lambda s: mx.convolve(mx.ones((3,)), mx.ones((2,)), stream=s),
        "mx.dequantize": lambda s: mx.dequantize(w, sc, b, stream=s),
        "mx.quantize": lambda s: mx.quantize(mx.ones((2, 64)), stream=s),
        "mx.quantized_matmul": lambda s: mx.quantized_matmul(mx.ones((1, 64)), w, sc, b, stream=s),
        "mx.gather_qmm": lambda s: mx.gather_qmm(mx.ones((1, 64)), w, sc, b, stream=s),
        "mx.qqmm": lambda s: mx.qqmm(mx.ones((1, 64)), mx.ones((2, 64)), stream=s),
        "mx.gather_qqmm": lambda s: mx.gather_qqmm(mx.ones((1, 64)), mx.ones((2, 64)), stream=s),
        "mx.einsum": lambda s: mx.einsum("ij->ji", x, stream=s),
        "mx.full": lambda s: mx.full((2,), 1.0, stream=s),
        "mx.load": lambda s: mx.load(path, stream=s),
        "mx.moveaxis": lambda s: mx.moveaxis(x, 0, 1, stream=s),
        "mx.swapaxes": lambda s: mx.swapaxes(x, 0, 1, stream=s),
        "mx.put_along_axis": lambda s: mx.put_along_axis(x, i, mx.ones((2, 1)), axis=1, stream=s),
        "mx.take_along_axis": lambda s: mx.take_along_axis(x, i, axis=1, stream=s),
        "mx.segmented_mm": lambda s: mx.segmented_mm(
            mx.ones((2, 4)), mx.ones((4, 2)), mx.array([[0, 2], [2, 4]]), stream=s
        ),
        "mx.slice": lambda s: mx.slice(x, mx.array([0]), [0], [1, 2], stream=s),
        "mx.slice_update": lambda s: mx.slice_update(x, mx.ones((1, 2)), mx.array([0]), [0], stream=s),
        "mx.unflatten": lambda s: mx.unflatten(x, 0, (2, 1), stream=s),
        "mx.view": lambda s: mx.view(x, mx.int32, stream=s),
        "mx.synchronize": lambda s: mx.synchronize(s),  # positional only; it sets no stream
        # a singleton group refuses these in the core op, after the stream was taken
        "distributed.send": lambda s: _singleton(lambda: mx.distributed.send(x, 0, stream=s)),
        "distributed.recv": lambda s: _singleton(lambda: mx.distributed.recv((2,), mx.float32, 0, stream=s)),
        "distributed.recv_like": lambda s: _singleton(lambda: mx.distributed.recv_like(x, 0, stream=s)),
    }


def _singleton(call):
    with pytest.raises(ValueError, match="singleton group"):
        call()


def test_every_stream_binding_takes_its_stream_inside_a_call(tmp_path):
    """Every public callable with a stream parameter accepts stream=mx.cpu in a successful call (a
    binding outside MKPY_STREAM_BINDING would be refused there, whatever error it turns the refusal
    into), never raises the guard's SystemError for other arguments, and leaves no override."""
    fns = _stream_callables()
    assert len(fns) > 200 and "mx.add" in fns and "array.astype" in fns and "fft.fftfreq" in fns
    explicit = _explicit_calls(tmp_path)
    assert set(explicit) <= set(fns)
    x = mx.ones((2, 2))
    k = mx.random.key(0)
    patterns = [(), (x,), (x, x), (x, x, x), (x, 1), (2,), (k, 2), ((2,),)]
    failed = []
    for name, f in sorted(fns.items()):
        ok = False
        if name in explicit:
            explicit[name](mx.cpu)
            ok = True
        for args in patterns:
            try:
                if name.startswith("array."):
                    f(x, *args[1:], stream=mx.cpu)
                else:
                    f(*args, stream=mx.cpu)
                ok = True
            except SystemError as e:  # the guard: this binding sets stream= with no call open
                pytest.fail(f"{name}{args}: {e}")
            except Exception:  # noqa: BLE001 - most patterns are wrong for most functions
                pass
            assert override() == NONE, f"{name}{args} left its stream set"
        if not ok:
            failed.append(name)
    assert failed == []


def test_metal_kernel_call_takes_its_stream_for_the_call():
    # the kernel object's vectorcall is a stream binding too (py_fast.c)
    kernel = mx.fast.metal_kernel(
        name="scope_copy",
        input_names=["inp"],
        output_names=["out"],
        source="uint i = thread_position_in_grid.x; out[i] = inp[i];",
    )
    a = mx.array([1.0, 2.0, 3.0])
    for stream in (mx.gpu, mx.new_stream(mx.gpu)):
        out = kernel(inputs=[a], grid=(3, 1, 1), threadgroup=(3, 1, 1), output_shapes=[(3,)],
                     output_dtypes=[mx.float32], stream=stream)
        assert override() == NONE
        assert out[0].tolist() == [1.0, 2.0, 3.0]
        assert on_default_stream()
    with pytest.raises(TypeError):
        kernel(inputs=[a], grid=(3, 1, 1), threadgroup=(3, 1, 1), output_shapes=[(3,)],
               output_dtypes=["float32"], stream=mx.gpu)  # fails after the stream was taken
    assert on_default_stream()
