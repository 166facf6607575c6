/* The on-disk cache of compiled kernels, shared by the back-ends: the CPU's
 * objects (backend/cpu/jit.c) and the CUDA back-end's CUBINs
 * (backend/cuda/nvrtc.c) live in one private folder, under one size cap,
 * evicted least recently used first, each entry's object checked against the
 * hash in its key file before it is used. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/diskcache.h"
#include "core/error.h"

/* 64-bit FNV-1a of n bytes, continuing from h (start with FNV_BASIS): the
 * hash of an entry's object file recorded in its key (see load_verified). */
_Atomic unsigned long mkb_tmp_seq; /* unique temporary names within the process */

#define FNV_BASIS 0xcbf29ce484222325ULL
static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* 128-bit hash as two independent 64-bit FNV-1a variants, hex encoded. */
void mkb_hash_hex(const char *a, const char *b, char out[33]) {
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


char *mkb_read_file(const char *path) {
    FILE *f = fopen(path, "rbe");
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

int mkb_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wbe");
    if (!f) return -1;
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* ------------------------------------------------- the cache folder */

/* Creates path and each missing level with mode 0700 (existing levels are
 * left alone). The package's own folders (the PCH beside the headers) use
 * mkb_mkdirs_mode(path, 0755). */
int mkb_mkdirs_mode(const char *path, mode_t mode) {
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(tmp, mode);
            *p = '/';
        }
    return mkdir(tmp, mode) == 0 || errno == EEXIST ? 0 : -1;
}
int mkb_mkdirs(const char *path) { return mkb_mkdirs_mode(path, 0755); }

static void (*warner)(const char *text);
void mkk_set_warner(void (*fn)(const char *text)) { warner = fn; }

void mkb_warn(const char *text) {
    if (warner)
        warner(text);
    else
        fprintf(stderr, "mkpy: warning: %s\n", text);
}

/* The folder's state: resolved from the environment (memo_src records the
 * values it was resolved from, so a changed MKPY_CACHE_DIR takes effect),
 * or the process's private temporary folder when the chosen one cannot be
 * trusted or written. */
static struct {
    pthread_mutex_t mu;
    char memo_src[8400];
    char memo_dir[4400];
    char private_dir[4400]; /* made once with mkdtemp, removed at exit */
    bool warned;
    bool private_failed;
} cdir = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The home folder: HOME, else the password database's entry of this user. */
static int home_dir(char *out, size_t n) {
    const char *h = getenv("HOME");
    if (h && *h) {
        snprintf(out, n, "%s", h);
        return 0;
    }
    struct passwd pw, *res = NULL;
    long sz = sysconf(_SC_GETPW_R_SIZE_MAX);
    size_t bufn = sz > 0 ? (size_t)sz : 16384;
    char *buf = malloc(bufn);
    int rc = -1;
    if (buf && getpwuid_r(geteuid(), &pw, buf, bufn, &res) == 0 && res && res->pw_dir && res->pw_dir[0] == '/') {
        snprintf(out, n, "%s", res->pw_dir);
        rc = 0;
    }
    free(buf);
    return rc;
}

/* MKPY_CACHE_DIR, else $XDG_CACHE_HOME/mkpy (an absolute XDG_CACHE_HOME, as
 * the XDG spec asks), else <home>/.cache/mkpy. Returns -1 when there is no
 * home folder either. */
static int chosen_dir(char *out, size_t n) {
    const char *env = getenv("MKPY_CACHE_DIR");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return 0;
    }
    const char *xdg = getenv("XDG_CACHE_HOME");
    if (xdg && xdg[0] == '/') {
        snprintf(out, n, "%s/mkpy", xdg);
        return 0;
    }
    char home[4096];
    if (home_dir(home, sizeof home) < 0) return -1;
    snprintf(out, n, "%s/.cache/mkpy", home);
    return 0;
}

/* Makes the folder if needed and checks that it belongs to this user alone:
 * a real folder (lstat: not a symbolic link), owned by the effective user,
 * writable by nobody else, writable by us. Returns 0, or -1 with the reason. */
