/* Reductions: sum, prod, max, min, all, any, argmax, argmin, and the ops
 * built on them as MLX builds them (mean, var, std, logsumexp, softmax).
 *
 * One evaluator runs every reduction. It splits the input's dims into kept
 * dims (the output's, row-major) and reduced dims, drops size-1 dims, merges
 * neighbours that are contiguous, and picks a layout:
 *   row mode: each output element reduces a strided run (the innermost
 *             reduced dim, usually stride 1) with a lane-parallel kernel;
 *             many short rows go through one call per run of outputs;
 *   col mode: when the last kept dim has the smaller stride (reducing a
 *             leading axis), a block of up to CHUNK outputs is accumulated
 *             at once, reading the input contiguously along that dim.
 * Work items are (block of outputs, part of the reduced range); when there
 * are fewer blocks than threads the reduced range is split too and the
 * partial accumulators are combined in order afterwards, so one long row
 * (a full reduction) uses every thread.
 *
 * Kernels are generated per (op, dtype) from one step expression. float16,
 * bfloat16 and float32 sums run in float lanes over blocks of BLOCK elements
 * and add each block into a double, which keeps 1e6-element sums within a
 * few ulps; in col mode, blocks of COLB rows are summed into a float row
 * (vectorised) and then into the double accumulators, the blocks being
 * aligned in the reduced range so that results do not depend on the thread
 * count. Integers accumulate in 32- or 64-bit unsigned arithmetic
 * (wrapping as MLX's int32/int64 accumulators do).
 *
 * softmax and logsumexp over the last axis are fused row kernels (MLX's
 * Softmax and LogSumExp primitives) using MLX's own exp (mk_mlx_expf), so
 * short float32 rows give MLX's bits; other axes compose max, exp, sum as
 * MLX does, so dtypes and quirks follow it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "half_fast.h"
#include "iter.h"
#include "mlx_math.h"
#include "ops.h"
#include "transforms.h"
#include "compile.h"
#include "pool.h"
#include "simd.h"
#include "types.h"

#define LANES 8
#define BLOCK 1024 /* elements summed in float lanes before going to double */
#define CHUNK 4096 /* outputs per block in col mode */
#define COLB 128   /* col mode, float sums: rows summed in float before going to double */
#define MAX_PARTS 64 /* most parts one reduction is split into */
#define SPLIT_ROWS_BELOW 16 /* softmax/logsumexp: fewer rows than this are split into parts */

/* ============================================================ kernels */

/* acc op= reduce(x[0], x[st], ..., x[(n-1)st]); pos: index of x[0] in the
 * reduced range (used by arg reductions). */
typedef void (*row_fn)(const void *x, int64_t st, int64_t n, int64_t pos, void *acc);
/* acc[j] op= x[r * rs + j * st] for j < n and r < nr, row r being at
 * reduced index pos + r. */
typedef void (*col_fn)(const void *x, int64_t st, int64_t n, int64_t rs, int64_t nr, int64_t pos, void *acc);
/* out[r] = reduce(x[r * xs + i * st] for i < n) for r < nrows. */
typedef void (*rows_fn)(const void *x, int64_t xs, int64_t nrows, int64_t st, int64_t n, void *out);

typedef struct {
    size_t asz; /* bytes per accumulator */
    void (*init)(void *acc, int64_t n);
    row_fn row;
    col_fn col;
    rows_fn rows;
    void (*comb)(void *acc, const void *later, int64_t n); /* acc[j] op= later[j] */
    void (*fin)(const void *acc, void *out, int64_t n);    /* out[j] = acc[j] */
} rkern;

/* Per-dtype helpers: comparison (complex: lexicographic, as MLX), nan test,
 * and the identities of max and min. */
#define GT_REAL(a, b) ((a) > (b))
#define GT_CPLX(a, b) (crealf(a) > crealf(b) || (crealf(a) == crealf(b) && cimagf(a) > cimagf(b)))
#define GT_b8 GT_REAL
#define GT_u8 GT_REAL
#define GT_u16 GT_REAL
#define GT_u32 GT_REAL
#define GT_u64 GT_REAL
#define GT_i8 GT_REAL
#define GT_i16 GT_REAL
#define GT_i32 GT_REAL
#define GT_i64 GT_REAL
#define GT_f16 GT_REAL
#define GT_f32 GT_REAL
#define GT_f64 GT_REAL
#define GT_bf16 GT_REAL
#define GT_c64 GT_CPLX

#define NAN_INT(x) ((void)(x), 0)
#define NAN_FLT(x) isnan(x)
#define NAN_CPLX(x) (isnan(crealf(x)) || isnan(cimagf(x)))
#define ISNAN_b8 NAN_INT
#define ISNAN_u8 NAN_INT
#define ISNAN_u16 NAN_INT
#define ISNAN_u32 NAN_INT
#define ISNAN_u64 NAN_INT
#define ISNAN_i8 NAN_INT
#define ISNAN_i16 NAN_INT
#define ISNAN_i32 NAN_INT
#define ISNAN_i64 NAN_INT
#define ISNAN_f16 NAN_FLT
#define ISNAN_f32 NAN_FLT
#define ISNAN_f64 NAN_FLT
#define ISNAN_bf16 NAN_FLT
#define ISNAN_c64 NAN_CPLX

#define LOWEST_b8 false
#define LOWEST_u8 0
#define LOWEST_u16 0
#define LOWEST_u32 0
#define LOWEST_u64 0
#define LOWEST_i8 INT8_MIN
#define LOWEST_i16 INT16_MIN
#define LOWEST_i32 INT32_MIN
#define LOWEST_i64 INT64_MIN
#define LOWEST_f16 (-INFINITY)
#define LOWEST_f32 (-INFINITY)
#define LOWEST_f64 (-INFINITY)
#define LOWEST_bf16 (-INFINITY)
#define LOWEST_c64 (-INFINITY)
#define HIGHEST_b8 true
#define HIGHEST_u8 UINT8_MAX
#define HIGHEST_u16 UINT16_MAX
#define HIGHEST_u32 UINT32_MAX
#define HIGHEST_u64 UINT64_MAX
#define HIGHEST_i8 INT8_MAX
#define HIGHEST_i16 INT16_MAX
#define HIGHEST_i32 INT32_MAX
#define HIGHEST_i64 INT64_MAX
#define HIGHEST_f16 INFINITY
#define HIGHEST_f32 INFINITY
#define HIGHEST_f64 INFINITY
#define HIGHEST_bf16 INFINITY
#define HIGHEST_c64 INFINITY

/* Identity and step of each op; a nan wins max and min, as in MLX. */
#define INIT_sum(s) 0
#define INIT_prod(s) 1
#define INIT_max(s) LOWEST_##s
#define INIT_min(s) HIGHEST_##s
#define INIT_all(s) true
#define INIT_any(s) false
#define STEP_sum(s, a, x) ((a) + (x))
#define STEP_prod(s, a, x) ((a) * (x))
#define STEP_max(s, a, x) ((GT_##s(x, a) | ISNAN_##s(x)) ? (x) : (a))
#define STEP_min(s, a, x) ((GT_##s(a, x) | ISNAN_##s(x)) ? (x) : (a))
#define STEP_all(s, a, x) ((a) && (x))
#define STEP_any(s, a, x) ((a) || (x))

/* Kernels of reduction `op` over dtype suffix s (storage S): lanes of type L,
 * accumulator A, result stored with MK_STORE_os into OS. */
#define RKERNELS(op, s, S, L, A, os, OS)                                                               \
    static void init_##op##_##s(void *acc_, int64_t n) {                                               \
        A *acc = acc_;                                                                                 \
        for (int64_t i = 0; i < n; i++) acc[i] = (A)(INIT_##op(s));                                    \
    }                                                                                                  \
    MK_SIMD_CLONES(static void, row_##op##_##s, (const void *x_, int64_t st, int64_t n, int64_t pos,      \
                                              void *acc_), (x_, st, n, pos, acc_), {                                            \
        const S *x = x_;                                                                               \
        A total = *(A *)acc_;                                                                          \
        (void)pos;                                                                                     \
        while (n > 0) {                                                                                \
            int64_t m = n < BLOCK ? n : BLOCK, i = 0;                                                  \
            L lane[LANES];                                                                             \
            for (int k = 0; k < LANES; k++) lane[k] = (L)(INIT_##op(s));                               \
            if (st == 1) {                                                                             \
                for (; i + LANES <= m; i += LANES)                                                     \
                    for (int k = 0; k < LANES; k++) {                                                  \
                        L v = (L)MK_LOAD_##s(&x[i + k]);                                               \
                        lane[k] = STEP_##op(s, lane[k], v);                                            \
                    }                                                                                  \
            } else {                                                                                   \
                for (; i + LANES <= m; i += LANES)                                                     \
                    for (int k = 0; k < LANES; k++) {                                                  \
                        L v = (L)MK_LOAD_##s(&x[(i + k) * st]);                                        \
                        lane[k] = STEP_##op(s, lane[k], v);                                            \
                    }                                                                                  \
            }                                                                                          \
            L t = lane[0];                                                                             \
            for (int k = 1; k < LANES; k++) t = STEP_##op(s, t, lane[k]);                              \
            for (; i < m; i++) {                                                                       \
                L v = (L)MK_LOAD_##s(&x[i * st]);                                                      \
                t = STEP_##op(s, t, v);                                                                \
            }                                                                                          \
            A ta = (A)t;                                                                               \
            total = STEP_##op(s, total, ta);                                                           \
            x += m * st;                                                                               \
            n -= m;                                                                                    \
        }                                                                                              \
        *(A *)acc_ = total;                                                                            \
    })                                                                                                  \
    MK_SIMD_CLONES(static void, col_##op##_##s, (const void *x_, int64_t st, int64_t n, int64_t rs,      \
                                              int64_t nr, int64_t pos, void *acc_), (x_, st, n, rs, nr, pos, acc_), {                   \
        A *acc = acc_;                                                                                 \
        (void)pos;                                                                                     \
        if (sizeof(L) != sizeof(A) && st == 1 && n <= CHUNK) {                                         \
            /* float lanes, double accumulators: COLB rows at a time into a float \
             * row (vectorised), then into the doubles, as the row mode does; the    \
             * split over threads keeps blocks whole (reduce_item) */               \
            L blk[CHUNK];                                                                              \
            for (int64_t r0 = 0, r1; r0 < nr; r0 = r1) {                                               \
                /* blocks at multiples of COLB in the whole reduced range */                          \
                r1 = r0 + COLB - (pos + r0) % COLB;                                                    \
                if (r1 > nr) r1 = nr;                                                                  \
                const S *x = (const S *)x_ + r0 * rs;                                                  \
                for (int64_t i = 0; i < n; i++) blk[i] = (L)MK_LOAD_##s(&x[i]);                        \
                for (int64_t r = r0 + 1; r < r1; r++) {                                                \
                    x = (const S *)x_ + r * rs;                                                        \
                    for (int64_t i = 0; i < n; i++) {                                                  \
                        L v = (L)MK_LOAD_##s(&x[i]);                                                   \
                        blk[i] = STEP_##op(s, blk[i], v);                                              \
                    }                                                                                  \
                }                                                                                      \
                for (int64_t i = 0; i < n; i++) acc[i] = STEP_##op(s, acc[i], (A)blk[i]);             \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        for (int64_t r = 0; r < nr; r++) {                                                             \
            const S *x = (const S *)x_ + r * rs;                                                       \
            if (st == 1) {                                                                             \
                for (int64_t i = 0; i < n; i++) {                                                      \
                    A v = (A)(L)MK_LOAD_##s(&x[i]);                                                    \
                    acc[i] = STEP_##op(s, acc[i], v);                                                  \
                }                                                                                      \
            } else {                                                                                   \
                for (int64_t i = 0; i < n; i++) {                                                      \
                    A v = (A)(L)MK_LOAD_##s(&x[i * st]);                                               \
                    acc[i] = STEP_##op(s, acc[i], v);                                                  \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    })                                                                                                  \
    static void comb_##op##_##s(void *acc_, const void *later_, int64_t n) {                           \
        A *acc = acc_;                                                                                 \
        const A *later = later_;                                                                       \
        for (int64_t i = 0; i < n; i++) acc[i] = STEP_##op(s, acc[i], later[i]);                       \
    }                                                                                                  \
    static void fin_##op##_##s(const void *acc_, void *out_, int64_t n) {                              \
        const A *acc = acc_;                                                                           \
        OS *out = out_;                                                                                \
        for (int64_t i = 0; i < n; i++) MK_STORE_##os(&out[i], acc[i]);                                \
    }                                                                                                  \
    static void rows_##op##_##s(const void *x_, int64_t xs, int64_t nrows, int64_t st, int64_t n,      \
                                void *out_) {                                                          \
        const S *x = x_;                                                                               \
        OS *out = out_;                                                                                \
        for (int64_t r = 0; r < nrows; r++) {                                                          \
            A acc = (A)(INIT_##op(s));                                                                 \
            if (n < 2 * LANES) {                                                                       \
                for (int64_t i = 0; i < n; i++) {                                                      \
                    A v = (A)(L)MK_LOAD_##s(&x[r * xs + i * st]);                                      \
                    acc = STEP_##op(s, acc, v);                                                        \
                }                                                                                      \
            } else {                                                                                   \
                row_##op##_##s(x + r * xs, st, n, 0, &acc);                                            \
            }                                                                                          \
            MK_STORE_##os(&out[r], acc);                                                               \
        }                                                                                              \
    }

/* Many short rows in one call (reductions of the last axis). */
#define ROWS_KERNEL(op, s, S, A, OS)                                                                   \
    static void rows_##op##_##s(const void *x_, int64_t xs, int64_t nrows, int64_t st, int64_t n,      \
                                void *out_) {                                                          \
        const S *x = x_;                                                                               \
        OS *out = out_;                                                                                \
        for (int64_t r = 0; r < nrows; r++) {                                                          \
            A acc;                                                                                     \
            init_##op##_##s(&acc, 1);                                                                  \
            row_##op##_##s(x + r * xs, st, n, 0, &acc);                                                \
            fin_##op##_##s(&acc, &out[r], 1);                                                          \
        }                                                                                              \
    }

#define RENTRY(op, s, A) [E_##s] = {sizeof(A), init_##op##_##s, row_##op##_##s, col_##op##_##s,            \
                                    rows_##op##_##s, comb_##op##_##s, fin_##op##_##s},
#define E_b8 MK_BOOL
#define E_u8 MK_UINT8
#define E_u16 MK_UINT16
#define E_u32 MK_UINT32
#define E_u64 MK_UINT64
#define E_i8 MK_INT8
#define E_i16 MK_INT16
#define E_i32 MK_INT32
#define E_i64 MK_INT64
#define E_f16 MK_FLOAT16
#define E_f32 MK_FLOAT32
#define E_f64 MK_FLOAT64
#define E_bf16 MK_BFLOAT16
#define E_c64 MK_COMPLEX64

/* sum and prod: integers of up to 4 bytes accumulate in 32 bits (int32 or
 * uint32 result, bool gives int32), 8-byte ones in 64; float16, bfloat16 and
 * float32 sums go through float lanes into a double; products stay in float. */
#define SUMPROD(X, op, FL, FA)                                                                         \
    X(op, b8, bool, uint32_t, uint32_t, i32, int32_t)                                                  \
    X(op, u8, uint8_t, uint32_t, uint32_t, u32, uint32_t)                                              \
    X(op, u16, uint16_t, uint32_t, uint32_t, u32, uint32_t)                                            \
    X(op, u32, uint32_t, uint32_t, uint32_t, u32, uint32_t)                                            \
    X(op, u64, uint64_t, uint64_t, uint64_t, u64, uint64_t)                                            \
    X(op, i8, int8_t, uint32_t, uint32_t, i32, int32_t)                                                \
    X(op, i16, int16_t, uint32_t, uint32_t, i32, int32_t)                                              \
    X(op, i32, int32_t, uint32_t, uint32_t, i32, int32_t)                                              \
    X(op, i64, int64_t, uint64_t, uint64_t, i64, int64_t)                                              \
    X(op, f16, mk_f16, FL, FA, f16, mk_f16)                                                            \
    X(op, f32, float, FL, FA, f32, float)                                                              \
    X(op, f64, double, double, double, f64, double)                                                    \
    X(op, bf16, mk_bf16, FL, FA, bf16, mk_bf16)                                                        \
    X(op, c64, mk_c64, mk_c64, mk_c64, c64, mk_c64)

/* max and min: in the compute type, result of the input's dtype. */
#define CMP_X(E, s, S, R, op, X) X(op, s, S, R, R, s, S)
#define MINMAX(X, op) MK_ALL_TYPES_2(CMP_X, op, X)
/* all and any: bool lanes, bool result. */
#define LOGIC_X(E, s, S, R, op, X) X(op, s, S, bool, bool, b8, bool)
#define LOGIC(X, op) MK_ALL_TYPES_2(LOGIC_X, op, X)

#define RK_DEF(op, s, S, L, A, os, OS) RKERNELS(op, s, S, L, A, os, OS)
#define RK_ENT(op, s, S, L, A, os, OS) RENTRY(op, s, A)

SUMPROD(RK_DEF, sum, float, double)
SUMPROD(RK_DEF, prod, float, float)
MINMAX(RK_DEF, max)
MINMAX(RK_DEF, min)
LOGIC(RK_DEF, all)
LOGIC(RK_DEF, any)

static const rkern reduce_kernels[6][MK_NDTYPES] = {
    [MK_REDUCE_SUM] = {SUMPROD(RK_ENT, sum, float, double)},
    [MK_REDUCE_PROD] = {SUMPROD(RK_ENT, prod, float, float)},
    [MK_REDUCE_MAX] = {MINMAX(RK_ENT, max)},
    [MK_REDUCE_MIN] = {MINMAX(RK_ENT, min)},
    [MK_REDUCE_ALL] = {LOGIC(RK_ENT, all)},
    [MK_REDUCE_ANY] = {LOGIC(RK_ENT, any)},
};

/* ---- float32 max and min in vector types. GCC keeps the generic kernel's
 * select (x > a or x is NaN) a branch per element; this is the same kernel,
 * with its LANES lanes in one vector and the select as a compare and a
 * blend, so every block gives the same bits (the same element wins, NaNs
 * and signed zeros included) as the generic kernel, which still runs the
 * strided rows. */
typedef float vrf32 __attribute__((vector_size(LANES * 4)));
typedef int32_t vri32 __attribute__((vector_size(LANES * 4)));
#define VSTEP_max(a, x) (((x) > (a)) | ((x) != (x)))
#define VSTEP_min(a, x) (((a) > (x)) | ((x) != (x)))
#define VROW_MINMAX(op)                                                                                \
    MK_SIMD_CLONES(static void, vrow_##op##_f32, (const void *x_, int64_t st, int64_t n, int64_t pos,     \
                                               void *acc_), (x_, st, n, pos, acc_), {                                           \
        if (st != 1) {                                                                                 \
            row_##op##_f32(x_, st, n, pos, acc_);                                                      \
            return;                                                                                    \
        }                                                                                              \
        const float *x = x_;                                                                           \
        float total = *(float *)acc_;                                                                  \
        while (n > 0) {                                                                                \
            int64_t m = n < BLOCK ? n : BLOCK, i = 0;                                                  \
            vrf32 lane;                                                                                \
            for (int k = 0; k < LANES; k++) lane[k] = INIT_##op(f32);                                  \
            for (; i + LANES <= m; i += LANES) {                                                       \
                vrf32 v;                                                                               \
                memcpy(&v, x + i, sizeof v);                                                           \
                vri32 take = VSTEP_##op(lane, v);                                                      \
                lane = (vrf32)(((vri32)v & take) | ((vri32)lane & ~take));                             \
            }                                                                                          \
            float t = lane[0];                                                                         \
            for (int k = 1; k < LANES; k++) t = STEP_##op(f32, t, lane[k]);                            \
            for (; i < m; i++) t = STEP_##op(f32, t, x[i]);                                            \
            total = STEP_##op(f32, total, t);                                                          \
            x += m;                                                                                    \
            n -= m;                                                                                    \
        }                                                                                              \
        *(float *)acc_ = total;                                                                        \
    })                                                                                                  \
    static void vrows_##op##_f32(const void *x_, int64_t xs, int64_t nrows, int64_t st, int64_t n,    \
                                 void *out_) {                                                         \
        if (n < 2 * LANES) {                                                                           \
            rows_##op##_f32(x_, xs, nrows, st, n, out_);                                               \
            return;                                                                                    \
        }                                                                                              \
        const float *x = x_;                                                                           \
        float *out = out_;                                                                             \
        for (int64_t r = 0; r < nrows; r++) {                                                          \
            float acc = INIT_##op(f32);                                                                \
            vrow_##op##_f32(x + r * xs, st, n, 0, &acc);                                               \
            out[r] = acc;                                                                              \
        }                                                                                              \
    }
