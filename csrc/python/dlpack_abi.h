/* DLPack's C ABI (dlpack.h: "dltensor" capsules of version 0.x and the
 * "dltensor_versioned" ones of 1.x), declared here for the export
 * (py_extra.c) and the import (py_convert.c). */
#ifndef MKPY_DLPACK_ABI_H
#define MKPY_DLPACK_ABI_H

#include <stdint.h>

typedef struct {
    int32_t device_type, device_id;
} mk_DLDevice;
typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} mk_DLDataType;
typedef struct {
    void *data;
    mk_DLDevice device;
    int32_t ndim;
    mk_DLDataType dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} mk_DLTensor;
typedef struct mk_DLManagedTensor {
    mk_DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct mk_DLManagedTensor *self);
} mk_DLManagedTensor;
typedef struct mk_DLManagedTensorVersioned {
    struct {
        uint32_t major, minor;
    } version;
    void *manager_ctx;
    void (*deleter)(struct mk_DLManagedTensorVersioned *self);
    uint64_t flags;
    mk_DLTensor dl_tensor;
} mk_DLManagedTensorVersioned;
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_COMPLEX = 5, DL_BOOL = 6 };
enum { DL_CPU = 1, DL_CUDA = 2, DL_METAL = 8, DL_CUDA_MANAGED = 13 };

#endif
