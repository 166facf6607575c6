/* Cooperative threadgroups: every GPU thread of a threadgroup runs on its own
 * fiber of one worker, and a small scheduler switches between them.
 *
 * Scheduling follows Metal's execution model: SIMD-groups make independent
 * progress between threadgroup barriers, and the lanes of a SIMD-group meet at
 * SIMD-group functions. So the scheduler runs one SIMD-group at a time, lane
 * after lane, until each lane has parked or returned:
 *
 *   - A SIMD-group function (or simdgroup_barrier) deposits the lane's value
 *     and parks the lane with its call site (file and line). Once no lane of
 *     the SIMD-group is running, the lanes parked at one call site are
 *     released together: their values are copied into the SIMD-group's result
 *     buffer and each computes its result from it, the mask of lanes that took
 *     part being the "active threads". Lanes that returned, lanes waiting at a
 *     threadgroup barrier and lanes waiting at another call site are inactive,
 *     as on a GPU where they sit outside the divergent branch. When lanes wait
 *     at several call sites, the one earliest in the program's order goes
 *     first: a GPU runs the body of a divergent `if` or loop before the code
 *     after it, where the lanes reconverge. That order is the rank mkpy's
 *     compiler pass gives each point in the kernel's control flow once
 *     inlined (mkpy_sync_order before each point; the lockstep engine's
 *     thread-frontier order, cbs_ir.c), so a header function's SIMD-group
 *     call made after a divergent `if` waits for the lanes still inside it,
 *     and the same helper called from two places is two call sites. A loop
 *     holding a SIMD-group function also has a point at its latch: a lane
 *     that took the back edge waits there until no lane of its SIMD-group
 *     waits earlier in the iteration, so iterations never mix. Kernels built
 *     without the pass (no LLVM, debug builds) fall back to the order of the
 *     program text (header before source, then by line and column).
 *   - A threadgroup barrier parks the thread. When every SIMD-group has run as
 *     far as it can and every live thread waits at the same barrier (same
 *     file, line and column), all resume. Threads that returned count as arrived.
 *     Threads waiting at different barriers are divergence: an error naming
 *     both lines, never a hang.
 *   - Threadgroup variables are `static thread_local` in the compiled code, so
 *     the fibers of a worker share them; their sizes are recorded to enforce
 *     Metal's 32 KiB limit.
 * A thread that spins waiting for another thread (other than at barriers and
 * SIMD-group functions) never yields: such kernels are not supported. */
#include "backend/cpu/coop.h"
#include "kernel/diag.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pool.h"

#define THREAD_STACK (128u << 10)
#define MAX_SIMDGROUPS (1024 / MKPY_SIMD_WIDTH)

enum { RUNNING, AT_BARRIER, AT_SIMD, DONE };

typedef struct {
    int state;
    const char *file; /* where it waits (barrier or SIMD-group function) */
    int line, column;
    int order;      /* its rank in the program's order (mkpy_sync_order), -1: none given */
    int next_order; /* the rank given for the thread's next runtime point */
} coop_thread;

typedef struct {
    uint32_t mask; /* lanes of the last release */
    unsigned char deposit[MKPY_SIMD_WIDTH][MKPY_SIMD_SLOT];
    _Alignas(16) unsigned char result[MKPY_SIMD_BUFFER];
} simd_group;

typedef struct {
    mk_fiber *fibers; /* contiguous: the fault handler walks them */
    coop_thread *threads;
    int nfibers; /* fibers with stacks */
    void *sched_sp;
    unsigned current;
    /* the group being run */
    const coop_kernel *kernel;
    const mkk_launch *launch;
    uint64_t group;
    unsigned count;
    simd_group simd[MAX_SIMDGROUPS];
    const void **tg_addr; /* threadgroup variables met in this group */
    int ntg, tg_cap;
    size_t tg_bytes;
    int failed;
    char error[1024];
} coop_worker;

static _Thread_local coop_worker *worker;

static void park(unsigned i) {
    mk_tsan_leave(&worker->fibers[i]);
    mk_fiber_switch(&worker->fibers[i].sp, worker->sched_sp);
}

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

/* The rank announced for this point (mkpy_sync_order), used once. */
static void take_order(coop_thread *t) {
    t->order = t->next_order;
    t->next_order = -1;
}

static void api_barrier(const char *file, int line, int column) {
    coop_thread *t = &worker->threads[worker->current];
    take_order(t);
    t->state = AT_BARRIER;
    t->file = file;
    t->line = line;
    t->column = column; /* two barriers on one line are two barriers */
    park(worker->current);
}

