/* Conversions between Python objects and core arrays, argument parsing and
 * error translation. */
#include <string.h>

#include "core/types.h"
#include "mkpy.h"

PyObject *mkpy_module;

/* -------------------------------------------------------------- errors */

PyObject *mkpy_raise(void) {
    PyObject *exc;
    switch (mk_error_code()) {
    case MK_ERR_VALUE: exc = PyExc_ValueError; break;
    case MK_ERR_TYPE: exc = PyExc_TypeError; break;
    case MK_ERR_INDEX: exc = PyExc_IndexError; break;
    case MK_ERR_MEMORY: exc = PyExc_MemoryError; break;
    case MK_ERR_OVERFLOW: exc = PyExc_OverflowError; break;
    case MK_OK:
        if (PyErr_Occurred()) return NULL;
        PyErr_SetString(PyExc_RuntimeError, "[mkpy] Unknown error.");
        return NULL;
    default: exc = PyExc_RuntimeError; break;
    }
    PyErr_SetString(exc, mk_error_message());
    mk_error_clear();
    return NULL;
}

/* ------------------------------------------------------------ wrapping */

PyObject *mkpy_wrap(mk_array *a) {
    if (!a) return mkpy_raise();
    PyMkArray *self = PyObject_New(PyMkArray, &PyMkArray_Type);
    if (!self) {
        mk_decref(a);
        return NULL;
    }
    self->arr = a;
    self->exports = 0;
    return (PyObject *)self;
}

PyObject *mkpy_wrap_list(mk_array **arrs, int n) {
    PyObject *list = PyList_New(n);
    if (!list) {
        for (int i = 0; i < n; i++) mk_decref(arrs[i]);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        PyObject *o = mkpy_wrap(arrs[i]);
        if (!o) {
            for (int j = i + 1; j < n; j++) mk_decref(arrs[j]);
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, o);
    }
    return list;
}

int mkpy_eval(mk_array *const *arrs, int n) {
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mk_eval(arrs, n);
    Py_END_ALLOW_THREADS
    if (rc < 0) mkpy_raise();
    return rc;
}

/* ------------------------------------------------ Python values -> array */

int mkpy_is_scalar(PyObject *o) {
    return PyBool_Check(o) || PyLong_Check(o) || PyFloat_Check(o) || PyComplex_Check(o);
}

/* The dtype MLX gives a Python int: int32, or int64 when it does not fit. */
static int int_dtype(PyObject *o, mk_dtype *t) {
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to an mkpy array.");
        return -1;
    }
    *t = (v >= INT32_MIN && v <= INT32_MAX) ? MK_INT32 : MK_INT64;
    return 0;
}

