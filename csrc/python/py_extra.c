/* Module functions for the ops of core/ops_extra.c (windows, divmod,
 * as_strided, hadamard_transform, median, roll, kron, slice, slice_update,
 * searchsorted, count_nonzero, logical_xor, trunc, flip, meshgrid,
 * nan_to_num, diff, trace, vecdot, depends), the dtype queries result_type,
 * can_cast and isdtype, finfo/iinfo, and MLX's constants, with MLX's
 * signatures. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/ops_extra.h"
#include "mkpy.h"
#include <structmember.h>

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)
#define PARSE(name, nreq)                                                                              \
    PyObject *a[sizeof names / sizeof *names];                                                         \
    (void)m;                                                                                           \
    if (mkpy_parse(name, args, nargs, kwnames, names, nreq, a) < 0) return NULL

static int get_int(PyObject *obj, int dflt, int *out) {
    if (!obj || obj == Py_None) {
        *out = dflt;
        return 0;
    }
    int64_t v;
    if (mkpy_parse_int(obj, &v) < 0) return -1;
    return mkpy_int32_value(v, out);
}

static int get_float(PyObject *obj, float *out) {
    double v = PyFloat_AsDouble(obj);
    if (v == -1.0 && PyErr_Occurred()) return -1;
    *out = (float)v;
    return 0;
}

/* ------------------------------------------------------------------ windows */

static PyObject *window(mk_window_kind kind, const char *fname, PyObject *m, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"M", "*stream", NULL};
    PARSE(fname, 1);
    int M;
    if (get_int(a[0], 0, &M) < 0) return NULL;
    return mkpy_wrap(mk_window(kind, M));
}
#define WINDOW_FN(name, KIND)                                                                          \
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        return window(KIND, #name, m, args, nargs, kw);                                                \
    }
WINDOW_FN(hanning, MK_WIN_HANNING)
WINDOW_FN(hamming, MK_WIN_HAMMING)
WINDOW_FN(bartlett, MK_WIN_BARTLETT)
WINDOW_FN(blackman, MK_WIN_BLACKMAN)

/* ------------------------------------------------------------------- divmod */

MKPY_STREAM_BINDING(py_divmod)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "*stream", NULL};
    PARSE("divmod", 2);
    mk_array *x, *y, *q, *r;
    if (mkpy_to_arrays(a[0], a[1], &x, &y) < 0) return NULL;
    int rc = mk_divmod(x, y, &q, &r);
    mk_decref(x);
    mk_decref(y);
    if (rc < 0) return mkpy_raise();
    mk_array *both[2] = {q, r};
    return mkpy_wrap_list(both, 2);
}

/* --------------------------------------------------------------- as_strided */

MKPY_STREAM_BINDING(py_as_strided)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "shape", "strides", "offset", "*stream", NULL};
    PARSE("as_strided", 1);
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    int ndim, ns;
    int64_t shape[MK_MAX_NDIM], strides[MK_MAX_NDIM], offset = 0;
    if (a[1] && a[1] != Py_None) {
        if (mkpy_parse_shape(a[1], &ndim, shape) < 0) goto fail;
    } else {
        ndim = x->ndim;
        memcpy(shape, x->shape, ndim * sizeof *shape);
    }
    if (a[2] && a[2] != Py_None) {
        if (mkpy_parse_strides(a[2], &ns, strides) < 0) goto fail;
        if (ns != ndim) {
            PyErr_Format(PyExc_ValueError, "[as_strided] The shape and strides must have the same length.");
            goto fail;
        }
    } else {
        int64_t s = 1;
        for (int d = ndim - 1; d >= 0; d--) strides[d] = s, s *= shape[d];
    }
    if (a[3] && mkpy_parse_int(a[3], &offset) < 0) goto fail;
    if (offset < 0) {
        PyErr_SetString(PyExc_OverflowError, "can't convert negative int to unsigned");
        goto fail;
    }
    mk_array *r = mk_as_strided(x, ndim, shape, strides, offset);
    mk_decref(x);
    return mkpy_wrap(r);
fail:
    mk_decref(x);
    return NULL;
}

/* ------------------------------------------------------- hadamard_transform */

MKPY_STREAM_BINDING(py_hadamard_transform)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "scale", "*stream", NULL};
    PARSE("hadamard_transform", 1);
    float scale = 1;
    bool has = a[1] && a[1] != Py_None;
    if (has && get_float(a[1], &scale) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_hadamard(x, has, scale);
    mk_decref(x);
    return mkpy_wrap(r);
}

/* -------------------------------------------------------------- median etc. */

MKPY_STREAM_BINDING(py_median)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "axis", "keepdims", "*stream", NULL};
    PARSE("median", 1);
    int naxes, axes[MK_MAX_NDIM], keep;
    if (mkpy_parse_axes(a[1], &naxes, axes) < 0 || mkpy_parse_bool(a[2], 0, &keep) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_median(x, naxes, axes, keep);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_count_nonzero)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "*axis", "*keepdims", "*stream", NULL};
    PARSE("count_nonzero", 1);
    int naxes, axes[MK_MAX_NDIM], keep;
    if (mkpy_parse_axes(a[1], &naxes, axes) < 0 || mkpy_parse_bool(a[2], 0, &keep) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_count_nonzero(x, naxes, axes, keep);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_roll)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "shift", "axis", "*stream", NULL};
    PARSE("roll", 2);
    int nshift, naxes, axes[MK_MAX_NDIM];
    int64_t shift[MK_MAX_NDIM];
    if (mkpy_parse_shape(a[1], &nshift, shift) < 0 || mkpy_parse_axes(a[2], &naxes, axes) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_roll(x, nshift, shift, naxes, axes);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_flip)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "axis", "*stream", NULL};
    PARSE("flip", 1);
    int naxes, axes[MK_MAX_NDIM];
    if (mkpy_parse_axes(a[1], &naxes, axes) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_flip(x, naxes, axes);
    mk_decref(x);
    return mkpy_wrap(r);
}

