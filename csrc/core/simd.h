/* Function multiversioning for hot kernels: on x86-64 Linux with GCC, a
 * kernel defined through MK_SIMD_CLONES also gets an AVX2+FMA version
 * (x86-64-v3), picked at each call by mk_isa(): the CPU's level, capped by
 * MKPY_ISA (baseline, avx2 or avx512) so that the tests run every version on
 * one machine (tests/test_isa.py). Baseline x86-64 has no fma instruction, so
 * fmaf there is a slow library call; the v3 version makes it one instruction
 * with the same correctly rounded result. Plain a * b + c is never contracted
 * (-std=c11 turns contraction off), so results do not depend on the version.
 *
 * MK_SIMD_CLONES_512 adds an AVX-512 version (x86-64-v4) for compute-bound
 * float kernels (MLX's exp and what uses it, tanh): 32 vector registers and
 * mask registers remove the spills and blends of the AVX2 loop, measured
 * 3x faster for exp on an Ice Lake server core. The same IEEE operations
 * run in every version, so results do not depend on it either. Memory-bound
 * kernels keep MK_SIMD_CLONES (a third version costs build time for nothing).
 *
 * Use: MK_SIMD_CLONES(static void, name, (params), (args), { body }) defines
 * name_v1 (baseline), name_v3 (and name_v4) and name, which calls the one
 * mk_isa() picks (GCC's target_clones resolves once at load time, where no
 * environment variable can choose). */
#ifndef MK_SIMD_H
#define MK_SIMD_H

#include <stdatomic.h>

/* The instruction-set levels mkpy dispatches on at run time. */
typedef enum { MK_ISA_BASELINE = 1, MK_ISA_AVX2 = 2, MK_ISA_AVX512 = 3 } mk_isa_level;
extern atomic_int mk_isa_cached;
int mk_isa_init(void);
/* The level in use: the CPU's (AVX2 means AVX2, FMA and F16C; AVX-512 means
 * x86-64-v4), lowered by MKPY_ISA=baseline|avx2|avx512. */
static inline int mk_isa(void) {
    int v = atomic_load_explicit(&mk_isa_cached, memory_order_relaxed);
    return v ? v : mk_isa_init();
}

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) && defined(__linux__)
#define MK_HAVE_MULTIVERSION 1
#define MK_TARGET_V3 __attribute__((target("arch=x86-64-v3")))
#define MK_TARGET_V4 __attribute__((target("arch=x86-64-v4")))
#define MK_SIMD_CLONES(decl, name, params, args, ...)                                                  \
    MK_TARGET_V3 decl name##_v3 params __VA_ARGS__                                                     \
    decl name##_v1 params __VA_ARGS__                                                                  \
    decl name params { return (mk_isa() >= MK_ISA_AVX2 ? name##_v3 : name##_v1) args; }
#define MK_SIMD_CLONES_512(decl, name, params, args, ...)                                              \
    MK_TARGET_V4 decl name##_v4 params __VA_ARGS__                                                     \
    MK_TARGET_V3 decl name##_v3 params __VA_ARGS__                                                     \
    decl name##_v1 params __VA_ARGS__                                                                  \
    decl name params {                                                                                 \
        int l_ = mk_isa();                                                                             \
        return (l_ >= MK_ISA_AVX512 ? name##_v4 : l_ >= MK_ISA_AVX2 ? name##_v3 : name##_v1) args;     \
    }
#else
#define MK_SIMD_CLONES(decl, name, params, args, ...) decl name params __VA_ARGS__
#define MK_SIMD_CLONES_512(decl, name, params, args, ...) decl name params __VA_ARGS__
#endif

#endif
