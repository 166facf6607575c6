/* NVRTC at run time: loaded with dlopen (the build has no CUDA dependency),
 * a program compiled to a CUBIN for one architecture, cached in memory and on
 * disk (backend/diskcache.c, the CPU's folder and rules). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "backend/cuda/cuda.h"
#include "backend/diskcache.h"
#include "kernel/diag.h"

/* ------------------------------------------------------------ the library */

/* NVRTC's C API, as documented by NVIDIA (nvrtc.h); declared here so that
 * no CUDA header is needed to build mkpy. */
typedef int nvrtcResult; /* NVRTC_SUCCESS = 0 */
typedef struct _nvrtcProgram *nvrtcProgram;

static struct {
    pthread_once_t once;
    void *lib;
    char path[4200];
    char why[2048];
    int major, minor;
    nvrtcResult (*version)(int *, int *);
    nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
    nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
    nvrtcResult (*log_size)(nvrtcProgram, size_t *);
    nvrtcResult (*log)(nvrtcProgram, char *);
    nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
    nvrtcResult (*cubin)(nvrtcProgram, char *);
    nvrtcResult (*destroy)(nvrtcProgram *);
    const char *(*error_string)(nvrtcResult);
    /* for cuda_kernel's C++ names (optional: checked where used) */
    nvrtcResult (*add_name)(nvrtcProgram, const char *);
    nvrtcResult (*lowered_name)(nvrtcProgram, const char *, const char **);
    /* the automatic precompiled header's status and heap (NVRTC 12.8+; optional) */
    nvrtcResult (*pch_status)(nvrtcProgram);
    nvrtcResult (*pch_required)(nvrtcProgram, size_t *);
    nvrtcResult (*pch_heap_size)(size_t *);
    nvrtcResult (*pch_set_heap_size)(size_t);
} nv = {.once = PTHREAD_ONCE_INIT};

static bool try_load(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    size_t used = strlen(nv.why);
    if (!h) {
        const char *e = dlerror();
        snprintf(nv.why + used, sizeof nv.why - used, "%s%s", used ? "; " : "", e ? e : path);
        return false;
    }
#define SYM(field, name) *(void **)&nv.field = dlsym(h, name)
    SYM(version, "nvrtcVersion");
    SYM(create, "nvrtcCreateProgram");
    SYM(compile, "nvrtcCompileProgram");
    SYM(log_size, "nvrtcGetProgramLogSize");
    SYM(log, "nvrtcGetProgramLog");
    SYM(cubin_size, "nvrtcGetCUBINSize");
    SYM(cubin, "nvrtcGetCUBIN");
    SYM(destroy, "nvrtcDestroyProgram");
    SYM(error_string, "nvrtcGetErrorString");
    SYM(add_name, "nvrtcAddNameExpression");
    SYM(lowered_name, "nvrtcGetLoweredName");
    SYM(pch_status, "nvrtcGetPCHCreateStatus");
    SYM(pch_required, "nvrtcGetPCHHeapSizeRequired");
    SYM(pch_heap_size, "nvrtcGetPCHHeapSize");
    SYM(pch_set_heap_size, "nvrtcSetPCHHeapSize");
#undef SYM
    if (!nv.version || !nv.create || !nv.compile || !nv.log_size || !nv.log || !nv.cubin_size || !nv.cubin ||
        !nv.destroy || !nv.error_string || nv.version(&nv.major, &nv.minor) != 0) {
        snprintf(nv.why + used, sizeof nv.why - used, "%s%s lacks NVRTC's entry points (nvrtcGetCUBIN needs 11.1+)",
                 used ? "; " : "", path);
        dlclose(h);
        return false;
    }
    nv.lib = h;
    snprintf(nv.path, sizeof nv.path, "%s", path);
    return true;
}

/* path, or the libnvrtc.so.* inside it when it is a folder */
static bool try_path(const char *path) {
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    if (access(path, F_OK) != 0) return false;
    char p[4200];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        if (access(p, F_OK) == 0 && try_load(p)) return true;
        snprintf(p, sizeof p, "%s/lib/%s", path, names[i]);
        if (access(p, F_OK) == 0 && try_load(p)) return true;
    }
    return try_load(path);
}

