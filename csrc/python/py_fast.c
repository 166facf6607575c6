/* mkpy.fast: metal_kernel. The factory returns a kernel object; calling it
 * queues a lazy node (nothing is compiled until eval), prints the generated
 * source when verbose=True, and records the Python line of the call so that
 * compile errors can point at it. */
#include <string.h>

#include "core/stream.h"
#include "backend/backend.h"
#include "backend/cpu/check.h"
#include "backend/cuda/cuda.h"
#include "kernel/kernel.h"
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

/* The prefix of this thread's argument errors: "[metal_kernel]", or
 * "[cuda_kernel]" while a cuda_kernel factory or call parses (TAG_SIZES:
 * MLX's "[custom_kernel]" for the size checks of a cuda_kernel call). Set
 * by tag_begin and restored by tag_end around each entry point. */
static _Thread_local const char *kernel_tag;
#define TAG (kernel_tag ? kernel_tag : "[metal_kernel]")
#define TAG_SIZES (kernel_tag ? "[custom_kernel]" : "[metal_kernel]")
static const char *tag_begin(bool cuda) {
    const char *prev = kernel_tag;
    kernel_tag = cuda ? "[cuda_kernel]" : NULL;
    return prev;
}
static void tag_end(const char *prev) { kernel_tag = prev; }

/* PySequence_Fast with a TypeError "<tag> <msg>" for a non-sequence. */
static PyObject *seq_fast(PyObject *o, const char *msg) {
    PyObject *seq = PySequence_Fast(o, "");
    if (!seq && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s %s", TAG, msg);
    }
    return seq;
}

typedef struct {
    PyObject_HEAD
    mkk_kernel *k;
    vectorcallfunc vectorcall;
} PyMkKernel;

static PyTypeObject PyMkKernel_Type;
static PyObject *kernel_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames);

/* ------------------------------------------------------------ helpers */

/* The UTF-8 text of a str (borrowed), refusing what cannot reach the kernel
 * compiler intact: lone surrogates (UnicodeEncodeError) and NUL bytes, which
 * would silently truncate the text (ValueError). */
static const char *utf8_no_nul(PyObject *s, const char *what) {
    Py_ssize_t n;
    const char *u = PyUnicode_AsUTF8AndSize(s, &n);
    if (!u) return NULL;
    if ((size_t)n != strlen(u)) {
        PyErr_Format(PyExc_ValueError, "%s `%s` contains a NUL character.", TAG, what);
        return NULL;
    }
    return u;
}

/* A list/tuple of str -> malloc'd array of borrowed UTF-8 pointers. */
static int str_list(PyObject *obj, const char *what, PyObject **keep, const char ***out, int *n) {
    /* a str is a sequence of characters, not of names (MLX refuses it too) */
    PyObject *seq = PyUnicode_Check(obj) || PyBytes_Check(obj) ? NULL : PySequence_Fast(obj, "");
    if (!seq) {
        PyErr_Format(PyExc_TypeError, "%s `%s` must be a list of strings.", TAG, what);
        return -1;
    }
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    const char **names = PyMem_Calloc(len ? len : 1, sizeof *names);
    if (!names) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyUnicode_Check(s)) {
            PyErr_Format(PyExc_TypeError, "%s `%s` must be a list of strings.", TAG, what);
            names[i] = NULL;
        } else {
            names[i] = utf8_no_nul(s, what);
        }
        if (!names[i]) {
            PyMem_Free(names);
            Py_DECREF(seq);
            return -1;
        }
    }
    if (len > 1000000) {
        PyErr_Format(PyExc_ValueError, "%s Too many `%s` (%zd).", TAG, what, len);
        PyMem_Free(names);
        Py_DECREF(seq);
        return -1;
    }
    *keep = seq;
    *out = names;
    *n = (int)len;
    return 0;
}

/* A str argument; dflt (NULL: required) when absent or None. */
static const char *opt_str(PyObject *o, const char *dflt, const char *what) {
    if (!o || o == Py_None) {
        if (!dflt) PyErr_Format(PyExc_TypeError, "%s `%s` must be a string, not None.", TAG, what);
        return dflt;
    }
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s `%s` must be a string, not %s.", TAG, what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    return utf8_no_nul(o, what);
}

