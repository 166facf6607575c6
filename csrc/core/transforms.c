/* Function transformations over the lazy graph: the graph walks of vjp,
 * jvp and vmap, the tracer primitive and helpers for the per-op rules (the
 * rules themselves sit beside each evaluator in the ops_*.c files). */
#include "transforms.h"
#include "compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stream.h"

/* ------------------------------------------------------------ pointer map */

typedef struct {
    const void *key;
    void *val;
    int64_t aux;
} pm_slot;

typedef struct {
    pm_slot *s;
    size_t cap, n;
} ptrmap;

static size_t pm_hash(const void *k, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)k;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static pm_slot *pm_find(ptrmap *m, const void *k) {
    if (!m->cap) return NULL;
    for (size_t i = pm_hash(k, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->s[i].key == k) return &m->s[i];
        if (!m->s[i].key) return NULL;
    }
}

/* The slot for k, inserted (val NULL, aux 0) if absent; NULL when out of memory. */
static pm_slot *pm_get(ptrmap *m, const void *k) {
    pm_slot *f = pm_find(m, k);
    if (f) return f;
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        pm_slot *s = calloc(cap, sizeof *s);
        if (!s) return mk_nomem();
        for (size_t i = 0; i < m->cap; i++)
            if (m->s[i].key) {
                size_t j = pm_hash(m->s[i].key, cap);
                while (s[j].key) j = (j + 1) & (cap - 1);
                s[j] = m->s[i];
            }
        free(m->s);
        m->s = s;
        m->cap = cap;
    }
    size_t i = pm_hash(k, m->cap);
    while (m->s[i].key) i = (i + 1) & (m->cap - 1);
    m->s[i].key = k;
    m->s[i].val = NULL;
    m->s[i].aux = 0;
    m->n++;
    return &m->s[i];
}

/* Releases the arrays held as values. */
static void pm_free_arrays(ptrmap *m) {
    for (size_t i = 0; i < m->cap; i++)
        if (m->s[i].key && m->s[i].val) mk_decref(m->s[i].val);
    free(m->s);
    m->s = NULL;
    m->cap = m->n = 0;
}

static void pm_free(ptrmap *m) {
    free(m->s);
    m->s = NULL;
    m->cap = m->n = 0;
}

/* ------------------------------------------------------------ tracer op */

static int tracer_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    mk_set_view(out[0], in[0], in[0]->offset, in[0]->strides);
    return 0;
}

static int tracer_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    (void)p;
    if (want[0] && cots[0]) {
        mk_incref(cots[0]);
        grads[0] = cots[0];
    }
    return 0;
}

static int tracer_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    (void)p;
    if (tans[0]) mk_incref(tans[0]);
    out[0] = tans[0];
    return 0;
}

static int tracer_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    (void)p;
    mk_incref(in[0]);
    outs[0] = in[0];
    out_axes[0] = axes[0];
    return 0;
}

static const mk_opdef tracer_def = {"Copy", tracer_eval, NULL, tracer_vjp, tracer_jvp, tracer_vmap, false,
                                    true, 0, NULL, NULL};

/* A tracer is mkpy's bookkeeping (MLX marks the array itself): it goes on
 * this thread's CPU stream, so that it passes any dtype (stream.h); the ops
 * the traced function applies to it keep MLX's rules. */
mk_array *mk_tracer(mk_array *x) {
    mk_stream sv = mk_stream_scope(mk_default_stream(MK_CPU));
    mk_array *t = mk_node(&tracer_def, NULL, x->dtype, x->ndim, x->shape, 1, &x);
    mk_stream_scope(sv);
    return t;
}

int mk_tracer_detach(mk_array *t) {
    mk_prim *p = atomic_load_explicit(&t->prim, memory_order_acquire);
    if (!p || p->op != &tracer_def) return 0;
    mk_stream sv = mk_stream_scope(mk_default_stream(MK_CPU));
    mk_array *z = mk_zeros(t->ndim, t->shape, t->dtype);
    mk_stream_scope(sv);
    if (!z) return -1;
    /* the tracer was made by this trace and is seen by nothing else yet */
    mk_array *x = p->inputs[0];
    p->inputs[0] = z;
    mk_decref(x);
    return 0;
}

mk_array *mk_stop_gradient(mk_array *x) { return mk_unary(MK_UNARY_stop_gradient, x); }

/* ------------------------------------------------------------ topological order */

/* Primitives between the tracers `ins` and `outs`, inputs first. Each
 * primitive's slot in *seen has aux bit 1 = visited, bit 2 = depends on a
 * tracer. Tracers are leaves: the walk does not go behind them. */
typedef struct {
    mk_prim **order;
    size_t n;
    ptrmap seen;   /* prim -> flags */
    ptrmap tracer; /* array -> index + 1 */
} topo;

static void topo_free(topo *t) {
    free(t->order);
    pm_free(&t->seen);
    pm_free(&t->tracer);
}

