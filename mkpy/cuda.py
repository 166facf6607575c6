"""mkpy.cuda, as mlx.core.cuda: the CUDA back-end, which mkpy does not have."""
from ._core import cuda as _impl

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})
__all__ = [k for k in vars(_impl) if not k.startswith("_")]
