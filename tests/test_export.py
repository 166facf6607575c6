"""export_function / import_function / exporter in MLX's .mlxfn format."""
import os
import random

import numpy as np
import pytest

import mkpy as mx

DATA = os.path.join(os.path.dirname(__file__), "data")


def path_in(tmp_path, name="fn.mlxfn"):
    return str(tmp_path / name)


def test_round_trip_elementwise(tmp_path):
    p = path_in(tmp_path)

    def fn(x, y):
        return mx.exp(mx.abs(x)) * y - 2 + mx.sqrt(mx.abs(y))

    x, y = mx.array([1.0, -2.0, 3.0]), mx.array([0.5, 1.5, -1.0])
    mx.export_function(p, fn, x, y)
    f = mx.import_function(p)
    out = f(x, y)
    assert isinstance(out, tuple) and len(out) == 1
    np.testing.assert_allclose(np.array(out[0]), np.array(fn(x, y)), rtol=1e-6)
    # other values of the same signature
    x2, y2 = mx.array([0.0, 4.0, -1.0]), mx.array([2.0, 2.0, 2.0])
    np.testing.assert_allclose(np.array(f(x2, y2)[0]), np.array(fn(x2, y2)), rtol=1e-6)


def test_round_trip_views_reductions_matmul(tmp_path):
    p = path_in(tmp_path)

    def fn(a, b):
        t = mx.transpose(a)[1:, ::2]
        r = t.reshape(-1).sum(axis=0, keepdims=True)
        m = mx.matmul(a, b).max(axis=1)
        e = a[None, :, 2] + mx.zeros((3, 1, 4))
        return r, m, e, mx.sort(a, axis=0), mx.cumsum(a, axis=1), mx.concatenate([a, a], axis=1)

    a = mx.array(np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32))
    b = mx.array(np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32))
    mx.export_function(p, fn, a, b)
    outs = mx.import_function(p)(a, b)
    for o, e in zip(outs, fn(a, b)):
        np.testing.assert_allclose(np.array(o), np.array(e), rtol=1e-5, atol=1e-6)


def test_gather_scatter_along_axis_and_searchsorted(tmp_path):
    p = path_in(tmp_path)
    x = mx.array(np.arange(16, dtype=np.float32).reshape(4, 4))
    idx = mx.array([[0, 1, 2, 3], [1, 2, 0, 3]])
    mx.export_function(p, lambda a, b: mx.take_along_axis(a, b, axis=0), x, idx)
    assert mx.array_equal(mx.import_function(p)(x, idx)[0], mx.take_along_axis(x, idx, axis=0))
    z = mx.array(np.full((2, 4), -1, np.float32))
    mx.export_function(p, lambda a, b, c: mx.put_along_axis(a, b, c, axis=0), x, idx, z)
    assert mx.array_equal(mx.import_function(p)(x, idx, z)[0], mx.put_along_axis(x, idx, z, axis=0))
    seq, v = mx.array([0.0, 1.0, 2.0, 3.0]), mx.array([0.5, 2.0, 7.0])
    mx.export_function(p, lambda s, q: mx.searchsorted(s, q, side="right"), seq, v)
    assert mx.import_function(p)(seq, v)[0].tolist() == [1, 3, 4]
    assert b"SearchSorted" in open(p, "rb").read()  # MLX's primitive, one node


def test_kwargs_and_ordering(tmp_path):
    p = path_in(tmp_path)
    mx.export_function(p, lambda x, y: x - y, x=mx.array(1.0), y=mx.array(1.0))
    f = mx.import_function(p)
    assert f(x=mx.array(2.0), y=mx.array(3.0))[0].item() == -1.0
    assert f(y=mx.array(2.0), x=mx.array(3.0))[0].item() == 1.0
    assert f({"x": mx.array(5.0), "y": mx.array(1.0)})[0].item() == 4.0
    with pytest.raises(ValueError, match="No imported function found"):
        f(mx.array(1.0), mx.array(2.0))


