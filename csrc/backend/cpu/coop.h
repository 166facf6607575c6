/* Cooperative threadgroups on fibers (see coop.c). */
#ifndef MKK_COOP_H
#define MKK_COOP_H

#include "backend/cpu/fiber.h"
#include "kernel/kernel.h"

typedef struct {
    mkk_thread_fn thread;
    void *const *args;
} coop_kernel;

/* The function table compiled kernels call for barriers, SIMD-group
 * exchanges and threadgroup memory. */
extern const struct mkpy_coop_api mkk_coop_api;

/* Runs the threadgroups [launch->group_begin, group_end) cooperatively on the
 * calling thread (which must be inside mk_fault_guarded_call). Returns 0, or
 * -1 with a message in error. */
int mkk_coop_run(const coop_kernel *k, const mkk_launch *launch, char *error, size_t errn);

/* After a fault stopped kernel code inside mkk_coop_run on this thread: gives
 * its fibers back to the process-wide pool (the run never returned). */
void mkk_coop_reclaim(void);

/* The GPU thread running on this worker's current fiber and its stack (the
 * checker mode asks, check.c): 0, or -1 outside mkk_coop_run. */
int mkk_coop_current(uint64_t *group, unsigned *index, const char **stack_lo, const char **stack_hi);

#endif
