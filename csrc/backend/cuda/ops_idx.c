/* Indexing and data movement on the GPU (docs/design.md, "GPU indexing and
 * data movement"): gather (take, x[idx]), take_along_axis, scatter (x[idx] =
 * v, x.at[idx].add(v), slice updates), put_along_axis, concatenate, pad, the
 * constant and array fills of "full", integer arange, and the scans cumsum,
 * cumprod, cummax and cummin. Kernels are
 * templates of mkpy/include/mkpy_cuda_idx.cuh, one small program per
 * (kernel, element type or dtype, number of index arrays). Inputs are read in
 * place through their strides (dims merged as core/iter.c merges them);
 * outputs are fresh device memory, or a scatter's input buffer when it may
 * be donated (mk_donate_device: x[i] = v in a loop costs O(v)). Cases left to
 * the CPU's evaluator (one copy each way): float64, empty arrays, more than
 * MKB_IDX_MAXA index arrays, float max/min scatters through index arrays
 * (their CPU results depend on the order of repeated targets), and what the
 * CPU evaluator refuses on a GPU stream (it raises there). */
#include <stdio.h>
#include <string.h>

#include "core/export.h"
#include "core/iter.h"
#include "core/ops.h"
#include "driver.h"
#include "ops_cuda.h"

/* mkpy_cuda_idx.cuh's argument blocks, field for field */
typedef struct {
    uint64_t p[MKB_IDX_MAXA];
    int64_t len[MKB_IDX_MAXA], st[MKB_IDX_MAXA];
    int32_t type[MKB_IDX_MAXA];
} idx_set;
typedef struct {
    int64_t n, x0;
    int32_t nd, pad_;
    int64_t shape[MK_MAX_NDIM], ost[MK_MAX_NDIM], xst[MK_MAX_NDIM];
    int64_t ist[MKB_IDX_MAXA][MK_MAX_NDIM];
    idx_set ix;
} gat_args;
typedef struct {
    int64_t rows, post, nB, t0, KA;
    int32_t nout, npost;
    int64_t oshape[MK_MAX_NDIM], ots[MK_MAX_NDIM], ous[MK_MAX_NDIM];
    int64_t ois[MKB_IDX_MAXA][MK_MAX_NDIM];
    int64_t pshape[MK_MAX_NDIM], pts[MK_MAX_NDIM], pus[MK_MAX_NDIM];
    int64_t kmul[MKB_IDX_MAXA];
    idx_set ix;
} sct_args;
typedef struct {
    int64_t lines, len, nax, oax, iax, uax;
    uint64_t idx;
    int32_t nd, itype;
    int64_t shape[MK_MAX_NDIM], ost[MK_MAX_NDIM], ist[MK_MAX_NDIM], ust[MK_MAX_NDIM];
} pax_args;
typedef struct {
    int64_t n;
    int32_t nd, mode;
    int64_t shape[MK_MAX_NDIM], xst[MK_MAX_NDIM], lo[MK_MAX_NDIM], xn[MK_MAX_NDIM];
} pad_args;
typedef struct {
    int64_t lines, n, xax, oax;
    int32_t nd, rev, incl, pad_;
    int64_t shape[MK_MAX_NDIM], xst[MK_MAX_NDIM], ost[MK_MAX_NDIM];
} scan_args;
/* the header checks the same sizes (static_assert) */
_Static_assert(sizeof(gat_args) == 1928 && sizeof(sct_args) == 2752 && sizeof(pax_args) == 1088 &&
                   sizeof(pad_args) == 1040 && sizeof(scan_args) == 816,
               "mkpy_cuda_idx.cuh's argument blocks");

/* ------------------------------------------------------------ bodies */

static const char *const ename[9] = {[1] = "u8", [2] = "u16", [4] = "u32", [8] = "u64"};
static const char *const sname[5] = {[MK_SCATTER_SUM] = "sum", [MK_SCATTER_PROD] = "prod",
                                     [MK_SCATTER_MAX] = "max", [MK_SCATTER_MIN] = "min"};

static bool gpu_type(mk_dtype t) { return t < MK_NDTYPES && mkb_cuda_tname[t] != NULL; }

/* a scatter reduction whose CPU result depends on the order of repeated
 * targets in a way the GPU cannot reproduce (float max/min: nans and signed
 * zeros) */
static bool op_order_bound(int op, mk_dtype t, int narr) {
    return narr > 0 && (op == MK_SCATTER_MAX || op == MK_SCATTER_MIN) &&
           (t == MK_FLOAT16 || t == MK_BFLOAT16 || t == MK_FLOAT32 || t == MK_COMPLEX64);
}

