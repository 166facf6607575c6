/* The lockstep engine's runtime: runs a threadgroup of a kernel compiled by
 * the region-splitting pass (ir/cbs_ir.c) without a stack per thread.
 *
 * Every thread of the group has a resume point, next[i] (a site number; 0 is
 * the start, MKPY_CBS_DONE once it returned). The compiled
 * mkpy_kernel_cbs_run(site, ...) runs every thread waiting at `site` up to
 * its next site. The scheduler repeats:
 *   - among the sites where threads wait, other than threadgroup barriers,
 *     release the one of lowest order (the compiler's thread-frontier rank),
 *     with all its threads, of every SIMD-group: so SIMD-groups advance
 *     together and a divergent branch or loop runs before the code after it;
 *   - an exchange site (a SIMD-group or quad-group function) first gathers
 *     the values the released lanes deposited into their SIMD-group's
 *     buffer, with the mask of those lanes (Metal's active lanes);
 *   - once every live thread waits at a threadgroup barrier, they must all
 *     wait at the same one (same site: the same place in the code, not just
 *     the same line), which is then released; else the launch fails with a
 *     divergence error naming both barriers.
 * Threadgroup memory (`static thread_local` in the compiled code) is the
 * worker thread's, as with fibers; its size is checked once per launch. */
#include "backend/cpu/cbs.h"
#include "backend/cpu/fiber.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_SIMDGROUPS (MKPY_CBS_MAX_THREADS / MKPY_SIMD_WIDTH)

typedef struct {
    unsigned char *frame;
    size_t frame_cap;
    unsigned char *tg; /* threadgroup variables */
    size_t tg_cap;
    unsigned char *deposit; /* MKPY_SIMD_SLOT per thread */
    unsigned char *simd;    /* MKPY_SIMD_BUFFER per SIMD-group */
    uint32_t masks[MAX_SIMDGROUPS];
    uint32_t next[MKPY_CBS_MAX_THREADS];
} cbs_worker;

/* Per thread (pool workers and Python threads alike), freed when the thread
 * exits. */
static pthread_key_t worker_key;
static pthread_once_t worker_once = PTHREAD_ONCE_INIT;

static void worker_free(void *p) {
    cbs_worker *w = p;
    if (!w) return;
    free(w->frame);
    free(w->tg);
    free(w->deposit);
    free(w->simd);
    free(w);
}

static void make_key(void) { pthread_key_create(&worker_key, worker_free); }

static cbs_worker *get_worker(size_t frame_bytes, size_t tg_bytes) {
    pthread_once(&worker_once, make_key);
    cbs_worker *w = pthread_getspecific(worker_key);
    if (!w) {
        w = calloc(1, sizeof *w);
        if (!w) return NULL;
        w->deposit = aligned_alloc(64, (size_t)MKPY_CBS_MAX_THREADS * MKPY_SIMD_SLOT);
        w->simd = aligned_alloc(64, (size_t)MAX_SIMDGROUPS * MKPY_SIMD_BUFFER);
        if (!w->deposit || !w->simd) {
            worker_free(w);
            return NULL;
        }
        pthread_setspecific(worker_key, w);
    }
    size_t need = frame_bytes * MKPY_CBS_MAX_THREADS;
    if (need > w->frame_cap) {
        free(w->frame);
        w->frame_cap = 0;
        w->frame = aligned_alloc(64, (need + 63) / 64 * 64);
        if (!w->frame) return NULL;
        w->frame_cap = need;
    }
    if (tg_bytes > w->tg_cap) {
        free(w->tg);
        w->tg_cap = 0;
        w->tg = aligned_alloc(64, (tg_bytes + 63) / 64 * 64);
        if (!w->tg) return NULL;
        w->tg_cap = tg_bytes;
    }
    return w;
}

/* The shape of threadgroup g (the last groups may be partial); returns its
 * thread count. */
static unsigned group_shape(const mkk_launch *L, uint64_t g, uint32_t t[3]) {
    const uint64_t nx = L->ngroups[0], ny = L->ngroups[1];
    uint64_t b[3] = {g, 0, 0};
    if (ny != 1 || L->ngroups[2] != 1) { /* a 1-D grid of groups needs no division */
        b[0] = g % nx;
        b[1] = (g / nx) % ny;
        b[2] = g / (nx * ny);
    }
    unsigned count = 1;
    for (int d = 0; d < 3; d++) {
        t[d] = mkpy_group_extent(L->grid[d], L->tg[d], b[d]);
        count *= t[d];
    }
    return count;
}

/* The lanes (bit l) among the first `lanes` of a SIMD-group whose thread
 * waits at `site`: 4 lanes a compare (a scan of 32 branches per SIMD-group
 * was a third of the scheduler's time in the `simd_sum` row reduction,
 * whose second exchange releases one SIMD-group of eight). */
static uint32_t lanes_at(const uint32_t *next, unsigned lanes, uint32_t site) {
    uint32_t mask = 0;
    unsigned l = 0;
#ifdef __SSE2__
    const __m128i want = _mm_set1_epi32((int)site);
    for (; l + 4 <= lanes; l += 4) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(next + l));
        mask |= (uint32_t)_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(v, want))) << l;
    }
