#include "iter.h"

#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "pool.h"

void mk_copy_stream(char *dst, const char *src, size_t n) {
#if defined(__x86_64__)
    size_t head = (size_t)(-(uintptr_t)dst & 15);
    if (head > n) head = n;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i)), b = _mm_loadu_si128((const __m128i *)(src + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32)), d = _mm_loadu_si128((const __m128i *)(src + i + 48));
        _mm_stream_si128((__m128i *)(dst + i), a);
        _mm_stream_si128((__m128i *)(dst + i + 16), b);
        _mm_stream_si128((__m128i *)(dst + i + 32), c);
        _mm_stream_si128((__m128i *)(dst + i + 48), d);
    }
    _mm_sfence();
    memcpy(dst + i, src + i, n - i);
#else
    memcpy(dst, src, n);
#endif
}

void mk_iter_init(mk_iter *it, int ndim, const int64_t *shape, int narr, const int64_t *const *strides) {
    it->narr = narr;
    it->total = 1;
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        it->total *= shape[d];
        if (shape[d] == 1) continue;
        /* merge with the previous kept dim when contiguous in every array */
        if (nd > 0) {
            int ok = 1;
            for (int k = 0; k < narr; k++)
                if (strides[k][d] * shape[d] != it->strides[k][nd - 1]) ok = 0;
            if (ok) {
                it->shape[nd - 1] *= shape[d];
                for (int k = 0; k < narr; k++) it->strides[k][nd - 1] = strides[k][d];
                continue;
            }
        }
        it->shape[nd] = shape[d];
        for (int k = 0; k < narr; k++) it->strides[k][nd] = strides[k][d];
        nd++;
    }
    if (nd == 0) {
        it->shape[0] = 1;
        for (int k = 0; k < narr; k++) it->strides[k][0] = 0;
        nd = 1;
    }
    it->ndim = nd;
}

void mk_iter_range(const mk_iter *it, int64_t begin, int64_t end, mk_row_fn fn, void *ctx) {
    if (begin >= end) return;
    const int nd = it->ndim, na = it->narr;
    const int64_t inner = it->shape[nd - 1];
    int64_t idx[MK_MAX_NDIM];
    int64_t off[MK_ITER_MAX] = {0};
    int64_t inner_stride[MK_ITER_MAX];
    for (int k = 0; k < na; k++) inner_stride[k] = it->strides[k][nd - 1];
    /* multi-index of begin */
    int64_t rem = begin;
    for (int d = nd - 1; d >= 0; d--) {
        idx[d] = rem % it->shape[d];
        rem /= it->shape[d];
        for (int k = 0; k < na; k++) off[k] += idx[d] * it->strides[k][d];
    }
    int64_t pos = begin;
    while (pos < end) {
        int64_t n = inner - idx[nd - 1];
        if (n > end - pos) n = end - pos;
        fn(ctx, off, inner_stride, n);
        pos += n;
        if (pos >= end) break;
        /* advance: finish the row, then carry */
        for (int k = 0; k < na; k++) off[k] += (inner - idx[nd - 1]) * inner_stride[k];
        idx[nd - 1] = inner;
        for (int d = nd - 1; d > 0 && idx[d] == it->shape[d]; d--) {
            for (int k = 0; k < na; k++) off[k] -= it->shape[d] * it->strides[k][d];
            idx[d] = 0;
            idx[d - 1]++;
            for (int k = 0; k < na; k++) off[k] += it->strides[k][d - 1];
        }
    }
}

typedef struct {
    const mk_iter *it;
    mk_row_fn fn;
    void *ctx;
} run_ctx;

static void run_range(void *c, int64_t begin, int64_t end) {
    run_ctx *r = c;
    mk_iter_range(r->it, begin, end, r->fn, r->ctx);
}

void mk_iter_run(const mk_iter *it, int64_t grain, mk_row_fn fn, void *ctx) {
    run_ctx r = {it, fn, ctx};
    mk_parallel_for(it->total, grain, run_range, &r);
}

void mk_broadcast_strides(const mk_array *a, int out_ndim, const int64_t *out_shape, int64_t *strides) {
    int lead = out_ndim - a->ndim;
    for (int d = 0; d < out_ndim; d++) {
        int ad = d - lead;
        if (ad < 0 || (a->shape[ad] == 1 && out_shape[d] != 1))
            strides[d] = 0;
        else
            strides[d] = a->strides[ad];
    }
}

/* dst[i * ds] = src[i * ss] for i < n, elements of sz bytes. */
void mk_copy_elems(char *dst, int64_t ds, const char *src, int64_t ss, int64_t n, size_t sz) {
    if (ds == 1 && ss == 1) {
        memcpy(dst, src, (size_t)n * sz);
        return;
    }
#define LOOP(T)                                                                                        \
    {                                                                                                  \
        T *d = (T *)dst;                                                                               \
        const T *s = (const T *)src;                                                                   \
        for (int64_t i = 0; i < n; i++) d[i * ds] = s[i * ss];                                         \
        return;                                                                                        \
    }
    switch (sz) {
    case 1: LOOP(uint8_t)
    case 2: LOOP(uint16_t)
    case 4: LOOP(uint32_t)
    case 8: LOOP(uint64_t)
    default: break;
    }
#undef LOOP
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds * (int64_t)sz, src + i * ss * (int64_t)sz, sz);
}
