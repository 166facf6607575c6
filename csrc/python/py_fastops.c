/* Module functions of the fastops family (mkpy.fast): rms_norm, layer_norm,
 * rope, scaled_dot_product_attention and cross_entropy, with MLX 0.32's signatures.
 *
 * MLX binds these with nanobind and typed parameters: arrays must be
 * mx.array (no NumPy arrays or scalars), floats take anything with
 * __float__, bools only True/False; a call that fits no signature raises
 * nanobind's "incompatible function arguments" TypeError, reproduced here
 * by mkpy_bad_call. rope's offset is `int | array`: an int that fits a C int
 * becomes an int32 scalar, anything else goes through MLX's array
 * conversion. */
#include "core/transforms.h"
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

/* mkpy_parse, with nanobind's TypeError for calls that fit no signature. */
static int parse(const char *fname, const char *sig, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                 const char *const *names, int nrequired, PyObject **out) {
    if (mkpy_parse(fname, args, nargs, kwnames, names, nrequired, out) == 0) return 0;
    if (PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        mkpy_bad_call(fname, sig, args, nargs, kwnames);
    }
    return -1;
}

/* nanobind's float caster: floats, ints and anything with __float__ or
 * __index__. 1 on success, 0 when it does not fit. */
static int float_arg(PyObject *o, float *out) {
    if (!o || o == Py_None || PyUnicode_Check(o) || PyBytes_Check(o)) return 0;
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = (float)d;
    return 1;
}

/* nanobind's bool caster without conversions: True or False only. */
static int bool_arg(PyObject *o, bool dflt, bool *out) {
    if (!o) {
        *out = dflt;
        return 1;
    }
    if (o != Py_True && o != Py_False) return 0;
    *out = o == Py_True;
    return 1;
}

/* nanobind's int caster for a C int: ints and __index__ objects in range. */
static int int_arg(PyObject *o, int64_t *out) {
    if (!o || PyFloat_Check(o) || PyMkArray_Check(o) || !PyIndex_Check(o)) return 0;
    PyObject *i = PyNumber_Index(o);
    if (!i) {
        PyErr_Clear();
        return 0;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow || v < INT32_MIN || v > INT32_MAX || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

static bool opt_array(PyObject *o) { return !o || o == Py_None || PyMkArray_Check(o); }
static mk_array *arr_or_null(PyObject *o) { return o && o != Py_None ? MKARR(o) : NULL; }

/* ------------------------------------------------------------ norms */

static const char rms_sig[] =
    "    1. rms_norm(x: array, weight: array | None, eps: float, *, stream: StreamOrDevice = None) -> array";

MKPY_STREAM_BINDING(py_rms_norm)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"x", "weight", "eps", "*stream", NULL};
    PyObject *a[4];
    float eps;
    (void)m;
    if (parse("rms_norm", rms_sig, args, nargs, kwnames, names, 3, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !opt_array(a[1]) || !float_arg(a[2], &eps))
        return mkpy_bad_call("rms_norm", rms_sig, args, nargs, kwnames);
    return mkpy_wrap(mk_rms_norm(MKARR(a[0]), arr_or_null(a[1]), eps));
}

static const char ln_sig[] = "    1. layer_norm(x: array, weight: array | None, bias: array | None, eps: float, *, "
                             "stream: StreamOrDevice = None) -> array";

MKPY_STREAM_BINDING(py_layer_norm)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"x", "weight", "bias", "eps", "*stream", NULL};
    PyObject *a[5];
    float eps;
    (void)m;
    if (parse("layer_norm", ln_sig, args, nargs, kwnames, names, 4, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !opt_array(a[1]) || !opt_array(a[2]) || !float_arg(a[3], &eps))
        return mkpy_bad_call("layer_norm", ln_sig, args, nargs, kwnames);
    return mkpy_wrap(mk_layer_norm(MKARR(a[0]), arr_or_null(a[1]), arr_or_null(a[2]), eps));
}

/* -------------------------------------------------------------- rope */

static const char rope_sig[] =
    "    1. rope(a: array, dims: int, *, traditional: bool, base: float | None, scale: float, offset: int | array, "
    "freqs: array | None = None, stream: StreamOrDevice = None) -> array";

