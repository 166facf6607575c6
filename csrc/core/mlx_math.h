/* MLX's own float32 approximations of exp, sin, cos, erf and erfinv (its CPU back
 * end's SIMD math), written out so results match MLX to the bit, and
 * mkpy's own vectorisable float32 tanh. MLX
 * computes these in float32 for every floating dtype (float16, bfloat16 and
 * float64 inputs are converted to float and the result rounded back).
 *
 * fmaf must be a true fused multiply-add (glibc's is, in hardware or not);
 * plain a * b + c must not be contracted (-std=c11 keeps contraction off). */
#ifndef MK_MLX_MATH_H
#define MK_MLX_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* always inlined, so the AVX2+FMA clones of the kernels (simd.h) inline and
 * vectorise them too */
#if defined(__GNUC__)
#define MK_MATH_INLINE static inline __attribute__((always_inline))
#else
#define MK_MATH_INLINE static inline
#endif

/* exp via 2^x: a degree-6 polynomial for the fraction and the exponent bits
 * for the integer part; nan stays nan, x > 88 gives inf, x < -88 gives 0. */
/* its constants, shared with the float16 kernel of half_fast.c */
#define MK_EXP_LOG2E 1.442695f
#define MK_EXP_C6 1.535336188319500e-4f
#define MK_EXP_C5 1.339887440266574e-3f
#define MK_EXP_C4 9.618437357674640e-3f
#define MK_EXP_C3 5.550332471162809e-2f
#define MK_EXP_C2 2.402264791363012e-1f
#define MK_EXP_C1 6.931472028550421e-1f
#define MK_EXP_C0 1.000000000000000f
MK_MATH_INLINE float mk_mlx_expf(float x) {
    /* branch-free, so loops over it vectorise: the special cases are selects */
    float y = x * MK_EXP_LOG2E;
    /* keeps the int conversion defined: a nan becomes -200 (the result is x then, below) */
    float yc = y > 200.0f ? 200.0f : y >= -200.0f ? y : -200.0f;
    /* MLX takes floor((double)y + 0.5): y rounded half up. In float, exactly:
     * round half to even, then move ties up (y - r is exact) */
    float ipart = rintf(yc);
    ipart += (yc - ipart == 0.5f) ? 1.0f : 0.0f;
    float fpart = yc - ipart;
    float p = MK_EXP_C6;
    p = fmaf(p, fpart, MK_EXP_C5);
    p = fmaf(p, fpart, MK_EXP_C4);
    p = fmaf(p, fpart, MK_EXP_C3);
    p = fmaf(p, fpart, MK_EXP_C2);
    p = fmaf(p, fpart, MK_EXP_C1);
    p = fmaf(p, fpart, MK_EXP_C0);
    uint32_t bits = (uint32_t)((int32_t)ipart + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float r = scale * p;
    r = x < -88.0f ? 0.0f : r;
    r = x > 88.0f ? INFINITY : r;
    return x != x ? x : r; /* nan stays nan */
}

/* tanh, mkpy's own (MLX's CPU back end calls std::tanh): branch-free, so
 * loops over it vectorise. |x| < 0.8: x + x^3 P(x^2), P a degree-5 minimax
 * fit of (tanh(x)/x - 1)/x^2 (relative error 2^-28); otherwise
 * 1 - 2/(exp(2|x|) + 1) with MLX's exp polynomial, sign copied from x. Over every
 * float32 it is within 1 ulp of the correctly rounded tanh and 2 ulp of
 * glibc's tanhf (tests/test_elementwise.py checks a dense sample).
 * tanh(+-inf) = +-1, nan stays nan, -0 stays -0, tiny x gives x. */
MK_MATH_INLINE float mk_tanhf(float x) {
    float s = x * x;
    float p = 1.584754879e-03f;
    p = fmaf(p, s, -7.409555077e-03f);
    p = fmaf(p, s, 2.130298962e-02f);
    p = fmaf(p, s, -5.385233123e-02f);
    p = fmaf(p, s, 1.333222102e-01f);
    p = fmaf(p, s, -3.333329736e-01f);
    float small = fmaf(x * s, p, x);
    /* exp(2|x|) as MLX's exp computes it, without its special cases: |x| is
     * clamped to 9.1 (tanh rounds to 1 from 9.01 on), so nothing overflows,
     * and any rounding of y to an integer reduces the argument as well */
    float a = fabsf(x);
    float y = (2.0f * (a < 9.1f ? a : 9.1f)) * 1.442695f;
    float ipart = rintf(y), f = y - ipart;
    float q = 1.535336188319500e-4f;
    q = fmaf(q, f, 1.339887440266574e-3f);
    q = fmaf(q, f, 9.618437357674640e-3f);
    q = fmaf(q, f, 5.550332471162809e-2f);
    q = fmaf(q, f, 2.402264791363012e-1f);
    q = fmaf(q, f, 6.931472028550421e-1f);
    q = fmaf(q, f, 1.0f);
    uint32_t bits = (uint32_t)((int32_t)ipart + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float big = 1.0f - 2.0f / (scale * q + 1.0f);
    /* the sign of x also makes tanh(-0) = -0 */
    float r = copysignf(a < 0.8f ? small : big, x);
    return x != x ? x : r;
}

/* sin and cos, MLX's (Cephes by way of its CPU SIMD math; MLX computes
 * float16, bfloat16 and float64 through it in float too): the argument is
 * reduced modulo pi/4 in three fma steps and one of two polynomials picked.
 * mk_mlx_sincos_core takes a = |x| as a float and neg = (x < 0) in x's own
 * type (so -1e-320 as a double gives sin = -0, as MLX's); it is branch-free
 * so loops over it vectorise, and exact for |x| <= MK_MLX_SINCOS_MAX. MLX's
 * results beyond that (and for inf and nan) are libm's sinf and cosf, which
 * mk_mlx_sincos_big gives; mk_mlx_sinf / mk_mlx_cosf choose. sine is a
 * constant at every call (the functions are always inlined). */
#define MK_MLX_SINCOS_MAX 8388608.0f /* 2^23 */
MK_MATH_INLINE float mk_mlx_sincos_core(float a, int neg, int sine) {
    a = a <= MK_MLX_SINCOS_MAX ? a : 0.0f; /* nan, inf, huge: lanes the caller replaces */
    float y = a * 1.27323954473516f;
    uint32_t e = (uint32_t)(int32_t)y; /* y < 2^24: through int32 so it vectorises */
    e = (e + 1) & ~1u;
    y = (float)(int32_t)e;
    float x = fmaf(y, -0.78515625f, a);
    x = fmaf(y, -2.4187564849853515625e-4f, x);
    x = fmaf(y, -3.77489497744594108e-8f, x);
    float z = x * x;
    float y1 = fmaf(z, 2.443315711809948e-5f, -1.388731625493765e-3f);
    float y2 = fmaf(z, -1.9515295891e-4f, 8.3321608736e-3f);
    y1 = fmaf(y1, z, 4.166664568298827e-2f);
    y2 = fmaf(y2, z, -1.6666654611e-1f);
    y1 = y1 * z;
    y2 = y2 * z;
    y1 = y1 * z;
    y2 = fmaf(x, y2, x);
    y1 = fmaf(z, -0.5f, y1);
    y1 = y1 + 1.0f;
    /* MLX: sin = select(neg ^ (e & 4), -ys, ys), cos = select((e - 2) & 4, yc, -yc),
     * written as a flip of the sign bit (integer masks vectorise; bool ones may not) */
    uint32_t poly = e & 2, flip, bits;
    float r;
    if (sine) {
        r = poly ? y1 : y2;
        flip = ((neg ? 4u : 0u) ^ (e & 4)) << 29;
    } else {
        r = poly ? y2 : y1;
        flip = (((e - 2) & 4) ^ 4u) << 29;
    }
    memcpy(&bits, &r, sizeof bits);
    bits ^= flip;
    memcpy(&r, &bits, sizeof r);
    return r;
}

/* MLX's result where |x| > 2^23, inf or nan (a nan loses its sign and is
 * quieted, as MLX's takes |x| first) */
static inline float mk_mlx_sincos_big(float x, int sine) {
    if (x != x) { /* in bits: GCC may fold cosf(fabsf(x)) to cosf(x) */
        uint32_t u;
        memcpy(&u, &x, sizeof u);
        u = (u & 0x7fffffffu) | 0x00400000u;
        memcpy(&x, &u, sizeof x);
        return x;
    }
    return sine ? sinf(x) : cosf(x);
}

MK_MATH_INLINE float mk_mlx_sinf(float x) {
    return fabsf(x) <= MK_MLX_SINCOS_MAX ? mk_mlx_sincos_core(fabsf(x), x < 0, 1) : mk_mlx_sincos_big(x, 1);
}
MK_MATH_INLINE float mk_mlx_cosf(float x) {
    return fabsf(x) <= MK_MLX_SINCOS_MAX ? mk_mlx_sincos_core(fabsf(x), 0, 0) : mk_mlx_sincos_big(x, 0);
}

/* erf: Abramowitz-Stegun 7.1.26 with MLX's exp; odd by a final select. */
MK_MATH_INLINE float mk_mlx_erff(float x) {
    float t = 1.0f / fmaf(0.3275911f, fabsf(x), 1.0f);
    float r = fmaf(1.061405429f, t, -1.453152027f);
    r = fmaf(r, t, 1.421413741f);
    r = fmaf(r, t, -0.284496736f);
    r = fmaf(r, t, 0.254829592f);
    float e = -mk_mlx_expf(-x * x);
    float et = e * t;
    float res = fmaf(et, r, 1.0f);
    return x > 0 ? res : -res;
}

/* erfinv: t = log(1 - a^2), then a * P(t), one of two minimax polynomials
 * chosen by |t| > 6.125. */
#if defined(__GNUC__)
__attribute__((always_inline))
#endif
MK_MATH_INLINE float mk_mlx_erfinv_poly(float a, float t) {
    float p;
    if (fabsf(t) > 6.125f) {
        p = 3.03697567e-10f;
        p = fmaf(p, t, 2.93243101e-8f);
        p = fmaf(p, t, 1.22150334e-6f);
        p = fmaf(p, t, 2.84108955e-5f);
        p = fmaf(p, t, 3.93552968e-4f);
        p = fmaf(p, t, 3.02698812e-3f);
        p = fmaf(p, t, 4.83185798e-3f);
        p = fmaf(p, t, -2.64646143e-1f);
        p = fmaf(p, t, 8.40016484e-1f);
    } else {
        p = 5.43877832e-9f;
        p = fmaf(p, t, 1.43285448e-7f);
        p = fmaf(p, t, 1.22774793e-6f);
        p = fmaf(p, t, 1.12963626e-7f);
        p = fmaf(p, t, -5.61530760e-5f);
        p = fmaf(p, t, -1.47697632e-4f);
        p = fmaf(p, t, 2.31468678e-3f);
        p = fmaf(p, t, 1.15392581e-2f);
        p = fmaf(p, t, -2.32015476e-1f);
        p = fmaf(p, t, 8.86226892e-1f);
    }
    return a * p;
}

MK_MATH_INLINE float mk_mlx_erfinvf(float a) { return mk_mlx_erfinv_poly(a, logf(fmaf(a, 0.0f - a, 1.0f))); }

#endif
