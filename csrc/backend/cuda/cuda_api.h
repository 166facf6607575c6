/* The CUDA driver API entry points mkpy uses, declared from NVIDIA's
 * documented ABI (cuda.h), so that the build needs no CUDA header and no
 * CUDA library: libcuda.so.1 is loaded with dlopen at run time (driver.c),
 * as MLX does. Only what driver.c calls is here. */
#ifndef MKB_CUDA_API_H
#define MKB_CUDA_API_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
};
enum {
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};
enum {
    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
    CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

/* name in libcuda, (parameters); each returns CUresult. X-macro: driver.h makes a pointer of each */
#define MKB_CUDA_FUNCS(X)                                                                                   \
    X(cuInit, (unsigned))                                                                       \
    X(cuDriverGetVersion, (int *))                                                              \
    X(cuDeviceGetCount, (int *))                                                                \
    X(cuDeviceGet, (CUdevice *, int))                                                           \
    X(cuDeviceGetName, (char *, int, CUdevice))                                                 \
    X(cuDeviceGetAttribute, (int *, int, CUdevice))                                             \
    X(cuDeviceTotalMem_v2, (size_t *, CUdevice))                                                \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                                        \
    X(cuDevicePrimaryCtxReset_v2, (CUdevice))                                                   \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice))                                                 \
    X(cuCtxSetCurrent, (CUcontext))                                                             \
    X(cuCtxSynchronize, (void))                                                                 \
    X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                                                   \
    X(cuMemFree_v2, (CUdeviceptr))                                                              \
    X(cuMemGetInfo_v2, (size_t *, size_t *))                                                    \
    X(cuMemcpyHtoD_v2, (CUdeviceptr, const void *, size_t))                                     \
    X(cuMemcpyDtoH_v2, (void *, CUdeviceptr, size_t))                                          \
    X(cuMemcpyDtoD_v2, (CUdeviceptr, CUdeviceptr, size_t))                                     \
    X(cuMemsetD8_v2, (CUdeviceptr, unsigned char, size_t))                                      \
    X(cuMemsetD16_v2, (CUdeviceptr, unsigned short, size_t))                                    \
    X(cuMemsetD32_v2, (CUdeviceptr, unsigned, size_t))                                          \
    X(cuModuleLoadData, (CUmodule *, const void *))                                             \
    X(cuModuleUnload, (CUmodule))                                                               \
    X(cuModuleGetFunction, (CUfunction *, CUmodule, const char *))                              \
    X(cuFuncGetAttribute, (int *, int, CUfunction))                                             \
    X(cuFuncSetAttribute, (CUfunction, int, int))                                               \
    X(cuLaunchKernel, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,  \
                                   unsigned, CUstream, void **, void **))                                   \
    X(cuStreamQuery, (CUstream))                                                                \
    X(cuMemHostAlloc, (void **, size_t, unsigned))                                              \
    X(cuMemHostGetDevicePointer_v2, (CUdeviceptr *, void *, unsigned))                          \
    X(cuModuleGetGlobal_v2, (CUdeviceptr *, size_t *, CUmodule, const char *))                  \
    X(cuGetErrorName, (CUresult, const char **))                                                \
    X(cuGetErrorString, (CUresult, const char **))

#endif