static int parse_options(PyObject *opts, mkk_math_mode *mode, int *allow_non_metal) {
    *mode = MKK_MATH_SAFE;
    const char *env = getenv("MKPY_ALLOW_NON_METAL");
    *allow_non_metal = env && *env && strcmp(env, "0") != 0;
    if (!opts || opts == Py_None) return 0;
    if (!PyDict_Check(opts)) {
        PyErr_SetString(PyExc_ValueError, "[metal_kernel] compile_options must be a dict.");
        return -1;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(opts, &pos, &k, &v)) {
        const char *key = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        if (!key) PyErr_Clear();
        if (key && strcmp(key, "allow_non_metal") == 0) {
            if (!PyBool_Check(v)) {
                PyErr_SetString(PyExc_TypeError, "[metal_kernel] compile option \"allow_non_metal\" must be a bool.");
                return -1;
            }
            *allow_non_metal = v == Py_True;
            continue;
        }
        if (!key || strcmp(key, "math_mode") != 0) {
            PyErr_Format(PyExc_ValueError,
                         "[metal_kernel] Unknown compile option %R. The options are \"math_mode\" and "
                         "\"allow_non_metal\" (mkpy only).",
                         k);
            return -1;
        }
        const char *val = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        if (!val) PyErr_Clear();
        if (val && strcmp(val, "safe") == 0)
            *mode = MKK_MATH_SAFE;
        else if (val && strcmp(val, "relaxed") == 0)
            *mode = MKK_MATH_RELAXED;
        else if (val && strcmp(val, "fast") == 0)
            *mode = MKK_MATH_FAST;
        else {
            PyErr_Format(PyExc_ValueError,
                         "[metal_kernel] Invalid math_mode %R: expected \"safe\", \"relaxed\" or \"fast\".", v);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------ factory */

PyDoc_STRVAR(metal_kernel_doc,
             "metal_kernel(name, input_names, output_names, source, header='', ensure_row_contiguous=True, "
             "atomic_outputs=False, compile_options=None)\n--\n\n"
             "A custom Metal kernel, JIT-compiled from a source string, as ``mlx.core.fast.metal_kernel``.\n\n"
             "``source`` is the *body* of a Metal kernel function: the signature is generated from the\n"
             "inputs, outputs and the Metal attributes (``thread_position_in_grid``, ...) the body uses, byte\n"
             "for byte as MLX generates it (``verbose=True`` at the call prints it). mkpy translates the\n"
             "generated Metal to C++, compiles it with clang when an output is evaluated (cached in memory\n"
             "and on disk) and runs it on the CPU with Metal's execution model. See docs/kernels.md and, for\n"
             "printing, debug builds, MKPY_DEBUG and the profiler, docs/debugging.md.\n\n"
             "Args:\n"
             "    name (str): Name for the kernel (the generated function is ``custom_kernel_<name>``).\n"
             "    input_names (List[str]): The parameter names of the inputs in the function signature. An\n"
             "        input whose name appears in the source with ``_shape``, ``_strides`` or ``_ndim`` also\n"
             "        gets those parameters (``inp_shape[0]``, ...).\n"
             "    output_names (List[str]): The parameter names of the outputs in the function signature.\n"
             "    source (str): The body of the kernel function, in the Metal Shading Language.\n"
             "    header (str): Code put before the function: helper functions, structs, constants.\n"
             "        Default: ``''``.\n"
             "    ensure_row_contiguous (bool): Copy inputs to row-contiguous layout before the kernel runs.\n"
             "        With ``False``, index through ``<input>_strides``. Default: ``True``.\n"
             "    atomic_outputs (bool): Declare outputs as ``device atomic<T>*`` (use\n"
             "        ``atomic_fetch_add_explicit`` and friends on them). Default: ``False``.\n"
             "    compile_options (dict, optional): mkpy only. ``{\"math_mode\": \"safe\" | \"relaxed\" | \"fast\"}``\n"
             "        (Metal's math modes) and ``{\"allow_non_metal\": True}``, which turns off the checks that\n"
             "        refuse what Metal's compiler refuses (``double``, ``printf``, ...; also\n"
             "        ``MKPY_ALLOW_NON_METAL=1``).\n\n"
             "Returns:\n"
             "    MetalKernel: a callable; ``help(kernel.__call__)`` describes its arguments. Calling it\n"
             "    returns a list of lazy output arrays.\n\n"
             "Debugging (mkpy only; docs/debugging.md): ``os_log_default.log(\"x=%f\", x)`` in the source\n"
             "prints on ``sys.stdout`` after the launch, ordered by threadgroup then thread;\n"
             "``MKPY_KERNEL_DEBUG=1`` builds kernels for gdb; ``MKPY_DEBUG=1..3`` logs compiles, launches\n"
             "and sources to stderr; ``mx.metal.start_capture(path)`` profiles.\n\n"
             "Example:\n\n"
             "    >>> source = \"\"\"\n"
             "    ...     uint elem = thread_position_in_grid.x;\n"
             "    ...     out[elem] = metal::exp(inp[elem]);\n"
             "    ... \"\"\"\n"
             "    >>> kernel = mx.fast.metal_kernel(name=\"myexp\", input_names=[\"inp\"],\n"
             "    ...                               output_names=[\"out\"], source=source)\n"
             "    >>> a = mx.array([0.0, 1.0])\n"
             "    >>> (out,) = kernel(inputs=[a], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),\n"
             "    ...                 output_shapes=[a.shape], output_dtypes=[a.dtype])\n");

PyDoc_STRVAR(kernel_call_doc,
             "__call__($self, /, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, "
             "init_value=None, verbose=False, stream=None)\n--\n\n"
             "Run the kernel: returns one lazy array per output name. Nothing is compiled or run until an\n"
             "output is evaluated (``mx.eval``, ``.item()``, printing...); errors (compile errors with your\n"
             "own line numbers, out-of-bounds stores, barrier divergence) are raised then, and name where\n"
             "the generated Metal and translated C++ are on disk.\n\n"
             "Args:\n"
             "    inputs (List[array | scalar]): One value per input name. Python scalars become 0-d\n"
             "        arrays, passed by value (``const constant T& x``).\n"
             "    output_shapes (List[Sequence[int]]): The shape of each output.\n"
             "    output_dtypes (List[Dtype]): The dtype of each output.\n"
             "    grid (tuple[int, int, int]): The number of *threads* in each dimension (Metal's\n"
             "        ``dispatchThreads``; not the number of threadgroups). Entries may be ints or 0-d arrays.\n"
             "    threadgroup (tuple[int, int, int]): Threads per threadgroup; the product is at most 1024.\n"
             "    template (List[tuple[str, bool | int | Dtype]], optional): Template parameters of the\n"
             "        kernel, e.g. ``[(\"T\", mx.float32), (\"N\", 4)]``; each combination compiles once.\n"
             "    init_value (float, optional): Fill every output with this value before the kernel runs.\n"
             "        Without it, outputs start uninitialised, as on a GPU: write every element.\n"
             "    verbose (bool): Print the generated Metal source at the call, and at eval the engine that\n"
             "        runs the kernel and where its sources are on disk. Default: ``False``.\n"
             "    stream (Stream | Device, optional): A GPU stream or device, as MLX's (a CPU one raises\n"
             "        ValueError, as MLX's); kernels run on mkpy's CPU pool.\n\n"
             "Returns:\n"
             "    List[array]: The outputs, in ``output_names`` order.\n\n"
             "Raises:\n"
             "    ValueError, TypeError: Bad arguments (sizes, counts, types), at the call.\n"
             "    RuntimeError: At eval: a compile error, a fault in the kernel, a Metal-only rule broken.");

static PyObject *kernel_mlx_cuda(PyObject *self_o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

static PyObject *kernel_call_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return kernel_vectorcall(self, args, (size_t)nargs, kwnames);
}

static PyMethodDef kernel_methods[] = {
    {"__call__", FN(kernel_call_method), METH_FASTCALL | METH_KEYWORDS, kernel_call_doc},
    {NULL},
};

/* kernel._spec(): the arguments metal_kernel(...) made the kernel with, as a dict of keyword arguments */
static PyObject *kernel_spec(PyObject *self_o, PyObject *unused) {
    (void)unused;
    const mkk_kernel *k = ((PyMkKernel *)self_o)->k;
    static const char *const modes[] = {"safe", "relaxed", "fast"};
    PyObject *in = PyList_New(k->ninputs), *out = PyList_New(k->noutputs);
    if (!in || !out) goto error;
    for (int i = 0; i < k->ninputs; i++) PyList_SET_ITEM(in, i, PyUnicode_FromString(k->input_names[i]));
    for (int i = 0; i < k->noutputs; i++) PyList_SET_ITEM(out, i, PyUnicode_FromString(k->output_names[i]));
    if (PyErr_Occurred()) goto error;
    return Py_BuildValue("{sssNsNsssssOsOs{sssO}}", "name", k->name, "input_names", in, "output_names", out,
                         "source", k->source, "header", k->header, "ensure_row_contiguous",
                         k->ensure_row_contiguous ? Py_True : Py_False, "atomic_outputs",
                         k->atomic_outputs ? Py_True : Py_False, "compile_options", "math_mode",
                         modes[k->math_mode], "allow_non_metal", k->allow_non_metal ? Py_True : Py_False);
error:
    Py_XDECREF(in);
    Py_XDECREF(out);
    return NULL;
}

static PyMethodDef kernel_private_methods[] = {
    {"_mlx_cuda", FN(kernel_mlx_cuda), METH_FASTCALL | METH_KEYWORDS, NULL},
    {"_spec", kernel_spec, METH_NOARGS, NULL},
    {NULL},
};

static PyObject *py_metal_kernel(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"name",   "input_names",           "output_names",   "source",
                                        "header", "ensure_row_contiguous", "atomic_outputs", "compile_options",
                                        NULL};
    PyObject *a[8];
    PyObject *in_keep = NULL, *out_keep = NULL;
    const char **in_names = NULL, **out_names = NULL;
    int nin = 0, nout = 0, erc = 1, atomic = 0, allow_non_metal = 0;
    mkk_math_mode mode;
    PyObject *result = NULL;
    (void)m;
    if (mkpy_parse("metal_kernel", args, nargs, kwnames, names, 4, a) < 0) return NULL;
    const char *name = opt_str(a[0], NULL, "name");
    const char *source = name ? opt_str(a[3], NULL, "source") : NULL;
    const char *header = source ? opt_str(a[4], "", "header") : NULL;
    if (!header) return NULL;
    if (str_list(a[1], "input_names", &in_keep, &in_names, &nin) < 0) goto done;
    if (str_list(a[2], "output_names", &out_keep, &out_names, &nout) < 0) goto done;
    if (mkpy_parse_bool(a[5], 1, &erc) < 0 || mkpy_parse_bool(a[6], 0, &atomic) < 0) goto done;
    if (parse_options(a[7], &mode, &allow_non_metal) < 0) goto done;
    mkk_kernel *k = mkk_kernel_new(name, nin, in_names, nout, out_names, source, header, erc, atomic, mode,
                                   allow_non_metal != 0);
    if (!k) {
        mkpy_raise();
        goto done;
    }
    PyMkKernel *self = PyObject_New(PyMkKernel, &PyMkKernel_Type);
    if (!self) {
        mkk_kernel_decref(k);
        goto done;
    }
    self->k = k;
    self->vectorcall = kernel_vectorcall;
    result = (PyObject *)self;
done:
    PyMem_Free(in_names);
    PyMem_Free(out_names);
    Py_XDECREF(in_keep);
    Py_XDECREF(out_keep);
    return result;
}

/* ------------------------------------------------------------- calling */

/* A grid, threadgroup or output-shape entry, as MLX's int conversion takes
 * it: Python ints, bools and objects with __index__, which include integer mx
 * scalars. Floats (and float mx scalars, e.g. the result of mx.divide) are a
 * TypeError, as in MLX; the value is checked in 64 bits. */
static int dim_value(PyObject *o, const char *what, int64_t *out) {
    if (PyLong_CheckExact(o)) { /* the usual case, first */
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (!overflow) {
            *out = v;
            return 0;
        }
    }
    int is_float_array = PyMkArray_Check(o) && !mk_is_integral(MKARR(o)->dtype);
    /* numbers that are not ints (float, numpy.float32, ...): the same hint */
    int floatlike = !PyMkArray_Check(o) && !PyIndex_Check(o) && Py_TYPE(o)->tp_as_number &&
                    Py_TYPE(o)->tp_as_number->nb_float;
    if (PyFloat_Check(o) || is_float_array || floatlike) {
        const char *tname = is_float_array ? mk_dtypes[MKARR(o)->dtype].name
                            : PyFloat_CheckExact(o) ? "float"
                                                    : Py_TYPE(o)->tp_name;
        PyErr_Format(PyExc_TypeError,
                     "%s `%s` entries must be ints, not a %s%s (as in MLX). For an integer division use "
                     "`//` or mx.floor_divide, e.g. grid=((n + 255) // 256 * 256, 1, 1).",
                     TAG, what, tname, is_float_array ? " scalar" : "");
        return -1;
    }
    if (PyMkArray_Check(o) && MKARR(o)->ndim != 0) {
        PyErr_Format(PyExc_TypeError, "%s `%s` entries must be ints, not an array of %d dimensions.",
                     TAG, what, MKARR(o)->ndim);
        return -1;
    }
    if (!PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s `%s` entries must be ints, not %s.", TAG, what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(o);
    if (!i) return -1;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow) {
        PyErr_Format(PyExc_ValueError, "%s `%s` entry %R is out of range.", TAG, what, o);
        return -1;
    }
    *out = v;
    return 0;
}

static int dims3(PyObject *o, const char *what, int64_t out[3]) {
    PyObject *seq = PyList_Check(o) || PyTuple_Check(o) ? PySequence_Fast(o, "") : NULL;
    if (!seq || PySequence_Fast_GET_SIZE(seq) != 3) {
        Py_XDECREF(seq);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s `%s` must be a tuple of 3 ints.", TAG, what);
        return -1;
    }
    for (int d = 0; d < 3; d++)
        if (dim_value(PySequence_Fast_GET_ITEM(seq, d), what, &out[d]) < 0) {
            Py_DECREF(seq);
            return -1;
        }
    Py_DECREF(seq);
    return 0;
}

/* An output shape: a sequence of ints (dim_value's rules). */
static int out_shape(PyObject *o, int *ndim, int64_t *shape) {
    if (PyUnicode_Check(o) || PyBytes_Check(o) || !PySequence_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s Each of `output_shapes` must be a sequence of ints, not %s.",
                     TAG, Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *seq = seq_fast(o, "Each of `output_shapes` must be a sequence of ints.");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MK_MAX_NDIM) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s Output shapes of more than %d dimensions are not supported.",
                     TAG, MK_MAX_NDIM);
        return -1;
    }
    for (Py_ssize_t d = 0; d < n; d++)
        if (dim_value(PySequence_Fast_GET_ITEM(seq, d), "output_shapes", &shape[d]) < 0) {
            Py_DECREF(seq);
            return -1;
        }
    Py_DECREF(seq);
    *ndim = (int)n;
    return 0;
}

