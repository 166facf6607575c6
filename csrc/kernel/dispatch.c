/* The lazy node of a metal_kernel call (the front end shared by every
 * back-end): its params, the launch checks MLX's eval_gpu makes, MLX's
 * generated source, and the choice of back-end (backend/backend.h) that
 * compiles and runs it; GPU parity checks (MKPY_GPU_PARITY) run the CPU
 * back-end beside a GPU's. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/ops.h"
#include "core/types.h"
#include "diag.h"
#include "kernel.h"

#define MAX_THREADS_PER_THREADGROUP 1024
#define MAX_BUFFERS MKK_MAX_BUFFERS

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

static void (*reporter)(const char *text);

void mkk_set_reporter(void (*fn)(const char *text)) { reporter = fn; }

void mkk_report_raw(const char *text) {
    if (reporter) reporter(text);
}

void mkk_report(const char *fmt, ...) {
    if (!reporter) return;
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    reporter(text);
}

/* ------------------------------------------------------ GPU parity */

/* MKPY_GPU_PARITY (a debugging mode; make test-gpu uses it): every kernel a
 * GPU back-end runs runs again on the CPU back-end, and the outputs must
 * agree: integers and MKPY_GPU_PARITY=exact bit for bit, floats within the
 * dtype's tolerance (Metal's math and CUDA's differ by ulps; simd and
 * atomic reductions may add in another order). Outputs without init_value
 * start as the same bytes on both sides (mkk_parity_fill), so elements a
 * kernel leaves unwritten compare equal. */
static _Thread_local bool parity_cpu_side; /* the CPU side of a check runs on this thread */
static _Thread_local bool parity_on;       /* a check is under way on this thread */

static int parity_mode(void) {
    const char *e = getenv("MKPY_GPU_PARITY");
    if (!e || !*e || strcmp(e, "0") == 0) return 0;
    return strcmp(e, "exact") == 0 ? 2 : 1;
}

bool mkk_parity_fill(void) { return parity_on; }

static double elem_f64(mk_dtype t, const char *p, bool imag) {
    if (t == MK_COMPLEX64) return ((const float *)p)[imag];
    return imag ? 0.0 : mk_get_f64(t, p);
}

static int parity_compare(const mkk_kernel *k, const mkk_call *c, int i, const mk_array *g, const mk_array *h,
                          int mode) {
    const mk_dtype t = g->dtype;
    const size_t isz = mk_dtype_size(t);
    const char *gp = mk_data(g), *hp = mk_data(h);
    if (mk_take_device_error()) return -1;
    const bool fl = t == MK_FLOAT32 || t == MK_FLOAT16 || t == MK_BFLOAT16 || t == MK_COMPLEX64;
    const double rtol = t == MK_FLOAT16 ? 2e-3 : t == MK_BFLOAT16 ? 1.6e-2 : 1e-5;
    double scale = 0.0;
    if (fl && mode == 1)
        for (int64_t j = 0; j < h->size; j++)
            for (int part = 0; part < 1 + (t == MK_COMPLEX64); part++) {
                double v = elem_f64(t, hp + j * isz, part);
                if (v == v && v - v == 0.0 && (v < 0 ? -v : v) > scale) scale = v < 0 ? -v : v;
            }
    int64_t bad = -1, nbad = 0;
    double gv = 0, hv = 0;
    for (int64_t j = 0; j < h->size; j++) {
        if (memcmp(gp + j * isz, hp + j * isz, isz) == 0) continue;
        bool ok = false;
        if (fl && mode == 1) {
            ok = true;
            for (int part = 0; part < 1 + (t == MK_COMPLEX64) && ok; part++) {
                double a = elem_f64(t, gp + j * isz, part), b = elem_f64(t, hp + j * isz, part);
                double d = a > b ? a - b : b - a;
                ok = (a != a && b != b) || d <= rtol * ((b < 0 ? -b : b) + scale);
            }
        }
        if (!ok) {
            if (bad < 0) {
                bad = j;
                gv = elem_f64(t, gp + j * isz, false);
                hv = elem_f64(t, hp + j * isz, false);
            }
            nbad++;
        }
    }
    if (bad < 0) return 0;
    mk_error_set(MK_ERR_RUNTIME,
                 "[metal_kernel] Kernel `%s`: the GPU and the CPU engine disagree (MKPY_GPU_PARITY%s): output `%s` "
                 "differs at %lld of %lld elements, first at flat index %lld: GPU %.9g, CPU %.9g. Kernel called at %s",
                 k->name, mode == 2 ? "=exact" : "", k->output_names[i], (long long)nbad, (long long)h->size,
                 (long long)bad, gv, hv, c->call_site ? c->call_site : "?");
    return -1;
}

