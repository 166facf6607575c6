/* The checker mode's runtime (issue #12; the compiler side is
 * csrc/kernel/ir/check_ir.c, the user's view docs/kernels.md "Checker mode").
 *
 * A checked launch runs on one thread, one threadgroup after another
 * (threads in order on the plain path, on fibers for cooperative kernels),
 * and every access of kernel code to a buffer or threadgroup variable comes
 * here first. We keep a shadow entry per element of every output and every
 * threadgroup variable: the last thread that wrote it, the last that read
 * it, the threadgroup-barrier epoch of each access and its source site.
 * Races are decided from that record, not from the order the threads ran
 * in: two accesses to an element by different threads, one a write, race
 * unless they are in one threadgroup with a barrier between them (the later
 * thread has passed more barriers). Atomics never race. So a race is found
 * whatever the schedule, including races whose result happens to be right.
 *
 * Findings are counted per kind; the first few of each kind are kept as
 * text. An out-of-bounds access is given a scratch block instead (zeros for
 * a load), so it never changes memory and the launch goes on. */
#include "check.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coop.h"

#define SHOWN 5               /* findings of each kind listed in the report */
#define WINDOW ((size_t)4 << 20) /* out-of-bounds attribution: bytes around a buffer */
#define MAX_TG_VARS 256
#define SCRATCH 4096
#define MAX_SHADOWED ((int64_t)1 << 22) /* output elements with race and unwritten checks */

enum { K_OOB, K_TG_RACE, K_DEV_RACE, K_UNINIT, K_UNWRITTEN, K_DIV, NKINDS };
static const char *const kind_names[NKINDS] = {
    "out-of-bounds accesses",
    "threadgroup memory races",
    "device memory races",
    "reads of uninitialised threadgroup memory",
    "output elements no thread wrote",
    "integer division faults",
};

typedef struct {
    uint64_t w, r, r2;    /* thread ids + 1 (group * threads per group + index); 0: none */
    uint32_t we, re, r2e; /* the threads' barrier epochs at the access */
    uint32_t gen;         /* threadgroup variables: the group the record belongs to */
    uint32_t atomic;
    const char *wsite, *rsite, *r2site; /* the last store, the last two loads by different threads */
} shadow;

typedef struct {
    mkk_check_buf b;
    shadow *sh; /* outputs: an entry per element of [lo, hi) */
    int64_t nsh;
} cbuf;

typedef struct {
    const char *addr;
    uint64_t size, elem;
    const char *name;
    shadow *sh;
} tgvar;

