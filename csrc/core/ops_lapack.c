/* mx.linalg: factorizations through LAPACK, and the ops MLX composes from them.
 *
 * LAPACK comes from OpenBLAS (Debian's libopenblas0 carries the reference
 * LAPACK routines, optimised where OpenBLAS has its own). Debian ships no
 * LAPACKE header with it, so the Fortran symbols (sgetrf_, dgesdd_ ...) are
 * declared here with gfortran's calling convention: every argument by
 * reference, 32-bit integers (OpenBLAS is built without INTERFACE64), and a
 * hidden length argument per CHARACTER argument, passed at the end.
 *
 * LAPACK is column-major and mkpy is row-major. As MLX does, the routines
 * that allow it run on the row-major copy, which LAPACK reads as the
 * transpose: inv(A^T) = inv(A)^T, chol of the symmetric A with the opposite
 * triangle, svd(A^T) = V S U^T so LAPACK's U and VT land as row-major Vt and
 * U. QR, LU and the general eigenproblem copy to column-major first.
 *
 * Evaluators run on the eval thread with the GIL released (mk_eval), one
 * matrix of the batch after another; OpenBLAS threads each call itself.
 * Primitive names, shapes, dtypes and failures follow MLX's CPU back-end
 * (QRF, SVD, Inverse, Cholesky, Eig, Eigh, LUF); the composed ops follow
 * mlx/linalg.cpp. MLX defines no vjp or jvp for these primitives (the
 * transforms report "[Primitive::vjp] Not implemented for SVD."), and vmap
 * for SVD, Inverse, Cholesky, Eig and Eigh only; mkpy does the same. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "linalg.h"
#include "transforms.h"
#include "types.h"

/* ------------------------------------------------------------ LAPACK */

typedef size_t flen; /* gfortran's hidden CHARACTER length */

#define LAPACK_REAL(X)                                                                                 \
    X(float, s)                                                                                        \
    X(double, d)

#define DECL(T, p)                                                                                     \
    void p##getrf_(const int *m, const int *n, T *a, const int *lda, int *ipiv, int *info);           \
    void p##getri_(const int *n, T *a, const int *lda, const int *ipiv, T *work, const int *lwork,    \
                   int *info);                                                                         \
    void p##trtri_(const char *uplo, const char *diag, const int *n, T *a, const int *lda, int *info, \
                   flen, flen);                                                                        \
    void p##potrf_(const char *uplo, const int *n, T *a, const int *lda, int *info, flen);            \
    void p##geqrf_(const int *m, const int *n, T *a, const int *lda, T *tau, T *work, const int *lwork, \
                   int *info);                                                                         \
    void p##orgqr_(const int *m, const int *n, const int *k, T *a, const int *lda, const T *tau,       \
                   T *work, const int *lwork, int *info);                                              \
    void p##gesdd_(const char *jobz, const int *m, const int *n, T *a, const int *lda, T *s, T *u,    \
                   const int *ldu, T *vt, const int *ldvt, T *work, const int *lwork, int *iwork,      \
                   int *info, flen);                                                                   \
    void p##syevd_(const char *jobz, const char *uplo, const int *n, T *a, const int *lda, T *w,      \
                   T *work, const int *lwork, int *iwork, const int *liwork, int *info, flen, flen);   \
    void p##geev_(const char *jobvl, const char *jobvr, const int *n, T *a, const int *lda, T *wr,    \
                  T *wi, T *vl, const int *ldvl, T *vr, const int *ldvr, T *work, const int *lwork,    \
                  int *info, flen, flen);
LAPACK_REAL(DECL)
#undef DECL

void cgesdd_(const char *jobz, const int *m, const int *n, mk_c64 *a, const int *lda, float *s, mk_c64 *u,
             const int *ldu, mk_c64 *vt, const int *ldvt, mk_c64 *work, const int *lwork, float *rwork,
             int *iwork, int *info, flen);
void cheevd_(const char *jobz, const char *uplo, const int *n, mk_c64 *a, const int *lda, float *w,
             mk_c64 *work, const int *lwork, float *rwork, const int *lrwork, int *iwork, const int *liwork,
             int *info, flen, flen);
void cgeev_(const char *jobvl, const char *jobvr, const int *n, mk_c64 *a, const int *lda, mk_c64 *w,
            mk_c64 *vl, const int *ldvl, mk_c64 *vr, const int *ldvr, mk_c64 *work, const int *lwork,
            float *rwork, int *info, flen, flen);

/* A workspace size LAPACK reported in a floating-point word. */
static int work_size(double w) { return w < 1 ? 1 : (int)w; }

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) mk_nomem();
    return p;
}

/* Matrices of at most INT_MAX rows / columns (LAPACK's int). */
static int check_dims(const char *prim, int64_t m, int64_t n) {
    if (m > 0x7fffffff || n > 0x7fffffff || m * n > 0x7fffffff) {
        mk_error_set(MK_ERR_VALUE, "[%s::eval_cpu] Matrices larger than 2^31 elements are not supported.", prim);
        return -1;
    }
    return 0;
}

/* x (evaluated, of shape (..., M, N)) into dense memory dst: row-major, or
 * column-major per matrix when col is set. */
static void copy_matrices(const mk_array *x, void *dst, bool col) {
    int64_t st[MK_MAX_NDIM], M = x->shape[x->ndim - 2], N = x->shape[x->ndim - 1];
    mk_row_strides(x->ndim, x->shape, st);
    if (col) {
        st[x->ndim - 2] = 1;
        st[x->ndim - 1] = M;
    }
    (void)N;
    mk_copy_into(x, dst, st);
}

/* Zeros the strictly lower (lower_part) or strictly upper triangle of each
 * row-major N x N matrix. */
#define ZERO_TRI(T)                                                                                    \
    static void zero_tri_##T(T *m, int64_t N, int64_t count, bool lower_part) {                        \
        for (int64_t b = 0; b < count; b++, m += N * N)                                                \
            for (int64_t i = 0; i < N; i++)                                                            \
                for (int64_t j = lower_part ? 0 : i + 1; j < (lower_part ? i : N); j++) m[i * N + j] = 0; \
    }
ZERO_TRI(float)
ZERO_TRI(double)
#undef ZERO_TRI

/* ------------------------------------------------------------ Inverse */

typedef struct {
    bool tri, upper;
} inv_params;

#define INV_IMPL(T, p)                                                                                  \
    static int inv_##p(T *m, int N, int64_t count, const inv_params *ip) {                             \
        int info = 0, lwork = -1;                                                                      \
        if (ip->tri) {                                                                                 \
            char uplo = ip->upper ? 'L' : 'U', diag = 'N';                                             \
            for (int64_t b = 0; b < count; b++) {                                                      \
                p##trtri_(&uplo, &diag, &N, m + b * N * N, &N, &info, 1, 1);                           \
                if (info != 0) {                                                                       \
                    mk_error_set(MK_ERR_RUNTIME,                                                       \
                                 "[Inverse::eval_cpu] triangular inversion failed with error code %d", info); \
                    return -1;                                                                         \
                }                                                                                      \
            }                                                                                          \
            zero_tri_##T(m, N, count, ip->upper);                                                      \
            return 0;                                                                                  \
        }                                                                                              \
        T wq = 0;                                                                                      \
        p##getri_(&N, m, &N, NULL, &wq, &lwork, &info);                                                \
        lwork = work_size((double)wq);                                                                 \
        int *ipiv = xmalloc(sizeof(int) * (size_t)N);                                                  \
        T *work = ipiv ? xmalloc(sizeof(T) * (size_t)lwork) : NULL;                                    \
        int rc = work ? 0 : -1;                                                                        \
        for (int64_t b = 0; rc == 0 && b < count; b++) {                                               \
            T *a = m + b * N * N;                                                                      \
            p##getrf_(&N, &N, a, &N, ipiv, &info);                                                     \
            if (info != 0) {                                                                           \
                mk_error_set(MK_ERR_RUNTIME, "[Inverse::eval_cpu] LU factorization failed with error code %d", \
                             info);                                                                    \
                rc = -1;                                                                               \
                break;                                                                                 \
            }                                                                                          \
            p##getri_(&N, a, &N, ipiv, work, &lwork, &info);                                           \
            if (info != 0) {                                                                           \
                mk_error_set(MK_ERR_RUNTIME, "[Inverse::eval_cpu] inversion failed with error code %d", info); \
                rc = -1;                                                                               \
            }                                                                                          \
        }                                                                                              \
        free(ipiv);                                                                                    \
        free(work);                                                                                    \
        return rc;                                                                                     \
    }
INV_IMPL(float, s)
INV_IMPL(double, d)
#undef INV_IMPL

static int inverse_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *a = in[0];
    mk_array *o = out[0];
    int64_t N = a->shape[a->ndim - 1];
    if (mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    if (check_dims("Inverse", N, N) < 0) return -1;
    copy_matrices(a, mk_data(o), false);
    int64_t count = o->size / (N * N);
    return a->dtype == MK_FLOAT32 ? inv_s(mk_data(o), (int)N, count, p->params)
                                  : inv_d(mk_data(o), (int)N, count, p->params);
}

static int inverse_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef inverse_def = {"Inverse", inverse_eval, NULL, NULL, NULL, inverse_vmap, false};

