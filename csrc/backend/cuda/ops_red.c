/* Reductions on the GPU: the "reduce" primitive's sum, prod, max, min, all
 * and any over any axes (docs/design.md, "GPU op evaluators"). The input is
 * read in place: its kept dims (in the output's order) and its reduced dims,
 * each merged, with their strides. Short reductions take one thread per
 * output; longer ones a block per output, or several blocks per output whose
 * partial accumulators a second kernel combines. The accumulators are the
 * CPU's (ops_reduce.c), except float sums, which are in double throughout.
 * argmax and argmin (the same launches, mkpy_cuda_idx.cuh's kernels) keep
 * the CPU's first-of-equals and first-nan rules. Empty inputs run on the
 * CPU. */
#include <stdio.h>
#include <string.h>

#include "core/export.h"
#include "core/iter.h"
#include "core/ops.h"
#include "driver.h"
#include "ops_cuda.h"

typedef struct {
    int64_t K, R, chunk;
    int32_t nk, nr, nchunk;
    int64_t kshape[MK_MAX_NDIM], kst[MK_MAX_NDIM];
    int64_t rshape[MK_MAX_NDIM], rst[MK_MAX_NDIM];
} red_args;

static const char *const rname[6] = {"sum", "prod", "max", "min", "all", "any"};

int mkb_red_body(char *buf, size_t n, const char *prefix, int which, mk_dtype in, mk_dtype out) {
    if (which < 0 || which > 5 || in >= MK_NDTYPES || out >= MK_NDTYPES || !mkb_cuda_tname[in] ||
        !mkb_cuda_tname[out])
        return -1;
    const char *ti = mkb_cuda_tname[in], *to = mkb_cuda_tname[out], *op = rname[which];
    return snprintf(buf, n,
                    "extern \"C\" __global__ void %sb(red_args a, %s *o, const %s *x, void *p) "
                    "{ reduce_blocks<r_%s, %s, %s>(a, o, x, p); }\n"
                    "extern \"C\" __global__ void %st(red_args a, %s *o, const %s *x) "
                    "{ reduce_threads<r_%s, %s, %s>(a, o, x); }\n"
                    "extern \"C\" __global__ void %sp(red_args a, %s *o, const void *p) "
                    "{ reduce_parts<r_%s, %s, %s>(a, o, p); }\n",
                    prefix, to, ti, op, ti, to, prefix, to, ti, op, ti, to, prefix, to, op, ti, to);
}

/* bytes of the accumulator (mkpy_cuda_ops.cuh's sum_acc, prod_acc, rt) */
static size_t acc_size(int which, mk_dtype t) {
    bool flt = t == MK_FLOAT16 || t == MK_BFLOAT16 || t == MK_FLOAT32;
    switch (which) {
    case MK_REDUCE_SUM:
    case MK_REDUCE_PROD:
        if (t == MK_COMPLEX64 || t == MK_INT64 || t == MK_UINT64) return 8;
        if (flt) return which == MK_REDUCE_SUM ? 8 : 4;
        return 4;
    case MK_REDUCE_MAX:
    case MK_REDUCE_MIN: return flt ? 4 : mk_dtype_size(t);
    default: return 1;
    }
}

/* shape and strides of x's dims with red[d] == want, merged (core/iter.c) */
static int64_t dims(const mk_array *x, const bool *red, bool want, int32_t *nd, int64_t *shape, int64_t *st) {
    int64_t sh[MK_MAX_NDIM], s[MK_MAX_NDIM];
    int n = 0;
    for (int d = 0; d < x->ndim; d++)
        if (red[d] == want) {
            sh[n] = x->shape[d];
            s[n++] = x->strides[d];
        }
    const int64_t *sp[1] = {s};
    mk_iter it;
    mk_iter_init(&it, n, sh, 1, sp);
    *nd = it.ndim;
    memcpy(shape, it.shape, sizeof(int64_t) * MK_MAX_NDIM);
    memcpy(st, it.strides[0], sizeof(int64_t) * MK_MAX_NDIM);
    return it.total;
}

int mkb_arg_body(char *buf, size_t n, const char *prefix, int which, mk_dtype in) {
    if (which < 0 || which > 1 || in >= MK_NDTYPES || !mkb_cuda_tname[in]) return -1;
    const char *ti = mkb_cuda_tname[in], *m = which == 0 ? "true" : "false";
    return snprintf(buf, n,
                    "#include \"mkpy_cuda_idx.cuh\"\n"
                    "extern \"C\" __global__ void %sb(red_args a, u32 *o, const %s *x, void *p) "
                    "{ arg_blocks<%s, %s>(a, o, x, p); }\n"
                    "extern \"C\" __global__ void %st(red_args a, u32 *o, const %s *x) { arg_threads<%s, %s>(a, o, x); }\n"
                    "extern \"C\" __global__ void %sp(red_args a, u32 *o, const void *p) { arg_parts<%s, %s>(a, o, p); }\n",
                    prefix, ti, m, ti, prefix, ti, m, ti, prefix, m, ti);
}

