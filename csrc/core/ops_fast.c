/* mx.fast's reference ops: rms_norm, layer_norm, rope and
 * scaled_dot_product_attention.
 *
 * MLX's CPU back end runs these as its "fallback" graphs (fast.cpp): chains
 * of ordinary ops, each rounding to the array's dtype, with sums taken
 * sequentially in float32 (its Linux SIMD width is 1, and its matmul sums
 * each dot product in order), and its own float32 exp, sin and cos. Here each
 * op is one lazy node whose evaluator does the same arithmetic in one pass,
 * rounding where MLX's graph rounds, so results are MLX's bit for bit
 * (checked against MLX 0.32.4 on Linux). The norms' means are the exception:
 * they are mkpy's own mean() (whose float sums are blocked and more accurate
 * than MLX's sequential ones), so that a norm gives the bits of its
 * composition in mkpy, as in MLX (MLX's tests compare the two).
 *
 * Rows run in parallel on the pool. Sequential sums stay in order but still
 * run fast: attention packs
 * each kv head's keys into panels of 16 and vectorises across keys (scores)
 * and value columns (output), never along the summed axis. */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile.h"
#include "iter.h"
#include "mlx_math.h"
#include "ops.h"
#include "transforms.h"
#include "pool.h"
#include "simd.h"
#include "stream.h"
#include "types.h"

/* ------------------------------------------------------------ helpers */

/* Element offset of row r of x, rows being the row-major order of its first
 * nd dims. */
static int64_t row_offset(const mk_array *x, int nd, int64_t r) {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; d--) {
        off += (r % x->shape[d]) * x->strides[d];
        r /= x->shape[d];
    }
    return off;
}

static const char *elem_ptr(const mk_array *x, int64_t off) {
    return (const char *)mk_data(x) + off * (int64_t)mk_dtype_size(x->dtype);
}

/* Threads worth using for `work` element operations. */
static int threads_for(int64_t work, int64_t items) {
    int64_t n = work / MK_GRAIN;
    int t = mk_pool_threads();
    if (n > t) n = t;
    if (n > items) n = items;
    return n < 1 ? 1 : (int)n;
}

/* A value rounded to a low-precision dtype and back (identity otherwise). */
static inline float rnd_h(mk_dtype t, float v) {
    if (t == MK_FLOAT16) return mk_f16_to_f32(mk_f32_to_f16(v));
    if (t == MK_BFLOAT16) return mk_bf16_to_f32(mk_f32_to_bf16(v));
    return v;
}

/* float16 through F16C (x86-64 with GCC's _Float16): the same round to
 * nearest even as half.h's conversions (NaNs stay quiet with their top
 * payload bits), a few instructions instead of a dozen with branches. Kernels
 * with half arithmetic get a second instance built for AVX2/FMA/F16C, picked
 * at run time when the CPU has them. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__FLT16_MAX__)
#define MK_HAVE_F16C 1
#define F16C_ATTR __attribute__((target("avx2,fma,f16c")))
static inline F16C_ATTR float f16c_ld(const mk_f16 *p) {
    _Float16 v;
    memcpy(&v, p, 2);
    return (float)v;
}
static inline F16C_ATTR void f16c_st(mk_f16 *p, float f) {
    _Float16 v = (_Float16)f;
    memcpy(p, &v, 2);
}
static inline F16C_ATTR float f16c_rnd(float f) { return (float)(_Float16)f; }
static F16C_ATTR void f16c_load_row(const void *src, int64_t st, void *dst, int64_t dst_st, int64_t n) {
    const mk_f16 *x = src;
    float *o = dst;
    for (int64_t i = 0; i < n; i++) o[i * dst_st] = f16c_ld(&x[i * st]);
}
static bool have_f16c(void) {
    static atomic_int known = -1;
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k < 0) {
        k = mk_isa() >= MK_ISA_AVX2; /* x86-64-v3: AVX2, FMA and F16C */
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k;
}
static F16C_ATTR void f16c_store_row(const void *src, int64_t st, void *dst, int64_t dst_st, int64_t n) {
    const float *x = src;
    mk_f16 *o = dst;
    for (int64_t i = 0; i < n; i++) f16c_st(&o[i * dst_st], x[i * st]);
}
static F16C_ATTR void f16c_rnd_row(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = f16c_rnd(x[i]);
}
#define LD_F16C(p) f16c_ld(p)
#define ST_F16C(p, v) f16c_st((p), (float)(v))
#define RND_F16C(v) f16c_rnd(v)
#endif

/* The hot loops get an x86-64-v3 (AVX2, FMA) version (simd.h): fmaf becomes one instruction (the
 * same correctly rounded result); a * b + c stays unfused either way (-std=c11 turns contraction off). */

/* A float row rounded to a low-precision dtype and back. */
static void rnd_row(mk_dtype t, float *x, int64_t n) {
#ifdef MK_HAVE_F16C
    if (t == MK_FLOAT16 && have_f16c()) {
        f16c_rnd_row(x, n);
        return;
    }
#endif
    if (t == MK_FLOAT16)
        for (int64_t i = 0; i < n; i++) x[i] = mk_f16_to_f32(mk_f32_to_f16(x[i]));
    else if (t == MK_BFLOAT16)
        for (int64_t i = 0; i < n; i++) x[i] = mk_bf16_to_f32(mk_f32_to_bf16(x[i]));
}

/* The cast of mk_cast_table, through F16C for float16 <-> float32. */
static mk_cast_fn cast_fn(mk_dtype from, mk_dtype to) {
#ifdef MK_HAVE_F16C
    if (have_f16c()) {
        if (from == MK_FLOAT16 && to == MK_FLOAT32) return f16c_load_row;
        if (from == MK_FLOAT32 && to == MK_FLOAT16) return f16c_store_row;
    }
#endif
    return mk_cast_table[from][to];
}

/* ============================================================== norms */

/* MLX's fallbacks:
 *   rms_norm:   x = float32(x); y = x * rsqrt(mean(x^2) + eps)
 *   layer_norm: x = float32(x); c = x - mean(x); y = c * rsqrt(mean(c^2) + eps)
 * then y is cast to the output dtype, multiplied by the weight and added to
 * the bias in that dtype (each step rounding). Means are the sums mean()
 * makes (mk_sum_row_f32: float lanes per block into a double) times
 * float(1/n), so the fused op gives the bits of that composition in mkpy, as
 * MLX's CPU fast.rms_norm gives its composition's (whose sums are sequential
 * in float32: MLX's x86-64 CPU build has no SIMD reductions). */

typedef struct {
    int layer; /* layer_norm (else rms_norm) */
    float eps;
} norm_params;

/* y = RND((x - mu) * r), then * w, + b, stored in S. */
#define NORM_OUT(name, S, R, LD, ST, RND, ATTR)                                                        \
    ATTR static void norm_out_##name(const float *x, int64_t n, float mu, float r, const void *w_, int64_t ws, \
                             const void *b_, int64_t bs, void *o_) {                                   \
        const S *w = w_, *b = b_;                                                                      \
        S *o = o_;                                                                                     \
        if (w && b)                                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                          \
                R v = RND((x[i] - mu) * r);                                                            \
                v = RND(v * LD(&w[i * ws]));                                                           \
                ST(&o[i], v + LD(&b[i * bs]));                                                         \
            }                                                                                          \
        else if (w)                                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                          \
                R v = RND((x[i] - mu) * r);                                                            \
                ST(&o[i], v * LD(&w[i * ws]));                                                         \
            }                                                                                          \
        else if (b)                                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                          \
                R v = RND((x[i] - mu) * r);                                                            \
                ST(&o[i], v + LD(&b[i * bs]));                                                         \
            }                                                                                          \
        else                                                                                           \
            for (int64_t i = 0; i < n; i++) ST(&o[i], (x[i] - mu) * r);                                \
    }
#define RND_F16(v) mk_f16_to_f32(mk_f32_to_f16(v))
#define RND_BF16(v) mk_bf16_to_f32(mk_f32_to_bf16(v))
#define RND_F32(v) (v)
#define RND_F64(v) ((double)(v))
#define NO_ATTR
NORM_OUT(f16, mk_f16, float, MK_LOAD_f16, MK_STORE_f16, RND_F16, NO_ATTR)
NORM_OUT(bf16, mk_bf16, float, MK_LOAD_bf16, MK_STORE_bf16, RND_BF16, NO_ATTR)
NORM_OUT(f32, float, float, MK_LOAD_f32, MK_STORE_f32, RND_F32, NO_ATTR)
NORM_OUT(f64, double, double, MK_LOAD_f64, MK_STORE_f64, RND_F64, NO_ATTR)
#ifdef MK_HAVE_F16C
NORM_OUT(f16c, mk_f16, float, LD_F16C, ST_F16C, RND_F16C, F16C_ATTR)
#endif