MKPY_STREAM_BINDING(py_rope)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a",       "dims",   "*traditional", "*base", "*scale",
                                        "*offset", "*freqs", "*stream",      NULL};
    PyObject *a[8];
    int64_t dims, off;
    bool trad;
    float base = 0, scale;
    (void)m;
    if (parse("rope", rope_sig, args, nargs, kwnames, names, 6, a) < 0) return NULL;
    bool has_base = a[3] != Py_None;
    if (!PyMkArray_Check(a[0]) || !int_arg(a[1], &dims) || !bool_arg(a[2], false, &trad) ||
        (has_base && !float_arg(a[3], &base)) || !float_arg(a[4], &scale) || a[5] == Py_None || !opt_array(a[6]))
        return mkpy_bad_call("rope", rope_sig, args, nargs, kwnames);
    mk_array *offset;
    if (!PyBool_Check(a[5]) && int_arg(a[5], &off))
        offset = mk_scalar_i64(MK_INT32, off);
    else
        offset = mkpy_to_array_arg(a[5], -1);
    if (!offset) return PyErr_Occurred() ? NULL : mkpy_raise();
    mk_array *r = mk_rope(MKARR(a[0]), dims, trad, has_base, base, scale, offset, arr_or_null(a[6]));
    mk_decref(offset);
    return mkpy_wrap(r);
}

/* ------------------------------------------------------------- sdpa */

static const char sdpa_sig[] =
    "    1. scaled_dot_product_attention(q: array, k: array, v: array, *, scale: float,  mask: None | str | array = "
    "None, sinks: array | None = None, force_fused: bool = False, stream: StreamOrDevice = None) -> array";

MKPY_STREAM_BINDING(py_sdpa)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"q", "k", "v", "*scale", "*mask", "*sinks", "*force_fused", "*stream", NULL};
    static const char fname[] = "scaled_dot_product_attention";
    PyObject *a[8];
    float scale;
    bool fused;
    (void)m;
    if (parse(fname, sdpa_sig, args, nargs, kwnames, names, 4, a) < 0) return NULL;
    PyObject *mask = a[4];
    bool mask_str = mask && PyUnicode_Check(mask);
    if (!PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]) || !PyMkArray_Check(a[2]) || !float_arg(a[3], &scale) ||
        !(mask_str || opt_array(mask)) || !opt_array(a[5]) || !bool_arg(a[6], false, &fused))
        return mkpy_bad_call(fname, sdpa_sig, args, nargs, kwnames);
    bool causal = false;
    if (mask_str) {
        const char *s = PyUnicode_AsUTF8(mask);
        if (!s) return NULL;
        if (strcmp(s, "causal") != 0) {
            PyErr_Format(PyExc_ValueError,
                         "[scaled_dot_product_attention] invalid mask option '%s'. Must be 'causal', or an array.", s);
            return NULL;
        }
        causal = true;
    }
    mk_array *marr = mask_str ? NULL : arr_or_null(mask);
    return mkpy_wrap(
        mk_sdpa(MKARR(a[0]), MKARR(a[1]), MKARR(a[2]), scale, causal, marr, arr_or_null(a[5]), fused));
}

static const char ce_sig[] =
    "    1. cross_entropy(logits: array, targets: array, *, stream: StreamOrDevice = None) -> array";

/* MLX 0.32.4's mx.fast.cross_entropy (mlx.nn.losses.cross_entropy calls it on the GPU):
 * logsumexp(logits, -1) - logits[..., targets] as float32. Metal's fused kernel accumulates in
 * float32 from the row's max; MLX's CPU fallback reduces the logits as they are, in their dtype:
 * mkpy does each on its stream (it plays the Mac's GPU). A composition of ops, so grad and vmap
 * follow. */
