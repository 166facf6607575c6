/* Advanced indexing and the gather/scatter functions: x[arrays...] (the
 * module function _advanced_getitem, which py_index.c calls for keys that
 * are not basic), x[key] = v, x.at[key].add(v) and friends, take,
 * take_along_axis and put_along_axis.
 *
 * A key becomes a plan (core/ops.h, mk_index_dim): one entry per dim of x,
 * sliced, fixed by an int or indexed by an integer array (lists become
 * arrays), plus where the broadcast index dims go: in place of the first
 * advanced index when the advanced indices (ints and arrays) are adjacent,
 * first otherwise, as numpy and MLX. An Ellipsis that stands for no dims
 * does not separate them (MLX's rule; numpy's differs there). None dims are
 * added by a reshape.
 *
 * Python ints out of range raise IndexError, as numpy (MLX reads or writes
 * out of bounds); array indices are not checked by MLX: here gathers clamp
 * them and scatters drop them (core/ops_index.c). */
#include "mkpy.h"

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

enum { K_NONE, K_ELL, K_SLICE, K_INT, K_ARRAY };
enum { M_GET, M_SET, M_AT };

/* cap on the items of a key (Nones included) */
#define MAX_ITEMS (2 * MK_MAX_NDIM)

typedef struct {
    int nitems;
    int kind[MAX_ITEMS];
    int64_t len[MAX_ITEMS]; /* K_SLICE: length; K_NONE: 1 */
    mk_index_dim dims[MK_MAX_NDIM];
    int narr;
    mk_array *arrs[MK_MAX_NDIM]; /* owned */
    int bpos;
    int gnd, fnd;              /* gather and final (None dims included) shapes */
    int64_t gshape[MK_MAX_NDIM], fshape[MK_MAX_NDIM];
} plan;

static void plan_clear(plan *p) {
    for (int k = 0; k < p->narr; k++) mk_decref(p->arrs[k]);
    p->narr = 0;
}

/* ints as MLX's nanobind int caster takes them: Python ints (not bools) and
 * objects with __index__ that are not arrays or floats (numpy integers) */
static int is_int_item(PyObject *o) {
    if (PyBool_Check(o)) return 0;
    if (PyLong_Check(o)) return 1;
    if (PyMkArray_Check(o) || PyFloat_Check(o) || !PyIndex_Check(o)) return 0;
    PyObject *v = PyNumber_Index(o);
    if (!v) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(v);
    return 1;
}

static int slice_bound_ok(PyObject *o) {
    return o == Py_None || PyLong_Check(o) || (!PyMkArray_Check(o) && !PyFloat_Check(o) && PyIndex_Check(o));
}

