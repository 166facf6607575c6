/* Linear algebra: matmul, addmm, inner, outer and tensordot.
 *
 * One node ("matmul") computes out = alpha * (a @ b) + beta * c for every
 * batch index through OpenBLAS's cblas. a is (..., M, K), b is (..., K, N)
 * and their batch dims broadcast through zero strides, so no broadcast
 * copies are made. Each matrix goes to BLAS as it lies in memory when BLAS
 * can read it: a row-major matrix (unit column stride) is NoTrans with its
 * row stride as leading dimension, a column-major one (a transposed view) is
 * Trans; only other layouts are copied, and then only the matrices that are
 * not broadcast copies of each other. float16 and bfloat16 are converted to
 * float32, multiplied by sgemm and rounded once (MLX's CPU gemm accumulates
 * them in float too). A vector operand (M == 1 or N == 1) goes through gemv,
 * which reads the matrix once instead of packing it. When b is the same for
 * every batch and a's batches follow each other in memory, the batch folds
 * into the rows of one gemm (MLX flattens a the same way).
 *
 * Threads: a single product goes to OpenBLAS, which threads it itself (its
 * threaded gemm shares packed panels between threads, which tiling it over
 * mkpy's pool does not). A batch of products is spread over the pool, in
 * blocks small enough that OpenBLAS runs each on the calling thread, so its
 * threads and the pool's never nest. Measured on 16 cores against a loop of
 * OpenBLAS-threaded calls, this is 4-8x faster for batches of small
 * products (2000 x 16^3, 500 x 64^3, 32 x 128^3) and batched matrix-vector
 * products; products too large in K for such blocks stay with OpenBLAS.
 *
 * addmm, inner, outer and tensordot are composed as MLX composes them, so
 * their dtype rules, shapes and error messages follow. */
#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iter.h"
#include "ops.h"
#include "transforms.h"
#include "compile.h"
#include "pool.h"
#include "types.h"

/* ------------------------------------------------------------ BLAS calls */

/* The dtype BLAS computes in: half types go through float32. */
static mk_dtype compute_dtype(mk_dtype t) { return t == MK_FLOAT16 || t == MK_BFLOAT16 ? MK_FLOAT32 : t; }

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* OpenBLAS uses as many threads as mkpy's pool unless told otherwise. */
static void blas_init(void) {
    if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("OMP_NUM_THREADS")) openblas_set_num_threads(mk_pool_threads());
}

/* Row-major C[M,N] = alpha * op(A) op(B) + beta * C. */
static void blas_gemm(mk_dtype ct, bool ta, bool tb, int M, int N, int K, float alpha, const void *A, int lda,
                      const void *B, int ldb, float beta, void *C, int ldc) {
    enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
    switch (ct) {
    case MK_FLOAT32: cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); break;
    case MK_FLOAT64:
        cblas_dgemm(CblasRowMajor, TA, TB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        break;
    default: {
        mk_c64 al = alpha, be = beta;
        cblas_cgemm(CblasRowMajor, TA, TB, M, N, K, &al, A, lda, B, ldb, &be, C, ldc);
    }
    }
}

/* y = alpha * op(A) x + beta * y for a row-major rows x cols matrix A. */
static void blas_gemv(mk_dtype ct, bool trans, int rows, int cols, float alpha, const void *A, int lda,
                      const void *x, int incx, float beta, void *y) {
    enum CBLAS_TRANSPOSE T = trans ? CblasTrans : CblasNoTrans;
    switch (ct) {
    case MK_FLOAT32: cblas_sgemv(CblasRowMajor, T, rows, cols, alpha, A, lda, x, incx, beta, y, 1); break;
    case MK_FLOAT64: cblas_dgemv(CblasRowMajor, T, rows, cols, alpha, A, lda, x, incx, beta, y, 1); break;
    default: {
        mk_c64 al = alpha, be = beta;
        cblas_cgemv(CblasRowMajor, T, rows, cols, &al, A, lda, x, incx, &be, y, 1);
    }
    }
}

/* How BLAS can read an R x C matrix with row stride rs and column stride cs
 * (elements): row-major (*trans false) or column-major (*trans true) with
 * leading dimension *ld. False when it has to be copied first. The stride
 * of a dim of size 1 does not matter. */
static bool blas_layout(int64_t R, int64_t C, int64_t rs, int64_t cs, bool *trans, int64_t *ld) {
    if ((C <= 1 || cs == 1) && (R <= 1 || (rs >= C && rs >= 1))) {
        *trans = false;
        *ld = R <= 1 ? (C > 1 ? C : 1) : rs;
    } else if ((R <= 1 || rs == 1) && (C <= 1 || (cs >= R && cs >= 1))) {
        *trans = true;
        *ld = C <= 1 ? (R > 1 ? R : 1) : cs;
    } else {
        return false;
    }
    return *ld <= INT_MAX;
}

/* A vector of n elements with stride s, as BLAS's incx. */
static bool blas_vector(int64_t n, int64_t s, int64_t *inc) {
    *inc = n <= 1 ? 1 : s;
    return *inc >= 1 && *inc <= INT_MAX;
}

/* ------------------------------------------------------ strided conversion */

