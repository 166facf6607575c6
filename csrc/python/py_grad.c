/* mx.grad, mx.value_and_grad, mx.vjp, mx.jvp, mx.vmap and mx.checkpoint:
 * MLX's Python signatures (argnums/argnames, pytrees of arguments and
 * results, auxiliary outputs, in_axes/out_axes) mapped onto the flat
 * transformations of py_transforms.c (mkpy_vjp_flat & co., which trace a
 * callable taking and returning a list of arrays). The flat callables are
 * closures (py_tree.h) holding the call's state; the returned functions are
 * `transformed` objects that carry fun's __name__, __doc__, __qualname__,
 * __module__ and __wrapped__ as functools.wraps would, and bind as methods
 * when stored on a class. */
#include "core/ops_extra.h"
#include "core/transforms.h"
#include "py_tree.h"

enum { K_GRAD, K_VALUE_AND_GRAD, K_VMAP, K_CHECKPOINT };

typedef struct {
    PyObject_HEAD
    PyObject *dict;
    PyObject *weakreflist;
    int kind;
    PyObject *fun;
    Py_ssize_t *nums; /* grad: sorted argnums */
    Py_ssize_t nnums;
    PyObject *names;  /* grad: tuple of argnames (distinct) */
    PyObject *in_axes, *out_axes; /* vmap */
} transformed;

static PyTypeObject transformed_Type;

static const char *grad_tag(const transformed *t) {
    return t->kind == K_GRAD ? "[grad]" : "[value_and_grad]";
}

/* ------------------------------------------------------------ grad */

/* closure slots of a grad call */
enum { G_FUN, G_ARGS, G_KWARGS, G_ARRAYS, G_OUT, G_FLAT, G_SELF };

typedef struct {
    PyObject *arrays, *xs;
    Py_ssize_t pos;
} restore_ctx;

/* the caller's original array wherever the function left the tracer */
static PyObject *restore_leaf(void *ctx, PyObject *leaf) {
    restore_ctx *r = ctx;
    Py_ssize_t i = r->pos++;
    if (i < PyList_GET_SIZE(r->xs) && leaf == PyList_GET_ITEM(r->xs, i) && i < PyList_GET_SIZE(r->arrays))
        return Py_NewRef(PyList_GET_ITEM(r->arrays, i));
    return Py_NewRef(leaf);
}

static int check_grad_output(const transformed *t, PyObject *out) {
    const char *tag = grad_tag(t);
    if (PyMkArray_Check(out)) return 0;
    PyObject *name = NULL;
    if (t->kind == K_GRAD) {
        if ((name = mkpy_tree_type_name(out)))
            PyErr_Format(PyExc_ValueError,
                         "%s The return value of the function whose gradient we want to compute should be a scalar "
                         "array; but %U was returned.",
                         tag, name);
    } else if (!PyTuple_Check(out)) {
        if ((name = mkpy_tree_type_name(out)))
            PyErr_Format(PyExc_ValueError,
                         "%s The return value of the function whose gradient we want to compute should be either a "
                         "scalar array or a tuple with the first value being a scalar array (Union[array, "
                         "tuple[array, Any, ...]]); but %U was returned.",
                         tag, name);
    } else if (PyTuple_GET_SIZE(out) == 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s The return value of the function whose gradient we want to compute should be either a scalar "
                     "array or a non-empty tuple. The first value should be a scalar array and the rest can be "
                     "anything. Instead, we got an empty tuple.",
                     tag);
    } else if (!PyMkArray_Check(PyTuple_GET_ITEM(out, 0))) {
        if ((name = mkpy_tree_type_name(PyTuple_GET_ITEM(out, 0))))
            PyErr_Format(PyExc_ValueError,
                         "%s The return value of the function whose gradient we want to compute should be either a "
                         "scalar array or a tuple with the first value being a scalar array (Union[array, "
                         "tuple[array, Any, ...]]); but it was a tuple with the first value being of type %U .",
                         tag, name);
    } else {
        return 0;
    }
    Py_XDECREF(name);
    return -1;
}

/* flat_fun(xs): the tracers go into the caller's containers (as MLX), the
 * function runs, and the originals come back wherever the function did not
 * store something else. Returns [the scalar output]. */
