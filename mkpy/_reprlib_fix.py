"""reprlib (which pytest's assertion rewriting and pdb use) picks its formatter by the class's
``__name__``, so an object of any class named ``array`` is formatted as an ``array.array``
(reading ``.typecode``), which fails (cpython#113570). MLX works around it on import; mkpy does
the equivalent: ``Repr.repr_array`` keeps its behaviour for real ``array.array`` objects and
formats everything else as any other instance (its ``repr()``)."""
import array as _array
import reprlib as _reprlib

_original = _reprlib.Repr.repr_array


def _repr_array(self, x, level):
    if isinstance(x, _array.array):
        return _original(self, x, level)
    return self.repr_instance(x, level)


if not getattr(_reprlib.Repr.repr_array, "_mkpy_fix", False):
    _repr_array._mkpy_fix = True
    _reprlib.Repr.repr_array = _repr_array