VROW_MINMAX(max)
VROW_MINMAX(min)

/* ---- argmax / argmin: (value, index) accumulators. A nan wins and, as
 * with ties, the first one is kept (MLX and NumPy agree). */
#define ABETTER_argmax(s, x, v) (GT_##s(x, v) | ISNAN_##s(x))
#define ABETTER_argmin(s, x, v) (GT_##s(v, x) | ISNAN_##s(x))
/* the same without the nan rule (nans are found separately) */
#define ABETTERN_argmax(s, x, v) GT_##s(x, v)
#define ABETTERN_argmin(s, x, v) GT_##s(v, x)
#define ABLK 1024 /* argmax/argmin: elements per block of the vectorised pass */
/* Block best in GCC vector types for float32, float64 and int32 (GCC does
 * not vectorise the lane form above by itself); a lane keeps its value on
 * ties and nans, as the scalar rule does. Other types use the lane form. */
#if defined(__GNUC__)
typedef float vf32 __attribute__((vector_size(32)));
typedef int32_t vi32 __attribute__((vector_size(32)));
typedef double vf64 __attribute__((vector_size(32)));
typedef int64_t vi64 __attribute__((vector_size(32)));
#define VSEL(VT, VM, GTV, v, m) (VT)((((VM)(v)) & GTV(v, m)) | (((VM)(m)) & ~GTV(v, m)))
#define VBLK(name, T, VT, VM, NL, GTV, ISNANV)                                                         \
    static inline int name(const T *b, int len, T *best) {                                             \
        VT m0, m1, m2, m3, v0, v1, v2, v3;                                                             \
        memcpy(&m0, b, sizeof m0);                                                                     \
        m1 = m2 = m3 = m0;                                                                             \
        VM nan = ISNANV(m0);                                                                           \
        int k = NL;                                                                                    \
        /* four independent accumulators: the select chain is latency bound with one */             \
        for (; k + 4 * NL <= len; k += 4 * NL) {                                                       \
            memcpy(&v0, b + k, sizeof v0);                                                             \
            memcpy(&v1, b + k + NL, sizeof v1);                                                        \
            memcpy(&v2, b + k + 2 * NL, sizeof v2);                                                    \
            memcpy(&v3, b + k + 3 * NL, sizeof v3);                                                    \
            m0 = VSEL(VT, VM, GTV, v0, m0);                                                            \
            m1 = VSEL(VT, VM, GTV, v1, m1);                                                            \
            m2 = VSEL(VT, VM, GTV, v2, m2);                                                            \
            m3 = VSEL(VT, VM, GTV, v3, m3);                                                            \
            nan |= (ISNANV(v0) | ISNANV(v1)) | (ISNANV(v2) | ISNANV(v3));                              \
        }                                                                                              \
        for (; k < len; k += NL) {                                                                     \
            memcpy(&v0, b + k, sizeof v0);                                                             \
            m0 = VSEL(VT, VM, GTV, v0, m0);                                                            \
            nan |= ISNANV(v0);                                                                         \
        }                                                                                              \
        m0 = VSEL(VT, VM, GTV, m1, m0);                                                                \
        m2 = VSEL(VT, VM, GTV, m3, m2);                                                                \
        m0 = VSEL(VT, VM, GTV, m2, m0);                                                                \
        T bm = m0[0];                                                                                  \
        int anynan = 0;                                                                                \
        for (int j = 0; j < NL; j++) {                                                                 \
            anynan |= nan[j] != 0;                                                                     \
            bm = GTV(m0[j], bm) ? m0[j] : bm;                                                          \
        }                                                                                              \
        *best = bm;                                                                                    \
        return anynan;                                                                                 \
    }
/* first k < len with !GTV(bm, b[k]) (an element as good as the block's best; there is one):
 * 4 vectors per step, their masks or-ed and tested as whole words (a test per lane cost
 * one extract each, a third of the kernel), then the step is searched element-wise */
#define VFIND(name, T, VT, VM, NL, GTV)                                                                \
    static inline int name(const T *b, int len, T bm) {                                                \
        VT v0, v1, v2, v3, s;                                                                          \
        for (int j = 0; j < NL; j++) s[j] = bm;                                                        \
        int k = 0;                                                                                     \
        for (; k + 4 * NL <= len; k += 4 * NL) {                                                       \
            memcpy(&v0, b + k, sizeof v0);                                                             \
            memcpy(&v1, b + k + NL, sizeof v1);                                                        \
            memcpy(&v2, b + k + 2 * NL, sizeof v2);                                                    \
            memcpy(&v3, b + k + 3 * NL, sizeof v3);                                                    \
            VM t = ~(GTV(s, v0) & GTV(s, v1) & GTV(s, v2) & GTV(s, v3));                               \
            uint64_t w[sizeof t / 8], any = 0;                                                         \
            memcpy(w, &t, sizeof t);                                                                   \
            for (size_t j = 0; j < sizeof t / 8; j++) any |= w[j];                                     \
            if (any) break;                                                                            \
        }                                                                                              \
        while (GTV(bm, b[k])) k++;                                                                     \
        return k;                                                                                      \
    }
#define VGT(a, b) ((a) > (b))
#define VLT(a, b) ((a) < (b))
#define VNANF(x) ((x) != (x))
#define VNANI(x) ((x) != (x))
VBLK(vblk_argmax_f32, float, vf32, vi32, 8, VGT, VNANF)
VBLK(vblk_argmin_f32, float, vf32, vi32, 8, VLT, VNANF)
VBLK(vblk_argmax_f64, double, vf64, vi64, 4, VGT, VNANF)
VBLK(vblk_argmin_f64, double, vf64, vi64, 4, VLT, VNANF)
VBLK(vblk_argmax_i32, int32_t, vi32, vi32, 8, VGT, VNANI)
VBLK(vblk_argmin_i32, int32_t, vi32, vi32, 8, VLT, VNANI)
VFIND(vfind_argmax_f32, float, vf32, vi32, 8, VGT)
VFIND(vfind_argmin_f32, float, vf32, vi32, 8, VLT)
VFIND(vfind_argmax_f64, double, vf64, vi64, 4, VGT)
VFIND(vfind_argmin_f64, double, vf64, vi64, 4, VLT)
VFIND(vfind_argmax_i32, int32_t, vi32, vi32, 8, VGT)
VFIND(vfind_argmin_i32, int32_t, vi32, vi32, 8, VLT)
#define BLK_f32(op, b, len, best) vblk_##op##_f32(b, len, best)
#define BLK_f64(op, b, len, best) vblk_##op##_f64(b, len, best)
#define BLK_i32(op, b, len, best) vblk_##op##_i32(b, len, best)
#define FIND_f32(op, b, len, bm) vfind_##op##_f32(b, len, bm)
#define FIND_f64(op, b, len, bm) vfind_##op##_f64(b, len, bm)
#define FIND_i32(op, b, len, bm) vfind_##op##_i32(b, len, bm)
#else
#define FIND_f32(op, b, len, bm) find_##op##_f32(b, len, bm)
#define FIND_f64(op, b, len, bm) find_##op##_f64(b, len, bm)
#define FIND_i32(op, b, len, bm) find_##op##_i32(b, len, bm)
#define BLK_f32(op, b, len, best) blk_##op##_f32(b, len, best)
#define BLK_f64(op, b, len, best) blk_##op##_f64(b, len, best)
#define BLK_i32(op, b, len, best) blk_##op##_i32(b, len, best)
#endif
#define BLK_b8(op, b, len, best) blk_##op##_b8(b, len, best)
#define BLK_u8(op, b, len, best) blk_##op##_u8(b, len, best)
#define BLK_u16(op, b, len, best) blk_##op##_u16(b, len, best)
#define BLK_u32(op, b, len, best) blk_##op##_u32(b, len, best)
#define BLK_u64(op, b, len, best) blk_##op##_u64(b, len, best)
#define BLK_i8(op, b, len, best) blk_##op##_i8(b, len, best)
#define BLK_i16(op, b, len, best) blk_##op##_i16(b, len, best)
#define BLK_i64(op, b, len, best) blk_##op##_i64(b, len, best)
#define BLK_f16(op, b, len, best) blk_##op##_f16(b, len, best)
#define BLK_bf16(op, b, len, best) blk_##op##_bf16(b, len, best)
#define BLK_c64(op, b, len, best) blk_##op##_c64(b, len, best)
#define FIND_b8(op, b, len, bm) find_##op##_b8(b, len, bm)
#define FIND_u8(op, b, len, bm) find_##op##_u8(b, len, bm)
#define FIND_u16(op, b, len, bm) find_##op##_u16(b, len, bm)
#define FIND_u32(op, b, len, bm) find_##op##_u32(b, len, bm)
#define FIND_u64(op, b, len, bm) find_##op##_u64(b, len, bm)
#define FIND_i8(op, b, len, bm) find_##op##_i8(b, len, bm)
#define FIND_i16(op, b, len, bm) find_##op##_i16(b, len, bm)
#define FIND_i64(op, b, len, bm) find_##op##_i64(b, len, bm)
#define FIND_f16(op, b, len, bm) find_##op##_f16(b, len, bm)
#define FIND_bf16(op, b, len, bm) find_##op##_bf16(b, len, bm)
#define FIND_c64(op, b, len, bm) find_##op##_c64(b, len, bm)

