/* The JIT: generated Metal source -> C++ -> shared object -> entry point.
 *
 * Two caches. In memory: the generated Metal source plus the math flags is
 * the key (compared in full, so kernels that share a name but not a source
 * never collide; a hit skips the translation). On disk, under MKPY_CACHE_DIR or ~/.cache/mkpy: a file named by a
 * hash of the C++ text, the compiler's identity and the flags, written to a
 * unique temporary name and renamed into place, so concurrent processes
 * compiling the same kernel are safe; a `.key` file beside it holds the full
 * key and is checked on load. */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <fenv.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coop.h"
#include "ir/cbs_ir.h"
#include "kernel.h"

extern char **environ;

/* ------------------------------------------------------------ state */

typedef struct entry {
    char *key;
    mkk_compiled fn;
    struct entry *next;
} entry;

#define NBUCKETS 256

static struct {
    pthread_mutex_t mu;
    entry *buckets[NBUCKETS];
    mkk_cache_stats stats;
    char runtime_dir[4096];
    char cxx[4096];
    char cxx_identity[4400];
    char runtime_id[512];
    int cxx_probed;
} jit = {.mu = PTHREAD_MUTEX_INITIALIZER};

void mkk_set_runtime_dir(const char *dir) {
    snprintf(jit.runtime_dir, sizeof jit.runtime_dir, "%s", dir);
    jit.runtime_id[0] = 0;
}
const char *mkk_runtime_dir(void) { return jit.runtime_dir; }

void mkk_cache_info(mkk_cache_stats *s) {
    pthread_mutex_lock(&jit.mu);
    *s = jit.stats;
    pthread_mutex_unlock(&jit.mu);
}

void mkk_cache_clear_memory(void) {
    pthread_mutex_lock(&jit.mu);
    for (int i = 0; i < NBUCKETS; i++) {
        entry *e = jit.buckets[i];
        while (e) {
            entry *n = e->next;
            free(e->key);
            free(e); /* the shared object stays loaded: arrays may still run it */
            e = n;
        }
        jit.buckets[i] = NULL;
    }
    jit.stats.entries = 0;
    pthread_mutex_unlock(&jit.mu);
}

/* 64-bit FNV-1a, for the in-memory buckets. */
static uint64_t hash64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) h = (h ^ *p) * 0x100000001b3ULL;
    return h ^ (h >> 32);
}

/* 128-bit hash as two independent 64-bit FNV-1a variants, hex encoded. */
static void hash_hex(const char *a, const char *b, char out[33]) {
    uint64_t h1 = 0xcbf29ce484222325ULL, h2 = 0x84222325cbf29ce4ULL;
    const char *parts[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (const unsigned char *p = (const unsigned char *)parts[k]; *p; p++) {
            h1 = (h1 ^ *p) * 0x100000001b3ULL;
            h2 = (h2 ^ *p) * 0x100000001b3ULL;
            h2 ^= h2 >> 29;
        }
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
}

/* ------------------------------------------------------ running programs */

/* Runs argv, returns its exit status (or -1) and its combined output. */
static int run_capture(char *const argv[], char **output) {
    int fds[2];
    *output = NULL;
    if (pipe(fds) < 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        errno = rc;
        return -1;
    }
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    for (;;) {
        if (buf && n + 1024 > cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            } else {
                buf = b;
            }
        }
        char tmp[1024];
        ssize_t r = read(fds[0], buf ? buf + n : tmp, 1023);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (buf) n += (size_t)r;
    }
    close(fds[0]);
    if (buf) buf[n] = 0;
    *output = buf;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int cxx_version_ok(const char *cxx, char *identity, size_t n) {
    char *argv[] = {(char *)cxx, "--version", NULL};
    char *out;
    int rc = run_capture(argv, &out);
    if (rc != 0 || !out) {
        free(out);
        return 0;
    }
    out[strcspn(out, "\n")] = 0;
    snprintf(identity, n, "%s", out);
    const char *v = strstr(out, "version ");
    int major = v ? atoi(v + 8) : 0;
    int ok = strstr(out, "clang") != NULL && major >= 15;
    free(out);
    return ok;
}

/* Finds an executable like the shell would: a name with a '/' as is, else
 * along PATH. No process is started. */
static int which(const char *name, char *out, size_t n) {
    if (strchr(name, '/')) {
        snprintf(out, n, "%s", name);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(out, n, "%.*s/%s", (int)len, path, name);
        if (len && access(out, X_OK) == 0) return 0;
        path += len + (path[len] == ':');
    }
    return -1;
}

/* The compiler's identity for the disk cache: its resolved path, size and
 * modification time (an upgrade changes them), without running it. */
static void file_identity(const char *path, char *out, size_t n) {
    char real[4096];
    struct stat st;
    if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
    if (stat(real, &st) == 0)
        snprintf(out, n, "%s %lld %lld", real, (long long)st.st_size, (long long)st.st_mtime);
    else
        snprintf(out, n, "%s", real);
}

/* MKPY_CXX, else the newest clang++-N (N >= 15) on PATH, else clang++ >= 15. */
static int find_compiler(void) {
    if (jit.cxx_probed) return jit.cxx[0] ? 0 : -1;
    jit.cxx_probed = 1;
    const char *env = getenv("MKPY_CXX");
    if (env && *env) {
        if (which(env, jit.cxx, sizeof jit.cxx) < 0) {
            jit.cxx[0] = 0;
            return -1;
        }
        file_identity(jit.cxx, jit.cxx_identity, sizeof jit.cxx_identity);
        return 0;
    }
    for (int v = 25; v >= 15; v--) {
        char name[32];
        snprintf(name, sizeof name, "clang++-%d", v);
        if (which(name, jit.cxx, sizeof jit.cxx) == 0) {
            file_identity(jit.cxx, jit.cxx_identity, sizeof jit.cxx_identity);
            return 0;
        }
    }
    char identity[512];
    if (which("clang++", jit.cxx, sizeof jit.cxx) == 0 && cxx_version_ok(jit.cxx, identity, sizeof identity)) {
        file_identity(jit.cxx, jit.cxx_identity, sizeof jit.cxx_identity);
        return 0;
    }
    jit.cxx[0] = 0;
    return -1;
}

static const char *cache_dir(char *buf, size_t n) {
    const char *env = getenv("MKPY_CACHE_DIR");
    if (env && *env)
        snprintf(buf, n, "%s", env);
    else
        snprintf(buf, n, "%s/.cache/mkpy", getenv("HOME") ? getenv("HOME") : "/tmp");
    return buf;
}

static int mkdirs(const char *path) {
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, 0755);
            *p = '/';
        }
    return mkdir(tmp, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* ------------------------------------------------------- the C++ program */

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void sb(sbuf *b, const char *t) {
    size_t len = strlen(t);
    if (!b->s && b->cap == (size_t)-1) return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->n + len + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            free(b->s);
            b->s = NULL;
            b->cap = (size_t)-1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->n, t, len + 1);
    b->n += len;
}