static int store_scalar(PyObject *o, mk_dtype t, void *dst) {
    if (PyBool_Check(o)) {
        mk_put_i64(t, dst, o == Py_True);
    } else if (PyLong_Check(o)) {
        if (t == MK_UINT64) {
            unsigned long long u = PyLong_AsUnsignedLongLong(o);
            if (u == (unsigned long long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                long long v = PyLong_AsLongLong(o);
                if (v == -1 && PyErr_Occurred()) return -1;
                u = (unsigned long long)v;
            }
            *(uint64_t *)dst = u;
        } else if (mk_is_integral(t) || t == MK_BOOL) {
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
            if (overflow) {
                PyErr_SetString(PyExc_OverflowError, "Python int too large to convert to an mkpy array.");
                return -1;
            }
            if (v == -1 && PyErr_Occurred()) return -1;
            mk_put_i64(t, dst, v);
        } else {
            double v = PyLong_AsDouble(o);
            if (v == -1.0 && PyErr_Occurred()) return -1;
            mk_put_f64(t, dst, v);
        }
    } else if (PyFloat_Check(o)) {
        mk_put_f64(t, dst, PyFloat_AS_DOUBLE(o));
    } else if (PyComplex_Check(o)) {
        Py_complex c = PyComplex_AsCComplex(o);
        mk_put_c64(t, dst, (float)c.real + (float)c.imag * I);
    } else {
        PyErr_Format(PyExc_ValueError, "Invalid type %s received in array initialization.", Py_TYPE(o)->tp_name);
        return -1;
    }
    return 0;
}

/* State for converting a nested list: shape found from the first elements,
 * then a walk that checks uniformity, infers the dtype and fills. */
typedef struct {
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    int has_bool, has_int, has_int64, has_float, has_complex;
    int arr_dtype; /* promotion of arrays met inside, or -1 */
    char *dst;
    mk_dtype dtype;
    size_t itemsize;
} nest;

static int nest_shape(nest *s, PyObject *o) {
    s->ndim = 0;
    while (PyList_Check(o) || PyTuple_Check(o)) {
        if (s->ndim == MK_MAX_NDIM) {
            PyErr_SetString(PyExc_ValueError, "Too many dimensions in array initialization.");
            return -1;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        s->shape[s->ndim++] = n;
        if (n == 0) return 0;
        o = PySequence_Fast_GET_ITEM(o, 0);
    }
    if (PyMkArray_Check(o)) {
        mk_array *a = MKARR(o);
        if (s->ndim + a->ndim > MK_MAX_NDIM) {
            PyErr_SetString(PyExc_ValueError, "Too many dimensions in array initialization.");
            return -1;
        }
        for (int i = 0; i < a->ndim; i++) s->shape[s->ndim++] = a->shape[i];
    }
    return 0;
}

static PyObject *nonuniform(void) {
    PyErr_SetString(PyExc_ValueError, "Initialization encountered non-uniform length.");
    return NULL;
}

/* pass 0: check and infer; pass 1: fill */
static int nest_walk(nest *s, PyObject *o, int depth, int pass) {
    if (PyList_Check(o) || PyTuple_Check(o)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        if (depth >= s->ndim || n != s->shape[depth]) return nonuniform(), -1;
        for (Py_ssize_t i = 0; i < n; i++)
            if (nest_walk(s, PySequence_Fast_GET_ITEM(o, i), depth + 1, pass) < 0) return -1;
        return 0;
    }
    if (PyMkArray_Check(o)) {
        mk_array *a = MKARR(o);
        if (depth + a->ndim != s->ndim) return nonuniform(), -1;
        for (int i = 0; i < a->ndim; i++)
            if (a->shape[i] != s->shape[depth + i]) return nonuniform(), -1;
        if (pass == 0) {
            s->arr_dtype = s->arr_dtype < 0 ? (int)a->dtype : (int)mk_promote(s->arr_dtype, a->dtype);
            return 0;
        }
        mk_array *c = mk_astype(a, s->dtype);
        if (!c || mkpy_eval(&c, 1) < 0) {
            if (!c) mkpy_raise();
            mk_xdecref(c);
            return -1;
        }
        memcpy(s->dst, mk_data(c), (size_t)c->size * s->itemsize);
        s->dst += (size_t)c->size * s->itemsize;
        mk_decref(c);
        return 0;
    }
    if (depth != s->ndim) return nonuniform(), -1;
    if (pass == 0) {
        if (PyBool_Check(o))
            s->has_bool = 1;
        else if (PyLong_Check(o)) {
            mk_dtype t;
            if (int_dtype(o, &t) < 0) return -1;
            s->has_int = 1;
            if (t == MK_INT64) s->has_int64 = 1;
        } else if (PyFloat_Check(o))
            s->has_float = 1;
        else if (PyComplex_Check(o))
            s->has_complex = 1;
        else {
            PyErr_Format(PyExc_ValueError, "Invalid type %s received in array initialization.",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        return 0;
    }
    if (store_scalar(o, s->dtype, s->dst) < 0) return -1;
    s->dst += s->itemsize;
    return 0;
}

static mk_array *from_nested(PyObject *obj, int dtype) {
    nest s;
    memset(&s, 0, sizeof s);
    s.arr_dtype = -1;
    if (nest_shape(&s, obj) < 0) return NULL;
    if (nest_walk(&s, obj, 0, 0) < 0) return NULL;
    mk_dtype t;
    if (dtype >= 0)
        t = (mk_dtype)dtype;
    else {
        if (s.has_complex)
            t = MK_COMPLEX64;
        else if (s.has_float)
            t = MK_FLOAT32;
        else if (s.has_int)
            t = s.has_int64 ? MK_INT64 : MK_INT32;
        else if (s.has_bool)
            t = MK_BOOL;
        else
            t = s.arr_dtype >= 0 ? (mk_dtype)s.arr_dtype : MK_FLOAT32; /* empty: float32 */
        if (s.arr_dtype >= 0 && (s.has_complex || s.has_float || s.has_int || s.has_bool))
            t = mk_promote(t, (mk_dtype)s.arr_dtype);
    }
    mk_array *a = mk_array_empty(t, s.ndim, s.shape);
    if (!a) return (mk_array *)mkpy_raise();
    s.dst = a->buf->data;
    s.dtype = t;
    s.itemsize = mk_dtype_size(t);
    if (nest_walk(&s, obj, 0, 1) < 0) {
        mk_decref(a);
        return NULL;
    }
    return a;
}

/* Buffer format -> dtype. Returns -1 for unsupported formats. */
static int format_dtype(const char *fmt, Py_ssize_t itemsize) {
    if (!fmt) return MK_UINT8;
    if (*fmt == '<' || *fmt == '=' || *fmt == '@' || *fmt == '|') fmt++;
    if (*fmt == '>' || *fmt == '!') return -1; /* big-endian */
    if (fmt[0] == 'Z') {
        if (fmt[1] == 'f') return MK_COMPLEX64;
        if (fmt[1] == 'd') return 100; /* complex128: converted */
        return -1;
    }
    if (fmt[1] != 0) return -1;
    switch (fmt[0]) {
    case '?': return MK_BOOL;
    case 'e': return MK_FLOAT16;
    case 'f': return MK_FLOAT32;
    case 'd': return MK_FLOAT64;
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
        return itemsize == 1 ? MK_INT8 : itemsize == 2 ? MK_INT16 : itemsize == 4 ? MK_INT32 : MK_INT64;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': case 'c':
        return itemsize == 1 ? MK_UINT8 : itemsize == 2 ? MK_UINT16 : itemsize == 4 ? MK_UINT32 : MK_UINT64;
    }
    return -1;
}

/* Copies an n-d strided block (byte strides) to dense memory. */
static void copy_strided(char *dst, const char *src, int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                         size_t itemsize, char **end) {
    if (ndim == 0) {
        memcpy(dst, src, itemsize);
        *end = dst + itemsize;
        return;
    }
    for (Py_ssize_t i = 0; i < shape[0]; i++) {
        copy_strided(dst, src + i * strides[0], ndim - 1, shape + 1, strides + 1, itemsize, &dst);
    }
    *end = dst;
}

/* Makes an array from raw memory described by a dtype, shape and byte
 * strides (NULL: C-contiguous), then converts it to `want` (or the default
 * MLX dtype for the source: float64 -> float32). */
static mk_array *from_memory(const void *data, int src_dtype, int ndim, const Py_ssize_t *shape,
                             const Py_ssize_t *strides, Py_ssize_t itemsize, int want) {
    int64_t shp[MK_MAX_NDIM];
    if (ndim > MK_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "Too many dimensions in array initialization.");
        return NULL;
    }
    for (int i = 0; i < ndim; i++) shp[i] = shape[i];
    int complex128 = src_dtype == 100; /* stored as pairs of doubles, then converted */
    mk_dtype st = complex128 ? MK_COMPLEX64 : (mk_dtype)src_dtype;
    mk_dtype out = want >= 0 ? (mk_dtype)want : (st == MK_FLOAT64 ? MK_FLOAT32 : st);
    if (complex128) shp[ndim] = 2;
    mk_array *raw = mk_array_empty(complex128 ? MK_FLOAT64 : st, ndim + complex128, shp);
    if (!raw) return (mk_array *)mkpy_raise();
    char *end;
    Py_ssize_t cstrides[MK_MAX_NDIM];
    if (!strides) {
        Py_ssize_t s = itemsize;
        for (int i = ndim - 1; i >= 0; i--) {
            cstrides[i] = s;
            s *= shape[i];
        }
        strides = cstrides;
    }
    if (raw->size) copy_strided(raw->buf->data, data, ndim, shape, strides, (size_t)itemsize, &end);
    if (complex128) {
        /* pairs of doubles -> complex64 */
        mk_array *c = mk_array_empty(MK_COMPLEX64, ndim, shp); /* shp[ndim] is ignored */
        if (!c) {
            mk_decref(raw);
            return (mk_array *)mkpy_raise();
        }
        const double *d = raw->buf->data;
        mk_c64 *z = c->buf->data;
        for (int64_t i = 0; i < c->size; i++) z[i] = (float)d[2 * i] + (float)d[2 * i + 1] * I;
        mk_decref(raw);
        raw = c;
    }
    if (raw->dtype == out) return raw;
    mk_array *conv = mk_array_empty(out, ndim, shp);
    if (!conv) {
        mk_decref(raw);
        return (mk_array *)mkpy_raise();
    }
    mk_cast_table[raw->dtype][out](raw->buf->data, 1, conv->buf->data, 1, raw->size);
    mk_decref(raw);
    return conv;
}

static mk_array *from_buffer(PyObject *obj, int dtype) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) < 0) return NULL;
    int src = format_dtype(view.format, view.itemsize);
    mk_array *a = NULL;
    if (src < 0)
        PyErr_Format(PyExc_TypeError, "Cannot convert a buffer of format '%s' to an mkpy array.",
                     view.format ? view.format : "B");
    else
        a = from_memory(view.buf, src, view.ndim, view.shape, view.strides, view.itemsize, dtype);
    PyBuffer_Release(&view);
    return a;
}