typedef void (*norm_out_fn)(const float *x, int64_t n, float mu, float r, const void *w, int64_t ws, const void *b,
                            int64_t bs, void *o);
static const norm_out_fn norm_out[MK_NDTYPES] = {
    [MK_FLOAT16] = norm_out_f16, [MK_BFLOAT16] = norm_out_bf16, [MK_FLOAT32] = norm_out_f32,
    [MK_FLOAT64] = norm_out_f64,
};

/* The terms of the variance's sum: (x - mu)^2, each rounded to float. */
static void norm_terms(const float *x, int64_t n, float mu, float *t) {
    for (int64_t i = 0; i < n; i++) {
        float d = x[i] - mu;
        t[i] = d * d;
    }
}

typedef struct {
    const norm_params *p;
    const mk_array *x, *w, *b;
    mk_array *out;
    int64_t n, rows, st;
    float *tmp;   /* 2 * n floats per thread: the row in float32, the terms of its sum */
    float invn;
} norm_ctx;

static void norm_job(void *c_, int ith, int nth) {
    const norm_ctx *c = c_;
    const int64_t n = c->n;
    const mk_array *x = c->x;
    int nd = x->ndim - 1;
    bool direct = x->dtype == MK_FLOAT32 && c->st == 1;
    mk_cast_fn to_f32 = cast_fn(x->dtype, MK_FLOAT32);
    norm_out_fn out_fn = norm_out[c->out->dtype];
#ifdef MK_HAVE_F16C
    if (c->out->dtype == MK_FLOAT16 && have_f16c()) out_fn = norm_out_f16c;
#endif
    size_t osz = mk_dtype_size(c->out->dtype);
    const void *w = c->w ? mk_data(c->w) : NULL, *b = c->b ? mk_data(c->b) : NULL;
    int64_t ws = c->w ? c->w->strides[0] : 0, bs = c->b ? c->b->strides[0] : 0;
    float *row = c->tmp + (size_t)ith * 2 * n, *terms = row + n;
    int64_t r0 = c->rows * ith / nth, r1 = c->rows * (ith + 1) / nth;
    for (int64_t r = r0; r < r1; r++) {
        const char *src = elem_ptr(x, row_offset(x, nd, r));
        const float *p = (const float *)src;
        if (!direct) {
            to_f32(src, c->st, row, 1, n);
            p = row;
        }
        /* sums as mean() makes them (mk_sum_row_f32), times float(1/n) */
        float mu = c->p->layer ? mk_sum_row_f32(p, n, c->rows) * c->invn : 0.0f;
        norm_terms(p, n, mu, terms);
        float var = mk_sum_row_f32(terms, n, c->rows) * c->invn + c->p->eps;
        float rs = 1.0f / sqrtf(var);
        out_fn(p, n, mu, rs, w, ws, b, bs, (char *)mk_data(c->out) + r * n * (int64_t)osz);
    }
}

static int norm_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const norm_params *np_ = p->params;
    const mk_array *x = in[0];
    if (mk_alloc_out(out[0]) < 0) return -1;
    if (x->size == 0) return 0;
    norm_ctx c;
    memset(&c, 0, sizeof c);
    c.p = np_;
    c.x = x;
    c.w = p->ninputs > 1 && in[1]->ndim == 1 ? in[1] : NULL;
    c.b = p->ninputs > 2 && in[2]->ndim == 1 ? in[2] : NULL;
    c.out = out[0];
    c.n = x->shape[x->ndim - 1];
    c.rows = x->size / c.n;
    c.st = x->strides[x->ndim - 1];
    c.invn = (float)(1.0 / (double)c.n);
    int nth = threads_for(x->size * 4, c.rows);
    c.tmp = malloc((size_t)nth * 2 * c.n * sizeof(float));
    if (!c.tmp) {
        mk_nomem();
        return -1;
    }
    mk_parallel(nth, norm_job, &c);
    free(c.tmp);
    return 0;
}

static int norm_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int norm_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int norm_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef norm_def = {"norm", norm_eval, NULL, norm_vjp, norm_jvp, norm_vmap, false};

/* The shared checks of rms_norm and layer_norm for weight or bias `a`
 * (`what` is how MLX names it in the message). */
static int check_affine(const char *op, const char *what, const mk_array *a, const mk_array *x) {
    if (!a) return 0;
    if (a->ndim != 1) {
        mk_error_set(MK_ERR_VALUE, "[%s] %s must have 1 dimension but has %d dimensions.", op, what, a->ndim);
        return -1;
    }
    if (a->size != x->shape[x->ndim - 1]) {
        mk_error_set(MK_ERR_VALUE, "[%s] %s must have the same size as the last dimension of x but has %lld elements.",
                     op, what, (long long)a->size);
        return -1;
    }
    return 0;
}

static mk_array *norm_node(const char *op, int layer, mk_array *x, mk_array *w, mk_array *b, float eps) {
    if (x->ndim == 0) {
        mk_error_set(MK_ERR_VALUE, "[%s] Input must have at least 1 dimension but got input with 0 dimensions.", op);
        return NULL;
    }
    if (check_affine(op, layer ? "weight" : "(*weight)", w, x) < 0) return NULL;
    if (check_affine(op, "bias", b, x) < 0) return NULL;
    /* as MLX: the dtype comes from x and the weight (and the bias with a weight) */
    mk_dtype t = x->dtype;
    if (w) {
        t = mk_promote(t, w->dtype);
        if (b) t = mk_promote(t, b->dtype);
    }
    if (!mk_is_float(t)) {
        mk_error_set(MK_ERR_VALUE, "[%s] Received unsupported type %s.", op, mk_dtype_name(t));
        return NULL;
    }
    norm_params *np_ = malloc(sizeof *np_);
    if (!np_) return mk_nomem();
    np_->layer = layer;
    np_->eps = eps;
    mk_array *in[3] = {NULL, NULL, NULL};
    mk_array *r = NULL;
    int n = 1;
    in[0] = mk_is_float(x->dtype) ? (mk_incref(x), x) : mk_astype(x, MK_FLOAT32);
    if (!in[0]) goto error;
    if (w || b) {
        /* a missing weight before a bias is a 0-d placeholder the evaluator skips */
        in[1] = w ? mk_as_dtype(w, t) : mk_scalar_f64(t, 1.0);
        if (!in[1]) goto error;
        n = 2;
    }
    if (b) {
        in[2] = mk_as_dtype(b, t);
        if (!in[2]) goto error;
        n = 3;
    }
    r = mk_node(&norm_def, np_, t, x->ndim, x->shape, n, in);
    np_ = NULL;
error:
    free(np_);
    for (int i = 0; i < 3; i++) mk_xdecref(in[i]);
    return r;
}

mk_array *mk_rms_norm(mk_array *x, mk_array *weight, float eps) {
    return norm_node("rms_norm", 0, x, weight, NULL, eps);
}

mk_array *mk_layer_norm(mk_array *x, mk_array *weight, mk_array *bias, float eps) {
    return norm_node("layer_norm", 1, x, weight, bias, eps);
}

/* =============================================================== rope */

/* MLX's fallback, with x seen as (B, N, T, D) (a 3-d x gets N = 1, more dims
 * are folded into N):
 *   pos = (float(t) + float(offset[b])) * scale
 *   inv = exp(-i * float(log(base) / (dims / 2)))  or  1 / freqs
 *   cos, sin = cos(pos * inv), sin(pos * inv), rounded to x's dtype
 *   out1 = x1 * cos - x2 * sin;  out2 = x1 * sin + x2 * cos   (in x's dtype)
 * x1, x2 being the even and odd features (traditional) or the two halves of
 * the first `dims`; the features past dims are copied. The cos/sin table is
 * built once per (offset, position) and shared by every head. */

typedef struct {
    int64_t dims;
    bool traditional, has_freqs;
    float base, scale;
} rope_params;

/* One row: half pairs (x1 at i * s1, x2 at i * s1 + d2), the rest copied. */
#define ROPE_ROW(name, S, R, LD, ST, RND, ATTR)                                                        \
    ATTR static void rope_row_##name(const void *x_, int64_t st, void *o_, int64_t n, int64_t half, bool trad, \
                             const float *cs, const float *sn) {                                       \
        const S *x = x_;                                                                               \
        S *o = o_;                                                                                     \
        if (!trad && st == 1) {                                                                        \
            for (int64_t i = 0; i < half; i++) {                                                       \
                R x1 = LD(&x[i]), x2 = LD(&x[i + half]);                                               \
                R c = cs[i], z = sn[i];                                                                \
                ST(&o[i], RND(x1 * c) - RND(x2 * z));                                                  \
                ST(&o[i + half], RND(x1 * z) + RND(x2 * c));                                           \
            }                                                                                          \
        } else {                                                                                       \
            int64_t s1 = trad ? 2 : 1, d2 = trad ? 1 : half;                                           \
            for (int64_t i = 0; i < half; i++) {                                                       \
                int64_t i1 = i * s1, i2 = i1 + d2;                                                     \
                R x1 = LD(&x[i1 * st]), x2 = LD(&x[i2 * st]);                                          \
                R c = cs[i], z = sn[i];                                                                \
                ST(&o[i1], RND(x1 * c) - RND(x2 * z));                                                 \
                ST(&o[i2], RND(x1 * z) + RND(x2 * c));                                                 \
            }                                                                                          \
        }                                                                                              \
        for (int64_t i = 2 * half; i < n; i++) o[i] = x[i * st];                                       \
    }