static void sbf(sbuf *b, const char *fmt, ...) MK_PRINTF(2, 3);
static void sbf(sbuf *b, const char *fmt, ...) {
    char tmp[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb(b, tmp);
}

/* Appends lines [first, first + count) (1-based) of text. */
static void sb_lines(sbuf *b, const char *text, int first, int count) {
    int line = 1;
    const char *p = text;
    while (*p && line < first) line += *p++ == '\n';
    const char *start = p;
    while (*p && line < first + count) line += *p++ == '\n';
    size_t len = (size_t)(p - start);
    char *tmp = malloc(len + 2);
    if (!tmp) return;
    memcpy(tmp, start, len);
    tmp[len] = 0;
    if (len && tmp[len - 1] != '\n') strcat(tmp, "\n");
    sb(b, tmp);
    free(tmp);
}

static int total_lines(const char *s) {
    int n = 1;
    for (; *s; s++) n += *s == '\n';
    return n;
}

/* The translated program with #line markers naming the user's header and
 * source, plus the entry point that unpacks buffers and attributes. */
static char *build_program(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                           const char *kernel_name) {
    char *cpp = mkk_translate(generated);
    if (!cpp) return NULL;
    mkk_linemap m;
    mkk_line_map(k, generated, &m);
    int n = total_lines(cpp);
    sbuf b = {0};
    sb(&b, "#include \"mkpy_metal.h\"\n#include \"mkpy_coop.h\"\n#include \"mkpy_dispatch.h\"\n");
    if (m.header_lines > 0) {
        sbf(&b, "#line 1 \"<kernel %s header>\"\n", k->name);
        sb_lines(&b, cpp, 1, m.header_lines);
    }
    sbf(&b, "#line %d \"<kernel %s signature>\"\n", m.header_lines + 1, k->name);
    sb_lines(&b, cpp, m.header_lines + 1, m.source_first - m.header_lines - 1);
    sbf(&b, "#line 1 \"<kernel %s source>\"\n", k->name);
    sb_lines(&b, cpp, m.source_first, m.source_lines);
    sbf(&b, "#line %d \"<kernel %s signature>\"\n", m.source_first + m.source_lines, k->name);
    sb_lines(&b, cpp, m.source_first + m.source_lines, n - (m.source_first + m.source_lines) + 1);
    free(cpp);

    /* entry point */
    char tdef[1024] = "";
    if (c->ntemplate) {
        size_t len = 0;
        len += snprintf(tdef + len, sizeof tdef - len, "<");
        for (int i = 0; i < c->ntemplate && len < sizeof tdef; i++) {
            const mkk_targ *t = &c->templ[i];
            if (t->kind == MKK_TARG_DTYPE)
                len += snprintf(tdef + len, sizeof tdef - len, "%s%s", i ? ", " : "",
                                mk_dtypes[t->value].msl_name);
            else
                len += snprintf(tdef + len, sizeof tdef - len, "%s%lld", i ? ", " : "", (long long)t->value);
        }
        if (len < sizeof tdef) snprintf(tdef + len, sizeof tdef - len, ">");
    }
    /* the call of the kernel function for one thread's attributes `t` */
    sbuf call = {0};
    sbf(&call, "%s%s(", kernel_name, tdef);
    int arg = 0, first = 1;
#define SEP() (first ? (first = 0, "") : ", ")
    for (int i = 0; i < k->ninputs; i++) {
        const char *ts = mk_dtypes[inputs[i]->dtype].msl_name;
        if (inputs[i]->ndim == 0)
            sbf(&call, "%s*(const %s *)args[%d]", SEP(), ts, arg++);
        else
            sbf(&call, "%s(const %s *)args[%d]", SEP(), ts, arg++);
        if (inputs[i]->ndim > 0) {
            if (k->shape_info[i][0]) sbf(&call, "%s(const int *)args[%d]", SEP(), arg++);
            if (k->shape_info[i][1]) sbf(&call, "%s(const int64_t *)args[%d]", SEP(), arg++);
            if (k->shape_info[i][2]) sbf(&call, "%s*(const int *)args[%d]", SEP(), arg++);
        }
    }
    for (int i = 0; i < k->noutputs; i++) {
        const char *ts = mk_dtypes[c->output_dtypes[i]].msl_name;
        if (k->atomic_outputs)
            sbf(&call, "%s(metal::atomic<%s> *)args[%d]", SEP(), ts, arg++);
        else
            sbf(&call, "%s(%s *)args[%d]", SEP(), ts, arg++);
    }
    for (int a = 0; a < MKK_NATTRS; a++)
        if (k->attr_used[a])
            sbf(&call, strcmp(mkk_attrs[a].type, "uint3") == 0 ? "%smkpy::u3(t.%s)" : "%st.%s", SEP(),
                mkk_attrs[a].name);
#undef SEP
    sb(&call, ");\n");
    if (!call.s) {
        free(b.s);
        return mk_nomem();
    }
    sb(&b, "#line 1 \"<mkpy entry>\"\n");
    sb(&b, "extern \"C\" void mkpy_kernel_set_api(const mkpy_coop_api *api) { mkpy::api = api; }\n");
    sb(&b, "extern \"C\" void mkpy_kernel_entry(void *const *args, const mkpy_launch *L) {\n");
    sb(&b, "    mkpy::run_threadgroups(L, [&](const mkpy_thread_attrs &t) {\n        ");
    sb(&b, call.s);
    sb(&b, "    });\n}\n");
    sb(&b, "extern \"C\" void mkpy_kernel_thread(void *const *args, const mkpy_launch *L, uint64_t g, unsigned i) "
           "{\n");
    sb(&b, "    mkpy_thread_attrs t;\n    mkpy::launch_attrs(L, t);\n    mkpy::group_attrs(L, g, t);\n"
           "    mkpy::thread_attrs(L, i, t);\n    ");
    sb(&b, call.s);
    sb(&b, "}\n");
    /* the same thread for the region-splitting engine (cbs.c): the IR pass
     * gives `resume` and `ctx` their meaning; loop steps (a site per
     * iteration of a site-free loop, so that the iteration vectorises across
     * threads) pay for threadgroups of 64 threads or more */
    sbf(&b, "extern \"C\" const int mkpy_cbs_loop_steps = %d;\n",
        c->threadgroup[0] * c->threadgroup[1] * c->threadgroup[2] >= 64);
    sb(&b, "extern \"C\" uint32_t mkpy_kernel_cbs_thread(void *const *args, const mkpy_launch *L, uint64_t g, "
           "unsigned i, uint32_t resume, void *ctx, unsigned x, unsigned y, unsigned z) {\n");
    sb(&b, "    mkpy_thread_attrs t;\n    mkpy::launch_attrs(L, t);\n    mkpy::group_attrs(L, g, t);\n"
           "    mkpy::thread_attrs_at(L, i, x, y, z, t);\n    ");
    sb(&b, call.s);
    sb(&b, "    return MKPY_CBS_DONE;\n}\n");
    free(call.s);
    if (!b.s) mk_nomem();
    return b.s;
}

/* The fixed compile flags (part of the cache key through FLAGS_ID: keep the
 * two in step).
 *  - stack-clash protection probes every page of a large frame, so a huge
 *    per-thread array hits the guard page below a fiber's stack;
 *  - -fno-math-errno in every math mode: Metal's math never sets errno, and
 *    errno is what keeps clang from vectorising calls like expf;
 *  - kernels are built for this CPU (-march=native), and on x86-64 glibc the
 *    vectorised loops call libmvec's vector exp/log/sin/cos/pow, which keep
 *    IEEE special values (the CPU's features are part of the disk key);
 *  - no C++ standard library is linked (-nostdlib++: the runtime header needs
 *    none, and it halves the link); a kernel whose own code needs it is
 *    linked again with it (see mkk_jit). */
#if defined(__x86_64__)
#define TARGET_FLAGS "-march=native"
#if defined(__GLIBC__)
#define VECLIB_FLAGS "-fveclib=libmvec"
#else
#define VECLIB_FLAGS ""
#endif
#elif defined(__aarch64__)
#define TARGET_FLAGS "-mcpu=native"
#define VECLIB_FLAGS ""
#else
#define TARGET_FLAGS ""
#define VECLIB_FLAGS ""
#endif
static const char *const base_flags[] = {"-std=c++17", "-O2", "-fPIC", "-fno-exceptions", "-fno-rtti",
                                         "-fstack-clash-protection", "-fwrapv", "-fno-math-errno"};
#define NBASE_FLAGS (sizeof base_flags / sizeof *base_flags)
#define FLAGS_ID                                                                                                   \
    "-std=c++17 -O2 -fPIC -fno-exceptions -fno-rtti -fstack-clash-protection -fwrapv -fno-math-errno " TARGET_FLAGS \
    " " VECLIB_FLAGS " -shared -nostdlib++"

/* The CPU's identity for the disk key (kernels are built with -march=native):
 * the model and feature lines of /proc/cpuinfo's first processor. */
static void host_identity(char *out, size_t n) {
    static const char *const keys[] = {"model name", "flags", "CPU implementer", "CPU part", "Features"};
    char line[8192];
    sbuf all = {0};
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '\n') break; /* end of the first processor */
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
            if (strncmp(line, keys[i], strlen(keys[i])) == 0) sb(&all, line);
    }
    if (f) fclose(f);
    char hex[33];
    hash_hex(all.s ? all.s : "unknown", TARGET_FLAGS, hex);
    free(all.s);
    snprintf(out, n, "cpu %s", hex);
}

