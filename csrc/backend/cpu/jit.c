/* The JIT: generated Metal source -> C++ -> shared object -> entry point.
 *
 * Two caches. In memory: the generated Metal source plus the math flags is
 * the key (compared in full, so kernels that share a name but not a source
 * never collide; a hit skips the translation). On disk, under MKPY_CACHE_DIR or ~/.cache/mkpy: a file named by a
 * hash of the C++ text, the compiler's identity and the flags, written to a
 * unique temporary name and renamed into place, so concurrent processes
 * compiling the same kernel are safe; a `.key` file beside it holds the full
 * key and is checked on load. */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <fenv.h>
#include <pthread.h>
#include <elf.h>
#include <link.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/cuda.h"
#include "backend/diskcache.h"
#include "backend/cpu/check.h"
#include "backend/cpu/coop.h"
#include "backend/cpu/ir/cbs_ir.h"
#include "backend/cpu/srvd.h"
#include "kernel/diag.h"
#include "kernel/kernel.h"

extern char **environ;

/* ------------------------------------------------------------ state */

/* One kernel in the in-memory table. Its object is loaded (`handle`) or
 * unloaded: at most MKPY_MAX_LOADED_KERNELS objects stay loaded, the least
 * recently used one is closed once no launch holds it (`uses`), and its next
 * call loads it again from disk. While one thread compiles or loads it
 * (`busy`), other threads asking for it wait on jit.cv; nobody holds jit.mu
 * during the work itself. */
typedef struct entry {
    char *key;      /* the math flags, a byte of launch shape and check/debug bits, '\n', the generated source */
    uint64_t hash;  /* of the key (key_hash) */
    struct entry *next;                /* bucket chain */
    struct entry *lru_prev, *lru_next; /* the loaded list, most recent first */
    bool busy;                         /* being compiled or loaded by one thread */
    bool detached;                     /* dropped from the table while in use: freed at its last release */
    int uses;                          /* launches running it */
    void *handle;                      /* dlopen handle, NULL when unloaded */
    mkk_compiled fn;
    char *so_path;      /* its object on disk, touched on use */
    time_t touched;     /* when so_path was last touched by this process */
    char *cbs_declined; /* why the lockstep engine did not take it, when known */
} entry;

#define NBUCKETS 256
#define DEFAULT_MAX_LOADED 256
#define TOUCH_EVERY_S 60 /* a memory hit refreshes its disk entry's time at most this often */

static struct {
    pthread_mutex_t mu; /* the table, the loaded list and the counters; never held while a compiler runs */
    pthread_cond_t cv;  /* a busy entry became ready (or went away) */
    entry *buckets[NBUCKETS];
    entry *lru_head, *lru_tail;
    int nloaded;
    mkk_cache_stats stats;
    /* the compiler and identities, probed once under probe_mu */
    pthread_mutex_t probe_mu;
    pthread_cond_t probe_cv; /* a precompiled header finished building */
    char runtime_dir[4096];
    char cxx[4096];
    char cxx_identity[4400];
    char runtime_id[512];
    int cxx_probed;
} jit = {.mu = PTHREAD_MUTEX_INITIALIZER,
         .cv = PTHREAD_COND_INITIALIZER,
         .probe_mu = PTHREAD_MUTEX_INITIALIZER,
         .probe_cv = PTHREAD_COND_INITIALIZER};

void mkk_set_runtime_dir(const char *dir) {
    pthread_mutex_lock(&jit.probe_mu);
    snprintf(jit.runtime_dir, sizeof jit.runtime_dir, "%s", dir);
    jit.runtime_id[0] = 0;
    pthread_mutex_unlock(&jit.probe_mu);
}
const char *mkk_runtime_dir(void) { return jit.runtime_dir; }


/* ------------------------------------------------------ running programs */

/* Everything fd gives until every writer closed it (NUL-terminated, NULL
 * when out of memory: then read and dropped), and closes fd. */
static char *read_to_end(int fd) {
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
        ssize_t r = read(fd, buf ? buf + n : tmp, 1023);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (buf) n += (size_t)r;
    }
    close(fd);
    if (buf) buf[n] = 0;
    return buf;
}

/* Runs argv, returns its exit status (or -1) and its combined output. */
static int run_capture(char *const argv[], char **output) {
    int fds[2];
    *output = NULL;
    /* close-on-exec: a program another thread starts meanwhile (a server that
     * stays up) must not keep this pipe open; the dup2s below clear it */
    if (pipe2(fds, O_CLOEXEC) < 0) return -1;
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
    *output = read_to_end(fds[0]);
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

/* MKPY_CXX, else clang++-N of the lockstep pass's LLVM, else the newest clang++-N (N >= 15) on
 * PATH, else clang++ >= 15. */
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
    /* the clang of the LLVM the lockstep pass was built with comes first: the pass reads
     * bitcode from its own LLVM or an older one, never a newer one */
#ifdef MKPY_PASS_LLVM_MAJOR
    const int first = MKPY_PASS_LLVM_MAJOR;
#else
    const int first = 0;
#endif
    int order[12], norder = 0;
    if (first >= 15) order[norder++] = first;
    for (int v = 25; v >= 15; v--)
        if (v != first) order[norder++] = v;
    for (int i = 0; i < norder; i++) {
        int v = order[i];
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

/* ------------------------------------------------------- the C++ program */

/* string building: the front end's (kernel/program.c) */
typedef mkk_sbuf sbuf;
#define sb mkk_sb
#define sbf mkk_sbf

/* The translated program with #line markers naming the user's header and
 * source, plus the entry point that unpacks buffers and attributes. */
/* debug_dir: a debug build's folder, whose header.metal, kernel.metal (the
 * generated source) and source.metal the #line markers then name, so that
 * the debug information points at files a debugger can show; NULL otherwise. */
/* The entry points a build needs (a plain kernel runs only mkpy_kernel_entry;
 * a cooperative one runs on fibers through mkpy_kernel_thread or on the
 * lockstep engine, whose pass builds its run function from
 * mkpy_kernel_cbs_thread): each costs clang and the pass their optimisation
 * and code generation, so a build has only those its engines call. */
enum { ENTRY_PLAIN = 1, ENTRY_THREAD = 2, ENTRY_CBS = 4 };

/* MKPY_CBS_COMPACT set (and not 0): the lockstep pass builds its compact run
 * function for every cooperative kernel (ir/cbs_ir.c; for the tests and the
 * fuzzer). Part of the program (mkpy_cbs_compact) and of the in-memory key. */
static bool cbs_force_compact(void) {
    const char *e = getenv("MKPY_CBS_COMPACT");
    return e && e[0] && strcmp(e, "0") != 0;
}

static char *build_program(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                           const char *kernel_name, const char *debug_dir, int entries) {
    sbuf b = {0};
    const bool prints = k->prints;
    char fh[4800], fg[4800], fs[4800];
    if (debug_dir) {
        snprintf(fh, sizeof fh, "%s/header.metal", debug_dir);
        snprintf(fg, sizeof fg, "%s/kernel.metal", debug_dir);
        snprintf(fs, sizeof fs, "%s/source.metal", debug_dir);
    } else {
        snprintf(fh, sizeof fh, "<kernel %s header>", k->name);
        snprintf(fg, sizeof fg, "<kernel %s signature>", k->name);
        snprintf(fs, sizeof fs, "<kernel %s source>", k->name);
    }
    mkk_sbuf body = {0};
    mkk_sb(&body, "#include \"mkpy_metal.h\"\n#include \"mkpy_coop.h\"\n#include \"mkpy_dispatch.h\"\n");
    if (prints) mkk_sb(&body, "#include \"mkpy_log.h\"\n"); /* os_log, printf */
    int readonly_args = 0;
    sbuf call = {0};
    if (mkk_program_body(&body, k, generated, MKK_TARGET_CPU, fh, fg, fs, NULL, NULL) < 0 ||
        !(call.s = mkk_call_expr(k, c, inputs, kernel_name, "args[%d]", &readonly_args))) {
        free(body.s);
        return NULL;
    }
    sb(&b, body.s);
    free(body.s);
    sb(&b, "#line 1 \"<mkpy entry>\"\n");
    sb(&b, "extern \"C\" void mkpy_kernel_set_api(const mkpy_coop_api *api) { mkpy::api = api; }\n");
    /* only the attributes the kernel reads are filled (mkpy_dispatch.h's
     * bits are mkk_attrs's order); printing reads the thread's place */
    unsigned attrs = 0;
    for (int i = 0; i < MKK_NATTRS; i++) attrs |= (unsigned)k->attr_used[i] << i;
    if (entries & ENTRY_PLAIN) {
        sb(&b, "extern \"C\" void mkpy_kernel_entry(void *const *args, const mkpy_launch *L) {\n");
        if (prints || debug_dir) /* a debug build's attributes all show in a debugger */
            sb(&b, "    mkpy::run_threadgroups(L, [&](const mkpy_thread_attrs &t) {\n        ");
        else
            sbf(&b, "    mkpy::run_threadgroups<%#xu>(L, [&](const mkpy_thread_attrs &t) {\n        ", attrs);
        if (prints) sb(&b, "mkpy::log_at(args, t);\n        ");
        sb(&b, call.s);
        sb(&b, "    });\n}\n");
    }
    if (entries & ENTRY_THREAD) {
        sb(&b, "extern \"C\" void mkpy_kernel_thread(void *const *args, const mkpy_launch *L, uint64_t g, unsigned i) "
               "{\n");
        sb(&b, "    mkpy_thread_attrs t;\n    mkpy::launch_attrs(L, t);\n    mkpy::group_attrs(L, g, t);\n"
               "    mkpy::thread_attrs(L, i, t);\n    ");
        if (prints) sb(&b, "mkpy::log_at(args, t);\n    ");
        sb(&b, call.s);
        sb(&b, "}\n");
    }
    if (entries & ENTRY_CBS) {
        /* the same thread for the region-splitting engine (cbs.c): the IR pass
         * gives `resume` and `ctx` their meaning; loop steps (a site per
         * iteration of a site-free loop, so that the iteration vectorises across
         * threads) pay for threadgroups of 64 threads or more */
        sbf(&b, "extern \"C\" const int mkpy_cbs_loop_steps = %d;\n",
            c->threadgroup[0] * c->threadgroup[1] * c->threadgroup[2] >= 64);
        /* threadgroups one thread tall (bit 0) or deep (bit 1): the work-item
         * loops over y or z then run once, and LLVM drops them (their setup is
         * most of a 32-thread group's cost) */
        /* the leading args the kernel only reads (its inputs): a load from one
         * at a uniform address is the same in every thread */
        sbf(&b, "extern \"C\" const int mkpy_cbs_readonly_args = %d;\n", readonly_args);
        sbf(&b, "extern \"C\" const int mkpy_cbs_flat = %d;\n",
            (c->threadgroup[1] == 1) | (c->threadgroup[2] == 1) << 1);
        /* MKPY_CBS_COMPACT (tests): the pass builds the compact run function
         * whatever the kernel's size */
        if (cbs_force_compact()) sb(&b, "extern \"C\" const int mkpy_cbs_compact = 1;\n");
        /* the group's coordinates come computed once per group (the pass calls
         * mkpy_kernel_cbs_group at the top of its run function): divisions in
         * the work-item loops would stay there, as LLVM never hoists a division
         * out of a branch */
        sb(&b, "extern \"C\" void mkpy_kernel_cbs_group(const mkpy_launch *L, uint64_t g, uint32_t *gb) {\n"
               "    mkpy::group_coords(L, g, gb);\n}\n");
        sb(&b, "extern \"C\" uint32_t mkpy_kernel_cbs_thread(void *const *args, const mkpy_launch *L, const uint32_t *gb, "
               "unsigned i, uint32_t resume, void *ctx, unsigned x, unsigned y, unsigned z) {\n");
        sbf(&b, "    mkpy_thread_attrs t = {};\n    mkpy::attrs_at<%#xu>(L, gb, i, x, y, z, t);\n    ", attrs);
        sb(&b, call.s);
        sb(&b, "    return MKPY_CBS_DONE;\n}\n");
    }
    if (c->check) { /* the checker mode's hooks (check_ir.c instruments mkpy_kernel_check_body with calls to them) */
        sb(&b, "#include \"mkpy_check.h\"\nextern \"C\" {\n"
               "__attribute__((noinline)) void mkpy_kernel_check_body(void *const *args, "
               "const mkpy_thread_attrs &t, mkpy_check_thread *ct) {\n    ");
        if (prints) sb(&b, "mkpy::log_at(args, t);\n    ");
        sb(&b, call.s);
        /* one thread (the fiber engine) */
        sb(&b, "}\nvoid mkpy_kernel_check_thread(void *const *args, const mkpy_launch *L, uint64_t g, unsigned i) {\n"
               "    mkpy_thread_attrs t;\n    mkpy::launch_attrs(L, t);\n    mkpy::group_attrs(L, g, t);\n"
               "    mkpy::thread_attrs(L, i, t);\n"
               "    mkpy_check_thread ct = {};\n    ct.group = g;\n    ct.index = i;\n"
               "    mkpy_chk_api->attach(&ct, mkpy_chk_sites, mkpy_chk_nsites);\n"
               "    mkpy_kernel_check_body(args, t, &ct);\n}\n"
               /* whole threadgroups, the attributes stepped as in mkpy_kernel_entry */
               "void mkpy_kernel_check_entry(void *const *args, const mkpy_launch *L) {\n"
               "    mkpy_check_thread ct = {};\n"
               "    mkpy_chk_api->attach(&ct, mkpy_chk_sites, mkpy_chk_nsites);\n"
               "    const uint64_t nx = L->ngroups[0], ny = L->ngroups[1];\n"
               "    mkpy::run_threadgroups(L, [&](const mkpy_thread_attrs &t) {\n"
               "        ct.group = t.threadgroup_position_in_grid[0] + nx * (t.threadgroup_position_in_grid[1] + "
               "ny * (uint64_t)t.threadgroup_position_in_grid[2]);\n"
               "        ct.index = t.thread_index_in_threadgroup;\n"
               "        mkpy_kernel_check_body(args, t, &ct);\n    });\n}\n}\n");
    }
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
/* Some CPUs' tunings (Intel's before Ice Lake, Atom) make a 64-bit division of operands that fit
 * in 32 bits a 32-bit `div` (and a 32-bit one an 8-bit `divb`): the fault handler that completes a
 * division by zero (fiber.c) would then see the narrower instruction and give its all-ones value,
 * not the operand type's. Those two tuning features are turned off. */
#define TARGET_FLAGS                                                                                  \
    "-march=native -Xclang -target-feature -Xclang -idivq-to-divl -Xclang -target-feature -Xclang " \
    "-idivl-to-divb"
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
    FILE *f = fopen("/proc/cpuinfo", "re");
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '\n') break; /* end of the first processor */
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
            if (strncmp(line, keys[i], strlen(keys[i])) == 0) sb(&all, line);
    }
    if (f) fclose(f);
    char hex[33];
    mkb_hash_hex(all.s ? all.s : "unknown", TARGET_FLAGS, hex);
    free(all.s);
    snprintf(out, n, "cpu %s", hex);
}

