/* mkpy's CUDA back-end: what the compile side (program.c, nvrtc.c) gives the
 * host side (driver.c). No CUDA header is needed to build any of it. */
#ifndef MKB_CUDA_H
#define MKB_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "kernel/kernel.h"

/* The CUDA C++ program of one call (mkpy_cuda.h, the translated kernel with
 * #line markers at the user's lines, the entry point mkpy_cuda_entry of
 * mkpy_cuda_launch.h). Returns a malloc'd string, or NULL with an error set
 * (a RuntimeError for kernels CUDA cannot run yet: os_log/printf). */
char *mkb_cuda_program(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                       const char *kernel_name);

/* For MLX's mx.fast.cuda_kernel as the host (mkpy.cuda.metal_kernel): the
 * `source` (the body of the __global__ function MLX writes) and `header` of
 * one call. MLX's signature names the inputs in0, in1, ... (with MLX's
 * in0_shape, in0_strides, in0_ndim where the body uses them), then a uint32
 * input mkpy_grid holding Metal's grid in threads (the launch does not carry
 * it), and the outputs out0, out1, ...: names of mkpy's choosing, so that
 * MLX's search of the body for `<name>_shape` finds exactly what the call
 * passes. The header is the runtime (mkpy_cuda.h with the headers it includes
 * put in place: MLX's NVRTC has no include path to them), compiled in hosted
 * mode (MKPY_CUDA_HOSTED), and the translated kernel with #line markers at
 * the user's lines, and a declaration of MLX's __global__ function with
 * __launch_bounds__ for the call's threadgroup; the body takes Metal's thread
 * attributes from CUDA's built-ins (mkpy::mlx_thread_attrs) and calls the
 * kernel function. *name is the name to give cuda_kernel: the kernel's and a
 * hash of the program. header may be NULL (then name is not set: only the
 * body, which names the instantiation and the launch bound). Returns 0 with
 * malloc'd strings, or -1 with an error set (a RuntimeError for kernels that
 * print). */
#define MKB_MLX_INPUT_FMT "in%d"
#define MKB_MLX_OUTPUT_FMT "out%d"
#define MKB_MLX_GRID_NAME "mkpy_grid"
int mkb_cuda_mlx_sources(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, char **body,
                         char **header, char **name);

/* A compiled kernel: the CUBIN for one architecture. */
typedef struct {
    unsigned char *cubin; /* malloc'd; free with mkb_cuda_image_free */
    size_t size;
    int sm;  /* e.g. 90 for sm_90 */
    int how; /* MKK_FOUND_IN_MEMORY, MKK_FOUND_ON_DISK or MKK_COMPILED */
} mkb_cuda_image;

/* Compiles the call's program for sm_<sm> with NVRTC, or finds it in the
 * in-memory or disk caches (keyed by the program, the architecture, the math
 * mode and NVRTC's version). Returns 0 and fills *out, or -1 with an error
 * set: a RuntimeError naming the kernel with NVRTC's diagnostics at the
 * user's lines (as the CPU's compile errors), or saying why NVRTC is missing.
 * Thread-safe; no lock is held while NVRTC runs. */
int mkb_cuda_build(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                   const char *kernel_name, int sm, mkb_cuda_image *out);
void mkb_cuda_image_free(mkb_cuda_image *img);

/* NVRTC, loaded once with dlopen: MKPY_NVRTC (a library file or a folder
 * holding one), the wheel `make deps` unpacks into mkpy/_nvrtc/, then the
 * system's libnvrtc.so.13, .12, libnvrtc.so. True when loaded; otherwise why
 * says what was tried. */
bool mkb_nvrtc_available(char *why, size_t n);
/* The loaded library's path and version ("" and 0 when not loaded). */
const char *mkb_nvrtc_path(void);
void mkb_nvrtc_version(int *major, int *minor);
/* Compiles one CUDA C++ source (no #line mapping, no cache) for sm_<sm> with
 * NVRTC and the given options (after -arch): the GPU op kernels' entry
 * (opkern.c). Returns 0 and a malloc'd CUBIN, or -1 with a RuntimeError
 * holding NVRTC's log. */
int mkb_nvrtc_compile_source(const char *source, const char *name, int sm, const char *const *opts, int nopts,
                             unsigned char **cubin, size_t *size);

/* The compile-check mode: MKPY_CUDA_COMPILE_CHECK=sm_80,sm_90 (or
 * mx.cuda.compile_check's scope, mkb_cuda_set_compile_check) makes every
 * metal_kernel the CPU back-end compiles also compile for those
 * architectures with NVRTC; a failure fails the eval with NVRTC's
 * diagnostics. Returns 0 (nothing to check, or every architecture
 * compiled) or -1 with the error set. */
int mkb_cuda_compile_check(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                           const char *kernel_name);
/* Sets this thread's architectures for the mode ("sm_80,sm_90"; NULL or ""
 * for none: the environment variable then applies). Returns the previous
 * value (a malloc'd string or NULL) for the scope to restore, or sets a
 * ValueError and returns (char *)-1 for a malformed list. */
char *mkb_cuda_set_compile_check(const char *archs);

/* mx.fast.cuda_kernel's program (kernel/cuda_kernel.c: MLX's text) for
 * sm_<sm>, compiled as MLX's jit_module.cpp compiles it (NVRTC with
 * --device-as-default-execution-space, sm_XY, sm_XYa from sm_90 on; the
 * include path: mkpy's mlx/backend/cuda/device/utils.cuh, CCCL and the CUDA
 * headers, found as nvrtc.c's cuda_include says), through the caches of
 * mkb_cuda_build. *lowered gets the mangled name of
 * mlx::core::cu::<kernel_name> (malloc'd). Returns 0, or -1 with MLX's
 * error: "Failed to compile kernel: <NVRTC's log>." for a compile error. */
int mkb_cuda_build_user(const char *program, const char *kernel_name, int sm, mkb_cuda_image *out,
                        char **lowered);
/* The back-end's cuda_kernel_eval (user.c). */
int mkb_cuda_user_kernel_eval(mkk_kernel *k, mkk_call *c, mk_array *const *in, mk_array *const *out,
                              const char *program, const char *kernel_name);

/* The back-end's kernel_eval (launch.c): one metal_kernel call on the GPU. */
int mkb_cuda_kernel_eval(mkk_kernel *k, mkk_call *c, mk_array *const *in, mk_array *const *out, const char *generated,
                         const char *kernel_name, const mkk_launch *plan, uint64_t groups);

/* Counters, for tests: compiles, memory hits and disk hits of mkb_cuda_build. */
typedef struct {
    long long compiles, memory_hits, disk_hits;
} mkb_cuda_stats;
void mkb_cuda_cache_info(mkb_cuda_stats *s);

#endif
