/* Unary element-wise ops, astype and copy.
 *
 * Each op is one row of `specs`: how the input dtype is treated (rule) and one
 * kernel per dtype, generated from an expression in `x` written once per class
 * of types (float, complex, integer, bool). <tgmath.h> makes `exp(x)` pick
 * expf, exp or cexpf from the compute type. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "half_fast.h"
#include "iter.h"
#include "mlx_math.h"
#include "ops.h"
#include "transforms.h"
#include "compile.h"
#include "simd.h"
#include "types.h"

const char *const mk_unary_names[MK_NUNARY] = {
#define X(name) #name,
    MK_UNARY_OPS(X)
#undef X
};

typedef void (*unary_fn)(const void *in, int64_t is, void *out, int64_t n);

typedef enum {
    U_MATH,   /* integers and bool become float32 first */
    U_KEEP,   /* result has the input's dtype */
    U_PRED,   /* result is bool */
    U_LOGIC,  /* input becomes bool first, result is bool */
    U_INT,    /* integers and bool only */
    U_TOREAL, /* complex input gives float32 (abs, real, imag) */
} unary_rule;

typedef struct {
    unary_rule rule;
    unary_fn fn[MK_NDTYPES]; /* NULL: not supported for that dtype */
} unary_spec;

/* ------------------------------------------------------------ helpers */

/* exp, erf and erfinv are MLX's own float approximations (mlx_math.h), bit
 * for bit MLX's. MLX computes them in float for float64 too (its float64
 * results have float precision), and so does mkpy. */
static inline double exp_d(double x) { return (double)mk_mlx_expf((float)x); }
static inline double erf_d(double x) { return (double)mk_mlx_erff((float)x); }
#define MLX_EXP(x) _Generic((x), float: mk_mlx_expf, double: exp_d)(x)
#define MLX_ERF(x) _Generic((x), float: mk_mlx_erff, double: erf_d)(x)
/* MLX's sigmoid: y = 1 / (1 + exp(|x|)), then y for x < 0 and 1 - y
 * otherwise; float16/bfloat16 round the exp to their type first (MLX's exp
 * returns the array's type). */
static inline float sig_f(float e, float x) {
    float y = 1.0f / (1.0f + e);
    return x < 0 ? y : 1.0f - y;
}
static inline double sig_d(double e, double x) {
    double y = 1.0 / (1.0 + e);
    return x < 0 ? y : 1.0 - y;
}
#define SIGMOID_OF(e, x) _Generic((x), float: sig_f, double: sig_d)(e, x)
#define ABS_R(x) ((x) < 0 ? -(x) : (x))
#define ROUND_ST(v)                                                                                    \
    _Generic((st){0}, mk_f16: mk_f16_to_f32(mk_f32_to_f16((float)(v))),                                 \
             mk_bf16: mk_bf16_to_f32(mk_f32_to_bf16((float)(v))), default: (v))
/* float32 tanh (float16/bfloat16 compute in float) is the vectorisable
 * mk_tanhf, within 1 ulp of the correctly rounded result */
static inline double tanh_d(double x) { return tanh(x); }
#define TANH(x) _Generic((x), float: mk_tanhf, double: tanh_d)(x)

static inline double erfinv_d(double y) { return (double)mk_mlx_erfinvf((float)y); }

#define ERFINV(x) _Generic((x), float: mk_mlx_erfinvf, double: erfinv_d)(x)
/* MLX's (x > 0) - (x < 0): nan and -0 give 0 */
#define SIGN_F(x) ((rt)(((x) > 0) - ((x) < 0)))
/* x / |x|, 0 at 0; a non-finite |x| gives nan+nanj, as MLX's complex division */
static inline mk_c64 sign_c(mk_c64 x) {
    float a = cabsf(x);
    if (a == 0) return 0;
    if (!isfinite(a)) return CMPLXF(NAN, NAN);
    return CMPLXF(crealf(x) / a, cimagf(x) / a);
}
#define ROUND_C(x) CMPLXF(rintf(crealf(x)), rintf(cimagf(x)))
/* A double constant as the op's storage type sees it: float16 and bfloat16
 * round it first, as MLX multiplies by a constant of the array's dtype. */
#define SCONST(v)                                                                                      \
    _Generic((st){0}, mk_f16: mk_f16_to_f32(mk_f32_to_f16((float)(v))),                                 \
             mk_bf16: mk_bf16_to_f32(mk_f32_to_bf16((float)(v))), default: (rt)(v))
#define NEG_I(x) ((st)(0 - (uint64_t)(x)))
#define ABS_I(x) ((x) < 0 ? NEG_I(x) : (x))
#define SIGN_I(x) ((x) > 0 ? 1 : (x) < 0 ? -1 : 0)
#define PI_D 3.14159265358979323846

/* ------------------------------------------------------- kernel makers */

