/* A metal_kernel call on the CPU back-end (the front end, kernel/dispatch.c,
 * has checked the launch and generated MLX's source): prepare inputs and
 * outputs as MLX does, get the compiled entry points (jit.c), and run the
 * threadgroups over the thread pool.
 *
 * Two execution schemes, chosen in one place (`pick_scheme`):
 *   plain        threads of a threadgroup run one after another (exact for
 *                per-thread code, and the fastest);
 *   cooperative  each thread of a threadgroup runs on its own fiber and a
 *                scheduler switches at barriers and SIMD-group functions
 *                (coop.c) - for threadgroup memory, barriers, SIMD/quad-group
 *                functions.
 * Either way kernel code runs inside mk_fault_guarded_call, so a wild pointer
 * or a stack overflow becomes a Python error instead of a crash. The next step
 * for speed is region splitting at barriers (see docs/kernels.md). */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/iter.h"
#include "core/ops.h"
#include "core/pool.h"
#include "core/types.h"
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/cbs.h"
#include "backend/cpu/check.h"
#include "backend/cpu/coop.h"
#include "kernel/diag.h"
#include "kernel/kernel.h"


/* ------------------------------------------------------------- scheme */

/* SCHEME_LOCKSTEP is chosen at run time for a cooperative kernel that the
 * region-splitting pass compiled (fn.cbs_run), unless MKPY_ENGINE=fibers. */
typedef enum { SCHEME_PLAIN = 1, SCHEME_COOPERATIVE, SCHEME_LOCKSTEP } scheme;

static int ident_char(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Does `text` contain `word` as a whole identifier? */
static int has_ident(const char *text, const char *word) {
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word))
        if ((p == text || !ident_char(p[-1])) && !ident_char(p[n])) return 1;
    return 0;
}

/* The SIMD-group and quad-group functions of mkpy_coop.h, as simd_<name>
 * and quad_<name> (simd_is_helper_thread needs no cooperation). Names, not
 * prefixes: kernels often call their variables simd_lane or quad_id. */
static const char *const group_functions[] = {
    "sum", "product", "min", "max", "and", "or", "xor",
    "prefix_inclusive_sum", "prefix_exclusive_sum", "prefix_inclusive_product", "prefix_exclusive_product",
    "shuffle", "broadcast", "shuffle_up", "shuffle_down", "shuffle_xor", "shuffle_rotate_up",
    "shuffle_rotate_down", "shuffle_and_fill_up", "shuffle_and_fill_down", "broadcast_first", "is_first",
    "all", "any", "ballot", "active_threads_mask",
};

/* The one place that decides how a kernel's threads run: cooperatively when
 * the source or header names threadgroup memory, a barrier, a SIMD-group /
 * quad-group function or a simdgroup matrix. */
static scheme scan_scheme(const mkk_kernel *k) {
    static const char *const words[] = {
        "threadgroup", "threadgroup_barrier", "simdgroup_barrier",
        /* simdgroup matrices: the diagonal constructor, loads and stores need
         * the lane, the multiplies exchange operands */
        "simdgroup_matrix", "simdgroup_float8x8", "simdgroup_half8x8", "simdgroup_bfloat8x8",
        "simdgroup_load", "simdgroup_store", "simdgroup_multiply", "simdgroup_multiply_accumulate",
    };
    const char *texts[2] = {k->source, k->header};
    for (int t = 0; t < 2; t++) {
        if (!texts[t]) continue;
        for (size_t i = 0; i < sizeof words / sizeof *words; i++)
            if (has_ident(texts[t], words[i])) return SCHEME_COOPERATIVE;
        for (size_t i = 0; i < sizeof group_functions / sizeof *group_functions; i++) {
            char name[64];
            snprintf(name, sizeof name, "simd_%s", group_functions[i]);
            if (has_ident(texts[t], name)) return SCHEME_COOPERATIVE;
            snprintf(name, sizeof name, "quad_%s", group_functions[i]);
            if (has_ident(texts[t], name)) return SCHEME_COOPERATIVE;
        }
    }
    return SCHEME_PLAIN;
}

/* The scheme depends only on the kernel's source and header: picked once. */
static scheme pick_scheme(mkk_kernel *k) {
    int s = atomic_load_explicit(&k->scheme, memory_order_relaxed);
    if (!s) atomic_store_explicit(&k->scheme, s = (int)scan_scheme(k), memory_order_relaxed);
    return (scheme)s;
}

bool mkk_is_cooperative(mkk_kernel *k) { return pick_scheme(k) == SCHEME_COOPERATIVE; }

/* The engine for a cooperative kernel: the lockstep engine when the kernel
 * was compiled for it, fibers otherwise (MKPY_ENGINE=fibers is read when the
 * kernel is looked up: jit.c builds for one engine). */
static scheme pick_engine(mkk_kernel *k, const mkk_compiled *fn) {
    scheme s = pick_scheme(k);
    if (s != SCHEME_COOPERATIVE || !fn->cbs_run) return s;
    return SCHEME_LOCKSTEP;
}