static int typestr_dtype(const char *ts) {
    if (!ts || strlen(ts) < 3) return -1;
    if (ts[0] == '>') return -1;
    int size = atoi(ts + 2);
    switch (ts[1]) {
    case 'b': return size == 1 ? MK_BOOL : -1;
    case 'i': return size == 1 ? MK_INT8 : size == 2 ? MK_INT16 : size == 4 ? MK_INT32 : size == 8 ? MK_INT64 : -1;
    case 'u':
        return size == 1 ? MK_UINT8 : size == 2 ? MK_UINT16 : size == 4 ? MK_UINT32 : size == 8 ? MK_UINT64 : -1;
    case 'f': return size == 2 ? MK_FLOAT16 : size == 4 ? MK_FLOAT32 : size == 8 ? MK_FLOAT64 : -1;
    case 'c': return size == 8 ? MK_COMPLEX64 : size == 16 ? 100 : -1;
    }
    return -1;
}

static mk_array *from_array_interface(PyObject *iface, int dtype) {
    PyObject *shape_o, *ts_o, *data_o, *strides_o;
    if (!PyDict_Check(iface)) {
        PyErr_SetString(PyExc_TypeError, "__array_interface__ must be a dict.");
        return NULL;
    }
    shape_o = PyDict_GetItemString(iface, "shape");
    ts_o = PyDict_GetItemString(iface, "typestr");
    data_o = PyDict_GetItemString(iface, "data");
    strides_o = PyDict_GetItemString(iface, "strides");
    if (!shape_o || !ts_o || !data_o || !PyTuple_Check(shape_o) || !PyUnicode_Check(ts_o) || !PyTuple_Check(data_o)) {
        PyErr_SetString(PyExc_TypeError, "Unsupported __array_interface__.");
        return NULL;
    }
    const char *ts = PyUnicode_AsUTF8(ts_o);
    int src = typestr_dtype(ts);
    if (src < 0) {
        PyErr_Format(PyExc_TypeError, "Cannot convert an array of type '%s' to an mkpy array.", ts);
        return NULL;
    }
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape_o), shape[MK_MAX_NDIM], strides[MK_MAX_NDIM];
    if (ndim > MK_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "Too many dimensions in array initialization.");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < ndim; i++) {
        shape[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape_o, i));
        if (shape[i] < 0 && PyErr_Occurred()) return NULL;
    }
    int have_strides = strides_o && strides_o != Py_None;
    if (have_strides)
        for (Py_ssize_t i = 0; i < ndim; i++) {
            strides[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides_o, i));
            if (strides[i] == -1 && PyErr_Occurred()) return NULL;
        }
    void *ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data_o, 0));
    if (!ptr && PyErr_Occurred()) return NULL;
    return from_memory(ptr, src, (int)ndim, shape, have_strides ? strides : NULL, atoi(ts + 2), dtype);
}

