/* export_function / import_function in MLX's file format (see export.h).
 *
 * File layout (MLX's, all little-endian; "vec<T>" is a uint64 count then
 * the items, a string is a uint64 length then the bytes):
 *   header: string version, int32 count, bool shapeless, string metadata
 *   count functions, each:
 *     vec<string> kwarg keys
 *     vec<uint64> input ids, vec<(Shape, Dtype)> input descriptors
 *     vec<uint64> output ids
 *     uint64 tape size, then per tape entry:
 *       uint64 id, bool has_primitive
 *       primitive: vec<uint64> input ids, stream (3 x int32), string name,
 *                  the state by the primitive's schema, uint64 siblings
 *                  (the other outputs); 0: Shape, Dtype; else vec<uint64> ids,
 *                  vec<Shape>, vec<Dtype>
 *       else: bool constant; constant: Shape, Dtype, raw row-major data
 *   Shape: vec<int32>; Dtype: int32 value (mkpy's dtype order is MLX's),
 *   uint8 item size.
 *
 * The schema table below is the one list of MLX primitives mkpy writes or
 * reads, with the kinds of their state items; export checks every state it
 * builds against it, so the writer and the reader cannot drift apart. */
#include "export.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_extra.h"
#include "ops_quant.h"
#include "transforms.h"

/* (ops_fast.c) */
bool mk_xp_norm(const mk_prim *p, bool *layer, float *eps);
bool mk_xp_rope(const mk_prim *p, int64_t *dims, bool *traditional, float *base, float *scale);

/* ================================================================ schemas */

typedef struct {
    const char *name;
    const char *schema; /* state item kinds, export.h's mk_xs_kind letters */
} xschema;

static const xschema schemas[] = {
    /* element-wise, no state */
    {"Abs", ""}, {"Negative", ""}, {"Sign", ""}, {"Square", ""}, {"Exp", ""}, {"Expm1", ""}, {"Log1p", ""},
    {"Sin", ""}, {"Cos", ""}, {"Tan", ""}, {"ArcSin", ""}, {"ArcCos", ""}, {"ArcTan", ""}, {"Sinh", ""},
    {"Cosh", ""}, {"Tanh", ""}, {"ArcSinh", ""}, {"ArcCosh", ""}, {"ArcTanh", ""}, {"Sigmoid", ""}, {"Erf", ""},
    {"ErfInv", ""}, {"Floor", ""}, {"Ceil", ""}, {"Round", ""}, {"LogicalNot", ""}, {"Real", ""}, {"Imag", ""},
    {"Conjugate", ""}, {"StopGradient", ""}, {"Copy", ""},
    {"Add", ""}, {"Subtract", ""}, {"Multiply", ""}, {"Divide", ""}, {"Remainder", ""}, {"Power", ""},
    {"ArcTan2", ""}, {"Maximum", ""}, {"Minimum", ""}, {"NotEqual", ""}, {"Greater", ""}, {"GreaterEqual", ""},
    {"Less", ""}, {"LessEqual", ""}, {"LogicalAnd", ""}, {"LogicalOr", ""}, {"LogAddExp", ""}, {"Select", ""},
    {"Matmul", ""}, {"Full", ""},
    /* with state */
    {"Log", "i"},            /* base: two, ten, e */
    {"Sqrt", "b"},           /* recip */
    {"Equal", "b"},          /* equal_nan */
    {"BitwiseBinary", "i"},  /* And, Or, Xor, LeftShift, RightShift */
    {"AsType", "d"},
    {"Reduce", "iv"},        /* And, Or, Sum, Prod, Min, Max; axes */
    {"ArgReduce", "ii"},     /* ArgMin, ArgMax; axis */
    {"Reshape", "v"},
    {"Transpose", "v"},
    {"Broadcast", "v"},
    {"BroadcastAxes", "v"},  /* ignore_axes (negative) */
    {"ExpandDims", "v"},
    {"Squeeze", "v"},
    {"Flatten", "ii"},
    {"Unflatten", "iv"},
    {"Slice", "vvv"},        /* start, end, strides */
    {"AddMM", "ff"},         /* alpha, beta */
    {"GatherAxis", "i"},
    {"ScatterAxis", "ii"},   /* Sum, None; axis */
    {"Concatenate", "i"},
    {"Sort", "i"},
    {"ArgSort", "i"},
    {"Partition", "ii"},     /* kth, axis */
    {"ArgPartition", "ii"},
    {"Scan", "iibb"},        /* Max, Min, Sum, Prod, LogAddExp; axis, reverse, inclusive */
    {"Convolution", "vvvvvib"},
    {"QuantizedMatmul", "iiib"}, /* group size, bits, mode, transpose */
    {"Softmax", "b"},        /* precise */
    {"SearchSorted", "b"},   /* right */
    {"RandomBits", "vi"},    /* shape, width */
    {"Arange", "FFF"},       /* start, stop, step */
    {"Scatter", "iv"},       /* Max, Min, Sum, Prod, None; axes */
    /* name, source, grid, threadgroup, shape infos, ensure_row_contiguous,
     * init_value, scalar arguments, is_precompiled, shared_memory, math mode */
    {"CustomKernel", "ssiiiiiiBboSbii"},
    {"Gather", "vv"},        /* axes, slice sizes */
    {"Pad", "vvv"},          /* axes, low pad sizes, high pad sizes */
    /* the fast ops (their fallbacks are not written) */
    {"RMSNorm", "f"},        /* eps */
    {"LayerNorm", "f"},      /* eps */
    {"RoPE", "ibffb"},       /* dims, traditional, base, scale, forward */
};
#define NSCHEMAS ((int)(sizeof schemas / sizeof schemas[0]))

static const xschema *find_schema(const char *name) {
    for (int i = 0; i < NSCHEMAS; i++)
        if (!strcmp(schemas[i].name, name)) return &schemas[i];
    return NULL;
}

/* MLX writes some families under one class name (Log2 as Log, ...); its
 * reader knows only the class names, so these never appear in files. */

/* ================================================================ state */

static void xitem_free(mk_xitem *it) {
    free(it->v);
    free(it->s);
    it->v = NULL;
    it->s = NULL;
}

static void xstate_free(mk_xstate *st) {
    for (int i = 0; i < st->n; i++) xitem_free(&st->it[i]);
    st->n = 0;
}

static mk_xitem *xs_add(mk_xstate *st, char kind) {
    mk_xitem *it = &st->it[st->n++];
    memset(it, 0, sizeof *it);
    it->kind = kind;
    return it;
}
static void xs_int(mk_xstate *st, char kind, int64_t v) { xs_add(st, kind)->i = v; }
static void xs_real(mk_xstate *st, char kind, double v) { xs_add(st, kind)->f = v; }
static int xs_vec(mk_xstate *st, int n, const int64_t *v) {
    mk_xitem *it = xs_add(st, MK_XS_VEC);
    it->n = n;
    it->v = malloc((size_t)(n ? n : 1) * sizeof *it->v);
    if (!it->v) {
        mk_nomem();
        return -1;
    }
    for (int i = 0; i < n; i++) it->v[i] = (int32_t)v[i];
    return 0;
}
static int xs_str(mk_xstate *st, const char *s) {
    mk_xitem *it = xs_add(st, MK_XS_STR);
    size_t n = strlen(s);
    if (n > INT32_MAX || !(it->s = malloc(n + 1))) {
        mk_nomem();
        return -1;
    }
    memcpy(it->s, s, n + 1);
    it->n = (int)n;
    return 0;
}
static int xs_ivec(mk_xstate *st, int n, const int *v) {
    int64_t t[MK_MAX_NDIM];
    for (int i = 0; i < n; i++) t[i] = v[i];
    return xs_vec(st, n, t);
}

/* ================================================================ writer */

void mk_wbuf_free(mk_wbuf *w) {
    free(w->data);
    memset(w, 0, sizeof *w);
}

static void w_bytes(mk_wbuf *w, const void *p, size_t n) {
    if (w->err) return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n) cap *= 2;
        char *d = realloc(w->data, cap);
        if (!d) {
            w->err = true;
            return;
        }
        w->data = d;
        w->cap = cap;
    }
    if (n) memcpy(w->data + w->len, p, n);
    w->len += n;
}
/* values are written in the machine's order: mkpy builds on little-endian
 * machines only (as MLX's files are little-endian) */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "export assumes a little-endian machine");
static void w_u64(mk_wbuf *w, uint64_t v) { w_bytes(w, &v, 8); }
static void w_i32(mk_wbuf *w, int32_t v) { w_bytes(w, &v, 4); }
static void w_bool(mk_wbuf *w, bool v) {
    unsigned char b = v;
    w_bytes(w, &b, 1);
}
static void w_str(mk_wbuf *w, const char *s, size_t n) {
    w_u64(w, n);
    w_bytes(w, s, n);
}
static void w_shape(mk_wbuf *w, int ndim, const int64_t *shape) {
    w_u64(w, (uint64_t)ndim);
    for (int i = 0; i < ndim; i++) w_i32(w, (int32_t)shape[i]);
}
static void w_dtype(mk_wbuf *w, mk_dtype t) {
    w_i32(w, (int32_t)t);
    unsigned char sz = (unsigned char)mk_dtype_size(t);
    w_bytes(w, &sz, 1);
}
static void w_ids(mk_wbuf *w, int n, const uint64_t *ids) {
    w_u64(w, (uint64_t)n);
    for (int i = 0; i < n; i++) w_u64(w, ids[i]);
}

static void w_state(mk_wbuf *w, const mk_xstate *st) {
    for (int i = 0; i < st->n; i++) {
        const mk_xitem *it = &st->it[i];
        switch (it->kind) {
        case MK_XS_BOOL: w_bool(w, it->i != 0); break;
        case MK_XS_INT: w_i32(w, (int32_t)it->i); break;
        case MK_XS_SIZE: w_u64(w, (uint64_t)it->i); break;
        case MK_XS_FLOAT: {
            float f = (float)it->f;
            w_bytes(w, &f, 4);
            break;
        }
        case MK_XS_DOUBLE: w_bytes(w, &it->f, 8); break;
        case MK_XS_DTYPE: w_dtype(w, (mk_dtype)it->i); break;
        case MK_XS_VEC:
            w_u64(w, (uint64_t)it->n);
            for (int k = 0; k < it->n; k++) w_i32(w, it->v[k]);
            break;
        case MK_XS_STR: w_str(w, it->s, (size_t)it->n); break;
        case MK_XS_BOOL3S:
            w_u64(w, (uint64_t)it->n);
            for (int k = 0; k < 3 * it->n; k++) w_bool(w, it->v[k] != 0);
            break;
        case MK_XS_OPTFLOAT: {
            w_bool(w, it->i != 0);
            float f = (float)it->f;
            if (it->i) w_bytes(w, &f, 4);
            break;
        }
        case MK_XS_SCALARS: /* (tag, bits): 0 int, 1 float (bits), 2 bool */
            w_u64(w, (uint64_t)it->n);
            for (int k = 0; k < it->n; k++) {
                w_i32(w, it->v[2 * k]);
                if (it->v[2 * k] == 2)
                    w_bool(w, it->v[2 * k + 1] != 0);
                else
                    w_i32(w, it->v[2 * k + 1]);
            }
            break;
        }
    }
}

void mk_xwrite_header(mk_wbuf *w, const char *version, int count, bool shapeless, const char *metadata) {
    w_str(w, version, strlen(version));
    w_i32(w, count);
    w_bool(w, shapeless);
    w_str(w, metadata ? metadata : "", metadata ? strlen(metadata) : 0);
}

int mk_xwrite_graph(mk_wbuf *w, const mk_xgraph *g) {
    w_u64(w, (uint64_t)g->nkw);
    for (int i = 0; i < g->nkw; i++) w_str(w, g->kw[i], strlen(g->kw[i]));
    w_ids(w, g->nin, g->in_ids);
    w_u64(w, (uint64_t)g->nin);
    for (int i = 0; i < g->nin; i++) {
        w_shape(w, g->in_desc[i].ndim, g->in_desc[i].shape);
        w_dtype(w, g->in_desc[i].dtype);
    }
    w_ids(w, g->nout, g->out_ids);
    w_u64(w, (uint64_t)g->nnodes);
    for (int i = 0; i < g->nnodes; i++) {
        const mk_xnode *n = &g->nodes[i];
        w_u64(w, n->id);
        if (n->name[0]) {
            w_bool(w, true);
            w_ids(w, n->nin, n->in);
            w_i32(w, 0); /* stream index */
            w_i32(w, n->gpu); /* device: cpu, or gpu for kernels (MLX picks a stream of the device) */
            w_i32(w, 0); /* device index */
            w_str(w, n->name, strlen(n->name));
            w_state(w, &n->st);
            if (n->nout == 1) {
                w_u64(w, 0);
                w_shape(w, n->outd[0].ndim, n->outd[0].shape);
                w_dtype(w, n->outd[0].dtype);
            } else {
                w_u64(w, (uint64_t)n->nout - 1); /* the siblings: the other outputs */
                w_ids(w, n->nout, n->out_ids);
                w_u64(w, (uint64_t)n->nout);
                for (int k = 0; k < n->nout; k++) w_shape(w, n->outd[k].ndim, n->outd[k].shape);
                w_u64(w, (uint64_t)n->nout);
                for (int k = 0; k < n->nout; k++) w_dtype(w, n->outd[k].dtype);
            }
        } else {
            w_bool(w, false);
            w_bool(w, true);
            if (n->shared) continue; /* its data is in an earlier function */
            const mk_array *c = n->constant;
            w_shape(w, c->ndim, c->shape);
            w_dtype(w, c->dtype);
            w_bytes(w, c->size ? mk_data(c) : "", (size_t)c->size * mk_dtype_size(c->dtype));
        }
    }
    if (w->err) {
        mk_nomem();
        return -1;
    }
    return 0;
}

