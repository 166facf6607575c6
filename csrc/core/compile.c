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

#include "export.h"
#include "iter.h"
#include "ops_fused.h"

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

/* h mixed with what same_node_kind compares: params and output descriptions */
static uint64_t kind_hash(uint64_t h, const mk_prim *p) {
    const unsigned char *b = p->params;
    for (size_t k = 0; b && k < p->op->params_size; k++) h = mix(h, b[k]);
    for (int j = 0; j < p->noutputs; j++) {
        h = mix(h, (uint64_t)p->outdesc[j].dtype);
        for (int d = 0; d < p->outdesc[j].ndim; d++) h = mix(h, (uint64_t)p->outdesc[j].shape[d]);
    }
    return h;
}

static uint64_t node_hash(const mk_prim *p, mk_array *const *ins) {
    uint64_t h = (uintptr_t)p->op;
    for (int i = 0; i < p->ninputs; i++) h = mix(h, (uintptr_t)ins[i]);
    return kind_hash(h, p);
}

/* Equal op, input and output counts, params (their first params_size bytes) and
 * output descriptions: the part of MLX's node equality that is not the inputs. */
static bool same_node_kind(const mk_prim *q, const mk_prim *p) {
    if (q->op != p->op || q->ninputs != p->ninputs || q->noutputs != p->noutputs) return false;
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

static bool node_equal(const rp_node *a, const mk_prim *p, mk_array *const *ins) {
    const mk_prim *q = a->orig;
    if (!same_node_kind(q, p)) return false;
    for (int i = 0; i < p->ninputs; i++)
        if (a->ins[i] != ins[i]) return false;
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


/* ------------------------------------------------------------ fusion plan */

/* Element-wise fusion (MLX's compile_fuse), planned on the traced graph and
 * applied while replaying outside transformations. Groups grow from a root
 * (a unary, binary, astype or where node, visited from the last node back) towards
 * its inputs: a node joins when it is fusible, at most MK_FUSED_MAX_DEPTH
 * steps from the root, not a graph output, and every node that reads it is
 * in the group (a broadcast reading it counting only if everything that
 * reads the broadcast is). A broadcast view joins whatever reads it (MLX's
 * shared broadcasts: it is then also replayed for its other readers). A
 * group of one node stays unfused. The replay skips the nodes inside a group
 * and makes one mk_fused node at its root on the group's external inputs. */

enum { FK_NONE, FK_UNARY, FK_BINARY, FK_ASTYPE, FK_BCAST, FK_SELECT };
enum { FR_NORMAL, FR_SKIP, FR_ROOT, FR_ALIAS };

typedef struct {
    mk_fused_tape tape;
    int nin;
    mk_array *ext[MK_FUSED_MAX_IN]; /* traced arrays (borrowed) */
} fgroup;

typedef struct {
    size_t n;
    cmap pos;        /* prim -> index + 1 */
    cmap canon;      /* traced array -> what it replays to (the replay's merging, in advance) */
    cmap scalars;    /* scalar key -> first such constant */
    size_t *rep;     /* the node node k merges into (k itself if none) */
    int *kind;       /* FK_* */
    uint8_t *code;   /* the unary or binary op */
    bool *isout;     /* a graph output */
    size_t *cstart;  /* readers of node k: creader[cstart[k] .. cstart[k + 1]) */
    size_t *creader;
    int *stamp, *emitted;
    int *role;       /* FR_* */
    int *gid;        /* the group of a root */
    fgroup *groups;
    int ngroups;
} fplan;

static bool fuse_enabled(void) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("MKPY_COMPILE_FUSE");
        on = !(e && !strcmp(e, "0"));
    }
    return on;
}

