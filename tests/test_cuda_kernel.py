"""mx.fast.cuda_kernel without a GPU (issue #24): MLX's program around the source (the text MLX 0.32's
mlx/backend/cuda/custom_kernel.cpp writes, printed by verbose=True), its argument checks and errors,
and the program compiled by NVRTC for sm_80 and sm_90a as an eval compiles it (the kernel object's
private _compile; mkpy.fast._cuda_kernel makes one where GPU streams have no CUDA back-end, where
mx.fast.cuda_kernel raises as MLX built without CUDA). Runs on the GPU: tests/test_gpu_cuda_kernel.py."""
import glob
import os

import pytest

import mkpy as mx
from conftest import nvrtc_missing

ELEM = "auto elem = cooperative_groups::this_grid().thread_rank();\n"


def call_kw(**kw):
    out = dict(grid=(4, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2, 2)], output_dtypes=[mx.float32])
    out.update(kw)
    return out


def generated(kernel, capsys, **kw):
    kernel(verbose=True, **call_kw(**kw))
    return capsys.readouterr().out


@pytest.mark.skipif(mx.cuda.is_available(), reason="GPU streams have a CUDA back-end here")
def test_without_cuda_the_factory_raises_as_mlx_without_cuda():
    with pytest.raises(RuntimeError, match=r"^\[cuda_kernel\] No CUDA back-end\.$"):
        mx.fast.cuda_kernel(name="k", input_names=["a"], output_names=["o"], source="o[0] = a[0];")


@pytest.mark.skipif(mx.cuda.is_available(), reason="GPU streams have a CUDA back-end here")
def test_without_cuda_the_eval_raises_too():
    k = mx.fast._cuda_kernel(name="k", input_names=["a"], output_names=["o"], source="o[0] = a[0];")
    out = k(inputs=[mx.zeros((4,))], stream=mx.gpu, **call_kw())[0]
    with pytest.raises(RuntimeError, match=r"\[cuda_kernel\] No CUDA back-end\."):
        mx.eval(out)


def test_the_program_is_mlxs(capsys):
    k = mx.fast._cuda_kernel(name="prog", input_names=["a", "b", "s", "xa"], output_names=["o", "p"],
                             header="#define TWO 2\n",
                             source=ELEM + "o[elem] = a[elem] * a_strides[0] + b[b_ndim] + s[0] + xa_shape[1];")
    text = generated(k, capsys, inputs=[mx.zeros((2, 2)), mx.zeros((3,), dtype=mx.int32), 2.5,
                                        mx.zeros((1,), dtype=mx.bfloat16)],
                     output_shapes=[(2, 2), (3,)], output_dtypes=[mx.float16, mx.uint8],
                     template=[("T", mx.float32), ("N", -3), ("B", False), ("U", mx.complex64)])
    # a_strides, b_ndim and xa_shape occur in the source (a substring search: "a_shape" in "xa_shape"
    # gives `a` its shape too); `s` is 0-d, so it gets none
    assert text == (
        "Generated source code for `custom_kernel_prog_float_-3_f_complex64_t`:\n```\n"
        "\n#include \"mlx/backend/cuda/device/utils.cuh\"\n\n#include <cooperative_groups.h>\n\n"
        "#define TWO 2\nnamespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
        "__global__ void custom_kernel_prog_float_-3_f_complex64_t(\n"
        "    const float* a,\n"
        "    const __grid_constant__ Shape a_shape,\n"
        "    const __grid_constant__ Strides a_strides,\n"
        "    const int32_t* b,\n"
        "    const __grid_constant__ int b_ndim,\n"
        "    const float* s,\n"
        "    const __nv_bfloat16* xa,\n"
        "    const __grid_constant__ Shape xa_shape,\n"
        "    __half* o,\n"
        "    uint8_t* p) {\n"
        "  using T = float;\n  constexpr int N = -3;\n  constexpr bool B = false;\n"
        "  using U = mlx::core::cu::complex64_t;\n\n"
        + ELEM + "o[elem] = a[elem] * a_strides[0] + b[b_ndim] + s[0] + xa_shape[1];\n}\n\n"
        "} // namespace mlx::core::cu\n\n```\n")


def test_no_template_no_constants(capsys):
    k = mx.fast._cuda_kernel(name="plain", input_names=["a"], output_names=["o"], source="o[0] = a[0];")
    text = generated(k, capsys, inputs=[mx.zeros((4,))], template=[])
    assert "custom_kernel_plain(\n    const float* a,\n    float* o) {\no[0] = a[0];\n}" in text


