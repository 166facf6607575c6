/* The distributed layer: groups, the singleton backend, init, the
 * communication thread and the collective ops as lazy nodes (see
 * distributed.h). */
#include "distributed.h"

#include <pthread.h>
#include <stdio.h>
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

mk_dist_group *mk_dist_group_new(const mk_dist_backend *b, void *state) {
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
 * the transfers are only reached through a misuse of the table. */
static int single_fail(void) {
    mk_error_set(MK_ERR_RUNTIME, "Communication not implemented in an empty distributed group.");
    return -1;
}

static int single_all_reduce(mk_dist_group *g, mk_dist_reduce op, mk_dtype dt, const void *in, void *out,
                             int64_t n) {
    (void)g, (void)op, (void)dt, (void)in, (void)out, (void)n;
    return single_fail();
}

static int single_all_gather(mk_dist_group *g, mk_dtype dt, const void *in, void *out, int64_t n) {
    (void)g, (void)dt, (void)in, (void)out, (void)n;
    return single_fail();
}

static int single_send(mk_dist_group *g, mk_dtype dt, const void *in, int64_t n, int peer) {
    (void)g, (void)dt, (void)in, (void)n, (void)peer;
    return single_fail();
}

static int single_recv(mk_dist_group *g, mk_dtype dt, void *out, int64_t n, int peer) {
    (void)g, (void)dt, (void)out, (void)n, (void)peer;
    return single_fail();
}

static const mk_dist_backend singleton_backend = {
    "singleton",       single_rank, single_size, single_split, single_all_reduce,
    single_all_gather, single_all_gather, single_send, single_recv, NULL,
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
    if (strcmp(backend, "any") == 0 || strcmp(backend, "mpi") == 0) return mk_dist_mpi_available();
    return false;
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
    if (!g && i <= 1) {
        /* "any" tries the one backend mkpy has; as MLX, a started backend
         * is cached under its name and under "any" */
        g = mk_dist_mpi_init(strict && i == 1);
        if (!g && mk_error_code() != MK_OK) {
            pthread_mutex_unlock(&init_lock);
            return NULL;
        }
        if (g) {
            initialized[0] = initialized[1] = g;
            mk_dist_group_incref(g); /* the cache holds two references */
        }
    }
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
    return mk_dist_group_new(&singleton_backend, NULL);
}

void mk_dist_finalize(bool failing) { mk_dist_mpi_finalize(failing); }

/* ---------------------------------------------- the communication thread */

/* One thread makes every transfer, in the order they were queued: the
 * order in which the evaluations reached them, the same on every rank.
 * It starts with the first job and lives as long as the process (the MPI
 * backend's finalize job is the last it runs). */
typedef struct comm_job {
    struct comm_job *next;
    int (*fn)(void *arg);
    void *arg;
    /* mk_dist_call: the caller waits for done, then takes rc and the error */
    bool sync, done;
    int rc;
    mk_errcode code;
    char *msg;
} comm_job;

static pthread_mutex_t comm_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t comm_cv = PTHREAD_COND_INITIALIZER;      /* a job was queued */
static pthread_cond_t comm_done_cv = PTHREAD_COND_INITIALIZER; /* a sync job is done */
static comm_job *comm_head, *comm_tail;
static bool comm_started;
static bool comm_busy; /* a transfer runs (on the thread or inline): the next one waits */

static void *comm_main(void *unused) {
    (void)unused;
    for (;;) {
        pthread_mutex_lock(&comm_mu);
        while (!comm_head || comm_busy) pthread_cond_wait(&comm_cv, &comm_mu);
        comm_job *j = comm_head;
        comm_head = j->next;
        if (!comm_head) comm_tail = NULL;
        comm_busy = true;
        pthread_mutex_unlock(&comm_mu);

        mk_error_clear();
        int rc = j->fn(j->arg);
        pthread_mutex_lock(&comm_mu);
        comm_busy = false;
        if (!j->sync) {
            pthread_mutex_unlock(&comm_mu);
            free(j);
            continue;
        }
        j->rc = rc;
        if (rc < 0) {
            j->code = mk_error_code();
            j->msg = strdup(mk_error_message());
        }
        j->done = true;
        pthread_cond_broadcast(&comm_done_cv);
        pthread_mutex_unlock(&comm_mu);
    }
    return NULL;
}

static int comm_queue(comm_job *j) {
    pthread_mutex_lock(&comm_mu);
    if (!comm_started) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int e = pthread_create(&t, &attr, comm_main, NULL);
        pthread_attr_destroy(&attr);
        if (e) {
            pthread_mutex_unlock(&comm_mu);
            mk_error_set(MK_ERR_RUNTIME, "[distributed] Cannot start the communication thread.");
            return -1;
        }
        comm_started = true;
    }
    j->next = NULL;
    if (comm_tail)
        comm_tail->next = j;
    else
        comm_head = j;
    comm_tail = j;
    pthread_cond_signal(&comm_cv);
    pthread_mutex_unlock(&comm_mu);
    return 0;
}

