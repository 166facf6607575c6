/* A host emulation of the CUDA driver API entry points mkpy uses (README): device
 * memory is host memory, a "module" is a shared object fakecc.py built, a
 * launch runs min(grid, 3) blocks of one thread in turn (mkpy's op kernels
 * loop over the grid, so the results are the same). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
#define OK 0
CUresult cuInit(unsigned f) { (void)f; return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(int *d, int i) { *d = i; return OK; }
CUresult cuDeviceGetName(char *s, int n, int d) { (void)d; snprintf(s, n, "fake host GPU"); return OK; }
CUresult cuDeviceGetAttribute(int *v, int a, int d) {
    (void)d;
    *v = a == 75 ? 9 : a == 76 ? 0 : a == 16 ? 4 : 0;
    return OK;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int d) { (void)d; *b = (size_t)8 << 30; return OK; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { (void)d; *c = (void *)1; return OK; }
CUresult cuDevicePrimaryCtxReset_v2(int d) { (void)d; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { (void)d; return OK; }
CUresult cuCtxSetCurrent(void *c) { (void)c; return OK; }
CUresult cuCtxSynchronize(void) { return OK; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    void *m = malloc(n ? n : 1);
    if (!m) return 2;
    memset(m, 0xcd, n); /* garbage, as fresh device memory */
    *p = (CUdeviceptr)m;
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)p); return OK; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = (size_t)6 << 30; *t = (size_t)8 << 30; return OK; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { memcpy((void *)d, s, n); return OK; }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memcpy(d, (void *)s, n); return OK; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { memmove((void *)d, (void *)s, n); return OK; }
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { memset((void *)d, v, n); return OK; }
CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
    for (size_t i = 0; i < n; i++) ((unsigned short *)d)[i] = v;
    return OK;
}
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) {
    for (size_t i = 0; i < n; i++) ((unsigned *)d)[i] = v;
    return OK;
}
/* image: "MKFAKE:" and the shared object's path */
CUresult cuModuleLoadData(void **m, const void *image) {
    const char *s = image;
    if (strncmp(s, "MKFAKE:", 7) != 0) return 200;
    void *h = dlopen(s + 7, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "fakecuda: %s\n", dlerror());
        return 200;
    }
    *m = h;
    return OK;
}
CUresult cuModuleUnload(void *m) { (void)m; return OK; }
/* a function: fakecc.py's wrapper, NAME__fake3 (every block and thread of the launch) or NAME__fake
 * (the first blocks, one thread each) */
typedef struct {
    void *fn;
    int full;
} fakefn;
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
    char n[512];
    fakefn *r = calloc(1, sizeof *r);
    snprintf(n, sizeof n, "%s__fake3", name);
    if ((r->fn = dlsym(m, n))) r->full = 1;
    else {
        snprintf(n, sizeof n, "%s__fake", name);
        r->fn = dlsym(m, n);
    }
    if (!r->fn) {
        free(r);
        return 500;
    }
    *f = r;
    return OK;
}
CUresult cuFuncGetAttribute(int *v, int a, void *f) { (void)f; *v = a == 0 ? 1024 : 32; return OK; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { (void)f, (void)a, (void)v; return OK; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shm, void *stream, void **params, void **extra) {
    (void)shm, (void)stream, (void)extra;
    static int launches;
    const fakefn *fn = f;
    if (getenv("FAKECUDA_TRACE")) fprintf(stderr, "fakecuda: launch %d grid %u block %u\n", ++launches, gx, bx);
    if (fn->full) {
        if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return 1; /* CUDA_ERROR_INVALID_VALUE */
        ((void (*)(void **, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned))fn->fn)(params, gx, gy, gz,
                                                                                             bx, by, bz);
    } else {
        ((void (*)(void **, unsigned))fn->fn)(params, gx < 3 ? gx : 3);
    }
    return OK;
}
CUresult cuStreamQuery(void *s) { (void)s; return OK; }
CUresult cuStreamCreate(void **s, unsigned f) { (void)f; *s = (void *)2; return OK; }
CUresult cuStreamSynchronize(void *s) { (void)s; return OK; }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void *s) { (void)s; return cuMemsetD32_v2(d, v, n); }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) {
    (void)f;
    *p = calloc(1, n ? n : 1);
    return *p ? OK : 2;
}
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned f) { (void)f; *d = (CUdeviceptr)p; return OK; }
/* a module's global: the shared object's symbol (size unknown: 0) */
CUresult cuModuleGetGlobal_v2(CUdeviceptr *d, size_t *n, void *m, const char *name) {
    void *p = dlsym(m, name);
    if (!p) return 500;
    if (d) *d = (CUdeviceptr)p;
    if (n) *n = 0;
    return OK;
}
CUresult cuGetErrorName(CUresult r, const char **s) { (void)r; *s = "CUDA_ERROR_FAKE"; return OK; }
CUresult cuGetErrorString(CUresult r, const char **s) { (void)r; *s = "fake driver error"; return OK; }
