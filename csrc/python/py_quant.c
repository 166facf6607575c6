/* Module functions of quantisation (core/ops_quant.c): quantize, dequantize,
 * quantized_matmul, gather_qmm, gather_mm, segmented_mm, to_fp8, from_fp8,
 * with MLX's signatures. Array operands must be arrays (as MLX's). */
#include "mkpy.h"
#include "../core/ops_quant.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

#define SIG_QUANTIZE                                                                                   \
    "    1. quantize(w: array, /, group_size: int | None = None, bits: int | None = None, mode: str = " \
    "'affine', *, global_scale: array | None = None, stream: StreamOrDevice = None) -> tuple[array, "  \
    "array, array]"
#define SIG_DEQUANTIZE                                                                                 \
    "    1. dequantize(w: array, /, scales: array, biases: array | None = None, group_size: int | None " \
    "= None, bits: int | None = None, mode: str = 'affine', global_scale: array | None = None, dtype: "  \
    "Dtype | None = None, *, stream: StreamOrDevice = None) -> array"
#define SIG_QMM                                                                                        \
    "    1. quantized_matmul(x: array, w: array, /, scales: array, biases: array | None = None, "       \
    "transpose: bool = True, group_size: int | None = None, bits: int | None = None, mode: str = "      \
    "'affine', *, stream: StreamOrDevice = None) -> array"
#define SIG_GQMM                                                                                       \
    "    1. gather_qmm(x: array, w: array, /, scales: array, biases: array | None = None, lhs_indices: " \
    "array | None = None, rhs_indices: array | None = None, transpose: bool = True, group_size: int | "  \
    "None = None, bits: int | None = None, mode: str = 'affine', *, sorted_indices: bool = False, "      \
    "stream: StreamOrDevice = None) -> array"
#define SIG_GMM                                                                                        \
    "    1. gather_mm(a: array, b: array, /, lhs_indices: array, rhs_indices: array, *, "               \
    "sorted_indices: bool = False, stream: StreamOrDevice = None) -> array"
#define SIG_SEGMM                                                                                      \
    "    1. segmented_mm(a: array, b: array, /, segments: array, *, stream: StreamOrDevice = None) -> "  \
    "array"
#define SIG_TOFP8 "    1. to_fp8(x: array, *, stream: StreamOrDevice = None) -> array"
#define SIG_FROMFP8                                                                                    \
    "    1. from_fp8(x: array, dtype: Dtype = bfloat16, *, stream: StreamOrDevice = None) -> array"

/* An optional array argument (NULL or None: absent). 0 ok, -1 not an array. */
static int opt_array(PyObject *o, mk_array **out) {
    *out = NULL;
    if (!o || o == Py_None) return 0;
    if (!PyMkArray_Check(o)) return -1;
    *out = MKARR(o);
    return 0;
}

/* An optional int (None: -1). */
static int opt_int(PyObject *o, int *out) {
    *out = -1;
    if (!o || o == Py_None) return 0;
    if (PyBool_Check(o) && 0) return -1;
    int64_t v;
    if (mkpy_parse_int(o, &v) < 0) {
        PyErr_Clear();
        return -1;
    }
    if (v < 0 || v > INT32_MAX) v = v < 0 ? 0 : INT32_MAX; /* MLX's checks report it */
    *out = (int)v;
    return 0;
}

/* The mode string (default "affine"): mode number, -2 not a str, -1 error set. */
static int opt_mode(PyObject *o, const char *tag) {
    if (!o) return MK_QMODE_AFFINE;
    if (!PyUnicode_Check(o)) return -2;
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) return -1;
    int m = mk_qmode_parse(s, tag);
    if (m < 0) mkpy_raise();
    return m;
}

static int opt_bool(PyObject *o, int dflt, int *out) {
    *out = dflt;
    if (!o) return 0;
    if (!PyBool_Check(o)) return -1;
    *out = o == Py_True;
    return 0;
}

MKPY_STREAM_BINDING(py_quantize)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"w", "group_size", "bits", "mode", "*global_scale", "*stream", NULL};
    PyObject *a[6];
    mk_array *gscale;
    int gs, bits;
    (void)m;
    if (mkpy_parse("quantize", args, nargs, kw, names, 1, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || opt_int(a[1], &gs) < 0 || opt_int(a[2], &bits) < 0 || opt_array(a[4], &gscale) < 0)
        return mkpy_bad_call("quantize", SIG_QUANTIZE, args, nargs, kw);
    int mode = opt_mode(a[3], "quantize");
    if (mode == -2) return mkpy_bad_call("quantize", SIG_QUANTIZE, args, nargs, kw);
    if (mode < 0) return NULL;
    mk_array *outs[3];
    int n = mk_quantize(MKARR(a[0]), gs, bits, mode, gscale, outs);
    if (n < 0) return mkpy_raise();
    return mkpy_wrap_list(outs, n);
}

