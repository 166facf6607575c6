/* Function transformations over the lazy graph (as MLX's): reverse mode
 * (vjp), forward mode (jvp) and vectorisation (vmap).
 *
 * A transformation makes a tracer for each primal (an identity node, so it
 * has an identity of its own), lets the caller build the function's graph on
 * the tracers, then walks that graph applying each primitive's rule from its
 * op table (mk_opdef.vjp / .jvp / .vmap). The rules build lazy ops, so their
 * results can be transformed again (grad of grad). While the caller builds the
 * graph, mk_trace_push keeps evaluated nodes linked (array.h). */
#ifndef MK_TRANSFORMS_H
#define MK_TRANSFORMS_H

#include "ops.h"

/* An identity node on x (a view): a tracer the walks stop at. */
mk_array *mk_tracer(mk_array *x);
/* After a trace whose graph is kept only to be replayed (mx.compile): the
 * tracer reads lazy zeros of its shape instead of the traced array, which the
 * kept graph then no longer holds. Returns 0, or -1 with an error set. */
int mk_tracer_detach(mk_array *t);
/* stop_gradient(x): the value of x, through which no gradient flows. */
mk_array *mk_stop_gradient(mk_array *x);

/* Reverse mode: cotangents of the tracers `ins` given cotangents for the
 * arrays `outs` (cots[i] NULL: zero) over the graph between them. grads get
 * new references (zeros where no path leads). Returns 0 or -1. */
int mk_vjp_graph(int nout, mk_array *const *outs, mk_array *const *cots, int nin, mk_array *const *ins,
                 mk_array **grads);
/* Forward mode: tangents of `outs` given tangents of the tracers `ins`
 * (tans[i] NULL: zero). out_tans get new references. */
int mk_jvp_graph(int nin, mk_array *const *ins, mk_array *const *tans, int nout, mk_array *const *outs,
                 mk_array **out_tans);
/* Vectorisation: replays the graph from the tracers `ins` (traced without
 * their batch axis) to `outs` on the batched arrays `bins` (batch axis
 * in_axes[i], -1: none), giving outputs with their batch axes (-1: the
 * output does not depend on a batched input). */
int mk_vmap_graph(int nin, mk_array *const *ins, mk_array *const *bins, const int *in_axes, int nout,
                  mk_array *const *outs, mk_array **bouts, int *out_axes);

/* 1 when the graph behind `outs` (not looking behind the tracers `ins`)
 * reads one of the arrays `forbid` directly: mx.compile's inputs, which a
 * compiled function may only read through its tracers (MLX's "uncaptured
 * inputs"); 0 if not, -1 on error. */
int mk_graph_reaches(int nout, mk_array *const *outs, int nin, mk_array *const *ins, int nf, mk_array *const *forbid);
/* 1 when the graph behind `outs` contains a transformation's tracer, 0 if
 * not, -1 on error (async_eval's check). */
int mk_graph_has_tracer(int n, mk_array *const *outs);

/* A function with its own transformation rules (mx.custom_function). The
 * node's outputs are the m outputs `fwd` of the function's own graph on the
 * n primals (the node is an identity on them); a missing rule falls back to
 * that graph. The rules are callbacks with an opaque context (the binding's
 * Python functions); each returns 0 or -1 with an error set. */
typedef struct {
    int (*vjp)(void *ctx, int n, mk_array *const *primals, int m, mk_array *const *cots, mk_array *const *outs,
               mk_array **grads);
    int (*jvp)(void *ctx, int n, mk_array *const *primals, mk_array *const *tans, int m, mk_array **out_tans);
    int (*vmap)(void *ctx, int n, mk_array *const *inputs, const int *axes, int m, mk_array **outs, int *out_axes);
    void (*free_ctx)(void *ctx);
    void *ctx;
} mk_custom_rules;
/* outs gets m new references. Takes ownership of rules->ctx (even on failure). */
int mk_custom(int n, mk_array *const *primals, int m, mk_array *const *fwd, const mk_custom_rules *rules,
              mk_array **outs);

