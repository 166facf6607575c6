/* random.multivariate_normal, composed as MLX composes it: the square root of
 * the covariance from its SVD (U * sqrt(S) @ Vt, in float32), standard normal
 * samples of the broadcast batch shape times that root, plus the mean. The
 * SVD is a CPU-only op in MLX, so a GPU stream raises through it. */
#include "linalg.h"

mk_array *mk_random_multivariate_normal(mk_array *mean, mk_array *cov, int nshape, const int64_t *shape,
                                        mk_dtype dtype, mk_array *key, bool gpu) {
    if (dtype != MK_FLOAT32) {
        mk_error_set(MK_ERR_VALUE, "[multivariate_normal] dtype must be float32.");
        return NULL;
    }
    if (mean->ndim < 1) {
        mk_error_set(MK_ERR_VALUE, "[multivariate_normal] mean must have at least one dimension.");
        return NULL;
    }
    if (cov->ndim < 2) {
        mk_error_set(MK_ERR_VALUE, "[multivariate_normal] cov must have at least two dimensions.");
        return NULL;
    }
    int64_t n = mean->shape[mean->ndim - 1];
    if (cov->shape[cov->ndim - 1] != cov->shape[cov->ndim - 2]) {
        mk_error_set(MK_ERR_VALUE, "[multivariate_normal] last two dimensions of cov must be equal.");
        return NULL;
    }
    if (n != cov->shape[cov->ndim - 1]) {
        mk_error_set(MK_ERR_VALUE, "[multivariate_normal] mean and cov must have compatible shapes.");
        return NULL;
    }
    int64_t b1[MK_MAX_NDIM], out_shape[MK_MAX_NDIM];
    int n1 = mk_broadcast_shapes(cov->ndim - 2, cov->shape, mean->ndim - 1, mean->shape, b1);
    if (n1 < 0) return NULL;
    int nout = mk_broadcast_shapes(n1, b1, nshape, shape, out_shape);
    if (nout < 0) return NULL;
    if (nout + 1 > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[multivariate_normal] Arrays of more than %d dimensions are not supported.",
                     MK_MAX_NDIM);
        return NULL;
    }
    out_shape[nout++] = n;

    mk_array *c32 = NULL, *usv[3] = {NULL, NULL, NULL}, *root = NULL, *z = NULL, *r = NULL;
    if (!(c32 = mk_astype(cov, MK_FLOAT32))) goto error;
    if (mk_linalg_svd(c32, true, gpu, usv) < 0) goto error;
    {
        int ax = -2;
        mk_array *s = mk_unary(MK_UNARY_sqrt, usv[1]);
        mk_array *se = s ? mk_expand_dims(s, 1, &ax) : NULL;
        mk_xdecref(s);
        mk_array *us = se ? mk_binary(MK_BINARY_multiply, usv[0], se) : NULL;
        mk_xdecref(se);
        mk_array *m = us ? mk_matmul(us, usv[2]) : NULL;
        mk_xdecref(us);
        root = m ? mk_astype(m, dtype) : NULL;
        mk_xdecref(m);
        if (!root) goto error;
    }
    if (!(z = mk_random_normal(nout, out_shape, dtype, NULL, NULL, key))) goto error;
    {
        int ax = -2;
        mk_array *ze = mk_expand_dims(z, 1, &ax);
        mk_array *p = ze ? mk_matmul(ze, root) : NULL;
        mk_xdecref(ze);
        mk_array *sq = p ? mk_squeeze(p, 1, &ax) : NULL;
        mk_xdecref(p);
        r = sq ? mk_binary(MK_BINARY_add, mean, sq) : NULL;
        mk_xdecref(sq);
    }
error:
    mk_xdecref(c32);
    for (int i = 0; i < 3; i++) mk_xdecref(usv[i]);
    mk_xdecref(root);
    mk_xdecref(z);
    return r;
}
