/* Shape ops that copy: concatenate, stack, tile, repeat, pad; and split,
 * whose parts are slices (views). Tile and repeat are built as MLX builds
 * them: a reshape that adds unit dims, a broadcast (a view), and a reshape
 * that copies. All copies run on the thread pool through mk_copy_into or by
 * rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iter.h"
#include "ops.h"
#include "ops_extra.h"
#include "transforms.h"
#include "pool.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* ------------------------------------------------------------ strided copy */


/* dst[i] = *value for i < n. */
static void fill_elems(char *dst, const char *value, int64_t n, size_t sz) {
#define LOOP(T)                                                                                        \
    {                                                                                                  \
        T v, *d = (T *)dst;                                                                            \
        memcpy(&v, value, sizeof v);                                                                   \
        for (int64_t i = 0; i < n; i++) d[i] = v;                                                      \
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
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * (int64_t)sz, value, sz);
}

typedef struct {
    char *dst;
    const char *src;
    size_t sz;
} copy_ctx;

static void copy_rows(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    const copy_ctx *u = c;
    mk_copy_elems(u->dst + off[0] * (int64_t)u->sz, st[0], u->src + off[1] * (int64_t)u->sz, st[1], n, u->sz);
}

/* A transpose-like copy (the two innermost dims are unit-stride in dst and
 * in src respectively) goes by square tiles, so that both sides stay in
 * cache (partial tiles at the edges, and for dims under a tile: one loop
 * nest instead of a call per row). Work items are (outer index, tile row). */
#define TILE 32

typedef struct {
    const mk_iter *it;
    copy_ctx u;
    int64_t ntr; /* tile rows per outer index */
} tile_ctx;

/* d[r * dr + k] = s[r + k * sc] for r in [r0, r1), k in [c0, c1), 4-byte
 * elements: 4x4 blocks moved as four loads, a register transpose and four
 * stores (shuffles only: the bits are copied as they are). */
static void tile_t32(uint32_t *d, int64_t dr, const uint32_t *s, int64_t sc, int64_t r0, int64_t r1, int64_t c0,
                     int64_t c1) {
    int64_t r = r0;
#ifdef __SSE2__
    for (; r + 4 <= r1; r += 4) {
        int64_t k = c0;
        for (; k + 4 <= c1; k += 4) {
            const uint32_t *q = s + r + k * sc;
            __m128i a0 = _mm_loadu_si128((const __m128i *)q);
            __m128i a1 = _mm_loadu_si128((const __m128i *)(q + sc));
            __m128i a2 = _mm_loadu_si128((const __m128i *)(q + 2 * sc));
            __m128i a3 = _mm_loadu_si128((const __m128i *)(q + 3 * sc));
            __m128i t0 = _mm_unpacklo_epi32(a0, a1), t1 = _mm_unpacklo_epi32(a2, a3);
            __m128i t2 = _mm_unpackhi_epi32(a0, a1), t3 = _mm_unpackhi_epi32(a2, a3);
            uint32_t *o = d + r * dr + k;
            _mm_storeu_si128((__m128i *)o, _mm_unpacklo_epi64(t0, t1));
            _mm_storeu_si128((__m128i *)(o + dr), _mm_unpackhi_epi64(t0, t1));
            _mm_storeu_si128((__m128i *)(o + 2 * dr), _mm_unpacklo_epi64(t2, t3));
            _mm_storeu_si128((__m128i *)(o + 3 * dr), _mm_unpackhi_epi64(t2, t3));
        }
        for (; k < c1; k++)
            for (int64_t i = r; i < r + 4; i++) d[i * dr + k] = s[i + k * sc];
    }
#endif
    for (; r < r1; r++)
        for (int64_t k = c0; k < c1; k++) d[r * dr + k] = s[r + k * sc];
}

