/* Convolutions: conv_general (and conv1d/2d/3d, conv_transpose*, convolve
 * on top of it in the binding), channels last as MLX: input (N, S..., C),
 * weight (O, K..., C / groups), output (N, Out..., O).
 *
 * One node ("Convolution") with MLX's parameters: strides, low and high
 * padding, kernel and input dilation, groups and flip. Output position o
 * reads, for kernel tap k along a spatial dim, the position
 * p = o * stride + k * kdil - pad_lo of the input dilated by idil: it is a
 * real input element when 0 <= p and p % idil == 0 and p / idil < S, and a
 * zero otherwise. Per dim a table maps (o, k) to that input index or -1.
 *
 * Three evaluators (all in float32 for float16/bfloat16/float32, in float64
 * for float64; inputs are first copied into dense buffers of that type,
 * flip reverses the weight's taps in that copy):
 * - direct loops: each output row (one n and spatial position) accumulates
 *   input value x weight row over its taps, the weight stored (group, tap,
 *   C_in/g, C_out/g) so the inner loop runs over output channels;
 * - im2col + gemm: blocks of output rows gather their taps into a column
 *   matrix (rows, taps * C_in/g) and one OpenBLAS gemm per group multiplies
 *   it by that group's weight matrix.
 * - Winograd F(6x6, 3x3), for the nodes on a GPU stream under the conditions
 *   of MLX's Metal back-end (run_winograd, below).
 * conv_use_gemm() chooses between the first two by a rule measured on this
 * machine (docs/design.md, "Convolutions"); MKPY_CONV_ALGO=direct|gemm
 * forces one (tests and benchmarks), also where Winograd would run.
 *
 * The transformation rules follow MLX's: the input's gradient is a
 * convolution of the cotangent with the (group-)transposed weight, the
 * weight's a convolution of the (group-)transposed input with the cotangent,
 * both conv_general nodes again, so they differentiate further. One change:
 * the input gradient's high padding is is - os + pad_lo (MLX writes pad_hi,
 * which gives the wrong shape under asymmetric padding). */
#include <cblas.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "iter.h"
#include "ops.h"
#include "pool.h"
#include "stream.h"
#include "transforms.h"
#include "types.h"

typedef struct {
    int nd;
    int stride[3], pad_lo[3], pad_hi[3], kdil[3], idil[3];
    int groups;
    bool flip;
} conv_params;

static mk_array *conv_node(mk_array *in, mk_array *wt, const conv_params *cp);

static char *ivec(int n, const int *v, char *buf, size_t sz) {
    int64_t t[MK_CONV_MAXLIST];
    for (int i = 0; i < n && i < MK_CONV_MAXLIST; i++) t[i] = v[i];
    mk_shape_str(n, t, buf, sz);
    return buf;
}

static int64_t dilate_size(int64_t d, int64_t dil) { return 1 + dil * (d - 1); }

/* --------------------------------------------------------------- evaluator */

typedef struct {
    int nd;
    int64_t N, C, O, G, Cg, Og;
    int64_t S[3], K[3], Out[3];
    int64_t T;       /* taps: prod K */
    int64_t rows;    /* N * prod Out */
    int64_t osp;     /* prod Out */
    int *tab[3];     /* per dim: Out x K -> input index or -1 */
    bool dbl;
    const void *x;   /* dense input, compute type */
    const void *w;   /* dense weight (O, T, Cg), taps flipped if needed */
    void *wt;        /* direct: (G, T, Cg, Og) */
    void *y;         /* output rows (rows, O), compute type */
    /* gemm */
    int64_t block;
} conv_plan;

/* input offset (in elements, of channel 0) of tap t for output row r, or -1 */
static inline int64_t tap_offset(const conv_plan *P, int64_t n, const int64_t *o, int64_t t) {
    int64_t off = n;
    int64_t k[3];
    for (int d = P->nd - 1; d >= 0; d--) {
        k[d] = t % P->K[d];
        t /= P->K[d];
    }
    for (int d = 0; d < P->nd; d++) {
        int i = P->tab[d][o[d] * P->K[d] + k[d]];
        if (i < 0) return -1;
        off = off * P->S[d] + i;
    }
    return off * P->C;
}

static inline void row_pos(const conv_plan *P, int64_t r, int64_t *n, int64_t *o) {
    for (int d = P->nd - 1; d >= 0; d--) {
        o[d] = r % P->Out[d];
        r /= P->Out[d];
    }
    *n = r;
}

#define DIRECT_KERNEL(T_)                                                                                      \
    static void direct_rows_##T_(void *ctx, int64_t begin, int64_t end) {                                      \
        const conv_plan *P = ctx;                                                                              \
        const T_ *x = P->x, *wt = P->wt;                                                                       \
        T_ *y = P->y;                                                                                          \
        for (int64_t r = begin; r < end; r++) {                                                                \
            int64_t n, o[3];                                                                                   \
            row_pos(P, r, &n, o);                                                                              \
            T_ *acc = y + r * P->O;                                                                            \
            for (int64_t j = 0; j < P->O; j++) acc[j] = 0;                                                     \
            for (int64_t t = 0; t < P->T; t++) {                                                               \
                int64_t off = tap_offset(P, n, o, t);                                                          \
                if (off < 0) continue;                                                                         \
                const T_ *xr = x + off;                                                                        \
                for (int64_t g = 0; g < P->G; g++) {                                                           \
                    const T_ *wg = wt + (g * P->T + t) * P->Cg * P->Og;                                        \
                    T_ *ag = acc + g * P->Og;                                                                  \
                    const T_ *xg = xr + g * P->Cg;                                                             \
                    for (int64_t c = 0; c < P->Cg; c++) {                                                      \
                        T_ xv = xg[c];                                                                         \
                        const T_ *wr = wg + c * P->Og;                                                         \
                        for (int64_t j = 0; j < P->Og; j++) ag[j] += xv * wr[j];                               \
                    }                                                                                          \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }
DIRECT_KERNEL(float)
DIRECT_KERNEL(double)

/* depthwise (C_in/g = C_out/g = 1): the weight as (T, G), the loop runs
 * across the channels, which are contiguous in input, weight and output */
#define DEPTHWISE_KERNEL(T_)                                                                                   \
    static void depthwise_rows_##T_(void *ctx, int64_t begin, int64_t end) {                                   \
        const conv_plan *P = ctx;                                                                              \
        const T_ *x = P->x, *wt = P->wt;                                                                       \
        T_ *y = P->y;                                                                                          \
        for (int64_t r = begin; r < end; r++) {                                                                \
            int64_t n, o[3];                                                                                   \
            row_pos(P, r, &n, o);                                                                              \
            T_ *acc = y + r * P->O;                                                                            \
            for (int64_t j = 0; j < P->O; j++) acc[j] = 0;                                                     \
            for (int64_t t = 0; t < P->T; t++) {                                                               \
                int64_t off = tap_offset(P, n, o, t);                                                          \
                if (off < 0) continue;                                                                         \
                const T_ *xr = x + off, *wr = wt + t * P->G;                                                   \
                for (int64_t g = 0; g < P->G; g++) acc[g] += xr[g] * wr[g];                                    \
            }                                                                                                  \
        }                                                                                                      \
    }
DEPTHWISE_KERNEL(float)
DEPTHWISE_KERNEL(double)

typedef struct {
    const conv_plan *P;
    int64_t r0;
    int64_t g;
    void *col;
} im2col_job;

#define IM2COL_KERNEL(T_)                                                                                      \
    static void im2col_rows_##T_(void *ctx, int64_t begin, int64_t end) {                                      \
        const im2col_job *J = ctx;                                                                             \
        const conv_plan *P = J->P;                                                                             \
        const T_ *x = P->x;                                                                                    \
        int64_t TC = P->T * P->Cg;                                                                             \
        for (int64_t i = begin; i < end; i++) {                                                                \
            int64_t n, o[3];                                                                                   \
            row_pos(P, J->r0 + i, &n, o);                                                                      \
            T_ *cr = (T_ *)J->col + i * TC;                                                                    \
            for (int64_t t = 0; t < P->T; t++) {                                                               \
                int64_t off = tap_offset(P, n, o, t);                                                          \
                T_ *dst = cr + t * P->Cg;                                                                      \
                if (off < 0)                                                                                   \
                    memset(dst, 0, sizeof(T_) * (size_t)P->Cg);                                               \
                else                                                                                           \
                    memcpy(dst, x + off + J->g * P->Cg, sizeof(T_) * (size_t)P->Cg);                          \
            }                                                                                                  \
        }                                                                                                      \
    }
