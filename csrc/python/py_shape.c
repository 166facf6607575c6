/* Module functions of the shape family: reshape and the other views,
 * concatenate, stack, split, tile, repeat, pad, broadcasting helpers. */
#include <limits.h>
#include <string.h>

#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

/* ------------------------------------------------------- argument helpers */

/* An int-like scalar: Python int or bool, an object with __index__ that is
 * not a sequence (numpy integers), or a 0-d integer mkpy array. Returns 1
 * and sets *v, 0 when obj is not int-like, -1 on error (overflow). */
static int as_int(PyObject *obj, int64_t *v) {
    PyObject *i;
    if (PyFloat_Check(obj) || PyComplex_Check(obj) || PyUnicode_Check(obj)) return 0;
    if (PyMkArray_Check(obj)) {
        mk_array *a = MKARR(obj);
        if (a->ndim != 0 || !(mk_is_integral(a->dtype) || a->dtype == MK_BOOL)) return 0;
        i = mkpy_item(a);
    } else if (PyLong_Check(obj) || (PyIndex_Check(obj) && !PySequence_Check(obj))) {
        i = PyNumber_Index(obj);
    } else {
        return 0;
    }
    if (!i) return -1;
    long long x = PyLong_AsLongLong(i);
    Py_DECREF(i);
    if (x == -1 && PyErr_Occurred()) return -1;
    *v = x;
    return 1;
}