int mkb_idx_body(char *buf, size_t n, const char *k, int kind, int narr, int op, mk_dtype t) {
    static const char inc[] = "#include \"mkpy_cuda_idx.cuh\"\n";
    if (t >= MK_NDTYPES || narr < 0 || narr > MKB_IDX_MAXA) return -1;
    size_t sz = mk_dtype_size(t);
    const char *e = sz <= 8 ? ename[sz] : NULL, *s = gpu_type(t) ? mkb_cuda_tname[t] : NULL;
    bool has_op = op >= MK_SCATTER_SUM && op <= MK_SCATTER_MIN;
    switch (kind) {
    case MKB_IDX_GATHER:
        if (!e) return -1;
        return snprintf(buf, n, "%sextern \"C\" __global__ void %s(gat_args a, %s *o, const %s *x) { gather<%s, %d>(a, o, x); }\n",
                        inc, k, e, e, e, narr);
    case MKB_IDX_SCATTER_SET:
        if (!e) return -1;
        return snprintf(buf, n,
                        "%sextern \"C\" __global__ void %sw(sct_args a, u32 *w) { scatter_win<%d>(a, w); }\n"
                        "extern \"C\" __global__ void %ss(sct_args a, %s *o, const %s *u, const u32 *w) "
                        "{ scatter_set<%s, %d, %s>(a, o, u, w); }\n",
                        inc, k, narr, k, e, e, e, narr, narr ? "true" : "false");
    case MKB_IDX_SCATTER_OP:
        if (!s || !has_op || op_order_bound(op, t, narr)) return -1;
        return snprintf(buf, n,
                        "%sextern \"C\" __global__ void %s(sct_args a, %s *o, const %s *u) "
                        "{ scatter_op<s_%s, %s, %d>(a, o, u); }\n",
                        inc, k, s, s, sname[op], s, narr);
    case MKB_IDX_PUT_SET:
        if (!e) return -1;
        return snprintf(buf, n, "%sextern \"C\" __global__ void %s(pax_args a, %s *o, const %s *u) { put_axis_set<%s>(a, o, u); }\n",
                        inc, k, e, e, e);
    case MKB_IDX_PUT_OP:
        if (!s || !has_op) return -1;
        return snprintf(buf, n,
                        "%sextern \"C\" __global__ void %s(pax_args a, %s *o, const %s *u) { put_axis_op<s_%s, %s>(a, o, u); }\n",
                        inc, k, s, s, sname[op], s);
    case MKB_IDX_PAD:
        if (!e) return -1;
        return snprintf(buf, n,
                        "%sextern \"C\" __global__ void %s(pad_args a, %s *o, const %s *x, const %s *c) { pad<%s>(a, o, x, c); }\n",
                        inc, k, e, e, e, e);
    case MKB_IDX_FILL:
        if (!e) return -1;
        return snprintf(buf, n, "%sextern \"C\" __global__ void %s(i64 n, %s *o, %s v) { fill<%s>(n, o, v); }\n", inc, k,
                        e, e, e);
    case MKB_IDX_SCAN: {
        /* logcumsumexp's steps are glibc's log1p on the CPU: left there */
        static const char *const cname[4] = {"sum", "prod", "max", "min"};
        if (!s || op < MK_SCAN_SUM || op > MK_SCAN_MIN) return -1;
        const char *so = t == MK_BOOL && op == MK_SCAN_SUM ? "i32" : s;
        return snprintf(buf, n, "%sextern \"C\" __global__ void %s(scan_args a, %s *o, const %s *x) { scan_lines<c_%s, %s, %s>(a, o, x); }\n",
                        inc, k, so, s, cname[op], s, so);
    }
    case MKB_IDX_ARANGE:
        if (!s || !mk_is_integral(t)) return -1;
        return snprintf(buf, n, "%sextern \"C\" __global__ void %s(i64 n, %s *o, u64 s0, u64 st) { arange_int<%s>(n, o, s0, st); }\n",
                        inc, k, s, s);
    default: return -1;
    }
}

/* ------------------------------------------------------------ helpers */

/* Drops size-1 dims and merges neighbours contiguous in every operand
 * (core/iter.c's rule), in place. Returns the new ndim (at least 1). */
static int merge_dims(int nd, int64_t *shape, int nops, int64_t *const *st) {
    int n = 0;
    for (int d = 0; d < nd; d++) {
        if (shape[d] == 1) continue;
        if (n > 0) {
            bool ok = true;
            for (int k = 0; k < nops; k++) ok = ok && st[k][d] * shape[d] == st[k][n - 1];
            if (ok) {
                shape[n - 1] *= shape[d];
                for (int k = 0; k < nops; k++) st[k][n - 1] = st[k][d];
                continue;
            }
        }
        shape[n] = shape[d];
        for (int k = 0; k < nops; k++) st[k][n] = st[k][d];
        n++;
    }
    if (n == 0) {
        shape[0] = 1;
        for (int k = 0; k < nops; k++) st[k][0] = 0;
        n = 1;
    }
    return n;
}

