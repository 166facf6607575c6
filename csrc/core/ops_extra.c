/* Ops composed from the other families' ops, each as MLX composes it (so
 * dtypes, rounding and messages follow): see ops_extra.h. The two that need
 * primitives of their own are as_strided (a view with arbitrary strides) and
 * depends (identity outputs that also wait for other arrays). */
#include "ops_extra.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "transforms.h"

int mk_check_dim(const char *op, int64_t v) {
    if (v >= INT32_MIN && v <= INT32_MAX) return 0;
    mk_error_set(MK_ERR_OVERFLOW,
                 "[%s] Shape dimension %lld is outside the supported range [-2147483648, 2147483647]. "
                 "MLX currently uses 32-bit integers for shape dimensions.",
                 op, (long long)v);
    return -1;
}

#define KEEP(x) mk_ar_keep(&A, (x))

static mk_array *f32(mk_arena *A, double v) { return mk_ar_keep(A, mk_scalar_f64(MK_FLOAT32, v)); }

/* ------------------------------------------------------------------ windows */

mk_array *mk_window(mk_window_kind kind, int64_t M) {
    if (M < 1) {
        int64_t zero = 0;
        return mk_zeros(1, &zero, MK_FLOAT32);
    }
    if (M == 1) {
        int64_t one = 1;
        return mk_ones(1, &one, MK_FLOAT32);
    }
    mk_arena A = {0};
    mk_array *n = KEEP(mk_arange(0, (double)M, 1, MK_FLOAT32)), *r = NULL;
    switch (kind) {
    case MK_WIN_BARTLETT: {
        mk_array *term = mk_ar_sub(&A, mk_ar_mul(&A, f32(&A, (float)(2.0f / (float)(M - 1))), n), f32(&A, 1));
        r = mk_ar_sub(&A, f32(&A, 1), mk_ar_un(&A, MK_UNARY_abs, term));
        break;
    }
    case MK_WIN_HANNING: {
        mk_array *s = mk_ar_un(&A, MK_UNARY_sin, mk_ar_mul(&A, f32(&A, (float)(M_PI / (double)(M - 1))), n));
        r = mk_ar_un(&A, MK_UNARY_square, s);
        break;
    }
    case MK_WIN_HAMMING: {
        mk_array *c = mk_ar_un(&A, MK_UNARY_cos, mk_ar_mul(&A, f32(&A, (float)(2.0 * M_PI / (double)(M - 1))), n));
        r = mk_ar_sub(&A, f32(&A, 0.54f), mk_ar_mul(&A, f32(&A, 0.46f), c));
        break;
    }
    case MK_WIN_BLACKMAN: {
        mk_array *c = mk_ar_un(&A, MK_UNARY_cos, mk_ar_mul(&A, f32(&A, (float)(2.0 * M_PI / (double)(M - 1))), n));
        mk_array *t1 = mk_ar_mul(&A, f32(&A, 0.5f), c);
        mk_array *t2 = mk_ar_mul(&A, f32(&A, 0.16f), mk_ar_un(&A, MK_UNARY_square, c));
        r = mk_ar_add(&A, mk_ar_sub(&A, f32(&A, 0.34f), t1), t2);
        break;
    }
    }
    r = mk_ar_out(r);
    mk_ar_free(&A);
    return r;
}

/* ------------------------------------------------------------------- divmod */

int mk_divmod(mk_array *a, mk_array *b, mk_array **quot, mk_array **rem) {
    if (mk_promote(a->dtype, b->dtype) == MK_COMPLEX64) {
        mk_error_set(MK_ERR_VALUE, "[divmod] Complex type not supported.");
        return -1;
    }
    /* MLX's DivMod has zero derivatives (both outputs): computed from stopped inputs */
    mk_array *sa = mk_stop_gradient(a), *sb = sa ? mk_stop_gradient(b) : NULL;
    *quot = *rem = NULL;
    if (sb) *quot = mk_binary(MK_BINARY_floor_divide, sa, sb);
    if (*quot) *rem = mk_binary(MK_BINARY_remainder, sa, sb);
    mk_xdecref(sa);
    mk_xdecref(sb);
    if (!*rem) {
        mk_xdecref(*quot);
        *quot = NULL;
        return -1;
    }
    return 0;
}

/* --------------------------------------------------------------- as_strided */

typedef struct {
    int64_t strides[MK_MAX_NDIM];
    int64_t offset;
} strided_params;

static int as_strided_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const strided_params *s = p->params;
    mk_set_view(out[0], in[0], in[0]->offset + s->offset, s->strides);
    return 0;
}

static const mk_opdef as_strided_def = {"AsStrided", as_strided_eval, NULL};

