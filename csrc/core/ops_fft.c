/* mx.fft: discrete Fourier transforms through KissFFT (Debian's libkissfft-dev).
 *
 * One node ("FFT", as MLX's primitive) transforms a row-contiguous complex64
 * (or, for rfft, float32) input along a list of axes, one axis at a time:
 * every line along the axis is read with its stride straight into
 * kiss_fft_stride, transformed into a scratch line and written back. Lines
 * are spread over the pool; a KissFFT plan is read-only once made, so all
 * threads share one plan per (length, direction). rfft transforms its last
 * axis first (real lines, n/2 + 1 outputs kept), then the other axes on the
 * smaller array; irfft transforms the other axes first and its last axis
 * last, from the Hermitian half-spectrum to real lines. Inverse transforms
 * are scaled by 1/n inside the node (MLX's backward norm); "ortho" and
 * "forward" multiply afterwards, as MLX.
 *
 * The constructor is MLX's fft_impl: axes are checked, then the input is
 * sliced or zero-padded to the requested sizes and cast (complex64, or
 * float32 for rfft: float64 input is computed in single precision, as
 * MLX's FFT is complex64 only). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "pool.h"
#include "stream.h"
#include "transforms.h"

typedef struct {
    int naxes;
    int axes[MK_MAX_NDIM];
    bool inverse, real;
} fft_params;

static mk_array *fft_node(mk_array *in, int naxes, const int *axes, bool inverse, bool real, int ndim,
                          const int64_t *out_shape);

#ifndef MKPY_NO_KISSFFT
#include <kiss_fft.h>

/* ------------------------------------------------------------------ plans */

/* A transform of one length and direction. KissFFT's butterflies are mixed
 * radix, but a prime factor p costs O(p) per output and accumulates its
 * rounding over p terms, so lengths with a prime factor above
 * BLUESTEIN_MIN_PRIME go through Bluestein's algorithm instead: the DFT as a
 * circular convolution with the chirp e^{i pi k^2 / n}, done with
 * power-of-two KissFFTs of length M >= 2n - 1 (chirp and its transform made
 * once per plan, in double before rounding). */
#define BLUESTEIN_MIN_PRIME 64

typedef struct fft_plan fft_plan;
struct fft_plan {
    int64_t n;
    bool inverse;
    kiss_fft_cfg cfg;        /* direct */
    int64_t n1, n2;          /* four-step: n = n1 * n2 */
    fft_plan *sub;           /* [0]: length n1, [1]: length n2 */
    int64_t M;               /* Bluestein: */
    kiss_fft_cfg fwd, inv;
    kiss_fft_cpx *chirp;     /* n: e^{-i pi k^2 / n} (forward) */
    kiss_fft_cpx *bhat;      /* M: FFT of the conjugate chirp, scaled by 1/M */
};

/* Long smooth lengths (a single long line does not spread over lines)
 * use the four-step algorithm: n1 transforms of length n2 along strided
 * columns, a twiddle, n2 transforms of length n1, each step over the pool,
 * and every sub-transform fits in cache. */
#define FOUR_STEP_MIN (1 << 16)

static int64_t largest_prime_factor(int64_t n) {
    int64_t p = 1;
    for (int64_t f = 2; f * f <= n; f++)
        while (n % f == 0) {
            p = f;
            n /= f;
        }
    return n > 1 ? n : p;
}

static void plan_free(fft_plan *P) {
    if (P->sub) {
        plan_free(&P->sub[0]);
        plan_free(&P->sub[1]);
        free(P->sub);
    }
    if (P->cfg) kiss_fft_free(P->cfg);
    if (P->fwd) kiss_fft_free(P->fwd);
    if (P->inv) kiss_fft_free(P->inv);
    free(P->chirp);
    free(P->bhat);
}

