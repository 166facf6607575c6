/* The mkpy.linalg submodule (MLX's mlx.core.linalg) and einsum /
 * einsum_path, with MLX's signatures. Operands must be arrays, as MLX's
 * `const array&` parameters (no scalars or lists); a call that does not fit
 * gets nanobind's "incompatible function arguments".
 *
 * The stream argument decides MLX's CPU-only rule: None means the current
 * stream (the default stream of the default device, Device(gpu, 0) unless
 * set, as on a Mac; core/stream.h), a Device or mkpy.cpu / mkpy.gpu its
 * default stream, a Stream its device. The ops MLX runs on the CPU only
 * raise on a GPU stream. */
#include <string.h>

#include "core/linalg.h"
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)
#define SOD "stream: StreamOrDevice = None"

/* 1 when the stream argument names a GPU stream, 0 for a CPU one, -1 with
 * *bad set when it is not a stream, device or None (or an error is set).
 * The op's stream= was made the current stream by mkpy_parse (py_stream.c). */
static int stream_is_gpu(PyObject *s, bool *bad) { return mkpy_stream_is_gpu(s, bad); }

/* Parses a call: names as mkpy_parse (the last is "*stream"), the first
 * `narr` must be arrays. Sets *gpu. Returns 0, or -1 with the error set
 * (nanobind's message for calls that do not fit). */
static int parse(const char *fname, const char *sig, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                 const char *const *names, int narr, PyObject **out, bool *gpu) {
    int npos = 0, n = 0;
    while (names[npos] && names[npos][0] != '*') npos++;
    while (names[n]) n++;
    if (nargs < narr || nargs > npos) goto bad;
    if (mkpy_parse(fname, args, nargs, kwnames, names, narr, out) < 0) return -1;
    for (int i = 0; i < narr; i++)
        if (!PyMkArray_Check(out[i])) goto bad;
    bool badstream;
    int g = stream_is_gpu(out[n - 1], &badstream);
    if (badstream) goto bad;
    if (g < 0) return -1;
    *gpu = g == 1;
    return 0;
bad:
    mkpy_bad_call(fname, sig, args, nargs, kwnames);
    return -1;
}

/* A bool argument as nanobind's caster takes one: True or False only. */
static int bool_arg(PyObject *o, bool dflt, bool *out) {
    if (!o) {
        *out = dflt;
        return 0;
    }
    if (!PyBool_Check(o)) return -1;
    *out = o == Py_True;
    return 0;
}

static PyObject *tuple_of(int n, mk_array **r) {
    PyObject *t = PyTuple_New(n);
    if (!t) {
        for (int i = 0; i < n; i++) mk_decref(r[i]);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        PyObject *x = mkpy_wrap(r[i]);
        if (!x) {
            for (int j = i + 1; j < n; j++) mk_decref(r[j]);
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

/* ---------------------------------------------------------------- norm */

#define SIG_NORM                                                                                      \
    "    1. norm(a: array, /, ord: None | int | float | str = None, axis: None | int | list[int] = None, " \
    "keepdims: bool = False, *, " SOD ") -> array"

MKPY_STREAM_BINDING(py_norm)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "ord", "axis", "keepdims", "*stream", NULL};
    PyObject *a[5];
    bool gpu, keep;
    int kind = 0, naxes = -1, axes[MK_MAX_NDIM];
    double ord = 0;
    const char *sord = NULL;
    (void)m;
    if (parse("norm", SIG_NORM, args, nargs, kwnames, names, 1, a, &gpu) < 0) return NULL;
    if (bool_arg(a[3], false, &keep) < 0) goto bad;
    if (a[1] && a[1] != Py_None) {
        if (PyUnicode_Check(a[1])) {
            kind = 2;
            if (!(sord = PyUnicode_AsUTF8(a[1]))) return NULL;
        } else if (PyLong_Check(a[1]) || PyFloat_Check(a[1])) {
            kind = 1;
            ord = PyFloat_AsDouble(a[1]);
            if (ord == -1.0 && PyErr_Occurred()) return NULL;
        } else {
            goto bad;
        }
    }
    if (a[2] && a[2] != Py_None) {
        if (PyFloat_Check(a[2]) || PyMkArray_Check(a[2])) goto bad;
        if (PyLong_Check(a[2])) {
            int64_t v;
            if (mkpy_parse_int(a[2], &v) < 0 || mkpy_int32_value(v, &axes[0]) < 0) return NULL;
            naxes = 1;
        } else {
            if (!PyList_Check(a[2]) && !PyTuple_Check(a[2])) goto bad;
            if (mkpy_parse_axes(a[2], &naxes, axes) < 0) return NULL;
        }
    }
    return mkpy_wrap(mk_linalg_norm(MKARR(a[0]), kind, ord, sord, naxes, axes, keep, gpu));
bad:
    return mkpy_bad_call("norm", SIG_NORM, args, nargs, kwnames);
}

/* ------------------------------------------------ one-array factorizations */

#define SIG1(name, ret) "    1. " #name "(a: array, *, " SOD ") -> " ret
#define SIG_UP(name) "    1. " #name "(a: array, upper: bool = False, *, " SOD ") -> array"

MKPY_STREAM_BINDING(py_qr)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "*stream", NULL};
    PyObject *a[2];
    mk_array *r[2];
    bool gpu;
    (void)m;
    if (parse("qr", SIG1(qr, "tuple[array, array]"), args, nargs, kwnames, names, 1, a, &gpu) < 0) return NULL;
    if (mk_linalg_qr(MKARR(a[0]), gpu, r) < 0) return mkpy_raise();
    return tuple_of(2, r);
}

