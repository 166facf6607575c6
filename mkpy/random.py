"""mkpy.random: re-exports the C extension's random functions (see mkpy._core.random)."""
from ._core import random as _impl

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})
__all__ = [k for k in vars(_impl) if not k.startswith("_")]


def __getattr__(name):
    # attributes the extension makes on first use (state)
    return getattr(_impl, name)
