/* Gathers and scatters: advanced indexing, take, take_along_axis,
 * put_along_axis, x[idx] = v, x.at[idx].add(v) and x[mask] = v.
 *
 * One plan describes both directions (ops.h, mk_index_dim): each dim of x is
 * sliced, fixed at an int, or indexed by an integer array; the arrays
 * broadcast to B. Output (or update) row r is one combination of the sliced
 * dims before B ("pre") and of B; each row moves a strided block made of the
 * sliced dims after B ("post"). A walker turns a row number into the row's
 * offset in x, in the other array and in each index array.
 *
 * Out-of-range array indices: MLX reads and writes out of bounds. Here a
 * negative index wraps once (as MLX), then gathers clamp to the axis and
 * scatters drop the update, as JAX's defaults, so nothing can crash (the
 * MLX docs' grid_sample gathers at -1 and W and masks those taps afterwards).
 *
 * Scatters run in parallel without atomics. Two rows write the same elements
 * exactly when their target offsets (the row's first element) are equal, so
 * either each thread takes the rows whose target offset falls in its share of
 * the output (rows applied in order, so repeated indices accumulate, and the
 * last assignment wins), or, with few rows and long blocks, each thread takes
 * a share of every block. */
#include <stdlib.h>
#include <string.h>

#include "iter.h"
#include "ops.h"
#include "stream.h"
#include "transforms.h"
#include "pool.h"
#include "simd.h"
#include "types.h"

/* ------------------------------------------------------------ helpers */

static inline int64_t load_index(mk_dtype t, const char *p) {
    switch (t) {
    case MK_UINT8: return *(const uint8_t *)p;
    case MK_UINT16: return *(const uint16_t *)p;
    case MK_UINT32: return *(const uint32_t *)p;
    case MK_UINT64: {
        uint64_t v = *(const uint64_t *)p;
        return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
    }
    case MK_INT8: return *(const int8_t *)p;
    case MK_INT16: return *(const int16_t *)p;
    case MK_INT32: return *(const int32_t *)p;
    case MK_INT64: return *(const int64_t *)p;
    default: return 0;
    }
}

/* wraps a negative index once; -1 when still out of range */
static inline int64_t norm_index(int64_t v, int64_t n) {
    if (v < 0) v += n;
    return v < 0 || v >= n ? -1 : v;
}
static inline int64_t clamp_index(int64_t v, int64_t n) {
    if (v < 0) v += n;
    return v < 0 ? 0 : v >= n ? n - 1 : v;
}


static int check_index_dtype(const char *op, const char *bool_msg, mk_array *idx) {
    if (idx->dtype == MK_BOOL) {
        mk_error_set(MK_ERR_VALUE, "%s", bool_msg);
        return -1;
    }
    if (!mk_is_integral(idx->dtype)) {
        mk_error_set(MK_ERR_VALUE, "[%s] Got indices with invalid dtype. Indices must be integral.", op);
        return -1;
    }
    return 0;
}

/* The output gets its input's buffer when nothing else can see it (the
 * primitive holds the only reference, the buffer is mkpy's own, dense and
 * not shared): x[i] = v in a loop then costs O(update), not O(x), as MLX's
 * buffer donation. Otherwise a dense copy. */
static int init_from(mk_prim *p, mk_array *out, mk_array *x) {
    if (x->ndim == out->ndim && out->dtype == x->dtype && mk_donate(p, out, x)) return 0;
    if (mk_alloc_out(out) < 0) return -1;
    mk_copy_into(x, mk_data(out), out->strides);
    return 0;
}

/* ------------------------------------------------------------ the plan */

typedef struct {
    int xnd, narr, nB, bpos, op;
    int slice_update; /* a scatter standing for MLX's (Dynamic)SliceUpdate (mk_scatter_slice) */
    mk_index_dim dims[MK_MAX_NDIM];
    int64_t B[MK_MAX_NDIM];
} gs_params;

/* Validates a plan and fills params and the gather shape. Returns its ndim. */
static int make_plan(const char *op, mk_array *x, const mk_index_dim *dims, int narr, mk_array *const *idx, int bpos,
                     gs_params *p, int64_t *shape) {
    const char *bool_msg =
        op[0] == 'g' ? "[Gather] Boolean indices not supported." : "[scatter] Boolean indices not supported.";
    memset(p, 0, sizeof *p);
    p->xnd = x->ndim;
    p->narr = narr;
    p->bpos = bpos;
    if (narr > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[%s] Too many index arrays.", op);
        return -1;
    }
    for (int k = 0; k < narr; k++)
        if (check_index_dtype(op, bool_msg, idx[k]) < 0) return -1;
    int nB = 0;
    for (int k = 0; k < narr; k++) {
        int64_t t[MK_MAX_NDIM];
        nB = mk_broadcast_shapes(nB, p->B, idx[k]->ndim, idx[k]->shape, t);
        if (nB < 0) return -1;
        memcpy(p->B, t, nB * sizeof *t);
    }
    p->nB = nB;
    int64_t rest[MK_MAX_NDIM];
    int nrest = 0;
    for (int d = 0; d < x->ndim; d++) {
        p->dims[d] = dims[d];
        if (dims[d].kind == MK_IDX_SLICE) rest[nrest++] = dims[d].len;
    }
    if (bpos < 0 || bpos > nrest) {
        mk_error_set(MK_ERR_VALUE, "[%s] Invalid position for the indexed dims.", op);
        return -1;
    }
    int nd = nrest + nB;
    if (nd > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[%s] Arrays of more than %d dimensions are not supported.", op, MK_MAX_NDIM);
        return -1;
    }
    int g = 0;
    for (int r = 0; r < bpos; r++) shape[g++] = rest[r];
    for (int j = 0; j < nB; j++) shape[g++] = p->B[j];
    for (int r = bpos; r < nrest; r++) shape[g++] = rest[r];
    return nd;
}

int mk_gather_shape(mk_array *x, const mk_index_dim *dims, int narr, mk_array *const *idx, int bpos, const char *op,
                    int64_t *shape) {
    gs_params p;
    return make_plan(op, x, dims, narr, idx, bpos, &p, shape);
}

/* ------------------------------------------------------------ the walker */

typedef struct {
    int nout; /* outer dims: pre sliced dims, then B */
    int64_t shape[MK_MAX_NDIM];
    int64_t ts[MK_MAX_NDIM];               /* stride in the target (x or the scatter's output) */
    int64_t os[MK_MAX_NDIM];               /* stride in the other array (output or updates) */
    int64_t is[MK_MAX_NDIM][MK_MAX_NDIM];  /* [array][dim] */
    int64_t total;
    int narr;
    const char *idata[MK_MAX_NDIM];
    mk_dtype itype[MK_MAX_NDIM];
    size_t isz[MK_MAX_NDIM];
    int64_t alen[MK_MAX_NDIM], astride[MK_MAX_NDIM]; /* per array: axis length, target stride */
    int64_t tconst;
    mk_iter post; /* arrays: target, other */
} walker;

typedef struct {
    int64_t c[MK_MAX_NDIM];
    int64_t t, o;
    int64_t i[MK_MAX_NDIM];
} wpos;

static void walker_init(walker *w, const gs_params *p, const mk_array *tgt, const int64_t *ostrides,
                        mk_array *const *idx) {
    int rest[MK_MAX_NDIM], nrest = 0;
    memset(w, 0, sizeof *w);
    w->narr = p->narr;
    for (int d = 0; d < p->xnd; d++) {
        const mk_index_dim *m = &p->dims[d];
        if (m->kind == MK_IDX_SLICE) {
            rest[nrest++] = d;
            w->tconst += m->start * tgt->strides[d];
        } else if (m->kind == MK_IDX_INT) {
            w->tconst += m->start * tgt->strides[d];
        } else {
            w->alen[m->arr] = tgt->shape[d];
            w->astride[m->arr] = tgt->strides[d];
        }
    }
    int n = 0;
    for (int r = 0; r < p->bpos; r++, n++) {
        int d = rest[r];
        w->shape[n] = p->dims[d].len;
        w->ts[n] = p->dims[d].step * tgt->strides[d];
        w->os[n] = ostrides[n];
    }
    for (int k = 0; k < p->narr; k++) {
        int64_t s[MK_MAX_NDIM];
        mk_broadcast_strides(idx[k], p->nB, p->B, s);
        for (int j = 0; j < p->nB; j++) w->is[k][p->bpos + j] = s[j];
        w->idata[k] = mk_data(idx[k]);
        w->itype[k] = idx[k]->dtype;
        w->isz[k] = mk_dtype_size(idx[k]->dtype);
    }
    for (int j = 0; j < p->nB; j++, n++) {
        w->shape[n] = p->B[j];
        w->os[n] = ostrides[n];
    }
    w->nout = n;
    w->total = 1;
    for (int d = 0; d < n; d++) w->total *= w->shape[d];
    int64_t pshape[MK_MAX_NDIM], pts[MK_MAX_NDIM], pos_[MK_MAX_NDIM];
    int np = 0;
    for (int r = p->bpos; r < nrest; r++, np++) {
        int d = rest[r];
        pshape[np] = p->dims[d].len;
        pts[np] = p->dims[d].step * tgt->strides[d];
        pos_[np] = ostrides[n + np];
    }
    const int64_t *strides[2] = {pts, pos_};
    mk_iter_init(&w->post, np, pshape, 2, strides);
}

static void w_seek(const walker *w, int64_t o, wpos *s) {
    memset(s, 0, sizeof *s);
    for (int d = w->nout - 1; d >= 0; d--) {
        int64_t c = o % w->shape[d];
        o /= w->shape[d];
        s->c[d] = c;
        s->t += c * w->ts[d];
        s->o += c * w->os[d];
        for (int k = 0; k < w->narr; k++) s->i[k] += c * w->is[k][d];
    }
}

static void w_next(const walker *w, wpos *s) {
    for (int d = w->nout - 1; d >= 0; d--) {
        s->c[d]++;
        s->t += w->ts[d];
        s->o += w->os[d];
        for (int k = 0; k < w->narr; k++) s->i[k] += w->is[k][d];
        if (s->c[d] < w->shape[d]) return;
        s->t -= s->c[d] * w->ts[d];
        s->o -= s->c[d] * w->os[d];
        for (int k = 0; k < w->narr; k++) s->i[k] -= s->c[d] * w->is[k][d];
        s->c[d] = 0;
    }
}