mk_array *mk_as_strided(mk_array *x, int ndim, const int64_t *shape, const int64_t *strides, int64_t offset) {
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0) {
            mk_error_set(MK_ERR_VALUE, "[as_strided] Negative dimensions not allowed.");
            return NULL;
        }
    if (mk_shape_size(ndim, shape) < 0) return NULL;
    strided_params *s = calloc(1, sizeof *s);
    if (!s) return mk_nomem();
    if (ndim) memcpy(s->strides, strides, ndim * sizeof *strides);
    s->offset = offset;
    /* the elements in row-major order, densely (a view when x already is) */
    int64_t n = x->size;
    mk_array *flat = mk_reshape(x, 1, &n);
    mk_array *dense = flat ? mk_contiguous(flat, false) : NULL;
    mk_xdecref(flat);
    if (!dense) {
        free(s);
        return NULL;
    }
    mk_array *r = mk_node(&as_strided_def, s, x->dtype, ndim, shape, 1, &dense);
    mk_decref(dense);
    return r;
}

/* ------------------------------------------------------- hadamard_transform */

/* The Hadamard matrices of orders 12, 20 and 28 that MLX uses for the sizes
 * m * 2^k, built from their constructions (checked in the tests: H H^T = m I,
 * and the transform against the definition):
 *  - 12: Paley's second construction for q = 5 (q = 1 mod 4). Q is the
 *    Jacobsthal matrix Q[i][j] = chi(j - i) (chi the quadratic character of
 *    GF(5)), C = [[0, 1^T], [1, Q]] the symmetric conference matrix of order
 *    6, H = C (x) [[1, 1], [1, -1]] + I (x) [[1, -1], [-1, -1]].
 *  - 20 and 28: Williamson's array [[A, B, C, D], [-B, A, -D, C],
 *    [-C, D, A, -B], [-D, -C, B, A]] of symmetric circulants of odd order n
 *    (5, 7) with A^2 + B^2 + C^2 + D^2 = 4n I. With S = 2I - J and
 *    M_k = J - 2(I + P^k + P^-k) (P the cyclic shift, h = (n-1)/2):
 *    S^2 = 4I + (n-4)J and the sum of M_k^2 over k = 1..h is
 *    (12h - 12)I + (h(n-12) + 12)J. So n = 7 takes (S, M_1, M_2, M_3):
 *    4I + 3J + 24I - 3J = 28I, and n = 5 takes (S, -S, M_1, M_2):
 *    8I + 2J + 12I - 2J = 20I. The transform multiplies by the transpose of
 *    that array (as MLX's does: its output for the identity is the array). */
static int legendre(int a, int q) {
    a = ((a % q) + q) % q;
    if (a == 0) return 0;
    int r = 1;
    for (int e = 0; e < (q - 1) / 2; e++) r = r * a % q;
    return r == 1 ? 1 : -1;
}

/* circulant entry (i, j) of the first row c (length n) */
static int circ(const int *c, int n, int i, int j) { return c[((j - i) % n + n) % n]; }

static void hadamard_matrix(int m, float *H) {
    if (m == 12) {
        const int q = 5, C_n = q + 1;
        int C[6][6];
        for (int i = 0; i < C_n; i++)
            for (int j = 0; j < C_n; j++)
                C[i][j] = i == 0 && j == 0 ? 0 : i == 0 || j == 0 ? 1 : legendre(j - i, q);
        static const int A2[2][2] = {{1, 1}, {1, -1}}, B2[2][2] = {{1, -1}, {-1, -1}};
        for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++)
                H[i * m + j] = (float)(C[i / 2][j / 2] * A2[i % 2][j % 2] + (i / 2 == j / 2 ? B2[i % 2][j % 2] : 0));
        return;
    }
    const int n = m / 4;
    int W[4][7]; /* first rows of the four circulants */
    for (int t = 0; t < n; t++) W[0][t] = t == 0 ? 1 : -1; /* S = 2I - J */
    int first_k = 1, slot = 1;
    if (n == 5) {
        for (int t = 0; t < n; t++) W[1][t] = -W[0][t]; /* -S */
        slot = 2;
    }
    for (int k = first_k; slot < 4; k++, slot++)
        for (int t = 0; t < n; t++) W[slot][t] = t == 0 || t == k || t == n - k ? -1 : 1; /* M_k */
    /* Williamson's array: block (I, J) is sign * W[idx] */
    static const int idx[4][4] = {{0, 1, 2, 3}, {1, 0, 3, 2}, {2, 3, 0, 1}, {3, 2, 1, 0}};
    static const int sgn[4][4] = {{1, 1, 1, 1}, {-1, 1, -1, 1}, {-1, 1, 1, -1}, {-1, -1, 1, 1}};
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            int bi = i / n, bj = j / n;
            H[j * m + i] = (float)(sgn[bi][bj] * circ(W[idx[bi][bj]], n, i % n, j % n));
        }
}

static mk_array *hadamard_matrix_array(int m) {
    if (m != 12 && m != 20 && m != 28) {
        mk_error_set(MK_ERR_VALUE, "[hadamard] Only orders 12, 20 and 28 are built here.");
        return NULL;
    }
    int64_t shp[2] = {m, m};
    mk_array *h = mk_array_empty(MK_FLOAT32, 2, shp);
    if (h) hadamard_matrix(m, mk_data(h));
    return h;
}

