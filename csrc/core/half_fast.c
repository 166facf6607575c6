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
