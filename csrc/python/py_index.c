/* x[key]: basic indexing with ints, slices (any step), None and Ellipsis.
 * The result is a view: a slice, then a squeeze of the int axes, then an
 * expand_dims for the None axes. Any other key (arrays, lists, bools) goes to
 * the module function _advanced_getitem when it exists.
 *
 * As numpy, an int out of range raises IndexError (MLX reads out of bounds).
 * Errors MLX does raise use its wording and classes. */
#include "mkpy.h"

/* A key that indexes like an int: Python ints, objects with __index__ that
 * are not sequences (numpy integers, 0-d numpy arrays), 0-d integer mkpy
 * arrays (but for tracing). Bools are not ints here (MLX refuses them). */
static int is_int_key(PyObject *o) {
    if (PyBool_Check(o)) return 0;
    if (PyLong_Check(o)) return 1;
    if (PyMkArray_Check(o)) {
        /* while a transformation traces, its value must stay in the graph
         * (a gather by a 0-d index array, as MLX always does) */
        mk_array *a = MKARR(o);
        return a->ndim == 0 && mk_is_integral(a->dtype) && !mk_tracing();
    }
    if (PyFloat_Check(o) || !PyIndex_Check(o)) return 0;
    /* numpy: a 0-d integer array or an integer scalar has a working __index__ */
    PyObject *v = PyNumber_Index(o);
    if (!v) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(v);
    return 1;
}

static int is_basic(PyObject *o) { return is_int_key(o) || PySlice_Check(o) || o == Py_None || o == Py_Ellipsis; }

/* MLX converts index ints and slice bounds to int32 (safe_to_int32). */
static int check_int32(PyObject *i) {
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow || v > INT32_MAX || v < INT32_MIN) {
        PyErr_SetString(PyExc_ValueError, "Slice indices must be 32-bit integers.");
        return -1;
    }
    return 0;
}

static int int_value(PyObject *o, Py_ssize_t *v) {
    PyObject *i = PyMkArray_Check(o) ? mkpy_item(MKARR(o)) : PyNumber_Index(o);
    if (!i) return -1;
    if (PyLong_Check(i) && check_int32(i) < 0) {
        Py_DECREF(i);
        return -1;
    }
    *v = PyNumber_AsSsize_t(i, PyExc_IndexError);
    Py_DECREF(i);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

static int bound_int32(PyObject *o) {
    if (o == Py_None) return 0;
    PyObject *i = PyNumber_Index(o);
    if (!i) return -1;
    int rc = check_int32(i);
    Py_DECREF(i);
    return rc;
}

/* A slice bound must be None or an int (MLX: no arrays, no floats). */
static int slice_bound_ok(PyObject *o) {
    return o == Py_None || PyLong_Check(o) || (!PyMkArray_Check(o) && !PyFloat_Check(o) && PyIndex_Check(o));
}

static PyObject *advanced(PyMkArray *self, PyObject *key) {
    PyObject *fn = PyObject_GetAttrString(mkpy_module, "_advanced_getitem");
    if (!fn) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "Cannot index mlx array using the given type.");
        return NULL;
    }
    PyObject *r = PyObject_CallFunctionObjArgs(fn, (PyObject *)self, key, NULL);
    Py_DECREF(fn);
    return r;
}

PyObject *mkpy_getitem(PyMkArray *self, PyObject *key) {
    mk_array *x = self->arr;
    if (!PyTuple_Check(key)) {
        if (!is_basic(key)) return advanced(self, key);
        if (x->ndim == 0 && key != Py_None && key != Py_Ellipsis) {
            PyErr_SetString(PyExc_ValueError, "too many indices for array: array is 0-dimensional");
            return NULL;
        }
    }
    PyObject *tuple = PyTuple_Check(key) ? Py_NewRef(key) : PyTuple_Pack(1, key);
    if (!tuple) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    int nidx = 0, nell = 0, nnone = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(tuple, i);
        if (!is_basic(k)) {
            Py_DECREF(tuple);
            return advanced(self, key);
        }
        if (k == Py_Ellipsis)
            nell++;
        else if (k == Py_None)
            nnone++;
        else
            nidx++;
    }
    if (nell > 1) {
        Py_DECREF(tuple);
        PyErr_SetString(PyExc_ValueError, "An index can only have a single ellipsis (...)");
        return NULL;
    }
    if (nidx > x->ndim) {
        Py_DECREF(tuple);
        PyErr_Format(PyExc_ValueError, "Too many indices for array with %d dimensions.", x->ndim);
        return NULL;
    }
    if (x->ndim - nidx + nnone > MK_MAX_NDIM) {
        Py_DECREF(tuple);
        PyErr_Format(PyExc_ValueError, "Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    int64_t start[MK_MAX_NDIM], stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
    int squeeze[MK_MAX_NDIM], nsq = 0, expand[MK_MAX_NDIM], nexp = 0;
    int d = 0, out_pos = 0; /* input dim, position in the result */
    for (int i = 0; i < x->ndim; i++) {
        start[i] = 0;
        stop[i] = x->shape[i];
        step[i] = 1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(tuple, i);
        if (k == Py_None) {
            expand[nexp++] = out_pos++;
        } else if (k == Py_Ellipsis) {
            int skip = x->ndim - nidx;
            d += skip;
            out_pos += skip;
        } else if (PySlice_Check(k)) {
            PySliceObject *sl = (PySliceObject *)k;
            if (!slice_bound_ok(sl->start) || !slice_bound_ok(sl->stop) || !slice_bound_ok(sl->step)) {
                PyErr_SetString(PyExc_ValueError, "Slice indices must be integers or None.");
                goto error;
            }
            Py_ssize_t s0, s1, st;
            if (bound_int32(sl->start) < 0 || bound_int32(sl->stop) < 0 || bound_int32(sl->step) < 0) goto error;
            if (PySlice_Unpack(k, &s0, &s1, &st) < 0) goto error;
            PySlice_AdjustIndices((Py_ssize_t)x->shape[d], &s0, &s1, st);
            start[d] = s0;
            stop[d] = s1;
            step[d] = st;
            d++;
            out_pos++;
        } else {
            Py_ssize_t v;
            if (int_value(k, &v) < 0) goto error;
            int64_t dim = x->shape[d];
            if (v < -dim || v >= dim) {
                PyErr_Format(PyExc_IndexError, "index %zd is out of bounds for axis %d with size %lld", v, d,
                             (long long)dim);
                goto error;
            }
            if (v < 0) v += dim;
            start[d] = v;
            stop[d] = v + 1;
            step[d] = 1;
            squeeze[nsq++] = d;
            d++;
        }
    }
    Py_DECREF(tuple);
    mk_array *r = mk_slice(x, start, stop, step), *t;
    if (r && nsq) {
        t = mk_squeeze(r, nsq, squeeze);
        mk_decref(r);
        r = t;
    }
    if (r && nexp) {
        t = mk_expand_dims(r, nexp, expand);
        mk_decref(r);
        r = t;
    }
    return mkpy_wrap(r);
error:
    Py_DECREF(tuple);
    return NULL;
}