static int plan_make(fft_plan *P, int64_t n, bool inverse) {
    memset(P, 0, sizeof *P);
    P->n = n;
    P->inverse = inverse;
    bool smooth = n <= 4 || largest_prime_factor(n) <= BLUESTEIN_MIN_PRIME;
    if (smooth && n >= FOUR_STEP_MIN) {
        int64_t n1 = 1;
        for (int64_t d = 1; d * d <= n; d++)
            if (n % d == 0) n1 = d;
        if (n1 >= 64) {
            P->n1 = n1;
            P->n2 = n / n1;
            P->sub = calloc(2, sizeof *P->sub);
            if (!P->sub) goto nomem;
            if (plan_make(&P->sub[0], P->n1, inverse) < 0 || plan_make(&P->sub[1], P->n2, inverse) < 0) {
                plan_free(P);
                return -1;
            }
            if (P->sub[0].cfg && P->sub[1].cfg) return 0;
            /* a factor that is not a plain KissFFT plan: the direct plan instead */
            plan_free(P);
            memset(P, 0, sizeof *P);
            P->n = n;
            P->inverse = inverse;
        }
    }
    if (smooth) {
        P->cfg = kiss_fft_alloc((int)n, inverse, NULL, NULL);
        if (!P->cfg) goto nomem;
        return 0;
    }
    int64_t M = 1;
    while (M < 2 * n - 1) M *= 2;
    if (M > 0x7fffffff) {
        mk_error_set(MK_ERR_VALUE, "[fftn] FFT size %lld is too large.", (long long)n);
        return -1;
    }
    P->M = M;
    P->fwd = kiss_fft_alloc((int)M, 0, NULL, NULL);
    P->inv = kiss_fft_alloc((int)M, 1, NULL, NULL);
    P->chirp = malloc(sizeof *P->chirp * (size_t)n);
    P->bhat = calloc((size_t)M, sizeof *P->bhat);
    kiss_fft_cpx *b = calloc((size_t)M, sizeof *b);
    if (!P->fwd || !P->inv || !P->chirp || !P->bhat || !b) {
        free(b);
        goto nomem;
    }
    double sgn = inverse ? 1.0 : -1.0;
    for (int64_t k = 0; k < n; k++) {
        /* k^2 mod 2n keeps the angle small and exact */
        int64_t q = (int64_t)((unsigned __int128)k * (unsigned __int128)k % (unsigned __int128)(2 * n));
        double ang = M_PI * (double)q / (double)n;
        P->chirp[k].r = (float)cos(ang);
        P->chirp[k].i = (float)(sgn * sin(ang));
        kiss_fft_cpx c = {(float)cos(ang), (float)(-sgn * sin(ang))};
        b[k] = c;
        if (k) b[M - k] = c;
    }
    kiss_fft(P->fwd, b, P->bhat);
    for (int64_t k = 0; k < M; k++) {
        P->bhat[k].r /= (float)M;
        P->bhat[k].i /= (float)M;
    }
    free(b);
    return 0;
nomem:
    plan_free(P);
    mk_nomem();
    return -1;
}

typedef struct {
    const fft_plan *P;
    const kiss_fft_cpx *in;
    kiss_fft_cpx *A, *out;
    atomic_int nomem;
} four_step_job;

/* step 1: for column j2, A[j2][k1] = twiddle^(j2 k1) * DFT_n1(in[n2 j1 + j2]) */
static void four_step_cols(void *ctx, int64_t begin, int64_t end) {
    four_step_job *J = ctx;
    const fft_plan *P = J->P;
    double sgn = P->inverse ? 1.0 : -1.0;
    for (int64_t j2 = begin; j2 < end; j2++) {
        kiss_fft_cpx *row = J->A + j2 * P->n1;
        kiss_fft_stride(P->sub[0].cfg, J->in + j2, row, (int)P->n2);
        double ang = sgn * 2.0 * M_PI * (double)j2 / (double)P->n;
        double sr = cos(ang), si = sin(ang), wr = 1.0, wi = 0.0;
        for (int64_t k1 = 0; k1 < P->n1; k1++) {
            float xr = row[k1].r, xi = row[k1].i;
            row[k1].r = (float)(xr * wr - xi * wi);
            row[k1].i = (float)(xr * wi + xi * wr);
            double t = wr * sr - wi * si;
            wi = wr * si + wi * sr;
            wr = t;
        }
    }
}

/* step 2: out[k1 + n1 k2] = DFT_n2 over j2 of A[j2][k1] */
static void four_step_rows(void *ctx, int64_t begin, int64_t end) {
    four_step_job *J = ctx;
    const fft_plan *P = J->P;
    kiss_fft_cpx *t = malloc(sizeof *t * (size_t)P->n2);
    if (!t) {
        atomic_store(&J->nomem, 1);
        return;
    }
    for (int64_t k1 = begin; k1 < end; k1++) {
        kiss_fft_stride(P->sub[1].cfg, J->A + k1, t, (int)P->n1);
        for (int64_t k2 = 0; k2 < P->n2; k2++) J->out[k1 + P->n1 * k2] = t[k2];
    }
    free(t);
}