/* out[i] = EXPR, x = in[i] loaded as R, out of storage type OS stored by STORE_os */
#define UKERNEL(op, s, S, R, os, OS, EXPR) UKERNEL_A(MK_SIMD_CLONES, op, s, S, R, os, OS, EXPR)
#define UKERNEL_A(ATTR, op, s, S, R, os, OS, EXPR)                                                     \
    ATTR(static void, op##_##s, (const void *in_, int64_t is, void *out_, int64_t n), (in_, is, out_, n), { \
        typedef S st;                                                                                  \
        typedef R rt;                                                                                  \
        (void)sizeof(rt);                                                                              \
        const st *in = in_;                                                                            \
        OS *out = out_;                                                                                \
        if (is == 1) {                                                                                 \
            for (int64_t i = 0; i < n; i++) {                                                          \
                R x = MK_LOAD_##s(&in[i]);                                                             \
                MK_STORE_##os(&out[i], (EXPR));                                                        \
            }                                                                                          \
        } else {                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                          \
                R x = MK_LOAD_##s(&in[i * is]);                                                        \
                MK_STORE_##os(&out[i], (EXPR));                                                        \
            }                                                                                          \
        }                                                                                              \
    })

/* Same-type kernels for each class; EXPR may use S (storage) and R. */
#define K_SAME(E, s, S, R, op, EXPR) UKERNEL(op, s, S, R, s, S, EXPR)
/* compute-bound float kernels also get an AVX-512 clone (simd.h) */
#define K_SAME_512(E, s, S, R, op, EXPR) UKERNEL_A(MK_SIMD_CLONES_512, op, s, S, R, s, S, EXPR)
#define K_BOOL_OUT(E, s, S, R, op, EXPR) UKERNEL(op, s, S, R, b8, bool, EXPR)
#define K_F32_OUT(E, s, S, R, op, EXPR) UKERNEL(op, s, S, R, f32, float, EXPR)
#define ENTRY(E, s, S, R, op, unused) [E] = op##_##s,

/* An op over floats (F) and optionally complex (C), integers (I) and bool (B). */
#define OP_F(op, F) MK_FLOAT_TYPES_2(K_SAME, op, F)
#define OP_F512(op, F) MK_FLOAT_TYPES_2(K_SAME_512, op, F)
#define OP_C(op, C) MK_COMPLEX_TYPES_2(K_SAME, op, C)
#define OP_I(op, I) OP_U(op, I) OP_S(op, I)
#define OP_U(op, I) MK_UINT_TYPES_2(K_SAME, op, I)
#define OP_S(op, I) MK_SINT_TYPES_2(K_SAME, op, I)
#define OP_B(op, B) MK_BOOL_TYPES_2(K_SAME, op, B)
#define ROW_F(op) MK_FLOAT_TYPES_2(ENTRY, op, _)
#define ROW_C(op) MK_COMPLEX_TYPES_2(ENTRY, op, _)
#define ROW_I(op) MK_UINT_TYPES_2(ENTRY, op, _) MK_SINT_TYPES_2(ENTRY, op, _)
#define ROW_B(op) MK_BOOL_TYPES_2(ENTRY, op, _)

/* math ops: float and complex */
#define MATH_FC(op, F, C) OP_F(op, F) OP_C(op, C)
MATH_FC(sqrt, sqrt(x), csqrtf(x))
MATH_FC(rsqrt, 1 / sqrt(x), 1 / csqrtf(x))
MATH_FC(reciprocal, 1 / x, 1 / x)
OP_F512(exp, MLX_EXP(x))
OP_C(exp, cexpf(x))
MATH_FC(log, log(x), clogf(x))
MATH_FC(log1p, log1p(x), clogf(1 + x))
MATH_FC(log2, log2(x), clogf(x) / (float)M_LN2)
MATH_FC(log10, log10(x), clogf(x) / (float)M_LN10)
/* sin and cos: MLX's approximation (mlx_math.h) for every float dtype, in
 * float. The vectorised loop computes it for every element and notes any
 * beyond its range (|x| > 2^23, inf, nan), storing those elements unchanged
 * (same dtype: exact); a second pass, only then, gives them libm's value, as
 * MLX's, reading them back from the output, whose in-range elements are sines
 * and cosines (in [-1, 1]). So the output may be the input's buffer (donation). */
#define SINCOS_BODY(s, R, SINE, IDX)                                                                   \
    for (int64_t i = 0; i < n; i++) {                                                                  \
        R x = MK_LOAD_##s(&in[IDX]);                                                                   \
        R ax = fabs(x);                                                                                \
        int out_of_range = !(ax <= MK_MLX_SINCOS_MAX);                                                 \
        big |= out_of_range;                                                                           \
        R v = (R)mk_mlx_sincos_core((float)ax, x < 0, SINE);                                           \
        MK_STORE_##s(&out[i], out_of_range ? x : v);                                                   \
    }
#define K_SINCOS(E, s, S, R, op, SINE)                                                                 \
    MK_SIMD_CLONES_512(static void, op##_##s, (const void *in_, int64_t is, void *out_, int64_t n), (in_, is, out_, n), {     \
        const S *in = in_;                                                                             \
        S *out = out_;                                                                                 \
        int big = 0;                                                                                   \
        if (is == 1) {                                                                                 \
            SINCOS_BODY(s, R, SINE, i)                                                                 \
        } else {                                                                                       \
            SINCOS_BODY(s, R, SINE, i * is)                                                            \
        }                                                                                              \
        for (int64_t i = 0; big && i < n; i++) {                                                       \
            R x = MK_LOAD_##s(&out[i]);                                                                \
            if (!(fabs(x) <= MK_MLX_SINCOS_MAX)) MK_STORE_##s(&out[i], (R)mk_mlx_sincos_big((float)x, SINE)); \
        }                                                                                              \
    })
