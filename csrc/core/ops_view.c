/* Ops whose result is a view of the input's buffer: reshape, transpose,
 * swapaxes, moveaxis, expand_dims, squeeze, flatten, broadcast_to and basic
 * slicing. Each is a lazy node whose evaluator only computes an offset and
 * strides (reshape copies when the input's layout cannot be viewed). */
#include <stdlib.h>
#include <string.h>

#include "iter.h"
#include "ops.h"
#include "types.h"

int mk_norm_axis(const char *op, int axis, int ndim) {
    if (axis < -ndim || axis >= ndim) {
        mk_error_set(MK_ERR_VALUE, "[%s] Invalid axis %d for array with %d dimensions.", op, axis, ndim);
        return -1;
    }
    return axis < 0 ? axis + ndim : axis;
}

/* ------------------------------------------------------------ strided view */

/* params of a generic strided view: out = in[offset + sum(i_k * strides_k)] */
typedef struct {
    int64_t offset; /* relative to the input's offset, in elements of the input's strides */
    int ndim;
    /* out dim k takes input stride map[k] (or 0 for a new/broadcast dim) times mult[k],
     * plus a start offset along input dims */
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

static const mk_opdef view_def = {"view", view_eval, NULL};

static view_params *view_new(const mk_array *x, int ndim) {
    view_params *v = calloc(1, sizeof *v);
    if (!v) return mk_nomem();
    v->ndim = ndim;
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

static int reshape_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    const mk_array *x = in[0];
    mk_array *o = out[0];
    if (x->flags & MK_ROW_CONTIG) {
        int64_t strides[MK_MAX_NDIM], s = 1;
        for (int i = o->ndim - 1; i >= 0; i--) {
            strides[i] = s;
            s *= o->shape[i];
        }
        mk_set_view(o, x, x->offset, strides);
        return 0;
    }
    if (mk_alloc_out(o) < 0) return -1;
    /* copy x in row-major order into o's dense storage */
    mk_cast_fn fn = mk_cast_table[x->dtype][x->dtype];
    const int64_t *strides[1] = {x->strides};
    mk_iter it;
    mk_iter_init(&it, x->ndim, x->shape, 1, strides);
    size_t isz = mk_dtype_size(x->dtype);
    char *dst = mk_data(o);
    const char *src = mk_data(x);
    /* serial walk: the destination position is the running count */
    int64_t pos = 0;
    int64_t idx[MK_MAX_NDIM] = {0};
    int64_t inner = it.shape[it.ndim - 1], rows = it.total / (inner ? inner : 1);
    for (int64_t r = 0; r < rows && inner; r++) {
        int64_t off = 0;
        for (int d = 0; d < it.ndim - 1; d++) off += idx[d] * it.strides[0][d];
        fn(src + off * (int64_t)isz, it.strides[0][it.ndim - 1], dst + pos * (int64_t)isz, 1, inner);
        pos += inner;
        for (int d = it.ndim - 2; d >= 0; d--) {
            if (++idx[d] < it.shape[d]) break;
            idx[d] = 0;
        }
    }
    return 0;
}

static const mk_opdef reshape_def = {"reshape", reshape_eval, NULL};

mk_array *mk_reshape(mk_array *x, int ndim, const int64_t *shape_in) {
    int64_t shape[MK_MAX_NDIM];
    int infer = -1;
    int64_t known = 1;
    if (ndim > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[reshape] Too many dimensions.");
        return NULL;
    }
    for (int i = 0; i < ndim; i++) {
        shape[i] = shape_in[i];
        if (shape[i] == -1) {
            if (infer >= 0) {
                mk_error_set(MK_ERR_VALUE, "[reshape] Can only infer one dimension.");
                return NULL;
            }
            infer = i;
        } else if (shape[i] < 0) {
            mk_error_set(MK_ERR_VALUE, "[reshape] Invalid negative dimension %lld.", (long long)shape[i]);
            return NULL;
        } else {
            known *= shape[i];
        }
    }
    char sbuf[512];
    if (infer >= 0) {
        if (known == 0 || x->size % known != 0) {
            mk_error_set(MK_ERR_VALUE, "[reshape] Cannot infer the shape of an empty array");
            if (known != 0)
                mk_error_set(MK_ERR_VALUE, "[reshape] Cannot reshape array of size %lld into shape %s.",
                             (long long)x->size, mk_shape_str(ndim, shape_in, sbuf, sizeof sbuf));
            return NULL;
        }
        shape[infer] = x->size / known;
        known *= shape[infer];
    }
    if (known != x->size) {
        mk_error_set(MK_ERR_VALUE, "[reshape] Cannot reshape array of size %lld into shape %s.",
                     (long long)x->size, mk_shape_str(ndim, shape_in, sbuf, sizeof sbuf));
        return NULL;
    }
    return mk_node(&reshape_def, NULL, x->dtype, ndim, shape, 1, &x);
}

mk_array *mk_flatten(mk_array *x, int start_axis, int end_axis) {
    if (x->ndim == 0) {
        int64_t one = 1;
        return mk_reshape(x, 1, &one);
    }
    int s = mk_norm_axis("flatten", start_axis, x->ndim);
    if (s < 0) return NULL;
    int e = mk_norm_axis("flatten", end_axis, x->ndim);
    if (e < 0) return NULL;
    if (s > e) {
        mk_error_set(MK_ERR_VALUE, "[flatten] start_axis must be less than or equal to end_axis");
        return NULL;
    }
    int64_t shape[MK_MAX_NDIM];
    int n = 0;
    for (int i = 0; i < s; i++) shape[n++] = x->shape[i];
    int64_t m = 1;
    for (int i = s; i <= e; i++) m *= x->shape[i];
    shape[n++] = m;
    for (int i = e + 1; i < x->ndim; i++) shape[n++] = x->shape[i];
    return mk_reshape(x, n, shape);
}

/* ------------------------------------------------------- axis permutations */

mk_array *mk_transpose(mk_array *x, int naxes, const int *axes_in) {
    int axes[MK_MAX_NDIM];
    int nd = x->ndim;
    if (naxes < 0) {
        for (int i = 0; i < nd; i++) axes[i] = nd - 1 - i;
    } else {
        if (naxes != nd) {
            mk_error_set(MK_ERR_VALUE, "[transpose] Recived %d axes for array with %d dimensions.", naxes, nd);
            return NULL;
        }
        int seen[MK_MAX_NDIM] = {0};
        for (int i = 0; i < nd; i++) {
            int a = axes_in[i] < 0 ? axes_in[i] + nd : axes_in[i];
            if (a < 0 || a >= nd) {
                mk_error_set(MK_ERR_VALUE, "[transpose] Invalid axis (%d) for array with %d dimensions.",
                             axes_in[i], nd);
                return NULL;
            }
            if (seen[a]++) {
                mk_error_set(MK_ERR_VALUE, "[transpose] Repeat axes not allowed.");
                return NULL;
            }
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
    int na = mk_norm_axis("swapaxes", a, x->ndim);
    int nb = na < 0 ? -1 : mk_norm_axis("swapaxes", b, x->ndim);
    if (na < 0 || nb < 0) return NULL;
    int axes[MK_MAX_NDIM];
    for (int i = 0; i < x->ndim; i++) axes[i] = i;
    axes[na] = nb;
    axes[nb] = na;
    return mk_transpose(x, x->ndim, axes);
}

mk_array *mk_moveaxis(mk_array *x, int src, int dst) {
    int s = mk_norm_axis("moveaxis", src, x->ndim);
    int d = s < 0 ? -1 : mk_norm_axis("moveaxis", dst, x->ndim);
    if (s < 0 || d < 0) return NULL;
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
    int out_nd = x->ndim + naxes;
    if (out_nd > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[expand_dims] Too many dimensions.");
        return NULL;
    }
    int is_new[MK_MAX_NDIM] = {0};
    for (int i = 0; i < naxes; i++) {
        int a = axes_in[i];
        if (a < -out_nd || a >= out_nd) {
            mk_error_set(MK_ERR_VALUE, "[expand_dims] Invalid axis %d for output array with %d dimensions.", a,
                         out_nd);
            return NULL;
        }
        if (a < 0) a += out_nd;
        if (is_new[a]++) {
            mk_error_set(MK_ERR_VALUE, "[expand_dims] Received duplicate axes.");
            return NULL;
        }
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
    int drop[MK_MAX_NDIM] = {0};
    if (naxes < 0) {
        for (int i = 0; i < x->ndim; i++) drop[i] = x->shape[i] == 1;
    } else {
        for (int i = 0; i < naxes; i++) {
            int a = mk_norm_axis("squeeze", axes_in[i], x->ndim);
            if (a < 0) return NULL;
            if (drop[a]++) {
                mk_error_set(MK_ERR_VALUE, "[squeeze] Received duplicate axes.");
                return NULL;
            }
            if (x->shape[a] != 1) {
                mk_error_set(MK_ERR_VALUE, "[squeeze] Cannot squeeze axis with size != 1");
                return NULL;
            }
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
    if (ndim < x->ndim) goto bad;
    view_params *v = view_new(x, ndim);
    if (!v) return NULL;
    int lead = ndim - x->ndim;
    for (int k = 0; k < ndim; k++) {
        int d = k - lead;
        if (d < 0) continue;
        if (x->shape[d] == shape[k]) {
            v->map[k] = d;
        } else if (x->shape[d] != 1) {
            free(v);
            goto bad;
        }
    }
    if (mk_shape_size(ndim, shape) < 0) {
        free(v);
        return NULL;
    }
    return view_node(x, v, ndim, shape);
bad:
    mk_error_set(MK_ERR_VALUE, "[broadcast_shapes] Shapes %s and %s cannot be broadcast.",
                 mk_shape_str(x->ndim, x->shape, sa, sizeof sa), mk_shape_str(ndim, shape, sb, sizeof sb));
    return NULL;
}

/* ----------------------------------------------------------------- slicing */

mk_array *mk_slice(mk_array *x, const int64_t *start, const int64_t *stop, const int64_t *step) {
    view_params *v = view_new(x, x->ndim);
    if (!v) return NULL;
    int64_t shape[MK_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) {
        int64_t n;
        if (step[d] > 0)
            n = stop[d] > start[d] ? (stop[d] - start[d] + step[d] - 1) / step[d] : 0;
        else
            n = stop[d] < start[d] ? (start[d] - stop[d] - step[d] - 1) / (-step[d]) : 0;
        shape[d] = n;
        v->map[d] = d;
        v->mult[d] = step[d];
        v->start[d] = n > 0 ? start[d] : 0;
    }
    return view_node(x, v, x->ndim, shape);
}
