/* mx.fast on the GPU: "norm" (rms_norm, layer_norm), "rope",
 * "scaled_dot_product_attention" and the "softmax" rows (softmax and
 * logsumexp over the last axis), with the CPU evaluators' order of
 * operations (docs/design.md, "mx.fast on the GPU"; the kernels are
 * mkpy_cuda_ops.cuh's fast_norm, fast_rope, fast_lastax and sdpa_*).
 * Inputs are read in place through their strides; outputs are fresh
 * row-contiguous device memory. Left to the CPU's evaluator: float64, empty
 * arrays and inputs of a dtype the node does not make itself. The vjp of
 * norm and attention are compositions of ordinary ops (ops_fast.c), and
 * rope's is rope with the scale negated: none is a primitive of its own. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/export.h"
#include "core/half.h"
#include "core/iter.h"
#include "core/ops.h"
#include "driver.h"
#include "ops_cuda.h"

static bool gpu_float(mk_dtype t) { return t == MK_FLOAT16 || t == MK_BFLOAT16 || t == MK_FLOAT32; }

int mkb_fast_body(char *buf, size_t n, const char *entry, int kind, mk_dtype a, mk_dtype b) {
    if (!gpu_float(a) || !gpu_float(b)) return -1;
    const char *ta = mkb_cuda_tname[a], *tb = mkb_cuda_tname[b];
    switch (kind) {
    case MKB_FAST_NORM: /* a: x's dtype, b: the output's */
        return snprintf(buf, n,
                        "extern \"C\" __global__ void %s(norm_args a, %s *o, const %s *x, const %s *w, const %s *b) "
                        "{ fast_norm<%s, %s>(a, o, x, w, b); }\n",
                        entry, tb, ta, tb, tb, ta, tb);
    case MKB_FAST_ROPE:
        return snprintf(buf, n,
                        "extern \"C\" __global__ void %s(rope_args a, %s *o, const %s *x, const void *off, "
                        "const float *f) { fast_rope<%s>(a, o, x, off, f); }\n",
                        entry, ta, ta, ta);
    case MKB_FAST_LASTAX:
        return snprintf(buf, n,
                        "extern \"C\" __global__ void %s(lastax_args a, %s *o, const %s *x) "
                        "{ fast_lastax<%s>(a, o, x); }\n",
                        entry, ta, ta, ta);
    case MKB_FAST_SDPA: /* kernels <entry>s, <entry>p, <entry>v */
        return snprintf(buf, n,
                        "extern \"C\" __global__ void %ss(sdpa_args a, float *P, const %s *q, const %s *k, "
                        "const void *m) { sdpa_scores<%s>(a, P, q, k, m); }\n"
                        "extern \"C\" __global__ void %sp(sdpa_args a, float *P, const %s *sk) "
                        "{ sdpa_softmax<%s>(a, P, sk); }\n"
                        "extern \"C\" __global__ void %sv(sdpa_args a, %s *o, const float *P, const %s *v) "
                        "{ sdpa_pv<%s>(a, o, P, v); }\n",
                        entry, ta, ta, ta, entry, ta, ta, entry, ta, ta, ta);
    default: return -1;
    }
}

/* The leading dims of x (all but the last), merged: the rows' shape and
 * strides. Returns the number of rows. */
static int64_t row_dims(const mk_array *x, int32_t *nd, int64_t *shape, int64_t *st) {
    const int64_t *sp[1] = {x->strides};
    mk_iter it;
    mk_iter_init(&it, x->ndim - 1, x->shape, 1, sp);
    *nd = it.ndim;
    memcpy(shape, it.shape, sizeof(int64_t) * MK_MAX_NDIM);
    memcpy(st, it.strides[0], sizeof(int64_t) * MK_MAX_NDIM);
    return it.total;
}

/* The one kernel "k" of body, launched over `work` threads in blocks of
 * `block` and waited for. */
static int run1(const char *body, int64_t work, unsigned block, void **params, const char *what) {
    static const char *const names[] = {"k"};
    CUfunction f;
    if (mkb_opkern_get(body, 1, names, &f) < 0) return -1;
    if (mkb_opkern_launch(f, work, block, params, what) < 0) return -1;
    return mkb_cuda_wait(what, NULL);
}

/* Threads per row of the row kernels (fast_lastax, sdpa_softmax: a power of
 * two, at most MKC_LA_THREADS): the row's one in-order sum bounds its time,
 * so short rows take a warp and leave the GPU's threads to other rows. */