static PyObject *grad_flat_fun(mkpy_closure *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "grad: internal flat function takes a list");
        return NULL;
    }
    PyObject *xs = args[0], *tree = NULL, *out = NULL, *flat = NULL, *result = NULL;
    Py_ssize_t pos = 0;
    PyObject *a_list = PySequence_List(c->s[G_ARGS]);
    if (!a_list) return NULL;
    tree = PyList_New(2);
    if (!tree) {
        Py_DECREF(a_list);
        return NULL;
    }
    PyList_SET_ITEM(tree, 0, a_list);
    PyList_SET_ITEM(tree, 1, Py_NewRef(c->s[G_KWARGS]));
    PyObject *filled = mkpy_tree_fill_inplace(tree, xs, &pos);
    if (!filled) goto error;
    Py_DECREF(filled); /* tree itself */
    PyObject *call_args = PyList_AsTuple(PyList_GET_ITEM(tree, 0));
    if (call_args) {
        out = PyObject_Call(c->s[G_FUN], call_args, PyList_GET_ITEM(tree, 1));
        Py_DECREF(call_args);
    }
    {
        /* put the caller's arrays back (keeping any exception) */
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        restore_ctx r = {c->s[G_ARRAYS], xs, 0};
        PyObject *back = mkpy_tree_update(tree, restore_leaf, &r);
        Py_XDECREF(back);
        if (et) {
            if (back) {
                PyErr_Restore(et, ev, tb);
            } else {
                Py_DECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
            }
        }
    }
    if (!out || PyErr_Occurred()) goto error;
    mkpy_closure_set(c, G_OUT, out);
    if (check_grad_output((transformed *)c->s[G_SELF], out) < 0) goto error;
    if (!(flat = PyList_New(0)) || mkpy_tree_flatten(out, 0, flat) < 0) goto error;
    mkpy_closure_set(c, G_FLAT, flat);
    result = PyList_GetSlice(flat, 0, 1);
error:
    Py_XDECREF(tree);
    Py_XDECREF(out);
    Py_XDECREF(flat);
    return result;
}

static int has_num(const transformed *t, Py_ssize_t i) {
    for (Py_ssize_t k = 0; k < t->nnums; k++)
        if (t->nums[k] == i) return 1;
    return 0;
}

/* appends range(pre, len(arrays)) to index and the count to counts */
static int note_piece(PyObject *arrays, Py_ssize_t pre, PyObject *index, PyObject *counts) {
    for (Py_ssize_t j = pre; j < PyList_GET_SIZE(arrays); j++) {
        PyObject *v = PyLong_FromSsize_t(j);
        int rc = v ? PyList_Append(index, v) : -1;
        Py_XDECREF(v);
        if (rc < 0) return -1;
    }
    PyObject *v = PyLong_FromSsize_t(PyList_GET_SIZE(arrays) - pre);
    int rc = v ? PyList_Append(counts, v) : -1;
    Py_XDECREF(v);
    return rc;
}

