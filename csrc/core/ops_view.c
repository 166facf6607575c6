/* Ops whose result is a view of the input's buffer: reshape, transpose,
 * swapaxes, moveaxis, expand_dims, squeeze, flatten, broadcast_to and basic
 * slicing. Each is a lazy node whose evaluator only computes an offset and
 * strides (reshape copies when the input's layout cannot be viewed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iter.h"
#include "ops.h"
#include "transforms.h"
#include "compile.h"
#include "types.h"

int mk_norm_axis(const char *op, int axis, int ndim) {
    if (axis < -ndim || axis >= ndim) {
        mk_error_set(MK_ERR_VALUE, "[%s] Axis %d is out of bounds for array with %d dimensions.", op, axis, ndim);
        return -1;
    }
    return axis < 0 ? axis + ndim : axis;
}

/* The check swapaxes and moveaxis use (MLX words it differently). */
static int check_axis(const char *op, int axis, int ndim) {
    if (axis < -ndim || axis >= ndim) {
        mk_error_set(MK_ERR_INDEX, "[%s] Invalid axis %d for array with %d dimensions.", op, axis, ndim);
        return -1;
    }
    return axis < 0 ? axis + ndim : axis;
}

/* ------------------------------------------------------------ strided view */

/* params of a generic strided view: output dim k takes the input's stride
 * map[k] (or 0 for a new or broadcast dim, map[k] < 0) times mult[k]; the
 * view starts at index start[d] along each input dim d */
typedef struct {
    int ndim;
    int map[MK_MAX_NDIM];
    int64_t mult[MK_MAX_NDIM];
    int64_t start[MK_MAX_NDIM]; /* per input dim, start index (slicing) */
    int in_ndim;
} view_params;

static int view_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const view_params *v = p->params;
    const mk_array *x = in[0];
    int64_t off = x->offset, strides[MK_MAX_NDIM];
    for (int d = 0; d < v->in_ndim; d++) off += v->start[d] * x->strides[d];
    for (int k = 0; k < v->ndim; k++) strides[k] = v->map[k] < 0 ? 0 : x->strides[v->map[k]] * v->mult[k];
    mk_set_view(out[0], x, off, strides);
    return 0;
}

static int view_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int view_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int view_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static void view_name(const mk_prim *p, char *buf, size_t n);
static const mk_opdef view_def = {"view", view_eval, NULL, view_vjp, view_jvp, view_vmap, false,
                                  true, sizeof(view_params), NULL, view_name, .cheap = true};

static view_params *view_new(const mk_array *x, int ndim) {
    /* not calloc, which skips glibc's per-thread cache (and not a memset
     * of the whole block, which GCC turns back into calloc) */
    view_params *v = malloc(sizeof *v);
    if (!v) return mk_nomem();
    v->ndim = ndim;
    memset((char *)v + sizeof v->ndim, 0, sizeof *v - sizeof v->ndim);
    v->in_ndim = x->ndim;
    for (int k = 0; k < ndim; k++) {
        v->map[k] = -1;
        v->mult[k] = 1;
    }
    return v;
}

static mk_array *view_node(mk_array *x, view_params *v, int ndim, const int64_t *shape) {
    return mk_node(&view_def, v, x->dtype, ndim, shape, 1, &x);
}

/* ----------------------------------------------------------------- reshape */

/* Strides that show x's elements, in row-major order, as an array of the
 * given shape without copying, as numpy's _attempt_nocopy_reshape: each group
 * of old dims that maps onto a group of new dims must be contiguous within
 * itself. Broadcast (stride 0) dims merge too. Returns false when a copy is
 * needed. */
static bool nocopy_strides(const mk_array *x, int ndim, const int64_t *shape, int64_t *strides) {
    int64_t od[MK_MAX_NDIM], os[MK_MAX_NDIM];
    int ond = 0;
    for (int i = 0; i < x->ndim; i++)
        if (x->shape[i] != 1) {
            od[ond] = x->shape[i];
            os[ond++] = x->strides[i];
        }
    int oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < ndim && oi < ond) {
        int64_t np_ = shape[ni], op = od[oi];
        while (np_ != op) {
            if (np_ < op) {
                if (nj >= ndim) return false;
                np_ *= shape[nj++];
            } else {
                if (oj >= ond) return false;
                op *= od[oj++];
            }
        }
        for (int k = oi; k < oj - 1; k++)
            if (os[k] != od[k + 1] * os[k + 1]) return false;
        strides[nj - 1] = os[oj - 1];
        for (int k = nj - 1; k > ni; k--) strides[k - 1] = strides[k] * shape[k];
        ni = nj++;
        oi = oj++;
    }
    /* trailing size-1 dims of the new shape */
    for (int k = ni; k < ndim; k++) strides[k] = 1;
    return true;
}

bool mk_reshape_nocopy(const mk_array *x, int ndim, const int64_t *shape) {
    int64_t strides[MK_MAX_NDIM];
    return nocopy_strides(x, ndim, shape, strides);
}

