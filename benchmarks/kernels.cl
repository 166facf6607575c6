// OpenCL kernels for the PoCL side of the benchmarks (OpenCL C 1.2).
// vexp, sgemm_tiled and reduce_sum are the anchor kernels of the project's kernel research
// (research/pocl_anchor_kernels.cl), copied verbatim; tiny and rms_norm are added here.
__kernel void vexp(__global const float* restrict in, __global float* restrict out, const uint n) {
    uint i = get_global_id(0);
    if (i < n) out[i] = exp(in[i]);
}

#define TS 16
// C = A*B, row-major, N x N, N multiple of TS. local size (TS,TS)
__kernel void sgemm_tiled(__global const float* restrict A, __global const float* restrict B,
                          __global float* restrict C, const int N) {
    __local float As[TS][TS];
    __local float Bs[TS][TS];
    const int lx = get_local_id(0), ly = get_local_id(1);
    const int col = get_global_id(0), row = get_global_id(1);
    float acc = 0.0f;
    for (int t = 0; t < N; t += TS) {
        As[ly][lx] = A[row * N + (t + lx)];
        Bs[ly][lx] = B[(t + ly) * N + col];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TS; ++k)
            acc += As[ly][k] * Bs[k][lx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    C[row * N + col] = acc;
}

// Work-group tree reduction; each WG writes one partial sum. local size = LS (power of 2).
// Each work-item first accumulates a grid-stride loop.
__kernel void reduce_sum(__global const float* restrict in, __global float* restrict partial,
                         __local float* scratch, const uint n) {
    uint lid = get_local_id(0);
    uint gsz = get_global_size(0);
    float s = 0.0f;
    for (uint i = get_global_id(0); i < n; i += gsz) s += in[i];
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = get_local_size(0) / 2; off > 0; off >>= 1) {
        if (lid < off) scratch[lid] += scratch[lid + off];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) partial[get_group_id(0)] = scratch[0];
}

// One work-item: the launch-path reference for a cached 1-thread kernel.
__kernel void tiny(__global const float* restrict in, __global float* restrict out) {
    out[0] = in[0] + 1.0f;
}

// RMS norm over rows, one work-group per row: each work-item sums squares over a
// column stride, a local-memory tree reduction combines them (the Metal version
// uses simd_sum), then every work-item scales its columns.
// out[r, c] = x[r, c] * rsqrt(mean(x[r, :]^2) + eps) * w[c]. local size = LS (power of 2).
__kernel void rms_norm(__global const float* restrict x, __global const float* restrict w,
                       __global float* restrict out, __local float* scratch,
                       const uint cols, const float eps) {
    const uint lid = get_local_id(0), ls = get_local_size(0);
    const size_t base = (size_t)get_group_id(0) * cols;
    float s = 0.0f;
    for (uint c = lid; c < cols; c += ls) {
        float v = x[base + c];
        s += v * v;
    }
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = ls / 2; off > 0; off >>= 1) {
        if (lid < off) scratch[lid] += scratch[lid + off];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float inv = rsqrt(scratch[0] / (float)cols + eps);
    for (uint c = lid; c < cols; c += ls)
        out[base + c] = x[base + c] * inv * w[c];
}

// Row sums, one 256-work-item group per row: a column-stride loop, then a
// local-memory tree reduction (the Metal version uses simd_sum twice).
__kernel void row_sum(__global const float* restrict x, __global float* restrict out,
                      __local float* scratch, const uint cols) {
    const uint lid = get_local_id(0), ls = get_local_size(0);
    const size_t base = (size_t)get_group_id(0) * cols;
    float s = 0.0f;
    for (uint c = lid; c < cols; c += ls) s += x[base + c];
    scratch[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = ls / 2; off > 0; off >>= 1) {
        if (lid < off) scratch[lid] += scratch[lid + off];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[get_group_id(0)] = scratch[0];
}

// C = A*B with (16, 16, 3) work-groups (768 work-items): each z-slice takes a
// third of every 48-wide k step, and the slices' partial sums meet in local
// memory at the end. N is a multiple of 48.
#define KZ 3
__kernel void sgemm_3d(__global const float* restrict A, __global const float* restrict B,
                       __global float* restrict C, const int N) {
    __local float As[KZ][TS][TS];
    __local float Bs[KZ][TS][TS];
    __local float part[KZ][TS][TS];
    const int lx = get_local_id(0), ly = get_local_id(1), lz = get_local_id(2);
    const int col = get_global_id(0), row = get_global_id(1);
    float acc = 0.0f;
    for (int t = 0; t < N; t += TS * KZ) {
        As[lz][ly][lx] = A[row * N + (t + lz * TS + lx)];
        Bs[lz][ly][lx] = B[(t + lz * TS + ly) * N + col];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TS; ++k)
            acc += As[lz][ly][k] * Bs[lz][k][lx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    part[lz][ly][lx] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lz == 0) C[row * N + col] = part[0][ly][lx] + part[1][ly][lx] + part[2][ly][lx];
}
