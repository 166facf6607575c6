/* The binding of export_function, import_function and exporter (MLX's
 * .mlxfn format, core/export.c). The function is traced on tracers of its
 * inputs as mx.compile traces it; the core maps the graph to MLX's
 * primitives. An exporter keeps every trace written so far and rewrites the
 * whole file (header with the new count, then the functions) after each. */
#include <stdio.h>
#include <string.h>

#include "core/export.h"
#include "core/transforms.h"
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

/* ------------------------------------------------------------ inputs */

/* MLX's rule: positional arrays and keyword arrays, or one tuple/list of
 * arrays and/or one dict of string keys to arrays. Sets *pos (a list) and
 * *kw (a dict), new references. */
static int split_inputs(PyObject *args, PyObject *kwargs, const char *prefix, PyObject **pos, PyObject **kw) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *p = NULL, *k = NULL;
    bool ok = true;
    if (n > 0 && PyMkArray_Check(PyTuple_GET_ITEM(args, 0))) {
        p = PySequence_List(args);
        k = kwargs ? PyDict_Copy(kwargs) : PyDict_New();
    } else if (n == 0) {
        p = PyList_New(0);
        k = kwargs ? PyDict_Copy(kwargs) : PyDict_New();
    } else if ((n == 1 || n == 2) && (!kwargs || PyDict_GET_SIZE(kwargs) == 0)) {
        PyObject *a0 = PyTuple_GET_ITEM(args, 0);
        if (n == 1 && PyDict_Check(a0)) {
            p = PyList_New(0);
            k = PyDict_Copy(a0);
        } else if (PyList_Check(a0) || PyTuple_Check(a0)) {
            p = PySequence_List(a0);
            if (n == 2) {
                PyObject *a1 = PyTuple_GET_ITEM(args, 1);
                if (PyDict_Check(a1))
                    k = PyDict_Copy(a1);
                else
                    ok = false;
            } else
                k = PyDict_New();
        } else
            ok = false;
    } else
        ok = false;
    if (ok && (!p || !k)) goto error;
    if (ok)
        for (Py_ssize_t i = 0; ok && i < PyList_GET_SIZE(p); i++) ok = PyMkArray_Check(PyList_GET_ITEM(p, i));
    if (ok) {
        PyObject *key, *val;
        Py_ssize_t it = 0;
        while (ok && PyDict_Next(k, &it, &key, &val)) ok = PyUnicode_Check(key) && PyMkArray_Check(val);
    }
    if (!ok) {
        PyErr_Format(PyExc_ValueError,
                     "%s Inputs can either be a variable number of positional and keyword arrays or a single tuple "
                     "and/or dictionary of arrays.",
                     prefix);
        goto error;
    }
    *pos = p;
    *kw = k;
    return 0;
error:
    Py_XDECREF(p);
    Py_XDECREF(k);
    return -1;
}

/* the sorted keys of a dict (a new list) */
static PyObject *sorted_keys(PyObject *kw) {
    PyObject *keys = PyDict_Keys(kw);
    if (keys && PyList_Sort(keys) < 0) Py_CLEAR(keys);
    return keys;
}

static const char *dtype_str(mk_dtype t) { return mk_dtype_name(t); }

static void shape_repr(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && k < n; i++) k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, ")");
}

/* Does a call (nin arrays, of which the last nkw are keywords `keys`)
 * match a traced function? */
static bool sig_match(const mk_xgraph *g, bool shapeless, mk_array *const *in, int nin, PyObject *keys) {
    Py_ssize_t nkw = PyList_GET_SIZE(keys);
    if (g->nin != nin || g->nkw != nkw) return false;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        const char *k = PyUnicode_AsUTF8(PyList_GET_ITEM(keys, i));
        if (!k || strcmp(k, g->kw[i])) return false;
    }
    for (int i = 0; i < nin; i++) {
        const mk_outdesc *d = &g->in_desc[i];
        if (d->dtype != in[i]->dtype || d->ndim != in[i]->ndim) return false;
        if (!shapeless && d->ndim && memcmp(d->shape, in[i]->shape, (size_t)d->ndim * sizeof *d->shape)) return false;
    }
    return true;
}

