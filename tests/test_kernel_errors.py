"""Kernel errors: MLX's call-time checks, and deferred errors that are clearer than Metal's."""
import os
import subprocess
import sys

import pytest

import mkpy as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPY = "out[thread_position_in_grid.x] = inp[thread_position_in_grid.x];"


def copy_kernel(name="copy"):
    return mx.fast.metal_kernel(name=name, input_names=["inp"], output_names=["out"], source=COPY)


def test_no_outputs():
    with pytest.raises(ValueError, match=r"\[metal_kernel\] Must specify at least one output\."):
        mx.fast.metal_kernel(name="k", input_names=["a"], output_names=[], source="")


@pytest.mark.parametrize("opts,ok", [({"math_mode": "safe"}, True), ({"math_mode": "relaxed"}, True),
                                     ({"math_mode": "fast"}, True), ({"math_mode": "turbo"}, False),
                                     ({"fast_math": True}, False), ({}, True), (None, True)])
def test_compile_options(opts, ok):
    if ok:
        mx.fast.metal_kernel(name="k", input_names=[], output_names=["o"], source="", compile_options=opts)
    else:
        with pytest.raises(ValueError, match=r"\[metal_kernel\]"):
            mx.fast.metal_kernel(name="k", input_names=[], output_names=["o"], source="", compile_options=opts)


def test_list_sizes():
    k = mx.fast.metal_kernel(name="k", input_names=["a", "b"], output_names=["o"], source="")
    a = mx.array([1.0])
    args = dict(output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(1, 1, 1), threadgroup=(1, 1, 1))
    with pytest.raises(ValueError, match=r"^\[metal_kernel\] Expected `inputs` to have size 2 but got size 1\.$"):
        k(inputs=[a], **args)
    with pytest.raises(ValueError, match=r"Expected `output_shapes` to have size 1 but got size 2\."):
        k(inputs=[a, a], output_shapes=[(1,), (1,)], output_dtypes=[mx.float32], grid=(1, 1, 1),
          threadgroup=(1, 1, 1))
    with pytest.raises(ValueError, match=r"Expected `output_dtypes` to have size 1 but got size 0\."):
        k(inputs=[a, a], output_shapes=[(1,)], output_dtypes=[], grid=(1, 1, 1), threadgroup=(1, 1, 1))


def test_bad_template_argument():
    k = copy_kernel()
    # MLX 0.32: ValueError "[metal_kernel] Invalid template argument. ..."
    with pytest.raises(ValueError, match=r"^\[metal_kernel\] Invalid template argument\. Must be"):
        k(inputs=[mx.array([1.0])], output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(1, 1, 1),
          threadgroup=(1, 1, 1), template=[("T", 1.5)])


def test_compile_error_is_deferred_and_points_at_the_users_lines():
    header = "inline float twice(float x) { return 2 * x; }\n"
    source = "uint i = thread_position_in_grid.x;\n" \
             "float v = inp[i];\n" \
             "out[i] = twice(v) + undefined_thing;\n"
    k = mx.fast.metal_kernel(name="broken", input_names=["inp"], output_names=["out"], source=source,
                             header=header)
    out, = k(inputs=[mx.array([1.0, 2.0])], output_shapes=[(2,)], output_dtypes=[mx.float32], grid=(2, 1, 1),
             threadgroup=(2, 1, 1))   # no error yet
    line_of_call = sys._getframe().f_lineno - 2
    with pytest.raises(RuntimeError) as e:
        mx.eval(out)
    msg = str(e.value)
    assert "`broken`" in msg and "custom_kernel_broken_floatc_float" in msg
    assert "<kernel broken source>:3:" in msg           # line 3 of the user's source
    assert "undefined_thing" in msg
    assert "out[i] = twice(v) + undefined_thing;" in msg  # the offending line, quoted
    assert f"{__file__}:{line_of_call}" in msg            # the Python call site
    # the array raises again, and everything else keeps working
    with pytest.raises(RuntimeError):
        out.tolist()
    assert (mx.array([1, 2]) + 1).tolist() == [2, 3]


