"""The generated Metal source and kernel name are byte for byte MLX's.

The expected texts follow MLX's write_signature / write_template / metal_kernel code
(mlx/backend/metal custom kernels): header, template line, signature lines in buffer
order, the body, "}" and the explicit instantiation. verbose=True prints them to
sys.stdout at call time, framed as MLX frames them. Calling never compiles.
"""
import mkpy as mx


def generated(capsys, kernel, **kwargs):
    kwargs.setdefault("grid", (1, 1, 1))
    kwargs.setdefault("threadgroup", (1, 1, 1))
    kernel(verbose=True, **kwargs)
    return capsys.readouterr().out


def test_template_example_from_the_issue(capsys):
    source = """
    uint elem = thread_position_in_grid.x;
    T tmp = inp[elem];
    out[elem] = metal::exp(tmp);
"""
    k = mx.fast.metal_kernel(name="myexp", input_names=["inp"], output_names=["out"], source=source)
    a = mx.zeros((4, 16), dtype=mx.float16) if hasattr(mx, "zeros") else mx.array([[0.0] * 16] * 4, mx.float16)
    out = generated(capsys, k, inputs=[a], template=[("T", mx.float32)], output_shapes=[(4, 16)],
                    output_dtypes=[mx.float16])
    name = "custom_kernel_myexp__float_float16_t_float16_t"
    expected = (
        "Generated source code for `myexp`:\n```\n"
        "template <typename T>\n"
        f"[[kernel]] void {name}(\n"
        "  const device float16_t* inp [[buffer(0)]],\n"
        "  device float16_t* out [[buffer(1)]],\n"
        "  uint3 thread_position_in_grid [[thread_position_in_grid]]) {\n"
        f"{source}\n"
        "}\n\n"
        f'template [[host_name("{name}")]] [[kernel]] decltype({name}<float>) {name}<float>;\n'
        "\n```\n"
    )
    assert out == expected


def test_scalar_small_inputs_shape_strides_ndim_and_header(capsys):
    header = "#include <metal_stdlib>\nusing namespace metal;\n"
    source = "uint i = thread_position_in_grid.x;\nout[i] = x[elem_to_loc(i, x_shape, x_strides, x_ndim)] * s + w[0];"
    k = mx.fast.metal_kernel(name="k", input_names=["x", "s", "w"], output_names=["out"], source=source,
                             header=header)
    x = mx.array([[1.0] * 8] * 2)
    s = mx.array(2.0)
    w = mx.array([1, 2, 3], dtype=mx.int32)
    out = generated(capsys, k, inputs=[x, s, w], output_shapes=[(16,)], output_dtypes=[mx.float32])
    expected = (
        "Generated source code for `k`:\n```\n"
        + header
        + "[[kernel]] void custom_kernel_k_float_floats_int32_tc_float(\n"
        "  const device float* x [[buffer(0)]],\n"
        "  const constant int* x_shape [[buffer(1)]],\n"
        "  const constant int64_t* x_strides [[buffer(2)]],\n"
        "  const constant int& x_ndim [[buffer(3)]],\n"
        "  const constant float& s [[buffer(4)]],\n"
        "  const constant int32_t* w [[buffer(5)]],\n"
        "  device float* out [[buffer(6)]],\n"
        "  uint3 thread_position_in_grid [[thread_position_in_grid]]) {\n"
        + source
        + "\n}\n\n```\n"
    )
    assert out == expected


def test_python_scalar_inputs_and_attribute_order(capsys):
    source = ("out[thread_index_in_threadgroup] = a + threads_per_threadgroup.x + "
              "simdgroup_index_in_threadgroup + dispatch_quadgroups_per_threadgroup + grid_size.x;")
    k = mx.fast.metal_kernel(name="attrs", input_names=["a", "b", "c"], output_names=["out"], source=source)
    out = generated(capsys, k, inputs=[1.5, 3, True], output_shapes=[(4,)], output_dtypes=[mx.int32])
    expected = (
        "Generated source code for `attrs`:\n```\n"
        "[[kernel]] void custom_kernel_attrs_floats_int32_ts_bools_int32_t(\n"
        "  const constant float& a [[buffer(0)]],\n"
        "  const constant int32_t& b [[buffer(1)]],\n"
        "  const constant bool& c [[buffer(2)]],\n"
        "  device int32_t* out [[buffer(3)]],\n"
        "  uint dispatch_quadgroups_per_threadgroup [[dispatch_quadgroups_per_threadgroup]],\n"
        "  uint3 grid_size [[grid_size]],\n"
        # a substring of dispatch_quadgroups_per_threadgroup: MLX's find() matches it too
        "  uint quadgroups_per_threadgroup [[quadgroups_per_threadgroup]],\n"
        "  uint simdgroup_index_in_threadgroup [[simdgroup_index_in_threadgroup]],\n"
        "  uint thread_index_in_threadgroup [[thread_index_in_threadgroup]],\n"
        "  uint3 threads_per_threadgroup [[threads_per_threadgroup]]) {\n"
        + source
        + "\n}\n\n```\n"
    )
    assert out == expected