#define AKERNELS(E, s, S, R, op, unused)                                                               \
    typedef struct {                                                                                   \
        R v;                                                                                           \
        uint32_t i;                                                                                    \
        bool set;                                                                                      \
    } op##_acc_##s;                                                                                    \
    static inline void op##_step_##s(op##_acc_##s *a, R x, int64_t i) {                                \
        if (!a->set) {                                                                                 \
            a->v = x;                                                                                  \
            a->i = (uint32_t)i;                                                                        \
            a->set = true;                                                                             \
        } else if (!ISNAN_##s(a->v) && ABETTER_##op(s, x, a->v)) {                                     \
            a->v = x;                                                                                  \
            a->i = (uint32_t)i;                                                                        \
        }                                                                                              \
    }                                                                                                  \
    static void init_##op##_##s(void *acc_, int64_t n) {                                               \
        op##_acc_##s *acc = acc_;                                                                      \
        for (int64_t i = 0; i < n; i++) acc[i].set = false;                                            \
    }                                                                                                  \
    /* best of b[0..len) (len a multiple of LANES) into *best; returns whether there is a nan */       \
    static inline int blk_##op##_##s(const S *b, int len, R *best) {                                   \
        R lane[LANES];                                                                                 \
        int nanv = 0;                                                                                  \
        for (int j = 0; j < LANES; j++) {                                                              \
            lane[j] = MK_LOAD_##s(&b[j]);                                                              \
            nanv |= ISNAN_##s(lane[j]);                                                                \
        }                                                                                              \
        for (int k = LANES; k < len; k += LANES)                                                       \
            for (int j = 0; j < LANES; j++) {                                                          \
                R v = MK_LOAD_##s(&b[k + j]);                                                          \
                lane[j] = ABETTERN_##op(s, v, lane[j]) ? v : lane[j];                                  \
                nanv |= ISNAN_##s(v);                                                                  \
            }                                                                                          \
        R bm = lane[0];                                                                                \
        for (int j = 1; j < LANES; j++) bm = ABETTERN_##op(s, lane[j], bm) ? lane[j] : bm;             \
        *best = bm;                                                                                    \
        return nanv;                                                                                   \
    }                                                                                                  \
    static inline int find_##op##_##s(const S *b, int len, R bm) {                                     \
        int k = 0;                                                                                     \
        (void)len;                                                                                     \
        while (ABETTERN_##op(s, bm, MK_LOAD_##s(&b[k]))) k++;                                          \
        return k;                                                                                      \
    }                                                                                                  \
    MK_SIMD_CLONES(static void, row_##op##_##s, (const void *x_, int64_t st, int64_t n, int64_t pos,      \
                                              void *acc_), (x_, st, n, pos, acc_), {                                            \
        const S *x = x_;                                                                               \
        op##_acc_##s a = *(op##_acc_##s *)acc_;                                                        \
        int64_t i = 0;                                                                                 \
        if (n <= 0) return;                                                                            \
        if (!a.set) {                                                                                  \
            op##_step_##s(&a, MK_LOAD_##s(&x[0]), pos);                                                \
            i = 1;                                                                                     \
        }                                                                                              \
        if (!ISNAN_##s(a.v) && st == 1)                                                                \
            /* blocks: the block's best and a nan flag computed branch-free in vector lanes,       \
             * then, only when the block beats the best so far, the first element equal to the     \
             * block's best; a block with a nan is left to the scalar loop below. */               \
            while (n - i >= LANES) {                                                                   \
                const S *b = x + i;                                                                    \
                int len = n - i >= ABLK ? ABLK : (int)((n - i) & ~(int64_t)(LANES - 1));               \
                R bm;                                                                                  \
                if (BLK_##s(op, b, len, &bm)) break;                                                   \
                if (ABETTERN_##op(s, bm, a.v)) {                                                       \
                    int k = FIND_##s(op, b, len, bm);                                                  \
                    a.v = MK_LOAD_##s(&b[k]);                                                          \
                    a.i = (uint32_t)(pos + i + k);                                                     \
                }                                                                                      \
                i += len;                                                                              \
            }                                                                                          \
        if (!ISNAN_##s(a.v))                                                                           \
            for (; i < n; i++) {                                                                       \
                R v = MK_LOAD_##s(&x[i * st]);                                                         \
                if (ABETTER_##op(s, v, a.v)) {                                                         \
                    a.v = v;                                                                           \
                    a.i = (uint32_t)(pos + i);                                                         \
                    if (ISNAN_##s(v)) break;                                                           \
                }                                                                                      \
            }                                                                                          \
        *(op##_acc_##s *)acc_ = a;                                                                     \
    })                                                                                                  \
    static void col_##op##_##s(const void *x_, int64_t st, int64_t n, int64_t rs, int64_t nr,          \
                               int64_t pos, void *acc_) {                                              \
        const S *x = x_;                                                                               \
        op##_acc_##s *acc = acc_;                                                                      \
        int64_t r = 0;                                                                                 \
        if (nr > 0 && n > 0 && !acc[0].set) { /* a block's accumulators start together */              \
            for (int64_t i = 0; i < n; i++) {                                                          \
                acc[i].v = MK_LOAD_##s(&x[i * st]);                                                    \
                acc[i].i = (uint32_t)pos;                                                              \
                acc[i].set = true;                                                                     \
            }                                                                                          \
            r = 1;                                                                                     \
        }                                                                                              \
        for (; r < nr; r++)                                                                            \
            for (int64_t i = 0; i < n; i++) {                                                          \
                R v = MK_LOAD_##s(&x[r * rs + i * st]);                                                \
                bool take = (!ISNAN_##s(acc[i].v)) & ABETTER_##op(s, v, acc[i].v);                     \
                acc[i].v = take ? v : acc[i].v;                                                        \
                acc[i].i = take ? (uint32_t)(pos + r) : acc[i].i;                                      \
            }                                                                                          \
    }                                                                                                  \
    static void comb_##op##_##s(void *acc_, const void *later_, int64_t n) {                           \
        op##_acc_##s *acc = acc_;                                                                      \
        const op##_acc_##s *later = later_;                                                            \
        for (int64_t i = 0; i < n; i++)                                                                \
            if (later[i].set) {                                                                        \
                if (!acc[i].set || (!ISNAN_##s(acc[i].v) && ABETTER_##op(s, later[i].v, acc[i].v)))    \
                    acc[i] = later[i];                                                                 \
            }                                                                                          \
    }                                                                                                  \
    static void fin_##op##_##s(const void *acc_, void *out_, int64_t n) {                              \
        const op##_acc_##s *acc = acc_;                                                                \
        uint32_t *out = out_;                                                                          \
        for (int64_t i = 0; i < n; i++) out[i] = acc[i].set ? acc[i].i : 0;                            \
    }                                                                                                  \
    ROWS_KERNEL(op, s, S, op##_acc_##s, uint32_t)
#define AENTRY(E, s, S, R, op, unused) [E] = {sizeof(op##_acc_##s), init_##op##_##s, row_##op##_##s,       \
                                              col_##op##_##s, rows_##op##_##s, comb_##op##_##s,        \
                                              fin_##op##_##s},

MK_ALL_TYPES_2(AKERNELS, argmax, _)
MK_ALL_TYPES_2(AKERNELS, argmin, _)

static const rkern arg_kernels[2][MK_NDTYPES] = {
    {MK_ALL_TYPES_2(AENTRY, argmax, _)},
    {MK_ALL_TYPES_2(AENTRY, argmin, _)},
};

/* ---- float16 and bfloat16 through the float32 kernels. sum, prod, max,
 * min, argmax and argmin read half runs a block at a time, widen the block
 * to float (float16: vcvtph2ps, half_fast.h, when the CPU has F16C;
 * bfloat16: a 16-bit shift in a loop GCC vectorises) and run the float32
 * kernel on it. The float32 kernels have the same lanes, blocks and
 * accumulator types as the half ones (float lanes; a double for sums; a
 * (float, index) pair for arg reductions) and widening is exact, so the
 * results are the bits of the per-element kernels above, which
 * MKPY_NO_F16C=1 keeps for float16 (tests/test_reduce_f16c.py compares
 * them in a child process). Column mode widens CW columns of one row at a
 * time and applies the same steps in the same order: COLB rows into a float
 * row, then into the double accumulators, for float sums. bfloat16 sum,
 * prod, max and min keep their own column kernels: GCC vectorises their
 * shift and step in one pass, which measured 1.1-1.8x faster than widening
 * into a buffer first (the arg reductions' column kernel below serves
 * float16, bfloat16 and float32). */
#define CW 512 /* col mode: columns widened at a time */

static void widen_f16(const void *src, int64_t ss, float *dst, int64_t n) { mk_f16_to_f32_run(src, ss, dst, n); }
static inline void widen_bf16(const void *src_, int64_t ss, float *dst, int64_t n) {
    const mk_bf16 *src = src_;
    uint32_t *d = (uint32_t *)dst; /* -fno-strict-aliasing */
    if (ss == 1)
        for (int64_t i = 0; i < n; i++) d[i] = (uint32_t)src[i].bits << 16;
    else
        for (int64_t i = 0; i < n; i++) d[i] = (uint32_t)src[i * ss].bits << 16;
}

/* Column steps over m floats: a[i] = STEP(a[i], b[i]); max and min as a
 * compare and a blend (the same select as STEP_max/STEP_min). */
static inline void cstep_sum_ff(float *a, const float *b, int64_t m) {
    for (int64_t i = 0; i < m; i++) a[i] = a[i] + b[i];
}
static inline void cstep_sum_df(double *a, const float *b, int64_t m) {
    for (int64_t i = 0; i < m; i++) a[i] = a[i] + (double)b[i];
}
static inline void cstep_prod_ff(float *a, const float *b, int64_t m) {
    for (int64_t i = 0; i < m; i++) a[i] = a[i] * b[i];
}
#define CSTEP_MINMAX(op)                                                                               \
    static inline void cstep_##op##_ff(float *a, const float *b, int64_t m) {                          \
        int64_t i = 0;                                                                                 \
        for (; i + LANES <= m; i += LANES) {                                                           \
            vrf32 va, vb;                                                                              \
            memcpy(&va, a + i, sizeof va);                                                             \
            memcpy(&vb, b + i, sizeof vb);                                                             \
            vri32 take = VSTEP_##op(va, vb);                                                           \
            va = (vrf32)(((vri32)vb & take) | ((vri32)va & ~take));                                    \
            memcpy(a + i, &va, sizeof va);                                                             \
        }                                                                                              \
        for (; i < m; i++) a[i] = STEP_##op(f32, a[i], b[i]);                                          \
    }
CSTEP_MINMAX(max)
CSTEP_MINMAX(min)
/* the steps from the float row into the accumulators (A) */
#define CSTEP_A_sum cstep_sum_df
#define CSTEP_A_prod cstep_prod_ff
#define CSTEP_A_max cstep_max_ff
#define CSTEP_A_min cstep_min_ff

#define F32ROW_sum row_sum_f32
#define F32ROW_prod row_prod_f32
#define F32ROW_max vrow_max_f32
#define F32ROW_min vrow_min_f32
#define HALF_REDUCE(op, h, S, A)                                                                       \
    static void rowh_##op##_##h(const void *x_, int64_t st, int64_t n, int64_t pos, void *acc) {      \
        const S *x = x_;                                                                               \
        float buf[BLOCK];                                                                              \
        while (n > 0) {                                                                                \
            int64_t m = n < BLOCK ? n : BLOCK;                                                         \
            widen_##h(x, st, buf, m);                                                                  \
            F32ROW_##op(buf, 1, m, pos, acc);                                                          \
            x += m * st;                                                                               \
            n -= m;                                                                                    \
        }                                                                                              \
    }                                                                                                  \
    static void rowsh_##op##_##h(const void *x_, int64_t xs, int64_t nrows, int64_t st, int64_t n,    \
                                 void *out_) {                                                         \
        if (n < 2 * LANES) { /* short rows: the per-element kernel's own loop */                       \
            rows_##op##_##h(x_, xs, nrows, st, n, out_);                                               \
            return;                                                                                    \
        }                                                                                              \
        const S *x = x_;                                                                               \
        S *out = out_;                                                                                 \
        for (int64_t r = 0; r < nrows; r++) {                                                          \
            A acc = (A)(INIT_##op(h));                                                                 \
            rowh_##op##_##h(x + r * xs, st, n, 0, &acc);                                               \
            MK_STORE_##h(&out[r], acc);                                                                \
        }                                                                                              \
    }
#define HALF_COL(op, h, S, A)                                                                          \
    MK_SIMD_CLONES(static void, colh_##op##_##h, (const void *x_, int64_t st, int64_t n, int64_t rs,     \
                                               int64_t nr, int64_t pos, void *acc_), (x_, st, n, rs, nr, pos, acc_), {                  \
        if (n < 2 * LANES) {                                                                           \
            col_##op##_##h(x_, st, n, rs, nr, pos, acc_);                                              \
            return;                                                                                    \
        }                                                                                              \
        const S *x = x_;                                                                               \
        A *acc = acc_;                                                                                 \
        float buf[CW];                                                                                 \
        if (sizeof(A) != sizeof(float) && st == 1 && n <= CHUNK) {                                     \
            /* as col_##op##_##h: blocks of COLB rows at multiples of COLB in the reduced range */     \
            float blk[CHUNK];                                                                          \
            for (int64_t r0 = 0, r1; r0 < nr; r0 = r1) {                                               \
                r1 = r0 + COLB - (pos + r0) % COLB;                                                    \
                if (r1 > nr) r1 = nr;                                                                  \
                widen_##h(x + r0 * rs, 1, blk, n);                                                     \
                for (int64_t r = r0 + 1; r < r1; r++)                                                  \
                    for (int64_t i0 = 0; i0 < n; i0 += CW) {                                           \
                        int64_t m = n - i0 < CW ? n - i0 : CW;                                         \
                        widen_##h(x + r * rs + i0, 1, buf, m);                                         \
                        cstep_##op##_ff(blk + i0, buf, m);                                             \
                    }                                                                                  \
                CSTEP_A_##op(acc, blk, n);                                                             \
            }                                                                                          \
            return;                                                                                    \
        }                                                                                              \
        for (int64_t r = 0; r < nr; r++)                                                               \
            for (int64_t i0 = 0; i0 < n; i0 += CW) {                                                   \
                int64_t m = n - i0 < CW ? n - i0 : CW;                                                 \
                widen_##h(x + r * rs + i0 * st, st, buf, m);                                           \
                CSTEP_A_##op(acc + i0, buf, m);                                                        \
            }                                                                                          \
    })
HALF_REDUCE(sum, f16, mk_f16, double)
HALF_REDUCE(prod, f16, mk_f16, float)
HALF_REDUCE(max, f16, mk_f16, float)
HALF_REDUCE(min, f16, mk_f16, float)
HALF_COL(sum, f16, mk_f16, double)
HALF_COL(prod, f16, mk_f16, float)
HALF_COL(max, f16, mk_f16, float)
HALF_COL(min, f16, mk_f16, float)
HALF_REDUCE(sum, bf16, mk_bf16, double)
HALF_REDUCE(prod, bf16, mk_bf16, float)
HALF_REDUCE(max, bf16, mk_bf16, float)
HALF_REDUCE(min, bf16, mk_bf16, float)

/* argmax/argmin: the float32 row kernel on widened blocks (its accumulator
 * is the half one's: a float value and an index), and the float32 column
 * step on widened rows. */
_Static_assert(sizeof(argmax_acc_f16) == sizeof(argmax_acc_f32) && sizeof(argmin_acc_bf16) == sizeof(argmin_acc_f32),
               "half and float32 arg accumulators differ");
#define HALF_ARG(op, h, S)                                                                             \
    static void arowh_##op##_##h(const void *x_, int64_t st, int64_t n, int64_t pos, void *acc_) {    \
        const S *x = x_;                                                                               \
        op##_acc_f32 *acc = acc_;                                                                      \
        float buf[ABLK];                                                                               \
        while (n > 0 && !(acc->set && isnan(acc->v))) { /* a nan, once found, stays */                 \
            int64_t m = n < ABLK ? n : ABLK;                                                           \
            widen_##h(x, st, buf, m);                                                                  \
            row_##op##_f32(buf, 1, m, pos, acc);                                                       \
            x += m * st;                                                                               \
            n -= m;                                                                                    \
            pos += m;                                                                                  \
        }                                                                                              \
    }                                                                                                  \
    static void arowsh_##op##_##h(const void *x_, int64_t xs, int64_t nrows, int64_t st, int64_t n,   \
                                  void *out_) {                                                        \
        if (n < 2 * LANES) {                                                                           \
            rows_##op##_##h(x_, xs, nrows, st, n, out_);                                               \
            return;                                                                                    \
        }                                                                                              \
        const S *x = x_;                                                                               \
        uint32_t *out = out_;                                                                          \
        for (int64_t r = 0; r < nrows; r++) {                                                          \
            op##_acc_f32 acc;                                                                          \
            init_##op##_f32(&acc, 1);                                                                  \
            arowh_##op##_##h(x + r * xs, st, n, 0, &acc);                                              \
            fin_##op##_f32(&acc, &out[r], 1);                                                          \
        }                                                                                              \
    }