static int expect_size(PyObject *seq, const char *what, int n) {
    Py_ssize_t got = PySequence_Fast_GET_SIZE(seq);
    if (got != n) {
        PyErr_Format(PyExc_ValueError, "%s Expected `%s` to have size %d but got size %zd.",
                     TAG_SIZES, what, n,
                     got);
        return -1;
    }
    return 0;
}

/* The line of frame f. Python computes it from the frame's instruction by
 * walking the code's line table (~600 instructions, 3% of a cached kernel
 * call); a call from a loop asks for the same instruction again, so the last
 * answer is kept (under the GIL). */
static int frame_line(PyFrameObject *f, PyCodeObject *code) {
#if PY_VERSION_HEX >= 0x030B0000
    static PyCodeObject *last_code; /* a reference: its address is not reused while kept */
    static int last_lasti = -1, last_line;
    const int lasti = PyFrame_GetLasti(f);
    if (code && code == last_code && lasti == last_lasti && lasti >= 0) return last_line;
    const int line = PyFrame_GetLineNumber(f);
    if (code) {
        Py_INCREF(code);
        Py_XSETREF(last_code, code);
        last_lasti = lasti;
        last_line = line;
    }
    return line;
#else
    (void)code;
    return PyFrame_GetLineNumber(f);
#endif
}

static char *call_site(void) {
    PyFrameObject *f = PyEval_GetFrame();
    if (!f) return NULL;
    PyCodeObject *code = PyFrame_GetCode(f);
    const char *file = code ? PyUnicode_AsUTF8(code->co_filename) : NULL;
    int line = frame_line(f, code);
    /* "file:line", put together by hand: snprintf was a tenth of a cached
     * kernel call */
    if (!file) file = "<unknown>";
    char digits[16], *d = digits + sizeof digits;
    unsigned u = line < 0 ? 0u - (unsigned)line : (unsigned)line;
    *--d = 0;
    do *--d = (char)('0' + u % 10); while (u /= 10);
    if (line < 0) *--d = '-';
    size_t fn = strlen(file), dn = (size_t)(digits + sizeof digits - 1 - d);
    char *out = malloc(fn + dn + 2);
    if (out) {
        memcpy(out, file, fn);
        out[fn] = ':';
        memcpy(out + fn + 1, d, dn + 1);
    }
    Py_XDECREF(code);
    PyErr_Clear();
    return out;
}

