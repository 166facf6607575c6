/* The binding layer's shared declarations: the array and dtype types,
 * conversions between Python objects and core arrays, argument parsing and
 * error translation. Each csrc/python/py_*.c file adds module functions
 * through a PyMethodDef table listed in module.c. */
#ifndef MKPY_H
#define MKPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "core/array.h"
#include "core/ops.h"
#include "core/stream.h"

/* ---------------------------------------------------------------- types */

typedef struct {
    PyObject_HEAD
    mk_array *arr;
    Py_ssize_t exports; /* live buffer-protocol views */
    PyObject *weakreflist; /* weak references to the array (as MLX's arrays allow) */
} PyMkArray;

typedef struct {
    PyObject_HEAD
    mk_dtype dtype;
} PyMkDtype;

typedef struct {
    PyObject_HEAD
    mk_category cat;
} PyMkCategory;

extern PyTypeObject PyMkArray_Type;
extern PyTypeObject PyMkDtype_Type;
extern PyTypeObject PyMkCategory_Type;

#define PyMkArray_Check(o) PyObject_TypeCheck(o, &PyMkArray_Type)
#define PyMkDtype_Check(o) PyObject_TypeCheck(o, &PyMkDtype_Type)
#define MKARR(o) (((PyMkArray *)(o))->arr)

/* The dtype object for a dtype (borrowed, lives as long as the module). */
PyObject *mkpy_dtype_object(mk_dtype t);
PyObject *mkpy_category_object(mk_category c);

/* -------------------------------------------------------------- errors */

/* Raises the core's pending error as the matching Python exception and
 * returns NULL. */
PyObject *mkpy_raise(void);

/* ---------------------------------------------------------- conversion */

/* Wraps a new core reference in a Python array (steals it). NULL in: raises
 * the core error. */
PyObject *mkpy_wrap(mk_array *a);
/* A list of arrays from n core references (stolen). */
PyObject *mkpy_wrap_list(mk_array **arrs, int n);

/* Any array-like (array, scalar, nested sequence, buffer, __array_interface__)
 * to a new core reference. dtype < 0: inferred as MLX does. */
mk_array *mkpy_to_array(PyObject *obj, int dtype);
/* An op argument (MLX's ScalarOrArray): an array, a Python scalar, a buffer
 * (NumPy array or scalar, bytes, memoryview), __array_interface__ or
 * __mlx_array__. Lists and tuples are refused as MLX's ops refuse them
 * ("Invalid type list received in array initialization."); None is a
 * TypeError. dtype >= 0 converts to it. */
mk_array *mkpy_to_array_arg(PyObject *obj, int dtype);
/* Whether MLX's array operators accept obj as the other operand. */
int mkpy_is_operand(PyObject *obj);
/* The type name MLX prints in messages: "list", "float32", "__main__.Foo". */
PyObject *mkpy_type_name(PyObject *obj);
/* For binary ops: an array stays as is; a Python scalar takes the weak dtype
 * it gets next to an array of dtype `partner` (partner < 0: no partner),
 * checking that an int fits a small integer dtype ("Converting 300 to int8
 * would result in overflow."); a buffer is converted to `partner`. */
mk_array *mkpy_to_array_weak(PyObject *obj, int partner);
/* Converts a pair as MLX's to_arrays: scalars are weakly typed against the
 * other operand when it is an array. Returns 0 or -1. */
int mkpy_to_arrays(PyObject *a, PyObject *b, mk_array **out_a, mk_array **out_b);
int mkpy_is_scalar(PyObject *obj);
/* MLX's to_array(scalar_or_array, dtype) (py_create.c): a Python scalar takes
 * dtype where it can hold it (ints that do not fit raise, floats stay
 * float32 unless dtype is floating, bool dtypes make ints int32); arrays are
 * returned unchanged; lists are refused. dtype < 0: the scalar's own dtype. */
mk_array *mkpy_to_array_dtype(PyObject *obj, int dtype);

/* Evaluates with the GIL released; raises on failure. Returns 0 or -1. */
int mkpy_eval(mk_array *const *arrs, int n);

/* C code never calls Python while the GIL is released (py_defer.c): lines
 * for sys.stdout, RuntimeWarnings and decrefs are kept, and made by
 * mkpy_flush_deferred, which every binding that released the GIL around
 * evaluation or kernel-layer work calls once it holds the GIL again. */