MK_FLOAT_TYPES_2(K_SINCOS, sin, 1)
MK_FLOAT_TYPES_2(K_SINCOS, cos, 0)
OP_C(sin, csinf(x))
OP_C(cos, ccosf(x))
MATH_FC(tan, tan(x), ctanf(x))
MATH_FC(arcsin, asin(x), casinf(x))
MATH_FC(arccos, acos(x), cacosf(x))
MATH_FC(arctan, atan(x), catanf(x))
MATH_FC(sinh, sinh(x), csinhf(x))
MATH_FC(cosh, cosh(x), ccoshf(x))
OP_F512(tanh, TANH(x))
OP_C(tanh, ctanhf(x))
MATH_FC(arcsinh, asinh(x), casinhf(x))
MATH_FC(arccosh, acosh(x), cacoshf(x))
MATH_FC(arctanh, atanh(x), catanhf(x))
OP_F(expm1, expm1(x))
OP_F512(sigmoid, SIGMOID_OF(ROUND_ST(MLX_EXP(ABS_R(x))), x))
OP_F512(erf, MLX_ERF(x))
OP_F(erfinv, ERFINV(x))
OP_F(degrees, x * SCONST(180.0 / PI_D))
OP_F(radians, x * SCONST(PI_D / 180.0))
/* a full complex product, as MLX multiplies by a complex constant */
OP_C(degrees, x * CMPLXF((float)(180.0 / PI_D), 0.0f))
OP_C(radians, x * CMPLXF((float)(PI_D / 180.0), 0.0f))

/* ops that keep the dtype, ints included */
OP_F(negative, -x)
OP_C(negative, -x)
OP_I(negative, NEG_I(x))
OP_F(abs, fabs(x))
OP_S(abs, ABS_I(x))
OP_U(abs, x)
OP_B(abs, x)
MK_COMPLEX_TYPES_2(K_F32_OUT, abs, cabsf(x))
OP_F(sign, SIGN_F(x))
OP_C(sign, sign_c(x))
OP_S(sign, SIGN_I(x))
OP_U(sign, x > 0)
OP_B(sign, x)
OP_F(square, x * x)
OP_C(square, x * x)
OP_I(square, (st)((uint64_t)x * (uint64_t)x))
OP_B(square, x)
OP_F(floor, floor(x))
OP_I(floor, x)
OP_B(floor, x)
OP_F(ceil, ceil(x))
OP_I(ceil, x)
OP_B(ceil, x)
OP_C(conjugate, conjf(x))
/* real, imag and conjugate of a real array: itself, zeros, itself (MLX) */
OP_F(conjugate, x)
OP_I(conjugate, x)
OP_B(conjugate, x)
OP_F(real, x)
OP_I(real, x)
OP_B(real, x)
OP_F(imag, ((void)x, (rt)0))
OP_I(imag, ((void)x, (rt)0))
OP_B(imag, ((void)x, false))
OP_F(stop_gradient, x)
OP_C(stop_gradient, x)
OP_I(stop_gradient, x)
OP_B(stop_gradient, x)
MK_COMPLEX_TYPES_2(K_F32_OUT, real, crealf(x))
MK_COMPLEX_TYPES_2(K_F32_OUT, imag, cimagf(x))
OP_I(bitwise_invert, (st) ~(uint64_t)x)
OP_B(bitwise_invert, !x)

/* predicates */
#define PRED(op, F, C, I)                                                                              \
    MK_FLOAT_TYPES_2(K_BOOL_OUT, op, F)                                                                \
    MK_COMPLEX_TYPES_2(K_BOOL_OUT, op, C)                                                              \
    MK_UINT_TYPES_2(K_BOOL_OUT, op, I) MK_SINT_TYPES_2(K_BOOL_OUT, op, I)                                                                  \
    MK_BOOL_TYPES_2(K_BOOL_OUT, op, I)
PRED(isnan, isnan(x), isnan(crealf(x)) || isnan(cimagf(x)), ((void)x, false))
PRED(isinf, isinf(x), isinf(crealf(x)) || isinf(cimagf(x)), ((void)x, false))
PRED(isfinite, isfinite(x), isfinite(crealf(x)) && isfinite(cimagf(x)), ((void)x, true))
/* complex: equal to inf+0j (-inf+0j), as MLX's equal(x, inf) */
PRED(isposinf, isinf(x) && x > 0, crealf(x) == INFINITY && cimagf(x) == 0, ((void)x, false))
PRED(isneginf, isinf(x) && x < 0, crealf(x) == -INFINITY && cimagf(x) == 0, ((void)x, false))
MK_BOOL_TYPES_2(K_BOOL_OUT, logical_not, !x)

/* round: half to even, with MLX's `decimals` handled by the caller */
OP_F(round, rint(x))
OP_C(round, ROUND_C(x))
OP_I(round, x)
OP_B(round, x)

