"""The transformations' Python-facing layer in C (csrc/python/py_grad.c,
py_custom.c, py_compile.c, py_tree.c): wrapper attributes as functools.wraps,
method binding, pickling (refused, as MLX), reference counts, pytrees with
named tuples, and checkpoint's recomputation."""
import collections
import gc
import pickle
import sys

import numpy as np
import pytest

import mkpy as mx


def _loss(x, y=None):
    """the loss's docstring"""
    return (mx.sin(x) * (2.0 if y is None else y)).sum()


_loss.tag = "kept"

WRAPPERS = [
    ("grad", lambda f: mx.grad(f)),
    ("value_and_grad", lambda f: mx.value_and_grad(f)),
    ("vmap", lambda f: mx.vmap(f)),
    ("checkpoint", lambda f: mx.checkpoint(f)),
    ("compile", lambda f: mx.compile(f)),
    ("compile_shapeless", lambda f: mx.compile(shapeless=True)(f)),
]


@pytest.mark.parametrize("name,make", WRAPPERS, ids=[w[0] for w in WRAPPERS])
def test_wrappers_carry_functools_wraps_attributes(name, make):
    w = make(_loss)
    assert w.__name__ == "_loss"
    assert w.__qualname__ == "_loss"
    assert w.__doc__ == "the loss's docstring"
    assert w.__module__ == __name__
    assert w.__wrapped__ is _loss
    assert w.tag == "kept"
    with pytest.raises(Exception):
        pickle.dumps(w)


def test_custom_function_attributes_and_pickling():
    cf = mx.custom_function(_loss)
    assert cf.__name__ == "_loss" and cf.__doc__ == "the loss's docstring" and cf.__wrapped__ is _loss
    assert cf.vjp(lambda p, c, o: p) is cf
    with pytest.raises(TypeError):
        pickle.dumps(cf)


def test_wrappers_bind_as_methods():
    class M:
        def __init__(self):
            self.w = mx.array(3.0)

        @mx.compile
        def forward(self, x):
            return x * self.w

        @mx.custom_function
        def custom(self, x):
            return x * 2

        @custom.vjp
        def custom(primals, cotangent, output):
            # bound: the primals are (self, x)
            return None, cotangent * 5

        def loss(self, x):
            return self.custom(x).sum()

        vg = mx.value_and_grad(loss, argnums=1)

    m = M()
    # bound: self is passed (and refused by compile's input check, as MLX refuses custom objects)
    with pytest.raises(ValueError, match=r"received type .*M\."):
        m.forward(mx.array(2.0))
    assert M.__dict__["forward"].__get__(None, M) is M.__dict__["forward"]
    v, g = m.vg(mx.array([1.0, 2.0]))
    assert v.item() == 6.0 and g.tolist() == [5.0, 5.0]


def test_named_tuples_and_tuple_subclasses_round_trip():
    P = collections.namedtuple("P", ["a", "b"])

    class T(tuple):
        pass

    p = P(mx.array(1.0), mx.array(2.0))
    g = mx.grad(lambda q: q.a * q.b)(p)
    assert type(g) is P and g.a.item() == 2.0 and g.b.item() == 1.0
    t = T([mx.array(3.0), mx.array(4.0)])
    g = mx.grad(lambda q: q[0] * q[1])(t)
    assert type(g) is T and [v.item() for v in g] == [4.0, 3.0]
    out = mx.vmap(lambda q: P(q.a * 2, q.b + 1))(P(mx.array([1.0, 2.0]), mx.array([3.0, 4.0])))
    assert type(out) is P and out.a.tolist() == [2.0, 4.0] and out.b.tolist() == [4.0, 5.0]
    c = mx.compile(lambda q: P(q.b, q.a))
    r = c(p)
    assert type(r) is P and r.a.item() == 2.0 and r.b.item() == 1.0


