/* The CUDA C++ program of one metal_kernel call: mkpy_cuda.h, the translated
 * kernel with #line markers at the user's lines (kernel/program.c, shared
 * with the CPU), and the entry point of the launch ABI (mkpy_cuda_launch.h):
 *   extern "C" __global__ void mkpy_cuda_entry(const mkpy_cuda_launch L,
 *                                              void *a0, ..., void *aN-1)
 * one pointer per entry of the CPU back-end's argument array, same order.
 *
 * Also the two texts that MLX's mx.fast.cuda_kernel takes for the same call
 * (mkb_cuda_mlx_sources: mkpy.cuda.metal_kernel runs Metal kernels in real
 * MLX on its CUDA back-end). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cuda/cuda.h"
#include "backend/diskcache.h"

/* Kernels that print do not run on CUDA yet: a RuntimeError naming the kernel, `what` refuses
 * them and `hint` says what to do; 0 for the others. */
static int refuse_printing(const mkk_kernel *k, const mkk_call *c, const char *what, const char *hint) {
    if (!k->prints) return 0;
    mk_error_set(MK_ERR_RUNTIME,
                 "[metal_kernel] Kernel `%s` uses os_log or printf, which %s does not support yet%s.%s%s", k->name, what, hint, c->call_site && *c->call_site ? " Kernel called at " : "",
                 c->call_site ? c->call_site : "");
    return -1;
}

/* CUDA's own built-in variables and device functions: Metal has none of them,
 * so in the user's header and source each is renamed to a name nothing
 * declares. NVRTC then refuses a kernel that uses one, and dispatch.c has
 * clang, Metal's front end, say why in a Mac's words ("use of undeclared
 * identifier '__shfl_xor_sync'"), instead of the GPU running code that a Mac
 * rejects. The runtime header above is parsed already, and the names are
 * restored after the user's text, for the entry point. */
static const char *const cuda_only_names[] = {
    "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize",
    "__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or", "__syncwarp",
    "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync", "__ballot_sync", "__any_sync",
    "__all_sync", "__activemask", "__match_any_sync", "__match_all_sync", "__reduce_add_sync",
    "__threadfence", "__threadfence_block", "__threadfence_system",
    "atomicAdd", "atomicSub", "atomicExch", "atomicMin", "atomicMax", "atomicInc", "atomicDec", "atomicCAS",
    "atomicAnd", "atomicOr", "atomicXor",
    "__ldg", "__popc", "__popcll", "__clz", "__clzll", "__ffs", "__brev", "__expf", "__logf", "__sinf", "__cosf",
    "__powf", "__fdividef", "__float2half", "__half2float", "__nanosleep",
};

/* The translated kernel with #line markers naming the kernel's header, signature and source;
 * the kernel's own text is b's [*kernel_at, *kernel_end) (when not NULL), without the renames
 * around it. */
static int program_body(mkk_sbuf *b, const mkk_kernel *k, const char *generated, int *nbarriers, int *simt,
                        size_t *kernel_at, size_t *kernel_end) {
    char fh[600], fg[600], fs[600];
    snprintf(fh, sizeof fh, "<kernel %s header>", k->name);
    snprintf(fg, sizeof fg, "<kernel %s signature>", k->name);
    snprintf(fs, sizeof fs, "<kernel %s source>", k->name);
    const size_t n = sizeof cuda_only_names / sizeof *cuda_only_names;
    for (size_t i = 0; i < n; i++) mkk_sbf(b, "#define %s mkpy_not_metal_%s\n", cuda_only_names[i], cuda_only_names[i]);
    if (kernel_at) *kernel_at = b->n;
    int rc = mkk_program_body(b, k, generated, MKK_TARGET_CUDA, fh, fg, fs, nbarriers, simt);
    if (kernel_end) *kernel_end = b->n;
    for (size_t i = 0; i < n; i++) mkk_sbf(b, "#undef %s\n", cuda_only_names[i]);
    return rc;
}

