/* The thread pool: persistent workers, jobs claimed dynamically.
 *
 * A job is nslices calls fn(ctx, i, nth). Slices are claimed from an atomic
 * counter by whichever thread is free, the caller included, so when a worker
 * is late (descheduled on a loaded machine, or still asleep) the caller simply
 * runs the remaining slices itself and never waits for it.
 *
 * Joining a job is guarded by one atomic state word:
 *
 *     bits 63..32  job generation
 *     bit  31      closed
 *     bits 30..0   workers inside the job
 *
 * The caller publishes a job by storing (new generation, open, 0) after
 * writing the job's fields. A worker joins only with a CAS that adds one to
 * the count of that very word, which fails if the generation moved on or the
 * job was closed. Once every slice is claimed and the caller's own are done,
 * the caller sets the closed bit and waits only for the workers inside, which
 * are running (or finishing) slices they claimed. A worker that read an old
 * state cannot join a newer job by mistake: its CAS compares the full word,
 * and a worker that does join reads the job's fields only after the CAS, so
 * it always sees the job it joined. The fields of a job are rewritten only
 * while the state is closed with nobody inside. */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 256
/* a worker polls for the next job this many times (about 50-100 us) before sleeping */
#define WORKER_SPINS 1024
/* a caller waiting for workers inside its job spins this many times between yields */
#define CALLER_SPINS 64
/* mk_parallel_for cuts a job into at most this many chunks per thread */
#define CHUNKS_PER_THREAD 4

#define ST_CLOSED ((uint64_t)1 << 31)
#define ST_COUNT ((uint64_t)ST_CLOSED - 1)
#define ST_GEN(s) ((uint32_t)((s) >> 32))


static struct {
    pthread_once_t once;
    int nthreads;
    pthread_mutex_t mu; /* with `wake`: sleeping workers */
    pthread_cond_t wake;
    atomic_int sleepers;
    pthread_mutex_t submit; /* one job at a time */
    /* the current job; written by the caller while the state is closed and empty */
    mk_job_fn fn;
    void *ctx;
    int nth;               /* passed to fn */
    atomic_int nslices;    /* slices 0..nslices-1; read before joining, to skip needless joins */
    atomic_int next;       /* next slice to claim */
    _Atomic uint64_t state; /* generation, closed, workers inside */
} pool = {.once = PTHREAD_ONCE_INIT,
          .mu = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .submit = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local bool in_job;

/* Claims and runs slices until none is left. */
static atomic_uint interrupts;
static _Thread_local unsigned interrupt_base;
static unsigned job_mark; /* the submitting eval's mark, for the job's slices */

void mk_interrupt_raise(void) { atomic_fetch_add_explicit(&interrupts, 1, memory_order_relaxed); }
void mk_interrupt_begin(void) { interrupt_base = atomic_load_explicit(&interrupts, memory_order_relaxed); }
unsigned mk_interrupt_mark(void) { return interrupt_base; }
int mk_interrupted_since(unsigned mark) { return atomic_load_explicit(&interrupts, memory_order_relaxed) != mark; }
int mk_interrupted(void) { return mk_interrupted_since(interrupt_base); }

static void run_slices(void) {
    mk_job_fn fn = pool.fn;
    void *ctx = pool.ctx;
    int nth = pool.nth, ns = atomic_load_explicit(&pool.nslices, memory_order_relaxed);
    unsigned mark = job_mark;
    for (;;) {
        int i = atomic_fetch_add_explicit(&pool.next, 1, memory_order_relaxed);
        if (i >= ns) break;
        if (mk_interrupted_since(mark)) continue; /* the eval fails: skip the rest */
        fn(ctx, i, nth);
    }
}

/* Waits until the state's generation differs from `seen`; returns the state. */
static uint64_t wait_job(uint32_t seen) {
    uint64_t s;
    for (int spins = 0;; spins++) {
        s = atomic_load_explicit(&pool.state, memory_order_acquire);
        if (ST_GEN(s) != seen) return s;
        if (spins < WORKER_SPINS) {
            mk_cpu_relax();
            continue;
        }
        pthread_mutex_lock(&pool.mu);
        atomic_fetch_add(&pool.sleepers, 1); /* seq_cst: pairs with the caller's store, then load */
        while (ST_GEN(s = atomic_load(&pool.state)) == seen) pthread_cond_wait(&pool.wake, &pool.mu);
        atomic_fetch_sub(&pool.sleepers, 1);
        pthread_mutex_unlock(&pool.mu);
        return s;
    }
}

static void *worker(void *arg) {
    (void)arg;
    uint32_t seen = 0;
    in_job = true; /* calls from inside a slice run inline */
    for (;;) {
        uint64_t s = wait_job(seen);
        seen = ST_GEN(s);
        /* join while the job is open and has slices others have not taken */
        while (!(s & ST_CLOSED) && ST_GEN(s) == seen &&
               (int64_t)(s & ST_COUNT) + 1 < atomic_load_explicit(&pool.nslices, memory_order_relaxed) &&
               atomic_load_explicit(&pool.next, memory_order_relaxed) <
                   atomic_load_explicit(&pool.nslices, memory_order_relaxed)) {
            if (atomic_compare_exchange_weak_explicit(&pool.state, &s, s + 1, memory_order_acquire,
                                                      memory_order_acquire)) {
                run_slices();
                atomic_fetch_sub_explicit(&pool.state, 1, memory_order_release);
                break;
            }
        }
    }
    return NULL;
}

static void pool_init(void) {
    int n = 0;
    const char *env = getenv("MKPY_NUM_THREADS");
    if (env) n = atoi(env);
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    pool.nthreads = 1;
    for (int i = 1; i < n; i++) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        pool.nthreads++;
    }
}

