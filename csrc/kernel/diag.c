/* Debugging aids of the kernel layer: printing from kernels, MKPY_DEBUG,
 * debug builds and the profiler (see diag.h and docs/debugging.md). */
#include "diag.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/array.h"
#include "core/dtype.h"

uint64_t mkk_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} dbuf;

static void db_put(dbuf *b, const char *t, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->len, t, n);
    b->len += n;
    b->s[b->len] = 0;
}
static void db_puts(dbuf *b, const char *t) { db_put(b, t, strlen(t)); }
static void db_printf(dbuf *b, const char *fmt, ...) MK_PRINTF(2, 3);
static void db_printf(dbuf *b, const char *fmt, ...) {
    char tmp[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) db_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* ---------------------------------------------------------- printing */

static int ident_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

static bool has_word(const char *text, const char *word) {
    size_t n = strlen(word);
    for (const char *p = text ? strstr(text, word) : NULL; p; p = strstr(p + 1, word))
        if ((p == text || !ident_char(p[-1])) && !ident_char(p[n])) return true;
    return false;
}

bool mkk_source_prints(const char *source, const char *header) {
    static const char *const words[] = {"os_log", "os_log_default", "printf"};
    for (int i = 0; i < 3; i++)
        if (has_word(source, words[i]) || has_word(header, words[i])) return true;
    return false;
}

typedef struct {
    uint64_t group, seq;
    uint32_t thread;
    char *text;
} message;

typedef struct sink {
    const void *launch;
    message *heap; /* a max-heap by (group, thread, seq): the smallest `limit` kept */
    size_t n, limit;
    uint64_t total, seq;
    struct sink *next;
} sink;

static pthread_mutex_t print_mu = PTHREAD_MUTEX_INITIALIZER;
static sink *sinks;

static int msg_cmp(const message *a, const message *b) {
    if (a->group != b->group) return a->group < b->group ? -1 : 1;
    if (a->thread != b->thread) return a->thread < b->thread ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static void sift_down(message *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && msg_cmp(&h[l], &h[m]) > 0) m = l;
        if (r < n && msg_cmp(&h[r], &h[m]) > 0) m = r;
        if (m == i) return;
        message t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void sift_up(message *h, size_t i) {
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (msg_cmp(&h[i], &h[p]) <= 0) return;
        message t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

static size_t print_limit(void) {
    const char *e = getenv("MKPY_KERNEL_PRINT_LIMIT");
    long v = e && *e ? strtol(e, NULL, 10) : 1000;
    return v < 0 ? 0 : (size_t)v;
}

void *mkk_print_begin(const void *launch) {
    sink *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->launch = launch;
    s->limit = print_limit();
    pthread_mutex_lock(&print_mu);
    s->next = sinks;
    sinks = s;
    pthread_mutex_unlock(&print_mu);
    return s;
}

void mkk_print_record(const char *text, size_t len, const void *launch, uint64_t group, uint32_t thread) {
    pthread_mutex_lock(&print_mu);
    sink *s = sinks;
    while (s && s->launch != launch) s = s->next;
    if (!s) goto out; /* not a launch of ours (cannot happen) */
    /* the thread's calls arrive in its program order, so a launch-wide
     * counter orders one thread's messages */
    message m = {group, s->seq++, thread, NULL};
    s->total++;
    if (s->n == s->limit) {
        if (!s->limit || msg_cmp(&m, &s->heap[0]) >= 0) goto out;
        /* a message earlier in the order than the latest kept: it replaces it */
        char *t = malloc(len + 1);
        if (!t) goto out;
        memcpy(t, text, len);
        t[len] = 0;
        free(s->heap[0].text);
        m.text = t;
        s->heap[0] = m;
        sift_down(s->heap, s->n, 0);
        goto out;
    }
    if (s->n % 64 == 0) {
        message *h = realloc(s->heap, (s->n + 64) * sizeof *h);
        if (!h) goto out;
        s->heap = h;
    }
    if (!(m.text = malloc(len + 1))) goto out;
    memcpy(m.text, text, len);
    m.text[len] = 0;
    s->heap[s->n] = m;
    sift_up(s->heap, s->n++);
out:
    pthread_mutex_unlock(&print_mu);
}

static int msg_qcmp(const void *a, const void *b) { return msg_cmp(a, b); }

void mkk_print_end(void *handle, const char *kernel_name) {
    sink *s = handle;
    if (!s) return;
    pthread_mutex_lock(&print_mu);
    for (sink **p = &sinks; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    pthread_mutex_unlock(&print_mu);
    qsort(s->heap, s->n, sizeof *s->heap, msg_qcmp);
    dbuf b = {0};
    for (size_t i = 0; i < s->n; i++) {
        size_t l = strlen(s->heap[i].text);
        db_put(&b, s->heap[i].text, l);
        if (!l || s->heap[i].text[l - 1] != '\n') db_put(&b, "\n", 1);
        free(s->heap[i].text);
    }
    if (s->total > s->n)
        db_printf(&b,
                  "[mkpy] kernel `%s` printed %llu messages; the first %zu (by threadgroup, then thread) are shown, "
                  "%llu more are not (MKPY_KERNEL_PRINT_LIMIT=%zu; set it higher to see more).\n",
                  kernel_name, (unsigned long long)s->total, s->n, (unsigned long long)(s->total - s->n), s->limit);
    if (b.s && !b.oom) mkk_report_raw(b.s);
    free(b.s);
    free(s->heap);
    free(s);
}

/* ------------------------------------------------------- MKPY_DEBUG */

static atomic_int debug_level = -1;

int mkk_debug_level(void) {
    int l = atomic_load_explicit(&debug_level, memory_order_relaxed);
    if (l < 0) {
        const char *e = getenv("MKPY_DEBUG");
        l = e && *e ? atoi(e) : 0;
        if (l < 0) l = 0;
        if (l > 3) l = 3;
        atomic_store(&debug_level, l);
    }
    return l;
}

void mkk_set_debug_level(int level) { atomic_store(&debug_level, level < 0 ? -1 : level > 3 ? 3 : level); }

void mkk_debug(int level, const char *fmt, ...) {
    if (mkk_debug_level() < level) return;
    char text[4096];
    int n = snprintf(text, sizeof text, "[mkpy debug %d] ", level);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text + n, sizeof text - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t l = strlen(text);
    if (l && text[l - 1] != '\n') {
        text[l++] = '\n';
        text[l] = 0;
    }
    fputs(text, stderr);
    fflush(stderr);
}

void mkk_debug_text(int level, const char *title, const char *text) {
    if (mkk_debug_level() < level) return;
    dbuf b = {0};
    db_printf(&b, "[mkpy debug %d] %s:\n", level, title);
    db_puts(&b, text ? text : "");
    if (b.len && b.s[b.len - 1] != '\n') db_puts(&b, "\n");
    db_printf(&b, "[mkpy debug %d] (end of %s)\n", level, title);
    if (b.s) {
        fputs(b.s, stderr);
        fflush(stderr);
    }
    free(b.s);
}

/* ------------------------------------------------------ debug builds */

static atomic_int debug_build_forced = -1, debug_build_env = -1;

bool mkk_debug_build(void) {
    int f = atomic_load_explicit(&debug_build_forced, memory_order_relaxed);
    if (f >= 0) return f;
    int e = atomic_load_explicit(&debug_build_env, memory_order_relaxed);
    if (e < 0) {
        const char *v = getenv("MKPY_KERNEL_DEBUG");
        e = v && *v && strcmp(v, "0") != 0;
        atomic_store(&debug_build_env, e);
    }
    return e;
}

void mkk_set_debug_build(int on) { atomic_store(&debug_build_forced, on < 0 ? -1 : on != 0); }

/* --------------------------------------------------------- profiler */

typedef struct {
    int kernel; /* 0: an op */
    char *name, *detail;
    uint64_t begin, end;
    long tid;
    mkk_profile_kernel k; /* kernels: name/engine/cache point into the strings below */
    char engine[16], cache[16];
} event;

static struct {
    pthread_mutex_t mu;
    atomic_bool on;
    char *path;
    event *ev;
    size_t n, cap;
    uint64_t origin, stopped;
} prof = {.mu = PTHREAD_MUTEX_INITIALIZER};

bool mkk_profiling(void) { return atomic_load_explicit(&prof.on, memory_order_relaxed); }

static long tid_now(void) { return (long)syscall(SYS_gettid); }

static event *new_event(void) {
    if (prof.n == prof.cap) {
        size_t cap = prof.cap ? 2 * prof.cap : 256;
        event *e = realloc(prof.ev, cap * sizeof *e);
        if (!e) return NULL;
        prof.ev = e;
        prof.cap = cap;
    }
    event *e = &prof.ev[prof.n++];
    memset(e, 0, sizeof *e);
    return e;
}

static void op_hook(const char *op, uint64_t begin, uint64_t end, const mk_array *out0) {
    if (!mkk_profiling() || strcmp(op, "metal_kernel") == 0) return; /* kernels have their own record */
    char detail[256] = "";
    if (out0) {
        int n = snprintf(detail, sizeof detail, "%s[", mk_dtypes[out0->dtype].name);
        for (int d = 0; d < out0->ndim && n < (int)sizeof detail - 24; d++)
            n += snprintf(detail + n, sizeof detail - (size_t)n, "%s%lld", d ? "," : "", (long long)out0->shape[d]);
        snprintf(detail + n, sizeof detail - (size_t)n, "]");
    }
    long tid = tid_now();
    pthread_mutex_lock(&prof.mu);
    event *e = mkk_profiling() ? new_event() : NULL;
    if (e) {
        e->name = strdup(op);
        e->detail = strdup(detail);
        e->begin = begin;
        e->end = end;
        e->tid = tid;
    }
    pthread_mutex_unlock(&prof.mu);
}


static void clear_events(void) {
    for (size_t i = 0; i < prof.n; i++) {
        free(prof.ev[i].name);
        free(prof.ev[i].detail);
    }
    prof.n = 0;
}

int mkk_profile_start(const char *path) {
    pthread_mutex_lock(&prof.mu);
    if (atomic_load(&prof.on)) {
        pthread_mutex_unlock(&prof.mu);
        mk_error_set(MK_ERR_RUNTIME, "[metal::start_capture] A capture is already running (to %s): call "
                                     "mx.metal.stop_capture() first.", prof.path ? prof.path : "?");
        return -1;
    }
    char *p = strdup(path);
    if (!p) {
        pthread_mutex_unlock(&prof.mu);
        mk_nomem();
        return -1;
    }
    /* the file must be writable: find out now rather than at stop */
    FILE *f = fopen(path, "w");
    if (!f) {
        pthread_mutex_unlock(&prof.mu);
        mk_error_set(MK_ERR_RUNTIME, "[metal::start_capture] Cannot write the trace file %s.", path);
        free(p);
        return -1;
    }
    fclose(f);
    clear_events();
    free(prof.path);
    prof.path = p;
    prof.origin = mkk_now_ns();
    prof.stopped = 0;
    atomic_store(&prof.on, true);
    mk_op_trace = op_hook;
    pthread_mutex_unlock(&prof.mu);
    return 0;
}

void mkk_profile_record_kernel(const mkk_profile_kernel *r) {
    long tid = tid_now();
    pthread_mutex_lock(&prof.mu);
    event *e = mkk_profiling() ? new_event() : NULL;
    if (e) {
        e->kernel = 1;
        e->name = strdup(r->name);
        e->k = *r;
        snprintf(e->engine, sizeof e->engine, "%s", r->engine ? r->engine : "?");
        snprintf(e->cache, sizeof e->cache, "%s", r->cache ? r->cache : "?");
        e->begin = r->compile_begin;
        e->end = r->run_end;
        e->tid = tid;
    }
    pthread_mutex_unlock(&prof.mu);
}

static void json_str(dbuf *b, const char *s) {
    db_put(b, "\"", 1);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char t[2] = {'\\', (char)c};
            db_put(b, t, 2);
        } else if (c < 0x20) {
            db_printf(b, "\\u%04x", c);
        } else {
            db_put(b, (const char *)s, 1);
        }
    }
    db_put(b, "\"", 1);
}

static double us(uint64_t t) { return (double)(t - prof.origin) / 1e3; }

static void json_slice(dbuf *b, const char *name, const char *cat, uint64_t begin, uint64_t end, long tid) {
    db_puts(b, ",\n{\"name\":");
    json_str(b, name);
    db_printf(b, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%ld,\"tid\":%ld", cat, us(begin),
              (double)(end - begin) / 1e3, (long)getpid(), tid);
}

int mkk_profile_stop(void) {
    pthread_mutex_lock(&prof.mu);
    if (!atomic_load(&prof.on)) {
        pthread_mutex_unlock(&prof.mu);
        mk_error_set(MK_ERR_RUNTIME, "[metal::stop_capture] No capture is running (call mx.metal.start_capture(path) "
                                     "first).");
        return -1;
    }
    atomic_store(&prof.on, false);
    mk_op_trace = NULL;
    prof.stopped = mkk_now_ns();
    dbuf b = {0};
    db_printf(&b, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"mkpy\"},\"traceEvents\":[\n"
                  "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%ld,\"tid\":0,\"args\":{\"name\":\"mkpy\"}}",
              (long)getpid());
    for (size_t i = 0; i < prof.n; i++) {
        const event *e = &prof.ev[i];
        if (!e->kernel) {
            json_slice(&b, e->name, "op", e->begin, e->end, e->tid);
            db_puts(&b, ",\"args\":{\"output\":");
            json_str(&b, e->detail);
            db_puts(&b, "}}");
            continue;
        }
        const mkk_profile_kernel *k = &e->k;
        json_slice(&b, e->name, "kernel", k->compile_begin, k->run_end, e->tid);
        db_printf(&b,
                  ",\"args\":{\"grid\":[%lld,%lld,%lld],\"threadgroup\":[%lld,%lld,%lld],\"threads\":%llu,"
                  "\"threadgroups\":%llu,\"barriers\":%d,\"engine\":\"%s\",\"cache\":\"%s\",\"compile_ms\":%.3f,"
                  "\"run_ms\":%.3f}}",
                  (long long)k->grid[0], (long long)k->grid[1], (long long)k->grid[2], (long long)k->threadgroup[0],
                  (long long)k->threadgroup[1], (long long)k->threadgroup[2], (unsigned long long)k->threads,
                  (unsigned long long)k->groups, k->barriers, e->engine, e->cache,
                  (double)(k->compile_end - k->compile_begin) / 1e6, (double)(k->run_end - k->run_begin) / 1e6);
        json_slice(&b, strcmp(e->cache, "compiled") == 0 ? "compile" : "cache lookup", "compile", k->compile_begin,
                   k->compile_end, e->tid);
        db_puts(&b, "}");
        json_slice(&b, "run", "run", k->run_begin, k->run_end, e->tid);
        db_puts(&b, "}");
    }
    db_puts(&b, "\n]}\n");
    int rc = -1;
    FILE *f = b.oom ? NULL : fopen(prof.path, "w");
    if (f) {
        rc = fwrite(b.s, 1, b.len, f) == b.len ? 0 : -1;
        if (fclose(f) != 0) rc = -1;
    }
    if (rc < 0) mk_error_set(MK_ERR_RUNTIME, "[metal::stop_capture] Cannot write the trace file %s.", prof.path);
    free(b.s);
    pthread_mutex_unlock(&prof.mu);
    return rc;
}

typedef struct {
    const event *first;
    int calls;
    uint64_t total, compile, run;
} row;

static int row_cmp(const void *a, const void *b) {
    const row *x = a, *y = b;
    if (x->first->kernel != y->first->kernel) return y->first->kernel - x->first->kernel;
    return x->total < y->total ? 1 : x->total > y->total ? -1 : 0;
}

static bool same_row(const event *a, const event *b) {
    if (a->kernel != b->kernel || strcmp(a->name, b->name) != 0) return false;
    if (!a->kernel) return true;
    return memcmp(a->k.grid, b->k.grid, sizeof a->k.grid) == 0 &&
           memcmp(a->k.threadgroup, b->k.threadgroup, sizeof a->k.threadgroup) == 0;
}

char *mkk_profile_report(void) {
    pthread_mutex_lock(&prof.mu);
    row *rows = calloc(prof.n ? prof.n : 1, sizeof *rows);
    size_t nrows = 0;
    uint64_t kernels = 0, ops = 0;
    for (size_t i = 0; rows && i < prof.n; i++) {
        const event *e = &prof.ev[i];
        size_t r = 0;
        while (r < nrows && !same_row(rows[r].first, e)) r++;
        if (r == nrows) rows[nrows++].first = e;
        rows[r].calls++;
        rows[r].total += e->end - e->begin;
        if (e->kernel) {
            rows[r].compile += e->k.compile_end - e->k.compile_begin;
            rows[r].run += e->k.run_end - e->k.run_begin;
            kernels++;
        } else {
            rows[r].run += e->end - e->begin;
            ops++;
        }
    }
    if (rows) qsort(rows, nrows, sizeof *rows, row_cmp);
    dbuf b = {0};
    uint64_t span = (prof.stopped ? prof.stopped : mkk_now_ns()) - prof.origin;
    db_printf(&b, "mkpy capture%s%s: %llu kernel launches, %llu ops in %.3f ms\n", prof.path ? " " : "",
              prof.path ? prof.path : "", (unsigned long long)kernels, (unsigned long long)ops, (double)span / 1e6);
    db_printf(&b, "%-6s %-24s %5s %10s %10s %10s %-16s %-14s %10s %8s %-8s\n", "kind", "name", "calls", "total ms",
              "compile ms", "run ms", "grid", "threadgroup", "threads", "barriers", "engine");
    for (size_t r = 0; r < nrows; r++) {
        const event *e = rows[r].first;
        char grid[48] = "", tg[48] = "", threads[24] = "", barriers[16] = "", compile[24] = "";
        if (e->kernel) {
            snprintf(grid, sizeof grid, "%lldx%lldx%lld", (long long)e->k.grid[0], (long long)e->k.grid[1],
                     (long long)e->k.grid[2]);
            snprintf(tg, sizeof tg, "%lldx%lldx%lld", (long long)e->k.threadgroup[0], (long long)e->k.threadgroup[1],
                     (long long)e->k.threadgroup[2]);
            snprintf(threads, sizeof threads, "%llu", (unsigned long long)e->k.threads);
            snprintf(barriers, sizeof barriers, "%d", e->k.barriers);
            snprintf(compile, sizeof compile, "%.3f", (double)rows[r].compile / 1e6);
        } else {
            snprintf(grid, sizeof grid, "%s", e->detail ? e->detail : "");
        }
        db_printf(&b, "%-6s %-24.24s %5d %10.3f %10s %10.3f %-16.16s %-14.14s %10s %8s %-8s\n",
                  e->kernel ? "kernel" : "op", e->name, rows[r].calls, (double)rows[r].total / 1e6, compile,
                  (double)rows[r].run / 1e6, grid, tg, threads, barriers, e->kernel ? e->engine : "");
    }
    free(rows);
    pthread_mutex_unlock(&prof.mu);
    if (b.oom) {
        free(b.s);
        return mk_nomem();
    }
    return b.s;
}