/* The key as a plan for x. */
static int make_plan(mk_array *x, PyObject *key, int mode, plan *p) {
    const char *op = mode == M_GET ? "gather" : "scatter";
    int single = !PyTuple_Check(key);
    Py_ssize_t n = single ? 1 : PyTuple_GET_SIZE(key);
    PyObject *items[MAX_ITEMS];
    memset(p, 0, sizeof *p);
    if (n > MAX_ITEMS) {
        PyErr_Format(PyExc_ValueError, "Too many indices for array with %d dimensions.", x->ndim);
        return -1;
    }
    /* classify */
    int nell = 0, nreal = 0;
    mk_array *item_arr[MAX_ITEMS] = {0};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = single ? key : PyTuple_GET_ITEM(key, i);
        items[i] = o;
        int k;
        if (o == Py_None) {
            k = K_NONE;
        } else if (o == Py_Ellipsis) {
            k = K_ELL;
            nell++;
        } else if (PySlice_Check(o)) {
            PySliceObject *sl = (PySliceObject *)o;
            if (!slice_bound_ok(sl->start) || !slice_bound_ok(sl->stop) || !slice_bound_ok(sl->step)) {
                PyErr_SetString(PyExc_ValueError, "Slice indices must be integers or None.");
                goto error;
            }
            k = K_SLICE;
        } else if (is_int_item(o)) {
            k = K_INT;
        } else if (PyMkArray_Check(o)) {
            k = K_ARRAY;
            item_arr[i] = MKARR(o);
            mk_incref(item_arr[i]);
        } else if (PyList_Check(o)) {
            k = K_ARRAY;
            if (!(item_arr[i] = mkpy_to_array(o, -1))) goto error;
        } else {
            PyErr_SetString(PyExc_ValueError, single ? "Cannot index mlx array using the given type."
                                                     : "Cannot index mlx array using the given type yet");
            goto error;
        }
        p->kind[i] = k;
        if (k != K_NONE && k != K_ELL) nreal++;
    }
    if (single && x->ndim == 0 && p->kind[0] != K_NONE && p->kind[0] != K_ELL) {
        PyErr_SetString(PyExc_ValueError, "too many indices for array: array is 0-dimensional");
        goto error;
    }
    if (single && mode == M_GET && p->kind[0] == K_ARRAY && item_arr[0]->dtype == MK_BOOL) {
        PyErr_SetString(PyExc_ValueError, "boolean indices are not yet supported");
        goto error;
    }
    if (nell > 1) {
        PyErr_SetString(PyExc_ValueError, "An index can only have a single ellipsis (...)");
        goto error;
    }
    if (nreal > x->ndim) {
        PyErr_Format(PyExc_ValueError, "Too many indices for array with %d dimensions.", x->ndim);
        goto error;
    }
    /* expand the Ellipsis (or add trailing full slices) and fill the dims */
    int kinds[MAX_ITEMS + MK_MAX_NDIM], nk = 0, d = 0;
    int64_t lens[MAX_ITEMS + MK_MAX_NDIM];
    int fill = x->ndim - nreal;
    for (Py_ssize_t i = 0; i <= n; i++) {
        int k = i < n ? p->kind[i] : K_ELL;
        if (k == K_ELL) {
            if (i == n && nell) break;
            for (int j = 0; j < fill; j++, d++) {
                p->dims[d] = (mk_index_dim){MK_IDX_SLICE, 0, 0, 1, x->shape[d]};
                lens[nk] = x->shape[d];
                kinds[nk++] = K_SLICE;
            }
            continue;
        }
        PyObject *o = items[i];
        if (k == K_NONE) {
            lens[nk] = 1;
        } else if (k == K_SLICE) {
            Py_ssize_t s0, s1, st;
            if (PySlice_Unpack(o, &s0, &s1, &st) < 0) goto error;
            Py_ssize_t len = PySlice_AdjustIndices((Py_ssize_t)x->shape[d], &s0, &s1, st);
            p->dims[d] = (mk_index_dim){MK_IDX_SLICE, 0, len > 0 ? s0 : 0, st, len};
            lens[nk] = len;
            d++;
        } else if (k == K_INT) {
            PyObject *iv = PyNumber_Index(o);
            if (!iv) goto error;
            Py_ssize_t v = PyNumber_AsSsize_t(iv, PyExc_IndexError);
            Py_DECREF(iv);
            if (v == -1 && PyErr_Occurred()) goto error;
            int64_t dim = x->shape[d];
            if (v < -dim || v >= dim) {
                PyErr_Format(PyExc_IndexError, "index %zd is out of bounds for axis %d with size %lld", v, d,
                             (long long)dim);
                goto error;
            }
            p->dims[d] = (mk_index_dim){MK_IDX_INT, 0, v < 0 ? v + dim : v, 1, 1};
            d++;
        } else {
            p->dims[d] = (mk_index_dim){MK_IDX_ARRAY, p->narr, 0, 0, 0};
            p->arrs[p->narr++] = item_arr[i];
            item_arr[i] = NULL;
            d++;
        }
        kinds[nk++] = k;
    }
    /* where the broadcast index dims go. MLX's scatters (x[key] = v, x.at)
     * do not count ints as advanced indices there, its gathers do (numpy) */
    int first_adv = -1, gather_first = 0, seen_gap = 0, nslices_before = 0;
    for (int i = 0; i < nk; i++) {
        if (mode != M_GET && kinds[i] == K_INT) continue;
        int adv = kinds[i] == K_INT || kinds[i] == K_ARRAY;
        if (adv) {
            if (first_adv < 0) first_adv = i;
            else if (seen_gap) gather_first = 1;
        } else if (first_adv >= 0) {
            seen_gap = 1;
        } else if (kinds[i] == K_SLICE) {
            nslices_before++;
        }
    }
    int has_array = p->narr > 0;
    p->bpos = has_array && !gather_first ? nslices_before : 0;
    p->gnd = mk_gather_shape(x, p->dims, p->narr, p->arrs, p->bpos, op, p->gshape);
    if (p->gnd < 0) {
        mkpy_raise();
        goto error;
    }
    /* the final shape: None dims are size-1 dims among the sliced ones */
    int nrest = 0;
    for (int i = 0; i < nk; i++) nrest += kinds[i] == K_SLICE;
    int nB = p->gnd - nrest, fnd = 0;
    const int64_t *B = p->gshape + p->bpos;
    if (has_array && gather_first)
        for (int j = 0; j < nB; j++) p->fshape[fnd++] = B[j];
    for (int i = 0; i < nk; i++) {
        if (has_array && !gather_first && i == first_adv)
            for (int j = 0; j < nB; j++) p->fshape[fnd++] = B[j];
        if (kinds[i] == K_SLICE || kinds[i] == K_NONE) {
            if (fnd >= MK_MAX_NDIM) {
                PyErr_Format(PyExc_ValueError, "Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
                goto error;
            }
            p->fshape[fnd++] = lens[i];
        }
    }
    p->fnd = fnd;
    for (Py_ssize_t i = 0; i < n; i++) mk_xdecref(item_arr[i]);
    return 0;
error:
    for (Py_ssize_t i = 0; i < n; i++) mk_xdecref(item_arr[i]);
    plan_clear(p);
    return -1;
}