/* Rows per batch of targets computed at once. */
#define BATCH 256

/* Moves s forward by n rows, n at most what is left of the innermost dim. */
static void w_advance(const walker *w, wpos *s, int64_t n) {
    int L = w->nout - 1;
    if (L < 0 || n == 0) return;
    s->c[L] += n - 1;
    s->t += (n - 1) * w->ts[L];
    s->o += (n - 1) * w->os[L];
    for (int k = 0; k < w->narr; k++) s->i[k] += (n - 1) * w->is[k][L];
    w_next(w, s);
}

/* t[i] = t0 + i * ts for i < n */
MK_SIMD_CLONES(static void, fill_affine, (int64_t *restrict t, int64_t t0, int64_t ts, int64_t n), (t, t0, ts, n), {
    for (int64_t i = 0; i < n; i++) t[i] = t0 + i * ts;
})

/* The targets of n rows of one run for one index array q (stride st, normalised against len,
 * times the target stride as), added to a base: t0 + i * ts for the first array (first), t[i]
 * for the others. Clamped into range for a gather; for a scatter a dropped row (an index out
 * of range, or t[i] already -1) gets -1. One loop per index type, with the dense unit-stride
 * case apart, so that they vectorise (the AVX2 clone). */
#define FILL_LOOP(Q, BASE, ADD)                                                                        \
    for (int64_t i = 0; i < n; i++) {                                                                  \
        int64_t v = Q;                                                                                 \
        if (clamp) {                                                                                   \
            t[i] = BASE + clamp_index(v, len) * as;                                                    \
        } else {                                                                                       \
            v = norm_index(v, len);                                                                    \
            t[i] = (!first && t[i] < 0) || v < 0 ? -1 : BASE + ADD;                                    \
        }                                                                                              \
    }
#define FILL_RUN(T, CONV)                                                                              \
    {                                                                                                  \
        const T *restrict q = (const T *)p;                                                            \
        if (first && st == 1 && ts == 0 && as == 1 && !clamp)                                          \
            FILL_LOOP(CONV(q[i]), t0, v)                                                               \
        else if (first)                                                                                \
            FILL_LOOP(CONV(q[i * st]), (t0 + i * ts), v * as)                                          \
        else                                                                                           \
            FILL_LOOP(CONV(q[i * st]), t[i], v * as)                                                   \
        return;                                                                                        \
    }
#define PLAIN(v) ((int64_t)(v))
#define U64(v) ((v) > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)(v))
MK_SIMD_CLONES(static void, fill_index,
               (int64_t *restrict t, const char *p, mk_dtype type, int64_t st, int64_t n, int64_t len, int64_t as,
                bool clamp, bool first, int64_t t0, int64_t ts),
               (t, p, type, st, n, len, as, clamp, first, t0, ts), {
                   switch (type) {
                   case MK_UINT8: FILL_RUN(uint8_t, PLAIN)
                   case MK_UINT16: FILL_RUN(uint16_t, PLAIN)
                   case MK_UINT32: FILL_RUN(uint32_t, PLAIN)
                   case MK_UINT64: FILL_RUN(uint64_t, U64)
                   case MK_INT8: FILL_RUN(int8_t, PLAIN)
                   case MK_INT16: FILL_RUN(int16_t, PLAIN)
                   case MK_INT32: FILL_RUN(int32_t, PLAIN)
                   case MK_INT64: FILL_RUN(int64_t, PLAIN)
                   default: return;
                   }
               })
#undef FILL_LOOP
#undef FILL_RUN
#undef PLAIN
#undef U64

/* Whether the update offset of row r is r * w_ustride(w) (one loop dimension or none): the
 * rows of one element then pass their updates as a stride, not a list (oth NULL). */
static bool w_affine(const walker *w) { return w->nout <= 1; }
static int64_t w_ustride(const walker *w) { return w->nout == 1 ? w->os[0] : 0; }

/* The targets (as w_target) and other offsets (unless oth is NULL) of the n rows from s on,
 * one run of the innermost dim at a time; s moves past them. */
static void w_fill(const walker *w, wpos *s, int64_t n, bool clamp, int64_t *tgt, int64_t *oth) {
    int L = w->nout - 1;
    int64_t done = 0;
    while (done < n) {
        int64_t run = L < 0 ? 1 : w->shape[L] - s->c[L];
        if (run > n - done) run = n - done;
        int64_t *t = tgt + done, t0 = w->tconst + s->t, ts = L < 0 ? 0 : w->ts[L];
        if (oth) fill_affine(oth + done, s->o, L < 0 ? 0 : w->os[L], run);
        if (w->narr == 0) fill_affine(t, t0, ts, run);
        for (int k = 0; k < w->narr; k++)
            fill_index(t, w->idata[k] + s->i[k] * (int64_t)w->isz[k], w->itype[k], L < 0 ? 0 : w->is[k][L], run,
                       w->alen[k], w->astride[k], clamp, k == 0, t0, ts);
        w_advance(w, s, run);
        done += run;
    }
}

/* dst[od[i]] = src[sd[i]] for i < n, elements of sz bytes */
static void copy_indexed(char *dst, const int64_t *od, const char *src, const int64_t *sd, int64_t n, size_t sz) {
#define LOOP(T)                                                                                        \
    {                                                                                                  \
        T *d = (T *)dst;                                                                               \
        const T *s = (const T *)src;                                                                   \
        for (int64_t i = 0; i < n; i++) d[od[i]] = s[sd[i]];                                           \
        return;                                                                                        \
    }
    switch (sz) {
    case 1: LOOP(uint8_t)
    case 2: LOOP(uint16_t)
    case 4: LOOP(uint32_t)
    case 8: LOOP(uint64_t)
    default: break;
    }
#undef LOOP
    for (int64_t i = 0; i < n; i++) memcpy(dst + od[i] * (int64_t)sz, src + sd[i] * (int64_t)sz, sz);
}

/* ------------------------------------------------------------ gather */

typedef struct {
    const walker *w;
    const char *x;
    char *out;
    size_t sz;
    /* per row, for the post iterator */
    const char *src;
    char *dst;
} gather_ctx;

static void gather_post_rows(void *v, const int64_t *off, const int64_t *st, int64_t n) {
    gather_ctx *c = v;
    mk_copy_elems(c->dst + off[1] * (int64_t)c->sz, st[1], c->src + off[0] * (int64_t)c->sz, st[0], n, c->sz);
}

static void gather_range(void *v, int64_t b, int64_t e) {
    gather_ctx c = *(gather_ctx *)v;
    const walker *w = c.w;
    const mk_iter *post = &w->post;
    int64_t sz = (int64_t)c.sz, tgt[BATCH], oth[BATCH];
    bool single = post->total == 1;
    wpos s;
    w_seek(w, b, &s);
    for (int64_t r = b; r < e; r += BATCH) {
        int64_t n = e - r < BATCH ? e - r : BATCH;
        w_fill(w, &s, n, true, tgt, oth);
        if (single) {
            copy_indexed(c.out, oth, c.x, tgt, n, c.sz);
            continue;
        }
        for (int64_t i = 0; i < n; i++) {
            const char *src = c.x + tgt[i] * sz;
            char *dst = c.out + oth[i] * sz;
            if (post->ndim == 1) {
                mk_copy_elems(dst, post->strides[1][0], src, post->strides[0][0], post->shape[0], c.sz);
            } else {
                c.src = src;
                c.dst = dst;
                mk_iter_range(post, 0, post->total, gather_post_rows, &c);
            }
        }
    }
}

static int gather_eval(mk_prim *pr, mk_array *const *in, mk_array *const *out) {
    const gs_params *p = pr->params;
    mk_array *o = out[0], *x = in[0];
    if (mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    walker *w = malloc(sizeof *w);
    if (!w) {
        mk_nomem();
        return -1;
    }
    walker_init(w, p, x, o->strides, in + 1);
    gather_ctx c = {w, mk_data(x), mk_data(o), mk_dtype_size(x->dtype), NULL, NULL};
    int64_t npost = w->post.total > 0 ? w->post.total : 1;
    mk_parallel_for(w->total, MK_GRAIN / npost > 0 ? MK_GRAIN / npost : 1, gather_range, &c);
    free(w);
    return 0;
}

static int gather_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int gather_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int gather_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef gather_def = {"gather", gather_eval, NULL, gather_vjp, gather_jvp, gather_vmap, false};

mk_array *mk_gather(mk_array *x, const mk_index_dim *dims, int narr, mk_array *const *idx, int bpos) {
    gs_params *p = malloc(sizeof *p);
    int64_t shape[MK_MAX_NDIM];
    if (!p) return mk_nomem();
    int nd = make_plan("gather", x, dims, narr, idx, bpos, p, shape);
    if (nd < 0) goto error;
    int64_t size = mk_shape_size(nd, shape);
    if (size < 0) goto error;
    for (int d = 0; d < x->ndim && size > 0; d++)
        if (dims[d].kind == MK_IDX_ARRAY && x->shape[d] == 0) {
            mk_error_set(MK_ERR_VALUE, "[gather] If the input is empty, either the indices must be empty or the "
                                       "total slice size must be 0.");
            goto error;
        }
    mk_array *inputs[MK_MAX_NDIM + 1];
    inputs[0] = x;
    for (int k = 0; k < narr; k++) inputs[k + 1] = idx[k];
    return mk_node(&gather_def, p, x->dtype, nd, shape, narr + 1, inputs);
error:
    free(p);
    return NULL;
}

/* ------------------------------------------------------------ scatter */

typedef void (*scatter_fn)(char *d, int64_t ds, const char *u, int64_t us, int64_t n);

#define SK(E, s, S, R, op, EXPR)                                                                       \
    static void sc_##op##_##s(char *d_, int64_t ds, const char *u_, int64_t us, int64_t n) {          \
        typedef S st;                                                                                  \
        st *d = (st *)d_;                                                                              \
        const st *u = (const st *)u_;                                                                  \
        for (int64_t i = 0; i < n; i++) {                                                              \
            R x = MK_LOAD_##s(&d[i * ds]), y = MK_LOAD_##s(&u[i * us]);                                \
            MK_STORE_##s(&d[i * ds], (EXPR));                                                          \
        }                                                                                              \
    }
