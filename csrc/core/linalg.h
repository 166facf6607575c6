/* mx.linalg (ops_lapack.c) and einsum (einsum.c).
 *
 * The factorizations are primitives evaluated through LAPACK (OpenBLAS's
 * Fortran symbols); the rest is composed of other ops, as MLX composes them.
 * MLX runs most of these on the CPU only and refuses the default GPU stream:
 * the binding resolves the stream and passes `gpu`, true when it is a GPU
 * stream, and the constructor raises MLX's "[linalg::inv] This op is not yet
 * supported on the GPU. Explicitly pass a CPU stream to run it." Constructors
 * return new references (or fill outs[] with them) and NULL / -1 on error. */
#ifndef MK_LINALG_H
#define MK_LINALG_H

#include "ops.h"

/* norm: ord_kind 0 none, 1 a number (ord), 2 a string (sord: "fro", "f",
 * "nuc"); naxes < 0: no axis given. */
mk_array *mk_linalg_norm(mk_array *a, int ord_kind, double ord, const char *sord, int naxes, const int *axes,
                         bool keepdims, bool gpu);
int mk_linalg_qr(mk_array *a, bool gpu, mk_array **outs);                  /* Q, R */
int mk_linalg_svd(mk_array *a, bool compute_uv, bool gpu, mk_array **outs); /* U, S, Vt or S */
mk_array *mk_linalg_inv(mk_array *a, bool gpu);
mk_array *mk_linalg_tri_inv(mk_array *a, bool upper, bool gpu);
mk_array *mk_linalg_cholesky(mk_array *a, bool upper, bool gpu);
mk_array *mk_linalg_cholesky_inv(mk_array *a, bool upper, bool gpu);
mk_array *mk_linalg_pinv(mk_array *a, bool gpu);
mk_array *mk_linalg_solve(mk_array *a, mk_array *b, bool gpu);
mk_array *mk_linalg_solve_triangular(mk_array *a, mk_array *b, bool upper, bool gpu);
int mk_linalg_lu(mk_array *a, bool gpu, mk_array **outs);        /* P (row indices), L, U */
int mk_linalg_lu_factor(mk_array *a, bool gpu, mk_array **outs); /* LU, pivots */
/* uplo: 'L' or 'U'. vectors false: eigvalsh (outs[0] only). */
int mk_linalg_eigh(mk_array *a, char uplo, bool vectors, bool gpu, mk_array **outs);
int mk_linalg_eig(mk_array *a, bool vectors, bool gpu, mk_array **outs);
mk_array *mk_linalg_cross(mk_array *a, mk_array *b, int axis);
mk_array *mk_linalg_det(mk_array *a, bool gpu);
int mk_linalg_slogdet(mk_array *a, bool gpu, mk_array **outs); /* sign, logabsdet */

/* einsum (einsum.c). einsum_path gives the contraction path as npath pairs
 * (or singletons: path[i][1] < 0) and MLX's report string (malloc'd). */
mk_array *mk_einsum(const char *subscripts, int n, mk_array *const *operands);
int mk_einsum_path(const char *subscripts, int n, mk_array *const *operands, int (**path)[2], int *npath,
                   char **report);

/* MLX's block_masked_mm (ops_blockmm.c); masks may be NULL. */
mk_array *mk_block_masked_mm(mk_array *a, mk_array *b, int block_size, mk_array *mask_out, mk_array *mask_lhs,
                             mk_array *mask_rhs);

/* random.multivariate_normal (random_mvn.c): MLX's composition through the SVD. */
mk_array *mk_random_multivariate_normal(mk_array *mean, mk_array *cov, int nshape, const int64_t *shape,
                                        mk_dtype dtype, mk_array *key, bool gpu);

#endif