mk_array *mk_hadamard(mk_array *x, bool has_scale, float scale) {
    if (x->size == 0) {
        mk_error_set(MK_ERR_VALUE, "[hadamard_transform] Does not support empty arrays.");
        return NULL;
    }
    int64_t n = x->ndim > 0 ? x->shape[x->ndim - 1] : 1;
    if (!has_scale) scale = 1.0f / sqrtf((float)n);
    mk_dtype dt = mk_is_float(x->dtype) ? x->dtype : MK_FLOAT32;
    mk_arena A = {0};
    mk_array *r = NULL;
    if (n == 1) {
        if (scale == 1.0f) {
            mk_incref(x);
            return x;
        }
        mk_array *c = mk_ar_cast(&A, x, dt);
        r = mk_ar_out(mk_ar_mul(&A, c, mk_ar_keep(&A, mk_scalar_f64(dt, scale))));
        mk_ar_free(&A);
        return r;
    }
    /* n = m * 2^k with m in 1, 12, 20, 28 (MLX takes the first m that
     * divides n; a quotient that is not a power of two is refused here) */
    int m = 1;
    int64_t p2 = n;
    if (n & (n - 1)) {
        static const int orders[3] = {12, 20, 28};
        for (int i = 0; i < 3; i++)
            if (n % orders[i] == 0) {
                m = orders[i];
                p2 = n / m;
                break;
            }
        if (m == 1 || (p2 & (p2 - 1))) {
            mk_error_set(MK_ERR_VALUE, "[hadamard] Only supports n = m*2^k where m in (1, 12, 20, 28).");
            return NULL;
        }
    }
    /* the butterflies run in float32 (MLX computes in float), then round once; the last axis
     * is split and merged again (unflatten, flatten), so that the other dims follow the
     * input in a shapeless compile, as MLX's Hadamard primitive */
    mk_array *cur = mk_ar_cast(&A, x, MK_FLOAT32);
    int last = x->ndim - 1; /* n > 1: x has a last axis */
    for (int64_t h = 1; h < p2 && cur; h *= 2) {
        int64_t shp[3] = {n / (2 * h), 2, h}; /* m blocks of p2, each in butterflies */
        mk_array *v = KEEP(mk_unflatten(cur, last, 3, shp)), *parts[2] = {NULL, NULL};
        if (!v || mk_split_sections(v, 2, last + 1, parts) < 0) {
            cur = NULL;
            break;
        }
        KEEP(parts[0]);
        KEEP(parts[1]);
        mk_array *both[2] = {mk_ar_add(&A, parts[0], parts[1]), mk_ar_sub(&A, parts[0], parts[1])};
        cur = both[0] && both[1] ? KEEP(mk_concatenate(2, both, last + 1, true)) : NULL;
        cur = cur ? KEEP(mk_flatten(cur, last, last + 2)) : NULL;
    }
    if (cur && m > 1) {
        /* index i of the row is (i / 2^k, i % 2^k): H_m mixes the first one */
        int64_t shp[2] = {m, p2};
        mk_array *hm = KEEP(hadamard_matrix_array(m));
        cur = hm ? mk_ar_matmul(&A, hm, KEEP(mk_unflatten(cur, last, 2, shp))) : NULL;
        cur = cur ? KEEP(mk_flatten(cur, last, last + 1)) : NULL;
    }
    if (cur) cur = mk_ar_mul(&A, cur, f32(&A, scale));
    r = mk_ar_out(mk_ar_cast(&A, cur, dt));
    mk_ar_free(&A);
    return r;
}

/* ------------------------------------------------------------------- median */