static bool topo_array_dep(topo *t, const mk_array *a) {
    if (pm_find(&t->tracer, a)) return true;
    if (!a->prim) return false;
    pm_slot *s = pm_find(&t->seen, a->prim);
    return s && (s->aux & 2);
}

typedef struct {
    mk_prim *p;
    int next;
    bool dep;
} tframe;

/* diff: a walk that differentiates; a nondiff primitive (stop_gradient...)
 * then cuts the dependence on the tracers */
static int topo_build(topo *t, int nout, mk_array *const *outs, int nin, mk_array *const *ins, bool diff) {
    memset(t, 0, sizeof *t);
    size_t scap = 64, ocap = 64, sn = 0;
    tframe *stack = malloc(scap * sizeof *stack);
    t->order = malloc(ocap * sizeof *t->order);
    if (!stack || !t->order) goto nomem;
    for (int i = 0; i < nin; i++) {
        pm_slot *s = pm_get(&t->tracer, ins[i]);
        if (!s) goto fail;
        s->aux = i + 1;
    }
    for (int r = 0; r < nout; r++) {
        mk_array *a = outs[r];
        if (pm_find(&t->tracer, a) || !a->prim || pm_find(&t->seen, a->prim)) continue;
        if (!pm_get(&t->seen, a->prim)) goto fail;
        pm_find(&t->seen, a->prim)->aux = 1;
        stack[sn++] = (tframe){a->prim, 0, false};
        while (sn) {
            tframe *f = &stack[sn - 1];
            if (f->next < f->p->ninputs) {
                mk_array *in = f->p->inputs[f->next++];
                if (pm_find(&t->tracer, in)) {
                    f->dep = true;
                    continue;
                }
                mk_prim *q = in->prim;
                if (!q) continue;
                pm_slot *s = pm_find(&t->seen, q);
                if (s) {
                    if (s->aux & 2) f->dep = true;
                    continue;
                }
                s = pm_get(&t->seen, q);
                if (!s) goto fail;
                s->aux = 1;
                if (sn == scap) {
                    tframe *ns = realloc(stack, (scap *= 2) * sizeof *stack);
                    if (!ns) goto nomem;
                    stack = ns;
                }
                stack[sn++] = (tframe){q, 0, false};
            } else {
                bool dep = f->dep && !(diff && f->p->op->nondiff);
                pm_find(&t->seen, f->p)->aux |= dep ? 2 : 0;
                if (dep) {
                    if (t->n == ocap) {
                        mk_prim **o = realloc(t->order, (ocap *= 2) * sizeof *o);
                        if (!o) goto nomem;
                        t->order = o;
                    }
                    t->order[t->n++] = f->p;
                }
                sn--;
                if (sn && dep) stack[sn - 1].dep = true;
            }
        }
    }
    free(stack);
    return 0;
nomem:
    mk_nomem();
fail:
    free(stack);
    topo_free(t);
    return -1;
}

int mk_graph_topo(int nout, mk_array *const *outs, int nin, mk_array *const *ins, mk_prim ***order, size_t *n) {
    topo t;
    if (topo_build(&t, nout, outs, nin, ins, false) < 0) return -1;
    *order = t.order;
    *n = t.n;
    t.order = NULL;
    topo_free(&t);
    return 0;
}

/* ------------------------------------------------------------ shared checks */