/* ------------------------------------------------------------ Cholesky */

#define CHOL_IMPL(T, p)                                                                                 \
    static int chol_##p(T *m, int N, int64_t count, bool upper) {                                      \
        char uplo = upper ? 'L' : 'U';                                                                 \
        for (int64_t b = 0; b < count; b++) {                                                          \
            int info = 0;                                                                              \
            p##potrf_(&uplo, &N, m + b * N * N, &N, &info, 1);                                         \
            if (info < 0) {                                                                            \
                mk_error_set(MK_ERR_RUNTIME,                                                           \
                             "[Cholesky::eval_cpu] Cholesky decomposition failed with error code %d", info); \
                return -1;                                                                             \
            }                                                                                          \
        }                                                                                              \
        zero_tri_##T(m, N, count, upper);                                                              \
        return 0;                                                                                      \
    }
CHOL_IMPL(float, s)
CHOL_IMPL(double, d)
#undef CHOL_IMPL

static int cholesky_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *a = in[0];
    mk_array *o = out[0];
    int64_t N = a->shape[a->ndim - 1];
    bool upper = *(const bool *)p->params;
    if (mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    if (check_dims("Cholesky", N, N) < 0) return -1;
    copy_matrices(a, mk_data(o), false);
    int64_t count = o->size / (N * N);
    return a->dtype == MK_FLOAT32 ? chol_s(mk_data(o), (int)N, count, upper) : chol_d(mk_data(o), (int)N, count, upper);
}

static int cholesky_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef cholesky_def = {"Cholesky", cholesky_eval, NULL, NULL, NULL, cholesky_vmap, false};

/* ------------------------------------------------------------ QRF */

#define QR_IMPL(T, p)                                                                                   \
    static int qr_##p(T *a, T *q, T *r, int M, int N, int64_t count) {                                 \
        int K = M < N ? M : N, info = 0, lwork = -1, l2 = -1;                                          \
        T w1 = 0, w2 = 0;                                                                              \
        p##geqrf_(&M, &N, a, &M, NULL, &w1, &lwork, &info);                                            \
        p##orgqr_(&M, &K, &K, a, &M, NULL, &w2, &l2, &info);                                           \
        lwork = work_size((double)w1 > (double)w2 ? (double)w1 : (double)w2);                          \
        T *work = xmalloc(sizeof(T) * (size_t)lwork), *tau = work ? xmalloc(sizeof(T) * (size_t)K) : NULL; \
        if (!tau) {                                                                                    \
            free(work);                                                                                \
            return -1;                                                                                 \
        }                                                                                              \
        for (int64_t b = 0; b < count; b++, a += (int64_t)M * N, q += (int64_t)M * K, r += (int64_t)K * N) { \
            p##geqrf_(&M, &N, a, &M, tau, work, &lwork, &info);                                        \
            for (int i = 0; i < K; i++)                                                                \
                for (int j = 0; j < N; j++) r[(int64_t)i * N + j] = j < i ? 0 : a[i + (int64_t)j * M];   \
            p##orgqr_(&M, &K, &K, a, &M, tau, work, &lwork, &info);                                    \
            for (int i = 0; i < M; i++)                                                                \
                for (int j = 0; j < K; j++) q[(int64_t)i * K + j] = a[i + (int64_t)j * M];               \
        }                                                                                              \
        free(work);                                                                                    \
        free(tau);                                                                                     \
        return 0;                                                                                      \
    }
QR_IMPL(float, s)
QR_IMPL(double, d)
#undef QR_IMPL

static int qr_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    const mk_array *a = in[0];
    int64_t M = a->shape[a->ndim - 2], N = a->shape[a->ndim - 1];
    if (mk_alloc_out(out[0]) < 0 || mk_alloc_out(out[1]) < 0) return -1;
    if (a->size == 0) return 0;
    if (check_dims("QRF", M, N) < 0) return -1;
    void *tmp = xmalloc((size_t)a->size * mk_dtype_size(a->dtype));
    if (!tmp) return -1;
    copy_matrices(a, tmp, true);
    int64_t count = a->size / (M * N);
    int rc = a->dtype == MK_FLOAT32 ? qr_s(tmp, mk_data(out[0]), mk_data(out[1]), (int)M, (int)N, count)
                                    : qr_d(tmp, mk_data(out[0]), mk_data(out[1]), (int)M, (int)N, count);
    free(tmp);
    return rc;
}

static const mk_opdef qr_def = {"QRF", qr_eval, NULL, NULL, NULL, NULL, false};

/* ------------------------------------------------------------ SVD */

/* One routine per dtype: a is the row-major matrix (M x N), which LAPACK
 * sees as the N x M A^T; its U (N x N) is our Vt and its VT (M x M) our U. */
#define SVD_REAL(T, p)                                                                                  \
    static int svd_##p(T *a, T *s, T *u, T *vt, int M, int N, int64_t count, bool uv) {                \
        int K = M < N ? M : N, info = 0, lwork = -1, one = 1;                                          \
        char jobz = uv ? 'A' : 'N';                                                                    \
        T wq = 0, dummy = 0;                                                                           \
        int *iwork = xmalloc(sizeof(int) * 8 * (size_t)(K ? K : 1));                                   \
        if (!iwork) return -1;                                                                         \
        p##gesdd_(&jobz, &N, &M, a, &N, s, uv ? vt : &dummy, uv ? &N : &one, uv ? u : &dummy,          \
                  uv ? &M : &one, &wq, &lwork, iwork, &info, 1);                                       \
        if (info != 0) {                                                                               \
            free(iwork);                                                                               \
            mk_error_set(MK_ERR_RUNTIME, "[SVD::eval_cpu] workspace calculation failed with code %d", info); \
            return -1;                                                                                 \
        }                                                                                              \
        lwork = work_size((double)wq);                                                                 \
        T *work = xmalloc(sizeof(T) * (size_t)lwork);                                                  \
        int rc = work ? 0 : -1;                                                                        \
        for (int64_t b = 0; rc == 0 && b < count; b++) {                                               \
            T *ub = uv ? u + b * (int64_t)M * M : &dummy, *vb = uv ? vt + b * (int64_t)N * N : &dummy;   \
            p##gesdd_(&jobz, &N, &M, a + b * (int64_t)M * N, &N, s + b * K, vb, uv ? &N : &one, ub,      \
                      uv ? &M : &one, work, &lwork, iwork, &info, 1);                                  \
            if (info != 0) {                                                                           \
                mk_error_set(MK_ERR_RUNTIME, "[SVD::eval_cpu] SVD failed with error code %d", info);    \
                rc = -1;                                                                               \
            }                                                                                          \
        }                                                                                              \
        free(work);                                                                                    \
        free(iwork);                                                                                   \
        return rc;                                                                                     \
    }
LAPACK_REAL(SVD_REAL)
#undef SVD_REAL

static int svd_c(mk_c64 *a, float *s, mk_c64 *u, mk_c64 *vt, int M, int N, int64_t count, bool uv) {
    int K = M < N ? M : N, Mx = M > N ? M : N, info = 0, lwork = -1, one = 1;
    char jobz = uv ? 'A' : 'N';
    mk_c64 wq = 0, dummy = 0;
    int64_t lr = uv ? 5 * (int64_t)K * K + 5 * K : 7 * (int64_t)K;
    if (uv && 2 * (int64_t)Mx * K + 2 * (int64_t)K * K + K > lr) lr = 2 * (int64_t)Mx * K + 2 * (int64_t)K * K + K;
    int *iwork = xmalloc(sizeof(int) * 8 * (size_t)(K ? K : 1));
    float *rwork = iwork ? xmalloc(sizeof(float) * (size_t)(lr > 1 ? lr : 1)) : NULL;
    mk_c64 *work = NULL;
    int rc = -1;
    if (!rwork) goto done;
    cgesdd_(&jobz, &N, &M, a, &N, s, uv ? vt : &dummy, uv ? &N : &one, uv ? u : &dummy, uv ? &M : &one, &wq, &lwork,
            rwork, iwork, &info, 1);
    if (info != 0) {
        mk_error_set(MK_ERR_RUNTIME, "[SVD::eval_cpu] workspace calculation failed with code %d", info);
        goto done;
    }
    lwork = work_size((double)crealf(wq));
    if (!(work = xmalloc(sizeof(mk_c64) * (size_t)lwork))) goto done;
    rc = 0;
    for (int64_t b = 0; rc == 0 && b < count; b++) {
        mk_c64 *ub = uv ? u + b * (int64_t)M * M : &dummy, *vb = uv ? vt + b * (int64_t)N * N : &dummy;
        cgesdd_(&jobz, &N, &M, a + b * (int64_t)M * N, &N, s + b * K, vb, uv ? &N : &one, ub, uv ? &M : &one,
                work, &lwork, rwork, iwork, &info, 1);
        if (info != 0) {
            mk_error_set(MK_ERR_RUNTIME, "[SVD::eval_cpu] SVD failed with error code %d", info);
            rc = -1;
        }
    }
done:
    free(work);
    free(rwork);
    free(iwork);
    return rc;
}

