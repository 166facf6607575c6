/* Sorting and scans: sort, argsort, partition, argpartition, topk, and the
 * cumulative ops cumsum, cumprod, cummax, cummin, logcumsumexp.
 *
 * Sorting works row by row (a row: the elements along the axis, for one
 * index of the other dims). Each row is gathered from the input's strides
 * into a contiguous buffer of the dtype's compute type, sorted there and
 * scattered to the output, so any input layout works without a copy. Rows
 * are shared over the pool; a single long row (a flattened sort) is sorted
 * in chunks in parallel and the chunks are merged pairwise in parallel.
 *
 * Orders are MLX's: sort and argsort are stable with nan last (argsort's ties
 * keep index order), so any stable sort with MLX's comparator gives MLX's
 * result; a stable merge sort is used. partition and argpartition place
 * the other elements in whatever order std::nth_element leaves them, so the
 * selection here is libstdc++'s introselect, step for step (median-of-three
 * pivot, unguarded partition, heap select past the depth limit, final
 * insertion sort): the same comparisons on the same data give MLX's output.
 * topk is MLX's: partition at -k, then the last k elements (a view); k equal
 * to the axis size returns the input.
 *
 * Scans follow MLX's CPU kernels: the running value lives in the output
 * dtype (float16 sums round at every step and stall at 2048, as MLX's do),
 * bool sums give int32, exclusive scans start from the op's identity.
 * cummax/cummin of floats give nan when either operand is nan, and for
 * float16/bfloat16 that "nan" is 0 (MLX 0.32 returns numeric_limits<T>::
 * quiet_NaN(), which is 0 for its half types); complex max/min are plain
 * lexicographic selects. logcumsumexp is MLX's LogAddExp with its float32
 * exp, rounding half types after each step. Non-row-contiguous inputs are
 * copied first; outputs are row-contiguous. Independent lines (outer index,
 * block of inner lanes) run in parallel. */
#include <complex.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "half_fast.h"
#include "iter.h"
#include "mlx_math.h"
#include "ops.h"
#include "transforms.h"
#include "pool.h"
#include "types.h"

/* ============================================================ comparisons */

#define CNAN(x) (isnan(crealf(x)) || isnan(cimagf(x)))
#define CLT(a, b) (crealf(a) < crealf(b) || (crealf(a) == crealf(b) && cimagf(a) < cimagf(b)))
#define CEQ(a, b) (crealf(a) == crealf(b) && cimagf(a) == cimagf(b))

/* MLX's nan_aware_less: nan is larger than everything, nans are equal. */
#define LT_INT(a, b) ((a) < (b))
#define LT_FLT(a, b) (!isnan(a) && (isnan(b) || (a) < (b)))
#define LT_CPX(a, b) (!CNAN(a) && (CNAN(b) || CLT(a, b)))
/* argpartition's comparator on values v1, v2 at indices a, b (MLX's:
 * floats put nan last, complex values compare without a nan rule). */
#define ALT_INT(v1, v2, a, b) ((v1) < (v2) || ((v1) == (v2) && (a) < (b)))
#define ALT_FLT(v1, v2, a, b) (!isnan(v1) && (isnan(v2) || ALT_INT(v1, v2, a, b)))
#define ALT_CPX(v1, v2, a, b) (CLT(v1, v2) || (CEQ(v1, v2) && (a) < (b)))
#define ALT_CPXN(v1, v2, a, b) (!CNAN(v1) && (CNAN(v2) || ALT_CPX(v1, v2, a, b)))

#define LT_b8 LT_INT
#define LT_u8 LT_INT
#define LT_u16 LT_INT
#define LT_u32 LT_INT
#define LT_u64 LT_INT
#define LT_i8 LT_INT
#define LT_i16 LT_INT
#define LT_i32 LT_INT
#define LT_i64 LT_INT
#define LT_f16 LT_FLT
#define LT_f32 LT_FLT
#define LT_f64 LT_FLT
#define LT_bf16 LT_FLT
#define LT_c64 LT_CPX
/* nan tests (0 for exact types) and the plain less used once nans are
 * moved out of the way */
#define NAN_INT(x) ((void)(x), 0)
#define NAN_b8 NAN_INT
#define NAN_u8 NAN_INT
#define NAN_u16 NAN_INT
#define NAN_u32 NAN_INT
#define NAN_u64 NAN_INT
#define NAN_i8 NAN_INT
#define NAN_i16 NAN_INT
#define NAN_i32 NAN_INT
#define NAN_i64 NAN_INT
#define NAN_f16 isnan
#define NAN_f32 isnan
#define NAN_f64 isnan
#define NAN_bf16 isnan
#define NAN_c64 CNAN
#define PLT_b8 LT_INT
#define PLT_u8 LT_INT
#define PLT_u16 LT_INT
#define PLT_u32 LT_INT
#define PLT_u64 LT_INT
#define PLT_i8 LT_INT
#define PLT_i16 LT_INT
#define PLT_i32 LT_INT
#define PLT_i64 LT_INT
#define PLT_f16 LT_INT
#define PLT_f32 LT_INT
#define PLT_f64 LT_INT
#define PLT_bf16 LT_INT
#define PLT_c64 CLT
#define ALT_b8 ALT_INT
#define ALT_u8 ALT_INT
#define ALT_u16 ALT_INT
#define ALT_u32 ALT_INT
#define ALT_u64 ALT_INT
#define ALT_i8 ALT_INT
#define ALT_i16 ALT_INT
#define ALT_i32 ALT_INT
#define ALT_i64 ALT_INT
#define ALT_f16 ALT_FLT
#define ALT_f32 ALT_FLT
#define ALT_f64 ALT_FLT
#define ALT_bf16 ALT_FLT
#define ALT_c64 ALT_CPXN

/* ============================================================ stable merge sort */

#define MSORT_RUN 32

/* name(a, tmp, n): sorts a[0..n) stably by LT applied to (x)F; tmp holds n.
 * name##_par: the same for one long row, chunks and merges on the pool. */
