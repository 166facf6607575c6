"""mx.fast.cuda_kernel on the GPU (issue #24): MLX's python/tests/test_fast.py custom-kernel cases in
their CUDA form (basic, args, strides, helper, attributes, same name with another source), and
init_value, two-dimensional launches with partial blocks, dynamic shared memory, 0-d inputs and
compile errors, against values computed with NumPy. Skipped without a GPU unless MKPY_REQUIRE_GPU=1.
Also runs under scripts/fakecuda (its README), which runs every thread of a launch in turn: the test
that needs threads of a block to meet at a barrier is skipped there."""
import os

import numpy as np
import pytest

import mkpy as mx

if not mx.cuda.is_available():
    if os.environ.get("MKPY_REQUIRE_GPU") == "1":
        raise RuntimeError("MKPY_REQUIRE_GPU=1 but mx.cuda.is_available() is False")
    pytest.skip("no NVIDIA GPU (mx.cuda.is_available() is False)", allow_module_level=True)

FAKE = "fakecuda" in os.environ.get("MKPY_LIBCUDA", "")
ELEM = "auto elem = cooperative_groups::this_grid().thread_rank();\n"


def kernel(name, ins, outs, source, **kw):
    return mx.fast.cuda_kernel(name=name, input_names=ins, output_names=outs, source=source, **kw)


def test_basic():
    a = mx.random.normal(shape=(2, 2), key=mx.random.key(7))
    k = kernel("basic", ["a"], ["out1"], ELEM + "out1[elem] = a[elem];")
    out = k(inputs=[a], grid=(4, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2, 2)], output_dtypes=[mx.float32],
            stream=mx.gpu)
    assert np.array_equal(np.array(out[0]), np.array(a))


def test_args_scalars_templates_and_two_outputs():
    a = mx.random.normal(shape=(3, 6), key=mx.random.key(1))
    c = mx.random.normal(shape=(2, 2), key=mx.random.key(2)).astype(mx.bfloat16)
    src = (ELEM + "T tmp = a[0];\nif (e) {\n  out1[elem] = a[1] + b[2] + static_cast<float>(c[3]) + d[0] + f;\n"
           "} else {\n  out1[elem] = 1;\n}\nout2[elem] = a[1] + b[2] + static_cast<float>(c[1]) - d[0];")
    k = kernel("arg_test", ["a", "b", "c", "d"], ["out1", "out2"], src)
    o1, o2 = k(inputs=[a, mx.array([3, 4, 5]), c, 7.3], template=[("e", True), ("f", 3), ("T", mx.float16)],
               grid=(6, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(3, 2), (3, 2)],
               output_dtypes=[mx.float32, mx.int32], stream=mx.gpu)
    an, cn = np.array(a).ravel(), np.array(c.astype(mx.float32)).ravel()
    want1 = np.float32(an[1]) + np.float32(5) + cn[3] + np.float32(7.3) + np.float32(3)
    want2 = np.int32(np.float32(an[1]) + np.float32(5) + cn[1] - np.float32(7.3))
    assert np.allclose(np.array(o1), np.full((3, 2), want1), rtol=1e-6)
    assert np.array_equal(np.array(o2), np.full((3, 2), want2, dtype=np.int32))


@pytest.mark.parametrize("contig", [True, False])
def test_strides(contig):
    a = mx.random.normal(shape=(3, 6), key=mx.random.key(3))
    a = mx.tile(a[::2], [4, 1])  # not row-contiguous
    src = (ELEM + "T tmp = inp[elem];\nout[elem] = exp(tmp) * WARP_SIZE;" if contig else
           ELEM + "auto loc = elem_to_loc(elem, inp_shape.data(), inp_strides.data(), inp_ndim);\n"
           "T tmp = inp[loc];\nout[elem] = exp(tmp) * WARP_SIZE;")
    k = kernel("myexp" + str(contig), ["inp"], ["out"], src, ensure_row_contiguous=contig)
    out = k(inputs=[a], template=[("T", mx.float32)], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),
            output_shapes=[a.shape], output_dtypes=[a.dtype], stream=mx.gpu)[0]
    assert np.allclose(np.array(out), np.exp(np.array(a)) * 32, rtol=1e-5)


def test_strides_of_a_transposed_view():
    a = mx.arange(12, dtype=mx.float32).reshape(3, 4).T  # strides (1, 4)
    src = ELEM + "out[elem] = inp[elem_to_loc(elem, inp_shape.data(), inp_strides.data(), inp_ndim)];"
    k = kernel("transposed", ["inp"], ["out"], src, ensure_row_contiguous=False)
    out = k(inputs=[a], grid=(12, 1, 1), threadgroup=(5, 1, 1), output_shapes=[(4, 3)], output_dtypes=[mx.float32])
    assert np.array_equal(np.array(out[0]), np.arange(12, dtype=np.float32).reshape(3, 4).T)


