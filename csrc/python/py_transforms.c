/* The binding of the function transformations (core/transforms.c). Each
 * entry point calls the user's function (with the GIL held) on tracers of
 * the flat list of primals, then runs the graph walk in C. These take and
 * return flat lists of arrays; the pytree and argnums handling of mx.grad &
 * co. is in py_grad.c and py_custom.c, mx.compile's in py_compile.c. */
#include "core/transforms.h"
#include "core/compile.h"
#include "mkpy.h"
#include "py_tree.h" /* the declarations of the mkpy_*_flat entry points */

#define FASTKW METH_FASTCALL | METH_KEYWORDS
#define FN(f) (PyCFunction)(void (*)(void))(f)

/* A list (or tuple) of arrays into core references (new); *n its length. */
static mk_array **arrays_of(const char *fname, const char *what, PyObject *seq, Py_ssize_t *n) {
    PyObject *fast = PySequence_Fast(seq, "");
    if (!fast) {
        PyErr_Format(PyExc_TypeError, "%s(): %s must be a list or tuple of arrays.", fname, what);
        return NULL;
    }
    *n = PySequence_Fast_GET_SIZE(fast);
    mk_array **a = PyMem_Calloc(*n ? *n : 1, sizeof *a);
    if (!a) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyMkArray_Check(o)) {
            PyErr_Format(PyExc_TypeError, "%s(): %s must be a list or tuple of arrays.", fname, what);
            for (Py_ssize_t j = 0; j < i; j++) mk_decref(a[j]);
            PyMem_Free(a);
            Py_DECREF(fast);
            return NULL;
        }
        a[i] = MKARR(o);
        mk_incref(a[i]);
    }
    Py_DECREF(fast);
    return a;
}

static void free_arrays(mk_array **a, Py_ssize_t n) {
    if (!a) return;
    for (Py_ssize_t i = 0; i < n; i++) mk_xdecref(a[i]);
    PyMem_Free(a);
}

static PyObject *list_of(mk_array **a, Py_ssize_t n) {
    PyObject *l = PyList_New(n);
    if (!l) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        mk_incref(a[i]);
        PyObject *o = mkpy_wrap(a[i]);
        if (!o) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, o);
    }
    return l;
}

/* Calls fun(list_of_tracers) (fun returns a list of arrays), with the
 * graph kept linked. Sets *outs (new refs) and *nout. */
static int call_traced(const char *fname, PyObject *fun, mk_array **tr, Py_ssize_t n, mk_array ***outs,
                       Py_ssize_t *nout) {
    PyObject *targs = list_of(tr, n);
    if (!targs) return -1;
    mk_trace_push();
    PyObject *res = PyObject_CallOneArg(fun, targs);
    mk_trace_pop();
    Py_DECREF(targs);
    if (!res) return -1;
    *outs = arrays_of(fname, "the function's outputs", res, nout);
    Py_DECREF(res);
    return *outs ? 0 : -1;
}

static mk_array **tracers_of(mk_array **prim, Py_ssize_t n) {
    mk_array **tr = PyMem_Calloc(n ? n : 1, sizeof *tr);
    if (!tr) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!(tr[i] = mk_tracer(prim[i]))) {
            free_arrays(tr, i);
            mkpy_raise();
            return NULL;
        }
    return tr;
}

/* Traces fun on tracers of the n arrays in (made into *tr, new refs):
 * vjp, jvp and vmap share this; *outs and *nout as call_traced. */
static int trace_on(const char *fname, PyObject *fun, mk_array **in, Py_ssize_t n, mk_array ***tr, mk_array ***outs,
                    Py_ssize_t *nout) {
    if (!(*tr = tracers_of(in, n))) return -1;
    return call_traced(fname, fun, *tr, n, outs, nout);
}