static int fuse_kind(const mk_prim *p, uint8_t *code) {
    mk_unary_op u;
    mk_binary_op b;
    if (p->noutputs != 1) return FK_NONE;
    if (mk_xp_unary(p, &u)) {
        if (u == MK_UNARY_stop_gradient) return FK_NONE;
        *code = (uint8_t)u;
        return FK_UNARY;
    }
    if (mk_xp_binary(p, &b)) {
        *code = (uint8_t)b;
        return FK_BINARY;
    }
    if (mk_xp_astype(p)) return FK_ASTYPE;
    if (mk_xp_where(p)) return FK_SELECT;
    int map[MK_MAX_NDIM];
    int64_t mult[MK_MAX_NDIM], start[MK_MAX_NDIM];
    if (mk_xp_view(p, map, mult, start)) {
        /* a view that only broadcasts (numpy's rules): MLX's Broadcast */
        const mk_array *x = p->inputs[0];
        const mk_outdesc *od = &p->outdesc[0];
        int lead = od->ndim - x->ndim;
        char nm[32];
        mk_prim_mlx_name(p, nm, sizeof nm);
        if (lead < 0 || strcmp(nm, "Broadcast")) return FK_NONE;
        for (int d = 0; d < x->ndim; d++)
            if (start[d]) return FK_NONE;
        for (int k = 0; k < od->ndim; k++) {
            if (mult[k] != 1) return FK_NONE;
            if (k < lead ? map[k] >= 0 : !(map[k] == k - lead || (map[k] < 0 && x->shape[k - lead] == 1)))
                return FK_NONE;
        }
        return FK_BCAST;
    }
    return FK_NONE;
}

static long fp_index(const fplan *f, const mk_array *x) {
    mk_prim *q = atomic_load_explicit(&((mk_array *)x)->prim, memory_order_acquire);
    if (!q || q->noutputs != 1) return -1;
    cm_slot *s = cm_find(&f->pos, q);
    return s ? (long)f->rep[(uintptr_t)s->val - 1] : -1;
}

/* The identity of x after the replay's merging: a tracer's new array, the
 * first equal 0-d constant, the output of the node its node merges into.
 * Returns NULL on error. */
static const void *fp_cid(fplan *f, mk_array *x) {
    cm_slot *s = cm_find(&f->canon, x);
    uint64_t key;
    if (s) return s->val;
    if (scalar_key(x, &key)) {
        const void *kk = (const void *)(uintptr_t)(key | 1);
        cm_slot *c = cm_find(&f->scalars, kk);
        mk_array *g = c ? c->val : NULL;
        if (!g) {
            if (cm_put(&f->scalars, kk, x) < 0) return NULL;
            return x;
        }
        return g->dtype == x->dtype && !memcmp(mk_data(g), mk_data(x), mk_dtype_size(x->dtype)) ? g : x;
    }
    return x;
}

static uint64_t fp_hash(fplan *f, const mk_prim *p, bool *ok) {
    uint64_t h = (uintptr_t)p->op;
    for (int i = 0; i < p->ninputs; i++) {
        const void *c = fp_cid(f, p->inputs[i]);
        if (!c) *ok = false;
        h = mix(h, (uintptr_t)c);
    }
    return kind_hash(h, p);
}

/* node_equal on identities */
static bool fp_equal(fplan *f, const mk_prim *q, const mk_prim *p) {
    if (!same_node_kind(q, p)) return false;
    for (int i = 0; i < p->ninputs; i++)
        if (fp_cid(f, q->inputs[i]) != fp_cid(f, p->inputs[i])) return false;
    return true;
}

/* Which nodes the replay will merge (as mk_replay_graph does: pure nodes
 * with equal op, params, output descriptions and inputs). Returns 0 or -1. */
