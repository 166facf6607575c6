/* Communication between mkpy processes (MLX's mlx.core.distributed).
 *
 * A group is a backend (a table of operations) plus that backend's state.
 * The only backend today is the singleton: the group of this one process
 * (rank 0, size 1), which init() returns when no backend is configured.
 * A multi-process backend (sockets, MPI) adds a table and an entry in
 * mk_dist_init; the ops below already build lazy nodes that call the
 * backend's collectives at evaluation for groups of more than one process.
 * Pure C, no Python. */
#ifndef MK_DISTRIBUTED_H
#define MK_DISTRIBUTED_H

#include <stdatomic.h>
#include <stdbool.h>

#include "array.h"

typedef enum { MK_DIST_SUM, MK_DIST_MAX, MK_DIST_MIN } mk_dist_reduce;

typedef struct mk_dist_group mk_dist_group;

/* A backend's operations. Collectives run inside evaluation (any worker
 * thread): `in` is evaluated, `out` has its shape and dtype and no storage
 * yet (mk_alloc_out it). Each returns 0, or -1 with mk_error_set. */
typedef struct mk_dist_backend {
    const char *name;
    int (*rank)(const mk_dist_group *g);
    int (*size)(const mk_dist_group *g);
    /* A new group (new reference) or NULL with the error set. */
    mk_dist_group *(*split)(mk_dist_group *g, int color, int key);
    int (*all_reduce)(mk_dist_group *g, mk_dist_reduce op, const mk_array *in, mk_array *out);
    int (*all_gather)(mk_dist_group *g, const mk_array *in, mk_array *out);
    int (*send)(mk_dist_group *g, const mk_array *in, int dst);
    int (*recv)(mk_dist_group *g, mk_array *out, int src);
    void (*free_state)(void *state);
} mk_dist_backend;

struct mk_dist_group {
    atomic_long refcnt;
    const mk_dist_backend *backend;
    void *state;
};

void mk_dist_group_incref(mk_dist_group *g);
void mk_dist_group_decref(mk_dist_group *g);
static inline int mk_dist_rank(const mk_dist_group *g) { return g->backend->rank(g); }
static inline int mk_dist_size(const mk_dist_group *g) { return g->backend->size(g); }
/* MLX's Group.split(color, key=-1): new reference or NULL. */
mk_dist_group *mk_dist_split(mk_dist_group *g, int color, int key);

/* Whether a backend can be instantiated ("any", "mpi", "ring", "nccl",
 * "jaccl"); mkpy has none of them yet, so false. */
bool mk_dist_is_available(const char *backend);
/* MLX's init(strict, backend): the global group of that backend, created
 * once and cached (new reference). Without a backend: the singleton group,
 * or with strict an error. An unknown backend name is a ValueError. */
mk_dist_group *mk_dist_init(bool strict, const char *backend);

/* The ops (MLX's distributed/ops.cpp). g NULL: mk_dist_init(false, "any").
 * For a group of size 1 the reductions and the gather return x itself and
 * send / recv are errors, as in MLX. */
mk_array *mk_dist_all_reduce(mk_array *x, mk_dist_reduce op, mk_dist_group *g);
mk_array *mk_dist_all_gather(mk_array *x, mk_dist_group *g);
mk_array *mk_dist_send(mk_array *x, int dst, mk_dist_group *g);
mk_array *mk_dist_recv(int ndim, const int64_t *shape, mk_dtype dtype, int src, mk_dist_group *g);

#endif