def test_shapeless(tmp_path):
    p = path_in(tmp_path)

    def fn(x, w):
        return (mx.abs(x) @ w).sum(axis=-1)

    x = mx.ones((2, 3, 4))
    w = mx.ones((4, 5))
    mx.export_function(p, fn, x, w, shapeless=True)
    f = mx.import_function(p)
    x2 = mx.array(np.random.default_rng(2).standard_normal((3, 7, 4)).astype(np.float32))
    np.testing.assert_allclose(np.array(f(x2, w)[0]), np.array(fn(x2, w)), rtol=1e-5)
    # not shapeless: another shape has no trace
    mx.export_function(p, fn, x, w)
    with pytest.raises(ValueError):
        mx.import_function(p)(x2, w)
    # the dtype and the number of dimensions still count when shapeless
    mx.export_function(p, fn, x, w, shapeless=True)
    with pytest.raises(ValueError):
        mx.import_function(p)(mx.ones((3, 4)), w)


def test_shapeless_flatten_and_unflatten_follow_the_input(tmp_path):
    # exported as MLX's Flatten and Unflatten: a shapeless import keeps the other dims of the input
    p = path_in(tmp_path)
    fn = lambda x: (mx.flatten(mx.unflatten(x, -1, (2, -1)), 0, 1) * 2, mx.unflatten(x, 0, (1, -1)) + 1)
    mx.export_function(p, fn, mx.ones((2, 3, 4)), shapeless=True)
    data = open(p, "rb").read()
    assert b"Unflatten" in data and b"Flatten" in data
    f = mx.import_function(p)
    for shape in ((2, 3, 4), (2, 1, 4), (2, 7, 4)):  # the split axes keep their traced sizes, as MLX
        x = mx.array(np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32))
        for got, want in zip(f(x), fn(x)):
            assert got.shape == want.shape
            np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-6, atol=1e-6)


def test_exporter_multiple_traces_and_shared_constant(tmp_path):
    p = path_in(tmp_path)
    constant = mx.zeros((16, 256))
    mx.eval(constant)

    def fn(*args):
        return constant + sum(args)

    with mx.exporter(p, fn) as ex:
        for i in range(1, 5):
            ex(*[mx.array(1.0)] * i)
    # the constant's data is written once
    assert os.path.getsize(p) < constant.nbytes + 8192
    f = mx.import_function(p)
    for i in range(1, 5):
        out = f(*[mx.array(2.0)] * i)[0]
        assert out.shape == (16, 256) and out[0, 0].item() == 2.0 * i
    with pytest.raises(RuntimeError, match="closed"):
        ex(mx.array(1.0))
    ex2 = mx.exporter(p, fn)
    ex2(mx.array(1.0))
    with pytest.raises(ValueError, match="twice with the same signature"):
        ex2(mx.array(3.0))


def test_metadata(tmp_path):
    p = path_in(tmp_path)
    mx.export_function(p, lambda x: x + 1, mx.array(1.0), metadata="hello \u00e9")
    f, md = mx.import_function(p, return_metadata=True)
    assert md == "hello \u00e9" and f(mx.array(2.0))[0].item() == 3.0
    with pytest.raises(ValueError, match="metadata"):
        mx.export_function(lambda d: None, lambda x: x + 1, mx.array(1.0), metadata="x")


def test_callback(tmp_path):
    seen = []
    mx.export_function(lambda d: seen.append(d), lambda x, y: mx.log(mx.abs(x - y)).astype(mx.int32),
                       mx.array(1.0), y=mx.array(1.0))
    kinds = [d["type"] for d in seen]
    assert kinds[:4] == ["inputs", "keyword_inputs", "outputs", "constants"]
    assert len(seen[0]["inputs"]) == 2 and seen[1]["keywords"][0][0] == "y"
    prims = [(d["name"], d["arguments"]) for d in seen if d["type"] == "primitive"]
    assert prims == [("Subtract", []), ("Abs", []), ("Log", [2]), ("AsType", [mx.int32])]


def test_random_without_inputs(tmp_path):
    p = path_in(tmp_path)
    mx.random.seed(5)
    mx.export_function(p, lambda: mx.random.uniform(shape=(3,)))
    out = mx.import_function(p)()[0]
    mx.random.seed(5)
    assert mx.array_equal(out, mx.random.uniform(shape=(3,)))