typedef struct {
    mk_cast_fn fn;
    const char *src;
    char *dst;
    size_t isz, osz;
} cast_ctx;

static void cast_rows(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    cast_ctx *u = c;
    u->fn(u->src + off[1] * u->isz, st[1], u->dst + off[0] * u->osz, st[0], n);
}

/* dst[index . ds] = (to)src[index . ss] over an ndim-dim shape, on the pool. */
static void cast_strided(mk_dtype from, const void *src, const int64_t *ss, mk_dtype to, void *dst,
                         const int64_t *ds, int ndim, const int64_t *shape) {
    cast_ctx u = {mk_cast_table[from][to], src, dst, mk_dtype_size(from), mk_dtype_size(to)};
    const int64_t *strides[2] = {ds, ss};
    mk_iter it;
    mk_iter_init(&it, ndim, shape, 2, strides);
    mk_iter_run(&it, MK_GRAIN, cast_rows, &u);
}

/* ------------------------------------------------------------- operands */

/* One input as the evaluator sees it: its matrices, and where each batch
 * index finds its matrix. */
typedef struct {
    const char *data;        /* element (0, ..., 0) */
    int64_t bs[MK_MAX_NDIM]; /* strides over the output's batch dims; 0 where broadcast */
    int64_t rs, cs;          /* row and column strides of each matrix */
    mk_buffer *tmp;          /* the packed copy, when one was made */
} operand;

static void operand_init(const mk_array *x, int nb, const int64_t *out_shape, operand *op) {
    int64_t shape[MK_MAX_NDIM], s[MK_MAX_NDIM];
    memcpy(shape, out_shape, (size_t)nb * sizeof *shape);
    shape[nb] = x->shape[x->ndim - 2];
    shape[nb + 1] = x->shape[x->ndim - 1];
    mk_broadcast_strides(x, nb + 2, shape, s);
    op->data = mk_data(x);
    memcpy(op->bs, s, (size_t)nb * sizeof *s);
    op->rs = s[nb];
    op->cs = s[nb + 1];
    op->tmp = NULL;
}

/* Copies x's distinct matrices (broadcast batch dims once) into a dense
 * buffer of dtype ct, row-major, or column-major when x is laid out that
 * way (so the copy runs along memory). Returns 0 or -1. */
static int operand_pack(const mk_array *x, mk_dtype ct, int nb, const int64_t *out_shape, operand *op) {
    int64_t R = x->shape[x->ndim - 2], C = x->shape[x->ndim - 1];
    int64_t shape[MK_MAX_NDIM], ss[MK_MAX_NDIM], ds[MK_MAX_NDIM];
    bool col = R > 1 && C > 1 && op->rs == 1 && op->cs != 1;
    for (int d = 0; d < nb; d++) {
        shape[d] = op->bs[d] == 0 ? 1 : out_shape[d];
        ss[d] = op->bs[d];
    }
    shape[nb] = R;
    shape[nb + 1] = C;
    ss[nb] = op->rs;
    ss[nb + 1] = op->cs;
    ds[nb] = col ? 1 : C;
    ds[nb + 1] = col ? R : 1;
    int64_t run = R * C;
    for (int d = nb - 1; d >= 0; d--) {
        ds[d] = shape[d] == 1 ? 0 : run;
        run *= shape[d];
    }
    mk_buffer *buf = mk_buffer_alloc((size_t)run * mk_dtype_size(ct));
    if (!buf) return -1;
    cast_strided(x->dtype, op->data, ss, ct, buf->data, ds, nb + 2, shape);
    op->data = buf->data;
    memcpy(op->bs, ds, (size_t)nb * sizeof *ds);
    op->rs = ds[nb];
    op->cs = ds[nb + 1];
    op->tmp = buf;
    return 0;
}

/* --------------------------------------------------------------- the plan */

enum { MODE_GEMM, MODE_GEMV_A, MODE_GEMV_B };

typedef struct {
    mk_dtype ct;
    size_t esz;
    int mode;
    int64_t M, N, K;
    /* matrix layouts of a and b for this mode (vector strides in lda/ldb) */
    int64_t ars, acs, brs, bcs;
    bool ta, tb, force_gemm;
    int64_t lda, ldb;
    float alpha, beta;
    const operand *a, *b;
    char *w; /* the output, or its float32 stand-in */
    int nb;
    const int64_t *bshape;
    int64_t nbatch;
} plan;

/* Picks the calls for the current M, N and strides; false if an operand
 * cannot be read by them as it is. *a_ok / *b_ok tell which. */
static bool plan_layouts(plan *p, bool *a_ok, bool *b_ok) {
    p->mode = p->force_gemm ? MODE_GEMM : p->M == 1 ? MODE_GEMV_A : p->N == 1 ? MODE_GEMV_B : MODE_GEMM;
    p->ta = p->tb = false;
    if (p->mode == MODE_GEMV_A)
        *a_ok = blas_vector(p->K, p->acs, &p->lda);
    else
        *a_ok = blas_layout(p->M, p->K, p->ars, p->acs, &p->ta, &p->lda);
    if (p->mode == MODE_GEMV_B)
        *b_ok = blas_vector(p->K, p->brs, &p->ldb);
    else
        *b_ok = blas_layout(p->K, p->N, p->brs, p->bcs, &p->tb, &p->ldb);
    return *a_ok && *b_ok;
}