static unsigned row_block(int64_t n) { return n <= 8192 ? 32 : 256; }

/* ------------------------------------------------------------ norm */

/* mkpy_cuda_ops.cuh's norm_args */
typedef struct {
    int64_t rows, n, xst, ws, bs, parts;
    int32_t nd, layer, has_w, has_b;
    float invn, eps;
    int64_t shape[MK_MAX_NDIM], st[MK_MAX_NDIM];
} norm_args;

static int norm_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *x = in[0];
    mk_array *o = out[0];
    bool layer;
    float eps;
    char body[512];
    if (!mk_xp_norm(p, &layer, &eps) || o->size == 0 ||
        mkb_fast_body(body, sizeof body, "k", MKB_FAST_NORM, x->dtype, o->dtype) < 0)
        return p->op->eval(p, in, out);
    /* as norm_eval: a 0-d weight is the placeholder before a bias */
    const mk_array *w = p->ninputs > 1 && in[1]->ndim == 1 ? in[1] : NULL;
    const mk_array *b = p->ninputs > 2 && in[2]->ndim == 1 ? in[2] : NULL;
    if ((w && w->dtype != o->dtype) || (b && b->dtype != o->dtype)) return p->op->eval(p, in, out);
    norm_args a;
    memset(&a, 0, sizeof a);
    a.n = x->shape[x->ndim - 1];
    a.rows = row_dims(x, &a.nd, a.shape, a.st);
    a.xst = x->strides[x->ndim - 1];
    a.ws = w ? w->strides[0] : 0;
    a.bs = b ? b->strides[0] : 0;
    a.parts = mk_sum_row_parts(a.n, a.rows); /* the CPU's split of the row's sums */
    a.layer = layer;
    a.has_w = w != NULL;
    a.has_b = b != NULL;
    a.invn = (float)(1.0 / (double)a.n);
    a.eps = eps;
    CUdeviceptr po, px, pw = 0, pb = 0;
    if (mkb_cuda_enter() < 0 || mkb_cuda_ptr(x, &px) < 0 || (w && mkb_cuda_ptr(w, &pw) < 0) ||
        (b && mkb_cuda_ptr(b, &pb) < 0) || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0)
        return -1;
    void *params[5] = {&a, &po, &px, &pw, &pb};
    /* a warp per row, 8 rows per block */
    return run1(body, a.rows * 32, 256, params, layer ? "layer_norm" : "rms_norm");
}

/* ------------------------------------------------------------ rope */

typedef struct {
    int64_t rows, n, half, T, rows_per_b, noff, xst, offst, fst, work;
    int32_t nd, trad, has_freqs, off_u32;
    float coef, scale;
    int64_t shape[MK_MAX_NDIM], st[MK_MAX_NDIM];
} rope_args;

static int rope_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *x = in[0], *off = in[1], *freqs = p->ninputs > 2 ? in[2] : NULL;
    mk_array *o = out[0];
    int64_t dims;
    bool trad;
    float base, scale;
    char body[512];
    if (!mk_xp_rope(p, &dims, &trad, &base, &scale) || o->size == 0 || mk_dtype_size(off->dtype) != 4 ||
        (freqs && freqs->dtype != MK_FLOAT32) ||
        mkb_fast_body(body, sizeof body, "k", MKB_FAST_ROPE, x->dtype, x->dtype) < 0)
        return p->op->eval(p, in, out);
    rope_args a;
    memset(&a, 0, sizeof a);
    a.n = x->shape[x->ndim - 1];
    a.T = x->shape[x->ndim - 2];
    a.half = dims / 2;
    a.rows = row_dims(x, &a.nd, a.shape, a.st);
    a.rows_per_b = a.rows / x->shape[0];
    a.noff = off->size;
    a.xst = x->strides[x->ndim - 1];
    a.offst = off->ndim ? off->strides[0] : 0;
    a.fst = freqs ? freqs->strides[0] : 0;
    a.work = a.rows * (a.n - a.half);
    a.trad = trad;
    a.has_freqs = freqs != NULL;
    a.off_u32 = off->dtype == MK_UINT32;
    /* the CPU's host-side coefficient (glibc's logf), MLX's exp per pair */
    a.coef = freqs ? 0.0f : logf(base) / (float)a.half;
    a.scale = scale;
    CUdeviceptr po, px, pf = 0, poff;
    if (mkb_cuda_enter() < 0 || mkb_cuda_ptr(x, &px) < 0 || mkb_cuda_ptr(off, &poff) < 0 ||
        (freqs && mkb_cuda_ptr(freqs, &pf) < 0) || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0)
        return -1;
    void *params[5] = {&a, &po, &px, &poff, &pf};
    return run1(body, a.work, 256, params, "rope");
}

