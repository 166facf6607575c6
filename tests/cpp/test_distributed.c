/* The distributed layer (csrc/core/distributed.c) with a backend of two
 * ranks, built by tests/test_namespaces.py:
 *
 *     cc -std=c11 -pthread -Icsrc tests/cpp/test_distributed.c -o test_distributed && ./test_distributed
 *
 * mkpy has only the singleton backend, so the ops' path for a group of more
 * than one process (a lazy node whose evaluation calls the backend) is
 * checked here: this file includes distributed.c and error.c, and stands in
 * for the graph (mk_node records the node; its evaluation is run by hand)
 * and for a two-rank backend that records which operation it was asked for.
 * Prints "ok" and exits 0 on success. */
#define _GNU_SOURCE
#include "core/distributed.c"
#include "core/error.c"

#include <stdio.h>

static int failures;
#define CHECK(cond)                                                                                    \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            failures++;                                                                                \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);                                 \
        }                                                                                              \
    } while (0)

/* ---- stand-ins for the graph (array.c) */
static mk_prim last_prim;
static mk_array last_out;

mk_array *mk_node(const mk_opdef *op, void *params, mk_dtype dtype, int ndim, const int64_t *shape, int ninputs,
                  mk_array *const *inputs) {
    if (last_prim.params && last_prim.op && last_prim.op->free_params) last_prim.op->free_params(last_prim.params);
    memset(&last_prim, 0, sizeof last_prim);
    memset(&last_out, 0, sizeof last_out);
    last_prim.op = op;
    last_prim.params = params;
    last_prim.ninputs = ninputs;
    last_prim.inputs = (mk_array **)inputs;
    last_out.dtype = dtype;
    last_out.ndim = ndim;
    for (int i = 0; i < ndim; i++) last_out.shape[i] = shape[i];
    atomic_init(&last_out.refcnt, 1);
    return &last_out;
}

static int views;
void mk_set_view(mk_array *out, const mk_array *in, int64_t offset, const int64_t *strides) {
    (void)out, (void)in, (void)offset, (void)strides;
    views++;
}

/* ---- a two-rank backend that records its calls */
static char calls[256];
static int freed;

static int two_rank(const mk_dist_group *g) {
    (void)g;
    return 1;
}
static int two_size(const mk_dist_group *g) {
    (void)g;
    return 2;
}
static mk_dist_group *two_split(mk_dist_group *g, int color, int key) {
    (void)color, (void)key;
    return group_new(g->backend, NULL);
}
static int two_reduce(mk_dist_group *g, mk_dist_reduce op, const mk_array *in, mk_array *out) {
    (void)g, (void)in, (void)out;
    strcat(calls, op == MK_DIST_SUM ? "sum," : op == MK_DIST_MAX ? "max," : "min,");
    return 0;
}
static int two_gather(mk_dist_group *g, const mk_array *in, mk_array *out) {
    (void)g, (void)in, (void)out;
    strcat(calls, "gather,");
    return 0;
}
static int two_send(mk_dist_group *g, const mk_array *in, int dst) {
    (void)g, (void)in;
    strcat(calls, dst == 0 ? "send0," : "send?,");
    return 0;
}
static int two_recv(mk_dist_group *g, mk_array *out, int src) {
    (void)g, (void)out;
    strcat(calls, src == 0 ? "recv0," : "recv?,");
    return 0;
}
static void two_free(void *state) {
    (void)state;
    freed++;
}
static const mk_dist_backend two = {"two", two_rank, two_size, two_split, two_reduce,
                                    two_gather, two_send, two_recv, two_free};

static void run_last(void) {
    mk_array *out = &last_out;
    CHECK(last_prim.op == &dist_def);
    CHECK(last_prim.op->eval(&last_prim, last_prim.inputs, &out) == 0);
}

int main(void) {
    mk_array x = {.dtype = MK_FLOAT32, .ndim = 2, .shape = {3, 4}, .size = 12};
    atomic_init(&x.refcnt, 1);
    mk_array s = {.dtype = MK_INT32, .ndim = 0, .size = 1};
    atomic_init(&s.refcnt, 1);
    mk_array *xp = &x, *sp = &s;
    (void)sp;

    /* the singleton: x itself, or the errors */
    mk_dist_group *one = mk_dist_init(false, "any");
    CHECK(one && mk_dist_rank(one) == 0 && mk_dist_size(one) == 1);
    CHECK(mk_dist_all_reduce(xp, MK_DIST_SUM, one) == xp && mk_dist_all_gather(xp, NULL) == xp);
    CHECK(mk_dist_send(xp, 0, one) == NULL && strcmp(mk_error_message(), "Cannot send to a singleton group") == 0);
    CHECK(mk_dist_split(one, 0, -1) == NULL && mk_error_code() == MK_ERR_RUNTIME);
    CHECK(mk_dist_init(true, "any") == NULL && mk_dist_init(false, "tcp") == NULL && mk_error_code() == MK_ERR_VALUE);
    mk_dist_group_decref(one);

    /* two ranks: one node per op, evaluated through the backend */
    mk_dist_group *g = group_new(&two, NULL);
    CHECK(g && mk_dist_size(g) == 2);
    mk_array *r = mk_dist_all_reduce(xp, MK_DIST_MAX, g);
    CHECK(r == &last_out && r->ndim == 2 && r->shape[0] == 3 && r->shape[1] == 4 && r->dtype == MK_FLOAT32);
    CHECK(last_prim.ninputs == 1 && last_prim.inputs[0] == xp);
    run_last();
    r = mk_dist_all_gather(xp, g);
    CHECK(r->ndim == 2 && r->shape[0] == 6 && r->shape[1] == 4);
    run_last();
    r = mk_dist_all_gather(&s, g); /* a scalar gathers into shape (2,) */
    CHECK(r->ndim == 1 && r->shape[0] == 2 && r->dtype == MK_INT32);
    run_last();
    r = mk_dist_send(xp, 0, g);
    CHECK(r && r->shape[0] == 3);
    run_last();
    CHECK(views == 1); /* send's result is x */
    CHECK(mk_dist_send(xp, 2, g) == NULL &&
          strcmp(mk_error_message(), "Invalid destination=2 for a group of size 2") == 0);
    int64_t shape[3] = {5, 6, 7};
    r = mk_dist_recv(3, shape, MK_INT16, 0, g);
    CHECK(r && r->ndim == 3 && r->shape[2] == 7 && r->dtype == MK_INT16 && last_prim.ninputs == 0);
    run_last();
    CHECK(mk_dist_recv(3, shape, MK_INT16, -1, g) == NULL &&
          strcmp(mk_error_message(), "Invalid source=-1 for a group of size 2") == 0);
    CHECK(strcmp(calls, "max,gather,gather,send0,recv0,") == 0);
    mk_dist_group *h = mk_dist_split(g, 0, -1);
    CHECK(h && mk_dist_size(h) == 2);
    mk_dist_group_decref(h);
    /* the nodes hold the group: it is freed with the last one */
    dist_params_free(last_prim.params);
    last_prim.params = NULL;
    CHECK(freed == 1);
    mk_dist_group_decref(g);
    CHECK(freed == 2);
    if (failures) return 1;
    printf("ok\n");
    return 0;
}