mk_array *mk_median(mk_array *x, int naxes, const int *axes_in, bool keepdims) {
    int ndim = x->ndim, axes[MK_MAX_NDIM];
    bool used[MK_MAX_NDIM] = {false};
    if (naxes < 0) {
        naxes = ndim;
        for (int d = 0; d < ndim; d++) axes[d] = d;
    } else
        memcpy(axes, axes_in, naxes * sizeof *axes);
    int nuniq = 0;
    for (int i = 0; i < naxes; i++) {
        if (axes[i] < -ndim || axes[i] >= ndim) {
            mk_error_set(MK_ERR_VALUE, "[median] axis %d is out of bounds for array with %d dimensions.", axes[i],
                         ndim);
            return NULL;
        }
        int a = axes[i] < 0 ? axes[i] + ndim : axes[i];
        if (!used[a]) nuniq++;
        used[a] = true;
    }
    if (nuniq != naxes) {
        mk_error_set(MK_ERR_VALUE, "[median] Received duplicate axis.");
        return NULL;
    }
    mk_dtype dt = mk_to_float(x->dtype);
    int perm[MK_MAX_NDIM], np = 0;
    for (int d = 0; d < ndim; d++)
        if (!used[d]) perm[np++] = d;
    int flat_start = np;
    for (int d = 0; d < ndim; d++)
        if (used[d]) perm[np++] = d;
    mk_arena A = {0};
    mk_array *t = KEEP(mk_transpose(x, ndim, perm));
    mk_array *flat = t ? KEEP(mk_flatten(t, flat_start, ndim - 1)) : NULL;
    if (!flat) goto fail;
    if (ndim == 0) flat = mk_ar_reshape(&A, flat, 1, (int64_t[]){1});
    if (!flat) goto fail;
    int64_t fs = flat->shape[flat->ndim - 1];
    if (fs == 0) {
        mk_error_set(MK_ERR_VALUE, "[median] Cannot take median along empty axis.");
        goto fail;
    }
    mk_array *sorted = KEEP(mk_sort(flat, -1, true));
    if (!sorted) goto fail;
    int64_t start[MK_MAX_NDIM], stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
    int fd = sorted->ndim;
    for (int d = 0; d < fd; d++) start[d] = 0, stop[d] = sorted->shape[d], step[d] = 1;
    int64_t mp = fs / 2;
    start[fd - 1] = mp, stop[fd - 1] = mp + 1;
    mk_array *med = mk_ar_cast(&A, KEEP(mk_slice(sorted, start, stop, step)), dt);
    if (fs % 2 == 0) {
        start[fd - 1] = mp - 1, stop[fd - 1] = mp;
        mk_array *lo = mk_ar_cast(&A, KEEP(mk_slice(sorted, start, stop, step)), dt);
        med = mk_ar_mul(&A, mk_ar_add(&A, med, lo), mk_ar_keep(&A, mk_scalar_f64(dt, 0.5)));
    }
    if (!med) goto fail;
    if (mk_is_inexact(x->dtype)) {
        int last = -1;
        mk_array *nan = mk_ar_un(&A, MK_UNARY_isnan, flat);
        mk_array *anyn = nan ? KEEP(mk_reduce(MK_REDUCE_ANY, nan, 1, &last, true)) : NULL;
        med = mk_ar_where(&A, anyn, mk_ar_keep(&A, mk_scalar_f64(dt, NAN)), med);
    }
    /* back to the kept dims (plus unit dims where the reduced ones were) */
    int64_t oshape[MK_MAX_NDIM];
    int on = 0;
    for (int d = 0; d < ndim; d++) {
        if (!used[d])
            oshape[on++] = x->shape[d];
        else if (keepdims)
            oshape[on++] = 1;
    }
    med = mk_ar_reshape(&A, med, on, oshape);
    mk_array *r = mk_ar_out(med);
    mk_ar_free(&A);
    return r;
fail:
    mk_ar_free(&A);
    return NULL;
}

/* --------------------------------------------------------------------- roll */

mk_array *mk_roll(mk_array *x, int nshift, const int64_t *shift, int naxes, const int *axes) {
    mk_arena A = {0};
    mk_array *r = NULL;
    if (naxes < 0) {
        int64_t total = 0;
        for (int i = 0; i < nshift; i++) total += shift[i];
        if (total > INT32_MAX || total < INT32_MIN) {
            mk_error_set(MK_ERR_VALUE, "[roll] Shift %lld does not fit in int32.", (long long)total);
            return NULL;
        }
        int64_t n = x->size;
        int zero = 0;
        mk_array *f = mk_ar_reshape(&A, x, 1, &n);
        mk_array *rolled = f ? KEEP(mk_roll(f, 1, &total, 1, &zero)) : NULL;
        r = mk_ar_out(mk_ar_reshape(&A, rolled, x->ndim, x->shape));
        mk_ar_free(&A);
        return r;
    }
    if (naxes == 1 && nshift > 1) {
        /* numpy's broadcast of shift against axis: one axis rolled by each shift */
        int ax[MK_MAX_NDIM];
        for (int i = 0; i < nshift; i++) ax[i] = axes[0];
        return mk_roll(x, nshift, shift, nshift, ax);
    }
    if (nshift == 1 && naxes > 1) {
        int64_t sh[MK_MAX_NDIM];
        for (int i = 0; i < naxes; i++) sh[i] = shift[0];
        return mk_roll(x, naxes, sh, naxes, axes);
    }
    if (nshift < naxes) {
        mk_error_set(MK_ERR_VALUE, "[roll] At least one shift value per axis is required, %d provided for %d axes.",
                     nshift, naxes);
        return NULL;
    }
    mk_array *cur = x;
    for (int i = 0; i < naxes && cur; i++) {
        int ax = axes[i] < 0 ? axes[i] + x->ndim : axes[i];
        if (ax < 0 || ax >= x->ndim) {
            mk_error_set(MK_ERR_VALUE, "[roll] Invalid axis %d for array with %d dimensions.", axes[i], x->ndim);
            cur = NULL;
            break;
        }
        int64_t size = x->shape[ax];
        if (size == 0) continue;
        int64_t sh = shift[i];
        int64_t split = sh < 0 ? (-sh) % size : size - sh % size;
        mk_array *parts[2];
        if (mk_split(cur, 1, &split, ax, parts) < 0) {
            cur = NULL;
            break;
        }
        KEEP(parts[0]);
        KEEP(parts[1]);
        mk_array *sw[2] = {parts[1], parts[0]};
        cur = KEEP(mk_concatenate(2, sw, ax, true));
    }
    r = mk_ar_out(cur);
    mk_ar_free(&A);
    return r;
}

/* --------------------------------------------------------------------- kron */

