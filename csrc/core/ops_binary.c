/* Binary element-wise ops and where().
 *
 * Inputs are promoted with MLX's table, then broadcast at evaluation time
 * through zero strides (no broadcast copies). Each op is one row of `specs`:
 * a rule for the dtypes and a kernel per dtype made from one expression in
 * `x` and `y` per class of types. */
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

const char *const mk_binary_names[MK_NBINARY] = {
#define X(name) #name,
    MK_BINARY_OPS(X)
#undef X
};

typedef void (*binary_fn)(const void *a, int64_t as, const void *b, int64_t bs, void *out, int64_t n);

typedef enum {
    B_KEEP,    /* promoted dtype in and out */
    B_FLOAT,   /* promoted, then made float (divide, arctan2) */
    B_CMP,     /* promoted in, bool out */
    B_LOGIC,   /* bool in and out */
    B_BITWISE, /* integers and bool only */
    B_SHIFT,   /* integers only; bool becomes uint8 */
} binary_rule;

typedef struct {
    binary_rule rule;
    binary_fn fn[MK_NDTYPES];
} binary_spec;

/* ------------------------------------------------------------ helpers */

/* x // -1 is -x with wraparound (MLX: INT_MIN // -1 is INT_MIN), negated in unsigned arithmetic: the
 * C division INT64_MIN / -1 is undefined (x86's idiv traps) */
#define FLOORDIV_S(x, y) ((y) == 0 ? 0 : (y) == -1 ? (st)(0 - (uint64_t)(x)) : (st)floordiv_s64(x, y))
static inline int64_t floordiv_s64(int64_t x, int64_t y) {
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) q--;
    return q;
}
static inline int64_t rem_s64(int64_t x, int64_t y) {
    if (y == 0) return x;
    if (y == -1) return 0;
    int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}
static inline uint64_t ipow_u(uint64_t b, uint64_t e) {
    uint64_t r = 1;
    while (e) {
        if (e & 1) r *= b;
        b *= b;
        e >>= 1;
    }
    return r;
}
static inline int64_t ipow_s(int64_t b, int64_t e) { return e < 0 ? 0 : (int64_t)ipow_u((uint64_t)b, (uint64_t)e); }

