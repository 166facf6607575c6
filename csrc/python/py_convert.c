/* Conversions between Python objects and core arrays, argument parsing and
 * error translation. */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "core/iter.h"
#include "core/pool.h"
#include "core/types.h"
#include "kernel/diag.h"
#include "dlpack_abi.h"
#include "mkpy.h"

extern const char *mkpy_public_name; /* py_dtype.c: "mkpy", or "mlx.core" (mkpy.as_mlx) */
#include "core/ops_extra.h"

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
    case MK_ERR_INTERRUPT: exc = PyExc_KeyboardInterrupt; break;
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
    self->weakreflist = NULL;
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

/* Ctrl-C during an eval. Python's own SIGINT handler only notes the signal
 * for the interpreter, which cannot look while the GIL is released; so while
 * there is work to evaluate, this handler sits in front of it: it tells the
 * core (mk_interrupt_raise: running kernels and ops stop, see
 * docs/kernels.md) and passes the signal on to the handler it displaced. After
 * the eval, PyErr_CheckSignals runs the Python handler (KeyboardInterrupt by
 * default). It is put back in front whenever someone replaced it
 * (signal.signal installs its handler again). */
static struct sigaction displaced_sigint;

static volatile sig_atomic_t sigint_trace; /* MKPY_DEBUG=3: on_sigint says it ran (write is signal-safe) */

static void on_sigint(int sig, siginfo_t *si, void *uc) {
    struct sigaction *d = &displaced_sigint;
    if (sigint_trace) {
        static const char msg[] = "[mkpy debug 3] SIGINT reached mkpy's handler\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
    }
    if (!(d->sa_flags & SA_SIGINFO) && d->sa_handler == SIG_IGN) return;
    mk_interrupt_raise();
    if (d->sa_flags & SA_SIGINFO) {
        if (d->sa_sigaction) d->sa_sigaction(sig, si, uc);
    } else if (d->sa_handler == SIG_DFL) {
        signal(sig, SIG_DFL);
        raise(sig);
    } else {
        d->sa_handler(sig);
    }
}

static pthread_mutex_t arm_mu = PTHREAD_MUTEX_INITIALIZER;

static void arm_sigint_locked(void) {
    struct sigaction cur;
    if (sigaction(SIGINT, NULL, &cur) != 0) return;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigint) return;
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) return;
    displaced_sigint = cur;
    sigint_trace = mkk_debug_level() >= 3;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigint;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | (cur.sa_flags & SA_RESTART);
    sa.sa_mask = cur.sa_mask;
    sigaction(SIGINT, &sa, NULL);
}

/* mk_eval calls it without the GIL, so two threads may arm at once */
static void arm_sigint(void) {
    pthread_mutex_lock(&arm_mu);
    arm_sigint_locked();
    pthread_mutex_unlock(&arm_mu);
}

/* The arrays are held while the GIL is released: another thread may rebind
 * the Python object (x[0] = 1, x += 1) that lent them. Callers that read an
 * array after this returns hold their own reference to it. */
int mkpy_eval(mk_array *const *arrs, int n) {
    int rc, work = 0;
    for (int i = 0; i < n; i++) mk_incref(arrs[i]);
    for (int i = 0; i < n && !work; i++) work = arrs[i]->prim != NULL;
    if (work && !mk_eval_arm) mk_eval_arm = arm_sigint; /* mk_eval arms it unless the work is tiny */
    for (;;) {
        /* a few small element-wise ops or copies run with the GIL held:
         * releasing and taking it back cost more than they do */
        int small = work ? mk_eval_small(arrs, n) : 1; /* nothing to do: evaluated */
        if (small) {
            rc = small < 0 ? -1 : 0;
        } else {
            Py_BEGIN_ALLOW_THREADS
            rc = mk_eval(arrs, n);
            Py_END_ALLOW_THREADS
        }
        mkpy_flush_deferred(); /* what the kernels printed, cache warnings */
        if (rc == 0 || mk_error_code() != MK_ERR_INTERRUPT) break;
        /* interrupted: run the Python-level handler; when it raises nothing,
         * the eval starts again: the stopped nodes run again */
        if (PyErr_CheckSignals() < 0) {
            mk_error_clear();
            rc = -2;
            break;
        }
        mk_error_clear(); /* (on other threads than the main one too, whose handler runs there) */
    }
    for (int i = 0; i < n; i++) mk_decref(arrs[i]);
    if (rc == -2) return -1; /* the Python handler raised */
    if (rc < 0) mkpy_raise();
    return rc;
}

/* ------------------------------------------------ Python values -> array */

int mkpy_is_scalar(PyObject *o) {
    return PyBool_Check(o) || PyLong_Check(o) || PyFloat_Check(o) || PyComplex_Check(o);
}

PyObject *mkpy_type_name(PyObject *o) {
    PyTypeObject *tp = Py_TYPE(o);
    if (tp->tp_flags & Py_TPFLAGS_HEAPTYPE) {
        /* module and __name__ (not the qualified name), as nanobind prints;
         * mkpy's Python classes (mkpy._device.Device) as mkpy.Device */
        PyObject *mod = PyObject_GetAttrString((PyObject *)tp, "__module__");
        PyObject *r = NULL;
        const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
        /* a heap type made by PyType_FromSpec (Python 3.13's decimal.Decimal) has its module
         * in tp_name too */
        const char *dot = strrchr(tp->tp_name, '.'), *name = dot ? dot + 1 : tp->tp_name;
        if (m && !strncmp(m, "mkpy._", 6))
            r = PyUnicode_FromFormat("%s.%s", mkpy_public_name, name);
        else if (mod)
            r = PyUnicode_FromFormat("%S.%s", mod, name);
        Py_XDECREF(mod);
        return r;
    }
    /* static types print their __name__ (ndarray, float32, Decimal), except
     * mkpy's own (mkpy.array, mkpy.Dtype), which stand for MLX's nanobind
     * classes printed with their module (mlx.core.array) */
    if (!strncmp(tp->tp_name, "mkpy.", 5)) return PyUnicode_FromFormat("%s.%s", mkpy_public_name, tp->tp_name + 5);
    const char *dot = strrchr(tp->tp_name, '.');
    return PyUnicode_FromString(dot ? dot + 1 : tp->tp_name);
}

/* ValueError "Invalid type list received in array initialization."; a
 * top-level None, which MLX's argument matching refuses before conversion,
 * is a TypeError. */
static void *invalid_type_ex(PyObject *o, int top) {
    if (o == Py_None && top) {
        PyErr_SetString(PyExc_TypeError, "Invalid type NoneType received in array initialization.");
        return NULL;
    }
    PyObject *name = mkpy_type_name(o);
    if (name) {
        PyErr_Format(PyExc_ValueError, "Invalid type %U received in array initialization.", name);
        Py_DECREF(name);
    }
    return NULL;
}

static void *invalid_type(PyObject *o) { return invalid_type_ex(o, 1); }