static PyObject *grad_call(transformed *t, PyObject *args, PyObject *kwargs_in) {
    const char *tag = grad_tag(t);
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    PyObject *kwargs = NULL, *arrays = NULL, *index = NULL, *counts = NULL, *kw_order = NULL, *cot = NULL;
    PyObject *res = NULL, *value = NULL, *pgrads = NULL, *kgrads = NULL, *result = NULL;
    mkpy_closure *c = NULL;
    if (t->nnums && t->nums[t->nnums - 1] >= nargs) {
        PyErr_Format(PyExc_ValueError,
                     "%s Can't compute the gradient of argument index %zd because the function is called with only "
                     "%zd positional arguments.",
                     tag, t->nums[t->nnums - 1], nargs);
        return NULL;
    }
    kwargs = kwargs_in ? PyDict_Copy(kwargs_in) : PyDict_New();
    if (!kwargs) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t->names); i++) {
        PyObject *k = PyTuple_GET_ITEM(t->names, i);
        int has = PyDict_Contains(kwargs, k);
        if (has < 0) goto error;
        if (!has) {
            PyObject *keys = PyUnicode_FromString(""), *key, *val;
            Py_ssize_t p = 0;
            while (keys && PyDict_Next(kwargs, &p, &key, &val)) Py_SETREF(keys, PyUnicode_FromFormat("%U%S,", keys, key));
            if (keys)
                PyErr_Format(PyExc_ValueError,
                             "%s Can't compute the gradient of keyword argument '%S' because the function is called "
                             "with the following keyword arguments {%U}",
                             tag, k, keys);
            Py_XDECREF(keys);
            goto error;
        }
    }
    if (!(arrays = PyList_New(0)) || !(index = PyList_New(0)) || !(counts = PyList_New(0)) ||
        !(kw_order = PyList_New(0)))
        goto error;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        int need = has_num(t, i);
        Py_ssize_t pre = PyList_GET_SIZE(arrays);
        if (mkpy_tree_flatten(PyTuple_GET_ITEM(args, i), need, arrays) < 0) goto error;
        if (need && note_piece(arrays, pre, index, counts) < 0) goto error;
    }
    {
        PyObject *k, *v;
        Py_ssize_t p = 0;
        while (PyDict_Next(kwargs, &p, &k, &v)) {
            int need = PySequence_Contains(t->names, k);
            if (need < 0) goto error;
            Py_ssize_t pre = PyList_GET_SIZE(arrays);
            Py_INCREF(v);
            int rc = mkpy_tree_flatten(v, need, arrays);
            Py_DECREF(v);
            if (rc < 0) goto error;
            if (need && (note_piece(arrays, pre, index, counts) < 0 || PyList_Append(kw_order, k) < 0)) goto error;
        }
    }
    if (!(c = mkpy_closure_new(grad_flat_fun))) goto error;
    mkpy_closure_set(c, G_FUN, t->fun);
    mkpy_closure_set(c, G_ARGS, args);
    mkpy_closure_set(c, G_KWARGS, kwargs);
    mkpy_closure_set(c, G_ARRAYS, arrays);
    mkpy_closure_set(c, G_SELF, (PyObject *)t);
    {
        float one = 1.0f;
        PyObject *o = mkpy_wrap(mk_scalar(MK_FLOAT32, &one));
        if (!o) goto error;
        cot = PyList_New(1);
        if (!cot) {
            Py_DECREF(o);
            goto error;
        }
        PyList_SET_ITEM(cot, 0, o);
    }
    if (!(res = mkpy_vjp_flat((PyObject *)c, arrays, cot, index))) goto error;
    PyObject *outs = PyTuple_GET_ITEM(res, 0), *grads = PyTuple_GET_ITEM(res, 1);
    PyObject *flat = c->s[G_FLAT];
    if (!flat || !c->s[G_OUT]) {
        PyErr_SetString(PyExc_RuntimeError, "grad: the function was not traced");
        goto error;
    }
    if (PyList_SetItem(flat, 0, Py_NewRef(PyList_GET_ITEM(outs, 0))) < 0) goto error;
    Py_ssize_t pos = 0;
    if (!(value = mkpy_tree_fill(c->s[G_OUT], flat, &pos))) goto error;
    /* the gradients, split per differentiated argument */
    Py_ssize_t gpos = 0, piece = 0;
    if (t->nnums) {
        pgrads = t->nnums > 1 ? PyTuple_New(t->nnums) : NULL;
        if (t->nnums > 1 && !pgrads) goto error;
        for (Py_ssize_t k = 0; k < t->nnums; k++, piece++) {
            Py_ssize_t cnt = PyLong_AsSsize_t(PyList_GET_ITEM(counts, piece));
            PyObject *part = PyList_GetSlice(grads, gpos, gpos + cnt), *g;
            gpos += cnt;
            Py_ssize_t q = 0;
            g = part ? mkpy_tree_fill(PyTuple_GET_ITEM(args, t->nums[k]), part, &q) : NULL;
            Py_XDECREF(part);
            if (!g) goto error;
            if (t->nnums > 1)
                PyTuple_SET_ITEM(pgrads, k, g);
            else
                pgrads = g;
        }
    } else {
        pgrads = Py_NewRef(Py_None);
    }
    if (PyTuple_GET_SIZE(t->names)) {
        if (!(kgrads = PyDict_New())) goto error;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(kw_order); k++, piece++) {
            PyObject *key = PyList_GET_ITEM(kw_order, k);
            Py_ssize_t cnt = PyLong_AsSsize_t(PyList_GET_ITEM(counts, piece));
            PyObject *part = PyList_GetSlice(grads, gpos, gpos + cnt), *g = NULL;
            gpos += cnt;
            Py_ssize_t q = 0;
            PyObject *kv = PyDict_GetItemWithError(kwargs, key);
            if (part && kv) g = mkpy_tree_fill(kv, part, &q);
            Py_XDECREF(part);
            int rc = g ? PyDict_SetItem(kgrads, key, g) : -1;
            Py_XDECREF(g);
            if (rc < 0) goto error;
        }
        PyObject *pair = PyTuple_Pack(2, pgrads, kgrads);
        if (!pair) goto error;
        Py_SETREF(pgrads, pair);
    }
    result = t->kind == K_GRAD ? Py_NewRef(pgrads) : PyTuple_Pack(2, value, pgrads);
error:
    Py_XDECREF(kwargs);
    Py_XDECREF(arrays);
    Py_XDECREF(index);
    Py_XDECREF(counts);
    Py_XDECREF(kw_order);
    Py_XDECREF(cot);
    Py_XDECREF(res);
    Py_XDECREF(value);
    Py_XDECREF(pgrads);
    Py_XDECREF(kgrads);
    Py_XDECREF(c);
    return result;
}

/* ------------------------------------------------------------ vjp / jvp */

/* fun(*xs) as a list: an array output becomes [out] */
static PyObject *call_as_list(mkpy_closure *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "internal flat function takes one list");
        return NULL;
    }
    PyObject *a = PySequence_Tuple(args[0]);
    if (!a) return NULL;
    PyObject *out = PyObject_Call(c->s[0], a, NULL);
    Py_DECREF(a);
    if (!out) return NULL;
    PyObject *r = PyMkArray_Check(out) ? PyList_New(1) : PySequence_List(out);
    if (r && PyMkArray_Check(out)) PyList_SET_ITEM(r, 0, Py_NewRef(out));
    Py_DECREF(out);
    return r;
}

typedef PyObject *(*flat_fn3)(PyObject *fun, PyObject *primals, PyObject *other);

static PyObject *jvp3(PyObject *f, PyObject *p, PyObject *o) {
    return mkpy_jvp_flat(f, p, o);
}

static PyObject *vjp3(PyObject *f, PyObject *p, PyObject *o) {
    return mkpy_vjp_flat(f, p, o, NULL);
}