static int write_stdout(const char *text) {
    PyObject *out = PySys_GetObject("stdout");
    if (!out || out == Py_None) return 0;
    PyObject *r = PyObject_CallMethod(out, "write", "s", text);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

/* verbose=True: the generated Metal source on sys.stdout, as MLX prints it */
static int print_generated(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs) {
    char *src, *kname;
    if (mkk_generate(k, c, inputs, &src, &kname) < 0) {
        mkpy_raise();
        return -1;
    }
    size_t len = strlen(src) + strlen(k->name) + strlen(kname) + 64;
    char *text = malloc(len);
    /* MLX's cuda_kernel names the __global__ function (custom_kernel_<name>...) */
    if (text) snprintf(text, len, "Generated source code for `%s`:\n```\n%s\n```\n", k->cuda ? kname : k->name, src);
    free(src);
    free(kname);
    int rc = text ? write_stdout(text) : (PyErr_NoMemory(), -1);
    free(text);
    return rc;
}

static int parse_template(PyObject *obj, mkk_call *c) {
    if (!obj || obj == Py_None) return 0;
    if (!PyList_Check(obj) && !PyTuple_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s `template` must be a list of (name, value) pairs.", TAG);
        return -1;
    }
    PyObject *seq = seq_fast(obj, "`template` must be a list of (name, value) pairs.");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    c->templ = calloc(n ? n : 1, sizeof *c->templ);
    if (!c->templ) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))) {
            PyErr_Format(PyExc_TypeError, "%s `template` must be a list of (name, value) pairs.", TAG);
            Py_DECREF(seq);
            return -1;
        }
        PyObject *v = PyTuple_GET_ITEM(pair, 1);
        mkk_targ *t = &c->templ[i];
        const char *tname = utf8_no_nul(PyTuple_GET_ITEM(pair, 0), "template");
        if (!tname) {
            Py_DECREF(seq);
            return -1;
        }
        if (!(t->name = strdup(tname))) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        c->ntemplate = (int)i + 1;
        if (PyMkDtype_Check(v)) {
            t->kind = MKK_TARG_DTYPE;
            t->value = ((PyMkDtype *)v)->dtype;
            if (t->value == MK_FLOAT64 && !c->allow_non_metal) {
                PyErr_Format(PyExc_ValueError,
                             "[metal_kernel] Template argument `%s` is float64: Metal does not support double "
                             "(use float32).",
                             t->name);
                Py_DECREF(seq);
                return -1;
            }
        } else if (PyBool_Check(v)) {
            t->kind = MKK_TARG_BOOL;
            t->value = v == Py_True;
        } else if (PyLong_Check(v)) {
            t->kind = MKK_TARG_INT;
            int overflow;
            long long iv = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (iv == -1 && PyErr_Occurred()) {
                Py_DECREF(seq);
                return -1;
            }
            /* MLX's template ints are C ints */
            if (overflow || iv < INT32_MIN || iv > INT32_MAX) {
                PyErr_Format(PyExc_ValueError,
                         "%s Invalid template argument. Must be `mlx.core.Dtype`, `int` or `bool`.", TAG);
                Py_DECREF(seq);
                return -1;
            }
            t->value = iv;
        } else {
            PyErr_Format(PyExc_ValueError,
                         "%s Invalid template argument. Must be `mlx.core.Dtype`, `int` or `bool`.", TAG);
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *kernel_call(PyObject *self_o, PyObject *const *args, size_t nargsf, PyObject *kwnames);

/* a stream binding (as MKPY_STREAM_BINDING, for a vectorcall): the call's
 * stream= (mkpy_parse makes it current) lasts for the call */
static PyObject *kernel_vectorcall(PyObject *self_o, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    mk_stream saved = mk_stream_call_begin();
    const char *tag = tag_begin(((PyMkKernel *)self_o)->k->cuda);
    PyObject *r = kernel_call(self_o, args, nargsf, kwnames);
    tag_end(tag);
    mk_stream_call_end(saved);
    return r;
}

/* What a call's arguments after `inputs` fix (a[1..7]: output_shapes,
 * output_dtypes, grid, threadgroup, template, init_value, verbose), checked as
 * MLX checks them, into c, ndims and shapes (k->noutputs each); the generated
 * source is printed when verbose. Returns 0 or -1 with an exception set. */
static int parse_call(mkk_kernel *k, PyObject *const *a, mk_array *const *inputs, mkk_call *c, int *ndims,
                      int64_t (*shapes)[MK_MAX_NDIM]) {
    PyObject *shp_seq = NULL, *dt_seq = NULL;
    int verbose = 0, rc = -1;
    if (!(shp_seq = seq_fast(a[1], "`output_shapes` must be a list.")) ||
        expect_size(shp_seq, "output_shapes", k->noutputs) < 0)
        goto error;
    if (!(dt_seq = seq_fast(a[2], "`output_dtypes` must be a list.")) ||
        expect_size(dt_seq, "output_dtypes", k->noutputs) < 0)
        goto error;
    c->output_dtypes = calloc(k->noutputs, sizeof *c->output_dtypes);
    if (!c->output_dtypes) {
        PyErr_NoMemory();
        goto error;
    }
    c->allow_non_metal = k->allow_non_metal;
    for (int i = 0; i < k->noutputs; i++) {
        if (out_shape(PySequence_Fast_GET_ITEM(shp_seq, i), &ndims[i], shapes[i]) < 0) goto error;
        if (mkpy_parse_dtype(PySequence_Fast_GET_ITEM(dt_seq, i), &c->output_dtypes[i]) < 0) goto error;
    }
    /* MLX's array constructor refuses float64 on a GPU stream */
    if (!k->allow_non_metal) {
        for (int i = 0; i < k->ninputs; i++)
            if (inputs[i]->dtype == MK_FLOAT64) {
                PyErr_SetString(PyExc_ValueError, "float64 is not supported on the GPU");
                goto error;
            }
        for (int i = 0; i < k->noutputs; i++)
            if (c->output_dtypes[i] == MK_FLOAT64) {
                PyErr_SetString(PyExc_ValueError, "float64 is not supported on the GPU");
                goto error;
            }
    }
    if (dims3(a[3], "grid", c->grid) < 0 || dims3(a[4], "threadgroup", c->threadgroup) < 0) goto error;
    if (parse_template(a[5], c) < 0) goto error;
    if (a[6] && a[6] != Py_None) {
        c->has_init = 1;
        c->init_value = PyFloat_AsDouble(a[6]);
        if (c->init_value == -1.0 && PyErr_Occurred()) goto error;
    }
    if (mkpy_parse_bool(a[7], 0, &verbose) < 0) goto error;
    c->verbose = verbose != 0;
    c->call_site = call_site();
    c->check = mkk_check_requested();
    if (verbose && print_generated(k, c, inputs) < 0) goto error;
    rc = 0;
error:
    Py_XDECREF(shp_seq);
    Py_XDECREF(dt_seq);
    return rc;
}

static PyObject *kernel_call(PyObject *self_o, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    static const char *const names[] = {"*inputs",   "*output_shapes", "*output_dtypes", "*grid",  "*threadgroup",
                                        "*template", "*init_value",    "*verbose",       "*stream", NULL};
    PyMkKernel *self = (PyMkKernel *)self_o;
    mkk_kernel *k = self->k;
    PyObject *a[9];
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (mkpy_parse(k->cuda ? "cuda_kernel" : "metal_kernel", args, nargs, kwnames, names, 5, a) < 0) return NULL;

    /* as MLX: an explicit stream must be a GPU one (no stream: the GPU's); cuda_kernel checks the
     * stream, the default one too, after the arguments */
    if (!k->cuda && a[8] && a[8] != Py_None && mk_stream_device(mk_current_stream()) != MK_GPU) {
        PyErr_SetString(PyExc_ValueError, "[metal_kernel] Only supports the GPU.");
        return NULL;
    }
    PyObject *in_seq = NULL, *result = NULL;
    mk_array **inputs = NULL, **outs = NULL;
    int *ndims = NULL;
    int64_t(*shapes)[MK_MAX_NDIM] = NULL;
    void *scratch = NULL; /* shapes, inputs, outs and ndims: one block */
    mkk_call *c = calloc(1, sizeof *c);
    int n_in = 0;
    if (!c) return PyErr_NoMemory();

    if (!(in_seq = seq_fast(a[0], "`inputs` must be a list.")) ||
        expect_size(in_seq, "inputs", k->ninputs) < 0)
        goto error;
    {
        const size_t nin = k->ninputs ? (size_t)k->ninputs : 1, nout = (size_t)k->noutputs;
        if (!(scratch = calloc(1, nout * sizeof *shapes + (nin + nout) * sizeof *inputs + nout * sizeof *ndims))) {
            PyErr_NoMemory();
            goto error;
        }
        shapes = scratch;
        inputs = (mk_array **)(shapes + nout);
        outs = inputs + nin;
        ndims = (int *)(outs + nout);
    }
    for (; n_in < k->ninputs; n_in++) {
        /* Python scalars: float -> float32, int -> int32, bool -> bool */
        if (!(inputs[n_in] = mkpy_to_array(PySequence_Fast_GET_ITEM(in_seq, n_in), -1))) goto error;
    }
    if (parse_call(k, a, inputs, c, ndims, shapes) < 0) goto error;
    if (k->cuda && mk_stream_device(mk_current_stream()) != MK_GPU) {
        PyErr_SetString(PyExc_ValueError, "[custom_kernel] Only supports the GPU.");
        goto error;
    }
    mkk_call *owned = c;
    c = NULL;
    if (mkk_make_outputs(k, owned, inputs, ndims, (const int64_t(*)[MK_MAX_NDIM])shapes, outs) < 0) {
        mkpy_raise();
        goto error;
    }
    result = mkpy_wrap_list(outs, k->noutputs);
error:
    mkk_call_free(c);
    for (int i = 0; i < n_in; i++) mk_decref(inputs[i]);
    free(scratch);
    Py_XDECREF(in_seq);
    return result;
}

/* kernel._mlx_cuda(inputs, output_shapes, output_dtypes, grid, threadgroup,
 * template=None, verbose=False, header=True), for mkpy.cuda.metal_kernel: the
 * call's arguments as __call__ takes them, but each input described by a
 * (Dtype, shape) pair (the arrays are real MLX's). Makes the checks a call and
 * its eval make (Metal-only constructs, launch rules, buffer count) and the
 * limits of MLX's CUDA launch (a block per threadgroup: at most 2^31 - 1
 * threadgroups along x, 65535 along y and z), and returns (source, header or
 * None, input names, output names, grid, threadgroup, name or None) for
 * mx.fast.cuda_kernel (backend/cuda/cuda.h's mkb_cuda_mlx_sources). */
static PyObject *kernel_mlx_cuda(PyObject *self_o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"inputs",   "output_shapes", "output_dtypes", "grid",  "threadgroup",
                                        "template", "verbose",       "header",        NULL};
    mkk_kernel *k = ((PyMkKernel *)self_o)->k;
    PyObject *a[8], *pa[8], *in_seq = NULL, *result = NULL;
    if (mkpy_parse("_mlx_cuda", args, nargs, kwnames, names, 5, a) < 0) return NULL;
    /* parse_call's order: inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value, verbose */
    PyObject *const order[8] = {a[0], a[1], a[2], a[3], a[4], a[5], NULL, a[6]};
    memcpy(pa, order, sizeof pa);
    mk_array *desc = NULL, **inputs = NULL;
    int *ndims = NULL, with_header = 1;
    int64_t(*shapes)[MK_MAX_NDIM] = NULL;
    char *body = NULL, *header = NULL, *mlx_name = NULL;
    mkk_call *c = calloc(1, sizeof *c);
    if (!c) return PyErr_NoMemory();
    if (mkpy_parse_bool(a[7], 1, &with_header) < 0) goto error;
    if (!(in_seq = seq_fast(a[0], "`inputs` must be a list.")) ||
        expect_size(in_seq, "inputs", k->ninputs) < 0)
        goto error;
    desc = calloc(k->ninputs ? k->ninputs : 1, sizeof *desc);
    inputs = calloc(k->ninputs ? k->ninputs : 1, sizeof *inputs);
    ndims = calloc(k->noutputs, sizeof *ndims);
    shapes = calloc(k->noutputs, sizeof *shapes);
    if (!desc || !inputs || !ndims || !shapes) {
        PyErr_NoMemory();
        goto error;
    }
    for (int i = 0; i < k->ninputs; i++) {
        /* a descriptor: the generator and the checks read dtype, ndim and size only */
        PyObject *d = PySequence_Fast_GET_ITEM(in_seq, i);
        mk_array *x = inputs[i] = &desc[i];
        if (!PyTuple_Check(d) || PyTuple_GET_SIZE(d) != 2 ||
            mkpy_parse_dtype(PyTuple_GET_ITEM(d, 0), &x->dtype) < 0 ||
            out_shape(PyTuple_GET_ITEM(d, 1), &x->ndim, x->shape) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_mlx_cuda: inputs are (Dtype, shape) pairs");
            goto error;
        }
        x->size = 1;
        for (int d2 = 0; d2 < x->ndim; d2++) x->size *= x->shape[d2];
    }
    if (parse_call(k, pa, inputs, c, ndims, shapes) < 0) goto error;
    mkk_launch plan;
    uint64_t total;
    if (mkk_check_call(k, c, inputs, &plan, &total) < 0) {
        mkpy_raise();
        goto error;
    }
    for (int d = 0; d < 3; d++) {
        /* MLX's cuda_kernel takes the grid as C ints and rounds it up to whole threadgroups in ints */
        if (c->grid[d] + c->threadgroup[d] - 1 > INT32_MAX) {
            PyErr_Format(PyExc_ValueError,
                         "[metal_kernel] Kernel `%s`: MLX's cuda_kernel takes the grid as 32-bit ints; (%lld, %lld, "
                         "%lld) is too large.",
                         k->name, (long long)c->grid[0], (long long)c->grid[1], (long long)c->grid[2]);
            goto error;
        }
        if (plan.ngroups[d] > (d == 0 ? 0x7fffffffu : 65535u)) {
            PyErr_Format(PyExc_ValueError,
                         "[metal_kernel] Kernel `%s`: MLX's CUDA back-end launches one block per threadgroup, and "
                         "the grid (%lld, %lld, %lld) has %u threadgroups along %c, more than CUDA's %u.",
                         k->name, (long long)c->grid[0], (long long)c->grid[1], (long long)c->grid[2],
                         (unsigned)plan.ngroups[d], "xyz"[d], d == 0 ? 0x7fffffffu : 65535u);
            goto error;
        }
    }
    if (mkb_cuda_mlx_sources(k, c, inputs, &body, with_header ? &header : NULL, &mlx_name) < 0) {
        mkpy_raise();
        goto error;
    }
    PyObject *in_names = PyList_New(k->ninputs + 1), *out_names = PyList_New(k->noutputs);
    if (in_names && out_names) {
        for (int i = 0; i < k->ninputs; i++) PyList_SET_ITEM(in_names, i, PyUnicode_FromFormat(MKB_MLX_INPUT_FMT, i));
        PyList_SET_ITEM(in_names, k->ninputs, PyUnicode_FromString(MKB_MLX_GRID_NAME));
        for (int i = 0; i < k->noutputs; i++)
            PyList_SET_ITEM(out_names, i, PyUnicode_FromFormat(MKB_MLX_OUTPUT_FMT, i));
        if (!PyErr_Occurred())
            result = Py_BuildValue("(sNOO(kkk)(kkk)z)", body,
                                   header ? PyUnicode_FromString(header) : Py_NewRef(Py_None), in_names, out_names,
                                   (unsigned long)plan.grid[0], (unsigned long)plan.grid[1],
                                   (unsigned long)plan.grid[2], (unsigned long)c->threadgroup[0],
                                   (unsigned long)c->threadgroup[1], (unsigned long)c->threadgroup[2], mlx_name);
    }
    Py_XDECREF(in_names);
    Py_XDECREF(out_names);
error:
    mkk_call_free(c);
    free(desc);
    free(inputs);
    free(ndims);
    free(shapes);
    free(body);
    free(header);
    free(mlx_name);
    Py_XDECREF(in_seq);
    return result;
}

