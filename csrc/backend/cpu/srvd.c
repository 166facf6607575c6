/* Compile servers shared across processes: the rendezvous, the daemon's start
 * and its accept loop (srvd.h). Built into mkpy's extension, the zygote
 * library and the pass program.
 *
 * The rendezvous is a Unix socket, <folder>/<kind>-<key>.sock, in a folder
 * only this user can use (mkk_srvd_dir), its name keyed by everything that
 * makes a server wrong for another process (mkk_srvd_key). The process that
 * finds no daemon takes <kind>-<key>.lock (flock), binds and listens on the
 * socket itself, and starts the daemon with the listening socket as its
 * descriptor 3: its own connection is made at once and its first request
 * waits in the socket while the daemon loads. Two processes starting at
 * once: the second waits on the lock, then connects to the first's daemon.
 * A socket nobody listens on (a daemon that died): connect is refused, the
 * process takes the lock, removes the file and starts another.
 *
 * The daemon detaches (a new session, a second fork so that it is no
 * session leader, working folder /, every other descriptor closed, standard
 * input and output /dev/null, the terminal's signals ignored) and forks a
 * server per accepted connection after checking that its peer is this user
 * (SO_PEERCRED). It ends when it has had no live connection for the idle
 * time, or when its socket file is removed or replaced (checked every
 * second): it removes its own file under the lock, then serves whatever
 * connected meanwhile, so that no client's connection is dropped. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "srvd.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#ifndef POSIX_SPAWN_SETSID /* glibc before 2.26: the daemon calls setsid itself */
#define POSIX_SPAWN_SETSID 0
#endif

#define SRVD_PROTOCOL "mkpy-srvd-1"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return h;
}

static int startup_var(const char *e) {
    return strncmp(e, "LD_", 3) == 0 || strncmp(e, "GLIBC_TUNABLES=", 15) == 0 || strncmp(e, "MALLOC_", 7) == 0;
}

uint64_t mkk_srvd_loader_env(void) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (char **e = environ; e && *e; e++)
        if (startup_var(*e)) h = fnv(h, *e, strlen(*e) + 1);
    return h;
}

uint64_t mkk_srvd_key(const char *const files[], const char *const words[]) {
    uint64_t h = fnv(0xcbf29ce484222325ULL, SRVD_PROTOCOL, sizeof SRVD_PROTOCOL);
    for (int i = 0; files && files[i]; i++) {
        struct stat st;
        h = fnv(h, files[i], strlen(files[i]) + 1);
        if (stat(files[i], &st) == 0) {
            const int64_t id[] = {(int64_t)st.st_dev, (int64_t)st.st_ino, (int64_t)st.st_size,
                                  (int64_t)st.st_mtim.tv_sec, (int64_t)st.st_mtim.tv_nsec};
            h = fnv(h, id, sizeof id);
        }
    }
    for (int i = 0; words && words[i]; i++) h = fnv(h, words[i], strlen(words[i]) + 1);
    const uint64_t env = mkk_srvd_loader_env(), uid = (uint64_t)geteuid();
    h = fnv(h, &env, sizeof env);
    return fnv(h, &uid, sizeof uid);
}

/* A real folder (not a link), this user's, mode 0700; made when missing. */
static int private_dir(const char *d) {
    if (mkdir(d, 0700) == 0 && chmod(d, 0700) < 0) return -1;
    struct stat st;
    if (lstat(d, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0700) return -1;
    return 0;
}

int mkk_srvd_dir(char *out, size_t n) {
    const char *set = getenv("MKPY_SERVER_DIR");
    if (set && set[0]) {
        if ((size_t)snprintf(out, n, "%s", set) >= n) return -1;
        return private_dir(out);
    }
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg && xdg[0] == '/' && (size_t)snprintf(out, n, "%s/mkpy", xdg) < n && private_dir(out) == 0) return 0;
    if ((size_t)snprintf(out, n, "/tmp/mkpy-%lu", (unsigned long)geteuid()) >= n) return -1;
    return private_dir(out);
}

static int peer_is_me(int fd) {
    struct ucred cr;
    socklen_t l = sizeof cr;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) == 0 && cr.uid == geteuid();
}

