/* Module functions of the random family: the mkpy.random submodule.
 *
 * Signatures, defaults and argument conversions are MLX 0.32's. As in MLX, a
 * call without key= takes the next key of the global sequence before it
 * converts its other arguments; mkpy.random.state is a one-element sequence
 * holding the global key, which can be read and replaced. */
#include <string.h>

#include "core/linalg.h"
#include "core/types.h"
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

/* ------------------------------------------------------------- helpers */

static int is_dtype_arg(PyObject *o) { return !o || o == Py_None || PyMkDtype_Check(o); }
static int is_key_arg(PyObject *o) { return !o || o == Py_None || PyMkArray_Check(o); }
/* shape: a sequence of ints (an int alone is refused, as by MLX) */
static int is_shape_arg(PyObject *o, int allow_none) {
    if (!o) return 1;
    if (o == Py_None) return allow_none;
    return PyList_Check(o) || PyTuple_Check(o);
}
static int is_scalar_or_array(PyObject *o) { return o != Py_None; }

static int shape_arg(PyObject *o, int *ndim, int64_t *shape) {
    if (!o || o == Py_None) {
        *ndim = 0;
        return 0;
    }
    return mkpy_parse_shape(o, ndim, shape);
}

static int dtype_arg(PyObject *o, mk_dtype dflt, mk_dtype *out) {
    if (!o || o == Py_None) {
        *out = dflt;
        return 0;
    }
    return mkpy_parse_dtype(o, out);
}

/* The key to use: the given one (borrowed from the caller, increfed), or the
 * next global key. */
static mk_array *key_arg(PyObject *o) {
    if (o && o != Py_None) {
        mk_incref(MKARR(o));
        return MKARR(o);
    }
    mk_array *k = mk_random_next_key();
    return k ? k : (mk_array *)mkpy_raise();
}

/* A Python int in [0, 2^64). */
static int seed_arg(const char *fname, const char *sig, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                    PyObject *o, uint64_t *out) {
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        unsigned long long v = PyLong_AsUnsignedLongLong(o);
        if (!(v == (unsigned long long)-1 && PyErr_Occurred())) {
            *out = v;
            return 0;
        }
        PyErr_Clear();
    }
    mkpy_bad_call(fname, sig, args, nargs, kwnames);
    return -1;
}

static void drop(mk_array *a, mk_array *b, mk_array *c) {
    mk_xdecref(a);
    mk_xdecref(b);
    mk_xdecref(c);
}

/* Wraps r after dropping the temporaries. */
static PyObject *finish(mk_array *r, mk_array *a, mk_array *b, mk_array *c) {
    drop(a, b, c);
    return mkpy_wrap(r);
}

/* ------------------------------------------------------ seed, key, split */