/* _vjp(fun, primals, cotangents, argnums=None) -> (outputs, vjps) */
PyObject *mkpy_vjp_flat(PyObject *fun, PyObject *primals, PyObject *cotangents, PyObject *argnums) {
    PyObject *a[4] = {fun, primals, cotangents, argnums};
    Py_ssize_t np = 0, nc = 0, no = 0, ng = 0;
    mk_array **prim = NULL, **cot = NULL, **tr = NULL, **outs = NULL, **grads = NULL, **sel = NULL;
    PyObject *result = NULL, *lo = NULL, *lg = NULL;
    if (!(prim = arrays_of("vjp", "primals", a[1], &np))) goto error;
    if (!(cot = arrays_of("vjp", "cotangents", a[2], &nc))) goto error;
    if (trace_on("vjp", a[0], prim, np, &tr, &outs, &no) < 0) goto error;
    if (no != nc) {
        PyErr_Format(PyExc_ValueError,
                     "[vjp] Number of outputs to compute gradients for (%zd) does not match number of cotangents (%zd).",
                     no, nc);
        goto error;
    }
    for (Py_ssize_t i = 0; i < no; i++) {
        bool same = outs[i]->ndim == cot[i]->ndim;
        for (int d = 0; same && d < outs[i]->ndim; d++) same = outs[i]->shape[d] == cot[i]->shape[d];
        if (!same) {
            char b1[256], b2[256];
            PyErr_Format(PyExc_ValueError, "[vjp] Output shape %s does not match cotangent shape %s.%s",
                         mk_shape_str(outs[i]->ndim, outs[i]->shape, b1, sizeof b1),
                         mk_shape_str(cot[i]->ndim, cot[i]->shape, b2, sizeof b2),
                         no == 1 && outs[i]->size == 1 ? " If you are using grad your function must return a scalar."
                                                       : "");
            goto error;
        }
    }
    /* the tracers to differentiate with respect to */
    sel = PyMem_Calloc(np ? np : 1, sizeof *sel);
    if (!sel) {
        PyErr_NoMemory();
        goto error;
    }
    if (a[3] && a[3] != Py_None) {
        PyObject *fast = PySequence_Fast(a[3], "_vjp(): argnums must be a sequence");
        if (!fast) goto error;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
            Py_ssize_t k = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i), PyExc_IndexError);
            if (k == -1 && PyErr_Occurred()) {
                Py_DECREF(fast);
                goto error;
            }
            if (k < 0 || k >= np) {
                Py_DECREF(fast);
                PyErr_SetString(PyExc_IndexError, "_vjp(): argnums out of range");
                goto error;
            }
            sel[ng++] = tr[k];
        }
        Py_DECREF(fast);
    } else {
        for (Py_ssize_t i = 0; i < np; i++) sel[ng++] = tr[i];
    }
    grads = PyMem_Calloc(ng ? ng : 1, sizeof *grads);
    if (!grads) {
        PyErr_NoMemory();
        goto error;
    }
    if (mk_vjp_graph((int)no, outs, cot, (int)ng, sel, grads) < 0) {
        mkpy_raise();
        goto error;
    }
    lo = list_of(outs, no);
    lg = lo ? list_of(grads, ng) : NULL;
    if (lg) result = PyTuple_Pack(2, lo, lg);
error:
    Py_XDECREF(lo);
    Py_XDECREF(lg);
    free_arrays(prim, np);
    free_arrays(cot, nc);
    free_arrays(tr, np);
    free_arrays(outs, no);
    free_arrays(grads, ng);
    PyMem_Free(sel);
    return result;
}