static void copy_tiles(void *c, int64_t begin, int64_t end) {
    const tile_ctx *t = c;
    const mk_iter *it = t->it;
    const int nd = it->ndim;
    const int64_t R = it->shape[nd - 2], C = it->shape[nd - 1];
    const int64_t dr = it->strides[0][nd - 2], dc = it->strides[0][nd - 1];
    const int64_t sr = it->strides[1][nd - 2], sc = it->strides[1][nd - 1];
    const size_t sz = t->u.sz;
    for (int64_t w = begin; w < end; w++) {
        int64_t o = w / t->ntr, r0 = (w % t->ntr) * TILE, r1 = r0 + TILE < R ? r0 + TILE : R;
        int64_t doff = 0, soff = 0;
        for (int d = nd - 3; d >= 0; d--) {
            int64_t i = o % it->shape[d];
            o /= it->shape[d];
            doff += i * it->strides[0][d];
            soff += i * it->strides[1][d];
        }
        char *dst = t->u.dst + doff * (int64_t)sz;
        const char *src = t->u.src + soff * (int64_t)sz;
        if (sz == 4 && dc == 1 && sr == 1) {
            for (int64_t c0 = 0; c0 < C; c0 += TILE)
                tile_t32((uint32_t *)dst, dr, (const uint32_t *)src, sc, r0, r1, c0, c0 + TILE < C ? c0 + TILE : C);
            continue;
        }
        for (int64_t c0 = 0; c0 < C; c0 += TILE) {
            int64_t c1 = c0 + TILE < C ? c0 + TILE : C;
#define LOOP(T)                                                                                        \
    for (int64_t r = r0; r < r1; r++) {                                                                \
        T *d = (T *)dst + r * dr;                                                                      \
        const T *s = (const T *)src + r * sr;                                                          \
        for (int64_t k = c0; k < c1; k++) d[k * dc] = s[k * sc];                                       \
    }                                                                                                  \
    break;
            switch (sz) {
            case 1: LOOP(uint8_t)
            case 2: LOOP(uint16_t)
            case 4: LOOP(uint32_t)
            case 8: LOOP(uint64_t)
            default:
                for (int64_t r = r0; r < r1; r++)
                    mk_copy_elems(dst + (r * dr + c0 * dc) * (int64_t)sz, dc, src + (r * sr + c0 * sc) * (int64_t)sz,
                               sc, c1 - c0, sz);
                break;
            }
#undef LOOP
        }
    }
}

void mk_copy_into(const mk_array *src, void *dst, const int64_t *dst_strides) {
    if (src->size == 0) return;
    copy_ctx u = {dst, mk_data(src), mk_dtype_size(src->dtype)};
    const int64_t *strides[2] = {dst_strides, src->strides};
    mk_iter it;
    mk_iter_init(&it, src->ndim, src->shape, 2, strides);
    int nd = it.ndim;
    if (nd >= 2 && it.strides[0][nd - 1] == 1 && it.strides[1][nd - 2] == 1 && it.strides[1][nd - 1] != 1) {
        tile_ctx t = {&it, u, (it.shape[nd - 2] + TILE - 1) / TILE};
        int64_t items = it.total / (it.shape[nd - 2] * it.shape[nd - 1]) * t.ntr;
        int64_t grain = MK_GRAIN / (TILE * it.shape[nd - 1]);
        mk_parallel_for(items, grain > 0 ? grain : 1, copy_tiles, &t);
        return;
    }
    mk_iter_run(&it, MK_GRAIN, copy_rows, &u);
}

/* ------------------------------------------------------------- concatenate */

static int concat_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int axis = *(const int *)p->params;
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    char *base = mk_data(o);
    int64_t step = o->strides[axis] * (int64_t)mk_dtype_size(o->dtype), pos = 0;
    for (int i = 0; i < p->ninputs; i++) {
        mk_copy_into(in[i], base + pos * step, o->strides);
        pos += in[i]->shape[axis];
    }
    return 0;
}

static int concat_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int concat_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int concat_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef concat_def = {"concatenate", concat_eval, NULL, concat_vjp, concat_jvp, concat_vmap, false};