IM2COL_KERNEL(float)
IM2COL_KERNEL(double)

static int run_gemm(conv_plan *P) {
    int64_t TC = P->T * P->Cg;
    size_t esz = P->dbl ? 8 : 4;
    int64_t block = P->block;
    if (block > P->rows) block = P->rows;
    if (TC > INT_MAX || P->O > INT_MAX || block * TC > INT_MAX) {
        mk_error_set(MK_ERR_VALUE, "[conv] Convolution too large.");
        return -1;
    }
    void *col = malloc((size_t)block * (size_t)TC * esz);
    if (!col) {
        mk_nomem();
        return -1;
    }
    for (int64_t r0 = 0; r0 < P->rows; r0 += block) {
        int64_t m = P->rows - r0 < block ? P->rows - r0 : block;
        for (int64_t g = 0; g < P->G; g++) {
            im2col_job J = {P, r0, g, col};
            mk_parallel_for(m, 64, P->dbl ? im2col_rows_double : im2col_rows_float, &J);
            if (P->dbl) {
                const double *wg = (const double *)P->w + g * P->Og * TC;
                double *yo = (double *)P->y + r0 * P->O + g * P->Og;
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)P->Og, (int)TC, 1.0, col, (int)TC,
                            wg, (int)TC, 0.0, yo, (int)P->O);
            } else {
                const float *wg = (const float *)P->w + g * P->Og * TC;
                float *yo = (float *)P->y + r0 * P->O + g * P->Og;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)P->Og, (int)TC, 1.0f, col, (int)TC,
                            wg, (int)TC, 0.0f, yo, (int)P->O);
            }
        }
    }
    free(col);
    return 0;
}

/* The measured rule (docs/design.md, "FFT and convolutions"): gemm unless
 * the per-group products are too thin for a blocked product to pay for the
 * column matrix. */
static bool conv_use_gemm(const conv_plan *P) {
    const char *e = getenv("MKPY_CONV_ALGO");
    if (e && !strcmp(e, "direct")) return false;
    if (e && !strcmp(e, "gemm")) return true;
    int64_t TC = P->T * P->Cg;
    if (P->Cg == 1 && P->Og == 1) return false;   /* depthwise: the channel-vectorised loop */
    if (P->G > 1 && P->Og < 16) return false;      /* many small per-group products */
    return TC >= 1;
}

typedef struct {
    mk_cast_fn fn;
    const char *src;
    char *dst;
    size_t isz, osz;
} cast_ctx;

static void cast_rows(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    cast_ctx *u = c;
    u->fn(u->src + off[1] * u->isz, st[1], u->dst + off[0] * u->osz, st[0], n);
}

/* a dense copy of x in dtype ct (x's own buffer when already dense) */
static const void *dense(mk_array *x, mk_dtype ct, mk_buffer **own) {
    *own = NULL;
    if (x->dtype == ct && (x->flags & MK_ROW_CONTIG)) return mk_data(x);
    mk_buffer *b = mk_buffer_alloc((size_t)x->size * mk_dtype_size(ct));
    if (!b) return NULL;
    int64_t ds[MK_MAX_NDIM];
    mk_row_strides(x->ndim, x->shape, ds);
    cast_ctx u = {mk_cast_table[x->dtype][ct], mk_data(x), b->data, mk_dtype_size(x->dtype), mk_dtype_size(ct)};
    const int64_t *strides[2] = {ds, x->strides};
    mk_iter it;
    mk_iter_init(&it, x->ndim, x->shape, 2, strides);
    mk_iter_run(&it, MK_GRAIN, cast_rows, &u);
    *own = b;
    return b->data;
}

/* ------------------------------------------------ Winograd (the GPU stream)
 *
 * MLX's Metal back-end computes 3x3 stride-1 convolutions with many channels
 * by Winograd's F(6x6, 3x3): each 8x8 input patch (overlapping by 2) and each
 * filter go into the transformed domain (V = B^T d B, U = G g G^T), 64
 * independent products V_xi (tiles x C) @ U_xi (C x O) replace the taps, and
 * Y = A^T M A gives a 6x6 output tile. mkpy's stand-in for the Metal device
 * (nodes on a GPU stream) takes the same path under MLX's conditions
 * (mlx/backend/metal/conv.cpp: no groups or flip, stride and dilations 1,
 * a 3x3 kernel, C and O multiples of 32, C + O >= 256, N * H * W >= 4096) and
 * MLX's memory rule: the batch goes through in steps of n_step elements,
 * chosen so that the scratch fits in 3/4 of the working set
 * (MLX_CONV_WINOGRAD_WORKING_SET, else device_info's
 * max_recommended_working_set_size), MLX_CONV_WINOGRAD_TILE_BATCH forces a
 * smaller step, and where not even one element fits (or a forced tiling
 * leaves under 32 tiles per product) the conv takes the gemm path. The CPU
 * stream keeps MLX's CPU algorithm (im2col + gemm).
 *
 * The step changes memory, never results: each batch element's 64 products
 * are their own gemm calls, so every output's sums run in the same order
 * whatever the step. The transforms and products are in float32 (float16
 * and bfloat16 are widened, as in the other paths). The matrices are the
 * standard ones for the points 0, +-1, +-2, +-1/2 and infinity. */

