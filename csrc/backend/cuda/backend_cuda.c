/* The CUDA back-end's table (backend/backend.h). */
#include <stdio.h>

#include "driver.h"
#include "ops_cuda.h"

static bool cuda_available(void) { return mkb_cuda_load(); }

static int cuda_synchronize(void) {
    if (!mkb_cuda_load()) return 0;
    if (mkb_cuda_enter() < 0) return -1;
    return mkb_cuda_check(mkb_cu.cuCtxSynchronize(), "synchronize");
}

const mkb_backend mkb_cuda_backend = {
    .name = "cuda",
    .available = cuda_available,
    .describe = mkb_cuda_describe,
    .mem = &mkb_cuda_mem,
    .op_eval = mkb_cuda_op_eval,
    .kernel_eval = NULL,
    .synchronize = cuda_synchronize,
};