static mk_array *concat_flat(int n, mk_array *const *xs) {
    mk_array **flat = calloc((unsigned)n, sizeof *flat), *r = NULL;
    if (!flat) return mk_nomem();
    int i = 0;
    for (; i < n; i++)
        if (!(flat[i] = mk_flatten(xs[i], 0, -1))) break;
    if (i == n) r = mk_concatenate(n, flat, 0, true);
    for (int k = 0; k < i; k++) mk_decref(flat[k]);
    free(flat);
    return r;
}

mk_array *mk_concatenate(int n, mk_array *const *xs, int axis, bool has_axis) {
    if (n == 0) {
        mk_error_set(MK_ERR_VALUE, "[concatenate] No arrays provided for concatenation");
        return NULL;
    }
    if (!has_axis) return concat_flat(n, xs);
    if (n == 1) {
        mk_incref(xs[0]);
        return xs[0];
    }
    int nd = xs[0]->ndim;
    int ax = mk_norm_axis("concatenate", axis, nd);
    if (ax < 0) return NULL;
    int64_t shape[MK_MAX_NDIM];
    memcpy(shape, xs[0]->shape, nd * sizeof *shape);
    shape[ax] = 0;
    mk_dtype t = xs[0]->dtype;
    for (int i = 0; i < n; i++) {
        const mk_array *a = xs[i];
        if (a->ndim != nd) {
            mk_error_set(MK_ERR_VALUE,
                         "[concatenate] All the input arrays must have the same number of dimensions. "
                         "However, got arrays with dimensions %d and %d.",
                         nd, a->ndim);
            return NULL;
        }
        for (int d = 0; d < nd; d++)
            if (d != ax && a->shape[d] != shape[d]) {
                char msg[MK_ERRMSG_MAX], sb[512];
                size_t k = (size_t)snprintf(msg, sizeof msg,
                                            "[concatenate] All the input array dimensions must match exactly "
                                            "except for the concatenation axis. However, the provided shapes are ");
                for (int j = 0; j < n && k < sizeof msg; j++)
                    k += (size_t)snprintf(msg + k, sizeof msg - k, "%s, ",
                                          mk_shape_str(xs[j]->ndim, xs[j]->shape, sb, sizeof sb));
                if (k < sizeof msg) snprintf(msg + k, sizeof msg - k, "and the concatenation axis is %d.", axis);
                mk_error_set(MK_ERR_VALUE, "%s", msg);
                return NULL;
            }
        if (__builtin_add_overflow(shape[ax], a->shape[ax], &shape[ax])) {
            mk_error_set(MK_ERR_VALUE, "[concatenate] The concatenated size overflows int64.");
            return NULL;
        }
        t = mk_promote(t, a->dtype);
    }
    if (mk_check_dim("concatenate", shape[ax]) < 0) return NULL;
    mk_array **ins = calloc((unsigned)n, sizeof *ins), *r = NULL;
    int *params = malloc(sizeof *params);
    if (!ins || !params) {
        free(ins);
        free(params);
        return mk_nomem();
    }
    *params = ax;
    int i = 0;
    for (; i < n; i++)
        if (!(ins[i] = mk_as_dtype(xs[i], t))) break;
    if (i == n)
        r = mk_node(&concat_def, params, t, nd, shape, n, ins);
    else
        free(params);
    for (int k = 0; k < i; k++) mk_decref(ins[k]);
    free(ins);
    return r;
}

/* ------------------------------------------------------------------ stack */