/* vjp and jvp: (fun, primals, other) parsed once, lists made once */
static PyObject *vjp_jvp(const char *fname, const char *third, flat_fn3 run, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
    const char *const names[] = {"fun", "primals", third, NULL};
    PyObject *a[3] = {NULL, NULL, NULL}, *p = NULL, *o = NULL, *r = NULL;
    mkpy_closure *c = NULL;
    if (mkpy_parse(fname, args, nargs, kwnames, names, 3, a) < 0) return NULL;
    if (!(p = PySequence_List(a[1])) || !(o = PySequence_List(a[2]))) goto error;
    if (!(c = mkpy_closure_new(call_as_list))) goto error;
    mkpy_closure_set(c, 0, a[0]);
    r = run((PyObject *)c, p, o);
error:
    Py_XDECREF(p);
    Py_XDECREF(o);
    Py_XDECREF(c);
    return r;
}

PyDoc_STRVAR(vjp_doc,
             "vjp(fun: Callable, primals: list[array], cotangents: list[array]) -> tuple[list[array], list[array]]\n\n"
             "Compute the vector-Jacobian product: the outputs of ``fun`` at\n"
             "``primals`` and the products of ``cotangents`` with its Jacobian.");

static PyObject *py_vjp(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return vjp_jvp("vjp", "cotangents", vjp3, args, nargs, kwnames);
}

PyDoc_STRVAR(jvp_doc,
             "jvp(fun: Callable, primals: list[array], tangents: list[array]) -> tuple[list[array], list[array]]\n\n"
             "Compute the Jacobian-vector product: the outputs of ``fun`` at\n"
             "``primals`` and the products of its Jacobian with ``tangents``.");

static PyObject *py_jvp(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return vjp_jvp("jvp", "tangents", jvp3, args, nargs, kwnames);
}

/* ------------------------------------------------------------ vmap */

typedef struct {
    PyObject *flat; /* list of ints */
    int output, seen_tuple;
} axes_ctx;

static int axes_leaf(axes_ctx *A, PyObject *x, PyObject *ax) {
    if (!PyMkArray_Check(x)) {
        PyErr_SetString(PyExc_ValueError, "[vmap] The arguments should contain only arrays");
        return -1;
    }
    if (PyTuple_Check(ax)) {
        A->seen_tuple = 1;
        if (PyTuple_GET_SIZE(ax) == 1 && (PyTuple_GET_ITEM(ax, 0) == Py_None || PyLong_Check(PyTuple_GET_ITEM(ax, 0)))) {
            ax = PyTuple_GET_ITEM(ax, 0);
        } else {
            PyErr_SetString(PyExc_ValueError, "[vmap] axis must be int or None.");
            return -1;
        }
    }
    long a = -1;
    if (ax != Py_None) {
        if (!PyLong_Check(ax) || PyBool_Check(ax)) {
            PyErr_SetString(PyExc_ValueError, "[vmap] axis must be int or None.");
            return -1;
        }
        mk_array *arr = MKARR(x);
        long nd = arr->ndim + (A->output ? 1 : 0);
        a = PyLong_AsLong(ax);
        if (a == -1 && PyErr_Occurred()) return -1;
        if (a < 0) a += nd;
        if (a < 0 || a >= nd) {
            char buf[512];
            size_t n = 0;
            buf[n++] = '(';
            for (int d = 0; d < arr->ndim && n < sizeof buf - 32; d++)
                n += (size_t)PyOS_snprintf(buf + n, sizeof buf - n, d ? ",%lld" : "%lld", (long long)arr->shape[d]);
            PyOS_snprintf(buf + n, sizeof buf - n, ")");
            PyErr_Format(PyExc_ValueError, "[vmap] Invalid%svectorization axis %ld for array with shape %s",
                         A->output ? " output " : " ", a, buf);
            return -1;
        }
    }
    PyObject *v = PyLong_FromLong(a);
    int rc = v ? PyList_Append(A->flat, v) : -1;
    Py_XDECREF(v);
    return rc;
}

static int structure_error(void) {
    PyErr_SetString(PyExc_ValueError, "[tree_visit] The trees should have the same structure");
    return -1;
}

static int axes_visit(axes_ctx *A, PyObject *t, PyObject *ax) {
    int rc = 0;
    if (!PyList_Check(t) && !PyTuple_Check(t) && !PyDict_Check(t)) return axes_leaf(A, t, ax);
    if (Py_EnterRecursiveCall(" in vmap's axes")) return -1;
    if (PyList_Check(t) || PyTuple_Check(t)) {
        int paired = PyList_Check(ax) || PyTuple_Check(ax);
        if (paired && (Py_TYPE(ax) != Py_TYPE(t) || PySequence_Fast_GET_SIZE(ax) != PySequence_Fast_GET_SIZE(t))) {
            rc = structure_error();
        }
        for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(t); i++) {
            PyObject *ti = Py_NewRef(PySequence_Fast_GET_ITEM(t, i));
            PyObject *ai = Py_NewRef(paired ? PySequence_Fast_GET_ITEM(ax, i) : ax);
            rc = axes_visit(A, ti, ai);
            Py_DECREF(ti);
            Py_DECREF(ai);
        }
    } else {
        PyObject *k, *v;
        Py_ssize_t p = 0;
        while (rc == 0 && PyDict_Next(t, &p, &k, &v)) {
            PyObject *ai = ax;
            if (PyDict_Check(ax)) {
                ai = PyDict_GetItemWithError(ax, k);
                if (!ai) {
                    rc = PyErr_Occurred() ? -1 : structure_error();
                    break;
                }
            }
            Py_INCREF(v);
            Py_INCREF(ai);
            rc = axes_visit(A, v, ai);
            Py_DECREF(v);
            Py_DECREF(ai);
        }
    }
    Py_LeaveRecursiveCall();
    return rc;
}