def test_atomic_outputs_and_mixed_template_values(capsys):
    source = "atomic_fetch_add_explicit(&out[0], inp[0], memory_order_relaxed);"
    k = mx.fast.metal_kernel(name="acc", input_names=["inp"], output_names=["out", "other"], source=source,
                             atomic_outputs=True)
    inp = mx.array([1.0] * 10)
    out = generated(capsys, k, inputs=[inp], output_shapes=[(1,), (2,)], output_dtypes=[mx.float32, mx.int32],
                    template=[("N", 4), ("B", True), ("C", False), ("T", mx.bfloat16)])
    name = "custom_kernel_acc__4_1_0_bfloat16_t_float_float_int32_t"
    tdef = "<4, 1, 0, bfloat16_t>"
    expected = (
        "Generated source code for `acc`:\n```\n"
        "template <int N, bool B, bool C, typename T>\n"
        f"[[kernel]] void {name}(\n"
        "  const device float* inp [[buffer(0)]],\n"
        "  device atomic<float>* out [[buffer(1)]],\n"
        "  device atomic<int32_t>* other [[buffer(2)]]) {\n"
        + source
        + "\n}\n\n"
        f'template [[host_name("{name}")]] [[kernel]] decltype({name}{tdef}) {name}{tdef};\n'
        "\n```\n"
    )
    assert out == expected


def test_mlx_buffer_index_quirk_is_kept(capsys):
    # MLX decides between ",\n" and ") {\n" after an output by comparing the buffer
    # index (which counts shape buffers) with len(inputs) + len(outputs) - 1.
    source = "o1[0] = x_shape[0]; o2[0] = 0;"
    k = mx.fast.metal_kernel(name="q", input_names=["x"], output_names=["o1", "o2"], source=source)
    x = mx.array([1.0] * 8)
    out = generated(capsys, k, inputs=[x], output_shapes=[(1,), (1,)], output_dtypes=[mx.float32, mx.float32])
    expected = (
        "Generated source code for `q`:\n```\n"
        "[[kernel]] void custom_kernel_q_float_float_float(\n"
        "  const device float* x [[buffer(0)]],\n"
        "  const constant int* x_shape [[buffer(1)]],\n"
        "  device float* o1 [[buffer(2)]]) {\n"
        "  device float* o2 [[buffer(3)]]) {\n"
        + source
        + "\n}\n\n```\n"
    )
    assert out == expected


def test_every_type_name():
    names = {mx.float32: "float", mx.float16: "float16_t", mx.bfloat16: "bfloat16_t", mx.int8: "int8_t",
             mx.int16: "int16_t", mx.int32: "int32_t", mx.int64: "int64_t", mx.uint8: "uint8_t",
             mx.uint16: "uint16_t", mx.uint32: "uint32_t", mx.uint64: "uint64_t", mx.bool_: "bool",
             mx.complex64: "complex64_t"}
    import io
    import contextlib
    k = mx.fast.metal_kernel(name="t", input_names=[], output_names=["out"], source="")
    for dt, msl in names.items():
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            k(inputs=[], output_shapes=[(1,)], output_dtypes=[dt], grid=(1, 1, 1), threadgroup=(1, 1, 1),
              verbose=True)
        assert f"[[kernel]] void custom_kernel_t_{msl}(\n  device {msl}* out [[buffer(0)]]) {{\n" in buf.getvalue()


def test_calling_never_compiles():
    before = mx.metal.kernel_cache_info()
    k = mx.fast.metal_kernel(name="lazy_only", input_names=[], output_names=["out"],
                             source="this is not Metal at all")
    outs = k(inputs=[], output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(1, 1, 1), threadgroup=(1, 1, 1))
    assert isinstance(outs, list) and len(outs) == 1
    assert outs[0].shape == (1,) and outs[0].dtype == mx.float32
    assert mx.metal.kernel_cache_info()["compiles"] == before["compiles"]