static int kernel_eval(mk_prim *p, mk_array *const *in, mk_array *const *out);

/* ------------------------------------------------- the source of a call */

/* What mkk_generate reads of a call, as bytes: each input's dtype and kind
 * (scalar, constant, device), each output's dtype, each template value.
 * Returns its length, or 0 when it does not fit (the call is not memoised). */
static size_t call_signature(const mkk_kernel *k, const mkk_call *c, mk_array *const *in, unsigned char *sig,
                             size_t cap) {
    size_t n = 0;
    if ((size_t)(2 * k->ninputs + k->noutputs + 1) > cap) return 0;
    for (int i = 0; i < k->ninputs; i++) {
        sig[n++] = (unsigned char)in[i]->dtype;
        sig[n++] = in[i]->ndim == 0 ? 's' : in[i]->size < MKK_MAX_CONSTANT_ARRAY_SIZE ? 'c' : 'd';
    }
    for (int i = 0; i < k->noutputs; i++) sig[n++] = (unsigned char)c->output_dtypes[i];
    for (int i = 0; i < c->ntemplate; i++) {
        const mkk_targ *t = &c->templ[i];
        size_t len = strlen(t->name) + 1;
        if (n + 1 + sizeof t->value + len > cap) return 0;
        sig[n++] = (unsigned char)t->kind;
        memcpy(sig + n, &t->value, sizeof t->value);
        n += sizeof t->value;
        memcpy(sig + n, t->name, len);
        n += len;
    }
    return n;
}

/* The generated source and kernel name of this call, and their hash: the
 * kernel object's memo of a recent call with the same signature, else made
 * now (and memoised). Returns a reference (mkk_memo_release), or NULL with
 * the error set. The launch checks still run on every call. */
static mkk_memo *call_source(mkk_kernel *k, const mkk_call *c, mk_array *const *in) {
    unsigned char sig[512];
    const size_t sig_len = call_signature(k, c, in, sig, sizeof sig);
    if (sig_len) {
        pthread_mutex_lock(&k->memo_mu);
        for (int i = 0; i < MKK_MEMO_N; i++) {
            mkk_memo *m = k->memo[i];
            if (m && m->sig_len == sig_len && memcmp(m->sig, sig, sig_len) == 0) {
                atomic_fetch_add(&m->refs, 1);
                pthread_mutex_unlock(&k->memo_mu);
                return m;
            }
        }
        pthread_mutex_unlock(&k->memo_mu);
    }
    mkk_memo *m = calloc(1, sizeof *m + sig_len);
    if (!m) return mk_nomem();
    if (mkk_generate(k, c, in, &m->generated, &m->kname) < 0) {
        free(m);
        return NULL;
    }
    m->hash = mkk_hash64(m->generated, strlen(m->generated));
    memcpy(m->sig, sig, sig_len);
    m->sig_len = sig_len;
    atomic_init(&m->refs, 1);
    if (!sig_len) return m;
    atomic_fetch_add(&m->refs, 1); /* the memo's */
    pthread_mutex_lock(&k->memo_mu);
    mkk_memo *old = k->memo[k->memo_next];
    k->memo[k->memo_next] = m;
    k->memo_next = (k->memo_next + 1) % MKK_MEMO_N;
    pthread_mutex_unlock(&k->memo_mu);
    mkk_memo_release(old);
    return m;
}

/* After the GPU ran p into out: the CPU back-end runs it into temporaries,
 * and the two must agree. */
