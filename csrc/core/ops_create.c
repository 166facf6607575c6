/* Creation ops: full, zeros, ones, arange, linspace, eye, tri, tril, triu.
 *
 * Each is a lazy node whose evaluator fills a fresh buffer, split over the
 * thread pool. Constant fills copy one element pattern (one loop per element
 * size); arange, linspace and the triangular ops have a kernel per dtype or
 * per row. The numbers are MLX's: arange accumulates start + step in the
 * output dtype (so float16 arange stalls at 2048 as MLX's does), linspace is
 * (1 - t) * start + t * stop in float32 (float64 for float64 output). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "iter.h"
#include "ops.h"
#include "pool.h"
#include "types.h"

/* ------------------------------------------------------------ pattern fill */

/* Fills n elements of esz bytes (1, 2, 4, 8 or 16) with the pattern. */
static void fill_pattern(void *dst, const void *pat, size_t esz, int64_t n) {
    switch (esz) {
    case 1: memset(dst, *(const uint8_t *)pat, (size_t)n); break;
#define FILL(T)                                                                                        \
    {                                                                                                  \
        T v, *d = dst;                                                                                 \
        memcpy(&v, pat, sizeof v);                                                                     \
        for (int64_t i = 0; i < n; i++) d[i] = v;                                                      \
    }                                                                                                  \
    break;
    case 2: FILL(uint16_t)
    case 4: FILL(uint32_t)
    case 8: FILL(uint64_t)
#undef FILL
    default:
        for (int64_t i = 0; i < n; i++) memcpy((char *)dst + i * esz, pat, esz);
    }
}

static bool is_zero_pattern(const unsigned char *pat, size_t esz) {
    for (size_t i = 0; i < esz; i++)
        if (pat[i]) return false;
    return true;
}

typedef struct {
    char *dst;
    const unsigned char *pat;
    size_t esz;
    bool zero;
} fill_ctx;

static void fill_range(void *c, int64_t b, int64_t e) {
    fill_ctx *f = c;
    if (f->zero)
        memset(f->dst + b * f->esz, 0, (size_t)(e - b) * f->esz);
    else
        fill_pattern(f->dst + b * f->esz, f->pat, f->esz, e - b);
}

/* Fills the whole of a fresh row-contiguous output with one value. */
static void fill_all(mk_array *out, const unsigned char *pat) {
    size_t esz = mk_dtype_size(out->dtype);
    fill_ctx f = {mk_data(out), pat, esz, is_zero_pattern(pat, esz)};
    mk_parallel_for(out->size, MK_GRAIN * 4, fill_range, &f);
}

/* The bytes of value v in dtype t. */
static void pattern_f64(mk_dtype t, double v, unsigned char pat[16]) {
    memset(pat, 0, 16);
    mk_put_f64(t, pat, v);
}

/* ------------------------------------------------------- fill (constant) */

typedef struct {
    _Alignas(16) unsigned char pat[16];
} fill_params;

static int fill_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)in;
    if (mk_alloc_out(out[0]) < 0) return -1;
    fill_all(out[0], ((fill_params *)p->params)->pat);
    return 0;
}

static const mk_opdef fill_def = {"full", fill_eval, NULL};

static int check_dims(const char *op, int ndim, const int64_t *shape) {
    if (ndim > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[%s] Arrays of more than %d dimensions are not supported.", op, MK_MAX_NDIM);
        return -1;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            mk_error_set(MK_ERR_VALUE, "[%s] Negative dimensions not allowed.", op);
            return -1;
        }
    return 0;
}

static mk_array *fill_node(int ndim, const int64_t *shape, mk_dtype dtype, double v) {
    if (check_dims("full", ndim, shape) < 0) return NULL;
    fill_params *fp = malloc(sizeof *fp);
    if (!fp) return mk_nomem();
    pattern_f64(dtype, v, fp->pat);
    return mk_node(&fill_def, fp, dtype, ndim, shape, 0, NULL);
}

mk_array *mk_zeros(int ndim, const int64_t *shape, mk_dtype dtype) { return fill_node(ndim, shape, dtype, 0.0); }
mk_array *mk_ones(int ndim, const int64_t *shape, mk_dtype dtype) { return fill_node(ndim, shape, dtype, 1.0); }

/* ------------------------------------------------------ full (from array) */

typedef struct {
    mk_cast_fn fn;
    const char *src;
    char *dst;
    size_t isz, osz;
} copy_ctx;