static PyObject *binary_arrays(mk_array *(*fn)(mk_array *, mk_array *), bool weak, const char *fname,
                               PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "*stream", NULL};
    PyObject *a[3];
    if (mkpy_parse(fname, args, nargs, kwnames, names, 2, a) < 0) return NULL;
    mk_array *x, *y;
    if (weak) {
        if (mkpy_to_arrays(a[0], a[1], &x, &y) < 0) return NULL;
    } else {
        if (!(x = mkpy_to_array(a[0], -1))) return NULL;
        if (!(y = mkpy_to_array(a[1], -1))) {
            mk_decref(x);
            return NULL;
        }
    }
    mk_array *r = fn(x, y);
    mk_decref(x);
    mk_decref(y);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_kron)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return binary_arrays(mk_kron, false, "kron", args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_logical_xor)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return binary_arrays(mk_logical_xor, true, "logical_xor", args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_trunc)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "*stream", NULL};
    PARSE("trunc", 1);
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_trunc(x);
    mk_decref(x);
    return mkpy_wrap(r);
}

/* ----------------------------------------------------------- dynamic slices */

MKPY_STREAM_BINDING(py_slice)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "start_indices", "axes", "slice_size", "*stream", NULL};
    PARSE("slice", 4);
    int naxes, nsize;
    int axes[MK_MAX_NDIM];
    int64_t sizes[MK_MAX_NDIM];
    if (mkpy_parse_axes(a[2], &naxes, axes) < 0 || mkpy_parse_shape(a[3], &nsize, sizes) < 0) return NULL;
    if (naxes < 0) naxes = 0;
    mk_array *x = mkpy_to_array(a[0], -1), *st = x ? mkpy_to_array(a[1], -1) : NULL, *r = NULL;
    if (st) r = mk_dynamic_slice(x, st, naxes, axes, nsize, sizes);
    mk_xdecref(x);
    mk_xdecref(st);
    return st ? mkpy_wrap(r) : NULL;
}

MKPY_STREAM_BINDING(py_slice_update)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "update", "start_indices", "axes", "*stream", NULL};
    PARSE("slice_update", 4);
    int naxes, axes[MK_MAX_NDIM];
    if (mkpy_parse_axes(a[3], &naxes, axes) < 0) return NULL;
    if (naxes < 0) naxes = 0;
    mk_array *x = mkpy_to_array(a[0], -1), *u = x ? mkpy_to_array(a[1], -1) : NULL;
    mk_array *st = u ? mkpy_to_array(a[2], -1) : NULL, *r = NULL;
    if (st) r = mk_dynamic_slice_update(x, u, st, naxes, axes);
    mk_xdecref(x);
    mk_xdecref(u);
    mk_xdecref(st);
    return st ? mkpy_wrap(r) : NULL;
}

MKPY_STREAM_BINDING(py_searchsorted)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"sorted_sequence", "values", "side", "*stream", NULL};
    PARSE("searchsorted", 2);
    const char *side = "left";
    if (a[2] && !(side = PyUnicode_AsUTF8(a[2]))) return NULL;
    if (strcmp(side, "left") && strcmp(side, "right")) {
        PyErr_Format(PyExc_ValueError, "[searchsorted] Invalid side '%s'. Expected 'left' or 'right'.", side);
        return NULL;
    }
    mk_array *s = mkpy_to_array(a[0], -1), *v = s ? mkpy_to_array(a[1], -1) : NULL, *r = NULL;
    if (v) r = mk_searchsorted(s, v, side[0] == 'r');
    mk_xdecref(s);
    mk_xdecref(v);
    return v ? mkpy_wrap(r) : NULL;
}

/* ----------------------------------------------------- meshgrid, nan_to_num */

MKPY_STREAM_BINDING(py_meshgrid)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    int sparse = 0;
    const char *indexing = "xy";
    if (kwnames) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
            PyObject *v = args[nargs + i];
            if (!k) return NULL;
            if (!strcmp(k, "sparse")) {
                if (mkpy_parse_bool(v, 0, &sparse) < 0) return NULL;
            } else if (!strcmp(k, "indexing")) {
                if (!(indexing = PyUnicode_AsUTF8(v))) return NULL;
            } else if (strcmp(k, "stream")) {
                PyErr_Format(PyExc_TypeError, "meshgrid() got an unexpected keyword argument '%s'", k);
                return NULL;
            } else if (mkpy_stream_arg("meshgrid", v) < 0) {
                return NULL;
            }
        }
    }
    if (strcmp(indexing, "xy") && strcmp(indexing, "ij")) {
        PyErr_SetString(PyExc_ValueError, "[meshgrid] Invalid indexing value. Valid values are 'xy' and 'ij'.");
        return NULL;
    }
    if (nargs > MK_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "[meshgrid] Too many arrays.");
        return NULL;
    }
    mk_array *xs[MK_MAX_NDIM], *outs[MK_MAX_NDIM];
    int n = (int)nargs;
    for (int i = 0; i < n; i++)
        if (!(xs[i] = mkpy_to_array(args[i], -1))) {
            for (int k = 0; k < i; k++) mk_decref(xs[k]);
            return NULL;
        }
    int rc = mk_meshgrid(n, xs, sparse, indexing[0] == 'i', outs);
    for (int i = 0; i < n; i++) mk_decref(xs[i]);
    if (rc < 0) return mkpy_raise();
    PyObject *list = mkpy_wrap_list(outs, n);
    if (!list) return NULL;
    PyObject *t = PyList_AsTuple(list);
    Py_DECREF(list);
    return t;
}