void mkpy_defer_print(const char *text);
void mkpy_defer_warning(const char *text);
void mkpy_defer_decref(PyObject *obj); /* at once when the GIL is held */
void mkpy_flush_deferred(void);
/* Evaluated array to a Python scalar / nested list. */
PyObject *mkpy_item(mk_array *a);
PyObject *mkpy_tolist(mk_array *a);

/* ------------------------------------------------------ argument parsing */

/* Maps positional and keyword arguments onto `names` (NULL-terminated);
 * names before `npos` may be given positionally; a name starting with '*'
 * is keyword-only (the '*' is not part of the name). Missing arguments are
 * left NULL; `nrequired` first names must be present. Borrowed references. */
int mkpy_parse(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
               const char *const *names, int nrequired, PyObject **out);

int mkpy_parse_dtype(PyObject *obj, mk_dtype *out);    /* a Dtype object */
int mkpy_parse_shape(PyObject *obj, int *ndim, int64_t *shape); /* int or sequence of ints */
int mkpy_parse_strides(PyObject *obj, int *ndim, int64_t *strides); /* the same, int64 values */
/* v as a C int, or an OverflowError (MLX's wording) when it does not fit. */
int mkpy_int32_value(int64_t v, int *out);
/* None: *naxes = -1; int or sequence of ints. */
int mkpy_parse_axes(PyObject *obj, int *naxes, int *axes);
int mkpy_parse_int(PyObject *obj, int64_t *out);
int mkpy_parse_bool(PyObject *obj, int dflt, int *out);

/* Raises nanobind's "fname(): incompatible function arguments" TypeError,
 * listing the supported signatures (sigs) and the types of the call's
 * arguments (py_create.c). Returns NULL. */
PyObject *mkpy_bad_call(const char *fname, const char *sigs, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames);

/* Calls a module-level function by name with self first, for array methods
 * that are the same as an op (x.sum(...) is mx.sum(x, ...)). */
PyObject *mkpy_forward(const char *name, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames);

/* The module object (set once at import). */
extern PyObject *mkpy_module;

/* --------------------------------------------------- function tables */

extern PyMethodDef mkpy_ops_functions[];     /* py_ops.c */
extern PyMethodDef mkpy_device_functions[];  /* py_device.c */
extern PyMethodDef mkpy_reduce_functions[];  /* py_reduce.c */
extern PyMethodDef mkpy_shape_functions[];   /* py_shape.c */
extern PyMethodDef mkpy_create_functions[];  /* py_create.c */
extern PyMethodDef mkpy_random_functions[];  /* py_random.c: the mkpy.random submodule */
extern PyMethodDef mkpy_metal_functions[];   /* py_device.c: the mkpy.metal submodule */
extern PyMethodDef mkpy_fast_functions[];    /* py_fast.c: the mkpy.fast submodule */
extern PyMethodDef mkpy_fastops_functions[]; /* py_fastops.c: rms_norm, layer_norm, rope, sdpa (mkpy.fast) */
extern PyMethodDef mkpy_linalg_functions[];  /* py_linalg.c: matmul, addmm, inner, outer, tensordot */
extern PyMethodDef mkpy_sort_functions[];    /* py_sort.c: sort, argsort, topk, cumulative ops */
extern PyMethodDef mkpy_indexops_functions[]; /* py_indexops.c: take, take_along_axis, advanced indexing */
extern PyMethodDef mkpy_io_functions[];       /* py_io.c: save, load, savez, save_safetensors */
extern PyMethodDef mkpy_linalg_ns_functions[]; /* py_linalg_ns.c: the mkpy.linalg submodule */
extern PyMethodDef mkpy_einsum_functions[];    /* py_linalg_ns.c: einsum, einsum_path */
extern PyMethodDef mkpy_quant_functions[];    /* py_quant.c: quantize, dequantize, quantized_matmul, gather_mm... */

/* isclose as a lazy node, from (a, b, rtol, atol, *, equal_nan) arguments
 * (py_ops.c); NULL with the Python error set. */