#define DEFINE_MSORT(name, E, LT, F)                                                                    \
    static void name##_merge(const E *a, int64_t na, const E *b, int64_t nb, E *o) {                   \
        int64_t i = 0, j = 0, k = 0;                                                                   \
        while (i < na && j < nb) o[k++] = LT((b[j])F, (a[i])F) ? b[j++] : a[i++];                      \
        while (i < na) o[k++] = a[i++];                                                                \
        while (j < nb) o[k++] = b[j++];                                                                \
    }                                                                                                  \
    static void name(E *a, E *tmp, int64_t n) {                                                        \
        for (int64_t s = 0; s < n; s += MSORT_RUN) {                                                   \
            int64_t e = s + MSORT_RUN < n ? s + MSORT_RUN : n;                                         \
            for (int64_t i = s + 1; i < e; i++) {                                                      \
                E v = a[i];                                                                            \
                int64_t j = i;                                                                         \
                while (j > s && LT((v)F, (a[j - 1]) F)) {                                              \
                    a[j] = a[j - 1];                                                                   \
                    j--;                                                                               \
                }                                                                                      \
                a[j] = v;                                                                              \
            }                                                                                          \
        }                                                                                              \
        E *src = a, *dst = tmp;                                                                        \
        for (int64_t w = MSORT_RUN; w < n; w *= 2) {                                                   \
            for (int64_t s = 0; s < n; s += 2 * w) {                                                   \
                int64_t m = s + w < n ? s + w : n, e = s + 2 * w < n ? s + 2 * w : n;                  \
                name##_merge(src + s, m - s, src + m, e - m, dst + s);                                 \
            }                                                                                          \
            E *t = src;                                                                                \
            src = dst;                                                                                 \
            dst = t;                                                                                   \
        }                                                                                              \
        if (src != a) memcpy(a, src, (size_t)n * sizeof(E));                                           \
    }                                                                                                  \
    static void name##_chunks(void *c, int64_t b, int64_t e) {                                         \
        psort_ctx *P = c;                                                                              \
        for (int64_t k = b; k < e; k++) {                                                              \
            int64_t s = k * P->w, m = s + P->w < P->n ? P->w : P->n - s;                               \
            name((E *)P->src + s, (E *)P->dst + s, m);                                                 \
        }                                                                                              \
    }                                                                                                  \
    static void name##_pairs(void *c, int64_t b, int64_t e) {                                          \
        psort_ctx *P = c;                                                                              \
        const E *src = P->src;                                                                         \
        E *dst = P->dst;                                                                               \
        for (int64_t k = b; k < e; k++) {                                                              \
            int64_t s = k * 2 * P->w;                                                                  \
            int64_t m = s + P->w < P->n ? s + P->w : P->n, en = s + 2 * P->w < P->n ? s + 2 * P->w : P->n; \
            name##_merge(src + s, m - s, src + m, en - m, dst + s);                                    \
        }                                                                                              \
    }                                                                                                  \
    static void name##_par(E *a, E *tmp, int64_t n) {                                                  \
        if (n < 2) return;                                                                             \
        int64_t nth = mk_pool_threads(), w = (n + nth - 1) / nth;                                      \
        psort_ctx P = {a, tmp, n, w};                                                                  \
        mk_parallel_for((n + w - 1) / w, 1, name##_chunks, &P);                                        \
        for (; P.w < n; P.w *= 2) {                                                                    \
            mk_parallel_for((n + 2 * P.w - 1) / (2 * P.w), 1, name##_pairs, &P);                       \
            void *t = P.src;                                                                           \
            P.src = P.dst;                                                                             \
            P.dst = t;                                                                                 \
        }                                                                                              \
        if (P.src != (void *)a) memcpy(a, P.src, (size_t)n * sizeof(E));                               \
    }

typedef struct {
    void *src, *dst;
    int64_t n, w;
} psort_ctx;

/* ============================================================ libstdc++ introselect */

/* Comparator forms: on values (partition) or on indices into vals
 * (argpartition). */
#define VCMP(LT, ALT, x, y) LT(x, y)
#define ICMP(LT, ALT, x, y) ALT(vals[x], vals[y], x, y)

static inline int floor_log2(int64_t n) {
    int k = 0;
    while (n > 1) {
        n >>= 1;
        k++;
    }
    return k;
}

/* name(a, n, nth, vals): std::nth_element(a, a + nth, a + n, comp) as
 * libstdc++ runs it. */
#define DEFINE_SELECT(name, E, VT, MODE, LT, ALT)                                                       \
    static void name##_adjust(E *a, int64_t hole, int64_t len, E v, const VT *vals) {                  \
        (void)vals;                                                                                    \
        int64_t top = hole, child = hole;                                                              \
        while (child < (len - 1) / 2) {                                                                \
            child = 2 * (child + 1);                                                                   \
            if (MODE(LT, ALT, a[child], a[child - 1])) child--;                                        \
            a[hole] = a[child];                                                                        \
            hole = child;                                                                              \
        }                                                                                              \
        if ((len & 1) == 0 && child == (len - 2) / 2) {                                                \
            child = 2 * (child + 1);                                                                   \
            a[hole] = a[child - 1];                                                                    \
            hole = child - 1;                                                                          \
        }                                                                                              \
        int64_t parent = (hole - 1) / 2;                                                               \
        while (hole > top && MODE(LT, ALT, a[parent], v)) {                                            \
            a[hole] = a[parent];                                                                       \
            hole = parent;                                                                             \
            parent = (hole - 1) / 2;                                                                   \
        }                                                                                              \
        a[hole] = v;                                                                                   \
    }                                                                                                  \
    static void name(E *a, int64_t n, int64_t nth, const VT *vals) {                                   \
        (void)vals;                                                                                    \
        if (n == 0 || nth == n) return;                                                                \
        int64_t first = 0, last = n;                                                                   \
        int depth = 2 * floor_log2(n);                                                                 \
        while (last - first > 3) {                                                                     \
            if (depth == 0) {                                                                          \
                /* heap select over [first, nth + 1), then swap first and nth */                       \
                E *h = a + first;                                                                      \
                int64_t len = nth + 1 - first, end = last - first;                                     \
                if (len >= 2)                                                                          \
                    for (int64_t p = (len - 2) / 2;; p--) {                                            \
                        name##_adjust(h, p, len, h[p], vals);                                          \
                        if (p == 0) break;                                                             \
                    }                                                                                  \
                for (int64_t i = len; i < end; i++)                                                    \
                    if (MODE(LT, ALT, h[i], h[0])) {                                                   \
                        E v = h[i];                                                                    \
                        h[i] = h[0];                                                                   \
                        name##_adjust(h, 0, len, v, vals);                                             \
                    }                                                                                  \
                E t = a[first];                                                                        \
                a[first] = a[nth];                                                                     \
                a[nth] = t;                                                                            \
                return;                                                                                \
            }                                                                                          \
            depth--;                                                                                   \
            /* median of a[first + 1], a[mid], a[last - 1] moved to a[first] */                        \
            int64_t x = first + 1, y = first + (last - first) / 2, z = last - 1, m;                    \
            if (MODE(LT, ALT, a[x], a[y])) {                                                           \
                if (MODE(LT, ALT, a[y], a[z]))                                                         \
                    m = y;                                                                             \
                else if (MODE(LT, ALT, a[x], a[z]))                                                    \
                    m = z;                                                                             \
                else                                                                                   \
                    m = x;                                                                             \
            } else if (MODE(LT, ALT, a[x], a[z]))                                                      \
                m = x;                                                                                 \
            else if (MODE(LT, ALT, a[y], a[z]))                                                        \
                m = z;                                                                                 \
            else                                                                                       \
                m = y;                                                                                 \
            E t = a[first];                                                                            \
            a[first] = a[m];                                                                           \
            a[m] = t;                                                                                  \
            /* unguarded partition of [first + 1, last) around a[first] */                             \
            int64_t lo = first + 1, hi = last;                                                         \
            for (;;) {                                                                                 \
                while (MODE(LT, ALT, a[lo], a[first])) lo++;                                           \
                hi--;                                                                                  \
                while (MODE(LT, ALT, a[first], a[hi])) hi--;                                           \
                if (!(lo < hi)) break;                                                                 \
                t = a[lo];                                                                             \
                a[lo] = a[hi];                                                                         \
                a[hi] = t;                                                                             \
                lo++;                                                                                  \
            }                                                                                          \
            if (lo <= nth)                                                                             \
                first = lo;                                                                            \
            else                                                                                       \
                last = lo;                                                                             \
        }                                                                                              \
        /* insertion sort of [first, last) */                                                          \
        for (int64_t i = first + 1; i < last; i++) {                                                   \
            E v = a[i];                                                                                \
            if (MODE(LT, ALT, v, a[first])) {                                                          \
                memmove(a + first + 1, a + first, (size_t)(i - first) * sizeof(E));                    \
                a[first] = v;                                                                          \
            } else {                                                                                   \
                int64_t j = i;                                                                         \
                while (MODE(LT, ALT, v, a[j - 1])) {                                                   \
                    a[j] = a[j - 1];                                                                   \
                    j--;                                                                               \
                }                                                                                      \
                a[j] = v;                                                                              \
            }                                                                                          \
        }                                                                                              \
    }

/* ============================================================ radix sort

 * 32-bit compute types (float32, float16 and bfloat16 held as float, int32,
 * uint32) sort by an LSD radix sort on order-preserving unsigned keys: for a
 * float, flip all bits of a negative and the sign bit of a positive; -0.0
 * gets +0.0's key, since MLX's comparator finds them equal (a stable sort
 * keeps their input order). Nans never get here (they are moved last
 * first). LSD radix with counting passes is stable, so the result is the
 * stable sort's, element for element. Passes whose digit is the same for
 * every key (the low bits of a widened float16, the high bits of small
 * ints) are skipped. */
#define RADIX_MIN 256 /* shorter rows: merge sort */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define RADIX_OK 1
#else
#define RADIX_OK 0 /* the (key, index) pairs are sorted as 64-bit words, key in the low half */
#endif