ROPE_ROW(f16, mk_f16, float, MK_LOAD_f16, MK_STORE_f16, RND_F16, NO_ATTR)
ROPE_ROW(bf16, mk_bf16, float, MK_LOAD_bf16, MK_STORE_bf16, RND_BF16, NO_ATTR)
ROPE_ROW(f32, float, float, MK_LOAD_f32, MK_STORE_f32, RND_F32, NO_ATTR)
ROPE_ROW(f64, double, double, MK_LOAD_f64, MK_STORE_f64, RND_F64, NO_ATTR)
#ifdef MK_HAVE_F16C
ROPE_ROW(f16c, mk_f16, float, LD_F16C, ST_F16C, RND_F16C, F16C_ATTR)
#endif

typedef void (*rope_row_fn)(const void *x, int64_t st, void *o, int64_t n, int64_t half, bool trad, const float *cs,
                            const float *sn);
static const rope_row_fn rope_rows[MK_NDTYPES] = {
    [MK_FLOAT16] = rope_row_f16, [MK_BFLOAT16] = rope_row_bf16, [MK_FLOAT32] = rope_row_f32,
    [MK_FLOAT64] = rope_row_f64,
};

typedef struct {
    const rope_params *p;
    const mk_array *x;
    mk_array *out;
    int64_t n, half, T, rows, rows_per_b, noff;
    const float *inv, *off;
    float *cs, *sn; /* (noff * T) rows of half values, or NULL: computed per row */
    atomic_int fail;
} rope_ctx;

/* cos and sin (rounded to x's dtype) for offset ob at position t. */
MK_SIMD_CLONES(static void, rope_angles, (const rope_ctx *c, int64_t ob, int64_t t, float *cs, float *sn), (c, ob, t, cs, sn), {
    mk_dtype dt = c->x->dtype;
    float pos = ((float)t + c->off[ob]) * c->p->scale;
    for (int64_t i = 0; i < c->half; i++) {
        float th = pos * c->inv[i];
        cs[i] = rnd_h(dt, mk_mlx_cosf(th));
        sn[i] = rnd_h(dt, mk_mlx_sinf(th));
    }
})

static void rope_table(void *c_, int64_t begin, int64_t end) {
    rope_ctx *c = c_;
    for (int64_t row = begin; row < end; row++)
        rope_angles(c, row / c->T, row % c->T, c->cs + row * c->half, c->sn + row * c->half);
}

static void rope_apply(void *c_, int64_t begin, int64_t end) {
    rope_ctx *c = c_;
    const mk_array *x = c->x;
    rope_row_fn fn = rope_rows[x->dtype];
#ifdef MK_HAVE_F16C
    if (x->dtype == MK_FLOAT16 && have_f16c()) fn = rope_row_f16c;
#endif
    size_t sz = mk_dtype_size(x->dtype);
    int64_t st = x->strides[x->ndim - 1];
    float *own = c->cs ? NULL : malloc(2 * c->half * sizeof *own + 1);
    if (!c->cs && !own) {
        atomic_store(&c->fail, 1);
        return;
    }
    for (int64_t r = begin; r < end; r++) {
        int64_t ob = c->noff > 1 ? r / c->rows_per_b : 0, t = r % c->T;
        const float *cs, *sn;
        if (own) {
            rope_angles(c, ob, t, own, own + c->half);
            cs = own;
            sn = own + c->half;
        } else {
            cs = c->cs + (ob * c->T + t) * c->half;
            sn = c->sn + (ob * c->T + t) * c->half;
        }
        fn(elem_ptr(x, row_offset(x, x->ndim - 1, r)), st, (char *)mk_data(c->out) + r * c->n * (int64_t)sz, c->n,
           c->half, c->p->traditional, cs, sn);
    }
    free(own);
}

static int rope_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const rope_params *rp = p->params;
    const mk_array *x = in[0], *offset = in[1];
    if (mk_alloc_out(out[0]) < 0) return -1;
    if (x->size == 0) return 0;
    rope_ctx c;
    memset(&c, 0, sizeof c);
    c.p = rp;
    c.x = x;
    c.out = out[0];
    c.n = x->shape[x->ndim - 1];
    c.T = x->shape[x->ndim - 2];
    c.half = rp->dims / 2;
    c.rows = x->size / c.n;
    c.rows_per_b = c.rows / x->shape[0];
    c.noff = offset->size;
    atomic_init(&c.fail, 0);
    /* a table of angles shared by the heads; one head computes its own */
    bool table = c.rows_per_b / c.T > 1;
    int rc = -1;
    float *inv = malloc(c.half * sizeof *inv + 1);
    float *off = malloc(c.noff * sizeof *off + 1);
    float *cs = table ? malloc((size_t)c.noff * c.T * c.half * 2 * sizeof *cs + 1) : NULL;
    if (!inv || !off || (table && !cs)) goto done;
    for (int64_t k = 0; k < c.noff; k++) {
        const char *e = elem_ptr(offset, offset->ndim ? k * offset->strides[0] : 0);
        /* int32 or uint32, made float as MLX's add with a float32 arange does */
        off[k] = offset->dtype == MK_UINT32 ? (float)*(const uint32_t *)e : (float)*(const int32_t *)e;
    }
    if (rp->has_freqs) {
        const mk_array *f = in[2];
        const float *fd = mk_data(f);
        for (int64_t i = 0; i < c.half; i++) inv[i] = 1.0f / fd[i * f->strides[0]];
    } else {
        float coef = logf(rp->base) / (float)c.half;
        for (int64_t i = 0; i < c.half; i++) inv[i] = mk_mlx_expf(-(float)i * coef);
    }
    c.inv = inv;
    c.off = off;
    if (table) {
        c.cs = cs;
        c.sn = cs + (size_t)c.noff * c.T * c.half;
        mk_parallel_for(c.noff * c.T, 2048 / (c.half + 1) + 1, rope_table, &c);
    }
    mk_parallel_for(c.rows, MK_GRAIN / c.n + 1, rope_apply, &c);
    rc = atomic_load(&c.fail) ? -1 : 0;
done:
    if (rc < 0) mk_nomem();
    free(inv);
    free(off);
    free(cs);
    return rc;
}

/* rope rotates each feature pair by an angle linear in pos: its transpose is
 * the rotation by minus that angle, i.e. rope with -scale (cos is even, sin
 * odd, so the rounded table is the same up to sin's sign). Linear in x: the
 * jvp is rope of the tangent. No gradient flows to offset or freqs. */
static int rope_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const rope_params *rp = p->params;
    if (!want[0] || !cots[0]) return 0;
    grads[0] = mk_rope(cots[0], rp->dims, rp->traditional, !rp->has_freqs, rp->base, -rp->scale, p->inputs[1],
                       rp->has_freqs ? p->inputs[2] : NULL);
    return grads[0] ? 0 : -1;
}

static int rope_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    const rope_params *rp = p->params;
    if (!tans[0]) return 0;
    out[0] = mk_rope(tans[0], rp->dims, rp->traditional, !rp->has_freqs, rp->base, rp->scale, p->inputs[1],
                     rp->has_freqs ? p->inputs[2] : NULL);
    return out[0] ? 0 : -1;
}

/* the batch axis goes to position 1: x's first dim (which per-batch offsets
 * follow) stays first, the batch folds into the heads */
static int rope_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const rope_params *rp = p->params;
    if (axes[1] >= 0 || (p->ninputs > 2 && axes[2] >= 0)) {
        mk_error_set(MK_ERR_VALUE, "[Primitive::vmap] Not implemented for rope.");
        return -1;
    }
    mk_array *x = in[0], *moved = NULL;
    if (axes[0] != 1 && !(x = moved = mk_moveaxis(in[0], axes[0], 1))) return -1;
    outs[0] = mk_rope(x, rp->dims, rp->traditional, !rp->has_freqs, rp->base, rp->scale, in[1],
                      rp->has_freqs ? in[2] : NULL);
    mk_xdecref(moved);
    out_axes[0] = 1;
    return outs[0] ? 0 : -1;
}