#endif
    for (; l < lanes; l++) mask |= (uint32_t)(next[l] == site) << l;
    return mask;
}

int mkk_cbs_check(const mkk_cbs_kernel *k, char *error, size_t errn) {
    const struct mkpy_cbs_info *info = k->info;
    if (info->tg_bytes > MKPY_MAX_THREADGROUP_MEMORY) {
        snprintf(error, errn,
                 "its threadgroup memory reaches %llu bytes at %s:%d, more than the %d bytes (32 KiB) a threadgroup "
                 "may use on Apple GPUs",
                 (unsigned long long)info->tg_bytes, info->tg_file ? info->tg_file : "?", info->tg_line,
                 MKPY_MAX_THREADGROUP_MEMORY);
        return -1;
    }
    return 0;
}

static int run_group(const mkk_cbs_kernel *k, cbs_worker *w, struct mkpy_cbs_ctx *ctx, const mkk_launch *L,
                     uint64_t g, const _Atomic int *cancel, char *error, size_t errn) {
    const struct mkpy_cbs_info *info = k->info;
    const struct mkpy_cbs_site *sites = info->sites;
    uint32_t t[3];
    const unsigned count = group_shape(L, g, t);
    uint32_t *next = w->next; /* the first run (site 0, every thread) sets each thread's entry */
#define RUN_X(site, dense, tx) \
    k->run(site, k->args, L, g, ctx->frame, ctx->deposit, ctx->simd, ctx->masks, next, ctx->tg, tx, t[1], t[2], dense)
#define RUN(site, dense) RUN_X(site, dense, t[0])
    /* the compact run function (info->form) reports every thread's site
     * after a run, the other only where the threads it ran went */
    const int compact = info->form != NULL;
    uint64_t present = RUN(0, 1); /* the sites where threads wait, as bits (63: done or site >= 63) */
    int any_done = 0;
    const uint32_t nsites = info->nsites;
    for (;;) {
        if (cancel && atomic_load_explicit(cancel, memory_order_relaxed)) { /* Ctrl-C or the watchdog: at every site */
            snprintf(error, errn, "cancelled");
            return -1;
        }
        uint32_t best = MKPY_CBS_DONE, barrier = MKPY_CBS_DONE, other = MKPY_CBS_DONE;
        int dense = 0; /* every thread waits at the one site released */
        if (nsites < 63) {
            /* the run functions say where the threads they ran went */
            any_done |= (int)(present >> 63);
            uint64_t sites_mask = present & ~(1ull << 63);
            dense = !any_done && sites_mask && !(sites_mask & (sites_mask - 1));
            for (uint64_t m = sites_mask; m; m &= m - 1) {
                uint32_t s = (uint32_t)__builtin_ctzll(m);
                if (sites[s].kind == MKPY_CBS_BARRIER) {
                    if (barrier == MKPY_CBS_DONE)
                        barrier = s;
                    else
                        other = s;
                } else if (best == MKPY_CBS_DONE || sites[s].order < sites[best].order) {
                    best = s;
                }
            }
            present = sites_mask;
        } else {
            /* dense when every thread waits at one site (a run there may
             * then chain on: the compact run function's, cbs_ir.c) */
            const uint32_t first = next[0];
            uint32_t prev = MKPY_CBS_DONE;
            int same = 1;
            for (unsigned i = 0; i < count; i++) {
                uint32_t s = next[i];
                same &= s == first;
                /* neighbours mostly wait at one site: looked at once (what
                 * follows gives the same answer for the same site twice) */
                if (s == prev) continue;
                prev = s;
                if (s == MKPY_CBS_DONE) continue;
                if (sites[s].kind == MKPY_CBS_BARRIER) {
                    if (barrier == MKPY_CBS_DONE)
                        barrier = s;
                    else if (s != barrier)
                        other = s;
                } else if (best == MKPY_CBS_DONE || sites[s].order < sites[best].order ||
                           (sites[s].order == sites[best].order && s < best)) {
                    best = s;
                }
            }
            dense = same && first != MKPY_CBS_DONE;
        }
        if (best != MKPY_CBS_DONE) {
            uint32_t tx = t[0]; /* the x extent the run walks */
            if (sites[best].kind == MKPY_CBS_EXCHANGE || sites[best].kind == MKPY_CBS_SIMD_BARRIER) {
                unsigned hi = 0; /* past the last thread waiting here */
                /* per SIMD-group: the released lanes and their values (in
                 * the thread's frame slot, or copied to its deposit slot) */
                const struct mkpy_cbs_site *st = &sites[best];
                const unsigned char *dep = st->dep_stride ? ctx->frame + st->dep_off : w->deposit;
                const size_t dstride = st->dep_stride ? st->dep_stride : MKPY_SIMD_SLOT;
                const size_t dsize = st->dep_stride ? st->dep_size : MKPY_SIMD_SLOT;
                for (unsigned sg = 0; sg * MKPY_SIMD_WIDTH < count; sg++) {
                    uint32_t mask = 0;
                    unsigned char *buf = w->simd + (size_t)sg * MKPY_SIMD_BUFFER;
                    const unsigned lanes = count - sg * MKPY_SIMD_WIDTH < MKPY_SIMD_WIDTH ? count - sg * MKPY_SIMD_WIDTH
                                                                                         : MKPY_SIMD_WIDTH;
                    if (dense && dsize == 4) {
                        /* every thread waits here: every lane, no test per lane */
                        const unsigned char *v = dep + (size_t)sg * MKPY_SIMD_WIDTH * dstride;
                        for (unsigned l = 0; l < lanes; l++) memcpy(buf + l * MKPY_SIMD_SLOT, v + l * dstride, 4);
                        w->masks[sg] = lanes == 32 ? ~0u : (1u << lanes) - 1u;
                        memset(buf + MKPY_SIMD_MEMO_VALID, 0, sizeof(uint32_t));
                        continue;
                    }
                    const uint32_t waiting = lanes_at(next + sg * MKPY_SIMD_WIDTH, lanes, best);
                    for (uint32_t m = waiting; m; m &= m - 1) {
                        const unsigned l = (unsigned)__builtin_ctz(m), i = sg * MKPY_SIMD_WIDTH + l;
                        mask |= 1u << l;
                        const unsigned char *v = dep + (size_t)i * dstride;
                        unsigned char *to = buf + l * MKPY_SIMD_SLOT;
                        if (dsize == 4) /* a float or int: one move, not a call */
                            memcpy(to, v, 4);
                        else
                            memcpy(to, v, dsize);
                    }
                    if (!mask) continue;
                    hi = sg * MKPY_SIMD_WIDTH + 32 - (unsigned)__builtin_clz(mask);
                    w->masks[sg] = mask;
                    memset(buf + MKPY_SIMD_MEMO_VALID, 0, sizeof(uint32_t));
                }
                /* A checked run walks the group's threads and runs those
                 * waiting here. In a group one thread tall and deep, thread
                 * x is index x, so it need not walk past the last of them (the
                 * `simd_sum` row reduction's second exchange is SIMD-group 0's:
                 * 32 of 256 threads, where the walk was ~10% of the kernel).
                 * Not in the compact run function, which looks at every
                 * thread's site after a checked run. */
                if (!dense && hi && t[1] == 1 && t[2] == 1 && !compact) tx = hi;
            }
            uint64_t went = RUN_X(best, dense, tx);
            if (nsites < 63) present = compact ? went : (present & ~(1ull << best)) | went;
            continue;
        }
        if (barrier == MKPY_CBS_DONE) return 0; /* every thread returned */
        if (other != MKPY_CBS_DONE) {
            const struct mkpy_cbs_site *a = &sites[barrier], *b = &sites[other];
            if (b->order < a->order) {
                const struct mkpy_cbs_site *t = a;
                a = b;
                b = t;
            }
            snprintf(error, errn,
                     "threads of one threadgroup wait at different barriers (%s:%d:%d and %s:%d:%d); every thread "
                     "must reach the same threadgroup_barrier (threads that return count as arrived)",
                     a->file ? a->file : "?", a->line, a->col, b->file ? b->file : "?", b->line, b->col);
            return -1;
        }
        uint64_t went = RUN(barrier, dense);
        if (nsites < 63) present = compact ? went : (present & ~(1ull << barrier)) | went;
    }
#undef RUN
#undef RUN_X
}