mk_array *mkpy_to_array(PyObject *obj, int dtype) {
    if (PyMkArray_Check(obj)) {
        mk_array *a = MKARR(obj);
        if (dtype >= 0 && (mk_dtype)dtype != a->dtype) {
            mk_array *c = mk_astype(a, (mk_dtype)dtype);
            return c ? c : (mk_array *)mkpy_raise();
        }
        mk_incref(a);
        return a;
    }
    if (mkpy_is_scalar(obj)) {
        mk_dtype t;
        if (dtype >= 0)
            t = (mk_dtype)dtype;
        else if (PyBool_Check(obj))
            t = MK_BOOL;
        else if (PyLong_Check(obj)) {
            if (int_dtype(obj, &t) < 0) return NULL;
        } else if (PyFloat_Check(obj))
            t = MK_FLOAT32;
        else
            t = MK_COMPLEX64;
        mk_array *a = mk_array_empty(t, 0, NULL);
        if (!a) return (mk_array *)mkpy_raise();
        if (store_scalar(obj, t, a->buf->data) < 0) {
            mk_decref(a);
            return NULL;
        }
        return a;
    }
    if (PyList_Check(obj) || PyTuple_Check(obj)) return from_nested(obj, dtype);
    if (PyObject_CheckBuffer(obj) && !PyUnicode_Check(obj)) return from_buffer(obj, dtype);
    PyObject *iface = PyObject_GetAttrString(obj, "__array_interface__");
    if (iface) {
        mk_array *a = from_array_interface(iface, dtype);
        Py_DECREF(iface);
        return a;
    }
    PyErr_Clear();
    /* numpy scalars and other number-likes */
    if (PyIndex_Check(obj)) {
        PyObject *v = PyNumber_Index(obj);
        if (!v) return NULL;
        mk_array *a = mkpy_to_array(v, dtype);
        Py_DECREF(v);
        return a;
    }
    PyErr_Format(PyExc_ValueError, "Invalid type %s received in array initialization.", Py_TYPE(obj)->tp_name);
    return NULL;
}