/* A hash of the runtime headers' contents, so that a changed header never
 * reuses kernels compiled against the old one, plus the flags and the CPU. */
static void runtime_identity(char *out, size_t n) {
    static const char *const files[] = {"mkpy_metal.h", "mkpy_coop.h", "mkpy_dispatch.h", "mkpy_launch.h"};
    sbuf all = {0};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", jit.runtime_dir, files[i]);
        char *text = read_file(path);
        sb(&all, text ? text : "(missing)");
        free(text);
    }
    char hex[33], host[64];
    hash_hex(all.s ? all.s : "", "", hex);
    free(all.s);
    host_identity(host, sizeof host);
    snprintf(out, n, "runtime %s; flags %s; %s", hex, FLAGS_ID, host);
}

/* What the disk cache and the PCH names depend on: the compiler, then the
 * runtime headers, flags and CPU (computed once). Call with jit.mu held,
 * after find_compiler. */
static void full_identity(char *out, size_t n) {
    if (!jit.runtime_id[0]) runtime_identity(jit.runtime_id, sizeof jit.runtime_id);
    snprintf(out, n, "%s; %s", jit.cxx_identity, jit.runtime_id);
}

typedef enum { BUILD_KERNEL, BUILD_KERNEL_WITH_LIBSTDCXX, BUILD_PCH, BUILD_BITCODE, BUILD_LINK,
               BUILD_LINK_WITH_LIBSTDCXX } build_kind;

