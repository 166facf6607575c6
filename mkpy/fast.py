"""mkpy.fast: re-exports the C extension's fast functions (see mkpy._core.fast)."""
from ._core import fast as _impl

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})
__all__ = [k for k in vars(_impl) if not k.startswith("_")]
