/* mx.custom_function: a callable object whose .vjp, .jvp and .vmap
 * decorators register rules for the function's transformations, as MLX's
 * documentation uses it. Called with at least one rule, the function runs
 * on its arguments and its outputs go through a node carrying the rules
 * (mkpy_custom_flat, py_transforms.c); a rule left out is taken from the
 * function's own graph, as MLX does. The rules see the arguments' and
 * outputs' pytrees (py_tree.c) and may call any op, Metal kernels included. */
#include "py_tree.h"

typedef struct {
    PyObject_HEAD
    PyObject *dict;
    PyObject *weakreflist;
    PyObject *fun, *vjp, *jvp, *vmap;
} custom_function;

/* the call's state closure (its fn is the flat function) */
enum { S_SELF, S_ARGS, S_KWARGS, S_OUT };

/* (args list, kwargs dict) with their arrays replaced by xs: new refs */
static int rebuild(mkpy_closure *S, PyObject *xs, PyObject **a, PyObject **k) {
    PyObject *both = PyTuple_Pack(2, S->s[S_ARGS], S->s[S_KWARGS]);
    Py_ssize_t pos = 0;
    PyObject *f = both ? mkpy_tree_fill(both, xs, &pos) : NULL;
    Py_XDECREF(both);
    if (!f) return -1;
    *a = Py_NewRef(PyTuple_GET_ITEM(f, 0));
    *k = Py_NewRef(PyTuple_GET_ITEM(f, 1));
    Py_DECREF(f);
    return 0;
}

/* a[0] for one argument, else tuple(a) */
static PyObject *one(PyObject *a) {
    return PyList_GET_SIZE(a) == 1 ? Py_NewRef(PyList_GET_ITEM(a, 0)) : PyList_AsTuple(a);
}

static PyObject *flatten(PyObject *tree) {
    PyObject *l = PyList_New(0);
    if (l && mkpy_tree_flatten(tree, 0, l) < 0) Py_CLEAR(l);
    return l;
}

static int check_list(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want) {
    for (Py_ssize_t i = 0; i < nargs; i++)
        if (!PyList_Check(args[i])) nargs = -1;
    if (nargs != want) {
        PyErr_SetString(PyExc_TypeError, "custom_function: internal rule called with the wrong arguments");
        return -1;
    }
    return 0;
}

static PyObject *flat_fun(mkpy_closure *S, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *a = NULL, *k = NULL, *ta = NULL, *out = NULL, *r = NULL;
    if (check_list(args, nargs, 1) < 0 || rebuild(S, args[0], &a, &k) < 0) return NULL;
    if ((ta = PyList_AsTuple(a))) out = PyObject_Call(((custom_function *)S->s[S_SELF])->fun, ta, k);
    if (out) {
        mkpy_closure_set(S, S_OUT, out);
        r = flatten(out);
    }
    Py_XDECREF(a);
    Py_XDECREF(k);
    Py_XDECREF(ta);
    Py_XDECREF(out);
    return r;
}

static PyObject *flat_vjp(mkpy_closure *c, PyObject *const *args, Py_ssize_t nargs) {
    mkpy_closure *S = (mkpy_closure *)c->s[0];
    PyObject *a = NULL, *k = NULL, *ct = NULL, *ot = NULL, *pa = NULL, *res = NULL, *r = NULL;
    if (check_list(args, nargs, 3) < 0 || rebuild(S, args[0], &a, &k) < 0) return NULL;
    Py_ssize_t p1 = 0, p2 = 0;
    if (!(ct = mkpy_tree_fill(S->s[S_OUT], args[1], &p1)) || !(ot = mkpy_tree_fill(S->s[S_OUT], args[2], &p2)))
        goto error;
    if (!(pa = one(a))) goto error;
    {
        PyObject *call[3] = {pa, ct, ot};
        PyObject *t = PyTuple_New(3);
        if (!t) goto error;
        for (int i = 0; i < 3; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(call[i]));
        res = PyObject_Call(((custom_function *)S->s[S_SELF])->vjp, t, k);
        Py_DECREF(t);
    }
    if (!res || !(r = flatten(res))) goto error;
    /* missing cotangents are zeros (None) */
    while (PyList_GET_SIZE(r) < PyList_GET_SIZE(args[0]))
        if (PyList_Append(r, Py_None) < 0) {
            Py_CLEAR(r);
            break;
        }
error:
    Py_XDECREF(a);
    Py_XDECREF(k);
    Py_XDECREF(ct);
    Py_XDECREF(ot);
    Py_XDECREF(pa);
    Py_XDECREF(res);
    return r;
}

