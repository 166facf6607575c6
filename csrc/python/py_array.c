/* mkpy.array: the Python array type. Number, sequence/mapping and buffer
 * protocols, properties, and the methods MLX arrays have. Methods that are
 * also module functions forward to them (x.sum(1) is mkpy.sum(x, 1)). */
#include <stdio.h>
#include <string.h>

#include "core/types.h"
#include "mkpy.h"

/* ------------------------------------------------------ construction */

static PyObject *array_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"val", "dtype", NULL};
    PyObject *val, *dtype_o = Py_None;
    (void)type;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:array", kwlist, &val, &dtype_o)) return NULL;
    int dtype = -1;
    if (dtype_o != Py_None) {
        mk_dtype t;
        if (mkpy_parse_dtype(dtype_o, &t) < 0) return NULL;
        dtype = t;
    }
    mk_array *a = mkpy_to_array(val, dtype);
    if (!a) return NULL;
    return mkpy_wrap(a);
}

static void array_dealloc(PyMkArray *self) {
    if (self->arr) mk_decref(self->arr);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* --------------------------------------------------------------- repr */

typedef struct {
    char *buf;
    size_t n, cap;
    int failed;
} sbuf;

static void sb_put(sbuf *s, const char *text, size_t len) {
    if (s->failed) return;
    if (s->n + len + 1 > s->cap) {
        size_t cap = (s->cap ? s->cap * 2 : 256);
        while (cap < s->n + len + 1) cap *= 2;
        char *b = PyMem_Realloc(s->buf, cap);
        if (!b) {
            s->failed = 1;
            return;
        }
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->n, text, len);
    s->n += len;
    s->buf[s->n] = 0;
}
static void sb_puts(sbuf *s, const char *text) { sb_put(s, text, strlen(text)); }

static void fmt_float(char *out, size_t n, double v) {
    if (isnan(v))
        snprintf(out, n, "nan");
    else if (isinf(v))
        snprintf(out, n, v > 0 ? "inf" : "-inf");
    else
        snprintf(out, n, "%g", v);
}

static void fmt_elem(sbuf *s, mk_dtype t, const char *p) {
    char tmp[96];
    switch (mk_dtypes[t].kind) {
    case MK_KIND_BOOL: sb_puts(s, *(const bool *)p ? "True" : "False"); return;
    case MK_KIND_UINT: snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)mk_get_u64(t, p)); break;
    case MK_KIND_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)mk_get_i64(t, p)); break;
    case MK_KIND_FLOAT: fmt_float(tmp, sizeof tmp, mk_get_f64(t, p)); break;
    case MK_KIND_COMPLEX: {
        mk_c64 z = mk_get_c64(t, p);
        char re[40], im[40];
        fmt_float(re, sizeof re, crealf(z));
        float iv = cimagf(z);
        fmt_float(im, sizeof im, fabsf(iv));
        snprintf(tmp, sizeof tmp, "%s%s%sj", re, (iv < 0 || (iv == 0 && signbit(iv))) ? "-" : "+", im);
        break;
    }
    }
    sb_puts(s, tmp);
}

#define PRINT_THRESHOLD 1000
#define EDGE_ITEMS 3

static void fmt_dim(sbuf *s, const mk_array *a, int d, const char *p, int summarize) {
    size_t isz = mk_dtype_size(a->dtype);
    if (d == a->ndim) {
        fmt_elem(s, a->dtype, p);
        return;
    }
    sb_puts(s, "[");
    int64_t n = a->shape[d];
    for (int64_t i = 0; i < n; i++) {
        if (summarize && n > 2 * EDGE_ITEMS && i == EDGE_ITEMS) {
            sb_puts(s, "...");
            i = n - EDGE_ITEMS - 1;
        } else {
            fmt_dim(s, a, d + 1, p + i * a->strides[d] * (int64_t)isz, summarize);
        }
        if (i + 1 < n) {
            if (d + 1 < a->ndim) {
                sb_puts(s, ",\n");
                for (int k = 0; k < 7 + d; k++) sb_puts(s, " ");
            } else {
                sb_puts(s, ", ");
            }
        }
    }
    sb_puts(s, "]");
}

