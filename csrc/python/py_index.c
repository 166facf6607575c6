/* x[key]: basic indexing with ints, slices (any step), None and Ellipsis.
 * The result is a view: a slice, then a squeeze of the int axes, then an
 * expand_dims for the None axes. */
#include "mkpy.h"

static int is_basic(PyObject *o) {
    return PyLong_Check(o) || PySlice_Check(o) || o == Py_None || o == Py_Ellipsis ||
           (PyIndex_Check(o) && !PyMkArray_Check(o) && !PyBool_Check(o));
}

PyObject *mkpy_getitem(PyMkArray *self, PyObject *key) {
    mk_array *x = self->arr;
    PyObject *tuple = PyTuple_Check(key) ? Py_NewRef(key) : PyTuple_Pack(1, key);
    if (!tuple) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(tuple);
    int nidx = 0, nell = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(tuple, i);
        if (!is_basic(k)) {
            Py_DECREF(tuple);
            PyObject *fn = PyObject_GetAttrString(mkpy_module, "_advanced_getitem");
            if (!fn) {
                PyErr_Clear();
                PyErr_Format(PyExc_ValueError,
                             "Cannot index mkpy array using the given type (%s).", Py_TYPE(k)->tp_name);
                return NULL;
            }
            PyObject *r = PyObject_CallFunctionObjArgs(fn, (PyObject *)self, key, NULL);
            Py_DECREF(fn);
            return r;
        }
        if (k == Py_Ellipsis)
            nell++;
        else if (k != Py_None)
            nidx++;
    }
    if (nell > 1) {
        Py_DECREF(tuple);
        PyErr_SetString(PyExc_IndexError, "An index can only have a single ellipsis (\"...\").");
        return NULL;
    }
    if (nidx > x->ndim) {
        Py_DECREF(tuple);
        PyErr_Format(PyExc_IndexError, "Too many indices for array with %d dimensions.", x->ndim);
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
            if (nexp + 1 > MK_MAX_NDIM) goto too_many;
            expand[nexp++] = out_pos++;
        } else if (k == Py_Ellipsis) {
            int skip = x->ndim - nidx;
            d += skip;
            out_pos += skip;
        } else if (PySlice_Check(k)) {
            Py_ssize_t s0, s1, st;
            if (PySlice_Unpack(k, &s0, &s1, &st) < 0) goto error;
            PySlice_AdjustIndices((Py_ssize_t)x->shape[d], &s0, &s1, st);
            start[d] = s0;
            stop[d] = s1;
            step[d] = st;
            d++;
            out_pos++;
        } else {
            Py_ssize_t v = PyNumber_AsSsize_t(k, PyExc_IndexError);
            if (v == -1 && PyErr_Occurred()) goto error;
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
too_many:
    PyErr_SetString(PyExc_IndexError, "Too many dimensions.");
error:
    Py_DECREF(tuple);
    return NULL;
}