static inline uint32_t fkey(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (u == 0x80000000u) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static inline float fdekey(uint32_t k) {
    uint32_t u = (k & 0x80000000u) ? (k ^ 0x80000000u) : ~k;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Sorts a[0..n) by the low 32 bits (the key), stably; tmp holds n. */
#define DEFINE_RADIX(name, E)                                                                          \
    static void name(E *a, E *tmp, int64_t n) {                                                        \
        static const int sh[4] = {0, 8, 16, 24};                                                       \
        int64_t cnt[4][256];                                                                           \
        memset(cnt, 0, sizeof cnt);                                                                    \
        for (int64_t i = 0; i < n; i++) {                                                              \
            uint32_t k = (uint32_t)a[i];                                                               \
            cnt[0][k & 255]++;                                                                         \
            cnt[1][(k >> 8) & 255]++;                                                                  \
            cnt[2][(k >> 16) & 255]++;                                                                 \
            cnt[3][k >> 24]++;                                                                         \
        }                                                                                              \
        E *src = a, *dst = tmp;                                                                        \
        for (int p = 0; p < 4; p++) {                                                                  \
            if (cnt[p][((uint32_t)a[0] >> sh[p]) & 255] == n) continue; /* one digit: nothing moves */  \
            int64_t off[256], o = 0;                                                                   \
            for (int d = 0; d < 256; d++) {                                                            \
                off[d] = o;                                                                            \
                o += cnt[p][d];                                                                        \
            }                                                                                          \
            const int shift = sh[p];                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                          \
                E e = src[i];                                                                          \
                dst[off[((uint32_t)e >> shift) & 255]++] = e;                                          \
            }                                                                                          \
            E *t = src;                                                                                \
            src = dst;                                                                                 \
            dst = t;                                                                                   \
        }                                                                                              \
        if (src != a) memcpy(a, src, (size_t)n * sizeof(E));                                           \
    }
DEFINE_RADIX(radix_keys, uint32_t)
DEFINE_RADIX(radix_pairs, uint64_t)

/* per dtype: radix sortable?, key of a compute value, value of a key */
#define RADIX_f16 1
#define RADIX_f32 1
#define RADIX_bf16 1
#define RADIX_i32 1
#define RADIX_u32 1
#define RADIX_b8 0
#define RADIX_u8 0
#define RADIX_u16 0
#define RADIX_u64 0
#define RADIX_i8 0
#define RADIX_i16 0
#define RADIX_i64 0
#define RADIX_f64 0
#define RADIX_c64 0
#define NEGZ_FLT(x) ((x) == 0 && signbit(x))
#define NEGZ_NONE(x) ((void)(x), 0)
#define NEGZ_f16 NEGZ_FLT
#define NEGZ_f32 NEGZ_FLT
#define NEGZ_bf16 NEGZ_FLT
#define NEGZ_b8 NEGZ_NONE
#define NEGZ_u8 NEGZ_NONE
#define NEGZ_u16 NEGZ_NONE
#define NEGZ_u32 NEGZ_NONE
#define NEGZ_u64 NEGZ_NONE
#define NEGZ_i8 NEGZ_NONE
#define NEGZ_i16 NEGZ_NONE
#define NEGZ_i32 NEGZ_NONE
#define NEGZ_i64 NEGZ_NONE
#define NEGZ_f64 NEGZ_NONE
#define NEGZ_c64 NEGZ_NONE
#define RKEY_FLT(v) fkey(v)
#define RDEKEY_FLT(k) fdekey(k)
#define RKEY_NONE(v) ((void)(v), 0u)
#define RDEKEY_NONE(k) ((void)(k), 0)
#define RKEY_f16 RKEY_FLT
#define RKEY_f32 RKEY_FLT
#define RKEY_bf16 RKEY_FLT
#define RKEY_i32(v) ((uint32_t)(v) ^ 0x80000000u)
#define RKEY_u32(v) ((uint32_t)(v))
#define RDEKEY_f16 RDEKEY_FLT
#define RDEKEY_f32 RDEKEY_FLT
#define RDEKEY_bf16 RDEKEY_FLT
#define RDEKEY_i32(k) ((int32_t)((k) ^ 0x80000000u))
#define RDEKEY_u32(k) (k)
#define RKEY_b8 RKEY_NONE
#define RKEY_u8 RKEY_NONE
#define RKEY_u16 RKEY_NONE
#define RKEY_u64 RKEY_NONE
#define RKEY_i8 RKEY_NONE
#define RKEY_i16 RKEY_NONE
#define RKEY_i64 RKEY_NONE
#define RKEY_f64 RKEY_NONE
#define RKEY_c64 RKEY_NONE
#define RDEKEY_b8 RDEKEY_NONE
#define RDEKEY_u8 RDEKEY_NONE
#define RDEKEY_u16 RDEKEY_NONE
#define RDEKEY_u64 RDEKEY_NONE
#define RDEKEY_i8 RDEKEY_NONE
#define RDEKEY_i16 RDEKEY_NONE
#define RDEKEY_i64 RDEKEY_NONE
#define RDEKEY_f64 RDEKEY_NONE
#define RDEKEY_c64 RDEKEY_NONE

/* ============================================================ sort rows */

enum { SK_SORT, SK_ARGSORT, SK_PART, SK_ARGPART };

typedef struct {
    int kind;
    const char *in;
    char *out;
    int64_t n, in_st, out_st, kth;
    int rnd; /* the other dims */
    int64_t rshape[MK_MAX_NDIM], rin[MK_MAX_NDIM], rout[MK_MAX_NDIM];
    bool par; /* one long row: sort it on the pool */
    atomic_int failed;
} sort_job;

static void row_offsets(const sort_job *J, int64_t r, int64_t *io, int64_t *oo) {
    int64_t a = 0, b = 0;
    for (int d = J->rnd - 1; d >= 0; d--) {
        int64_t i = r % J->rshape[d];
        r /= J->rshape[d];
        a += i * J->rin[d];
        b += i * J->rout[d];
    }
    *io = a;
    *oo = b;
}

#define ALIGN16(x) (((x) + 15) & ~(size_t)15)

#define SORT_ROWS(E_, s, S, R, u1, u2)                                                                  \
    typedef struct {                                                                                   \
        R k;                                                                                           \
        uint32_t i;                                                                                    \
    } pair_##s;                                                                                        \
    DEFINE_MSORT(msort_##s, R, PLT_##s, )                                                              \
    DEFINE_MSORT(msortp_##s, pair_##s, PLT_##s, .k)                                                    \
    /* moves nans (all equal, larger than everything) to the end, keeping \
     * their order; returns the number of others */                       \
    static int64_t nan_last_##s(R *v, R *tmp, int64_t n) {                                             \
        int64_t i0 = 0;                                                                                \
        while (i0 < n && !NAN_##s(v[i0])) i0++;                                                     \
        if (i0 == n) return n;                                                                         \
        int64_t m = i0, k = 0;                                                                         \
        for (int64_t i = i0; i < n; i++) {                                                              \
            if (NAN_##s(v[i]))                                                                         \
                tmp[k++] = v[i];                                                                       \
            else                                                                                       \
                v[m++] = v[i];                                                                         \
        }                                                                                              \
        if (k) memcpy(v + m, tmp, (size_t)k * sizeof(R));                                              \
        return m;                                                                                      \
    }                                                                                                  \
    static int64_t nan_lastp_##s(pair_##s *v, pair_##s *tmp, int64_t n) {                              \
        int64_t i0 = 0;                                                                                \
        while (i0 < n && !NAN_##s(v[i0].k)) i0++;                                                     \
        if (i0 == n) return n;                                                                         \
        int64_t m = i0, k = 0;                                                                         \
        for (int64_t i = i0; i < n; i++) {                                                              \
            if (NAN_##s(v[i].k))                                                                       \
                tmp[k++] = v[i];                                                                       \
            else                                                                                       \
                v[m++] = v[i];                                                                         \
        }                                                                                              \
        if (k) memcpy(v + m, tmp, (size_t)k * sizeof(pair_##s));                                       \
        return m;                                                                                      \
    }                                                                                                  \
    DEFINE_SELECT(select_##s, R, R, VCMP, LT_##s, ALT_##s)                                             \
    DEFINE_SELECT(aselect_##s, uint32_t, R, ICMP, LT_##s, ALT_##s)                                     \
    static void rows_##s(sort_job *J, int64_t r0, int64_t r1) {                                        \
        const int64_t n = J->n, is = J->in_st, os = J->out_st;                                         \
        size_t need = J->kind == SK_ARGSORT ? 2 * (size_t)n * sizeof(pair_##s)                          \
                                            : ALIGN16((size_t)n * 4) + 2 * (size_t)n * sizeof(R);      \
        char *scratch = malloc(need ? need : 1);                                                       \
        if (!scratch) {                                                                                \
            atomic_store(&J->failed, 1);                                                               \
            return;                                                                                    \
        }                                                                                              \
        uint32_t *ix = (uint32_t *)scratch;                                                            \
        R *v = (R *)(scratch + ALIGN16((size_t)n * 4));                                                \
        pair_##s *pr = (pair_##s *)scratch;                                                            \
        for (int64_t r = r0; r < r1; r++) {                                                            \
            int64_t io, oo;                                                                            \
            row_offsets(J, r, &io, &oo);                                                               \
            const S *src = (const S *)J->in + io;                                                      \
            if (J->kind == SK_ARGSORT) {                                                               \
                for (int64_t i = 0; i < n; i++) {                                                      \
                    pr[i].k = MK_LOAD_##s(&src[i * is]);                                               \
                    pr[i].i = (uint32_t)i;                                                             \
                }                                                                                      \
                int64_t m = nan_lastp_##s(pr, pr + n, n);                                              \
                if (RADIX_OK && RADIX_##s && m >= RADIX_MIN) {                                         \
                    uint64_t *w = (uint64_t *)pr;                                                      \
                    for (int64_t i = 0; i < m; i++)                                                    \
                        w[i] = (uint64_t)RKEY_##s(pr[i].k) | (uint64_t)pr[i].i << 32;                  \
                    radix_pairs(w, w + n, m);                                                          \
                    uint32_t *dst = (uint32_t *)J->out + oo;                                           \
                    for (int64_t i = 0; i < n; i++) dst[i * os] = (uint32_t)(w[i] >> 32);              \
                    continue;                                                                          \
                } else if (J->par)                                                                     \
                    msortp_##s##_par(pr, pr + n, m);                                                   \
                else                                                                                   \
                    msortp_##s(pr, pr + n, m);                                                         \
                uint32_t *dst = (uint32_t *)J->out + oo;                                               \
                for (int64_t i = 0; i < n; i++) dst[i * os] = pr[i].i;                                 \
                continue;                                                                              \
            }                                                                                          \
            for (int64_t i = 0; i < n; i++) v[i] = MK_LOAD_##s(&src[i * is]);                          \
            if (J->kind == SK_ARGPART) {                                                               \
                for (int64_t i = 0; i < n; i++) ix[i] = (uint32_t)i;                                   \
                aselect_##s(ix, n, J->kth, v);                                                         \
                uint32_t *dst = (uint32_t *)J->out + oo;                                               \
                for (int64_t i = 0; i < n; i++) dst[i * os] = ix[i];                                   \
                continue;                                                                              \
            }                                                                                          \
            if (J->kind == SK_PART)                                                                    \
                select_##s(v, n, J->kth, NULL);                                                        \
            else {                                                                                     \
                int64_t m = nan_last_##s(v, v + n, n);                                                 \
                if (RADIX_OK && RADIX_##s && m >= RADIX_MIN) {                                         \
                    uint32_t *w = (uint32_t *)v;                                                       \
                    int64_t negz = 0;                                                                  \
                    for (int64_t i = 0; i < m; i++) {                                                  \
                        R x = v[i];                                                                    \
                        negz += NEGZ_##s(x);                                                           \
                        w[i] = RKEY_##s(x);                                                            \
                    }                                                                                  \
                    radix_keys(w, w + n, m);                                                           \
                    for (int64_t i = 0; i < m; i++) v[i] = (R)RDEKEY_##s(w[i]);                        \
                    if (negz) { /* zeros are equal: put them back in their input order, signs too */   \
                        int64_t z = 0;                                                                 \
                        while (v[z] != 0) z++;                                                         \
                        for (int64_t i = 0; i < n; i++) {                                              \
                            R x = MK_LOAD_##s(&src[i * is]);                                           \
                            if (x == 0) v[z++] = x;                                                    \
                        }                                                                              \
                    }                                                                                  \
                } else if (J->par)                                                                     \
                    msort_##s##_par(v, v + n, m);                                                      \
                else                                                                                   \
                    msort_##s(v, v + n, m);                                                            \
            }                                                                                          \
            S *dst = (S *)J->out + oo;                                                                 \
            for (int64_t i = 0; i < n; i++) MK_STORE_##s(&dst[i * os], v[i]);                          \
        }                                                                                              \
        free(scratch);                                                                                 \
    }

MK_ALL_TYPES_2(SORT_ROWS, _, _)

typedef void (*rows_fn)(sort_job *, int64_t, int64_t);
#define ROWS_ENTRY(E, s, S, R, u1, u2) [E] = rows_##s,
static const rows_fn rows_table[MK_NDTYPES] = {MK_ALL_TYPES_2(ROWS_ENTRY, _, _)};

typedef struct {
    sort_job *J;
    rows_fn fn;
} rows_ctx;

static void rows_range(void *c, int64_t b, int64_t e) {
    rows_ctx *rc = c;
    rc->fn(rc->J, b, e);
}

typedef struct {
    int kind;
    int axis;
    int64_t kth; /* normalised */
} sort_params;

#define PAR_MIN_ROW 65536

static int sort_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const sort_params *sp = p->params;
    mk_array *x = in[0], *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    if (x->size == 0) return 0;
    int ax = sp->axis;
    sort_job J;
    memset(&J, 0, sizeof J);
    J.kind = sp->kind;
    J.in = (const char *)mk_data(x);
    J.out = (char *)mk_data(o);
    J.n = x->shape[ax];
    J.in_st = x->strides[ax];
    J.out_st = o->strides[ax];
    J.kth = sp->kth;
    for (int d = 0; d < x->ndim; d++) {
        if (d == ax) continue;
        J.rshape[J.rnd] = x->shape[d];
        J.rin[J.rnd] = x->strides[d];
        J.rout[J.rnd] = o->strides[d];
        J.rnd++;
    }
    atomic_init(&J.failed, 0);
    int64_t nrows = x->size / J.n;
    rows_ctx rc = {&J, rows_table[x->dtype]};
    bool sorting = J.kind == SK_SORT || J.kind == SK_ARGSORT;
    if (sorting && J.n >= PAR_MIN_ROW && nrows < mk_pool_threads()) {
        J.par = true;
        rc.fn(&J, 0, nrows);
    } else {
        int64_t grain = MK_GRAIN / (J.n * 8);
        mk_parallel_for(nrows, grain > 0 ? grain : 1, rows_range, &rc);
    }
    if (atomic_load(&J.failed)) {
        mk_nomem();
        return -1;
    }
    return 0;
}

static int sort_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int sort_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int sort_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef sort_def = {"sort", sort_eval, NULL, sort_vjp, sort_jvp, sort_vmap, false};

/* ------------------------------------------------------------ constructors */

static mk_array *flatten_all(mk_array *x) {
    int64_t n = x->size;
    return mk_reshape(x, 1, &n);
}

/* axis: as given (for messages); x: already flattened when the caller had
 * no axis. */
static mk_array *sort_node(int kind, const char *name, mk_array *x, int axis, int64_t kth) {
    int ax = mk_norm_axis(name, axis, x->ndim);
    if (ax < 0) return NULL;
    int64_t k = 0;
    if (kind == SK_PART || kind == SK_ARGPART) {
        k = kth < 0 ? kth + x->shape[ax] : kth;
        if (k < 0 || k >= x->shape[ax]) {
            char buf[512];
            mk_error_set(MK_ERR_VALUE, "[%s] Received invalid kth %lld%salong axis %d for array with shape: %s", name,
                         (long long)kth, kind == SK_PART ? "" : " ", axis, mk_shape_str(x->ndim, x->shape, buf, sizeof buf));
            return NULL;
        }
    }
    sort_params *sp = malloc(sizeof *sp);
    if (!sp) return mk_nomem();
    sp->kind = kind;
    sp->axis = ax;
    sp->kth = k;
    mk_dtype t = kind == SK_ARGSORT || kind == SK_ARGPART ? MK_UINT32 : x->dtype;
    return mk_node(&sort_def, sp, t, x->ndim, x->shape, 1, &x);
}

static mk_array *sort_common(int kind, const char *name, mk_array *x, int axis, bool has_axis, int64_t kth) {
    if (has_axis) return sort_node(kind, name, x, axis, kth);
    mk_array *f = flatten_all(x);
    if (!f) return NULL;
    mk_array *r = sort_node(kind, name, f, 0, kth);
    mk_decref(f);
    return r;
}

mk_array *mk_sort(mk_array *x, int axis, bool has_axis) { return sort_common(SK_SORT, "sort", x, axis, has_axis, 0); }

mk_array *mk_argsort(mk_array *x, int axis, bool has_axis) {
    return sort_common(SK_ARGSORT, "argsort", x, axis, has_axis, 0);
}

mk_array *mk_partition(mk_array *x, int kth, int axis, bool has_axis) {
    return sort_common(SK_PART, "partition", x, axis, has_axis, kth);
}

mk_array *mk_argpartition(mk_array *x, int kth, int axis, bool has_axis) {
    return sort_common(SK_ARGPART, "argpartition", x, axis, has_axis, kth);
}

static mk_array *topk_axis(mk_array *x, int k, int axis) {
    int ax = mk_norm_axis("topk", axis, x->ndim);
    if (ax < 0) return NULL;
    int64_t n = x->shape[ax];
    if (k < 0 || k > n) {
        char buf[512];
        mk_error_set(MK_ERR_VALUE, "[topk] Received invalid k=%d along axis %d for array with shape: %s", k, axis,
                     mk_shape_str(x->ndim, x->shape, buf, sizeof buf));
        return NULL;
    }
    if (k == n) {
        mk_incref(x);
        return x;
    }
    mk_array *part = sort_node(SK_PART, "partition", x, ax, -(int64_t)k);
    if (!part) return NULL;
    int64_t start[MK_MAX_NDIM], stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) {
        start[d] = d == ax ? n - k : 0;
        stop[d] = x->shape[d];
        step[d] = 1;
    }
    mk_array *r = mk_slice(part, start, stop, step);
    mk_decref(part);
    return r;
}

mk_array *mk_topk(mk_array *x, int k, int axis, bool has_axis) {
    if (has_axis) return topk_axis(x, k, axis);
    mk_array *f = flatten_all(x);
    if (!f) return NULL;
    mk_array *r = topk_axis(f, k, 0);
    mk_decref(f);
    return r;
}

/* ============================================================ scans */

/* out[j] = OP(out[j - 1], x[j or j - 1]) along a line of `lanes`
 * neighbouring inner positions; the previous value is read back from the
 * output, so it has the output dtype's precision, as MLX's. */
typedef void (*scan_fn)(const void *in, void *out, int64_t n, int64_t inner, int64_t lanes, bool rev, bool incl);

#define SCAN_KERNEL(name, is, IS, IR, os, OS, OR, OPX, INIT)                                            \
    static void name(const void *in_, void *out_, int64_t n, int64_t inner, int64_t lanes, bool rev,   \
                     bool incl) {                                                                      \
        const IS *x = in_;                                                                             \
        OS *o = out_;                                                                                  \
        int64_t step = rev ? -inner : inner;                                                           \
        int64_t oo = rev ? (n - 1) * inner : 0, xo = oo;                                               \
        if (lanes == 1) {                                                                              \
            /* one line: the running value stays in a register, rounded as \
             * a store to the output dtype would round it */                \
            OR acc = incl ? (OR)MK_LOAD_##is(&x[xo]) : RT_##os(INIT(os));                              \
            MK_STORE_##os(&o[oo], acc);                                                                \
            if (incl) xo += step;                                                                      \
            for (int64_t j = 1; j < n; j++) {                                                          \
                IR v = MK_LOAD_##is(&x[xo]);                                                           \
                acc = RT_##os(OPX(acc, v, os));                                                        \
                oo += step;                                                                            \
                xo += step;                                                                            \
                MK_STORE_##os(&o[oo], acc);                                                            \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        for (int64_t i = 0; i < lanes; i++) {                                                          \
            if (incl)                                                                                  \
                MK_STORE_##os(&o[oo + i], (OR)MK_LOAD_##is(&x[xo + i]));                               \
            else                                                                                       \
                MK_STORE_##os(&o[oo + i], INIT(os));                                                   \
        }                                                                                              \
        if (incl) xo += step;                                                                          \
        for (int64_t j = 1; j < n; j++) {                                                              \
            const OS *prev = o + oo;                                                                   \
            const IS *xv = x + xo;                                                                     \
            OS *cur = o + oo + step;                                                                   \
            for (int64_t i = 0; i < lanes; i++) {                                                      \
                OR acc = MK_LOAD_##os(&prev[i]);                                                       \
                IR v = MK_LOAD_##is(&xv[i]);                                                           \
                MK_STORE_##os(&cur[i], OPX(acc, v, os));                                               \
            }                                                                                          \
            oo += step;                                                                                \
            xo += step;                                                                                \
        }                                                                                              \
    }

/* a value as the output dtype stores it, in its compute type */
#define RT_b8(v) ((bool)(v))
#define RT_u8(v) ((uint8_t)(v))
#define RT_u16(v) ((uint16_t)(v))
#define RT_u32(v) ((uint32_t)(v))
#define RT_u64(v) ((uint64_t)(v))
#define RT_i8(v) ((int8_t)(v))
#define RT_i16(v) ((int16_t)(v))
#define RT_i32(v) ((int32_t)(v))
#define RT_i64(v) ((int64_t)(v))
#define RT_f16(v) mk_f16_to_f32(mk_f32_to_f16((float)(v)))
#define RT_f32(v) ((float)(v))
#define RT_f64(v) ((double)(v))
#define RT_bf16(v) mk_bf16_to_f32(mk_f32_to_bf16((float)(v)))
#define RT_c64(v) ((mk_c64)(v))

/* MLX returns numeric_limits<T>::quiet_NaN() when cummax/cummin meet a
 * nan; for its float16/bfloat16 types that is 0. */
#define QNAN_f16 0.0f
#define QNAN_bf16 0.0f
#define QNAN_f32 NAN
#define QNAN_f64 ((double)NAN)
#define TMIN_u8 0
#define TMIN_u16 0
#define TMIN_u32 0
#define TMIN_u64 0
#define TMIN_i8 INT8_MIN
#define TMIN_i16 INT16_MIN
#define TMIN_i32 INT32_MIN
#define TMIN_i64 INT64_MIN
#define TMAX_u8 UINT8_MAX
#define TMAX_u16 UINT16_MAX
#define TMAX_u32 UINT32_MAX
#define TMAX_u64 UINT64_MAX
#define TMAX_i8 INT8_MAX
#define TMAX_i16 INT16_MAX
#define TMAX_i32 INT32_MAX
#define TMAX_i64 INT64_MAX

/* the step OP(acc, v) per op and class; integers wrap in uint64 */
/* a nan running value keeps its payload, as x86 keeps the first operand's */
#define sum_FL(a, v, s) (isnan(a) ? (a) : (a) + (v))
#define sum_IN(a, v, s) ((uint64_t)(a) + (uint64_t)(v))
#define sum_CX(a, v, s) ((a) + (v))
#define prod_FL(a, v, s) (isnan(a) ? (a) : (a) * (v))
#define prod_IN(a, v, s) ((uint64_t)(a) * (uint64_t)(v))
#define prod_BO(a, v, s) ((a) && (v))
#define prod_CX(a, v, s) ((a) * (v))
#define max_FL(a, v, s) (isnan(a) || isnan(v) ? QNAN_##s : (v) < (a) ? (a) : (v))
#define max_IN(a, v, s) ((v) < (a) ? (a) : (v))
#define max_BO(a, v, s) ((a) || (v))
#define max_CX(a, v, s) (CLT(v, a) ? (a) : (v))
#define min_FL(a, v, s) (isnan(a) || isnan(v) ? QNAN_##s : (v) < (a) ? (v) : (a))
#define min_IN(a, v, s) ((v) < (a) ? (v) : (a))
#define min_BO(a, v, s) ((a) && (v))
#define min_CX(a, v, s) (CLT(v, a) ? (v) : (a))
#define lae_FL(a, v, s) lae_##s(a, v)
#define lae_CX(a, v, s) lae_c64(a, v)

/* identities of the exclusive scans */
#define INIT_sum_FL(s) 0
#define INIT_sum_IN(s) 0
#define INIT_sum_CX(s) 0
#define INIT_prod_FL(s) 1
#define INIT_prod_IN(s) 1
#define INIT_prod_BO(s) true
#define INIT_prod_CX(s) 1
#define INIT_max_FL(s) (-INFINITY)
#define INIT_max_IN(s) TMIN_##s
#define INIT_max_BO(s) false
#define INIT_max_CX(s) CMPLXF(-INFINITY, -INFINITY)
#define INIT_min_FL(s) INFINITY
#define INIT_min_IN(s) TMAX_##s
#define INIT_min_BO(s) true
#define INIT_min_CX(s) CMPLXF(INFINITY, INFINITY)
#define INIT_lae_FL(s) (-INFINITY)
#define INIT_lae_CX(s) CMPLXF(-INFINITY, 0.0f)

/* MLX's LogAddExp: the nan-propagating max plus log1p(exp(min - max)), the
 * max itself when min is -inf or max is inf; exp is MLX's float32 one. */
#define FMAXP(x, y) (isnan(y) ? (y) : isnan(x) ? (x) : (x) > (y) ? (x) : (y))
#define FMINP(x, y) (isnan(y) ? (y) : isnan(x) ? (x) : (x) < (y) ? (x) : (y))
static inline float lae_f32(float a, float b) {
    float hi = FMAXP(a, b), lo = FMINP(a, b);
    if (lo == -INFINITY || hi == INFINITY) return hi;
    return hi + log1pf(mk_mlx_expf(lo - hi));
}
static inline double lae_f64(double a, double b) {
    double hi = FMAXP(a, b), lo = FMINP(a, b);
    if (lo == -INFINITY || hi == INFINITY) return hi;
    return hi + log1p((double)mk_mlx_expf((float)(lo - hi)));
}
/* half types: every intermediate is rounded to the type */
static inline float r16(float x) { return mk_f16_to_f32(mk_f32_to_f16(x)); }
static inline float rbf(float x) { return mk_bf16_to_f32(mk_f32_to_bf16(x)); }
#define LAE_HALF(name, RND)                                                                            \
    static inline float name(float a, float b) {                                                       \
        float hi = FMAXP(a, b), lo = FMINP(a, b);                                                      \
        if (lo == -INFINITY || hi == INFINITY) return hi;                                              \
        return hi + RND(log1pf(RND(mk_mlx_expf(RND(lo - hi)))));                                       \
    }
LAE_HALF(lae_f16, r16)
LAE_HALF(lae_bf16, rbf)
/* complex: MLX's maximum/minimum (nan first, then lexicographic), complex
 * exp, and its complex log1p (atan2 for the angle; 0.5 * log1p(x(2 + x) +
 * y^2) near 0, log(hypot(x + 1, y)) otherwise). */
static inline mk_c64 log1p_c64(mk_c64 z) {
    float x = crealf(z), y = cimagf(z);
    float zabs = cabsf(z), theta = atan2f(y, x + 1);
    if (zabs < 0.5f) {
        float r = x * (2 + x) + y * y;
        if (r == 0) return CMPLXF(x, theta);
        return CMPLXF(0.5f * log1pf(r), theta);
    }
    return CMPLXF(logf(hypotf(x + 1, y)), theta);
}
static inline mk_c64 lae_c64(mk_c64 a, mk_c64 b) {
    mk_c64 hi = CNAN(b) ? b : CNAN(a) ? a : CLT(b, a) ? a : b;
    mk_c64 lo = CNAN(b) ? b : CNAN(a) ? a : CLT(a, b) ? a : b;
    if (CEQ(lo, CMPLXF(-INFINITY, 0.0f)) || CEQ(hi, CMPLXF(INFINITY, 0.0f))) return hi;
    return hi + log1p_c64(cexpf(lo - hi));
}

#define SCAN_SAME(E, s, S, R, op, CLS) SCAN_KERNEL(scan_##op##_##s, s, S, R, s, S, R, op##_##CLS, INIT_##op##_##CLS)
#define SCAN_OP_FIC(op)                                                                                \
    MK_FLOAT_TYPES_2(SCAN_SAME, op, FL)                                                                 \
    MK_UINT_TYPES_2(SCAN_SAME, op, IN) MK_SINT_TYPES_2(SCAN_SAME, op, IN) MK_COMPLEX_TYPES_2(SCAN_SAME, op, CX)

SCAN_OP_FIC(sum)
SCAN_OP_FIC(prod)
SCAN_OP_FIC(max)
SCAN_OP_FIC(min)
MK_FLOAT_TYPES_2(SCAN_SAME, lae, FL)
MK_COMPLEX_TYPES_2(SCAN_SAME, lae, CX)
/* bool: sums count into int32; the others stay bool */
SCAN_KERNEL(scan_sum_b8, b8, bool, bool, i32, int32_t, int32_t, sum_IN, INIT_sum_IN)
MK_BOOL_TYPES_2(SCAN_SAME, prod, BO)
MK_BOOL_TYPES_2(SCAN_SAME, max, BO)
MK_BOOL_TYPES_2(SCAN_SAME, min, BO)

/* float16 sum, prod, max and min scans with F16C (issue #15): the steps
 * of the float16 kernels above on the same floats. The input is widened a
 * run at a time by mk_f16_to_f32_run (exact; a signalling NaN kept as the
 * software widening keeps it); the running value is rounded to float16 and
 * back by vcvtps2ph/vcvtph2ps, which round to nearest even (immediate 0)
 * and quiet a NaN keeping its high payload bits, as the software rounding
 * does; lines of lanes keep the running values in float, narrowed into the
 * output row and widened back (the value the software kernel reads back).
 * So the results are the software path's bits (MKPY_NO_F16C=1;
 * tests/test_reduce_f16c.py compares them). */
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define SCAN16_RUN 256
#define SCAN_F16C(op, OPX, INIT)                                                                        \
    __attribute__((target("avx,f16c"))) static void scan16_##op(const void *in_, void *out_, int64_t n, \
                                                                int64_t inner, int64_t lanes, bool rev,  \
                                                                bool incl) {                             \
        const mk_f16 *x = in_;                                                                         \
        mk_f16 *o = out_;                                                                              \
        int64_t step = rev ? -inner : inner;                                                           \
        int64_t oo = rev ? (n - 1) * inner : 0, xo = oo;                                               \
        float xb[SCAN16_RUN];                                                                          \
        if (lanes == 1) {                                                                              \
            float acc = incl ? MK_LOAD_f16(&x[xo]) : RT_f16(INIT(f16));                                \
            MK_STORE_f16(&o[oo], acc);                                                                 \
            if (incl) xo += step;                                                                      \
            for (int64_t j = 1; j < n;) {                                                              \
                int64_t m = n - j < SCAN16_RUN ? n - j : SCAN16_RUN;                                   \
                bool back = step == -1; /* a reversed contiguous line: widen it forwards */            \
                mk_f16_to_f32_run(back ? x + xo - (m - 1) : x + xo, back ? 1 : step, xb, m);           \
                for (int64_t k = 0; k < m; k++) {                                                      \
                    float v = xb[back ? m - 1 - k : k];                                                \
                    __m128i h = _mm_cvtps_ph(_mm_set_ss(OPX(acc, v, f16)), 0);                         \
                    oo += step;                                                                        \
                    o[oo].bits = (uint16_t)_mm_extract_epi16(h, 0);                                    \
                    acc = _mm_cvtss_f32(_mm_cvtph_ps(h));                                              \
                }                                                                                      \
                xo += m * step;                                                                        \
                j += m;                                                                                \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        float acc[SCAN16_RUN] = {0}; /* lanes <= SCAN_LANES */                                         \
        if (incl)                                                                                      \
            mk_f16_to_f32_run(x + xo, 1, acc, lanes);                                                  \
        else                                                                                           \
            for (int64_t i = 0; i < lanes; i++) acc[i] = INIT(f16);                                    \
        mk_f32_to_f16_run(acc, o + oo, lanes);                                                         \
        mk_f16_to_f32_run(o + oo, 1, acc, lanes);                                                      \
        if (incl) xo += step;                                                                          \
        for (int64_t j = 1; j < n; j++) {                                                              \
            mk_f16_to_f32_run(x + xo, 1, xb, lanes);                                                   \
            for (int64_t i = 0; i < lanes; i++) acc[i] = OPX(acc[i], xb[i], f16);                      \
            oo += step;                                                                                \
            mk_f32_to_f16_run(acc, o + oo, lanes);                                                     \
            mk_f16_to_f32_run(o + oo, 1, acc, lanes);                                                  \
            xo += step;                                                                                \
        }                                                                                              \
    }
SCAN_F16C(sum, sum_FL, INIT_sum_FL)
SCAN_F16C(prod, prod_FL, INIT_prod_FL)
SCAN_F16C(max, max_FL, INIT_max_FL)
SCAN_F16C(min, min_FL, INIT_min_FL)
static const scan_fn scan16_table[MK_SCAN_LOGADDEXP] = {scan16_sum, scan16_prod, scan16_max, scan16_min};
#define HAVE_SCAN16 1
#endif

#define SENTRY(E, s, S, R, op, u) [E] = scan_##op##_##s,
#define SROW_ALL(op) {MK_ALL_TYPES_2(SENTRY, op, _)}
static const scan_fn scan_table[5][MK_NDTYPES] = {
    [MK_SCAN_SUM] = SROW_ALL(sum),
    [MK_SCAN_PROD] = SROW_ALL(prod),
    [MK_SCAN_MAX] = SROW_ALL(max),
    [MK_SCAN_MIN] = SROW_ALL(min),
    [MK_SCAN_LOGADDEXP] = {MK_FLOAT_TYPES_2(SENTRY, lae, _) MK_COMPLEX_TYPES_2(SENTRY, lae, _)},
};

typedef struct {
    mk_scan_op op;
    int axis;
    bool reverse, inclusive;
} scan_params;

#define SCAN_LANES 256
#ifdef HAVE_SCAN16
_Static_assert(SCAN_LANES <= SCAN16_RUN, "float16 scan lines hold SCAN_LANES lanes");
#endif

typedef struct {
    scan_fn fn;
    const char *in;
    char *out;
    size_t isz, osz;
    int64_t n, inner, nblk;
    bool rev, incl;
} scan_job;

static void scan_range(void *c, int64_t b, int64_t e) {
    const scan_job *J = c;
    for (int64_t k = b; k < e; k++) {
        int64_t ob = k / J->nblk, i0 = (k % J->nblk) * SCAN_LANES;
        int64_t lanes = J->inner - i0 < SCAN_LANES ? J->inner - i0 : SCAN_LANES;
        int64_t off = ob * J->n * J->inner + i0;
        J->fn(J->in + off * (int64_t)J->isz, J->out + off * (int64_t)J->osz, J->n, J->inner, lanes, J->rev, J->incl);
    }
}

static int scan_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const scan_params *sp = p->params;
    mk_array *x = in[0], *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    if (x->size == 0) return 0;
    size_t isz = mk_dtype_size(x->dtype);
    const void *src = mk_data(x);
    void *tmp = NULL;
    if (!(x->flags & MK_ROW_CONTIG)) {
        tmp = malloc((size_t)x->size * isz);
        if (!tmp) {
            mk_nomem();
            return -1;
        }
        int64_t st[MK_MAX_NDIM], acc = 1;
        for (int d = x->ndim - 1; d >= 0; d--) {
            st[d] = acc;
            acc *= x->shape[d];
        }
        mk_copy_into(x, tmp, st);
        src = tmp;
    }
    int ax = sp->axis;
    int64_t inner = 1;
    for (int d = ax + 1; d < x->ndim; d++) inner *= x->shape[d];
    int64_t n = x->shape[ax], outer = x->size / (n * inner);
    scan_fn fn = scan_table[sp->op][x->dtype];
#ifdef HAVE_SCAN16
    if (x->dtype == MK_FLOAT16 && sp->op < MK_SCAN_LOGADDEXP && mk_f16c()) fn = scan16_table[sp->op];
#endif
    scan_job J = {fn, src, mk_data(o), isz, mk_dtype_size(o->dtype), n, inner,
                  (inner + SCAN_LANES - 1) / SCAN_LANES, sp->reverse, sp->inclusive};
    int64_t lanes = inner < SCAN_LANES ? inner : SCAN_LANES;
    int64_t grain = MK_GRAIN / (n * lanes);
    mk_parallel_for(outer * J.nblk, grain > 0 ? grain : 1, scan_range, &J);
    free(tmp);
    return 0;
}

static int scan_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int scan_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static int scan_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static const mk_opdef scan_def = {"scan", scan_eval, NULL, scan_vjp, scan_jvp, scan_vmap, false};

static const char *const scan_names[5] = {"cumsum", "cumprod", "cummax", "cummin", "logcumsumexp"};

static mk_array *scan_axis(mk_scan_op op, mk_array *x, int axis, bool reverse, bool inclusive) {
    int ax = mk_norm_axis(scan_names[op], axis, x->ndim);
    if (ax < 0) return NULL;
    mk_array *src = x;
    if (op == MK_SCAN_LOGADDEXP && !mk_is_inexact(x->dtype)) {
        src = mk_astype(x, MK_FLOAT32);
        if (!src) return NULL;
    } else {
        mk_incref(src);
    }
    mk_dtype t = op == MK_SCAN_SUM && src->dtype == MK_BOOL ? MK_INT32 : src->dtype;
    mk_array *r = NULL;
    scan_params *sp = malloc(sizeof *sp);
    if (!sp) {
        mk_nomem();
    } else {
        sp->op = op;
        sp->axis = ax;
        sp->reverse = reverse;
        sp->inclusive = inclusive;
        r = mk_node(&scan_def, sp, t, src->ndim, src->shape, 1, &src);
    }
    mk_decref(src);
    return r;
}

mk_array *mk_scan(mk_scan_op op, mk_array *x, int axis, bool has_axis, bool reverse, bool inclusive) {
    if (has_axis) return scan_axis(op, x, axis, reverse, inclusive);
    mk_array *f = flatten_all(x);
    if (!f) return NULL;
    mk_array *r = scan_axis(op, f, 0, reverse, inclusive);
    mk_decref(f);
    return r;
}

/* ---------------------------------------------------------- transformation rules */

/* sort and partition permute x along the axis: the cotangent goes back
 * through the permutation (argsort / argpartition) */
static int sort_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const sort_params *sp = p->params;
    mk_array *x = p->inputs[0];
    if (!want[0] || !cots[0] || sp->kind == SK_ARGSORT || sp->kind == SK_ARGPART) return 0;
    mk_arena A = {0};
    mk_array *idx = mk_ar_keep(&A, sort_node(sp->kind == SK_SORT ? SK_ARGSORT : SK_ARGPART,
                                             sp->kind == SK_SORT ? "argsort" : "argpartition", x, sp->axis, sp->kth));
    idx = mk_ar_un(&A, MK_UNARY_stop_gradient, idx);
    mk_array *z = mk_ar_zeros_like(&A, x);
    grads[0] = idx && z ? mk_put_along_axis(z, idx, cots[0], sp->axis, true) : NULL;
    mk_ar_free(&A);
    return grads[0] ? 0 : -1;
}

static int sort_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    const sort_params *sp = p->params;
    if (sp->kind == SK_ARGSORT || sp->kind == SK_ARGPART) return 0;
    mk_arena A = {0};
    mk_array *idx = mk_ar_keep(&A, sort_node(sp->kind == SK_SORT ? SK_ARGSORT : SK_ARGPART,
                                             sp->kind == SK_SORT ? "argsort" : "argpartition", p->inputs[0], sp->axis,
                                             sp->kth));
    idx = mk_ar_un(&A, MK_UNARY_stop_gradient, idx);
    out[0] = idx ? mk_take_along_axis(tans[0], idx, sp->axis, true) : NULL;
    mk_ar_free(&A);
    return out[0] ? 0 : -1;
}

static int sort_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const sort_params *sp = p->params;
    mk_arena A = {0};
    mk_array *x = mk_ar_batch_front(&A, in[0], axes[0], 1);
    outs[0] = x ? sort_node(sp->kind, "sort", x, sp->axis + 1, sp->kth) : NULL;
    out_axes[0] = 0;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

/* Inclusive cummax/cummin: each position's cotangent goes to the element
 * holding the running extreme there (ties: the latest in scan order). Where
 * x equals the output, mark the index; a running max (min for reverse
 * scans) of the marks finds the owner; the scatter-add along the axis is
 * the vjp of take_along_axis(zeros, owner). */
static mk_array *extreme_route(mk_arena *A, const scan_params *sp, mk_array *x, mk_array *out, mk_array *cot) {
    int64_t n = x->shape[sp->axis], ishape[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) ishape[d] = d == sp->axis ? n : 1;
    mk_array *iota = mk_ar_reshape(A, mk_ar_keep(A, mk_arange(0, (double)n, 1, MK_INT32)), x->ndim, ishape);
    mk_array *fill = mk_ar_keep(A, mk_scalar_i64(MK_INT32, sp->reverse ? n : -1));
    mk_array *marked = mk_ar_where(A, mk_ar_bin(A, MK_BINARY_equal, x, out), iota, fill);
    mk_array *owner = marked ? mk_ar_keep(A, mk_scan(sp->reverse ? MK_SCAN_MIN : MK_SCAN_MAX, marked, sp->axis, true,
                                                      sp->reverse, true))
                             : NULL;
    owner = mk_ar_un(A, MK_UNARY_stop_gradient, owner);
    mk_array *zz = mk_ar_zeros_like(A, x);
    mk_array *zt = zz ? mk_ar_keep(A, mk_tracer(zz)) : NULL;
    mk_array *taken = zt && owner ? mk_ar_keep(A, mk_take_along_axis(zt, owner, sp->axis, true)) : NULL;
    mk_array *gz = NULL;
    if (taken && mk_vjp_graph(1, &taken, &cot, 1, &zt, &gz) == 0) return mk_ar_keep(A, gz);
    return NULL;
}

/* logcumsumexp's output for its vjp/jvp: the primitive's own, or the scan again */
static mk_array *lse_output(mk_arena *A, mk_prim *p, mk_array *x, const scan_params *sp) {
    mk_array *out = mk_ar_output(A, p, 0);
    return out ? out : mk_ar_keep(A, mk_scan(MK_SCAN_LOGADDEXP, x, sp->axis, true, sp->reverse, sp->inclusive));
}

/* v split by sign, for sums taken in log space: max(v, 0) and max(-v, 0) */
static void sign_parts(mk_arena *A, mk_array *v, mk_array *part[2]) {
    mk_array *z = mk_ar_scalar(A, v, 0.0);
    part[0] = mk_ar_bin(A, MK_BINARY_maximum, v, z);
    part[1] = mk_ar_bin(A, MK_BINARY_maximum, mk_ar_neg(A, v), z);
}
static int scan_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const scan_params *sp = p->params;
    mk_array *x = p->inputs[0];
    if (!want[0] || !cots[0]) return 0;
    mk_arena A = {0};
    mk_array *g = NULL;
    switch (sp->op) {
    case MK_SCAN_SUM: g = mk_ar_keep(&A, mk_scan(MK_SCAN_SUM, cots[0], sp->axis, true, !sp->reverse, sp->inclusive)); break;
    case MK_SCAN_PROD: {
        /* exact with zeros (MLX's scheme): before the first zero along a line,
         * (reverse cumsum of c * out) / x; at the first zero, the same with that
         * zero replaced by 1; after it, 0 */
        mk_array *out = mk_ar_output(&A, p, 0);
        if (!out) out = mk_ar_keep(&A, mk_scan(MK_SCAN_PROD, x, sp->axis, true, sp->reverse, sp->inclusive));
        mk_array *other = mk_ar_keep(&A, mk_scan(MK_SCAN_PROD, x, sp->axis, true, sp->reverse, !sp->inclusive));
        mk_array *incl = sp->inclusive ? out : other, *excl = sp->inclusive ? other : out;
        mk_array *z = mk_ar_scalar(&A, x, 0.0);
        mk_array *eqz = mk_ar_bin(&A, MK_BINARY_equal, incl, z);
        mk_array *first = mk_ar_bin(&A, MK_BINARY_logical_and, eqz, mk_ar_bin(&A, MK_BINARY_not_equal, excl, z));
        mk_array *x1 = mk_ar_where(&A, first, mk_ar_scalar(&A, x, 1.0), x);
        mk_array *out1 = x1 ? mk_ar_keep(&A, mk_scan(MK_SCAN_PROD, x1, sp->axis, true, sp->reverse, sp->inclusive)) : NULL;
        mk_array *m = mk_ar_mul(&A, cots[0], out), *m1 = mk_ar_mul(&A, cots[0], out1);
        mk_array *s = m ? mk_ar_keep(&A, mk_scan(MK_SCAN_SUM, m, sp->axis, true, !sp->reverse, sp->inclusive)) : NULL;
        mk_array *s1 = m1 ? mk_ar_keep(&A, mk_scan(MK_SCAN_SUM, m1, sp->axis, true, !sp->reverse, sp->inclusive)) : NULL;
        mk_array *regular = mk_ar_div(&A, s, x);
        g = mk_ar_where(&A, first, s1, mk_ar_where(&A, eqz, z, regular));
        break;
    }
    case MK_SCAN_MAX:
    case MK_SCAN_MIN: {
        mk_array *out = mk_ar_output(&A, p, 0);
        if (!out) out = mk_ar_keep(&A, mk_scan(sp->op, x, sp->axis, true, sp->reverse, sp->inclusive));
        int64_t n = x->shape[sp->axis];
        if (sp->inclusive || n < 2) {
            g = sp->inclusive ? extreme_route(&A, sp, x, out, cots[0]) : mk_ar_zeros_like(&A, x);
            break;
        }
        /* exclusive: out[j] is the inclusive extreme of the elements before
         * j (after j for reverse scans), so route out's window over x's */
        int64_t st[MK_MAX_NDIM], sx[MK_MAX_NDIM], so[MK_MAX_NDIM], step[MK_MAX_NDIM];
        for (int d = 0; d < x->ndim; d++) {
            st[d] = so[d] = 0;
            sx[d] = x->shape[d];
            step[d] = 1;
        }
        int64_t ex[MK_MAX_NDIM], eo[MK_MAX_NDIM];
        memcpy(ex, sx, sizeof ex);
        memcpy(eo, sx, sizeof eo);
        int a = sp->axis;
        if (sp->reverse) {
            st[a] = 1;        /* x[1:] */
            eo[a] = n - 1;    /* out[:-1] */
        } else {
            ex[a] = n - 1;    /* x[:-1] */
            so[a] = 1;        /* out[1:] */
        }
        mk_array *xw = mk_ar_keep(&A, mk_slice(x, st, ex, step));
        mk_array *ow = mk_ar_keep(&A, mk_slice(out, so, eo, step));
        mk_array *cw = mk_ar_keep(&A, mk_slice(cots[0], so, eo, step));
        mk_array *gw = xw && ow && cw ? extreme_route(&A, sp, xw, ow, cw) : NULL;
        int64_t pw[MK_MAX_NDIM][2];
        memset(pw, 0, sizeof pw);
        pw[a][sp->reverse ? 0 : 1] = 1;
        mk_array *zero = mk_ar_scalar(&A, x, 0.0);
        g = gw && zero ? mk_ar_keep(&A, mk_pad(gw, (const int64_t(*)[2])pw, zero)) : NULL;
        break;
    }
    case MK_SCAN_LOGADDEXP: {
        /* g_i = the sum of cot_j exp(x_i - out_j) over the j whose window holds i
         * (a reverse scan), in log space per sign of the cotangent (no overflow):
         * exp(x + L+) - exp(x + L-), L+- the reverse logcumsumexp of log(+-cot) - out */
        mk_array *out = lse_output(&A, p, x, sp), *part[2];
        sign_parts(&A, mk_ar_cast(&A, cots[0], x->dtype), part);
        for (int k = 0; k < 2; k++) {
            mk_array *l = mk_ar_sub(&A, mk_ar_un(&A, MK_UNARY_log, part[k]), out);
            mk_array *L = l ? mk_ar_keep(&A, mk_scan(MK_SCAN_LOGADDEXP, l, sp->axis, true, !sp->reverse, sp->inclusive)) : NULL;
            part[k] = mk_ar_un(&A, MK_UNARY_exp, mk_ar_add(&A, x, L));
        }
        g = mk_ar_sub(&A, part[0], part[1]);
        break;
    }
    default:
        mk_error_set(MK_ERR_VALUE, "[Primitive::vjp] Not implemented for scan.");
        break;
    }
    grads[0] = mk_ar_out(g);
    mk_ar_free(&A);
    return grads[0] ? 0 : -1;
}

/* logcumsumexp: out'_j = the sum of t_i exp(x_i - out_j) over j's window, in
 * log space per sign of t (exp(L+ - out) - exp(L- - out), L+- the scan of
 * log(+-t) + x); the other scans take their jvp from their vjp */
static int scan_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    const scan_params *sp = p->params;
    if (sp->op != MK_SCAN_LOGADDEXP) return mk_jvp_from_vjp(p, tans, out);
    if (!tans[0]) return 0;
    mk_array *x = p->inputs[0];
    mk_arena A = {0};
    mk_array *y = lse_output(&A, p, x, sp), *part[2];
    sign_parts(&A, mk_ar_cast(&A, tans[0], x->dtype), part);
    for (int k = 0; k < 2; k++) {
        mk_array *l = mk_ar_add(&A, mk_ar_un(&A, MK_UNARY_log, part[k]), x);
        mk_array *L = l ? mk_ar_keep(&A, mk_scan(MK_SCAN_LOGADDEXP, l, sp->axis, true, sp->reverse, sp->inclusive)) : NULL;
        part[k] = mk_ar_un(&A, MK_UNARY_exp, mk_ar_sub(&A, L, y));
    }
    out[0] = mk_ar_out(mk_ar_sub(&A, part[0], part[1]));
    mk_ar_free(&A);
    return out[0] ? 0 : -1;
}

static int scan_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const scan_params *sp = p->params;
    mk_arena A = {0};
    mk_array *x = mk_ar_batch_front(&A, in[0], axes[0], 1);
    outs[0] = x ? scan_axis(sp->op, x, sp->axis + 1, sp->reverse, sp->inclusive) : NULL;
    out_axes[0] = 0;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

/* ============================================================ searchsorted */

/* MLX's SearchSorted primitive: a binary search per value with sort's
 * comparator (LT: nan last), so an unsorted sequence gives what MLX's gives. */
typedef struct {
    bool right;
} ss_params;

typedef struct {
    const char *seq, *v;
    uint32_t *out;
    int64_t sst;
    uint32_t n;
    bool right;
    mk_dtype t;
} ss_ctx;

#define SS_ROW(E, s, S, R)                                                                            \
    static void ss_row_##s(const ss_ctx *c, const int64_t *off, const int64_t *st, int64_t len) {      \
        const S *a = (const S *)c->seq, *v = (const S *)c->v + off[0];                                 \
        uint32_t *o = c->out + off[1];                                                                 \
        for (int64_t i = 0; i < len; i++) {                                                            \
            R x = MK_LOAD_##s(&v[i * st[0]]);                                                          \
            uint32_t lo = 0, hi = c->n;                                                                \
            while (lo < hi) {                                                                          \
                uint32_t mid = lo + (hi - lo) / 2;                                                     \
                R m = MK_LOAD_##s(&a[(int64_t)mid * c->sst]);                                          \
                if (c->right ? !LT_##s(x, m) : LT_##s(m, x))                                           \
                    lo = mid + 1;                                                                      \
                else                                                                                   \
                    hi = mid;                                                                          \
            }                                                                                          \
            o[i * st[1]] = lo;                                                                         \
        }                                                                                              \
    }
MK_ALL_TYPES(SS_ROW)

static void ss_rows(void *c_, const int64_t *off, const int64_t *st, int64_t len) {
    const ss_ctx *c = c_;
    switch (c->t) {
#define SS_CASE(E, s, S, R)                                                                           \
    case E:                                                                                            \
        ss_row_##s(c, off, st, len);                                                                   \
        break;
        MK_ALL_TYPES(SS_CASE)
#undef SS_CASE
    default:
        break;
    }
}

static int ss_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const ss_params *sp = p->params;
    const mk_array *seq = in[0], *v = in[1];
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    ss_ctx c = {mk_data(seq), mk_data(v), mk_data(o), seq->strides[0], (uint32_t)seq->size, sp->right, seq->dtype};
    const int64_t *st[2] = {v->strides, o->strides};
    mk_iter it;
    mk_iter_init(&it, v->ndim, v->shape, 2, st);
    int64_t depth = 1;
    while (depth < 40 && ((int64_t)1 << depth) <= seq->size) depth++;
    mk_iter_run(&it, MK_GRAIN / depth, ss_rows, &c);
    return 0;
}

/* Only the values may be batched (MLX's rule and message). */
static int ss_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    if (axes[0] >= 0) {
        mk_error_set(MK_ERR_VALUE,
                     "[searchsorted] Cannot vmap over the sorted sequence, only over the values being searched for.");
        return -1;
    }
    outs[0] = mk_searchsorted(in[0], in[1], ((const ss_params *)p->params)->right);
    out_axes[0] = axes[1];
    return outs[0] ? 0 : -1;
}

/* MLX's rules: zero cotangents for the inputs, a zero uint32 tangent */
static int ss_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    (void)cots;
    for (int i = 0; i < 2; i++) {
        const mk_array *x = p->inputs[i];
        if (want[i] && !(grads[i] = mk_zeros(x->ndim, x->shape, x->dtype))) return -1;
    }
    return 0;
}

static int ss_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    (void)tans;
    const mk_array *v = p->inputs[1];
    return (out[0] = mk_zeros(v->ndim, v->shape, MK_UINT32)) ? 0 : -1;
}

