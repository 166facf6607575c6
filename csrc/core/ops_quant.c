/* Quantisation: MLX's quantize / dequantize in its four modes, fp8 (e4m3)
 * conversion, quantized_matmul, gather_qmm, gather_mm and segmented_mm.
 *
 * Formats (facts of MLX's format, reproduced bit for bit):
 * - affine, bits b in {2,3,4,5,6,8}: each row of w is cut into groups of
 *   group_size elements; every element becomes q in [0, 2^b - 1] with
 *   w ~ scale * q + bias. The packed values form one little-endian bit
 *   stream per row: element j occupies bits [j*b, j*b + b) (so for b = 4,
 *   element 0 is the low nibble of the first uint32 word). Scales and
 *   biases are computed in float from the group's min and max, with the
 *   edge of larger magnitude represented exactly (MLX's CPU kernel), and
 *   stored in w's dtype.
 * - mxfp4 / mxfp8 (groups of 32): e8m0 scale bytes (2^(s - 127)), values in
 *   fp4 e2m1 (two per byte, low nibble first) or fp8 e4m3 (one per byte).
 * - nvfp4 (groups of 16): e4m3 scale bytes, fp4 e2m1 values.
 * MLX computes the fp modes on the CPU as a composition of ops in w's dtype;
 * the evaluators here round every step to that dtype the same way.
 *
 * quantized_matmul dequantizes blocks of rows of w into float32 on the
 * thread pool and multiplies them with OpenBLAS's sgemm (docs/design.md,
 * "Quantisation"). gather_qmm is a composition (take of the selected
 * matrices, then a batched product), so its gradients come from the rules of
 * take and quantized_matmul; gather_mm has its own primitive
 * (ops_gathermm.c). */
#include "ops_quant.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "pool.h"
#include "transforms.h"
#include "types.h"

/* ------------------------------------------------------------ helpers */

static inline int64_t max1(int64_t n) { return n > 0 ? n : 1; }

static inline float ldf(mk_dtype t, const void *p, int64_t i) {
    switch (t) {
    case MK_FLOAT16: return mk_f16_to_f32(((const mk_f16 *)p)[i]);
    case MK_BFLOAT16: return mk_bf16_to_f32(((const mk_bf16 *)p)[i]);
    case MK_FLOAT64: return (float)((const double *)p)[i];
    default: return ((const float *)p)[i];
    }
}

/* v rounded to dtype t (as a float) */
static inline float rnd(mk_dtype t, float v) {
    switch (t) {
    case MK_FLOAT16: return mk_f16_to_f32(mk_f32_to_f16(v));
    case MK_BFLOAT16: return mk_bf16_to_f32(mk_f32_to_bf16(v));
    default: return v;
    }
}

static inline void stf(mk_dtype t, void *p, int64_t i, float v) {
    switch (t) {
    case MK_FLOAT16: ((mk_f16 *)p)[i] = mk_f32_to_f16(v); break;
    case MK_BFLOAT16: ((mk_bf16 *)p)[i] = mk_f32_to_bf16(v); break;
    case MK_FLOAT64: ((double *)p)[i] = v; break;
    default: ((float *)p)[i] = v; break;
    }
}

/* The value of bits [j*bits, j*bits + bits) of a little-endian bit stream. */
static inline uint32_t unpack(const uint8_t *s, int64_t j, int bits) {
    int64_t bit = j * bits;
    const uint8_t *p = s + (bit >> 3);
    int sh = (int)(bit & 7);
    uint32_t v = p[0];
    if (sh + bits > 8) v |= (uint32_t)p[1] << 8;
    return (v >> sh) & ((1u << bits) - 1);
}

static const float FP4_LUT[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

/* float -> fp8 e4m3 byte, MLX's rounding (to nearest even, saturating to 448,
 * nan and inf to the largest finite value with their sign). */
uint8_t mk_fp8_from_float(float f) {
    uint32_t x = mk_f32_bits(f);
    uint32_t sign = x & 0x80000000u;
    x ^= sign;
    uint8_t r;
    if (x >= (543u << 21)) {
        r = 0x7E;
    } else if (x < (121u << 23)) {
        uint32_t lo = mk_f32_bits(mk_bits_f32(x) + mk_bits_f32(141u << 23));
        r = (uint8_t)(lo - (141u << 23));
    } else {
        uint32_t odd = (x >> 20) & 1;
        uint32_t hi = x + (uint32_t)((int32_t)(7 - 127) * (1 << 23)) + 0x7FFFFu + odd;
        r = (uint8_t)(hi >> 20);
    }
    return (uint8_t)(r | (sign >> 24));
}

/* fp8 e4m3 byte -> float: the 7 low bits read as a half's top bits, times 256. */
float mk_fp8_to_float(uint8_t b) {
    if ((b & 127) == 127) return (b & 128) ? -NAN : NAN;
    mk_f16 h = {(uint16_t)((b & 127) << 7)};
    float v = mk_f16_to_f32(h) * 256.0f;
    return (b & 128) ? -v : v;
}

int mk_qmode_parse(const char *mode, const char *tag) {
    static const char *const names[] = {"affine", "mxfp4", "mxfp8", "nvfp4"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(mode, names[i])) return i;
    mk_error_set(MK_ERR_VALUE, "[%s] Invalid quantization mode '%s'.", tag, mode);
    return -1;
}

const char *mk_qmode_name(int mode) {
    static const char *const names[] = {"affine", "mxfp4", "mxfp8", "nvfp4"};
    return names[mode];
}

static void mode_defaults(int mode, int *gs, int *bits) {
    static const int dgs[] = {64, 32, 32, 16}, dbits[] = {4, 4, 8, 4};
    if (*gs < 0) *gs = dgs[mode];
    if (*bits < 0) *bits = dbits[mode];
}

static bool is_floating(mk_dtype t) { return mk_issubdtype_cat(t, MK_CAT_FLOATING); }

static const char *shp(const mk_array *a, char *buf, size_t n) { return mk_shape_str(a->ndim, a->shape, buf, n); }

typedef struct {
    int gs, bits, mode;
    bool transpose;
    int out_dtype; /* dequantize */
    bool has_gscale;
} qparams;

static qparams *qp_new(int gs, int bits, int mode) {
    qparams *q = calloc(1, sizeof *q);
    if (!q) return mk_nomem();
    q->gs = gs;
    q->bits = bits;
    q->mode = mode;
    return q;
}

/* A global scale (nvfp4) as a float; g must be evaluated. */
static float gscale_value(const mk_array *g) { return ldf(g->dtype, mk_data(g), 0); }


/* x with row-contiguous storage (a view when it has it already): MLX's
 * ensure_row_contiguous, as a node whose gradient passes straight through. */
static int rowc_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    const mk_array *x = in[0];
    if (x->flags & MK_ROW_CONTIG) {
        mk_set_view(out[0], x, x->offset, x->strides);
        return 0;
    }
    if (mk_alloc_out(out[0]) < 0) return -1;
    mk_copy_into(x, mk_data(out[0]), out[0]->strides);
    return 0;
}

static int rowc_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    (void)p;
    if (want[0] && cots[0]) {
        mk_incref(cots[0]);
        grads[0] = cots[0];
    }
    return 0;
}

static int rowc_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    (void)p;
    if (tans[0]) mk_incref(tans[0]);
    out[0] = tans[0];
    return 0;
}

static int rowc_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    (void)p;
    mk_incref(in[0]);
    outs[0] = in[0];
    out_axes[0] = axes[0];
    return 0;
}

static const mk_opdef rowc_def = {"Contiguous", rowc_eval, NULL, rowc_vjp, rowc_jvp, rowc_vmap, false};

static mk_array *rowc(mk_array *x) { return mk_node(&rowc_def, NULL, x->dtype, x->ndim, x->shape, 1, &x); }

/* ------------------------------------------------------------ quantize */

typedef struct {
    const void *w;
    mk_dtype t;
    uint8_t *q;
    void *scales, *biases;
    int gs, bits, mode;
    float enc; /* nvfp4: 448 * 6 / global_scale, or 1 */
} quant_ctx;

