/* metal_kernel nodes on the GPU (the CUDA back-end's kernel_eval): the
 * program from NVRTC (program.c, nvrtc.c, with their caches), its module
 * loaded once per context, device buffers for the inputs and outputs (copied
 * up once where they live on the host), and the launch of the ABI in
 * mkpy/include/mkpy_cuda_launch.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../mkpy/include/mkpy_cuda_launch.h"
#include "core/ops.h"
#include "core/types.h"
#include "cuda.h"
#include "driver.h"
#include "kernel/diag.h"

/* Loaded functions, by what fixes the CUDA program: the generated Metal
 * source (it holds the kernel's name, template arguments and argument
 * types), the math mode and the launch bound (program.c rounds the
 * threadgroup up to a power of two), for the context generation they were
 * loaded in (a reset unloads them all). A hit costs a hash of the generated
 * source and one compare: the program text is not rebuilt. */
typedef struct module_entry {
    uint64_t hash;
    char *generated;
    int math, bound;
    unsigned gen;
    CUmodule mod;
    CUfunction fn;
    int max_threads; /* threads per block the compiled code allows (registers) */
    int shared;      /* static shared memory, mkpy's own (the barrier check's) taken out */
    struct module_entry *next;
} module_entry;
#define NBUCKETS 256
static module_entry *buckets[NBUCKETS];
static pthread_mutex_t modules_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t launch_mu = PTHREAD_MUTEX_INITIALIZER;

static int launch_bound(const mkk_call *c) {
    int64_t requested = c->threadgroup[0] * c->threadgroup[1] * c->threadgroup[2], threads = 32;
    while (threads < requested && threads < 1024) threads *= 2;
    return (int)threads;
}

/* The module's mkpy_cuda_g: where its polls and reports go. */
static int set_globals(CUmodule mod, const char *what) {
    CUdeviceptr p;
    size_t bytes = 0;
    if (mkb_cu.cuModuleGetGlobal_v2(&p, &bytes, mod, MKPY_CUDA_GLOBALS_SYMBOL) != CUDA_SUCCESS ||
        bytes != sizeof(struct mkpy_cuda_globals)) {
        mkk_debug(2, "a CUDA module without %s: its reports are off", MKPY_CUDA_GLOBALS_SYMBOL);
        return 0; /* a program without the runtime header's globals */
    }
    struct mkpy_cuda_globals g;
    if (mkb_cuda_globals(&g) < 0) return -1;
    return mkb_cuda_check(mkb_cu.cuMemcpyHtoD_v2(p, &g, sizeof g), what);
}

