// OpenCL twins of the test corpus's kernels (tests/test_kernel_corpus.py), for the
// "corpus" benchmark section (bench_corpus.py): the same algorithm, the same
// threadgroup (work-group) shape and the same local-memory layout as the Metal
// kernel. Where the Metal kernel uses simd_sum/simd_max, the twin uses a local-memory
// tree reduction (OpenCL 1.2 has no sub-group functions on PoCL's CPU device).
// bfloat16 data travels as ushort and converts by shifting (round to nearest even).

inline float bf2f(ushort b) { return as_float(((uint)b) << 16); }
inline ushort f2bf(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// tiled_matmul: 16x16 tiles, bounds-checked, one output per work-item
__kernel void c_tiled_matmul(__global const float* a, __global const float* b, __global float* c,
                             const int M, const int K, const int N) {
    __local float As[16][16];
    __local float Bs[16][16];
    const int row = get_global_id(1), col = get_global_id(0);
    const int ty = get_local_id(1), tx = get_local_id(0);
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 16) {
        As[ty][tx] = (row < M && k0 + tx < K) ? a[row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? b[(k0 + ty) * N + col] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < 16; k++) acc += As[ty][k] * Bs[k][tx];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row < M && col < N) c[row * N + col] = acc;
}

inline float block_sum_local(float v, __local float* scratch) {
    const uint lid = get_local_id(0), ls = get_local_size(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = ls / 2; off > 0; off >>= 1) {
        if (lid < off) scratch[lid] += scratch[lid + off];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

inline float block_max_local(float v, __local float* scratch) {
    const uint lid = get_local_id(0), ls = get_local_size(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint off = ls / 2; off > 0; off >>= 1) {
        if (lid < off) scratch[lid] = fmax(scratch[lid], scratch[lid + off]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

// rms_norm: one work-group per row (local size a power of two)
__kernel void c_rms_norm(__global const float* x, __global const float* w, __global float* out,
                         __local float* scratch, const int n, const float eps) {
    const uint row = get_group_id(0), lid = get_local_id(0), ls = get_local_size(0);
    float acc = 0.0f;
    for (int i = lid; i < n; i += ls) {
        float v = x[row * n + i];
        acc += v * v;
    }
    float total = block_sum_local(acc, scratch);
    float inv = rsqrt(total / n + eps);
    for (int i = lid; i < n; i += ls) out[row * n + i] = x[row * n + i] * inv * w[i];
}

// softmax_rows: one work-group per row
__kernel void c_softmax_rows(__global const float* x, __global float* out, __local float* scratch, const int n) {
    const uint row = get_group_id(0), lid = get_local_id(0), ls = get_local_size(0);
    float m = -INFINITY;
    for (int i = lid; i < n; i += ls) m = fmax(m, x[row * n + i]);
    m = block_max_local(m, scratch);
    float s = 0.0f;
    for (int i = lid; i < n; i += ls) s += exp(x[row * n + i] - m);
    s = block_sum_local(s, scratch);
    for (int i = lid; i < n; i += ls) out[row * n + i] = exp(x[row * n + i] - m) / s;
}

// tree_sum: one partial sum per work-group
__kernel void c_tree_sum(__global const float* inp, __global float* partial, __local float* shared_, const uint n) {
    const uint lid = get_local_id(0), gid = get_global_id(0);
    shared_[lid] = gid < n ? inp[gid] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = get_local_size(0) / 2; s > 0; s >>= 1) {
        if (lid < s) shared_[lid] += shared_[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) partial[get_group_id(0)] = shared_[0];
}

// bitonic_rows: one work-group per row, padded to the local size with +inf
__kernel void c_bitonic_rows(__global const float* inp, __global float* out, __local float* buf, const int n) {
    const uint row = get_group_id(0), i = get_local_id(0), P = get_local_size(0);
    buf[i] = (int)i < n ? inp[row * n + i] : INFINITY;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint k = 2; k <= P; k <<= 1) {
        for (uint j = k >> 1; j > 0; j >>= 1) {
            uint ixj = i ^ j;
            if (ixj > i) {
                bool ascending = (i & k) == 0;
                float a = buf[i], b = buf[ixj];
                if ((a > b) == ascending) {
                    buf[i] = b;
                    buf[ixj] = a;
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    if ((int)i < n) out[row * n + i] = buf[i];
}

// transpose_tiled: 32x33 tile, 32x8 work-items
__kernel void c_transpose(__global const float* inp, __global float* out, const int R, const int C) {
    __local float tile[32][33];
    const uint bx = get_group_id(0) * 32, by = get_group_id(1) * 32;
    const uint tx = get_local_id(0), ty = get_local_id(1);
    for (uint j = ty; j < 32; j += 8) {
        int r = by + j, c = bx + tx;
        if (r < R && c < C) tile[j][tx] = inp[r * C + c];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint j = ty; j < 32; j += 8) {
        int r = bx + j, c = by + tx;
        if (r < C && c < R) out[r * R + c] = tile[tx][j];
    }
}

inline void atomic_add_float(volatile __global float* p, float v) {
    union { uint u; float f; } old, nu;
    do {
        old.f = *p;
        nu.f = old.f + v;
    } while (atomic_cmpxchg((volatile __global uint*)p, old.u, nu.u) != old.u);
}

// hist_threadgroup_atomics: local bins per work-group, merged with global atomics
#define HNB 64
__kernel void c_hist_tg(__global const float* data, __global const float* weights, __global uint* bins,
                        __global float* wbins, __global uint* bins2, const uint n) {
    __local uint local_bins[HNB];
    __local uint local_bins2[HNB];
    const uint lid = get_local_id(0), tpg = get_local_size(0);
    for (uint b = lid; b < HNB; b += tpg) {
        local_bins[b] = 0;
        local_bins2[b] = 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint i = get_global_id(0); i < n; i += get_global_size(0)) {
        uint b = min((uint)(data[i] * (float)HNB), (uint)(HNB - 1));
        atomic_add(&local_bins[b], 1u);
        atomic_add(&local_bins2[HNB - 1 - b], 2u);
        atomic_add_float(&wbins[b], weights[i]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint b = lid; b < HNB; b += tpg) {
        uint c = local_bins[b];
        if (c) atomic_add(&bins[b], c);
        atomic_add(&bins2[b], local_bins2[b]);
    }
}

// conv1d_shared: blocks of 8 with a halo of 3
__kernel void c_conv1d(__global const float* a, __global const float* b, __global float* out, const uint n,
                       const uint k) {
    __local float shared_a[8 + 4];
    __local float shared_b[4];
    const uint i = get_global_id(0), local_i = get_local_id(0);
    shared_a[local_i] = i < n ? a[i] : 0.0f;
    if (local_i < 3) shared_a[8 + local_i] = i + 8 < n ? a[i + 8] : 0.0f;
    if (local_i < k) shared_b[local_i] = b[local_i];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (i < n) {
        float acc = 0;
        for (uint j = 0; j < k; j++) acc += shared_a[local_i + j] * shared_b[j];
        out[i] = acc * (i % 2 ? 0.5f : 1.0f);
    }
}

// sinkhorn: R x C matrix per work-group, ITERS row/column normalisations, each a
// non-power-of-two tree reduction (the Metal kernel's body comes from a template
// with these constants; here they are -D definitions)
__kernel void c_sinkhorn(__global const float* x, __global float* out) {
    __local float P[SK_R][SK_C];
    __local float red[SK_TG];
    __local float scale[SK_RC];
    const uint tid = get_local_id(0), g = get_group_id(0);
    for (uint i = tid; i < SK_R * SK_C; i += SK_TG) P[i / SK_C][i % SK_C] = exp(x[g * SK_R * SK_C + i]);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int it = 0; it < SK_ITERS; ++it) {
        for (int r = 0; r < SK_R; ++r) {
            red[tid] = tid < SK_C ? P[r][tid] : 0.0f;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (uint m = SK_C; m > 1;) {
                uint h = (m + 1) / 2;
                if (tid < m - h) red[tid] += red[tid + h];
                barrier(CLK_LOCAL_MEM_FENCE);
                m = h;
            }
            if (tid == 0) scale[r] = 1.0f / red[0];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        for (uint i = tid; i < SK_R * SK_C; i += SK_TG) P[i / SK_C][i % SK_C] *= scale[i / SK_C];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = 0; c < SK_C; ++c) {
            red[tid] = tid < SK_R ? P[tid][c] : 0.0f;
            barrier(CLK_LOCAL_MEM_FENCE);
            for (uint m = SK_R; m > 1;) {
                uint h = (m + 1) / 2;
                if (tid < m - h) red[tid] += red[tid + h];
                barrier(CLK_LOCAL_MEM_FENCE);
                m = h;
            }
            if (tid == 0) scale[c] = 1.0f / red[0];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        for (uint i = tid; i < SK_R * SK_C; i += SK_TG) P[i / SK_C][i % SK_C] *= scale[i % SK_C];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (uint i = tid; i < SK_R * SK_C; i += SK_TG) out[g * SK_R * SK_C + i] = P[i / SK_C][i % SK_C];
}

// attention_t0: one query row per work-group, one output dimension per work-item;
// work-item 0 computes the softmax statistics between barriers (bfloat16 data)
#define AD 128
#define ABK 32
__kernel void c_attention_t0(__global const ushort* q, __global const ushort* k, __global const ushort* v,
                             __global const float* scale, __global ushort* out, const int Lk) {
    __local ushort Ks[ABK][AD];
    __local ushort Vs[ABK][AD];
    __local float qs[AD];
    __local float S[ABK];
    __local float stats[3];  // m_run, l_run, corr
    const uint tid = get_local_id(0), row = get_group_id(0);
    qs[tid] = bf2f(q[row * AD + tid]) * scale[0];
    if (tid == 0) {
        stats[0] = -INFINITY;
        stats[1] = 0.0f;
    }
    float acc = 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k0 = 0; k0 < Lk; k0 += ABK) {
        for (uint i = tid; i < ABK * AD; i += AD) {
            int r = k0 + (int)(i / AD);
            Ks[i / AD][i % AD] = r < Lk ? k[r * AD + i % AD] : 0;
            Vs[i / AD][i % AD] = r < Lk ? v[r * AD + i % AD] : 0;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (tid < ABK) {
            float s = 0.0f;
            for (int d = 0; d < AD; d++) s += qs[d] * bf2f(Ks[tid][d]);
            S[tid] = k0 + (int)tid < Lk ? s : -INFINITY;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (tid == 0) {
            float mx = stats[0];
            for (int j = 0; j < ABK; j++) mx = fmax(mx, S[j]);
            float sum = 0.0f;
            for (int j = 0; j < ABK; j++) {
                float p = exp(S[j] - mx);
                S[j] = p;
                sum += p;
            }
            stats[2] = exp(stats[0] - mx);
            stats[1] = stats[1] * stats[2] + sum;
            stats[0] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        acc *= stats[2];
        for (int j = 0; j < ABK; j++) acc += S[j] * bf2f(Vs[j][tid]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    out[row * AD + tid] = f2bf(acc / stats[1]);
}
