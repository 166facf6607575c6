/* NVRTC's entry points mkpy uses, compiling for the host through fakecc.py
 * (scripts/fakecuda/README). The programs and their shared objects are kept
 * in $FAKECUDA_DIR/cache (default: this library's folder), keyed by the
 * source and the runtime headers' contents. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef struct {
    char *src, *log, *img;
    size_t imglen;
    char lowered[512];
} prog;
static const char *dir(void) {
    static char here[4096];
    const char *d = getenv("FAKECUDA_DIR");
    if (d && *d) return d;
    if (!here[0]) {
        Dl_info info;
        if (dladdr((void *)dir, &info) && info.dli_fname) snprintf(here, sizeof here, "%s", info.dli_fname);
        char *slash = strrchr(here, '/');
        if (slash) *slash = 0;
        else snprintf(here, sizeof here, ".");
    }
    return here;
}
int nvrtcVersion(int *a, int *b) { *a = 13; *b = 0; return 0; }
int nvrtcCreateProgram(prog **p, const char *src, const char *name, int nh, const char *const *h, const char *const *hn) {
    (void)name, (void)nh, (void)h, (void)hn;
    *p = calloc(1, sizeof **p);
    (*p)->src = strdup(src);
    return 0;
}
static unsigned long long fnv(const char *s) {
    unsigned long long h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}
int nvrtcCompileProgram(prog *p, int n, const char *const *opts) {
    char inc[8192] = "", src[512], so[512], cmd[16384], logf[512];
    /* host stand-ins for CUDA's own headers first (include/: cooperative_groups.h, cuda_fp16.h, ...) */
    snprintf(inc, sizeof inc, " '-I%s/include'", dir());
    for (int i = 0; i < n; i++)
        if (!strncmp(opts[i], "-I", 2) || !strncmp(opts[i], "--include-path=", 15)) {
            strcat(inc, " '-I");
            strcat(inc, opts[i] + (opts[i][1] == 'I' ? 2 : 15));
            strcat(inc, "'");
        }
    unsigned long long h = fnv(p->src) ^ fnv(inc);
    /* the headers' contents too */
    for (int i = 0; i < n; i++)
        if (!strncmp(opts[i], "-I", 2) || !strncmp(opts[i], "--include-path=", 15)) {
            static const char *const hs[] = {"mkpy_cuda_ops.cuh", "mkpy_cuda_idx.cuh", "mkpy_cuda.h",
                                              "mlx/backend/cuda/device/utils.cuh"};
            for (int j = 0; j < 4; j++) {
                char path[4200];
                snprintf(path, sizeof path, "%s/%s", opts[i] + (opts[i][1] == 'I' ? 2 : 15), hs[j]);
                FILE *f = fopen(path, "rb");
                if (!f) continue;
                static char buf[1 << 22];
                size_t m = fread(buf, 1, sizeof buf - 1, f);
                buf[m] = 0;
                fclose(f);
                h = h * 31 + fnv(buf);
            }
        }
    snprintf(so, sizeof so, "%s/cache/%016llx.so", dir(), h);
    if (access(so, F_OK) != 0) {
        snprintf(cmd, sizeof cmd, "mkdir -p %s/cache", dir());
        if (system(cmd) != 0) return 6;
        snprintf(src, sizeof src, "%s/cache/%016llx.%d.cu", dir(), h, (int)getpid());
        snprintf(logf, sizeof logf, "%s.log", src);
        FILE *f = fopen(src, "w");
        fputs(p->src, f);
        fclose(f);
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", so, (int)getpid());
        snprintf(cmd, sizeof cmd, "python3 %s/fakecc.py %s %s%s 2>%s && mv %s %s", dir(), src, tmp, inc, logf, tmp, so);
        int rc = system(cmd);
        FILE *l = fopen(logf, "r");
        if (l) {
            p->log = calloc(1, 1 << 20);
            fread(p->log, 1, (1 << 20) - 1, l);
            fclose(l);
        }
        if (rc != 0) return 6; /* NVRTC_ERROR_COMPILATION */
        unlink(src);
        unlink(logf);
    }
    p->imglen = strlen(so) + 8;
    p->img = malloc(p->imglen);
    snprintf(p->img, p->imglen, "MKFAKE:%s", so);
    return 0;
}
int nvrtcGetProgramLogSize(prog *p, size_t *n) { *n = p->log ? strlen(p->log) + 1 : 1; return 0; }
int nvrtcGetProgramLog(prog *p, char *s) { strcpy(s, p->log ? p->log : ""); return 0; }
int nvrtcGetCUBINSize(prog *p, size_t *n) { *n = p->imglen; return 0; }
int nvrtcGetCUBIN(prog *p, char *s) { memcpy(s, p->img, p->imglen); return 0; }
int nvrtcDestroyProgram(prog **p) {
    free((*p)->src);
    free((*p)->log);
    free((*p)->img);
    free(*p);
    *p = NULL;
    return 0;
}
/* cuda_kernel's C++ name: fakecc.py's wrapper of mlx::core::cu::NAME is mkfake_NAME */
int nvrtcAddNameExpression(prog *p, const char *expr) {
    const char *last = strrchr(expr, ':');
    snprintf(p->lowered, sizeof p->lowered, "mkfake_%s", last ? last + 1 : expr);
    return 0;
}
int nvrtcGetLoweredName(prog *p, const char *expr, const char **out) {
    (void)expr;
    *out = p->lowered;
    return 0;
}
const char *nvrtcGetErrorString(int r) { return r ? "NVRTC_ERROR_COMPILATION" : "NVRTC_SUCCESS"; }