static int fp_merges(fplan *f, mk_prim *const *order, size_t n, int nin, mk_array *const *ins, mk_array *const *news) {
    size_t nb = 16, *buckets;
    uint64_t *hash = malloc((n ? n : 1) * sizeof *hash);
    while (nb < 2 * n) nb *= 2;
    if (!hash || !(buckets = calloc(nb, sizeof *buckets))) {
        free(hash);
        mk_nomem();
        return -1;
    }
    int rc = -1;
    for (int i = 0; i < nin; i++)
        if (!cm_find(&f->canon, ins[i]) && cm_put(&f->canon, ins[i], news[i]) < 0) goto done;
    for (size_t k = 0; k < n; k++) {
        const mk_prim *p = order[k];
        f->rep[k] = k;
        if (p->op->pure) {
            bool ok = true;
            uint64_t h = fp_hash(f, p, &ok);
            if (!ok) goto done;
            size_t b = h & (nb - 1);
            for (; buckets[b]; b = (b + 1) & (nb - 1)) {
                size_t o = buckets[b] - 1;
                if (hash[o] == h && fp_equal(f, order[o], p)) {
                    f->rep[k] = o;
                    break;
                }
            }
            if (f->rep[k] == k) {
                hash[k] = h;
                buckets[b] = k + 1;
            }
        }
        const mk_prim *r = order[f->rep[k]];
        for (int j = 0; j < p->noutputs; j++)
            if (p->outputs[j] && cm_put(&f->canon, p->outputs[j], r->outputs[j] ? r->outputs[j] : p->outputs[j]) < 0)
                goto done;
        if (f->rep[k] != k) f->role[k] = FR_ALIAS;
    }
    rc = 0;
done:
    free(hash);
    free(buckets);
    return rc;
}

/* everything that reads node k is in group g (broadcast readers: theirs too) */
static bool fp_all_in(const fplan *f, size_t k, int g) {
    if (f->isout[k]) return false;
    for (size_t r = f->cstart[k]; r < f->cstart[k + 1]; r++) {
        size_t c = f->creader[r];
        if (f->stamp[c] != g) return false;
        if (f->kind[c] == FK_BCAST && !fp_all_in(f, c, g)) return false;
    }
    return true;
}

static void fp_visit(fplan *f, mk_prim *const *order, size_t k, int depth, int g, int *count) {
    if (f->stamp[k] == g) return;
    if (depth > 0) {
        if (depth >= MK_FUSED_MAX_DEPTH || f->kind[k] == FK_NONE || f->isout[k]) return;
        if (f->kind[k] != FK_BCAST && (f->role[k] != FR_NORMAL || !fp_all_in(f, k, g))) return;
    }
    f->stamp[k] = g;
    (*count)++;
    const mk_prim *p = order[k];
    for (int i = 0; i < p->ninputs; i++) {
        long j = fp_index(f, p->inputs[i]);
        if (j >= 0) fp_visit(f, order, (size_t)j, depth + 1, g, count);
    }
}

/* The tape of group g in post-order from node k (MLX's order). Returns the
 * operand index of k's value, or -1 when the group is too large. */
static int fp_emit(fplan *f, mk_prim *const *order, size_t k, int g, fgroup *gr, int *slot) {
    if (f->emitted[k] == g) return slot[k];
    const mk_prim *p = order[k];
    int ops[3] = {0, 0, 0};
    for (int i = 0; i < p->ninputs && i < 3; i++) {
        mk_array *x = p->inputs[i];
        long j = fp_index(f, x);
        if (j >= 0 && f->stamp[j] == g) {
            if ((ops[i] = fp_emit(f, order, (size_t)j, g, gr, slot)) < 0) return -1;
        } else {
            const void *cx = fp_cid(f, x);
            int e = 0;
            if (!cx) return -1;
            while (e < gr->nin && fp_cid(f, gr->ext[e]) != cx) e++;
            if (e == gr->nin) {
                if (gr->nin == MK_FUSED_MAX_IN) return -1;
                gr->ext[gr->nin++] = x;
            }
            ops[i] = -1 - e; /* external e, renumbered once nin is known */
        }
    }
    if (gr->tape.nsteps == MK_FUSED_MAX_STEPS) return -1;
    int s = gr->tape.nsteps++;
    mk_fused_step *q = &gr->tape.steps[s];
    q->kind = (uint8_t)(f->kind[k] == FK_UNARY    ? MK_FSTEP_UNARY
                        : f->kind[k] == FK_BINARY ? MK_FSTEP_BINARY
                        : f->kind[k] == FK_ASTYPE ? MK_FSTEP_ASTYPE
                        : f->kind[k] == FK_SELECT ? MK_FSTEP_SELECT
                                                  : MK_FSTEP_BCAST);
    q->op = f->code[k];
    q->tin = (uint8_t)p->inputs[0]->dtype;
    q->tout = (uint8_t)p->outdesc[0].dtype;
    q->a = (int16_t)ops[0];
    q->b = (int16_t)(p->ninputs > 1 ? ops[1] : 0);
    q->c = (int16_t)(p->ninputs > 2 ? ops[2] : 0);
    f->emitted[k] = g;
    return slot[k] = MK_FUSED_MAX_IN + s; /* steps, renumbered as well */
}

