/* Devices and streams (mkpy.Device, DeviceType, Stream, ThreadLocalStream,
 * StreamContext and the functions around them), as MLX's python/src/device.cpp
 * and stream.cpp, over the core's state (core/stream.h).
 *
 * The `stream=` argument of an op: mkpy_parse resolves it (None: nothing;
 * a Stream; a Device or DeviceType: this thread's default stream of it; a
 * ThreadLocalStream: this thread's stream for it) and makes it the core's
 * current-stream override, so every node the op makes records it. The
 * override lasts for the call: the bindings that take stream= are defined
 * with MKPY_STREAM_BINDING (mkpy.h), which restores the override when the
 * call returns, whatever path it returns by; mkpy_stream_arg refuses to set
 * it outside such a call (docs/design.md, "Stream scope"). */

#include "core/stream.h"
#include "mkpy.h"

#define FN(f) (PyCFunction)(void (*)(void))(f)
#define FASTKW METH_FASTCALL | METH_KEYWORDS

static PyObject *DeviceType;        /* the enum class */
static PyObject *dt_members[2];      /* DeviceType.cpu, DeviceType.gpu */

/* ------------------------------------------------------------- DeviceType */

static int make_device_type(PyObject *m) {
    static const char src[] =
        "import enum\n"
        "class DeviceType(enum.Enum):\n"
        "    cpu = 0\n"
        "    gpu = 1\n"
        "    def __repr__(self):\n"
        "        return 'DeviceType.' + self.name\n"
        "    __str__ = __repr__\n"
        "DeviceType.__module__ = 'mkpy'\n"
        "DeviceType.__doc__ = 'The type of a device: mkpy.cpu or mkpy.gpu.'\n";
    PyObject *ns = PyDict_New(), *r = NULL;
    if (!ns) return -1;
    if (PyDict_SetItemString(ns, "__builtins__", PyEval_GetBuiltins()) < 0) goto error;
    if (!(r = PyRun_String(src, Py_file_input, ns, ns))) goto error;
    Py_DECREF(r);
    DeviceType = PyDict_GetItemString(ns, "DeviceType");
    if (!DeviceType) goto error;
    Py_INCREF(DeviceType);
    if (!(dt_members[0] = PyObject_GetAttrString(DeviceType, "cpu")) ||
        !(dt_members[1] = PyObject_GetAttrString(DeviceType, "gpu")))
        goto error;
    Py_DECREF(ns);
    if (PyModule_AddObjectRef(m, "DeviceType", DeviceType) < 0 || PyModule_AddObjectRef(m, "cpu", dt_members[0]) < 0 ||
        PyModule_AddObjectRef(m, "gpu", dt_members[1]) < 0)
        return -1;
    return 0;
error:
    Py_DECREF(ns);
    return -1;
}

/* 0 / 1 for DeviceType.cpu / .gpu, -1 (no error set) for anything else. */
static int device_type_of(PyObject *o) {
    if (o == dt_members[0]) return MK_CPU;
    if (o == dt_members[1]) return MK_GPU;
    return -1;
}

/* ----------------------------------------------------------------- Device */

typedef struct {
    PyObject_HEAD
    int type;
    int index;
} PyMkDevice;

static PyTypeObject PyMkDevice_Type;

static PyObject *device_new_obj(int type, int index) {
    PyMkDevice *d = PyObject_New(PyMkDevice, &PyMkDevice_Type);
    if (!d) return NULL;
    d->type = type;
    d->index = index;
    return (PyObject *)d;
}

static const char device_init_sig[] = "    1. __init__(self, type: mkpy.DeviceType, index: int = 0) -> None";

