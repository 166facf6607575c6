/* C types behind each dtype, for the op implementations.
 *
 * Each dtype has a storage type S and a compute type R: arithmetic happens in
 * R and is stored back into S. For float16 and bfloat16, R is float and the
 * store rounds once. The X-macro lists let an op family instantiate a kernel
 * per dtype in one line, ggml style. */
#ifndef MK_TYPES_H
#define MK_TYPES_H

#include <complex.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "half.h"

typedef float _Complex mk_c64;

/* X(DTYPE_ENUM, suffix, storage type, compute type) */
#define MK_BOOL_TYPES(X) X(MK_BOOL, b8, bool, bool)
#define MK_UINT_TYPES(X)                                                                               \
    X(MK_UINT8, u8, uint8_t, uint8_t)                                                                  \
    X(MK_UINT16, u16, uint16_t, uint16_t)                                                              \
    X(MK_UINT32, u32, uint32_t, uint32_t)                                                              \
    X(MK_UINT64, u64, uint64_t, uint64_t)
#define MK_SINT_TYPES(X)                                                                               \
    X(MK_INT8, i8, int8_t, int8_t)                                                                     \
    X(MK_INT16, i16, int16_t, int16_t)                                                                 \
    X(MK_INT32, i32, int32_t, int32_t)                                                                 \
    X(MK_INT64, i64, int64_t, int64_t)
#define MK_INT_TYPES(X) MK_UINT_TYPES(X) MK_SINT_TYPES(X)
#define MK_FLOAT_TYPES(X)                                                                              \
    X(MK_FLOAT16, f16, mk_f16, float)                                                                  \
    X(MK_FLOAT32, f32, float, float)                                                                   \
    X(MK_FLOAT64, f64, double, double)                                                                 \
    X(MK_BFLOAT16, bf16, mk_bf16, float)
#define MK_COMPLEX_TYPES(X) X(MK_COMPLEX64, c64, mk_c64, mk_c64)
#define MK_REAL_TYPES(X) MK_INT_TYPES(X) MK_FLOAT_TYPES(X)
#define MK_NUMERIC_TYPES(X) MK_REAL_TYPES(X) MK_COMPLEX_TYPES(X)
#define MK_ALL_TYPES(X) MK_BOOL_TYPES(X) MK_NUMERIC_TYPES(X)
#define MK_INEXACT_TYPES(X) MK_FLOAT_TYPES(X) MK_COMPLEX_TYPES(X)

/* The same lists with two extra arguments passed through to X, for makers
 * that need an op name and an expression (and for nested expansion: a macro
 * cannot expand itself). */
#define MK_BOOL_TYPES_2(X, a, b) X(MK_BOOL, b8, bool, bool, a, b)
#define MK_UINT_TYPES_2(X, a, b)                                                                       \
    X(MK_UINT8, u8, uint8_t, uint8_t, a, b)                                                            \
    X(MK_UINT16, u16, uint16_t, uint16_t, a, b)                                                        \
    X(MK_UINT32, u32, uint32_t, uint32_t, a, b)                                                        \
    X(MK_UINT64, u64, uint64_t, uint64_t, a, b)
#define MK_SINT_TYPES_2(X, a, b)                                                                       \
    X(MK_INT8, i8, int8_t, int8_t, a, b)                                                               \
    X(MK_INT16, i16, int16_t, int16_t, a, b)                                                           \
    X(MK_INT32, i32, int32_t, int32_t, a, b)                                                           \
    X(MK_INT64, i64, int64_t, int64_t, a, b)
#define MK_FLOAT_TYPES_2(X, a, b)                                                                      \
    X(MK_FLOAT16, f16, mk_f16, float, a, b)                                                            \
    X(MK_FLOAT32, f32, float, float, a, b)                                                             \
    X(MK_FLOAT64, f64, double, double, a, b)                                                           \
    X(MK_BFLOAT16, bf16, mk_bf16, float, a, b)
#define MK_COMPLEX_TYPES_2(X, a, b) X(MK_COMPLEX64, c64, mk_c64, mk_c64, a, b)
#define MK_ALL_TYPES_2(X, a, b)                                                                        \
    MK_BOOL_TYPES_2(X, a, b) MK_UINT_TYPES_2(X, a, b) MK_SINT_TYPES_2(X, a, b)                         \
    MK_FLOAT_TYPES_2(X, a, b) MK_COMPLEX_TYPES_2(X, a, b)

/* Load a storage value as its compute type, and store one back. */
#define MK_LOAD_b8(p) (*(p))
#define MK_LOAD_u8(p) (*(p))
#define MK_LOAD_u16(p) (*(p))
#define MK_LOAD_u32(p) (*(p))
#define MK_LOAD_u64(p) (*(p))
#define MK_LOAD_i8(p) (*(p))
#define MK_LOAD_i16(p) (*(p))
#define MK_LOAD_i32(p) (*(p))
#define MK_LOAD_i64(p) (*(p))
#define MK_LOAD_f16(p) mk_f16_to_f32(*(p))
#define MK_LOAD_f32(p) (*(p))
#define MK_LOAD_f64(p) (*(p))
#define MK_LOAD_bf16(p) mk_bf16_to_f32(*(p))
#define MK_LOAD_c64(p) (*(p))

