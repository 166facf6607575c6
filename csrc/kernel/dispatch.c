/* The lazy node of a kernel call, and its evaluation: prepare inputs and
 * outputs as MLX does, check the launch, get the compiled entry points, and
 * run the threadgroups over the thread pool.
 *
 * Two execution schemes, chosen in one place (`pick_scheme`):
 *   plain        threads of a threadgroup run one after another (exact for
 *                per-thread code, and the fastest);
 *   cooperative  each thread of a threadgroup runs on its own fiber and a
 *                scheduler switches at barriers and SIMD-group functions
 *                (coop.c) - for threadgroup memory, barriers, SIMD/quad-group
 *                functions.
 * Either way kernel code runs inside mk_fault_guarded_call, so a wild pointer
 * or a stack overflow becomes a Python error instead of a crash. The next step
 * for speed is region splitting at barriers (see docs/kernels.md). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/iter.h"
#include "core/ops.h"
#include "core/pool.h"
#include "core/types.h"
#include "cbs.h"
#include "coop.h"
#include "kernel.h"

#define MAX_THREADS_PER_THREADGROUP 1024
#define MAX_BUFFERS 31 /* Metal's buffer argument table */

typedef struct {
    mkk_kernel *k;
    mkk_call *c;
} kernel_params;

static void free_params(void *p) {
    kernel_params *kp = p;
    mkk_kernel_decref(kp->k);
    mkk_call_free(kp->c);
    free(kp);
}

/* ------------------------------------------------------------- scheme */

/* SCHEME_LOCKSTEP is chosen at run time for a cooperative kernel that the
 * region-splitting pass compiled (fn.cbs_run), unless MKPY_ENGINE=fibers. */
typedef enum { SCHEME_PLAIN = 1, SCHEME_COOPERATIVE, SCHEME_LOCKSTEP } scheme;