static void fp_free(fplan *f) {
    free(f->pos.s);
    free(f->canon.s);
    free(f->scalars.s);
    free(f->rep);
    free(f->kind);
    free(f->code);
    free(f->isout);
    free(f->cstart);
    free(f->creader);
    free(f->stamp);
    free(f->emitted);
    free(f->role);
    free(f->gid);
    free(f->groups);
    memset(f, 0, sizeof *f);
}

static int fp_build(fplan *f, mk_prim *const *order, size_t n, int nout, mk_array *const *outs, int nin,
                    mk_array *const *ins, mk_array *const *news) {
    memset(f, 0, sizeof *f);
    f->n = n;
    size_t m = n ? n : 1, nedges = 0;
    f->kind = calloc(m, sizeof *f->kind);
    f->code = calloc(m, sizeof *f->code);
    f->isout = calloc(m, sizeof *f->isout);
    f->cstart = calloc(m + 1, sizeof *f->cstart);
    f->stamp = malloc(m * sizeof *f->stamp);
    f->emitted = malloc(m * sizeof *f->emitted);
    f->role = calloc(m, sizeof *f->role);
    f->gid = calloc(m, sizeof *f->gid);
    f->rep = malloc(m * sizeof *f->rep);
    int *slot = malloc(m * sizeof *slot);
    if (!f->rep || !f->kind || !f->code || !f->isout || !f->cstart || !f->stamp || !f->emitted || !f->role || !f->gid || !slot)
        goto nomem;
    for (size_t k = 0; k < n; k++) {
        f->stamp[k] = f->emitted[k] = -1;
        if (cm_put(&f->pos, order[k], (void *)(uintptr_t)(k + 1)) < 0) goto fail;
        f->kind[k] = fuse_kind(order[k], &f->code[k]);
    }
    if (fp_merges(f, order, n, nin, ins, news) < 0) goto fail;
    for (int i = 0; i < nout; i++) {
        long j = fp_index(f, outs[i]);
        if (j >= 0) f->isout[j] = true;
    }
    /* readers, as counts then lists */
    for (size_t k = 0; k < n; k++)
        for (int i = 0; f->rep[k] == k && i < order[k]->ninputs; i++) {
            long j = fp_index(f, order[k]->inputs[i]);
            if (j >= 0) f->cstart[j + 1]++, nedges++;
        }
    for (size_t k = 0; k < n; k++) f->cstart[k + 1] += f->cstart[k];
    size_t *fill = calloc(m, sizeof *fill);
    f->creader = malloc((nedges ? nedges : 1) * sizeof *f->creader);
    if (!fill || !f->creader) {
        free(fill);
        goto nomem;
    }
    for (size_t k = 0; k < n; k++)
        for (int i = 0; f->rep[k] == k && i < order[k]->ninputs; i++) {
            long j = fp_index(f, order[k]->inputs[i]);
            if (j >= 0) f->creader[f->cstart[j] + fill[j]++] = k;
        }
    free(fill);
    int g = 0, cap = 0;
    for (size_t kk = n; kk-- > 0; g++) {
        int kd = f->kind[kk];
        if (kd == FK_NONE || kd == FK_BCAST || f->role[kk] != FR_NORMAL) continue;
        int count = 0;
        fp_visit(f, order, kk, 0, g, &count);
        if (count <= 1) continue;
        if (f->ngroups == cap) {
            fgroup *ng = realloc(f->groups, (size_t)(cap = cap ? 2 * cap : 4) * sizeof *ng);
            if (!ng) goto nomem;
            f->groups = ng;
        }
        fgroup *gr = &f->groups[f->ngroups];
        memset(gr, 0, sizeof *gr);
        if (fp_emit(f, order, kk, g, gr, slot) < 0) continue; /* too large: left unfused */
        /* operands: external e -> e, step s -> nin + s */
        gr->tape.nin = gr->nin;
        for (int s = 0; s < gr->tape.nsteps; s++) {
            mk_fused_step *q = &gr->tape.steps[s];
            int16_t *v[3] = {&q->a, &q->b, &q->c};
            int nops = q->kind == MK_FSTEP_SELECT ? 3 : q->kind == MK_FSTEP_BINARY ? 2 : 1;
            for (int i = 0; i < nops; i++)
                *v[i] = (int16_t)(*v[i] < 0 ? -1 - *v[i] : gr->nin + *v[i] - MK_FUSED_MAX_IN);
        }
        /* roles: the root, the nodes only the group reads */
        for (size_t j = 0; j < n; j++)
            if (f->stamp[j] == g && j != kk && (f->kind[j] != FK_BCAST || fp_all_in(f, j, g))) f->role[j] = FR_SKIP;
        f->role[kk] = FR_ROOT;
        f->gid[kk] = f->ngroups++;
    }
    free(slot);
    return 0;
nomem:
    mk_nomem();
fail:
    free(slot);
    fp_free(f);
    return -1;
}