static int64_t prod(int nd, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= shape[d];
    return n;
}

/* the kernels `names` of body, made current */
static int kernels(const char *body, int nk, const char *const *names, CUfunction *f) {
    return mkb_cuda_enter() < 0 ? -1 : mkb_opkern_get(body, nk, names, f);
}

static int launch(CUfunction f, int64_t work, void **params, const char *what) {
    return mkb_opkern_launch(f, work, 256, params, what);
}

/* an index array's device address and dtype code (u8..u64, i8..i64: 0..7) */
static int index_array(const mk_array *a, idx_set *ix, int k) {
    CUdeviceptr p;
    if (mkb_cuda_ptr(a, &p) < 0) return -1;
    ix->p[k] = p;
    ix->type[k] = (int32_t)(a->dtype - MK_UINT8);
    return 0;
}

/* x's elements (any strides) into the row-contiguous dst of x's shape
 * (launched, not waited for) */
static int copy_into(const mk_array *x, CUdeviceptr dst, const int64_t *dst_strides, const char *what) {
    char body[512];
    static const char *const names[] = {"k"};
    CUfunction f;
    if (mkb_idx_body(body, sizeof body, "k", MKB_IDX_GATHER, 0, 0, x->dtype) < 0) {
        mk_error_set(MK_ERR_RUNTIME, "[%s] No GPU copy for %s.", what, mk_dtype_name(x->dtype));
        return -1;
    }
    gat_args a;
    memset(&a, 0, sizeof a);
    a.n = x->size;
    memcpy(a.shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    memcpy(a.ost, dst_strides, sizeof(int64_t) * (size_t)x->ndim);
    memcpy(a.xst, x->strides, sizeof(int64_t) * (size_t)x->ndim);
    int64_t *st[2] = {a.ost, a.xst};
    a.nd = merge_dims(x->ndim, a.shape, 2, st);
    CUdeviceptr px;
    if (kernels(body, 1, names, &f) < 0 || mkb_cuda_ptr(x, &px) < 0) return -1;
    void *params[3] = {&a, &dst, &px};
    return launch(f, a.n, params, what);
}

/* A scatter's output starts as its input: x's buffer when it may be donated
 * (its device copy is written over), else a dense device copy of x. */
static int init_from(mk_prim *p, mk_array *o, mk_array *x, CUdeviceptr *po, const char *what) {
    if (mkb_cuda_enter() < 0) return -1;
    if (x->ndim == o->ndim && x->dtype == o->dtype && mk_donate_device(p, o, x, &mkb_cuda_mem))
        return mkb_cuda_ptr(o, po);
    if (mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, po) < 0) return -1;
    return copy_into(x, *po, o->strides, what);
}

/* ------------------------------------------------------------ gather */

static int gather_run(const char *what, gat_args *a, int narr, mk_array *const *idx, mk_array *x, mk_array *o) {
    char body[512];
    static const char *const names[] = {"k"};
    CUfunction f;
    if (mkb_idx_body(body, sizeof body, "k", MKB_IDX_GATHER, narr, 0, x->dtype) < 0) return 1;
    CUdeviceptr px, po;
    if (kernels(body, 1, names, &f) < 0 || mkb_cuda_ptr(x, &px) < 0) return -1;
    for (int k = 0; k < narr; k++)
        if (index_array(idx[k], &a->ix, k) < 0) return -1;
    if (mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0) return -1;
    void *params[3] = {a, &po, &px};
    if (launch(f, a->n, params, what) < 0) return -1;
    return mkb_cuda_wait(what, NULL);
}