/* A hash of the runtime headers' contents, so that a changed header never
 * reuses kernels compiled against the old one, plus the flags and the CPU. */
static void runtime_identity(char *out, size_t n) {
    static const char *const files[] = {"mkpy_metal.h", "mkpy_coop.h", "mkpy_dispatch.h", "mkpy_launch.h",
                                        "mkpy_log.h", "mkpy_check.h"};
    sbuf all = {0};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", jit.runtime_dir, files[i]);
        char *text = mkb_read_file(path);
        sb(&all, text ? text : "(missing)");
        free(text);
    }
    char hex[33], host[64];
    mkb_hash_hex(all.s ? all.s : "", "", hex);
    free(all.s);
    host_identity(host, sizeof host);
    snprintf(out, n, "runtime %s; flags %s; %s", hex, FLAGS_ID, host);
}

/* What the disk cache and the PCH names depend on: the compiler, then the
 * runtime headers, flags and CPU (computed once). Call with jit.probe_mu held,
 * after find_compiler. */
static void full_identity(char *out, size_t n) {
    if (!jit.runtime_id[0]) runtime_identity(jit.runtime_id, sizeof jit.runtime_id);
    snprintf(out, n, "%s; %s", jit.cxx_identity, jit.runtime_id);
}

typedef enum { BUILD_KERNEL, BUILD_KERNEL_WITH_LIBSTDCXX, BUILD_PCH, BUILD_BITCODE, BUILD_OBJECT, BUILD_LINK,
               BUILD_LINK_WITH_LIBSTDCXX } build_kind;

/* Set while build_debug compiles: -O0 -g instead of -O2. */
static _Thread_local int compile_debug;

/* ------------------------------------------------ linking without the driver */

/* The linker's command line for a kernel, as the compiler driver would run
 * it (`clang++ -### -shared -nostdlib++`), probed once: a kernel's link then
 * starts ld alone. Starting clang costs ~25 ms of CPU time before it does
 * anything (relocating libLLVM and libclang-cpp), ld ~3 ms. The probe runs
 * on a thread of its own while the first kernel compiles; `n` is 0 when it
 * found no single linker command (the driver links, as before). The
 * placeholders go in as -Wl, arguments, which the driver passes on as they
 * are, in an input's place, without looking for the files. */
#define LD_OUT "mkpy-kernel-out.so"
#define LD_IN "mkpy-kernel-in.o"
static struct {
    char *argv[96];
    int n, out_i, in_i;
    int state;       /* 0: not probed, 1: probing, 2: done */
    char file[4600]; /* the file it was read from (ldcmd_file), or "" */
    bool skip_package; /* the package's file failed (and may be read-only): probe instead */
} ldcmd;

/* Splits one line of `-###` output (each argument in double quotes, with
 * backslash escapes) into ldcmd. Returns 0 when it took the line. */
static int ldcmd_parse(char *line) {
    int n = 0;
    ldcmd.out_i = ldcmd.in_i = -1;
    for (char *p = line; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        if (*p != '"' || n >= (int)(sizeof ldcmd.argv / sizeof *ldcmd.argv) - 1) return -1;
        char *w = ++p, *arg = w;
        while (*p && *p != '"') {
            if (*p == '\\' && p[1]) p++;
            *w++ = *p++;
        }
        if (*p != '"') return -1;
        p++;
        *w = 0;
        if (!strcmp(arg, LD_OUT)) ldcmd.out_i = n;
        if (!strcmp(arg, LD_IN)) ldcmd.in_i = n;
        ldcmd.argv[n++] = arg;
    }
    ldcmd.argv[n] = NULL;
    if (n < 2 || ldcmd.out_i < 0 || ldcmd.in_i < 0) return -1;
    ldcmd.n = n;
    return 0;
}

/* The probed command is kept on disk, as the line the driver printed: a
 * process then links without probing (~25 ms of CPU time). `make build`
 * writes it beside the PCHs (mkk_prepare), a probe into the cache folder.
 * The name hashes the compiler's identity and the variables the driver
 * reads when it links; a command read from a file that fails to link is run
 * by the driver instead, and the file goes (the system's gcc changed, say).
 * With jit.probe_mu held, after find_compiler. */
static void ldcmd_file(const char *dir, char *out, size_t n) {
    static const char *const vars[] = {"LIBRARY_PATH", "COMPILER_PATH", "GCC_EXEC_PREFIX", "PATH"};
    sbuf all = {0};
    sb(&all, jit.cxx_identity);
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        sbf(&all, "\n%s=%s", vars[i], v ? v : "(unset)");
    }
    char hex[33];
    mkb_hash_hex(all.s ? all.s : "", "ld-command", hex);
    free(all.s);
    snprintf(out, n, "%s/ld-%s.txt", dir, hex);
}

static void ldcmd_save(const char *dir, const char *line) {
    char path[4700], tmp[4800];
    ldcmd_file(dir, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), (unsigned long)atomic_fetch_add(&mkb_tmp_seq, 1));
    if (mkb_write_file(tmp, line) != 0 || rename(tmp, path) != 0) unlink(tmp);
}

/* gold where the system has it: it links a kernel in ~7 ms of CPU time, GNU
 * ld in ~12 (most of either is the program's start; Debian's lld, linked
 * against libLLVM, takes ~18); else the driver's default. */
static void *ldcmd_probe(void *arg) {
    const char *save_dir = arg; /* where the command goes, or NULL */
    static const char *const linkers[] = {"-fuse-ld=gold", NULL};
    char *out = NULL, *cmd = NULL, *line_copy = NULL;
    int ncmd = 0;
    for (size_t l = 0; l < sizeof linkers / sizeof *linkers && ncmd != 1; l++) {
        char *argv[] = {jit.cxx, "-###", "-fPIC", "-shared", "-nostdlib++", "-o", LD_OUT, "-Wl," LD_IN,
                        (char *)linkers[l], NULL};
        free(out);
        out = NULL;
        int ok = run_capture(argv, &out) == 0 && out;
        /* the commands are the lines that start with ` "`: exactly one, the linker */
        ncmd = 0;
        for (char *line = ok ? strtok(out, "\n") : NULL; line; line = strtok(NULL, "\n"))
            if (line[0] == ' ' && line[1] == '"') {
                cmd = line;
                ncmd++;
            }
    }
    if (ncmd == 1) line_copy = strdup(cmd);
    pthread_mutex_lock(&jit.probe_mu);
    if (ncmd != 1 || ldcmd_parse(cmd) < 0) {
        ldcmd.n = 0;
        free(out);
    } else if (line_copy && save_dir) { /* kept for the process's life: ldcmd.argv points into out */
        ldcmd_save(save_dir, line_copy);
    }
    ldcmd.state = 2;
    pthread_cond_broadcast(&jit.probe_cv);
    pthread_mutex_unlock(&jit.probe_mu);
    free(line_copy);
    return NULL;
}

/* The command from a file of dir, if there is one that parses. */
static bool ldcmd_read(const char *dir) {
    ldcmd_file(dir, ldcmd.file, sizeof ldcmd.file);
    char *text = mkb_read_file(ldcmd.file);
    if (text && ldcmd_parse(text) == 0) return true; /* text is kept: ldcmd.argv points into it */
    free(text);
    ldcmd.n = 0;
    ldcmd.file[0] = 0;
    return false;
}

/* Starts the probe, once (with jit.probe_mu held, after find_compiler). */
static void ldcmd_start(void) {
    if (ldcmd.state) return;
    ldcmd.state = 1;
    char pch_dir[4200], cache[4400];
    snprintf(pch_dir, sizeof pch_dir, "%s/pch", jit.runtime_dir);
    if (getenv("MKPY_LINK_WITH_DRIVER") || (mkb_cache_dir(cache, sizeof cache) == 0 && ldcmd_read(cache)) ||
        (!ldcmd.skip_package && ldcmd_read(pch_dir))) {
        ldcmd.state = 2;
        return;
    }
    static char save_dir[4400];
    if (mkb_cache_dir(save_dir, sizeof save_dir) < 0) save_dir[0] = 0;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    void *arg = save_dir[0] ? save_dir : NULL;
    int rc = pthread_create(&t, &attr, ldcmd_probe, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        pthread_mutex_unlock(&jit.probe_mu);
        ldcmd_probe(arg); /* no thread: here */
        pthread_mutex_lock(&jit.probe_mu);
    }
}

