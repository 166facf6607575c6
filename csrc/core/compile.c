/* mx.compile's graph work: the replay of a traced graph on new inputs (with
 * MLX's merging of equal nodes), the shape-following broadcast primitive
 * (MLX's BroadcastAxes) and MLX's names of the primitives.
 *
 * Replay. mx.compile traces the function once per signature and keeps the
 * graph unevaluated; each call rebuilds it on the call's arrays, primitive by
 * primitive in topological order. A primitive whose inputs have the shapes
 * and dtypes they had when traced is re-created as it is: same op, a copy of
 * its params, same output descriptions (op->pure, or op->copy_params for
 * params with pointers, such as a Metal kernel call). So random ops replay
 * with the key they traced (a constant, as MLX: a compiled function without
 * the random state as input and output draws the same numbers each call) and
 * metal_kernel calls are replayed, not called again. A primitive whose input
 * shapes changed (a shapeless compile) goes through its batching rule with a
 * batch of one, which recomputes the shapes.
 *
 * Merging (MLX's compile_simplify): 0-d constants of equal dtype and bits
 * become one, then a pure primitive whose op, params, output descriptions and
 * (replayed) inputs equal an earlier one's reuses its outputs. */
#include "compile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iter.h"

/* ------------------------------------------------------------ pointer map */

typedef struct {
    const void *key;
    void *val;
} cm_slot;

typedef struct {
    cm_slot *s;
    size_t cap, n;
} cmap;

static size_t cm_hash(uint64_t x, size_t cap) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static cm_slot *cm_find(const cmap *m, const void *k) {
    if (!m->cap) return NULL;
    for (size_t i = cm_hash((uintptr_t)k, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->s[i].key == k) return &m->s[i];
        if (!m->s[i].key) return NULL;
    }
}

static int cm_put(cmap *m, const void *k, void *v) {
    cm_slot *f = cm_find(m, k);
    if (f) {
        f->val = v;
        return 0;
    }
    if (2 * (m->n + 1) > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        cm_slot *s = calloc(cap, sizeof *s);
        if (!s) {
            mk_nomem();
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->s[i].key) {
                size_t j = cm_hash((uintptr_t)m->s[i].key, cap);
                while (s[j].key) j = (j + 1) & (cap - 1);
                s[j] = m->s[i];
            }
        free(m->s);
        m->s = s;
        m->cap = cap;
    }
    size_t i = cm_hash((uintptr_t)k, m->cap);
    while (m->s[i].key) i = (i + 1) & (m->cap - 1);
    m->s[i].key = k;
    m->s[i].val = v;
    m->n++;
    return 0;
}

/* ------------------------------------------------------------ replay */

static bool same_desc(const mk_array *a, const mk_array *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* A replayed primitive, for merging: its op, params, inputs and outputs. */
typedef struct {
    const mk_prim *orig;
    mk_array **ins;  /* replayed inputs (borrowed from the map or the graph) */
    mk_array **outs; /* replayed outputs (owned by the map) */
    uint64_t hash;
} rp_node;

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
}

static uint64_t node_hash(const mk_prim *p, mk_array *const *ins) {
    uint64_t h = (uintptr_t)p->op;
    for (int i = 0; i < p->ninputs; i++) h = mix(h, (uintptr_t)ins[i]);
    const unsigned char *b = p->params;
    for (size_t k = 0; b && k < p->op->params_size; k++) h = mix(h, b[k]);
    for (int j = 0; j < p->noutputs; j++) {
        h = mix(h, (uint64_t)p->outdesc[j].dtype);
        for (int d = 0; d < p->outdesc[j].ndim; d++) h = mix(h, (uint64_t)p->outdesc[j].shape[d]);
    }
    return h;
}

static bool node_equal(const rp_node *a, const mk_prim *p, mk_array *const *ins) {
    const mk_prim *q = a->orig;
    if (q->op != p->op || q->ninputs != p->ninputs || q->noutputs != p->noutputs) return false;
    for (int i = 0; i < p->ninputs; i++)
        if (a->ins[i] != ins[i]) return false;
    size_t ps = p->op->params_size;
    if ((q->params == NULL) != (p->params == NULL)) return false;
    if (ps && q->params && memcmp(q->params, p->params, ps)) return false;
    for (int j = 0; j < p->noutputs; j++) {
        const mk_outdesc *x = &q->outdesc[j], *y = &p->outdesc[j];
        if (x->dtype != y->dtype || x->ndim != y->ndim ||
            (x->ndim && memcmp(x->shape, y->shape, (size_t)x->ndim * sizeof *x->shape)))
            return false;
    }
    return true;
}

