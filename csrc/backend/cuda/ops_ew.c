/* Element-wise ops on the GPU: "unary", "binary", "astype", "where" and the
 * copies of "reshape" and "contiguous" (docs/design.md, "GPU op
 * evaluators"). Inputs are read in place through their strides (broadcast
 * ones are 0), dims merged as core/iter.c merges them; the output is fresh
 * device memory, or for unary, binary, astype and where an input's buffer
 * when it may be donated (mkb_cuda_out_donated). Cases left to the CPU's
 * evaluator: float64, the complex ops whose CPU results come from glibc's
 * complex functions or libgcc's complex division, empty arrays. */
#include <stdio.h>
#include <string.h>

#include "core/export.h"
#include "core/iter.h"
#include "core/ops.h"
#include "driver.h"
#include "ops_cuda.h"

/* mkpy_cuda_ops.cuh's ew_args */
typedef struct {
    int64_t n;
    int32_t nd;
    int64_t shape[MK_MAX_NDIM];
    int64_t st[4][MK_MAX_NDIM];
} ew_args;

/* (ops_cuda.h) */
int mkb_ew_run(const char *body, const char *what, int ndim, const int64_t *shape, int narr,
               const int64_t *const *strides, CUdeviceptr *ptrs) {
    static const char *const names[] = {"k"};
    CUfunction f;
    if (mkb_cuda_enter() < 0 || mkb_opkern_get(body, 1, names, &f) < 0) return -1;
    mk_iter it;
    mk_iter_init(&it, ndim, shape, narr, strides);
    ew_args a;
    memset(&a, 0, sizeof a);
    a.n = it.total;
    a.nd = it.ndim;
    memcpy(a.shape, it.shape, sizeof a.shape);
    for (int k = 0; k < narr; k++) memcpy(a.st[k], it.strides[k], sizeof a.st[k]);
    void *params[5] = {&a};
    for (int k = 0; k < narr; k++) params[k + 1] = &ptrs[k];
    if (mkb_opkern_launch(f, a.n, 256, params, what) < 0) return -1;
    return mkb_cuda_wait(what, NULL);
}

static bool gpu_type(mk_dtype t) { return t < MK_NDTYPES && mkb_cuda_tname[t] != NULL; }

/* ------------------------------------------------------------ bodies */

/* Complex ops whose CPU results are glibc's or libgcc's complex functions
 * (csqrtf, clogf, ..., complex division) stay there. */
static bool unary_complex_ok(mk_unary_op op) {
    switch (op) {
    case MK_UNARY_abs: case MK_UNARY_negative: case MK_UNARY_sign: case MK_UNARY_square: case MK_UNARY_exp:
    case MK_UNARY_round: case MK_UNARY_isnan: case MK_UNARY_isinf: case MK_UNARY_isfinite:
    case MK_UNARY_isposinf: case MK_UNARY_isneginf: case MK_UNARY_real: case MK_UNARY_imag:
    case MK_UNARY_conjugate: case MK_UNARY_stop_gradient: case MK_UNARY_degrees: case MK_UNARY_radians:
        return true;
    default: return false;
    }
}
static bool binary_complex_ok(mk_binary_op op) {
    switch (op) {
    case MK_BINARY_add: case MK_BINARY_subtract: case MK_BINARY_multiply: case MK_BINARY_maximum:
    case MK_BINARY_minimum: case MK_BINARY_equal: case MK_BINARY_not_equal: case MK_BINARY_greater:
    case MK_BINARY_greater_equal: case MK_BINARY_less: case MK_BINARY_less_equal:
        return true;
    default: return false;
    }
}