def test_quantized_matmul_and_conv(tmp_path):
    p = path_in(tmp_path)
    rng = np.random.default_rng(3)
    w = mx.array(rng.standard_normal((64, 64)).astype(np.float32))
    wq, s, b = mx.quantize(w)
    x = mx.array(rng.standard_normal((4, 64)).astype(np.float32))

    def fn(x):
        return mx.maximum(mx.quantized_matmul(x, wq, s, b), 0.0)

    mx.export_function(p, fn, x)
    assert mx.array_equal(mx.import_function(p)(x)[0], fn(x))
    cin = mx.array(rng.standard_normal((1, 8, 8, 3)).astype(np.float32))
    cw = mx.array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    mx.export_function(p, lambda a, k: mx.conv2d(a, k, stride=2, padding=1), cin, cw)
    np.testing.assert_allclose(np.array(mx.import_function(p)(cin, cw)[0]),
                               np.array(mx.conv2d(cin, cw, stride=2, padding=1)), rtol=1e-5, atol=1e-5)


def test_errors(tmp_path):
    p = path_in(tmp_path)
    with pytest.raises(ValueError, match="Outputs can be either"):
        mx.export_function(p, lambda x: 3, mx.array(1.0))
    with pytest.raises(ValueError, match="Inputs can either be"):
        mx.export_function(p, lambda x: x, 1.0)
    with pytest.raises(RuntimeError, match="Failed to open"):
        mx.import_function(str(tmp_path / "missing.mlxfn"))
    y = mx.array([1.0, 2.0])
    with pytest.raises(ValueError, match="uncaptured inputs"):
        mx.export_function(p, lambda x: x + y * 0 + (x * 0).sum() + mx.stop_gradient(y), y)


def test_unmapped_primitive_names_it(tmp_path):
    # an mkpy primitive without an MLX mapping yet (the FFT)
    with pytest.raises(NotImplementedError, match=r"\[export_function\] Primitive \w+ cannot be exported"):
        mx.export_function(path_in(tmp_path), lambda x: mx.fft.fft(x), mx.array([1.0, 2.0]))


def test_unknown_primitive_in_file(tmp_path):
    p = path_in(tmp_path)
    mx.export_function(p, lambda x: mx.abs(x), mx.array([1.0]))
    data = open(p, "rb").read()
    # rename the primitive (same length) to a name mkpy does not rebuild
    assert data.count(b"Abs") == 1
    open(p, "wb").write(data.replace(b"Abs", b"Zzz"))
    with pytest.raises(ValueError, match="Unable to deserialize primitive Zzz"):
        mx.import_function(p)


def test_malformed_files_never_crash(tmp_path):
    p = path_in(tmp_path)

    def fn(x, y):
        return mx.transpose(x)[1:] * y.sum() + mx.array([1.0, 2.0, 3.0])

    x, y = mx.ones((3, 3)), mx.ones((2,))
    mx.export_function(p, fn, x, y)
    data = open(p, "rb").read()
    q = path_in(tmp_path, "bad.mlxfn")
    # every truncation
    for n in range(len(data)):
        open(q, "wb").write(data[:n])
        with pytest.raises(ValueError):
            mx.import_function(q)
    # byte flips: either a clear error or a function that runs
    rng = random.Random(7)
    for _ in range(300):
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        open(q, "wb").write(bytes(b))
        try:
            f = mx.import_function(q)
            out = f(x, y)
            mx.eval(out)
        except (ValueError, RuntimeError, TypeError, IndexError, MemoryError, OverflowError):
            pass


def test_imports_file_written_by_mlx():
    # written by MLX 0.32.4: fn(x, y) = abs(x) + 2 * y (a binary, not MLX's source)
    f = mx.import_function(os.path.join(DATA, "mlx_exp_add.mlxfn"))
    out = f(mx.array([1.0, -5.0, 3.0]), mx.array([0.0, 1.0, 1.5]))[0]
    assert out.tolist() == [1.0, 7.0, 6.0]


def test_scatter_on_leading_axes(tmp_path):
    p = path_in(tmp_path)

    def fn(x, y, z):
        return x.at[y].add(z)

    x, y, z = mx.array([1, 2, 3]), mx.array([0, 0, 1]), mx.array([1, 1, 1])
    mx.export_function(p, fn, x, y, z)
    assert mx.import_function(p)(x, y, z)[0].tolist() == [3, 3, 3]

    def fm(x, y, z):
        return x.at[y].maximum(z)

    x, y, z = mx.zeros((4, 3)), mx.array([[0, 2]]), mx.ones((1, 2, 3))
    mx.export_function(p, fm, x, y, z)
    assert mx.array_equal(mx.import_function(p)(x, y, z)[0], fm(x, y, z))