static void affine_groups(void *c, int64_t g0, int64_t g1) {
    const quant_ctx *u = c;
    const float n_bins = (float)((1 << u->bits) - 1), eps = 1e-7f;
    const int gs = u->gs, bits = u->bits;
    for (int64_t g = g0; g < g1; g++) {
        int64_t base = g * gs;
        float mx = -INFINITY, mn = INFINITY;
        for (int j = 0; j < gs; j++) {
            float v = ldf(u->t, u->w, base + j);
            mx = v > mx ? v : mx; /* std::max / std::min argument order */
            mn = v < mn ? v : mn;
        }
        bool mask = fabsf(mn) > fabsf(mx);
        float scale = (mx - mn) / n_bins;
        scale = scale < eps ? eps : scale;
        scale = mask ? scale : -scale;
        float edge = mask ? mn : mx;
        float q0 = rintf(edge / scale), bias = 0;
        if (q0 != 0) {
            scale = edge / q0;
            bias = edge;
        }
        uint8_t *out = u->q + g * gs * bits / 8;
        for (int j = 0; j < gs; j += 8) {
            uint64_t word = 0;
            for (int k = 0; k < 8; k++) {
                float v = rintf((ldf(u->t, u->w, base + j + k) - bias) / scale);
                v = v < 0.0f ? 0.0f : v;
                v = n_bins < v ? n_bins : v;
                word |= (uint64_t)v << (k * bits);
            }
            for (int k = 0; k < bits; k++) out[k] = (uint8_t)(word >> (8 * k));
            out += bits;
        }
        stf(u->t, u->scales, g, scale);
        stf(u->t, u->biases, g, bias);
    }
}

/* The index of the fp4 value nearest to v (differences rounded to dtype t;
 * ties to the first in MLX's table order, as argmin). */
static inline int fp4_code(mk_dtype t, float v) {
    int best = 0;
    float bd = INFINITY;
    for (int i = 0; i < 16; i++) {
        float d = fabsf(rnd(t, v - FP4_LUT[i]));
        if (d < bd) {
            bd = d;
            best = i;
        }
    }
    return best;
}

static void fp_groups(void *c, int64_t g0, int64_t g1) {
    const quant_ctx *u = c;
    const mk_dtype t = u->t;
    const int gs = u->gs;
    uint8_t *sc = u->scales;
    for (int64_t g = g0; g < g1; g++) {
        int64_t base = g * gs;
        float amax = 0;
        for (int j = 0; j < gs; j++) {
            float v = fabsf(ldf(t, u->w, base + j));
            amax = v > amax ? v : amax;
        }
        float vals[32];
        mk_dtype vt = t; /* the dtype the fp4 differences are rounded to */
        if (u->mode == MK_QMODE_NVFP4) {
            float s = rnd(t, amax / 6.0f) * u->enc;
            uint8_t sb = mk_fp8_from_float(s);
            sc[g] = sb;
            float d = rnd(t, mk_fp8_to_float(sb));
            for (int j = 0; j < gs; j++) vals[j] = rnd(t, ldf(t, u->w, base + j) / d) * u->enc;
            vt = MK_FLOAT32;
        } else {
            float s = rnd(t, amax / (u->bits == 4 ? 6.0f : 448.0f));
            int32_t e = 0;
            if (s != 0) e = (int32_t)ceilf(log2f(s));
            sc[g] = (uint8_t)(e + 127);
            float p = rnd(t, powf(2.0f, (float)e));
            for (int j = 0; j < gs; j++) vals[j] = rnd(t, ldf(t, u->w, base + j) / p);
        }
        if (u->bits == 8) {
            uint8_t *out = u->q + base;
            for (int j = 0; j < gs; j++) out[j] = mk_fp8_from_float(vals[j]);
        } else {
            uint8_t *out = u->q + base / 2;
            for (int j = 0; j < gs; j += 2)
                out[j / 2] = (uint8_t)(fp4_code(vt, vals[j]) | (fp4_code(vt, vals[j + 1]) << 4));
        }
    }
}

static int quantize_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const qparams *qp = p->params;
    for (int i = 0; i < p->noutputs; i++)
        if (mk_alloc_out(out[i]) < 0) return -1;
    const mk_array *w = in[0];
    quant_ctx u = {mk_data(w), w->dtype, mk_data(out[0]), mk_data(out[1]),
                   qp->mode == MK_QMODE_AFFINE ? mk_data(out[2]) : NULL, qp->gs, qp->bits, qp->mode, 1.0f};
    if (qp->has_gscale) u.enc = 448.0f * 6.0f / gscale_value(in[1]);
    int64_t ngroups = w->size / qp->gs;
    mk_parallel_for(ngroups, 256, qp->mode == MK_QMODE_AFFINE ? affine_groups : fp_groups, &u);
    return 0;
}

static const mk_opdef quantize_def = {"Quantize", quantize_eval, NULL, NULL, NULL, NULL, true};

static int check_gscale(const char *tag, int mode, mk_array *g) {
    if (!g) return 0;
    char b[256];
    if (mode != MK_QMODE_NVFP4) {
        mk_error_set(MK_ERR_VALUE, "[%s] Global scale is only supported for 'nvfp4' quantization mode.", tag);
        return -1;
    }
    if (g->size != 1) {
        mk_error_set(MK_ERR_VALUE, "[%s] Global scale must be a scalar but got shape %s.", tag, shp(g, b, sizeof b));
        return -1;
    }
    if (g->dtype != MK_FLOAT32) {
        mk_error_set(MK_ERR_VALUE, "[%s] Global scale must have dtype float32 but got %s.", tag,
                     mk_dtype_name(g->dtype));
        return -1;
    }
    return 0;
}

static int fp_check(const char *tag, int mode, int gs, int bits) {
    int egs = mode == MK_QMODE_NVFP4 ? 16 : 32, ebits = mode == MK_QMODE_MXFP8 ? 8 : 4;
    if (gs != egs) {
        mk_error_set(MK_ERR_VALUE, "[%s] %s quantization requires group size %d but got %d.", tag, mk_qmode_name(mode),
                     egs, gs);
        return -1;
    }
    if (bits != ebits) {
        mk_error_set(MK_ERR_VALUE, "[%s] %s quantization requires bits to be %d but got %d.", tag, mk_qmode_name(mode),
                     ebits, bits);
        return -1;
    }
    return 0;
}

int mk_quantize(mk_array *w, int gs, int bits, int mode, mk_array *gscale, mk_array **outs) {
    char b[256];
    mode_defaults(mode, &gs, &bits);
    if (!is_floating(w->dtype)) {
        mk_error_set(MK_ERR_VALUE, "[quantize] Only real floating types can be quantized but w has type %s.",
                     mk_dtype_name(w->dtype));
        return -1;
    }
    if (w->ndim < 2) {
        mk_error_set(MK_ERR_VALUE,
                     "[quantize] The matrix to be quantized must have at least 2 dimension but it has only %d.",
                     w->ndim);
        return -1;
    }
    if (gs == 0 || w->shape[w->ndim - 1] % gs != 0) {
        mk_error_set(MK_ERR_VALUE,
                     "[quantize] The last dimension of the matrix needs to be divisible by the quantization group "
                     "size %d. However the provided  matrix has shape %s",
                     gs, shp(w, b, sizeof b));
        return -1;
    }
    if (check_gscale("quantize", mode, gscale) < 0) return -1;
    if (mode == MK_QMODE_AFFINE) {
        if (gs != 32 && gs != 64 && gs != 128) {
            mk_error_set(MK_ERR_VALUE,
                         "[quantize] The requested group size %d is not supported. The supported group sizes are "
                         "32, 64, and 128.",
                         gs);
            return -1;
        }
        if (bits < 2 || bits > 8 || bits == 7) {
            mk_error_set(MK_ERR_VALUE,
                         "[quantize] The requested number of bits %d is not supported. The supported bits are 2, "
                         "3, 4, 5, 6 and 8.",
                         bits);
            return -1;
        }
    } else if (fp_check("quantize", mode, gs, bits) < 0) {
        return -1;
    }
    int nd = w->ndim, nout = mode == MK_QMODE_AFFINE ? 3 : 2;
    mk_outdesc od[3];
    for (int i = 0; i < nout; i++) {
        od[i].ndim = nd;
        memcpy(od[i].shape, w->shape, (size_t)nd * sizeof(int64_t));
    }
    int64_t K = w->shape[nd - 1];
    od[0].dtype = MK_UINT32;
    od[0].shape[nd - 1] = K * bits / 32;
    for (int i = 1; i < nout; i++) {
        od[i].dtype = mode == MK_QMODE_AFFINE ? w->dtype : MK_UINT8;
        od[i].shape[nd - 1] = K / gs;
    }
    qparams *qp = qp_new(gs, bits, mode);
    if (!qp) return -1;
    qp->has_gscale = gscale != NULL;
    mk_array *wc = rowc(w);
    if (!wc) {
        free(qp);
        return -1;
    }
    mk_array *in[2] = {wc, gscale};
    int rc = mk_prim_make(&quantize_def, qp, gscale ? 2 : 1, in, nout, od, outs);
    mk_decref(wc);
    return rc < 0 ? -1 : nout;
}