static int ident_char(char c) {
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* Does `text` contain `word` as a whole identifier? */
static int has_ident(const char *text, const char *word) {
    size_t n = strlen(word);
    for (const char *p = strstr(text, word); p; p = strstr(p + 1, word))
        if ((p == text || !ident_char(p[-1])) && !ident_char(p[n])) return 1;
    return 0;
}

/* The SIMD-group and quad-group functions of mkpy_coop.h, as simd_<name>
 * and quad_<name> (simd_is_helper_thread needs no cooperation). Names, not
 * prefixes: kernels often call their variables simd_lane or quad_id. */
static const char *const group_functions[] = {
    "sum", "product", "min", "max", "and", "or", "xor",
    "prefix_inclusive_sum", "prefix_exclusive_sum", "prefix_inclusive_product", "prefix_exclusive_product",
    "shuffle", "broadcast", "shuffle_up", "shuffle_down", "shuffle_xor", "shuffle_rotate_up",
    "shuffle_rotate_down", "shuffle_and_fill_up", "shuffle_and_fill_down", "broadcast_first", "is_first",
    "all", "any", "ballot", "active_threads_mask",
};

/* The one place that decides how a kernel's threads run: cooperatively when
 * the source or header names threadgroup memory, a barrier or a SIMD-group /
 * quad-group function. */
static scheme scan_scheme(const mkk_kernel *k) {
    static const char *const words[] = {"threadgroup", "threadgroup_barrier", "simdgroup_barrier"};
    const char *texts[2] = {k->source, k->header};
    for (int t = 0; t < 2; t++) {
        if (!texts[t]) continue;
        for (size_t i = 0; i < sizeof words / sizeof *words; i++)
            if (has_ident(texts[t], words[i])) return SCHEME_COOPERATIVE;
        for (size_t i = 0; i < sizeof group_functions / sizeof *group_functions; i++) {
            char name[64];
            snprintf(name, sizeof name, "simd_%s", group_functions[i]);
            if (has_ident(texts[t], name)) return SCHEME_COOPERATIVE;
            snprintf(name, sizeof name, "quad_%s", group_functions[i]);
            if (has_ident(texts[t], name)) return SCHEME_COOPERATIVE;
        }
    }
    return SCHEME_PLAIN;
}

/* The scheme depends only on the kernel's source and header: picked once. */
static scheme pick_scheme(mkk_kernel *k) {
    int s = atomic_load_explicit(&k->scheme, memory_order_relaxed);
    if (!s) atomic_store_explicit(&k->scheme, s = (int)scan_scheme(k), memory_order_relaxed);
    return (scheme)s;
}

bool mkk_is_cooperative(mkk_kernel *k) { return pick_scheme(k) == SCHEME_COOPERATIVE; }

/* The engine for a cooperative kernel: the lockstep engine when the kernel
 * was compiled for it, fibers otherwise or when MKPY_ENGINE=fibers. */
static scheme pick_engine(mkk_kernel *k, const mkk_compiled *fn) {
    scheme s = pick_scheme(k);
    if (s != SCHEME_COOPERATIVE || !fn->cbs_run) return s;
    const char *e = getenv("MKPY_ENGINE");
    if (e && strcmp(e, "fibers") == 0) return SCHEME_COOPERATIVE;
    return SCHEME_LOCKSTEP;
}

const char *mkk_engine_name(mkk_kernel *k, const mkk_compiled *fn) {
    switch (pick_engine(k, fn)) {
    case SCHEME_PLAIN: return "plain";
    case SCHEME_LOCKSTEP: return "lockstep";
    default: return "fibers";
    }
}

static void (*reporter)(const char *text);

void mkk_set_reporter(void (*fn)(const char *text)) { reporter = fn; }

void mkk_report(const char *fmt, ...) {
    if (!reporter) return;
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    reporter(text);
}

/* ------------------------------------------------------------ running */

typedef struct {
    mkk_compiled fn;
    scheme how;
    void *const *args;
    mkk_launch base;
    uint64_t total, chunk;
    atomic_ullong next;
    atomic_int failed;
    char error[1200];
    mk_fault fault;
} run_ctx;

typedef struct {
    run_ctx *r;
    char error[1100];
    int failed;
} worker_job;

static void run_chunks(void *arg) {
    worker_job *j = arg;
    run_ctx *r = j->r;
    mkk_launch L = r->base;
    coop_kernel ck = {r->fn.thread, r->args};
    mkk_cbs_kernel cbk = {r->fn.cbs_run, r->fn.cbs_info, r->args};
    while (!atomic_load(&r->failed)) {
        uint64_t begin = atomic_fetch_add(&r->next, r->chunk);
        if (begin >= r->total) break;
        L.group_begin = begin;
        L.group_end = begin + r->chunk < r->total ? begin + r->chunk : r->total;
        if (r->how == SCHEME_PLAIN) {
            r->fn.entry(r->args, &L);
        } else if (r->how == SCHEME_LOCKSTEP) {
            if (mkk_cbs_run(&cbk, &L, j->error, sizeof j->error) < 0) {
                j->failed = 1;
                break;
            }
        } else if (mkk_coop_run(&ck, &L, j->error, sizeof j->error) < 0) {
            j->failed = 1;
            break;
        }
    }
}

static void run_groups(void *c, int ith, int nth) {
    run_ctx *r = c;
    worker_job j = {r, "", 0};
    mk_fault fault;
    (void)ith;
    (void)nth;
    int rc = mk_fault_guarded_call(run_chunks, &j, &fault);
    if ((rc < 0 || j.failed) && atomic_exchange(&r->failed, 1) == 0) {
        if (rc < 0)
            r->fault = fault;
        else
            snprintf(r->error, sizeof r->error, "%s", j.error);
    }
}

/* A dense row-major copy of x (for ensure_row_contiguous). */
static mk_buffer *dense_copy(const mk_array *x) {
    mk_buffer *b = mk_buffer_alloc((size_t)x->size * mk_dtype_size(x->dtype));
    if (!b) return NULL;
    int64_t dense[MK_MAX_NDIM];
    mk_row_strides(x->ndim, x->shape, dense);
    mk_copy_into(x, b->data, dense);
    return b;
}

static int kernel_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    kernel_params *kp = p->params;
    mkk_kernel *k = kp->k;
    mkk_call *c = kp->c;
    int rc = -1;
    char *generated = NULL, *kname = NULL;
    void **args = NULL;
    mk_buffer **copies = NULL;
    int32_t *shapes = NULL;
    int64_t *strides = NULL;
    int32_t *ndims = NULL;

    /* constructs Metal's compiler rejects: a compile error, as on a Mac */
    if (k->metal_error) {
        mk_error_set(MK_ERR_RUNTIME,
                     "[metal_kernel] Kernel `%s`: %s. (mkpy only: compile_options={\"allow_non_metal\": True} or "
                     "MKPY_ALLOW_NON_METAL=1 turn the Metal-only checks off.) Kernel called at %s",
                     k->name, k->metal_error, c->call_site ? c->call_site : "?");
        return -1;
    }
    /* launch checks, as MLX's eval_gpu, in 64 bits */
    run_ctx r;
    memset(&r, 0, sizeof r);
    if (mkk_plan_launch(k->name, c->grid, c->threadgroup, &r.base, &r.total) < 0) return -1;
    /* Metal's buffer argument table has 31 entries */
    {
        int nbuf = k->noutputs;
        for (int i = 0; i < k->ninputs; i++)
            nbuf += 1 + (in[i]->ndim > 0) * (k->shape_info[i][0] + k->shape_info[i][1] + k->shape_info[i][2]);
        if (nbuf > MAX_BUFFERS) {
            mk_error_set(MK_ERR_RUNTIME,
                         "[metal_kernel] Kernel `%s` takes %d buffers (inputs, their _shape/_strides/_ndim "
                         "buffers and outputs), more than the %d a Metal kernel may take. Kernel called at %s",
                         k->name, nbuf, MAX_BUFFERS, c->call_site ? c->call_site : "?");
            return -1;
        }
    }

    if (mkk_generate(k, c, in, &generated, &kname) < 0) goto done;
    mkk_compiled fn = mkk_jit(k, c, in, generated, kname);
    if (!fn.entry) goto done;

    /* outputs: fresh row-contiguous buffers, filled with init_value if given */
    for (int i = 0; i < k->noutputs; i++) {
        if (mk_alloc_out(out[i]) < 0) goto done;
        if (c->has_init && out[i]->size) {
            size_t isz = mk_dtype_size(out[i]->dtype);
            char *d = out[i]->buf->data;
            mk_put_f64(out[i]->dtype, d, c->init_value);
            for (int64_t j = 1; j < out[i]->size; j++) memcpy(d + j * isz, d, isz);
        }
    }
    /* arguments in MLX's buffer order */
    int nargs = k->noutputs;
    for (int i = 0; i < k->ninputs; i++)
        nargs += 1 + (in[i]->ndim > 0) * (k->shape_info[i][0] + k->shape_info[i][1] + k->shape_info[i][2]);
    args = calloc(nargs ? nargs : 1, sizeof *args);
    copies = calloc(k->ninputs ? k->ninputs : 1, sizeof *copies);
    shapes = calloc((size_t)(k->ninputs ? k->ninputs : 1) * MK_MAX_NDIM, sizeof *shapes);
    strides = calloc((size_t)(k->ninputs ? k->ninputs : 1) * MK_MAX_NDIM, sizeof *strides);
    ndims = calloc(k->ninputs ? k->ninputs : 1, sizeof *ndims);
    if (!args || !copies || !shapes || !strides || !ndims) {
        mk_nomem();
        goto done;
    }
    int a = 0;
    for (int i = 0; i < k->ninputs; i++) {
        const mk_array *x = in[i];
        int64_t *st = strides + (size_t)i * MK_MAX_NDIM;
        int32_t *sh = shapes + (size_t)i * MK_MAX_NDIM;
        if (k->ensure_row_contiguous && !(x->flags & MK_ROW_CONTIG)) {
            if (!(copies[i] = dense_copy(x))) goto done;
            args[a++] = copies[i]->data;
            mk_row_strides(x->ndim, x->shape, st);
        } else {
            args[a++] = mk_data(x);
            for (int d = 0; d < x->ndim; d++) st[d] = x->strides[d];
        }
        for (int d = 0; d < x->ndim; d++) sh[d] = (int32_t)x->shape[d];
        ndims[i] = x->ndim;
        if (x->ndim > 0) {
            if (k->shape_info[i][0]) args[a++] = sh;
            if (k->shape_info[i][1]) args[a++] = st;
            if (k->shape_info[i][2]) args[a++] = &ndims[i];
        }
    }
    for (int i = 0; i < k->noutputs; i++) args[a++] = out[i]->buf->data;

    r.fn = fn;
    r.how = pick_engine(k, &fn);
    if (c->verbose) {
        if (r.how == SCHEME_COOPERATIVE)
            mkk_report("mkpy: kernel `%s` runs on fibers (%s)\n", k->name,
                       getenv("MKPY_ENGINE") && strcmp(getenv("MKPY_ENGINE"), "fibers") == 0
                           ? "MKPY_ENGINE=fibers"
                           : fn.cbs_declined ? fn.cbs_declined
                                             : "the lockstep engine could not take it");
        else
            mkk_report("mkpy: kernel `%s` runs on the %s engine\n", k->name, mkk_engine_name(k, &fn));
    }
    if (r.how == SCHEME_LOCKSTEP) {
        mkk_cbs_kernel cbk = {fn.cbs_run, fn.cbs_info, args};
        char why[1024];
        if (mkk_cbs_check(&cbk, why, sizeof why) < 0) {
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s`: %s. Kernel called at %s", k->name, why,
                         c->call_site ? c->call_site : "?");
            goto done;
        }
    }
    r.args = args;
    int nth = mk_pool_threads();
    uint64_t threads_per_group = (uint64_t)r.base.tg[0] * r.base.tg[1] * r.base.tg[2];
    /* about 32 chunks per worker (a worker that finishes early finds work;
     * the last chunk keeps the others waiting only briefly), each of at least
     * ~4096 threads of work */
    uint64_t chunk = r.total / ((uint64_t)nth * 32);
    uint64_t min_groups = (4096 + threads_per_group - 1) / threads_per_group;
    if (chunk < min_groups) chunk = min_groups;
    if (chunk < 1) chunk = 1;
    r.chunk = chunk;
    atomic_init(&r.next, 0);
    uint64_t nchunks = (r.total + chunk - 1) / chunk;
    atomic_init(&r.failed, 0);
    mk_parallel(nchunks < (uint64_t)nth ? (int)nchunks : nth, run_groups, &r);
    if (atomic_load(&r.failed)) {
        const char *site = c->call_site ? c->call_site : "?";
        if (r.fault.happened && r.fault.stack_overflow)
            mk_error_set(MK_ERR_RUNTIME,
                         "[metal_kernel] Kernel `%s` overflowed a thread's stack (mkpy gives each GPU thread %s). "
                         "Large per-thread arrays belong in device or threadgroup memory. Kernel called at %s",
                         k->name, r.how == SCHEME_COOPERATIVE ? "128 KiB" : "8 MiB", site);
        else if (r.fault.happened)
            mk_error_set(MK_ERR_RUNTIME,
                         "[metal_kernel] Kernel `%s` made an invalid memory access at address %#lx (an index out "
                         "of a buffer's range?). Kernel called at %s",
                         k->name, (unsigned long)r.fault.addr, site);
        else
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s` (%s engine): %s. Kernel called at %s", k->name,
                         mkk_engine_name(k, &fn), r.error, site);
        goto done;
    }
    rc = 0;
done:
    if (copies)
        for (int i = 0; i < k->ninputs; i++)
            if (copies[i]) mk_buffer_decref(copies[i]);
    free(copies);
    free(args);
    free(shapes);
    free(strides);
    free(ndims);
    free(generated);
    free(kname);
    return rc;
}