static int bad_type(const char *fname, const char *what, PyObject *obj) {
    PyErr_Format(PyExc_TypeError, "%s(): %s must be %s, not %s.", fname, what,
                 strcmp(what, "axis") == 0 || strcmp(what, "repeats") == 0 || strcmp(what, "source") == 0 ||
                         strcmp(what, "destination") == 0 || strcmp(what, "axis1") == 0 ||
                         strcmp(what, "axis2") == 0 || strcmp(what, "start_axis") == 0 ||
                         strcmp(what, "end_axis") == 0
                     ? "an int"
                     : "an int or a sequence of ints",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

static int parse_i64(const char *fname, const char *what, PyObject *obj, int64_t *out) {
    int r = as_int(obj, out);
    if (r == 0) return bad_type(fname, what, obj);
    return r < 0 ? -1 : 0;
}

static int parse_axis(const char *fname, const char *what, PyObject *obj, int *out) {
    int64_t v;
    if (parse_i64(fname, what, obj, &v) < 0) return -1;
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s(): %s %lld does not fit in a C int.", fname, what, (long long)v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* A sequence of ints (list, tuple, numpy array, 1-d mkpy array), or one int
 * when allow_int. Returns a PyMem block (free with PyMem_Free) of *n items. */
static int64_t *parse_ints(const char *fname, const char *what, PyObject *obj, int allow_int, Py_ssize_t *n) {
    int64_t v, *out;
    int r = as_int(obj, &v);
    if (r < 0) return NULL;
    if (r > 0) {
        if (!allow_int) {
            bad_type(fname, what, obj);
            return NULL;
        }
        if (!(out = PyMem_Malloc(sizeof *out))) return (int64_t *)PyErr_NoMemory();
        *out = v;
        *n = 1;
        return out;
    }
    PyObject *src = obj, *tmp = NULL, *seq;
    if (PyMkArray_Check(obj)) {
        if (!(tmp = mkpy_tolist(MKARR(obj)))) return NULL;
        src = tmp;
    }
    if (PyUnicode_Check(src) || PyBytes_Check(src) || PyDict_Check(src) || !PySequence_Check(src)) {
        Py_XDECREF(tmp);
        bad_type(fname, what, obj);
        return NULL;
    }
    seq = PySequence_Fast(src, "");
    Py_XDECREF(tmp);
    if (!seq) {
        PyErr_Clear();
        bad_type(fname, what, obj);
        return NULL;
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    out = PyMem_Malloc((size_t)(len ? len : 1) * sizeof *out);
    if (!out) {
        Py_DECREF(seq);
        return (int64_t *)PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        r = as_int(it, &out[i]);
        if (r <= 0) {
            if (r == 0) bad_type(fname, what, obj);
            PyMem_Free(out);
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    *n = len;
    return out;
}

/* A shape (at most MK_MAX_NDIM ints). */
static int parse_shape(const char *fname, const char *what, PyObject *obj, int allow_int, int *ndim, int64_t *shape) {
    Py_ssize_t n;
    int64_t *v = parse_ints(fname, what, obj, allow_int, &n);
    if (!v) return -1;
    if (n > MK_MAX_NDIM) {
        PyMem_Free(v);
        PyErr_Format(PyExc_ValueError, "[%s] Arrays of more than %d dimensions are not supported.", fname,
                     MK_MAX_NDIM);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (v[i] < INT32_MIN || v[i] > INT32_MAX) {
            /* MLX's dims are C ints: nanobind's message, naming the value */
            PyErr_Format(PyExc_OverflowError, "Integer value %lld is outside the supported range [-2147483648, "
                         "2147483647].", (long long)v[i]);
            PyMem_Free(v);
            return -1;
        }
    memcpy(shape, v, (size_t)n * sizeof *v);
    PyMem_Free(v);
    *ndim = (int)n;
    return 0;
}

/* A list of axes (ints that fit in C int). */
static int parse_axis_list(const char *fname, const char *what, PyObject *obj, int *naxes, int *axes) {
    int64_t v[MK_MAX_NDIM];
    int n;
    if (parse_shape(fname, what, obj, 1, &n, v) < 0) return -1;
    for (int i = 0; i < n; i++) {
        if (v[i] < INT_MIN || v[i] > INT_MAX) {
            PyErr_Format(PyExc_OverflowError, "%s(): axis %lld does not fit in a C int.", fname, (long long)v[i]);
            return -1;
        }
        axes[i] = (int)v[i];
    }
    *naxes = n;
    return 0;
}

/* The arrays of a sequence (list, tuple or an array along its first axis):
 * new core references in *out (PyMem block), or NULL. */
static mk_array **parse_arrays(const char *fname, PyObject *obj, Py_ssize_t *n) {
    if (PyUnicode_Check(obj) || (!PySequence_Check(obj) && !PyMkArray_Check(obj))) {
        PyErr_Format(PyExc_TypeError, "%s(): arrays must be a sequence of arrays, not %s.", fname,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(obj, "");
    if (!seq) return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    if (len > INT_MAX) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "[%s] Too many arrays.", fname);
        return NULL;
    }
    mk_array **out = PyMem_Calloc((size_t)(len ? len : 1), sizeof *out);
    if (!out) {
        Py_DECREF(seq);
        return (mk_array **)PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyMkArray_Check(it)) {
            PyErr_Format(PyExc_TypeError, "%s(): expected a sequence of arrays but item %zd is %s.", fname, i,
                         Py_TYPE(it)->tp_name);
            for (Py_ssize_t k = 0; k < i; k++) mk_decref(out[k]);
            PyMem_Free(out);
            Py_DECREF(seq);
            return NULL;
        }
        out[i] = MKARR(it);
        mk_incref(out[i]);
    }
    Py_DECREF(seq);
    *n = len;
    return out;
}

static void free_arrays(mk_array **a, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) mk_decref(a[i]);
    PyMem_Free(a);
}

/* One input array, then the op applied by `fn` with the parsed arguments. */
#define PARSE(name, nreq)                                                                              \
    PyObject *a[sizeof names / sizeof *names];                                                         \
    (void)m;                                                                                           \
    if (mkpy_parse(name, args, nargs, kwnames, names, nreq, a) < 0) return NULL

/* ------------------------------------------------------------------ views */

MKPY_STREAM_BINDING(py_reshape)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "shape", "*stream", NULL};
    PARSE("reshape", 2);
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    if (parse_shape("reshape", "shape", a[1], 1, &ndim, shape) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_reshape(x, ndim, shape);
    mk_decref(x);
    return mkpy_wrap(r);
}

static PyObject *transpose_impl(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "axes", "*stream", NULL};
    PyObject *a[3];
    if (mkpy_parse(fname, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    int naxes = -1, axes[MK_MAX_NDIM];
    if (a[1] && a[1] != Py_None && parse_axis_list(fname, "axes", a[1], &naxes, axes) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_transpose(x, naxes, axes);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_transpose)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return transpose_impl("transpose", args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_permute_dims)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return transpose_impl("permute_dims", args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_swapaxes)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "axis1", "axis2", "*stream", NULL};
    PARSE("swapaxes", 3);
    int a1, a2;
    if (parse_axis("swapaxes", "axis1", a[1], &a1) < 0 || parse_axis("swapaxes", "axis2", a[2], &a2) < 0)
        return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_swapaxes(x, a1, a2);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_moveaxis)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "source", "destination", "*stream", NULL};
    PARSE("moveaxis", 3);
    int s, d;
    if (parse_axis("moveaxis", "source", a[1], &s) < 0 || parse_axis("moveaxis", "destination", a[2], &d) < 0)
        return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_moveaxis(x, s, d);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_expand_dims)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "axis", "*stream", NULL};
    PARSE("expand_dims", 2);
    int naxes, axes[MK_MAX_NDIM];
    if (parse_axis_list("expand_dims", "axis", a[1], &naxes, axes) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_expand_dims(x, naxes, axes);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_squeeze)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "axis", "*stream", NULL};
    PARSE("squeeze", 1);
    int naxes = -1, axes[MK_MAX_NDIM];
    if (a[1] && a[1] != Py_None && parse_axis_list("squeeze", "axis", a[1], &naxes, axes) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_squeeze(x, naxes, axes);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_contiguous)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "allow_col_major", "*stream", NULL};
    PARSE("contiguous", 1);
    int allow_col = 0;
    if (mkpy_parse_bool(a[1], 0, &allow_col) < 0) return NULL;
    mk_array *x = mkpy_to_array_arg(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_contiguous(x, allow_col);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_flatten)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "start_axis", "end_axis", "*stream", NULL};
    PARSE("flatten", 1);
    int s = 0, e = -1;
    if (a[1] && parse_axis("flatten", "start_axis", a[1], &s) < 0) return NULL;
    if (a[2] && parse_axis("flatten", "end_axis", a[2], &e) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_flatten(x, s, e);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_unflatten)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "axis", "shape", "*stream", NULL};
    PARSE("unflatten", 3);
    int axis, ndim;
    int64_t shape[MK_MAX_NDIM];
    if (parse_axis("unflatten", "axis", a[1], &axis) < 0) return NULL;
    if (parse_shape("unflatten", "shape", a[2], 0, &ndim, shape) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_unflatten(x, axis, ndim, shape);
    mk_decref(x);
    return r ? mkpy_wrap(r) : mkpy_raise();
}