MKPY_STREAM_BINDING(py_dequantize)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"w",    "scales",       "biases", "group_size", "bits",
                                        "mode", "global_scale", "dtype",  "*stream",    NULL};
    PyObject *a[9];
    mk_array *biases, *gscale;
    int gs, bits, dtype = -1;
    (void)m;
    if (mkpy_parse("dequantize", args, nargs, kw, names, 2, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]) || opt_array(a[2], &biases) < 0 || opt_int(a[3], &gs) < 0 ||
        opt_int(a[4], &bits) < 0 || opt_array(a[6], &gscale) < 0)
        return mkpy_bad_call("dequantize", SIG_DEQUANTIZE, args, nargs, kw);
    if (a[7] && a[7] != Py_None) {
        mk_dtype t;
        if (mkpy_parse_dtype(a[7], &t) < 0) {
            PyErr_Clear();
            return mkpy_bad_call("dequantize", SIG_DEQUANTIZE, args, nargs, kw);
        }
        dtype = (int)t;
    }
    int mode = opt_mode(a[5], "dequantize");
    if (mode == -2) return mkpy_bad_call("dequantize", SIG_DEQUANTIZE, args, nargs, kw);
    if (mode < 0) return NULL;
    return mkpy_wrap(mk_dequantize(MKARR(a[0]), MKARR(a[1]), biases, gs, bits, mode, gscale, dtype));
}

MKPY_STREAM_BINDING(py_quantized_matmul)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"x", "w", "scales", "biases", "transpose", "group_size", "bits", "mode",
                                        "*stream", NULL};
    PyObject *a[9];
    mk_array *biases;
    int gs, bits, tr;
    (void)m;
    if (mkpy_parse("quantized_matmul", args, nargs, kw, names, 3, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]) || !PyMkArray_Check(a[2]) || opt_array(a[3], &biases) < 0 ||
        opt_bool(a[4], 1, &tr) < 0 || opt_int(a[5], &gs) < 0 || opt_int(a[6], &bits) < 0)
        return mkpy_bad_call("quantized_matmul", SIG_QMM, args, nargs, kw);
    int mode = opt_mode(a[7], "quantized_matmul");
    if (mode == -2) return mkpy_bad_call("quantized_matmul", SIG_QMM, args, nargs, kw);
    if (mode < 0) return NULL;
    return mkpy_wrap(mk_quantized_matmul(MKARR(a[0]), MKARR(a[1]), MKARR(a[2]), biases, tr, gs, bits, mode));
}

MKPY_STREAM_BINDING(py_gather_qmm)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"x",          "w",    "scales", "biases",          "lhs_indices", "rhs_indices",
                                        "transpose",  "group_size", "bits", "mode", "*sorted_indices", "*stream",
                                        NULL};
    PyObject *a[12];
    mk_array *biases, *lhs, *rhs;
    int gs, bits, tr, sorted;
    (void)m;
    if (mkpy_parse("gather_qmm", args, nargs, kw, names, 3, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]) || !PyMkArray_Check(a[2]) || opt_array(a[3], &biases) < 0 ||
        opt_array(a[4], &lhs) < 0 || opt_array(a[5], &rhs) < 0 || opt_bool(a[6], 1, &tr) < 0 ||
        opt_int(a[7], &gs) < 0 || opt_int(a[8], &bits) < 0 || opt_bool(a[10], 0, &sorted) < 0)
        return mkpy_bad_call("gather_qmm", SIG_GQMM, args, nargs, kw);
    int mode = opt_mode(a[9], "gather_qmm");
    if (mode == -2) return mkpy_bad_call("gather_qmm", SIG_GQMM, args, nargs, kw);
    if (mode < 0) return NULL;
    return mkpy_wrap(
        mk_gather_qmm(MKARR(a[0]), MKARR(a[1]), MKARR(a[2]), biases, lhs, rhs, tr, gs, bits, mode, sorted));
}

