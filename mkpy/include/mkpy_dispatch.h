// The per-threadgroup loop of a compiled kernel: walks the threadgroups a
// launch hands it and, in each, every thread in Metal's order, computing
// each attribute's Metal value. Included after mkpy_metal.h by the C++ that
// mkpy generates for every kernel.
#ifndef MKPY_DISPATCH_H
#define MKPY_DISPATCH_H

#include "mkpy_launch.h"

namespace mkpy {

struct thread_attrs {
    metal::uint3 dispatch_threads_per_threadgroup, grid_origin, grid_size, thread_position_in_grid,
        thread_position_in_threadgroup, threadgroup_position_in_grid, threadgroups_per_grid, threads_per_grid,
        threads_per_threadgroup;
    unsigned dispatch_quadgroups_per_threadgroup, dispatch_simdgroups_per_threadgroup,
        quadgroup_index_in_threadgroup, quadgroups_per_threadgroup, simdgroup_index_in_threadgroup,
        simdgroups_per_threadgroup, thread_execution_width, thread_index_in_quadgroup, thread_index_in_simdgroup,
        thread_index_in_threadgroup, threads_per_simdgroup;
};

// Runs fn(attrs) for every thread of the launch's threadgroups, one group at
// a time. Threads of a group run in thread_index_in_threadgroup order.
template <typename F>
inline void run_threadgroups(const mkpy_launch *L, F &&fn) {
    thread_attrs t;
    const unsigned gx = L->grid[0], gy = L->grid[1], gz = L->grid[2];
    const unsigned tx = L->tg[0], ty = L->tg[1], tz = L->tg[2];
    const unsigned nx = L->ngroups[0], ny = L->ngroups[1];
    const unsigned requested = tx * ty * tz;
    t.dispatch_threads_per_threadgroup = metal::uint3(tx, ty, tz);
    t.grid_origin = metal::uint3(0, 0, 0);
    t.grid_size = metal::uint3(gx, gy, gz);
    t.threads_per_grid = t.grid_size;
    t.threadgroups_per_grid = metal::uint3(L->ngroups[0], L->ngroups[1], L->ngroups[2]);
    t.thread_execution_width = 32;
    t.threads_per_simdgroup = 32;
    t.dispatch_simdgroups_per_threadgroup = (requested + 31) / 32;
    t.dispatch_quadgroups_per_threadgroup = (requested + 3) / 4;
    for (uint64_t g = L->group_begin; g < L->group_end; g++) {
        const unsigned bx = (unsigned)(g % nx), by = (unsigned)((g / nx) % ny), bz = (unsigned)(g / ((uint64_t)nx * ny));
        // the last threadgroups along a dimension may be partial (non-uniform)
        const unsigned ax = (bx + 1) * tx <= gx ? tx : gx - bx * tx;
        const unsigned ay = (by + 1) * ty <= gy ? ty : gy - by * ty;
        const unsigned az = (bz + 1) * tz <= gz ? tz : gz - bz * tz;
        const unsigned count = ax * ay * az;
        t.threadgroup_position_in_grid = metal::uint3(bx, by, bz);
        t.threads_per_threadgroup = metal::uint3(ax, ay, az);
        t.simdgroups_per_threadgroup = (count + 31) / 32;
        t.quadgroups_per_threadgroup = (count + 3) / 4;
        unsigned index = 0;
        for (unsigned lz = 0; lz < az; lz++)
            for (unsigned ly = 0; ly < ay; ly++)
                for (unsigned lx = 0; lx < ax; lx++, index++) {
                    t.thread_position_in_threadgroup = metal::uint3(lx, ly, lz);
                    t.thread_position_in_grid = metal::uint3(bx * tx + lx, by * ty + ly, bz * tz + lz);
                    t.thread_index_in_threadgroup = index;
                    t.simdgroup_index_in_threadgroup = index / 32;
                    t.thread_index_in_simdgroup = index % 32;
                    t.quadgroup_index_in_threadgroup = index / 4;
                    t.thread_index_in_quadgroup = index % 4;
                    fn(t);
                }
    }
}

} // namespace mkpy

#endif