/* ------------------------------------------------------- diagonal, diag */

/* MLX binds these with `a: array` and nanobind's int casters: a list, a
 * scalar or a NumPy array as `a`, a float or an int beyond int32 as an
 * offset or axis, a missing argument or an unknown keyword all raise the
 * "incompatible function arguments" TypeError. */
#define DIAGONAL_SIG                                                                                   \
    "    1. diagonal(a: array, offset: int = 0, axis1: int = 0, axis2: int = 1, stream: StreamOrDevice = " \
    "None) -> array"
#define DIAG_SIG "    1. diag(a: array, /, k: int = 0, *, stream: StreamOrDevice = None) -> array"

/* An int that fits int32 (ints, bools, __index__ objects such as NumPy
 * integers); absent: dflt. Returns 0, or -1 with no exception set. */
static int int32_arg(PyObject *o, int dflt, int *out) {
    if (!o) {
        *out = dflt;
        return 0;
    }
    if (PyFloat_Check(o) || !PyIndex_Check(o)) return -1;
    PyObject *i = PyNumber_Index(o);
    if (!i) {
        PyErr_Clear();
        return -1;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow || (v == -1 && PyErr_Occurred()) || v < INT_MIN || v > INT_MAX) {
        PyErr_Clear();
        return -1;
    }
    *out = (int)v;
    return 0;
}

MKPY_STREAM_BINDING(py_diagonal)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "offset", "axis1", "axis2", "stream", NULL};
    PyObject *a[5];
    int offset, axis1, axis2;
    (void)m;
    if (mkpy_parse("diagonal", args, nargs, kwnames, names, 1, a) < 0 || !PyMkArray_Check(a[0]) ||
        int32_arg(a[1], 0, &offset) < 0 || int32_arg(a[2], 0, &axis1) < 0 || int32_arg(a[3], 1, &axis2) < 0) {
        PyErr_Clear();
        return mkpy_bad_call("diagonal", DIAGONAL_SIG, args, nargs, kwnames);
    }
    return mkpy_wrap(mk_diagonal(MKARR(a[0]), offset, axis1, axis2));
}

MKPY_STREAM_BINDING(py_diag)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "k", "*stream", NULL};
    PyObject *a[3];
    int k;
    (void)m;
    if (nargs < 1 || mkpy_parse("diag", args, nargs, kwnames, names, 1, a) < 0 || !PyMkArray_Check(a[0]) ||
        int32_arg(a[1], 0, &k) < 0) {
        PyErr_Clear();
        return mkpy_bad_call("diag", DIAG_SIG, args, nargs, kwnames);
    }
    return mkpy_wrap(mk_diag(MKARR(a[0]), k));
}

#define VIEW_SIG "    1. view(a: scalar | array, dtype: Dtype, stream: StreamOrDevice = None) -> array"

MKPY_STREAM_BINDING(py_view)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "dtype", "stream", NULL};
    PyObject *a[3];
    mk_dtype dt;
    (void)m;
    if (mkpy_parse("view", args, nargs, kwnames, names, 2, a) < 0 || PyList_Check(a[0]) || PyTuple_Check(a[0]) ||
        mkpy_parse_dtype(a[1], &dt) < 0) {
        PyErr_Clear();
        return mkpy_bad_call("view", VIEW_SIG, args, nargs, kwnames);
    }
    mk_array *x = mkpy_to_array_arg(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_view_dtype(x, dt);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_broadcast_to)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "shape", "*stream", NULL};
    PARSE("broadcast_to", 2);
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    if (parse_shape("broadcast_to", "shape", a[1], 1, &ndim, shape) < 0) return NULL;
    if (PyList_Check(a[0]) || PyTuple_Check(a[0])) {
        PyErr_Format(PyExc_ValueError, "Invalid type %s received in array initialization.", Py_TYPE(a[0])->tp_name);
        return NULL;
    }
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_broadcast_to(x, ndim, shape);
    mk_decref(x);
    return mkpy_wrap(r);
}