static PyObject *flat_jvp(mkpy_closure *c, PyObject *const *args, Py_ssize_t nargs) {
    mkpy_closure *S = (mkpy_closure *)c->s[0];
    PyObject *a = NULL, *k = NULL, *t = NULL, *tk = NULL, *pa = NULL, *pt = NULL, *res = NULL, *r = NULL;
    if (check_list(args, nargs, 2) < 0 || rebuild(S, args[0], &a, &k) < 0) return NULL;
    if (PyDict_GET_SIZE(k)) {
        PyErr_SetString(PyExc_ValueError, "[custom jvp] Function should only accept positional arguments");
        goto error;
    }
    if (rebuild(S, args[1], &t, &tk) < 0 || !(pa = one(a)) || !(pt = one(t))) goto error;
    if ((res = PyObject_CallFunctionObjArgs(((custom_function *)S->s[S_SELF])->jvp, pa, pt, NULL))) r = flatten(res);
error:
    Py_XDECREF(a);
    Py_XDECREF(k);
    Py_XDECREF(t);
    Py_XDECREF(tk);
    Py_XDECREF(pa);
    Py_XDECREF(pt);
    Py_XDECREF(res);
    return r;
}

typedef struct {
    PyObject *axes;
    Py_ssize_t pos;
} axis_it;

/* each array's axis in turn; other leaves get None */
static PyObject *next_axis(void *ctx, PyObject *leaf) {
    axis_it *it = ctx;
    if (!PyMkArray_Check(leaf)) return Py_NewRef(Py_None);
    if (it->pos >= PyList_GET_SIZE(it->axes)) {
        PyErr_SetString(PyExc_ValueError, "[custom vmap] More arrays than axes.");
        return NULL;
    }
    return Py_NewRef(PyList_GET_ITEM(it->axes, it->pos++));
}

/* the (output, axis) pairs of the vmap rule's result trees */
static int pairs(PyObject *tree, PyObject *axes, PyObject *outs, PyObject *oax) {
    if (PyMkArray_Check(tree)) {
        PyObject *v = axes == Py_None ? PyLong_FromLong(-1) : Py_NewRef(axes);
        int rc = v && PyList_Append(outs, tree) == 0 ? PyList_Append(oax, v) : -1;
        Py_XDECREF(v);
        return rc;
    }
    int rc = 0;
    if (PyList_Check(tree) || PyTuple_Check(tree)) {
        int seq = PyList_Check(axes) || PyTuple_Check(axes);
        for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(tree); i++) {
            PyObject *ai = seq ? PySequence_GetItem(axes, i) : Py_NewRef(axes);
            rc = ai ? pairs(PySequence_Fast_GET_ITEM(tree, i), ai, outs, oax) : -1;
            Py_XDECREF(ai);
        }
    } else if (PyDict_Check(tree)) {
        PyObject *k, *v;
        Py_ssize_t p = 0;
        while (rc == 0 && PyDict_Next(tree, &p, &k, &v)) {
            PyObject *ai = PyDict_Check(axes) ? PyObject_GetItem(axes, k) : Py_NewRef(axes);
            rc = ai ? pairs(v, ai, outs, oax) : -1;
            Py_XDECREF(ai);
        }
    }
    return rc;
}

