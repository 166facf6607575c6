/* Which back-end runs a node (docs/design.md, "Back-ends"). */
#include "backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/diag.h"

const mkb_backend *const mkb_all[] = {&mkb_cpu_backend, &mkb_cuda_backend, NULL};

static const mkb_backend *gpu_backend; /* set once by pick() */
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;

/* Ops a GPU stream ran on the CPU, named once each under MKPY_DEBUG=1. */
static pthread_mutex_t named_mu = PTHREAD_MUTEX_INITIALIZER;
static const mk_opdef *named[256];
static int nnamed;

static void name_fallback(const mk_prim *p) {
    if (mkk_debug_level() < 1) return;
    pthread_mutex_lock(&named_mu);
    bool seen = false;
    for (int i = 0; i < nnamed && !seen; i++) seen = named[i] == p->op;
    if (!seen && nnamed < (int)(sizeof named / sizeof *named)) named[nnamed++] = p->op;
    pthread_mutex_unlock(&named_mu);
    if (!seen)
        mkk_debug(1, "op `%s` has no %s implementation yet: it runs on the CPU (its inputs are copied to the host "
                     "once, its outputs to the GPU when a GPU op needs them)",
                  p->op->name, gpu_backend->name);
}

static mk_eval_fn gpu_evaluator(const mk_prim *p) {
    if (gpu_backend->lost && gpu_backend->lost()) return NULL; /* the GPU is gone: the CPU's evaluators */
    mk_eval_fn f = gpu_backend->op_eval ? gpu_backend->op_eval(p) : NULL;
    if (!f) name_fallback(p);
    return f;
}

static void pick(void) {
    const char *want = getenv("MKPY_GPU");
    if (want && strcmp(want, "cpu") == 0) return;
    if (mkb_cuda_backend.available()) {
        gpu_backend = &mkb_cuda_backend;
        atomic_store(&mk_gpu_evaluator, gpu_evaluator);
    }
}

const mkb_backend *mkb_gpu(void) {
    pthread_once(&gpu_once, pick);
    return gpu_backend;
}

const mkb_backend *mkb_for_device(mk_device_type d) {
    if (d != MK_GPU) return &mkb_cpu_backend;
    const mkb_backend *g = mkb_gpu();
    return g && !(g->lost && g->lost()) ? g : &mkb_cpu_backend;
}
