/* The interface between mkpy's C dispatcher and a compiled kernel. Plain C,
 * shared by csrc/kernel/ and the C++ headers kernels include.
 *
 * A compiled kernel exports:
 *   mkpy_kernel_entry(args, launch)   runs whole threadgroups, thread after thread
 *                                     (kernels without cooperation between threads);
 *   mkpy_kernel_thread(args, launch, group, index)
 *                                     runs one GPU thread: thread `index` (in
 *                                     thread_index_in_threadgroup order) of linear
 *                                     threadgroup `group` (the dispatcher runs each
 *                                     thread of a threadgroup on its own fiber);
 *   mkpy_kernel_set_api(api)          hands it the cooperative runtime (barriers,
 *                                     SIMD-group exchange, threadgroup memory). */
#ifndef MKPY_LAUNCH_H
#define MKPY_LAUNCH_H

#ifdef __CUDACC_RTC__
#include "mkpy_cuda_std.h" /* NVRTC: no system headers */
#else
#include <stddef.h>
#include <stdint.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

struct mkpy_launch {
    uint32_t grid[3];    /* threads per grid, as given to dispatchThreads */
    uint32_t tg[3];      /* threads per threadgroup requested (clamped to grid) */
    uint32_t ngroups[3]; /* threadgroups per grid */
    uint64_t group_begin, group_end; /* linear threadgroup ids this call runs */
};

/* The threads of threadgroup b along one dimension: tg, or fewer for the
 * last, partial threadgroup. In 64 bits: b * tg + tg may pass 2^32 when the
 * grid is near it. Shared by the dispatcher, both cooperative engines and the
 * kernels' own loop (mkpy_dispatch.h). */
static inline uint32_t mkpy_group_extent(uint32_t grid, uint32_t tg, uint64_t b) {
    const uint64_t start = b * tg;
    return start + tg <= grid ? tg : (uint32_t)(grid - start);
}

/* The attributes a kernel reads, one bit each in MLX's order (the index in
 * csrc/kernel/source.c's mkk_attrs): the CPU's jit.c gives run_threadgroups
 * the set of the kernel's and the CUDA program gives it to cuda_thread_attrs,
 * and only those fields are filled (dead ones cost the optimiser ~15% of a
 * small kernel's compile on the CPU, NVVM half of its time on CUDA, even
 * though both remove them). */
enum {
    MKPY_ATTR_DISPATCH_QUADGROUPS_PER_THREADGROUP = 1u << 0,
    MKPY_ATTR_DISPATCH_SIMDGROUPS_PER_THREADGROUP = 1u << 1,
    MKPY_ATTR_DISPATCH_THREADS_PER_THREADGROUP = 1u << 2,
    MKPY_ATTR_GRID_ORIGIN = 1u << 3,
    MKPY_ATTR_GRID_SIZE = 1u << 4,
    MKPY_ATTR_QUADGROUP_INDEX_IN_THREADGROUP = 1u << 5,
    MKPY_ATTR_QUADGROUPS_PER_THREADGROUP = 1u << 6,
    MKPY_ATTR_SIMDGROUP_INDEX_IN_THREADGROUP = 1u << 7,
    MKPY_ATTR_SIMDGROUPS_PER_THREADGROUP = 1u << 8,
    MKPY_ATTR_THREAD_EXECUTION_WIDTH = 1u << 9,
    MKPY_ATTR_THREAD_INDEX_IN_QUADGROUP = 1u << 10,
    MKPY_ATTR_THREAD_INDEX_IN_SIMDGROUP = 1u << 11,
    MKPY_ATTR_THREAD_INDEX_IN_THREADGROUP = 1u << 12,
    MKPY_ATTR_THREAD_POSITION_IN_GRID = 1u << 13,
    MKPY_ATTR_THREAD_POSITION_IN_THREADGROUP = 1u << 14,
    MKPY_ATTR_THREADGROUP_POSITION_IN_GRID = 1u << 15,
    MKPY_ATTR_THREADGROUPS_PER_GRID = 1u << 16,
    MKPY_ATTR_THREADS_PER_GRID = 1u << 17,
    MKPY_ATTR_THREADS_PER_SIMDGROUP = 1u << 18,
    MKPY_ATTR_THREADS_PER_THREADGROUP = 1u << 19,
    MKPY_ATTRS_ALL = (1u << 20) - 1,
    /* filled by launch_attrs and group_attrs_at (mkpy_dispatch.h) */
    MKPY_ATTRS_LAUNCH = MKPY_ATTR_DISPATCH_QUADGROUPS_PER_THREADGROUP | MKPY_ATTR_DISPATCH_SIMDGROUPS_PER_THREADGROUP |
                        MKPY_ATTR_DISPATCH_THREADS_PER_THREADGROUP | MKPY_ATTR_GRID_ORIGIN | MKPY_ATTR_GRID_SIZE |
                        MKPY_ATTR_THREAD_EXECUTION_WIDTH | MKPY_ATTR_THREADGROUPS_PER_GRID | MKPY_ATTR_THREADS_PER_GRID |
                        MKPY_ATTR_THREADS_PER_SIMDGROUP,
    MKPY_ATTRS_GROUP = MKPY_ATTR_QUADGROUPS_PER_THREADGROUP | MKPY_ATTR_SIMDGROUPS_PER_THREADGROUP |
                       MKPY_ATTR_THREADGROUP_POSITION_IN_GRID | MKPY_ATTR_THREADS_PER_THREADGROUP,
};