/* pos + dict values by sorted key -> core references (new array) */
static mk_array **flat_inputs(PyObject *pos, PyObject *kw, PyObject *keys, int *n) {
    Py_ssize_t np = PyList_GET_SIZE(pos), nk = PyList_GET_SIZE(keys);
    mk_array **a = PyMem_Calloc((size_t)(np + nk + 1), sizeof *a);
    if (!a) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < np; i++) a[i] = MKARR(PyList_GET_ITEM(pos, i));
    for (Py_ssize_t i = 0; i < nk; i++) a[np + i] = MKARR(PyDict_GetItem(kw, PyList_GET_ITEM(keys, i)));
    *n = (int)(np + nk);
    return a;
}

/* ------------------------------------------------------------ exporter */

typedef struct {
    PyObject_HEAD
    PyObject *fun;
    PyObject *callback; /* or NULL: a file */
    PyObject *path;     /* str */
    bool shapeless, closed;
    char *metadata;
    int count;
    mk_xgraph *funs;
    mk_xconsts consts;
    mk_wbuf body; /* the functions written so far */
} ExporterObject;

static PyTypeObject Exporter_Type;

static void exporter_dealloc(ExporterObject *e) {
    PyObject_GC_UnTrack(e);
    Py_CLEAR(e->fun);
    Py_CLEAR(e->callback);
    Py_CLEAR(e->path);
    PyMem_Free(e->metadata);
    for (int i = 0; i < e->count; i++) mk_xgraph_free(&e->funs[i]);
    PyMem_Free(e->funs);
    mk_wbuf_free(&e->body);
    mk_xconsts_free(&e->consts);
    Py_TYPE(e)->tp_free((PyObject *)e);
}

static int exporter_traverse(ExporterObject *e, visitproc visit, void *arg) {
    Py_VISIT(e->fun);
    Py_VISIT(e->callback);
    return 0;
}

static int exporter_clear(ExporterObject *e) {
    Py_CLEAR(e->fun);
    Py_CLEAR(e->callback);
    return 0;
}

static int write_file(ExporterObject *e) {
    mk_wbuf w = {0};
    mk_xwrite_header(&w, MK_EXPORT_VERSION, e->count, e->shapeless, e->metadata);
    const char *path = PyUnicode_AsUTF8(e->path);
    if (!path) {
        mk_wbuf_free(&w);
        return -1;
    }
    if (w.err) {
        mk_wbuf_free(&w);
        PyErr_NoMemory();
        return -1;
    }
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(w.data, 1, w.len, f) == w.len;
    if (ok && e->body.len) ok = fwrite(e->body.data, 1, e->body.len, f) == e->body.len;
    if (f && fclose(f) != 0) ok = false;
    mk_wbuf_free(&w);
    if (!ok) {
        PyErr_Format(PyExc_RuntimeError, "[export_function] Failed to open %s", path);
        return -1;
    }
    return 0;
}

static PyObject *exporter_make(PyObject *fun, PyObject *target, bool shapeless, PyObject *metadata) {
    ExporterObject *e = PyObject_GC_New(ExporterObject, &Exporter_Type);
    if (!e) return NULL;
    e->fun = Py_NewRef(fun);
    e->callback = NULL;
    e->path = NULL;
    e->shapeless = shapeless;
    e->closed = false;
    e->metadata = NULL;
    e->count = 0;
    e->funs = NULL;
    memset(&e->body, 0, sizeof e->body);
    memset(&e->consts, 0, sizeof e->consts);
    PyObject_GC_Track(e);
    const char *md = "";
    if (metadata && metadata != Py_None) {
        if (!PyUnicode_Check(metadata)) {
            PyErr_SetString(PyExc_TypeError, "[export_function] metadata must be a string or None.");
            goto error;
        }
        if (!(md = PyUnicode_AsUTF8(metadata))) goto error;
    }
    if (!(e->metadata = PyMem_Malloc(strlen(md) + 1))) {
        PyErr_NoMemory();
        goto error;
    }
    strcpy(e->metadata, md);
    if (PyUnicode_Check(target)) {
        e->path = Py_NewRef(target);
        if (write_file(e) < 0) goto error;
    } else if (PyCallable_Check(target)) {
        if (md[0]) {
            PyErr_SetString(PyExc_ValueError,
                            "[export_function] The metadata argument is only supported when exporting to a file, not "
                            "when using a callback.");
            goto error;
        }
        e->callback = Py_NewRef(target);
    } else {
        PyErr_SetString(PyExc_TypeError, "[export_function] The first argument must be a file path or a callback.");
        goto error;
    }
    return (PyObject *)e;
error:
    Py_DECREF(e);
    return NULL;
}

