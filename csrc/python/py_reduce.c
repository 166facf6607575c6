/* Module functions of the reduce family: sum, prod, max, min, all, any,
 * mean, var, std, logsumexp, argmax, argmin, softmax, allclose and
 * array_equal, with MLX's signatures. */
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

/* (a, /, axis=None, keepdims=False, [ddof=0,] *, stream=None) */
typedef struct {
    mk_array *x;
    int naxes;
    int axes[MK_MAX_NDIM];
    int keepdims;
    int ddof;
} reduce_args;

static int parse_reduce(const char *fname, bool with_ddof, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames, reduce_args *r) {
    static const char *const names[] = {"a", "axis", "keepdims", "*stream", NULL};
    static const char *const names_ddof[] = {"a", "axis", "keepdims", "ddof", "*stream", NULL};
    PyObject *a[5];
    if (mkpy_parse(fname, args, nargs, kwnames, with_ddof ? names_ddof : names, 1, a) < 0) return -1;
    if (mkpy_parse_axes(a[1], &r->naxes, r->axes) < 0) return -1;
    if (mkpy_parse_bool(a[2], 0, &r->keepdims) < 0) return -1;
    r->ddof = 0;
    if (with_ddof && a[3]) {
        int64_t d;
        if (mkpy_parse_int(a[3], &d) < 0 || mkpy_int32_value(d, &r->ddof) < 0) return -1;
    }
    r->x = mkpy_to_array(a[0], -1);
    return r->x ? 0 : -1;
}

static PyObject *call_reduce(mk_reduce_op op, const char *name, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames) {
    reduce_args r;
    if (parse_reduce(name, false, args, nargs, kwnames, &r) < 0) return NULL;
    mk_array *out = mk_reduce(op, r.x, r.naxes, r.axes, r.keepdims);
    mk_decref(r.x);
    return mkpy_wrap(out);
}

#define REDUCE_FN(name, OP)                                                                            \
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return call_reduce(OP, #name, args, nargs, kw);                                                \
    }
REDUCE_FN(sum, MK_REDUCE_SUM)
REDUCE_FN(prod, MK_REDUCE_PROD)
REDUCE_FN(max, MK_REDUCE_MAX)
REDUCE_FN(min, MK_REDUCE_MIN)
REDUCE_FN(all, MK_REDUCE_ALL)
REDUCE_FN(any, MK_REDUCE_ANY)

MKPY_STREAM_BINDING(py_mean)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    reduce_args r;
    (void)m;
    if (parse_reduce("mean", false, args, nargs, kwnames, &r) < 0) return NULL;
    mk_array *out = mk_mean(r.x, r.naxes, r.axes, r.keepdims);
    mk_decref(r.x);
    return mkpy_wrap(out);
}

MKPY_STREAM_BINDING(py_logsumexp)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    reduce_args r;
    (void)m;
    if (parse_reduce("logsumexp", false, args, nargs, kwnames, &r) < 0) return NULL;
    mk_array *out = mk_logsumexp(r.x, r.naxes, r.axes, r.keepdims);
    mk_decref(r.x);
    return mkpy_wrap(out);
}

MKPY_STREAM_BINDING(py_var)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    reduce_args r;
    (void)m;
    if (parse_reduce("var", true, args, nargs, kwnames, &r) < 0) return NULL;
    mk_array *out = mk_var(r.x, r.naxes, r.axes, r.keepdims, r.ddof);
    mk_decref(r.x);
    return mkpy_wrap(out);
}

MKPY_STREAM_BINDING(py_std)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    reduce_args r;
    (void)m;
    if (parse_reduce("std", true, args, nargs, kwnames, &r) < 0) return NULL;
    mk_array *out = mk_std(r.x, r.naxes, r.axes, r.keepdims, r.ddof);
    mk_decref(r.x);
    return mkpy_wrap(out);
}