/* _jvp(fun, primals, tangents) -> (outputs, jvps) */
PyObject *mkpy_jvp_flat(PyObject *fun, PyObject *primals, PyObject *tangents) {
    PyObject *a[3] = {fun, primals, tangents};
    Py_ssize_t np = 0, nt = 0, no = 0;
    mk_array **prim = NULL, **tan = NULL, **tr = NULL, **outs = NULL, **jv = NULL;
    PyObject *result = NULL, *lo = NULL, *lj = NULL;
    if (!(prim = arrays_of("jvp", "primals", a[1], &np))) goto error;
    if (!(tan = arrays_of("jvp", "tangents", a[2], &nt))) goto error;
    if (np != nt) {
        PyErr_SetString(PyExc_ValueError, "[jvp] Number of inputs does not match number of tangents.");
        goto error;
    }
    for (Py_ssize_t i = 0; i < np; i++) {
        bool same = prim[i]->ndim == tan[i]->ndim;
        for (int d = 0; same && d < prim[i]->ndim; d++) same = prim[i]->shape[d] == tan[i]->shape[d];
        if (!same) {
            PyErr_SetString(PyExc_ValueError, "[jvp] Input shape does not match shape of tangent.");
            goto error;
        }
    }
    if (trace_on("jvp", a[0], prim, np, &tr, &outs, &no) < 0) goto error;
    jv = PyMem_Calloc(no ? no : 1, sizeof *jv);
    if (!jv) {
        PyErr_NoMemory();
        goto error;
    }
    if (mk_jvp_graph((int)np, tr, tan, (int)no, outs, jv) < 0) {
        mkpy_raise();
        goto error;
    }
    lo = list_of(outs, no);
    lj = lo ? list_of(jv, no) : NULL;
    if (lj) result = PyTuple_Pack(2, lo, lj);
error:
    Py_XDECREF(lo);
    Py_XDECREF(lj);
    free_arrays(prim, np);
    free_arrays(tan, nt);
    free_arrays(tr, np);
    free_arrays(outs, no);
    free_arrays(jv, no);
    return result;
}

/* _vmap(fun, inputs, in_axes) -> (outputs, out_axes): fun is traced on
 * inputs without their batch axis; in_axes[i] is a normalised axis or -1. */
PyObject *mkpy_vmap_flat(PyObject *fun, PyObject *inputs, PyObject *in_axes) {
    PyObject *a[3] = {fun, inputs, in_axes};
    Py_ssize_t ni = 0, no = 0;
    mk_array **in = NULL, **un = NULL, **tr = NULL, **outs = NULL, **bo = NULL;
    int *axes = NULL, *oax = NULL;
    PyObject *result = NULL, *lo = NULL, *la = NULL;
    if (!(in = arrays_of("vmap", "inputs", a[1], &ni))) goto error;
    axes = PyMem_Calloc(ni ? ni : 1, sizeof *axes);
    un = PyMem_Calloc(ni ? ni : 1, sizeof *un);
    if (!axes || !un) {
        PyErr_NoMemory();
        goto error;
    }
    if (PySequence_Size(a[2]) != ni) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "_vmap(): one axis per input");
        goto error;
    }
    for (Py_ssize_t i = 0; i < ni; i++) {
        PyObject *o = PySequence_GetItem(a[2], i);
        long v = o ? PyLong_AsLong(o) : -1;
        Py_XDECREF(o);
        if (v == -1 && PyErr_Occurred()) goto error;
        axes[i] = (int)v;
        if (v >= 0) {
            un[i] = mk_take_int(in[i], 0, (int)v, true);
            if (!un[i]) {
                mkpy_raise();
                goto error;
            }
        } else {
            mk_incref(in[i]);
            un[i] = in[i];
        }
    }
    if (trace_on("vmap", a[0], un, ni, &tr, &outs, &no) < 0) goto error;
    bo = PyMem_Calloc(no ? no : 1, sizeof *bo);
    oax = PyMem_Calloc(no ? no : 1, sizeof *oax);
    if (!bo || !oax) {
        PyErr_NoMemory();
        goto error;
    }
    if (mk_vmap_graph((int)ni, tr, in, axes, (int)no, outs, bo, oax) < 0) {
        mkpy_raise();
        goto error;
    }
    lo = list_of(bo, no);
    la = lo ? PyList_New(no) : NULL;
    if (!la) goto error;
    for (Py_ssize_t i = 0; i < no; i++) {
        PyObject *v = PyLong_FromLong(oax[i]);
        if (!v) goto error;
        PyList_SET_ITEM(la, i, v);
    }
    result = PyTuple_Pack(2, lo, la);
