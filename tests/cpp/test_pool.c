/* Stress test of the thread pool (csrc/core/pool.c), built by tests/test_pool.py:
 *
 *     cc -std=c11 -O2 -pthread -Icsrc tests/cpp/test_pool.c -o test_pool && ./test_pool
 *
 * Checks that every slice of mk_parallel and every index of mk_parallel_for
 * runs exactly once, for many small jobs back to back (workers join late,
 * or not at all), nested calls (run inline), and jobs submitted by several
 * threads at once. Prints "ok" and exits 0 on success. */
#define _GNU_SOURCE
#include "core/pool.c"

#include <stdio.h>
#include <string.h>

#define MAXN 4096

static atomic_int failures;
#define CHECK(cond, ...)                                                                               \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            if (failures++ < 20) {                                                                     \
                fprintf(stderr, __VA_ARGS__);                                                          \
                fputc('\n', stderr);                                                                   \
            }                                                                                          \
        }                                                                                              \
    } while (0)

typedef struct {
    atomic_int hits[MAXN];
    int nth;
    atomic_int bad_nth;
    int spin; /* busy work per slice */
} slices_ctx;

static void burn(int n) {
    volatile unsigned x = 1;
    for (int i = 0; i < n; i++) x = x * 1664525u + 1013904223u;
}

static void slice_fn(void *c, int ith, int nth) {
    slices_ctx *s = c;
    if (nth != s->nth || ith < 0 || ith >= nth) atomic_fetch_add(&s->bad_nth, 1);
    else atomic_fetch_add(&s->hits[ith], 1);
    burn(s->spin);
}

static void check_parallel(int nth, int spin) {
    slices_ctx *s = calloc(1, sizeof *s); /* not static: nested calls run this on several threads */
    int avail = mk_pool_threads();
    s->nth = nth > avail ? avail : nth < 1 ? 1 : nth;
    s->spin = spin;
    mk_parallel(nth, slice_fn, s);
    CHECK(atomic_load(&s->bad_nth) == 0, "mk_parallel(%d): wrong ith/nth", nth);
    for (int i = 0; i < s->nth; i++)
        CHECK(atomic_load(&s->hits[i]) == 1, "mk_parallel(%d): slice %d ran %d times", nth, i,
              atomic_load(&s->hits[i]));
    free(s);
}

typedef struct {
    unsigned char *seen; /* one counter per index, no atomics: ranges must not overlap */
    int64_t n;
    atomic_int bad;
} range_ctx;

static void range_fn(void *c, int64_t b, int64_t e) {
    range_ctx *r = c;
    if (b < 0 || e > r->n || b >= e) {
        atomic_fetch_add(&r->bad, 1);
        return;
    }
    for (int64_t i = b; i < e; i++) r->seen[i]++;
}

static void check_for(int64_t n, int64_t grain) {
    range_ctx r = {calloc((size_t)n + 1, 1), n, 0};
    mk_parallel_for(n, grain, range_fn, &r);
    CHECK(atomic_load(&r.bad) == 0, "mk_parallel_for(%lld, %lld): bad range", (long long)n, (long long)grain);
    for (int64_t i = 0; i < n; i++)
        if (r.seen[i] != 1) {
            CHECK(0, "mk_parallel_for(%lld, %lld): index %lld visited %d times", (long long)n, (long long)grain,
                  (long long)i, r.seen[i]);
            break;
        }
    free(r.seen);
}

/* nested: every slice runs a whole mk_parallel_for and a mk_parallel itself */
typedef struct {
    atomic_int outer[64];
    atomic_long inner_sum;
} nested_ctx;

static void nested_range(void *c, int64_t b, int64_t e) {
    nested_ctx *n = c;
    long s = 0;
    for (int64_t i = b; i < e; i++) s += i;
    atomic_fetch_add(&n->inner_sum, s);
}

static void nested_slice(void *c, int ith, int nth) {
    nested_ctx *n = c;
    (void)nth;
    atomic_fetch_add(&n->outer[ith], 1);
    mk_parallel_for(1000, 10, nested_range, n);
    check_parallel(4, 0);
}

static void *submitter(void *arg) {
    int id = (int)(intptr_t)arg;
    for (int k = 0; k < 3000; k++) {
        range_ctx r = {calloc(5000, 1), 5000, 0};
        mk_parallel_for(5000, 1 + (k + id) % 700, range_fn, &r);
        for (int i = 0; i < 5000; i++)
            if (r.seen[i] != 1) {
                CHECK(0, "thread %d job %d: index %d visited %d times", id, k, i, r.seen[i]);
                break;
            }
        CHECK(atomic_load(&r.bad) == 0, "thread %d: bad range", id);
        free(r.seen);
    }
    return NULL;
}

int main(void) {
    int threads = mk_pool_threads();
    /* many small jobs back to back: workers are often still on their way */
    for (int k = 0; k < 20000; k++) check_parallel(1 + k % (threads + 2), k % 7 == 0 ? 2000 : 0);
    for (int k = 0; k < 20000; k++) check_for(1 + (k * 7919) % 3000, 1 + k % 97);
    check_for(1000003, 1);
    check_for(1000003, 32768);
    /* a late worker must not be waited for: a job of slow slices */
    for (int k = 0; k < 50; k++) check_parallel(threads, 200000);
    /* nested calls run inline */
    for (int k = 0; k < 200; k++) {
        nested_ctx n;
        memset(&n, 0, sizeof n);
        int nth = threads < 64 ? threads : 64;
        mk_parallel(nth, nested_slice, &n);
        for (int i = 0; i < nth; i++) CHECK(atomic_load(&n.outer[i]) == 1, "nested: outer slice %d", i);
        CHECK(atomic_load(&n.inner_sum) == (long)nth * 999 * 1000 / 2, "nested: inner sum %ld",
              atomic_load(&n.inner_sum));
    }
    /* several threads submitting at once: one gets the pool, the others run inline */
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, submitter, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("ok %d threads\n", threads);
    return 0;
}
