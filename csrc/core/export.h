/* export_function / import_function in MLX's file format (export.c).
 *
 * A traced function is kept as an "xgraph": its input and output
 * descriptors and a tape of nodes in topological order. Each node is either
 * a constant (an evaluated row-contiguous array) or one MLX primitive, named
 * by MLX's class name, with its state as a list of typed items (MLX's
 * StateT: bool, int, size_t, float, double, Dtype, Shape and int vectors,
 * strings). The writer serializes an xgraph by MLX's rules (little-endian
 * arithmetic values, vectors and strings prefixed by a uint64 length); the
 * reader parses a file back into xgraphs, checking every length against the
 * bytes left; mk_xgraph_run rebuilds a graph on new inputs with mkpy's ops.
 *
 * Export maps mkpy's primitives to MLX's: some one to one (binary ops,
 * reductions), some to a few MLX nodes (a strided view becomes Slice,
 * Reshape, Transpose and BroadcastAxes; an implicit broadcast in a binary op
 * becomes BroadcastAxes). The per-family accessors below expose what the
 * mapping needs from each family's private params. */
#ifndef MK_EXPORT_H
#define MK_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "array.h"
#include "ops.h"

/* ---- state items (MLX's StateT) ---- */
typedef enum {
    MK_XS_BOOL = 'b',
    MK_XS_INT = 'i',    /* int32 (enums too) */
    MK_XS_SIZE = 'z',   /* uint64 */
    MK_XS_FLOAT = 'f',  /* float32 */
    MK_XS_DOUBLE = 'F', /* float64 */
    MK_XS_DTYPE = 'd',  /* int32 value + uint8 size */
    MK_XS_VEC = 'v',    /* vector<int32> (Shape, axes) */
    MK_XS_STR = 's',
    MK_XS_BOOL3S = 'B',  /* vector<tuple<bool, bool, bool>>: n triples in v (3n values) */
    MK_XS_OPTFLOAT = 'o', /* optional<float>: i has a value, f the value */
    MK_XS_SCALARS = 'S', /* vector<variant<bool, int, float>>: n (tag, bits) pairs in v */
} mk_xs_kind;

typedef struct {
    char kind;
    int64_t i; /* bool, int, size, dtype */
    double f;  /* float, double */
    int n;     /* vector length, string length */
    int32_t *v;
    char *s;
} mk_xitem;

#define MK_XSTATE_MAX 16
typedef struct {
    int n;
    mk_xitem it[MK_XSTATE_MAX];
} mk_xstate;

typedef struct {
    uint64_t id; /* first output's id */
    char name[40]; /* MLX primitive name; "" for a constant */
    mk_xstate st;
    int nin;
    uint64_t *in;
    int nout;
    uint64_t *out_ids;
    mk_outdesc *outd;
    mk_array *constant; /* constants: evaluated, row contiguous */
    bool shared;        /* a constant written by an earlier function */
    bool gpu;           /* written on a GPU stream (CustomKernel, as MLX's) */
} mk_xnode;

typedef struct {
    int nkw;
    char **kw; /* keyword names, sorted; the last nkw inputs */
    int nin;
    uint64_t *in_ids;
    mk_outdesc *in_desc;
    int nout;
    uint64_t *out_ids;
    mk_outdesc *out_desc;
    int nnodes, cap;
    mk_xnode *nodes;
    bool shapeless; /* read from a shapeless file */
} mk_xgraph;

typedef struct {
    char *version;
    int count;
    bool shapeless;
    char *metadata;
    mk_xgraph *funs; /* count of them */
} mk_xfile;

void mk_xgraph_free(mk_xgraph *g); /* contents */
void mk_xfile_free(mk_xfile *f);   /* contents */

/* Builds the xgraph of a traced function: `tracers` are the inputs the
 * function was called on, `outs` its outputs. Input-free parts of the graph
 * are evaluated and kept as constants. Returns 0, or -1 with the error set
 * (MK_ERR_NOTIMPL naming an mkpy primitive without an MLX mapping). Call it
 * without the GIL (it may evaluate). */
typedef struct {
    mk_array **keys; /* the graph's arrays (held) */
    mk_array **vals; /* their contiguous values (held) */
    uint64_t *ids;
    int n, cap;
    uint64_t next_id; /* ids are unique across an exporter's functions */
} mk_xconsts;
void mk_xconsts_free(mk_xconsts *c);
/* cs: the constants of earlier functions of the same file, shared by id
 * (their data is written once, as MLX does); updated. */
int mk_export_graph(int nin, mk_array *const *tracers, int nout, mk_array *const *outs, mk_xconsts *cs,
                    mk_xgraph *g);

/* After mk_export_graph failed: whether it failed on an mkpy primitive that
 * has no MLX mapping yet (the binding raises NotImplementedError). */
bool mk_export_unmapped(void);

/* Serialization. The buffer grows; on allocation failure err is set. */
typedef struct {
    char *data;
    size_t len, cap;
    bool err;
} mk_wbuf;
void mk_wbuf_free(mk_wbuf *w);
/* The header: version string, function count, shapeless, metadata. */
void mk_xwrite_header(mk_wbuf *w, const char *version, int count, bool shapeless, const char *metadata);
/* One function (its kwarg keys first). Returns 0 or -1 (no memory). */
int mk_xwrite_graph(mk_wbuf *w, const mk_xgraph *g);

/* Parses a whole file. Returns 0, or -1 with a ValueError-kind error naming
 * what is wrong (truncated, bad lengths, unknown primitive). */
int mk_xread_file(const unsigned char *data, size_t len, mk_xfile *f);