#define FREM(x, y) frem_##x(x, y)
static inline float frem_f(float x, float y) {
    float r = fmodf(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}
static inline double frem_d(double x, double y) {
    double r = fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}
#define FREMG(x, y) _Generic((x), float: frem_f, double: frem_d)(x, y)
/* NaN-propagating max/min, as MLX */
#define FMAXP(x, y) (isnan(x) ? (x) : isnan(y) ? (y) : (x) > (y) ? (x) : (y))
#define FMINP(x, y) (isnan(x) ? (x) : isnan(y) ? (y) : (x) < (y) ? (x) : (y))
/* complex ordering: real part, then imaginary part */
#define CGT(x, y) (crealf(x) > crealf(y) || (crealf(x) == crealf(y) && cimagf(x) > cimagf(y)))
#define CGE(x, y) (crealf(x) > crealf(y) || (crealf(x) == crealf(y) && cimagf(x) >= cimagf(y)))
#define CLT(x, y) CGT(y, x)
#define CLE(x, y) CGE(y, x)
#define CNAN(x) (isnan(crealf(x)) || isnan(cimagf(x)))
/* MLX's CPU logaddexp: max + log1p(exp(min - max)) with an infinite bound
 * giving the max; max and min are MLX's maximum/minimum (a nan in y wins,
 * then one in x). exp is MLX's float approximation (mk_mlx_expf, through
 * float for float64 too), log1p is libm's. float16 and bfloat16 work in
 * their own type, as MLX's: min - max, exp and log1p each round to it (R),
 * the final sum rounds when stored. */
#define LAE_MAX(x, y) (isnan(y) ? (y) : isnan(x) ? (x) : (x) > (y) ? (x) : (y))
#define LAE_MIN(x, y) (isnan(y) ? (y) : isnan(x) ? (x) : (x) < (y) ? (x) : (y))
static inline float rnd_id(float v) { return v; }
static inline float rnd_f16(float v) { return mk_f16_to_f32(mk_f32_to_f16(v)); }
static inline float rnd_bf16(float v) { return mk_bf16_to_f32(mk_f32_to_bf16(v)); }
#define LAE_R(v) _Generic((st){0}, mk_f16: rnd_f16, mk_bf16: rnd_bf16, default: rnd_id)(v)
static inline double logaddexp_d(double x, double y) {
    double hi = LAE_MAX(x, y), lo = LAE_MIN(x, y);
    if (lo == -INFINITY || hi == INFINITY) return hi;
    return hi + log1p((double)mk_mlx_expf((float)(lo - hi)));
}
#define LOGADDEXP_F(x, y, R)                                                                           \
    (LAE_MIN(x, y) == -INFINITY || LAE_MAX(x, y) == INFINITY                                           \
         ? LAE_MAX(x, y)                                                                               \
         : LAE_MAX(x, y) + R(log1pf(R(mk_mlx_expf(R(LAE_MIN(x, y) - LAE_MAX(x, y)))))))
#define LOGADDEXP(x, y) _Generic((x), float: LOGADDEXP_F(x, y, LAE_R), double: logaddexp_d(x, y))
/* MLX's complex logaddexp: max + log1p(exp(min - max)), with max and min
 * as the complex maximum and minimum ops */
static inline mk_c64 logaddexp_c(mk_c64 x, mk_c64 y) {
    mk_c64 hi = CNAN(x) || CGT(x, y) ? x : y, lo = CNAN(x) || CLT(x, y) ? x : y;
    if (crealf(lo) == -INFINITY || crealf(hi) == INFINITY) return hi;
    float m = expf(crealf(lo) - crealf(hi)), d = cimagf(lo) - cimagf(hi);
    return hi + clogf(CMPLXF(1 + m * cosf(d), m * sinf(d)));
}
#define SHIFT_OK(y) ((uint64_t)(y) < 8 * sizeof(st))

/* ------------------------------------------------------- kernel makers */

#define BKERNEL(op, s, S, R, os, OS, EXPR)                                                             \
    MK_SIMD_CLONES(static void, op##_##s, (const void *a_, int64_t as, const void *b_, int64_t bs, void *o_, int64_t n), (a_, as, b_, bs, o_, n), { \
        typedef S st;                                                                                  \
        typedef R rt;                                                                                  \
        const st *a = a_, *b = b_;                                                                     \
        OS *o = o_;                                                                                    \
        if (as == 1 && bs == 1) {                                                                      \
            for (int64_t i = 0; i < n; i++) {                                                          \
                rt x = MK_LOAD_##s(&a[i]), y = MK_LOAD_##s(&b[i]);                                     \
                MK_STORE_##os(&o[i], (EXPR));                                                          \
            }                                                                                          \
        } else if (as == 0 && bs == 1) {                                                               \
            rt x = MK_LOAD_##s(a);                                                                     \
            for (int64_t i = 0; i < n; i++) {                                                          \
                rt y = MK_LOAD_##s(&b[i]);                                                             \
                MK_STORE_##os(&o[i], (EXPR));                                                          \
            }                                                                                          \
        } else if (as == 1 && bs == 0) {                                                               \
            rt y = MK_LOAD_##s(b);                                                                     \
            for (int64_t i = 0; i < n; i++) {                                                          \
                rt x = MK_LOAD_##s(&a[i]);                                                             \
                MK_STORE_##os(&o[i], (EXPR));                                                          \
            }                                                                                          \
        } else {                                                                                       \
            for (int64_t i = 0; i < n; i++) {                                                          \
                rt x = MK_LOAD_##s(&a[i * as]), y = MK_LOAD_##s(&b[i * bs]);                           \
                MK_STORE_##os(&o[i], (EXPR));                                                          \
            }                                                                                          \
        }                                                                                              \
    })

#define K_SAME(E, s, S, R, op, EXPR) BKERNEL(op, s, S, R, s, S, EXPR)
#define K_BOOL(E, s, S, R, op, EXPR) BKERNEL(op, s, S, R, b8, bool, EXPR)
#define ENTRY(E, s, S, R, op, unused) [E] = op##_##s,

