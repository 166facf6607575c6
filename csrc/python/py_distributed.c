/* mkpy.distributed (MLX's mlx.core.distributed) and mkpy.cuda: the Group
 * type and the communication ops over the core's distributed layer
 * (core/distributed.h). */
#include "backend/backend.h"
#include "backend/cuda/ops_cuda.h"
#include "core/distributed.h"
#include "mkpy.h"

#define FN(f) (PyCFunction)(void (*)(void))(f)
#define FASTKW (METH_FASTCALL | METH_KEYWORDS)

typedef struct {
    PyObject_HEAD
    mk_dist_group *group;
} PyMkGroup;

static PyTypeObject PyMkGroup_Type;

static PyObject *group_wrap(mk_dist_group *g) {
    if (!g) return mkpy_raise();
    PyMkGroup *self = PyObject_New(PyMkGroup, &PyMkGroup_Type);
    if (!self) {
        mk_dist_group_decref(g);
        return NULL;
    }
    self->group = g;
    return (PyObject *)self;
}

static void group_dealloc(PyMkGroup *self) {
    if (self->group) mk_dist_group_decref(self->group);
    PyObject_Free(self);
}

static PyObject *group_new(PyTypeObject *t, PyObject *args, PyObject *kw) {
    (void)args, (void)kw;
    PyErr_Format(PyExc_TypeError, "cannot create '%s' instances: use mkpy.distributed.init()", t->tp_name);
    return NULL;
}

static PyObject *group_rank(PyMkGroup *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromLong(mk_dist_rank(self->group));
}

static PyObject *group_size(PyMkGroup *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromLong(mk_dist_size(self->group));
}

/* An int argument that must fit an int (nanobind's int conversion). */
static int parse_int32(const char *fname, PyObject *o, int dflt, int *out) {
    if (!o) {
        *out = dflt;
        return 0;
    }
    int64_t v;
    if (PyBool_Check(o)) goto bad; /* nanobind refuses bool for int */
    if (mkpy_parse_int(o, &v) < 0) return -1;
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s(): %lld does not fit a 32-bit int", fname, (long long)v);
        return -1;
    }
    *out = (int)v;
    return 0;
bad:
    PyErr_Format(PyExc_TypeError, "%s(): expected an int, got %s", fname, Py_TYPE(o)->tp_name);
    return -1;
}

static PyObject *group_split(PyMkGroup *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    static const char *const names[] = {"color", "key", NULL};
    PyObject *a[2];
    int color, key;
    if (mkpy_parse("split", args, nargs, kw, names, 1, a) < 0 || parse_int32("split", a[0], 0, &color) < 0 ||
        parse_int32("split", a[1], -1, &key) < 0)
        return NULL;
    return group_wrap(mk_dist_split(self->group, color, key));
}

static PyObject *group_repr(PyMkGroup *self) {
    return PyUnicode_FromFormat("<mkpy.distributed.Group rank=%d size=%d backend=%s>", mk_dist_rank(self->group),
                                mk_dist_size(self->group), self->group->backend->name);
}

static PyMethodDef group_methods[] = {
    {"rank", (PyCFunction)group_rank, METH_NOARGS, "rank($self, /)\n--\n\nThe rank of this process in the group."},
    {"size", (PyCFunction)group_size, METH_NOARGS, "size($self, /)\n--\n\nThe number of processes in the group."},
    {"split", FN(group_split), FASTKW,
     "split($self, /, color, key=-1)\n--\n\n"
     "Split the group into subgroups of the processes that give the same color; key orders the ranks in\n"
     "the new group (negative: the rank in this group). A singleton group cannot be split (RuntimeError)."},
    {NULL},
};

static PyTypeObject PyMkGroup_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.distributed.Group",
    .tp_basicsize = sizeof(PyMkGroup),
    .tp_dealloc = (destructor)group_dealloc,
    .tp_repr = (reprfunc)group_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A group of independent mkpy processes that can communicate (mkpy.distributed.init()).",
    .tp_methods = group_methods,
    .tp_new = group_new,
};

/* ------------------------------------------------------------ functions */

static int parse_backend(PyObject *o, const char **out) {
    if (!o) {
        *out = "any";
        return 0;
    }
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "backend must be a str, not %s", Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = PyUnicode_AsUTF8(o);
    return *out ? 0 : -1;
}

static PyObject *py_is_available(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    static const char *const names[] = {"backend", NULL};
    PyObject *a[1];
    const char *backend;
    if (mkpy_parse("is_available", args, nargs, kw, names, 0, a) < 0 || parse_backend(a[0], &backend) < 0)
        return NULL;
    return PyBool_FromLong(mk_dist_is_available(backend));
}

