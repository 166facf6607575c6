/* The checker mode's runtime (issue #12; the compiler side is
 * csrc/backend/cpu/ir/check_ir.c, the user's view docs/kernels.md "Checker mode").
 *
 * A checked launch runs its threadgroups on the pool's threads, each group
 * on one of them (threads in order on the plain path, on fibers for
 * cooperative kernels), and every access of kernel code to a buffer or
 * threadgroup variable comes to the hooks in the kernel (mkpy_check.h),
 * which handle the common cases themselves, and here. We keep a shadow
 * entry per element of every output and every threadgroup variable: the
 * last thread that wrote it, the last that read it, the threadgroup-barrier
 * epoch of each access and its source site.
 * Races are decided from that record, not from the order the threads ran
 * in: two accesses to an element by different threads, one a write, race
 * unless they are in one threadgroup with a barrier between them (the later
 * thread has passed more barriers). Atomics never race. So a race is found
 * whatever the schedule, including races whose result happens to be right.
 *
 * Findings are counted per kind; the first few of each kind are kept as
 * text. An out-of-bounds access is given a scratch block instead (zeros for
 * a load), so it never changes memory and the launch goes on. */
#include "backend/cpu/check.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/coop.h"
#include "core/pool.h"

#define NOINLINE __attribute__((noinline))
typedef struct mkpy_check_thread cthread;

#define SHOWN 5               /* findings of each kind listed in the report */
#define WINDOW ((size_t)4 << 20) /* out-of-bounds attribution: bytes around a buffer */
#define MAX_TG_VARS 256
#define SCRATCH 4096
#define MAX_SHADOWED ((int64_t)1 << 22) /* output elements with race and unwritten checks */
#define BLOCK MKPY_CHECK_BLOCK         /* output elements per shadow block */
#define ARENA_CHUNK ((size_t)1 << 20)  /* a worker's allocation unit for expanded blocks */


enum { K_OOB, K_TG_RACE, K_DEV_RACE, K_UNINIT, K_UNWRITTEN, K_DIV, NKINDS };
static const char *const kind_names[NKINDS] = {
    "out-of-bounds accesses",
    "threadgroup memory races",
    "device memory races",
    "reads of uninitialised threadgroup memory",
    "output elements no thread wrote",
    "integer division faults",
};

/* The full record of one element. */
typedef struct {
    uint64_t w, r, r2;    /* thread ids (group * threads per group + index + 1); 0: none */
    uint32_t we, re, r2e; /* the threads' barrier epochs at the access */
    uint32_t gen;         /* threadgroup variables: the group the record belongs to */
    uint32_t wsite, rsite, r2site; /* the last store, the last two loads by different threads */
    uint32_t atomic;
} shadow;

/* The records of BLOCK output elements (struct mkpy_check_block). Until
 * something else happens, a block stays "affine": each element stored once,
 * element k by thread base + k, all at one site and epoch, never loaded
 * (what an element-wise kernel does), which a bit mask and three numbers
 * describe; the kernel's own hook (mkpy_check.h) does these stores. Anything
 * else (a load, a second store, atomics, another pattern) first expands it
 * into full records (`full`, shadow[BLOCK]) holding exactly what they would
 * have held from the start. `lost`: no memory for them, not checked further.
 * Pool threads running groups in parallel take the block's lock. */
typedef struct mkpy_check_block block;

typedef struct {
    mkk_check_buf b;
    block *blk; /* outputs: a block per BLOCK elements of [lo, hi) */
    int64_t nsh; /* elements with records */
    int shift;   /* log2(itemsize), or -1 */
} cbuf;

typedef struct {
    const char *addr;
    uint64_t size, elem;
    uint32_t name;
    shadow *sh;
} tgvar;

typedef struct {
    uint64_t group, seq; /* the order of findings: by threadgroup, then as they came */
    char text[600];
} shown_t;

typedef struct arena_chunk {
    struct arena_chunk *next;
    _Alignas(64) unsigned char data[];
} arena_chunk;

/* What one pool thread keeps during a checked launch: its threadgroup (the
 * groups it runs, one at a time), the threadgroup variables (thread_local
 * statics: each pool thread has its own), barrier epochs, its findings. */