def test_argument_errors_in_mlxs_words():
    with pytest.raises(ValueError, match=r"^\[custom_kernel\] Must specify at least one output\.$"):
        mx.fast._cuda_kernel(name="k", input_names=["a"], output_names=[], source="")
    with pytest.raises(ValueError, match="shared_memory"):
        mx.fast._cuda_kernel(name="k", input_names=["a"], output_names=["o"], source="", shared_memory=-1)
    with pytest.raises(TypeError, match=r"\[cuda_kernel\] `input_names` must be a list of strings"):
        mx.fast._cuda_kernel(name="k", input_names="a", output_names=["o"], source="")
    k = mx.fast._cuda_kernel(name="k", input_names=["a"], output_names=["o"], source="o[0] = a[0];")
    a = mx.zeros((4,))
    with pytest.raises(ValueError, match=r"^\[custom_kernel\] Expected `inputs` to have size 1 but got size 2\."):
        k(inputs=[a, a], **call_kw())
    with pytest.raises(ValueError, match=r"^\[custom_kernel\] Expected `output_shapes` to have size 1"):
        k(inputs=[a], **call_kw(output_shapes=[(1,), (1,)]))
    with pytest.raises(ValueError, match=r"^\[cuda_kernel\] Invalid template argument\. Must be"):
        k(inputs=[a], template=[("T", 1.5)], **call_kw())
    with pytest.raises(TypeError, match=r"^\[cuda_kernel\] `grid` must be a tuple of 3 ints"):
        k(inputs=[a], **call_kw(grid=(4, 1)))
    with pytest.raises(ValueError, match=r"^\[custom_kernel\] Only supports the GPU\.$"):
        k(inputs=[a], stream=mx.cpu, **call_kw())
    with mx.stream(mx.cpu):  # the default stream too, as MLX
        with pytest.raises(ValueError, match=r"^\[custom_kernel\] Only supports the GPU\.$"):
            k(inputs=[a], **call_kw())
    assert repr(k) == "<cuda_kernel k>" and "CUDA" in mx.fast.cuda_kernel.__doc__
    # metal_kernel's words are unchanged
    m = mx.fast.metal_kernel(name="m", input_names=["a"], output_names=["o"], source="o[0] = a[0];")
    with pytest.raises(ValueError, match=r"^\[metal_kernel\] Expected `inputs` to have size 1"):
        m(inputs=[], **call_kw())


# ------------------------------------------------------------------ NVRTC

@pytest.fixture
def nvrtc():
    why = nvrtc_missing()
    if why:
        pytest.skip(why)
    inc = os.environ.get("MKPY_CUDA_INCLUDE", os.path.join(os.path.dirname(mx.__file__), "_nvrtc/nvidia/cu13/include"))
    if not os.path.exists(os.path.join(inc, "cuda_fp16.h")):
        pytest.skip(f"no CUDA headers in {inc} (make deps unpacks them)")


# the bodies of MLX's python/tests/test_fast.py custom-kernel tests in their CUDA form, in our words
CASES = {
    "basic": (["a"], ["out1"], "", ELEM + "out1[elem] = a[elem];", [mx.zeros((2, 2))], None),
    "args": (["a", "b", "c", "d"], ["out1", "out2"], "",
             ELEM + "T tmp = a[0];\nif (e) { out1[elem] = a[1] + b[2] + static_cast<float>(c[3]) + d[0] + f; }\n"
             "else { out1[elem] = 1; }\nout2[elem] = a[1] + b[2] + static_cast<float>(c[1]) - d[0];",
             [mx.zeros((3, 6)), mx.array([3, 4, 5]), mx.zeros((2, 2), dtype=mx.bfloat16), 7.3],
             [("e", True), ("f", 3), ("T", mx.float16)]),
    "strides": (["inp"], ["out"], "",
                ELEM + "auto loc = elem_to_loc(elem, inp_shape.data(), inp_strides.data(), inp_ndim);\n"
                "T tmp = inp[loc];\nout[elem] = exp(tmp) * WARP_SIZE;", [mx.zeros((3, 6))], [("T", mx.float32)]),
    "helper": (["a"], ["out1"], "template <typename T>\n__device__ T do_exp(T x) { return exp(x); }\n",
               ELEM + "out1[elem] = do_exp(a[elem]);", [mx.zeros((2, 2))], None),
    "attributes": (["a"], ["out"], "", "out[0] = blockDim.x;", [mx.zeros((1, 1))], None),
    "shared": (["a"], ["out"], "",
               "extern __shared__ float buf[];\nbuf[threadIdx.x] = a[threadIdx.x];\n__syncthreads();\n"
               "out[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];", [mx.zeros((8,))], None),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("sm", [80, 90])
def test_mlxs_test_kernels_compile(nvrtc, case, sm):
    ins, outs, header, source, inputs, template = CASES[case]
    k = mx.fast._cuda_kernel(name=case, input_names=ins, output_names=outs, header=header, source=source)
    program, name, lowered, size = k._compile(sm, inputs=inputs, template=template,
                                              **call_kw(output_shapes=[(2, 2)] * len(outs),
                                                        output_dtypes=[mx.float32] * len(outs)))
    assert name.startswith("custom_kernel_" + case) and name in lowered and lowered.startswith("_Z")
    assert size > 0 and program.endswith("} // namespace mlx::core::cu\n")


def test_compile_errors_are_mlxs(nvrtc):
    k = mx.fast._cuda_kernel(name="broken", input_names=["a"], output_names=["o"],
                             source="o[0] = a[0] + not_declared;")
    with pytest.raises(RuntimeError, match=r"(?s)^Failed to compile kernel: custom_kernel_broken_[0-9a-f]{16}\.cu"
                                           r"\(13\): error: identifier \"not_declared\" is undefined.*\.$"):
        k._compile(90, inputs=[mx.zeros((2,))], **call_kw())


def test_same_name_different_source_are_two_programs(nvrtc):
    srcs = [ELEM + "out[elem] = inp[elem] * 2.0f;", ELEM + "out[elem] = inp[elem] + 100.0f;"]
    progs = []
    for s in srcs:
        k = mx.fast._cuda_kernel(name="dup_name", input_names=["inp"], output_names=["out"], source=s)
        progs.append(k._compile(80, inputs=[mx.zeros((32,))], **call_kw(output_shapes=[(32,)])))
    assert progs[0][1] == progs[1][1] == "custom_kernel_dup_name" and progs[0][0] != progs[1][0]
    # each is its own entry of the disk cache (keyed by the whole program)
    cached = [open(p).read() for p in glob.glob(os.path.join(os.environ["MKPY_CACHE_DIR"], "*.cu"))]
    assert all(sum(p[0] == c for c in cached) == 1 for p in progs)