static void copy_rows(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    copy_ctx *u = c;
    u->fn(u->src + off[1] * u->isz, st[1], u->dst + off[0] * u->osz, 1, n);
}

static int full_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    const mk_array *v = in[0];
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    mk_cast_fn fn = mk_cast_table[v->dtype][o->dtype];
    if (v->size == 1) {
        _Alignas(16) unsigned char pat[16] = {0};
        fn(mk_data(v), 1, pat, 1, 1);
        fill_all(o, pat);
        return 0;
    }
    copy_ctx u = {fn, mk_data(v), mk_data(o), mk_dtype_size(v->dtype), mk_dtype_size(o->dtype)};
    int64_t vs[MK_MAX_NDIM];
    mk_broadcast_strides(v, o->ndim, o->shape, vs);
    const int64_t *strides[2] = {o->strides, vs};
    mk_iter it;
    mk_iter_init(&it, o->ndim, o->shape, 2, strides);
    mk_iter_run(&it, MK_GRAIN, copy_rows, &u);
    return 0;
}

static const mk_opdef full_def = {"full", full_eval, NULL};

mk_array *mk_full(int ndim, const int64_t *shape, mk_array *value, mk_dtype dtype) {
    if (check_dims("full", ndim, shape) < 0) return NULL;
    /* as MLX's broadcast_to(value, shape) */
    int64_t bshape[MK_MAX_NDIM];
    int bn = mk_broadcast_shapes(value->ndim, value->shape, ndim, shape, bshape);
    if (bn < 0) return NULL;
    bool same = bn == ndim;
    for (int i = 0; same && i < ndim; i++) same = bshape[i] == shape[i];
    if (!same) {
        char a[256], b[256];
        mk_error_set(MK_ERR_VALUE, "Cannot broadcast array of shape %s into shape %s.",
                     mk_shape_str(value->ndim, value->shape, a, sizeof a), mk_shape_str(ndim, shape, b, sizeof b));
        return NULL;
    }
    return mk_node(&full_def, NULL, dtype, ndim, shape, 1, &value);
}

/* ------------------------------------------------------------------ arange */

/* double -> integer conversions as x86-64 performs them (MLX's CPU kernels
 * use plain casts): 32-bit truncation for the small types and int32, 64-bit
 * truncation for uint32 and int64, and an out-of-range value gives the
 * "integer indefinite" (minimum) value. Written out so the result does not
 * depend on what the compiler does with an undefined conversion. */
static int32_t d_to_i32(double d) { return (d > -2147483649.0 && d < 2147483648.0) ? (int32_t)d : INT32_MIN; }
static int64_t d_to_i64(double d) {
    return (d >= -9223372036854775808.0 && d < 9223372036854775808.0) ? (int64_t)d : INT64_MIN;
}
static uint64_t d_to_u64(double d) {
    if (d < 9223372036854775808.0) return (uint64_t)d_to_i64(d);
    return (uint64_t)d_to_i64(d - 9223372036854775808.0) ^ (UINT64_C(1) << 63);
}
#define CONV_u8(d) (uint8_t)(uint32_t)d_to_i32(d)
#define CONV_u16(d) (uint16_t)(uint32_t)d_to_i32(d)
#define CONV_u32(d) (uint32_t)d_to_i64(d)
#define CONV_u64(d) d_to_u64(d)
#define CONV_i8(d) (int8_t)d_to_i32(d)
#define CONV_i16(d) (int16_t)d_to_i32(d)
#define CONV_i32(d) d_to_i32(d)
#define CONV_i64(d) d_to_i64(d)

typedef struct {
    double start, step;
} arange_params;

typedef struct {
    void *dst;
    uint64_t start, step; /* in the output's integer type, widened */
} arange_int_ctx;

/* Integers: start + i * step with wraparound, which is what MLX's repeated
 * addition in the integer type gives, so the rows can be split freely. */
#define ARANGE_INT(E, s, S, R)                                                                         \
    static void arange_rows_##s(void *c, int64_t b, int64_t e) {                                       \
        arange_int_ctx *a = c;                                                                         \
        S *d = a->dst;                                                                                 \
        uint64_t v = a->start + (uint64_t)b * a->step;                                                 \
        for (int64_t i = b; i < e; i++, v += a->step) d[i] = (S)v;                                     \
    }                                                                                                  \
    static void arange_##s(mk_array *o, double start, double step) {                                   \
        S s0 = CONV_##s(start), s1 = CONV_##s(start + step);                                           \
        arange_int_ctx a = {mk_data(o), (uint64_t)s0, (uint64_t)s1 - (uint64_t)s0};                    \
        mk_parallel_for(o->size, MK_GRAIN * 4, arange_rows_##s, &a);                                   \
    }
