/* mx.export_to_dot: the lazy graph behind some arrays in Graphviz's DOT
 * language, as MLX writes it (graph_utils.cpp): evaluated arrays are sources,
 * each primitive a rectangle labelled with MLX's name of the primitive
 * (core/compile.c) and identified by its address, arrays named A, B, ...
 * unless named by a keyword argument, arrays no primitive reads are sinks. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/compile.h"
#include "mkpy.h"

#define FN(f) (PyCFunction)(void (*)(void))(f)

/* ------------------------------------------------------------ text buffer */

typedef struct {
    char *s;
    size_t n, cap;
    bool failed;
} tbuf;

static void tb_add(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_add(tbuf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = true;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + (size_t)k + 1) cap *= 2;
        char *s = PyMem_Realloc(b->s, cap);
        if (!s) {
            b->failed = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* ------------------------------------------------------------ flattening */

static int flatten(PyObject *tree, PyObject *list) {
    if (PyMkArray_Check(tree)) return PyList_Append(list, tree);
    if (PyList_Check(tree) || PyTuple_Check(tree)) {
        PyObject *fast = PySequence_Fast(tree, "");
        if (!fast) return -1;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++)
            if (flatten(PySequence_Fast_GET_ITEM(fast, i), list) < 0) {
                Py_DECREF(fast);
                return -1;
            }
        Py_DECREF(fast);
        return 0;
    }
    if (PyDict_Check(tree)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(tree, &pos, &k, &v))
            if (flatten(v, list) < 0) return -1;
        return 0;
    }
    PyErr_SetString(PyExc_ValueError, "[tree_flatten] The argument should contain only arrays");
    return -1;
}

/* ------------------------------------------------------------ naming */

typedef struct {
    PyObject *names; /* dict: array address (int) -> str */
} namer;