MKPY_STREAM_BINDING(py_nan_to_num)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "nan", "posinf", "neginf", "*stream", NULL};
    PARSE("nan_to_num", 1);
    float nan = 0, pos = 0, neg = 0;
    bool hp = a[2] && a[2] != Py_None, hn = a[3] && a[3] != Py_None;
    if ((a[1] && get_float(a[1], &nan) < 0) || (hp && get_float(a[2], &pos) < 0) ||
        (hn && get_float(a[3], &neg) < 0))
        return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_nan_to_num(x, nan, hp, pos, hn, neg);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_diff)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "n", "axis", "*stream", NULL};
    PARSE("diff", 1);
    int n, axis;
    if (get_int(a[1], 1, &n) < 0 || get_int(a[2], -1, &axis) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_diff(x, n, axis);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_trace)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "offset", "axis1", "axis2", "dtype", "*stream", NULL};
    PARSE("trace", 1);
    int off, a1, a2;
    mk_dtype dt = MK_FLOAT32;
    bool has_dt = a[4] && a[4] != Py_None;
    if (get_int(a[1], 0, &off) < 0 || get_int(a[2], 0, &a1) < 0 || get_int(a[3], 1, &a2) < 0) return NULL;
    if (has_dt && mkpy_parse_dtype(a[4], &dt) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_trace(x, off, a1, a2, has_dt ? (int)dt : -1);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_vecdot)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "*axis", "*stream", NULL};
    PARSE("vecdot", 2);
    int axis;
    if (get_int(a[2], -1, &axis) < 0) return NULL;
    mk_array *x = mkpy_to_array(a[0], -1), *y = x ? mkpy_to_array(a[1], -1) : NULL, *r = NULL;
    if (y) r = mk_vecdot(x, y, axis);
    mk_xdecref(x);
    mk_xdecref(y);
    return y ? mkpy_wrap(r) : NULL;
}

/* ------------------------------------------------------------------ depends */

/* An array, or a list/tuple of arrays, into a new block of references. */
static mk_array **array_list(PyObject *obj, int *n, bool *single) {
    *single = PyMkArray_Check(obj);
    if (*single) {
        mk_array **v = PyMem_Malloc(sizeof *v);
        if (!v) return (mk_array **)PyErr_NoMemory();
        v[0] = MKARR(obj);
        mk_incref(v[0]);
        *n = 1;
        return v;
    }
    PyObject *seq = PySequence_Fast(obj, "[depends] Expected an array or a list of arrays.");
    if (!seq) return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    mk_array **v = PyMem_Malloc((k ? k : 1) * sizeof *v);
    if (!v) {
        Py_DECREF(seq);
        return (mk_array **)PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyMkArray_Check(it)) {
            PyErr_SetString(PyExc_TypeError, "[depends] Expected arrays.");
            for (Py_ssize_t j = 0; j < i; j++) mk_decref(v[j]);
            PyMem_Free(v);
            Py_DECREF(seq);
            return NULL;
        }
        v[i] = MKARR(it);
        mk_incref(v[i]);
    }
    Py_DECREF(seq);
    *n = (int)k;
    return v;
}

static PyObject *py_depends(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"inputs", "dependencies", NULL};
    PARSE("depends", 2);
    int n = 0, nd = 0;
    bool single, dsingle;
    PyObject *res = NULL;
    mk_array **ins = array_list(a[0], &n, &single), **deps = ins ? array_list(a[1], &nd, &dsingle) : NULL;
    mk_array **outs = NULL;
    if (!deps) goto done;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "[depends] Expected at least one input.");
        goto done;
    }
    outs = PyMem_Malloc(n * sizeof *outs);
    if (!outs) {
        PyErr_NoMemory();
        goto done;
    }
    if (mk_depends(n, ins, nd, deps, outs) < 0) {
        mkpy_raise();
        goto done;
    }
    if (single)
        res = mkpy_wrap(outs[0]);
    else
        res = mkpy_wrap_list(outs, n);
done:
    for (int i = 0; ins && i < n; i++) mk_decref(ins[i]);
    for (int i = 0; deps && i < nd; i++) mk_decref(deps[i]);
    PyMem_Free(ins);
    PyMem_Free(deps);
    PyMem_Free(outs);
    return res;
}

/* ------------------------------------------------------------- dtype queries */

static int dtype_of(PyObject *v, mk_dtype *out) {
    if (PyMkArray_Check(v)) {
        *out = MKARR(v)->dtype;
        return 1;
    }
    if (PyMkDtype_Check(v)) {
        *out = ((PyMkDtype *)v)->dtype;
        return 1;
    }
    return 0;
}

static PyObject *py_result_type(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "result_type() takes no keyword arguments");
        return NULL;
    }
    if (nargs == 0) {
        PyErr_SetString(PyExc_ValueError, "[result_type] At least one array or dtype is required.");
        return NULL;
    }
    mk_dtype t = MK_BOOL, u;
    for (Py_ssize_t i = 0; i < nargs; i++) {
        if (!dtype_of(args[i], &u)) {
            PyErr_SetString(PyExc_ValueError, "[result_type] Inputs must be arrays or dtypes.");
            return NULL;
        }
        t = i ? mk_promote(t, u) : u;
    }
    return Py_NewRef(mkpy_dtype_object(t));
}