mk_array *mk_stack(int n, mk_array *const *xs, int axis) {
    if (n == 0) {
        mk_error_set(MK_ERR_VALUE, "[stack] No arrays provided for stacking");
        return NULL;
    }
    const mk_array *a0 = xs[0];
    for (int i = 1; i < n; i++)
        if (xs[i]->ndim != a0->ndim || memcmp(xs[i]->shape, a0->shape, a0->ndim * sizeof *a0->shape)) {
            mk_error_set(MK_ERR_VALUE, "[stack] All arrays must have the same shape");
            return NULL;
        }
    int ax = mk_norm_axis("stack", axis, a0->ndim + 1);
    if (ax < 0) return NULL;
    mk_array **ex = calloc((unsigned)n, sizeof *ex), *r = NULL;
    if (!ex) return mk_nomem();
    int i = 0;
    for (; i < n; i++)
        if (!(ex[i] = mk_expand_dims(xs[i], 1, &ax))) break;
    if (i == n) r = mk_concatenate(n, ex, ax, true);
    for (int k = 0; k < i; k++) mk_decref(ex[k]);
    free(ex);
    return r;
}

/* ------------------------------------------------------------------ split */

int mk_split(mk_array *x, int nidx, const int64_t *indices, int axis, mk_array **outs) {
    int ax = mk_norm_axis("split", axis, x->ndim);
    if (ax < 0) return -1;
    if (nidx == 0) {
        mk_incref(x);
        outs[0] = x;
        return 0;
    }
    int64_t start[MK_MAX_NDIM], stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) {
        start[d] = 0;
        stop[d] = x->shape[d];
        step[d] = 1;
    }
    /* each part is x[prev:idx] along the axis, with slice bounds normalised
     * as MLX's slice (and numpy's split) do */
    int64_t n = x->shape[ax], prev = 0;
    for (int i = 0; i <= nidx; i++) {
        int64_t e = i < nidx ? indices[i] : n, s = prev;
        prev = e;
        s = s < 0 ? s + n : s;
        e = e < 0 ? e + n : e;
        s = s < 0 ? 0 : s > n ? n : s;
        e = e < 0 ? 0 : e > n ? n : e;
        start[ax] = s;
        stop[ax] = e < s ? s : e;
        if (!(outs[i] = mk_slice(x, start, stop, step))) {
            for (int k = 0; k < i; k++) mk_decref(outs[k]);
            return -1;
        }
    }
    return 0;
}

int mk_split_sections(mk_array *x, int64_t sections, int axis, mk_array **outs) {
    char sb[512];
    int ax = mk_norm_axis("split", axis, x->ndim);
    if (ax < 0) return -1;
    if (sections <= 0) {
        mk_error_set(MK_ERR_VALUE, "[split] num_splits must be positive and non-zero but got %lld.",
                     (long long)sections);
        return -1;
    }
    if (x->shape[ax] % sections) {
        mk_error_set(MK_ERR_VALUE,
                     "Array split does not result in sub arrays with equal size: attempting %lld splits along "
                     "axis %d for shape %s.",
                     (long long)sections, axis, mk_shape_str(x->ndim, x->shape, sb, sizeof sb));
        return -1;
    }
    int64_t q = x->shape[ax] / sections;
    if (sections - 1 > INT32_MAX) {
        mk_error_set(MK_ERR_VALUE, "[split] Too many splits.");
        return -1;
    }
    int64_t *idx = malloc((size_t)(sections > 1 ? sections - 1 : 1) * sizeof *idx);
    if (!idx) {
        mk_nomem();
        return -1;
    }
    for (int64_t i = 0; i < sections - 1; i++) idx[i] = (i + 1) * q;
    int rc = mk_split(x, (int)(sections - 1), idx, axis, outs);
    free(idx);
    return rc;
}

/* ------------------------------------------------------------ tile, repeat */

/* x viewed with unit dims inserted, broadcast over them, reshaped (copied). */
static mk_array *expand_broadcast_reshape(mk_array *x, int nexp, const int64_t *exp_shape, const int64_t *bc_shape,
                                          int nfin, const int64_t *fin_shape) {
    mk_array *a = mk_reshape(x, nexp, exp_shape), *b = NULL, *r = NULL;
    if (a) b = mk_broadcast_to(a, nexp, bc_shape);
    if (b) r = mk_reshape(b, nfin, fin_shape);
    mk_xdecref(a);
    mk_xdecref(b);
    return r;
}

