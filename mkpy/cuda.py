"""mkpy.cuda, as mlx.core.cuda: whether GPU streams run on an NVIDIA GPU; and Metal kernels in real
MLX on its CUDA back-end (``metal_kernel``, ``patch_mlx``; docs/kernels.md, "Metal kernels in real
MLX on NVIDIA GPUs")."""
import sys as _sys
import threading as _threading

from . import _core
from ._core import cuda as _impl

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})
__all__ = [k for k in vars(_impl) if not k.startswith("_")] + ["metal_kernel", "patch_mlx"]

_CACHE_MAX = 256  # cuda_kernel objects kept per kernel, one per instantiation (dtypes, template)


def _mlx():
    """Real MLX's mlx.core (not mkpy standing in for it), with mx.fast.cuda_kernel."""
    try:
        import mlx.core as m
    except ImportError as e:
        raise ImportError("mkpy.cuda.metal_kernel runs Metal kernels in real MLX on its CUDA back-end, "
                          "which is not installed: pip install \"mlx[cuda13]\" (or mlx[cuda12]).") from e
    if m is _sys.modules.get("mkpy") or not hasattr(getattr(m, "fast", None), "cuda_kernel"):
        raise RuntimeError("mkpy.cuda.metal_kernel needs real MLX's mlx.core (with mx.fast.cuda_kernel); here "
                           "mlx.core is mkpy's stand-in (mkpy.as_mlx), whose own mx.fast.metal_kernel runs the "
                           "kernels already.")
    return m


def _dtype(d):
    """mkpy's Dtype of the same name as an MLX Dtype (anything else as it is, for mkpy to refuse)."""
    name = type(d).__name__ == "Dtype" and str(d).rpartition(".")[2]  # "mlx.core.float32"
    name = "bool_" if name == "bool" else name
    return getattr(_core, name) if name and isinstance(getattr(_core, name, None), _core.Dtype) else d


class _MetalKernel:
    """A Metal kernel that real MLX runs on its CUDA back-end (made by mkpy.cuda.metal_kernel).

    Called as MLX's metal_kernel objects are. mkpy checks the call as a Mac would (Metal-only
    constructs, launch rules; errors raise at the call), translates the generated Metal source to
    CUDA C++ once per instantiation (input and output dtypes, template arguments) and hands it to
    ``mlx.core.fast.cuda_kernel``; MLX compiles it with NVRTC and launches it on its stream."""

    __slots__ = ("_kernel", "_name", "_ensure_row_contiguous", "_cuda", "_lock")

    def __init__(self, kernel):
        """Wraps a kernel of mkpy's mx.fast.metal_kernel."""
        spec = kernel._spec()
        self._kernel = kernel
        self._name = spec["name"]
        self._ensure_row_contiguous = spec["ensure_row_contiguous"]
        self._cuda = {}
        self._lock = _threading.Lock()

    def __repr__(self):
        return f"<metal_kernel {self._name} (MLX CUDA)>"

    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None,
                 init_value=None, verbose=False, stream=None):
        m = _mlx()
        ins = [x if isinstance(x, m.array) else m.array(x) for x in inputs]
        descs = [(_dtype(x.dtype), tuple(x.shape)) for x in ins]
        odts = [_dtype(d) for d in output_dtypes] if isinstance(output_dtypes, (list, tuple)) else output_dtypes
        if isinstance(template, (list, tuple)):
            template = [(t[0], _dtype(t[1])) if isinstance(t, tuple) and len(t) == 2 else t for t in template]
        args = (descs, output_shapes, odts, grid, threadgroup, template)
        body, _, in_names, out_names, grid, threadgroup, _ = self._kernel._mlx_cuda(*args, verbose, False)
        kernel = self._cuda.get(body)
        if kernel is None:
            _, header, _, _, _, _, name = self._kernel._mlx_cuda(*args, False, True)
            kernel = m.fast.cuda_kernel(name=name, input_names=in_names, output_names=out_names,
                                        source=body, header=header,
                                        ensure_row_contiguous=self._ensure_row_contiguous)
            with self._lock:
                if len(self._cuda) >= _CACHE_MAX:
                    self._cuda.pop(next(iter(self._cuda)))
                self._cuda[body] = kernel
        return kernel(inputs=ins + [m.array(grid, dtype=m.uint32)], output_shapes=output_shapes,
                      output_dtypes=output_dtypes, grid=grid, threadgroup=threadgroup, init_value=init_value,
                      verbose=verbose, stream=stream)


def metal_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True,
                 atomic_outputs=False, compile_options=None):
    """A Metal kernel for real MLX on its CUDA back-end, with mx.fast.metal_kernel's arguments.

    The returned kernel is called as MLX's (inputs=, output_shapes=, output_dtypes=, grid=,
    threadgroup=, template=, init_value=, verbose=, stream=) with real ``mlx.core`` arrays and
    returns real ``mlx.core`` arrays: mkpy generates the Metal source as MLX does, checks it as a
    Mac would, translates it to CUDA C++ with its runtime header, and MLX runs it through
    ``mx.fast.cuda_kernel`` (NVRTC; a block per threadgroup). Metal's thread attributes, SIMD-group
    functions, threadgroup memory and atomics keep their meaning. compile_options as
    mx.fast.metal_kernel's; the "fast" math mode compiles as "relaxed" (MLX's NVRTC flags are its
    own). Kernels that print (os_log) raise: use mkpy itself to debug them."""
    kernel = _core.fast.metal_kernel(name, input_names, output_names, source, header, ensure_row_contiguous,
                                     atomic_outputs, compile_options)
    return _MetalKernel(kernel)


def patch_mlx():
    """Install mkpy.cuda.metal_kernel as mlx.core.fast.metal_kernel, so that a project's Metal kernels
    run unchanged on MLX's CUDA back-end. Returns the function it replaced (to put back)."""
    m = _mlx()
    if not m.cuda.is_available():
        raise RuntimeError("mkpy.cuda.patch_mlx: mlx.core.cuda.is_available() is False (MLX without its CUDA "
                           "back-end, or no NVIDIA GPU), so MLX cannot run the translated kernels.")
    old = m.fast.metal_kernel
    m.fast.metal_kernel = metal_kernel
    return old
