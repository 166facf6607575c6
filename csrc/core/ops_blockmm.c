/* block_masked_mm: a @ b with block masks on the operands and the output
 * (MLX's block_masked_mm, same checks and messages). mkpy composes it: each
 * (..., ty, tx) mask is expanded to element level (every entry covering a
 * block_size x block_size tile, cut to the matrix), cast to the product's
 * dtype and multiplied in, which gives the values and the gradients (of the
 * operands and of float masks) through the ops' own rules. */
#include <string.h>

#include "linalg.h"
#include "transforms.h"

/* mask (..., ty, tx) expanded to (bshape..., Y, X) of dtype t */
static mk_array *expand_mask(mk_arena *A, mk_array *mask, int nb, const int64_t *bshape, int64_t bs, int64_t Y,
                             int64_t X, mk_dtype t) {
    if (mask->ndim < 2) {
        mk_error_set(MK_ERR_VALUE, "[block_masked_mm] Masks must have at least 2 dimensions.");
        return NULL;
    }
    int64_t ty = (Y + bs - 1) / bs, tx = (X + bs - 1) / bs, shape[MK_MAX_NDIM + 2];
    memcpy(shape, bshape, sizeof(int64_t) * (size_t)nb);
    shape[nb] = ty;
    shape[nb + 1] = tx;
    mk_array *m = mk_ar_broadcast(A, mk_ar_cast(A, mask, t), nb + 2, shape);
    if (!m) return NULL;
    int ax[2] = {nb + 1, nb + 3};
    m = mk_ar_keep(A, mk_expand_dims(m, 2, ax)); /* (..., ty, 1, tx, 1) */
    if (!m) return NULL;
    int64_t big[MK_MAX_NDIM + 4];
    memcpy(big, bshape, sizeof(int64_t) * (size_t)nb);
    big[nb] = ty, big[nb + 1] = bs, big[nb + 2] = tx, big[nb + 3] = bs;
    if (nb + 4 > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[block_masked_mm] Too many dimensions.");
        return NULL;
    }
    m = mk_ar_broadcast(A, m, nb + 4, big);
    shape[nb] = ty * bs;
    shape[nb + 1] = tx * bs;
    m = mk_ar_reshape(A, m, nb + 2, shape);
    if (!m) return NULL;
    int64_t start[MK_MAX_NDIM] = {0}, stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
    for (int i = 0; i < nb + 2; i++) stop[i] = m->shape[i], step[i] = 1;
    stop[nb] = Y;
    stop[nb + 1] = X;
    return mk_ar_keep(A, mk_slice(m, start, stop, step));
}

mk_array *mk_block_masked_mm(mk_array *a, mk_array *b, int block_size, mk_array *mask_out, mk_array *mask_lhs,
                             mk_array *mask_rhs) {
    if (!mask_out && !mask_lhs && !mask_rhs) return mk_matmul(a, b);
    if (block_size != 32 && block_size != 64) {
        mk_error_set(MK_ERR_VALUE, "[block_masked_mm] Only block_sizes 32, 64 are supported.Got block size %d.",
                     block_size);
        return NULL;
    }
    if (a->ndim == 0 || b->ndim == 0) {
        mk_error_set(MK_ERR_VALUE,
                     "[block_masked_mm] Got 0 dimension input. Inputs must have at least one dimension.");
        return NULL;
    }
    mk_arena A = {0};
    mk_array *out = NULL;
    bool a1 = a->ndim == 1, b1 = b->ndim == 1;
    int zero = 0, one = 1, m2 = -2, m1 = -1;
    mk_array *x = a1 ? mk_ar_keep(&A, mk_expand_dims(a, 1, &zero)) : a;
    mk_array *y = b1 ? mk_ar_keep(&A, mk_expand_dims(b, 1, &one)) : b;
    if (!x || !y) goto done;
    if (x->shape[x->ndim - 1] != y->shape[y->ndim - 2]) {
        char s1[512], s2[512];
        mk_error_set(MK_ERR_VALUE,
                     "[block_masked_mm] Last dimension of first input with shape %s must match second to last "
                     "dimension of second input with shape %s.",
                     mk_shape_str(x->ndim, x->shape, s1, sizeof s1), mk_shape_str(y->ndim, y->shape, s2, sizeof s2));
        goto done;
    }
    mk_dtype t = mk_promote(a->dtype, b->dtype);
    if (!mk_is_float(t)) {
        mk_error_set(MK_ERR_VALUE,
                     "[block_masked_mm] Only real floating point types are supported but %s and %s were provided "
                     "which results in %s, which is not a real floating point type.",
                     mk_dtype_name(a->dtype), mk_dtype_name(b->dtype), mk_dtype_name(t));
        goto done;
    }
    x = mk_ar_cast(&A, x, t);
    y = mk_ar_cast(&A, y, t);
    if (!x || !y) goto done;
    int64_t bshape[MK_MAX_NDIM];
    int nb = mk_broadcast_shapes(x->ndim - 2, x->shape, y->ndim - 2, y->shape, bshape);
    if (nb < 0) goto done;
    int64_t M = x->shape[x->ndim - 2], K = x->shape[x->ndim - 1], N = y->shape[y->ndim - 1];
    if (mask_lhs) {
        mk_array *ml = a1 ? mk_ar_keep(&A, mk_expand_dims(mask_lhs, 1, &m2)) : mask_lhs;
        mk_array *e = ml ? expand_mask(&A, ml, nb, bshape, block_size, M, K, t) : NULL;
        if (!(x = mk_ar_mul(&A, e, x))) goto done;
    }
    if (mask_rhs) {
        mk_array *mr = b1 ? mk_ar_keep(&A, mk_expand_dims(mask_rhs, 1, &m1)) : mask_rhs;
        mk_array *e = mr ? expand_mask(&A, mr, nb, bshape, block_size, K, N, t) : NULL;
        if (!(y = mk_ar_mul(&A, e, y))) goto done;
    }
    mk_array *r = mk_ar_matmul(&A, x, y);
    if (r && mask_out) {
        mk_array *mo = mask_out;
        if (a1 || b1) {
            int ex[2], n = 0;
            if (a1) ex[n++] = -2;
            if (b1) ex[n++] = -1;
            mo = mk_ar_keep(&A, mk_expand_dims(mo, n, ex));
        }
        mk_array *e = mo ? expand_mask(&A, mo, nb, bshape, block_size, M, N, t) : NULL;
        r = mk_ar_mul(&A, r, e);
    }
    if (r && (a1 || b1)) {
        int axes[2], n = 0;
        if (a1) axes[n++] = r->ndim - 2;
        if (b1) axes[n++] = r->ndim - 1;
        r = mk_ar_keep(&A, mk_squeeze(r, n, axes));
    }
    out = mk_ar_out(r);
done:
    mk_ar_free(&A);
    return out;
}