/* Identity matrices (count of them, n x n) of dtype t. */
static void set_identity(mk_dtype t, void *m, int64_t n, int64_t count) {
    size_t es = mk_dtype_size(t);
    memset(m, 0, (size_t)(count * n * n) * es);
    for (int64_t b = 0; b < count; b++)
        for (int64_t i = 0; i < n; i++) {
            char *e = (char *)m + ((b * n + i) * n + i) * (int64_t)es;
            if (t == MK_FLOAT32)
                *(float *)e = 1;
            else if (t == MK_FLOAT64)
                *(double *)e = 1;
            else
                *(mk_c64 *)e = 1;
        }
}

static int svd_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *a = in[0];
    bool uv = *(const bool *)p->params;
    int64_t M = a->shape[a->ndim - 2], N = a->shape[a->ndim - 1];
    for (int i = 0; i < p->noutputs; i++)
        if (mk_alloc_out(out[i]) < 0) return -1;
    mk_array *S = uv ? out[1] : out[0], *U = uv ? out[0] : NULL, *Vt = uv ? out[2] : NULL;
    int64_t count = M && N ? a->size / (M * N) : (S->size ? 0 : 0);
    if (M == 0 || N == 0) {
        /* nothing to factor: no singular values; U and Vt are identities */
        if (uv) {
            int64_t cu = M ? U->size / (M * M) : 0, cv = N ? Vt->size / (N * N) : 0;
            set_identity(a->dtype, mk_data(U), M, cu);
            set_identity(a->dtype, mk_data(Vt), N, cv);
        }
        return 0;
    }
    if (count == 0) return 0;
    if (check_dims("SVD", M, N) < 0) return -1;
    void *tmp = xmalloc((size_t)a->size * mk_dtype_size(a->dtype));
    if (!tmp) return -1;
    copy_matrices(a, tmp, false);
    int rc;
    void *u = uv ? mk_data(U) : NULL, *vt = uv ? mk_data(Vt) : NULL;
    if (a->dtype == MK_FLOAT32)
        rc = svd_s(tmp, mk_data(S), u, vt, (int)M, (int)N, count, uv);
    else if (a->dtype == MK_FLOAT64)
        rc = svd_d(tmp, mk_data(S), u, vt, (int)M, (int)N, count, uv);
    else
        rc = svd_c(tmp, mk_data(S), u, vt, (int)M, (int)N, count, uv);
    free(tmp);
    return rc;
}

static int svd_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef svd_def = {"SVD", svd_eval, NULL, NULL, NULL, svd_vmap, false};

/* ------------------------------------------------------------ Eigh */

typedef struct {
    char uplo;
    bool vectors;
} eigh_params;

/* Each matrix in place (row-major, which LAPACK reads as A^T: the triangle
 * named by uplo is the opposite one); its eigenvectors come out as rows. */
#define EIGH_REAL(T, p)                                                                                 \
    static int eigh_##p(T *a, T *w, int N, int64_t count, char uplo, bool vec) {                        \
        char jobz = vec ? 'V' : 'N';                                                                   \
        int info = 0, lwork = -1, liwork = -1, iq = 0;                                                 \
        T wq = 0;                                                                                      \
        p##syevd_(&jobz, &uplo, &N, a, &N, w, &wq, &lwork, &iq, &liwork, &info, 1, 1);                 \
        lwork = work_size((double)wq);                                                                 \
        liwork = iq < 1 ? 1 : iq;                                                                      \
        T *work = xmalloc(sizeof(T) * (size_t)lwork);                                                  \
        int *iwork = work ? xmalloc(sizeof(int) * (size_t)liwork) : NULL, rc = iwork ? 0 : -1;          \
        for (int64_t b = 0; rc == 0 && b < count; b++) {                                               \
            p##syevd_(&jobz, &uplo, &N, a + b * (int64_t)N * N, &N, w + b * N, work, &lwork, iwork, &liwork, \
                      &info, 1, 1);                                                                    \
            if (info != 0) {                                                                           \
                mk_error_set(MK_ERR_RUNTIME,                                                           \
                             "[Eigh::eval_cpu] Eigenvalue decomposition failed with error code %d", info); \
                rc = -1;                                                                               \
            }                                                                                          \
        }                                                                                              \
        free(work);                                                                                    \
        free(iwork);                                                                                   \
        return rc;                                                                                     \
    }
LAPACK_REAL(EIGH_REAL)
#undef EIGH_REAL

static int eigh_c(mk_c64 *a, float *w, int N, int64_t count, char uplo, bool vec) {
    char jobz = vec ? 'V' : 'N';
    int info = 0, lwork = -1, lrwork = -1, liwork = -1, iq = 0, rc = -1;
    mk_c64 wq = 0;
    float rq = 0;
    cheevd_(&jobz, &uplo, &N, a, &N, w, &wq, &lwork, &rq, &lrwork, &iq, &liwork, &info, 1, 1);
    lwork = work_size((double)crealf(wq));
    lrwork = work_size((double)rq);
    liwork = iq < 1 ? 1 : iq;
    mk_c64 *work = xmalloc(sizeof(mk_c64) * (size_t)lwork);
    float *rwork = work ? xmalloc(sizeof(float) * (size_t)lrwork) : NULL;
    int *iwork = rwork ? xmalloc(sizeof(int) * (size_t)liwork) : NULL;
    if (iwork) rc = 0;
    for (int64_t b = 0; rc == 0 && b < count; b++) {
        cheevd_(&jobz, &uplo, &N, a + b * (int64_t)N * N, &N, w + b * N, work, &lwork, rwork, &lrwork, iwork, &liwork,
                &info, 1, 1);
        if (info != 0) {
            mk_error_set(MK_ERR_RUNTIME, "[Eigh::eval_cpu] Eigenvalue decomposition failed with error code %d", info);
            rc = -1;
        }
    }
    free(work);
    free(rwork);
    free(iwork);
    return rc;
}

/* dst (row-major) = each src matrix transposed (and conjugated). */
static void transpose_into(mk_dtype t, const void *src, void *dst, int64_t N, int64_t count, bool conj) {
    size_t es = mk_dtype_size(t);
    for (int64_t b = 0; b < count; b++) {
        const char *s = (const char *)src + (size_t)(b * N * N) * es;
        char *d = (char *)dst + (size_t)(b * N * N) * es;
        for (int64_t i = 0; i < N; i++)
            for (int64_t j = 0; j < N; j++) {
                const char *x = s + (size_t)(j * N + i) * es;
                char *y = d + (size_t)(i * N + j) * es;
                if (t == MK_COMPLEX64 && conj)
                    *(mk_c64 *)y = conjf(*(const mk_c64 *)x);
                else
                    memcpy(y, x, es);
            }
    }
}

static int eigh_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *a = in[0];
    const eigh_params *ep = p->params;
    int64_t N = a->shape[a->ndim - 1];
    for (int i = 0; i < p->noutputs; i++)
        if (mk_alloc_out(out[i]) < 0) return -1;
    if (a->size == 0) return 0;
    if (check_dims("Eigh", N, N) < 0) return -1;
    int64_t count = a->size / (N * N);
    size_t bytes = (size_t)a->size * mk_dtype_size(a->dtype);
    void *tmp = xmalloc(bytes);
    if (!tmp) return -1;
    copy_matrices(a, tmp, false);
    char uplo = ep->uplo == 'L' ? 'U' : 'L';
    int rc;
    if (a->dtype == MK_FLOAT32)
        rc = eigh_s(tmp, mk_data(out[0]), (int)N, count, uplo, ep->vectors);
    else if (a->dtype == MK_FLOAT64)
        rc = eigh_d(tmp, mk_data(out[0]), (int)N, count, uplo, ep->vectors);
    else
        rc = eigh_c(tmp, mk_data(out[0]), (int)N, count, uplo, ep->vectors);
    /* the eigenvectors of A^T (rows of tmp) are the conjugates of A's; they
     * become columns */
    if (rc == 0 && ep->vectors) transpose_into(a->dtype, tmp, mk_data(out[1]), N, count, true);
    free(tmp);
    return rc;
}

static int eigh_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef eigh_def = {"Eigh", eigh_eval, NULL, NULL, NULL, eigh_vmap, false};

/* ------------------------------------------------------------ Eig */

/* Column-major a (n x n) per matrix; values to complex64 w, right
 * eigenvectors (when vec) to row-major complex64 v, one per column. */