static const float WG_BT[8][8] = {
    {1, 0, -5.25f, 0, 5.25f, 0, -1, 0},          {0, 1, 1, -4.25f, -4.25f, 1, 1, 0},
    {0, -1, 1, 4.25f, -4.25f, -1, 1, 0},         {0, 0.5f, 0.25f, -2.5f, -1.25f, 2, 1, 0},
    {0, -0.5f, 0.25f, 2.5f, -1.25f, -2, 1, 0},   {0, 2, 4, -2.5f, -5, 0.5f, 1, 0},
    {0, -2, 4, 2.5f, -5, -0.5f, 1, 0},           {0, -1, 0, 5.25f, 0, -5.25f, 0, 1},
};
static const float WG_G[8][3] = {
    {1, 0, 0},
    {-2.f / 9, -2.f / 9, -2.f / 9},
    {-2.f / 9, 2.f / 9, -2.f / 9},
    {1.f / 90, 1.f / 45, 2.f / 45},
    {1.f / 90, -1.f / 45, 2.f / 45},
    {32.f / 45, 16.f / 45, 8.f / 45},
    {32.f / 45, -16.f / 45, 8.f / 45},
    {0, 0, 1},
};
static const float WG_AT[6][8] = {
    {1, 1, 1, 1, 1, 1, 1, 0},         {0, 1, -1, 2, -2, 0.5f, -0.5f, 0},
    {0, 1, 1, 4, 4, 0.25f, 0.25f, 0}, {0, 1, -1, 8, -8, 0.125f, -0.125f, 0},
    {0, 1, 1, 16, 16, 1.f / 16, 1.f / 16, 0}, {0, 1, -1, 32, -32, 1.f / 32, -1.f / 32, 1},
};

#define WG_CB 32 /* channels per pass of the transforms (C and O are multiples of 32) */

typedef struct {
    const conv_plan *P;
    int64_t th, tw, tiles; /* tiles per image: th x tw (6x6 outputs each) */
    int pad_h, pad_w;      /* where the input starts in the tiles' padded image */
    int64_t n0, nstep;     /* the step's first batch element and its size */
    const float *w;        /* weight (O, 3, 3, C) */
    float *U;              /* (64, C, O) */
    float *V;              /* (64, nstep * tiles, C) */
    float *M;              /* (64, nstep * tiles, O) */
} wg_plan;

/* U_xi[c][o] = (G g G^T)[xi] for filter o, channel c; one o per index */
static void wg_filter(void *ctx, int64_t begin, int64_t end) {
    const wg_plan *W = ctx;
    int64_t C = W->P->C, O = W->P->O;
    for (int64_t o = begin; o < end; o++)
        for (int64_t c = 0; c < C; c++) {
            float g[3][3], t[8][3];
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) g[i][j] = W->w[((o * 3 + i) * 3 + j) * C + c];
            for (int a = 0; a < 8; a++)
                for (int j = 0; j < 3; j++) t[a][j] = WG_G[a][0] * g[0][j] + WG_G[a][1] * g[1][j] + WG_G[a][2] * g[2][j];
            for (int a = 0; a < 8; a++)
                for (int b = 0; b < 8; b++)
                    W->U[((int64_t)(a * 8 + b) * C + c) * O + o] =
                        t[a][0] * WG_G[b][0] + t[a][1] * WG_G[b][1] + t[a][2] * WG_G[b][2];
        }
}

/* tile r of this step: batch element n, tile row ti and column tj */
static inline void wg_tile(const wg_plan *W, int64_t r, int64_t *n, int64_t *ti, int64_t *tj) {
    *n = W->n0 + r / W->tiles;
    *ti = r % W->tiles / W->tw;
    *tj = r % W->tw;
}

/* t = L x for each of the 32 channels: L (rows x 8), x and t (. x 8 x WG_CB) */
static void wg_left(int rows, const float L[][8], float x[8][8][WG_CB], float t[][8][WG_CB]) {
    for (int a = 0; a < rows; a++)
        for (int b = 0; b < 8; b++)
            for (int k = 0; k < WG_CB; k++) {
                float s = 0;
                for (int m = 0; m < 8; m++) s += L[a][m] * x[m][b][k];
                t[a][b][k] = s;
            }
}

/* V for the tiles of this step: one tile (n, i, j) per index, read from the
 * input with the padding as zeros */
static void wg_input(void *ctx, int64_t begin, int64_t end) {
    const wg_plan *W = ctx;
    const conv_plan *P = W->P;
    const float *x = P->x;
    int64_t C = P->C, H = P->S[0], Wd = P->S[1], rows = W->nstep * W->tiles;
    for (int64_t r = begin; r < end; r++) {
        int64_t n, ti, tj;
        wg_tile(W, r, &n, &ti, &tj);
        for (int64_t c0 = 0; c0 < C; c0 += WG_CB) {
            float d[8][8][WG_CB], t[8][8][WG_CB];
            for (int a = 0; a < 8; a++)
                for (int b = 0; b < 8; b++) {
                    int64_t h = ti * 6 + a - W->pad_h, w = tj * 6 + b - W->pad_w;
                    if (h < 0 || h >= H || w < 0 || w >= Wd)
                        memset(d[a][b], 0, sizeof d[a][b]);
                    else
                        memcpy(d[a][b], x + ((n * H + h) * Wd + w) * C + c0, sizeof d[a][b]);
                }
            wg_left(8, WG_BT, d, t); /* t = B^T d */
            for (int a = 0; a < 8; a++) /* V = t B */
                for (int b = 0; b < 8; b++) {
                    float *v = W->V + ((int64_t)(a * 8 + b) * rows + r) * C + c0;
                    for (int k = 0; k < WG_CB; k++) {
                        float s = 0;
                        for (int m = 0; m < 8; m++) s += t[a][m][k] * WG_BT[b][m];
                        v[k] = s;
                    }
                }
        }
    }
}