static unsigned char *api_exchange(const void *value, size_t size, uint32_t *mask, uint32_t *lane,
                                   const char *file, int line, int column) {
    coop_worker *w = worker;
    unsigned idx = w->current;
    simd_group *sg = &w->simd[idx / MKPY_SIMD_WIDTH];
    coop_thread *t = &w->threads[idx];
    *lane = idx % MKPY_SIMD_WIDTH;
    if (size > MKPY_SIMD_SLOT) size = MKPY_SIMD_SLOT;
    memcpy(sg->deposit[*lane], value, size);
    take_order(t);
    t->state = AT_SIMD;
    t->file = file;
    t->line = line;
    t->column = column;
    park(idx);
    /* read at once, before this lane can park again: the buffer stays valid
     * until every lane released with this one has run */
    *mask = sg->mask;
    return sg->result;
}

static void api_simd_barrier(const char *file, int line, int column) {
    uint32_t mask, lane;
    api_exchange("", 0, &mask, &lane, file, line, column);
}

/* mkpy_sync_order: the rank of the thread's next runtime point, or (wait)
 * a loop's latch, where the thread waits as at a SIMD-group function with
 * nothing to exchange. */
static void api_order(int rank, int wait) {
    coop_worker *w = worker;
    if (!w) return;
    coop_thread *t = &w->threads[w->current];
    if (!wait) {
        t->next_order = rank;
        return;
    }
    t->order = rank;
    t->next_order = -1;
    t->state = AT_SIMD;
    t->file = "<loop latch>";
    t->line = t->column = 0;
    park(w->current);
}

static void api_threadgroup_alloc(const void *addr, size_t size, const char *file, int line) {
    coop_worker *w = worker;
    for (int i = 0; i < w->ntg; i++)
        if (w->tg_addr[i] == addr) return;
    if (w->ntg == w->tg_cap) {
        int cap = w->tg_cap ? 2 * w->tg_cap : 64;
        const void **a = realloc(w->tg_addr, (size_t)cap * sizeof *a);
        if (!a) {
            fail("out of memory recording threadgroup variables");
            w->threads[w->current].state = DONE;
            park(w->current);
        }
        w->tg_addr = a;
        w->tg_cap = cap;
    }
    w->tg_addr[w->ntg++] = addr;
    w->tg_bytes += size;
    if (w->tg_bytes > MKPY_MAX_THREADGROUP_MEMORY) {
        fail("its threadgroup memory reaches %zu bytes at %s:%d, more than the %d bytes (32 KiB) a threadgroup may "
             "use on Apple GPUs",
             w->tg_bytes, file, line, MKPY_MAX_THREADGROUP_MEMORY);
        /* never resumed: the launch stops */
        w->threads[w->current].state = DONE;
        park(w->current);
    }
}

/* A kernel's os_log/printf: on a fiber the position the kernel's
 * thread-local holds may be another fiber's (it is set when a thread starts),
 * so the running fiber's own is used. */
static void api_print(const char *text, size_t len, const void *launch, uint64_t group, uint32_t thread) {
    if (worker) {
        group = worker->group;
        thread = worker->current;
        launch = worker->kernel->args;
    }
    mkk_print_record(text, len, launch, group, thread);
}

const struct mkpy_coop_api mkk_coop_api = {
    .barrier = api_barrier,
    .simd_barrier = api_simd_barrier,
    .simd_exchange = api_exchange,
    .threadgroup_alloc = api_threadgroup_alloc,
    .print = api_print,
    .order = api_order,
};

/* ----------------------------------------------------------- scheduling */

static void thread_main(void *arg) {
    unsigned index = (unsigned)(uintptr_t)arg;
    worker->kernel->thread(worker->kernel->args, worker->launch, worker->group, index);
}

static int ensure_fibers(coop_worker *w, unsigned n) {
    if ((int)n <= w->nfibers) return 0;
    /* only between threadgroups: no fiber is suspended, so moving them is safe */
    mk_fiber *f = realloc(w->fibers, n * sizeof *f);
    if (!f) return -1;
    w->fibers = f;
    coop_thread *t = realloc(w->threads, n * sizeof *t);
    if (!t) return -1;
    w->threads = t;
    for (unsigned i = (unsigned)w->nfibers; i < n; i++) {
        memset(&f[i], 0, sizeof f[i]);
        if (mk_fiber_stack_alloc(&f[i], THREAD_STACK) < 0) return -1;
        w->nfibers = (int)i + 1;
    }
    return 0;
}

