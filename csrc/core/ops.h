/* Op constructors. Each follows MLX's recipe: validate, promote, broadcast,
 * then create a lazy node. All return a new reference, or NULL with the
 * error set (messages worded as MLX's: "[reshape] ..."). Inputs are
 * borrowed. One file per op family implements them. */
#ifndef MK_OPS_H
#define MK_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "array.h"

/* ---- element-wise (ops_unary.c, ops_binary.c) -------------------------- */

/* X(name): the unary ops, in one list shared with the binding layer.
 * round is listed apart because its Python function also takes decimals. */
#define MK_UNARY_OPS(X) MK_UNARY_PLAIN_OPS(X) X(round)
#define MK_UNARY_PLAIN_OPS(X)                                                                          \
    X(abs) X(negative) X(sign) X(square) X(sqrt) X(rsqrt) X(reciprocal) X(exp) X(expm1) X(log)         \
    X(log1p) X(log2) X(log10) X(sin) X(cos) X(tan) X(arcsin) X(arccos) X(arctan) X(sinh) X(cosh)       \
    X(tanh) X(arcsinh) X(arccosh) X(arctanh) X(sigmoid) X(erf) X(erfinv) X(floor) X(ceil)             \
    X(isnan) X(isinf) X(isfinite) X(isposinf) X(isneginf) X(logical_not) X(bitwise_invert) X(real)   \
    X(imag) X(conjugate) X(degrees) X(radians) X(stop_gradient)

typedef enum {
#define X(name) MK_UNARY_##name,
    MK_UNARY_OPS(X)
#undef X
    MK_NUNARY
} mk_unary_op;

#define MK_BINARY_OPS(X)                                                                               \
    X(add) X(subtract) X(multiply) X(divide) X(floor_divide) X(remainder) X(power) X(arctan2)         \
    X(maximum) X(minimum) X(equal) X(not_equal) X(greater) X(greater_equal) X(less) X(less_equal)     \
    X(logical_and) X(logical_or) X(bitwise_and) X(bitwise_or) X(bitwise_xor) X(left_shift)           \
    X(right_shift) X(logaddexp)

typedef enum {
#define X(name) MK_BINARY_##name,
    MK_BINARY_OPS(X)
#undef X
    MK_NBINARY
} mk_binary_op;

extern const char *const mk_unary_names[MK_NUNARY];
extern const char *const mk_binary_names[MK_NBINARY];

mk_array *mk_unary(mk_unary_op op, mk_array *x);
mk_array *mk_binary(mk_binary_op op, mk_array *a, mk_array *b);
mk_array *mk_astype(mk_array *x, mk_dtype dtype);
mk_array *mk_where(mk_array *cond, mk_array *x, mk_array *y);
/* A copy with fresh row-contiguous storage (lazy). */
mk_array *mk_copy(mk_array *x);
/* x itself (new reference) when already of that dtype, else astype. */
mk_array *mk_as_dtype(mk_array *x, mk_dtype dtype);

/* Broadcast shape of two shapes; returns ndim or -1 with
 * "[broadcast_shapes] Shapes (2,3) and (4,5) cannot be broadcast." */
int mk_broadcast_shapes(int na, const int64_t *a, int nb, const int64_t *b, int64_t *out);
/* Formats a shape as "(2,3)" into buf. */
const char *mk_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* ---- creation (ops_create.c) ------------------------------------------- */
mk_array *mk_full(int ndim, const int64_t *shape, mk_array *value, mk_dtype dtype);
mk_array *mk_zeros(int ndim, const int64_t *shape, mk_dtype dtype);
mk_array *mk_ones(int ndim, const int64_t *shape, mk_dtype dtype);
mk_array *mk_arange(double start, double stop, double step, mk_dtype dtype);
mk_array *mk_linspace(double start, double stop, int64_t num, mk_dtype dtype);
/* linspace with numpy/MLX's endpoint flag (mk_linspace has endpoint=true). */
mk_array *mk_linspace_ex(double start, double stop, int64_t num, bool endpoint, mk_dtype dtype);
mk_array *mk_eye(int64_t n, int64_t m, int64_t k, mk_dtype dtype);
mk_array *mk_tri(int64_t n, int64_t m, int64_t k, mk_dtype dtype);
mk_array *mk_tril(mk_array *x, int64_t k);
mk_array *mk_triu(mk_array *x, int64_t k);