static int sock_addr(struct sockaddr_un *a, const char *path) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof a->sun_path) return -1;
    strcpy(a->sun_path, path);
    return 0;
}

/* A connected socket, or -1 with errno (ENOENT, ECONNREFUSED: no daemon). */
static int try_connect(const struct sockaddr_un *a) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int rc;
    do rc = connect(fd, (const struct sockaddr *)a, sizeof *a);
    while (rc < 0 && errno == EINTR);
    if (rc < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (!peer_is_me(fd)) {
        close(fd);
        errno = EACCES;
        return -1;
    }
    return fd;
}

/* Starts argv detached with the listening socket lfd; the pid spawned or -1. */
static pid_t start_daemon(int lfd, const char *path, char *const argv[], char *const envp[]) {
    size_t ne = 0;
    while (envp && envp[ne]) ne++;
    char **env = malloc((ne + 2) * sizeof *env);
    char *var = malloc(strlen(path) + sizeof MKK_SRVD_SOCKET_VAR + 1);
    pid_t pid = -1;
    if (env && var) {
        size_t k = 0;
        for (size_t i = 0; i < ne; i++)
            if (strncmp(envp[i], MKK_SRVD_SOCKET_VAR "=", sizeof MKK_SRVD_SOCKET_VAR) != 0) env[k++] = envp[i];
        sprintf(var, "%s=%s", MKK_SRVD_SOCKET_VAR, path);
        env[k++] = var;
        env[k] = NULL;
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t at;
        posix_spawn_file_actions_init(&fa);
        posix_spawnattr_init(&at);
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        sigdelset(&all, SIGKILL);
        sigdelset(&all, SIGSTOP);
        posix_spawnattr_setsigmask(&at, &none);
        posix_spawnattr_setsigdefault(&at, &all);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, lfd, 3); /* lfd > 3: the dup clears close-on-exec */
        if (posix_spawn(&pid, argv[0], &fa, &at, argv, env) != 0) pid = -1;
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&at);
    }
    free(env);
    free(var);
    return pid;
}

int mkk_srvd_connect(const char *kind, uint64_t key, char *const argv[], char *const envp[], pid_t *started) {
    *started = 0;
    char dir[200], path[300], lock[300];
    if (mkk_srvd_dir(dir, sizeof dir) < 0) return -1;
    snprintf(path, sizeof path, "%s/%s-%016llx.sock", dir, kind, (unsigned long long)key);
    snprintf(lock, sizeof lock, "%s/%s-%016llx.lock", dir, kind, (unsigned long long)key);
    struct sockaddr_un a;
    if (sock_addr(&a, path) < 0) return -1;
    int fd = try_connect(&a);
    if (fd >= 0 || (errno != ENOENT && errno != ECONNREFUSED)) return fd;
    /* no daemon: start one, under the lock */
    int lk = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lk < 0) return -1;
    while (flock(lk, LOCK_EX) < 0)
        if (errno != EINTR) {
            close(lk);
            return -1;
        }
    fd = try_connect(&a); /* another process started it meanwhile */
    if (fd < 0 && (errno == ENOENT || errno == ECONNREFUSED)) {
        int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lfd >= 0 && lfd <= 3) { /* kept above 3, the daemon's descriptor */
            int up = fcntl(lfd, F_DUPFD_CLOEXEC, 4);
            close(lfd);
            lfd = up;
        }
        (void)unlink(path); /* a stale socket */
        if (lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0) {
            pid_t pid = listen(lfd, 128) == 0 ? start_daemon(lfd, path, argv, envp) : -1;
            if (pid > 0) {
                fd = try_connect(&a);
                if (fd >= 0) *started = pid;
                else (void)waitpid(pid, NULL, 0);
            }
            if (fd < 0) (void)unlink(path);
        }
        if (lfd >= 0) close(lfd);
    }
    flock(lk, LOCK_UN);
    close(lk);
    return fd;
}

/* ------------------------------------------------------------ the daemon */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static const int term_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE};

static void close_from(int lo) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lo, ~0U, 0) == 0) return;
#endif
    long hi = sysconf(_SC_OPEN_MAX);
    if (hi < 0 || hi > 65536) hi = 65536;
    for (int fd = lo; fd < hi; fd++) close(fd);
}