/* Copies x's elements in row-major order into o's new dense storage (o has
 * as many bytes as x: reshape, dtype view). */
static int copy_dense(const mk_array *x, mk_array *o) {
    if (mk_alloc_out(o) < 0) return -1;
    int64_t dense[MK_MAX_NDIM];
    mk_row_strides(x->ndim, x->shape, dense);
    mk_copy_into(x, mk_data(o), dense);
    return 0;
}

static int reshape_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    const mk_array *x = in[0];
    mk_array *o = out[0];
    int64_t strides[MK_MAX_NDIM];
    if (x->size == 0) {
        for (int i = 0; i < o->ndim; i++) strides[i] = 0;
        mk_set_view(o, x, x->offset, strides);
        return 0;
    }
    if (nocopy_strides(x, o->ndim, o->shape, strides)) {
        mk_set_view(o, x, x->offset, strides);
        return 0;
    }
    return copy_dense(x, o);
}

static int reshape_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int reshape_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int reshape_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
#define RESHAPE_NP 5
static const mk_opdef reshape_def = {"reshape", reshape_eval, NULL, reshape_vjp, reshape_jvp, reshape_vmap, false,
                                     true, RESHAPE_NP * sizeof(int), NULL, NULL, .cheap = true};

/* A reshape's params (NULL when it has none of them): [0] the inferred dim or -1; [1], [2] the
 * input axes that a flatten merged, or -1; [3] the input axis that an unflatten split, or -1, and
 * [4] the number of dims it became. A shapeless replay infers the dim again from the new size,
 * merges the same axes of the new shape (MLX's Flatten), or splits the same axis into the traced
 * dims and keeps the other dims of the new shape (MLX's Unflatten), as MLX. */
static mk_array *reshape_node(mk_array *x, int ndim, const int64_t *shape, int infer, int fs, int fe, int ua,
                              int un) {
    int *rp = NULL;
    if (infer >= 0 || fs >= 0 || ua >= 0) {
        if (!(rp = malloc(RESHAPE_NP * sizeof *rp))) return mk_nomem();
        rp[0] = infer, rp[1] = fs, rp[2] = fe, rp[3] = ua, rp[4] = un;
    }
    return mk_node(&reshape_def, rp, x->dtype, ndim, shape, 1, &x);
}