error:
    Py_XDECREF(lo);
    Py_XDECREF(la);
    free_arrays(in, ni);
    free_arrays(un, ni);
    free_arrays(tr, ni);
    free_arrays(outs, no);
    free_arrays(bo, no);
    PyMem_Free(axes);
    PyMem_Free(oax);
    return result;
}


/* ------------------------------------------------------------ custom functions */

/* ctx: a tuple (vjp, jvp, vmap) of Python callables or None, over flat lists. */

static PyObject *wrap_list_borrowed(mk_array *const *a, int n) {
    PyObject *l = PyList_New(n);
    if (!l) return NULL;
    for (int i = 0; i < n; i++) {
        mk_incref(a[i]);
        PyObject *o = mkpy_wrap(a[i]);
        if (!o) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, i, o);
    }
    return l;
}

/* A Python failure stays the pending Python exception (the core error is
 * cleared so the binding re-raises it as is). */
static int py_failed(void) {
    mk_error_clear();
    return -1;
}

/* res: a sequence of n arrays (None: zero, when allow_none) into new refs. */
static int take_results(const char *what, PyObject *res, int n, bool allow_none, mk_array **out) {
    PyObject *fast = PySequence_Fast(res, "");
    if (!fast || PySequence_Fast_GET_SIZE(fast) != n) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "[custom_function] The %s should return %d arrays.", what, n);
        Py_XDECREF(fast);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (o == Py_None && allow_none) {
            out[i] = NULL;
            continue;
        }
        if (!PyMkArray_Check(o)) {
            PyErr_Format(PyExc_ValueError, "[custom_function] The %s should return arrays.", what);
            for (int k = 0; k < i; k++) {
                mk_xdecref(out[k]);
                out[k] = NULL;
            }
            Py_DECREF(fast);
            return -1;
        }
        out[i] = MKARR(o);
        mk_incref(out[i]);
    }
    Py_DECREF(fast);
    return 0;
}

static int cb_vjp(void *ctx, int n, mk_array *const *primals, int m, mk_array *const *cots, mk_array *const *outs,
                  mk_array **grads) {
    PyGILState_STATE st = PyGILState_Ensure();
    int rc = -1;
    PyObject *lp = wrap_list_borrowed(primals, n), *lc = lp ? wrap_list_borrowed(cots, m) : NULL;
    PyObject *lo = lc ? wrap_list_borrowed(outs, m) : NULL, *res = NULL;
    if (lo) res = PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM((PyObject *)ctx, 0), lp, lc, lo, NULL);
    if (res) rc = take_results("vjp function", res, n, true, grads);
    Py_XDECREF(lp);
    Py_XDECREF(lc);
    Py_XDECREF(lo);
    Py_XDECREF(res);
    if (rc < 0) py_failed();
    PyGILState_Release(st);
    return rc;
}

static int cb_jvp(void *ctx, int n, mk_array *const *primals, mk_array *const *tans, int m, mk_array **out_tans) {
    PyGILState_STATE st = PyGILState_Ensure();
    int rc = -1;
    PyObject *lp = wrap_list_borrowed(primals, n), *lt = lp ? wrap_list_borrowed(tans, n) : NULL, *res = NULL;
    if (lt) res = PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM((PyObject *)ctx, 1), lp, lt, NULL);
    if (res) rc = take_results("jvp function", res, m, false, out_tans);
    Py_XDECREF(lp);
    Py_XDECREF(lt);
    Py_XDECREF(res);
    if (rc < 0) py_failed();
    PyGILState_Release(st);
    return rc;
}