#define ROW_FC(op) ROW_F(op) ROW_C(op)
#define ROW_ALL(op) ROW_F(op) ROW_C(op) ROW_I(op) ROW_B(op)
#define ROW_PRED(op) ROW_F(op) ROW_C(op) ROW_I(op) ROW_B(op)

static const unary_spec specs[MK_NUNARY] = {
    [MK_UNARY_abs] = {U_TOREAL, {ROW_ALL(abs)}},
    [MK_UNARY_negative] = {U_KEEP, {ROW_F(negative) ROW_C(negative) ROW_I(negative)}},
    [MK_UNARY_sign] = {U_KEEP, {ROW_ALL(sign)}},
    [MK_UNARY_square] = {U_KEEP, {ROW_ALL(square)}},
    [MK_UNARY_sqrt] = {U_MATH, {ROW_FC(sqrt)}},
    [MK_UNARY_rsqrt] = {U_MATH, {ROW_FC(rsqrt)}},
    [MK_UNARY_reciprocal] = {U_MATH, {ROW_FC(reciprocal)}},
    [MK_UNARY_exp] = {U_MATH, {ROW_FC(exp)}},
    [MK_UNARY_expm1] = {U_MATH, {ROW_F(expm1)}},
    [MK_UNARY_log] = {U_MATH, {ROW_FC(log)}},
    [MK_UNARY_log1p] = {U_MATH, {ROW_FC(log1p)}},
    [MK_UNARY_log2] = {U_MATH, {ROW_FC(log2)}},
    [MK_UNARY_log10] = {U_MATH, {ROW_FC(log10)}},
    [MK_UNARY_sin] = {U_MATH, {ROW_FC(sin)}},
    [MK_UNARY_cos] = {U_MATH, {ROW_FC(cos)}},
    [MK_UNARY_tan] = {U_MATH, {ROW_FC(tan)}},
    [MK_UNARY_arcsin] = {U_MATH, {ROW_FC(arcsin)}},
    [MK_UNARY_arccos] = {U_MATH, {ROW_FC(arccos)}},
    [MK_UNARY_arctan] = {U_MATH, {ROW_FC(arctan)}},
    [MK_UNARY_sinh] = {U_MATH, {ROW_FC(sinh)}},
    [MK_UNARY_cosh] = {U_MATH, {ROW_FC(cosh)}},
    [MK_UNARY_tanh] = {U_MATH, {ROW_FC(tanh)}},
    [MK_UNARY_arcsinh] = {U_MATH, {ROW_FC(arcsinh)}},
    [MK_UNARY_arccosh] = {U_MATH, {ROW_FC(arccosh)}},
    [MK_UNARY_arctanh] = {U_MATH, {ROW_FC(arctanh)}},
    [MK_UNARY_sigmoid] = {U_MATH, {ROW_F(sigmoid)}},
    [MK_UNARY_erf] = {U_MATH, {ROW_F(erf)}},
    [MK_UNARY_erfinv] = {U_MATH, {ROW_F(erfinv)}},
    [MK_UNARY_floor] = {U_KEEP, {ROW_F(floor) ROW_I(floor) ROW_B(floor)}},
    [MK_UNARY_ceil] = {U_KEEP, {ROW_F(ceil) ROW_I(ceil) ROW_B(ceil)}},
    [MK_UNARY_isnan] = {U_PRED, {ROW_PRED(isnan)}},
    [MK_UNARY_isinf] = {U_PRED, {ROW_PRED(isinf)}},
    [MK_UNARY_isfinite] = {U_PRED, {ROW_PRED(isfinite)}},
    [MK_UNARY_isposinf] = {U_PRED, {ROW_PRED(isposinf)}},
    [MK_UNARY_isneginf] = {U_PRED, {ROW_PRED(isneginf)}},
    [MK_UNARY_logical_not] = {U_LOGIC, {ROW_B(logical_not)}},
    [MK_UNARY_bitwise_invert] = {U_INT, {ROW_I(bitwise_invert) ROW_B(bitwise_invert)}},
    [MK_UNARY_real] = {U_TOREAL, {ROW_ALL(real)}},
    [MK_UNARY_imag] = {U_TOREAL, {ROW_ALL(imag)}},
    [MK_UNARY_conjugate] = {U_KEEP, {ROW_ALL(conjugate)}},
    [MK_UNARY_degrees] = {U_MATH, {ROW_FC(degrees)}},
    [MK_UNARY_radians] = {U_MATH, {ROW_FC(radians)}},
    [MK_UNARY_stop_gradient] = {U_KEEP, {ROW_ALL(stop_gradient)}},
    [MK_UNARY_round] = {U_KEEP, {ROW_ALL(round)}},
};

/* ------------------------------------------------------------ evaluation */

typedef struct {
    unary_fn fn;
    const char *in;
    char *out;
    size_t isz, osz;
    bool exp16; /* float16 exp: mk_f16_exp_run for dense rows */
} unary_ctx;

static void unary_rows(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    unary_ctx *u = c;
    u->fn(u->in + off[1] * u->isz, st[1], u->out + off[0] * u->osz, n);
}

