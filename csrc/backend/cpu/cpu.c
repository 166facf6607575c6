/* The CPU back-end's table (backend/backend.h). Its memory is the host's, and
 * every op's own evaluator (csrc/core/) is the CPU's, so it has no `mem` and
 * no op table; metal_kernel nodes run through the JIT and engines of this
 * folder (launch.c). */
#include <stdio.h>

#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "core/pool.h"

static bool cpu_available(void) { return true; }

static int cpu_describe(char *out, size_t n) {
    return snprintf(out, n, "the CPU: %d worker threads; kernels compiled by clang and run by the plain, lockstep "
                            "and fiber engines", mk_pool_threads());
}

static int cpu_synchronize(void) { return 0; }

const mkb_backend mkb_cpu_backend = {
    .name = "cpu",
    .available = cpu_available,
    .describe = cpu_describe,
    .mem = NULL,
    .op_eval = NULL,
    .kernel_eval = mkb_cpu_kernel_eval,
    .kernel_compile = mkb_cpu_kernel_compile,
    .synchronize = cpu_synchronize,
};
