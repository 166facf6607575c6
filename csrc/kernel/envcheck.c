/* `python -m mkpy`: the environment check. Each item gives one line, PASS,
 * WARN or FAIL, and every FAIL the fix. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/pool.h"
#include "core/simd.h"
#include "diag.h"
#include "kernel.h"

/* OpenBLAS's own introspection (cblas.h of openblas-pthread declares them) */
extern int openblas_get_num_threads(void);
extern char *openblas_get_config(void);

typedef struct {
    char *s;
    size_t len, cap;
    int failures;
} out_t;

static void put(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(out_t *o, const char *fmt, ...) {
    char line[6000];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = sizeof line - 1;
    if (o->len + (size_t)n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4096;
        while (cap < o->len + (size_t)n + 1) cap *= 2;
        char *s = realloc(o->s, cap);
        if (!s) return;
        o->s = s;
        o->cap = cap;
    }
    memcpy(o->s + o->len, line, (size_t)n + 1);
    o->len += (size_t)n;
}

static void item(out_t *o, const char *status, const char *name, const char *detail, const char *fix) {
    put(o, "%-4s  %-20s %s\n", status, name, detail);
    if (fix && *fix) put(o, "      %-20s fix: %s\n", "", fix);
    if (strcmp(status, "FAIL") == 0) o->failures++;
}

/* The first processor's "flags" (x86) or "Features" (arm) line. */
static void cpu_flags(char *out, size_t n, char *model, size_t mn) {
    char line[8192];
    out[0] = model[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '\n') break;
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *v = colon + 1 + (colon[1] == ' ');
        v[strcspn(v, "\n")] = 0;
        if (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8)) snprintf(out, n, " %s ", v);
        if (!strncmp(line, "model name", 10)) snprintf(model, mn, "%s", v);
    }
    if (f) fclose(f);
}

/* The clang and LLVM packages to name in a fix: the lockstep pass's LLVM when it was built. */
#ifdef MKPY_PASS_LLVM_MAJOR
#define LLVM_PKG_N MKPY_PASS_LLVM_MAJOR
#else
#define LLVM_PKG_N 0
#endif

static int major_of(const char *version) {
    const char *v = strstr(version, "version ");
    return v ? atoi(v + 8) : 0;
}

