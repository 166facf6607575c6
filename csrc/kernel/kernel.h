/* Everything behind mx.fast.metal_kernel, in C:
 *
 *   source.c     generates the Metal source exactly as MLX does;
 *   translate.c  turns that Metal source into C++ for the runtime header;
 *   jit.c        compiles it with clang (in-memory and on-disk caches);
 *   dispatch.c   the lazy node: launch checks, the choice of back-end (csrc/backend/),
 *                whose kernel_eval prepares buffers and runs the kernel (backend/cpu/launch.c).
 *
 * No Python here: the binding (csrc/python/py_fast.c) parses arguments into
 * these structures. */
#ifndef MKK_KERNEL_H
#define MKK_KERNEL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/array.h"

#define MKK_NATTRS 20
#define MKK_MAX_BUFFERS 31 /* Metal's buffer argument table */
#define MKK_MAX_CONSTANT_ARRAY_SIZE 8 /* inputs smaller than this go to constant memory */

typedef enum { MKK_MATH_SAFE, MKK_MATH_RELAXED, MKK_MATH_FAST } mkk_math_mode;

/* One of Metal's kernel attributes, in MLX's order. */
typedef struct {
    const char *name;
    const char *type; /* "uint" or "uint3" */
} mkk_attr_info;
extern const mkk_attr_info mkk_attrs[MKK_NATTRS];

/* The generated source of one call signature (dtypes, scalar/constant/device
 * inputs, template values: all that mkk_generate reads of a call), kept per
 * kernel object by dispatch.c so that a repeated call skips generating and
 * hashing it. Immutable once made; freed at its last mkk_memo_release. */
typedef struct mkk_memo {
    atomic_int refs;
    char *generated, *kname;
    uint64_t hash; /* mkk_hash64 of generated: the back-ends' in-memory caches use it */
    size_t sig_len;
    unsigned char sig[]; /* the call signature */
} mkk_memo;
#define MKK_MEMO_N 4 /* signatures kept per kernel object */
void mkk_memo_release(mkk_memo *m);
/* A hash of n bytes, 8 at a time (FNV-1a's byte loop, a multiply's latency
 * per byte, took ~10% of a small kernel's cached call). */
uint64_t mkk_hash64(const char *s, size_t n);

/* What metal_kernel(...) fixes: shared by every call of the kernel object. */
typedef struct {
    atomic_long refcnt;
    char *name;
    int ninputs, noutputs;
    char **input_names;
    char **output_names;
    char *source;
    char *header;
    bool ensure_row_contiguous;
    bool atomic_outputs;
    mkk_math_mode math_mode;
    bool (*shape_info)[3]; /* per input: _shape, _strides, _ndim used in source */
    bool attr_used[MKK_NATTRS];
    atomic_int scheme; /* backend/cpu/launch.c's execution scheme, 0 until first picked */
    bool allow_non_metal; /* compile_options allow_non_metal / MKPY_ALLOW_NON_METAL: no Metal-only checks */
    /* The first construct of the source or header that Metal's compiler
     * rejects (metal_check.c), as "<kernel k source>:3:5: Metal does not
     * support ..."; NULL when none (or allow_non_metal). Raised at eval, where
     * a Mac reports its compile errors. */
    char *metal_error;
    bool prints; /* the source or header uses os_log or printf (mkk_source_prints), set at creation */
    /* the generated source of the last MKK_MEMO_N call signatures (dispatch.c) */
    pthread_mutex_t memo_mu;
    mkk_memo *memo[MKK_MEMO_N];
    unsigned memo_next; /* the slot the next signature replaces */
    /* mx.fast.cuda_kernel (cuda_kernel.c): `source` is the body of a CUDA
     * __global__ function that MLX's CUDA back-end writes; generated source
     * is that CUDA program; it runs on the CUDA back-end only */
    bool cuda;
    int shared_memory; /* cuda_kernel's dynamic shared memory, bytes */
} mkk_kernel;

mkk_kernel *mkk_kernel_new(const char *name, int ninputs, const char *const *input_names, int noutputs,
                           const char *const *output_names, const char *source, const char *header,
                           bool ensure_row_contiguous, bool atomic_outputs, mkk_math_mode math_mode,
                           bool allow_non_metal);

/* mx.fast.cuda_kernel(name, input_names, output_names, source, header,
 * ensure_row_contiguous, shared_memory) (cuda_kernel.c): a kernel whose
 * mkk_generate is MLX's CUDA program (MLX's build_kernel in
 * mlx/backend/cuda/custom_kernel.cpp) and whose node runs on the CUDA
 * back-end's cuda_kernel_eval. NULL with a ValueError for no outputs. */