/* ------------------------------------------------------------ dequantize */

typedef struct {
    const uint8_t *w;
    const void *scales, *biases;
    mk_dtype st, bt, pt; /* scales', biases' and their promoted dtype */
    void *out;
    mk_dtype ot;
    int gs, bits, mode;
    int64_t K, ngroups_row; /* elements per row, groups per row */
    int64_t wrow_bytes;
    float inv_enc; /* nvfp4 with a global scale: global_scale / 2688 */
    bool has_gscale;
} deq_ctx;

/* The value of element k of row r in mode m, rounded as MLX's dequantize. */
static void deq_rows(void *c, int64_t r0, int64_t r1) {
    const deq_ctx *u = c;
    const int gs = u->gs, bits = u->bits;
    const mk_dtype ot = u->ot;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = u->w + r * u->wrow_bytes;
        for (int64_t g = 0; g < u->ngroups_row; g++) {
            int64_t gi = r * u->ngroups_row + g, k0 = g * gs, o = r * u->K + k0;
            if (u->mode == MK_QMODE_AFFINE) {
                float s = ldf(u->st, u->scales, gi), b = ldf(u->bt, u->biases, gi);
                for (int j = 0; j < gs; j++) {
                    float q = (float)unpack(row, k0 + j, bits);
                    float v = rnd(u->pt, rnd(u->st, q * s) + b);
                    stf(ot, u->out, o + j, v);
                }
                continue;
            }
            uint8_t sb = ((const uint8_t *)u->scales)[gi];
            float s;
            if (u->mode == MK_QMODE_NVFP4) {
                s = rnd(ot, mk_fp8_to_float(sb));
                if (u->has_gscale) s = s * u->inv_enc;
            } else {
                s = rnd(ot, powf(2.0f, rnd(ot, (float)sb - 127.0f)));
            }
            for (int j = 0; j < gs; j++) {
                float v = bits == 4 ? FP4_LUT[unpack(row, k0 + j, 4)] : rnd(ot, mk_fp8_to_float(row[k0 + j]));
                v = u->has_gscale ? v * s : rnd(ot, v * s);
                stf(u->has_gscale ? MK_FLOAT32 : ot, u->out, o + j, v);
            }
        }
    }
}

static int dequantize_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const qparams *qp = p->params;
    if (mk_alloc_out(out[0]) < 0) return -1;
    const mk_array *w = in[0], *s = in[1];
    bool aff = qp->mode == MK_QMODE_AFFINE;
    const mk_array *b = aff ? in[2] : NULL;
    int64_t K = out[0]->shape[out[0]->ndim - 1];
    deq_ctx u = {mk_data(w), mk_data(s), b ? mk_data(b) : NULL, s->dtype, b ? b->dtype : s->dtype,
                 b ? mk_promote(s->dtype, b->dtype) : s->dtype, mk_data(out[0]), out[0]->dtype, qp->gs, qp->bits,
                 qp->mode, K, K / qp->gs, (int64_t)w->shape[w->ndim - 1] * 4, 1.0f, qp->has_gscale};
    if (qp->has_gscale) u.inv_enc = gscale_value(in[2]) / 2688.0f;
    int64_t rows = K ? out[0]->size / K : 0;
    mk_parallel_for(rows, 1 + 16384 / (K + 1), deq_rows, &u);
    return 0;
}

static const mk_opdef dequantize_def = {"Dequantize", dequantize_eval, NULL, NULL, NULL, NULL, true};

/* MLX's validate_mode_with_type: the output dtype (or -1 on error). */
static int mode_dtype(const char *tag, int mode, mk_array *scales, mk_array *biases, int out_type) {
    if (out_type >= 0 && !is_floating((mk_dtype)out_type)) {
        mk_error_set(MK_ERR_VALUE, "[%s] Only real floating types are supported but output dtype == %s.", tag,
                     mk_dtype_name((mk_dtype)out_type));
        return -1;
    }
    if (mode == MK_QMODE_AFFINE) {
        if (!biases) {
            mk_error_set(MK_ERR_VALUE, "[%s] Biases must be provided for affine quantization.", tag);
            return -1;
        }
        mk_dtype d = mk_promote(scales->dtype, biases->dtype);
        if (!is_floating(d)) {
            mk_error_set(MK_ERR_VALUE,
                         "[%s] Only real floating types are supported but scales.dtype() == %s and "
                         "biases.dtype() == %s.",
                         tag, mk_dtype_name(scales->dtype), mk_dtype_name(biases->dtype));
            return -1;
        }
        return out_type >= 0 ? out_type : (int)d;
    }
    if (scales->dtype != MK_UINT8) {
        mk_error_set(MK_ERR_VALUE, "[%s] Scale type must be uint8 but received type %s.", tag,
                     mk_dtype_name(scales->dtype));
        return -1;
    }
    if (biases) {
        mk_error_set(MK_ERR_VALUE, "[%s] Biases must be null for quantization mode '%s'.", tag, mk_qmode_name(mode));
        return -1;
    }
    return out_type >= 0 ? out_type : MK_BFLOAT16;
}

static bool same_but_last(const mk_array *a, const mk_array *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim - 1; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

mk_array *mk_dequantize(mk_array *w, mk_array *scales, mk_array *biases, int gs, int bits, int mode,
                        mk_array *gscale, int dtype) {
    char b1[256], b2[256];
    int ot = mode_dtype("dequantize", mode, scales, biases, dtype);
    if (ot < 0) return NULL;
    mode_defaults(mode, &gs, &bits);
    if (bits <= 0) {
        mk_error_set(MK_ERR_VALUE, "[dequantize] Invalid value for bits: %d", bits);
        return NULL;
    }
    if (gs <= 0) {
        mk_error_set(MK_ERR_VALUE, "[dequantize] Invalid value for group_size: %d", gs);
        return NULL;
    }
    if (w->dtype != MK_UINT32) {
        mk_error_set(MK_ERR_VALUE, "[dequantize] The matrix should be given as a uint32");
        return NULL;
    }
    if (w->ndim < 2) {
        mk_error_set(MK_ERR_VALUE,
                     "[dequantize] The matrix to be dequantized must have at least 2 dimension but it has only %d.",
                     w->ndim);
        return NULL;
    }
    if (check_gscale("dequantize", mode, gscale) < 0) return NULL;
    int64_t out_size = w->shape[w->ndim - 1] * 32 / bits;
    if (mode == MK_QMODE_AFFINE) {
        if (!same_but_last(w, scales) || !same_but_last(w, biases) ||
            scales->shape[scales->ndim - 1] != biases->shape[biases->ndim - 1]) {
            mk_error_set(MK_ERR_VALUE, "[dequantize] Shape of scales and biases does not match the matrix");
            return NULL;
        }
        if (out_size != scales->shape[scales->ndim - 1] * gs) {
            mk_error_set(MK_ERR_VALUE,
                         "[dequantize] Shape of scales and biases does not match the matrix given the quantization "
                         "parameters. Provided matrix of shape %s and scales/biases of shape %s with group_size=%d "
                         "and bits=%d.",
                         shp(w, b1, sizeof b1), shp(scales, b2, sizeof b2), gs, bits);
            return NULL;
        }
        /* only these packings exist: other bit widths cannot be unpacked */
        if ((bits < 2 || bits > 8 || bits == 7) || (gs * bits) % 8) {
            mk_error_set(MK_ERR_VALUE, "[dequantize] Invalid value for bits: %d", bits);
            return NULL;
        }
    } else {
        if (fp_check("dequantize", mode, gs, bits) < 0) return NULL;
        if (!same_but_last(w, scales)) {
            mk_error_set(MK_ERR_VALUE, "[dequantize] Shape of scales does not match the matrix");
            return NULL;
        }
        if (out_size != scales->shape[scales->ndim - 1] * gs) {
            mk_error_set(MK_ERR_VALUE,
                         "[dequantize] Shape of scales does not match the matrix given the quantization parameters. "
                         "Provided matrix of shape %s and scales of shape %s.",
                         shp(w, b1, sizeof b1), shp(scales, b2, sizeof b2));
            return NULL;
        }
    }
    qparams *qp = qp_new(gs, bits, mode);
    if (!qp) return NULL;
    qp->has_gscale = gscale != NULL;
    mk_dtype odt = (mk_dtype)ot;
    if (gscale) odt = mk_promote(odt, MK_FLOAT32); /* MLX multiplies by a float32 scale */
    int64_t shape[MK_MAX_NDIM];
    memcpy(shape, w->shape, (size_t)w->ndim * sizeof *shape);
    shape[w->ndim - 1] = out_size;
    mk_array *in[3] = {rowc(w), rowc(scales), NULL};
    if (biases) in[2] = rowc(biases);
    else if (gscale) in[2] = rowc(gscale);
    mk_array *r = NULL;
    if (in[0] && in[1] && (in[2] || (!biases && !gscale)))
        r = mk_node(&dequantize_def, qp, odt == MK_FLOAT64 ? MK_FLOAT32 : odt, w->ndim, shape, in[2] ? 3 : 2, in);
    else
        free(qp);
    for (int i = 0; i < 3; i++) mk_xdecref(in[i]);
    if (r && odt == MK_FLOAT64) {
        mk_array *t = mk_astype(r, MK_FLOAT64);
        mk_decref(r);
        r = t;
    }
    return r;
}

/* ------------------------------------------------------------ fp8 */

static void fp8_rows(void *c, int64_t i0, int64_t i1) {
    mk_array *const *io = c;
    const mk_array *x = io[0], *o = io[1];
    if (o->dtype == MK_UINT8) {
        uint8_t *d = mk_data(o);
        for (int64_t i = i0; i < i1; i++) d[i] = mk_fp8_from_float(ldf(x->dtype, mk_data(x), i));
    } else {
        const uint8_t *s = mk_data(x);
        for (int64_t i = i0; i < i1; i++) stf(o->dtype, mk_data(o), i, mk_fp8_to_float(s[i]));
    }
}

static int fp8_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    if (mk_alloc_out(out[0]) < 0) return -1;
    mk_array *io[2] = {in[0], out[0]};
    mk_parallel_for(out[0]->size, 16384, fp8_rows, io);
    return 0;
}