mk_array *mk_reshape(mk_array *x, int ndim, const int64_t *shape_in) {
    int64_t shape[MK_MAX_NDIM];
    char sbuf[512];
    int infer = -1;
    bool negative = false;
    int64_t known = 1;
    if (ndim > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[reshape] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    for (int i = 0; i < ndim; i++) {
        shape[i] = shape_in[i];
        if (shape[i] == -1) {
            if (infer >= 0) {
                mk_error_set(MK_ERR_VALUE, "[reshape] Reshape can only infer one dimension.");
                return NULL;
            }
            infer = i;
        } else if (shape[i] < 0) {
            negative = true;
        } else if (shape[i] && known > INT64_MAX / shape[i]) {
            known = -1; /* overflows: cannot match any size */
            negative = true;
        } else {
            known *= shape[i];
        }
    }
    if (!negative) {
        if (known > 0) {
            if (infer >= 0) {
                shape[infer] = x->size / known;
                known *= shape[infer];
            }
        } else if (infer >= 0) {
            mk_error_set(MK_ERR_VALUE, "[reshape] Cannot infer the shape of an empty array");
            return NULL;
        }
    }
    if (negative || known != x->size) {
        mk_error_set(MK_ERR_VALUE, "[reshape] Cannot reshape array of size %lld into shape %s.",
                     (long long)x->size, mk_shape_str(ndim, shape, sbuf, sizeof sbuf));
        return NULL;
    }
    if (ndim == x->ndim && (ndim == 0 || !memcmp(shape, x->shape, ndim * sizeof *shape))) {
        mk_incref(x);
        return x;
    }
    return reshape_node(x, ndim, shape, infer, -1, -1, -1, 0);
}

mk_array *mk_flatten(mk_array *x, int start_axis, int end_axis) {
    /* as MLX: out-of-range axes are clamped, and a 0-d array becomes (1,) */
    int nd = x->ndim;
    int s = start_axis + (start_axis < 0 ? nd : 0);
    int e = end_axis + (end_axis < 0 ? nd : 0);
    if (s < 0) s = 0;
    if (e > nd - 1) e = nd - 1;
    if (nd == 0) {
        int64_t one = 1;
        return mk_reshape(x, 1, &one);
    }
    if (e < s) {
        mk_error_set(MK_ERR_VALUE, "[flatten] start_axis must be less than or equal to end_axis");
        return NULL;
    }
    int64_t shape[MK_MAX_NDIM];
    int n = 0;
    for (int i = 0; i < s; i++) shape[n++] = x->shape[i];
    int64_t m = 1;
    for (int i = s; i <= e; i++) m *= x->shape[i];
    shape[n++] = m;
    for (int i = e + 1; i < nd; i++) shape[n++] = x->shape[i];
    if (s == e) {
        mk_incref(x);
        return x;
    }
    return reshape_node(x, n, shape, -1, s, e, -1, 0);
}

mk_array *mk_unflatten(mk_array *x, int axis, int ndim, const int64_t *shape_in) {
    int nd = x->ndim, ax = axis < 0 ? axis + nd : axis, infer = -1;
    int64_t shape[MK_MAX_NDIM], size = 1;
    char sb[512];
    if (ndim == 0) {
        mk_error_set(MK_ERR_VALUE, "[unflatten] Shape to unflatten to cannot be empty.");
        return NULL;
    }
    if (ax < 0 || ax >= nd) {
        mk_error_set(MK_ERR_INDEX, "[unflatten] Invalid axes %d for array with %d dimensions.", ax, nd);
        return NULL;
    }
    if (nd - 1 + ndim > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[unflatten] Arrays of more than %d dimensions are not supported.", MK_MAX_NDIM);
        return NULL;
    }
    for (int i = 0; i < ndim; i++) {
        shape[i] = shape_in[i];
        if (shape[i] == -1) {
            if (infer >= 0) {
                mk_error_set(MK_ERR_VALUE, "[Unflatten] Can only infer one dimension.");
                return NULL;
            }
            infer = i;
        } else {
            size *= shape[i];
        }
    }
    if (infer >= 0) {
        shape[infer] = size ? x->shape[ax] / size : 0;
        size *= shape[infer];
    }
    if (size != x->shape[ax]) {
        mk_error_set(MK_ERR_VALUE, "[Unflatten] Cannot unflatten axis %d with size %lld into shape %s.", axis,
                     (long long)x->shape[ax], mk_shape_str(ndim, shape, sb, sizeof sb));
        return NULL;
    }
    if (ndim == 1) {
        mk_incref(x);
        return x;
    }
    int64_t full[MK_MAX_NDIM];
    int n = 0;
    for (int i = 0; i < nd; i++) {
        if (i == ax)
            for (int k = 0; k < ndim; k++) full[n++] = shape[k];
        else
            full[n++] = x->shape[i];
    }
    return reshape_node(x, n, full, -1, -1, -1, ax, ndim);
}

/* ------------------------------------------------------- axis permutations */

mk_array *mk_transpose(mk_array *x, int naxes, const int *axes_in) {
    int axes[MK_MAX_NDIM];
    int nd = x->ndim;
    if (naxes < 0) {
        for (int i = 0; i < nd; i++) axes[i] = nd - 1 - i;
    } else {
        if (naxes != nd) {
            mk_error_set(MK_ERR_VALUE, "[transpose] Received %d axes for array with %d dimensions.", naxes, nd);
            return NULL;
        }
        bool seen[MK_MAX_NDIM] = {0};
        for (int i = 0; i < nd; i++) {
            int a = axes_in[i] < 0 ? axes_in[i] + nd : axes_in[i];
            if (a < 0 || a >= nd) {
                mk_error_set(MK_ERR_INDEX, "[transpose] Invalid axis (%d) for array with %d dimensions.", a, nd);
                return NULL;
            }
            if (seen[a]) {
                mk_error_set(MK_ERR_VALUE, "[transpose] Repeat axes not allowed.");
                return NULL;
            }
            seen[a] = true;
            axes[i] = a;
        }
    }
    view_params *v = view_new(x, nd);
    if (!v) return NULL;
    int64_t shape[MK_MAX_NDIM];
    for (int i = 0; i < nd; i++) {
        v->map[i] = axes[i];
        shape[i] = x->shape[axes[i]];
    }
    return view_node(x, v, nd, shape);
}

mk_array *mk_swapaxes(mk_array *x, int a, int b) {
    int na = check_axis("swapaxes", a, x->ndim);
    if (na < 0) return NULL;
    int nb = check_axis("swapaxes", b, x->ndim);
    if (nb < 0) return NULL;
    int axes[MK_MAX_NDIM];
    for (int i = 0; i < x->ndim; i++) axes[i] = i;
    axes[na] = nb;
    axes[nb] = na;
    return mk_transpose(x, x->ndim, axes);
}

mk_array *mk_moveaxis(mk_array *x, int src, int dst) {
    int s = check_axis("moveaxis", src, x->ndim);
    if (s < 0) return NULL;
    int d = check_axis("moveaxis", dst, x->ndim);
    if (d < 0) return NULL;
    if (s == d) {
        mk_incref(x);
        return x;
    }
    int order[MK_MAX_NDIM], n = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != s) order[n++] = i;
    /* insert s at position d */
    for (int i = x->ndim - 1; i > d; i--) order[i] = order[i - 1];
    order[d] = s;
    return mk_transpose(x, x->ndim, order);
}

/* --------------------------------------------------- adding/removing dims */

