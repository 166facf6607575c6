/* Compile servers shared across processes (issue #27): one daemon per kind
 * of server (the clang zygote, the lockstep pass) and per build, found by a
 * Unix socket in a private per-user folder, outliving the process that
 * started it and ending after an idle time. Per connection it forks a server
 * that behaves exactly as a per-process server on that connection.
 *
 * One source, built into three binaries: mkpy's extension (the client side:
 * mkk_srvd_connect), the zygote library preloaded into clang, and the pass
 * program (the daemon side: mkk_srvd_serve). Symbols are hidden: the zygote
 * library lives inside clang. */
#ifndef MKPY_CPU_SRVD_H
#define MKPY_CPU_SRVD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MKK_SRVD_HIDDEN __attribute__((visibility("hidden")))

/* The variable that tells a started program where its daemon's socket is
 * (its listening socket is descriptor 3). */
#define MKK_SRVD_SOCKET_VAR "MKPY_SRV_SOCKET"

/* The key of a daemon: the identity (path, device, inode, size, mtime) of
 * every file in files (NULL-terminated; a missing one gives its path only),
 * the strings in words (NULL-terminated), and the variables of the process's
 * environment that the dynamic loader and the C library read at start
 * (LD_*, GLIBC_TUNABLES, MALLOC_*). */
MKK_SRVD_HIDDEN uint64_t mkk_srvd_key(const char *const files[], const char *const words[]);

/* The hash of those start-up variables only (a per-process server started
 * under other ones is retired). */
MKK_SRVD_HIDDEN uint64_t mkk_srvd_loader_env(void);

/* The rendezvous folder into out: MKPY_SERVER_DIR, else $XDG_RUNTIME_DIR/mkpy
 * when that works, else /tmp/mkpy-<uid>; made 0700 when missing. -1 when the
 * folder is not a real folder (a symlink, say) owned by this user with mode
 * 0700, or cannot be made: no shared servers then. */
MKK_SRVD_HIDDEN int mkk_srvd_dir(char *out, size_t n);

/* A connection to the daemon of `kind` (a short name) and key, or -1 (no
 * shared server: the caller runs its own). When none answers, the daemon is
 * started: argv run with envp plus MKPY_SRV_SOCKET, detached, its listening
 * socket made here so that the connection is made at once and the request
 * waits in it while the daemon starts. *started is then the pid of the
 * process spawned (it exits once the daemon is detached: the caller reaps it
 * with waitpid after its first answer), else 0. The socket's peer is
 * checked to be this user. */
MKK_SRVD_HIDDEN int mkk_srvd_connect(const char *kind, uint64_t key, char *const argv[], char *const envp[],
                                     pid_t *started);

/* The first 8 bytes a shared server sends on its connection: the daemon's
 * pid and its own, as two host-order int32. */
#define MKK_SRVD_HELLO 8

/* In a program started by mkk_srvd_connect (MKPY_SRV_SOCKET set): detaches
 * and becomes the daemon, accepting connections until it has had none for
 * MKPY_SERVER_IDLE seconds (600 by default) or its socket file is gone or
 * replaced. Returns 0 in each server it forks (standard input and output are
 * then the connection, the hello sent), never in the daemon; -1 when the
 * variable is not set (not started as a daemon: the caller serves its
 * standard input as before). */
MKK_SRVD_HIDDEN int mkk_srvd_serve(void);

#endif