static const mk_opdef fp8_def = {"ConvertFP8", fp8_eval, NULL, NULL, NULL, NULL, true};

mk_array *mk_to_fp8(mk_array *x) {
    if (!is_floating(x->dtype)) {
        mk_error_set(MK_ERR_VALUE, "[to_fp8] Only real floating types are supported but x.dtype() == %s.",
                     mk_dtype_name(x->dtype));
        return NULL;
    }
    mk_array *c = rowc(x);
    if (!c) return NULL;
    mk_array *r = mk_node(&fp8_def, NULL, MK_UINT8, x->ndim, x->shape, 1, &c);
    mk_decref(c);
    return r;
}

mk_array *mk_from_fp8(mk_array *x, mk_dtype dtype) {
    if (x->dtype != MK_UINT8) {
        mk_error_set(MK_ERR_VALUE, "[from_fp8] Input must have type uint8 but x.dtype() == %s.",
                     mk_dtype_name(x->dtype));
        return NULL;
    }
    if (!is_floating(dtype)) {
        mk_error_set(MK_ERR_VALUE, "[from_fp8] Only real floating types are supported but dtype == %s.",
                     mk_dtype_name(dtype));
        return NULL;
    }
    mk_array *c = rowc(x);
    if (!c) return NULL;
    mk_array *r = mk_node(&fp8_def, NULL, dtype, x->ndim, x->shape, 1, &c);
    mk_decref(c);
    return r;
}

/* ------------------------------------------------------------ quantized_matmul */

/* Dequantizes rows [r0, r1) of one matrix of w (rows of `cols` values) into
 * float32 dst (row-major, cols per row). */
typedef struct {
    const uint8_t *w;
    const void *scales, *biases;
    mk_dtype st, xt;
    int gs, bits, mode;
    int64_t cols, wrow_bytes, r0;
    float *dst;
} tile_ctx;

static void tile_rows(void *c, int64_t a, int64_t b) {
    const tile_ctx *u = c;
    int64_t ng = u->cols / u->gs;
    for (int64_t r = a; r < b; r++) {
        int64_t R = u->r0 + r;
        const uint8_t *row = u->w + R * u->wrow_bytes;
        float *d = u->dst + r * u->cols;
        for (int64_t g = 0; g < ng; g++) {
            int64_t gi = R * ng + g, k0 = g * u->gs;
            if (u->mode == MK_QMODE_AFFINE) {
                float s = ldf(u->st, u->scales, gi), bb = ldf(u->st, u->biases, gi);
                if (u->st != MK_FLOAT32) { /* w rounded to the dtype, as MLX's kernels compute it */
                    for (int j = 0; j < u->gs; j++)
                        d[k0 + j] = rnd(u->st, rnd(u->st, s * (float)unpack(row, k0 + j, u->bits)) + bb);
                } else if (u->bits == 4) {
                    const uint8_t *p = row + k0 / 2;
                    for (int j = 0; j < u->gs; j += 2) {
                        d[k0 + j] = s * (float)(p[j / 2] & 15) + bb;
                        d[k0 + j + 1] = s * (float)(p[j / 2] >> 4) + bb;
                    }
                } else if (u->bits == 8) {
                    const uint8_t *p = row + k0;
                    for (int j = 0; j < u->gs; j++) d[k0 + j] = s * (float)p[j] + bb;
                } else {
                    for (int j = 0; j < u->gs; j++) d[k0 + j] = s * (float)unpack(row, k0 + j, u->bits) + bb;
                }
                continue;
            }
            uint8_t sb = ((const uint8_t *)u->scales)[gi];
            float s = u->mode == MK_QMODE_NVFP4 ? mk_fp8_to_float(sb)
                                                 : mk_bf16_to_f32((mk_bf16){(uint16_t)(sb == 0 ? 0x40 : sb << 7)});
            for (int j = 0; j < u->gs; j++)
                d[k0 + j] = rnd(u->xt, s * (u->bits == 4 ? FP4_LUT[unpack(row, k0 + j, 4)] : mk_fp8_to_float(row[k0 + j])));
        }
    }
}

/* Operands, all row-contiguous in their last two dims (batch dims broadcast
 * with any strides). */
static int64_t batch_offset(const mk_array *a, int nb, const int64_t *bshape, int64_t i) {
    int64_t off = 0;
    int d0 = a->ndim - 2 - nb; /* a's batch dims line up with the last of bshape */
    for (int d = nb - 1; d >= 0; d--) {
        int64_t idx = i % bshape[d];
        i /= bshape[d];
        int ad = d0 + d;
        if (ad >= 0 && a->shape[ad] != 1) off += idx * a->strides[ad];
    }
    return off;
}

#define TILE_FLOATS (1 << 22)

/* Few rows of x against a transposed w (the decode case): each output
 * column n dequantizes row n of w into a buffer that stays in L1 and dots
 * it with the rows of x, so the dequantized matrix is never written out. */
#define FEW_ROWS_MAXK 16384

typedef struct {
    tile_ctx t;
    const float *xf;
    float *of;
    int64_t M, K, N;
} rows_ctx;

static void dot_cols(void *c, int64_t n0, int64_t n1) {
    rows_ctx *u = c;
    float buf[FEW_ROWS_MAXK]; /* K <= FEW_ROWS_MAXK on this path */
    tile_ctx t = u->t;
    t.dst = buf;
    for (int64_t n = n0; n < n1; n++) {
        t.r0 = n;
        tile_rows(&t, 0, 1);
        for (int64_t m = 0; m < u->M; m++) {
            const float *xr = u->xf + m * u->K;
            float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            int64_t k = 0;
            for (; k + 8 <= u->K; k += 8)
                for (int j = 0; j < 8; j++) acc[j] += xr[k + j] * buf[k + j];
            float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            for (; k < u->K; k++) sum += xr[k] * buf[k];
            u->of[m * u->N + n] = sum;
        }
    }
}

#define FEW_ROWS 8

