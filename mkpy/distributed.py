"""mkpy.distributed: communication between processes, as mlx.core.distributed.

Re-exports the C extension's functions (mkpy._core.distributed). With no
multi-process backend configured, ``init()`` returns a singleton group (rank 0,
size 1): the collectives return their input and ``send`` / ``recv`` raise.
"""
from ._core import distributed as _impl

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})
__all__ = [k for k in vars(_impl) if not k.startswith("_")]