/* ================================================================ graphs */

static void xnode_free(mk_xnode *n) {
    xstate_free(&n->st);
    free(n->in);
    free(n->out_ids);
    free(n->outd);
    mk_xdecref(n->constant);
}

void mk_xgraph_free(mk_xgraph *g) {
    for (int i = 0; i < g->nkw; i++) free(g->kw[i]);
    free(g->kw);
    free(g->in_ids);
    free(g->in_desc);
    free(g->out_ids);
    free(g->out_desc);
    for (int i = 0; i < g->nnodes; i++) xnode_free(&g->nodes[i]);
    free(g->nodes);
    memset(g, 0, sizeof *g);
}

void mk_xfile_free(mk_xfile *f) {
    free(f->version);
    free(f->metadata);
    if (f->funs)
        for (int i = 0; i < f->count; i++) mk_xgraph_free(&f->funs[i]);
    free(f->funs);
    memset(f, 0, sizeof *f);
}

static mk_xnode *xg_new_node(mk_xgraph *g) {
    if (g->nnodes == g->cap) {
        int cap = g->cap ? 2 * g->cap : 32;
        mk_xnode *nn = realloc(g->nodes, (size_t)cap * sizeof *nn);
        if (!nn) return mk_nomem();
        g->nodes = nn;
        g->cap = cap;
    }
    mk_xnode *n = &g->nodes[g->nnodes++];
    memset(n, 0, sizeof *n);
    return n;
}

static void desc_of(const mk_array *a, mk_outdesc *d) {
    d->dtype = a->dtype;
    d->ndim = a->ndim;
    memcpy(d->shape, a->shape, (size_t)a->ndim * sizeof *a->shape);
}

/* ---------------------------------------------------------------- export */

/* array -> id (open addressing; keys hold a reference) */
typedef struct {
    mk_array *key;
    uint64_t id;
    int dep; /* depends on an input */
} idslot;

typedef struct {
    idslot *slots;
    size_t cap, n;
    uint64_t next_id;
    mk_xgraph *g;
    mk_xconsts *cs;
} xctx;