/* --------------------------------------------------------- joining arrays */

static PyObject *concat_impl(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"arrays", "axis", "*stream", NULL};
    PyObject *a[3];
    if (mkpy_parse(fname, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    int axis = 0, has_axis = 1;
    if (a[1] == Py_None)
        has_axis = 0;
    else if (a[1] && parse_axis(fname, "axis", a[1], &axis) < 0)
        return NULL;
    Py_ssize_t n;
    mk_array **xs = parse_arrays(fname, a[0], &n);
    if (!xs) return NULL;
    mk_array *r = mk_concatenate((int)n, xs, axis, has_axis);
    free_arrays(xs, n);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_concatenate)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return concat_impl("concatenate", args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_concat)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return concat_impl("concat", args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_stack)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"arrays", "axis", "*stream", NULL};
    PARSE("stack", 1);
    int axis = 0;
    if (a[1] && a[1] != Py_None && parse_axis("stack", "axis", a[1], &axis) < 0) return NULL;
    Py_ssize_t n;
    mk_array **xs = parse_arrays("stack", a[0], &n);
    if (!xs) return NULL;
    mk_array *r = mk_stack((int)n, xs, axis);
    free_arrays(xs, n);
    return mkpy_wrap(r);
}

/* ---------------------------------------------------------------- split */

MKPY_STREAM_BINDING(py_split)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "indices_or_sections", "axis", "*stream", NULL};
    PARSE("split", 2);
    int axis = 0;
    if (a[2] && parse_axis("split", "axis", a[2], &axis) < 0) return NULL;
    int64_t sections = 0;
    int is_int = as_int(a[1], &sections);
    if (is_int < 0) return NULL;
    Py_ssize_t nidx = 0;
    int64_t *idx = NULL;
    if (!is_int) {
        idx = parse_ints("split", "indices_or_sections", a[1], 0, &nidx);
        if (!idx) return NULL;
        if (nidx >= INT_MAX) {
            PyMem_Free(idx);
            PyErr_SetString(PyExc_ValueError, "[split] Too many indices.");
            return NULL;
        }
    } else if (sections > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "[split] Too many splits (%lld).", (long long)sections);
        return NULL;
    }
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) {
        PyMem_Free(idx);
        return NULL;
    }
    Py_ssize_t nout = is_int ? (sections > 0 ? sections : 1) : nidx + 1;
    mk_array **outs = PyMem_Calloc((size_t)nout, sizeof *outs);
    PyObject *r = NULL;
    if (!outs) {
        PyErr_NoMemory();
    } else {
        int rc = is_int ? mk_split_sections(x, sections, axis, outs) : mk_split(x, (int)nidx, idx, axis, outs);
        if (rc < 0)
            mkpy_raise();
        else
            r = mkpy_wrap_list(outs, (int)nout);
    }
    PyMem_Free(outs);
    PyMem_Free(idx);
    mk_decref(x);
    return r;
}

MKPY_STREAM_BINDING(py_unstack)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"x", "*axis", "*stream", NULL};
    PARSE("unstack", 1);
    int axis = 0;
    if (a[1] && parse_axis("unstack", "axis", a[1], &axis) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    PyObject *r = NULL, *list = NULL;
    int ax = mk_norm_axis("unstack", axis, x->ndim);
    if (ax < 0) {
        mkpy_raise();
        goto done;
    }
    int64_t n = x->shape[ax];
    mk_array **outs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *outs);
    if (!outs) {
        PyErr_NoMemory();
        goto done;
    }
    if (n > 0 && mk_split_sections(x, n, ax, outs) < 0) {
        mkpy_raise();
        PyMem_Free(outs);
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        mk_array *s = mk_squeeze(outs[i], 1, &ax);
        mk_decref(outs[i]);
        outs[i] = s;
        if (!s) {
            mkpy_raise();
            for (int64_t k = 0; k < n; k++) mk_xdecref(outs[k]);
            PyMem_Free(outs);
            goto done;
        }
    }
    list = mkpy_wrap_list(outs, (int)n);
    PyMem_Free(outs);
    if (list) {
        r = PyList_AsTuple(list);
        Py_DECREF(list);
    }
done:
    mk_decref(x);
    return r;
}

/* ---------------------------------------------------------- tile, repeat */