static PyObject *py_init(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    static const char *const names[] = {"strict", "backend", "*all_gather_factory", NULL};
    PyObject *a[3];
    const char *backend;
    int strict;
    if (mkpy_parse("init", args, nargs, kw, names, 0, a) < 0 || mkpy_parse_bool(a[0], 0, &strict) < 0 ||
        parse_backend(a[1], &backend) < 0)
        return NULL;
    if (a[2] && a[2] != Py_None) {
        if (strcmp(backend, "jaccl") != 0) {
            PyErr_SetString(PyExc_ValueError, "all_gather_factory is only supported with backend='jaccl'.");
            return NULL;
        }
        if (!PyCallable_Check(a[2])) {
            PyErr_SetString(PyExc_TypeError, "all_gather_factory must be callable");
            return NULL;
        }
    }
    return group_wrap(mk_dist_init(strict, backend));
}

/* group=None or a Group (borrowed). */
static int parse_group(const char *fname, PyObject *o, mk_dist_group **out) {
    *out = NULL;
    if (!o || o == Py_None) return 0;
    if (!PyObject_TypeCheck(o, &PyMkGroup_Type)) {
        PyErr_Format(PyExc_TypeError, "%s(): group must be a mkpy.distributed.Group or None, not %s", fname,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    *out = ((PyMkGroup *)o)->group;
    return 0;
}

/* gather: 0 a reduction by op, 1 all_gather, 2 sum_scatter */
static PyObject *all_reduce(const char *fname, int gather, mk_dist_reduce op, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kw) {
    static const char *const names[] = {"x", "*group", "*stream", NULL};
    PyObject *a[3];
    mk_dist_group *g;
    if (mkpy_parse(fname, args, nargs, kw, names, 1, a) < 0 || parse_group(fname, a[1], &g) < 0) return NULL;
    mk_array *x = mkpy_to_array_arg(a[0], -1);
    if (!x) return NULL;
    mk_array *r = gather == 1   ? mk_dist_all_gather(x, g)
                  : gather == 2 ? mk_dist_sum_scatter(x, g)
                                : mk_dist_all_reduce(x, op, g);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_all_sum)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return all_reduce("all_sum", 0, MK_DIST_SUM, args, nargs, kw);
}

MKPY_STREAM_BINDING(py_all_max)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return all_reduce("all_max", 0, MK_DIST_MAX, args, nargs, kw);
}

MKPY_STREAM_BINDING(py_all_min)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return all_reduce("all_min", 0, MK_DIST_MIN, args, nargs, kw);
}

MKPY_STREAM_BINDING(py_all_gather)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return all_reduce("all_gather", 1, MK_DIST_SUM, args, nargs, kw);
}

MKPY_STREAM_BINDING(py_sum_scatter)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    return all_reduce("sum_scatter", 2, MK_DIST_SUM, args, nargs, kw);
}

/* mkpy.distributed's exit hook: MPI_Finalize unless the program is ending
 * on an uncaught exception (then the launcher stops the other ranks). */
static PyObject *py_finalize(PyObject *m, PyObject *failing) {
    (void)m;
    int f = PyObject_IsTrue(failing);
    if (f < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    mk_dist_finalize(f);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

MKPY_STREAM_BINDING(py_send)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    static const char *const names[] = {"x", "dst", "*group", "*stream", NULL};
    PyObject *a[4];
    mk_dist_group *g;
    int dst;
    if (mkpy_parse("send", args, nargs, kw, names, 2, a) < 0 || parse_int32("send", a[1], 0, &dst) < 0 ||
        parse_group("send", a[2], &g) < 0)
        return NULL;
    mk_array *x = mkpy_to_array_arg(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_dist_send(x, dst, g);
    mk_decref(x);
    return mkpy_wrap(r);
}

MKPY_STREAM_BINDING(py_recv)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    static const char *const names[] = {"shape", "dtype", "src", "*group", "*stream", NULL};
    PyObject *a[5];
    mk_dist_group *g;
    int src, ndim;
    int64_t shape[MK_MAX_NDIM];
    mk_dtype dtype;
    if (mkpy_parse("recv", args, nargs, kw, names, 3, a) < 0 || mkpy_parse_shape(a[0], &ndim, shape) < 0 ||
        mkpy_parse_dtype(a[1], &dtype) < 0 || parse_int32("recv", a[2], 0, &src) < 0 ||
        parse_group("recv", a[3], &g) < 0)
        return NULL;
    return mkpy_wrap(mk_dist_recv(ndim, shape, dtype, src, g));
}

MKPY_STREAM_BINDING(py_recv_like)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) {
    (void)m;
    static const char *const names[] = {"x", "src", "*group", "*stream", NULL};
    PyObject *a[4];
    mk_dist_group *g;
    int src;
    if (mkpy_parse("recv_like", args, nargs, kw, names, 2, a) < 0 || parse_int32("recv_like", a[1], 0, &src) < 0 ||
        parse_group("recv_like", a[2], &g) < 0)
        return NULL;
    mk_array *x = mkpy_to_array_arg(a[0], -1);
    if (!x) return NULL;
    mk_array *r = mk_dist_recv(x->ndim, x->shape, x->dtype, src, g);
    mk_decref(x);
    return mkpy_wrap(r);
}