static const mk_opdef rope_def = {"rope", rope_eval, NULL, rope_vjp, rope_jvp, rope_vmap, false};

mk_array *mk_rope(mk_array *x, int64_t dims, bool traditional, bool has_base, float base, float scale,
                  mk_array *offset, mk_array *freqs) {
    char sb[256];
    if (freqs && has_base) {
        mk_error_set(MK_ERR_VALUE, "[rope] Only one of base or freqs can have a value.");
        return NULL;
    }
    if (!freqs && !has_base) {
        mk_error_set(MK_ERR_VALUE, "[rope] Neither base nor freqs has a value.");
        return NULL;
    }
    if (x->ndim < 3) {
        mk_error_set(MK_ERR_VALUE, "[rope] Input must have at least 3 dimensions but got input with %d dimensions.",
                     x->ndim);
        return NULL;
    }
    if (!mk_is_float(x->dtype)) {
        mk_error_set(MK_ERR_VALUE, "[rope] Input must be a floating type but got %s.", mk_dtype_name(x->dtype));
        return NULL;
    }
    if (offset->ndim > 1) {
        mk_error_set(MK_ERR_VALUE, "[rope] offset must have at most one dimension but has shape %s.",
                     mk_shape_str(offset->ndim, offset->shape, sb, sizeof sb));
        return NULL;
    }
    if (offset->size != 1 && offset->size != x->shape[0]) {
        mk_error_set(MK_ERR_VALUE, "[rope] offset must be a scalar or vector with %lld elements but has shape %s.",
                     (long long)x->shape[0], mk_shape_str(offset->ndim, offset->shape, sb, sizeof sb));
        return NULL;
    }
    if (!mk_is_integral(offset->dtype)) {
        mk_error_set(MK_ERR_VALUE, "[rope] offset must be an integer but got type %s.", mk_dtype_name(offset->dtype));
        return NULL;
    }
    if (dims <= 0) {
        mk_error_set(MK_ERR_VALUE, "[rope] dims must be positive but got %lld.", (long long)dims);
        return NULL;
    }
    if (dims % 2 != 0) {
        mk_error_set(MK_ERR_VALUE, "[rope] dims must be even but got %lld.", (long long)dims);
        return NULL;
    }
    if (dims > x->shape[x->ndim - 1]) {
        mk_error_set(MK_ERR_VALUE, "[rope] dims must not exceed the input's last dimension (%lld) but got %lld.",
                     (long long)x->shape[x->ndim - 1], (long long)dims);
        return NULL;
    }
    if (freqs && (freqs->ndim != 1 || freqs->shape[0] != dims / 2)) {
        mk_error_set(MK_ERR_VALUE, "[rope] freqs must be one dimensional with size %lld but got shape %s.",
                     (long long)(dims / 2), mk_shape_str(freqs->ndim, freqs->shape, sb, sizeof sb));
        return NULL;
    }
    rope_params *rp = malloc(sizeof *rp);
    if (!rp) return mk_nomem();
    rp->dims = dims;
    rp->traditional = traditional;
    rp->has_freqs = freqs != NULL;
    rp->base = has_base ? base : 1.0f;
    rp->scale = scale;
    mk_array *in[3] = {x, NULL, NULL};
    mk_array *r = NULL;
    /* offsets other than 4-byte integers become int32, as MLX's */
    in[1] = mk_dtype_size(offset->dtype) == 4 ? (mk_incref(offset), offset) : mk_astype(offset, MK_INT32);
    if (!in[1]) goto error;
    if (freqs) {
        in[2] = mk_as_dtype(freqs, MK_FLOAT32);
        if (!in[2]) goto error;
    }
    r = mk_node(&rope_def, rp, x->dtype, x->ndim, x->shape, freqs ? 3 : 2, in);
    rp = NULL;
error:
    free(rp);
    mk_xdecref(in[1]);
    mk_xdecref(in[2]);
    return r;
}

/* ========================================================== attention */

/* MLX's fallback, in the inputs' promoted dtype t:
 *   q = t(scale) * q;  s = q @ k^T                (t; GQA: head h uses kv head h / rep)
 *   s = where(mask, s, lowest(t))  or  s + mask   (causal: key j <= i + Tk - Tq)
 *   p = softmax(s (with the sink logit first), precise) (float32 sums, MLX's exp)
 *   out = p @ v
 * MLX's CPU matmul sums each dot product in order (in float32 for float16
 * and bfloat16, rounding once; in double for float64), and so does this.
 * Work items are blocks of up to SDPA_QB query rows sharing a kv head (GQA
 * heads together). Keys are packed into panels of SDPA_JW (feature-major)
 * so scores come from register tiles over keys, summing along the features
 * in order; p @ v uses tiles over value columns, summing over keys in order.
 * Panels are packed once per call when several blocks share them, else
 * inside the block (decoding). With finite values, trailing zero
 * probabilities (causal and masked keys) are skipped: they add exact zeros. */

typedef struct {
    float scale;
    bool causal, has_mask, mask_bool, has_sinks;
} sdpa_params;

#define SDPA_QB 16 /* query rows per block */
#define SDPA_JW 16 /* keys per panel, and value columns per tile */

typedef struct {
    const sdpa_params *p;
    mk_dtype t, at; /* the dtype, and the accumulation dtype (float32 or float64) */
    int64_t B, Nq, Nkv, rep, Tq, Tk, D, Dv;
    int64_t npan, Tkp; /* key panels of SDPA_JW, and Tk rounded up to them */
    const mk_array *q, *k, *v, *mask;
    mk_array *out;
    void *kt;        /* per (b, kv head): npan panels of (D, SDPA_JW) keys in at, zero padded */
    void *va;        /* (B * Nkv, Tk, Dv) in at, or NULL when v is used in place */
    bool *vfinite;   /* per (b, kv head): trailing p == 0 terms of p @ v may be skipped */
    double *sinkv;   /* Nq sink logits, or NULL */
    double scale_t;  /* scale rounded to t */
    double lowest;   /* lowest finite value of t */
    int64_t rows, nblk, nitems; /* rows = rep * Tq query rows per kv head */
    atomic_int fail;
} sdpa_ctx;

/* Keys pn * SDPA_JW... of (b, kv head) g into a panel (D, SDPA_JW) in at:
 * key by key (each read in one run), scattered into the panel's columns;
 * keys past Tk are zeros. tmp holds D values of at. */
static void sdpa_pack_panel(const sdpa_ctx *c, int64_t g, int64_t pn, void *panel, void *tmp) {
    const mk_array *k = c->k;
    const int64_t D = c->D, b = g / c->Nkv, h = g % c->Nkv;
    mk_cast_fn cast = cast_fn(k->dtype, c->at);
    for (int jj = 0; jj < SDPA_JW; jj++) {
        int64_t j = pn * SDPA_JW + jj;
        if (j < c->Tk)
            cast(elem_ptr(k, b * k->strides[0] + h * k->strides[1] + j * k->strides[2]), k->strides[3], tmp, 1, D);
        else
            memset(tmp, 0, (size_t)D * mk_dtype_size(c->at));
        if (c->at == MK_FLOAT64)
            for (int64_t d = 0; d < D; d++) ((double *)panel)[d * SDPA_JW + jj] = ((const double *)tmp)[d];
        else
            for (int64_t d = 0; d < D; d++) ((float *)panel)[d * SDPA_JW + jj] = ((const float *)tmp)[d];
    }
}

/* All panels, when several query blocks share them. */
static void sdpa_prep_k(void *c_, int64_t begin, int64_t end) {
    sdpa_ctx *c = c_;
    double *tmp = malloc((size_t)c->D * sizeof *tmp + 1);
    if (!tmp) {
        atomic_store(&c->fail, 1);
        return;
    }
    size_t psz = (size_t)c->D * SDPA_JW * mk_dtype_size(c->at);
    for (int64_t idx = begin; idx < end; idx++)
        sdpa_pack_panel(c, idx / c->npan, idx % c->npan, (char *)c->kt + idx * psz, tmp);
    free(tmp);
}

static void sdpa_prep_v(void *c_, int64_t begin, int64_t end) {
    sdpa_ctx *c = c_;
    const mk_array *v = c->v;
    mk_cast_fn cast = cast_fn(v->dtype, c->at);
    size_t asz = mk_dtype_size(c->at);
    for (int64_t idx = begin; idx < end; idx++) {
        int64_t g = idx / c->Tk, j = idx % c->Tk, b = g / c->Nkv, h = g % c->Nkv;
        const char *src = elem_ptr(v, b * v->strides[0] + h * v->strides[1] + j * v->strides[2]);
        cast(src, v->strides[3], (char *)c->va + (size_t)idx * c->Dv * asz, 1, c->Dv);
    }
}