/* Runs fn(arg) on this thread when nothing is queued or running (so the
 * order of the transfers is kept): 1 with *rc set, or 0 when it must be
 * queued. */
static int comm_try_inline(int (*fn)(void *arg), void *arg, int *rc) {
    pthread_mutex_lock(&comm_mu);
    if (comm_head || comm_busy) {
        pthread_mutex_unlock(&comm_mu);
        return 0;
    }
    comm_busy = true;
    pthread_mutex_unlock(&comm_mu);
    *rc = fn(arg);
    pthread_mutex_lock(&comm_mu);
    comm_busy = false;
    if (comm_head) pthread_cond_signal(&comm_cv);
    pthread_mutex_unlock(&comm_mu);
    return 1;
}

int mk_dist_post(int (*fn)(void *arg), void *arg) {
    comm_job *j = calloc(1, sizeof *j);
    if (!j) {
        mk_nomem();
        return -1;
    }
    j->fn = fn;
    j->arg = arg;
    if (comm_queue(j) < 0) {
        free(j);
        return -1;
    }
    return 0;
}

int mk_dist_call(int (*fn)(void *arg), void *arg) {
    comm_job j = {.fn = fn, .arg = arg, .sync = true};
    if (comm_queue(&j) < 0) return -1;
    pthread_mutex_lock(&comm_mu);
    while (!j.done) pthread_cond_wait(&comm_done_cv, &comm_mu);
    pthread_mutex_unlock(&comm_mu);
    if (j.rc < 0) {
        mk_error_set(j.code, "%s", j.msg ? j.msg : "[distributed] Communication failed.");
        free(j.msg);
        return -1;
    }
    return 0;
}

/* -------------------------------------------------------------- ops */

enum { K_REDUCE, K_GATHER, K_SCATTER, K_SEND, K_RECV };
static const char *const kind_names[] = {"AllReduce", "AllGather", "ReduceScatter", "Send", "Recv"};

typedef struct {
    mk_dist_group *group;
    int kind;
    mk_dist_reduce op;
    int peer;
} dist_params;

static void dist_params_free(void *p) {
    dist_params *d = p;
    if (d) mk_dist_group_decref(d->group);
    free(d);
}

static void *dist_params_copy(const void *p) {
    dist_params *d = malloc(sizeof *d);
    if (!d) return mk_nomem();
    *d = *(const dist_params *)p;
    mk_dist_group_incref(d->group);
    return d;
}

/* A transfer handed to the communication thread: the node's token, the
 * dense data and, when the input was not dense, the copy to free. */
typedef struct {
    mk_async *token;
    dist_params *d;
    mk_dtype dtype;
    const void *in;
    void *out;
    int64_t n;
    void *tmp;
} dist_job;