static PyMethodDef distributed_functions[] = {
    {"is_available", FN(py_is_available), FASTKW,
     "is_available(backend='any')\n--\n\n"
     "Whether a communication backend can be instantiated: 'mpi' and 'any' when Open MPI's libmpi\n"
     "loads, the others never."},
    {"init", FN(py_init), FASTKW,
     "init(strict=False, backend='any', *, all_gather_factory=None)\n--\n\n"
     "The global communication group: the MPI world when the program was started by mpirun (or\n"
     "python -m mkpy.launch). Else a singleton group (rank 0, size 1), or with strict=True a\n"
     "RuntimeError. backend: 'any', 'mpi', 'ring', 'nccl' or 'jaccl'."},
    {"all_sum", FN(py_all_sum), FASTKW,
     "all_sum(x, *, group=None, stream=None)\n--\n\nSum of x over the processes of the group (x itself in a group of one)."},
    {"all_max", FN(py_all_max), FASTKW,
     "all_max(x, *, group=None, stream=None)\n--\n\nMaximum of x over the processes of the group."},
    {"all_min", FN(py_all_min), FASTKW,
     "all_min(x, *, group=None, stream=None)\n--\n\nMinimum of x over the processes of the group."},
    {"all_gather", FN(py_all_gather), FASTKW,
     "all_gather(x, *, group=None, stream=None)\n--\n\n"
     "The x of every process concatenated along the first axis (x itself in a group of one)."},
    {"sum_scatter", FN(py_sum_scatter), FASTKW,
     "sum_scatter(x, *, group=None, stream=None)\n--\n\n"
     "Sum x over the processes of the group and scatter the result: each process gets its block of\n"
     "the first axis (x.shape[0] must be divisible by the group size)."},
    {"_finalize", py_finalize, METH_O, "_finalize(failing)\n--\n\nEnds MPI at exit (mkpy.distributed's atexit hook)."},
    {"send", FN(py_send), FASTKW,
     "send(x, dst, *, group=None, stream=None)\n--\n\n"
     "Send x to the process of rank dst; returns x, sent when evaluated. A singleton group raises ValueError."},
    {"recv", FN(py_recv), FASTKW,
     "recv(shape, dtype, src, *, group=None, stream=None)\n--\n\n"
     "Receive an array of that shape and dtype from the process of rank src."},
    {"recv_like", FN(py_recv_like), FASTKW,
     "recv_like(x, src, *, group=None, stream=None)\n--\n\nrecv(x.shape, x.dtype, src)."},
    {NULL},
};

static PyObject *py_cuda_is_available(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyBool_FromLong(mkb_for_device(MK_GPU) == &mkb_cuda_backend);
}

static PyObject *py_cuda_transfers(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    int64_t down, up;
    mk_device_copies(&down, &up);
    return Py_BuildValue("LL", (long long)down, (long long)up);
}

static PyObject *py_cuda_check_op_kernels(PyObject *m, PyObject *arg) {
    (void)m;
    int sm = PyLong_AsLong(arg), count = 0, rc;
    if (sm == -1 && PyErr_Occurred()) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = mkb_cuda_check_op_kernels(sm, &count);
    Py_END_ALLOW_THREADS
    if (rc < 0) return mkpy_raise();
    return PyLong_FromLong(count);
}

static PyMethodDef cuda_functions[] = {
    {"_check_op_kernels", py_cuda_check_op_kernels, METH_O,
     "_check_op_kernels(sm)\n--\n\nCompiles every GPU op kernel for sm_<sm> with NVRTC (no GPU needed); returns how many."},
    {"_transfers", py_cuda_transfers, METH_NOARGS,
     "_transfers()\n--\n\n(copies from the GPU to the host, copies to the GPU) made so far by this process."},
    {"is_available", py_cuda_is_available, METH_NOARGS,
     "is_available()\n--\n\nWhether GPU streams run on an NVIDIA GPU: a GPU and its driver were found (and MKPY_GPU is not \"cpu\")."},
    {NULL},
};

static int add_module(PyObject *m, const char *name, const char *doc, PyMethodDef *fns, PyObject **out) {
    char full[64];
    PyOS_snprintf(full, sizeof full, "mkpy._core.%s", name);
    PyObject *sub = PyModule_New(full);
    if (!sub) return -1;
    if (PyModule_AddFunctions(sub, fns) < 0 || PyModule_SetDocString(sub, doc) < 0 ||
        PyModule_AddObjectRef(m, name, sub) < 0) {
        Py_DECREF(sub);
        return -1;
    }
    *out = sub; /* the reference the caller drops */
    return 0;
}

int mkpy_distributed_init(PyObject *m) {
    PyObject *dist = NULL, *cuda = NULL;
    if (PyType_Ready(&PyMkGroup_Type) < 0) return -1;
    if (add_module(m, "distributed", "mkpy.distributed: communication operations.", distributed_functions, &dist) < 0)
        return -1;
    int rc = PyModule_AddObjectRef(dist, "Group", (PyObject *)&PyMkGroup_Type);
    Py_DECREF(dist);
    if (rc < 0) return -1;
    if (add_module(m, "cuda", "mkpy.cuda: the CUDA back-end (an NVIDIA GPU, when one is found).", cuda_functions, &cuda) < 0) return -1;
    Py_DECREF(cuda);
    return 0;
}