#define SROW(E, s, S, R, op, unused) [E] = sc_##op##_##s,
/* complex order: real part, then imaginary part (MLX's) */
#define CGT(x, y) (crealf(x) > crealf(y) || (crealf(x) == crealf(y) && cimagf(x) > cimagf(y)))

/* The reductions, one expression per class of types, for a kernel maker K
 * (x: the target's value, y: the update's). max and min are MLX's CPU
 * scatter's: a nan in the target loses, a nan update wins. */
#define SCATTER_OPS(K)                                                                                 \
    MK_FLOAT_TYPES_2(K, sum, x + y) MK_COMPLEX_TYPES_2(K, sum, x + y)                                  \
    MK_UINT_TYPES_2(K, sum, (st)((uint64_t)x + (uint64_t)y))                                           \
    MK_SINT_TYPES_2(K, sum, (st)((uint64_t)x + (uint64_t)y)) MK_BOOL_TYPES_2(K, sum, x || y)           \
    MK_FLOAT_TYPES_2(K, prod, x * y) MK_COMPLEX_TYPES_2(K, prod, x * y)                                \
    MK_UINT_TYPES_2(K, prod, (st)((uint64_t)x * (uint64_t)y))                                          \
    MK_SINT_TYPES_2(K, prod, (st)((uint64_t)x * (uint64_t)y)) MK_BOOL_TYPES_2(K, prod, x && y)         \
    MK_FLOAT_TYPES_2(K, max, x > y ? x : y) MK_UINT_TYPES_2(K, max, x > y ? x : y)                     \
    MK_SINT_TYPES_2(K, max, x > y ? x : y) MK_BOOL_TYPES_2(K, max, x || y)                             \
    MK_COMPLEX_TYPES_2(K, max, CGT(x, y) ? x : y)                                                      \
    MK_FLOAT_TYPES_2(K, min, x < y ? x : y) MK_UINT_TYPES_2(K, min, x < y ? x : y)                     \
    MK_SINT_TYPES_2(K, min, x < y ? x : y) MK_BOOL_TYPES_2(K, min, x && y)                             \
    MK_COMPLEX_TYPES_2(K, min, CGT(y, x) ? x : y)

SCATTER_OPS(SK)

/* one element per row: d[t[i]] op= u[o[i]] (u[i * os] when o is NULL) for the rows whose
 * target lies in [lo, hi), in order */
typedef void (*scatter1_fn)(char *d, const char *u, const int64_t *t, const int64_t *o, int64_t os, int64_t n,
                            int64_t lo, int64_t hi);
#define SC1_LOOP(F, UIDX)                                                                              \
    for (int64_t i = 0; i < n; i++) {                                                                  \
        int64_t k = t[i];                                                                              \
        if (k < lo || k >= hi) continue;                                                               \
        F(d, u, k, UIDX);                                                                              \
    }
#define SC1_BODY(F)                                                                                    \
    if (o)                                                                                             \
        SC1_LOOP(F, o[i])                                                                              \
    else if (os == 1)                                                                                  \
        SC1_LOOP(F, i)                                                                                 \
    else                                                                                               \
        SC1_LOOP(F, i * os)
