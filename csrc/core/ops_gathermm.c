/* gather_mm's own primitive (MLX's GatherMM): out[i] = a[lhs[i]] @ b[rhs[i]]
 * for every position i of the (broadcast) index arrays, where a[j] and b[j]
 * are the matrices of a and b with their batch dims flattened row-major.
 *
 * The evaluator groups the pairs by their b matrix: the a matrices of one
 * group are stacked into one (P*M, K) block and multiplied with that b
 * matrix (read in place, any batch strides including a broadcast's 0, when
 * BLAS can read its layout) by OpenBLAS gemm (sgemm; dgemm for float64), so
 * a b matrix used by many pairs (the experts of a mixture of experts) is
 * never copied out per pair as the composition take + matmul did. As for
 * matmul, the groups are cut into blocks small enough for OpenBLAS to run
 * on the calling thread and the blocks go over mkpy's pool (one group alone
 * goes to OpenBLAS's threads whole). float16/bfloat16 compute in float32 and
 * round once. Indices out of range raise (MLX does not check them).
 *
 * Rules, beside the evaluator: vjp as MLX's (gradients of a and b are
 * gather_mm's of the cotangent scattered back with scatter_add; indices
 * raise), jvp (bilinear: gather_mm(ta, b) + gather_mm(a, tb)) and vmap
 * (a batched operand's vmap axis is folded into its matrices and the indices
 * are offset per vmap position); MLX's GatherMM has the vjp only. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "ops_quant.h"
#include "pool.h"
#include "transforms.h"
#include "types.h"

typedef struct {
    bool left_sorted, right_sorted;
} gmm_params;

static int64_t batch_count(const mk_array *x) {
    int64_t n = 1;
    for (int d = 0; d < x->ndim - 2; d++) n *= x->shape[d];
    return n;
}

/* x's buffer on the host (a GPU stream's input is copied down here once:
 * mk_data moves it), addressed from the buffer's start like the offsets below */
static const char *host_base(const mk_array *x) {
    return (const char *)mk_data(x) - x->offset * (int64_t)mk_dtype_size(x->dtype);
}

/* element offset of matrix j of x (batch dims row-major) */
static int64_t matrix_offset(const mk_array *x, int64_t j) {
    int64_t off = x->offset;
    for (int d = x->ndim - 3; d >= 0; d--) {
        off += (j % x->shape[d]) * x->strides[d];
        j /= x->shape[d];
    }
    return off;
}

/* rows x cols of x's matrix at element offset `off`, converted to ct, dense into dst */
static void copy_matrix(const mk_array *x, int64_t off, mk_dtype ct, void *dst) {
    int64_t rows = x->shape[x->ndim - 2], cols = x->shape[x->ndim - 1];
    int64_t s0 = x->strides[x->ndim - 2], s1 = x->strides[x->ndim - 1];
    size_t isz = mk_dtype_size(x->dtype), osz = mk_dtype_size(ct);
    const char *base = host_base(x);
    for (int64_t r = 0; r < rows; r++)
        mk_cast_table[x->dtype][ct](base + (off + r * s0) * (int64_t)isz, s1, (char *)dst + r * cols * (int64_t)osz, 1,
                                    cols);
}

/* the elements of a uint32 array x in row-major order, into dst */
static void read_indices(const mk_array *x, uint32_t *dst) {
    const uint32_t *base = (const uint32_t *)(const void *)host_base(x);
    for (int64_t i = 0; i < x->size; i++) {
        int64_t off = x->offset, j = i;
        for (int d = x->ndim - 1; d >= 0; d--) {
            off += (j % x->shape[d]) * x->strides[d];
            j /= x->shape[d];
        }
        dst[i] = base[off];
    }
}

/* Can BLAS read x's matrices in place (x of dtype ct)? Sets trans and ld. */
static bool blas_layout(const mk_array *x, mk_dtype ct, bool *trans, int64_t *ld) {
    if (x->dtype != ct) return false;
    int64_t rows = x->shape[x->ndim - 2], cols = x->shape[x->ndim - 1];
    int64_t s0 = x->strides[x->ndim - 2], s1 = x->strides[x->ndim - 1];
    if ((s1 == 1 || cols == 1) && (rows == 1 || s0 >= cols)) {
        *trans = false;
        *ld = rows == 1 ? (cols > 0 ? cols : 1) : s0;
        return *ld >= 1 && *ld <= INT32_MAX;
    }
    if ((s0 == 1 || rows == 1) && (cols == 1 || s1 >= rows)) {
        *trans = true;
        *ld = cols == 1 ? (rows > 0 ? rows : 1) : s1;
        return *ld >= 1 && *ld <= INT32_MAX;
    }
    return false;
}