/* Column arg reductions: the (value, index) accumulators of a run of CW
 * columns are held as two arrays while every row passes, so the step (the
 * column kernel's: take x when the value is not a nan and x is better or a
 * nan) runs as vector compares and blends. Used for float16, bfloat16 and
 * float32 (contiguous columns); the same element wins as in col_arg*. */
static inline const float *arow_f16(const void *x, int64_t ss, float *buf, int64_t m) {
    widen_f16(x, ss, buf, m);
    return buf;
}
static inline const float *arow_bf16(const void *x, int64_t ss, float *buf, int64_t m) {
    widen_bf16(x, ss, buf, m);
    return buf;
}
static inline const float *arow_f32(const void *x, int64_t ss, float *buf, int64_t m) {
    (void)ss; (void)buf; (void)m;
    return x; /* used for ss == 1 only */
}
#define ASTEP_argmax(a, x) (((a) == (a)) & (((x) > (a)) | ((x) != (x))))
#define ASTEP_argmin(a, x) (((a) == (a)) & (((a) > (x)) | ((x) != (x))))
#define HALF_ACOL(op, h, S)                                                                            \
    MK_SIMD_CLONES(static void, acolh_##op##_##h, (const void *x_, int64_t st, int64_t n, int64_t rs,    \
                                                int64_t nr, int64_t pos, void *acc_), (x_, st, n, rs, nr, pos, acc_), {                 \
        if (n < 2 * LANES || nr <= 0 || (sizeof(S) == 4 && st != 1)) {                                 \
            col_##op##_##h(x_, st, n, rs, nr, pos, acc_);                                              \
            return;                                                                                    \
        }                                                                                              \
        const S *x = x_;                                                                               \
        op##_acc_f32 *acc = acc_;                                                                      \
        float buf[CW], v[CW];                                                                          \
        uint32_t ix[CW];                                                                               \
        for (int64_t i0 = 0; i0 < n; i0 += CW) {                                                       \
            int64_t m = n - i0 < CW ? n - i0 : CW, r = 0;                                              \
            if (!acc[i0].set) { /* a block's accumulators start together, from its first row */       \
                const float *b = arow_##h(x + i0 * st, st, buf, m);                                    \
                for (int64_t i = 0; i < m; i++) {                                                      \
                    v[i] = b[i];                                                                       \
                    ix[i] = (uint32_t)pos;                                                             \
                }                                                                                      \
                r = 1;                                                                                 \
            } else {                                                                                   \
                for (int64_t i = 0; i < m; i++) {                                                      \
                    v[i] = acc[i0 + i].v;                                                              \
                    ix[i] = acc[i0 + i].i;                                                             \
                }                                                                                      \
            }                                                                                          \
            for (; r < nr; r++) {                                                                      \
                const float *b = arow_##h(x + r * rs + i0 * st, st, buf, m);                           \
                vri32 vr;                                                                              \
                for (int k = 0; k < LANES; k++) vr[k] = (int32_t)(uint32_t)(pos + r);                  \
                int64_t i = 0;                                                                         \
                for (; i + LANES <= m; i += LANES) {                                                   \
                    vrf32 va, vb;                                                                      \
                    vri32 vi;                                                                          \
                    memcpy(&va, v + i, sizeof va);                                                     \
                    memcpy(&vb, b + i, sizeof vb);                                                     \
                    memcpy(&vi, ix + i, sizeof vi);                                                    \
                    vri32 take = ASTEP_##op(va, vb);                                                   \
                    va = (vrf32)(((vri32)vb & take) | ((vri32)va & ~take));                            \
                    vi = (vr & take) | (vi & ~take);                                                   \
                    memcpy(v + i, &va, sizeof va);                                                     \
                    memcpy(ix + i, &vi, sizeof vi);                                                    \
                }                                                                                      \
                for (; i < m; i++) {                                                                   \
                    bool take = (!isnan(v[i])) & ABETTER_##op(f32, b[i], v[i]);                        \
                    v[i] = take ? b[i] : v[i];                                                         \
                    ix[i] = take ? (uint32_t)(pos + r) : ix[i];                                        \
                }                                                                                      \
            }                                                                                          \
            for (int64_t i = 0; i < m; i++) {                                                          \
                acc[i0 + i].v = v[i];                                                                  \
                acc[i0 + i].i = ix[i];                                                                 \
                acc[i0 + i].set = true;                                                                \
            }                                                                                          \
        }                                                                                              \
    })
HALF_ARG(argmax, f16, mk_f16)
HALF_ARG(argmin, f16, mk_f16)
HALF_ARG(argmax, bf16, mk_bf16)
HALF_ARG(argmin, bf16, mk_bf16)
HALF_ACOL(argmax, f16, mk_f16)
HALF_ACOL(argmin, f16, mk_f16)
HALF_ACOL(argmax, bf16, mk_bf16)
HALF_ACOL(argmin, bf16, mk_bf16)
HALF_ACOL(argmax, f32, float)
HALF_ACOL(argmin, f32, float)
/* the column kernels: float16's above, bfloat16's own */
#define COLK_f16(op) colh_##op##_f16
#define COLK_bf16(op) col_##op##_bf16
#define ACOLK_f16(op) acolh_##op##_f16
#define ACOLK_bf16(op) acolh_##op##_bf16

/* k with the vector row kernels for a float32 max/min, or the widening
 * kernels above for a float16 (when the CPU has F16C) or bfloat16 sum,
 * prod, max, min, argmax or argmin (the copy lives in *tmp); k itself
 * otherwise. */