#define SK1(E, s, S, R, op, EXPR)                                                                      \
    static inline void sc1e_##op##_##s(S *d, const S *u, int64_t k, int64_t j) {                       \
        typedef S st;                                                                                  \
        (void)sizeof(st);                                                                              \
        R x = MK_LOAD_##s(&d[k]), y = MK_LOAD_##s(&u[j]);                                              \
        MK_STORE_##s(&d[k], (EXPR));                                                                   \
    }                                                                                                  \
    static void sc1_##op##_##s(char *d_, const char *u_, const int64_t *t, const int64_t *o, int64_t os, \
                               int64_t n, int64_t lo, int64_t hi) {                                    \
        S *d = (S *)d_;                                                                                \
        const S *u = (const S *)u_;                                                                    \
        SC1_BODY(sc1e_##op##_##s)                                                                      \
    }
#define SROW1(E, s, S, R, op, unused) [E] = sc1_##op##_##s,
SCATTER_OPS(SK1)

/* assignment copies storage as is */
#define SET1(T)                                                                                        \
    static inline void sc1e_set_##T(T *d, const T *u, int64_t k, int64_t j) { d[k] = u[j]; }           \
    static void sc1_set_##T(char *d_, const char *u_, const int64_t *t, const int64_t *o, int64_t os,   \
                            int64_t n, int64_t lo, int64_t hi) {                                       \
        T *d = (T *)d_;                                                                                \
        const T *u = (const T *)u_;                                                                    \
        SC1_BODY(sc1e_set_##T)                                                                         \
    }
SET1(uint8_t)
SET1(uint16_t)
SET1(uint32_t)
SET1(uint64_t)
#undef SET1

static scatter1_fn scatter1_fn_for(int op, mk_dtype t) {
    static const scatter1_fn fns[5][MK_NDTYPES] = {
        [MK_SCATTER_SUM] = {MK_ALL_TYPES_2(SROW1, sum, _)},
        [MK_SCATTER_PROD] = {MK_ALL_TYPES_2(SROW1, prod, _)},
        [MK_SCATTER_MAX] = {MK_ALL_TYPES_2(SROW1, max, _)},
        [MK_SCATTER_MIN] = {MK_ALL_TYPES_2(SROW1, min, _)},
    };
    if (op != MK_SCATTER_NONE) return fns[op][t];
    switch (mk_dtype_size(t)) {
    case 1: return sc1_set_uint8_t;
    case 2: return sc1_set_uint16_t;
    case 4: return sc1_set_uint32_t;
    default: return sc1_set_uint64_t;
    }
}

static const scatter_fn scatter_fns[5][MK_NDTYPES] = {
    [MK_SCATTER_SUM] = {MK_ALL_TYPES_2(SROW, sum, _)},
    [MK_SCATTER_PROD] = {MK_ALL_TYPES_2(SROW, prod, _)},
    [MK_SCATTER_MAX] = {MK_ALL_TYPES_2(SROW, max, _)},
    [MK_SCATTER_MIN] = {MK_ALL_TYPES_2(SROW, min, _)},
};

typedef struct {
    const walker *w;
    char *out;
    const char *upd;
    size_t sz;
    scatter_fn fn; /* NULL: assignment */
    int64_t out_size;
    int64_t *tgt, *oth; /* per row: target offset (-1: dropped), update offset */
    scatter1_fn fn1;    /* rows of one element */
    /* per row, for the post iterator */
    char *dst;
    const char *src;
} scatter_ctx;

static void scatter_post_rows(void *v, const int64_t *off, const int64_t *st, int64_t n) {
    scatter_ctx *c = v;
    int64_t sz = (int64_t)c->sz;
    if (c->fn)
        c->fn(c->dst + off[0] * sz, st[0], c->src + off[1] * sz, st[1], n);
    else
        mk_copy_elems(c->dst + off[0] * sz, st[0], c->src + off[1] * sz, st[1], n, c->sz);
}

/* applies elements [qb, qe) of a row's block */
static void scatter_row(scatter_ctx *c, int64_t t, int64_t o, int64_t qb, int64_t qe) {
    const mk_iter *post = &c->w->post;
    int64_t sz = (int64_t)c->sz;
    c->dst = c->out + t * sz;
    c->src = c->upd + o * sz;
    if (post->ndim == 1) {
        int64_t ts = post->strides[0][0], us = post->strides[1][0];
        char *d = c->dst + qb * ts * sz;
        const char *u = c->src + qb * us * sz;
        if (c->fn)
            c->fn(d, ts, u, us, qe - qb);
        else
            mk_copy_elems(d, ts, u, us, qe - qb, c->sz);
    } else {
        mk_iter_range(post, qb, qe, scatter_post_rows, c);
    }
}

/* Rows r0 .. r0 + n of one element each, s at r0 (moved past them): their targets into tgt
 * (and update offsets into oth, unless w_affine), then d op= u for those in [lo, hi). */
static void sc1_fill(const walker *w, wpos *s, int64_t n, int64_t *tgt, int64_t *oth) {
    w_fill(w, s, n, false, tgt, w_affine(w) ? NULL : oth);
}
static void sc1_apply(const scatter_ctx *c, int64_t r0, int64_t n, const int64_t *tgt, const int64_t *oth, int64_t lo,
                      int64_t hi) {
    if (!w_affine(c->w)) {
        c->fn1(c->out, c->upd, tgt, oth, 0, n, lo, hi);
        return;
    }
    int64_t us = w_ustride(c->w);
    c->fn1(c->out, c->upd + r0 * us * (int64_t)c->sz, tgt, NULL, us, n, lo, hi);
}
static void sc1_rows(const scatter_ctx *c, wpos *s, int64_t r0, int64_t n, int64_t *tgt, int64_t *oth, int64_t lo,
                     int64_t hi) {
    sc1_fill(c->w, s, n, tgt, oth);
    sc1_apply(c, r0, n, tgt, oth, lo, hi);
}

/* every row in order, elements [qb, qe) of each block */
static void scatter_rows(scatter_ctx *c, int64_t qb, int64_t qe) {
    const walker *w = c->w;
    int64_t tgt[BATCH], oth[BATCH];
    bool single = w->post.total == 1;
    wpos s;
    w_seek(w, 0, &s);
    for (int64_t r = 0; r < w->total; r += BATCH) {
        int64_t n = w->total - r < BATCH ? w->total - r : BATCH;
        if (single) {
            sc1_rows(c, &s, r, n, tgt, oth, 0, c->out_size);
            continue;
        }
        w_fill(w, &s, n, false, tgt, oth);
        for (int64_t i = 0; i < n; i++)
            if (tgt[i] >= 0) scatter_row(c, tgt[i], oth[i], qb, qe);
    }
}

/* each thread: every row, its share of each block */
static void scatter_by_block(void *v, int ith, int nth) {
    scatter_ctx c = *(scatter_ctx *)v;
    int64_t n = c.w->post.total, qb = n * ith / nth, qe = n * (ith + 1) / nth;
    if (qb < qe) scatter_rows(&c, qb, qe);
}

/* Many rows of more than one element, in steps of nth blocks of SPIPE_ROWS
 * rows: first the threads compute the targets and update offsets of one block
 * each, then each thread applies the step's rows whose target lies in its
 * share of the output, in row order. Every target's updates are thus applied
 * in row order, as by the sequential loop (bit-identical float sums), and the
 * per-row offsets of only one step exist at a time. */
#define SPIPE_ROWS 32768
typedef struct {
    scatter_ctx *c;
    int nth;
    int64_t base; /* first row of the step */
    int64_t *buf; /* per block: SPIPE_ROWS targets, then SPIPE_ROWS update offsets */
} spipe_ctx;

static void spipe_fill(void *v, int b, int nth_) {
    (void)nth_;
    spipe_ctx *P = v;
    const walker *w = P->c->w;
    int64_t r0 = P->base + (int64_t)b * SPIPE_ROWS, r1 = r0 + SPIPE_ROWS;
    if (r1 > w->total) r1 = w->total;
    if (r0 >= r1) return;
    int64_t *l = P->buf + (size_t)b * 2 * SPIPE_ROWS;
    wpos s;
    w_seek(w, r0, &s);
    w_fill(w, &s, r1 - r0, false, l, l + SPIPE_ROWS);
}

static void spipe_apply(void *v, int ith, int nth) {
    spipe_ctx *P = v;
    scatter_ctx c = *P->c;
    int64_t lo = c.out_size * ith / nth, hi = c.out_size * (ith + 1) / nth;
    for (int b = 0; b < P->nth; b++) {
        int64_t r0 = P->base + (int64_t)b * SPIPE_ROWS, n = c.w->total - r0;
        if (n <= 0) break;
        if (n > SPIPE_ROWS) n = SPIPE_ROWS;
        const int64_t *l = P->buf + (size_t)b * 2 * SPIPE_ROWS;
        for (int64_t i = 0; i < n; i++)
            if (l[i] >= lo && l[i] < hi) scatter_row(&c, l[i], l[SPIPE_ROWS + i], 0, c.w->post.total);
    }
}

/* Rows of one element (x.at[idx].add(v) and the like), where computing the targets is most of
 * the work and applying them must go in row order: in each round, slices 1 .. nth - 1 compute
 * the targets of the next nth - 1 blocks of S1PIPE_ROWS rows while slice 0 applies the blocks
 * of the round before, in row order (the sequential loop's order, so float sums are
 * bit-identical). Two sets of block lists alternate. */
#define S1PIPE_ROWS 65536
typedef struct {
    const scatter_ctx *c;
    int nf;         /* blocks computed per round */
    int64_t round;  /* this round computes blocks round * nf .., applies (round - 1) * nf .. */
    int64_t *buf;   /* 2 * nf lists of S1PIPE_ROWS targets, then S1PIPE_ROWS update offsets */
} s1pipe_ctx;

static int64_t *s1pipe_list(const s1pipe_ctx *P, int64_t b) {
    return P->buf + (size_t)(b % (2 * P->nf)) * 2 * S1PIPE_ROWS;
}

static void s1pipe_round(void *v, int ith, int nth_) {
    (void)nth_;
    s1pipe_ctx *P = v;
    const walker *w = P->c->w;
    int64_t b = ith == 0 ? (P->round - 1) * P->nf : P->round * P->nf + ith - 1;
    for (int k = 0; k < (ith == 0 ? P->nf : 1); k++, b++) {
        int64_t r0 = b * S1PIPE_ROWS, n = w->total - r0;
        if (b < 0 || n <= 0) return;
        if (n > S1PIPE_ROWS) n = S1PIPE_ROWS;
        int64_t *l = s1pipe_list(P, b);
        if (ith == 0) {
            sc1_apply(P->c, r0, n, l, l + S1PIPE_ROWS, 0, P->c->out_size);
        } else {
            wpos s;
            w_seek(w, r0, &s);
            sc1_fill(w, &s, n, l, l + S1PIPE_ROWS);
        }
    }
}

/* returns -1 if the lists could not be allocated (the caller runs sequentially) */
static int scatter_pipelined(scatter_ctx *c, int nth) {
    if (c->w->post.total == 1) {
        s1pipe_ctx P = {c, nth - 1, 0, malloc((size_t)(nth - 1) * 4 * S1PIPE_ROWS * sizeof(int64_t))};
        if (!P.buf) return -1;
        int64_t rounds = (c->w->total + (int64_t)P.nf * S1PIPE_ROWS - 1) / ((int64_t)P.nf * S1PIPE_ROWS);
        for (P.round = 0; P.round <= rounds; P.round++) mk_parallel_slices(nth, s1pipe_round, &P);
        free(P.buf);
        return 0;
    }
    spipe_ctx P = {c, nth, 0, malloc((size_t)nth * 2 * SPIPE_ROWS * sizeof(int64_t))};
    if (!P.buf) return -1;
    for (P.base = 0; P.base < c->w->total; P.base += (int64_t)nth * SPIPE_ROWS) {
        mk_parallel_slices(nth, spipe_fill, &P);
        mk_parallel_slices(nth, spipe_apply, &P);
    }
    free(P.buf);
    return 0;
}

/* Integer and bool sums of single elements into a small output: each thread
 * adds its share of the rows into a zeroed partial output (thread 0 into the
 * output itself), and the partials are added in thread order. Wrapping
 * integer addition (and bool's or) is associative and commutative, so this
 * is exactly the sequential loop's result. */
typedef struct {
    scatter_ctx *c;
    char *part; /* nth - 1 partial outputs */
    scatter_fn add;
    int nparts; /* threads of the first pass */
} spart_ctx;

static void scatter_partial(void *v, int ith, int nth) {
    spart_ctx *P = v;
    scatter_ctx c = *P->c;
    const walker *w = c.w;
    int64_t r0 = w->total * ith / nth, r1 = w->total * (ith + 1) / nth;
    if (ith > 0) c.out = P->part + (size_t)(ith - 1) * (size_t)c.out_size * c.sz;
    int64_t tgt[BATCH], oth[BATCH];
    wpos s;
    w_seek(w, r0, &s);
    for (int64_t r = r0; r < r1; r += BATCH) {
        int64_t n = r1 - r < BATCH ? r1 - r : BATCH;
        sc1_rows(&c, &s, r, n, tgt, oth, 0, c.out_size);
    }
}

static void scatter_partial_sum(void *v, int ith, int nth) {
    spart_ctx *P = v;
    const scatter_ctx *c = P->c;
    int64_t b = c->out_size * ith / nth, e = c->out_size * (ith + 1) / nth;
    for (int k = 1; k < P->nparts; k++)
        P->add(c->out + (size_t)b * c->sz, 1, P->part + ((size_t)(k - 1) * (size_t)c->out_size + (size_t)b) * c->sz,
               1, e - b);
}

/* Metal's scatter kernels have no 8-byte outputs (int64, uint64; complex64 only
 * summed): on a GPU stream MLX refuses them at eval, "[Scatter::eval_gpu] Does not
 * support int64"; on a CPU stream they run. mkpy plays the Mac's GPU, so it refuses
 * what the Mac refuses. */
static int gpu_scatter_dtype_ok(const mk_prim *pr, const char *prim, mk_dtype t, bool sum) {
    if (mk_stream_device(pr->stream) != MK_GPU || mk_dtype_size(t) != 8 || (t == MK_COMPLEX64 && sum)) return 0;
    mk_error_set(MK_ERR_VALUE, "[%s::eval_gpu] Does not support %s", prim, mk_dtype_name(t));
    return -1;
}

static int scatter_eval(mk_prim *pr, mk_array *const *in, mk_array *const *out) {
    const gs_params *p = pr->params;
    mk_array *o = out[0], *x = in[0], *u = in[p->narr + 1];
    /* index arrays make it MLX's Scatter; without, it is a slice update there */
    if (p->narr > 0 && !p->slice_update && gpu_scatter_dtype_ok(pr, "Scatter", o->dtype, p->op == MK_SCATTER_SUM) < 0) return -1;
    if (init_from(pr, o, x) < 0) return -1;
    if (u->size == 0 || o->size == 0) return 0;
    walker *w = malloc(sizeof *w);
    if (!w) {
        mk_nomem();
        return -1;
    }
    walker_init(w, p, o, u->strides, in + 1);
    scatter_ctx c = {w,    mk_data(o), mk_data(u), mk_dtype_size(o->dtype), NULL, o->size, NULL, NULL,
                     NULL, NULL,       NULL};
    if (p->op != MK_SCATTER_NONE) c.fn = scatter_fns[p->op][o->dtype];
    c.fn1 = scatter1_fn_for(p->op, o->dtype);
    int nth = mk_pool_threads();
    int64_t rows = w->total, npost = w->post.total;
    if (nth <= 1 || rows * npost < MK_GRAIN) {
        scatter_rows(&c, 0, npost);
    } else if (rows < 4 * nth && npost >= 4 * nth) {
        mk_parallel(nth, scatter_by_block, &c);
    } else if (npost == 1 && p->op == MK_SCATTER_SUM && !mk_is_inexact(o->dtype) &&
               o->size <= rows / (4 * nth)) {
        spart_ctx P = {&c, calloc((size_t)(nth - 1) * (size_t)o->size, c.sz), scatter_fns[MK_SCATTER_SUM][o->dtype],
                     nth};
        if (!P.part) {
            scatter_rows(&c, 0, npost);
        } else {
            mk_parallel_slices(nth, scatter_partial, &P);
            mk_parallel(o->size >= 4 * MK_GRAIN ? nth : 1, scatter_partial_sum, &P);
        }
        free(P.part);
    } else if (scatter_pipelined(&c, nth) < 0) {
        scatter_rows(&c, 0, npost);
    }
    free(w);
    return 0;
}

static int scatter_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int scatter_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef scatter_def = {"scatter", scatter_eval, NULL, scatter_vjp, NULL, scatter_vmap, false};

static mk_array *scatter_node(mk_array *x, const mk_index_dim *dims, int narr, mk_array *const *idx, int bpos,
                              mk_array *updates, mk_scatter_op op, bool slice_update) {
    gs_params *p = malloc(sizeof *p);
    int64_t shape[MK_MAX_NDIM];
    mk_array *u = NULL, *t = NULL, *r = NULL;
    if (!p) return mk_nomem();
    int nd = make_plan("scatter", x, dims, narr, idx, bpos, p, shape);
    if (nd < 0) goto error;
    p->op = op;
    p->slice_update = slice_update;
    if (op != MK_SCATTER_NONE && !scatter_fns[op][x->dtype]) {
        mk_error_set(MK_ERR_VALUE, "[scatter] Not supported for %s.", mk_dtype_name(x->dtype));
        goto error;
    }
    if (!(t = mk_as_dtype(updates, x->dtype)) || !(u = mk_broadcast_to(t, nd, shape))) goto error;
    mk_array *inputs[MK_MAX_NDIM + 2];
    inputs[0] = x;
    for (int k = 0; k < narr; k++) inputs[k + 1] = idx[k];
    inputs[narr + 1] = u;
    r = mk_node(&scatter_def, p, x->dtype, x->ndim, x->shape, narr + 2, inputs);
    mk_decref(t);
    mk_decref(u);
    return r;
error:
    free(p);
    mk_xdecref(t);
    mk_xdecref(u);
    return NULL;
}

mk_array *mk_scatter(mk_array *x, const mk_index_dim *dims, int narr, mk_array *const *idx, int bpos,
                     mk_array *updates, mk_scatter_op op) {
    return scatter_node(x, dims, narr, idx, bpos, updates, op, false);
}

mk_array *mk_scatter_slice(mk_array *x, const mk_index_dim *dims, int narr, mk_array *const *idx,
                           mk_array *updates) {
    return scatter_node(x, dims, narr, idx, 0, updates, MK_SCATTER_NONE, true);
}

/* ------------------------------------------------------------ take */

mk_array *mk_take(mk_array *x, mk_array *idx, int axis, bool has_axis) {
    mk_array *flat = NULL, *r = NULL;
    if (!has_axis) {
        int64_t n = -1;
        if (!(flat = mk_reshape(x, 1, &n))) return NULL;
        x = flat;
        axis = 0;
    }
    if (axis < -x->ndim || axis >= x->ndim) {
        mk_error_set(MK_ERR_INDEX, "[take] Received invalid axis %d for array with %d dimensions.", axis, x->ndim);
        goto done;
    }
    if (axis < 0) axis += x->ndim;
    if (x->shape[axis] == 0 && idx->size != 0) {
        mk_error_set(MK_ERR_VALUE, "[take] Cannot do a non-empty take from an empty axis.");
        goto done;
    }
    mk_index_dim dims[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) dims[d] = (mk_index_dim){MK_IDX_SLICE, 0, 0, 1, x->shape[d]};
    dims[axis] = (mk_index_dim){MK_IDX_ARRAY, 0, 0, 0, 0};
    r = mk_gather(x, dims, 1, &idx, axis);
done:
    mk_xdecref(flat);
    return r;
}

mk_array *mk_take_int(mk_array *x, int64_t index, int axis, bool has_axis) {
    mk_array *flat = NULL, *s = NULL, *r = NULL;
    if (!has_axis) {
        int64_t n = -1;
        if (!(flat = mk_reshape(x, 1, &n))) return NULL;
        x = flat;
        axis = 0;
    }
    if (axis < -x->ndim || axis >= x->ndim) {
        mk_error_set(MK_ERR_INDEX, "[take] Received invalid axis %d for array with %d dimensions.", axis, x->ndim);
        goto done;
    }
    if (x->size == 0) {
        mk_error_set(MK_ERR_VALUE, "[take] Cannot do a non-empty take from an array with zero elements.");
        goto done;
    }
    if (axis < 0) axis += x->ndim;
    /* MLX slices [index, index + 1) with slice's clamping, so a negative or
     * too large index leaves an empty axis that squeeze refuses */
    int64_t start[MK_MAX_NDIM], stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) {
        start[d] = 0;
        stop[d] = x->shape[d];
        step[d] = 1;
    }
    if (index < 0 || index >= x->shape[axis]) {
        mk_error_set(MK_ERR_VALUE, "[squeeze] Cannot squeeze axis %d with size 0 which is not equal to 1.", axis);
        goto done;
    }
    start[axis] = index;
    stop[axis] = index + 1;
    if ((s = mk_slice(x, start, stop, step))) r = mk_squeeze(s, 1, &axis);
done:
    mk_xdecref(flat);
    mk_xdecref(s);
    return r;
}