/* the normalised axis (-1: none) of each array of tree, from the axes tree */
static PyObject *flat_axes(PyObject *tree, PyObject *axes, int output) {
    axes_ctx A = {PyList_New(0), output, 0};
    if (!A.flat) return NULL;
    if (axes_visit(&A, tree, axes) < 0) {
        Py_DECREF(A.flat);
        return NULL;
    }
    if (A.seen_tuple && !PyMkArray_Check(tree)) {
        PyErr_SetString(PyExc_ValueError, "[vmap] axis must be int or None.");
        Py_DECREF(A.flat);
        return NULL;
    }
    return A.flat;
}

enum { V_FUN, V_ARGS, V_OUT };

/* flat_fun(xs) = flatten(fun(*args with its arrays replaced by xs)) */
static PyObject *vmap_flat_fun(mkpy_closure *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "vmap: internal flat function takes a list");
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *a = mkpy_tree_fill(c->s[V_ARGS], args[0], &pos), *out = NULL, *flat = NULL;
    PyObject *ta = a ? PyList_AsTuple(a) : NULL;
    Py_XDECREF(a);
    if (!ta) return NULL;
    out = PyObject_Call(c->s[V_FUN], ta, NULL);
    Py_DECREF(ta);
    if (!out) return NULL;
    mkpy_closure_set(c, V_OUT, out);
    flat = PyList_New(0);
    if (flat && mkpy_tree_flatten(out, 1, flat) < 0) Py_CLEAR(flat);
    Py_DECREF(out);
    return flat;
}

/* one output of vmap brought from batch axis a to the requested axis w */
static PyObject *place_output(PyObject *o, long a, long w, int64_t size) {
    mk_array *x = MKARR(o), *r = NULL;
    if (a < 0) {
        /* the output does not depend on a mapped input: repeat it */
        int ax = w < 0 ? 0 : (int)w;
        mk_array *e = mk_expand_dims(x, 1, &ax);
        r = e ? mk_repeat(e, size, ax, true) : NULL;
        mk_xdecref(e);
    } else if (w < 0) {
        r = mk_moveaxis(x, (int)a, -1);
    } else if (a != w) {
        if (w >= x->ndim) {
            PyErr_Format(PyExc_ValueError, "[vmap] Axis %ld invalid for output with %d dimensions.", w, x->ndim);
            return NULL;
        }
        r = mk_moveaxis(x, (int)a, (int)w);
    } else {
        return Py_NewRef(o);
    }
    return r ? mkpy_wrap(r) : mkpy_raise();
}

static PyObject *vmap_call(transformed *t, PyObject *args) {
    PyObject *inputs = NULL, *axes = NULL, *res = NULL, *want = NULL, *results = NULL, *argl = NULL, *r = NULL;
    mkpy_closure *c = NULL;
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (!(inputs = PyList_New(0)) || mkpy_tree_flatten(args, 1, inputs) < 0) goto error;
    if (!(axes = flat_axes(nargs == 1 ? PyTuple_GET_ITEM(args, 0) : args, t->in_axes, 0))) goto error;
    int64_t size = -1;
    Py_ssize_t n = PyList_GET_SIZE(inputs) < PyList_GET_SIZE(axes) ? PyList_GET_SIZE(inputs) : PyList_GET_SIZE(axes);
    for (Py_ssize_t i = 0; i < n; i++) {
        long a = PyLong_AsLong(PyList_GET_ITEM(axes, i));
        if (a < 0) continue;
        mk_array *x = MKARR(PyList_GET_ITEM(inputs, i));
        if (x->ndim == 0) {
            PyErr_SetString(PyExc_ValueError, "[vmap] Cannot vmap an input with zero dimensions.");
            goto error;
        }
        if (size >= 0 && x->shape[a] != size) {
            PyErr_Format(PyExc_ValueError, "[vmap] Inconsistent axis sizes: %lld and %lld.", (long long)x->shape[a],
                         (long long)size);
            goto error;
        }
        size = x->shape[a];
    }
    if (size < 0) {
        PyErr_SetString(PyExc_ValueError, "At least one of in_axes must be non-None.");
        goto error;
    }
    if (!(argl = PySequence_List(args)) || !(c = mkpy_closure_new(vmap_flat_fun))) goto error;
    mkpy_closure_set(c, V_FUN, t->fun);
    mkpy_closure_set(c, V_ARGS, argl);
    if (!(res = mkpy_vmap_flat((PyObject *)c, inputs, axes))) goto error;
    PyObject *outs = PyTuple_GET_ITEM(res, 0), *oaxes = PyTuple_GET_ITEM(res, 1);
    if (!(want = flat_axes(c->s[V_OUT], t->out_axes, 1))) goto error;
    if (PyList_GET_SIZE(want) != PyList_GET_SIZE(outs)) {
        PyErr_Format(PyExc_ValueError, "[vmap] The number of out axes (%zd) must match the number of outputs (%zd).",
                     PyList_GET_SIZE(want), PyList_GET_SIZE(outs));
        goto error;
    }
    if (!(results = PyList_New(PyList_GET_SIZE(outs)))) goto error;
    for (Py_ssize_t j = 0; j < PyList_GET_SIZE(outs); j++) {
        PyObject *o = place_output(PyList_GET_ITEM(outs, j), PyLong_AsLong(PyList_GET_ITEM(oaxes, j)),
                                   PyLong_AsLong(PyList_GET_ITEM(want, j)), size);
        if (!o) goto error;
        PyList_SET_ITEM(results, j, o);
    }
    Py_ssize_t pos = 0;
    r = mkpy_tree_fill(c->s[V_OUT], results, &pos);
error:
    Py_XDECREF(inputs);
    Py_XDECREF(axes);
    Py_XDECREF(res);
    Py_XDECREF(want);
    Py_XDECREF(results);
    Py_XDECREF(argl);
    Py_XDECREF(c);
    return r;
}