static void gemm(mk_dtype ct, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                 const void *B, int64_t ldb, void *C, int64_t ldc) {
    enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    if (ct == MK_FLOAT64)
        cblas_dgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, 1.0, A, (int)lda, B, (int)ldb, 0.0, C, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, TA, TB, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, 0.0f, C,
                    (int)ldc);
}

/* As matmul (ops_linalg.c): OpenBLAS runs a gemm of fewer multiply-adds
 * than this on the calling thread, so blocks this small go over mkpy's pool
 * and pool threads never start OpenBLAS threads. */
#define GEMM_ALONE 262144

typedef struct {
    mk_dtype ct;
    size_t csz;
    int64_t M, N, K;
    const char *as; /* the stacked a matrices, pairs in group order, (npairs * M, K) */
    char *cs;       /* the products, same order, (npairs * M, N) */
    const char *bbase;
    bool tb;
    int64_t ldb;
    const int64_t *boffs;  /* per group: element offset of its b matrix */
    const int64_t *gstart; /* per group: first pair (in group order) */
    const int64_t *items; /* per item: group, row0, row1, col0, col1 (rows of the group's stack) */
} gmm_run;

static void run_item(const gmm_run *r, const int64_t *it) {
    int64_t g = it[0], r0 = it[1], r1 = it[2], c0 = it[3], c1 = it[4];
    int64_t row_base = r->gstart[g] * r->M; /* first stacked row of the group */
    int64_t es = (int64_t)r->csz;
    const char *A = r->as + (row_base + r0) * r->K * es;
    const char *B = r->bbase + (r->boffs[g] + (r->tb ? c0 * r->ldb : c0)) * es;
    char *C = r->cs + ((row_base + r0) * r->N + c0) * es;
    gemm(r->ct, false, r->tb, r1 - r0, c1 - c0, r->K, A, r->K, B, r->ldb, C, r->N);
}

static void run_items(void *ctx, int64_t begin, int64_t end) {
    const gmm_run *r = ctx;
    for (int64_t i = begin; i < end; i++) run_item(r, r->items + 5 * i);
}

/* Blocks of one group's rows x N product for the pool (as matmul's choice):
 * small enough for OpenBLAS's calling thread, no thinner than 32 unless the
 * matrix is. Returns the steps. */
static void block_steps(int64_t R, int64_t N, int64_t K, int64_t *rstep, int64_t *nstep) {
    *rstep = R;
    *nstep = N;
    if (R * N * K <= GEMM_ALONE) return;
    int64_t area = GEMM_ALONE / K, side = 1;
    if (area < 1) area = 1;
    while ((side + 1) * (side + 1) <= area) side++;
    if (R <= 32)
        *nstep = area / R;
    else if (N <= 32)
        *rstep = area / N;
    else {
        *rstep = side;
        *nstep = area / side;
    }
    int64_t rmin = R < 32 ? R : 32, nmin = N < 32 ? N : 32;
    if (*rstep < rmin) *rstep = rmin;
    if (*nstep < nmin) *nstep = nmin;
    if (*rstep > R) *rstep = R;
    if (*nstep > N) *nstep = N;
}