/* ------------------------------------------------ take/put along an axis */

/* Shapes of a and idx broadcast while ignoring `axis` (MLX's broadcast_arrays
 * with ignore_axes): the result keeps len_axis there. */
static int broadcast_ignoring(int nd, int axis, const int64_t *a, const int64_t *b, int64_t len_axis,
                              int64_t *out) {
    int64_t sa[MK_MAX_NDIM], sb[MK_MAX_NDIM], so[MK_MAX_NDIM];
    int n = 0;
    for (int d = 0; d < nd; d++)
        if (d != axis) {
            sa[n] = a[d];
            sb[n++] = b[d];
        }
    if (mk_broadcast_shapes(n, sa, n, sb, so) < 0) return -1;
    for (int d = 0, k = 0; d < nd; d++) out[d] = d == axis ? len_axis : so[k++];
    return 0;
}

typedef struct {
    char *out;
    const char *x, *idx, *upd;
    size_t sz;
    mk_dtype itype;
    size_t isz;
    int64_t n_axis;               /* the target's axis length */
    int64_t x_axis;               /* target stride along the axis */
    int64_t i_axis, u_axis, len;  /* scatter: strides along the axis, and its length in idx */
    scatter_fn fn;
} axis_ctx;

/* gather: arrays out, idx, x (x's axis stride zeroed) */
static void take_axis_rows(void *v, const int64_t *off, const int64_t *st, int64_t n) {
    axis_ctx *c = v;
    int64_t sz = (int64_t)c->sz;
    char *o = c->out + off[0] * sz;
    const char *ip = c->idx + off[1] * (int64_t)c->isz;
    const char *xp = c->x + off[2] * sz;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = clamp_index(load_index(c->itype, ip + i * st[1] * (int64_t)c->isz), c->n_axis);
        memcpy(o + i * st[0] * sz, xp + (i * st[2] + j * c->x_axis) * sz, c->sz);
    }
}