/* ------------------------------------------------------------ checkpoint */

enum { C_FUN, C_ARGS, C_KWARGS, C_OUT };

/* flat_fun(xs): fun on (args, kwargs) with their arrays replaced by xs; the
 * first call's output gives the output structure */
static PyObject *ckpt_flat_fun(mkpy_closure *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "checkpoint: internal flat function takes a list");
        return NULL;
    }
    PyObject *both = PyTuple_Pack(2, c->s[C_ARGS], c->s[C_KWARGS]), *filled = NULL, *ta = NULL, *out = NULL;
    Py_ssize_t pos = 0;
    if (!both || !(filled = mkpy_tree_fill(both, args[0], &pos))) goto error;
    if (!(ta = PySequence_Tuple(PyTuple_GET_ITEM(filled, 0)))) goto error;
    out = PyObject_Call(c->s[C_FUN], ta, PyTuple_GET_ITEM(filled, 1));
error:
    Py_XDECREF(both);
    Py_XDECREF(filled);
    Py_XDECREF(ta);
    if (!out) return NULL;
    if (!c->s[C_OUT]) mkpy_closure_set(c, C_OUT, out);
    PyObject *flat = PyList_New(0);
    if (flat && mkpy_tree_flatten(out, 0, flat) < 0) Py_CLEAR(flat);
    Py_DECREF(out);
    return flat;
}

/* the vjp rule: fun runs again on the primals (made to wait for the
 * forward outputs, as MLX's depends) and its vjp gives the cotangents; no
 * intermediate of the forward pass is kept for the backward one */
static PyObject *ckpt_vjp(mkpy_closure *v, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "checkpoint: internal vjp takes (primals, cotangents, outputs)");
        return NULL;
    }
    PyObject *prim = args[0], *outs = args[2], *dep = NULL, *res = NULL, *r = NULL;
    Py_ssize_t n = PyList_GET_SIZE(prim), m = PyList_GET_SIZE(outs);
    mk_array **in = PyMem_Calloc(n ? n : 1, sizeof *in), **ds = PyMem_Calloc(m ? m : 1, sizeof *ds);
    mk_array **po = PyMem_Calloc(n ? n : 1, sizeof *po);
    if (!in || !ds || !po) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) in[i] = MKARR(PyList_GET_ITEM(prim, i));
    for (Py_ssize_t j = 0; j < m; j++) ds[j] = MKARR(PyList_GET_ITEM(outs, j));
    if (mk_depends((int)n, in, (int)m, ds, po) < 0) {
        mkpy_raise();
        goto error;
    }
    dep = mkpy_wrap_list(po, (int)n); /* steals po's references */
    memset(po, 0, n * sizeof *po);
    if (!dep) goto error;
    if (!(res = mkpy_vjp_flat(v->s[0], dep, args[1], NULL))) goto error;
    r = Py_NewRef(PyTuple_GET_ITEM(res, 1));
error:
    Py_XDECREF(dep);
    Py_XDECREF(res);
    PyMem_Free(in);
    PyMem_Free(ds);
    PyMem_Free(po);
    return r;
}

static PyObject *ckpt_call(transformed *t, PyObject *args, PyObject *kwargs) {
    PyObject *both = NULL, *inputs = NULL, *outs = NULL, *r = NULL;
    mkpy_closure *c = NULL, *v = NULL;
    if (!(c = mkpy_closure_new(ckpt_flat_fun)) || !(v = mkpy_closure_new(ckpt_vjp))) goto error;
    PyObject *kw = kwargs ? PyDict_Copy(kwargs) : PyDict_New();
    if (!kw) goto error;
    mkpy_closure_set(c, C_FUN, t->fun);
    mkpy_closure_set(c, C_ARGS, args);
    mkpy_closure_set(c, C_KWARGS, kw);
    Py_DECREF(kw);
    mkpy_closure_set(v, 0, (PyObject *)c);
    if (!(both = PyTuple_Pack(2, args, c->s[C_KWARGS])) || !(inputs = PyList_New(0))) goto error;
    if (mkpy_tree_flatten(both, 0, inputs) < 0) goto error;
    if (!(outs = mkpy_custom_flat((PyObject *)c, inputs, (PyObject *)v, Py_None, Py_None))) goto error;
    Py_ssize_t pos = 0;
    r = mkpy_tree_fill(c->s[C_OUT], outs, &pos);
error:
    Py_XDECREF(both);
    Py_XDECREF(inputs);
    Py_XDECREF(outs);
    Py_XDECREF(c);
    Py_XDECREF(v);
    return r;
}