static int cb_vmap(void *ctx, int n, mk_array *const *inputs, const int *axes, int m, mk_array **outs,
                   int *out_axes) {
    PyGILState_STATE st = PyGILState_Ensure();
    int rc = -1;
    PyObject *li = wrap_list_borrowed(inputs, n), *la = li ? PyList_New(n) : NULL, *res = NULL;
    for (int i = 0; la && i < n; i++) {
        PyObject *v = axes[i] < 0 ? Py_NewRef(Py_None) : PyLong_FromLong(axes[i]);
        if (!v) {
            Py_CLEAR(la);
            break;
        }
        PyList_SET_ITEM(la, i, v);
    }
    if (la) res = PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM((PyObject *)ctx, 2), li, la, NULL);
    if (res) {
        if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
            PyErr_SetString(PyExc_ValueError, "[custom_function] The vmap function should return the outputs and "
                                              "their vectorization axes.");
        } else if (take_results("vmap function", PyTuple_GET_ITEM(res, 0), m, false, outs) == 0) {
            PyObject *ax = PySequence_Fast(PyTuple_GET_ITEM(res, 1), "[custom_function] vmap axes must be a sequence");
            rc = ax && PySequence_Fast_GET_SIZE(ax) == m ? 0 : -1;
            for (int j = 0; rc == 0 && j < m; j++) {
                PyObject *o = PySequence_Fast_GET_ITEM(ax, j);
                long v = o == Py_None ? -1 : PyLong_AsLong(o);
                if (v == -1 && PyErr_Occurred()) rc = -1;
                out_axes[j] = (int)v;
            }
            if (rc < 0 && !PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "[custom_function] The vmap function should return one axis per output.");
            Py_XDECREF(ax);
            if (rc < 0)
                for (int j = 0; j < m; j++) {
                    mk_xdecref(outs[j]);
                    outs[j] = NULL;
                }
        }
    }
    Py_XDECREF(li);
    Py_XDECREF(la);
    Py_XDECREF(res);
    if (rc < 0) py_failed();
    PyGILState_Release(st);
    return rc;
}

/* The node may die on a thread that released the GIL (inside mk_eval): the
 * closure is then dropped later, by a thread that holds it (py_defer.c). */
static void cb_free(void *ctx) {
#if PY_VERSION_HEX >= 0x030D0000
    if (!ctx || Py_IsFinalizing()) return; /* public from 3.13, which removed _Py_IsFinalizing */
#else
    if (!ctx || _Py_IsFinalizing()) return;
#endif
    mkpy_defer_decref((PyObject *)ctx);
}

/* _custom(fun, inputs, vjp, jvp, vmap) -> outputs: fun(inputs) (flat lists)
 * wrapped in a node carrying the given rules (None: through fun's graph). */
PyObject *mkpy_custom_flat(PyObject *fun, PyObject *inputs, PyObject *vjp, PyObject *jvp, PyObject *vmap) {
    PyObject *a[5] = {fun, inputs, vjp, jvp, vmap};
    Py_ssize_t ni = 0, no = 0;
    mk_array **in = NULL, **fwd = NULL, **outs = NULL;
    PyObject *result = NULL;
    if (!(in = arrays_of("custom_function", "inputs", a[1], &ni))) goto error;
    PyObject *targs = list_of(in, ni);
    if (!targs) goto error;
    PyObject *res = PyObject_CallOneArg(a[0], targs);
    Py_DECREF(targs);
    if (!res) goto error;
    fwd = arrays_of("custom_function", "the function's outputs", res, &no);
    Py_DECREF(res);
    if (!fwd) goto error;
    outs = PyMem_Calloc(no ? no : 1, sizeof *outs);
    PyObject *ctx = outs ? PyTuple_Pack(3, a[2], a[3], a[4]) : NULL;
    if (!ctx) goto error;
    mk_custom_rules r = {a[2] != Py_None ? cb_vjp : NULL, a[3] != Py_None ? cb_jvp : NULL,
                         a[4] != Py_None ? cb_vmap : NULL, cb_free, ctx};
    if (mk_custom((int)ni, in, (int)no, fwd, &r, outs) < 0) {
        mkpy_raise();
        goto error;
    }
    result = list_of(outs, no);
error:
    free_arrays(in, ni);
    free_arrays(fwd, no);
    free_arrays(outs, no);
    return result;
}