static int gmm_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    const mk_array *a = in[0], *b = in[1], *li = in[2], *ri = in[3];
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    int64_t M = a->shape[a->ndim - 2], K = a->shape[a->ndim - 1], N = b->shape[b->ndim - 1];
    int64_t npairs = li->size, na = batch_count(a), nb = batch_count(b);
    if (o->size == 0) return 0;
    mk_dtype ct = o->dtype == MK_FLOAT64 ? MK_FLOAT64 : MK_FLOAT32;
    size_t csz = mk_dtype_size(ct), osz = mk_dtype_size(o->dtype);
    if (K == 0) {
        memset(mk_data(o), 0, (size_t)o->size * osz);
        return 0;
    }
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) {
        mk_error_set(MK_ERR_VALUE, "[gather_mm] Matrix dimensions beyond 32 bits are not supported by BLAS.");
        return -1;
    }
    int rc = -1;
    uint32_t *lp = malloc((size_t)npairs * sizeof *lp), *rp = malloc((size_t)npairs * sizeof *rp);
    int64_t *gstart = calloc((size_t)nb + 1, sizeof *gstart), *order = malloc((size_t)npairs * sizeof *order);
    int64_t *boffs = malloc((size_t)nb * sizeof *boffs), *items = NULL;
    char *as = malloc((size_t)(npairs * M * K) * csz), *cs = malloc((size_t)(npairs * M * N) * csz), *bs = NULL;
    if (!lp || !rp || !gstart || !order || !boffs || !as || !cs) {
        mk_nomem();
        goto done;
    }
    /* the index arrays (uint32, one shape, any strides) read densely */
    read_indices(li, lp);
    read_indices(ri, rp);
    for (int64_t i = 0; i < npairs; i++) {
        if (lp[i] >= (uint64_t)na || rp[i] >= (uint64_t)nb) {
            bool left = lp[i] >= (uint64_t)na;
            mk_error_set(MK_ERR_INDEX, "[gather_mm] %s index %u is out of range for %lld matrices.",
                         left ? "lhs" : "rhs", left ? lp[i] : rp[i], (long long)(left ? na : nb));
            goto done;
        }
    }
    /* pairs ordered by their b matrix (a stable counting sort) */
    for (int64_t i = 0; i < npairs; i++) gstart[rp[i] + 1]++;
    for (int64_t j = 0; j < nb; j++) gstart[j + 1] += gstart[j];
    for (int64_t j = 0; j < nb; j++) boffs[j] = gstart[j]; /* fill cursor for now */
    for (int64_t i = 0; i < npairs; i++) order[boffs[rp[i]]++] = i;
    /* the a matrices stacked in that order, in ct */
    for (int64_t q = 0; q < npairs; q++)
        copy_matrix(a, matrix_offset(a, lp[order[q]]), ct, as + q * M * K * (int64_t)csz);
    /* b read in place when BLAS can, else packed densely in ct */
    bool tb = false;
    int64_t ldb = N;
    const char *bbase;
    if (blas_layout(b, ct, &tb, &ldb)) {
        bbase = host_base(b);
        for (int64_t j = 0; j < nb; j++) boffs[j] = matrix_offset(b, j);
    } else {
        tb = false;
        ldb = N;
        if (!(bs = malloc((size_t)(nb * K * N) * csz))) {
            mk_nomem();
            goto done;
        }
        for (int64_t j = 0; j < nb; j++) {
            boffs[j] = j * K * N;
            if (gstart[j + 1] > gstart[j]) copy_matrix(b, matrix_offset(b, j), ct, bs + j * K * N * (int64_t)csz);
        }
        bbase = bs;
    }
    /* the blocks: one group alone goes to OpenBLAS's threads whole */
    int64_t ngroups = 0, nitems = 0;
    for (int64_t j = 0; j < nb; j++)
        if (gstart[j + 1] > gstart[j]) {
            int64_t R = (gstart[j + 1] - gstart[j]) * M, rs, ns;
            block_steps(R, N, K, &rs, &ns);
            nitems += ((R + rs - 1) / rs) * ((N + ns - 1) / ns);
            ngroups++;
        }
    bool whole = ngroups == 1;
    if (whole) nitems = 1;
    if (!(items = malloc((size_t)nitems * 5 * sizeof *items))) {
        mk_nomem();
        goto done;
    }
    int64_t k = 0;
    for (int64_t j = 0; j < nb; j++) {
        if (gstart[j + 1] == gstart[j]) continue;
        int64_t R = (gstart[j + 1] - gstart[j]) * M, rs = R, ns = N;
        if (!whole) block_steps(R, N, K, &rs, &ns);
        for (int64_t r0 = 0; r0 < R; r0 += rs)
            for (int64_t c0 = 0; c0 < N; c0 += ns) {
                int64_t *it = items + 5 * k++;
                it[0] = j;
                it[1] = r0;
                it[2] = r0 + rs < R ? r0 + rs : R;
                it[3] = c0;
                it[4] = c0 + ns < N ? c0 + ns : N;
            }
    }
    gmm_run run = {ct, csz, M, N, K, as, cs, bbase, tb, ldb, boffs, gstart, items};
    if (whole) {
        run_items(&run, 0, 1);
    } else {
        /* each item does about (rows * cols * K) work; aim for chunks of >= 32768 */
        int64_t work = M * N * K * npairs / (nitems > 0 ? nitems : 1);
        mk_parallel_for(nitems, (32768 + work) / (work + 1), run_items, &run);
    }
    /* the products back to each pair's place, in the output dtype */
    for (int64_t q = 0; q < npairs; q++)
        mk_cast_table[ct][o->dtype](cs + q * M * N * (int64_t)csz, 1,
                                    (char *)mk_data(o) + order[q] * M * N * (int64_t)osz, 1, M * N);
    rc = 0;