#define OP_F(op, F) MK_FLOAT_TYPES_2(K_SAME, op, F)
#define OP_C(op, C) MK_COMPLEX_TYPES_2(K_SAME, op, C)
#define OP_U(op, I) MK_UINT_TYPES_2(K_SAME, op, I)
#define OP_S(op, I) MK_SINT_TYPES_2(K_SAME, op, I)
#define OP_I(op, I) OP_U(op, I) OP_S(op, I)
#define OP_B(op, B) MK_BOOL_TYPES_2(K_SAME, op, B)
#define ROW_F(op) MK_FLOAT_TYPES_2(ENTRY, op, _)
#define ROW_C(op) MK_COMPLEX_TYPES_2(ENTRY, op, _)
#define ROW_I(op) MK_UINT_TYPES_2(ENTRY, op, _) MK_SINT_TYPES_2(ENTRY, op, _)
#define ROW_B(op) MK_BOOL_TYPES_2(ENTRY, op, _)
#define ROW_ALL(op) ROW_F(op) ROW_C(op) ROW_I(op) ROW_B(op)
#define ROW_REAL(op) ROW_F(op) ROW_I(op) ROW_B(op)

/* arithmetic */
OP_F(add, x + y) OP_C(add, x + y) OP_I(add, (st)((uint64_t)x + (uint64_t)y)) OP_B(add, x || y)
OP_F(subtract, x - y) OP_C(subtract, x - y) OP_I(subtract, (st)((uint64_t)x - (uint64_t)y))
OP_B(subtract, x != y)
OP_F(multiply, x * y) OP_C(multiply, x * y) OP_I(multiply, (st)((uint64_t)x * (uint64_t)y))
OP_B(multiply, x && y)
OP_F(divide, x / y) OP_C(divide, x / y)
OP_F(floor_divide, floor(x / y))
OP_C(floor_divide, x / y) /* MLX divides complex numbers without flooring */
OP_U(floor_divide, y == 0 ? 0 : x / y)
OP_S(floor_divide, FLOORDIV_S(x, y))
OP_B(floor_divide, x && y)
OP_F(remainder, FREMG(x, y))
OP_U(remainder, y == 0 ? x : x % y)
OP_S(remainder, rem_s64(x, y))
OP_B(remainder, x && !y)
OP_F(power, pow(x, y)) OP_C(power, cpowf(x, y))
OP_U(power, (st)ipow_u(x, y)) OP_S(power, (st)ipow_s(x, y)) OP_B(power, x || !y)
OP_F(arctan2, atan2(x, y))
OP_F(logaddexp, LOGADDEXP(x, y))
OP_C(logaddexp, logaddexp_c(x, y))
/* complex: x if it has a nan, else the larger by CGT (MLX's order) */
OP_F(maximum, FMAXP(x, y)) OP_C(maximum, CNAN(x) || CGT(x, y) ? x : y) OP_I(maximum, x > y ? x : y)
OP_B(maximum, x || y)
OP_F(minimum, FMINP(x, y)) OP_C(minimum, CNAN(x) || CLT(x, y) ? x : y) OP_I(minimum, x < y ? x : y)
OP_B(minimum, x && y)

/* comparisons */
#define CMP(op, EXPR, CEXPR)                                                                           \
    MK_FLOAT_TYPES_2(K_BOOL, op, EXPR)                                                                 \
    MK_UINT_TYPES_2(K_BOOL, op, EXPR)                                                                  \
    MK_SINT_TYPES_2(K_BOOL, op, EXPR)                                                                  \
    MK_BOOL_TYPES_2(K_BOOL, op, EXPR)                                                                  \
    MK_COMPLEX_TYPES_2(K_BOOL, op, CEXPR)
CMP(equal, x == y, x == y)
CMP(not_equal, x != y, x != y)
CMP(greater, x > y, CGT(x, y))
CMP(greater_equal, x >= y, CGE(x, y))
CMP(less, x < y, CLT(x, y))
CMP(less_equal, x <= y, CLE(x, y))
OP_B(logical_and, x && y)
OP_B(logical_or, x || y)

/* bitwise */
OP_I(bitwise_and, x & y) OP_B(bitwise_and, x && y)
OP_I(bitwise_or, x | y) OP_B(bitwise_or, x || y)
OP_I(bitwise_xor, x ^ y) OP_B(bitwise_xor, x != y)
OP_U(left_shift, SHIFT_OK(y) ? (st)(x << y) : 0)
OP_S(left_shift, (y >= 0 && SHIFT_OK(y)) ? (st)((uint64_t)x << y) : 0)
OP_U(right_shift, SHIFT_OK(y) ? (st)(x >> y) : 0)
OP_S(right_shift, (y >= 0 && SHIFT_OK(y)) ? (st)(x >> y) : (x < 0 ? -1 : 0))

