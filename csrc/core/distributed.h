/* Communication between mkpy processes (MLX's mlx.core.distributed).
 *
 * A group is a backend (a table of operations) plus that backend's state.
 * Two backends: the singleton, the group of this one process (rank 0, size
 * 1) that init() returns when no multi-process backend starts, and MPI
 * (dist_mpi.c: Open MPI's libmpi, loaded at run time). The ops build lazy
 * nodes; at evaluation a node hands its transfer to the communication
 * thread (one per process, in the order the nodes run, which is the same
 * on every rank of an SPMD program) and the evaluation goes on with what
 * does not need its result (MK_EVAL_ASYNC, array.h).
 * Pure C, no Python. */
#ifndef MK_DISTRIBUTED_H
#define MK_DISTRIBUTED_H

#include <stdatomic.h>
#include <stdbool.h>

#include "array.h"

typedef enum { MK_DIST_SUM, MK_DIST_MAX, MK_DIST_MIN } mk_dist_reduce;

typedef struct mk_dist_group mk_dist_group;

/* A backend's operations. The transfers run on the communication thread,
 * one at a time, on dense row-major buffers of n elements of dtype (n may be
 * 0). Each returns 0, or -1 with mk_error_set (on that thread). */
typedef struct mk_dist_backend {
    const char *name;
    int (*rank)(const mk_dist_group *g);
    int (*size)(const mk_dist_group *g);
    /* A new group (new reference) or NULL with the error set. */
    mk_dist_group *(*split)(mk_dist_group *g, int color, int key);
    /* out = op over the ranks of in (in == out: in place). */
    int (*all_reduce)(mk_dist_group *g, mk_dist_reduce op, mk_dtype dt, const void *in, void *out, int64_t n);
    /* out (size * n elements) = every rank's in (n elements), rank-major. */
    int (*all_gather)(mk_dist_group *g, mk_dtype dt, const void *in, void *out, int64_t n);
    /* out (n elements) = the sum over the ranks of block `rank` of in (size * n). */
    int (*sum_scatter)(mk_dist_group *g, mk_dtype dt, const void *in, void *out, int64_t n);
    int (*send)(mk_dist_group *g, mk_dtype dt, const void *in, int64_t n, int dst);
    int (*recv)(mk_dist_group *g, mk_dtype dt, void *out, int64_t n, int src);
    void (*free_state)(void *state);
} mk_dist_backend;

struct mk_dist_group {
    atomic_long refcnt;
    const mk_dist_backend *backend;
    void *state;
};

mk_dist_group *mk_dist_group_new(const mk_dist_backend *b, void *state);
void mk_dist_group_incref(mk_dist_group *g);
void mk_dist_group_decref(mk_dist_group *g);
static inline int mk_dist_rank(const mk_dist_group *g) { return g->backend->rank(g); }
static inline int mk_dist_size(const mk_dist_group *g) { return g->backend->size(g); }
/* MLX's Group.split(color, key=-1): new reference or NULL. */
mk_dist_group *mk_dist_split(mk_dist_group *g, int color, int key);

/* Whether a backend can be instantiated ("any", "mpi", "ring", "nccl",
 * "jaccl"): "mpi" and "any" when libmpi loads, the others never. */
bool mk_dist_is_available(const char *backend);
/* MLX's init(strict, backend): the global group of that backend, created
 * once and cached (new reference). Without a backend: the singleton group,
 * or with strict an error. An unknown backend name is a ValueError. */
mk_dist_group *mk_dist_init(bool strict, const char *backend);
/* At exit: ends the MPI backend (MPI_Finalize) when it started, unless
 * `failing` (the program ends on an error: the launcher then stops the
 * other ranks) or a transfer is stuck. */
void mk_dist_finalize(bool failing);

/* Runs fn(arg) on the communication thread and waits for it; fn returns 0,
 * or -1 with the error set, which is then this thread's (the MPI backend
 * makes every MPI call there). */
int mk_dist_call(int (*fn)(void *arg), void *arg);
/* Queues fn(arg) on the communication thread without waiting. 0 or -1. */
int mk_dist_post(int (*fn)(void *arg), void *arg);

/* The ops (MLX's distributed/ops.cpp). g NULL: mk_dist_init(false, "any").
 * For a group of size 1 the reductions, the gather and sum_scatter return
 * x itself and send / recv are errors, as in MLX. */
mk_array *mk_dist_all_reduce(mk_array *x, mk_dist_reduce op, mk_dist_group *g);
mk_array *mk_dist_all_gather(mk_array *x, mk_dist_group *g);
mk_array *mk_dist_sum_scatter(mk_array *x, mk_dist_group *g);
mk_array *mk_dist_send(mk_array *x, int dst, mk_dist_group *g);
mk_array *mk_dist_recv(int ndim, const int64_t *shape, mk_dtype dtype, int src, mk_dist_group *g);

/* dist_mpi.c */
bool mk_dist_mpi_available(void);
/* The MPI world group, or NULL: with the error set when strict, else with
 * none (not launched by mpirun, or no libmpi). */
mk_dist_group *mk_dist_mpi_init(bool strict);
void mk_dist_mpi_finalize(bool failing);

#endif
