/* Random numbers, bit for bit MLX's.
 *
 * MLX's generator is counter-based: threefry-2x32 (20 rounds) hashes a
 * counter pair under a key (a uint32 array of shape (2,)). An array of W
 * 32-bit words is made as follows: with half = W / 2 and odd = W % 2, the
 * hash of (j, half + odd + j) gives words j and half + odd + j for j < half,
 * and when W is odd the first half of hash(half, 0) gives the middle word.
 * Outputs narrower than the words (bits of width 1 or 2) take the bytes of
 * that word stream.
 *
 * The distributions are MLX's formulas, built with the same rounding steps:
 * uniform = low + (high - low) * min(bits / 2^32, below_one) in the dtype,
 * normal = sqrt(2) * erfinv(uniform(nextafter(-1, 0), 1)), with MLX's float32
 * erfinv, randint = clamp(floor(uniform(low, high))), bernoulli = bits <
 * p * nextafter(2^32). The draws from bits are fused into one lazy node per
 * distribution, so no intermediate uint32 array is made; the affine steps
 * with user arrays (bounds, loc, scale) are element-wise nodes.
 *
 * A call without a key takes the next key of a global sequence: the global
 * key is split in two, the first half becomes the new global key and the
 * second is used, as MLX's KeySequence::next does. */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "iter.h"
#include "ops.h"
#include "pool.h"
#include "types.h"

/* ------------------------------------------------------------- threefry */

#define TF_CHUNK 256

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

#define TF_MIX(r)                                                                                      \
    x0 += x1;                                                                                          \
    x1 = rotl32(x1, r) ^ x0;
#define TF_EVEN TF_MIX(13) TF_MIX(15) TF_MIX(26) TF_MIX(6)
#define TF_ODD TF_MIX(17) TF_MIX(29) TF_MIX(16) TF_MIX(24)

/* x86-64 builds also get an AVX2 clone, picked at load time. */
#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define MK_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
/* with hardware fma, fmaf is one instruction (the same correctly rounded
 * result); plain a * b + c stays unfused (-std=c11 turns contraction off) */
#define MK_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define MK_SIMD_CLONES
#define MK_FMA_CLONES
#endif
#if defined(__GNUC__)
#define MK_ALWAYS_INLINE __attribute__((always_inline))
#else
#define MK_ALWAYS_INLINE
#endif

/* Hashes the counter pairs (c0 + t, c1 + t), t < n, under key (k0, k1):
 * five groups of four mix steps with key injections in between. Straight
 * line code per t, so the loop over t vectorises. */
MK_SIMD_CLONES
static void threefry_run(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, int n, uint32_t *o0, uint32_t *o1) {
    const uint32_t ks0 = k0, ks1 = k1, ks2 = k0 ^ k1 ^ 0x1BD11BDAu;
    for (int t = 0; t < n; t++) {
        uint32_t x0 = c0 + (uint32_t)t + ks0, x1 = c1 + (uint32_t)t + ks1;
        TF_EVEN x0 += ks1; x1 += ks2 + 1;
        TF_ODD x0 += ks2; x1 += ks0 + 2;
        TF_EVEN x0 += ks0; x1 += ks1 + 3;
        TF_ODD x0 += ks1; x1 += ks2 + 4;
        TF_EVEN x0 += ks2; x1 += ks0 + 5;
        o0[t] = x0;
        o1[t] = x1;
    }
}

/* Receives words [w, w + n) of the stream. */
typedef void (*word_sink)(void *ctx, int64_t w, const uint32_t *words, int64_t n);

typedef struct {
    uint32_t k0, k1;
    int64_t half, odd;
    word_sink sink;
    void *ctx;
} stream_job;

static void stream_range(void *c, int64_t b, int64_t e) {
    stream_job *s = c;
    uint32_t x0[TF_CHUNK], x1[TF_CHUNK];
    for (int64_t j = b; j < e; j += TF_CHUNK) {
        int n = (int)(e - j < TF_CHUNK ? e - j : TF_CHUNK);
        /* counters are 32-bit in the hash, as in MLX */
        threefry_run(s->k0, s->k1, (uint32_t)j, (uint32_t)(s->half + s->odd + j), n, x0, x1);
        s->sink(s->ctx, j, x0, n);
        s->sink(s->ctx, s->half + s->odd + j, x1, n);
    }
}

