/* The CUDA driver at run time: libcuda.so.1 through dlopen (cuda_api.h
 * declares the entry points), device 0's primary context, device memory with
 * a cache of freed blocks, and waits that keep Ctrl-C and the kernel timeout.
 * See docs/design.md, "Back-ends". */
#include "driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../../mkpy/include/mkpy_cuda_launch.h"
#include "core/pool.h"
#include "kernel/diag.h"

mkb_cuda_api mkb_cu;

static struct {
    pthread_once_t once;
    bool ok;
    char why[512];
    void *lib;
    CUdevice dev;
    CUcontext ctx;
    int sm, sms, driver;
    char name[256];
    size_t total_mem;
    size_t cache_env; /* MKPY_GPU_CACHE_BYTES, read once (SIZE_MAX: unset) */
    /* bumped by each context reset: device memory of an older generation is gone */
    unsigned gen;
    pthread_mutex_t mu; /* the free-block cache, resets */
} cu = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

static void load(void) {
    const char *names[] = {getenv("MKPY_LIBCUDA"), "libcuda.so.1", "libcuda.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names && !cu.lib; i++)
        if (names[i] && *names[i]) cu.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!cu.lib) {
        snprintf(cu.why, sizeof cu.why, "no CUDA driver (libcuda.so.1 not found)");
        return;
    }
#define MKB_CUDA_SYM(name, params)                                                               \
    if (!(*(void **)&mkb_cu.name = dlsym(cu.lib, #name))) {                                           \
        snprintf(cu.why, sizeof cu.why, "the CUDA driver lacks %s (too old a driver?)", #name); \
        return;                                                                                  \
    }
    MKB_CUDA_FUNCS(MKB_CUDA_SYM)
#undef MKB_CUDA_SYM
    CUresult r = mkb_cu.cuInit(0);
    int count = 0;
    if (r == CUDA_SUCCESS) r = mkb_cu.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count < 1) {
        const char *e = NULL;
        if (r != CUDA_SUCCESS) mkb_cu.cuGetErrorName(r, &e);
        snprintf(cu.why, sizeof cu.why, "the CUDA driver found no GPU (%s)", e ? e : "0 devices");
        return;
    }
    int maj = 0, min = 0;
    if (mkb_cu.cuDeviceGet(&cu.dev, 0) != CUDA_SUCCESS ||
        mkb_cu.cuDeviceGetAttribute(&maj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cu.dev) != CUDA_SUCCESS ||
        mkb_cu.cuDeviceGetAttribute(&min, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cu.dev) != CUDA_SUCCESS ||
        mkb_cu.cuDevicePrimaryCtxRetain(&cu.ctx, cu.dev) != CUDA_SUCCESS) {
        snprintf(cu.why, sizeof cu.why, "the CUDA driver could not open GPU 0");
        return;
    }
    cu.sm = maj * 10 + min;
    mkb_cu.cuDeviceGetAttribute(&cu.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cu.dev);
    mkb_cu.cuDeviceGetName(cu.name, sizeof cu.name, cu.dev);
    mkb_cu.cuDeviceTotalMem_v2(&cu.total_mem, cu.dev);
    const char *e = getenv("MKPY_GPU_CACHE_BYTES");
    cu.cache_env = e && *e ? (size_t)strtoull(e, NULL, 10) : SIZE_MAX;
    mkb_cu.cuDriverGetVersion(&cu.driver);
    if (cu.sm < 70) {
        snprintf(cu.why, sizeof cu.why, "GPU 0 (%s) is sm_%d; mkpy needs sm_70 or newer (independent thread scheduling)",
                 cu.name, cu.sm);
        return;
    }
    cu.ok = true;
}

bool mkb_cuda_load(void) {
    pthread_once(&cu.once, load);
    return cu.ok;
}
const char *mkb_cuda_why(void) { return cu.ok ? "" : cu.why; }
int mkb_cuda_sm(void) { return cu.sm; }
unsigned mkb_cuda_generation(void) { return cu.gen; }

/* The context generation made current on this thread (0: none yet): a
 * reset makes a new context, which every thread then sets again, even when
 * the driver hands back the same handle. */
static _Thread_local unsigned current_gen;
static atomic_bool cu_lost; /* a fault left the driver unusable in this process */
int mkb_cuda_enter(void) {
    if (!mkb_cuda_load()) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda] %s.", cu.why);
        return -1;
    }
    if (atomic_load(&cu_lost)) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda] The GPU is unusable in this process after an earlier fault (CUDA needs a "
                                     "new process).");
        return -1;
    }
    const unsigned want = cu.gen + 1;
    if (current_gen == want) return 0;
    if (mkb_cu.cuCtxSetCurrent(cu.ctx) != CUDA_SUCCESS) {
        mk_error_set(MK_ERR_RUNTIME, "[cuda] Could not make the CUDA context current on this thread.");
        return -1;
    }
    current_gen = want;
    return 0;
}