/* MLX's node names: A, B, ..., Z, AA, AB, ... by first appearance */
typedef struct {
    uint64_t *ids;
    int n, cap;
} namer;

static PyObject *name_of(namer *nm, uint64_t id) {
    int k = 0;
    for (; k < nm->n; k++)
        if (nm->ids[k] == id) break;
    if (k == nm->n) {
        if (nm->n == nm->cap) {
            int cap = nm->cap ? 2 * nm->cap : 32;
            uint64_t *ni = PyMem_Realloc(nm->ids, (size_t)cap * sizeof *ni);
            if (!ni) return PyErr_NoMemory();
            nm->ids = ni;
            nm->cap = cap;
        }
        nm->ids[nm->n++] = id;
    }
    char buf[16], rev[16];
    int m = 0;
    for (uint64_t v = (uint64_t)k + 1; v > 0; v = (v - 1) / 26) rev[m++] = (char)('A' + (v - 1) % 26);
    for (int i = 0; i < m; i++) buf[i] = rev[m - 1 - i];
    return PyUnicode_FromStringAndSize(buf, m);
}

static PyObject *shape_tuple(const mk_outdesc *d) {
    PyObject *t = PyTuple_New(d->ndim);
    for (int i = 0; t && i < d->ndim; i++) PyTuple_SET_ITEM(t, i, PyLong_FromLongLong(d->shape[i]));
    return t;
}

/* [(name, shape, dtype), ...] */
static PyObject *desc_list(namer *nm, int n, const uint64_t *ids, const mk_outdesc *d) {
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *nmo = name_of(nm, ids[i]), *sh = shape_tuple(&d[i]);
        PyObject *t = nmo && sh ? PyTuple_Pack(3, nmo, sh, mkpy_dtype_object(d[i].dtype)) : NULL;
        Py_XDECREF(nmo);
        Py_XDECREF(sh);
        if (!t) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, t);
    }
    return l;
}

static PyObject *state_list(const mk_xstate *st) {
    PyObject *l = PyList_New(st->n);
    for (int i = 0; l && i < st->n; i++) {
        const mk_xitem *it = &st->it[i];
        PyObject *o = NULL;
        switch (it->kind) {
        case MK_XS_BOOL: o = PyBool_FromLong(it->i != 0); break;
        case MK_XS_INT:
        case MK_XS_SIZE: o = PyLong_FromLongLong(it->i); break;
        case MK_XS_FLOAT:
        case MK_XS_DOUBLE: o = PyFloat_FromDouble(it->f); break;
        case MK_XS_DTYPE: o = Py_NewRef(mkpy_dtype_object((mk_dtype)it->i)); break;
        case MK_XS_VEC:
            o = PyList_New(it->n);
            for (int k = 0; o && k < it->n; k++) PyList_SET_ITEM(o, k, PyLong_FromLong(it->v[k]));
            break;
        case MK_XS_STR: o = PyUnicode_FromStringAndSize(it->s, it->n); break;
        }
        if (!o) Py_CLEAR(l);
        else PyList_SET_ITEM(l, i, o);
    }
    return l;
}

static int call_cb(PyObject *cb, PyObject *d) {
    if (!d) return -1;
    PyObject *r = PyObject_CallOneArg(cb, d);
    Py_DECREF(d);
    if (!r) return -1;
    Py_DECREF(r);
    return 0;
}

