#include "types.h"

#define GETTERS(E, s, S, R, T, CONV)                                                                  \
    case E: return CONV(MK_LOAD_##s((const S *)p));

/* to an integer as MK_STORE does (types.h: never C's undefined out-of-range conversion) */
#define CONV_F64(v) ((double)(v))
#define CONV_I64(v) MK_F2I(i64, v)
#define CONV_U64(v) MK_F2I(u64, v)
#define CONV_C64(v) ((mk_c64)(v))
#define DEFINE_GET(name, T, CONV)                                                                      \
    T name(mk_dtype t, const void *p) {                                                                \
        switch (t) { MK_ALL_TYPES_2(GETTERS, T, CONV) default: return (T)0; }                           \
    }
DEFINE_GET(mk_get_f64, double, CONV_F64)
DEFINE_GET(mk_get_i64, int64_t, CONV_I64)
DEFINE_GET(mk_get_u64, uint64_t, CONV_U64)
DEFINE_GET(mk_get_c64, mk_c64, CONV_C64)
#undef GETTERS

#define SETTERS(E, s, S, R, u1, u2)                                                                    \
    case E: MK_STORE_##s((S *)p, (R)v); return;
#define DEFINE_PUT(name, T)                                                                            \
    void name(mk_dtype t, void *p, T v) {                                                              \
        switch (t) { MK_ALL_TYPES_2(SETTERS, _, _) default: return; }                                  \
    }
DEFINE_PUT(mk_put_f64, double)
DEFINE_PUT(mk_put_i64, int64_t)
DEFINE_PUT(mk_put_c64, mk_c64)
#undef SETTERS

/* One cast kernel per (from, to) pair. The value goes to MK_STORE as loaded: its conversion to
 * an integer is the defined one (types.h), never a C cast of an out-of-range float. */
#define CAST_TO(E2, s2, S2, R2, s1, S1)                                                                \
    static void cast_##s1##_##s2(const void *src, int64_t ss, void *dst, int64_t ds, int64_t n) {      \
        const S1 *a = src;                                                                             \
        S2 *b = dst;                                                                                   \
        if (ss == 1 && ds == 1)                                                                        \
            for (int64_t i = 0; i < n; i++) MK_STORE_##s2(&b[i], MK_LOAD_##s1(&a[i]));                  \
        else                                                                                           \
            for (int64_t i = 0; i < n; i++) MK_STORE_##s2(&b[i * ds], MK_LOAD_##s1(&a[i * ss]));        \
    }
#define CAST_FROM(E1, s1, S1, R1) MK_ALL_TYPES_2(CAST_TO, s1, S1)

MK_ALL_TYPES(CAST_FROM)

#define ROW_ENTRY(E2, s2, S2, R2, E1, s1) [E2] = cast_##s1##_##s2,
#define ROW(E1, s1, S1, R1) [E1] = {MK_ALL_TYPES_2(ROW_ENTRY, E1, s1)},
const mk_cast_fn mk_cast_table[MK_NDTYPES][MK_NDTYPES] = {MK_ALL_TYPES(ROW)};

#include "array.h"

mk_array *mk_scalar_f64(mk_dtype dtype, double v) {
    mk_array *a = mk_array_empty(dtype, 0, NULL);
    if (a) mk_put_f64(dtype, a->buf->data, v);
    return a;
}

mk_array *mk_scalar_i64(mk_dtype dtype, int64_t v) {
    mk_array *a = mk_array_empty(dtype, 0, NULL);
    if (a) mk_put_i64(dtype, a->buf->data, v);
    return a;
}
