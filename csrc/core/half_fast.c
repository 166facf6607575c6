/* float16 runs through F16C (half_fast.h). The F16C functions carry a
 * target attribute, so the rest of the build keeps the baseline x86-64 ISA
 * and runs on CPUs without F16C; they are called only after the CPU check. */
#include "half_fast.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define MK_HAVE_F16C_BUILD 1
#endif

#include "mlx_math.h"
#include "simd.h"

atomic_int mk_isa_cached;

/* MKPY_ISA's cap (the highest level when unset or unknown) */
static int isa_cap(void) {
    const char *e = getenv("MKPY_ISA");
    if (!e || !*e) return MK_ISA_AVX512;
    if (!strcmp(e, "baseline")) return MK_ISA_BASELINE;
    if (!strcmp(e, "avx2")) return MK_ISA_AVX2;
    return MK_ISA_AVX512;
}

int mk_isa_init(void) {
    int v = MK_ISA_BASELINE;
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("x86-64-v4"))
        v = MK_ISA_AVX512;
    else if (__builtin_cpu_supports("x86-64-v3"))
        v = MK_ISA_AVX2;
#elif defined(MK_HAVE_F16C_BUILD)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        v = MK_ISA_AVX512;
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        v = MK_ISA_AVX2;
#endif
    int cap = isa_cap();
    if (v > cap) v = cap;
    atomic_store_explicit(&mk_isa_cached, v, memory_order_relaxed);
    return v;
}

static atomic_int f16c_state; /* 0 unknown, 1 off, 2 on */

bool mk_f16c(void) {
    int s = atomic_load_explicit(&f16c_state, memory_order_relaxed);
    if (!s) {
        s = 1;
#ifdef MK_HAVE_F16C_BUILD
        const char *off = getenv("MKPY_NO_F16C");
        __builtin_cpu_init();
        if (!(off && *off && strcmp(off, "0")) && isa_cap() >= MK_ISA_AVX2 && __builtin_cpu_supports("avx") &&
            __builtin_cpu_supports("f16c"))
            s = 2;
#endif
        atomic_store_explicit(&f16c_state, s, memory_order_relaxed);
    }
    return s == 2;
}

#ifdef MK_HAVE_F16C_BUILD
__attribute__((target("avx,f16c"))) static void widen_hw(const mk_f16 *src, int64_t ss, float *dst, int64_t n) {
    int64_t i = 0;
    /* vcvtph2ps quiets a signalling NaN; the software widening keeps it (as
     * MLX's): 8 lanes with any inf or NaN take the software path */
    const __m128i expmask = _mm_set1_epi16(0x7c00);
    if (ss == 0) {
        float v = mk_f16_to_f32(src[0]);
        for (; i < n; i++) dst[i] = v;
        return;
    }
    for (; i + 8 <= n; i += 8) {
        __m128i h = ss == 1 ? _mm_loadu_si128((const __m128i *)(src + i))
                            : _mm_setr_epi16((short)src[i * ss].bits, (short)src[(i + 1) * ss].bits,
                                             (short)src[(i + 2) * ss].bits, (short)src[(i + 3) * ss].bits,
                                             (short)src[(i + 4) * ss].bits, (short)src[(i + 5) * ss].bits,
                                             (short)src[(i + 6) * ss].bits, (short)src[(i + 7) * ss].bits);
        if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, expmask), expmask))) {
            for (int64_t k = i; k < i + 8; k++) dst[k] = mk_f16_to_f32(src[k * ss]);
            continue;
        }
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) dst[i] = mk_f16_to_f32(src[i * ss]);
}

__attribute__((target("avx,f16c"))) static void narrow_hw(const float *src, mk_f16 *dst, int64_t n) {
    int64_t i = 0;
    /* imm 0: round to nearest even, whatever MXCSR says */
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
    if (i < n) {
        float tmp[8] = {0};
        memcpy(tmp, src + i, (size_t)(n - i) * 4);
        uint16_t out[8];
        _mm_storeu_si128((__m128i *)out, _mm256_cvtps_ph(_mm256_loadu_ps(tmp), 0));
        memcpy(dst + i, out, (size_t)(n - i) * 2);
    }
}
#endif