MK_INT_TYPES(ARANGE_INT)

/* Floating types: the running sum of MLX's kernel, rounded to the dtype at
 * every step. Sequential, as the rounding makes each value depend on the
 * previous one. */
#define ARANGE_FLOAT(E, s, S, R)                                                                       \
    static void arange_##s(mk_array *o, double start, double step) {                                   \
        S *d = mk_data(o), v, nx;                                                                      \
        MK_STORE_##s(&v, (R)start);                                                                    \
        MK_STORE_##s(&nx, (R)(start + step));                                                          \
        S st;                                                                                          \
        MK_STORE_##s(&st, MK_LOAD_##s(&nx) - MK_LOAD_##s(&v));                                         \
        R acc = MK_LOAD_##s(&v), inc = MK_LOAD_##s(&st);                                               \
        for (int64_t i = 0; i < o->size; i++) {                                                        \
            MK_STORE_##s(&d[i], acc);                                                                  \
            S t;                                                                                       \
            MK_STORE_##s(&t, acc + inc);                                                               \
            acc = MK_LOAD_##s(&t);                                                                     \
        }                                                                                              \
    }
MK_FLOAT_TYPES(ARANGE_FLOAT)

static void arange_c64(mk_array *o, double start, double step) {
    mk_c64 *d = mk_data(o);
    float acc = (float)start, inc = (float)(start + step) - acc;
    for (int64_t i = 0; i < o->size; i++, acc += inc) d[i] = acc;
}

typedef void (*arange_fn)(mk_array *o, double start, double step);
#define ARANGE_ENTRY(E, s, S, R) [E] = arange_##s,
static const arange_fn arange_kernels[MK_NDTYPES] = {MK_NUMERIC_TYPES(ARANGE_ENTRY)};

static int arange_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)in;
    const arange_params *a = p->params;
    if (mk_alloc_out(out[0]) < 0) return -1;
    arange_kernels[out[0]->dtype](out[0], a->start, a->step);
    return 0;
}

static const mk_opdef arange_def = {"arange", arange_eval, NULL};

mk_array *mk_arange(double start, double stop, double step, mk_dtype dtype) {
    if (dtype == MK_BOOL) {
        mk_error_set(MK_ERR_VALUE, "bool not supported for arange.");
        return NULL;
    }
    if (isnan(start) || isnan(step) || isnan(stop) || isinf(start) || isinf(stop)) {
        mk_error_set(MK_ERR_VALUE, "[arange] Cannot compute length.");
        return NULL;
    }
    if (step == 0) {
        mk_error_set(MK_ERR_VALUE, "[arange] step must be nonzero.");
        return NULL;
    }
    int64_t size;
    if (isinf(step)) {
        size = ((step > 0 && start < stop) || (step < 0 && start > stop)) ? 1 : 0;
    } else {
        double real = ceil((stop - start) / step);
        if (real > 2147483647.0) {
            mk_error_set(MK_ERR_VALUE, "[arange] Maximum size exceeded.");
            return NULL;
        }
        size = real > 0 ? (int64_t)real : 0;
    }
    arange_params *ap = malloc(sizeof *ap);
    if (!ap) return mk_nomem();
    ap->start = start;
    ap->step = isinf(step) ? 0 : step;
    return mk_node(&arange_def, ap, dtype, 1, &size, 0, NULL);
}

/* ---------------------------------------------------------------- linspace */

typedef struct {
    double start, stop;
    int64_t den; /* num - 1, or num without the endpoint */
    int64_t num;
} linspace_params;

typedef struct {
    const linspace_params *lp;
    char *dst;
    mk_dtype dtype;
} linspace_ctx;

#define LIN_CHUNK 512

/* t = i / den, then (1 - t) * start + t * stop, each op rounded to F as MLX's
 * separate float ops are; i is the float arange, which stops growing at
 * 2^24 (2^53 in double). Computed in chunks, then cast to the dtype. */
