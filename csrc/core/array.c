#include "array.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <string.h>
#include <time.h>

#include "ops.h"
#include "pool.h"
#include "stream.h"

/* ------------------------------------------------------------------ memory */

static atomic_llong mem_active;
static atomic_llong mem_peak;

static void mem_add(int64_t n) {
    long long now = atomic_fetch_add(&mem_active, n) + n;
    long long peak = atomic_load(&mem_peak);
    while (now > peak && !atomic_compare_exchange_weak(&mem_peak, &peak, now)) {
    }
}

int64_t mk_memory_active(void) { return atomic_load(&mem_active); }
int64_t mk_memory_peak(void) { return atomic_load(&mem_peak); }
/* MLX sets the peak to 0 (it rises again with the next allocation) */
void mk_memory_reset_peak(void) { atomic_store(&mem_peak, 0); }

#define MK_ALIGN 64
/* Buffers from this size on are mapped directly, so that memory goes back to
 * the system when they leave the cache (glibc's heap would keep freed large
 * blocks resident and raise its mmap threshold after the first free). */
#define MK_MMAP_MIN (1u << 20)
#define MK_PAGE 4096
#define MK_HUGE_MIN (4u << 20)

/* ------------------------------------------------------- mapped buffers */

/* A mapped buffer sits between two read-only regions of zero pages. GPU
 * kernels often load a little outside their buffers and discard the value
 * (MLX's own grid_sample example reads the row before the first and after the
 * last, then masks); on Metal such loads are harmless, so here they read
 * zeros instead of faulting. Writes there still fault, and become the
 * "invalid memory access" error. The regions cost address space only: read
 * faults map the kernel's shared zero page. */
#define MK_GUARD (2u << 20)

