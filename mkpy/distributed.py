"""mkpy.distributed: communication between processes, as mlx.core.distributed.

Re-exports the C extension's functions (mkpy._core.distributed). Started by
``mpirun`` (or ``python -m mkpy.launch``), ``init()`` returns the MPI world;
otherwise a singleton group (rank 0, size 1), whose collectives return their
input and whose ``send`` / ``recv`` raise. See docs/distributed.md.
"""
import atexit as _atexit
import sys as _sys

from ._core import distributed as _impl

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__") and k != "_finalize"})
__all__ = [k for k in vars(_impl) if not k.startswith("_")]


def _at_exit():
    # An uncaught exception (PyErr_Print sets sys.last_value) skips MPI_Finalize: mpirun then
    # stops the other ranks at once instead of this rank waiting for them in MPI_Finalize.
    _impl._finalize(getattr(_sys, "last_value", None) is not None)


_atexit.register(_at_exit)