def test_checkpoint_recomputes_in_the_backward_pass():
    calls = [0]

    def f(x, y, scale=1.0):
        calls[0] += 1
        return (mx.sin(x) * y).sum() * scale

    c = mx.checkpoint(f)
    x, y = mx.array([1.0, 2.0]), mx.array([3.0, 4.0])
    assert c(x, y).item() == pytest.approx(f(x, y).item())
    calls[0] = 0
    c(x, y)
    assert calls[0] == 1  # forward only: no transformation asks for a gradient
    calls[0] = 0
    g = mx.grad(c)(x, y)
    mx.eval(g)
    assert calls[0] == 2  # the forward, then once more inside the vjp
    np.testing.assert_allclose(np.array(g), np.cos([1.0, 2.0]) * [3.0, 4.0], rtol=1e-6)
    # argnums, keywords and a second order through the checkpoint
    gx, gy = mx.grad(lambda a, b: c(a, b, scale=2.0), argnums=(0, 1))(x, y)
    np.testing.assert_allclose(np.array(gy), 2 * np.sin([1.0, 2.0]), rtol=1e-6)
    h = mx.grad(lambda a: mx.grad(lambda b: c(b, y))(a).sum())(x)
    np.testing.assert_allclose(np.array(h), -np.sin([1.0, 2.0]) * [3.0, 4.0], rtol=1e-5)


def test_checkpoint_pytree_outputs_under_vjp():
    calls = [0]

    def h(d):
        calls[0] += 1
        return {"twice": d["a"] * 2, "rest": [d["b"] * d["a"]]}

    c = mx.checkpoint(h)
    a, b = mx.array([1.0, 2.0]), mx.array([3.0, 5.0])
    outs, vjps = mx.vjp(lambda p, q: c({"a": p, "b": q})["rest"][0], [a, b], [mx.ones(2)])
    assert outs[0].tolist() == [3.0, 10.0]
    assert vjps[0].tolist() == [3.0, 5.0] and vjps[1].tolist() == [1.0, 2.0]
    assert calls[0] == 2


def _refs(*objs):
    gc.collect()
    return [sys.getrefcount(o) for o in objs]


def test_no_reference_leaks():
    x = mx.array([0.5, 1.5])
    y = mx.array([2.0, 3.0])

    def f(a, b):
        return (a * b).sum()

    def aux(a, b):
        return (a * b).sum(), {"k": [a]}

    cf = mx.custom_function(lambda a: a * 3)

    def rule(p, c, o):
        return c * 3

    cf.vjp(rule)
    cf.jvp(lambda p, t: t * 3)
    cf.vmap(lambda a, ax: (a * 3, ax))
    comp = mx.compile(f)
    ck = mx.checkpoint(f)

    def run():
        mx.grad(f)(x, y)
        mx.value_and_grad(aux, argnums=(0, 1))(x, b=y) if False else mx.value_and_grad(aux, argnums=(0, 1))(x, y)
        mx.grad(f, argnames="b")(x, b=y)
        mx.vjp(f, [x, y], [mx.array(1.0)])
        mx.jvp(f, [x, y], [x, y])
        mx.vmap(f)(x, y)
        mx.vmap(lambda a: {"o": a * 2}, in_axes=0, out_axes={"o": 0})(x)
        mx.grad(lambda a: cf(a).sum())(x)
        mx.jvp(cf, [x], [y])
        mx.vmap(cf)(x)
        comp(x, y)
        mx.grad(ck)(x, y)
        with pytest.raises(ValueError):
            mx.grad(lambda a: [a])(x)
        with pytest.raises(ValueError):
            mx.vmap(f, in_axes=(0, 0, 0))(x, y)

    run()
    run()
    before = _refs(x, y, f, aux, cf, rule, comp, ck)
    for _ in range(20):
        run()
    assert _refs(x, y, f, aux, cf, rule, comp, ck) == before
    # creating and dropping wrappers does not keep fun alive
    fr = _refs(f)
    for _ in range(50):
        mx.grad(f)
        mx.vmap(f)
        mx.compile(f)
        mx.checkpoint(f)
        mx.custom_function(f)
    assert _refs(f) == fr


def test_compile_decorator_options_and_disable():
    calls = [0]

    @mx.compile(shapeless=True)
    def f(a):
        calls[0] += 1
        return a * 2

    assert f(mx.ones((2,))).tolist() == [2.0, 2.0]
    assert f(mx.ones((3,))).tolist() == [2.0, 2.0, 2.0]
    assert calls[0] == 1
    mx.disable_compile()
    try:
        f(mx.ones((3,)))
        assert calls[0] == 2
    finally:
        mx.enable_compile()
    f(mx.ones((4,)))
    assert calls[0] == 2
    with pytest.raises(TypeError, match="compile\\(\\) expects a callable"):
        mx.compile(3)