MKPY_STREAM_BINDING(py_tile)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "reps", "*stream", NULL};
    PARSE("tile", 2);
    Py_ssize_t n;
    int64_t *reps = parse_ints("tile", "reps", a[1], 1, &n);
    if (!reps) return NULL;
    if (n > MK_MAX_NDIM) {
        PyMem_Free(reps);
        PyErr_Format(PyExc_ValueError, "[tile] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    mk_array *x = mkpy_to_array(a[0], -1), *r = NULL;
    if (x) {
        r = mk_tile(x, (int)n, reps);
        mk_decref(x);
    }
    PyMem_Free(reps);
    return x ? mkpy_wrap(r) : NULL;
}

MKPY_STREAM_BINDING(py_repeat)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"array", "repeats", "axis", "*stream", NULL};
    PARSE("repeat", 2);
    int64_t repeats;
    int axis = 0, has_axis = a[2] && a[2] != Py_None;
    if (parse_i64("repeat", "repeats", a[1], &repeats) < 0) return NULL;
    if (has_axis && parse_axis("repeat", "axis", a[2], &axis) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_repeat(x, repeats, axis, has_axis);
    mk_decref(x);
    return mkpy_wrap(r);
}

/* ------------------------------------------------------------------- pad */

/* pad_width as MLX takes it: an int, (n,), (before, after), or a list of
 * (before, after) pairs, one per axis or a single one for all axes. */
static int parse_pad_width(PyObject *obj, int ndim, int64_t (*pw)[2]) {
    static const char *const fname = "pad", *const what = "pad_width";
    int64_t v;
    int r = as_int(obj, &v);
    if (r < 0) return -1;
    if (r > 0) {
        for (int d = 0; d < ndim; d++) pw[d][0] = pw[d][1] = v;
        return 0;
    }
    PyObject *src = obj, *tmp = NULL;
    if (PyMkArray_Check(obj)) {
        if (!(tmp = mkpy_tolist(MKARR(obj)))) return -1;
        src = tmp;
    }
    if (PyUnicode_Check(src) || PyDict_Check(src) || !PySequence_Check(src)) {
        Py_XDECREF(tmp);
        PyErr_Format(PyExc_TypeError, "pad(): pad_width must be an int, a pair of ints or a list of pairs, not %s.",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *seq = PySequence_Fast(src, "");
    Py_XDECREF(tmp);
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int nints = 0, rc = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        r = as_int(PySequence_Fast_GET_ITEM(seq, i), &v);
        if (r < 0) goto done;
        nints += r;
    }
    if (n > 0 && nints == n) {
        /* (n,) or (before, after) */
        if (n > 2) goto bad;
        int64_t lo, hi;
        as_int(PySequence_Fast_GET_ITEM(seq, 0), &lo);
        hi = lo;
        if (n == 2) as_int(PySequence_Fast_GET_ITEM(seq, 1), &hi);
        for (int d = 0; d < ndim; d++) {
            pw[d][0] = lo;
            pw[d][1] = hi;
        }
        rc = 0;
        goto done;
    }
    if (nints) goto bad;
    /* a list of pairs */
    int64_t pairs[MK_MAX_NDIM][2];
    if (n != 1 && n != ndim) {
        /* still check the items' types first, as MLX */
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_ssize_t k;
            int64_t *p = parse_ints(fname, what, PySequence_Fast_GET_ITEM(seq, i), 0, &k);
            if (!p) goto done;
            PyMem_Free(p);
            if (k != 2) goto bad;
        }
        PyErr_Format(PyExc_ValueError, "Invalid number of padding sizes passed to pad with axes of size %d", ndim);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t k;
        int64_t *p = parse_ints(fname, what, PySequence_Fast_GET_ITEM(seq, i), 0, &k);
        if (!p) goto done;
        if (k != 2) {
            PyMem_Free(p);
            goto bad;
        }
        pairs[i][0] = p[0];
        pairs[i][1] = p[1];
        PyMem_Free(p);
    }
    for (int d = 0; d < ndim; d++) {
        pw[d][0] = pairs[n == 1 ? 0 : d][0];
        pw[d][1] = pairs[n == 1 ? 0 : d][1];
    }
    rc = 0;
    goto done;
bad:
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "pad(): pad_width must be an int, a pair of ints or a list of pairs, not %s.",
                 Py_TYPE(obj)->tp_name);
done:
    Py_DECREF(seq);
    return rc;
}