#define SIG_SVD "    1. svd(a: array, compute_uv: bool = True, *, " SOD ") -> tuple[array, array, array]"

MKPY_STREAM_BINDING(py_svd)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "compute_uv", "*stream", NULL};
    PyObject *a[3];
    mk_array *r[3];
    bool gpu, uv;
    (void)m;
    if (parse("svd", SIG_SVD, args, nargs, kwnames, names, 1, a, &gpu) < 0) return NULL;
    if (bool_arg(a[1], true, &uv) < 0) return mkpy_bad_call("svd", SIG_SVD, args, nargs, kwnames);
    if (mk_linalg_svd(MKARR(a[0]), uv, gpu, r) < 0) return mkpy_raise();
    return uv ? tuple_of(3, r) : mkpy_wrap(r[0]);
}

typedef mk_array *(*fn_a)(mk_array *, bool);
typedef mk_array *(*fn_a_upper)(mk_array *, bool, bool);

static PyObject *call_a(const char *fname, const char *sig, fn_a f, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames) {
    static const char *const names[] = {"a", "*stream", NULL};
    PyObject *a[2];
    bool gpu;
    if (parse(fname, sig, args, nargs, kwnames, names, 1, a, &gpu) < 0) return NULL;
    return mkpy_wrap(f(MKARR(a[0]), gpu));
}

static PyObject *call_a_upper(const char *fname, const char *sig, fn_a_upper f, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "upper", "*stream", NULL};
    PyObject *a[3];
    bool gpu, upper;
    if (parse(fname, sig, args, nargs, kwnames, names, 1, a, &gpu) < 0) return NULL;
    if (bool_arg(a[1], false, &upper) < 0) return mkpy_bad_call(fname, sig, args, nargs, kwnames);
    return mkpy_wrap(f(MKARR(a[0]), upper, gpu));
}

#define A_FN(name)                                                                                    \
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return call_a(#name, SIG1(name, "array"), mk_linalg_##name, args, nargs, kw);                 \
    }
#define UP_FN(name)                                                                                   \
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return call_a_upper(#name, SIG_UP(name), mk_linalg_##name, args, nargs, kw);                  \
    }
A_FN(inv)
A_FN(pinv)
A_FN(det)
UP_FN(tri_inv)
UP_FN(cholesky)
UP_FN(cholesky_inv)

typedef int (*fn_multi)(mk_array *, bool, mk_array **);

static PyObject *call_multi(const char *fname, const char *sig, fn_multi f, int n, PyObject *const *args,
                            Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "*stream", NULL};
    PyObject *a[2];
    mk_array *r[3];
    bool gpu;
    if (parse(fname, sig, args, nargs, kwnames, names, 1, a, &gpu) < 0) return NULL;
    if (f(MKARR(a[0]), gpu, r) < 0) return mkpy_raise();
    return tuple_of(n, r);
}