static int dist_transfer(void *arg) {
    dist_job *j = arg;
    mk_dist_group *g = j->d->group;
    const mk_dist_backend *b = g->backend;
    int rc;
    switch (j->d->kind) {
    case K_REDUCE: rc = b->all_reduce(g, j->d->op, j->dtype, j->in, j->out, j->n); break;
    case K_GATHER: rc = b->all_gather(g, j->dtype, j->in, j->out, j->n); break;
    case K_SCATTER: rc = b->sum_scatter(g, j->dtype, j->in, j->out, j->n); break;
    case K_SEND: rc = b->send(g, j->dtype, j->in, j->n, j->d->peer); break;
    default: rc = b->recv(g, j->dtype, j->out, j->n, j->d->peer); break;
    }
    free(j->tmp);
    return rc;
}

static int dist_run(void *arg) {
    dist_job *j = arg;
    mk_async_finish(j->token, dist_transfer(j));
    free(j);
    return 0;
}

/* Transfers of at most MKPY_DIST_INLINE bytes (default 64 KiB; 0: none) run
 * on the evaluating thread when the communication thread is idle: they take
 * microseconds, less than handing them over and back (two wake-ups). */
static int64_t inline_bytes(void) {
    static _Atomic int64_t v = -1;
    int64_t b = atomic_load_explicit(&v, memory_order_relaxed);
    if (b < 0) {
        const char *e = getenv("MKPY_DIST_INLINE");
        b = e && *e ? strtoll(e, NULL, 10) : 65536;
        if (b < 0) b = 0;
        atomic_store_explicit(&v, b, memory_order_relaxed);
    }
    return b;
}

/* The element data of an evaluated array, dense and row-major: its own, or
 * a copy into *tmp (malloc'ed). */
static const void *dense_data(const mk_array *a, void **tmp) {
    size_t isz = mk_dtype_size(a->dtype);
    *tmp = NULL;
    if (a->size == 0 || (a->flags & MK_ROW_CONTIG)) return a->buf ? mk_data(a) : NULL;
    *tmp = malloc((size_t)a->size * isz);
    if (!*tmp) return mk_nomem();
    int64_t strides[MK_MAX_NDIM], s = 1;
    for (int k = a->ndim - 1; k >= 0; k--) {
        strides[k] = s;
        s *= a->shape[k];
    }
    mk_copy_into(a, *tmp, strides);
    return *tmp;
}

static int dist_eval(mk_prim *p, mk_array *const *in, mk_array *const *out) {
    dist_params *d = p->params;
    mk_array *o = out[0];
    dist_job *j = calloc(1, sizeof *j);
    if (!j) {
        mk_nomem();
        return -1;
    }
    j->d = d;
    j->dtype = o->dtype;
    j->n = o->size;
    if (d->kind == K_RECV) {
        if (mk_alloc_out(o) < 0) goto error;
    } else {
        const mk_array *x = in[0];
        if (x->size && !(j->in = dense_data(x, &j->tmp))) goto error;
        if (d->kind == K_SEND) {
            /* the result is x once sent (MLX's Send outputs its input) */
            mk_set_view(o, x, x->offset, x->strides);
            j->n = x->size;
        } else if (d->kind == K_REDUCE && !j->tmp && mk_donate(p, o, in[0])) {
            j->in = mk_data(o); /* in place, as MLX's in-place reduction on a donated input */
        } else if (mk_alloc_out(o) < 0) {
            goto error;
        }
        if (d->kind == K_GATHER) j->n = x->size;
    }
    j->out = o->buf ? mk_data(o) : NULL;
    if (mk_take_device_error()) goto error; /* a device buffer that could not come down */
    int rc;
    if ((int64_t)((size_t)j->n * mk_dtype_size(j->dtype)) * (d->kind == K_GATHER ? mk_dist_size(d->group) : 1) <=
            inline_bytes() &&
        comm_try_inline(dist_transfer, j, &rc)) {
        free(j);
        return rc;
    }
    if (!(j->token = mk_async_begin(p))) goto error;
    if (mk_dist_post(dist_run, j) < 0) {
        free(j->tmp);
        free(j);
        return -1; /* array.c finishes the token with the error */
    }
    return MK_EVAL_ASYNC;
error:
    free(j->tmp);
    free(j);
    return -1;
}