/* argmax(a, /, axis=None, keepdims=False, *, stream=None) */
static PyObject *call_arg(int which, const char *name, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
    static const char *const names[] = {"a", "axis", "keepdims", "*stream", NULL};
    PyObject *a[4];
    int64_t axis = 0;
    int keepdims;
    if (mkpy_parse(name, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    bool has_axis = a[1] && a[1] != Py_None;
    int axis32 = 0;
    if (has_axis && (mkpy_parse_int(a[1], &axis) < 0 || mkpy_int32_value(axis, &axis32) < 0)) return NULL;
    if (mkpy_parse_bool(a[2], 0, &keepdims) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *out = which == 0 ? mk_argmax(x, axis32, has_axis, keepdims) : mk_argmin(x, axis32, has_axis, keepdims);
    mk_decref(x);
    return mkpy_wrap(out);
}

MKPY_STREAM_BINDING(py_argmax)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return call_arg(0, "argmax", args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_argmin)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return call_arg(1, "argmin", args, nargs, kwnames);
}

/* softmax(a, /, axis=None, *, precise=False, stream=None) */
MKPY_STREAM_BINDING(py_softmax)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "axis", "*precise", "*stream", NULL};
    PyObject *a[4];
    int naxes, axes[MK_MAX_NDIM], precise;
    (void)m;
    if (mkpy_parse("softmax", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (mkpy_parse_axes(a[1], &naxes, axes) < 0) return NULL;
    if (mkpy_parse_bool(a[2], 0, &precise) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *out = mk_softmax(x, naxes, axes, precise);
    mk_decref(x);
    return mkpy_wrap(out);
}

/* allclose: all(isclose(a, b, ...)) */
MKPY_STREAM_BINDING(py_allclose)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    mk_array *c = mkpy_isclose_args("allclose", args, nargs, kwnames);
    if (!c) return NULL;
    mk_array *out = mk_reduce(MK_REDUCE_ALL, c, -1, NULL, false);
    mk_decref(c);
    return mkpy_wrap(out);
}

/* array_equal(a, b, /, equal_nan=False, *, stream=None): False when the
 * shapes differ; values compared after promotion. */
MKPY_STREAM_BINDING(py_array_equal)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "equal_nan", "*stream", NULL};
    PyObject *a[4];
    int equal_nan;
    (void)m;
    if (mkpy_parse("array_equal", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (mkpy_parse_bool(a[2], 0, &equal_nan) < 0) return NULL;
    mk_array *x, *y;
    if (mkpy_to_arrays(a[0], a[1], &x, &y) < 0) return NULL;
    mk_array *out = NULL;
    bool same = x->ndim == y->ndim;
    for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
    if (!same) {
        bool f = false;
        out = mk_scalar(MK_BOOL, &f);
    } else {
        mk_array *eq = mk_binary(MK_BINARY_equal, x, y);
        if (eq && equal_nan && mk_is_inexact(mk_promote(x->dtype, y->dtype))) {
            mk_array *nx = mk_unary(MK_UNARY_isnan, x), *ny = mk_unary(MK_UNARY_isnan, y);
            mk_array *nn = nx && ny ? mk_binary(MK_BINARY_logical_and, nx, ny) : NULL;
            mk_array *e2 = nn ? mk_binary(MK_BINARY_logical_or, eq, nn) : NULL;
            mk_xdecref(nx);
            mk_xdecref(ny);
            mk_xdecref(nn);
            mk_decref(eq);
            eq = e2;
        }
        if (eq) out = mk_reduce(MK_REDUCE_ALL, eq, -1, NULL, false);
        mk_xdecref(eq);
    }
    mk_decref(x);
    mk_decref(y);
    return mkpy_wrap(out);
}

#define REDUCE_DOC(name, what)                                                                         \
    #name "(a, /, axis=None, keepdims=False, *, stream=None)\n--\n\n" what                    \
    " over the given axes (all axes when axis is None)."

PyMethodDef mkpy_reduce_functions[] = {
    {"sum", FN(py_sum), FASTKW, REDUCE_DOC(sum, "Sum")},
    {"prod", FN(py_prod), FASTKW, REDUCE_DOC(prod, "Product")},
    {"max", FN(py_max), FASTKW, REDUCE_DOC(max, "Maximum")},
    {"min", FN(py_min), FASTKW, REDUCE_DOC(min, "Minimum")},
    {"all", FN(py_all), FASTKW, REDUCE_DOC(all, "Logical and")},
    {"any", FN(py_any), FASTKW, REDUCE_DOC(any, "Logical or")},
    {"mean", FN(py_mean), FASTKW, REDUCE_DOC(mean, "Mean")},
    {"logsumexp", FN(py_logsumexp), FASTKW, REDUCE_DOC(logsumexp, "log(sum(exp(a))), computed stably,")},
    {"var", FN(py_var), FASTKW,
     "var(a, /, axis=None, keepdims=False, ddof=0, *, stream=None)\n--\n\n"
     "Variance over the given axes, divided by N - ddof."},
    {"std", FN(py_std), FASTKW,
     "std(a, /, axis=None, keepdims=False, ddof=0, *, stream=None)\n--\n\n"
     "Standard deviation over the given axes, with N - ddof."},
    {"argmax", FN(py_argmax), FASTKW,
     "argmax(a, /, axis=None, keepdims=False, *, stream=None)\n--\n\n"
     "Index of the first maximum (uint32), of the flattened array when axis is None."},
    {"argmin", FN(py_argmin), FASTKW,
     "argmin(a, /, axis=None, keepdims=False, *, stream=None)\n--\n\n"
     "Index of the first minimum (uint32), of the flattened array when axis is None."},
    {"softmax", FN(py_softmax), FASTKW,
     "softmax(a, /, axis=None, *, precise=False, stream=None)\n--\n\n"
     "exp(a) / sum(exp(a)) over the given axes, computed stably."},
    {"allclose", FN(py_allclose), FASTKW,
     "allclose(a, b, /, rtol=1e-05, atol=1e-08, *, equal_nan=False, stream=None)\n--\n\n"
     "Whether every |a - b| <= atol + rtol * |b|."},
    {"array_equal", FN(py_array_equal), FASTKW,
     "array_equal(a, b, /, equal_nan=False, *, stream=None)\n--\n\n"
     "Whether a and b have the same shape and equal values."},
    {NULL},
};
