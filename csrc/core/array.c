#include "array.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

#include "pool.h"

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
void mk_memory_reset_peak(void) { atomic_store(&mem_peak, atomic_load(&mem_active)); }

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

/* Freed mapped blocks, most recently freed first. A request takes the first
 * block whose size is at least the request and at most 1/8 above it (MLX's
 * allocator also reuses near sizes). The default limit is MLX's: the memory
 * limit, set by the binding; until then, no limit below the system's. */
typedef struct cached_block {
    void *data;
    size_t size;
    struct cached_block *next;
} cached_block;

static struct {
    pthread_mutex_t mu;
    cached_block *head;
    int64_t bytes, limit;
} cache = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, INT64_MAX};

static void *cache_take(size_t size, size_t *got) {
    void *p = NULL;
    pthread_mutex_lock(&cache.mu);
    for (cached_block **l = &cache.head; *l; l = &(*l)->next) {
        cached_block *c = *l;
        if (c->size >= size && c->size - size <= size / 8) {
            *l = c->next;
            cache.bytes -= (int64_t)c->size;
            p = c->data;
            *got = c->size;
            free(c);
            break;
        }
    }
    pthread_mutex_unlock(&cache.mu);
    return p;
}

/* Unmaps the oldest blocks until the cache holds at most `target` bytes.
 * Called with the lock held. */
static void cache_trim_locked(int64_t target) {
    while (cache.bytes > target && cache.head) {
        cached_block **l = &cache.head;
        while ((*l)->next) l = &(*l)->next;
        cached_block *c = *l;
        *l = NULL;
        cache.bytes -= (int64_t)c->size;
        unmap_buffer(c->data, c->size);
        free(c);
    }
}