static int gather_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int narr, bpos;
    mk_index_dim dims[MK_MAX_NDIM];
    mk_array *x = in[0], *o = out[0];
    if (!mk_xp_gather(p, &narr, &bpos, dims) || o->size == 0 || narr > MKB_IDX_MAXA)
        return p->op->eval(p, in, out);
    gat_args a;
    memset(&a, 0, sizeof a);
    int rest[MK_MAX_NDIM], nrest = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (dims[d].kind == MK_IDX_SLICE) rest[nrest++] = d;
        if (dims[d].kind != MK_IDX_ARRAY) {
            a.x0 += dims[d].start * x->strides[d];
        } else {
            a.ix.len[dims[d].arr] = x->shape[d];
            a.ix.st[dims[d].arr] = x->strides[d];
        }
    }
    /* the output's dims: sliced dims before bpos, the broadcast index shape B, the rest */
    int nB = o->ndim - nrest, g = 0;
    for (int r = 0; r <= nrest; r++) {
        if (r == bpos) {
            for (int k = 0; k < narr; k++) mk_broadcast_strides(in[1 + k], nB, o->shape + bpos, a.ist[k] + bpos);
            for (int j = 0; j < nB; j++, g++) a.shape[g] = o->shape[g];
        }
        if (r < nrest) {
            int d = rest[r];
            a.shape[g] = dims[d].len;
            a.xst[g++] = dims[d].step * x->strides[d];
        }
    }
    mk_row_strides(o->ndim, o->shape, a.ost);
    int64_t *st[2 + MKB_IDX_MAXA] = {a.ost, a.xst};
    for (int k = 0; k < narr; k++) st[2 + k] = a.ist[k];
    a.nd = merge_dims(o->ndim, a.shape, 2 + narr, st);
    a.n = o->size;
    int rc = gather_run("gather", &a, narr, in + 1, x, o);
    return rc > 0 ? p->op->eval(p, in, out) : rc;
}

static int take_axis_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int axis;
    mk_array *x = in[0], *idx = in[1], *o = out[0];
    if (!mk_xp_take_axis(p, &axis) || o->size == 0 || x->shape[axis] == 0) return p->op->eval(p, in, out);
    gat_args a;
    memset(&a, 0, sizeof a);
    memcpy(a.shape, o->shape, sizeof a.shape);
    for (int d = 0; d < o->ndim; d++) a.xst[d] = d == axis || x->shape[d] == 1 ? 0 : x->strides[d];
    mk_broadcast_strides(idx, o->ndim, o->shape, a.ist[0]);
    mk_row_strides(o->ndim, o->shape, a.ost);
    a.ix.len[0] = x->shape[axis];
    a.ix.st[0] = x->strides[axis];
    int64_t *st[3] = {a.ost, a.xst, a.ist[0]};
    a.nd = merge_dims(o->ndim, a.shape, 3, st);
    a.n = o->size;
    int rc = gather_run("take_along_axis", &a, 1, &in[1], x, o);
    return rc > 0 ? p->op->eval(p, in, out) : rc;
}

/* ------------------------------------------------------------ scatter */