const char *mkk_engine_name(mkk_kernel *k, const mkk_compiled *fn) {
    switch (pick_engine(k, fn)) {
    case SCHEME_PLAIN: return "plain";
    case SCHEME_LOCKSTEP: return "lockstep";
    default: return "fibers";
    }
}

/* ------------------------------------------------------------ running */

#define MAX_SLOTS 256
#define MKK_STAGE_MAX (1u << 20) /* views of large buffers smaller than this are staged */ /* threads registered per launch (pool threads + callers) */

enum { CANCEL_NONE, CANCEL_INTERRUPT, CANCEL_TIMEOUT };

typedef struct run_ctx {
    mkk_compiled fn;
    scheme how;
    void *const *args;
    mkk_launch base;
    uint64_t total, chunk;
    atomic_ullong next;
    atomic_int failed;
    mk_fault fault;
    /* interrupts and the watchdog (guarded by watchdog.mu unless atomic) */
    _Atomic int cancel;
    int cancel_reason;
    unsigned mark;              /* the eval's interrupt mark */
    uint64_t deadline_ns;       /* 0: no MKPY_KERNEL_TIMEOUT */
    uint64_t cancel_ns;
    struct run_ctx *next_launch;
    int nslots;
    /* the rest is not cleared at a launch (~3.7 KB: a cached call's largest
     * cost): error is written before it is read, a slot when it registers */
    char error[1200];
    pthread_t threads[MAX_SLOTS];
    bool in_kernel[MAX_SLOTS];
} run_ctx;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sets the launch's cancel flag if an interrupt came or its time is up;
 * returns the flag. Called between threadgroups and by the watchdog. */
static int check_cancel(run_ctx *r, uint64_t now) {
    if (atomic_load_explicit(&r->cancel, memory_order_relaxed)) return 1;
    int why = mk_interrupted_since(r->mark) ? CANCEL_INTERRUPT
              : r->deadline_ns && now >= r->deadline_ns ? CANCEL_TIMEOUT
                                                        : CANCEL_NONE;
    if (why == CANCEL_NONE) return 0;
    int expected = 0;
    if (atomic_compare_exchange_strong(&r->cancel, &expected, why)) {
        r->cancel_reason = why;
        r->cancel_ns = now;
    }
    return 1;
}

/* The watchdog: one thread that, while launches run, looks at them every
 * WATCH_PERIOD_MS. Threadgroup boundaries and barriers check the cancel flag
 * themselves; a thread still inside kernel code KICK_AFTER_MS after the flag
 * was set (a loop that never reaches either) is kicked out by a signal
 * (mk_fault_kick). It keeps polling for a second after the last launch, so
 * that a stream of short launches never has to wake it. */
#define WATCH_PERIOD_MS 20
#define KICK_AFTER_MS 60
#define LINGER_MS 1000

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, sleeping;
    run_ctx *launches;
} watchdog = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false, NULL};

static void *watchdog_main(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* Ctrl-C is for the other threads */
    uint64_t idle_since = now_ns();
    pthread_mutex_lock(&watchdog.mu);
    for (;;) {
        uint64_t now = now_ns();
        if (!watchdog.launches && now - idle_since > (uint64_t)LINGER_MS * 1000000u) {
            watchdog.sleeping = true;
            while (!watchdog.launches) pthread_cond_wait(&watchdog.cv, &watchdog.mu);
            watchdog.sleeping = false;
            now = now_ns();
        }
        if (watchdog.launches) idle_since = now;
        for (run_ctx *r = watchdog.launches; r; r = r->next_launch) {
            if (!check_cancel(r, now) || now - r->cancel_ns < (uint64_t)KICK_AFTER_MS * 1000000u) continue;
            for (int i = 0; i < r->nslots; i++)
                if (r->in_kernel[i]) mk_fault_kick(r->threads[i]);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WATCH_PERIOD_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&watchdog.cv, &watchdog.mu, &ts);
    }
    return NULL;
}

/* A forked child has no watchdog thread: it starts its own. */
static void watchdog_after_fork(void);
static void watchdog_register_fork(void) { pthread_atfork(NULL, NULL, watchdog_after_fork); }

static void watchdog_after_fork(void) {
    pthread_mutex_init(&watchdog.mu, NULL);
    pthread_cond_init(&watchdog.cv, NULL);
    watchdog.started = watchdog.sleeping = false;
    watchdog.launches = NULL;
}

/* Called with watchdog.mu held. */
static void start_locked(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, watchdog_register_fork);
    if (watchdog.started) return;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256u << 10);
    if (pthread_create(&t, &attr, watchdog_main, NULL) == 0) watchdog.started = true;
    pthread_attr_destroy(&attr);
}

void mkk_watchdog_start(void) {
    pthread_mutex_lock(&watchdog.mu);
    start_locked();
    pthread_mutex_unlock(&watchdog.mu);
}