/* MLX reads a Python int as an int64 (nanobind's cast to long) and fails
 * beyond that range with `RuntimeError: std::bad_cast`; mkpy says what did not
 * fit, as an OverflowError. */
static int int_overflow(PyObject *o, const char *ctype) {
    PyErr_Format(PyExc_OverflowError, "Python int %R does not fit %s, the type mx.array reads it as.", o, ctype);
    return -1;
}

static int int_value(PyObject *o, int64_t *v) {
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (overflow) return int_overflow(o, "int64");
    *v = x;
    return 0;
}

/* hasattr(o, name) without building and clearing an AttributeError when the
 * attribute is missing (PyObject_HasAttrString formats the error message:
 * most of the fixed cost of mx.array(ndarray) was that); errors count as
 * "no", as hasattr's. `cache` holds the interned name. */
static int has_attr_fast(PyObject *o, PyObject **cache, const char *name) {
    if (!*cache && !(*cache = PyUnicode_InternFromString(name))) {
        PyErr_Clear();
        return PyObject_HasAttrString(o, name);
    }
    PyObject *r = NULL;
#if PY_VERSION_HEX >= 0x030D0000
    int k = PyObject_GetOptionalAttr(o, *cache, &r);
#else
    int k = _PyObject_LookupAttr(o, *cache, &r);
#endif
    Py_XDECREF(r);
    if (k < 0) {
        PyErr_Clear();
        return 0;
    }
    return k;
}
static PyObject *name_mlx_array, *name_array_interface;

/* Types whose objects go straight to the buffer protocol (NumPy's
 * ndarray): not mkpy arrays, not Python scalars, with a buffer, and no
 * __mlx_array__ that could ever appear (immutable static types whose
 * instances have no __dict__). A few slots, filled first come, under the
 * GIL; they skip the attribute look-up and the type tests. */
#define PLAIN_BUFFER_TYPES 4
static PyTypeObject *plain_buffer_types[PLAIN_BUFFER_TYPES];

static int is_plain_buffer_type(PyTypeObject *tp) {
    for (int i = 0; i < PLAIN_BUFFER_TYPES && plain_buffer_types[i]; i++)
        if (plain_buffer_types[i] == tp) return 1;
    return 0;
}

