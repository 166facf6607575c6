#include "dtype.h"

#include <string.h>

/* clang-format off */
const mk_dtype_info mk_dtypes[MK_NDTYPES] = {
    [MK_BOOL]      = {"bool",      "bool",        "?", 1, MK_KIND_BOOL},
    [MK_UINT8]     = {"uint8",     "uint8_t",     "B", 1, MK_KIND_UINT},
    [MK_UINT16]    = {"uint16",    "uint16_t",    "H", 2, MK_KIND_UINT},
    [MK_UINT32]    = {"uint32",    "uint32_t",    "I", 4, MK_KIND_UINT},
    [MK_UINT64]    = {"uint64",    "uint64_t",    "Q", 8, MK_KIND_UINT},
    [MK_INT8]      = {"int8",      "int8_t",      "b", 1, MK_KIND_INT},
    [MK_INT16]     = {"int16",     "int16_t",     "h", 2, MK_KIND_INT},
    [MK_INT32]     = {"int32",     "int32_t",     "i", 4, MK_KIND_INT},
    [MK_INT64]     = {"int64",     "int64_t",     "q", 8, MK_KIND_INT},
    [MK_FLOAT16]   = {"float16",   "float16_t",   "e", 2, MK_KIND_FLOAT},
    [MK_FLOAT32]   = {"float32",   "float",       "f", 4, MK_KIND_FLOAT},
    [MK_FLOAT64]   = {"float64",   "double",      "d", 8, MK_KIND_FLOAT},
    [MK_BFLOAT16]  = {"bfloat16",  "bfloat16_t",  "bfloat16", 2, MK_KIND_FLOAT}, /* as MLX: not PEP 3118 */
    [MK_COMPLEX64] = {"complex64", "complex64_t", "Zf", 8, MK_KIND_COMPLEX},
};

_Static_assert(sizeof(mk_dtypes) / sizeof(mk_dtypes[0]) == MK_NDTYPES, "one row per dtype");

/* MLX's promotion table, row = a, column = b. Checked cell by cell against
 * mlx 0.32 by tests/test_dtypes.py. */
#define b_ MK_BOOL
#define u1 MK_UINT8
#define u2 MK_UINT16
#define u4 MK_UINT32
#define u8 MK_UINT64
#define i1 MK_INT8
#define i2 MK_INT16
#define i4 MK_INT32
#define i8 MK_INT64
#define f2 MK_FLOAT16
#define f4 MK_FLOAT32
#define f8 MK_FLOAT64
#define bf MK_BFLOAT16
#define c8 MK_COMPLEX64
static const unsigned char promotion[MK_NDTYPES][MK_NDTYPES] = {
    /*        b_  u1  u2  u4  u8  i1  i2  i4  i8  f2  f4  f8  bf  c8 */
    /* b_ */ {b_, u1, u2, u4, u8, i1, i2, i4, i8, f2, f4, f8, bf, c8},
    /* u1 */ {u1, u1, u2, u4, u8, i2, i2, i4, i8, f2, f4, f8, bf, c8},
    /* u2 */ {u2, u2, u2, u4, u8, i4, i4, i4, i8, f2, f4, f8, bf, c8},
    /* u4 */ {u4, u4, u4, u4, u8, i8, i8, i8, i8, f2, f4, f8, bf, c8},
    /* u8 */ {u8, u8, u8, u8, u8, f4, f4, f4, f4, f2, f4, f8, bf, c8},
    /* i1 */ {i1, i2, i4, i8, f4, i1, i2, i4, i8, f2, f4, f8, bf, c8},
    /* i2 */ {i2, i2, i4, i8, f4, i2, i2, i4, i8, f2, f4, f8, bf, c8},
    /* i4 */ {i4, i4, i4, i8, f4, i4, i4, i4, i8, f2, f4, f8, bf, c8},
    /* i8 */ {i8, i8, i8, i8, f4, i8, i8, i8, i8, f2, f4, f8, bf, c8},
    /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f2, f2, f2, f4, f8, f4, c8},
    /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f4, f4, f8, f4, c8},
    /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, f8, c8},
    /* bf */ {bf, bf, bf, bf, bf, bf, bf, bf, bf, f4, f4, f8, bf, c8},
    /* c8 */ {c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8, c8},
};
#undef b_
#undef u1
#undef u2
#undef u4
#undef u8
#undef i1
#undef i2
#undef i4
#undef i8
#undef f2
#undef f4
#undef f8
#undef bf
#undef c8
/* clang-format on */

mk_dtype mk_promote(mk_dtype a, mk_dtype b) { return (mk_dtype)promotion[a][b]; }

/* A Python int next to an array keeps the array's dtype, except bool. */
mk_dtype mk_weak_int_dtype(mk_dtype t) { return t == MK_BOOL ? MK_INT32 : t; }

/* A Python float keeps an inexact array's dtype, and is float32 otherwise. */
mk_dtype mk_weak_float_dtype(mk_dtype t) { return mk_is_inexact(t) ? t : MK_FLOAT32; }

mk_dtype mk_to_float(mk_dtype t) { return mk_is_inexact(t) ? t : MK_FLOAT32; }

const char *const mk_category_names[MK_NCATS] = {
    "complexfloating", "floating", "inexact", "signedinteger",
    "unsignedinteger", "integer",  "number",  "generic",
};

/* The parent of each category in MLX's hierarchy; generic is the root. */
static const mk_category parent[MK_NCATS] = {
    [MK_CAT_COMPLEXFLOATING] = MK_CAT_INEXACT, [MK_CAT_FLOATING] = MK_CAT_INEXACT,
    [MK_CAT_INEXACT] = MK_CAT_NUMBER,          [MK_CAT_SIGNEDINTEGER] = MK_CAT_INTEGER,
    [MK_CAT_UNSIGNEDINTEGER] = MK_CAT_INTEGER, [MK_CAT_INTEGER] = MK_CAT_NUMBER,
    [MK_CAT_NUMBER] = MK_CAT_GENERIC,          [MK_CAT_GENERIC] = MK_CAT_GENERIC,
};

bool mk_subcat(mk_category a, mk_category b) {
    for (;;) {
        if (a == b) return true;
        if (a == MK_CAT_GENERIC) return false;
        a = parent[a];
    }
}

static mk_category leaf_category(mk_dtype t) {
    switch (mk_dtypes[t].kind) {
    case MK_KIND_BOOL: return MK_CAT_GENERIC;
    case MK_KIND_UINT: return MK_CAT_UNSIGNEDINTEGER;
    case MK_KIND_INT: return MK_CAT_SIGNEDINTEGER;
    case MK_KIND_FLOAT: return MK_CAT_FLOATING;
    case MK_KIND_COMPLEX: return MK_CAT_COMPLEXFLOATING;
    }
    return MK_CAT_GENERIC;
}

bool mk_issubdtype_cat(mk_dtype t, mk_category c) { return mk_subcat(leaf_category(t), c); }

int mk_dtype_from_name(const char *name) {
    for (int i = 0; i < MK_NDTYPES; i++)
        if (strcmp(mk_dtypes[i].name, name) == 0) return i;
    if (strcmp(name, "bool_") == 0) return MK_BOOL;
    return -1;
}
