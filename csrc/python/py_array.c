/* mkpy.array: the Python array type. Number, sequence/mapping and buffer
 * protocols, properties, and the methods MLX arrays have. Methods that are
 * also module functions forward to them (x.sum(1) is mkpy.sum(x, 1)). */
#include <stdio.h>
#include <string.h>

#include "core/types.h"
#include "mkpy.h"

extern const char *mkpy_public_name; /* py_dtype.c: "mkpy", or "mlx.core" (mkpy.as_mlx) */

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

/* mkpy.array(...) through vectorcall (the type's tp_vectorcall, used by
 * calls of the type object): no argument tuple and dict, no format-string
 * parsing. The class has no subclasses (no Py_TPFLAGS_BASETYPE). */
static PyObject *array_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    static const char *const names[] = {"val", "dtype", NULL};
    PyObject *a[2];
    (void)type;
    if (mkpy_parse("array", args, PyVectorcall_NARGS(nargsf), kwnames, names, 1, a) < 0) return NULL;
    int dtype = -1;
    if (a[1] && a[1] != Py_None) {
        mk_dtype t;
        if (mkpy_parse_dtype(a[1], &t) < 0) return NULL;
        dtype = t;
    }
    mk_array *r = mkpy_to_array(a[0], dtype);
    if (!r) return NULL;
    return mkpy_wrap(r);
}

static void array_dealloc(PyMkArray *self) {
    if (self->weakreflist) PyObject_ClearWeakRefs((PyObject *)self);
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

/* mx.set_printoptions(precision=...): -1 prints as below, p >= 0 prints
 * floats with p decimals (std::fixed), as MLX's formatter (py_extra.c). */
int mkpy_print_precision = -1;

/* Elements print as MLX's std::ostream does: %g (6 significant digits),
 * "-nan" for a negative nan, True/False. */
static void fmt_elem(sbuf *s, mk_dtype t, const char *p) {
    char tmp[400];
    int prec = mkpy_print_precision;
    switch (mk_dtypes[t].kind) {
    case MK_KIND_BOOL: sb_puts(s, *(const bool *)p ? "True" : "False"); return;
    case MK_KIND_UINT: snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)mk_get_u64(t, p)); break;
    case MK_KIND_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)mk_get_i64(t, p)); break;
    case MK_KIND_FLOAT:
        if (prec >= 0)
            snprintf(tmp, sizeof tmp, "%.*f", prec > 60 ? 60 : prec, mk_get_f64(t, p));
        else
            snprintf(tmp, sizeof tmp, "%g", mk_get_f64(t, p));
        break;
    case MK_KIND_COMPLEX: {
        /* MLX: real, then "+" imag when imag >= 0 or nan (so "0+-0j"), else "-" |imag| */
        mk_c64 z = mk_get_c64(t, p);
        float re = crealf(z), im = cimagf(z);
        if (prec >= 0) {
            int q = prec > 60 ? 60 : prec;
            if (im >= 0 || isnan(im))
                snprintf(tmp, sizeof tmp, "%.*f+%.*fj", q, re, q, im);
            else
                snprintf(tmp, sizeof tmp, "%.*f-%.*fj", q, re, q, -im);
        } else if (im >= 0 || isnan(im))
            snprintf(tmp, sizeof tmp, "%g+%gj", re, im);
        else
            snprintf(tmp, sizeof tmp, "%g-%gj", re, -im);
        break;
    }
    }
    sb_puts(s, tmp);
}

/* MLX shows the first and last 3 entries of any axis longer than 6. */
#define EDGE_ITEMS 3