static int scatter_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int op, narr, bpos;
    bool slice;
    mk_index_dim dims[MK_MAX_NDIM];
    mk_array *x = in[0], *o = out[0];
    if (!mk_xp_scatter(p, &op, &narr, &bpos, dims) || !mk_xp_scatter_slice(p, &slice) || o->size == 0 ||
        narr > MKB_IDX_MAXA || !gpu_type(o->dtype))
        return p->op->eval(p, in, out);
    /* the CPU's evaluator refuses Metal's missing 8-byte scatters on a GPU stream */
    if (narr > 0 && !slice && mk_dtype_size(o->dtype) == 8 && !(o->dtype == MK_COMPLEX64 && op == MK_SCATTER_SUM))
        return p->op->eval(p, in, out);
    mk_array *u = in[narr + 1];
    CUdeviceptr po, pu = 0, win = 0;
    if (u->size == 0) /* nothing to write: the input's copy */
        return init_from(p, o, x, &po, "scatter") < 0 ? -1 : mkb_cuda_wait("scatter", NULL);
    sct_args a;
    memset(&a, 0, sizeof a);
    int rest[MK_MAX_NDIM], nrest = 0;
    int64_t ost[MK_MAX_NDIM];
    mk_row_strides(o->ndim, o->shape, ost);
    for (int d = 0; d < o->ndim; d++) {
        /* a slice repeating a position would repeat targets without index arrays */
        if (dims[d].kind == MK_IDX_SLICE && dims[d].len > 1 && dims[d].step == 0) return p->op->eval(p, in, out);
        if (dims[d].kind == MK_IDX_SLICE) rest[nrest++] = d;
        if (dims[d].kind != MK_IDX_ARRAY) {
            a.t0 += dims[d].start * ost[d];
        } else {
            a.ix.len[dims[d].arr] = o->shape[d];
            a.ix.st[dims[d].arr] = ost[d];
        }
    }
    int nB = u->ndim - nrest, n = 0, np = 0;
    const int64_t *B = u->shape + bpos;
    for (int k = 0; k < narr; k++) mk_broadcast_strides(in[1 + k], nB, B, a.ois[k] + bpos);
    for (int r = 0; r < bpos; r++, n++) {
        int d = rest[r];
        a.oshape[n] = dims[d].len;
        a.ots[n] = dims[d].step * ost[d];
        a.ous[n] = u->strides[n];
    }
    for (int j = 0; j < nB; j++, n++) {
        a.oshape[n] = B[j];
        a.ous[n] = u->strides[n];
    }
    for (int r = bpos; r < nrest; r++, np++) {
        int d = rest[r];
        a.pshape[np] = dims[d].len;
        a.pts[np] = dims[d].step * ost[d];
        a.pus[np] = u->strides[n + np];
    }
    a.rows = prod(n, a.oshape);
    a.post = prod(np, a.pshape);
    a.nB = prod(nB, B);
    /* targets numbered by (pre row, index values): KA index combinations */
    a.KA = 1;
    bool none = false;
    for (int k = narr - 1; k >= 0; k--) {
        a.kmul[k] = a.KA;
        none = none || a.ix.len[k] == 0;
        if (!none && __builtin_mul_overflow(a.KA, a.ix.len[k], &a.KA)) return p->op->eval(p, in, out);
    }
    int64_t nkeys = 0;
    if (narr > 0 && !none && (__builtin_mul_overflow(a.rows / a.nB, a.KA, &nkeys) || a.rows >= UINT32_MAX))
        return p->op->eval(p, in, out);
    int64_t *ost_[3 + MKB_IDX_MAXA] = {a.ots, a.ous}, *pst[2] = {a.pts, a.pus};
    for (int k = 0; k < narr; k++) ost_[2 + k] = a.ois[k];
    a.nout = merge_dims(n, a.oshape, 2 + narr, ost_);
    a.npost = merge_dims(np, a.pshape, 2, pst);
    /* the kernels first: nothing is written before they exist */
    char body[1024];
    static const char *const set_names[2] = {"kw", "ks"}, *const op_names[1] = {"k"};
    CUfunction f[2];
    int rc = op == MK_SCATTER_NONE ? mkb_idx_body(body, sizeof body, "k", MKB_IDX_SCATTER_SET, narr, op, o->dtype)
                                   : mkb_idx_body(body, sizeof body, "k", MKB_IDX_SCATTER_OP, narr, op, o->dtype);
    if (rc < 0) return p->op->eval(p, in, out);
    if (kernels(body, op == MK_SCATTER_NONE ? 2 : 1, op == MK_SCATTER_NONE ? set_names : op_names, f) < 0) return -1;
    for (int k = 0; k < narr; k++)
        if (index_array(in[1 + k], &a.ix, k) < 0) return -1;
    if (mkb_cuda_ptr(u, &pu) < 0 || init_from(p, o, x, &po, "scatter") < 0) return -1;
    if (none) return mkb_cuda_wait("scatter", NULL);
    int64_t work = a.rows * a.post;
    if (op != MK_SCATTER_NONE) {
        void *params[3] = {&a, &po, &pu};
        rc = launch(f[0], work, params, "scatter");
    } else if (narr == 0) {
        void *params[4] = {&a, &po, &pu, &win};
        rc = launch(f[1], work, params, "scatter");
    } else {
        /* the last row writing each target wins, as in the CPU's row order */
        size_t wbytes = (size_t)nkeys * 4;
        if (mkb_cuda_scratch(wbytes, &win) < 0) return -1;
        void *wp[2] = {&a, &win}, *params[4] = {&a, &po, &pu, &win};
        rc = mkb_cuda_check(mkb_cu.cuMemsetD32_v2(win, 0, (size_t)nkeys), "scatter");
        if (rc == 0) rc = launch(f[0], a.rows, wp, "scatter");
        if (rc == 0) rc = launch(f[1], work, params, "scatter");
        if (rc == 0) rc = mkb_cuda_wait("scatter", NULL);
        mkb_cuda_scratch_free(win, wbytes);
        return rc;
    }
    return rc < 0 ? -1 : mkb_cuda_wait("scatter", NULL);
}