/* In the daemon: a server for connection c. Returns 1 in that server. */
static int fork_server(int lfd, int c, pid_t daemon_pid, int *nlive) {
    pid_t pid = fork();
    if (pid == 0) {
        close(lfd);
        for (size_t i = 0; i < sizeof term_signals / sizeof *term_signals; i++) signal(term_signals[i], SIG_DFL);
        if (dup2(c, 0) < 0 || dup2(c, 1) < 0) _exit(1);
        if (c > 1) close(c);
        const int32_t hello[2] = {(int32_t)daemon_pid, (int32_t)getpid()};
        if (write(1, hello, sizeof hello) != (ssize_t)sizeof hello) _exit(1);
        return 1;
    }
    close(c);
    if (pid > 0) (*nlive)++;
    return 0;
}

/* Accepts what is waiting (the listening socket is non-blocking); 1 in a
 * server forked for one. */
static int accept_waiting(int lfd, pid_t me, int *nlive, double *last) {
    for (;;) {
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return 0;
        }
        *last = now_s();
        if (!peer_is_me(c)) {
            close(c);
            continue;
        }
        if (fork_server(lfd, c, me, nlive)) return 1;
    }
}

int mkk_srvd_serve(void) {
    const char *v = getenv(MKK_SRVD_SOCKET_VAR);
    if (!v) return -1;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    if (strlen(v) >= sizeof path) _exit(1);
    strcpy(path, v);
    unsetenv(MKK_SRVD_SOCKET_VAR);
    const char *iv = getenv("MKPY_SERVER_IDLE");
    double idle = iv ? strtod(iv, NULL) : 0;
    if (!(idle > 0)) idle = 600;
    const int lfd = 3;
    int acc = 0;
    socklen_t al = sizeof acc;
    if (getsockopt(lfd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &al) < 0 || !acc) _exit(1);
    close_from(4);
    /* detach: a new session (the spawn made one), then a child that is no
     * session leader; the spawned process exits and its parent reaps it */
    if (getsid(0) != getpid()) (void)setsid();
    pid_t pid = fork();
    if (pid != 0) _exit(pid < 0);
    for (size_t i = 0; i < sizeof term_signals / sizeof *term_signals; i++) signal(term_signals[i], SIG_IGN);
    if (chdir("/") < 0) _exit(1);
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(nul, 2);
        if (nul > 2) close(nul);
    }
    fcntl(lfd, F_SETFD, FD_CLOEXEC);
    fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK);
    struct stat mine, st;
    if (stat(path, &mine) < 0) _exit(0);
    const pid_t me = getpid();
    int nlive = 0;
    double last = now_s();
    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0) nlive--;
        double left = idle - (now_s() - last);
        int ms = nlive > 0 || left > 1 ? 1000 : left > 0 ? (int)(left * 1000) + 1 : 0;
        struct pollfd p = {lfd, POLLIN, 0};
        if (poll(&p, 1, ms) > 0 && accept_waiting(lfd, me, &nlive, &last)) return 0;
        while (waitpid(-1, NULL, WNOHANG) > 0) nlive--;
        if (nlive > 0) last = now_s();
        const int gone = stat(path, &st) < 0 || st.st_ino != mine.st_ino || st.st_dev != mine.st_dev;
        if (!gone && now_s() - last < idle) continue;
        /* the end: the file goes first (under the lock: no process is
         * starting a daemon in its place meanwhile), then what connected
         * before that is served */
        if (!gone) {
            char lock[sizeof path + 8];
            snprintf(lock, sizeof lock, "%.*s.lock", (int)(strlen(path) - 5), path); /* .sock -> .lock */
            int lk = open(lock, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
            if (lk >= 0) flock(lk, LOCK_EX);
            if (stat(path, &st) == 0 && st.st_ino == mine.st_ino && st.st_dev == mine.st_dev) unlink(path);
            if (lk >= 0) close(lk);
        }
        if (accept_waiting(lfd, me, &nlive, &last)) return 0;
        _exit(0);
    }
}