static void load(void) {
    const char *env = getenv("MKPY_NVRTC");
    if (env && *env) {
        if (!try_path(env)) {
            size_t used = strlen(nv.why);
            snprintf(nv.why + used, sizeof nv.why - used, "%sMKPY_NVRTC=%s does not name a usable libnvrtc",
                     used ? "; " : "", env);
        }
        return; /* an explicit choice: nothing else */
    }
    /* the wheel make deps unpacks beside the runtime headers' package */
    const char *rt = mkk_runtime_dir();
    if (rt && *rt) {
        char p[4200];
        snprintf(p, sizeof p, "%s/../_nvrtc/nvidia/cu13/lib", rt);
        if (access(p, F_OK) == 0 && try_path(p)) return;
    }
    static const char *const sys[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
    for (int i = 0; i < 3; i++)
        if (try_load(sys[i])) return;
}

bool mkb_nvrtc_available(char *why, size_t n) {
    pthread_once(&nv.once, load);
    if (!nv.lib && why) snprintf(why, n, "NVRTC could not be loaded (%s)", nv.why);
    return nv.lib != NULL;
}

const char *mkb_nvrtc_path(void) {
    pthread_once(&nv.once, load);
    return nv.path;
}

void mkb_nvrtc_version(int *major, int *minor) {
    pthread_once(&nv.once, load);
    *major = nv.major;
    *minor = nv.minor;
}

/* ------------------------------------------------------------ compiling */

/* Metal's math modes on NVRTC. safe: IEEE division and square root, no
 * flush to zero; a*b+c may be contracted into an FMA (NVRTC's -fmad=true; the
 * CPU's clang contracts within an expression too). relaxed: the same (NVRTC
 * has no reassociation switch). fast: -use_fast_math (flush to zero,
 * approximate division, square root and transcendentals), as Metal's fast
 * mode approximates them. */
static const char *const *math_options(mkk_math_mode m, int *n) {
    static const char *const safe[] = {"-fmad=true", "-prec-div=true", "-prec-sqrt=true", "-ftz=false"};
    /* __FAST_MATH__ as Metal's compiler and clang's -ffast-math define it (kernels test it) */
    static const char *const fast[] = {"-use_fast_math", "-D__FAST_MATH__=1"};
    if (m == MKK_MATH_FAST) {
        *n = 2;
        return fast;
    }
    *n = 4;
    return safe;
}

/* NVRTC's diagnostics at the user's lines: "<kernel k source>(3): error: ..."
 * becomes "<kernel k source>:3: error: ...", the form of the CPU's clang. */
static char *map_log(const char *log) {
    mkk_sbuf b = {0};
    const char *p = log ? log : "";
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        const char *paren = memchr(p, '(', len);
        const char *close = paren ? memchr(paren, ')', len - (size_t)(paren - p)) : NULL;
        char line[1200];
        if (paren && close && close[1] == ':' && close > paren + 1 && strspn(paren + 1, "0123456789") ==
                                                                         (size_t)(close - paren - 1)) {
            snprintf(line, sizeof line, "%.*s:%.*s%.*s", (int)(paren - p), p, (int)(close - paren - 1), paren + 1,
                     (int)(len - (size_t)(close + 1 - p)), close + 1);
        } else {
            snprintf(line, sizeof line, "%.*s", (int)(len < 1100 ? len : 1100), p);
        }
        mkk_sb(&b, line);
        mkk_sb(&b, "\n");
        p = e ? e + 1 : p + len;
    }
    return b.s;
}

/* The error of a failed compile, in the CPU back-end's words (jit.c's
 * format_failure): the kernel, the call site, the diagnostics. */
static void compile_failure(const mkk_kernel *k, const mkk_call *c, const char *kernel_name, int sm, const char *log) {
    char *mapped = map_log(log);
    mkk_sbuf b = {0};
    mkk_sbf(&b, "[metal_kernel] Failed to compile kernel `%s` (%s) for CUDA sm_%d with NVRTC %d.%d.\n", k->name,
            kernel_name, sm, nv.major, nv.minor);
    if (c->call_site && *c->call_site) mkk_sbf(&b, "Kernel called at %s\n", c->call_site);
    mkk_sb(&b, "Compiler diagnostics (line numbers are those of your `source` and `header`):\n");
    int lines = 0;
    const char *p = mapped ? mapped : "";
    while (*p && lines < 60) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len && !memmem(p, len, "detected in the compilation of", 30)) {
            char line[1200];
            snprintf(line, sizeof line, "  %.*s\n", (int)(len < 1100 ? len : 1100), p);
            mkk_sb(&b, line);
            lines++;
        }
        p = e ? e + 1 : p + len;
    }
    free(mapped);
    if (b.s && b.n && b.s[b.n - 1] == '\n') b.s[--b.n] = 0;
    mk_error_set(MK_ERR_RUNTIME, "%s", b.s ? b.s : "[metal_kernel] Failed to compile kernel for CUDA.");
    free(b.s);
    mkk_note_compile_error();
}


/* NVRTC's log of a program (malloc'd; NULL without memory). */
static char *program_log(nvrtcProgram prog) {
    size_t ls = 0;
    char *log = NULL;
    if (nv.log_size(prog, &ls) == 0 && (log = malloc(ls + 1))) {
        if (nv.log(prog, log) != 0) log[0] = 0;
        log[ls] = 0;
    }
    return log;
}

