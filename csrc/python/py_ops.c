/* Module functions for the element-wise ops, where, rounding and clipping,
 * isclose, and eval. Unary and binary functions are generated from the op
 * lists in core/ops.h, so each op is declared once. */
#include <math.h>
#include <string.h>

#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

static PyObject *call_unary(mk_unary_op op, const char *name, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
    static const char *const names[] = {"a", "*stream", NULL};
    PyObject *a[2];
    if (mkpy_parse(name, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_unary(op, x);
    mk_decref(x);
    return mkpy_wrap(r);
}

static PyObject *call_binary(mk_binary_op op, const char *name, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "*stream", NULL};
    PyObject *a[3];
    if (mkpy_parse(name, args, nargs, kwnames, names, 2, a) < 0) return NULL;
    mk_array *x, *y;
    if (mkpy_to_arrays(a[0], a[1], &x, &y) < 0) return NULL;
    mk_array *r = mk_binary(op, x, y);
    mk_decref(x);
    mk_decref(y);
    return mkpy_wrap(r);
}

#define UNARY_FN(name)                                                                                 \
    static PyObject *py_##name(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return call_unary(MK_UNARY_##name, #name, args, nargs, kw);                                    \
    }
#define BINARY_FN(name)                                                                                \
    static PyObject *py_##name(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return call_binary(MK_BINARY_##name, #name, args, nargs, kw);                                  \
    }
MK_UNARY_PLAIN_OPS(UNARY_FN)
MK_BINARY_OPS(BINARY_FN)

/* ------------------------------------------------------------- where */

static PyObject *py_where(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"condition", "x", "y", "*stream", NULL};
    PyObject *a[4];
    (void)m;
    if (mkpy_parse("where", args, nargs, kwnames, names, 3, a) < 0) return NULL;
    mk_array *c = mkpy_to_array(a[0], -1), *x = NULL, *y = NULL, *r = NULL;
    if (c && mkpy_to_arrays(a[1], a[2], &x, &y) == 0) {
        r = mk_where(c, x, y);
        if (!r) mkpy_raise();
    }
    mk_xdecref(c);
    mk_xdecref(x);
    mk_xdecref(y);
    return r ? mkpy_wrap(r) : NULL;
}

/* ------------------------------------------------------ round and clip */