mkk_kernel *mkk_cuda_kernel_new(const char *name, int ninputs, const char *const *input_names, int noutputs,
                                const char *const *output_names, const char *source, const char *header,
                                bool ensure_row_contiguous, int shared_memory);
/* MLX's dtype_to_cuda_type: the parameter types of the __global__ function. */
const char *mkk_cuda_type(mk_dtype t);

/* Metal-only checks (metal_check.c): scans the user's source and header
 * (comments, string and character literals skipped) for what Metal's
 * compiler rejects: double, goto, function pointers, virtual functions,
 * exceptions, new/delete/malloc/free, printf, #include of anything but
 * Metal's headers, pointers without an address space in function
 * signatures, recursion (a function that calls itself, directly or through
 * others defined in the header), mutable program-scope variables (only
 * `constant` ones are allowed) and more than 32 KiB of threadgroup memory
 * declared in reach of the kernel. Returns a malloc'd message naming the
 * user's file and line, or NULL (also on out-of-memory). */
char *mkk_metal_check(const char *kernel_name, const char *source, const char *header);
void mkk_kernel_incref(mkk_kernel *k);
void mkk_kernel_decref(mkk_kernel *k);

typedef enum { MKK_TARG_DTYPE, MKK_TARG_INT, MKK_TARG_BOOL } mkk_targ_kind;
typedef struct {
    char *name;
    mkk_targ_kind kind;
    int64_t value; /* dtype enum, int or bool */
} mkk_targ;

/* What one call fixes. */
typedef struct {
    int ntemplate;
    mkk_targ *templ;
    mk_dtype *output_dtypes;
    int64_t grid[3], threadgroup[3];
    bool has_init;
    double init_value;
    char *call_site; /* "file.py:42", for error messages */
    bool allow_non_metal; /* copied from the kernel: float64 template types allowed */
    bool verbose;    /* say at eval which engine ran the kernel */
    bool check;      /* the checker mode (check.c): built instrumented, every access checked */
    uint64_t gen_hash; /* set at eval (dispatch.c): mkk_hash64 of the generated source */
} mkk_call;

/* The generated Metal source and kernel name, byte for byte as MLX.
 * Inputs are described by their dtype, ndim and size. Returns 0 or -1. */
int mkk_generate(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, char **source_out,
                 char **name_out);
/* The CUDA program and kernel name (custom_kernel_<name>[_<template values>])
 * of a cuda_kernel call, byte for byte as MLX writes them. 0 or -1. */
int mkk_cuda_generate(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, char **program_out,
                      char **name_out);
/* Where the user's header and source start in the generated text (1-based
 * lines), for mapping compiler diagnostics back. */
typedef struct {
    int header_first, header_lines;
    int source_first, source_lines;
} mkk_linemap;
void mkk_line_map(const mkk_kernel *k, const char *generated, mkk_linemap *map);

/* Translation of generated Metal source to C++ for a target: the CPU's
 * clang (mkpy_metal.h) or NVRTC (mkpy_cuda.h). The result has the same
 * line structure (one output line per input line). Returns a malloc'd string. */
typedef enum { MKK_TARGET_CPU, MKK_TARGET_CUDA } mkk_target;
/* For CUDA the translation numbers each threadgroup_barrier call, in text
 * order, for the divergence check (mkpy_cuda.h); `sites` (may be NULL) gets
 * their byte offsets in msl (offset: malloc'd, or NULL when n is 0). */
typedef struct {
    int n;
    int *offset;
    int ntg;        /* threadgroup variables declared (CUDA: __shared__), in text order */
    int *tg_offset; /* their byte offsets in msl */
} mkk_sites;
char *mkk_translate(const char *msl, mkk_target target, mkk_sites *sites);

/* A back-end's compiler refused the program (set by the one failing; taken,
 * and cleared, by the front end, which then asks the CPU's clang for the
 * diagnostics a Mac would show). */
void mkk_note_compile_error(void);

/* The parts of a kernel's program that every back-end shares (program.c).
 * A growing string; after a failed allocation s is NULL and failed is set. */
typedef struct {
    char *s;
    size_t n, cap;
    bool failed;
} mkk_sbuf;
void mkk_sb(mkk_sbuf *b, const char *text);
void mkk_sbf(mkk_sbuf *b, const char *fmt, ...) MK_PRINTF(2, 3);
/* Appends the translated source (header, MLX's signature, the user's source)
 * with #line markers naming header_file, generated_file and source_file, so
 * that a compiler's line numbers are the user's. For CUDA, `simt` (may be
 * NULL) is set when the text tracks Metal's active mask (mkk_simt_rewrite:
 * the program must define MKPY_SIMT before mkpy_cuda.h). Returns 0 or -1
 * (error set). */