static int take_axis_eval(mk_prim *pr, mk_array *const *in, mk_array *const *out) {
    int axis = *(const int *)pr->params;
    mk_array *o = out[0], *x = in[0], *idx = in[1];
    if (mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    if (x->shape[axis] == 0) {
        memset(mk_data(o), 0, (size_t)o->size * mk_dtype_size(o->dtype));
        return 0;
    }
    int64_t si[MK_MAX_NDIM], sx[MK_MAX_NDIM];
    mk_broadcast_strides(idx, o->ndim, o->shape, si);
    for (int d = 0; d < o->ndim; d++) sx[d] = d == axis ? 0 : (x->shape[d] == 1 ? 0 : x->strides[d]);
    axis_ctx c = {mk_data(o), mk_data(x), mk_data(idx), NULL, mk_dtype_size(x->dtype), idx->dtype,
                  mk_dtype_size(idx->dtype), x->shape[axis], x->strides[axis], 0, 0, 0, NULL};
    const int64_t *strides[3] = {o->strides, si, sx};
    mk_iter it;
    mk_iter_init(&it, o->ndim, o->shape, 3, strides);
    mk_iter_run(&it, MK_GRAIN, take_axis_rows, &c);
    return 0;
}

static int take_axis_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int take_axis_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int take_axis_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef take_axis_def = {"take_along_axis", take_axis_eval, NULL, take_axis_vjp, take_axis_jvp, take_axis_vmap, false};

static int axis_checks(const char *op, mk_array **x, mk_array *idx, int *axis, bool has_axis, mk_array **flat) {
    *flat = NULL;
    if (!has_axis) {
        int64_t n = -1;
        if (!(*flat = mk_reshape(*x, 1, &n))) return -1;
        *x = *flat;
        *axis = 0;
    }
    int a = mk_norm_axis(op, *axis, (*x)->ndim);
    if (a < 0) return -1;
    if (idx->ndim != (*x)->ndim) {
        mk_error_set(MK_ERR_VALUE, "[%s] Indices of dimension %d does not match array of dimension %d.", op,
                     idx->ndim, (*x)->ndim);
        return -1;
    }
    *axis = a;
    return 0;
}

mk_array *mk_take_along_axis(mk_array *x, mk_array *idx, int axis, bool has_axis) {
    mk_array *flat, *r = NULL;
    int64_t shape[MK_MAX_NDIM];
    if (axis_checks("take_along_axis", &x, idx, &axis, has_axis, &flat) < 0) goto done;
    if (!mk_is_integral(idx->dtype)) {
        mk_error_set(MK_ERR_RUNTIME, "[GatherAxis::eval_cpu] Cannot gather with indices type.");
        goto done;
    }
    if (broadcast_ignoring(x->ndim, axis, x->shape, idx->shape, idx->shape[axis], shape) < 0) goto done;
    int *params = malloc(sizeof *params);
    if (!params) {
        mk_nomem();
        goto done;
    }
    *params = axis;
    mk_array *inputs[2] = {x, idx};
    r = mk_node(&take_axis_def, params, x->dtype, x->ndim, shape, 2, inputs);
done:
    mk_xdecref(flat);
    return r;
}

/* scatter: arrays out (axis dim dropped), idx, upd; each element is one line
 * along the axis, applied in order */
static void put_axis_rows(void *v, const int64_t *off, const int64_t *st, int64_t n) {
    axis_ctx *c = v;
    int64_t sz = (int64_t)c->sz, isz = (int64_t)c->isz;
    for (int64_t i = 0; i < n; i++) {
        char *o = c->out + (off[0] + i * st[0]) * sz;
        const char *ip = c->idx + (off[1] + i * st[1]) * isz;
        const char *up = c->upd + (off[2] + i * st[2]) * sz;
        for (int64_t j = 0; j < c->len; j++) {
            int64_t k = norm_index(load_index(c->itype, ip + j * c->i_axis * isz), c->n_axis);
            if (k < 0) continue;
            if (c->fn)
                c->fn(o + k * c->x_axis * sz, 1, up + j * c->u_axis * sz, 1, 1);
            else
                memcpy(o + k * c->x_axis * sz, up + j * c->u_axis * sz, c->sz);
        }
    }
}

static int put_axis_eval(mk_prim *pr, mk_array *const *in, mk_array *const *out) {
    int axis = ((const int *)pr->params)[0], op = ((const int *)pr->params)[1];
    mk_array *o = out[0], *x = in[0], *idx = in[1], *upd = in[2];
    if (gpu_scatter_dtype_ok(pr, "ScatterAxis", o->dtype, op == MK_SCATTER_SUM) < 0) return -1;
    if (init_from(pr, o, x) < 0) return -1;
    if (o->size == 0 || idx->size == 0) return 0;
    /* lines: the output's shape with the axis dropped (size 1) */
    int64_t lshape[MK_MAX_NDIM], si[MK_MAX_NDIM], su[MK_MAX_NDIM];
    for (int d = 0; d < o->ndim; d++) lshape[d] = d == axis ? 1 : o->shape[d];
    mk_broadcast_strides(idx, o->ndim, o->shape, si);
    mk_broadcast_strides(upd, o->ndim, o->shape, su);
    axis_ctx c = {mk_data(o), NULL, mk_data(idx), mk_data(upd), mk_dtype_size(o->dtype), idx->dtype,
                  mk_dtype_size(idx->dtype), o->shape[axis], o->strides[axis], idx->strides[axis],
                  upd->shape[axis] == 1 ? 0 : upd->strides[axis], idx->shape[axis],
                  op != MK_SCATTER_NONE ? scatter_fns[op][o->dtype] : NULL};
    const int64_t *strides[3] = {o->strides, si, su};
    mk_iter it;
    mk_iter_init(&it, o->ndim, lshape, 3, strides);
    int64_t grain = MK_GRAIN / (c.len > 0 ? c.len : 1);
    mk_iter_run(&it, grain > 0 ? grain : 1, put_axis_rows, &c);
    return 0;
}

static int put_axis_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int put_axis_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef put_axis_def = {"put_along_axis", put_axis_eval, NULL, put_axis_vjp, NULL, put_axis_vmap, false};

mk_array *mk_put_along_axis(mk_array *x0, mk_array *idx, mk_array *values, int axis, bool has_axis) {
    mk_array *x = x0, *flat, *r = NULL, *upd = NULL, *t = NULL, *ib = NULL, *ub = NULL;
    int64_t shape[MK_MAX_NDIM], s2[MK_MAX_NDIM];
    if (axis_checks("put_along_axis", &x, idx, &axis, has_axis, &flat) < 0) goto done;
    if (x->size == 0) {
        mk_incref(x0);
        r = x0;
        goto done;
    }
    if (!mk_is_integral(idx->dtype)) {
        mk_error_set(MK_ERR_RUNTIME, "[ScatterAxis::eval_cpu] Cannot scatter with indices type.");
        goto done;
    }
    if (!(upd = mk_as_dtype(values, x->dtype))) goto done;
    if (upd->ndim > idx->ndim) {
        /* squeeze leading dims, as MLX */
        int ax[MK_MAX_NDIM], n = upd->ndim - idx->ndim;
        for (int i = 0; i < n; i++) ax[i] = i;
        if (!(t = mk_squeeze(upd, n, ax))) goto done;
        mk_decref(upd);
        upd = t;
        t = NULL;
    }
    /* indices and updates broadcast fully, then all three ignoring the axis */
    int nd = mk_broadcast_shapes(idx->ndim, idx->shape, upd->ndim, upd->shape, s2);
    if (nd < 0) goto done;
    if (broadcast_ignoring(x->ndim, axis, x->shape, s2, x->shape[axis], shape) < 0) goto done;
    int64_t ishape[MK_MAX_NDIM];
    memcpy(ishape, shape, sizeof ishape);
    ishape[axis] = s2[axis];
    if (!(ib = mk_broadcast_to(idx, nd, ishape)) || !(ub = mk_broadcast_to(upd, nd, ishape))) goto done;
    if (!(t = mk_broadcast_to(x, nd, shape))) goto done;
    int *params = malloc(2 * sizeof *params);
    if (!params) {
        mk_nomem();
        goto done;
    }
    params[0] = axis;
    params[1] = MK_SCATTER_NONE;
    mk_array *inputs[3] = {t, ib, ub};
    r = mk_node(&put_axis_def, params, x->dtype, nd, shape, 3, inputs);
    if (r && !has_axis) {
        mk_array *rr = mk_reshape(r, x0->ndim, x0->shape);
        mk_decref(r);
        r = rr;
    }
done:
    mk_xdecref(flat);
    mk_xdecref(upd);
    mk_xdecref(t);
    mk_xdecref(ib);
    mk_xdecref(ub);
    return r;
}

/* ------------------------------------------------------- masked scatter */

typedef struct {
    const mk_iter *it;
    char *out;
    const bool *mask;
    const char *val;
    int64_t vstride;
    size_t sz;
    int64_t nchunks, chunk;
    int64_t *counts; /* trues per chunk, then the exclusive prefix */
} mask_ctx;

typedef struct {
    mask_ctx *m;
    int64_t count, next;
    int fill;
} mask_run;

static void mask_rows(void *v, const int64_t *off, const int64_t *st, int64_t n) {
    mask_run *r = v;
    const bool *mk = r->m->mask + off[1];
    if (!r->fill) {
        for (int64_t i = 0; i < n; i++) r->count += mk[i * st[1]];
        return;
    }
    int64_t sz = (int64_t)r->m->sz;
    char *o = r->m->out + off[0] * sz;
    for (int64_t i = 0; i < n; i++)
        if (mk[i * st[1]]) memcpy(o + i * st[0] * sz, r->m->val + (r->next++) * r->m->vstride * sz, r->m->sz);
}

static void mask_count(void *v, int64_t b, int64_t e) {
    mask_ctx *m = v;
    for (int64_t k = b; k < e; k++) {
        mask_run r = {m, 0, 0, 0};
        int64_t lo = k * m->chunk, hi = lo + m->chunk < m->it->total ? lo + m->chunk : m->it->total;
        mk_iter_range(m->it, lo, hi, mask_rows, &r);
        m->counts[k] = r.count;
    }
}

static void mask_fill(void *v, int64_t b, int64_t e) {
    mask_ctx *m = v;
    for (int64_t k = b; k < e; k++) {
        mask_run r = {m, 0, m->counts[k], 1};
        int64_t lo = k * m->chunk, hi = lo + m->chunk < m->it->total ? lo + m->chunk : m->it->total;
        mk_iter_range(m->it, lo, hi, mask_rows, &r);
    }
}

static int masked_eval(mk_prim *pr, mk_array *const *in, mk_array *const *out) {
    (void)pr;
    mk_array *o = out[0], *x = in[0], *mask = in[1], *val = in[2];
    if (init_from(pr, o, x) < 0) return -1;
    if (o->size == 0) return 0;
    const int64_t *strides[2] = {o->strides, mask->strides};
    mk_iter it;
    mk_iter_init(&it, o->ndim, o->shape, 2, strides);
    mask_ctx m = {&it, mk_data(o), mk_data(mask), mk_data(val), val->ndim ? val->strides[0] : 0,
                  mk_dtype_size(o->dtype), 0, 0, NULL};
    m.chunk = MK_GRAIN;
    m.nchunks = (it.total + m.chunk - 1) / m.chunk;
    m.counts = malloc((size_t)m.nchunks * sizeof *m.counts);
    if (!m.counts) {
        mk_nomem();
        return -1;
    }
    mk_parallel_for(m.nchunks, 1, mask_count, &m);
    int64_t total = 0;
    for (int64_t k = 0; k < m.nchunks; k++) {
        int64_t c = m.counts[k];
        m.counts[k] = total;
        total += c;
    }
    if (total > val->size) {
        free(m.counts);
        mk_error_set(MK_ERR_RUNTIME, "[MaskedScatter::eval_cpu] Source does not have enough elements for mask.");
        return -1;
    }
    mk_parallel_for(m.nchunks, 1, mask_fill, &m);
    free(m.counts);
    return 0;
}

static int masked_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int masked_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int masked_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef masked_def = {"masked_scatter", masked_eval, NULL, masked_vjp, masked_jvp, masked_vmap, false};

mk_array *mk_masked_scatter(mk_array *x, mk_array *mask, mk_array *values) {
    char sa[256], sb[256];
    mk_array *em = NULL, *ev = NULL, *t = NULL, *flat = NULL, *r = NULL;
    if (mask->dtype != MK_BOOL) {
        mk_error_set(MK_ERR_VALUE, "[masked_scatter] The mask has to be boolean.");
        return NULL;
    }
    if (mask->ndim > x->ndim) {
        mk_error_set(MK_ERR_VALUE, "[masked_scatter] The mask cannot have more dimensions than the target.");
        return NULL;
    }
    int unmasked = x->ndim - mask->ndim;
    if (values->ndim > unmasked + 1) {
        mk_error_set(MK_ERR_VALUE,
                     "[masked_scatter] Value array shape must be broadcastable with the last %d dimensions of the "
                     "input.",
                     unmasked);
        return NULL;
    }
    if (mask->ndim && memcmp(mask->shape, x->shape, mask->ndim * sizeof *mask->shape)) {
        mk_error_set(MK_ERR_VALUE,
                     "[masked_scatter] The boolean mask should have the same shape as the beginning of the indexed "
                     "array but the mask has shape %s and the array has shape %s",
                     mk_shape_str(mask->ndim, mask->shape, sa, sizeof sa),
                     mk_shape_str(x->ndim, x->shape, sb, sizeof sb));
        return NULL;
    }
    /* the mask over all of x's dims */
    int64_t mshape[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) mshape[d] = d < mask->ndim ? mask->shape[d] : 1;
    if (!(t = mk_reshape(mask, x->ndim, mshape)) || !(em = mk_broadcast_to(t, x->ndim, x->shape))) goto done;
    mk_decref(t);
    t = NULL;
    /* the values as (mask.size, trailing dims...), as MLX */
    if (!(ev = mk_as_dtype(values, x->dtype))) goto done;
    int64_t vshape[MK_MAX_NDIM];
    int vnd = unmasked + 1;
    if (values->ndim < vnd) {
        int lead = vnd - values->ndim;
        for (int d = 0; d < vnd; d++) vshape[d] = d < lead ? 1 : values->shape[d - lead];
        if (!(t = mk_reshape(ev, vnd, vshape))) goto done;
        mk_decref(ev);
        ev = t;
        t = NULL;
        vshape[0] = mask->size;
        for (int d = 1; d < vnd; d++) vshape[d] = x->shape[mask->ndim + d - 1];
        if (!(t = mk_broadcast_to(ev, vnd, vshape))) goto done;
        mk_decref(ev);
        ev = t;
        t = NULL;
    } else {
        bool same = true;
        for (int d = 1; d < vnd; d++) same &= values->shape[d] == x->shape[mask->ndim + d - 1];
        if (!same) {
            vshape[0] = values->shape[0];
            for (int d = 1; d < vnd; d++) vshape[d] = x->shape[mask->ndim + d - 1];
            if (!(t = mk_broadcast_to(ev, vnd, vshape))) goto done;
            mk_decref(ev);
            ev = t;
            t = NULL;
        }
    }
    int64_t n = -1;
    if (!(flat = mk_reshape(ev, 1, &n))) goto done;
    mk_array *inputs[3] = {x, em, flat};
    r = mk_node(&masked_def, NULL, x->dtype, x->ndim, x->shape, 3, inputs);
done:
    mk_xdecref(em);
    mk_xdecref(ev);
    mk_xdecref(t);
    mk_xdecref(flat);
    return r;
}

/* ---------------------------------------------------------- transformation rules */

/* gather: the cotangent adds into zeros at the gathered positions */
/* MLX refuses gradients into index arrays (they need a stop_gradient). */
static int index_grad_check(const char *op, int from, int to, const bool *want) {
    for (int i = from; i < to; i++)
        if (want[i]) {
            mk_error_set(MK_ERR_VALUE,
                         "[%s] Cannot calculate VJP with respect to indices. Use stop_gradient on indices to stop "
                         "gradients from being computed.",
                         op);
            return -1;
        }
    return 0;
}

static int gather_vjp(mk_prim *pr, mk_array *const *cots, const bool *want, mk_array **grads) {
    const gs_params *p = pr->params;
    if (index_grad_check("gather", 1, p->narr + 1, want) < 0) return -1;
    if (!want[0] || !cots[0]) return 0;
    mk_array *x = pr->inputs[0];
    mk_array *z = mk_zeros(x->ndim, x->shape, x->dtype);
    if (!z) return -1;
    grads[0] = mk_scatter(z, p->dims, p->narr, pr->inputs + 1, p->bpos, cots[0], MK_SCATTER_SUM);
    mk_decref(z);
    return grads[0] ? 0 : -1;
}

static int gather_jvp(mk_prim *pr, mk_array *const *tans, mk_array **out) {
    const gs_params *p = pr->params;
    if (!tans[0]) return 0;
    out[0] = mk_gather(tans[0], p->dims, p->narr, pr->inputs + 1, p->bpos);
    return out[0] ? 0 : -1;
}

static int scatter_vjp(mk_prim *pr, mk_array *const *cots, const bool *want, mk_array **grads) {
    const gs_params *p = pr->params;
    int nu = p->narr + 1;
    mk_array *upd = pr->inputs[nu];
    if (index_grad_check("scatter", 1, nu, want) < 0) return -1;
    if (!cots[0]) return 0;
    mk_arena A = {0};
    int rc = 0;
    if (p->op == MK_SCATTER_PROD) {
        /* out = x * (the updates at its position): d/dx multiplies the cotangent by
         * them (a scatter-prod, exact with zeros); d/du_k = cot * out / u_k */
        if (want[0]) {
            grads[0] = mk_scatter(cots[0], p->dims, p->narr, pr->inputs + 1, p->bpos, upd, MK_SCATTER_PROD);
            if (!grads[0]) rc = -1;
        }
        if (rc == 0 && want[nu]) {
            mk_array *res = mk_ar_output(&A, pr, 0);
            if (!res)
                res = mk_ar_keep(&A, mk_scatter(pr->inputs[0], p->dims, p->narr, pr->inputs + 1, p->bpos, upd, p->op));
            mk_array *cr = mk_ar_mul(&A, cots[0], res);
            mk_array *g = cr ? mk_ar_keep(&A, mk_gather(cr, p->dims, p->narr, pr->inputs + 1, p->bpos)) : NULL;
            g = mk_ar_div(&A, g, upd);
            grads[nu] = mk_ar_out(mk_ar_sum_to(&A, g, upd->ndim, upd->shape));
            if (!grads[nu]) rc = -1;
        }
        mk_ar_free(&A);
        return rc;
    }
    bool ext = p->op == MK_SCATTER_MAX || p->op == MK_SCATTER_MIN;
    /* max/min: the cotangent goes where the value survived (x or an update equal to the result) */
    mk_array *res = ext ? mk_ar_output(&A, pr, 0) : NULL;
    if (ext && !res)
        res = mk_ar_keep(&A, mk_scatter(pr->inputs[0], p->dims, p->narr, pr->inputs + 1, p->bpos, upd, p->op));
    if (ext && !res) rc = -1;
    if (rc == 0 && want[0]) {
        if (ext) {
            mk_array *keep = mk_ar_bin(&A, MK_BINARY_equal, res, pr->inputs[0]);
            grads[0] = mk_ar_out(mk_ar_where(&A, keep, cots[0], mk_ar_scalar(&A, cots[0], 0.0)));
        } else if (p->op == MK_SCATTER_SUM) {
            grads[0] = mk_ar_out(cots[0]);
        } else {
            mk_array *z = mk_ar_scalar(&A, cots[0], 0.0);
            grads[0] = z ? mk_scatter(cots[0], p->dims, p->narr, pr->inputs + 1, p->bpos, z, MK_SCATTER_NONE) : NULL;
        }
        if (!grads[0]) rc = -1;
    }
    if (rc == 0 && want[nu]) {
        mk_array *g = mk_ar_keep(&A, mk_gather(cots[0], p->dims, p->narr, pr->inputs + 1, p->bpos));
        if (ext && g) {
            mk_array *gr = mk_ar_keep(&A, mk_gather(res, p->dims, p->narr, pr->inputs + 1, p->bpos));
            g = mk_ar_mul(&A, g, mk_ar_cast(&A, mk_ar_bin(&A, MK_BINARY_equal, gr, upd), g->dtype));
        }
        grads[nu] = mk_ar_out(mk_ar_sum_to(&A, g, upd->ndim, upd->shape));
        if (!grads[nu]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

/* A put_along_axis node with an accumulation op (x, idx, upd of one shape
 * but along the axis). */
static mk_array *put_axis_node(mk_array *x, mk_array *idx, mk_array *upd, int axis, int op) {
    int *params = malloc(2 * sizeof *params);
    if (!params) return mk_nomem();
    params[0] = axis;
    params[1] = op;
    mk_array *inputs[3] = {x, idx, upd};
    return mk_node(&put_axis_def, params, x->dtype, x->ndim, x->shape, 3, inputs);
}

static int take_axis_vjp(mk_prim *pr, mk_array *const *cots, const bool *want, mk_array **grads) {
    int axis = *(const int *)pr->params;
    mk_array *x = pr->inputs[0], *idx = pr->inputs[1];
    if (index_grad_check("gather_axis", 1, 2, want) < 0) return -1;
    if (!want[0] || !cots[0]) return 0;
    mk_arena A = {0};
    mk_array *c = cots[0];
    int64_t zs[MK_MAX_NDIM];
    memcpy(zs, c->shape, c->ndim * sizeof *zs);
    zs[axis] = x->shape[axis];
    mk_array *z = mk_ar_keep(&A, mk_zeros(c->ndim, zs, x->dtype));
    mk_array *ib = mk_ar_broadcast(&A, idx, c->ndim, c->shape);
    mk_array *g = z && ib ? mk_ar_keep(&A, put_axis_node(z, ib, c, axis, MK_SCATTER_SUM)) : NULL;
    grads[0] = mk_ar_out(mk_ar_sum_to(&A, g, x->ndim, x->shape));
    mk_ar_free(&A);
    return grads[0] ? 0 : -1;
}

static int take_axis_jvp(mk_prim *pr, mk_array *const *tans, mk_array **out) {
    int axis = *(const int *)pr->params;
    if (!tans[0]) return 0;
    out[0] = mk_take_along_axis(tans[0], pr->inputs[1], axis, true);
    return out[0] ? 0 : -1;
}

static int put_axis_vjp(mk_prim *pr, mk_array *const *cots, const bool *want, mk_array **grads) {
    int axis = ((const int *)pr->params)[0], op = ((const int *)pr->params)[1];
    mk_array *idx = pr->inputs[1], *upd = pr->inputs[2];
    if (index_grad_check("scatter_axis", 1, 2, want) < 0) return -1;
    if (!cots[0]) return 0;
    if (op != MK_SCATTER_NONE && op != MK_SCATTER_SUM) {
        mk_error_set(MK_ERR_VALUE, "[scatter] VJP not implemented for this scatter op");
        return -1;
    }
    mk_arena A = {0};
    int rc = 0;
    if (want[0]) {
        if (op == MK_SCATTER_SUM)
            grads[0] = mk_ar_out(cots[0]);
        else {
            mk_array *z = mk_ar_zeros_like(&A, upd);
            grads[0] = z ? put_axis_node(cots[0], idx, z, axis, MK_SCATTER_NONE) : NULL;
        }
        if (!grads[0]) rc = -1;
    }
    if (rc == 0 && want[2]) {
        grads[2] = mk_take_along_axis(cots[0], idx, axis, true);
        if (!grads[2]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

/* ---------------------------------------------------------- batching rules */

/* The batch size of a rule's inputs (1 when none is batched). */
static int64_t batch_size(int n, mk_array *const *in, const int *axes) {
    for (int i = 0; i < n; i++)
        if (axes[i] >= 0) return in[i]->shape[axes[i]];
    return 1;
}

/* A batched gather/scatter plan: the target gets the batch as dim 0, indexed
 * by arange(B) (shaped to lead the index broadcast), and every index array
 * a leading batch dim (size 1 when unbatched), so the index shape becomes
 * (B,) + the old one. Fills x, dims and idx (arena references). */
static int batched_plan(mk_arena *A, const gs_params *p, mk_array *const *in, const int *axes, int64_t B,
                        mk_array **x, mk_index_dim *dims, mk_array **idx) {
    *x = mk_ar_batch_front(A, in[0], axes[0], B);
    if (!*x) return -1;
    int nB = p->nB;
    for (int k = 0; k < p->narr; k++) {
        mk_array *ix = in[k + 1];
        int ax = axes[k + 1];
        if (ax > 0) ix = mk_ar_keep(A, mk_moveaxis(ix, ax, 0));
        if (!ix) return -1;
        int r = ix->ndim - (ax >= 0);
        int64_t shape[MK_MAX_NDIM];
        int m = 0;
        shape[m++] = ax >= 0 ? ix->shape[0] : 1;
        for (int d = r; d < nB; d++) shape[m++] = 1;
        for (int d = 0; d < r; d++) shape[m++] = ix->shape[d + (ax >= 0)];
        if (!(idx[k] = mk_ar_reshape(A, ix, m, shape))) return -1;
    }
    int64_t ashape[MK_MAX_NDIM];
    ashape[0] = B;
    for (int d = 0; d < nB; d++) ashape[d + 1] = 1;
    mk_array *ar = mk_ar_keep(A, mk_arange(0, (double)B, 1, MK_INT32));
    if (!(idx[p->narr] = mk_ar_reshape(A, ar, nB + 1, ashape))) return -1;
    dims[0] = (mk_index_dim){MK_IDX_ARRAY, p->narr, 0, 1, 0};
    for (int d = 0; d < p->xnd; d++) dims[d + 1] = p->dims[d];
    return 0;
}

static int gather_vmap(mk_prim *pr, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const gs_params *p = pr->params;
    if (p->xnd + 1 > MK_MAX_NDIM || p->narr + 1 > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[gather] Too many dimensions to vmap.");
        return -1;
    }
    mk_arena A = {0};
    mk_array *x, *idx[MK_MAX_NDIM + 1];
    mk_index_dim dims[MK_MAX_NDIM + 1];
    int64_t B = batch_size(pr->ninputs, in, axes);
    int rc = batched_plan(&A, p, in, axes, B, &x, dims, idx);
    /* a slice that took a whole axis takes the whole new axis (a shapeless
     * compile's replay, as MLX's take keeps the other axes whole) */
    for (int d = 0; rc == 0 && d < p->xnd; d++) {
        mk_index_dim *q = &dims[d + 1];
        if (q->kind == MK_IDX_SLICE && q->start == 0 && q->step == 1 && q->len == pr->inputs[0]->shape[d])
            q->len = x->shape[d + 1];
    }
    if (rc == 0) {
        outs[0] = mk_gather(x, dims, p->narr + 1, idx, p->bpos);
        out_axes[0] = p->bpos;
        if (!outs[0]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

static int scatter_vmap(mk_prim *pr, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const gs_params *p = pr->params;
    if (p->xnd + 1 > MK_MAX_NDIM || p->narr + 1 > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[scatter] Too many dimensions to vmap.");
        return -1;
    }
    mk_arena A = {0};
    mk_array *x, *idx[MK_MAX_NDIM + 1];
    mk_index_dim dims[MK_MAX_NDIM + 1];
    int64_t B = batch_size(pr->ninputs, in, axes);
    int nu = p->narr + 1;
    int rc = batched_plan(&A, p, in, axes, B, &x, dims, idx);
    /* updates: (B,) + the old gather shape, then the batch moved to bpos */
    mk_array *u = rc == 0 ? mk_ar_batch_front(&A, in[nu], axes[nu], B) : NULL;
    if (u) u = mk_ar_keep(&A, mk_moveaxis(u, 0, p->bpos));
    if (!u) rc = -1;
    if (rc == 0) {
        /* x may be a broadcast view of an unbatched target: the scatter writes into a copy */
        outs[0] = scatter_node(x, dims, p->narr + 1, idx, p->bpos, u, p->op, p->slice_update);
        out_axes[0] = 0;
        if (!outs[0]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

static int take_axis_vmap(mk_prim *pr, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    int axis = *(const int *)pr->params;
    mk_arena A = {0};
    int64_t B = batch_size(2, in, axes);
    mk_array *x = mk_ar_batch_front(&A, in[0], axes[0], B), *i = mk_ar_batch_front(&A, in[1], axes[1], B);
    outs[0] = x && i ? mk_take_along_axis(x, i, axis + 1, true) : NULL;
    out_axes[0] = 0;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

static int put_axis_vmap(mk_prim *pr, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    int axis = ((const int *)pr->params)[0], op = ((const int *)pr->params)[1];
    mk_arena A = {0};
    int64_t B = batch_size(3, in, axes);
    mk_array *b[3];
    int rc = 0;
    for (int k = 0; k < 3; k++)
        if (!(b[k] = mk_ar_batch_front(&A, in[k], axes[k], B))) rc = -1;
    outs[0] = rc == 0 ? put_axis_node(b[0], b[1], b[2], axis + 1, op) : NULL;
    out_axes[0] = 0;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

/* masked_scatter's rules. Its node is (x, m, v): m is the mask broadcast to
 * x's shape, v the values flattened; the k-th true position (row-major) takes
 * v[k]. With rows of n = x.size / b positions: position j of row r takes
 * v[r][cumsum(m[r])[j] - 1]. */
static mk_array *masked_slots(mk_arena *A, mk_array *m2, int64_t nv) {
    int one = 1;
    mk_array *mi = mk_ar_cast(A, m2, MK_INT32);
    mk_array *c = mi ? mk_ar_keep(A, mk_scan(MK_SCAN_SUM, mi, one, true, false, true)) : NULL;
    c = mk_ar_sub(A, c, mk_ar_scalar(A, c, 1.0));
    c = mk_ar_bin(A, MK_BINARY_maximum, c, mk_ar_scalar(A, c, 0.0));
    return mk_ar_bin(A, MK_BINARY_minimum, c, mk_ar_scalar(A, c, (double)(nv - 1)));
}

static int masked_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    mk_array *x = p->inputs[0], *m = p->inputs[1], *v = p->inputs[2];
    if (!cots[0]) return 0;
    mk_arena A = {0};
    int rc = 0;
    mk_array *z = mk_ar_scalar(&A, cots[0], 0.0);
    if (want[0]) {
        grads[0] = mk_ar_out(mk_ar_where(&A, m, z, cots[0]));
        if (!grads[0]) rc = -1;
    }
    if (rc == 0 && want[2] && v->size > 0) {
        int64_t s2[2] = {1, x->size}, sv[2] = {1, v->size};
        mk_array *m2 = mk_ar_reshape(&A, m, 2, s2);
        mk_array *idx = masked_slots(&A, m2, v->size);
        mk_array *upd = mk_ar_reshape(&A, mk_ar_where(&A, m, cots[0], z), 2, s2);
        mk_array *zv = mk_ar_keep(&A, mk_zeros(2, sv, v->dtype));
        mk_array *g = idx && upd && zv ? mk_ar_keep(&A, put_axis_node(zv, idx, upd, 1, MK_SCATTER_SUM)) : NULL;
        grads[2] = mk_ar_out(mk_ar_reshape(&A, g, 1, v->shape));
        if (!grads[2]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

static int masked_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    mk_array *x = p->inputs[0], *v = p->inputs[2];
    if (!tans[0] && !tans[2]) return 0;
    mk_arena A = {0};
    mk_array *tx = tans[0] ? tans[0] : mk_ar_zeros_like(&A, x);
    mk_array *tv = tans[2] ? tans[2] : mk_ar_zeros_like(&A, v);
    mk_array *in[3] = {tx, p->inputs[1], tv};
    out[0] = tx && tv ? mk_node(&masked_def, NULL, x->dtype, x->ndim, x->shape, 3, in) : NULL;
    mk_ar_free(&A);
    return out[0] ? 0 : -1;
}

static int masked_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    int64_t b = 0;
    for (int i = 0; i < 3; i++)
        if (axes[i] >= 0) b = in[i]->shape[axes[i]];
    mk_arena A = {0};
    mk_array *x = p->inputs[0];
    int64_t n = x->size, nv = p->inputs[2]->size;
    int64_t s2[2] = {b, n}, sv[2] = {b, nv}, so[MK_MAX_NDIM + 1];
    so[0] = b;
    memcpy(so + 1, x->shape, x->ndim * sizeof *so);
    mk_array *xb = mk_ar_reshape(&A, mk_ar_batch_front(&A, in[0], axes[0], b), 2, s2);
    mk_array *mb = mk_ar_reshape(&A, mk_ar_batch_front(&A, in[1], axes[1], b), 2, s2);
    mk_array *r = xb;
    if (nv > 0) {
        mk_array *vb = mk_ar_reshape(&A, mk_ar_batch_front(&A, in[2], axes[2], b), 2, sv);
        mk_array *idx = mb ? masked_slots(&A, mb, nv) : NULL;
        mk_array *g = vb && idx ? mk_ar_keep(&A, mk_take_along_axis(vb, idx, 1, true)) : NULL;
        r = mk_ar_where(&A, mb, g, xb);
    }
    outs[0] = mk_ar_out(mk_ar_reshape(&A, r, x->ndim + 1, so));
    out_axes[0] = 0;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_take_axis(const mk_prim *p, int *axis) {
    if (p->op != &take_axis_def) return false;
    *axis = *(const int *)p->params;
    return true;
}
bool mk_xp_put_axis(const mk_prim *p, int *axis, int *scatter_op) {
    if (p->op != &put_axis_def) return false;
    *axis = ((const int *)p->params)[0];
    *scatter_op = ((const int *)p->params)[1];
    return true;
}
/* scatter: the plan (export.c maps the plans MLX's Scatter can express) */
bool mk_xp_scatter(const mk_prim *p, int *op, int *narr, int *bpos, mk_index_dim *dims) {
    if (p->op != &scatter_def) return false;
    const gs_params *g = p->params;
    *op = g->op;
    *narr = g->narr;
    *bpos = g->bpos;
    memcpy(dims, g->dims, sizeof g->dims);
    return true;
}

/* export (export.c): a gather's plan */
bool mk_xp_gather(const mk_prim *p, int *narr, int *bpos, mk_index_dim *dims) {
    if (p->op != &gather_def) return false;
    const gs_params *g = p->params;
    *narr = g->narr;
    *bpos = g->bpos;
    memcpy(dims, g->dims, sizeof g->dims);
    return true;
}
bool mk_xp_scatter_slice(const mk_prim *p, bool *slice_update) {
    if (p->op != &scatter_def) return false;
    *slice_update = ((const gs_params *)p->params)->slice_update != 0;
    return true;
}