static const binary_spec specs[MK_NBINARY] = {
    [MK_BINARY_add] = {B_KEEP, {ROW_ALL(add)}},
    [MK_BINARY_subtract] = {B_KEEP, {ROW_ALL(subtract)}},
    [MK_BINARY_multiply] = {B_KEEP, {ROW_ALL(multiply)}},
    [MK_BINARY_divide] = {B_FLOAT, {ROW_F(divide) ROW_C(divide)}},
    [MK_BINARY_floor_divide] = {B_KEEP, {ROW_ALL(floor_divide)}},
    [MK_BINARY_remainder] = {B_KEEP, {ROW_REAL(remainder)}},
    [MK_BINARY_power] = {B_KEEP, {ROW_ALL(power)}},
    [MK_BINARY_arctan2] = {B_FLOAT, {ROW_F(arctan2)}},
    [MK_BINARY_logaddexp] = {B_FLOAT, {ROW_F(logaddexp) ROW_C(logaddexp)}},
    [MK_BINARY_maximum] = {B_KEEP, {ROW_ALL(maximum)}},
    [MK_BINARY_minimum] = {B_KEEP, {ROW_ALL(minimum)}},
    [MK_BINARY_equal] = {B_CMP, {ROW_ALL(equal)}},
    [MK_BINARY_not_equal] = {B_CMP, {ROW_ALL(not_equal)}},
    [MK_BINARY_greater] = {B_CMP, {ROW_ALL(greater)}},
    [MK_BINARY_greater_equal] = {B_CMP, {ROW_ALL(greater_equal)}},
    [MK_BINARY_less] = {B_CMP, {ROW_ALL(less)}},
    [MK_BINARY_less_equal] = {B_CMP, {ROW_ALL(less_equal)}},
    [MK_BINARY_logical_and] = {B_LOGIC, {ROW_B(logical_and)}},
    [MK_BINARY_logical_or] = {B_LOGIC, {ROW_B(logical_or)}},
    [MK_BINARY_bitwise_and] = {B_BITWISE, {ROW_I(bitwise_and) ROW_B(bitwise_and)}},
    [MK_BINARY_bitwise_or] = {B_BITWISE, {ROW_I(bitwise_or) ROW_B(bitwise_or)}},
    [MK_BINARY_bitwise_xor] = {B_BITWISE, {ROW_I(bitwise_xor) ROW_B(bitwise_xor)}},
    [MK_BINARY_left_shift] = {B_SHIFT, {ROW_I(left_shift)}},
    [MK_BINARY_right_shift] = {B_SHIFT, {ROW_I(right_shift)}},
};

/* ------------------------------------------------------------ shapes */

const char *mk_shape_str(int ndim, const int64_t *shape, char *buf, size_t n) {
    size_t k = 0;
    k += snprintf(buf + k, n - k, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

int mk_broadcast_shapes(int na, const int64_t *a, int nb, const int64_t *b, int64_t *out) {
    int n = na > nb ? na : nb;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - na), ib = i - (n - nb);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da == db || db == 1)
            out[i] = da;
        else if (da == 1)
            out[i] = db;
        else {
            char sa[256], sb[256];
            mk_error_set(MK_ERR_VALUE, "[broadcast_shapes] Shapes %s and %s cannot be broadcast.",
                         mk_shape_str(na, a, sa, sizeof sa), mk_shape_str(nb, b, sb, sizeof sb));
            return -1;
        }
    }
    return n;
}

/* ------------------------------------------------------------ evaluation */

typedef struct {
    binary_fn fn;
    const char *a, *b;
    char *out;
    size_t isz, osz;
} binary_ctx;

static void binary_rows(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    binary_ctx *u = c;
    u->fn(u->a + off[1] * u->isz, st[1], u->b + off[2] * u->isz, st[2], u->out + off[0] * u->osz, n);
}

/* float16 with F16C (half_fast.h): runs of 512 of each operand are widened
 * to float32 and go through the float32 kernel, whose result is narrowed (or
 * written as bool). The float16 kernels of these ops compute in float and
 * round once when storing, so the bits are theirs; logaddexp rounds inside
 * and keeps its own kernel. */
#define F16_RUN 512