static PyObject *device_tp_new(PyTypeObject *t, PyObject *args, PyObject *kw) {
    static char *names[] = {"type", "index", NULL};
    PyObject *type = NULL, *index = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:Device", names, &type, &index)) return NULL;
    int ty = device_type_of(type);
    /* nanobind converts the enum's values 0 and 1 */
    if (ty < 0 && PyLong_CheckExact(type)) {
        long v = PyLong_AsLong(type);
        if (v == 0 || v == 1) ty = (int)v;
        PyErr_Clear();
    }
    long ix = 0;
    if (index) {
        if (!PyLong_Check(index) || PyBool_Check(index)) ty = -1;
        else if ((ix = PyLong_AsLong(index)) == -1 && PyErr_Occurred()) return NULL;
        else if (ix < INT32_MIN || ix > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "Device index %ld is out of range.", ix);
            return NULL;
        }
    }
    if (ty < 0) {
        PyObject *all = PyTuple_New(1 + PyTuple_GET_SIZE(args));
        if (!all) return NULL;
        PyTuple_SET_ITEM(all, 0, Py_NewRef((PyObject *)t));
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++)
            PyTuple_SET_ITEM(all, i + 1, Py_NewRef(PyTuple_GET_ITEM(args, i)));
        /* nanobind lists self among the types; the instance is not made yet */
        PyObject *r = mkpy_bad_call("__init__", device_init_sig, &PyTuple_GET_ITEM(all, 0), PyTuple_GET_SIZE(all),
                                    NULL);
        Py_DECREF(all);
        (void)r;
        return NULL;
    }
    PyMkDevice *d = (PyMkDevice *)t->tp_alloc(t, 0);
    if (!d) return NULL;
    d->type = ty;
    d->index = (int)ix;
    return (PyObject *)d;
}

static PyObject *device_repr(PyObject *o) {
    PyMkDevice *d = (PyMkDevice *)o;
    return PyUnicode_FromFormat("Device(%s, %d)", mk_device_name(d->type), d->index);
}

static PyObject *device_richcompare(PyObject *a, PyObject *b, int op) {
    if (op != Py_EQ && op != Py_NE) Py_RETURN_NOTIMPLEMENTED;
    PyMkDevice *x = (PyMkDevice *)a;
    int ty, ix = 0;
    if (PyObject_TypeCheck(b, &PyMkDevice_Type)) {
        ty = ((PyMkDevice *)b)->type;
        ix = ((PyMkDevice *)b)->index;
    } else if ((ty = device_type_of(b)) < 0) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    bool eq = x->type == ty && x->index == ix;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static Py_hash_t device_hash(PyObject *o) {
    PyMkDevice *d = (PyMkDevice *)o;
    Py_hash_t h = (Py_hash_t)d->index * 1000003 + d->type + 17;
    return h == -1 ? -2 : h;
}

static PyObject *device_get_type(PyObject *o, void *c) {
    (void)c;
    return Py_NewRef(dt_members[((PyMkDevice *)o)->type]);
}

static PyObject *device_get_index(PyObject *o, void *c) {
    (void)c;
    return PyLong_FromLong(((PyMkDevice *)o)->index);
}

static PyGetSetDef device_getset[] = {
    {"type", device_get_type, NULL, "The device's type: mkpy.cpu or mkpy.gpu.", NULL},
    {"index", device_get_index, NULL, "The device's index (0: mkpy has one device of each type).", NULL},
    {NULL},
};

static PyTypeObject PyMkDevice_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.Device",
    .tp_basicsize = sizeof(PyMkDevice),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("Device(type, index=0)\n--\n\nA device: ``Device(mkpy.gpu, 0)``. mkpy's CPU back-end serves "
                        "both types; a GPU stream keeps MLX's rules (no float64, CPU-only linalg refused)."),
    .tp_new = device_tp_new,
    .tp_repr = device_repr,
    .tp_richcompare = device_richcompare,
    .tp_hash = device_hash,
    .tp_getset = device_getset,
};

/* ----------------------------------------------------------------- Stream */

typedef struct {
    PyObject_HEAD
    mk_stream s;
} PyMkStream;

typedef struct {
    PyObject_HEAD
    int64_t tls;
    int type;
} PyMkTLStream;

static PyTypeObject PyMkStream_Type, PyMkTLStream_Type;

static PyObject *stream_wrap(mk_stream s) {
    if (s == MK_STREAM_NONE) return mkpy_raise();
    PyMkStream *o = PyObject_New(PyMkStream, &PyMkStream_Type);
    if (!o) return NULL;
    o->s = s;
    return (PyObject *)o;
}

