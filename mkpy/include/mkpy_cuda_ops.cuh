// mkpy's GPU op kernels (csrc/backend/cuda/opkern.c compiles them with NVRTC,
// one small program per (op, dtypes), and launches them).
//
// Every kernel computes what the CPU evaluator of the same primitive computes
// (csrc/core/ops_unary.c, ops_binary.c, types.c, ops_reduce.c): the same
// storage and compute types (float16/bfloat16 compute in float and round once
// on store, with the CPU's bit-level conversions), the same expressions for
// integers (wrapping through uint64, floor division and remainder with
// Python's signs, division by zero giving 0, shifts past the width), MLX's
// float approximations of exp, sin, cos, erf, erfinv and mkpy's tanh written
// out as the CPU's mlx_math.h (bit for bit: compiled with --fmad=false so no
// a*b+c is contracted, and IEEE division and square root), and the x86-64
// results of float-to-integer conversions the C casts give on the CPU.
// Functions the CPU takes from glibc (log, pow, atan2, tan, ...) are CUDA's
// here: within CUDA's documented ulp bounds (docs/design.md, "GPU op
// evaluators").
//
// No standard header: NVRTC has none. Pure device code.
#ifndef MKPY_CUDA_OPS_CUH
#define MKPY_CUDA_OPS_CUH