mk_array *mk_kron(mk_array *a, mk_array *b) {
    if (a->size == 0 || b->size == 0) {
        mk_error_set(MK_ERR_VALUE, "[kron] Input arrays cannot be empty.");
        return NULL;
    }
    int ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
    if (2 * ndim > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[kron] Too many dimensions.");
        return NULL;
    }
    int64_t as[MK_MAX_NDIM], bs[MK_MAX_NDIM], os[MK_MAX_NDIM];
    for (int i = 0; i < 2 * ndim; i++) as[i] = bs[i] = 1;
    for (int i = 0; i < ndim; i++) os[i] = 1;
    for (int i = ndim - 1, j = a->ndim - 1; j >= 0; j--, i--) as[2 * i] = a->shape[j], os[i] *= a->shape[j];
    for (int i = ndim - 1, j = b->ndim - 1; j >= 0; j--, i--) bs[2 * i + 1] = b->shape[j], os[i] *= b->shape[j];
    for (int i = 0; i < ndim; i++)
        if (mk_check_dim("kron", os[i]) < 0) return NULL;
    mk_arena A = {0};
    mk_array *p = mk_ar_mul(&A, mk_ar_reshape(&A, a, 2 * ndim, as), mk_ar_reshape(&A, b, 2 * ndim, bs));
    mk_array *r = mk_ar_out(mk_ar_reshape(&A, p, ndim, os));
    mk_ar_free(&A);
    return r;
}

/* ----------------------------------------------------------- dynamic slices */

/* MLX's checks of start_indices and axes; normalises axes in place. */
static int check_dynamic(const char *op, mk_array *x, mk_array *start, int naxes, int *axes) {
    if (start->size > (int64_t)x->ndim) {
        mk_error_set(MK_ERR_VALUE, "%s Invalid number of starting positions for array with dimension %d.", op,
                     x->ndim);
        return -1;
    }
    if (start->ndim > 1) {
        mk_error_set(MK_ERR_VALUE, "%s array of starting indices must be zero or one dimensional but has %d dimensions.",
                     op, start->ndim);
        return -1;
    }
    if (start->size != naxes) {
        mk_error_set(MK_ERR_VALUE,
                     "%s Number of starting indices %lld does not match number of axes %d.", op,
                     (long long)start->size, naxes);
        return -1;
    }
    if (!mk_is_integral(start->dtype)) {
        mk_error_set(MK_ERR_VALUE, "%s Start indices must be integers, got type %s.", op,
                     mk_dtype_name(start->dtype));
        return -1;
    }
    bool seen[MK_MAX_NDIM] = {false};
    for (int i = 0; i < naxes; i++) {
        int ax = axes[i] < 0 ? axes[i] + x->ndim : axes[i];
        if (ax < 0 || ax >= x->ndim) {
            mk_error_set(MK_ERR_VALUE, "%s Invalid axis %d for array with dimension %d.", op, axes[i], x->ndim);
            return -1;
        }
        if (seen[ax]) {
            mk_error_set(MK_ERR_VALUE, "%s Repeat axes not allowed.", op);
            return -1;
        }
        seen[ax] = true;
        axes[i] = ax;
    }
    return 0;
}

/* start[i] + arange(len) as int64, shaped to broadcast along position pos of
 * nb index dims; start indices are clamped so that the window fits, as MLX's
 * kernels clamp the offset. */
static mk_array *window_index(mk_arena *A, mk_array *start, int i, int64_t len, int64_t dim, int pos, int nb) {
    int64_t one = 1;
    mk_array *s0 = mk_ar_cast(A, start, MK_INT64);
    if (!s0) return NULL;
    mk_array *flat = mk_ar_reshape(A, s0, 1, &start->size);
    mk_array *si = flat ? mk_ar_keep(A, mk_take_int(flat, i, 0, true)) : NULL;
    (void)one;
    /* negative starts count from the end, then the window is kept inside */
    mk_array *zero = si ? mk_ar_keep(A, mk_scalar_i64(MK_INT64, 0)) : NULL;
    mk_array *neg = mk_ar_bin(A, MK_BINARY_less, si, zero);
    si = mk_ar_where(A, neg, mk_ar_add(A, si, mk_ar_keep(A, mk_scalar_i64(MK_INT64, dim))), si);
    si = mk_ar_bin(A, MK_BINARY_maximum, si, zero);
    si = mk_ar_bin(A, MK_BINARY_minimum, si, mk_ar_keep(A, mk_scalar_i64(MK_INT64, dim - len)));
    mk_array *idx = mk_ar_add(A, mk_ar_keep(A, mk_arange(0, (double)len, 1, MK_INT64)), si);
    int64_t shp[MK_MAX_NDIM];
    for (int k = 0; k < nb; k++) shp[k] = 1;
    shp[pos] = len;
    return mk_ar_reshape(A, idx, nb, shp);
}

