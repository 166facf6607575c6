/* The fused element-wise primitive of mx.compile (MLX's Compiled).
 *
 * Evaluation: every external input is seen with its strides broadcast to the
 * output's shape; dimensions that are contiguous in every operand merge (as
 * mk_iter does), and the output is walked in row segments split over the
 * thread pool. Each segment goes through the tape in chunks of FUSE_CHUNK
 * elements: every step runs the unfused op's own kernel on the chunk
 * (external operands are read in place with their strides, intermediate
 * results live in per-range scratch, the last step writes the output), so
 * the results are those of the unfused graph, bit for bit. The output may be
 * a donated input's buffer: a chunk's inputs are read before its output is
 * written. */
#include "ops_fused.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "compile.h"
#include "iter.h"
#include "pool.h"

#define FUSE_CHUNK 256
#define FUSE_NARR (MK_FUSED_MAX_IN + 1)

typedef struct {
    const mk_fused_tape *t;
    int nd, narr;
    int64_t shape[MK_MAX_NDIM];
    int64_t strides[FUSE_NARR][MK_MAX_NDIM];
    char *base[FUSE_NARR];
    size_t esz[FUSE_NARR];
    atomic_int nomem; /* a range could not get its scratch */
} fuse_ctx;

#define FUSE_STACK_SCRATCH (4 * FUSE_CHUNK * 16)

/* Runs the tape over one row segment: element offsets off[], strides st[]. */
static void fuse_row(const fuse_ctx *c, char *scratch, const int64_t *off, const int64_t *st, int64_t n) {
    const mk_fused_tape *t = c->t;
    const void *sp[MK_FUSED_MAX_STEPS];
    int64_t ss[MK_FUSED_MAX_STEPS];
    for (int64_t k = 0; k < n; k += FUSE_CHUNK) {
        int64_t m = n - k < FUSE_CHUNK ? n - k : FUSE_CHUNK;
        for (int s = 0; s < t->nsteps; s++) {
            const mk_fused_step *q = &t->steps[s];
            const void *pa, *pb = NULL;
            int64_t sa, sb = 0;
#define OPERAND(v, p, str)                                                                             \
    if ((v) < t->nin) {                                                                                \
        int i_ = (v) + 1;                                                                              \
        p = c->base[i_] + (off[i_] + k * st[i_]) * (int64_t)c->esz[i_];                                \
        str = st[i_];                                                                                  \
    } else {                                                                                           \
        p = sp[(v) - t->nin];                                                                          \
        str = ss[(v) - t->nin];                                                                        \
    }
            const void *pc = NULL;
            int64_t sc = 0;
            OPERAND(q->a, pa, sa)
            if (q->kind == MK_FSTEP_BINARY || q->kind == MK_FSTEP_SELECT) {
                OPERAND(q->b, pb, sb)
            }
            if (q->kind == MK_FSTEP_SELECT) {
                OPERAND(q->c, pc, sc)
            }
#undef OPERAND
            if (q->kind == MK_FSTEP_BCAST) {
                sp[s] = pa;
                ss[s] = sa;
                continue;
            }
            void *o = s == t->nsteps - 1 ? c->base[0] + (off[0] + k) * (int64_t)c->esz[0]
                                         : scratch + (size_t)s * FUSE_CHUNK * 16;
            switch (q->kind) {
            case MK_FSTEP_UNARY: mk_unary_row(q->op, q->tin, q->tout, pa, sa, o, m); break;
            case MK_FSTEP_ASTYPE: mk_astype_row(q->tin, q->tout, pa, sa, o, m); break;
            case MK_FSTEP_SELECT: mk_where_row(mk_dtype_size(q->tout), pa, sa, pb, sb, pc, sc, o, m); break;
            default: mk_binary_row(q->op, q->tin, q->tout, pa, sa, pb, sb, o, m); break;
            }
            sp[s] = o;
            ss[s] = 1;
        }
    }
}

static void fuse_range(void *v, int64_t begin, int64_t end) {
    fuse_ctx *c = v;
    if (begin >= end) return;
    size_t need = (size_t)c->t->nsteps * FUSE_CHUNK * 16;
    _Alignas(16) char local[FUSE_STACK_SCRATCH];
    char *scratch = need <= sizeof local ? local : malloc(need);
    if (!scratch) {
        atomic_store(&c->nomem, 1);
        return;
    }
    const int nd = c->nd, na = c->narr;
    const int64_t inner = c->shape[nd - 1];
    int64_t idx[MK_MAX_NDIM], off[FUSE_NARR] = {0}, ist[FUSE_NARR];
    for (int a = 0; a < na; a++) ist[a] = c->strides[a][nd - 1];
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rem % c->shape[d];
        rem /= c->shape[d];
        for (int a = 0; a < na; a++) off[a] += idx[d] * c->strides[a][d];
    }
    for (int64_t pos = begin; pos < end;) {
        int64_t n = inner - idx[nd - 1];
        if (n > end - pos) n = end - pos;
        fuse_row(c, scratch, off, ist, n);
        pos += n;
        if (pos >= end) break;
        for (int a = 0; a < na; a++) off[a] += (inner - idx[nd - 1]) * ist[a];
        idx[nd - 1] = inner;
        for (int d = nd - 1; d > 0 && idx[d] == c->shape[d]; d--) {
            for (int a = 0; a < na; a++) off[a] -= c->shape[d] * c->strides[a][d];
            idx[d] = 0;
            idx[d - 1]++;
            for (int a = 0; a < na; a++) off[a] += c->strides[a][d - 1];
        }
    }
    if (scratch != local) free(scratch);
}

