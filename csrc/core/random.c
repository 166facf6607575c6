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
#include "mlx_math.h"
#include "ops.h"
#include "pool.h"
#include "simd.h"
#include "types.h"

/* ------------------------------------------------------------- threefry */

#define TF_CHUNK 256

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

#define TF_MIX(r)                                                                                      \
    x0 += x1;                                                                                          \
    x1 = rotl32(x1, r) ^ x0;
#define TF_EVEN TF_MIX(13) TF_MIX(15) TF_MIX(26) TF_MIX(6)
#define TF_ODD TF_MIX(17) TF_MIX(29) TF_MIX(16) TF_MIX(24)

/* hot loops get an AVX2+FMA version (simd.h) */
#if defined(__GNUC__)
#define MK_ALWAYS_INLINE __attribute__((always_inline))
#else
#define MK_ALWAYS_INLINE
#endif

/* Hashes the counter pairs (c0 + t, c1 + t), t < n, under key (k0, k1):
 * five groups of four mix steps with key injections in between. Straight
 * line code per t, so the loop over t vectorises. */
MK_SIMD_CLONES(static void, threefry_run, (uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, int n, uint32_t *o0, uint32_t *o1), (k0, k1, c0, c1, n, o0, o1), {
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
})

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
    /* Split the global key (evaluating it if someone stored a lazy one; the
     * binding evaluates a key before storing it, so that this never runs or
     * waits for a node while its caller holds the GIL):
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

static const mk_opdef bits_def = {"random_bits", bits_eval, NULL, NULL, NULL, NULL, false, true, 0, NULL, NULL};

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

/* MLX's erfinv (mlx_math.h) over a block: the fma and the log first, so the
 * libm calls are one loop and the polynomial loop can be scheduled freely. */
static inline MK_ALWAYS_INLINE void mlx_erfinv_block(const float *a, float *out, int64_t n) {
    float t[TF_CHUNK];
    for (int64_t j = 0; j < n; j++) t[j] = fmaf(a[j], 0.0f - a[j], 1.0f);
    for (int64_t j = 0; j < n; j++) t[j] = logf(t[j]);
    for (int64_t j = 0; j < n; j++) out[j] = mk_mlx_erfinv_poly(a[j], t[j]);
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

MK_SIMD_CLONES(static void, sample_sink, (void *cv, int64_t w, const uint32_t *words, int64_t n), (cv, w, words, n), {
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
})

static int sample_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    uint32_t k[2];
    key_words(in[0], k);
    sample_ctx c = {p->params, mk_data(o), o->dtype};
    gen_words(k, o->dtype == MK_COMPLEX64 ? 2 * o->size : o->size, sample_sink, &c);
    return 0;
}

static const mk_opdef sample_def = {"random_sample", sample_eval, NULL, NULL, NULL, NULL, false,
                                    true, sizeof(sample_params), NULL, NULL};

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

/* ------------------------------------------- MLX-exact erf and erfinv */

/* MLX's float32 erf / erfinv (mlx_math.h) as element-wise nodes: the input
 * is converted to float32, the result rounded to the input's (float) dtype,
 * as MLX's CPU kernels do. Used by truncated_normal. */
typedef enum { MU_ERF, MU_ERFINV } mlx_unary_op;

typedef struct {
    mlx_unary_op op;
    const char *in;
    char *out;
    mk_dtype t;
    size_t esz;
} mlx_unary_ctx;

static void mlx_unary_rows(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    mlx_unary_ctx *u = c;
    float buf[TF_CHUNK];
    for (int64_t j0 = 0; j0 < n; j0 += TF_CHUNK) {
        int64_t m = n - j0 < TF_CHUNK ? n - j0 : TF_CHUNK;
        mk_cast_table[u->t][MK_FLOAT32](u->in + (off[1] + j0 * st[1]) * (int64_t)u->esz, st[1], buf, 1, m);
        for (int64_t j = 0; j < m; j++) buf[j] = u->op == MU_ERF ? mk_mlx_erff(buf[j]) : mk_mlx_erfinvf(buf[j]);
        mk_cast_table[MK_FLOAT32][u->t](buf, 1, u->out + (off[0] + j0) * (int64_t)u->esz, 1, m);
    }
}