#define HALF_SET(h)                                                                                    \
    do {                                                                                               \
        const rkern *ks[6] = {&reduce_kernels[MK_REDUCE_SUM][E_##h], &reduce_kernels[MK_REDUCE_PROD][E_##h], \
                              &reduce_kernels[MK_REDUCE_MAX][E_##h], &reduce_kernels[MK_REDUCE_MIN][E_##h], \
                              &arg_kernels[0][E_##h], &arg_kernels[1][E_##h]};                        \
        const row_fn rw[6] = {rowh_sum_##h, rowh_prod_##h, rowh_max_##h, rowh_min_##h, arowh_argmax_##h,  \
                              arowh_argmin_##h};                                                       \
        const rows_fn rws[6] = {rowsh_sum_##h, rowsh_prod_##h, rowsh_max_##h, rowsh_min_##h,           \
                                arowsh_argmax_##h, arowsh_argmin_##h};                                 \
        const col_fn cl[6] = {COLK_##h(sum), COLK_##h(prod), COLK_##h(max), COLK_##h(min),            \
                              ACOLK_##h(argmax), ACOLK_##h(argmin)};                                   \
        for (int i = 0; i < 6; i++)                                                                    \
            if (k == ks[i]) {                                                                          \
                *tmp = *k;                                                                             \
                tmp->row = rw[i];                                                                      \
                tmp->rows = rws[i];                                                                    \
                tmp->col = cl[i];                                                                      \
                return tmp;                                                                            \
            }                                                                                          \
    } while (0)
static const rkern *half_kernel(const rkern *k, rkern *tmp) {
    if (k == &reduce_kernels[MK_REDUCE_MAX][MK_FLOAT32] || k == &reduce_kernels[MK_REDUCE_MIN][MK_FLOAT32]) {
        bool mx = k == &reduce_kernels[MK_REDUCE_MAX][MK_FLOAT32];
        *tmp = *k;
        tmp->row = mx ? vrow_max_f32 : vrow_min_f32;
        tmp->rows = mx ? vrows_max_f32 : vrows_min_f32;
        return tmp;
    }
    if (k == &arg_kernels[0][MK_FLOAT32] || k == &arg_kernels[1][MK_FLOAT32]) {
        *tmp = *k;
        tmp->col = k == &arg_kernels[0][MK_FLOAT32] ? acolh_argmax_f32 : acolh_argmin_f32;
        return tmp;
    }
    if (mk_f16c()) HALF_SET(f16);
    HALF_SET(bf16);
    return k;
}

/* ============================================================ driver */

typedef struct {
    const rkern *k;
    bool red[MK_MAX_NDIM]; /* reduced input dims */
    bool keep_order;       /* arg reductions: reduced index is row-major in the input */
} reduce_params;

typedef struct {
    const rkern *k;
    const char *x;
    char *out;
    size_t isz, osz;
    bool col;
    int nk; /* kept dims (col mode: all but the last) */
    int64_t kshape[MK_MAX_NDIM], kstride[MK_MAX_NDIM];
    int64_t K, kst, nchunk; /* col mode: last kept dim, its stride, chunks of it */
    int nr;                 /* reduced dims after merging */
    int64_t R, rst;         /* reduced size; stride when nr <= 1 */
    mk_iter rit;            /* reduced dims, when nr >= 2 */
    int64_t P, items;
    int64_t bmax;   /* longest block: accumulators per item */
    char *scratch;  /* bmax accumulators per thread */
    char *partials; /* bmax accumulators per item, when P > 1 */
} rplan;

static int64_t kept_offset(const rplan *pl, int64_t o) {
    int64_t off = 0;
    for (int d = pl->nk - 1; d >= 0; d--) {
        int64_t n = pl->kshape[d];
        off += (o % n) * pl->kstride[d];
        o /= n;
    }
    return off;
}

typedef struct {
    const rplan *pl;
    const char *base;
    void *acc;
    int64_t blen, pos;
} seg_ctx;

static void reduce_segment(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    seg_ctx *s = c;
    const rplan *pl = s->pl;
    if (pl->col) {
        pl->k->col(s->base + off[0] * (int64_t)pl->isz, pl->kst, s->blen, st[0], n, s->pos, s->acc);
    } else {
        pl->k->row(s->base + off[0] * (int64_t)pl->isz, st[0], n, s->pos, s->acc);
    }
    s->pos += n;
}

static void block_span(const rplan *pl, int64_t b, int64_t *o, int64_t *j0, int64_t *blen) {
    if (pl->col) {
        *o = b / pl->nchunk;
        *j0 = (b % pl->nchunk) * pl->bmax;
        *blen = pl->K - *j0 < pl->bmax ? pl->K - *j0 : pl->bmax;
    } else {
        *o = b;
        *j0 = 0;
        *blen = 1;
    }
}

/* Whether combining with the identity changes no bit, so that empty parts
 * can be left out: a float sum starts at +0.0 and so is never -0.0; max/min
 * with their identity are idempotent; a complex product times 1+0i is not
 * exact (signs of zeros, inf * 0), so it keeps them. */
static bool skip_empty(const rkern *k) { return k->comb != comb_prod_c64; }

/* the reduced range [r0, r1) of part p */
static void part_span(const rplan *pl, int64_t p, int64_t *r0, int64_t *r1) {
    *r0 = pl->R * p / pl->P;
    *r1 = pl->R * (p + 1) / pl->P;
    if (pl->col) { /* parts of whole COLB blocks: sums do not depend on the thread count */
        *r0 -= *r0 % COLB;
        if (p < pl->P - 1) *r1 -= *r1 % COLB;
    }
}

static void reduce_item(const rplan *pl, int64_t item, void *acc) {
    const rkern *k = pl->k;
    int64_t b = item / pl->P, p = item % pl->P, o, j0, blen, r0, r1;
    part_span(pl, p, &r0, &r1);
    /* an empty part after the first (column mode: a part between two COLB
     * boundaries) would hold the identity, which the combination leaves out */
    if (p > 0 && r0 >= r1 && skip_empty(k)) return;
    block_span(pl, b, &o, &j0, &blen);
    const char *base = pl->x + (kept_offset(pl, o) + j0 * pl->kst) * (int64_t)pl->isz;
    k->init(acc, blen);
    if (r0 < r1) {
        if (pl->nr <= 1) {
            const int64_t step = pl->rst * (int64_t)pl->isz;
            if (pl->col)
                k->col(base + r0 * step, pl->kst, blen, pl->rst, r1 - r0, r0, acc);
            else
                k->row(base + r0 * step, pl->rst, r1 - r0, r0, acc);
        } else {
            seg_ctx s = {pl, base, acc, blen, r0};
            mk_iter_range(&pl->rit, r0, r1, reduce_segment, &s);
        }
    }
    if (pl->P == 1)
        k->fin(acc, pl->out + (pl->col ? o * pl->K + j0 : o) * (int64_t)pl->osz, blen);
    else
        memcpy(pl->partials + item * pl->bmax * k->asz, acc, blen * k->asz);
}

static void reduce_job(void *c, int ith, int nth) {
    const rplan *pl = c;
    int64_t a = pl->items * ith / nth, b = pl->items * (ith + 1) / nth;
    if (!pl->col && pl->P == 1 && pl->nr <= 1) {
        /* one output per item: runs along the innermost kept dim at once */
        int64_t inner = pl->nk ? pl->kshape[pl->nk - 1] : 1, ist = pl->nk ? pl->kstride[pl->nk - 1] : 0;
        for (int64_t o = a; o < b;) {
            int64_t len = inner - o % inner;
            if (len > b - o) len = b - o;
            pl->k->rows(pl->x + kept_offset(pl, o) * (int64_t)pl->isz, ist, len, pl->rst, pl->R,
                        pl->out + o * (int64_t)pl->osz);
            o += len;
        }
        return;
    }
    char *acc = pl->scratch + (size_t)ith * pl->bmax * pl->k->asz;
    for (int64_t it = a; it < b; it++) reduce_item(pl, it, acc);
}

/* The split into parts depends on the problem only, never on the thread
 * count, so results are the same with any MKPY_NUM_THREADS (float sums
 * group their terms by part): O outputs of R terms each want this many
 * parts in all... */
static int64_t parts_wanted(int64_t O, int64_t R) {
    int64_t want = O * (R > 0 ? R : 1) / MK_GRAIN;
    return want > MAX_PARTS ? MAX_PARTS : want < 1 ? 1 : want;
}

/* ...and each of nblocks blocks of outputs is split into this many. */
static int64_t parts_per_block(int64_t want, int64_t nblocks, int64_t R) {
    if (nblocks >= want) return 1;
    int64_t P = (want + nblocks - 1) / nblocks;
    return P > R ? (R > 0 ? R : 1) : P;
}

/* The float32 sum that mk_reduce(MK_REDUCE_SUM) gives for one of `rows`
 * contiguous rows of n floats reduced over the last axis: the same parts,
 * blocks and lanes. The fused norms (ops_fast.c) take their means from it,
 * so that they give the bits of the composition with mean() that they fuse,
 * as MLX's CPU fast.rms_norm is its composition; the GPU's norms take the
 * same order (mkpy_cuda_ops.cuh's warp_row_sum, P from mk_sum_row_parts). */
int64_t mk_sum_row_parts(int64_t n, int64_t rows) { return parts_per_block(parts_wanted(rows, n), rows, n); }

float mk_sum_row_f32(const float *x, int64_t n, int64_t rows) {
    int64_t P = mk_sum_row_parts(n, rows);
    float out;
    if (P == 1) {
        rows_sum_f32(x, n, 1, 1, n, &out);
        return out;
    }
    double acc = 0;
    for (int64_t p = 0; p < P; p++) { /* part_span and the in-order combination of run_reduce */
        int64_t r0 = n * p / P, r1 = n * (p + 1) / P;
        double part = 0;
        if (r0 < r1) row_sum_f32(x + r0, 1, r1 - r0, r0, &part);
        if (p == 0)
            acc = part;
        else if (r0 < r1)
            acc = STEP_sum(f32, acc, part);
    }
    fin_sum_f32(&acc, &out, 1);
    return out;
}

/* Reduces x over the dims marked in red into out (row-contiguous over the
 * kept dims, in order). */
static int run_reduce(const rkern *k, const mk_array *x, const bool *red, bool keep_order, mk_array *out) {
    rplan pl;
    rkern k16;
    k = half_kernel(k, &k16);
    memset(&pl, 0, sizeof pl);
    pl.k = k;
    pl.x = mk_data(x);
    pl.out = mk_data(out);
    pl.isz = mk_dtype_size(x->dtype);
    pl.osz = mk_dtype_size(out->dtype);
    if (out->size == 0) return 0;

    /* kept dims: drop size 1, merge contiguous neighbours */
    int nk = 0;
    int64_t ks[MK_MAX_NDIM], kt[MK_MAX_NDIM];
    int nr = 0;
    int64_t rs[MK_MAX_NDIM] = {0}, rt[MK_MAX_NDIM] = {0};
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1) continue;
        if (red[d]) {
            rs[nr] = x->shape[d];
            rt[nr++] = x->strides[d];
        } else if (nk > 0 && kt[nk - 1] == x->strides[d] * x->shape[d]) {
            ks[nk - 1] *= x->shape[d];
            kt[nk - 1] = x->strides[d];
        } else {
            ks[nk] = x->shape[d];
            kt[nk++] = x->strides[d];
        }
    }
    /* reduced dims: largest stride first (the innermost loop gets the
     * smallest), unless the order is the result (arg reductions) */
    if (!keep_order)
        for (int i = 1; i < nr; i++)
            for (int j = i; j > 0 && llabs(rt[j]) > llabs(rt[j - 1]); j--) {
                int64_t t = rt[j];
                rt[j] = rt[j - 1];
                rt[j - 1] = t;
                t = rs[j];
                rs[j] = rs[j - 1];
                rs[j - 1] = t;
            }
    pl.R = 1;
    for (int i = 0; i < nr; i++) pl.R *= rs[i];
    const int64_t *rstr[1] = {rt};
    mk_iter_init(&pl.rit, nr, rs, 1, rstr);
    pl.nr = pl.rit.ndim;
    pl.rst = pl.rit.strides[0][0];
    if (pl.R == 0) pl.nr = 1; /* nothing to read */

    int64_t O = out->size;
    /* col mode when the last kept dim is read more contiguously than the
     * reduced ones */
    if (nk > 0 && (nr == 0 || llabs(kt[nk - 1]) < llabs(pl.rit.strides[0][pl.rit.ndim - 1]))) {
        pl.col = true;
        pl.K = ks[nk - 1];
        pl.kst = kt[nk - 1];
        pl.bmax = pl.K < CHUNK ? pl.K : CHUNK;
        pl.nchunk = (pl.K + pl.bmax - 1) / pl.bmax;
        nk--;
    } else {
        pl.bmax = 1;
    }
    pl.nk = nk;
    memcpy(pl.kshape, ks, nk * sizeof *ks);
    memcpy(pl.kstride, kt, nk * sizeof *kt);

    int64_t nblocks = pl.col ? O / pl.K * pl.nchunk : O;
    int64_t want = parts_wanted(O, pl.R);
    int threads = mk_pool_threads();
    pl.P = parts_per_block(want, nblocks, pl.R);
    pl.items = nblocks * pl.P;
    int64_t par = want < threads ? want : threads;
    int nth = (int)(par < pl.items ? par : pl.items);
    pl.scratch = malloc((size_t)nth * pl.bmax * k->asz);
    if (pl.P > 1) pl.partials = malloc((size_t)pl.items * pl.bmax * k->asz);
    if (!pl.scratch || (pl.P > 1 && !pl.partials)) {
        free(pl.scratch);
        free(pl.partials);
        mk_nomem();
        return -1;
    }
    mk_parallel(nth, reduce_job, &pl);
    if (pl.P > 1) {
        for (int64_t b = 0; b < nblocks; b++) {
            int64_t o, j0, blen;
            block_span(&pl, b, &o, &j0, &blen);
            char *first = pl.partials + b * pl.P * pl.bmax * k->asz;
            for (int64_t p = 1; p < pl.P; p++) {
                int64_t r0, r1;
                part_span(&pl, p, &r0, &r1);
                if (r0 < r1 || !skip_empty(k)) k->comb(first, first + p * pl.bmax * k->asz, blen);
            }
            k->fin(first, pl.out + (pl.col ? o * pl.K + j0 : o) * (int64_t)pl.osz, blen);
        }
        free(pl.partials);
    }
    free(pl.scratch);
    return 0;
}

static int reduce_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const reduce_params *rp = p->params;
    if (mk_alloc_out(out[0]) < 0) return -1;
    return run_reduce(rp->k, in[0], rp->red, rp->keep_order, out[0]);
}

static int reduce_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int reduce_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int reduce_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
/* MLX's names: Sum, Prod, Max, Min, And, Or, ArgMin, ArgMax (from the kernel table row) */
static void reduce_name(const mk_prim *p, char *buf, size_t n) {
    static const char *const names[6] = {"Sum", "Prod", "Max", "Min", "And", "Or"};
    const rkern *k = ((const reduce_params *)p->params)->k;
    const rkern *r0 = &reduce_kernels[0][0], *a0 = &arg_kernels[0][0];
    if (k >= r0 && k < r0 + 6 * MK_NDTYPES)
        snprintf(buf, n, "%s", names[(k - r0) / MK_NDTYPES]);
    else if (k >= a0 && k < a0 + 2 * MK_NDTYPES)
        snprintf(buf, n, "%s", (k - a0) / MK_NDTYPES ? "ArgMin" : "ArgMax");
    else
        snprintf(buf, n, "Reduce");
}
static const mk_opdef reduce_def = {"reduce", reduce_eval, NULL, reduce_vjp, reduce_jvp, reduce_vmap, false,
                                    true, sizeof(reduce_params), NULL, reduce_name};

/* ============================================================ constructors */

static const char *const reduce_names[6] = {"sum", "prod", "max", "min", "all", "any"};

/* Normalises axes (naxes < 0: all) into the mask red[]; errors as MLX's
 * compute_reduce_shape. Returns the number of axes, or -1. */
static int reduce_axes(const mk_array *x, int naxes, const int *axes, bool *red) {
    int nd = x->ndim;
    for (int d = 0; d < MK_MAX_NDIM; d++) red[d] = naxes < 0 && d < nd;
    if (naxes < 0) return nd;
    for (int i = 0; i < naxes; i++)
        if (axes[i] < -nd || axes[i] >= nd) {
            mk_error_set(MK_ERR_INDEX, "Invalid axis %d for array with %d dimensions.", axes[i], nd);
            return -1;
        }
    for (int i = 0; i < naxes; i++) {
        int a = axes[i] < 0 ? axes[i] + nd : axes[i];
        if (red[a]) {
            mk_error_set(MK_ERR_VALUE, "Duplicate axes detected in reduction.");
            return -1;
        }
        red[a] = true;
    }
    return naxes;
}

/* Output shape of a reduction over red[]. Returns its ndim. */
static int reduced_shape(const mk_array *x, const bool *red, bool keepdims, int64_t *shape) {
    int n = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!red[d])
            shape[n++] = x->shape[d];
        else if (keepdims)
            shape[n++] = 1;
    }
    return n;
}

static mk_array *reduce_node(const rkern *k, mk_array *x, const bool *red, bool keep_order, bool keepdims,
                             mk_dtype out_t) {
    reduce_params *rp = calloc(1, sizeof *rp);
    if (!rp) return mk_nomem();
    rp->k = k;
    memcpy(rp->red, red, sizeof rp->red);
    rp->keep_order = keep_order;
    int64_t shape[MK_MAX_NDIM];
    int n = reduced_shape(x, red, keepdims, shape);
    return mk_node(&reduce_def, rp, out_t, n, shape, 1, &x);
}

static mk_dtype reduce_dtype(mk_reduce_op op, mk_dtype t) {
    switch (op) {
    case MK_REDUCE_SUM:
    case MK_REDUCE_PROD:
        if (t == MK_BOOL) return MK_INT32;
        if (mk_is_integral(t) && mk_dtype_size(t) <= 4) return mk_is_unsigned(t) ? MK_UINT32 : MK_INT32;
        return t;
    case MK_REDUCE_ALL:
    case MK_REDUCE_ANY: return MK_BOOL;
    default: return t;
    }
}

mk_array *mk_reduce(mk_reduce_op op, mk_array *x, int naxes, const int *axes, bool keepdims) {
    bool red[MK_MAX_NDIM];
    int n = naxes < 0 ? x->ndim : naxes;
    if (n == 0) {
        /* MLX: no axes leaves the array as is (all/any still make it bool) */
        if (op == MK_REDUCE_ALL || op == MK_REDUCE_ANY) return mk_as_dtype(x, MK_BOOL);
        mk_incref(x);
        return x;
    }
    if (reduce_axes(x, naxes, axes, red) < 0) return NULL;
    if (op == MK_REDUCE_MAX || op == MK_REDUCE_MIN)
        for (int d = 0; d < x->ndim; d++)
            if (red[d] && x->shape[d] == 0) {
                const char *nm = reduce_names[op];
                mk_error_set(MK_ERR_VALUE, "[%s] Cannot %s reduce over axis %d with size 0.", nm, nm, d);
                return NULL;
            }
    return reduce_node(&reduce_kernels[op][x->dtype], x, red, false, keepdims, reduce_dtype(op, x->dtype));
}

static mk_array *arg_reduce(int which, mk_array *x, int axis, bool has_axis, bool keepdims) {
    const char *name = which == 0 ? "argmax" : "argmin";
    if (x->size == 0) {
        mk_error_set(MK_ERR_VALUE, "[%s] Cannot %s reduce zero size array.", name, name);
        return NULL;
    }
    bool red[MK_MAX_NDIM] = {false};
    if (has_axis) {
        if (axis < -x->ndim || axis >= x->ndim) {
            mk_error_set(MK_ERR_INDEX, "Invalid axis %d for array with %d dimensions.", axis, x->ndim);
            return NULL;
        }
        red[axis < 0 ? axis + x->ndim : axis] = true;
    } else {
        if (keepdims && x->ndim == 0) {
            /* what MLX 0.32 raises here */
            mk_error_set(MK_ERR_VALUE, "cannot create std::vector larger than max_size()");
            return NULL;
        }
        /* the flattened array: every dim, row-major */
        for (int d = 0; d < x->ndim; d++) red[d] = true;
    }
    return reduce_node(&arg_kernels[which][x->dtype], x, red, true, keepdims, MK_UINT32);
}

mk_array *mk_argmax(mk_array *x, int axis, bool has_axis, bool keepdims) {
    return arg_reduce(0, x, axis, has_axis, keepdims);
}

mk_array *mk_argmin(mk_array *x, int axis, bool has_axis, bool keepdims) {
    return arg_reduce(1, x, axis, has_axis, keepdims);
}

/* ---------------------------------------------------------- mean, var, std */

/* Product of the dims an axes list names (in range; duplicates are caught
 * by the sum that follows). */
static double count_elements(const mk_array *x, int naxes, const int *axes) {
    double n = 1;
    if (naxes < 0) return (double)x->size;
    for (int i = 0; i < naxes; i++) n *= (double)x->shape[axes[i] < 0 ? axes[i] + x->ndim : axes[i]];
    return n;
}

static int check_mean_axes(const mk_array *x, int naxes, const int *axes) {
    for (int i = 0; i < naxes; i++)
        if (axes[i] < -x->ndim || axes[i] >= x->ndim) {
            mk_error_set(MK_ERR_INDEX, "[mean] axis %d is out of bounds for array with %d dimensions.", axes[i],
                         x->ndim);
            return -1;
        }
    return 0;
}

/* a op b, consuming both references (either may be NULL after a failure). */
static mk_array *bin_steal(mk_binary_op op, mk_array *a, mk_array *b) {
    mk_array *r = a && b ? mk_binary(op, a, b) : NULL;
    mk_xdecref(a);
    mk_xdecref(b);
    return r;
}

static mk_array *un_steal(mk_unary_op op, mk_array *a) {
    mk_array *r = a ? mk_unary(op, a) : NULL;
    mk_xdecref(a);
    return r;
}

/* n, or 1/n (inverted), for mean and var as a node reading x's shape (red: the reduced dims),
 * made while tracing so that a shapeless compile's replay counts again (MLX's
 * NumberOfElements). No gradient flows through it. */
typedef struct {
    bool red[MK_MAX_NDIM];
    bool inverted;
} count_params;

static int count_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const count_params *c = p->params;
    double n = 1;
    for (int d = 0; d < in[0]->ndim; d++)
        if (c->red[d]) n *= (double)in[0]->shape[d];
    if (mk_alloc_out(out[0]) < 0) return -1;
    mk_put_f64(out[0]->dtype, mk_data(out[0]), c->inverted ? 1.0 / n : n);
    return 0;
}

static int count_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef count_def = {"NumberOfElements", count_eval, NULL, NULL, NULL, count_vmap, true};

static mk_array *count_node(mk_array *x, const bool *red, bool inverted, mk_dtype dt) {
    count_params *c = calloc(1, sizeof *c);
    if (!c) return mk_nomem();
    memcpy(c->red, red, sizeof c->red);
    c->inverted = inverted;
    int64_t none[1] = {0};
    return mk_node(&count_def, c, dt, 0, none, 1, &x);
}

static int count_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const count_params *c = p->params;
    bool red[MK_MAX_NDIM] = {false};
    for (int d = 0, k = 0; d < in[0]->ndim && k < MK_MAX_NDIM; d++)
        if (d != axes[0]) red[d] = c->red[k++];
    outs[0] = count_node(in[0], red, c->inverted, p->outdesc[0].dtype);
    out_axes[0] = -1;
    return outs[0] ? 0 : -1;
}