/* ------------------------------------------------------------ softmax rows */

typedef struct {
    int64_t rows, n, st;
    int32_t nd, nparts, kind;
    int64_t shape[MK_MAX_NDIM], strides[MK_MAX_NDIM];
} lastax_args;

static int lastax_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *x = in[0];
    mk_array *o = out[0];
    lastax_args a;
    memset(&a, 0, sizeof a);
    int kind = 0, nparts = 1;
    char body[512];
    if (x->ndim == 0 || x->size == 0 || o->dtype != x->dtype ||
        mkb_fast_body(body, sizeof body, "k", MKB_FAST_LASTAX, x->dtype, x->dtype) < 0)
        return p->op->eval(p, in, out);
    a.n = x->shape[x->ndim - 1];
    a.rows = row_dims(x, &a.nd, a.shape, a.strides);
    if (!mk_xp_lastax(p, &kind, a.rows, a.n, &nparts)) return p->op->eval(p, in, out);
    a.st = x->strides[x->ndim - 1];
    a.kind = kind;
    a.nparts = nparts;
    CUdeviceptr po, px;
    if (mkb_cuda_enter() < 0 || mkb_cuda_ptr(x, &px) < 0 || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0)
        return -1;
    void *params[3] = {&a, &po, &px};
    /* a block per row */
    const unsigned block = row_block(a.n);
    return run1(body, a.rows * block, block, params, kind == 0 ? "logsumexp" : "softmax");
}

/* ------------------------------------------------------------ attention */

typedef struct {
    int64_t B, Nq, Nkv, rep, Tq, Tk, D, Dv, M, mt, u0, nu;
    int64_t qs[4], ks[4], vs[4], ms[4], sks;
    float scale, lowest;
    int32_t causal, mask, sinks;
} sdpa_args;

/* scores of this many bytes at most per launch (64 rows of Tk floats per unit) */
#define SDPA_SCRATCH ((size_t)256 << 20)

static float round_to(mk_dtype t, float v) {
    if (t == MK_FLOAT16) return mk_f16_to_f32(mk_f32_to_f16(v));
    if (t == MK_BFLOAT16) return mk_bf16_to_f32(mk_f32_to_bf16(v));
    return v;
}