static PyObject *array_repr(PyMkArray *self) {
    mk_array *a = self->arr;
    if (mkpy_eval(&a, 1) < 0) return NULL;
    sbuf s = {0};
    sb_puts(&s, "array(");
    fmt_dim(&s, a, 0, mk_data(a), a->size > PRINT_THRESHOLD);
    sb_puts(&s, ", dtype=");
    sb_puts(&s, mk_dtype_name(a->dtype));
    sb_puts(&s, ")");
    PyObject *r = s.failed ? PyErr_NoMemory() : PyUnicode_FromStringAndSize(s.buf, (Py_ssize_t)s.n);
    PyMem_Free(s.buf);
    return r;
}

/* --------------------------------------------------------- properties */

static PyObject *get_shape(PyMkArray *self, void *c) {
    (void)c;
    mk_array *a = self->arr;
    PyObject *t = PyTuple_New(a->ndim);
    if (!t) return NULL;
    for (int i = 0; i < a->ndim; i++) {
        PyObject *v = PyLong_FromLongLong(a->shape[i]);
        if (!v) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}
static PyObject *get_dtype(PyMkArray *self, void *c) {
    (void)c;
    return Py_NewRef(mkpy_dtype_object(self->arr->dtype));
}
static PyObject *get_size(PyMkArray *self, void *c) {
    (void)c;
    return PyLong_FromLongLong(self->arr->size);
}
static PyObject *get_ndim(PyMkArray *self, void *c) {
    (void)c;
    return PyLong_FromLong(self->arr->ndim);
}
static PyObject *get_itemsize(PyMkArray *self, void *c) {
    (void)c;
    return PyLong_FromSize_t(mk_dtype_size(self->arr->dtype));
}
static PyObject *get_nbytes(PyMkArray *self, void *c) {
    (void)c;
    return PyLong_FromLongLong(self->arr->size * (int64_t)mk_dtype_size(self->arr->dtype));
}
static PyObject *get_T(PyMkArray *self, void *c) {
    (void)c;
    return mkpy_wrap(mk_transpose(self->arr, -1, NULL));
}
static PyObject *get_real(PyMkArray *self, void *c) {
    (void)c;
    return mkpy_wrap(mk_unary(MK_UNARY_real, self->arr));
}
static PyObject *get_imag(PyMkArray *self, void *c) {
    (void)c;
    return mkpy_wrap(mk_unary(MK_UNARY_imag, self->arr));
}

static PyGetSetDef array_getset[] = {
    {"shape", (getter)get_shape, NULL, "The array's dimensions, as a tuple.", NULL},
    {"dtype", (getter)get_dtype, NULL, "The array's element type.", NULL},
    {"size", (getter)get_size, NULL, "Number of elements.", NULL},
    {"ndim", (getter)get_ndim, NULL, "Number of dimensions.", NULL},
    {"itemsize", (getter)get_itemsize, NULL, "Bytes per element.", NULL},
    {"nbytes", (getter)get_nbytes, NULL, "Bytes of all elements.", NULL},
    {"T", (getter)get_T, NULL, "The transposed array (axes reversed).", NULL},
    {"real", (getter)get_real, NULL, "The real part.", NULL},
    {"imag", (getter)get_imag, NULL, "The imaginary part.", NULL},
    {NULL},
};

/* ------------------------------------------------------------ methods */

static PyObject *m_item(PyMkArray *self, PyObject *unused) {
    (void)unused;
    return mkpy_item(self->arr);
}
static PyObject *m_tolist(PyMkArray *self, PyObject *unused) {
    (void)unused;
    return mkpy_tolist(self->arr);
}

static PyObject *m_astype(PyMkArray *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"dtype", "*stream", NULL};
    PyObject *a[2];
    mk_dtype t;
    if (mkpy_parse("astype", args, nargs, kwnames, names, 1, a) < 0 || mkpy_parse_dtype(a[0], &t) < 0) return NULL;
    return mkpy_wrap(mk_astype(self->arr, t));
}

static PyObject *m_copy(PyMkArray *self, PyObject *unused) {
    (void)unused;
    return mkpy_wrap(mk_copy(self->arr));
}
static PyObject *m_deepcopy(PyMkArray *self, PyObject *memo) {
    (void)memo;
    return mkpy_wrap(mk_copy(self->arr));
}