namespace mkc {

typedef bool b8;
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef signed char i8;
typedef short i16;
typedef int i32;
typedef long long i64;
typedef float f32;
struct f16 { u16 bits; };
struct bf16 { u16 bits; };
struct __align__(8) c64 { float re, im; };

#define MKC_MAX_NDIM 32
#define MKC_INF __int_as_float(0x7f800000)

// ------------------------------------------------------- half and bfloat
// The CPU's conversions (csrc/core/half.h): round to nearest even, nan
// payloads kept and quieted.
__device__ __forceinline__ float h2f(f16 h) {
    u32 sign = (u32)(h.bits & 0x8000) << 16, e = (h.bits >> 10) & 0x1f, man = h.bits & 0x3ff;
    if (e == 0x1f) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    if (e == 0) {
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    return __uint_as_float(sign | ((e + 112) << 23) | (man << 13));
}
__device__ __forceinline__ f16 f2h(float f) {
    u32 x = __float_as_uint(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffffu;
    f16 h;
    if (ax >= 0x7f800000u) {
        h.bits = (u16)(sign | 0x7c00 | (ax > 0x7f800000u ? (0x200 | ((ax >> 13) & 0x3ff)) : 0));
        return h;
    }
    if (ax >= 0x477ff000u) {
        h.bits = (u16)(sign | 0x7c00);
        return h;
    }
    if (ax < 0x38800000u) {
        float r = __fadd_rn(__uint_as_float(ax), 0.5f);
        h.bits = (u16)(sign | (__float_as_uint(r) - 0x3f000000u));
        return h;
    }
    u32 odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + odd;
    h.bits = (u16)(sign | (ax >> 13));
    return h;
}
__device__ __forceinline__ float b2f(bf16 b) { return __uint_as_float((u32)b.bits << 16); }
__device__ __forceinline__ bf16 f2b(float f) {
    u32 x = __float_as_uint(f);
    bf16 b;
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        b.bits = (u16)((x >> 16) | 0x40);
        return b;
    }
    x += 0x7fffu + ((x >> 16) & 1);
    b.bits = (u16)(x >> 16);
    return b;
}

// ------------------------------------------------------- traits
template <class T> struct rt_of { typedef T type; };  // compute type
template <> struct rt_of<f16> { typedef float type; };
template <> struct rt_of<bf16> { typedef float type; };
template <class S> using rt = typename rt_of<S>::type;

template <class T> struct is_c64_ { static constexpr bool v = false; };
template <> struct is_c64_<c64> { static constexpr bool v = true; };
template <class T> struct is_f32_ { static constexpr bool v = false; };
template <> struct is_f32_<float> { static constexpr bool v = true; };
template <class T> struct is_b8_ { static constexpr bool v = false; };
template <> struct is_b8_<bool> { static constexpr bool v = true; };
template <class T> constexpr bool is_cplx = is_c64_<T>::v;
template <class T> constexpr bool is_flt = is_f32_<T>::v;
template <class T> constexpr bool is_bool = is_b8_<T>::v;
template <class T> constexpr bool is_int = !is_cplx<T> && !is_flt<T> && !is_bool<T>;
template <class T> constexpr bool is_sint = false;
template <> constexpr bool is_sint<i8> = true;
template <> constexpr bool is_sint<i16> = true;
template <> constexpr bool is_sint<i32> = true;
template <> constexpr bool is_sint<i64> = true;
template <class A, class B> constexpr bool same = false;
template <class A> constexpr bool same<A, A> = true;
template <class T> constexpr bool is_half = false;
template <> constexpr bool is_half<f16> = true;
template <> constexpr bool is_half<bf16> = true;

// ------------------------------------------------------- conversions
// x86-64's truncating conversions, as the CPU's C casts compile there
// (cvttss2si/cvttps2dq): out of range and nan give the "integer indefinite"
// value, 0x80000000 for 32 bits and 0x8000000000000000 for 64; types narrower
// than int go through int32; uint32 and uint64 convert x below 2^31 (2^63)
// directly and x - 2^31 (2^63) with the top bit set above, as GCC's
// vectorised loops do (measured: NaN -> 2147483648 for uint32). GCC's scalar
// tail of the same loop converts uint32 through int64 (NaN -> 0): C leaves
// out-of-range conversions undefined and the CPU is not consistent there.
__device__ __forceinline__ i32 x86_f2i32(float v) {
    return (v >= -2147483648.0f && v < 2147483648.0f) ? (i32)v : (i32)0x80000000;
}
__device__ __forceinline__ i64 x86_f2i64(float v) {
    return (v >= -9223372036854775808.0f && v < 9223372036854775808.0f) ? (i64)v : (i64)0x8000000000000000ll;
}
__device__ __forceinline__ u32 x86_f2u32(float v) {
    if (v < 2147483648.0f || v != v) return (u32)x86_f2i32(v);
    return (u32)x86_f2i32(v - 2147483648.0f) ^ 0x80000000u;
}
__device__ __forceinline__ u64 x86_f2u64(float v) {
    if (v < 9223372036854775808.0f || v != v) return (u64)x86_f2i64(v);
    return (u64)x86_f2i64(v - 9223372036854775808.0f) ^ 0x8000000000000000ull;
}

// to<T>(v): C's (T)v for a compute-type value v (float, c64, an integer, bool)
template <class T, class V> __device__ __forceinline__ T to(V v) {
    if constexpr (is_cplx<V>) {
        if constexpr (is_cplx<T>) return v;
        else if constexpr (is_bool<T>) return v.re != 0.0f || v.im != 0.0f;
        else return to<T>(v.re);  // C: the imaginary part is discarded
    } else if constexpr (is_cplx<T>) {
        c64 r;
        r.re = to<float>(v);
        r.im = 0.0f;
        return r;
    } else if constexpr (is_bool<T>) {
        return v != 0;
    } else if constexpr (is_flt<V> && is_int<T>) {
        if constexpr (sizeof(T) < 4) return (T)x86_f2i32(v);
        else if constexpr (sizeof(T) == 4 && is_sint<T>) return (T)x86_f2i32(v);
        else if constexpr (sizeof(T) == 4) return (T)x86_f2u32(v);
        else if constexpr (is_sint<T>) return (T)x86_f2i64(v);
        else return (T)x86_f2u64(v);
    } else {
        return (T)v;
    }
}

template <class S> __device__ __forceinline__ rt<S> load(const S *p) {
    if constexpr (is_half<S>) {
        if constexpr (same<S, f16>) return h2f(*p);
        else return b2f(*p);
    } else {
        return *p;
    }
}
// MK_STORE_s(p, v): the value converted to the storage type (float for the
// half types, then rounded once)
template <class S, class V> __device__ __forceinline__ void store(S *p, V v) {
    if constexpr (same<S, f16>) *p = f2h(to<float>(v));
    else if constexpr (same<S, bf16>) *p = f2b(to<float>(v));
    else *p = to<S>(v);
}
// rounds a float to the storage type S and back (MLX's ops that round inside)
template <class S> __device__ __forceinline__ float round_to(float v) {
    if constexpr (same<S, f16>) return h2f(f2h(v));
    else if constexpr (same<S, bf16>) return b2f(f2b(v));
    else return v;
}

// ------------------------------------------------------- complex
__device__ __forceinline__ c64 cx(float re, float im) {
    c64 r;
    r.re = re;
    r.im = im;
    return r;
}
__device__ __forceinline__ c64 operator+(c64 a, c64 b) { return cx(a.re + b.re, a.im + b.im); }
__device__ __forceinline__ c64 operator-(c64 a, c64 b) { return cx(a.re - b.re, a.im - b.im); }
__device__ __forceinline__ c64 operator-(c64 a) { return cx(-a.re, -a.im); }
// C's complex product (no contraction), with C Annex G's recovery of
// infinities when both parts come out nan (libgcc's __mulsc3)
__device__ __forceinline__ c64 operator*(c64 x, c64 y) {
    float a = x.re, b = x.im, c = y.re, d = y.im;
    float ac = a * c, bd = b * d, ad = a * d, bc = b * c;
    float re = ac - bd, im = ad + bc;
    if (re != re && im != im) {
        bool recalc = false;
        if (isinf(a) || isinf(b)) {
            a = copysignf(isinf(a) ? 1.0f : 0.0f, a);
            b = copysignf(isinf(b) ? 1.0f : 0.0f, b);
            if (c != c) c = copysignf(0.0f, c);
            if (d != d) d = copysignf(0.0f, d);
            recalc = true;
        }
        if (isinf(c) || isinf(d)) {
            c = copysignf(isinf(c) ? 1.0f : 0.0f, c);
            d = copysignf(isinf(d) ? 1.0f : 0.0f, d);
            if (a != a) a = copysignf(0.0f, a);
            if (b != b) b = copysignf(0.0f, b);
            recalc = true;
        }
        if (!recalc && (isinf(ac) || isinf(bd) || isinf(ad) || isinf(bc))) {
            if (a != a) a = copysignf(0.0f, a);
            if (b != b) b = copysignf(0.0f, b);
            if (c != c) c = copysignf(0.0f, c);
            if (d != d) d = copysignf(0.0f, d);
            recalc = true;
        }
        if (recalc) {
            re = MKC_INF * (a * c - b * d);
            im = MKC_INF * (a * d + b * c);
        }
    }
    return cx(re, im);
}
__device__ __forceinline__ bool operator==(c64 a, c64 b) { return a.re == b.re && a.im == b.im; }
__device__ __forceinline__ bool operator!=(c64 a, c64 b) { return !(a == b); }
__device__ __forceinline__ bool cnan(c64 x) { return x.re != x.re || x.im != x.im; }
__device__ __forceinline__ bool cgt(c64 x, c64 y) { return x.re > y.re || (x.re == y.re && x.im > y.im); }
__device__ __forceinline__ bool cge(c64 x, c64 y) { return x.re > y.re || (x.re == y.re && x.im >= y.im); }

// ------------------------------------------------------- MLX's float math
// csrc/core/mlx_math.h, statement for statement
// 2^f for the fraction f, MLX's degree-6 polynomial
__device__ __forceinline__ float exp2_frac(float f) {
    float p = 1.535336188319500e-4f;
    p = fmaf(p, f, 1.339887440266574e-3f);
    p = fmaf(p, f, 9.618437357674640e-3f);
    p = fmaf(p, f, 5.550332471162809e-2f);
    p = fmaf(p, f, 2.402264791363012e-1f);
    p = fmaf(p, f, 6.931472028550421e-1f);
    return fmaf(p, f, 1.000000000000000f);
}
__device__ __forceinline__ float mlx_exp(float x) {
    float y = x * 1.442695f;
    float yc = y > 200.0f ? 200.0f : y < -200.0f ? -200.0f : y;
    float ipart = rintf(yc);
    ipart += (yc - ipart == 0.5f) ? 1.0f : 0.0f;
    float fpart = yc - ipart;
    float p = exp2_frac(fpart);
    float scale = __uint_as_float((u32)((i32)ipart + 127) << 23);
    float r = scale * p;
    r = x < -88.0f ? 0.0f : r;
    r = x > 88.0f ? MKC_INF : r;
    return x != x ? x : r;
}
__device__ __forceinline__ float mk_tanh(float x) {
    float s = x * x;
    float p = 1.584754879e-03f;
    p = fmaf(p, s, -7.409555077e-03f);
    p = fmaf(p, s, 2.130298962e-02f);
    p = fmaf(p, s, -5.385233123e-02f);
    p = fmaf(p, s, 1.333222102e-01f);
    p = fmaf(p, s, -3.333329736e-01f);
    float small = fmaf(x * s, p, x);
    float a = fabsf(x);
    float y = (2.0f * (a < 9.1f ? a : 9.1f)) * 1.442695f;
    float ipart = rintf(y), f = y - ipart;
    float q = exp2_frac(f);
    float scale = __uint_as_float((u32)((i32)ipart + 127) << 23);
    float big = 1.0f - 2.0f / (scale * q + 1.0f);
    float r = copysignf(a < 0.8f ? small : big, x);
    return x != x ? x : r;
}
#define MKC_SINCOS_MAX 8388608.0f
__device__ __forceinline__ float mlx_sincos_core(float a, bool neg, bool sine) {
    a = a <= MKC_SINCOS_MAX ? a : 0.0f;
    float y = a * 1.27323954473516f;
    u32 e = (u32)(i32)y;
    e = (e + 1) & ~1u;
    y = (float)(i32)e;
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
    u32 poly = e & 2, flip;
    float r;
    if (sine) {
        r = poly ? y1 : y2;
        flip = ((neg ? 4u : 0u) ^ (e & 4)) << 29;
    } else {
        r = poly ? y2 : y1;
        flip = (((e - 2) & 4) ^ 4u) << 29;
    }
    return __uint_as_float(__float_as_uint(r) ^ flip);
}
// beyond 2^23, inf and nan: libm's sinf/cosf on the CPU, CUDA's here (nan:
// quieted, sign dropped, as the CPU's)
__device__ __forceinline__ float mlx_sincos(float x, bool sine) {
    if (fabsf(x) <= MKC_SINCOS_MAX) return mlx_sincos_core(fabsf(x), x < 0, sine);
    if (x != x) return __uint_as_float((__float_as_uint(x) & 0x7fffffffu) | 0x00400000u);
    return sine ? sinf(x) : cosf(x);
}
__device__ __forceinline__ float mlx_erf(float x) {
    float t = 1.0f / fmaf(0.3275911f, fabsf(x), 1.0f);
    float r = fmaf(1.061405429f, t, -1.453152027f);
    r = fmaf(r, t, 1.421413741f);
    r = fmaf(r, t, -0.284496736f);
    r = fmaf(r, t, 0.254829592f);
    float e = -mlx_exp(-x * x);
    float et = e * t;
    float res = fmaf(et, r, 1.0f);
    return x > 0 ? res : -res;
}
__device__ __forceinline__ float mlx_erfinv(float a) {
    float t = logf(fmaf(a, 0.0f - a, 1.0f)), p;
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

// ------------------------------------------------------- unary ops
// u_<name>::ap<S>(x): the CPU's expression for storage type S, x of rt<S>.
// Only the (op, dtype) pairs the CPU has are instantiated (the node exists).
#define MKC_PI 3.14159265358979323846
#define MKC_UNARY(name) struct u_##name { template <class S, class R> static __device__ __forceinline__ auto ap(R x)
#define MKC_END };
#define MKC_NEG_I(x) ((S)(0 - (u64)(x)))
// |x| of a complex: the CPU's cabsf, which is glibc's hypotf: an infinity wins
// over a nan, and finite values give (float)sqrt((double)x*x + (double)y*y) (the
// squares are exact in double; checked against glibc 2.36 on 2e8 random pairs)
__device__ __forceinline__ float glibc_hypotf(float x, float y) {
    if (!isfinite(x) || !isfinite(y)) return isinf(x) || isinf(y) ? MKC_INF : x + y;
    return (float)sqrt((double)x * (double)x + (double)y * (double)y);
}

MKC_UNARY(abs) {
    if constexpr (is_cplx<R>) return glibc_hypotf(x.re, x.im);
    else if constexpr (is_flt<R>) return fabsf(x);
    else if constexpr (is_sint<R>) return (R)(x < 0 ? MKC_NEG_I(x) : x);
    else return x;
} MKC_END
MKC_UNARY(negative) {
    if constexpr (is_cplx<R>) return -x;
    else if constexpr (is_flt<R>) return -x;
    else return (R)MKC_NEG_I(x);
} MKC_END
MKC_UNARY(sign) {
    if constexpr (is_cplx<R>) {
        float a = glibc_hypotf(x.re, x.im);
        if (a == 0) return cx(0.0f, 0.0f);
        if (!isfinite(a)) return cx(__int_as_float(0x7fc00000), __int_as_float(0x7fc00000));
        return cx(x.re / a, x.im / a);
    } else if constexpr (is_flt<R>) return (float)((x > 0) - (x < 0));
    else if constexpr (is_sint<R>) return (R)(x > 0 ? 1 : x < 0 ? -1 : 0);
    else if constexpr (is_bool<R>) return x;
    else return (R)(x > 0);
} MKC_END
MKC_UNARY(square) {
    if constexpr (is_cplx<R> || is_flt<R>) return x * x;
    else if constexpr (is_bool<R>) return x;
    else return (R)((u64)x * (u64)x);
} MKC_END
MKC_UNARY(sqrt) { return sqrtf(x); } MKC_END
MKC_UNARY(rsqrt) { return 1 / sqrtf(x); } MKC_END
MKC_UNARY(reciprocal) { return 1 / x; } MKC_END
MKC_UNARY(exp) {
    if constexpr (is_cplx<R>) {
        float m = expf(x.re);
        if (x.im == 0.0f) return cx(m, x.im);
        float s, c;
        sincosf(x.im, &s, &c);
        return cx(m * c, m * s);
    } else return mlx_exp(x);
} MKC_END
MKC_UNARY(expm1) { return expm1f(x); } MKC_END
MKC_UNARY(log) { return logf(x); } MKC_END
MKC_UNARY(log1p) { return log1pf(x); } MKC_END
MKC_UNARY(log2) { return log2f(x); } MKC_END
MKC_UNARY(log10) { return log10f(x); } MKC_END
MKC_UNARY(sin) { return mlx_sincos(x, true); } MKC_END
MKC_UNARY(cos) { return mlx_sincos(x, false); } MKC_END
MKC_UNARY(tan) { return tanf(x); } MKC_END
MKC_UNARY(arcsin) { return asinf(x); } MKC_END
MKC_UNARY(arccos) { return acosf(x); } MKC_END
MKC_UNARY(arctan) { return atanf(x); } MKC_END
MKC_UNARY(sinh) { return sinhf(x); } MKC_END
MKC_UNARY(cosh) { return coshf(x); } MKC_END
MKC_UNARY(tanh) { return mk_tanh(x); } MKC_END
MKC_UNARY(arcsinh) { return asinhf(x); } MKC_END
MKC_UNARY(arccosh) { return acoshf(x); } MKC_END
MKC_UNARY(arctanh) { return atanhf(x); } MKC_END
MKC_UNARY(sigmoid) {
    float e = round_to<S>(mlx_exp(fabsf(x)));
    float y = 1.0f / (1.0f + e);
    return x < 0 ? y : 1.0f - y;
} MKC_END
MKC_UNARY(erf) { return mlx_erf(x); } MKC_END
MKC_UNARY(erfinv) { return mlx_erfinv(x); } MKC_END
MKC_UNARY(floor) {
    if constexpr (is_flt<R>) return floorf(x);
    else return x;
} MKC_END
MKC_UNARY(ceil) {
    if constexpr (is_flt<R>) return ceilf(x);
    else return x;
} MKC_END
MKC_UNARY(round) {
    if constexpr (is_cplx<R>) return cx(rintf(x.re), rintf(x.im));
    else if constexpr (is_flt<R>) return rintf(x);
    else return x;
} MKC_END
MKC_UNARY(isnan) {
    if constexpr (is_cplx<R>) return cnan(x);
    else if constexpr (is_flt<R>) return x != x;
    else return false;
} MKC_END
MKC_UNARY(isinf) {
    if constexpr (is_cplx<R>) return (bool)(isinf(x.re) || isinf(x.im));
    else if constexpr (is_flt<R>) return (bool)isinf(x);
    else return false;
} MKC_END
MKC_UNARY(isfinite) {
    if constexpr (is_cplx<R>) return (bool)(isfinite(x.re) && isfinite(x.im));
    else if constexpr (is_flt<R>) return (bool)isfinite(x);
    else return true;
} MKC_END
MKC_UNARY(isposinf) {
    if constexpr (is_cplx<R>) return x.re == MKC_INF && x.im == 0;
    else if constexpr (is_flt<R>) return x == MKC_INF;
    else return false;
} MKC_END
MKC_UNARY(isneginf) {
    if constexpr (is_cplx<R>) return x.re == -MKC_INF && x.im == 0;
    else if constexpr (is_flt<R>) return x == -MKC_INF;
    else return false;
} MKC_END
MKC_UNARY(logical_not) { return !x; } MKC_END
MKC_UNARY(bitwise_invert) {
    if constexpr (is_bool<R>) return !x;
    else return (R) ~(u64)x;
} MKC_END
MKC_UNARY(real) {
    if constexpr (is_cplx<R>) return x.re;
    else return x;
} MKC_END
MKC_UNARY(imag) {
    if constexpr (is_cplx<R>) return x.im;
    else return (R)0;
} MKC_END
MKC_UNARY(conjugate) {
    if constexpr (is_cplx<R>) return cx(x.re, -x.im);
    else return x;
} MKC_END
MKC_UNARY(stop_gradient) { return x; } MKC_END
// a constant as the storage type sees it (MLX multiplies by a constant of the
// array's dtype); complex: a full complex product
MKC_UNARY(degrees) {
    if constexpr (is_cplx<R>) return x * cx((float)(180.0 / MKC_PI), 0.0f);
    else return x * round_to<S>((float)(180.0 / MKC_PI));
} MKC_END
MKC_UNARY(radians) {
    if constexpr (is_cplx<R>) return x * cx((float)(MKC_PI / 180.0), 0.0f);
    else return x * round_to<S>((float)(MKC_PI / 180.0));
} MKC_END

// ------------------------------------------------------- binary ops
#define MKC_BINARY(name) struct b_##name { template <class S, class R> static __device__ __forceinline__ auto ap(R x, R y)

__device__ __forceinline__ i64 floordiv_s64(i64 x, i64 y) {
    i64 q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
    return q;
}
__device__ __forceinline__ i64 rem_s64(i64 x, i64 y) {
    if (y == 0) return x;
    if (y == -1) return 0;
    i64 r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}
__device__ __forceinline__ u64 ipow_u(u64 b, u64 e) {
    u64 r = 1;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return r;
}
__device__ __forceinline__ float frem(float x, float y) {
    float r = fmodf(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}
__device__ __forceinline__ float fmaxp(float x, float y) { return x != x ? x : y != y ? y : x > y ? x : y; }
__device__ __forceinline__ float fminp(float x, float y) { return x != x ? x : y != y ? y : x < y ? x : y; }

MKC_BINARY(add) {
    if constexpr (is_cplx<R> || is_flt<R>) return x + y;
    else if constexpr (is_bool<R>) return x || y;
    else return (R)((u64)x + (u64)y);
} MKC_END
MKC_BINARY(subtract) {
    if constexpr (is_cplx<R> || is_flt<R>) return x - y;
    else if constexpr (is_bool<R>) return x != y;
    else return (R)((u64)x - (u64)y);
} MKC_END
MKC_BINARY(multiply) {
    if constexpr (is_cplx<R> || is_flt<R>) return x * y;
    else if constexpr (is_bool<R>) return x && y;
    else return (R)((u64)x * (u64)y);
} MKC_END
MKC_BINARY(divide) { return x / y; } MKC_END
MKC_BINARY(floor_divide) {
    if constexpr (is_flt<R>) return floorf(x / y);
    else if constexpr (is_bool<R>) return x && y;
    else if constexpr (is_sint<R>) return (R)(y == 0 ? 0 : (x == -x && y == -1) ? (i64)x : floordiv_s64(x, y));
    else return (R)(y == 0 ? 0 : x / y);
} MKC_END
MKC_BINARY(remainder) {
    if constexpr (is_flt<R>) return frem(x, y);
    else if constexpr (is_bool<R>) return x && !y;
    else if constexpr (is_sint<R>) return (R)rem_s64(x, y);
    else return (R)(y == 0 ? x : x % y);
} MKC_END
MKC_BINARY(power) {
    if constexpr (is_flt<R>) return powf(x, y);
    else if constexpr (is_bool<R>) return x || !y;
    else if constexpr (is_sint<R>) return (R)(y < 0 ? 0 : (i64)ipow_u((u64)x, (u64)y));
    else return (R)ipow_u(x, y);
} MKC_END
MKC_BINARY(arctan2) { return atan2f(x, y); } MKC_END
// MLX's CPU logaddexp: max + log1p(exp(min - max)); a nan in y wins, then
// one in x; float16/bfloat16 round each step to their type (round_to)
MKC_BINARY(logaddexp) {
    float hi = y != y ? y : x != x ? x : x > y ? x : y;
    float lo = y != y ? y : x != x ? x : x < y ? x : y;
    if (lo == -MKC_INF || hi == MKC_INF) return hi;
    return hi + round_to<S>(log1pf(round_to<S>(mlx_exp(round_to<S>(lo - hi)))));
} MKC_END
MKC_BINARY(maximum) {
    if constexpr (is_cplx<R>) return cnan(x) || cgt(x, y) ? x : y;
    else if constexpr (is_flt<R>) return fmaxp(x, y);
    else if constexpr (is_bool<R>) return x || y;
    else return x > y ? x : y;
} MKC_END
MKC_BINARY(minimum) {
    if constexpr (is_cplx<R>) return cnan(x) || cgt(y, x) ? x : y;
    else if constexpr (is_flt<R>) return fminp(x, y);
    else if constexpr (is_bool<R>) return x && y;
    else return x < y ? x : y;
} MKC_END
MKC_BINARY(equal) { return (bool)(x == y); } MKC_END
MKC_BINARY(not_equal) { return (bool)(x != y); } MKC_END
MKC_BINARY(greater) {
    if constexpr (is_cplx<R>) return cgt(x, y);
    else return (bool)(x > y);
} MKC_END
MKC_BINARY(greater_equal) {
    if constexpr (is_cplx<R>) return cge(x, y);
    else return (bool)(x >= y);
} MKC_END
MKC_BINARY(less) {
    if constexpr (is_cplx<R>) return cgt(y, x);
    else return (bool)(x < y);
} MKC_END
MKC_BINARY(less_equal) {
    if constexpr (is_cplx<R>) return cge(y, x);
    else return (bool)(x <= y);
} MKC_END
MKC_BINARY(logical_and) { return x && y; } MKC_END
MKC_BINARY(logical_or) { return x || y; } MKC_END
MKC_BINARY(bitwise_and) {
    if constexpr (is_bool<R>) return x && y;
    else return (R)(x & y);
} MKC_END
MKC_BINARY(bitwise_or) {
    if constexpr (is_bool<R>) return x || y;
    else return (R)(x | y);
} MKC_END
MKC_BINARY(bitwise_xor) {
    if constexpr (is_bool<R>) return x != y;
    else return (R)(x ^ y);
} MKC_END
#define MKC_SHIFT_OK(y) ((u64)(y) < 8 * sizeof(S))
MKC_BINARY(left_shift) {
    if constexpr (is_sint<R>) return (R)((y >= 0 && MKC_SHIFT_OK(y)) ? (S)((u64)x << y) : 0);
    else return (R)(MKC_SHIFT_OK(y) ? (S)(x << y) : 0);
} MKC_END
MKC_BINARY(right_shift) {
    if constexpr (is_sint<R>) return (R)((y >= 0 && MKC_SHIFT_OK(y)) ? (S)(x >> y) : (x < 0 ? -1 : 0));
    else return (R)(MKC_SHIFT_OK(y) ? (S)(x >> y) : 0);
} MKC_END

// ------------------------------------------------------- element-wise
// The host merges dims (core/iter.c's rules) and passes the shape with each
// operand's strides in elements (operand 0: the output); pointers arrive
// already offset to the first element.
struct ew_args {
    i64 n;
    i32 nd;
    i64 shape[MKC_MAX_NDIM];
    i64 st[4][MKC_MAX_NDIM];
};

template <int N> __device__ __forceinline__ void offsets(const ew_args &a, i64 i, i64 *off) {
    for (int k = 0; k < N; k++) off[k] = 0;
    for (int d = a.nd - 1; d >= 0 && i; d--) {
        i64 s = a.shape[d], c = i % s;
        i /= s;
        for (int k = 0; k < N; k++) off[k] += c * a.st[k][d];
    }
}

#define MKC_GRID_LOOP(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

template <class Op, class SI, class SO> __device__ void unary(const ew_args &a, SO *o, const SI *x) {
    MKC_GRID_LOOP(i, a.n) {
        i64 off[2];
        offsets<2>(a, i, off);
        store(o + off[0], Op::template ap<SI>(load(x + off[1])));
    }
}
template <class Op, class SI, class SO> __device__ void binary(const ew_args &a, SO *o, const SI *x, const SI *y) {
    MKC_GRID_LOOP(i, a.n) {
        i64 off[3];
        offsets<3>(a, i, off);
        store(o + off[0], Op::template ap<SI>(load(x + off[1]), load(y + off[2])));
    }
}
// astype: MK_STORE_out((R_out)MK_LOAD_in(x)), types.c's casts
template <class SI, class SO> __device__ void astype(const ew_args &a, SO *o, const SI *x) {
    MKC_GRID_LOOP(i, a.n) {
        i64 off[2];
        offsets<2>(a, i, off);
        store(o + off[0], to<rt<SO>>(load(x + off[1])));
    }
}
// copies and where move bytes: E is an unsigned type of the element's size
template <class E> __device__ void copy(const ew_args &a, E *o, const E *x) {
    MKC_GRID_LOOP(i, a.n) {
        i64 off[2];
        offsets<2>(a, i, off);
        o[off[0]] = x[off[1]];
    }
}
template <class E> __device__ void where(const ew_args &a, E *o, const u8 *c, const E *x, const E *y) {
    MKC_GRID_LOOP(i, a.n) {
        i64 off[4];
        offsets<4>(a, i, off);
        o[off[0]] = c[off[1]] ? x[off[2]] : y[off[3]];
    }
}

// ------------------------------------------------------- reductions
// ops_reduce.c's accumulators: sum and prod of integers in 32 bits (up to 4
// bytes) or 64, wrapping; float sums in double (the CPU: float lanes into
// double), float products in float; max and min in the compute type, a nan
// winning; all and any in bool.
template <class S> struct sum_acc { typedef u32 type; };
template <> struct sum_acc<u64> { typedef u64 type; };
template <> struct sum_acc<i64> { typedef u64 type; };
template <> struct sum_acc<f16> { typedef double type; };
template <> struct sum_acc<bf16> { typedef double type; };
template <> struct sum_acc<float> { typedef double type; };
template <> struct sum_acc<c64> { typedef c64 type; };
template <class S> struct prod_acc { typedef typename sum_acc<S>::type type; };
template <> struct prod_acc<f16> { typedef float type; };
template <> struct prod_acc<bf16> { typedef float type; };
template <> struct prod_acc<float> { typedef float type; };

// the lane value: (A)(L)load(x), L the lane type (float for float sums)
template <class A, class S> __device__ __forceinline__ A lane(const S *p) {
    if constexpr (same<A, double>) return (double)load(p);
    else return to<A>(load(p));
}

struct r_sum {
    template <class S> using acc = typename sum_acc<S>::type;
    template <class A> static __device__ __forceinline__ A init() {
        if constexpr (is_cplx<A>) return cx(0.0f, 0.0f);
        else return (A)0;
    }
    template <class A> static __device__ __forceinline__ A step(A a, A x) { return a + x; }
};
struct r_prod {
    template <class S> using acc = typename prod_acc<S>::type;
    template <class A> static __device__ __forceinline__ A init() {
        if constexpr (is_cplx<A>) return cx(1.0f, 0.0f);
        else return (A)1;
    }
    template <class A> static __device__ __forceinline__ A step(A a, A x) {
        if constexpr (is_cplx<A>) return a * x;
        else return (A)(a * x);
    }
};
template <class A> __device__ __forceinline__ bool nan_of(A x) {
    if constexpr (is_cplx<A>) return cnan(x);
    else if constexpr (is_flt<A>) return x != x;
    else return false;
}
template <class A> __device__ __forceinline__ bool gt(A x, A y) {
    if constexpr (is_cplx<A>) return cgt(x, y);
    else return x > y;
}
template <class A> __device__ __forceinline__ A lowest() {
    if constexpr (is_cplx<A>) return cx(-MKC_INF, 0.0f);
    else if constexpr (is_flt<A>) return -MKC_INF;
    else if constexpr (is_bool<A>) return false;
    else if constexpr (is_sint<A>) return (A)((u64)1 << (8 * sizeof(A) - 1));
    else return (A)0;
}
template <class A> __device__ __forceinline__ A highest() {
    if constexpr (is_cplx<A>) return cx(MKC_INF, 0.0f);
    else if constexpr (is_flt<A>) return MKC_INF;
    else if constexpr (is_bool<A>) return true;
    else if constexpr (is_sint<A>) return (A)(((u64)1 << (8 * sizeof(A) - 1)) - 1);
    else return (A)~(u64)0;
}
struct r_max {
    template <class S> using acc = rt<S>;
    template <class A> static __device__ __forceinline__ A init() { return lowest<A>(); }
    template <class A> static __device__ __forceinline__ A step(A a, A x) { return (gt(x, a) || nan_of(x)) ? x : a; }
};
struct r_min {
    template <class S> using acc = rt<S>;
    template <class A> static __device__ __forceinline__ A init() { return highest<A>(); }
    template <class A> static __device__ __forceinline__ A step(A a, A x) { return (gt(a, x) || nan_of(x)) ? x : a; }
};
struct r_all {
    template <class S> using acc = bool;
    template <class A> static __device__ __forceinline__ A init() { return true; }
    template <class A> static __device__ __forceinline__ A step(A a, A x) { return a && x; }
};
struct r_any {
    template <class S> using acc = bool;
    template <class A> static __device__ __forceinline__ A init() { return false; }
    template <class A> static __device__ __forceinline__ A step(A a, A x) { return a || x; }
};

// kept dims (in output order) and reduced dims, merged, with the input's
// strides; each output element reduces R elements. A block reduces `chunk`
// of them for one output (nchunk blocks per output); with nchunk > 1 it
// writes an accumulator to `part` for reduce_parts to combine.
struct red_args {
    i64 K, R, chunk;
    i32 nk, nr, nchunk;
    i64 kshape[MKC_MAX_NDIM], kst[MKC_MAX_NDIM];
    i64 rshape[MKC_MAX_NDIM], rst[MKC_MAX_NDIM];
};
__device__ __forceinline__ i64 dim_off(i64 i, int nd, const i64 *shape, const i64 *st) {
    i64 off = 0;
    for (int d = nd - 1; d >= 0 && i; d--) {
        i64 s = shape[d];
        off += (i % s) * st[d];
        i /= s;
    }
    return off;
}

#define MKC_RED_THREADS 256
template <class Op, class S, class SO> __device__ void reduce_blocks(const red_args &a, SO *o, const S *x, void *part) {
    typedef typename Op::template acc<S> A;
    __shared__ A sh[MKC_RED_THREADS];
    for (i64 b = blockIdx.x; b < a.K * a.nchunk; b += gridDim.x) {
        i64 k = b / a.nchunk, c = b % a.nchunk;
        const S *xk = x + dim_off(k, a.nk, a.kshape, a.kst);
        i64 r0 = c * a.chunk, r1 = r0 + a.chunk < a.R ? r0 + a.chunk : a.R;
        A acc = Op::template init<A>();
        for (i64 r = r0 + threadIdx.x; r < r1; r += blockDim.x)
            acc = Op::step(acc, lane<A>(xk + dim_off(r, a.nr, a.rshape, a.rst)));
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) sh[threadIdx.x] = Op::step(sh[threadIdx.x], sh[threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            if (a.nchunk == 1) store(o + k, sh[0]);
            else ((A *)part)[b] = sh[0];
        }
        __syncthreads();
    }
}
// one thread per output: short reductions
template <class Op, class S, class SO> __device__ void reduce_threads(const red_args &a, SO *o, const S *x) {
    typedef typename Op::template acc<S> A;
    MKC_GRID_LOOP(k, a.K) {
        const S *xk = x + dim_off(k, a.nk, a.kshape, a.kst);
        A acc = Op::template init<A>();
        for (i64 r = 0; r < a.R; r++) acc = Op::step(acc, lane<A>(xk + dim_off(r, a.nr, a.rshape, a.rst)));
        store(o + k, acc);
    }
}
template <class Op, class S, class SO> __device__ void reduce_parts(const red_args &a, SO *o, const void *part) {
    typedef typename Op::template acc<S> A;
    MKC_GRID_LOOP(k, a.K) {
        const A *p = (const A *)part + k * a.nchunk;
        A acc = p[0];
        for (int c = 1; c < a.nchunk; c++) acc = Op::step(acc, p[c]);
        store(o + k, acc);
    }
}

// ------------------------------------------------------- mx.fast and softmax
// The evaluators of csrc/core/ops_fast.c (norm, rope, scaled_dot_product_attention)
// and ops_reduce.c's softmax rows (softmax, logsumexp), with the CPU's order of
// operations: every float sum the CPU takes in order is taken in order here too
// (one thread runs it), so results are the CPU's bits; only the row maxima are
// reduced in parallel (max is exact in any order; a nan anywhere stays a nan).
// csrc/backend/cuda/ops_fast.c launches them (docs/design.md, "mx.fast on the GPU").

// ---- rms_norm and layer_norm (ops_fast.c's norm_job and NORM_OUT)
// The CPU takes the norms' two means from mk_sum_row_f32 (ops_reduce.c), mean()'s
// own order, which depends on the problem only (never on the ISA or the thread
// count): the row in P parts (mk_sum_row_parts: 1 unless a few rows are very
// long), each part in blocks of 1024 from its start; a block's first multiple of
// 8 elements in 8 float lanes (lane k takes elements k, k + 8, ...), the lanes
// added in order (lane 0 first), then the block's tail in order, in float; the
// block totals added in order into a double per part, the parts in order into a
// double, rounded to float once. A row of P == 1 shorter than 16 is summed in
// order in double (the reduction's short rows). warp_row_sum takes that order
// with the 32 threads of a warp: a thread per (block, lane), four blocks at a
// time; the lanes and the block totals travel by shuffles, and every thread ends
// with the sum.
#define MKC_FULL_WARP 0xffffffffu
template <class F> __device__ float warp_row_sum(const F &f, i64 n, i64 P) {
    const int l = threadIdx.x & 31, g = l & ~7, k = l & 7;
    if (P == 1 && n < 16) {
        double s = 0.0;
        for (i64 i = 0; i < n; i++) s = s + (double)f(i);
        return (float)s;
    }
    double acc = 0.0;
    for (i64 p = 0; p < P; p++) {
        const i64 r0 = n * p / P, len = n * (p + 1) / P - r0, nb = (len + 1023) / 1024;
        double part = 0.0;
        for (i64 b0 = 0; b0 < nb; b0 += 4) {
            const i64 b = b0 + (l >> 3), s = r0 + b * 1024;
            const i64 m = b < nb ? (len - b * 1024 < 1024 ? len - b * 1024 : 1024) : 0, full = m & ~(i64)7;
            float lane = 0.0f;
            for (i64 i = k; i < full; i += 8) lane = lane + f(s + i);
            float t = __shfl_sync(MKC_FULL_WARP, lane, g);
            for (int j = 1; j < 8; j++) t = t + __shfl_sync(MKC_FULL_WARP, lane, g + j);
            for (i64 i = full; i < m; i++) t = t + f(s + i);
            for (int q = 0; q < 4 && b0 + q < nb; q++) part = part + (double)__shfl_sync(MKC_FULL_WARP, t, 8 * q);
        }
        acc = acc + part;
    }
    return (float)acc;
}
// A warp per row of x (its leading dims merged with their strides, the last dim
// of n elements at stride xst): the mean of x (layer_norm), the mean of the
// terms (x - mean)^2, each rounded to float, then the row's outputs, an element
// per thread.
struct norm_args {
    i64 rows, n, xst, ws, bs, parts;
    i32 nd, layer, has_w, has_b;
    float invn, eps;
    i64 shape[MKC_MAX_NDIM], st[MKC_MAX_NDIM];
};
template <class SX, class SO>
__device__ void fast_norm(const norm_args &a, SO *o, const SX *x, const SO *w, const SO *b) {
    const i64 wpb = blockDim.x / 32;
    for (i64 r = blockIdx.x * wpb + threadIdx.x / 32; r < a.rows; r += gridDim.x * wpb) {
        const SX *xr = x + dim_off(r, a.nd, a.shape, a.st);
        const i64 xst = a.xst;
        float mu = 0.0f;
        if (a.layer) mu = warp_row_sum([&](i64 i) { return (float)load(xr + i * xst); }, a.n, a.parts) * a.invn;
        const float var = warp_row_sum([&](i64 i) {
            const float d = load(xr + i * xst) - mu;
            return d * d;
        }, a.n, a.parts) * a.invn + a.eps;
        const float rs = 1.0f / sqrtf(var);
        SO *orow = o + r * a.n;
        for (i64 i = threadIdx.x & 31; i < a.n; i += 32) {
            float v = (load(xr + i * xst) - mu) * rs;
            if (a.has_w && a.has_b) {
                v = round_to<SO>(v);
                v = round_to<SO>(v * load(w + i * a.ws));
                store(orow + i, v + load(b + i * a.bs));
            } else if (a.has_w) {
                store(orow + i, round_to<SO>(v) * load(w + i * a.ws));
            } else if (a.has_b) {
                store(orow + i, round_to<SO>(v) + load(b + i * a.bs));
            } else {
                store(orow + i, v);
            }
        }
    }
}

// ---- rope (ops_fast.c's rope_angles and ROPE_ROW)
// x's rows as for the norms (T: the second-to-last dim); a thread per (row,
// pair) computes its angle (MLX's exp, sin and cos) and rotates the pair, or
// per (row, feature past dims) copies it.
struct rope_args {
    i64 rows, n, half, T, rows_per_b, noff, xst, offst, fst, work;
    i32 nd, trad, has_freqs, off_u32;
    float coef, scale;
    i64 shape[MKC_MAX_NDIM], st[MKC_MAX_NDIM];
};
template <class S> __device__ void fast_rope(const rope_args &a, S *o, const S *x, const void *off, const float *freqs) {
    const i64 w = a.n - a.half;
    MKC_GRID_LOOP(e, a.work) {
        const i64 r = e / w, j = e - r * w;
        const S *xr = x + dim_off(r, a.nd, a.shape, a.st);
        S *orow = o + r * a.n;
        if (j >= a.half) { // features past dims: copied
            orow[j + a.half] = xr[(j + a.half) * a.xst];
            continue;
        }
        const i64 ob = a.noff > 1 ? r / a.rows_per_b : 0, t = r % a.T;
        const char *po = (const char *)off + ob * a.offst * 4;
        const float ov = a.off_u32 ? (float)*(const u32 *)po : (float)*(const i32 *)po;
        const float pos = ((float)t + ov) * a.scale;
        const float inv = a.has_freqs ? 1.0f / freqs[j * a.fst] : mlx_exp(-(float)j * a.coef);
        const float th = pos * inv;
        const float c = round_to<S>(mlx_sincos(th, false)), z = round_to<S>(mlx_sincos(th, true));
        const i64 i1 = a.trad ? 2 * j : j, i2 = a.trad ? i1 + 1 : j + a.half;
        const float x1 = load(xr + i1 * a.xst), x2 = load(xr + i2 * a.xst);
        store(orow + i1, round_to<S>(x1 * c) - round_to<S>(x2 * z));
        store(orow + i2, round_to<S>(x1 * z) + round_to<S>(x2 * c));
    }
}

// ---- softmax and logsumexp over the last axis (ops_reduce.c's lastax rows)
// A block per row. kind 0: logsumexp, 1: softmax (float sums), 2: float16 /
// bfloat16 softmax without precise (every step rounded to the type, the sum
// in order). The float sums: the row in nparts parts (the CPU's split of a
// few long rows), each part in chunks of 1024 whose exponentials go through 8
// float lanes (lane k takes elements k, k + 8, ...), then the lanes and the
// chunk's tail in order; chunk totals add up in double per part, parts in
// double per row. A thread runs one chunk; thread 0 adds the totals in order.
struct lastax_args {
    i64 rows, n, st;
    i32 nd, nparts, kind;
    i64 shape[MKC_MAX_NDIM], strides[MKC_MAX_NDIM];
};
#define MKC_LA_THREADS 256
#define MKC_LA_CHUNK 1024
__device__ __forceinline__ float max_nan(float m, float v) { return (v > m || v != v) && m == m ? v : m; }
template <class S> __device__ float la_chunk(const S *x, i64 st, i64 b, i64 len, float m) {
    float lane[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    i64 i = 0;
    for (; i + 8 <= len; i += 8)
        for (int k = 0; k < 8; k++) lane[k] = lane[k] + mlx_exp(load(x + (b + i + k) * st) - m);
    float t = 0.0f;
    for (int k = 0; k < 8; k++) t = t + lane[k];
    for (; i < len; i++) t = t + mlx_exp(load(x + (b + i) * st) - m);
    return t;
}
// glibc's expf and logf, which the CPU calls here, are within an ulp of the
// exact values; CUDA's double functions rounded to float are too (the two
// differ only where the exact value lies within an ulp of a rounding tie)
__device__ __forceinline__ float libm_expf(float x) { return (float)exp((double)x); }
__device__ __forceinline__ float libm_logf(float x) { return (float)log((double)x); }
template <class S> __device__ void fast_lastax(const lastax_args &a, S *o, const S *x) {
    __shared__ float sh[MKC_LA_THREADS];
    __shared__ float inv_s;
    const int tid = threadIdx.x;
    for (i64 r = blockIdx.x; r < a.rows; r += gridDim.x) {
        const S *xr = x + dim_off(r, a.nd, a.shape, a.strides);
        float m = -MKC_INF;
        for (i64 i = tid; i < a.n; i += blockDim.x) m = max_nan(m, load(xr + i * a.st));
        sh[tid] = m;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (tid < s) sh[tid] = max_nan(sh[tid], sh[tid + s]);
            __syncthreads();
        }
        m = sh[0];
        __syncthreads();
        S *orow = o + r * a.n;
        if (a.kind == 2) { // SOFTMAX_LOW: t = S(x - m); e = S(expf(t)); sum = S(sum + e) in order
            for (i64 i = tid; i < a.n; i += blockDim.x)
                store(orow + i, libm_expf(round_to<S>(load(xr + i * a.st) - m)));
            __syncthreads();
            if (tid == 0) {
                float sum = 0.0f;
                for (i64 i = 0; i < a.n; i++) sum = round_to<S>(sum + load(orow + i));
                inv_s = round_to<S>(1.0f / sum);
            }
            __syncthreads();
            for (i64 i = tid; i < a.n; i += blockDim.x) store(orow + i, load(orow + i) * inv_s);
            __syncthreads();
            continue;
        }
        double sum = 0.0;
        for (int p = 0; p < a.nparts; p++) {
            const i64 b = a.n * p / a.nparts, len = a.n * (p + 1) / a.nparts - b;
            const i64 nc = (len + MKC_LA_CHUNK - 1) / MKC_LA_CHUNK;
            double pt = 0.0;
            for (i64 c0 = 0; c0 < nc; c0 += blockDim.x) {
                const i64 c = c0 + tid;
                if (c < nc) {
                    const i64 cb = c * MKC_LA_CHUNK;
                    sh[tid] = la_chunk(xr, a.st, b + cb, len - cb < MKC_LA_CHUNK ? len - cb : MKC_LA_CHUNK, m);
                }
                __syncthreads();
                if (tid == 0) {
                    const i64 k1 = nc - c0 < (i64)blockDim.x ? nc - c0 : (i64)blockDim.x;
                    for (i64 k = 0; k < k1; k++) pt = pt + (double)sh[k];
                }
                __syncthreads();
            }
            sum = sum + pt;
        }
        if (a.kind == 0) {
            if (tid == 0) store(o + r, isinf(m) ? m : libm_logf((float)sum) + m);
        } else {
            if (tid == 0) inv_s = (float)(1.0 / sum);
            __syncthreads();
            for (i64 i = tid; i < a.n; i += blockDim.x) store(orow + i, mlx_exp(load(xr + i * a.st) - m) * inv_s);
        }
        __syncthreads();
    }
}

// ---- scaled_dot_product_attention (ops_fast.c's sdpa_block)
// The rows of a kv head g = (b, hk) are its rep * Tq query rows (row m: head
// hk * rep + m / Tq, position m % Tq), in tiles of 64 ("units" u = g * mt +
// tile). A launch takes units [u0, u0 + nu): sdpa_scores writes their scores
// (rounded to S, masked) to P (64 rows of Tk per unit), sdpa_softmax turns
// each row into probabilities, sdpa_pv multiplies them by v. Both products
// are tiled (64 x 64 outputs per block of 256 threads, 4 x 4 per thread) and
// sum each output in order from +0, as the CPU's register tiles do.
struct sdpa_args {
    i64 B, Nq, Nkv, rep, Tq, Tk, D, Dv, M, mt, u0, nu;
    i64 qs[4], ks[4], vs[4], ms[4], sks;
    float scale, lowest;
    i32 causal, mask, sinks; // mask: 0 none, 1 boolean, 2 additive
};
#define MKC_GT 64 // tile rows and columns
#define MKC_GK 16 // the summed dim's step
// acc[i][j] of row ty + 16 i, column tx + 16 j; la(m, k) and lb(k, n) give
// the operands as float (0 outside the tile's valid rows and columns); LB::kfast
// says whether b's elements are contiguous along k (the keys) or along n (v).
template <class LA, class LB> __device__ void gemm_tile(const LA &la, const LB &lb, i64 K, float acc[4][4]) {
    __shared__ float As[MKC_GK][MKC_GT + 1], Bs[MKC_GK][MKC_GT + 1];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (i64 k0 = 0; k0 < K; k0 += MKC_GK) {
        const int kn = K - k0 < MKC_GK ? (int)(K - k0) : MKC_GK;
        for (int e = threadIdx.x; e < MKC_GK * MKC_GT; e += blockDim.x) {
            const int m = e / MKC_GK, ka = e % MKC_GK;
            As[ka][m] = ka < kn ? la(m, k0 + ka) : 0.0f;
            const int n = LB::kfast ? e / MKC_GK : e % MKC_GT, kb = LB::kfast ? e % MKC_GK : e / MKC_GT;
            Bs[kb][n] = kb < kn ? lb(k0 + kb, n) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < kn; kk++) {
            float av[4], bv[4];
            for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i];
            for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = acc[i][j] + av[i] * bv[j];
        }
        __syncthreads();
    }
}
// the unit's kv head and first row; row m's head and position
struct sdpa_unit {
    i64 b, hk, m0, nrows;
    __device__ sdpa_unit(const sdpa_args &a, i64 u) {
        const i64 g = u / a.mt;
        b = g / a.Nkv;
        hk = g % a.Nkv;
        m0 = (u % a.mt) * MKC_GT;
        nrows = a.M - m0 < MKC_GT ? a.M - m0 : MKC_GT;
    }
    __device__ i64 head(const sdpa_args &a, i64 m) const { return hk * a.rep + (m0 + m) / a.Tq; }
    __device__ i64 pos(const sdpa_args &a, i64 m) const { return (m0 + m) % a.Tq; }
};
template <class S> struct sdpa_lq { // scale * q, rounded to S (the CPU's q rows)
    const S *q;
    const i64 *qoff;
    i64 st;
    float sc;
    __device__ float operator()(int m, i64 d) const { return qoff[m] < 0 ? 0.0f : round_to<S>(sc * load(q + qoff[m] + d * st)); }
};
template <class S> struct sdpa_lk { // keys: element (d, j)
    static constexpr bool kfast = true;
    const S *k;
    i64 n0, Tk, sj, sd;
    __device__ float operator()(i64 d, int n) const { return n0 + n < Tk ? load(k + (n0 + n) * sj + d * sd) : 0.0f; }
};
struct sdpa_lp { // probabilities: row m, key j
    const float *p;
    i64 Tk, nrows;
    __device__ float operator()(int m, i64 j) const { return m < nrows ? p[m * Tk + j] : 0.0f; }
};
template <class S> struct sdpa_lv { // values: element (j, e)
    static constexpr bool kfast = false;
    const S *v;
    i64 n0, Dv, sj, se;
    __device__ float operator()(i64 j, int n) const { return n0 + n < Dv ? load(v + j * sj + (n0 + n) * se) : 0.0f; }
};
template <class S>
__device__ void sdpa_scores(const sdpa_args &a, float *P, const S *q, const S *k, const void *mask) {
    __shared__ i64 qoff[MKC_GT];
    const i64 nt = (a.Tk + MKC_GT - 1) / MKC_GT;
    for (i64 bi = blockIdx.x; bi < a.nu * nt; bi += gridDim.x) {
        const i64 lu = bi / nt, n0 = (bi % nt) * MKC_GT;
        const sdpa_unit U(a, a.u0 + lu);
        for (int m = threadIdx.x; m < MKC_GT; m += blockDim.x)
            qoff[m] = m < U.nrows ? U.b * a.qs[0] + U.head(a, m) * a.qs[1] + U.pos(a, m) * a.qs[2] : -1;
        __syncthreads();
        sdpa_lq<S> la{q, qoff, a.qs[3], a.scale};
        sdpa_lk<S> lb{k + U.b * a.ks[0] + U.hk * a.ks[1], n0, a.Tk, a.ks[2], a.ks[3]};
        float acc[4][4];
        gemm_tile(la, lb, a.D, acc);
        const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
        for (int i = 0; i < 4; i++) {
            const int m = ty + 16 * i;
            if (m >= U.nrows) continue;
            const i64 h = U.head(a, m), pi = U.pos(a, m);
            float *prow = P + (lu * MKC_GT + m) * a.Tk;
            for (int jj = 0; jj < 4; jj++) {
                const i64 j = n0 + tx + 16 * jj;
                if (j >= a.Tk) continue;
                float s = round_to<S>(acc[i][jj]);
                if (a.causal) {
                    if (j > pi + a.Tk - a.Tq) s = a.lowest;
                } else if (a.mask) {
                    const i64 mo = U.b * a.ms[0] + h * a.ms[1] + pi * a.ms[2] + j * a.ms[3];
                    if (a.mask == 1) s = ((const u8 *)mask)[mo] ? s : a.lowest;
                    else s = round_to<S>(s + load((const S *)mask + mo));
                }
                prow[j] = s;
            }
        }
        __syncthreads();
    }
}
__device__ __forceinline__ float sdpa_max(float s, float m) { return s != s ? s : s > m ? s : m; }
template <class S> __device__ void sdpa_softmax(const sdpa_args &a, float *P, const S *sinks) {
    __shared__ float sh[MKC_LA_THREADS];
    __shared__ float inv_s;
    const int tid = threadIdx.x;
    for (i64 rr = blockIdx.x; rr < a.nu * MKC_GT; rr += gridDim.x) {
        const sdpa_unit U(a, a.u0 + rr / MKC_GT);
        const i64 m = rr % MKC_GT;
        if (m >= U.nrows) continue; // the whole block skips the row
        float *s = P + rr * a.Tk;
        const float sk = a.sinks ? load(sinks + U.head(a, m) * a.sks) : 0.0f;
        float mx = a.sinks ? sdpa_max(sk, -MKC_INF) : -MKC_INF;
        for (i64 j = tid; j < a.Tk; j += blockDim.x) mx = sdpa_max(s[j], mx);
        sh[tid] = mx;
        __syncthreads();
        for (int st = blockDim.x / 2; st > 0; st >>= 1) {
            if (tid < st) sh[tid] = sdpa_max(sh[tid + st], sh[tid]);
            __syncthreads();
        }
        mx = sh[0];
        for (i64 j = tid; j < a.Tk; j += blockDim.x) s[j] = mlx_exp(s[j] - mx);
        __syncthreads();
        if (tid == 0) { // the CPU's sum: the sink first, then the keys in order
            float sum = 0.0f;
            if (a.sinks) sum = sum + mlx_exp(sk - mx);
            for (i64 j = 0; j < a.Tk; j++) sum = sum + s[j];
            inv_s = 1.0f / sum;
        }
        __syncthreads();
        for (i64 j = tid; j < a.Tk; j += blockDim.x) s[j] = round_to<S>(s[j] * inv_s);
        __syncthreads();
    }
}
template <class S> __device__ void sdpa_pv(const sdpa_args &a, S *o, const float *P, const S *v) {
    const i64 nt = (a.Dv + MKC_GT - 1) / MKC_GT;
    for (i64 bi = blockIdx.x; bi < a.nu * nt; bi += gridDim.x) {
        const i64 lu = bi / nt, n0 = (bi % nt) * MKC_GT;
        const sdpa_unit U(a, a.u0 + lu);
        sdpa_lp la{P + lu * MKC_GT * a.Tk, a.Tk, U.nrows};
        sdpa_lv<S> lb{v + U.b * a.vs[0] + U.hk * a.vs[1], n0, a.Dv, a.vs[2], a.vs[3]};
        float acc[4][4];
        gemm_tile(la, lb, a.Tk, acc);
        const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
        for (int i = 0; i < 4; i++) {
            const int m = ty + 16 * i;
            if (m >= U.nrows) continue;
            S *orow = o + ((U.b * a.Nq + U.head(a, m)) * a.Tq + U.pos(a, m)) * a.Dv;
            for (int jj = 0; jj < 4; jj++) {
                const i64 e = n0 + tx + 16 * jj;
                if (e < a.Dv) store(orow + e, acc[i][jj]);
            }
        }
    }
}

}  // namespace mkc

#endif