/* Y = A^T M A for the tiles of this step, into the output rows */
static void wg_output(void *ctx, int64_t begin, int64_t end) {
    const wg_plan *W = ctx;
    const conv_plan *P = W->P;
    float *y = P->y;
    int64_t O = P->O, OH = P->Out[0], OW = P->Out[1], rows = W->nstep * W->tiles;
    for (int64_t r = begin; r < end; r++) {
        int64_t n, ti, tj;
        wg_tile(W, r, &n, &ti, &tj);
        for (int64_t o0 = 0; o0 < O; o0 += WG_CB) {
            float m[8][8][WG_CB], t[6][8][WG_CB];
            for (int a = 0; a < 8; a++)
                for (int b = 0; b < 8; b++)
                    memcpy(m[a][b], W->M + ((int64_t)(a * 8 + b) * rows + r) * O + o0, sizeof m[a][b]);
            wg_left(6, WG_AT, m, t); /* t = A^T m */
            for (int a = 0; a < 6; a++) { /* Y = t A */
                int64_t h = ti * 6 + a;
                if (h >= OH) break;
                for (int b = 0; b < 6; b++) {
                    int64_t w = tj * 6 + b;
                    if (w >= OW) break;
                    float *yo = y + ((n * OH + h) * OW + w) * O + o0;
                    for (int k = 0; k < WG_CB; k++) {
                        float s = 0;
                        for (int q = 0; q < 8; q++) s += t[a][q][k] * WG_AT[b][q];
                        yo[k] = s;
                    }
                }
            }
        }
    }
}

/* a positive integer from the environment, or 0 (MLX's env::get_var(name, 0)) */
static int64_t env_positive(const char *name) {
    const char *e = getenv(name);
    if (!e || !*e) return 0;
    char *endp;
    long long v = strtoll(e, &endp, 10);
    return *endp == 0 && v > 0 ? (int64_t)v : 0;
}

static int64_t physical_memory(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (int64_t)pages * size : 0;
}

/* The batch elements per step (MLX's winograd_batch_step), or 0 for the gemm
 * path. Sizes are counted in the input's itemsize, as MLX's. */
static int64_t wg_batch_step(const conv_plan *P, size_t isz) {
    int64_t th = (P->Out[0] + 5) / 6, tw = (P->Out[1] + 5) / 6, tiles = th * tw;
    int64_t ph = 6 * th + 2, pw = 6 * tw + 2;
    int64_t ws = env_positive("MLX_CONV_WINOGRAD_WORKING_SET");
    uint64_t working_set = ws > 0 ? (uint64_t)ws : (uint64_t)(physical_memory() / 4 * 3);
    uint64_t limit = working_set / 4 * 3;
    uint64_t used = isz * (uint64_t)(P->N * P->S[0] * P->S[1] * P->C + P->N * P->osp * P->O) +
                    64 * (uint64_t)(P->C * P->O) * isz;
    uint64_t budget = limit > used ? limit - used : 0;
    uint64_t per_n = (uint64_t)(ph * pw * P->C) * isz + 64 * (uint64_t)(tiles * (P->C + P->O)) * isz;
    int64_t safe = (int64_t)(budget / per_n);
    if (safe > P->N) safe = P->N;
    int64_t forced = env_positive("MLX_CONV_WINOGRAD_TILE_BATCH");
    if (forced > 0) return forced < safe ? forced : safe;
    if (safe < P->N && safe * tiles < 32) return 0; /* too few rows per product to pay */
    return safe;
}

static bool wg_eligible(const mk_prim *p, const conv_params *cp, const conv_plan *P) {
    const char *e = getenv("MKPY_CONV_ALGO"); /* direct or gemm forced */
    if ((e && (!strcmp(e, "direct") || !strcmp(e, "gemm"))) || mk_stream_device(p->stream) != MK_GPU || P->dbl ||
        cp->nd != 2 || cp->groups != 1 || cp->flip)
        return false;
    for (int d = 0; d < 2; d++)
        if (cp->stride[d] != 1 || cp->kdil[d] != 1 || cp->idil[d] != 1 || P->K[d] != 3) return false;
    return P->C % 32 == 0 && P->O % 32 == 0 && P->C + P->O >= 256 && P->N * P->S[0] * P->S[1] >= 4096;
}

static int run_winograd(conv_plan *P, const conv_params *cp, int64_t nstep) {
    wg_plan W = {P, (P->Out[0] + 5) / 6, (P->Out[1] + 5) / 6, 0, cp->pad_lo[0], cp->pad_lo[1], 0, nstep,
                 P->w, NULL, NULL, NULL};
    W.tiles = W.th * W.tw;
    int64_t C = P->C, O = P->O, rows = nstep * W.tiles;
    if (C > INT_MAX || O > INT_MAX || W.tiles > INT_MAX) {
        mk_error_set(MK_ERR_VALUE, "[conv] Convolution too large.");
        return -1;
    }
    W.U = malloc(sizeof(float) * 64 * (size_t)(C * O));
    W.V = malloc(sizeof(float) * 64 * (size_t)(rows * C));
    W.M = malloc(sizeof(float) * 64 * (size_t)(rows * O));
    int rc = -1;
    if (!W.U || !W.V || !W.M) {
        mk_nomem();
        goto done;
    }
    mk_parallel_for(O, 1, wg_filter, &W);
    for (W.n0 = 0; W.n0 < P->N; W.n0 += nstep) {
        int64_t step = P->N - W.n0 < nstep ? P->N - W.n0 : nstep;
        mk_parallel_for(step * W.tiles, 1, wg_input, &W);
        /* per element and transform point: the same gemm whatever the step */
        for (int64_t xi = 0; xi < 64; xi++)
            for (int64_t e = 0; e < step; e++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)W.tiles, (int)O, (int)C, 1.0f,
                            W.V + (xi * rows + e * W.tiles) * C, (int)C, W.U + xi * C * O, (int)O, 0.0f,
                            W.M + (xi * rows + e * W.tiles) * O, (int)O);
        mk_parallel_for(step * W.tiles, 1, wg_output, &W);
    }
    rc = 0;
done:
    free(W.U);
    free(W.V);
    free(W.M);
    return rc;
}