/* Links an object into a shared object with the probed linker command;
 * -1 when there is none (the driver links). */
static int link_direct(const char *out, const char *in, char **diag) {
    *diag = NULL;
    pthread_mutex_lock(&jit.probe_mu);
    ldcmd_start();
    while (ldcmd.state != 2) pthread_cond_wait(&jit.probe_cv, &jit.probe_mu);
    const int n = ldcmd.n;
    char *argv[96];
    if (n) {
        memcpy(argv, ldcmd.argv, (size_t)(n + 1) * sizeof *argv);
        argv[ldcmd.out_i] = (char *)out;
        argv[ldcmd.in_i] = (char *)in;
    }
    pthread_mutex_unlock(&jit.probe_mu);
    if (!n) return -1;
    int rc = run_capture(argv, diag);
    if (rc != 0) {
        pthread_mutex_lock(&jit.probe_mu);
        if (ldcmd.file[0]) { /* a command from a file: the driver links (compile), and the next link probes */
            unlink(ldcmd.file);
            ldcmd.skip_package |= strncmp(ldcmd.file, jit.runtime_dir, strlen(jit.runtime_dir)) == 0;
            ldcmd.file[0] = 0;
            ldcmd.n = 0;
            ldcmd.state = 0;
            rc = -1;
        }
        pthread_mutex_unlock(&jit.probe_mu);
    }
    return rc;
}

static int cc_run(char *const argv[], char **output);

/* Runs the compiler with the fixed flags; pch, if not NULL, is included. */
static int compile(const char *mflags, const char *pch, build_kind kind, const char *out, const char *in,
                   char **diag) {
    if (kind == BUILD_LINK) {
        int rc = link_direct(out, in, diag);
        if (rc >= 0) return rc;
        free(*diag); /* no probed command, or ld did not start: the driver links */
        *diag = NULL;
    }
    char inc[4200];
    snprintf(inc, sizeof inc, "-I%s", jit.runtime_dir);
    char *argv[48];
    size_t n = 0;
    argv[n++] = jit.cxx;
    /* the math mode's flags first (split at spaces): -fno-fast-math would
     * turn math errno back on after the base flags */
    char mbuf[512], tbuf[256];
    snprintf(mbuf, sizeof mbuf, "%s", mflags);
    for (char *tok = strtok(mbuf, " "); tok && n < 16; tok = strtok(NULL, " ")) argv[n++] = tok;
    for (size_t i = 0; i < NBASE_FLAGS; i++)
        argv[n++] = compile_debug && !strcmp(base_flags[i], "-O2") ? "-O0" : (char *)base_flags[i];
    if (compile_debug) argv[n++] = "-g"; /* a debug build (build_debug) */
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
        /* the function templates the headers use are instantiated once, into
         * the PCH, rather than at the end of every kernel (PCH_FORMAT) */
        argv[n++] = "-fpch-instantiate-templates";
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
    } else if (kind == BUILD_OBJECT) {
        argv[n++] = "-c";
    } else {
        argv[n++] = "-shared";
        if (kind == BUILD_KERNEL || kind == BUILD_LINK) argv[n++] = "-nostdlib++";
    }
    argv[n++] = "-o";
    argv[n++] = (char *)out;
    argv[n++] = (char *)in;
    argv[n] = NULL;
    return cc_run(argv, diag);
}

