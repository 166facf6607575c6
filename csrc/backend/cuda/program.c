/* The CUDA C++ program of one metal_kernel call: mkpy_cuda.h, the translated
 * kernel with #line markers at the user's lines (kernel/program.c, shared
 * with the CPU), and the entry point of the launch ABI (mkpy_cuda_launch.h):
 *   extern "C" __global__ void mkpy_cuda_entry(const mkpy_cuda_launch L,
 *                                              void *a0, ..., void *aN-1)
 * one pointer per entry of the CPU back-end's argument array, same order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda.h"

char *mkb_cuda_program(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                       const char *kernel_name) {
    if (k->prints) {
        mk_error_set(MK_ERR_RUNTIME,
                     "[metal_kernel] Kernel `%s` uses os_log or printf, which mkpy's CUDA back-end does not support "
                     "yet; run it on the CPU (mx.cpu stream, or MKPY_GPU=cpu).%s%s",
                     k->name, c->call_site && *c->call_site ? " Kernel called at " : "",
                     c->call_site ? c->call_site : "");
        return NULL;
    }
    char fh[600], fg[600], fs[600];
    snprintf(fh, sizeof fh, "<kernel %s header>", k->name);
    snprintf(fg, sizeof fg, "<kernel %s signature>", k->name);
    snprintf(fs, sizeof fs, "<kernel %s source>", k->name);
    mkk_sbuf b = {0};
    mkk_sb(&b, "#include \"mkpy_cuda.h\"\n");
    char *call = NULL;
    int nbarriers = 0;
    if (mkk_program_body(&b, k, generated, MKK_TARGET_CUDA, fh, fg, fs, &nbarriers) < 0 ||
        !(call = mkk_call_expr(k, c, inputs, kernel_name, "a%d", NULL))) {
        free(b.s);
        return NULL;
    }
    /* registers for the call's threadgroup size (Metal allows 1024), rounded
     * up to a power of two so that calls differing only a little share a program */
    int64_t requested = c->threadgroup[0] * c->threadgroup[1] * c->threadgroup[2], threads = 32;
    while (threads < requested && threads < 1024) threads *= 2;
    mkk_sb(&b, "#line 1 \"<mkpy entry>\"\n");
    mkk_sbf(&b, "extern \"C\" __global__ void __launch_bounds__(%d) mkpy_cuda_entry(const mkpy_cuda_launch L",
            (int)threads);
    const int nargs = mkk_nargs(k, c, inputs);
    for (int i = 0; i < nargs; i++) mkk_sbf(&b, ", void *a%d", i);
    mkk_sb(&b, ") {\n    mkpy_thread_attrs t;\n    if (!mkpy::cuda_thread_attrs(L, t)) return;\n    ");
    if (nbarriers) mkk_sb(&b, "mkpy::barrier_init();\n    ");
    mkk_sb(&b, call);
    mkk_sb(&b, "}\n");
    free(call);
    if (b.failed) return mk_nomem();
    return b.s;
}
