/* Module functions of the create family: zeros, ones, full and their _like
 * forms, arange, linspace, eye, identity, tri, tril, triu. Signatures,
 * defaults and dtype rules are MLX 0.32's. */
#include <string.h>

#include "core/types.h"
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

/* ------------------------------------------------------------- helpers */

/* A Dtype argument where None (or absent) means `dflt`. */
static int opt_dtype(PyObject *o, mk_dtype dflt, mk_dtype *out) {
    if (!o || o == Py_None) {
        *out = dflt;
        return 0;
    }
    return mkpy_parse_dtype(o, out);
}

/* The TypeError nanobind raises when no overload matches, listing the types
 * the call was made with. */
PyObject *mkpy_bad_call(const char *fname, const char *sigs, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
    /* type names as nanobind prints them (mkpy_type_name): ndarray, float32, __main__.Foo */
    PyObject *types = PyUnicode_FromString(""), *name;
    for (Py_ssize_t i = 0; types && i < nargs; i++) {
        PyObject *t = (name = mkpy_type_name(args[i])) ? PyUnicode_FromFormat("%U%s%U", types, i ? ", " : "", name)
                                                         : NULL;
        Py_XDECREF(name);
        Py_SETREF(types, t);
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; types && k < nkw; k++) {
        PyObject *t = (name = mkpy_type_name(args[nargs + k]))
                          ? PyUnicode_FromFormat("%U%s%s%U: %U%s", types, (nargs || k) ? ", " : "",
                                                 k ? "" : "kwargs = { ", PyTuple_GET_ITEM(kwnames, k), name,
                                                 k == nkw - 1 ? " }" : "")
                          : NULL;
        Py_XDECREF(name);
        Py_SETREF(types, t);
    }
    if (!types) return NULL;
    PyErr_Format(PyExc_TypeError,
                 "%s(): incompatible function arguments. The following argument types are supported:\n%s\n\n"
                 "Invoked with types: %U",
                 fname, sigs, types);
    Py_DECREF(types);
    return NULL;
}

/* MLX's to_array(scalar_or_array, dtype): a Python scalar takes `dtype` when
 * it can hold it (ints that do not fit raise; a float keeps float32 unless
 * the dtype is floating; bool dtypes make ints int32); arrays are returned as
 * they are. dtype < 0: the scalar's own dtype. */
mk_array *mkpy_to_array_dtype(PyObject *v, int dtype) {
    if (PyMkArray_Check(v)) {
        mk_incref(MKARR(v));
        return MKARR(v);
    }
    mk_array *a = NULL;
    if (PyBool_Check(v)) {
        a = mk_scalar_i64(dtype >= 0 ? (mk_dtype)dtype : MK_BOOL, v == Py_True);
    } else if (PyLong_Check(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) {
            PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to an mkpy array.");
            return NULL;
        }
        if (x == -1 && PyErr_Occurred()) return NULL;
        mk_dtype t = dtype >= 0 ? (mk_dtype)dtype : (x >= INT32_MIN && x <= INT32_MAX) ? MK_INT32 : MK_INT64;
        if (mk_is_integral(t) && mk_dtype_size(t) < 8) {
            int bits = 8 * (int)mk_dtype_size(t);
            long long lo = mk_is_unsigned(t) ? 0 : -(1LL << (bits - 1));
            long long hi = mk_is_unsigned(t) ? (1LL << bits) - 1 : (1LL << (bits - 1)) - 1;
            if (x < lo || x > hi) {
                PyErr_Format(PyExc_ValueError, "Converting %lld to %s would result in overflow.", x, mk_dtype_name(t));
                return NULL;
            }
        }
        if (t == MK_BOOL) t = MK_INT32;
        if (t == MK_UINT64)
            a = mk_scalar_i64(t, x); /* wraps as MLX's cast does */
        else if (mk_is_integral(t))
            a = mk_scalar_i64(t, x);
        else if (t == MK_COMPLEX64) {
            mk_c64 z = (float)x;
            a = mk_scalar(t, &z);
        } else
            a = mk_scalar_f64(t, (double)x);
    } else if (PyFloat_Check(v)) {
        mk_dtype t = dtype >= 0 && mk_is_float((mk_dtype)dtype) ? (mk_dtype)dtype : MK_FLOAT32;
        a = mk_scalar_f64(t, PyFloat_AS_DOUBLE(v));
    } else if (PyComplex_Check(v)) {
        Py_complex c = PyComplex_AsCComplex(v);
        mk_c64 z = (float)c.real + (float)c.imag * I;
        a = mk_scalar(MK_COMPLEX64, &z);
    } else if (PyList_Check(v) || PyTuple_Check(v) || PyUnicode_Check(v) || v == Py_None) {
        PyErr_Format(PyExc_ValueError, "Invalid type %s received in array initialization.", Py_TYPE(v)->tp_name);
        return NULL;
    } else {
        return mkpy_to_array(v, -1); /* numpy arrays and scalars keep their dtype */
    }
    return a ? a : (mk_array *)mkpy_raise();
}

