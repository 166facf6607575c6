/* Ops MLX's tests use that compose the other families' ops (ops_extra.c):
 * windows, divmod, as_strided, hadamard_transform, median, roll, kron,
 * dynamic slices, count_nonzero, logical_xor, trunc, flip,
 * meshgrid, nan_to_num, diff, trace, vecdot and depends. Each follows MLX's
 * composition, so dtypes, shapes and messages are MLX's. */
#ifndef MK_OPS_EXTRA_H
#define MK_OPS_EXTRA_H

#include "ops.h"

/* MLX's dims are C ints: a computed dimension beyond int32 is an
 * OverflowError "[op] Shape dimension V is outside the supported range ...".
 * Returns 0 or -1. */
int mk_check_dim(const char *op, int64_t v);

typedef enum { MK_WIN_HANNING, MK_WIN_HAMMING, MK_WIN_BARTLETT, MK_WIN_BLACKMAN } mk_window_kind;
mk_array *mk_window(mk_window_kind kind, int64_t M);
/* Quotient (floor_divide) and remainder, as one call. Returns 0 or -1. */
int mk_divmod(mk_array *a, mk_array *b, mk_array **quot, mk_array **rem);
/* A view of x's elements (row-major order) with the given shape, strides and
 * offset, all in elements; nothing is checked against the buffer, as MLX. */
mk_array *mk_as_strided(mk_array *x, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset);
mk_array *mk_hadamard(mk_array *x, bool has_scale, float scale);
/* naxes < 0: all axes. */
mk_array *mk_median(mk_array *x, int naxes, const int *axes, bool keepdims);
/* naxes < 0: the flattened array rolled by the sum of the shifts. */
mk_array *mk_roll(mk_array *x, int nshift, const int64_t *shift, int naxes, const int *axes);
mk_array *mk_kron(mk_array *a, mk_array *b);
/* MLX's slice(a, start_indices, axes, slice_size) and slice_update. */
mk_array *mk_dynamic_slice(mk_array *x, mk_array *start, int naxes, const int *axes, int nsize,
                           const int64_t *sizes);
mk_array *mk_dynamic_slice_update(mk_array *x, mk_array *update, mk_array *start, int naxes, const int *axes);
mk_array *mk_count_nonzero(mk_array *x, int naxes, const int *axes, bool keepdims);
mk_array *mk_logical_xor(mk_array *a, mk_array *b);
mk_array *mk_trunc(mk_array *x);
mk_array *mk_flip(mk_array *x, int naxes, const int *axes); /* naxes < 0: all */
/* n outputs; ij: "ij" indexing, else "xy". */
int mk_meshgrid(int n, mk_array *const *xs, bool sparse, bool ij, mk_array **outs);
mk_array *mk_nan_to_num(mk_array *x, float nan, bool has_posinf, float posinf, bool has_neginf, float neginf);
mk_array *mk_diff(mk_array *x, int n, int axis);
/* dtype < 0: x's dtype. */
mk_array *mk_trace(mk_array *x, int offset, int axis1, int axis2, int dtype);
mk_array *mk_vecdot(mk_array *a, mk_array *b, int axis);
/* outs[i] has the value of ins[i] and is computed only after deps (n outputs). */
int mk_depends(int n, mk_array *const *ins, int nd, mk_array *const *deps, mk_array **outs);

#endif