static struct {
    pthread_mutex_t mu;
    const char *kernel;
    mkk_launch L;
    uint64_t tgmax; /* threads of a full threadgroup */
    cbuf *bufs;
    int nbufs, last;
    int unshadowed; /* outputs too large for race and unwritten checks */
    bool has_init;
    tgvar tg[MAX_TG_VARS];
    int ntg;
    uint32_t gen;
    uint64_t group; /* the group being run (UINT64_MAX: none yet) */
    uint64_t plain_group;
    unsigned plain_index;
    const char *stack_lo, *stack_hi; /* the running GPU thread's stack: its own memory */
    const char *thread_stack_lo, *thread_stack_hi;
    pthread_t stack_of;
    bool have_stack;
    uint32_t epoch[MKPY_CBS_MAX_THREADS];
    int64_t count[NKINDS];
    char shown[NKINDS][SHOWN][600];
    _Alignas(64) unsigned char scratch[SCRATCH];
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

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

static void current(uint64_t *g, unsigned *i) {
    if (mkk_coop_current(g, i, &S.stack_lo, &S.stack_hi) == 0) return;
    *g = S.plain_group;
    *i = S.plain_index;
    S.stack_lo = S.thread_stack_lo;
    S.stack_hi = S.thread_stack_hi;
}

/* Called at every hook: a new threadgroup starts with fresh threadgroup
 * records and epochs. */
static void enter(uint64_t *g, unsigned *i) {
    current(g, i);
    if (*g != S.group) {
        S.group = *g;
        S.gen++;
        memset(S.epoch, 0, sizeof S.epoch);
    }
}

static uint64_t tid(uint64_t g, unsigned i) { return g * S.tgmax + i + 1; }

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

static void finding(int kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void finding(int kind, const char *fmt, ...) {
    int64_t k = S.count[kind]++;
    if (k >= SHOWN) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S.shown[kind][k], sizeof S.shown[kind][k], fmt, ap);
    va_end(ap);
}

/* Two accesses by threads a and b at epochs ea and eb are unordered when the
 * threads differ and are in different threadgroups, or in one with no
 * threadgroup barrier between the accesses. */
static bool unordered(uint64_t a, uint32_t ea, uint64_t b, uint32_t eb) {
    if (a == b) return false;
    if ((a - 1) / S.tgmax != (b - 1) / S.tgmax) return true;
    return ea == eb;
}

/* The shadow update of one element, element `elem` of the variable or
 * output `name` (for the report). */
static void record(shadow *s, int race_kind, uint64_t me, uint32_t ep, uint32_t flags, const char *site,
                   const char *name, long long elem, bool tg) {
    const bool write = flags & MKPY_CHK_WRITE;
    if (flags & MKPY_CHK_ATOMIC) s->atomic = 1;
    if (s->atomic) {
        if (write) s->w = me; /* written, for the unwritten-output check */
        return;
    }
    const char *sync = tg ? "threadgroup_barrier" : "barrier or atomic";
    char t1[64], t2[64];
    uint64_t other = 0;
    const char *other_site = NULL, *other_did = NULL;
    if (s->w && unordered(s->w, s->we, me, ep)) {
        other = s->w, other_site = s->wsite, other_did = "stored";
    } else if (write && s->r && unordered(s->r, s->re, me, ep)) {
        other = s->r, other_site = s->rsite, other_did = "loaded";
    } else if (write && s->r2 && unordered(s->r2, s->r2e, me, ep)) {
        other = s->r2, other_site = s->r2site, other_did = "loaded";
    }
    if (other) {
        char what[300];
        snprintf(what, sizeof what, "%s `%s` element %lld", tg ? "threadgroup variable" : "output", name, elem);
        describe_thread(other, t1, sizeof t1);
        describe_thread(me, t2, sizeof t2);
        finding(race_kind, "%s: %s %s it at %s and %s %s it at %s, with no %s between them", what, t1, other_did,
                other_site, t2, write ? "stored" : "loaded", site, sync);
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

static tgvar *find_tg(const char *a) {
    for (int v = 0; v < S.ntg; v++)
        if (S.tg[v].addr == a) return &S.tg[v];
    return NULL;
}

static tgvar *tg_containing(const char *a) {
    for (int v = 0; v < S.ntg; v++)
        if (a >= S.tg[v].addr && a < S.tg[v].addr + S.tg[v].size) return &S.tg[v];
    return NULL;
}

static void *scratch(uint64_t size, uint32_t flags, void *p) {
    if (size > SCRATCH) return p;
    if (!(flags & MKPY_CHK_WRITE) || (flags & MKPY_CHK_ATOMIC)) memset(S.scratch, 0, size);
    return S.scratch;
}

static void *tg_access(tgvar *v, char *a, uint64_t size, uint32_t flags, const char *site, uint64_t g, unsigned i) {
    char t[64];
    if (a < v->addr || a + size > v->addr + v->size) {
        describe_thread(tid(g, i), t, sizeof t);
        long long e = a >= v->addr ? (long long)((uint64_t)(a - v->addr) / v->elem)
                                   : -(long long)(((uint64_t)(v->addr - a) + v->elem - 1) / v->elem);
        finding(K_OOB, "%s %s element %lld of threadgroup variable `%s` (%llu elements of %llu bytes) at %s", t,
                flags & MKPY_CHK_WRITE ? "stored" : "loaded", e, v->name,
                (unsigned long long)(v->size / v->elem), (unsigned long long)v->elem, site);
        return scratch(size, flags, a);
    }
    if (!v->sh) return a;
    uint64_t e0 = (uint64_t)(a - v->addr) / v->elem, e1 = (uint64_t)(a + size - 1 - v->addr) / v->elem;
    const uint64_t me = tid(g, i);
    for (uint64_t e = e0; e <= e1; e++) {
        shadow *s = &v->sh[e];
        if (s->gen != S.gen) memset(s, 0, sizeof *s), s->gen = S.gen;
        if (!(flags & MKPY_CHK_WRITE) && !s->w && !(flags & MKPY_CHK_ATOMIC) && !s->atomic) {
            describe_thread(me, t, sizeof t);
            finding(K_UNINIT, "%s loaded element %llu of threadgroup variable `%s` at %s, which no thread of its "
                              "threadgroup had stored since the threadgroup started",
                    t, (unsigned long long)e, v->name, site);
        }
        record(s, K_TG_RACE, me, S.epoch[i], flags, site, v->name, (long long)e, true);
    }
    return a;
}

static void *api_access(void *p, uint64_t size, uint32_t flags, const char *site, const void *tgp) {
    char *a = p;
    uint64_t g;
    unsigned i;
    enter(&g, &i);
    if (!size) return p;
    tgvar *v = tgp ? find_tg(tgp) : NULL;
    if (!v) v = tg_containing(a);
    if (v) return tg_access(v, a, size, flags, site, g, i);
    /* the buffers: the last one hit first */
    const cbuf *best = NULL;
    size_t bestd = SIZE_MAX;
    for (int k = -1; k < S.nbufs; k++) {
        int j = k < 0 ? S.last : k;
        if (j < 0 || j >= S.nbufs) continue;
        const cbuf *b = &S.bufs[j];
        if (!b->b.lo) continue;
        if (a >= b->b.lo && a + size <= b->b.hi) {
            S.last = j;
            char t[64];
            if (!b->b.output) {
                if (flags & MKPY_CHK_WRITE) {
                    describe_thread(tid(g, i), t, sizeof t);
                    finding(K_OOB, "%s stored into input `%s` (element %lld), which is read-only (`const device`), "
                                   "at %s",
                            t, b->b.name, (long long)((a - b->b.base) / (ptrdiff_t)b->b.itemsize), site);
                    return scratch(size, flags, p);
                }
                return p;
            }
            if (!b->sh) return p;
            int64_t e0 = (a - b->b.lo) / (ptrdiff_t)b->b.itemsize,
                    e1 = (a + size - 1 - b->b.lo) / (ptrdiff_t)b->b.itemsize;
            const uint64_t me = tid(g, i);
            for (int64_t e = e0; e <= e1 && e < b->nsh; e++) {
                record(&b->sh[e], K_DEV_RACE, me, S.epoch[i], flags, site, b->b.name,
                       (long long)((b->b.lo + e * b->b.itemsize - b->b.base) / (ptrdiff_t)b->b.itemsize), false);
            }
            return p;
        }
        size_t d = SIZE_MAX;
        if (a + size > b->b.hi && a < b->b.hi + WINDOW) d = a >= b->b.hi ? (size_t)(a - b->b.hi) : 0;
        else if (a < b->b.lo && a + WINDOW > b->b.lo) d = (size_t)(b->b.lo - a);
        if (d < bestd) {
            bestd = d;
            best = b;
        }
    }
    /* a thread's own memory (its stack: the fiber's, or above this frame on
     * the guarded stack of the plain path), constants, the launch data */
    const char *frame = __builtin_frame_address(0);
    if (!best || (a >= S.stack_lo && a < S.stack_hi) || (a >= frame && a < frame + (64 << 10))) return p;
    char t[64];
    describe_thread(tid(g, i), t, sizeof t);
    ptrdiff_t isz = (ptrdiff_t)best->b.itemsize;
    long long e = a >= best->b.base ? (long long)((a - best->b.base) / isz)
                                     : -(long long)((best->b.base - a + isz - 1) / isz);
    bool after = a + size > best->b.hi;
    finding(K_OOB, "%s %s element %lld of %s `%s` (a buffer of %lld %zu-byte elements), %s, at %s", t,
            flags & MKPY_CHK_WRITE ? "stored" : "loaded", e, best->b.output ? "output" : "input", best->b.name,
            (long long)best->b.count, best->b.itemsize, after ? "past its end" : "before its start", site);
    return scratch(size, flags, p);
}

static void api_tg_var(const void *addr, uint64_t size, uint64_t elem, const char *name) {
    uint64_t g;
    unsigned i;
    enter(&g, &i);
    if (find_tg(addr) || S.ntg == MAX_TG_VARS || !size) return;
    tgvar *v = &S.tg[S.ntg++];
    v->addr = addr;
    v->size = size;
    v->elem = elem && size % elem == 0 ? elem : 1;
    v->name = name;
    v->sh = calloc(size / v->elem, sizeof *v->sh); /* NULL: bounds only */
}

static void api_barrier(void) {
    uint64_t g;
    unsigned i;
    enter(&g, &i);
    if (i < MKPY_CBS_MAX_THREADS) S.epoch[i]++;
}

static void api_div(uint32_t bad, const char *site) {
    uint64_t g;
    unsigned i;
    enter(&g, &i);
    if (!bad) return;
    char t[64];
    describe_thread(tid(g, i), t, sizeof t);
    if (bad == 1)
        finding(K_DIV, "%s divided by zero (`/` or `%%`) at %s: an Apple GPU gives a value without trapping "
                       "(docs/kernels.md lists mkpy's), never a useful one",
                t, site);
    else
        finding(K_DIV, "%s divided the most negative integer by -1 at %s: the quotient overflows", t, site);
}

static void api_thread(uint64_t group, unsigned index) {
    S.plain_group = group;
    S.plain_index = index;
    if (!S.have_stack || !pthread_equal(S.stack_of, pthread_self())) {
        pthread_attr_t at;
        void *lo = NULL;
        size_t sz = 0;
        if (pthread_getattr_np(pthread_self(), &at) == 0) {
            pthread_attr_getstack(&at, &lo, &sz);
            pthread_attr_destroy(&at);
        }
        S.thread_stack_lo = lo;
        S.thread_stack_hi = (const char *)lo + sz;
        S.stack_of = pthread_self();
        S.have_stack = true;
    }
}

const struct mkpy_check_api mkk_check_api = {
    .access = api_access,
    .tg_var = api_tg_var,
    .barrier = api_barrier,
    .div = api_div,
    .thread = api_thread,
};

/* ------------------------------------------------------------- a launch */

int mkk_check_begin(const char *kernel, const mkk_launch *L, const mkk_check_buf *bufs, int n, bool has_init) {
    pthread_mutex_lock(&S.mu);
    S.kernel = kernel;
    S.L = *L;
    S.tgmax = (uint64_t)L->tg[0] * L->tg[1] * L->tg[2];
    if (!S.tgmax) S.tgmax = 1;
    S.has_init = has_init;
    S.ntg = 0;
    S.gen = 0;
    S.group = UINT64_MAX;
    S.plain_group = 0;
    S.plain_index = 0;
    S.last = 0;
    S.unshadowed = 0;
    S.have_stack = false;
    S.stack_lo = S.stack_hi = S.thread_stack_lo = S.thread_stack_hi = NULL;
    memset(S.count, 0, sizeof S.count);
    memset(S.epoch, 0, sizeof S.epoch);
    S.bufs = calloc(n ? n : 1, sizeof *S.bufs);
    S.nbufs = 0;
    if (!S.bufs) goto nomem;
    S.nbufs = n;
    for (int k = 0; k < n; k++) {
        cbuf *b = &S.bufs[k];
        b->b = bufs[k];
        if (b->b.output && b->b.lo && b->b.itemsize) {
            b->nsh = (b->b.hi - b->b.lo) / (ptrdiff_t)b->b.itemsize;
            /* 64 bytes per element: larger outputs get bounds checks only */
            if (b->nsh > MAX_SHADOWED) {
                b->nsh = 0;
                S.unshadowed++;
            }
            if (b->nsh && !(b->sh = calloc((size_t)b->nsh, sizeof *b->sh))) goto nomem;
        }
    }
    return 0;
nomem:
    mkk_check_finish(&n);
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

char *mkk_check_finish(int *nfound) {
    /* outputs no thread wrote */
    if (!S.has_init)
        for (int k = 0; k < S.nbufs; k++) {
            cbuf *b = &S.bufs[k];
            if (!b->sh) continue;
            for (int64_t e = 0; e < b->nsh; e++)
                if (!b->sh[e].w && !b->sh[e].atomic)
                    finding(K_UNWRITTEN,
                            "output `%s` element %lld was stored by no thread (it holds whatever the memory held; "
                            "pass init_value= if the kernel means to leave elements untouched)",
                            b->b.name, (long long)((b->b.lo + e * b->b.itemsize - b->b.base) / (ptrdiff_t)b->b.itemsize));
        }
    char *s = NULL;
    size_t len = 0, cap = 0;
    int64_t total = 0;
    for (int kd = 0; kd < NKINDS; kd++) total += S.count[kd];
    if (total) {
        for (int kd = 0; kd < NKINDS; kd++) {
            if (!S.count[kd]) continue;
            sbuf_add(&s, &len, &cap, "\n  %s (%lld):", kind_names[kd], (long long)S.count[kd]);
            int64_t shown = S.count[kd] < SHOWN ? S.count[kd] : SHOWN;
            for (int64_t j = 0; j < shown; j++) sbuf_add(&s, &len, &cap, "\n    %s", S.shown[kd][j]);
            if (S.count[kd] > SHOWN)
                sbuf_add(&s, &len, &cap, "\n    ... and %lld more", (long long)(S.count[kd] - SHOWN));
        }
    }
    if (total && S.unshadowed)
        sbuf_add(&s, &len, &cap, "\n  (%d output%s of more than %lld elements had bounds checks only)", S.unshadowed,
                 S.unshadowed == 1 ? "" : "s", (long long)MAX_SHADOWED);
    *nfound = total > 0x7fffffff ? 0x7fffffff : (int)total;
    for (int k = 0; k < S.nbufs; k++) free(S.bufs[k].sh);
    free(S.bufs);
    S.bufs = NULL;
    S.nbufs = 0;
    for (int v = 0; v < S.ntg; v++) free(S.tg[v].sh);
    S.ntg = 0;
    pthread_mutex_unlock(&S.mu);
    return s;
}