/* The compiled CUBIN into a malloc'd block: 0, or -1 with nothing kept. */
static int take_cubin(nvrtcProgram prog, unsigned char **cubin, size_t *size) {
    if (nv.cubin_size(prog, size) == 0 && (*cubin = malloc(*size ? *size : 1)) && nv.cubin(prog, (char *)*cubin) == 0)
        return 0;
    free(*cubin);
    *cubin = NULL;
    return -1;
}

/* NVRTC's code for a PCH that did not fit its heap (nvrtc.h, 12.8+) */
enum { NVRTC_PCH_CREATE_HEAP_EXHAUSTED = 14 };

/* After a compile with -pch: the PCH heap grown when it was too small for the header (NVRTC then
 * made no PCH; the next program creates it), and with MKPY_DEBUG whether this program took a PCH,
 * made one, or neither. Growing the heap invalidates the PCHs made before, so it only grows, to the
 * size asked for plus room for the other piece sets' headers. */
static void pch_after(nvrtcProgram prog, const char *name, bool verbose) {
    nvrtcResult st = nv.pch_status ? nv.pch_status(prog) : -1;
    size_t need = 0, have = 0;
    if (st == NVRTC_PCH_CREATE_HEAP_EXHAUSTED && nv.pch_required && nv.pch_heap_size && nv.pch_set_heap_size &&
        nv.pch_required(prog, &need) == 0 && nv.pch_heap_size(&have) == 0 && need > have) {
        static pthread_mutex_t grow_mu = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&grow_mu);
        if (nv.pch_heap_size(&have) == 0 && need > have) nv.pch_set_heap_size(need * 2);
        pthread_mutex_unlock(&grow_mu);
        mkk_debug(1, "kernel `%s`: NVRTC's PCH heap (%zu MB) was too small for the runtime header (%zu MB); "
                     "grown for the next kernels", name, have >> 20, need >> 20);
    }
    if (!verbose) return;
    char *log = program_log(prog);
    const bool took = log && strstr(log, "using precompiled header");
    const char *how = st == 0                               ? "created a precompiled header"
                      : took                                ? "took the precompiled header"
                      : st == NVRTC_PCH_CREATE_HEAP_EXHAUSTED ? "no precompiled header (heap too small)"
                                                              : "no precompiled header";
    mkk_debug(1, "kernel `%s`: NVRTC %s", name, how);
    if (st != 0 && !took && log && *log) mkk_debug(2, "NVRTC's PCH log: %s", log); /* why not */
    free(log);
}

/* Compiles program for sm_<sm>; 0 and the CUBIN, or -1 with the error set (-2 and no error
 * when NVRTC refuses the program and quiet is set). */
static int nvrtc_compile(const mkk_kernel *k, const mkk_call *c, const char *kernel_name, const char *program, int sm,
                         bool quiet, unsigned char **cubin, size_t *size) {
    char arch[32], inc[4200];
    snprintf(arch, sizeof arch, "-arch=sm_%d", sm);
    snprintf(inc, sizeof inc, "-I%s", mkk_runtime_dir());
    /* -device-int128: the Metal library's mulhi, madhi and 64-bit saturating arithmetic use __int128 */
    const char *opts[20] = {arch, "-std=c++17", "-default-device", inc, "-lineinfo", "-diag-suppress=161",
                            "-device-int128"};
    int n = 7, nm = 0;
    /* NVRTC's automatic precompiled header (per process, per set of the pieces' macros): the first
     * kernel of a set pays ~10% to create it, later new kernels take the runtime header from it
     * (then it costs them nothing: docs/performance.md, the H200's fifth session). MKPY_NVRTC_PCH=0
     * turns it off. */
    const char *pch = getenv("MKPY_NVRTC_PCH");
    const bool use_pch = !pch || strcmp(pch, "0") != 0, verbose = use_pch && mkk_debug_level() >= 1;
    if (use_pch) {
        opts[n++] = "-pch";
        opts[n++] = "-diag-suppress=20283";
        if (verbose) opts[n++] = "-pch-verbose=true"; /* MKPY_DEBUG says whether the PCH was taken */
    }
    const char *const *m = math_options(k->math_mode, &nm);
    for (int i = 0; i < nm; i++) opts[n++] = m[i];
    nvrtcProgram prog = NULL;
    char name[600];
    snprintf(name, sizeof name, "<kernel %s>", k->name);
    nvrtcResult r = nv.create(&prog, program, name, 0, NULL, NULL);
    if (r != 0) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] NVRTC could not create a program for `%s`: %s", k->name,
                     nv.error_string(r));
        return -1;
    }
    r = nv.compile(prog, n, opts);
    int ret = -1;
    if (r != 0 && quiet) {
        ret = -2;
    } else if (r != 0) {
        char *log = program_log(prog);
        if (log && *log)
            compile_failure(k, c, kernel_name, sm, log);
        else
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] NVRTC failed to compile `%s` for sm_%d: %s", k->name, sm,
                         nv.error_string(r));
        free(log);
    } else if (take_cubin(prog, cubin, size) == 0) {
        ret = 0;
        if (use_pch) pch_after(prog, k->name, verbose);
    } else {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] NVRTC gave no CUBIN for `%s` (sm_%d)", k->name, sm);
    }
    nv.destroy(&prog);
    return ret;
}