static PyObject *flat_vmap(mkpy_closure *c, PyObject *const *args, Py_ssize_t nargs) {
    mkpy_closure *S = (mkpy_closure *)c->s[0];
    PyObject *a = NULL, *k = NULL, *ax = NULL, *pa = NULL, *px = NULL, *res = NULL, *outs = NULL, *oax = NULL;
    PyObject *r = NULL;
    if (check_list(args, nargs, 2) < 0 || rebuild(S, args[0], &a, &k) < 0) return NULL;
    if (PyDict_GET_SIZE(k)) {
        PyErr_SetString(PyExc_ValueError, "[custom vmap] Function should only accept positional arguments");
        goto error;
    }
    axis_it it = {args[1], 0};
    if (!(ax = mkpy_tree_map_leaves(S->s[S_ARGS], next_axis, &it)) || !(pa = one(a)) || !(px = one(ax))) goto error;
    if (!(res = PyObject_CallFunctionObjArgs(((custom_function *)S->s[S_SELF])->vmap, pa, px, NULL))) goto error;
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
        PyErr_SetString(PyExc_ValueError, "[custom vmap] Vmap function should return a tuple with 2 items.");
        goto error;
    }
    if (!(outs = PyList_New(0)) || !(oax = PyList_New(0))) goto error;
    if (pairs(PyTuple_GET_ITEM(res, 0), PyTuple_GET_ITEM(res, 1), outs, oax) < 0) goto error;
    r = PyTuple_Pack(2, outs, oax);
error:
    Py_XDECREF(a);
    Py_XDECREF(k);
    Py_XDECREF(ax);
    Py_XDECREF(pa);
    Py_XDECREF(px);
    Py_XDECREF(res);
    Py_XDECREF(outs);
    Py_XDECREF(oax);
    return r;
}

/* a rule closure over the call's state, or None when the rule is missing */
static PyObject *rule(PyObject *f, mkpy_closure_fn fn, mkpy_closure *S) {
    if (f == Py_None) return Py_NewRef(Py_None);
    mkpy_closure *c = mkpy_closure_new(fn);
    if (c) mkpy_closure_set(c, 0, (PyObject *)S);
    return (PyObject *)c;
}

static PyObject *cf_call(custom_function *self, PyObject *args, PyObject *kwargs) {
    if (!self->fun) {
        PyErr_SetString(PyExc_TypeError, "custom_function: not initialised");
        return NULL;
    }
    if (self->vjp == Py_None && self->jvp == Py_None && self->vmap == Py_None)
        return PyObject_Call(self->fun, args, kwargs);
    PyObject *argl = NULL, *kw = NULL, *both = NULL, *inputs = NULL, *v = NULL, *j = NULL, *m = NULL, *outs = NULL;
    PyObject *r = NULL;
    mkpy_closure *S = mkpy_closure_new(flat_fun);
    if (!S || !(argl = PySequence_List(args)) || !(kw = kwargs ? PyDict_Copy(kwargs) : PyDict_New())) goto error;
    mkpy_closure_set(S, S_SELF, (PyObject *)self);
    mkpy_closure_set(S, S_ARGS, argl);
    mkpy_closure_set(S, S_KWARGS, kw);
    if (!(both = PyTuple_Pack(2, args, kw)) || !(inputs = flatten(both))) goto error;
    if (!(v = rule(self->vjp, flat_vjp, S)) || !(j = rule(self->jvp, flat_jvp, S)) ||
        !(m = rule(self->vmap, flat_vmap, S)))
        goto error;
    if (!(outs = mkpy_custom_flat((PyObject *)S, inputs, v, j, m))) goto error;
    Py_ssize_t pos = 0;
    r = mkpy_tree_fill(S->s[S_OUT], outs, &pos);
error:
    Py_XDECREF(S);
    Py_XDECREF(argl);
    Py_XDECREF(kw);
    Py_XDECREF(both);
    Py_XDECREF(inputs);
    Py_XDECREF(v);
    Py_XDECREF(j);
    Py_XDECREF(m);
    Py_XDECREF(outs);
    return r;
}

static PyObject *set_rule(custom_function *self, PyObject **slot, PyObject *fun) {
    Py_SETREF(*slot, Py_NewRef(fun));
    return Py_NewRef((PyObject *)self);
}

PyDoc_STRVAR(cf_vjp_doc, "vjp(fun: Callable) -> custom_function\n\n"
                         "Define a custom vjp: fun(primals, cotangents, outputs) returns the primals' cotangents.");