static const char *err_name(CUresult r) {
    const char *s = NULL;
    if (mkb_cu.cuGetErrorName) mkb_cu.cuGetErrorName(r, &s);
    return s ? s : "CUDA_ERROR_UNKNOWN";
}
static const char *err_text(CUresult r) {
    const char *s = NULL;
    if (mkb_cu.cuGetErrorString) mkb_cu.cuGetErrorString(r, &s);
    return s ? s : "unknown error";
}

/* Errors after which the context is unusable (CUDA's "sticky" errors). */
static bool sticky(CUresult r) { return r == 700 || (r >= 702 && r <= 719 && r != 709); }

static void free_cache_locked(void);
static void forget_cache_locked(void);

/* What kernels reach through their module's mkpy_cuda_g
 * (mkpy_cuda_launch.h), made once per context generation: the claim word in
 * device memory and the report in mapped host memory. Guarded by cu.mu; a
 * reset frees them with the context. */
static struct {
    unsigned gen; /* cu.gen + 1 when made; 0: not made */
    CUdeviceptr claim;
    struct mkpy_cuda_report *report;
    CUdeviceptr report_dev;
} st;

static CUresult status_locked(void) {
    if (st.gen == cu.gen + 1) return CUDA_SUCCESS;
    st.gen = 0;
    void *host = NULL;
    CUresult r = mkb_cu.cuMemAlloc_v2(&st.claim, 4);
    if (r == CUDA_SUCCESS) r = mkb_cu.cuMemsetD32_v2(st.claim, 0, 1);
    if (r == CUDA_SUCCESS) r = mkb_cu.cuMemHostAlloc(&host, sizeof *st.report, 0x02 /* CU_MEMHOSTALLOC_DEVICEMAP */);
    if (r == CUDA_SUCCESS) r = mkb_cu.cuMemHostGetDevicePointer_v2(&st.report_dev, host, 0);
    if (r != CUDA_SUCCESS) return r;
    st.report = host;
    memset(st.report, 0, sizeof *st.report);
    st.gen = cu.gen + 1;
    return CUDA_SUCCESS;
}

int mkb_cuda_globals(struct mkpy_cuda_globals *g) {
    pthread_mutex_lock(&cu.mu);
    CUresult r = status_locked();
    if (r == CUDA_SUCCESS) {
        g->claim = st.claim;
        g->report = st.report_dev;
    }
    pthread_mutex_unlock(&cu.mu);
    return mkb_cuda_check(r, "making the kernels' report");
}

bool mkb_cuda_take_report(struct mkpy_cuda_report *out) {
    pthread_mutex_lock(&cu.mu);
    bool have = st.gen == cu.gen + 1 && ((volatile struct mkpy_cuda_report *)st.report)->code != 0;
    if (have) {
        memcpy(out, (const void *)st.report, sizeof *out);
        memset(st.report, 0, sizeof *st.report);
        mkb_cu.cuMemsetD32_v2(st.claim, 0, 1);
    }
    pthread_mutex_unlock(&cu.mu);
    return have;
}
/* Resets the primary context after a sticky error: all device memory of the
 * old context is gone; buffers notice by their generation. */
static void reset_context(void) {
    pthread_mutex_lock(&cu.mu);
    /* the cached blocks' addresses die with the context: forget them (freeing
     * them in a faulted context only fails) */
    forget_cache_locked();
    cu.gen++;
    /* the reset ends running kernels and frees everything; then retain it again */
    mkb_cu.cuDevicePrimaryCtxReset_v2(cu.dev);
    CUcontext c = NULL;
    bool ok = mkb_cu.cuDevicePrimaryCtxRetain(&c, cu.dev) == CUDA_SUCCESS;
    if (ok) cu.ctx = c;
    /* After a fault (an illegal address, a trap) the driver may refuse every
     * later call in this process, whatever context: CUDA documents such errors
     * as needing a new process. A probe allocation tells; if it fails, GPU
     * streams go to the CPU back-end from now on (backend.c asks
     * mkb_cuda_lost). */
    CUdeviceptr probe = 0;
    if (ok && mkb_cu.cuCtxSetCurrent(c) == CUDA_SUCCESS && mkb_cu.cuMemAlloc_v2(&probe, 256) == CUDA_SUCCESS)
        mkb_cu.cuMemFree_v2(probe);
    else
        atomic_store(&cu_lost, true);
    pthread_mutex_unlock(&cu.mu);
    current_gen = 0;
    if (!atomic_load(&cu_lost)) mkb_cuda_enter();
}