/* Runs the compiler with the fixed flags; pch, if not NULL, is included. */
static int compile(const char *mflags, const char *pch, build_kind kind, const char *out, const char *in,
                   char **diag) {
    char inc[4200];
    snprintf(inc, sizeof inc, "-I%s", jit.runtime_dir);
    char *argv[40];
    size_t n = 0;
    argv[n++] = jit.cxx;
    /* the math mode's flags first (split at spaces): -fno-fast-math would
     * turn math errno back on after the base flags */
    char mbuf[512], tbuf[256];
    snprintf(mbuf, sizeof mbuf, "%s", mflags);
    for (char *tok = strtok(mbuf, " "); tok && n < 16; tok = strtok(NULL, " ")) argv[n++] = tok;
    for (size_t i = 0; i < NBASE_FLAGS; i++) argv[n++] = (char *)base_flags[i];
    snprintf(tbuf, sizeof tbuf, "%s %s", TARGET_FLAGS, VECLIB_FLAGS);
    for (char *tok = strtok(tbuf, " "); tok && n < 30; tok = strtok(NULL, " ")) argv[n++] = tok;
    argv[n++] = inc;
    if (pch && kind != BUILD_LINK && kind != BUILD_LINK_WITH_LIBSTDCXX) {
        argv[n++] = "-include-pch";
        argv[n++] = (char *)pch;
    }
    if (kind == BUILD_PCH) {
        argv[n++] = "-x";
        argv[n++] = "c++-header";
    } else if (kind == BUILD_BITCODE) {
        /* unoptimised (but optimisable) IR: clang's own passes would
         * duplicate inline functions that contain a barrier before the
         * region-splitting pass sees them (it inlines everything first, so
         * the barrier calls' noduplicate then protects them) */
        argv[n++] = "-emit-llvm";
        argv[n++] = "-c";
        argv[n++] = "-Xclang";
        argv[n++] = "-disable-llvm-passes";
        argv[n++] = "-gline-tables-only"; /* the pass orders blocks by the user's lines */
    } else {
        argv[n++] = "-shared";
        if (kind == BUILD_KERNEL || kind == BUILD_LINK) argv[n++] = "-nostdlib++";
    }
    argv[n++] = "-o";
    argv[n++] = (char *)out;
    argv[n++] = (char *)in;
    argv[n] = NULL;
    return run_capture(argv, diag);
}