static int qmm_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    const qparams *qp = p->params;
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    const mk_array *x = in[0], *w = in[1], *s = in[2], *b = qp->mode == MK_QMODE_AFFINE ? in[3] : NULL;
    int64_t K = x->shape[x->ndim - 1], N = o->shape[o->ndim - 1];
    int64_t M = x->ndim > 1 ? x->shape[x->ndim - 2] : 1;
    int nb = o->ndim - 2 > 0 ? o->ndim - 2 : 0;
    int64_t nbatch = o->size / (M * N);
    bool wbatched = w->ndim > 2;
    if (!wbatched) { /* fold every batch into the rows */
        M = o->size / N;
        nbatch = 1;
        nb = 0;
    }
    int64_t wrows = qp->transpose ? N : K, wcols = qp->transpose ? K : N;
    int64_t tile_rows_n = TILE_FLOATS / (wcols ? wcols : 1);
    if (tile_rows_n < 1) tile_rows_n = 1;
    if (tile_rows_n > wrows) tile_rows_n = wrows;
    float *xf = malloc((size_t)max1(M * K) * sizeof *xf);
    float *of = malloc((size_t)(M * N) * sizeof *of);
    float *tile = malloc((size_t)max1(tile_rows_n * wcols) * sizeof *tile);
    if (!xf || !of || !tile) {
        free(xf);
        free(of);
        free(tile);
        mk_nomem();
        return -1;
    }
    size_t xsz = mk_dtype_size(x->dtype), osz = mk_dtype_size(o->dtype);
    for (int64_t bi = 0; bi < nbatch; bi++) {
        /* x rows to float (x is row-contiguous) */
        const char *xp = (const char *)mk_data(x) + (wbatched ? batch_offset(x, nb, o->shape, bi) : 0) * (int64_t)xsz;
        mk_cast_table[x->dtype][MK_FLOAT32](xp, 1, xf, 1, M * K);
        tile_ctx t = {(const uint8_t *)mk_data(w) + (wbatched ? batch_offset(w, nb, o->shape, bi) : 0) * 4,
                      (const char *)mk_data(s) + (wbatched ? batch_offset(s, nb, o->shape, bi) : 0) *
                                                     (int64_t)mk_dtype_size(s->dtype),
                      b ? (const char *)mk_data(b) + (wbatched ? batch_offset(b, nb, o->shape, bi) : 0) *
                                                         (int64_t)mk_dtype_size(b->dtype)
                        : NULL,
                      s->dtype, x->dtype, qp->gs, qp->bits, qp->mode, wcols, w->shape[w->ndim - 1] * 4, 0, tile};
        if (K == 0) memset(of, 0, (size_t)(M * N) * sizeof *of);
        if (qp->transpose && M <= FEW_ROWS && K > 0 && K <= FEW_ROWS_MAXK) {
            rows_ctx rc = {t, xf, of, M, K, N};
            mk_parallel_for(N, 1 + 65536 / (K * (M + 4)), dot_cols, &rc);
        } else
        for (int64_t r0 = 0; r0 < wrows; r0 += tile_rows_n) {
            int64_t nr = wrows - r0 < tile_rows_n ? wrows - r0 : tile_rows_n;
            t.r0 = r0;
            mk_parallel_for(nr, 1 + 8192 / (wcols + 1), tile_rows, &t);
            if (qp->transpose) { /* out[:, r0:r0+nr] = x (M x K) . tile^T (K x nr) */
                if (M == 1)
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)nr, (int)K, 1.0f, tile, (int)K, xf, 1, 0.0f,
                                of + r0, 1);
                else
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)nr, (int)K, 1.0f, xf, (int)K,
                                tile, (int)K, 0.0f, of + r0, (int)N);
            } else { /* out += x[:, r0:r0+nr] (M x nr) . tile (nr x N) */
                float beta = r0 ? 1.0f : 0.0f;
                if (M == 1)
                    cblas_sgemv(CblasRowMajor, CblasTrans, (int)nr, (int)N, 1.0f, tile, (int)N, xf + r0, 1, beta, of,
                                1);
                else
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)nr, 1.0f, xf + r0,
                                (int)K, tile, (int)N, beta, of, (int)N);
            }
        }
        mk_cast_table[MK_FLOAT32][o->dtype](of, 1, (char *)mk_data(o) + bi * M * N * (int64_t)osz, 1, M * N);
    }
    free(xf);
    free(of);
    free(tile);
    return 0;
}

static int qmm_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int qmm_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static const mk_opdef qmm_def = {"QuantizedMatmul", qmm_eval, NULL, qmm_vjp, qmm_jvp, NULL, false};

/* MLX's validate_quantized_input + extract_quantized_matmul_dims. */
static int qmm_dims(const char *tag, mk_array *x, mk_array *w, mk_array *scales, mk_array *biases, bool transpose,
                    int gs, int bits, int64_t *outer) {
    char b1[256], b2[256];
    if (w->dtype != MK_UINT32) {
        mk_error_set(MK_ERR_VALUE, "[%s] The weight matrix should be uint32 but received %s", tag,
                     mk_dtype_name(w->dtype));
        return -1;
    }
    if (biases && (scales->ndim != biases->ndim ||
                   memcmp(scales->shape, biases->shape, (size_t)scales->ndim * sizeof(int64_t)))) {
        mk_error_set(MK_ERR_VALUE,
                     "[%s] Scales and biases should have the same shape. Received scales with shape %s and biases "
                     "with %s",
                     tag, shp(scales, b1, sizeof b1), shp(biases, b2, sizeof b2));
        return -1;
    }
    bool batch_ok = w->ndim >= 2 && scales->ndim >= w->ndim - 2;
    for (int i = 0; batch_ok && i < w->ndim - 2; i++) batch_ok = w->shape[i] == scales->shape[i];
    if (!batch_ok || scales->ndim != w->ndim) {
        mk_error_set(MK_ERR_VALUE,
                     "[%s] Weight and scales should have the same batch shape. Received weight with shape %s, "
                     "scales with %s.",
                     tag, shp(w, b1, sizeof b1), shp(scales, b2, sizeof b2));
        return -1;
    }
    if (bits <= 0 || gs <= 0 || w->shape[w->ndim - 1] * 32 / bits != scales->shape[scales->ndim - 1] * gs) {
        mk_error_set(MK_ERR_VALUE,
                     "[%s] The shapes of the weight and scales are incompatible based on bits and group_size. "
                     "w.shape() == %s and scales.shape() == %s with group_size=%d and bits=%d",
                     tag, shp(w, b1, sizeof b1), shp(scales, b2, sizeof b2), gs, bits);
        return -1;
    }
    if (bits < 2 || bits > 8 || bits == 7 || (gs * bits) % 8 || (w->shape[w->ndim - 1] * 32) % bits) {
        mk_error_set(MK_ERR_VALUE, "[%s] Quantization bits must be 2, 3, 4, 5, 6 or 8 but got %d.", tag, bits);
        return -1;
    }
    int64_t wl = w->shape[w->ndim - 1] * 32 / bits, wr = w->shape[w->ndim - 2];
    int64_t inner = transpose ? wl : wr;
    *outer = transpose ? wr : wl;
    if (x->ndim < 1 || inner != x->shape[x->ndim - 1]) {
        mk_error_set(MK_ERR_VALUE,
                     "[%s] Last dimension of first input with shape (..., %lld) does not match the expanded "
                     "quantized matrix (%lld, %lld) computed from shape %s with group_size=%d, bits=%d and "
                     "transpose=%s",
                     tag, x->ndim ? (long long)x->shape[x->ndim - 1] : 0LL, (long long)inner, (long long)*outer,
                     shp(w, b1, sizeof b1), gs, bits, transpose ? "true" : "false");
        return -1;
    }
    return 0;
}