static PyObject *py_round_decimals(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "decimals", "*stream", NULL};
    PyObject *a[3];
    int64_t decimals = 0;
    (void)m;
    if (mkpy_parse("round", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (a[1] && mkpy_parse_int(a[1], &decimals) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r;
    if (decimals == 0 || !mk_is_inexact(x->dtype)) {
        r = mk_unary(MK_UNARY_round, x);
    } else {
        /* as MLX: round(x * 10^d) / 10^d */
        mk_array *s = mk_scalar_f64(x->dtype, pow(10.0, (double)decimals));
        mk_array *t = s ? mk_binary(MK_BINARY_multiply, x, s) : NULL;
        mk_array *u = t ? mk_unary(MK_UNARY_round, t) : NULL;
        r = u ? mk_binary(MK_BINARY_divide, u, s) : NULL;
        mk_xdecref(s);
        mk_xdecref(t);
        mk_xdecref(u);
    }
    mk_decref(x);
    return mkpy_wrap(r);
}

static PyObject *py_clip(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "a_min", "a_max", "*stream", NULL};
    PyObject *a[4];
    (void)m;
    if (mkpy_parse("clip", args, nargs, kwnames, names, 3, a) < 0) return NULL;
    if (a[1] == Py_None && a[2] == Py_None) {
        PyErr_SetString(PyExc_ValueError, "At most one of a_min and a_max may be None");
        return NULL;
    }
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = x;
    for (int k = 1; k <= 2 && r; k++) {
        if (a[k] == Py_None) continue;
        mk_array *b = mkpy_to_array_weak(a[k], x->dtype);
        if (!b) {
            mk_decref(r);
            return NULL;
        }
        mk_array *t = mk_binary(k == 1 ? MK_BINARY_maximum : MK_BINARY_minimum, r, b);
        mk_decref(b);
        mk_decref(r);
        r = t;
        if (!r) return mkpy_raise();
    }
    return mkpy_wrap(r);
}

/* isclose: |a - b| <= atol + rtol * |b|, or a == b (infinities), or both nan
 * with equal_nan. Built from ops, as MLX does. */
mk_array *mkpy_isclose(mk_array *a, mk_array *b, double rtol, double atol, int equal_nan) {
    mk_dtype t = mk_promote(a->dtype, b->dtype);
    mk_array *d = NULL, *ad = NULL, *ab = NULL, *rt = NULL, *at = NULL, *rhs = NULL, *tol = NULL, *le = NULL,
             *eq = NULL, *out = NULL, *n1 = NULL, *n2 = NULL, *nn = NULL;
    mk_dtype ft = mk_to_float(t);
    if (!(d = mk_binary(MK_BINARY_subtract, a, b))) goto done;
    if (!(ad = mk_unary(MK_UNARY_abs, d))) goto done;
    if (!(ab = mk_unary(MK_UNARY_abs, b))) goto done;
    if (!(rt = mk_scalar_f64(ft == MK_COMPLEX64 ? MK_FLOAT32 : ft, rtol))) goto done;
    if (!(at = mk_scalar_f64(ft == MK_COMPLEX64 ? MK_FLOAT32 : ft, atol))) goto done;
    if (!(rhs = mk_binary(MK_BINARY_multiply, rt, ab))) goto done;
    if (!(tol = mk_binary(MK_BINARY_add, at, rhs))) goto done;
    if (!(le = mk_binary(MK_BINARY_less_equal, ad, tol))) goto done;
    if (!(eq = mk_binary(MK_BINARY_equal, a, b))) goto done;
    if (!(out = mk_binary(MK_BINARY_logical_or, le, eq))) goto done;
    if (equal_nan) {
        mk_array *o2 = NULL;
        if ((n1 = mk_unary(MK_UNARY_isnan, a)) && (n2 = mk_unary(MK_UNARY_isnan, b)) &&
            (nn = mk_binary(MK_BINARY_logical_and, n1, n2)))
            o2 = mk_binary(MK_BINARY_logical_or, out, nn);
        mk_decref(out);
        out = o2;
    }
done:
    mk_xdecref(d);
    mk_xdecref(ad);
    mk_xdecref(ab);
    mk_xdecref(rt);
    mk_xdecref(at);
    mk_xdecref(rhs);
    mk_xdecref(tol);
    mk_xdecref(le);
    mk_xdecref(eq);
    mk_xdecref(n1);
    mk_xdecref(n2);
    mk_xdecref(nn);
    return out;
}

/* Parses (a, b, rtol, atol, equal_nan) and returns the isclose node. */
mk_array *mkpy_isclose_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "rtol", "atol", "*equal_nan", "*stream", NULL};
    PyObject *a[6];
    double rtol = 1e-5, atol = 1e-8;
    int equal_nan = 0;
    if (mkpy_parse(fname, args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (a[2] && (rtol = PyFloat_AsDouble(a[2])) == -1.0 && PyErr_Occurred()) return NULL;
    if (a[3] && (atol = PyFloat_AsDouble(a[3])) == -1.0 && PyErr_Occurred()) return NULL;
    if (mkpy_parse_bool(a[4], 0, &equal_nan) < 0) return NULL;
    mk_array *x, *y;
    if (mkpy_to_arrays(a[0], a[1], &x, &y) < 0) return NULL;
    mk_array *r = mkpy_isclose(x, y, rtol, atol, equal_nan);
    mk_decref(x);
    mk_decref(y);
    if (!r) mkpy_raise();
    return r;
}

static PyObject *py_isclose(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    mk_array *r = mkpy_isclose_args("isclose", args, nargs, kwnames);
    return r ? mkpy_wrap(r) : NULL;
}

/* ---------------------------------------------------------------- eval */

typedef struct {
    mk_array **items;
    int n, cap;
} arr_list;

static int collect(PyObject *o, arr_list *l, int depth) {
    if (depth > 1000) {
        PyErr_SetString(PyExc_RecursionError, "[eval] Nesting too deep.");
        return -1;
    }
    if (PyMkArray_Check(o)) {
        if (l->n == l->cap) {
            int cap = l->cap ? l->cap * 2 : 16;
            mk_array **items = PyMem_Realloc(l->items, cap * sizeof *items);
            if (!items) {
                PyErr_NoMemory();
                return -1;
            }
            l->items = items;
            l->cap = cap;
        }
        l->items[l->n++] = MKARR(o);
        return 0;
    }
    if (PyList_Check(o) || PyTuple_Check(o)) {
        PyObject *seq = PySequence_Fast(o, "");
        if (!seq) return -1;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++)
            if (collect(PySequence_Fast_GET_ITEM(seq, i), l, depth + 1) < 0) {
                Py_DECREF(seq);
                return -1;
            }
        Py_DECREF(seq);
        return 0;
    }
    if (PyDict_Check(o)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(o, &pos, &k, &v))
            if (collect(v, l, depth + 1) < 0) return -1;
        return 0;
    }
    /* MLX ignores other leaves */
    return 0;
}

