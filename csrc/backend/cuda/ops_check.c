/* The CI's compile check of the GPU op kernels (tests/test_gpu_ops_compile.py,
 * no GPU needed): every kernel body the evaluators of ops_ew.c, ops_red.c and
 * ops_idx.c can ask for, found by making each op's lazy node for each dtype (so the
 * dtype rules are the ops' own), compiled with NVRTC for one architecture in
 * a few programs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops.h"
#include "ops_cuda.h"

typedef struct {
    char *s;
    size_t len, cap;
    int count, in_prog;
} prog;

static int flush(prog *g, int sm) {
    if (!g->in_prog) return 0;
    unsigned char *cubin = NULL;
    size_t size = 0;
    int rc = mkb_opkern_compile(g->s, sm, &cubin, &size);
    free(cubin);
    g->len = 0;
    g->s[0] = 0;
    g->in_prog = 0;
    return rc;
}

/* appends one body (the kernels it defines counted by `nk`) */
static int add(prog *g, const char *body, int nk, int sm) {
    size_t n = strlen(body);
    if (g->len + n + 1 > g->cap) {
        size_t cap = (g->cap + n + 1) * 2;
        char *s = realloc(g->s, cap);
        if (!s) return mk_nomem(), -1;
        g->s = s;
        g->cap = cap;
    }
    memcpy(g->s + g->len, body, n + 1);
    g->len += n;
    g->count += nk;
    /* programs of about 150 kernels: NVRTC's time and memory stay modest */
    return ++g->in_prog >= 150 ? flush(g, sm) : 0;
}

/* the dtypes of the node op(x) makes, or false where the op refuses x's dtype */
static bool node_types(mk_array *o, mk_dtype *in, mk_dtype *out) {
    if (!o) {
        mk_error_clear();
        return false;
    }
    mk_prim *p = atomic_load(&o->prim);
    *in = p ? p->inputs[0]->dtype : o->dtype;
    *out = o->dtype;
    mk_decref(o);
    return p != NULL;
}

/* ops_fast.c's and ops_idx.c's bodies go through add too */
typedef struct {
    prog *g;
    int sm;
} fast_ctx;
static int add_fast(void *c, const char *body, int nk) {
    fast_ctx *f = c;
    return add(f->g, body, nk, f->sm);
}

int mkb_cuda_check_op_kernels(int sm, int *count) {
    prog g = {0};
    char body[1024], name[32];
    int rc = 0, id = 0;
    int64_t two = 2;
    for (int t = 0; t < MK_NDTYPES && rc == 0; t++) {
        if (!mkb_cuda_tname[t]) continue;
        mk_array *x = mk_zeros(1, &two, (mk_dtype)t);
        if (!x) return -1;
        mk_dtype in, out;
        for (int op = 0; op < MK_NUNARY && rc == 0; op++) {
            snprintf(name, sizeof name, "k%d", id++);
            if (node_types(mk_unary((mk_unary_op)op, x), &in, &out) &&
                mkb_ew_body(body, sizeof body, name, MKB_EW_UNARY, op, in, out) > 0)
                rc = add(&g, body, 1, sm);
        }
        for (int op = 0; op < MK_NBINARY && rc == 0; op++) {
            snprintf(name, sizeof name, "k%d", id++);
            if (node_types(mk_binary((mk_binary_op)op, x, x), &in, &out) &&
                mkb_ew_body(body, sizeof body, name, MKB_EW_BINARY, op, in, out) > 0)
                rc = add(&g, body, 1, sm);
        }
        for (int u = 0; u < MK_NDTYPES && rc == 0; u++) {
            snprintf(name, sizeof name, "k%d", id++);
            if (mkb_ew_body(body, sizeof body, name, MKB_EW_ASTYPE, 0, (mk_dtype)t, (mk_dtype)u) > 0)
                rc = add(&g, body, 1, sm);
        }
        for (int w = 0; w < 6 && rc == 0; w++) {
            snprintf(name, sizeof name, "k%d", id++);
            if (node_types(mk_reduce((mk_reduce_op)w, x, -1, NULL, false), &in, &out) &&
                mkb_red_body(body, sizeof body, name, w, in, out) > 0)
                rc = add(&g, body, 3, sm);
        }
        for (int w = 0; w < 2 && rc == 0; w++) {
            snprintf(name, sizeof name, "k%d", id++);
            if (node_types(w == 0 ? mk_argmax(x, 0, true, false) : mk_argmin(x, 0, true, false), &in, &out) &&
                mkb_arg_body(body, sizeof body, name, w, in) > 0)
                rc = add(&g, body, 3, sm);
        }
        /* copies and where move elements of 1, 2, 4 and 8 bytes */
        if (rc == 0 && (t == MK_BOOL || t == MK_UINT16 || t == MK_UINT32 || t == MK_UINT64))
            for (int kind = MKB_EW_COPY; kind <= MKB_EW_WHERE && rc == 0; kind++) {
                snprintf(name, sizeof name, "k%d", id++);
                if (mkb_ew_body(body, sizeof body, name, kind, 0, (mk_dtype)t, (mk_dtype)t) > 0)
                    rc = add(&g, body, 1, sm);
            }
        mk_decref(x);
    }
    fast_ctx fc = {&g, sm};
    if (rc == 0) rc = mkb_fast_check_bodies(add_fast, &fc); /* mx.fast and the softmax rows (ops_fast.c) */
    if (rc == 0) rc = mkb_idx_check_kernels(add_fast, &fc); /* indexing and data movement (ops_idx.c) */
    if (rc == 0) rc = flush(&g, sm);
    *count = g.count;
    free(g.s);
    return rc;
}