static PyObject *no_constructor(PyTypeObject *t, PyObject *args, PyObject *kw) {
    (void)args;
    (void)kw;
    PyErr_Format(PyExc_TypeError, "%s: no constructor defined!", t->tp_name);
    return NULL;
}

static PyObject *stream_repr(PyObject *o) {
    mk_stream s = ((PyMkStream *)o)->s;
    return PyUnicode_FromFormat("Stream(Device(%s, 0), %u)", mk_device_name(mk_stream_device(s)),
                                (unsigned)mk_stream_index(s));
}

static PyObject *stream_richcompare(PyObject *a, PyObject *b, int op) {
    if (op != Py_EQ && op != Py_NE) Py_RETURN_NOTIMPLEMENTED;
    bool eq = PyObject_TypeCheck(b, &PyMkStream_Type) && ((PyMkStream *)a)->s == ((PyMkStream *)b)->s;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

/* by value, consistent with ==: MLX's Stream hashes by identity, so two
 * equal streams there hash apart (see docs/design.md) */
static Py_hash_t stream_hash(PyObject *o) {
    Py_hash_t h = (Py_hash_t)((PyMkStream *)o)->s * 2654435761u + 3;
    return h == -1 ? -2 : h;
}

static PyObject *stream_get_device(PyObject *o, void *c) {
    (void)c;
    return device_new_obj(mk_stream_device(((PyMkStream *)o)->s), 0);
}

static PyObject *stream_get_index(PyObject *o, void *c) {
    (void)c;
    return PyLong_FromUnsignedLong(mk_stream_index(((PyMkStream *)o)->s));
}

static PyGetSetDef stream_getset[] = {
    {"device", stream_get_device, NULL, "The stream's device.", NULL},
    {"index", stream_get_index, NULL, "The stream's index, counted over the process as MLX's.", NULL},
    {NULL},
};

static PyTypeObject PyMkStream_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.Stream",
    .tp_basicsize = sizeof(PyMkStream),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("A stream for running operations on a given device (made by new_stream, default_stream)."),
    .tp_new = no_constructor,
    .tp_repr = stream_repr,
    .tp_richcompare = stream_richcompare,
    .tp_hash = stream_hash,
    .tp_getset = stream_getset,
};

static PyObject *tls_repr(PyObject *o) {
    PyMkTLStream *t = (PyMkTLStream *)o;
    return PyUnicode_FromFormat("ThreadLocalStream(Device(%s, 0), %lld)", mk_device_name(t->type), (long long)t->tls);
}

static PyObject *tls_richcompare(PyObject *a, PyObject *b, int op) {
    if (op != Py_EQ && op != Py_NE) Py_RETURN_NOTIMPLEMENTED;
    bool eq = PyObject_TypeCheck(b, &PyMkTLStream_Type) && ((PyMkTLStream *)a)->tls == ((PyMkTLStream *)b)->tls &&
              ((PyMkTLStream *)a)->type == ((PyMkTLStream *)b)->type;
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static Py_hash_t tls_hash(PyObject *o) {
    PyMkTLStream *t = (PyMkTLStream *)o;
    Py_hash_t h = (Py_hash_t)t->tls * 1000003 + t->type + 5;
    return h == -1 ? -2 : h;
}

static PyObject *tls_get_device(PyObject *o, void *c) {
    (void)c;
    return device_new_obj(((PyMkTLStream *)o)->type, 0);
}

static PyGetSetDef tls_getset[] = {
    {"device", tls_get_device, NULL, "The stream's device.", NULL},
    {NULL},
};

static PyTypeObject PyMkTLStream_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.ThreadLocalStream",
    .tp_basicsize = sizeof(PyMkTLStream),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("A stream that is unique per thread: each thread that uses it runs on a stream of its own."),
    .tp_new = no_constructor,
    .tp_repr = tls_repr,
    .tp_richcompare = tls_richcompare,
    .tp_hash = tls_hash,
    .tp_getset = tls_getset,
};

/* ------------------------------------------------------------ resolution */

/* A Device or DeviceType argument: 0 with *type set, 1 when o is neither
 * (no error set), -1 with an error (a device index that does not exist). */