/* Re-creates p on ins (same shapes as traced). outs: p->noutputs new refs.
 * Returns 1 if done, 0 if p cannot be copied, -1 on error. */
static int replay_copy(mk_prim *p, mk_array *const *ins, mk_array **outs) {
    const mk_opdef *op = p->op;
    void *params = NULL;
    if (p->params) {
        if (op->pure && op->params_size) {
            if (!(params = malloc(op->params_size))) {
                mk_nomem();
                return -1;
            }
            memcpy(params, p->params, op->params_size);
        } else if (op->copy_params) {
            if (!(params = op->copy_params(p->params))) return -1;
        } else {
            return 0;
        }
    } else if (!op->pure && !op->copy_params) {
        return 0;
    }
    return mk_prim_make(op, params, p->ninputs, ins, p->noutputs, p->outdesc, outs) < 0 ? -1 : 1;
}

/* p through its batching rule, the changed inputs given a batch of one. */
static int replay_vmap(mk_prim *p, mk_array *const *ins, const bool *mapped, mk_array **outs) {
    int ni = p->ninputs, no = p->noutputs, rc = -1;
    if (!p->op->vmap) {
        mk_error_set(MK_ERR_VALUE, "[Primitive::vmap] Not implemented for %s.", p->op->name);
        return -1;
    }
    mk_array **bi = calloc(ni ? ni : 1, sizeof *bi), **bo = calloc(no, sizeof *bo);
    int *ax = calloc(ni ? ni : 1, sizeof *ax), *oax = calloc(no, sizeof *oax);
    if (!bi || !bo || !ax || !oax) {
        mk_nomem();
        goto done;
    }
    int zero = 0;
    for (int i = 0; i < ni; i++) {
        ax[i] = mapped[i] ? 0 : -1;
        bi[i] = mapped[i] ? mk_expand_dims(ins[i], 1, &zero) : (mk_incref(ins[i]), ins[i]);
        if (!bi[i]) goto done;
    }
    for (int j = 0; j < no; j++) oax[j] = -1;
    if (p->op->vmap(p, bi, ax, bo, oax) < 0) goto done;
    for (int j = 0; j < no; j++) {
        if (!bo[j]) {
            mk_error_set(MK_ERR_RUNTIME, "[compile] The batching rule of %s gave no output %d.", p->op->name, j);
            goto done;
        }
        if (oax[j] < 0) {
            outs[j] = bo[j];
        } else if (!(outs[j] = mk_squeeze(bo[j], 1, &oax[j]))) {
            goto done;
        } else {
            mk_decref(bo[j]);
        }
        bo[j] = NULL;
    }
    rc = 0;
done:
    if (rc < 0)
        for (int j = 0; j < no; j++) {
            mk_xdecref(outs[j]);
            outs[j] = NULL;
        }
    for (int i = 0; bi && i < ni; i++) mk_xdecref(bi[i]);
    for (int j = 0; bo && j < no; j++) mk_xdecref(bo[j]);
    free(bi);
    free(bo);
    free(ax);
    free(oax);
    return rc;
}

/* The value bits of an evaluated 0-d array (MLX's scalar key). */
static bool scalar_key(const mk_array *a, uint64_t *key) {
    if (a->ndim != 0 || !mk_is_evaluated(a) || !a->buf) return false;
    size_t sz = mk_dtype_size(a->dtype);
    if (sz > 8) return false;
    uint64_t v = 0;
    memcpy(&v, mk_data(a), sz);
    *key = mix(v, (uint64_t)a->dtype);
    return true;
}