static int put_axis_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int axis, op;
    mk_array *x = in[0], *idx = in[1], *upd = in[2], *o = out[0];
    if (!mk_xp_put_axis(p, &axis, &op) || o->size == 0 || !gpu_type(o->dtype) ||
        (mk_dtype_size(o->dtype) == 8 && !(o->dtype == MK_COMPLEX64 && op == MK_SCATTER_SUM)))
        return p->op->eval(p, in, out); /* (8-byte dtypes: the CPU's evaluator raises MLX's error) */
    char body[512];
    static const char *const names[] = {"k"};
    CUfunction f;
    int kind = op == MK_SCATTER_NONE ? MKB_IDX_PUT_SET : MKB_IDX_PUT_OP;
    if (mkb_idx_body(body, sizeof body, "k", kind, 0, op, o->dtype) < 0) return p->op->eval(p, in, out);
    pax_args a;
    memset(&a, 0, sizeof a);
    memcpy(a.shape, o->shape, sizeof a.shape);
    a.shape[axis] = 1;
    mk_row_strides(o->ndim, o->shape, a.ost);
    mk_broadcast_strides(idx, o->ndim, o->shape, a.ist);
    mk_broadcast_strides(upd, o->ndim, o->shape, a.ust);
    a.len = idx->shape[axis];
    a.nax = o->shape[axis];
    a.oax = a.ost[axis];
    a.iax = idx->strides[axis];
    a.uax = upd->shape[axis] == 1 ? 0 : upd->strides[axis];
    a.itype = (int32_t)(idx->dtype - MK_UINT8);
    int64_t *st[3] = {a.ost, a.ist, a.ust};
    a.nd = merge_dims(o->ndim, a.shape, 3, st);
    a.lines = prod(a.nd, a.shape);
    CUdeviceptr po, pu = 0, pi = 0;
    if (kernels(body, 1, names, &f) < 0) return -1;
    if (idx->size > 0 && (mkb_cuda_ptr(idx, &pi) < 0 || mkb_cuda_ptr(upd, &pu) < 0)) return -1;
    a.idx = pi;
    if (init_from(p, o, x, &po, "put_along_axis") < 0) return -1;
    if (idx->size > 0) {
        void *params[3] = {&a, &po, &pu};
        if (launch(f, a.lines, params, "put_along_axis") < 0) return -1;
    }
    return mkb_cuda_wait("put_along_axis", NULL);
}

/* ------------------------------------------------------------ copies */

static int concat_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int axis;
    mk_array *o = out[0];
    char body[512];
    if (!mk_xp_concat(p, &axis) || o->size == 0 ||
        mkb_idx_body(body, sizeof body, "k", MKB_IDX_GATHER, 0, 0, o->dtype) < 0)
        return p->op->eval(p, in, out);
    CUdeviceptr po;
    if (mkb_cuda_enter() < 0 || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0) return -1;
    int64_t pos = 0, esz = (int64_t)mk_dtype_size(o->dtype);
    for (int i = 0; i < p->ninputs; i++) {
        if (in[i]->size > 0 &&
            copy_into(in[i], po + (CUdeviceptr)(pos * o->strides[axis] * esz), o->strides, "concatenate") < 0)
            return -1;
        pos += in[i]->shape[axis];
    }
    return mkb_cuda_wait("concatenate", NULL);
}

static int pad_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int mode;
    int64_t widths[MK_MAX_NDIM][2];
    mk_array *x = in[0], *o = out[0];
    char body[512];
    static const char *const names[] = {"k"};
    CUfunction f;
    if (!mk_xp_pad(p, &mode, widths) || o->size == 0 ||
        mkb_idx_body(body, sizeof body, "k", MKB_IDX_PAD, 0, 0, o->dtype) < 0)
        return p->op->eval(p, in, out);
    pad_args a;
    memset(&a, 0, sizeof a);
    a.n = o->size;
    a.nd = o->ndim;
    a.mode = mode;
    for (int d = 0; d < o->ndim; d++) {
        a.shape[d] = o->shape[d];
        a.xst[d] = x->strides[d];
        a.lo[d] = widths[d][0];
        a.xn[d] = x->shape[d];
    }
    CUdeviceptr po, px = 0, pc = 0;
    if (kernels(body, 1, names, &f) < 0 || (x->size > 0 && mkb_cuda_ptr(x, &px) < 0)) return -1;
    if (p->ninputs > 1 && in[1]->size > 0 && mkb_cuda_ptr(in[1], &pc) < 0) return -1;
    if (mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0) return -1;
    void *params[4] = {&a, &po, &px, &pc};
    if (launch(f, a.n, params, "pad") < 0) return -1;
    return mkb_cuda_wait("pad", NULL);
}

/* ------------------------------------------------------------ creation */

/* "full": a constant (zeros, ones, full with a number) is a memset or a
 * fill of its bytes; full from an array is astype's kernel reading the value
 * broadcast */