static PyObject *py_can_cast(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"from_", "to", NULL};
    PARSE("can_cast", 2);
    mk_dtype f, t;
    if (!dtype_of(a[0], &f)) {
        PyErr_SetString(PyExc_ValueError, "[can_cast] `from_` must be an array or a dtype.");
        return NULL;
    }
    if (mkpy_parse_dtype(a[1], &t) < 0) return NULL;
    return PyBool_FromLong(mk_promote(f, t) == t);
}

static int isdtype_one(mk_dtype t, PyObject *k) {
    if (PyMkDtype_Check(k)) return ((PyMkDtype *)k)->dtype == t;
    if (PyUnicode_Check(k)) {
        const char *s = PyUnicode_AsUTF8(k);
        if (!s) return -1;
        if (!strcmp(s, "bool")) return t == MK_BOOL;
        if (!strcmp(s, "signed integer")) return mk_issubdtype_cat(t, MK_CAT_SIGNEDINTEGER);
        if (!strcmp(s, "unsigned integer")) return mk_issubdtype_cat(t, MK_CAT_UNSIGNEDINTEGER);
        if (!strcmp(s, "integral")) return mk_issubdtype_cat(t, MK_CAT_INTEGER);
        if (!strcmp(s, "real floating")) return mk_issubdtype_cat(t, MK_CAT_FLOATING);
        if (!strcmp(s, "complex floating")) return mk_issubdtype_cat(t, MK_CAT_COMPLEXFLOATING);
        if (!strcmp(s, "numeric")) return mk_issubdtype_cat(t, MK_CAT_NUMBER);
        PyErr_Format(PyExc_ValueError, "[isdtype] Unknown data type kind: '%s'.", s);
        return -1;
    }
    PyErr_SetString(PyExc_ValueError,
                    "[isdtype] `kind` must be a dtype, a string, or a tuple of dtypes and strings.");
    return -1;
}

static PyObject *py_isdtype(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"dtype", "kind", NULL};
    PARSE("isdtype", 2);
    mk_dtype t;
    if (mkpy_parse_dtype(a[0], &t) < 0) return NULL;
    if (PyTuple_Check(a[1])) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(a[1]); i++) {
            int r = isdtype_one(t, PyTuple_GET_ITEM(a[1], i));
            if (r < 0) return NULL;
            if (r) Py_RETURN_TRUE;
        }
        Py_RETURN_FALSE;
    }
    int r = isdtype_one(t, a[1]);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

/* ------------------------------------------------------------- finfo, iinfo */

typedef struct {
    PyObject_HEAD
    int bits;
    double min, max, eps, smallest_normal;
    PyObject *dtype;
} PyFinfo;

typedef struct {
    PyObject_HEAD
    PyObject *min, *max; /* Python ints (uint64 max does not fit int64) */
    PyObject *dtype;
} PyIinfo;

static PyObject *finfo_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"dtype", NULL};
    PyObject *d;
    mk_dtype t;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:finfo", kwl, &d) || mkpy_parse_dtype(d, &t) < 0) return NULL;
    if (!mk_is_inexact(t)) {
        PyErr_Format(PyExc_ValueError, "[finfo] dtype %s is not inexact.", mk_dtype_name(t));
        return NULL;
    }
    PyFinfo *f = (PyFinfo *)type->tp_alloc(type, 0);
    if (!f) return NULL;
    if (t == MK_COMPLEX64) t = MK_FLOAT32;
    switch (t) {
    case MK_FLOAT16: f->bits = 16, f->max = 65504.0, f->eps = 0x1p-10, f->smallest_normal = 0x1p-14; break;
    case MK_BFLOAT16: f->bits = 16, f->max = 0x1.FEp127, f->eps = 0x1p-7, f->smallest_normal = 0x1p-126; break;
    case MK_FLOAT64: f->bits = 64, f->max = DBL_MAX, f->eps = DBL_EPSILON, f->smallest_normal = DBL_MIN; break;
    default: f->bits = 32, f->max = FLT_MAX, f->eps = FLT_EPSILON, f->smallest_normal = FLT_MIN; break;
    }
    f->min = -f->max;
    f->dtype = Py_NewRef(mkpy_dtype_object(t));
    return (PyObject *)f;
}

static void finfo_dealloc(PyFinfo *f) {
    Py_XDECREF(f->dtype);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

/* C++'s default stream format (6 significant digits, %g-like). */
static PyObject *finfo_repr(PyFinfo *f) {
    char a[64], b[64];
    PyOS_snprintf(a, sizeof a, "%g", f->min);
    PyOS_snprintf(b, sizeof b, "%g", f->max);
    return PyUnicode_FromFormat("finfo(min=%s, max=%s, dtype=%s)", a, b,
                                mk_dtype_name(((PyMkDtype *)f->dtype)->dtype));
}

static PyMemberDef finfo_members[] = {
    {"bits", T_INT, offsetof(PyFinfo, bits), READONLY, "The number of bits occupied by the type."},
    {"min", T_DOUBLE, offsetof(PyFinfo, min), READONLY, "The smallest representable number."},
    {"max", T_DOUBLE, offsetof(PyFinfo, max), READONLY, "The largest representable number."},
    {"eps", T_DOUBLE, offsetof(PyFinfo, eps), READONLY,
     "The difference between 1.0 and the next representable number above it."},
    {"smallest_normal", T_DOUBLE, offsetof(PyFinfo, smallest_normal), READONLY, "The smallest positive normal number."},
    {"dtype", T_OBJECT, offsetof(PyFinfo, dtype), READONLY, "The Dtype."},
    {NULL},
};

static PyTypeObject PyFinfo_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.finfo",
    .tp_basicsize = sizeof(PyFinfo),
    .tp_dealloc = (destructor)finfo_dealloc,
    .tp_repr = (reprfunc)finfo_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "finfo(dtype)\n--\n\nGet information on floating-point types.",
    .tp_members = finfo_members,
    .tp_new = finfo_new,
};

