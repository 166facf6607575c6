"""mx.compile, mx.disable_compile and mx.enable_compile.

MLX's compile traces a function once per input signature and replays the
traced graph afterwards; it also fuses element-wise ops. mkpy traces and
replays the same way (closures and constants are captured at trace time;
_core._trace / _core._replay, csrc/python/py_transforms.c: the replay
re-creates each primitive on the new inputs through its batching rule) but
does not fuse. A graph with a primitive that has no batching rule (random
sampling, Metal kernels) is not replayed: such a function is called again on
each call. With ``inputs``/``outputs`` (captured state) the function is also
called as is.
"""
import functools

from . import _core
from ._core import array

_enabled = True


def _rebuild_tuple(tree, items):
    """A tuple of tree's type: named tuples take fields, other subclasses an iterable."""
    t = type(tree)
    if t is tuple:
        return tuple(items)
    return t(*items) if hasattr(tree, "_fields") else t(items)


def _signature(tree, arrays, key, shapeless):
    if isinstance(tree, array):
        arrays.append(tree)
        key.append(("a", tree.dtype, tree.ndim if shapeless else tuple(tree.shape)))
    elif isinstance(tree, (list, tuple)):
        key.append(("l", len(tree)))
        for t in tree:
            _signature(t, arrays, key, shapeless)
    elif isinstance(tree, dict):
        key.append(("d", len(tree)))
        for k, v in tree.items():
            key.append(("k", k))
            _signature(v, arrays, key, shapeless)
    elif tree is None or isinstance(tree, (bool, int, float, str)):
        key.append(("c", type(tree).__name__, tree))
    else:
        t = type(tree)
        name = t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
        raise ValueError("[compile] Function arguments must be trees of arrays or constants (floats, ints, "
                         f"strings, or None), but received type {name}.")


def _fill(tree, it):
    if isinstance(tree, array):
        return next(it)
    if isinstance(tree, list):
        return [_fill(t, it) for t in tree]
    if isinstance(tree, tuple):
        items = [_fill(t, it) for t in tree]
        return _rebuild_tuple(tree, items)
    if isinstance(tree, dict):
        return {k: _fill(v, it) for k, v in tree.items()}
    return tree


def _leaves(tree, out):
    if isinstance(tree, array):
        out.append(tree)
    elif isinstance(tree, (list, tuple)):
        for t in tree:
            _leaves(t, out)
    elif isinstance(tree, dict):
        for t in tree.values():
            _leaves(t, out)
    return out


def compile(fun=None, inputs=None, outputs=None, shapeless=False):
    """compile(fun, inputs=None, outputs=None, shapeless=False)

    Returns a compiled function which produces the same output as ``fun``:
    ``fun`` is traced once per signature of its arguments (their structure,
    the dtypes and shapes of the arrays, or only their number of dimensions
    with ``shapeless=True``, and the constants) and the graph is replayed on
    later calls. Usable as ``mx.compile(f)`` or as a decorator.
    """
    if fun is None:  # @mx.compile(shapeless=True)
        return lambda f: compile(f, inputs=inputs, outputs=outputs, shapeless=shapeless)
    if not callable(fun):
        raise TypeError("compile() expects a callable")
    cache = {}

    @functools.wraps(fun)
    def compiled(*args, **kwargs):
        arrays, key = [], []
        _signature((args, kwargs), arrays, key, shapeless)
        if not _enabled or inputs is not None or outputs is not None or _core._tracing():
            # under grad/vjp/jvp/vmap (or another compile's trace) the function is
            # called as is and becomes part of the enclosing graph, as MLX
            return fun(*args, **kwargs)
        key = tuple(key)
        entry = cache.get(key)
        if entry is None:
            holder = {}

            def flat_fun(xs):
                a2, k2 = _fill((list(args), kwargs), iter(xs))
                out = fun(*a2, **k2)
                holder["out"] = out
                return _leaves(out, [])

            tracers, outs = _core._trace(flat_fun, arrays)
            # the traced graph stays unevaluated (evaluating it would detach it):
            # every call, this one included, gets a replay
            entry = cache[key] = (tracers, outs, holder["out"])
        tracers, outs, structure = entry
        if structure is None and not outs:
            return fun(*args, **kwargs)
        try:
            new = _core._replay(tracers, outs, arrays)
        except ValueError as e:
            if "[Primitive::vmap] Not implemented" not in str(e):
                raise
            cache[key] = (None, [], None)  # not replayable: call the function from now on
            return fun(*args, **kwargs)
        return _fill(structure, iter(new))

    return compiled


def disable_compile():
    """Globally disable compilation: compiled functions call the function as is."""
    global _enabled
    _enabled = False


def enable_compile():
    """Globally enable compilation (see disable_compile)."""
    global _enabled
    _enabled = True