static int parity_check(mk_prim *p, mk_array *const *in, mk_array *const *out, int mode) {
    kernel_params *kp = p->params;
    mkk_kernel *k = kp->k;
    mk_array *tmp[64];
    if (k->noutputs > 64) return 0;
    int rc = 0, made = 0;
    for (int i = 0; i < k->noutputs && rc == 0; i++, made++)
        if (!(tmp[i] = mk_array_empty(out[i]->dtype, out[i]->ndim, out[i]->shape))) rc = -1;
    if (rc == 0) {
        parity_cpu_side = true;
        rc = kernel_eval(p, in, tmp);
        parity_cpu_side = false;
    }
    for (int i = 0; i < k->noutputs && rc == 0; i++) rc = parity_compare(k, kp->c, i, out[i], tmp[i], mode);
    for (int i = 0; i < made; i++)
        if (tmp[i]) mk_decref(tmp[i]);
    return rc;
}

static _Thread_local bool compile_error;
void mkk_note_compile_error(void) { compile_error = true; }

/* A GPU compiler's refusal, said in clang's words where clang refuses the
 * program too: Metal's compiler is clang, so those are the diagnostics a Mac
 * shows (NVRTC's front end words them differently). Where clang accepts the
 * program, NVRTC's error stays, with a note. */
static void metal_words(mkk_kernel *k, mkk_call *c, mk_array *const *in, const char *generated, const char *kname) {
    char *gpu = strdup(mk_error_message());
    const mk_errcode code = mk_error_code();
    mk_error_clear();
    compile_error = false;
    if (mkb_cpu_backend.kernel_compile(k, c, in, generated, kname) == 0 && gpu)
        mk_error_set(code, "%s\n(clang, the front end of Metal's compiler, accepts this kernel: the CUDA target "
                           "cannot take what the diagnostics name; run it on the CPU with MKPY_GPU=cpu or an mx.cpu "
                           "stream.)", gpu);
    else if (mk_error_code() == MK_OK)
        mk_error_set(code, "%s", gpu ? gpu : "[metal_kernel] compile failed");
    free(gpu);
}

int mkk_check_call(const mkk_kernel *k, const mkk_call *c, mk_array *const *in, mkk_launch *plan,
                   uint64_t *plan_total) {
    /* constructs Metal's compiler rejects: a compile error, as on a Mac */
    if (k->metal_error) {
        mk_error_set(MK_ERR_RUNTIME,
                     "[metal_kernel] Kernel `%s`: %s. (mkpy only: compile_options={\"allow_non_metal\": True} or "
                     "MKPY_ALLOW_NON_METAL=1 turn the Metal-only checks off.) Kernel called at %s",
                     k->name, k->metal_error, c->call_site ? c->call_site : "?");
        return -1;
    }
    /* launch checks, as MLX's eval_gpu, in 64 bits */
    if (mkk_plan_launch(k->name, c->grid, c->threadgroup, plan, plan_total) < 0) return -1;
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
    return 0;
}

static int kernel_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    kernel_params *kp = p->params;
    mkk_kernel *k = kp->k;
    mkk_call *c = kp->c;
    int rc = -1;
    mkk_memo *src = NULL;
    mkk_launch plan;
    uint64_t plan_total;
    if (mkk_check_call(k, c, in, &plan, &plan_total) < 0) return -1;
    if (!(src = call_source(k, c, in))) goto done;
    c->gen_hash = src->hash;
    {
        const char *generated = src->generated, *kname = src->kname;
        /* a GPU back-end, when the node's stream is a GPU's and one is active;
         * the checker mode and kernels that print are CPU tools: they run on the CPU back-end */
        const mkb_backend *be = parity_cpu_side || c->check || k->prints
                                    ? &mkb_cpu_backend
                                    : mkb_for_device(mk_stream_device(p->stream));
        if (be == &mkb_cpu_backend) {
            /* a GPU stream's node run on the CPU (the checker, printing, the GPU lost): mk_eval left
             * Ctrl-C's handler to this evaluator (gpu_arms), and a CPU run may be long */
            void (*arm)(void) = mk_eval_arm;
            if (arm && mk_stream_device(p->stream) == MK_GPU) arm();
            rc = be->kernel_eval(k, c, in, out, generated, kname, &plan, plan_total);
        } else {
            const int parity = parity_mode();
            parity_on = parity != 0;
            compile_error = false;
            rc = be->kernel_eval(k, c, in, out, generated, kname, &plan, plan_total);
            if (rc < 0 && compile_error) metal_words(k, c, in, generated, kname);
            if (rc == 0 && parity) rc = parity_check(p, in, out, parity);
            parity_on = false;
        }
    }