int mkk_program_body(mkk_sbuf *b, const mkk_kernel *k, const char *generated, mkk_target target,
                     const char *header_file, const char *generated_file, const char *source_file, int *nbarriers,
                     int *simt);
/* The CUDA text with Metal's active mask tracked through divergent code
 * (simt.c), for kernels with SIMD-group functions in divergent code or with
 * threadgroup memory and an `else`: 1 and *out (malloc'd), 0 (*out NULL)
 * for kernels that need none, -1 on error. */
int mkk_simt_rewrite(const char *cpp, char **out);
/* Where barrier site `i` of the CUDA translation is in the user's terms:
 * "<kernel NAME source>" (or header, signature), line and column; file is
 * written into a buffer of fn bytes. Returns 0, or -1 when i is no site. */
int mkk_barrier_site(const mkk_kernel *k, const char *generated, int i, char *file, size_t fn, int *line, int *col);
/* 1 when the CUDA program of `generated` tracks Metal's active mask (its
 * shared memory then holds MKPY_SIMT words of mkpy's own), 0 if not, -1 when
 * out of memory (no error left set). */
int mkk_cuda_simt(const char *generated);
/* "<kernel NAME source>:3, <kernel NAME source>:4": where the kernel declares
 * threadgroup memory (for errors about its size); "" when nowhere. */
void mkk_threadgroup_sites(const mkk_kernel *k, const char *generated, char *out, size_t n);
/* The call of the kernel function for one thread, whose attributes are in
 * `t` (an mkpy_thread_attrs), ending in ";\n": `name<targs>(args...)`. Argument
 * i is written with arg_fmt ("args[%d]" on the CPU, "a%d" for CUDA); one per
 * entry of the launch's argument array (mkk_nargs of them), in its order.
 * *readonly_args (if not NULL) gets how many leading ones are inputs.
 * Returns a malloc'd string or NULL (error set). */
char *mkk_call_expr(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *kernel_name,
                    const char *arg_fmt, int *readonly_args);
int mkk_nargs(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs);

/* A compiled kernel entry point (mkpy_launch.h is shared with the runtime header). */
#include "../../mkpy/include/mkpy_launch.h"
typedef struct mkpy_launch mkk_launch;
typedef void (*mkk_entry_fn)(void *const *args, const mkk_launch *launch);
typedef void (*mkk_thread_fn)(void *const *args, const mkk_launch *launch, uint64_t group, unsigned index);
typedef uint64_t (*mkk_cbs_run_fn)(uint32_t site, void *const *args, const mkk_launch *launch, uint64_t group,
                               unsigned char *frame, unsigned char *deposit, unsigned char *simd, uint32_t *masks,
                               uint32_t *next, unsigned char *tg, uint32_t tx, uint32_t ty, uint32_t tz,
                               uint32_t dense);
/* Metal's launch rules, checked in 64 bits before any use: every grid and
 * threadgroup entry positive, grid entries below 2^32, at most 1024 threads
 * per threadgroup (the product is overflow-checked). Fills L's grid, tg
 * (clamped to the grid, as MLX does) and ngroups, and *total (threadgroups in
 * the launch), or sets a ValueError and returns -1. */
int mkk_plan_launch(const char *kernel_name, const int64_t grid[3], const int64_t threadgroup[3], mkk_launch *L,
                    uint64_t *total);

/* The checks of one call that a Mac makes when the kernel is built and
 * dispatched: a construct Metal's compiler rejects (k->metal_error), Metal's
 * launch rules (mkk_plan_launch, filling *plan and *total) and the 31 entries
 * of Metal's buffer table. Inputs are read for their ndim only. Returns 0, or
 * -1 with a RuntimeError or ValueError naming the kernel. */
int mkk_check_call(const mkk_kernel *k, const mkk_call *c, mk_array *const *in, mkk_launch *plan, uint64_t *total);

typedef struct {
    mkk_entry_fn entry;   /* whole threadgroups, thread after thread */
    mkk_thread_fn thread; /* one thread, for the cooperative scheme on fibers */
    /* the lockstep engine (cbs.c), when the region-splitting pass took the
     * kernel; NULL otherwise */
    mkk_cbs_run_fn cbs_run;
    const struct mkpy_cbs_info *cbs_info;
    const char *cbs_declined; /* why the pass did not take it, when known (owned by the cache) */
    void *ref;                /* the cache entry this launch holds loaded (mkk_jit_release) */
    bool checked;             /* built for the checker mode: `entry` is mkpy_kernel_check_entry */
    const char *so_path;      /* the object on disk; its sources are beside it, .metal and .cpp (owned by the cache) */
    int how;                  /* MKK_FOUND_IN_MEMORY, MKK_FOUND_ON_DISK or MKK_COMPILED */
} mkk_compiled;