static void kernel_dealloc(PyMkKernel *self) {
    if (self->k) mkk_kernel_decref(self->k);
    PyObject_Free(self);
}

static PyObject *kernel_repr(PyMkKernel *self) {
    return PyUnicode_FromFormat(self->k->cuda ? "<cuda_kernel %s>" : "<metal_kernel %s>", self->k->name);
}

static PyTypeObject PyMkKernel_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.fast.MetalKernel",
    .tp_basicsize = sizeof(PyMkKernel),
    .tp_dealloc = (destructor)kernel_dealloc,
    .tp_repr = (reprfunc)kernel_repr,
    .tp_vectorcall_offset = offsetof(PyMkKernel, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_methods = kernel_private_methods,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A Metal kernel made by mx.fast.metal_kernel (see its help). Call it with inputs=,\n"
              "output_shapes=, output_dtypes=, grid=, threadgroup= (and optionally template=,\n"
              "init_value=, verbose=, stream=): help(kernel.__call__) describes them.",
};

/* ------------------------------------------------------------ cuda_kernel */

PyDoc_STRVAR(cuda_kernel_doc,
             "cuda_kernel(name, input_names, output_names, source, header='', ensure_row_contiguous=True, "
             "shared_memory=0)\n--\n\n"
             "A JIT-compiled custom CUDA kernel defined from a source string, as ``mlx.core.fast.cuda_kernel``.\n\n"
             "This is the CUDA equivalent of ``metal_kernel``. ``source`` is the *body* of a CUDA\n"
             "``__global__`` function whose signature is generated as MLX's CUDA back-end writes it\n"
             "(``verbose=True`` at the call prints the program): in namespace ``mlx::core::cu``, after\n"
             "``mlx/backend/cuda/device/utils.cuh`` (``Shape``, ``Strides``, ``elem_to_loc``, ``WARP_SIZE``,\n"
             "...), ``<cooperative_groups.h>`` and ``header``. NVRTC compiles it for the GPU when an output\n"
             "is evaluated (cached in memory and on disk). It needs mkpy's CUDA back-end (an NVIDIA GPU):\n"
             "without one it raises RuntimeError, as MLX built without CUDA. See docs/kernels.md.\n\n"
             "Args:\n"
             "    name (str): Name for the kernel (the function is ``custom_kernel_<name>``).\n"
             "    input_names (List[str]): The parameter names of the inputs in the function signature\n"
             "        (``const T* name``). An input whose name appears in the source with ``_shape``,\n"
             "        ``_strides`` or ``_ndim`` also gets those parameters (``Shape``, ``Strides``, ``int``).\n"
             "    output_names (List[str]): The parameter names of the outputs in the function signature.\n"
             "    source (str): The body of the kernel function, in CUDA C++.\n"
             "    header (str): Code put before the function: includes, helper functions. Default: ``''``.\n"
             "    ensure_row_contiguous (bool): Copy inputs to row-contiguous layout before the kernel runs.\n"
             "        Default: ``True``.\n"
             "    shared_memory (int): The dynamic shared memory to request for the kernel, in bytes\n"
             "        (``extern __shared__``). Default: ``0``.\n\n"
             "Returns:\n"
             "    CudaKernel: a callable; ``help(kernel.__call__)`` describes its arguments.\n\n"
             "Example:\n\n"
             "    >>> source = '''\n"
             "    ...     auto elem = cooperative_groups::this_grid().thread_rank();\n"
             "    ...     out[elem] = exp(inp[elem]);\n"
             "    ... '''\n"
             "    >>> kernel = mx.fast.cuda_kernel(name=\"myexp\", input_names=[\"inp\"],\n"
             "    ...                              output_names=[\"out\"], source=source)\n"
             "    >>> a = mx.array([0.0, 1.0])\n"
             "    >>> (out,) = kernel(inputs=[a], grid=(a.size, 1, 1), threadgroup=(256, 1, 1),\n"
             "    ...                 output_shapes=[a.shape], output_dtypes=[a.dtype])\n");