/* out = DFT(in) for contiguous lines; scratch holds 2 * M (Bluestein) */
static int plan_exec(const fft_plan *P, const kiss_fft_cpx *in, kiss_fft_cpx *out, kiss_fft_cpx *scratch) {
    if (P->cfg) {
        kiss_fft(P->cfg, in, out);
        return 0;
    }
    if (P->sub) {
        four_step_job J = {P, in, malloc(sizeof(kiss_fft_cpx) * (size_t)P->n), out, 0};
        if (!J.A) return -1;
        mk_parallel_for(P->n2, 8, four_step_cols, &J);
        mk_parallel_for(P->n1, 8, four_step_rows, &J);
        free(J.A);
        return atomic_load(&J.nomem) ? -1 : 0;
    }
    kiss_fft_cpx *a = scratch, *A = scratch + P->M;
    for (int64_t k = 0; k < P->n; k++) {
        kiss_fft_cpx x = in[k], c = P->chirp[k];
        a[k].r = x.r * c.r - x.i * c.i;
        a[k].i = x.r * c.i + x.i * c.r;
    }
    memset(a + P->n, 0, sizeof *a * (size_t)(P->M - P->n));
    kiss_fft(P->fwd, a, A);
    for (int64_t k = 0; k < P->M; k++) {
        kiss_fft_cpx x = A[k], c = P->bhat[k];
        A[k].r = x.r * c.r - x.i * c.i;
        A[k].i = x.r * c.i + x.i * c.r;
    }
    kiss_fft(P->inv, A, a);
    for (int64_t k = 0; k < P->n; k++) {
        kiss_fft_cpx x = a[k], c = P->chirp[k];
        out[k].r = x.r * c.r - x.i * c.i;
        out[k].i = x.r * c.i + x.i * c.r;
    }
    return 0;
}

/* ----------------------------------------------------------- evaluator */

typedef struct {
    const fft_plan *plan;
    const char *src; /* complex64 or float32 lines */
    char *dst;       /* complex64 or float32 lines */
    bool src_real, dst_real;
    int64_t n_in, n_out; /* line lengths kept from the input / written */
    int64_t n;           /* transform length */
    int64_t inner;       /* product of the dims after the axis */
    int64_t src_axis_len, dst_axis_len;
    float scale;
    atomic_int nomem;
} line_job;

static void run_lines(void *ctx, int64_t begin, int64_t end) {
    line_job *j = ctx;
    int64_t extra = j->plan->M ? 2 * j->plan->M : 0;
    kiss_fft_cpx *a = malloc(sizeof *a * (size_t)(j->n * 2 + extra));
    if (!a) {
        atomic_store(&j->nomem, 1);
        return;
    }
    kiss_fft_cpx *b = a + j->n, *scratch = b + j->n;
    for (int64_t l = begin; l < end; l++) {
        int64_t outer = l / j->inner, inner = l % j->inner;
        int64_t s0 = outer * j->src_axis_len * j->inner + inner;
        int64_t d0 = outer * j->dst_axis_len * j->inner + inner;
        /* gather the line (zero beyond n_in; Hermitian fill for c2r) */
        if (j->src_real) {
            const float *s = (const float *)j->src + s0;
            for (int64_t k = 0; k < j->n; k++) {
                a[k].r = k < j->n_in ? s[k * j->inner] : 0.0f;
                a[k].i = 0.0f;
            }
        } else {
            const kiss_fft_cpx *s = (const kiss_fft_cpx *)j->src + s0;
            if (j->dst_real) {
                int64_t h = j->n_in; /* n/2 + 1 given */
                for (int64_t k = 0; k < h && k < j->n; k++) a[k] = s[k * j->inner];
                for (int64_t k = h; k < j->n; k++) {
                    kiss_fft_cpx v = s[(j->n - k) * j->inner];
                    a[k].r = v.r;
                    a[k].i = -v.i;
                }
            } else if (j->inner == 1) {
                if (plan_exec(j->plan, s, b, scratch) < 0) atomic_store(&j->nomem, 1);
                goto store;
            } else {
                for (int64_t k = 0; k < j->n; k++) a[k] = s[k * j->inner];
            }
        }
        if (plan_exec(j->plan, a, b, scratch) < 0) atomic_store(&j->nomem, 1);
    store:
        if (j->dst_real) {
            float *d = (float *)j->dst + d0;
            for (int64_t k = 0; k < j->n_out; k++) d[k * j->inner] = b[k].r * j->scale;
        } else {
            kiss_fft_cpx *d = (kiss_fft_cpx *)j->dst + d0;
            for (int64_t k = 0; k < j->n_out; k++) {
                d[k * j->inner].r = b[k].r * j->scale;
                d[k * j->inner].i = b[k].i * j->scale;
            }
        }
    }
    free(a);
}

