/* The mkpy.fft submodule: MLX's mx.fft functions (signatures, defaults and
 * messages as MLX's python/src/fft.cpp). The transforms are core/ops_fft.c. */
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

static int parse_norm(PyObject *o, const char *op, mk_fft_norm *out) {
    *out = MK_FFT_BACKWARD;
    if (!o) return 0;
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): norm must be a str", op);
        return -1;
    }
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) return -1;
    if (!strcmp(s, "backward")) return 0;
    if (!strcmp(s, "ortho")) {
        *out = MK_FFT_ORTHO;
        return 0;
    }
    if (!strcmp(s, "forward")) {
        *out = MK_FFT_FORWARD;
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "[%s] Invalid norm. Expected one of {'backward', 'ortho', 'forward'}.", op);
    return -1;
}

static int int_arg(const char *op, const char *name, PyObject *o, int64_t *out) {
    if (PyFloat_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): '%s' must be an int", op, name);
        return -1;
    }
    int64_t v;
    if (mkpy_parse_int(o, &v) < 0) return -1;
    int iv;
    if (mkpy_int32_value(v, &iv) < 0) return -1;
    *out = v;
    return 0;
}

static mk_array *array_in(PyObject *o) { return mkpy_to_array_arg(o, -1); }

/* fft(a, n=None, axis=-1, norm="backward", stream=None) and its kin */
static PyObject *one_axis(const char *op, bool real, bool inverse, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
    static const char *const names[] = {"a", "n", "axis", "norm", "stream", NULL};
    PyObject *a[5];
    if (mkpy_parse(op, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    int64_t n = 0, axis = -1;
    bool has_n = a[1] && a[1] != Py_None;
    if (has_n && int_arg(op, "n", a[1], &n) < 0) return NULL;
    if (a[2] && int_arg(op, "axis", a[2], &axis) < 0) return NULL;
    mk_fft_norm norm;
    if (parse_norm(a[3], op, &norm) < 0) return NULL;
    mk_array *x = array_in(a[0]);
    if (!x) return NULL;
    int ax = (int)axis;
    mk_array *r = mk_fftn(x, 1, &ax, has_n ? &n : NULL, real, inverse, norm);
    mk_decref(x);
    return mkpy_wrap(r);
}

/* fft2/fftn(a, s=None, axes=..., norm="backward", stream=None) */
static PyObject *many_axes(const char *op, bool two, bool real, bool inverse, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "s", "axes", "norm", "stream", NULL};
    PyObject *a[5];
    if (mkpy_parse(op, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    bool has_s = a[1] && a[1] != Py_None;
    int ns = 0, naxes = -1, axes[MK_MAX_NDIM];
    int64_t s[MK_MAX_NDIM];
    if (has_s && mkpy_parse_shape(a[1], &ns, s) < 0) return NULL;
    if (has_s)
        for (int i = 0; i < ns; i++) {
            int iv;
            if (mkpy_int32_value(s[i], &iv) < 0) return NULL;
        }
    if (!a[2] && two) {
        naxes = 2;
        axes[0] = -2;
        axes[1] = -1;
    } else if (a[2] && a[2] != Py_None) {
        if (PyLong_Check(a[2])) {
            PyErr_Format(PyExc_TypeError, "%s(): 'axes' must be a sequence of ints", op);
            return NULL;
        }
        if (mkpy_parse_axes(a[2], &naxes, axes) < 0) return NULL;
    }
    mk_fft_norm norm;
    if (parse_norm(a[3], op, &norm) < 0) return NULL;
    if (naxes < 0 && has_s) {
        PyErr_Format(PyExc_ValueError, "[%s] `axes` should not be `None` if `s` is not `None`.", op);
        return NULL;
    }
    mk_array *x = array_in(a[0]);
    if (!x) return NULL;
    mk_array *r;
    if (has_s && ns != naxes) {
        r = NULL;
        if (x->ndim < 1)
            mk_error_set(MK_ERR_VALUE, "[fftn] Requires array with at least one dimension.");
        else
            mk_error_set(MK_ERR_VALUE, "[fftn] Shape and axes have different sizes.");
    } else if (naxes < 0) {
        if (x->ndim < 1) {
            mk_error_set(MK_ERR_VALUE, "[fftn] Requires array with at least one dimension.");
            r = NULL;
        } else {
            r = mk_fftn(x, -1, NULL, NULL, real, inverse, norm);
        }
    } else {
        r = mk_fftn(x, naxes, axes, has_s ? s : NULL, real, inverse, norm);
    }
    mk_decref(x);
    return mkpy_wrap(r);
}

#define ONE(name, real, inverse)                                                                       \
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return one_axis(#name, real, inverse, args, nargs, kw);                                        \
    }
#define MANY(name, two, real, inverse)                                                                 \
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return many_axes(#name, two, real, inverse, args, nargs, kw);                                  \
    }
ONE(fft, false, false)
ONE(ifft, false, true)
ONE(rfft, true, false)
ONE(irfft, true, true)
MANY(fft2, true, false, false)
MANY(ifft2, true, false, true)
MANY(rfft2, true, true, false)
MANY(irfft2, true, true, true)
MANY(fftn, false, false, false)
MANY(ifftn, false, false, true)
MANY(rfftn, false, true, false)
MANY(irfftn, false, true, true)

static PyObject *shift(const char *op, bool inverse, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "axes", "stream", NULL};
    PyObject *a[3];
    if (mkpy_parse(op, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    int naxes = -1, axes[MK_MAX_NDIM];
    if (a[1] && a[1] != Py_None && mkpy_parse_axes(a[1], &naxes, axes) < 0) return NULL;
    mk_array *x = array_in(a[0]);
    if (!x) return NULL;
    mk_array *r = mk_fftshift(x, naxes, axes, inverse);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_fftshift)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return shift("fftshift", false, args, nargs, kw);
}
MKPY_STREAM_BINDING(py_ifftshift)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return shift("ifftshift", true, args, nargs, kw);
}

static PyObject *freq(const char *op, bool real, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"n", "d", "stream", NULL};
    PyObject *a[3];
    if (mkpy_parse(op, args, nargs, kwnames, names, 1, a) < 0) return NULL;
    int64_t n;
    if (int_arg(op, "n", a[0], &n) < 0) return NULL;
    double d = 1.0;
    if (a[1]) {
        d = PyFloat_AsDouble(a[1]);
        if (d == -1.0 && PyErr_Occurred()) return NULL;
    }
    return mkpy_wrap(mk_fftfreq(n, d, real));
}
MKPY_STREAM_BINDING(py_fftfreq)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return freq("fftfreq", false, args, nargs, kw);
}
MKPY_STREAM_BINDING(py_rfftfreq)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return freq("rfftfreq", true, args, nargs, kw);
}