static PyObject *py_seed(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"seed", NULL};
    static const char sig[] = "    1. seed(seed: int) -> None";
    PyObject *a[1];
    uint64_t s;
    (void)m;
    if (mkpy_parse("seed", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (seed_arg("seed", sig, args, nargs, kwnames, a[0], &s) < 0) return NULL;
    mk_random_seed(s);
    Py_RETURN_NONE;
}

static PyObject *py_key(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"seed", NULL};
    static const char sig[] = "    1. key(seed: int) -> mlx.core.array";
    PyObject *a[1];
    uint64_t s;
    (void)m;
    if (mkpy_parse("key", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (seed_arg("key", sig, args, nargs, kwnames, a[0], &s) < 0) return NULL;
    return mkpy_wrap(mk_random_key(s));
}

MKPY_STREAM_BINDING(py_split)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"key", "num", "stream", NULL};
    static const char sig[] = "    1. split(key: array, num: int = 2, stream: StreamOrDevice = None) -> array";
    PyObject *a[3];
    int64_t num = 2;
    (void)m;
    if (mkpy_parse("split", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || (a[1] && (!PyLong_Check(a[1]) || PyBool_Check(a[1]))))
        return mkpy_bad_call("split", sig, args, nargs, kwnames);
    if (a[1] && mkpy_parse_int(a[1], &num) < 0) return NULL;
    if (num < INT32_MIN || num > INT32_MAX) return mkpy_bad_call("split", sig, args, nargs, kwnames);
    return mkpy_wrap(mk_random_split(MKARR(a[0]), (int)num));
}

/* ------------------------------------------------------------------ bits */

MKPY_STREAM_BINDING(py_bits)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"shape", "width", "key", "stream", NULL};
    static const char sig[] = "    1. bits(shape: Sequence[int] = [], width: int = 4, key: array | None = None, "
                              "stream: StreamOrDevice = None) -> array";
    PyObject *a[4];
    int ndim;
    int64_t shape[MK_MAX_NDIM], width = 4;
    (void)m;
    if (mkpy_parse("bits", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (!is_shape_arg(a[0], 0) || (a[1] && !PyLong_Check(a[1])) || !is_key_arg(a[2]))
        return mkpy_bad_call("bits", sig, args, nargs, kwnames);
    if (shape_arg(a[0], &ndim, shape) < 0 || (a[1] && mkpy_parse_int(a[1], &width) < 0)) return NULL;
    mk_array *key = key_arg(a[2]);
    if (!key) return NULL;
    return finish(mk_random_bits(ndim, shape, (int)width, key), key, NULL, NULL);
}

/* ---------------------------------------------------------------- uniform */

MKPY_STREAM_BINDING(py_uniform)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"low", "high", "shape", "dtype", "key", "stream", NULL};
    static const char sig[] =
        "    1. uniform(low: scalar | array = 0, high: scalar | array = 1, shape: Sequence[int] = [], dtype: Dtype | "
        "None = float32, key: array | None = None, stream: StreamOrDevice = None) -> array";
    PyObject *a[6];
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    mk_dtype t;
    (void)m;
    if (mkpy_parse("uniform", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if ((a[0] && !is_scalar_or_array(a[0])) || (a[1] && !is_scalar_or_array(a[1])) || !is_shape_arg(a[2], 0) ||
        !is_dtype_arg(a[3]) || !is_key_arg(a[4]))
        return mkpy_bad_call("uniform", sig, args, nargs, kwnames);
    if (shape_arg(a[2], &ndim, shape) < 0 || dtype_arg(a[3], MK_FLOAT32, &t) < 0) return NULL;
    mk_array *key = key_arg(a[4]), *lo = NULL, *hi = NULL;
    if (!key) return NULL;
    lo = a[0] ? mkpy_to_array_dtype(a[0], -1) : mk_scalar_i64(MK_INT32, 0);
    hi = lo ? (a[1] ? mkpy_to_array_dtype(a[1], -1) : mk_scalar_i64(MK_INT32, 1)) : NULL;
    if (!hi) {
        if (!PyErr_Occurred()) mkpy_raise();
        return drop(key, lo, NULL), NULL;
    }
    return finish(mk_random_uniform(lo, hi, ndim, shape, t, key), key, lo, hi);
}

/* ----------------------------------------------------------------- normal */

MKPY_STREAM_BINDING(py_normal)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"shape", "dtype", "loc", "scale", "key", "stream", NULL};
    static const char sig[] =
        "    1. normal(shape: Sequence[int] = [], dtype: Dtype | None = float32, loc: scalar | array | None = None, "
        "scale: scalar | array | None = None, key: array | None = None, stream: StreamOrDevice = None) -> array";
    PyObject *a[6];
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    mk_dtype t;
    (void)m;
    if (mkpy_parse("normal", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (!is_shape_arg(a[0], 0) || !is_dtype_arg(a[1]) || !is_key_arg(a[4]))
        return mkpy_bad_call("normal", sig, args, nargs, kwnames);
    if (shape_arg(a[0], &ndim, shape) < 0 || dtype_arg(a[1], MK_FLOAT32, &t) < 0) return NULL;
    mk_array *key = key_arg(a[4]), *loc = NULL, *scale = NULL;
    if (!key) return NULL;
    /* loc and scale: to_array(v, dtype) */
    if (a[2] && a[2] != Py_None && !(loc = mkpy_to_array_dtype(a[2], t))) return drop(key, NULL, NULL), NULL;
    if (a[3] && a[3] != Py_None && !(scale = mkpy_to_array_dtype(a[3], t))) return drop(key, loc, NULL), NULL;
    return finish(mk_random_normal(ndim, shape, t, loc, scale, key), key, loc, scale);
}

/* ---------------------------------------------------------------- randint */

MKPY_STREAM_BINDING(py_randint)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"low", "high", "shape", "dtype", "key", "stream", NULL};
    static const char sig[] =
        "    1. randint(low: scalar | array, high: scalar | array, shape: Sequence[int] = [], dtype: Dtype | None = "
        "int32, key: array | None = None, stream: StreamOrDevice = None) -> array";
    PyObject *a[6];
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    mk_dtype t;
    (void)m;
    if (mkpy_parse("randint", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (!is_scalar_or_array(a[0]) || !is_scalar_or_array(a[1]) || !is_shape_arg(a[2], 0) || !is_dtype_arg(a[3]) ||
        !is_key_arg(a[4]))
        return mkpy_bad_call("randint", sig, args, nargs, kwnames);
    if (shape_arg(a[2], &ndim, shape) < 0 || dtype_arg(a[3], MK_INT32, &t) < 0) return NULL;
    mk_array *key = key_arg(a[4]), *lo = NULL, *hi = NULL;
    if (!key) return NULL;
    if (!(lo = mkpy_to_array_dtype(a[0], -1)) || !(hi = mkpy_to_array_dtype(a[1], -1)))
        return drop(key, lo, NULL), NULL;
    return finish(mk_random_randint(lo, hi, ndim, shape, t, key), key, lo, hi);
}

/* -------------------------------------------------------------- bernoulli */

MKPY_STREAM_BINDING(py_bernoulli)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"p", "shape", "key", "stream", NULL};
    static const char sig[] =
        "    1. bernoulli(p: scalar | array = 0.5, shape: Sequence[int] | None = None, key: array | None = None, "
        "stream: StreamOrDevice = None) -> array";
    PyObject *a[4];
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    (void)m;
    if (mkpy_parse("bernoulli", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if ((a[0] && !is_scalar_or_array(a[0])) || !is_shape_arg(a[1], 1) || !is_key_arg(a[2]))
        return mkpy_bad_call("bernoulli", sig, args, nargs, kwnames);
    if (shape_arg(a[1], &ndim, shape) < 0) return NULL;
    mk_array *key = key_arg(a[2]), *p;
    if (!key) return NULL;
    p = a[0] ? mkpy_to_array_dtype(a[0], -1) : mk_scalar_f64(MK_FLOAT32, 0.5);
    if (!p) {
        if (!PyErr_Occurred()) mkpy_raise();
        return drop(key, NULL, NULL), NULL;
    }
    return finish(mk_random_bernoulli(p, ndim, shape, a[1] && a[1] != Py_None, key), key, p, NULL);
}

/* --------------------------------------------------------- gumbel, laplace */

MKPY_STREAM_BINDING(py_gumbel)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"shape", "dtype", "key", "stream", NULL};
    static const char sig[] = "    1. gumbel(shape: Sequence[int] = [], dtype: Dtype | None = float32, key: array | "
                              "None = None, stream: StreamOrDevice = None) -> array";
    PyObject *a[4];
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    mk_dtype t;
    (void)m;
    if (mkpy_parse("gumbel", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (!is_shape_arg(a[0], 0) || !is_dtype_arg(a[1]) || !is_key_arg(a[2]))
        return mkpy_bad_call("gumbel", sig, args, nargs, kwnames);
    if (shape_arg(a[0], &ndim, shape) < 0 || dtype_arg(a[1], MK_FLOAT32, &t) < 0) return NULL;
    mk_array *key = key_arg(a[2]);
    if (!key) return NULL;
    return finish(mk_random_gumbel(ndim, shape, t, key), key, NULL, NULL);
}

MKPY_STREAM_BINDING(py_laplace)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"shape", "dtype", "loc", "scale", "key", "stream", NULL};
    static const char sig[] =
        "    1. laplace(shape: Sequence[int] = [], dtype: Dtype | None = float32, loc: float = 0.0, scale: float = "
        "1.0, key: array | None = None, stream: StreamOrDevice = None) -> array";
    PyObject *a[6];
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    mk_dtype t;
    double loc = 0.0, scale = 1.0;
    (void)m;
    if (mkpy_parse("laplace", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (!is_shape_arg(a[0], 0) || !is_dtype_arg(a[1]) || (a[2] && !PyFloat_Check(a[2]) && !PyLong_Check(a[2])) ||
        (a[3] && !PyFloat_Check(a[3]) && !PyLong_Check(a[3])) || !is_key_arg(a[4]))
        return mkpy_bad_call("laplace", sig, args, nargs, kwnames);
    if (shape_arg(a[0], &ndim, shape) < 0 || dtype_arg(a[1], MK_FLOAT32, &t) < 0) return NULL;
    if ((a[2] && (loc = PyFloat_AsDouble(a[2])) == -1.0 && PyErr_Occurred()) ||
        (a[3] && (scale = PyFloat_AsDouble(a[3])) == -1.0 && PyErr_Occurred()))
        return NULL;
    mk_array *key = key_arg(a[4]);
    if (!key) return NULL;
    return finish(mk_random_laplace(ndim, shape, t, (float)loc, (float)scale, key), key, NULL, NULL);
}

/* ------------------------------------------ truncated_normal, categorical */

MKPY_STREAM_BINDING(py_truncated_normal)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"lower", "upper", "shape", "dtype", "key", "stream", NULL};
    static const char sig[] =
        "    1. truncated_normal(lower: scalar | array, upper: scalar | array, shape: Sequence[int] | None = None, "
        "dtype: Dtype | None = float32, key: array | None = None, stream: StreamOrDevice = None) -> array";
    PyObject *a[6];
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    mk_dtype t;
    (void)m;
    if (mkpy_parse("truncated_normal", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (!is_scalar_or_array(a[0]) || !is_scalar_or_array(a[1]) || !is_shape_arg(a[2], 1) || !is_dtype_arg(a[3]) ||
        !is_key_arg(a[4]))
        return mkpy_bad_call("truncated_normal", sig, args, nargs, kwnames);
    if (shape_arg(a[2], &ndim, shape) < 0 || dtype_arg(a[3], MK_FLOAT32, &t) < 0) return NULL;
    mk_array *key = key_arg(a[4]), *lo = NULL, *hi = NULL;
    if (!key) return NULL;
    if (!(lo = mkpy_to_array_dtype(a[0], -1)) || !(hi = mkpy_to_array_dtype(a[1], -1)))
        return drop(key, lo, NULL), NULL;
    return finish(mk_random_truncated_normal(lo, hi, ndim, shape, a[2] && a[2] != Py_None, t, key), key, lo, hi);
}

MKPY_STREAM_BINDING(py_categorical)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"logits", "axis", "shape", "num_samples", "key", "stream", NULL};
    static const char sig[] =
        "    1. categorical(logits: array, axis: int = -1, shape: Sequence[int] | None = None, num_samples: int | "
        "None = None, key: array | None = None, stream: StreamOrDevice = None) -> array";
    PyObject *a[6];
    int ndim;
    int64_t shape[MK_MAX_NDIM], axis = -1, num = 0;
    (void)m;
    if (mkpy_parse("categorical", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || (a[1] && !PyLong_Check(a[1])) || !is_shape_arg(a[2], 1) ||
        (a[3] && a[3] != Py_None && !PyLong_Check(a[3])) || !is_key_arg(a[4]))
        return mkpy_bad_call("categorical", sig, args, nargs, kwnames);
    int axis32 = -1;
    if ((a[1] && (mkpy_parse_int(a[1], &axis) < 0 || mkpy_int32_value(axis, &axis32) < 0)) ||
        shape_arg(a[2], &ndim, shape) < 0 ||
        (a[3] && a[3] != Py_None && mkpy_parse_int(a[3], &num) < 0))
        return NULL;
    int has_shape = a[2] && a[2] != Py_None, has_num = a[3] && a[3] != Py_None;
    mk_array *key = key_arg(a[4]);
    if (!key) return NULL;
    if (has_shape && has_num) {
        mk_decref(key);
        PyErr_SetString(PyExc_ValueError, "[categorical] At most one of shape or num_samples can be specified.");
        return NULL;
    }
    return finish(mk_random_categorical(MKARR(a[0]), axis32, has_shape ? 1 : has_num ? 2 : 0, ndim, shape, num,
                                        key),
                  key, NULL, NULL);
}