bool mkb_cuda_lost(void) { return atomic_load(&cu_lost); }

int mkb_cuda_check(CUresult r, const char *what) {
    if (r == CUDA_SUCCESS) return 0;
    if (sticky(r)) {
        reset_context();
        if (atomic_load(&cu_lost))
            mk_error_set(MK_ERR_RUNTIME,
                         "[cuda] %s: %s (%s). CUDA cannot run anything more on the GPU in this process after such a "
                         "fault, so GPU streams run on the CPU back-end from now on; arrays that lived only in GPU "
                         "memory are lost. (Run the kernel with MKPY_GPU=cpu and MKPY_CHECK=1 to find the bad access.)",
                         what, err_name(r), err_text(r));
        else
            mk_error_set(MK_ERR_RUNTIME,
                         "[cuda] %s: %s (%s). The GPU context was reset so that the process can go on; arrays that "
                         "lived only in GPU memory are lost.",
                         what, err_name(r), err_text(r));
    } else if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        mk_error_set(MK_ERR_MEMORY, "[cuda] %s: out of GPU memory.", what);
    } else {
        mk_error_set(MK_ERR_RUNTIME, "[cuda] %s: %s (%s).", what, err_name(r), err_text(r));
    }
    return -1;
}

/* ------------------------------------------------------------- memory */

/* A device allocation, owned by one mk_buffer (mk_buffer.dev). */
typedef struct {
    CUdeviceptr p;
    size_t size; /* rounded: the cache's key */
    unsigned gen;
} devmem;

/* Freed blocks are kept for reuse (cuMemAlloc costs tens of microseconds and
 * cuMemFree synchronises the device), up to a cap; an allocation that fails
 * empties the cache and tries again. */
typedef struct block {
    CUdeviceptr p;
    size_t size;
    struct block *next;
} block;
static block *free_blocks;
static size_t cached_bytes;

static size_t round_size(size_t n) {
    if (n <= 512) return 512;
    if (n < (1u << 20)) { /* next power of two */
        size_t s = 1024;
        while (s < n) s <<= 1;
        return s;
    }
    return (n + (2u << 20) - 1) / (2u << 20) * (2u << 20);
}

/* MKPY_GPU_CACHE_BYTES (read when the driver is loaded), else a quarter of the device's memory;
 * never above the cache limit (mx.set_cache_limit), which bounds the host's cache too */
static size_t cache_cap(void) {
    size_t cap = cu.cache_env != SIZE_MAX ? cu.cache_env : cu.total_mem / 4;
    int64_t limit = mk_cache_limit();
    return limit < 0 ? 0 : (uint64_t)limit < cap ? (size_t)limit : cap;
}

static void free_cache_locked(void) {
    while (free_blocks) {
        block *b = free_blocks;
        free_blocks = b->next;
        mkb_cu.cuMemFree_v2(b->p);
        free(b);
    }
    cached_bytes = 0;
}

static void forget_cache_locked(void) {
    while (free_blocks) {
        block *b = free_blocks;
        free_blocks = b->next;
        free(b);
    }
    cached_bytes = 0;
}

static int raw_alloc(size_t size, CUdeviceptr *out) {
    pthread_mutex_lock(&cu.mu);
    for (block **pp = &free_blocks; *pp; pp = &(*pp)->next)
        if ((*pp)->size == size) {
            block *b = *pp;
            *pp = b->next;
            cached_bytes -= size;
            pthread_mutex_unlock(&cu.mu);
            *out = b->p;
            free(b);
            return 0;
        }
    pthread_mutex_unlock(&cu.mu);
    if (mkb_cuda_enter() < 0) return -1;
    CUresult r = mkb_cu.cuMemAlloc_v2(out, size);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        pthread_mutex_lock(&cu.mu);
        free_cache_locked();
        pthread_mutex_unlock(&cu.mu);
        r = mkb_cu.cuMemAlloc_v2(out, size);
    }
    char what[96];
    snprintf(what, sizeof what, "cuMemAlloc of %zu bytes", size);
    return mkb_cuda_check(r, what);
}