mk_array *mk_expand_dims(mk_array *x, int naxes, const int *axes_in) {
    if (naxes == 0) {
        mk_incref(x);
        return x;
    }
    int out_nd = x->ndim + naxes;
    for (int i = 0; i < naxes; i++) {
        int a = axes_in[i];
        if (a < -out_nd || a >= out_nd) {
            mk_error_set(MK_ERR_VALUE, "[expand_dims] Axis %d is out of bounds for array with %d dimensions.", a,
                         out_nd);
            return NULL;
        }
    }
    if (out_nd > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[expand_dims] Arrays of more than %d dimensions are not supported.",
                     MK_MAX_NDIM);
        return NULL;
    }
    bool is_new[MK_MAX_NDIM] = {0};
    for (int i = 0; i < naxes; i++) {
        int a = axes_in[i] < 0 ? axes_in[i] + out_nd : axes_in[i];
        if (is_new[a]) {
            mk_error_set(MK_ERR_VALUE, "[expand_dims] Received duplicate axes.");
            return NULL;
        }
        is_new[a] = true;
    }
    view_params *v = view_new(x, out_nd);
    if (!v) return NULL;
    int64_t shape[MK_MAX_NDIM];
    for (int k = 0, src = 0; k < out_nd; k++) {
        if (is_new[k]) {
            shape[k] = 1;
        } else {
            shape[k] = x->shape[src];
            v->map[k] = src++;
        }
    }
    return view_node(x, v, out_nd, shape);
}

mk_array *mk_squeeze(mk_array *x, int naxes, const int *axes_in) {
    bool drop[MK_MAX_NDIM] = {0};
    if (naxes < 0) {
        for (int i = 0; i < x->ndim; i++) drop[i] = x->shape[i] == 1;
    } else {
        if (naxes == 0) {
            mk_incref(x);
            return x;
        }
        /* as MLX: each axis is checked for range and size first, then the
         * whole list for duplicates */
        for (int i = 0; i < naxes; i++) {
            int a = mk_norm_axis("squeeze", axes_in[i], x->ndim);
            if (a < 0) return NULL;
            if (x->shape[a] != 1) {
                mk_error_set(MK_ERR_VALUE, "[squeeze] Cannot squeeze axis %d with size %lld which is not equal to 1.",
                             axes_in[i], (long long)x->shape[a]);
                return NULL;
            }
        }
        for (int i = 0; i < naxes; i++) {
            int a = axes_in[i] < 0 ? axes_in[i] + x->ndim : axes_in[i];
            if (drop[a]) {
                mk_error_set(MK_ERR_VALUE, "[squeeze] Received duplicate axes.");
                return NULL;
            }
            drop[a] = true;
        }
    }
    int n = 0;
    int64_t shape[MK_MAX_NDIM];
    view_params *v = view_new(x, x->ndim);
    if (!v) return NULL;
    for (int i = 0; i < x->ndim; i++)
        if (!drop[i]) {
            v->map[n] = i;
            shape[n++] = x->shape[i];
        }
    v->ndim = n;
    return view_node(x, v, n, shape);
}

mk_array *mk_broadcast_to(mk_array *x, int ndim, const int64_t *shape) {
    char sa[256], sb[256];
    int64_t bshape[MK_MAX_NDIM];
    if (ndim > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[broadcast_to] Arrays of more than %d dimensions are not supported.",
                     MK_MAX_NDIM);
        return NULL;
    }
    for (int k = 0; k < ndim; k++)
        if (shape[k] < 0) {
            mk_error_set(MK_ERR_VALUE, "[broadcast_to] Negative dimensions not allowed.");
            return NULL;
        }
    if (ndim == x->ndim && (ndim == 0 || !memcmp(shape, x->shape, ndim * sizeof *shape))) {
        mk_incref(x);
        return x;
    }
    int bnd = mk_broadcast_shapes(x->ndim, x->shape, ndim, shape, bshape);
    if (bnd < 0) return NULL;
    if (bnd != ndim || memcmp(bshape, shape, ndim * sizeof *shape)) {
        mk_error_set(MK_ERR_VALUE, "Cannot broadcast array of shape %s into shape %s.",
                     mk_shape_str(x->ndim, x->shape, sa, sizeof sa), mk_shape_str(ndim, shape, sb, sizeof sb));
        return NULL;
    }
    if (mk_shape_size(ndim, shape) < 0) return NULL;
    view_params *v = view_new(x, ndim);
    if (!v) return NULL;
    int lead = ndim - x->ndim;
    for (int k = lead; k < ndim; k++)
        if (x->shape[k - lead] == shape[k]) v->map[k] = k - lead;
    return view_node(x, v, ndim, shape);
}

/* ----------------------------------------------------------------- slicing */

mk_array *mk_slice(mk_array *x, const int64_t *start, const int64_t *stop, const int64_t *step) {
    view_params *v = view_new(x, x->ndim);
    if (!v) return NULL;
    int64_t shape[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) {
        int64_t n;
        /* written so that huge steps do not overflow */
        if (step[d] > 0)
            n = stop[d] > start[d] ? (stop[d] - start[d] - 1) / step[d] + 1 : 0;
        else
            n = stop[d] < start[d] ? (start[d] - stop[d] - 1) / -step[d] + 1 : 0;
        shape[d] = n;
        v->map[d] = d;
        v->mult[d] = n > 1 ? step[d] : 1;
        v->start[d] = n > 0 ? start[d] : 0;
    }
    return view_node(x, v, x->ndim, shape);
}