static PyObject *cf_vjp(custom_function *self, PyObject *fun) {
    return set_rule(self, &self->vjp, fun);
}

PyDoc_STRVAR(cf_jvp_doc, "jvp(fun: Callable) -> custom_function\n\n"
                         "Define a custom jvp: fun(primals, tangents) returns the outputs' tangents.");

static PyObject *cf_jvp(custom_function *self, PyObject *fun) {
    return set_rule(self, &self->jvp, fun);
}

PyDoc_STRVAR(cf_vmap_doc, "vmap(fun: Callable) -> custom_function\n\n"
                          "Define a custom vmap: fun(inputs, axes) returns the outputs and their vectorization axes.");

static PyObject *cf_vmap(custom_function *self, PyObject *fun) {
    return set_rule(self, &self->vmap, fun);
}

static int cf_init(custom_function *self, PyObject *args, PyObject *kwargs) {
    static char *kw[] = {"fun", NULL};
    PyObject *fun;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:custom_function", kw, &fun)) return -1;
    if (!PyCallable_Check(fun)) {
        PyErr_SetString(PyExc_TypeError, "custom_function(): fun must be callable.");
        return -1;
    }
    Py_XSETREF(self->fun, Py_NewRef(fun));
    Py_XSETREF(self->vjp, Py_NewRef(Py_None));
    Py_XSETREF(self->jvp, Py_NewRef(Py_None));
    Py_XSETREF(self->vmap, Py_NewRef(Py_None));
    return mkpy_update_wrapper(&self->dict, fun);
}

static int cf_traverse(custom_function *self, visitproc visit, void *arg) {
    Py_VISIT(self->dict);
    Py_VISIT(self->fun);
    Py_VISIT(self->vjp);
    Py_VISIT(self->jvp);
    Py_VISIT(self->vmap);
    return 0;
}

static int cf_clear(custom_function *self) {
    Py_CLEAR(self->dict);
    Py_CLEAR(self->fun);
    Py_CLEAR(self->vjp);
    Py_CLEAR(self->jvp);
    Py_CLEAR(self->vmap);
    return 0;
}

static void cf_dealloc(custom_function *self) {
    PyObject_GC_UnTrack(self);
    if (self->weakreflist) PyObject_ClearWeakRefs((PyObject *)self);
    cf_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *cf_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (!obj || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *cf_reduce(PyObject *self, PyObject *unused) {
    (void)unused;
    PyErr_Format(PyExc_TypeError, "cannot pickle '%s' object", Py_TYPE(self)->tp_name);
    return NULL;
}

static PyMethodDef cf_all_methods[] = {
    {"vjp", (PyCFunction)cf_vjp, METH_O, cf_vjp_doc},
    {"jvp", (PyCFunction)cf_jvp, METH_O, cf_jvp_doc},
    {"vmap", (PyCFunction)cf_vmap, METH_O, cf_vmap_doc},
    {"__reduce__", cf_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(cf_doc, "custom_function(fun: Callable)\n\n"
                     "Set up a function for custom gradient and vmap definitions: decorate the\n"
                     "rules with ``.vjp``, ``.jvp`` and ``.vmap``. A rule left out is taken\n"
                     "from ``fun``'s own graph, as MLX does. The rules may call any op,\n"
                     "including Metal kernels.");

static PyTypeObject custom_function_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.custom_function",
    .tp_basicsize = sizeof(custom_function),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = cf_doc,
    .tp_call = (ternaryfunc)cf_call,
    .tp_traverse = (traverseproc)cf_traverse,
    .tp_clear = (inquiry)cf_clear,
    .tp_dealloc = (destructor)cf_dealloc,
    .tp_descr_get = cf_get,
    .tp_methods = cf_all_methods,
    .tp_init = (initproc)cf_init,
    .tp_new = PyType_GenericNew,
    .tp_dictoffset = offsetof(custom_function, dict),
    .tp_weaklistoffset = offsetof(custom_function, weakreflist),
};

int mkpy_custom_init(PyObject *m) {
    if (PyType_Ready(&custom_function_Type) < 0) return -1;
    return PyModule_AddObjectRef(m, "custom_function", (PyObject *)&custom_function_Type);
}