/* n or 1/n of the elements of x's reduced dims as a dt scalar: a NumberOfElements node while
 * tracing, else a constant. */
static mk_array *number_of_elements(mk_array *x, int naxes, const int *axes, bool inverted, mk_dtype dt) {
    if (mk_tracing()) {
        bool red[MK_MAX_NDIM] = {false};
        for (int d = 0; d < x->ndim; d++) red[d] = naxes < 0;
        for (int i = 0; i < naxes; i++) red[axes[i] < 0 ? axes[i] + x->ndim : axes[i]] = true;
        return count_node(x, red, inverted, dt);
    }
    double n = count_elements(x, naxes, axes);
    return mk_scalar_f64(dt, inverted ? 1.0 / n : n);
}

mk_array *mk_mean(mk_array *x, int naxes, const int *axes, bool keepdims) {
    if (check_mean_axes(x, naxes, axes) < 0) return NULL;
    mk_dtype dt = mk_to_float(x->dtype);
    mk_array *s = mk_reduce(MK_REDUCE_SUM, x, naxes, axes, keepdims);
    if (!s) return NULL;
    return bin_steal(MK_BINARY_multiply, s, number_of_elements(x, naxes, axes, true, dt));
}

/* As MLX: sum((x - mean)^2) times 1/n, or divided by max(n - ddof, 0).
 * Complex input uses |x - mean|^2 and gives float32. */
mk_array *mk_var(mk_array *x, int naxes, const int *axes, bool keepdims, int ddof) {
    mk_dtype dt = mk_to_float(x->dtype);
    bool cplx = dt == MK_COMPLEX64;
    if (cplx) dt = MK_FLOAT32;
    mk_array *mu = mk_mean(x, naxes, axes, true);
    if (!mu) return NULL;
    mk_array *d = mk_binary(MK_BINARY_subtract, x, mu);
    mk_decref(mu);
    if (cplx) d = un_steal(MK_UNARY_abs, d);
    d = un_steal(MK_UNARY_square, d);
    if (!d) return NULL;
    mk_array *v = mk_reduce(MK_REDUCE_SUM, d, naxes, axes, keepdims);
    mk_decref(d);
    if (!v) return NULL;
    if (ddof != 0) {
        mk_array *den = bin_steal(MK_BINARY_subtract, number_of_elements(x, naxes, axes, false, dt),
                                  mk_scalar_f64(dt, (double)ddof));
        den = bin_steal(MK_BINARY_maximum, den, mk_scalar_f64(dt, 0.0));
        return bin_steal(MK_BINARY_divide, v, den);
    }
    return bin_steal(MK_BINARY_multiply, v, number_of_elements(x, naxes, axes, true, dt));
}

mk_array *mk_std(mk_array *x, int naxes, const int *axes, bool keepdims, int ddof) {
    return un_steal(MK_UNARY_sqrt, mk_var(x, naxes, axes, keepdims, ddof));
}

/* ============================================= softmax and logsumexp rows */

/* The fused kernels run along the last axis, in pieces that can split one
 * long row over the threads: the row's max, the sum of exp(x - max) (kept
 * in the output when softmax computes in the storage type), then softmax's
 * scaling. Accumulation is in A: float for float16, bfloat16 and float32,
 * double for float64; sums go through BLOCK-long lanes into a double. */
static inline float max_nan_f(float m, float v) { return (v > m || isnan(v)) && !isnan(m) ? v : m; }
static inline double max_nan_d(double m, double v) { return (v > m || isnan(v)) && !isnan(m) ? v : m; }

typedef struct {
    double (*max)(const void *x, int64_t st, int64_t n);
    /* sum of exp(x - m); with out (only when A is the storage type) the
     * exponentials are stored there */
    double (*expsum)(const void *x, int64_t st, int64_t n, double m, void *out);
    /* out = exp(x - m) * inv, or out *= inv when the exponentials are stored */
    void (*scale)(const void *x, int64_t st, int64_t n, double m, double inv, void *out, bool stored);
    void (*store_lse)(double m, double sum, void *out);
    bool same; /* A is the storage type */
} lastax_kern;

/* exp in the accumulator type: MLX's own float32 exp (its CPU softmax and
 * logsumexp use it), libm's in double */
static inline double exp_d(double x) { return exp(x); }
#define ACC_EXP(x) _Generic((x), float: mk_mlx_expf, double: exp_d)(x)

/* The kernels' loops are written once with the element index as a macro
 * argument and instantiated for stride 1 (vectorised) and any stride. */
#define BY_STRIDE(st, LOOP, s, A)                                                                      \
    do {                                                                                               \
        if ((st) == 1) {                                                                               \
            LOOP(IDX1, s, A);                                                                          \
        } else {                                                                                       \
            LOOP(IDXS, s, A);                                                                          \
        }                                                                                              \
    } while (0)
#define IDX1(i) (i)
#define IDXS(i) ((i) * st)

/* The row's max in LANES lanes of plain comparisons (vectorised), with one
 * nan test per BLOCK: a block holding a nan or an inf is scanned again in
 * order with max_nan_*, so a nan anywhere gives nan. The exponentials are
 * summed in lanes per BLOCK, then in double. */
/* GCC does not vectorise a float max written as a select (it may not turn
 * one into maxps without -ffinite-math-only), so the contiguous float32
 * case spells it with GNU C vectors: lanes of v > m ? v : m, and a lane
 * sum of v - v that is nan once a nan or an inf was seen. Returns 0 when the
 * block needs the in-order scan. */
typedef float mk_v8f __attribute__((vector_size(32)));
typedef int32_t mk_v8i __attribute__((vector_size(32)));
MK_MATH_INLINE int lmax_block_f32(const float *x, int64_t n, float *m) {
    mk_v8f lane = {*m, *m, *m, *m, *m, *m, *m, *m}, chk = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        mk_v8f v;
        memcpy(&v, x + i, sizeof v);
        mk_v8i gt = v > lane;
        lane = (mk_v8f)(((mk_v8i)v & gt) | ((mk_v8i)lane & ~gt));
        chk += v - v;
    }
    float c = 0, r = *m;
    for (int k = 0; k < 8; k++) {
        c += chk[k];
        r = lane[k] > r ? lane[k] : r;
    }
    for (; i < n; i++) {
        c += x[i] - x[i];
        r = x[i] > r ? x[i] : r;
    }
    if (c != c) return 0;
    *m = r;
    return 1;
}

#define LMAX_LANES(I, s, A)                                                                                  \
    for (; i + LANES <= e; i += LANES)                                                                 \
        for (int k = 0; k < LANES; k++) {                                                              \
            A v = (A)MK_LOAD_##s(&x[I(i + k)]);                                                        \
            lane[k] = v > lane[k] ? v : lane[k];                                                       \
            chk[k] += v - v; /* nan once a nan or an inf was seen */                                   \
        }