static int conv_eval(mk_prim *p, mk_array *const *inputs, mk_array *const *outputs) {
    const conv_params *cp = p->params;
    mk_array *in = inputs[0], *w = inputs[1], *out = outputs[0];
    if (mk_alloc_out(out) < 0) return -1;
    if (out->size == 0) return 0;
    conv_plan P = {0};
    int nd = P.nd = cp->nd;
    P.N = in->shape[0];
    P.C = in->shape[nd + 1];
    P.O = w->shape[0];
    P.G = cp->groups;
    P.Cg = w->shape[nd + 1];
    P.Og = P.O / P.G;
    P.T = 1;
    P.osp = 1;
    for (int d = 0; d < nd; d++) {
        P.S[d] = in->shape[d + 1];
        P.K[d] = w->shape[d + 1];
        P.Out[d] = out->shape[d + 1];
        P.T *= P.K[d];
        P.osp *= P.Out[d];
    }
    P.rows = P.N * P.osp;
    if (P.T * P.Cg == 0) { /* an empty reduction (no input channels or taps) */
        memset(mk_data(out), 0, (size_t)out->size * mk_dtype_size(out->dtype));
        return 0;
    }
    mk_dtype ct = out->dtype == MK_FLOAT64 ? MK_FLOAT64 : MK_FLOAT32;
    P.dbl = ct == MK_FLOAT64;
    size_t esz = P.dbl ? 8 : 4;
    mk_buffer *xo = NULL, *wo = NULL;
    void *wflip = NULL, *ybuf = NULL;
    int rc = -1;
    for (int d = 0; d < nd; d++) {
        P.tab[d] = malloc(sizeof(int) * (size_t)(P.Out[d] * P.K[d]));
        if (!P.tab[d]) {
            mk_nomem();
            goto done;
        }
        int64_t sd = dilate_size(P.S[d], cp->idil[d]);
        for (int64_t o = 0; o < P.Out[d]; o++)
            for (int64_t k = 0; k < P.K[d]; k++) {
                int64_t q = o * cp->stride[d] + k * cp->kdil[d] - cp->pad_lo[d];
                int v = -1;
                if (q >= 0 && q < sd && q % cp->idil[d] == 0) v = (int)(q / cp->idil[d]);
                P.tab[d][o * P.K[d] + k] = v;
            }
    }
    P.x = dense(in, ct, &xo);
    if (!P.x) goto done;
    const void *w0 = dense(w, ct, &wo);
    if (!w0) goto done;
    int64_t wg_step = wg_eligible(p, cp, &P) ? wg_batch_step(&P, mk_dtype_size(in->dtype)) : 0;
    bool gemm = !wg_step && conv_use_gemm(&P);
    /* weight with flipped taps, and for the direct loops transposed to (G, T, Cg, Og) */
    if (!wg_step && (cp->flip || !gemm)) {
        wflip = malloc((size_t)(P.O * P.T * P.Cg) * esz);
        if (!wflip) {
            mk_nomem();
            goto done;
        }
        for (int64_t o = 0; o < P.O; o++)
            for (int64_t t = 0; t < P.T; t++) {
                int64_t ts = cp->flip ? P.T - 1 - t : t; /* reversing every dim reverses the flat tap */
                const char *src = (const char *)w0 + (size_t)((o * P.T + ts) * P.Cg) * esz;
                if (gemm) {
                    memcpy((char *)wflip + (size_t)((o * P.T + t) * P.Cg) * esz, src, (size_t)P.Cg * esz);
                } else if (P.Cg == 1 && P.Og == 1) {
                    memcpy((char *)wflip + (size_t)(t * P.G + o) * esz, src, esz); /* (T, G) */
                } else {
                    int64_t g = o / P.Og, j = o % P.Og;
                    for (int64_t c = 0; c < P.Cg; c++)
                        memcpy((char *)wflip + (size_t)(((g * P.T + t) * P.Cg + c) * P.Og + j) * esz,
                               src + (size_t)c * esz, esz);
                }
            }
    }
    P.w = gemm && wflip ? wflip : w0;
    P.wt = wflip;
    if (out->dtype == ct) {
        P.y = mk_data(out);
    } else {
        ybuf = malloc((size_t)out->size * esz);
        if (!ybuf) {
            mk_nomem();
            goto done;
        }
        P.y = ybuf;
    }
    if (wg_step) {
        if (run_winograd(&P, cp, wg_step) < 0) goto done;
    } else if (gemm) {
        int64_t TC = P.T * P.Cg;
        P.block = (int64_t)(1 << 20) / (TC > 0 ? TC : 1);
        if (P.block < 64) P.block = 64;
        if (run_gemm(&P) < 0) goto done;
    } else {
        int64_t work = P.T * P.C * P.Og;
        int64_t grain = work >= 4096 ? 1 : 4096 / (work > 0 ? work : 1);
        if (P.Cg == 1 && P.Og == 1)
            mk_parallel_for(P.rows, grain, P.dbl ? depthwise_rows_double : depthwise_rows_float, &P);
        else
            mk_parallel_for(P.rows, grain, P.dbl ? direct_rows_double : direct_rows_float, &P);
    }
    if (ybuf) mk_cast_table[ct][out->dtype](ybuf, 1, mk_data(out), 1, out->size);
    rc = 0;
done:
    for (int d = 0; d < nd; d++) free(P.tab[d]);
    free(wflip);
    free(ybuf);
    if (xo) mk_buffer_decref(xo);
    if (wo) mk_buffer_decref(wo);
    return rc;
}

/* ------------------------------------------------------ transformation rules */

static mk_array *ar_swap(mk_arena *A, mk_array *x, int a, int b) { return x ? mk_ar_keep(A, mk_swapaxes(x, a, b)) : NULL; }

/* MLX's group_transpose: with groups, split the group out of dim gd, swap
 * a and b, merge again; else swap the first and last dims. */
static mk_array *group_transpose(mk_arena *A, mk_array *x, int groups, int gd, int a, int b) {
    if (!x) return NULL;
    if (groups <= 1) return ar_swap(A, x, 0, -1);
    int nd = x->ndim;
    if (gd < 0) gd += nd;
    int64_t shape[MK_MAX_NDIM];
    int k = 0;
    for (int d = 0; d < nd; d++) {
        if (d == gd) {
            shape[k++] = groups;
            shape[k++] = x->shape[d] / groups;
        } else {
            shape[k++] = x->shape[d];
        }
    }
    mk_array *r = ar_swap(A, mk_ar_reshape(A, x, k, shape), a, b);
    return r ? mk_ar_keep(A, mk_flatten(r, gd, gd + 1)) : NULL;
}

static mk_array *ar_conv(mk_arena *A, mk_array *in, mk_array *wt, int nd, const int *stride, const int *plo,
                         const int *phi, const int *kdil, const int *idil, int groups, bool flip) {
    if (!in || !wt) return NULL;
    mk_conv_args a = {0};
    a.nstride = a.npad_lo = a.npad_hi = a.nkdil = a.nidil = nd;
    for (int i = 0; i < nd; i++) {
        a.stride[i] = stride[i];
        a.pad_lo[i] = plo[i];
        a.pad_hi[i] = phi[i];
        a.kdil[i] = kdil[i];
        a.idil[i] = idil[i];
    }
    a.groups = groups;
    a.flip = flip;
    return mk_ar_keep(A, mk_conv_general(in, wt, &a));
}