MKPY_STREAM_BINDING(py_permutation)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"x", "axis", "key", "stream", NULL};
    static const char sig[] = "    1. permutation(x: int | array, axis: int = 0, key: array | None = None, stream: "
                              "StreamOrDevice = None) -> array";
    PyObject *a[4];
    int64_t axis = 0, n = 0;
    (void)m;
    if (mkpy_parse("permutation", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    int is_int = PyLong_Check(a[0]) && !PyBool_Check(a[0]);
    if ((!is_int && !PyMkArray_Check(a[0])) || (a[1] && !PyLong_Check(a[1])) || !is_key_arg(a[2]))
        return mkpy_bad_call("permutation", sig, args, nargs, kwnames);
    int axis32 = 0;
    if ((a[1] && (mkpy_parse_int(a[1], &axis) < 0 || mkpy_int32_value(axis, &axis32) < 0)) ||
        (is_int && mkpy_parse_int(a[0], &n) < 0))
        return NULL;
    mk_array *key = key_arg(a[2]);
    if (!key) return NULL;
    mk_array *r = is_int ? mk_random_permutation_n(n, key) : mk_random_permutation(MKARR(a[0]), axis32, key);
    return finish(r, key, NULL, NULL);
}

/* ------------------------------------------------------------------ state */

/* A sequence of one element, the global key: state[0] reads it, state[0] = k
 * replaces it (MLX's mx.random.state, used to carry the key through
 * compiled functions). */
typedef struct {
    PyObject_HEAD
} StateObject;

static Py_ssize_t state_len(PyObject *self) {
    (void)self;
    return 1;
}

static PyObject *state_item(PyObject *self, Py_ssize_t i) {
    (void)self;
    if (i != 0) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return NULL;
    }
    return mkpy_wrap(mk_random_get_key());
}

