/* The distributed layer: groups, the singleton backend and the collective
 * ops as lazy nodes (see distributed.h). */
#include "distributed.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "ops.h"

void mk_dist_group_incref(mk_dist_group *g) { atomic_fetch_add_explicit(&g->refcnt, 1, memory_order_relaxed); }

void mk_dist_group_decref(mk_dist_group *g) {
    if (atomic_fetch_sub_explicit(&g->refcnt, 1, memory_order_acq_rel) != 1) return;
    if (g->backend->free_state) g->backend->free_state(g->state);
    free(g);
}

static mk_dist_group *group_new(const mk_dist_backend *b, void *state) {
    mk_dist_group *g = malloc(sizeof *g);
    if (!g) return mk_nomem();
    atomic_init(&g->refcnt, 1);
    g->backend = b;
    g->state = state;
    return g;
}

mk_dist_group *mk_dist_split(mk_dist_group *g, int color, int key) { return g->backend->split(g, color, key); }

/* ------------------------------------------------- the singleton backend */

static int single_rank(const mk_dist_group *g) {
    (void)g;
    return 0;
}

static int single_size(const mk_dist_group *g) {
    (void)g;
    return 1;
}

static mk_dist_group *single_split(mk_dist_group *g, int color, int key) {
    (void)g, (void)color, (void)key;
    mk_error_set(MK_ERR_RUNTIME, "Cannot split the distributed group further.");
    return NULL;
}

/* The ops never build nodes for a group of one (they return x or raise), so
 * the collectives are only reached through a misuse of the table. */
static int single_all_reduce(mk_dist_group *g, mk_dist_reduce op, const mk_array *in, mk_array *out) {
    (void)g, (void)op, (void)in, (void)out;
    mk_error_set(MK_ERR_RUNTIME, "Communication not implemented in an empty distributed group.");
    return -1;
}

static int single_all_gather(mk_dist_group *g, const mk_array *in, mk_array *out) {
    return single_all_reduce(g, MK_DIST_SUM, in, out);
}

static int single_send(mk_dist_group *g, const mk_array *in, int dst) {
    (void)dst;
    return single_all_reduce(g, MK_DIST_SUM, in, NULL);
}

static int single_recv(mk_dist_group *g, mk_array *out, int src) {
    (void)src;
    return single_all_reduce(g, MK_DIST_SUM, NULL, out);
}

static const mk_dist_backend singleton_backend = {
    "singleton", single_rank, single_size, single_split, single_all_reduce,
    single_all_gather, single_send, single_recv, NULL,
};

/* ------------------------------------------------------------- init */

static const char *const backend_names[] = {"any", "mpi", "ring", "nccl", "jaccl"};
#define NBACKENDS (int)(sizeof backend_names / sizeof *backend_names)

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static mk_dist_group *initialized[NBACKENDS]; /* the cached global groups */

static int backend_index(const char *name) {
    for (int i = 0; i < NBACKENDS; i++)
        if (strcmp(name, backend_names[i]) == 0) return i;
    return -1;
}

bool mk_dist_is_available(const char *backend) {
    (void)backend;
    return false; /* no multi-process backend is built yet */
}

mk_dist_group *mk_dist_init(bool strict, const char *backend) {
    int i = backend_index(backend);
    if (i < 0) {
        mk_error_set(MK_ERR_VALUE,
                     "[distributed] The only valid values for backend are 'any', 'mpi', 'nccl', 'jaccl' and "
                     "'ring' but '%s' was provided.",
                     backend);
        return NULL;
    }
    pthread_mutex_lock(&init_lock);
    mk_dist_group *g = initialized[i];
    if (g) {
        mk_dist_group_incref(g);
        pthread_mutex_unlock(&init_lock);
        return g;
    }
    pthread_mutex_unlock(&init_lock);
    /* No backend can start: as MLX, a strict init fails and a lenient one
     * returns a singleton group (not cached, as MLX caches only real
     * backends). */
    if (strict) {
        if (i == 0)
            mk_error_set(MK_ERR_RUNTIME, "[distributed] Couldn't initialize any backend");
        else
            mk_error_set(MK_ERR_RUNTIME, "[distributed] Cannot initialize the '%s' backend: mkpy does not include it.",
                         backend);
        return NULL;
    }
    return group_new(&singleton_backend, NULL);
}

/* -------------------------------------------------------------- ops */

