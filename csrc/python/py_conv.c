/* Convolution functions with MLX's signatures (python/src/ops.cpp): conv1d,
 * conv2d, conv3d, conv_transpose1d/2d/3d, conv_general and convolve. All
 * build on mk_conv_general (core/ops_conv.c). */
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

static int int32_of(PyObject *o, int *out) {
    if (PyFloat_Check(o) || PyBool_Check(o) || !PyIndex_Check(o)) return -1;
    int64_t v;
    if (mkpy_parse_int(o, &v) < 0) return -1;
    return mkpy_int32_value(v, out);
}

/* An int, or (want > 0) a tuple/list of exactly `want` ints, or (want < 0)
 * a sequence of any length up to MK_CONV_MAXLIST. *n gets the count (an
 * int gives 1). Returns 0, or -1 with a TypeError naming the argument. */
static int int_or_seq(const char *fname, const char *name, PyObject *o, int dflt, int want, int *n, int *out) {
    if (!o) {
        *n = 1;
        out[0] = dflt;
        return 0;
    }
    if (PyLong_Check(o) || (PyIndex_Check(o) && !PyFloat_Check(o))) {
        if (int32_of(o, &out[0]) < 0) goto bad;
        *n = 1;
        return 0;
    }
    if (!PyList_Check(o) && !PyTuple_Check(o)) goto bad;
    Py_ssize_t len = PySequence_Size(o);
    if (len < 0) goto bad;
    if ((want > 0 && len != want) || (want < 0 && len > MK_CONV_MAXLIST)) goto bad;
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *it = PySequence_GetItem(o, i);
        if (!it) goto bad;
        int rc = int32_of(it, &out[i]);
        Py_DECREF(it);
        if (rc < 0) goto bad;
    }
    *n = (int)len;
    return 0;
bad:
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        if (want > 0)
            PyErr_Format(PyExc_TypeError, "%s(): incompatible function arguments: '%s' must be an int or a tuple of %d ints",
                         fname, name, want);
        else
            PyErr_Format(PyExc_TypeError, "%s(): incompatible function arguments: '%s' must be an int or a sequence of ints",
                         fname, name);
    }
    return -1;
}

static int groups_arg(const char *fname, PyObject *o, int *g) {
    *g = 1;
    if (!o) return 0;
    if (int32_of(o, g) < 0) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s(): incompatible function arguments: 'groups' must be an int", fname);
        }
        return -1;
    }
    return 0;
}

static void spread(int n, const int *v, int nd, int *out) {
    for (int i = 0; i < nd; i++) out[i] = n == 1 ? v[0] : v[i];
}

/* conv{1,2,3}d(input, weight, /, stride, padding, dilation, groups, *, stream) */
static PyObject *convnd(const char *fname, int nd, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"input", "weight", "stride", "padding", "dilation", "groups", "*stream", NULL};
    PyObject *a[7];
    if (mkpy_parse(fname, args, nargs, kwnames, names, 2, a) < 0) return NULL;
    int want = nd == 1 ? 1 : nd;
    int ns, np, ndl, s[8], p[8], d[8], g;
    if (int_or_seq(fname, "stride", a[2], 1, want, &ns, s) < 0 || int_or_seq(fname, "padding", a[3], 0, want, &np, p) < 0 ||
        int_or_seq(fname, "dilation", a[4], 1, want, &ndl, d) < 0 || groups_arg(fname, a[5], &g) < 0)
        return NULL;
    if (nd == 1 && (ns != 1 || np != 1 || ndl != 1)) {
        PyErr_Format(PyExc_TypeError, "%s(): incompatible function arguments", fname);
        return NULL;
    }
    mk_array *x = mkpy_to_array_arg(a[0], -1), *w = x ? mkpy_to_array_arg(a[1], -1) : NULL;
    mk_array *r = NULL;
    if (x && w) {
        mk_conv_args ca = {0};
        ca.nstride = ca.npad_lo = ca.npad_hi = ca.nkdil = ca.nidil = nd;
        spread(ns, s, nd, ca.stride);
        spread(np, p, nd, ca.pad_lo);
        spread(np, p, nd, ca.pad_hi);
        spread(ndl, d, nd, ca.kdil);
        for (int i = 0; i < nd; i++) ca.idil[i] = 1;
        ca.groups = g;
        r = mk_conv_general(x, w, &ca);
        if (!r) mkpy_raise();
    }
    mk_xdecref(x);
    mk_xdecref(w);
    return r ? mkpy_wrap(r) : NULL;
}