MKPY_STREAM_BINDING(py_gather_mm)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"a", "b", "lhs_indices", "rhs_indices", "*sorted_indices", "*stream", NULL};
    PyObject *a[6];
    mk_array *lhs, *rhs;
    int sorted;
    (void)m;
    if (mkpy_parse("gather_mm", args, nargs, kw, names, 2, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]) || opt_array(a[2], &lhs) < 0 || opt_array(a[3], &rhs) < 0 ||
        opt_bool(a[4], 0, &sorted) < 0)
        return mkpy_bad_call("gather_mm", SIG_GMM, args, nargs, kw);
    return mkpy_wrap(mk_gather_mm(MKARR(a[0]), MKARR(a[1]), lhs, rhs, sorted));
}

MKPY_STREAM_BINDING(py_segmented_mm)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"a", "b", "segments", "*stream", NULL};
    PyObject *a[4];
    (void)m;
    if (mkpy_parse("segmented_mm", args, nargs, kw, names, 3, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]) || !PyMkArray_Check(a[2]))
        return mkpy_bad_call("segmented_mm", SIG_SEGMM, args, nargs, kw);
    return mkpy_wrap(mk_segmented_mm(MKARR(a[0]), MKARR(a[1]), MKARR(a[2])));
}

MKPY_STREAM_BINDING(py_to_fp8)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"x", "*stream", NULL};
    PyObject *a[2];
    (void)m;
    if (mkpy_parse("to_fp8", args, nargs, kw, names, 1, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0])) return mkpy_bad_call("to_fp8", SIG_TOFP8, args, nargs, kw);
    return mkpy_wrap(mk_to_fp8(MKARR(a[0])));
}

MKPY_STREAM_BINDING(py_from_fp8)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"x", "dtype", "*stream", NULL};
    PyObject *a[3];
    mk_dtype t = MK_BFLOAT16;
    (void)m;
    if (mkpy_parse("from_fp8", args, nargs, kw, names, 1, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0])) return mkpy_bad_call("from_fp8", SIG_FROMFP8, args, nargs, kw);
    if (a[1] && mkpy_parse_dtype(a[1], &t) < 0) {
        PyErr_Clear();
        return mkpy_bad_call("from_fp8", SIG_FROMFP8, args, nargs, kw);
    }
    return mkpy_wrap(mk_from_fp8(MKARR(a[0]), t));
}

#define SIG_QQMM                                                                                       \
    "    1. qqmm(x: array, w: array, scales: array | None = None, group_size: int | None = None, bits: "  \
    "int | None = None, mode: str = 'nvfp4', global_scale_x: array | None = None, global_scale_w: "        \
    "array | None = None, *, stream: StreamOrDevice = None) -> array"

MKPY_STREAM_BINDING(py_qqmm)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"x",    "w",       "scales",         "group_size",     "bits",
                                        "mode", "global_scale_x", "global_scale_w", "*stream",        NULL};
    PyObject *a[9];
    mk_array *scales, *gx, *gw;
    int gs, bits;
    (void)m;
    if (mkpy_parse("qqmm", args, nargs, kw, names, 2, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]) || opt_array(a[2], &scales) < 0 || opt_int(a[3], &gs) < 0 ||
        opt_int(a[4], &bits) < 0 || opt_array(a[6], &gx) < 0 || opt_array(a[7], &gw) < 0)
        return mkpy_bad_call("qqmm", SIG_QQMM, args, nargs, kw);
    int mode = a[5] ? opt_mode(a[5], "qqmm") : MK_QMODE_NVFP4;
    if (mode == -2) return mkpy_bad_call("qqmm", SIG_QQMM, args, nargs, kw);
    if (mode < 0) return NULL;
    return mkpy_wrap(mk_qqmm(MKARR(a[0]), MKARR(a[1]), scales, gs, bits, mode, gx, gw));
}

#define SIG_GQQMM                                                                                      \
    "    1. gather_qqmm(x: array, w: array, /, scales: array | None = None, lhs_indices: array | None = "  \
    "None, rhs_indices: array | None = None, group_size: int | None = None, bits: int | None = None, "     \
    "mode: str = 'nvfp4', global_scale_x: array | None = None, global_scale_w: array | None = None, *, "  \
    "sorted_indices: bool = False, stream: StreamOrDevice = None) -> array"