typedef struct {
    mk_dist_group *group;
    int kind; /* 0 reduce, 1 gather, 2 send, 3 recv */
    mk_dist_reduce op;
    int peer;
} dist_params;

static void dist_params_free(void *p) {
    dist_params *d = p;
    if (d) mk_dist_group_decref(d->group);
    free(d);
}

static int dist_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    dist_params *d = p->params;
    const mk_dist_backend *b = d->group->backend;
    switch (d->kind) {
    case 0: return b->all_reduce(d->group, d->op, in[0], out[0]);
    case 1: return b->all_gather(d->group, in[0], out[0]);
    case 2:
        /* the result is x once sent (MLX's Send outputs its input) */
        if (b->send(d->group, in[0], d->peer) < 0) return -1;
        mk_set_view(out[0], in[0], in[0]->offset, in[0]->strides);
        return 0;
    default: return b->recv(d->group, out[0], d->peer);
    }
}

static const mk_opdef dist_def = {"distributed", dist_eval, dist_params_free};

static mk_dist_group *group_or_global(mk_dist_group *g) {
    if (g) {
        mk_dist_group_incref(g);
        return g;
    }
    return mk_dist_init(false, "any");
}

static mk_array *dist_node(mk_dist_group *g, int kind, mk_dist_reduce op, int peer, mk_dtype dtype, int ndim,
                           const int64_t *shape, int ninputs, mk_array *const *inputs) {
    dist_params *d = malloc(sizeof *d);
    if (!d) {
        mk_dist_group_decref(g);
        return mk_nomem();
    }
    d->group = g; /* owned by the params from here */
    d->kind = kind;
    d->op = op;
    d->peer = peer;
    return mk_node(&dist_def, d, dtype, ndim, shape, ninputs, inputs);
}

mk_array *mk_dist_all_reduce(mk_array *x, mk_dist_reduce op, mk_dist_group *g_in) {
    mk_dist_group *g = group_or_global(g_in);
    if (!g) return NULL;
    if (mk_dist_size(g) == 1) {
        mk_dist_group_decref(g);
        mk_incref(x);
        return x;
    }
    return dist_node(g, 0, op, 0, x->dtype, x->ndim, x->shape, 1, &x);
}

mk_array *mk_dist_all_gather(mk_array *x, mk_dist_group *g_in) {
    mk_dist_group *g = group_or_global(g_in);
    if (!g) return NULL;
    int n = mk_dist_size(g);
    if (n == 1) {
        mk_dist_group_decref(g);
        mk_incref(x);
        return x;
    }
    int64_t shape[MK_MAX_NDIM];
    int ndim = x->ndim ? x->ndim : 1;
    if (x->ndim) {
        memcpy(shape, x->shape, x->ndim * sizeof *shape);
        shape[0] *= n;
    } else {
        shape[0] = n;
    }
    return dist_node(g, 1, MK_DIST_SUM, 0, x->dtype, ndim, shape, 1, &x);
}

mk_array *mk_dist_send(mk_array *x, int dst, mk_dist_group *g_in) {
    mk_dist_group *g = group_or_global(g_in);
    if (!g) return NULL;
    int n = mk_dist_size(g);
    if (n == 1) {
        mk_dist_group_decref(g);
        mk_error_set(MK_ERR_VALUE, "Cannot send to a singleton group");
        return NULL;
    }
    if (dst < 0 || dst >= n) {
        mk_dist_group_decref(g);
        mk_error_set(MK_ERR_VALUE, "Invalid destination=%d for a group of size %d", dst, n);
        return NULL;
    }
    return dist_node(g, 2, MK_DIST_SUM, dst, x->dtype, x->ndim, x->shape, 1, &x);
}

mk_array *mk_dist_recv(int ndim, const int64_t *shape, mk_dtype dtype, int src, mk_dist_group *g_in) {
    mk_dist_group *g = group_or_global(g_in);
    if (!g) return NULL;
    int n = mk_dist_size(g);
    if (n == 1) {
        mk_dist_group_decref(g);
        mk_error_set(MK_ERR_VALUE, "Cannot recv from a singleton group");
        return NULL;
    }
    if (src < 0 || src >= n) {
        mk_dist_group_decref(g);
        mk_error_set(MK_ERR_VALUE, "Invalid source=%d for a group of size %d", src, n);
        return NULL;
    }
    return dist_node(g, 3, MK_DIST_SUM, src, dtype, ndim, shape, 0, NULL);
}