int mkb_private_dir_ok(const char *path, char *why, size_t n) {
    if (mkb_mkdirs_mode(path, 0700) < 0 && errno != EEXIST) {
        snprintf(why, n, "cannot be created (%s)", strerror(errno));
        return -1;
    }
    struct stat st;
    if (lstat(path, &st) < 0) {
        snprintf(why, n, "cannot be created (%s)", strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode)) {
        snprintf(why, n, "is a symbolic link");
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, n, "is not a folder");
        return -1;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, n, "is owned by another user (uid %ld)", (long)st.st_uid);
        return -1;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, n, "can be written by other users (mode %03o)", (unsigned)(st.st_mode & 0777));
        return -1;
    }
    if (access(path, W_OK | X_OK) < 0) {
        snprintf(why, n, "is not writable (%s)", strerror(errno));
        return -1;
    }
    return 0;
}

static void remove_private_dir(void) {
    if (!cdir.private_dir[0]) return;
    DIR *d = opendir(cdir.private_dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char p[4700];
        snprintf(p, sizeof p, "%s/%s", cdir.private_dir, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(cdir.private_dir);
}

/* The private temporary folder (mkdtemp: mode 0700, an unpredictable name).
 * Call with cdir.mu held. */
static const char *private_dir(void) {
    if (cdir.private_dir[0]) return cdir.private_dir;
    if (cdir.private_failed) return NULL;
    const char *t = getenv("TMPDIR");
    snprintf(cdir.private_dir, sizeof cdir.private_dir, "%s/mkpy-cache-XXXXXX", t && t[0] == '/' ? t : "/tmp");
    if (!mkdtemp(cdir.private_dir)) {
        snprintf(cdir.private_dir, sizeof cdir.private_dir, "/tmp/mkpy-cache-XXXXXX");
        if (!mkdtemp(cdir.private_dir)) {
            cdir.private_dir[0] = 0;
            cdir.private_failed = true;
            return NULL;
        }
    }
    atexit(remove_private_dir);
    return cdir.private_dir;
}

/* Switches to the private folder with one warning (per process). Call with
 * cdir.mu held. Returns the folder or NULL. */
static const char *fall_back(const char *dir, const char *why) {
    const char *p = private_dir();
    if (!cdir.warned) {
        cdir.warned = true;
        char msg[9400];
        snprintf(msg, sizeof msg,
                 "the kernel cache folder %s %s; compiled kernels go to the private temporary folder %s for this "
                 "process instead (set MKPY_CACHE_DIR to a folder only you can write)",
                 dir, why, p ? p : "(none could be made)");
        /* the warner takes the GIL: never call it holding a lock another
         * thread may want while holding the GIL */
        pthread_mutex_unlock(&cdir.mu);
        mkb_warn(msg);
        pthread_mutex_lock(&cdir.mu);
    }
    return p;
}

/* The cache folder to use now: 0 and out filled, or -1 with an error set. */
int mkb_cache_dir(char *out, size_t n) {
    char src[8400], dir[4400], why[256];
    const char *e1 = getenv("MKPY_CACHE_DIR"), *e2 = getenv("XDG_CACHE_HOME"), *e3 = getenv("HOME");
    snprintf(src, sizeof src, "%s\n%s\n%s", e1 ? e1 : "-", e2 ? e2 : "-", e3 ? e3 : "-");
    pthread_mutex_lock(&cdir.mu);
    if (strcmp(src, cdir.memo_src) != 0 || !cdir.memo_dir[0]) {
        const char *use = NULL;
        if (chosen_dir(dir, sizeof dir) < 0) {
            snprintf(dir, sizeof dir, "(no home folder)");
            use = fall_back("for this user", "cannot be found: HOME is unset and the password database has no home");
        } else if (mkb_private_dir_ok(dir, why, sizeof why) < 0) {
            use = fall_back(dir, why);
        } else {
            use = dir;
        }
        snprintf(cdir.memo_src, sizeof cdir.memo_src, "%s", src);
        snprintf(cdir.memo_dir, sizeof cdir.memo_dir, "%s", use ? use : "");
    }
    snprintf(out, n, "%s", cdir.memo_dir);
    pthread_mutex_unlock(&cdir.mu);
    if (!out[0]) {
        mk_error_set(MK_ERR_RUNTIME, "[metal_kernel] No private folder for compiled kernels could be made (see "
                                     "MKPY_CACHE_DIR)");
        return -1;
    }
    return 0;
}

/* Writing into dir failed (a read-only file system, a full disk, a folder
 * removed under us): later kernels go to the private folder, with the one
 * warning. Returns 0 and the new folder in out, or -1. */
int mkb_cache_dir_failed(const char *dir, int err, char *out, size_t n) {
    char why[300];
    snprintf(why, sizeof why, "cannot be written (%s)", strerror(err));
    pthread_mutex_lock(&cdir.mu);
    const char *p = NULL;
    if (strcmp(dir, cdir.private_dir) != 0) p = fall_back(dir, why);
    if (p && strcmp(cdir.memo_dir, dir) == 0) snprintf(cdir.memo_dir, sizeof cdir.memo_dir, "%s", p);
    snprintf(out, n, "%s", p ? p : "");
    pthread_mutex_unlock(&cdir.mu);
    return p ? 0 : -1;
}


/* Files of an entry <hex>: <hex>.so (the object), <hex>.key (the key and
 * the object's hash), <hex>.cpp (the translated C++, for users to read),
 * <hex>.lock (flock'ed by the process compiling it). Beside them: `stats`
 * (bytes, hits, misses, under flock) and a precompiled header pch-*.pch
 * when none could be used beside the runtime headers. */
#define KEY_MAGIC "mkpy kernel cache entry 2\n"
#define STALE_TMP_S 3600 /* temporary files older than this are left over from a dead process */

/* the CPU back-end's entries (.so, .cpp) and the CUDA back-end's (.cubin, .cu) share the folder, its cap and its LRU */
static const char *const entry_exts[] = {".so", ".key", ".cpp", ".lock", ".metal", ".cubin", ".cu"};
#define NENTRY_EXTS 7

int64_t mkb_env_int(const char *name, int64_t dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v <= 0) return dflt;
    return v;
}

/* Is name "<32 hex digits>" followed by ext (one of entry_exts)? */
int mkb_entry_file(const char *name, char hex[33]) {
    for (int i = 0; i < 32; i++)
        if (!isxdigit((unsigned char)name[i])) return 0;
    for (int e = 0; e < NENTRY_EXTS; e++)
        if (strcmp(name + 32, entry_exts[e]) == 0) {
            memcpy(hex, name, 32);
            hex[32] = 0;
            return 1;
        }
    return 0;
}

typedef struct {
    char hex[33];
    int64_t bytes;
    int64_t mtime; /* ns: entries made within one second still go in order */
    bool has_object;
} disk_entry;

static int by_mtime(const void *a, const void *b) {
    const disk_entry *x = a, *y = b;
    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime ? 1 : strcmp(x->hex, y->hex);
}

static int by_hex(const void *a, const void *b) { return strcmp(((const disk_entry *)a)->hex, ((const disk_entry *)b)->hex); }

static void remove_entry_files(const char *dir, const char *hex) {
    for (int e = 0; e < NENTRY_EXTS; e++) {
        char p[4500];
        snprintf(p, sizeof p, "%s/%s%s", dir, hex, entry_exts[e]);
        unlink(p);
    }
}

/* Scans the folder: its entries (bytes, and the time of last use: the
 * newest mtime of their files, which hits refresh), and stale temporary
 * files (removed). With cap >= 0, removes the least recently used entries
 * until at most 90% of cap remain, when more than cap is there. Returns the
 * bytes kept (*count: entries kept), or -1 if the folder cannot be read. */
int64_t mkb_scan_dir(const char *dir, int64_t cap, int64_t *count) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    disk_entry *v = NULL;
    size_t n = 0, capn = 0;
    time_t now = time(NULL);
    struct dirent *de;
    while ((de = readdir(d))) {
        char hex[33], p[4500];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (!mkb_entry_file(de->d_name, hex)) {
            if (strstr(de->d_name, ".tmp.") && lstat(p, &st) == 0 && S_ISREG(st.st_mode) &&
                now - st.st_mtime > STALE_TMP_S)
                unlink(p);
            continue;
        }
        if (lstat(p, &st) < 0 || !S_ISREG(st.st_mode)) continue;
        /* one record per file here; the files of an entry are merged below */
        if (n == capn) {
            disk_entry *w = realloc(v, (capn = capn ? capn * 2 : 256) * sizeof *v);
            if (!w) break;
            v = w;
        }
        memcpy(v[n].hex, hex, 33);
        v[n].bytes = (int64_t)st.st_size;
        v[n].mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        v[n].has_object = strcmp(de->d_name + 32, ".so") == 0 || strcmp(de->d_name + 32, ".cubin") == 0;
        n++;
    }
    closedir(d);
    if (n) qsort(v, n, sizeof *v, by_hex);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && strcmp(v[m - 1].hex, v[i].hex) == 0) {
            v[m - 1].bytes += v[i].bytes;
            if (v[i].mtime > v[m - 1].mtime) v[m - 1].mtime = v[i].mtime;
            v[m - 1].has_object |= v[i].has_object;
        } else {
            v[m++] = v[i];
        }
    }
    n = m;
    int64_t total = 0;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (!v[i].has_object && (int64_t)now - v[i].mtime / 1000000000 > STALE_TMP_S) {
            remove_entry_files(dir, v[i].hex); /* a lock or key left by a dead process */
            v[i].bytes = 0;
            continue;
        }
        total += v[i].bytes;
        kept += v[i].has_object;
    }
    if (cap >= 0 && total > cap) {
        qsort(v, n, sizeof *v, by_mtime);
        for (size_t i = 0; i < n && total > cap - cap / 10; i++) {
            remove_entry_files(dir, v[i].hex);
            total -= v[i].bytes;
            kept -= v[i].has_object;
        }
    }
    free(v);
    if (count) *count = (int64_t)kept;
    return total;
}

