/* Module functions for the element-wise ops, where, rounding and clipping,
 * isclose, and eval. Unary and binary functions are generated from the op
 * lists in core/ops.h, so each op is declared once. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "mkpy.h"
#include "core/transforms.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

static PyObject *call_unary(mk_unary_op op, const char *name, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames) {
    static const char *const names[] = {"a", "*stream", NULL};
    PyObject *a[2];
    if (mkpy_parse(name, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    mk_array *x = mkpy_to_array_arg(a[0], -1);
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
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return call_unary(MK_UNARY_##name, #name, args, nargs, kw);                                    \
    }
#define BINARY_FN(name)                                                                                \
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return call_binary(MK_BINARY_##name, #name, args, nargs, kw);                                  \
    }
MK_UNARY_PLAIN_OPS(UNARY_FN)
MK_BINARY_OPS(BINARY_FN)

/* ------------------------------------------------------------- where */

MKPY_STREAM_BINDING(py_where)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"condition", "x", "y", "*stream", NULL};
    PyObject *a[4];
    (void)m;
    if (mkpy_parse("where", args, nargs, kwnames, names, 3, a) < 0) return NULL;
    mk_array *c = NULL, *x = NULL, *y = NULL, *r = NULL;
    /* x and y first, as MLX converts them */
    if (mkpy_to_arrays(a[1], a[2], &x, &y) == 0 && (c = mkpy_to_array_arg(a[0], -1))) {
        r = mk_where(c, x, y);
        if (!r) mkpy_raise();
    }
    mk_xdecref(c);
    mk_xdecref(x);
    mk_xdecref(y);
    return r ? mkpy_wrap(r) : NULL;
}

/* ------------------------------------------------------ round and clip */

MKPY_STREAM_BINDING(py_round_decimals)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "decimals", "*stream", NULL};
    PyObject *a[3];
    int64_t decimals = 0;
    (void)m;
    if (mkpy_parse("round", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (a[1] && mkpy_parse_int(a[1], &decimals) < 0) return NULL;
    mk_array *x = mkpy_to_array_arg(a[0], -1);
    if (!x) return NULL;
    mk_array *r;
    if (decimals == 0) {
        r = mk_unary(MK_UNARY_round, x);
    } else {
        /* as MLX: round(x * s) * (1 / s) in at least float32, s = 10^decimals
         * as a float, then back to x's dtype */
        mk_dtype ft = mk_is_inexact(x->dtype) ? x->dtype : MK_FLOAT32;
        float scale = (float)pow(10.0, (double)decimals);
        mk_array *s = mk_scalar_f64(ft, scale), *inv = mk_scalar_f64(ft, 1.0f / scale);
        mk_array *t = s && inv ? mk_binary(MK_BINARY_multiply, x, s) : NULL;
        mk_array *u = t ? mk_unary(MK_UNARY_round, t) : NULL;
        mk_array *v = u ? mk_binary(MK_BINARY_multiply, u, inv) : NULL;
        r = v ? mk_as_dtype(v, x->dtype) : NULL;
        mk_xdecref(s);
        mk_xdecref(inv);
        mk_xdecref(t);
        mk_xdecref(u);
        mk_xdecref(v);
    }
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_clip)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "a_min", "a_max", "*stream", NULL};
    PyObject *a[4];
    (void)m;
    if (mkpy_parse("clip", args, nargs, kwnames, names, 3, a) < 0) return NULL;
    if (a[1] == Py_None && a[2] == Py_None) {
        PyErr_SetString(PyExc_ValueError, "At most one of a_min and a_max may be None");
        return NULL;
    }
    if (!PyMkArray_Check(a[0])) {
        PyErr_Format(PyExc_TypeError, "clip(): incompatible function arguments: a must be an array, not %s.",
                     Py_TYPE(a[0])->tp_name);
        return NULL;
    }
    mk_array *x = MKARR(a[0]);
    mk_incref(x);
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

/* isclose, built from ops as MLX does: |a - b| <= atol + rtol * |b| with
 * float32 constants, false where either value is infinite unless both are
 * infinities of one sign, and nan == nan with equal_nan. */