/* One pass along `axis` of a row-contiguous array of shape `shape` (the
 * source's), writing into dst whose axis has length n_out. */
static int fft_pass(const void *src, bool src_real, void *dst, bool dst_real, int ndim, const int64_t *shape,
                    int axis, int64_t n, int64_t n_out, bool inverse) {
    line_job j = {0};
    if (n > 0x7fffffff) {
        mk_error_set(MK_ERR_VALUE, "[fftn] FFT size %lld is too large.", (long long)n);
        return -1;
    }
    fft_plan plan;
    if (plan_make(&plan, n, inverse) < 0) return -1;
    j.plan = &plan;
    j.src = src;
    j.dst = dst;
    j.src_real = src_real;
    j.dst_real = dst_real;
    j.n = n;
    j.n_in = shape[axis];
    j.n_out = n_out;
    j.inner = 1;
    for (int d = axis + 1; d < ndim; d++) j.inner *= shape[d];
    int64_t outer = 1;
    for (int d = 0; d < axis; d++) outer *= shape[d];
    j.src_axis_len = shape[axis];
    j.dst_axis_len = n_out;
    j.scale = inverse ? (float)(1.0 / (double)n) : 1.0f;
    int64_t lines = outer * j.inner;
    int64_t grain = n >= 4096 ? 1 : 4096 / n;
    if (lines > 0 && n > 0) mk_parallel_for(lines, grain, run_lines, &j);
    plan_free(&plan);
    if (atomic_load(&j.nomem)) {
        mk_nomem();
        return -1;
    }
    return 0;
}

/* Metal's FFT plan (MLX's backend/metal/fft.cpp): each threadgroup FFT is at
 * most 4096 points, a power of two above that runs in four steps of two such
 * FFTs, and any other length above 4096 through Bluestein's algorithm on a
 * power of two of at least 2n - 1 points, itself in four steps; so a length
 * whose power of two exceeds 4096^2 has no plan, and MLX's GPU stream raises
 * at evaluation (the CPU stream computes it). mkpy's GPU stream keeps that
 * refusal, whichever back-end runs it: code written on a Mac fails here as
 * there. */
#define METAL_FFT_MAX_STEP 4096

static int metal_fft_plan_check(const fft_params *fp, const mk_array *in, const mk_array *out) {
    for (int i = 0; i < fp->naxes; i++) {
        int ax = fp->axes[i];
        /* the transform's length: irfft's last axis is the output's */
        int64_t n = fp->real && fp->inverse && i == fp->naxes - 1 ? out->shape[ax] : in->shape[ax], m = n;
        bool pow2 = (n & (n - 1)) == 0;
        if (n <= METAL_FFT_MAX_STEP) continue;
        if (!pow2)
            for (m = 1; m < 2 * n - 1;) m *= 2;
        if (m > (int64_t)METAL_FFT_MAX_STEP * METAL_FFT_MAX_STEP) {
            mk_error_set(MK_ERR_RUNTIME,
                         "[FFT] GPU FFT is not supported for size %lld, the largest supported size is %lld. "
                         "Run the FFT on the CPU stream instead.",
                         (long long)m, (long long)METAL_FFT_MAX_STEP * METAL_FFT_MAX_STEP);
            return -1;
        }
    }
    return 0;
}