static void fmt_dim(sbuf *s, const mk_array *a, int d, const char *p) {
    size_t isz = mk_dtype_size(a->dtype);
    if (d == a->ndim) {
        fmt_elem(s, a->dtype, p);
        return;
    }
    sb_puts(s, "[");
    int64_t n = a->shape[d];
    for (int64_t i = 0; i < n; i++) {
        if (n > 2 * EDGE_ITEMS && i == EDGE_ITEMS) {
            sb_puts(s, "...");
            i = n - EDGE_ITEMS - 1;
        } else {
            fmt_dim(s, a, d + 1, p + i * a->strides[d] * (int64_t)isz);
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
    mk_incref(a); /* another thread may rebind self while the GIL is released */
    if (mkpy_eval(&a, 1) < 0) {
        mk_decref(a);
        return NULL;
    }
    sbuf s = {0};
    sb_puts(&s, "array(");
    fmt_dim(&s, a, 0, mk_data(a));
    sb_puts(&s, ", dtype=");
    sb_puts(&s, mk_dtype_name(a->dtype));
    sb_puts(&s, ")");
    PyObject *r = s.failed ? PyErr_NoMemory() : PyUnicode_FromStringAndSize(s.buf, (Py_ssize_t)s.n);
    PyMem_Free(s.buf);
    mk_decref(a);
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
static PyObject *get_at(PyObject *self, void *c) {
    (void)c;
    return mkpy_array_at(self);
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
    {"at", (getter)get_at, NULL, "Updates at indices that return new arrays: x.at[idx].add(y), ...", NULL},
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

MKPY_STREAM_BINDING(m_astype)(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"dtype", "stream", NULL};
    PyObject *a[2];
    mk_dtype t;
    if (mkpy_parse("astype", args, nargs, kwnames, names, 1, a) < 0 || mkpy_parse_dtype(a[0], &t) < 0) return NULL;
    return mkpy_wrap(mk_astype(MKARR(self), t));
}

/* copy.copy and copy.deepcopy give a new array object sharing the data, as
 * MLX's (arrays are immutable; x += 1 rebinds only x). */
static PyObject *m_copy(PyMkArray *self, PyObject *unused) {
    (void)unused;
    mk_incref(self->arr);
    return mkpy_wrap(self->arr);
}
static PyObject *m_deepcopy(PyMkArray *self, PyObject *memo) {
    (void)memo;
    mk_incref(self->arr);
    return mkpy_wrap(self->arr);
}

/* __array__(dtype=None, copy=None): a NumPy array sharing the memory, as
 * MLX's (dtype and copy are accepted and ignored, as there). */
static PyObject *m_array(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"dtype", "copy", NULL};
    PyObject *a[2];
    if (mkpy_parse("__array__", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (MKARR(self)->dtype == MK_BFLOAT16) {
        PyErr_SetString(PyExc_TypeError, "bfloat16 arrays cannot be converted to NumPy.");
        return NULL;
    }
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np) return NULL;
    PyObject *mv = PyMemoryView_FromObject(self);
    PyObject *r = mv ? PyObject_CallMethod(np, "asarray", "O", mv) : NULL;
    Py_XDECREF(mv);
    Py_DECREF(np);
    return r;
}

static PyObject *m_array_namespace(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"api_version", NULL};
    PyObject *a[1];
    (void)self;
    if (mkpy_parse("__array_namespace__", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (a[0] && a[0] != Py_None) {
        PyErr_SetString(PyExc_ValueError, "Explicitly specifying api_version is not yet implemented.");
        return NULL;
    }
    return PyImport_ImportModule("mkpy");
}

/* format(x, spec): a 0-d array formats as its scalar; otherwise only the
 * empty spec is allowed (the repr). */
static PyObject *m_format(PyObject *self, PyObject *spec) {
    mk_array *a = MKARR(self);
    if (a->ndim == 0) {
        PyObject *v = mkpy_item(a);
        if (!v) return NULL;
        PyObject *r = PyObject_Format(v, spec);
        Py_DECREF(v);
        return r;
    }
    if (!PyUnicode_Check(spec) || PyUnicode_GET_LENGTH(spec) > 0) {
        PyErr_Format(PyExc_TypeError, "unsupported format string passed to %s.array.__format__", mkpy_public_name);
        return NULL;
    }
    return PyObject_Repr(self);
}

static PyObject *m_complex(PyObject *self, PyObject *unused);

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
    X(conj) X(cumsum) X(cumprod) X(cummax) X(cummin) X(logcumsumexp) X(diag) X(diagonal) X(view)

#define DEFINE_FORWARD(name)                                                                           \
    static PyObject *fw_##name(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) { \
        return mkpy_forward(#name, self, args, nargs, kw);                                             \
    }
FORWARDED(DEFINE_FORWARD)

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FORWARD_ENTRY(name) {#name, (PyCFunction)(void (*)(void))fw_##name, FASTKW, "See mkpy." #name "."},

/* py_extra.c */
PyObject *mkpy_array_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *mkpy_array_dlpack_device(PyObject *self, PyObject *unused);

static PyMethodDef array_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))mkpy_array_dlpack, FASTKW,
     "__dlpack__($self, /, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "A DLPack capsule viewing the array's memory."},
    {"__dlpack_device__", (PyCFunction)mkpy_array_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self)\n--\n\n(1, 0): the CPU; (8, 0), Metal, in the stand-in mode (mkpy.as_mlx), as MLX "
     "with Metal."},
    {"item", (PyCFunction)m_item, METH_NOARGS, "item($self)\n--\n\nThe single element as a Python scalar."},
    {"tolist", (PyCFunction)m_tolist, METH_NOARGS, "tolist($self)\n--\n\nThe array as nested Python lists."},
    {"astype", (PyCFunction)(void (*)(void))m_astype, FASTKW,
     "astype($self, dtype, stream=None)\n--\n\nThe array converted to dtype."},
    {"__copy__", (PyCFunction)m_copy, METH_NOARGS, NULL},
    {"__complex__", (PyCFunction)m_complex, METH_NOARGS, NULL},
    {"__format__", (PyCFunction)m_format, METH_O, NULL},
    {"__array__", (PyCFunction)(void (*)(void))m_array, FASTKW,
     "__array__($self, dtype=None, copy=None)\n--\n\nA NumPy array sharing the memory."},
    {"__array_namespace__", (PyCFunction)(void (*)(void))m_array_namespace, FASTKW,
     "__array_namespace__($self, api_version=None)\n--\n\nThe mkpy module."},
    {"__deepcopy__", (PyCFunction)m_deepcopy, METH_O, NULL},
    {"__reduce__", (PyCFunction)m_reduce, METH_NOARGS, NULL},
    {"reshape", (PyCFunction)(void (*)(void))m_reshape, FASTKW,
     "reshape($self, *shape, stream=None)\n--\n\nSee mkpy.reshape."},
    {"transpose", (PyCFunction)(void (*)(void))m_transpose, FASTKW,
     "transpose($self, *axes, stream=None)\n--\n\nSee mkpy.transpose."},
    FORWARDED(FORWARD_ENTRY){NULL},
};

/* ----------------------------------------------------- number protocol */

/* Operator table, as MLX's array methods: the name used in errors, whether
 * a reflected form exists (MLX has __radd__ but no __rand__), and whether
 * inexact operands are refused (bitwise ops and shifts). */
typedef struct {
    mk_binary_op op;
    const char *what;   /* "addition": "Cannot perform addition on ..." */
    const char *bitwise; /* "bitwise and": "Floating point types not allowed with bitwise and." */
    int reflected;
} opinfo;

enum { O_ADD, O_SUB, O_MUL, O_DIV, O_FLOORDIV, O_MOD, O_POW, O_AND, O_OR, O_XOR, O_LSHIFT, O_RSHIFT, O_NOPS };

static const opinfo opinfos[O_NOPS] = {
    [O_ADD] = {MK_BINARY_add, "addition", NULL, 1},
    [O_SUB] = {MK_BINARY_subtract, "subtraction", NULL, 1},
    [O_MUL] = {MK_BINARY_multiply, "multiplication", NULL, 1},
    [O_DIV] = {MK_BINARY_divide, "division", NULL, 1},
    [O_FLOORDIV] = {MK_BINARY_floor_divide, "floor division", NULL, 1},
    [O_MOD] = {MK_BINARY_remainder, "modulus", NULL, 1},
    [O_POW] = {MK_BINARY_power, "power", NULL, 1},
    [O_AND] = {MK_BINARY_bitwise_and, "bitwise and", "bitwise and", 0},
    [O_OR] = {MK_BINARY_bitwise_or, "bitwise or", "bitwise or", 0},
    [O_XOR] = {MK_BINARY_bitwise_xor, "bitwise xor", "bitwise xor", 0},
    [O_LSHIFT] = {MK_BINARY_left_shift, "left shift", "left shift", 0},
    [O_RSHIFT] = {MK_BINARY_right_shift, "right shift", "right shift", 0},
};

/* ValueError "Cannot perform addition on an mkpy.array and list". */
static PyObject *invalid_operation(const char *prefix, const char *what, PyObject *other) {
    PyObject *name = mkpy_type_name(other);
    if (name) {
        PyErr_Format(PyExc_ValueError, "Cannot perform %s%s on an %s.array and %U", prefix, what, mkpy_public_name,
                     name);
        Py_DECREF(name);
    }
    return NULL;
}

/* The operands converted as MLX's array methods do: `other` is weakly
 * typed against the array. Returns the result (new reference), NULL with
 * an error, or NotImplemented (None as the other operand, or a reflected
 * operator MLX does not define). */
static PyObject *binop_ex(int k, PyObject *a, PyObject *b, int inplace, mk_array **result) {
    const opinfo *info = &opinfos[k];
    int reflected = !PyMkArray_Check(a);
    PyObject *other = reflected ? a : b;
    *result = NULL;
    if ((reflected && !info->reflected) || other == Py_None) Py_RETURN_NOTIMPLEMENTED;
    if (!mkpy_is_operand(other)) return invalid_operation(inplace ? "inplace " : "", info->what, other);
    mk_array *x, *y;
    if (mkpy_to_arrays(a, b, &x, &y) < 0) return NULL;
    if (info->bitwise && (mk_is_inexact(x->dtype) || mk_is_inexact(y->dtype))) {
        /* MLX's in-place xor message lacks the "with" */
        PyErr_Format(PyExc_ValueError, "Floating point types not allowed %s%s.",
                     inplace && k == O_XOR ? "" : "with ", info->bitwise);
    } else {
        *result = mk_binary(info->op, x, y);
        if (!*result) mkpy_raise();
    }
    mk_decref(x);
    mk_decref(y);
    return NULL;
}

static PyObject *binop(int k, PyObject *a, PyObject *b) {
    mk_array *r;
    PyObject *ret = binop_ex(k, a, b, 0, &r);
    return r ? mkpy_wrap(r) : ret;
}

/* x += y replaces x's array in place, so other references to the Python
 * object see the new value (MLX's overwrite_descriptor). */
static PyObject *inplace(int k, PyObject *self, PyObject *other) {
    if (k == O_DIV && !mk_is_inexact(MKARR(self)->dtype) && mkpy_is_operand(other) && other != Py_None) {
        PyErr_SetString(PyExc_ValueError, "In place division cannot cast to non-floating point type.");
        return NULL;
    }
    mk_array *r;
    PyObject *ret = binop_ex(k, self, other, 1, &r);
    if (!r) return ret;
    mk_decref(MKARR(self));
    MKARR(self) = r;
    return Py_NewRef(self);
}

#define BINOP(pyname, k)                                                                               \
    static PyObject *nb_##pyname(PyObject *a, PyObject *b) { return binop(k, a, b); }                  \
    static PyObject *nb_i##pyname(PyObject *a, PyObject *b) { return inplace(k, a, b); }
BINOP(add, O_ADD)
BINOP(sub, O_SUB)
BINOP(mul, O_MUL)
BINOP(truediv, O_DIV)
BINOP(floordiv, O_FLOORDIV)
BINOP(mod, O_MOD)
BINOP(and, O_AND)
BINOP(or, O_OR)
BINOP(xor, O_XOR)
BINOP(lshift, O_LSHIFT)
BINOP(rshift, O_RSHIFT)

static PyObject *nb_pow(PyObject *a, PyObject *b, PyObject *mod) {
    if (mod != Py_None) Py_RETURN_NOTIMPLEMENTED;
    return binop(O_POW, a, b);
}

static PyObject *nb_ipow(PyObject *a, PyObject *b, PyObject *mod) {
    if (mod != Py_None) Py_RETURN_NOTIMPLEMENTED;
    return inplace(O_POW, a, b);
}

/* a @ b: arrays only, as MLX's __matmul__ (no reflected form). */
static PyObject *call_matmul(PyObject *a, PyObject *b, const char *name) {
    if (!PyMkArray_Check(a)) Py_RETURN_NOTIMPLEMENTED;
    if (!PyMkArray_Check(b)) {
        PyObject *args[2] = {a, b};
        char sig[96];
        snprintf(sig, sizeof sig, "    1. %s(self, other: mkpy.array) -> mkpy.array", name);
        return mkpy_bad_call(name, sig, args, 2, NULL);
    }
    PyObject *fn = PyObject_GetAttrString(mkpy_module, "matmul");
    if (!fn) return NULL;
    PyObject *r = PyObject_CallFunctionObjArgs(fn, a, b, NULL);
    Py_DECREF(fn);
    return r;
}

static PyObject *nb_matmul(PyObject *a, PyObject *b) { return call_matmul(a, b, "__matmul__"); }

static PyObject *nb_imatmul(PyObject *a, PyObject *b) {
    PyObject *r = call_matmul(a, b, "__imatmul__");
    if (!r || r == Py_NotImplemented) return r;
    mk_array *arr = MKARR(r);
    mk_incref(arr);
    Py_DECREF(r);
    mk_decref(MKARR(a));
    MKARR(a) = arr;
    return Py_NewRef(a);
}

static PyObject *nb_neg(PyObject *a) { return mkpy_wrap(mk_unary(MK_UNARY_negative, MKARR(a))); }
static PyObject *nb_abs(PyObject *a) { return mkpy_wrap(mk_unary(MK_UNARY_abs, MKARR(a))); }

static PyObject *nb_invert(PyObject *a) {
    mk_array *x = MKARR(a);
    if (mk_is_inexact(x->dtype)) {
        PyErr_SetString(PyExc_ValueError, "Floating point types not allowed with bitwise inversion.");
        return NULL;
    }
    return mkpy_wrap(mk_unary(x->dtype == MK_BOOL ? MK_UNARY_logical_not : MK_UNARY_bitwise_invert, x));
}

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

static PyObject *m_complex(PyObject *self, PyObject *unused) {
    (void)unused;
    PyObject *v = scalar_of(self);
    if (!v) return NULL;
    PyObject *r = PyObject_CallOneArg((PyObject *)&PyComplex_Type, v);
    Py_DECREF(v);
    return r;
}

static PyObject *nb_index(PyObject *self) {
    mk_array *a = MKARR(self);
    if (a->ndim != 0 || !mk_is_integral(a->dtype)) {
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
    .nb_inplace_add = nb_iadd,
    .nb_inplace_subtract = nb_isub,
    .nb_inplace_multiply = nb_imul,
    .nb_inplace_remainder = nb_imod,
    .nb_inplace_power = nb_ipow,
    .nb_inplace_lshift = nb_ilshift,
    .nb_inplace_rshift = nb_irshift,
    .nb_inplace_and = nb_iand,
    .nb_inplace_xor = nb_ixor,
    .nb_inplace_or = nb_ior,
    .nb_floor_divide = nb_floordiv,
    .nb_true_divide = nb_truediv,
    .nb_inplace_floor_divide = nb_ifloordiv,
    .nb_inplace_true_divide = nb_itruediv,
    .nb_index = nb_index,
    .nb_matrix_multiply = nb_matmul,
    .nb_inplace_matrix_multiply = nb_imatmul,
};

/* Comparisons: == and != with something that is not an array operand give
 * False and True; the ordering ones raise; None is refused (TypeError), as
 * MLX's argument matching does. */
static PyObject *array_richcompare(PyObject *a, PyObject *b, int op) {
    static const mk_binary_op ops[] = {
        [Py_LT] = MK_BINARY_less,  [Py_LE] = MK_BINARY_less_equal,    [Py_EQ] = MK_BINARY_equal,
        [Py_NE] = MK_BINARY_not_equal, [Py_GT] = MK_BINARY_greater, [Py_GE] = MK_BINARY_greater_equal,
    };
    static const char *const what[] = {
        [Py_LT] = "less than", [Py_LE] = "less than or equal", [Py_EQ] = "equal",
        [Py_NE] = "not equal", [Py_GT] = "greater than", [Py_GE] = "greater than or equal",
    };
    static const char *const dunder[] = {
        [Py_LT] = "__lt__", [Py_LE] = "__le__", [Py_EQ] = "__eq__",
        [Py_NE] = "__ne__", [Py_GT] = "__gt__", [Py_GE] = "__ge__",
    };
    if (b == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s(): incompatible function arguments: NoneType is not an array operand.",
                     dunder[op]);
        return NULL;
    }
    if (!mkpy_is_operand(b)) {
        if (op == Py_EQ) Py_RETURN_FALSE;
        if (op == Py_NE) Py_RETURN_TRUE;
        return invalid_operation("", what[op], b);
    }
    mk_array *x, *y;
    if (mkpy_to_arrays(a, b, &x, &y) < 0) return NULL;
    mk_array *r = mk_binary(ops[op], x, y);
    mk_decref(x);
    mk_decref(y);
    return mkpy_wrap(r);
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

static int array_setitem(PyObject *self, PyObject *key, PyObject *v) {
    return mkpy_setitem((PyMkArray *)self, key, v);
}

static PyMappingMethods array_as_mapping = {
    .mp_length = (lenfunc)array_len,
    .mp_subscript = array_getitem,
    .mp_ass_subscript = array_setitem,
};

/* x[i] through the sequence protocol too (as MLX's nanobind class has it), so
 * PySequence_Check holds and NumPy treats nested arrays as sequences. */
static PyObject *array_sq_item(PyObject *self, Py_ssize_t i) {
    PyObject *k = PyLong_FromSsize_t(i);
    if (!k) return NULL;
    PyObject *r = mkpy_getitem((PyMkArray *)self, k);
    Py_DECREF(k);
    return r;
}

static PySequenceMethods array_as_sequence = {
    .sq_length = (lenfunc)array_len,
    .sq_item = array_sq_item,
};

/* Iteration yields x[0], x[1], ... along the first axis. */
static PyObject *array_iter(PyMkArray *self) {
    if (self->arr->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "iter() 0-dimensional array.");
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

/* The export keeps the evaluated array alive (not just the Python object),
 * so `x += 1` rebinding x while NumPy holds a view is safe. */
typedef struct {
    mk_array *arr;
    Py_ssize_t meta[]; /* shape, then byte strides */
} export_info;

static int array_getbuffer(PyMkArray *self, Py_buffer *view, int flags) {
    mk_array *a = self->arr;
    view->obj = NULL;
    mk_incref(a); /* the export's reference, taken before the GIL is released */
    if (mkpy_eval(&a, 1) < 0) {
        mk_decref(a);
        return -1;
    }
    size_t isz = mk_dtype_size(a->dtype);
    /* a strided or broadcast view is exported as is when the consumer takes
     * strides; otherwise it must be contiguous */
    if (!(flags & PyBUF_STRIDES) && !(a->flags & MK_ROW_CONTIG)) {
        PyErr_SetString(PyExc_BufferError, "mkpy array is not contiguous; request a strided buffer.");
        mk_decref(a);
        return -1;
    }
    export_info *info = PyMem_Malloc(sizeof *info + sizeof(Py_ssize_t) * 2 * (a->ndim ? a->ndim : 1));
    if (!info) {
        mk_decref(a);
        PyErr_NoMemory();
        return -1;
    }
    info->arr = a;
    Py_ssize_t *meta = info->meta;
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
    view->internal = info;
    self->exports++;
    return 0;
}

static void array_releasebuffer(PyMkArray *self, Py_buffer *view) {
    export_info *info = view->internal;
    mk_decref(info->arr);
    PyMem_Free(info);
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
    .tp_vectorcall = array_vectorcall,
    .tp_weaklistoffset = offsetof(PyMkArray, weakreflist),
};