static int same_shape(int na, const int64_t *a, int nb, const int64_t *b) {
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

/* ------------------------------------------------------------ getitem */

static PyObject *py_advanced_getitem(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    (void)m;
    if (nargs != 2 || !PyMkArray_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "_advanced_getitem(array, key)");
        return NULL;
    }
    mk_array *x = MKARR(args[0]);
    PyObject *key = args[1];
    plan p;
    if (make_plan(x, key, M_GET, &p) < 0) return NULL;
    mk_array *r;
    if (!PyTuple_Check(key) && p.narr == 1) {
        /* a single array: MLX's take along axis 0 */
        r = mk_take(x, p.arrs[0], 0, true);
    } else {
        r = mk_gather(x, p.dims, p.narr, p.arrs, p.bpos);
        if (r && !same_shape(p.fnd, p.fshape, p.gnd, p.gshape)) {
            mk_array *t = mk_reshape(r, p.fnd, p.fshape);
            mk_decref(r);
            r = t;
        }
    }
    plan_clear(&p);
    return mkpy_wrap(r);
}

/* ------------------------------------------------------------ updates */

/* The value as MLX's to_array(v, x.dtype), leading size-1 dims removed
 * (unless strip is false). */
static mk_array *update_value(mk_array *x, PyObject *value, bool strip) {
    mk_array *v = mkpy_to_array_dtype(value, x->dtype);
    if (!v || !strip) return v;
    int s = 0;
    while (s < v->ndim && v->shape[s] == 1) s++;
    if (s == 0) return v;
    mk_array *r = mk_reshape(v, v->ndim - s, v->shape + s);
    mk_decref(v);
    return r ? r : (mk_array *)mkpy_raise();
}

static int is_bare(PyObject *key) { return key == Py_None || key == Py_Ellipsis; }

/* The updated array for x[key] op= value (op MK_SCATTER_NONE: assignment). */
static mk_array *scatter_key(mk_array *x, PyObject *key, PyObject *value, int mode, mk_scatter_op op,
                             mk_unary_op pre, bool has_pre) {
    plan p;
    mk_array *v = NULL, *b = NULL, *g = NULL, *t = NULL, *r = NULL;
    if (make_plan(x, key, mode, &p) < 0) return NULL;
    if (!(v = update_value(x, value, true))) goto done;
    /* broadcast to x[key]'s shape, then drop the None dims */
    if (!(b = mk_broadcast_to(v, p.fnd, p.fshape)) || !(g = mk_reshape(b, p.gnd, p.gshape))) goto fail;
    if (has_pre && !(t = mk_unary(pre, g))) goto fail;
    r = mk_scatter(x, p.dims, p.narr, p.arrs, p.bpos, t ? t : g, op);
    if (!r) goto fail;
    goto done;
fail:
    mkpy_raise();
done:
    mk_xdecref(v);
    mk_xdecref(b);
    mk_xdecref(g);
    mk_xdecref(t);
    plan_clear(&p);
    return r;
}

static mk_array *as_mask(PyObject *key) {
    if (PyMkArray_Check(key)) {
        if (MKARR(key)->dtype != MK_BOOL) return NULL;
        mk_incref(MKARR(key));
        return MKARR(key);
    }
    /* a[True] = v sets everything, a[False] = v nothing (a 0-d mask, as MLX) */
    if (PyBool_Check(key)) return mkpy_to_array(key, -1);
    if (!PyList_Check(key) && !PyObject_CheckBuffer(key)) return NULL;
    mk_array *a = mkpy_to_array(key, -1);
    if (!a) {
        PyErr_Clear(); /* make_plan reports it */
        return NULL;
    }
    if (a->dtype == MK_BOOL) return a;
    mk_decref(a);
    return NULL;
}