/* Builds the precompiled runtime headers for a math mode at `path`. */
static int build_pch(const char *mflags, const char *path) {
    /* the header stays beside the PCH: clang checks it when using the PCH */
    char header[4500], tmp[4500], text[13000];
    snprintf(header, sizeof header, "%.*s.h", (int)(strlen(path) - 4), path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lu", path, (long)getpid(), (unsigned long)atomic_fetch_add(&mkb_tmp_seq, 1));
    snprintf(text, sizeof text,
             "#define MKPY_METAL_PCH_INSTANTIATE 1\n#include \"%s/mkpy_metal.h\"\n#include \"%s/mkpy_coop.h\"\n"
             "#include \"%s/mkpy_dispatch.h\"\n",
             jit.runtime_dir, jit.runtime_dir, jit.runtime_dir);
    char tmp_header[4600];
    snprintf(tmp_header, sizeof tmp_header, "%s.h", tmp);
    char *diag = NULL;
    int ok = mkb_write_file(tmp_header, text) == 0 && rename(tmp_header, header) == 0 &&
             compile(mflags, NULL, BUILD_PCH, tmp, header, &diag) == 0 && rename(tmp, path) == 0;
    free(diag);
    unlink(tmp_header);
    unlink(tmp);
    return ok ? 0 : -1;
}

/* The PCH's file name for a math mode: a hash of the compiler, the headers,
 * the flags, the CPU and the mode's flags. */
#define PCH_FORMAT "pch-instantiate-templates" /* how the PCH is built: bump when that changes */
static void pch_name(const char *mflags, const char *identity, char *out, size_t n) {
    char hex[33], key[600];
    snprintf(key, sizeof key, "%s %s", PCH_FORMAT, mflags);
    mkb_hash_hex(identity, key, hex);
    snprintf(out, n, "pch-%s.pch", hex);
}

/* The precompiled runtime headers for a math mode: the one `make build` made
 * beside the headers (mkk_prepare), else one built once into the cache
 * directory (by one thread; others wait for it, a cached kernel never does).
 * NULL when it cannot be built: kernels then compile without it. */
static const char *pch_for(mkk_math_mode mode, const char *mflags, const char *dir, const char *identity, char *out,
                           size_t n) {
    static char paths[3][4600];
    static int failed[3], building[3];
    if (getenv("MKPY_NO_PCH")) return NULL;
    const char *ret = NULL;
    pthread_mutex_lock(&jit.probe_mu);
    while (building[mode]) pthread_cond_wait(&jit.probe_cv, &jit.probe_mu);
    if (paths[mode][0] && access(paths[mode], R_OK) != 0) paths[mode][0] = 0; /* cleared since */
    if (!paths[mode][0] && !failed[mode]) {
        char name[64], path[4600];
        pch_name(mflags, identity, name, sizeof name);
        snprintf(path, sizeof path, "%s/pch/%s", jit.runtime_dir, name);
        if (access(path, R_OK) != 0) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            if (access(path, R_OK) != 0) {
                building[mode] = 1;
                pthread_mutex_unlock(&jit.probe_mu);
                int ok = build_pch(mflags, path) == 0;
                pthread_mutex_lock(&jit.probe_mu);
                building[mode] = 0;
                pthread_cond_broadcast(&jit.probe_cv);
                if (!ok) failed[mode] = 1;
            }
        }
        if (!failed[mode]) snprintf(paths[mode], sizeof paths[mode], "%s", path);
    }
    if (paths[mode][0]) {
        snprintf(out, n, "%s", paths[mode]);
        ret = out;
    }
    pthread_mutex_unlock(&jit.probe_mu);
    return ret;
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
    int fd = open(path, O_RDWR | O_CLOEXEC);
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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
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

/* dlopens an object and finds its entry points. Returns the handle (and
 * fills c), or NULL with the reason in err. */
static void *load_entry(const char *so_path, mkk_compiled *c, char *err, size_t errn) {
    memset(c, 0, sizeof *c);
    /* A kernel linked with -ffast-math carries crtfastmath.o, whose
     * constructor turns on flush-to-zero in the loading thread: keep the
     * process's floating-point environment as it was. */
    fenv_t env;
    fegetenv(&env);
    void *h = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    int init_rc = h ? run_deferred_init(h, so_path, err, errn) : 0;
    fesetenv(&env);
    if (!h) {
        const char *e = dlerror();
        snprintf(err, errn, "%s", e ? e : "dlopen failed");
        return NULL;
    }
    if (init_rc < 0) return NULL; /* left loaded: unloading would run its destructors */
    void (*set_api)(const struct mkpy_coop_api *) =
        (void (*)(const struct mkpy_coop_api *))(uintptr_t)dlsym(h, MKPY_SET_API_SYMBOL);
    /* a build has the entry points of its engine only (build_program):
     * launch.c calls the one its engine needs */
    c->entry = (mkk_entry_fn)(uintptr_t)dlsym(h, MKPY_ENTRY_SYMBOL);
    c->thread = (mkk_thread_fn)(uintptr_t)dlsym(h, MKPY_THREAD_SYMBOL);
    c->cbs_run = (mkk_cbs_run_fn)(uintptr_t)dlsym(h, MKPY_CBS_RUN_SYMBOL);
    c->cbs_info = (const struct mkpy_cbs_info *)dlsym(h, MKPY_CBS_INFO_SYMBOL);
    if (!c->cbs_info) c->cbs_run = NULL;
    if (!mkk_compiled_ok(c) || !set_api) {
        snprintf(err, errn, "the compiled kernel lacks its entry points");
        memset(c, 0, sizeof *c);
        dlclose(h);
        return NULL;
    }
    set_api(&mkk_coop_api);
    void (*set_check)(const struct mkpy_check_api *) =
        (void (*)(const struct mkpy_check_api *))(uintptr_t)dlsym(h, MKPY_SET_CHECK_SYMBOL);
    if (set_check) { /* built for the checker mode: its loop tells the checker each thread */
        set_check(&mkk_check_api);
        c->entry = (mkk_entry_fn)(uintptr_t)dlsym(h, MKPY_CHECK_ENTRY_SYMBOL);
        c->thread = (mkk_thread_fn)(uintptr_t)dlsym(h, MKPY_CHECK_THREAD_SYMBOL);
        c->checked = c->entry && c->thread;
        if (!c->checked) {
            snprintf(err, errn, "the compiled kernel lacks its entry points");
            memset(c, 0, sizeof *c);
            dlclose(h);
            return NULL;
        }
    }
    return h;
}

int mkk_prepare(char *msg, size_t n) {
    int built = 0;
    char identity[5400], dir[4300], cxx[4096];
    pthread_mutex_lock(&jit.probe_mu);
    int have = find_compiler() == 0;
    if (have) full_identity(identity, sizeof identity);
    snprintf(cxx, sizeof cxx, "%s", jit.cxx);
    snprintf(dir, sizeof dir, "%s/pch", jit.runtime_dir);
    pthread_mutex_unlock(&jit.probe_mu);
    if (!have) {
        snprintf(msg, n, "no clang++ >= 15 found (set MKPY_CXX): kernels cannot be compiled");
        return -1;
    }
    if (mkb_mkdirs(dir) < 0) {
        snprintf(msg, n, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    char names[MKK_MATH_FAST + 1][64];
    for (int m = MKK_MATH_SAFE; m <= MKK_MATH_FAST; m++) {
        char path[4400];
        pch_name(math_flags((mkk_math_mode)m), identity, names[m], sizeof names[m]);
        snprintf(path, sizeof path, "%s/%s", dir, names[m]);
        if (access(path, R_OK) == 0) continue;
        if (build_pch(math_flags((mkk_math_mode)m), path) < 0) {
            snprintf(msg, n, "cannot build %s with %s", path, cxx);
            return -1;
        }
        built++;
    }
    /* the linker's command, for every process (ldcmd_file) */
    static char pch_dir[4300];
    snprintf(pch_dir, sizeof pch_dir, "%s", dir);
    ldcmd_probe(pch_dir);
    char ld_path[4700];
    pthread_mutex_lock(&jit.probe_mu);
    ldcmd_file(dir, ld_path, sizeof ld_path);
    pthread_mutex_unlock(&jit.probe_mu);
    const char *ld_name = strrchr(ld_path, '/') + 1;
    /* those of earlier headers or compilers (6-7 MB each) go */
    DIR *d = opendir(dir);
    for (struct dirent *de = d ? readdir(d) : NULL; de; de = readdir(d)) {
        bool current = false;
        if (strncmp(de->d_name, "ld-", 3) == 0) {
            current = strncmp(de->d_name, ld_name, strlen(ld_name)) == 0;
        } else if (strncmp(de->d_name, "pch-", 4) == 0) {
            for (int m = MKK_MATH_SAFE; m <= MKK_MATH_FAST; m++) /* pch-<hash>.pch and its pch-<hash>.h */
                current |= strncmp(de->d_name, names[m], strlen(names[m]) - 3) == 0;
        } else {
            continue;
        }
        if (!current) unlinkat(dirfd(d), de->d_name, 0);
    }
    if (d) closedir(d);
    snprintf(msg, n, "%d precompiled runtime header(s) built in %s with %s", built, dir, cxx);
    return 0;
}

/* ------------------------------------------------ the lockstep engine */

/* Part of the disk key of cooperative kernels: bump it when the pass changes
 * what it emits. */
#define CBS_ENGINE_ID "engine=lockstep-9"
/* ... and of cooperative kernels built through the pass for fibers */
#define FIBER_ENGINE_ID "engine=fibers-ordered-2"

static char cbs_pass_path[4096];
static pthread_once_t cbs_pass_once = PTHREAD_ONCE_INIT;

static void cbs_pass_find(void) {
    char path[4400], real[4096];
    snprintf(path, sizeof path, "%s/../" MKK_CBS_PASS_PROGRAM, jit.runtime_dir);
    if (access(path, X_OK) == 0 && realpath(path, real)) memcpy(cbs_pass_path, real, sizeof real);
}

/* The pass program is beside the package (mkpy/mkpy-cbs-pass, linked with
 * LLVM), run like the compiler. NULL when it is not there (mkpy built
 * without LLVM 15): cooperative kernels then run on fibers, built without it. */
static const char *pass_program(void) {
    pthread_once(&cbs_pass_once, cbs_pass_find);
    return cbs_pass_path[0] ? cbs_pass_path : NULL;
}

/* The region-splitting pass for the lockstep engine: the pass program, NULL
 * without it or with MKPY_ENGINE=fibers (cooperative kernels then run on
 * fibers, still built through the pass for their release order). */
static const char *cbs_pass(void) {
    const char *e = getenv("MKPY_ENGINE");
    if (e && strcmp(e, "fibers") == 0) return NULL;
    return pass_program();
}

/* The two halves of cbs_object, timed for build's stage list (MKPY_DEBUG). */
static _Thread_local uint64_t cbs_front_ns, cbs_pass_ns;

/* ------------------------------------------------ programs kept up */

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int recv_all(int fd, char *p, size_t n) {
    while (n) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Two programs stay up between kernels, each in a pool of its own:
 *  - the region-splitting pass, `mkpy-cbs-pass --serve` (it would cost ~17 ms
 *    of CPU time to start per kernel: the dynamic loader relocating libLLVM);
 *    it takes kernels over a socket (the protocol: ir/cbs_main.c);
 *  - the compiler, clang, started once with libmkpy-cc-zygote.so preloaded
 *    (~25 ms a start): it forks a child that runs clang's main per request
 *    (zygote/cc_zygote.c), with the request's folder, umask and environment.
 * A server is first looked for as a shared daemon (srvd.c): one per kind and
 * build for all of the user's processes, started by the first that finds
 * none and ending after MKPY_SERVER_IDLE seconds without a connection; a
 * pooled server is then a connection to it (a server the daemon forked for
 * it). Where that fails (no private folder, MKPY_NO_SHARED_SERVER) the
 * process starts its own, as a child on a socket pair (as it does after a
 * shared server that did not answer its hello).
 * Each request still runs in a process of its own kind, outside the user's:
 * a crash ends the server or the child, never this process, and a server
 * that fails is ended (the compile then runs as before: a program per
 * kernel). Idle servers wait in their pool, one per thread that compiled at
 * the same time, at most SRV_IDLE_MAX; a server is retired after
 * SRV_JOBS_MAX requests (LLVM keeps some memory per run), or when the
 * variables the dynamic loader reads at start changed since it started
 * (LD_LIBRARY_PATH and the like: they are part of a daemon's key; the rest
 * of the environment goes with each compiler request, and the pass reads
 * none). A server reads its input until it ends: closing our end stops it,
 * and the process's exit closes it too. After a fork the child drops its
 * parent's servers. */
#define SRV_IDLE_MAX 4
#define SRV_JOBS_MAX 200
enum { SRV_PASS, SRV_CC, SRV_KINDS };
static const char *const srv_names[SRV_KINDS] = {"lockstep pass", "compiler (clang zygote)"};
typedef struct srvproc {
    pid_t pid;  /* a server of this process's own (reaped at its end), or 0: a shared one */
    pid_t reap; /* the process that started a shared daemon for us, reaped after the first answer */
    int fd;     /* our end of the socket: its standard input and output */
    int jobs;
    bool hello; /* a shared server's hello (srvd.h) is still to be read */
    uint64_t env; /* mkk_srvd_loader_env() when it started */
    struct srvproc *next;
} srvproc;
static struct {
    pthread_mutex_t mu;
    srvproc *idle[SRV_KINDS];
    int nidle[SRV_KINDS];
    pid_t owner;
} srvpool = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void srv_reap(pid_t *pid) {
    if (*pid > 0)
        while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR) {
        }
    *pid = 0;
}

static void srv_end(srvproc *s) {
    close(s->fd);
    srv_reap(&s->pid);
    srv_reap(&s->reap);
    free(s);
}

/* A server of `kind` running argv[0], with `extra` (NULL-terminated
 * "NAME=value" strings) added to its environment: a connection to the shared
 * daemon for them, else a child of this process with the socket as its
 * standard input and output. `files` are the other files it runs (the
 * zygote library): with argv[0], part of the daemon's key. */
static srvproc *srv_start(int kind, char *const argv[], const char *const *extra, const char *const *files,
                          bool shared) {
    srvproc *s = calloc(1, sizeof *s);
    size_t ne = 0, nx = 0, nf = 0, na = 0;
    while (environ && environ[ne]) ne++;
    while (extra && extra[nx]) nx++;
    while (files && files[nf]) nf++;
    while (argv[na]) na++;
    char **env = s ? malloc((ne + nx + 1) * sizeof *env) : NULL;
    const char **words = env ? malloc((na + nx + 2) * sizeof *words) : NULL;
    const char **ids = words ? malloc((nf + 2) * sizeof *ids) : NULL;
    int rc = ENOMEM, sv[2] = {-1, -1};
    if (ids) {
        if (ne) memcpy(env, environ, ne * sizeof *env);
        for (size_t i = 0; i < nx; i++) env[ne + i] = (char *)extra[i];
        env[ne + nx] = NULL;
        s->env = mkk_srvd_loader_env();
        if (shared && !getenv("MKPY_NO_SHARED_SERVER")) {
            words[0] = srv_names[kind];
            memcpy(words + 1, argv, na * sizeof *words);
            for (size_t i = 0; i < nx; i++) words[1 + na + i] = extra[i];
            words[1 + na + nx] = NULL;
            ids[0] = argv[0];
            for (size_t i = 0; i < nf; i++) ids[1 + i] = files[i];
            ids[1 + nf] = NULL;
            s->fd = mkk_srvd_connect(kind == SRV_CC ? "cc" : "pass", mkk_srvd_key(ids, words), argv, env, &s->reap);
            if (s->fd >= 0) {
                s->hello = true;
                rc = 0;
            }
        }
        if (rc != 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
            posix_spawn_file_actions_t fa;
            posix_spawn_file_actions_init(&fa);
            posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
            posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
            posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
            rc = posix_spawn(&s->pid, argv[0], &fa, NULL, argv, env);
            posix_spawn_file_actions_destroy(&fa);
            close(sv[1]);
            if (rc == 0) {
                s->fd = sv[0];
                mkk_debug(1, "%s: a server of this process, pid %d", srv_names[kind], (int)s->pid);
            } else close(sv[0]);
        }
    }
    free(env);
    free(words);
    free(ids);
    if (rc != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* Before a shared server's first answer: its hello (the daemon's pid and
 * its own); then the process that started the daemon, if ours, has exited. */
static int srv_hello(int kind, srvproc *s) {
    if (!s->hello) return 0;
    int32_t h[2];
    if (recv_all(s->fd, (char *)h, sizeof h) < 0) return -1;
    s->hello = false;
    mkk_debug(1, "%s: shared daemon pid %d (its server for this process: pid %d%s)", srv_names[kind], (int)h[0],
              (int)h[1], s->reap ? "; the daemon was started by this process" : "");
    srv_reap(&s->reap);
    return 0;
}

/* An idle server of `kind`, or NULL (none: start one). */
static srvproc *srv_take(int kind) {
    pthread_mutex_lock(&srvpool.mu);
    if (srvpool.owner != getpid()) { /* a forked child: the servers are its parent's */
        for (int k = 0; k < SRV_KINDS; k++) {
            for (srvproc *s = srvpool.idle[k], *nx; s; s = nx) {
                nx = s->next;
                close(s->fd);
                free(s);
            }
            srvpool.idle[k] = NULL;
            srvpool.nidle[k] = 0;
        }
        srvpool.owner = getpid();
    }
    srvproc *s = srvpool.idle[kind];
    if (s) {
        srvpool.idle[kind] = s->next;
        srvpool.nidle[kind]--;
    }
    pthread_mutex_unlock(&srvpool.mu);
    if (s && s->env != mkk_srvd_loader_env()) { /* started under other start-up variables */
        srv_end(s);
        s = NULL;
    }
    return s;
}

/* Back to the pool after a request (ok: it answered), or ended. */
static void srv_give(int kind, srvproc *s, bool ok) {
    if (ok && s->jobs < SRV_JOBS_MAX) {
        pthread_mutex_lock(&srvpool.mu);
        if (srvpool.owner == getpid() && srvpool.nidle[kind] < SRV_IDLE_MAX) {
            s->next = srvpool.idle[kind];
            srvpool.idle[kind] = s;
            srvpool.nidle[kind]++;
            s = NULL;
        }
        pthread_mutex_unlock(&srvpool.mu);
    }
    if (s) srv_end(s);
}

/* One request to a pass server: the pass's status (0 or 1) with *why set,
 * -1 when the server died or misbehaved, -2 when a shared server did not
 * start (no hello: the kernel never reached it). */
static int pass_ask(srvproc *s, char mode, const char *bc, const char *obj, char **why) {
    char head[96];
    int hn = snprintf(head, sizeof head, "%c %zu %zu\n", mode, strlen(bc), strlen(obj));
    if (send_all(s->fd, head, (size_t)hn) < 0 || send_all(s->fd, bc, strlen(bc)) < 0 ||
        send_all(s->fd, obj, strlen(obj)) < 0)
        return s->hello ? -2 : -1;
    if (srv_hello(SRV_PASS, s) < 0) return -2;
    /* the answer's line, a byte at a time (it is short), then the reason */
    char line[64];
    size_t n = 0;
    for (;;) {
        if (n + 1 >= sizeof line || recv_all(s->fd, line + n, 1) < 0) return -1;
        if (line[n++] == '\n') break;
    }
    line[n] = 0;
    int status;
    size_t wn;
    if (sscanf(line, "%d %zu", &status, &wn) != 2 || (status != 0 && status != 1) || wn > 65536) return -1;
    char *w = malloc(wn + 1);
    if (!w || recv_all(s->fd, w, wn) < 0) {
        free(w);
        return -1;
    }
    w[wn] = 0;
    *why = w;
    s->jobs++;
    return status;
}

/* A pass server for the next kernel: an idle one, else one started now, so
 * that it loads LLVM while clang compiles the kernel's bitcode (the first
 * cooperative kernel of a process gains its start, ~17 ms). *fresh says
 * which. NULL when the pass runs as a program of its own (a debugging
 * variable that the pass reads is set: a server would not see a later
 * change) or none starts. */
static srvproc *pass_server(const char *program, bool *fresh) {
    *fresh = false;
    if (!program || getenv("MKPY_CBS_DUMP") || getenv("MKPY_CBS_TRACE") || getenv("MKPY_NO_PASS_SERVER")) return NULL;
    srvproc *s = srv_take(SRV_PASS);
    if (s) return s;
    char *argv[] = {(char *)program, "--serve", NULL};
    *fresh = true;
    return srv_start(SRV_PASS, argv, NULL, NULL, true);
}

/* Runs the pass in `mode` on bc_path into obj_path: through server s
 * (pass_server) when there is one, else as a program. Returns as
 * run_capture. */
static int pass_run(const char *program, char mode, const char *bc_path, const char *obj_path, char **why,
                    srvproc *s, bool fresh) {
    *why = NULL;
    if (s) {
        int rc = pass_ask(s, mode, bc_path, obj_path, why);
        if (rc == -2 || (rc < 0 && !fresh)) { /* an idle server that went away, a daemon that failed: a fresh one */
            srv_end(s);
            free(*why);
            *why = NULL;
            char *argv[] = {(char *)program, "--serve", NULL};
            if ((s = srv_start(SRV_PASS, argv, NULL, NULL, rc != -2))) rc = pass_ask(s, mode, bc_path, obj_path, why);
            if (rc < -1) rc = -1;
        }
        if (s) {
            srv_give(SRV_PASS, s, rc >= 0);
            return rc; /* -1: the server died on this kernel, the pass failed */
        }
    }
    mkk_debug(1, "%s: runs as a program", srv_names[SRV_PASS]);
    char *flag = mode == 'K' ? "--check" : mode == 'F' ? "--fibers" : NULL;
    char *argv[] = {(char *)program, flag ? flag : (char *)bc_path, flag ? (char *)bc_path : (char *)obj_path,
                    flag ? (char *)obj_path : NULL, NULL};
    return run_capture(argv, why);
}

/* The zygote library beside the package (mkpy/libmkpy-cc-zygote.so), when
 * the compiler is an ELF program (a wrapper script, say, is run as before:
 * preloading into its shell would keep the shell started, not clang). Found
 * once, after find_compiler. */
static char zygote_path[4096];
static pthread_once_t zygote_once = PTHREAD_ONCE_INIT;

static void zygote_find(void) {
    unsigned char magic[4] = {0};
    FILE *f = fopen(jit.cxx, "rbe");
    size_t got = f ? fread(magic, 1, sizeof magic, f) : 0;
    if (f) fclose(f);
    if (got != 4 || memcmp(magic, "\x7f" "ELF", 4) != 0) return;
    char path[4400], real[4096];
    snprintf(path, sizeof path, "%s/../libmkpy-cc-zygote.so", jit.runtime_dir);
    if (access(path, R_OK) == 0 && realpath(path, real)) memcpy(zygote_path, real, sizeof real);
}

/* This process's umask, read without changing it (Linux 4.7 on; 022 else). */
static unsigned current_umask(void) {
    unsigned m = 022;
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %o", &m) == 1) break;
    if (f) fclose(f);
    return m;
}

/* One compiler run through zygote s: its exit status and output as
 * run_capture's (-1: it was killed), or -2 when the zygote failed (the
 * compiler may not have run). The request carries this process's working
 * folder, umask and environment (cc_zygote.c's protocol). */
static int cc_ask(srvproc *s, char *const argv[], char **output) {
    char cwd[4096], head[64];
    if (!getcwd(cwd, sizeof cwd)) return -2;
    int argc = 0;
    while (argv[argc]) argc++;
    snprintf(head, sizeof head, "%d %u", argc, current_umask());
    size_t n = strlen(cwd) + 1 + strlen(head) + 1;
    for (int i = 0; argv[i]; i++) n += strlen(argv[i]) + 1;
    for (char **e = environ; e && *e; e++) n += strlen(*e) + 1;
    char *body = n <= (1u << 20) ? malloc(n) : NULL; /* the zygote's limit: more runs the compiler as a program */
    int fds[2] = {-1, -1};
    if (!body || pipe2(fds, O_CLOEXEC) < 0) {
        free(body);
        return -2;
    }
    size_t at = 0;
#define PUT(str)                          \
    do {                                  \
        size_t l_ = strlen(str) + 1;      \
        if (at + l_ <= n) {               \
            memcpy(body + at, (str), l_); \
            at += l_;                     \
        }                                 \
    } while (0)
    PUT(cwd);
    PUT(head);
    for (int i = 0; argv[i]; i++) PUT(argv[i]);
    for (char **e = environ; e && *e; e++) PUT(*e); /* (another thread may change it meanwhile) */
#undef PUT
    n = at;
    /* the head, with the pipe's write end: the compiler's output goes there */
    uint64_t len = n;
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {&len, sizeof len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fds[1], sizeof(int));
    ssize_t w;
    do w = sendmsg(s->fd, &msg, MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    int ok = w == (ssize_t)sizeof len && send_all(s->fd, body, n) == 0;
    close(fds[1]);
    free(body);
    if (!ok) {
        close(fds[0]);
        return -2;
    }
    /* the output until every writer closed it, then the status */
    char *buf = read_to_end(fds[0]);
    int32_t status;
    if (srv_hello(SRV_CC, s) < 0 || recv_all(s->fd, (char *)&status, sizeof status) < 0 ||
        status == 127) { /* 127: it did not start */
        free(buf);
        return -2;
    }
    *output = buf;
    s->jobs++;
    return status > 127 ? -1 : status; /* > 127: killed by a signal */
}

/* Runs the compiler as run_capture does, through a zygote when there is
 * one. A zygote that fails is ended and the compiler runs as a program. */
static int cc_run(char *const argv[], char **output) {
    *output = NULL;
    pthread_once(&zygote_once, zygote_find);
    if (zygote_path[0] && !getenv("MKPY_NO_CC_SERVER")) {
        srvproc *s = srv_take(SRV_CC);
        const bool pooled = s != NULL;
        int rc = -2;
        for (int attempt = 0; attempt < 2 && rc == -2; attempt++) {
            if (!s) {
                char preload[4200];
                snprintf(preload, sizeof preload, "LD_PRELOAD=%s", zygote_path);
                const char *extra[] = {preload, "MKPY_CC_ZYGOTE=1", NULL};
                char *zargv[] = {argv[0], NULL};
                const char *files[] = {zygote_path, NULL};
                /* after a shared server that failed at once, one of our own */
                if (!(s = srv_start(SRV_CC, zargv, extra, files, attempt == 0 || pooled))) break;
            }
            rc = cc_ask(s, argv, output);
            if (rc == -2) {
                free(*output);
                *output = NULL;
                srv_end(s);
                s = NULL;
            }
        }
        if (s) {
            srv_give(SRV_CC, s, true);
            return rc;
        }
    }
    mkk_debug(1, "%s: runs as a program", srv_names[SRV_CC]);
    return run_capture(argv, output);
}

/* Builds the object of a cooperative kernel through the pass: C++ -> bitcode
 * -> mkpy-cbs-pass -> object at obj_path. Mode 'C': the lockstep engine's
 * object (its C++ has only the lockstep entry points: when the pass declines
 * it, build makes the fiber build's C++ and comes back with 'F'); 'F': the
 * fiber engine's (its runtime points in the program's order,
 * mkk_fiber_build), for MKPY_ENGINE=fibers, printing kernels and those the
 * lockstep engine declined; 'K': the checker's instrumented object. Returns
 * 0; the compiler's failure (diag set: the kernel is wrong); or CBS_DECLINED
 * when the pass made no object (the reason in `declined`). */
#define CBS_DECLINED (-1000)
static int cbs_object(char mode, const char *mflags, const char **pch, const char *tmp_base, const char *cpp_path,
                      char *obj_path, size_t n, char **diag, char *declined, size_t declined_n) {
    char bc_path[4600];
    snprintf(bc_path, sizeof bc_path, "%s.bc", tmp_base);
    uint64_t t0 = mkk_now_ns();
    cbs_front_ns = cbs_pass_ns = 0;
    const char *program = pass_program();
    bool fresh;
    srvproc *server = pass_server(program, &fresh);
    int rc = compile(mflags, *pch, BUILD_BITCODE, bc_path, cpp_path, diag);
    if (rc != 0 && *pch && *diag && strstr(*diag, "precompiled header")) {
        free(*diag);
        *diag = NULL;
        *pch = NULL;
        rc = compile(mflags, NULL, BUILD_BITCODE, bc_path, cpp_path, diag);
    }
    if (rc != 0) {
        if (server) srv_give(SRV_PASS, server, true); /* unused: back to the pool */
        unlink(bc_path);
        return rc;
    }
    free(*diag);
    *diag = NULL;
    snprintf(obj_path, n, "%s.o", tmp_base);
    char *why = NULL;
    uint64_t t1 = mkk_now_ns();
    cbs_front_ns = t1 - t0;
    rc = pass_run(program, mode, bc_path, obj_path, &why, server, fresh);
    if (rc != 0)
        snprintf(declined, declined_n, "%s: %s",
                 mode == 'C'   ? "the lockstep engine cannot take it"
                 : mode == 'K' ? "its instrumentation failed"
                               : "the fiber engine's pass failed",
                 rc < 0 ? "its compiler pass failed" : why && why[0] ? why : "no reason given");
    cbs_pass_ns = mkk_now_ns() - t1;
    unlink(bc_path);
    free(why);
    if (rc != 0) {
        unlink(obj_path);
        obj_path[0] = 0;
        return CBS_DECLINED;
    }
    return 0;
}

/* ------------------------------------------------------ the disk cache */

/* Loads the object at so_path only if its entry checks (mkb_check_entry)
 * and the file dlopen mapped is the one that was hashed. Returns the handle
 * or NULL. */
static void *load_entry(const char *so_path, mkk_compiled *c, char *err, size_t errn);
static void *load_verified(const char *so_path, const char *key_path, const char *full_key, mkk_compiled *fn) {
    struct stat before, after;
    void *h = NULL;
    if (mkb_check_entry(so_path, key_path, full_key, &before) == 0) {
        char err[1024];
        h = load_entry(so_path, fn, err, sizeof err);
        if (h && (stat(so_path, &after) < 0 || after.st_ino != before.st_ino || after.st_dev != before.st_dev)) {
            /* replaced between the hash and dlopen */
            dlclose(h);
            h = NULL;
        }
    }
    if (!h) memset(fn, 0, sizeof *fn);
    return h;
}

/* ----------------------------------------------------------- the JIT */

/* What building one kernel makes: its handle, entry points and disk path. */
typedef struct {
    void *handle;
    mkk_compiled fn;
    char *so_path;
    char *cbs_declined;
} built;

/* A debug build (MKPY_KERNEL_DEBUG=1, mx.metal.set_kernel_debug(True)):
 * -O0 -g, no precompiled header, and every file at a stable place,
 * <cache>/debug/<kernel name>-<hash of the program>/: source.metal (the
 * user's source, line for line), header.metal, kernel.metal (the generated
 * Metal), kernel.cpp and kernel.so, which is loaded from there. The #line
 * markers name those files, so a debugger breaks at `source.metal:3` and
 * shows the user's lines. Not in the disk cache (always compiled once per
 * process); cooperative kernels run on fibers (no region splitting, so the
 * debug information stays the user's code). */
static int build_debug(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                       const char *kernel_name, built *out) {
    int ret = -1;
    char *plain = NULL, *program = NULL, *diag = NULL;
    char dir[4400], ddir[4400], path[4800], so[4800], tmp_so[4900], cpp[4800], metal[4800], err[1024] = "";
    const char *mflags = math_flags(k->math_mode);
    pthread_mutex_lock(&jit.probe_mu);
    int have_cxx = find_compiler() == 0;
    pthread_mutex_unlock(&jit.probe_mu);
    if (!have_cxx) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] No kernel compiler found for `%s`: mkpy compiles Metal kernels "
                                     "with clang 15 or newer (apt-get install clang-15, or set MKPY_CXX).", k->name);
        return -1;
    }
    if (mkb_cache_dir(dir, sizeof dir) < 0) return -1;
    /* the folder's name: the kernel, and a hash of its normal program and
     * flags (one folder per instantiation, the same in every process) */
    /* a cooperative kernel runs on fibers in a debug build */
    const int entries = mkk_is_cooperative((mkk_kernel *)k) ? ENTRY_THREAD : ENTRY_PLAIN;
    if (!(plain = build_program(k, c, inputs, generated, kernel_name, NULL, entries))) return -1;
    char hex[33];
    mkb_hash_hex(plain, mflags, hex);
    free(plain);
    int dn = snprintf(ddir, sizeof ddir, "%s/debug/%s-%.12s", dir, kernel_name, hex);
    if (dn < 0 || (size_t)dn >= sizeof ddir) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] The debug build's folder name is too long: %s/debug/%s-...", dir,
                     kernel_name);
        return -1;
    }
    if (mkb_mkdirs_mode(ddir, 0700) < 0) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot make the debug build's folder %s: %s", ddir,
                     strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/source.metal", ddir);
    int wr = mkb_write_file(path, k->source);
    snprintf(path, sizeof path, "%s/header.metal", ddir);
    if (wr == 0) wr = mkb_write_file(path, k->header ? k->header : "");
    snprintf(metal, sizeof metal, "%s/kernel.metal", ddir);
    if (wr == 0) wr = mkb_write_file(metal, generated);
    if (!(program = build_program(k, c, inputs, generated, kernel_name, ddir, entries))) goto done;
    snprintf(cpp, sizeof cpp, "%s/kernel.cpp", ddir);
    if (wr < 0 || mkb_write_file(cpp, program) < 0) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot write the debug build's files in %s: %s", ddir,
                     strerror(errno));
        goto done;
    }
    mkk_debug_text(3, "generated Metal source", generated);
    mkk_debug_text(3, "translated C++", program);
    snprintf(so, sizeof so, "%s/kernel.so", ddir);
    snprintf(tmp_so, sizeof tmp_so, "%s/kernel.so.tmp.%ld.%lu", ddir, (long)getpid(),
             (unsigned long)atomic_fetch_add(&mkb_tmp_seq, 1));
    uint64_t t0 = mkk_now_ns();
    compile_debug = 1;
    int rc = compile(mflags, NULL, BUILD_KERNEL, tmp_so, cpp, &diag);
    compile_debug = 0;
    pthread_mutex_lock(&jit.mu);
    jit.stats.compiles++;
    pthread_mutex_unlock(&jit.mu);
    if (rc != 0) {
        if (rc < 0 && !diag)
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot run the kernel compiler: %s", strerror(errno));
        else
            format_failure(k, c, kernel_name, diag);
        char msg[MK_ERRMSG_MAX];
        snprintf(msg, sizeof msg, "%s", mk_error_message());
        mk_error_set(MK_ERR_RUNTIME, "%s\nSources on disk: %s (generated Metal), %s (translated C++)", msg, metal, cpp);
        unlink(tmp_so);
        goto done;
    }
    defer_init(tmp_so);
    if (rename(tmp_so, so) != 0) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot write %s: %s", so, strerror(errno));
        unlink(tmp_so);
        goto done;
    }
    out->handle = load_entry(so, &out->fn, err, sizeof err);
    if (!out->handle && strstr(err, "undefined symbol")) {
        free(diag);
        diag = NULL;
        compile_debug = 1;
        rc = compile(mflags, NULL, BUILD_KERNEL_WITH_LIBSTDCXX, tmp_so, cpp, &diag);
        compile_debug = 0;
        if (rc == 0 && defer_init(tmp_so) >= 0 && rename(tmp_so, so) == 0)
            out->handle = load_entry(so, &out->fn, err, sizeof err);
        unlink(tmp_so);
    }
    if (!out->handle) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot load the compiled kernel `%s` (%s): %s", k->name, so, err);
        goto done;
    }
    out->so_path = strdup(so);
    if (mkk_is_cooperative((mkk_kernel *)k))
        out->cbs_declined = strdup("a debug build (MKPY_KERNEL_DEBUG): gdb follows the fibers' threads");
    out->fn.how = MKK_COMPILED;
    mkk_debug(1, "kernel `%s` (%s): debug build (-O0 -g) in %.3f s: %s (sources: %s/source.metal, %s, %s)", k->name,
              kernel_name, (double)(mkk_now_ns() - t0) / 1e9, so, ddir, metal, cpp);
    ret = 0;