/* ------------------------------------------------------- in-memory cache */

#define MEM_MAX 512
typedef struct mem_entry {
    char *key;
    unsigned char *cubin;
    size_t size;
    struct mem_entry *next;
} mem_entry;

static struct {
    pthread_mutex_t mu;
    mem_entry *head; /* most recent first */
    int count;
    mkb_cuda_stats stats;
} mem = {.mu = PTHREAD_MUTEX_INITIALIZER};

static bool mem_find(const char *key, mkb_cuda_image *out) {
    bool found = false;
    pthread_mutex_lock(&mem.mu);
    for (mem_entry **pp = &mem.head; *pp; pp = &(*pp)->next) {
        mem_entry *e = *pp;
        if (strcmp(e->key, key) != 0) continue;
        if ((out->cubin = malloc(e->size))) {
            memcpy(out->cubin, e->cubin, e->size);
            out->size = e->size;
            found = true;
            mem.stats.memory_hits++;
            *pp = e->next; /* to the front */
            e->next = mem.head;
            mem.head = e;
        }
        break;
    }
    pthread_mutex_unlock(&mem.mu);
    return found;
}

static void mem_put(const char *key, const unsigned char *cubin, size_t size) {
    mem_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->key = strdup(key)) || !(e->cubin = malloc(size))) {
        if (e) free(e->key);
        free(e);
        return;
    }
    memcpy(e->cubin, cubin, size);
    e->size = size;
    pthread_mutex_lock(&mem.mu);
    e->next = mem.head;
    mem.head = e;
    mem_entry *victim = NULL;
    if (++mem.count > MEM_MAX) { /* drop the least recently used */
        mem_entry **pp = &mem.head;
        while ((*pp)->next) pp = &(*pp)->next;
        victim = *pp;
        *pp = NULL;
        mem.count--;
    }
    pthread_mutex_unlock(&mem.mu);
    if (victim) {
        free(victim->key);
        free(victim->cubin);
        free(victim);
    }
}

void mkb_cuda_cache_info(mkb_cuda_stats *s) {
    pthread_mutex_lock(&mem.mu);
    *s = mem.stats;
    pthread_mutex_unlock(&mem.mu);
}

void mkb_cuda_image_free(mkb_cuda_image *img) {
    free(img->cubin);
    img->cubin = NULL;
    img->size = 0;
}

/* ------------------------------------------------------------ building */

#define CUDA_KEY_MAGIC "mkpy cuda program 2"

/* The runtime headers the program includes are part of its identity. */
static void headers_identity(char *out, size_t n) {
    static const char *const names[] = {"mkpy_cuda.h", "mkpy_cuda_std.h", "mkpy_metal.h", "mkpy_launch.h",
                                        "mkpy_cuda_launch.h"};
    mkk_sbuf all = {0};
    for (int i = 0; i < 5; i++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", mkk_runtime_dir(), names[i]);
        char *t = mkb_read_file(p);
        mkk_sb(&all, t ? t : "(missing)");
        free(t);
    }
    char hex[33];
    mkb_hash_hex(all.s ? all.s : "", "", hex);
    free(all.s);
    snprintf(out, n, "%s", hex);
}

/* A compiler for cached_build: fills a malloc'd image (the CUBIN, or what
 * the caller keeps with it) and returns 0, or -1 with the error set. */
typedef int (*compile_fn)(void *ctx, unsigned char **image, size_t *size);

/* The image of `program` for sm_<sm> under `key` (the program and all that
 * changes its compile): from the in-memory cache, else the disk cache
 * (written by another process or an earlier run; a lock file makes
 * concurrent compiles of one program wait for the first), else compiled
 * with no lock held and published to both. `generated` (may be NULL) is
 * kept beside the program on disk as <hash>.metal. `name` names the kernel
 * in debug logs. Returns 0 with *out filled, or -1 with the error set. */