int mk_replay_graph(int nin, mk_array *const *ins, mk_array *const *news, int nout, mk_array *const *outs,
                    mk_array **new_outs) {
    mk_prim **order = NULL;
    size_t n = 0, nnodes = 0;
    cmap map = {0};          /* traced array -> replayed array (owned) */
    cmap scalars = {0};      /* scalar key -> first such constant (borrowed) */
    rp_node *nodes = NULL;   /* replayed pure primitives */
    size_t *buckets = NULL;  /* hash table of nodes: index + 1 */
    size_t nb = 0;
    int rc = -1;
    for (int i = 0; i < nout; i++) new_outs[i] = NULL;
    if (mk_graph_topo(nout, outs, nin, ins, &order, &n) < 0) return -1;
    mk_trace_push();
    for (int i = 0; i < nin; i++) {
        if (cm_find(&map, ins[i])) continue;
        mk_incref(news[i]);
        if (cm_put(&map, ins[i], news[i]) < 0) {
            mk_decref(news[i]);
            goto done;
        }
    }
    nodes = calloc(n ? n : 1, sizeof *nodes);
    for (nb = 16; nb < 2 * n; nb *= 2) {}
    buckets = calloc(nb, sizeof *buckets);
    if (!nodes || !buckets) {
        mk_nomem();
        goto done;
    }
    for (size_t k = 0; k < n; k++) {
        mk_prim *p = order[k];
        int ni = p->ninputs, no = p->noutputs;
        mk_array **bi = calloc(ni ? ni : 1, sizeof *bi), **bo = calloc(no, sizeof *bo);
        bool *mapped = calloc(ni ? ni : 1, sizeof *mapped);
        if (!bi || !bo || !mapped) {
            free(bi);
            free(bo);
            free(mapped);
            mk_nomem();
            goto done;
        }
        bool same = true;
        for (int i = 0; i < ni; i++) {
            mk_array *x = p->inputs[i];
            cm_slot *s = cm_find(&map, x);
            uint64_t key;
            if (s) {
                bi[i] = s->val;
                mapped[i] = true;
                same &= same_desc(bi[i], x);
            } else if (scalar_key(x, &key)) {
                /* equal scalars merge (keyed by bits and dtype; a colliding
                 * key of other bits is left alone) */
                const void *kk = (const void *)(uintptr_t)(key | 1);
                cm_slot *c = cm_find(&scalars, kk);
                mk_array *f = c ? c->val : NULL;
                if (!f && cm_put(&scalars, kk, x) < 0) {
                    free(bi);
                    free(bo);
                    free(mapped);
                    goto done;
                }
                bi[i] = f && f->dtype == x->dtype && !memcmp(mk_data(f), mk_data(x), mk_dtype_size(x->dtype)) ? f : x;
            } else {
                bi[i] = x;
            }
        }
        /* merge with an equal earlier node */
        bool merged = false;
        uint64_t h = 0;
        if (p->op->pure) {
            h = node_hash(p, bi);
            for (size_t b = h & (nb - 1); buckets[b]; b = (b + 1) & (nb - 1)) {
                rp_node *o = &nodes[buckets[b] - 1];
                if (o->hash == h && node_equal(o, p, bi)) {
                    for (int j = 0; j < no; j++) {
                        bo[j] = o->outs[j];
                        mk_incref(bo[j]);
                    }
                    merged = true;
                    break;
                }
            }
        }
        int prc = merged ? 1 : 0;
        if (!merged && same) prc = replay_copy(p, bi, bo);
        if (prc == 0) prc = replay_vmap(p, bi, mapped, bo) < 0 ? -1 : 1;
        if (prc > 0 && !merged && p->op->pure && same) {
            rp_node *nd = &nodes[nnodes];
            nd->orig = p;
            nd->hash = h;
            nd->ins = malloc((ni ? ni : 1) * sizeof *nd->ins);
            nd->outs = malloc(no * sizeof *nd->outs);
            if (!nd->ins || !nd->outs) {
                free(nd->ins);
                free(nd->outs);
                nd->ins = nd->outs = NULL;
            } else {
                memcpy(nd->ins, bi, ni * sizeof *bi);
                memcpy(nd->outs, bo, no * sizeof *bo);
                size_t b = h & (nb - 1);
                while (buckets[b]) b = (b + 1) & (nb - 1);
                buckets[b] = ++nnodes;
            }
        }
        /* the map owns the replayed outputs (the merge table borrows them) */
        for (int j = 0; j < no; j++) {
            mk_array *o = p->outputs[j];
            if (prc > 0 && o && bo[j]) {
                cm_slot *s = cm_find(&map, o);
                if (s) {
                    mk_decref(s->val);
                    s->val = bo[j];
                } else if (cm_put(&map, o, bo[j]) < 0) {
                    mk_decref(bo[j]);
                    prc = -1;
                }
            } else if (prc > 0 && bo[j]) {
                /* a dead output: keep it alive for the merge table */
                if (cm_put(&map, bo[j], bo[j]) < 0) {
                    mk_decref(bo[j]);
                    prc = -1;
                }
            } else {
                mk_xdecref(bo[j]);
            }
        }
        free(bi);
        free(bo);
        free(mapped);
        if (prc < 0) goto done;
    }
    for (int i = 0; i < nout; i++) {
        cm_slot *s = cm_find(&map, outs[i]);
        new_outs[i] = s ? s->val : outs[i];
        mk_incref(new_outs[i]);
    }
    rc = 0;
done:
    mk_trace_pop();
    if (rc < 0)
        for (int i = 0; i < nout; i++) {
            mk_xdecref(new_outs[i]);
            new_outs[i] = NULL;
        }
    for (size_t i = 0; i < map.cap; i++)
        if (map.s[i].key) mk_decref(map.s[i].val);
    free(map.s);
    free(scalars.s);
    for (size_t i = 0; nodes && i < nnodes; i++) {
        free(nodes[i].ins);
        free(nodes[i].outs);
    }
    free(nodes);
    free(buckets);
    free(order);
    return rc;
}