int mkpy_setitem(PyMkArray *self, PyObject *key, PyObject *value) {
    mk_array *x = self->arr, *r = NULL;
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "__delitem__");
        return -1;
    }
    if (value == Py_None) {
        PyObject *args[3] = {(PyObject *)self, key, value};
        mkpy_bad_call("__setitem__",
                      "    1. __setitem__(self, arg0: object | None, arg1: bool | int | float | array | "
                      "ndarray[writable=False] | complex | ArrayLike, /) -> None",
                      args, 3, NULL);
        return -1;
    }
    mk_array *mask = as_mask(key);
    if (mask) {
        mk_array *v = mkpy_to_array_dtype(value, x->dtype);
        if (v) {
            r = mk_masked_scatter(x, mask, v);
            if (!r) mkpy_raise();
            mk_decref(v);
        }
        mk_decref(mask);
    } else if (is_bare(key)) {
        /* MLX replaces the array by the broadcast value (its dtype too);
         * x[None] = v does not drop v's leading size-1 dims */
        mk_array *v = update_value(x, value, key == Py_Ellipsis);
        if (v) {
            r = mk_broadcast_to(v, x->ndim, x->shape);
            if (!r) mkpy_raise();
            mk_decref(v);
        }
    } else {
        r = scatter_key(x, key, value, M_SET, MK_SCATTER_NONE, MK_UNARY_abs, false);
    }
    if (!r) return -1;
    mk_decref(self->arr);
    self->arr = r;
    return 0;
}

/* ------------------------------------------------------------- x.at */

typedef struct {
    PyObject_HEAD
    PyObject *array;
    PyObject *key; /* NULL until indexed */
} PyArrayAt;

static PyTypeObject PyArrayAt_Type;

static PyObject *at_new(PyObject *array, PyObject *key) {
    PyArrayAt *a = PyObject_New(PyArrayAt, &PyArrayAt_Type);
    if (!a) return NULL;
    a->array = Py_NewRef(array);
    a->key = Py_XNewRef(key);
    return (PyObject *)a;
}

static void at_dealloc(PyArrayAt *self) {
    Py_XDECREF(self->array);
    Py_XDECREF(self->key);
    PyObject_Free(self);
}

static PyObject *at_getitem(PyArrayAt *self, PyObject *key) { return at_new(self->array, key); }

typedef enum { AT_ADD, AT_SUBTRACT, AT_MULTIPLY, AT_DIVIDE, AT_MAXIMUM, AT_MINIMUM } at_op;

static PyObject *at_apply(PyArrayAt *self, at_op op, const char *name, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
    PyObject *a[1];
    Py_ssize_t nkw0 = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    int by_name =
        nargs == 0 && nkw0 == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "value") == 0;
    if (!by_name && (nargs != 1 || nkw0)) {
        /* nanobind's message, with self's type first */
        Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
        PyObject *stack[16];
        if (nargs + nkw + 1 > 16) nargs = nkw = 0;
        stack[0] = (PyObject *)self;
        for (Py_ssize_t i = 0; i < nargs + nkw; i++) stack[i + 1] = args[i];
        char sig[256];
        snprintf(sig, sizeof sig,
                 "    1. %s(self, value: bool | int | float | array | ndarray[writable=False] | complex | ArrayLike) "
                 "-> array",
                 name);
        return mkpy_bad_call(name, sig, stack, nargs + 1, nkw ? kwnames : NULL);
    }
    a[0] = args[0];
    if (!self->key) {
        PyErr_SetString(PyExc_ValueError, "Must give indices to array.at (e.g. `x.at[0].add(4)`).");
        return NULL;
    }
    mk_array *x = MKARR(self->array);
    if (is_bare(self->key)) {
        /* no index: the plain op, with its dtype promotion, as MLX */
        static const mk_binary_op bops[] = {MK_BINARY_add,    MK_BINARY_subtract, MK_BINARY_multiply,
                                            MK_BINARY_divide, MK_BINARY_maximum,  MK_BINARY_minimum};
        mk_array *v = update_value(x, a[0], self->key == Py_Ellipsis), *b = NULL, *r = NULL;
        if (!v) return NULL;
        if ((b = mk_broadcast_to(v, x->ndim, x->shape))) r = mk_binary(bops[op], x, b);
        mk_decref(v);
        mk_xdecref(b);
        return mkpy_wrap(r);
    }
    static const mk_scatter_op sops[] = {MK_SCATTER_SUM, MK_SCATTER_SUM, MK_SCATTER_PROD,
                                         MK_SCATTER_PROD, MK_SCATTER_MAX, MK_SCATTER_MIN};
    mk_array *r = scatter_key(x, self->key, a[0], M_AT, sops[op],
                              op == AT_SUBTRACT ? MK_UNARY_negative : MK_UNARY_reciprocal,
                              op == AT_SUBTRACT || op == AT_DIVIDE);
    return r ? mkpy_wrap(r) : NULL;
}

