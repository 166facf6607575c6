/* Pytrees (see py_tree.h): nested lists, tuples and dicts with arrays at the
 * leaves, walked the same way by every transformation and by compile. A
 * leaf is an array; lists and tuples (subclasses included) and dicts
 * (subclasses included) are containers; anything else is a constant leaf.
 * Also the closure type and functools.update_wrapper in C. */
#include "py_tree.h"

#define IS_SEQ(o) (PyList_Check(o) || PyTuple_Check(o))

int mkpy_tree_flatten(PyObject *tree, int strict, PyObject *out) {
    if (PyMkArray_Check(tree)) return PyList_Append(out, tree);
    if (IS_SEQ(tree)) {
        if (Py_EnterRecursiveCall(" in tree_flatten")) return -1;
        int rc = 0;
        /* a list may change under a callback: index it afresh each time */
        for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(tree); i++) {
            PyObject *t = Py_NewRef(PySequence_Fast_GET_ITEM(tree, i));
            rc = mkpy_tree_flatten(t, strict, out);
            Py_DECREF(t);
        }
        Py_LeaveRecursiveCall();
        return rc;
    }
    if (PyDict_Check(tree)) {
        if (Py_EnterRecursiveCall(" in tree_flatten")) return -1;
        PyObject *vals = PyDict_Values(tree);
        int rc = vals ? 0 : -1;
        for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(vals); i++)
            rc = mkpy_tree_flatten(PyList_GET_ITEM(vals, i), strict, out);
        Py_XDECREF(vals);
        Py_LeaveRecursiveCall();
        return rc;
    }
    if (strict) {
        PyErr_SetString(PyExc_ValueError, "[tree_flatten] The argument should contain only arrays");
        return -1;
    }
    return 0;
}

PyObject *mkpy_tree_rebuild_tuple(PyObject *tree, PyObject *items) {
    PyTypeObject *t = Py_TYPE(tree);
    if (t == &PyTuple_Type) return PyList_AsTuple(items);
    PyObject *args = PyList_AsTuple(items);
    if (!args) return NULL;
    PyObject *r;
    if (PyObject_HasAttrString(tree, "_fields"))
        r = PyObject_Call((PyObject *)t, args, NULL); /* a named tuple: t(*items) */
    else
        r = PyObject_CallOneArg((PyObject *)t, args); /* t(items) */
    Py_DECREF(args);
    return r;
}

static PyObject *next_leaf(PyObject *leaves, Py_ssize_t *pos) {
    if (*pos >= PyList_GET_SIZE(leaves)) {
        PyErr_SetString(PyExc_ValueError, "[tree_unflatten] Not enough leaves to fill the tree.");
        return NULL;
    }
    return Py_NewRef(PyList_GET_ITEM(leaves, (*pos)++));
}

/* The shared walk of fill, fill-in-place and update: leaf(ctx, array) gives
 * each array's replacement; inplace updates lists and dicts in place. */
typedef struct {
    PyObject *(*leaf)(void *ctx, PyObject *x);
    void *ctx;
    int inplace;
} walk;

static PyObject *walk_tree(const walk *w, PyObject *tree);

static PyObject *walk_items(const walk *w, PyObject *tree) {
    /* the list of tree's items, each walked */
    Py_ssize_t n = PySequence_Fast_GET_SIZE(tree);
    PyObject *items = PyList_New(n);
    if (!items) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = Py_NewRef(PySequence_Fast_GET_ITEM(tree, i));
        PyObject *v = walk_tree(w, t);
        Py_DECREF(t);
        if (!v) {
            Py_DECREF(items);
            return NULL;
        }
        PyList_SET_ITEM(items, i, v);
    }
    return items;
}