static PyObject *iinfo_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"dtype", NULL};
    PyObject *d;
    mk_dtype t;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:iinfo", kwl, &d) || mkpy_parse_dtype(d, &t) < 0) return NULL;
    if (!mk_is_integral(t)) {
        PyErr_Format(PyExc_ValueError, "[iinfo] Only integer types supported but %s was provided", mk_dtype_name(t));
        return NULL;
    }
    PyIinfo *f = (PyIinfo *)type->tp_alloc(type, 0);
    if (!f) return NULL;
    int bits = 8 * (int)mk_dtype_size(t);
    if (mk_is_unsigned(t)) {
        f->min = PyLong_FromLong(0);
        f->max = PyLong_FromUnsignedLongLong(bits == 64 ? UINT64_MAX : (1ULL << bits) - 1);
    } else {
        f->min = PyLong_FromLongLong(bits == 64 ? INT64_MIN : -(1LL << (bits - 1)));
        f->max = PyLong_FromLongLong(bits == 64 ? INT64_MAX : (1LL << (bits - 1)) - 1);
    }
    f->dtype = Py_NewRef(mkpy_dtype_object(t));
    if (!f->min || !f->max) {
        Py_DECREF(f);
        return NULL;
    }
    return (PyObject *)f;
}

static void iinfo_dealloc(PyIinfo *f) {
    Py_XDECREF(f->min);
    Py_XDECREF(f->max);
    Py_XDECREF(f->dtype);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

static PyObject *iinfo_repr(PyIinfo *f) {
    return PyUnicode_FromFormat("iinfo(min=%S, max=%S, dtype=%s)", f->min, f->max,
                                mk_dtype_name(((PyMkDtype *)f->dtype)->dtype));
}

static PyMemberDef iinfo_members[] = {
    {"min", T_OBJECT, offsetof(PyIinfo, min), READONLY, "The smallest representable number."},
    {"max", T_OBJECT, offsetof(PyIinfo, max), READONLY, "The largest representable number."},
    {"dtype", T_OBJECT, offsetof(PyIinfo, dtype), READONLY, "The Dtype."},
    {NULL},
};

static PyTypeObject PyIinfo_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.iinfo",
    .tp_basicsize = sizeof(PyIinfo),
    .tp_dealloc = (destructor)iinfo_dealloc,
    .tp_repr = (reprfunc)iinfo_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "iinfo(dtype)\n--\n\nGet information on integer types.",
    .tp_members = iinfo_members,
    .tp_new = iinfo_new,
};

/* ------------------------------------------------------------ print options */

extern int mkpy_print_precision; /* py_array.c */

typedef struct {
    PyObject_HEAD
    int precision;
} PyPrintOptions;

static PyObject *printoptions_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *kwl[] = {"precision", NULL};
    int precision = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|i:PrintOptions", kwl, &precision)) return NULL;
    PyPrintOptions *o = (PyPrintOptions *)type->tp_alloc(type, 0);
    if (o) o->precision = precision;
    return (PyObject *)o;
}

static PyMemberDef printoptions_members[] = {
    {"precision", T_INT, offsetof(PyPrintOptions, precision), 0, "Decimals printed (-1: the default format)."},
    {NULL},
};

static PyTypeObject PyPrintOptions_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.PrintOptions",
    .tp_basicsize = sizeof(PyPrintOptions),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PrintOptions(precision=-1)\n--\n\nOptions for printing arrays.",
    .tp_members = printoptions_members,
    .tp_new = printoptions_new,
};

/* with mx.printoptions(precision=3): ... */
typedef struct {
    PyObject_HEAD
    int old_precision, new_precision;
} PyPrintContext;

static PyObject *printctx_enter(PyPrintContext *c, PyObject *unused) {
    (void)unused;
    c->old_precision = mkpy_print_precision;
    mkpy_print_precision = c->new_precision;
    return Py_NewRef((PyObject *)c);
}

static PyObject *printctx_exit(PyPrintContext *c, PyObject *args) {
    (void)args;
    mkpy_print_precision = c->old_precision;
    Py_RETURN_NONE;
}

static PyMethodDef printctx_methods[] = {
    {"__enter__", (PyCFunction)printctx_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)printctx_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyTypeObject PyPrintContext_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy._PrintOptionsContext",
    .tp_basicsize = sizeof(PyPrintContext),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = printctx_methods,
};

static int get_precision(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int *out) {
    static const char *const names[] = {"precision", NULL};
    PyObject *a[1];
    if (mkpy_parse(fname, args, nargs, kwnames, names, 0, a) < 0) return -1;
    return get_int(a[0], mkpy_print_precision, out);
}

static PyObject *py_set_printoptions(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    int p;
    if (get_precision("set_printoptions", args, nargs, kwnames, &p) < 0) return NULL;
    mkpy_print_precision = p;
    Py_RETURN_NONE;
}