/* Row 0 of v for (b, kv head) g, in at, and the stride between rows. */
static const void *sdpa_vbase(const sdpa_ctx *c, int64_t g, int64_t *stride) {
    if (c->va) {
        *stride = c->Dv;
        return (const char *)c->va + (size_t)g * c->Tk * c->Dv * mk_dtype_size(c->at);
    }
    const mk_array *v = c->v;
    *stride = v->strides[2];
    return elem_ptr(v, (g / c->Nkv) * v->strides[0] + (g % c->Nkv) * v->strides[1]);
}

/* MLX's maximum: a nan value wins, and a nan maximum stays. */
#define SDPA_MAX(a, b) (isnan(a) ? (a) : (a) > (b) ? (a) : (b))
static inline double mlx_exp_d(double x) { return (double)mk_mlx_expf((float)x); }
static inline void rnd_row_none(mk_dtype t, double *x, int64_t n) {
    (void)t;
    (void)x;
    (void)n;
}

/* Register tiles: two query rows times SDPA_JW keys (summing over the head
 * dimension in order), and two probability rows times SDPA_JW value columns
 * (summing over keys in order). q1/p1 may equal q0/p0 (s1/o1 then equal
 * s0/o0 and get the same values). With GCC or Clang the accumulators are
 * 16-byte vectors (SSE, NEON; VEX-encoded in the AVX2 clone). */
#if defined(__GNUC__)
typedef float sdpa_vf __attribute__((vector_size(16)));
typedef double sdpa_vd __attribute__((vector_size(16)));
#define SDPA_NOINLINE __attribute__((noinline))
/* columns [c0, c0 + 4 * lanes) of the tile: four vectors per row */
#define SDPA_TILE4(A, VT, kp, kst, x0s, x1s, n, out0, out1)                                            \
    do {                                                                                               \
        VT a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};             \
        for (int64_t d = 0; d < (n); d++) {                                                            \
            VT k0, k1, k2, k3;                                                                         \
            const A *kk = (kp) + d * (kst);                                                            \
            memcpy(&k0, kk, sizeof(VT));                                                               \
            memcpy(&k1, kk + sizeof(VT) / sizeof(A), sizeof(VT));                                      \
            memcpy(&k2, kk + 2 * sizeof(VT) / sizeof(A), sizeof(VT));                                  \
            memcpy(&k3, kk + 3 * sizeof(VT) / sizeof(A), sizeof(VT));                                  \
            const A x0 = (x0s)[d], x1 = (x1s)[d];                                                      \
            a0 = a0 + x0 * k0;                                                                         \
            a1 = a1 + x0 * k1;                                                                         \
            a2 = a2 + x0 * k2;                                                                         \
            a3 = a3 + x0 * k3;                                                                         \
            b0 = b0 + x1 * k0;                                                                         \
            b1 = b1 + x1 * k1;                                                                         \
            b2 = b2 + x1 * k2;                                                                         \
            b3 = b3 + x1 * k3;                                                                         \
        }                                                                                              \
        const size_t w = sizeof(VT) / sizeof(A);                                                       \
        memcpy((out0), &a0, sizeof(VT));                                                               \
        memcpy((out0) + w, &a1, sizeof(VT));                                                           \
        memcpy((out0) + 2 * w, &a2, sizeof(VT));                                                       \
        memcpy((out0) + 3 * w, &a3, sizeof(VT));                                                       \
        memcpy((out1), &b0, sizeof(VT));                                                               \
        memcpy((out1) + w, &b1, sizeof(VT));                                                           \
        memcpy((out1) + 2 * w, &b2, sizeof(VT));                                                       \
        memcpy((out1) + 3 * w, &b3, sizeof(VT));                                                       \
    } while (0)
#define SDPA_TILES(A, sfx, VT)                                                                         \
    MK_SIMD_CLONES(SDPA_NOINLINE static void, score_tile_##sfx, (const A *q0, const A *q1, const A *kp, int64_t D, \
                                                           A *s0, A *s1), (q0, q1, kp, D, s0, s1), {                             \
        for (int c0 = 0; c0 < SDPA_JW; c0 += 4 * (int)(sizeof(VT) / sizeof(A)))                        \
            SDPA_TILE4(A, VT, kp + c0, SDPA_JW, q0, q1, D, s0 + c0, s1 + c0);                          \
    })                                                                                                  \
    MK_SIMD_CLONES(SDPA_NOINLINE static void, pv_tile_##sfx, (const A *p0, const A *p1, const A *vb, int64_t vst, \
                                                        int64_t je, A *o0, A *o1), (p0, p1, vb, vst, je, o0, o1), {                    \
        for (int c0 = 0; c0 < SDPA_JW; c0 += 4 * (int)(sizeof(VT) / sizeof(A)))                        \
            SDPA_TILE4(A, VT, vb + c0, vst, p0, p1, je, o0 + c0, o1 + c0);                             \
    })
#else
#define SDPA_TILES(A, sfx, VT)                                                                         \
    static void score_tile_##sfx(const A *q0, const A *q1, const A *kp, int64_t D, A *s0, A *s1) {     \
        A a[SDPA_JW] = {0}, b[SDPA_JW] = {0};                                                          \
        for (int64_t d = 0; d < D; d++)                                                                \
            for (int u = 0; u < SDPA_JW; u++) {                                                        \
                a[u] = a[u] + q0[d] * kp[d * SDPA_JW + u];                                             \
                b[u] = b[u] + q1[d] * kp[d * SDPA_JW + u];                                             \
            }                                                                                          \
        memcpy(s0, a, sizeof a);                                                                       \
        memcpy(s1, b, sizeof b);                                                                       \
    }                                                                                                  \
    static void pv_tile_##sfx(const A *p0, const A *p1, const A *vb, int64_t vst, int64_t je, A *o0, A *o1) { \
        A a[SDPA_JW] = {0}, b[SDPA_JW] = {0};                                                          \
        for (int64_t j = 0; j < je; j++)                                                               \
            for (int u = 0; u < SDPA_JW; u++) {                                                        \
                a[u] = a[u] + p0[j] * vb[j * vst + u];                                                 \
                b[u] = b[u] + p1[j] * vb[j * vst + u];                                                 \
            }                                                                                          \
        memcpy(o0, a, sizeof a);                                                                       \
        memcpy(o1, b, sizeof b);                                                                       \
    }
#endif
SDPA_TILES(float, f32, sdpa_vf)
SDPA_TILES(double, f64, sdpa_vd)