/* Did mkk_jit give a kernel? (A plain kernel has only `entry`; a cooperative
 * one `thread` for fibers or `cbs_run` for the lockstep engine.) */
static inline bool mkk_compiled_ok(const mkk_compiled *fn) { return fn->entry || fn->thread || fn->cbs_run; }
enum { MKK_FOUND_IN_MEMORY, MKK_FOUND_ON_DISK, MKK_COMPILED };
/* threadgroup_barrier calls in the kernel's source and header (the profile's column). */
int mkk_count_barriers(const mkk_kernel *k);
/* How a lookup found the kernel's code, in the profile's words. */
static inline const char *mkk_profile_cache_word(int how) {
    return how == MKK_FOUND_IN_MEMORY ? "memory" : how == MKK_FOUND_ON_DISK ? "disk" : "compiled";
}

/* Where the kernel layer's messages go (the binding prints them on Python's
 * sys.stdout); mkk_report formats one and hands it over. */
void mkk_set_reporter(void (*fn)(const char *text));

/* Starts the kernel watchdog thread (Ctrl-C and MKPY_KERNEL_TIMEOUT, see
 * backend/cpu/launch.c) if it is not running; launches start it too. */
void mkk_watchdog_start(void);
void mkk_report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Is the kernel cooperative (threadgroup memory, barriers, SIMD-group
 * functions)? Decided once from its source (backend/cpu/launch.c). */
bool mkk_is_cooperative(mkk_kernel *k);
/* "plain", "lockstep" or "fibers": the engine that runs the kernel. */
const char *mkk_engine_name(mkk_kernel *k, const mkk_compiled *fn);

/* Compiles (or finds in the caches) the kernel for this generated source.
 * On failure (entry NULL) sets a RuntimeError naming the kernel with mapped
 * diagnostics. On success the kernel stays loaded until mkk_jit_release:
 * call it once the launch is over. No lock is held while a compiler runs. */
mkk_compiled mkk_jit(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                     const char *kernel_name);
void mkk_jit_release(mkk_compiled *fn);

/* Counters for tests: in-memory hits, disk hits, compiles, kernels in the
 * in-memory table, and how many of them are loaded now. */
typedef struct {
    int64_t memory_hits, disk_hits, compiles, entries, loaded;
} mkk_cache_stats;
void mkk_cache_info(mkk_cache_stats *s);
void mkk_cache_clear_memory(void);

/* The disk cache: its folder, size, entries, the hits and misses every
 * process counted there, and its cap. With clear, its files are removed
 * first. Returns 0, or -1 with an error set. */
typedef struct {
    char dir[4400];
    int64_t bytes, entries, hits, misses, max_bytes;
} mkk_disk_info;
int mkk_disk_cache(bool clear, mkk_disk_info *info);

/* Where the kernel layer's warnings go (the binding makes them Python
 * warnings; stderr without one). Called without the GIL held or with it. */
void mkk_set_warner(void (*fn)(const char *text));
void mkk_set_runtime_dir(const char *dir);
/* Builds the precompiled runtime headers of the three math modes into
 * <runtime dir>/pch (make build calls it), so that the first kernel of a
 * process compiles as fast as later ones. Returns 0 or -1, with a message. */
int mkk_prepare(char *msg, size_t n);
const char *mkk_runtime_dir(void);

/* The lazy node for one call: fills outs[noutputs] with new references.
 * Takes ownership of `call` (also on failure). Returns 0 or -1. */
int mkk_make_outputs(mkk_kernel *k, mkk_call *call, mk_array *const *inputs, const int *out_ndims,
                     const int64_t (*out_shapes)[MK_MAX_NDIM], mk_array **outs);

void mkk_call_free(mkk_call *c);

/* MKPY_GPU_PARITY's check is under way on this thread (dispatch.c): outputs
 * without init_value start as MKK_PARITY_BYTE on both back-ends. */
bool mkk_parity_fill(void);
#define MKK_PARITY_BYTE 0xA5


/* A metal_kernel node's kernel and call (borrowed), for export_function
 * (xkernel.c); false for any other node. */
bool mkk_node_params(const mk_prim *p, mkk_kernel **k, mkk_call **c);

#endif