mk_array *mk_quantized_matmul(mk_array *x, mk_array *w, mk_array *scales, mk_array *biases, bool transpose, int gs,
                              int bits, int mode) {
    int dt = mode_dtype("quantized_matmul", mode, scales, biases, -1);
    if (dt < 0) return NULL;
    mode_defaults(mode, &gs, &bits);
    int64_t outer;
    if (qmm_dims("quantized_matmul", x, w, scales, biases, transpose, gs, bits, &outer) < 0) return NULL;
    if (mode != MK_QMODE_AFFINE && fp_check("quantized_matmul", mode, gs, bits) < 0) return NULL;
    mk_dtype t = mode == MK_QMODE_AFFINE ? mk_promote(x->dtype, (mk_dtype)dt) : x->dtype;
    if (!is_floating(t)) {
        mk_error_set(MK_ERR_VALUE, "[quantized_matmul] Only real floating types are supported but x.dtype() == %s.",
                     mk_dtype_name(x->dtype));
        return NULL;
    }
    if (t == MK_FLOAT64) {
        mk_error_set(MK_ERR_VALUE, "[quantized_matmul] only floating types are supported");
        return NULL;
    }
    /* the output shape: x's (with batch dims broadcast against w's) */
    int64_t shape[MK_MAX_NDIM];
    int nd = x->ndim;
    memcpy(shape, x->shape, (size_t)nd * sizeof *shape);
    mk_array *in[4] = {NULL, NULL, NULL, NULL}, *r = NULL;
    int n = mode == MK_QMODE_AFFINE ? 4 : 3;
    mk_array *src[4] = {x, w, scales, biases};
    if (x->ndim > 2 && w->ndim > 2) {
        int64_t bs[MK_MAX_NDIM];
        int bn = mk_broadcast_shapes(x->ndim - 2, x->shape, w->ndim - 2, w->shape, bs);
        if (bn < 0) return NULL;
        nd = bn + 2;
        memcpy(shape, bs, (size_t)bn * sizeof *shape);
        shape[nd - 2] = x->shape[x->ndim - 2];
    }
    shape[nd - 1] = outer;
    for (int i = 0; i < n; i++) {
        mk_array *a = src[i];
        if (i == 0 || (i >= 2 && mode == MK_QMODE_AFFINE)) a = mk_as_dtype(a, t);
        else mk_incref(a);
        if (!a) goto done;
        in[i] = rowc(a);
        mk_decref(a);
        if (!in[i]) goto done;
        if (x->ndim > 2 && w->ndim > 2) { /* batch dims broadcast */
            int64_t bsh[MK_MAX_NDIM];
            memcpy(bsh, shape, (size_t)(nd - 2) * sizeof *bsh);
            bsh[nd - 2] = in[i]->shape[in[i]->ndim - 2];
            bsh[nd - 1] = in[i]->shape[in[i]->ndim - 1];
            mk_array *bc = mk_broadcast_to(in[i], nd, bsh);
            mk_decref(in[i]);
            in[i] = bc;
            if (!bc) goto done;
        }
    }
    qparams *qp = qp_new(gs, bits, mode);
    if (!qp) goto done;
    qp->transpose = transpose;
    r = mk_node(&qmm_def, qp, t, nd, shape, n, in);
done:
    for (int i = 0; i < 4; i++) mk_xdecref(in[i]);
    return r;
}

static int qmm_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const qparams *qp = p->params;
    mk_array *x = p->inputs[0], *w = p->inputs[1], *s = p->inputs[2];
    mk_array *b = qp->mode == MK_QMODE_AFFINE ? p->inputs[3] : NULL;
    mk_arena A = {0};
    int rc = 0;
    if (want[1]) {
        mk_error_set(MK_ERR_RUNTIME, "[QuantizedMatmul::vjp] no gradient wrt the quantized weights.");
        return -1;
    }
    if ((want[2] || (b && want[3])) && qp->mode != MK_QMODE_AFFINE) {
        mk_error_set(MK_ERR_VALUE, "[QuantizedMatmul::vjp] no gradient wrt scales in %s quantization.",
                     mk_qmode_name(qp->mode));
        return -1;
    }
    mk_array *c = cots[0];
    if (!c) return 0;
    if (want[0]) {
        grads[0] = mk_quantized_matmul(c, w, s, b, !qp->transpose, qp->gs, qp->bits, qp->mode);
        if (!grads[0]) return -1;
    }
    if (want[2] || (b && want[3])) {
        /* dw (summed over the leading dims of a 2-D w, per matrix of a batch), then per group */
        int nd = w->ndim;
        if (nd > 2 && x->ndim != nd) {
            mk_error_set(MK_ERR_RUNTIME, "[QuantizedMatmul::vjp] no gradient wrt scales for this batch layout.");
            mk_ar_free(&A);
            return -1;
        }
        int64_t K = x->shape[x->ndim - 1], N = c->shape[c->ndim - 1];
        int64_t fcs[2] = {-1, N}, fxs[2] = {-1, K};
        mk_array *fc = nd == 2 ? mk_ar_reshape(&A, c, 2, fcs) : c, *fx = nd == 2 ? mk_ar_reshape(&A, x, 2, fxs) : x;
        int perm[MK_MAX_NDIM];
        for (int i = 0; i < nd; i++) perm[i] = i;
        perm[nd - 2] = nd - 1;
        perm[nd - 1] = nd - 2;
        mk_array *dw = qp->transpose ? mk_ar_matmul(&A, mk_ar_transpose(&A, fc, nd, perm), fx)
                                     : mk_ar_matmul(&A, mk_ar_transpose(&A, fx, nd, perm), fc);
        int64_t gsh[MK_MAX_NDIM + 1];
        if (dw) {
            memcpy(gsh, dw->shape, (size_t)(nd - 1) * sizeof *gsh);
            gsh[nd - 1] = -1;
            gsh[nd] = qp->gs;
        }
        mk_array *dsb = dw ? mk_ar_reshape(&A, dw, nd + 1, gsh) : NULL;
        int last = -1;
        if (b && want[3]) {
            grads[3] = mk_ar_out(mk_ar_sum(&A, dsb, 1, &last, false));
            if (!grads[3]) rc = -1;
        }
        if (want[2] && rc == 0) {
            mk_array *ones = mk_ar_keep(&A, mk_ones(s->ndim, s->shape, s->dtype));
            mk_array *zeros = mk_ar_keep(&A, mk_zeros(s->ndim, s->shape, s->dtype));
            mk_array *wq = ones && zeros ? mk_ar_keep(&A, mk_dequantize(w, ones, zeros, qp->gs, qp->bits, qp->mode,
                                                                         NULL, -1))
                                         : NULL;
            grads[2] =
                mk_ar_out(mk_ar_sum(&A, mk_ar_mul(&A, dsb, wq ? mk_ar_reshape(&A, wq, nd + 1, gsh) : NULL), 1, &last, false));
            if (!grads[2]) rc = -1;
        }
    }
    mk_ar_free(&A);
    return rc;
}

static int qmm_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    const qparams *qp = p->params;
    for (int i = 1; i < p->ninputs; i++)
        if (tans[i]) {
            mk_error_set(MK_ERR_RUNTIME, "[QuantizedMatmul::jvp] No JVP wrt the quantized matrix yet.");
            return -1;
        }
    out[0] = NULL;
    if (!tans[0]) return 0;
    mk_array *b = qp->mode == MK_QMODE_AFFINE ? p->inputs[3] : NULL;
    out[0] = mk_quantized_matmul(tans[0], p->inputs[1], p->inputs[2], b, qp->transpose, qp->gs, qp->bits, qp->mode);
    return out[0] ? 0 : -1;
}

/* ------------------------------------------------------------ gathers */

/* MLX's indices_or_default: the given indices as uint32, or arange over the
 * batch dims of x. */
static mk_array *indices_or_default(const char *tag, mk_array *idx, mk_array *x) {
    char b[256];
    if (x->ndim < 2) {
        mk_error_set(MK_ERR_VALUE, "%s Input must have at least two dimensions but got input with shape %s.", tag,
                     shp(x, b, sizeof b));
        return NULL;
    }
    if (idx) {
        if (!mk_is_integral(idx->dtype)) {
            mk_error_set(MK_ERR_VALUE, "%s Got indices with invalid dtype. Indices must be integral.", tag);
            return NULL;
        }
        return mk_as_dtype(idx, MK_UINT32);
    }
    int64_t total = 1;
    for (int i = 0; i < x->ndim - 2; i++) total *= x->shape[i];
    mk_array *a = mk_arange(0, (double)total, 1, MK_UINT32);
    if (!a) return NULL;
    mk_array *r = mk_reshape(a, x->ndim - 2, x->shape);
    mk_decref(a);
    return r;
}

/* lhs and rhs broadcast against each other (new references in place). */
static int broadcast_pair(mk_array **l, mk_array **r) {
    int64_t sh[MK_MAX_NDIM];
    int n = mk_broadcast_shapes((*l)->ndim, (*l)->shape, (*r)->ndim, (*r)->shape, sh);
    if (n < 0) return -1;
    mk_array *a = mk_broadcast_to(*l, n, sh), *b = a ? mk_broadcast_to(*r, n, sh) : NULL;
    if (!b) {
        mk_xdecref(a);
        return -1;
    }
    mk_decref(*l);
    mk_decref(*r);
    *l = a;
    *r = b;
    return 0;
}

/* The matrices of x (batch dims flattened) picked by idx: idx.shape + x's last two dims. */
static mk_array *pick(mk_array *x, mk_array *idx) {
    int64_t sh[3] = {-1, x->shape[x->ndim - 2], x->shape[x->ndim - 1]};
    mk_array *f = mk_reshape(x, 3, sh);
    if (!f) return NULL;
    mk_array *r = mk_take(f, idx, 0, true);
    mk_decref(f);
    return r;
}

