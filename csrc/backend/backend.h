/* The back-end interface (docs/design.md, "Back-ends").
 *
 * One front end (csrc/core/ for ops, csrc/kernel/ for metal_kernel) and one
 * folder per device behind this table, as ggml's back-ends and MLX's
 * backend/cpu and backend/cuda:
 *   cpu/   the CPU: clang JIT and its caches, the plain loop, the lockstep and
 *          fiber engines, the checker runtime (today's engine; its memory is
 *          the host's, so it has no `mem`);
 *   cuda/  an NVIDIA GPU: the CUDA driver and NVRTC loaded with dlopen at run
 *          time, device memory, NVRTC programs, launches, GPU op evaluators.
 * A third back-end is a folder and one more table. Pure C: no Python.h. */
#ifndef MKB_BACKEND_H
#define MKB_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/array.h"
#include "core/stream.h"
#include "kernel/kernel.h"

typedef struct mkb_backend {
    const char *name; /* "cpu", "cuda" */
    /* Loads what it needs the first time (cheap after); false where the
     * device or its libraries are missing. */
    bool (*available)(void);
    /* Lines for `python -m mkpy`: the device, driver and compiler, or why
     * the back-end is not available. Returns the length written. */
    int (*describe)(char *out, size_t n);
    /* The device's memory (NULL: the host's). */
    const mk_devmem_ops *mem;
    /* The back-end's evaluator for a primitive, or NULL when it has none
     * (the op then runs on the CPU, with one copy each way). */
    mk_eval_fn (*op_eval)(const mk_prim *p);
    /* One metal_kernel call, after the front end's checks: its generated
     * Metal source and kernel name, and the checked launch plan. Fills the
     * outputs. Returns 0, or -1 with an error naming the kernel and the
     * user's call site. */
    int (*kernel_eval)(mkk_kernel *k, mkk_call *c, mk_array *const *in, mk_array *const *out, const char *generated,
                       const char *kernel_name, const mkk_launch *plan, uint64_t groups);
    /* Compiles a call's program without running it: 0, or -1 with the compile
     * error (the CPU's: clang's diagnostics, the words Metal's compiler uses). */
    int (*kernel_compile)(mkk_kernel *k, mkk_call *c, mk_array *const *in, const char *generated,
                          const char *kernel_name);
    /* One mx.fast.cuda_kernel call (NULL: the back-end cannot run CUDA):
     * MLX's CUDA program of the call (kernel/cuda_kernel.c) and its
     * __global__ function's name, compiled, launched as MLX launches it
     * (blocks of min(threadgroup, grid), ceil(grid / threadgroup) of them),
     * outputs filled. Returns 0, or -1 with MLX's error. */
    int (*cuda_kernel_eval)(mkk_kernel *k, mkk_call *c, mk_array *const *in, mk_array *const *out,
                            const char *program, const char *kernel_name);
    /* Waits for the device's queued work. Returns 0 or -1 with an error. */
    int (*synchronize)(void);
    /* True once the device cannot be used any more in this process (NULL:
     * never): its nodes then run on the CPU back-end. */
    bool (*lost)(void);
} mkb_backend;

extern const mkb_backend mkb_cpu_backend;
extern const mkb_backend mkb_cuda_backend;

/* The back-end that runs nodes made on a stream of this device type: the
 * GPU back-end for MK_GPU when one is available and MKPY_GPU is not "cpu",
 * else the CPU's. The first call for MK_GPU picks, once per process, and
 * installs mk_gpu_evaluator. */
const mkb_backend *mkb_for_device(mk_device_type d);
/* The active GPU back-end, or NULL (the CPU serves GPU streams). */
const mkb_backend *mkb_gpu(void);
/* Every back-end compiled in, NULL-terminated (python -m mkpy lists them). */
extern const mkb_backend *const mkb_all[];

#endif