static void *map_buffer(size_t size) {
    char *p = mmap(NULL, size + 2 * (size_t)MK_GUARD, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (mprotect(p + MK_GUARD, size, PROT_READ | PROT_WRITE) != 0) {
        munmap(p, size + 2 * (size_t)MK_GUARD);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    /* transparent huge pages where the system offers them on request: 512x
     * fewer page faults and TLB misses when streaming large arrays */
    if (size >= MK_HUGE_MIN) madvise(p + MK_GUARD, size, MADV_HUGEPAGE);
#endif
    return p + MK_GUARD;
}

static void unmap_buffer(void *data, size_t size) { munmap((char *)data - MK_GUARD, size + 2 * (size_t)MK_GUARD); }

/* ------------------------------------------------------- buffer cache */

/* Freed buffers, as MLX's allocator keeps them: every buffer an array frees
 * goes to the cache while the cache holds less than its limit, and later
 * allocations reuse them. The default limit is MLX's: the memory limit, set
 * by the binding; until then, no limit below the system's.
 *  - Mapped blocks (>= MK_MMAP_MIN) sit in one list; a request takes the
 *    newest block whose size is at least the request and at most 1/8 above
 *    it (MLX's allocator also reuses near sizes).
 *  - Heap blocks (smaller, sizes in multiples of MK_ALIGN) sit in one list
 *    per exact size, so a request finds one in O(1).
 * All blocks are also in one list by age (newest first), and the limit
 * releases the oldest first. */
typedef struct cached_block {
    void *data;
    size_t size;
    struct cached_block *newer, *older; /* by age */
    struct cached_block *bin_next, *bin_prev;
} cached_block;

#define MK_NBINS (MK_MMAP_MIN / MK_ALIGN) /* bin 0: the mapped blocks; bin i: heap blocks of i * MK_ALIGN bytes */

static struct {
    pthread_mutex_t mu;
    cached_block *newest, *oldest;
    cached_block *bins[MK_NBINS];
    int64_t bytes, limit;
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER, .limit = INT64_MAX};

static size_t cache_bin(size_t size) { return size >= MK_MMAP_MIN ? 0 : size / MK_ALIGN; }

/* A heap block is a whole small buffer (small_buffer_alloc: its mk_buffer,
 * then its data); its record lives in its data, which is free while cached
 * (at least MK_ALIGN bytes). A mapped block's record is malloc'ed. */
_Static_assert(sizeof(cached_block) <= MK_ALIGN, "a cached heap block holds its own record");

static bool heap_block(size_t size) { return size < MK_MMAP_MIN; }

static cached_block *heap_record(void *block) { return (cached_block *)((mk_buffer *)block)->data; }

/* Frees an unlinked block and its record. */
static void release_block(cached_block *c) {
    void *data = c->data;
    size_t size = c->size;
    if (heap_block(size)) {
        free(data); /* the record with it */
    } else {
        free(c);
        unmap_buffer(data, size);
    }
}

/* Unlinks c from both lists. Called with the lock held. */
static void cache_unlink_locked(cached_block *c) {
    if (c->newer) c->newer->older = c->older;
    else cache.newest = c->older;
    if (c->older) c->older->newer = c->newer;
    else cache.oldest = c->newer;
    if (c->bin_prev) c->bin_prev->bin_next = c->bin_next;
    else cache.bins[cache_bin(c->size)] = c->bin_next;
    if (c->bin_next) c->bin_next->bin_prev = c->bin_prev;
    cache.bytes -= (int64_t)c->size;
}

static void *cache_take(size_t size, size_t *got) {
    void *p = NULL;
    pthread_mutex_lock(&cache.mu);
    cached_block *c = cache.bins[cache_bin(size)];
    if (size >= MK_MMAP_MIN)
        while (c && !(c->size >= size && c->size - size <= size / 8)) c = c->bin_next;
    if (c) {
        cache_unlink_locked(c);
        p = c->data;
        *got = c->size;
        if (!heap_block(c->size)) free(c);
    }
    pthread_mutex_unlock(&cache.mu);
    return p;
}

/* Releases the oldest blocks until the cache holds at most `target` bytes.
 * Called with the lock held. */
static void cache_trim_locked(int64_t target) {
    while (cache.bytes > target && cache.oldest) {
        cached_block *c = cache.oldest;
        cache_unlink_locked(c);
        release_block(c);
    }
}

/* data: a mapped block's pages, or a heap block (a whole small mk_buffer). */
static void cache_put(void *data, size_t size) {
    bool heap = heap_block(size);
    cached_block *c = heap ? heap_record(data) : malloc(sizeof *c);
    pthread_mutex_lock(&cache.mu);
    if (c && (int64_t)size <= cache.limit) {
        cache_trim_locked(cache.limit - (int64_t)size);
        c->data = data;
        c->size = size;
        c->newer = NULL;
        c->older = cache.newest;
        if (cache.newest) cache.newest->newer = c;
        else cache.oldest = c;
        cache.newest = c;
        size_t bin = cache_bin(size);
        c->bin_prev = NULL;
        c->bin_next = cache.bins[bin];
        if (c->bin_next) c->bin_next->bin_prev = c;
        cache.bins[bin] = c;
        cache.bytes += (int64_t)size;
        c = NULL;
        data = NULL;
    }
    pthread_mutex_unlock(&cache.mu);
    if (heap) {
        free(data); /* not kept (NULL when kept) */
    } else {
        free(c);
        if (data) unmap_buffer(data, size);
    }
}

int64_t mk_cache_memory(void) {
    pthread_mutex_lock(&cache.mu);
    int64_t n = cache.bytes;
    pthread_mutex_unlock(&cache.mu);
    return n;
}

int64_t mk_cache_set_limit(int64_t limit) {
    if (limit < 0) limit = 0;
    pthread_mutex_lock(&cache.mu);
    int64_t old = cache.limit;
    cache.limit = limit;
    cache_trim_locked(limit);
    pthread_mutex_unlock(&cache.mu);
    return old;
}

int64_t mk_cache_limit(void) {
    pthread_mutex_lock(&cache.mu);
    int64_t n = cache.limit;
    pthread_mutex_unlock(&cache.mu);
    return n;
}

void mk_cache_clear(void) {
    pthread_mutex_lock(&cache.mu);
    cache_trim_locked(0);
    pthread_mutex_unlock(&cache.mu);
}

/* ------------------------------------------------- guarded staging */

/* Staging blocks for kernel launches: a buffer under 1 MiB is copied into
 * (or, for an output, produced in) a block laid out as the mapped buffers,
 * ending exactly at a page followed by read-only zero pages. Blocks are kept
 * for reuse, exact page counts only, at most MK_STAGE_KEEP of them (each is
 * three kernel mappings, and the system allows some 65,000). */
#define MK_STAGE_KEEP 32
#define MK_STAGE_ALIGN 16

static struct {
    pthread_mutex_t mu;
    struct {
        char *rw;
        size_t size;
        size_t clean; /* its first `clean` bytes are known to be zero */
    } blocks[MK_STAGE_KEEP];
    int n;
} stages = {PTHREAD_MUTEX_INITIALIZER, {{0}}, 0};

static size_t stage_pages(size_t nbytes) {
    size_t used = (nbytes + MK_STAGE_ALIGN - 1) / MK_STAGE_ALIGN * MK_STAGE_ALIGN;
    if (!used) used = MK_STAGE_ALIGN;
    return (used + MK_PAGE - 1) / MK_PAGE * MK_PAGE;
}

char *mk_stage_alloc(size_t nbytes) {
    size_t size = stage_pages(nbytes), clean = 0;
    char *rw = NULL;
    pthread_mutex_lock(&stages.mu);
    for (int i = stages.n - 1; i >= 0; i--)
        if (stages.blocks[i].size == size) {
            rw = stages.blocks[i].rw;
            clean = stages.blocks[i].clean;
            stages.blocks[i] = stages.blocks[--stages.n];
            break;
        }
    pthread_mutex_unlock(&stages.mu);
    if (!rw) {
        if (!(rw = map_buffer(size))) return mk_nomem();
        clean = size; /* a fresh mapping is zero */
    }
    size_t used = (nbytes + MK_STAGE_ALIGN - 1) / MK_STAGE_ALIGN * MK_STAGE_ALIGN;
    if (!used) used = MK_STAGE_ALIGN;
    char *data = rw + size - used;
    if (clean < size - used) memset(rw + clean, 0, size - used - clean); /* before the data */
    memset(data + nbytes, 0, used - nbytes);                           /* padding after it */
    return data;
}

static void stage_release(char *data, size_t nbytes, bool clean) {
    if (!data) return;
    size_t size = stage_pages(nbytes);
    size_t used = (nbytes + MK_STAGE_ALIGN - 1) / MK_STAGE_ALIGN * MK_STAGE_ALIGN;
    if (!used) used = MK_STAGE_ALIGN;
    char *rw = data + used - size;
    pthread_mutex_lock(&stages.mu);
    if (stages.n == MK_STAGE_KEEP) {
        unmap_buffer(stages.blocks[0].rw, stages.blocks[0].size);
        stages.blocks[0] = stages.blocks[--stages.n];
    }
    stages.blocks[stages.n].rw = rw;
    stages.blocks[stages.n].size = size;
    stages.blocks[stages.n].clean = clean ? (size_t)(data - rw) : 0;
    stages.n++;
    pthread_mutex_unlock(&stages.mu);
}

void mk_stage_free(char *data, size_t nbytes) { stage_release(data, nbytes, false); }

void mk_stage_free_clean(char *data, size_t nbytes) { stage_release(data, nbytes, true); }

bool mk_buffer_fenced(const mk_buffer *b) { return !b->release && b->capacity >= MK_MMAP_MIN; }

/* ------------------------------------------------------------ buffers */

/* The machine's memory (RAM and swap), read once: no single buffer can be
 * larger. Mapped buffers reserve no memory (MAP_NORESERVE), so without this
 * check a 4 TiB zeros() would "succeed" and the OOM killer would end the
 * process while filling it. */
static int64_t machine_memory(void) {
    static atomic_llong cached;
    long long m = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!m) {
        struct sysinfo si;
        if (sysinfo(&si) == 0 && si.mem_unit) {
            unsigned long long total = ((unsigned long long)si.totalram + si.totalswap) * si.mem_unit;
            m = total > INT64_MAX ? INT64_MAX : (long long)total;
        } else {
            m = INT64_MAX;
        }
        atomic_store_explicit(&cached, m, memory_order_relaxed);
    }
    return m;
}

int mk_check_alloc(size_t nbytes) {
    int64_t have = machine_memory();
    if (nbytes > (size_t)have) {
        mk_error_set(MK_ERR_MEMORY,
                     "[malloc] Attempting to allocate %zu bytes, more than the %lld bytes of memory (RAM and swap) "
                     "this machine has.",
                     nbytes, (long long)have);
        return -1;
    }
    return 0;
}

/* A buffer under MK_MMAP_MIN is one heap block: the mk_buffer, then its
 * data at the next multiple of MK_ALIGN. One plain malloc, served by glibc's
 * per-thread cache for small sizes, where a separate aligned_alloc went
 * through _int_memalign (no per-thread cache, splits and consolidations:
 * a fifth of a 16-element op + eval, docs/performance.md). */
static mk_buffer *small_buffer_alloc(size_t alloc) {
    char *raw = malloc(sizeof(mk_buffer) + MK_ALIGN - 1 + alloc);
    if (!raw) return NULL;
    mk_buffer *b = (mk_buffer *)raw;
    uintptr_t d = ((uintptr_t)(raw + sizeof(mk_buffer)) + MK_ALIGN - 1) & ~(uintptr_t)(MK_ALIGN - 1);
    b->data = (void *)d;
    return b;
}

mk_buffer *mk_buffer_alloc(size_t nbytes) {
    if (mk_check_alloc(nbytes) < 0) return NULL;
    size_t alloc = (nbytes + MK_ALIGN - 1) / MK_ALIGN * MK_ALIGN;
    if (alloc == 0) alloc = MK_ALIGN;
    mk_buffer *b;
    if (heap_block(alloc)) {
        size_t got = alloc; /* heap blocks are taken by exact size */
        b = cache_take(alloc, &got);
        if (!b) b = small_buffer_alloc(alloc);
        if (!b && mk_cache_memory() > 0) {
            mk_cache_clear();
            b = small_buffer_alloc(alloc);
        }
        if (!b) return mk_nomem();
    } else if (!(b = malloc(sizeof *b))) {
        return mk_nomem();
    }
    if (alloc >= MK_MMAP_MIN) {
        size_t used = alloc; /* the buffer and its padding, ending at the mapping's end */
        alloc = (alloc + MK_PAGE - 1) / MK_PAGE * MK_PAGE;
        size_t got = alloc;
        char *rw = cache_take(alloc, &got);
        if (!rw) {
            rw = map_buffer(alloc);
            if (!rw && mk_cache_memory() > 0) {
                /* the cache may hold what the system lacks */
                mk_cache_clear();
                rw = map_buffer(alloc);
            }
        }
        if (rw) {
            /* end-aligned: a store just past the end faults. Whole pages a
             * larger cached block has before the buffer become read-only
             * zeros, like the region before the mapping; the part of the
             * first page before the data and the padding after it are
             * zeroed (a kernel's stores there are found after the launch). */
            if (got > alloc) {
                mprotect(rw, got - alloc, PROT_READ);
                madvise(rw, got - alloc, MADV_DONTNEED);
            }
            b->data = rw + got - used;
            memset(rw + got - alloc, 0, alloc - used);
            memset((char *)b->data + nbytes, 0, used - nbytes);
        } else {
            b->data = NULL;
        }
        alloc = got;
    }
    if (!b->data) {
        free(b);
        return mk_nomem();
    }
    atomic_init(&b->refcnt, 1);
    b->nbytes = nbytes;
    b->capacity = alloc;
    b->release = NULL;
    b->owner = NULL;
    b->dev = NULL;
    b->devops = NULL;
    atomic_init(&b->where, MK_ON_HOST);
    mem_add((int64_t)nbytes);
    return b;
}

/* ------------------------------------------------------ device copies */

/* Transitions of `where` (and the allocation of either copy) happen under
 * one lock; the fast paths (mk_data, mk_host_sync) read `where` alone. */
static pthread_mutex_t devcopy_mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local char *device_error; /* mk_buffer_host_slow's failure, for mk_take_device_error */
static atomic_llong copies_down, copies_up; /* mk_device_copies */

void mk_device_copies(int64_t *down, int64_t *up) {
    *down = atomic_load(&copies_down);
    *up = atomic_load(&copies_up);
}

static void device_buffer_release(mk_buffer *b) {
    mem_add(-(int64_t)b->nbytes);
    free(b->data); /* the host copy, if one was made */
}

/* A buffer whose memory mkpy's host allocator did not make (capacity 0). */
static mk_buffer *buffer_new(size_t nbytes, void *data, void *dev, const mk_devmem_ops *ops,
                             void (*release)(mk_buffer *), void *owner, unsigned where) {
    mk_buffer *b = malloc(sizeof *b);
    if (!b) return mk_nomem();
    atomic_init(&b->refcnt, 1);
    b->nbytes = nbytes;
    b->capacity = 0;
    b->data = data;
    b->release = release;
    b->owner = owner;
    b->dev = dev;
    b->devops = ops;
    atomic_init(&b->where, where);
    return b;
}

mk_buffer *mk_buffer_device(size_t nbytes, const mk_devmem_ops *ops) {
    void *dev = ops->alloc(nbytes ? nbytes : 1);
    if (!dev) return NULL;
    mk_buffer *b = buffer_new(nbytes, NULL, dev, ops, device_buffer_release, NULL, MK_ON_DEVICE);
    if (!b) {
        ops->free(dev, nbytes);
        return NULL;
    }
    mem_add((int64_t)nbytes);
    return b;
}

mk_buffer *mk_buffer_foreign(void *data, size_t nbytes, void (*release)(mk_buffer *), void *owner) {
    return buffer_new(nbytes, data, NULL, NULL, release, owner, MK_ON_HOST);
}

int mk_buffer_to_host(mk_buffer *b) {
    int rc = 0;
    pthread_mutex_lock(&devcopy_mu);
    if (!(atomic_load_explicit(&b->where, memory_order_relaxed) & MK_ON_HOST)) {
        if (!b->data) {
            void *h = NULL;
            if (posix_memalign(&h, MK_ALIGN, b->nbytes ? b->nbytes : 1) != 0) {
                mk_nomem();
                rc = -1;
                goto out;
            }
            b->data = h;
        }
        if (b->devops->download(b->data, b->dev, b->nbytes) < 0) {
            rc = -1;
            goto out;
        }
        atomic_fetch_add(&copies_down, 1);
        atomic_fetch_or_explicit(&b->where, MK_ON_HOST, memory_order_release);
    }
out:
    pthread_mutex_unlock(&devcopy_mu);
    return rc;
}

int mk_buffer_to_device(mk_buffer *b, const mk_devmem_ops *ops) {
    unsigned w = atomic_load_explicit(&b->where, memory_order_acquire);
    if ((w & MK_ON_DEVICE) && b->devops == ops) return 0;
    int rc = 0;
    pthread_mutex_lock(&devcopy_mu);
    w = atomic_load_explicit(&b->where, memory_order_relaxed);
    if (!((w & MK_ON_DEVICE) && b->devops == ops)) {
        if (b->dev && b->devops != ops) { /* one device back-end at a time: cannot happen today */
            mk_error_set(MK_ERR_RUNTIME, "[%s] A buffer is on another device (%s).", ops->name, b->devops->name);
            rc = -1;
            goto out;
        }
        if (!b->dev) {
            void *dev = ops->alloc(b->nbytes ? b->nbytes : 1);
            if (!dev) {
                rc = -1;
                goto out;
            }
            b->dev = dev;
            b->devops = ops;
        }
        if (ops->upload(b->dev, b->data, b->nbytes) < 0) {
            rc = -1;
            goto out;
        }
        atomic_fetch_add(&copies_up, 1);
        atomic_fetch_or_explicit(&b->where, MK_ON_DEVICE, memory_order_release);
    }
out:
    pthread_mutex_unlock(&devcopy_mu);
    return rc;
}

void mk_buffer_host_slow(mk_buffer *b) {
    if (mk_buffer_to_host(b) == 0) return;
    /* the caller cannot fail: it reads zeros, and the error waits for the
     * evaluator loop or the binding (mk_take_device_error) */
    if (!device_error) device_error = strdup(mk_error_message());
    pthread_mutex_lock(&devcopy_mu);
    if (!b->data && posix_memalign(&b->data, MK_ALIGN, b->nbytes ? b->nbytes : 1) != 0) b->data = NULL;
    if (b->data) {
        memset(b->data, 0, b->nbytes);
        /* not marked valid: the next reader tries the copy again */
    }
    pthread_mutex_unlock(&devcopy_mu);
    if (!b->data) abort(); /* no memory for even a zeroed copy: nothing safe is left to do */
}

bool mk_take_device_error(void) {
    if (!device_error) return false;
    mk_error_set(MK_ERR_RUNTIME, "%s", device_error);
    free(device_error);
    device_error = NULL;
    return true;
}

void mk_buffer_incref(mk_buffer *b) { atomic_fetch_add_explicit(&b->refcnt, 1, memory_order_relaxed); }

void mk_buffer_decref(mk_buffer *b) {
    if (atomic_fetch_sub_explicit(&b->refcnt, 1, memory_order_acq_rel) != 1) return;
    if (b->dev) b->devops->free(b->dev, b->nbytes);
    if (b->release) {
        b->release(b);
    } else {
        mem_add(-(int64_t)b->nbytes);
        if (b->capacity >= MK_MMAP_MIN) {
            size_t used = (b->nbytes + MK_ALIGN - 1) / MK_ALIGN * MK_ALIGN;
            char *end = (char *)b->data + (used ? used : MK_ALIGN);
            size_t pages = ((used ? used : MK_ALIGN) + MK_PAGE - 1) / MK_PAGE * MK_PAGE;
            char *rw = end - b->capacity;
            if (b->capacity > pages) mprotect(rw, b->capacity - pages, PROT_READ | PROT_WRITE);
            cache_put(rw, b->capacity);
        } else {
            cache_put(b, b->capacity); /* the data is inside b's block (small_buffer_alloc) */
            return;
        }
    }
    free(b);
}

/* ------------------------------------------------------------- threads */

/* The graph lock guards the links between nodes: an array's `prim`, a
 * primitive's `inputs`/`ninputs`, `outputs`, `mark`, `state`, `waiters`,
 * `fails` and `err_*`. It is held for mk_eval's walk of the graph and for the
 * few stores that start or finish a primitive, never while an evaluator runs;
 * nothing that may free a node runs under it (freeing an unevaluated array
 * takes it). The condition variable wakes the threads waiting for a primitive
 * that another thread runs. */
static pthread_mutex_t graph_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t graph_cv = PTHREAD_COND_INITIALIZER;

static void graph_lock(void) { pthread_mutex_lock(&graph_mu); }
static void graph_unlock(void) { pthread_mutex_unlock(&graph_mu); }

enum { MK_PRIM_PENDING = 0, MK_PRIM_RUNNING, MK_PRIM_DONE };

/* ---------------------------------------------------- iterative freeing */

/* Objects whose count reached zero wait here; the first decref on a thread
 * drains the list, so freeing a long chain never recurses. Tag bit 1 marks a
 * primitive. */
static _Thread_local struct {
    uintptr_t *items;
    size_t n, cap;
    bool draining;
} graveyard;

/* A thread's graveyard list is freed when the thread exits. */
static pthread_key_t graveyard_key;
static pthread_once_t graveyard_once = PTHREAD_ONCE_INIT;

static void graveyard_exit(void *unused) {
    (void)unused;
    free(graveyard.items);
    graveyard.items = NULL;
    graveyard.n = graveyard.cap = 0;
}

static void graveyard_key_make(void) { pthread_key_create(&graveyard_key, graveyard_exit); }

static void bury(uintptr_t item) {
    if (graveyard.n == graveyard.cap) {
        if (!graveyard.cap) {
            pthread_once(&graveyard_once, graveyard_key_make);
            pthread_setspecific(graveyard_key, &graveyard);
        }
        size_t cap = graveyard.cap ? graveyard.cap * 2 : 64;
        uintptr_t *items = realloc(graveyard.items, cap * sizeof *items);
        if (!items) abort(); /* cannot report: we are freeing */
        graveyard.items = items;
        graveyard.cap = cap;
    }
    graveyard.items[graveyard.n++] = item;
}

static void prim_decref(mk_prim *p);

static void free_prim(mk_prim *p) {
    for (int i = 0; i < p->ninputs; i++) mk_decref(p->inputs[i]);
    free(p->err_msg);
    if (p->params) {
        if (p->op->free_params)
            p->op->free_params(p->params);
        else
            free(p->params);
    }
    free(p); /* with its outdesc, inputs and outputs (mk_prim_make) */
}

static void free_array(mk_array *a) {
    if (a->buf) mk_buffer_decref(a->buf);
    mk_prim *p = atomic_load_explicit(&a->prim, memory_order_acquire);
    if (p) {
        /* another thread may be starting p: it reads p's outputs under the
         * graph lock (and skips this one, whose count is zero) */
        graph_lock();
        p->outputs[a->out_index] = NULL;
        graph_unlock();
        prim_decref(p);
    }
    free(a);
}

static void drain(void) {
    if (graveyard.draining) return;
    graveyard.draining = true;
    while (graveyard.n) {
        uintptr_t item = graveyard.items[--graveyard.n];
        if (item & 1)
            free_prim((mk_prim *)(item & ~(uintptr_t)1));
        else
            free_array((mk_array *)item);
    }
    graveyard.draining = false;
}

void mk_decref(mk_array *a) {
    if (atomic_fetch_sub_explicit(&a->refcnt, 1, memory_order_acq_rel) != 1) return;
    if (atomic_load_explicit(&a->prim, memory_order_acquire) == NULL) {
        /* evaluated: freeing it frees nothing else that could recurse */
        if (a->buf) mk_buffer_decref(a->buf);
        free(a);
        return;
    }
    bury((uintptr_t)a);
    drain();
}

static void prim_incref(mk_prim *p) { atomic_fetch_add_explicit(&p->refcnt, 1, memory_order_relaxed); }

static void prim_decref(mk_prim *p) {
    if (atomic_fetch_sub_explicit(&p->refcnt, 1, memory_order_acq_rel) != 1) return;
    if (p->ninputs == 0) {
        /* run and detached (or no inputs): nothing it frees can recurse */
        free_prim(p);
        return;
    }
    bury((uintptr_t)p | 1);
    drain();
}

/* ------------------------------------------------------------ arrays */

int64_t mk_shape_size(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            mk_error_set(MK_ERR_VALUE, "Negative dimensions are not allowed.");
            return -1;
        }
        if (shape[i] && n > INT64_MAX / shape[i]) {
            mk_error_set(MK_ERR_VALUE, "Array size overflows int64.");
            return -1;
        }
        n *= shape[i];
    }
    return n;
}