char *mkb_cuda_program(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                       const char *kernel_name, bool all_parts, bool *left_out) {
    if (left_out) *left_out = false;
    if (refuse_printing(k, c, "mkpy's CUDA back-end", "; run it on the CPU (mx.cpu stream, or MKPY_GPU=cpu)") < 0)
        return NULL;
    mkk_sbuf b = {0}, body = {0};
    char *call = NULL;
    int nbarriers = 0, simt = 0;
    size_t kernel_at = 0, kernel_end = 0;
    if (program_body(&body, k, generated, &nbarriers, &simt, &kernel_at, &kernel_end) < 0 ||
        !(call = mkk_call_expr(k, c, inputs, kernel_name, "a%d", NULL))) {
        free(body.s);
        return NULL;
    }
    /* registers for the call's threadgroup size (Metal allows 1024), rounded
     * up to a power of two so that calls differing only a little share a program */
    int64_t requested = c->threadgroup[0] * c->threadgroup[1] * c->threadgroup[2], threads = 32;
    while (threads < requested && threads < 1024) threads *= 2;
    /* Metal's active mask tracked by the translation (kernel/simt.c): one slot per thread */
    if (simt) mkk_sbf(&b, "#define MKPY_SIMT %d\n", (int)threads);
    if (!all_parts && body.s && mkb_cuda_parts_defines(&b, body.s + kernel_at, kernel_end - kernel_at) && left_out)
        *left_out = true;
    mkk_sb(&b, "#include \"mkpy_cuda.h\"\n");
    mkk_sb(&b, body.s ? body.s : "");
    free(body.s);
    mkk_sb(&b, "#line 1 \"<mkpy entry>\"\n");
    mkk_sbf(&b, "extern \"C\" __global__ void __launch_bounds__(%d) mkpy_cuda_entry(const mkpy_cuda_launch L",
            (int)threads);
    const int nargs = mkk_nargs(k, c, inputs);
    for (int i = 0; i < nargs; i++) mkk_sbf(&b, ", void *a%d", i);
    /* only the attributes the kernel reads are written (mkpy_launch.h's bits, mkk_attrs's order): the
     * others would cost NVVM as much time as a small kernel's own code, to be dropped */
    unsigned attrs = 0;
    for (int i = 0; i < MKK_NATTRS; i++) attrs |= (unsigned)k->attr_used[i] << i;
    if (simt) /* the warp's lanes, read first, while all are converged: the first mask is those in the extent */
        mkk_sbf(&b, ") {\n    const unsigned mkpy_warp = __activemask();\n    mkpy_thread_attrs t;\n"
                    "    if (!mkpy::simt_begin(mkpy_warp, mkpy::cuda_thread_attrs<%#xu>(L, t))) return;\n    ", attrs);
    else
        mkk_sbf(&b, ") {\n    mkpy_thread_attrs t;\n    if (!mkpy::cuda_thread_attrs<%#xu>(L, t)) return;\n    ", attrs);
    if (nbarriers) mkk_sb(&b, "mkpy::barrier_init();\n    ");
    mkk_sb(&b, call);
    mkk_sb(&b, "}\n");
    free(call);
    if (b.failed) return mk_nomem();
    return b.s;
}

/* ------------------------------------- MLX's cuda_kernel as the host */

/* Appends runtime header `name` with the runtime headers it includes
 * ("mkpy_x.h" files of the runtime folder) put in place, each at its first
 * #include only (they are all guarded, and under NVRTC every one of those
 * #includes is taken), with #line markers naming the files. */
