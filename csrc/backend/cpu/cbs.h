/* The lockstep engine's runtime (cbs.c): threadgroups of a kernel compiled
 * through the region-splitting pass (ir/cbs_ir.c), without fibers. */
#ifndef MKK_CBS_H
#define MKK_CBS_H

#include <stdio.h>

#include "kernel/kernel.h"

typedef struct {
    mkk_cbs_run_fn run;
    const struct mkpy_cbs_info *info;
    void *const *args;
} mkk_cbs_kernel;

/* Launch-time checks that need no thread (threadgroup memory). Returns 0, or
 * -1 with a message. */
int mkk_cbs_check(const mkk_cbs_kernel *k, char *error, size_t errn);

/* Runs the threadgroups [launch->group_begin, group_end) on the calling
 * thread (inside mk_fault_guarded_call). Returns 0, or -1 with a message. */
int mkk_cbs_run(const mkk_cbs_kernel *k, const mkk_launch *launch, char *error, size_t errn);

#endif