static void binary_rows_f16c(void *c, const int64_t *off, const int64_t *st, int64_t n) {
    binary_ctx *u = c;
    const mk_f16 *a = (const mk_f16 *)u->a + off[1], *b = (const mk_f16 *)u->b + off[2];
    char *out = u->out + off[0] * u->osz;
    float ta[F16_RUN], tb[F16_RUN];
    for (int64_t k = 0; k < n; k += F16_RUN) {
        int64_t m = n - k < F16_RUN ? n - k : F16_RUN;
        mk_f16_to_f32_run(a + k * st[1], st[1], ta, m);
        mk_f16_to_f32_run(b + k * st[2], st[2], tb, m);
        if (u->osz == 2) {
            u->fn(ta, 1, tb, 1, ta, m);
            mk_f32_to_f16_run(ta, (mk_f16 *)out + k, m);
        } else {
            u->fn(ta, 1, tb, 1, out + k * u->osz, m);
        }
    }
}

static bool binary_f16c(mk_binary_op op, mk_dtype in, mk_dtype out) {
    if (in != MK_FLOAT16 || (out != MK_FLOAT16 && out != MK_BOOL)) return false;
    switch (op) {
    case MK_BINARY_add: case MK_BINARY_subtract: case MK_BINARY_multiply: case MK_BINARY_divide:
    case MK_BINARY_floor_divide: case MK_BINARY_remainder: case MK_BINARY_power: case MK_BINARY_arctan2:
    case MK_BINARY_maximum: case MK_BINARY_minimum: case MK_BINARY_equal: case MK_BINARY_not_equal:
    case MK_BINARY_greater: case MK_BINARY_greater_equal: case MK_BINARY_less: case MK_BINARY_less_equal:
        return mk_f16c();
    default:
        return false;
    }
}

static int binary_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    mk_array *o = out[0];
    mk_binary_op op = *(mk_binary_op *)p->params;
    if (!mk_donate(p, o, in[0]) && mk_donate_or_alloc(p, o, in[1]) < 0) return -1;
    bool f16c = binary_f16c(op, in[0]->dtype, o->dtype);
    binary_ctx u = {specs[op].fn[f16c ? MK_FLOAT32 : in[0]->dtype], mk_data(in[0]), mk_data(in[1]),
                    mk_data(o), mk_dtype_size(in[0]->dtype), mk_dtype_size(o->dtype)};
    int64_t sa[MK_MAX_NDIM], sb[MK_MAX_NDIM];
    mk_broadcast_strides(in[0], o->ndim, o->shape, sa);
    mk_broadcast_strides(in[1], o->ndim, o->shape, sb);
    const int64_t *strides[3] = {o->strides, sa, sb};
    mk_iter it;
    mk_iter_init(&it, o->ndim, o->shape, 3, strides);
    mk_iter_run(&it, MK_GRAIN, f16c ? binary_rows_f16c : binary_rows, &u);
    return 0;
}

static int binary_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int binary_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int binary_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static void binary_name(const mk_prim *p, char *buf, size_t n) {
    mk_camel_name(mk_binary_names[*(const mk_binary_op *)p->params], buf, n);
}
static const mk_opdef binary_def = {"binary", binary_eval, NULL, binary_vjp, binary_jvp, binary_vmap, false,
                                    true, sizeof(mk_binary_op), NULL, binary_name, .cheap = true};

mk_array *mk_binary(mk_binary_op op, mk_array *a, mk_array *b) {
    const binary_spec *spec = &specs[op];
    const char *name = mk_binary_names[op];
    mk_dtype t = mk_promote(a->dtype, b->dtype), out_t;
    int64_t shape[MK_MAX_NDIM];
    int ndim = mk_broadcast_shapes(a->ndim, a->shape, b->ndim, b->shape, shape);
    if (ndim < 0) return NULL;
    switch (spec->rule) {
    case B_FLOAT: t = mk_to_float(t); break;
    case B_LOGIC: t = MK_BOOL; break;
    case B_BITWISE:
    case B_SHIFT:
        if ((!mk_is_integral(a->dtype) && a->dtype != MK_BOOL) ||
            (!mk_is_integral(b->dtype) && b->dtype != MK_BOOL)) {
            mk_error_set(MK_ERR_RUNTIME, "[%s] Only allowed on integer or boolean types but got types %s and %s.",
                         name, mk_dtype_name(a->dtype), mk_dtype_name(b->dtype));
            return NULL;
        }
        if (spec->rule == B_SHIFT && t == MK_BOOL) t = MK_UINT8;
        break;
    default: break;
    }
    out_t = spec->rule == B_CMP || spec->rule == B_LOGIC ? MK_BOOL : t;
    if (!spec->fn[t]) {
        if (op == MK_BINARY_remainder && t == MK_COMPLEX64)
            mk_error_set(MK_ERR_VALUE, "[remainder] Complex type not supported.");
        else
            mk_error_set(MK_ERR_VALUE, "[%s] Not supported for %s.", name, mk_dtype_name(t));
        return NULL;
    }
    mk_array *in[2] = {mk_as_dtype(a, t), NULL};
    mk_array *out = NULL;
    if (!in[0]) return NULL;
    in[1] = mk_as_dtype(b, t);
    mk_binary_op *params = in[1] ? malloc(sizeof *params) : NULL;
    if (params) {
        *params = op;
        out = mk_node(&binary_def, params, out_t, ndim, shape, 2, in);
    } else if (in[1]) {
        mk_nomem();
    }
    mk_decref(in[0]);
    mk_xdecref(in[1]);
    return out;
}