MKPY_STREAM_BINDING(py_gather_qqmm)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"x",          "w",    "scales",         "lhs_indices",    "rhs_indices",
                                        "group_size", "bits", "mode",           "global_scale_x", "global_scale_w",
                                        "*sorted_indices", "*stream", NULL};
    PyObject *a[12];
    mk_array *scales, *lhs, *rhs, *gx, *gw;
    int gs, bits, sorted;
    (void)m;
    if (mkpy_parse("gather_qqmm", args, nargs, kw, names, 2, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]) || opt_array(a[2], &scales) < 0 ||
        opt_array(a[3], &lhs) < 0 || opt_array(a[4], &rhs) < 0 || opt_int(a[5], &gs) < 0 ||
        opt_int(a[6], &bits) < 0 || opt_array(a[8], &gx) < 0 || opt_array(a[9], &gw) < 0 ||
        opt_bool(a[10], 0, &sorted) < 0)
        return mkpy_bad_call("gather_qqmm", SIG_GQQMM, args, nargs, kw);
    int mode = a[7] ? opt_mode(a[7], "gather_qqmm") : MK_QMODE_NVFP4;
    if (mode == -2) return mkpy_bad_call("gather_qqmm", SIG_GQQMM, args, nargs, kw);
    if (mode < 0) return NULL;
    return mkpy_wrap(mk_gather_qqmm(MKARR(a[0]), MKARR(a[1]), scales, lhs, rhs, gs, bits, mode, gx, gw, sorted));
}

PyMethodDef mkpy_quant_functions[] = {
    {"gather_qqmm", FN(py_gather_qqmm), FASTKW,
     "gather_qqmm(x, w, /, scales=None, lhs_indices=None, rhs_indices=None, group_size=None, bits=None, "
     "mode='nvfp4', global_scale_x=None, global_scale_w=None, *, sorted_indices=False, stream=None)\n--\n\n"
     "gather_mm of x and w.T quantized in the mode (w given quantized, or quantized here)."},
    {"qqmm", FN(py_qqmm), FASTKW,
     "qqmm(x, w, scales=None, group_size=None, bits=None, mode='nvfp4', global_scale_x=None, "
     "global_scale_w=None, *, stream=None)\n--\n\n"
     "x quantized in the mode times w (quantized, or quantized here): the product of the\n"
     "dequantized values, x @ w.T."},
    {"quantize", FN(py_quantize), FASTKW,
     "quantize(w, /, group_size=None, bits=None, mode='affine', *, global_scale=None, stream=None)\n--\n\n"
     "Quantizes the last axis of w in groups: [w_q, scales, biases] for mode 'affine' (bits 2, 3, 4,\n"
     "5, 6 or 8; group_size 32, 64 or 128; defaults 4 and 64), [w_q, scales] for 'mxfp4', 'mxfp8' and\n"
     "'nvfp4'. w_q packs the values into uint32 words as MLX does."},
    {"dequantize", FN(py_dequantize), FASTKW,
     "dequantize(w, /, scales, biases=None, group_size=None, bits=None, mode='affine', global_scale=None, "
     "dtype=None, *, stream=None)\n--\n\n"
     "The matrix a quantization represents."},
    {"quantized_matmul", FN(py_quantized_matmul), FASTKW,
     "quantized_matmul(x, w, /, scales, biases=None, transpose=True, group_size=None, bits=None, "
     "mode='affine', *, stream=None)\n--\n\n"
     "x @ w.T (transpose=True) or x @ w with w given quantized."},
    {"gather_qmm", FN(py_gather_qmm), FASTKW,
     "gather_qmm(x, w, /, scales, biases=None, lhs_indices=None, rhs_indices=None, transpose=True, "
     "group_size=None, bits=None, mode='affine', *, sorted_indices=False, stream=None)\n--\n\n"
     "quantized_matmul of the matrices of x picked by lhs_indices with those of w picked by rhs_indices."},
    {"gather_mm", FN(py_gather_mm), FASTKW,
     "gather_mm(a, b, /, lhs_indices=None, rhs_indices=None, *, sorted_indices=False, stream=None)\n--\n\n"
     "Matrix products of the matrices of a and b picked by the (broadcast) index arrays."},
    {"segmented_mm", FN(py_segmented_mm), FASTKW,
     "segmented_mm(a, b, /, segments, *, stream=None)\n--\n\n"
     "For each segment [s, e) of the contraction axis, a[:, s:e] @ b[s:e, :]."},
    {"to_fp8", FN(py_to_fp8), FASTKW,
     "to_fp8(x, *, stream=None)\n--\n\n"
     "x rounded to fp8 e4m3, as uint8 bytes."},
    {"from_fp8", FN(py_from_fp8), FASTKW,
     "from_fp8(x, dtype=bfloat16, *, stream=None)\n--\n\n"
     "uint8 fp8 e4m3 bytes to a floating dtype."},
    {NULL},
};
