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
 * Launch: a one-dimensional block of tg[0] * tg[1] * tg[2] threads and a
 * one-dimensional grid of `count` blocks; block b runs the threadgroup of
 * linear id group_begin + b (x fastest, as Metal's threadgroup_position_in_grid
 * order). A threadgroup at the grid's edge has fewer threads (Metal's
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
    mkpy_u32 pad;
    mkpy_u64 group_begin; /* linear threadgroup id of block 0 of this launch */
};

#define MKPY_CUDA_ENTRY_SYMBOL "mkpy_cuda_entry"

#ifdef __cplusplus
}
#endif

#endif