/* Called after the full tests found `o` a buffer without __mlx_array__. */
static void note_plain_buffer_type(PyObject *o) {
#ifdef Py_TPFLAGS_IMMUTABLETYPE
    PyTypeObject *tp = Py_TYPE(o);
    if ((tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || !(tp->tp_flags & Py_TPFLAGS_IMMUTABLETYPE) || tp->tp_dictoffset != 0)
        return;
    for (int i = 0; i < PLAIN_BUFFER_TYPES; i++) {
        if (plain_buffer_types[i] == tp) return;
        if (!plain_buffer_types[i]) {
            plain_buffer_types[i] = tp;
            return;
        }
    }
#else
    (void)o;
#endif
}

static int has_mlx_array(PyObject *o) { return has_attr_fast(o, &name_mlx_array, "__mlx_array__"); }
#define HAS_MLX_ARRAY(o) has_mlx_array(o)
#define HAS_ARRAY_INTERFACE(o) has_attr_fast(o, &name_array_interface, "__array_interface__")

static int is_mlx_array(PyObject *o) {
    return PyMkArray_Check(o) || (!mkpy_is_scalar(o) && HAS_MLX_ARRAY(o));
}

/* o.__mlx_array__(), checked to be an array (new core reference). */
static mk_array *from_mlx_array_attr(PyObject *o) {
    PyObject *r = PyObject_CallMethod(o, "__mlx_array__", NULL);
    if (!r) return NULL;
    if (!PyMkArray_Check(r)) {
        PyErr_Format(PyExc_TypeError, "__mlx_array__ must return an mkpy.array, not %s.", Py_TYPE(r)->tp_name);
        Py_DECREF(r);
        return NULL;
    }
    mk_array *a = MKARR(r);
    mk_incref(a);
    Py_DECREF(r);
    return a;
}

/* A Python scalar into one element of dtype t. `cls` is the class the
 * values of a list were inferred as (bool < int < float < complex), which
 * decides how MLX reads them: ints go through int64 and, for list
 * elements, must also fit the C type MLX reads them into for t (int64,
 * uint64 >= 0, uint32, any for inexact dtypes, int32 otherwise). */
enum { CLS_BOOL, CLS_INT, CLS_FLOAT, CLS_COMPLEX };

static int store_scalar(PyObject *o, int cls, int in_list, mk_dtype t, void *dst) {
    if (cls == CLS_COMPLEX) {
        Py_complex c = PyComplex_AsCComplex(o);
        if (c.real == -1.0 && PyErr_Occurred()) return -1;
        mk_put_c64(t, dst, CMPLXF((float)c.real, (float)c.imag));
    } else if (cls == CLS_FLOAT || PyFloat_Check(o)) {
        double v = PyFloat_AsDouble(o);
        if (v == -1.0 && PyErr_Occurred()) return -1;
        mk_put_f64(t, dst, v);
    } else if (PyBool_Check(o)) {
        mk_put_i64(t, dst, o == Py_True);
    } else {
        int64_t v;
        if (int_value(o, &v) < 0) return -1;
        if (in_list && !mk_is_inexact(t)) {
            int64_t lo = INT32_MIN, hi = INT32_MAX;
            const char *ctype = "int32";
            if (t == MK_INT64) lo = INT64_MIN, hi = INT64_MAX, ctype = "int64";
            else if (t == MK_UINT64) lo = 0, hi = INT64_MAX, ctype = "int64 >= 0 (for uint64)";
            else if (t == MK_UINT32) lo = 0, hi = UINT32_MAX, ctype = "uint32";
            if (v < lo || v > hi) return int_overflow(o, ctype);
        }
        mk_put_i64(t, dst, v);
    }
    return 0;
}

/* State for converting a nested list: shape found from the first elements,
 * then a walk that checks uniformity, infers the dtype and fills. */
typedef struct {
    int ndim;
    int64_t shape[MK_MAX_NDIM];
    int cls;       /* highest scalar class met, or -1 */
    int has_int64; /* an int outside int32 */
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

static int nonuniform(void) {
    PyErr_SetString(PyExc_ValueError, "Initialization encountered non-uniform length.");
    return -1;
}

/* pass 0: check and infer; pass 1: fill */
static int nest_walk(nest *s, PyObject *o, int depth, int pass) {
    if (PyList_Check(o) || PyTuple_Check(o)) {
        if (depth >= s->ndim) {
            PyErr_SetString(PyExc_ValueError, "Initialization encountered extra dimension.");
            return -1;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
        if (n != s->shape[depth]) return nonuniform();
        for (Py_ssize_t i = 0; i < n; i++)
            if (nest_walk(s, PySequence_Fast_GET_ITEM(o, i), depth + 1, pass) < 0) return -1;
        return 0;
    }
    if (PyMkArray_Check(o)) {
        mk_array *a = MKARR(o);
        if (depth + a->ndim != s->ndim) return nonuniform();
        for (int i = 0; i < a->ndim; i++)
            if (a->shape[i] != s->shape[depth + i]) return nonuniform();
        /* pass 1 never meets an array: nest_build takes those lists */
        s->arr_dtype = s->arr_dtype < 0 ? (int)a->dtype : (int)mk_promote(s->arr_dtype, a->dtype);
        return 0;
    }
    if (pass == 0) {
        int cls;
        if (PyBool_Check(o))
            cls = CLS_BOOL;
        else if (PyLong_Check(o)) {
            int64_t v;
            if (int_value(o, &v) < 0) return -1;
            if (v < INT32_MIN || v > INT32_MAX) s->has_int64 = 1;
            cls = CLS_INT;
        } else if (PyFloat_Check(o))
            cls = CLS_FLOAT;
        else if (PyComplex_Check(o))
            cls = CLS_COMPLEX;
        else
            return invalid_type_ex(o, 0), -1;
        if (depth != s->ndim) return nonuniform();
        if (cls > s->cls) s->cls = cls;
        return 0;
    }
    if (store_scalar(o, s->cls, 1, s->dtype, s->dst) < 0) return -1;
    s->dst += s->itemsize;
    return 0;
}

static int nest_has_array(PyObject *o) {
    if (PyMkArray_Check(o)) return 1;
    if (!PyList_Check(o) && !PyTuple_Check(o)) return 0;
    for (Py_ssize_t i = 0, n = PySequence_Fast_GET_SIZE(o); i < n; i++)
        if (nest_has_array(PySequence_Fast_GET_ITEM(o, i))) return 1;
    return 0;
}

/* A list holding arrays becomes a graph, not a copy: each array is cast to
 * the list's dtype and the levels are stacked, so gradients and lazy values
 * flow through (as MLX stacks the converted elements). Parts without arrays
 * are filled as plain data. The walk of pass 0 has checked the shapes. */
static mk_array *nest_build(nest *s, PyObject *o, int depth) {
    if (PyMkArray_Check(o)) {
        mk_array *c = mk_astype(MKARR(o), s->dtype);
        return c ? c : (mk_array *)mkpy_raise();
    }
    if (!nest_has_array(o)) {
        mk_array *a = mk_array_empty(s->dtype, s->ndim - depth, s->shape + depth);
        if (!a) return (mk_array *)mkpy_raise();
        s->dst = a->buf->data;
        if (nest_walk(s, o, depth, 1) < 0) {
            mk_decref(a);
            return NULL;
        }
        return a;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    mk_array **parts = PyMem_Calloc((size_t)n, sizeof *parts);
    mk_array *r = NULL;
    if (!parts) return (mk_array *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(parts[i] = nest_build(s, PySequence_Fast_GET_ITEM(o, i), depth + 1))) goto done;
    if (!(r = mk_stack((int)n, parts, 0))) mkpy_raise();
done:
    for (Py_ssize_t i = 0; i < n; i++) mk_xdecref(parts[i]);
    PyMem_Free(parts);
    return r;
}

static mk_array *from_nested(PyObject *obj, int dtype) {
    nest s;
    memset(&s, 0, sizeof s);
    s.cls = -1;
    s.arr_dtype = -1;
    if (nest_shape(&s, obj) < 0) return NULL;
    if (nest_walk(&s, obj, 0, 0) < 0) return NULL;
    mk_dtype t;
    if (dtype >= 0)
        t = (mk_dtype)dtype;
    else {
        static const mk_dtype cls_dtype[] = {MK_BOOL, MK_INT32, MK_FLOAT32, MK_COMPLEX64};
        if (s.cls < 0)
            t = s.arr_dtype >= 0 ? (mk_dtype)s.arr_dtype : MK_FLOAT32; /* empty: float32 */
        else {
            t = s.cls == CLS_INT && s.has_int64 ? MK_INT64 : cls_dtype[s.cls];
            if (s.arr_dtype >= 0) t = mk_promote(t, (mk_dtype)s.arr_dtype);
        }
    }
    s.dtype = t;
    s.itemsize = mk_dtype_size(t);
    if (s.arr_dtype >= 0) return nest_build(&s, obj, 0);
    mk_array *a = mk_array_empty(t, s.ndim, s.shape);
    if (!a) return (mk_array *)mkpy_raise();
    s.dst = a->buf->data;
    if (nest_walk(&s, obj, 0, 1) < 0) {
        mk_decref(a);
        return NULL;
    }
    return a;
}

/* Buffer format -> dtype. Returns -1 for unsupported formats. */
static int format_dtype(const char *fmt, Py_ssize_t itemsize) {
    if (!fmt) return MK_UINT8;
    if (fmt[0] == 'b' && strcmp(fmt, "bfloat16") == 0) return MK_BFLOAT16;
    if (*fmt == '<' || *fmt == '=' || *fmt == '@' || *fmt == '|') fmt++;
    if (*fmt == '>' || *fmt == '!') return -1; /* big-endian */
    if (fmt[0] == 'Z') {
        if (fmt[1] == 'f' && fmt[2] == 0) return MK_COMPLEX64;
        if (fmt[1] == 'd' && fmt[2] == 0) return 100; /* complex128: converted */
        return -1;
    }
    if (fmt[0] == 0 || fmt[1] != 0) return -1;
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
/* Copies one row of n elements `stride` bytes apart into contiguous dst. */
static void copy_row(char *dst, const char *src, Py_ssize_t n, Py_ssize_t stride, size_t itemsize) {
    if ((size_t)stride == itemsize) {
        memcpy(dst, src, (size_t)n * itemsize);
        return;
    }
    if (stride == 2 * (Py_ssize_t)itemsize && (itemsize == 4 || itemsize == 8 || itemsize == 2) &&
        ((uintptr_t)dst | (uintptr_t)src) % itemsize == 0) {
        /* every other element (x[:, ::2]): a constant stride the compiler
         * vectorises with shuffles */
        if (itemsize == 4) {
            uint32_t *d = (uint32_t *)dst;
            const uint32_t *s = (const uint32_t *)src;
            for (Py_ssize_t i = 0; i < n; i++) d[i] = s[2 * i];
        } else if (itemsize == 8) {
            uint64_t *d = (uint64_t *)dst;
            const uint64_t *s = (const uint64_t *)src;
            for (Py_ssize_t i = 0; i < n; i++) d[i] = s[2 * i];
        } else {
            uint16_t *d = (uint16_t *)dst;
            const uint16_t *s = (const uint16_t *)src;
            for (Py_ssize_t i = 0; i < n; i++) d[i] = s[2 * i];
        }
        return;
    }
    switch (itemsize) { /* fixed sizes: a load and a store per element, no memcpy call */
    case 1:
        for (Py_ssize_t i = 0; i < n; i++) dst[i] = src[i * stride];
        return;
    case 2:
        for (Py_ssize_t i = 0; i < n; i++) memcpy(dst + 2 * i, src + i * stride, 2);
        return;
    case 4:
        for (Py_ssize_t i = 0; i < n; i++) memcpy(dst + 4 * i, src + i * stride, 4);
        return;
    case 8:
        for (Py_ssize_t i = 0; i < n; i++) memcpy(dst + 8 * i, src + i * stride, 8);
        return;
    default:
        for (Py_ssize_t i = 0; i < n; i++) memcpy(dst + itemsize * (size_t)i, src + i * stride, itemsize);
    }
}

static void copy_block(char *dst, const char *src, int nd, const Py_ssize_t *shp, const Py_ssize_t *str,
                       size_t itemsize);
static void copy_block_seq(char *dst, const char *src, int nd, const Py_ssize_t *shp, const Py_ssize_t *str,
                           size_t itemsize);

/* Copies a strided block into contiguous dst (row-major order). Dimensions
 * of extent 1 are dropped and neighbours that are contiguous with each other
 * merged, so C-contiguous input is one memcpy and other layouts move whole
 * inner rows; the outer dimensions are walked with an index counter. */
static void copy_strided(char *dst, const char *src, int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                         size_t itemsize) {
    Py_ssize_t shp[MK_MAX_NDIM + 1], str[MK_MAX_NDIM + 1];
    int nd = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 1) continue;
        if (nd > 0 && str[nd - 1] == strides[i] * shape[i]) {
            shp[nd - 1] *= shape[i]; /* the previous dim steps exactly over this one: merge */
            str[nd - 1] = strides[i];
            continue;
        }
        shp[nd] = shape[i];
        str[nd] = strides[i];
        nd++;
    }
    if (nd == 0) {
        memcpy(dst, src, itemsize);
        return;
    }
    copy_block(dst, src, nd, shp, str, itemsize);
}

/* Walks merged dims (copy_strided), in parallel over the first for big
 * copies: a strided copy is bound by one core's loads, not by memory. */
typedef struct {
    char *dst;
    const char *src;
    int nd;
    const Py_ssize_t *shp, *str;
    size_t itemsize, outer_bytes;
} block_job;

static void block_range(void *c, int64_t b, int64_t e) {
    block_job *j = c;
    Py_ssize_t shp[MK_MAX_NDIM + 1];
    memcpy(shp, j->shp, (size_t)j->nd * sizeof *shp);
    shp[0] = (Py_ssize_t)(e - b);
    copy_block_seq(j->dst + (size_t)b * j->outer_bytes, j->src + b * j->str[0], j->nd, shp, j->str, j->itemsize);
}

static void copy_block(char *dst, const char *src, int nd, const Py_ssize_t *shp, const Py_ssize_t *str,
                       size_t itemsize) {
    size_t outer_bytes = itemsize;
    for (int i = 1; i < nd; i++) outer_bytes *= (size_t)shp[i];
    if (nd >= 2 && str[nd - 1] != (Py_ssize_t)itemsize && outer_bytes * (size_t)shp[0] >= ((size_t)1 << 21) &&
        mk_pool_threads() > 1) {
        block_job j = {dst, src, nd, shp, str, itemsize, outer_bytes};
        mk_interrupt_begin(); /* no earlier Ctrl-C may make the pool skip slices */
        int64_t grain = (int64_t)(((size_t)1 << 18) / outer_bytes) + 1;
        mk_parallel_for(shp[0], grain, block_range, &j);
        return;
    }
    copy_block_seq(dst, src, nd, shp, str, itemsize);
}

/* A dense copy of n bytes: from 4 MB on through non-temporal stores (mk_copy_stream: no read
 * for ownership of the destination, a third less memory traffic than memcpy, which keeps
 * cached stores up to a large fraction of the last-level cache) and split over the pool (one
 * core's copy loop does not fill the memory bus). */
typedef struct {
    char *dst;
    const char *src;
} dense_job;

#define DENSE_GRAIN ((int64_t)1 << 20)

static void dense_range(void *c, int64_t b, int64_t e) {
    dense_job *j = c;
    mk_copy_stream(j->dst + b * DENSE_GRAIN, j->src + b * DENSE_GRAIN, (size_t)(e - b) * DENSE_GRAIN);
}

static void copy_dense(char *dst, const char *src, size_t n) {
    size_t whole = n / (size_t)DENSE_GRAIN * (size_t)DENSE_GRAIN;
    if (n < ((size_t)4 << 20)) {
        memcpy(dst, src, n);
        return;
    }
    dense_job j = {dst, src};
    mk_interrupt_begin(); /* no earlier Ctrl-C may make the pool skip slices */
    mk_parallel_for((int64_t)(whole / (size_t)DENSE_GRAIN), 1, dense_range, &j);
    memcpy(dst + whole, src + whole, n - whole);
}

static void copy_block_seq(char *dst, const char *src, int nd, const Py_ssize_t *shp, const Py_ssize_t *str,
                           size_t itemsize) {
    Py_ssize_t inner = shp[nd - 1], istride = str[nd - 1];
    size_t rowbytes = (size_t)inner * itemsize;
    Py_ssize_t idx[MK_MAX_NDIM + 1] = {0};
    const char *p = src;
    for (;;) {
        copy_row(dst, p, inner, istride, itemsize);
        dst += rowbytes;
        int d = nd - 2;
        for (; d >= 0; d--) {
            p += str[d];
            if (++idx[d] < shp[d]) break;
            p -= str[d] * shp[d];
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

/* Makes an array from raw memory described by a dtype, shape and byte
 * strides (NULL: C-contiguous), then converts it to `want` (or the default
 * MLX dtype for the source: float64 -> float32). Negative strides are
 * refused, as MLX does. */
static mk_array *from_memory(const void *data, int src_dtype, int ndim, const Py_ssize_t *shape,
                             const Py_ssize_t *strides, Py_ssize_t itemsize, int want) {
    int64_t shp[MK_MAX_NDIM + 1];
    if (ndim > MK_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "Too many dimensions in array initialization.");
        return NULL;
    }
    for (int i = 0; i < ndim; i++) {
        shp[i] = shape[i]; /* negative strides are copied like any other (MLX refuses them) */
        if (shp[i] > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError,
                         "Shape dimension %lld is outside the supported range [-2147483648, 2147483647]. "
                         "MLX currently uses 32-bit integers for shape dimensions.",
                         (long long)shp[i]);
            return NULL;
        }
    }
    int complex128 = src_dtype == 100; /* stored as pairs of doubles, then converted */
    mk_dtype st = complex128 ? MK_COMPLEX64 : (mk_dtype)src_dtype;
    mk_dtype out = want >= 0 ? (mk_dtype)want : (st == MK_FLOAT64 ? MK_FLOAT32 : st);
    if (!complex128) {
        /* C-contiguous input: one memcpy, or one conversion straight from
         * the source (float64 -> float32) when its items are aligned */
        bool dense = true;
        if (strides) {
            Py_ssize_t s = itemsize;
            for (int i = ndim - 1; i >= 0 && dense; i--) {
                if (shape[i] != 1 && strides[i] != s) dense = false;
                s *= shape[i];
            }
        }
        if (dense && (st == out || (uintptr_t)data % (uintptr_t)itemsize == 0)) {
            mk_array *a = mk_array_empty(out, ndim, shp);
            if (!a) return (mk_array *)mkpy_raise();
            if (a->size == 0)
                ;
            else if (st == out)
                copy_dense(a->buf->data, data, (size_t)a->size * (size_t)itemsize);
            else
                mk_cast_table[st][out](data, 1, a->buf->data, 1, a->size);
            return a;
        }
    }
    if (complex128) shp[ndim] = 2;
    mk_array *raw = mk_array_empty(complex128 ? MK_FLOAT64 : st, ndim + complex128, shp);
    if (!raw) return (mk_array *)mkpy_raise();
    Py_ssize_t cstrides[MK_MAX_NDIM];
    if (!strides) {
        Py_ssize_t s = itemsize;
        for (int i = ndim - 1; i >= 0; i--) {
            cstrides[i] = s;
            s *= shape[i];
        }
        strides = cstrides;
    }
    if (raw->size) copy_strided(raw->buf->data, data, ndim, shape, strides, (size_t)itemsize);
    if (complex128) {
        /* pairs of doubles -> complex64 */
        mk_array *c = mk_array_empty(MK_COMPLEX64, ndim, shp); /* shp[ndim] is ignored */
        if (!c) {
            mk_decref(raw);
            return (mk_array *)mkpy_raise();
        }
        const double *d = raw->buf->data;
        mk_c64 *z = c->buf->data;
        for (int64_t i = 0; i < c->size; i++) z[i] = CMPLXF((float)d[2 * i], (float)d[2 * i + 1]);
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

int mkpy_format_dtype(const char *fmt, Py_ssize_t itemsize) { return format_dtype(fmt, itemsize); }

/* A copy of the storage behind a strided view (element strides), returned as
 * an array viewing that copy with the same strides: MLX's DLPack import keeps
 * the producer's layout (a transposed or broadcast source stays so). The
 * dtype is mapped as from_memory maps it. Negative strides are refused. */
mk_array *mkpy_from_strided(const void *data, int src_dtype, int ndim, const int64_t *shape,
                            const int64_t *strides, Py_ssize_t itemsize) {
    int64_t storage = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            storage = 0;
            break;
        }
        if (strides[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "Cannot convert DLPack arrays with negative strides to mlx array.");
            return NULL;
        }
        storage += (shape[i] - 1) * strides[i];
    }
    Py_ssize_t shp[MK_MAX_NDIM], bstr[MK_MAX_NDIM];
    if (ndim > MK_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "Too many dimensions in array initialization.");
        return NULL;
    }
    for (int i = 0; i < ndim; i++) shp[i] = (Py_ssize_t)shape[i], bstr[i] = (Py_ssize_t)(strides[i] * itemsize);
    if (storage > INT32_MAX) /* more than a 1-d storage holds: a dense copy */
        return from_memory(data, src_dtype, ndim, shp, bstr, itemsize, -1);
    Py_ssize_t n = (Py_ssize_t)storage;
    for (int i = 0; i < ndim; i++)
        if (shape[i] > INT32_MAX) /* from_memory's error for the dimension */
            return from_memory(data, src_dtype, ndim, shp, bstr, itemsize, -1);
    mk_array *store = from_memory(data, src_dtype, 1, &n, NULL, itemsize, -1);
    if (!store) return NULL;
    mk_array *v = mk_as_strided(store, ndim, shape, strides, 0);
    mk_decref(store);
    if (!v) return (mk_array *)mkpy_raise();
    if (mkpy_eval(&v, 1) < 0) {
        mk_decref(v);
        return NULL;
    }
    return v;
}

/* ------------------------------------- host memory lent by other libraries */

/* Called when obj's buffer export just failed (its error pending): for an
 * array of ml_dtypes' bfloat16, whose dtype the buffer protocol cannot
 * describe (NumPy: "cannot include dtype 'E' in a buffer"), obj.view("uint16"),
 * which MLX reads as bfloat16 bits, and the error is dropped; otherwise NULL
 * with the export's error. */
static PyObject *bfloat16_bits(PyObject *obj) {
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *dt = PyObject_GetAttrString(obj, "dtype"), *name = NULL, *r = NULL;
    int eq = -1;
    if (dt && (name = PyUnicode_FromString("bfloat16"))) eq = PyObject_RichCompareBool(dt, name, Py_EQ);
    Py_XDECREF(dt);
    Py_XDECREF(name);
    if (eq > 0) r = PyObject_CallMethod(obj, "view", "s", "uint16");
    if (!r) {
        PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        return NULL;
    }
    Py_XDECREF(et), Py_XDECREF(ev), Py_XDECREF(tb);
    return r;
}

static PyObject *name_dlpack;

/* Whether o's type has __dlpack__ (a type attribute: no instance look-up). */
static int has_dlpack(PyObject *o) {
    if (!name_dlpack && !(name_dlpack = PyUnicode_InternFromString("__dlpack__"))) {
        PyErr_Clear();
        return 0;
    }
    return _PyType_Lookup(Py_TYPE(o), name_dlpack) != NULL;
}

/* The libraries whose tensors may refuse __dlpack__ but export through their
 * module's to_dlpack (PyTorch's tensors that require grad), as nanobind's
 * import falls back to it: type's module prefix, to_dlpack's module. */
static const char *const to_dlpack_modules[][2] = {
    {"torch", "torch.utils.dlpack"},
    {"jaxlib", "jax.dlpack"},
    {"tensorflow", "tensorflow.experimental.dlpack"},
};

static PyObject *framework_to_dlpack(PyObject *obj) {
    PyObject *mod = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__module__");
    const char *m = mod && PyUnicode_Check(mod) ? PyUnicode_AsUTF8(mod) : NULL;
    PyObject *r = NULL;
    for (size_t i = 0; m && i < sizeof to_dlpack_modules / sizeof *to_dlpack_modules; i++) {
        if (strncmp(m, to_dlpack_modules[i][0], strlen(to_dlpack_modules[i][0]))) continue;
        PyObject *pkg = PyImport_ImportModule(to_dlpack_modules[i][1]);
        if (pkg) r = PyObject_CallMethod(pkg, "to_dlpack", "O", obj);
        Py_XDECREF(pkg);
        break;
    }
    Py_XDECREF(mod);
    if (!r) PyErr_Clear();
    return r;
}

/* DLPack dtype -> mkpy dtype (100: complex128, converted), -1 if none. */
static int dl_dtype(mk_DLDataType t) {
    if (t.lanes != 1) return -1;
    switch (t.code) {
    case DL_BOOL: return t.bits == 8 ? MK_BOOL : -1;
    case DL_UINT: return t.bits == 8 ? MK_UINT8 : t.bits == 16 ? MK_UINT16 : t.bits == 32 ? MK_UINT32 : t.bits == 64 ? MK_UINT64 : -1;
    case DL_INT: return t.bits == 8 ? MK_INT8 : t.bits == 16 ? MK_INT16 : t.bits == 32 ? MK_INT32 : t.bits == 64 ? MK_INT64 : -1;
    case DL_FLOAT: return t.bits == 16 ? MK_FLOAT16 : t.bits == 32 ? MK_FLOAT32 : t.bits == 64 ? MK_FLOAT64 : -1;
    case DL_BFLOAT: return t.bits == 16 ? MK_BFLOAT16 : -1;
    case DL_COMPLEX: return t.bits == 64 ? MK_COMPLEX64 : t.bits == 128 ? 100 : -1;
    }
    return -1;
}

/* Reads a "dltensor" or "dltensor_versioned" capsule, left unconsumed (its
 * destructor calls the producer's deleter when l->owner, which takes the
 * reference, is released). MLX's messages for what it cannot import. */
static int lend_capsule(PyObject *cap, mkpy_lent *l) {
    mk_DLTensor *t = NULL;
    l->owner = cap;
    if (PyCapsule_IsValid(cap, "dltensor"))
        t = &((mk_DLManagedTensor *)PyCapsule_GetPointer(cap, "dltensor"))->dl_tensor;
    else if (PyCapsule_IsValid(cap, "dltensor_versioned"))
        t = &((mk_DLManagedTensorVersioned *)PyCapsule_GetPointer(cap, "dltensor_versioned"))->dl_tensor;
    if (!t) {
        PyErr_SetString(PyExc_ValueError, "[convert] Cannot convert array to mlx: not a DLPack capsule (or one already used).");
        return -1;
    }
    if (t->device.device_type != DL_CPU) {
        PyErr_SetString(PyExc_ValueError, t->device.device_type == DL_CUDA || t->device.device_type == DL_CUDA_MANAGED
                                              ? "[convert] CUDA import is not supported."
                                              : "[convert] Unsupported device.");
        return -1;
    }
    l->src = dl_dtype(t->dtype);
    if (l->src < 0) {
        PyErr_SetString(PyExc_ValueError, "[convert] Cannot convert array to mlx.");
        return -1;
    }
    if (t->ndim < 0 || t->ndim > MK_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "Too many dimensions in array initialization.");
        return -1;
    }
    l->ndim = t->ndim;
    l->itemsize = t->dtype.bits / 8;
    l->data = (const char *)t->data + t->byte_offset;
    Py_ssize_t s = l->itemsize;
    for (int k = l->ndim - 1; k >= 0; k--) {
        l->shape[k] = (Py_ssize_t)t->shape[k];
        l->strides[k] = t->strides ? (Py_ssize_t)t->strides[k] * l->itemsize : s;
        s *= l->shape[k];
    }
    return 1;
}

/* Through the buffer protocol, held by a memoryview. */
static int lend_buffer(PyObject *obj, mkpy_lent *l) {
    PyObject *mv = PyMemoryView_FromObject(obj);
    int bf16 = 0;
    if (!mv) {
        PyObject *bits = bfloat16_bits(obj);
        if (!bits) return -1; /* the export's error */
        mv = PyMemoryView_FromObject(bits);
        Py_DECREF(bits);
        if (!mv) return -1;
        bf16 = 1;
    }
    l->owner = mv;
    Py_buffer *v = PyMemoryView_GET_BUFFER(mv);
    l->src = bf16 ? MK_BFLOAT16 : format_dtype(v->format, v->itemsize);
    if (l->src < 0) {
        PyErr_Format(PyExc_RuntimeError, "Cannot convert a buffer of format '%s' to an mkpy array.",
                     v->format ? v->format : "B");
        return -1;
    }
    if (v->ndim > MK_MAX_NDIM) {
        PyErr_SetString(PyExc_ValueError, "Too many dimensions in array initialization.");
        return -1;
    }
    l->ndim = v->ndim;
    l->itemsize = v->itemsize;
    l->data = v->buf;
    Py_ssize_t s = l->itemsize;
    for (int k = l->ndim - 1; k >= 0; k--) {
        l->shape[k] = v->shape ? v->shape[k] : v->len / v->itemsize;
        l->strides[k] = v->strides ? v->strides[k] : s;
        s *= l->shape[k];
    }
    return 1;
}

int mkpy_lend(PyObject *obj, mkpy_lent *l) {
    memset(l, 0, sizeof *l);
    int rc;
    if (PyCapsule_CheckExact(obj)) {
        Py_INCREF(obj);
        rc = lend_capsule(obj, l);
    } else if (PyObject_CheckBuffer(obj)) {
        rc = lend_buffer(obj, l);
    } else if (has_dlpack(obj)) {
        PyObject *cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
        if (!cap) {
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            if ((cap = framework_to_dlpack(obj))) {
                Py_XDECREF(et), Py_XDECREF(ev), Py_XDECREF(tb);
            } else {
                PyErr_Restore(et, ev, tb); /* the producer's own error */
                return -1;
            }
        }
        rc = lend_capsule(cap, l);
    } else {
        return 0;
    }
    if (rc < 0) mkpy_lent_release(l);
    return rc;
}

void mkpy_lent_release(mkpy_lent *l) { Py_CLEAR(l->owner); }

/* Adopted memory is let go of by whichever thread drops the last array,
 * maybe without the GIL: the decref then waits for mkpy_flush_deferred. */
static void adopted_release(mk_buffer *b) { mkpy_defer_decref((PyObject *)b->owner); }

mk_array *mkpy_adopt(PyObject *obj, int dtype) {
    mkpy_lent l;
    int rc = mkpy_lend(obj, &l);
    if (rc <= 0) return NULL;
    mk_dtype src = l.src == 100 ? MK_COMPLEX64 : l.src == MK_FLOAT64 ? MK_FLOAT32 : (mk_dtype)l.src; /* as MLX maps them */
    int64_t shape[MK_MAX_NDIM], strides[MK_MAX_NDIM], storage = 1;
    mk_array *a = NULL;
    mk_buffer *b;
    if (dtype >= 0 && (mk_dtype)dtype != src) {
        PyErr_SetString(PyExc_ValueError, "[convert] Cannot convert array to the requested dtype without a copy.");
        goto done;
    }
    /* the bytes are read as they are: the element sizes must match (float64
     * and complex128, read as float32 and complex64, need a copy), and every
     * element must be aligned to its size */
    bool fits = (size_t)l.itemsize == mk_dtype_size(src) && (uintptr_t)l.data % (uintptr_t)l.itemsize == 0;
    for (int k = 0; k < l.ndim; k++) {
        shape[k] = l.shape[k];
        if (l.shape[k] == 0) storage = 0;
        if (l.strides[k] < 0 && l.shape[k] > 1) {
            PyErr_SetString(PyExc_ValueError, "Cannot convert DLPack arrays with negative strides to mlx array.");
            goto done;
        }
        if (l.shape[k] > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError,
                         "Shape dimension %lld is outside the supported range [-2147483648, 2147483647]. "
                         "MLX currently uses 32-bit integers for shape dimensions.",
                         (long long)l.shape[k]);
            goto done;
        }
        if (l.shape[k] <= 1) { /* its stride is never used (NumPy may leave any value there) */
            strides[k] = 0;
            continue;
        }
        if (l.strides[k] % l.itemsize) fits = false;
        strides[k] = l.strides[k] / l.itemsize;
    }
    if (!fits) {
        PyErr_SetString(PyExc_ValueError, "[convert] Cannot import a CPU array without a copy.");
        goto done;
    }
    for (int k = 0; k < l.ndim && storage; k++) storage += (shape[k] - 1) * strides[k];
    if (!(b = mk_buffer_foreign((void *)l.data, (size_t)storage * (size_t)l.itemsize, adopted_release, l.owner))) {
        mkpy_raise();
        goto done;
    }
    l.owner = NULL; /* the buffer's now */
    if (!(a = mk_array_over(b, src, l.ndim, shape, strides))) mkpy_raise();
done:
    mkpy_lent_release(&l);
    return a;
}

/* A copy of what obj lends through DLPack, converted to dtype (< 0: MLX's
 * default for the source). */
static mk_array *from_dlpack_copy(PyObject *obj, int dtype) {
    mkpy_lent l;
    if (mkpy_lend(obj, &l) < 0) return NULL;
    mk_array *a = from_memory(l.data, l.src, l.ndim, l.shape, l.strides, l.itemsize, dtype);
    mkpy_lent_release(&l);
    return a;
}

static mk_array *from_buffer(PyObject *obj, int dtype) {
    Py_buffer view;
    int bf16 = 0;
    if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) < 0) {
        PyObject *bits = bfloat16_bits(obj);
        if (!bits) return NULL;
        int rc = PyObject_GetBuffer(bits, &view, PyBUF_RECORDS_RO);
        Py_DECREF(bits); /* the view holds the exporter */
        if (rc < 0) return NULL;
        bf16 = 1;
    }
    int src = bf16 ? MK_BFLOAT16 : format_dtype(view.format, view.itemsize);
    mk_array *a = NULL;
    if (src < 0)
        PyErr_Format(PyExc_RuntimeError, "Cannot convert a buffer of format '%s' to an mkpy array.",
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
    if (!shape_o || !ts_o || !data_o || !PyTuple_Check(shape_o) || !PyUnicode_Check(ts_o) || !PyTuple_Check(data_o) ||
        PyTuple_GET_SIZE(data_o) < 1) {
        PyErr_SetString(PyExc_TypeError, "Unsupported __array_interface__.");
        return NULL;
    }
    const char *ts = PyUnicode_AsUTF8(ts_o);
    if (!ts) return NULL;
    int src = typestr_dtype(ts);
    if (src < 0) {
        PyErr_Format(PyExc_RuntimeError, "Cannot convert an array of type '%s' to an mkpy array.", ts);
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
    if (have_strides) {
        if (!PyTuple_Check(strides_o) || PyTuple_GET_SIZE(strides_o) != ndim) {
            PyErr_SetString(PyExc_TypeError, "Unsupported __array_interface__.");
            return NULL;
        }
        for (Py_ssize_t i = 0; i < ndim; i++) {
            strides[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides_o, i));
            if (strides[i] == -1 && PyErr_Occurred()) return NULL;
        }
    }
    void *ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data_o, 0));
    if (!ptr && PyErr_Occurred()) return NULL;
    return from_memory(ptr, src, (int)ndim, shape, have_strides ? strides : NULL, atoi(ts + 2), dtype);
}