static bool same_shape(const mk_array *a, const mk_array *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* acc[key] += v (steals v); v is cast to dtype t first. */
static int accumulate(ptrmap *m, const mk_array *key, mk_array *v, mk_dtype t) {
    if (v->dtype != t) {
        mk_array *c = mk_astype(v, t);
        mk_decref(v);
        if (!c) return -1;
        v = c;
    }
    pm_slot *s = pm_get(m, key);
    if (!s) {
        mk_decref(v);
        return -1;
    }
    if (!s->val) {
        s->val = v;
        return 0;
    }
    mk_array *sum = mk_binary(MK_BINARY_add, s->val, v);
    mk_decref(v);
    if (!sum) return -1;
    if (sum->dtype != t) {
        mk_array *c = mk_astype(sum, t);
        mk_decref(sum);
        if (!c) return -1;
        sum = c;
    }
    mk_decref(s->val);
    s->val = sum;
    return 0;
}

static mk_array *zeros_like(const mk_array *x) { return mk_zeros(x->ndim, x->shape, x->dtype); }

/* ------------------------------------------------------------ vjp */

int mk_vjp_graph(int nout, mk_array *const *outs, mk_array *const *cots, int nin, mk_array *const *ins,
                 mk_array **grads) {
    topo t;
    ptrmap acc = {0};
    int rc = -1;
    for (int i = 0; i < nin; i++) grads[i] = NULL;
    if (topo_build(&t, nout, outs, nin, ins, true) < 0) return -1;
    mk_trace_push();
    for (int i = 0; i < nout; i++) {
        if (!cots[i] || !topo_array_dep(&t, outs[i])) continue;
        mk_array *c = cots[i];
        if (c->dtype != outs[i]->dtype && mk_is_evaluated(c)) {
            /* a constant seed (grad's 1.0): MLX makes it in the output's dtype
             * with no node, so its cast goes on the CPU stream, where any
             * dtype is allowed (stream.h), not on the default one */
            mk_stream sv = mk_stream_scope(mk_default_stream(MK_CPU));
            c = mk_astype(c, outs[i]->dtype);
            mk_stream_scope(sv);
            if (!c) goto done;
        } else {
            mk_incref(c);
        }
        if (accumulate(&acc, outs[i], c, outs[i]->dtype) < 0) goto done;
    }
    for (size_t k = t.n; k-- > 0;) {
        mk_prim *p = t.order[k];
        int no = p->noutputs, ni = p->ninputs;
        mk_array *pc_stack[4], *g_stack[8];
        bool w_stack[8];
        mk_array **pc = no <= 4 ? pc_stack : calloc(no, sizeof *pc);
        mk_array **g = ni <= 8 ? g_stack : calloc(ni, sizeof *g);
        bool *want = ni <= 8 ? w_stack : calloc(ni, sizeof *want);
        if (!pc || !g || !want) {
            mk_nomem();
            goto prim_fail;
        }
        bool any = false, anyw = false;
        for (int j = 0; j < no; j++) {
            pc[j] = NULL;
            mk_array *o = p->outputs[j];
            pm_slot *s = o ? pm_find(&acc, o) : NULL;
            if (s && s->val) {
                pc[j] = s->val; /* taken over */
                s->val = NULL;
                any = true;
            }
        }
        for (int i = 0; i < ni; i++) {
            g[i] = NULL;
            want[i] = topo_array_dep(&t, p->inputs[i]);
            anyw |= want[i];
        }
        int prc = 0;
        if (any && anyw && !p->op->nondiff) {
            if (!p->op->vjp) {
                mk_error_set(MK_ERR_VALUE, "[Primitive::vjp] Not implemented for %s.", p->op->name);
                prc = -1;
            } else {
                /* the rule's nodes go on the primitive's stream, as MLX's */
                mk_stream sv = mk_stream_scope(p->stream);
                prc = p->op->vjp(p, pc, want, g);
                mk_stream_scope(sv);
            }
            for (int i = 0; prc == 0 && i < ni; i++) {
                if (!g[i]) continue;
                mk_array *gi = g[i];
                g[i] = NULL;
                if (!want[i]) {
                    mk_decref(gi);
                    continue;
                }
                if (!same_shape(gi, p->inputs[i])) {
                    char b1[256], b2[256];
                    mk_error_set(MK_ERR_RUNTIME, "[vjp] The rule of %s gave a cotangent of shape %s for an input of shape %s.",
                                 p->op->name, mk_shape_str(gi->ndim, gi->shape, b1, sizeof b1),
                                 mk_shape_str(p->inputs[i]->ndim, p->inputs[i]->shape, b2, sizeof b2));
                    mk_decref(gi);
                    prc = -1;
                    break;
                }
                if (accumulate(&acc, p->inputs[i], gi, p->inputs[i]->dtype) < 0) prc = -1;
            }
            for (int i = 0; i < ni; i++) mk_xdecref(g[i]);
        }
        for (int j = 0; j < no; j++) mk_xdecref(pc[j]);
        if (pc != pc_stack) free(pc);
        if (g != g_stack) free(g);
        if (want != w_stack) free(want);
        if (prc < 0) goto done;
        continue;
    prim_fail:
        if (pc != pc_stack) free(pc);
        if (g != g_stack) free(g);
        if (want != w_stack) free(want);
        goto done;
    }
    for (int i = 0; i < nin; i++) {
        pm_slot *s = pm_find(&acc, ins[i]);
        if (s && s->val) {
            grads[i] = s->val;
            mk_incref(grads[i]);
        } else if (!(grads[i] = zeros_like(ins[i]))) {
            goto done;
        }
    }
    rc = 0;
done:
    mk_trace_pop();
    if (rc < 0)
        for (int i = 0; i < nin; i++) {
            mk_xdecref(grads[i]);
            grads[i] = NULL;
        }
    pm_free_arrays(&acc);
    topo_free(&t);
    return rc;
}

/* ------------------------------------------------------------ jvp */

int mk_jvp_graph(int nin, mk_array *const *ins, mk_array *const *tans, int nout, mk_array *const *outs,
                 mk_array **out_tans) {
    topo t;
    ptrmap tm = {0};
    int rc = -1;
    for (int i = 0; i < nout; i++) out_tans[i] = NULL;
    if (topo_build(&t, nout, outs, nin, ins, true) < 0) return -1;
    mk_trace_push();
    for (int i = 0; i < nin; i++) {
        if (!tans[i]) continue;
        mk_incref(tans[i]);
        if (accumulate(&tm, ins[i], tans[i], ins[i]->dtype) < 0) goto done;
    }
    for (size_t k = 0; k < t.n; k++) {
        mk_prim *p = t.order[k];
        int no = p->noutputs, ni = p->ninputs;
        mk_array **ti = calloc(ni ? ni : 1, sizeof *ti);
        mk_array **to = calloc(no, sizeof *to);
        if (!ti || !to) {
            free(ti);
            free(to);
            mk_nomem();
            goto done;
        }
        bool any = false;
        for (int i = 0; i < ni; i++) {
            pm_slot *s = pm_find(&tm, p->inputs[i]);
            ti[i] = s ? s->val : NULL;
            any |= ti[i] != NULL;
        }
        int prc = 0;
        if (any && !p->op->nondiff) {
            mk_stream sv = mk_stream_scope(p->stream); /* as MLX's: the primitive's stream */
            if (p->op->jvp)
                prc = p->op->jvp(p, ti, to);
            else if (p->op->vjp)
                prc = mk_jvp_from_vjp(p, ti, to);
            else {
                mk_error_set(MK_ERR_VALUE, "[Primitive::jvp] Not implemented for %s.", p->op->name);
                prc = -1;
            }
            mk_stream_scope(sv);
        }
        for (int j = 0; j < no; j++) {
            if (!to[j]) continue;
            mk_array *o = p->outputs[j];
            if (prc == 0 && o) {
                if (accumulate(&tm, o, to[j], o->dtype) < 0) prc = -1;
            } else {
                mk_decref(to[j]);
            }
        }
        free(ti);
        free(to);
        if (prc < 0) goto done;
    }
    for (int i = 0; i < nout; i++) {
        pm_slot *s = pm_find(&tm, outs[i]);
        if (s && s->val) {
            out_tans[i] = s->val;
            mk_incref(s->val);
        } else if (!(out_tans[i] = mk_zeros(outs[i]->ndim, outs[i]->shape,
                                            mk_is_inexact(outs[i]->dtype) ? outs[i]->dtype : MK_FLOAT32))) {
            /* integer and bool outputs get float32 zero tangents, as MLX */
            goto done;
        }
    }
    rc = 0;
done:
    mk_trace_pop();
    if (rc < 0)
        for (int i = 0; i < nout; i++) {
            mk_xdecref(out_tans[i]);
            out_tans[i] = NULL;
        }
    pm_free_arrays(&tm);
    topo_free(&t);
    return rc;
}

int mk_jvp_from_vjp(mk_prim *p, mk_array *const *tans, mk_array **out_tans) {
    int no = p->noutputs, ni = p->ninputs, rc = -1;
    mk_array **u = calloc(no, sizeof *u);
    mk_array **g = calloc(ni ? ni : 1, sizeof *g);
    mk_array **gc = calloc(ni ? ni : 1, sizeof *gc);
    mk_array **ct = calloc(ni ? ni : 1, sizeof *ct);
    bool *want = calloc(ni ? ni : 1, sizeof *want);
    if (!u || !g || !gc || !ct || !want) {
        mk_nomem();
        goto done;
    }
    for (int j = 0; j < no; j++) {
        mk_array *z = mk_zeros(p->outdesc[j].ndim, p->outdesc[j].shape, p->outdesc[j].dtype);
        u[j] = z ? mk_tracer(z) : NULL;
        mk_xdecref(z);
        if (!u[j]) goto done;
    }
    for (int i = 0; i < ni; i++) want[i] = tans[i] != NULL;
    if (p->op->vjp(p, u, want, g) < 0) goto done;
    int n = 0;
    for (int i = 0; i < ni; i++)
        if (g[i] && tans[i]) {
            gc[n] = g[i];
            ct[n++] = tans[i];
        }
    rc = mk_vjp_graph(n, gc, ct, no, u, out_tans);
done:
    for (int j = 0; u && j < no; j++) mk_xdecref(u[j]);
    for (int i = 0; g && i < ni; i++) mk_xdecref(g[i]);
    free(u);
    free(g);
    free(gc);
    free(ct);
    free(want);
    return rc;
}

/* ------------------------------------------------------------ vmap */

int mk_vmap_graph(int nin, mk_array *const *ins, mk_array *const *bins, const int *in_axes, int nout,
                  mk_array *const *outs, mk_array **bouts, int *out_axes) {
    topo t;
    ptrmap bm = {0}; /* array -> batched array (aux: axis) */
    int rc = -1;
    for (int i = 0; i < nout; i++) bouts[i] = NULL;
    if (topo_build(&t, nout, outs, nin, ins, false) < 0) return -1;
    mk_trace_push();
    for (int i = 0; i < nin; i++) {
        pm_slot *s = pm_get(&bm, ins[i]);
        if (!s) goto done;
        if (s->val) continue;
        mk_array *v = in_axes[i] < 0 ? ins[i] : bins[i];
        mk_incref(v);
        s->val = v;
        s->aux = in_axes[i];
    }
    for (size_t k = 0; k < t.n; k++) {
        mk_prim *p = t.order[k];
        int no = p->noutputs, ni = p->ninputs;
        mk_array **bi = calloc(ni ? ni : 1, sizeof *bi);
        int *ax = calloc(ni ? ni : 1, sizeof *ax);
        mk_array **bo = calloc(no, sizeof *bo);
        int *oax = calloc(no, sizeof *oax);
        if (!bi || !ax || !bo || !oax) {
            free(bi);
            free(ax);
            free(bo);
            free(oax);
            mk_nomem();
            goto done;
        }
        bool any = false;
        for (int i = 0; i < ni; i++) {
            pm_slot *s = pm_find(&bm, p->inputs[i]);
            bi[i] = s ? s->val : p->inputs[i];
            ax[i] = s ? (int)s->aux : -1;
            any |= ax[i] >= 0;
        }
        int prc = 0;
        if (any) {
            if (!p->op->vmap) {
                mk_error_set(MK_ERR_VALUE, "[Primitive::vmap] Not implemented for %s.", p->op->name);
                prc = -1;
            } else {
                for (int j = 0; j < no; j++) oax[j] = -1;
                mk_stream sv = mk_stream_scope(p->stream); /* as MLX's: the primitive's stream */
                prc = p->op->vmap(p, bi, ax, bo, oax);
                mk_stream_scope(sv);
            }
        }
        for (int j = 0; j < no; j++) {
            mk_array *o = p->outputs[j];
            if (prc == 0 && o && any && bo[j]) {
                pm_slot *s = pm_get(&bm, o);
                if (!s) {
                    prc = -1;
                    mk_decref(bo[j]);
                    continue;
                }
                mk_xdecref(s->val);
                s->val = bo[j];
                s->aux = oax[j];
            } else {
                mk_xdecref(bo[j]);
            }
        }
        free(bi);
        free(ax);
        free(bo);
        free(oax);
        if (prc < 0) goto done;
    }
    for (int i = 0; i < nout; i++) {
        pm_slot *s = pm_find(&bm, outs[i]);
        bouts[i] = s && s->val ? s->val : outs[i];
        out_axes[i] = s && s->val ? (int)s->aux : -1;
        mk_incref(bouts[i]);
    }
    rc = 0;
done:
    mk_trace_pop();
    if (rc < 0)
        for (int i = 0; i < nout; i++) {
            mk_xdecref(bouts[i]);
            bouts[i] = NULL;
        }
    pm_free_arrays(&bm);
    topo_free(&t);
    return rc;
}

/* Walks the graph behind outs (depth first, each array once, not past the
 * arrays in `stop`): 1 as soon as an array satisfies hit, 0 if none does,
 * -1 on error. */
static int graph_find(int nout, mk_array *const *outs, ptrmap *stop,
                      bool (*hit)(const mk_array *, const void *), const void *ctx) {
    ptrmap seen = {0};
    size_t cap = 64, n = 0;
    mk_array **stack = malloc(cap * sizeof *stack);
    int rc = 0;
    if (!stack) goto nomem;
    for (int i = 0; i < nout && !rc; i++) {
        stack[n++] = outs[i]; /* the stack is empty here */
        while (n && !rc) {
            mk_array *a = stack[--n];
            if (pm_find(stop, a) || pm_find(&seen, a)) continue;
            if (hit(a, ctx)) {
                rc = 1;
                break;
            }
            if (!pm_get(&seen, a)) goto fail;
            if (!a->prim) continue;
            for (int k = 0; k < a->prim->ninputs; k++) {
                if (n == cap) {
                    mk_array **s2 = realloc(stack, (cap *= 2) * sizeof *stack);
                    if (!s2) goto nomem;
                    stack = s2;
                }
                stack[n++] = a->prim->inputs[k];
            }
        }
        n = 0;
    }
    goto done;
nomem:
    mk_nomem();
fail:
    rc = -1;
done:
    free(stack);
    pm_free(&seen);
    return rc;
}

static bool in_map(const mk_array *a, const void *map) { return pm_find((ptrmap *)map, a) != NULL; }

int mk_graph_reaches(int nout, mk_array *const *outs, int nin, mk_array *const *ins, int nf, mk_array *const *forbid) {
    ptrmap stop = {0}, bad = {0};
    int rc = -1;
    for (int i = 0; i < nin; i++)
        if (!pm_get(&stop, ins[i])) goto done;
    for (int i = 0; i < nf; i++)
        if (!pm_get(&bad, forbid[i])) goto done;
    rc = graph_find(nout, outs, &stop, in_map, &bad);
done:
    pm_free(&stop);
    pm_free(&bad);
    return rc;
}

/* ------------------------------------------------------------ composition */

/* Tracers standing for p's inputs, and the composition built on them. With `batched` (a vmap:
 * the batched inputs and their batch axes), each tracer has the shape of one example of its
 * input rather than p's traced input's (an unbatched input is itself), so that a shapeless
 * compile's replay, which batches inputs of new shapes, gets the composition built at the new
 * shapes (a causal mask's sizes, a matmul's). */
static int compose_tracers(mk_prim *p, mk_compose_fn build, mk_array *const *batched, const int *axes, mk_array ***tr,
                           mk_array ***outs) {
    int ni = p->ninputs, no = p->noutputs;
    *tr = calloc(ni ? ni : 1, sizeof **tr);
    *outs = calloc(no, sizeof **outs);
    if (!*tr || !*outs) {
        mk_nomem();
        return -1;
    }
    for (int i = 0; i < ni; i++) {
        mk_array *like = batched && axes[i] < 0 ? batched[i] : p->inputs[i];
        if (batched && axes[i] >= 0) {
            int64_t shape[MK_MAX_NDIM];
            const mk_array *b = batched[i];
            int nd = 0;
            for (int d = 0; d < b->ndim; d++)
                if (d != axes[i]) shape[nd++] = b->shape[d];
            if (!(like = mk_zeros(nd, shape, b->dtype))) return -1;
        } else {
            mk_incref(like);
        }
        (*tr)[i] = mk_tracer(like);
        mk_decref(like);
        if (!(*tr)[i]) return -1;
    }
    return build(p, *tr, *outs);
}

static void compose_free(mk_prim *p, mk_array **tr, mk_array **outs) {
    for (int i = 0; tr && i < p->ninputs; i++) mk_xdecref(tr[i]);
    for (int j = 0; outs && j < p->noutputs; j++) mk_xdecref(outs[j]);
    free(tr);
    free(outs);
}

int mk_vjp_by_composition(mk_prim *p, mk_compose_fn build, mk_array *const *cots, const bool *want,
                          mk_array **grads) {
    mk_array **tr = NULL, **outs = NULL;
    int rc = -1;
    mk_trace_push();
    if (compose_tracers(p, build, NULL, NULL, &tr, &outs) == 0) rc = mk_vjp_graph(p->noutputs, outs, cots, p->ninputs, tr, grads);
    mk_trace_pop();
    for (int i = 0; rc == 0 && i < p->ninputs; i++)
        if (!want[i]) {
            mk_xdecref(grads[i]);
            grads[i] = NULL;
        }
    compose_free(p, tr, outs);
    return rc;
}

int mk_jvp_by_composition(mk_prim *p, mk_compose_fn build, mk_array *const *tans, mk_array **out_tans) {
    mk_array **tr = NULL, **outs = NULL;
    int rc = -1;
    mk_trace_push();
    if (compose_tracers(p, build, NULL, NULL, &tr, &outs) == 0)
        rc = mk_jvp_graph(p->ninputs, tr, tans, p->noutputs, outs, out_tans);
    mk_trace_pop();
    compose_free(p, tr, outs);
    return rc;
}

int mk_vmap_by_composition(mk_prim *p, mk_compose_fn build, mk_array *const *inputs, const int *axes,
                           mk_array **bouts, int *out_axes) {
    mk_array **tr = NULL, **outs = NULL;
    int rc = -1;
    mk_trace_push();
    if (compose_tracers(p, build, inputs, axes, &tr, &outs) == 0)
        rc = mk_vmap_graph(p->ninputs, tr, inputs, axes, p->noutputs, outs, bouts, out_axes);
    mk_trace_pop();
    compose_free(p, tr, outs);
    return rc;
}

/* ------------------------------------------------------------ arena helpers */

mk_array *mk_ar_keep(mk_arena *A, mk_array *x) {
    if (!x) return NULL;
    if (A->n == A->cap) {
        int cap = A->cap ? A->cap * 2 : 16;
        mk_array **it = realloc(A->items, cap * sizeof *it);
        if (!it) {
            mk_decref(x);
            return mk_nomem();
        }
        A->items = it;
        A->cap = cap;
    }
    A->items[A->n++] = x;
    return x;
}

mk_array *mk_ar_out(mk_array *x) {
    if (x) mk_incref(x);
    return x;
}

void mk_ar_free(mk_arena *A) {
    for (int i = 0; i < A->n; i++) mk_decref(A->items[i]);
    free(A->items);
    A->items = NULL;
    A->n = A->cap = 0;
}

mk_array *mk_ar_un(mk_arena *A, mk_unary_op op, mk_array *x) { return x ? mk_ar_keep(A, mk_unary(op, x)) : NULL; }
mk_array *mk_ar_bin(mk_arena *A, mk_binary_op op, mk_array *a, mk_array *b) {
    return a && b ? mk_ar_keep(A, mk_binary(op, a, b)) : NULL;
}
mk_array *mk_ar_mul(mk_arena *A, mk_array *a, mk_array *b) { return mk_ar_bin(A, MK_BINARY_multiply, a, b); }
mk_array *mk_ar_add(mk_arena *A, mk_array *a, mk_array *b) { return mk_ar_bin(A, MK_BINARY_add, a, b); }
mk_array *mk_ar_sub(mk_arena *A, mk_array *a, mk_array *b) { return mk_ar_bin(A, MK_BINARY_subtract, a, b); }
mk_array *mk_ar_div(mk_arena *A, mk_array *a, mk_array *b) { return mk_ar_bin(A, MK_BINARY_divide, a, b); }
mk_array *mk_ar_conj(mk_arena *A, mk_array *x) {
    return x && x->dtype == MK_COMPLEX64 ? mk_ar_un(A, MK_UNARY_conjugate, x) : x;
}
mk_array *mk_ar_neg(mk_arena *A, mk_array *a) { return mk_ar_un(A, MK_UNARY_negative, a); }
mk_array *mk_ar_scalar(mk_arena *A, mk_array *like, double v) {
    return like ? mk_ar_keep(A, mk_scalar_f64(like->dtype, v)) : NULL;
}
mk_array *mk_ar_scale(mk_arena *A, mk_array *x, double v) { return mk_ar_mul(A, x, mk_ar_scalar(A, x, v)); }
mk_array *mk_ar_zeros_like(mk_arena *A, mk_array *x) { return x ? mk_ar_keep(A, zeros_like(x)) : NULL; }
mk_array *mk_ar_cast(mk_arena *A, mk_array *x, mk_dtype t) { return x ? mk_ar_keep(A, mk_as_dtype(x, t)) : NULL; }
mk_array *mk_ar_where(mk_arena *A, mk_array *c, mk_array *x, mk_array *y) {
    return c && x && y ? mk_ar_keep(A, mk_where(c, x, y)) : NULL;
}
mk_array *mk_ar_reshape(mk_arena *A, mk_array *x, int ndim, const int64_t *shape) {
    return x ? mk_ar_keep(A, mk_reshape(x, ndim, shape)) : NULL;
}
mk_array *mk_ar_broadcast(mk_arena *A, mk_array *x, int ndim, const int64_t *shape) {
    return x ? mk_ar_keep(A, mk_broadcast_to(x, ndim, shape)) : NULL;
}
mk_array *mk_ar_sum(mk_arena *A, mk_array *x, int naxes, const int *axes, bool keepdims) {
    return x ? mk_ar_keep(A, mk_reduce(MK_REDUCE_SUM, x, naxes, axes, keepdims)) : NULL;
}
mk_array *mk_ar_transpose(mk_arena *A, mk_array *x, int naxes, const int *axes) {
    return x ? mk_ar_keep(A, mk_transpose(x, naxes, axes)) : NULL;
}
mk_array *mk_ar_matmul(mk_arena *A, mk_array *a, mk_array *b) {
    return a && b ? mk_ar_keep(A, mk_matmul(a, b)) : NULL;
}

mk_array *mk_ar_sum_to(mk_arena *A, mk_array *x, int ndim, const int64_t *shape) {
    if (!x) return NULL;
    int lead = x->ndim - ndim, axes[MK_MAX_NDIM], n = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d < lead || (shape[d - lead] == 1 && x->shape[d] != 1)) axes[n++] = d;
    mk_array *s = x;
    if (n) s = mk_ar_sum(A, x, n, axes, true);
    if (!s) return NULL;
    bool same = s->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = s->shape[d] == shape[d];
    if (same) return s;
    /* the leading dims are squeezed rather than reshaped away: axis positions
     * only, so a shapeless replay follows new sizes (MLX's broadcast_vjp) */
    bool fits = s->ndim == x->ndim;
    for (int d = 0; fits && d < ndim; d++) fits = s->shape[lead + d] == shape[d];
    for (int d = 0; fits && d < lead; d++) fits = s->shape[d] == 1;
    if (!fits) return mk_ar_reshape(A, s, ndim, shape);
    int la[MK_MAX_NDIM];
    for (int d = 0; d < lead; d++) la[d] = d;
    return mk_ar_keep(A, mk_squeeze(s, lead, la));
}