/* A Python int must fit the integer dtype it is converted to (MLX checks). */
static int check_int_fits(PyObject *obj, mk_dtype t) {
    if (!PyLong_Check(obj) || PyBool_Check(obj) || !mk_is_integral(t)) return 0;
    int overflow, ok;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow > 0 && t == MK_UINT64) {
        unsigned long long u = PyLong_AsUnsignedLongLong(obj);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            ok = 0;
        } else {
            ok = 1;
        }
    } else if (overflow) {
        ok = 0;
    } else {
        switch (t) {
        case MK_UINT8: ok = v >= 0 && v <= UINT8_MAX; break;
        case MK_UINT16: ok = v >= 0 && v <= UINT16_MAX; break;
        case MK_UINT32: ok = v >= 0 && v <= (long long)UINT32_MAX; break;
        case MK_UINT64: ok = v >= 0; break;
        case MK_INT8: ok = v >= INT8_MIN && v <= INT8_MAX; break;
        case MK_INT16: ok = v >= INT16_MIN && v <= INT16_MAX; break;
        case MK_INT32: ok = v >= INT32_MIN && v <= INT32_MAX; break;
        default: ok = 1; break;
        }
    }
    if (!ok) {
        PyObject *s = PyObject_Str(obj);
        if (s) {
            PyErr_Format(PyExc_ValueError, "Converting %U to %s would result in overflow.", s, mk_dtype_name(t));
            Py_DECREF(s);
        }
        return -1;
    }
    return 0;
}

MKPY_STREAM_BINDING(py_pad)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "pad_width", "mode", "constant_values", "*stream", NULL};
    static const char *const modes[] = {"constant", "edge", "reflect", "symmetric"};
    PARSE("pad", 2);
    mk_pad_mode mode = MK_PAD_CONSTANT;
    if (a[2]) {
        if (!PyUnicode_Check(a[2])) {
            PyErr_Format(PyExc_TypeError, "pad(): mode must be a str, not %s.", Py_TYPE(a[2])->tp_name);
            return NULL;
        }
        const char *s = PyUnicode_AsUTF8(a[2]);
        if (!s) return NULL;
        int found = -1;
        for (int i = 0; i < 4; i++)
            if (!strcmp(s, modes[i])) found = i;
        if (found < 0) {
            PyErr_Format(PyExc_ValueError, "Invalid padding mode (%s) passed to pad", s);
            return NULL;
        }
        mode = (mk_pad_mode)found;
    }
    if (a[3] && (a[3] == Py_None || PyUnicode_Check(a[3]))) {
        PyErr_Format(PyExc_TypeError, "pad(): constant_values must be a scalar or an array, not %s.",
                     Py_TYPE(a[3])->tp_name);
        return NULL;
    }
    if (a[3] && (PyList_Check(a[3]) || PyTuple_Check(a[3]))) {
        PyErr_Format(PyExc_ValueError, "Invalid type %s received in array initialization.", Py_TYPE(a[3])->tp_name);
        return NULL;
    }
    mk_array *x = mkpy_to_array(a[0], -1), *v = NULL, *r = NULL;
    if (!x) return NULL;
    int64_t pw[MK_MAX_NDIM][2];
    if (parse_pad_width(a[1], x->ndim, pw) < 0) goto done;
    if (a[3] && !PyMkArray_Check(a[3]) && check_int_fits(a[3], x->dtype) < 0) goto done;
    if (a[3] && !PyMkArray_Check(a[3]) && PyComplex_Check(a[3]) && x->dtype != MK_COMPLEX64) {
        /* a complex scalar is an array first, then cast (MLX keeps the real part) */
        v = mkpy_to_array(a[3], -1);
    } else {
        v = a[3] ? mkpy_to_array(a[3], PyMkArray_Check(a[3]) ? -1 : (int)x->dtype) : mk_scalar_i64(x->dtype, 0);
    }
    if (!v) {
        if (!PyErr_Occurred()) mkpy_raise();
        goto done;
    }
    if (!(r = mk_pad_ex(x, (const int64_t(*)[2])pw, v, mode))) mkpy_raise();
done:
    mk_decref(x);
    mk_xdecref(v);
    return r ? mkpy_wrap(r) : NULL;
}

/* ------------------------------------------------------------ broadcasting */

static PyObject *py_broadcast_shapes(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (nargs == 0) {
        PyErr_SetString(PyExc_ValueError, "[broadcast_shapes] Must provide at least one shape.");
        return NULL;
    }
    int nd = 0;
    int64_t shape[MK_MAX_NDIM];
    for (Py_ssize_t i = 0; i < nargs; i++) {
        int n;
        int64_t s[MK_MAX_NDIM], t[MK_MAX_NDIM];
        if (PyMkArray_Check(args[i])) {
            PyErr_SetString(PyExc_ValueError,
                            "[broadcast_shapes] Expects a sequence of shapes (tuple or list of ints).");
            return NULL;
        }
        if (parse_shape("broadcast_shapes", "shape", args[i], 0, &n, s) < 0) return NULL;
        if (i == 0) {
            nd = n;
            memcpy(shape, s, (size_t)n * sizeof *s);
            continue;
        }
        int r = mk_broadcast_shapes(nd, shape, n, s, t);
        if (r < 0) return mkpy_raise();
        nd = r;
        memcpy(shape, t, (size_t)r * sizeof *t);
    }
    PyObject *tup = PyTuple_New(nd);
    if (!tup) return NULL;
    for (int i = 0; i < nd; i++) {
        PyObject *v = PyLong_FromLongLong(shape[i]);
        if (!v) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, i, v);
    }
    return tup;
}