static void raw_free(CUdeviceptr p, size_t size, unsigned gen) {
    pthread_mutex_lock(&cu.mu);
    if (gen != cu.gen) { /* its context is gone, and its memory with it */
        pthread_mutex_unlock(&cu.mu);
        return;
    }
    block *b = cached_bytes + size <= cache_cap() ? malloc(sizeof *b) : NULL;
    if (b) {
        *b = (block){p, size, free_blocks};
        free_blocks = b;
        cached_bytes += size;
        pthread_mutex_unlock(&cu.mu);
        return;
    }
    pthread_mutex_unlock(&cu.mu);
    if (mkb_cuda_enter() == 0) mkb_cu.cuMemFree_v2(p);
}

static void *mem_alloc(size_t nbytes) {
    devmem *d = malloc(sizeof *d);
    if (!d) return mk_nomem();
    d->size = round_size(nbytes);
    d->gen = cu.gen;
    if (raw_alloc(d->size, &d->p) < 0) {
        free(d);
        return NULL;
    }
    return d;
}

static void mem_free(void *dev, size_t nbytes) {
    (void)nbytes;
    devmem *d = dev;
    raw_free(d->p, d->size, d->gen);
    free(d);
}

static int lost(void) {
    mk_error_set(MK_ERR_RUNTIME,
                 "[cuda] This array's data lived only in GPU memory, which was lost when the GPU context was reset "
                 "after a fault (see the earlier error).");
    return -1;
}

static int mem_download(void *host, const void *dev, size_t nbytes) {
    const devmem *d = dev;
    if (d->gen != cu.gen) return lost();
    if (mkb_cuda_enter() < 0) return -1;
    return mkb_cuda_check(mkb_cu.cuMemcpyDtoH_v2(host, d->p, nbytes), "copying an array from the GPU");
}

static int mem_upload(void *dev, const void *host, size_t nbytes) {
    devmem *d = dev;
    if (mkb_cuda_enter() < 0) return -1;
    if (d->gen != cu.gen) { /* made before a reset: a new block */
        if (raw_alloc(d->size, &d->p) < 0) return -1;
        d->gen = cu.gen;
    }
    return mkb_cuda_check(mkb_cu.cuMemcpyHtoD_v2(d->p, host, nbytes), "copying an array to the GPU");
}

/* mx.get_cache_memory counts the cached blocks, mx.set_cache_limit and
 * mx.clear_cache trim them */
static int64_t mem_cache_bytes(void) {
    pthread_mutex_lock(&cu.mu);
    int64_t n = (int64_t)cached_bytes;
    pthread_mutex_unlock(&cu.mu);
    return n;
}

static void mem_cache_trim(int64_t target) {
    bool live = mkb_cuda_enter() == 0; /* else the blocks died with the context */
    pthread_mutex_lock(&cu.mu);
    while (free_blocks && (int64_t)cached_bytes > target) {
        block *b = free_blocks;
        free_blocks = b->next;
        cached_bytes -= b->size;
        if (live) mkb_cu.cuMemFree_v2(b->p);
        free(b);
    }
    pthread_mutex_unlock(&cu.mu);
}

const mk_devmem_ops mkb_cuda_mem = {"cuda",      mem_alloc,       mem_free,      mem_download,
                                    mem_upload, mem_cache_bytes, mem_cache_trim};

int mkb_cuda_buffer_ptr(mk_buffer *b, CUdeviceptr *out) {
    if (mk_buffer_to_device(b, &mkb_cuda_mem) < 0) return -1;
    devmem *d = b->dev;
    if (d->gen != cu.gen) {
        /* the device copy died with a reset; the host copy, if any, is the data */
        if (!(atomic_load(&b->where) & MK_ON_HOST)) return lost();
        if (mem_upload(d, b->data, b->nbytes) < 0) return -1;
    }
    *out = d->p;
    return 0;
}

int mkb_cuda_scratch(size_t nbytes, CUdeviceptr *out) { return raw_alloc(round_size(nbytes), out); }
void mkb_cuda_scratch_free(CUdeviceptr p, size_t nbytes) { raw_free(p, round_size(nbytes), cu.gen); }

/* -------------------------------------------------------------- waits */

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* What a wait's errors call the work: `what`, or "Kernel `name`" (formatted only for an error: a
 * cached kernel call does not pay for the snprintf). */
static const char *subject(char *buf, size_t n, const char *what, const char *name) {
    if (!name) return what;
    snprintf(buf, n, "Kernel `%s`", name);
    return buf;
}

