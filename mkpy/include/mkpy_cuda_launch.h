/* The interface between mkpy's CUDA back-end (csrc/backend/cuda/) and a kernel
 * compiled by NVRTC. Plain C, shared by the host code and mkpy_cuda.h.
 *
 * A CUDA program made from a metal_kernel exports one entry point,
 *   extern "C" __global__ void mkpy_cuda_entry(const struct mkpy_cuda_launch L,
 *                                              void *a0, void *a1, ...)
 * with one pointer per entry of the CPU back-end's argument array, in the same
 * order (inputs; per input with ndim > 0 its _shape, _strides and _ndim as
 * used by the source; outputs). Every pointer is device memory: a 0-d input,
 * a shape array or an ndim value included.
 *
 * Launch: a one-dimensional block of tg[0] * tg[1] * tg[2] threads per
 * threadgroup, in a three-dimensional grid of blocks: block (x, y, z) runs
 * threadgroup origin + (x, y, z), so the hardware gives each block its
 * threadgroup's position (no division); a dispatch with more groups than one
 * launch takes (2^31 - 1 along x, 65535 along y and z) is several launches.
 * A threadgroup at the grid's edge has fewer threads (Metal's
 * non-uniform threadgroups, mkpy_group_extent): the CUDA threads of the block
 * past its extent return before the kernel runs; the others take Metal's
 * thread_position_in_threadgroup from their linear index in the *actual*
 * extent, so SIMD-groups (warps) hold the same threads as on a Mac. */
#ifndef MKPY_CUDA_LAUNCH_H
#define MKPY_CUDA_LAUNCH_H

#ifdef __CUDACC_RTC__
typedef unsigned int mkpy_u32;
typedef unsigned long long mkpy_u64;
#else
#include <stdint.h>
typedef uint32_t mkpy_u32;
typedef uint64_t mkpy_u64;
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct mkpy_cuda_launch {
    mkpy_u32 grid[3];    /* threads per grid, as given to dispatchThreads */
    mkpy_u32 tg[3];      /* threads per threadgroup requested (clamped to the grid) */
    mkpy_u32 ngroups[3]; /* threadgroups per grid */
    mkpy_u32 origin[3];  /* the threadgroup of block (0, 0, 0) of this launch */
    mkpy_u32 edge[3];    /* threads of the last threadgroup along each dimension (tg where it divides the grid) */
    /* Division of a thread's index in its threadgroup without a divide routine
     * (mkpy_cuda_divider): by the threadgroup's width (MKPY_CUDA_DIV_X + 1 at
     * the x edge) and by its width times its height (MKPY_CUDA_DIV_XY + 1 at
     * the x edge, + 2 at the y edge). */
    mkpy_u32 div_mul[6];
    mkpy_u32 div_shift[6]; /* the two shifts, the first in bits 0-7, the second in 8-15 */
    /* MKPY_CUDA_WHOLE: every threadgroup of the dispatch is whole (the grid a multiple of the
     * threadgroup along each dimension): the prologue needs no extents, no selects and no early
     * exit. MKPY_CUDA_ROW: one-row threadgroups (tg[1] = tg[2] = 1): no division. */
    mkpy_u32 shape;
};
#define MKPY_CUDA_WHOLE 1u
#define MKPY_CUDA_ROW 2u
#define MKPY_CUDA_DIV_X 0
#define MKPY_CUDA_DIV_XY 2

/* n / d for every 32-bit n as ((hi + ((n - hi) >> s1)) >> s2), hi = the high
 * word of mul * n (Granlund and Montgomery's round-up method): with
 * l = ceil(log2 d), mul = floor(2^32 (2^l - d) / d) + 1, s1 = min(l, 1),
 * s2 = max(l - 1, 0). d = 0 (an unused slot) gives mul = 0 and n. */
static inline void mkpy_cuda_divider(mkpy_u32 d, mkpy_u32 *mul, mkpy_u32 *shift) {
    unsigned l = 0;
    while (l < 32 && ((mkpy_u64)1 << l) < d) l++;
    *mul = d ? (mkpy_u32)((((mkpy_u64)1 << 32) * (((mkpy_u64)1 << l) - d)) / d + 1) : 0;
    *shift = (l < 1 ? l : 1) | (l > 1 ? l - 1 : 0) << 8;
}

#ifndef __CUDACC_RTC__
/* The launch struct of a dispatch of grid[3] threads in threadgroups of tg[3] (clamped to the
 * grid), ngroups[3] of them; origin 0 (the host sets it per launch). */
static inline void mkpy_cuda_launch_fill(struct mkpy_cuda_launch *L, const mkpy_u32 grid[3], const mkpy_u32 tg[3],
                                         const mkpy_u32 ngroups[3]) {
    L->shape = 0;
    for (int d = 0; d < 3; d++) {
        L->origin[d] = 0;
        L->grid[d] = grid[d];
        L->tg[d] = tg[d];
        L->ngroups[d] = ngroups[d];
        L->edge[d] = grid[d] - (ngroups[d] - 1) * tg[d];
    }
    const mkpy_u32 divisors[6] = {tg[0], L->edge[0], tg[0] * tg[1], L->edge[0] * tg[1], tg[0] * L->edge[1],
                                  L->edge[0] * L->edge[1]};
    for (int i = 0; i < 6; i++) mkpy_cuda_divider(divisors[i], &L->div_mul[i], &L->div_shift[i]);
    /* the prologue's short paths (mkpy_cuda.h's cuda_thread_attrs) */
    if (L->edge[0] == tg[0] && L->edge[1] == tg[1] && L->edge[2] == tg[2]) L->shape |= MKPY_CUDA_WHOLE;
    if (tg[1] == 1 && tg[2] == 1) L->shape |= MKPY_CUDA_ROW;
}
#endif

#define MKPY_CUDA_ENTRY_SYMBOL "mkpy_cuda_entry"

/* What a running kernel reaches outside its arguments: one __constant__
 * struct per module (MKPY_CUDA_GLOBALS_SYMBOL), written by the host when the
 * module is loaded. `claim` is a device word that the first thread to report
 * a problem takes (atomicCAS); `report` is the device address of host memory
 * (mapped, pinned) that it fills, read by the host after the launch. 0 in
 * both (a program run outside mkpy's launch) turns reports off. */
struct mkpy_cuda_globals {
    mkpy_u64 claim, report;
};
#define MKPY_CUDA_GLOBALS_SYMBOL "mkpy_cuda_g"

/* A report: `code` is written last (after a system fence), so a nonzero code
 * means the rest is there. Barrier divergence: the two threadgroup_barrier
 * call sites (numbered by the translation, in text order) and the group. */
struct mkpy_cuda_report {
    mkpy_u32 code;
    mkpy_u32 site[2];
    mkpy_u32 pad;
    mkpy_u64 group;
};
#define MKPY_CUDA_REPORT_BARRIERS 1u

#ifdef __cplusplus
}
#endif

#endif