/* Metal's values of every kernel attribute for one thread (filled by
 * mkpy_dispatch.h on the CPU, by mkpy_cuda.h on a GPU). */
struct mkpy_thread_attrs {
    uint32_t dispatch_threads_per_threadgroup[3], grid_origin[3], grid_size[3], thread_position_in_grid[3],
        thread_position_in_threadgroup[3], threadgroup_position_in_grid[3], threadgroups_per_grid[3],
        threads_per_grid[3], threads_per_threadgroup[3];
    uint32_t dispatch_quadgroups_per_threadgroup, dispatch_simdgroups_per_threadgroup,
        quadgroup_index_in_threadgroup, quadgroups_per_threadgroup, simdgroup_index_in_threadgroup,
        simdgroups_per_threadgroup, thread_execution_width, thread_index_in_quadgroup, thread_index_in_simdgroup,
        thread_index_in_threadgroup, threads_per_simdgroup;
};

/* The bytes one lane may contribute to a SIMD-group exchange (a long4). */
#define MKPY_SIMD_SLOT 32
#define MKPY_SIMD_WIDTH 32
/* The exchange buffer: the values of the lanes that took part (a slot per
 * lane), then a memo slot per lane (a result computed once for a segment of
 * lanes, e.g. a reduction, kept at the segment's first lane), then a uint32
 * mask of the memo slots filled since the release (the runtime clears it). */
#define MKPY_SIMD_MEMO (MKPY_SIMD_WIDTH * MKPY_SIMD_SLOT)
#define MKPY_SIMD_MEMO_VALID (2 * MKPY_SIMD_WIDTH * MKPY_SIMD_SLOT)
#define MKPY_SIMD_BUFFER (2 * MKPY_SIMD_WIDTH * MKPY_SIMD_SLOT + 16)
#define MKPY_MAX_THREADGROUP_MEMORY 32768