/* ------------------------------------------------------------ the type */

static PyObject *transformed_call(transformed *t, PyObject *args, PyObject *kwargs) {
    switch (t->kind) {
    case K_GRAD:
    case K_VALUE_AND_GRAD:
        return grad_call(t, args, kwargs);
    case K_VMAP:
        if (kwargs && PyDict_GET_SIZE(kwargs)) {
            PyErr_SetString(PyExc_TypeError, "a vmapped function takes positional arguments only");
            return NULL;
        }
        return vmap_call(t, args);
    default:
        return ckpt_call(t, args, kwargs);
    }
}

static int transformed_traverse(transformed *t, visitproc visit, void *arg) {
    Py_VISIT(t->dict);
    Py_VISIT(t->fun);
    Py_VISIT(t->names);
    Py_VISIT(t->in_axes);
    Py_VISIT(t->out_axes);
    return 0;
}

static int transformed_clear(transformed *t) {
    Py_CLEAR(t->dict);
    Py_CLEAR(t->fun);
    Py_CLEAR(t->names);
    Py_CLEAR(t->in_axes);
    Py_CLEAR(t->out_axes);
    return 0;
}

static void transformed_dealloc(transformed *t) {
    PyObject_GC_UnTrack(t);
    if (t->weakreflist) PyObject_ClearWeakRefs((PyObject *)t);
    transformed_clear(t);
    PyMem_Free(t->nums);
    PyObject_GC_Del(t);
}

/* bound as a method when stored on a class, as a function would be */
static PyObject *transformed_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (!obj || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *transformed_repr(transformed *t) {
    static const char *const kinds[] = {"grad", "value_and_grad", "vmap", "checkpoint"};
    return PyUnicode_FromFormat("<mkpy.%s of %R>", kinds[t->kind], t->fun);
}

static PyTypeObject transformed_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.transformed_function",
    .tp_basicsize = sizeof(transformed),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A function returned by grad, value_and_grad, vmap or checkpoint.",
    .tp_call = (ternaryfunc)transformed_call,
    .tp_repr = (reprfunc)transformed_repr,
    .tp_traverse = (traverseproc)transformed_traverse,
    .tp_clear = (inquiry)transformed_clear,
    .tp_dealloc = (destructor)transformed_dealloc,
    .tp_descr_get = transformed_get,
    .tp_dictoffset = offsetof(transformed, dict),
    .tp_weaklistoffset = offsetof(transformed, weakreflist),
};