mk_array *mkpy_isclose_args(const char *fname, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

/* Basic and advanced indexing (py_index.c). */
PyObject *mkpy_getitem(PyMkArray *self, PyObject *key);
/* x[key] = value (replaces self's array, as MLX), and the x.at object
 * (py_indexops.c). */
int mkpy_setitem(PyMkArray *self, PyObject *key, PyObject *value);
PyObject *mkpy_array_at(PyObject *self);
/* Adds the ArrayAt type to the module (module.c). */
int mkpy_indexops_init(PyObject *m);

/* 1 when a stream argument (None: the default device; a Stream, Device or
 * DeviceType) names the GPU, 0 for the CPU, -1 with the error set or *bad set
 * when it is none of those (py_linalg_ns.c). */
int mkpy_stream_is_gpu(PyObject *s, bool *bad);

/* A stream= argument of an op (py_stream.c): resolves it as MLX's
 * to_stream and makes it the stream the op's nodes record, until the call
 * returns. NULL and None leave the current stream. 0, or -1 with a
 * TypeError (not a stream or device) or the error. Only inside a stream
 * binding's call (MKPY_STREAM_BINDING): elsewhere a SystemError, as the
 * override would outlive the call. mkpy_parse calls it for an argument
 * named "stream". */
int mkpy_stream_arg(const char *fname, PyObject *stream);
/* The stream a Stream/Device/DeviceType argument names (None: the default
 * stream of the default device). 0, or -1 with the error set (py_stream.c). */
int mkpy_stream_resolve(const char *fname, PyObject *stream, mk_stream *out);

/* Host memory another library lends, as nanobind's ndarray reads it: a
 * "dltensor" capsule, the buffer protocol (NumPy's arrays of ml_dtypes'
 * bfloat16 through a uint16 view), or __dlpack__ (with the library's
 * to_dlpack when __dlpack__ refuses, as for PyTorch's tensors that require
 * grad). CPU memory only; strides in bytes. */
typedef struct {
    PyObject *owner; /* holds the memory while alive: a memoryview or the (unused) capsule */
    const char *data;
    int src; /* dtype (100: complex128) */
    int ndim;
    Py_ssize_t itemsize;
    Py_ssize_t shape[MK_MAX_NDIM], strides[MK_MAX_NDIM];
} mkpy_lent;
/* 1: lent; 0: obj lends nothing (no error); -1: error (MLX's messages). */
int mkpy_lend(PyObject *obj, mkpy_lent *l);
void mkpy_lent_release(mkpy_lent *l);
/* asarray(obj, copy=False) as a Mac's MLX adopts host memory: an array over
 * obj's own memory, never copied, never recycled or donated, released when
 * the last array lets go. dtype < 0: MLX's dtype for the source. NULL with
 * MLX's ValueError when that needs a copy (another dtype or element size, a
 * misaligned element), NULL without an error when obj lends nothing. */
mk_array *mkpy_adopt(PyObject *obj, int dtype);

/* Buffer-protocol format -> dtype (100: complex128, converted), -1 if none;
 * and a copy of a strided source that keeps its strides (py_convert.c). */
int mkpy_format_dtype(const char *fmt, Py_ssize_t itemsize);
mk_array *mkpy_from_strided(const void *data, int src_dtype, int ndim, const int64_t *shape,
                            const int64_t *strides, Py_ssize_t itemsize);

/* ------------------------------------------------------ stream bindings */

#include "core/stream.h"

/* A binding that takes MLX's stream= argument is defined as
 *
 *     MKPY_STREAM_BINDING(py_add)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
 *     {
 *         ... mkpy_parse(..., names with "*stream", ...) ...
 *     }
 *
 * py_add is the METH_FASTCALL | METH_KEYWORDS function of the method table
 * and the body becomes py_add_impl (Argument Clinic's pattern). py_add opens
 * a stream call (core/stream.h), runs the body, in which mkpy_parse may make
 * stream= the current-stream override (every node the op makes records it),
 * and restores the override it found when the body returns, by any path.
 * A binding that only forwards to another one (x.sum(...) is mkpy.sum) or
 * takes no stream= needs no wrapper. */
#define MKPY_STREAM_BINDING(fn)                                                                        \
    static PyObject *fn##_impl(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);                  \
    static PyObject *fn(PyObject *self_, PyObject *const *args_, Py_ssize_t nargs_, PyObject *kwnames_) { \
        mk_stream saved_ = mk_stream_call_begin();                                                     \
        PyObject *r_ = fn##_impl(self_, args_, nargs_, kwnames_);                                      \
        mk_stream_call_end(saved_);                                                                    \
        return r_;                                                                                     \
    }                                                                                                  \
    static PyObject *fn##_impl

#endif