done:
    free(diag);
    free(program);
    return ret;
}

/* Finds the kernel in the disk cache or compiles it. Runs without jit.mu:
 * other kernels launch and compile meanwhile. Returns 0, or -1 with the
 * error set. */
/* A disk cache entry that loads and matches its key: counted, logged and
 * its use time refreshed (the size-bounded cache evicts the oldest). */
static bool disk_hit(const mkk_kernel *k, const char *kernel_name, const char *generated, const char *program,
                     const char *dir, const char *hex, const char *so_path, const char *key_path, const char *full_key,
                     built *out) {
    if (!(out->handle = load_verified(so_path, key_path, full_key, &out->fn))) return false;
    mkb_touch(so_path);
    mkb_stats_update(dir, 0, 1, 0, false, NULL);
    pthread_mutex_lock(&jit.mu);
    jit.stats.disk_hits++;
    pthread_mutex_unlock(&jit.mu);
    out->fn.how = MKK_FOUND_ON_DISK;
    mkk_debug(1, "kernel `%s` (%s): disk cache hit, %s (sources beside it: %s/%s.metal, .cpp)", k->name, kernel_name,
              so_path, dir, hex);
    mkk_debug_text(3, "generated Metal source", generated);
    mkk_debug_text(3, "translated C++", program);
    return true;
}