/* ---------------------------------------------------------------- diagonal */

/* The diagonal as a view: the other dims keep their strides; the diagonal,
 * last, steps along both axes at once. */
typedef struct {
    int ax1, ax2;
    int64_t off1, off2;
} diagonal_params;

static int diagonal_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const diagonal_params *d = p->params;
    const mk_array *x = in[0];
    mk_array *o = out[0];
    int64_t strides[MK_MAX_NDIM], off = x->offset;
    int n = 0;
    for (int i = 0; i < x->ndim; i++)
        if (i != d->ax1 && i != d->ax2) strides[n++] = x->strides[i];
    strides[n] = x->strides[d->ax1] + x->strides[d->ax2];
    if (o->size > 0) off += d->off1 * x->strides[d->ax1] + d->off2 * x->strides[d->ax2];
    mk_set_view(o, x, off, strides);
    return 0;
}

static int diagonal_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static const mk_opdef diagonal_def = {"diagonal", diagonal_eval, NULL, diagonal_vjp, NULL, NULL, false};

mk_array *mk_diagonal(mk_array *x, int64_t offset, int axis1, int axis2) {
    int nd = x->ndim;
    if (nd < 2) {
        mk_error_set(MK_ERR_VALUE, "[diagonal] Array must have at least two dimensions, but got %d dimensions.", nd);
        return NULL;
    }
    int a1 = axis1 < 0 ? axis1 + nd : axis1, a2 = axis2 < 0 ? axis2 + nd : axis2;
    if (a1 < 0 || a1 >= nd) {
        mk_error_set(MK_ERR_INDEX, "[diagonal] Invalid axis1 %d for array with %d dimensions.", axis1, nd);
        return NULL;
    }
    if (a2 < 0 || a2 >= nd) {
        mk_error_set(MK_ERR_INDEX, "[diagonal] Invalid axis2 %d for array with %d dimensions.", axis2, nd);
        return NULL;
    }
    if (a1 == a2) {
        mk_error_set(MK_ERR_VALUE, "[diagonal] axis1 and axis2 cannot be the same axis");
        return NULL;
    }
    diagonal_params *d = malloc(sizeof *d);
    if (!d) return mk_nomem();
    d->ax1 = a1;
    d->ax2 = a2;
    d->off1 = offset < 0 ? -offset : 0;
    d->off2 = offset > 0 ? offset : 0;
    int64_t shape[MK_MAX_NDIM], n1 = x->shape[a1] - d->off1, n2 = x->shape[a2] - d->off2;
    int n = 0;
    for (int i = 0; i < nd; i++)
        if (i != a1 && i != a2) shape[n++] = x->shape[i];
    shape[n] = n1 < n2 ? n1 : n2;
    if (shape[n] < 0) shape[n] = 0;
    return mk_node(&diagonal_def, d, x->dtype, nd - 1, shape, 1, &x);
}

/* diag of a 1-D array: an n x n matrix of zeros with x on diagonal k. */
static int diag_matrix_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    int64_t k = *(const int64_t *)p->params;
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    size_t sz = mk_dtype_size(o->dtype);
    memset(mk_data(o), 0, (size_t)o->size * sz);
    int64_t n = o->shape[0], first = k >= 0 ? k : -k * n, step = n + 1;
    mk_copy_into(in[0], (char *)mk_data(o) + first * (int64_t)sz, &step);
    return 0;
}

static int diag_matrix_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static const mk_opdef diag_matrix_def = {"diag", diag_matrix_eval, NULL, diag_matrix_vjp, NULL, NULL, false};

mk_array *mk_diag(mk_array *x, int64_t k) {
    if (x->ndim == 2) return mk_diagonal(x, k, 0, 1);
    if (x->ndim != 1) {
        mk_error_set(MK_ERR_VALUE, "[diag] array must be 1-D or 2-D, got array with %d dimensions.", x->ndim);
        return NULL;
    }
    int64_t n = x->shape[0] + (k < 0 ? -k : k), shape[2] = {n, n};
    if (mk_shape_size(2, shape) < 0) return NULL;
    int64_t *p = malloc(sizeof *p);
    if (!p) return mk_nomem();
    *p = k;
    return mk_node(&diag_matrix_def, p, x->dtype, 2, shape, 1, &x);
}

/* ------------------------------------------------------------ dtype view */

/* view(x, dtype): the bytes of each row of the last axis, read as another
 * dtype. A row-contiguous input whose byte offset suits the new type is
 * shared; anything else is first copied to row-major order (MLX's view, too,
 * only promises the bytes, not shared storage). */