/* pickling: (mkpy._core._from_bytes, (bytes, shape, dtype name)) */
static PyObject *m_reduce(PyMkArray *self, PyObject *unused) {
    (void)unused;
    mk_array *c = mk_copy(self->arr);
    if (!c || mkpy_eval(&c, 1) < 0) {
        if (!c) mkpy_raise();
        mk_xdecref(c);
        return NULL;
    }
    PyObject *bytes = PyBytes_FromStringAndSize(mk_data(c), c->size * (Py_ssize_t)mk_dtype_size(c->dtype));
    mk_decref(c);
    PyObject *fn = PyObject_GetAttrString(mkpy_module, "_from_bytes");
    PyObject *shape = get_shape(self, NULL);
    PyObject *r = NULL;
    if (bytes && fn && shape)
        r = Py_BuildValue("O(OOs)", fn, bytes, shape, mk_dtype_name(self->arr->dtype));
    Py_XDECREF(bytes);
    Py_XDECREF(fn);
    Py_XDECREF(shape);
    return r;
}

/* x.reshape(2, 3) and x.reshape((2, 3)) both work, as in MLX. */
static PyObject *pack_varargs(const char *name, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
    if (nargs <= 1 || !PyLong_Check(args[0])) return mkpy_forward(name, self, args, nargs, kwnames);
    PyObject *tup = PyTuple_New(nargs);
    if (!tup) return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++) PyTuple_SET_ITEM(tup, i, Py_NewRef(args[i]));
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *stack[33];
    if (nkw > 32) {
        Py_DECREF(tup);
        PyErr_SetString(PyExc_TypeError, "too many arguments");
        return NULL;
    }
    stack[0] = tup;
    for (Py_ssize_t i = 0; i < nkw; i++) stack[1 + i] = args[nargs + i];
    PyObject *r = mkpy_forward(name, self, stack, 1, kwnames);
    Py_DECREF(tup);
    return r;
}

static PyObject *m_reshape(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return pack_varargs("reshape", self, args, nargs, kwnames);
}
static PyObject *m_transpose(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return pack_varargs("transpose", self, args, nargs, kwnames);
}

/* Methods that are module functions with the array first. */
#define FORWARDED(X)                                                                                   \
    X(sum) X(mean) X(max) X(min) X(prod) X(all) X(any) X(argmax) X(argmin) X(var) X(std)               \
    X(logsumexp) X(swapaxes) X(moveaxis) X(squeeze) X(flatten) X(split) X(abs) X(exp) X(log)         \
    X(log2) X(log10) X(log1p) X(sqrt) X(rsqrt) X(square) X(reciprocal) X(sin) X(cos) X(round)         \
    X(conj) X(cumsum) X(cumprod) X(cummax) X(cummin) X(diag) X(diagonal) X(maximum) X(minimum)       \
    X(softmax) X(expand_dims) X(broadcast_to) X(tile) X(repeat) X(clip) X(sort) X(argsort)

#define DEFINE_FORWARD(name)                                                                           \
    static PyObject *fw_##name(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) { \
        return mkpy_forward(#name, self, args, nargs, kw);                                             \
    }
