/* Cooperative threadgroups: every GPU thread of a threadgroup runs on its own
 * fiber of one worker, and a small scheduler switches between them.
 *
 *   - A barrier parks the thread. When every live thread is parked at the
 *     same barrier (same source file and line), all resume. Threads that
 *     returned count as arrived. Parked at different barriers: divergence,
 *     reported with both lines, never a hang.
 *   - A SIMD-group function deposits the lane's value in its SIMD-group's
 *     slots and parks; when every live lane of that SIMD-group is parked in
 *     an exchange, they resume and each computes its result from the slots.
 *     Slots alternate between two buffers so a fast lane cannot overwrite
 *     values a slow lane is still reading.
 *   - Threadgroup variables are `static thread_local` in the compiled code,
 *     so the fibers of a worker share them; their sizes are recorded to
 *     enforce Metal's 32 KiB limit.
 * Any state with no runnable thread and no release is a deadlock and becomes
 * an error naming where the threads wait. */
#include "coop.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREAD_STACK (128u << 10)
#define MAX_SIMDGROUPS (1024 / MKPY_SIMD_WIDTH)
#define MAX_TG_VARS 64

enum { RUNNING, AT_BARRIER, AT_SIMD, DONE };

typedef struct {
    mk_fiber f;
    int state;
    const char *file;
    int line;
    unsigned parity; /* exchange buffer this lane is waiting on */
} coop_thread;

typedef struct {
    coop_thread *threads;
    int nthreads; /* fibers with stacks */
    void *sched_sp;
    int current;
    /* the group being run */
    const coop_kernel *kernel;
    const mkk_launch *launch;
    uint64_t group;
    unsigned count;
    unsigned gen[MAX_SIMDGROUPS];
    uint32_t mask[MAX_SIMDGROUPS][2];
    unsigned char slots[MAX_SIMDGROUPS][2][MKPY_SIMD_WIDTH * MKPY_SIMD_SLOT];
    const void *tg_addr[MAX_TG_VARS];
    int ntg;
    size_t tg_bytes;
    int failed;
    char error[1024];
} coop_worker;

static _Thread_local coop_worker *worker;

static void park(coop_thread *t) { mk_fiber_switch(&t->f.sp, worker->sched_sp); }

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    if (!worker->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(worker->error, sizeof worker->error, fmt, ap);
        va_end(ap);
    }
    worker->failed = 1;
}

/* ------------------------------------------------------- the runtime API */

static void api_barrier(const char *file, int line) {
    coop_thread *t = &worker->threads[worker->current];
    t->state = AT_BARRIER;
    t->file = file;
    t->line = line;
    park(t);
}

static const unsigned char *api_exchange(const void *value, size_t size, uint32_t *mask, uint32_t *lane) {
    coop_worker *w = worker;
    unsigned idx = (unsigned)w->current;
    unsigned sg = idx / MKPY_SIMD_WIDTH;
    coop_thread *t = &w->threads[idx];
    t->parity = w->gen[sg] & 1u;
    *lane = idx % MKPY_SIMD_WIDTH;
    if (size > MKPY_SIMD_SLOT) size = MKPY_SIMD_SLOT;
    memcpy(w->slots[sg][t->parity] + *lane * MKPY_SIMD_SLOT, value, size);
    t->state = AT_SIMD;
    park(t);
    *mask = w->mask[sg][t->parity];
    return w->slots[sg][t->parity];
}

static void api_simd_barrier(const char *file, int line) {
    uint32_t mask, lane;
    coop_thread *t = &worker->threads[worker->current];
    t->file = file;
    t->line = line;
    api_exchange("", 0, &mask, &lane);
}

static void api_threadgroup_alloc(const void *addr, size_t size, const char *file, int line) {
    coop_worker *w = worker;
    for (int i = 0; i < w->ntg; i++)
        if (w->tg_addr[i] == addr) return;
    if (w->ntg < MAX_TG_VARS) w->tg_addr[w->ntg++] = addr;
    w->tg_bytes += size;
    if (w->tg_bytes > MKPY_MAX_THREADGROUP_MEMORY) {
        fail("threadgroup memory reaches %zu bytes at %s:%d, more than the %d bytes (32 KiB) a threadgroup may "
             "use on Apple GPUs",
             w->tg_bytes, file, line, MKPY_MAX_THREADGROUP_MEMORY);
        /* never resumed: the launch stops */
        coop_thread *t = &w->threads[w->current];
        t->state = DONE;
        park(t);
    }
}

const struct mkpy_coop_api mkk_coop_api = {
    .barrier = api_barrier,
    .simd_barrier = api_simd_barrier,
    .simd_exchange = api_exchange,
    .threadgroup_alloc = api_threadgroup_alloc,
};

/* ----------------------------------------------------------- scheduling */

static void thread_main(void *arg) {
    unsigned index = (unsigned)(uintptr_t)arg;
    worker->kernel->thread(worker->kernel->args, worker->launch, worker->group, index);
}

static int ensure_fibers(coop_worker *w, unsigned n) {
    if ((int)n <= w->nthreads) return 0;
    coop_thread *t = realloc(w->threads, n * sizeof *t);
    if (!t) return -1;
    w->threads = t;
    for (unsigned i = (unsigned)w->nthreads; i < n; i++) {
        memset(&t[i], 0, sizeof t[i]);
        if (mk_fiber_stack_alloc(&t[i].f, THREAD_STACK) < 0) return -1;
        w->nthreads = (int)i + 1;
    }
    return 0;
}