#define LEXP_BLOCK(I, s, A)                                                                            \
    for (int64_t j = 0; j < len; j++) d[j] = ACC_EXP((A)MK_LOAD_##s(&xb[I(j)]) - m);
#define LSCALE(I, s, A)                                                                                      \
    for (int64_t i = 0; i < n; i++) MK_STORE_##s(&out[i], ACC_EXP((A)MK_LOAD_##s(&x[I(i)]) - m) * inv);

#define LASTAX_KERNELS(s, S, A, MAXF, SAME)                                                            \
    MK_SIMD_CLONES_512(static double, lmax_##s, (const void *x_, int64_t st, int64_t n), (x_, st, n), {                     \
        const S *x = x_;                                                                               \
        A m = -INFINITY;                                                                               \
        for (int64_t b = 0; b < n; b += BLOCK) {                                                       \
            int64_t e = n - b < BLOCK ? n : b + BLOCK, i = b;                                          \
            const A mb = m; /* the max before this block */                                            \
            bool clean;                                                                                \
            if (sizeof(S) == 4 && sizeof(A) == 4 && st == 1) { /* float32 */                          \
                float mf = (float)m;                                                                   \
                clean = lmax_block_f32((const float *)(const void *)(x + b), e - b, &mf);             \
                if (clean) m = (A)mf;                                                                  \
            } else {                                                                                   \
                A lane[LANES], chk[LANES] = {0}, c = 0;                                                \
                for (int k = 0; k < LANES; k++) lane[k] = m;                                           \
                BY_STRIDE(st, LMAX_LANES, s, A);                                                       \
                for (int k = 0; k < LANES; k++) {                                                      \
                    c += chk[k];                                                                       \
                    m = lane[k] > m ? lane[k] : m;                                                     \
                }                                                                                      \
                for (; i < e; i++) {                                                                   \
                    A v = (A)MK_LOAD_##s(&x[i * st]);                                                  \
                    c += v - v;                                                                        \
                    m = v > m ? v : m;                                                                 \
                }                                                                                      \
                clean = c == c;                                                                        \
            }                                                                                          \
            if (!clean) { /* a nan or an inf: the block in order, from the max before it */            \
                A m0 = mb;                                                                             \
                for (i = b; i < e; i++) m0 = MAXF(m0, (A)MK_LOAD_##s(&x[i * st]));                     \
                if (m0 != m0) return m0;                                                               \
                m = m0;                                                                                \
            }                                                                                          \
        }                                                                                              \
        return m;                                                                                      \
    })                                                                                                  \
    MK_SIMD_CLONES_512(static double, lexpsum_##s, (const void *x_, int64_t st, int64_t n, double md, void *out_), (x_, st, n, md, out_), { \
        const S *x = x_;                                                                               \
        S *out = out_;                                                                                 \
        const A m = (A)md;                                                                             \
        double total = 0;                                                                              \
        A tmp[BLOCK];                                                                                  \
        for (int64_t b = 0; b < n; b += BLOCK) {                                                       \
            int64_t len = n - b < BLOCK ? n - b : BLOCK;                                               \
            /* the exponentials (a plain loop, which vectorises), into the                             \
             * output when it has the accumulator's type */                                           \
            A *d = SAME && out ? (A *)(void *)(out + b) : tmp;                                         \
            const S *xb = x + b * st;                                                                  \
            BY_STRIDE(st, LEXP_BLOCK, s, A);                                                           \
            A lane[LANES] = {0}, t = 0;                                                                \
            int64_t i = 0;                                                                             \
            for (; i + LANES <= len; i += LANES)                                                       \
                for (int k = 0; k < LANES; k++) lane[k] += d[i + k];                                   \
            for (int k = 0; k < LANES; k++) t += lane[k];                                              \
            for (; i < len; i++) t += d[i];                                                            \
            total += t;                                                                                \
        }                                                                                              \
        return total;                                                                                  \
    })                                                                                                  \
    MK_SIMD_CLONES_512(static void, lscale_##s, (const void *x_, int64_t st, int64_t n, double md, double invd, \
                                          void *out_, bool stored), (x_, st, n, md, invd, out_, stored), {                                   \
        const S *x = x_;                                                                               \
        S *out = out_;                                                                                 \
        const A m = (A)md, inv = (A)invd;                                                              \
        if (stored)                                                                                    \
            for (int64_t i = 0; i < n; i++) MK_STORE_##s(&out[i], (A)MK_LOAD_##s(&out[i]) * inv);      \
        else                                                                                           \
            BY_STRIDE(st, LSCALE, s, A);                                                                     \
    })                                                                                                  \
    static void llse_##s(double md, double sum, void *out) {                                           \
        const A m = (A)md;                                                                             \
        MK_STORE_##s((S *)out, isinf(m) ? m : log((A)sum) + m);                                        \
    }
LASTAX_KERNELS(f16, mk_f16, float, max_nan_f, false)
LASTAX_KERNELS(bf16, mk_bf16, float, max_nan_f, false)
LASTAX_KERNELS(f32, float, float, max_nan_f, true)
LASTAX_KERNELS(f64, double, double, max_nan_d, true)

#define LASTAX_ENTRY(s, same) {lmax_##s, lexpsum_##s, lscale_##s, llse_##s, same}
static const lastax_kern lastax_kernels[MK_NDTYPES] = {
    [MK_FLOAT16] = LASTAX_ENTRY(f16, false),
    [MK_BFLOAT16] = LASTAX_ENTRY(bf16, false),
    [MK_FLOAT32] = LASTAX_ENTRY(f32, true),
    [MK_FLOAT64] = LASTAX_ENTRY(f64, true),
};

/* Without precise, MLX computes float16/bfloat16 softmax in that type,
 * rounding every step (the sum included), so the row runs in order. */
#define SOFTMAX_LOW(s, S)                                                                              \
    static void softmax_low_##s(const void *x_, int64_t st, int64_t n, void *out_) {                   \
        const S *x = x_;                                                                               \
        S *out = out_;                                                                                 \
        float m = -INFINITY;                                                                           \
        for (int64_t i = 0; i < n; i++) m = max_nan_f(m, MK_LOAD_##s(&x[i * st]));                     \
        S sum, t, inv;                                                                                 \
        MK_STORE_##s(&sum, 0.0f);                                                                      \
        for (int64_t i = 0; i < n; i++) {                                                              \
            MK_STORE_##s(&t, MK_LOAD_##s(&x[i * st]) - m);                                             \
            MK_STORE_##s(&out[i], expf(MK_LOAD_##s(&t)));                                              \
            MK_STORE_##s(&sum, MK_LOAD_##s(&sum) + MK_LOAD_##s(&out[i]));                              \
        }                                                                                              \
        MK_STORE_##s(&inv, 1.0f / MK_LOAD_##s(&sum));                                                  \
        float fi = MK_LOAD_##s(&inv);                                                                  \
        for (int64_t i = 0; i < n; i++) MK_STORE_##s(&out[i], MK_LOAD_##s(&out[i]) * fi);              \
    }
SOFTMAX_LOW(f16, mk_f16)
SOFTMAX_LOW(bf16, mk_bf16)

typedef enum { LA_LSE, LA_SOFTMAX, LA_SOFTMAX_LOW } lastax_kind;

typedef struct {
    lastax_kind kind;
} lastax_params;

typedef struct {
    lastax_kind kind;
    const lastax_kern *k;
    const char *x;
    char *out;
    size_t isz, osz;
    int64_t n, st;
    int nd;
    int64_t shape[MK_MAX_NDIM], strides[MK_MAX_NDIM];
    /* one row split over threads */
    const char *row;
    char *orow;
    int nparts;
    double m, inv, part[256];
} lastax_ctx;

/* A whole row: x (n at stride st) into out. */
static void lastax_row(const lastax_ctx *l, const char *x, char *out) {
    if (l->kind == LA_SOFTMAX_LOW) {
        (l->k == &lastax_kernels[MK_FLOAT16] ? softmax_low_f16 : softmax_low_bf16)(x, l->st, l->n, out);
        return;
    }
    double m = l->k->max(x, l->st, l->n);
    if (l->kind == LA_LSE) {
        l->k->store_lse(m, l->k->expsum(x, l->st, l->n, m, NULL), out);
        return;
    }
    bool stored = l->k->same;
    double sum = l->k->expsum(x, l->st, l->n, m, stored ? out : NULL);
    l->k->scale(x, l->st, l->n, m, 1.0 / sum, out, stored);
}

static void lastax_rows(void *c, int64_t begin, int64_t end) {
    const lastax_ctx *l = c;
    int64_t per_row = l->kind == LA_LSE ? 1 : l->n;
    for (int64_t r = begin; r < end; r++) {
        int64_t off = 0, o = r;
        for (int d = l->nd - 1; d >= 0; d--) {
            off += (o % l->shape[d]) * l->strides[d];
            o /= l->shape[d];
        }
        lastax_row(l, l->x + off * (int64_t)l->isz, l->out + r * per_row * (int64_t)l->osz);
    }
}

/* Pieces of one long row, part ith of nth. */
static void part_range(const lastax_ctx *l, int ith, int nth, int64_t *b, int64_t *e) {
    *b = l->n * ith / nth;
    *e = l->n * (ith + 1) / nth;
}

static void part_max(void *c, int ith, int nth) {
    lastax_ctx *l = c;
    int64_t b, e;
    part_range(l, ith, nth, &b, &e);
    l->part[ith] = e > b ? l->k->max(l->row + b * l->st * (int64_t)l->isz, l->st, e - b) : -INFINITY;
}

static void part_expsum(void *c, int ith, int nth) {
    lastax_ctx *l = c;
    int64_t b, e;
    part_range(l, ith, nth, &b, &e);
    char *o = l->kind == LA_SOFTMAX && l->k->same ? l->orow + b * (int64_t)l->osz : NULL;
    l->part[ith] = l->k->expsum(l->row + b * l->st * (int64_t)l->isz, l->st, e - b, l->m, o);
}

static void part_scale(void *c, int ith, int nth) {
    lastax_ctx *l = c;
    int64_t b, e;
    part_range(l, ith, nth, &b, &e);
    l->k->scale(l->row + b * l->st * (int64_t)l->isz, l->st, e - b, l->m, l->inv, l->orow + b * (int64_t)l->osz,
                l->k->same);
}

static int lastax_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const lastax_params *lp = p->params;
    const mk_array *x = in[0];
    if (mk_alloc_out(out[0]) < 0) return -1;
    if (x->size == 0) return 0;
    lastax_ctx l;
    memset(&l, 0, sizeof l);
    l.kind = lp->kind;
    l.k = &lastax_kernels[x->dtype];
    l.x = mk_data(x);
    l.out = mk_data(out[0]);
    l.isz = mk_dtype_size(x->dtype);
    l.osz = mk_dtype_size(out[0]->dtype);
    l.n = x->shape[x->ndim - 1];
    l.st = x->strides[x->ndim - 1];
    l.nd = x->ndim - 1;
    memcpy(l.shape, x->shape, l.nd * sizeof *l.shape);
    memcpy(l.strides, x->strides, l.nd * sizeof *l.strides);
    int64_t rows = x->size / l.n;
    /* whether and how rows are split depends on the shape only, never on the
     * thread count, so results are the same with any MKPY_NUM_THREADS */
    int64_t want = l.n / MK_GRAIN;
    if (want > 256) want = 256;
    if (rows >= SPLIT_ROWS_BELOW || want < 2 || l.kind == LA_SOFTMAX_LOW) {
        int64_t grain = MK_GRAIN / l.n;
        mk_parallel_for(rows, grain < 1 ? 1 : grain, lastax_rows, &l);
        return 0;
    }
    /* few long rows: split each into parts, claimed by the threads */
    l.nparts = (int)want;
    int64_t per_row = l.kind == LA_LSE ? 1 : l.n;
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = 0, o = r;
        for (int d = l.nd - 1; d >= 0; d--) {
            off += (o % l.shape[d]) * l.strides[d];
            o /= l.shape[d];
        }
        l.row = l.x + off * (int64_t)l.isz;
        l.orow = l.out + r * per_row * (int64_t)l.osz;
        mk_parallel_slices(l.nparts, part_max, &l);
        l.m = -INFINITY;
        for (int t = 0; t < l.nparts; t++) l.m = max_nan_d(l.m, l.part[t]);
        mk_parallel_slices(l.nparts, part_expsum, &l);
        double sum = 0;
        for (int t = 0; t < l.nparts; t++) sum += l.part[t];
        if (l.kind == LA_LSE) {
            l.k->store_lse(l.m, sum, l.orow);
        } else {
            l.inv = 1.0 / sum;
            mk_parallel_slices(l.nparts, part_scale, &l);
        }
    }
    return 0;
}

static int lastax_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int lastax_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int lastax_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef lastax_def = {"softmax", lastax_eval, NULL, lastax_vjp, lastax_jvp, lastax_vmap, false};

/* the GPU back-end (backend/cuda/ops_fast.c): the row kind (0 logsumexp, 1
 * softmax, 2 softmax in float16/bfloat16 without precise) and how a row of n
 * elements in `rows` rows is split into parts (1: not split), as lastax_eval
 * splits it */
bool mk_xp_lastax(const mk_prim *p, int *kind, int64_t rows, int64_t n, int *nparts) {
    if (p->op != &lastax_def) return false;
    const lastax_params *lp = p->params;
    *kind = lp->kind == LA_LSE ? 0 : lp->kind == LA_SOFTMAX ? 1 : 2;
    int64_t want = n / MK_GRAIN;
    if (want > 256) want = 256;
    *nparts = rows >= SPLIT_ROWS_BELOW || want < 2 || lp->kind == LA_SOFTMAX_LOW ? 1 : (int)want;
    return true;
}

static mk_array *lastax_node(lastax_kind kind, mk_array *x, int ndim, const int64_t *shape) {
    lastax_params *lp = malloc(sizeof *lp);
    if (!lp) return mk_nomem();
    lp->kind = kind;
    return mk_node(&lastax_def, lp, x->dtype, ndim, shape, 1, &x);
}

/* Axes as a list (naxes < 0: all dims). Returns the count. */
static int axes_list(const mk_array *x, int naxes, const int *axes, int *out) {
    if (naxes < 0) {
        for (int d = 0; d < x->ndim; d++) out[d] = d;
        return x->ndim;
    }
    memcpy(out, axes, naxes * sizeof *axes);
    return naxes;
}

/* The array of shape `shape` with the reduced dims (red) of size 1 dropped
 * or kept: a reshape view of a keepdims result. */
static mk_array *drop_reduced(mk_array *k, const bool *red, int ndim, bool keepdims) {
    if (keepdims) {
        mk_incref(k);
        return k;
    }
    int64_t shape[MK_MAX_NDIM];
    int n = 0;
    for (int d = 0; d < ndim; d++)
        if (!red[d]) shape[n++] = k->shape[d];
    return mk_reshape(k, n, shape);
}

/* Whether the axes reduce the last axis only, possibly after consecutive
 * axes of size 1 (MLX's test for its fused softmax/logsumexp kernels). */
static bool last_axis_only(const mk_array *x, int n, const int *axes) {
    int nd = x->ndim;
    bool last = n > 0 && (axes[n - 1] == nd - 1 || axes[n - 1] == -1);
    for (int i = n - 2; last && i >= 0; i--) {
        int a = axes[i] < 0 ? axes[i] + nd : axes[i];
        if (axes[i] + 1 != axes[i + 1] || a < 0 || a >= nd || x->shape[a] != 1) last = false;
    }
    return last;
}

