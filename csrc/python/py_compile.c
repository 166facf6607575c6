/* mx.compile, mx.disable_compile and mx.enable_compile.
 *
 * MLX's compile traces a function once per input signature and replays the
 * traced graph afterwards; it also fuses element-wise ops. mkpy traces and
 * replays the same way (closures and constants are captured at trace time;
 * _core._trace and _core._replay, py_transforms.c, are the engine: the
 * replay re-creates each primitive on the new inputs through its batching
 * rule) but does not fuse. The signature of a call is its pytree's structure,
 * the arrays' dtypes and shapes (only their number of dimensions with
 * shapeless=True) and the constants (py_tree.c). A graph with a primitive
 * that has no batching rule (random sampling, Metal kernels) is not
 * replayed: such a function is called again on each call. With inputs or
 * outputs (captured state), when disabled, and under another transformation
 * the function is called as is. */
#include "core/transforms.h"
#include "py_tree.h"

static int compile_enabled = 1;

typedef struct {
    PyObject_HEAD
    PyObject *dict;
    PyObject *weakreflist;
    PyObject *fun, *inputs, *outputs;
    PyObject *cache; /* signature -> (tracers, outputs, output structure) */
    int shapeless;
} compiled;

/* flat_fun(xs): fun on (args, kwargs) with their arrays replaced by xs */
enum { F_FUN, F_ARGS, F_KWARGS, F_OUT };

static PyObject *trace_fun(mkpy_closure *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "compile: internal flat function takes a list");
        return NULL;
    }
    PyObject *both = PyTuple_Pack(2, c->s[F_ARGS], c->s[F_KWARGS]), *f = NULL, *ta = NULL, *out = NULL, *r = NULL;
    Py_ssize_t pos = 0;
    if (!both || !(f = mkpy_tree_fill(both, args[0], &pos)) || !(ta = PySequence_Tuple(PyTuple_GET_ITEM(f, 0))))
        goto error;
    if (!(out = PyObject_Call(c->s[F_FUN], ta, PyTuple_GET_ITEM(f, 1)))) goto error;
    mkpy_closure_set(c, F_OUT, out);
    if ((r = PyList_New(0)) && mkpy_tree_flatten(out, 0, r) < 0) Py_CLEAR(r);
error:
    Py_XDECREF(both);
    Py_XDECREF(f);
    Py_XDECREF(ta);
    Py_XDECREF(out);
    return r;
}

/* _core.<name>(args...) */
static PyObject *call_core(const char *name, PyObject *const *args, size_t n) {
    PyObject *f = PyObject_GetAttrString(mkpy_module, name);
    if (!f) return NULL;
    PyObject *r = PyObject_Vectorcall(f, args, n, NULL);
    Py_DECREF(f);
    return r;
}

/* 1 when the pending exception is the replay's "no batching rule" error */
static int not_replayable(void) {
    if (!PyErr_ExceptionMatches(PyExc_ValueError)) return 0;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyErr_NormalizeException(&et, &ev, &tb);
    PyObject *s = ev ? PyObject_Str(ev) : NULL;
    int found = 0;
    if (s) {
        PyObject *needle = PyUnicode_FromString("[Primitive::vmap] Not implemented");
        Py_ssize_t at = needle ? PyUnicode_Find(s, needle, 0, PY_SSIZE_T_MAX, 1) : -2;
        Py_XDECREF(needle);
        found = at >= 0;
    }
    Py_XDECREF(s);
    PyErr_Restore(et, ev, tb);
    if (found) PyErr_Clear();
    return found;
}