/* Runs a per-row kernel reading `in` into the fresh row-contiguous `out`. */
static void run_unary(unary_fn fn, const mk_array *in, const mk_array *out) {
    unary_ctx u = {fn, mk_data(in), mk_data(out), mk_dtype_size(in->dtype), mk_dtype_size(out->dtype)};
    const int64_t *strides[2] = {out->strides, in->strides};
    mk_iter it;
    mk_iter_init(&it, out->ndim, out->shape, 2, strides);
    mk_iter_run(&it, MK_GRAIN, unary_rows, &u);
}

/* float16 with F16C (half_fast.h): runs of 512 are widened to float32, go
 * through the float32 kernel, and are narrowed (or written as bool). The
 * float16 kernels compute in float and round once when storing, so this
 * gives their bits; ops that round inside (sigmoid's exp, the constants of
 * degrees and radians) keep their own kernel. */
#define F16_RUN 512

static void unary_rows_f16c(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    unary_ctx *u = c;
    const mk_f16 *in = (const mk_f16 *)u->in + off[1];
    char *out = u->out + off[0] * u->osz;
    if (u->exp16 && st[1] == 1 && mk_f16_exp_run(in, (mk_f16 *)out, n)) return;
    float t[F16_RUN];
    for (int64_t k = 0; k < n; k += F16_RUN) {
        int64_t m = n - k < F16_RUN ? n - k : F16_RUN;
        mk_f16_to_f32_run(in + k * st[1], st[1], t, m);
        if (u->osz == 2) {
            float r[F16_RUN]; /* sin and cos read their input after writing */
            u->fn(t, 1, r, m);
            mk_f32_to_f16_run(r, (mk_f16 *)out + k, m);
        } else {
            u->fn(t, 1, out + k * u->osz, m);
        }
    }
}

static bool unary_f16c(mk_unary_op op, const mk_array *in, const mk_array *out) {
    return in->dtype == MK_FLOAT16 && (out->dtype == MK_FLOAT16 || out->dtype == MK_BOOL) && specs[op].fn[MK_FLOAT32] &&
           op != MK_UNARY_sigmoid && op != MK_UNARY_degrees && op != MK_UNARY_radians && mk_f16c();
}

static int unary_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_unary_op op = *(mk_unary_op *)p->params;
    const unary_spec *spec = &specs[op];
    if (mk_donate_or_alloc(p, out[0], in[0]) < 0) return -1;
    if (unary_f16c(op, in[0], out[0])) {
        unary_ctx u = {spec->fn[MK_FLOAT32], mk_data(in[0]), mk_data(out[0]), 2, mk_dtype_size(out[0]->dtype),
                       op == MK_UNARY_exp};
        const int64_t *strides[2] = {out[0]->strides, in[0]->strides};
        mk_iter it;
        mk_iter_init(&it, out[0]->ndim, out[0]->shape, 2, strides);
        mk_iter_run(&it, MK_GRAIN, unary_rows_f16c, &u);
        return 0;
    }
    run_unary(spec->fn[in[0]->dtype], in[0], out[0]);
    return 0;
}

static int unary_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int unary_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int unary_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static void unary_name(const mk_prim *p, char *buf, size_t n) {
    mk_camel_name(mk_unary_names[*(const mk_unary_op *)p->params], buf, n);
}
static const mk_opdef unary_def = {"unary", unary_eval, NULL, unary_vjp, unary_jvp, unary_vmap, false,
                                   true, sizeof(mk_unary_op), NULL, unary_name, .cheap = true};
/* stop_gradient: the identity, where differentiation stops (nondiff) */
static const mk_opdef stop_gradient_def = {"StopGradient", unary_eval, NULL, NULL, NULL, unary_vmap, true,
                                           true, sizeof(mk_unary_op), NULL, NULL};

mk_array *mk_unary(mk_unary_op op, mk_array *x) {
    const unary_spec *spec = &specs[op];
    const char *name = mk_unary_names[op];
    mk_dtype t = x->dtype;
    mk_dtype in_t = t, out_t = t;
    switch (spec->rule) {
    case U_MATH: in_t = out_t = mk_to_float(t); break;
    case U_KEEP: break;
    case U_PRED: out_t = MK_BOOL; break;
    case U_LOGIC: in_t = out_t = MK_BOOL; break;
    case U_INT:
        if (!mk_is_integral(t) && t != MK_BOOL) {
            mk_error_set(MK_ERR_VALUE, "[%s] Bitwise inverse only allowed on integer types.", name);
            return NULL;
        }
        break;
    case U_TOREAL:
        if (t == MK_COMPLEX64) out_t = MK_FLOAT32;
        break;
    }
    if (!spec->fn[in_t]) {
        if (op == MK_UNARY_negative && t == MK_BOOL)
            mk_error_set(MK_ERR_VALUE, "[negative] Not supported for bool, use logical_not instead.");
        else
            mk_error_set(MK_ERR_VALUE, "[%s] Not supported for %s.", name, mk_dtype_name(in_t));
        return NULL;
    }
    mk_array *xin = mk_as_dtype(x, in_t);
    if (!xin) return NULL;
    mk_unary_op *params = malloc(sizeof *params);
    mk_array *out = NULL;
    if (params) {
        *params = op;
        out = mk_node(op == MK_UNARY_stop_gradient ? &stop_gradient_def : &unary_def, params, out_t, x->ndim,
                      x->shape, 1, &xin);
    } else {
        mk_nomem();
    }
    mk_decref(xin);
    return out;
}