MKPY_STREAM_BINDING(py_cross_entropy)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"logits", "targets", "*stream", NULL};
    PyObject *a[3];
    char s1[256], s2[256];
    (void)m;
    if (parse("cross_entropy", ce_sig, args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (!PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]))
        return mkpy_bad_call("cross_entropy", ce_sig, args, nargs, kwnames);
    mk_array *x = MKARR(a[0]), *t = MKARR(a[1]);
    if (x->ndim < 1)
        return PyErr_Format(PyExc_ValueError, "[cross_entropy] logits must have at least 1 dimension but got input "
                            "with 0 dimensions.");
    if (!mk_is_float(x->dtype))
        return PyErr_Format(PyExc_ValueError, "[cross_entropy] Received unsupported logits type %s.",
                            mk_dtype_name(x->dtype));
    if (!mk_is_integral(t->dtype) || t->dtype == MK_BOOL)
        return PyErr_Format(PyExc_ValueError, "[cross_entropy] targets must be integer class indices but got %s.",
                            mk_dtype_name(t->dtype));
    if (t->ndim != x->ndim - 1 || (t->ndim && memcmp(t->shape, x->shape, t->ndim * sizeof *t->shape)))
        return PyErr_Format(PyExc_ValueError, "[cross_entropy] targets shape %s does not match logits shape %s with "
                            "the last axis removed.", mk_shape_str(t->ndim, t->shape, s1, sizeof s1),
                            mk_shape_str(x->ndim, x->shape, s2, sizeof s2));
    int last = -1;
    mk_array *xf;
    if (mk_current_stream_is_gpu()) {
        /* as the fused kernel: float32 logits less their row's max (a shared offset as large as 1e6
           changes nothing; MLX's test_losses checks it through mlx.nn on the GPU) */
        mk_array *f = mk_astype(x, MK_FLOAT32), *mx_ = f ? mk_reduce(MK_REDUCE_MAX, f, 1, &last, true) : NULL;
        mk_array *ms = mx_ ? mk_stop_gradient(mx_) : NULL;
        xf = ms ? mk_binary(MK_BINARY_subtract, f, ms) : NULL;
        mk_xdecref(f);
        mk_xdecref(mx_);
        mk_xdecref(ms);
    } else {
        mk_incref(x);
        xf = x;
    }
    mk_array *ti = xf ? mk_expand_dims(t, 1, &last) : NULL;
    mk_array *picked = ti ? mk_take_along_axis(xf, ti, -1, true) : NULL;
    mk_array *lse = picked ? mk_logsumexp(xf, 1, &last, true) : NULL;
    mk_array *d = lse ? mk_binary(MK_BINARY_subtract, lse, picked) : NULL;
    mk_array *sq = d ? mk_squeeze(d, 1, &last) : NULL;
    mk_array *r = sq ? mk_astype(sq, MK_FLOAT32) : NULL;
    mk_xdecref(xf);
    mk_xdecref(ti);
    mk_xdecref(picked);
    mk_xdecref(lse);
    mk_xdecref(d);
    mk_xdecref(sq);
    return mkpy_wrap(r);
}

PyMethodDef mkpy_fastops_functions[] = {
    {"rms_norm", FN(py_rms_norm), FASTKW,
     "rms_norm(x, weight, eps, *, stream=None)\n--\n\n"
     "Root Mean Square normalization (RMS norm) over the last axis of x, scaled by weight (None: no scaling)."},
    {"layer_norm", FN(py_layer_norm), FASTKW,
     "layer_norm(x, weight, bias, eps, *, stream=None)\n--\n\n"
     "Layer normalization over the last axis of x, then weight and bias (each may be None)."},
    {"rope", FN(py_rope), FASTKW,
     "rope(a, dims, *, traditional, base, scale, offset, freqs=None, stream=None)\n--\n\n"
     "Apply rotary positional encoding to the first dims features of a (shape (B, *, T, D)).\n"
     "traditional rotates consecutive pairs, else the two halves; exactly one of base and freqs is None;\n"
     "offset is an int, or an integer array with one offset per batch element."},
    {"scaled_dot_product_attention", FN(py_sdpa), FASTKW,
     "scaled_dot_product_attention(q, k, v, *, scale, mask=None, sinks=None, force_fused=False, stream=None)\n--\n\n"
     "softmax(q @ k.T * scale + mask) @ v for q (B, N_q, T_q, D), k (B, N_kv, T_kv, D), v (B, N_kv, T_kv, D_v),\n"
     "with grouped-query heads, mask None, \"causal\" (lower-right aligned), a boolean or an additive array,\n"
     "and optional attention sinks (one logit per query head). The softmax is computed in float32."},
    {"cross_entropy", FN(py_cross_entropy), FASTKW,
     "cross_entropy(logits, targets, *, stream=None)\n--\n\n"
     "Cross entropy loss with class indices as targets: logsumexp(logits, -1) - logits[..., targets] in float32\n"
     "(accumulated in float32 on the GPU stream, in the logits' dtype on the CPU, as MLX)."},
    {NULL},
};