#define SDPA_KERNELS(A, U, EXPMASK, sfx, EXPA, ROWRND)                                                 \
    /* whether v of each kv head is finite: no all-ones exponent anywhere */                           \
    static void sdpa_finite_##sfx(void *c_, int64_t begin, int64_t end) {                              \
        sdpa_ctx *c = c_;                                                                              \
        for (int64_t g = begin; g < end; g++) {                                                        \
            int64_t vst;                                                                               \
            const A *vb = sdpa_vbase(c, g, &vst);                                                      \
            int bad = 0;                                                                               \
            for (int64_t j = 0; j < c->Tk && !bad; j++)                                                \
                for (int64_t e = 0; e < c->Dv; e++) {                                                  \
                    U u;                                                                               \
                    memcpy(&u, vb + j * vst + e, sizeof u);                                            \
                    bad |= (u & EXPMASK) == EXPMASK;                                                   \
                }                                                                                      \
            c->vfinite[g] = !bad;                                                                      \
        }                                                                                              \
    }                                                                                                  \
                                                                                                       \
    /* One block of up to SDPA_QB query rows of one kv head (rows r of the */                          \
    /* group are head hk * rep + r / Tq, position r % Tq). */                                          \
    MK_SIMD_CLONES(static void, sdpa_block_##sfx, (const sdpa_ctx *c, int64_t item, A *Q, A *S, A *M, A *O, A *P), (c, item, Q, S, M, O, P), {      \
        const int64_t Tk = c->Tk, Tkp = c->Tkp, D = c->D, Dv = c->Dv, Tq = c->Tq;                      \
        const int64_t g = item / c->nblk, r0 = (item % c->nblk) * SDPA_QB;                             \
        const int64_t b = g / c->Nkv, hk = g % c->Nkv;                                                 \
        const int nq = (int)(c->rows - r0 < SDPA_QB ? c->rows - r0 : SDPA_QB);                         \
        const mk_array *q = c->q;                                                                      \
        const bool causal = c->p->causal;                                                              \
        const A sc = (A)c->scale_t, lowest = (A)c->lowest;                                             \
        int64_t h[SDPA_QB], i[SDPA_QB], lim[SDPA_QB], jend[SDPA_QB];                                   \
        int64_t jmax = causal ? 0 : Tk;                                                                \
        mk_cast_fn qcast = cast_fn(q->dtype, c->at);                                                   \
        for (int qi = 0; qi < nq; qi++) {                                                              \
            int64_t r = r0 + qi;                                                                       \
            h[qi] = hk * c->rep + r / Tq;                                                              \
            i[qi] = r % Tq;                                                                            \
            A *qr = Q + qi * D;                                                                        \
            qcast(elem_ptr(q, b * q->strides[0] + h[qi] * q->strides[1] + i[qi] * q->strides[2]),      \
                  q->strides[3], qr, 1, D);                                                            \
            for (int64_t d = 0; d < D; d++) qr[d] = sc * qr[d];                                        \
            ROWRND(c->t, qr, D);                                                                       \
            lim[qi] = i[qi] + Tk - Tq; /* the last key row i may see */                                \
            if (causal && lim[qi] + 1 > jmax) jmax = lim[qi] + 1 < Tk ? lim[qi] + 1 : Tk;              \
        }                                                                                              \
        /* scores, panel by panel (keys past the causal limit of every row skipped) */                 \
        /* (panels packed here when this block is the only one of its kv head) */                      \
        const A *KT = c->kt ? (const A *)c->kt + (size_t)g * c->npan * D * SDPA_JW : NULL;             \
        for (int64_t pn = 0; pn * SDPA_JW < jmax; pn++) {                                              \
            const A *kp = KT ? KT + pn * D * SDPA_JW : P;                                              \
            if (!KT) sdpa_pack_panel(c, g, pn, P, M);                                                  \
            for (int qi = 0; qi < nq; qi += 2) {                                                       \
                int q2 = qi + 1 < nq ? qi + 1 : qi;                                                    \
                score_tile_##sfx(Q + qi * D, Q + q2 * D, kp, D, S + qi * Tkp + pn * SDPA_JW,           \
                                 S + q2 * Tkp + pn * SDPA_JW);                                         \
            }                                                                                          \
        }                                                                                              \
        const bool fin = c->vfinite[g];                                                                \
        for (int qi = 0; qi < nq; qi++) {                                                              \
            A *s = S + qi * Tkp;                                                                       \
            ROWRND(c->t, s, jmax);                                                                     \
            /* the mask */                                                                             \
            if (causal) {                                                                              \
                for (int64_t j = lim[qi] + 1 > 0 ? lim[qi] + 1 : 0; j < Tk; j++) s[j] = lowest;        \
            } else if (c->p->has_mask) {                                                               \
                const mk_array *m = c->mask;                                                           \
                const char *mp = elem_ptr(m, b * m->strides[0] + h[qi] * m->strides[1] +               \
                                                 i[qi] * m->strides[2]);                               \
                cast_fn(m->dtype, c->at)(mp, m->strides[3], M, 1, Tk);                                 \
                if (c->p->mask_bool) {                                                                 \
                    for (int64_t j = 0; j < Tk; j++) s[j] = M[j] != 0 ? s[j] : lowest;                 \
                } else {                                                                               \
                    for (int64_t j = 0; j < Tk; j++) s[j] = s[j] + M[j];                               \
                    ROWRND(c->t, s, Tk);                                                               \
                }                                                                                      \
            }                                                                                          \
            /* softmax, the sink logit first */                                                        \
            A mx = -INFINITY, sum = 0, sk = 0;                                                         \
            if (c->sinkv) {                                                                            \
                sk = (A)c->sinkv[h[qi]];                                                               \
                mx = SDPA_MAX(sk, mx);                                                                 \
            }                                                                                          \
            for (int64_t j = 0; j < Tk; j++) mx = SDPA_MAX(s[j], mx);                                  \
            for (int64_t j = 0; j < Tk; j++) s[j] = EXPA(s[j] - mx);                                   \
            if (c->sinkv) sum += EXPA(sk - mx);                                                        \
            for (int64_t j = 0; j < Tk; j++) sum += s[j];                                              \
            const A inv = 1 / sum;                                                                     \
            for (int64_t j = 0; j < Tk; j++) s[j] = s[j] * inv;                                        \
            ROWRND(c->t, s, Tk);                                                                       \
            /* with finite values, trailing zero probabilities add exact zeros */                      \
            int64_t je = Tk;                                                                           \
            while (fin && je > 0 && s[je - 1] == 0) je--;                                              \
            jend[qi] = je;                                                                             \
        }                                                                                              \
        /* out = p @ v, summing over keys in order */                                                  \
        int64_t vst;                                                                                   \
        const A *vb = sdpa_vbase(c, g, &vst);                                                          \
        int64_t e0 = 0;                                                                                \
        for (; e0 + SDPA_JW <= Dv; e0 += SDPA_JW)                                                      \
            for (int qi = 0; qi < nq; qi += 2) {                                                       \
                int q2 = qi + 1 < nq ? qi + 1 : qi;                                                    \
                int64_t je = jend[qi] > jend[q2] ? jend[qi] : jend[q2];                                \
                pv_tile_##sfx(S + qi * Tkp, S + q2 * Tkp, vb + e0, vst, je, O + qi * Dv + e0,          \
                              O + q2 * Dv + e0);                                                       \
            }                                                                                          \
        if (e0 < Dv)                                                                                   \
            for (int qi = 0; qi < nq; qi++) {                                                          \
                A *restrict o = O + qi * Dv;                                                           \
                for (int64_t e = e0; e < Dv; e++) o[e] = 0;                                            \
                for (int64_t j = 0; j < jend[qi]; j++) {                                               \
                    const A pj = S[qi * Tkp + j];                                                      \
                    const A *restrict v = vb + j * vst;                                                \
                    for (int64_t e = e0; e < Dv; e++) o[e] = o[e] + pj * v[e];                         \
                }                                                                                      \
            }                                                                                          \
        mk_cast_fn ocast = cast_fn(c->at, c->t);                                                       \
        size_t osz = mk_dtype_size(c->t);                                                              \
        for (int qi = 0; qi < nq; qi++)                                                                \
            ocast(O + qi * Dv, 1,                                                                      \
                  (char *)mk_data(c->out) + (size_t)((b * c->Nq + h[qi]) * Tq + i[qi]) * Dv * osz, 1, Dv); \
    })                                                                                                  \
                                                                                                       \
    static void sdpa_job_##sfx(void *c_, int ith, int nth) {                                           \
        sdpa_ctx *c = c_;                                                                              \
        /* M (a mask row) is also the key row buffer of panel packing */                               \
        int64_t mlen = c->Tk > c->D ? c->Tk : c->D;                                                    \
        size_t n = (size_t)SDPA_QB * (c->D + c->Tkp + c->Dv) + mlen + (size_t)c->D * SDPA_JW + 1;      \
        A *buf = malloc(n * sizeof(A));                                                                \
        if (!buf) {                                                                                    \
            atomic_store(&c->fail, 1);                                                                 \
            return;                                                                                    \
        }                                                                                              \
        A *Q = buf, *S = Q + SDPA_QB * c->D, *O = S + SDPA_QB * c->Tkp, *M = O + SDPA_QB * c->Dv;      \
        A *P = M + mlen;                                                                               \
        /* blocks dealt round-robin: causal blocks further down cost more */                           \
        for (int64_t it = ith; it < c->nitems; it += nth) sdpa_block_##sfx(c, it, Q, S, M, O, P);      \
        free(buf);                                                                                     \
    }

SDPA_KERNELS(float, uint32_t, 0x7f800000u, f32, mk_mlx_expf, rnd_row)
SDPA_KERNELS(double, uint64_t, 0x7ff0000000000000u, f64, mlx_exp_d, rnd_row_none)