static PyObject *py_get_printoptions(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    PyPrintOptions *o = PyObject_New(PyPrintOptions, &PyPrintOptions_Type);
    if (o) o->precision = mkpy_print_precision;
    return (PyObject *)o;
}

static PyObject *py_printoptions(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    int p;
    if (get_precision("printoptions", args, nargs, kwnames, &p) < 0) return NULL;
    PyPrintContext *c = PyObject_New(PyPrintContext, &PyPrintContext_Type);
    if (c) c->new_precision = p, c->old_precision = mkpy_print_precision;
    return (PyObject *)c;
}

/* ------------------------------------------------------------------ asarray */

static PyObject *py_asarray(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "dtype", "*copy", NULL};
    PARSE("asarray", 1);
    bool no_dtype = !a[1] || a[1] == Py_None;
    int copy = -1;
    if (a[2] && a[2] != Py_None && mkpy_parse_bool(a[2], 0, &copy) < 0) return NULL;
    if (copy == 0) {
        /* host memory lent by another library is adopted, as a Mac's MLX
         * adopts it (design.md, "asarray(copy=False)"); anything else needs
         * a copy */
        mk_dtype dt = 0;
        if (!no_dtype && mkpy_parse_dtype(a[1], &dt) < 0) return NULL;
        PyObject *o = a[0];
        if (!PyMkArray_Check(o) && !mkpy_is_scalar(o)) {
            mk_array *r = mkpy_adopt(o, no_dtype ? -1 : (int)dt);
            if (r) return mkpy_wrap(r);
            if (PyErr_Occurred()) return NULL;
        }
        PyErr_SetString(PyExc_ValueError, "Unable to avoid copy while creating an array as requested.");
        return NULL;
    }
    if (PyMkArray_Check(a[0]) && copy != 1 &&
        (no_dtype || (PyMkDtype_Check(a[1]) && ((PyMkDtype *)a[1])->dtype == MKARR(a[0])->dtype)))
        return Py_NewRef(a[0]);
    PyObject *call[2] = {a[0], no_dtype ? Py_None : a[1]};
    PyObject *r = PyObject_Vectorcall((PyObject *)&PyMkArray_Type, call, 2, NULL);
    if (r && copy == 1 && PyMkArray_Check(a[0])) {
        /* a fresh buffer, as copy=True promises */
        mk_array *c = mk_copy(MKARR(r));
        Py_DECREF(r);
        return mkpy_wrap(c);
    }
    return r;
}

/* ------------------------------------------------------------------- DLPack */

#include "dlpack_abi.h"

extern const char *mkpy_public_name; /* py_dtype.c: "mkpy", or "mlx.core" (mkpy.as_mlx) */

/* The device __dlpack_device__ reports. MLX reports Metal whenever
 * metal.is_available(), which mkpy's stand-in for the Metal device makes True:
 * in the stand-in mode (mkpy.as_mlx: code written for MLX on a Mac) it reports
 * Metal too, as MLX's tests check; under its own name mkpy reports the CPU,
 * where its memory is, so that consumers that place arrays by this answer
 * (JAX, CuPy) take them. Capsules always hold host memory (DL_CPU): mkpy
 * has no Metal buffers, and the Mac's memory is unified in the same way. */
static int dl_reported_device(void) { return strcmp(mkpy_public_name, "mlx.core") ? DL_CPU : DL_METAL; }

typedef struct {
    mk_DLManagedTensor t;
    mk_array *arr;
    int64_t shape[MK_MAX_NDIM], strides[MK_MAX_NDIM];
} dl_export;

static void dl_delete(mk_DLManagedTensor *self) {
    dl_export *e = (dl_export *)self;
    mk_decref(e->arr);
    free(e);
}

static void dl_capsule_destructor(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
        mk_DLManagedTensor *t = PyCapsule_GetPointer(cap, "dltensor");
        if (t && t->deleter) t->deleter(t);
    }
}

static int dl_type(mk_dtype t, mk_DLDataType *d) {
    static const uint8_t codes[] = {
        [MK_KIND_BOOL] = DL_BOOL, [MK_KIND_UINT] = DL_UINT, [MK_KIND_INT] = DL_INT,
        [MK_KIND_FLOAT] = DL_FLOAT, [MK_KIND_COMPLEX] = DL_COMPLEX,
    };
    d->code = t == MK_BFLOAT16 ? DL_BFLOAT : codes[mk_dtypes[t].kind];
    d->bits = (uint8_t)(8 * mk_dtype_size(t));
    d->lanes = 1;
    return 0;
}

/* array.__dlpack__(stream=None, max_version=None, dl_device=None, copy=None):
 * a "dltensor" capsule viewing the evaluated array's memory (CPU). dl_device
 * may ask for the CPU (MLX's tests do, as a Mac's MLX exports Metal buffers
 * by default); other devices raise BufferError with MLX's messages. */