/* _trace(fun, inputs) -> (tracers, outputs): fun(list of tracers) -> list,
 * for mx.compile, which replays the graph later with _replay. Raises
 * ValueError when the graph reads an input array other than through its
 * tracer (MLX's uncaptured inputs: a closure holding the input, or state
 * computed from it before). */
static PyObject *py_trace(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"fun", "inputs", NULL};
    PyObject *a[2];
    (void)m;
    if (mkpy_parse("_trace", args, nargs, kwnames, names, 2, a) < 0) return NULL;
    Py_ssize_t ni = 0, no = 0;
    mk_array **in = NULL, **tr = NULL, **outs = NULL;
    PyObject *result = NULL, *lt = NULL, *lo = NULL;
    if (!(in = arrays_of("compile", "inputs", a[1], &ni))) goto error;
    if (!(tr = tracers_of(in, ni))) goto error;
    if (call_traced("compile", a[0], tr, ni, &outs, &no) < 0) goto error;
    int bad = mk_graph_reaches((int)no, outs, (int)ni, tr, (int)ni, in);
    if (bad < 0) {
        mkpy_raise();
        goto error;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError,
                        "[compile] Attempting to compile a function with uncaptured inputs is not allowed.");
        goto error;
    }
    /* the kept graph does not hold the first call's arrays (as MLX's, whose
     * tracers hold no data): that call's inputs may then be donated */
    for (Py_ssize_t i = 0; i < ni; i++)
        if (mk_tracer_detach(tr[i]) < 0) {
            mkpy_raise();
            goto error;
        }
    lt = list_of(tr, ni);
    lo = lt ? list_of(outs, no) : NULL;
    if (lo) result = PyTuple_Pack(2, lt, lo);
error:
    Py_XDECREF(lt);
    Py_XDECREF(lo);
    free_arrays(in, ni);
    free_arrays(tr, ni);
    free_arrays(outs, no);
    return result;
}

/* _replay(tracers, outputs, inputs) -> outputs: the traced graph from the
 * tracers to the outputs, rebuilt on new inputs (core/compile.c: each
 * primitive re-created on the new arrays, through its batching rule when its
 * input shapes changed; equal nodes merged). Outputs that do not depend on
 * the inputs are returned as traced (constants). */
static PyObject *py_replay(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    static const char *const names[] = {"tracers", "outputs", "inputs", NULL};
    PyObject *a[3];
    (void)m;
    if (mkpy_parse("_replay", args, nargs, kwnames, names, 3, a) < 0) return NULL;
    Py_ssize_t nt = 0, no = 0, ni = 0;
    mk_array **tr = NULL, **outs = NULL, **in = NULL, **bo = NULL;
    PyObject *result = NULL;
    if (!(tr = arrays_of("compile", "tracers", a[0], &nt))) goto error;
    if (!(outs = arrays_of("compile", "outputs", a[1], &no))) goto error;
    if (!(in = arrays_of("compile", "inputs", a[2], &ni))) goto error;
    if (ni != nt) {
        PyErr_SetString(PyExc_ValueError, "_replay(): one input per tracer");
        goto error;
    }
    if (!(bo = PyMem_Calloc(no ? no : 1, sizeof *bo))) {
        PyErr_NoMemory();
        goto error;
    }
    if (mk_replay_graph((int)ni, tr, in, (int)no, outs, bo) < 0) {
        mkpy_raise();
        goto error;
    }
    result = list_of(bo, no);
error:
    free_arrays(tr, nt);
    free_arrays(outs, no);
    free_arrays(in, ni);
    free_arrays(bo, no);
    return result;
}