/* The fused node of root p (group gr) on the replayed inputs. */
static mk_array *fp_make(const fgroup *gr, const mk_prim *p, cmap *map) {
    mk_array *in[MK_FUSED_MAX_IN];
    for (int e = 0; e < gr->nin; e++) {
        cm_slot *s = cm_find(map, gr->ext[e]);
        in[e] = s ? s->val : gr->ext[e];
    }
    const mk_outdesc *od = &p->outdesc[0];
    return mk_fused(&gr->tape, gr->nin, in, od->dtype, od->ndim, od->shape);
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
    fplan plan = {0};
    bool fuse = fuse_enabled() && !mk_tracing();
    for (int i = 0; fuse && i < nin; i++) fuse = same_desc(news[i], ins[i]);
    if (mk_graph_topo(nout, outs, nin, ins, &order, &n) < 0) return -1;
    if (fuse && fp_build(&plan, order, n, nout, outs, nin, ins, news) < 0) {
        free(order);
        return -1;
    }
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
        if (plan.role && plan.role[k] == FR_SKIP) continue;
        if (plan.role && plan.role[k] == FR_ALIAS) {
            /* merged: the outputs of the node it merges into (none when
             * that one is inside a group, which then reads it too) */
            const mk_prim *r = order[plan.rep[k]];
            bool inside = plan.role[plan.rep[k]] == FR_SKIP, all = true;
            for (int j = 0; !inside && j < no; j++)
                all &= !p->outputs[j] || (r->outputs[j] && cm_find(&map, r->outputs[j]));
            for (int j = 0; all && !inside && j < no; j++) {
                if (!p->outputs[j] || cm_find(&map, p->outputs[j])) continue;
                mk_array *v = cm_find(&map, r->outputs[j])->val;
                mk_incref(v);
                if (cm_put(&map, p->outputs[j], v) < 0) {
                    mk_decref(v);
                    goto done;
                }
            }
            if (all) continue;
        }
        if (plan.role && plan.role[k] == FR_ROOT) {
            mk_array *o = p->outputs[0];
            if (!o) continue;
            mk_array *fo = fp_make(&plan.groups[plan.gid[k]], p, &map);
            if (!fo) goto done;
            cm_slot *s = cm_find(&map, o);
            if (s) {
                mk_decref(s->val);
                s->val = fo;
            } else if (cm_put(&map, o, fo) < 0) {
                mk_decref(fo);
                goto done;
            }
            continue;
        }
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
    fp_free(&plan);
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