static int inline_header(mkk_sbuf *b, const char *name, char (*seen)[64], int *nseen, int depth) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", mkk_runtime_dir(), name);
    char *text = depth < 8 ? mkb_read_file(path) : NULL;
    if (!text) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] mkpy's CUDA runtime header %s could not be read.", path);
        return -1;
    }
    snprintf(seen[(*nseen)++], 64, "%s", name);
    mkk_sbf(b, "#line 1 \"%s\"\n", name);
    int line = 1, rc = 0;
    for (char *p = text; *p && rc == 0; line++) {
        char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char inc[64] = "";
        const char *q = p;
        while (*q == ' ' || *q == '\t') q++;
        if (*q == '#') {
            q++;
            while (*q == ' ' || *q == '\t') q++;
            if (strncmp(q, "include", 7) == 0) {
                q += 7;
                while (*q == ' ' || *q == '\t') q++;
                const char *close = *q == '"' ? strchr(q + 1, '"') : NULL;
                if (close && close < p + len && (size_t)(close - q - 1) < sizeof inc) {
                    memcpy(inc, q + 1, (size_t)(close - q - 1));
                    inc[close - q - 1] = 0;
                }
            }
        }
        char inc_path[4500];
        snprintf(inc_path, sizeof inc_path, "%s/%s", mkk_runtime_dir(), inc);
        if (*inc && strncmp(inc, "mkpy_", 5) == 0 && access(inc_path, R_OK) == 0) {
            bool again = false;
            for (int i = 0; i < *nseen; i++) again |= strcmp(seen[i], inc) == 0;
            if (!again) {
                if (*nseen == 32) {
                    mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Too many runtime headers under %s.", name);
                    rc = -1;
                    break;
                }
                rc = inline_header(b, inc, seen, nseen, depth + 1);
                mkk_sbf(b, "#line %d \"%s\"\n", line + 1, name);
            } else {
                mkk_sb(b, "\n");
            }
        } else {
            mkk_sbf(b, "%.*s\n", (int)len, p);
        }
        p = end ? end + 1 : p + len;
    }
    free(text);
    return rc;
}