static PyObject *walk_tree(const walk *w, PyObject *tree) {
    if (PyMkArray_Check(tree)) return w->leaf(w->ctx, tree);
    if (!IS_SEQ(tree) && !PyDict_Check(tree)) return Py_NewRef(tree);
    if (Py_EnterRecursiveCall(" in a tree walk")) return NULL;
    PyObject *r = NULL;
    if (PyList_Check(tree) && w->inplace) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(tree); i++) {
            PyObject *t = Py_NewRef(PyList_GET_ITEM(tree, i));
            PyObject *v = walk_tree(w, t);
            Py_DECREF(t);
            if (!v || PyList_SetItem(tree, i, v) < 0) goto done; /* SetItem steals v */
        }
        r = Py_NewRef(tree);
    } else if (IS_SEQ(tree)) {
        PyObject *items = walk_items(w, tree);
        if (items && PyList_Check(tree)) {
            r = items; /* a plain list */
            items = NULL;
        } else if (items) {
            r = mkpy_tree_rebuild_tuple(tree, items);
        }
        Py_XDECREF(items);
    } else { /* a dict */
        PyObject *d = w->inplace ? Py_NewRef(tree) : PyDict_New();
        PyObject *keys = d ? PyDict_Keys(tree) : NULL;
        if (!keys) {
            Py_XDECREF(d);
            goto done;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys); i++) {
            PyObject *k = PyList_GET_ITEM(keys, i);
            PyObject *t = PyDict_GetItemWithError(tree, k);
            if (!t) {
                if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, k);
                Py_CLEAR(d);
                break;
            }
            Py_INCREF(t);
            PyObject *v = walk_tree(w, t);
            Py_DECREF(t);
            int rc = v ? PyDict_SetItem(d, k, v) : -1;
            Py_XDECREF(v);
            if (rc < 0) {
                Py_CLEAR(d);
                break;
            }
        }
        Py_DECREF(keys);
        r = d;
    }
done:
    Py_LeaveRecursiveCall();
    return r;
}

typedef struct {
    PyObject *leaves;
    Py_ssize_t *pos;
} fill_ctx;

static PyObject *fill_leaf(void *ctx, PyObject *x) {
    (void)x;
    fill_ctx *f = ctx;
    return next_leaf(f->leaves, f->pos);
}

PyObject *mkpy_tree_fill(PyObject *tree, PyObject *leaves, Py_ssize_t *pos) {
    fill_ctx f = {leaves, pos};
    walk w = {fill_leaf, &f, 0};
    return walk_tree(&w, tree);
}

PyObject *mkpy_tree_fill_inplace(PyObject *tree, PyObject *leaves, Py_ssize_t *pos) {
    fill_ctx f = {leaves, pos};
    walk w = {fill_leaf, &f, 1};
    return walk_tree(&w, tree);
}

PyObject *mkpy_tree_update(PyObject *tree, mkpy_leaf_fn fn, void *ctx) {
    walk w = {fn, ctx, 1};
    return walk_tree(&w, tree);
}

PyObject *mkpy_tree_map_leaves(PyObject *tree, mkpy_leaf_fn fn, void *ctx) {
    if (!IS_SEQ(tree) && !PyDict_Check(tree)) return fn(ctx, tree);
    if (Py_EnterRecursiveCall(" in a tree walk")) return NULL;
    PyObject *r = NULL;
    if (IS_SEQ(tree)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(tree);
        PyObject *items = PyList_New(n);
        for (Py_ssize_t i = 0; items && i < n; i++) {
            PyObject *t = Py_NewRef(PySequence_Fast_GET_ITEM(tree, i));
            PyObject *v = mkpy_tree_map_leaves(t, fn, ctx);
            Py_DECREF(t);
            if (!v) {
                Py_CLEAR(items);
                break;
            }
            PyList_SET_ITEM(items, i, v);
        }
        if (items && PyTuple_Check(tree)) {
            r = PyList_AsTuple(items);
            Py_DECREF(items);
        } else {
            r = items;
        }
    } else {
        PyObject *d = PyDict_New(), *k, *v;
        Py_ssize_t p = 0;
        while (d && PyDict_Next(tree, &p, &k, &v)) {
            Py_INCREF(v);
            PyObject *m = mkpy_tree_map_leaves(v, fn, ctx);
            Py_DECREF(v);
            if (!m || PyDict_SetItem(d, k, m) < 0) {
                Py_XDECREF(m);
                Py_CLEAR(d);
                break;
            }
            Py_DECREF(m);
        }
        r = d;
    }
    Py_LeaveRecursiveCall();
    return r;
}