PyDoc_STRVAR(cuda_kernel_call_doc,
             "__call__($self, /, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, "
             "init_value=None, verbose=False, stream=None)\n--\n\n"
             "Run the kernel: returns one lazy array per output name. The program is compiled (NVRTC) and\n"
             "launched when an output is evaluated; compile errors are raised then, as MLX's RuntimeError\n"
             "\"Failed to compile kernel: <NVRTC's log>.\"\n\n"
             "Args:\n"
             "    inputs (List[array | scalar]): One value per input name, passed as ``const T*`` (Python\n"
             "        scalars become 0-d arrays: float32, int32 or bool).\n"
             "    output_shapes (List[Sequence[int]]): The shape of each output.\n"
             "    output_dtypes (List[Dtype]): The dtype of each output.\n"
             "    grid (tuple[int, int, int]): The grid, in *threads* (as ``metal_kernel``): the launch has\n"
             "        ceil(grid / threadgroup) blocks per dimension.\n"
             "    threadgroup (tuple[int, int, int]): Threads per block (min(threadgroup, grid) per\n"
             "        dimension).\n"
             "    template (List[tuple[str, bool | int | Dtype]], optional): Compile-time constants, written\n"
             "        at the top of the body as ``constexpr int N = 4;``, ``constexpr bool B = true;``,\n"
             "        ``using T = float;``.\n"
             "    init_value (float, optional): Fill every output with this value before the kernel runs.\n"
             "        Without it, outputs start uninitialised. Default: ``None``.\n"
             "    verbose (bool): Print the generated program at the call. Default: ``False``.\n"
             "    stream (Stream | Device, optional): A GPU stream or device (a CPU one raises ValueError,\n"
             "        as MLX's). Default: the default stream.\n\n"
             "Returns:\n"
             "    List[array]: The outputs, in ``output_names`` order.");