static void watch_launch(run_ctx *r) {
    pthread_mutex_lock(&watchdog.mu);
    start_locked();
    r->next_launch = watchdog.launches;
    watchdog.launches = r;
    if (watchdog.sleeping) pthread_cond_signal(&watchdog.cv);
    pthread_mutex_unlock(&watchdog.mu);
}

static void unwatch_launch(run_ctx *r) {
    pthread_mutex_lock(&watchdog.mu);
    for (run_ctx **l = &watchdog.launches; *l; l = &(*l)->next_launch)
        if (*l == r) {
            *l = r->next_launch;
            break;
        }
    pthread_mutex_unlock(&watchdog.mu);
}

typedef struct {
    run_ctx *r;
    char error[1100];
    int failed;
} worker_job;

static void run_chunks(void *arg) {
    worker_job *j = arg;
    run_ctx *r = j->r;
    mkk_launch L = r->base;
    coop_kernel ck = {r->fn.thread, r->args};
    mkk_cbs_kernel cbk = {r->fn.cbs_run, r->fn.cbs_info, r->args};
    while (!atomic_load(&r->failed)) {
        if (check_cancel(r, r->deadline_ns ? now_ns() : 0)) break;
        uint64_t begin = atomic_fetch_add(&r->next, r->chunk);
        if (begin >= r->total) break;
        L.group_begin = begin;
        L.group_end = begin + r->chunk < r->total ? begin + r->chunk : r->total;
        if (r->how == SCHEME_PLAIN) {
            r->fn.entry(r->args, &L);
        } else if (r->how == SCHEME_LOCKSTEP) {
            if (mkk_cbs_run(&cbk, &L, j->error, sizeof j->error) < 0) {
                j->failed = 1;
                break;
            }
        } else if (mkk_coop_run(&ck, &L, j->error, sizeof j->error) < 0) {
            j->failed = 1;
            break;
        }
    }
}

static void run_groups(void *c, int ith, int nth) {
    run_ctx *r = c;
    worker_job j = {r, "", 0};
    mk_fault fault;
    (void)ith;
    (void)nth;
    int slot = -1;
    pthread_mutex_lock(&watchdog.mu);
    if (r->nslots < MAX_SLOTS) {
        slot = r->nslots++;
        r->threads[slot] = pthread_self();
        r->in_kernel[slot] = true;
    }
    pthread_mutex_unlock(&watchdog.mu);
    int rc = mk_fault_guarded_call_cancellable(run_chunks, &j, &fault, &r->cancel);
    if (rc < 0) mkk_coop_reclaim(); /* a fault on a fiber left its worker taken */
    if (slot >= 0) {
        pthread_mutex_lock(&watchdog.mu);
        r->in_kernel[slot] = false;
        pthread_mutex_unlock(&watchdog.mu);
    }
    if ((rc < 0 && fault.cancelled) || (j.failed && atomic_load(&r->cancel))) return; /* reported from r->cancel */
    if ((rc < 0 || j.failed) && atomic_exchange(&r->failed, 1) == 0) {
        if (rc < 0)
            r->fault = fault;
        else
            snprintf(r->error, sizeof r->error, "%s", j.error);
    }
}

/* ------------------------------------------------------- kernel buffers */

/* What the kernel sees of one input or output, for guarding it and for
 * naming it in errors. Buffers of 1 MiB and more are fenced where they lie
 * (array.c); smaller ones, and views into them, are staged: copied into (or,
 * for outputs, produced in) a block that ends at a page followed by
 * read-only zero pages, then compared with (inputs) or copied to (outputs)
 * the array's memory after the launch. */
typedef struct {
    const char *name;
    bool output;
    char *base;        /* the pointer the kernel gets */
    char *lo, *hi;     /* the bytes it may use: [lo, hi) */
    size_t itemsize;
    int64_t count;     /* elements of the array */
    char *stage;       /* the staging copy (== lo), or NULL */
    size_t stage_bytes;
    const char *orig;  /* inputs: the array's bytes that were copied */
    bool check;        /* check the zeroed bytes around it after the launch */
} kbuf;

/* The range of bytes an array's elements cover, relative to its data pointer. */
static void byte_extent(const mk_array *x, const int64_t *strides, int64_t *lo, int64_t *hi) {
    int64_t a = 0, b = 0;
    for (int d = 0; d < x->ndim; d++) {
        int64_t span = strides[d] * (x->shape[d] - 1);
        if (span < 0) a += span; else b += span;
    }
    size_t isz = mk_dtype_size(x->dtype);
    *lo = a * (int64_t)isz;
    *hi = (b + 1) * (int64_t)isz;
}

static char *page_floor(const char *p) { return (char *)((uintptr_t)p & ~(uintptr_t)4095); }
static char *page_ceil(const char *p) { return (char *)(((uintptr_t)p + 4095) & ~(uintptr_t)4095); }