/* The wait has three phases, by time: a spin on cuStreamQuery (a kernel of a few microseconds,
 * the common case, sees nothing else), from the 64th poll the watchdog's setting and Ctrl-C's
 * reach (below), and past 10 ms sleeps between polls.
 *
 * Ctrl-C must reach this thread while it waits: a thread that has SIGINT blocked (seen on the GPU
 * machine after a kernel had run: the driver's doing) would leave the signal pending, unseen, for
 * as long as the kernel runs. The mask is unblocked once the wait is past its first polls (two
 * system calls a cached call need not make: a Ctrl-C during a microseconds' wait is seen when the
 * eval returns) and restored after. */
static int wait_for(const char *what, const char *name, const char *site) {
    if (mkb_cuda_enter() < 0) return -1;
    double timeout = 0.0;
    const uint64_t t0 = now_ns();
    unsigned polls = 0;
    sigset_t intr, old;
    bool masked = false;
    int rc = 0;
    char buf[400];
    for (;;) {
        CUresult r = mkb_cu.cuStreamQuery(NULL);
        if (r == CUDA_SUCCESS) break;
        if (polls == 64) {
            const char *tmo = getenv("MKPY_KERNEL_TIMEOUT");
            timeout = tmo && *tmo ? strtod(tmo, NULL) : 0.0;
            sigemptyset(&intr);
            sigaddset(&intr, SIGINT);
            masked = pthread_sigmask(SIG_UNBLOCK, &intr, &old) == 0 && sigismember(&old, SIGINT);
            /* and the binding's handler, which mk_eval leaves to a GPU kernel's wait (gpu_arms) */
            void (*arm)(void) = mk_eval_arm;
            if (arm) arm();
            if (masked)
                mkk_debug(3, "SIGINT was blocked in the thread waiting for %s: unblocked while it waits",
                          subject(buf, sizeof buf, what, name));
        }
        if (r != CUDA_ERROR_NOT_READY) {
            char w[512];
            snprintf(w, sizeof w, "%s failed on the GPU (called at %s)", subject(buf, sizeof buf, what, name),
                     site ? site : "?");
            rc = mkb_cuda_check(r, w);
            break;
        }
        const uint64_t t = now_ns();
        const bool interrupted = mk_interrupted();
        if ((polls & 1023) == 1023 && mkk_debug_level() >= 3)
            mkk_debug(3, "waiting for %s: %.2f s, interrupted %d", subject(buf, sizeof buf, what, name),
                      (double)(t - t0) / 1e9, (int)interrupted);
        if (interrupted || (timeout > 0 && (double)(t - t0) > timeout * 1e9)) {
            /* a running kernel cannot be stopped otherwise */
            reset_context();
            const char *how = "the GPU context was reset to stop it; arrays that lived only in GPU memory are lost";
            if (interrupted)
                mk_error_set(MK_ERR_INTERRUPT, "[metal_kernel] %s was interrupted (%s). Called at %s",
                             subject(buf, sizeof buf, what, name), how, site ? site : "?");
            else
                mk_error_set(MK_ERR_RUNTIME,
                             "[metal_kernel] %s ran longer than MKPY_KERNEL_TIMEOUT (%g s) and was stopped, as a "
                             "GPU's watchdog stops it (%s). Called at %s",
                             subject(buf, sizeof buf, what, name), timeout, how, site ? site : "?");
            rc = -1;
            break;
        }
        /* Spin for the first 10 ms, then sleep in small steps, then in 1 ms steps past a second.
         * By time, not by polls: 2000 polls (the former rule) were over before a 1 ms kernel
         * ended, and a nanosleep overshoots by the timer slack (~50 us), 5% of such a kernel. */
        polls++;
        const uint64_t waited = t - t0;
        if (waited > 10000000u) {
            struct timespec ts = {0, waited > 1000000000u ? 1000000 : 50000};
            nanosleep(&ts, NULL);
        }
    }
    if (masked) pthread_sigmask(SIG_BLOCK, &intr, NULL);
    return rc;
}

int mkb_cuda_wait(const char *what, const char *site) { return wait_for(what, NULL, site); }
int mkb_cuda_wait_kernel(const char *name, const char *site) { return wait_for(NULL, name, site); }

int mkb_cuda_describe(char *out, size_t n) {
    if (!mkb_cuda_load()) return snprintf(out, n, "not available: %s", cu.why);
    return snprintf(out, n, "GPU 0: %s, sm_%d, %d multiprocessors, %.1f GiB; CUDA driver %d.%d", cu.name, cu.sm,
                    cu.sms, cu.total_mem / 1073741824.0, cu.driver / 1000, cu.driver % 1000 / 10);
}