typedef struct {
    uint64_t group, gbase; /* the group being run (UINT64_MAX: none yet); group * threads per group */
    uint32_t gen;
    bool oom;
    struct mkpy_check_thread *plain; /* the plain loop's thread record */
    struct mkpy_check_thread *fiber[MKPY_CBS_MAX_THREADS]; /* the fiber engine's, by index */
    const char *tstack_lo, *tstack_hi;
    bool have_tstack;
    int last_read, last_write; /* the buffers hit last */
    int ntg;
    const char *tg_lo, *tg_hi; /* the span of the threadgroup variables */
    tgvar tg[MAX_TG_VARS];
    arena_chunk *chunks;
    unsigned char *bump;
    size_t left;
    uint64_t seq;
    int64_t count[NKINDS];
    shown_t shown[NKINDS][SHOWN];
    _Alignas(64) unsigned char scratch[SCRATCH];
} worker;

static struct {
    pthread_mutex_t mu;
    uint64_t launch; /* a number per launch (the pool threads' attachments are per launch) */
    const char *kernel;
    mkk_launch L;
    uint64_t tgmax; /* threads of a full threadgroup */
    cbuf *bufs;
    int nbufs;
    int unshadowed; /* outputs too large for race and unwritten checks */
    bool has_init, locking;
    const char *const *sites;
    uint32_t nsites;
    worker *workers;
    int nworkers;
    int nattached; /* atomic */
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local uint64_t tl_launch;
static _Thread_local worker *tl_worker;

/* ------------------------------------------------------------ switches */

static int process_switch = -1; /* mx.metal.set_check; -1: MKPY_CHECK decides */
static _Thread_local int thread_scope = -1;

void mkk_check_set(int on) { __atomic_store_n(&process_switch, on, __ATOMIC_RELAXED); }

int mkk_check_scope(int on) {
    int old = thread_scope;
    thread_scope = on;
    return old;
}

bool mkk_check_requested(void) {
    if (thread_scope >= 0) return thread_scope;
    int p = __atomic_load_n(&process_switch, __ATOMIC_RELAXED);
    if (p >= 0) return p;
    const char *e = getenv("MKPY_CHECK");
    return e && *e && strcmp(e, "0") != 0;
}

/* ------------------------------------------------------------- threads */

static const char *site_text(uint32_t site) {
    const char *const *t = __atomic_load_n(&S.sites, __ATOMIC_ACQUIRE);
    return t && site < S.nsites && t[site] ? t[site] : "?";
}

/* The calling pool thread's state for this launch. */
static worker *my_worker(void) {
    if (tl_launch == S.launch && tl_worker) return tl_worker;
    int k = __atomic_fetch_add(&S.nattached, 1, __ATOMIC_RELAXED);
    /* more pool threads than the launch was planned for cannot happen; share the last one */
    worker *w = &S.workers[k < S.nworkers ? k : S.nworkers - 1];
    tl_launch = S.launch;
    tl_worker = w;
    return w;
}

static void api_attach(struct mkpy_check_thread *t, const char *const *sites, uint32_t nsites) {
    worker *w = my_worker();
    if (!__atomic_load_n(&S.sites, __ATOMIC_ACQUIRE)) {
        S.nsites = nsites; /* the same values from every thread of the launch */
        __atomic_store_n(&S.sites, sites, __ATOMIC_RELEASE);
    }
    t->worker = w;
    t->tgmax = S.tgmax;
    w->plain = t;
    if (t->index < MKPY_CBS_MAX_THREADS) w->fiber[t->index] = t;
}

/* The running GPU thread, for a hook called outside the instrumented body. */
static struct mkpy_check_thread *find_thread(struct mkpy_check_thread *tmp) {
    worker *w = my_worker();
    const char *lo, *hi;
    uint64_t g;
    unsigned i;
    if (mkk_coop_current(&g, &i, &lo, &hi) == 0) {
        if (i < MKPY_CBS_MAX_THREADS && w->fiber[i] && w->fiber[i]->group == g && w->fiber[i]->index == i)
            return w->fiber[i];
        *tmp = (struct mkpy_check_thread){.group = g, .index = i, .worker = w};
        return tmp;
    }
    if (w->plain) return w->plain;
    *tmp = (struct mkpy_check_thread){.worker = w};
    return tmp;
}

/* A new threadgroup starts with fresh threadgroup records (its threads'
 * epochs start at 0 in their own records). */
static NOINLINE void new_group(worker *w, uint64_t g) {
    w->group = g;
    w->gbase = g * S.tgmax;
    w->gen++;
}

static inline worker *enter(struct mkpy_check_thread **tp, struct mkpy_check_thread *tmp) {
    if (!*tp) *tp = find_thread(tmp);
    worker *w = (*tp)->worker;
    if ((*tp)->group != w->group) new_group(w, (*tp)->group);
    return w;
}

static inline uint64_t tid(const cthread *t) { return t->group * S.tgmax + t->index + 1; }

/* "(x, y, z)": thread_position_in_grid of a thread id. */
static void describe_thread(uint64_t id, char *out, size_t n) {
    const mkk_launch *L = &S.L;
    uint64_t g = (id - 1) / S.tgmax, i = (id - 1) % S.tgmax;
    const uint64_t b[3] = {g % L->ngroups[0], (g / L->ngroups[0]) % L->ngroups[1],
                           g / ((uint64_t)L->ngroups[0] * L->ngroups[1])};
    unsigned a[3];
    for (int d = 0; d < 3; d++) a[d] = mkpy_group_extent(L->grid[d], L->tg[d], b[d]);
    const uint64_t l[3] = {i % a[0], (i / a[0]) % a[1], i / ((uint64_t)a[0] * a[1])};
    snprintf(out, n, "thread (%llu, %llu, %llu)", (unsigned long long)(b[0] * L->tg[0] + l[0]),
             (unsigned long long)(b[1] * L->tg[1] + l[1]), (unsigned long long)(b[2] * L->tg[2] + l[2]));
}

/* Counts a finding; returns the text to fill when it is among the first
 * SHOWN of its kind (of this worker), else NULL: the text is formatted only
 * for findings that may be shown. */
static char *finding(worker *w, int kind) {
    int64_t k = w->count[kind]++;
    uint64_t seq = w->seq++;
    if (k >= SHOWN) return NULL;
    w->shown[kind][k].group = w->group;
    w->shown[kind][k].seq = seq;
    return w->shown[kind][k].text;
}
#define SHOWN_TEXT sizeof(((shown_t *)0)->text)

/* Two accesses by threads a and b (the running one, in the worker's group)
 * at epochs ea and eb are unordered when the threads differ and are in
 * different threadgroups, or in one with no threadgroup barrier between the
 * accesses. */
static inline bool unordered(const worker *w, uint64_t a, uint32_t ea, uint64_t b, uint32_t eb) {
    if (a == b) return false;
    if (a - 1 - w->gbase >= S.tgmax) return true; /* another group */
    return ea == eb;
}

/* The shadow update of one element, element `elem` of the variable or
 * output `name` (for the report). */
static void record(worker *w, shadow *s, int race_kind, uint64_t me, uint32_t ep, uint32_t flags, uint32_t site,
                   const char *name, long long elem, bool tg) {
    const bool write = flags & MKPY_CHK_WRITE;
    if (flags & MKPY_CHK_ATOMIC) s->atomic = 1;
    if (s->atomic) {
        if (write) s->w = me; /* written, for the unwritten-output check */
        return;
    }
    uint64_t other = 0;
    uint32_t other_site = 0;
    const char *other_did = NULL;
    if (s->w && unordered(w, s->w, s->we, me, ep)) {
        other = s->w, other_site = s->wsite, other_did = "stored";
    } else if (write && s->r && unordered(w, s->r, s->re, me, ep)) {
        other = s->r, other_site = s->rsite, other_did = "loaded";
    } else if (write && s->r2 && unordered(w, s->r2, s->r2e, me, ep)) {
        other = s->r2, other_site = s->r2site, other_did = "loaded";
    }
    char *text;
    if (other && (text = finding(w, race_kind))) {
        char t1[64], t2[64];
        describe_thread(other, t1, sizeof t1);
        describe_thread(me, t2, sizeof t2);
        snprintf(text, SHOWN_TEXT, "%s `%s` element %lld: %s %s it at %s and %s %s it at %s, with no %s between them",
                 tg ? "threadgroup variable" : "output", name, elem, t1, other_did, site_text(other_site), t2,
                 write ? "stored" : "loaded", site_text(site), tg ? "threadgroup_barrier" : "barrier or atomic");
    }
    if (write) {
        s->w = me;
        s->we = ep;
        s->wsite = site;
        s->r = s->r2 = 0;
    } else {
        if (s->r && s->r != me) {
            s->r2 = s->r;
            s->r2e = s->re;
            s->r2site = s->rsite;
        }
        s->r = me;
        s->re = ep;
        s->rsite = site;
    }
}

static tgvar *find_tg(worker *w, const char *a) {
    for (int v = 0; v < w->ntg; v++)
        if (w->tg[v].addr == a) return &w->tg[v];
    return NULL;
}

static tgvar *tg_containing(worker *w, const char *a) {
    for (int v = 0; v < w->ntg; v++)
        if (a >= w->tg[v].addr && a < w->tg[v].addr + w->tg[v].size) return &w->tg[v];
    return NULL;
}

static void *scratch(worker *w, uint64_t size, uint32_t flags, void *p) {
    if (size > SCRATCH) return p;
    if (!(flags & MKPY_CHK_WRITE) || (flags & MKPY_CHK_ATOMIC)) memset(w->scratch, 0, size);
    return w->scratch;
}

static NOINLINE void *tg_access(worker *w, const cthread *t, tgvar *v, char *a, uint64_t size,
                       uint32_t flags, uint32_t site) {
    char th[64], *text;
    if (a < v->addr || a + size > v->addr + v->size) {
        if ((text = finding(w, K_OOB))) {
            describe_thread(tid(t), th, sizeof th);
            long long e = a >= v->addr ? (long long)((uint64_t)(a - v->addr) / v->elem)
                                       : -(long long)(((uint64_t)(v->addr - a) + v->elem - 1) / v->elem);
            snprintf(text, SHOWN_TEXT,
                     "%s %s element %lld of threadgroup variable `%s` (%llu elements of %llu bytes) at %s",
                     th, flags & MKPY_CHK_WRITE ? "stored" : "loaded", e, site_text(v->name),
                     (unsigned long long)(v->size / v->elem), (unsigned long long)v->elem, site_text(site));
        }
        return scratch(w, size, flags, a);
    }
    if (!v->sh) return a;
    uint64_t e0 = (uint64_t)(a - v->addr) / v->elem, e1 = (uint64_t)(a + size - 1 - v->addr) / v->elem;
    const uint64_t me = tid(t);
    const uint32_t ep = t->epoch;
    for (uint64_t e = e0; e <= e1; e++) {
        shadow *s = &v->sh[e];
        if (s->gen != w->gen) memset(s, 0, sizeof *s), s->gen = w->gen;
        if (!(flags & MKPY_CHK_WRITE) && !s->w && !(flags & MKPY_CHK_ATOMIC) && !s->atomic &&
            (text = finding(w, K_UNINIT))) {
            describe_thread(me, th, sizeof th);
            snprintf(text, SHOWN_TEXT,
                     "%s loaded element %llu of threadgroup variable `%s` at %s, which no thread of its "
                                       "threadgroup had stored since the threadgroup started",
                     th, (unsigned long long)e, site_text(v->name), site_text(site));
        }
        record(w, s, K_TG_RACE, me, ep, flags, site, site_text(v->name), (long long)e, true);
    }
    return a;
}

/* --------------------------------------------------- output records */

static void *arena_alloc(worker *w, size_t n) {
    n = (n + 63) & ~(size_t)63;
    if (n > w->left) {
        size_t sz = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        arena_chunk *c = calloc(1, sizeof *c + sz);
        if (!c) return NULL;
        c->next = w->chunks;
        w->chunks = c;
        w->bump = c->data;
        w->left = sz;
    }
    void *p = w->bump;
    w->bump += n;
    w->left -= n;
    return p;
}

/* An affine block into full records (the block's lock held). */
static int expand(worker *w, block *bk) {
    shadow *f = arena_alloc(w, BLOCK * sizeof *f);
    if (!f) return -1;
    for (unsigned k = 0; k < BLOCK; k++)
        if (bk->written >> k & 1) {
            f[k].w = bk->base + k;
            f[k].we = bk->epoch;
            f[k].wsite = bk->site;
        }
    bk->full = f;
    return 0;
}

static inline void lock_block(block *bk) {
    if (!S.locking) return;
    while (__atomic_exchange_n(&bk->lock, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&bk->lock, __ATOMIC_RELAXED)) mk_cpu_relax();
}

static inline void unlock_block(block *bk) {
    if (S.locking) __atomic_store_n(&bk->lock, 0, __ATOMIC_RELEASE);
}

static NOINLINE void device_access(worker *w, const cthread *t, const cbuf *b, char *a, uint64_t size,
                          uint32_t flags, uint32_t site) {
    uint64_t off = (uint64_t)(a - b->b.lo), e0, e1;
    if (b->shift >= 0) {
        e0 = off >> b->shift;
        e1 = (off + size - 1) >> b->shift;
    } else {
        e0 = off / b->b.itemsize;
        e1 = (off + size - 1) / b->b.itemsize;
    }
    const uint64_t me = tid(t);
    const uint32_t ep = t->epoch;
    const uint64_t nsh = (uint64_t)b->nsh;
    for (uint64_t e = e0; e <= e1 && e < nsh;) {
        block *bk = &b->blk[e / BLOCK];
        uint64_t end = (e / BLOCK + 1) * BLOCK;
        if (end > e1 + 1) end = e1 + 1;
        if (end > nsh) end = nsh;
        lock_block(bk);
        if (!bk->full && !bk->lost) {
            const unsigned k = (unsigned)(e % BLOCK);
            if (flags == MKPY_CHK_WRITE && end == e + 1) { /* one element stored: still affine? */
                if (!bk->written) {
                    bk->written = (uint64_t)1 << k;
                    bk->base = me - k;
                    bk->epoch = ep;
                    bk->site = site;
                    unlock_block(bk);
                    e = end;
                    continue;
                }
                if (!(bk->written >> k & 1) && bk->base + k == me && bk->epoch == ep && bk->site == site) {
                    bk->written |= (uint64_t)1 << k;
                    unlock_block(bk);
                    e = end;
                    continue;
                }
            }
            if (expand(w, bk) < 0) {
                bk->lost = 1;
                w->oom = true;
            }
        }
        if (bk->full)
            for (; e < end; e++)
                record(w, &((shadow *)bk->full)[e % BLOCK], K_DEV_RACE, me, ep, flags, site, b->b.name,
                       (long long)((b->b.lo + e * b->b.itemsize - b->b.base) / (ptrdiff_t)b->b.itemsize), false);
        unlock_block(bk);
        e = end;
    }
}

/* ---------------------------------------------------------- accesses */

/* An access inside no buffer and no threadgroup variable. */
static NOINLINE void *outside(worker *w, const cthread *t, char *a, uint64_t size, uint32_t flags,
                     uint32_t site) {
    const cbuf *best = NULL;
    size_t bestd = SIZE_MAX;
    for (int j = 0; j < S.nbufs; j++) {
        const cbuf *b = &S.bufs[j];
        if (!b->b.lo) continue;
        size_t d = SIZE_MAX;
        if (a + size > b->b.hi && a < b->b.hi + WINDOW) d = a >= b->b.hi ? (size_t)(a - b->b.hi) : 0;
        else if (a < b->b.lo && a + WINDOW > b->b.lo) d = (size_t)(b->b.lo - a);
        if (d < bestd) {
            bestd = d;
            best = b;
        }
    }
    if (!best) return a;
    /* a thread's own memory (its stack: the fiber's, or above this frame on
     * the pool thread's stack of the plain path), constants, the launch data */
    const char *frame = __builtin_frame_address(0);
    if (a >= frame && a < frame + (64 << 10)) return a;
    const char *lo, *hi;
    uint64_t g;
    unsigned i;
    if (mkk_coop_current(&g, &i, &lo, &hi) == 0) {
        if (a >= lo && a < hi) return a;
    } else {
        if (!w->have_tstack) {
            pthread_attr_t at;
            void *slo = NULL;
            size_t sz = 0;
            if (pthread_getattr_np(pthread_self(), &at) == 0) {
                pthread_attr_getstack(&at, &slo, &sz);
                pthread_attr_destroy(&at);
            }
            w->tstack_lo = slo;
            w->tstack_hi = (const char *)slo + sz;
            w->have_tstack = true;
        }
        if (a >= w->tstack_lo && a < w->tstack_hi) return a;
    }
    char *text = finding(w, K_OOB);
    if (text) {
        char th[64];
        describe_thread(tid(t), th, sizeof th);
        ptrdiff_t isz = (ptrdiff_t)best->b.itemsize;
        long long e = a >= best->b.base ? (long long)((a - best->b.base) / isz)
                                         : -(long long)((best->b.base - a + isz - 1) / isz);
        bool after = a + size > best->b.hi;
        snprintf(text, SHOWN_TEXT, "%s %s element %lld of %s `%s` (a buffer of %lld %zu-byte elements), %s, at %s", th,
                 flags & MKPY_CHK_WRITE ? "stored" : "loaded", e, best->b.output ? "output" : "input", best->b.name,
                 (long long)best->b.count, best->b.itemsize, after ? "past its end" : "before its start",
                 site_text(site));
    }
    return scratch(w, size, flags, a);
}

static NOINLINE void *input_store(worker *w, const cthread *t, const cbuf *b,
                                                   char *a, uint64_t size, uint32_t flags, uint32_t site) {
    char *text = finding(w, K_OOB);
    if (text) {
        char th[64];
        describe_thread(tid(t), th, sizeof th);
        snprintf(text, SHOWN_TEXT,
                 "%s stored into input `%s` (element %lld), which is read-only (`const device`), at %s",
                 th, b->b.name, (long long)((a - b->b.base) / (ptrdiff_t)b->b.itemsize), site_text(site));
    }
    return scratch(w, size, flags, a);
}

static NOINLINE void *access_no_thread(void *p, uint64_t size, uint32_t flags, uint32_t site,
                                                        const void *tgp);

static void *api_access(void *p, uint64_t size, uint32_t flags, uint32_t site, const void *tgp,
                        struct mkpy_check_thread *t) {
    if (!t) return access_no_thread(p, size, flags, site, tgp);
    worker *w = t->worker;
    if (t->group != w->group) new_group(w, t->group);
    if (!size) return p;
    char *a = p;
    if (w->ntg && (tgp || (a >= w->tg_lo && a < w->tg_hi))) {
        tgvar *v = tgp ? find_tg(w, tgp) : NULL;
        if (!v) v = tg_containing(w, a);
        if (v) return tg_access(w, t, v, a, size, flags, site);
    }
    const bool write = flags & MKPY_CHK_WRITE;
    int j = write ? w->last_write : w->last_read;
    const cbuf *b = &S.bufs[j];
    if (!(a >= b->b.lo && a + size <= b->b.hi)) {
        for (j = 0; j < S.nbufs; j++) {
            b = &S.bufs[j];
            if (a >= b->b.lo && a + size <= b->b.hi && b->b.lo) break;
        }
        if (j == S.nbufs) return outside(w, t, a, size, flags, site);
        if (write) w->last_write = j;
        else w->last_read = j;
    }
    if (!b->b.output) {
        if (write) return input_store(w, t, b, a, size, flags, site);
        if (!(flags & MKPY_CHK_ATOMIC)) { /* the kernel's hook takes the next loads of it itself */
            t->read_lo[1] = t->read_lo[0];
            t->read_hi[1] = t->read_hi[0];
            t->read_lo[0] = b->b.lo;
            t->read_hi[0] = b->b.hi;
        }
        return p;
    }
    if (b->blk) {
        if (write && b->shift >= 0 && t->write_blocks != b->blk) { /* the kernel's hook takes the next stores */
            t->write_lo = b->b.lo;
            t->write_hi = b->b.lo + ((uint64_t)b->nsh << b->shift);
            t->write_blocks = b->blk;
            t->write_shift = (uint32_t)b->shift;
            t->write_locking = S.locking;
        }
        device_access(w, t, b, a, size, flags, site);
    }
    return p;
}

static void *access_no_thread(void *p, uint64_t size, uint32_t flags, uint32_t site, const void *tgp) {
    struct mkpy_check_thread tmp, *t = find_thread(&tmp);
    /* a copy: the read ranges it learns are not the running body's */
    struct mkpy_check_thread c = *t;
    void *q = api_access(p, size, flags, site, tgp, &c);
    return q;
}

static void api_tg_var(const void *addr, uint64_t size, uint64_t elem, uint32_t name, struct mkpy_check_thread *t) {
    struct mkpy_check_thread tmp;
    worker *w = enter(&t, &tmp);
    if (find_tg(w, addr) || w->ntg == MAX_TG_VARS || !size) return;
    tgvar *v = &w->tg[w->ntg++];
    v->addr = addr;
    v->size = size;
    v->elem = elem && size % elem == 0 ? elem : 1;
    v->name = name;
    v->sh = calloc(size / v->elem, sizeof *v->sh); /* NULL: bounds only */
    if (w->ntg == 1 || v->addr < w->tg_lo) w->tg_lo = v->addr;
    if (w->ntg == 1 || v->addr + size > w->tg_hi) w->tg_hi = v->addr + size;
}

static void api_barrier(struct mkpy_check_thread *t) {
    struct mkpy_check_thread tmp;
    enter(&t, &tmp);
    t->epoch++;
}

static void api_div(uint32_t bad, uint32_t site, struct mkpy_check_thread *t) {
    struct mkpy_check_thread tmp;
    worker *w = enter(&t, &tmp);
    char *text;
    if (!bad || !(text = finding(w, K_DIV))) return;
    char th[64];
    describe_thread(tid(t), th, sizeof th);
    if (bad == 1)
        snprintf(text, SHOWN_TEXT,
                 "%s divided by zero (`/` or `%%`) at %s: an Apple GPU gives a value without trapping "
                                   "(docs/kernels.md lists mkpy's), never a useful one",
                 th, site_text(site));
    else
        snprintf(text, SHOWN_TEXT, "%s divided the most negative integer by -1 at %s: the quotient overflows", th,
                 site_text(site));
}

const struct mkpy_check_api mkk_check_api = {
    .access = api_access,
    .tg_var = api_tg_var,
    .barrier = api_barrier,
    .div = api_div,
    .attach = api_attach,
};

/* ------------------------------------------------------------- a launch */

static void free_launch(void) {
    for (int k = 0; k < S.nbufs; k++) free(S.bufs[k].blk);
    free(S.bufs);
    S.bufs = NULL;
    S.nbufs = 0;
    for (int k = 0; k < S.nworkers; k++) {
        worker *w = &S.workers[k];
        for (int v = 0; v < w->ntg; v++) free(w->tg[v].sh);
        for (arena_chunk *c = w->chunks, *n; c; c = n) {
            n = c->next;
            free(c);
        }
    }
    free(S.workers);
    S.workers = NULL;
    S.nworkers = 0;
}

int mkk_check_begin(const char *kernel, const mkk_launch *L, const mkk_check_buf *bufs, int n, bool has_init,
                    int nthreads) {
    pthread_mutex_lock(&S.mu);
    S.launch++;
    S.kernel = kernel;
    S.L = *L;
    S.tgmax = (uint64_t)L->tg[0] * L->tg[1] * L->tg[2];
    if (!S.tgmax) S.tgmax = 1;
    S.has_init = has_init;
    S.locking = nthreads > 1;
    S.unshadowed = 0;
    S.sites = NULL;
    S.nsites = 0;
    S.nattached = 0;
    S.nworkers = nthreads > 0 ? nthreads : 1;
    S.workers = calloc((size_t)S.nworkers, sizeof *S.workers);
    S.bufs = calloc(n ? n : 1, sizeof *S.bufs);
    S.nbufs = 0;
    if (!S.bufs || !S.workers) goto nomem;
    for (int k = 0; k < S.nworkers; k++) S.workers[k].group = UINT64_MAX;
    S.nbufs = n;
    for (int k = 0; k < n; k++) {
        cbuf *b = &S.bufs[k];
        b->b = bufs[k];
        b->shift = -1;
        if (b->b.itemsize && !(b->b.itemsize & (b->b.itemsize - 1))) b->shift = __builtin_ctzll(b->b.itemsize);
        if (b->b.output && b->b.lo && b->b.itemsize) {
            b->nsh = (b->b.hi - b->b.lo) / (ptrdiff_t)b->b.itemsize;
            if (b->nsh > MAX_SHADOWED) { /* larger outputs get bounds checks only */
                b->nsh = 0;
                S.unshadowed++;
            }
            if (b->nsh && !(b->blk = calloc((size_t)((b->nsh + BLOCK - 1) / BLOCK), sizeof *b->blk))) goto nomem;
        }
    }
    return 0;
nomem:
    free_launch();
    pthread_mutex_unlock(&S.mu);
    return -1;
}

static void sbuf_add(char **s, size_t *len, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void sbuf_add(char **s, size_t *len, size_t *cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (*len + (size_t)k + 1 > *cap) {
        size_t nc = (*cap + (size_t)k + 1) * 2;
        char *t = realloc(*s, nc);
        if (!t) return;
        *s = t;
        *cap = nc;
    }
    va_start(ap, fmt);
    vsnprintf(*s + *len, *cap - *len, fmt, ap);
    va_end(ap);
    *len += (size_t)k;
}

static int by_order(const void *x, const void *y) {
    const shown_t *a = *(shown_t *const *)x, *b = *(shown_t *const *)y;
    if (a->group != b->group) return a->group < b->group ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

char *mkk_check_finish(int *nfound) {
    int64_t count[NKINDS] = {0};
    bool oom = false;
    for (int k = 0; k < S.nworkers; k++) {
        for (int kd = 0; kd < NKINDS; kd++) count[kd] += S.workers[k].count[kd];
        oom |= S.workers[k].oom;
    }
    /* outputs no thread wrote, in element order */
    char unwritten[SHOWN][600];
    if (!S.has_init)
        for (int k = 0; k < S.nbufs; k++) {
            cbuf *b = &S.bufs[k];
            if (!b->blk) continue;
            for (int64_t e0 = 0; e0 < b->nsh; e0 += BLOCK) {
                const block *bk = &b->blk[e0 / BLOCK];
                int n = b->nsh - e0 < BLOCK ? (int)(b->nsh - e0) : BLOCK;
                uint64_t valid = n == 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1, missing;
                if (bk->full) {
                    const shadow *f = bk->full;
                    missing = 0;
                    for (int j = 0; j < n; j++)
                        if (!f[j].w && !f[j].atomic) missing |= (uint64_t)1 << j;
                } else if (bk->lost) {
                    missing = 0;
                } else {
                    missing = ~bk->written & valid;
                }
                for (; missing && count[K_UNWRITTEN] < SHOWN; missing &= missing - 1) {
                    int64_t e = e0 + __builtin_ctzll(missing);
                    snprintf(unwritten[count[K_UNWRITTEN]++], sizeof unwritten[0],
                             "output `%s` element %lld was stored by no thread (it holds whatever the memory held; "
                             "pass init_value= if the kernel means to leave elements untouched)",
                             b->b.name,
                             (long long)((b->b.lo + e * b->b.itemsize - b->b.base) / (ptrdiff_t)b->b.itemsize));
                }
                count[K_UNWRITTEN] += __builtin_popcountll(missing);
            }
        }
    char *s = NULL;
    size_t len = 0, cap = 0;
    int64_t total = 0;
    for (int kd = 0; kd < NKINDS; kd++) total += count[kd];
    shown_t **list = calloc((size_t)S.nworkers * SHOWN + 1, sizeof *list);
    for (int kd = 0; kd < NKINDS && total; kd++) {
        if (!count[kd]) continue;
        sbuf_add(&s, &len, &cap, "\n  %s (%lld):", kind_names[kd], (long long)count[kd]);
        int64_t shown = count[kd] < SHOWN ? count[kd] : SHOWN;
        if (kd == K_UNWRITTEN) {
            for (int64_t j = 0; j < shown; j++) sbuf_add(&s, &len, &cap, "\n    %s", unwritten[j]);
        } else if (list) {
            /* each worker's first findings, merged in threadgroup order */
            int m = 0;
            for (int k = 0; k < S.nworkers; k++)
                for (int64_t j = 0; j < S.workers[k].count[kd] && j < SHOWN; j++)
                    list[m++] = &S.workers[k].shown[kd][j];
            qsort(list, (size_t)m, sizeof *list, by_order);
            for (int64_t j = 0; j < shown && j < m; j++) sbuf_add(&s, &len, &cap, "\n    %s", list[j]->text);
        }
        if (count[kd] > SHOWN) sbuf_add(&s, &len, &cap, "\n    ... and %lld more", (long long)(count[kd] - SHOWN));
    }
    free(list);
    if (total && S.unshadowed)
        sbuf_add(&s, &len, &cap, "\n  (%d output%s of more than %lld elements had bounds checks only)", S.unshadowed,
                 S.unshadowed == 1 ? "" : "s", (long long)MAX_SHADOWED);
    if (total && oom) sbuf_add(&s, &len, &cap, "\n  (out of memory: some race checks were skipped)");
    *nfound = total > 0x7fffffff ? 0x7fffffff : (int)total;
    free_launch();
    pthread_mutex_unlock(&S.mu);
    return s;
}
