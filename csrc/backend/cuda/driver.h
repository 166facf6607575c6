/* The CUDA driver, loaded at run time (driver.c): the process's one context
 * on device 0, device memory for mk_buffer (mk_devmem_ops), and the waits of
 * launches. Pure C; no CUDA header (cuda_api.h). */
#ifndef MKB_CUDA_DRIVER_H
#define MKB_CUDA_DRIVER_H

#include <stdbool.h>

#include "backend/backend.h"
#include "cuda_api.h"

typedef struct {
#define MKB_CUDA_PTR(name, params) CUresult(*name) params;
    MKB_CUDA_FUNCS(MKB_CUDA_PTR)
#undef MKB_CUDA_PTR
} mkb_cuda_api;
extern mkb_cuda_api mkb_cu;

/* Loads libcuda.so.1, initialises it and retains device 0's primary
 * context, once. False (with the reason kept for describe) when any step
 * fails: no library, no device, a driver error. */
bool mkb_cuda_load(void);
/* Why mkb_cuda_load failed ("" when it did not). */
const char *mkb_cuda_why(void);
/* Makes the context current on the calling thread (every entry point of
 * the back-end calls it first). Returns 0 or -1 with an error. */
int mkb_cuda_enter(void);
/* The device's compute capability as one number (sm_90 -> 90). */
int mkb_cuda_sm(void);
/* Bumped by each context reset: what was loaded or allocated in an older
 * generation is gone. */
unsigned mkb_cuda_generation(void);

/* Turns a driver result into 0, or -1 with a RuntimeError "[cuda] <what>:
 * <CUDA_ERROR_...> (<text>)". A fault that leaves the context unusable
 * (an illegal address, a trap, a launch failure) resets it: every device
 * copy made before is lost (reads of arrays that lived only there raise),
 * and the process goes on. */
int mkb_cuda_check(CUresult r, const char *what);
/* True once a fault left the driver unusable in this process (CUDA refuses
 * every later call): GPU streams then run on the CPU back-end. */
bool mkb_cuda_lost(void);

/* Device memory for mk_buffer (core/array.h). */
extern const mk_devmem_ops mkb_cuda_mem;
/* The device address of a buffer that mk_buffer_to_device made valid on
 * the GPU; a copy lost to a context reset is made again from the host copy,
 * or fails (-1, error set) when there is none. */
int mkb_cuda_buffer_ptr(mk_buffer *b, CUdeviceptr *out);
/* Fresh device memory, and its release, for a launch's scratch (shapes,
 * strides). */
int mkb_cuda_scratch(size_t nbytes, CUdeviceptr *out);
void mkb_cuda_scratch_free(CUdeviceptr p, size_t nbytes);

/* Waits for the launched work, polling, so that Ctrl-C (mk_interrupted) and
 * MKPY_KERNEL_TIMEOUT keep their meaning: either one resets the context (a
 * running kernel cannot be stopped otherwise) and fails with MLX's wording.
 * `what` names the work for errors ("kernel `k`"). Returns 0 or -1. */
int mkb_cuda_wait(const char *what, const char *site);
/* The same for metal_kernel `name`'s launch (errors say "Kernel `name`"). */
int mkb_cuda_wait_kernel(const char *name, const char *site);

int mkb_cuda_describe(char *out, size_t n);

/* A kernel input's device address (its offset applied), and its strides in
 * elements: with `dense`, an input that is not row-contiguous is first
 * copied into *copy (a host buffer the caller releases; row strides).
 * 0 or -1 (launch.c). */
int mkb_cuda_input_ptr(const mk_array *x, bool dense, mk_buffer **copy, int64_t *strides, CUdeviceptr *p);
/* init_value: n elements of dtype t at p set to v (launch.c). 0 or -1. */
int mkb_cuda_fill(CUdeviceptr p, mk_dtype t, double v, int64_t n);

/* The device addresses of the claim word and the report for a module's
 * mkpy_cuda_g (mkpy_cuda_launch.h), made once per context. */
struct mkpy_cuda_globals;
struct mkpy_cuda_report;
int mkb_cuda_globals(struct mkpy_cuda_globals *g);
/* After a launch: copies a kernel's report out and clears it (and the claim
 * word) for the next launch; false when there is none. */
bool mkb_cuda_take_report(struct mkpy_cuda_report *out);

#endif