#define LIN_RANGE(F, fdt, cap)                                                                         \
    static void linspace_rows_##F(void *c, int64_t b, int64_t e) {                                     \
        linspace_ctx *l = c;                                                                           \
        F buf[LIN_CHUNK], den = (F)l->lp->den, s = (F)l->lp->start, t1 = (F)l->lp->stop;               \
        size_t osz = mk_dtype_size(l->dtype);                                                          \
        for (int64_t i0 = b; i0 < e; i0 += LIN_CHUNK) {                                                \
            int64_t n = e - i0 < LIN_CHUNK ? e - i0 : LIN_CHUNK;                                       \
            for (int64_t j = 0; j < n; j++) {                                                          \
                int64_t i = i0 + j;                                                                    \
                F t = (F)(i < (cap) ? i : (cap)) / den;                                                \
                F tb = (F)1 - t;                                                                       \
                F x = tb * s;                                                                          \
                F y = t * t1;                                                                          \
                buf[j] = x + y;                                                                        \
            }                                                                                          \
            mk_cast_table[fdt][l->dtype](buf, 1, l->dst + i0 * osz, 1, n);                             \
        }                                                                                              \
    }
LIN_RANGE(float, MK_FLOAT32, INT64_C(16777216))
LIN_RANGE(double, MK_FLOAT64, INT64_C(9007199254740992))

static int linspace_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)in;
    const linspace_params *lp = p->params;
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    if (lp->num == 1) {
        float v = (float)lp->start; /* MLX: array({start}) is float32 */
        mk_cast_table[MK_FLOAT32][o->dtype](&v, 1, mk_data(o), 1, 1);
        return 0;
    }
    linspace_ctx l = {lp, mk_data(o), o->dtype};
    mk_parallel_for(o->size, MK_GRAIN, o->dtype == MK_FLOAT64 ? linspace_rows_double : linspace_rows_float, &l);
    return 0;
}

static const mk_opdef linspace_def = {"linspace", linspace_eval, NULL};

mk_array *mk_linspace_ex(double start, double stop, int64_t num, bool endpoint, mk_dtype dtype) {
    if (num < 0) {
        mk_error_set(MK_ERR_VALUE, "[linspace] number of samples, %lld, must be non-negative.", (long long)num);
        return NULL;
    }
    linspace_params *lp = malloc(sizeof *lp);
    if (!lp) return mk_nomem();
    lp->start = start;
    lp->stop = stop;
    lp->num = num;
    lp->den = endpoint ? num - 1 : num;
    return mk_node(&linspace_def, lp, dtype, 1, &num, 0, NULL);
}

mk_array *mk_linspace(double start, double stop, int64_t num, mk_dtype dtype) {
    return mk_linspace_ex(start, stop, num, true, dtype);
}

/* ------------------------------------------------------------ eye and tri */

typedef struct {
    int64_t k;
    bool eye; /* eye: ones where j - i == k; tri: ones where j - i <= k */
    _Alignas(16) unsigned char one[16];
} tri_params;

typedef struct {
    const tri_params *tp;
    char *dst;
    int64_t m;
    size_t esz;
} tri_ctx;

static void tri_rows(void *c, int64_t b, int64_t e) {
    tri_ctx *t = c;
    for (int64_t i = b; i < e; i++) {
        char *row = t->dst + i * t->m * t->esz;
        memset(row, 0, (size_t)t->m * t->esz);
        int64_t j = i + t->tp->k; /* the diagonal's column */
        if (t->tp->eye) {
            if (j >= 0 && j < t->m) memcpy(row + j * t->esz, t->tp->one, t->esz);
        } else if (j >= 0) {
            fill_pattern(row, t->tp->one, t->esz, j + 1 < t->m ? j + 1 : t->m);
        }
    }
}

static int tri_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)in;
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    tri_ctx t = {p->params, mk_data(o), o->shape[1], mk_dtype_size(o->dtype)};
    int64_t grain = o->shape[1] ? MK_GRAIN / o->shape[1] + 1 : MK_GRAIN;
    mk_parallel_for(o->shape[0], grain, tri_rows, &t);
    return 0;
}

static const mk_opdef tri_def = {"tri", tri_eval, NULL};

static mk_array *tri_node(int64_t n, int64_t m, int64_t k, bool eye, mk_dtype dtype) {
    tri_params *tp = malloc(sizeof *tp);
    if (!tp) return mk_nomem();
    tp->k = k;
    tp->eye = eye;
    pattern_f64(dtype, 1.0, tp->one);
    int64_t shape[2] = {n, m};
    return mk_node(&tri_def, tp, dtype, 2, shape, 0, NULL);
}

mk_array *mk_eye(int64_t n, int64_t m, int64_t k, mk_dtype dtype) {
    if (n < 0 || m < 0) {
        mk_error_set(MK_ERR_VALUE, "[eye] N and M must be positive integers.");
        return NULL;
    }
    return tri_node(n, m, k, true, dtype);
}