int mkb_ew_body(char *buf, size_t n, const char *entry, int kind, int op, mk_dtype in, mk_dtype out) {
    const char *ti = gpu_type(in) ? mkb_cuda_tname[in] : NULL, *to = gpu_type(out) ? mkb_cuda_tname[out] : NULL;
    if (!ti || !to) return -1;
    static const char *const ename[9] = {[1] = "u8", [2] = "u16", [4] = "u32", [8] = "u64"};
    switch (kind) {
    case MKB_EW_UNARY:
        if (in == MK_COMPLEX64 && !unary_complex_ok((mk_unary_op)op)) return -1;
        return snprintf(buf, n,
                        "extern \"C\" __global__ void %s(ew_args a, %s *o, const %s *x) "
                        "{ unary<u_%s, %s, %s>(a, o, x); }\n",
                        entry, to, ti, mk_unary_names[op], ti, to);
    case MKB_EW_BINARY:
        if (in == MK_COMPLEX64 && !binary_complex_ok((mk_binary_op)op)) return -1;
        return snprintf(buf, n,
                        "extern \"C\" __global__ void %s(ew_args a, %s *o, const %s *x, const %s *y) "
                        "{ binary<b_%s, %s, %s>(a, o, x, y); }\n",
                        entry, to, ti, ti, mk_binary_names[op], ti, to);
    case MKB_EW_ASTYPE:
        return snprintf(buf, n,
                        "extern \"C\" __global__ void %s(ew_args a, %s *o, const %s *x) { astype<%s, %s>(a, o, x); }\n",
                        entry, to, ti, ti, to);
    case MKB_EW_COPY:
    case MKB_EW_WHERE: {
        const char *e = ename[mk_dtype_size(in)];
        if (kind == MKB_EW_COPY)
            return snprintf(buf, n, "extern \"C\" __global__ void %s(ew_args a, %s *o, const %s *x) { copy<%s>(a, o, x); }\n",
                            entry, e, e, e);
        return snprintf(buf, n,
                        "extern \"C\" __global__ void %s(ew_args a, %s *o, const u8 *c, const %s *x, const %s *y) "
                        "{ where<%s>(a, o, c, x, y); }\n",
                        entry, e, e, e, e);
    }
    default: return -1;
    }
}

/* ------------------------------------------------------------ evaluators */

static int unary_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *x = in[0], *o = out[0];
    char body[512];
    if (o->size == 0 || mkb_ew_body(body, sizeof body, "k", MKB_EW_UNARY, *(const mk_unary_op *)p->params, x->dtype,
                                    o->dtype) < 0)
        return p->op->eval(p, in, out);
    CUdeviceptr ptr[2];
    if (mkb_cuda_enter() < 0 || mkb_cuda_ptr(x, &ptr[1]) < 0 || mkb_cuda_out_donated(p, o, in, 1) < 0 || mkb_cuda_ptr(o, &ptr[0]) < 0)
        return -1;
    const int64_t *st[2] = {o->strides, x->strides};
    return mkb_ew_run(body, mk_unary_names[*(const mk_unary_op *)p->params], o->ndim, o->shape, 2, st, ptr);
}

static int binary_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    mk_binary_op op = *(const mk_binary_op *)p->params;
    char body[512];
    if (o->size == 0 || mkb_ew_body(body, sizeof body, "k", MKB_EW_BINARY, op, in[0]->dtype, o->dtype) < 0)
        return p->op->eval(p, in, out);
    CUdeviceptr ptr[3];
    if (mkb_cuda_enter() < 0 || mkb_cuda_ptr(in[0], &ptr[1]) < 0 || mkb_cuda_ptr(in[1], &ptr[2]) < 0 ||
        mkb_cuda_out_donated(p, o, in, 2) < 0 || mkb_cuda_ptr(o, &ptr[0]) < 0)
        return -1;
    int64_t sa[MK_MAX_NDIM], sb[MK_MAX_NDIM];
    mk_broadcast_strides(in[0], o->ndim, o->shape, sa);
    mk_broadcast_strides(in[1], o->ndim, o->shape, sb);
    const int64_t *st[3] = {o->strides, sa, sb};
    return mkb_ew_run(body, mk_binary_names[op], o->ndim, o->shape, 3, st, ptr);
}