/* ---------------------------------------------------------- astype, copy */

static void cast_rows(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    const mk_cast_fn *fn = ((void **)c)[0];
    const mk_array *in = ((void **)c)[1], *out = ((void **)c)[2];
    (*fn)((const char *)mk_data(in) + off[1] * mk_dtype_size(in->dtype), st[1],
          (char *)mk_data(out) + off[0] * mk_dtype_size(out->dtype), 1, n);
}

/* float16 <-> float32 casts by F16C runs (half_fast.h) */
static void cast_rows_f16c(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    const mk_array *in = ((void **)c)[1], *out = ((void **)c)[2];
    if (in->dtype == MK_FLOAT16) {
        mk_f16_to_f32_run((const mk_f16 *)mk_data(in) + off[1], st[1], (float *)mk_data(out) + off[0], n);
    } else if (st[1] == 1) {
        mk_f32_to_f16_run((const float *)mk_data(in) + off[1], (mk_f16 *)mk_data(out) + off[0], n);
    } else {
        const float *src = (const float *)mk_data(in) + off[1];
        float t[F16_RUN];
        for (int64_t k = 0; k < n; k += F16_RUN) {
            int64_t m = n - k < F16_RUN ? n - k : F16_RUN;
            for (int64_t i = 0; i < m; i++) t[i] = src[(k + i) * st[1]];
            mk_f32_to_f16_run(t, (mk_f16 *)mk_data(out) + off[0] + k, m);
        }
    }
}

static int astype_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    if (mk_donate_or_alloc(p, out[0], in[0]) < 0) return -1;
    if (((in[0]->dtype == MK_FLOAT16 && out[0]->dtype == MK_FLOAT32) ||
         (in[0]->dtype == MK_FLOAT32 && out[0]->dtype == MK_FLOAT16)) && mk_f16c()) {
        void *ctx[3] = {NULL, in[0], out[0]};
        const int64_t *strides[2] = {out[0]->strides, in[0]->strides};
        mk_iter it;
        mk_iter_init(&it, out[0]->ndim, out[0]->shape, 2, strides);
        mk_iter_run(&it, MK_GRAIN, cast_rows_f16c, ctx);
        return 0;
    }
    mk_cast_fn fn = mk_cast_table[in[0]->dtype][out[0]->dtype];
    void *ctx[3] = {&fn, in[0], out[0]};
    const int64_t *strides[2] = {out[0]->strides, in[0]->strides};
    mk_iter it;
    mk_iter_init(&it, out[0]->ndim, out[0]->shape, 2, strides);
    mk_iter_run(&it, MK_GRAIN, cast_rows, ctx);
    return 0;
}

static int astype_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int astype_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int astype_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static void astype_name(const mk_prim *p, char *buf, size_t n) {
    (void)p;
    snprintf(buf, n, "AsType");
}
static const mk_opdef astype_def = {"astype", astype_eval, NULL, astype_vjp, astype_jvp, astype_vmap, false,
                                    true, 0, NULL, astype_name, .cheap = true};

mk_array *mk_astype(mk_array *x, mk_dtype dtype) {
    return mk_node(&astype_def, NULL, dtype, x->ndim, x->shape, 1, &x);
}

mk_array *mk_copy(mk_array *x) { return mk_astype(x, x->dtype); }

mk_array *mk_as_dtype(mk_array *x, mk_dtype dtype) {
    if (x->dtype == dtype) {
        mk_incref(x);
        return x;
    }
    return mk_astype(x, dtype);
}

/* ---------------------------------------------------------- transformation rules */

/* The derivative of a unary op at x (out: its value there, or NULL).
 * Returns 0 with *d set, 1 when the derivative is zero (no gradient), or -1. */