static transformed *transformed_new(int kind, PyObject *fun) {
    if (!PyCallable_Check(fun)) {
        PyErr_SetString(PyExc_TypeError, "[transforms] Expected a callable function.");
        return NULL;
    }
    transformed *t = PyObject_GC_New(transformed, &transformed_Type);
    if (!t) return NULL;
    t->dict = t->weakreflist = t->names = t->in_axes = t->out_axes = NULL;
    t->nums = NULL;
    t->nnums = 0;
    t->kind = kind;
    t->fun = Py_NewRef(fun);
    PyObject_GC_Track(t);
    /* functools.wraps: only for callables with a __name__ (as before) */
    if (PyObject_HasAttrString(fun, "__name__") && mkpy_update_wrapper(&t->dict, fun) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return t;
}

/* ------------------------------------------------------- module functions */

static int cmp_ssize(const void *a, const void *b) {
    Py_ssize_t x = *(const Py_ssize_t *)a, y = *(const Py_ssize_t *)b;
    return x < y ? -1 : x > y;
}

/* argnums (None, int or sequence) and argnames (str or sequence) checked
 * as MLX does, into t */
static int set_argnums(transformed *t, PyObject *argnums, PyObject *argnames) {
    const char *tag = grad_tag(t);
    PyObject *names = NULL;
    if (!argnames || PyUnicode_Check(argnames)) {
        names = argnames ? PyTuple_Pack(1, argnames) : PyTuple_New(0);
    } else {
        /* distinct names, in their order */
        PyObject *seq = PySequence_Tuple(argnames);
        PyObject *l = seq ? PyList_New(0) : NULL;
        for (Py_ssize_t i = 0; l && i < PyTuple_GET_SIZE(seq); i++) {
            int has = PySequence_Contains(l, PyTuple_GET_ITEM(seq, i));
            if (has < 0 || (!has && PyList_Append(l, PyTuple_GET_ITEM(seq, i)) < 0)) Py_CLEAR(l);
        }
        names = l ? PyList_AsTuple(l) : NULL;
        Py_XDECREF(l);
        Py_XDECREF(seq);
    }
    if (!names) return -1;
    t->names = names;
    PyObject *nums = NULL;
    if (!argnums || argnums == Py_None)
        nums = PyTuple_GET_SIZE(names) ? PyTuple_New(0) : Py_BuildValue("(i)", 0);
    else if (PyLong_Check(argnums))
        nums = PyTuple_Pack(1, argnums);
    else
        nums = PySequence_Tuple(argnums);
    if (!nums) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(nums);
    t->nums = PyMem_Calloc(n ? n : 1, sizeof *t->nums);
    if (!t->nums) {
        Py_DECREF(nums);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        t->nums[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(nums, i));
        if (t->nums[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(nums);
            return -1;
        }
    }
    Py_DECREF(nums);
    t->nnums = n;
    if (!n && !PyTuple_GET_SIZE(names)) {
        PyErr_Format(PyExc_ValueError, "%s Gradient wrt no argument requested", tag);
        return -1;
    }
    qsort(t->nums, n, sizeof *t->nums, cmp_ssize);
    if (n && t->nums[0] < 0) {
        PyErr_Format(PyExc_ValueError, "%s Can't compute the gradient of negative argument index %zd", tag, t->nums[0]);
        return -1;
    }
    for (Py_ssize_t i = 1; i < n; i++)
        if (t->nums[i] == t->nums[i - 1]) {
            PyErr_Format(PyExc_ValueError, "%s Duplicate argument index %zd is not allowed.", tag, t->nums[0]);
            return -1;
        }
    return 0;
}

static PyObject *make_grad(int kind, const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"fun", "argnums", "argnames", NULL};
    PyObject *a[3] = {NULL, NULL, NULL};
    if (mkpy_parse(fname, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    transformed *t = transformed_new(kind, a[0]);
    if (!t) return NULL;
    if (set_argnums(t, a[1], a[2]) < 0) {
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

PyDoc_STRVAR(grad_doc,
             "grad(fun: Callable, argnums: int | Sequence[int] | None = None, argnames: str | Sequence[str] = []) "
             "-> Callable\n\n"
             "Returns a function which computes the gradient of ``fun`` (which must\n"
             "return a scalar array) with respect to the arguments in ``argnums`` and\n"
             "``argnames``.");

static PyObject *py_grad(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return make_grad(K_GRAD, "grad", args, nargs, kwnames);
}

PyDoc_STRVAR(value_and_grad_doc,
             "value_and_grad(fun: Callable, argnums: int | Sequence[int] | None = None, argnames: str | "
             "Sequence[str] = []) -> Callable\n\n"
             "Returns a function which computes the value and gradient of ``fun``. The\n"
             "function should return a scalar loss or a tuple whose first element is a\n"
             "scalar loss (the rest can be anything).");

static PyObject *py_value_and_grad(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return make_grad(K_VALUE_AND_GRAD, "value_and_grad", args, nargs, kwnames);
}

PyDoc_STRVAR(vmap_doc,
             "vmap(fun: Callable, in_axes: object = 0, out_axes: object = 0) -> Callable\n\n"
             "Returns a vectorized version of ``fun``: it maps ``fun`` over the axes\n"
             "``in_axes`` of its inputs and stacks the results along ``out_axes``.");

static PyObject *py_vmap(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"fun", "in_axes", "out_axes", NULL};
    PyObject *a[3] = {NULL, NULL, NULL};
    (void)m;
    if (mkpy_parse("vmap", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    transformed *t = transformed_new(K_VMAP, a[0]);
    if (!t) return NULL;
    PyObject *zero = PyLong_FromLong(0);
    if (!zero) {
        Py_DECREF(t);
        return NULL;
    }
    t->in_axes = Py_NewRef(a[1] ? a[1] : zero);
    t->out_axes = Py_NewRef(a[2] ? a[2] : zero);
    Py_DECREF(zero);
    return (PyObject *)t;
}

PyDoc_STRVAR(checkpoint_doc,
             "checkpoint(fun: Callable) -> Callable\n\n"
             "Returns a function computing the same values and gradients as ``fun``\n"
             "without keeping ``fun``'s intermediates for the backward pass: the\n"
             "gradient runs ``fun`` again on the saved inputs (gradient checkpointing).");

static PyObject *py_checkpoint(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"fun", NULL};
    PyObject *a[1] = {NULL};
    (void)m;
    if (mkpy_parse("checkpoint", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    return (PyObject *)transformed_new(K_CHECKPOINT, a[0]);
}

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

PyMethodDef mkpy_grad_functions[] = {
    {"grad", FN(py_grad), FASTKW, grad_doc},
    {"value_and_grad", FN(py_value_and_grad), FASTKW, value_and_grad_doc},
    {"vjp", FN(py_vjp), FASTKW, vjp_doc},
    {"jvp", FN(py_jvp), FASTKW, jvp_doc},
    {"vmap", FN(py_vmap), FASTKW, vmap_doc},
    {"checkpoint", FN(py_checkpoint), FASTKW, checkpoint_doc},
    {NULL, NULL, 0, NULL},
};

int mkpy_grad_init(PyObject *m) {
    (void)m;
    if (PyType_Ready(&mkpy_closure_Type) < 0) return -1;
    return PyType_Ready(&transformed_Type);
}