static int cached_build(const char *name, const char *key, const char *program, const char *generated, int sm,
                        compile_fn compile, void *ctx, mkb_cuda_image *out) {
    int ret = -1, lock_fd = -1;
    char dir[4400] = "", hex[33], obj[4500], keyp[4500], lockp[4500];
    if (mem_find(key, out)) {
        out->how = MKK_FOUND_IN_MEMORY;
        return 0;
    }
    mkb_hash_hex(program, key, hex);
    bool disk = mkb_cache_dir(dir, sizeof dir) == 0;
    if (!disk) mk_error_clear();
    if (disk) {
        snprintf(obj, sizeof obj, "%s/%s.cubin", dir, hex);
        snprintf(keyp, sizeof keyp, "%s/%s.key", dir, hex);
        snprintf(lockp, sizeof lockp, "%s/%s.lock", dir, hex);
        for (int attempt = 0;; attempt++) {
            if ((out->cubin = mkb_read_verified(obj, keyp, key, &out->size))) break;
            lock_fd = open(lockp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
            if (lock_fd >= 0) {
                while (flock(lock_fd, LOCK_EX) < 0 && errno == EINTR) {
                }
                out->cubin = mkb_read_verified(obj, keyp, key, &out->size); /* compiled meanwhile? */
                break;
            }
            if (attempt > 0 || mkb_cache_dir_failed(dir, errno, dir, sizeof dir) < 0) {
                disk = false;
                break;
            }
            snprintf(obj, sizeof obj, "%s/%s.cubin", dir, hex);
            snprintf(keyp, sizeof keyp, "%s/%s.key", dir, hex);
            snprintf(lockp, sizeof lockp, "%s/%s.lock", dir, hex);
        }
        if (out->cubin) {
            mkb_touch(obj);
            mkb_stats_update(dir, 0, 1, 0, false, NULL);
            pthread_mutex_lock(&mem.mu);
            mem.stats.disk_hits++;
            pthread_mutex_unlock(&mem.mu);
            mem_put(key, out->cubin, out->size);
            out->how = MKK_FOUND_ON_DISK;
            mkk_debug(1, "kernel `%s`: CUDA sm_%d disk cache hit, %s", name, sm, obj);
            ret = 0;
            goto done;
        }
    }
    const uint64_t t0 = mkk_now_ns();
    if (compile(ctx, &out->cubin, &out->size) < 0) goto done;
    pthread_mutex_lock(&mem.mu);
    mem.stats.compiles++;
    pthread_mutex_unlock(&mem.mu);
    mkk_debug(1, "kernel `%s`: compiled for CUDA sm_%d by NVRTC %d.%d in %.3f s", name, sm, nv.major, nv.minor,
              (double)(mkk_now_ns() - t0) / 1e9);
    mem_put(key, out->cubin, out->size);
    out->how = MKK_COMPILED;
    ret = 0;
    if (disk && lock_fd >= 0) { /* publish: object, key (with the object's hash), sources */
        char tmp[4600], tmp_key[4700], src[4600], metal[4600];
        snprintf(tmp, sizeof tmp, "%s/%s.tmp.%ld.%lu", dir, hex, (long)getpid(),
                 (unsigned long)atomic_fetch_add(&mkb_tmp_seq, 1));
        snprintf(tmp_key, sizeof tmp_key, "%s.key", tmp);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        bool ok = fd >= 0 && write(fd, out->cubin, out->size) == (ssize_t)out->size;
        if (fd >= 0 && close(fd) < 0) ok = false;
        if (ok && mkb_write_key(tmp, tmp_key, keyp, key) == 0 && rename(tmp, obj) == 0) {
            snprintf(src, sizeof src, "%s/%s.cu", dir, hex);
            snprintf(metal, sizeof metal, "%s/%s.metal", dir, hex);
            mkb_write_file(src, program);
            if (generated) mkb_write_file(metal, generated);
            mkb_stats_update(dir, mkb_file_size(obj) + mkb_file_size(keyp) + mkb_file_size(src) +
                                      (generated ? mkb_file_size(metal) : 0),
                             0, 1, false, NULL);
        } else {
            unlink(tmp);
            unlink(keyp);
        }
    }
done:
    if (lock_fd >= 0) {
        unlink(lockp);
        close(lock_fd);
    }
    return ret;
}

typedef struct {
    const mkk_kernel *k;
    const mkk_call *c;
    mk_array *const *inputs;
    const char *generated, *kernel_name, *program;
    int sm;
    bool all_if_refused; /* the program leaves pieces out (parts.c) and may be retried whole */
} metal_compile;

/* With all_if_refused, a program that NVRTC refuses is compiled again with all of the runtime
 * header's pieces, and that result is the program's (cached under the reduced program's key). */
static int compile_metal(void *ctx, unsigned char **cubin, size_t *size) {
    metal_compile *m = ctx;
    int rc = nvrtc_compile(m->k, m->c, m->kernel_name, m->program, m->sm, m->all_if_refused, cubin, size);
    if (rc != -2) return rc;
    mkk_debug(1, "kernel `%s` (%s): NVRTC refused the program with the runtime header's pieces its names "
                 "ask for; compiled again with all of them", m->k->name, m->kernel_name);
    char *whole = mkb_cuda_program(m->k, m->c, m->inputs, m->generated, m->kernel_name, true, NULL);
    if (!whole) return -1;
    rc = nvrtc_compile(m->k, m->c, m->kernel_name, whole, m->sm, false, cubin, size);
    free(whole);
    return rc;
}

/* mkb_cuda_build; with all_if_refused, see compile_metal. */
static int build(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                 const char *kernel_name, int sm, bool all_if_refused, mkb_cuda_image *out) {
    memset(out, 0, sizeof *out);
    out->sm = sm;
    char why[2300];
    if (!mkb_nvrtc_available(why, sizeof why)) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s` cannot be compiled for CUDA: %s. Install NVRTC "
                     "(pip install nvidia-cuda-nvrtc, or `make deps`) or set MKPY_NVRTC to its libnvrtc.so.",
                     k->name, why);
        return -1;
    }
    bool left_out = false;
    char *program = mkb_cuda_program(k, c, inputs, generated, kernel_name, false, &left_out);
    if (!program) return -1;
    int nm = 0;
    const char *const *m = math_options(k->math_mode, &nm);
    char ident[400], hid[40];
    headers_identity(hid, sizeof hid);
    snprintf(ident, sizeof ident, CUDA_KEY_MAGIC " sm_%d nvrtc %d.%d headers %s math", sm, nv.major, nv.minor, hid);
    for (int i = 0; i < nm; i++) {
        size_t l = strlen(ident);
        snprintf(ident + l, sizeof ident - l, " %s", m[i]);
    }
    size_t klen = strlen(ident) + strlen(program) + 2;
    char *key = malloc(klen);
    if (!key) {
        free(program);
        mk_nomem();
        return -1;
    }
    snprintf(key, klen, "%s\n%s", ident, program);
    metal_compile ctx = {k, c, inputs, generated, kernel_name, program, sm, all_if_refused && left_out};
    char name[700];
    snprintf(name, sizeof name, "%s` (%s", k->name, kernel_name);
    int ret = cached_build(name, key, program, generated, sm, compile_metal, &ctx, out);
    free(key);
    free(program);
    return ret;
}

int mkb_cuda_build(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                   const char *kernel_name, int sm, mkb_cuda_image *out) {
    return build(k, c, inputs, generated, kernel_name, sm, true, out);
}

/* ----------------------------------------------- mx.fast.cuda_kernel's programs */

typedef struct {
    const char *program, *prog_name, *name_expr;
    const char *const *opts;
    int nopts;
} user_compile;

/* Compiles as MLX's jit_module.cpp: the image is the lowered name of the
 * kernel's name expression, a NUL, and the CUBIN. A compile error is MLX's
 * RuntimeError "Failed to compile kernel: <NVRTC's log>." */
static int compile_user(void *ctx, unsigned char **image, size_t *size) {
    user_compile *u = ctx;
    nvrtcProgram prog = NULL;
    nvrtcResult r = nv.create(&prog, u->program, u->prog_name, 0, NULL, NULL);
    if (r != 0) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda_kernel] nvrtcCreateProgram failed: %s", nv.error_string(r));
        return -1;
    }
    int ret = -1;
    const char *lowered = NULL;
    unsigned char *cubin = NULL;
    size_t n = 0;
    if ((r = nv.add_name(prog, u->name_expr)) != 0) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda_kernel] nvrtcAddNameExpression failed: %s", nv.error_string(r));
    } else if ((r = nv.compile(prog, u->nopts, u->opts)) != 0) {
        char *log = program_log(prog);
        mk_error_set(MK_ERR_RUNTIME, "Failed to compile kernel: %s.", log ? log : nv.error_string(r));
        free(log);
    } else if ((r = nv.lowered_name(prog, u->name_expr, &lowered)) != 0 || !lowered) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda_kernel] nvrtcGetLoweredName failed: %s", nv.error_string(r));
    } else if (take_cubin(prog, &cubin, &n) < 0) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda_kernel] NVRTC gave no CUBIN for `%s`", u->name_expr);
    } else {
        size_t ln = strlen(lowered) + 1;
        if (!(*image = malloc(ln + n))) {
            mk_nomem();
        } else {
            memcpy(*image, lowered, ln);
            memcpy(*image + ln, cubin, n);
            *size = ln + n;
            ret = 0;
        }
        free(cubin);
    }
    nv.destroy(&prog);
    return ret;
}