mk_array *mk_logsumexp(mk_array *x, int naxes, const int *axes_in, bool keepdims) {
    int axes[MK_MAX_NDIM];
    if (x->size == 0) {
        mk_error_set(MK_ERR_VALUE, "[logsumexp] Received empty array.");
        return NULL;
    }
    if (x->ndim == 0 && naxes > 0) {
        mk_error_set(MK_ERR_VALUE, "[logsumexp] Received non-empty axes for array with 0 dimensions.");
        return NULL;
    }
    int n = axes_list(x, naxes, axes_in, axes);
    int nd = x->ndim;
    if (last_axis_only(x, n, axes) && x->dtype != MK_COMPLEX64) {
        bool red[MK_MAX_NDIM];
        if (reduce_axes(x, n, axes, red) < 0) return NULL;
        int64_t shape[MK_MAX_NDIM];
        int ond = reduced_shape(x, red, keepdims, shape);
        mk_array *xf = mk_as_dtype(x, mk_to_float(x->dtype));
        if (!xf) return NULL;
        mk_array *r = lastax_node(LA_LSE, xf, ond, shape);
        mk_decref(xf);
        return r;
    }
    /* as MLX: m = max(x); log(sum(exp(x - m))) + m, or m where m is infinite */
    mk_array *m = mk_reduce(MK_REDUCE_MAX, x, n, axes, true);
    if (!m) return NULL;
    bool red[MK_MAX_NDIM];
    reduce_axes(x, n, axes, red);
    mk_array *e = un_steal(MK_UNARY_exp, mk_binary(MK_BINARY_subtract, x, m));
    mk_array *s = e ? mk_reduce(MK_REDUCE_SUM, e, n, axes, keepdims) : NULL;
    mk_xdecref(e);
    mk_array *mr = drop_reduced(m, red, nd, keepdims);
    mk_decref(m);
    mk_array *out = NULL;
    if (s && mr) {
        mk_array *l = mk_unary(MK_UNARY_log, s);
        mk_array *sumv = l ? mk_binary(MK_BINARY_add, l, mr) : NULL;
        mk_array *inf = mk_unary(MK_UNARY_isinf, mr);
        if (sumv && inf) out = mk_where(inf, mr, sumv);
        mk_xdecref(l);
        mk_xdecref(sumv);
        mk_xdecref(inf);
    }
    mk_xdecref(s);
    mk_xdecref(mr);
    return out;
}

mk_array *mk_softmax(mk_array *x, int naxes, const int *axes_in, bool precise) {
    int axes[MK_MAX_NDIM];
    if (x->size == 0) {
        mk_incref(x);
        return x;
    }
    if (x->ndim == 0 && naxes > 0) {
        mk_error_set(MK_ERR_VALUE, "[softmax] Received non-empty axes for array with 0 dimensions.");
        return NULL;
    }
    int n = axes_list(x, naxes, axes_in, axes);
    int nd = x->ndim;
    if (last_axis_only(x, n, axes) && x->dtype != MK_COMPLEX64) {
        bool red[MK_MAX_NDIM];
        if (reduce_axes(x, n, axes, red) < 0) return NULL;
        mk_array *xf = mk_as_dtype(x, mk_to_float(x->dtype));
        if (!xf) return NULL;
        bool low = !precise && (xf->dtype == MK_FLOAT16 || xf->dtype == MK_BFLOAT16);
        mk_array *r = lastax_node(low ? LA_SOFTMAX_LOW : LA_SOFTMAX, xf, nd, x->shape);
        mk_decref(xf);
        return r;
    }
    /* as MLX: exp(x - max) / sum, in float32 when precise, back to x's dtype */
    mk_array *in = precise ? mk_as_dtype(x, MK_FLOAT32) : (mk_incref(x), x);
    if (!in) return NULL;
    mk_array *m = mk_reduce(MK_REDUCE_MAX, in, n, axes, true);
    mk_array *e = m ? un_steal(MK_UNARY_exp, mk_binary(MK_BINARY_subtract, in, m)) : NULL;
    mk_xdecref(m);
    mk_decref(in);
    if (!e) return NULL;
    mk_array *s = mk_reduce(MK_REDUCE_SUM, e, n, axes, true);
    mk_array *q = s ? mk_binary(MK_BINARY_divide, e, s) : NULL;
    mk_decref(e);
    mk_xdecref(s);
    if (!q) return NULL;
    mk_array *r = mk_as_dtype(q, x->dtype);
    mk_decref(q);
    return r;
}

/* ---------------------------------------------------------- transformation rules */

/* Which reduction a node is (-1: an arg reduction, not differentiable). */
static int reduce_which(const reduce_params *rp) {
    const rkern *base = &reduce_kernels[0][0];
    if (rp->k < base || rp->k >= base + 6 * MK_NDTYPES) return -1;
    return (int)((rp->k - base) / MK_NDTYPES);
}

/* x's shape with the reduced dims set to 1 */
static int keep_shape(const mk_array *x, const bool *red, int64_t *shape) {
    for (int d = 0; d < x->ndim; d++) shape[d] = red[d] ? 1 : x->shape[d];
    return x->ndim;
}

static int red_axes(const mk_array *x, const bool *red, int *axes) {
    int n = 0;
    for (int d = 0; d < x->ndim; d++)
        if (red[d]) axes[n++] = d;
    return n;
}

/* d(prod)/dx exactly (zeros included): the products of the elements before
 * and after each one along the flattened reduced dims. */
static mk_array *prod_partial(mk_arena *A, mk_array *x, const bool *red) {
    int nd = x->ndim, perm[MK_MAX_NDIM], inv[MK_MAX_NDIM], n = 0;
    int64_t shape[MK_MAX_NDIM], L = 1;
    for (int d = 0; d < nd; d++)
        if (!red[d]) {
            perm[n] = d;
            shape[n++] = x->shape[d];
        }
    int nkeep = n;
    for (int d = 0; d < nd; d++)
        if (red[d]) {
            perm[n++] = d;
            L *= x->shape[d];
        }
    for (int k = 0; k < nd; k++) inv[perm[k]] = k;
    shape[nkeep] = L;
    mk_array *t = mk_ar_reshape(A, mk_ar_transpose(A, x, nd, perm), nkeep + 1, shape);
    mk_array *left = t ? mk_ar_keep(A, mk_scan(MK_SCAN_PROD, t, nkeep, true, false, false)) : NULL;
    mk_array *right = t ? mk_ar_keep(A, mk_scan(MK_SCAN_PROD, t, nkeep, true, true, false)) : NULL;
    mk_array *g = mk_ar_mul(A, left, right);
    if (!g) return NULL;
    int64_t tshape[MK_MAX_NDIM];
    for (int k = 0; k < nd; k++) tshape[k] = x->shape[perm[k]];
    g = mk_ar_reshape(A, g, nd, tshape);
    return mk_ar_transpose(A, g, nd, inv);
}

/* The derivative factor of sum/prod/max/min against x (NULL for sum,
 * meaning 1), in x's shape. */
static int reduce_factor(mk_arena *A, mk_prim *p, mk_array **f) {
    const reduce_params *rp = p->params;
    mk_array *x = p->inputs[0];
    int which = reduce_which(rp);
    int64_t ks[MK_MAX_NDIM];
    int axes[MK_MAX_NDIM], na = red_axes(x, rp->red, axes);
    keep_shape(x, rp->red, ks);
    *f = NULL;
    switch (which) {
    case MK_REDUCE_SUM: return 0;
    case MK_REDUCE_PROD: *f = prod_partial(A, x, rp->red); break;
    case MK_REDUCE_MAX:
    case MK_REDUCE_MIN: {
        /* ties share the gradient equally, as MLX */
        mk_array *out = mk_ar_output(A, p, 0);
        if (!out) out = mk_ar_keep(A, mk_reduce(which, x, na, axes, false));
        mk_array *mask = mk_ar_cast(A, mk_ar_bin(A, MK_BINARY_equal, x, mk_ar_reshape(A, out, x->ndim, ks)), x->dtype);
        *f = mk_ar_div(A, mask, mk_ar_sum(A, mask, na, axes, true));
        break;
    }
    default: return 1;
    }
    return *f ? 0 : -1;
}

static int reduce_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const reduce_params *rp = p->params;
    mk_array *x = p->inputs[0];
    if (!want[0] || !cots[0]) return 0;
    mk_arena A = {0};
    mk_array *f;
    int rc = reduce_factor(&A, p, &f);
    if (rc == 0) {
        /* the reduced axes put back (expand_dims) and the cotangent broadcast
         * against x (a BroadcastAxes node while tracing): axis positions and
         * x's shape only, so a shapeless replay follows new sizes */
        int axes[MK_MAX_NDIM], na = red_axes(x, rp->red, axes);
        mk_array *c = mk_ar_cast(&A, cots[0], x->dtype);
        if (c && c->ndim != x->ndim) c = mk_ar_keep(&A, mk_expand_dims(c, na, axes));
        c = mk_ar_broadcast_like(&A, c, x);
        if (f) c = mk_ar_mul(&A, c, mk_ar_conj(&A, f));
        grads[0] = mk_ar_out(c);
        if (!grads[0]) rc = -1;
    }
    mk_ar_free(&A);
    return rc < 0 ? -1 : 0;
}

static int reduce_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    const reduce_params *rp = p->params;
    mk_array *x = p->inputs[0];
    mk_arena A = {0};
    mk_array *f;
    int rc = reduce_factor(&A, p, &f);
    if (rc == 0) {
        int axes[MK_MAX_NDIM], na = red_axes(x, rp->red, axes);
        mk_array *t = f ? mk_ar_mul(&A, tans[0], f) : tans[0];
        t = mk_ar_sum(&A, t, na, axes, p->outdesc[0].ndim == x->ndim);
        out[0] = mk_ar_out(mk_ar_cast(&A, t, p->outdesc[0].dtype));
        if (!out[0]) rc = -1;
    }
    mk_ar_free(&A);
    return rc < 0 ? -1 : 0;
}

static int reduce_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const reduce_params *rp = p->params;
    mk_arena A = {0};
    mk_array *x = mk_ar_batch_front(&A, in[0], axes[0], 1);
    bool red[MK_MAX_NDIM] = {false};
    for (int d = 0; d + 1 < MK_MAX_NDIM; d++) red[d + 1] = rp->red[d];
    const rkern *k = rp->k;
    /* the kernel is per dtype; the batched input has the same dtype */
    outs[0] = x ? reduce_node(k, x, red, rp->keep_order, p->outdesc[0].ndim == p->inputs[0]->ndim,
                              p->outdesc[0].dtype)
                : NULL;
    out_axes[0] = 0;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

static int lastax_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const lastax_params *lp = p->params;
    mk_array *x = p->inputs[0];
    if (!want[0] || !cots[0]) return 0;
    mk_arena A = {0};
    int last = x->ndim - 1;
    mk_array *out = mk_ar_output(&A, p, 0), *g;
    if (!out) out = mk_ar_keep(&A, lastax_node(lp->kind, x, p->outdesc[0].ndim, p->outdesc[0].shape));
    if (lp->kind == LA_LSE) {
        int64_t ks[MK_MAX_NDIM];
        memcpy(ks, x->shape, x->ndim * sizeof *ks);
        ks[last] = 1;
        mk_array *sm = mk_ar_un(&A, MK_UNARY_exp, mk_ar_sub(&A, x, mk_ar_reshape(&A, out, x->ndim, ks)));
        g = mk_ar_mul(&A, mk_ar_reshape(&A, cots[0], x->ndim, ks), sm);
    } else {
        mk_array *cs = mk_ar_mul(&A, cots[0], out);
        g = mk_ar_sub(&A, cs, mk_ar_mul(&A, out, mk_ar_sum(&A, cs, 1, &last, true)));
    }
    grads[0] = mk_ar_out(g);
    mk_ar_free(&A);
    return grads[0] ? 0 : -1;
}

static int lastax_jvp(mk_prim *p, mk_array *const *tans, mk_array **res) {
    const lastax_params *lp = p->params;
    mk_array *x = p->inputs[0];
    mk_arena A = {0};
    int last = x->ndim - 1;
    mk_array *out = mk_ar_output(&A, p, 0), *g;
    if (!out) out = mk_ar_keep(&A, lastax_node(lp->kind, x, p->outdesc[0].ndim, p->outdesc[0].shape));
    if (lp->kind == LA_LSE) {
        int64_t ks[MK_MAX_NDIM];
        memcpy(ks, x->shape, x->ndim * sizeof *ks);
        ks[last] = 1;
        mk_array *sm = mk_ar_un(&A, MK_UNARY_exp, mk_ar_sub(&A, x, mk_ar_reshape(&A, out, x->ndim, ks)));
        g = mk_ar_reshape(&A, mk_ar_sum(&A, mk_ar_mul(&A, tans[0], sm), 1, &last, true), p->outdesc[0].ndim,
                          p->outdesc[0].shape);
    } else {
        mk_array *ts = mk_ar_mul(&A, tans[0], out);
        g = mk_ar_sub(&A, ts, mk_ar_mul(&A, out, mk_ar_sum(&A, ts, 1, &last, true)));
    }
    res[0] = mk_ar_out(g);
    mk_ar_free(&A);
    return res[0] ? 0 : -1;
}

static int lastax_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const lastax_params *lp = p->params;
    mk_arena A = {0};
    mk_array *x = mk_ar_batch_front(&A, in[0], axes[0], 1);
    /* the output's shape from x's (a shapeless compile's replay batches new shapes): x's for
       softmax; for logsumexp x's without the last axis, or with it as 1 (keepdims) */
    int64_t shape[MK_MAX_NDIM];
    int nd = x ? x->ndim : 0;
    if (x) {
        memcpy(shape, x->shape, x->ndim * sizeof *shape);
        if (lp->kind == LA_LSE && p->outdesc[0].ndim == p->inputs[0]->ndim) shape[nd - 1] = 1;
        else if (lp->kind == LA_LSE) nd--;
    }
    outs[0] = x ? lastax_node(lp->kind, x, nd, shape) : NULL;
    out_axes[0] = 0;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_reduce(const mk_prim *p, int *which, bool *red) {
    if (p->op != &reduce_def) return false;
    const reduce_params *rp = p->params;
    *which = reduce_which(rp);
    memcpy(red, rp->red, sizeof rp->red);
    return true;
}
bool mk_xp_argreduce(const mk_prim *p, int *which, bool *red) {
    if (p->op != &reduce_def) return false;
    const reduce_params *rp = p->params;
    const rkern *a0 = &arg_kernels[0][0];
    if (rp->k < a0 || rp->k >= a0 + 2 * MK_NDTYPES) return false;
    *which = (int)((rp->k - a0) / MK_NDTYPES);
    memcpy(red, rp->red, sizeof rp->red);
    return true;
}