static PyObject *conv_transposend(const char *fname, int nd, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    static const char *const names[] = {"input",          "weight", "stride",  "padding", "dilation",
                                        "output_padding", "groups", "*stream", NULL};
    PyObject *a[8];
    if (mkpy_parse(fname, args, nargs, kwnames, names, 2, a) < 0) return NULL;
    int want = nd == 1 ? 1 : nd;
    int ns, np, ndl, nop, s[8], p[8], d[8], op[8], g;
    if (int_or_seq(fname, "stride", a[2], 1, want, &ns, s) < 0 || int_or_seq(fname, "padding", a[3], 0, want, &np, p) < 0 ||
        int_or_seq(fname, "dilation", a[4], 1, want, &ndl, d) < 0 ||
        int_or_seq(fname, "output_padding", a[5], 0, want, &nop, op) < 0 || groups_arg(fname, a[6], &g) < 0)
        return NULL;
    if (nd == 1 && (ns != 1 || np != 1 || ndl != 1 || nop != 1)) {
        PyErr_Format(PyExc_TypeError, "%s(): incompatible function arguments", fname);
        return NULL;
    }
    int S[3], P[3], D[3], OP[3];
    spread(ns, s, nd, S);
    spread(np, p, nd, P);
    spread(ndl, d, nd, D);
    spread(nop, op, nd, OP);
    mk_array *x = mkpy_to_array_arg(a[0], -1), *w = x ? mkpy_to_array_arg(a[1], -1) : NULL;
    mk_array *r = NULL;
    if (x && w) {
        r = mk_conv_transpose(x, w, nd, S, P, D, OP, g);
        if (!r) mkpy_raise();
    }
    mk_xdecref(x);
    mk_xdecref(w);
    return r ? mkpy_wrap(r) : NULL;
}