/* The CUDA headers' folder: MKPY_CUDA_INCLUDE, the headers `make deps`
 * unpacks beside NVRTC (mkpy/_nvrtc), those of the pip packages beside the
 * loaded libnvrtc (nvidia/cu13/lib -> nvidia/cu13/include), $CUDA_HOME,
 * $CUDA_PATH, /usr/local/cuda: the first holding cuda_fp16.h. CCCL is its
 * cccl/ folder where there is one (CUDA 13), else the same folder. */
static bool cuda_include(char *inc, size_t n, char *cccl, size_t cn) {
    char cands[6][4400];
    int nc = 0;
    const char *e = getenv("MKPY_CUDA_INCLUDE");
    if (e && *e) snprintf(cands[nc++], sizeof cands[0], "%s", e);
    snprintf(cands[nc++], sizeof cands[0], "%s/../_nvrtc/nvidia/cu13/include", mkk_runtime_dir());
    const char *lib = mkb_nvrtc_path(), *slash = strrchr(lib, '/');
    if (slash) snprintf(cands[nc++], sizeof cands[0], "%.*s/../include", (int)(slash - lib), lib);
    static const char *const homes[] = {"CUDA_HOME", "CUDA_PATH"};
    for (int i = 0; i < 2; i++)
        if ((e = getenv(homes[i])) && *e) snprintf(cands[nc++], sizeof cands[0], "%s/include", e);
    snprintf(cands[nc++], sizeof cands[0], "/usr/local/cuda/include");
    for (int i = 0; i < nc; i++) {
        char p[4500];
        snprintf(p, sizeof p, "%.4300s/cuda_fp16.h", cands[i]);
        if (access(p, R_OK) != 0) continue;
        snprintf(inc, n, "%.4300s", cands[i]);
        snprintf(p, sizeof p, "%.4300s/cccl/cuda/std/array", cands[i]);
        snprintf(cccl, cn, access(p, R_OK) == 0 ? "%.4300s/cccl" : "%.4300s", cands[i]);
        return true;
    }
    return false;
}