mk_array *mk_dynamic_slice(mk_array *x, mk_array *start, int naxes, const int *axes_in, int nsize,
                           const int64_t *sizes) {
    int axes[MK_MAX_NDIM];
    if (naxes > MK_MAX_NDIM) naxes = MK_MAX_NDIM + 1;
    if (naxes <= MK_MAX_NDIM) memcpy(axes, axes_in, naxes * sizeof *axes);
    if (naxes > MK_MAX_NDIM || check_dynamic("[slice]", x, start, naxes, axes) < 0) {
        if (naxes > MK_MAX_NDIM) mk_error_set(MK_ERR_VALUE, "[slice] Too many axes.");
        return NULL;
    }
    if (nsize != x->ndim) {
        mk_error_set(MK_ERR_VALUE, "[slice] Invalid slice size for array with %d dimensions.", x->ndim);
        return NULL;
    }
    for (int d = 0; d < x->ndim; d++)
        if (sizes[d] > x->shape[d] || sizes[d] < 0) {
            char b1[256], b2[256];
            mk_error_set(MK_ERR_VALUE, "[slice] Invalid slice size %s for array with shape %s.",
                         mk_shape_str(nsize, sizes, b1, sizeof b1), mk_shape_str(x->ndim, x->shape, b2, sizeof b2));
            return NULL;
        }
    mk_arena A = {0};
    bool indexed[MK_MAX_NDIM] = {false};
    for (int i = 0; i < naxes; i++) indexed[axes[i]] = true;
    /* the dims not in axes start at 0 */
    int64_t st[MK_MAX_NDIM], sp[MK_MAX_NDIM], stp[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) st[d] = 0, sp[d] = indexed[d] ? x->shape[d] : sizes[d], stp[d] = 1;
    mk_array *cur = KEEP(mk_slice(x, st, sp, stp));
    for (int i = 0; i < naxes && cur; i++) {
        int ax = axes[i];
        mk_array *idx = window_index(&A, start, i, sizes[ax], x->shape[ax], 0, 1);
        cur = idx ? KEEP(mk_take(cur, idx, ax, true)) : NULL;
    }
    mk_array *r = mk_ar_out(cur);
    mk_ar_free(&A);
    return r;
}

mk_array *mk_dynamic_slice_update(mk_array *x, mk_array *update, mk_array *start, int naxes, const int *axes_in) {
    int axes[MK_MAX_NDIM];
    if (naxes > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[slice_update] Too many axes.");
        return NULL;
    }
    memcpy(axes, axes_in, naxes * sizeof *axes);
    if (check_dynamic("[slice_update]", x, start, naxes, axes) < 0) return NULL;
    mk_arena A = {0};
    mk_array *r = NULL;
    /* the update broadcast to x's rank; its shape is the window's */
    mk_array *upd = mk_ar_cast(&A, update, x->dtype);
    if (!upd) goto done;
    if (upd->ndim > x->ndim) {
        mk_error_set(MK_ERR_VALUE, "[slice_update] Update array has more dimensions than the source array.");
        goto done;
    }
    int64_t ushape[MK_MAX_NDIM];
    int lead = x->ndim - upd->ndim;
    for (int d = 0; d < x->ndim; d++) ushape[d] = d < lead ? 1 : upd->shape[d - lead];
    for (int d = 0; d < x->ndim; d++)
        if (ushape[d] > x->shape[d]) {
            char b1[256], b2[256];
            mk_error_set(MK_ERR_VALUE, "[slice_update] Update shape %s does not fit in array of shape %s.",
                         mk_shape_str(upd->ndim, upd->shape, b1, sizeof b1),
                         mk_shape_str(x->ndim, x->shape, b2, sizeof b2));
            goto done;
        }
    upd = mk_ar_reshape(&A, upd, x->ndim, ushape);
    if (!upd) goto done;
    /* one scatter: the indexed axes by arange windows (an outer product),
     * the others by slices from 0; the index dims come first in the
     * update's layout, the sliced ones after, in order */
    mk_index_dim dims[MK_MAX_NDIM];
    mk_array *idx[MK_MAX_NDIM];
    int perm[MK_MAX_NDIM], np = 0;
    bool indexed[MK_MAX_NDIM] = {false};
    for (int i = 0; i < naxes; i++) indexed[axes[i]] = true;
    int k = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (indexed[d]) {
            int i = 0;
            while (axes[i] != d) i++;
            idx[k] = window_index(&A, start, i, ushape[d], x->shape[d], k, naxes);
            if (!idx[k]) goto done;
            dims[d] = (mk_index_dim){MK_IDX_ARRAY, k, 0, 1, 0};
            perm[np++] = d;
            k++;
        } else
            dims[d] = (mk_index_dim){MK_IDX_SLICE, 0, 0, 1, ushape[d]};
    }
    for (int d = 0; d < x->ndim; d++)
        if (!indexed[d]) perm[np++] = d;
    mk_array *u = mk_ar_transpose(&A, upd, x->ndim, perm);
    if (!u) goto done;
    r = mk_scatter_slice(x, dims, naxes, idx, u);
done:
    mk_ar_free(&A);
    return r;
}

/* -------------------------------------------------------- small compositions */

mk_array *mk_count_nonzero(mk_array *x, int naxes, const int *axes, bool keepdims) {
    mk_arena A = {0};
    mk_array *nz = mk_ar_bin(&A, MK_BINARY_not_equal, x, mk_ar_keep(&A, mk_scalar_i64(x->dtype, 0)));
    nz = mk_ar_cast(&A, nz, MK_INT32);
    mk_array *r = nz ? mk_reduce(MK_REDUCE_SUM, nz, naxes, axes, keepdims) : NULL;
    mk_ar_free(&A);
    return r;
}