/* ---------------------------------------------------------------- where */

typedef struct {
    const bool *c;
    const char *x, *y;
    char *out;
    size_t sz;
} where_ctx;

static void where_rows(void *v, const int64_t *off, const int64_t *st, int64_t n) {
    where_ctx *w = v;
    const bool *c = w->c + off[1];
    const char *x = w->x + off[2] * w->sz, *y = w->y + off[3] * w->sz;
    char *o = w->out + off[0] * w->sz;
    size_t sz = w->sz;
    for (int64_t i = 0; i < n; i++)
        memcpy(o + i * sz, c[i * st[1]] ? x + i * st[2] * sz : y + i * st[3] * sz, sz);
}

static int where_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    (void)p;
    mk_array *o = out[0];
    if (mk_alloc_out(o) < 0) return -1;
    where_ctx w = {mk_data(in[0]), mk_data(in[1]), mk_data(in[2]), mk_data(o), mk_dtype_size(o->dtype)};
    int64_t s[3][MK_MAX_NDIM];
    for (int k = 0; k < 3; k++) mk_broadcast_strides(in[k], o->ndim, o->shape, s[k]);
    const int64_t *strides[4] = {o->strides, s[0], s[1], s[2]};
    mk_iter it;
    mk_iter_init(&it, o->ndim, o->shape, 4, strides);
    mk_iter_run(&it, MK_GRAIN, where_rows, &w);
    return 0;
}

static int where_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int where_jvp(mk_prim *p, mk_array *const *tans, mk_array **out);
static int where_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes);
static void where_name(const mk_prim *p, char *buf, size_t n) {
    (void)p;
    snprintf(buf, n, "Select");
}
static const mk_opdef where_def = {"where", where_eval, NULL, where_vjp, where_jvp, where_vmap, false,
                                   true, 0, NULL, where_name};

mk_array *mk_where(mk_array *cond, mk_array *x, mk_array *y) {
    int64_t s1[MK_MAX_NDIM], shape[MK_MAX_NDIM];
    int n = mk_broadcast_shapes(cond->ndim, cond->shape, x->ndim, x->shape, s1);
    if (n < 0) return NULL;
    n = mk_broadcast_shapes(n, s1, y->ndim, y->shape, shape);
    if (n < 0) return NULL;
    mk_dtype t = mk_promote(x->dtype, y->dtype);
    mk_array *in[3] = {mk_as_dtype(cond, MK_BOOL), mk_as_dtype(x, t), mk_as_dtype(y, t)};
    mk_array *out = NULL;
    if (in[0] && in[1] && in[2]) out = mk_node(&where_def, NULL, t, n, shape, 3, in);
    for (int k = 0; k < 3; k++) mk_xdecref(in[k]);
    return out;
}

/* ---------------------------------------------------------- transformation rules */

/* The partial derivatives of a binary op at (a, b) (out: its value, or
 * NULL), broadcast against each other as the op is. Returns 0 with da/db set
 * (NULL: that partial is zero), or -1. */