char *mkk_env_check(const char *python_line, int python_ok, int *failures) {
    out_t o = {0};
    char d[6000];
    item(&o, python_ok ? "PASS" : "FAIL", "Python", python_line,
         python_ok ? NULL : "mkpy needs CPython 3.9 or newer (Debian: apt-get install python3 python3-dev)");

    mkk_probe_info p;
    mkk_jit_probe(&p);
    if (!p.cxx_ok) {
        const char *env = getenv("MKPY_CXX");
        snprintf(d, sizeof d, "no clang++ 15 or newer found%s%s%s", env ? " (MKPY_CXX=" : " on PATH", env ? env : "",
                 env ? ")" : "");
        char fix[200];
        snprintf(fix, sizeof fix, "apt-get install clang-%d (or point MKPY_CXX at a clang++ of version 15 or newer)",
                 LLVM_PKG_N ? LLVM_PKG_N : 15);
        item(&o, "FAIL", "kernel compiler", d, fix);
    } else {
        snprintf(d, sizeof d, "%s (%s)", p.cxx, p.cxx_version[0] ? p.cxx_version : "version unknown");
        item(&o, p.cxx_version[0] ? "PASS" : "FAIL", "kernel compiler", d,
             p.cxx_version[0] ? NULL : "the compiler does not run: reinstall clang or fix MKPY_CXX");
        int cm = major_of(p.cxx_version);
        if (LLVM_PKG_N && cm > LLVM_PKG_N && p.cbs_pass[0]) {
            char fix[200];
            snprintf(d, sizeof d, "clang %d writes bitcode newer than the lockstep pass's LLVM %d reads: kernels "
                     "with barriers run on fibers and the checker mode cannot instrument kernels", cm, LLVM_PKG_N);
            snprintf(fix, sizeof fix, "apt-get install clang-%d (or set MKPY_CXX=clang++-%d), or rebuild mkpy with "
                     "llvm-%d-dev", LLVM_PKG_N, LLVM_PKG_N, cm);
            item(&o, "WARN", "compiler and LLVM", d, fix);
        }
    }

    if (p.cxx_ok) {
        static const char *const modes[] = {"safe", "relaxed", "fast"};
        int have = 0;
        char list[64] = "";
        for (int m = 0; m < 3; m++)
            if (p.pch_ok[m]) {
                have++;
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", strlen(list) ? ", " : "", modes[m]);
            }
        if (have == 3)
            snprintf(d, sizeof d, "all three math modes in %s/pch", p.runtime_dir);
        else
            snprintf(d, sizeof d, "%d of 3 math modes prebuilt in %s/pch%s%s%s: the first kernel of a process "
                     "builds the missing ones into the cache (about 1 s each)", have, p.runtime_dir,
                     have ? " (" : "", list, have ? ")" : "");
        item(&o, have == 3 ? "PASS" : "FAIL", "precompiled header", d,
             have == 3 ? NULL
                       : "run `make build`, or python -c \"import mkpy; mkpy.metal.precompile_runtime()\" "
                         "(the compiler or the runtime headers changed since they were built)");
    } else {
        item(&o, "FAIL", "precompiled header", "not checked: no kernel compiler", "install the compiler first");
    }

    if (p.cbs_pass[0])
        snprintf(d, sizeof d, "lockstep engine pass %s", p.cbs_pass);
    if (getenv("MKPY_ENGINE") && !strcmp(getenv("MKPY_ENGINE"), "fibers"))
        item(&o, "WARN", "cooperative engine", "MKPY_ENGINE=fibers: cooperative kernels run on fibers (slower)",
             "unset MKPY_ENGINE to use the lockstep engine");
    else
        item(&o, p.cbs_pass[0] ? "PASS" : "FAIL", "cooperative engine",
             p.cbs_pass[0] ? d : "mkpy-cbs-pass is missing: kernels with barriers run on fibers (slower)",
             p.cbs_pass[0] ? NULL
                           : "apt-get install llvm-N-dev with N from 15 to 19, the version of your clang (or set "
                             "MKPY_LLVM_DIR), and rebuild (`make build` or `pip install .`)");

#ifdef MKPY_NO_KISSFFT
    item(&o, "WARN", "FFT", "built without KissFFT: mx.fft's transforms raise (fftshift and fftfreq work)",
         "apt-get install libkissfft-dev and rebuild (`make build` or `pip install .`)");
#else
    item(&o, "PASS", "FFT", "KissFFT", NULL);
#endif

    const char *cfg = openblas_get_config();
    int bt = openblas_get_num_threads();
    const char *be = getenv("OPENBLAS_NUM_THREADS") ? "OPENBLAS_NUM_THREADS" : getenv("OMP_NUM_THREADS") ? "OMP_NUM_THREADS" : NULL;
    snprintf(d, sizeof d, "%s; %d thread%s now%s%s%s", cfg ? cfg : "OpenBLAS", bt, bt == 1 ? "" : "s",
             be ? " (set by " : " (mkpy sets it to the pool's thread count at the first matmul)", be ? be : "",
             be ? ")" : "");
    item(&o, bt >= 1 ? "PASS" : "FAIL", "OpenBLAS", d, bt >= 1 ? NULL : "apt-get install libopenblas0-pthread");

    char flags[8192], model[512];
    cpu_flags(flags, sizeof flags, model, sizeof model);
    static const char *const want[] = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "asimd", "fphp", "asimdhp"};
    char have[256] = "";
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char w[32];
        snprintf(w, sizeof w, " %s ", want[i]);
        if (strstr(flags, w)) snprintf(have + strlen(have), sizeof have - strlen(have), " %s", want[i]);
    }