#define MULTI_FN(name, n, ret)                                                                        \
    MKPY_STREAM_BINDING(py_##name)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {    \
        (void)m;                                                                                       \
        return call_multi(#name, SIG1(name, ret), mk_linalg_##name, n, args, nargs, kw);              \
    }
MULTI_FN(lu, 3, "tuple[array, array, array]")
MULTI_FN(lu_factor, 2, "tuple[array, array]")
MULTI_FN(slogdet, 2, "tuple[array, array]")

/* eig / eigvals */
static PyObject *call_eig(const char *fname, const char *sig, bool vectors, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
    static const char *const names[] = {"a", "*stream", NULL};
    PyObject *a[2];
    mk_array *r[2];
    bool gpu;
    if (parse(fname, sig, args, nargs, kwnames, names, 1, a, &gpu) < 0) return NULL;
    if (mk_linalg_eig(MKARR(a[0]), vectors, gpu, r) < 0) return mkpy_raise();
    return vectors ? tuple_of(2, r) : mkpy_wrap(r[0]);
}

MKPY_STREAM_BINDING(py_eig)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return call_eig("eig", SIG1(eig, "tuple[array, array]"), true, args, nargs, kw);
}

MKPY_STREAM_BINDING(py_eigvals)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return call_eig("eigvals", SIG1(eigvals, "array"), false, args, nargs, kw);
}

/* eigh / eigvalsh (a, UPLO='L') */
static PyObject *call_eigh(const char *fname, const char *sig, bool vectors, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "UPLO", "*stream", NULL};
    PyObject *a[3];
    mk_array *r[2];
    bool gpu;
    char uplo = 'L';
    if (parse(fname, sig, args, nargs, kwnames, names, 1, a, &gpu) < 0) return NULL;
    if (a[1]) {
        if (!PyUnicode_Check(a[1])) return mkpy_bad_call(fname, sig, args, nargs, kwnames);
        const char *s = PyUnicode_AsUTF8(a[1]);
        if (!s) return NULL;
        uplo = s[0] == 'L' ? 'L' : 'U'; /* MLX reads the first letter */
    }
    if (mk_linalg_eigh(MKARR(a[0]), uplo, vectors, gpu, r) < 0) return mkpy_raise();
    return vectors ? tuple_of(2, r) : mkpy_wrap(r[0]);
}

#define SIG_EIGH(name, ret) "    1. " #name "(a: array, UPLO: str = 'L', *, " SOD ") -> " ret

MKPY_STREAM_BINDING(py_eigh)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return call_eigh("eigh", SIG_EIGH(eigh, "tuple[array, array]"), true, args, nargs, kw);
}

MKPY_STREAM_BINDING(py_eigvalsh)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return call_eigh("eigvalsh", SIG_EIGH(eigvalsh, "array"), false, args, nargs, kw);
}

/* ------------------------------------------------------ two-array ops */

#define SIG_SOLVE "    1. solve(a: array, b: array, *, " SOD ") -> array"
#define SIG_SOLVE_TRI "    1. solve_triangular(a: array, b: array, *, upper: bool = False, " SOD ") -> array"
#define SIG_CROSS "    1. cross(a: array, b: array, axis: int = -1, *, " SOD ") -> array"

MKPY_STREAM_BINDING(py_solve)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "*stream", NULL};
    PyObject *a[3];
    bool gpu;
    (void)m;
    if (parse("solve", SIG_SOLVE, args, nargs, kwnames, names, 2, a, &gpu) < 0) return NULL;
    return mkpy_wrap(mk_linalg_solve(MKARR(a[0]), MKARR(a[1]), gpu));
}

MKPY_STREAM_BINDING(py_solve_triangular)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "*upper", "*stream", NULL};
    PyObject *a[4];
    bool gpu, upper;
    (void)m;
    if (parse("solve_triangular", SIG_SOLVE_TRI, args, nargs, kwnames, names, 2, a, &gpu) < 0) return NULL;
    if (bool_arg(a[2], false, &upper) < 0)
        return mkpy_bad_call("solve_triangular", SIG_SOLVE_TRI, args, nargs, kwnames);
    return mkpy_wrap(mk_linalg_solve_triangular(MKARR(a[0]), MKARR(a[1]), upper, gpu));
}

MKPY_STREAM_BINDING(py_cross)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "axis", "*stream", NULL};
    PyObject *a[4];
    bool gpu;
    int axis = -1;
    (void)m;
    if (parse("cross", SIG_CROSS, args, nargs, kwnames, names, 2, a, &gpu) < 0) return NULL;
    if (a[2]) {
        int64_t v;
        if (!PyLong_Check(a[2])) return mkpy_bad_call("cross", SIG_CROSS, args, nargs, kwnames);
        if (mkpy_parse_int(a[2], &v) < 0 || mkpy_int32_value(v, &axis) < 0) return NULL;
    }
    return mkpy_wrap(mk_linalg_cross(MKARR(a[0]), MKARR(a[1]), axis));
}