# ------------------------------------------------------------------ metal_kernel (CustomKernel)

TWO_OUT = """
    uint i = thread_position_in_grid.x;
    out[i] = scale(a[i], T(N));
    if (B) flags[i] = int(a[i]) % 3;
"""
TWO_OUT_HEADER = "template <typename U> U scale(U x, U s) { return x * s + U(1); }\n"


def two_out_kernel():
    return mx.fast.metal_kernel(name="tmpl_two", input_names=["a"], output_names=["out", "flags"],
                                source=TWO_OUT, header=TWO_OUT_HEADER)


def call_two_out(k, a, b=True, n=3):
    return k(inputs=[a], grid=(8, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(2, 4), (8,)],
             output_dtypes=[mx.float32, mx.int32], template=[("T", mx.float32), ("N", n), ("B", b)],
             init_value=-1.0)


def test_metal_kernel_round_trip_with_template_args(tmp_path):
    p = path_in(tmp_path)
    k = two_out_kernel()

    def fn(a):
        out, flags = call_two_out(k, a * 2)
        return mx.exp(out / 10), flags

    a = mx.arange(8, dtype=mx.float32).reshape(2, 4)
    mx.export_function(p, fn, a)
    data = open(p, "rb").read()
    # MLX's record: the primitive's name, the generated kernel name and source
    assert b"CustomKernel" in data
    assert b"custom_kernel_tmpl_two__float_3_1_float_float_int32_t" in data
    assert TWO_OUT.encode() in data and TWO_OUT_HEADER.encode() in data
    f = mx.import_function(p)
    for x in (a, mx.array([[5.0, -1.0, 2.5, 0.0], [7.0, 8.0, 9.0, 10.0]])):
        out, flags = f(x)
        want_out, want_flags = fn(x)
        np.testing.assert_allclose(np.array(out), np.array(want_out), rtol=1e-6)
        assert flags.dtype == mx.int32 and flags.tolist() == want_flags.tolist()


def test_metal_kernel_round_trip_template_false_keeps_init_value(tmp_path):
    # B=False: flags is never written, so it keeps init_value
    p = path_in(tmp_path)
    k = two_out_kernel()
    mx.export_function(p, lambda a: call_two_out(k, a, b=False, n=5), mx.zeros((2, 4)))
    a = mx.arange(8, dtype=mx.float32).reshape(2, 4)
    out, flags = mx.import_function(p)(a)
    assert flags.tolist() == [-1] * 8
    assert out.tolist() == (np.arange(8).reshape(2, 4) * 5.0 + 1).tolist()


def test_metal_kernel_round_trip_atomic_scalar_input_math_mode(tmp_path):
    p = path_in(tmp_path)
    src = """
        uint i = thread_position_in_grid.x;
        atomic_fetch_add_explicit(&total[0], a[i] * s + float(a_shape[0]) + float(a_ndim), memory_order_relaxed);
    """
    k = mx.fast.metal_kernel(name="atomic_sum", input_names=["a", "s"], output_names=["total"], source=src,
                             atomic_outputs=True, compile_options={"math_mode": "fast"})

    def fn(a, s):
        return k(inputs=[a, s], grid=(a.size, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(1,)],
                 output_dtypes=[mx.float32], init_value=0.5)[0]

    a, s = mx.arange(6, dtype=mx.float32), mx.array(2.0)
    mx.export_function(p, fn, a, s)
    data = open(p, "rb").read()
    assert b"device atomic<float>* total" in data and b"const constant float& s" in data
    f = mx.import_function(p)
    for s2 in (s, mx.array(-1.0)):
        got = f(a, s2)[0]
        assert got.tolist() == fn(a, s2).tolist() == [0.5 + sum(i * s2.item() + 7 for i in range(6))]


def test_metal_kernel_one_output_of_two_and_plain_ops_around(tmp_path):
    # only the second output is returned: the record still lists both (siblings)
    p = path_in(tmp_path)
    k = two_out_kernel()

    def fn(a, b):
        return call_two_out(k, a + b)[1] * 2

    a, b = mx.arange(8, dtype=mx.float32).reshape(2, 4), mx.ones((4,))
    mx.export_function(p, fn, a, b)
    assert mx.import_function(p)(a, b)[0].tolist() == fn(a, b).tolist()