int mkk_plan_launch(const char *kernel_name, const int64_t grid[3], const int64_t threadgroup[3], mkk_launch *L,
                    uint64_t *total) {
    for (int d = 0; d < 3; d++)
        if (grid[d] <= 0 || threadgroup[d] <= 0 || grid[d] > UINT32_MAX) {
            mk_error_set(MK_ERR_VALUE,
                         "[metal_kernel] Kernel `%s`: grid (%lld, %lld, %lld) and threadgroup (%lld, %lld, %lld) "
                         "dimensions must be positive (and the grid below 2^32).",
                         kernel_name, (long long)grid[0], (long long)grid[1], (long long)grid[2],
                         (long long)threadgroup[0], (long long)threadgroup[1], (long long)threadgroup[2]);
            return -1;
        }
    int64_t tg_size = 1;
    int overflow = 0;
    for (int d = 0; d < 3; d++) overflow |= __builtin_mul_overflow(tg_size, threadgroup[d], &tg_size);
    if (overflow || tg_size > MAX_THREADS_PER_THREADGROUP) {
        if (overflow)
            mk_error_set(MK_ERR_VALUE,
                         "Thread group size (%lld * %lld * %lld) is greater than  the maximum allowed threads per "
                         "threadgroup (%d).",
                         (long long)threadgroup[0], (long long)threadgroup[1], (long long)threadgroup[2],
                         MAX_THREADS_PER_THREADGROUP);
        else
            mk_error_set(MK_ERR_VALUE,
                         "Thread group size (%lld) is greater than  the maximum allowed threads per threadgroup (%d).",
                         (long long)tg_size, MAX_THREADS_PER_THREADGROUP);
        return -1;
    }
    /* every value now fits: grid in [1, 2^32), tg in [1, 1024] */
    uint64_t n = 1;
    for (int d = 0; d < 3; d++) {
        int64_t t = threadgroup[d] < grid[d] ? threadgroup[d] : grid[d]; /* MLX clamps */
        L->grid[d] = (uint32_t)grid[d];
        L->tg[d] = (uint32_t)t;
        L->ngroups[d] = (uint32_t)((grid[d] + t - 1) / t);
        if (__builtin_mul_overflow(n, (uint64_t)L->ngroups[d], &n)) {
            mk_error_set(MK_ERR_VALUE,
                         "[metal_kernel] Kernel `%s`: grid (%lld, %lld, %lld) has more than 2^64 threadgroups.",
                         kernel_name, (long long)grid[0], (long long)grid[1], (long long)grid[2]);
            return -1;
        }
    }
    L->group_begin = 0;
    L->group_end = n;
    *total = n;
    return 0;
}