/* What a kernel reported (mkpy_cuda.h's report), as the CPU engines say it. */
static void report_error(const mkk_kernel *k, const char *generated, const struct mkpy_cuda_report *r,
                         const char *site) {
    if (r->code == MKPY_CUDA_REPORT_BARRIERS) {
        char fa[600], fb[600];
        int la = 0, ca = 0, lb = 0, cb = 0;
        unsigned a = r->site[0] < r->site[1] ? r->site[0] : r->site[1], b = a == r->site[0] ? r->site[1] : r->site[0];
        if (mkk_barrier_site(k, generated, (int)a, fa, sizeof fa, &la, &ca) < 0) snprintf(fa, sizeof fa, "?");
        if (mkk_barrier_site(k, generated, (int)b, fb, sizeof fb, &lb, &cb) < 0) snprintf(fb, sizeof fb, "?");
        mk_error_set(MK_ERR_RUNTIME,
                     "[metal_kernel] Kernel `%s` (GPU): threads of one threadgroup wait at different barriers "
                     "(%s:%d:%d and %s:%d:%d); every thread must reach the same threadgroup_barrier (threads that "
                     "return count as arrived). Kernel called at %s",
                     k->name, fa, la, ca, fb, lb, cb, site);
    } else {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s` (GPU) reported problem %u. Kernel called at %s",
                     k->name, r->code, site);
    }
}

static int find_function(const mkk_kernel *k, const mkk_call *c, mk_array *const *in, const char *generated,
                         const char *kernel_name, CUfunction *fn, int *max_threads, int *shared, int *how) {
    const unsigned gen = mkb_cuda_generation();
    const uint64_t h = c->gen_hash; /* of generated: dispatch.c hashes it once per call signature */
    const int bound = launch_bound(c), math = (int)k->math_mode;
    pthread_mutex_lock(&modules_mu);
    for (module_entry *e = buckets[h % NBUCKETS]; e; e = e->next)
        if (e->hash == h && e->gen == gen && e->bound == bound && e->math == math &&
            strcmp(e->generated, generated) == 0) {
            *fn = e->fn;
            *max_threads = e->max_threads;
            *shared = e->shared;
            *how = MKK_FOUND_IN_MEMORY;
            pthread_mutex_unlock(&modules_mu);
            return 0;
        }
    pthread_mutex_unlock(&modules_mu);
    mkb_cuda_image img;
    if (mkb_cuda_build(k, c, in, generated, kernel_name, mkb_cuda_sm(), &img) < 0) return -1;
    *how = img.how;
    module_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->generated = strdup(generated))) {
        free(e);
        mkb_cuda_image_free(&img);
        mk_nomem();
        return -1;
    }
    char what[300];
    snprintf(what, sizeof what, "loading the compiled kernel `%s`", k->name);
    int rc = mkb_cuda_check(mkb_cu.cuModuleLoadData(&e->mod, img.cubin), what);
    mkb_cuda_image_free(&img);
    if (rc < 0 || mkb_cuda_check(mkb_cu.cuModuleGetFunction(&e->fn, e->mod, MKPY_CUDA_ENTRY_SYMBOL), what) < 0 ||
        mkb_cuda_check(mkb_cu.cuFuncGetAttribute(&e->max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, e->fn),
                       what) < 0 ||
        mkb_cuda_check(mkb_cu.cuFuncGetAttribute(&e->shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, e->fn), what) < 0 ||
        set_globals(e->mod, what) < 0) {
        free(e->generated);
        free(e);
        return -1;
    }
    {
        /* the barrier check's slots and parities (mkpy_cuda.h), present when the kernel has a barrier */
        char f[8];
        int l, col;
        if (mkk_barrier_site(k, generated, 0, f, sizeof f, &l, &col) == 0) e->shared -= 2 * 4 + 1024;
        /* and the slots of Metal's active mask (MKPY_SIMT: one word per thread of the bound) */
        if (mkk_cuda_simt(generated) > 0) e->shared -= 4 * bound;
    }
    e->hash = h;
    e->gen = gen;
    e->bound = bound;
    e->math = math;
    pthread_mutex_lock(&modules_mu);
    e->next = buckets[h % NBUCKETS];
    buckets[h % NBUCKETS] = e;
    pthread_mutex_unlock(&modules_mu);
    *fn = e->fn;
    *max_threads = e->max_threads;
    *shared = e->shared;
    return 0;
}

int mkb_cuda_fill(CUdeviceptr p, mk_dtype t, double v, int64_t n) {
    unsigned char one[16];
    size_t isz = mk_dtype_size(t);
    mk_put_f64(t, one, v);
    if (isz == 1) return mkb_cuda_check(mkb_cu.cuMemsetD8_v2(p, one[0], (size_t)n), "init_value");
    if (isz == 2) {
        unsigned short u;
        memcpy(&u, one, 2);
        return mkb_cuda_check(mkb_cu.cuMemsetD16_v2(p, u, (size_t)n), "init_value");
    }
    if (isz == 4) {
        unsigned u;
        memcpy(&u, one, 4);
        return mkb_cuda_check(mkb_cu.cuMemsetD32_v2(p, u, (size_t)n), "init_value");
    }
    /* 8 bytes (complex64, int64): a host pattern copied up */
    unsigned char *h = malloc((size_t)n * isz);
    if (!h) {
        mk_nomem();
        return -1;
    }
    for (int64_t i = 0; i < n; i++) memcpy(h + i * isz, one, isz);
    int rc = mkb_cuda_check(mkb_cu.cuMemcpyHtoD_v2(p, h, (size_t)n * isz), "init_value");
    free(h);
    return rc;
}

int mkb_cuda_input_ptr(const mk_array *x, bool dense, mk_buffer **copy, int64_t *strides, CUdeviceptr *p) {
    mk_buffer *xb = x->buf;
    int64_t offset = x->offset;
    if (dense && !(x->flags & MK_ROW_CONTIG)) {
        /* a dense copy, made on the host (the input is copied down if it lives on the GPU) */
        if (!(*copy = mk_buffer_alloc((size_t)x->size * mk_dtype_size(x->dtype)))) return -1;
        mk_row_strides(x->ndim, x->shape, strides);
        mk_copy_into(x, (*copy)->data, strides);
        if (mk_take_device_error()) return -1;
        xb = *copy;
        offset = 0;
    } else {
        for (int d = 0; d < x->ndim; d++) strides[d] = x->strides[d];
    }
    CUdeviceptr base;
    if (mkb_cuda_buffer_ptr(xb, &base) < 0) return -1;
    *p = base + (CUdeviceptr)(offset * (int64_t)mk_dtype_size(x->dtype));
    return 0;
}

int mkb_cuda_kernel_eval(mkk_kernel *k, mkk_call *c, mk_array *const *in, mk_array *const *out,
                         const char *generated, const char *kernel_name, const mkk_launch *plan, uint64_t groups) {
    const char *site = c->call_site ? c->call_site : "?";
    int rc = -1;
    /* the ABI's arguments: no more than Metal's 31 buffers (mkk_check_call), so on the stack */
    enum { MAX_ARGS = 32 };
    mk_buffer *copies[MAX_ARGS] = {0};
    void *params[MAX_ARGS + 1];
    CUdeviceptr ptrs[MAX_ARGS], scratch = 0;
    unsigned char meta_small[256], *meta = NULL;
    size_t meta_bytes = 0;
    bool locked = false;
    if (mkb_cuda_enter() < 0) return -1;
    CUfunction fn;
    int max_threads;
    int shared;
    int how = MKK_COMPILED;
    const bool profiling = mkk_profiling();
    mkk_profile_kernel prof = {k->name, "gpu (CUDA)", NULL, profiling ? mkk_now_ns() : 0};
    if (find_function(k, c, in, generated, kernel_name, &fn, &max_threads, &shared, &how) < 0) return -1;
    if (profiling) prof.compile_end = mkk_now_ns();
    if (shared > MKPY_MAX_THREADGROUP_MEMORY) {
        char where[1024];
        mkk_threadgroup_sites(k, generated, where, sizeof where);
        mk_error_set(MK_ERR_RUNTIME,
                     "[metal_kernel] Kernel `%s` (GPU): its threadgroup memory reaches %d bytes (declared at %s), more "
                     "than the %d bytes (32 KiB) a threadgroup may use on Apple GPUs. Kernel called at %s",
                     k->name, shared, *where ? where : "?", MKPY_MAX_THREADGROUP_MEMORY, site);
        return -1;
    }
    const unsigned threads = plan->tg[0] * plan->tg[1] * plan->tg[2];
    if ((int)threads > max_threads) {
        mk_error_set(MK_ERR_VALUE,
                     "[metal_kernel] Kernel `%s`: a threadgroup of %u threads is more than the compiled kernel allows "
                     "on this GPU (%d: its registers), as Metal's maxTotalThreadsPerThreadgroup. Kernel called at %s",
                     k->name, threads, max_threads, site);
        goto done;
    }

    /* the argument list of the ABI: inputs and their shape info, outputs */
    int nargs = k->noutputs;
    for (int i = 0; i < k->ninputs; i++)
        nargs += 1 + (in[i]->ndim > 0) * (k->shape_info[i][0] + k->shape_info[i][1] + k->shape_info[i][2]);
    if (nargs > MAX_ARGS || k->ninputs > MAX_ARGS) { /* mkk_check_call refused these already */
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s` takes %d buffers. Kernel called at %s", k->name,
                     nargs, site);
        goto done;
    }
    /* shapes (int32), strides (int64) and ndims (int32), 8-byte aligned, in one scratch block */
    for (int i = 0; i < k->ninputs; i++)
        if (in[i]->ndim > 0)
            meta_bytes += k->shape_info[i][0] * (size_t)(in[i]->ndim * 4 + 7) / 8 * 8 +
                          k->shape_info[i][1] * (size_t)in[i]->ndim * 8 + k->shape_info[i][2] * 8;
    if (meta_bytes) {
        if (meta_bytes <= sizeof meta_small)
            memset(meta = meta_small, 0, meta_bytes);
        else if (!(meta = calloc(1, meta_bytes))) {
            mk_nomem();
            goto done;
        }
        if (mkb_cuda_scratch(meta_bytes, &scratch) < 0) goto done;
    }
    size_t mo = 0;
    int a = 0;
    for (int i = 0; i < k->ninputs; i++) {
        const mk_array *x = in[i];
        int64_t st[MK_MAX_NDIM];
        if (mkb_cuda_input_ptr(x, k->ensure_row_contiguous, &copies[i], st, &ptrs[a++]) < 0) goto done;
        if (x->ndim > 0) {
            if (k->shape_info[i][0]) {
                int32_t *sh = (int32_t *)(meta + mo);
                for (int d = 0; d < x->ndim; d++) sh[d] = (int32_t)x->shape[d];
                ptrs[a++] = scratch + mo;
                mo += (size_t)(x->ndim * 4 + 7) / 8 * 8;
            }
            if (k->shape_info[i][1]) {
                memcpy(meta + mo, st, (size_t)x->ndim * 8);
                ptrs[a++] = scratch + mo;
                mo += (size_t)x->ndim * 8;
            }
            if (k->shape_info[i][2]) {
                int32_t nd = x->ndim;
                memcpy(meta + mo, &nd, 4);
                ptrs[a++] = scratch + mo;
                mo += 8;
            }
        }
    }
    if (meta_bytes && mkb_cuda_check(mkb_cu.cuMemcpyHtoD_v2(scratch, meta, meta_bytes), "copying shapes to the GPU") < 0)
        goto done;
    for (int i = 0; i < k->noutputs; i++) {
        size_t nbytes = (size_t)out[i]->size * mk_dtype_size(out[i]->dtype);
        mk_buffer *b = mk_buffer_device(nbytes, &mkb_cuda_mem);
        if (!b) goto done;
        if (out[i]->buf) mk_buffer_decref(out[i]->buf);
        out[i]->buf = b;
        mk_set_row_contiguous(out[i]);
        CUdeviceptr p;
        if (mkb_cuda_buffer_ptr(b, &p) < 0) goto done;
        if (c->has_init && out[i]->size && mkb_cuda_fill(p, out[i]->dtype, c->init_value, out[i]->size) < 0) goto done;
        if (!c->has_init && nbytes && mkk_parity_fill() &&
            mkb_cuda_check(mkb_cu.cuMemsetD8_v2(p, MKK_PARITY_BYTE, nbytes), "MKPY_GPU_PARITY's fill") < 0)
            goto done;
        ptrs[a++] = p;
    }

    struct mkpy_cuda_launch L;
    mkpy_cuda_launch_fill(&L, plan->grid, plan->tg, plan->ngroups);
    params[0] = &L;
    for (int i = 0; i < nargs; i++) params[i + 1] = &ptrs[i];
    if (mkk_debug_level() >= 2)
        mkk_debug(2, "launch `%s` on the GPU: grid (%u, %u, %u), threadgroup (%u, %u, %u), %llu blocks of %u threads, "
                     "called at %s",
                  k->name, L.grid[0], L.grid[1], L.grid[2], L.tg[0], L.tg[1], L.tg[2], (unsigned long long)groups,
                  threads, site);
    /* one metal_kernel launch at a time: the report is the context's */
    pthread_mutex_lock(&launch_mu);
    locked = true;
    if (profiling) prof.run_begin = mkk_now_ns();
    /* the grid of blocks is the grid of threadgroups, in as many launches as CUDA's limits on a
     * grid's dimensions need (usually one) */
    static const uint32_t most[3] = {0x7fffffffu, 65535u, 65535u};
    for (uint64_t z = 0; z < L.ngroups[2]; z += most[2])
        for (uint64_t y = 0; y < L.ngroups[1]; y += most[1])
            for (uint64_t x = 0; x < L.ngroups[0]; x += most[0]) {
                const uint32_t at[3] = {(uint32_t)x, (uint32_t)y, (uint32_t)z};
                unsigned n[3];
                for (int d = 0; d < 3; d++) {
                    L.origin[d] = at[d];
                    n[d] = L.ngroups[d] - at[d] < most[d] ? L.ngroups[d] - at[d] : most[d];
                }
                const CUresult r = mkb_cu.cuLaunchKernel(fn, n[0], n[1], n[2], threads, 1, 1, 0, NULL, params, NULL);
                if (r != CUDA_SUCCESS) {
                    char w[480];
                    snprintf(w, sizeof w, "[metal_kernel] launching kernel `%s` (called at %s)", k->name, site);
                    mkb_cuda_check(r, w);
                    goto done;
                }
            }
    if (mkb_cuda_wait_kernel(k->name, site) < 0) goto done;
    if (profiling) {
        prof.run_end = mkk_now_ns();
        prof.cache = mkk_profile_cache_word(how);
        for (int d = 0; d < 3; d++) {
            prof.grid[d] = c->grid[d];
            prof.threadgroup[d] = plan->tg[d];
        }
        prof.threads = (uint64_t)plan->grid[0] * plan->grid[1] * plan->grid[2];
        prof.groups = groups;
        prof.barriers = mkk_count_barriers(k);
        mkk_profile_record_kernel(&prof);
    }
    struct mkpy_cuda_report report;
    if (mkb_cuda_take_report(&report)) {
        report_error(k, generated, &report, site);
        goto done;
    }
    if (c->verbose) mkk_report("mkpy: kernel `%s` runs on the GPU (CUDA, sm_%d)\n", k->name, mkb_cuda_sm());
    rc = 0;
done:
    if (locked) pthread_mutex_unlock(&launch_mu);
    if (scratch) mkb_cuda_scratch_free(scratch, meta_bytes);
    if (meta != meta_small) free(meta);
    for (int i = 0; i < k->ninputs && i < MAX_ARGS; i++)
        if (copies[i]) mk_buffer_decref(copies[i]);
    return rc;
}