mk_array *mk_gather_mm(mk_array *a, mk_array *b, mk_array *lhs_in, mk_array *rhs_in, bool sorted) {
    char b1[256], b2[256];
    if (!lhs_in && !rhs_in) return mk_matmul(a, b);
    if (a->ndim == 0 || b->ndim == 0) {
        mk_error_set(MK_ERR_VALUE, "[gather_mm] Got 0 dimension input. Inputs must have at least one dimension.");
        return NULL;
    }
    int a1 = a->ndim == 1, b1d = b->ndim == 1, ax0 = 0, ax1 = 1;
    mk_array *A = a1 ? mk_expand_dims(a, 1, &ax0) : (mk_incref(a), a);
    mk_array *B = b1d ? mk_expand_dims(b, 1, &ax1) : (mk_incref(b), b);
    mk_array *lhs = NULL, *rhs = NULL, *ag = NULL, *bg = NULL, *r = NULL;
    if (!A || !B) goto done;
    if (A->shape[A->ndim - 1] != B->shape[B->ndim - 2]) {
        mk_error_set(MK_ERR_VALUE,
                     "[gather_mm] Last dimension of first input with shape %s must match second to last dimension "
                     "of second input with shape %s.",
                     shp(A, b1, sizeof b1), shp(B, b2, sizeof b2));
        goto done;
    }
    mk_dtype t = mk_promote(A->dtype, B->dtype);
    if (!is_floating(t)) {
        mk_error_set(MK_ERR_VALUE,
                     "[gather_mm] Only real floating point types are supported but %s and %s were provided which "
                     "results in %s, which is not a real floating point type.",
                     mk_dtype_name(a->dtype), mk_dtype_name(b->dtype), mk_dtype_name(t));
        goto done;
    }
    if (!(lhs = indices_or_default("[gather_mm]", lhs_in, A)) || !(rhs = indices_or_default("[gather_mm]", rhs_in, B)))
        goto done;
    if (broadcast_pair(&lhs, &rhs) < 0) goto done;
    /* MLX's GatherMM primitive (ops_gathermm.c); MLX's sorted flags */
    if ((ag = mk_as_dtype(A, t)) && (bg = mk_as_dtype(B, t)))
        r = mk_gather_mm_node(ag, bg, lhs, rhs, sorted && !rhs_in, sorted && !lhs_in);
    if (r && (a1 || b1d)) {
        int axes[2], n = 0;
        if (a1) axes[n++] = r->ndim - 2;
        if (b1d) axes[n++] = r->ndim - 1;
        mk_array *sq = mk_squeeze(r, n, axes);
        mk_decref(r);
        r = sq;
    }
done:
    mk_xdecref(A);
    mk_xdecref(B);
    mk_xdecref(lhs);
    mk_xdecref(rhs);
    mk_xdecref(ag);
    mk_xdecref(bg);
    return r;
}

mk_array *mk_gather_qmm(mk_array *x, mk_array *w, mk_array *scales, mk_array *biases, mk_array *lhs_in,
                        mk_array *rhs_in, bool transpose, int gs, int bits, int mode, bool sorted) {
    (void)sorted;
    if (!lhs_in && !rhs_in) return mk_quantized_matmul(x, w, scales, biases, transpose, gs, bits, mode);
    int dt = mode_dtype("gather_qmm", mode, scales, biases, -1);
    if (dt < 0) return NULL;
    mode_defaults(mode, &gs, &bits);
    int64_t outer;
    if (qmm_dims("gather_qmm", x, w, scales, biases, transpose, gs, bits, &outer) < 0) return NULL;
    mk_dtype t = mode == MK_QMODE_AFFINE ? mk_promote(x->dtype, (mk_dtype)dt) : x->dtype;
    if (!is_floating(t)) {
        mk_error_set(MK_ERR_VALUE, "[gather_qmm] Only real floating types are supported but x.dtype() == %s.",
                     mk_dtype_name(x->dtype));
        return NULL;
    }
    mk_array *lhs = NULL, *rhs = NULL, *xg = NULL, *wg = NULL, *sg = NULL, *bg = NULL, *r = NULL;
    if (!(lhs = indices_or_default("[gather_qmm]", lhs_in, x)) || !(rhs = indices_or_default("[gather_qmm]", rhs_in, w)))
        goto done;
    if (broadcast_pair(&lhs, &rhs) < 0) goto done;
    if (!(xg = pick(x, lhs)) || !(wg = pick(w, rhs)) || !(sg = pick(scales, rhs))) goto done;
    if (biases && !(bg = pick(biases, rhs))) goto done;
    /* xg and wg have the same batch dims (the broadcast indices' shape) */
    r = mk_quantized_matmul(xg, wg, sg, bg, transpose, gs, bits, mode);
done:
    mk_xdecref(lhs);
    mk_xdecref(rhs);
    mk_xdecref(xg);
    mk_xdecref(wg);
    mk_xdecref(sg);
    mk_xdecref(bg);
    return r;
}

/* ------------------------------------------------------------ segmented_mm */

static int segmm_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    if (o->size == 0) return 0;
    const mk_array *a = in[0], *b = in[1], *sg = in[2];
    int64_t M = a->shape[0], K = a->shape[1], N = b->shape[1], nseg = sg->size / 2;
    float *af = malloc((size_t)max1(M * K) * sizeof *af), *bf = malloc((size_t)max1(K * N) * sizeof *bf);
    float *of = malloc((size_t)(M * N) * sizeof *of);
    if (!af || !bf || !of) {
        free(af);
        free(bf);
        free(of);
        mk_nomem();
        return -1;
    }
    mk_cast_table[a->dtype][MK_FLOAT32](mk_data(a), 1, af, 1, M * K);
    mk_cast_table[b->dtype][MK_FLOAT32](mk_data(b), 1, bf, 1, K * N);
    const uint32_t *seg = mk_data(sg);
    size_t osz = mk_dtype_size(o->dtype);
    for (int64_t i = 0; i < nseg; i++) {
        int64_t k0 = seg[2 * i], k1 = seg[2 * i + 1];
        k0 = k0 > K ? K : k0;
        k1 = k1 > K ? K : k1;
        if (k1 <= k0)
            memset(of, 0, (size_t)(M * N) * sizeof *of);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)N, (int)(k1 - k0), 1.0f, af + k0,
                        (int)K, bf + k0 * N, (int)N, 0.0f, of, (int)N);
        mk_cast_table[MK_FLOAT32][o->dtype](of, 1, (char *)mk_data(o) + i * M * N * (int64_t)osz, 1, M * N);
    }
    free(af);
    free(bf);
    free(of);
    return 0;
}

static const mk_opdef segmm_def = {"SegmentedMM", segmm_eval, NULL, NULL, NULL, NULL, false};

mk_array *mk_segmented_mm(mk_array *a, mk_array *b, mk_array *segments) {
    char b1[256];
    if (a->ndim != 2 || b->ndim != 2) {
        mk_error_set(MK_ERR_VALUE, "[segmented_mm] Batched matmul not supported");
        return NULL;
    }
    if (segments->ndim < 1 || segments->shape[segments->ndim - 1] != 2) {
        mk_error_set(MK_ERR_VALUE, "[segmented_mm] The segments should have shape (..., 2) but %s was provided.",
                     shp(segments, b1, sizeof b1));
        return NULL;
    }
    mk_dtype t = mk_promote(a->dtype, b->dtype);
    if (!is_floating(t)) {
        mk_error_set(MK_ERR_VALUE,
                     "[segmented_mm] Only real floating point types are supported but %s and %s were provided which "
                     "results in %s, which is not a real floating point type.",
                     mk_dtype_name(a->dtype), mk_dtype_name(b->dtype), mk_dtype_name(t));
        return NULL;
    }
    if (!mk_is_integral(segments->dtype)) {
        mk_error_set(MK_ERR_VALUE, "[segmented_mm] Got segments with invalid dtype. Segments must be integral.");
        return NULL;
    }
    if (a->shape[1] != b->shape[0]) {
        char b2[256];
        mk_error_set(MK_ERR_VALUE, "[segmented_mm] Last dimension of first input with shape %s must match second to "
                     "last dimension of second input with shape %s.", shp(a, b1, sizeof b1), shp(b, b2, sizeof b2));
        return NULL;
    }
    int64_t shape[MK_MAX_NDIM];
    int nd = segments->ndim + 1;
    if (nd > MK_MAX_NDIM) {
        mk_error_set(MK_ERR_VALUE, "[segmented_mm] Too many dimensions.");
        return NULL;
    }
    memcpy(shape, segments->shape, (size_t)(segments->ndim - 1) * sizeof *shape);
    shape[nd - 2] = a->shape[0];
    shape[nd - 1] = b->shape[1];
    mk_array *in[3] = {NULL, NULL, NULL}, *r = NULL;
    mk_array *ac = mk_as_dtype(a, t), *bc = ac ? mk_as_dtype(b, t) : NULL, *sc = bc ? mk_as_dtype(segments, MK_UINT32) : NULL;
    if (sc && (in[0] = rowc(ac)) && (in[1] = rowc(bc)) &&
        (in[2] = rowc(sc)))
        r = mk_node(&segmm_def, NULL, t == MK_FLOAT64 ? MK_FLOAT32 : t, nd, shape, 3, in);
    mk_xdecref(ac);
    mk_xdecref(bc);
    mk_xdecref(sc);
    for (int i = 0; i < 3; i++) mk_xdecref(in[i]);
    return r;
}