/* AVX2 where the CPU has it, chosen once by the loader (an ifunc). The padding before a staged
 * buffer is most of a page, so the checks were ~10% of a cached call's instructions: 128 bytes a
 * step in four independent 32-byte lanes (one load-or each), the loop's own add/compare/branch
 * paid once per 128 bytes rather than per 32 (callgrind: 1,400 -> ~500 instructions per call). */
typedef uint64_t u64x4 __attribute__((vector_size(32), aligned(32), may_alias));
typedef uint64_t u64a __attribute__((may_alias));
__attribute__((target_clones("avx2", "default"))) static bool all_zero(const char *a, const char *b) {
    uint64_t acc = 0;
    for (; a < b && ((uintptr_t)a & 7); a++) acc |= (unsigned char)*a;
    for (; b - a >= 8 && ((uintptr_t)a & 31); a += 8) acc |= *(const u64a *)(const void *)a;
    const u64x4 *w = (const u64x4 *)(const void *)a;
    size_t n = (size_t)(b - a) / 128;
    u64x4 l0 = {0}, l1 = {0}, l2 = {0}, l3 = {0};
    for (size_t i = 0; i < n; i++) {
        l0 |= w[4 * i];
        l1 |= w[4 * i + 1];
        l2 |= w[4 * i + 2];
        l3 |= w[4 * i + 3];
    }
    for (w += 4 * n; b - (const char *)w >= 32; w++) l0 |= *w;
    l0 |= l1 | l2 | l3;
    acc |= l0[0] | l0[1] | l0[2] | l0[3];
    for (a = (const char *)w; b - a >= 8; a += 8) acc |= *(const u64a *)(const void *)a;
    for (; a < b; a++) acc |= (unsigned char)*a;
    return acc == 0;
}

/* The farthest non-zero byte of [a, b): its distance from `from` (>= 1), or 0. */
static size_t nonzero_reach(const char *a, const char *b, const char *from, bool forward) {
    if (all_zero(a, b)) return 0;
    if (forward) {
        for (const char *p = b; p > a; p--)
            if (p[-1]) return (size_t)(p - from);
    } else {
        for (const char *p = a; p < b; p++)
            if (*p) return (size_t)(from - p);
    }
    return 0;
}

static const char *dtype_word(size_t itemsize) {
    static char buf[4][24];
    static _Thread_local int k;
    char *w = buf[k++ & 3];
    snprintf(w, sizeof buf[0], "%zu-byte", itemsize);
    return w;
}

/* Describes an access at `addr` that faulted, by the buffer it missed. */
static int describe_fault(const kbuf *bufs, int n, const mk_fault *f, char *out, size_t outn) {
    const kbuf *best = NULL;
    size_t bestd = SIZE_MAX;
    int after = 0;
    char *a = (char *)f->addr;
    for (int i = 0; i < n; i++) {
        const kbuf *b = &bufs[i];
        if (!b->lo) continue;
        size_t window = (4u << 20) + 8192;
        if (a >= b->hi && (size_t)(a - b->hi) < window && (size_t)(a - b->hi) < bestd) {
            best = b;
            bestd = (size_t)(a - b->hi);
            after = 1;
        } else if (a < b->lo && (size_t)(b->lo - a) <= window && (size_t)(b->lo - a) < bestd) {
            best = b;
            bestd = (size_t)(b->lo - a);
            after = 0;
        } else if (a >= b->lo && a < b->hi && !b->output) {
            snprintf(out, outn, "stored into its input `%s` (element %lld), which is read-only (`const device`)",
                     b->name, (long long)((a - b->base) / (ptrdiff_t)b->itemsize));
            return 1;
        }
    }
    if (!best) return 0;
    const char *verb = f->write == 1 ? "stored" : f->write == 0 ? "loaded" : "accessed memory";
    long long elem = (long long)((a - best->base) >= 0 ? (a - best->base) / (ptrdiff_t)best->itemsize
                                                       : -((best->base - a + (ptrdiff_t)best->itemsize - 1) /
                                                           (ptrdiff_t)best->itemsize));
    char where[96];
    if (bestd == 0)
        snprintf(where, sizeof where, "the first byte past its end");
    else
        snprintf(where, sizeof where, "%zu bytes %s", bestd, after ? "past its end" : "before its start");
    snprintf(out, outn, "%s %s its %s `%s`: element %lld of a buffer of %lld %s elements (%s)", verb,
             after ? "past the end of" : "before the start of", best->output ? "output" : "input", best->name, elem,
             (long long)best->count, dtype_word(best->itemsize), where);
    return 1;
}

/* After a launch: stores the faults did not catch (into the zeroed bytes
 * between a buffer and its guard pages, or into a staged input). */