/* MLX's AllReduce / AllGather / ReduceScatter / Send / Recv. */
static void dist_name(const mk_prim *p, char *buf, size_t n) {
    snprintf(buf, n, "%s", kind_names[((const dist_params *)p->params)->kind]);
}

static int dist_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
static int dist_jvp(mk_prim *p, mk_array *const *tans, mk_array **out_tans);
static int dist_vmap(mk_prim *p, mk_array *const *inputs, const int *axes, mk_array **outs, int *out_axes);

/* own_device: the transfers read and write host memory (mk_data) whatever
 * the stream, as MLX's MPI back-end runs them on the CPU */
static const mk_opdef dist_def = {"distributed", dist_eval, dist_params_free, dist_vjp, dist_jvp, dist_vmap,
                                  false, false, 0, dist_params_copy, dist_name, .own_device = true};

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

/* The group of an op on x (g, or the global one; a new reference) with its
 * size in *n. NULL either on error (set) or, for a group of one, with *same
 * set to a new reference to x: the op is x itself. */
static mk_dist_group *op_group(mk_dist_group *g_in, mk_array *x, int *n, mk_array **same) {
    *same = NULL;
    mk_dist_group *g = group_or_global(g_in);
    if (!g) return NULL;
    *n = mk_dist_size(g);
    if (*n == 1) {
        mk_dist_group_decref(g);
        mk_incref(x);
        *same = x;
        return NULL;
    }
    return g;
}

mk_array *mk_dist_all_reduce(mk_array *x, mk_dist_reduce op, mk_dist_group *g_in) {
    int n;
    mk_array *same;
    mk_dist_group *g = op_group(g_in, x, &n, &same);
    if (!g) return same;
    return dist_node(g, K_REDUCE, op, 0, x->dtype, x->ndim, x->shape, 1, &x);
}

mk_array *mk_dist_all_gather(mk_array *x, mk_dist_group *g_in) {
    int n;
    mk_array *same;
    mk_dist_group *g = op_group(g_in, x, &n, &same);
    if (!g) return same;
    int64_t shape[MK_MAX_NDIM];
    int ndim = x->ndim ? x->ndim : 1;
    if (x->ndim) {
        memcpy(shape, x->shape, x->ndim * sizeof *shape);
        shape[0] *= n;
    } else {
        shape[0] = n;
    }
    return dist_node(g, K_GATHER, MK_DIST_SUM, 0, x->dtype, ndim, shape, 1, &x);
}

mk_array *mk_dist_sum_scatter(mk_array *x, mk_dist_group *g_in) {
    int n;
    mk_array *same;
    mk_dist_group *g = op_group(g_in, x, &n, &same);
    if (!g) return same;
    if (x->ndim == 0 || x->shape[0] % n != 0) {
        char sh[256];
        mk_shape_str(x->ndim, x->shape, sh, sizeof sh);
        mk_dist_group_decref(g);
        mk_error_set(MK_ERR_VALUE,
                     "[sum_scatter] Invalid shape=%s for a group of size %d. The first dimension (axis 0) must be "
                     "divisible by the group size and input mst have at least one.",
                     sh, n);
        return NULL;
    }
    int64_t shape[MK_MAX_NDIM];
    memcpy(shape, x->shape, x->ndim * sizeof *shape);
    shape[0] /= n;
    return dist_node(g, K_SCATTER, MK_DIST_SUM, 0, x->dtype, x->ndim, shape, 1, &x);
}

/* The group of a send / recv (a new reference) once the peer is checked,
 * with MLX's errors. */
static mk_dist_group *peer_group(mk_dist_group *g_in, int peer, bool send) {
    mk_dist_group *g = group_or_global(g_in);
    if (!g) return NULL;
    int n = mk_dist_size(g);
    if (n == 1)
        mk_error_set(MK_ERR_VALUE, send ? "Cannot send to a singleton group" : "Cannot recv from a singleton group");
    else if (peer < 0 || peer >= n)
        mk_error_set(MK_ERR_VALUE, "Invalid %s=%d for a group of size %d", send ? "destination" : "source", peer, n);
    else
        return g;
    mk_dist_group_decref(g);
    return NULL;
}