static unsigned group_size(const mkk_launch *L, uint64_t g) {
    /* mirrors mkpy::group_attrs in mkpy_dispatch.h */
    const uint64_t b[3] = {g % L->ngroups[0], (g / L->ngroups[0]) % L->ngroups[1],
                           g / ((uint64_t)L->ngroups[0] * L->ngroups[1])};
    unsigned count = 1;
    for (int d = 0; d < 3; d++) {
        count *= mkpy_group_extent(L->grid[d], L->tg[d], b[d]);
    }
    return count;
}

/* Program-text order of two waiting places: the header, then the source
 * (as in the compiled text), then by line. */
static int file_rank(const char *f) {
    size_t n = strlen(f);
    if (n >= 7 && strcmp(f + n - 7, "header>") == 0) return 0;
    if (n >= 7 && strcmp(f + n - 7, "source>") == 0) return 1;
    return 2;
}
/* With ranks (every point of a kernel built through the pass has one), a
 * point is its rank: the same text inlined at two places is two points. */
static int same_place(const coop_thread *a, const coop_thread *b) {
    if (a->order >= 0 || b->order >= 0) return a->order == b->order;
    return a->line == b->line && a->column == b->column && (a->file == b->file || strcmp(a->file, b->file) == 0);
}
static int earlier(const coop_thread *a, const coop_thread *b) {
    if (a->order >= 0 && b->order >= 0) return a->order < b->order;
    if (a->file != b->file) {
        int ra = file_rank(a->file), rb = file_rank(b->file);
        if (ra != rb) return ra < rb;
        int c = strcmp(a->file, b->file);
        if (c) return c < 0;
    }
    if (a->line != b->line) return a->line < b->line;
    return a->column < b->column;
}

/* Releases the lanes of SIMD-group sg that wait at the earliest SIMD-group
 * call site; returns 0 if none waits. Only called when no lane of the group
 * is running. */
static int release_simd(coop_worker *w, unsigned sg) {
    unsigned lo = sg * MKPY_SIMD_WIDTH, hi = lo + MKPY_SIMD_WIDTH < w->count ? lo + MKPY_SIMD_WIDTH : w->count;
    const coop_thread *first = NULL;
    for (unsigned i = lo; i < hi; i++) {
        const coop_thread *t = &w->threads[i];
        if (t->state == AT_SIMD && (!first || earlier(t, first))) first = t;
    }
    if (!first) return 0;
    simd_group *s = &w->simd[sg];
    uint32_t mask = 0;
    for (unsigned i = lo; i < hi; i++) {
        coop_thread *t = &w->threads[i];
        if (t->state == AT_SIMD && same_place(t, first)) {
            mask |= 1u << (i - lo);
            memcpy(s->result + (i - lo) * MKPY_SIMD_SLOT, s->deposit[i - lo], MKPY_SIMD_SLOT);
        }
    }
    for (unsigned i = lo; i < hi; i++)
        if (mask >> (i - lo) & 1u) w->threads[i].state = RUNNING;
    s->mask = mask;
    memset(s->result + MKPY_SIMD_MEMO_VALID, 0, sizeof(uint32_t));
    return 1;
}

/* Runs SIMD-group sg until every lane has returned or waits at a threadgroup
 * barrier. */
static int run_simdgroup(coop_worker *w, unsigned sg) {
    unsigned lo = sg * MKPY_SIMD_WIDTH, hi = lo + MKPY_SIMD_WIDTH < w->count ? lo + MKPY_SIMD_WIDTH : w->count;
    do {
        for (unsigned i = lo; i < hi; i++) {
            coop_thread *t = &w->threads[i];
            if (t->state != RUNNING) continue;
            w->current = i;
            mk_tsan_enter(&w->fibers[i]);
            mk_fiber_switch(&w->sched_sp, w->fibers[i].sp);
            if (w->failed) return -1;
            if (w->fibers[i].done) t->state = DONE;
        }
    } while (release_simd(w, sg));
    return 0;
}

/* Releases a threadgroup barrier; returns 1 if threads resume, 0 when all
 * threads have returned, -1 on divergence. */
static int release_barrier(coop_worker *w) {
    const coop_thread *first = NULL;
    for (unsigned i = 0; i < w->count; i++) {
        const coop_thread *t = &w->threads[i];
        if (t->state == DONE) continue;
        if (!first) {
            first = t;
        } else if (!same_place(t, first)) {
            const coop_thread *a = earlier(t, first) ? t : first, *b = a == t ? first : t;
            fail("threads of one threadgroup wait at different barriers (%s:%d:%d and %s:%d:%d); every thread must "
                 "reach the same threadgroup_barrier (threads that return count as arrived)",
                 a->file, a->line, a->column, b->file, b->line, b->column);
            return -1;
        }
    }
    if (!first) return 0;
    for (unsigned i = 0; i < w->count; i++)
        if (w->threads[i].state == AT_BARRIER) w->threads[i].state = RUNNING;
    return 1;
}