static int check_after(const kbuf *bufs, int n, char *out, size_t outn) {
    for (int i = 0; i < n; i++) {
        const kbuf *b = &bufs[i];
        if (!b->lo || !b->check) continue;
        size_t past = nonzero_reach(b->hi, page_ceil(b->hi), b->hi, true);
        size_t before = nonzero_reach(page_floor(b->lo), b->lo, b->lo, false);
        if (past || before) {
            snprintf(out, outn,
                     "stored %s its %s `%s`: up to %zu bytes %s (a buffer of %lld %s elements; found after the "
                     "launch)",
                     past ? "past the end of" : "before the start of", b->output ? "output" : "input", b->name,
                     past ? past : before, past ? "past its last byte" : "before its first byte",
                     (long long)b->count, dtype_word(b->itemsize));
            return 1;
        }
        if (b->stage && !b->output && memcmp(b->stage, b->orig, b->stage_bytes) != 0) {
            size_t k = 0;
            while (k < b->stage_bytes && b->stage[k] == b->orig[k]) k++;
            snprintf(out, outn, "stored into its input `%s` (element %lld), which is read-only (`const device`)",
                     b->name, (long long)((b->stage + k - b->base) / (ptrdiff_t)b->itemsize));
            return 1;
        }
    }
    return 0;
}

/* A dense row-major copy of x (for ensure_row_contiguous). */
static mk_buffer *dense_copy(const mk_array *x) {
    mk_buffer *b = mk_buffer_alloc((size_t)x->size * mk_dtype_size(x->dtype));
    if (!b) return NULL;
    int64_t dense[MK_MAX_NDIM];
    mk_row_strides(x->ndim, x->shape, dense);
    mk_copy_into(x, b->data, dense);
    return b;
}

/* threadgroup_barrier calls in the kernel's source and header (the profiler's column) */

/* Zeroed memory from the caller's buffer `small` while it has room (64-byte steps), else from
 * the heap; small_free frees only the latter. */
static void *small_zalloc(char *small, size_t cap, size_t *used, size_t n) {
    size_t at = (*used + 63) & ~(size_t)63;
    if (n <= cap && at <= cap - n) {
        *used = at + n;
        return memset(small + at, 0, n);
    }
    return calloc(1, n ? n : 1);
}

static void small_free(char *small, size_t cap, void *p) {
    uintptr_t at = (uintptr_t)p, lo = (uintptr_t)small;
    if (p && (at < lo || at - lo >= cap)) free(p);
}

/* One metal_kernel call on the CPU (the CPU back-end's kernel_eval, backend/backend.h):
 * compile through jit.c's caches, stage the buffers, run the threadgroups on the pool with the
 * engine the kernel needs, and turn faults, the checker's findings and timeouts into errors. */