def test_metal_kernel_non_contiguous_input_ensure_row_contiguous(tmp_path):
    # a transposed input: copied to row order (ensure_row_contiguous) or read through its strides
    src = "uint i = thread_position_in_grid.x;\nout[i] = a[elem_to_loc(i, a_shape, a_strides, a_ndim)];"
    src_rc = "uint i = thread_position_in_grid.x;\nout[i] = a[i];"
    for name, source, rc in (("strided", src, False), ("rowc", src_rc, True)):
        p = path_in(tmp_path, name + ".mlxfn")
        k = mx.fast.metal_kernel(name=name, input_names=["a"], output_names=["out"], source=source,
                                 ensure_row_contiguous=rc)

        def fn(x):
            t = mx.transpose(x)
            return k(inputs=[t], grid=(t.size, 1, 1), threadgroup=(4, 1, 1), output_shapes=[t.shape],
                     output_dtypes=[t.dtype])[0]

        x = mx.arange(12, dtype=mx.float32).reshape(3, 4)
        mx.export_function(p, fn, x)
        got = mx.import_function(p)(x)[0]
        assert got.tolist() == fn(x).tolist() == np.arange(12).reshape(3, 4).T.tolist()


def test_imports_kernel_file_written_by_mlx():
    # written by MLX 0.32.4 (on Linux, which records kernels without running them) for
    # call_two_out(two_out_kernel(), a) with a of shape (2, 4)
    f = mx.import_function(os.path.join(DATA, "mlx_kernel_template.mlxfn"))
    a = mx.array([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    out, flags = f(a)
    want_out, want_flags = call_two_out(two_out_kernel(), a)
    assert out.tolist() == want_out.tolist() == (np.array(a) * 3 + 1).tolist()
    assert flags.tolist() == want_flags.tolist() == [1, 2, 0, 1, 2, 0, 1, 2]


def test_metal_kernel_shapeless_export_cannot_be_called(tmp_path):
    # as MLX: a kernel cannot infer its output shapes, so a shapeless import cannot run it
    p = path_in(tmp_path)
    k = two_out_kernel()
    mx.export_function(p, lambda a: call_two_out(k, a), mx.zeros((2, 4)), shapeless=True)
    f = mx.import_function(p)
    with pytest.raises(ValueError, match="CustomKernel cannot infer output shapes"):
        f(mx.zeros((2, 4)))


def test_metal_kernel_refuses_an_explicit_cpu_stream():
    k = two_out_kernel()
    with pytest.raises(ValueError, match=r"\[metal_kernel\] Only supports the GPU"):
        k(inputs=[mx.zeros((2, 4))], grid=(8, 1, 1), threadgroup=(4, 1, 1), output_shapes=[(2, 4), (8,)],
          output_dtypes=[mx.float32, mx.int32], template=[("T", mx.float32), ("N", 3), ("B", True)],
          stream=mx.cpu)
    # the GPU stream, or none (the GPU's, whatever the default device)
    out = call_two_out(k, mx.zeros((2, 4)))[0]
    with mx.stream(mx.cpu):
        assert call_two_out(k, mx.zeros((2, 4)))[0].tolist() == out.tolist()


def _kernel_record_file(tmp_path):
    p = path_in(tmp_path)
    k = two_out_kernel()
    mx.export_function(p, lambda a: call_two_out(k, a), mx.zeros((2, 4)))
    return open(p, "rb").read()


def test_malformed_kernel_records_raise_value_error(tmp_path):
    data = _kernel_record_file(tmp_path)
    q = path_in(tmp_path, "bad.mlxfn")
    a = mx.arange(8, dtype=mx.float32).reshape(2, 4)

    def call_edited(old, new):
        assert data.count(old) >= 1
        open(q, "wb").write(data.replace(old, new))
        return mx.import_function(q)(a)

    # the kernel name no longer matches its template arguments and types (same length)
    with pytest.raises(ValueError, match="Invalid CustomKernel record"):
        call_edited(b'host_name("custom_kernel_tmpl_two__float_3_1', b'host_name("custom_kernel_tmpl_two__float_4_1')
    with pytest.raises(ValueError, match="Invalid CustomKernel record"):
        call_edited(b"[[kernel]] void", b"[[kernel]] vo1d")
    with pytest.raises(ValueError, match="Invalid CustomKernel record"):
        call_edited(b"device float* out", b"device float*_out")
    with pytest.raises(ValueError, match="Invalid CustomKernel record"):
        call_edited(b"typename T, int N", b"typename T, lng N")
    # a template value of another type than its parameter's
    with pytest.raises(ValueError, match="Invalid CustomKernel record"):
        call_edited(b"<float, 3, 1>) custom", b"<float, 3, 7>) custom")
    # the shape infos: input `a` passes a_shape, which the source does not use
    i = data.index(b"<float, 3, 1>;\n") + len(b"<float, 3, 1>;\n") + 24
    assert data[i:i + 8] == (1).to_bytes(8, "little") and data[i + 8:i + 11] == b"\0\0\0"
    bad = data[:i + 8] + b"\1" + data[i + 9:]
    open(q, "wb").write(bad)
    with pytest.raises(ValueError, match="Invalid CustomKernel record"):
        mx.import_function(q)(a)
    # is_precompiled (a CUDA kernel): mkpy runs Metal kernels only
    j = i + 8 + 3 + 1 + 5 + 8
    assert data[j] == 0
    open(q, "wb").write(data[:j] + b"\1" + data[j + 1:])
    with pytest.raises(ValueError, match="precompiled"):
        mx.import_function(q)(a)
    # an unknown scalar argument tag
    bad = data[:j - 8] + (1).to_bytes(8, "little") + (9).to_bytes(4, "little") + data[j:]
    open(q, "wb").write(bad)
    with pytest.raises(ValueError, match="scalar argument"):
        mx.import_function(q)


def test_malformed_kernel_files_never_crash(tmp_path):
    data = _kernel_record_file(tmp_path)
    q = path_in(tmp_path, "bad.mlxfn")
    a = mx.arange(8, dtype=mx.float32).reshape(2, 4)
    for n in range(len(data)):
        open(q, "wb").write(data[:n])
        with pytest.raises(ValueError):
            mx.import_function(q)
    # byte flips: a clear error, or a graph that builds (not run: a flipped grid could be huge)
    rng = random.Random(11)
    for _ in range(300):
        b = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        open(q, "wb").write(bytes(b))
        try:
            mx.import_function(q)(a)
        except (ValueError, RuntimeError, TypeError, IndexError, MemoryError, OverflowError):
            pass


# ------------------------------------------------------------------ Gather, Pad

GATHERS = {
    "first_axis": lambda x, i, j: x[i],
    "middle_axis": lambda x, i, j: x[:, i],
    "arrays_around_a_slice": lambda x, i, j: x[i, 1:3, j],
    "reversed_step": lambda x, i, j: x[i, ::-2, j],
    "int_then_array": lambda x, i, j: x[1, i, 2:],
    "take_axis": lambda x, i, j: mx.take(x, j, axis=2),
    "take_flat": lambda x, i, j: mx.take(x, i),
    "two_trailing": lambda x, i, j: x[:, i, j],
}


@pytest.mark.parametrize("name", sorted(GATHERS))
def test_gather_round_trip(tmp_path, name):
    fn = GATHERS[name]
    p = path_in(tmp_path)
    x = mx.arange(60, dtype=mx.float32).reshape(3, 4, 5)
    i, j = mx.array([[0, 2], [1, -1]]), mx.array([4, 0])
    mx.export_function(p, fn, x, i, j)
    assert b"Gather" in open(p, "rb").read()
    f = mx.import_function(p)
    for i2, j2 in ((i, j), (mx.array([[2, 2], [0, -3]]), mx.array([-1, 3]))):
        got, want = f(x, i2, j2)[0], fn(x, i2, j2)
        assert got.shape == want.shape and got.tolist() == want.tolist()


def test_pad_round_trip(tmp_path):
    p = path_in(tmp_path)

    def fn(x, v):
        return mx.pad(x, [(1, 0), (0, 2)], constant_values=v) * 2, mx.pad(x, 1)

    x = mx.arange(6, dtype=mx.float32).reshape(2, 3)
    mx.export_function(p, fn, x, mx.array(3.5))
    assert b"Pad" in open(p, "rb").read()
    f = mx.import_function(p)
    for v in (mx.array(3.5), mx.array(-1.0)):
        for got, want in zip(f(x, v), fn(x, v)):
            assert got.tolist() == want.tolist()
    # the other modes are other ops in MLX: not mapped yet
    with pytest.raises(NotImplementedError):
        mx.export_function(path_in(tmp_path, "edge.mlxfn"), lambda x: mx.pad(x, 1, mode="edge"), x)


def test_imports_gather_and_pad_written_by_mlx():
    # written by MLX 0.32.4: fn(x, i, j) = (x[i, 1:3, j], take(x, j, axis=2),
    # pad(x, [(1, 0), (0, 2), (1, 1)], constant_values=3.5)), x of shape (3, 4, 5),
    # i of shape (2, 2), j of shape (2,)
    f = mx.import_function(os.path.join(DATA, "mlx_gather_pad.mlxfn"))
    x = mx.arange(60, dtype=mx.float32).reshape(3, 4, 5) * 0.5
    i, j = mx.array([[2, 0], [-1, 1]]), mx.array([1, -2])
    a, b, c = f(x, i, j)
    assert a.tolist() == x[i, 1:3, j].tolist()
    assert b.tolist() == mx.take(x, j, axis=2).tolist()
    assert c.tolist() == mx.pad(x, [(1, 0), (0, 2), (1, 1)], constant_values=3.5).tolist()


# ------------------------------------------------------------------ fast ops

FAST = {
    "rms_norm": lambda x, w, b, o: mx.fast.rms_norm(x, w, 1e-5),
    "rms_norm_no_weight": lambda x, w, b, o: mx.fast.rms_norm(x, None, 1e-4),
    "layer_norm": lambda x, w, b, o: mx.fast.layer_norm(x, w, b, 1e-5),
    "layer_norm_bias_only": lambda x, w, b, o: mx.fast.layer_norm(x, None, b, 1e-5),
    "layer_norm_plain": lambda x, w, b, o: mx.fast.layer_norm(x.astype(mx.float32), None, None, 1e-5),
    "rope": lambda x, w, b, o: mx.fast.rope(x, 8, traditional=False, base=10000.0, scale=0.5, offset=o),
    "rope_freqs": lambda x, w, b, o: mx.fast.rope(x, 4, traditional=True, base=None, scale=1.0, offset=2,
                                                  freqs=mx.abs(w[:2]) + 1),
}


@pytest.mark.parametrize("name", sorted(FAST))
def test_fast_ops_round_trip(tmp_path, name):
    # written as MLX's fast primitives (RMSNorm, LayerNorm, RoPE), as MLX does on a GPU
    fn = FAST[name]
    p = path_in(tmp_path)
    mx.random.seed(3)
    x = mx.random.normal((2, 3, 4, 8)).astype(mx.float16)
    w, b = mx.random.normal((8,)), mx.random.normal((8,))
    off = mx.array(3, dtype=mx.uint32)
    mx.export_function(p, fn, x, w, b, off)
    prim = b"RoPE" if name.startswith("rope") else b"RMSNorm" if name.startswith("rms") else b"LayerNorm"
    assert prim in open(p, "rb").read()
    f = mx.import_function(p)
    for x2 in (x, x * 3 - 1):
        got, want = f(x2, w, b, off)[0], fn(x2, w, b, off)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.array(got), np.array(want))


def test_fast_op_records_have_mlx_state_layout(tmp_path):
    # RMSNorm's state is (fallback, eps) and RoPE's (fallback, dims, traditional, base, scale,
    # forward); the fallback is not written
    import struct

    p = path_in(tmp_path)
    x = mx.ones((1, 2, 8))
    mx.export_function(p, lambda x: mx.fast.rope(mx.fast.rms_norm(x, None, 0.25), 4, traditional=True,
                                                 base=100.0, scale=2.0, offset=1), x)
    data = open(p, "rb").read()
    i = data.index(b"RMSNorm") + 7
    assert struct.unpack_from("<fQ", data, i) == (0.25, 0)
    i = data.index(b"RoPE") + 4
    assert struct.unpack_from("<i?ff?Q", data, i) == (4, True, 100.0, 2.0, True, 0)
    # on the GPU stream (MLX uses the fallback's ops on a CPU stream)
    assert struct.unpack_from("<iii", data, data.index(b"RoPE") - 8 - 12)[1] == 1
    out = mx.import_function(p)(x)[0]
    assert out.tolist() == mx.fast.rope(mx.fast.rms_norm(x, None, 0.25), 4, traditional=True, base=100.0,
                                        scale=2.0, offset=1).tolist()