static int mlx_unary_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    mlx_unary_ctx u = {*(mlx_unary_op *)p->params, mk_data(in[0]), mk_data(o), o->dtype, mk_dtype_size(o->dtype)};
    const int64_t *strides[2] = {o->strides, in[0]->strides};
    mk_iter it;
    mk_iter_init(&it, o->ndim, o->shape, 2, strides);
    mk_iter_run(&it, MK_GRAIN / 8, mlx_unary_rows, &u);
    return 0;
}

static const mk_opdef mlx_unary_def = {"mlx_erf", mlx_unary_eval, NULL, NULL, NULL, NULL, false,
                                       true, sizeof(mlx_unary_op), NULL, NULL};

/* op(x) for a float array x; consumes x. */
static mk_array *mlx_unary(mlx_unary_op op, mk_array *x) {
    if (!x) return NULL;
    mlx_unary_op *params = malloc(sizeof *params);
    mk_array *r = NULL;
    if (params) {
        *params = op;
        r = mk_node(&mlx_unary_def, params, x->dtype, x->ndim, x->shape, 1, &x);
    } else {
        mk_nomem();
    }
    mk_decref(x);
    return r;
}

/* ------------------------------------------------------- truncated normal */

mk_array *mk_random_truncated_normal(mk_array *lower, mk_array *upper, int ndim, const int64_t *shape,
                                     bool has_shape, mk_dtype dtype, mk_array *key) {
    if (!mk_is_float(dtype)) {
        mk_error_set(MK_ERR_VALUE, "[trunc_normal] trunc_normal only accepts floating point dtypes.");
        return NULL;
    }
    int64_t bshape[MK_MAX_NDIM];
    if (!has_shape) {
        ndim = mk_broadcast_shapes(lower->ndim, lower->shape, upper->ndim, upper->shape, bshape);
        if (ndim < 0) return NULL;
        shape = bshape;
    }
    /* JAX's recipe, as MLX: u uniform on [erf(lower/sqrt2), erf(upper/sqrt2)),
     * x = sqrt2 * erfinv(u), clipped to [lower, upper] */
    mk_array *sq = sqrt2(dtype), *lo = cast(lower, dtype, false), *hi = cast(upper, dtype, false), *out = NULL;
    if (sq && lo && hi) {
        mk_array *a = mlx_unary(MU_ERF, bin(MK_BINARY_divide, lo, sq, 0));
        mk_array *b = mlx_unary(MU_ERF, bin(MK_BINARY_divide, hi, sq, 0));
        mk_array *u = (a && b) ? mk_random_uniform(a, b, ndim, shape, dtype, key) : NULL;
        mk_xdecref(a);
        mk_xdecref(b);
        out = bin(MK_BINARY_multiply, sq, mlx_unary(MU_ERFINV, u), 2);
        out = bin(MK_BINARY_maximum, bin(MK_BINARY_minimum, hi, out, 2), lo, 1);
    }
    mk_xdecref(sq);
    mk_xdecref(lo);
    mk_xdecref(hi);
    return out;
}

/* ------------------------------------------------------------ categorical */

/* argmax along one axis (first maximum, comparisons with >, as MLX's CPU
 * kernel), giving uint32; categorical's last step. */
typedef struct {
    int axis;
} argmax_params;

typedef struct {
    const mk_array *x;
    uint32_t *out;
    int axis;
} argmax_ctx;

static void argmax_range(void *c, int64_t b, int64_t e) {
    argmax_ctx *a = c;
    const mk_array *x = a->x;
    size_t esz = mk_dtype_size(x->dtype);
    int64_t n = x->shape[a->axis], st = x->strides[a->axis];
    double buf[TF_CHUNK];
    for (int64_t i = b; i < e; i++) {
        /* offset of output element i: its digits over the other axes */
        int64_t q = i, off = 0;
        for (int d = x->ndim - 1; d >= 0; d--) {
            if (d == a->axis) continue;
            off += (q % x->shape[d]) * x->strides[d];
            q /= x->shape[d];
        }
        const char *p = (const char *)mk_data(x) + off * (int64_t)esz;
        uint32_t best_i = 0;
        double best = 0;
        for (int64_t j0 = 0; j0 < n; j0 += TF_CHUNK) {
            int64_t m = n - j0 < TF_CHUNK ? n - j0 : TF_CHUNK;
            mk_cast_table[x->dtype][MK_FLOAT64](p + j0 * st * (int64_t)esz, st, buf, 1, m);
            int64_t j = 0;
            if (j0 == 0) best = buf[j++];
            for (; j < m; j++)
                if (buf[j] > best) {
                    best = buf[j];
                    best_i = (uint32_t)(j0 + j);
                }
        }
        a->out[i] = best_i;
    }
}