static int binary_partials(mk_arena *A, mk_binary_op op, mk_array *a, mk_array *b, mk_array *out, mk_array **da,
                           mk_array **db) {
#define ONE(like) mk_ar_scalar(A, like, 1.0)
    *da = *db = NULL;
    switch (op) {
    case MK_BINARY_add: *da = ONE(a), *db = ONE(b); break;
    case MK_BINARY_subtract: *da = ONE(a), *db = mk_ar_scalar(A, b, -1.0); break;
    case MK_BINARY_multiply: *da = b, *db = a; break;
    case MK_BINARY_divide:
        *da = mk_ar_un(A, MK_UNARY_reciprocal, b);
        *db = mk_ar_neg(A, mk_ar_div(A, a, mk_ar_un(A, MK_UNARY_square, b)));
        break;
    case MK_BINARY_remainder:
        *da = ONE(a);
        *db = mk_ar_neg(A, mk_ar_un(A, MK_UNARY_floor, mk_ar_div(A, a, b)));
        break;
    case MK_BINARY_power: {
        if (!out) out = mk_ar_bin(A, op, a, b);
        /* b * a^(b-1), and log(a) * a^b with log taken where a > 0 (0 elsewhere, as MLX) */
        *da = mk_ar_mul(A, b, mk_ar_bin(A, MK_BINARY_power, a, mk_ar_sub(A, b, ONE(b))));
        mk_array *pos = mk_ar_bin(A, MK_BINARY_greater, a, mk_ar_scalar(A, a, 0.0));
        mk_array *la = mk_ar_un(A, MK_UNARY_log, mk_ar_where(A, pos, a, ONE(a)));
        *db = mk_ar_mul(A, la, out);
        break;
    }
    case MK_BINARY_arctan2: {
        mk_array *r = mk_ar_add(A, mk_ar_un(A, MK_UNARY_square, a), mk_ar_un(A, MK_UNARY_square, b));
        *da = mk_ar_div(A, b, r);
        *db = mk_ar_neg(A, mk_ar_div(A, a, r));
        break;
    }
    case MK_BINARY_maximum:
    case MK_BINARY_minimum: {
        /* ties go to a, as MLX */
        mk_array *ma = mk_ar_bin(A, op == MK_BINARY_maximum ? MK_BINARY_greater_equal : MK_BINARY_less_equal, a, b);
        *da = mk_ar_cast(A, ma, a->dtype);
        *db = mk_ar_sub(A, ONE(b), *da);
        break;
    }
    case MK_BINARY_logaddexp:
        *da = mk_ar_un(A, MK_UNARY_sigmoid, mk_ar_sub(A, a, b));
        *db = mk_ar_un(A, MK_UNARY_sigmoid, mk_ar_sub(A, b, a));
        break;
    case MK_BINARY_floor_divide:
    default: return 0; /* comparisons, logic, bitwise, floor_divide: zero */
    }
#undef ONE
    return *da && *db ? 0 : -1;
}