static int export_callback(PyObject *cb, const mk_xgraph *g) {
    namer nm = {0};
    int rc = -1;
    PyObject *d;
    /* inputs */
    if (call_cb(cb, Py_BuildValue("{s:s,s:N}", "type", "inputs", "inputs",
                                  desc_list(&nm, g->nin, g->in_ids, g->in_desc))) < 0)
        goto done;
    PyObject *kl = PyList_New(g->nkw);
    for (int i = 0; kl && i < g->nkw; i++) {
        PyObject *nmo = name_of(&nm, g->in_ids[g->nin - g->nkw + i]);
        PyObject *t = nmo ? Py_BuildValue("(sN)", g->kw[i], nmo) : NULL;
        if (!t) Py_CLEAR(kl);
        else PyList_SET_ITEM(kl, i, t);
    }
    if (!kl || call_cb(cb, Py_BuildValue("{s:s,s:N}", "type", "keyword_inputs", "keywords", kl)) < 0) goto done;
    if (call_cb(cb, Py_BuildValue("{s:s,s:N}", "type", "outputs", "outputs",
                                  desc_list(&nm, g->nout, g->out_ids, g->out_desc))) < 0)
        goto done;
    PyObject *cl = PyList_New(0);
    for (int t = 0; cl && t < g->nnodes; t++) {
        const mk_xnode *n = &g->nodes[t];
        if (!n->constant || n->shared) continue;
        mk_incref(n->constant);
        PyObject *a = mkpy_wrap(n->constant), *nmo = a ? name_of(&nm, n->id) : NULL;
        PyObject *pair = nmo ? PyTuple_Pack(2, nmo, a) : NULL;
        Py_XDECREF(a);
        Py_XDECREF(nmo);
        if (!pair || PyList_Append(cl, pair) < 0) Py_CLEAR(cl);
        Py_XDECREF(pair);
    }
    if (!cl || call_cb(cb, Py_BuildValue("{s:s,s:N}", "type", "constants", "constants", cl)) < 0) goto done;
    /* each primitive: its inputs' descriptors are found by id */
    for (int t = 0; t < g->nnodes; t++) {
        const mk_xnode *n = &g->nodes[t];
        if (n->constant) continue;
        PyObject *il = PyList_New(n->nin);
        for (int i = 0; il && i < n->nin; i++) {
            const mk_outdesc *dd = NULL;
            for (int j = 0; j < g->nin && !dd; j++)
                if (g->in_ids[j] == n->in[i]) dd = &g->in_desc[j];
            for (int u = 0; u < t && !dd; u++) {
                const mk_xnode *m = &g->nodes[u];
                if (m->constant && m->id == n->in[i]) {
                    static _Thread_local mk_outdesc cd;
                    cd.dtype = m->constant->dtype;
                    cd.ndim = m->constant->ndim;
                    memcpy(cd.shape, m->constant->shape, (size_t)cd.ndim * sizeof *cd.shape);
                    dd = &cd;
                }
                for (int k = 0; !m->constant && k < m->nout && !dd; k++)
                    if (m->out_ids[k] == n->in[i]) dd = &m->outd[k];
            }
            PyObject *one = dd ? desc_list(&nm, 1, &n->in[i], dd) : NULL;
            if (!one) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "[export_function] Internal error.");
                Py_CLEAR(il);
                break;
            }
            PyList_SET_ITEM(il, i, Py_NewRef(PyList_GET_ITEM(one, 0)));
            Py_DECREF(one);
        }
        if (!il) goto done;
        d = Py_BuildValue("{s:s,s:N,s:N,s:s,s:N}", "type", "primitive", "inputs", il, "outputs",
                          desc_list(&nm, n->nout, n->out_ids, n->outd), "name", n->name, "arguments",
                          state_list(&n->st));
        if (call_cb(cb, d) < 0) goto done;
    }
    rc = 0;
done:
    PyMem_Free(nm.ids);
    return rc;
}

