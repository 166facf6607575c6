"""mx.grad, mx.value_and_grad, mx.vjp, mx.jvp, mx.vmap, mx.custom_function, mx.checkpoint.

The transformations themselves run in C (csrc/core/transforms.c: the graph
walks; the per-primitive rules beside each evaluator in csrc/core/ops_*.c),
reached through _core._vjp, _core._jvp and _core._vmap, which take and return
flat lists of arrays. This module only maps MLX's Python signatures onto them:
argnums/argnames, the pytrees (nested lists, tuples and dicts) of arguments and
results, and MLX's error messages.
"""
import functools

from . import _core
from ._core import array

__all__ = ["grad", "value_and_grad", "vjp", "jvp", "vmap", "custom_function", "checkpoint"]


# ---------------------------------------------------------------- pytrees

def _visit(tree, strict, out):
    if isinstance(tree, array):
        out.append(tree)
    elif isinstance(tree, (list, tuple)):
        for t in tree:
            _visit(t, strict, out)
    elif isinstance(tree, dict):
        for t in tree.values():
            _visit(t, strict, out)
    elif strict:
        raise ValueError("[tree_flatten] The argument should contain only arrays")


def _flatten(tree, strict=False):
    out = []
    _visit(tree, strict, out)
    return out


def _fill(tree, it):
    """tree with its arrays replaced, in order, by the next items of it."""
    if isinstance(tree, array):
        return next(it)
    if isinstance(tree, list):
        return [_fill(t, it) for t in tree]
    if isinstance(tree, tuple):
        return tuple(_fill(t, it) for t in tree)
    if isinstance(tree, dict):
        return {k: _fill(v, it) for k, v in tree.items()}
    return tree


def _type_name(o):
    t = type(o)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


# ---------------------------------------------------------------- vjp / jvp

def _as_list(out):
    if isinstance(out, array):
        return [out]
    return list(out)


def vjp(fun, primals, cotangents):
    """vjp(fun: Callable, primals: list[array], cotangents: list[array]) -> tuple[list[array], list[array]]

    Compute the vector-Jacobian product: the outputs of ``fun`` at
    ``primals`` and the products of ``cotangents`` with its Jacobian.
    """
    return _core._vjp(lambda xs: _as_list(fun(*xs)), list(primals), list(cotangents))


def jvp(fun, primals, tangents):
    """jvp(fun: Callable, primals: list[array], tangents: list[array]) -> tuple[list[array], list[array]]

    Compute the Jacobian-vector product: the outputs of ``fun`` at
    ``primals`` and the products of its Jacobian with ``tangents``.
    """
    return _core._jvp(lambda xs: _as_list(fun(*xs)), list(primals), list(tangents))


# ---------------------------------------------------------------- grad

def _argnums_argnames(argnums, argnames):
    names = {argnames} if isinstance(argnames, str) else set(argnames)
    if argnums is None:
        return ([0] if not names else []), names
    if isinstance(argnums, int):
        return [argnums], names
    return list(argnums), names


