"""Guide 002 (Production Error Handling for MLX Metal Kernels), "Input Validation".

`validate_inputs` runs as written, with two corrections shown here:
* The 1-D check can never fire: `D = x.shape[-1]` comes first, and for a 0-d array
  `x.shape` is `()`, so a 0-d input raises IndexError ("tuple index out of range") before
  the ValueError the guide intends.
* bfloat16 does not require an M3: MLX's Metal kernels support bfloat16 on every Apple GPU
  (emulated where the hardware lacks it). The check refuses bfloat16 on any device whose name
  lacks "M3"/"M4", including mkpy's CPU back-end and MLX's own CPU device, although a
  bfloat16 kernel runs fine on both of them (shown below).
"""
import sys

import mkpy as mx

results = []


def report(what, ok):
    results.append(ok)
    print(f"{what}: {ok}")


def validate_inputs(x, weight, bias=None):
    D = x.shape[-1]

    # Shape checks
    if x.ndim < 1:
        raise ValueError(f"Input must be at least 1-D, got shape {x.shape}")
    if weight.shape != (D,):
        raise ValueError(f"Weight shape {weight.shape} doesn't match last dim {D}")
    if bias is not None and bias.shape != (D,):
        raise ValueError(f"Bias shape {bias.shape} doesn't match last dim {D}")

    # Empty tensor guard — no kernel launch needed
    if x.size == 0:
        return x

    # dtype validation — bfloat16 requires M3+
    if x.dtype == mx.bfloat16:
        info = mx.device_info()
        device_name = info.get("device_name", "")
        if not any(chip in device_name for chip in ["M3", "M4"]):
            raise ValueError(
                f"bfloat16 not supported on {device_name}; use float16 instead"
            )

    return None  # Proceed to kernel


def raised(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - we want to see which class
        return e
    return None


x = mx.ones((4, 8))
w = mx.ones((8,))
report("valid float32 input proceeds (returns None)", validate_inputs(x, w) is None)
e = raised(validate_inputs, x, mx.ones((7,)))
report("wrong weight shape -> ValueError", isinstance(e, ValueError) and "doesn't match last dim 8" in str(e))
e = raised(validate_inputs, x, w, mx.ones((3,)))
report("wrong bias shape -> ValueError", isinstance(e, ValueError) and "Bias shape" in str(e))
empty = mx.zeros((0, 8))
report("empty input is returned without a launch", validate_inputs(empty, w) is empty)
e = raised(validate_inputs, mx.array(1.0), w)
print("0-d input:", type(e).__name__, e)
report("0-d input raises IndexError at x.shape[-1], not the intended ValueError", isinstance(e, IndexError))
e = raised(validate_inputs, x.astype(mx.bfloat16), w.astype(mx.bfloat16))
print("bfloat16:", type(e).__name__, e)
report("the guide's own check refuses bfloat16 here", isinstance(e, ValueError))

# ... although bfloat16 kernels run:
kernel = mx.fast.metal_kernel(name="bf16_scale", input_names=["x", "w"], output_names=["out"], source="""
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * w[i % w_shape[0]];
""")
xb = mx.linspace(-2, 2, 32).reshape(4, 8).astype(mx.bfloat16)
wb = mx.linspace(0.5, 1.5, 8).astype(mx.bfloat16)
(out,) = kernel(inputs=[xb, wb], grid=(32, 1, 1), threadgroup=(32, 1, 1),
                output_shapes=[(4, 8)], output_dtypes=[mx.bfloat16])
report("a bfloat16 kernel runs and matches bfloat16 x * w", mx.array_equal(out, xb * wb).item())

ok = all(results)
print("validate_inputs behaves as shown (IndexError for 0-d, bfloat16 check too strict):", ok)
sys.exit(0 if ok else 1)