PyObject *mkpy_tree_type_name(PyObject *o) {
    PyTypeObject *t = Py_TYPE(o);
    PyObject *mod = PyObject_GetAttrString((PyObject *)t, "__module__");
    if (!mod) return NULL;
    PyObject *r;
    if (PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "builtins") == 0) {
        r = PyObject_GetAttrString((PyObject *)t, "__name__");
    } else {
        PyObject *q = PyObject_GetAttrString((PyObject *)t, "__qualname__");
        r = q ? PyUnicode_FromFormat("%S.%S", mod, q) : NULL;
        Py_XDECREF(q);
    }
    Py_DECREF(mod);
    return r;
}

/* key.append(tuple of the n items), stealing them (NULL items: error) */
static int key_append(PyObject *key, Py_ssize_t n, PyObject *a, PyObject *b, PyObject *c) {
    PyObject *items[3] = {a, b, c};
    PyObject *t = NULL;
    int ok = 1;
    for (Py_ssize_t i = 0; i < n; i++) ok &= items[i] != NULL;
    if (ok) t = PyTuple_New(n);
    int rc = -1;
    if (t) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyTuple_SET_ITEM(t, i, items[i]);
            items[i] = NULL;
        }
        rc = PyList_Append(key, t);
        Py_DECREF(t);
    }
    for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(items[i]);
    return rc;
}

int mkpy_tree_signature(PyObject *tree, PyObject *arrays, PyObject *key, int shapeless) {
    if (PyMkArray_Check(tree)) {
        mk_array *x = MKARR(tree);
        PyObject *dims;
        if (shapeless) {
            dims = PyLong_FromLong(x->ndim);
        } else {
            dims = PyTuple_New(x->ndim);
            for (int d = 0; dims && d < x->ndim; d++) {
                PyObject *v = PyLong_FromLongLong(x->shape[d]);
                if (!v) {
                    Py_CLEAR(dims);
                    break;
                }
                PyTuple_SET_ITEM(dims, d, v);
            }
        }
        if (PyList_Append(arrays, tree) < 0) {
            Py_XDECREF(dims);
            return -1;
        }
        return key_append(key, 3, PyUnicode_FromString("a"), Py_NewRef(mkpy_dtype_object(x->dtype)), dims);
    }
    if (IS_SEQ(tree) || PyDict_Check(tree)) {
        int is_dict = PyDict_Check(tree);
        Py_ssize_t n = is_dict ? PyDict_GET_SIZE(tree) : PySequence_Fast_GET_SIZE(tree);
        if (key_append(key, 2, PyUnicode_FromString(is_dict ? "d" : "l"), PyLong_FromSsize_t(n), NULL) < 0)
            return -1;
        if (Py_EnterRecursiveCall(" in compile's signature")) return -1;
        int rc = 0;
        if (is_dict) {
            PyObject *k, *v;
            Py_ssize_t p = 0;
            while (rc == 0 && PyDict_Next(tree, &p, &k, &v)) {
                Py_INCREF(v);
                rc = key_append(key, 2, PyUnicode_FromString("k"), Py_NewRef(k), NULL);
                if (rc == 0) rc = mkpy_tree_signature(v, arrays, key, shapeless);
                Py_DECREF(v);
            }
        } else {
            for (Py_ssize_t i = 0; rc == 0 && i < PySequence_Fast_GET_SIZE(tree); i++) {
                PyObject *t = Py_NewRef(PySequence_Fast_GET_ITEM(tree, i));
                rc = mkpy_tree_signature(t, arrays, key, shapeless);
                Py_DECREF(t);
            }
        }
        Py_LeaveRecursiveCall();
        return rc;
    }
    if (tree == Py_None || PyBool_Check(tree) || PyLong_Check(tree) || PyFloat_Check(tree) || PyUnicode_Check(tree)) {
        PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(tree), "__name__");
        return key_append(key, 3, PyUnicode_FromString("c"), name, Py_NewRef(tree));
    }
    PyObject *name = mkpy_tree_type_name(tree);
    if (name) {
        PyErr_Format(PyExc_ValueError,
                     "[compile] Function arguments must be trees of arrays or constants (floats, ints, strings, or "
                     "None), but received type %U.",
                     name);
        Py_DECREF(name);
    }
    return -1;
}

