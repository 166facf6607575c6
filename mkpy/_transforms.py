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


def _rebuild_tuple(tree, items):
    """A tuple of tree's type: named tuples take fields, other subclasses an iterable."""
    t = type(tree)
    if t is tuple:
        return tuple(items)
    return t(*items) if hasattr(tree, "_fields") else t(items)

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
        items = [_fill(t, it) for t in tree]
        return _rebuild_tuple(tree, items)
    if isinstance(tree, dict):
        return {k: _fill(v, it) for k, v in tree.items()}
    return tree


def _fill_inplace(tree, it):
    """_fill, but lists and dicts are updated in place (as MLX's tree_fill)."""
    if isinstance(tree, array):
        return next(it)
    if isinstance(tree, list):
        for i, t in enumerate(tree):
            tree[i] = _fill_inplace(t, it)
        return tree
    if isinstance(tree, dict):
        for k in tree:
            tree[k] = _fill_inplace(tree[k], it)
        return tree
    if isinstance(tree, tuple):
        items = [_fill_inplace(t, it) for t in tree]
        return _rebuild_tuple(tree, items)
    return tree


def _update_leaves(tree, fn):
    """Replaces, in place where possible, each array leaf by fn(leaf)."""
    if isinstance(tree, array):
        return fn(tree)
    if isinstance(tree, list):
        for i, t in enumerate(tree):
            tree[i] = _update_leaves(t, fn)
        return tree
    if isinstance(tree, dict):
        for k in tree:
            tree[k] = _update_leaves(tree[k], fn)
        return tree
    if isinstance(tree, tuple):
        items = [_update_leaves(t, fn) for t in tree]
        return _rebuild_tuple(tree, items)
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
            # the tracers go into the caller's containers (as MLX); afterwards the
            # originals come back wherever the function did not store something else
            tree = _fill_inplace([list(args), kwargs], iter(xs))
            try:
                out = fun(*tree[0], **tree[1])
            finally:
                pos = [0]

                def back(leaf):
                    i = pos[0]
                    pos[0] += 1
                    return arrays[i] if i < len(xs) and leaf is xs[i] else leaf

                _update_leaves(tree, back)
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


# ---------------------------------------------------------------- vmap

def _flat_axes(tree, axes, output):
    flat = []
    seen_tuple = [False]

    def leaf(x, ax):
        if not isinstance(x, array):
            raise ValueError("[vmap] The arguments should contain only arrays")
        if isinstance(ax, tuple):
            seen_tuple[0] = True
            if len(ax) == 1 and (ax[0] is None or isinstance(ax[0], int)):
                ax = ax[0]
            else:
                raise ValueError("[vmap] axis must be int or None.")
        if ax is None:
            flat.append(-1)
            return
        if not isinstance(ax, int) or isinstance(ax, bool):
            raise ValueError("[vmap] axis must be int or None.")
        nd = x.ndim + (1 if output else 0)
        a = ax + nd if ax < 0 else ax
        if a < 0 or a >= nd:
            kind = " output " if output else " "
            shape = "(" + ",".join(str(d) for d in x.shape) + ")"
            raise ValueError(f"[vmap] Invalid{kind}vectorization axis {a} for array with shape {shape}")
        flat.append(a)

    def visit(t, ax):
        if isinstance(t, (list, tuple)):
            if isinstance(ax, (list, tuple)) and not (isinstance(ax, tuple) and len(ax) == 1 and isinstance(t, array)):
                if type(ax) is not type(t) or len(ax) != len(t):
                    raise ValueError("[tree_visit] The trees should have the same structure")
                for a, b in zip(t, ax):
                    visit(a, b)
            else:
                for a in t:
                    visit(a, ax)
        elif isinstance(t, dict):
            if isinstance(ax, dict):
                for k, v in t.items():
                    if k not in ax:
                        raise ValueError("[tree_visit] The trees should have the same structure")
                    visit(v, ax[k])
            else:
                for v in t.values():
                    visit(v, ax)
        else:
            leaf(t, ax)

    visit(tree, axes)
    if seen_tuple[0] and not isinstance(tree, array):
        raise ValueError("[vmap] axis must be int or None.")
    return flat


def vmap(fun, in_axes=0, out_axes=0):
    """vmap(fun: Callable, in_axes: object = 0, out_axes: object = 0) -> Callable

    Returns a vectorized version of ``fun``: it maps ``fun`` over the axes
    ``in_axes`` of its inputs and stacks the results along ``out_axes``.
    """
    def vmapped(*args):
        inputs = _flatten(args, strict=True)
        axes = _flat_axes(args[0] if len(args) == 1 else args, in_axes, False)
        size = None
        for x, a in zip(inputs, axes):
            if a < 0:
                continue
            if x.ndim == 0:
                raise ValueError("[vmap] Cannot vmap an input with zero dimensions.")
            if size is not None and x.shape[a] != size:
                raise ValueError(f"[vmap] Inconsistent axis sizes: {x.shape[a]} and {size}.")
            size = x.shape[a]
        if size is None:
            raise ValueError("At least one of in_axes must be non-None.")
        holder = {}

        def flat_fun(xs):
            out = fun(*_fill(list(args), iter(xs)))
            holder["out"] = out
            return _flatten(out, strict=True)

        outs, oaxes = _core._vmap(flat_fun, inputs, axes)
        want = _flat_axes(holder["out"], out_axes, True)
        if len(want) != len(outs):
            raise ValueError(f"[vmap] The number of out axes ({len(want)}) must match the number of outputs "
                             f"({len(outs)}).")
        results = []
        for o, a, w in zip(outs, oaxes, want):
            if a < 0:
                # the output does not depend on a mapped input: repeat it
                w = 0 if w < 0 else w
                o = _core.repeat(_core.expand_dims(o, w), size, w)
            elif w < 0:
                o = _core.moveaxis(o, a, -1)
            elif a != w:
                if w >= o.ndim:
                    raise ValueError(f"[vmap] Axis {w} invalid for output with {o.ndim} dimensions.")
                o = _core.moveaxis(o, a, w)
            results.append(o)
        return _fill(holder["out"], iter(results))

    return functools.wraps(fun)(vmapped) if _wrappable(fun) else vmapped