mk_array *mk_ar_output(mk_arena *A, mk_prim *p, int k) {
    (void)A;
    return p->outputs[k];
}

mk_array *mk_ar_batch_front(mk_arena *A, mk_array *x, int ax, int64_t n) {
    if (!x) return NULL;
    if (ax == 0) return x;
    if (ax > 0) return mk_ar_keep(A, mk_moveaxis(x, ax, 0));
    int64_t shape[MK_MAX_NDIM];
    shape[0] = n;
    memcpy(shape + 1, x->shape, x->ndim * sizeof *shape);
    int zero = 0;
    mk_array *e = mk_ar_keep(A, mk_expand_dims(x, 1, &zero));
    return mk_ar_broadcast(A, e, x->ndim + 1, shape);
}

/* ------------------------------------------------------------ custom functions */

typedef struct {
    int n, m;
    mk_custom_rules r;
} custom_params;

static void custom_free(void *params) {
    custom_params *c = params;
    if (c->r.free_ctx) c->r.free_ctx(c->r.ctx);
    free(c);
}

static int custom_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const custom_params *c = p->params;
    for (int j = 0; j < c->m; j++) {
        const mk_array *x = in[c->n + j];
        mk_set_view(out[j], x, x->offset, x->strides);
    }
    return 0;
}