/* Launches the kernels f (blocks, threads, parts) of a reduction of x into
 * o over a's dims; acc: bytes of one partial accumulator. */
static int run_reduce(red_args *a, CUfunction *f, const mk_array *x, mk_array *o, size_t acc, const char *what) {
    CUdeviceptr px, po, part = 0;
    if (mkb_cuda_ptr(x, &px) < 0 || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0) return -1;
    if (a->R < 128) { /* one thread per output */
        void *params[3] = {a, &po, &px};
        if (mkb_opkern_launch(f[1], a->K, 128, params, what) < 0) return -1;
        return mkb_cuda_wait(what, NULL);
    }
    /* enough blocks to fill the GPU (about 1024) when outputs are few,
     * each reducing at least 4096 elements */
    int64_t nchunk = 1;
    if (a->K < 1024) {
        nchunk = (1024 + a->K - 1) / a->K;
        int64_t most = (a->R + 4095) / 4096;
        if (nchunk > most) nchunk = most;
        if (nchunk < 1) nchunk = 1;
    }
    a->nchunk = (int32_t)nchunk;
    a->chunk = (a->R + nchunk - 1) / nchunk;
    size_t pbytes = (size_t)(a->K * nchunk) * acc;
    if (nchunk > 1 && mkb_cuda_scratch(pbytes, &part) < 0) return -1;
    void *params[4] = {a, &po, &px, &part};
    /* one block of 256 per (output, chunk) */
    int rc = mkb_opkern_launch(f[0], a->K * nchunk * 256, 256, params, what);
    if (rc == 0 && nchunk > 1) {
        void *pp[3] = {a, &po, &part};
        rc = mkb_opkern_launch(f[2], a->K, 128, pp, what);
    }
    if (rc == 0) rc = mkb_cuda_wait(what, NULL);
    if (part) mkb_cuda_scratch_free(part, pbytes);
    return rc;
}

/* argmax and argmin: the index (uint32) in the row-major order of the
 * reduced dims, which merging keeps */
static int arg_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out, int which, const bool *red) {
    mk_array *x = in[0], *o = out[0];
    char body[1024];
    if (o->size == 0 || x->size == 0 || mkb_arg_body(body, sizeof body, "k", which, x->dtype) < 0)
        return p->op->eval(p, in, out);
    red_args a;
    memset(&a, 0, sizeof a);
    a.K = dims(x, red, false, &a.nk, a.kshape, a.kst);
    a.R = dims(x, red, true, &a.nr, a.rshape, a.rst);
    if (a.R > UINT32_MAX) return p->op->eval(p, in, out);
    static const char *const names[3] = {"kb", "kt", "kp"};
    CUfunction f[3];
    if (mkb_cuda_enter() < 0 || mkb_opkern_get(body, 3, names, f) < 0) return -1;
    /* mkpy_cuda_idx.cuh's arg_acc: a value of at most 8 bytes, two u32 */
    return run_reduce(&a, f, x, o, 16, which == 0 ? "argmax" : "argmin");
}

static int reduce_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int which;
    bool red[MK_MAX_NDIM];
    mk_array *x = in[0], *o = out[0];
    char body[1024];
    if (mk_xp_argreduce(p, &which, red)) return arg_gpu(p, in, out, which, red);
    if (!mk_xp_reduce(p, &which, red) || o->size == 0 || x->size == 0 ||
        mkb_red_body(body, sizeof body, "k", which, x->dtype, o->dtype) < 0)
        return p->op->eval(p, in, out);
    red_args a;
    memset(&a, 0, sizeof a);
    a.K = dims(x, red, false, &a.nk, a.kshape, a.kst);
    a.R = dims(x, red, true, &a.nr, a.rshape, a.rst);
    static const char *const names[3] = {"kb", "kt", "kp"};
    CUfunction f[3];
    if (mkb_cuda_enter() < 0 || mkb_opkern_get(body, 3, names, f) < 0) return -1;
    return run_reduce(&a, f, x, o, acc_size(which, x->dtype), rname[which]);
}

const mkb_cuda_opentry mkb_cuda_red_ops[] = {{"reduce", reduce_gpu}, {NULL, NULL}};