/* One block of one product: rows [m0, m1) and columns [n0, n1) of
 * w (M x N, dense) = alpha * a @ b + beta * w. */
static void run_block(const plan *p, const char *a, const char *b, char *w, int64_t m0, int64_t m1, int64_t n0,
                      int64_t n1) {
    int64_t es = (int64_t)p->esz;
    int M = (int)(m1 - m0), N = (int)(n1 - n0), K = (int)p->K, lda = (int)p->lda, ldb = (int)p->ldb;
    w += (m0 * p->N + n0) * es;
    switch (p->mode) {
    case MODE_GEMM:
        a += (p->ta ? m0 : m0 * p->lda) * es;
        b += (p->tb ? n0 * p->ldb : n0) * es;
        blas_gemm(p->ct, p->ta, p->tb, M, N, K, p->alpha, a, lda, b, ldb, p->beta, w, (int)p->N);
        break;
    case MODE_GEMV_A: /* the row a (stride lda) times columns [n0, n1) of b */
        b += (p->tb ? n0 * p->ldb : n0) * es;
        if (p->tb)
            blas_gemv(p->ct, false, N, K, p->alpha, b, ldb, a, lda, p->beta, w);
        else
            blas_gemv(p->ct, true, K, N, p->alpha, b, ldb, a, lda, p->beta, w);
        break;
    default: /* rows [m0, m1) of a times the column b (stride ldb) */
        a += (p->ta ? m0 : m0 * p->lda) * es;
        if (p->ta)
            blas_gemv(p->ct, true, K, M, p->alpha, a, lda, b, ldb, p->beta, w);
        else
            blas_gemv(p->ct, false, M, K, p->alpha, a, lda, b, ldb, p->beta, w);
        break;
    }
}

/* The work is a list of blocks: batch index, then a grid of row blocks
 * (mstep rows each) and column blocks (nstep columns each). */
typedef struct {
    const plan *p;
    int64_t mstep, nstep, mblocks, nblocks;
} grid;

static void run_blocks(void *c, int64_t begin, int64_t end) {
    const grid *g = c;
    const plan *p = g->p;
    int64_t per = g->mblocks * g->nblocks, es = (int64_t)p->esz;
    for (int64_t i = begin; i < end; i++) {
        int64_t batch = i / per, r = i % per, bi = r / g->nblocks, bj = r % g->nblocks, rem = batch, ao = 0, bo = 0;
        for (int d = p->nb - 1; d >= 0; d--) {
            int64_t k = rem % p->bshape[d];
            rem /= p->bshape[d];
            ao += k * p->a->bs[d];
            bo += k * p->b->bs[d];
        }
        int64_t m0 = bi * g->mstep, n0 = bj * g->nstep;
        run_block(p, p->a->data + ao * es, p->b->data + bo * es, p->w + batch * p->M * p->N * es, m0,
                  m0 + g->mstep < p->M ? m0 + g->mstep : p->M, n0, n0 + g->nstep < p->N ? n0 + g->nstep : p->N);
    }
}

/* When b is the same matrix for every batch and a's batches follow each
 * other at a constant row stride, the batch folds into the rows of a
 * single product. */
static bool fold_batch(plan *p) {
    if (p->nbatch <= 1 || p->nbatch * p->M > INT_MAX) return false;
    for (int d = 0; d < p->nb; d++)
        if (p->b->bs[d] != 0 && p->bshape[d] != 1) return false;
    /* the step between consecutive batches */
    int64_t step = p->M > 1 ? p->M * p->ars : -1, run = 1;
    for (int d = p->nb - 1; d >= 0; d--) {
        if (p->bshape[d] == 1) continue;
        if (step < 0) step = p->a->bs[d]; /* M == 1: the rows are the batches */
        if (p->a->bs[d] != step * run) return false;
        run *= p->bshape[d];
    }
    plan q = *p;
    q.ars = p->M > 1 ? p->ars : step;
    q.M = p->M * p->nbatch;
    bool a_ok, b_ok;
    if (!plan_layouts(&q, &a_ok, &b_ok) || q.ta) return false;
    q.nbatch = 1;
    q.nb = 0;
    *p = q;
    return true;
}

/* w = beta * w (beta != 0) or 0, for K == 0. */
static void scale(mk_dtype ct, char *w, int64_t n, float beta) {
    if (beta == 0) {
        memset(w, 0, (size_t)n * mk_dtype_size(ct));
        return;
    }
    if (beta == 1) return;
    switch (ct) {
    case MK_FLOAT32:
        for (int64_t i = 0; i < n; i++) ((float *)w)[i] *= beta;
        break;
    case MK_FLOAT64:
        for (int64_t i = 0; i < n; i++) ((double *)w)[i] *= (double)beta;
        break;
    default:
        for (int64_t i = 0; i < n; i++) ((mk_c64 *)w)[i] *= beta;
        break;
    }
}

typedef mk_gemm_params gemm_params;

/* OpenBLAS computes a product of at most GEMM_ALONE multiply-adds, or a
 * matrix-vector product of fewer than GEMV_ALONE matrix elements, on the
 * calling thread (its interface/gemm.c and gemv.c); larger ones go to its
 * own threads. */