static int need_array(const char *fname, const char *sigs, PyObject *o, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames) {
    if (PyMkArray_Check(o)) return 0;
    mkpy_bad_call(fname, sigs, args, nargs, kwnames);
    return -1;
}

static int int_arg(PyObject *o, int64_t dflt, int64_t *out) {
    if (!o || o == Py_None) {
        *out = dflt;
        return 0;
    }
    return mkpy_parse_int(o, out);
}

/* ------------------------------------------------------ zeros, ones, full */

static PyObject *const_fill(const char *fname, int one, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"shape", "dtype", "*stream", NULL};
    PyObject *a[3];
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    mk_dtype t;
    if (mkpy_parse(fname, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (mkpy_parse_shape(a[0], &ndim, shape) < 0 || opt_dtype(a[1], MK_FLOAT32, &t) < 0) return NULL;
    return mkpy_wrap(one ? mk_ones(ndim, shape, t) : mk_zeros(ndim, shape, t));
}

MKPY_STREAM_BINDING(py_zeros)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return const_fill("zeros", 0, args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_ones)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return const_fill("ones", 1, args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_full)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"shape", "vals", "dtype", "*stream", NULL};
    PyObject *a[4];
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    mk_dtype t;
    (void)m;
    if (mkpy_parse("full", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (a[1] == Py_None)
        return mkpy_bad_call("full",
                        "    1. full(shape: int | Sequence[int], vals: scalar | array, dtype: Dtype | None = None, "
                        "*, stream: StreamOrDevice = None) -> array",
                        args, nargs, kwnames);
    if (mkpy_parse_shape(a[0], &ndim, shape) < 0) return NULL;
    int has_dtype = a[2] && a[2] != Py_None;
    if (has_dtype && mkpy_parse_dtype(a[2], &t) < 0) return NULL;
    /* MLX: full(shape, to_array(vals, dtype)), which keeps an array's dtype */
    mk_array *v = mkpy_to_array_dtype(a[1], has_dtype ? (int)t : -1);
    if (!v) return NULL;
    mk_array *r = mk_full(ndim, shape, v, v->dtype);
    mk_decref(v);
    return mkpy_wrap(r);
}

/* v broadcast against x's shape, as a node that reads x: where(true, v, x) */
static mk_array *like_node(mk_array *x, mk_array *v, mk_dtype t) {
    bool yes = true;
    mk_array *c = mk_scalar(MK_BOOL, &yes);
    mk_array *xt = c ? mk_as_dtype(x, t) : NULL;
    mk_array *r = xt ? mk_where(c, v, xt) : NULL;
    mk_xdecref(c);
    mk_xdecref(xt);
    return r;
}

static PyObject *like_fill(const char *fname, const char *sig, int one, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames) {
    static const char *const names[] = {"a", "dtype", "*stream", NULL};
    PyObject *a[3];
    mk_dtype t;
    if (mkpy_parse(fname, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (need_array(fname, sig, a[0], args, nargs, kwnames) < 0) return NULL;
    mk_array *x = MKARR(a[0]);
    if (opt_dtype(a[1], x->dtype, &t) < 0) return NULL;
    if (mk_tracing()) {
        /* under a transformation the result depends on a (so a shapeless
         * compile's replay gives a's new shape) */
        mk_array *v = mk_scalar_f64(t, one ? 1.0 : 0.0);
        mk_array *r = v ? like_node(x, v, t) : NULL;
        mk_xdecref(v);
        return mkpy_wrap(r);
    }
    return mkpy_wrap(one ? mk_ones(x->ndim, x->shape, t) : mk_zeros(x->ndim, x->shape, t));
}

MKPY_STREAM_BINDING(py_zeros_like)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return like_fill("zeros_like",
                     "    1. zeros_like(a: array, /, dtype: Dtype | None = None, *, stream: StreamOrDevice = None) "
                     "-> array",
                     0, args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_ones_like)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return like_fill("ones_like",
                     "    1. ones_like(a: array, /, dtype: Dtype | None = None, *, stream: StreamOrDevice = None) "
                     "-> array",
                     1, args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_full_like)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "vals", "dtype", "*stream", NULL};
    static const char sig[] = "    1. full_like(a: array, vals: scalar | array, dtype: Dtype | None = None, *, "
                              "stream: StreamOrDevice = None) -> array";
    PyObject *a[4];
    mk_dtype t;
    (void)m;
    if (mkpy_parse("full_like", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (need_array("full_like", sig, a[0], args, nargs, kwnames) < 0) return NULL;
    if (a[1] == Py_None) return mkpy_bad_call("full_like", sig, args, nargs, kwnames);
    mk_array *x = MKARR(a[0]);
    if (opt_dtype(a[2], x->dtype, &t) < 0) return NULL;
    mk_array *v = mkpy_to_array_dtype(a[1], t);
    if (!v) return NULL;
    /* MLX broadcasts a against vals: the result may be larger than a */
    int64_t shape[MK_MAX_NDIM];
    int ndim = mk_broadcast_shapes(x->ndim, x->shape, v->ndim, v->shape, shape);
    mk_array *r = ndim < 0 ? NULL : mk_tracing() ? like_node(x, v, t) : mk_full(ndim, shape, v, t);
    mk_decref(v);
    return mkpy_wrap(r);
}

/* ------------------------------------------------------------- arange */

static const char arange_sigs[] =
    "    1. arange(start : int | float, stop : None | int | float, step : None | int | float, dtype: Dtype | None = "
    "None, *, stream: StreamOrDevice = None) -> array\n"
    "    2. arange(stop : int | float, step : None | int | float = None, dtype: Dtype | None = None, *, stream: "
    "StreamOrDevice = None) -> array";

/* A number argument of arange: 1 int, 2 float, 0 not a number. */
static int num_kind(PyObject *o) {
    if (PyFloat_Check(o)) return 2;
    if (PyLong_Check(o) || (PyIndex_Check(o) && !PyMkArray_Check(o))) return 1;
    return 0;
}

/* Binds the call to one overload's names; returns 0 when it matches. */
static int arange_bind(const char *const *names, int n, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                       PyObject **out) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (nargs > n - 1) return -1; /* the last name is stream, keyword-only */
    for (Py_ssize_t i = 0; i < nargs; i++) out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        if (!key) {
            PyErr_Clear();
            return -1;
        }
        int i = 0;
        while (i < n && strcmp(names[i], key) != 0) i++;
        if (i == n || out[i]) return -1;
        out[i] = args[nargs + k];
    }
    return 0;
}

MKPY_STREAM_BINDING(py_arange)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const n1[] = {"start", "stop", "step", "dtype", "stream"};
    static const char *const n2[] = {"stop", "step", "dtype", "stream"};
    PyObject *a[5], *start = NULL, *stop = NULL, *step = NULL, *dt = NULL, *st = NULL;
    (void)m;
    /* overload 1: start and stop given, stop may be None */
    if (arange_bind(n1, 5, args, nargs, kwnames, a) == 0 && a[0] && a[1] && num_kind(a[0]) &&
        (a[1] == Py_None || num_kind(a[1])) && (!a[2] || a[2] == Py_None || num_kind(a[2])) &&
        (!a[3] || a[3] == Py_None || PyMkDtype_Check(a[3]))) {
        start = a[0];
        stop = a[1] == Py_None ? NULL : a[1];
        step = a[2];
        dt = a[3];
        st = a[4];
        if (!stop) {
            stop = start;
            start = NULL;
        }
    } else if (arange_bind(n2, 4, args, nargs, kwnames, a) == 0 && a[0] && num_kind(a[0]) &&
               (!a[1] || a[1] == Py_None || num_kind(a[1])) && (!a[2] || a[2] == Py_None || PyMkDtype_Check(a[2]))) {
        stop = a[0];
        step = a[1];
        dt = a[2];
        st = a[3];
    } else {
        return mkpy_bad_call("arange", arange_sigs, args, nargs, kwnames);
    }
    if (step == Py_None) step = NULL;
    if (mkpy_stream_arg("arange", st) < 0) return NULL;
    PyObject *vals[3] = {start, stop, step};
    double d[3] = {0.0, 0.0, 1.0};
    int any_float = 0, big = 0;
    for (int i = 0; i < 3; i++) {
        if (!vals[i]) continue;
        if (num_kind(vals[i]) == 2) {
            any_float = 1;
            d[i] = PyFloat_AsDouble(vals[i]);
        } else {
            int64_t v;
            if (mkpy_parse_int(vals[i], &v) < 0) return NULL;
            if (v < INT32_MIN || v > INT32_MAX) big = 1;
            d[i] = (double)v;
        }
    }
    mk_dtype t;
    if (opt_dtype(dt, any_float ? MK_FLOAT32 : big ? MK_INT64 : MK_INT32, &t) < 0) return NULL;
    return mkpy_wrap(mk_arange(d[0], d[1], d[2], t));
}