static int state_ass_item(PyObject *self, Py_ssize_t i, PyObject *v) {
    (void)self;
    if (i != 0) {
        PyErr_SetString(PyExc_IndexError, "list assignment index out of range");
        return -1;
    }
    if (!v || !PyMkArray_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "The random state holds one key array.");
        return -1;
    }
    /* evaluated here, with the GIL released: the random functions split the
     * global key holding the GIL, so it must never need evaluating there
     * (waiting, GIL held, for a node another thread runs could deadlock) */
    mk_array *k = MKARR(v);
    if (mkpy_eval(&k, 1) < 0) return -1;
    mk_random_set_key(k);
    return 0;
}

static PySequenceMethods state_seq = {
    .sq_length = state_len,
    .sq_item = state_item,
    .sq_ass_item = state_ass_item,
};

static PyTypeObject StateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.random._RandomState",
    .tp_basicsize = sizeof(StateObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_as_sequence = &state_seq,
    .tp_doc = "The global PRNG state: a one-element sequence holding the key.",
};

/* Module __getattr__: makes `state` on first use and keeps it. */
static PyObject *py_getattr(PyObject *m, PyObject *name) {
    if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "state") == 0) {
        if (PyType_Ready(&StateType) < 0) return NULL;
        PyObject *st = PyType_GenericAlloc(&StateType, 0);
        if (!st || PyObject_SetAttrString(m, "state", st) < 0) {
            Py_XDECREF(st);
            return NULL;
        }
        return st;
    }
    PyErr_Format(PyExc_AttributeError, "module 'mkpy.random' has no attribute '%U'", name);
    return NULL;
}