static int sdpa_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const sdpa_params *sp = p->params;
    if (mk_alloc_out(out[0]) < 0) return -1;
    if (out[0]->size == 0) return 0;
    sdpa_ctx c;
    memset(&c, 0, sizeof c);
    int n = 3;
    c.p = sp;
    c.q = in[0];
    c.k = in[1];
    c.v = in[2];
    c.mask = sp->has_mask ? in[n++] : NULL;
    const mk_array *sinks = sp->has_sinks ? in[n++] : NULL;
    c.out = out[0];
    c.t = out[0]->dtype;
    c.at = c.t == MK_FLOAT64 ? MK_FLOAT64 : MK_FLOAT32;
    c.B = c.q->shape[0];
    c.Nq = c.q->shape[1];
    c.Tq = c.q->shape[2];
    c.D = c.q->shape[3];
    c.Nkv = c.k->shape[1];
    c.Tk = c.k->shape[2];
    c.Dv = c.v->shape[3];
    c.npan = (c.Tk + SDPA_JW - 1) / SDPA_JW;
    c.Tkp = c.npan * SDPA_JW;
    c.rep = c.Nq / c.Nkv;
    c.rows = c.rep * c.Tq;
    c.nblk = (c.rows + SDPA_QB - 1) / SDPA_QB;
    c.nitems = c.B * c.Nkv * c.nblk;
    c.scale_t = rnd_h(c.t, sp->scale);
    c.lowest = c.t == MK_FLOAT16    ? -65504.0
               : c.t == MK_BFLOAT16 ? -3.3895313892515355e38
               : c.t == MK_FLOAT32  ? -FLT_MAX
                                    : -DBL_MAX;
    atomic_init(&c.fail, 0);
    size_t asz = mk_dtype_size(c.at);
    int64_t G = c.B * c.Nkv;
    bool copy_v = c.v->dtype != c.at || (c.v->strides[3] != 1 && c.Dv > 1);
    int rc = -1;
    /* panels packed once when several query blocks use them, else per block */
    c.kt = c.nblk > 1 ? malloc((size_t)G * c.D * c.Tkp * asz + 1) : NULL;
    c.va = copy_v ? malloc((size_t)G * c.Tk * c.Dv * asz + 1) : NULL;
    c.vfinite = malloc(G + 1);
    c.sinkv = sinks ? malloc(c.Nq * sizeof *c.sinkv) : NULL;
    if ((c.nblk > 1 && !c.kt) || (copy_v && !c.va) || !c.vfinite || (sinks && !c.sinkv)) goto nomem;
    for (int64_t h = 0; sinks && h < c.Nq; h++)
        c.sinkv[h] = mk_get_f64(sinks->dtype, elem_ptr(sinks, h * sinks->strides[0]));
    if (c.kt) mk_parallel_for(G * c.npan, MK_GRAIN / (SDPA_JW * c.D + 1) + 1, sdpa_prep_k, &c);
    if (copy_v) mk_parallel_for(G * c.Tk, MK_GRAIN / (c.Dv + 1) + 1, sdpa_prep_v, &c);
    /* trailing zero probabilities come from masks: only then is v checked */
    memset(c.vfinite, 0, G);
    if (sp->causal || sp->has_mask)
        mk_parallel_for(G, MK_GRAIN / (c.Tk * c.Dv + 1) + 1, c.at == MK_FLOAT64 ? sdpa_finite_f64 : sdpa_finite_f32,
                        &c);
    if (atomic_load(&c.fail)) goto nomem;
    int64_t work = c.nitems * SDPA_QB * (c.Tk + 1) * (c.D + c.Dv + 1);
    mk_parallel(threads_for(work, c.nitems), c.at == MK_FLOAT64 ? sdpa_job_f64 : sdpa_job_f32, &c);
    if (atomic_load(&c.fail)) goto nomem;
    rc = 0;
    goto done;
nomem:
    mk_nomem();
done:
    free(c.kt);
    free(c.va);
    free(c.vfinite);
    free(c.sinkv);
    return rc;
}

static int sdpa_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int sdpa_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int sdpa_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef sdpa_def = {"scaled_dot_product_attention", sdpa_eval, NULL, sdpa_vjp, sdpa_jvp, sdpa_vmap, false};

#define SDPA_SET(...) mk_error_set(MK_ERR_VALUE, "[scaled_dot_product_attention] " __VA_ARGS__)
#define SDPA_ERR(...) (SDPA_SET(__VA_ARGS__), (mk_array *)NULL)

mk_array *mk_sdpa(mk_array *q, mk_array *k, mk_array *v, float scale, bool causal, mk_array *mask, mk_array *sinks,
                  bool force_fused) {
    char sa[256], sb[256];
    mk_array *const qkv[3] = {q, k, v};
    for (int i = 0; i < 3; i++)
        if (qkv[i]->ndim != 4)
            return SDPA_ERR("input with shape %s expected to be rank 4",
                            mk_shape_str(qkv[i]->ndim, qkv[i]->shape, sa, sizeof sa));
    if (mask && mask->ndim > 4)
        return SDPA_ERR("the mask with shape %s expected to have at most rank 4.",
                        mk_shape_str(mask->ndim, mask->shape, sa, sizeof sa));
    for (int i = 1; i < 3; i++)
        if (qkv[i]->shape[0] != q->shape[0])
            return SDPA_ERR("mismatching batch dimension for input with shape %s.",
                            mk_shape_str(4, qkv[i]->shape, sa, sizeof sa));
    if (q->shape[3] != k->shape[3])
        return SDPA_ERR("query, keys expected to have matching last dimension; found query shape %s for keys shape %s.",
                        mk_shape_str(4, q->shape, sa, sizeof sa), mk_shape_str(4, k->shape, sb, sizeof sb));
    int64_t nq = q->shape[1], nkv = k->shape[1];
    if (nkv != v->shape[1])
        return SDPA_ERR("keys, values expected to have matching n_kv_heads; found keys with n_heads %lld for values "
                        "with n_heads %lld.",
                        (long long)nkv, (long long)v->shape[1]);
    if (nkv == 0 || nq % nkv != 0)
        return SDPA_ERR("n_heads must be a multiple of n_kv_heads, found n_heads %lld for n_kv_heads %lld.",
                        (long long)nq, (long long)nkv);
    mk_dtype t = mk_promote(mk_promote(q->dtype, k->dtype), v->dtype);
    if (!mk_is_float(t)) return SDPA_ERR("Received unsupported type %s.", mk_dtype_name(t));
    if (mask && mk_promote(mask->dtype, t) != t)
        return SDPA_ERR("Mask type must promote to output type %s.", mk_dtype_name(t));

    mk_array *in[5] = {NULL, NULL, NULL, NULL, NULL};
    mk_array *r = NULL;
    int n = 3;
    sdpa_params *sp = NULL;
    if (mask) {
        int64_t mshape[4] = {q->shape[0], nq, q->shape[2], k->shape[2]};
        mk_array *m = mask->dtype == MK_BOOL ? (mk_incref(mask), mask) : mk_as_dtype(mask, t);
        if (!m) goto error;
        if (mk_tracing() && m->ndim >= 1) {
            /* (B, H, L, S) from q and k whenever the node is replayed (BroadcastAxes): the mask
               against q but its last axis, then its last axis against k's keys */
            mk_array *kt = mk_swapaxes(k, -1, -2), *ml = NULL;
            static const int last[1] = {-1}, lead[3] = {-4, -3, -2};
            mk_array *a[2] = {m, q};
            if (kt && (ml = mk_broadcast_axes(2, a, 1, last))) {
                mk_array *b[2] = {ml, kt};
                in[n] = mk_broadcast_axes(2, b, 3, lead);
            }
            mk_xdecref(kt);
            mk_xdecref(ml);
        } else {
            in[n] = mk_broadcast_to(m, 4, mshape);
        }
        mk_decref(m);
        if (!in[n++]) goto error;
    }
    if (sinks) {
        if (mk_promote(sinks->dtype, t) != t) {
            SDPA_SET("Type of sinks must promote to output type %s.", mk_dtype_name(t));
            goto error;
        }
        if (sinks->ndim != 1 || sinks->shape[0] != nq) {
            SDPA_SET("Received invalid shape for sinks %s.", mk_shape_str(sinks->ndim, sinks->shape, sa, sizeof sa));
            goto error;
        }
        if (!(in[n++] = mk_as_dtype(sinks, t))) goto error;
    }
    if (force_fused) {
        /* MLX's Metal rule for its fused kernels (mkpy plays the Mac's GPU):
         * the shapes they cover run (mkpy's path computes what they compute),
         * the rest is refused with Metal's reason. (Metal routes the VJP to
         * the unfused graph, so a trace for grad adds no condition.) */
        char why[400] = "";
        int gpu = mk_current_stream_is_gpu();
        if (gpu < 0) goto error;
        int64_t qd = q->shape[3], vd = v->shape[3], ql = q->shape[2], kl = k->shape[2], gqa = nq / nkv;
        if (!gpu) {
            snprintf(why, sizeof why, "the fused kernels require a GPU (Metal) stream.");
        } else if (ql > 8) {
            bool dims = qd == vd && (qd == 64 || qd == 72 || qd == 80 || qd == 96 || qd == 128 || qd == 192 ||
                                     qd == 256);
            if (!dims)
                snprintf(why, sizeof why,
                         "the full attention kernel supports head dims {64, 72, 80, 96, 128, 192, 256} with matching "
                         "query/value head dims; got query head dim %lld and value head dim %lld.",
                         (long long)qd, (long long)vd);
            else if (causal && ql > kl)
                snprintf(why, sizeof why,
                         "the full attention kernel with a causal mask requires the query sequence to be no longer "
                         "than the key sequence; got query length %lld and key length %lld.",
                         (long long)ql, (long long)kl);
        } else {
            bool dims = (qd == vd && (qd == 64 || qd == 96 || qd == 128 || qd == 192 || qd == 256)) ||
                        (qd == 192 && vd == 128);
            if (!dims)
                snprintf(why, sizeof why,
                         "the vector attention kernel supports head dims {64, 96, 128, 192, 256} with matching "
                         "query/value head dims, or query head dim 192 with value head dim 128; got query head dim "
                         "%lld and value head dim %lld.",
                         (long long)qd, (long long)vd);
            else if (ql > kl)
                snprintf(why, sizeof why,
                         "the vector attention kernel requires the query sequence to be no longer than the key "
                         "sequence; got query length %lld and key length %lld.",
                         (long long)ql, (long long)kl);
            else if (ql * gqa > 32)
                snprintf(why, sizeof why,
                         "the vector attention kernel requires the query length times the GQA factor to be at most "
                         "32; got query length %lld and GQA factor %lld.",
                         (long long)ql, (long long)gqa);
        }
        if (why[0]) {
            SDPA_SET("force_fused=True but no fused kernel is available: %s", why);
            goto error;
        }
    }
    if (v->shape[2] != k->shape[2]) {
        /* the error of MLX's fallback matmul p @ v (GQA shapes split the heads) */
        int64_t rep = nq / nkv;
        int64_t s5[5] = {q->shape[0], nkv, rep, q->shape[2], k->shape[2]};
        int64_t v5[5] = {v->shape[0], nkv, 1, v->shape[2], v->shape[3]};
        if (rep > 1)
            mk_error_set(MK_ERR_VALUE,
                         "[matmul] Last dimension of first input with shape %s must match second to last dimension of "
                         "second input with shape %s.",
                         mk_shape_str(5, s5, sa, sizeof sa), mk_shape_str(5, v5, sb, sizeof sb));
        else
            mk_error_set(MK_ERR_VALUE,
                         "[matmul] Last dimension of first input with shape (%lld,%lld,%lld,%lld) must match second to "
                         "last dimension of second input with shape %s.",
                         (long long)q->shape[0], (long long)nq, (long long)q->shape[2], (long long)k->shape[2],
                         mk_shape_str(4, v->shape, sb, sizeof sb));
        goto error;
    }
    for (int i = 0; i < 3; i++)
        if (!(in[i] = mk_as_dtype(qkv[i], t))) goto error;
    sp = malloc(sizeof *sp);
    if (!sp) {
        mk_nomem();
        goto error;
    }
    sp->scale = scale;
    sp->causal = causal;
    sp->has_mask = mask != NULL;
    sp->mask_bool = mask && mask->dtype == MK_BOOL;
    sp->has_sinks = sinks != NULL;
    {
        int64_t oshape[4] = {q->shape[0], nq, q->shape[2], v->shape[3]};
        r = mk_node(&sdpa_def, sp, t, 4, oshape, n, in);
    }
error:
    for (int i = 0; i < 5; i++) mk_xdecref(in[i]);
    return r;
}