static unsigned group_size(const mkk_launch *L, uint64_t g) {
    /* mirrors mkpy::group_attrs in mkpy_dispatch.h */
    const uint64_t b[3] = {g % L->ngroups[0], (g / L->ngroups[0]) % L->ngroups[1],
                           g / ((uint64_t)L->ngroups[0] * L->ngroups[1])};
    unsigned count = 1;
    for (int d = 0; d < 3; d++) {
        uint64_t a = (b[d] + 1) * L->tg[d] <= L->grid[d] ? L->tg[d] : L->grid[d] - b[d] * L->tg[d];
        count *= (unsigned)a;
    }
    return count;
}

/* Releases what can be released; returns 1 if some thread can run again. */
static int release(coop_worker *w) {
    int released = 0;
    unsigned nsg = (w->count + MKPY_SIMD_WIDTH - 1) / MKPY_SIMD_WIDTH;
    for (unsigned sg = 0; sg < nsg; sg++) {
        unsigned lo = sg * MKPY_SIMD_WIDTH, hi = lo + MKPY_SIMD_WIDTH < w->count ? lo + MKPY_SIMD_WIDTH : w->count;
        uint32_t waiting = 0;
        int all = 1;
        for (unsigned i = lo; i < hi; i++) {
            int s = w->threads[i].state;
            if (s == AT_SIMD)
                waiting |= 1u << (i - lo);
            else if (s != DONE)
                all = 0;
        }
        if (all && waiting) {
            w->mask[sg][w->gen[sg] & 1u] = waiting;
            w->gen[sg]++;
            for (unsigned i = lo; i < hi; i++)
                if (w->threads[i].state == AT_SIMD) w->threads[i].state = RUNNING;
            released = 1;
        }
    }
    if (released) return 1;
    /* a threadgroup barrier: every live thread there, at one place */
    const coop_thread *first = NULL;
    for (unsigned i = 0; i < w->count; i++) {
        const coop_thread *t = &w->threads[i];
        if (t->state == DONE) continue;
        if (t->state != AT_BARRIER) return 0;
        if (!first) {
            first = t;
        } else if (t->line != first->line || strcmp(t->file, first->file) != 0) {
            fail("threads of one threadgroup wait at different barriers (%s:%d and %s:%d); every thread must "
                 "reach the same threadgroup_barrier",
                 first->file, first->line, t->file, t->line);
            return 0;
        }
    }
    if (!first) return 0;
    for (unsigned i = 0; i < w->count; i++)
        if (w->threads[i].state == AT_BARRIER) w->threads[i].state = RUNNING;
    return 1;
}

static void describe_deadlock(coop_worker *w) {
    const coop_thread *bar = NULL, *simd = NULL;
    for (unsigned i = 0; i < w->count; i++) {
        if (w->threads[i].state == AT_BARRIER && !bar) bar = &w->threads[i];
        if (w->threads[i].state == AT_SIMD && !simd) simd = &w->threads[i];
    }
    if (bar && simd)
        fail("some threads wait at the threadgroup barrier at %s:%d while lanes of their SIMD-group wait in a "
             "SIMD-group function; the threads can never meet (divergent control flow)",
             bar->file, bar->line);
    else
        fail("the threads of a threadgroup can never all reach the same synchronisation point");
}

static int run_group(coop_worker *w, uint64_t g) {
    w->group = g;
    w->count = group_size(w->launch, g);
    if (ensure_fibers(w, w->count) < 0) {
        fail("cannot allocate fiber stacks for %u threads", w->count);
        return -1;
    }
    mk_fault_watch_stacks(&w->threads[0].f, (int)w->count);
    memset(w->gen, 0, sizeof w->gen);
    w->ntg = 0;
    w->tg_bytes = 0;
    for (unsigned i = 0; i < w->count; i++) {
        mk_fiber_prepare(&w->threads[i].f, thread_main, (void *)(uintptr_t)i, &w->sched_sp);
        w->threads[i].state = RUNNING;
    }
    for (;;) {
        int live = 0;
        for (unsigned i = 0; i < w->count; i++) {
            coop_thread *t = &w->threads[i];
            if (t->state != RUNNING) {
                live += t->state != DONE;
                continue;
            }
            w->current = (int)i;
            mk_fiber_switch(&w->sched_sp, t->f.sp);
            if (w->failed) return -1;
            if (t->f.done) t->state = DONE;
            live += t->state != DONE;
        }
        if (!live) return 0;
        if (!release(w)) {
            if (!w->failed) describe_deadlock(w);
            return -1;
        }
    }
}

int mkk_coop_run(const coop_kernel *k, const mkk_launch *L, char *error, size_t errn) {
    static _Thread_local coop_worker *mine;
    if (!mine) {
        mine = calloc(1, sizeof *mine);
        if (!mine) {
            snprintf(error, errn, "out of memory");
            return -1;
        }
    }
    coop_worker *w = mine;
    worker = w;
    w->kernel = k;
    w->launch = L;
    w->failed = 0;
    for (uint64_t g = L->group_begin; g < L->group_end; g++)
        if (run_group(w, g) < 0) {
            snprintf(error, errn, "%s", w->error);
            return -1;
        }
    return 0;
}
