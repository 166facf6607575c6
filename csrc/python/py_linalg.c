/* Module functions of the linalg family: matmul, addmm, inner, outer and
 * tensordot, with MLX's signatures. As in MLX, their operands must be
 * arrays (no scalars, lists or NumPy arrays), and `a` and `b` are
 * positional-only. */
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

#define SIG_AB(name) "    1. " #name "(a: array, b: array, /, *, stream: StreamOrDevice = None) -> array"
#define SIG_ADDMM                                                                                      \
    "    1. addmm(c: array, a: array, b: array, /, alpha: float = 1.0, beta: float = 1.0,  *, "        \
    "stream: StreamOrDevice = None) -> array"
#define SIG_TENSORDOT                                                                                  \
    "    1. tensordot(a: array, b: array, /, axes: int | list[Sequence[int]] = 2, *, "                 \
    "stream: StreamOrDevice = None) -> array"

/* The positional-only arrays of a call: the first n names, all arrays.
 * Calls that do not fit get nanobind's "incompatible function arguments". */
static int array_args(const char *fname, const char *sig, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, const char *const *names, int n, PyObject **out) {
    int npos = 0;
    while (names[npos] && names[npos][0] != '*') npos++;
    if (nargs < n || nargs > npos) goto bad;
    if (mkpy_parse(fname, args, nargs, kwnames, names, n, out) < 0) return -1;
    for (int i = 0; i < n; i++)
        if (!PyMkArray_Check(out[i])) goto bad;
    return 0;
bad:
    mkpy_bad_call(fname, sig, args, nargs, kwnames);
    return -1;
}

typedef mk_array *(*binary_linalg_fn)(mk_array *, mk_array *);

/* f(a, b, /, *, stream=None) */
static PyObject *call_ab(const char *fname, const char *sig, binary_linalg_fn f, PyObject *const *args,
                         Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "*stream", NULL};
    PyObject *a[3];
    if (array_args(fname, sig, args, nargs, kwnames, names, 2, a) < 0) return NULL;
    return mkpy_wrap(f(MKARR(a[0]), MKARR(a[1])));
}

#define AB_FN(name)                                                                                    \
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return call_ab(#name, SIG_AB(name), mk_##name, args, nargs, kw);                              \
    }
AB_FN(matmul)
AB_FN(inner)
AB_FN(outer)

/* A float argument as nanobind's float caster takes it: floats, ints and
 * objects with __float__ or __index__ (not complex numbers). */
static int float_arg(PyObject *o, float dflt, float *out) {
    if (!o) {
        *out = dflt;
        return 0;
    }
    if (PyComplex_Check(o) || PyUnicode_Check(o)) return -1;
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *out = (float)v;
    return 0;
}

/* addmm(c, a, b, /, alpha=1.0, beta=1.0, *, stream=None) */
MKPY_STREAM_BINDING(py_addmm)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"c", "a", "b", "alpha", "beta", "*stream", NULL};
    PyObject *a[6];
    float alpha, beta;
    (void)m;
    if (array_args("addmm", SIG_ADDMM, args, nargs, kwnames, names, 3, a) < 0) return NULL;
    if (float_arg(a[3], 1.0f, &alpha) < 0 || float_arg(a[4], 1.0f, &beta) < 0)
        return mkpy_bad_call("addmm", SIG_ADDMM, args, nargs, kwnames);
    return mkpy_wrap(mk_addmm(MKARR(a[0]), MKARR(a[1]), MKARR(a[2]), alpha, beta));
}

/* An int as nanobind's int caster takes it (bool and __index__ too). */
static int int_arg(PyObject *o, int *out) {
    if (PyFloat_Check(o) || PyMkArray_Check(o) || !PyIndex_Check(o)) return -1;
    int overflow;
    long v = PyLong_AsLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    if (overflow || v < INT_MIN || v > INT_MAX) return -1;
    *out = (int)v;
    return 0;
}

/* A sequence as nanobind's list casters take one (not str or bytes). */
static bool is_sequence(PyObject *o) {
    return PySequence_Check(o) && !PyUnicode_Check(o) && !PyBytes_Check(o) && !PyByteArray_Check(o) &&
           !PyMkArray_Check(o);
}

