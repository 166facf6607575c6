#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define MAX_THREADS 256
#define SPIN_ROUNDS 20000

static struct {
    pthread_once_t once;
    int nthreads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_mutex_t submit; /* one job at a time */
    /* the current job */
    mk_job_fn fn;
    void *ctx;
    int nth;
    atomic_uint generation;
    atomic_int pending;
} pool = {.once = PTHREAD_ONCE_INIT,
          .mu = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .submit = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local bool in_job;

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    unsigned seen = 0;
    in_job = true;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool.generation, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ROUNDS) continue;
            pthread_mutex_lock(&pool.mu);
            while (atomic_load(&pool.generation) == seen) pthread_cond_wait(&pool.wake, &pool.mu);
            pthread_mutex_unlock(&pool.mu);
        }
        seen = gen;
        if (id < pool.nth) {
            pool.fn(pool.ctx, id, pool.nth);
            atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel);
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
        int rc = pthread_create(&t, &attr, worker, (void *)(intptr_t)i);
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        pool.nthreads++;
    }
}

int mk_pool_threads(void) {
    pthread_once(&pool.once, pool_init);
    return pool.nthreads;
}

void mk_parallel(int nth, mk_job_fn fn, void *ctx) {
    int avail = mk_pool_threads();
    if (nth > avail) nth = avail;
    if (nth <= 1 || in_job) {
        if (nth < 1) nth = 1;
        /* run the slices one after another on this thread */
        for (int i = 0; i < nth; i++) fn(ctx, i, nth);
        return;
    }
    pthread_mutex_lock(&pool.submit);
    pool.fn = fn;
    pool.ctx = ctx;
    pool.nth = nth;
    atomic_store(&pool.pending, nth - 1);
    pthread_mutex_lock(&pool.mu);
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
    in_job = true;
    fn(ctx, 0, nth);
    in_job = false;
    while (atomic_load_explicit(&pool.pending, memory_order_acquire) > 0) {
    }
    pthread_mutex_unlock(&pool.submit);
}

typedef struct {
    int64_t n, chunk;
    mk_range_fn fn;
    void *ctx;
} range_job;

static void range_slice(void *arg, int ith, int nth) {
    range_job *j = arg;
    (void)nth;
    int64_t begin = ith * j->chunk;
    int64_t end = begin + j->chunk;
    if (end > j->n) end = j->n;
    if (begin < end) j->fn(j->ctx, begin, end);
}

void mk_parallel_for(int64_t n, int64_t grain, mk_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t nth = n / grain;
    int threads = in_job ? 1 : mk_pool_threads();
    if (nth > threads) nth = threads;
    if (nth <= 1) {
        fn(ctx, 0, n);
        return;
    }
    range_job j = {n, (n + nth - 1) / nth, fn, ctx};
    mk_parallel((int)nth, range_slice, &j);
}