mk_array *mk_tile(mk_array *x, int nreps, const int64_t *reps_in) {
    int nd = x->ndim > nreps ? x->ndim : nreps;
    if (nd > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[tile] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    int64_t shape[MK_MAX_NDIM], reps[MK_MAX_NDIM];
    for (int i = 0; i < nd; i++) {
        int si = i - (nd - x->ndim), ri = i - (nd - nreps);
        shape[i] = si >= 0 ? x->shape[si] : 1;
        reps[i] = ri >= 0 ? reps_in[ri] : 1;
    }
    int64_t exp_shape[2 * MK_MAX_NDIM], bc_shape[2 * MK_MAX_NDIM], fin_shape[MK_MAX_NDIM];
    int n = 0;
    for (int i = 0; i < nd; i++) {
        if (reps[i] != 1) {
            exp_shape[n] = 1;
            bc_shape[n++] = reps[i];
        }
        exp_shape[n] = shape[i];
        bc_shape[n++] = shape[i];
        if (__builtin_mul_overflow(reps[i], shape[i], &fin_shape[i])) fin_shape[i] = INT64_MAX;
        if (mk_check_dim("tile", fin_shape[i]) < 0) return NULL;
    }
    for (int i = 0; i < n; i++)
        if (bc_shape[i] < 0) {
            mk_error_set(MK_ERR_VALUE, "[broadcast_to] Negative dimensions not allowed.");
            return NULL;
        }
    if (n > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[tile] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    return expand_broadcast_reshape(x, n, exp_shape, bc_shape, nd, fin_shape);
}

mk_array *mk_repeat(mk_array *x, int64_t repeats, int axis, bool has_axis) {
    if (!has_axis) {
        mk_array *f = mk_flatten(x, 0, -1);
        if (!f) return NULL;
        mk_array *r = mk_repeat(f, repeats, 0, true);
        mk_decref(f);
        return r;
    }
    int ax = mk_norm_axis("repeat", axis, x->ndim);
    if (ax < 0) return NULL;
    if (repeats < 0) {
        mk_error_set(MK_ERR_VALUE, "[repeat] Number of repeats cannot be negative");
        return NULL;
    }
    if (repeats == 1) {
        mk_incref(x);
        return x;
    }
    if (x->ndim + 1 > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[repeat] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    /* (.., S_ax, 1, ..) -> (.., S_ax, repeats, ..) -> (.., S_ax * repeats, ..) */
    int64_t exp_shape[MK_MAX_NDIM], bc_shape[MK_MAX_NDIM], fin_shape[MK_MAX_NDIM];
    int n = 0;
    for (int i = 0; i < x->ndim; i++) {
        exp_shape[n] = bc_shape[n] = x->shape[i];
        n++;
        fin_shape[i] = x->shape[i];
        if (i == ax) {
            exp_shape[n] = 1;
            bc_shape[n++] = repeats;
            if (__builtin_mul_overflow(fin_shape[i], repeats, &fin_shape[i])) fin_shape[i] = INT64_MAX;
            if (mk_check_dim("repeat", fin_shape[i]) < 0) return NULL;
        }
    }
    return expand_broadcast_reshape(x, n, exp_shape, bc_shape, x->ndim, fin_shape);
}

/* -------------------------------------------------------------------- pad */

/* Each output index along an axis reads one input index (or the constant,
 * -1), so every mode is a gather through one small map per axis. Along the
 * last axis the map is cut into runs copied with one stride. */
typedef struct {
    mk_pad_mode mode;
    int64_t pad[MK_MAX_NDIM][2];
} pad_params;

typedef struct {
    int64_t out_start, len, in_start, in_step; /* in_start < 0: constant */
} pad_run;

typedef struct {
    const mk_array *x, *o;
    int64_t *maps[MK_MAX_NDIM];
    pad_run *runs;
    int nruns;
    char cval[16];
} pad_ctx;

static int64_t pad_source(mk_pad_mode mode, int64_t j, int64_t lo, int64_t n) {
    int64_t i = j - lo, p, m;
    if (i >= 0 && i < n) return i;
    if (mode == MK_PAD_CONSTANT || n == 0) return -1;
    switch (mode) {
    case MK_PAD_EDGE: return i < 0 ? 0 : n - 1;
    case MK_PAD_REFLECT: /* ... 2 1 | 0 1 2 | 1 0 ..., period 2(n-1) */
        if (n == 1) return 0;
        p = 2 * (n - 1);
        m = ((i % p) + p) % p;
        return m < n ? m : p - m;
    case MK_PAD_SYMMETRIC: /* ... 1 0 | 0 1 2 | 2 1 ..., period 2n */
        p = 2 * n;
        m = ((i % p) + p) % p;
        return m < n ? m : p - 1 - m;
    default: return -1;
    }
}

static void pad_rows(void *c, int64_t begin, int64_t end) {
    const pad_ctx *u = c;
    const mk_array *x = u->x, *o = u->o;
    const int nd = o->ndim;
    const size_t sz = mk_dtype_size(o->dtype);
    const int64_t last = o->shape[nd - 1], xs = x->strides[nd - 1];
    const char *src = mk_data(x);
    char *dst = (char *)mk_data(o);
    for (int64_t r = begin; r < end; r++) {
        char *row = dst + r * last * (int64_t)sz;
        int64_t rem = r, off = 0;
        bool valid = true;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t m = u->maps[d][rem % o->shape[d]];
            rem /= o->shape[d];
            if (m < 0) valid = false;
            else off += m * x->strides[d];
        }
        if (!valid) {
            fill_elems(row, u->cval, last, sz);
            continue;
        }
        for (int k = 0; k < u->nruns; k++) {
            const pad_run *run = &u->runs[k];
            char *d = row + run->out_start * (int64_t)sz;
            if (run->in_start < 0)
                fill_elems(d, u->cval, run->len, sz);
            else
                mk_copy_elems(d, 1, src + (off + run->in_start * xs) * (int64_t)sz, run->in_step * xs, run->len, sz);
        }
    }
}

static int pad_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const pad_params *pp = p->params;
    const mk_array *x = in[0];
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    int nd = o->ndim, rc = -1;
    size_t sz = mk_dtype_size(o->dtype);
    pad_ctx u;
    memset(&u, 0, sizeof u);
    u.x = x;
    u.o = o;
    if (p->ninputs > 1 && in[1]->size > 0) memcpy(u.cval, mk_data(in[1]), sz);
    for (int d = 0; d < nd; d++) {
        if (!(u.maps[d] = malloc((size_t)o->shape[d] * sizeof(int64_t)))) goto nomem;
        for (int64_t j = 0; j < o->shape[d]; j++)
            u.maps[d][j] = pad_source(pp->mode, j, pp->pad[d][0], x->shape[d]);
    }
    /* runs along the last axis: constant, or input indices stepping by -1, 0 or 1 */
    int64_t last = o->shape[nd - 1];
    const int64_t *m = u.maps[nd - 1];
    if (!(u.runs = malloc((size_t)last * sizeof *u.runs))) goto nomem;
    for (int64_t j = 0; j < last;) {
        pad_run run = {j, 1, m[j], 0};
        if (m[j] < 0) {
            while (j + run.len < last && m[j + run.len] < 0) run.len++;
        } else if (j + 1 < last && m[j + 1] >= 0 && m[j + 1] - m[j] >= -1 && m[j + 1] - m[j] <= 1) {
            run.in_step = m[j + 1] - m[j];
            while (j + run.len < last && m[j + run.len] >= 0 && m[j + run.len] - m[j + run.len - 1] == run.in_step)
                run.len++;
        }
        u.runs[u.nruns++] = run;
        j += run.len;
    }
    int64_t rows = o->size / last, grain = MK_GRAIN / last;
    mk_parallel_for(rows, grain > 0 ? grain : 1, pad_rows, &u);
    rc = 0;
    goto done;
nomem:
    mk_nomem();
done:
    for (int d = 0; d < nd; d++) free(u.maps[d]);
    free(u.runs);
    return rc;
}

static int pad_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int pad_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef pad_def = {"pad", pad_eval, NULL, pad_vjp, NULL, pad_vmap, false};

static const char *const pad_mode_names[] = {"constant", "edge", "reflect", "symmetric"};

mk_array *mk_pad_ex(mk_array *x, const int64_t (*pad_width)[2], mk_array *value, mk_pad_mode mode) {
    int nd = x->ndim;
    int64_t shape[MK_MAX_NDIM];
    for (int d = 0; d < nd; d++) {
        if (pad_width[d][0] < 0) {
            mk_error_set(MK_ERR_VALUE,
                         "Invalid low padding size (%lld) passed to pad for axis %d. "
                         "Padding sizes must be non-negative",
                         (long long)pad_width[d][0], d);
            return NULL;
        }
        if (pad_width[d][1] < 0) {
            mk_error_set(MK_ERR_VALUE,
                         "Invalid high padding size (%lld) passed to pad for axis %d. "
                         "Padding sizes must be non-negative",
                         (long long)pad_width[d][1], d);
            return NULL;
        }
        if (__builtin_add_overflow(x->shape[d], pad_width[d][0], &shape[d]) ||
            __builtin_add_overflow(shape[d], pad_width[d][1], &shape[d])) {
            mk_error_set(MK_ERR_VALUE, "[pad] Padding sizes (%lld, %lld) for axis %d overflow int64.",
                         (long long)pad_width[d][0], (long long)pad_width[d][1], d);
            return NULL;
        }
    }
    if (mode == MK_PAD_REFLECT || mode == MK_PAD_SYMMETRIC)
        for (int d = 0; d < nd; d++)
            if (x->shape[d] == 0 && (pad_width[d][0] || pad_width[d][1])) {
                mk_error_set(MK_ERR_VALUE, "[pad] Cannot pad empty axis %d using mode '%s'.", d,
                             pad_mode_names[mode]);
                return NULL;
            }
    if (nd == 0) {
        mk_incref(x);
        return x;
    }
    pad_params *pp = malloc(sizeof *pp);
    if (!pp) return mk_nomem();
    pp->mode = mode;
    memcpy(pp->pad, pad_width, nd * sizeof *pad_width);
    mk_array *ins[2] = {x, NULL}, *r;
    int nin = 1;
    if (mode == MK_PAD_CONSTANT && value) {
        if (!(ins[1] = mk_as_dtype(value, x->dtype))) {
            free(pp);
            return NULL;
        }
        nin = 2;
    }
    r = mk_node(&pad_def, pp, x->dtype, nd, shape, nin, ins);
    mk_xdecref(ins[1]);
    return r;
}

mk_array *mk_pad(mk_array *x, const int64_t (*pad_width)[2], mk_array *value) {
    return mk_pad_ex(x, pad_width, value, MK_PAD_CONSTANT);
}

/* ---------------------------------------------------------- transformation rules */

static int concat_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    int axis = *(const int *)p->params;
    mk_array *c = cots[0];
    if (!c) return 0;
    int64_t start[MK_MAX_NDIM], stop[MK_MAX_NDIM], step[MK_MAX_NDIM], pos = 0;
    for (int d = 0; d < c->ndim; d++) {
        start[d] = 0;
        stop[d] = c->shape[d];
        step[d] = 1;
    }
    for (int i = 0; i < p->ninputs; i++) {
        int64_t n = p->inputs[i]->shape[axis];
        if (want[i]) {
            start[axis] = pos;
            stop[axis] = pos + n;
            if (!(grads[i] = mk_slice(c, start, stop, step))) return -1;
        }
        pos += n;
    }
    return 0;
}