static mk_array *ar_slice(mk_arena *A, mk_array *x, const int64_t *start, const int64_t *stop,
                          const int64_t *step) {
    return x ? mk_ar_keep(A, mk_slice(x, start, stop, step)) : NULL;
}

static int conv_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    const conv_params *cp = p->params;
    mk_array *in = p->inputs[0], *wt = p->inputs[1], *c = cots[0];
    if (!c) return 0;
    int nd = cp->nd;
    mk_arena A = {0};
    int rc = 0;
    if (want[0]) {
        /* the cotangent, dilated by the stride, convolved with the flipped
         * weight; padded so that the output covers the dilated input:
         * low ws - 1 - pad_lo, high is - os + pad_lo (negative padding
         * crops, inside conv_general) */
        int plo[3] = {0}, phi[3] = {0};
        for (int i = 0; i < nd; i++) {
            int64_t ws = dilate_size(wt->shape[1 + i], cp->kdil[i]);
            int64_t is = dilate_size(in->shape[1 + i], cp->idil[i]);
            int64_t os = dilate_size(c->shape[1 + i], cp->stride[i]);
            plo[i] = (int)(ws - cp->pad_lo[i] - 1);
            phi[i] = (int)(is - os + cp->pad_lo[i]);
        }
        mk_array *wtt = group_transpose(&A, wt, cp->groups, 0, 1, -1);
        mk_array *g = ar_conv(&A, c, wtt, nd, cp->idil, plo, phi, cp->kdil, cp->stride, cp->groups, !cp->flip);
        if (!(grads[0] = mk_ar_out(g))) rc = -1;
    }
    if (rc == 0 && want[1]) {
        int phi[3];
        for (int i = 0; i < nd; i++) {
            int64_t is = dilate_size(in->shape[1 + i], cp->idil[i]);
            int64_t os = dilate_size(c->shape[1 + i], cp->stride[i]);
            int64_t ws = dilate_size(wt->shape[1 + i], cp->kdil[i]);
            phi[i] = (int)(os - is + ws - cp->pad_lo[i] - 1);
        }
        mk_array *ct = ar_swap(&A, c, 0, -1);
        mk_array *it = group_transpose(&A, in, cp->groups, -1, 0, -1);
        mk_array *g = ar_conv(&A, it, ct, nd, cp->kdil, cp->pad_lo, phi, cp->stride, cp->idil, cp->groups, false);
        if (g && cp->flip) {
            int64_t start[MK_MAX_NDIM] = {0}, stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
            for (int d = 0; d < g->ndim; d++) {
                bool sp = d >= 1 && d < g->ndim - 1;
                start[d] = sp ? g->shape[d] - 1 : 0;
                stop[d] = sp ? -1 : g->shape[d];
                step[d] = sp ? -1 : 1;
            }
            g = ar_slice(&A, g, start, stop, step);
        }
        g = ar_swap(&A, g, 0, -1);
        if (!(grads[1] = mk_ar_out(g))) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

static int conv_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    const conv_params *cp = p->params;
    mk_arena A = {0};
    mk_array *r = NULL;
    if (tans[0]) r = mk_ar_keep(&A, conv_node(mk_ar_cast(&A, tans[0], p->inputs[0]->dtype), p->inputs[1], cp));
    if (tans[1]) {
        mk_array *t = mk_ar_keep(&A, conv_node(p->inputs[0], mk_ar_cast(&A, tans[1], p->inputs[1]->dtype), cp));
        r = r && t ? mk_ar_add(&A, r, t) : t;
    }
    out[0] = mk_ar_out(r);
    mk_ar_free(&A);
    return out[0] || (!tans[0] && !tans[1]) ? 0 : -1;
}

static mk_array *ar_conv_p(mk_arena *A, mk_array *in, mk_array *w, const conv_params *cp, int groups) {
    conv_params q = *cp;
    q.groups = groups;
    return in && w ? mk_ar_keep(A, conv_node(in, w, &q)) : NULL;
}

static int conv_vmap(mk_prim *p, mk_array *const *inputs, const int *axes, mk_array **outs, int *out_axes) {
    const conv_params *cp = p->params;
    mk_arena A = {0};
    mk_array *in = inputs[0], *w = inputs[1], *r = NULL;
    int oax = -1;
    int64_t sh[MK_MAX_NDIM];
    if (axes[0] >= 0 && axes[1] < 0) {
        if (axes[0] > 0) in = mk_ar_keep(&A, mk_moveaxis(in, axes[0], 0));
        int64_t B = in ? in->shape[0] : 0, N = in ? in->shape[1] : 0;
        mk_array *f = in ? mk_ar_keep(&A, mk_flatten(in, 0, 1)) : NULL;
        r = ar_conv_p(&A, f, w, cp, cp->groups);
        if (r) {
            sh[0] = B;
            sh[1] = N;
            for (int d = 1; d < r->ndim; d++) sh[d + 1] = r->shape[d];
            r = mk_ar_reshape(&A, r, r->ndim + 1, sh);
        }
        oax = 0;
    } else if (axes[0] < 0 && axes[1] >= 0) {
        if (axes[1] > 0) w = mk_ar_keep(&A, mk_moveaxis(w, axes[1], 0));
        int64_t B = w ? w->shape[0] : 0, O = w ? w->shape[1] : 0;
        mk_array *f = w ? mk_ar_keep(&A, mk_flatten(w, 0, 1)) : NULL;
        r = ar_conv_p(&A, in, f, cp, cp->groups);
        if (r) {
            for (int d = 0; d < r->ndim - 1; d++) sh[d] = r->shape[d];
            sh[r->ndim - 1] = B;
            sh[r->ndim] = O;
            r = mk_ar_reshape(&A, r, r->ndim + 1, sh);
            oax = r ? r->ndim - 2 : -1;
        }
    } else if (axes[0] >= 0 && axes[1] >= 0) {
        int64_t B = in->shape[axes[0]];
        in = mk_ar_keep(&A, mk_moveaxis(in, axes[0], -2));
        in = in ? mk_ar_keep(&A, mk_flatten(in, -2, -1)) : NULL;
        if (axes[1] > 0) w = mk_ar_keep(&A, mk_moveaxis(w, axes[1], 0));
        int64_t O = w ? w->shape[1] : 0;
        mk_array *f = w ? mk_ar_keep(&A, mk_flatten(w, 0, 1)) : NULL;
        r = ar_conv_p(&A, in, f, cp, cp->groups * (int)B);
        if (r) {
            for (int d = 0; d < r->ndim - 1; d++) sh[d] = r->shape[d];
            sh[r->ndim - 1] = B;
            sh[r->ndim] = O;
            r = mk_ar_reshape(&A, r, r->ndim + 1, sh);
            oax = r ? r->ndim - 2 : -1;
        }
    } else {
        r = ar_conv_p(&A, in, w, cp, cp->groups);
    }
    outs[0] = mk_ar_out(r);
    out_axes[0] = oax;
    mk_ar_free(&A);
    return outs[0] ? 0 : -1;
}

