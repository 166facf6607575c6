// What region splitting at barriers would give on this machine: the tiled SGEMM
// and the tree reduction of bench_kernels.py, split by hand the way a compiler
// pass would (each barrier-free region becomes a loop over the threads of the
// threadgroup; values live across a barrier move to per-thread arrays).
// Single thread. Not part of `make bench`; see docs/performance.md.
//   clang++-15 -std=c++17 -O2 [-march=native] region_split.cpp -o rs && ./rs
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// 16x16 threadgroups, two barriers per tile, exactly as SGEMM_SRC. With
// VEC, region 2 runs the per-thread k loop outside the loop over lx, which is
// what vectorising across the threads of a region means (each acc[ly][lx]
// still adds its k terms in order, so the results are the same bits).
template <bool VEC>
static void sgemm_split(const float *A, const float *B, float *C, int N) {
    constexpr int TS = 16;
    for (int gy = 0; gy < N / TS; gy++)
        for (int gx = 0; gx < N / TS; gx++) {
            float As[TS][TS], Bs[TS][TS];
            float acc[TS][TS] = {};  // `acc` lives across barriers: one per thread
            for (int t = 0; t < N; t += TS) {
                for (int ly = 0; ly < TS; ly++)      // region 1: loads
                    for (int lx = 0; lx < TS; lx++) {
                        As[ly][lx] = A[(gy * TS + ly) * N + t + lx];
                        Bs[ly][lx] = B[(t + ly) * N + gx * TS + lx];
                    }
                if (VEC) {
                    for (int ly = 0; ly < TS; ly++)  // region 2, 16 threads per vector
                        for (int k = 0; k < TS; k++)
                            for (int lx = 0; lx < TS; lx++) acc[ly][lx] += As[ly][k] * Bs[k][lx];
                } else {
                    for (int ly = 0; ly < TS; ly++)  // region 2: the k loop, thread by thread
                        for (int lx = 0; lx < TS; lx++)
                            for (int k = 0; k < TS; k++) acc[ly][lx] += As[ly][k] * Bs[k][lx];
                }
            }
            for (int ly = 0; ly < TS; ly++)          // region 3: store
                for (int lx = 0; lx < TS; lx++) C[(gy * TS + ly) * N + gx * TS + lx] = acc[ly][lx];
        }
}

// 1024 groups of 256, grid-stride sums then a tree, exactly as REDUCE_SRC.
// With VEC, region 1 steps all threads through one grid stride at a time
// (the threads of a group read consecutive floats), again the same bits.
template <bool VEC>
static void reduce_split(const float *in, float *partial, unsigned n) {
    constexpr unsigned LS = 256, G = 1024, GSZ = LS * G;
    for (unsigned g = 0; g < G; g++) {
        float scratch[LS];
        if (VEC) {
            for (unsigned lid = 0; lid < LS; lid++) scratch[lid] = 0.0f;
            for (unsigned base = g * LS; base < n; base += GSZ)  // n is a multiple of GSZ here
                for (unsigned lid = 0; lid < LS; lid++) scratch[lid] += in[base + lid];
        } else {
            for (unsigned lid = 0; lid < LS; lid++) {  // region 1, thread by thread
                float s = 0.0f;
                for (unsigned i = g * LS + lid; i < n; i += GSZ) s += in[i];
                scratch[lid] = s;
            }
        }
        for (unsigned off = LS / 2; off > 0; off >>= 1)  // one region per barrier
            for (unsigned lid = 0; lid < off; lid++) scratch[lid] += scratch[lid + off];
        partial[g] = scratch[0];
    }
}

int main() {
    const int N = 1024;
    std::vector<float> A(N * N), B(N * N), C(N * N);
    for (int i = 0; i < N * N; i++) { A[i] = (float)(i % 7) - 3; B[i] = (float)(i % 5) - 2; }
    double ref = 0;  // check one element
    for (int k = 0; k < N; k++) ref += (double)A[5 * N + k] * B[k * N + 7];
    for (int vec = 0; vec < 2; vec++) {
        double best = 1e9;
        for (int r = 0; r < 5; r++) {
            double t = now();
            (vec ? sgemm_split<true> : sgemm_split<false>)(A.data(), B.data(), C.data(), N);
            best = std::fmin(best, now() - t);
        }
        printf("tiled sgemm %d, region-split%s: %.2f GFLOP/s (check %s)\n", N,
               vec ? ", vectorised across threads" : ", thread by thread", 2.0 * N * N * N / best / 1e9,
               std::fabs(ref - C[5 * N + 7]) < 1e-3 ? "ok" : "FAILED");
    }

    const unsigned n = 1u << 24;
    std::vector<float> x(n), partial(1024);
    for (unsigned i = 0; i < n; i++) x[i] = (float)(i % 3);
    for (int vec = 0; vec < 2; vec++) {
        double best = 1e9;
        for (int r = 0; r < 5; r++) {
            double t = now();
            (vec ? reduce_split<true> : reduce_split<false>)(x.data(), partial.data(), n);
            best = std::fmin(best, now() - t);
        }
        double s = 0;
        for (float p : partial) s += p;
        printf("tree reduce 16M, region-split%s: %.2f GB/s (check %s)\n",
               vec ? ", vectorised across threads" : ", thread by thread", 4.0 * n / best / 1e9,
               std::fabs(s - (double)(n / 3) * 3) < 1e3 ? "ok" : "FAILED");
    }
    return 0;
}