#define GEMM_ALONE 262144
#define GEMV_ALONE 9216
/* Blocks handed to the pool do at least this many multiply-adds together. */
#define MIN_CHUNK 32768

/* Picks blocks for the pool: blocks small enough that OpenBLAS runs each on
 * the calling thread (so pool threads never start OpenBLAS threads), and
 * no thinner than 32 rows or columns unless the matrix is. Matrix-vector
 * products too large for a one-thread gemv become one-row gemm calls.
 * Returns false when the products are better left to OpenBLAS's threads,
 * one after another: a single product, or products too large in K for
 * such blocks. */
static bool choose_blocks(plan *p, grid *g) {
    if (p->nbatch == 1) return false;
    int64_t M = p->M, N = p->N, K = p->K;
    if ((p->mode == MODE_GEMV_A && K * N >= GEMV_ALONE) || (p->mode == MODE_GEMV_B && K * M >= GEMV_ALONE)) {
        bool a_ok, b_ok;
        p->force_gemm = true;
        plan_layouts(p, &a_ok, &b_ok); /* a vector BLAS can read is a matrix it can read */
    }
    g->mstep = M;
    g->nstep = N;
    if (p->mode == MODE_GEMM && M * N * K > GEMM_ALONE) {
        int64_t area = GEMM_ALONE / K, side = 1;
        while ((side + 1) * (side + 1) <= area) side++;
        if (M <= 32) {
            g->nstep = area / M;
        } else if (N <= 32) {
            g->mstep = area / N;
        } else {
            g->mstep = side;
            g->nstep = area / side;
        }
        if (g->mstep > M) g->mstep = M;
        if (g->nstep > N) g->nstep = N;
        if (g->mstep < (M < 32 ? M : 32) || g->nstep < (N < 32 ? N : 32)) return false;
    }
    g->mblocks = (M + g->mstep - 1) / g->mstep;
    g->nblocks = (N + g->nstep - 1) / g->nstep;
    return true;
}

/* Runs every product: many small ones (or blocks of them) over the pool,
 * OpenBLAS calling its own threads for the rest. */
static void run_plan(plan *p) {
    grid g = {p, p->M, p->N, 1, 1};
    if (!choose_blocks(p, &g)) {
        g = (grid){p, p->M, p->N, 1, 1};
        run_blocks(&g, 0, p->nbatch);
        return;
    }
    int64_t items = p->nbatch * g.mblocks * g.nblocks, work = g.mstep * g.nstep * p->K;
    mk_parallel_for(items, (MIN_CHUNK + work - 1) / work, run_blocks, &g);
}

static int gemm_eval(mk_prim *prim, mk_array *const *in, mk_array *const *out) {
    const gemm_params *gp = prim->params;
    const mk_array *a = in[0], *b = in[1], *c = gp->has_c ? in[2] : NULL;
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    int nd = o->ndim, nb = nd - 2, rc = -1;
    mk_dtype t = o->dtype, ct = compute_dtype(t);
    plan p = {.ct = ct, .esz = mk_dtype_size(ct), .M = o->shape[nd - 2], .N = o->shape[nd - 1],
              .K = a->shape[a->ndim - 1], .alpha = gp->alpha, .nb = nb, .bshape = o->shape,
              .nbatch = o->size / (o->shape[nd - 2] * o->shape[nd - 1])};
    operand oa, ob;
    mk_buffer *wbuf = NULL;
    operand_init(a, nb, o->shape, &oa);
    operand_init(b, nb, o->shape, &ob);
    p.a = &oa;
    p.b = &ob;
    p.w = mk_data(o);
    if (ct != t) {
        if (!(wbuf = mk_buffer_alloc((size_t)o->size * p.esz))) goto done;
        p.w = wbuf->data;
    }
    if (c && gp->beta != 0) {
        p.beta = gp->beta;
        cast_strided(c->dtype, mk_data(c), c->strides, ct, p.w, o->strides, nd, o->shape);
    }
    if (p.K == 0) {
        scale(ct, p.w, o->size, p.beta);
    } else {
        if (p.M > INT_MAX || p.N > INT_MAX || p.K > INT_MAX) {
            mk_error_set(MK_ERR_VALUE, "[matmul] Matrix dimensions larger than %d are not supported.", INT_MAX);
            goto done;
        }
        bool a_ok, b_ok;
        p.ars = oa.rs, p.acs = oa.cs, p.brs = ob.rs, p.bcs = ob.cs;
        plan_layouts(&p, &a_ok, &b_ok);
        if (a->dtype != ct || !a_ok) {
            if (operand_pack(a, ct, nb, o->shape, &oa) < 0) goto done;
            p.ars = oa.rs, p.acs = oa.cs;
        }
        if (b->dtype != ct || !b_ok) {
            if (operand_pack(b, ct, nb, o->shape, &ob) < 0) goto done;
            p.brs = ob.rs, p.bcs = ob.cs;
        }
        plan_layouts(&p, &a_ok, &b_ok);
        /* gemv scales y by beta = 0 rather than ignoring it: no garbage in */
        if (p.beta == 0 && p.mode != MODE_GEMM) memset(p.w, 0, (size_t)o->size * p.esz);
        fold_batch(&p);
        pthread_once(&blas_once, blas_init);
        run_plan(&p);
    }
    if (ct != t) cast_strided(ct, p.w, o->strides, t, mk_data(o), o->strides, nd, o->shape);
    rc = 0;
done:
    if (wbuf) mk_buffer_decref(wbuf);
    if (oa.tmp) mk_buffer_decref(oa.tmp);
    if (ob.tmp) mk_buffer_decref(ob.tmp);
    return rc;
}