PyObject *mkpy_array_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"*stream", "*max_version", "*dl_device", "*copy", NULL};
    PyObject *a[4];
    if (mkpy_parse("__dlpack__", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (a[2] && a[2] != Py_None) {
        int type, id;
        if (!PyTuple_Check(a[2]) || !PyArg_ParseTuple(a[2], "ii", &type, &id)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "__dlpack__: dl_device must be a tuple (device_type, device_id).");
            return NULL;
        }
        if (type == DL_CUDA || type == DL_CUDA_MANAGED) {
            PyErr_SetString(PyExc_BufferError, "CUDA DLPack export is not supported.");
            return NULL;
        }
        if (type == DL_METAL) {
            PyErr_SetString(PyExc_BufferError, "Metal DLPack export is not available: mkpy's arrays are in host "
                                               "memory (export them with dl_device=(1, 0)).");
            return NULL;
        }
        if (type != DL_CPU) {
            PyErr_SetString(PyExc_BufferError, "Cannot export mlx array to requested DLPack device.");
            return NULL;
        }
    }
    mk_array *x = MKARR(self);
    if (mkpy_eval(&x, 1) < 0) return NULL;
    dl_export *e = calloc(1, sizeof *e);
    if (!e) return PyErr_NoMemory();
    mk_incref(x);
    e->arr = x;
    memcpy(e->shape, x->shape, x->ndim * sizeof(int64_t));
    memcpy(e->strides, x->strides, x->ndim * sizeof(int64_t));
    e->t.dl_tensor.data = x->size ? mk_data(x) : NULL;
    e->t.dl_tensor.device = (mk_DLDevice){DL_CPU, 0};
    e->t.dl_tensor.ndim = x->ndim;
    dl_type(x->dtype, &e->t.dl_tensor.dtype);
    e->t.dl_tensor.shape = e->shape;
    e->t.dl_tensor.strides = e->strides;
    e->t.manager_ctx = e;
    e->t.deleter = dl_delete;
    PyObject *cap = PyCapsule_New(&e->t, "dltensor", dl_capsule_destructor);
    if (!cap) dl_delete(&e->t);
    return cap;
}

PyObject *mkpy_array_dlpack_device(PyObject *self, PyObject *unused) {
    (void)self, (void)unused;
    return Py_BuildValue("(ii)", dl_reported_device(), 0);
}

/* from_dlpack(x, /, *, device=None, copy=None): a copy of the CPU tensor
 * behind x.__dlpack__() that keeps its strides (as MLX's import), with MLX's
 * dtype mapping (float64 -> float32, complex128 -> complex64); copy=False
 * adopts it (mkpy_adopt). When the producer refuses DLPack (NumPy 1.x has no
 * bool DLPack), its buffer protocol is read instead, as nanobind's import
 * falls back to it. */
static PyObject *not_dlpack(PyObject *x) {
    PyObject *name = mkpy_type_name(x);
    if (name) PyErr_Format(PyExc_TypeError, "from_dlpack(): %U is not a DLPack tensor or buffer.", name);
    Py_XDECREF(name);
    return NULL;
}

static PyObject *py_from_dlpack(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"x", "*device", "*copy", NULL};
    PARSE("from_dlpack", 1);
    int copy = -1;
    if (a[2] && a[2] != Py_None && mkpy_parse_bool(a[2], 0, &copy) < 0) return NULL;
    if (copy == 0) {
        mk_array *r = mkpy_adopt(a[0], -1);
        return r ? mkpy_wrap(r) : PyErr_Occurred() ? NULL : not_dlpack(a[0]);
    }
    mkpy_lent l;
    int rc = mkpy_lend(a[0], &l);
    if (rc <= 0) return rc == 0 ? not_dlpack(a[0]) : NULL;
    int64_t shape[MK_MAX_NDIM], strides[MK_MAX_NDIM];
    PyObject *res = NULL;
    for (int k = 0; k < l.ndim; k++) {
        shape[k] = l.shape[k];
        if (l.strides[k] % l.itemsize) {
            PyErr_SetString(PyExc_ValueError, "[from_dlpack] Strides must be whole elements.");
            goto done;
        }
        strides[k] = l.strides[k] / l.itemsize;
    }
    {
        mk_array *out = mkpy_from_strided(l.data, l.src, l.ndim, shape, strides, l.itemsize);
        res = out ? mkpy_wrap(out) : NULL;
    }
done:
    mkpy_lent_release(&l);
    return res;
}

/* ---------------------------------------------------------------- the table */