static int run_group(coop_worker *w, uint64_t g) {
    w->group = g;
    w->count = group_size(w->launch, g);
    if (ensure_fibers(w, w->count) < 0) {
        fail("cannot allocate fiber stacks for %u threads", w->count);
        return -1;
    }
    mk_fault_watch_stacks(w->fibers, (int)w->count);
    w->ntg = 0;
    w->tg_bytes = 0;
    for (unsigned i = 0; i < w->count; i++) {
        mk_fiber_prepare(&w->fibers[i], thread_main, (void *)(uintptr_t)i, &w->sched_sp);
        w->threads[i].state = RUNNING;
        w->threads[i].order = w->threads[i].next_order = -1;
    }
    unsigned nsg = (w->count + MKPY_SIMD_WIDTH - 1) / MKPY_SIMD_WIDTH;
    for (;;) {
        if (mk_fault_cancel_requested()) { /* Ctrl-C or the watchdog: checked at every barrier */
            fail("cancelled");
            return -1;
        }
        for (unsigned sg = 0; sg < nsg; sg++)
            if (run_simdgroup(w, sg) < 0) return -1;
        int r = release_barrier(w);
        if (r <= 0) return r;
    }
}

/* ------------------------------------------------------ the worker pool */

/* A worker (its fibers, one 132 KiB stack and two mappings each, up to 1024)
 * belongs to no thread: a launch takes one from a process-wide list and gives
 * it back, so Python threads that come and go leave nothing behind and the
 * stacks are made once. The list keeps at most MAX_IDLE workers plus one per
 * pool thread; a worker given back beyond that is freed. */
#define MAX_IDLE_EXTRA 2

static struct {
    pthread_mutex_t mu;
    coop_worker **idle;
    int n, cap;
} workers = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static void worker_free(coop_worker *w) {
    for (int i = 0; i < w->nfibers; i++) mk_fiber_stack_free(&w->fibers[i]);
    free(w->fibers);
    free(w->threads);
    free(w->tg_addr);
    free(w);
}

static coop_worker *worker_take(void) {
    coop_worker *w = NULL;
    pthread_mutex_lock(&workers.mu);
    if (workers.n) w = workers.idle[--workers.n];
    pthread_mutex_unlock(&workers.mu);
    return w ? w : calloc(1, sizeof *w);
}

static void worker_give(coop_worker *w) {
    int cap = mk_pool_threads() + MAX_IDLE_EXTRA;
    pthread_mutex_lock(&workers.mu);
    if (!workers.idle) {
        workers.idle = malloc((size_t)cap * sizeof *workers.idle);
        workers.cap = workers.idle ? cap : 0;
    }
    if (workers.n < workers.cap) {
        workers.idle[workers.n++] = w;
        w = NULL;
    }
    pthread_mutex_unlock(&workers.mu);
    if (w) worker_free(w);
}

int mkk_coop_run(const coop_kernel *k, const mkk_launch *L, char *error, size_t errn) {
    coop_worker *w = worker_take();
    if (!w) {
        snprintf(error, errn, "out of memory");
        return -1;
    }
    worker = w;
    w->kernel = k;
    w->launch = L;
    w->failed = 0;
    int rc = 0;
    for (uint64_t g = L->group_begin; g < L->group_end && rc == 0; g++)
        if (run_group(w, g) < 0) {
            snprintf(error, errn, "%s", w->error);
            rc = -1;
        }
    mk_fault_watch_stacks(NULL, 0);
    worker = NULL;
    worker_give(w);
    return rc;
}

void mkk_coop_reclaim(void) {
    coop_worker *w = worker;
    if (!w) return;
    worker = NULL;
    mk_fault_watch_stacks(NULL, 0);
    worker_give(w);
}

int mkk_coop_current(uint64_t *group, unsigned *index, const char **stack_lo, const char **stack_hi) {
    coop_worker *w = worker;
    if (!w || !w->kernel) return -1;
    *group = w->group;
    *index = w->current;
    *stack_lo = w->fibers[w->current].stack_lo;
    *stack_hi = w->fibers[w->current].stack_lo + w->fibers[w->current].stack_size;
    return 0;
}