/* ---- reductions (ops_reduce.c) ----------------------------------------- */
typedef enum {
    MK_REDUCE_SUM,
    MK_REDUCE_PROD,
    MK_REDUCE_MAX,
    MK_REDUCE_MIN,
    MK_REDUCE_ALL,
    MK_REDUCE_ANY,
} mk_reduce_op;
/* axes: the axes to reduce (negative allowed); naxes < 0 means all axes. */
mk_array *mk_reduce(mk_reduce_op op, mk_array *x, int naxes, const int *axes, bool keepdims);
mk_array *mk_mean(mk_array *x, int naxes, const int *axes, bool keepdims);
/* The float32 sum mk_reduce gives for one of `rows` contiguous rows of n floats (last axis). */
float mk_sum_row_f32(const float *x, int64_t n, int64_t rows);
/* The parts mk_sum_row_f32 splits such a row into (1 unless few rows are long: the GPU's norms). */
int64_t mk_sum_row_parts(int64_t n, int64_t rows);
mk_array *mk_var(mk_array *x, int naxes, const int *axes, bool keepdims, int ddof);
mk_array *mk_std(mk_array *x, int naxes, const int *axes, bool keepdims, int ddof);
mk_array *mk_logsumexp(mk_array *x, int naxes, const int *axes, bool keepdims);
mk_array *mk_softmax(mk_array *x, int naxes, const int *axes, bool precise);
/* axis < 0 after normalisation means "flattened". */
mk_array *mk_argmax(mk_array *x, int axis, bool has_axis, bool keepdims);
mk_array *mk_argmin(mk_array *x, int axis, bool has_axis, bool keepdims);

/* ---- shape and views (ops_shape.c) -------------------------------------- */
mk_array *mk_reshape(mk_array *x, int ndim, const int64_t *shape); /* one -1 allowed */
/* Whether reshape's evaluator makes evaluated x of this (resolved) shape a
 * view (numpy's no-copy rule) rather than a copy. */
bool mk_reshape_nocopy(const mk_array *x, int ndim, const int64_t *shape);
mk_array *mk_transpose(mk_array *x, int naxes, const int *axes);    /* naxes < 0: reverse */
mk_array *mk_swapaxes(mk_array *x, int a, int b);
mk_array *mk_moveaxis(mk_array *x, int src, int dst);
mk_array *mk_expand_dims(mk_array *x, int naxes, const int *axes);
mk_array *mk_squeeze(mk_array *x, int naxes, const int *axes); /* naxes < 0: all size-1 */
mk_array *mk_flatten(mk_array *x, int start_axis, int end_axis);
/* MLX's unflatten: axis split into shape (one -1 inferred); the other dims follow a shapeless replay. */
mk_array *mk_unflatten(mk_array *x, int axis, int ndim, const int64_t *shape);
mk_array *mk_broadcast_to(mk_array *x, int ndim, const int64_t *shape);
/* The diagonals at offset between axis1 and axis2 (a view; the diagonal is the
 * last dim of the result), and MLX's diag: 1-D -> matrix with x on diagonal k,
 * 2-D -> its k-th diagonal (ops_view.c). */
mk_array *mk_diagonal(mk_array *x, int64_t offset, int axis1, int axis2);
mk_array *mk_diag(mk_array *x, int64_t k);
/* The bytes of x read as another dtype (MLX's view): the last axis scales by
 * the ratio of the item sizes. */
mk_array *mk_view_dtype(mk_array *x, mk_dtype dtype);
/* MLX's contiguous(a, allow_col_major): row-contiguous (or, allowed, column-
 * contiguous) layout; shares x's buffer when it already has it (lazy). */
mk_array *mk_contiguous(mk_array *x, bool allow_col_major);
mk_array *mk_concatenate(int n, mk_array *const *xs, int axis, bool has_axis);
mk_array *mk_stack(int n, mk_array *const *xs, int axis);
/* Splits at the given indices (nidx index positions along axis): nidx + 1 parts into outs.
 * Indices are normalised and clamped as slice bounds (numpy's split). */