mk_array *mkpy_to_array_weak(PyObject *obj, int partner) {
    if (partner >= 0 && mkpy_is_scalar(obj)) {
        mk_dtype p = (mk_dtype)partner, t;
        if (PyBool_Check(obj))
            t = p;
        else if (PyLong_Check(obj))
            t = mk_weak_int_dtype(p);
        else if (PyFloat_Check(obj))
            t = mk_weak_float_dtype(p);
        else
            t = MK_COMPLEX64;
        return mkpy_to_array(obj, t);
    }
    return mkpy_to_array(obj, -1);
}

int mkpy_to_arrays(PyObject *a, PyObject *b, mk_array **out_a, mk_array **out_b) {
    int a_arr = PyMkArray_Check(a), b_arr = PyMkArray_Check(b);
    *out_a = *out_b = NULL;
    if (a_arr && !b_arr) {
        *out_a = mkpy_to_array(a, -1);
        *out_b = mkpy_to_array_weak(b, MKARR(a)->dtype);
    } else if (b_arr && !a_arr) {
        *out_b = mkpy_to_array(b, -1);
        *out_a = mkpy_to_array_weak(a, MKARR(b)->dtype);
    } else {
        *out_a = mkpy_to_array(a, -1);
        *out_b = *out_a ? mkpy_to_array(b, -1) : NULL;
    }
    if (!*out_a || !*out_b) {
        mk_xdecref(*out_a);
        mk_xdecref(*out_b);
        *out_a = *out_b = NULL;
        return -1;
    }
    return 0;
}

/* ------------------------------------------------ array -> Python values */

static PyObject *scalar_at(mk_dtype t, const void *p) {
    switch (mk_dtypes[t].kind) {
    case MK_KIND_BOOL: return PyBool_FromLong(*(const bool *)p);
    case MK_KIND_UINT: return PyLong_FromUnsignedLongLong(mk_get_u64(t, p));
    case MK_KIND_INT: return PyLong_FromLongLong(mk_get_i64(t, p));
    case MK_KIND_FLOAT: return PyFloat_FromDouble(mk_get_f64(t, p));
    case MK_KIND_COMPLEX: {
        mk_c64 z = mk_get_c64(t, p);
        return PyComplex_FromDoubles(crealf(z), cimagf(z));
    }
    }
    Py_RETURN_NONE;
}

PyObject *mkpy_item(mk_array *a) {
    if (a->size != 1) {
        PyErr_SetString(PyExc_ValueError, "[convert] Only length-1 arrays can be converted to Python scalars.");
        return NULL;
    }
    if (mkpy_eval(&a, 1) < 0) return NULL;
    return scalar_at(a->dtype, mk_data(a));
}