static int astype_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *x = in[0], *o = out[0];
    char body[512];
    if (o->size == 0 || mkb_ew_body(body, sizeof body, "k", MKB_EW_ASTYPE, 0, x->dtype, o->dtype) < 0)
        return p->op->eval(p, in, out);
    CUdeviceptr ptr[2];
    if (mkb_cuda_enter() < 0 || mkb_cuda_ptr(x, &ptr[1]) < 0 || mkb_cuda_out_donated(p, o, in, 1) < 0 || mkb_cuda_ptr(o, &ptr[0]) < 0)
        return -1;
    const int64_t *st[2] = {o->strides, x->strides};
    return mkb_ew_run(body, "astype", o->ndim, o->shape, 2, st, ptr);
}

static int where_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    char body[512];
    if (o->size == 0 || in[0]->dtype != MK_BOOL ||
        mkb_ew_body(body, sizeof body, "k", MKB_EW_WHERE, 0, o->dtype, o->dtype) < 0)
        return p->op->eval(p, in, out);
    CUdeviceptr ptr[4];
    if (mkb_cuda_enter() < 0) return -1;
    for (int k = 0; k < 3; k++)
        if (mkb_cuda_ptr(in[k], &ptr[k + 1]) < 0) return -1;
    if (mkb_cuda_out_donated(p, o, in, 3) < 0 || mkb_cuda_ptr(o, &ptr[0]) < 0) return -1;
    int64_t s[3][MK_MAX_NDIM];
    for (int k = 0; k < 3; k++) mk_broadcast_strides(in[k], o->ndim, o->shape, s[k]);
    const int64_t *st[4] = {o->strides, s[0], s[1], s[2]};
    return mkb_ew_run(body, "where", o->ndim, o->shape, 4, st, ptr);
}

/* x's elements in row-major order into o's fresh dense storage (as many
 * bytes as x): the copies of reshape and contiguous */
static int copy_dense(const mk_array *x, mk_array *o) {
    char body[512];
    if (mkb_ew_body(body, sizeof body, "k", MKB_EW_COPY, 0, x->dtype, x->dtype) < 0) return 1;
    CUdeviceptr ptr[2];
    if (mkb_cuda_enter() < 0 || mkb_cuda_ptr(x, &ptr[1]) < 0 || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &ptr[0]) < 0)
        return -1;
    int64_t dense[MK_MAX_NDIM];
    mk_row_strides(x->ndim, x->shape, dense);
    const int64_t *st[2] = {dense, x->strides};
    return mkb_ew_run(body, "copy", x->ndim, x->shape, 2, st, ptr);
}

static bool elem_size_ok(mk_dtype t) {
    size_t s = mk_dtype_size(t);
    return s == 1 || s == 2 || s == 4 || s == 8;
}

static int reshape_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *x = in[0];
    /* a view when the CPU's evaluator makes one (it reads no data then) */
    if (x->size == 0 || !elem_size_ok(x->dtype) || mk_reshape_nocopy(x, out[0]->ndim, out[0]->shape))
        return p->op->eval(p, in, out);
    int rc = copy_dense(x, out[0]);
    return rc > 0 ? p->op->eval(p, in, out) : rc;
}

static int contiguous_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *x = in[0];
    bool allow_col = *(const bool *)p->params;
    if (x->size == 0 || !elem_size_ok(x->dtype) || (x->flags & MK_ROW_CONTIG) ||
        (allow_col && (x->flags & MK_COL_CONTIG)))
        return p->op->eval(p, in, out);
    int rc = copy_dense(x, out[0]);
    return rc > 0 ? p->op->eval(p, in, out) : rc;
}

const mkb_cuda_opentry mkb_cuda_ew_ops[] = {
    {"unary", unary_gpu},     {"StopGradient", unary_gpu}, {"binary", binary_gpu},
    {"astype", astype_gpu},   {"where", where_gpu},        {"reshape", reshape_gpu},
    {"contiguous", contiguous_gpu}, {NULL, NULL},
};