static int custom_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const custom_params *c = p->params;
    if (!c->r.vjp) {
        /* through the function's own graph */
        for (int j = 0; j < c->m; j++)
            if (want[c->n + j] && cots[j]) grads[c->n + j] = mk_ar_out(cots[j]);
        return 0;
    }
    mk_arena A = {0};
    mk_array **cz = calloc(c->m, sizeof *cz), **outs = calloc(c->m, sizeof *outs);
    int rc = cz && outs ? 0 : -1;
    if (rc) mk_nomem();
    for (int j = 0; rc == 0 && j < c->m; j++) {
        outs[j] = p->inputs[c->n + j];
        cz[j] = cots[j] ? cots[j] : mk_ar_zeros_like(&A, outs[j]);
        if (!cz[j]) rc = -1;
    }
    if (rc == 0) rc = c->r.vjp(c->r.ctx, c->n, p->inputs, c->m, cz, outs, grads);
    for (int i = 0; rc == 0 && i < c->n; i++)
        if (!want[i] && grads[i]) {
            mk_decref(grads[i]);
            grads[i] = NULL;
        }
    free(cz);
    free(outs);
    mk_ar_free(&A);
    return rc;
}

static int custom_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    const custom_params *c = p->params;
    if (!c->r.jvp) {
        for (int j = 0; j < c->m; j++) out[j] = mk_ar_out(tans[c->n + j]);
        return 0;
    }
    mk_arena A = {0};
    mk_array **tz = calloc(c->n ? c->n : 1, sizeof *tz);
    int rc = tz ? 0 : -1;
    if (rc) mk_nomem();
    for (int i = 0; rc == 0 && i < c->n; i++) {
        tz[i] = tans[i] ? tans[i] : mk_ar_zeros_like(&A, p->inputs[i]);
        if (!tz[i]) rc = -1;
    }
    if (rc == 0) rc = c->r.jvp(c->r.ctx, c->n, p->inputs, tz, c->m, out);
    free(tz);
    mk_ar_free(&A);
    return rc;
}