static int device_arg(PyObject *o, const char *fname, int *type) {
    if (PyObject_TypeCheck(o, &PyMkDevice_Type)) {
        PyMkDevice *d = (PyMkDevice *)o;
        if (d->index != 0) {
            PyErr_Format(PyExc_IndexError, "[%s] There is no Device(%s, %d): mkpy has one device of each type.",
                         fname, mk_device_name(d->type), d->index);
            return -1;
        }
        *type = d->type;
        return 0;
    }
    int t = device_type_of(o);
    if (t < 0) return 1;
    *type = t;
    return 0;
}

/* MLX's to_stream: 1 with *out set, 0 for None (nothing to resolve), -1 with
 * an error; *bad is set (no error) when o is of none of the types. */
static int resolve(PyObject *o, const char *fname, mk_stream *out, bool *bad) {
    *bad = false;
    if (!o || o == Py_None) return 0;
    if (PyObject_TypeCheck(o, &PyMkStream_Type)) {
        *out = ((PyMkStream *)o)->s;
        return 1;
    }
    if (PyObject_TypeCheck(o, &PyMkTLStream_Type)) {
        PyMkTLStream *t = (PyMkTLStream *)o;
        *out = mk_stream_from_thread_local(t->tls, t->type);
        if (*out == MK_STREAM_NONE) return mkpy_raise(), -1;
        return 1;
    }
    int type, r = device_arg(o, fname, &type);
    if (r < 0) return -1;
    if (r > 0) {
        *bad = true;
        return -1;
    }
    *out = mk_default_stream(type);
    if (*out == MK_STREAM_NONE) return mkpy_raise(), -1;
    return 1;
}

/* The TypeError for a stream= argument that is not a stream or device (MLX's
 * StreamOrDevice caster). */
static void bad_stream(const char *fname, PyObject *o) {
    PyObject *tn = mkpy_type_name(o);
    if (tn)
        PyErr_Format(PyExc_TypeError,
                     "%s(): incompatible function arguments: stream must be a Stream, ThreadLocalStream, Device, "
                     "DeviceType or None (StreamOrDevice), not %U.",
                     fname, tn);
    Py_XDECREF(tn);
}

int mkpy_stream_arg(const char *fname, PyObject *o) {
    mk_stream s;
    bool bad;
    if (!o || o == Py_None) return 0;
    /* the override would outlive the call: a binding taking stream= must be
     * a MKPY_STREAM_BINDING */
    if (!mk_stream_in_call()) {
        PyErr_Format(PyExc_SystemError,
                     "%s(): stream= set outside a stream binding call (declare the binding with "
                     "MKPY_STREAM_BINDING)",
                     fname);
        return -1;
    }
    int r = resolve(o, fname, &s, &bad);
    if (r < 0) {
        if (bad) bad_stream(fname, o);
        return -1;
    }
    if (r > 0) mk_stream_scope(s);
    return 0;
}

int mkpy_stream_resolve(const char *fname, PyObject *o, mk_stream *out) {
    bool bad;
    int r = resolve(o, fname, out, &bad);
    if (r == 0) {
        *out = mk_default_stream(mk_default_device());
        if (*out == MK_STREAM_NONE) return mkpy_raise(), -1;
        return 0;
    }
    if (r < 0 && bad) bad_stream(fname, o);
    return r < 0 ? -1 : 0;
}

int mkpy_stream_is_gpu(PyObject *s, bool *bad) {
    mk_stream st;
    int r = resolve(s, "stream", &st, bad);
    if (r < 0) return -1;
    if (r == 0) {
        st = mk_current_stream();
        if (st == MK_STREAM_NONE) return mkpy_raise(), -1;
    }
    return mk_stream_device(st) == MK_GPU;
}

/* ------------------------------------------------------------- functions */

#define DEVICE_SIG(f) "    1. " f "(device: Device | DeviceType) -> "

/* The one Device | DeviceType argument of a function; -1 with the error. */
static int one_device(const char *fname, const char *sig, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                      int *type) {
    static const char *const names[] = {"device", NULL};
    PyObject *a[1];
    if (nargs > 1 || mkpy_parse(fname, args, nargs, kwnames, names, 1, a) < 0) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            mkpy_bad_call(fname, sig, args, nargs, kwnames);
        }
        return -1;
    }
    int r = device_arg(a[0], fname, type);
    if (r > 0) mkpy_bad_call(fname, sig, args, nargs, kwnames);
    return r == 0 ? 0 : -1;
}