/* A Python scalar as a 0-d array of dtype t (or MLX's default for it). */
static mk_array *from_scalar(PyObject *obj, int dtype) {
    mk_dtype t;
    int cls = PyBool_Check(obj) ? CLS_BOOL : PyLong_Check(obj) ? CLS_INT : PyFloat_Check(obj) ? CLS_FLOAT : CLS_COMPLEX;
    if (dtype >= 0)
        t = (mk_dtype)dtype;
    else if (cls == CLS_INT) {
        int64_t v;
        if (int_value(obj, &v) < 0) return NULL;
        t = (v >= INT32_MIN && v <= INT32_MAX) ? MK_INT32 : MK_INT64;
    } else {
        static const mk_dtype cls_dtype[] = {MK_BOOL, MK_INT32, MK_FLOAT32, MK_COMPLEX64};
        t = cls_dtype[cls];
    }
    mk_array *a = mk_array_empty(t, 0, NULL);
    if (!a) return (mk_array *)mkpy_raise();
    if (store_scalar(obj, cls, 0, t, a->buf->data) < 0) {
        mk_decref(a);
        return NULL;
    }
    return a;
}

/* Everything but nested sequences: arrays, scalars, __mlx_array__,
 * buffers and __array_interface__. NULL without an error set: none of these. */