#define ONE_DOC(name, what)                                                                            \
    PyDoc_STRVAR(name##_doc, #name "(a: array, n: Optional[int] = None, axis: int = -1, norm: str = "  \
                                   "'backward', stream: Union[None, Stream, Device] = None) -> array\n\n" what);
#define MANY_DOC(name, axes_default, what)                                                             \
    PyDoc_STRVAR(name##_doc, #name "(a: array, s: Optional[Sequence[int]] = None, axes: "               \
                                   "Optional[Sequence[int]] = " axes_default ", norm: str = 'backward', " \
                                   "stream: Union[None, Stream, Device] = None) -> array\n\n" what);
ONE_DOC(fft, "One dimensional discrete Fourier Transform (complex64).")
ONE_DOC(ifft, "One dimensional inverse discrete Fourier Transform (complex64).")
ONE_DOC(rfft, "One dimensional discrete Fourier Transform of a real input: n // 2 + 1 outputs along axis.")
ONE_DOC(irfft, "The inverse of rfft: a real (float32) output of size n (default 2 * (a.shape[axis] - 1)).")
MANY_DOC(fft2, "[-2, -1]", "Two dimensional discrete Fourier Transform.")
MANY_DOC(ifft2, "[-2, -1]", "Two dimensional inverse discrete Fourier Transform.")
MANY_DOC(rfft2, "[-2, -1]", "Two dimensional real discrete Fourier Transform.")
MANY_DOC(irfft2, "[-2, -1]", "The inverse of rfft2.")
MANY_DOC(fftn, "None", "n-dimensional discrete Fourier Transform (all axes when axes is None).")
MANY_DOC(ifftn, "None", "n-dimensional inverse discrete Fourier Transform.")
MANY_DOC(rfftn, "None", "n-dimensional real discrete Fourier Transform.")
MANY_DOC(irfftn, "None", "The inverse of rfftn.")
PyDoc_STRVAR(fftshift_doc, "fftshift(a: array, axes: Union[None, int, Sequence[int]] = None, stream: Union[None, "
                           "Stream, Device] = None) -> array\n\nShift the zero-frequency component to the center of "
                           "the spectrum.");
PyDoc_STRVAR(ifftshift_doc, "ifftshift(a: array, axes: Union[None, int, Sequence[int]] = None, stream: Union[None, "
                            "Stream, Device] = None) -> array\n\nThe inverse of fftshift.");
PyDoc_STRVAR(fftfreq_doc, "fftfreq(n: int, d: float = 1.0, stream: Union[None, Stream, Device] = None) -> array\n\n"
                          "The discrete Fourier Transform sample frequencies (float32).");
PyDoc_STRVAR(rfftfreq_doc, "rfftfreq(n: int, d: float = 1.0, stream: Union[None, Stream, Device] = None) -> array\n\n"
                           "The sample frequencies for rfft and irfft: [0, n // 2] / (d * n) (float32).");

#define ENTRY(name) {#name, FN(py_##name), FASTKW, name##_doc}
PyMethodDef mkpy_fft_functions[] = {
    ENTRY(fft),    ENTRY(ifft),   ENTRY(fft2),    ENTRY(ifft2),     ENTRY(fftn),    ENTRY(ifftn),
    ENTRY(rfft),   ENTRY(irfft),  ENTRY(rfft2),   ENTRY(irfft2),    ENTRY(rfftn),   ENTRY(irfftn),
    ENTRY(fftshift), ENTRY(ifftshift), ENTRY(fftfreq), ENTRY(rfftfreq), {NULL, NULL, 0, NULL},
};