/* ------------------------------------------------------------ qqmm */

/* MLX's qqmm: x quantized in the mode (and w too when it is not already),
 * multiplied as dequantized values: dequantize(quantize(x)) @
 * dequantize(w).T, computed here as that composition, in x's dtype. */
mk_array *mk_qqmm(mk_array *x, mk_array *w, mk_array *scales, int gs, int bits, int mode, mk_array *gsx,
                  mk_array *gsw) {
    char b1[256], b2[256];
    mode_defaults(mode, &gs, &bits);
    mk_array *X = NULL, *xq[3] = {NULL, NULL, NULL}, *wq[3] = {NULL, NULL, NULL}, *xh = NULL, *wh = NULL;
    mk_array *wt = NULL, *y = NULL, *r = NULL;
    int ax0 = 0;
    if (x->ndim == 1) {
        X = mk_expand_dims(x, 1, &ax0);
    } else if (w->ndim == 2 && x->ndim > 2) {
        X = mk_flatten(x, 0, x->ndim - 2);
    } else {
        mk_incref(x);
        X = x;
    }
    if (!X) return NULL;
    if (X->ndim > 2 || w->ndim > 2) {
        mk_error_set(MK_ERR_VALUE, "[qqmm] Only 2D inputs are supported but x.ndim() == %d and w.ndim() == %d.",
                     X->ndim, w->ndim);
        goto done;
    }
    if (w->dtype == MK_UINT32) {
        if (!scales) {
            mk_error_set(MK_ERR_VALUE, "[qqmm] Scales must be provided if second argument is quantized.");
            goto done;
        }
    } else if (!is_floating(w->dtype) || w->dtype == MK_FLOAT64) {
        mk_error_set(MK_ERR_VALUE,
                     "[qqmm] Only real floating types except float64 are supported but second argument dtype == %s.",
                     mk_dtype_name(w->dtype));
        goto done;
    }
    if (!is_floating(X->dtype) || X->dtype == MK_FLOAT64) {
        mk_error_set(MK_ERR_VALUE,
                     "[qqmm] Only real floating types except float64 are supported but first argument dtype == %s.",
                     mk_dtype_name(X->dtype));
        goto done;
    }
    if (check_gscale("qqmm", mode, gsx) < 0 || check_gscale("qqmm", mode, gsw) < 0) goto done;
    if (mode == MK_QMODE_NVFP4 && (gsx != NULL) != (gsw != NULL)) {
        mk_error_set(MK_ERR_VALUE, "[qqmm] For nvfp4 mode, either both global_scale_x and global_scale_w must be "
                                   "provided, or neither.");
        goto done;
    }
    if (w->dtype != MK_UINT32) {
        if (X->shape[X->ndim - 1] != w->shape[w->ndim - 1]) {
            mk_error_set(MK_ERR_VALUE,
                         "[qqmm] Last dimension of first input with shape %s must match last dimension of second "
                         "input with shape %s.",
                         shp(X, b1, sizeof b1), shp(w, b2, sizeof b2));
            goto done;
        }
    } else {
        int64_t outer;
        if (qmm_dims("qqmm", X, w, scales, NULL, true, gs, bits, &outer) < 0) goto done;
    }
    if (mode == MK_QMODE_AFFINE) {
        mk_error_set(MK_ERR_VALUE, "[qqmm] Only 'nvfp4', 'mxfp4' and 'mxfp8' quantization modes are supported.");
        goto done;
    }
    if (mk_quantize(X, gs, bits, mode, gsx, xq) < 0) goto done;
    if (!(xh = mk_dequantize(xq[0], xq[1], NULL, gs, bits, mode, gsx, X->dtype))) goto done;
    if (w->dtype == MK_UINT32) {
        wh = mk_dequantize(w, scales, NULL, gs, bits, mode, gsw, X->dtype);
    } else if (mk_quantize(w, gs, bits, mode, gsw, wq) >= 0) {
        wh = mk_dequantize(wq[0], wq[1], NULL, gs, bits, mode, gsw, X->dtype);
    }
    if (!wh || !(wt = mk_swapaxes(wh, 0, 1)) || !(y = mk_matmul(xh, wt))) goto done;
    {
        mk_array *yc = mk_as_dtype(y, X->dtype);
        if (!yc) goto done;
        if (x->ndim != 2) {
            int64_t shape[MK_MAX_NDIM];
            memcpy(shape, x->shape, (size_t)(x->ndim - 1) * sizeof *shape);
            shape[x->ndim - 1] = yc->shape[1];
            r = mk_reshape(yc, x->ndim, shape);
            mk_decref(yc);
        } else {
            r = yc;
        }
    }
done:
    mk_xdecref(X);
    for (int i = 0; i < 3; i++) {
        mk_xdecref(xq[i]);
        mk_xdecref(wq[i]);
    }
    mk_xdecref(xh);
    mk_xdecref(wh);
    mk_xdecref(wt);
    mk_xdecref(y);
    return r;
}

/* MLX's gather_qqmm: gather_mm of the dequantized quantizations of x and w. */
mk_array *mk_gather_qqmm(mk_array *x, mk_array *w, mk_array *scales, mk_array *lhs, mk_array *rhs, int gs, int bits,
                         int mode, mk_array *gsx, mk_array *gsw, bool sorted) {
    mode_defaults(mode, &gs, &bits);
    mk_array *xq[3] = {NULL, NULL, NULL}, *wq[3] = {NULL, NULL, NULL}, *xh = NULL, *wh = NULL, *wt = NULL;
    mk_array *y = NULL, *r = NULL;
    if (mode == MK_QMODE_AFFINE) {
        mk_error_set(MK_ERR_VALUE, "[gather_qqmm] Only 'nvfp4', 'mxfp4' and 'mxfp8' quantization modes are supported.");
        return NULL;
    }
    if (w->dtype == MK_UINT32 && !scales) {
        mk_error_set(MK_ERR_VALUE, "[gather_qqmm] Scales must be provided if second argument is quantized.");
        return NULL;
    }
    if (check_gscale("gather_qqmm", mode, gsx) < 0 || check_gscale("gather_qqmm", mode, gsw) < 0) return NULL;
    if (mk_quantize(x, gs, bits, mode, gsx, xq) < 0) goto done;
    if (!(xh = mk_dequantize(xq[0], xq[1], NULL, gs, bits, mode, gsx, x->dtype))) goto done;
    if (w->dtype == MK_UINT32)
        wh = mk_dequantize(w, scales, NULL, gs, bits, mode, gsw, x->dtype);
    else if (mk_quantize(w, gs, bits, mode, gsw, wq) >= 0)
        wh = mk_dequantize(wq[0], wq[1], NULL, gs, bits, mode, gsw, x->dtype);
    if (!wh || !(wt = mk_swapaxes(wh, -1, -2)) || !(y = mk_gather_mm(xh, wt, lhs, rhs, sorted))) goto done;
    r = mk_as_dtype(y, x->dtype);
done:
    for (int i = 0; i < 3; i++) {
        mk_xdecref(xq[i]);
        mk_xdecref(wq[i]);
    }
    mk_xdecref(xh);
    mk_xdecref(wh);
    mk_xdecref(wt);
    mk_xdecref(y);
    return r;
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_qmm(const mk_prim *p, int *gs, int *bits, int *mode, bool *transpose) {
    if (p->op != &qmm_def) return false;
    const qparams *q = p->params;
    *gs = q->gs;
    *bits = q->bits;
    *mode = q->mode;
    *transpose = q->transpose;
    return true;
}
bool mk_xp_rowc(const mk_prim *p) { return p->op == &rowc_def; }