static int argmax_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    if (mk_alloc_out(out[0]) < 0) return -1;
    argmax_ctx a = {in[0], mk_data(out[0]), ((argmax_params *)p->params)->axis};
    int64_t n = in[0]->shape[a.axis];
    mk_parallel_for(out[0]->size, n ? MK_GRAIN / n + 1 : MK_GRAIN, argmax_range, &a);
    return 0;
}

static const mk_opdef argmax_def = {"argmax", argmax_eval, NULL, NULL, NULL, NULL, false,
                                    true, sizeof(argmax_params), NULL, NULL};

static mk_array *argmax_axis(mk_array *x, int axis) {
    if (!x) return NULL;
    if (x->size == 0) {
        mk_error_set(MK_ERR_VALUE, "[argmax] Cannot argmax reduce zero size array.");
        mk_decref(x);
        return NULL;
    }
    argmax_params *ap = malloc(sizeof *ap);
    mk_array *r = NULL;
    if (ap) {
        int64_t shape[MK_MAX_NDIM];
        int nd = 0;
        for (int d = 0; d < x->ndim; d++)
            if (d != axis) shape[nd++] = x->shape[d];
        ap->axis = axis;
        r = mk_node(&argmax_def, ap, MK_UINT32, nd, shape, 1, &x);
    } else {
        mk_nomem();
    }
    mk_decref(x);
    return r;
}

/* One distribution sampled many times: MLX 0.32 draws u = uniform(shape)
 * and returns, per sample, how many entries of C = cumsum(exp(l - max(l)))
 * are <= u * C[n-1] (all in float32, MLX's exp, sequential sums). */
typedef struct {
    int axis;
} cdf_params;

typedef struct {
    const float *c;
    int64_t n;
    float total;
    const float *u;
    uint32_t *out;
} cdf_ctx;

static void cdf_range(void *cv, int64_t b, int64_t e) {
    cdf_ctx *c = cv;
    for (int64_t i = b; i < e; i++) {
        float x = c->u[i] * c->total;
        int64_t lo = 0, hi = c->n; /* first index with C > x */
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (c->c[mid] <= x)
                lo = mid + 1;
            else
                hi = mid;
        }
        c->out[i] = (uint32_t)lo;
    }
}

static int cdf_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *l = in[0], *u = in[1];
    mk_array *o = out[0];
    int axis = ((cdf_params *)p->params)->axis;
    if (mk_alloc_out(o) < 0) return -1;
    int64_t n = l->shape[axis]; /* the other axes have size 1 */
    float *c = malloc((size_t)(n ? n : 1) * sizeof *c);
    if (!c) {
        mk_nomem();
        return -1;
    }
    mk_cast_table[l->dtype][MK_FLOAT32](mk_data(l), l->strides[axis], c, 1, n);
    float mx = n ? c[0] : 0;
    for (int64_t j = 1; j < n; j++)
        if (c[j] > mx) mx = c[j];
    float acc = 0;
    for (int64_t j = 0; j < n; j++) {
        float d = c[j] - mx;
        acc += mk_mlx_expf(d);
        c[j] = acc;
    }
    cdf_ctx cc = {c, n, n ? c[n - 1] : 0, mk_data(u), mk_data(o)};
    mk_parallel_for(o->size, 4096, cdf_range, &cc);
    free(c);
    return 0;
}

static const mk_opdef cdf_def = {"categorical_cdf", cdf_eval, NULL, NULL, NULL, NULL, false,
                                 true, sizeof(cdf_params), NULL, NULL};

static mk_array *categorical_cdf(mk_array *logits, int axis, int ndim, const int64_t *shape, mk_array *key) {
    mk_array *u = sample_node(S_UNIFORM, below_one(MK_FLOAT32), ndim, shape, MK_FLOAT32, key);
    if (!u) return NULL;
    cdf_params *cp = malloc(sizeof *cp);
    mk_array *r = NULL;
    if (cp) {
        cp->axis = axis;
        mk_array *ins[2] = {logits, u};
        r = mk_node(&cdf_def, cp, MK_UINT32, ndim, shape, 2, ins);
    } else {
        mk_nomem();
    }
    mk_decref(u);
    return r;
}