static int gemm_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int gemm_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int gemm_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static void gemm_name(const mk_prim *p, char *buf, size_t n) {
    snprintf(buf, n, "%s", ((const gemm_params *)p->params)->has_c ? "AddMM" : "Matmul");
}
static const mk_opdef gemm_def = {"matmul", gemm_eval, NULL, gemm_vjp, gemm_jvp, gemm_vmap, false,
                                  true, sizeof(gemm_params), NULL, gemm_name};

/* a (..., M, K) and b (..., K, N) of the output dtype; c NULL or of the
 * output's shape and dtype. */
static mk_array *gemm_node(mk_array *a, mk_array *b, mk_array *c, float alpha, float beta, int ndim,
                           const int64_t *shape) {
    gemm_params *gp = malloc(sizeof *gp);
    if (!gp) return mk_nomem();
    *gp = (gemm_params){alpha, beta, c != NULL};
    mk_array *in[3] = {a, b, c};
    return mk_node(&gemm_def, gp, a->dtype, ndim, shape, c ? 3 : 2, in);
}

/* ------------------------------------------------------------------ matmul */

/* The shapes matmul sees: a 1-D a becomes (1, K), a 1-D b (K, 1). */
static int matrix_shape(const mk_array *x, bool first, int64_t *shape) {
    if (x->ndim != 1) {
        memcpy(shape, x->shape, (size_t)x->ndim * sizeof *shape);
        return x->ndim;
    }
    shape[first ? 0 : 1] = 1;
    shape[first ? 1 : 0] = x->shape[0];
    return 2;
}

static mk_array *expand(mk_array *x, bool first) {
    int axis = first ? 0 : 1;
    return mk_expand_dims(x, 1, &axis);
}

/* MLX's first checks of matmul and addmm. Returns 0 or -1. */
static int check_product(const char *op, const mk_array *a, const mk_array *b) {
    char sa[512], sb[512];
    int64_t as[MK_MAX_NDIM], bs[MK_MAX_NDIM];
    if (a->ndim == 0 || b->ndim == 0) {
        mk_error_set(MK_ERR_VALUE, "[%s] Got 0 dimension input. Inputs must have at least one dimension.", op);
        return -1;
    }
    int na = matrix_shape(a, true, as), nb = matrix_shape(b, false, bs);
    if (as[na - 1] != bs[nb - 2]) {
        mk_error_set(MK_ERR_VALUE,
                     "[%s] Last dimension of first input with shape %s must match second to last dimension of "
                     "second input with shape %s.",
                     op, mk_shape_str(na, as, sa, sizeof sa), mk_shape_str(nb, bs, sb, sizeof sb));
        return -1;
    }
    return 0;
}

/* The product's shape: batch dims broadcast, then (M, N). Returns its
 * ndim or -1. */
static int batch_shape(const mk_array *a, const mk_array *b, int64_t *shape) {
    int64_t as[MK_MAX_NDIM], bs[MK_MAX_NDIM];
    int na = matrix_shape(a, true, as), nb = matrix_shape(b, false, bs);
    int n = mk_broadcast_shapes(na - 2, as, nb - 2, bs, shape);
    if (n < 0) return -1;
    shape[n] = as[na - 2];
    shape[n + 1] = bs[nb - 1];
    return n + 2;
}

/* x and y of dtype t with 1-D operands expanded to matrices. */
static int matrix_inputs(mk_array *a, mk_array *b, mk_dtype t, mk_array **x, mk_array **y) {
    *x = *y = NULL;
    mk_array *u = mk_as_dtype(a, t), *v = u ? mk_as_dtype(b, t) : NULL;
    if (!v) goto fail;
    *x = a->ndim == 1 ? expand(u, true) : (mk_incref(u), u);
    *y = b->ndim == 1 ? expand(v, false) : (mk_incref(v), v);
    mk_decref(u);
    mk_decref(v);
    if (*x && *y) return 0;
    mk_xdecref(*x);
    mk_xdecref(*y);
    *x = *y = NULL;
    return -1;
fail:
    mk_xdecref(u);
    return -1;
}

/* Drops the unit dims a 1-D a or b added to the product (steals r). */
static mk_array *squeeze_vectors(mk_array *r, const mk_array *a, const mk_array *b) {
    if (!r || (a->ndim != 1 && b->ndim != 1)) return r;
    int axes[2], n = 0;
    if (a->ndim == 1) axes[n++] = r->ndim - 2;
    if (b->ndim == 1) axes[n++] = r->ndim - 1;
    mk_array *s = mk_squeeze(r, n, axes);
    mk_decref(r);
    return s;
}