mk_array *mkpy_isclose(mk_array *a, mk_array *b, double rtol, double atol, int equal_nan) {
    enum { D, AD, AB, RT, AT, RHS, TOL, LE, PA, PB, NA, NB, ANYA, ANYB, ANY, NOTANY, BP, BN, BOTH, T1, N1, N2, NN, NTMP };
    mk_array *t[NTMP] = {0}, *out = NULL;
    if (!(t[D] = mk_binary(MK_BINARY_subtract, a, b))) goto done;
    if (!(t[AD] = mk_unary(MK_UNARY_abs, t[D]))) goto done;
    if (!(t[AB] = mk_unary(MK_UNARY_abs, b))) goto done;
    if (!(t[RT] = mk_scalar_f64(MK_FLOAT32, rtol))) goto done;
    if (!(t[AT] = mk_scalar_f64(MK_FLOAT32, atol))) goto done;
    if (!(t[RHS] = mk_binary(MK_BINARY_multiply, t[RT], t[AB]))) goto done;
    if (!(t[TOL] = mk_binary(MK_BINARY_add, t[AT], t[RHS]))) goto done;
    if (!(t[LE] = mk_binary(MK_BINARY_less_equal, t[AD], t[TOL]))) goto done;
    if (!(t[PA] = mk_unary(MK_UNARY_isposinf, a)) || !(t[PB] = mk_unary(MK_UNARY_isposinf, b))) goto done;
    if (!(t[NA] = mk_unary(MK_UNARY_isneginf, a)) || !(t[NB] = mk_unary(MK_UNARY_isneginf, b))) goto done;
    if (!(t[ANYA] = mk_binary(MK_BINARY_logical_or, t[PA], t[NA]))) goto done;
    if (!(t[ANYB] = mk_binary(MK_BINARY_logical_or, t[PB], t[NB]))) goto done;
    if (!(t[ANY] = mk_binary(MK_BINARY_logical_or, t[ANYA], t[ANYB]))) goto done;
    if (!(t[NOTANY] = mk_unary(MK_UNARY_logical_not, t[ANY]))) goto done;
    if (!(t[BP] = mk_binary(MK_BINARY_logical_and, t[PA], t[PB]))) goto done;
    if (!(t[BN] = mk_binary(MK_BINARY_logical_and, t[NA], t[NB]))) goto done;
    if (!(t[BOTH] = mk_binary(MK_BINARY_logical_or, t[BP], t[BN]))) goto done;
    if (!(t[T1] = mk_binary(MK_BINARY_logical_and, t[LE], t[NOTANY]))) goto done;
    if (!(out = mk_binary(MK_BINARY_logical_or, t[T1], t[BOTH]))) goto done;
    if (equal_nan) {
        mk_array *o2 = NULL;
        if ((t[N1] = mk_unary(MK_UNARY_isnan, a)) && (t[N2] = mk_unary(MK_UNARY_isnan, b)) &&
            (t[NN] = mk_binary(MK_BINARY_logical_and, t[N1], t[N2])))
            o2 = mk_binary(MK_BINARY_logical_or, out, t[NN]);
        mk_decref(out);
        out = o2;
    }
done:
    for (int i = 0; i < NTMP; i++) mk_xdecref(t[i]);
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
    if (!PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1])) {
        PyErr_Format(PyExc_TypeError, "%s(): incompatible function arguments: a and b must be arrays.", fname);
        return NULL;
    }
    mk_array *r = mkpy_isclose(MKARR(a[0]), MKARR(a[1]), rtol, atol, equal_nan);
    if (!r) mkpy_raise();
    return r;
}

MKPY_STREAM_BINDING(py_isclose)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    mk_array *r = mkpy_isclose_args("isclose", args, nargs, kwnames);
    return r ? mkpy_wrap(r) : NULL;
}

/* ---------------------------------------------------------------- eval */

/* A growable array of pointers (PyMem). */
typedef struct {
    void **items;
    Py_ssize_t n, cap;
} ptr_list;