/* ---------------------------------------------------------------------
 * Helpers for writing rules. A rule's temporaries go in an arena that frees
 * them at the end; every helper takes NULL inputs (a failed step) and then
 * returns NULL, so a rule can chain calls and check once. */
typedef struct {
    mk_array **items;
    int n, cap;
} mk_arena;

mk_array *mk_ar_keep(mk_arena *A, mk_array *x);   /* takes a new reference into the arena */
mk_array *mk_ar_out(mk_array *x);                 /* a new reference for the caller (NULL passes) */
void mk_ar_free(mk_arena *A);

mk_array *mk_ar_un(mk_arena *A, mk_unary_op op, mk_array *x);
/* conj(x) for a complex x, x itself otherwise: a holomorphic op's vjp is
 * cot * conj(f'(z)) (MLX's convention) */
mk_array *mk_ar_conj(mk_arena *A, mk_array *x);
mk_array *mk_ar_bin(mk_arena *A, mk_binary_op op, mk_array *a, mk_array *b);
mk_array *mk_ar_mul(mk_arena *A, mk_array *a, mk_array *b);
mk_array *mk_ar_add(mk_arena *A, mk_array *a, mk_array *b);
mk_array *mk_ar_sub(mk_arena *A, mk_array *a, mk_array *b);
mk_array *mk_ar_div(mk_arena *A, mk_array *a, mk_array *b);
mk_array *mk_ar_neg(mk_arena *A, mk_array *a);
/* a 0-d scalar of x's dtype (x only gives the dtype) */
mk_array *mk_ar_scalar(mk_arena *A, mk_array *like, double v);
/* x * v with v a scalar of x's dtype */
mk_array *mk_ar_scale(mk_arena *A, mk_array *x, double v);
mk_array *mk_ar_zeros_like(mk_arena *A, mk_array *x);
mk_array *mk_ar_cast(mk_arena *A, mk_array *x, mk_dtype t);
mk_array *mk_ar_where(mk_arena *A, mk_array *c, mk_array *x, mk_array *y);
mk_array *mk_ar_reshape(mk_arena *A, mk_array *x, int ndim, const int64_t *shape);
mk_array *mk_ar_broadcast(mk_arena *A, mk_array *x, int ndim, const int64_t *shape);
mk_array *mk_ar_sum(mk_arena *A, mk_array *x, int naxes, const int *axes, bool keepdims);
mk_array *mk_ar_transpose(mk_arena *A, mk_array *x, int naxes, const int *axes);
mk_array *mk_ar_matmul(mk_arena *A, mk_array *a, mk_array *b);
/* Sums x down to a shape it was broadcast from (leading dims, dims of 1). */
mk_array *mk_ar_sum_to(mk_arena *A, mk_array *x, int ndim, const int64_t *shape);
/* The k-th output of p if it is still alive (borrowed from the arena), else NULL. */
mk_array *mk_ar_output(mk_arena *A, mk_prim *p, int k);

/* jvp of an op linear in its inputs, from its vjp: J t is the vjp of the
 * rule's own (linear) cotangent map, transposed (transforms.c uses this for
 * primitives without a jvp rule). */
int mk_jvp_from_vjp(mk_prim *p, mk_array *const *tans, mk_array **out_tans);

/* A rule for fused primitives (mx.fast norms, softmax...): the gradient of a
 * composition of simpler ops that computes the same function. build gets
 * the primitive and tracers standing for its inputs and returns its outputs
 * (new references). */
typedef int (*mk_compose_fn)(mk_prim *p, mk_array *const *inputs, mk_array **outs);
int mk_vjp_by_composition(mk_prim *p, mk_compose_fn build, mk_array *const *cots, const bool *want,
                          mk_array **grads);
int mk_jvp_by_composition(mk_prim *p, mk_compose_fn build, mk_array *const *tans, mk_array **out_tans);
int mk_vmap_by_composition(mk_prim *p, mk_compose_fn build, mk_array *const *inputs, const int *axes,
                           mk_array **outs, int *out_axes);

/* vmap helpers: moves x's batch axis (ax, -1: none) to position 0, adding a
 * broadcast one of size n when x has none. */
mk_array *mk_ar_batch_front(mk_arena *A, mk_array *x, int ax, int64_t n);

#endif