static mk_array *array_new(mk_dtype dtype, int ndim, const int64_t *shape) {
    if (ndim > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    int64_t size = mk_shape_size(ndim, shape), nbytes;
    if (size < 0) return NULL;
    /* its bytes must be a size too (2^31 x 2^31 float32 is 2^64 bytes) */
    if (__builtin_mul_overflow(size, (int64_t)mk_dtype_size(dtype), &nbytes)) {
        mk_error_set(MK_ERR_VALUE, "Array size overflows int64: %lld elements of %d bytes.", (long long)size,
                     (int)mk_dtype_size(dtype));
        return NULL;
    }
    /* malloc, then zero all but the count, not calloc: glibc's calloc
     * skips its per-thread cache, and a node is allocated and freed for
     * every op (a memset of the whole block right after malloc would be
     * turned back into calloc by GCC) */
    mk_array *a = malloc(sizeof *a);
    if (!a) return mk_nomem();
    atomic_init(&a->refcnt, 1);
    memset((char *)a + sizeof a->refcnt, 0, sizeof *a - sizeof a->refcnt);
    a->dtype = dtype;
    a->ndim = ndim;
    a->size = size;
    if (ndim) memcpy(a->shape, shape, ndim * sizeof *shape);
    a->stream = MK_STREAM_NONE; /* nodes: set by mk_prim_make */
    return a;
}

void mk_update_flags(mk_array *a) {
    int f = 0;
    bool row = true, col = true;
    int64_t expect = 1;
    for (int i = a->ndim - 1; i >= 0; i--) {
        if (a->shape[i] != 1 && a->strides[i] != expect) row = false;
        expect *= a->shape[i];
    }
    expect = 1;
    for (int i = 0; i < a->ndim; i++) {
        if (a->shape[i] != 1 && a->strides[i] != expect) col = false;
        expect *= a->shape[i];
    }
    if (a->size == 0) row = col = true;
    if (row) f |= MK_ROW_CONTIG | MK_CONTIG;
    if (col) f |= MK_COL_CONTIG | MK_CONTIG;
    a->flags = f;
}

void mk_row_strides(int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        strides[i] = s;
        s *= shape[i];
    }
}