/* Generates the W-word stream of a key into a sink, over the thread pool. */
static void gen_words(const uint32_t key[2], int64_t W, word_sink sink, void *ctx) {
    stream_job s = {key[0], key[1], W / 2, W % 2, sink, ctx};
    mk_parallel_for(s.half, 2048, stream_range, &s);
    if (s.odd) {
        uint32_t x0, x1;
        threefry_run(key[0], key[1], (uint32_t)s.half, 0, 1, &x0, &x1);
        sink(ctx, s.half, &x0, 1);
    }
}

/* ----------------------------------------------------------------- keys */

static int check_key(const mk_array *key) {
    if (key->dtype != MK_UINT32) {
        mk_error_set(MK_ERR_VALUE, "[bits] Expected key type uint32 but received %s.", mk_dtype_name(key->dtype));
        return -1;
    }
    if (key->ndim != 1 || key->shape[0] != 2) {
        char s[256];
        mk_error_set(MK_ERR_VALUE, "[bits] Expected key shape (2) but received %s.",
                     mk_shape_str(key->ndim, key->shape, s, sizeof s));
        return -1;
    }
    return 0;
}

/* The two words of an evaluated key. */
static void key_words(const mk_array *key, uint32_t out[2]) {
    const uint32_t *d = mk_data(key);
    out[0] = d[0];
    out[1] = d[key->strides[0]];
}

static mk_array *key_from_words(uint32_t k0, uint32_t k1) {
    int64_t two = 2;
    mk_array *k = mk_array_empty(MK_UINT32, 1, &two);
    if (k) {
        uint32_t *d = k->buf->data;
        d[0] = k0;
        d[1] = k1;
    }
    return k;
}

mk_array *mk_random_key(uint64_t seed) { return key_from_words((uint32_t)(seed >> 32), (uint32_t)seed); }

/* The global key sequence. A spin lock guards it (the work under it is a
 * single hash). */
static mk_array *global_key;
static atomic_flag global_lock = ATOMIC_FLAG_INIT;

static void lock(void) {
    while (atomic_flag_test_and_set_explicit(&global_lock, memory_order_acquire)) {
    }
}
static void unlock(void) { atomic_flag_clear_explicit(&global_lock, memory_order_release); }