static PyObject *py_default_device(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return device_new_obj(mk_default_device(), 0);
}

static PyObject *py_set_default_device(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    int type;
    if (one_device("set_default_device", DEVICE_SIG("set_default_device") "None", args, nargs, kwnames, &type) < 0)
        return NULL;
    mk_set_default_device(type);
    Py_RETURN_NONE;
}

static PyObject *py_default_stream(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    int type;
    if (one_device("default_stream", DEVICE_SIG("default_stream") "Stream", args, nargs, kwnames, &type) < 0)
        return NULL;
    return stream_wrap(mk_default_stream(type));
}

static PyObject *py_new_stream(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    int type;
    if (one_device("new_stream", DEVICE_SIG("new_stream") "Stream", args, nargs, kwnames, &type) < 0) return NULL;
    return stream_wrap(mk_new_stream(type));
}

static PyObject *py_new_thread_unsafe_stream(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                             PyObject *kwnames) {
    (void)m;
    int type;
    if (one_device("new_thread_unsafe_stream", DEVICE_SIG("new_thread_unsafe_stream") "Stream", args, nargs,
                   kwnames, &type) < 0)
        return NULL;
    return stream_wrap(mk_new_thread_unsafe_stream(type));
}

static PyObject *py_new_thread_local_stream(PyObject *m, PyObject *const *args, Py_ssize_t nargs,
                                            PyObject *kwnames) {
    (void)m;
    int type;
    if (one_device("new_thread_local_stream", DEVICE_SIG("new_thread_local_stream") "ThreadLocalStream", args, nargs,
                   kwnames, &type) < 0)
        return NULL;
    PyMkTLStream *t = PyObject_New(PyMkTLStream, &PyMkTLStream_Type);
    if (!t) return NULL;
    t->tls = mk_new_thread_local_stream();
    t->type = type;
    return (PyObject *)t;
}

static PyObject *py_set_default_stream(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    static const char *const names[] = {"stream", NULL};
    static const char sig[] = "    1. set_default_stream(stream: mkpy.Stream) -> None";
    PyObject *a[1];
    /* not through mkpy_parse: its "stream" would become the op override */
    if (nargs == 1 && !kwnames) {
        a[0] = args[0];
    } else if (nargs == 0 && kwnames && PyTuple_GET_SIZE(kwnames) == 1 &&
               PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), names[0]) == 0) {
        a[0] = args[0];
    } else {
        return mkpy_bad_call("set_default_stream", sig, args, nargs, kwnames);
    }
    if (!PyObject_TypeCheck(a[0], &PyMkStream_Type)) return mkpy_bad_call("set_default_stream", sig, args, nargs, kwnames);
    mk_set_default_stream(((PyMkStream *)a[0])->s);
    Py_RETURN_NONE;
}

static PyObject *py_clear_streams(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    mk_clear_streams();
    Py_RETURN_NONE;
}

static PyObject *py_is_available(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    static const char *const names[] = {"device", NULL};
    static const char sig[] = "    1. is_available(device: Device | DeviceType) -> bool";
    PyObject *a[1];
    if (nargs > 1 || mkpy_parse("is_available", args, nargs, kwnames, names, 1, a) < 0) {
        PyErr_Clear();
        return mkpy_bad_call("is_available", sig, args, nargs, kwnames);
    }
    if (PyObject_TypeCheck(a[0], &PyMkDevice_Type)) return PyBool_FromLong(((PyMkDevice *)a[0])->index == 0);
    if (device_type_of(a[0]) >= 0) Py_RETURN_TRUE;
    return mkpy_bad_call("is_available", sig, args, nargs, kwnames);
}

static PyObject *py_device_count(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    static const char *const names[] = {"device_type", NULL};
    static const char sig[] = "    1. device_count(device_type: DeviceType) -> int";
    PyObject *a[1];
    if (nargs > 1 || mkpy_parse("device_count", args, nargs, kwnames, names, 1, a) < 0) {
        PyErr_Clear();
        return mkpy_bad_call("device_count", sig, args, nargs, kwnames);
    }
    if (device_type_of(a[0]) < 0) return mkpy_bad_call("device_count", sig, args, nargs, kwnames);
    return PyLong_FromLong(1);
}