static int full_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    unsigned char pat[16];
    char body[512];
    CUdeviceptr po;
    if (o->size == 0 || !gpu_type(o->dtype)) return p->op->eval(p, in, out);
    if (mk_xp_fill(p, pat)) {
        size_t esz = mk_dtype_size(o->dtype), n = (size_t)o->size;
        uint16_t v16;
        uint32_t v32;
        uint64_t v64;
        memcpy(&v16, pat, 2);
        memcpy(&v32, pat, 4);
        memcpy(&v64, pat, 8);
        if (mkb_cuda_enter() < 0 || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0) return -1;
        CUresult r;
        if (esz == 1) r = mkb_cu.cuMemsetD8_v2(po, pat[0], n);
        else if (esz == 2) r = mkb_cu.cuMemsetD16_v2(po, v16, n);
        else if (esz == 4) r = mkb_cu.cuMemsetD32_v2(po, v32, n);
        else if ((uint32_t)v64 == (uint32_t)(v64 >> 32)) r = mkb_cu.cuMemsetD32_v2(po, v32, 2 * n);
        else {
            static const char *const names[] = {"k"};
            CUfunction f;
            if (mkb_idx_body(body, sizeof body, "k", MKB_IDX_FILL, 0, 0, o->dtype) < 0 ||
                kernels(body, 1, names, &f) < 0)
                return -1;
            int64_t cnt = o->size;
            void *params[3] = {&cnt, &po, &v64};
            if (launch(f, cnt, params, "full") < 0) return -1;
            return mkb_cuda_wait("full", NULL);
        }
        if (mkb_cuda_check(r, "full") < 0) return -1;
        return mkb_cuda_wait("full", NULL);
    }
    if (!mk_xp_full(p) || mkb_ew_body(body, sizeof body, "k", MKB_EW_ASTYPE, 0, in[0]->dtype, o->dtype) < 0)
        return p->op->eval(p, in, out);
    CUdeviceptr ptr[2];
    if (mkb_cuda_enter() < 0 || mkb_cuda_ptr(in[0], &ptr[1]) < 0 || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &ptr[0]) < 0)
        return -1;
    int64_t vs[MK_MAX_NDIM];
    mk_broadcast_strides(in[0], o->ndim, o->shape, vs);
    const int64_t *st[2] = {o->strides, vs};
    return mkb_ew_run(body, "full", o->ndim, o->shape, 2, st, ptr);
}

/* integer arange: start + i * step in the type, wrapping (ops_create.c's
 * kernel); floating types accumulate step by step and stay on the CPU */
static int arange_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    uint64_t s0, st;
    char body[512];
    static const char *const names[] = {"k"};
    CUfunction f;
    CUdeviceptr po;
    if (o->size == 0 || !mk_xp_arange_int(p, o->dtype, &s0, &st) ||
        mkb_idx_body(body, sizeof body, "k", MKB_IDX_ARANGE, 0, 0, o->dtype) < 0)
        return p->op->eval(p, in, out);
    if (kernels(body, 1, names, &f) < 0 || mkb_cuda_out(o) < 0 || mkb_cuda_ptr(o, &po) < 0) return -1;
    int64_t cnt = o->size;
    void *params[4] = {&cnt, &po, &s0, &st};
    if (launch(f, cnt, params, "arange") < 0) return -1;
    return mkb_cuda_wait("arange", NULL);
}

/* cumsum, cumprod, cummax, cummin: one thread per line, in the CPU's order
 * (exact: the running value is rounded to the output's type at each step,
 * as there) */
static int scan_gpu(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int op, axis;
    bool rev, incl;
    mk_array *x = in[0], *o = out[0];
    char body[512];
    static const char *const names[] = {"k"};
    CUfunction f;
    if (!mk_xp_scan(p, &op, &axis, &rev, &incl) || o->size == 0 ||
        mkb_idx_body(body, sizeof body, "k", MKB_IDX_SCAN, 0, op, x->dtype) < 0)
        return p->op->eval(p, in, out);
    scan_args a;
    memset(&a, 0, sizeof a);
    memcpy(a.shape, x->shape, sizeof a.shape);
    a.shape[axis] = 1;
    memcpy(a.xst, x->strides, sizeof a.xst);
    mk_row_strides(o->ndim, o->shape, a.ost);
    a.n = x->shape[axis];
    a.xax = x->strides[axis];
    a.oax = a.ost[axis];
    a.rev = rev;
    a.incl = incl;
    int64_t *st[2] = {a.xst, a.ost};
    a.nd = merge_dims(x->ndim, a.shape, 2, st);
    a.lines = prod(a.nd, a.shape);
    CUdeviceptr px, po;
    if (kernels(body, 1, names, &f) < 0 || mkb_cuda_ptr(x, &px) < 0 || mkb_cuda_out(o) < 0 ||
        mkb_cuda_ptr(o, &po) < 0)
        return -1;
    void *params[3] = {&a, &po, &px};
    if (mkb_opkern_launch(f, a.lines, 64, params, "scan") < 0) return -1;
    return mkb_cuda_wait("scan", NULL);
}