/* Where a compile's time goes, stage by stage (MKPY_DEBUG=1 prints it). */
typedef struct {
    uint64_t last;
    char text[600];
    size_t n;
} stages;

static void stage_add(stages *st, const char *name, uint64_t ns) {
    if (st->n < sizeof st->text)
        st->n += (size_t)snprintf(st->text + st->n, sizeof st->text - st->n, "%s%s %.1f ms", st->n ? ", " : "", name,
                                  (double)ns / 1e6);
}

/* Adds the time since the last mark as `name` (none: not counted). */
static void stage_mark(stages *st, const char *name) {
    uint64_t now = mkk_now_ns();
    if (name) stage_add(st, name, now - st->last);
    st->last = now;
}

static int build(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                 const char *kernel_name, built *out) {
    int ret = -1;
    char *program = NULL, *full_key = NULL, *diag = NULL;
    char dir[4400], so_path[4500] = "", key_path[4500], lock_path[4500];
    int lock_fd = -1;
    const char *mflags = math_flags(k->math_mode);
    memset(out, 0, sizeof *out);
    if (mkk_debug_build()) return build_debug(k, c, inputs, generated, kernel_name, out);
    stages st = {.last = mkk_now_ns()};
    const int check = c->check; /* the checker mode: always through the pass, instrumented */
    const bool prints = k->prints;
    /* printing needs each message's thread, which the fiber engine knows */
    const int cooperative = !check && mkk_is_cooperative((mkk_kernel *)k) && cbs_pass() != NULL && !prints;
    /* a lockstep build runs only on the lockstep engine (MKPY_ENGINE=fibers
     * is part of the in-memory key: jit_cpu); when the pass declines the
     * kernel, its fibers build is generated then (below) */
    const int entries = check                                     ? ENTRY_PLAIN | ENTRY_THREAD | ENTRY_CBS
                        : cooperative                             ? ENTRY_CBS
                        : mkk_is_cooperative((mkk_kernel *)k) ? ENTRY_THREAD
                                                                  : ENTRY_PLAIN;
    if (!(program = build_program(k, c, inputs, generated, kernel_name, NULL, entries))) goto done;
    stage_mark(&st, "translate");

    pthread_mutex_lock(&jit.probe_mu);
    int have_cxx = find_compiler() == 0;
    char identity[5400], cxx[4096];
    if (have_cxx) full_identity(identity, sizeof identity);
    snprintf(cxx, sizeof cxx, "%s", jit.cxx);
    pthread_mutex_unlock(&jit.probe_mu);
    if (!have_cxx) {
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
    /* the disk key adds the compiler's identity, the flags and the headers,
     * and names the engine a cooperative kernel is built for */
    /* the other cooperative kernels (MKPY_ENGINE=fibers, printing ones) go
     * through the pass too, for the fiber engine's release order */
    const int fibers_pass = !check && !cooperative && mkk_is_cooperative((mkk_kernel *)k) && pass_program() != NULL;
    char pass_id[4600] = "";
    if (check) {
        pthread_once(&cbs_pass_once, cbs_pass_find);
        if (!cbs_pass_path[0]) {
            mk_error_set(MK_ERR_RUNTIME,
                         "[metal_kernel] Kernel `%s`: the checker mode (MKPY_CHECK) needs mkpy's compiler pass "
                         "mkpy/" MKK_CBS_PASS_PROGRAM ", which this build lacks (build mkpy with llvm-15-dev "
                         "installed). Kernel called at %s",
                         k->name, c->call_site ? c->call_site : "?");
            goto done;
        }
        file_identity(cbs_pass_path, pass_id, sizeof pass_id);
    }
    if (cooperative || fibers_pass) file_identity(pass_program(), pass_id, sizeof pass_id); /* the pass's build, too */
    size_t klen = strlen(mflags) + strlen(program) + strlen(identity) + sizeof pass_id + 64;
    char *pkey = malloc(klen);
    full_key = malloc(klen);
    if (!pkey || !full_key) {
        free(pkey);
        mk_nomem();
        goto done;
    }
    snprintf(pkey, klen, "%s%s%s\n%s", mflags,
             check ? " checker " : cooperative ? " " CBS_ENGINE_ID " " : fibers_pass ? " " FIBER_ENGINE_ID " " : "",
             pass_id, program);
    char hex[33];
    mkb_hash_hex(pkey, identity, hex);
    snprintf(full_key, klen, "%s\n%s", identity, pkey);
    free(pkey);

    if (mkb_cache_dir(dir, sizeof dir) < 0) goto done;
    for (int attempt = 0;; attempt++) {
        snprintf(so_path, sizeof so_path, "%s/%s.so", dir, hex);
        snprintf(key_path, sizeof key_path, "%s/%s.key", dir, hex);
        snprintf(lock_path, sizeof lock_path, "%s/%s.lock", dir, hex);
        /* a hit: no lock taken */
        if (disk_hit(k, kernel_name, generated, program, dir, hex, so_path, key_path, full_key, out)) {
            ret = 0;
            goto done;
        }
        /* a miss: one process compiles it (the others wait for the lock,
         * then find its entry) */
        lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (lock_fd >= 0 || attempt > 0) break;
        int err = errno;
        char why[256];
        if (err == ENOENT && mkb_private_dir_ok(dir, why, sizeof why) == 0) continue; /* removed under us: made again */
        if (mkb_cache_dir_failed(dir, err, dir, sizeof dir) < 0) break; /* cannot write it: the private folder */
    }
    if (lock_fd >= 0) {
        while (flock(lock_fd, LOCK_EX) < 0 && errno == EINTR) {
        }
        if (disk_hit(k, kernel_name, generated, program, dir, hex, so_path, key_path, full_key, out)) {
            ret = 0;
            goto done;
        }
    }

    char tmp_base[4500], cpp_path[4600], tmp_so[4600], tmp_key[4600];
    snprintf(tmp_base, sizeof tmp_base, "%s/%s.tmp.%ld.%lu", dir, hex, (long)getpid(),
             (unsigned long)atomic_fetch_add(&mkb_tmp_seq, 1));
    snprintf(cpp_path, sizeof cpp_path, "%s.cpp", tmp_base);
    snprintf(tmp_so, sizeof tmp_so, "%s.so", tmp_base);
    snprintf(tmp_key, sizeof tmp_key, "%s.key", tmp_base);
    if (mkb_write_file(cpp_path, program) < 0) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot write %s: %s", cpp_path, strerror(errno));
        unlink(cpp_path);
        goto done;
    }
    /* the generated Metal source beside the C++ (MKPY_DEBUG and errors name both) */
    char metal_path[4600], kept_metal[4500];
    snprintf(metal_path, sizeof metal_path, "%s.metal", tmp_base);
    snprintf(kept_metal, sizeof kept_metal, "%s/%s.metal", dir, hex);
    if (mkb_write_file(metal_path, generated) < 0) unlink(metal_path);
    mkk_debug_text(3, "generated Metal source", generated);
    mkk_debug_text(3, "translated C++", program);
    const uint64_t t_compile = mkk_now_ns();
    pthread_mutex_lock(&jit.probe_mu);
    ldcmd_start(); /* the linker's command, probed while this kernel compiles */
    pthread_mutex_unlock(&jit.probe_mu);
    char pch_buf[4600];
    const char *pch = pch_for(k->math_mode, mflags, dir, identity, pch_buf, sizeof pch_buf);
    stage_mark(&st, "cache look-up");
    /* a cooperative kernel goes through the region-splitting pass when it
     * can (cbs_object), else it is built for fibers as any other */
    char obj_path[4600] = "", declined[1200] = "";
    if (!check && prints && mkk_is_cooperative((mkk_kernel *)k) && cbs_pass())
        snprintf(declined, sizeof declined, "the kernel prints (os_log/printf): the fiber engine knows each message's "
                                            "thread");
    int rc = cooperative || check || fibers_pass
                 ? cbs_object(check ? 'K' : cooperative ? 'C' : 'F', mflags, &pch, tmp_base, cpp_path, obj_path,
                              sizeof obj_path, &diag, declined, sizeof declined)
                 : CBS_DECLINED;
    if (cooperative && rc == CBS_DECLINED && pass_program()) {
        /* the lockstep engine cannot take it: the fiber engine's build, from
         * C++ with the fibers' entry point (the lockstep one had none),
         * ordered by the pass; kept under the same key */
        const uint64_t front = cbs_front_ns, pass = cbs_pass_ns;
        char *fibers = build_program(k, c, inputs, generated, kernel_name, NULL, ENTRY_THREAD);
        if (!fibers || mkb_write_file(cpp_path, fibers) != 0) {
            if (fibers) mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot write %s: %s", cpp_path, strerror(errno));
            free(fibers);
            unlink(cpp_path);
            unlink(metal_path);
            goto done;
        }
        free(fibers);
        char fiber_declined[1200];
        rc = cbs_object('F', mflags, &pch, tmp_base, cpp_path, obj_path, sizeof obj_path, &diag, fiber_declined,
                        sizeof fiber_declined);
        cbs_front_ns += front;
        cbs_pass_ns += pass;
    }
    if (check && rc == CBS_DECLINED) { /* the checker cannot run it uninstrumented */
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Kernel `%s`: the checker mode could not instrument it (%s). "
                     "Kernel called at %s", k->name, declined, c->call_site ? c->call_site : "?");
        unlink(cpp_path);
        goto done;
    }
    if (cooperative || check || fibers_pass) {
        stage_add(&st, "clang front end", cbs_front_ns);
        if (cbs_pass_ns)
            stage_add(&st,
                      rc == CBS_DECLINED ? (fibers_pass ? "fiber pass (failed)" : "lockstep pass (declined)")
                      : cooperative && declined[0] ? "lockstep pass (declined), fiber pass, optimisation, code generation"
                      : fibers_pass                ? "fiber pass, optimisation, code generation"
                                                   : "lockstep pass, optimisation, code generation",
                      cbs_pass_ns);
    }
    stage_mark(&st, NULL);
    if (rc == CBS_DECLINED) {
        /* a plain kernel (or one the pass declined): an object, then the
         * link below */
        snprintf(obj_path, sizeof obj_path, "%s.o", tmp_base);
        rc = compile(mflags, pch, BUILD_OBJECT, obj_path, cpp_path, &diag);
        if (rc != 0 && pch && diag && strstr(diag, "precompiled header")) {
            /* a stale or unusable PCH: compile without it */
            free(diag);
            diag = NULL;
            pch = NULL;
            rc = compile(mflags, NULL, BUILD_OBJECT, obj_path, cpp_path, &diag);
        }
        stage_mark(&st, "clang (front end, optimisation, code generation)");
    }
    build_kind link = BUILD_LINK, link_cxx = BUILD_LINK_WITH_LIBSTDCXX;
    const char *link_in = obj_path;
    if (rc == 0) {
        rc = compile(mflags, NULL, link, tmp_so, link_in, &diag);
        stage_mark(&st, "link");
    }
    pthread_mutex_lock(&jit.mu);
    jit.stats.compiles++;
    pthread_mutex_unlock(&jit.mu);
    char err[1024] = "";
    if (rc == 0) {
        defer_init(tmp_so);
        out->handle = load_entry(tmp_so, &out->fn, err, sizeof err);
        if (!out->handle && strstr(err, "undefined symbol")) {
            /* the kernel's own code needs the C++ library (a static local
             * with a constructor, say): link it this time */
            free(diag);
            diag = NULL;
            rc = compile(mflags, NULL, link_cxx, tmp_so, link_in, &diag);
            if (rc == 0 && defer_init(tmp_so) >= 0) out->handle = load_entry(tmp_so, &out->fn, err, sizeof err);
        }
        stage_mark(&st, "load");
    }
    if (obj_path[0]) unlink(obj_path);
    if (rc != 0) {
        if (rc < 0 && !diag) {
            mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot run the kernel compiler %s: %s", cxx,
                         strerror(errno));
            unlink(cpp_path);
            unlink(metal_path);
        } else {
            format_failure(k, c, kernel_name, diag);
            /* keep the sources for the user to look at (removed with stale
             * temporary files, as an entry without an object) */
            char kept_cpp_f[4500];
            snprintf(kept_cpp_f, sizeof kept_cpp_f, "%s/%s.cpp", dir, hex);
            if (rename(cpp_path, kept_cpp_f) != 0) unlink(cpp_path);
            if (rename(metal_path, kept_metal) != 0) unlink(metal_path);
            char msg[MK_ERRMSG_MAX];
            snprintf(msg, sizeof msg, "%s", mk_error_message());
            mk_error_set(MK_ERR_RUNTIME, "%s\nSources on disk: %s (generated Metal), %s (translated C++)", msg,
                         kept_metal, kept_cpp_f);
        }
        unlink(tmp_so);
        goto done;
    }
    if (!out->handle) {
        unlink(cpp_path);
        unlink(metal_path);
        unlink(tmp_so);
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] Cannot load the compiled kernel `%s`: %s", k->name, err);
        goto done;
    }
    if (declined[0]) out->cbs_declined = strdup(declined);
    /* publish, under the entry's lock: the object, its key (with the
     * object's hash) and the C++ beside them, each renamed into place; the
     * loaded object stays mapped whatever its name becomes */
    char kept_cpp[4500];
    snprintf(kept_cpp, sizeof kept_cpp, "%s/%s.cpp", dir, hex);
    if (mkb_write_key(tmp_so, tmp_key, key_path, full_key) == 0 && rename(tmp_so, so_path) == 0) {
        if (rename(cpp_path, kept_cpp) != 0) unlink(cpp_path);
        if (rename(metal_path, kept_metal) != 0) unlink(metal_path);
        mkb_stats_update(dir, mkb_file_size(so_path) + mkb_file_size(key_path) + mkb_file_size(kept_cpp) + mkb_file_size(kept_metal), 0,
                     1, false, NULL);
        out->so_path = strdup(so_path);
    } else {
        unlink(key_path);
        unlink(tmp_so);
        unlink(cpp_path);
        unlink(metal_path);
    }
    out->fn.how = MKK_COMPILED;
    mkk_debug(1, "kernel `%s` (%s): compile stages: %s", k->name, kernel_name, st.text);
    mkk_debug(1, "kernel `%s` (%s): compiled in %.3f s for the %s engine: %s (sources beside it: %s, %s)", k->name,
              kernel_name, (double)(mkk_now_ns() - t_compile) / 1e9,
              !mkk_is_cooperative((mkk_kernel *)k) ? "plain" : out->fn.cbs_run ? "lockstep" : "fibers", so_path,
              kept_metal, kept_cpp);
    ret = 0;