static int ptr_push(ptr_list *l, void *p) {
    if (l->n == l->cap) {
        Py_ssize_t cap = l->cap ? l->cap * 2 : 16;
        void **items = PyMem_Realloc(l->items, (size_t)cap * sizeof *items);
        if (!items) {
            PyErr_NoMemory();
            return -1;
        }
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = p;
    return 0;
}

/* Collects the arrays of a tree of lists, tuples and dicts (other leaves
 * are ignored, as in MLX), with an explicit stack so nesting depth is not
 * limited by the C stack. The tree is only read, so borrowed references
 * stay valid. */
static int collect(PyObject *root, ptr_list *arrays) {
    ptr_list stack = {0};
    int rc = ptr_push(&stack, root);
    while (rc == 0 && stack.n) {
        PyObject *o = stack.items[--stack.n];
        if (PyMkArray_Check(o)) {
            rc = ptr_push(arrays, MKARR(o));
        } else if (PyList_Check(o) || PyTuple_Check(o)) {
            Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
            PyObject **items = PySequence_Fast_ITEMS(o);
            for (Py_ssize_t i = n - 1; i >= 0 && rc == 0; i--) rc = ptr_push(&stack, items[i]);
        } else if (PyDict_Check(o)) {
            PyObject *k, *v;
            Py_ssize_t pos = 0;
            while (rc == 0 && PyDict_Next(o, &pos, &k, &v)) rc = ptr_push(&stack, v);
        }
    }
    PyMem_Free(stack.items);
    return rc;
}

/* async_eval's errors, as MLX's: the work of async_eval runs on its
 * stream's queue there, so an op that fails raises at the next synchronize
 * of that stream, not at async_eval. mkpy's async_eval runs the work at once
 * (with the GIL released, as eval); an error it meets is kept here, one per
 * stream (the first), and raised by synchronize(stream). The failed nodes
 * stay unevaluated: using the arrays raises the error again. Under the GIL. */
#define PENDING_MAX 64
static struct {
    mk_stream s;
    PyObject *type, *value, *tb;
} pending[PENDING_MAX];
static int npending;

static bool pending_has(mk_stream s) {
    for (int i = 0; i < npending; i++)
        if (pending[i].s == s) return true;
    return false;
}

/* Keeps the raised error for the streams of the arrays left unevaluated.
 * Returns 0 when kept (error cleared), -1 (error still set) otherwise:
 * interrupts and other BaseExceptions, or no room. */
static int pending_keep(mk_array *const *arrs, Py_ssize_t n) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    mk_stream ss[PENDING_MAX];
    int ns = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (mk_is_evaluated(arrs[i])) continue;
        mk_stream s = arrs[i]->stream;
        if (s == MK_STREAM_NONE) s = mk_default_stream(mk_default_device());
        bool seen = pending_has(s);
        for (int k = 0; k < ns && !seen; k++) seen = ss[k] == s;
        if (seen) continue;
        if (npending + ns == PENDING_MAX) return -1;
        ss[ns++] = s;
    }
    if (!ns) return -1;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    for (int k = 0; k < ns; k++) {
        pending[npending].s = ss[k];
        pending[npending].type = Py_XNewRef(t);
        pending[npending].value = Py_XNewRef(v);
        pending[npending].tb = Py_XNewRef(tb);
        npending++;
    }
    Py_XDECREF(t);
    Py_XDECREF(v);
    Py_XDECREF(tb);
    return 0;
}

/* Raises (and forgets) the error kept for s: -1 when there was one. */
static int pending_raise(mk_stream s) {
    for (int i = 0; i < npending; i++) {
        if (pending[i].s != s) continue;
        PyErr_Restore(pending[i].type, pending[i].value, pending[i].tb);
        pending[i] = pending[--npending];
        return -1;
    }
    return 0;
}