/* A sequence of ints into a new array (*n entries). NULL: not one. */
static int *int_list(PyObject *o, int *n) {
    PyObject *seq = is_sequence(o) ? PySequence_Fast(o, "") : NULL;
    if (!seq) {
        PyErr_Clear();
        return NULL;
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    int *v = PyMem_Malloc((size_t)(len ? len : 1) * sizeof *v);
    for (Py_ssize_t i = 0; v && i < len; i++)
        if (int_arg(PySequence_Fast_GET_ITEM(seq, i), &v[i]) < 0) {
            PyMem_Free(v);
            v = NULL;
        }
    Py_DECREF(seq);
    *n = (int)len;
    return v;
}

/* tensordot(a, b, /, axes=2, *, stream=None): axes is an int or a list of
 * two lists of axes. */
MKPY_STREAM_BINDING(py_tensordot)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "axes", "*stream", NULL};
    PyObject *a[4];
    (void)m;
    if (array_args("tensordot", SIG_TENSORDOT, args, nargs, kwnames, names, 2, a) < 0) return NULL;
    mk_array *x = MKARR(a[0]), *y = MKARR(a[1]);
    int axis = 2;
    if (!a[2] || int_arg(a[2], &axis) == 0) return mkpy_wrap(mk_tensordot_n(x, y, axis));
    /* a list of lists of ints */
    PyObject *seq = is_sequence(a[2]) ? PySequence_Fast(a[2], "") : NULL;
    if (!seq) {
        PyErr_Clear();
        return mkpy_bad_call("tensordot", SIG_TENSORDOT, args, nargs, kwnames);
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    int *lists[2] = {NULL, NULL}, sizes[2] = {0, 0};
    bool ok = true;
    for (Py_ssize_t i = 0; ok && i < len; i++) {
        int n, *v = int_list(PySequence_Fast_GET_ITEM(seq, i), &n);
        ok = v != NULL;
        if (v && i < 2) {
            lists[i] = v;
            sizes[i] = n;
        } else if (v) {
            PyMem_Free(v);
        }
    }
    Py_DECREF(seq);
    PyObject *r = NULL;
    if (!ok)
        mkpy_bad_call("tensordot", SIG_TENSORDOT, args, nargs, kwnames);
    else if (len != 2)
        PyErr_SetString(PyExc_ValueError, "[tensordot] axes must be a list of two lists.");
    else
        r = mkpy_wrap(mk_tensordot(x, y, sizes[0], lists[0], sizes[1], lists[1]));
    PyMem_Free(lists[0]);
    PyMem_Free(lists[1]);
    return r;
}

PyMethodDef mkpy_linalg_functions[] = {
    {"matmul", FN(py_matmul), FASTKW,
     "matmul(a, b, /, *, stream=None)\n--\n\n"
     "Matrix product of a and b, batched over leading dims, which broadcast. A 1-D a gets a unit\n"
     "dim prepended, a 1-D b one appended, and the result drops them. The promoted type must be\n"
     "floating point or complex."},
    {"addmm", FN(py_addmm), FASTKW,
     "addmm(c, a, b, /, alpha=1.0, beta=1.0, *, stream=None)\n--\n\n"
     "alpha * (a @ b) + beta * c."},
    {"inner", FN(py_inner), FASTKW,
     "inner(a, b, /, *, stream=None)\n--\n\n"
     "Inner product of 1-D arrays; in higher dimensions a sum product over the last axes."},
    {"outer", FN(py_outer), FASTKW,
     "outer(a, b, /, *, stream=None)\n--\n\n"
     "Outer product of a and b, flattened first when they are not 1-D."},
    {"tensordot", FN(py_tensordot), FASTKW,
     "tensordot(a, b, /, axes=2, *, stream=None)\n--\n\n"
     "Sum product over the last `axes` dims of a and the first `axes` dims of b, or over the\n"
     "axes given as two lists [axes_of_a, axes_of_b]."},
    {NULL},
};