mk_array *mk_logical_xor(mk_array *a, mk_array *b) {
    mk_arena A = {0};
    mk_array *r = mk_ar_out(mk_ar_bin(&A, MK_BINARY_not_equal, mk_ar_cast(&A, a, MK_BOOL), mk_ar_cast(&A, b, MK_BOOL)));
    mk_ar_free(&A);
    return r;
}

mk_array *mk_trunc(mk_array *x) {
    if (x->dtype == MK_COMPLEX64) {
        mk_error_set(MK_ERR_VALUE, "[trunc] Not supported for complex64.");
        return NULL;
    }
    if (!mk_is_float(x->dtype)) {
        mk_incref(x);
        return x;
    }
    mk_arena A = {0};
    mk_array *neg = mk_ar_bin(&A, MK_BINARY_less, x, mk_ar_keep(&A, mk_scalar_i64(x->dtype, 0)));
    mk_array *r = mk_ar_out(mk_ar_where(&A, neg, mk_ar_un(&A, MK_UNARY_ceil, x), mk_ar_un(&A, MK_UNARY_floor, x)));
    mk_ar_free(&A);
    return r;
}

mk_array *mk_flip(mk_array *x, int naxes, const int *axes) {
    int64_t st[MK_MAX_NDIM], sp[MK_MAX_NDIM], step[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) st[d] = 0, sp[d] = x->shape[d], step[d] = 1;
    int n = naxes < 0 ? x->ndim : naxes;
    for (int i = 0; i < n; i++) {
        int ax = mk_norm_axis("flip", naxes < 0 ? i : axes[i], x->ndim);
        if (ax < 0) return NULL;
        if (x->shape[ax] == 0) continue;
        st[ax] = x->shape[ax] - 1, sp[ax] = -1, step[ax] = -1;
    }
    return mk_slice(x, st, sp, step);
}

int mk_meshgrid(int n, mk_array *const *xs, bool sparse, bool ij, mk_array **outs) {
    mk_arena A = {0};
    mk_array *parts[MK_MAX_NDIM];
    if (n > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[meshgrid] Too many arrays.");
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int64_t shp[MK_MAX_NDIM];
        for (int k = 0; k < n; k++) shp[k] = 1;
        int at = i;
        if (!ij && n > 1 && i < 2) at = 1 - i;
        shp[at] = xs[i]->size;
        parts[i] = mk_ar_reshape(&A, xs[i], n, shp);
        if (!parts[i]) goto fail;
    }
    int64_t shape[MK_MAX_NDIM];
    int nd = 0;
    for (int i = 0; i < n; i++) {
        nd = mk_broadcast_shapes(nd, shape, parts[i]->ndim, parts[i]->shape, shape);
        if (nd < 0) goto fail;
    }
    for (int i = 0; i < n; i++) {
        outs[i] = sparse ? mk_ar_out(parts[i]) : mk_broadcast_to(parts[i], nd, shape);
        if (!outs[i]) {
            for (int k = 0; k < i; k++) mk_decref(outs[k]);
            goto fail;
        }
    }
    mk_ar_free(&A);
    return 0;
fail:
    mk_ar_free(&A);
    return -1;
}

mk_array *mk_nan_to_num(mk_array *x, float nan, bool has_posinf, float posinf, bool has_neginf, float neginf) {
    if (!mk_is_inexact(x->dtype)) {
        mk_incref(x);
        return x;
    }
    double mx;
    switch (x->dtype) {
    case MK_FLOAT32: mx = 3.4028234663852886e38; break;
    case MK_BFLOAT16: mx = 3.3895313892515355e38; break;
    case MK_FLOAT16: mx = 65504.0; break;
    default:
        mk_error_set(MK_ERR_VALUE, "[nan_to_num] Does not yet support given type: %s.", mk_dtype_name(x->dtype));
        return NULL;
    }
    double pos = has_posinf ? posinf : mx, neg = has_neginf ? neginf : -mx;
    mk_arena A = {0};
    mk_array *out = mk_ar_where(&A, mk_ar_un(&A, MK_UNARY_isnan, x), mk_ar_scalar(&A, x, nan), x);
    out = mk_ar_where(&A, mk_ar_un(&A, MK_UNARY_isposinf, x), mk_ar_scalar(&A, x, pos), out);
    out = mk_ar_where(&A, mk_ar_un(&A, MK_UNARY_isneginf, x), mk_ar_scalar(&A, x, neg), out);
    mk_array *r = mk_ar_out(out);
    mk_ar_free(&A);
    return r;
}