static PyObject *eval_args(PyObject *const *args, Py_ssize_t nargs, bool async) {
    ptr_list l = {0};
    for (Py_ssize_t i = 0; i < nargs; i++)
        if (collect(args[i], &l) < 0) {
            PyMem_Free(l.items);
            return NULL;
        }
    int rc = 0;
    if (l.n > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "[eval] Too many arrays.");
        rc = -1;
    } else if (async && l.n && mk_tracing()) {
        /* MLX: async_eval of an array that depends on a transformation's
         * tracer (inside grad, vmap, ...) is refused */
        int t = mk_graph_has_tracer((int)l.n, (mk_array *const *)l.items);
        if (t != 0) {
            if (t > 0) PyErr_SetString(PyExc_ValueError, "[async_eval] Not allowed inside a graph transformation.");
            else mkpy_raise();
            rc = -1;
        } else {
            rc = mkpy_eval((mk_array *const *)l.items, (int)l.n);
        }
    } else if (l.n) {
        /* a stream this thread cannot use raises here (as MLX's async_eval) */
        for (Py_ssize_t i = 0; async && i < l.n && rc == 0; i++) {
            mk_array *x = l.items[i];
            if (!mk_is_evaluated(x) && x->stream != MK_STREAM_NONE && mk_stream_check_usable(x->stream) < 0) {
                mkpy_raise();
                rc = -1;
            }
        }
        if (rc == 0 && (rc = mkpy_eval((mk_array *const *)l.items, (int)l.n)) < 0 && async &&
            pending_keep((mk_array *const *)l.items, l.n) == 0)
            rc = 0;
    }
    PyMem_Free(l.items);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *py_eval(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    return eval_args(args, nargs, false);
}

static PyObject *py_async_eval(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    return eval_args(args, nargs, true);
}

static PyObject *py_synchronize(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "synchronize() takes at most 1 argument (%zd given)", nargs);
        return NULL;
    }
    mk_stream s;
    if (mkpy_stream_resolve("synchronize", nargs ? args[0] : Py_None, &s) < 0) return NULL;
    if (pending_raise(s) < 0) return NULL;
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

#define UNARY_ENTRY(name) {#name, FN(py_##name), FASTKW, #name "(a, /, *, stream=None)\n--\n\nElement-wise " #name "."},
#define BINARY_ENTRY(name)                                                                             \
    {#name, FN(py_##name), FASTKW, #name "(a, b, /, *, stream=None)\n--\n\nElement-wise " #name " with broadcasting."},

PyMethodDef mkpy_ops_functions[] = {
    MK_UNARY_PLAIN_OPS(UNARY_ENTRY)
    {"conj", FN(py_conjugate), FASTKW, "conj(a, /, *, stream=None)\n--\n\nComplex conjugate."},
    MK_BINARY_OPS(BINARY_ENTRY)
    {"where", FN(py_where), FASTKW,
     "where(condition, x, y, /, *, stream=None)\n--\n\nx where condition is true, else y."},
    {"round", FN(py_round_decimals), FASTKW,
     "round(a, /, decimals=0, *, stream=None)\n--\n\nRound half to even to the given decimals."},
    {"clip", FN(py_clip), FASTKW,
     "clip(a, /, a_min, a_max, *, stream=None)\n--\n\nClip values to [a_min, a_max]."},
    {"isclose", FN(py_isclose), FASTKW,
     "isclose(a, b, /, rtol=1e-05, atol=1e-08, *, equal_nan=False, stream=None)\n--\n\n"
     "Element-wise |a - b| <= atol + rtol * |b|."},
    {"eval", FN(py_eval), METH_FASTCALL,
     "eval(*args)\n--\n\nEvaluate arrays, or trees (lists, tuples, dicts) of arrays."},
    {"async_eval", FN(py_async_eval), METH_FASTCALL,
     "async_eval(*args)\n--\n\nStart evaluating arrays. mkpy evaluates them before returning; an error "
     "is raised by the next synchronize() of the arrays' stream."},
    {"synchronize", FN(py_synchronize), METH_FASTCALL,
     "synchronize(stream=None)\n--\n\nWait for queued work (mkpy's eval is synchronous) and raise the "
     "error an async_eval on that stream met."},
    {"_from_bytes", FN(py_from_bytes), METH_FASTCALL, NULL},
    {NULL},
};