static void cache_put(void *data, size_t size) {
    cached_block *c = malloc(sizeof *c);
    pthread_mutex_lock(&cache.mu);
    if (c && (int64_t)size <= cache.limit) {
        cache_trim_locked(cache.limit - (int64_t)size);
        c->data = data;
        c->size = size;
        c->next = cache.head;
        cache.head = c;
        cache.bytes += (int64_t)size;
        c = NULL;
        data = NULL;
    }
    pthread_mutex_unlock(&cache.mu);
    free(c);
    if (data) unmap_buffer(data, size);
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

void mk_cache_clear(void) {
    pthread_mutex_lock(&cache.mu);
    cache_trim_locked(0);
    pthread_mutex_unlock(&cache.mu);
}

/* ------------------------------------------------------------ buffers */

mk_buffer *mk_buffer_alloc(size_t nbytes) {
    mk_buffer *b = malloc(sizeof *b);
    if (!b) return mk_nomem();
    size_t alloc = (nbytes + MK_ALIGN - 1) / MK_ALIGN * MK_ALIGN;
    if (alloc == 0) alloc = MK_ALIGN;
    if (alloc >= MK_MMAP_MIN) {
        alloc = (alloc + MK_PAGE - 1) / MK_PAGE * MK_PAGE;
        size_t got = alloc;
        b->data = cache_take(alloc, &got);
        if (!b->data) {
            b->data = map_buffer(alloc);
            if (!b->data && mk_cache_memory() > 0) {
                /* the cache may hold what the system lacks */
                mk_cache_clear();
                b->data = map_buffer(alloc);
            }
        }
        alloc = got;
    } else {
        b->data = aligned_alloc(MK_ALIGN, alloc);
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
    mem_add((int64_t)nbytes);
    return b;
}

void mk_buffer_incref(mk_buffer *b) { atomic_fetch_add_explicit(&b->refcnt, 1, memory_order_relaxed); }

void mk_buffer_decref(mk_buffer *b) {
    if (atomic_fetch_sub_explicit(&b->refcnt, 1, memory_order_acq_rel) != 1) return;
    if (b->release) {
        b->release(b);
    } else {
        mem_add(-(int64_t)b->nbytes);
        if (b->capacity >= MK_MMAP_MIN)
            cache_put(b->data, b->capacity);
        else
            free(b->data);
    }
    free(b);
}

/* ---------------------------------------------------- iterative freeing */

/* Objects whose count reached zero wait here; the first decref on a thread
 * drains the list, so freeing a long chain never recurses. Tag bit 1 marks a
 * primitive. */
static _Thread_local struct {
    uintptr_t *items;
    size_t n, cap;
    bool draining;
} graveyard;

static void bury(uintptr_t item) {
    if (graveyard.n == graveyard.cap) {
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
    free(p->inputs);
    if (p->params) {
        if (p->op->free_params)
            p->op->free_params(p->params);
        else
            free(p->params);
    }
    free(p->outdesc);
    free(p->outputs);
    free(p);
}

static void free_array(mk_array *a) {
    if (a->buf) mk_buffer_decref(a->buf);
    if (a->prim) {
        a->prim->outputs[a->out_index] = NULL;
        prim_decref(a->prim);
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
    bury((uintptr_t)a);
    drain();
}

static void prim_incref(mk_prim *p) { atomic_fetch_add_explicit(&p->refcnt, 1, memory_order_relaxed); }

static void prim_decref(mk_prim *p) {
    if (atomic_fetch_sub_explicit(&p->refcnt, 1, memory_order_acq_rel) != 1) return;
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
    int64_t size = mk_shape_size(ndim, shape);
    if (size < 0) return NULL;
    mk_array *a = calloc(1, sizeof *a);
    if (!a) return mk_nomem();
    atomic_init(&a->refcnt, 1);
    a->dtype = dtype;
    a->ndim = ndim;
    a->size = size;
    if (ndim) memcpy(a->shape, shape, ndim * sizeof *shape);
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
    mk_prim *p = calloc(1, sizeof *p);
    if (!p) goto nomem;
    atomic_init(&p->refcnt, 0);
    p->op = op;
    p->params = params;
    params = NULL;
    p->ninputs = ninputs;
    p->noutputs = noutputs;
    p->inputs = malloc((ninputs ? ninputs : 1) * sizeof *p->inputs);
    p->outdesc = malloc(noutputs * sizeof *p->outdesc);
    p->outputs = calloc(noutputs, sizeof *p->outputs);
    if (!p->inputs || !p->outdesc || !p->outputs) goto nomem;
    memcpy(p->outdesc, outdesc, noutputs * sizeof *outdesc);
    int made = 0;
    for (; made < noutputs; made++) {
        mk_array *a = array_new(outdesc[made].dtype, outdesc[made].ndim, outdesc[made].shape);
        if (!a) break;
        a->prim = p;
        a->out_index = made;
        p->outputs[made] = a;
        prim_incref(p);
        outs[made] = a;
    }
    if (made < noutputs) {
        /* inputs are not yet referenced: free the outputs, which frees p */
        p->ninputs = 0;
        for (int i = 0; i < made; i++) mk_decref(outs[i]);
        return -1;
    }
    for (int i = 0; i < ninputs; i++) {
        mk_incref(inputs[i]);
        p->inputs[i] = inputs[i];
    }
    return 0;
nomem:
    if (p) {
        p->ninputs = 0;
        if (!p->params) p->params = params;
        free_prim(p);
    } else if (params) {
        if (op->free_params)
            op->free_params(params);
        else
            free(params);
    }
    mk_nomem();
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

static _Thread_local int trace_depth;
void mk_trace_push(void) { trace_depth++; }
void mk_trace_pop(void) { trace_depth--; }
bool mk_tracing(void) { return trace_depth > 0; }

/* Drops an evaluated array's link to the primitive that made it (kept while
 * tracing). */
static void detach_output(mk_array *a) {
    mk_prim *p = a->prim;
    if (!p) return;
    a->prim = NULL;
    p->outputs[a->out_index] = NULL;
    prim_decref(p);
}

/* Runs one primitive whose inputs are all evaluated, then detaches it
 * (unless tracing: then outputs and inputs stay linked). */
static int run_prim(mk_prim *p) {
    mk_array *stack_outs[4];
    mk_array **outs = p->noutputs <= 4 ? stack_outs : malloc(p->noutputs * sizeof *outs);
    if (!outs) {
        mk_nomem();
        return -1;
    }
    int rc = 0;
    int ntemp = 0;
    for (int i = 0; i < p->noutputs; i++) {
        outs[i] = p->outputs[i];
        if (!outs[i]) {
            /* the output died: compute into a temporary */
            outs[i] = array_new(p->outdesc[i].dtype, p->outdesc[i].ndim, p->outdesc[i].shape);
            if (!outs[i]) {
                for (int j = 0; j < i; j++)
                    if (!p->outputs[j]) mk_decref(outs[j]);
                rc = -1;
                goto done;
            }
            ntemp++;
        }
    }
    rc = p->op->eval(p, p->inputs, outs);
    for (int i = 0; i < p->noutputs; i++) {
        if (p->outputs[i] != outs[i]) {
            mk_decref(outs[i]);
        } else if (rc == 0) {
            if (!trace_depth) {
                outs[i]->prim = NULL;
                p->outputs[i] = NULL;
                prim_decref(p); /* the caller still holds a reference */
            }
        } else if (outs[i]->buf) {
            mk_buffer_decref(outs[i]->buf);
            outs[i]->buf = NULL;
        }
    }
    if (rc == 0 && !trace_depth) {
        /* detach: the inputs are no longer needed by this node */
        int n = p->ninputs;
        p->ninputs = 0;
        for (int i = 0; i < n; i++) mk_decref(p->inputs[i]);
    }
done:
    if (outs != stack_outs) free(outs);
    (void)ntemp;
    return rc;
}

static atomic_ullong eval_epoch;

typedef struct {
    mk_prim *p;
    int next;
} frame;

int mk_eval(mk_array *const *arrays, int n) {
    uint64_t mark = atomic_fetch_add(&eval_epoch, 1) + 1;
    size_t scap = 64, ocap = 64, sn = 0, on = 0;
    frame *stack = malloc(scap * sizeof *stack);
    mk_prim **order = malloc(ocap * sizeof *order);
    int rc = 0;
    if (!stack || !order) goto nomem;

    for (int r = 0; r < n; r++) {
        if (mk_is_evaluated(arrays[r])) {
            /* evaluated while tracing: let the graph go now */
            if (!trace_depth) detach_output(arrays[r]);
            continue;
        }
        mk_prim *root = arrays[r]->prim;
        if (!root || root->mark == mark) continue;
        root->mark = mark;
        stack[sn++] = (frame){root, 0};
        while (sn) {
            frame *f = &stack[sn - 1];
            if (f->next < f->p->ninputs) {
                mk_array *in = f->p->inputs[f->next++];
                mk_prim *q = in->buf ? NULL : in->prim;
                if (q && q->mark != mark) {
                    q->mark = mark;
                    if (sn == scap) {
                        frame *s = realloc(stack, (scap *= 2) * sizeof *stack);
                        if (!s) goto nomem;
                        stack = s;
                    }
                    stack[sn++] = (frame){q, 0};
                }
            } else {
                if (on == ocap) {
                    mk_prim **o = realloc(order, (ocap *= 2) * sizeof *order);
                    if (!o) goto nomem;
                    order = o;
                }
                prim_incref(f->p);
                order[on++] = f->p;
                sn--;
            }
        }
    }
    free(stack);
    stack = NULL;

    size_t i = 0;
    for (; i < on; i++) {
        mk_prim *p = order[i];
        if (run_prim(p) < 0) {
            rc = -1;
            break;
        }
        prim_decref(p);
    }
    for (; i < on; i++) prim_decref(order[i]);
    free(order);
    return rc;
nomem:
    for (size_t k = 0; k < on; k++) prim_decref(order[k]);
    free(stack);
    free(order);
    mk_nomem();
    return -1;
}
