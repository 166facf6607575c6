"""mkpy.fft, as mlx.core.fft: discrete Fourier transforms (see mkpy._core.fft)."""
from ._core import fft as _impl

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})
__all__ = [k for k in vars(_impl) if not k.startswith("_")]