/* A new reference to x's name, or NULL with an exception. */
static PyObject *name_of(namer *nm, const mk_array *x) {
    PyObject *key = PyLong_FromVoidPtr((void *)x);
    if (!key) return NULL;
    PyObject *v = PyDict_GetItemWithError(nm->names, key);
    if (v) {
        Py_DECREF(key);
        return Py_NewRef(v);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    /* the next name in the sequence A, B, ..., Z, AA, AB, ... */
    char letters[32];
    int n = 0;
    for (Py_ssize_t num = PyDict_GET_SIZE(nm->names) + 1; num > 0 && n < 31; num = (num - 1) / 26)
        letters[n++] = (char)('A' + (num - 1) % 26);
    char name[32];
    for (int i = 0; i < n; i++) name[i] = letters[n - 1 - i];
    name[n] = 0;
    v = PyUnicode_FromString(name);
    if (!v || PyDict_SetItem(nm->names, key, v) < 0) {
        Py_XDECREF(v);
        Py_DECREF(key);
        return NULL;
    }
    Py_DECREF(key);
    return v;
}

/* ------------------------------------------------------------ traversal */

static mk_prim *prim_of(const mk_array *x) { return atomic_load_explicit(&((mk_array *)x)->prim, memory_order_acquire); }

typedef int (*visit_fn)(void *ctx, mk_array *x);

/* MLX's depth_first_traversal: inputs before the array, each array once (an
 * array's siblings count as visited with it). Iterative: deep graphs. */
static int traverse(mk_array *const *roots, Py_ssize_t nroots, visit_fn fn, void *ctx) {
    PyObject *seen = PySet_New(NULL);
    typedef struct {
        mk_array *x;
        int next;
    } frame;
    size_t cap = 64, n = 0;
    frame *st = PyMem_Malloc(cap * sizeof *st);
    int rc = -1;
    if (!seen || !st) {
        PyErr_NoMemory();
        goto done;
    }
#define MARK(a)                                                                                                    \
    do {                                                                                                           \
        PyObject *k_ = PyLong_FromVoidPtr(a);                                                                      \
        int r_ = k_ ? PySet_Add(seen, k_) : -1;                                                                    \
        Py_XDECREF(k_);                                                                                            \
        if (r_ < 0) goto done;                                                                                     \
    } while (0)
    for (Py_ssize_t r = 0; r < nroots; r++) {
        mk_array *push = roots[r];
        for (;;) {
            if (push) {
                PyObject *k = PyLong_FromVoidPtr(push);
                int has = k ? PySet_Contains(seen, k) : -1;
                Py_XDECREF(k);
                if (has < 0) goto done;
                if (!has) {
                    MARK(push);
                    mk_prim *p = prim_of(push);
                    for (int j = 0; p && j < p->noutputs; j++)
                        if (p->outputs[j]) MARK(p->outputs[j]);
                    if (n == cap) {
                        frame *s2 = PyMem_Realloc(st, (cap *= 2) * sizeof *st);
                        if (!s2) {
                            PyErr_NoMemory();
                            goto done;
                        }
                        st = s2;
                    }
                    st[n++] = (frame){push, 0};
                }
                push = NULL;
            }
            if (!n) break;
            frame *f = &st[n - 1];
            mk_prim *p = prim_of(f->x);
            if (p && p->inputs && f->next < p->ninputs) {
                push = p->inputs[f->next++];
                continue;
            }
            mk_array *x = f->x;
            n--;
            if (fn(ctx, x) < 0) goto done;
        }
    }
#undef MARK
    rc = 0;
done:
    Py_XDECREF(seen);
    PyMem_Free(st);
    return rc;
}

typedef struct {
    PyObject *inter; /* set of array addresses read by a primitive */
    namer *nm;
    tbuf *b;
} dot_ctx;

static int mark_inputs(void *c, mk_array *x) {
    dot_ctx *d = c;
    mk_prim *p = prim_of(x);
    for (int i = 0; p && p->inputs && i < p->ninputs; i++) {
        PyObject *k = PyLong_FromVoidPtr(p->inputs[i]);
        int r = k ? PySet_Add(d->inter, k) : -1;
        Py_XDECREF(k);
        if (r < 0) return -1;
    }
    return 0;
}

static int add_name(dot_ctx *d, const char *fmt_before, const mk_array *x, const char *after) {
    PyObject *n = name_of(d->nm, x);
    const char *s = n ? PyUnicode_AsUTF8(n) : NULL;
    if (!s) {
        Py_XDECREF(n);
        return -1;
    }
    tb_add(d->b, "%s\"%s\"%s", fmt_before, s, after);
    Py_DECREF(n);
    return 0;
}

static int emit(void *c, mk_array *x) {
    dot_ctx *d = c;
    mk_prim *p = prim_of(x);
    if (!p) return add_name(d, "{ rank=source; ", x, "; }\n");
    char name[128];
    unsigned long long id = (unsigned long long)(uintptr_t)p;
    mk_prim_mlx_name(p, name, sizeof name);
    tb_add(d->b, "{ %llu [label =\"%s\", shape=rectangle]; }\n", id, name);
    char after[64];
    snprintf(after, sizeof after, " -> %llu\n", id);
    for (int i = 0; p->inputs && i < p->ninputs; i++)
        if (add_name(d, "", p->inputs[i], after) < 0) return -1;
    for (int j = 0; j < p->noutputs; j++) {
        mk_array *o = p->outputs[j];
        if (!o) continue;
        PyObject *k = PyLong_FromVoidPtr(o);
        int in = k ? PySet_Contains(d->inter, k) : -1;
        Py_XDECREF(k);
        if (in < 0) return -1;
        if (add_name(d, in ? "{ " : "{ rank=sink; ", o, "; }\n") < 0) return -1;
        tb_add(d->b, "%llu -> ", id);
        if (add_name(d, "", o, "\n") < 0) return -1;
    }
    return 0;
}

PyDoc_STRVAR(export_to_dot_doc,
             "export_to_dot(file, *args, **kwargs)\n--\n\n"
             "Export a graph to DOT format for visualization.\n\n"
             "The graph of the given output arrays (trees of arrays) is written with\n"
             "all their unevaluated inputs. ``file`` is a path or a file-like object;\n"
             "keyword arguments name arrays in the graph.");

static PyObject *py_export_to_dot(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    (void)m;
    if (nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "export_to_dot() missing required argument 'file' (pos 1)");
        return NULL;
    }
    PyObject *file = args[0], *list = PyList_New(0), *pos = NULL, *kw = NULL, *result = NULL;
    namer nm = {PyDict_New()};
    dot_ctx d = {PySet_New(NULL), &nm, NULL};
    tbuf b = {0};
    mk_array **roots = NULL;
    d.b = &b;
    if (!list || !nm.names || !d.inter) goto error;
    if (!(pos = PyTuple_New(nargs - 1)) || !(kw = PyDict_New())) goto error;
    for (Py_ssize_t i = 1; i < nargs; i++) PyTuple_SET_ITEM(pos, i - 1, Py_NewRef(args[i]));
    for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++)
        if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) goto error;
    if (flatten(pos, list) < 0 || flatten(kw, list) < 0) goto error;
    /* keyword arguments name their arrays */
    for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++) {
        PyObject *v = args[nargs + i], *key;
        if (!PyMkArray_Check(v)) {
            PyErr_SetString(PyExc_ValueError, "[tree_flatten] The argument should contain only arrays");
            goto error;
        }
        if (!(key = PyLong_FromVoidPtr(MKARR(v)))) goto error;
        int r = PyDict_SetItem(nm.names, key, PyTuple_GET_ITEM(kwnames, i));
        Py_DECREF(key);
        if (r < 0) goto error;
    }
    if (!PyUnicode_Check(file) && !PyObject_HasAttrString(file, "write")) {
        PyErr_SetString(PyExc_ValueError,
                        "[export_to_dot] Accepts file-like objects or strings to be used as filenames.");
        goto error;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (!(roots = PyMem_Calloc(n ? n : 1, sizeof *roots))) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) roots[i] = MKARR(PyList_GET_ITEM(list, i));
    if (traverse(roots, n, mark_inputs, &d) < 0) goto error;
    tb_add(&b, "digraph {\n");
    if (traverse(roots, n, emit, &d) < 0) goto error;
    tb_add(&b, "}");
    if (b.failed) {
        PyErr_NoMemory();
        goto error;
    }
    if (PyUnicode_Check(file)) {
        PyObject *path = PyUnicode_EncodeFSDefault(file);
        FILE *f = path ? fopen(PyBytes_AS_STRING(path), "w") : NULL;
        if (path && !f) PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, file);
        Py_XDECREF(path);
        if (!f) goto error;
        size_t w = fwrite(b.s, 1, b.n, f);
        if (fclose(f) != 0 || w != b.n) {
            PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, file);
            goto error;
        }
    } else {
        PyObject *s = PyUnicode_FromStringAndSize(b.s, (Py_ssize_t)b.n);
        PyObject *r = s ? PyObject_CallMethod(file, "write", "O", s) : NULL;
        Py_XDECREF(s);
        if (!r) goto error;
        Py_DECREF(r);
    }
    result = Py_NewRef(Py_None);
error:
    PyMem_Free(roots);
    PyMem_Free(b.s);
    Py_XDECREF(list);
    Py_XDECREF(pos);
    Py_XDECREF(kw);
    Py_XDECREF(nm.names);
    Py_XDECREF(d.inter);
    return result;
}

PyMethodDef mkpy_dot_functions[] = {
    {"export_to_dot", FN(py_export_to_dot), METH_FASTCALL | METH_KEYWORDS, export_to_dot_doc},
    {NULL, NULL, 0, NULL},
};