#if defined(__x86_64__)
    int cpu_ok = strstr(flags, " avx2 ") != NULL;
    const char *cpu_fix = "kernels still run, but without 256-bit vectors: a CPU with AVX2 runs them several times faster";
#else
    int cpu_ok = 1;
    const char *cpu_fix = NULL;
#endif
    snprintf(d, sizeof d, "%s; features:%s%s (kernels are built for this CPU, -march=native)", model[0] ? model : "CPU",
             have[0] ? have : " none of", have[0] ? "" : " avx2/fma/f16c/avx512f/asimd");
    item(&o, cpu_ok ? "PASS" : "WARN", "CPU features", d, cpu_ok ? NULL : cpu_fix);
#if defined(__x86_64__)
    static const char *const levels[] = {"", "baseline x86-64", "AVX2, FMA and F16C (x86-64-v3)",
                                         "AVX-512 (x86-64-v4)"};
    const char *cap = getenv("MKPY_ISA");
    snprintf(d, sizeof d, "%s%s%s%s", levels[mk_isa()], cap && *cap ? " (MKPY_ISA=" : "", cap && *cap ? cap : "",
             cap && *cap ? ")" : "");
    item(&o, "PASS", "built-in kernels", d, NULL);
#endif

    mkk_disk_info di;
    if (mkk_disk_cache(false, &di) < 0) {
        snprintf(d, sizeof d, "%s", mk_error_message());
        mk_error_clear();
        item(&o, "FAIL", "kernel cache", d, "set MKPY_CACHE_DIR to a folder of yours that you can write");
    } else {
        char probe[4500];
        snprintf(probe, sizeof probe, "%s/.mkpy-check-XXXXXX", di.dir);
        int fd = mkstemp(probe);
        int w = fd >= 0;
        if (fd >= 0) {
            close(fd);
            unlink(probe);
        }
        snprintf(d, sizeof d, "%s (%s; %lld entries, %lld bytes)", di.dir, w ? "writable" : "NOT writable",
                 (long long)di.entries, (long long)di.bytes);
        item(&o, w ? "PASS" : "FAIL", "kernel cache", d,
             w ? NULL : "make the folder writable, or set MKPY_CACHE_DIR to a folder of yours");
    }

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = mk_pool_threads();
    const char *env = getenv("MKPY_NUM_THREADS");
    snprintf(d, sizeof d, "%d thread%s for %ld core%s%s%s%s", nt, nt == 1 ? "" : "s", cores, cores == 1 ? "" : "s",
             env ? " (MKPY_NUM_THREADS=" : "", env ? env : "", env ? ")" : "");
    int pool_ok = nt >= 1 && (env == NULL || atoi(env) > 0);
    item(&o, pool_ok ? (nt > cores ? "WARN" : "PASS") : "FAIL", "thread pool", d,
         !pool_ok ? "MKPY_NUM_THREADS must be a positive integer (unset it to use every core)"
         : nt > cores ? "more threads than cores slow kernels down: unset MKPY_NUM_THREADS" : NULL);

    snprintf(d, sizeof d, "MKPY_DEBUG=%d, debug builds %s (MKPY_KERNEL_DEBUG)", mkk_debug_level(),
             mkk_debug_build() ? "on" : "off");
    item(&o, "PASS", "debugging", d, NULL);

    /* the GPU back-end is optional: its absence is information, not a failure */
    char g[1024];
    const char *gpu_env = getenv("MKPY_GPU");
    mkb_cuda_backend.describe(g, sizeof g);
    if (gpu_env && strcmp(gpu_env, "cpu") == 0)
        snprintf(d, sizeof d, "MKPY_GPU=cpu: GPU streams run on the CPU back-end (%s)", g);
    else
        snprintf(d, sizeof d, "%s%s", g, mkb_gpu() ? "; GPU streams run there" : "; GPU streams run on the CPU");
    item(&o, "PASS", "NVIDIA GPU", d, NULL);

    if (failures) *failures = o.failures;
    return o.s;
}