static mk_array *from_non_sequence(PyObject *obj, int dtype) {
    mk_array *a = NULL;
    if (is_plain_buffer_type(Py_TYPE(obj))) return from_buffer(obj, dtype);
    if (PyMkArray_Check(obj) || (!mkpy_is_scalar(obj) && HAS_MLX_ARRAY(obj))) {
        if (PyMkArray_Check(obj)) {
            a = MKARR(obj);
            mk_incref(a);
        } else if (!(a = from_mlx_array_attr(obj)))
            return NULL;
        if (dtype >= 0 && (mk_dtype)dtype != a->dtype) {
            mk_array *c = mk_astype(a, (mk_dtype)dtype);
            mk_decref(a);
            return c ? c : (mk_array *)mkpy_raise();
        }
        return a;
    }
    if (mkpy_is_scalar(obj)) return from_scalar(obj, dtype);
    if (PyObject_CheckBuffer(obj)) {
        note_plain_buffer_type(obj);
        return from_buffer(obj, dtype);
    }
    /* DLPack (PyTorch, JAX, CuPy on the host, a capsule), as nanobind's ndarray */
    if (PyCapsule_CheckExact(obj) || has_dlpack(obj)) return from_dlpack_copy(obj, dtype);
    if (!PyUnicode_Check(obj) && !PyList_Check(obj) && !PyTuple_Check(obj)) {
        PyObject *iface = PyObject_GetAttrString(obj, "__array_interface__");
        if (iface) {
            a = from_array_interface(iface, dtype);
            Py_DECREF(iface);
            return a;
        }
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
        PyErr_Clear();
    }
    return NULL;
}

