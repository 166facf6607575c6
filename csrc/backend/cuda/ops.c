/* The CUDA back-end's op table (mkb_backend.op_eval): which primitives run on
 * the GPU, by the op's name (each opdef is looked up once, then found by its
 * address). An op with no entry runs on the CPU (backend.c names it under
 * MKPY_DEBUG=1); an entry's evaluator may still hand a case it does not
 * cover (a dtype, a layout) to the op's own evaluator, which then reads its
 * inputs from the host (mk_data copies them down once). */
#include <pthread.h>
#include <string.h>

#include "driver.h"
#include "ops_cuda.h"

/* Ops whose evaluators only describe their outputs as views of an input's
 * buffer (no data is read), so they run as they are on any device. */
static int as_is(mk_prim *p, mk_array *const *in, mk_array *const *out) { return p->op->eval(p, in, out); }

typedef struct {
    const char *name;
    mk_eval_fn eval;
} entry;
static const entry table[] = {
    {"view", as_is},
    {"diagonal", as_is},
    {"matmul", mkb_cuda_gemm_eval},
    {"SegmentedMM", mkb_cuda_segmm_eval},
};

#define SEEN_MAX 128
static struct {
    const mk_opdef *op;
    mk_eval_fn eval;
} seen[SEEN_MAX];
static int nseen;
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;

mk_eval_fn mkb_cuda_op_eval(const mk_prim *p) {
    const mk_opdef *op = p->op;
    int n = __atomic_load_n(&nseen, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (seen[i].op == op) return seen[i].eval;
    mk_eval_fn f = NULL;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (strcmp(table[i].name, op->name) == 0) f = table[i].eval;
    static const mkb_cuda_opentry *const more[] = {mkb_cuda_ew_ops, mkb_cuda_red_ops, mkb_cuda_fast_ops,
                                                   mkb_cuda_idx_ops};
    for (size_t j = 0; j < sizeof more / sizeof *more && !f; j++)
        for (const mkb_cuda_opentry *e = more[j]; e->name && !f; e++)
            if (strcmp(e->name, op->name) == 0) f = e->eval;
    pthread_mutex_lock(&seen_mu);
    bool have = false;
    for (int i = 0; i < nseen && !have; i++) have = seen[i].op == op;
    if (!have && nseen < SEEN_MAX) {
        seen[nseen].op = op;
        seen[nseen].eval = f;
        __atomic_store_n(&nseen, nseen + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&seen_mu);
    return f;
}
