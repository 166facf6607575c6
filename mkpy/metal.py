"""mkpy.metal: re-exports the C extension's metal functions (see mkpy._core.metal)."""
from ._core import metal as _impl

globals().update({k: v for k, v in vars(_impl).items() if not k.startswith("__")})
__all__ = [k for k in vars(_impl) if not k.startswith("_")]



class _CheckScope:
    """The context manager of mkpy.metal.check."""

    def __init__(self, enabled):
        self._state = 1 if enabled else 0
        self._old = []

    def __enter__(self):
        self._old.append(_impl._check_scope(self._state))
        return self

    def __exit__(self, *exc):
        _impl._check_scope(self._old.pop())
        return False


def check(enabled=True):
    """check(enabled=True)

    mkpy only: a context manager that turns the kernel checker on (or, with
    ``enabled=False``, off) for the ``metal_kernel`` calls this thread makes
    inside it, whatever ``set_check`` and ``MKPY_CHECK`` say::

        with mx.metal.check():
            out, = kernel(...)
        mx.eval(out)   # RuntimeError listing what the checker found

    The calls are evaluated lazily: the checker runs when they are evaluated,
    inside or outside the block. See docs/kernels.md, "Checker mode".
    """
    return _CheckScope(enabled)


__all__.append("check")