/* The folder's shared counters, in <dir>/stats under flock: the bytes of
 * its entries (as their writers added them), and disk hits and misses of
 * every process since the last clear. add_bytes/hits/misses are added;
 * when the bytes go over MKPY_CACHE_MAX_BYTES (or were never counted), the
 * folder is scanned and its least recently used entries evicted, under the
 * same lock, so that one process evicts at a time. Best effort: a folder
 * where the file cannot be written keeps no counters. */
int mkb_stats_update(const char *dir, int64_t add_bytes, int64_t hits, int64_t misses, bool rescan,
                        mkb_disk_stats *out) {
    char p[4500];
    snprintf(p, sizeof p, "%s/stats", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX) < 0 && errno == EINTR) {
    }
    char buf[256];
    ssize_t r = pread(fd, buf, sizeof buf - 1, 0);
    buf[r > 0 ? r : 0] = 0;
    long long b = -1, h = 0, m = 0;
    if (sscanf(buf, "bytes %lld hits %lld misses %lld", &b, &h, &m) != 3) b = -1, h = m = 0;
    h += hits;
    m += misses;
    if (b >= 0) b += add_bytes;
    int64_t cap = mkb_env_int("MKPY_CACHE_MAX_BYTES", MKB_CACHE_MAX_BYTES_DEFAULT);
    if (rescan || b < 0 || b > cap) {
        int64_t s = mkb_scan_dir(dir, add_bytes > 0 ? cap : -1, NULL);
        if (s >= 0) b = s;
    }
    int len = snprintf(buf, sizeof buf, "bytes %lld hits %lld misses %lld\n", b < 0 ? 0 : b, h, m);
    if (pwrite(fd, buf, (size_t)len, 0) == len) {
        if (ftruncate(fd, len) < 0) { /* the counters are advisory */
        }
    }
    close(fd);
    if (out) {
        out->bytes = b < 0 ? 0 : b;
        out->hits = h;
        out->misses = m;
    }
    return 0;
}