/* Builds the precompiled runtime headers for a math mode at `path`. */
static int build_pch(const char *mflags, const char *path) {
    /* the header stays beside the PCH: clang checks it when using the PCH */
    char header[4500], tmp[4500], text[13000];
    snprintf(header, sizeof header, "%.*s.h", (int)(strlen(path) - 4), path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    snprintf(text, sizeof text,
             "#define MKPY_METAL_PCH_INSTANTIATE 1\n#include \"%s/mkpy_metal.h\"\n#include \"%s/mkpy_coop.h\"\n"
             "#include \"%s/mkpy_dispatch.h\"\n",
             jit.runtime_dir, jit.runtime_dir, jit.runtime_dir);
    char tmp_header[4600];
    snprintf(tmp_header, sizeof tmp_header, "%s.h", tmp);
    char *diag = NULL;
    int ok = write_file(tmp_header, text) == 0 && rename(tmp_header, header) == 0 &&
             compile(mflags, NULL, BUILD_PCH, tmp, header, &diag) == 0 && rename(tmp, path) == 0;
    free(diag);
    unlink(tmp_header);
    unlink(tmp);
    return ok ? 0 : -1;
}

/* The PCH's file name for a math mode: a hash of the compiler, the headers,
 * the flags, the CPU and the mode's flags. */
static void pch_name(const char *mflags, const char *identity, char *out, size_t n) {
    char hex[33];
    hash_hex(identity, mflags, hex);
    snprintf(out, n, "pch-%s.pch", hex);
}

/* The precompiled runtime headers for a math mode: the one `make build` made
 * beside the headers (mkk_prepare), else one built once into the cache
 * directory. NULL when it cannot be built: kernels then compile without it. */
static const char *pch_for(mkk_math_mode mode, const char *mflags, const char *dir, const char *identity) {
    static char paths[3][4600];
    static int failed[3];
    if (paths[mode][0]) return paths[mode];
    if (failed[mode] || getenv("MKPY_NO_PCH")) return NULL;
    char name[64], path[4600];
    pch_name(mflags, identity, name, sizeof name);
    snprintf(path, sizeof path, "%s/pch/%s", jit.runtime_dir, name);
    if (access(path, R_OK) != 0) {
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (access(path, R_OK) != 0 && (mkdirs(dir) < 0 || build_pch(mflags, path) < 0)) {
            failed[mode] = 1;
            return NULL;
        }
    }
    snprintf(paths[mode], sizeof paths[mode], "%s", path);
    return paths[mode];
}

/* Metal's math modes: safe keeps every IEEE rule; relaxed allows
 * reassociation, reciprocals, contraction into FMA and ignoring the sign of
 * zero, but honours infinities and NaN; fast also assumes finite values
 * (-ffast-math defines __FAST_MATH__, as Metal's fast mode does). */
static const char *math_flags(mkk_math_mode m) {
    switch (m) {
    case MKK_MATH_FAST: return "-ffast-math";
    case MKK_MATH_RELAXED:
        return "-fno-signed-zeros -freciprocal-math -fassociative-math -fno-trapping-math -ffp-contract=fast";
    default: return "-fno-fast-math";
    }
}

/* Keeps the compiler's error and note lines, with their source snippets. */
static void format_failure(const mkk_kernel *k, const mkk_call *c, const char *kernel_name, const char *diag) {
    sbuf b = {0};
    sbf(&b, "[metal_kernel] Failed to compile kernel `%s` (%s).\n", k->name, kernel_name);
    if (c->call_site && *c->call_site) sbf(&b, "Kernel called at %s\n", c->call_site);
    sb(&b, "Compiler diagnostics (line numbers are those of your `source` and `header`):\n");
    int lines = 0;
    const char *p = diag ? diag : "";
    while (*p && lines < 60) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < 1000 ? len : 1000), p);
        /* drop the "In file included from" chatter and summary lines */
        if (!strstr(line, "In file included from") && !strstr(line, "error generated") &&
            !strstr(line, "errors generated") && !strstr(line, "warning generated")) {
            sb(&b, "  ");
            sb(&b, line);
            sb(&b, "\n");
            lines++;
        }
        p = e ? e + 1 : p + len;
    }
    for (int i = 0; i < k->noutputs; i++) {
        static const char *const suffixes[] = {"_shape", "_strides", "_ndim"};
        for (int s = 0; s < 3; s++) {
            char name[600];
            snprintf(name, sizeof name, "%s%s", k->output_names[i], suffixes[s]);
            if (strstr(k->source, name)) {
                sbf(&b,
                    "Hint: the source uses `%s`, but MLX only passes `<input>_shape`, `<input>_strides` and "
                    "`<input>_ndim` for inputs; outputs get no shape arguments. Pass the shape as an input or a "
                    "template argument.\n",
                    name);
                s = 3;
            }
        }
    }
    if (b.s && b.n && b.s[b.n - 1] == '\n') b.s[--b.n] = 0;
    mk_error_set(MK_ERR_RUNTIME, "%s", b.s ? b.s : "[metal_kernel] Failed to compile kernel.");
    free(b.s);
}

/* ------------------------------------------ constructors, run guarded */

/* A kernel's global constructors (a header's `static Foo f;`) would run
 * inside dlopen, where a fault cannot be caught: the loader's lock is held,
 * and leaving it would hang the next dlopen. So a freshly linked object gets
 * its DT_INIT_ARRAYSZ set to 0 (defer_init), and load_entry runs the
 * `.init_array` entries itself, after dlopen, inside mk_fault_guarded_call.
 * Returns 0, or -1 if the file is not an ELF object it understands. */
static int defer_init(const char *path) {
    int fd = open(path, O_RDWR);
    if (fd < 0) return -1;
    int rc = -1;
    ElfW(Ehdr) eh;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_phentsize != sizeof(ElfW(Phdr)))
        goto out;
    for (int i = 0; i < eh.e_phnum; i++) {
        ElfW(Phdr) ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (size_t)i * sizeof ph)) != (ssize_t)sizeof ph) goto out;
        if (ph.p_type != PT_DYNAMIC) continue;
        for (size_t off = 0; off + sizeof(ElfW(Dyn)) <= ph.p_filesz; off += sizeof(ElfW(Dyn))) {
            ElfW(Dyn) d;
            if (pread(fd, &d, sizeof d, (off_t)(ph.p_offset + off)) != (ssize_t)sizeof d) goto out;
            if (d.d_tag == DT_NULL) break;
            if (d.d_tag == DT_INIT_ARRAYSZ && d.d_un.d_val) {
                d.d_un.d_val = 0;
                if (pwrite(fd, &d, sizeof d, (off_t)(ph.p_offset + off)) != (ssize_t)sizeof d) goto out;
            }
        }
        rc = 0;
    }
out:
    close(fd);
    return rc;
}

/* The address and size of the object's `.init_array` section (0 if none). */
static void init_array_of(const char *path, uintptr_t *addr, size_t *size) {
    *addr = 0;
    *size = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    ElfW(Ehdr) eh;
    ElfW(Shdr) strtab;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_shentsize != sizeof(ElfW(Shdr)) || eh.e_shstrndx == SHN_UNDEF ||
        pread(fd, &strtab, sizeof strtab, (off_t)(eh.e_shoff + (size_t)eh.e_shstrndx * sizeof strtab)) !=
            (ssize_t)sizeof strtab) {
        close(fd);
        return;
    }
    for (int i = 0; i < eh.e_shnum; i++) {
        ElfW(Shdr) sh;
        char name[16] = "";
        if (pread(fd, &sh, sizeof sh, (off_t)(eh.e_shoff + (size_t)i * sizeof sh)) != (ssize_t)sizeof sh) break;
        if (sh.sh_type != SHT_INIT_ARRAY) continue;
        if (pread(fd, name, sizeof name - 1, (off_t)(strtab.sh_offset + sh.sh_name)) <= 0) continue;
        if (strcmp(name, ".init_array") == 0) {
            *addr = sh.sh_addr;
            *size = sh.sh_size;
            break;
        }
    }
    close(fd);
}