static int fused_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_fused_tape *t = p->params;
    mk_array *o = out[0];
    /* the output may take an input's buffer (as MLX's Compiled): each chunk's
     * last step writes the output after every step read the chunk's inputs */
    bool donated = false;
    for (int i = 0; i < t->nin && !donated; i++) donated = mk_donate(p, o, in[i]);
    if (!donated && mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    fuse_ctx cx, *c = &cx;
    atomic_init(&c->nomem, 0);
    c->t = t;
    c->narr = t->nin + 1;
    int64_t st[FUSE_NARR][MK_MAX_NDIM];
    memcpy(st[0], o->strides, sizeof st[0]);
    c->base[0] = mk_data(o);
    c->esz[0] = mk_dtype_size(o->dtype);
    for (int i = 0; i < t->nin; i++) {
        mk_broadcast_strides(in[i], o->ndim, o->shape, st[i + 1]);
        c->base[i + 1] = mk_data(in[i]);
        c->esz[i + 1] = mk_dtype_size(in[i]->dtype);
    }
    /* drop size-1 dims, merge neighbours contiguous in every operand */
    int nd = 0;
    for (int d = 0; d < o->ndim; d++) {
        if (o->shape[d] == 1) continue;
        if (nd > 0) {
            bool ok = true;
            for (int a = 0; a < c->narr; a++) ok &= st[a][d] * o->shape[d] == c->strides[a][nd - 1];
            if (ok) {
                c->shape[nd - 1] *= o->shape[d];
                for (int a = 0; a < c->narr; a++) c->strides[a][nd - 1] = st[a][d];
                continue;
            }
        }
        c->shape[nd] = o->shape[d];
        for (int a = 0; a < c->narr; a++) c->strides[a][nd] = st[a][d];
        nd++;
    }
    if (nd == 0) {
        c->shape[0] = 1;
        for (int a = 0; a < c->narr; a++) c->strides[a][0] = 0;
        nd = 1;
    }
    c->nd = nd;
    mk_parallel_for(o->size, MK_GRAIN, fuse_range, c);
    if (atomic_load(&c->nomem)) {
        mk_nomem();
        return -1;
    }
    return 0;
}

static void fused_name(const mk_prim *p, char *buf, size_t n) {
    const mk_fused_tape *t = p->params;
    size_t k = (size_t)snprintf(buf, n, "Compiled");
    for (int s = 0; s < t->nsteps && k < n; s++) {
        const mk_fused_step *q = &t->steps[s];
        char nm[64];
        switch (q->kind) {
        case MK_FSTEP_UNARY: mk_camel_name(mk_unary_names[q->op], nm, sizeof nm); break;
        case MK_FSTEP_BINARY: mk_camel_name(mk_binary_names[q->op], nm, sizeof nm); break;
        case MK_FSTEP_ASTYPE: snprintf(nm, sizeof nm, "AsType"); break;
        case MK_FSTEP_SELECT: snprintf(nm, sizeof nm, "Select"); break;
        default: snprintf(nm, sizeof nm, "Broadcast"); break;
        }
        k += (size_t)snprintf(buf + k, n - k, "%s", nm);
    }
}

/* No transformation rules: compile fuses only outside transformations, so a
 * fused node is never differentiated or batched (its vjp, jvp and vmap raise,
 * as MLX's Compiled's). */
static const mk_opdef fused_def = {"compiled", fused_eval, NULL, NULL, NULL, NULL, false,
                                   true, sizeof(mk_fused_tape), NULL, fused_name, .cheap = true};

mk_array *mk_fused(const mk_fused_tape *t, int nin, mk_array *const *in, mk_dtype dtype, int ndim,
                   const int64_t *shape) {
    if (nin != t->nin || nin > MK_FUSED_MAX_IN || t->nsteps < 1 || t->nsteps > MK_FUSED_MAX_STEPS) {
        mk_error_set(MK_ERR_VALUE, "[compile] Invalid fused tape.");
        return NULL;
    }
    mk_fused_tape *c = malloc(sizeof *c);
    if (!c) return mk_nomem();
    memcpy(c, t, sizeof *c);
    return mk_node(&fused_def, c, dtype, ndim, shape, nin, in);
}
