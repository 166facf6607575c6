"""Guide 004 (Comprehensive Guide to Using Metal in MLX), "5.2 Tiled GEMM core (AxB->C)",
"2) Thread Indices" (2-D threadgroups, lid.x/lid.y) and "Hardware-aware tiling".

The guide points at a gemm_kernels.py it does not show; this is the kernel it describes:
TILE x TILE threadgroups (16 x 16 = 256 threads by default), both tiles staged in threadgroup
memory, a barrier after loading and another before the next load, and FMAs across the tile.
The tile size is a template argument, so it can come from `mx.metal.device_info()` or an
environment override (the guide's METALFAISS_GEMM_TILE_*), one compiled kernel per size.
Checked against `a @ b`.
"""
import os
import sys

import mkpy as mx

GEMM_SOURCE = """
    uint2 lid = uint2(thread_position_in_threadgroup.xy);
    uint2 tg = uint2(threadgroup_position_in_grid.xy);
    uint M = A_shape[0];
    uint K = A_shape[1];
    uint N = B_shape[1];
    uint row = tg.y * TILE + lid.y;
    uint col = tg.x * TILE + lid.x;
    threadgroup float tileA[TILE][TILE];
    threadgroup float tileB[TILE][TILE];

    float acc = 0.0f;
    for (uint k0 = 0; k0 < K; k0 += TILE) {
        tileA[lid.y][lid.x] = (row < M && k0 + lid.x < K) ? (float)A[row * K + k0 + lid.x] : 0.0f;
        tileB[lid.y][lid.x] = (k0 + lid.y < K && col < N) ? (float)B[(k0 + lid.y) * N + col] : 0.0f;
        threadgroup_barrier(mem_flags::mem_threadgroup);   // tiles loaded
        for (uint k = 0; k < TILE; k++) {
            acc = fma(tileA[lid.y][k], tileB[k][lid.x], acc);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);   // done reading before the next load
    }
    if (row < M && col < N) C[row * N + col] = (T)acc;
"""
gemm_kernel = mx.fast.metal_kernel(name="gemm_tiled", input_names=["A", "B"], output_names=["C"],
                                   source=GEMM_SOURCE)


def ceil_mul(n, k):
    return (n + k - 1) // k * k


def gemm(a, b, tile=None):
    if tile is None:
        tile = int(os.environ.get("METALFAISS_GEMM_TILE_M", 16))
    M, K = a.shape
    _, N = b.shape
    (c,) = gemm_kernel(inputs=[a, b], template=[("T", a.dtype), ("TILE", tile)],
                       grid=(ceil_mul(N, tile), ceil_mul(M, tile), 1), threadgroup=(tile, tile, 1),
                       output_shapes=[(M, N)], output_dtypes=[a.dtype])
    return c


print("device:", mx.metal.device_info()["device_name"])
ok = True
for (M, K, N), tile in [((64, 64, 64), None), ((37, 50, 29), 16), ((100, 33, 70), 8), ((65, 96, 40), 32)]:
    a = mx.random.normal((M, K), key=mx.random.key(M))
    b = mx.random.normal((K, N), key=mx.random.key(N))
    c = gemm(a, b, tile)
    good = mx.allclose(c, a @ b, rtol=1e-4, atol=1e-4).item()
    print(f"({M}x{K}) @ ({K}x{N}) with {tile or 16}x{tile or 16} tiles: matches a @ b: {good}")
    ok = ok and good
print("tiled GEMM kernel matches a @ b:", ok)
sys.exit(0 if ok else 1)