/* --------------------------------------------------- multivariate_normal */

MKPY_STREAM_BINDING(py_multivariate_normal)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"mean", "cov", "shape", "dtype", "key", "stream", NULL};
    static const char sig[] =
        "    1. multivariate_normal(mean: array, cov: array, shape: Sequence[int] = [], dtype: Dtype | None = "
        "float32, key: array | None = None, stream: StreamOrDevice = None) -> array";
    PyObject *a[6];
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    mk_dtype t;
    bool bad;
    (void)m;
    if (mkpy_parse("multivariate_normal", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (!is_shape_arg(a[2], 0) || !is_dtype_arg(a[3]) || !is_key_arg(a[4]))
        return mkpy_bad_call("multivariate_normal", sig, args, nargs, kwnames);
    int gpu = mkpy_stream_is_gpu(a[5], &bad);
    if (bad) return mkpy_bad_call("multivariate_normal", sig, args, nargs, kwnames);
    if (gpu < 0) return NULL;
    if (shape_arg(a[2], &ndim, shape) < 0 || dtype_arg(a[3], MK_FLOAT32, &t) < 0) return NULL;
    mk_array *mean = mkpy_to_array(a[0], -1), *cov = mean ? mkpy_to_array(a[1], -1) : NULL;
    if (!cov) return drop(mean, NULL, NULL), NULL;
    mk_array *key = key_arg(a[4]);
    if (!key) return drop(mean, cov, NULL), NULL;
    return finish(mk_random_multivariate_normal(mean, cov, ndim, shape, t, key, gpu), key, mean, cov);
}

PyMethodDef mkpy_random_functions[] = {
    {"seed", FN(py_seed), FASTKW, "seed(seed)\n--\n\nSeed the global PRNG."},
    {"key", FN(py_key), FASTKW, "key(seed)\n--\n\nGet a PRNG key (uint32, shape (2,)) from a seed."},
    {"split", FN(py_split), FASTKW,
     "split(key, num=2, stream=None)\n--\n\nSplit a PRNG key into num sub keys (shape (num, 2))."},
    {"bits", FN(py_bits), FASTKW,
     "bits(shape=[], width=4, key=None, stream=None)\n--\n\n"
     "Random bits as uint32 (width 4), uint16 (2) or uint8 (1)."},
    {"uniform", FN(py_uniform), FASTKW,
     "uniform(low=0, high=1, shape=[], dtype=float32, key=None, stream=None)\n--\n\n"
     "Uniformly distributed random numbers in [low, high)."},
    {"normal", FN(py_normal), FASTKW,
     "normal(shape=[], dtype=float32, loc=None, scale=None, key=None, stream=None)\n--\n\n"
     "Normally distributed random numbers."},
    {"randint", FN(py_randint), FASTKW,
     "randint(low, high, shape=[], dtype=int32, key=None, stream=None)\n--\n\n"
     "Random integers from [low, high)."},
    {"bernoulli", FN(py_bernoulli), FASTKW,
     "bernoulli(p=0.5, shape=None, key=None, stream=None)\n--\n\nBernoulli random values (bool)."},
    {"gumbel", FN(py_gumbel), FASTKW,
     "gumbel(shape=[], dtype=float32, key=None, stream=None)\n--\n\nSamples of the standard Gumbel "
     "distribution."},
    {"laplace", FN(py_laplace), FASTKW,
     "laplace(shape=[], dtype=float32, loc=0.0, scale=1.0, key=None, stream=None)\n--\n\n"
     "Samples of the Laplace distribution."},
    {"truncated_normal", FN(py_truncated_normal), FASTKW,
     "truncated_normal(lower, upper, shape=None, dtype=float32, key=None, stream=None)\n--\n\n"
     "Normal samples truncated to [lower, upper]."},
    {"categorical", FN(py_categorical), FASTKW,
     "categorical(logits, axis=-1, shape=None, num_samples=None, key=None, stream=None)\n--\n\n"
     "Samples of the categorical distributions given by unnormalized logits (uint32 indices)."},
    {"permutation", FN(py_permutation), FASTKW,
     "permutation(x, axis=0, key=None, stream=None)\n--\n\n"
     "A random permutation of arange(x), or x permuted along axis."},
    {"multivariate_normal", FN(py_multivariate_normal), FASTKW,
     "multivariate_normal(mean, cov, shape=[], dtype=float32, key=None, stream=None)\n--\n\n"
     "Samples of the multivariate normal distribution with the given mean and covariance (float32 only)."},
    {"__getattr__", (PyCFunction)py_getattr, METH_O, NULL},
    {NULL},
};