int mkb_cuda_build_user(const char *program, const char *kernel_name, int sm, mkb_cuda_image *out,
                        char **lowered) {
    memset(out, 0, sizeof *out);
    out->sm = sm;
    *lowered = NULL;
    char why[2300], inc[4400], cccl[4500];
    if (!mkb_nvrtc_available(why, sizeof why)) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda_kernel] Kernel `%s` cannot be compiled: %s. Install NVRTC (pip install "
                     "nvidia-cuda-nvrtc, or `make deps`) or set MKPY_NVRTC to its libnvrtc.so.", kernel_name, why);
        return -1;
    }
    if (!nv.add_name || !nv.lowered_name) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda_kernel] %s lacks nvrtcAddNameExpression.", nv.path);
        return -1;
    }
    if (!cuda_include(inc, sizeof inc, cccl, sizeof cccl)) {
        mk_error_set(MK_ERR_RUNTIME, "Can not find locations of CUDA headers, please set environment variable "
                     "CUDA_HOME or CUDA_PATH. (mkpy looked in MKPY_CUDA_INCLUDE, mkpy/_nvrtc, beside %s, "
                     "$CUDA_HOME, $CUDA_PATH and /usr/local/cuda for include/cuda_fp16.h.)", nv.path);
        return -1;
    }
    /* MLX's options: its headers (mkpy's utils.cuh), CCCL, the CUDA headers; sm_XYa from Hopper on */
    char arch[48], i_rt[4500], i_cccl[4600], i_cuda[4500], utils[4500];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%s", sm, sm >= 90 ? "a" : "");
    snprintf(i_rt, sizeof i_rt, "--include-path=%s", mkk_runtime_dir());
    snprintf(i_cccl, sizeof i_cccl, "--include-path=%s", cccl);
    snprintf(i_cuda, sizeof i_cuda, "--include-path=%s", inc);
    const char *opts[] = {"--device-as-default-execution-space", arch, i_rt, i_cccl, i_cuda};
    snprintf(utils, sizeof utils, "%s/mlx/backend/cuda/device/utils.cuh", mkk_runtime_dir());
    char *ut = mkb_read_file(utils), uhex[33];
    mkb_hash_hex(ut ? ut : "(missing)", "", uhex);
    free(ut);
    size_t nlen = strlen(kernel_name);
    char *name_expr = malloc(nlen + 32), *prog_name = malloc(nlen + 32);
    mkk_sbuf key = {0};
    mkk_sbf(&key, "mkpy cuda_kernel 1 nvrtc %d.%d utils %s", nv.major, nv.minor, uhex);
    for (size_t i = 0; i < sizeof opts / sizeof *opts; i++) mkk_sbf(&key, " %s", opts[i]);
    mkk_sbf(&key, "\n%s\n", kernel_name);
    mkk_sb(&key, program);
    int ret = -1;
    if (!name_expr || !prog_name || key.failed) {
        mk_nomem();
        goto done;
    }
    snprintf(name_expr, nlen + 32, "mlx::core::cu::%s", kernel_name);
    char hex[33];
    mkb_hash_hex(program, "", hex);
    snprintf(prog_name, nlen + 32, "%s_%.16s.cu", kernel_name, hex);
    user_compile ctx = {program, prog_name, name_expr, opts, (int)(sizeof opts / sizeof *opts)};
    if (cached_build(kernel_name, key.s, program, NULL, sm, compile_user, &ctx, out) < 0) goto done;
    /* the image: lowered name, NUL, CUBIN */
    size_t ln = strnlen((const char *)out->cubin, out->size);
    if (ln == out->size || !(*lowered = strdup((const char *)out->cubin))) {
        mkb_cuda_image_free(out);
        if (ln == out->size) mk_error_set(MK_ERR_RUNTIME, "[cuda_kernel] A cached image of `%s` is malformed.", kernel_name);
        else mk_nomem();
        goto done;
    }
    memmove(out->cubin, out->cubin + ln + 1, out->size - ln - 1);
    out->size -= ln + 1;
    ret = 0;