def test_helper_header():
    a = mx.random.normal(shape=(2, 2), key=mx.random.key(4))
    header = "template <typename T>\n__device__ T do_exp(T x) {\n  return exp(x);\n}\n"
    k = mx.fast.cuda_kernel(name="helper", input_names=["a"], output_names=["out1"], header=header,
                            source=ELEM + "out1[elem] = do_exp(a[elem]);")
    out = k(inputs=[a], grid=(4, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(2, 2)], output_dtypes=[mx.float32],
            stream=mx.gpu)
    assert np.allclose(np.array(out[0]), np.exp(np.array(a)), rtol=1e-6)


def test_attributes():
    k = kernel("test_fun", ["a"], ["out"], "out[0] = blockDim.x;")
    out = k(inputs=[mx.zeros((1, 1))], grid=(2, 1, 1), threadgroup=(2, 1, 1), output_shapes=[(1, 1)],
            output_dtypes=[mx.uint32], stream=mx.gpu)[0]
    assert out.item() == 2


def test_same_name_different_source_in_one_eval():
    a = mx.arange(32, dtype=mx.float32)

    def call(source):
        k = kernel("dup_name", ["inp"], ["out"], source)
        return k(inputs=[a], grid=(a.size, 1, 1), threadgroup=(a.size, 1, 1), output_shapes=[a.shape],
                 output_dtypes=[a.dtype], stream=mx.gpu)[0]

    out_a = call(ELEM + "out[e] = inp[e] * 2.0f;".replace("[e]", "[elem]"))
    out_b = call(ELEM + "out[elem] = inp[elem] + 100.0f;")
    mx.eval(out_a, out_b)
    assert np.array_equal(np.array(out_a), np.arange(32) * 2.0)
    assert np.array_equal(np.array(out_b), np.arange(32) + 100.0)


@pytest.mark.parametrize("dtype", ["float32", "int32", "float16", "int64"])
def test_init_value(dtype):
    k = kernel("first_only", ["a"], ["out"], "if (threadIdx.x == 0 && blockIdx.x == 0) out[0] = a[0];")
    out = k(inputs=[mx.array([5], dtype=getattr(mx, dtype))], grid=(3, 1, 1), threadgroup=(3, 1, 1),
            output_shapes=[(2, 3)], output_dtypes=[getattr(mx, dtype)], init_value=-2.5)[0]
    want = np.full(6, np.float32(-2.5)).astype(dtype)
    want[0] = 5
    assert np.array_equal(np.array(out).ravel(), want)


def test_two_dimensional_launch_with_partial_blocks():
    # MLX's launch: blocks of min(threadgroup, grid), ceil(grid / threadgroup) of them; the kernel
    # bounds-checks the threads past the grid
    src = ("int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;\n"
           "if (x < W && y < H) out[y * W + x] = x + 100 * y + 10000 * (blockDim.x + 10 * blockDim.y);")
    k = kernel("grid2d", [], ["out"], src)
    out = k(inputs=[], template=[("W", 5), ("H", 3)], grid=(5, 3, 1), threadgroup=(2, 4, 1), output_shapes=[(3, 5)],
            output_dtypes=[mx.int32], init_value=-1)[0]
    y, x = np.mgrid[0:3, 0:5]
    assert np.array_equal(np.array(out), x + 100 * y + 10000 * (2 + 10 * 3))


@pytest.mark.skipif(FAKE, reason="fakecuda runs the threads of a block one after another")
@pytest.mark.parametrize("smem", [1024, 64 * 1024])
def test_dynamic_shared_memory(smem):
    src = ("extern __shared__ float buf[];\nint n = blockDim.x;\nbuf[threadIdx.x] = a[blockIdx.x * n + threadIdx.x];\n"
           "__syncthreads();\nout[blockIdx.x * n + threadIdx.x] = buf[n - 1 - threadIdx.x];")
    k = kernel("reverse_blocks", ["a"], ["out"], src, shared_memory=smem)
    a = mx.arange(256, dtype=mx.float32)
    out = k(inputs=[a], grid=(256, 1, 1), threadgroup=(64, 1, 1), output_shapes=[(256,)],
            output_dtypes=[mx.float32])[0]
    assert np.array_equal(np.array(out), np.arange(256, dtype=np.float32).reshape(4, 64)[:, ::-1].ravel())


def test_compile_error_at_eval():
    k = kernel("broken", ["a"], ["o"], "o[0] = a[0] + not_declared;")
    out = k(inputs=[mx.zeros((2,))], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
            output_dtypes=[mx.float32])[0]
    with pytest.raises(RuntimeError, match=r"^Failed to compile kernel: .*not_declared"):
        mx.eval(out)


def test_cpu_stream_raises():
    k = kernel("cpu", ["a"], ["o"], "o[0] = a[0];")
    with pytest.raises(ValueError, match=r"^\[custom_kernel\] Only supports the GPU\.$"):
        k(inputs=[mx.zeros((2,))], grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
          output_dtypes=[mx.float32], stream=mx.cpu)