static PyObject *cuda_kernel_compile(PyObject *self_o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

static PyMethodDef cuda_kernel_methods[] = {
    {"__call__", FN(kernel_call_method), METH_FASTCALL | METH_KEYWORDS, cuda_kernel_call_doc},
    {NULL},
};

static PyMethodDef cuda_kernel_private_methods[] = {
    {"_compile", FN(cuda_kernel_compile), METH_FASTCALL | METH_KEYWORDS, NULL},
    {NULL},
};

static PyTypeObject PyMkCudaKernel_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.fast.CudaKernel",
    .tp_basicsize = sizeof(PyMkKernel),
    .tp_dealloc = (destructor)kernel_dealloc,
    .tp_repr = (reprfunc)kernel_repr,
    .tp_vectorcall_offset = offsetof(PyMkKernel, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_methods = cuda_kernel_private_methods,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A CUDA kernel made by mx.fast.cuda_kernel (see its help). Call it with inputs=,\n"
              "output_shapes=, output_dtypes=, grid=, threadgroup= (and optionally template=,\n"
              "init_value=, verbose=, stream=): help(kernel.__call__) describes them.",
};

static int cuda_kernel_type_ready(void) {
    if (PyType_Ready(&PyMkCudaKernel_Type) < 0) return -1;
    PyObject *call = PyDescr_NewMethod(&PyMkCudaKernel_Type, &cuda_kernel_methods[0]);
    int rc = call ? PyDict_SetItemString(PyMkCudaKernel_Type.tp_dict, "__call__", call) : -1;
    Py_XDECREF(call);
    PyType_Modified(&PyMkCudaKernel_Type);
    return rc;
}

/* The factory; `checked`: raise as MLX built without CUDA where GPU streams
 * have no CUDA back-end (mkpy.fast._cuda_kernel, for tests, skips that). */
static PyObject *make_cuda_kernel(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, bool checked) {
    static const char *const names[] = {"name",   "input_names",           "output_names",  "source",
                                        "header", "ensure_row_contiguous", "shared_memory", NULL};
    PyObject *a[7], *in_keep = NULL, *out_keep = NULL, *result = NULL;
    const char **in_names = NULL, **out_names = NULL;
    int nin = 0, nout = 0, erc = 1;
    int64_t smem = 0;
    if (mkpy_parse("cuda_kernel", args, nargs, kwnames, names, 4, a) < 0) return NULL;
    const char *name = opt_str(a[0], NULL, "name");
    const char *source = name ? opt_str(a[3], NULL, "source") : NULL;
    const char *header = source ? opt_str(a[4], "", "header") : NULL;
    if (!header) return NULL;
    if (str_list(a[1], "input_names", &in_keep, &in_names, &nin) < 0) goto error;
    if (str_list(a[2], "output_names", &out_keep, &out_names, &nout) < 0) goto error;
    if (mkpy_parse_bool(a[5], 1, &erc) < 0) goto error;
    if (a[6] && a[6] != Py_None && mkpy_parse_int(a[6], &smem) < 0) goto error;
    if (smem < 0 || smem > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "[cuda_kernel] `shared_memory` must be between 0 and %d bytes, not %lld.",
                     INT32_MAX, (long long)smem);
        goto error;
    }
    if (checked && !mkb_for_device(MK_GPU)->cuda_kernel_eval) {
        PyErr_SetString(PyExc_RuntimeError, "[cuda_kernel] No CUDA back-end.");
        goto error;
    }
    mkk_kernel *k = mkk_cuda_kernel_new(name, nin, in_names, nout, out_names, source, header, erc != 0, (int)smem);
    if (!k) {
        mkpy_raise();
        goto error;
    }
    PyMkKernel *self = PyObject_New(PyMkKernel, &PyMkCudaKernel_Type);
    if (!self) {
        mkk_kernel_decref(k);
        goto error;
    }
    self->k = k;
    self->vectorcall = kernel_vectorcall;
    result = (PyObject *)self;
error:
    PyMem_Free(in_names);
    PyMem_Free(out_names);
    Py_XDECREF(in_keep);
    Py_XDECREF(out_keep);
    return result;
}

static PyObject *py_cuda_kernel(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    const char *tag = tag_begin(true);
    PyObject *r = make_cuda_kernel(args, nargs, kwnames, true);
    tag_end(tag);
    return r;
}

static PyObject *py_cuda_kernel_unchecked(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *kwnames) {
    (void)m;
    const char *tag = tag_begin(true);
    PyObject *r = make_cuda_kernel(args, nargs, kwnames, false);
    tag_end(tag);
    return r;
}

/* kernel._compile(sm, *, inputs, output_shapes, output_dtypes, grid,
 * threadgroup, template=None), for tests on machines without a GPU: the
 * call's program, compiled with NVRTC for sm_<sm> as an eval compiles it
 * (same caches). Returns (program, kernel name, lowered name, CUBIN bytes). */
static PyObject *cuda_kernel_compile_impl(PyObject *self_o, PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *kwnames) {
    static const char *const names[] = {"sm",          "*inputs",   "*output_shapes", "*output_dtypes", "*grid",
                                        "*threadgroup", "*template", NULL};
    mkk_kernel *k = ((PyMkKernel *)self_o)->k;
    PyObject *a[7], *in_seq = NULL, *result = NULL;
    if (mkpy_parse("_compile", args, nargs, kwnames, names, 6, a) < 0) return NULL;
    PyObject *const pa[8] = {a[1], a[2], a[3], a[4], a[5], a[6], NULL, NULL};
    int64_t sm;
    mk_array **inputs = NULL;
    int *ndims = NULL, n_in = 0;
    int64_t(*shapes)[MK_MAX_NDIM] = NULL;
    char *program = NULL, *kname = NULL, *lowered = NULL;
    mkb_cuda_image img = {0};
    mkk_call *c = calloc(1, sizeof *c);
    if (!c) return PyErr_NoMemory();
    if (mkpy_parse_int(a[0], &sm) < 0) goto error;
    if (!(in_seq = seq_fast(a[1], "`inputs` must be a list.")) || expect_size(in_seq, "inputs", k->ninputs) < 0)
        goto error;
    inputs = calloc(k->ninputs ? k->ninputs : 1, sizeof *inputs);
    ndims = calloc(k->noutputs, sizeof *ndims);
    shapes = calloc(k->noutputs, sizeof *shapes);
    if (!inputs || !ndims || !shapes) {
        PyErr_NoMemory();
        goto error;
    }
    for (; n_in < k->ninputs; n_in++)
        if (!(inputs[n_in] = mkpy_to_array(PySequence_Fast_GET_ITEM(in_seq, n_in), -1))) goto error;
    if (parse_call(k, pa, inputs, c, ndims, shapes) < 0) goto error;
    int rc;
    if (mkk_generate(k, c, inputs, &program, &kname) < 0) {
        mkpy_raise();
        goto error;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = mkb_cuda_build_user(program, kname, (int)sm, &img, &lowered);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        mkpy_raise();
        goto error;
    }
    result = Py_BuildValue("(sssn)", program, kname, lowered, (Py_ssize_t)img.size);
error:
    mkb_cuda_image_free(&img);
    free(program);
    free(kname);
    free(lowered);
    mkk_call_free(c);
    for (int i = 0; i < n_in; i++) mk_decref(inputs[i]);
    free(inputs);
    free(ndims);
    free(shapes);
    Py_XDECREF(in_seq);
    return result;
}