static int fft_eval(mk_prim *p, mk_array *const *inputs, mk_array *const *outputs) {
    const fft_params *fp = p->params;
    mk_array *in = inputs[0], *out = outputs[0];
    int nd = in->ndim;
    if (p->stream != MK_STREAM_NONE && mk_stream_device(p->stream) == MK_GPU && metal_fft_plan_check(fp, in, out) < 0)
        return -1;
    if (mk_alloc_out(out) < 0) return -1;
    if (out->size == 0) return 0;
    /* a row-contiguous copy of the input when needed */
    mk_array *src = in;
    mk_buffer *tmpbuf[2] = {NULL, NULL};
    const char *cur;
    mk_buffer *own = NULL;
    if (!(in->flags & MK_ROW_CONTIG)) {
        int64_t st[MK_MAX_NDIM];
        mk_row_strides(nd, in->shape, st);
        own = mk_buffer_alloc((size_t)in->size * mk_dtype_size(in->dtype));
        if (!own) return -1;
        mk_copy_into(in, own->data, st);
        cur = own->data;
    } else {
        cur = mk_data(src);
    }
    int64_t shape[MK_MAX_NDIM];
    memcpy(shape, in->shape, sizeof(int64_t) * (size_t)nd);
    bool cur_real = fp->real && !fp->inverse;
    int rc = 0;
    /* order of the passes: rfft does its last axis first, irfft last */
    int order[MK_MAX_NDIM], k = 0;
    if (fp->real && !fp->inverse) {
        order[k++] = fp->naxes - 1;
        for (int i = 0; i < fp->naxes - 1; i++) order[k++] = i;
    } else {
        for (int i = 0; i < fp->naxes; i++) order[k++] = i;
    }
    for (int step = 0; step < fp->naxes && rc == 0; step++) {
        int i = order[step];
        int ax = fp->axes[i];
        bool last_real = fp->real && i == fp->naxes - 1;
        int64_t n, n_out;
        bool dst_real = false;
        if (last_real && !fp->inverse) {
            n = shape[ax];
            n_out = n / 2 + 1;
        } else if (last_real) {
            n = out->shape[ax];
            n_out = n;
            dst_real = true;
        } else {
            n = shape[ax];
            n_out = n;
        }
        void *dst;
        if (step == fp->naxes - 1) {
            dst = mk_data(out);
        } else {
            int64_t sz = 1;
            for (int d = 0; d < nd; d++) sz *= d == ax ? n_out : shape[d];
            mk_buffer *b = mk_buffer_alloc((size_t)sz * sizeof(kiss_fft_cpx));
            if (!b) {
                rc = -1;
                break;
            }
            int slot = step & 1;
            if (tmpbuf[slot]) mk_buffer_decref(tmpbuf[slot]);
            tmpbuf[slot] = b;
            dst = b->data;
        }
        rc = fft_pass(cur, cur_real, dst, dst_real, nd, shape, ax, n, n_out, fp->inverse);
        shape[ax] = n_out;
        cur = dst;
        cur_real = dst_real;
    }
    for (int i = 0; i < 2; i++)
        if (tmpbuf[i]) mk_buffer_decref(tmpbuf[i]);
    if (own) mk_buffer_decref(own);
    return rc;
}

/* ------------------------------------------------------ transformation rules */

static double axes_count(mk_array *x, const fft_params *fp) {
    double n = 1;
    for (int i = 0; i < fp->naxes; i++) n *= (double)x->shape[fp->axes[i]];
    return n;
}

/* 0 < k < last along the last transformed axis: v_mid, else v_end; a
 * (1, .., N, .., 1) array of dtype t */
static mk_array *edge_mask(mk_arena *A, int ndim, int ax, int64_t N, int64_t last, double v_mid, double v_end,
                           mk_dtype t) {
    mk_array *idx = mk_ar_keep(A, mk_arange(0, (double)N, 1, MK_INT32));
    int64_t shape[MK_MAX_NDIM];
    for (int d = 0; d < ndim; d++) shape[d] = d == ax ? N : 1;
    idx = mk_ar_reshape(A, idx, ndim, shape);
    mk_array *lo = mk_ar_bin(A, MK_BINARY_greater, idx, mk_ar_keep(A, mk_scalar_i64(MK_INT32, 0)));
    mk_array *hi = mk_ar_bin(A, MK_BINARY_less, idx, mk_ar_keep(A, mk_scalar_i64(MK_INT32, last)));
    mk_array *c = mk_ar_bin(A, MK_BINARY_logical_and, lo, hi);
    return mk_ar_where(A, c, mk_ar_keep(A, mk_scalar_f64(t, v_mid)), mk_ar_keep(A, mk_scalar_f64(t, v_end)));
}