done:
    mkk_memo_release(src);
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

/* A copy of a call's params, with which mx.compile re-creates the call on
 * new inputs of the traced shapes (core/compile.c). */
static void *copy_params(const void *p) {
    const kernel_params *kp = p;
    const mkk_call *c = kp->c;
    kernel_params *q = calloc(1, sizeof *q);
    mkk_call *d = q ? calloc(1, sizeof *d) : NULL;
    if (!d) goto fail;
    *d = *c;
    d->templ = NULL;
    d->output_dtypes = NULL;
    d->call_site = NULL;
    d->ntemplate = 0;
    if (c->ntemplate && !(d->templ = calloc((size_t)c->ntemplate, sizeof *d->templ))) goto fail;
    for (; d->ntemplate < c->ntemplate; d->ntemplate++) {
        mkk_targ *t = &d->templ[d->ntemplate];
        *t = c->templ[d->ntemplate];
        if (!(t->name = strdup(c->templ[d->ntemplate].name))) goto fail;
    }
    size_t no = (size_t)(kp->k->noutputs ? kp->k->noutputs : 1);
    if (!(d->output_dtypes = malloc(no * sizeof *d->output_dtypes))) goto fail;
    if (kp->k->noutputs) memcpy(d->output_dtypes, c->output_dtypes, no * sizeof *d->output_dtypes);
    if (c->call_site && !(d->call_site = strdup(c->call_site))) goto fail;
    mkk_kernel_incref(kp->k);
    q->k = kp->k;
    q->c = d;
    return q;
fail:
    mkk_call_free(d);
    free(q);
    return mk_nomem();
}

/* A cuda_kernel node (cuda_kernel.c): MLX's CUDA program for the call,
 * compiled and launched by the CUDA back-end; a stream whose device has no
 * CUDA back-end raises as MLX's build without one. */
static int cuda_kernel_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    kernel_params *kp = p->params;
    mkk_kernel *k = kp->k;
    const mkb_backend *be = mkb_for_device(mk_stream_device(p->stream));
    if (!be->cuda_kernel_eval) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda_kernel] No CUDA back-end.");
        return -1;
    }
    mkk_memo *src = call_source(k, kp->c, in);
    if (!src) return -1;
    kp->c->gen_hash = src->hash;
    int rc = be->cuda_kernel_eval(k, kp->c, in, out, src->generated, src->kname);
    mkk_memo_release(src);
    return rc;
}

/* own_device: the front end hands the node to its stream's back-end itself */
static const mk_opdef kernel_def = {"metal_kernel", kernel_eval, free_params, NULL, NULL, NULL, false,
                                    false, 0, copy_params, NULL, .own_device = true, .gpu_arms = true};
static const mk_opdef cuda_kernel_def = {"cuda_kernel", cuda_kernel_eval, free_params, NULL, NULL, NULL, false,
                                         false, 0, copy_params, NULL, .own_device = true, .gpu_arms = true};

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
            if (out_ndims[i] > MK_MAX_NDIM)
                mk_error_set(MK_ERR_VALUE, "%s Too many output dimensions.", k->cuda ? "[cuda_kernel]" : "[metal_kernel]");
            free(kp);
            free(desc);
            mkk_call_free(call);
            return -1;
        }
        /* refused at the call, not at eval, when it could never be allocated */
        int64_t n = mk_shape_size(out_ndims[i], out_shapes[i]), nbytes;
        if (__builtin_mul_overflow(n, (int64_t)mk_dtype_size(call->output_dtypes[i]), &nbytes)) {
            mk_error_set(MK_ERR_VALUE, "%s Output %d of %lld elements overflows int64 bytes.",
                         k->cuda ? "[cuda_kernel]" : "[metal_kernel]", i, (long long)n);
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
    int rc = mk_prim_make(k->cuda ? &cuda_kernel_def : &kernel_def, kp, k->ninputs, inputs, k->noutputs, desc, outs);
    free(desc);
    return rc;
}

/* For export_function (xkernel.c): the kernel and call of a metal_kernel node. */
bool mkk_node_params(const mk_prim *p, mkk_kernel **k, mkk_call **c) {
    if (p->op != &kernel_def) return false;
    const kernel_params *kp = p->params;
    *k = kp->k;
    *c = kp->c;
    return true;
}