static int dtype_view_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    const mk_array *x = in[0];
    mk_array *o = out[0];
    size_t isz = mk_dtype_size(x->dtype), osz = mk_dtype_size(o->dtype);
    if (x->size > 0 && (x->flags & MK_ROW_CONTIG) && (x->offset * (int64_t)isz) % (int64_t)osz == 0) {
        int64_t strides[MK_MAX_NDIM];
        mk_row_strides(o->ndim, o->shape, strides);
        mk_set_view(o, x, x->offset * (int64_t)isz / (int64_t)osz, strides);
        return 0;
    }
    return copy_dense(x, o);
}

static const mk_opdef dtype_view_def = {"view", dtype_view_eval, NULL, .cheap = true};

mk_array *mk_view_dtype(mk_array *x, mk_dtype dtype) {
    size_t isz = mk_dtype_size(x->dtype), osz = mk_dtype_size(dtype);
    if (dtype == x->dtype) {
        mk_incref(x);
        return x;
    }
    int64_t shape[MK_MAX_NDIM];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    if (isz != osz) {
        if (x->ndim == 0) {
            mk_error_set(MK_ERR_VALUE, "[view] Changing the type of a scalar is only allowed for types with the same size.");
            return NULL;
        }
        int64_t bytes = shape[x->ndim - 1] * (int64_t)isz;
        if (osz > isz && bytes % (int64_t)osz != 0) {
            mk_error_set(MK_ERR_VALUE, "[view] When viewing as a larger dtype, the size in bytes of the last axis must be "
                                       "a multiple of the requested type size.");
            return NULL;
        }
        shape[x->ndim - 1] = bytes / (int64_t)osz;
    }
    return mk_node(&dtype_view_def, NULL, dtype, x->ndim, shape, 1, &x);
}

/* ---------------------------------------------------------- transformation rules */

/* vjp of a strided view: the cotangent summed over the view's new and
 * broadcast dims, laid out along the input's dims, then written into zeros
 * at the positions the view reads (a slice update), unless it covers all. */
static int view_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const view_params *v = p->params;
    mk_array *x = p->inputs[0];
    if (!want[0] || !cots[0]) return 0;
    mk_arena A = {0};
    int sum_axes[MK_MAX_NDIM], ns = 0, kept[MK_MAX_NDIM], nk = 0;
    for (int k = 0; k < v->ndim; k++) {
        if (v->map[k] < 0)
            sum_axes[ns++] = k;
        else
            kept[nk++] = k;
    }
    mk_array *c = cots[0];
    if (ns) c = mk_ar_sum(&A, c, ns, sum_axes, false);
    /* order the kept dims by the input dim they map to */
    int perm[MK_MAX_NDIM];
    for (int i = 0; i < nk; i++) perm[i] = i;
    for (int i = 1; i < nk; i++)
        for (int j = i; j > 0 && v->map[kept[perm[j - 1]]] > v->map[kept[perm[j]]]; j--) {
            int t = perm[j];
            perm[j] = perm[j - 1];
            perm[j - 1] = t;
        }
    bool identity = true;
    for (int i = 0; i < nk; i++) identity &= perm[i] == i;
    if (!identity) c = mk_ar_transpose(&A, c, nk, perm);
    int64_t shape[MK_MAX_NDIM];
    mk_index_dim dims[MK_MAX_NDIM];
    bool whole = true;
    for (int d = 0; d < x->ndim; d++) {
        shape[d] = 1;
        dims[d] = (mk_index_dim){MK_IDX_SLICE, 0, v->start[d], 1, 1};
    }
    for (int i = 0; i < nk; i++) {
        int k = kept[perm[i]], d = v->map[k];
        shape[d] = p->outdesc[0].shape[k];
        dims[d].step = v->mult[k];
        dims[d].len = shape[d];
    }
    for (int d = 0; d < x->ndim; d++)
        whole &= dims[d].start == 0 && dims[d].len == x->shape[d] && (dims[d].step == 1 || dims[d].len <= 1);
    c = mk_ar_reshape(&A, c, x->ndim, shape);
    if (c && !whole) {
        mk_array *z = mk_ar_zeros_like(&A, x);
        c = z ? mk_ar_keep(&A, mk_scatter(z, dims, 0, NULL, 0, c, MK_SCATTER_NONE)) : NULL;
    }
    grads[0] = mk_ar_out(c);
    mk_ar_free(&A);
    return grads[0] ? 0 : -1;
}

/* MLX's name for what the view does */
static void view_name(const mk_prim *p, char *buf, size_t n) {
    const view_params *v = p->params;
    const char *name = "Slice";
    bool sliced = false, bcast = false, perm = false;
    for (int d = 0; d < v->in_ndim; d++) sliced |= v->start[d] != 0;
    for (int k = 0, last = -1; k < v->ndim; k++) {
        sliced |= v->mult[k] != 1;
        bcast |= v->map[k] < 0 && p->outdesc[0].shape[k] != 1;
        if (v->map[k] >= 0) {
            perm |= v->map[k] < last;
            last = v->map[k];
        }
    }
    if (sliced)
        name = "Slice";
    else if (bcast)
        name = "Broadcast";
    else if (perm)
        name = "Transpose";
    else if (v->ndim < v->in_ndim)
        name = "Squeeze";
    else if (v->ndim > v->in_ndim)
        name = "ExpandDims";
    snprintf(buf, n, "%s", name);
}