static int concat_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    int axis = *(const int *)p->params, n = p->ninputs;
    mk_arena A = {0};
    mk_array **t = calloc(n, sizeof *t);
    int rc = t ? 0 : -1;
    for (int i = 0; rc == 0 && i < n; i++) {
        t[i] = tans[i] ? tans[i] : mk_ar_zeros_like(&A, p->inputs[i]);
        if (!t[i]) rc = -1;
    }
    if (rc == 0 && !(out[0] = mk_concatenate(n, t, axis, true))) rc = -1;
    if (!t) mk_nomem();
    free(t);
    mk_ar_free(&A);
    return rc;
}

static int concat_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    int axis = *(const int *)p->params, n = p->ninputs;
    int64_t B = 1;
    for (int i = 0; i < n; i++)
        if (axes[i] >= 0) B = in[i]->shape[axes[i]];
    mk_arena A = {0};
    mk_array **t = calloc(n, sizeof *t);
    int rc = t ? 0 : -1;
    for (int i = 0; rc == 0 && i < n; i++)
        if (!(t[i] = mk_ar_batch_front(&A, in[i], axes[i], B))) rc = -1;
    if (rc == 0 && !(outs[0] = mk_concatenate(n, t, axis + 1, true))) rc = -1;
    out_axes[0] = 0;
    if (!t) mk_nomem();
    free(t);
    mk_ar_free(&A);
    return rc;
}