static size_t hash_ptr(const void *p, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static idslot *id_find(xctx *cx, const mk_array *a) {
    if (!cx->cap) return NULL;
    for (size_t h = hash_ptr(a, cx->cap);; h = (h + 1) & (cx->cap - 1)) {
        if (!cx->slots[h].key) return NULL;
        if (cx->slots[h].key == a) return &cx->slots[h];
    }
}

static idslot *id_put(xctx *cx, mk_array *a) {
    idslot *s = id_find(cx, a);
    if (s) return s;
    if (2 * (cx->n + 1) > cx->cap) {
        size_t cap = cx->cap ? 2 * cx->cap : 256;
        idslot *ns = calloc(cap, sizeof *ns);
        if (!ns) return mk_nomem();
        for (size_t i = 0; i < cx->cap; i++)
            if (cx->slots[i].key) {
                size_t h = hash_ptr(cx->slots[i].key, cap);
                while (ns[h].key) h = (h + 1) & (cap - 1);
                ns[h] = cx->slots[i];
            }
        free(cx->slots);
        cx->slots = ns;
        cx->cap = cap;
    }
    size_t h = hash_ptr(a, cx->cap);
    while (cx->slots[h].key) h = (h + 1) & (cx->cap - 1);
    mk_incref(a);
    cx->slots[h] = (idslot){a, 0, -1};
    cx->n++;
    return &cx->slots[h];
}

static void xctx_free(xctx *cx) {
    for (size_t i = 0; i < cx->cap; i++)
        if (cx->slots[i].key) mk_decref(cx->slots[i].key);
    free(cx->slots);
}

static _Thread_local bool unmapped_flag;

static int unmapped(const char *what) {
    unmapped_flag = true;
    mk_error_set(MK_ERR_RUNTIME, "[export_function] Primitive %s cannot be exported by mkpy yet.", what);
    return -1;
}

bool mk_export_unmapped(void) { return unmapped_flag; }

/* Appends a primitive node; outd/nout its outputs, which get fresh ids
 * (copied to out_ids unless NULL).
 * Takes the state (freed on failure). Returns the node or NULL. */
static mk_xnode *emit(xctx *cx, const char *name, mk_xstate *st, int nin, const uint64_t *in, int nout,
                      const mk_outdesc *outd, uint64_t *out_ids) {
    const xschema *sc = find_schema(name);
    /* the state must have the kinds the reader expects */
    bool ok = sc && (int)strlen(sc->schema) == st->n;
    for (int i = 0; ok && i < st->n; i++) ok = sc->schema[i] == st->it[i].kind;
    if (!ok) {
        xstate_free(st);
        mk_error_set(MK_ERR_RUNTIME, "[export_function] Internal error: state of %s does not match its schema.", name);
        return NULL;
    }
    mk_xnode *n = xg_new_node(cx->g);
    if (!n) {
        xstate_free(st);
        return NULL;
    }
    snprintf(n->name, sizeof n->name, "%s", name);
    n->st = *st;
    st->n = 0;
    n->nin = nin;
    n->nout = nout;
    n->in = malloc((size_t)(nin ? nin : 1) * sizeof *n->in);
    n->out_ids = malloc((size_t)nout * sizeof *n->out_ids);
    n->outd = malloc((size_t)nout * sizeof *n->outd);
    if (!n->in || !n->out_ids || !n->outd) {
        mk_nomem();
        return NULL;
    }
    if (nin) memcpy(n->in, in, (size_t)nin * sizeof *in);
    memcpy(n->outd, outd, (size_t)nout * sizeof *outd);
    for (int k = 0; k < nout; k++) {
        n->out_ids[k] = cx->next_id++;
        if (out_ids) out_ids[k] = n->out_ids[k];
    }
    n->id = n->out_ids[0];
    return n;
}

/* a one-output node with a fresh id; returns its id or 0 */
static uint64_t emit1(xctx *cx, const char *name, mk_xstate *st, int nin, const uint64_t *in, mk_dtype t, int ndim,
                      const int64_t *shape) {
    mk_outdesc d = {t, ndim, {0}};
    memcpy(d.shape, shape, (size_t)ndim * sizeof *shape);
    mk_xnode *n = emit(cx, name, st, nin, in, 1, &d, NULL);
    return n ? n->id : 0;
}

static bool same_shape(int na, const int64_t *a, int nb, const int64_t *b) {
    return na == nb && (na == 0 || !memcmp(a, b, (size_t)na * sizeof *a));
}

/* broadcasts input `which` of ins to `shape` (all but the last `ignore`
 * dims), as MLX's BroadcastAxes against the other inputs; returns its id */
static uint64_t bcast_axes(xctx *cx, int nin, mk_array *const *ins, const uint64_t *ids, int which, int ignore,
                           int ndim, const int64_t *shape) {
    const mk_array *x = ins[which];
    int64_t want[MK_MAX_NDIM];
    memcpy(want, shape, (size_t)ndim * sizeof *want);
    for (int k = 0; k < ignore; k++) want[ndim - ignore + k] = x->shape[x->ndim - ignore + k];
    if (same_shape(x->ndim, x->shape, ndim, want)) return ids[which];
    mk_xstate st = {0};
    int64_t ax[2] = {-2, -1};
    if (xs_vec(&st, ignore, ax + 2 - ignore) < 0) return 0;
    uint64_t in[8];
    int n = 0;
    in[n++] = ids[which];
    for (int i = 0; i < nin && n < 8; i++)
        if (i != which) in[n++] = ids[i];
    return emit1(cx, "BroadcastAxes", &st, n, in, x->dtype, ndim, want);
}

static const char *const unary_mlx[MK_NUNARY] = {
    [MK_UNARY_abs] = "Abs",         [MK_UNARY_negative] = "Negative", [MK_UNARY_sign] = "Sign",
    [MK_UNARY_square] = "Square",   [MK_UNARY_exp] = "Exp",           [MK_UNARY_expm1] = "Expm1",
    [MK_UNARY_log1p] = "Log1p",     [MK_UNARY_sin] = "Sin",           [MK_UNARY_cos] = "Cos",
    [MK_UNARY_tan] = "Tan",         [MK_UNARY_arcsin] = "ArcSin",     [MK_UNARY_arccos] = "ArcCos",
    [MK_UNARY_arctan] = "ArcTan",   [MK_UNARY_sinh] = "Sinh",         [MK_UNARY_cosh] = "Cosh",
    [MK_UNARY_tanh] = "Tanh",       [MK_UNARY_arcsinh] = "ArcSinh",   [MK_UNARY_arccosh] = "ArcCosh",
    [MK_UNARY_arctanh] = "ArcTanh", [MK_UNARY_sigmoid] = "Sigmoid",   [MK_UNARY_erf] = "Erf",
    [MK_UNARY_erfinv] = "ErfInv",   [MK_UNARY_floor] = "Floor",       [MK_UNARY_ceil] = "Ceil",
    [MK_UNARY_round] = "Round",     [MK_UNARY_logical_not] = "LogicalNot", [MK_UNARY_real] = "Real",
    [MK_UNARY_imag] = "Imag",       [MK_UNARY_conjugate] = "Conjugate", [MK_UNARY_stop_gradient] = "StopGradient",
};

static const char *const binary_mlx[MK_NBINARY] = {
    [MK_BINARY_add] = "Add",           [MK_BINARY_subtract] = "Subtract",   [MK_BINARY_multiply] = "Multiply",
    [MK_BINARY_divide] = "Divide",     [MK_BINARY_remainder] = "Remainder", [MK_BINARY_power] = "Power",
    [MK_BINARY_arctan2] = "ArcTan2",   [MK_BINARY_maximum] = "Maximum",     [MK_BINARY_minimum] = "Minimum",
    [MK_BINARY_not_equal] = "NotEqual", [MK_BINARY_greater] = "Greater", [MK_BINARY_greater_equal] = "GreaterEqual",
    [MK_BINARY_less] = "Less",         [MK_BINARY_less_equal] = "LessEqual", [MK_BINARY_logical_and] = "LogicalAnd",
    [MK_BINARY_logical_or] = "LogicalOr", [MK_BINARY_logaddexp] = "LogAddExp",
};

/* a strided view as Slice, Squeeze, Transpose, ExpandDims, Broadcast */
static int map_view(xctx *cx, mk_array *x, uint64_t xid, const mk_array *o, const int *map, const int64_t *mult,
                    const int64_t *start, uint64_t *out_id) {
    int nd = x->ndim, ref[MK_MAX_NDIM];
    for (int d = 0; d < nd; d++) ref[d] = -1;
    for (int k = 0; k < o->ndim; k++) {
        if (map[k] < 0) continue;
        if (map[k] >= nd || ref[map[k]] >= 0) return unmapped("view (a dimension viewed twice)");
        ref[map[k]] = k;
    }
    uint64_t cur = xid;
    mk_dtype t = x->dtype;
    int64_t s0[MK_MAX_NDIM], s1[MK_MAX_NDIM], s2[MK_MAX_NDIM], shape[MK_MAX_NDIM];
    bool slice = false;
    for (int d = 0; d < nd; d++) {
        int64_t len = ref[d] >= 0 ? o->shape[ref[d]] : 1, st = ref[d] >= 0 ? mult[ref[d]] : 1;
        if (len == 0) st = 1;
        s0[d] = start[d];
        s2[d] = st;
        s1[d] = len == 0 ? start[d] : start[d] + (len - 1) * st + (st > 0 ? 1 : -1);
        shape[d] = len;
        if (start[d] != 0 || st != 1 || len != x->shape[d]) slice = true;
    }
    mk_xstate sst = {0};
    if (slice) {
        if (xs_vec(&sst, nd, s0) < 0 || xs_vec(&sst, nd, s1) < 0 || xs_vec(&sst, nd, s2) < 0) {
            xstate_free(&sst);
            return -1;
        }
        if (!(cur = emit1(cx, "Slice", &sst, 1, &cur, t, nd, shape))) return -1;
    }
    /* drop the dims no output dim takes */
    int64_t sq[MK_MAX_NDIM], kept[MK_MAX_NDIM];
    int nsq = 0, nk = 0, kdim[MK_MAX_NDIM];
    for (int d = 0; d < nd; d++) {
        if (ref[d] < 0)
            sq[nsq++] = d;
        else {
            kdim[nk] = d;
            kept[nk++] = shape[d];
        }
    }
    if (nsq) {
        if (xs_vec(&sst, nsq, sq) < 0) return -1;
        if (!(cur = emit1(cx, "Squeeze", &sst, 1, &cur, t, nk, kept))) return -1;
    }
    /* order the kept dims as the output takes them */
    int64_t perm[MK_MAX_NDIM], pshape[MK_MAX_NDIM];
    int np = 0;
    bool ident = true;
    for (int k = 0; k < o->ndim; k++) {
        if (map[k] < 0) continue;
        int pos = 0;
        while (kdim[pos] != map[k]) pos++;
        if (pos != np) ident = false;
        pshape[np] = kept[pos];
        perm[np++] = pos;
    }
    if (!ident) {
        if (xs_vec(&sst, np, perm) < 0) return -1;
        if (!(cur = emit1(cx, "Transpose", &sst, 1, &cur, t, np, pshape))) return -1;
    }
    /* new dims */
    if (np < o->ndim) {
        int64_t ax[MK_MAX_NDIM], eshape[MK_MAX_NDIM];
        int na = 0;
        bool bc = false;
        for (int k = 0; k < o->ndim; k++) {
            eshape[k] = map[k] < 0 ? 1 : o->shape[k];
            if (map[k] < 0) {
                ax[na++] = k;
                if (o->shape[k] != 1) bc = true;
            }
        }
        if (xs_vec(&sst, na, ax) < 0) return -1;
        if (!(cur = emit1(cx, "ExpandDims", &sst, 1, &cur, t, o->ndim, eshape))) return -1;
        if (bc) {
            if (xs_vec(&sst, o->ndim, o->shape) < 0) return -1;
            if (!(cur = emit1(cx, "Broadcast", &sst, 1, &cur, t, o->ndim, o->shape))) return -1;
        }
    }
    *out_id = cur;
    return 0;
}

/* A constant scalar node (takes c); its id or 0 */
static uint64_t const_node(xctx *cx, mk_array *c) {
    if (!c) return 0;
    mk_xnode *xn = xg_new_node(cx->g);
    if (!xn) {
        mk_decref(c);
        return 0;
    }
    xn->constant = c;
    xn->id = cx->next_id++;
    return xn->id;
}

/* A metal_kernel node as MLX's CustomKernel (every output a sibling).
 * 1 when mapped, 0 when p is not a kernel, -1 on error. */
static int map_kernel(xctx *cx, mk_prim *p, uint64_t *out_ids) {
    mk_xkernel_info ki;
    int r = mk_xp_kernel(p, &ki);
    if (r <= 0) return r;
    uint64_t ids[64];
    mk_xstate st = {0};
    mk_xnode *n = NULL;
    if (p->ninputs > 64) {
        unmapped("metal_kernel (more than 64 inputs)");
        goto done;
    }
    for (int i = 0; i < p->ninputs; i++) {
        idslot *s = id_find(cx, p->inputs[i]);
        if (!s) {
            mk_error_set(MK_ERR_RUNTIME, "[export_function] Internal error: an input has no id.");
            goto done;
        }
        ids[i] = s->id;
    }
    if (xs_str(&st, ki.name) < 0 || xs_str(&st, ki.source) < 0) goto done;
    for (int d = 0; d < 3; d++) xs_int(&st, MK_XS_INT, ki.grid[d]);
    for (int d = 0; d < 3; d++) xs_int(&st, MK_XS_INT, ki.threadgroup[d]);
    mk_xitem *it = xs_add(&st, MK_XS_BOOL3S);
    if (!(it->v = malloc(sizeof *it->v * (size_t)(3 * ki.nin + 1)))) {
        mk_nomem();
        goto done;
    }
    it->n = ki.nin;
    for (int i = 0; i < ki.nin; i++)
        for (int j = 0; j < 3; j++) it->v[3 * i + j] = ki.shape_infos[i][j];
    xs_int(&st, MK_XS_BOOL, ki.ensure_row_contiguous);
    it = xs_add(&st, MK_XS_OPTFLOAT);
    it->i = ki.has_init;
    it->f = ki.init_value;
    it = xs_add(&st, MK_XS_SCALARS); /* metal kernels have none */
    if (!(it->v = malloc(sizeof *it->v))) {
        mk_nomem();
        goto done;
    }
    xs_int(&st, MK_XS_BOOL, 0); /* is_precompiled */
    xs_int(&st, MK_XS_INT, 0);  /* shared_memory */
    xs_int(&st, MK_XS_INT, ki.math_mode);
    if ((n = emit(cx, "CustomKernel", &st, p->ninputs, ids, p->noutputs, p->outdesc, out_ids))) n->gpu = true;
done:
    xstate_free(&st);
    mk_xkernel_info_free(&ki);
    return n ? 1 : -1;
}

/* Maps one mkpy primitive (whose inputs have ids) to MLX nodes. Sets
 * out_ids[k] for each output. */
static int map_prim(xctx *cx, mk_prim *p, mk_array *const *outs, uint64_t *out_ids) {
    int nin = p->ninputs;
    uint64_t ids[16];
    mk_array **ins = p->inputs;
    int kr = map_kernel(cx, p, out_ids);
    if (kr) return kr < 0 ? -1 : 0;
    if (nin > 16) return unmapped(p->op->name);
    for (int i = 0; i < nin; i++) {
        idslot *s = id_find(cx, ins[i]);
        if (!s) {
            mk_error_set(MK_ERR_RUNTIME, "[export_function] Internal error: an input has no id.");
            return -1;
        }
        ids[i] = s->id;
    }
    const mk_array *o = outs[0];
    mk_outdesc od;
    desc_of(o, &od);
    mk_xstate st = {0};
    const char *name = NULL;
    union {
        mk_binary_op b;
        mk_unary_op u;
    } op;
    int ia, ib, ic;
    bool ba, bb;
    int64_t kth;
    if (mk_xp_binary(p, &op.b)) {
        switch (op.b) {
        case MK_BINARY_equal: name = "Equal", xs_int(&st, MK_XS_BOOL, 0); break;
        case MK_BINARY_bitwise_and: name = "BitwiseBinary", xs_int(&st, MK_XS_INT, 0); break;
        case MK_BINARY_bitwise_or: name = "BitwiseBinary", xs_int(&st, MK_XS_INT, 1); break;
        case MK_BINARY_bitwise_xor: name = "BitwiseBinary", xs_int(&st, MK_XS_INT, 2); break;
        case MK_BINARY_left_shift: name = "BitwiseBinary", xs_int(&st, MK_XS_INT, 3); break;
        case MK_BINARY_right_shift: name = "BitwiseBinary", xs_int(&st, MK_XS_INT, 4); break;
        default: name = binary_mlx[op.b];
        }
        if (!name) return unmapped(mk_binary_names[op.b]);
        uint64_t b[2];
        for (int i = 0; i < 2; i++)
            if (!(b[i] = bcast_axes(cx, 2, ins, ids, i, 0, o->ndim, o->shape))) return -1;
        return emit(cx, name, &st, 2, b, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_where(p)) {
        uint64_t b[3];
        for (int i = 0; i < 3; i++)
            if (!(b[i] = bcast_axes(cx, 3, ins, ids, i, 0, o->ndim, o->shape))) return -1;
        return emit(cx, "Select", &st, 3, b, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_unary(p, &op.u)) {
        switch (op.u) {
        case MK_UNARY_log: name = "Log", xs_int(&st, MK_XS_INT, 2); break;
        case MK_UNARY_log2: name = "Log", xs_int(&st, MK_XS_INT, 0); break;
        case MK_UNARY_log10: name = "Log", xs_int(&st, MK_XS_INT, 1); break;
        case MK_UNARY_sqrt: name = "Sqrt", xs_int(&st, MK_XS_BOOL, 0); break;
        case MK_UNARY_rsqrt: name = "Sqrt", xs_int(&st, MK_XS_BOOL, 1); break;
        case MK_UNARY_isnan: { /* as MLX: x != x */
            uint64_t two[2] = {ids[0], ids[0]};
            return emit(cx, "NotEqual", &st, 2, two, 1, &od, out_ids) ? 0 : -1;
        }
        default: name = unary_mlx[op.u];
        }
        if (!name) return unmapped(mk_unary_names[op.u]);
        return emit(cx, name, &st, 1, ids, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_astype(p)) {
        xs_int(&st, MK_XS_DTYPE, o->dtype);
        return emit(cx, "AsType", &st, 1, ids, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_rowc(p)) return emit(cx, "Copy", &st, 1, ids, 1, &od, out_ids) ? 0 : -1;
    if (mk_xp_full(p)) return emit(cx, "Full", &st, 1, ids, 1, &od, out_ids) ? 0 : -1;
    bool red[MK_MAX_NDIM];
    if (mk_xp_reduce(p, &ia, red)) {
        static const int rmap[6] = {[MK_REDUCE_SUM] = 2, [MK_REDUCE_PROD] = 3, [MK_REDUCE_MAX] = 5,
                                    [MK_REDUCE_MIN] = 4, [MK_REDUCE_ALL] = 0, [MK_REDUCE_ANY] = 1};
        if (ia < 0 || ia > 5) return unmapped("argmax/argmin (arg reduction)");
        const mk_array *x = ins[0];
        int64_t axes[MK_MAX_NDIM], kshape[MK_MAX_NDIM];
        int na = 0;
        for (int d = 0; d < x->ndim; d++) {
            kshape[d] = red[d] ? 1 : x->shape[d];
            if (red[d]) axes[na++] = d;
        }
        xs_int(&st, MK_XS_INT, rmap[ia]);
        if (xs_vec(&st, na, axes) < 0) {
            xstate_free(&st);
            return -1;
        }
        if (o->ndim == x->ndim) return emit(cx, "Reduce", &st, 1, ids, 1, &od, out_ids) ? 0 : -1;
        uint64_t r = emit1(cx, "Reduce", &st, 1, ids, o->dtype, x->ndim, kshape);
        if (!r || xs_vec(&st, na, axes) < 0) return -1;
        return emit(cx, "Squeeze", &st, 1, &r, 1, &od, out_ids) ? 0 : -1;
    }
    int map[MK_MAX_NDIM];
    int64_t mult[MK_MAX_NDIM], start[MK_MAX_NDIM];
    if (mk_xp_view(p, map, mult, start)) {
        uint64_t r;
        if (map_view(cx, ins[0], ids[0], o, map, mult, start, &r) < 0) return -1;
        out_ids[0] = r;
        return 0;
    }
    int fs, fe, ua, un;
    if (mk_xp_reshape_kind(p, &fs, &fe, &ua, &un)) {
        /* MLX's Flatten and Unflatten, whose shapes follow the input in a shapeless import */
        if (fs >= 0) {
            xs_int(&st, MK_XS_INT, fs);
            xs_int(&st, MK_XS_INT, fe);
            return emit(cx, "Flatten", &st, 1, ids, 1, &od, out_ids) ? 0 : -1;
        }
        xs_int(&st, MK_XS_INT, ua);
        if (xs_vec(&st, un, o->shape + ua) < 0) return -1;
        return emit(cx, "Unflatten", &st, 1, ids, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_reshape(p, &ia)) {
        int64_t shape[MK_MAX_NDIM];
        memcpy(shape, o->shape, (size_t)o->ndim * sizeof *shape);
        if (ia >= 0 && ia < o->ndim) shape[ia] = -1;
        if (xs_vec(&st, o->ndim, shape) < 0) return -1;
        return emit(cx, "Reshape", &st, 1, ids, 1, &od, out_ids) ? 0 : -1;
    }
    float alpha, beta;
    if (mk_xp_gemm(p, &alpha, &beta, &ba)) {
        if (!ba && alpha != 1.0f) return unmapped("matmul (scaled)");
        uint64_t b[3];
        for (int i = 0; i < 2; i++)
            if (!(b[i] = bcast_axes(cx, 2, ins, ids, i, 2, o->ndim, o->shape))) return -1;
        if (!ba) return emit(cx, "Matmul", &st, 2, b, 1, &od, out_ids) ? 0 : -1;
        b[2] = ids[2];
        xs_real(&st, MK_XS_FLOAT, alpha);
        xs_real(&st, MK_XS_FLOAT, beta);
        return emit(cx, "AddMM", &st, 3, b, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_take_axis(p, &ia)) {
        /* x and the indices broadcast against each other but along axis */
        uint64_t b[2];
        int nd = o->ndim;
        for (int i = 0; i < 2; i++) {
            const mk_array *a = ins[i];
            int64_t want[MK_MAX_NDIM];
            memcpy(want, o->shape, (size_t)nd * sizeof *want);
            want[ia] = a->shape[ia];
            if (same_shape(a->ndim, a->shape, nd, want)) {
                b[i] = ids[i];
                continue;
            }
            int64_t ig = ia - nd;
            if (xs_vec(&st, 1, &ig) < 0) return -1;
            uint64_t in2[2] = {ids[i], ids[1 - i]};
            if (!(b[i] = emit1(cx, "BroadcastAxes", &st, 2, in2, a->dtype, nd, want))) return -1;
        }
        xs_int(&st, MK_XS_INT, ia);
        return emit(cx, "GatherAxis", &st, 2, b, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_put_axis(p, &ia, &ib)) {
        if (ib != MK_SCATTER_NONE && ib != MK_SCATTER_SUM) return unmapped("put_along_axis (reduction)");
        xs_int(&st, MK_XS_INT, ib == MK_SCATTER_SUM ? 0 : 1);
        xs_int(&st, MK_XS_INT, ia);
        return emit(cx, "ScatterAxis", &st, 3, ids, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_concat(p, &ia)) {
        xs_int(&st, MK_XS_INT, ia);
        return emit(cx, "Concatenate", &st, nin, ids, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_sort(p, &ia, &ib, &kth)) {
        static const char *const sn[4] = {"Sort", "ArgSort", "Partition", "ArgPartition"};
        if (ia < 0 || ia > 3) return unmapped("sort");
        if (ia >= 2) xs_int(&st, MK_XS_INT, kth);
        xs_int(&st, MK_XS_INT, ib);
        return emit(cx, sn[ia], &st, 1, ids, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_searchsorted(p, &ba)) {
        xs_int(&st, MK_XS_BOOL, ba);
        return emit(cx, "SearchSorted", &st, 2, ids, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_scan(p, &ia, &ib, &ba, &bb)) {
        static const int smap[5] = {[MK_SCAN_SUM] = 2, [MK_SCAN_PROD] = 3, [MK_SCAN_MAX] = 0, [MK_SCAN_MIN] = 1,
                                    [MK_SCAN_LOGADDEXP] = 4};
        xs_int(&st, MK_XS_INT, smap[ia]);
        xs_int(&st, MK_XS_INT, ib);
        xs_int(&st, MK_XS_BOOL, ba);
        xs_int(&st, MK_XS_BOOL, bb);
        return emit(cx, "Scan", &st, 1, ids, 1, &od, out_ids) ? 0 : -1;
    }
    int cs[3], pl[3], ph[3], kd[3], id[3];
    if (mk_xp_conv(p, &ia, cs, pl, ph, kd, id, &ic, &ba)) {
        if (xs_ivec(&st, ia, cs) < 0 || xs_ivec(&st, ia, pl) < 0 || xs_ivec(&st, ia, ph) < 0 ||
            xs_ivec(&st, ia, kd) < 0 || xs_ivec(&st, ia, id) < 0) {
            xstate_free(&st);
            return -1;
        }
        xs_int(&st, MK_XS_INT, ic);
        xs_int(&st, MK_XS_BOOL, ba);
        return emit(cx, "Convolution", &st, 2, ids, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_qmm(p, &ia, &ib, &ic, &ba)) {
        xs_int(&st, MK_XS_INT, ia);
        xs_int(&st, MK_XS_INT, ib);
        xs_int(&st, MK_XS_INT, ic);
        xs_int(&st, MK_XS_BOOL, ba);
        return emit(cx, "QuantizedMatmul", &st, nin, ids, 1, &od, out_ids) ? 0 : -1;
    }
    mk_index_dim dims[MK_MAX_NDIM];
    if (mk_xp_gather(p, &ia, &ib, dims)) {
        /* MLX's Gather(axes, slice_sizes) on x sliced first: the index arrays
         * (broadcast to B) pick along the axes, the other dims are taken whole;
         * its output B + slice_sizes then loses the picked dims and B moves to
         * mkpy's position (bpos) */
        const mk_array *x = ins[0];
        int nd = x->ndim, narr = ia, bpos = ib;
        int64_t B[MK_MAX_NDIM];
        int nB = 0;
        bool used[MK_MAX_NDIM] = {false};
        if (narr < 1 || narr > nd) return unmapped("gather (this indexing pattern)");
        for (int d = 0; d < nd; d++)
            if (dims[d].kind == MK_IDX_ARRAY) {
                if (dims[d].arr < 0 || dims[d].arr >= narr || used[dims[d].arr])
                    return unmapped("gather (this indexing pattern)");
                used[dims[d].arr] = true;
            }
        for (int k = 0; k < narr; k++) {
            int64_t t[MK_MAX_NDIM];
            if (!used[k]) return unmapped("gather (this indexing pattern)");
            if ((nB = mk_broadcast_shapes(nB, B, ins[1 + k]->ndim, ins[1 + k]->shape, t)) < 0) return -1;
            memcpy(B, t, (size_t)nB * sizeof *t);
        }
        if (nB + nd > MK_MAX_NDIM) return unmapped("gather (too many dimensions)");
        int64_t s0[MK_MAX_NDIM], s1[MK_MAX_NDIM], s2[MK_MAX_NDIM], xs[MK_MAX_NDIM];
        bool slice = false;
        for (int d = 0; d < nd; d++) {
            const mk_index_dim *q = &dims[d];
            if (q->kind == MK_IDX_SLICE) {
                int64_t len = q->len, st = len ? q->step : 1;
                s0[d] = q->start, s2[d] = st, xs[d] = len;
                s1[d] = len == 0 ? q->start : q->start + (len - 1) * st + (st > 0 ? 1 : -1);
            } else if (q->kind == MK_IDX_INT) {
                s0[d] = q->start, s1[d] = q->start + 1, s2[d] = 1, xs[d] = 1;
            } else {
                s0[d] = 0, s1[d] = x->shape[d], s2[d] = 1, xs[d] = x->shape[d];
            }
            if (s0[d] != 0 || s2[d] != 1 || xs[d] != x->shape[d]) slice = true;
        }
        uint64_t in[MK_MAX_NDIM + 1], cur = ids[0];
        if (slice) {
            if (xs_vec(&st, nd, s0) < 0 || xs_vec(&st, nd, s1) < 0 || xs_vec(&st, nd, s2) < 0) {
                xstate_free(&st);
                return -1;
            }
            if (!(cur = emit1(cx, "Slice", &st, 1, &cur, x->dtype, nd, xs))) return -1;
        }
        in[0] = cur;
        int64_t axes[MK_MAX_NDIM], sizes[MK_MAX_NDIM], gshape[MK_MAX_NDIM];
        int na = 0;
        for (int d = 0; d < nd; d++) {
            sizes[d] = dims[d].kind == MK_IDX_SLICE ? xs[d] : 1;
            if (dims[d].kind != MK_IDX_ARRAY) continue;
            const mk_array *a = ins[1 + dims[d].arr];
            uint64_t aid = ids[1 + dims[d].arr];
            if (!same_shape(a->ndim, a->shape, nB, B)) {
                if (xs_vec(&st, nB, B) < 0) return -1;
                if (!(aid = emit1(cx, "Broadcast", &st, 1, &aid, a->dtype, nB, B))) return -1;
            }
            axes[na] = d;
            in[1 + na++] = aid;
        }
        memcpy(gshape, B, (size_t)nB * sizeof *B);
        memcpy(gshape + nB, sizes, (size_t)nd * sizeof *sizes);
        if (xs_vec(&st, na, axes) < 0 || xs_vec(&st, nd, sizes) < 0) {
            xstate_free(&st);
            return -1;
        }
        if (!(cur = emit1(cx, "Gather", &st, na + 1, in, x->dtype, nB + nd, gshape))) return -1;
        /* drop the picked and the integer-indexed dims */
        int64_t sq[MK_MAX_NDIM], rest[MK_MAX_NDIM];
        int nsq = 0, nr = 0;
        for (int d = 0; d < nd; d++) {
            if (dims[d].kind == MK_IDX_SLICE)
                rest[nr++] = xs[d];
            else
                sq[nsq++] = nB + d;
        }
        int64_t shape2[MK_MAX_NDIM];
        memcpy(shape2, B, (size_t)nB * sizeof *B);
        memcpy(shape2 + nB, rest, (size_t)nr * sizeof *rest);
        if (xs_vec(&st, nsq, sq) < 0) return -1;
        if (!(cur = emit1(cx, "Squeeze", &st, 1, &cur, x->dtype, nB + nr, shape2))) return -1;
        if (bpos > 0 && nB > 0) {
            /* B + rest -> rest[:bpos] + B + rest[bpos:] */
            int64_t perm[MK_MAX_NDIM];
            int m = 0;
            for (int r = 0; r < bpos; r++) perm[m++] = nB + r;
            for (int j = 0; j < nB; j++) perm[m++] = j;
            for (int r = bpos; r < nr; r++) perm[m++] = nB + r;
            if (xs_vec(&st, m, perm) < 0) return -1;
            if (!(cur = emit1(cx, "Transpose", &st, 1, &cur, x->dtype, o->ndim, o->shape))) return -1;
        }
        out_ids[0] = cur;
        return 0;
    }
    float eps, base, scale;
    if (mk_xp_norm(p, &ba, &eps)) {
        /* as MLX on a GPU: RMSNorm(x, w) and LayerNorm(x, w, b) on x cast to
         * the output dtype, 1 for a missing weight and 0 for a missing bias;
         * (on a CPU stream MLX writes the fallback's ops instead) */
        uint64_t in[3];
        in[0] = ids[0];
        if (ins[0]->dtype != o->dtype) {
            xs_int(&st, MK_XS_DTYPE, o->dtype);
            if (!(in[0] = emit1(cx, "AsType", &st, 1, ids, o->dtype, ins[0]->ndim, ins[0]->shape))) return -1;
        }
        in[1] = nin > 1 ? ids[1] : const_node(cx, mk_scalar_f64(o->dtype, 1.0));
        int n = 2;
        if (ba) {
            in[2] = nin > 2 ? ids[2] : const_node(cx, mk_scalar_f64(o->dtype, 0.0));
            n = 3;
        }
        if (!in[1] || (ba && !in[2])) return -1;
        xs_real(&st, MK_XS_FLOAT, eps);
        mk_xnode *xn = emit(cx, ba ? "LayerNorm" : "RMSNorm", &st, n, in, 1, &od, out_ids);
        if (xn) xn->gpu = true;
        return xn ? 0 : -1;
    }
    if (mk_xp_rope(p, &kth, &ba, &base, &scale)) {
        uint64_t in[3] = {ids[0], ids[1], nin > 2 ? ids[2] : 0};
        if (kth > INT32_MAX) return unmapped("rope (dims)");
        if (ins[1]->dtype != MK_INT32) { /* MLX's offsets are int32 */
            xs_int(&st, MK_XS_DTYPE, MK_INT32);
            if (!(in[1] = emit1(cx, "AsType", &st, 1, &ids[1], MK_INT32, ins[1]->ndim, ins[1]->shape))) return -1;
        }
        xs_int(&st, MK_XS_INT, kth);
        xs_int(&st, MK_XS_BOOL, ba);
        xs_real(&st, MK_XS_FLOAT, base);
        xs_real(&st, MK_XS_FLOAT, scale);
        xs_int(&st, MK_XS_BOOL, 1); /* forward */
        mk_xnode *xn = emit(cx, "RoPE", &st, nin, in, 1, &od, out_ids);
        if (xn) xn->gpu = true;
        return xn ? 0 : -1;
    }
    int64_t padw[MK_MAX_NDIM][2];
    if (mk_xp_pad(p, &ia, padw)) {
        /* MLX's Pad is the constant mode on (x, value); its other modes are
         * other ops there */
        if (ia != MK_PAD_CONSTANT || nin != 2) return unmapped("pad (this mode)");
        int64_t ax[MK_MAX_NDIM], lo[MK_MAX_NDIM], hi[MK_MAX_NDIM];
        for (int d = 0; d < o->ndim; d++) ax[d] = d, lo[d] = padw[d][0], hi[d] = padw[d][1];
        if (xs_vec(&st, o->ndim, ax) < 0 || xs_vec(&st, o->ndim, lo) < 0 || xs_vec(&st, o->ndim, hi) < 0) {
            xstate_free(&st);
            return -1;
        }
        return emit(cx, "Pad", &st, 2, ids, 1, &od, out_ids) ? 0 : -1;
    }
    if (mk_xp_scatter(p, &ia, &ib, &ic, dims)) {
        /* MLX's Scatter(axes) covers index arrays on the leading dims, in
         * order, with full slices after them and the index dims first */
        static const int scmap[5] = {[MK_SCATTER_NONE] = 4, [MK_SCATTER_SUM] = 2, [MK_SCATTER_PROD] = 3,
                                     [MK_SCATTER_MAX] = 0, [MK_SCATTER_MIN] = 1};
        const mk_array *x = ins[0], *u = ins[nin - 1];
        bool ok = ic == 0 && ib >= 1 && ib <= x->ndim && ia >= 0 && ia <= 4;
        for (int d = 0; ok && d < x->ndim; d++)
            ok = d < ib ? dims[d].kind == MK_IDX_ARRAY && dims[d].arr == d
                        : dims[d].kind == MK_IDX_SLICE && dims[d].start == 0 && dims[d].step == 1 &&
                              dims[d].len == x->shape[d];
        if (!ok) return unmapped("scatter (this indexing pattern)");
        int nb = u->ndim - (x->ndim - ib); /* the index arrays' broadcast dims */
        if (nb < 0 || u->ndim + ib > MK_MAX_NDIM) return unmapped("scatter (this indexing pattern)");
        uint64_t in[MK_MAX_NDIM + 2];
        in[0] = ids[0];
        for (int k = 0; k < ib; k++) {
            const mk_array *a = ins[1 + k];
            if (same_shape(a->ndim, a->shape, nb, u->shape)) {
                in[1 + k] = ids[1 + k];
                continue;
            }
            if (xs_vec(&st, nb, u->shape) < 0) return -1;
            if (!(in[1 + k] = emit1(cx, "Broadcast", &st, 1, &ids[1 + k], a->dtype, nb, u->shape))) return -1;
        }
        int64_t ax[MK_MAX_NDIM], ushape[MK_MAX_NDIM];
        int m = 0;
        for (int d = 0; d < nb; d++) ushape[m++] = u->shape[d];
        for (int k = 0; k < ib; k++) ax[k] = nb + k, ushape[m++] = 1;
        for (int d = nb; d < u->ndim; d++) ushape[m++] = u->shape[d];
        if (xs_vec(&st, ib, ax) < 0) return -1;
        if (!(in[1 + ib] = emit1(cx, "ExpandDims", &st, 1, &ids[nin - 1], u->dtype, m, ushape))) return -1;
        xs_int(&st, MK_XS_INT, scmap[ia]);
        for (int k = 0; k < ib; k++) ax[k] = k;
        if (xs_vec(&st, ib, ax) < 0) {
            xstate_free(&st);
            return -1;
        }
        return emit(cx, "Scatter", &st, ib + 2, in, 1, &od, out_ids) ? 0 : -1;
    }
    return unmapped(p->op->name);
}

/* Is the array (transitively) computed from an input? Iterative DFS that
 * fills dep for every node met; inputs are pre-marked 1. */
typedef struct {
    mk_array *a;
    int next;
} frame;

/* Pushes a frame for `a`, growing the stack; -1 when out of memory. */
static int push_frame(frame **stk, size_t *n, size_t *cap, mk_array *a) {
    if (*n == *cap) {
        frame *ns = realloc(*stk, *cap * 2 * sizeof **stk);
        if (!ns) {
            mk_nomem();
            return -1;
        }
        *stk = ns;
        *cap *= 2;
    }
    (*stk)[(*n)++] = (frame){a, 0};
    return 0;
}

static int mark_deps(xctx *cx, mk_array *root) {
    size_t cap = 64, n = 0;
    frame *stk = malloc(cap * sizeof *stk);
    if (!stk) {
        mk_nomem();
        return -1;
    }
    idslot *s = id_put(cx, root);
    if (!s) goto fail;
    if (s->dep >= 0) {
        free(stk);
        return 0;
    }
    stk[n++] = (frame){root, 0};
    while (n) {
        frame *f = &stk[n - 1];
        mk_prim *p = f->a->prim;
        if (p && f->next < p->ninputs) {
            mk_array *in = p->inputs[f->next++];
            idslot *si = id_put(cx, in);
            if (!si) goto fail;
            if (si->dep < 0 && push_frame(&stk, &n, &cap, in) < 0) goto fail;
            continue;
        }
        int dep = 0;
        if (p)
            for (int k = 0; k < p->ninputs; k++) dep |= id_find(cx, p->inputs[k])->dep > 0;
        id_find(cx, f->a)->dep = dep;
        n--;
    }
    free(stk);
    return 0;
fail:
    free(stk);
    return -1;
}

/* Emits the node of `a` after its inputs' (post-order walk). */
static int emit_all(xctx *cx, mk_array *root) {
    size_t cap = 64, n = 0;
    frame *stk = malloc(cap * sizeof *stk);
    if (!stk) {
        mk_nomem();
        return -1;
    }
    stk[n++] = (frame){root, 0};
    while (n) {
        frame *f = &stk[n - 1];
        idslot *s = id_find(cx, f->a);
        if (s->id) {
            n--;
            continue;
        }
        mk_prim *p = f->a->prim;
        if (p && f->next < p->ninputs) {
            mk_array *in = p->inputs[f->next++];
            if (!id_find(cx, in)->id && push_frame(&stk, &n, &cap, in) < 0) goto fail;
            continue;
        }
        n--;
        int saved = cx->g->nnodes;
        if (s->dep <= 0 && p) {
            /* input-free: as MLX, the primitive over its constant inputs
             * when mkpy can map it; else its value as a constant */
            uint64_t oid[1] = {0};
            if (p->noutputs == 1) {
                if (map_prim(cx, p, &f->a, oid) == 0) {
                    s = id_find(cx, f->a);
                    s->id = oid[0];
                    continue;
                }
                if (!unmapped_flag) goto fail;
            }
            unmapped_flag = false;
            mk_error_clear();
            while (cx->g->nnodes > saved) xnode_free(&cx->g->nodes[--cx->g->nnodes]);
        }
        if (s->dep <= 0) {
            /* a constant: its value now, row contiguous */
            mk_array *c = mk_contiguous(f->a, false);
            if (!c) goto fail;
            if (mk_eval1(c) < 0 || !(c->flags & MK_ROW_CONTIG)) {
                if (!(c->flags & MK_ROW_CONTIG) && mk_is_evaluated(c))
                    mk_error_set(MK_ERR_RUNTIME, "[export_function] Internal error: constant not contiguous.");
                mk_decref(c);
                goto fail;
            }
            mk_xnode *xn = xg_new_node(cx->g);
            if (!xn) {
                mk_decref(c);
                goto fail;
            }
            mk_xconsts *cs = cx->cs;
            int k = 0;
            while (k < cs->n && cs->keys[k] != f->a) k++;
            if (k < cs->n) {
                mk_decref(c);
                mk_incref(cs->vals[k]);
                xn->constant = cs->vals[k];
                xn->shared = true;
                xn->id = s->id = cs->ids[k];
                continue;
            }
            xn->constant = c;
            xn->id = s->id = cx->next_id++;
            if (cs->n == cs->cap) {
                int cap = cs->cap ? 2 * cs->cap : 16;
                mk_array **nk = realloc(cs->keys, (size_t)cap * sizeof *nk);
                if (nk) cs->keys = nk;
                mk_array **nv = nk ? realloc(cs->vals, (size_t)cap * sizeof *nv) : NULL;
                if (nv) cs->vals = nv;
                uint64_t *ni = nv ? realloc(cs->ids, (size_t)cap * sizeof *ni) : NULL;
                if (!ni) {
                    mk_nomem();
                    goto fail;
                }
                cs->ids = ni;
                cs->cap = cap;
            }
            mk_incref(f->a);
            mk_incref(c);
            cs->keys[cs->n] = f->a;
            cs->vals[cs->n] = c;
            cs->ids[cs->n++] = xn->id;
            continue;
        }
        /* every output of the primitive gets its id at once */
        mk_array *outs[64];
        int no = p->noutputs;
        if (no > 64) {
            unmapped(p->op->name);
            goto fail;
        }
        for (int k = 0; k < no; k++) outs[k] = p->outputs[k];
        if (!outs[f->a->out_index]) outs[f->a->out_index] = f->a;
        uint64_t oid[64] = {0};
        if (no > 1) {
            /* siblings: only kernels so far (their dropped outputs keep
             * their descriptors in p->outdesc) */
            int kr = map_kernel(cx, p, oid);
            if (kr <= 0) {
                if (kr == 0) unmapped(p->op->name);
                goto fail;
            }
            int dep = s->dep;
            for (int k = 0; k < no; k++) {
                if (!outs[k]) continue;
                idslot *so = id_put(cx, outs[k]);
                if (!so) goto fail;
                so->id = oid[k];
                so->dep = dep;
            }
            continue;
        }
        for (int k = 0; k < no; k++)
            if (!outs[k]) {
                unmapped(p->op->name); /* a dropped sibling output */
                goto fail;
            }
        if (map_prim(cx, p, outs, oid) < 0) goto fail;
        s = id_find(cx, f->a);
        s->id = oid[0];
    }
    free(stk);
    return 0;
fail:
    free(stk);
    return -1;
}

void mk_xconsts_free(mk_xconsts *c) {
    for (int i = 0; i < c->n; i++) {
        mk_decref(c->keys[i]);
        mk_decref(c->vals[i]);
    }
    free(c->keys);
    free(c->vals);
    free(c->ids);
    memset(c, 0, sizeof *c);
}

int mk_export_graph(int nin, mk_array *const *tracers, int nout, mk_array *const *outs, mk_xconsts *cs,
                    mk_xgraph *g) {
    xctx cx = {0};
    if (!cs->next_id) cs->next_id = 1;
    cx.next_id = cs->next_id;
    cx.g = g;
    cx.cs = cs;
    unmapped_flag = false;
    g->nin = nin;
    g->nout = nout;
    g->in_ids = malloc((size_t)(nin ? nin : 1) * sizeof *g->in_ids);
    g->in_desc = malloc((size_t)(nin ? nin : 1) * sizeof *g->in_desc);
    g->out_ids = malloc((size_t)(nout ? nout : 1) * sizeof *g->out_ids);
    g->out_desc = malloc((size_t)(nout ? nout : 1) * sizeof *g->out_desc);
    if (!g->in_ids || !g->in_desc || !g->out_ids || !g->out_desc) {
        mk_nomem();
        goto fail;
    }
    for (int i = 0; i < nin; i++) {
        idslot *s = id_put(&cx, tracers[i]);
        if (!s) goto fail;
        if (!s->id) s->id = cx.next_id++;
        s->dep = 1;
        g->in_ids[i] = s->id;
        desc_of(tracers[i], &g->in_desc[i]);
    }
    for (int j = 0; j < nout; j++)
        if (mark_deps(&cx, outs[j]) < 0) goto fail;
    for (int j = 0; j < nout; j++) {
        if (emit_all(&cx, outs[j]) < 0) goto fail;
        g->out_ids[j] = id_find(&cx, outs[j])->id;
        desc_of(outs[j], &g->out_desc[j]);
    }
    cs->next_id = cx.next_id;
    xctx_free(&cx);
    return 0;
fail:
    cs->next_id = cx.next_id;
    xctx_free(&cx);
    return -1;
}

/* ================================================================ reader */

typedef struct {
    const unsigned char *p;
    size_t len, pos;
    bool err;
} rbuf;

static int bad_file(rbuf *r, const char *what) {
    if (!r->err)
        mk_error_set(MK_ERR_VALUE, "[import_function] Invalid or truncated file: %s at byte %zu.", what, r->pos);
    r->err = true;
    return -1;
}

static bool r_take(rbuf *r, void *dst, size_t n, const char *what) {
    if (r->err) return false;
    if (n > r->len - r->pos) {
        bad_file(r, what);
        return false;
    }
    memcpy(dst, r->p + r->pos, n);
    r->pos += n;
    return true;
}
static uint64_t r_u64(rbuf *r, const char *what) {
    uint64_t v = 0;
    r_take(r, &v, 8, what);
    return v;
}
static int32_t r_i32(rbuf *r, const char *what) {
    int32_t v = 0;
    r_take(r, &v, 4, what);
    return v;
}
static bool r_bool(rbuf *r, const char *what) {
    unsigned char b = 0;
    r_take(r, &b, 1, what);
    if (b > 1) bad_file(r, what);
    return b;
}
/* a count of items of at least `item` bytes each, bounded by the bytes left */
static int r_count(rbuf *r, size_t item, size_t limit, const char *what) {
    uint64_t n = r_u64(r, what);
    if (r->err) return -1;
    if (n > limit || (item && n > (r->len - r->pos) / item)) {
        bad_file(r, what);
        return -1;
    }
    return (int)n;
}
static char *r_str(rbuf *r, size_t *len, const char *what) {
    int n = r_count(r, 1, (size_t)1 << 30, what);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) {
        r->err = true;
        mk_nomem();
        return NULL;
    }
    if (!r_take(r, s, (size_t)n, what)) {
        free(s);
        return NULL;
    }
    s[n] = 0;
    if (len) *len = (size_t)n;
    return s;
}
static int r_shape(rbuf *r, int64_t *shape, const char *what) {
    int n = r_count(r, 4, MK_MAX_NDIM, what);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) {
        shape[i] = r_i32(r, what);
        if (shape[i] < 0) return bad_file(r, what);
    }
    return r->err ? -1 : n;
}
static int r_dtype(rbuf *r, mk_dtype *t, const char *what) {
    int32_t v = r_i32(r, what);
    unsigned char sz = 0;
    r_take(r, &sz, 1, what);
    if (r->err) return -1;
    if (v < 0 || v >= MK_NDTYPES || sz != mk_dtype_size((mk_dtype)v)) return bad_file(r, what);
    *t = (mk_dtype)v;
    return 0;
}
static int r_desc(rbuf *r, mk_outdesc *d, const char *what) {
    int n = r_shape(r, d->shape, what);
    if (n < 0) return -1;
    d->ndim = n;
    if (mk_shape_size(n, d->shape) < 0) return bad_file(r, what);
    return r_dtype(r, &d->dtype, what);
}
static uint64_t *r_ids(rbuf *r, int *n, const char *what) {
    *n = r_count(r, 8, (size_t)1 << 28, what);
    if (*n < 0) return NULL;
    uint64_t *ids = malloc((size_t)(*n ? *n : 1) * sizeof *ids);
    if (!ids) {
        r->err = true;
        mk_nomem();
        return NULL;
    }
    for (int i = 0; i < *n; i++) ids[i] = r_u64(r, what);
    if (r->err) {
        free(ids);
        return NULL;
    }
    return ids;
}

static int r_state(rbuf *r, const char *schema, mk_xstate *st) {
    for (const char *k = schema; *k; k++) {
        mk_xitem *it = xs_add(st, *k);
        switch (*k) {
        case MK_XS_BOOL: it->i = r_bool(r, "a state value"); break;
        case MK_XS_INT: it->i = r_i32(r, "a state value"); break;
        case MK_XS_SIZE: it->i = (int64_t)r_u64(r, "a state value"); break;
        case MK_XS_FLOAT: {
            float f = 0;
            r_take(r, &f, 4, "a state value");
            it->f = f;
            break;
        }
        case MK_XS_DOUBLE: r_take(r, &it->f, 8, "a state value"); break;
        case MK_XS_DTYPE: {
            mk_dtype t = MK_BOOL;
            r_dtype(r, &t, "a state dtype");
            it->i = t;
            break;
        }
        case MK_XS_VEC: {
            int n = r_count(r, 4, 1 << 20, "a state vector");
            if (n < 0) return -1;
            it->n = n;
            if (!(it->v = malloc((size_t)(n ? n : 1) * sizeof *it->v))) {
                mk_nomem();
                r->err = true;
                return -1;
            }
            for (int i = 0; i < n; i++) it->v[i] = r_i32(r, "a state vector");
            break;
        }
        case MK_XS_STR: {
            size_t n = 0;
            it->s = r_str(r, &n, "a state string");
            it->n = (int)n;
            break;
        }
        case MK_XS_BOOL3S: {
            int n = r_count(r, 3, 1 << 20, "a state vector");
            if (n < 0) return -1;
            it->n = n;
            if (!(it->v = malloc((size_t)(3 * n + 1) * sizeof *it->v))) {
                mk_nomem();
                r->err = true;
                return -1;
            }
            for (int i = 0; i < 3 * n; i++) it->v[i] = r_bool(r, "a state vector");
            break;
        }
        case MK_XS_OPTFLOAT: {
            it->i = r_bool(r, "a state value");
            float f = 0;
            if (it->i) r_take(r, &f, 4, "a state value");
            it->f = f;
            break;
        }
        case MK_XS_SCALARS: {
            int n = r_count(r, 5, 1 << 20, "a state vector");
            if (n < 0) return -1;
            it->n = n;
            if (!(it->v = malloc((size_t)(2 * n + 1) * sizeof *it->v))) {
                mk_nomem();
                r->err = true;
                return -1;
            }
            for (int i = 0; i < n && !r->err; i++) {
                int32_t tag = r_i32(r, "a scalar argument");
                if (tag < 0 || tag > 2) return bad_file(r, "a scalar argument");
                it->v[2 * i] = tag;
                it->v[2 * i + 1] = tag == 2 ? r_bool(r, "a scalar argument") : r_i32(r, "a scalar argument");
            }
            break;
        }
        }
        if (r->err) return -1;
    }
    return 0;
}

/* id -> position lookups while reading: ids of one function */
static bool id_known(const uint64_t *known, int n, uint64_t id) {
    for (int i = n - 1; i >= 0; i--)
        if (known[i] == id) return true;
    return false;
}

/* the constants read so far in a file, shared by id across its functions */
typedef struct {
    uint64_t *ids;
    mk_array **vals; /* borrowed from the nodes that own them */
    int n, cap;
} rconsts;

static int read_graph(rbuf *r, mk_xgraph *g, rconsts *rc) {
    uint64_t *known = NULL;
    size_t nknown = 0, capk = 0;
#define KNOW(x)                                                                                                    \
    do {                                                                                                           \
        if (nknown == capk) {                                                                                      \
            capk = capk ? 2 * capk : 64;                                                                           \
            uint64_t *nk = realloc(known, capk * sizeof *nk);                                                      \
            if (!nk) {                                                                                             \
                mk_nomem();                                                                                        \
                goto fail;                                                                                         \
            }                                                                                                      \
            known = nk;                                                                                            \
        }                                                                                                          \
        known[nknown++] = (x);                                                                                     \
    } while (0)
    int nkw = r_count(r, 8, 1 << 16, "the keyword count");
    if (nkw < 0) goto fail;
    g->kw = calloc((size_t)(nkw ? nkw : 1), sizeof *g->kw);
    if (!g->kw) {
        mk_nomem();
        goto fail;
    }
    for (int i = 0; i < nkw; i++) {
        if (!(g->kw[i] = r_str(r, NULL, "a keyword name"))) goto fail;
        g->nkw++;
    }
    int n;
    if (!(g->in_ids = r_ids(r, &n, "the input ids"))) goto fail;
    g->nin = n;
    int nd = r_count(r, 13, 1 << 28, "the input descriptors");
    if (nd < 0) goto fail;
    if (nd != g->nin || nkw > g->nin) {
        bad_file(r, "the input descriptors");
        goto fail;
    }
    if (!(g->in_desc = malloc((size_t)(nd ? nd : 1) * sizeof *g->in_desc))) {
        mk_nomem();
        goto fail;
    }
    for (int i = 0; i < nd; i++) {
        if (r_desc(r, &g->in_desc[i], "an input descriptor") < 0) goto fail;
        KNOW(g->in_ids[i]);
    }
    if (!(g->out_ids = r_ids(r, &n, "the output ids"))) goto fail;
    g->nout = n;
    int ntape = r_count(r, 9, 1 << 28, "the tape size");
    if (ntape < 0) goto fail;
    for (int t = 0; t < ntape; t++) {
        uint64_t id = r_u64(r, "a tape id");
        bool has_prim = r_bool(r, "a tape entry");
        if (r->err) goto fail;
        if (!has_prim) {
            bool is_const = r_bool(r, "a tape entry");
            if (r->err) goto fail;
            if (!is_const) {
                if (!id_known(known, (int)nknown, id)) {
                    bad_file(r, "an unknown input id");
                    goto fail;
                }
                continue;
            }
            int k = 0;
            while (k < rc->n && rc->ids[k] != id) k++;
            if (k < rc->n) {
                mk_xnode *xn = xg_new_node(g);
                if (!xn) goto fail;
                xn->id = id;
                mk_incref(rc->vals[k]);
                xn->constant = rc->vals[k];
                xn->shared = true;
                KNOW(id);
                continue;
            }
            mk_outdesc d;
            if (r_desc(r, &d, "a constant's descriptor") < 0) goto fail;
            int64_t nb = mk_shape_size(d.ndim, d.shape) * (int64_t)mk_dtype_size(d.dtype);
            if (nb < 0 || (uint64_t)nb > r->len - r->pos) {
                bad_file(r, "a constant's data");
                goto fail;
            }
            mk_array *c = mk_array_empty(d.dtype, d.ndim, d.shape);
            if (!c) goto fail;
            if (nb) memcpy(mk_data(c), r->p + r->pos, (size_t)nb);
            r->pos += (size_t)nb;
            mk_xnode *xn = xg_new_node(g);
            if (!xn) {
                mk_decref(c);
                goto fail;
            }
            xn->id = id;
            xn->constant = c;
            KNOW(id);
            if (rc->n == rc->cap) {
                int cap = rc->cap ? 2 * rc->cap : 16;
                uint64_t *ni = realloc(rc->ids, (size_t)cap * sizeof *ni);
                if (ni) rc->ids = ni;
                mk_array **nv = ni ? realloc(rc->vals, (size_t)cap * sizeof *nv) : NULL;
                if (!nv) {
                    mk_nomem();
                    goto fail;
                }
                rc->vals = nv;
                rc->cap = cap;
            }
            rc->ids[rc->n] = id;
            rc->vals[rc->n++] = c;
            continue;
        }
        mk_xnode *xn = xg_new_node(g);
        if (!xn) goto fail;
        xn->id = id;
        if (!(xn->in = r_ids(r, &n, "a node's input ids"))) goto fail;
        xn->nin = n;
        for (int i = 0; i < n; i++)
            if (!id_known(known, (int)nknown, xn->in[i])) {
                bad_file(r, "a node input that is not defined before it");
                goto fail;
            }
        r_i32(r, "a stream");
        r_i32(r, "a stream");
        r_i32(r, "a stream");
        char *name = r_str(r, NULL, "a primitive name");
        if (!name) goto fail;
        const xschema *sc = find_schema(name);
        if (!sc) {
            mk_error_set(MK_ERR_VALUE, "[import_function] Unable to deserialize primitive %.200s (mkpy cannot rebuild it).",
                         name);
            free(name);
            r->err = true;
            goto fail;
        }
        snprintf(xn->name, sizeof xn->name, "%s", sc->name);
        free(name);
        if (r_state(r, sc->schema, &xn->st) < 0) goto fail;
        int nsib = r_count(r, 8, 1 << 16, "the sibling count");
        if (nsib < 0) goto fail;
        int no = nsib + 1; /* the siblings are the other outputs */
        xn->nout = no;
        xn->out_ids = malloc((size_t)no * sizeof *xn->out_ids);
        xn->outd = malloc((size_t)no * sizeof *xn->outd);
        if (!xn->out_ids || !xn->outd) {
            mk_nomem();
            goto fail;
        }
        if (!nsib) {
            xn->out_ids[0] = id;
            if (r_desc(r, &xn->outd[0], "a node's output") < 0) goto fail;
        } else {
            uint64_t *sids = r_ids(r, &n, "sibling ids");
            if (!sids) goto fail;
            bool okn = n == no;
            if (okn) memcpy(xn->out_ids, sids, (size_t)no * sizeof *sids);
            free(sids);
            if (!okn || r_count(r, 8, (size_t)no, "sibling shapes") != no) {
                bad_file(r, "siblings");
                goto fail;
            }
            for (int k = 0; k < no; k++) {
                int m = r_shape(r, xn->outd[k].shape, "a sibling shape");
                if (m < 0) goto fail;
                xn->outd[k].ndim = m;
            }
            if (r_count(r, 5, (size_t)no, "sibling dtypes") != no) {
                bad_file(r, "siblings");
                goto fail;
            }
            for (int k = 0; k < no; k++)
                if (r_dtype(r, &xn->outd[k].dtype, "a sibling dtype") < 0) goto fail;
        }
        for (int k = 0; k < no; k++) KNOW(xn->out_ids[k]);
    }
    for (int j = 0; j < g->nout; j++)
        if (!id_known(known, (int)nknown, g->out_ids[j])) {
            bad_file(r, "an output that is not defined");
            goto fail;
        }
    free(known);
    return 0;
fail:
#undef KNOW
    if (!r->err && mk_error_code() == MK_OK) bad_file(r, "a function");
    r->err = true;
    free(known);
    return -1;
}

int mk_xread_file(const unsigned char *data, size_t len, mk_xfile *f) {
    rbuf r = {data, len, 0, false};
    memset(f, 0, sizeof *f);
    mk_error_clear();
    if (!(f->version = r_str(&r, NULL, "the version"))) goto fail;
    int32_t count = r_i32(&r, "the function count");
    f->shapeless = r_bool(&r, "the shapeless flag");
    if (!(f->metadata = r_str(&r, NULL, "the metadata"))) goto fail;
    if (r.err) goto fail;
    if (count < 0 || (size_t)count > len) {
        bad_file(&r, "the function count");
        goto fail;
    }
    f->funs = calloc((size_t)(count ? count : 1), sizeof *f->funs);
    if (!f->funs) {
        mk_nomem();
        goto fail;
    }
    rconsts rc = {0};
    for (int i = 0; i < count; i++) {
        f->count = i + 1;
        f->funs[i].shapeless = f->shapeless;
        if (read_graph(&r, &f->funs[i], &rc) < 0) {
            free(rc.ids);
            free(rc.vals);
            goto fail;
        }
    }
    free(rc.ids);
    free(rc.vals);
    return 0;
fail:
    mk_xfile_free(f);
    return -1;
}

/* ================================================================ running */

typedef struct {
    uint64_t id;
    mk_array *a;
} idval;

static mk_array *lookup(idval *m, int n, uint64_t id) {
    for (int i = n - 1; i >= 0; i--)
        if (m[i].id == id) return m[i].a;
    return NULL;
}

static int vec64(const mk_xitem *it, int64_t *out, int max) {
    if (it->n > max) {
        mk_error_set(MK_ERR_VALUE, "[import_function] A state vector has %d entries (at most %d).", it->n, max);
        return -1;
    }
    for (int i = 0; i < it->n; i++) out[i] = it->v[i];
    return it->n;
}
static int vec32(const mk_xitem *it, int *out, int max) {
    if (it->n > max) {
        mk_error_set(MK_ERR_VALUE, "[import_function] A state vector has %d entries (at most %d).", it->n, max);
        return -1;
    }
    for (int i = 0; i < it->n; i++) out[i] = it->v[i];
    return it->n;
}

static int need_inputs(const mk_xnode *n, int k) {
    if (n->nin != k) {
        mk_error_set(MK_ERR_VALUE, "[import_function] Primitive %s has %d inputs, expected %d.", n->name, n->nin, k);
        return -1;
    }
    return 0;
}

static void goto_bad_inputs(const mk_xnode *n) {
    mk_error_set(MK_ERR_VALUE, "[import_function] Primitive %s has %d inputs.", n->name, n->nin);
}

/* MLX's BroadcastAxes output shape */
static int bcast_axes_shape(mk_array *const *in, int nin, const mk_xitem *ig, int64_t *shape) {
    int ni = ig->n;
    int64_t acc[MK_MAX_NDIM];
    int na = 0;
    for (int i = 0; i < nin; i++) {
        int64_t s[MK_MAX_NDIM];
        int ns = 0;
        for (int d = 0; d < in[i]->ndim; d++) {
            bool skip = false;
            for (int k = 0; k < ni; k++) skip |= d == in[i]->ndim + ig->v[k];
            if (!skip) s[ns++] = in[i]->shape[d];
        }
        if (ns != in[i]->ndim - ni) {
            mk_error_set(MK_ERR_VALUE, "[import_function] BroadcastAxes: invalid axes.");
            return -1;
        }
        int64_t t[MK_MAX_NDIM];
        int nt = mk_broadcast_shapes(na, acc, ns, s, t);
        if (nt < 0) return -1;
        memcpy(acc, t, (size_t)nt * sizeof *t);
        na = nt;
    }
    int dims = ni + na, pos = 0;
    for (int d = 0, k = 0; d < dims; d++) {
        bool ign = false;
        int which = 0;
        for (int j = 0; j < ni; j++)
            if (dims + ig->v[j] == d) ign = true, which = j;
        if (ign) {
            int src = in[0]->ndim + ig->v[which];
            if (src < 0 || src >= in[0]->ndim) {
                mk_error_set(MK_ERR_VALUE, "[import_function] BroadcastAxes: invalid axes.");
                return -1;
            }
            shape[pos++] = in[0]->shape[src];
        } else
            shape[pos++] = acc[k++];
    }
    return dims;
}

static int unary_of(const char *name) {
    for (int u = 0; u < MK_NUNARY; u++)
        if (unary_mlx[u] && !strcmp(unary_mlx[u], name)) return u;
    return -1;
}
static int binary_of(const char *name) {
    for (int b = 0; b < MK_NBINARY; b++)
        if (binary_mlx[b] && !strcmp(binary_mlx[b], name)) return b;
    return -1;
}

/* builds one node on its inputs; returns a new reference */
static mk_array *build(const mk_xnode *n, mk_array *const *in) {
    const char *nm = n->name;
    const mk_xitem *s = n->st.it;
    const mk_outdesc *od = &n->outd[0];
    int64_t v[MK_MAX_NDIM], v2[MK_MAX_NDIM], v3[MK_MAX_NDIM];
    int ax[MK_MAX_NDIM], k;
    int u = unary_of(nm);
    if (u >= 0) return need_inputs(n, 1) < 0 ? NULL : mk_unary((mk_unary_op)u, in[0]);
    int b = binary_of(nm);
    if (b >= 0) return need_inputs(n, 2) < 0 ? NULL : mk_binary((mk_binary_op)b, in[0], in[1]);
    if (!strcmp(nm, "Log")) {
        static const mk_unary_op base[3] = {MK_UNARY_log2, MK_UNARY_log10, MK_UNARY_log};
        if (need_inputs(n, 1) < 0) return NULL;
        if (s[0].i < 0 || s[0].i > 2) goto bad_state;
        return mk_unary(base[s[0].i], in[0]);
    }
    if (!strcmp(nm, "Sqrt"))
        return need_inputs(n, 1) < 0 ? NULL : mk_unary(s[0].i ? MK_UNARY_rsqrt : MK_UNARY_sqrt, in[0]);
    if (!strcmp(nm, "Equal")) {
        if (need_inputs(n, 2) < 0) return NULL;
        if (!s[0].i) return mk_binary(MK_BINARY_equal, in[0], in[1]);
        /* equal_nan: equal, or both NaN */
        mk_array *e = mk_binary(MK_BINARY_equal, in[0], in[1]);
        mk_array *na = mk_unary(MK_UNARY_isnan, in[0]), *nb = mk_unary(MK_UNARY_isnan, in[1]);
        mk_array *both = na && nb ? mk_binary(MK_BINARY_logical_and, na, nb) : NULL;
        mk_array *r = e && both ? mk_binary(MK_BINARY_logical_or, e, both) : NULL;
        mk_xdecref(e);
        mk_xdecref(na);
        mk_xdecref(nb);
        mk_xdecref(both);
        return r;
    }
    if (!strcmp(nm, "BitwiseBinary")) {
        static const mk_binary_op bw[5] = {MK_BINARY_bitwise_and, MK_BINARY_bitwise_or, MK_BINARY_bitwise_xor,
                                           MK_BINARY_left_shift, MK_BINARY_right_shift};
        if (need_inputs(n, 2) < 0) return NULL;
        if (s[0].i < 0 || s[0].i > 4) goto bad_state;
        return mk_binary(bw[s[0].i], in[0], in[1]);
    }
    if (!strcmp(nm, "Select")) return need_inputs(n, 3) < 0 ? NULL : mk_where(in[0], in[1], in[2]);
    if (!strcmp(nm, "Copy")) return need_inputs(n, 1) < 0 ? NULL : mk_copy(in[0]);
    if (!strcmp(nm, "AsType")) return need_inputs(n, 1) < 0 ? NULL : mk_astype(in[0], (mk_dtype)s[0].i);
    if (!strcmp(nm, "Full")) {
        if (need_inputs(n, 1) < 0) return NULL;
        mk_array *c = mk_astype(in[0], od->dtype);
        mk_array *r = c ? mk_broadcast_to(c, od->ndim, od->shape) : NULL;
        mk_xdecref(c);
        return r;
    }
    if (!strcmp(nm, "Matmul")) return need_inputs(n, 2) < 0 ? NULL : mk_matmul(in[0], in[1]);
    if (!strcmp(nm, "AddMM"))
        return need_inputs(n, 3) < 0 ? NULL : mk_addmm(in[2], in[0], in[1], (float)s[0].f, (float)s[1].f);
    if (!strcmp(nm, "Reduce")) {
        static const mk_reduce_op rop[6] = {MK_REDUCE_ALL, MK_REDUCE_ANY, MK_REDUCE_SUM,
                                            MK_REDUCE_PROD, MK_REDUCE_MIN, MK_REDUCE_MAX};
        if (need_inputs(n, 1) < 0 || (k = vec32(&s[1], ax, MK_MAX_NDIM)) < 0) return NULL;
        if (s[0].i < 0 || s[0].i > 5) goto bad_state;
        return mk_reduce(rop[s[0].i], in[0], k, ax, true);
    }
    if (!strcmp(nm, "ArgReduce")) {
        if (need_inputs(n, 1) < 0) return NULL;
        if (s[0].i == 0) return mk_argmin(in[0], (int)s[1].i, true, true);
        if (s[0].i == 1) return mk_argmax(in[0], (int)s[1].i, true, true);
        goto bad_state;
    }
    if (!strcmp(nm, "Reshape")) {
        if (need_inputs(n, 1) < 0 || (k = vec64(&s[0], v, MK_MAX_NDIM)) < 0) return NULL;
        return mk_reshape(in[0], k, v);
    }
    if (!strcmp(nm, "Transpose")) {
        if (need_inputs(n, 1) < 0 || (k = vec32(&s[0], ax, MK_MAX_NDIM)) < 0) return NULL;
        return mk_transpose(in[0], k, ax);
    }
    if (!strcmp(nm, "Broadcast")) {
        if (need_inputs(n, 1) < 0 || (k = vec64(&s[0], v, MK_MAX_NDIM)) < 0) return NULL;
        return mk_broadcast_to(in[0], k, v);
    }
    if (!strcmp(nm, "BroadcastAxes")) {
        if (n->nin < 1 || s[0].n > MK_MAX_NDIM) goto bad_state;
        if ((k = bcast_axes_shape(in, n->nin, &s[0], v)) < 0) return NULL;
        return mk_broadcast_to(in[0], k, v);
    }
    if (!strcmp(nm, "ExpandDims")) {
        if (need_inputs(n, 1) < 0 || (k = vec32(&s[0], ax, MK_MAX_NDIM)) < 0) return NULL;
        return mk_expand_dims(in[0], k, ax);
    }
    if (!strcmp(nm, "Squeeze")) {
        if (need_inputs(n, 1) < 0 || (k = vec32(&s[0], ax, MK_MAX_NDIM)) < 0) return NULL;
        if (k == 0) {
            mk_incref(in[0]);
            return in[0];
        }
        return mk_squeeze(in[0], k, ax);
    }
    if (!strcmp(nm, "Flatten")) return need_inputs(n, 1) < 0 ? NULL : mk_flatten(in[0], (int)s[0].i, (int)s[1].i);
    if (!strcmp(nm, "Unflatten")) {
        if (need_inputs(n, 1) < 0 || (k = vec64(&s[1], v2, MK_MAX_NDIM)) < 0) return NULL;
        mk_array *x = in[0];
        int a = (int)s[0].i;
        if (a < 0) a += x->ndim;
        if (a < 0 || a >= x->ndim || x->ndim - 1 + k > MK_MAX_NDIM) goto bad_state;
        return mk_unflatten(x, a, (int)k, v2);
    }
    if (!strcmp(nm, "Slice")) {
        mk_array *x = in[0];
        if (need_inputs(n, 1) < 0) return NULL;
        if (s[0].n != x->ndim || s[1].n != x->ndim || s[2].n != x->ndim) goto bad_state;
        for (int d = 0; d < x->ndim; d++) {
            int64_t st = s[2].v[d], b0 = s[0].v[d], e0 = s[1].v[d], dim = x->shape[d];
            if (st == 0) goto bad_state;
            /* MLX's normalised bounds: start in [0, dim), end in [-1, dim] */
            if (b0 < 0 || b0 > dim || e0 < -1 || e0 > dim) goto bad_state;
            v[d] = b0;
            v2[d] = e0;
            v3[d] = st;
        }
        return mk_slice(x, v, v2, v3);
    }
    if (!strcmp(nm, "GatherAxis"))
        return need_inputs(n, 2) < 0 ? NULL : mk_take_along_axis(in[0], in[1], (int)s[0].i, true);
    if (!strcmp(nm, "ScatterAxis")) {
        if (need_inputs(n, 3) < 0) return NULL;
        if (s[0].i != 1) {
            mk_error_set(MK_ERR_VALUE, "[import_function] ScatterAxis with a sum reduction cannot be rebuilt yet.");
            return NULL;
        }
        return mk_put_along_axis(in[0], in[1], in[2], (int)s[1].i, true);
    }
    if (!strcmp(nm, "Scatter")) {
        static const mk_scatter_op scop[5] = {MK_SCATTER_MAX, MK_SCATTER_MIN, MK_SCATTER_SUM, MK_SCATTER_PROD,
                                              MK_SCATTER_NONE};
        mk_array *x = in[0], *u = in[n->nin - 1];
        int na = n->nin - 2;
        if (na < 1 || s[1].n != na || s[0].i < 0 || s[0].i > 4 || na > x->ndim) goto bad_state;
        mk_index_dim dims[MK_MAX_NDIM];
        bool used[MK_MAX_NDIM] = {false};
        for (int d = 0; d < x->ndim; d++) dims[d] = (mk_index_dim){MK_IDX_SLICE, 0, 0, 1, x->shape[d]};
        for (int j = 0; j < na; j++) {
            int a = s[1].v[j];
            if (a < 0) a += x->ndim;
            if (a < 0 || a >= x->ndim || used[a]) goto bad_state;
            used[a] = true;
            dims[a] = (mk_index_dim){MK_IDX_ARRAY, j, 0, 1, 1};
        }
        /* updates: B + x's shape with the indexed dims of size 1; mkpy
         * wants B + the other dims */
        int nb = u->ndim - x->ndim;
        if (nb < 0) goto bad_state;
        int m = 0;
        for (int d = 0; d < x->ndim; d++)
            if (used[d]) ax[m++] = nb + d;
        for (int d = 0; d < x->ndim; d++) {
            if (used[d] && u->shape[nb + d] != 1) goto bad_state;
        }
        bool contiguous_axes = true;
        for (int j = 0; j < na; j++) contiguous_axes &= s[1].v[j] == j || s[1].v[j] == j - x->ndim;
        if (!contiguous_axes) {
            mk_error_set(MK_ERR_VALUE, "[import_function] Scatter on axes other than the leading ones cannot be rebuilt yet.");
            return NULL;
        }
        mk_array *us = mk_squeeze(u, m, ax);
        if (!us) return NULL;
        mk_array *r = mk_scatter(x, dims, na, in + 1, 0, us, scop[s[0].i]);
        mk_decref(us);
        return r;
    }
    if (!strcmp(nm, "Gather")) {
        mk_array *x = in[0];
        int na = n->nin - 1;
        if (na < 1 || s[0].n != na || s[1].n != x->ndim) goto bad_state;
        mk_index_dim dims[MK_MAX_NDIM];
        bool used[MK_MAX_NDIM] = {false};
        for (int d = 0; d < x->ndim; d++) {
            int64_t sz = s[1].v[d];
            if (sz < 0 || sz > x->shape[d]) goto bad_state;
            dims[d] = (mk_index_dim){MK_IDX_SLICE, 0, 0, 1, sz};
        }
        for (int j = 0; j < na; j++) {
            int a = s[0].v[j];
            if (a < 0) a += x->ndim;
            if (a < 0 || a >= x->ndim || used[a]) goto bad_state;
            used[a] = true;
            if (s[1].v[a] != 1) {
                mk_error_set(MK_ERR_VALUE, "[import_function] Gather with slices of more than one element along an "
                                           "indexed axis cannot be rebuilt yet.");
                return NULL;
            }
            dims[a] = (mk_index_dim){MK_IDX_ARRAY, j, 0, 1, 1};
        }
        mk_array *r = mk_gather(x, dims, na, in + 1, 0);
        if (!r) return NULL;
        /* mkpy: B + the sliced dims; MLX: B + slice_sizes */
        int nb = r->ndim - (x->ndim - na);
        if (nb < 0 || nb + x->ndim > MK_MAX_NDIM) {
            mk_decref(r);
            goto bad_state;
        }
        memcpy(v, r->shape, (size_t)nb * sizeof *v);
        for (int d = 0; d < x->ndim; d++) v[nb + d] = s[1].v[d];
        mk_array *g = mk_reshape(r, nb + x->ndim, v);
        mk_decref(r);
        return g;
    }
    if (!strcmp(nm, "Pad")) {
        mk_array *x = in[0];
        int64_t pw[MK_MAX_NDIM][2] = {{0}};
        if (need_inputs(n, 2) < 0) return NULL;
        if (s[0].n != s[1].n || s[0].n != s[2].n) goto bad_state;
        for (int j = 0; j < s[0].n; j++) {
            int a = s[0].v[j];
            if (a < 0) a += x->ndim;
            if (a < 0 || a >= x->ndim) goto bad_state;
            pw[a][0] = s[1].v[j];
            pw[a][1] = s[2].v[j];
        }
        return mk_pad(x, (const int64_t(*)[2])pw, in[1]);
    }
    if (!strcmp(nm, "RMSNorm") || !strcmp(nm, "LayerNorm")) {
        /* (x, w[, b]); a 0-d weight or bias applies after the normalisation */
        bool layer = nm[0] == 'L';
        if (need_inputs(n, layer ? 3 : 2) < 0) return NULL;
        mk_array *w = in[1], *b = layer ? in[2] : NULL;
        bool scalar = w->ndim == 0 || (b && b->ndim == 0);
        mk_array *r = layer ? mk_layer_norm(in[0], scalar ? NULL : w, scalar ? NULL : b, (float)s[0].f)
                            : mk_rms_norm(in[0], scalar ? NULL : w, (float)s[0].f);
        if (r && scalar) {
            mk_array *t = mk_binary(MK_BINARY_multiply, r, w);
            mk_decref(r);
            r = t;
            if (r && b) {
                t = mk_binary(MK_BINARY_add, r, b);
                mk_decref(r);
                r = t;
            }
        }
        return r;
    }
    if (!strcmp(nm, "RoPE")) {
        if (n->nin != 2 && n->nin != 3) return goto_bad_inputs(n), NULL;
        if (!s[4].i) {
            mk_error_set(MK_ERR_VALUE, "[import_function] RoPE's backward form cannot be rebuilt yet.");
            return NULL;
        }
        return mk_rope(in[0], s[0].i, s[1].i != 0, n->nin == 2, (float)s[2].f, (float)s[3].f, in[1],
                       n->nin == 3 ? in[2] : NULL);
    }
    if (!strcmp(nm, "Concatenate"))
        return n->nin < 1 ? (goto_bad_inputs(n), NULL) : mk_concatenate(n->nin, in, (int)s[0].i, true);
    if (!strcmp(nm, "Sort")) return need_inputs(n, 1) < 0 ? NULL : mk_sort(in[0], (int)s[0].i, true);
    if (!strcmp(nm, "ArgSort")) return need_inputs(n, 1) < 0 ? NULL : mk_argsort(in[0], (int)s[0].i, true);
    if (!strcmp(nm, "Partition"))
        return need_inputs(n, 1) < 0 ? NULL : mk_partition(in[0], (int)s[0].i, (int)s[1].i, true);
    if (!strcmp(nm, "ArgPartition"))
        return need_inputs(n, 1) < 0 ? NULL : mk_argpartition(in[0], (int)s[0].i, (int)s[1].i, true);
    if (!strcmp(nm, "Scan")) {
        static const mk_scan_op sop[5] = {MK_SCAN_MAX, MK_SCAN_MIN, MK_SCAN_SUM, MK_SCAN_PROD, MK_SCAN_LOGADDEXP};
        if (need_inputs(n, 1) < 0) return NULL;
        if (s[0].i < 0 || s[0].i > 4) goto bad_state;
        return mk_scan(sop[s[0].i], in[0], (int)s[1].i, true, s[2].i != 0, s[3].i != 0);
    }
    if (!strcmp(nm, "Convolution")) {
        mk_conv_args a = {0};
        if (need_inputs(n, 2) < 0) return NULL;
        if ((a.nstride = vec32(&s[0], a.stride, MK_CONV_MAXLIST)) < 0 ||
            (a.npad_lo = vec32(&s[1], a.pad_lo, MK_CONV_MAXLIST)) < 0 ||
            (a.npad_hi = vec32(&s[2], a.pad_hi, MK_CONV_MAXLIST)) < 0 ||
            (a.nkdil = vec32(&s[3], a.kdil, MK_CONV_MAXLIST)) < 0 ||
            (a.nidil = vec32(&s[4], a.idil, MK_CONV_MAXLIST)) < 0)
            return NULL;
        a.groups = (int)s[5].i;
        a.flip = s[6].i != 0;
        return mk_conv_general(in[0], in[1], &a);
    }
    if (!strcmp(nm, "QuantizedMatmul")) {
        if (n->nin != 3 && n->nin != 4) return goto_bad_inputs(n), NULL;
        return mk_quantized_matmul(in[0], in[1], in[2], n->nin == 4 ? in[3] : NULL, s[3].i != 0, (int)s[0].i,
                                   (int)s[1].i, (int)s[2].i);
    }
    if (!strcmp(nm, "Softmax")) {
        int last = -1;
        return need_inputs(n, 1) < 0 ? NULL : mk_softmax(in[0], 1, &last, s[0].i != 0);
    }
    if (!strcmp(nm, "SearchSorted"))
        return need_inputs(n, 2) < 0 ? NULL : mk_searchsorted(in[0], in[1], s[0].i != 0);
    if (!strcmp(nm, "RandomBits")) {
        if (need_inputs(n, 1) < 0 || (k = vec64(&s[0], v, MK_MAX_NDIM)) < 0) return NULL;
        return mk_random_bits(k, v, (int)s[1].i, in[0]);
    }
    if (!strcmp(nm, "Arange")) return mk_arange(s[0].f, s[1].f, s[2].f, od->dtype);
    mk_error_set(MK_ERR_VALUE, "[import_function] Unable to rebuild primitive %s.", nm);
    return NULL;
bad_state:
    mk_error_set(MK_ERR_VALUE, "[import_function] Invalid state for primitive %s.", nm);
    return NULL;
}

/* a CustomKernel record: the kernel call again, through metal_kernel's path */
static int build_kernel(const mk_xgraph *g, const mk_xnode *n, mk_array *const *in, mk_array **outs) {
    const mk_xitem *s = n->st.it;
    if (g->shapeless) {
        /* as MLX: a shapeless call asks every primitive for its output shapes */
        mk_error_set(MK_ERR_VALUE, "[Primitive::output_shapes] CustomKernel cannot infer output shapes.");
        return -1;
    }
    /* strings with a NUL inside are not a kernel's */
    if ((size_t)s[0].n != strlen(s[0].s) || (size_t)s[1].n != strlen(s[1].s) || s[8].n != n->nin) goto bad_state;
    if (s[11].n != 0 || s[12].i || s[13].i) {
        mk_error_set(MK_ERR_VALUE,
                     "[import_function] CustomKernel `%.200s` is a precompiled kernel (scalar arguments, shared "
                     "memory): mkpy runs Metal kernels only.",
                     s[0].s);
        return -1;
    }
    mk_xkernel_info ki = {0};
    bool tri[64][3];
    if (n->nin > 64) goto bad_state;
    for (int i = 0; i < n->nin; i++)
        for (int j = 0; j < 3; j++) tri[i][j] = s[8].v[3 * i + j] != 0;
    ki.name = s[0].s;
    ki.source = s[1].s;
    for (int d = 0; d < 3; d++) {
        ki.grid[d] = (int32_t)s[2 + d].i;
        ki.threadgroup[d] = (int32_t)s[5 + d].i;
    }
    ki.nin = n->nin;
    ki.shape_infos = tri;
    ki.ensure_row_contiguous = s[9].i != 0;
    ki.has_init = s[10].i != 0;
    ki.init_value = (float)s[10].f;
    ki.math_mode = (int)s[14].i;
    return mk_xkernel_build(&ki, n->nin, in, n->nout, n->outd, outs);
bad_state:
    mk_error_set(MK_ERR_VALUE, "[import_function] Invalid state for primitive %s.", n->name);
    return -1;
}

int mk_xgraph_run(const mk_xgraph *g, mk_array *const *inputs, mk_array **outs) {
    size_t cap = (size_t)g->nin + 1, nm = 0;
    for (int t = 0; t < g->nnodes; t++) cap += (size_t)(g->nodes[t].nout > 1 ? g->nodes[t].nout : 1);
    idval *m = malloc(cap * sizeof *m);
    int rc = -1;
    for (int j = 0; j < g->nout; j++) outs[j] = NULL;
    if (!m) {
        mk_nomem();
        return -1;
    }
    for (int i = 0; i < g->nin; i++) {
        mk_incref(inputs[i]);
        m[nm++] = (idval){g->in_ids[i], inputs[i]};
    }
    for (int t = 0; t < g->nnodes; t++) {
        const mk_xnode *n = &g->nodes[t];
        if (n->constant) {
            mk_incref(n->constant);
            m[nm++] = (idval){n->id, n->constant};
            continue;
        }
        mk_array *in[64];
        if (n->nin > 64) {
            mk_error_set(MK_ERR_VALUE, "[import_function] Primitive %s has too many inputs.", n->name);
            goto done;
        }
        for (int i = 0; i < n->nin; i++)
            if (!(in[i] = lookup(m, (int)nm, n->in[i]))) {
                mk_error_set(MK_ERR_VALUE, "[import_function] Invalid file: undefined input of %s.", n->name);
                goto done;
            }
        if (!strcmp(n->name, "CustomKernel")) {
            mk_array *ko[64];
            if (n->nout > 64) {
                mk_error_set(MK_ERR_VALUE, "[import_function] Primitive %s has too many outputs.", n->name);
                goto done;
            }
            if (build_kernel(g, n, in, ko) < 0) goto done;
            for (int k = 0; k < n->nout; k++) m[nm++] = (idval){n->out_ids[k], ko[k]};
            continue;
        }
        if (n->nout != 1) {
            mk_error_set(MK_ERR_VALUE, "[import_function] Unable to rebuild primitive %s with %d outputs.", n->name,
                         n->nout);
            goto done;
        }
        mk_array *r = build(n, in);
        if (!r) goto done;
        if (r->dtype != n->outd[0].dtype) {
            mk_array *c = mk_astype(r, n->outd[0].dtype);
            mk_decref(r);
            if (!(r = c)) goto done;
        }
        m[nm++] = (idval){n->id, r};
    }
    for (int j = 0; j < g->nout; j++) {
        mk_array *o = lookup(m, (int)nm, g->out_ids[j]);
        if (!o) {
            mk_error_set(MK_ERR_VALUE, "[import_function] Invalid file: undefined output.");
            goto done;
        }
        mk_incref(o);
        outs[j] = o;
    }
    rc = 0;
done:
    if (rc < 0)
        for (int j = 0; j < g->nout; j++) mk_xdecref(outs[j]), outs[j] = NULL;
    for (size_t i = 0; i < nm; i++) mk_decref(m[i].a);
    free(m);
    return rc;
}