const mkb_cuda_opentry mkb_cuda_idx_ops[] = {
    {"scan", scan_gpu},
    {"gather", gather_gpu},       {"take_along_axis", take_axis_gpu}, {"scatter", scatter_gpu},
    {"put_along_axis", put_axis_gpu}, {"concatenate", concat_gpu},    {"pad", pad_gpu},
    {"full", full_gpu},           {"arange", arange_gpu},             {NULL, NULL},
};

/* ------------------------------------------------------------ the compile check */

int mkb_idx_check_kernels(int (*add)(void *g, const char *body, int nk), void *g) {
    char body[1024], name[32];
    int id = 0;
    static const mk_dtype by_size[4] = {MK_UINT8, MK_UINT16, MK_UINT32, MK_UINT64};
#define ADD(nk)                                                                                        \
    do {                                                                                               \
        if (add(g, body, nk) < 0) return -1;                                                           \
    } while (0)
    /* byte movers: gathers and copies, assignments, pads, fills */
    for (int e = 0; e < 4; e++) {
        mk_dtype t = by_size[e];
        for (int narr = 0; narr <= MKB_IDX_MAXA; narr++) {
            snprintf(name, sizeof name, "x%d", id++);
            if (mkb_idx_body(body, sizeof body, name, MKB_IDX_GATHER, narr, 0, t) > 0) ADD(1);
            snprintf(name, sizeof name, "x%d", id++);
            if (mkb_idx_body(body, sizeof body, name, MKB_IDX_SCATTER_SET, narr, 0, t) > 0) ADD(2);
        }
        static const int kinds[3] = {MKB_IDX_PUT_SET, MKB_IDX_PAD, MKB_IDX_FILL};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "x%d", id++);
            if (mkb_idx_body(body, sizeof body, name, kinds[k], 0, 0, t) > 0) ADD(1);
        }
    }
    /* reductions: each (op, dtype) a scatter node accepts, arange's dtypes */
    int64_t two = 2;
    for (int t = 0; t < MK_NDTYPES; t++) {
        if (!gpu_type((mk_dtype)t)) continue;
        mk_array *x = mk_zeros(1, &two, (mk_dtype)t), *i = mk_zeros(1, &two, MK_INT32);
        if (!x || !i) {
            mk_xdecref(x);
            mk_xdecref(i);
            return -1;
        }
        mk_index_dim d = {MK_IDX_ARRAY, 0, 0, 0, 0};
        int rc = 0;
        for (int op = MK_SCATTER_SUM; op <= MK_SCATTER_MIN && rc == 0; op++) {
            mk_array *s = mk_scatter(x, &d, 1, &i, 0, x, (mk_scatter_op)op);
            if (!s) {
                mk_error_clear();
                continue;
            }
            mk_decref(s);
            for (int narr = 0; narr <= MKB_IDX_MAXA && rc == 0; narr++) {
                snprintf(name, sizeof name, "x%d", id++);
                if (mkb_idx_body(body, sizeof body, name, MKB_IDX_SCATTER_OP, narr, op, (mk_dtype)t) > 0)
                    rc = add(g, body, 1);
            }
            snprintf(name, sizeof name, "x%d", id++);
            if (rc == 0 && mkb_idx_body(body, sizeof body, name, MKB_IDX_PUT_OP, 0, op, (mk_dtype)t) > 0)
                rc = add(g, body, 1);
        }
        for (int op = MK_SCAN_SUM; op <= MK_SCAN_LOGADDEXP && rc == 0; op++) {
            mk_array *c = mk_scan((mk_scan_op)op, x, 0, true, false, true);
            mk_dtype in = MK_NDTYPES;
            if (c) {
                mk_prim *cp = atomic_load(&c->prim);
                if (cp) in = cp->inputs[0]->dtype;
                mk_decref(c);
            } else {
                mk_error_clear();
            }
            snprintf(name, sizeof name, "x%d", id++);
            if (in < MK_NDTYPES && mkb_idx_body(body, sizeof body, name, MKB_IDX_SCAN, 0, op, in) > 0)
                rc = add(g, body, 1);
        }
        mk_array *r = rc == 0 ? mk_arange(0, 2, 1, (mk_dtype)t) : NULL;
        if (r) {
            mk_decref(r);
            snprintf(name, sizeof name, "x%d", id++);
            if (mkb_idx_body(body, sizeof body, name, MKB_IDX_ARANGE, 0, 0, (mk_dtype)t) > 0) rc = add(g, body, 1);
        } else {
            mk_error_clear();
        }
        mk_decref(x);
        mk_decref(i);
        if (rc < 0) return -1;
    }
#undef ADD
    return 0;
}