int mk_split(mk_array *x, int nidx, const int64_t *indices, int axis, mk_array **outs);
/* Splits into `sections` equal parts (an error if the axis does not divide). */
int mk_split_sections(mk_array *x, int64_t sections, int axis, mk_array **outs);
mk_array *mk_tile(mk_array *x, int nreps, const int64_t *reps);
mk_array *mk_repeat(mk_array *x, int64_t repeats, int axis, bool has_axis);
/* pad_width: ndim pairs (before, after); mode "constant" with value. */
mk_array *mk_pad(mk_array *x, const int64_t (*pad_width)[2], mk_array *value);
typedef enum { MK_PAD_CONSTANT, MK_PAD_EDGE, MK_PAD_REFLECT, MK_PAD_SYMMETRIC } mk_pad_mode;
/* Any mode; value is used by MK_PAD_CONSTANT only (may be NULL otherwise). */
mk_array *mk_pad_ex(mk_array *x, const int64_t (*pad_width)[2], mk_array *value, mk_pad_mode mode);
/* Copies the evaluated array src into dst (memory of src's dtype), element
 * i of src going to dst[sum(i_k * dst_strides[k])], on the thread pool. */
void mk_copy_into(const mk_array *src, void *dst, const int64_t *dst_strides);
/* Basic slicing: start/stop/step per axis, already normalised by the caller
 * (start in [0, dim], stop in [-1, dim], step != 0), as numpy's slice.indices. */
mk_array *mk_slice(mk_array *x, const int64_t *start, const int64_t *stop, const int64_t *step);

/* ---- gathers and scatters (ops_index.c) ---------------------------------- */
/* An indexing plan over the dims of x: each dim is sliced (start, step, len),
 * fixed at one in-range index (MK_IDX_INT, start), or indexed by integer
 * array `arr`. The index arrays broadcast together to a shape B. The gather
 * has shape rest[:bpos] + B + rest[bpos:], where rest lists the sliced dims'
 * lengths in order (numpy's placement of advanced-index dims is the caller's
 * choice of bpos). Array indices wrap once when negative; gathers clamp what
 * is still out of range to the axis, scatters drop those updates. */
typedef enum { MK_IDX_SLICE, MK_IDX_INT, MK_IDX_ARRAY } mk_idx_kind;
typedef struct {
    int kind;            /* mk_idx_kind */
    int arr;             /* MK_IDX_ARRAY: which index array */
    int64_t start, step, len;
} mk_index_dim;
typedef enum { MK_SCATTER_NONE, MK_SCATTER_SUM, MK_SCATTER_PROD, MK_SCATTER_MAX, MK_SCATTER_MIN } mk_scatter_op;

mk_array *mk_gather(mk_array *x, const mk_index_dim *dims, int narr, mk_array *const *idx, int bpos);
/* updates: any dtype (cast to x's), broadcastable to the gather's shape. The
 * result has x's shape and dtype. */
mk_array *mk_scatter(mk_array *x, const mk_index_dim *dims, int narr, mk_array *const *idx, int bpos,
                     mk_array *updates, mk_scatter_op op);
/* The same for MLX's DynamicSliceUpdate (slice_update with array starts): a scatter
 * that GPU streams do not refuse for 8-byte dtypes, as Metal's scatter kernels do. */
mk_array *mk_scatter_slice(mk_array *x, const mk_index_dim *dims, int narr, mk_array *const *idx,
                           mk_array *updates);
/* The gather's shape for a plan (B from the index shapes); ndim or -1 with
 * the error worded for op ("gather" or "scatter"). */
int mk_gather_shape(mk_array *x, const mk_index_dim *dims, int narr, mk_array *const *idx, int bpos,
                    const char *op, int64_t *shape);
/* take along an axis (MLX's take with an array; has_axis false: flattened). */
mk_array *mk_take(mk_array *x, mk_array *idx, int axis, bool has_axis);
/* take with one Python int: MLX's slice + squeeze. */
mk_array *mk_take_int(mk_array *x, int64_t index, int axis, bool has_axis);
mk_array *mk_take_along_axis(mk_array *x, mk_array *idx, int axis, bool has_axis);
mk_array *mk_put_along_axis(mk_array *x, mk_array *idx, mk_array *values, int axis, bool has_axis);
/* x[mask] = values, as MLX's masked_scatter (mask: bool, a leading part of
 * x's shape; values consumed in row-major order). */