/* ---------------------------------------------------------- StreamContext */

typedef struct {
    PyObject_HEAD
    PyObject *s;
    mk_stream *saved; /* a stack: the object may be entered again while inside */
    int nsaved, capsaved;
} PyMkStreamContext;

static PyTypeObject PyMkStreamContext_Type;

static const char ctx_sig[] =
    "    1. __init__(self, s: mkpy.Stream | mkpy.ThreadLocalStream | mkpy.Device | mkpy.DeviceType) -> None";

static bool stream_or_device(PyObject *o) {
    return PyObject_TypeCheck(o, &PyMkStream_Type) || PyObject_TypeCheck(o, &PyMkTLStream_Type) ||
           PyObject_TypeCheck(o, &PyMkDevice_Type) || device_type_of(o) >= 0;
}

static PyObject *make_context(PyTypeObject *t, PyObject *s) {
    PyMkStreamContext *c = (PyMkStreamContext *)t->tp_alloc(t, 0);
    if (!c) return NULL;
    c->s = Py_NewRef(s);
    return (PyObject *)c;
}

static PyObject *ctx_tp_new(PyTypeObject *t, PyObject *args, PyObject *kw) {
    static char *names[] = {"s", NULL};
    PyObject *s = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O:StreamContext", names, &s)) return NULL;
    if (!stream_or_device(s)) {
        PyObject *all[2] = {(PyObject *)t, s};
        return mkpy_bad_call("__init__", ctx_sig, all, 2, NULL);
    }
    return make_context(t, s);
}

static void ctx_dealloc(PyObject *o) {
    PyMkStreamContext *c = (PyMkStreamContext *)o;
    Py_XDECREF(c->s);
    PyMem_Free(c->saved);
    Py_TYPE(o)->tp_free(o);
}

/* MLX's StreamContext: on entry the default device becomes the stream's, and
 * the stream this thread's default for it; on exit both are restored to the
 * default stream of the default device at entry. */
static PyObject *ctx_enter(PyObject *o, PyObject *unused) {
    (void)unused;
    PyMkStreamContext *c = (PyMkStreamContext *)o;
    mk_stream old = mk_default_stream(mk_default_device()), s = old; /* s: never None here */
    if (old == MK_STREAM_NONE) return mkpy_raise();
    bool bad;
    if (resolve(c->s, "stream", &s, &bad) < 0) return NULL;
    if (c->nsaved == c->capsaved) {
        int cap = c->capsaved ? c->capsaved * 2 : 2;
        mk_stream *p = PyMem_Realloc(c->saved, (size_t)cap * sizeof *p);
        if (!p) return PyErr_NoMemory();
        c->saved = p;
        c->capsaved = cap;
    }
    c->saved[c->nsaved++] = old;
    mk_set_default_device(mk_stream_device(s));
    mk_set_default_stream(s);
    Py_RETURN_NONE;
}

static PyObject *ctx_exit(PyObject *o, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"exc_type", "exc_value", "traceback", NULL};
    PyObject *a[3];
    if (mkpy_parse("__exit__", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    PyMkStreamContext *c = (PyMkStreamContext *)o;
    if (c->nsaved > 0) {
        mk_stream old = c->saved[--c->nsaved];
        mk_set_default_device(mk_stream_device(old));
        mk_set_default_stream(old);
    }
    Py_RETURN_NONE;
}

static PyMethodDef ctx_methods[] = {
    {"__enter__", ctx_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nMake the stream (or device) the default."},
    {"__exit__", FN(ctx_exit), FASTKW,
     "__exit__($self, /, exc_type=None, exc_value=None, traceback=None)\n--\n\nRestore the default device and stream."},
    {NULL},
};

static PyTypeObject PyMkStreamContext_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.StreamContext",
    .tp_basicsize = sizeof(PyMkStreamContext),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = PyDoc_STR("StreamContext(s)\n--\n\nA context manager setting the default device and stream; see stream()."),
    .tp_new = ctx_tp_new,
    .tp_dealloc = ctx_dealloc,
    .tp_methods = ctx_methods,
};

static PyObject *py_stream(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    static const char sig[] =
        "    1. stream(s: mkpy.Stream | mkpy.ThreadLocalStream | mkpy.Device | mkpy.DeviceType) -> mkpy.StreamContext";
    PyObject *s = NULL;
    if (nargs == 1 && !kwnames)
        s = args[0];
    else if (nargs == 0 && kwnames && PyTuple_GET_SIZE(kwnames) == 1 &&
             PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "s") == 0)
        s = args[0];
    if (!s || !stream_or_device(s)) return mkpy_bad_call("stream", sig, args, nargs, kwnames);
    return make_context(&PyMkStreamContext_Type, s);
}