#define EIG_REAL(T, p)                                                                                  \
    static int eig_##p(T *a, mk_c64 *w, mk_c64 *v, int N, int64_t count) {                             \
        char jl = 'N', jr = v ? 'V' : 'N';                                                             \
        int info = 0, lwork = -1, one = 1, ldvr = v ? N : 1;                                           \
        T wq = 0, dummy = 0;                                                                           \
        p##geev_(&jl, &jr, &N, a, &N, &dummy, &dummy, &dummy, &one, &dummy, &ldvr, &wq, &lwork, &info, 1, 1); \
        lwork = work_size((double)wq);                                                                 \
        T *work = xmalloc(sizeof(T) * (size_t)lwork);                                                  \
        T *wr = work ? xmalloc(sizeof(T) * 2 * (size_t)N) : NULL;                                      \
        T *vr = wr && v ? xmalloc(sizeof(T) * (size_t)N * N) : NULL;                                   \
        int rc = wr && (vr || !v) ? 0 : -1;                                                            \
        for (int64_t b = 0; rc == 0 && b < count; b++) {                                               \
            T *wi = wr + N;                                                                            \
            p##geev_(&jl, &jr, &N, a + b * (int64_t)N * N, &N, wr, wi, &dummy, &one, v ? vr : &dummy, &ldvr, work, \
                     &lwork, &info, 1, 1);                                                             \
            if (info != 0) {                                                                           \
                mk_error_set(MK_ERR_RUNTIME,                                                           \
                             "[Eig::eval_cpu] Eigenvalue decomposition failed with error code %d", info); \
                rc = -1;                                                                               \
                break;                                                                                 \
            }                                                                                          \
            mk_c64 *wb = w + b * N;                                                                    \
            for (int k = 0; k < N; k++) wb[k] = (float)wr[k] + (float)wi[k] * I;                       \
            if (!v) continue;                                                                          \
            mk_c64 *vb = v + b * (int64_t)N * N;                                                       \
            for (int k = 0; k < N; k++) {                                                              \
                if (wi[k] != 0 && k + 1 < N) {                                                         \
                    for (int i = 0; i < N; i++) {                                                      \
                        T re = vr[i + (int64_t)k * N], im = vr[i + (int64_t)(k + 1) * N];              \
                        vb[(int64_t)i * N + k] = (float)re + (float)im * I;                            \
                        vb[(int64_t)i * N + k + 1] = (float)re - (float)im * I;                        \
                    }                                                                                  \
                    k++;                                                                               \
                } else {                                                                               \
                    for (int i = 0; i < N; i++) vb[(int64_t)i * N + k] = (float)vr[i + (int64_t)k * N];  \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
        free(work);                                                                                    \
        free(wr);                                                                                      \
        free(vr);                                                                                      \
        return rc;                                                                                     \
    }
LAPACK_REAL(EIG_REAL)
#undef EIG_REAL

static int eig_c(mk_c64 *a, mk_c64 *w, mk_c64 *v, int N, int64_t count) {
    char jl = 'N', jr = v ? 'V' : 'N';
    int info = 0, lwork = -1, one = 1, ldvr = v ? N : 1;
    mk_c64 wq = 0, dummy = 0;
    float *rwork = xmalloc(sizeof(float) * 2 * (size_t)N);
    if (!rwork) return -1;
    cgeev_(&jl, &jr, &N, a, &N, w, &dummy, &one, &dummy, &ldvr, &wq, &lwork, rwork, &info, 1, 1);
    lwork = work_size((double)crealf(wq));
    mk_c64 *work = xmalloc(sizeof(mk_c64) * (size_t)lwork);
    mk_c64 *vr = work && v ? xmalloc(sizeof(mk_c64) * (size_t)N * N) : NULL;
    int rc = work && (vr || !v) ? 0 : -1;
    for (int64_t b = 0; rc == 0 && b < count; b++) {
        cgeev_(&jl, &jr, &N, a + b * (int64_t)N * N, &N, w + b * N, &dummy, &one, v ? vr : &dummy, &ldvr, work,
               &lwork, rwork, &info, 1, 1);
        if (info != 0) {
            mk_error_set(MK_ERR_RUNTIME, "[Eig::eval_cpu] Eigenvalue decomposition failed with error code %d", info);
            rc = -1;
            break;
        }
        if (v) transpose_into(MK_COMPLEX64, vr, v + b * (int64_t)N * N, N, 1, false);
    }
    free(rwork);
    free(work);
    free(vr);
    return rc;
}

static int eig_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *a = in[0];
    bool vec = *(const bool *)p->params;
    int64_t N = a->shape[a->ndim - 1];
    for (int i = 0; i < p->noutputs; i++)
        if (mk_alloc_out(out[i]) < 0) return -1;
    if (a->size == 0) return 0;
    if (check_dims("Eig", N, N) < 0) return -1;
    int64_t count = a->size / (N * N);
    void *tmp = xmalloc((size_t)a->size * mk_dtype_size(a->dtype));
    if (!tmp) return -1;
    copy_matrices(a, tmp, true);
    mk_c64 *w = mk_data(out[0]), *v = vec ? mk_data(out[1]) : NULL;
    int rc;
    if (a->dtype == MK_FLOAT32)
        rc = eig_s(tmp, w, v, (int)N, count);
    else if (a->dtype == MK_FLOAT64)
        rc = eig_d(tmp, w, v, (int)N, count);
    else
        rc = eig_c(tmp, w, v, (int)N, count);
    free(tmp);
    return rc;
}

static int eig_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static const mk_opdef eig_def = {"Eig", eig_eval, NULL, NULL, NULL, eig_vmap, false};

/* ------------------------------------------------------------ LUF */

/* Column-major a (M x N) per matrix, factored in place; pivots (K) and row
 * indices (M) as uint32, MLX's 0-based forms. */
#define LU_IMPL(T, p)                                                                                   \
    static int lu_##p(T *a, uint32_t *piv, uint32_t *rows, int M, int N, int64_t count) {              \
        int K = M < N ? M : N;                                                                         \
        int *ipiv = xmalloc(sizeof(int) * (size_t)(K ? K : 1));                                        \
        if (!ipiv) return -1;                                                                          \
        for (int64_t b = 0; b < count; b++, a += (int64_t)M * N, piv += K, rows += M) {                \
            int info = 0;                                                                              \
            p##getrf_(&M, &N, a, &M, ipiv, &info);                                                     \
            if (info < 0) {                                                                            \
                mk_error_set(MK_ERR_RUNTIME,                                                           \
                             "[LUF::eval_cpu] LU factorization failed with error code %d because argument had " \
                             "an illegal value",                                                       \
                             info);                                                                    \
                free(ipiv);                                                                            \
                return -1;                                                                             \
            }                                                                                          \
            for (int j = 0; j < M; j++) rows[j] = (uint32_t)j;                                         \
            for (int j = 0; j < K; j++) piv[j] = (uint32_t)(ipiv[j] - 1);                              \
            for (int j = K - 1; j >= 0; j--) {                                                         \
                uint32_t t = rows[piv[j]];                                                             \
                rows[piv[j]] = rows[j];                                                                \
                rows[j] = t;                                                                           \
            }                                                                                          \
        }                                                                                              \
        free(ipiv);                                                                                    \
        return 0;                                                                                      \
    }
LU_IMPL(float, s)
LU_IMPL(double, d)
#undef LU_IMPL

static int lu_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    const mk_array *a = in[0];
    int64_t M = a->shape[a->ndim - 2], N = a->shape[a->ndim - 1];
    for (int i = 0; i < 3; i++)
        if (mk_alloc_out(out[i]) < 0) return -1;
    if (a->size == 0) return 0;
    if (check_dims("LUF", M, N) < 0) return -1;
    int64_t count = a->size / (M * N);
    void *tmp = xmalloc((size_t)a->size * mk_dtype_size(a->dtype));
    if (!tmp) return -1;
    copy_matrices(a, tmp, true);
    int rc = a->dtype == MK_FLOAT32 ? lu_s(tmp, mk_data(out[1]), mk_data(out[2]), (int)M, (int)N, count)
                                    : lu_d(tmp, mk_data(out[1]), mk_data(out[2]), (int)M, (int)N, count);
    if (rc == 0) {
        /* the column-major factors to the row-major output */
        size_t es = mk_dtype_size(a->dtype);
        char *o = mk_data(out[0]);
        const char *t = tmp;
        for (int64_t b = 0; b < count; b++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++)
                    memcpy(o + (size_t)((b * M + i) * N + j) * es, t + (size_t)(b * M * N + j * M + i) * es, es);
    }
    free(tmp);
    return rc;
}

static const mk_opdef lu_def = {"LUF", lu_eval, NULL, NULL, NULL, NULL, false};

/* ------------------------------------------------------------ checks */

static int check_cpu(const char *prefix, bool gpu) {
    if (!gpu) return 0;
    mk_error_set(MK_ERR_VALUE,
                 "%s This op is not yet supported on the GPU. Explicitly pass a CPU stream to run it.", prefix);
    return -1;
}

static int check_float(mk_dtype t, const char *prefix) {
    if (t == MK_FLOAT32 || t == MK_FLOAT64) return 0;
    mk_error_set(MK_ERR_VALUE, "%s Arrays must have type float32 or float64. Received array with type %s.", prefix,
                 mk_dtype_name(t));
    return -1;
}

static int check_float_or_complex(mk_dtype t, const char *prefix) {
    if (t == MK_FLOAT32 || t == MK_FLOAT64 || t == MK_COMPLEX64) return 0;
    mk_error_set(MK_ERR_VALUE,
                 "%s Arrays must have type float32, float64 or complex64. Received array with type %s.", prefix,
                 mk_dtype_name(t));
    return -1;
}

static int check_matrix(const mk_array *a, const char *prefix) {
    if (a->ndim >= 2) return 0;
    mk_error_set(MK_ERR_VALUE, "%s Arrays must have >= 2 dimensions. Received array with %d dimensions.", prefix,
                 a->ndim);
    return -1;
}

/* ------------------------------------------------------------ constructors */