mk_array *mk_random_categorical(mk_array *logits, int axis, int mode, int ndim, const int64_t *shape_in,
                                int64_t num_samples, mk_array *key) {
    int ax = axis < 0 ? axis + logits->ndim : axis;
    if (ax < 0 || ax >= logits->ndim) {
        mk_error_set(MK_ERR_INDEX, "[categorical] Invalid axis %d for logits with %d dimensions.", axis,
                     logits->ndim);
        return NULL;
    }
    int64_t shape[MK_MAX_NDIM + 1], reduced[MK_MAX_NDIM];
    int nr = 0;
    for (int d = 0; d < logits->ndim; d++)
        if (d != ax) reduced[nr++] = logits->shape[d];
    mk_array *lg = logits;
    mk_incref(lg);
    if (mode == 1) { /* shape must broadcast with the reduced logits shape */
        int64_t b[MK_MAX_NDIM];
        int nb = mk_broadcast_shapes(ndim, shape_in, nr, reduced, b);
        if (nb < 0) {
            mk_decref(lg);
            return NULL;
        }
        if (!same_shape(nb, b, ndim, shape_in)) {
            char s1[256], s2[256];
            mk_error_set(MK_ERR_VALUE,
                         "[categorical] Requested shape %s is not broadcast compatible with reduced logits shape%s.",
                         mk_shape_str(ndim, shape_in, s1, sizeof s1), mk_shape_str(nr, reduced, s2, sizeof s2));
            mk_decref(lg);
            return NULL;
        }
        memcpy(shape, shape_in, ndim * sizeof *shape);
    } else if (mode == 2) { /* num_samples: a trailing sample axis */
        int one = -1;
        mk_array *e = mk_expand_dims(lg, 1, &one);
        mk_decref(lg);
        if (!(lg = e)) return NULL;
        memcpy(shape, reduced, nr * sizeof *shape);
        shape[nr] = num_samples;
        ndim = nr + 1;
    } else {
        memcpy(shape, reduced, nr * sizeof *shape);
        ndim = nr;
    }
    int64_t batch = 1;
    for (int d = 0; d < nr; d++) batch *= reduced[d];
    if (batch == 1 && ndim >= 1) { /* one distribution, samples asked for */
        mk_decref(lg);
        return categorical_cdf(logits, ax, ndim, shape, key);
    }
    /* argmax(gumbel + logits) over the logits axis, placed where it lands
     * once the sample shape is broadcast against the logits */
    int offset = ax + ndim - lg->ndim + 1;
    if (ndim + 1 > MK_MAX_NDIM || offset < 0) {
        mk_error_set(MK_ERR_VALUE, "[categorical] Too many dimensions.");
        mk_decref(lg);
        return NULL;
    }
    int64_t gshape[MK_MAX_NDIM + 1];
    memcpy(gshape, shape, offset * sizeof *shape);
    gshape[offset] = lg->shape[ax];
    memcpy(gshape + offset + 1, shape + offset, (ndim - offset) * sizeof *shape);
    mk_array *g = mk_random_gumbel(ndim + 1, gshape, MK_FLOAT32, key);
    mk_array *s = bin(MK_BINARY_add, g, lg, 3);
    return argmax_axis(s, offset);
}

/* ------------------------------------------------------------ permutation */

/* argsort of uint32 values (stable, as MLX's std::stable_sort): LSD radix
 * sort, four passes of 8 bits. */
static int argsort_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    const mk_array *x = in[0];
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    int64_t n = x->size;
    uint32_t *idx = mk_data(o), *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    uint32_t *val = malloc((size_t)(n ? n : 1) * sizeof *val), *tval = malloc((size_t)(n ? n : 1) * sizeof *tval);
    if (!tmp || !val || !tval) {
        free(tmp);
        free(val);
        free(tval);
        mk_nomem();
        return -1;
    }
    const uint32_t *src = mk_data(x);
    for (int64_t i = 0; i < n; i++) {
        val[i] = src[i * x->strides[0]];
        idx[i] = (uint32_t)i;
    }
    uint32_t *ia = idx, *ib = tmp, *va = val, *vb = tval;
    for (int shift = 0; shift < 32; shift += 8) {
        int64_t count[257] = {0};
        for (int64_t i = 0; i < n; i++) count[((va[i] >> shift) & 255) + 1]++;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (int64_t i = 0; i < n; i++) {
            int64_t k = count[(va[i] >> shift) & 255]++;
            ib[k] = ia[i];
            vb[k] = va[i];
        }
        uint32_t *t = ia;
        ia = ib;
        ib = t;
        t = va;
        va = vb;
        vb = t;
    }
    /* four passes: the result is back in idx */
    free(tmp);
    free(val);
    free(tval);
    return 0;
}