/* The cooperative runtime, called by kernel code running on a fiber. */
struct mkpy_coop_api {
    /* threadgroup_barrier / simdgroup_barrier at a source location */
    void (*barrier)(const char *file, int line, int column);
    void (*simd_barrier)(const char *file, int line, int column);
    /* Deposits `size` bytes for this lane at a call site (file, line,
     * column), waits for the lanes of the SIMD-group that take part (the
     * active lanes at that call site), and returns the exchange buffer (see
     * MKPY_SIMD_BUFFER; valid until the caller's next exchange), the mask of
     * lanes that took part and the caller's lane. */
    unsigned char *(*simd_exchange)(const void *value, size_t size, uint32_t *active_mask, uint32_t *lane,
                                    const char *file, int line, int column);
    /* Records a threadgroup variable (address, bytes) the first time each
     * thread meets it; fails the launch past MKPY_MAX_THREADGROUP_MEMORY. */
    void (*threadgroup_alloc)(const void *addr, size_t size, const char *file, int line);
    /* A kernel's os_log/printf message (mkpy_log.h): text of len bytes from
     * thread `thread` of threadgroup `group` of the launch `launch` (its
     * argument array); kept and printed after the launch (diag.c). */
    void (*print)(const char *text, size_t len, const void *launch, uint64_t group, uint32_t thread);
    /* The place of the next runtime point in the program's order (the fiber
     * engine's release order, issue #25): mkpy's compiler pass calls it
     * before every barrier and SIMD-group function with the point's rank in
     * the kernel's control flow once inlined (the lockstep engine's
     * thread-frontier order); with `wait`, the thread waits there as at a
     * SIMD-group function (a loop's latch: the lanes of a SIMD-group start
     * each iteration together). Kernels built without the pass never call it. */
    void (*order)(int rank, int wait);
};

/* The region-splitting engine (csrc/backend/cpu/cbs.c, csrc/backend/cpu/ir/cbs_ir.c).
 * A cooperative kernel compiled through LLVM IR also exports
 *   mkpy_kernel_cbs_run(site, args, launch, group, frame, deposit, simd, masks, next, tg,
 *                       tx, ty, tz, dense)
 *       runs, for every thread i of threadgroup `group` (of tx * ty * tz
 *       threads) with next[i] == site (all of them when `dense`), the thread
 *       from that resume point to its next one, and stores that one in
 *       next[i] (MKPY_CBS_DONE once it returned). Returns the sites the
 *       threads went on to, as bits (bit 63: MKPY_CBS_DONE, or a site >= 63);
 *   mkpy_kernel_cbs_info, a struct mkpy_cbs_info describing the sites.
 * Values a thread keeps across a resume point live in ctx->frame, one array
 * per value with a slot per thread (MKPY_CBS_MAX_THREADS of them). */
#define MKPY_CBS_DONE 0xffffffffu
#define MKPY_CBS_MAX_THREADS 1024
enum { MKPY_CBS_START, MKPY_CBS_BARRIER, MKPY_CBS_SIMD_BARRIER, MKPY_CBS_EXCHANGE, MKPY_CBS_STEP };
struct mkpy_cbs_site {
    uint32_t kind;  /* MKPY_CBS_* */
    uint32_t order; /* release priority: lower first (thread-frontier order) */
    int32_t line, col;
    const char *file;
    /* an exchange whose value a thread keeps in a frame slot: dep_size bytes
     * at frame + dep_off + thread * dep_stride; dep_stride 0: its deposit slot */
    uint32_t dep_off, dep_stride, dep_size;
};
struct mkpy_cbs_info {
    uint32_t nsites;      /* sites[0] is the start */
    uint32_t frame_bytes; /* per thread */
    uint64_t tg_bytes;    /* threadgroup memory the kernel declares */
    int32_t tg_line;      /* the declaration that goes past the limit, if any */
    const char *tg_file;
    const struct mkpy_cbs_site *sites;
    uint64_t tg_alloc; /* bytes of ctx->tg the compiled code uses */
    const char *form;  /* NULL: the per-site run function; else why the compact one (cbs_ir.c) */
};
struct mkpy_cbs_ctx {
    unsigned char *frame;   /* values kept across resume points */
    unsigned char *deposit; /* MKPY_SIMD_SLOT bytes per thread: its exchange value */
    unsigned char *simd;    /* MKPY_SIMD_BUFFER bytes per SIMD-group: the released exchange */
    uint32_t *masks;        /* per SIMD-group: the lanes of the last release */
    unsigned char *tg;      /* the threadgroup's variables */
};
#define MKPY_CBS_RUN_SYMBOL "mkpy_kernel_cbs_run"
#define MKPY_CBS_INFO_SYMBOL "mkpy_kernel_cbs_info"

/* The symbols every compiled kernel exports. */
#define MKPY_ENTRY_SYMBOL "mkpy_kernel_entry"
#define MKPY_THREAD_SYMBOL "mkpy_kernel_thread"
#define MKPY_SET_API_SYMBOL "mkpy_kernel_set_api"