FORWARDED(DEFINE_FORWARD)

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FORWARD_ENTRY(name) {#name, (PyCFunction)(void (*)(void))fw_##name, FASTKW, "See mkpy." #name "."},

static PyMethodDef array_methods[] = {
    {"item", (PyCFunction)m_item, METH_NOARGS, "item() -> scalar\n--\n\nThe single element as a Python scalar."},
    {"tolist", (PyCFunction)m_tolist, METH_NOARGS, "tolist() -> list\n--\n\nThe array as nested Python lists."},
    {"astype", (PyCFunction)(void (*)(void))m_astype, FASTKW,
     "astype(dtype, /, *, stream=None) -> array\n--\n\nThe array converted to dtype."},
    {"__copy__", (PyCFunction)m_copy, METH_NOARGS, NULL},
    {"__deepcopy__", (PyCFunction)m_deepcopy, METH_O, NULL},
    {"__reduce__", (PyCFunction)m_reduce, METH_NOARGS, NULL},
    {"reshape", (PyCFunction)(void (*)(void))m_reshape, FASTKW,
     "reshape(*shape, stream=None) -> array\n--\n\nSee mkpy.reshape."},
    {"transpose", (PyCFunction)(void (*)(void))m_transpose, FASTKW,
     "transpose(*axes, stream=None) -> array\n--\n\nSee mkpy.transpose."},
    FORWARDED(FORWARD_ENTRY){NULL},
};

/* ----------------------------------------------------- number protocol */

static int operand_ok(PyObject *o) { return PyMkArray_Check(o) || mkpy_is_scalar(o); }

static PyObject *binop(mk_binary_op op, PyObject *a, PyObject *b) {
    if (!operand_ok(a) || !operand_ok(b)) Py_RETURN_NOTIMPLEMENTED;
    mk_array *x, *y;
    if (mkpy_to_arrays(a, b, &x, &y) < 0) return NULL;
    mk_array *r = mk_binary(op, x, y);
    mk_decref(x);
    mk_decref(y);
    return mkpy_wrap(r);
}

#define BINOP(pyname, op)                                                                              \
    static PyObject *nb_##pyname(PyObject *a, PyObject *b) { return binop(MK_BINARY_##op, a, b); }
BINOP(add, add)
BINOP(sub, subtract)
BINOP(mul, multiply)
BINOP(truediv, divide)
BINOP(floordiv, floor_divide)
BINOP(mod, remainder)
BINOP(and, bitwise_and)
BINOP(or, bitwise_or)
BINOP(xor, bitwise_xor)
BINOP(lshift, left_shift)
BINOP(rshift, right_shift)

static PyObject *nb_pow(PyObject *a, PyObject *b, PyObject *mod) {
    if (mod != Py_None) Py_RETURN_NOTIMPLEMENTED;
    return binop(MK_BINARY_power, a, b);
}

static PyObject *nb_matmul(PyObject *a, PyObject *b) {
    if (!PyMkArray_Check(a) && !PyMkArray_Check(b)) Py_RETURN_NOTIMPLEMENTED;
    PyObject *fn = PyObject_GetAttrString(mkpy_module, "matmul");
    if (!fn) return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(fn, a, b, NULL);
    Py_DECREF(fn);
    return r;
}

#define UNOP(pyname, op)                                                                               \
    static PyObject *nb_##pyname(PyObject *a) { return mkpy_wrap(mk_unary(MK_UNARY_##op, MKARR(a))); }
UNOP(neg, negative)
UNOP(abs, abs)
UNOP(invert, bitwise_invert)

static PyObject *nb_pos(PyObject *a) { return Py_NewRef(a); }

static PyObject *scalar_of(PyObject *self) { return mkpy_item(MKARR(self)); }

static int nb_bool(PyObject *self) {
    PyObject *v = scalar_of(self);
    if (!v) return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

static PyObject *nb_int(PyObject *self) {
    PyObject *v = scalar_of(self);
    if (!v) return NULL;
    PyObject *r = PyNumber_Long(v);
    Py_DECREF(v);
    return r;
}

static PyObject *nb_float(PyObject *self) {
    PyObject *v = scalar_of(self);
    if (!v) return NULL;
    PyObject *r = PyNumber_Float(v);
    Py_DECREF(v);
    return r;
}

static PyObject *nb_index(PyObject *self) {
    mk_array *a = MKARR(self);
    if (a->ndim != 0 || !(mk_is_integral(a->dtype) || a->dtype == MK_BOOL)) {
        PyErr_SetString(PyExc_TypeError, "Only 0-dimensional integer arrays can be converted to an index.");
        return NULL;
    }
    return mkpy_item(a);
}

static PyNumberMethods array_as_number = {
    .nb_add = nb_add,
    .nb_subtract = nb_sub,
    .nb_multiply = nb_mul,
    .nb_remainder = nb_mod,
    .nb_power = nb_pow,
    .nb_negative = nb_neg,
    .nb_positive = nb_pos,
    .nb_absolute = nb_abs,
    .nb_bool = nb_bool,
    .nb_invert = nb_invert,
    .nb_lshift = nb_lshift,
    .nb_rshift = nb_rshift,
    .nb_and = nb_and,
    .nb_xor = nb_xor,
    .nb_or = nb_or,
    .nb_int = nb_int,
    .nb_float = nb_float,
    .nb_floor_divide = nb_floordiv,
    .nb_true_divide = nb_truediv,
    .nb_index = nb_index,
    .nb_matrix_multiply = nb_matmul,
};

static PyObject *array_richcompare(PyObject *a, PyObject *b, int op) {
    static const mk_binary_op ops[] = {
        [Py_LT] = MK_BINARY_less,  [Py_LE] = MK_BINARY_less_equal,    [Py_EQ] = MK_BINARY_equal,
        [Py_NE] = MK_BINARY_not_equal, [Py_GT] = MK_BINARY_greater, [Py_GE] = MK_BINARY_greater_equal,
    };
    return binop(ops[op], a, b);
}

/* ------------------------------------------------- sequence / mapping */

static Py_ssize_t array_len(PyMkArray *self) {
    if (self->arr->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() 0-dimensional array.");
        return -1;
    }
    return (Py_ssize_t)self->arr->shape[0];
}

static PyObject *array_getitem(PyObject *self, PyObject *key) { return mkpy_getitem((PyMkArray *)self, key); }

static PyMappingMethods array_as_mapping = {
    .mp_length = (lenfunc)array_len,
    .mp_subscript = array_getitem,
};

static PySequenceMethods array_as_sequence = {
    .sq_length = (lenfunc)array_len,
};

/* Iteration yields x[0], x[1], ... along the first axis. */
static PyObject *array_iter(PyMkArray *self) {
    if (self->arr->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "iteration over a 0-d array");
        return NULL;
    }
    int64_t n = self->arr->shape[0];
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (int64_t i = 0; i < n; i++) {
        PyObject *k = PyLong_FromLongLong(i);
        PyObject *v = k ? mkpy_getitem(self, k) : NULL;
        Py_XDECREF(k);
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    PyObject *it = PyObject_GetIter(list);
    Py_DECREF(list);
    return it;
}

/* ------------------------------------------------------------- buffer */

static int array_getbuffer(PyMkArray *self, Py_buffer *view, int flags) {
    mk_array *a = self->arr;
    if (mkpy_eval(&a, 1) < 0) {
        view->obj = NULL;
        return -1;
    }
    size_t isz = mk_dtype_size(a->dtype);
    /* a strided or broadcast view is exported as is when the consumer takes
     * strides; otherwise it must be contiguous */
    if (!(flags & PyBUF_STRIDES) && !(a->flags & MK_ROW_CONTIG)) {
        PyErr_SetString(PyExc_BufferError, "mkpy array is not contiguous; request a strided buffer.");
        view->obj = NULL;
        return -1;
    }
    Py_ssize_t *meta = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (a->ndim ? a->ndim : 1));
    if (!meta) {
        PyErr_NoMemory();
        view->obj = NULL;
        return -1;
    }
    for (int i = 0; i < a->ndim; i++) {
        meta[i] = (Py_ssize_t)a->shape[i];
        meta[a->ndim + i] = (Py_ssize_t)(a->strides[i] * (int64_t)isz);
    }
    view->buf = mk_data(a);
    view->obj = Py_NewRef((PyObject *)self);
    view->len = (Py_ssize_t)(a->size * (int64_t)isz);
    view->readonly = 0;
    view->itemsize = (Py_ssize_t)isz;
    view->format = (flags & PyBUF_FORMAT) ? (char *)mk_dtypes[a->dtype].buffer_format : NULL;
    view->ndim = a->ndim;
    view->shape = (flags & PyBUF_ND) ? meta : NULL;
    view->strides = (flags & PyBUF_STRIDES) ? meta + a->ndim : NULL;
    view->suboffsets = NULL;
    view->internal = meta;
    self->exports++;
    return 0;
}

static void array_releasebuffer(PyMkArray *self, Py_buffer *view) {
    PyMem_Free(view->internal);
    self->exports--;
}

static PyBufferProcs array_as_buffer = {
    .bf_getbuffer = (getbufferproc)array_getbuffer,
    .bf_releasebuffer = (releasebufferproc)array_releasebuffer,
};

static Py_hash_t array_hash(PyObject *self) { return _Py_HashPointer(self); }

PyDoc_STRVAR(array_doc, "array(val, dtype=None)\n--\n\n"
                        "An N-dimensional lazy array, as mlx.core.array.\n\n"
                        "val may be a Python scalar, a nested list or tuple, another array, or any\n"
                        "object with the buffer protocol or __array_interface__ (NumPy arrays).\n"
                        "Python ints become int32 (int64 when too large), floats float32, bools\n"
                        "bool_, complex numbers complex64; NumPy float64 becomes float32.");

PyTypeObject PyMkArray_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.array",
    .tp_basicsize = sizeof(PyMkArray),
    .tp_dealloc = (destructor)array_dealloc,
    .tp_repr = (reprfunc)array_repr,
    .tp_str = (reprfunc)array_repr,
    .tp_as_number = &array_as_number,
    .tp_as_sequence = &array_as_sequence,
    .tp_as_mapping = &array_as_mapping,
    .tp_as_buffer = &array_as_buffer,
    .tp_hash = array_hash,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = array_doc,
    .tp_richcompare = array_richcompare,
    .tp_iter = (getiterfunc)array_iter,
    .tp_methods = array_methods,
    .tp_getset = array_getset,
    .tp_new = array_new,
};