#define CONV_FN(k)                                                                                     \
    MKPY_STREAM_BINDING(py_conv##k##d)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) { \
        (void)m;                                                                                       \
        return convnd("conv" #k "d", k, args, nargs, kw);                                              \
    }                                                                                                  \
    MKPY_STREAM_BINDING(py_conv_transpose##k##d)(PyObject *m, PyObject *const *args, Py_ssize_t nargs,  \
                                             PyObject *kw) {                                           \
        (void)m;                                                                                       \
        return conv_transposend("conv_transpose" #k "d", k, args, nargs, kw);                          \
    }
CONV_FN(1)
CONV_FN(2)
CONV_FN(3)

/* conv_general(input, weight, /, stride=1, padding=0, kernel_dilation=1,
 * input_dilation=1, groups=1, flip=False, *, stream=None); padding may be
 * a pair (low list, high list) */
MKPY_STREAM_BINDING(py_conv_general)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"input",  "weight", "stride", "padding", "kernel_dilation", "input_dilation",
                                        "groups", "flip",   "*stream", NULL};
    const char *fname = "conv_general";
    PyObject *a[9];
    (void)m;
    if (mkpy_parse(fname, args, nargs, kwnames, names, 2, a) < 0) return NULL;
    mk_conv_args ca = {0};
    if (int_or_seq(fname, "stride", a[2], 1, -1, &ca.nstride, ca.stride) < 0) return NULL;
    PyObject *pad = a[3];
    bool pair = false;
    if (pad && PyTuple_Check(pad) && PyTuple_GET_SIZE(pad) == 2) {
        PyObject *p0 = PyTuple_GET_ITEM(pad, 0), *p1 = PyTuple_GET_ITEM(pad, 1);
        pair = (PyList_Check(p0) || PyTuple_Check(p0)) && (PyList_Check(p1) || PyTuple_Check(p1));
        if (pair && (int_or_seq(fname, "padding", p0, 0, -1, &ca.npad_lo, ca.pad_lo) < 0 ||
                     int_or_seq(fname, "padding", p1, 0, -1, &ca.npad_hi, ca.pad_hi) < 0))
            return NULL;
    }
    if (!pair) {
        if (int_or_seq(fname, "padding", pad, 0, -1, &ca.npad_lo, ca.pad_lo) < 0) return NULL;
        ca.npad_hi = ca.npad_lo;
        memcpy(ca.pad_hi, ca.pad_lo, sizeof ca.pad_hi);
    }
    if (int_or_seq(fname, "kernel_dilation", a[4], 1, -1, &ca.nkdil, ca.kdil) < 0 ||
        int_or_seq(fname, "input_dilation", a[5], 1, -1, &ca.nidil, ca.idil) < 0 || groups_arg(fname, a[6], &ca.groups) < 0)
        return NULL;
    int flip = 0;
    if (a[7]) {
        if (!PyBool_Check(a[7])) {
            PyErr_Format(PyExc_TypeError, "%s(): incompatible function arguments: 'flip' must be a bool", fname);
            return NULL;
        }
        flip = a[7] == Py_True;
    }
    ca.flip = flip;
    mk_array *x = mkpy_to_array_arg(a[0], -1), *w = x ? mkpy_to_array_arg(a[1], -1) : NULL;
    mk_array *r = NULL;
    if (x && w) {
        r = mk_conv_general(x, w, &ca);
        if (!r) mkpy_raise();
    }
    mk_xdecref(x);
    mk_xdecref(w);
    return r ? mkpy_wrap(r) : NULL;
}

/* convolve(a, v, /, mode="full", *, stream=None): numpy's 1-D convolution
 * as MLX builds it (the longer input is the signal, the filter flipped). */