typedef struct {
    void (*const *fns)(int, char **, char **);
    size_t n;
} init_run;

extern char **environ;

static void run_inits(void *arg) {
    init_run *r = arg;
    for (size_t i = 0; i < r->n; i++)
        if (r->fns[i] && (uintptr_t)r->fns[i] != (uintptr_t)-1) r->fns[i](0, NULL, environ);
}

/* Runs the constructors defer_init held back; -1 with a message if one faulted. */
static int run_deferred_init(void *h, const char *so_path, char *err, size_t errn) {
    uintptr_t addr;
    size_t size;
    init_array_of(so_path, &addr, &size);
    if (!size) return 0;
    /* only when the dynamic section says 0: an object that was not deferred
     * has had them run by dlopen */
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || !lm) return 0;
    for (const ElfW(Dyn) *d = lm->l_ld; d && d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_INIT_ARRAYSZ && d->d_un.d_val) return 0;
    init_run r = {(void (*const *)(int, char **, char **))(lm->l_addr + addr), size / sizeof(void *)};
    mk_fault f;
    if (mk_fault_guarded_call(run_inits, &r, &f) < 0) {
        snprintf(err, errn,
                 "a global constructor in its source or header raised %s while the kernel was loading (at address "
                 "%#lx)",
                 f.sig == SIGSEGV ? "SIGSEGV (an invalid memory access)"
                 : f.sig == SIGBUS ? "SIGBUS"
                 : f.sig == SIGFPE ? "SIGFPE"
                 : f.sig == SIGILL ? "SIGILL (an illegal instruction: __builtin_trap()?)"
                 : f.sig == SIGTRAP ? "SIGTRAP"
                                    : "a signal",
                 (unsigned long)f.pc);
        return -1;
    }
    return 0;
}

static mkk_compiled load_entry(const char *so_path, char *err, size_t errn) {
    mkk_compiled c = {0};
    /* A kernel linked with -ffast-math carries crtfastmath.o, whose
     * constructor turns on flush-to-zero in the loading thread: keep the
     * process's floating-point environment as it was. */
    fenv_t env;
    fegetenv(&env);
    void *h = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    int init_rc = h ? run_deferred_init(h, so_path, err, errn) : 0;
    fesetenv(&env);
    if (!h) {
        snprintf(err, errn, "%s", dlerror());
        return c;
    }
    if (init_rc < 0) return c; /* left loaded: unloading would run its destructors */
    void (*set_api)(const struct mkpy_coop_api *) =
        (void (*)(const struct mkpy_coop_api *))(uintptr_t)dlsym(h, MKPY_SET_API_SYMBOL);
    c.entry = (mkk_entry_fn)(uintptr_t)dlsym(h, MKPY_ENTRY_SYMBOL);
    c.thread = (mkk_thread_fn)(uintptr_t)dlsym(h, MKPY_THREAD_SYMBOL);
    if (!c.entry || !c.thread || !set_api) {
        snprintf(err, errn, "the compiled kernel lacks its entry points");
        c.entry = NULL;
        return c;
    }
    set_api(&mkk_coop_api);
    c.cbs_run = (mkk_cbs_run_fn)(uintptr_t)dlsym(h, MKPY_CBS_RUN_SYMBOL);
    c.cbs_info = (const struct mkpy_cbs_info *)dlsym(h, MKPY_CBS_INFO_SYMBOL);
    if (!c.cbs_info) c.cbs_run = NULL;
    return c;
}