done:
    free(lp);
    free(rp);
    free(gstart);
    free(order);
    free(boffs);
    free(items);
    free(as);
    free(cs);
    free(bs);
    return rc;
}

static int gmm_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int gmm_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int gmm_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);

static const mk_opdef gmm_def = {"GatherMM", gmm_eval, NULL, gmm_vjp, gmm_jvp, gmm_vmap, false};

mk_array *mk_gather_mm_node(mk_array *a, mk_array *b, mk_array *lhs, mk_array *rhs, bool left_sorted,
                            bool right_sorted) {
    /* lhs and rhs: integral, one shape; a and b: one floating dtype, >= 2-D */
    mk_array *l = mk_as_dtype(lhs, MK_UINT32), *r = l ? mk_as_dtype(rhs, MK_UINT32) : NULL;
    mk_array *lc = l, *rc = r, *res = NULL;
    gmm_params *gp = rc ? malloc(sizeof *gp) : NULL;
    if (rc && !gp) mk_nomem();
    if (gp) {
        *gp = (gmm_params){left_sorted, right_sorted};
        int64_t shape[MK_MAX_NDIM];
        int nd = lc->ndim + 2;
        if (nd > MK_MAX_NDIM) {
            free(gp);
            mk_error_set(MK_ERR_VALUE, "[gather_mm] Too many dimensions.");
        } else {
            memcpy(shape, lc->shape, lc->ndim * sizeof *shape);
            shape[nd - 2] = a->shape[a->ndim - 2];
            shape[nd - 1] = b->shape[b->ndim - 1];
            mk_array *ins[4] = {a, b, lc, rc};
            res = mk_node(&gmm_def, gp, a->dtype, nd, shape, 4, ins);
        }
    }
    mk_xdecref(l);
    mk_xdecref(r);
    return res;
}

/* ------------------------------------------------------------- rules */

/* arange over the shape of idx, as uint32 (the identity index for each pair) */
static mk_array *pair_arange(mk_arena *A, const mk_array *idx) {
    mk_array *r = mk_ar_keep(A, mk_arange(0, (double)idx->size, 1, MK_UINT32));
    return mk_ar_reshape(A, r, idx->ndim, idx->shape);
}

/* zeros shaped like x with its batch dims flattened, plus upd (S + matrix)
 * scatter-added at the matrices idx (shape S); then x's shape */
static mk_array *scatter_back(mk_arena *A, const mk_array *x, mk_array *idx, mk_array *upd) {
    if (!upd) return NULL;
    int64_t fl[3] = {batch_count(x), x->shape[x->ndim - 2], x->shape[x->ndim - 1]};
    mk_array *z = mk_ar_keep(A, mk_zeros(3, fl, x->dtype));
    if (!z) return NULL;
    mk_index_dim dims[3] = {{MK_IDX_ARRAY, 0, 0, 0, 0}, {MK_IDX_SLICE, 0, 0, 1, fl[1]}, {MK_IDX_SLICE, 0, 0, 1, fl[2]}};
    mk_array *s = mk_ar_keep(A, mk_scatter(z, dims, 1, &idx, 0, upd, MK_SCATTER_SUM));
    return mk_ar_reshape(A, s, x->ndim, x->shape);
}

static int gmm_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    mk_array *a = p->inputs[0], *b = p->inputs[1], *li = p->inputs[2], *ri = p->inputs[3], *cot = cots[0];
    if (want[2] || want[3]) {
        mk_error_set(MK_ERR_VALUE, "[GatherMM] Cannot calculate VJP with respect to indices. "
                                   "Use stop_gradient on indices to stop gradients from being computed.");
        return -1;
    }
    grads[0] = grads[1] = grads[2] = grads[3] = NULL;
    if (!cot) return 0;
    mk_arena A = {0};
    int rc = 0;
    if (want[0]) {
        /* cot[i] @ b[rhs[i]]^T, summed into a's matrix lhs[i] */
        mk_array *bt = mk_ar_keep(&A, mk_swapaxes(b, -1, -2));
        mk_array *ids = pair_arange(&A, li);
        mk_array *g = bt && ids ? mk_ar_keep(&A, mk_gather_mm_node(cot, bt, ids, ri, false, false)) : NULL;
        grads[0] = mk_ar_out(scatter_back(&A, a, li, g));
        if (!grads[0]) rc = -1;
    }
    if (!rc && want[1]) {
        /* a[lhs[i]]^T @ cot[i], summed into b's matrix rhs[i] */
        mk_array *at = mk_ar_keep(&A, mk_swapaxes(a, -1, -2));
        mk_array *ids = pair_arange(&A, li);
        mk_array *g = at && ids ? mk_ar_keep(&A, mk_gather_mm_node(at, cot, li, ids, false, false)) : NULL;
        grads[1] = mk_ar_out(scatter_back(&A, b, ri, g));
        if (!grads[1]) rc = -1;
    }
    mk_ar_free(&A);
    if (rc) {
        mk_xdecref(grads[0]);
        grads[0] = NULL;
    }
    return rc;
}