/* One trace: fun(*args, **kwargs) on tracers. */
static int exporter_export(ExporterObject *e, PyObject *pos, PyObject *kw) {
    PyObject *keys = NULL, *targs = NULL, *tkw = NULL, *res = NULL;
    mk_array **in = NULL, **tr = NULL, **outs = NULL;
    int nin = 0, nout = 0, rc = -1;
    mk_xgraph g = {0};
    if (e->closed) {
        PyErr_SetString(PyExc_RuntimeError, "[export_function] Attempting to write after exporting is closed.");
        return -1;
    }
    if (!(keys = sorted_keys(kw))) goto done;
    if (!(in = flat_inputs(pos, kw, keys, &nin))) goto done;
    for (int i = 0; i < e->count; i++)
        if (sig_match(&e->funs[i], e->shapeless, in, nin, keys)) {
            PyErr_SetString(PyExc_ValueError,
                            "[export_function] Attempting to export a function twice with the same signature is not "
                            "allowed.");
            goto done;
        }
    if (!(tr = PyMem_Calloc((size_t)nin + 1, sizeof *tr))) {
        PyErr_NoMemory();
        goto done;
    }
    for (int i = 0; i < nin; i++)
        if (!(tr[i] = mk_tracer(in[i]))) {
            mkpy_raise();
            goto done;
        }
    Py_ssize_t np = PyList_GET_SIZE(pos);
    if (!(targs = PyTuple_New(np)) || !(tkw = PyDict_New())) goto done;
    for (Py_ssize_t i = 0; i < np; i++) {
        mk_incref(tr[i]);
        PyObject *o = mkpy_wrap(tr[i]);
        if (!o) goto done;
        PyTuple_SET_ITEM(targs, i, o);
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
        mk_incref(tr[np + i]);
        PyObject *o = mkpy_wrap(tr[np + i]);
        if (!o || PyDict_SetItem(tkw, PyList_GET_ITEM(keys, i), o) < 0) {
            Py_XDECREF(o);
            goto done;
        }
        Py_DECREF(o);
    }
    mk_trace_push();
    res = PyObject_Call(e->fun, targs, tkw);
    mk_trace_pop();
    if (!res) goto done;
    if (PyMkArray_Check(res)) {
        nout = 1;
        if (!(outs = PyMem_Calloc(1, sizeof *outs))) goto nomem;
        outs[0] = MKARR(res);
        mk_incref(outs[0]);
    } else if (PyList_Check(res) || PyTuple_Check(res)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(res);
        if (!(outs = PyMem_Calloc((size_t)n + 1, sizeof *outs))) goto nomem;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *o = PySequence_Fast_GET_ITEM(res, i);
            if (!PyMkArray_Check(o)) goto bad_out;
            outs[i] = MKARR(o);
            mk_incref(outs[i]);
            nout++;
        }
    } else
        goto bad_out;
    int bad = mk_graph_reaches(nout, outs, nin, tr, nin, in);
    if (bad < 0) {
        mkpy_raise();
        goto done;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError,
                        "[export_function] Attempting to export a function with uncaptured inputs is not allowed.");
        goto done;
    }
    int erc;
    Py_BEGIN_ALLOW_THREADS
    erc = mk_export_graph(nin, tr, nout, outs, &e->consts, &g);
    Py_END_ALLOW_THREADS
    if (erc < 0) {
        if (mk_export_unmapped()) {
            PyErr_SetString(PyExc_NotImplementedError, mk_error_message());
            mk_error_clear();
        } else
            mkpy_raise();
        goto done;
    }
    Py_ssize_t nk = PyList_GET_SIZE(keys);
    g.nkw = (int)nk;
    if (!(g.kw = calloc((size_t)nk + 1, sizeof *g.kw))) goto nomem;
    for (Py_ssize_t i = 0; i < nk; i++) {
        const char *k = PyUnicode_AsUTF8(PyList_GET_ITEM(keys, i));
        if (!k || !(g.kw[i] = strdup(k))) {
            if (k) PyErr_NoMemory();
            goto done;
        }
    }
    mk_xgraph *nf = PyMem_Realloc(e->funs, (size_t)(e->count + 1) * sizeof *nf);
    if (!nf) goto nomem;
    e->funs = nf;
    if (e->callback) {
        if (export_callback(e->callback, &g) < 0) goto done;
    } else {
        size_t before = e->body.len;
        if (mk_xwrite_graph(&e->body, &g) < 0) {
            e->body.len = before;
            e->body.err = false;
            mkpy_raise();
            goto done;
        }
        e->count++;
        if (write_file(e) < 0) {
            e->count--;
            e->body.len = before;
            goto done;
        }
        e->count--;
    }
    e->funs[e->count++] = g;
    memset(&g, 0, sizeof g);
    rc = 0;
    goto done;
bad_out:
    PyErr_SetString(PyExc_ValueError,
                    "[export_function] Outputs can be either a single array, a tuple, or a list of arrays.");
    goto done;
nomem:
    PyErr_NoMemory();