/* The threadgroup that the g-th step of a launch runs. Metal leaves the
 * order of threadgroups open; a 2-D grid of groups is walked in bands of
 * MKK_BAND rows, column by column inside a band, so the groups that share a
 * column (a GEMM's panel of B) run close together, while the band's rows
 * share their panels of A. */
#define MKK_BAND 8
static uint64_t band_order(const mkk_launch *L, uint64_t g) {
    const uint64_t nx = L->ngroups[0], ny = L->ngroups[1];
    if (ny < 2 || nx < 2) return g;
    const uint64_t plane = nx * ny, z = g / plane, r = g % plane;
    const uint64_t band = r / (MKK_BAND * nx), in = r % (MKK_BAND * nx);
    const uint64_t y0 = band * MKK_BAND, h = ny - y0 < MKK_BAND ? ny - y0 : MKK_BAND;
    return z * plane + (y0 + in % h) * nx + in / h;
}

int mkk_cbs_run(const mkk_cbs_kernel *k, const mkk_launch *L, char *error, size_t errn) {
    cbs_worker *w = get_worker(k->info->frame_bytes, k->info->tg_alloc);
    if (!w) {
        snprintf(error, errn, "out of memory for the threads' state (%u bytes per thread)", k->info->frame_bytes);
        return -1;
    }
    struct mkpy_cbs_ctx ctx = {w->frame, w->deposit, w->simd, w->masks, w->tg};
    const _Atomic int *cancel = mk_fault_cancel_flag(); /* fixed for the guarded call */
    for (uint64_t g = L->group_begin; g < L->group_end; g++)
        if (run_group(k, w, &ctx, L, band_order(L, g), cancel, error, errn) < 0) return -1;
    return 0;
}