/* ---------------------------------------------------------- transformation rules */

/* The fused ops' rules come from compositions of simpler ops computing the
 * same function (transforms.c differentiates / batches those). */

static int norm_compose(mk_prim *p, mk_array *const *in, mk_array **outs) {
    const norm_params *np_ = p->params;
    mk_arena A = {0};
    int last = in[0]->ndim - 1;
    mk_array *x = mk_ar_cast(&A, in[0], MK_FLOAT32), *y;
    mk_array *eps = mk_ar_keep(&A, mk_scalar_f64(MK_FLOAT32, np_->eps));
    if (np_->layer) {
        mk_array *mu = x ? mk_ar_keep(&A, mk_mean(x, 1, &last, true)) : NULL;
        mk_array *d = mk_ar_sub(&A, x, mu);
        mk_array *var = d ? mk_ar_keep(&A, mk_mean(mk_ar_un(&A, MK_UNARY_square, d), 1, &last, true)) : NULL;
        y = mk_ar_mul(&A, d, mk_ar_un(&A, MK_UNARY_rsqrt, mk_ar_add(&A, var, eps)));
    } else {
        mk_array *ms = x ? mk_ar_keep(&A, mk_mean(mk_ar_un(&A, MK_UNARY_square, x), 1, &last, true)) : NULL;
        y = mk_ar_mul(&A, x, mk_ar_un(&A, MK_UNARY_rsqrt, mk_ar_add(&A, ms, eps)));
    }
    y = mk_ar_cast(&A, y, p->outdesc[0].dtype);
    if (p->ninputs > 1) y = mk_ar_mul(&A, y, in[1]);
    if (p->ninputs > 2) y = mk_ar_add(&A, y, in[2]);
    y = mk_ar_cast(&A, y, p->outdesc[0].dtype);
    outs[0] = mk_ar_out(y);
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

static int norm_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    return mk_vjp_by_composition(p, norm_compose, cots, want, grads);
}
static int norm_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    return mk_jvp_by_composition(p, norm_compose, tans, out);
}
static int norm_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    return mk_vmap_by_composition(p, norm_compose, in, axes, outs, out_axes);
}

static int sdpa_compose(mk_prim *p, mk_array *const *in, mk_array **outs) {
    const sdpa_params *sp = p->params;
    if (sp->has_sinks) {
        mk_error_set(MK_ERR_VALUE, "[Primitive::vjp] Not implemented for scaled_dot_product_attention with sinks.");
        return -1;
    }
    mk_arena A = {0};
    mk_array *q = in[0], *k = in[1], *v = in[2];
    int64_t rep = q->shape[1] / k->shape[1];
    if (rep > 1) {
        k = mk_ar_keep(&A, mk_repeat(k, rep, 1, true));
        v = k ? mk_ar_keep(&A, mk_repeat(v, rep, 1, true)) : NULL;
    }
    mk_array *s = mk_ar_matmul(&A, mk_ar_scale(&A, q, sp->scale), k ? mk_ar_keep(&A, mk_swapaxes(k, -1, -2)) : NULL);
    if (s && sp->causal) {
        int64_t L = q->shape[2], S = in[1]->shape[2];
        mk_array *ri = mk_ar_keep(&A, mk_arange(0, (double)L, 1, MK_INT32));
        mk_array *ci = mk_ar_keep(&A, mk_arange(0, (double)S, 1, MK_INT32));
        int64_t col[2] = {L, 1};
        mk_array *lim = mk_ar_add(&A, mk_ar_reshape(&A, ri, 2, col), mk_ar_keep(&A, mk_scalar_i64(MK_INT32, S - L)));
        mk_array *c = mk_ar_bin(&A, MK_BINARY_less_equal, ci, lim);
        s = mk_ar_where(&A, c, s, mk_ar_scalar(&A, s, -INFINITY));
    }
    if (s && sp->has_mask) {
        mk_array *m = in[3];
        s = m->dtype == MK_BOOL ? mk_ar_where(&A, m, s, mk_ar_scalar(&A, s, -INFINITY)) : mk_ar_add(&A, s, m);
    }
    int last = -1;
    mk_array *w = s ? mk_ar_keep(&A, mk_softmax(s, 1, &last, true)) : NULL;
    outs[0] = mk_ar_out(mk_ar_cast(&A, mk_ar_matmul(&A, w, v), p->outdesc[0].dtype));
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

static int sdpa_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    return mk_vjp_by_composition(p, sdpa_compose, cots, want, grads);
}
static int sdpa_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    return mk_jvp_by_composition(p, sdpa_compose, tans, out);
}
static int sdpa_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    return mk_vmap_by_composition(p, sdpa_compose, in, axes, outs, out_axes);
}

/* export (export.c): the fast ops' params */
bool mk_xp_norm(const mk_prim *p, bool *layer, float *eps) {
    if (p->op != &norm_def) return false;
    const norm_params *np_ = p->params;
    *layer = np_->layer != 0;
    *eps = np_->eps;
    return true;
}

bool mk_xp_rope(const mk_prim *p, int64_t *dims, bool *traditional, float *base, float *scale) {
    if (p->op != &rope_def) return false;
    const rope_params *rp = p->params;
    *dims = rp->dims;
    *traditional = rp->traditional;
    *base = rp->base;
    *scale = rp->scale;
    return true;
}

/* the GPU back-end (backend/cuda/ops_fast.c): attention's params */
bool mk_xp_sdpa(const mk_prim *p, float *scale, bool *causal, bool *has_mask, bool *mask_bool, bool *has_sinks) {
    if (p->op != &sdpa_def) return false;
    const sdpa_params *sp = p->params;
    *scale = sp->scale;
    *causal = sp->causal;
    *has_mask = sp->has_mask;
    *mask_bool = sp->mask_bool;
    *has_sinks = sp->has_sinks;
    return true;
}