static int view_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    view_params *v = malloc(sizeof *v);
    if (!v) {
        mk_nomem();
        return -1;
    }
    memcpy(v, p->params, sizeof *v);
    out[0] = mk_node(&view_def, v, tans[0]->dtype, p->outdesc[0].ndim, p->outdesc[0].shape, 1, &tans[0]);
    return out[0] ? 0 : -1;
}

/* the same view with a leading batch dim passed through */
static int view_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const view_params *v0 = p->params;
    mk_arena A = {0};
    mk_array *x = mk_ar_batch_front(&A, in[0], axes[0], 1);
    view_params *v = x ? calloc(1, sizeof *v) : NULL;
    if (!v) {
        mk_ar_free(&A);
        if (x) mk_nomem();
        return -1;
    }
    v->ndim = v0->ndim + 1;
    v->in_ndim = v0->in_ndim + 1;
    v->map[0] = 0;
    v->mult[0] = 1;
    v->start[0] = 0;
    for (int k = 0; k < v0->ndim; k++) {
        v->map[k + 1] = v0->map[k] < 0 ? -1 : v0->map[k] + 1;
        v->mult[k + 1] = v0->mult[k];
    }
    for (int d = 0; d < v0->in_ndim; d++) v->start[d + 1] = v0->start[d];
    /* a dim that showed a whole input dim (transposes, expand_dims, squeeze,
     * the unsliced dims of a slice) shows the whole new one: a shapeless
     * replay follows new sizes; new, broadcast and sliced dims keep theirs */
    int64_t shape[MK_MAX_NDIM];
    const mk_array *x0 = p->inputs[0];
    shape[0] = x->shape[0];
    for (int k = 0; k < v0->ndim; k++) {
        int d = v0->map[k];
        int64_t len = p->outdesc[0].shape[k];
        bool whole = d >= 0 && v0->start[d] == 0 && v0->mult[k] == 1 && len == x0->shape[d];
        shape[k + 1] = whole && x->ndim == v->in_ndim ? x->shape[d + 1] : len;
        if (d >= 0 && !whole && len > 0 && x->ndim == v->in_ndim) {
            /* a slice kept on a new size must stay inside it */
            int64_t n = x->shape[d + 1], last = v0->start[d] + (len - 1) * v0->mult[k];
            if (v0->start[d] >= n || last < 0 || last >= n) {
                free(v);
                mk_ar_free(&A);
                mk_error_set(MK_ERR_VALUE, "[compile] A slice of %lld elements traced on an axis of %lld does not "
                             "fit an axis of %lld.", (long long)len, (long long)x0->shape[d], (long long)n);
                return -1;
            }
        }
    }
    outs[0] = mk_node(&view_def, v, x->dtype, v->ndim, shape, 1, &x);
    out_axes[0] = 0;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

static int reshape_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    if (!want[0] || !cots[0]) return 0;
    grads[0] = mk_reshape(cots[0], p->inputs[0]->ndim, p->inputs[0]->shape);
    return grads[0] ? 0 : -1;
}

static int reshape_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    out[0] = mk_reshape(tans[0], p->outdesc[0].ndim, p->outdesc[0].shape);
    return out[0] ? 0 : -1;
}

static int reshape_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    mk_arena A = {0};
    mk_array *x = mk_ar_batch_front(&A, in[0], axes[0], 1);
    int64_t shape[MK_MAX_NDIM];
    const int *rp = p->params;
    int nd = p->outdesc[0].ndim + 1;
    if (x && rp && rp[1] >= 0) {
        /* a flatten: x's dims with the same axes merged */
        nd = 0;
        for (int d = 0; d < x->ndim; d++) {
            if (d <= rp[1] + 1 || d > rp[2] + 1) shape[nd++] = x->shape[d];
            else shape[nd - 1] *= x->shape[d];
        }
        outs[0] = reshape_node(x, nd, shape, -1, rp[1] + 1, rp[2] + 1, -1, 0);
    } else if (x && rp && rp[3] >= 0) {
        /* an unflatten: x's dims with the same axis split into the traced dims */
        nd = 0;
        for (int d = 0; d < x->ndim; d++) {
            if (d != rp[3] + 1) shape[nd++] = x->shape[d];
            else
                for (int k = 0; k < rp[4]; k++) shape[nd++] = p->outdesc[0].shape[rp[3] + k];
        }
        outs[0] = reshape_node(x, nd, shape, -1, -1, -1, rp[3] + 1, rp[4]);
    } else if (x) {
        shape[0] = x->shape[0];
        memcpy(shape + 1, p->outdesc[0].shape, p->outdesc[0].ndim * sizeof *shape);
        if (rp && rp[0] >= 0) shape[1 + rp[0]] = -1;
        outs[0] = mk_reshape(x, nd, shape);
    } else
        outs[0] = NULL;
    out_axes[0] = 0;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