/* ------------------------------------------------------------ BroadcastAxes */

typedef struct {
    int nign;
    int ign[MK_MAX_NDIM]; /* negative, increasing */
} bcast_params;

/* MLX's BroadcastAxes::output_shape. Returns the ndim or -1. */
static int bcast_shape(int n, mk_array *const *in, const bcast_params *bp, int64_t *shape) {
    int nd = 0;
    for (int i = 0; i < n; i++) {
        int64_t s[MK_MAX_NDIM], out[MK_MAX_NDIM];
        int m = 0, k = 0;
        for (int d = 0; d < in[i]->ndim; d++) {
            bool skip = false;
            for (int j = 0; j < bp->nign; j++) skip |= d == in[i]->ndim + bp->ign[j];
            if (!skip) s[m++] = in[i]->shape[d];
        }
        if ((k = mk_broadcast_shapes(nd, shape, m, s, out)) < 0) return -1;
        memcpy(shape, out, (size_t)k * sizeof *out);
        nd = k;
    }
    int dims = nd + bp->nign;
    if (dims > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[broadcast_arrays] Arrays of more than %d dimensions are not supported.",
                     MK_MAX_NDIM);
        return -1;
    }
    for (int j = 0; j < bp->nign; j++) {
        int pos = dims + bp->ign[j];
        memmove(shape + pos + 1, shape + pos, (size_t)(nd - pos) * sizeof *shape);
        shape[pos] = in[0]->shape[in[0]->ndim + bp->ign[j]];
        nd++;
    }
    return nd;
}

static int bcast_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    int64_t strides[MK_MAX_NDIM];
    mk_broadcast_strides(in[0], out[0]->ndim, out[0]->shape, strides);
    mk_set_view(out[0], in[0], in[0]->offset, strides);
    return 0;
}

static int bcast_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    if (!want[0] || !cots[0]) return 0;
    /* MLX's broadcast_vjp: summed over the added and broadcast axes (kept),
     * then the added ones squeezed: axis positions only, no shapes */
    mk_array *x = p->inputs[0], *c = cots[0];
    int diff = c->ndim - x->ndim, axes[MK_MAX_NDIM], na = 0, lead[MK_MAX_NDIM];
    for (int d = 0; d < c->ndim; d++)
        if (d < diff || x->shape[d - diff] != c->shape[d]) axes[na++] = d;
    for (int d = 0; d < diff; d++) lead[d] = d;
    mk_arena A = {0};
    mk_array *s = na ? mk_ar_sum(&A, c, na, axes, true) : c;
    if (s && diff) s = mk_ar_keep(&A, mk_squeeze(s, diff, lead));
    grads[0] = mk_ar_out(s);
    mk_ar_free(&A);
    return grads[0] ? 0 : -1;
}