def test_transformations_from_several_threads(in_threads):
    def work(k):
        x = mx.array([float(k), 1.0])
        for _ in range(20):
            g = mx.grad(lambda a: (a * a).sum())(x)
            assert g.tolist() == [2.0 * k, 2.0]
            v = mx.vmap(lambda a: a + k)(x)
            assert v.tolist() == [2.0 * k, 1.0 + k]

    in_threads(work)


def test_error_messages_kept_as_mlx():
    x = mx.array([1.0, 2.0])
    s = mx.array(1.0)
    cases = [
        (lambda: mx.value_and_grad(lambda a: [a])(s),
         r"^\[value_and_grad\] The return value of the function whose gradient we want to compute should be either "
         r"a scalar array or a tuple with the first value being a scalar array \(Union\[array, tuple\[array, Any, "
         r"\.\.\.\]\]\); but list was returned\.$"),
        (lambda: mx.value_and_grad(lambda a: ())(s),
         r"^\[value_and_grad\] .* Instead, we got an empty tuple\.$"),
        (lambda: mx.value_and_grad(lambda a: (1, a))(s),
         r"^\[value_and_grad\] .*but it was a tuple with the first value being of type int \.$"),
        (lambda: mx.grad(lambda a: a, argnums=[])(s), r"^\[grad\] Gradient wrt no argument requested$"),
        (lambda: mx.grad(lambda a: a, argnums=-1)(s),
         r"^\[grad\] Can't compute the gradient of negative argument index -1$"),
        (lambda: mx.grad(lambda a, b: a, argnums=(1, 1))(s, s),
         r"^\[grad\] Duplicate argument index 1 is not allowed\.$"),
        (lambda: mx.grad(lambda a, b=None, c=None: a, argnames="b")(s, c=s),
         r"^\[grad\] Can't compute the gradient of keyword argument 'b' because the function is called with the "
         r"following keyword arguments \{c,\}$"),
        (lambda: mx.vmap(lambda a: a, in_axes=2)(x),
         r"^\[vmap\] Invalid vectorization axis 2 for array with shape \(2\)$"),
        (lambda: mx.vmap(lambda a: a, out_axes=3)(x),
         r"^\[vmap\] Invalid output vectorization axis 3 for array with shape \(\)$"),
        (lambda: mx.vmap(lambda a, b: a, in_axes=[0, 0])(x, x),
         r"^\[tree_visit\] The trees should have the same structure$"),
        (lambda: mx.vmap(lambda a: a, in_axes=0.5)(x), r"^\[vmap\] axis must be int or None\.$"),
        (lambda: mx.vmap(lambda a: a)(s), r"^\[vmap\] Invalid vectorization axis 0 for array with shape \(\)$"),
        (lambda: mx.vmap(lambda a: a, in_axes=None)(x), r"^At least one of in_axes must be non-None\.$"),
        (lambda: mx.vmap(lambda a: (a, a), out_axes=(0, 0, 0))(x),
         r"^\[tree_visit\] The trees should have the same structure$"),
        (lambda: mx.vmap(lambda a: a)("x"), r"^\[tree_flatten\] The argument should contain only arrays$"),
    ]
    for call, pattern in cases:
        with pytest.raises(ValueError, match=pattern):
            call()

    @mx.custom_function
    def f(a, scale=1.0):
        return a * scale

    @f.jvp
    def f(primals, tangents):
        return tangents

    with pytest.raises(ValueError, match=r"^\[custom jvp\] Function should only accept positional arguments$"):
        mx.jvp(lambda a: f(a, scale=2.0), [x], [x])


def test_checkpoint_composes_with_jvp_vmap_and_compile():
    f = lambda a: mx.sin(a) * 2  # noqa: E731
    c = mx.checkpoint(f)
    x = mx.array([1.0, 2.0])
    (o,), (t,) = mx.jvp(c, [x], [mx.ones(2)])
    np.testing.assert_allclose(np.array(t), 2 * np.cos([1.0, 2.0]), rtol=1e-6)
    assert mx.vmap(c)(mx.ones((3, 2))).shape == (3, 2)
    g = mx.grad(mx.compile(lambda a: c(a).sum()))(x)
    np.testing.assert_allclose(np.array(g), 2 * np.cos([1.0, 2.0]), rtol=1e-6)
    # constants in the output tree come back as they were
    v = mx.checkpoint(lambda a: (a.sum(), 3.0, None))(x)
    assert v[0].item() == 3.0 and v[1:] == (3.0, None)