static int fft_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const fft_params *fp = p->params;
    mk_array *in = p->inputs[0], *c = cots[0];
    if (!c || !want[0]) return 0;
    mk_arena A = {0};
    mk_array *g = NULL;
    int last = fp->axes[fp->naxes - 1];
    if (fp->real && fp->inverse) {
        double ne = axes_count(c, fp);
        int64_t N = in->shape[last];
        bool odd = c->shape[last] % 2;
        mk_array *m = edge_mask(&A, in->ndim, last, N, N - 1 + odd, 2 / ne, 1 / ne, MK_COMPLEX64);
        mk_array *f = mk_ar_keep(&A, fft_node(c, fp->naxes, fp->axes, false, true, in->ndim, in->shape));
        g = mk_ar_mul(&A, f, m);
    } else if (fp->real) {
        double ne = axes_count(in, fp);
        int64_t N = c->shape[last];
        bool odd = in->shape[last] % 2;
        mk_array *m = edge_mask(&A, in->ndim, last, N, N - 1 + odd, 0.5, 1, MK_COMPLEX64);
        mk_array *cm = mk_ar_mul(&A, c, m);
        mk_array *f = cm ? mk_ar_keep(&A, fft_node(cm, fp->naxes, fp->axes, true, true, in->ndim, in->shape)) : NULL;
        g = f ? mk_ar_scale(&A, f, ne) : NULL;
    } else {
        double ne = axes_count(in, fp);
        mk_array *f = mk_ar_keep(&A, fft_node(mk_ar_cast(&A, c, MK_COMPLEX64), fp->naxes, fp->axes, !fp->inverse,
                                              false, in->ndim, in->shape));
        g = f ? mk_ar_scale(&A, f, fp->inverse ? 1 / ne : ne) : NULL;
    }
    grads[0] = mk_ar_out(g);
    mk_ar_free(&A);
    return grads[0] ? 0 : -1;
}

static int fft_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    const fft_params *fp = p->params;
    if (!tans[0]) return 0;
    mk_arena A = {0};
    mk_array *t = mk_ar_cast(&A, tans[0], p->inputs[0]->dtype);
    out[0] = t ? fft_node(t, fp->naxes, fp->axes, fp->inverse, fp->real, p->outdesc[0].ndim, p->outdesc[0].shape)
               : NULL;
    mk_ar_free(&A);
    return out[0] ? 0 : -1;
}

static int fft_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    const fft_params *fp = p->params;
    int ax = axes[0];
    int fax[MK_MAX_NDIM];
    int64_t shape[MK_MAX_NDIM];
    for (int i = 0; i < fp->naxes; i++) fax[i] = fp->axes[i] + (ax >= 0 && fp->axes[i] >= ax);
    memcpy(shape, in[0]->shape, sizeof(int64_t) * (size_t)in[0]->ndim);
    if (fp->real) {
        int l = fax[fp->naxes - 1];
        int64_t m = shape[l];
        shape[l] = fp->inverse ? p->outdesc[0].shape[fp->axes[fp->naxes - 1]] : m / 2 + 1;
    }
    outs[0] = fft_node(in[0], fp->naxes, fax, fp->inverse, fp->real, in[0]->ndim, shape);
    out_axes[0] = ax;
    return outs[0] ? 0 : -1;
}

static const mk_opdef fft_def = {"FFT", fft_eval, NULL, fft_vjp, fft_jvp, fft_vmap, false};

static mk_array *fft_node(mk_array *in, int naxes, const int *axes, bool inverse, bool real, int ndim,
                          const int64_t *out_shape) {
    if (!in) return NULL;
    fft_params *fp = calloc(1, sizeof *fp);
    if (!fp) return mk_nomem();
    fp->naxes = naxes;
    memcpy(fp->axes, axes, sizeof(int) * (size_t)naxes);
    fp->inverse = inverse;
    fp->real = real;
    mk_dtype in_t = real && !inverse ? MK_FLOAT32 : MK_COMPLEX64;
    mk_dtype out_t = real && inverse ? MK_FLOAT32 : MK_COMPLEX64;
    mk_array *x = mk_as_dtype(in, in_t);
    if (!x) {
        free(fp);
        return NULL;
    }
    mk_array *r = mk_node(&fft_def, fp, out_t, ndim, out_shape, 1, &x);
    mk_decref(x);
    return r;
}

#else
/* Built without KissFFT (setup.py found no kiss_fft.h): every transform
 * raises, the rest of mkpy (fftshift and fftfreq included) works. */
