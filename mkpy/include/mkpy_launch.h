/* The launch description passed from mkpy's C dispatcher to a compiled
 * kernel's entry point. Plain C, shared by csrc/kernel/ and mkpy_metal.h. */
#ifndef MKPY_LAUNCH_H
#define MKPY_LAUNCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct mkpy_launch {
    uint32_t grid[3];    /* threads per grid, as given to dispatchThreads */
    uint32_t tg[3];      /* threads per threadgroup requested (clamped to grid) */
    uint32_t ngroups[3]; /* threadgroups per grid */
    uint64_t group_begin, group_end; /* linear threadgroup ids this call runs */
};

/* The symbol every compiled kernel exports. */
#define MKPY_ENTRY_SYMBOL "mkpy_kernel_entry"

#ifdef __cplusplus
}
#endif

#endif
