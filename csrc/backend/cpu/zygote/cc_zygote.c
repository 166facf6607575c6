/* libmkpy-cc-zygote.so: keeps the kernel compiler (clang) started.
 *
 * Starting clang costs ~25 ms of CPU time before it reads a line: the dynamic
 * loader relocates libLLVM and libclang-cpp (some 620,000 relocations). jit.c
 * starts clang once with this library in LD_PRELOAD and MKPY_CC_ZYGOTE=1; the
 * library stands in for glibc's __libc_start_main, which runs after every
 * library is loaded and relocated and before clang's main. Instead of calling
 * main it waits for requests on its standard input (a socket, jit.c holds the
 * other end) and forks once per request: the child, already relocated, runs
 * clang's main with the request's arguments, in its own process, as a fresh
 * clang would (a crash ends the child only). Its exit status goes back on the
 * socket.
 *
 * The status goes back as soon as clang's main has returned (its object is
 * written and renamed by then), not when the child has gone: the child's
 * on_exit handler, put in when main starts and so the first to run in exit()
 * after any clang adds itself, closes the output and writes the status to a
 * pipe the zygote reads. Tearing down the child's address
 * space (libLLVM's and libclang-cpp's mappings, ~4 ms on a busy machine)
 * then overlaps the kernel's link instead of coming before it. A child that
 * ends without calling exit (a crash, a signal, _exit) leaves the pipe
 * empty, and the zygote reports what waitpid says, as before.
 *
 * A request: 8 bytes, the length n of what follows (host order), sent with
 * one descriptor (SCM_RIGHTS) that the compiler's standard output and error
 * go to; then n bytes of strings, each ending in a NUL: the working folder;
 * "<argc> <umask>" in decimal; the argc arguments; then the environment the
 * compiler runs with (the client's: the zygote may serve several processes,
 * and clang reads CPATH, TMPDIR and the like). The answer: 4 bytes, the exit
 * status (host order; 128 + the signal's number when it was killed). The
 * zygote exits at the end of its input.
 *
 * Started with MKPY_SRV_SOCKET set, it is a shared daemon (../srvd.c): each
 * connection gets a forked zygote that serves it as above until its end of
 * input. Without MKPY_CC_ZYGOTE the library does nothing. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../srvd.h"

typedef int (*main_fn)(int, char **, char **);
typedef int (*start_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void), void *);

#define MAX_REQUEST (1 << 20)

static int read_all(int fd, void *p, size_t n) {
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p = (char *)p + r;
        n -= (size_t)r;
    }
    return 0;
}

static int write_all(int fd, const void *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

/* In the child, first of exit()'s handlers: the output is complete, so the
 * client may stop reading it; then the status. */
static void report_early(int status, void *arg) {
    const int fd = (int)(intptr_t)arg;
    const int32_t st = status & 0xff; /* what WEXITSTATUS gives */
    close(1);
    close(2);
    (void)write_all(fd, &st, sizeof st);
    close(fd);
}

/* clang's main, run through main_reporting in the child: the handler goes
 * in after the ones __libc_start_main adds (the libraries' destructors), so
 * that it runs before them. */
static main_fn child_main;
static int child_report_fd = -1;

static int main_reporting(int argc, char **argv, char **envp) {
    if (on_exit(report_early, (void *)(intptr_t)child_report_fd) != 0) _exit(127);
    return child_main(argc, argv, envp);
}

/* The 8-byte head and its descriptor. */
static int read_head(uint64_t *n, int *fd) {
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {n, sizeof *n};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t r;
    do r = recvmsg(0, &msg, MSG_WAITALL | MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    if (r != (ssize_t)sizeof *n) return -1;
    *fd = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(c), sizeof(int));
    return *fd >= 0 ? 0 : -1;
}

int __libc_start_main(main_fn main, int argc, char **argv, void (*init)(void), void (*fini)(void),
                      void (*rtld_fini)(void), void *stack_end) {
    start_fn real = (start_fn)dlsym(RTLD_NEXT, "__libc_start_main");
    if (!real) _exit(127);
    if (!getenv("MKPY_CC_ZYGOTE")) return real(main, argc, argv, init, fini, rtld_fini, stack_end);
    unsetenv("MKPY_CC_ZYGOTE");
    unsetenv("LD_PRELOAD"); /* not for what the compiler starts */
    (void)mkk_srvd_serve(); /* a shared daemon: returns in the zygote of a connection */
    for (;;) {
        uint64_t n;
        int out;
        if (read_head(&n, &out) < 0 || n == 0 || n > MAX_REQUEST) _exit(0);
        char *buf = malloc(n + 1);
        if (!buf || read_all(0, buf, n) < 0) _exit(0);
        buf[n] = 0;
        /* the strings: folder, "argc umask", arguments, environment */
        size_t ns = 0;
        for (size_t i = 0; i < n; i += strlen(buf + i) + 1) ns++;
        char **vec = malloc((ns + 2) * sizeof *vec), *cwd = buf;
        size_t at = strlen(buf) + 1, nv = 0;
        long argc = -1;
        unsigned mask = 022;
        if (at < n && sscanf(buf + at, "%ld %u", &argc, &mask) == 2) at += strlen(buf + at) + 1;
        else argc = -1;
        for (; vec && at < n; at += strlen(buf + at) + 1) {
            if ((long)nv == argc) vec[nv++] = NULL; /* between the arguments and the environment */
            vec[nv++] = buf + at;
        }
        if (vec && (long)nv == argc) vec[nv++] = NULL;
        if (vec) vec[nv] = NULL;
        const int na = vec && argc > 0 && argc < (long)nv ? (int)argc : 0;
        int early[2] = {-1, -1};
        pid_t pid = na && pipe2(early, O_CLOEXEC) == 0 ? fork() : -1;
        if (pid == 0) {
            int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
            if (nul < 0 || dup2(nul, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0 || chdir(cwd) < 0) _exit(127);
            close(nul);
            close(out);
            close(early[0]);
            child_main = main;
            child_report_fd = early[1];
            environ = vec + na + 1; /* main gets it as envp */
            umask((mode_t)mask);
            return real(main_reporting, na, vec, init, fini, rtld_fini, stack_end);
        }
        close(out);
        free(vec);
        free(buf);
        if (early[1] >= 0) close(early[1]);
        int32_t status = 127, st;
        int reported = 0;
        if (pid > 0 && read_all(early[0], &status, sizeof status) == 0) { /* main returned: answer now */
            if (write_all(1, &status, sizeof status) < 0) _exit(0);
            reported = 1;
        }
        if (early[0] >= 0) close(early[0]);
        if (pid > 0) {
            while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR) _exit(1);
            if (!reported) status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        }
        if (!reported && write_all(1, &status, sizeof status) < 0) _exit(0);
    }
}