/* The Python entry points of the flat functions above: one argument parser
 * for all (the names of each, the C function and its arity). */
typedef struct {
    const char *name;
    const char *const names[6];
    int n, nrequired;
} flat_sig;

static const flat_sig sig_vjp = {"_vjp", {"fun", "primals", "cotangents", "argnums", NULL}, 4, 3};
static const flat_sig sig_jvp = {"_jvp", {"fun", "primals", "tangents", NULL}, 3, 3};
static const flat_sig sig_vmap = {"_vmap", {"fun", "inputs", "in_axes", NULL}, 3, 3};
static const flat_sig sig_custom = {"_custom", {"fun", "inputs", "vjp", "jvp", "vmap", NULL}, 5, 5};

static int flat_args(const flat_sig *sig, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **a) {
    for (int k = 0; k < sig->n; k++) a[k] = NULL;
    return mkpy_parse(sig->name, args, nargs, kwnames, sig->names, sig->nrequired, a);
}

static PyObject *py_vjp_flat(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *a[4];
    (void)m;
    return flat_args(&sig_vjp, args, nargs, kwnames, a) < 0 ? NULL : mkpy_vjp_flat(a[0], a[1], a[2], a[3]);
}

static PyObject *py_jvp_flat(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *a[3];
    (void)m;
    return flat_args(&sig_jvp, args, nargs, kwnames, a) < 0 ? NULL : mkpy_jvp_flat(a[0], a[1], a[2]);
}

static PyObject *py_vmap_flat(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *a[3];
    (void)m;
    return flat_args(&sig_vmap, args, nargs, kwnames, a) < 0 ? NULL : mkpy_vmap_flat(a[0], a[1], a[2]);
}

static PyObject *py_custom(PyObject *m, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *a[5];
    (void)m;
    return flat_args(&sig_custom, args, nargs, kwnames, a) < 0 ? NULL
                                                                 : mkpy_custom_flat(a[0], a[1], a[2], a[3], a[4]);
}

/* _tracing() -> bool: whether a transformation (grad, vjp, jvp, vmap, a
 * compile trace) is tracing a function on this thread. mx.compile then calls
 * the function as is (as MLX under a transformation). */
static PyObject *py_tracing(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyBool_FromLong(mk_tracing());
}

PyMethodDef mkpy_transforms_functions[] = {
    {"_tracing", py_tracing, METH_NOARGS, "_tracing()\n--\n\nWhether a transformation is tracing on this thread."},
    {"_vjp", FN(py_vjp_flat), FASTKW,
     "_vjp(fun, primals, cotangents, argnums=None)\n--\n\nvjp over flat lists (fun takes and returns a list)."},
    {"_jvp", FN(py_jvp_flat), FASTKW,
     "_jvp(fun, primals, tangents)\n--\n\njvp over flat lists (fun takes and returns a list)."},
    {"_vmap", FN(py_vmap_flat), FASTKW,
     "_vmap(fun, inputs, in_axes)\n--\n\nvmap over flat lists; returns the outputs and their batch axes."},
    {"_custom", FN(py_custom), FASTKW,
     "_custom(fun, inputs, vjp, jvp, vmap)\n--\n\nfun(inputs) as a node with its own rules (flat lists)."},
    {"_trace", FN(py_trace), FASTKW, "_trace(fun, inputs)\n--\n\nTraces fun on tracers of inputs (flat lists)."},
    {"_replay", FN(py_replay), FASTKW,
     "_replay(tracers, outputs, inputs)\n--\n\nRebuilds a traced graph on new inputs."},
    {NULL, NULL, 0, NULL},
};