/* ------------------------------------------------------------ closures */

static PyObject *closure_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "this internal function takes no keyword arguments");
        return NULL;
    }
    mkpy_closure *c = (mkpy_closure *)self;
    return c->fn(c, args, PyVectorcall_NARGS(nargsf));
}

static int closure_traverse(mkpy_closure *c, visitproc visit, void *arg) {
    for (int k = 0; k < MKPY_CLOSURE_SLOTS; k++) Py_VISIT(c->s[k]);
    return 0;
}

static int closure_clear(mkpy_closure *c) {
    for (int k = 0; k < MKPY_CLOSURE_SLOTS; k++) Py_CLEAR(c->s[k]);
    return 0;
}

static void closure_dealloc(mkpy_closure *c) {
    PyObject_GC_UnTrack(c);
    closure_clear(c);
    PyObject_GC_Del(c);
}

PyTypeObject mkpy_closure_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy._closure",
    .tp_basicsize = sizeof(mkpy_closure),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "An internal callable of mkpy's transformations.",
    .tp_vectorcall_offset = offsetof(mkpy_closure, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)closure_traverse,
    .tp_clear = (inquiry)closure_clear,
    .tp_dealloc = (destructor)closure_dealloc,
};

mkpy_closure *mkpy_closure_new(mkpy_closure_fn fn) {
    mkpy_closure *c = PyObject_GC_New(mkpy_closure, &mkpy_closure_Type);
    if (!c) return NULL;
    c->vectorcall = closure_vectorcall;
    c->fn = fn;
    for (int k = 0; k < MKPY_CLOSURE_SLOTS; k++) c->s[k] = NULL;
    for (int k = 0; k < 4; k++) c->i[k] = 0;
    PyObject_GC_Track(c);
    return c;
}

void mkpy_closure_set(mkpy_closure *c, int k, PyObject *v) {
    Py_XSETREF(c->s[k], Py_XNewRef(v));
}

/* ------------------------------------------------------ update_wrapper */

int mkpy_update_wrapper(PyObject **dict, PyObject *fun) {
    static const char *const names[] = {"__module__", "__name__", "__qualname__", "__doc__", NULL};
    if (!*dict && !(*dict = PyDict_New())) return -1;
    for (int k = 0; names[k]; k++) {
        PyObject *v = PyObject_GetAttrString(fun, names[k]);
        if (!v) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
            PyErr_Clear();
            continue;
        }
        int rc = PyDict_SetItemString(*dict, names[k], v);
        Py_DECREF(v);
        if (rc < 0) return -1;
    }
    PyObject *fd = PyObject_GetAttrString(fun, "__dict__");
    if (!fd) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
        PyErr_Clear();
    } else {
        int rc = PyDict_Check(fd) ? PyDict_Update(*dict, fd) : 0;
        Py_DECREF(fd);
        if (rc < 0) return -1;
    }
    return PyDict_SetItemString(*dict, "__wrapped__", fun);
}
