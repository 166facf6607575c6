/* mx.fast.cuda_kernel nodes on the GPU (the CUDA back-end's
 * cuda_kernel_eval): MLX's program of the call (kernel/cuda_kernel.c)
 * compiled by NVRTC (nvrtc.c's mkb_cuda_build_user, with its caches), its
 * module loaded once per context, and the launch MLX's
 * CustomKernel::eval_gpu makes: each input's device address (a dense copy
 * first where ensure_row_contiguous asks and it is not row-contiguous),
 * then, where the source names them, its Shape (int32 x 10), Strides
 * (int64 x 10) and ndim (int) by value; each output (filled with init_value
 * when given); blocks of min(threadgroup, grid) threads, ceil(grid /
 * threadgroup) of them per dimension, shared_memory bytes of dynamic shared
 * memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "core/types.h"
#include "cuda.h"
#include "driver.h"
#include "kernel/diag.h"

#define MLX_MAX_NDIM 10 /* MLX's MAX_NDIM: Shape and Strides hold 10 entries */

/* Loaded functions by program text (it holds the name, the template values
 * and the argument types), for the context generation they were loaded in. */
typedef struct user_entry {
    uint64_t hash;
    char *program;
    unsigned gen;
    CUmodule mod;
    CUfunction fn;
    int smem_set; /* the dynamic shared memory the function was allowed (above 48000 bytes) */
    struct user_entry *next;
} user_entry;
#define NBUCKETS 64
static user_entry *buckets[NBUCKETS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static int find_function(const mkk_call *c, const char *program, const char *kernel_name, int smem,
                         CUfunction *fn) {
    const unsigned gen = mkb_cuda_generation();
    const uint64_t h = c->gen_hash;
    user_entry *e;
    pthread_mutex_lock(&mu);
    for (e = buckets[h % NBUCKETS]; e; e = e->next)
        if (e->hash == h && e->gen == gen && strcmp(e->program, program) == 0) break;
    pthread_mutex_unlock(&mu);
    if (!e) {
        mkb_cuda_image img;
        char *lowered = NULL;
        if (mkb_cuda_build_user(program, kernel_name, mkb_cuda_sm(), &img, &lowered) < 0) return -1;
        if (!(e = calloc(1, sizeof *e)) || !(e->program = strdup(program))) {
            free(e);
            free(lowered);
            mkb_cuda_image_free(&img);
            mk_nomem();
            return -1;
        }
        char what[400];
        snprintf(what, sizeof what, "[cuda_kernel] loading the compiled kernel `%s`", kernel_name);
        int rc = mkb_cuda_check(mkb_cu.cuModuleLoadData(&e->mod, img.cubin), what);
        mkb_cuda_image_free(&img);
        if (rc < 0 || mkb_cuda_check(mkb_cu.cuModuleGetFunction(&e->fn, e->mod, lowered), what) < 0) {
            if (rc == 0) mkb_cu.cuModuleUnload(e->mod);
            free(lowered);
            free(e->program);
            free(e);
            return -1;
        }
        free(lowered);
        e->hash = h;
        e->gen = gen;
        pthread_mutex_lock(&mu);
        e->next = buckets[h % NBUCKETS];
        buckets[h % NBUCKETS] = e;
        pthread_mutex_unlock(&mu);
    }
    /* as MLX: more than 48000 bytes of dynamic shared memory must be allowed first */
    if (smem > 48000 && smem > e->smem_set) {
        char what[400];
        snprintf(what, sizeof what, "[cuda_kernel] allowing %d bytes of shared memory to `%s`", smem, kernel_name);
        if (mkb_cuda_check(mkb_cu.cuFuncSetAttribute(e->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
                           what) < 0)
            return -1;
        e->smem_set = smem;
    }
    *fn = e->fn;
    return 0;
}

int mkb_cuda_user_kernel_eval(mkk_kernel *k, mkk_call *c, mk_array *const *in, mk_array *const *out,
                              const char *program, const char *kernel_name) {
    const char *site = c->call_site ? c->call_site : "?";
    /* MLX's launch geometry, in its C ints */
    unsigned block[3], grid[3];
    for (int d = 0; d < 3; d++) {
        const int64_t g = c->grid[d], t = c->threadgroup[d];
        if (g < 1 || t < 1 || g > INT32_MAX || t > INT32_MAX || g + t - 1 > INT32_MAX) {
            mk_error_set(MK_ERR_RUNTIME,
                         "[cuda_kernel] Kernel `%s`: grid (%lld, %lld, %lld) and threadgroup (%lld, %lld, %lld) "
                         "entries must be positive 32-bit ints (the grid is in threads). Kernel called at %s",
                         kernel_name, (long long)c->grid[0], (long long)c->grid[1], (long long)c->grid[2],
                         (long long)c->threadgroup[0], (long long)c->threadgroup[1], (long long)c->threadgroup[2],
                         site);
            return -1;
        }
        block[d] = (unsigned)(t < g ? t : g);
        grid[d] = (unsigned)((g + t - 1) / t);
    }
    if (mkb_cuda_enter() < 0) return -1;
    CUfunction fn;
    if (find_function(c, program, kernel_name, k->shared_memory, &fn) < 0) return -1;

    int rc = -1, nargs = k->noutputs;
    for (int i = 0; i < k->ninputs; i++)
        nargs += 1 + (in[i]->ndim > 0) * (k->shape_info[i][0] + k->shape_info[i][1] + k->shape_info[i][2]);
    /* one 80-byte slot per argument: a device address, a Shape, a Strides or an int */
    int64_t(*slots)[MLX_MAX_NDIM] = calloc((size_t)nargs + 1, sizeof *slots);
    void **params = calloc((size_t)nargs + 1, sizeof *params);
    mk_buffer **copies = calloc((size_t)k->ninputs + 1, sizeof *copies);
    if (!slots || !params || !copies) {
        mk_nomem();
        goto done;
    }
    int a = 0;
    for (int i = 0; i < k->ninputs; i++) {
        const mk_array *x = in[i];
        int64_t st[MK_MAX_NDIM];
        CUdeviceptr p;
        if (mkb_cuda_input_ptr(x, k->ensure_row_contiguous, &copies[i], st, &p) < 0) goto done;
        memcpy(slots[a], &p, sizeof p);
        params[a] = slots[a];
        a++;
        if (x->ndim == 0) continue;
        if (x->ndim > MLX_MAX_NDIM && (k->shape_info[i][0] || k->shape_info[i][1])) {
            mk_error_set(MK_ERR_RUNTIME, "ndim can not be larger than %d.", MLX_MAX_NDIM);
            goto done;
        }
        if (k->shape_info[i][0]) {
            int32_t *sh = (int32_t *)slots[a];
            for (int d = 0; d < x->ndim; d++) sh[d] = (int32_t)x->shape[d];
            params[a] = slots[a];
            a++;
        }
        if (k->shape_info[i][1]) {
            memcpy(slots[a], st, sizeof(int64_t) * (size_t)x->ndim);
            params[a] = slots[a];
            a++;
        }
        if (k->shape_info[i][2]) {
            int32_t nd = x->ndim;
            memcpy(slots[a], &nd, sizeof nd);
            params[a] = slots[a];
            a++;
        }
    }
    for (int i = 0; i < k->noutputs; i++) {
        mk_buffer *b = mk_buffer_device((size_t)out[i]->size * mk_dtype_size(out[i]->dtype), &mkb_cuda_mem);
        if (!b) goto done;
        if (out[i]->buf) mk_buffer_decref(out[i]->buf);
        out[i]->buf = b;
        mk_set_row_contiguous(out[i]);
        CUdeviceptr p;
        if (mkb_cuda_buffer_ptr(b, &p) < 0) goto done;
        /* MLX's init_value is a float, cast to the output's dtype */
        if (c->has_init && out[i]->size &&
            mkb_cuda_fill(p, out[i]->dtype, (double)(float)c->init_value, out[i]->size) < 0)
            goto done;
        memcpy(slots[a], &p, sizeof p);
        params[a] = slots[a];
        a++;
    }
    if (mkk_debug_level() >= 2)
        mkk_debug(2, "launch cuda_kernel `%s`: %u x %u x %u blocks of %u x %u x %u threads, %d bytes of shared "
                     "memory, called at %s",
                  kernel_name, grid[0], grid[1], grid[2], block[0], block[1], block[2], k->shared_memory, site);
    char what[600];
    snprintf(what, sizeof what, "[cuda_kernel] launching kernel `%s` (called at %s)", kernel_name, site);
    if (mkb_cuda_check(mkb_cu.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                             (unsigned)k->shared_memory, NULL, params, NULL),
                       what) < 0)
        goto done;
    snprintf(what, sizeof what, "Kernel `%s`", kernel_name);
    if (mkb_cuda_wait(what, site) < 0) goto done;
    rc = 0;
done:
    if (copies)
        for (int i = 0; i < k->ninputs; i++)
            if (copies[i]) mk_buffer_decref(copies[i]);
    free(copies);
    free(slots);
    free(params);
    return rc;
}
