/* A small persistent thread pool (ggml style): a job is a function called as
 * fn(ctx, ith, nth) for every slice ith in [0, nth). Slices are claimed by
 * whichever thread is free, the caller included (pool.c), so one thread may
 * run several slices one after another. Calls from inside a job run inline on
 * the calling thread. */
#ifndef MK_POOL_H
#define MK_POOL_H

#include <stdint.h>

/* A spin-wait hint (a spinning thread yields the core's pipeline). */
#if defined(__x86_64__) || defined(__i386__)
#define mk_cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define mk_cpu_relax() __asm__ __volatile__("yield")
#else
#define mk_cpu_relax() ((void)0)
#endif

typedef void (*mk_job_fn)(void *ctx, int ith, int nth);
typedef void (*mk_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Threads the pool uses (MKPY_NUM_THREADS, else the online cores). */
int mk_pool_threads(void);
/* Runs min(nth, pool threads) slices and waits for all of them. */
void mk_parallel(int nth, mk_job_fn fn, void *ctx);
/* Runs exactly nslices slices, whatever the thread count: for splits that
 * must not depend on MKPY_NUM_THREADS (float sums group terms by slice). */
void mk_parallel_slices(int nslices, mk_job_fn fn, void *ctx);
/* Splits [0, n) into contiguous chunks of at least `grain` items and runs
 * fn(ctx, begin, end) on each, in parallel when there is enough work. */
void mk_parallel_for(int64_t n, int64_t grain, mk_range_fn fn, void *ctx);

/* Interrupts (Ctrl-C, or a kernel that outran MKPY_KERNEL_TIMEOUT): a
 * process-wide counter that mk_interrupt_raise bumps (async-signal-safe).
 * mk_eval notes its value when it starts (mk_interrupt_begin) and long work
 * compares: pool jobs skip their remaining slices, the eval loop fails the
 * primitive that was running, kernels stop between threadgroups. */
void mk_interrupt_raise(void);
void mk_interrupt_begin(void);
/* Whether an interrupt came since this thread's eval began. */
int mk_interrupted(void);
/* The same test for another thread's eval: mark is its mk_interrupt_mark(). */
unsigned mk_interrupt_mark(void);
int mk_interrupted_since(unsigned mark);

#endif