void mk_f16_to_f32_run(const mk_f16 *src, int64_t ss, float *dst, int64_t n) {
#ifdef MK_HAVE_F16C_BUILD
    if (mk_f16c()) {
        widen_hw(src, ss, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = mk_f16_to_f32(src[i * ss]);
}

void mk_f32_to_f16_run(const float *src, mk_f16 *dst, int64_t n) {
#ifdef MK_HAVE_F16C_BUILD
    if (mk_f16c()) {
        narrow_hw(src, dst, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = mk_f32_to_f16(src[i]);
}

/* ---- exp over float16 (mk_f16_exp_run) ----
 * MLX's exp (mk_mlx_expf) on the widened input, rounded to float16, in one
 * pass of registers: no float32 buffer, and fewer instructions per lane than
 * the float32 kernel, which keeps steps that cannot change a float16 result:
 *  - finite inputs only; a vector holding an inf or NaN goes through the
 *    float32 path (exp16_generic), which is what the caller would run;
 *  - the clamp of y = x * log2(e) to [-200, 200] and the selects for
 *    |x| > 88 go: AVX-512's vscalefps(p, n) = p * 2^n saturates to 0 or inf
 *    by itself; on AVX2, y is clamped to [-127, 128], whose ends give the
 *    exponent bits of 0 and of inf, so the result is 0 or inf there as well.
 *  - the move of a tie (y exactly halfway between integers) up: y = x *
 *    log2(e) in float32 is never halfway for a finite float16 x with
 *    |y| <= 200 (every one of them checked), so round-to-nearest-even is
 *    the kernel's rounding.
 * For |x| <= 88 both compute the float32 kernel's value exactly (the same
 * IEEE operations: the multiply, the rounding, six FMAs, the scaling by an
 * exact power of two); beyond, float32's result is below half of float16's
 * smallest subnormal or above its largest finite, and so is this one.
 * tests/test_half_f16c.py compares every float16 input with the software
 * path at each instruction-set level. */
static void exp16_generic(const mk_f16 *src, mk_f16 *dst, int64_t n) {
    float t[16];
    mk_f16_to_f32_run(src, 1, t, n);
    for (int64_t i = 0; i < n; i++) t[i] = mk_mlx_expf(t[i]);
    mk_f32_to_f16_run(t, dst, n);
}

#ifdef MK_HAVE_F16C_BUILD
#define EXP16_POLY(FMA, f, p)                                                                          \
    p = FMA(SET1(MK_EXP_C6), f, SET1(MK_EXP_C5));                                                      \
    p = FMA(p, f, SET1(MK_EXP_C4));                                                                    \
    p = FMA(p, f, SET1(MK_EXP_C3));                                                                    \
    p = FMA(p, f, SET1(MK_EXP_C2));                                                                    \
    p = FMA(p, f, SET1(MK_EXP_C1));                                                                    \
    p = FMA(p, f, SET1(MK_EXP_C0))

#define SET1 _mm512_set1_ps
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) static inline bool
exp16_x16(const mk_f16 *src, mk_f16 *dst) {
    __m256i h = _mm256_loadu_si256((const __m256i *)src);
    const __m256i em = _mm256_set1_epi16(0x7c00);
    if (_mm256_cmpeq_epi16_mask(_mm256_and_si256(h, em), em)) return false;
    __m512 y = _mm512_mul_ps(_mm512_cvtph_ps(h), SET1(MK_EXP_LOG2E));
    __m512 ip = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(y, ip), p;
    EXP16_POLY(_mm512_fmadd_ps, f, p);
    __m512 r = _mm512_scalef_ps(p, ip);
    _mm256_storeu_si256((__m256i *)dst, _mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return true;
}
#undef SET1

#define SET1 _mm256_set1_ps
__attribute__((target("avx2,fma,f16c"))) static inline bool exp16_x8(const mk_f16 *src, mk_f16 *dst) {
    __m128i h = _mm_loadu_si128((const __m128i *)src);
    const __m128i em = _mm_set1_epi16(0x7c00);
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, em), em))) return false;
    __m256 y = _mm256_mul_ps(_mm256_cvtph_ps(h), SET1(MK_EXP_LOG2E));
    y = _mm256_min_ps(_mm256_max_ps(y, SET1(-127.0f)), SET1(128.0f));
    __m256 ip = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(y, ip), p;
    EXP16_POLY(_mm256_fmadd_ps, f, p);
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(ip), _mm256_set1_epi32(127)), 23);
    __m256 r = _mm256_mul_ps(_mm256_castsi256_ps(bits), p);
    _mm_storeu_si128((__m128i *)dst, _mm256_cvtps_ph(r, 0));
    return true;
}
#undef SET1

/* W lanes at a time; the tail through a zero-padded block */
#define EXP16_LOOP(W, BODY)                                                                            \
    {                                                                                                  \
        int64_t i = 0;                                                                                 \
        for (; i + W <= n; i += W)                                                                     \
            if (!BODY(src + i, dst + i)) exp16_generic(src + i, dst + i, W);                           \
        if (i < n) {                                                                                   \
            mk_f16 a[W] = {{0}}, b[W];                                                                 \
            memcpy(a, src + i, (size_t)(n - i) * sizeof *a);                                           \
            if (!BODY(a, b)) exp16_generic(a, b, W);                                                   \
            memcpy(dst + i, b, (size_t)(n - i) * sizeof *b);                                           \
        }                                                                                              \
    }
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))) static void exp16_512(const mk_f16 *src,
                                                                                          mk_f16 *dst, int64_t n)
    EXP16_LOOP(16, exp16_x16)
__attribute__((target("avx2,fma,f16c"))) static void exp16_256(const mk_f16 *src, mk_f16 *dst, int64_t n)
    EXP16_LOOP(8, exp16_x8)
#undef EXP16_LOOP
#endif

bool mk_f16_exp_run(const mk_f16 *src, mk_f16 *dst, int64_t n) {
#ifdef MK_HAVE_F16C_BUILD
    if (mk_f16c()) {
        int isa = mk_isa();
        if (isa >= MK_ISA_AVX512) {
            exp16_512(src, dst, n);
            return true;
        }
        if (isa >= MK_ISA_AVX2) {
            exp16_256(src, dst, n);
            return true;
        }
    }
#endif
    (void)src;
    (void)dst;
    (void)n;
    return false;
}