void mk_set_row_contiguous(mk_array *a) {
    mk_row_strides(a->ndim, a->shape, a->strides);
    a->offset = 0;
    a->flags = MK_ROW_CONTIG | MK_CONTIG;
    if (a->ndim <= 1 || a->size <= 1) a->flags |= MK_COL_CONTIG;
    else mk_update_flags(a);
}

int mk_alloc_out(mk_array *out) {
    mk_buffer *b = mk_buffer_alloc((size_t)out->size * mk_dtype_size(out->dtype));
    if (!b) return -1;
    if (out->buf) mk_buffer_decref(out->buf);
    out->buf = b;
    mk_set_row_contiguous(out);
    return 0;
}

void mk_set_view(mk_array *out, const mk_array *in, int64_t offset, const int64_t *strides) {
    mk_buffer_incref(in->buf);
    if (out->buf) mk_buffer_decref(out->buf);
    out->buf = in->buf;
    out->offset = offset;
    if (out->ndim) memcpy(out->strides, strides, out->ndim * sizeof *strides);
    mk_update_flags(out);
}

static _Thread_local int trace_depth;

/* What both donations need: nothing but the node sees in or its buffer,
 * which is dense, starts at in and holds exactly out's bytes, and no trace
 * keeps inputs. */
static bool donatable(const mk_array *in, const mk_array *out) {
    const mk_buffer *b = in->buf;
    size_t isz = mk_dtype_size(in->dtype);
    return !trace_depth && b && in->offset == 0 && (in->flags & MK_ROW_CONTIG) && in->size == out->size &&
           isz == mk_dtype_size(out->dtype) && b->nbytes == (size_t)in->size * isz &&
           atomic_load_explicit(&in->refcnt, memory_order_acquire) == 1 &&
           atomic_load_explicit(&b->refcnt, memory_order_acquire) == 1 &&
           atomic_load_explicit(&in->prim, memory_order_acquire) == NULL;
}