static const mk_opdef conv_def = {"Convolution", conv_eval, NULL, conv_vjp, conv_jvp, conv_vmap, false};

/* the node itself, after the checks (the output shape from the params) */
static mk_array *conv_node(mk_array *in, mk_array *wt, const conv_params *cp) {
    if (!in || !wt) return NULL;
    int64_t shape[MK_MAX_NDIM];
    int nd = cp->nd;
    shape[0] = in->shape[0];
    for (int i = 0; i < nd; i++) {
        int64_t kd = dilate_size(wt->shape[1 + i], cp->kdil[i]);
        int64_t id = dilate_size(in->shape[1 + i], cp->idil[i]);
        shape[1 + i] = (id + cp->pad_lo[i] + cp->pad_hi[i] - kd) / cp->stride[i] + 1;
    }
    shape[nd + 1] = wt->shape[0];
    conv_params *q = malloc(sizeof *q);
    if (!q) return mk_nomem();
    *q = *cp;
    mk_array *ins[2] = {in, wt};
    return mk_node(&conv_def, q, in->dtype, nd + 2, shape, 2, ins);
}

/* ------------------------------------------------------------ constructors */

static void fill_list(int n, const int *v, int nd, int dflt, int *out) {
    for (int i = 0; i < nd; i++) out[i] = n == 0 ? dflt : n == 1 ? v[0] : v[i];
}

mk_array *mk_conv_general(mk_array *in, mk_array *wt, const mk_conv_args *a) {
    char b1[512], b2[512], b3[512], b4[512];
    int groups = a->groups;
    if (groups != 1 && in->ndim != 3 && in->ndim != 4) {
        mk_error_set(MK_ERR_VALUE, "[conv] Can only handle groups != 1 in 1D or 2D convolutions.");
        return NULL;
    }
    int nd = in->ndim - 2;
    if (nd < 1 || nd > 3) {
        mk_error_set(MK_ERR_VALUE, "[conv] Only works for inputs with 1-3 spatial dimensions. The inputs must be in "
                                   "the format [N, ..., C_in]");
        return NULL;
    }
    if (!mk_is_float(in->dtype)) {
        mk_error_set(MK_ERR_VALUE,
                     "[conv] Invalid input array with type %s. Convolution currently only supports floating point types",
                     mk_dtype_name(in->dtype));
        return NULL;
    }
    if (wt->ndim != nd + 2) {
        mk_error_set(MK_ERR_VALUE,
                     "[conv] Invalid weight array with %d dimensions for %dD convolution. Expected an array with %d "
                     "dimensions following the format [C_out, ..., C_in].",
                     wt->ndim, nd, nd + 2);
        return NULL;
    }
    if (groups <= 0) {
        mk_error_set(MK_ERR_VALUE, "[conv] The number of groups must be positive. Got %d groups.", groups);
        return NULL;
    }
    if (in->shape[nd + 1] % groups != 0) {
        mk_error_set(MK_ERR_VALUE,
                     "[conv] The input channels must be divisible by the number of groups. Got input with shape %s and "
                     "%d groups.",
                     mk_shape_str(in->ndim, in->shape, b1, sizeof b1), groups);
        return NULL;
    }
    if (groups > 1 && wt->shape[0] % groups != 0) {
        mk_error_set(MK_ERR_VALUE,
                     "[conv] If groups > 1, the output channels must be divisible by the number of groups. Got %lld "
                     "output channels and %d groups.",
                     (long long)wt->shape[0], groups);
        return NULL;
    }
    if (in->shape[nd + 1] != groups * wt->shape[nd + 1]) {
        if (groups == 1)
            mk_error_set(MK_ERR_VALUE,
                         "[conv] Expect the input channels in the input and weight array to match but got shapes - "
                         "input: %s and weight: %s",
                         mk_shape_str(in->ndim, in->shape, b1, sizeof b1), mk_shape_str(wt->ndim, wt->shape, b2, sizeof b2));
        else
            mk_error_set(MK_ERR_VALUE,
                         "Given groups=%d and weights of shape %s, expected to have %lld input channels but got %lld "
                         "input channels instead.",
                         groups, mk_shape_str(wt->ndim, wt->shape, b1, sizeof b1),
                         (long long)(groups * wt->shape[nd + 1]), (long long)in->shape[nd + 1]);
        return NULL;
    }
    mk_dtype t = mk_promote(in->dtype, wt->dtype);
    int stride[MK_CONV_MAXLIST], plo[MK_CONV_MAXLIST], phi[MK_CONV_MAXLIST], kdil[MK_CONV_MAXLIST],
        idil[MK_CONV_MAXLIST];
    int ns = a->nstride <= 1 ? nd : a->nstride, npl = a->npad_lo <= 1 ? nd : a->npad_lo,
        nph = a->npad_hi <= 1 ? nd : a->npad_hi, nk = a->nkdil <= 1 ? nd : a->nkdil, ni = a->nidil <= 1 ? nd : a->nidil;
    fill_list(a->nstride, a->stride, ns, 1, stride);
    fill_list(a->npad_lo, a->pad_lo, npl, 0, plo);
    fill_list(a->npad_hi, a->pad_hi, nph, 0, phi);
    fill_list(a->nkdil, a->kdil, nk, 1, kdil);
    fill_list(a->nidil, a->idil, ni, 1, idil);
    /* negative padding slices the input (only the dims that exist in both lists) */
    int64_t start[MK_MAX_NDIM] = {0}, stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
    bool neg = false;
    for (int d = 0; d < in->ndim; d++) {
        stop[d] = in->shape[d];
        step[d] = 1;
    }
    for (int i = 0; i < nd; i++) {
        if (i < npl && plo[i] < 0) {
            start[i + 1] = -(int64_t)plo[i];
            plo[i] = 0;
            neg = true;
        }
        if (i < nph && phi[i] < 0) {
            stop[i + 1] += phi[i];
            phi[i] = 0;
            neg = true;
        }
    }
    /* conv_out_shape's checks */
    if (ns != nd) {
        mk_error_set(MK_ERR_VALUE, "[conv] Invalid strides %s for %dD convolution.", ivec(ns, stride, b1, sizeof b1), nd);
        return NULL;
    }
    if (npl != nd || nph != nd) {
        mk_error_set(MK_ERR_VALUE, "[conv] Invalid padding %s | %s for %dD convolution.", ivec(npl, plo, b1, sizeof b1),
                     ivec(nph, phi, b2, sizeof b2), nd);
        return NULL;
    }
    if (nk != nd) {
        mk_error_set(MK_ERR_VALUE, "[conv] Invalid kernel dilation %s for %dD convolution.",
                     ivec(nk, kdil, b1, sizeof b1), nd);
        return NULL;
    }
    if (ni != nd) {
        mk_error_set(MK_ERR_VALUE, "[conv] Invalid input dilation %s for %dD convolution.",
                     ivec(ni, idil, b1, sizeof b1), nd);
        return NULL;
    }
    for (int i = 0; i < nd; i++) {
        if (kdil[i] <= 0) {
            mk_error_set(MK_ERR_VALUE, "[conv] Kernel dilation sizes must be positive. Got kernel dilation %s.",
                         ivec(nd, kdil, b1, sizeof b1));
            return NULL;
        }
        if (idil[i] <= 0) {
            mk_error_set(MK_ERR_VALUE, "[conv] Input dilation sizes must be positive. Got input dilation %s.",
                         ivec(nd, idil, b1, sizeof b1));
            return NULL;
        }
        if (stride[i] <= 0) {
            mk_error_set(MK_ERR_VALUE, "[conv] Stride sizes must be positive. Got strides %s.",
                         ivec(nd, stride, b1, sizeof b1));
            return NULL;
        }
    }
    int64_t sliced[MK_MAX_NDIM];
    memcpy(sliced, in->shape, sizeof(int64_t) * (size_t)in->ndim);
    for (int i = 0; i < nd; i++) {
        sliced[i + 1] = stop[i + 1] - start[i + 1];
        if (sliced[i + 1] < 0) sliced[i + 1] = 0;
    }
    for (int i = 0; i < nd; i++) {
        int64_t kd = dilate_size(wt->shape[1 + i], kdil[i]);
        int64_t id = dilate_size(sliced[1 + i], idil[i]);
        int64_t num = id + (int64_t)plo[i] + phi[i] - kd;
        int64_t os = num / stride[i] + 1; /* C's truncation, as MLX */
        if (os <= 0) {
            mk_error_set(MK_ERR_VALUE,
                         "[conv] Spatial dimensions of input after padding cannot be smaller than weight spatial "
                         "dimensions. Got error at axis %d for input with shape %s, padding low %s, padding high %s, "
                         "and weight of shape %s.",
                         i + 1, mk_shape_str(in->ndim, sliced, b1, sizeof b1), ivec(nd, plo, b2, sizeof b2),
                         ivec(nd, phi, b3, sizeof b3), mk_shape_str(wt->ndim, wt->shape, b4, sizeof b4));
            return NULL;
        }
        if (os > INT_MAX) {
            mk_error_set(MK_ERR_VALUE, "[conv] Output size %lld does not fit in 32 bits.", (long long)os);
            return NULL;
        }
    }
    conv_params cp = {0};
    cp.nd = nd;
    for (int i = 0; i < nd; i++) {
        cp.stride[i] = stride[i];
        cp.pad_lo[i] = plo[i];
        cp.pad_hi[i] = phi[i];
        cp.kdil[i] = kdil[i];
        cp.idil[i] = idil[i];
    }
    cp.groups = groups;
    cp.flip = a->flip;
    mk_array *x = mk_as_dtype(in, t), *w = mk_as_dtype(wt, t), *r = NULL;
    if (x && neg) {
        mk_array *s = mk_slice(x, start, stop, step);
        mk_decref(x);
        x = s;
    }
    if (x && w) r = conv_node(x, w, &cp);
    mk_xdecref(x);
    mk_xdecref(w);
    return r;
}