done:
    if (lock_fd >= 0) {
        /* the entry is published (or the compile failed): whoever waits on
         * this lock, or makes a new one, looks at the disk again first */
        unlink(lock_path);
        close(lock_fd); /* releases the flock */
    }
    if (ret < 0 && out->handle) {
        dlclose(out->handle);
        out->handle = NULL;
    }
    if (ret == 0 && !out->so_path) out->so_path = strdup(so_path);
    free(diag);
    free(full_key);
    free(program);
    return ret;
}

static void lru_unlink(entry *e) {
    if (e->lru_prev)
        e->lru_prev->lru_next = e->lru_next;
    else
        jit.lru_head = e->lru_next;
    if (e->lru_next)
        e->lru_next->lru_prev = e->lru_prev;
    else
        jit.lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_push_front(entry *e) {
    e->lru_prev = NULL;
    e->lru_next = jit.lru_head;
    if (jit.lru_head) jit.lru_head->lru_prev = e;
    jit.lru_head = e;
    if (!jit.lru_tail) jit.lru_tail = e;
}

/* Unloads least recently used kernels that no launch holds while more than
 * MKPY_MAX_LOADED_KERNELS are loaded. Call with jit.mu held; the handles to
 * dlclose (after unlocking) go to victims[MAX_VICTIMS]. */
#define MAX_VICTIMS 16
static int64_t max_loaded(void) {
    static int64_t max; /* read once: the launch path must stay cheap */
    if (!max) max = mkb_env_int("MKPY_MAX_LOADED_KERNELS", DEFAULT_MAX_LOADED);
    return max;
}

static int pick_victims(void **victims) {
    int n = 0;
    int64_t max = max_loaded();
    if (jit.nloaded <= max) return 0;
    for (entry *e = jit.lru_tail; e && jit.nloaded > max && n < MAX_VICTIMS;) {
        entry *prev = e->lru_prev;
        if (e->uses == 0 && !e->busy && e->handle) {
            lru_unlink(e);
            victims[n++] = e->handle;
            e->handle = NULL;
            memset(&e->fn, 0, sizeof e->fn);
            jit.nloaded--;
        }
        e = prev;
    }
    return n;
}

static void close_victims(void **victims, int n) {
    for (int i = 0; i < n; i++) dlclose(victims[i]);
}

static void entry_free(entry *e) {
    free(e->key);
    free(e->so_path);
    free(e->cbs_declined);
    free(e);
}

/* The slot of the entry whose key is prefix (plen bytes) then generated. */
static entry **find_slot(uint64_t hash, const char *prefix, size_t plen, const char *generated) {
    entry **p = &jit.buckets[hash % NBUCKETS];
    while (*p && ((*p)->hash != hash || memcmp((*p)->key, prefix, plen) != 0 || strcmp((*p)->key + plen, generated) != 0))
        p = &(*p)->next;
    return p;
}

static mkk_compiled jit_cpu(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                            const char *kernel_name) {
    mkk_compiled fn = {0};
    const char *mflags = math_flags(k->math_mode);
    /* In memory the generated Metal source is the key: it fixes the program
     * (kernel name, header, source, argument types, template values,
     * attributes), so a hit skips the translation. Its hash comes with the
     * call (dispatch.c computes it once per call signature). */
    char prefix[600];
    size_t plen = strlen(mflags);
    memcpy(prefix, mflags, plen); /* math_flags: short */
    /* the program also depends on whether threadgroups are large and on
     * which of their dimensions are flat (see mkpy_cbs_loop_steps and
     * mkpy_cbs_flat in build_program) */
    prefix[plen++] = (char)('A' + (c->threadgroup[0] * c->threadgroup[1] * c->threadgroup[2] >= 64) +
                            2 * (c->threadgroup[1] == 1) + 4 * (c->threadgroup[2] == 1) + 8 * c->check +
                            16 * mkk_debug_build());
    /* a cooperative kernel's build is for one engine (build's entries) */
    if (mkk_is_cooperative((mkk_kernel *)k)) prefix[plen++] = !cbs_pass() ? 'F' : cbs_force_compact() ? 'C' : 'L';
    prefix[plen++] = '\n';
    const uint64_t hash = (c->gen_hash ^ mkk_hash64(prefix, plen)) * 0x9e3779b97f4a7c15ULL;
    void *victims[MAX_VICTIMS];
    int nvictims = 0;
    char touch_path[4600];
    touch_path[0] = 0; /* (not `= ""`: that clears 4.6 KB on every cached call) */

    pthread_mutex_lock(&jit.mu);
    entry *e;
    for (;;) {
        e = *find_slot(hash, prefix, plen, generated);
        if (!e || !e->busy) break;
        pthread_cond_wait(&jit.cv, &jit.mu); /* another thread compiles or loads it */
    }
    if (e && e->handle) {
        /* the hot path: a loaded kernel */
        e->uses++;
        if (e != jit.lru_head) {
            lru_unlink(e);
            lru_push_front(e);
        }
        jit.stats.memory_hits++;
        fn = e->fn;
        fn.ref = e;
        fn.so_path = e->so_path;
        fn.how = MKK_FOUND_IN_MEMORY;
        if (e->so_path) {
            time_t now = time(NULL);
            if (now - e->touched >= TOUCH_EVERY_S) {
                e->touched = now;
                snprintf(touch_path, sizeof touch_path, "%s", e->so_path);
            }
        }
        pthread_mutex_unlock(&jit.mu);
        if (touch_path[0]) mkb_touch(touch_path);
        mkk_debug(1, "kernel `%s` (%s): in-memory cache hit", k->name, kernel_name);
        return fn;
    }
    if (!e) {
        const size_t glen = strlen(generated);
        if (!(e = calloc(1, sizeof *e)) || !(e->key = malloc(plen + glen + 1))) {
            free(e);
            pthread_mutex_unlock(&jit.mu);
            mk_nomem();
            return fn;
        }
        memcpy(e->key, prefix, plen);
        memcpy(e->key + plen, generated, glen + 1);
        e->hash = hash;
        e->next = jit.buckets[hash % NBUCKETS];
        jit.buckets[hash % NBUCKETS] = e;
        jit.stats.entries++;
    }
    e->busy = true; /* unloaded, or new: this thread loads or builds it */
    pthread_mutex_unlock(&jit.mu);

    built b;
    int rc = build(k, c, inputs, generated, kernel_name, &b);

    pthread_mutex_lock(&jit.mu);
    e->busy = false;
    if (rc == 0) {
        e->handle = b.handle;
        e->fn = b.fn;
        free(e->so_path);
        e->so_path = b.so_path;
        e->touched = time(NULL);
        if (b.cbs_declined) {
            free(e->cbs_declined);
            e->cbs_declined = b.cbs_declined;
        }
        e->fn.cbs_declined = e->cbs_declined;
        e->fn.so_path = e->so_path;
        e->uses++;
        jit.nloaded++;
        lru_push_front(e);
        fn = e->fn;
        fn.ref = e;
        nvictims = pick_victims(victims);
    } else if (!e->detached) {
        /* forget it: the next call tries again (and reports the error) */
        entry **p = &jit.buckets[e->hash % NBUCKETS];
        while (*p && *p != e) p = &(*p)->next;
        if (*p) *p = e->next;
        jit.stats.entries--;
        entry_free(e);
    } else {
        entry_free(e);
    }
    pthread_cond_broadcast(&jit.cv);
    pthread_mutex_unlock(&jit.mu);
    close_victims(victims, nvictims);
    return fn;
}

mkk_compiled mkk_jit(const mkk_kernel *k, const mkk_call *c, mk_array *const *inputs, const char *generated,
                     const char *kernel_name) {
    mkk_compiled fn = jit_cpu(k, c, inputs, generated, kernel_name);
    /* MKPY_CUDA_COMPILE_CHECK / mx.cuda.compile_check: NVRTC compiles it too */
    if (mkk_compiled_ok(&fn) && mkb_cuda_compile_check(k, c, inputs, generated, kernel_name) < 0) {
        mkk_jit_release(&fn);
        memset(&fn, 0, sizeof fn);
    }
    return fn;
}

int mkb_cpu_kernel_compile(mkk_kernel *k, mkk_call *c, mk_array *const *inputs, const char *generated,
                           const char *kernel_name) {
    mkk_compiled fn = jit_cpu(k, c, inputs, generated, kernel_name);
    if (!mkk_compiled_ok(&fn)) return -1;
    mkk_jit_release(&fn);
    return 0;
}

void mkk_jit_release(mkk_compiled *fn) {
    entry *e = fn->ref;
    if (!e) return;
    fn->ref = NULL;
    void *victims[MAX_VICTIMS];
    int nvictims = 0;
    pthread_mutex_lock(&jit.mu);
    if (--e->uses == 0) {
        if (e->detached) {
            if (e->handle) victims[nvictims++] = e->handle;
            entry_free(e);
        } else {
            nvictims = pick_victims(victims);
        }
    }
    pthread_mutex_unlock(&jit.mu);
    close_victims(victims, nvictims);
}

void mkk_cache_info(mkk_cache_stats *s) {
    pthread_mutex_lock(&jit.mu);
    *s = jit.stats;
    s->loaded = jit.nloaded;
    pthread_mutex_unlock(&jit.mu);
}

/* Forgets the kernels held in memory: unused ones are unloaded now, those
 * that a launch is running when it ends; one being built stays. */
void mkk_cache_clear_memory(void) {
    void **victims = NULL;
    size_t nv = 0, capv = 0;
    pthread_mutex_lock(&jit.mu);
    for (int i = 0; i < NBUCKETS; i++) {
        entry **p = &jit.buckets[i];
        while (*p) {
            entry *e = *p;
            if (e->busy) {
                p = &e->next;
                continue;
            }
            *p = e->next;
            jit.stats.entries--;
            if (e->handle) {
                lru_unlink(e);
                jit.nloaded--;
            }
            if (e->uses > 0) {
                e->detached = true; /* mkk_jit_release closes and frees it */
                continue;
            }
            if (e->handle) {
                if (nv == capv) {
                    void **w = realloc(victims, (capv = capv ? capv * 2 : 64) * sizeof *w);
                    if (!w) { /* keep it loaded rather than fail */
                        entry_free(e);
                        continue;
                    }
                    victims = w;
                }
                victims[nv++] = e->handle;
            }
            entry_free(e);
        }
    }
    pthread_mutex_unlock(&jit.mu);
    for (size_t i = 0; i < nv; i++) dlclose(victims[i]);
    free(victims);
}

int mkk_disk_cache(bool clear, mkk_disk_info *info) {
    memset(info, 0, sizeof *info);
    if (mkb_cache_dir(info->dir, sizeof info->dir) < 0) return -1;
    if (clear) {
        DIR *d = opendir(info->dir);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            char hex[33], p[4700];
            if (!mkb_entry_file(de->d_name, hex) && strcmp(de->d_name, "stats") != 0 &&
                strncmp(de->d_name, "pch-", 4) != 0)
                continue; /* only mkpy's own files; temporary ones of compiles under way stay (scans remove
                             them when stale) */
            if (strstr(de->d_name, ".tmp.")) continue;
            snprintf(p, sizeof p, "%s/%s", info->dir, de->d_name);
            unlink(p);
        }
        if (d) closedir(d);
    }
    int64_t count = 0;
    int64_t bytes = mkb_scan_dir(info->dir, -1, &count);
    if (bytes < 0) {
        mk_error_set(MK_ERR_RUNTIME, "Cannot read the kernel cache folder %s: %s", info->dir, strerror(errno));
        return -1;
    }
    mkb_disk_stats ds = {0, 0, 0};
    mkb_stats_update(info->dir, 0, 0, 0, true, &ds);
    info->bytes = bytes;
    info->entries = count;
    info->hits = ds.hits;
    info->misses = ds.misses;
    info->max_bytes = mkb_env_int("MKPY_CACHE_MAX_BYTES", MKB_CACHE_MAX_BYTES_DEFAULT);
    return 0;
}