def test_header_errors_map_to_header_lines():
    header = "inline float f(float x) {\n  return x +;\n}\n"
    k = mx.fast.metal_kernel(name="bad_header", input_names=["inp"], output_names=["out"], source=COPY,
                             header=header)
    out, = k(inputs=[mx.array([1.0])], output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(1, 1, 1),
             threadgroup=(1, 1, 1))
    with pytest.raises(RuntimeError, match=r"<kernel bad_header header>:2:"):
        out.item()


def test_out_shape_hint():
    k = mx.fast.metal_kernel(name="uses_out_shape", input_names=["inp"], output_names=["out"], source="""
        uint i = thread_position_in_grid.x;
        if (i < out_shape[0]) out[i] = inp[i];
    """)
    out, = k(inputs=[mx.array([1.0])], output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(1, 1, 1),
             threadgroup=(1, 1, 1))
    with pytest.raises(RuntimeError) as e:
        mx.eval(out)
    assert "out_shape" in str(e.value)
    assert "only passes `<input>_shape`" in str(e.value)


def test_threadgroup_too_large_never_launches():
    k = copy_kernel("big_tg")
    out, = k(inputs=[mx.array([1.0] * 4096)], output_shapes=[(4096,)], output_dtypes=[mx.float32],
             grid=(4096, 1, 1), threadgroup=(2048, 1, 1))
    with pytest.raises(ValueError) as e:
        mx.eval(out)
    assert str(e.value) == ("Thread group size (2048) is greater than  the maximum allowed threads per "
                            "threadgroup (1024).")


@pytest.mark.parametrize("grid,tg", [((0, 1, 1), (1, 1, 1)), ((4, 1, 1), (0, 1, 1)), ((4, -1, 1), (1, 1, 1))])
def test_zero_or_negative_dimensions_never_launch(grid, tg):
    k = copy_kernel("zero_grid")
    out, = k(inputs=[mx.array([1.0] * 4)], output_shapes=[(4,)], output_dtypes=[mx.float32], grid=grid,
             threadgroup=tg)
    with pytest.raises(ValueError, match="must be positive"):
        mx.eval(out)


def _unused_cooperative_refusal():
    k = mx.fast.metal_kernel(name="tg_mem", input_names=["inp"], output_names=["out"], source="""
        threadgroup float tile[32];
        tile[thread_position_in_threadgroup.x] = inp[thread_position_in_grid.x];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        out[thread_position_in_grid.x] = tile[0];
    """)
    out, = k(inputs=[mx.array([1.0] * 32)], output_shapes=[(32,)], output_dtypes=[mx.float32], grid=(32, 1, 1),
             threadgroup=(32, 1, 1))
    with pytest.raises(RuntimeError, match="threadgroup"):
        mx.eval(out)


@pytest.mark.usefixtures("cpu_device")  # the CPU back-end's own behaviour
def test_missing_compiler_names_mkpy_cxx(tmp_path):
    code = (
        "import mkpy as mx\n"
        "k = mx.fast.metal_kernel(name='k', input_names=[], output_names=['o'], source='o[0] = 1;')\n"
        "o, = k(inputs=[], output_shapes=[(1,)], output_dtypes=[mx.float32], grid=(1,1,1), threadgroup=(1,1,1))\n"
        "try:\n"
        "    mx.eval(o)\n"
        "except RuntimeError as e:\n"
        "    print('ERR', e)\n"
        "print((mx.array([1]) + 1).tolist())\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT, MKPY_GPU="cpu", MKPY_CXX=str(tmp_path / "no-such-clang"),
               MKPY_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and "MKPY_CXX" in r.stdout and "clang" in r.stdout
    assert r.stdout.strip().endswith("[2]")
