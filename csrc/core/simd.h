/* Function multiversioning for hot kernels: on x86-64 Linux with GCC, a
 * kernel marked MK_SIMD_CLONES also gets an AVX2+FMA version (x86-64-v3),
 * picked once at load time by the CPU's features. Baseline x86-64 has no
 * fma instruction, so fmaf there is a slow library call; the clone makes it
 * one instruction with the same correctly rounded result. Plain a * b + c is
 * never contracted (-std=c11 turns contraction off), so results do not
 * depend on the clone.
 *
 * MK_SIMD_CLONES_512 adds an AVX-512 version (x86-64-v4) for compute-bound
 * float kernels (MLX's exp and what uses it, tanh): 32 vector registers and
 * mask registers remove the spills and blends of the AVX2 loop, measured
 * 3x faster for exp on an Ice Lake server core. The same IEEE operations
 * run in every clone, so results do not depend on it either. Memory-bound
 * kernels keep MK_SIMD_CLONES (a third clone costs build time for nothing). */
#ifndef MK_SIMD_H
#define MK_SIMD_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define MK_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#define MK_SIMD_CLONES_512 __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MK_SIMD_CLONES
#define MK_SIMD_CLONES_512
#endif

#endif