/* For the environment check (envcheck.c): the compiler, its version, the
 * precompiled headers `make build` made and the lockstep engine's pass. */
void mkk_jit_probe(mkk_probe_info *p) {
    memset(p, 0, sizeof *p);
    char identity[5400] = "";
    pthread_mutex_lock(&jit.probe_mu);
    p->cxx_ok = find_compiler() == 0;
    snprintf(p->cxx, sizeof p->cxx, "%s", jit.cxx);
    if (p->cxx_ok) full_identity(identity, sizeof identity);
    snprintf(p->runtime_dir, sizeof p->runtime_dir, "%s", jit.runtime_dir);
    pthread_mutex_unlock(&jit.probe_mu);
    if (p->cxx_ok) {
        char *argv[] = {p->cxx, "--version", NULL}, *out = NULL;
        if (run_capture(argv, &out) == 0 && out) {
            out[strcspn(out, "\n")] = 0;
            snprintf(p->cxx_version, sizeof p->cxx_version, "%s", out);
        }
        free(out);
        for (int m = 0; m < 3; m++) {
            char name[64];
            pch_name(math_flags((mkk_math_mode)m), identity, name, sizeof name);
            snprintf(p->pch[m], sizeof p->pch[m], "%s/pch/%s", p->runtime_dir, name);
            p->pch_ok[m] = access(p->pch[m], R_OK) == 0;
        }
    }
    const char *pass = cbs_pass();
    snprintf(p->cbs_pass, sizeof p->cbs_pass, "%s", pass ? pass : "");
}