static int gmm_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    mk_array *a = p->inputs[0], *b = p->inputs[1], *li = p->inputs[2], *ri = p->inputs[3];
    out[0] = NULL;
    mk_arena A = {0};
    mk_array *t = NULL;
    if (tans[0]) t = mk_ar_keep(&A, mk_gather_mm_node(tans[0], b, li, ri, false, false));
    if (tans[1]) {
        mk_array *u = mk_ar_keep(&A, mk_gather_mm_node(a, tans[1], li, ri, false, false));
        t = t ? mk_ar_add(&A, t, u) : u;
    }
    out[0] = mk_ar_out(t);
    mk_ar_free(&A);
    return (tans[0] || tans[1]) && !out[0] ? -1 : 0;
}

/* A batched operand x (vmap axis ax, size V): its matrices become V * n
 * (the vmap axis first), and the index for vmap position v is v * n + idx. */
static int gmm_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    mk_arena A = {0};
    mk_array *ops[2] = {in[0], in[1]}, *idx[2] = {in[2], in[3]};
    int64_t V = -1;
    for (int k = 0; k < 4; k++)
        if (axes[k] >= 0) V = in[k]->shape[axes[k]];
    /* the indices with the vmap axis first (size V, or 1 when unbatched) */
    for (int k = 0; k < 2; k++) {
        mk_array *x = idx[k];
        if (axes[2 + k] >= 0)
            x = mk_ar_keep(&A, mk_moveaxis(x, axes[2 + k], 0));
        else {
            int ax0 = 0;
            x = mk_ar_keep(&A, mk_expand_dims(x, 1, &ax0));
        }
        idx[k] = x ? mk_ar_cast(&A, x, MK_UINT32) : NULL;
    }
    for (int k = 0; k < 2 && idx[0] && idx[1]; k++) {
        if (axes[k] < 0) continue;
        mk_array *x = mk_ar_keep(&A, mk_moveaxis(in[k], axes[k], 0));
        if (!x) {
            idx[0] = NULL;
            break;
        }
        int64_t n = 1;
        for (int d = 1; d < x->ndim - 2; d++) n *= x->shape[d];
        int64_t fl[3] = {V * n, x->shape[x->ndim - 2], x->shape[x->ndim - 1]};
        ops[k] = mk_ar_reshape(&A, x, 3, fl);
        /* v * n, shaped (V, 1, ..., 1) against the index */
        int64_t vs[MK_MAX_NDIM];
        int nd = idx[k]->ndim;
        for (int d = 0; d < nd; d++) vs[d] = d == 0 ? V : 1;
        mk_array *v = mk_ar_keep(&A, mk_arange(0, (double)(V * n), (double)n, MK_UINT32));
        idx[k] = mk_ar_add(&A, idx[k], mk_ar_reshape(&A, v, nd, vs));
        if (!ops[k] || !idx[k]) {
            idx[0] = NULL;
            break;
        }
    }
    int rc = -1;
    if (idx[0] && idx[1]) {
        int64_t sh[MK_MAX_NDIM];
        int n = mk_broadcast_shapes(idx[0]->ndim, idx[0]->shape, idx[1]->ndim, idx[1]->shape, sh);
        if (n >= 0) {
            sh[0] = V;
            mk_array *l = mk_ar_broadcast(&A, idx[0], n, sh), *r = mk_ar_broadcast(&A, idx[1], n, sh);
            if (l && r) {
                const gmm_params *gp = p->params;
                outs[0] = mk_gather_mm_node(ops[0], ops[1], l, r, gp->left_sorted, gp->right_sorted);
                out_axes[0] = 0;
                rc = outs[0] ? 0 : -1;
            }
        }
    }
    mk_ar_free(&A);
    return rc;
}
