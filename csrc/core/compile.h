/* mx.compile's graph work (core/compile.c): replaying a traced graph on new
 * inputs, merging equal nodes, shape-following broadcasts (MLX's
 * BroadcastAxes) and MLX's primitive names (export_to_dot). */
#ifndef MK_COMPILE_H
#define MK_COMPILE_H

#include "transforms.h"

/* The primitives between the tracers `ins` and `outs` that depend on a
 * tracer, inputs first (transforms.c). *order is malloc'd. Returns 0 or -1. */
int mk_graph_topo(int nout, mk_array *const *outs, int nin, mk_array *const *ins, mk_prim ***order, size_t *n);

/* The graph from the tracers `ins` to `outs`, rebuilt on the arrays `news`
 * (one per tracer). A primitive whose inputs keep their traced shapes is
 * re-created as it is (op->pure or op->copy_params); others go through their
 * batching rule with a batch of one (shapeless replays). Equal nodes (pure
 * op, equal params and output descriptions, same inputs) and equal 0-d
 * constants (dtype and bits) are merged, as MLX's compile. new_outs get new
 * references; outputs that do not depend on the tracers are returned as
 * they are. Returns 0 or -1. */
int mk_replay_graph(int nin, mk_array *const *ins, mk_array *const *news, int nout, mk_array *const *outs,
                    mk_array **new_outs);

/* MLX's BroadcastAxes: inputs[0] broadcast against the shapes of all the
 * inputs, the axes `ignore` (negative, increasing) excepted, which keep
 * inputs[0]'s sizes. The output shape is computed from the inputs' shapes
 * again whenever the node is replayed, so a shapeless compile follows new
 * shapes. Only inputs[0] gets a gradient. */
mk_array *mk_broadcast_axes(int n, mk_array *const *inputs, int nign, const int *ignore);
/* x broadcast to the shape of `like`: while tracing a BroadcastAxes node on
 * (x, like) (also when the shapes are equal now), else broadcast_to. */
mk_array *mk_ar_broadcast_like(mk_arena *A, mk_array *x, mk_array *like);

/* MLX's name of p's primitive ("Add", "Sum", "Broadcast"...) into buf. */
void mk_prim_mlx_name(const mk_prim *p, char *buf, size_t n);
/* snake_case into CamelCase ("take_along_axis" -> "TakeAlongAxis"). */
void mk_camel_name(const char *snake, char *buf, size_t n);

#endif