static const mk_opdef ss_def = {"SearchSorted", ss_eval, NULL, ss_vjp, ss_jvp, ss_vmap, false, true, sizeof(ss_params)};

mk_array *mk_searchsorted(mk_array *seq, mk_array *values, bool right) {
    if (seq->ndim != 1) {
        mk_error_set(MK_ERR_VALUE, "[searchsorted] The sorted sequence must be 1-D but has %d dimensions.",
                     seq->ndim);
        return NULL;
    }
    if (seq->size > (int64_t)UINT32_MAX) {
        mk_error_set(MK_ERR_VALUE,
                     "[searchsorted] The sorted sequence has %lld elements, more than the uint32 output can index.",
                     (long long)seq->size);
        return NULL;
    }
    mk_dtype t = mk_promote(seq->dtype, values->dtype);
    ss_params *sp = malloc(sizeof *sp);
    if (!sp) return mk_nomem();
    sp->right = right;
    mk_array *in[2] = {mk_as_dtype(seq, t), mk_as_dtype(values, t)};
    mk_array *r = NULL;
    if (in[0] && in[1]) {
        r = mk_node(&ss_def, sp, MK_UINT32, values->ndim, values->shape, 2, in);
        sp = NULL;
    }
    free(sp);
    for (int k = 0; k < 2; k++) mk_xdecref(in[k]);
    return r;
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_sort(const mk_prim *p, int *kind, int *axis, int64_t *kth) {
    if (p->op != &sort_def) return false;
    const sort_params *sp = p->params;
    *kind = sp->kind;
    *axis = sp->axis;
    *kth = sp->kth;
    return true;
}
bool mk_xp_searchsorted(const mk_prim *p, bool *right) {
    if (p->op != &ss_def) return false;
    *right = ((const ss_params *)p->params)->right;
    return true;
}
bool mk_xp_scan(const mk_prim *p, int *op, int *axis, bool *reverse, bool *inclusive) {
    if (p->op != &scan_def) return false;
    const scan_params *sp = p->params;
    *op = (int)sp->op;
    *axis = sp->axis;
    *reverse = sp->reverse;
    *inclusive = sp->inclusive;
    return true;
}