/* Rebuilds g on `inputs` (nin of them, in g's order; shapes may differ when
 * the function is shapeless); fills outs (new references). 0 or -1. */
int mk_xgraph_run(const mk_xgraph *g, mk_array *const *inputs, mk_array **outs);

/* The version string written to files (MLX's, whose format this is). */
#define MK_EXPORT_VERSION "0.32.4"

/* ---- accessors: what export needs from each family's params ---- */
bool mk_xp_tracer(const mk_prim *p);
bool mk_xp_binary(const mk_prim *p, mk_binary_op *op);
bool mk_xp_where(const mk_prim *p);
bool mk_xp_unary(const mk_prim *p, mk_unary_op *op); /* stop_gradient too */
bool mk_xp_astype(const mk_prim *p);
/* which: an mk_reduce_op, or -1 for an arg reduction; red: reduced dims */
bool mk_xp_reduce(const mk_prim *p, int *which, bool *red);
/* a strided view: output dim k is input dim map[k] (-1: new/broadcast) with
 * step mult[k]; start[d] the start index along input dim d */
bool mk_xp_view(const mk_prim *p, int *map, int64_t *mult, int64_t *start);
/* infer: the dim inferred from the size (-1 in the shape), or -1 */
bool mk_xp_reshape(const mk_prim *p, int *infer);
/* a flatten (fs..fe merged) or an unflatten (axis ua split into un dims); false for other reshapes */
bool mk_xp_reshape_kind(const mk_prim *p, int *fs, int *fe, int *ua, int *un);
bool mk_xp_gemm(const mk_prim *p, float *alpha, float *beta, bool *has_c);
bool mk_xp_take_axis(const mk_prim *p, int *axis);
bool mk_xp_put_axis(const mk_prim *p, int *axis, int *scatter_op);
bool mk_xp_concat(const mk_prim *p, int *axis);
/* kind: 0 sort, 1 argsort, 2 partition, 3 argpartition */
bool mk_xp_sort(const mk_prim *p, int *kind, int *axis, int64_t *kth);
bool mk_xp_searchsorted(const mk_prim *p, bool *right);
bool mk_xp_scan(const mk_prim *p, int *op, int *axis, bool *reverse, bool *inclusive);
bool mk_xp_conv(const mk_prim *p, int *nd, int *stride, int *pad_lo, int *pad_hi, int *kdil, int *idil, int *groups,
                bool *flip);
bool mk_xp_qmm(const mk_prim *p, int *gs, int *bits, int *mode, bool *transpose);
bool mk_xp_rowc(const mk_prim *p);
bool mk_xp_full(const mk_prim *p);
/* a constant fill (zeros, ones, full with a number): the element's bytes */
bool mk_xp_fill(const mk_prim *p, unsigned char pat[16]);
/* an integer arange of dtype t: element i is (t)(start + i * step) */
bool mk_xp_arange_int(const mk_prim *p, mk_dtype t, uint64_t *start, uint64_t *step);
/* argmax (which 0) or argmin (1) over the dims red[] (row-major order) */
bool mk_xp_argreduce(const mk_prim *p, int *which, bool *red);
/* gather and scatter plans (ops_index.c); a scatter standing for MLX's
 * (Dynamic)SliceUpdate (mk_scatter_slice) says so in *slice_update */
bool mk_xp_gather(const mk_prim *p, int *narr, int *bpos, mk_index_dim *dims);
bool mk_xp_scatter(const mk_prim *p, int *op, int *narr, int *bpos, mk_index_dim *dims);
bool mk_xp_scatter_slice(const mk_prim *p, bool *slice_update);
bool mk_xp_pad(const mk_prim *p, int *mode, int64_t (*pad)[2]);
/* (for the GPU back-end's mx.fast evaluators: ops_fast.c, ops_reduce.c) */
bool mk_xp_norm(const mk_prim *p, bool *layer, float *eps);
bool mk_xp_rope(const mk_prim *p, int64_t *dims, bool *traditional, float *base, float *scale);
bool mk_xp_sdpa(const mk_prim *p, float *scale, bool *causal, bool *has_mask, bool *mask_bool, bool *has_sinks);
bool mk_xp_lastax(const mk_prim *p, int *kind, int64_t rows, int64_t n, int *nparts);


/* ---- metal_kernel nodes <-> MLX's CustomKernel (csrc/kernel/xkernel.c) ---- */
typedef struct {
    char *name;   /* MLX's kernel name, custom_kernel_<name>[_<template hash>]_<types> */
    char *source; /* the generated Metal source, byte for byte as MLX's */
    int32_t grid[3], threadgroup[3];
    int nin;
    bool (*shape_infos)[3]; /* per input: _shape, _strides, _ndim passed */
    bool ensure_row_contiguous;
    bool has_init;
    float init_value;
    int math_mode; /* MLX's CompileOptions: 0 safe, 1 relaxed, 2 fast */
} mk_xkernel_info;
void mk_xkernel_info_free(mk_xkernel_info *info); /* contents */
/* 1 and info filled for a metal_kernel node, 0 for any other node, -1 with
 * the error set. */
int mk_xp_kernel(const mk_prim *p, mk_xkernel_info *info);
/* Re-creates the kernel call of a CustomKernel record on `in` through
 * metal_kernel's own path (the source is parsed back into the kernel's
 * header, body, names, template arguments and attributes, and generating it
 * again must give the recorded source byte for byte). outd: the recorded
 * outputs; fills outs[nout] (new references). 0, or -1 with a ValueError. */
int mk_xkernel_build(const mk_xkernel_info *info, int nin, mk_array *const *in, int nout, const mk_outdesc *outd,
                     mk_array **outs);

#endif
