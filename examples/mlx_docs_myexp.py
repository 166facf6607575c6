"""The MLX documentation's custom-kernel walkthrough: `myexp` (a simple kernel with a template
argument) and `myexp_strided` (ensure_row_contiguous=False, elem_to_loc on a non-contiguous
input), as written there, checked against mx.exp.
"""
import sys

import mkpy as mx


def exp_elementwise(a: mx.array):
    source = """
        uint elem = thread_position_in_grid.x;
        T tmp = inp[elem];
        out[elem] = metal::exp(tmp);
    """

    kernel = mx.fast.metal_kernel(
        name="myexp",
        input_names=["inp"],
        output_names=["out"],
        source=source,
    )
    outputs = kernel(
        inputs=[a],
        template=[("T", mx.float32)],
        grid=(a.size, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[a.shape],
        output_dtypes=[a.dtype],
        verbose=True,
    )
    return outputs[0]


def exp_elementwise_strided(a: mx.array):
    source = """
        uint elem = thread_position_in_grid.x;
        // Utils from `mlx/backend/metal/kernels/utils.h` are automatically included
        uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);
        T tmp = inp[loc];
        // Output arrays are always row contiguous
        out[elem] = metal::exp(tmp);
    """

    kernel = mx.fast.metal_kernel(
        name="myexp_strided",
        input_names=["inp"],
        output_names=["out"],
        source=source,
        ensure_row_contiguous=False,
    )
    outputs = kernel(
        inputs=[a],
        template=[("T", mx.float32)],
        grid=(a.size, 1, 1),
        threadgroup=(256, 1, 1),
        output_shapes=[a.shape],
        output_dtypes=[a.dtype],
        verbose=True,
    )
    return outputs[0]


a = mx.random.normal(shape=(4, 16)).astype(mx.float16)
b = exp_elementwise(a)
ok1 = mx.allclose(b, mx.exp(a)).item()

a = mx.random.normal(shape=(4, 16)).astype(mx.float16)
a = a[::2]
b = exp_elementwise_strided(a)
ok2 = mx.allclose(b, mx.exp(a)).item()
print("myexp matches mx.exp:", ok1, "| myexp_strided matches mx.exp on a strided view:", ok2)
ok = ok1 and ok2
print("the documentation's myexp and myexp_strided run unchanged:", ok)
sys.exit(0 if ok else 1)