static PyObject *cuda_kernel_compile(PyObject *self_o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    const char *tag = tag_begin(true);
    PyObject *r = cuda_kernel_compile_impl(self_o, args, nargs, kwnames);
    tag_end(tag);
    return r;
}

/* Messages of the kernel layer (verbose=True at eval time, what kernels
 * print) go to Python's sys.stdout, so that they show in notebook cells; its
 * warnings (an untrusted cache folder) become RuntimeWarnings. Both come
 * from threads that released the GIL and may hold kernel-layer state: they
 * are deferred until the thread holds the GIL again (py_defer.c). */
static void report_stdout(const char *text) { mkpy_defer_print(text); }
static void report_warning(const char *text) { mkpy_defer_warning(text); }

int mkpy_fast_init(void) {
    mkk_set_reporter(report_stdout);
    mkk_set_warner(report_warning);
    mkk_watchdog_start(); /* at import, so that the process's threads are all there from the start */
    if (PyType_Ready(&PyMkKernel_Type) < 0 || cuda_kernel_type_ready() < 0) return -1;
    /* __call__ with its documentation (PyType_Ready put the slot wrapper, "Call self as a function.",
     * there first) */
    PyObject *call = PyDescr_NewMethod(&PyMkKernel_Type, &kernel_methods[0]);
    int rc = call ? PyDict_SetItemString(PyMkKernel_Type.tp_dict, "__call__", call) : -1;
    Py_XDECREF(call);
    PyType_Modified(&PyMkKernel_Type);
    return rc;
}

/* ------------------------------------------------- cache introspection */

static PyObject *py_kernel_cache_info(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    mkk_cache_stats s;
    mkk_disk_info d;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mkk_disk_cache(false, &d);
    Py_END_ALLOW_THREADS
    mkpy_flush_deferred();
    if (rc < 0) return mkpy_raise();
    mkk_cache_info(&s);
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:s,s:L,s:L}", "memory_hits", (long long)s.memory_hits, "disk_hits",
                         (long long)s.disk_hits, "compiles", (long long)s.compiles, "entries", (long long)s.entries,
                         "dir", d.dir, "bytes", (long long)d.bytes, "loaded", (long long)s.loaded);
}

/* mkpy.__main__'s `cache` command: the disk cache's folder, size, entries
 * and hit counts (of every process since the last clear); clear=True empties
 * it first. */
static PyObject *py_disk_cache(PyObject *m, PyObject *arg) {
    (void)m;
    int clear = PyObject_IsTrue(arg);
    if (clear < 0) return NULL;
    mkk_disk_info d;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mkk_disk_cache(clear, &d);
    Py_END_ALLOW_THREADS
    mkpy_flush_deferred();
    if (rc < 0) return mkpy_raise();
    return Py_BuildValue("{s:s,s:L,s:L,s:L,s:L,s:L}", "dir", d.dir, "bytes", (long long)d.bytes, "entries",
                         (long long)d.entries, "hits", (long long)d.hits, "misses", (long long)d.misses, "max_bytes",
                         (long long)d.max_bytes);
}

static PyObject *py_clear_kernel_cache(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    mkk_cache_clear_memory();
    Py_RETURN_NONE;
}

static PyObject *py_set_runtime_dir(PyObject *m, PyObject *arg) {
    (void)m;
    const char *s = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (!s) {
        PyErr_SetString(PyExc_TypeError, "_set_runtime_dir(path: str)");
        return NULL;
    }
    mkk_set_runtime_dir(s);
    Py_RETURN_NONE;
}

static PyObject *py_precompile_runtime(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    char msg[4600];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mkk_prepare(msg, sizeof msg);
    Py_END_ALLOW_THREADS
    mkpy_flush_deferred();
    if (rc < 0) return PyErr_Format(PyExc_RuntimeError, "[precompile_runtime] %s", msg);
    return PyUnicode_FromString(msg);
}

/* mkpy.metal._launch_geometry(grid, threadgroup, group): the dispatcher's
 * arithmetic for one launch, for tests (grids near 2^32 without running 4
 * billion threads): ((ngroups), total groups, (threads of linear group
 * `group` per dimension), (its first thread's position)). */
static PyObject *py_launch_geometry(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    int64_t grid[3], tg[3], g;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_launch_geometry(grid, threadgroup, group)");
        return NULL;
    }
    if (dims3(args[0], "grid", grid) < 0 || dims3(args[1], "threadgroup", tg) < 0) return NULL;
    if (mkpy_parse_int(args[2], &g) < 0) return NULL;
    mkk_launch L;
    uint64_t total;
    if (mkk_plan_launch("_launch_geometry", grid, tg, &L, &total) < 0) return mkpy_raise();
    if (g < 0 || (uint64_t)g >= total) {
        PyErr_SetString(PyExc_IndexError, "group out of range");
        return NULL;
    }
    /* linear group -> position, as mkpy::group_attrs */
    const uint64_t nx = L.ngroups[0], ny = L.ngroups[1];
    const uint64_t b[3] = {(uint64_t)g % nx, ((uint64_t)g / nx) % ny, (uint64_t)g / (nx * ny)};
    uint32_t ext[3];
    uint64_t origin[3];
    for (int d = 0; d < 3; d++) {
        ext[d] = mkpy_group_extent(L.grid[d], L.tg[d], b[d]);
        origin[d] = b[d] * L.tg[d];
    }
    return Py_BuildValue("((kkk)K(kkk)(KKK))", (unsigned long)L.ngroups[0], (unsigned long)L.ngroups[1],
                         (unsigned long)L.ngroups[2], (unsigned long long)total, (unsigned long)ext[0],
                         (unsigned long)ext[1], (unsigned long)ext[2], (unsigned long long)origin[0],
                         (unsigned long long)origin[1], (unsigned long long)origin[2]);
}

PyMethodDef mkpy_fast_functions[] = {
    {"metal_kernel", FN(py_metal_kernel), FASTKW, metal_kernel_doc},
    {"cuda_kernel", FN(py_cuda_kernel), FASTKW, cuda_kernel_doc},
    {"_cuda_kernel", FN(py_cuda_kernel_unchecked), FASTKW, NULL},
    {NULL},
};

PyMethodDef mkpy_kernel_cache_functions[] = {
    {"kernel_cache_info", py_kernel_cache_info, METH_NOARGS,
     "kernel_cache_info()\n--\n\nKernel cache counters: memory_hits, disk_hits, compiles, entries (kernels held in "
     "memory),\nloaded (of those, how many are loaded now), dir (the disk cache folder) and bytes (its size)."},
    {"clear_kernel_cache", py_clear_kernel_cache, METH_NOARGS,
     "clear_kernel_cache()\n--\n\nForget compiled kernels held in memory (the disk cache stays)."},
    {"precompile_runtime", py_precompile_runtime, METH_NOARGS,
     "precompile_runtime()\n--\n\nmkpy only: build the precompiled kernel runtime header of each math mode beside "
     "the\nheaders (`make build` does this), so that the first kernel of every process compiles\nin about half the "
     "time. Returns a message saying what was built."},
    {"_set_runtime_dir", py_set_runtime_dir, METH_O, NULL},
    {"_disk_cache", py_disk_cache, METH_O, NULL},
    {"_launch_geometry", (PyCFunction)(void (*)(void))py_launch_geometry, METH_FASTCALL, NULL},
    {NULL},
};