MKPY_STREAM_BINDING(py_convolve)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "v", "mode", "*stream", NULL};
    PyObject *a[4];
    (void)m;
    if (mkpy_parse("convolve", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    const char *mode = "full";
    if (a[2]) {
        if (!PyUnicode_Check(a[2])) {
            PyErr_SetString(PyExc_TypeError, "convolve(): incompatible function arguments: 'mode' must be a str");
            return NULL;
        }
        if (!(mode = PyUnicode_AsUTF8(a[2]))) return NULL;
    }
    mk_array *x = mkpy_to_array_arg(a[0], -1), *v = x ? mkpy_to_array_arg(a[1], -1) : NULL;
    mk_array *r = NULL, *in = NULL, *wt = NULL, *out = NULL;
    if (!x || !v) goto done;
    if (x->ndim != 1 || v->ndim != 1) {
        PyErr_SetString(PyExc_ValueError, "[convolve] Inputs must be 1D.");
        goto done;
    }
    if (x->size == 0 || v->size == 0) {
        PyErr_SetString(PyExc_ValueError, "[convolve] Inputs cannot be empty.");
        goto done;
    }
    mk_array *sig = x->size < v->size ? v : x, *fil = x->size < v->size ? x : v;
    int64_t shp[3] = {1, -1, 1};
    in = mk_reshape(sig, 3, shp);
    wt = in ? mk_reshape(fil, 3, shp) : NULL;
    if (!wt) {
        mkpy_raise();
        goto done;
    }
    int64_t K = fil->size;
    mk_conv_args ca = {0};
    ca.npad_lo = ca.npad_hi = 1;
    if (!strcmp(mode, "full")) {
        ca.pad_lo[0] = ca.pad_hi[0] = (int)(K - 1);
    } else if (!strcmp(mode, "valid")) {
        ca.pad_lo[0] = ca.pad_hi[0] = 0;
    } else if (!strcmp(mode, "same")) {
        ca.pad_lo[0] = (int)(K / 2);
        ca.pad_hi[0] = K % 2 ? (int)(K / 2) : (int)(K / 2 - 1 > 0 ? K / 2 - 1 : 0);
    } else {
        PyErr_SetString(PyExc_ValueError, "[convolve] Invalid mode.");
        goto done;
    }
    ca.groups = 1;
    ca.flip = true;
    out = mk_conv_general(in, wt, &ca);
    int64_t flat = -1;
    r = out ? mk_reshape(out, 1, &flat) : NULL;
    if (!r) mkpy_raise();
done:
    mk_xdecref(x);
    mk_xdecref(v);
    mk_xdecref(in);
    mk_xdecref(wt);
    mk_xdecref(out);
    return r ? mkpy_wrap(r) : NULL;
}

#define SIG_CONV(k, T)                                                                                 \
    "conv" #k "d(input: array, weight: array, /, stride: " T " = 1, padding: " T " = 0, dilation: " T     \
    " = 1, groups: int = 1, *, stream: Union[None, Stream, Device] = None) -> array\n\n"
#define SIG_CONVT(k, T)                                                                                \
    "conv_transpose" #k "d(input: array, weight: array, /, stride: " T " = 1, padding: " T " = 0, "      \
    "dilation: " T " = 1, output_padding: " T " = 0, groups: int = 1, *, stream: Union[None, Stream, "   \
    "Device] = None) -> array\n\n"
PyDoc_STRVAR(conv1d_doc, SIG_CONV(1, "int") "1D convolution: input (N, L, C_in), weight (C_out, K, C_in / groups).");
PyDoc_STRVAR(conv2d_doc, SIG_CONV(2, "Union[int, Tuple[int, int]]") "2D convolution: input (N, H, W, C_in), weight "
                                                                    "(C_out, KH, KW, C_in / groups).");
PyDoc_STRVAR(conv3d_doc, SIG_CONV(3, "Union[int, Tuple[int, int, int]]") "3D convolution: input (N, D, H, W, C_in), "
                                                                         "weight (C_out, KD, KH, KW, C_in).");
PyDoc_STRVAR(conv_transpose1d_doc, SIG_CONVT(1, "int") "1D transposed convolution.");
PyDoc_STRVAR(conv_transpose2d_doc, SIG_CONVT(2, "Union[int, Tuple[int, int]]") "2D transposed convolution.");
PyDoc_STRVAR(conv_transpose3d_doc, SIG_CONVT(3, "Union[int, Tuple[int, int, int]]") "3D transposed convolution.");
PyDoc_STRVAR(conv_general_doc,
             "conv_general(input: array, weight: array, /, stride: Union[int, Sequence[int]] = 1, padding: "
             "Union[int, Sequence[int], Tuple[Sequence[int], Sequence[int]]] = 0, kernel_dilation: Union[int, "
             "Sequence[int]] = 1, input_dilation: Union[int, Sequence[int]] = 1, groups: int = 1, flip: bool = False, "
             "*, stream: Union[None, Stream, Device] = None) -> array\n\n"
             "General convolution: input (N, ..., C_in), weight (C_out, ..., C_in / groups).");
PyDoc_STRVAR(convolve_doc, "convolve(a: array, v: array, /, mode: str = 'full', *, stream: Union[None, Stream, "
                           "Device] = None) -> array\n\nThe discrete convolution of 1D arrays.");

#define ENTRY(name) {#name, FN(py_##name), FASTKW, name##_doc}
PyMethodDef mkpy_conv_functions[] = {
    ENTRY(conv1d), ENTRY(conv2d), ENTRY(conv3d), ENTRY(conv_transpose1d), ENTRY(conv_transpose2d),
    ENTRY(conv_transpose3d), ENTRY(conv_general), ENTRY(convolve), {NULL, NULL, 0, NULL},
};
