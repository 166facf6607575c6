/* Strided iteration over several arrays of one shape, for op evaluators.
 *
 * The shape is walked in row-major order. Dimensions of size 1 are dropped
 * and neighbours that are contiguous in every array are merged, so a dense
 * case becomes one long row. The callback gets one row segment at a time:
 * the element offset of its start in each array, each array's stride along
 * the row, and its length. Work is split by element ranges, so one huge row
 * is shared between threads as well as many short ones. */
#ifndef MK_ITER_H
#define MK_ITER_H

#include <stdint.h>

#include "array.h"

#define MK_ITER_MAX 4

typedef struct {
    int ndim; /* >= 1 after init */
    int narr;
    int64_t total;
    int64_t shape[MK_MAX_NDIM];
    int64_t strides[MK_ITER_MAX][MK_MAX_NDIM];
} mk_iter;

typedef void (*mk_row_fn)(void *ctx, const int64_t *offsets, const int64_t *strides, int64_t n);

void mk_iter_init(mk_iter *it, int ndim, const int64_t *shape, int narr, const int64_t *const *strides);
/* Visits the elements [begin, end) of the row-major order. */
void mk_iter_range(const mk_iter *it, int64_t begin, int64_t end, mk_row_fn fn, void *ctx);
/* Visits every element, splitting the work over the thread pool. */
void mk_iter_run(const mk_iter *it, int64_t grain, mk_row_fn fn, void *ctx);

/* Strides of `a` seen as an array of shape out_shape (numpy broadcasting:
 * missing leading dims and size-1 dims get stride 0). */
void mk_broadcast_strides(const mk_array *a, int out_ndim, const int64_t *out_shape, int64_t *strides);

/* dst[i * ds] = src[i * ss] for i < n, elements of sz bytes (strides in elements). */
void mk_copy_elems(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, size_t sz);

/* memcpy through non-temporal stores (x86-64; plain memcpy elsewhere): for copies of several
 * MiB that are read later, if at all, from memory anyway. No read for ownership of the
 * destination's lines, so a third less memory traffic than memcpy's cached stores. */
void mk_copy_stream(char *dst, const char *src, size_t n);

/* Default number of elements below which an op runs on one thread. */
#define MK_GRAIN 32768

#endif