done:
    mk_xgraph_free(&g);
    Py_XDECREF(keys);
    Py_XDECREF(targs);
    Py_XDECREF(tkw);
    Py_XDECREF(res);
    PyMem_Free(in);
    if (tr)
        for (int i = 0; i < nin; i++) mk_xdecref(tr[i]);
    PyMem_Free(tr);
    if (outs)
        for (int i = 0; i < nout; i++) mk_xdecref(outs[i]);
    PyMem_Free(outs);
    return rc;
}

static PyObject *exporter_call(ExporterObject *e, PyObject *args, PyObject *kwargs) {
    PyObject *pos, *kw;
    if (split_inputs(args, kwargs, "[export_function]", &pos, &kw) < 0) return NULL;
    int rc = exporter_export(e, pos, kw);
    Py_DECREF(pos);
    Py_DECREF(kw);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *exporter_close(ExporterObject *e, PyObject *unused) {
    (void)unused;
    e->closed = true;
    Py_RETURN_NONE;
}
static PyObject *exporter_enter(ExporterObject *e, PyObject *unused) {
    (void)unused;
    return Py_NewRef(e);
}
static PyObject *exporter_exit(ExporterObject *e, PyObject *args) {
    (void)args;
    e->closed = true;
    Py_RETURN_NONE;
}

static PyMethodDef exporter_methods[] = {
    {"close", (PyCFunction)exporter_close, METH_NOARGS, "close($self, /)\n--\n\nStop exporting to the file."},
    {"__enter__", (PyCFunction)exporter_enter, METH_NOARGS, "__enter__($self, /)\n--\n\nThe exporter itself."},
    {"__exit__", (PyCFunction)exporter_exit, METH_VARARGS,
     "__exit__($self, exc_type=None, exc_value=None, traceback=None, /)\n--\n\nClose the exporter."},
    {NULL},
};

static PyTypeObject Exporter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.FunctionExporter",
    .tp_basicsize = sizeof(ExporterObject),
    .tp_dealloc = (destructor)exporter_dealloc,
    .tp_traverse = (traverseproc)exporter_traverse,
    .tp_clear = (inquiry)exporter_clear,
    .tp_call = (ternaryfunc)exporter_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_methods = exporter_methods,
    .tp_doc = "A callable object to export multiple traces of a function to a file (make it with mx.exporter).",
};

/* export_function(file, fun, *args, shapeless=False, metadata=None, **kwargs) */
static PyObject *py_export_function(PyObject *m, PyObject *args, PyObject *kwargs) {
    (void)m;
    if (PyTuple_GET_SIZE(args) < 2) {
        PyErr_SetString(PyExc_TypeError, "export_function() takes a file (or callback), a function and its inputs.");
        return NULL;
    }
    PyObject *target = PyTuple_GET_ITEM(args, 0), *fun = PyTuple_GET_ITEM(args, 1);
    PyObject *kw = kwargs ? PyDict_Copy(kwargs) : PyDict_New(), *rest = NULL, *e = NULL, *r = NULL;
    if (!kw) return NULL;
    PyObject *sl = PyDict_GetItemString(kw, "shapeless"), *md = PyDict_GetItemString(kw, "metadata");
    Py_XINCREF(sl);
    Py_XINCREF(md);
    if (sl) PyDict_DelItemString(kw, "shapeless");
    if (md) PyDict_DelItemString(kw, "metadata");
    int shapeless = sl ? PyObject_IsTrue(sl) : 0;
    if (shapeless < 0) goto done;
    if (!PyCallable_Check(fun)) {
        PyErr_SetString(PyExc_TypeError, "export_function(): fun must be callable.");
        goto done;
    }
    if (!(rest = PyTuple_GetSlice(args, 2, PyTuple_GET_SIZE(args)))) goto done;
    PyObject *pos, *kwd;
    if (split_inputs(rest, kw, "[export_function]", &pos, &kwd) < 0) goto done;
    if ((e = exporter_make(fun, target, shapeless, md))) {
        if (exporter_export((ExporterObject *)e, pos, kwd) == 0) r = Py_NewRef(Py_None);
    }
    Py_DECREF(pos);
    Py_DECREF(kwd);
done:
    Py_XDECREF(sl);
    Py_XDECREF(md);
    Py_XDECREF(kw);
    Py_XDECREF(rest);
    Py_XDECREF(e);
    return r;
}