static PyObject *compiled_call(compiled *self, PyObject *args, PyObject *kwargs_in) {
    PyObject *kwargs = NULL, *both = NULL, *arrays = NULL, *keyl = NULL, *key = NULL, *entry = NULL, *r = NULL;
    PyObject *traced = NULL, *new = NULL;
    mkpy_closure *c = NULL;
    if (!(kwargs = kwargs_in ? Py_NewRef(kwargs_in) : PyDict_New())) return NULL;
    if (!(both = PyTuple_Pack(2, args, kwargs)) || !(arrays = PyList_New(0)) || !(keyl = PyList_New(0))) goto error;
    if (mkpy_tree_signature(both, arrays, keyl, self->shapeless) < 0) goto error;
    if (!compile_enabled || self->inputs != Py_None || self->outputs != Py_None || mk_tracing()) {
        /* under grad/vjp/jvp/vmap (or another compile's trace) the function is
         * called as is and becomes part of the enclosing graph, as MLX */
        r = PyObject_Call(self->fun, args, kwargs);
        goto error;
    }
    if (!(key = PyList_AsTuple(keyl))) goto error;
    entry = PyDict_GetItemWithError(self->cache, key);
    if (entry) {
        Py_INCREF(entry);
    } else {
        if (PyErr_Occurred()) goto error;
        if (!(c = mkpy_closure_new(trace_fun))) goto error;
        mkpy_closure_set(c, F_FUN, self->fun);
        mkpy_closure_set(c, F_ARGS, args);
        mkpy_closure_set(c, F_KWARGS, kwargs);
        PyObject *targs[2] = {(PyObject *)c, arrays};
        if (!(traced = call_core("_trace", targs, 2))) goto error;
        /* the traced graph stays unevaluated (evaluating it would detach it):
         * every call, this one included, gets a replay */
        if (!PyTuple_Check(traced) || PyTuple_GET_SIZE(traced) != 2) {
            PyErr_SetString(PyExc_RuntimeError, "compile: _trace returned an unexpected value");
            goto error;
        }
        entry = PyTuple_Pack(3, PyTuple_GET_ITEM(traced, 0), PyTuple_GET_ITEM(traced, 1),
                             c->s[F_OUT] ? c->s[F_OUT] : Py_None);
        if (!entry || PyDict_SetItem(self->cache, key, entry) < 0) goto error;
    }
    PyObject *tracers = PyTuple_GET_ITEM(entry, 0), *outs = PyTuple_GET_ITEM(entry, 1);
    PyObject *structure = PyTuple_GET_ITEM(entry, 2);
    if (structure == Py_None && PyList_Check(outs) && PyList_GET_SIZE(outs) == 0) {
        r = PyObject_Call(self->fun, args, kwargs);
        goto error;
    }
    PyObject *rargs[3] = {tracers, outs, arrays};
    if (!(new = call_core("_replay", rargs, 3))) {
        if (!not_replayable()) goto error;
        /* not replayable: call the function from now on */
        PyObject *empty = PyList_New(0);
        PyObject *mark = empty ? PyTuple_Pack(3, Py_None, empty, Py_None) : NULL;
        Py_XDECREF(empty);
        if (!mark || PyDict_SetItem(self->cache, key, mark) < 0) {
            Py_XDECREF(mark);
            goto error;
        }
        Py_DECREF(mark);
        r = PyObject_Call(self->fun, args, kwargs);
        goto error;
    }
    if (!PyList_Check(new)) {
        PyErr_SetString(PyExc_RuntimeError, "compile: _replay returned an unexpected value");
        goto error;
    }
    Py_ssize_t pos = 0;
    r = mkpy_tree_fill(structure, new, &pos);
error:
    Py_XDECREF(kwargs);
    Py_XDECREF(both);
    Py_XDECREF(arrays);
    Py_XDECREF(keyl);
    Py_XDECREF(key);
    Py_XDECREF(entry);
    Py_XDECREF(traced);
    Py_XDECREF(new);
    Py_XDECREF(c);
    return r;
}

static int compiled_traverse(compiled *self, visitproc visit, void *arg) {
    Py_VISIT(self->dict);
    Py_VISIT(self->fun);
    Py_VISIT(self->inputs);
    Py_VISIT(self->outputs);
    Py_VISIT(self->cache);
    return 0;
}

static int compiled_clear(compiled *self) {
    Py_CLEAR(self->dict);
    Py_CLEAR(self->fun);
    Py_CLEAR(self->inputs);
    Py_CLEAR(self->outputs);
    Py_CLEAR(self->cache);
    return 0;
}

static void compiled_dealloc(compiled *self) {
    PyObject_GC_UnTrack(self);
    if (self->weakreflist) PyObject_ClearWeakRefs((PyObject *)self);
    compiled_clear(self);
    PyObject_GC_Del(self);
}