/* the diagonal: its cotangent goes back onto the diagonal of zeros, as a
 * column (padded to the rows) times the eye mask of that diagonal */
static int diagonal_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    if (!want[0] || !cots[0]) return 0;
    const diagonal_params *d = p->params;
    mk_array *x = p->inputs[0];
    mk_arena A = {0};
    int a1 = d->ax1, a2 = d->ax2, nd = x->ndim;
    int64_t n1 = x->shape[a1], n2 = x->shape[a2];
    /* mask[i, j] = (j - i == offset) */
    mk_array *m = mk_ar_keep(&A, mk_eye(n1, n2, d->off2 - d->off1, x->dtype));
    int nr = 0;
    for (int k = 0; k < nd; k++)
        if (k != a1 && k != a2) nr++;
    /* cot has shape rest + (L,); place it along the diagonal: for row i the
     * diagonal element is index i - max(0,-offset) */
    int64_t r0 = d->off1;
    int64_t L = cots[0]->shape[cots[0]->ndim - 1];
    /* pad the diagonal vector to length n1 (rows) and broadcast over columns */
    int64_t pw[MK_MAX_NDIM][2];
    memset(pw, 0, sizeof pw);
    pw[cots[0]->ndim - 1][0] = r0;
    pw[cots[0]->ndim - 1][1] = n1 - r0 - L;
    mk_array *zero = mk_ar_scalar(&A, cots[0], 0.0);
    mk_array *cp = zero ? mk_ar_keep(&A, mk_pad(cots[0], (const int64_t(*)[2])pw, zero)) : NULL;
    int64_t es[MK_MAX_NDIM];
    int ne = 0;
    if (cp) {
        for (int k = 0; k < cp->ndim; k++) es[ne++] = cp->shape[k];
        es[ne++] = 1;
    }
    mk_array *col = mk_ar_reshape(&A, cp, ne, es); /* rest + (n1, 1) */
    mk_array *full = mk_ar_mul(&A, col, m);        /* rest + (n1, n2) */
    /* move the two last axes back to a1, a2 */
    int perm[MK_MAX_NDIM];
    for (int k = 0, ri = 0; k < nd; k++) perm[k] = k == a1 ? nr : k == a2 ? nr + 1 : ri++;
    /* perm[k] as built indexes the source axis of full for output axis k */
    mk_array *g = full ? mk_ar_transpose(&A, full, nd, perm) : NULL;
    grads[0] = mk_ar_out(g);
    mk_ar_free(&A);
    return grads[0] ? 0 : -1;
}

static int diag_matrix_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    if (!want[0] || !cots[0]) return 0;
    int64_t k = *(const int64_t *)p->params;
    grads[0] = mk_diagonal(cots[0], k, 0, 1);
    return grads[0] ? 0 : -1;
}

/* ---- contiguous: x's elements in dense row-major storage (MLX's
 * Contiguous): a view of x when x already is (or, with allow_col_major, is
 * dense column-major), else a copy. Decided at evaluation, when the layout
 * is known. */

static int contiguous_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const mk_array *x = in[0];
    bool allow_col = *(const bool *)p->params;
    if ((x->flags & MK_ROW_CONTIG) || (allow_col && (x->flags & MK_COL_CONTIG))) {
        mk_set_view(out[0], x, x->offset, x->strides);
        return 0;
    }
    return copy_dense(x, out[0]);
}

static const mk_opdef contiguous_def = {"contiguous", contiguous_eval, NULL, .cheap = true};

mk_array *mk_contiguous(mk_array *x, bool allow_col_major) {
    bool *params = malloc(sizeof *params);
    if (!params) return mk_nomem();
    *params = allow_col_major;
    return mk_node(&contiguous_def, params, x->dtype, x->ndim, x->shape, 1, &x);
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_view(const mk_prim *p, int *map, int64_t *mult, int64_t *start) {
    if (p->op != &view_def) return false;
    const view_params *v = p->params;
    memcpy(map, v->map, sizeof v->map);
    memcpy(mult, v->mult, sizeof v->mult);
    memcpy(start, v->start, sizeof v->start);
    return true;
}
bool mk_xp_reshape(const mk_prim *p, int *infer) {
    if (p->op != &reshape_def) return false;
    *infer = p->params ? ((const int *)p->params)[0] : -1;
    return true;
}
bool mk_xp_reshape_kind(const mk_prim *p, int *fs, int *fe, int *ua, int *un) {
    const int *rp = p->op == &reshape_def ? p->params : NULL;
    *fs = rp ? rp[1] : -1, *fe = rp ? rp[2] : -1, *ua = rp ? rp[3] : -1, *un = rp ? rp[4] : 0;
    return rp && (*fs >= 0 || *ua >= 0);
}