mk_array *mk_conv_transpose(mk_array *in, mk_array *wt, int nd, const int *stride, const int *padding,
                            const int *dilation, const int *output_padding, int groups) {
    mk_conv_args a = {0};
    if (nd < 1 || nd > 3) {
        mk_error_set(MK_ERR_VALUE, "[conv] Only works for inputs with 1-3 spatial dimensions.");
        return NULL;
    }
    a.nstride = a.npad_lo = a.npad_hi = a.nkdil = a.nidil = nd;
    for (int i = 0; i < nd; i++) {
        /* (shapes of mismatched ranks read as 1: conv_general then reports the mismatch) */
        int64_t K = 1 + i < wt->ndim ? wt->shape[1 + i] : 1, S = 1 + i < in->ndim ? in->shape[1 + i] : 1;
        int64_t ws = 1 + (int64_t)dilation[i] * (K - 1);
        int64_t lo = ws - padding[i] - 1;
        int64_t in_size = (S - 1) * (int64_t)stride[i] - 2 * (int64_t)padding[i] + (int64_t)dilation[i] * (K - 1) + 1;
        int64_t out_size = 1 + (int64_t)stride[i] * (S - 1);
        int64_t hi = in_size - out_size + padding[i] + output_padding[i];
        if (lo < INT_MIN || lo > INT_MAX || hi < INT_MIN || hi > INT_MAX) {
            mk_error_set(MK_ERR_VALUE, "[conv] Padding does not fit in 32 bits.");
            return NULL;
        }
        a.stride[i] = 1;
        a.pad_lo[i] = (int)lo;
        a.pad_hi[i] = (int)hi;
        a.kdil[i] = dilation[i];
        a.idil[i] = stride[i];
    }
    a.groups = groups;
    a.flip = true;
    return mk_conv_general(in, wt, &a);
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_conv(const mk_prim *p, int *nd, int *stride, int *pad_lo, int *pad_hi, int *kdil, int *idil, int *groups,
                bool *flip) {
    if (p->op != &conv_def) return false;
    const conv_params *q = p->params;
    *nd = q->nd;
    for (int i = 0; i < q->nd; i++) {
        stride[i] = q->stride[i];
        pad_lo[i] = q->pad_lo[i];
        pad_hi[i] = q->pad_hi[i];
        kdil[i] = q->kdil[i];
        idil[i] = q->idil[i];
    }
    *groups = q->groups;
    *flip = q->flip;
    return true;
}