/* Called with the lock held. */
static int ensure_global(void) {
    if (global_key) return 0;
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    global_key = mk_random_key((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000);
    return global_key ? 0 : -1;
}

void mk_random_seed(uint64_t seed) {
    mk_array *k = mk_random_key(seed);
    if (!k) return;
    lock();
    mk_array *old = global_key;
    global_key = k;
    unlock();
    mk_xdecref(old);
}

mk_array *mk_random_get_key(void) {
    lock();
    if (ensure_global() < 0) {
        unlock();
        return NULL;
    }
    mk_array *k = global_key;
    mk_incref(k);
    unlock();
    return k;
}

void mk_random_set_key(mk_array *key) {
    mk_incref(key);
    lock();
    mk_array *old = global_key;
    global_key = key;
    unlock();
    mk_xdecref(old);
}

mk_array *mk_random_next_key(void) {
    /* Split the global key (evaluating it if someone stored a lazy one):
     * bits((2, 2), key) is hash(0, 2) -> words 0, 2 and hash(1, 3) -> 1, 3;
     * row 0 becomes the global key and row 1 is returned. The swap only
     * happens if no other thread moved the sequence meanwhile (else retry),
     * so two threads never get the same key. */
    for (;;) {
        mk_array *k = mk_random_get_key();
        if (!k) return NULL;
        if (check_key(k) < 0 || mk_eval1(k) < 0) {
            mk_decref(k);
            return NULL;
        }
        uint32_t kw[2], x0[2], x1[2];
        key_words(k, kw);
        threefry_run(kw[0], kw[1], 0, 2, 2, x0, x1);
        mk_array *first = key_from_words(x0[0], x0[1]);
        mk_array *second = first ? key_from_words(x1[0], x1[1]) : NULL;
        if (!second) {
            mk_xdecref(first);
            mk_decref(k);
            return NULL;
        }
        lock();
        bool swapped = global_key == k;
        if (swapped) global_key = first;
        unlock();
        if (swapped) {
            mk_decref(k); /* the global's reference */
            mk_decref(k);
            return second;
        }
        mk_decref(first);
        mk_decref(second);
        mk_decref(k);
    }
}

/* key, or the next global key when key is NULL; a new reference. */
static mk_array *use_key(mk_array *key) {
    if (!key) return mk_random_next_key();
    if (check_key(key) < 0) return NULL;
    mk_incref(key);
    return key;
}

static int check_bits_shape(int ndim, const int64_t *shape) {
    if (ndim > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[bits] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return -1;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0) {
            mk_error_set(MK_ERR_VALUE, "[bits] Negative dimensions not allowed.");
            return -1;
        }
    return mk_shape_size(ndim, shape) < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------ bits */

typedef struct {
    char *dst;
    int64_t nbytes;
} bytes_sink_ctx;

static void bytes_sink(void *c, int64_t w, const uint32_t *words, int64_t n) {
    bytes_sink_ctx *b = c;
    int64_t off = 4 * w, len = 4 * n;
    if (off + len > b->nbytes) len = b->nbytes - off;
    if (len > 0) memcpy(b->dst + off, words, (size_t)len);
}

static int bits_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    uint32_t k[2];
    key_words(in[0], k);
    int64_t nbytes = o->size * (int64_t)mk_dtype_size(o->dtype);
    bytes_sink_ctx b = {mk_data(o), nbytes};
    gen_words(k, (nbytes + 3) / 4, bytes_sink, &b);
    return 0;
}

static const mk_opdef bits_def = {"random_bits", bits_eval, NULL};

mk_array *mk_random_bits(int ndim, const int64_t *shape, int width, mk_array *key) {
    if (key && check_key(key) < 0) return NULL;
    mk_dtype t;
    switch (width) {
    case 4: t = MK_UINT32; break;
    case 2: t = MK_UINT16; break;
    case 1: t = MK_UINT8; break;
    default: mk_error_set(MK_ERR_VALUE, "[bits] Bit width must be in {1, 2, 4} but got %d.", width); return NULL;
    }
    if (check_bits_shape(ndim, shape) < 0) return NULL;
    mk_array *k = use_key(key);
    if (!k) return NULL;
    mk_array *r = mk_node(&bits_def, NULL, t, ndim, shape, 1, &k);
    mk_decref(k);
    return r;
}

mk_array *mk_random_split(mk_array *key, int num) {
    int64_t shape[2] = {num, 2};
    return mk_random_bits(2, shape, 4, key);
}

/* ------------------------------------------------- MLX's float32 erfinv */

/* The float32 erfinv of MLX's CPU back end: t = log(1 - a^2) (with a fused
 * multiply-add), then a * P(t) with one of two minimax polynomials chosen by
 * |t| > 6.125, evaluated with fused multiply-adds. Repeated here because the
 * normal samples must match MLX to the bit. Done over a block: the log is a
 * libm call per element, and both polynomials are computed and one selected
 * (as MLX's SIMD path does), which keeps the loops vectorisable. */
static inline MK_ALWAYS_INLINE void mlx_erfinv_block(const float *a, float *out, int64_t n) {
    float t[TF_CHUNK];
    for (int64_t j = 0; j < n; j++) t[j] = fmaf(a[j], 0.0f - a[j], 1.0f);
    for (int64_t j = 0; j < n; j++) t[j] = logf(t[j]);
    for (int64_t j = 0; j < n; j++) {
        float x = t[j], p, q;
        p = 3.03697567e-10f;
        p = fmaf(p, x, 2.93243101e-8f);
        p = fmaf(p, x, 1.22150334e-6f);
        p = fmaf(p, x, 2.84108955e-5f);
        p = fmaf(p, x, 3.93552968e-4f);
        p = fmaf(p, x, 3.02698812e-3f);
        p = fmaf(p, x, 4.83185798e-3f);
        p = fmaf(p, x, -2.64646143e-1f);
        p = fmaf(p, x, 8.40016484e-1f);
        q = 5.43877832e-9f;
        q = fmaf(q, x, 1.43285448e-7f);
        q = fmaf(q, x, 1.22774793e-6f);
        q = fmaf(q, x, 1.12963626e-7f);
        q = fmaf(q, x, -5.61530760e-5f);
        q = fmaf(q, x, -1.47697632e-4f);
        q = fmaf(q, x, 2.31468678e-3f);
        q = fmaf(q, x, 1.15392581e-2f);
        q = fmaf(q, x, -2.32015476e-1f);
        q = fmaf(q, x, 8.86226892e-1f);
        out[j] = a[j] * (fabsf(x) > 6.125f ? p : q);
    }
}

/* ------------------------------------------- uniform and normal samples */

typedef enum { S_UNIFORM, S_NORMAL, S_NORMAL_SQRT2 } sample_kind;

typedef struct {
    sample_kind kind;
    float upper; /* uniform: the largest value below one in the dtype */
} sample_params;

typedef struct {
    const sample_params *sp;
    char *dst;
    mk_dtype dtype; /* complex64: written as float pairs */
} sample_ctx;

/* bits / 2^32, clamped below one; exact in float32 except for the rounding
 * of the conversion, as MLX's divide(bits, float(UINT32_MAX)). */
static inline MK_ALWAYS_INLINE float unit(uint32_t w, float upper) {
    float u = (float)w / 4294967296.0f;
    return u < upper ? u : upper;
}

#define SAMPLE_STORE(E, s, S, R)                                                                       \
    case E: {                                                                                          \
        S *d = (S *)c->dst + w, sq;                                                                    \
        MK_STORE_##s(&sq, (R)(E == MK_FLOAT64 ? M_SQRT2 : (double)(float)M_SQRT2));                    \
        for (int64_t j = 0; j < n; j++) {                                                              \
            S v;                                                                                       \
            MK_STORE_##s(&v, f[j]);                                                                    \
            if (mul)                                                                                   \
                MK_STORE_##s(&d[j], MK_LOAD_##s(&sq) * MK_LOAD_##s(&v));                               \
            else                                                                                       \
                d[j] = v;                                                                              \
        }                                                                                              \
        break;                                                                                         \
    }

MK_FMA_CLONES
static void sample_sink(void *cv, int64_t w, const uint32_t *words, int64_t n) {
    sample_ctx *c = cv;
    float f[TF_CHUNK];
    const float upper = c->sp->upper;
    if (c->sp->kind == S_UNIFORM) {
        for (int64_t j = 0; j < n; j++) f[j] = unit(words[j], upper);
    } else {
        /* uniform on [nextafter(-1, 0), 1) in float32, then erfinv */
        const float lo = -0x1.fffffep-1f, range = 1.0f - lo;
        float x[TF_CHUNK];
        for (int64_t j = 0; j < n; j++) {
            float r = range * unit(words[j], upper);
            x[j] = r + lo;
        }
        mlx_erfinv_block(x, f, n);
    }
    bool mul = c->sp->kind == S_NORMAL_SQRT2;
    switch (c->dtype) {
        MK_FLOAT_TYPES(SAMPLE_STORE)
    case MK_COMPLEX64: memcpy((float *)c->dst + w, f, (size_t)n * sizeof(float)); break;
    default: break;
    }
}

static int sample_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    uint32_t k[2];
    key_words(in[0], k);
    sample_ctx c = {p->params, mk_data(o), o->dtype};
    gen_words(k, o->dtype == MK_COMPLEX64 ? 2 * o->size : o->size, sample_sink, &c);
    return 0;
}

