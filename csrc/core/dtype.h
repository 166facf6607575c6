/* The dtype table: one row of traits per dtype, MLX's promotion table, and
 * the categories used by issubdtype. Every per-dtype fact lives here. */
#ifndef MK_DTYPE_H
#define MK_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Same order as MLX's Dtype::Val. */
typedef enum {
    MK_BOOL,
    MK_UINT8,
    MK_UINT16,
    MK_UINT32,
    MK_UINT64,
    MK_INT8,
    MK_INT16,
    MK_INT32,
    MK_INT64,
    MK_FLOAT16,
    MK_FLOAT32,
    MK_FLOAT64,
    MK_BFLOAT16,
    MK_COMPLEX64,
    MK_NDTYPES
} mk_dtype;

typedef enum {
    MK_KIND_BOOL,
    MK_KIND_UINT,
    MK_KIND_INT,
    MK_KIND_FLOAT,
    MK_KIND_COMPLEX,
} mk_kind;

/* Categories, as MLX's DtypeCategory (the values are MLX's too). */
typedef enum {
    MK_CAT_COMPLEXFLOATING,
    MK_CAT_FLOATING,
    MK_CAT_INEXACT,
    MK_CAT_SIGNEDINTEGER,
    MK_CAT_UNSIGNEDINTEGER,
    MK_CAT_INTEGER,
    MK_CAT_NUMBER,
    MK_CAT_GENERIC,
    MK_NCATS
} mk_category;

typedef struct {
    const char *name;     /* MLX's name: "float32" */
    const char *msl_name; /* the type name MLX puts in generated Metal source */
    const char *buffer_format; /* PEP 3118 format character(s) */
    size_t size;          /* bytes per element */
    mk_kind kind;
} mk_dtype_info;

extern const mk_dtype_info mk_dtypes[MK_NDTYPES];

static inline size_t mk_dtype_size(mk_dtype t) { return mk_dtypes[t].size; }
static inline const char *mk_dtype_name(mk_dtype t) { return mk_dtypes[t].name; }
static inline bool mk_is_float(mk_dtype t) { return mk_dtypes[t].kind == MK_KIND_FLOAT; }
static inline bool mk_is_inexact(mk_dtype t) {
    return mk_dtypes[t].kind == MK_KIND_FLOAT || mk_dtypes[t].kind == MK_KIND_COMPLEX;
}
static inline bool mk_is_integral(mk_dtype t) {
    return mk_dtypes[t].kind == MK_KIND_INT || mk_dtypes[t].kind == MK_KIND_UINT;
}
static inline bool mk_is_unsigned(mk_dtype t) { return mk_dtypes[t].kind == MK_KIND_UINT; }

/* MLX's promote_types. */
mk_dtype mk_promote(mk_dtype a, mk_dtype b);
/* The dtype a weakly typed Python scalar takes next to an array of dtype t. */
mk_dtype mk_weak_int_dtype(mk_dtype t);
mk_dtype mk_weak_float_dtype(mk_dtype t);
/* The float dtype an op that needs a float result (divide, exp) uses. */
mk_dtype mk_to_float(mk_dtype t);

bool mk_issubdtype_cat(mk_dtype t, mk_category c);
bool mk_subcat(mk_category a, mk_category b);
extern const char *const mk_category_names[MK_NCATS];

/* Parses "float32" etc. Returns -1 when unknown. */
int mk_dtype_from_name(const char *name);

#endif