#define AT_METHOD(name, OP)                                                                            \
    static PyObject *at_##name(PyArrayAt *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kw) { \
        return at_apply(self, OP, #name, args, nargs, kw);                                              \
    }
AT_METHOD(add, AT_ADD)
AT_METHOD(subtract, AT_SUBTRACT)
AT_METHOD(multiply, AT_MULTIPLY)
AT_METHOD(divide, AT_DIVIDE)
AT_METHOD(maximum, AT_MAXIMUM)
AT_METHOD(minimum, AT_MINIMUM)

static PyMethodDef at_methods[] = {
    {"add", FN(at_add), FASTKW,
     "add($self, value)\n--\n\nThe array with value added at the indices (repeated indices accumulate)."},
    {"subtract", FN(at_subtract), FASTKW, "subtract($self, value)\n--\n\nThe array with value subtracted at the indices."},
    {"multiply", FN(at_multiply), FASTKW, "multiply($self, value)\n--\n\nThe array multiplied by value at the indices."},
    {"divide", FN(at_divide), FASTKW, "divide($self, value)\n--\n\nThe array divided by value at the indices."},
    {"maximum", FN(at_maximum), FASTKW, "maximum($self, value)\n--\n\nThe maximum of the array and value at the indices."},
    {"minimum", FN(at_minimum), FASTKW, "minimum($self, value)\n--\n\nThe minimum of the array and value at the indices."},
    {NULL},
};

static PyMappingMethods at_as_mapping = {
    .mp_subscript = (binaryfunc)at_getitem,
};

static PyTypeObject PyArrayAt_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mkpy.ArrayAt",
    .tp_basicsize = sizeof(PyArrayAt),
    .tp_dealloc = (destructor)at_dealloc,
    .tp_as_mapping = &at_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "x.at[idx]: updates at indices that return new arrays (x.at[idx].add(y), ...).",
    .tp_methods = at_methods,
};

PyObject *mkpy_array_at(PyObject *self) {
    if (!(PyArrayAt_Type.tp_flags & Py_TPFLAGS_READY) && PyType_Ready(&PyArrayAt_Type) < 0) return NULL;
    return at_new(self, NULL);
}

int mkpy_indexops_init(PyObject *m) {
    if (PyType_Ready(&PyArrayAt_Type) < 0) return -1;
    return PyModule_AddObjectRef(m, "ArrayAt", (PyObject *)&PyArrayAt_Type);
}

/* ------------------------------------------------------------ functions */

static int no_keyword_a(const char *fname, const char *sig, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames) {
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), "a") == 0) {
            mkpy_bad_call(fname, sig, args, nargs, kwnames);
            return -1;
        }
    return 0;
}

/* axis: None (has_axis false) or an int; anything else is a bad call */
static int parse_axis(PyObject *o, int dflt_has, int dflt, int *axis, bool *has_axis) {
    *has_axis = dflt_has;
    *axis = dflt;
    if (!o) return 0;
    if (o == Py_None) {
        *has_axis = false;
        return 0;
    }
    if (!is_int_item(o)) return -1;
    int64_t v;
    if (mkpy_parse_int(o, &v) < 0) return -1;
    if (v < INT32_MIN || v > INT32_MAX) return -1;
    *axis = (int)v;
    *has_axis = true;
    return 0;
}

static const char take_sig[] =
    "    1. take(a: array, /, indices: int | array, axis: int | None = None, *, stream: StreamOrDevice = None) "
    "-> array";