static int unary_deriv(mk_arena *A, mk_unary_op op, mk_array *x, mk_array *out, mk_array **d) {
    *d = NULL;
#define OUT() (out ? out : (out = mk_ar_un(A, op, x)))
#define ONE(like) mk_ar_scalar(A, like, 1.0)
    switch (op) {
    case MK_UNARY_abs: *d = mk_ar_un(A, MK_UNARY_sign, x); break;
    case MK_UNARY_negative: *d = mk_ar_scalar(A, x, -1.0); break;
    case MK_UNARY_square: *d = mk_ar_scale(A, x, 2.0); break;
    case MK_UNARY_sqrt: *d = mk_ar_div(A, mk_ar_scalar(A, x, 0.5), OUT()); break;
    case MK_UNARY_rsqrt: *d = mk_ar_div(A, mk_ar_scale(A, OUT(), -0.5), x); break;
    case MK_UNARY_reciprocal: *d = mk_ar_neg(A, mk_ar_un(A, MK_UNARY_square, OUT())); break;
    case MK_UNARY_exp: *d = OUT(); break;
    case MK_UNARY_expm1: *d = mk_ar_un(A, MK_UNARY_exp, x); break;
    case MK_UNARY_log: *d = mk_ar_un(A, MK_UNARY_reciprocal, x); break;
    case MK_UNARY_log1p: *d = mk_ar_un(A, MK_UNARY_reciprocal, mk_ar_add(A, x, ONE(x))); break;
    case MK_UNARY_log2: *d = mk_ar_un(A, MK_UNARY_reciprocal, mk_ar_scale(A, x, 0.69314718055994530942)); break;
    case MK_UNARY_log10: *d = mk_ar_un(A, MK_UNARY_reciprocal, mk_ar_scale(A, x, 2.30258509299404568402)); break;
    case MK_UNARY_sin: *d = mk_ar_un(A, MK_UNARY_cos, x); break;
    case MK_UNARY_cos: *d = mk_ar_neg(A, mk_ar_un(A, MK_UNARY_sin, x)); break;
    case MK_UNARY_tan: *d = mk_ar_un(A, MK_UNARY_reciprocal, mk_ar_un(A, MK_UNARY_square, mk_ar_un(A, MK_UNARY_cos, x))); break;
    case MK_UNARY_arcsin:
    case MK_UNARY_arccos: {
        mk_array *r = mk_ar_un(A, MK_UNARY_rsqrt, mk_ar_sub(A, ONE(x), mk_ar_un(A, MK_UNARY_square, x)));
        *d = op == MK_UNARY_arcsin ? r : mk_ar_neg(A, r);
        break;
    }
    case MK_UNARY_arctan: *d = mk_ar_un(A, MK_UNARY_reciprocal, mk_ar_add(A, ONE(x), mk_ar_un(A, MK_UNARY_square, x))); break;
    case MK_UNARY_sinh: *d = mk_ar_un(A, MK_UNARY_cosh, x); break;
    case MK_UNARY_cosh: *d = mk_ar_un(A, MK_UNARY_sinh, x); break;
    case MK_UNARY_tanh: *d = mk_ar_sub(A, ONE(x), mk_ar_un(A, MK_UNARY_square, OUT())); break;
    case MK_UNARY_arcsinh: *d = mk_ar_un(A, MK_UNARY_rsqrt, mk_ar_add(A, mk_ar_un(A, MK_UNARY_square, x), ONE(x))); break;
    case MK_UNARY_arccosh: *d = mk_ar_un(A, MK_UNARY_rsqrt, mk_ar_sub(A, mk_ar_un(A, MK_UNARY_square, x), ONE(x))); break;
    case MK_UNARY_arctanh: *d = mk_ar_un(A, MK_UNARY_reciprocal, mk_ar_sub(A, ONE(x), mk_ar_un(A, MK_UNARY_square, x))); break;
    case MK_UNARY_sigmoid: {
        mk_array *o = OUT();
        *d = mk_ar_mul(A, o, mk_ar_sub(A, ONE(x), o));
        break;
    }
    case MK_UNARY_erf:
        *d = mk_ar_scale(A, mk_ar_un(A, MK_UNARY_exp, mk_ar_neg(A, mk_ar_un(A, MK_UNARY_square, x))),
                         1.12837916709551257390);
        break;
    case MK_UNARY_erfinv:
        *d = mk_ar_scale(A, mk_ar_un(A, MK_UNARY_exp, mk_ar_un(A, MK_UNARY_square, OUT())), 0.88622692545275801365);
        break;
    case MK_UNARY_degrees: *d = mk_ar_scalar(A, x, 57.29577951308232087680); break;
    case MK_UNARY_radians: *d = mk_ar_scalar(A, x, 0.01745329251994329577); break;
    case MK_UNARY_sign:
    case MK_UNARY_floor:
    case MK_UNARY_ceil:
    case MK_UNARY_round:
    case MK_UNARY_isnan:
    case MK_UNARY_isinf:
    case MK_UNARY_isfinite:
    case MK_UNARY_isposinf:
    case MK_UNARY_isneginf:
    case MK_UNARY_logical_not:
    case MK_UNARY_bitwise_invert:
    case MK_UNARY_stop_gradient: return 1;
    default:
        mk_error_set(MK_ERR_VALUE, "[%s] Gradients of complex parts are not supported.", mk_unary_names[op]);
        return -1;
    }
#undef OUT
#undef ONE
    return *d ? 0 : -1;
}

static int unary_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    mk_unary_op op = *(mk_unary_op *)p->params;
    if (!want[0] || !cots[0]) return 0;
    if (op == MK_UNARY_conjugate) {
        grads[0] = mk_unary(MK_UNARY_conjugate, cots[0]);
        return grads[0] ? 0 : -1;
    }
    if ((op == MK_UNARY_real || op == MK_UNARY_imag) && p->inputs[0]->dtype == MK_COMPLEX64) {
        /* MLX's rules: real -> cot (as complex), imag -> cot * 1j */
        mk_array *c = mk_as_dtype(cots[0], MK_COMPLEX64);
        if (c && op == MK_UNARY_imag) {
            mk_c64 j = __builtin_complex(0.0f, 1.0f);
            mk_array *s = mk_scalar(MK_COMPLEX64, &j);
            mk_array *r = s ? mk_binary(MK_BINARY_multiply, c, s) : NULL;
            mk_xdecref(s);
            mk_decref(c);
            c = r;
        }
        grads[0] = c;
        return c ? 0 : -1;
    }
    mk_arena A = {0};
    mk_array *d;
    int rc = unary_deriv(&A, op, p->inputs[0], mk_ar_output(&A, p, 0), &d);
    if (rc == 0) {
        /* complex: cot * conj(f'(z)); abs: cot * z / |z| (d|z| against Re and Im) */
        if (op != MK_UNARY_abs) d = mk_ar_conj(&A, d);
        grads[0] = mk_ar_out(mk_ar_mul(&A, cots[0], d));
        if (!grads[0]) rc = -1;
    }
    mk_ar_free(&A);
    return rc < 0 ? -1 : 0;
}