/* exporter(file, fun, *, shapeless=False, metadata=None) */
static PyObject *py_exporter(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"file", "fun", "shapeless", "metadata", NULL};
    PyObject *a[4] = {NULL, NULL, NULL, NULL};
    (void)m;
    if (mkpy_parse("exporter", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    if (!PyUnicode_Check(a[0])) {
        PyErr_SetString(PyExc_TypeError, "exporter(): file must be a str.");
        return NULL;
    }
    int shapeless = a[2] ? PyObject_IsTrue(a[2]) : 0;
    if (shapeless < 0) return NULL;
    return exporter_make(a[1], a[0], shapeless, a[3]);
}

/* ------------------------------------------------------------ import */

typedef struct {
    PyObject_HEAD
    mk_xfile f;
} ImportedObject;

static void imported_dealloc(ImportedObject *o) {
    mk_xfile_free(&o->f);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static PyObject *imported_call(ImportedObject *o, PyObject *args, PyObject *kwargs) {
    PyObject *pos, *kw, *keys = NULL, *result = NULL;
    mk_array **in = NULL, **outs = NULL;
    int nin = 0;
    if (split_inputs(args, kwargs, "[import_function::call]", &pos, &kw) < 0) return NULL;
    if (!(keys = sorted_keys(kw)) || !(in = flat_inputs(pos, kw, keys, &nin))) goto done;
    const mk_xgraph *g = NULL;
    for (int i = 0; i < o->f.count && !g; i++)
        if (sig_match(&o->f.funs[i], o->f.shapeless, in, nin, keys)) g = &o->f.funs[i];
    if (!g) {
        /* MLX's message, listing the traces and the call */
        PyObject *msg = PyUnicode_FromString(
            "[import_function::call] No imported function found which matches the given positional and keyword "
            "arguments. Possible functions include:\n");
        char sb[512];
        for (int i = 0; msg && i < o->f.count; i++) {
            const mk_xgraph *h = &o->f.funs[i];
            int npos = h->nin - h->nkw;
            PyObject *s = PyUnicode_FromFormat(" %d. Function with %d positional inputs and %d keyword inputs:\n",
                                               i + 1, npos, h->nkw);
            for (int j = 0; s && j < h->nin; j++) {
                shape_repr(sb, sizeof sb, h->in_desc[j].ndim, h->in_desc[j].shape);
                PyObject *line = j < npos ? PyUnicode_FromFormat("   %d: %s %s\n", j + 1, sb,
                                                                 dtype_str(h->in_desc[j].dtype))
                                          : PyUnicode_FromFormat("   \"%s\": %s %s\n", h->kw[j - npos], sb,
                                                                 dtype_str(h->in_desc[j].dtype));
                PyObject *t = line ? PyUnicode_Concat(s, line) : NULL;
                Py_XDECREF(line);
                Py_SETREF(s, t);
            }
            PyObject *t = s ? PyUnicode_Concat(msg, s) : NULL;
            Py_XDECREF(s);
            Py_SETREF(msg, t);
        }
        Py_ssize_t np = PyList_GET_SIZE(pos);
        PyObject *tail = msg ? PyUnicode_FromFormat("\nCalled with %zd positional inputs and %zd keyword inputs:\n",
                                                    np, PyList_GET_SIZE(keys))
                             : NULL;
        for (int j = 0; tail && j < nin; j++) {
            shape_repr(sb, sizeof sb, in[j]->ndim, in[j]->shape);
            PyObject *line = j < np ? PyUnicode_FromFormat("  %d: %s %s\n", j + 1, sb, dtype_str(in[j]->dtype))
                                    : PyUnicode_FromFormat("  \"%U\": %s %s\n", PyList_GET_ITEM(keys, j - np), sb,
                                                           dtype_str(in[j]->dtype));
            PyObject *t = line ? PyUnicode_Concat(tail, line) : NULL;
            Py_XDECREF(line);
            Py_SETREF(tail, t);
        }
        PyObject *full = tail ? PyUnicode_Concat(msg, tail) : NULL;
        if (full) PyErr_SetObject(PyExc_ValueError, full);
        Py_XDECREF(full);
        Py_XDECREF(tail);
        Py_XDECREF(msg);
        goto done;
    }
    if (!(outs = PyMem_Calloc((size_t)g->nout + 1, sizeof *outs))) {
        PyErr_NoMemory();
        goto done;
    }
    if (mk_xgraph_run(g, in, outs) < 0) {
        mkpy_raise();
        goto done;
    }
    result = PyTuple_New(g->nout);
    for (int j = 0; j < g->nout; j++) {
        PyObject *a = result ? mkpy_wrap(outs[j]) : NULL;
        outs[j] = NULL;
        if (!a) {
            Py_CLEAR(result);
            continue;
        }
        PyTuple_SET_ITEM(result, j, a);
    }
    for (int j = 0; j < g->nout; j++) mk_xdecref(outs[j]);
done:
    PyMem_Free(outs);
    PyMem_Free(in);
    Py_XDECREF(keys);
    Py_DECREF(pos);
    Py_DECREF(kw);
    return result;
}

static PyTypeObject Imported_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.ImportedFunction",
    .tp_basicsize = sizeof(ImportedObject),
    .tp_dealloc = (destructor)imported_dealloc,
    .tp_call = (ternaryfunc)imported_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A function imported with mx.import_function; returns a tuple of arrays.",
};

/* import_function(file, return_metadata=False) */
static PyObject *py_import_function(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"file", "return_metadata", NULL};
    PyObject *a[2] = {NULL, NULL};
    (void)m;
    if (mkpy_parse("import_function", args, nargs, kwnames, names, 1, a) < 0) return NULL;
    PyObject *path = PyOS_FSPath(a[0]);
    if (!path) return NULL;
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(path, &bytes)) {
        Py_DECREF(path);
        return NULL;
    }
    Py_DECREF(path);
    int want_md = a[1] ? PyObject_IsTrue(a[1]) : 0;
    if (want_md < 0) {
        Py_DECREF(bytes);
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(bytes);
    FILE *f = fopen(p, "rb");
    unsigned char *data = NULL;
    long len = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
        data = PyMem_Malloc((size_t)len + 1);
        if (data && fread(data, 1, (size_t)len, f) != (size_t)len) {
            PyMem_Free(data);
            data = NULL;
        }
    }
    if (f) fclose(f);
    if (!data) {
        PyErr_Format(PyExc_RuntimeError, "[import_function] Failed to open %s", p);
        Py_DECREF(bytes);
        return NULL;
    }
    Py_DECREF(bytes);
    ImportedObject *o = PyObject_New(ImportedObject, &Imported_Type);
    if (!o) {
        PyMem_Free(data);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mk_xread_file(data, (size_t)len, &o->f);
    Py_END_ALLOW_THREADS
    PyMem_Free(data);
    if (rc < 0) {
        memset(&o->f, 0, sizeof o->f);
        Py_DECREF(o);
        return mkpy_raise();
    }
    if (!want_md) return (PyObject *)o;
    PyObject *r = Py_BuildValue("(Ns)", (PyObject *)o, o->f.metadata ? o->f.metadata : "");
    return r;
}

static PyMethodDef export_functions[] = {
    {"export_function", (PyCFunction)(void (*)(void))py_export_function, METH_VARARGS | METH_KEYWORDS,
     "export_function(file_or_callback, fun, *args, shapeless=False, metadata=None, **kwargs)\n--\n\n"
     "Export a function's traced graph to a file in MLX's .mlxfn format (or pass it to a callback)."},
    {"import_function", FN(py_import_function), FASTKW,
     "import_function(file, return_metadata=False)\n--\n\n"
     "Import a function from a .mlxfn file; it returns a tuple of arrays."},
    {"exporter", FN(py_exporter), FASTKW,
     "exporter(file, fun, *, shapeless=False, metadata=None)\n--\n\n"
     "Make a callable object to export multiple traces of a function to a file."},
    {NULL},
};

int mkpy_export_init(PyObject *m) {
    if (PyType_Ready(&Exporter_Type) < 0 || PyType_Ready(&Imported_Type) < 0) return -1;
    if (PyModule_AddObjectRef(m, "FunctionExporter", (PyObject *)&Exporter_Type) < 0) return -1;
    return PyModule_AddFunctions(m, export_functions);
}