mk_array *mkpy_to_array(PyObject *obj, int dtype) {
    if (PyList_Check(obj) || PyTuple_Check(obj)) return from_nested(obj, dtype);
    mk_array *a = from_non_sequence(obj, dtype);
    return a || PyErr_Occurred() ? a : invalid_type(obj);
}

/* MLX's last resort for an operand (nanobind's std::complex caster, tried after arrays and
 * buffers): any object that PyComplex_AsCComplex takes, through __complex__, __float__ or
 * __index__ (a Fraction, a Decimal, a unittest.mock.MagicMock), is a complex64 scalar. */
static int has_complex_protocol(PyObject *o) {
    PyNumberMethods *nb = Py_TYPE(o)->tp_as_number;
    if (nb && (nb->nb_float || nb->nb_index)) return 1;
    PyObject *m = PyObject_GetAttrString((PyObject *)Py_TYPE(o), "__complex__");
    if (!m) PyErr_Clear();
    Py_XDECREF(m);
    return m != NULL;
}

static mk_array *from_complex_protocol(PyObject *o) {
    if (!has_complex_protocol(o)) return NULL;
    Py_complex z = PyComplex_AsCComplex(o);
    if (z.real == -1.0 && PyErr_Occurred()) {
        PyErr_Clear(); /* as the caster: the object is then of an invalid type */
        return NULL;
    }
    PyObject *c = PyComplex_FromCComplex(z);
    mk_array *a = c ? from_scalar(c, MK_COMPLEX64) : NULL;
    Py_XDECREF(c);
    return a;
}