#define DOC(name, sig, text) {#name, FN(py_##name), FASTKW, #name sig "\n--\n\n" text}

PyMethodDef mkpy_linalg_ns_functions[] = {
    DOC(norm, "(a, /, ord=None, axis=None, keepdims=False, *, stream=None)",
        "Matrix or vector norm: ord None (2-norm of the flattened array or Frobenius norm), a number\n"
        "(vector p-norms; matrix 1, -1, 2, -2, inf, -inf norms), or 'fro' / 'f' / 'nuc'."),
    DOC(qr, "(a, *, stream=None)", "QR factorization of each matrix: (Q, R) with Q (..., M, K), R (..., K, N)."),
    DOC(svd, "(a, compute_uv=True, *, stream=None)",
        "Singular value decomposition: (U, S, Vt) with full U and Vt, or S alone."),
    DOC(inv, "(a, *, stream=None)", "Inverse of each square matrix."),
    DOC(tri_inv, "(a, upper=False, *, stream=None)", "Inverse of each triangular matrix (the other triangle is ignored)."),
    DOC(cholesky, "(a, upper=False, *, stream=None)",
        "Cholesky factor of each symmetric positive definite matrix (lower, or upper)."),
    DOC(cholesky_inv, "(a, upper=False, *, stream=None)",
        "Inverse of A given its Cholesky factor (lower, or upper)."),
    DOC(pinv, "(a, *, stream=None)", "Moore-Penrose pseudo-inverse through the SVD."),
    DOC(cross, "(a, b, axis=-1, *, stream=None)", "Cross product of 2- or 3-vectors along axis."),
    DOC(eigvals, "(a, *, stream=None)", "Eigenvalues of each square matrix (complex64)."),
    DOC(eig, "(a, *, stream=None)", "Eigenvalues and right eigenvectors (columns), complex64."),
    DOC(eigvalsh, "(a, UPLO='L', *, stream=None)", "Eigenvalues of each Hermitian / symmetric matrix, ascending."),
    DOC(eigh, "(a, UPLO='L', *, stream=None)",
        "Eigenvalues (ascending) and eigenvectors (columns) of each Hermitian / symmetric matrix."),
    DOC(lu, "(a, *, stream=None)", "LU factorization with partial pivoting: (P, L, U), P the row indices."),
    DOC(lu_factor, "(a, *, stream=None)", "Packed LU factors and the pivots (LAPACK's, 0-based, uint32)."),
    DOC(solve, "(a, b, *, stream=None)", "Solves a @ x = b."),
    DOC(solve_triangular, "(a, b, *, upper=False, stream=None)", "Solves a @ x = b for triangular a."),
    DOC(det, "(a, *, stream=None)", "Determinant of each square matrix."),
    DOC(slogdet, "(a, *, stream=None)", "Sign and log of the absolute value of each determinant."),
    {NULL},
};

/* ---------------------------------------------------------------- einsum */

#define SIG_EINSUM "    1. einsum(subscripts: str, *operands, " SOD ") -> array"
#define SIG_EINSUM_PATH "    1. einsum_path(subscripts: str, *operands)"

/* subscripts and the operands (arrays) of an einsum call; the operands are
 * borrowed from args. */
static int einsum_args(const char *fname, const char *sig, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames, bool allow_stream, const char **subs, mk_array ***ops) {
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *sobj = nargs > 0 ? args[0] : NULL;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        const char *kw = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        if (!kw) return -1;
        if (allow_stream && !strcmp(kw, "stream")) {
            bool bad;
            if (stream_is_gpu(args[nargs + k], &bad) < 0) {
                if (bad) goto bad;
                return -1;
            }
            if (mkpy_stream_arg(fname, args[nargs + k]) < 0) return -1;
        } else if (!strcmp(kw, "subscripts") && !sobj) {
            sobj = args[nargs + k];
        } else {
            goto bad;
        }
    }
    if (!sobj || !PyUnicode_Check(sobj)) goto bad;
    if (!(*subs = PyUnicode_AsUTF8(sobj))) return -1;
    Py_ssize_t n = nargs > 0 ? nargs - 1 : 0;
    *ops = PyMem_Malloc(sizeof(mk_array *) * (size_t)(n + 1));
    if (!*ops) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyMkArray_Check(args[i + 1])) {
            PyMem_Free(*ops);
            *ops = NULL;
            PyErr_SetString(PyExc_RuntimeError, "std::bad_cast");
            return -1;
        }
        (*ops)[i] = MKARR(args[i + 1]);
    }
    return (int)n;