static int pad_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const pad_params *pp = p->params;
    mk_array *x = p->inputs[0], *c = cots[0];
    if (!c) return 0;
    if (pp->mode != MK_PAD_CONSTANT) {
        mk_error_set(MK_ERR_VALUE, "[Primitive::vjp] Not implemented for pad with mode %s.", pad_mode_names[pp->mode]);
        return -1;
    }
    int64_t start[MK_MAX_NDIM], stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) {
        start[d] = pp->pad[d][0];
        stop[d] = pp->pad[d][0] + x->shape[d];
        step[d] = 1;
    }
    mk_arena A = {0};
    int rc = 0;
    mk_array *inner = mk_ar_keep(&A, mk_slice(c, start, stop, step));
    if (want[0]) {
        grads[0] = mk_ar_out(inner);
        if (!grads[0]) rc = -1;
    }
    if (rc == 0 && p->ninputs > 1 && want[1]) {
        /* the padding value: every element outside x */
        mk_array *v = p->inputs[1];
        mk_array *g = mk_ar_sub(&A, mk_ar_sum(&A, c, -1, NULL, false), mk_ar_sum(&A, inner, -1, NULL, false));
        grads[1] = mk_ar_out(mk_ar_broadcast(&A, mk_ar_scale(&A, g, 1.0 / (v->size ? (double)v->size : 1.0)), v->ndim, v->shape));
        if (!grads[1]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

static int pad_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const pad_params *pp = p->params;
    if (p->ninputs > 1 && axes[1] >= 0) {
        mk_error_set(MK_ERR_VALUE, "[Primitive::vmap] Not implemented for pad with a batched padding value.");
        return -1;
    }
    mk_arena A = {0};
    mk_array *x = mk_ar_batch_front(&A, in[0], axes[0], 1);
    int64_t pw[MK_MAX_NDIM][2];
    pw[0][0] = pw[0][1] = 0;
    for (int d = 0; d < p->inputs[0]->ndim && d + 1 < MK_MAX_NDIM; d++) {
        pw[d + 1][0] = pp->pad[d][0];
        pw[d + 1][1] = pp->pad[d][1];
    }
    outs[0] = x ? mk_pad_ex(x, (const int64_t(*)[2])pw, p->ninputs > 1 ? in[1] : NULL, pp->mode) : NULL;
    out_axes[0] = 0;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_concat(const mk_prim *p, int *axis) {
    if (p->op != &concat_def) return false;
    *axis = *(const int *)p->params;
    return true;
}

/* export (export.c): a pad's mode and widths */
bool mk_xp_pad(const mk_prim *p, int *mode, int64_t (*pad)[2]) {
    if (p->op != &pad_def) return false;
    const pad_params *pp = p->params;
    *mode = (int)pp->mode;
    memcpy(pad, pp->pad, sizeof pp->pad);
    return true;
}