def _value_and_grad(fun, argnums, argnames, tag, scalar_only):
    if not argnums and not argnames:
        raise ValueError(f"{tag} Gradient wrt no argument requested")
    argnums = sorted(argnums)
    if argnums:
        if argnums[0] < 0:
            raise ValueError(f"{tag} Can't compute the gradient of negative argument index {argnums[0]}")
        for i in range(1, len(argnums)):
            if argnums[i] == argnums[i - 1]:
                raise ValueError(f"{tag} Duplicate argument index {argnums[0]} is not allowed.")

    def wrapped(*args, **kwargs):
        if argnums and argnums[-1] >= len(args):
            raise ValueError(
                f"{tag} Can't compute the gradient of argument index {argnums[-1]} because the function "
                f"is called with only {len(args)} positional arguments.")
        for k in argnames:
            if k not in kwargs:
                keys = "".join(f"{key}," for key in kwargs)
                raise ValueError(
                    f"{tag} Can't compute the gradient of keyword argument '{k}' because the function is "
                    f"called with the following keyword arguments {{{keys}}}")
        arrays, grad_index, counts = [], [], [0]
        for i, a in enumerate(args):
            need = i in argnums
            pre = len(arrays)
            _visit(a, need, arrays)
            if need:
                grad_index.extend(range(pre, len(arrays)))
                counts.append(len(arrays) - pre)
        kw_order = []
        for k, v in kwargs.items():
            need = k in argnames
            pre = len(arrays)
            _visit(v, need, arrays)
            if need:
                grad_index.extend(range(pre, len(arrays)))
                counts.append(len(arrays) - pre)
                kw_order.append(k)
        holder = {}

        def flat_fun(xs):
            it = iter(xs)
            a2 = _fill(list(args), it)
            k2 = _fill(dict(kwargs), it)
            out = fun(*a2, **k2)
            holder["out"] = out
            if not isinstance(out, array):
                if scalar_only:
                    raise ValueError(
                        f"{tag} The return value of the function whose gradient we want to compute should be a "
                        f"scalar array; but {_type_name(out)} was returned.")
                if not isinstance(out, tuple):
                    raise ValueError(
                        f"{tag} The return value of the function whose gradient we want to compute should be "
                        "either a scalar array or a tuple with the first value being a scalar array "
                        f"(Union[array, tuple[array, Any, ...]]); but {_type_name(out)} was returned.")
                if len(out) == 0:
                    raise ValueError(
                        f"{tag} The return value of the function whose gradient we want to compute should be "
                        "either a scalar array or a non-empty tuple. The first value should be a scalar array "
                        "and the rest can be anything. Instead, we got an empty tuple.")
                if not isinstance(out[0], array):
                    raise ValueError(
                        f"{tag} The return value of the function whose gradient we want to compute should be "
                        "either a scalar array or a tuple with the first value being a scalar array "
                        "(Union[array, tuple[array, Any, ...]]); but it was a tuple with the first value "
                        f"being of type {_type_name(out[0])} .")
            flat = _flatten(out)
            holder["flat"] = flat
            return flat[:1]

        outs, grads = _core._vjp(flat_fun, arrays, [array(1.0)], grad_index)
        flat = holder["flat"]
        flat[0] = outs[0]
        value = _fill(holder["out"], iter(flat))
        pos = 0
        pieces = []
        for c in counts[1:]:
            pieces.append(grads[pos:pos + c])
            pos += c
        if len(argnums) == 1:
            pgrads = _fill(args[argnums[0]], iter(pieces[0]))
        elif len(argnums) > 1:
            pgrads = tuple(_fill(args[n], iter(pieces[i])) for i, n in enumerate(argnums))
        else:
            pgrads = None
        if not argnames:
            return value, pgrads
        kgrads = {k: _fill(kwargs[k], iter(pieces[len(argnums) + i])) for i, k in enumerate(kw_order)}
        return value, (pgrads, kgrads)

    return wrapped


def value_and_grad(fun, argnums=None, argnames=[]):
    """value_and_grad(fun: Callable, argnums: int | Sequence[int] | None = None, argnames: str | Sequence[str] = []) -> Callable

    Returns a function which computes the value and gradient of ``fun``. The
    function should return a scalar loss or a tuple whose first element is a
    scalar loss (the rest can be anything).
    """
    nums, names = _argnums_argnames(argnums, argnames)
    f = _value_and_grad(fun, nums, names, "[value_and_grad]", False)
    return functools.wraps(fun)(f) if _wrappable(fun) else f


def grad(fun, argnums=None, argnames=[]):
    """grad(fun: Callable, argnums: int | Sequence[int] | None = None, argnames: str | Sequence[str] = []) -> Callable

    Returns a function which computes the gradient of ``fun`` (which must
    return a scalar array) with respect to the arguments in ``argnums`` and
    ``argnames``.
    """
    nums, names = _argnums_argnames(argnums, argnames)
    vg = _value_and_grad(fun, nums, names, "[grad]", True)

    def g(*args, **kwargs):
        return vg(*args, **kwargs)[1]

    return functools.wraps(fun)(g) if _wrappable(fun) else g


def _wrappable(fun):
    return hasattr(fun, "__name__")


def vmap(fun, in_axes=0, out_axes=0):
    raise NotImplementedError


def custom_function(f):
    raise NotImplementedError


def checkpoint(fun):
    raise NotImplementedError