static PyObject *compiled_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    if (!obj || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *compiled_repr(compiled *self) {
    return PyUnicode_FromFormat("<mkpy.compiled of %R>", self->fun);
}

static PyTypeObject compiled_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.compiled_function",
    .tp_basicsize = sizeof(compiled),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "A function returned by compile.",
    .tp_call = (ternaryfunc)compiled_call,
    .tp_repr = (reprfunc)compiled_repr,
    .tp_traverse = (traverseproc)compiled_traverse,
    .tp_clear = (inquiry)compiled_clear,
    .tp_dealloc = (destructor)compiled_dealloc,
    .tp_descr_get = compiled_get,
    .tp_dictoffset = offsetof(compiled, dict),
    .tp_weaklistoffset = offsetof(compiled, weakreflist),
};

static PyObject *make_compiled(PyObject *fun, PyObject *inputs, PyObject *outputs, int shapeless) {
    if (!PyCallable_Check(fun)) {
        PyErr_SetString(PyExc_TypeError, "compile() expects a callable");
        return NULL;
    }
    compiled *self = PyObject_GC_New(compiled, &compiled_Type);
    if (!self) return NULL;
    self->dict = self->weakreflist = NULL;
    self->fun = Py_NewRef(fun);
    self->inputs = Py_NewRef(inputs);
    self->outputs = Py_NewRef(outputs);
    self->shapeless = shapeless;
    self->cache = PyDict_New();
    PyObject_GC_Track(self);
    if (!self->cache || mkpy_update_wrapper(&self->dict, fun) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

enum { D_INPUTS, D_OUTPUTS };

/* @mx.compile(shapeless=True): the decorator holding the options */
static PyObject *compile_decorator(mkpy_closure *c, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "compile(): the decorator takes the function");
        return NULL;
    }
    return make_compiled(args[0], c->s[D_INPUTS], c->s[D_OUTPUTS], (int)c->i[0]);
}

PyDoc_STRVAR(compile_doc,
             "compile(fun: Callable, inputs: Optional[object] = None, outputs: Optional[object] = None, "
             "shapeless: bool = False) -> Callable\n\n"
             "Returns a compiled function which produces the same output as ``fun``:\n"
             "``fun`` is traced once per signature of its arguments (their structure,\n"
             "the dtypes and shapes of the arrays, or only their number of dimensions\n"
             "with ``shapeless=True``, and the constants) and the graph is replayed on\n"
             "later calls. Usable as ``mx.compile(f)`` or as a decorator.");

static PyObject *py_compile(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"fun", "inputs", "outputs", "shapeless", NULL};
    PyObject *a[4] = {NULL, NULL, NULL, NULL};
    int shapeless = 0;
    (void)m;
    if (mkpy_parse("compile", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (a[3] && (shapeless = PyObject_IsTrue(a[3])) < 0) return NULL;
    PyObject *inputs = a[1] ? a[1] : Py_None, *outputs = a[2] ? a[2] : Py_None;
    if (a[0] && a[0] != Py_None) return make_compiled(a[0], inputs, outputs, shapeless);
    mkpy_closure *c = mkpy_closure_new(compile_decorator);
    if (!c) return NULL;
    mkpy_closure_set(c, D_INPUTS, inputs);
    mkpy_closure_set(c, D_OUTPUTS, outputs);
    c->i[0] = shapeless;
    return (PyObject *)c;
}

PyDoc_STRVAR(disable_compile_doc, "disable_compile() -> None\n\n"
                                  "Globally disable compilation: compiled functions call the function as is.");

static PyObject *py_disable_compile(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    compile_enabled = 0;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(enable_compile_doc, "enable_compile() -> None\n\n"
                                 "Globally enable compilation (see disable_compile).");

static PyObject *py_enable_compile(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    compile_enabled = 1;
    Py_RETURN_NONE;
}

PyMethodDef mkpy_compile_functions[] = {
    {"compile", (PyCFunction)(void (*)(void))py_compile, METH_FASTCALL | METH_KEYWORDS, compile_doc},
    {"disable_compile", py_disable_compile, METH_NOARGS, disable_compile_doc},
    {"enable_compile", py_enable_compile, METH_NOARGS, enable_compile_doc},
    {NULL, NULL, 0, NULL},
};

int mkpy_compile_init(PyObject *m) {
    (void)m;
    return PyType_Ready(&compiled_Type);
}