done:
    free(name_expr);
    free(prog_name);
    free(key.s);
    return ret;
}

/* ------------------------------------------------------ compile-check mode */

static _Thread_local char *check_archs; /* this thread's scope (mx.cuda.compile_check) */

/* Parses "sm_80,sm_90" (or "80,90") into archs; returns the count or -1. */
static int parse_archs(const char *s, int *archs, int max) {
    int n = 0;
    while (s && *s) {
        while (*s == ' ' || *s == ',') s++;
        if (!*s) break;
        if (strncmp(s, "sm_", 3) == 0) s += 3;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 30 || v > 1000 || n == max) return -1;
        archs[n++] = (int)v;
        s = end;
        while (*s == ' ') s++;
        if (*s && *s != ',') return -1;
    }
    return n;
}

char *mkb_cuda_set_compile_check(const char *archs) {
    int tmp[16];
    if (archs && *archs && parse_archs(archs, tmp, 16) <= 0) {
        mk_error_set(MK_ERR_VALUE, "[cuda.compile_check] Expected architectures like \"sm_80,sm_90\", got \"%s\".",
                     archs);
        return (char *)-1;
    }
    char *prev = check_archs;
    check_archs = archs && *archs ? strdup(archs) : NULL;
    return prev;
}

int mkb_cuda_compile_check(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                           const char *kernel_name) {
    const char *s = check_archs ? check_archs : getenv("MKPY_CUDA_COMPILE_CHECK");
    if (!s || !*s) return 0;
    if (k->prints) { /* refused on CUDA for now (mkb_cuda_program): nothing to check */
        mkk_debug(1, "kernel `%s`: not compiled for CUDA (it prints)", k->name);
        return 0;
    }
    int archs[16];
    int n = parse_archs(s, archs, 16);
    if (n < 0) {
        mk_error_set(MK_ERR_VALUE, "MKPY_CUDA_COMPILE_CHECK: expected architectures like \"sm_80,sm_90\", got \"%s\"",
                     s);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        mkb_cuda_image img;
        /* the program as the kernel's names make it, with no second try: a kernel that needs a piece
         * of the runtime header that parts.c's tables do not give it fails here */
        if (build(k, c, inputs, generated, kernel_name, archs[i], false, &img) < 0) return -1;
        mkb_cuda_image_free(&img);
    }
    return 0;
}

/* ------------------------------------------------- a plain source (op kernels) */

int mkb_nvrtc_compile_source(const char *source, const char *name, int sm, const char *const *opts, int nopts,
                             unsigned char **cubin, size_t *size) {
    char why[2200];
    *cubin = NULL;
    *size = 0;
    if (!mkb_nvrtc_available(why, sizeof why)) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda] %s", why);
        return -1;
    }
    char arch[32];
    snprintf(arch, sizeof arch, "-arch=sm_%d", sm);
    const char *all[24] = {arch};
    int n = 1;
    for (int i = 0; i < nopts && n < 24; i++) all[n++] = opts[i];
    nvrtcProgram prog = NULL;
    nvrtcResult r = nv.create(&prog, source, name, 0, NULL, NULL);
    if (r != 0) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda] NVRTC could not create the program `%s`: %s", name, nv.error_string(r));
        return -1;
    }
    int ret = -1;
    r = nv.compile(prog, n, all);
    if (r != 0) {
        char *log = program_log(prog);
        mk_error_set(MK_ERR_RUNTIME, "[cuda] NVRTC failed to compile `%s` for sm_%d: %s", name, sm,
                     log && *log ? log : nv.error_string(r));
        free(log);
    } else if (take_cubin(prog, cubin, size) == 0) {
        ret = 0;
    } else {
        mk_error_set(MK_ERR_RUNTIME, "[cuda] NVRTC gave no CUBIN for `%s` (sm_%d)", name, sm);
    }
    nv.destroy(&prog);
    return ret;
}