int mkb_cuda_mlx_sources(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, char **body,
                         char **header, char **name) {
    *body = NULL;
    if (header) *header = *name = NULL;
    if (refuse_printing(k, c, "mkpy's CUDA translation", "") < 0) return -1;
    char *generated = NULL, *kname = NULL, *call = NULL;
    if (mkk_generate(k, c, inputs, &generated, &kname) < 0) return -1;
    mkk_sbuf fn = {0}, b = {0}, h = {0}, nm = {0};
    int rc = -1;
    /* The body calls the Metal kernel function through a macro that the header defines: MLX
     * searches the body for `<input>_shape` and the like, and the function's name holds the
     * kernel's name, which could hold such a text. The function is global (`::`): MLX's
     * __global__ function of the same name is in mlx::core::cu, where the body is. */
    mkk_sbf(&fn, "#define MKPY_MLX_KERNEL ::%s\n", kname);
    if (fn.failed || !(call = mkk_call_expr(k, c, inputs, "MKPY_MLX_KERNEL", "a%d", NULL))) goto done;
    /* registers for the call's threadgroup, as mkpy_cuda_entry's __launch_bounds__ (program above):
     * the header declares MLX's __global__ function with it; the body says which, so that it names
     * the header too */
    int64_t requested = c->threadgroup[0] * c->threadgroup[1] * c->threadgroup[2], threads = 32;
    while (threads < requested && threads < 1024) threads *= 2;
    mkk_sbf(&b, "    // mkpy: blocks of at most %d threads (__launch_bounds__ in the header)\n", (int)threads);
    /* the header says whether the kernel tracks Metal's active mask (MKPY_SIMT) */
    mkk_sb(&b, "    MKPY_MLX_SIMT_WARP;\n    mkpy_thread_attrs t;\n"
               "    if (!MKPY_MLX_SIMT_BEGIN(::mkpy::mlx_thread_attrs(" MKB_MLX_GRID_NAME ", t))) return;\n");
    int arg = 0;
    for (int i = 0; i < k->ninputs; i++) {
        mkk_sbf(&b, "    void *a%d = (void *)" MKB_MLX_INPUT_FMT ";\n", arg++, i);
        if (inputs[i]->ndim == 0) continue;
        if (k->shape_info[i][0]) mkk_sbf(&b, "    void *a%d = (void *)" MKB_MLX_INPUT_FMT "_shape.data();\n", arg++, i);
        if (k->shape_info[i][1])
            mkk_sbf(&b, "    void *a%d = (void *)" MKB_MLX_INPUT_FMT "_strides.data();\n", arg++, i);
        if (k->shape_info[i][2]) mkk_sbf(&b, "    void *a%d = (void *)&" MKB_MLX_INPUT_FMT "_ndim;\n", arg++, i);
    }
    for (int i = 0; i < k->noutputs; i++) mkk_sbf(&b, "    void *a%d = (void *)" MKB_MLX_OUTPUT_FMT ";\n", arg++, i);
    /* the header says whether the kernel's barriers need their per-thread state */
    mkk_sb(&b, "    MKPY_MLX_BARRIER_INIT;\n    ");
    mkk_sb(&b, call);
    if (b.failed) goto nomem;
    if (header) {
        char seen[32][64];
        int nseen = 0, nbarriers = 0, simt = 0;
        mkk_sbuf text = {0};
        if (program_body(&text, k, generated, &nbarriers, &simt, NULL, NULL) < 0) goto done;
        /* the runtime's `#pragma clang ...` lines mean nothing to NVRTC */
        mkk_sb(&h, "#pragma nv_diag_suppress 161\n#define MKPY_CUDA_HOSTED 1\n");
        if (simt) mkk_sbf(&h, "#define MKPY_SIMT %d\n", (int)threads);
        if (inline_header(&h, "mkpy_cuda.h", seen, &nseen, 0) < 0) {
            free(text.s);
            goto done;
        }
        mkk_sb(&h, text.s ? text.s : "");
        free(text.s);
        mkk_sb(&h, fn.s);
        mkk_sb(&h, simt ? "#define MKPY_MLX_SIMT_WARP const unsigned mkpy_simt_warp = __activemask()\n"
                          "#define MKPY_MLX_SIMT_BEGIN(ok) ::mkpy::simt_begin(mkpy_simt_warp, (ok))\n"
                        : "#define MKPY_MLX_SIMT_WARP (void)0\n#define MKPY_MLX_SIMT_BEGIN(ok) (ok)\n");
        mkk_sbf(&h, "#define MKPY_MLX_BARRIER_INIT %s\n", nbarriers ? "::mkpy::barrier_init()" : "(void)0");
        if (h.failed || b.failed) goto nomem;
        /* the name MLX gets: the kernel's, and a hash of the program (MLX before 0.32.1 keyed its
         * modules by the name alone, and two kernels may share a name) */
        char hex[33];
        mkb_hash_hex(h.s, b.s, hex);
        mkk_sbf(&nm, "%s_%.16s", k->name, hex);
        /* MLX's __global__ function, declared as MLX will define it, with launch bounds (a
         * declaration that did not match would make MLX's name expression ambiguous) */
        mkk_sbf(&h, "#line 1 \"<mkpy entry, in MLX's cuda_kernel>\"\nnamespace mlx::core::cu {\n"
                    "__global__ void __launch_bounds__(%d) custom_kernel_%s(", (int)threads, nm.s ? nm.s : "");
        for (int i = 0; i < k->ninputs; i++) {
            mkk_sbf(&h, "const %s* " MKB_MLX_INPUT_FMT ", ", mkk_cuda_type(inputs[i]->dtype), i);
            if (inputs[i]->ndim == 0) continue;
            if (k->shape_info[i][0]) mkk_sbf(&h, "const __grid_constant__ Shape " MKB_MLX_INPUT_FMT "_shape, ", i);
            if (k->shape_info[i][1])
                mkk_sbf(&h, "const __grid_constant__ Strides " MKB_MLX_INPUT_FMT "_strides, ", i);
            if (k->shape_info[i][2]) mkk_sbf(&h, "const __grid_constant__ int " MKB_MLX_INPUT_FMT "_ndim, ", i);
        }
        mkk_sb(&h, "const uint32_t* " MKB_MLX_GRID_NAME);
        for (int i = 0; i < k->noutputs; i++)
            mkk_sbf(&h, ", %s* " MKB_MLX_OUTPUT_FMT, mkk_cuda_type(c->output_dtypes[i]), i);
        mkk_sb(&h, ");\n}\n");
        if (h.failed || nm.failed) goto nomem;
        *header = h.s;
        *name = nm.s;
        h.s = nm.s = NULL;
    }
    *body = b.s;
    b.s = NULL;
    rc = 0;
    goto done;
nomem:
    mk_nomem();
done:
    free(generated);
    free(kname);
    free(call);
    free(fn.s);
    free(b.s);
    free(h.s);
    free(nm.s);
    return rc;
}
