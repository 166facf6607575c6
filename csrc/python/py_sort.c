/* Module functions of the sort family: sort, argsort, partition,
 * argpartition, topk, and the scans cumsum, cumprod, cummax, cummin,
 * logcumsumexp, with MLX 0.32's signatures.
 *
 * MLX binds these with `a: array` (not ScalarOrArray) and strict nanobind
 * casters, so a list, a scalar or a NumPy array as `a`, a float axis, an int
 * for reverse/inclusive, an int beyond int32, a missing argument or an
 * unknown keyword all raise its "incompatible function arguments"
 * TypeError; the checks below reproduce that. */
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

/* An int that fits int32 (Python ints, bools and __index__ objects; not
 * floats). Returns 0, or -1 without an exception set. */
static int int32_arg(PyObject *o, int *out) {
    if (PyFloat_Check(o) || !PyIndex_Check(o)) return -1;
    PyObject *i = PyNumber_Index(o);
    if (!i) {
        PyErr_Clear();
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow || (v == -1 && PyErr_Occurred()) || v < INT32_MIN || v > INT32_MAX) {
        PyErr_Clear();
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* Parses against names; any mismatch becomes MLX's TypeError listing sig.
 * The first name is positional-only. */
static int parse(const char *fname, const char *sig, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                 const char *const *names, int nrequired, PyObject **out) {
    if (nargs < 1 || mkpy_parse(fname, args, nargs, kwnames, names, nrequired, out) < 0 || !PyMkArray_Check(out[0])) {
        PyErr_Clear();
        mkpy_bad_call(fname, sig, args, nargs, kwnames);
        return -1;
    }
    return 0;
}

/* axis: None (flatten) or an int32; absent means dflt_none ? None : -1. */
static int axis_arg(PyObject *o, bool dflt_none, int *axis, bool *has_axis) {
    if (!o) {
        *has_axis = !dflt_none;
        *axis = -1;
        return 0;
    }
    if (o == Py_None) {
        *has_axis = false;
        *axis = 0;
        return 0;
    }
    *has_axis = true;
    return int32_arg(o, axis);
}

static int bool_arg(PyObject *o, int dflt, bool *out) {
    if (!o) {
        *out = dflt;
        return 0;
    }
    if (!PyBool_Check(o)) return -1;
    *out = o == Py_True;
    return 0;
}

/* ------------------------------------------------------- sort, argsort */

#define SORT_SIG(name) "    1. " #name "(a: array, /, axis: None | int = -1, *, stream: StreamOrDevice = None) -> array"

static PyObject *call_sort(bool arg, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "axis", "*stream", NULL};
    const char *fname = arg ? "argsort" : "sort";
    const char *sig = arg ? SORT_SIG(argsort) : SORT_SIG(sort);
    PyObject *a[3];
    int axis;
    bool has_axis;
    if (parse(fname, sig, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (axis_arg(a[1], false, &axis, &has_axis) < 0) return mkpy_bad_call(fname, sig, args, nargs, kwnames);
    mk_array *x = MKARR(a[0]);
    return mkpy_wrap(arg ? mk_argsort(x, axis, has_axis) : mk_sort(x, axis, has_axis));
}

MKPY_STREAM_BINDING(py_sort)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return call_sort(false, args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_argsort)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return call_sort(true, args, nargs, kwnames);
}

/* ------------------------------------------- partition, argpartition, topk */

#define PART_SIG(name, k)                                                                              \
    "    1. " #name "(a: array, /, " #k ": int, axis: None | int = -1, *, stream: StreamOrDevice = None) -> array"

enum { K_PART, K_ARGPART, K_TOPK };

static PyObject *call_kth(int which, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const part_names[] = {"a", "kth", "axis", "*stream", NULL};
    static const char *const topk_names[] = {"a", "k", "axis", "*stream", NULL};
    static const char *const fnames[] = {"partition", "argpartition", "topk"};
    static const char *const sigs[] = {PART_SIG(partition, kth), PART_SIG(argpartition, kth), PART_SIG(topk, k)};
    const char *fname = fnames[which], *sig = sigs[which];
    PyObject *a[4];
    int kth, axis;
    bool has_axis;
    if (parse(fname, sig, args, nargs, kwnames, which == K_TOPK ? topk_names : part_names, 2, a) < 0) return NULL;
    if (int32_arg(a[1], &kth) < 0 || axis_arg(a[2], false, &axis, &has_axis) < 0)
        return mkpy_bad_call(fname, sig, args, nargs, kwnames);
    mk_array *x = MKARR(a[0]);
    switch (which) {
    case K_PART: return mkpy_wrap(mk_partition(x, kth, axis, has_axis));
    case K_ARGPART: return mkpy_wrap(mk_argpartition(x, kth, axis, has_axis));
    default: return mkpy_wrap(mk_topk(x, kth, axis, has_axis));
    }
}

MKPY_STREAM_BINDING(py_partition)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return call_kth(K_PART, args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_argpartition)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return call_kth(K_ARGPART, args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_topk)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return call_kth(K_TOPK, args, nargs, kwnames);
}

/* ------------------------------------------------------------------ scans */

#define SCAN_SIG(name)                                                                                 \
    "    1. " #name "(a: array, /, axis: int | None = None, *, reverse: bool = False, inclusive: bool = True, " \
    "stream: StreamOrDevice = None) -> array"
#define SCAN_SIG_DT(name)                                                                              \
    "    1. " #name "(a: array, /, axis: int | None = None, *, reverse: bool = False, inclusive: bool = True, " \
    "dtype: Dtype | None = None, stream: StreamOrDevice = None) -> array"

/* cumsum and cumprod take dtype= (the input is cast to it first). */
static PyObject *call_scan(mk_scan_op op, const char *fname, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    static const char *const names[] = {"a", "axis", "*reverse", "*inclusive", "*stream", NULL};
    static const char *const names_dt[] = {"a", "axis", "*reverse", "*inclusive", "*dtype", "*stream", NULL};
    static const char *const sigs[] = {SCAN_SIG_DT(cumsum), SCAN_SIG_DT(cumprod), SCAN_SIG(cummax), SCAN_SIG(cummin),
                                       SCAN_SIG(logcumsumexp)};
    bool with_dtype = op == MK_SCAN_SUM || op == MK_SCAN_PROD;
    const char *sig = sigs[op];
    PyObject *a[6];
    int axis;
    bool has_axis, reverse, inclusive;
    if (parse(fname, sig, args, nargs, kwnames, with_dtype ? names_dt : names, 1, a) < 0) return NULL;
    PyObject *dt = with_dtype ? a[4] : NULL;
    if (axis_arg(a[1], true, &axis, &has_axis) < 0 || bool_arg(a[2], 0, &reverse) < 0 ||
        bool_arg(a[3], 1, &inclusive) < 0 || (dt && dt != Py_None && !PyMkDtype_Check(dt)))
        return mkpy_bad_call(fname, sig, args, nargs, kwnames);
    mk_array *x = MKARR(a[0]);
    if (dt && dt != Py_None) {
        x = mk_as_dtype(x, ((PyMkDtype *)dt)->dtype);
        if (!x) return mkpy_raise();
    } else {
        mk_incref(x);
    }
    mk_array *r = mk_scan(op, x, axis, has_axis, reverse, inclusive);
    mk_decref(x);
    return mkpy_wrap(r);
}

#define SCAN_FN(name, OP)                                                                              \
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return call_scan(OP, #name, args, nargs, kw);                                                  \
    }
SCAN_FN(cumsum, MK_SCAN_SUM)
SCAN_FN(cumprod, MK_SCAN_PROD)
SCAN_FN(cummax, MK_SCAN_MAX)
SCAN_FN(cummin, MK_SCAN_MIN)
SCAN_FN(logcumsumexp, MK_SCAN_LOGADDEXP)

#define SCAN_DOC(name, what)                                                                           \
    #name "(a, /, axis=None, *, reverse=False, inclusive=True, stream=None)\n--\n\n"                   \
    "Cumulative " what " along axis (of the flattened array when axis is None)."
#define SCAN_DOC_DT(name, what)                                                                        \
    #name "(a, /, axis=None, *, reverse=False, inclusive=True, dtype=None, stream=None)\n--\n\n"       \
    "Cumulative " what " along axis (of the flattened array when axis is None), of a cast to dtype "   \
    "when one is given."

PyMethodDef mkpy_sort_functions[] = {
    {"sort", FN(py_sort), FASTKW,
     "sort(a, /, axis=-1, *, stream=None)\n--\n\n"
     "A sorted copy along axis (of the flattened array when axis is None); nan sorts last."},
    {"argsort", FN(py_argsort), FASTKW,
     "argsort(a, /, axis=-1, *, stream=None)\n--\n\n"
     "Indices (uint32) that sort along axis, stably (ties keep their order, nan last)."},
    {"partition", FN(py_partition), FASTKW,
     "partition(a, /, kth, axis=-1, *, stream=None)\n--\n\n"
     "A copy with the kth element in its sorted place, smaller ones before it and larger ones after."},
    {"argpartition", FN(py_argpartition), FASTKW,
     "argpartition(a, /, kth, axis=-1, *, stream=None)\n--\n\n"
     "Indices (uint32) that partition along axis around the kth element."},
    {"topk", FN(py_topk), FASTKW,
     "topk(a, /, k, axis=-1, *, stream=None)\n--\n\n"
     "The k largest elements along axis, in no particular order."},
    {"cumsum", FN(py_cumsum), FASTKW, SCAN_DOC_DT(cumsum, "sum")},
    {"cumprod", FN(py_cumprod), FASTKW, SCAN_DOC_DT(cumprod, "product")},
    {"cummax", FN(py_cummax), FASTKW, SCAN_DOC(cummax, "maximum")},
    {"cummin", FN(py_cummin), FASTKW, SCAN_DOC(cummin, "minimum")},
    {"logcumsumexp", FN(py_logcumsumexp), FASTKW, SCAN_DOC(logcumsumexp, "log(sum(exp))")},
    {NULL},
};