static const mk_opdef argsort_def = {"argsort", argsort_eval, NULL, NULL, NULL, NULL, false, true, 0, NULL, NULL};

/* take(x, idx, axis) for a uint32 index vector: out[..., i, ...] = x[..., idx[i], ...] */
typedef struct {
    int axis;
} take_params;

typedef struct {
    const mk_array *x;
    const uint32_t *idx;
    char *dst;
    int axis;
    int64_t inner; /* elements after the axis */
    mk_cast_fn copy;
} take_ctx;

static void take_range(void *c, int64_t b, int64_t e) {
    take_ctx *t = c;
    const mk_array *x = t->x;
    size_t esz = mk_dtype_size(x->dtype);
    int64_t n = x->shape[t->axis];
    for (int64_t r = b; r < e; r++) { /* r: one (outer, i) pair; copy its inner block */
        int64_t i = r % n, q = r / n, off = (int64_t)t->idx[i] * x->strides[t->axis];
        for (int d = t->axis - 1; d >= 0; d--) {
            off += (q % x->shape[d]) * x->strides[d];
            q /= x->shape[d];
        }
        char *dst = t->dst + r * t->inner * (int64_t)esz;
        if (t->axis == x->ndim - 1) {
            memcpy(dst, (const char *)mk_data(x) + off * (int64_t)esz, esz);
            continue;
        }
        /* the inner block, row by row along the last axis */
        int64_t last = x->shape[x->ndim - 1], rows = last ? t->inner / last : 0;
        for (int64_t k = 0; k < rows; k++) {
            int64_t kk = k, o2 = off;
            for (int d = x->ndim - 2; d > t->axis; d--) {
                o2 += (kk % x->shape[d]) * x->strides[d];
                kk /= x->shape[d];
            }
            t->copy((const char *)mk_data(x) + o2 * (int64_t)esz, x->strides[x->ndim - 1], dst + k * last * (int64_t)esz,
                    1, last);
        }
    }
}

static int take_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    int axis = ((take_params *)p->params)->axis;
    int64_t inner = 1;
    for (int d = axis + 1; d < o->ndim; d++) inner *= o->shape[d];
    take_ctx t = {in[0], mk_data(in[1]), mk_data(o), axis, inner, mk_cast_table[o->dtype][o->dtype]};
    mk_parallel_for(o->size / inner, MK_GRAIN / inner + 1, take_range, &t);
    return 0;
}

static const mk_opdef take_def = {"take", take_eval, NULL, NULL, NULL, NULL, false,
                                  true, sizeof(take_params), NULL, NULL};

mk_array *mk_random_permutation_n(int64_t n, mk_array *key) {
    mk_array *b = mk_random_bits(1, &n, 4, key);
    if (!b) return NULL;
    mk_array *r = mk_node(&argsort_def, NULL, MK_UINT32, 1, &n, 1, &b);
    mk_decref(b);
    return r;
}

mk_array *mk_random_permutation(mk_array *x, int axis, mk_array *key) {
    int ax = axis < 0 ? axis + x->ndim : axis;
    if (ax < 0 || ax >= x->ndim) {
        mk_error_set(MK_ERR_INDEX, "SmallVector out of range."); /* MLX's words: x.shape(axis) */
        return NULL;
    }
    mk_array *perm = mk_random_permutation_n(x->shape[ax], key);
    if (!perm) return NULL;
    take_params *tp = malloc(sizeof *tp);
    mk_array *r = NULL;
    if (tp) {
        tp->axis = ax;
        mk_array *ins[2] = {x, perm};
        r = mk_node(&take_def, tp, x->dtype, x->ndim, x->shape, 2, ins);
    } else {
        mk_nomem();
    }
    mk_decref(perm);
    return r;
}