static mk_array *fft_node(mk_array *in, int naxes, const int *axes, bool inverse, bool real, int ndim,
                          const int64_t *out_shape) {
    (void)in, (void)naxes, (void)axes, (void)inverse, (void)real, (void)ndim, (void)out_shape;
    mk_error_set(MK_ERR_RUNTIME, "[fft] mkpy was built without KissFFT: install it "
                                 "(apt-get install libkissfft-dev) and rebuild mkpy.");
    return NULL;
}
#endif

/* ---------------------------------------------------------- constructors */

static const char *ivec_str(int n, const int64_t *v, char *buf, size_t sz) { return mk_shape_str(n, v, buf, sz); }

mk_array *mk_fftn(mk_array *a, int naxes, const int *axes_in, const int64_t *n_in, bool real, bool inverse,
                  mk_fft_norm norm) {
    char b1[512];
    if (a->ndim < 1) {
        mk_error_set(MK_ERR_VALUE, "[fftn] Requires array with at least one dimension.");
        return NULL;
    }
    if (naxes < 0) naxes = a->ndim; /* all axes */
    int axes[MK_MAX_NDIM];
    int64_t axv[MK_MAX_NDIM];
    if (naxes > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[fftn] Duplicated axis received.");
        return NULL;
    }
    for (int i = 0; i < naxes; i++) {
        axes[i] = axes_in ? axes_in[i] : i;
        axv[i] = axes[i];
    }
    if (naxes == 0) {
        mk_incref(a);
        return a;
    }
    int valid[MK_MAX_NDIM];
    for (int i = 0; i < naxes; i++) valid[i] = axes[i] < 0 ? axes[i] + a->ndim : axes[i];
    for (int i = 0; i < naxes; i++)
        for (int j = 0; j < i; j++)
            if (valid[i] == valid[j]) {
                mk_error_set(MK_ERR_VALUE, "[fftn] Duplicated axis received %s", ivec_str(naxes, axv, b1, sizeof b1));
                return NULL;
            }
    for (int i = 0; i < naxes; i++)
        if (valid[i] < 0 || valid[i] >= a->ndim) {
            mk_error_set(MK_ERR_VALUE, "[fftn] Invalid axis received for array with %d dimensions.", a->ndim);
            return NULL;
        }
    int64_t n[MK_MAX_NDIM];
    for (int i = 0; i < naxes; i++) n[i] = n_in ? n_in[i] : a->shape[valid[i]];
    if (!n_in && real && inverse) n[naxes - 1] = (n[naxes - 1] - 1) * 2;
    for (int i = 0; i < naxes; i++)
        if (n[i] <= 0) {
            mk_error_set(MK_ERR_VALUE, "[fftn] Invalid FFT output size requested %s", ivec_str(naxes, n, b1, sizeof b1));
            return NULL;
        }
    int nd = a->ndim;
    int64_t in_shape[MK_MAX_NDIM];
    memcpy(in_shape, a->shape, sizeof(int64_t) * (size_t)nd);
    for (int i = 0; i < naxes; i++) in_shape[valid[i]] = n[i];
    if (real && inverse) in_shape[valid[naxes - 1]] = n[naxes - 1] / 2 + 1;
    bool less = false, greater = false;
    for (int d = 0; d < nd; d++) {
        less |= in_shape[d] < a->shape[d];
        greater |= in_shape[d] > a->shape[d];
    }
    mk_array *x = a, *t = NULL, *r = NULL;
    mk_incref(x);
    if (less) {
        int64_t start[MK_MAX_NDIM] = {0}, stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
        for (int d = 0; d < nd; d++) {
            stop[d] = in_shape[d] < a->shape[d] ? in_shape[d] : a->shape[d];
            step[d] = 1;
        }
        t = mk_slice(x, start, stop, step);
        mk_decref(x);
        if (!(x = t)) return NULL;
    }
    if (greater) {
        int64_t pw[MK_MAX_NDIM][2];
        for (int d = 0; d < nd; d++) {
            pw[d][0] = 0;
            pw[d][1] = in_shape[d] - x->shape[d];
        }
        mk_array *zero = mk_scalar_i64(x->dtype, 0);
        t = zero ? mk_pad(x, (const int64_t(*)[2])pw, zero) : NULL;
        mk_xdecref(zero);
        mk_decref(x);
        if (!(x = t)) return NULL;
    }
    int64_t out_shape[MK_MAX_NDIM];
    memcpy(out_shape, in_shape, sizeof out_shape);
    if (real) {
        int ax = valid[naxes - 1];
        out_shape[ax] = inverse ? n[naxes - 1] : in_shape[ax] / 2 + 1;
    }
    r = fft_node(x, naxes, valid, inverse, real, nd, out_shape);
    mk_decref(x);
    if (!r) return NULL;
    double ne = 1;
    for (int i = 0; i < naxes; i++) ne *= (double)n[i];
    double scale = 1;
    if (norm == MK_FFT_ORTHO) scale = inverse ? sqrt(ne) : 1 / sqrt(ne);
    if (norm == MK_FFT_FORWARD) scale = inverse ? ne : 1 / ne;
    if (scale != 1) {
        mk_array *s = mk_scalar_f64(r->dtype, scale);
        mk_array *y = s ? mk_binary(MK_BINARY_multiply, r, s) : NULL;
        mk_xdecref(s);
        mk_decref(r);
        r = y;
    }
    return r;
}