int mk_pool_threads(void) {
    pthread_once(&pool.once, pool_init);
    return pool.nthreads;
}

/* Runs fn(ctx, i, nth) for i in [0, nslices) on the pool, the caller taking
 * part; returns when every slice has run. */
static void run_job(int nslices, int nth, mk_job_fn fn, void *ctx) {
    /* nested calls, and calls while another thread's job holds the pool, run inline */
    if (nslices <= 1 || in_job || mk_pool_threads() <= 1 || pthread_mutex_trylock(&pool.submit) != 0) {
        bool was = in_job;
        in_job = true;
        for (int i = 0; i < nslices; i++) fn(ctx, i, nth);
        in_job = was;
        return;
    }
    pool.fn = fn;
    pool.ctx = ctx;
    job_mark = interrupt_base;
    pool.nth = nth;
    atomic_store_explicit(&pool.nslices, nslices, memory_order_relaxed);
    atomic_store_explicit(&pool.next, 0, memory_order_relaxed);
    uint64_t s = atomic_load_explicit(&pool.state, memory_order_relaxed);
    uint32_t gen = ST_GEN(s) + 1;
    atomic_store(&pool.state, (uint64_t)gen << 32); /* seq_cst: publishes the job, then read sleepers */
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.mu);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.mu);
    }
    in_job = true;
    run_slices();
    in_job = false;
    /* every slice is claimed: close the job, then wait for the workers inside */
    s = atomic_fetch_or_explicit(&pool.state, ST_CLOSED, memory_order_acq_rel) | ST_CLOSED;
    for (int spins = 0; s & ST_COUNT; spins++) {
        if (spins % CALLER_SPINS == CALLER_SPINS - 1)
            sched_yield(); /* give the core to a preempted worker */
        else
            mk_cpu_relax();
        s = atomic_load_explicit(&pool.state, memory_order_acquire);
    }
    pthread_mutex_unlock(&pool.submit);
}

void mk_parallel(int nth, mk_job_fn fn, void *ctx) {
    int avail = mk_pool_threads();
    if (nth > avail) nth = avail;
    if (nth < 1) nth = 1;
    run_job(nth, nth, fn, ctx);
}

void mk_parallel_slices(int nslices, mk_job_fn fn, void *ctx) {
    if (nslices >= 1) run_job(nslices, nslices, fn, ctx);
}

typedef struct {
    int64_t n, nchunks;
    mk_range_fn fn;
    void *ctx;
} range_job;

static void range_slice(void *arg, int ith, int nth) {
    range_job *j = arg;
    (void)nth;
    /* chunk ith of nchunks nearly equal ones (the first n % nchunks one longer) */
    int64_t q = j->n / j->nchunks, r = j->n % j->nchunks;
    int64_t begin = ith * q + (ith < r ? ith : r), end = begin + q + (ith < r);
    if (begin < end) j->fn(j->ctx, begin, end);
}

void mk_parallel_for(int64_t n, int64_t grain, mk_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n < 2 * grain) { /* one chunk: no pool */
        fn(ctx, 0, n);
        return;
    }
    int64_t nchunks = n / grain;
    int threads = in_job ? 1 : mk_pool_threads();
    if (nchunks > (int64_t)threads * CHUNKS_PER_THREAD) nchunks = (int64_t)threads * CHUNKS_PER_THREAD;
    /* a multiple of the thread count, so that threads that all turn up finish together */
    if (nchunks > threads) nchunks -= nchunks % threads;
    if (nchunks <= 1 || threads <= 1) {
        fn(ctx, 0, n);
        return;
    }
    range_job j = {n, nchunks, fn, ctx};
    run_job((int)nchunks, (int)nchunks, range_slice, &j);
}