/* Marks an entry used now (eviction is least recently used first). */
void mkb_touch(const char *path) { utimensat(AT_FDCWD, path, NULL, 0); }

static int write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Hashes a file (its size and FNV-1a-64 of its bytes) from an open fd. */
static int hash_fd(int fd, int64_t *size, uint64_t *h) {
    unsigned char buf[65536];
    uint64_t x = FNV_BASIS;
    int64_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        x = fnv1a(x, buf, (size_t)r);
        n += r;
    }
    *size = n;
    *h = x;
    return 0;
}

/* Checks an entry's object before use: the key file must say it is this
 * key's entry, and the object's size and hash must match those recorded in
 * the key (a truncated, swapped or planted object is never used). Fills *st
 * from the file that was hashed (a loader compares it after loading).
 * Returns 0 when it matches. */
int mkb_check_entry(const char *obj_path, const char *key_path, const char *full_key, struct stat *st) {
    char *stored = mkb_read_file(key_path);
    if (!stored) return -1;
    long long want_size;
    unsigned long long want_hash;
    int off = 0, ret = -1;
    if (strncmp(stored, KEY_MAGIC, strlen(KEY_MAGIC)) != 0 ||
        sscanf(stored + strlen(KEY_MAGIC), "object %lld %llx\n%n", &want_size, &want_hash, &off) != 2 || !off ||
        strcmp(stored + strlen(KEY_MAGIC) + off, full_key) != 0) {
        free(stored);
        return -1;
    }
    free(stored);
    int fd = open(obj_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return -1;
    int64_t size;
    uint64_t hash;
    if (fstat(fd, st) == 0 && S_ISREG(st->st_mode) && hash_fd(fd, &size, &hash) == 0 && size == want_size &&
        hash == (uint64_t)want_hash)
        ret = 0;
    close(fd);
    return ret;
}

/* The bytes of an entry's object, read once and checked against its key as
 * mkb_check_entry does (so what is checked is what is used); NULL if absent
 * or not matching. */
unsigned char *mkb_read_verified(const char *obj_path, const char *key_path, const char *full_key, size_t *n) {
    char *stored = mkb_read_file(key_path);
    if (!stored) return NULL;
    long long want_size;
    unsigned long long want_hash;
    int off = 0;
    if (strncmp(stored, KEY_MAGIC, strlen(KEY_MAGIC)) != 0 ||
        sscanf(stored + strlen(KEY_MAGIC), "object %lld %llx\n%n", &want_size, &want_hash, &off) != 2 || !off ||
        strcmp(stored + strlen(KEY_MAGIC) + off, full_key) != 0) {
        free(stored);
        return NULL;
    }
    free(stored);
    int fd = open(obj_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return NULL;
    struct stat st;
    unsigned char *buf = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == want_size && (buf = malloc((size_t)want_size + 1))) {
        size_t got = 0;
        while (got < (size_t)want_size) {
            ssize_t r = read(fd, buf + got, (size_t)want_size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        if (got != (size_t)want_size || fnv1a(FNV_BASIS, buf, got) != (uint64_t)want_hash) {
            free(buf);
            buf = NULL;
        } else {
            *n = got;
        }
    }
    close(fd);
    return buf;
}

/* Writes the key file of an entry whose object is tmp_so, atomically: a
 * temporary file renamed to key_path. */
int mkb_write_key(const char *tmp_so, const char *tmp_key, const char *key_path, const char *full_key) {
    int fd = open(tmp_so, O_RDONLY | O_CLOEXEC);
    int64_t size;
    uint64_t hash;
    if (fd < 0) return -1;
    int ok = hash_fd(fd, &size, &hash) == 0;
    close(fd);
    if (!ok) return -1;
    fd = open(tmp_key, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    char head[128];
    int hl = snprintf(head, sizeof head, KEY_MAGIC "object %lld %016llx\n", (long long)size,
                      (unsigned long long)hash);
    ok = write_all(fd, head, (size_t)hl) == 0 && write_all(fd, full_key, strlen(full_key)) == 0;
    if (close(fd) < 0) ok = 0;
    if (!ok || rename(tmp_key, key_path) < 0) {
        unlink(tmp_key);
        return -1;
    }
    return 0;
}

int64_t mkb_file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : 0;
}