/* roll along the given axes by half their length (numpy's fftshift), as
 * slices and a concatenation per axis */
mk_array *mk_fftshift(mk_array *a, int naxes, const int *axes_in, bool inverse) {
    const char *name = inverse ? "ifftshift" : "fftshift";
    if (naxes < 0) {
        if (a->ndim < 1) {
            mk_incref(a);
            return a;
        }
        naxes = a->ndim;
        axes_in = NULL;
    }
    mk_array *x = a;
    mk_incref(x);
    int axes[MK_MAX_NDIM * 4];
    if (naxes > (int)(sizeof axes / sizeof *axes)) naxes = (int)(sizeof axes / sizeof *axes);
    for (int i = 0; i < naxes; i++) {
        int ax = axes_in ? axes_in[i] : i;
        int v = ax < 0 ? ax + a->ndim : ax;
        if (v < 0 || v >= a->ndim) {
            mk_error_set(MK_ERR_VALUE, "[%s] Invalid axis %d for array with %d dimensions.", name, ax, a->ndim);
            mk_decref(x);
            return NULL;
        }
        axes[i] = v;
    }
    for (int i = 0; i < naxes; i++) {
        int ax = axes[i];
        int64_t len = x->shape[ax];
        if (len <= 1) continue;
        int64_t shift = len / 2;
        if (inverse) shift = len - shift; /* a roll by -len/2 */
        /* roll by `shift`: the last `shift` elements come first */
        int64_t cut = len - shift;
        int64_t start[MK_MAX_NDIM] = {0}, stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
        for (int d = 0; d < x->ndim; d++) {
            stop[d] = x->shape[d];
            step[d] = 1;
        }
        start[ax] = cut;
        mk_array *hi = mk_slice(x, start, stop, step);
        start[ax] = 0;
        stop[ax] = cut;
        mk_array *lo = mk_slice(x, start, stop, step);
        mk_array *parts[2] = {hi, lo};
        mk_array *y = hi && lo ? mk_concatenate(2, parts, ax, true) : NULL;
        mk_xdecref(hi);
        mk_xdecref(lo);
        mk_decref(x);
        if (!(x = y)) return NULL;
    }
    return x;
}

mk_array *mk_fftfreq(int64_t n, double d, bool real) {
    const char *name = real ? "rfftfreq" : "fftfreq";
    if (n <= 0) {
        mk_error_set(MK_ERR_VALUE, "[%s] `n` must be greater than 0.", name);
        return NULL;
    }
    if (d == 0.0) {
        mk_error_set(MK_ERR_VALUE, "[%s] `d` must be non-zero.", name);
        return NULL;
    }
    mk_array *f;
    if (real) {
        f = mk_arange(0, (double)(n / 2 + 1), 1, MK_FLOAT32);
    } else {
        mk_array *pos = mk_arange(0, (double)((n + 1) / 2), 1, MK_FLOAT32);
        mk_array *neg = mk_arange((double)(-(n / 2)), 0, 1, MK_FLOAT32);
        mk_array *parts[2] = {pos, neg};
        f = pos && neg ? mk_concatenate(2, parts, 0, true) : NULL;
        mk_xdecref(pos);
        mk_xdecref(neg);
    }
    if (!f) return NULL;
    mk_array *s = mk_scalar_f64(MK_FLOAT32, (float)(1.0 / ((double)n * d)));
    mk_array *r = s ? mk_binary(MK_BINARY_multiply, f, s) : NULL;
    mk_xdecref(s);
    mk_decref(f);
    return r;
}