static void take_buffer(mk_prim *p, mk_array *out, mk_buffer *b) {
    mk_buffer_incref(b);
    if (out->buf) mk_buffer_decref(out->buf);
    out->buf = b;
    mk_set_row_contiguous(out);
    if (p) p->donated = true;
}

bool mk_donate(mk_prim *p, mk_array *out, mk_array *in) {
    if (!donatable(in, out) || in->buf->release || in->buf->dev) return false;
    take_buffer(p, out, in->buf);
    return true;
}

bool mk_donate_device(mk_prim *p, mk_array *out, mk_array *in, const mk_devmem_ops *ops) {
    mk_buffer *b = in->buf;
    if (!donatable(in, out) || (b->release && b->release != device_buffer_release) || !b->dev || b->devops != ops ||
        !(atomic_load_explicit(&b->where, memory_order_acquire) & MK_ON_DEVICE))
        return false;
    /* nothing else holds the buffer: the host copy, if any, is stale from now on */
    pthread_mutex_lock(&devcopy_mu);
    atomic_store_explicit(&b->where, MK_ON_DEVICE, memory_order_release);
    pthread_mutex_unlock(&devcopy_mu);
    take_buffer(p, out, b);
    return true;
}

int mk_donate_or_alloc(mk_prim *p, mk_array *out, mk_array *in) {
    return mk_donate(p, out, in) ? 0 : mk_alloc_out(out);
}

mk_array *mk_array_over(mk_buffer *b, mk_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides) {
    mk_array *a = array_new(dtype, ndim, shape);
    if (!a) {
        mk_buffer_decref(b);
        return NULL;
    }
    a->buf = b;
    if (ndim) memcpy(a->strides, strides, ndim * sizeof *strides);
    mk_update_flags(a);
    return a;
}

mk_array *mk_array_empty(mk_dtype dtype, int ndim, const int64_t *shape) {
    mk_array *a = array_new(dtype, ndim, shape);
    if (!a) return NULL;
    if (mk_alloc_out(a) < 0) {
        free(a);
        return NULL;
    }
    return a;
}

mk_array *mk_scalar(mk_dtype dtype, const void *value) {
    mk_array *a = mk_array_empty(dtype, 0, NULL);
    if (a) memcpy(a->buf->data, value, mk_dtype_size(dtype));
    return a;
}

/* ------------------------------------------------------------- graph */

int mk_prim_make(const mk_opdef *op, void *params, int ninputs, mk_array *const *inputs, int noutputs,
                 const mk_outdesc *outdesc, mk_array **outs) {
    /* one block: the primitive, its output descriptions (only each one's
     * used dims are copied), its input and output pointers */
    if (ninputs < 0 || noutputs < 0 || noutputs > (1 << 20) || ninputs > (1 << 24)) {
        mk_error_set(MK_ERR_VALUE, "[%s] Invalid number of inputs or outputs.", op->name);
        goto fail;
    }
    /* the stream it is made on (stream.h), and MLX's float64 rule for GPU
     * streams, checked when the node is made as MLX's array constructor */
    mk_stream stream = mk_current_stream();
    if (stream == MK_STREAM_NONE) goto fail;
    if (mk_stream_device(stream) == MK_GPU) {
        for (int i = 0; i < ninputs; i++)
            if (mk_stream_check_dtype(stream, inputs[i]->dtype) < 0) goto fail;
        for (int i = 0; i < noutputs; i++)
            if (mk_stream_check_dtype(stream, outdesc[i].dtype) < 0) goto fail;
    }
    size_t head = (sizeof(mk_prim) + 7) / 8 * 8;
    mk_prim *p = malloc(head + (size_t)noutputs * sizeof(mk_outdesc) + (size_t)(ninputs ? ninputs : 1) * sizeof(mk_array *) +
                        (size_t)noutputs * sizeof(mk_array *));
    if (!p) goto nomem;
    memset(p, 0, sizeof *p);
    atomic_init(&p->refcnt, 0);
    p->op = op;
    p->params = params;
    params = NULL;
    p->stream = stream;
    p->ninputs = ninputs;
    p->noutputs = noutputs;
    p->outdesc = (mk_outdesc *)((char *)p + head);
    p->inputs = (mk_array **)(p->outdesc + noutputs);
    p->outputs = p->inputs + (ninputs ? ninputs : 1);
    for (int i = 0; i < noutputs; i++) {
        p->outputs[i] = NULL;
        p->outdesc[i].dtype = outdesc[i].dtype;
        p->outdesc[i].ndim = outdesc[i].ndim;
        if (outdesc[i].ndim > 0 && outdesc[i].ndim <= MK_MAX_NDIM)
            memcpy(p->outdesc[i].shape, outdesc[i].shape, (size_t)outdesc[i].ndim * sizeof(int64_t));
    }
    int made = 0;
    for (; made < noutputs; made++) {
        mk_array *a = array_new(outdesc[made].dtype, outdesc[made].ndim, outdesc[made].shape);
        if (!a) break;
        atomic_init(&a->prim, p);
        a->out_index = made;
        a->stream = stream;
        p->outputs[made] = a;
        prim_incref(p);
        outs[made] = a;
    }
    if (made < noutputs) {
        /* inputs are not yet referenced: free the outputs, which frees p */
        p->ninputs = 0;
        if (made == 0) free_prim(p); /* no output holds it */
        for (int i = 0; i < made; i++) mk_decref(outs[i]);
        return -1;
    }
    for (int i = 0; i < ninputs; i++) {
        mk_incref(inputs[i]);
        p->inputs[i] = inputs[i];
    }
    return 0;
nomem:
    mk_nomem();
fail:
    if (params) {
        if (op->free_params)
            op->free_params(params);
        else
            free(params);
    }
    return -1;
}