static mk_array *inv_impl(mk_array *a, bool tri, bool upper, bool gpu) {
    if (check_cpu("[linalg::inv]", gpu) < 0 || check_float(a->dtype, "[linalg::inv]") < 0 ||
        check_matrix(a, "[linalg::inv]") < 0)
        return NULL;
    if (a->shape[a->ndim - 1] != a->shape[a->ndim - 2]) {
        mk_error_set(MK_ERR_VALUE, "[linalg::inv] Inverses are only defined for square matrices.");
        return NULL;
    }
    inv_params *ip = malloc(sizeof *ip);
    if (!ip) return mk_nomem();
    *ip = (inv_params){tri, upper};
    return mk_node(&inverse_def, ip, a->dtype, a->ndim, a->shape, 1, &a);
}

mk_array *mk_linalg_inv(mk_array *a, bool gpu) { return inv_impl(a, false, true, gpu); }
mk_array *mk_linalg_tri_inv(mk_array *a, bool upper, bool gpu) { return inv_impl(a, true, upper, gpu); }

static bool *bool_param(bool v) {
    bool *b = malloc(sizeof *b);
    if (b) *b = v;
    else mk_nomem();
    return b;
}

mk_array *mk_linalg_cholesky(mk_array *a, bool upper, bool gpu) {
    const char *P = "[linalg::cholesky]";
    if (check_cpu(P, gpu) < 0 || check_float(a->dtype, P) < 0 || check_matrix(a, P) < 0) return NULL;
    if (a->shape[a->ndim - 1] != a->shape[a->ndim - 2]) {
        mk_error_set(MK_ERR_VALUE, "[linalg::cholesky] Cholesky decomposition is only defined for square matrices.");
        return NULL;
    }
    bool *bp = bool_param(upper);
    return bp ? mk_node(&cholesky_def, bp, a->dtype, a->ndim, a->shape, 1, &a) : NULL;
}

int mk_linalg_qr(mk_array *a, bool gpu, mk_array **outs) {
    const char *P = "[linalg::qr]";
    if (check_cpu(P, gpu) < 0 || check_float(a->dtype, P) < 0 || check_matrix(a, P) < 0) return -1;
    int nd = a->ndim;
    int64_t M = a->shape[nd - 2], N = a->shape[nd - 1], K = M < N ? M : N;
    mk_outdesc d[2];
    for (int i = 0; i < 2; i++) {
        d[i].dtype = a->dtype;
        d[i].ndim = nd;
        memcpy(d[i].shape, a->shape, sizeof(int64_t) * (size_t)nd);
    }
    d[0].shape[nd - 1] = K;
    d[1].shape[nd - 2] = K;
    return mk_prim_make(&qr_def, NULL, 1, &a, 2, d, outs);
}

int mk_linalg_svd(mk_array *a, bool compute_uv, bool gpu, mk_array **outs) {
    const char *P = "[linalg::svd]";
    if (check_cpu(P, gpu) < 0 || check_float_or_complex(a->dtype, P) < 0) return -1;
    if (a->ndim < 2) {
        mk_error_set(MK_ERR_VALUE, "[linalg::svd] Input array must have >= 2 dimensions. Received array with %d "
                                   "dimensions.", a->ndim);
        return -1;
    }
    int nd = a->ndim;
    int64_t M = a->shape[nd - 2], N = a->shape[nd - 1];
    mk_outdesc d[3];
    for (int i = 0; i < 3; i++) {
        d[i].dtype = a->dtype;
        d[i].ndim = nd;
        memcpy(d[i].shape, a->shape, sizeof(int64_t) * (size_t)nd);
    }
    d[0].shape[nd - 1] = M;
    d[1].dtype = a->dtype == MK_COMPLEX64 ? MK_FLOAT32 : a->dtype;
    d[1].ndim = nd - 1;
    d[1].shape[nd - 2] = M < N ? M : N;
    d[2].shape[nd - 2] = N;
    bool *bp = bool_param(compute_uv);
    if (!bp) return -1;
    return compute_uv ? mk_prim_make(&svd_def, bp, 1, &a, 3, d, outs) : mk_prim_make(&svd_def, bp, 1, &a, 1, d + 1, outs);
}

static int validate_eig(mk_array *a, bool gpu, const char *P) {
    if (check_cpu(P, gpu) < 0 || check_float_or_complex(a->dtype, P) < 0 || check_matrix(a, P) < 0) return -1;
    if (a->shape[a->ndim - 1] != a->shape[a->ndim - 2]) {
        mk_error_set(MK_ERR_VALUE, "%s Only defined for square matrices.", P);
        return -1;
    }
    return 0;
}