bad:
    mkpy_bad_call(fname, sig, args, nargs, kwnames);
    return -1;
}

MKPY_STREAM_BINDING(py_einsum)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    const char *subs;
    mk_array **ops;
    (void)m;
    int n = einsum_args("einsum", SIG_EINSUM, args, nargs, kwnames, true, &subs, &ops);
    if (n < 0) return NULL;
    mk_array *r = mk_einsum(subs, n, ops);
    PyMem_Free(ops);
    return mkpy_wrap(r);
}

static PyObject *py_einsum_path(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    const char *subs;
    mk_array **ops;
    int (*path)[2], npath;
    char *report;
    (void)m;
    int n = einsum_args("einsum_path", SIG_EINSUM_PATH, args, nargs, kwnames, false, &subs, &ops);
    if (n < 0) return NULL;
    int rc = mk_einsum_path(subs, n, ops, &path, &npath, &report);
    PyMem_Free(ops);
    if (rc < 0) return mkpy_raise();
    PyObject *list = PyList_New(npath), *res = NULL;
    for (int i = 0; list && i < npath; i++) {
        PyObject *t = path[i][0] >= 0 ? Py_BuildValue("(ii)", path[i][0], path[i][1]) : PyTuple_New(path[i][1]);
        if (t && path[i][0] < 0)
            for (int k = 0; k < path[i][1]; k++) {
                PyObject *v = PyLong_FromLong(k);
                if (!v) {
                    Py_CLEAR(t);
                    break;
                }
                PyTuple_SET_ITEM(t, k, v);
            }
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, t);
    }
    if (list) res = Py_BuildValue("(Ns)", list, report);
    free(path);
    free(report);
    return res;
}

/* block_masked_mm(a, b, /, block_size=64, mask_out=None, mask_lhs=None, mask_rhs=None, *, stream=None) */
#define SIG_BMM                                                                                       \
    "    1. block_masked_mm(a: array, b: array, /, block_size: int = 64, mask_out: Optional[array] = None, " \
    "mask_lhs: Optional[array] = None, mask_rhs: Optional[array] = None, *, " SOD ") -> array"

MKPY_STREAM_BINDING(py_block_masked_mm)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "b", "block_size", "mask_out", "mask_lhs", "mask_rhs", "*stream", NULL};
    PyObject *a[7];
    bool gpu;
    int bs = 64;
    mk_array *masks[3] = {NULL, NULL, NULL};
    (void)m;
    if (parse("block_masked_mm", SIG_BMM, args, nargs, kwnames, names, 2, a, &gpu) < 0) return NULL;
    if (a[2]) {
        int64_t v;
        if (!PyLong_Check(a[2]) || PyBool_Check(a[2]))
            return mkpy_bad_call("block_masked_mm", SIG_BMM, args, nargs, kwnames);
        if (mkpy_parse_int(a[2], &v) < 0 || mkpy_int32_value(v, &bs) < 0) return NULL;
    }
    for (int i = 0; i < 3; i++) {
        PyObject *o = a[3 + i];
        if (!o || o == Py_None) continue;
        if (!PyMkArray_Check(o)) return mkpy_bad_call("block_masked_mm", SIG_BMM, args, nargs, kwnames);
        masks[i] = MKARR(o);
    }
    return mkpy_wrap(mk_block_masked_mm(MKARR(a[0]), MKARR(a[1]), bs, masks[0], masks[1], masks[2]));
}

PyMethodDef mkpy_einsum_functions[] = {
    {"block_masked_mm", FN(py_block_masked_mm), FASTKW,
     "block_masked_mm(a, b, /, block_size=64, mask_out=None, mask_lhs=None, mask_rhs=None, *, stream=None)\n--\n\n"
     "a @ b with block masks (bool or float, one entry per block_size x block_size tile) applied to\n"
     "a (mask_lhs), b (mask_rhs) and the product (mask_out)."},
    {"einsum", FN(py_einsum), FASTKW,
     "einsum(subscripts, *operands, stream=None)\n--\n\n"
     "Einstein summation over the operands (MLX's einsum: ellipses, repeated letters as\n"
     "diagonals, letters of size 1 broadcast; contractions go through matmul)."},
    {"einsum_path", FN(py_einsum_path), FASTKW,
     "einsum_path(subscripts, *operands)\n--\n\n"
     "The contraction order einsum uses, as (list of position tuples, report string)."},
    {NULL},
};
