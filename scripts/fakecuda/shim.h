// host emulation of the CUDA device side (for running mkpy's op kernels on the CPU)
#include <cmath>
#include <cstring>
#include <cstdint>
using std::isinf; using std::isnan; using std::isfinite;
struct mkfake_dim3 { unsigned x, y, z; };
static thread_local mkfake_dim3 blockIdx, threadIdx, blockDim, gridDim;
#define __global__
#define __grid_constant__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) alignas(n)
#define __syncthreads() do {} while (0)
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline unsigned atomicCAS(unsigned *p, unsigned c, unsigned v) { unsigned o = *p; if (o == c) *p = v; return o; }
static inline unsigned long long atomicCAS(unsigned long long *p, unsigned long long c, unsigned long long v) { unsigned long long o = *p; if (o == c) *p = v; return o; }
static inline unsigned atomicMax(unsigned *p, unsigned v) { unsigned o = *p; if (v > o) *p = v; return o; }
static inline int atomicAdd(int *p, int v) { int o = *p; *p += v; return o; }
static inline float atomicAdd(float *p, float v) { float o = *p; *p += v; return o; }
// one thread per block: a shuffle reads the caller's own lane; another lane (absent here) reads 0,
// so warp-wide reductions come out wrong (README: what it cannot)
template <class T> static inline T __shfl_sync(unsigned m, T v, int src, int w = 32) {
    (void)m;
    return (int)(threadIdx.x % (unsigned)w) == src % w ? v : T(0);
}