mk_array *mk_masked_scatter(mk_array *x, mk_array *mask, mk_array *values);

/* ---- random (random.c) --------------------------------------------------- */
/* Keys are uint32 arrays of shape (2,), as MLX's. */
mk_array *mk_random_key(uint64_t seed);
mk_array *mk_random_split(mk_array *key, int num);
mk_array *mk_random_bits(int ndim, const int64_t *shape, int width, mk_array *key);
mk_array *mk_random_uniform(mk_array *low, mk_array *high, int ndim, const int64_t *shape, mk_dtype dtype,
                            mk_array *key);
mk_array *mk_random_normal(int ndim, const int64_t *shape, mk_dtype dtype, mk_array *loc, mk_array *scale,
                           mk_array *key);
mk_array *mk_random_randint(mk_array *low, mk_array *high, int ndim, const int64_t *shape, mk_dtype dtype,
                            mk_array *key);
mk_array *mk_random_bernoulli(mk_array *p, int ndim, const int64_t *shape, bool has_shape, mk_array *key);
/* The global key state used when no key is passed. */
void mk_random_seed(uint64_t seed);
mk_array *mk_random_next_key(void);
/* The global key itself (new reference), and replacing it (mkpy.random.state). */
mk_array *mk_random_get_key(void);
void mk_random_set_key(mk_array *key);
/* -log(-log(uniform)), and the Laplace distribution, as MLX's. */
mk_array *mk_random_gumbel(int ndim, const int64_t *shape, mk_dtype dtype, mk_array *key);
mk_array *mk_random_laplace(int ndim, const int64_t *shape, mk_dtype dtype, double loc, double scale,
                            mk_array *key);
/* Normal samples truncated to [lower, upper]; has_shape false: the broadcast
 * of the bounds' shapes. */
mk_array *mk_random_truncated_normal(mk_array *lower, mk_array *upper, int ndim, const int64_t *shape,
                                     bool has_shape, mk_dtype dtype, mk_array *key);
/* Samples of the categorical distributions given by logits along axis (uint32).
 * mode 0: shape of logits without axis; 1: the given shape; 2: num_samples
 * samples in a trailing axis. */
mk_array *mk_random_categorical(mk_array *logits, int axis, int mode, int ndim, const int64_t *shape,
                                int64_t num_samples, mk_array *key);
/* A random permutation of arange(n) (uint32), and x permuted along axis. */
mk_array *mk_random_permutation_n(int64_t n, mk_array *key);
mk_array *mk_random_permutation(mk_array *x, int axis, mk_array *key);

/* ---- mx.fast reference ops (ops_fast.c) ---------------------------------- */
/* weight (and bias) may be NULL; eps is a C float, as MLX's. */
mk_array *mk_rms_norm(mk_array *x, mk_array *weight, float eps);
mk_array *mk_layer_norm(mk_array *x, mk_array *weight, mk_array *bias, float eps);
/* offset: an integer array (0-d or one value per batch); freqs may be NULL,
 * and then has_base must be set (exactly one of the two, as MLX checks). */
mk_array *mk_rope(mk_array *x, int64_t dims, bool traditional, bool has_base, float base, float scale,
                  mk_array *offset, mk_array *freqs);
/* causal: MLX's mask="causal" (lower-right aligned); mask and sinks may be NULL. */
mk_array *mk_sdpa(mk_array *q, mk_array *k, mk_array *v, float scale, bool causal, mk_array *mask,
                  mk_array *sinks, bool force_fused);

/* ---- linear algebra (ops_linalg.c) ------------------------------------- */
/* a @ b as MLX's matmul: 1-D operands gain a unit dim that the result drops,
 * leading (batch) dims broadcast, inputs are promoted to an inexact dtype. */
mk_array *mk_matmul(mk_array *a, mk_array *b);
/* The "matmul" primitive's params (out = alpha * (a @ b) + beta * c; inputs
 * a, b and, with has_c, c), for the back-ends' evaluators of it. */