mk_array *mkpy_to_array_arg(PyObject *obj, int dtype) {
    mk_array *a = from_non_sequence(obj, dtype);
    if (!a && !PyErr_Occurred() && !PyUnicode_Check(obj) && !PyList_Check(obj) && !PyTuple_Check(obj))
        a = from_complex_protocol(obj);
    return a || PyErr_Occurred() ? a : invalid_type(obj);
}

int mkpy_is_operand(PyObject *o) {
    if (PyMkArray_Check(o) || mkpy_is_scalar(o)) return 1;
    if (PyUnicode_Check(o) || PyList_Check(o) || PyTuple_Check(o) || o == Py_None) return 0;
    if (PyObject_CheckBuffer(o) || PyCapsule_CheckExact(o) || has_dlpack(o) || HAS_MLX_ARRAY(o) ||
        HAS_ARRAY_INTERFACE(o))
        return 1;
    /* as nanobind's caster, an operand whose conversion fails is of an invalid type */
    if (!has_complex_protocol(o)) return 0;
    Py_complex z = PyComplex_AsCComplex(o);
    if (z.real == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

mk_array *mkpy_to_array_weak(PyObject *obj, int partner) {
    if (partner < 0 || is_mlx_array(obj)) return mkpy_to_array_arg(obj, -1);
    mk_dtype p = (mk_dtype)partner;
    if (PyBool_Check(obj)) return from_scalar(obj, p);
    if (PyLong_Check(obj)) {
        int64_t v;
        if (int_value(obj, &v) < 0) return NULL;
        if (mk_is_integral(p) && mk_dtype_size(p) < 8) {
            int64_t lo, hi;
            if (mk_is_unsigned(p))
                lo = 0, hi = (int64_t)((UINT64_C(1) << (8 * mk_dtype_size(p))) - 1);
            else
                lo = -(INT64_C(1) << (8 * mk_dtype_size(p) - 1)), hi = (INT64_C(1) << (8 * mk_dtype_size(p) - 1)) - 1;
            if (v < lo || v > hi) {
                PyErr_Format(PyExc_ValueError, "Converting %lld to %s would result in overflow.", (long long)v,
                             mk_dtype_name(p));
                return NULL;
            }
        }
        return from_scalar(obj, mk_weak_int_dtype(p));
    }
    if (PyFloat_Check(obj)) return from_scalar(obj, mk_weak_float_dtype(p));
    if (PyComplex_Check(obj)) return from_scalar(obj, MK_COMPLEX64);
    /* NumPy arrays and other buffers take the array's dtype, as in MLX */
    return mkpy_to_array_arg(obj, p);
}

int mkpy_to_arrays(PyObject *a, PyObject *b, mk_array **out_a, mk_array **out_b) {
    int a_arr = is_mlx_array(a), b_arr = is_mlx_array(b);
    *out_a = *out_b = NULL;
    if (a_arr && b_arr) {
        *out_a = mkpy_to_array_arg(a, -1);
        *out_b = *out_a ? mkpy_to_array_arg(b, -1) : NULL;
    } else if (a_arr) {
        *out_a = mkpy_to_array_arg(a, -1);
        *out_b = *out_a ? mkpy_to_array_weak(b, (*out_a)->dtype) : NULL;
    } else if (b_arr) {
        *out_b = mkpy_to_array_arg(b, -1);
        *out_a = *out_b ? mkpy_to_array_weak(a, (*out_b)->dtype) : NULL;
    } else {
        *out_a = mkpy_to_array_arg(a, -1);
        *out_b = *out_a ? mkpy_to_array_arg(b, -1) : NULL;
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
    mk_incref(a); /* lent by a Python object another thread may rebind */
    PyObject *r = mkpy_eval(&a, 1) < 0 ? NULL : scalar_at(a->dtype, mk_data(a));
    mk_decref(a);
    return r;
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
    mk_incref(a);
    PyObject *r = mkpy_eval(&a, 1) < 0 ? NULL : tolist_rec(a, 0, mk_data(a), mk_dtype_size(a->dtype));
    mk_decref(a);
    return r;
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
            if (nm[0] == key[0] && strcmp(nm, key) == 0) { /* the first letter first: a call's hot loop */
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
    /* the op's stream: its nodes record it (py_stream.c); DLPack's `stream`
     * is a device queue handle, not one of MLX's streams */
    if (strcmp(fname, "__dlpack__") != 0)
        for (int i = 0; i < n; i++)
            if (out[i] && out[i] != Py_None && names[i][names[i][0] == '*'] == 's' &&
                !strcmp(names[i][0] == '*' ? names[i] + 1 : names[i], "stream") &&
                mkpy_stream_arg(fname, out[i]) < 0)
                return -1;
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

int mkpy_int32_value(int64_t v, int *out) {
    /* MLX's axes and counts are C ints: never truncated */
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError,
                     "Integer value %lld is outside the supported range [-2147483648, 2147483647].", (long long)v);
        return -1;
    }
    *out = (int)v;
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

/* A shape: MLX's dims are C ints, so values beyond int32 raise nanobind's
 * OverflowError naming the value (check32), as MLX's Shape caster does. */
static int parse_int_list(PyObject *obj, int *ndim, int64_t *shape, int check32);

int mkpy_parse_shape(PyObject *obj, int *ndim, int64_t *shape) { return parse_int_list(obj, ndim, shape, 1); }

int mkpy_parse_strides(PyObject *obj, int *ndim, int64_t *strides) { return parse_int_list(obj, ndim, strides, 0); }

static int parse_int_list(PyObject *obj, int *ndim, int64_t *shape, int check32) {
    int dummy;
    if (PyLong_Check(obj) || (PyIndex_Check(obj) && !PyMkArray_Check(obj))) {
        *ndim = 1;
        if (mkpy_parse_int(obj, &shape[0]) < 0) return -1;
        return check32 ? mkpy_int32_value(shape[0], &dummy) : 0;
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
        if (mkpy_parse_int(PySequence_Fast_GET_ITEM(seq, i), &shape[i]) < 0 ||
            (check32 && mkpy_int32_value(shape[i], &dummy) < 0)) {
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
    for (int i = 0; i < n; i++)
        if (mkpy_int32_value(shape[i], &axes[i]) < 0) return -1;
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