static const mk_opdef sample_def = {"random_sample", sample_eval, NULL};

/* A node drawing samples of the given kind from key (new reference). */
static mk_array *sample_node(sample_kind kind, float upper, int ndim, const int64_t *shape, mk_dtype dtype,
                             mk_array *key) {
    if (check_bits_shape(ndim, shape) < 0) return NULL;
    mk_array *k = use_key(key);
    if (!k) return NULL;
    sample_params *sp = malloc(sizeof *sp);
    mk_array *r = NULL;
    if (sp) {
        sp->kind = kind;
        sp->upper = upper;
        r = mk_node(&sample_def, sp, dtype, ndim, shape, 1, &k);
    } else {
        mk_nomem();
    }
    mk_decref(k);
    return r;
}

/* The largest value below one of a float dtype, as float32; 0 if none. */
static float below_one(mk_dtype t) {
    switch (t) {
    case MK_FLOAT32: return 0x1.fffffep-1f;
    case MK_FLOAT16: return mk_f16_to_f32((mk_f16){0x3BFF});
    case MK_BFLOAT16: return mk_bf16_to_f32((mk_bf16){0x3F7F});
    default: return 0;
    }
}

/* ------------------------------------------------------------- helpers */

static bool same_shape(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

/* A 0-d evaluated array whose value is v. */
static bool is_scalar_value(const mk_array *a, double v) {
    return a->ndim == 0 && mk_is_evaluated(a) && mk_get_f64(a->dtype, mk_data(a)) == v;
}

/* op(a, b) that consumes (decrefs) the arrays flagged in `steal`. */
static mk_array *bin(mk_binary_op op, mk_array *a, mk_array *b, int steal) {
    mk_array *r = (a && b) ? mk_binary(op, a, b) : NULL;
    if (steal & 1) mk_xdecref(a);
    if (steal & 2) mk_xdecref(b);
    return r;
}

static mk_array *un(mk_unary_op op, mk_array *a) {
    mk_array *r = a ? mk_unary(op, a) : NULL;
    mk_xdecref(a);
    return r;
}

static mk_array *cast(mk_array *a, mk_dtype t, bool steal) {
    mk_array *r = a ? mk_as_dtype(a, t) : NULL;
    if (steal) mk_xdecref(a);
    return r;
}

/* ---------------------------------------------------------------- uniform */

mk_array *mk_random_uniform(mk_array *low, mk_array *high, int ndim, const int64_t *shape, mk_dtype dtype,
                            mk_array *key) {
    if (!mk_is_float(dtype)) {
        mk_error_set(MK_ERR_VALUE, "[uniform] Can only generate uniform numbers with real floating point type.");
        return NULL;
    }
    mk_array *lo = NULL, *hi = NULL, *range = NULL, *u = NULL, *out = NULL;
    if (!(lo = mk_as_dtype(low, dtype)) || !(hi = mk_as_dtype(high, dtype)) ||
        !(range = mk_binary(MK_BINARY_subtract, hi, lo)))
        goto done;
    int64_t bshape[MK_MAX_NDIM];
    int bn = mk_broadcast_shapes(ndim, shape, range->ndim, range->shape, bshape);
    if (bn < 0) goto done;
    if (!same_shape(ndim, shape, bn, bshape)) {
        char a[256], b[256];
        mk_error_set(MK_ERR_VALUE, "[uniform] Cannot generate random values of shape %s from broadcasted shape %s.",
                     mk_shape_str(ndim, shape, a, sizeof a), mk_shape_str(bn, bshape, b, sizeof b));
        goto done;
    }
    float upper = below_one(dtype);
    if (upper == 0) {
        mk_error_set(MK_ERR_RUNTIME, "[uniform] Unsupported type.");
        goto done;
    }
    if (!(u = sample_node(S_UNIFORM, upper, ndim, shape, dtype, key))) goto done;
    if (is_scalar_value(low, 0.0) && is_scalar_value(high, 1.0)) {
        out = u; /* 1 * u + 0 is u: skip the two passes */
        u = NULL;
    } else {
        out = bin(MK_BINARY_add, bin(MK_BINARY_multiply, range, u, 0), lo, 1);
    }
done:
    mk_xdecref(lo);
    mk_xdecref(hi);
    mk_xdecref(range);
    mk_xdecref(u);
    return out;
}

/* ----------------------------------------------------------------- normal */

/* sqrt(2) in dtype, as MLX's array(std::sqrt(2.0), dtype). */
static mk_array *sqrt2(mk_dtype t) { return mk_scalar_f64(t, t == MK_FLOAT64 ? M_SQRT2 : (double)(float)M_SQRT2); }

mk_array *mk_random_normal(int ndim, const int64_t *shape, mk_dtype dtype, mk_array *loc, mk_array *scale,
                           mk_array *key) {
    const float upper = below_one(MK_FLOAT32);
    mk_array *s;
    if (dtype == MK_COMPLEX64) {
        /* real and imaginary parts are erfinv of consecutive uniforms, as
         * MLX's view of a (..., 2) float32 sample as complex64 */
        if (ndim + 1 > MK_MAX_NDIM) {
            mk_error_set(MK_ERR_VALUE, "[bits] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
            return NULL;
        }
        s = sample_node(S_NORMAL, upper, ndim, shape, dtype, key);
        if (scale) s = bin(MK_BINARY_multiply, scale, s, 2);
        if (loc) s = bin(MK_BINARY_add, loc, s, 2);
        return s;
    }
    if (!mk_is_float(dtype)) {
        mk_error_set(MK_ERR_VALUE, "[normal] Only floating point and complex64 types are supported.");
        return NULL;
    }
    s = sample_node(scale ? S_NORMAL : S_NORMAL_SQRT2, upper, ndim, shape, dtype, key);
    if (scale) s = bin(MK_BINARY_multiply, bin(MK_BINARY_multiply, sqrt2(dtype), cast(scale, dtype, false), 3), s, 3);
    if (loc) s = bin(MK_BINARY_add, cast(loc, dtype, false), s, 3);
    return s;
}

/* ---------------------------------------------------------------- randint */

mk_array *mk_random_randint(mk_array *low, mk_array *high, int ndim, const int64_t *shape, mk_dtype dtype,
                            mk_array *key) {
    if (mk_is_inexact(dtype)) {
        mk_error_set(MK_ERR_VALUE, "[randint] randint only accepts integer dtypes and bool.");
        return NULL;
    }
    /* MLX 0.32: astype(floor(uniform(low, high)), dtype), clamped to
     * [astype(low), astype(high - 1)] in the output dtype */
    mk_array *u = mk_random_uniform(low, high, ndim, shape, MK_FLOAT32, key);
    if (!u) return NULL;
    mk_array *r = cast(un(MK_UNARY_floor, u), dtype, true);
    mk_array *top = cast(bin(MK_BINARY_subtract, high, mk_scalar_i64(MK_INT32, 1), 2), dtype, true);
    r = bin(MK_BINARY_minimum, r, top, 3);
    return bin(MK_BINARY_maximum, r, cast(low, dtype, false), 3);
}

/* -------------------------------------------------------------- bernoulli */

mk_array *mk_random_bernoulli(mk_array *p, int ndim, const int64_t *shape, bool has_shape, mk_array *key) {
    if (!mk_is_float(p->dtype)) {
        mk_error_set(MK_ERR_VALUE, "[bernoulli] bernoulli probability `p` must be a float type.");
        return NULL;
    }
    if (!has_shape) {
        ndim = p->ndim;
        shape = p->shape;
    }
    /* p on the scale [0, nextafter(2^32)], compared with the raw bits */
    mk_array *b = mk_random_bits(ndim, shape, 4, key);
    if (!b) return NULL;
    mk_array *thr = bin(MK_BINARY_multiply, p, mk_scalar_f64(MK_FLOAT32, 4294967808.0), 2);
    mk_array *r = bin(MK_BINARY_less, b, thr, 3);
    if (r && !same_shape(r->ndim, r->shape, ndim, shape)) {
        mk_decref(r);
        mk_error_set(MK_ERR_VALUE, "[bernoulli] shape of `p` is incompatible with argument `shape`.");
        return NULL;
    }
    return r;
}

/* ------------------------------------------------------- gumbel, laplace */

mk_array *mk_random_gumbel(int ndim, const int64_t *shape, mk_dtype dtype, mk_array *key) {
    /* -log(-log(uniform(0, 1))) */
    mk_array *lo = mk_scalar_f64(dtype, 0.0), *hi = lo ? mk_scalar_f64(dtype, 1.0) : NULL;
    mk_array *u = hi ? mk_random_uniform(lo, hi, ndim, shape, dtype, key) : NULL;
    mk_xdecref(lo);
    mk_xdecref(hi);
    return un(MK_UNARY_negative, un(MK_UNARY_log, un(MK_UNARY_negative, un(MK_UNARY_log, u))));
}

mk_array *mk_random_laplace(int ndim, const int64_t *shape, mk_dtype dtype, double loc, double scale,
                            mk_array *key) {
    if (!mk_is_float(dtype)) {
        mk_error_set(MK_ERR_VALUE, "[laplace] Only real floating point types are supported.");
        return NULL;
    }
    /* inverse CDF: sign(u) * log1p(-|u|), u uniform on [nextafter(-1, 0), 1) */
    mk_array *lo = mk_scalar_f64(MK_FLOAT32, -0x1.fffffep-1), *hi = lo ? mk_scalar_f64(MK_FLOAT32, 1.0) : NULL;
    mk_array *u = hi ? mk_random_uniform(lo, hi, ndim, shape, MK_FLOAT32, key) : NULL;
    mk_xdecref(lo);
    mk_xdecref(hi);
    if (!u) return NULL;
    mk_incref(u);
    mk_array *sg = un(MK_UNARY_sign, u);
    mk_array *l = un(MK_UNARY_log1p, bin(MK_BINARY_multiply, mk_scalar_f64(dtype, -1.0), un(MK_UNARY_abs, u), 3));
    mk_array *s = cast(bin(MK_BINARY_multiply, sg, l, 3), dtype, true);
    if (scale != 1.0) s = bin(MK_BINARY_multiply, mk_scalar_f64(dtype, (float)scale), s, 3);
    if (loc != 0.0) s = bin(MK_BINARY_add, mk_scalar_f64(dtype, (float)loc), s, 3);
    return s;
}