int mkb_cpu_kernel_eval(mkk_kernel *k, mkk_call *c, mk_array *const *in, mk_array *const *out,
                        const char *generated, const char *kname, const mkk_launch *plan, uint64_t plan_total) {
    int rc = -1;
    void **args = NULL;
    mk_buffer **copies = NULL;
    int32_t *shapes = NULL;
    int64_t *strides = NULL;
    int32_t *ndims = NULL;
    void *block = NULL; /* strides, args, copies, shapes and ndims */
    mkk_compiled fn = {0};
    kbuf *bufs = NULL;
    run_ctx run, *r = NULL; /* on this stack: the launch ends before this function returns */
    /* the buffer table and the argument block of a call with few buffers, here too: a cached
     * call's heap work was three allocations and their frees (~1,200 instructions) */
    _Alignas(64) char small[2048];
    size_t small_used = 0;
    const char *site = c->call_site ? c->call_site : "?";
    bool padding_checked = false;

    const bool profiling = mkk_profiling();
    mkk_profile_kernel prof = {k->name, NULL, NULL, profiling ? mkk_now_ns() : 0};
    fn = mkk_jit(k, c, in, generated, kname); /* held loaded until mkk_jit_release below */
    if (!mkk_compiled_ok(&fn)) goto done;
    if (profiling) prof.compile_end = mkk_now_ns();

    bufs = small_zalloc(small, sizeof small, &small_used, ((size_t)(k->ninputs + k->noutputs) + 1) * sizeof *bufs);
    if (!bufs) {
        mk_nomem();
        goto done;
    }
    /* outputs: fresh row-contiguous buffers, filled with init_value if given;
     * the small ones are produced in a staging block */
    for (int i = 0; i < k->noutputs; i++) {
        if (mk_alloc_out(out[i]) < 0) goto done;
        kbuf *b = &bufs[k->ninputs + i];
        size_t isz = mk_dtype_size(out[i]->dtype), nbytes = (size_t)out[i]->size * isz;
        b->name = k->output_names[i];
        b->output = true;
        b->itemsize = isz;
        b->count = out[i]->size;
        b->check = true;
        if (mk_buffer_fenced(out[i]->buf)) {
            b->base = b->lo = out[i]->buf->data;
        } else {
            if (!(b->stage = mk_stage_alloc(nbytes))) goto done;
            b->stage_bytes = nbytes;
            b->base = b->lo = b->stage;
        }
        b->hi = b->lo + nbytes;
        if (c->has_init && out[i]->size) {
            char *d = b->base;
            mk_put_f64(out[i]->dtype, d, c->init_value);
            for (int64_t j = 1; j < out[i]->size; j++) memcpy(d + j * isz, d, isz);
        } else if (mkk_parity_fill()) {
            memset(b->base, MKK_PARITY_BYTE, nbytes); /* as the GPU side's outputs start */
        }
    }
    /* arguments in MLX's buffer order */
    int nargs = k->noutputs;
    for (int i = 0; i < k->ninputs; i++)
        nargs += 1 + (in[i]->ndim > 0) * (k->shape_info[i][0] + k->shape_info[i][1] + k->shape_info[i][2]);
    {
        const size_t nin = k->ninputs ? (size_t)k->ninputs : 1, na = nargs ? (size_t)nargs : 1;
        block = small_zalloc(small, sizeof small, &small_used,
                             nin * MK_MAX_NDIM * sizeof *strides + na * sizeof *args + nin * sizeof *copies +
                                 nin * MK_MAX_NDIM * sizeof *shapes + nin * sizeof *ndims);
        if (!block) {
            mk_nomem();
            goto done;
        }
        strides = block;
        args = (void **)(strides + nin * MK_MAX_NDIM);
        copies = (mk_buffer **)(args + na);
        shapes = (int32_t *)(copies + nin);
        ndims = shapes + nin * MK_MAX_NDIM;
    }
    int a = 0;
    for (int i = 0; i < k->ninputs; i++) {
        const mk_array *x = in[i];
        int64_t *st = strides + (size_t)i * MK_MAX_NDIM;
        int32_t *sh = shapes + (size_t)i * MK_MAX_NDIM;
        const mk_buffer *xb = x->buf;
        char *data;
        if (k->ensure_row_contiguous && !(x->flags & MK_ROW_CONTIG)) {
            if (!(copies[i] = dense_copy(x))) goto done;
            data = copies[i]->data;
            xb = copies[i];
            mk_row_strides(x->ndim, x->shape, st);
        } else {
            data = mk_data(x);
            for (int d = 0; d < x->ndim; d++) st[d] = x->strides[d];
        }
        kbuf *b = &bufs[i];
        size_t isz = mk_dtype_size(x->dtype);
        b->name = k->input_names[i];
        b->itemsize = isz;
        b->count = x->size;
        int64_t lo = 0, hi = 0;
        if (x->size > 0) byte_extent(x, st, &lo, &hi);
        /* a small view of a large buffer is staged too: its parent's other
         * elements are another array's */
        bool whole = data + lo == (char *)xb->data && (size_t)(hi - lo) == xb->nbytes;
        if (x->size > 0 && mk_buffer_fenced(xb) && (whole || hi - lo >= (int64_t)MKK_STAGE_MAX)) {
            /* in place: loads past it read the zero pages, stores there fault */
            b->base = data;
            b->lo = xb->data;
            b->hi = (char *)xb->data + xb->nbytes;
        } else if (x->size > 0) {
            size_t n = (size_t)(hi - lo);
            if (!(b->stage = mk_stage_alloc(n))) goto done;
            memcpy(b->stage, data + lo, n);
            b->stage_bytes = n;
            b->orig = data + lo;
            b->lo = b->stage;
            b->hi = b->stage + n;
            b->base = b->stage - lo;
            b->check = true;
        } else {
            b->base = data;
        }
        args[a++] = b->base;
        for (int d = 0; d < x->ndim; d++) sh[d] = (int32_t)x->shape[d];
        ndims[i] = x->ndim;
        if (x->ndim > 0) {
            if (k->shape_info[i][0]) args[a++] = sh;
            if (k->shape_info[i][1]) args[a++] = st;
            if (k->shape_info[i][2]) args[a++] = &ndims[i];
        }
    }
    for (int i = 0; i < k->noutputs; i++) args[a++] = bufs[k->ninputs + i].base;

    r = &run;
    memset(r, 0, offsetof(run_ctx, error));
    r->error[0] = 0;
    r->fn = fn;
    r->how = pick_engine(k, &fn);
    if (fn.checked && r->how != SCHEME_PLAIN) r->how = SCHEME_COOPERATIVE; /* checked: fibers */
    /* the sources first: the engine line stays the last one */
    if (c->verbose && fn.so_path && strlen(fn.so_path) > 3)
        mkk_report("mkpy: kernel `%s` sources on disk: %.*s.metal (generated Metal), %.*s.cpp (translated C++)\n",
                   k->name, (int)strlen(fn.so_path) - 3, fn.so_path, (int)strlen(fn.so_path) - 3, fn.so_path);
    if (c->verbose && fn.checked)
        mkk_report("mkpy: kernel `%s` runs in the checker mode (MKPY_CHECK): instrumented%s\n",
                   k->name, r->how == SCHEME_PLAIN ? "" : ", on fibers");
    /* the lockstep engine's compact run function: why (cbs_ir.c) */
    const char *form = r->how == SCHEME_LOCKSTEP && fn.cbs_info ? fn.cbs_info->form : NULL;
    if (c->verbose && !fn.checked) {
        if (r->how == SCHEME_COOPERATIVE)
            mkk_report("mkpy: kernel `%s` runs on fibers (%s)\n", k->name,
                       getenv("MKPY_ENGINE") && strcmp(getenv("MKPY_ENGINE"), "fibers") == 0
                           ? "MKPY_ENGINE=fibers"
                           : fn.cbs_declined ? fn.cbs_declined
                                             : "the lockstep engine could not take it");
        else
            mkk_report("mkpy: kernel `%s` runs on the %s engine%s%s%s\n", k->name, mkk_engine_name(k, &fn),
                       form ? " (" : "", form ? form : "", form ? ")" : "");
    }
    if (mkk_debug_level() >= 1)
        mkk_debug(1, "kernel `%s`: %s engine%s%s%s", k->name, mkk_engine_name(k, &fn),
              r->how == SCHEME_COOPERATIVE || form ? " (" : "",
              r->how == SCHEME_COOPERATIVE ? (fn.cbs_declined ? fn.cbs_declined : "the lockstep engine could not take it")
              : form                       ? form : "",
              r->how == SCHEME_COOPERATIVE || form ? ")" : "");
    if (r->how == SCHEME_LOCKSTEP) {
        mkk_cbs_kernel cbk = {fn.cbs_run, fn.cbs_info, args};
        char why[1024];
        if (mkk_cbs_check(&cbk, why, sizeof why) < 0) {
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s`: %s. Kernel called at %s", k->name, why, site);
            goto done;
        }
    }
    r->args = args;
    r->base = *plan;
    r->total = plan_total;
    int nth = mk_pool_threads();
    uint64_t threads_per_group = (uint64_t)r->base.tg[0] * r->base.tg[1] * r->base.tg[2];
    /* about 32 chunks per worker (a worker that finishes early finds work;
     * the last chunk keeps the others waiting only briefly), each of at least
     * ~4096 threads of work */
    uint64_t chunk = r->total / ((uint64_t)nth * 32);
    uint64_t min_groups = (4096 + threads_per_group - 1) / threads_per_group;
    if (chunk < min_groups) chunk = min_groups;
    if (chunk < 1) chunk = 1;
    r->chunk = chunk;
    atomic_init(&r->next, 0);
    uint64_t nchunks = (r->total + chunk - 1) / chunk;
    atomic_init(&r->failed, 0);
    atomic_init(&r->cancel, 0);
    r->mark = mk_interrupt_mark();
    const char *tmo = getenv("MKPY_KERNEL_TIMEOUT");
    double timeout = tmo && *tmo ? strtod(tmo, NULL) : 0.0;
    if (timeout > 0) r->deadline_ns = now_ns() + (uint64_t)(timeout * 1e9);
    int ninbufs = k->ninputs + k->noutputs;
    char *findings = NULL;
    int nfound = 0;
    if (fn.checked) {
        mkk_check_buf cb[MKK_MAX_BUFFERS + 1];
        for (int i = 0; i < ninbufs && i <= MKK_MAX_BUFFERS; i++)
            cb[i] = (mkk_check_buf){bufs[i].name, bufs[i].output, bufs[i].base, bufs[i].lo, bufs[i].hi,
                                    bufs[i].itemsize, bufs[i].count};
        if (mkk_check_begin(k->name, &r->base, cb, ninbufs, c->has_init,
                            nchunks < (uint64_t)nth ? (int)nchunks : nth) < 0) {
            mk_nomem();
            goto done;
        }
    }
    if (mkk_debug_level() >= 2)
        mkk_debug(2, "launch `%s`: grid (%lld, %lld, %lld), threadgroup (%u, %u, %u), %llu threadgroups, %s engine, "
                 "called at %s", k->name, (long long)c->grid[0], (long long)c->grid[1], (long long)c->grid[2],
              r->base.tg[0], r->base.tg[1], r->base.tg[2], (unsigned long long)r->total, mkk_engine_name(k, &fn), site);
    /* os_log/printf messages: kept during the launch, printed after it */
    void *print_sink = k->prints ? mkk_print_begin(args) : NULL;
    if (profiling) prof.run_begin = mkk_now_ns();
    watch_launch(r);
    mk_parallel(nchunks < (uint64_t)nth ? (int)nchunks : nth, run_groups, r);
    unwatch_launch(r);
    if (profiling) {
        prof.run_end = mkk_now_ns();
        prof.engine = mkk_engine_name(k, &fn);
        prof.cache = mkk_profile_cache_word(fn.how);
        for (int d = 0; d < 3; d++) {
            prof.grid[d] = c->grid[d];
            prof.threadgroup[d] = r->base.tg[d];
        }
        prof.threads = (uint64_t)r->base.grid[0] * r->base.grid[1] * r->base.grid[2];
        prof.groups = r->total;
        prof.barriers = mkk_count_barriers(k);
        mkk_profile_record_kernel(&prof);
    }
    mkk_print_end(print_sink, k->name);
    if (fn.checked) findings = mkk_check_finish(&nfound);
    if (findings && !atomic_load(&r->cancel)) {
        /* the checker's report; a fault or error of the launch comes after it */
        char tail[1400] = "";
        if (atomic_load(&r->failed) && !r->fault.happened)
            snprintf(tail, sizeof tail, "\n  and then: %s", r->error);
        else if (atomic_load(&r->failed))
            snprintf(tail, sizeof tail, "\n  and then a fault (signal %d) stopped the launch", r->fault.sig);
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s`: the checker (MKPY_CHECK) found %d problem%s:%s%s\n"
                     "Kernel called at %s", k->name, nfound, nfound == 1 ? "" : "s", findings, tail, site);
        free(findings);
        goto done;
    }
    free(findings);
    char what[1400];
    if (atomic_load(&r->cancel) && !atomic_load(&r->failed)) {
        if (r->cancel_reason == CANCEL_TIMEOUT)
            mk_error_set(MK_ERR_RUNTIME,
                         "[metal_kernel] Kernel `%s` ran longer than MKPY_KERNEL_TIMEOUT (%g s) and was stopped, as "
                         "a GPU's watchdog stops it. Kernel called at %s",
                         k->name, timeout, site);
        else
            mk_error_set(MK_ERR_INTERRUPT, "[metal_kernel] Kernel `%s` was interrupted. Kernel called at %s",
                         k->name, site);
        goto done;
    }
    if (atomic_load(&r->failed)) {
        const mk_fault *f = &r->fault;
        if (f->happened && f->stack_overflow)
            mk_error_set(MK_ERR_RUNTIME,
                         "[metal_kernel] Kernel `%s` overflowed a thread's stack (mkpy gives each GPU thread %s). "
                         "Large per-thread arrays belong in device or threadgroup memory. Kernel called at %s",
                         k->name, r->how == SCHEME_COOPERATIVE ? "128 KiB" : "8 MiB", site);
        else if (f->happened && (f->sig == SIGSEGV || f->sig == SIGBUS) && describe_fault(bufs, ninbufs, f, what, sizeof what))
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s` %s. Kernel called at %s", k->name, what, site);
        else if (f->happened && (f->sig == SIGSEGV || f->sig == SIGBUS))
            mk_error_set(MK_ERR_RUNTIME,
                         "[metal_kernel] Kernel `%s` made an invalid memory access at address %#lx (an index far "
                         "out of a buffer's range?). Kernel called at %s",
                         k->name, (unsigned long)f->addr, site);
        else if (f->happened)
            mk_error_set(MK_ERR_RUNTIME,
                         "[metal_kernel] Kernel `%s` raised %s (%s) at address %#lx. Kernel called at %s", k->name,
                         f->sig == SIGFPE ? "SIGFPE" : f->sig == SIGILL ? "SIGILL" : f->sig == SIGTRAP ? "SIGTRAP" : "a signal",
                         f->sig == SIGFPE ? "an arithmetic trap"
                         : f->sig == SIGILL ? "an illegal instruction: __builtin_trap(), or code for another CPU"
                                            : "a trap instruction",
                         (unsigned long)f->pc, site);
        else
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s` (%s engine): %s. Kernel called at %s", k->name,
                         mkk_engine_name(k, &fn), r->error, site);
        goto done;
    }
    if (check_after(bufs, ninbufs, what, sizeof what)) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s` %s. Kernel called at %s", k->name, what, site);
        goto done;
    }
    padding_checked = true; /* the staging blocks go back with zero padding */
    for (int i = 0; i < k->noutputs; i++) {
        kbuf *b = &bufs[k->ninputs + i];
        if (b->stage) memcpy(out[i]->buf->data, b->stage, b->stage_bytes);
    }
    rc = 0;
done:
    if (rc < 0 && fn.so_path && strlen(fn.so_path) > 3 && mk_error_code() == MK_ERR_RUNTIME) {
        /* where to look at what ran */
        char msg[MK_ERRMSG_MAX];
        int n = (int)strlen(fn.so_path) - 3;
        snprintf(msg, sizeof msg, "%s", mk_error_message());
        mk_error_set(MK_ERR_RUNTIME, "%s\nSources on disk: %.*s.metal (generated Metal), %.*s.cpp (translated C++)",
                     msg, n, fn.so_path, n, fn.so_path);
    }
    mkk_jit_release(&fn);
    if (bufs)
        for (int i = 0; i < k->ninputs + k->noutputs; i++)
            (padding_checked ? mk_stage_free_clean : mk_stage_free)(bufs[i].stage, bufs[i].stage_bytes);
    small_free(small, sizeof small, bufs);
    if (copies)
        for (int i = 0; i < k->ninputs; i++)
            if (copies[i]) mk_buffer_decref(copies[i]);
    small_free(small, sizeof small, block);
    return rc;
}