MKPY_STREAM_BINDING(py_broadcast_arrays)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        if (!key) return NULL;
        if (strcmp(key, "stream")) {
            PyErr_Format(PyExc_TypeError, "broadcast_arrays() got an unexpected keyword argument '%s'", key);
            return NULL;
        }
        if (mkpy_stream_arg("broadcast_arrays", args[nargs + k]) < 0) return NULL;
    }
    if (nargs > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "[broadcast_arrays] Too many arrays.");
        return NULL;
    }
    int nd = 0;
    int64_t shape[MK_MAX_NDIM], t[MK_MAX_NDIM];
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (!PyMkArray_Check(args[i])) {
            PyErr_Format(PyExc_TypeError, "broadcast_arrays(): expected arrays but argument %zd is %s.", i,
                         Py_TYPE(args[i])->tp_name);
            return NULL;
        }
        mk_array *x = MKARR(args[i]);
        int r = i == 0 ? x->ndim : mk_broadcast_shapes(nd, shape, x->ndim, x->shape, t);
        if (r < 0) return mkpy_raise();
        memcpy(shape, i == 0 ? x->shape : t, (size_t)r * sizeof *t);
        nd = r;
    }
    mk_array **outs = PyMem_Calloc((size_t)(nargs ? nargs : 1), sizeof *outs);
    if (!outs) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < nargs; i++)
        if (!(outs[i] = mk_broadcast_to(MKARR(args[i]), nd, shape))) {
            for (Py_ssize_t k = 0; k < i; k++) mk_decref(outs[k]);
            PyMem_Free(outs);
            return mkpy_raise();
        }
    PyObject *r = mkpy_wrap_list(outs, (int)nargs);
    PyMem_Free(outs);
    return r;
}

/* atleast_1d/2d/3d: one array back for one argument, else a list. */
static PyObject *atleast(int k, const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t j = 0; j < nkw; j++) {
        const char *key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, j));
        if (!key) return NULL;
        if (strcmp(key, "stream")) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", fname, key);
            return NULL;
        }
        if (mkpy_stream_arg(fname, args[nargs + j]) < 0) return NULL;
    }
    PyObject *list = PyList_New(nargs);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        mk_array *x = mkpy_to_array(args[i], -1), *r;
        if (!x) {
            Py_DECREF(list);
            return NULL;
        }
        if (x->ndim >= k) {
            r = x;
            mk_incref(r);
        } else {
            int64_t shape[3];
            int n = 0;
            if (x->ndim == 0) {
                for (; n < k; n++) shape[n] = 1;
            } else if (x->ndim == 1) {
                if (k >= 2) shape[n++] = 1;
                shape[n++] = x->shape[0];
                if (k == 3) shape[n++] = 1;
            } else { /* 2-d, k == 3 */
                shape[n++] = x->shape[0];
                shape[n++] = x->shape[1];
                shape[n++] = 1;
            }
            r = mk_reshape(x, n, shape);
        }
        mk_decref(x);
        PyObject *o = mkpy_wrap(r);
        if (!o) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, o);
    }
    if (nargs == 1) {
        PyObject *o = Py_NewRef(PyList_GET_ITEM(list, 0));
        Py_DECREF(list);
        return o;
    }
    return list;
}