int mk_linalg_eigh(mk_array *a, char uplo, bool vectors, bool gpu, mk_array **outs) {
    if (validate_eig(a, gpu, vectors ? "[linalg::eigh]" : "[linalg::eigvalsh]") < 0) return -1;
    mk_outdesc d[2];
    d[0].dtype = a->dtype == MK_COMPLEX64 ? MK_FLOAT32 : a->dtype;
    d[0].ndim = a->ndim - 1;
    memcpy(d[0].shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
    d[1].dtype = a->dtype;
    d[1].ndim = a->ndim;
    memcpy(d[1].shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
    eigh_params *ep = malloc(sizeof *ep);
    if (!ep) {
        mk_nomem();
        return -1;
    }
    *ep = (eigh_params){uplo, vectors};
    return mk_prim_make(&eigh_def, ep, 1, &a, vectors ? 2 : 1, d, outs);
}

int mk_linalg_eig(mk_array *a, bool vectors, bool gpu, mk_array **outs) {
    if (validate_eig(a, gpu, vectors ? "[linalg::eig]" : "[linalg::eigvals]") < 0) return -1;
    mk_outdesc d[2];
    d[0].dtype = d[1].dtype = MK_COMPLEX64;
    d[0].ndim = a->ndim - 1;
    d[1].ndim = a->ndim;
    memcpy(d[0].shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
    memcpy(d[1].shape, a->shape, sizeof(int64_t) * (size_t)a->ndim);
    bool *bp = bool_param(vectors);
    return bp ? mk_prim_make(&eig_def, bp, 1, &a, vectors ? 2 : 1, d, outs) : -1;
}

static int validate_lu(mk_array *a, bool gpu, const char *P) {
    if (check_cpu(P, gpu) < 0 || check_float(a->dtype, P) < 0 || check_matrix(a, P) < 0) return -1;
    return 0;
}

/* LU, pivots, row indices */
static int lu_helper(mk_array *a, mk_array **outs) {
    int nd = a->ndim;
    int64_t M = a->shape[nd - 2], N = a->shape[nd - 1];
    mk_outdesc d[3];
    for (int i = 0; i < 3; i++) memcpy(d[i].shape, a->shape, sizeof(int64_t) * (size_t)nd);
    d[0].dtype = a->dtype;
    d[0].ndim = nd;
    d[1].dtype = d[2].dtype = MK_UINT32;
    d[1].ndim = nd - 1;
    d[1].shape[nd - 2] = M < N ? M : N;
    d[2].ndim = nd - 1;
    return mk_prim_make(&lu_def, NULL, 1, &a, 3, d, outs);
}

int mk_linalg_lu_factor(mk_array *a, bool gpu, mk_array **outs) {
    mk_array *o[3];
    if (validate_lu(a, gpu, "[linalg::lu_factor]") < 0 || lu_helper(a, o) < 0) return -1;
    outs[0] = o[0];
    outs[1] = o[1];
    mk_decref(o[2]);
    return 0;
}

/* x[..., :r, :c] */
static mk_array *slice_last2(mk_array *x, int64_t r, int64_t c) {
    int64_t start[MK_MAX_NDIM] = {0}, stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
    for (int i = 0; i < x->ndim; i++) {
        stop[i] = x->shape[i];
        step[i] = 1;
    }
    stop[x->ndim - 2] = r;
    stop[x->ndim - 1] = c;
    return mk_slice(x, start, stop, step);
}

int mk_linalg_lu(mk_array *a, bool gpu, mk_array **outs) {
    mk_array *o[3];
    if (validate_lu(a, gpu, "[linalg::lu]") < 0 || lu_helper(a, o) < 0) return -1;
    mk_arena A = {0};
    for (int i = 0; i < 3; i++) mk_ar_keep(&A, o[i]);
    int64_t M = a->shape[a->ndim - 2], N = a->shape[a->ndim - 1], K = M < N ? M : N;
    mk_array *L = mk_ar_keep(&A, mk_tril(o[0], -1)), *U = mk_ar_keep(&A, mk_triu(o[0], 0));
    if (L && U && N != K)
        L = mk_ar_keep(&A, slice_last2(L, M, K));
    else if (L && U && M != K)
        U = mk_ar_keep(&A, slice_last2(U, K, N));
    mk_array *E = mk_ar_keep(&A, mk_eye(M, K, 0, MK_FLOAT32));
    L = mk_ar_add(&A, L, E);
    int rc = -1;
    if (L && U) {
        mk_incref(o[2]);
        outs[0] = o[2];
        outs[1] = mk_ar_out(L);
        outs[2] = mk_ar_out(U);
        rc = 0;
    }
    mk_ar_free(&A);
    return rc;
}

mk_array *mk_linalg_cholesky_inv(mk_array *L, bool upper, bool gpu) {
    const char *P = "[linalg::cholesky_inv]";
    if (check_cpu(P, gpu) < 0 || check_float(L->dtype, P) < 0 || check_matrix(L, P) < 0) return NULL;
    if (L->shape[L->ndim - 1] != L->shape[L->ndim - 2]) {
        mk_error_set(MK_ERR_VALUE, "[linalg::cholesky_inv] Cholesky inverse is only defined for square matrices.");
        return NULL;
    }
    mk_arena A = {0};
    mk_array *Li = mk_ar_keep(&A, mk_linalg_tri_inv(L, upper, gpu)), *Lt = Li ? mk_ar_keep(&A, mk_swapaxes(Li, -1, -2)) : NULL;
    mk_array *r = Lt ? mk_ar_out(upper ? mk_ar_matmul(&A, Li, Lt) : mk_ar_matmul(&A, Lt, Li)) : NULL;
    mk_ar_free(&A);
    return r;
}

static double eps_of(mk_dtype t) { return t == MK_FLOAT64 ? DBL_EPSILON : (double)FLT_EPSILON; }

mk_array *mk_linalg_pinv(mk_array *a, bool gpu) {
    const char *P = "[linalg::pinv]";
    if (check_cpu(P, gpu) < 0 || check_float(a->dtype, P) < 0 || check_matrix(a, P) < 0) return NULL;
    int nd = a->ndim;
    if (a->size == 0) {
        int64_t shape[MK_MAX_NDIM];
        memcpy(shape, a->shape, sizeof(int64_t) * (size_t)nd);
        shape[nd - 1] = a->shape[nd - 2];
        shape[nd - 2] = a->shape[nd - 1];
        return mk_zeros(nd, shape, a->dtype);
    }
    int64_t m = a->shape[nd - 2], n = a->shape[nd - 1], k = m < n ? m : n;
    mk_array *o[3];
    if (mk_linalg_svd(a, true, gpu, o) < 0) return NULL;
    mk_arena A = {0};
    for (int i = 0; i < 3; i++) mk_ar_keep(&A, o[i]);
    mk_array *U = mk_ar_keep(&A, slice_last2(o[0], m, k));
    U = U ? mk_ar_keep(&A, mk_swapaxes(U, -1, -2)) : NULL;
    mk_array *V = mk_ar_keep(&A, slice_last2(o[2], k, n));
    V = V ? mk_ar_keep(&A, mk_swapaxes(V, -1, -2)) : NULL;
    int ax = -2, last = -1;
    mk_array *S = mk_ar_keep(&A, mk_expand_dims(o[1], 1, &ax));
    double rcond = 10.0 * (double)(m > n ? m : n) * eps_of(a->dtype);
    mk_array *mx = S ? mk_ar_keep(&A, mk_reduce(MK_REDUCE_MAX, S, 1, &last, true)) : NULL;
    mk_array *cut = mk_ar_mul(&A, mk_ar_keep(&A, mk_scalar_f64(a->dtype, rcond)), mx);
    mk_array *gt = mk_ar_bin(&A, MK_BINARY_greater, S, cut);
    mk_array *rS = mk_ar_where(&A, gt, mk_ar_un(&A, MK_UNARY_reciprocal, S), mk_ar_keep(&A, mk_scalar_f64(a->dtype, 0)));
    mk_array *r = mk_ar_out(mk_ar_matmul(&A, mk_ar_mul(&A, V, rS), U));
    mk_ar_free(&A);
    return r;
}

static int validate_solve(mk_array *a, mk_array *b, bool gpu, const char *P) {
    char s1[512], s2[512];
    if (check_cpu(P, gpu) < 0) return -1;
    if (a->ndim < 2) {
        mk_error_set(MK_ERR_VALUE, "%s First input must have >= 2 dimensions. Received array with %d dimensions.", P,
                     a->ndim);
        return -1;
    }
    if (b->ndim < 1) {
        mk_error_set(MK_ERR_VALUE, "%s Second input must have >= 1 dimensions. Received array with %d dimensions.",
                     P, b->ndim);
        return -1;
    }
    if (a->shape[a->ndim - 1] != a->shape[a->ndim - 2]) {
        mk_error_set(MK_ERR_VALUE, "%s First input must be a square matrix. Received array with shape %s.", P,
                     mk_shape_str(a->ndim, a->shape, s1, sizeof s1));
        return -1;
    }
    int64_t bl = b->ndim > 1 ? b->shape[b->ndim - 2] : b->shape[b->ndim - 1];
    if (a->shape[a->ndim - 1] != bl) {
        mk_error_set(MK_ERR_VALUE,
                     "%s Last dimension of first input with shape %s must match second to last dimension of second "
                     "input with shape %s.",
                     P, mk_shape_str(a->ndim, a->shape, s1, sizeof s1), mk_shape_str(b->ndim, b->shape, s2, sizeof s2));
        return -1;
    }
    mk_dtype t = mk_promote(a->dtype, b->dtype);
    if (t != MK_FLOAT32 && t != MK_FLOAT64) {
        mk_error_set(MK_ERR_VALUE,
                     "%s Input arrays must promote to float32 or float64.  Received arrays with type %s and %s.", P,
                     mk_dtype_name(a->dtype), mk_dtype_name(b->dtype));
        return -1;
    }
    return 0;
}

mk_array *mk_linalg_solve_triangular(mk_array *a, mk_array *b, bool upper, bool gpu) {
    if (validate_solve(a, b, gpu, "[linalg::solve_triangular]") < 0) return NULL;
    mk_array *ai = mk_linalg_tri_inv(a, upper, gpu);
    if (!ai) return NULL;
    mk_array *r = mk_matmul(ai, b);
    mk_decref(ai);
    return r;
}

mk_array *mk_linalg_solve(mk_array *a, mk_array *b, bool gpu) {
    if (validate_solve(a, b, gpu, "[linalg::solve]") < 0) return NULL;
    mk_array *o[3];
    if (mk_linalg_lu(a, gpu, o) < 0) return NULL;
    mk_arena A = {0};
    for (int i = 0; i < 3; i++) mk_ar_keep(&A, o[i]);
    mk_array *perm = mk_ar_keep(&A, mk_argsort(o[0], -1, true));
    int take_axis = -1, last = -1;
    if (perm && b->ndim >= 2) {
        perm = mk_ar_keep(&A, mk_expand_dims(perm, 1, &last));
        take_axis = -2;
    }
    mk_array *pb = perm ? mk_ar_keep(&A, mk_take_along_axis(b, perm, take_axis, true)) : NULL;
    mk_array *y = pb ? mk_ar_keep(&A, mk_linalg_solve_triangular(o[1], pb, false, gpu)) : NULL;
    mk_array *r = y ? mk_linalg_solve_triangular(o[2], y, true, gpu) : NULL;
    mk_ar_free(&A);
    return r;
}

/* ------------------------------------------------------------ norm */

static mk_dtype at_least_float(mk_dtype t) { return mk_is_inexact(t) ? t : mk_promote(t, MK_FLOAT32); }

static mk_array *l2_norm(mk_arena *A, mk_array *a, int naxes, const int *axes, bool keepdims) {
    mk_array *sq;
    if (a->dtype == MK_COMPLEX64) {
        mk_array *ab = mk_ar_un(A, MK_UNARY_abs, a);
        sq = mk_ar_mul(A, ab, ab);
    } else {
        sq = mk_ar_un(A, MK_UNARY_square, a);
    }
    mk_array *s = sq ? mk_ar_keep(A, mk_reduce(MK_REDUCE_SUM, sq, naxes, axes, keepdims)) : NULL;
    return mk_ar_un(A, MK_UNARY_sqrt, s);
}

static mk_array *reduce1(mk_arena *A, mk_reduce_op op, mk_array *x, int axis, bool keepdims) {
    return x ? mk_ar_keep(A, mk_reduce(op, x, 1, &axis, keepdims)) : NULL;
}

static mk_array *vector_norm(mk_arena *A, mk_array *a, double ord, int naxes, const int *axes, bool keepdims) {
    mk_dtype dt = at_least_float(a->dtype);
    mk_array *r;
    if (ord == 0.0) {
        mk_array *z = mk_ar_keep(A, mk_scalar_i64(MK_INT32, 0));
        mk_array *ne = mk_ar_bin(A, MK_BINARY_not_equal, a, z);
        r = ne ? mk_ar_keep(A, mk_reduce(MK_REDUCE_SUM, ne, naxes, axes, keepdims)) : NULL;
        return mk_ar_cast(A, r, dt);
    }
    if (ord == 2.0) return l2_norm(A, a, naxes, axes, keepdims);
    mk_array *ab = mk_ar_un(A, MK_UNARY_abs, a);
    if (ord == 1.0 || isinf(ord)) {
        mk_reduce_op op = ord == 1.0 ? MK_REDUCE_SUM : ord > 0 ? MK_REDUCE_MAX : MK_REDUCE_MIN;
        r = ab ? mk_ar_keep(A, mk_reduce(op, ab, naxes, axes, keepdims)) : NULL;
        return mk_ar_cast(A, r, dt);
    }
    mk_array *p = mk_ar_bin(A, MK_BINARY_power, ab, mk_ar_keep(A, mk_scalar_f64(dt, ord)));
    r = p ? mk_ar_keep(A, mk_reduce(MK_REDUCE_SUM, p, naxes, axes, keepdims)) : NULL;
    return mk_ar_bin(A, MK_BINARY_power, r, mk_ar_keep(A, mk_scalar_f64(dt, 1.0 / ord)));
}

/* a's two matrix axes moved last (row, col), for the svd-based norms */
static mk_array *matrix_last(mk_arena *A, mk_array *a, int row, int col) {
    mk_array *x = row > col ? mk_ar_keep(A, mk_moveaxis(a, row, -1)) : mk_ar_keep(A, mk_moveaxis(a, col, -1));
    if (!x) return NULL;
    return row > col ? mk_ar_keep(A, mk_moveaxis(x, col, -1)) : mk_ar_keep(A, mk_moveaxis(x, row, -2));
}

static mk_array *singular_values(mk_arena *A, mk_array *x, bool gpu) {
    mk_array *s;
    if (!x || mk_linalg_svd(x, false, gpu, &s) < 0) return NULL;
    return mk_ar_keep(A, s);
}

static mk_array *restore_dims(mk_arena *A, mk_array *x, int row, int col, bool keepdims) {
    if (!x || !keepdims) return x;
    int ax[2] = {row < col ? row : col, row < col ? col : row};
    return mk_ar_keep(A, mk_expand_dims(x, 2, ax));
}

static mk_array *matrix_norm(mk_arena *A, mk_array *a, double ord, const int *axes, bool keepdims, bool gpu) {
    mk_dtype dt = at_least_float(a->dtype);
    int row = axes[0] < 0 ? axes[0] + a->ndim : axes[0], col = axes[1] < 0 ? axes[1] + a->ndim : axes[1];
    if (ord == 1.0 || ord == -1.0) {
        col -= (!keepdims && col > row && col > 0);
        mk_array *s = reduce1(A, MK_REDUCE_SUM, mk_ar_un(A, MK_UNARY_abs, a), row, keepdims);
        return mk_ar_cast(A, reduce1(A, ord > 0 ? MK_REDUCE_MAX : MK_REDUCE_MIN, s, col, keepdims), dt);
    }
    if (isinf(ord)) {
        row -= (!keepdims && row > col && row > 0);
        mk_array *s = reduce1(A, MK_REDUCE_SUM, mk_ar_un(A, MK_UNARY_abs, a), col, keepdims);
        return mk_ar_cast(A, reduce1(A, ord > 0 ? MK_REDUCE_MAX : MK_REDUCE_MIN, s, row, keepdims), dt);
    }
    if (ord == 2.0 || ord == -2.0) {
        mk_array *s = singular_values(A, matrix_last(A, a, row, col), gpu);
        s = reduce1(A, ord > 0 ? MK_REDUCE_MAX : MK_REDUCE_MIN, s, -1, false);
        return mk_ar_cast(A, restore_dims(A, s, row, col, keepdims), dt);
    }
    mk_error_set(MK_ERR_VALUE, "[linalg::norm] Invalid ord %g for matrix norm.", ord);
    return NULL;
}

mk_array *mk_linalg_norm(mk_array *a, int ord_kind, double ord, const char *sord, int naxes, const int *axes,
                         bool keepdims, bool gpu) {
    mk_arena A = {0};
    mk_array *r = NULL;
    int all[MK_MAX_NDIM];
    if (ord_kind == 0) {
        if (naxes < 0) {
            int zero = 0;
            mk_array *f = mk_ar_keep(&A, mk_flatten(a, 0, -1));
            r = f ? l2_norm(&A, f, 1, &zero, keepdims) : NULL;
            if (r && keepdims) {
                int64_t ones[MK_MAX_NDIM];
                for (int i = 0; i < a->ndim; i++) ones[i] = 1;
                r = mk_ar_reshape(&A, r, a->ndim, ones);
            }
        } else if (naxes > 2) {
            mk_error_set(MK_ERR_VALUE, "[linalg::norm] Received too many axes for norm.");
        } else {
            r = l2_norm(&A, a, naxes, axes, keepdims);
        }
        goto done;
    }
    if (naxes < 0) {
        naxes = a->ndim;
        for (int i = 0; i < naxes; i++) all[i] = i;
        axes = all;
    }
    if (ord_kind == 2) {
        if (naxes != 2) {
            mk_error_set(MK_ERR_VALUE,
                         "[linalg::norm] Norm '%s' only supported for matrices, but received %d axis/axes.", sord,
                         naxes);
        } else if (!strcmp(sord, "f") || !strcmp(sord, "fro")) {
            r = l2_norm(&A, a, 2, axes, keepdims);
        } else if (!strcmp(sord, "nuc")) {
            int row = axes[0] < 0 ? axes[0] + a->ndim : axes[0], col = axes[1] < 0 ? axes[1] + a->ndim : axes[1];
            mk_array *s = singular_values(&A, matrix_last(&A, a, row, col), gpu);
            r = restore_dims(&A, reduce1(&A, MK_REDUCE_SUM, s, -1, false), row, col, keepdims);
        } else {
            mk_error_set(MK_ERR_VALUE, "[linalg::norm] Invalid ord value '%s' for matrix norm.", sord);
        }
        goto done;
    }
    if (naxes == 1)
        r = vector_norm(&A, a, ord, 1, axes, keepdims);
    else if (naxes == 2)
        r = matrix_norm(&A, a, ord, axes, keepdims, gpu);
    else
        mk_error_set(MK_ERR_VALUE, "[linalg::norm] Received too many axes for norm.");
done:
    r = mk_ar_out(r);
    mk_ar_free(&A);
    return r;
}

/* ------------------------------------------------------------ cross */

mk_array *mk_linalg_cross(mk_array *a, mk_array *b, int axis) {
    mk_array *const ab[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        int d = mk_norm_axis("linalg::cross", axis, ab[i]->ndim);
        if (d < 0) return NULL;
        if (ab[i]->shape[d] < 2 || ab[i]->shape[d] > 3) {
            mk_error_set(MK_ERR_VALUE, "[linalg::cross] The specified axis must have size 2 or 3.");
            return NULL;
        }
    }
    int da = axis < 0 ? axis + a->ndim : axis, db = axis < 0 ? axis + b->ndim : axis;
    bool a2 = a->shape[da] == 2, b2 = b->shape[db] == 2;
    mk_dtype t = mk_promote(a->dtype, b->dtype);
    int64_t as[MK_MAX_NDIM], bs[MK_MAX_NDIM], os[MK_MAX_NDIM];
    memcpy(as, a->shape, sizeof(int64_t) * (size_t)a->ndim);
    memcpy(bs, b->shape, sizeof(int64_t) * (size_t)b->ndim);
    as[da] = 3;
    bs[db] = 3;
    int n = mk_broadcast_shapes(a->ndim, as, b->ndim, bs, os);
    if (n < 0) return NULL;
    int ax = axis < 0 ? axis + n : axis;
    mk_arena A = {0};
    mk_array *x, *y, *xs[3] = {0}, *ys[3] = {0}, *parts[3], *r = NULL;
    os[ax] = a2 ? 2 : 3;
    x = mk_ar_broadcast(&A, mk_ar_cast(&A, a, t), n, os);
    os[ax] = b2 ? 2 : 3;
    y = mk_ar_broadcast(&A, mk_ar_cast(&A, b, t), n, os);
    if (!x || !y || mk_split_sections(x, a2 ? 2 : 3, ax, xs) < 0) goto done;
    for (int i = 0; i < (a2 ? 2 : 3); i++) mk_ar_keep(&A, xs[i]);
    if (mk_split_sections(y, b2 ? 2 : 3, ax, ys) < 0) goto done;
    for (int i = 0; i < (b2 ? 2 : 3); i++) mk_ar_keep(&A, ys[i]);
    if (a2 && b2) {
        parts[0] = parts[1] = mk_ar_zeros_like(&A, xs[0]);
    } else if (b2) {
        parts[0] = mk_ar_neg(&A, mk_ar_mul(&A, xs[2], ys[1]));
        parts[1] = mk_ar_mul(&A, xs[2], ys[0]);
    } else if (a2) {
        parts[0] = mk_ar_mul(&A, xs[1], ys[2]);
        parts[1] = mk_ar_neg(&A, mk_ar_mul(&A, xs[0], ys[2]));
    } else {
        parts[0] = mk_ar_sub(&A, mk_ar_mul(&A, xs[1], ys[2]), mk_ar_mul(&A, xs[2], ys[1]));
        parts[1] = mk_ar_sub(&A, mk_ar_mul(&A, xs[2], ys[0]), mk_ar_mul(&A, xs[0], ys[2]));
    }
    parts[2] = mk_ar_sub(&A, mk_ar_mul(&A, xs[0], ys[1]), mk_ar_mul(&A, xs[1], ys[0]));
    if (parts[0] && parts[1] && parts[2]) r = mk_concatenate(3, parts, ax, true);
done:
    mk_ar_free(&A);
    return r;
}

/* ------------------------------------------------------------ det, slogdet */

static int validate_det(mk_array *a, bool gpu, const char *P) {
    if (check_cpu(P, gpu) < 0) return -1;
    if (a->dtype == MK_COMPLEX64) {
        mk_error_set(MK_ERR_VALUE, "%s Complex inputs are not supported.", P);
        return -1;
    }
    if (check_matrix(a, P) < 0) return -1;
    if (a->shape[a->ndim - 1] != a->shape[a->ndim - 2]) {
        mk_error_set(MK_ERR_VALUE, "%s Only defined for square matrices.", P);
        return -1;
    }
    return 0;
}

/* a[..., i, j] */
static mk_array *elem(mk_arena *A, mk_array *a, int64_t i, int64_t j) {
    int64_t start[MK_MAX_NDIM] = {0}, stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
    int nd = a->ndim;
    for (int d = 0; d < nd; d++) {
        stop[d] = a->shape[d];
        step[d] = 1;
    }
    start[nd - 2] = i;
    stop[nd - 2] = i + 1;
    start[nd - 1] = j;
    stop[nd - 1] = j + 1;
    mk_array *s = mk_ar_keep(A, mk_slice(a, start, stop, step));
    int ax[2] = {nd - 2, nd - 1};
    return s ? mk_ar_keep(A, mk_squeeze(s, 2, ax)) : NULL;
}

/* The determinant of matrices of at most 3 x 3, by cofactors. */
static mk_array *det_small(mk_arena *A, mk_array *a) {
    int64_t n = a->shape[a->ndim - 1];
    if (n == 0) {
        mk_array *one = mk_ar_keep(A, mk_scalar_f64(a->dtype, 1));
        return mk_ar_broadcast(A, one, a->ndim - 2, a->shape);
    }
    if (n == 1) return elem(A, a, 0, 0);
#define E(i, j) elem(A, a, i, j)
#define M2(p, q, r, s) mk_ar_sub(A, mk_ar_mul(A, p, q), mk_ar_mul(A, r, s))
    if (n == 2) return M2(E(0, 0), E(1, 1), E(0, 1), E(1, 0));
    mk_array *t0 = mk_ar_mul(A, E(0, 0), M2(E(1, 1), E(2, 2), E(1, 2), E(2, 1)));
    mk_array *t1 = mk_ar_mul(A, E(0, 1), M2(E(1, 0), E(2, 2), E(1, 2), E(2, 0)));
    mk_array *t2 = mk_ar_mul(A, E(0, 2), M2(E(1, 0), E(2, 1), E(1, 1), E(2, 0)));
#undef E
#undef M2
    return mk_ar_add(A, mk_ar_sub(A, t0, t1), t2);
}

static int slogdet_impl(mk_arena *A, mk_array *x, bool gpu, mk_array **sign, mk_array **logabs) {
    int64_t n = x->shape[x->ndim - 1];
    mk_dtype dt = x->dtype;
    if (n <= 3) {
        mk_array *raw = det_small(A, x);
        *sign = mk_ar_un(A, MK_UNARY_sign, raw);
        *logabs = mk_ar_un(A, MK_UNARY_log, mk_ar_un(A, MK_UNARY_abs, raw));
        return *sign && *logabs ? 0 : -1;
    }
    mk_array *o[2];
    if (mk_linalg_lu_factor(x, gpu, o) < 0) return -1;
    mk_ar_keep(A, o[0]);
    mk_ar_keep(A, o[1]);
    int last = -1;
    mk_array *diag = mk_ar_keep(A, mk_diagonal(o[0], 0, -2, -1));
    mk_array *iota = mk_ar_keep(A, mk_arange(0, (double)n, 1, MK_UINT32));
    mk_array *ne = mk_ar_bin(A, MK_BINARY_not_equal, o[1], iota);
    mk_array *parity = mk_ar_cast(A, ne ? mk_ar_keep(A, mk_reduce(MK_REDUCE_SUM, ne, 1, &last, false)) : NULL, MK_INT32);
    mk_array *zf = mk_ar_keep(A, mk_scalar_f64(dt, 0));
    mk_array *neg = mk_ar_bin(A, MK_BINARY_less, diag, zf);
    mk_array *nneg = mk_ar_cast(A, neg ? mk_ar_keep(A, mk_reduce(MK_REDUCE_SUM, neg, 1, &last, false)) : NULL, MK_INT32);
    mk_array *total = mk_ar_add(A, parity, nneg);
    mk_array *two = mk_ar_keep(A, mk_scalar_i64(MK_INT32, 2)), *one = mk_ar_keep(A, mk_scalar_i64(MK_INT32, 1));
    mk_array *sv = mk_ar_cast(A, mk_ar_sub(A, one, mk_ar_mul(A, two, mk_ar_bin(A, MK_BINARY_remainder, total, two))), dt);
    mk_array *la = mk_ar_un(A, MK_UNARY_log, mk_ar_un(A, MK_UNARY_abs, diag));
    la = la ? mk_ar_keep(A, mk_reduce(MK_REDUCE_SUM, la, 1, &last, false)) : NULL;
    mk_array *eq = mk_ar_bin(A, MK_BINARY_equal, diag, zf);
    mk_array *isz = eq ? mk_ar_keep(A, mk_reduce(MK_REDUCE_ANY, eq, 1, &last, false)) : NULL;
    *sign = mk_ar_where(A, isz, zf, sv);
    *logabs = mk_ar_where(A, isz, mk_ar_keep(A, mk_scalar_f64(dt, -INFINITY)), la);
    return *sign && *logabs ? 0 : -1;
}

int mk_linalg_slogdet(mk_array *a, bool gpu, mk_array **outs) {
    if (validate_det(a, gpu, "[linalg::slogdet]") < 0) return -1;
    mk_arena A = {0};
    mk_array *x = mk_ar_cast(&A, a, at_least_float(a->dtype)), *s = NULL, *l = NULL;
    int rc = x ? slogdet_impl(&A, x, gpu, &s, &l) : -1;
    if (rc == 0) {
        outs[0] = mk_ar_out(s);
        outs[1] = mk_ar_out(l);
    }
    mk_ar_free(&A);
    return rc;
}

mk_array *mk_linalg_det(mk_array *a, bool gpu) {
    if (validate_det(a, gpu, "[linalg::det]") < 0) return NULL;
    mk_arena A = {0};
    mk_array *x = mk_ar_cast(&A, a, at_least_float(a->dtype)), *r = NULL, *s, *l;
    if (x && x->shape[x->ndim - 1] <= 3)
        r = det_small(&A, x);
    else if (x && slogdet_impl(&A, x, gpu, &s, &l) == 0)
        r = mk_ar_mul(&A, s, mk_ar_un(&A, MK_UNARY_exp, l));
    r = mk_ar_out(r);
    mk_ar_free(&A);
    return r;
}

/* ------------------------------------------------------------ vmap rules */

/* The batch axis to the front (MLX's rules move it to 0 when it is one of
 * the matrix axes, or always). */
static mk_array *batch_front(mk_arena *A, mk_array *x, int ax) {
    return ax > 0 ? mk_ar_keep(A, mk_moveaxis(x, ax, 0)) : x;
}

static int vmap_outs(mk_arena *A, int rc, int n, mk_array **r, int ax, mk_array **outs, int *out_axes) {
    if (rc == 0)
        for (int i = 0; i < n; i++) {
            outs[i] = r[i];
            out_axes[i] = ax;
        }
    mk_ar_free(A);
    return rc;
}

static int inverse_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const inv_params *ip = p->params;
    mk_arena A = {0};
    mk_array *x = batch_front(&A, in[0], axes[0]), *r = x ? inv_impl(x, ip->tri, ip->upper, false) : NULL;
    return vmap_outs(&A, r ? 0 : -1, 1, &r, axes[0] >= 0 ? 0 : -1, outs, out_axes);
}

static int cholesky_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    mk_arena A = {0};
    mk_array *x = batch_front(&A, in[0], axes[0]);
    mk_array *r = x ? mk_linalg_cholesky(x, *(const bool *)p->params, false) : NULL;
    return vmap_outs(&A, r ? 0 : -1, 1, &r, axes[0] >= 0 ? 0 : -1, outs, out_axes);
}

static int svd_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    mk_arena A = {0};
    bool uv = *(const bool *)p->params;
    mk_array *x = batch_front(&A, in[0], axes[0]), *r[3];
    int rc = x ? mk_linalg_svd(x, uv, false, r) : -1;
    return vmap_outs(&A, rc, uv ? 3 : 1, r, axes[0] >= 0 ? 0 : -1, outs, out_axes);
}

static int eig_like_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes,
                         bool herm) {
    mk_arena A = {0};
    bool move = axes[0] >= in[0]->ndim - 2;
    mk_array *x = move ? batch_front(&A, in[0], axes[0]) : in[0], *r[2];
    int ax = move ? 0 : axes[0], rc;
    if (herm) {
        const eigh_params *ep = p->params;
        rc = mk_linalg_eigh(x, ep->uplo, ep->vectors, false, r);
    } else {
        rc = mk_linalg_eig(x, *(const bool *)p->params, false, r);
    }
    return vmap_outs(&A, rc, p->noutputs, r, ax, outs, out_axes);
}

static int eigh_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    return eig_like_vmap(p, in, axes, outs, out_axes, true);
}

static int eig_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    return eig_like_vmap(p, in, axes, outs, out_axes, false);
}