static PyObject *eval_args(PyObject *const *args, Py_ssize_t nargs) {
    arr_list l = {0};
    for (Py_ssize_t i = 0; i < nargs; i++)
        if (collect(args[i], &l, 0) < 0) {
            PyMem_Free(l.items);
            return NULL;
        }
    int rc = l.n ? mkpy_eval(l.items, l.n) : 0;
    PyMem_Free(l.items);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_eval(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    return eval_args(args, nargs);
}

static PyObject *py_synchronize(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    (void)args;
    (void)nargs;
    Py_RETURN_NONE;
}

/* _from_bytes(data, shape, dtype_name): the inverse of pickling. */
static PyObject *py_from_bytes(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyUnicode_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "_from_bytes(bytes, shape, dtype_name)");
        return NULL;
    }
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    if (mkpy_parse_shape(args[1], &ndim, shape) < 0) return NULL;
    int t = mk_dtype_from_name(PyUnicode_AsUTF8(args[2]));
    if (t < 0) {
        PyErr_SetString(PyExc_ValueError, "unknown dtype");
        return NULL;
    }
    mk_array *a = mk_array_empty((mk_dtype)t, ndim, shape);
    if (!a) return mkpy_raise();
    size_t nb = (size_t)a->size * mk_dtype_size(a->dtype);
    if ((size_t)PyBytes_GET_SIZE(args[0]) != nb) {
        mk_decref(a);
        PyErr_SetString(PyExc_ValueError, "_from_bytes: size mismatch");
        return NULL;
    }
    memcpy(a->buf->data, PyBytes_AS_STRING(args[0]), nb);
    return mkpy_wrap(a);
}

#define UNARY_ENTRY(name) {#name, FN(py_##name), FASTKW, #name "(a, /, *, stream=None) -> array\n--\n\nElement-wise " #name "."},
#define BINARY_ENTRY(name)                                                                             \
    {#name, FN(py_##name), FASTKW, #name "(a, b, /, *, stream=None) -> array\n--\n\nElement-wise " #name " with broadcasting."},

PyMethodDef mkpy_ops_functions[] = {
    MK_UNARY_PLAIN_OPS(UNARY_ENTRY)
    {"conj", FN(py_conjugate), FASTKW, "conj(a, /, *, stream=None) -> array\n--\n\nComplex conjugate."},
    MK_BINARY_OPS(BINARY_ENTRY)
    {"where", FN(py_where), FASTKW,
     "where(condition, x, y, /, *, stream=None) -> array\n--\n\nx where condition is true, else y."},
    {"round", FN(py_round_decimals), FASTKW,
     "round(a, /, decimals=0, *, stream=None) -> array\n--\n\nRound half to even to the given decimals."},
    {"clip", FN(py_clip), FASTKW,
     "clip(a, /, a_min, a_max, *, stream=None) -> array\n--\n\nClip values to [a_min, a_max]."},
    {"isclose", FN(py_isclose), FASTKW,
     "isclose(a, b, /, rtol=1e-05, atol=1e-08, *, equal_nan=False, stream=None) -> array\n--\n\n"
     "Element-wise |a - b| <= atol + rtol * |b|."},
    {"eval", FN(py_eval), METH_FASTCALL,
     "eval(*args) -> None\n--\n\nEvaluate arrays, or trees (lists, tuples, dicts) of arrays."},
    {"async_eval", FN(py_eval), METH_FASTCALL,
     "async_eval(*args) -> None\n--\n\nStart evaluating arrays. mkpy evaluates them before returning."},
    {"synchronize", FN(py_synchronize), METH_FASTCALL,
     "synchronize(stream=None) -> None\n--\n\nWait for queued work (mkpy's eval is synchronous)."},
    {"_from_bytes", FN(py_from_bytes), METH_FASTCALL, NULL},
    {NULL},
};