/* The checker mode (MKPY_CHECK=1, mx.metal.set_check; csrc/backend/cpu/check.c).
 * A kernel built for it has every load, store, atomic and integer division
 * of its code instrumented by mkpy-cbs-pass --check (csrc/backend/cpu/ir/check_ir.c)
 * with calls into this table, which the dispatcher hands over through
 * mkpy_kernel_set_check. The instrumented code is one function,
 * mkpy_kernel_check_body(args, attrs, thread); the object exports
 * mkpy_kernel_check_entry (same signature as mkpy_kernel_entry: whole
 * threadgroups, attributes computed incrementally) and
 * mkpy_kernel_check_thread (same signature as mkpy_kernel_thread: one thread,
 * for the fiber engine). Sites are indices into the object's table of
 * "file:line:col" strings (made by the pass), handed over by attach. */
enum { MKPY_CHK_READ = 0, MKPY_CHK_WRITE = 1, MKPY_CHK_ATOMIC = 2 };
/* The running GPU thread, as the instrumented code passes it to every hook. */
/* The records of 64 consecutive elements of an output (check.c). While the
 * block is "affine" (full == NULL, lost == 0), element k was stored once by
 * thread base + k, at one site and barrier epoch, for each bit k of
 * `written`, and nothing else happened to it. */
struct mkpy_check_block {
    uint32_t lock; /* taken when pool threads run groups in parallel */
    uint32_t epoch, site, lost;
    uint64_t written, base;
    void *full; /* the full records, once anything else happened */
};
#define MKPY_CHECK_BLOCK 64
struct mkpy_check_thread {
    uint64_t group;   /* linear threadgroup id */
    uint32_t index;   /* thread_index_in_threadgroup */
    uint32_t epoch;   /* threadgroup barriers the thread has passed */
    void *worker;     /* the checker's state for the calling pool thread (attach) */
    /* What the hooks in the kernel (mkpy_check.h) handle without a call, as
     * the runtime sets them: loads inside two byte ranges (inputs:
     * read-only, nothing to record), and one-element stores into an output
     * [write_lo, write_hi) of 2^write_shift-byte elements while their block
     * stays affine. A thread's id is group * tgmax + index + 1. */
    const char *read_lo[2], *read_hi[2];
    const char *write_lo, *write_hi;
    struct mkpy_check_block *write_blocks;
    uint32_t write_shift, write_locking;
    uint64_t tgmax;
};
struct mkpy_check_api {
    /* an access of `size` bytes at p (flags MKPY_CHK_*) at a source site;
     * tg is the threadgroup variable the pointer was derived from (NULL if
     * none or unknown); t the thread (NULL in code outside
     * mkpy_kernel_check_body: the runtime then finds it). Returns the pointer
     * to use: p, or a scratch block when the access is out of bounds. */
    void *(*access)(void *p, uint64_t size, uint32_t flags, uint32_t site, const void *tg,
                    struct mkpy_check_thread *t);
    /* a threadgroup variable met (bytes, bytes per element, its name as a site) */
    void (*tg_var)(const void *addr, uint64_t size, uint64_t elem, uint32_t name, struct mkpy_check_thread *t);
    /* the thread passed a threadgroup barrier (called only when t is NULL:
     * the hook itself counts t->epoch) */
    void (*barrier)(struct mkpy_check_thread *t);
    /* an integer division: bad is 1 for a zero divisor, 2 for INT_MIN / -1 */
    void (*div)(uint32_t bad, uint32_t site, struct mkpy_check_thread *t);
    /* fills t->worker for the calling pool thread; sites: the object's table */
    void (*attach)(struct mkpy_check_thread *t, const char *const *sites, uint32_t nsites);
};
#define MKPY_SET_CHECK_SYMBOL "mkpy_kernel_set_check"
#define MKPY_CHECK_ENTRY_SYMBOL "mkpy_kernel_check_entry"
#define MKPY_CHECK_THREAD_SYMBOL "mkpy_kernel_check_thread"

#ifdef __cplusplus
}
#endif

#endif