MKPY_STREAM_BINDING(py_take)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "indices", "axis", "*stream", NULL};
    PyObject *a[4];
    int axis;
    bool has_axis;
    (void)m;
    if (no_keyword_a("take", take_sig, args, nargs, kwnames) < 0) return NULL;
    if (mkpy_parse("take", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (!a[0] || !a[1] || !PyMkArray_Check(a[0]) || (!PyMkArray_Check(a[1]) && !PyLong_Check(a[1])) ||
        parse_axis(a[2], 0, 0, &axis, &has_axis) < 0) {
        PyErr_Clear();
        return mkpy_bad_call("take", take_sig, args, nargs, kwnames);
    }
    mk_array *x = MKARR(a[0]);
    if (PyLong_Check(a[1])) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(a[1], &overflow);
        if (overflow || v < INT32_MIN || v > INT32_MAX) {
            PyErr_SetString(PyExc_RuntimeError, "std::bad_cast");
            return NULL;
        }
        return mkpy_wrap(mk_take_int(x, v, axis, has_axis));
    }
    return mkpy_wrap(mk_take(x, MKARR(a[1]), axis, has_axis));
}

static const char take_along_sig[] =
    "    1. take_along_axis(a: array, /, indices: array, axis: int | None = -1, *, stream: StreamOrDevice = None) "
    "-> array";

MKPY_STREAM_BINDING(py_take_along_axis)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "indices", "axis", "*stream", NULL};
    PyObject *a[4];
    int axis;
    bool has_axis;
    (void)m;
    if (no_keyword_a("take_along_axis", take_along_sig, args, nargs, kwnames) < 0) return NULL;
    if (mkpy_parse("take_along_axis", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (!a[0] || !a[1] || !PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]) ||
        parse_axis(a[2], 1, -1, &axis, &has_axis) < 0) {
        PyErr_Clear();
        return mkpy_bad_call("take_along_axis", take_along_sig, args, nargs, kwnames);
    }
    return mkpy_wrap(mk_take_along_axis(MKARR(a[0]), MKARR(a[1]), axis, has_axis));
}

static const char put_along_sig[] =
    "    1. put_along_axis(a: array, /, indices: array, values: array, axis: int | None = None, *, stream: "
    "StreamOrDevice = None) -> array";

MKPY_STREAM_BINDING(py_put_along_axis)(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"a", "indices", "values", "axis", "*stream", NULL};
    PyObject *a[5];
    int axis;
    bool has_axis;
    (void)m;
    if (no_keyword_a("put_along_axis", put_along_sig, args, nargs, kwnames) < 0) return NULL;
    if (mkpy_parse("put_along_axis", args, nargs, kwnames, names, 0, a) < 0) return NULL;
    if (!a[0] || !a[1] || !a[2] || !PyMkArray_Check(a[0]) || !PyMkArray_Check(a[1]) || !PyMkArray_Check(a[2]) ||
        parse_axis(a[3], 0, 0, &axis, &has_axis) < 0) {
        PyErr_Clear();
        return mkpy_bad_call("put_along_axis", put_along_sig, args, nargs, kwnames);
    }
    return mkpy_wrap(mk_put_along_axis(MKARR(a[0]), MKARR(a[1]), MKARR(a[2]), axis, has_axis));
}

PyMethodDef mkpy_indexops_functions[] = {
    {"_advanced_getitem", FN(py_advanced_getitem), METH_FASTCALL,
     "_advanced_getitem(a, key)\n--\n\nx[key] for keys with integer arrays or lists (used by array.__getitem__)."},
    {"take", FN(py_take), FASTKW,
     "take(a, /, indices, axis=None, *, stream=None)\n--\n\n"
     "Take elements along an axis.\n\n"
     "indices is an int or an integer array; without axis the array is flattened\n"
     "first. With axis=1 this is a[:, indices, ...]. Negative array indices wrap;\n"
     "indices still out of range are clamped to the axis."},
    {"take_along_axis", FN(py_take_along_axis), FASTKW,
     "take_along_axis(a, /, indices, axis=-1, *, stream=None)\n--\n\n"
     "Take values along an axis at the given indices (broadcast with a, the axis\n"
     "excluded). axis=None flattens a first."},
    {"put_along_axis", FN(py_put_along_axis), FASTKW,
     "put_along_axis(a, /, indices, values, axis=None, *, stream=None)\n--\n\n"
     "A copy of a with values put along an axis at the given indices (the last\n"
     "of repeated indices wins; out-of-range indices are skipped). axis=None\n"
     "flattens a first."},
    {NULL},
};