static int custom_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const custom_params *c = p->params;
    if (!c->r.vmap) {
        for (int j = 0; j < c->m; j++) {
            outs[j] = mk_ar_out(in[c->n + j]);
            out_axes[j] = axes[c->n + j];
        }
        return 0;
    }
    return c->r.vmap(c->r.ctx, c->n, in, axes, c->m, outs, out_axes);
}

static const mk_opdef custom_def = {"CustomTransforms", custom_eval, custom_free, custom_vjp, custom_jvp,
                                    custom_vmap, false};

int mk_custom(int n, mk_array *const *primals, int m, mk_array *const *fwd, const mk_custom_rules *rules,
              mk_array **outs) {
    custom_params *c = calloc(1, sizeof *c);
    mk_array **in = calloc(n + m, sizeof *in);
    mk_outdesc *d = calloc(m ? m : 1, sizeof *d);
    if (!c || !in || !d) {
        free(c);
        free(in);
        free(d);
        if (rules->free_ctx) rules->free_ctx(rules->ctx);
        mk_nomem();
        return -1;
    }
    c->n = n;
    c->m = m;
    c->r = *rules;
    for (int i = 0; i < n; i++) in[i] = primals[i];
    for (int j = 0; j < m; j++) {
        in[n + j] = fwd[j];
        d[j].dtype = fwd[j]->dtype;
        d[j].ndim = fwd[j]->ndim;
        memcpy(d[j].shape, fwd[j]->shape, fwd[j]->ndim * sizeof *d[j].shape);
    }
    int rc = mk_prim_make(&custom_def, c, n + m, in, m, d, outs);
    free(in);
    free(d);
    return rc;
}

/* ------------------------------------------------------ async_eval check */

/* 1 when the graph behind `outs` contains a tracer (a transformation's
 * input stand-in): MLX refuses async_eval of such arrays inside a
 * transformation. 0 if not, -1 on error. */
static bool is_tracer(const mk_array *a, const void *unused) {
    (void)unused;
    return a->prim && a->prim->op == &tracer_def;
}

int mk_graph_has_tracer(int n, mk_array *const *outs) {
    ptrmap none = {0};
    return graph_find(n, outs, &none, is_tracer, NULL);
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_tracer(const mk_prim *p) { return p->op == &tracer_def; }