/* Floating-point to integer conversions as x86-64's truncating conversions give them, which is
 * what MLX's CPU build (GCC, x86-64) gives: toward zero; a NaN or a value outside the range of
 * the instruction's width (32 bits for 8-, 16- and 32-bit signed and 8- and 16-bit unsigned
 * targets, 64 bits for int64 and uint32) gives that width's INT_MIN, which then wraps to the
 * target; uint64 converts values from 2^63 up as x - 2^63 with the top bit set. C leaves an
 * out-of-range conversion undefined (and compilers differ: gcc 13 and AVX-512 code give other
 * values), so it never happens here. A complex value converts its real part. */
#define MK_F2I_PAIR(F, sfx, L32, H32, L64, H64)                                                       \
    static inline int32_t mk_f2i32_##sfx(F v) { return v >= L32 && v < H32 ? (int32_t)v : INT32_MIN; } \
    static inline int64_t mk_f2i64_##sfx(F v) { return v >= L64 && v < H64 ? (int64_t)v : INT64_MIN; } \
    static inline uint64_t mk_f2u64_##sfx(F v) {                                                      \
        return !(v >= H64) ? (uint64_t)mk_f2i64_##sfx(v) : (uint64_t)mk_f2i64_##sfx(v - H64) ^ (1ull << 63); \
    }
MK_F2I_PAIR(float, f, -2147483648.0f, 2147483648.0f, -9223372036854775808.0f, 9223372036854775808.0f)
MK_F2I_PAIR(double, d, -2147483648.0, 2147483648.0, -9223372036854775808.0, 9223372036854775808.0)
#undef MK_F2I_PAIR
static inline int32_t mk_f2i32_c(mk_c64 v) { return mk_f2i32_f(crealf(v)); }
static inline int64_t mk_f2i64_c(mk_c64 v) { return mk_f2i64_f(crealf(v)); }
static inline uint64_t mk_f2u64_c(mk_c64 v) { return mk_f2u64_f(crealf(v)); }
static inline int32_t mk_f2i32_i(int64_t v) { return (int32_t)v; }
static inline int64_t mk_f2i64_i(int64_t v) { return v; }
static inline uint64_t mk_f2u64_i(uint64_t v) { return v; }
#define MK_F2I(w, v) _Generic((v), float: mk_f2##w##_f, double: mk_f2##w##_d, mk_c64: mk_f2##w##_c, default: mk_f2##w##_i)(v)

#define MK_STORE_b8(p, v) (*(p) = (bool)(v))
#define MK_STORE_u8(p, v) (*(p) = (uint8_t)MK_F2I(i32, v))
#define MK_STORE_u16(p, v) (*(p) = (uint16_t)MK_F2I(i32, v))
#define MK_STORE_u32(p, v) (*(p) = (uint32_t)MK_F2I(i64, v))
#define MK_STORE_u64(p, v) (*(p) = MK_F2I(u64, v))
#define MK_STORE_i8(p, v) (*(p) = (int8_t)MK_F2I(i32, v))
#define MK_STORE_i16(p, v) (*(p) = (int16_t)MK_F2I(i32, v))
#define MK_STORE_i32(p, v) (*(p) = MK_F2I(i32, v))
#define MK_STORE_i64(p, v) (*(p) = MK_F2I(i64, v))
#define MK_STORE_f16(p, v) (*(p) = mk_f32_to_f16((float)(v)))
#define MK_STORE_f32(p, v) (*(p) = (float)(v))
#define MK_STORE_f64(p, v) (*(p) = (double)(v))
#define MK_STORE_bf16(p, v) (*(p) = mk_f32_to_bf16((float)(v)))
#define MK_STORE_c64(p, v) (*(p) = (mk_c64)(v))

/* Scalar access by dtype, for item(), tolist() and scalar construction. */
double mk_get_f64(mk_dtype t, const void *p);
int64_t mk_get_i64(mk_dtype t, const void *p);
uint64_t mk_get_u64(mk_dtype t, const void *p);
mk_c64 mk_get_c64(mk_dtype t, const void *p);
void mk_put_f64(mk_dtype t, void *p, double v);
void mk_put_i64(mk_dtype t, void *p, int64_t v);
void mk_put_c64(mk_dtype t, void *p, mk_c64 v);

/* Strided conversion of n elements: dst[i] = (to)src[i * sstride]. */
typedef void (*mk_cast_fn)(const void *src, int64_t sstride, void *dst, int64_t dstride, int64_t n);
extern const mk_cast_fn mk_cast_table[MK_NDTYPES][MK_NDTYPES];

#endif