mk_array *mk_matmul(mk_array *a, mk_array *b) {
    int64_t shape[MK_MAX_NDIM + 2];
    if (check_product("matmul", a, b) < 0) return NULL;
    mk_dtype t = mk_promote(a->dtype, b->dtype);
    if (!mk_is_inexact(t)) {
        mk_error_set(MK_ERR_VALUE,
                     "[matmul] Only inexact types are supported but %s and %s were provided which results in %s, "
                     "which is not a floating point type.",
                     mk_dtype_name(a->dtype), mk_dtype_name(b->dtype), mk_dtype_name(t));
        return NULL;
    }
    int n = batch_shape(a, b, shape);
    if (n < 0) return NULL;
    if (n > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[matmul] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    mk_array *x, *y;
    if (matrix_inputs(a, b, t, &x, &y) < 0) return NULL;
    mk_array *r = gemm_node(x, y, NULL, 1.0f, 0.0f, n, shape);
    mk_decref(x);
    mk_decref(y);
    return squeeze_vectors(r, a, b);
}

/* ------------------------------------------------------------------- addmm */

static mk_array *scaled(mk_array *x, float s, bool first) {
    mk_array *k = mk_scalar_f64(MK_FLOAT32, s);
    if (!k) return NULL;
    mk_array *r = first ? mk_binary(MK_BINARY_multiply, k, x) : mk_binary(MK_BINARY_multiply, x, k);
    mk_decref(k);
    return r;
}

/* MLX's complex path: add(multiply(matmul(a, b), alpha), multiply(beta, c)). */
static mk_array *addmm_complex(mk_array *c, mk_array *a, mk_array *b, float alpha, float beta) {
    mk_array *m = mk_matmul(a, b), *l = NULL, *r = NULL, *out = NULL;
    if (m && (l = scaled(m, alpha, false)) && (r = scaled(c, beta, true))) out = mk_binary(MK_BINARY_add, l, r);
    mk_xdecref(m);
    mk_xdecref(l);
    mk_xdecref(r);
    return out;
}

/* MLX's fast path when a has batch dims, b has none and c is at most 1-D:
 * a's rows are flattened into one matrix and c is broadcast to its
 * product. */
static mk_array *addmm_rows(mk_array *c, mk_array *x, mk_array *y, float alpha, float beta, bool b_vector) {
    int64_t shape[MK_MAX_NDIM], rows[2] = {-1, x->shape[x->ndim - 1]};
    int n = x->ndim;
    memcpy(shape, x->shape, (size_t)n * sizeof *shape);
    shape[n - 1] = y->shape[1];
    if (b_vector) n--;
    mk_array *x2 = mk_reshape(x, 2, rows), *c2 = NULL, *r = NULL, *out = NULL;
    if (!x2) return NULL;
    int64_t oshape[2] = {x2->shape[0], y->shape[1]};
    if ((c2 = mk_broadcast_to(c, 2, oshape)) && (r = gemm_node(x2, y, c2, alpha, beta, 2, oshape)))
        out = mk_reshape(r, n, shape);
    mk_decref(x2);
    mk_xdecref(c2);
    mk_xdecref(r);
    return out;
}

mk_array *mk_addmm(mk_array *c, mk_array *a, mk_array *b, float alpha, float beta) {
    int64_t shape[MK_MAX_NDIM + 2];
    if (a->ndim == 0 || b->ndim == 0) {
        mk_error_set(MK_ERR_VALUE, "[addmm] Got 0 dimension input. Inputs must have at least one dimension.");
        return NULL;
    }
    mk_dtype t = mk_promote(mk_promote(a->dtype, b->dtype), c->dtype);
    if (t == MK_COMPLEX64) return addmm_complex(c, a, b, alpha, beta);
    if (check_product("addmm", a, b) < 0) return NULL;
    if (!mk_is_float(t)) {
        mk_error_set(MK_ERR_VALUE,
                     "[addmm] Only real floating point types are supported but %s, %s and %s were provided which "
                     "results in %s, which is not a real floating point type.",
                     mk_dtype_name(c->dtype), mk_dtype_name(a->dtype), mk_dtype_name(b->dtype), mk_dtype_name(t));
        return NULL;
    }
    mk_array *x = NULL, *y = NULL, *cc = NULL, *cb = NULL, *r = NULL, *out = NULL;
    if (matrix_inputs(a, b, t, &x, &y) < 0 || !(cc = mk_as_dtype(c, t))) goto done;
    if (x->ndim > 2 && y->ndim == 2 && cc->ndim <= 1) {
        out = addmm_rows(cc, x, y, alpha, beta, b->ndim == 1);
        goto done;
    }
    int n = batch_shape(a, b, shape);
    if (n < 0) goto done;
    if (n > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[addmm] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        goto done;
    }
    /* c broadcasts against the shape of the result (without the unit dims
     * of 1-D operands), then gets those dims back */
    int64_t adj[MK_MAX_NDIM], cs[MK_MAX_NDIM + 2];
    int na = 0;
    for (int d = 0; d < n; d++)
        if (!((d == n - 2 && a->ndim == 1) || (d == n - 1 && b->ndim == 1))) adj[na++] = shape[d];
    int nc = mk_broadcast_shapes(cc->ndim, cc->shape, na, adj, cs);
    if (nc < 0 || !(cb = mk_broadcast_to(cc, nc, cs))) goto done;
    if (a->ndim == 1 || b->ndim == 1) {
        if (b->ndim == 1) cs[nc++] = 1;
        if (a->ndim == 1) {
            cs[nc] = cs[nc - 1];
            cs[nc - 1] = 1;
            nc++;
        }
        if (nc > MK_MAX_NDIM) {
            mk_error_set(MK_ERR_VALUE, "[addmm] input c must broadcast to the output shape");
            goto done;
        }
        mk_array *t2 = mk_reshape(cb, nc, cs);
        mk_decref(cb);
        if (!(cb = t2)) goto done;
    }
    if (nc != n || memcmp(cs, shape, (size_t)n * sizeof *cs)) {
        mk_error_set(MK_ERR_VALUE, "[addmm] input c must broadcast to the output shape");
        goto done;
    }
    r = gemm_node(x, y, cb, alpha, beta, n, shape);
    out = squeeze_vectors(r, a, b);
    r = NULL;
done:
    mk_xdecref(x);
    mk_xdecref(y);
    mk_xdecref(cc);
    mk_xdecref(cb);
    mk_xdecref(r);
    return out;
}

/* -------------------------------------------------------------- tensordot */

mk_array *mk_tensordot_n(mk_array *a, mk_array *b, int axis) {
    if (axis < 0) {
        mk_error_set(MK_ERR_VALUE, "[tensordot] axis must be greater or equal to 0.");
        return NULL;
    }
    if (axis > a->ndim || axis > b->ndim) {
        mk_error_set(MK_ERR_VALUE, "[tensordot] axis must be less than the number of dimensions of a and b.");
        return NULL;
    }
    int aa[MK_MAX_NDIM], bb[MK_MAX_NDIM];
    for (int i = 0; i < axis; i++) {
        bb[i] = i;
        aa[i] = i - axis;
    }
    return mk_tensordot(a, b, axis, aa, axis, bb);
}

/* MLX's array::shape(axis): negative axes count from the end, and an axis
 * out of range fails as its SmallVector::at does. */
static int shape_axis(const mk_array *x, int axis) {
    int d = axis < 0 ? axis + x->ndim : axis;
    if (d < 0 || d >= x->ndim) {
        mk_error_set(MK_ERR_INDEX, "SmallVector out of range.");
        return -1;
    }
    return d;
}

/* MLX's construction: move the summed axes of a last and those of b first,
 * reshape both to matrices, multiply, reshape to the free dims. */
mk_array *mk_tensordot(mk_array *a, mk_array *b, int na, const int *axes_a, int nb, const int *axes_b) {
    if (na != nb) {
        mk_error_set(MK_ERR_VALUE, "[tensordot] axes must have the same size.");
        return NULL;
    }
    int64_t csize = 1, size1 = 1, size2 = 1, rshape[2 * MK_MAX_NDIM];
    bool ca[MK_MAX_NDIM] = {0}, cb[MK_MAX_NDIM] = {0};
    for (int i = 0; i < na; i++) {
        int da = shape_axis(a, axes_a[i]), db = da < 0 ? -1 : shape_axis(b, axes_b[i]);
        if (db < 0) return NULL;
        if (a->shape[da] != b->shape[db]) {
            mk_error_set(MK_ERR_VALUE, "[tensordot] a and b must have the same shape on the contracted axes.");
            return NULL;
        }
        csize *= a->shape[da];
        ca[da] = cb[db] = true;
    }
    int *t1 = malloc((size_t)(a->ndim + b->ndim + 2 * na + 2) * sizeof *t1), *t2, n1 = 0, n2 = 0, nr = 0;
    if (!t1) return mk_nomem();
    t2 = t1 + a->ndim + na + 1;
    for (int i = 0; i < a->ndim; i++)
        if (!ca[i]) {
            t1[n1++] = i;
            size1 *= a->shape[i];
            rshape[nr++] = a->shape[i];
        }
    for (int i = 0; i < na; i++) t1[n1++] = axes_a[i];
    for (int i = 0; i < nb; i++) t2[n2++] = axes_b[i];
    for (int i = 0; i < b->ndim; i++)
        if (!cb[i]) {
            t2[n2++] = i;
            size2 *= b->shape[i];
            rshape[nr++] = b->shape[i];
        }
    mk_array *x = NULL, *y = NULL, *x2 = NULL, *y2 = NULL, *m = NULL, *out = NULL;
    int64_t s1[2] = {size1, csize}, s2[2] = {csize, size2};
    if ((x = mk_transpose(a, n1, t1)) && (x2 = mk_reshape(x, 2, s1)) && (y = mk_transpose(b, n2, t2)) &&
        (y2 = mk_reshape(y, 2, s2)) && (m = mk_matmul(x2, y2))) {
        if (nr > MK_MAX_NDIM)
            mk_error_set(MK_ERR_VALUE, "[reshape] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        else
            out = mk_reshape(m, nr, rshape);
    }
    free(t1);
    mk_xdecref(x);
    mk_xdecref(y);
    mk_xdecref(x2);
    mk_xdecref(y2);
    mk_xdecref(m);
    return out;
}

/* ----------------------------------------------------------- inner, outer */

mk_array *mk_inner(mk_array *a, mk_array *b) {
    if (a->ndim == 0 || b->ndim == 0) return mk_binary(MK_BINARY_multiply, a, b);
    if (a->shape[a->ndim - 1] != b->shape[b->ndim - 1]) {
        mk_error_set(MK_ERR_VALUE, "[inner] a and b must have the same last dimension.");
        return NULL;
    }
    int last = -1;
    return mk_tensordot(a, b, 1, &last, 1, &last);
}

mk_array *mk_outer(mk_array *a, mk_array *b) {
    int64_t shape[2] = {a->size, 1};
    mk_array *x = mk_reshape(a, 2, shape), *y = x ? mk_flatten(b, 0, -1) : NULL, *out = NULL;
    if (y) out = mk_binary(MK_BINARY_multiply, x, y);
    mk_xdecref(x);
    mk_xdecref(y);
    return out;
}

/* ---------------------------------------------------------- transformation rules */

/* x with its last two axes swapped */
static mk_array *swap_last(mk_arena *A, mk_array *x) {
    return x ? mk_ar_keep(A, mk_swapaxes(x, -1, -2)) : NULL;
}

static int gemm_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const gemm_params *gp = p->params;
    mk_array *a = p->inputs[0], *b = p->inputs[1], *c = cots[0];
    if (!c) return 0;
    mk_arena A = {0};
    int rc = 0;
    if (gp->alpha != 1.0f) c = mk_ar_scale(&A, c, gp->alpha);
    if (want[0]) {
        grads[0] = mk_ar_out(mk_ar_sum_to(&A, mk_ar_matmul(&A, c, swap_last(&A, b)), a->ndim, a->shape));
        if (!grads[0]) rc = -1;
    }
    if (rc == 0 && want[1]) {
        grads[1] = mk_ar_out(mk_ar_sum_to(&A, mk_ar_matmul(&A, swap_last(&A, a), c), b->ndim, b->shape));
        if (!grads[1]) rc = -1;
    }
    if (rc == 0 && gp->has_c && want[2]) {
        mk_array *cc = p->inputs[2];
        grads[2] = mk_ar_out(mk_ar_sum_to(&A, mk_ar_scale(&A, cots[0], gp->beta), cc->ndim, cc->shape));
        if (!grads[2]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

static int gemm_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    const gemm_params *gp = p->params;
    mk_arena A = {0};
    mk_array *r = NULL;
    if (tans[0]) r = mk_ar_matmul(&A, tans[0], p->inputs[1]);
    if (tans[1]) {
        mk_array *t = mk_ar_matmul(&A, p->inputs[0], tans[1]);
        r = r ? mk_ar_add(&A, r, t) : t;
    }
    if (r && gp->alpha != 1.0f) r = mk_ar_scale(&A, r, gp->alpha);
    if (gp->has_c && tans[2]) {
        mk_array *t = mk_ar_scale(&A, tans[2], gp->beta);
        r = r ? mk_ar_add(&A, r, t) : t;
    }
    if (r) r = mk_ar_broadcast(&A, r, p->outdesc[0].ndim, p->outdesc[0].shape);
    out[0] = mk_ar_out(r);
    mk_ar_free(&A);
    return out[0] ? 0 : -1;
}

/* batch axes to the front, the non-batch ranks padded to match (unbatched
 * operands get a leading 1) */
static int gemm_align(mk_arena *A, int n, mk_array *const *in, const int *axes, mk_array **out) {
    int nd = 0;
    for (int i = 0; i < n; i++) {
        int r = in[i]->ndim - (axes[i] >= 0);
        if (r > nd) nd = r;
    }
    for (int i = 0; i < n; i++) {
        mk_array *x = in[i];
        int r = x->ndim - (axes[i] >= 0);
        if (axes[i] > 0) x = mk_ar_keep(A, mk_moveaxis(x, axes[i], 0));
        if (!x) return -1;
        /* unit dims inserted by position (expand_dims, not a reshape to
         * sizes), so a shapeless replay follows new batch sizes */
        int pos[MK_MAX_NDIM], k = 0, first = axes[i] >= 0 ? 1 : 0;
        for (int d = 0; d < nd - r + 1 - first; d++) pos[k++] = first + d;
        if (k) x = mk_ar_keep(A, mk_expand_dims(x, k, pos));
        if (!(out[i] = x)) return -1;
    }
    return 0;
}

static int gemm_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const gemm_params *gp = p->params;
    mk_arena A = {0};
    mk_array *x[3];
    int rc = gemm_align(&A, p->ninputs, in, axes, x);
    if (rc == 0) {
        outs[0] = gp->has_c ? mk_addmm(x[2], x[0], x[1], gp->alpha, gp->beta) : NULL;
        if (!gp->has_c) {
            mk_array *m = mk_ar_matmul(&A, x[0], x[1]);
            outs[0] = mk_ar_out(gp->alpha != 1.0f ? mk_ar_scale(&A, m, gp->alpha) : m);
        }
        out_axes[0] = 0;
        if (!outs[0]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_gemm(const mk_prim *p, float *alpha, float *beta, bool *has_c) {
    if (p->op != &gemm_def) return false;
    const gemm_params *gp = p->params;
    *alpha = gp->alpha;
    *beta = gp->beta;
    *has_c = gp->has_c;
    return true;
}