static int unary_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    mk_unary_op op = *(mk_unary_op *)p->params;
    if (op == MK_UNARY_conjugate) {
        out[0] = mk_unary(MK_UNARY_conjugate, tans[0]);
        return out[0] ? 0 : -1;
    }
    if ((op == MK_UNARY_real || op == MK_UNARY_imag) && p->inputs[0]->dtype == MK_COMPLEX64) {
        out[0] = mk_unary(op, tans[0]); /* linear in the input */
        return out[0] ? 0 : -1;
    }
    mk_arena A = {0};
    mk_array *d;
    int rc = unary_deriv(&A, op, p->inputs[0], mk_ar_output(&A, p, 0), &d);
    if (rc == 0 && op == MK_UNARY_abs && p->inputs[0]->dtype == MK_COMPLEX64) {
        /* |z| is real: d|z| = Re(conj(z / |z|) t) */
        mk_array *t = mk_ar_cast(&A, tans[0], MK_COMPLEX64);
        out[0] = mk_ar_out(mk_ar_un(&A, MK_UNARY_real, mk_ar_mul(&A, mk_ar_conj(&A, d), t)));
        if (!out[0]) rc = -1;
    } else if (rc == 0) {
        out[0] = mk_ar_out(mk_ar_mul(&A, tans[0], d));
        if (!out[0]) rc = -1;
    }
    mk_ar_free(&A);
    return rc < 0 ? -1 : 0;
}

/* element-wise: the op on the batched input, batch axis unchanged */
static int unary_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    outs[0] = mk_unary(*(mk_unary_op *)p->params, in[0]);
    out_axes[0] = axes[0];
    return outs[0] ? 0 : -1;
}

static int astype_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    if (!want[0] || !cots[0]) return 0;
    grads[0] = mk_as_dtype(cots[0], p->inputs[0]->dtype);
    return grads[0] ? 0 : -1;
}

static int astype_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    out[0] = mk_as_dtype(tans[0], p->outdesc[0].dtype);
    return out[0] ? 0 : -1;
}

static int astype_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    outs[0] = mk_astype(in[0], p->outdesc[0].dtype);
    out_axes[0] = axes[0];
    return outs[0] ? 0 : -1;
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_unary(const mk_prim *p, mk_unary_op *op) {
    if (p->op != &unary_def && p->op != &stop_gradient_def) return false;
    *op = p->params ? *(const mk_unary_op *)p->params : MK_UNARY_stop_gradient;
    return true;
}
bool mk_xp_astype(const mk_prim *p) { return p->op == &astype_def; }

/* ---- one row of an op, for fused evaluation (ops_fused.h) ---- */
#include "ops_fused.h"

/* The kernel unary_eval picks for these dtypes (the F16C path included),
 * on one row: out[i] = op(x[i * xs]) for i < n, out dense. */
void mk_unary_row(mk_unary_op op, mk_dtype in, mk_dtype out, const void *x, int64_t xs, void *o, int64_t n) {
    const unary_spec *spec = &specs[op];
    if (in == MK_FLOAT16 && (out == MK_FLOAT16 || out == MK_BOOL) && spec->fn[MK_FLOAT32] &&
        op != MK_UNARY_sigmoid && op != MK_UNARY_degrees && op != MK_UNARY_radians && mk_f16c()) {
        unary_ctx u = {spec->fn[MK_FLOAT32], x, o, 2, mk_dtype_size(out), op == MK_UNARY_exp};
        const int64_t off[2] = {0, 0}, st[2] = {1, xs};
        unary_rows_f16c(&u, off, st, n);
        return;
    }
    spec->fn[in](x, xs, o, n);
}

/* astype_eval's conversion on one row (out dense). */
void mk_astype_row(mk_dtype in, mk_dtype out, const void *x, int64_t xs, void *o, int64_t n) {
    if (((in == MK_FLOAT16 && out == MK_FLOAT32) || (in == MK_FLOAT32 && out == MK_FLOAT16)) && mk_f16c()) {
        if (in == MK_FLOAT16) {
            mk_f16_to_f32_run(x, xs, o, n);
        } else if (xs == 1) {
            mk_f32_to_f16_run(x, o, n);
        } else {
            const float *src = x;
            float t[F16_RUN];
            for (int64_t k = 0; k < n; k += F16_RUN) {
                int64_t m = n - k < F16_RUN ? n - k : F16_RUN;
                for (int64_t i = 0; i < m; i++) t[i] = src[(k + i) * xs];
                mk_f32_to_f16_run(t, (mk_f16 *)o + k, m);
            }
        }
        return;
    }
    mk_cast_table[in][out](x, xs, o, 1, n);
}
