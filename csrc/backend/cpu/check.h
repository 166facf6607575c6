/* The checker mode (check.c): a kernel built by mkpy-cbs-pass --check calls
 * the runtime at every access, barrier and integer division; a check-mode
 * launch runs its threadgroups on the pool's threads and collects findings (out-of-bounds accesses,
 * races on threadgroup and device memory, uninitialised threadgroup reads,
 * unwritten outputs, integer division faults), reported at eval as a
 * RuntimeError. */
#ifndef MKK_CHECK_H
#define MKK_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel/kernel.h"

/* The table a checked kernel calls (mkpy_kernel_set_check). */
extern const struct mkpy_check_api mkk_check_api;

/* Is the checker on for a call made now by this thread: MKPY_CHECK=1 in the
 * environment, mx.metal.set_check(True), or the calling thread's
 * `with mx.metal.check():` scope (which wins over the other two). */
bool mkk_check_requested(void);
/* mx.metal.set_check: the process-wide switch (-1: from MKPY_CHECK). */
void mkk_check_set(int on);
/* The calling thread's scope: -1 none, 0 off, 1 on. Returns the old value. */
int mkk_check_scope(int on);

/* What the kernel sees of one buffer (launch.c's kbuf). */
typedef struct {
    const char *name;
    bool output;
    char *base, *lo, *hi; /* the pointer the kernel gets; the bytes it may use */
    size_t itemsize;
    int64_t count;
} mkk_check_buf;

/* Starts a checked launch (one at a time in the process: it takes a lock
 * that mkk_check_finish releases). has_init: the outputs were filled with
 * init_value, so unwritten elements are fine. nthreads: the pool threads
 * that may run its threadgroups at once. Returns 0 or -1 (no memory). */
int mkk_check_begin(const char *kernel, const mkk_launch *L, const mkk_check_buf *bufs, int n, bool has_init,
                    int nthreads);
/* Ends it: the findings as text (malloc'd; NULL when there are none) and
 * their count in *nfound. */
char *mkk_check_finish(int *nfound);

#endif