static PyMethodDef stream_functions[] = {
    {"default_device", py_default_device, METH_NOARGS,
     "default_device()\n--\n\nThe default device: Device(gpu, 0) unless set, as on a Mac. Global, as MLX's."},
    {"set_default_device", FN(py_set_default_device), FASTKW,
     "set_default_device(device)\n--\n\nSet the default device (a Device, or mkpy.cpu / mkpy.gpu)."},
    {"default_stream", FN(py_default_stream), FASTKW,
     "default_stream(device)\n--\n\nThis thread's default stream of a device (each thread has its own)."},
    {"set_default_stream", FN(py_set_default_stream), FASTKW,
     "set_default_stream(stream)\n--\n\nMake a stream this thread's default for its device (the default device is "
     "unchanged)."},
    {"new_stream", FN(py_new_stream), FASTKW,
     "new_stream(device)\n--\n\nA new stream on a device. It can be evaluated on the thread that made it only."},
    {"new_thread_unsafe_stream", FN(py_new_thread_unsafe_stream), FASTKW,
     "new_thread_unsafe_stream(device)\n--\n\nA new stream that can be evaluated on any thread."},
    {"new_thread_local_stream", FN(py_new_thread_local_stream), FASTKW,
     "new_thread_local_stream(device)\n--\n\nA stream that is unique per thread: each thread using it gets a stream "
     "of its own."},
    {"clear_streams", py_clear_streams, METH_NOARGS,
     "clear_streams()\n--\n\nDestroy the streams made on this thread (its default streams too: evaluating on them "
     "afterwards raises, as in MLX)."},
    {"stream", FN(py_stream), FASTKW,
     "stream(s)\n--\n\nA context manager making a stream (or a device's default stream) the default: "
     "``with mx.stream(mx.cpu):``."},
    {"is_available", FN(py_is_available), FASTKW,
     "is_available(device)\n--\n\nWhether a device exists: both types do (mkpy's CPU back-end serves mkpy.gpu)."},
    {"device_count", FN(py_device_count), FASTKW, "device_count(device_type)\n--\n\nDevices of a type: one of each."},
    {NULL},
};

/* ------------------------------------------------------------------ init */

int mkpy_stream_init(PyObject *m) {
    if (PyType_Ready(&PyMkDevice_Type) < 0 || PyType_Ready(&PyMkStream_Type) < 0 ||
        PyType_Ready(&PyMkTLStream_Type) < 0 || PyType_Ready(&PyMkStreamContext_Type) < 0)
        return -1;
    if (make_device_type(m) < 0) return -1;
    if (PyModule_AddObjectRef(m, "Device", (PyObject *)&PyMkDevice_Type) < 0 ||
        PyModule_AddObjectRef(m, "Stream", (PyObject *)&PyMkStream_Type) < 0 ||
        PyModule_AddObjectRef(m, "ThreadLocalStream", (PyObject *)&PyMkTLStream_Type) < 0 ||
        PyModule_AddObjectRef(m, "StreamContext", (PyObject *)&PyMkStreamContext_Type) < 0)
        return -1;
    if (PyModule_AddFunctions(m, stream_functions) < 0) return -1;
    /* the importing thread's default streams: gpu 0 and cpu 1, as a Mac's */
    if (mk_default_stream(MK_GPU) == MK_STREAM_NONE || mk_default_stream(MK_CPU) == MK_STREAM_NONE) {
        mkpy_raise();
        return -1;
    }
    return 0;
}