# ---------------------------------------------------------------- checkpoint

def checkpoint(fun):
    """checkpoint(fun: Callable) -> Callable

    Returns a function computing the same values and gradients as ``fun``.
    MLX's checkpoint recomputes ``fun``'s intermediates in the backward pass
    to save memory; mkpy keeps them (the same results, without the saving).
    """
    @functools.wraps(fun)
    def wrapped(*args, **kwargs):
        return fun(*args, **kwargs)

    return wrapped



# ---------------------------------------------------------------- custom_function

class custom_function:
    """custom_function(fun: Callable)

    Set up a function for custom gradient and vmap definitions: decorate the
    rules with ``.vjp``, ``.jvp`` and ``.vmap``. A rule left out is taken
    from ``fun``'s own graph, as MLX does. The rules may call any op,
    including Metal kernels.
    """

    def __init__(self, fun):
        self._fun = fun
        self._vjp = None
        self._jvp = None
        self._vmap = None
        functools.update_wrapper(self, fun)

    def vjp(self, fun):
        """vjp(fun: Callable) -> custom_function

        Define a custom vjp: fun(primals, cotangents, outputs) returns the primals' cotangents."""
        self._vjp = fun
        return self

    def jvp(self, fun):
        """jvp(fun: Callable) -> custom_function

        Define a custom jvp: fun(primals, tangents) returns the outputs' tangents."""
        self._jvp = fun
        return self

    def vmap(self, fun):
        """vmap(fun: Callable) -> custom_function

        Define a custom vmap: fun(inputs, axes) returns the outputs and their vectorization axes."""
        self._vmap = fun
        return self

    def __get__(self, obj, objtype=None):
        return self if obj is None else functools.partial(self, obj)

    def __call__(self, *args, **kwargs):
        """__call__(*args, **kwargs) -> Any

        Calls the function; under a transformation its rules apply.
        """
        if self._vjp is None and self._jvp is None and self._vmap is None:
            return self._fun(*args, **kwargs)
        inputs = _flatten((args, kwargs))
        holder = {}

        def rebuild(xs):
            a, k = _fill((list(args), dict(kwargs)), iter(xs))
            return a, k

        def flat_fun(xs):
            a, k = rebuild(xs)
            out = self._fun(*a, **k)
            holder["out"] = out
            return _flatten(out)

        def one(a):
            return a[0] if len(a) == 1 else tuple(a)

        def flat_vjp(primals, cots, outs):
            a, k = rebuild(primals)
            c = _fill(holder["out"], iter(cots))
            o = _fill(holder["out"], iter(outs))
            res = _flatten(self._vjp(one(a), c, o, **k))
            return res + [None] * (len(primals) - len(res))

        def flat_jvp(primals, tans):
            a, k = rebuild(primals)
            if k:
                raise ValueError("[custom jvp] Function should only accept positional arguments")
            t, _ = rebuild(tans)
            return _flatten(self._jvp(one(a), one(t)))

        def flat_vmap(xs, axes):
            a, k = rebuild(xs)
            if k:
                raise ValueError("[custom vmap] Function should only accept positional arguments")
            ax_it = iter(axes)
            ax = _fill_leaves(list(args), lambda leaf: next(ax_it) if isinstance(leaf, array) else None)
            res = self._vmap(one(a), one(ax))
            if not isinstance(res, tuple) or len(res) != 2:
                raise ValueError("[custom vmap] Vmap function should return a tuple with 2 items.")
            outs, oax = [], []
            _pairs(res[0], res[1], outs, oax)
            return outs, oax

        outs = _core._custom(flat_fun, inputs, flat_vjp if self._vjp else None, flat_jvp if self._jvp else None,
                             flat_vmap if self._vmap else None)
        return _fill(holder["out"], iter(outs))


def _fill_leaves(tree, fn):
    if isinstance(tree, list):
        return [_fill_leaves(t, fn) for t in tree]
    if isinstance(tree, tuple):
        return tuple(_fill_leaves(t, fn) for t in tree)
    if isinstance(tree, dict):
        return {k: _fill_leaves(v, fn) for k, v in tree.items()}
    return fn(tree)


def _pairs(tree, axes, outs, oax):
    if isinstance(tree, array):
        outs.append(tree)
        oax.append(-1 if axes is None else axes)
    elif isinstance(tree, (list, tuple)):
        for i, t in enumerate(tree):
            _pairs(t, axes[i] if isinstance(axes, (list, tuple)) else axes, outs, oax)
    elif isinstance(tree, dict):
        for k, t in tree.items():
            _pairs(t, axes[k] if isinstance(axes, dict) else axes, outs, oax)