typedef struct {
    float alpha, beta;
    bool has_c;
} mk_gemm_params;
/* beta * c + alpha * (a @ b); alpha and beta are float32, as MLX's. */
mk_array *mk_addmm(mk_array *c, mk_array *a, mk_array *b, float alpha, float beta);
mk_array *mk_inner(mk_array *a, mk_array *b);
mk_array *mk_outer(mk_array *a, mk_array *b);
/* Sums the last `axis` dims of a against the first `axis` dims of b. */
mk_array *mk_tensordot_n(mk_array *a, mk_array *b, int axis);
/* Sums a's axes_a against b's axes_b (negative axes allowed). */
mk_array *mk_tensordot(mk_array *a, mk_array *b, int na, const int *axes_a, int nb, const int *axes_b);
/* ---- sorting and scans (ops_sort.c) ------------------------------------ */
/* has_axis false: the flattened array (messages then name axis 0). */
mk_array *mk_sort(mk_array *x, int axis, bool has_axis);
mk_array *mk_argsort(mk_array *x, int axis, bool has_axis); /* uint32 */
mk_array *mk_partition(mk_array *x, int kth, int axis, bool has_axis);
mk_array *mk_argpartition(mk_array *x, int kth, int axis, bool has_axis);
mk_array *mk_topk(mk_array *x, int k, int axis, bool has_axis);
/* MLX's SearchSorted: for each value, the number of elements of the 1-D sorted
 * sequence below it (right: not above it), in sort's order (nan last); uint32
 * of the values' shape. */
mk_array *mk_searchsorted(mk_array *seq, mk_array *values, bool right);
typedef enum { MK_SCAN_SUM, MK_SCAN_PROD, MK_SCAN_MAX, MK_SCAN_MIN, MK_SCAN_LOGADDEXP } mk_scan_op;
/* cumsum (bool gives int32), cumprod, cummax, cummin, logcumsumexp (integers
 * and bool become float32 first). */
mk_array *mk_scan(mk_scan_op op, mk_array *x, int axis, bool has_axis, bool reverse, bool inclusive);

/* ---- fft (ops_fft.c) ------------------------------------------------------ */
typedef enum { MK_FFT_BACKWARD, MK_FFT_ORTHO, MK_FFT_FORWARD } mk_fft_norm;
/* MLX's fft_impl: naxes < 0 means all axes (axes ignored); n: the sizes per
 * axis, or NULL for the input's (irfft: 2 * (last - 1)). */
mk_array *mk_fftn(mk_array *a, int naxes, const int *axes, const int64_t *n, bool real, bool inverse,
                  mk_fft_norm norm);
/* naxes < 0: all axes. */
mk_array *mk_fftshift(mk_array *a, int naxes, const int *axes, bool inverse);
mk_array *mk_fftfreq(int64_t n, double d, bool real);

/* ---- convolutions (ops_conv.c) ------------------------------------------ */
/* MLX's conv_general arguments: each list has n entries (0 or 1: the same
 * value for every spatial dim). */
#define MK_CONV_MAXLIST 8
typedef struct {
    int nstride, stride[MK_CONV_MAXLIST];
    int npad_lo, pad_lo[MK_CONV_MAXLIST];
    int npad_hi, pad_hi[MK_CONV_MAXLIST];
    int nkdil, kdil[MK_CONV_MAXLIST];
    int nidil, idil[MK_CONV_MAXLIST];
    int groups;
    bool flip;
} mk_conv_args;
/* input (N, ..., C_in), weight (C_out, ..., C_in / groups), channels last. */
mk_array *mk_conv_general(mk_array *in, mk_array *wt, const mk_conv_args *args);
/* MLX's conv_transpose_general (nd spatial dims, one entry each). */
mk_array *mk_conv_transpose(mk_array *in, mk_array *wt, int nd, const int *stride, const int *padding,
                            const int *dilation, const int *output_padding, int groups);

/* Normalises an axis against ndim; -1 with MLX's ValueError
 * "[op] Axis 3 is out of bounds for array with 3 dimensions." on error. */
int mk_norm_axis(const char *op, int axis, int ndim);

#endif