mk_array *mk_diff(mk_array *x, int n, int axis) {
    int ax = axis < 0 ? axis + x->ndim : axis;
    if (ax < 0 || ax >= x->ndim) {
        mk_error_set(MK_ERR_VALUE, "[diff] Axis is out of bounds for the array.");
        return NULL;
    }
    if (n < 0) {
        mk_error_set(MK_ERR_VALUE, "[diff] Order `n` must be non-negative.");
        return NULL;
    }
    mk_arena A = {0};
    mk_array *cur = x;
    for (int i = 0; i < n && cur; i++) {
        int64_t st[MK_MAX_NDIM], sp[MK_MAX_NDIM], step[MK_MAX_NDIM];
        for (int d = 0; d < cur->ndim; d++) st[d] = 0, sp[d] = cur->shape[d], step[d] = 1;
        int64_t len = cur->shape[ax];
        st[ax] = len < 1 ? len : 1;
        mk_array *upper = KEEP(mk_slice(cur, st, sp, step));
        st[ax] = 0;
        sp[ax] = len < 1 ? 0 : len - 1;
        mk_array *lower = KEEP(mk_slice(cur, st, sp, step));
        cur = mk_ar_sub(&A, upper, lower);
    }
    mk_array *r = cur == x ? (mk_incref(x), x) : mk_ar_out(cur);
    mk_ar_free(&A);
    return r;
}

mk_array *mk_trace(mk_array *x, int offset, int axis1, int axis2, int dtype) {
    int ndim = x->ndim;
    if (ndim < 2) {
        mk_error_set(MK_ERR_VALUE, "[trace] Array must have at least two dimensions, but got %d dimensions.", ndim);
        return NULL;
    }
    int a1 = axis1 < 0 ? axis1 + ndim : axis1, a2 = axis2 < 0 ? axis2 + ndim : axis2;
    if (a1 < 0 || a1 >= ndim) {
        mk_error_set(MK_ERR_INDEX, "[trace] Invalid axis1 %d for array with %d dimensions.", axis1, ndim);
        return NULL;
    }
    if (a2 < 0 || a2 >= ndim) {
        mk_error_set(MK_ERR_INDEX, "[trace] Invalid axis2 %d for array with %d dimensions.", axis2, ndim);
        return NULL;
    }
    if (a1 == a2) {
        mk_error_set(MK_ERR_VALUE, "[trace] axis1 and axis2 cannot be the same axis");
        return NULL;
    }
    mk_arena A = {0};
    mk_array *dg = mk_ar_cast(&A, KEEP(mk_diagonal(x, offset, a1, a2)), dtype < 0 ? x->dtype : (mk_dtype)dtype);
    int last = -1;
    mk_array *r = dg ? mk_reduce(MK_REDUCE_SUM, dg, 1, &last, false) : NULL;
    mk_ar_free(&A);
    return r;
}

mk_array *mk_vecdot(mk_array *a, mk_array *b, int axis) {
    if (a->ndim == 0 || b->ndim == 0) {
        mk_error_set(MK_ERR_VALUE, "[vecdot] inputs must be at least 1D.");
        return NULL;
    }
    int ax = axis < 0 ? axis + a->ndim : axis;
    if (ax < 0 || ax >= a->ndim || (axis < 0 ? axis + b->ndim != ax : axis >= b->ndim)) {
        mk_error_set(MK_ERR_VALUE, "[vecdot] axis is out of bounds.");
        return NULL;
    }
    if (a->shape[ax] != b->shape[ax - a->ndim + b->ndim]) {
        mk_error_set(MK_ERR_VALUE, "[vecdot] a and b must have the same size along axis.");
        return NULL;
    }
    mk_arena A = {0};
    mk_array *p = mk_ar_mul(&A, mk_ar_un(&A, MK_UNARY_conjugate, a), b);
    mk_array *r = p ? mk_reduce(MK_REDUCE_SUM, p, 1, &ax, false) : NULL;
    mk_ar_free(&A);
    return r;
}

/* ------------------------------------------------------------------ depends */

static int depends_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int n = *(const int *)p->params;
    for (int i = 0; i < n; i++)
        if (out[i]) mk_set_view(out[i], in[i], in[i]->offset, in[i]->strides);
    return 0;
}

static int depends_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    int n = *(const int *)p->params;
    for (int i = 0; i < n; i++)
        if (want[i] && cots[i]) mk_incref(cots[i]), grads[i] = cots[i];
    return 0;
}

static const mk_opdef depends_def = {"Depends", depends_eval, NULL, depends_vjp, NULL, NULL, false};

int mk_depends(int n, mk_array *const *ins, int nd, mk_array *const *deps, mk_array **outs) {
    mk_array **all = malloc((size_t)(n + nd) * sizeof *all);
    mk_outdesc *desc = malloc((size_t)(n > 0 ? n : 1) * sizeof *desc);
    int *params = malloc(sizeof *params);
    if (!all || !desc || !params) {
        free(all), free(desc), free(params);
        mk_nomem();
        return -1;
    }
    *params = n;
    for (int i = 0; i < n; i++) {
        all[i] = ins[i];
        desc[i].dtype = ins[i]->dtype;
        desc[i].ndim = ins[i]->ndim;
        memcpy(desc[i].shape, ins[i]->shape, ins[i]->ndim * sizeof(int64_t));
    }
    for (int i = 0; i < nd; i++) all[n + i] = deps[i];
    int rc = mk_prim_make(&depends_def, params, n + nd, all, n, desc, outs);
    free(all);
    free(desc);
    return rc;
}