mk_array *mk_dist_send(mk_array *x, int dst, mk_dist_group *g_in) {
    mk_dist_group *g = peer_group(g_in, dst, true);
    if (!g) return NULL;
    return dist_node(g, K_SEND, MK_DIST_SUM, dst, x->dtype, x->ndim, x->shape, 1, &x);
}

mk_array *mk_dist_recv(int ndim, const int64_t *shape, mk_dtype dtype, int src, mk_dist_group *g_in) {
    mk_dist_group *g = peer_group(g_in, src, false);
    if (!g) return NULL;
    return dist_node(g, K_RECV, MK_DIST_SUM, src, dtype, ndim, shape, 0, NULL);
}

/* ------------------------------------------------ transformation rules */

/* As MLX's primitives.cpp: an all-reduce passes its cotangent through
 * unchanged (each rank's gradient is its own), its tangent is reduced
 * again, and it batches as itself; the gather's cotangent is this rank's
 * slice; the other ops have no gradient. */
static int dist_vjp(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads) {
    dist_params *d = p->params;
    grads[0] = NULL;
    if (!want[0] || !cots[0]) return 0;
    if (d->kind == K_REDUCE) {
        mk_incref(cots[0]);
        grads[0] = cots[0];
        return 0;
    }
    if (d->kind == K_GATHER) {
        const mk_array *x = p->inputs[0];
        int64_t start[MK_MAX_NDIM] = {0}, stop[MK_MAX_NDIM], step[MK_MAX_NDIM];
        int nd = p->outdesc[0].ndim;
        for (int k = 0; k < nd; k++) {
            stop[k] = p->outdesc[0].shape[k];
            step[k] = 1;
        }
        int64_t rows = x->ndim ? x->shape[0] : 1;
        start[0] = mk_dist_rank(d->group) * rows;
        stop[0] = start[0] + rows;
        mk_array *s = mk_slice(cots[0], start, stop, step);
        if (!s || x->ndim) {
            grads[0] = s;
            return s ? 0 : -1;
        }
        int ax = 0;
        grads[0] = mk_squeeze(s, 1, &ax);
        mk_decref(s);
        return grads[0] ? 0 : -1;
    }
    mk_error_set(MK_ERR_VALUE, "[%s] Primitive's vjp not implemented.", kind_names[d->kind]);
    return -1;
}

static int dist_jvp(mk_prim *p, mk_array *const *tans, mk_array **out_tans) {
    dist_params *d = p->params;
    out_tans[0] = NULL;
    if (!tans[0]) return 0;
    if (d->kind == K_REDUCE) out_tans[0] = mk_dist_all_reduce(tans[0], d->op, d->group);
    else if (d->kind == K_GATHER) out_tans[0] = mk_dist_all_gather(tans[0], d->group);
    else {
        mk_error_set(MK_ERR_VALUE, "[%s] Primitive's jvp not implemented.", kind_names[d->kind]);
        return -1;
    }
    return out_tans[0] ? 0 : -1;
}

static int dist_vmap(mk_prim *p, mk_array *const *inputs, const int *axes, mk_array **outs, int *out_axes) {
    dist_params *d = p->params;
    switch (d->kind) {
    case K_REDUCE: outs[0] = mk_dist_all_reduce(inputs[0], d->op, d->group); break;
    case K_GATHER: outs[0] = mk_dist_all_gather(inputs[0], d->group); break;
    case K_SEND: outs[0] = mk_dist_send(inputs[0], d->peer, d->group); break;
    default: {
        mk_error_set(MK_ERR_VALUE, "[%s] Primitive's vmap not implemented.", kind_names[d->kind]);
        return -1;
    }
    }
    out_axes[0] = axes[0];
    return outs[0] ? 0 : -1;
}
