// mkpy's stand-in for MLX's mlx/backend/cuda/device/utils.cuh, the header
// that mx.fast.cuda_kernel's generated program includes first (MLX compiles
// its own copy into libmlx; mkpy writes the part kernels use). It declares, in
// namespace mlx::core::cu: the parameter types of the generated signature
// (Shape, Strides, complex64_t), the constants MAX_NDIM and WARP_SIZE, and
// elem_to_loc, the strided offset of a row-major element index. The
// half-precision types (__half, __nv_bfloat16) come from the CUDA headers.
// docs/kernels.md, "mx.fast.cuda_kernel".
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/array>
#include <cuda/std/complex>
#include <cuda/std/cstdint>
#include <cuda/std/limits>
#include <cuda/std/tuple>

#define MAX_NDIM 10
#define WARP_SIZE 32

namespace mlx::core::cu {

// an input's shape and strides (in elements), as the launch passes them: ndim
// entries, the rest zero
using Shape = cuda::std::array<int32_t, MAX_NDIM>;
using Strides = cuda::std::array<int64_t, MAX_NDIM>;
using complex64_t = cuda::std::complex<float>;

// The offset of element `elem` (its index in row-major order) of an array of
// this shape and strides.
template <typename IdxT = int64_t>
inline __host__ __device__ IdxT elem_to_loc(IdxT elem, const int *shape, const int64_t *strides, int ndim) {
    IdxT loc = 0;
    for (int d = ndim - 1; d >= 0 && elem > 0; --d) {
        loc += (elem % shape[d]) * IdxT(strides[d]);
        elem /= shape[d];
    }
    return loc;
}

// The same for a number of dimensions fixed at compile time.
template <int NDIM, typename IdxT = int64_t>
inline __host__ __device__ IdxT elem_to_loc_nd(IdxT elem, const int *shape, const int64_t *strides) {
    IdxT loc = 0;
#pragma unroll
    for (int d = NDIM - 1; d >= 0; --d) {
        loc += (elem % shape[d]) * IdxT(strides[d]);
        elem /= shape[d];
    }
    return loc;
}

// The offsets of one element in two arrays of the same shape.
template <typename IdxT = int64_t>
inline __host__ __device__ cuda::std::tuple<IdxT, IdxT> elem_to_loc(IdxT elem, const int *shape, const int64_t *a_strides,
                                                               const int64_t *b_strides, int ndim) {
    IdxT a = 0, b = 0;
    for (int d = ndim - 1; d >= 0; --d) {
        const IdxT i = elem % shape[d];
        a += i * IdxT(a_strides[d]);
        b += i * IdxT(b_strides[d]);
        elem /= shape[d];
    }
    return cuda::std::make_tuple(a, b);
}

} // namespace mlx::core::cu