PyMethodDef mkpy_extra_functions[] = {
    {"hanning", FN(py_hanning), FASTKW, "hanning(M, *, stream=None)\n--\n\nReturn the Hanning window."},
    {"hamming", FN(py_hamming), FASTKW, "hamming(M, *, stream=None)\n--\n\nReturn the Hamming window."},
    {"bartlett", FN(py_bartlett), FASTKW, "bartlett(M, *, stream=None)\n--\n\nReturn the Bartlett window."},
    {"blackman", FN(py_blackman), FASTKW, "blackman(M, *, stream=None)\n--\n\nReturn the Blackman window."},
    {"divmod", FN(py_divmod), FASTKW,
     "divmod(a, b, /, *, stream=None)\n--\n\nElement-wise quotient and remainder: [a // b, a % b]."},
    {"as_strided", FN(py_as_strided), FASTKW,
     "as_strided(a, /, shape=None, strides=None, offset=0, *, stream=None)\n--\n\n"
     "A view of a's elements (in row-major order) with the given shape, strides and offset."},
    {"hadamard_transform", FN(py_hadamard_transform), FASTKW,
     "hadamard_transform(a, scale=None, *, stream=None)\n--\n\n"
     "The Walsh-Hadamard transform along the last axis (scale defaults to 1/sqrt(n))."},
    {"median", FN(py_median), FASTKW,
     "median(a, /, axis=None, keepdims=False, *, stream=None)\n--\n\nThe median(s) over the given axes."},
    {"count_nonzero", FN(py_count_nonzero), FASTKW,
     "count_nonzero(a, /, *, axis=None, keepdims=False, stream=None)\n--\n\n"
     "Count the non-zero elements along the given axes."},
    {"roll", FN(py_roll), FASTKW,
     "roll(a, shift, axis=None, /, *, stream=None)\n--\n\nRoll elements along the given axes."},
    {"flip", FN(py_flip), FASTKW,
     "flip(a, /, axis=None, *, stream=None)\n--\n\nReverse the order of elements along the given axes."},
    {"kron", FN(py_kron), FASTKW, "kron(a, b, *, stream=None)\n--\n\nThe Kronecker product of a and b."},
    {"logical_xor", FN(py_logical_xor), FASTKW,
     "logical_xor(a, b, /, *, stream=None)\n--\n\nElement-wise logical exclusive or."},
    {"trunc", FN(py_trunc), FASTKW, "trunc(a, /, *, stream=None)\n--\n\nElement-wise truncation towards zero."},
    {"slice", FN(py_slice), FASTKW,
     "slice(a, start_indices, axes, slice_size, *, stream=None)\n--\n\n"
     "Extract a sub-array starting at the (array) start indices along axes."},
    {"slice_update", FN(py_slice_update), FASTKW,
     "slice_update(a, update, start_indices, axes, *, stream=None)\n--\n\n"
     "Write update into a at the (array) start indices along axes."},
    {"searchsorted", FN(py_searchsorted), FASTKW,
     "searchsorted(sorted_sequence, values, /, side='left', *, stream=None)\n--\n\n"
     "Indices that keep sorted_sequence sorted when inserting values (uint32)."},
    {"meshgrid", FN(py_meshgrid), FASTKW,
     "meshgrid(*arrays, sparse=False, indexing='xy', stream=None)\n--\n\n"
     "Coordinate grids from 1-D coordinate arrays."},
    {"nan_to_num", FN(py_nan_to_num), FASTKW,
     "nan_to_num(a, nan=0, posinf=None, neginf=None, *, stream=None)\n--\n\n"
     "Replace NaN and infinities with finite numbers."},
    {"diff", FN(py_diff), FASTKW,
     "diff(a, /, n=1, axis=-1, *, stream=None)\n--\n\nThe n-th discrete difference along an axis."},
    {"trace", FN(py_trace), FASTKW,
     "trace(a, /, offset=0, axis1=0, axis2=1, dtype=None, *, stream=None)\n--\n\n"
     "The sum along a diagonal."},
    {"vecdot", FN(py_vecdot), FASTKW,
     "vecdot(a, b, /, *, axis=-1, stream=None)\n--\n\nThe vector dot product along an axis."},
    {"depends", FN(py_depends), FASTKW,
     "depends(inputs, dependencies)\n--\n\n"
     "The inputs, computed only after the dependencies have been."},
    {"result_type", FN(py_result_type), FASTKW,
     "result_type(*arrays_and_dtypes)\n--\n\nThe dtype that promoting the arguments gives."},
    {"can_cast", FN(py_can_cast), FASTKW,
     "can_cast(from_, to)\n--\n\nWhether promoting from_ with to gives to."},
    {"isdtype", FN(py_isdtype), FASTKW,
     "isdtype(dtype, kind)\n--\n\nWhether dtype belongs to a kind (a dtype, a kind string, or a tuple)."},
    {"set_printoptions", FN(py_set_printoptions), FASTKW,
     "set_printoptions(precision=-1)\n--\n\nSet the number of decimals arrays print with (-1: default)."},
    {"get_printoptions", (PyCFunction)py_get_printoptions, METH_NOARGS,
     "get_printoptions()\n--\n\nThe current print options."},
    {"printoptions", FN(py_printoptions), FASTKW,
     "printoptions(precision=-1)\n--\n\nA context manager setting print options temporarily."},
    {"asarray", FN(py_asarray), FASTKW,
     "asarray(a, dtype=None, *, copy=None)\n--\n\nConvert the input to an array (an array of that dtype is returned as is; "
     "copy=False adopts a host buffer's memory)."},
    {"from_dlpack", FN(py_from_dlpack), FASTKW,
     "from_dlpack(x, /, *, device=None, copy=None)\n--\n\nA copy of a CPU DLPack tensor as an array (copy=False adopts "
     "its memory)."},
    {NULL},
};

static int add_new(PyObject *m, const char *name, PyObject *v) {
    if (!v) return -1;
    int rc = PyModule_AddObjectRef(m, name, v);
    Py_DECREF(v);
    return rc;
}

int mkpy_extra_init(PyObject *m) {
    if (PyType_Ready(&PyFinfo_Type) < 0 || PyType_Ready(&PyIinfo_Type) < 0) return -1;
    if (PyType_Ready(&PyPrintOptions_Type) < 0 || PyType_Ready(&PyPrintContext_Type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "PrintOptions", (PyObject *)&PyPrintOptions_Type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "finfo", (PyObject *)&PyFinfo_Type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "iinfo", (PyObject *)&PyIinfo_Type) < 0) return -1;
    /* MLX's constants */
    if (add_new(m, "nan", PyFloat_FromDouble(NAN)) < 0 || add_new(m, "inf", PyFloat_FromDouble(INFINITY)) < 0 ||
        add_new(m, "e", PyFloat_FromDouble(2.71828182845904523536)) < 0 ||
        add_new(m, "pi", PyFloat_FromDouble(3.14159265358979323846)) < 0 ||
        add_new(m, "euler_gamma", PyFloat_FromDouble(0.57721566490153286061)) < 0 ||
        PyModule_AddObjectRef(m, "newaxis", Py_None) < 0)
        return -1;
    PyObject *zl = PyObject_GetAttrString(m, "zeros_like");
    if (!zl) return -1;
    return add_new(m, "empty_like", zl);
}