int mkk_prepare(char *msg, size_t n) {
    int rc = 0, built = 0;
    pthread_mutex_lock(&jit.mu);
    if (find_compiler() < 0) {
        snprintf(msg, n, "no clang++ >= 15 found (set MKPY_CXX): kernels cannot be compiled");
        rc = -1;
        goto done;
    }
    char identity[5400], dir[4300];
    full_identity(identity, sizeof identity);
    snprintf(dir, sizeof dir, "%s/pch", jit.runtime_dir);
    if (mkdirs(dir) < 0) {
        snprintf(msg, n, "cannot create %s: %s", dir, strerror(errno));
        rc = -1;
        goto done;
    }
    for (int m = MKK_MATH_SAFE; m <= MKK_MATH_FAST; m++) {
        char name[64], path[4400];
        pch_name(math_flags((mkk_math_mode)m), identity, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (access(path, R_OK) == 0) continue;
        if (build_pch(math_flags((mkk_math_mode)m), path) < 0) {
            snprintf(msg, n, "cannot build %s with %s", path, jit.cxx);
            rc = -1;
            goto done;
        }
        built++;
    }
    snprintf(msg, n, "%d precompiled runtime header(s) built in %s with %s", built, dir, jit.cxx);
done:
    pthread_mutex_unlock(&jit.mu);
    return rc;
}

/* ------------------------------------------------ the lockstep engine */

/* Part of the disk key of cooperative kernels: bump it when the pass changes
 * what it emits. */
#define CBS_ENGINE_ID "engine=lockstep-5"

static char cbs_pass_path[4096];
static pthread_once_t cbs_pass_once = PTHREAD_ONCE_INIT;

static void cbs_pass_find(void) {
    char path[4400], real[4096];
    snprintf(path, sizeof path, "%s/../" MKK_CBS_PASS_PROGRAM, jit.runtime_dir);
    if (access(path, X_OK) == 0 && realpath(path, real)) memcpy(cbs_pass_path, real, sizeof real);
}

/* The region-splitting pass is a program beside the package
 * (mkpy/mkpy-cbs-pass, linked with LLVM), run like the compiler. NULL when
 * it is not there (mkpy built without LLVM 15) or MKPY_ENGINE=fibers:
 * cooperative kernels then run on fibers. */
static const char *cbs_pass(void) {
    const char *e = getenv("MKPY_ENGINE");
    if (e && strcmp(e, "fibers") == 0) return NULL;
    pthread_once(&cbs_pass_once, cbs_pass_find);
    return cbs_pass_path[0] ? cbs_pass_path : NULL;
}

/* Builds the object of a cooperative kernel through the pass: C++ -> bitcode
 * -> mkpy-cbs-pass -> object at obj_path. Returns 0; the compiler's failure (diag
 * set: the kernel is wrong); or CBS_DECLINED when the pass cannot take the
 * kernel (it is then built for fibers). */
#define CBS_DECLINED (-1000)
static int cbs_object(const char *mflags, const char **pch, const char *tmp_base, const char *cpp_path,
                      char *obj_path, size_t n, char **diag, char *declined, size_t declined_n) {
    char bc_path[4500];
    snprintf(bc_path, sizeof bc_path, "%s.bc", tmp_base);
    int rc = compile(mflags, *pch, BUILD_BITCODE, bc_path, cpp_path, diag);
    if (rc != 0 && *pch && *diag && strstr(*diag, "precompiled header")) {
        free(*diag);
        *diag = NULL;
        *pch = NULL;
        rc = compile(mflags, NULL, BUILD_BITCODE, bc_path, cpp_path, diag);
    }
    if (rc != 0) {
        unlink(bc_path);
        return rc;
    }
    free(*diag);
    *diag = NULL;
    snprintf(obj_path, n, "%s.o", tmp_base);
    char *argv[] = {(char *)cbs_pass(), bc_path, obj_path, NULL}, *why = NULL;
    rc = run_capture(argv, &why);
    unlink(bc_path);
    if (rc != 0) {
        /* the pass declined (or failed): fibers run the kernel */
        unlink(obj_path);
        obj_path[0] = 0;
        snprintf(declined, declined_n, "the lockstep engine cannot take it: %s",
                 rc < 0 ? "its compiler pass failed" : why && why[0] ? why : "no reason given");
        free(why);
        return CBS_DECLINED;
    }
    free(why);
    return 0;
}

mkk_compiled mkk_jit(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                     const char *kernel_name) {
    mkk_compiled fn = {0};
    char *program = NULL;
    const char *mflags = math_flags(k->math_mode);
    /* In memory the generated Metal source is the key: it fixes the program
     * (kernel name, header, source, argument types, template values,
     * attributes), so a hit skips the translation. */
    size_t mlen = strlen(mflags), glen = strlen(generated);
    char *key = malloc(mlen + glen + 3);
    if (!key) {
        mk_nomem();
        return fn;
    }
    memcpy(key, mflags, mlen);
    /* the program also depends on whether threadgroups are large (see
     * mkpy_cbs_loop_steps in build_program) */
    key[mlen] = c->threadgroup[0] * c->threadgroup[1] * c->threadgroup[2] >= 64 ? 'L' : 'S';
    key[mlen + 1] = '\n';
    memcpy(key + mlen + 2, generated, glen + 1);
    unsigned bucket = (unsigned)(hash64(key) % NBUCKETS);

    pthread_mutex_lock(&jit.mu);
    for (entry *e = jit.buckets[bucket]; e; e = e->next)
        if (strcmp(e->key, key) == 0) {
            fn = e->fn;
            jit.stats.memory_hits++;
            break;
        }
    if (fn.entry) goto done;
    if (!(program = build_program(k, c, inputs, generated, kernel_name))) goto done;

    if (find_compiler() < 0) {
        mk_error_set(MK_ERR_RUNTIME,
                     "[metal_kernel] No kernel compiler found for `%s`: mkpy compiles Metal kernels with clang 15 "
                     "or newer. Install it (Debian/Ubuntu: apt-get install clang-15) or point MKPY_CXX at a "
                     "clang++ binary%s%s.",
                     k->name, getenv("MKPY_CXX") ? " (MKPY_CXX is set to " : "",
                     getenv("MKPY_CXX") ? getenv("MKPY_CXX") : "");
        if (getenv("MKPY_CXX")) {
            char msg[MK_ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s", mk_error_message());
            size_t l = strlen(msg);
            if (l && msg[l - 1] == '.') msg[l - 1] = 0;
            mk_error_set(MK_ERR_RUNTIME, "%s, which does not run).", msg);
        }
        goto done;
    }
    /* the disk key adds the compiler's identity, the flags and the headers */
    char identity[5400];
    full_identity(identity, sizeof identity);
    char *pkey = malloc(mlen + strlen(program) + 4800);
    if (!pkey) {
        mk_nomem();
        goto done;
    }
    /* the disk key names the engine a cooperative kernel is built for */
    const int cooperative = mkk_is_cooperative((mkk_kernel *)k) && cbs_pass() != NULL;
    char pass_id[4600] = "";
    if (cooperative) file_identity(cbs_pass(), pass_id, sizeof pass_id); /* the pass's build, too */
    sprintf(pkey, "%s%s%s\n%s", mflags, cooperative ? " " CBS_ENGINE_ID " " : "", pass_id, program);
    char dkey_hex[33];
    hash_hex(pkey, identity, dkey_hex);
    char dir[4096], so_path[4400], key_path[4400];
    cache_dir(dir, sizeof dir);
    snprintf(so_path, sizeof so_path, "%s/%s.so", dir, dkey_hex);
    snprintf(key_path, sizeof key_path, "%s/%s.key", dir, dkey_hex);
    char err[1024] = "";
    char *full_key = malloc(strlen(pkey) + strlen(identity) + 2);
    if (!full_key) {
        free(pkey);
        mk_nomem();
        goto done;
    }
    sprintf(full_key, "%s\n%s", identity, pkey);
    free(pkey);

    char *stored = read_file(key_path);
    if (stored && strcmp(stored, full_key) == 0 && access(so_path, R_OK) == 0) {
        fn = load_entry(so_path, err, sizeof err);
        if (fn.entry) jit.stats.disk_hits++;
    }
    free(stored);
    if (!fn.entry) {
        if (mkdirs(dir) < 0) {
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot create the kernel cache directory %s: %s", dir,
                         strerror(errno));
            free(full_key);
            goto done;
        }
        char tmp_base[4400], cpp_path[4500], tmp_so[4500], tmp_key[4500];
        snprintf(tmp_base, sizeof tmp_base, "%s/%s.tmp.%ld.%lx", dir, dkey_hex, (long)getpid(),
                 (unsigned long)time(NULL) ^ (unsigned long)(uintptr_t)&tmp_base);
        snprintf(cpp_path, sizeof cpp_path, "%s.cpp", tmp_base);
        snprintf(tmp_so, sizeof tmp_so, "%s.so", tmp_base);
        snprintf(tmp_key, sizeof tmp_key, "%s.key", tmp_base);
        if (write_file(cpp_path, program) < 0) {
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot write %s: %s", cpp_path, strerror(errno));
            free(full_key);
            goto done;
        }
        const char *pch = pch_for(k->math_mode, mflags, dir, identity);
        char *diag = NULL;
        /* a cooperative kernel goes through the region-splitting pass when
         * it can (cbs_object), else it is built for fibers as any other */
        char obj_path[4500] = "", declined[1200] = "";
        int rc = cooperative ? cbs_object(mflags, &pch, tmp_base, cpp_path, obj_path, sizeof obj_path, &diag,
                                          declined, sizeof declined)
                             : CBS_DECLINED;
        build_kind link = BUILD_LINK, link_cxx = BUILD_LINK_WITH_LIBSTDCXX;
        const char *link_in = obj_path;
        if (rc == CBS_DECLINED) {
            link = BUILD_KERNEL;
            link_cxx = BUILD_KERNEL_WITH_LIBSTDCXX;
            link_in = cpp_path;
        } else if (rc == 0) {
            rc = compile(mflags, NULL, link, tmp_so, link_in, &diag);
        }
        if (rc == CBS_DECLINED) {
            rc = compile(mflags, pch, BUILD_KERNEL, tmp_so, cpp_path, &diag);
            if (rc != 0 && pch && diag && strstr(diag, "precompiled header")) {
                /* a stale or unusable PCH: compile without it */
                free(diag);
                diag = NULL;
                pch = NULL;
                rc = compile(mflags, NULL, BUILD_KERNEL, tmp_so, cpp_path, &diag);
            }
        }
        jit.stats.compiles++;
        if (rc == 0) {
            defer_init(tmp_so);
            fn = load_entry(tmp_so, err, sizeof err);
            if (!fn.entry && strstr(err, "undefined symbol")) {
                /* the kernel's own code needs the C++ library (a static
                 * local with a constructor, say): link it this time */
                free(diag);
                diag = NULL;
                rc = compile(mflags, link == BUILD_LINK ? NULL : pch, link_cxx, tmp_so, link_in, &diag);
                if (rc == 0 && defer_init(tmp_so) >= 0) fn = load_entry(tmp_so, err, sizeof err);
            }
        }
        if (obj_path[0]) unlink(obj_path);
        if (fn.entry && declined[0]) fn.cbs_declined = strdup(declined); /* kept with the cache entry */
        /* the translated C++ stays beside the object, for users to read */
        char kept_cpp[4400];
        snprintf(kept_cpp, sizeof kept_cpp, "%s/%s.cpp", dir, dkey_hex);
        if (rc != 0 || rename(cpp_path, kept_cpp) != 0) unlink(cpp_path);
        if (rc != 0) {
            if (rc < 0 && !diag)
                mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot run the kernel compiler %s: %s", jit.cxx,
                             strerror(errno));
            else
                format_failure(k, c, kernel_name, diag);
            free(diag);
            unlink(tmp_so);
            free(full_key);
            goto done;
        }
        free(diag);
        if (fn.entry) {
            /* publish: the key first, then the object (readers check both);
             * the loaded object stays mapped whatever its name becomes */
            if (write_file(tmp_key, full_key) == 0) rename(tmp_key, key_path);
            unlink(tmp_key);
            if (rename(tmp_so, so_path) < 0) unlink(tmp_so);
        } else {
            unlink(tmp_so);
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot load the compiled kernel `%s`: %s", k->name, err);
        }
    }
    free(full_key);
    if (fn.entry) {
        entry *e = malloc(sizeof *e);
        if (e) {
            e->key = key;
            key = NULL;
            e->fn = fn;
            e->next = jit.buckets[bucket];
            jit.buckets[bucket] = e;
            jit.stats.entries++;
        }
    }
done:
    pthread_mutex_unlock(&jit.mu);
    free(key);
    free(program);
    return fn;
}