/* ----------------------------------------------------------- linspace */

static int scalar_double(PyObject *o, double *out) {
    if (PyComplex_Check(o) || PyUnicode_Check(o) || o == Py_None) return -1;
    if (PyMkArray_Check(o)) {
        mk_array *x = MKARR(o);
        if (x->size != 1 || x->dtype == MK_COMPLEX64) return -1;
        mk_incref(x);
        int rc = mkpy_eval(&x, 1) < 0 ? -2 : 0;
        if (rc == 0) *out = mk_get_f64(x->dtype, mk_data(x));
        mk_decref(x);
        return rc;
    }
    *out = PyFloat_AsDouble(o);
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

MKPY_STREAM_BINDING(py_linspace)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"start", "stop", "num", "endpoint", "dtype", "stream", NULL};
    static const char sig[] = "    1. linspace(start: scalar, stop: scalar, num: int | None = 50, endpoint: bool = "
                              "True, dtype: Dtype | None = float32, stream: StreamOrDevice = None) -> array";
    PyObject *a[6];
    double start, stop;
    int64_t num = 50;
    int endpoint;
    mk_dtype t;
    (void)m;
    if (mkpy_parse("linspace", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    int rs = scalar_double(a[0], &start), rt = rs ? rs : scalar_double(a[1], &stop);
    if (rs == -2 || rt == -2) return NULL;
    if (rs || rt || (a[2] && (!PyIndex_Check(a[2]) || PyMkArray_Check(a[2]))) ||
        (a[3] && !PyBool_Check(a[3])) || (a[4] && a[4] != Py_None && !PyMkDtype_Check(a[4])))
        return mkpy_bad_call("linspace", sig, args, nargs, kwnames);
    if (a[2] && mkpy_parse_int(a[2], &num) < 0) return NULL;
    if (mkpy_parse_bool(a[3], 1, &endpoint) < 0 || opt_dtype(a[4], MK_FLOAT32, &t) < 0) return NULL;
    return mkpy_wrap(mk_linspace_ex(start, stop, num, endpoint, t));
}

/* ------------------------------------------------------ eye, identity, tri */

static int is_int_arg(PyObject *o) { return !o || o == Py_None || (PyIndex_Check(o) && !PyMkArray_Check(o)); }

static PyObject *eye_tri(const char *fname, const char *sig, int eye, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
    static const char *const names[] = {"n", "m", "k", "dtype", "*stream", NULL};
    PyObject *a[5];
    int64_t n, mm, k;
    mk_dtype t;
    if (mkpy_parse(fname, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (a[0] == Py_None || !is_int_arg(a[0]) || !is_int_arg(a[1]) || !is_int_arg(a[2]) || a[2] == Py_None ||
        (a[3] && a[3] != Py_None && !PyMkDtype_Check(a[3])))
        return mkpy_bad_call(fname, sig, args, nargs, kwnames);
    if (int_arg(a[0], 0, &n) < 0 || int_arg(a[1], n, &mm) < 0 || int_arg(a[2], 0, &k) < 0 ||
        opt_dtype(a[3], MK_FLOAT32, &t) < 0)
        return NULL;
    return mkpy_wrap(eye ? mk_eye(n, mm, k, t) : mk_tri(n, mm, k, t));
}

MKPY_STREAM_BINDING(py_eye)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return eye_tri("eye",
                   "    1. eye(n: int, m: int | None = None, k: int = 0, dtype: Dtype | None = float32, *, stream: "
                   "StreamOrDevice = None) -> array",
                   1, args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_tri)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return eye_tri("tri",
                   "    1. tri(n: int, m: int | None = None, k: int = 0, dtype: Dtype | None = None, *, stream: "
                   "StreamOrDevice = None) -> array",
                   0, args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_identity)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"n", "dtype", "*stream", NULL};
    PyObject *a[3];
    int64_t n;
    mk_dtype t;
    (void)m;
    if (mkpy_parse("identity", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (a[0] == Py_None || !is_int_arg(a[0]) || (a[1] && a[1] != Py_None && !PyMkDtype_Check(a[1])))
        return mkpy_bad_call("identity",
                        "    1. identity(n: int, dtype: Dtype | None = float32, *, stream: StreamOrDevice = None) "
                        "-> array",
                        args, nargs, kwnames);
    if (mkpy_parse_int(a[0], &n) < 0 || opt_dtype(a[1], MK_FLOAT32, &t) < 0) return NULL;
    return mkpy_wrap(mk_eye(n, n, 0, t));
}

static PyObject *tri_mask(const char *fname, int upper, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"x", "k", "*stream", NULL};
    char sig[160];
    PyObject *a[3];
    int64_t k;
    PyOS_snprintf(sig, sizeof sig, "    1. %s(x: array, k: int = 0, *, stream: StreamOrDevice = None) -> array",
                  fname);
    if (mkpy_parse(fname, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !is_int_arg(a[1]) || a[1] == Py_None)
        return mkpy_bad_call(fname, sig, args, nargs, kwnames);
    if (int_arg(a[1], 0, &k) < 0) return NULL;
    mk_array *x = MKARR(a[0]);
    return mkpy_wrap(upper ? mk_triu(x, k) : mk_tril(x, k));
}

MKPY_STREAM_BINDING(py_tril)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return tri_mask("tril", 0, args, nargs, kwnames);
}

MKPY_STREAM_BINDING(py_triu)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    return tri_mask("triu", 1, args, nargs, kwnames);
}

PyMethodDef mkpy_create_functions[] = {
    {"zeros", FN(py_zeros), FASTKW,
     "zeros(shape, dtype=float32, *, stream=None)\n--\n\nAn array of zeros of the given shape."},
    {"ones", FN(py_ones), FASTKW,
     "ones(shape, dtype=float32, *, stream=None)\n--\n\nAn array of ones of the given shape."},
    {"full", FN(py_full), FASTKW,
     "full(shape, vals, dtype=None, *, stream=None)\n--\n\n"
     "An array of the given shape filled with vals (broadcast to shape)."},
    {"zeros_like", FN(py_zeros_like), FASTKW,
     "zeros_like(a, /, dtype=None, *, stream=None)\n--\n\nZeros of a's shape and dtype."},
    {"ones_like", FN(py_ones_like), FASTKW,
     "ones_like(a, /, dtype=None, *, stream=None)\n--\n\nOnes of a's shape and dtype."},
    {"full_like", FN(py_full_like), FASTKW,
     "full_like(a, vals, dtype=None, *, stream=None)\n--\n\nvals broadcast to a's shape, in a's dtype."},
    {"arange", FN(py_arange), FASTKW,
     "arange(start, stop, step, dtype=None, *, stream=None) -> array\n"
     "arange(stop, step=None, dtype=None, *, stream=None) -> array\n\n"
     "Values from start to stop (excluded) by step. Integer arguments give int32\n"
     "(int64 when they do not fit), any float gives float32."},
    {"linspace", FN(py_linspace), FASTKW,
     "linspace(start, stop, num=50, endpoint=True, dtype=float32, stream=None)\n--\n\n"
     "num evenly spaced values from start to stop."},
    {"eye", FN(py_eye), FASTKW,
     "eye(n, m=None, k=0, dtype=float32, *, stream=None)\n--\n\n"
     "An n x m array with ones on the k-th diagonal."},
    {"identity", FN(py_identity), FASTKW,
     "identity(n, dtype=float32, *, stream=None)\n--\n\nThe n x n identity matrix."},
    {"tri", FN(py_tri), FASTKW,
     "tri(n, m=None, k=0, dtype=None, *, stream=None)\n--\n\n"
     "An n x m array with ones at and below the k-th diagonal."},
    {"tril", FN(py_tril), FASTKW,
     "tril(x, k=0, *, stream=None)\n--\n\nZeros above the k-th diagonal of the last two axes."},
    {"triu", FN(py_triu), FASTKW,
     "triu(x, k=0, *, stream=None)\n--\n\nZeros below the k-th diagonal of the last two axes."},
    {NULL},
};