mk_array *mk_node(const mk_opdef *op, void *params, mk_dtype dtype, int ndim, const int64_t *shape,
                  int ninputs, mk_array *const *inputs) {
    mk_outdesc d;
    if (ndim > MK_MAX_NDIM) {
        if (params) op->free_params ? op->free_params(params) : free(params);
        mk_error_set(MK_ERR_VALUE, "Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    d.dtype = dtype;
    d.ndim = ndim;
    if (ndim) memcpy(d.shape, shape, ndim * sizeof *shape);
    mk_array *out;
    if (mk_prim_make(op, params, ninputs, inputs, 1, &d, &out) < 0) return NULL;
    return out;
}

/* Takes a reference to an output unless it is already dying (its count
 * reached zero: free_array is about to unlink it). Under the graph lock. */
static bool try_incref(mk_array *a) {
    long n = atomic_load_explicit(&a->refcnt, memory_order_relaxed);
    while (n > 0)
        if (atomic_compare_exchange_weak_explicit(&a->refcnt, &n, n + 1, memory_order_relaxed,
                                                  memory_order_relaxed))
            return true;
    return false;
}

/* Tracing (function transformations, transforms.c): while a thread traces,
 * the primitives it runs keep their outputs and inputs linked (state DONE),
 * so that the graph a transformation walks survives evaluations inside the
 * traced function. Such outputs read as unevaluated (mk_is_evaluated): a
 * reader goes through mk_eval, which finds the primitive done under the
 * graph lock, and, once no trace is running, unlinks the output. */
void mk_trace_push(void) { trace_depth++; }
void mk_trace_pop(void) { trace_depth--; }
bool mk_tracing(void) { return trace_depth > 0; }

static int wait_prim(mk_prim *p, unsigned fails);
static int wait_prim_locked(mk_prim *p, unsigned fails);

/* An asynchronous run (mk_async_begin): what the thread that finishes the
 * primitive needs from the one that started it. */
struct mk_async {
    mk_prim *p; /* a reference */
    int n;
    bool tracing; /* the starting thread was tracing (trace_depth is per thread) */
    mk_array **outs;
    bool *temp;
};

/* The primitive this thread is running (run_prim_locked), for mk_async_begin. */
static _Thread_local struct {
    mk_prim *p;
    mk_array **outs;
    bool *temp;
    mk_async *async;
} cur_run;

/* Publishes a primitive's outcome once its evaluator has run (rc 0: the
 * outputs are filled; -1: the error is set on this thread), detaches it
 * unless tracing and wakes its waiters; drops the output references. */
static void finish_prim(mk_prim *p, int rc, mk_array **outs, const bool *temp, int n, bool tracing) {
    mk_errcode code = MK_OK;
    char *msg = NULL;
    if (rc < 0) {
        /* outputs stay unevaluated and attached; the error goes to waiters */
        for (int i = 0; i < n; i++)
            if (outs[i] && !temp[i] && outs[i]->buf) {
                mk_buffer_decref(outs[i]->buf);
                outs[i]->buf = NULL;
            }
        code = mk_error_code();
        msg = strdup(mk_error_message());
    }
    int drops = 0, nin = 0;
    graph_lock();
    if (rc == 0) {
        if (!tracing) {
            for (int i = 0; i < n; i++)
                if (!temp[i]) {
                    /* publishes the buffer and layout (mk_is_evaluated) */
                    atomic_store_explicit(&outs[i]->prim, NULL, memory_order_release);
                    p->outputs[i] = NULL;
                    drops++;
                }
            /* detach: the inputs are no longer needed by this node */
            nin = p->ninputs;
            p->ninputs = 0;
        }
        p->state = MK_PRIM_DONE;
    } else {
        p->state = MK_PRIM_PENDING;
        p->fails++;
        p->err_code = code;
        char *old = p->err_msg;
        p->err_msg = msg;
        msg = old;
    }
    if (p->waiters) pthread_cond_broadcast(&graph_cv);
    graph_unlock();
    free(msg);
    for (int i = 0; i < nin; i++) mk_decref(p->inputs[i]);
    for (int i = 0; i < drops; i++) prim_decref(p); /* the caller still holds a reference */
    for (int i = 0; i < n; i++) mk_xdecref(outs[i]);
}

mk_async *mk_async_begin(mk_prim *p) {
    if (cur_run.p != p || cur_run.async) {
        mk_error_set(MK_ERR_RUNTIME, "[eval] mk_async_begin outside the primitive's evaluator");
        return NULL;
    }
    int n = p->noutputs;
    mk_async *a = malloc(sizeof *a + (size_t)n * (sizeof *a->outs + sizeof *a->temp));
    if (!a) return mk_nomem();
    a->p = p;
    a->n = n;
    a->tracing = trace_depth > 0;
    a->outs = (mk_array **)(a + 1);
    a->temp = (bool *)(a->outs + n);
    memcpy(a->outs, cur_run.outs, (size_t)n * sizeof *a->outs);
    memcpy(a->temp, cur_run.temp, (size_t)n * sizeof *a->temp);
    prim_incref(p);
    cur_run.async = a;
    return a;
}

void mk_async_finish(mk_async *a, int rc) {
    mk_prim *p = a->p;
    if (rc == 0 && mk_interrupted()) rc = -1; /* nothing to skip: the work is done */
    finish_prim(p, rc, a->outs, a->temp, a->n, a->tracing);
    free(a);
    prim_decref(p);
}

/* Waits until no input of p is being run asynchronously (mk_async_begin)
 * or by another thread; an input whose run failed fails p with its error.
 * Returns 0 or -1. */
static int wait_inputs(mk_prim *p) {
    int rc = 0;
    graph_lock();
    for (int k = 0; k < p->ninputs && rc == 0; k++) {
        mk_prim *q = atomic_load_explicit(&p->inputs[k]->prim, memory_order_acquire);
        if (!q || q->state == MK_PRIM_DONE) continue;
        if (q->state == MK_PRIM_RUNNING) {
            q->waiters++;
            while (q->state == MK_PRIM_RUNNING) pthread_cond_wait(&graph_cv, &graph_mu);
            q->waiters--;
        }
        if (q->state != MK_PRIM_DONE && atomic_load_explicit(&p->inputs[k]->prim, memory_order_acquire)) {
            mk_error_set(q->fails ? q->err_code : MK_ERR_RUNTIME, "%s",
                         q->fails && q->err_msg ? q->err_msg : "[eval] An input was not evaluated.");
            rc = -1;
        }
    }
    graph_unlock();
    return rc;
}

/* Runs one primitive whose inputs are all evaluated, then detaches it
 * (unless tracing); or, when another thread is running it, waits for that
 * thread and takes its outcome (its error too). The caller holds a
 * reference to p and the graph lock, which this releases. An evaluator that
 * went asynchronous (mk_async_begin, returning MK_EVAL_ASYNC) leaves p
 * running: the thread that finishes it publishes the outcome, and *async
 * is set (NULL otherwise). */
static int run_prim_locked_async(mk_prim *p, unsigned *async_fails) {
    const int n = p->noutputs;
    mk_array *stack_outs[4];
    bool stack_temp[4];
    mk_array **outs = stack_outs;
    bool *temp = stack_temp;
    if (n > 4) {
        outs = malloc((size_t)n * (sizeof *outs + sizeof *temp));
        if (!outs) {
            graph_unlock();
            mk_nomem();
            return -1;
        }
        temp = (bool *)(outs + n);
    }
    int rc = 0;

    if (p->state == MK_PRIM_RUNNING) {
        /* another thread runs it: wait for its result */
        rc = wait_prim_locked(p, p->fails);
        graph_unlock();
        goto done;
    }
    if (p->state == MK_PRIM_DONE) {
        graph_unlock();
        goto done;
    }
    if (p->donated) {
        /* an earlier run failed after writing over an input it owned */
        graph_unlock();
        mk_error_set(MK_ERR_RUNTIME,
                     "[eval] An earlier evaluation of this array (%s) failed after it started writing over an "
                     "intermediate input; the array cannot be evaluated again.", p->op->name);
        rc = -1;
        goto done;
    }
    p->state = MK_PRIM_RUNNING;
    const unsigned fails0 = p->fails;
    for (int i = 0; i < n; i++) {
        mk_array *a = p->outputs[i];
        outs[i] = a && try_incref(a) ? a : NULL;
        temp[i] = outs[i] == NULL;
    }
    graph_unlock();

    for (int i = 0; i < n && rc == 0; i++)
        if (temp[i]) {
            /* the output died: compute into a temporary */
            outs[i] = array_new(p->outdesc[i].dtype, p->outdesc[i].ndim, p->outdesc[i].shape);
            if (!outs[i]) rc = -1;
        }
    if (rc == 0) {
        cur_run.p = p;
        cur_run.outs = outs;
        cur_run.temp = temp;
        cur_run.async = NULL;
        mk_eval_fn eval = p->op->eval;
        if (mk_stream_device(p->stream) == MK_GPU && !p->op->own_device) {
            mk_eval_fn (*gpu)(const mk_prim *) = mk_gpu_evaluator;
            mk_eval_fn g = gpu ? gpu(p) : NULL;
            if (g) eval = g;
        }
        void (*trace)(const char *, uint64_t, uint64_t, const mk_array *) = mk_op_trace;
        if (trace) { /* the profiler records every op it sees run */
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            rc = eval(p, p->inputs, outs);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            /* element-wise ops share a primitive: name the op itself */
            const char *name = p->op->name;
            if (strcmp(name, "unary") == 0)
                name = mk_unary_names[*(const mk_unary_op *)p->params];
            else if (strcmp(name, "binary") == 0)
                name = mk_binary_names[*(const mk_binary_op *)p->params];
            trace(name, (uint64_t)t0.tv_sec * 1000000000u + (uint64_t)t0.tv_nsec,
                  (uint64_t)t1.tv_sec * 1000000000u + (uint64_t)t1.tv_nsec, outs[0]);
        } else {
            rc = eval(p, p->inputs, outs);
        }
        /* a device copy that failed inside mk_data (which cannot fail) */
        if (rc == 0 && mk_take_device_error()) rc = -1;
        mk_async *a = cur_run.async;
        cur_run.p = NULL;
        cur_run.async = NULL;
        if (a) {
            /* the output references went to the token */
            if (rc != MK_EVAL_ASYNC) { /* began, then failed before handing it over */
                mk_async_finish(a, rc < 0 ? -1 : rc);
                rc = rc < 0 ? -1 : rc;
            } else {
                rc = 0;
                if (async_fails) *async_fails = fails0; /* the caller waits (wait_prim) */
                else rc = wait_prim(p, fails0);
            }
            goto done;
        }
    }
    if (rc == 0 && mk_interrupted()) { /* its pool jobs may have skipped work */
        mk_error_set(MK_ERR_INTERRUPT, "interrupted");
        rc = -1;
    }
    finish_prim(p, rc, outs, temp, n, trace_depth > 0);
done:
    if (outs != stack_outs) free(outs);
    return rc;
}

static int run_prim_locked(mk_prim *p) { return run_prim_locked_async(p, NULL); }

/* Waits until p, which had failed `fails` times when it started running (on
 * another thread, or asynchronously), is no longer running; a failure since
 * is this thread's error. Under the graph lock. */
static int wait_prim_locked(mk_prim *p, unsigned fails) {
    if (p->state == MK_PRIM_RUNNING) {
        p->waiters++;
        while (p->state == MK_PRIM_RUNNING) pthread_cond_wait(&graph_cv, &graph_mu);
        p->waiters--;
    }
    if (p->state != MK_PRIM_DONE && p->fails != fails) {
        mk_error_set(p->err_code, "%s", p->err_msg ? p->err_msg : "[eval] Evaluation failed on another thread.");
        return -1;
    }
    return 0;
}

static int wait_prim(mk_prim *p, unsigned fails) {
    graph_lock();
    int rc = wait_prim_locked(p, fails);
    graph_unlock();
    return rc;
}

/* A cheap op (mk_opdef.cheap: element-wise, a view, a copy to dense
 * storage) with one output of at most 4096 elements and
 * inputs as small: it runs in microseconds. A graph of up to
 * MK_SMALL_PRIMS of them is "small": mk_eval does not arm the Ctrl-C
 * handler for it, and mk_eval_small runs it with the GIL held. Under the
 * graph lock. */
#define MK_SMALL_PRIMS 8

static bool small_prim(const mk_prim *p) {
    if (p->noutputs != 1 || p->outdesc[0].ndim < 0) return false;
    if (!p->op->cheap) return false;
    /* with a device back-end active, GPU-stream nodes run there, not inline */
    if (mk_stream_device(p->stream) == MK_GPU && atomic_load_explicit(&mk_gpu_evaluator, memory_order_relaxed))
        return false;
    for (int k = 0; k < p->ninputs; k++)
        if (p->inputs[k]->size > 4096) return false;
    int64_t osz = 1;
    for (int k = 0; k < p->outdesc[0].ndim; k++) osz *= p->outdesc[0].shape[k];
    return osz <= 4096;
}

static uint64_t eval_epoch; /* under the graph lock */

typedef struct {
    mk_prim *p;
    int next;
} frame;

/* Evaluation has two steps. Under the graph lock, an iterative DFS collects
 * the pending primitives the arrays depend on, in dependency order, with a
 * reference to each. Then, without the lock, each runs in turn (run_prim):
 * one a thread finds running elsewhere is waited for, one already done is
 * skipped. Waiting cannot deadlock: a thread waits only between primitives,
 * holding none, and the running thread needs nothing from it. */
/* small_only (mk_eval_small): gives up, returning 1 with nothing done, as
 * soon as the graph is not small (small_prim); else it runs it on this
 * thread as mk_eval does. */
static int eval_impl(mk_array *const *arrays, int n, bool small_only) {
    mk_interrupt_begin();
    /* small graphs use the C stack: no allocation for one op's eval */
    frame stack0[16];
    mk_prim *order0[16], *unlinked0[8];
    size_t scap = 16, ocap = 16, sn = 0, on = 0;
    frame *stack = stack0;
    mk_prim **order = order0;
    mk_prim **unlinked = n <= 8 ? unlinked0 : malloc((size_t)n * sizeof *unlinked);
    size_t nunlinked = 0;
    int rc = 0;
    if (!unlinked) {
        mk_nomem();
        return -1;
    }

    graph_lock();
    uint64_t mark = ++eval_epoch;
    for (int r = 0; r < n; r++) {
        mk_prim *root = atomic_load_explicit(&arrays[r]->prim, memory_order_relaxed);
        if (root && root->state == MK_PRIM_DONE) {
            /* evaluated while tracing: once no trace runs, unlink it now */
            if (!trace_depth) {
                atomic_store_explicit(&arrays[r]->prim, NULL, memory_order_release);
                root->outputs[arrays[r]->out_index] = NULL;
                unlinked[nunlinked++] = root; /* its reference, dropped after the lock */
            }
            continue;
        }
        if (!root || root->mark == mark) continue;
        root->mark = mark;
        stack[sn++] = (frame){root, 0};
        while (sn) {
            frame *f = &stack[sn - 1];
            if (f->next < f->p->ninputs) {
                mk_prim *q = atomic_load_explicit(&f->p->inputs[f->next++]->prim, memory_order_relaxed);
                if (q && q->state == MK_PRIM_DONE) q = NULL; /* done while tracing */
                if (q && q->mark != mark) {
                    q->mark = mark;
                    if (sn == scap) {
                        frame *s = stack == stack0 ? malloc(scap * 2 * sizeof *stack)
                                                   : realloc(stack, scap * 2 * sizeof *stack);
                        if (!s) goto nomem;
                        if (stack == stack0) memcpy(s, stack0, sizeof stack0);
                        scap *= 2;
                        stack = s;
                    }
                    stack[sn++] = (frame){q, 0};
                }
            } else {
                if (small_only && (on == MK_SMALL_PRIMS || !small_prim(f->p))) goto not_small;
                if (on == ocap) {
                    mk_prim **o = order == order0 ? malloc(ocap * 2 * sizeof *order)
                                                  : realloc(order, ocap * 2 * sizeof *order);
                    if (!o) goto nomem;
                    if (order == order0) memcpy(o, order0, sizeof order0);
                    ocap *= 2;
                    order = o;
                }
                prim_incref(f->p);
                order[on++] = f->p;
                sn--;
            }
        }
    }
    /* a small graph finishes in microseconds: the binding's Ctrl-C handler
     * (a system call to check it) is not armed for it */
    bool quick = on <= MK_SMALL_PRIMS;
    for (size_t k = 0; k < on && quick; k++) quick = small_prim(order[k]);
    /* nor for GPU work whose evaluators arm it where the work gets long (mk_opdef.gpu_arms) */
    bool gpu_arms = !quick && atomic_load_explicit(&mk_gpu_evaluator, memory_order_relaxed);
    for (size_t k = 0; k < on && gpu_arms; k++)
        gpu_arms = order[k]->op->gpu_arms && mk_stream_device(order[k]->stream) == MK_GPU;
    quick = quick || gpu_arms;
    if (small_only && on == 1 && nunlinked == 0) {
        /* one primitive: run it under this hold of the lock */
        if (stack != stack0) free(stack);
        if (unlinked != unlinked0) free(unlinked);
        rc = run_prim_locked(order[0]);
        prim_decref(order[0]);
        return rc;
    }
    graph_unlock();
    void (*arm)(void) = mk_eval_arm;
    if (on && !quick && arm) arm();
    if (stack != stack0) free(stack);
    for (size_t k = 0; k < nunlinked; k++) prim_decref(unlinked[k]);
    if (unlinked != unlinked0) free(unlinked);

    size_t i = 0, nasync = 0;
    mk_stream last_stream = MK_STREAM_NONE;
    /* primitives that went asynchronous (communication, distributed.c): the
     * ones after them run meanwhile, those that read their outputs wait
     * (wait_inputs), and the evaluation ends when they have */
    unsigned *async_fails = NULL;
    for (; i < on; i++) {
        mk_prim *p = order[i];
        if (mk_interrupted()) {
            mk_error_set(MK_ERR_INTERRUPT, "interrupted");
            rc = -1;
            break;
        }
        /* a stream another thread made cannot run here (stream.h), as MLX */
        if (p->stream != last_stream && mk_stream_check_usable(p->stream) < 0) {
            rc = -1;
            break;
        }
        last_stream = p->stream;
        if (nasync && wait_inputs(p) < 0) {
            rc = -1;
            break;
        }
        unsigned fails = UINT_MAX;
        graph_lock();
        if (run_prim_locked_async(p, &fails) < 0) {
            rc = -1;
            break;
        }
        if (fails != UINT_MAX) {
            if (!async_fails && !(async_fails = malloc(on * sizeof *async_fails))) {
                wait_prim(p, fails);
                mk_nomem();
                rc = -1;
                break;
            }
            async_fails[nasync] = fails;
            order[nasync++] = p; /* keeps its reference; the slots below i are free */
            continue;
        }
        prim_decref(p);
    }
    for (size_t k = i; k < on; k++) prim_decref(order[k]);
    for (size_t k = 0; k < nasync; k++) {
        if (wait_prim(order[k], async_fails[k]) < 0 && rc == 0) rc = -1;
        prim_decref(order[k]);
    }
    free(async_fails);
    if (order != order0) free(order);
    return rc;
not_small:
    rc = 1;
    goto unwind;
nomem:
    mk_nomem();
    rc = -1;
unwind: /* the walk stopped: drop what it collected */
    graph_unlock();
    for (size_t k = 0; k < nunlinked; k++) prim_decref(unlinked[k]);
    if (unlinked != unlinked0) free(unlinked);
    for (size_t k = 0; k < on; k++) prim_decref(order[k]);
    if (stack != stack0) free(stack);
    if (order != order0) free(order);
    return rc;
}

int mk_eval(mk_array *const *arrays, int n) { return eval_impl(arrays, n, false); }

int mk_eval_small(mk_array *const *arrays, int n) {
    if (trace_depth || n > MK_SMALL_PRIMS) return 0;
    int rc = eval_impl(arrays, n, true);
    return rc < 0 ? -1 : rc == 0 ? 1 : 0;
}

void (*_Atomic mk_eval_arm)(void);
mk_eval_fn (*_Atomic mk_gpu_evaluator)(const mk_prim *p);

/* The profiler's hook (kernel/diag.c): called after each primitive runs. */
void (*_Atomic mk_op_trace)(const char *op, uint64_t begin_ns, uint64_t end_ns, const mk_array *out0);
