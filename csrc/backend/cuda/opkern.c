/* The GPU op kernels' programs (docs/design.md, "GPU op evaluators"): each
 * (op, dtypes) is a few lines of CUDA C++ instantiating a template of
 * mkpy/include/mkpy_cuda_ops.cuh, compiled by NVRTC for the device's
 * architecture the first time a node needs it and kept, loaded, in memory
 * (the CUBIN too, so that a context reset reloads without compiling). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "driver.h"
#include "ops_cuda.h"

const char *const mkb_cuda_tname[MK_NDTYPES] = {
    [MK_BOOL] = "b8",  [MK_UINT8] = "u8",    [MK_UINT16] = "u16", [MK_UINT32] = "u32",     [MK_UINT64] = "u64",
    [MK_INT8] = "i8",  [MK_INT16] = "i16",   [MK_INT32] = "i32",  [MK_INT64] = "i64",      [MK_FLOAT16] = "f16",
    [MK_FLOAT32] = "f32", [MK_FLOAT64] = NULL, [MK_BFLOAT16] = "bf16", [MK_COMPLEX64] = "c64",
};

char *mkb_opkern_source(const char *body) {
    static const char head[] = "#include \"mkpy_cuda_ops.cuh\"\nusing namespace mkc;\n";
    size_t n = strlen(body);
    char *s = malloc(sizeof head + n + 1);
    if (!s) return NULL;
    memcpy(s, head, sizeof head - 1);
    memcpy(s + sizeof head - 1, body, n + 1);
    return s;
}

int mkb_opkern_compile(const char *body, int sm, unsigned char **cubin, size_t *size) {
    char inc[4200];
    snprintf(inc, sizeof inc, "-I%s", mkk_runtime_dir());
    /* bit-exact arithmetic: no contraction into FMAs, IEEE division and
     * square root, subnormals kept (the CPU's -std=c11 code) */
    const char *const opts[] = {"-std=c++17", inc, "-fmad=false", "-prec-div=true", "-prec-sqrt=true", "-ftz=false"};
    char *src = mkb_opkern_source(body);
    if (!src) {
        mk_nomem();
        return -1;
    }
    int rc = mkb_nvrtc_compile_source(src, "mkpy_op.cu", sm, opts, (int)(sizeof opts / sizeof *opts), cubin, size);
    free(src);
    return rc;
}

/* ------------------------------------------------------------ the cache */

#define NBUCKET 512
typedef struct kent {
    char *body;
    unsigned char *cubin;
    size_t size;
    unsigned gen;
    CUmodule mod;
    CUfunction f[MKB_OPK_MAX];
    struct kent *next;
} kent;
static kent *buckets[NBUCKET];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static unsigned hash(const char *s) {
    unsigned h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h % NBUCKET;
}

/* loads e's CUBIN in the current context (under mu) */
static int load(kent *e, int nent, const char *const *names) {
    CUmodule m;
    if (mkb_cuda_check(mkb_cu.cuModuleLoadData(&m, e->cubin), "loading an op kernel") < 0) return -1;
    for (int i = 0; i < nent; i++)
        if (mkb_cuda_check(mkb_cu.cuModuleGetFunction(&e->f[i], m, names[i]), "finding an op kernel") < 0) {
            mkb_cu.cuModuleUnload(m);
            return -1;
        }
    if (e->mod && e->gen == mkb_cuda_generation()) mkb_cu.cuModuleUnload(e->mod);
    e->mod = m;
    e->gen = mkb_cuda_generation();
    return 0;
}

int mkb_opkern_get(const char *body, int nent, const char *const *names, CUfunction *out) {
    unsigned h = hash(body);
    pthread_mutex_lock(&mu);
    kent *e = buckets[h];
    while (e && strcmp(e->body, body) != 0) e = e->next;
    int rc = 0;
    if (e && e->gen != mkb_cuda_generation()) rc = load(e, nent, names); /* after a context reset */
    if (e && rc == 0) memcpy(out, e->f, (size_t)nent * sizeof *out);
    pthread_mutex_unlock(&mu);
    if (e) return rc;
    /* compile outside the lock; a second thread compiling the same source
     * wastes a compile, nothing else */
    kent *n = calloc(1, sizeof *n);
    size_t blen = strlen(body) + 1;
    if (n && (n->body = malloc(blen))) memcpy(n->body, body, blen);
    if (!n || !n->body) {
        free(n);
        mk_nomem();
        return -1;
    }
    if (mkb_opkern_compile(body, mkb_cuda_sm(), &n->cubin, &n->size) < 0) {
        free(n->body);
        free(n);
        return -1;
    }
    pthread_mutex_lock(&mu);
    for (e = buckets[h]; e && strcmp(e->body, body) != 0;) e = e->next;
    if (!e) {
        if (load(n, nent, names) < 0) {
            pthread_mutex_unlock(&mu);
            free(n->cubin);
            free(n->body);
            free(n);
            return -1;
        }
        n->next = buckets[h];
        buckets[h] = n;
        e = n;
        n = NULL;
    } else if (e->gen != mkb_cuda_generation()) {
        rc = load(e, nent, names);
    }
    if (rc == 0) memcpy(out, e->f, (size_t)nent * sizeof *out);
    pthread_mutex_unlock(&mu);
    if (n) {
        free(n->cubin);
        free(n->body);
        free(n);
    }
    return rc;
}

int mkb_opkern_launch(CUfunction f, int64_t work, unsigned block, void **params, const char *what) {
    int64_t g = (work + block - 1) / block;
    if (g < 1) g = 1;
    if (g > (1 << 20)) g = 1 << 20; /* the kernels loop over the rest */
    return mkb_cuda_check(mkb_cu.cuLaunchKernel(f, (unsigned)g, 1, 1, block, 1, 1, 0, NULL, params, NULL), what);
}

/* ------------------------------------------------------------ helpers */

int mkb_cuda_out(mk_array *o) {
    mk_buffer *b = mk_buffer_device((size_t)o->size * mk_dtype_size(o->dtype), &mkb_cuda_mem);
    if (!b) return -1;
    if (o->buf) mk_buffer_decref(o->buf);
    o->buf = b;
    mk_set_row_contiguous(o);
    return 0;
}

int mkb_cuda_out_donated(mk_prim *p, mk_array *o, mk_array *const *in, int n) {
    for (int k = 0; k < n; k++)
        if (mk_donate_device(p, o, in[k], &mkb_cuda_mem)) return 0;
    return mkb_cuda_out(o);
}

int mkb_cuda_ptr(const mk_array *a, CUdeviceptr *p) {
    if (mkb_cuda_buffer_ptr(a->buf, p) < 0) return -1;
    *p += (CUdeviceptr)(a->offset * (int64_t)mk_dtype_size(a->dtype));
    return 0;
}