mk_array *mk_tri(int64_t n, int64_t m, int64_t k, mk_dtype dtype) {
    /* MLX builds tri from aranges, so negative sizes give empty dims */
    return tri_node(n > 0 ? n : 0, m > 0 ? m : 0, k, false, dtype);
}

/* ------------------------------------------------------------ tril, triu */

typedef struct {
    int64_t k;
    bool upper;
} trimask_params;

typedef struct {
    const trimask_params *tp;
    const mk_array *x;
    char *dst;
    int64_t n, m;
    size_t esz;
    mk_cast_fn copy;
} trimask_ctx;

static void trimask_rows(void *c, int64_t b, int64_t e) {
    trimask_ctx *t = c;
    const mk_array *x = t->x;
    int nd = x->ndim;
    const char *src = mk_data(x);
    for (int64_t r = b; r < e; r++) {
        /* source offset of row r: batch index digits, then the row */
        int64_t q = r / t->n, i = r % t->n, off = i * x->strides[nd - 2];
        for (int d = nd - 3; d >= 0; d--) {
            off += (q % x->shape[d]) * x->strides[d];
            q /= x->shape[d];
        }
        int64_t lo, hi; /* kept columns [lo, hi) */
        if (t->tp->upper) {
            lo = i + t->tp->k;
            hi = t->m;
        } else {
            lo = 0;
            hi = i + t->tp->k + 1;
        }
        if (lo < 0) lo = 0;
        if (lo > t->m) lo = t->m;
        if (hi > t->m) hi = t->m;
        if (hi < lo) hi = lo;
        char *row = t->dst + r * t->m * t->esz;
        memset(row, 0, (size_t)lo * t->esz);
        if (hi > lo)
            t->copy(src + (off + lo * x->strides[nd - 1]) * (int64_t)t->esz, x->strides[nd - 1], row + lo * t->esz, 1,
                    hi - lo);
        memset(row + hi * t->esz, 0, (size_t)(t->m - hi) * t->esz);
    }
}

static int trimask_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    const mk_array *x = in[0];
    if (mk_alloc_out(o) < 0) return -1;
    int64_t n = x->shape[x->ndim - 2], m = x->shape[x->ndim - 1];
    if (o->size == 0) return 0;
    trimask_ctx t = {p->params, x, mk_data(o), n, m, mk_dtype_size(o->dtype), mk_cast_table[x->dtype][x->dtype]};
    int64_t rows = o->size / m;
    mk_parallel_for(rows, MK_GRAIN / m + 1, trimask_rows, &t);
    return 0;
}

static const mk_opdef trimask_def = {"tril", trimask_eval, NULL};

static mk_array *trimask(const char *name, mk_array *x, int64_t k, bool upper) {
    if (x->ndim < 2) {
        mk_error_set(MK_ERR_VALUE, "[%s] array must be at least 2-D", name);
        return NULL;
    }
    trimask_params *tp = malloc(sizeof *tp);
    if (!tp) return mk_nomem();
    tp->k = k;
    tp->upper = upper;
    return mk_node(&trimask_def, tp, x->dtype, x->ndim, x->shape, 1, &x);
}

mk_array *mk_tril(mk_array *x, int64_t k) { return trimask("tril", x, k, false); }
mk_array *mk_triu(mk_array *x, int64_t k) { return trimask("triu", x, k, true); }

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_full(const mk_prim *p) { return p->op == &full_def; }
bool mk_xp_fill(const mk_prim *p, unsigned char pat[16]) {
    if (p->op != &fill_def) return false;
    memcpy(pat, ((const fill_params *)p->params)->pat, 16);
    return true;
}
bool mk_xp_arange_int(const mk_prim *p, mk_dtype t, uint64_t *start, uint64_t *step) {
    if (p->op != &arange_def) return false;
    const arange_params *a = p->params;
    switch (t) {
#define ARANGE_START(E, s, S, R)                                                                       \
    case E: {                                                                                          \
        S s0 = CONV_##s(a->start), s1 = CONV_##s(a->start + a->step);                                  \
        *start = (uint64_t)s0;                                                                         \
        *step = (uint64_t)s1 - (uint64_t)s0;                                                           \
        return true;                                                                                   \
    }
        MK_INT_TYPES(ARANGE_START)
#undef ARANGE_START
    default: return false;
    }
}
