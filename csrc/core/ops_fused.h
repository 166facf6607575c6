/* Element-wise fusion for mx.compile (core/ops_fused.c): one primitive that
 * runs a small tape of unary, binary, astype, where (Select) and broadcast steps over the
 * output element by element, with the kernels the unfused ops use. MLX's
 * name for it is "Compiled" followed by the names of its steps. */
#ifndef MK_OPS_FUSED_H
#define MK_OPS_FUSED_H

#include <stdint.h>

#include "ops.h"

#define MK_FUSED_MAX_IN 24    /* external inputs (MLX's max_compile_arrays) */
#define MK_FUSED_MAX_STEPS 64 /* steps of one tape */
#define MK_FUSED_MAX_DEPTH 11 /* MLX's max_compile_depth */

enum { MK_FSTEP_UNARY, MK_FSTEP_BINARY, MK_FSTEP_ASTYPE, MK_FSTEP_BCAST, MK_FSTEP_SELECT };

/* One step: operands a, b (binary; select: condition a, then b or c); v < nin is external input v, else the result of step
 * v - nin. A broadcast step passes its operand on (every external input is
 * read broadcast to the output's shape); it is kept for the name. */
typedef struct {
    uint8_t kind, op, tin, tout; /* kind, unary/binary op, input and output dtypes */
    int16_t a, b, c;
} mk_fused_step;

/* Plain bytes (zero the unused part), so equal tapes compare equal. */
typedef struct {
    int nin, nsteps;
    mk_fused_step steps[MK_FUSED_MAX_STEPS];
} mk_fused_tape;

/* The fused node: the last step's result, of the given dtype and shape, on
 * the inputs (each broadcastable to shape). Copies the tape. */
mk_array *mk_fused(const mk_fused_tape *t, int nin, mk_array *const *in, mk_dtype dtype, int ndim,
                   const int64_t *shape);

/* The kernels of the unfused ops on one row (ops_unary.c, ops_binary.c):
 * same kernel choice, so the same bits; out dense. */
void mk_unary_row(mk_unary_op op, mk_dtype in, mk_dtype out, const void *x, int64_t xs, void *o, int64_t n);
void mk_astype_row(mk_dtype in, mk_dtype out, const void *x, int64_t xs, void *o, int64_t n);
void mk_binary_row(mk_binary_op op, mk_dtype in, mk_dtype out, const void *a, int64_t as, const void *b, int64_t bs,
                   void *o, int64_t n);
/* where's selection on one row: out[i] = c[i * cs] ? x[i * xs] : y[i * ys] (elements of sz bytes) */
void mk_where_row(size_t sz, const bool *c, int64_t cs, const void *x, int64_t xs, const void *y, int64_t ys,
                  void *o, int64_t n);

#endif