#define ATLEAST(k)                                                                                     \
    MKPY_STREAM_BINDING(py_atleast_##k##d)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) { \
        (void)m;                                                                                       \
        return atleast(k, "atleast_" #k "d", args, nargs, kw);                                         \
    }
ATLEAST(1)
ATLEAST(2)
ATLEAST(3)

PyMethodDef mkpy_shape_functions[] = {
    {"reshape", FN(py_reshape), FASTKW,
     "reshape(a, /, shape, *, stream=None)\n--\n\nReshape an array while preserving the size."},
    {"transpose", FN(py_transpose), FASTKW,
     "transpose(a, /, axes=None, *, stream=None)\n--\n\nTranspose the dimensions of the array."},
    {"permute_dims", FN(py_permute_dims), FASTKW,
     "permute_dims(a, /, axes=None, *, stream=None)\n--\n\nSee transpose."},
    {"swapaxes", FN(py_swapaxes), FASTKW,
     "swapaxes(a, /, axis1, axis2, *, stream=None)\n--\n\nSwap two axes of an array."},
    {"moveaxis", FN(py_moveaxis), FASTKW,
     "moveaxis(a, /, source, destination, *, stream=None)\n--\n\nMove an axis to a new position."},
    {"expand_dims", FN(py_expand_dims), FASTKW,
     "expand_dims(a, /, axis, *, stream=None)\n--\n\nAdd a size one dimension at the given axis."},
    {"squeeze", FN(py_squeeze), FASTKW,
     "squeeze(a, /, axis=None, *, stream=None)\n--\n\nRemove length one axes from an array."},
    {"contiguous", FN(py_contiguous), FASTKW,
     "contiguous(a, /, allow_col_major=False, *, stream=None)\n--\n\n"
     "a in row-contiguous layout: a copy if needed, else a's own storage (with allow_col_major,\n"
     "column-major counts as contiguous too)."},
    {"flatten", FN(py_flatten), FASTKW,
     "flatten(a, /, start_axis=0, end_axis=-1, *, stream=None)\n--\n\n"
     "Flatten an array; the axes from start_axis to end_axis (inclusive) become one."},
    {"unflatten", FN(py_unflatten), FASTKW,
     "unflatten(a, /, axis, shape, *, stream=None)\n--\n\nUnflatten an axis of an array to a shape."},
    {"diagonal", FN(py_diagonal), FASTKW,
     "diagonal(a, offset=0, axis1=0, axis2=1, stream=None)\n--\n\n"
     "Return specified diagonals: the 2-D sub-arrays over axis1 and axis2 lose those axes and\n"
     "their diagonal at offset becomes the last axis (a view of a)."},
    {"diag", FN(py_diag), FASTKW,
     "diag(a, /, k=0, *, stream=None)\n--\n\n"
     "Extract a diagonal or construct a diagonal matrix: a 1-D a becomes a square matrix with a\n"
     "on diagonal k; a 2-D a gives its k-th diagonal."},
    {"view", FN(py_view), FASTKW,
     "view(a, dtype, stream=None)\n--\n\n"
     "View the array as a different type: the bytes of each row of the last axis, read as dtype\n"
     "(the last axis grows or shrinks by the ratio of the item sizes). Storage may or may not be\n"
     "shared: only the bytes are guaranteed, as in MLX."},
    {"broadcast_to", FN(py_broadcast_to), FASTKW,
     "broadcast_to(a, /, shape, *, stream=None)\n--\n\nBroadcast an array to the given shape."},
    {"broadcast_arrays", FN(py_broadcast_arrays), FASTKW,
     "broadcast_arrays(*arrays, stream=None)\n--\n\nBroadcast arrays against one another."},
    {"broadcast_shapes", FN(py_broadcast_shapes), METH_FASTCALL,
     "broadcast_shapes(*shapes)\n--\n\nThe shape the given shapes broadcast to."},
    {"concatenate", FN(py_concatenate), FASTKW,
     "concatenate(arrays, axis=0, *, stream=None)\n--\n\n"
     "Concatenate arrays along the given axis (axis=None: flattened first)."},
    {"concat", FN(py_concat), FASTKW, "concat(arrays, axis=0, *, stream=None)\n--\n\nSee concatenate."},
    {"stack", FN(py_stack), FASTKW,
     "stack(arrays, axis=0, *, stream=None)\n--\n\nStack arrays along a new axis."},
    {"split", FN(py_split), FASTKW,
     "split(a, /, indices_or_sections, axis=0, *, stream=None)\n--\n\n"
     "Split an array into equal sections (an int) or at the given indices (a sequence)."},
    {"unstack", FN(py_unstack), FASTKW,
     "unstack(x, /, *, axis=0, stream=None)\n--\n\nSplit an array along an axis, removing that axis."},
    {"tile", FN(py_tile), FASTKW, "tile(a, reps, /, *, stream=None)\n--\n\nRepeat an array reps times."},
    {"repeat", FN(py_repeat), FASTKW,
     "repeat(array, repeats, axis=None, *, stream=None)\n--\n\n"
     "Repeat each element along an axis (axis=None: of the flattened array)."},
    {"pad", FN(py_pad), FASTKW,
     "pad(a, pad_width, mode='constant', constant_values=0, *, stream=None)\n--\n\n"
     "Pad an array; mode is 'constant', 'edge', 'reflect' or 'symmetric'."},
    {"atleast_1d", FN(py_atleast_1d), FASTKW,
     "atleast_1d(*arys, stream=None)\n--\n\nConvert arrays to have at least one dimension."},
    {"atleast_2d", FN(py_atleast_2d), FASTKW,
     "atleast_2d(*arys, stream=None)\n--\n\nConvert arrays to have at least two dimensions."},
    {"atleast_3d", FN(py_atleast_3d), FASTKW,
     "atleast_3d(*arys, stream=None)\n--\n\nConvert arrays to have at least three dimensions."},
    {NULL},
};
