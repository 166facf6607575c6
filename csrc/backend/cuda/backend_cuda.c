/* The CUDA back-end's table (backend/backend.h). */
#include <stdio.h>

#include "driver.h"
#include "ops_cuda.h"
#include "cuda.h"

static bool cuda_available(void) { return mkb_cuda_load(); }

static int cuda_synchronize(void) {
    if (!mkb_cuda_load()) return 0;
    if (mkb_cuda_enter() < 0) return -1;
    return mkb_cuda_check(mkb_cu.cuCtxSynchronize(), "synchronize");
}

/* The GPU, its driver, NVRTC and cuBLAS, for python -m mkpy. */
static int cuda_describe(char *out, size_t n) {
    int len = mkb_cuda_describe(out, n);
    if (len < 0 || (size_t)len >= n) return len;
    char why[600];
    int maj = 0, min = 0;
    if (mkb_nvrtc_available(why, sizeof why)) {
        mkb_nvrtc_version(&maj, &min);
        len += snprintf(out + len, n - len, "; NVRTC %d.%d (%s)", maj, min, mkb_nvrtc_path());
    } else {
        len += snprintf(out + len, n - len, "; no NVRTC (%s)", why);
    }
    if ((size_t)len < n && mkb_cuda_load()) {
        const char *b = mkb_cublas_why();
        len += snprintf(out + len, n - len, "; %s", b[0] ? b : "cuBLAS found");
    }
    return len;
}

const mkb_backend mkb_cuda_backend = {
    .name = "cuda",
    .available = cuda_available,
    .describe = cuda_describe,
    .mem = &mkb_cuda_mem,
    .op_eval = mkb_cuda_op_eval,
    .kernel_eval = mkb_cuda_kernel_eval,
    .cuda_kernel_eval = mkb_cuda_user_kernel_eval,
    .synchronize = cuda_synchronize,
    .lost = mkb_cuda_lost,
};