static int sdpa_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    const mk_array *q = in[0], *k = in[1], *v = in[2];
    float scale;
    bool causal, has_mask, mask_bool, has_sinks;
    char body[1024];
    if (!mk_xp_sdpa(p, &scale, &causal, &has_mask, &mask_bool, &has_sinks) || o->size == 0 ||
        mkb_fast_body(body, sizeof body, "k", MKB_FAST_SDPA, o->dtype, o->dtype) < 0)
        return p->op->eval(p, in, out);
    const mk_dtype t = o->dtype;
    int n = 3;
    const mk_array *mask = has_mask ? in[n++] : NULL, *sinks = has_sinks ? in[n++] : NULL;
    if (q->dtype != t || k->dtype != t || v->dtype != t || k->shape[2] == 0 || q->shape[3] == 0 ||
        (mask && mask->dtype != (mask_bool ? MK_BOOL : t)) || (sinks && sinks->dtype != t))
        return p->op->eval(p, in, out);
    sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = q->shape[0];
    a.Nq = q->shape[1];
    a.Tq = q->shape[2];
    a.D = q->shape[3];
    a.Nkv = k->shape[1];
    a.Tk = k->shape[2];
    a.Dv = v->shape[3];
    a.rep = a.Nq / a.Nkv;
    a.M = a.rep * a.Tq;
    a.mt = (a.M + 63) / 64;
    for (int d = 0; d < 4; d++) {
        a.qs[d] = q->strides[d];
        a.ks[d] = k->strides[d];
        a.vs[d] = v->strides[d];
        a.ms[d] = mask ? mask->strides[d] : 0;
    }
    a.sks = sinks ? sinks->strides[0] : 0;
    a.scale = round_to(t, scale);
    a.lowest = t == MK_FLOAT16 ? -65504.0f : t == MK_BFLOAT16 ? (float)-3.3895313892515355e38 : -FLT_MAX;
    a.causal = causal;
    a.mask = !mask ? 0 : mask_bool ? 1 : 2;
    a.sinks = sinks != NULL;
    static const char *const names[3] = {"ks", "kp", "kv"};
    CUfunction f[3];
    CUdeviceptr pq, pk, pv, pm = 0, psk = 0, po, P = 0;
    if (mkb_cuda_enter() < 0 || mkb_opkern_get(body, 3, names, f) < 0 || mkb_cuda_ptr(q, &pq) < 0 ||
        mkb_cuda_ptr(k, &pk) < 0 || mkb_cuda_ptr(v, &pv) < 0 || (mask && mkb_cuda_ptr(mask, &pm) < 0) ||
        (sinks && mkb_cuda_ptr(sinks, &psk) < 0) || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0)
        return -1;
    const int64_t units = a.B * a.Nkv * a.mt;
    const size_t per_unit = (size_t)64 * (size_t)a.Tk * sizeof(float);
    int64_t chunk = (int64_t)(SDPA_SCRATCH / per_unit);
    if (chunk < 1) chunk = 1;
    if (chunk > units) chunk = units;
    const size_t pbytes = (size_t)chunk * per_unit;
    if (mkb_cuda_scratch(pbytes, &P) < 0) return -1;
    /* the launches of one stream run in order: the scratch is reused by the
     * next chunk's scores only after this chunk's products have read it */
    int rc = 0;
    const int64_t kt = (a.Tk + 63) / 64, vt = (a.Dv + 63) / 64;
    for (int64_t u0 = 0; u0 < units && rc == 0; u0 += chunk) {
        a.u0 = u0;
        a.nu = units - u0 < chunk ? units - u0 : chunk;
        void *ps[5] = {&a, &P, &pq, &pk, &pm};
        void *pp[3] = {&a, &P, &psk};
        void *pvv[4] = {&a, &po, &P, &pv};
        rc = mkb_opkern_launch(f[0], a.nu * kt * 256, 256, ps, "scaled_dot_product_attention");
        if (rc == 0)
            rc = mkb_opkern_launch(f[1], a.nu * 64 * row_block(a.Tk), row_block(a.Tk), pp, "scaled_dot_product_attention");
        if (rc == 0) rc = mkb_opkern_launch(f[2], a.nu * vt * 256, 256, pvv, "scaled_dot_product_attention");
    }
    if (rc == 0) rc = mkb_cuda_wait("scaled_dot_product_attention", NULL);
    mkb_cuda_scratch_free(P, pbytes);
    return rc;
}

const mkb_cuda_opentry mkb_cuda_fast_ops[] = {
    {"norm", norm_gpu},
    {"rope", rope_gpu},
    {"softmax", lastax_gpu},
    {"scaled_dot_product_attention", sdpa_gpu},
    {NULL, NULL},
};

/* ------------------------------------------------------------ compile check */

int mkb_fast_check_bodies(int (*add)(void *g, const char *body, int nk), void *g) {
    static const mk_dtype ft[3] = {MK_FLOAT16, MK_BFLOAT16, MK_FLOAT32};
    char body[2048], name[32];
    int id = 0, rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++) {
        /* norm: x of any float dtype (an integer x is made float32) into an
         * output of any float dtype (promoted with the weight and bias) */
        for (int j = 0; j < 3 && rc == 0; j++) {
            snprintf(name, sizeof name, "f%d", id++);
            if (mkb_fast_body(body, sizeof body, name, MKB_FAST_NORM, ft[i], ft[j]) > 0) rc = add(g, body, 1);
        }
        /* the others keep x's dtype (attention's inputs are cast to the output's) */
        static const int one[3] = {MKB_FAST_ROPE, MKB_FAST_LASTAX, MKB_FAST_SDPA};
        for (int k = 0; k < 3 && rc == 0; k++) {
            snprintf(name, sizeof name, "f%d", id++);
            if (mkb_fast_body(body, sizeof body, name, one[k], ft[i], ft[i]) > 0)
                rc = add(g, body, one[k] == MKB_FAST_SDPA ? 3 : 1);
        }
    }
    return rc;
}
