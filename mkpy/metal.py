"""mkpy.metal: re-exports the C extension's metal functions (see mkpy._core.metal)."""
from ._core import metal as _impl

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})
__all__ = [k for k in vars(_impl) if not k.startswith("_")]