static const mk_opdef kernel_def = {"metal_kernel", kernel_eval, free_params};

int mkk_make_outputs(mkk_kernel *k, mkk_call *call, mk_array *const *inputs, const int *out_ndims,
                     const int64_t (*out_shapes)[MK_MAX_NDIM], mk_array **outs) {
    kernel_params *kp = malloc(sizeof *kp);
    mk_outdesc *desc = malloc(sizeof *desc * (size_t)k->noutputs);
    if (!kp || !desc) {
        free(kp);
        free(desc);
        mkk_call_free(call);
        mk_nomem();
        return -1;
    }
    for (int i = 0; i < k->noutputs; i++) {
        if (out_ndims[i] > MK_MAX_NDIM || mk_shape_size(out_ndims[i], out_shapes[i]) < 0) {
            if (out_ndims[i] > MK_MAX_NDIM) mk_error_set(MK_ERR_VALUE, "[metal_kernel] Too many output dimensions.");
            free(kp);
            free(desc);
            mkk_call_free(call);
            return -1;
        }
        /* refused at the call, not at eval, when it could never be allocated */
        int64_t n = mk_shape_size(out_ndims[i], out_shapes[i]), nbytes;
        if (__builtin_mul_overflow(n, (int64_t)mk_dtype_size(call->output_dtypes[i]), &nbytes)) {
            mk_error_set(MK_ERR_VALUE, "[metal_kernel] Output %d of %lld elements overflows int64 bytes.", i,
                         (long long)n);
            nbytes = -1;
        }
        if (nbytes < 0 || mk_check_alloc((size_t)nbytes) < 0) {
            free(kp);
            free(desc);
            mkk_call_free(call);
            return -1;
        }
        desc[i].dtype = call->output_dtypes[i];
        desc[i].ndim = out_ndims[i];
        memcpy(desc[i].shape, out_shapes[i], sizeof(int64_t) * (size_t)out_ndims[i]);
    }
    mkk_kernel_incref(k);
    kp->k = k;
    kp->c = call;
    int rc = mk_prim_make(&kernel_def, kp, k->ninputs, inputs, k->noutputs, desc, outs);
    free(desc);
    return rc;
}