static int binary_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    mk_binary_op op = *(mk_binary_op *)p->params;
    mk_array *a = p->inputs[0], *b = p->inputs[1];
    if (!cots[0]) return 0;
    mk_arena A = {0};
    mk_array *da, *db;
    int rc = binary_partials(&A, op, a, b, mk_ar_output(&A, p, 0), &da, &db);
    mk_array *d[2] = {da, db};
    for (int i = 0; rc == 0 && i < 2; i++) {
        if (!want[i] || !d[i]) continue;
        mk_array *x = p->inputs[i];
        grads[i] = mk_ar_out(mk_ar_sum_to(&A, mk_ar_mul(&A, cots[0], mk_ar_conj(&A, d[i])), x->ndim, x->shape));
        if (!grads[i]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

static int binary_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    mk_binary_op op = *(mk_binary_op *)p->params;
    mk_arena A = {0};
    mk_array *da, *db, *r = NULL;
    int rc = binary_partials(&A, op, p->inputs[0], p->inputs[1], mk_ar_output(&A, p, 0), &da, &db);
    mk_array *d[2] = {da, db};
    for (int i = 0; rc == 0 && i < 2; i++) {
        if (!tans[i] || !d[i]) continue;
        mk_array *term = mk_ar_mul(&A, tans[i], d[i]);
        r = r ? mk_ar_add(&A, r, term) : term;
        if (!r) rc = -1;
    }
    if (rc == 0 && r) {
        /* a zero partial against a broadcast input still gives the output's shape */
        r = mk_ar_broadcast(&A, r, p->outdesc[0].ndim, p->outdesc[0].shape);
        out[0] = mk_ar_out(r);
        if (!out[0]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

/* Moves batch axes to the front so that both operands line up (the
 * unbatched one gains a leading size-1 dim after matching ranks). */
static int align_batched(mk_arena *A, int n, mk_array *const *in, const int *axes, mk_array **out) {
    int nd = 0;
    for (int i = 0; i < n; i++) {
        int r = in[i]->ndim - (axes[i] >= 0);
        if (r > nd) nd = r;
    }
    for (int i = 0; i < n; i++) {
        mk_array *x = in[i];
        int r = x->ndim - (axes[i] >= 0);
        if (axes[i] > 0) x = mk_ar_keep(A, mk_moveaxis(x, axes[i], 0));
        if (!x) return -1;
        /* pad the non-batch rank to nd with leading 1s after the batch axis */
        int64_t shape[MK_MAX_NDIM];
        int k = 0;
        shape[k++] = axes[i] >= 0 ? x->shape[0] : 1;
        for (int d = r; d < nd; d++) shape[k++] = 1;
        for (int d = 0; d < r; d++) shape[k++] = x->shape[d + (axes[i] >= 0)];
        x = mk_ar_reshape(A, x, k, shape);
        if (!x) return -1;
        out[i] = x;
    }
    return 0;
}

static int binary_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    mk_arena A = {0};
    mk_array *x[2];
    int rc = align_batched(&A, 2, in, axes, x);
    if (rc == 0) {
        outs[0] = mk_binary(*(mk_binary_op *)p->params, x[0], x[1]);
        out_axes[0] = 0;
        if (!outs[0]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

static int where_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    if (!cots[0]) return 0;
    mk_arena A = {0};
    int rc = 0;
    mk_array *z = mk_ar_scalar(&A, cots[0], 0.0);
    for (int i = 1; rc == 0 && i < 3; i++) {
        if (!want[i]) continue;
        mk_array *x = p->inputs[i];
        mk_array *g = i == 1 ? mk_ar_where(&A, p->inputs[0], cots[0], z) : mk_ar_where(&A, p->inputs[0], z, cots[0]);
        grads[i] = mk_ar_out(mk_ar_sum_to(&A, g, x->ndim, x->shape));
        if (!grads[i]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

static int where_jvp(mk_prim *p, mk_array *const *tans, mk_array **out) {
    mk_arena A = {0};
    mk_array *t1 = tans[1] ? tans[1] : mk_ar_zeros_like(&A, p->inputs[1]);
    mk_array *t2 = tans[2] ? tans[2] : mk_ar_zeros_like(&A, p->inputs[2]);
    out[0] = mk_ar_out(tans[1] || tans[2] ? mk_ar_where(&A, p->inputs[0], t1, t2) : NULL);
    int rc = (tans[1] || tans[2]) && !out[0] ? -1 : 0;
    mk_ar_free(&A);
    return rc;
}

static int where_vmap(mk_prim *p, mk_array *const *in, const int *axes, mk_array **outs, int *out_axes) {
    (void)p;
    mk_arena A = {0};
    mk_array *x[3];
    int rc = align_batched(&A, 3, in, axes, x);
    if (rc == 0) {
        outs[0] = mk_where(x[0], x[1], x[2]);
        out_axes[0] = 0;
        if (!outs[0]) rc = -1;
    }
    mk_ar_free(&A);
    return rc;
}

/* ---- export accessors (export.h) ---- */
#include "export.h"
bool mk_xp_binary(const mk_prim *p, mk_binary_op *op) {
    if (p->op != &binary_def) return false;
    *op = *(const mk_binary_op *)p->params;
    return true;
}
bool mk_xp_where(const mk_prim *p) { return p->op == &where_def; }

/* ---- one row of an op, for fused evaluation (ops_fused.h) ---- */
#include "ops_fused.h"

/* The kernel binary_eval picks for these dtypes (the F16C path included),
 * on one row: out[i] = op(a[i * as], b[i * bs]) for i < n, out dense. */
void mk_binary_row(mk_binary_op op, mk_dtype in, mk_dtype out, const void *a, int64_t as, const void *b, int64_t bs,
                   void *o, int64_t n) {
    if (binary_f16c(op, in, out)) {
        binary_ctx u = {specs[op].fn[MK_FLOAT32], a, b, o, 2, mk_dtype_size(out)};
        const int64_t off[3] = {0, 0, 0}, st[3] = {1, as, bs};
        binary_rows_f16c(&u, off, st, n);
        return;
    }
    specs[op].fn[in](a, as, b, bs, o, n);
}

void mk_where_row(size_t sz, const bool *c, int64_t cs, const void *x, int64_t xs, const void *y, int64_t ys,
                  void *o, int64_t n) {
    where_ctx w = {c, x, y, o, sz};
    const int64_t off[4] = {0, 0, 0, 0}, st[4] = {1, cs, xs, ys};
    where_rows(&w, off, st, n);
}
