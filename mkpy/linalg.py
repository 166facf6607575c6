"""mkpy.linalg: re-exports the C extension's linear algebra functions (see mkpy._core.linalg)."""
from ._core import linalg as _impl

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})
__all__ = [k for k in vars(_impl) if not k.startswith("_")]