static int bcast_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    if (!tans[0]) return 0;
    const bcast_params *bp = p->params;
    mk_array *in[MK_MAX_NDIM], **v = p->ninputs <= MK_MAX_NDIM ? in : malloc(p->ninputs * sizeof *v);
    if (!v) {
        mk_nomem();
        return -1;
    }
    v[0] = tans[0];
    for (int i = 1; i < p->ninputs; i++) v[i] = p->inputs[i];
    out[0] = mk_broadcast_axes(p->ninputs, v, bp->nign, bp->ign);
    if (v != in) free(v);
    return out[0] ? 0 : -1;
}

/* The batched inputs with the batch axis first and their other dims padded
 * on the left to the largest rank (unbatched inputs broadcast against them). */
static int bcast_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const bcast_params *bp = p->params;
    int n = p->ninputs, nd = 0, rc = -1;
    bool have = false;
    for (int i = 0; i < n; i++) {
        int r = in[i]->ndim - (axes[i] >= 0);
        if (r > nd) nd = r;
        have |= axes[i] >= 0;
    }
    mk_arena A = {0};
    mk_array **v = calloc(n ? n : 1, sizeof *v);
    if (!v) {
        mk_nomem();
        return -1;
    }
    for (int i = 0; i < n; i++) {
        mk_array *x = in[i];
        if (axes[i] >= 0) {
            int r = x->ndim - 1, extra = nd - r, pos[MK_MAX_NDIM];
            x = mk_ar_batch_front(&A, x, axes[i], 1);
            for (int k = 0; k < extra; k++) pos[k] = k + 1;
            if (x && extra) x = mk_ar_keep(&A, mk_expand_dims(x, extra, pos));
        }
        if (!(v[i] = x)) goto done;
    }
    if (!(outs[0] = mk_broadcast_axes(n, v, bp->nign, bp->ign))) goto done;
    out_axes[0] = have ? 0 : -1;
    rc = 0;
done:
    free(v);
    mk_ar_free(&A);
    return rc;
}

static void bcast_name(const mk_prim *p, char *buf, size_t n) {
    (void)p;
    snprintf(buf, n, "BroadcastAxes");
}

static const mk_opdef bcast_def = {"BroadcastAxes", bcast_eval, NULL, bcast_vjp, bcast_jvp, bcast_vmap, false,
                                   true, sizeof(bcast_params), NULL, bcast_name};

mk_array *mk_broadcast_axes(int n, mk_array *const *inputs, int nign, const int *ignore) {
    if (n < 1 || nign < 0 || nign > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[broadcast_arrays] Received invalid axes to ignore.");
        return NULL;
    }
    bcast_params *bp = calloc(1, sizeof *bp);
    if (!bp) return mk_nomem();
    bp->nign = nign;
    for (int j = 0; j < nign; j++) {
        bp->ign[j] = ignore[j];
        for (int i = 0; i < n; i++)
            if (ignore[j] >= 0 || inputs[i]->ndim + ignore[j] < 0 || (j > 0 && ignore[j] <= ignore[j - 1])) {
                free(bp);
                mk_error_set(MK_ERR_VALUE, "[broadcast_arrays] Received invalid axes to ignore.");
                return NULL;
            }
    }
    int64_t shape[MK_MAX_NDIM];
    int nd = bcast_shape(n, inputs, bp, shape);
    if (nd < 0) {
        free(bp);
        return NULL;
    }
    return mk_node(&bcast_def, bp, inputs[0]->dtype, nd, shape, n, inputs);
}

mk_array *mk_ar_broadcast_like(mk_arena *A, mk_array *x, mk_array *like) {
    if (!x || !like) return NULL;
    if (!mk_tracing()) return mk_ar_broadcast(A, x, like->ndim, like->shape);
    mk_array *in[2] = {x, like};
    return mk_ar_keep(A, mk_broadcast_axes(2, in, 0, NULL));
}

/* ------------------------------------------------------------ names */

void mk_camel_name(const char *snake, char *buf, size_t n) {
    size_t k = 0;
    bool up = true;
    for (const char *c = snake; *c && k + 1 < n; c++) {
        if (*c == '_') {
            up = true;
            continue;
        }
        buf[k++] = up && *c >= 'a' && *c <= 'z' ? (char)(*c - 'a' + 'A') : *c;
        up = false;
    }
    if (n) buf[k < n ? k : n - 1] = 0;
}

void mk_prim_mlx_name(const mk_prim *p, char *buf, size_t n) {
    if (p->op->mlx_name)
        p->op->mlx_name(p, buf, n);
    else
        mk_camel_name(p->op->name, buf, n);
}