static PyObject *tolist_rec(const mk_array *a, int d, const char *p, size_t isz) {
    if (d == a->ndim) return scalar_at(a->dtype, p);
    PyObject *list = PyList_New(a->shape[d]);
    if (!list) return NULL;
    for (int64_t i = 0; i < a->shape[d]; i++) {
        PyObject *v = tolist_rec(a, d + 1, p + i * a->strides[d] * (int64_t)isz, isz);
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, v);
    }
    return list;
}

PyObject *mkpy_tolist(mk_array *a) {
    if (mkpy_eval(&a, 1) < 0) return NULL;
    return tolist_rec(a, 0, mk_data(a), mk_dtype_size(a->dtype));
}

/* ----------------------------------------------------- argument parsing */

int mkpy_parse(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
               const char *const *names, int nrequired, PyObject **out) {
    int n = 0, npos = 0;
    while (names[n]) n++;
    while (npos < n && names[npos][0] != '*') npos++;
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (nargs > npos) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)", fname, npos, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) out[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        if (!key) return -1;
        int found = -1;
        for (int i = 0; i < n; i++) {
            const char *nm = names[i][0] == '*' ? names[i] + 1 : names[i];
            if (strcmp(nm, key) == 0) {
                found = i;
                break;
            }
        }
        if (found < 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%s'", fname, key);
            return -1;
        }
        if (out[found]) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fname, key);
            return -1;
        }
        out[found] = args[nargs + k];
    }
    for (int i = 0; i < nrequired; i++)
        if (!out[i]) {
            const char *nm = names[i][0] == '*' ? names[i] + 1 : names[i];
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fname, nm);
            return -1;
        }
    return 0;
}

int mkpy_parse_dtype(PyObject *obj, mk_dtype *out) {
    if (PyMkDtype_Check(obj)) {
        *out = ((PyMkDtype *)obj)->dtype;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "Expected a Dtype (e.g. mkpy.float32) but got %s.", Py_TYPE(obj)->tp_name);
    return -1;
}

int mkpy_parse_int(PyObject *obj, int64_t *out) {
    if (PyMkArray_Check(obj) || PyFloat_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "Expected an int but got %s.", Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(obj);
    if (!i) return -1;
    long long v = PyLong_AsLongLong(i);
    Py_DECREF(i);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

int mkpy_parse_bool(PyObject *obj, int dflt, int *out) {
    if (!obj || obj == Py_None) {
        *out = dflt;
        return 0;
    }
    int v = PyObject_IsTrue(obj);
    if (v < 0) return -1;
    *out = v;
    return 0;
}

int mkpy_parse_shape(PyObject *obj, int *ndim, int64_t *shape) {
    if (PyLong_Check(obj) || (PyIndex_Check(obj) && !PyMkArray_Check(obj))) {
        *ndim = 1;
        return mkpy_parse_int(obj, &shape[0]);
    }
    PyObject *seq = PySequence_Fast(obj, "shape must be an int or a sequence of ints");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MK_MAX_NDIM) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "Shapes of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (mkpy_parse_int(PySequence_Fast_GET_ITEM(seq, i), &shape[i]) < 0) {
            Py_DECREF(seq);
            return -1;
        }
    Py_DECREF(seq);
    *ndim = (int)n;
    return 0;
}

int mkpy_parse_axes(PyObject *obj, int *naxes, int *axes) {
    if (!obj || obj == Py_None) {
        *naxes = -1;
        return 0;
    }
    int64_t shape[MK_MAX_NDIM];
    int n;
    if (mkpy_parse_shape(obj, &n, shape) < 0) return -1;
    for (int i = 0; i < n; i++) axes[i] = (int)shape[i];
    *naxes = n;
    return 0;
}

PyObject *mkpy_forward(const char *name, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames) {
    PyObject *fn = PyObject_GetAttrString(mkpy_module, name);
    if (!fn) return NULL;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *stack[64];
    if (nargs + nkw + 1 > 64) {
        Py_DECREF(fn);
        PyErr_SetString(PyExc_TypeError, "too many arguments");
        return NULL;
    }
    stack[0] = self;
    for (Py_ssize_t i = 0; i < nargs + nkw; i++) stack[i + 1] = args[i];
    PyObject *r = PyObject_Vectorcall(fn, stack, nargs + 1, kwnames);
    Py_DECREF(fn);
    return r;
}
