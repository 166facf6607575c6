// Thread attributes and the plain per-threadgroup loop of a compiled kernel.
// Included after mkpy_metal.h by the C++ that mkpy generates for every kernel.
#ifndef MKPY_DISPATCH_H
#define MKPY_DISPATCH_H

#include "mkpy_launch.h"

/* struct mkpy_thread_attrs: Metal's values of every kernel attribute for one
 * thread (mkpy_launch.h, shared with the CUDA target). */

namespace mkpy {

inline metal::uint3 u3(const uint32_t v[3]) { return metal::uint3(v[0], v[1], v[2]); }

// Fills the attributes that are the same for every thread of a launch.
inline void launch_attrs(const mkpy_launch *L, mkpy_thread_attrs &t) {
    const unsigned requested = L->tg[0] * L->tg[1] * L->tg[2];
    for (int d = 0; d < 3; d++) {
        t.dispatch_threads_per_threadgroup[d] = L->tg[d];
        t.grid_origin[d] = 0;
        t.grid_size[d] = L->grid[d];
        t.threads_per_grid[d] = L->grid[d];
        t.threadgroups_per_grid[d] = L->ngroups[d];
    }
    t.thread_execution_width = MKPY_SIMD_WIDTH;
    t.threads_per_simdgroup = MKPY_SIMD_WIDTH;
    t.dispatch_simdgroups_per_threadgroup = (requested + MKPY_SIMD_WIDTH - 1) / MKPY_SIMD_WIDTH;
    t.dispatch_quadgroups_per_threadgroup = (requested + 3) / 4;
}

// The coordinates of threadgroup g (g counts along x first).
inline void group_coords(const mkpy_launch *L, uint64_t g, uint32_t b[3]) {
    const unsigned nx = L->ngroups[0], ny = L->ngroups[1];
    b[0] = (unsigned)(g % nx);
    b[1] = (unsigned)((g / nx) % ny);
    b[2] = (unsigned)(g / ((uint64_t)nx * ny));
}

// Fills the attributes of the threadgroup at coordinates b; returns its thread count.
inline unsigned group_attrs_at(const mkpy_launch *L, const uint32_t b[3], mkpy_thread_attrs &t) {
    unsigned count = 1;
    for (int d = 0; d < 3; d++) {
        // the last threadgroups along a dimension may be partial (non-uniform)
        unsigned a = mkpy_group_extent(L->grid[d], L->tg[d], b[d]);
        t.threadgroup_position_in_grid[d] = b[d];
        t.threads_per_threadgroup[d] = a;
        count *= a;
    }
    t.simdgroups_per_threadgroup = (count + MKPY_SIMD_WIDTH - 1) / MKPY_SIMD_WIDTH;
    t.quadgroups_per_threadgroup = (count + 3) / 4;
    return count;
}

// Fills the attributes of threadgroup g; returns its thread count.
inline unsigned group_attrs(const mkpy_launch *L, uint64_t g, mkpy_thread_attrs &t) {
    uint32_t b[3];
    group_coords(L, g, b);
    return group_attrs_at(L, b, t);
}

// Fills the attributes of the thread with index `index` in its threadgroup.
inline void thread_attrs(const mkpy_launch *L, unsigned index, mkpy_thread_attrs &t) {
    const unsigned ax = t.threads_per_threadgroup[0], ay = t.threads_per_threadgroup[1];
    const unsigned l[3] = {index % ax, (index / ax) % ay, index / (ax * ay)};
    for (int d = 0; d < 3; d++) {
        t.thread_position_in_threadgroup[d] = l[d];
        t.thread_position_in_grid[d] = t.threadgroup_position_in_grid[d] * L->tg[d] + l[d];
    }
    t.thread_index_in_threadgroup = index;
    t.simdgroup_index_in_threadgroup = index / MKPY_SIMD_WIDTH;
    t.thread_index_in_simdgroup = index % MKPY_SIMD_WIDTH;
    t.quadgroup_index_in_threadgroup = index / 4;
    t.thread_index_in_quadgroup = index % 4;
}

// The attribute bits (MKPY_ATTR_*, MKPY_ATTRS_LAUNCH/GROUP) are in mkpy_launch.h.


// The attributes in M of the thread at position (x, y, z), index i, of the
// threadgroup at coordinates b (the others are left as they are): the
// lockstep engine's thread function.
template <uint32_t M>
inline void attrs_at(const mkpy_launch *L, const uint32_t b[3], unsigned i, unsigned x, unsigned y, unsigned z,
                     mkpy_thread_attrs &t) {
    if constexpr ((M & MKPY_ATTRS_LAUNCH) != 0) launch_attrs(L, t);
    if constexpr ((M & MKPY_ATTRS_GROUP) != 0) group_attrs_at(L, b, t);
    const unsigned l[3] = {x, y, z};
    for (int d = 0; d < 3; d++) {
        if constexpr ((M & MKPY_ATTR_THREAD_POSITION_IN_THREADGROUP) != 0) t.thread_position_in_threadgroup[d] = l[d];
        if constexpr ((M & MKPY_ATTR_THREAD_POSITION_IN_GRID) != 0) t.thread_position_in_grid[d] = b[d] * L->tg[d] + l[d];
    }
    if constexpr ((M & MKPY_ATTR_THREAD_INDEX_IN_THREADGROUP) != 0) t.thread_index_in_threadgroup = i;
    if constexpr ((M & MKPY_ATTR_SIMDGROUP_INDEX_IN_THREADGROUP) != 0) t.simdgroup_index_in_threadgroup = i / MKPY_SIMD_WIDTH;
    if constexpr ((M & MKPY_ATTR_THREAD_INDEX_IN_SIMDGROUP) != 0) t.thread_index_in_simdgroup = i % MKPY_SIMD_WIDTH;
    if constexpr ((M & MKPY_ATTR_QUADGROUP_INDEX_IN_THREADGROUP) != 0) t.quadgroup_index_in_threadgroup = i / 4;
    if constexpr ((M & MKPY_ATTR_THREAD_INDEX_IN_QUADGROUP) != 0) t.thread_index_in_quadgroup = i % 4;
}

// Runs fn(attrs) for every thread of the launch's threadgroups, one group at
// a time, threads in thread_index_in_threadgroup order, with the attributes
// in M set (the others are 0). The attributes of a group are set once; each
// thread then takes a fresh copy in which only its position changes, and the
// innermost loop walks one row of the group by offset in the row (its
// position in the grid, ox + x, stays below 2^32; the row's end may not). So
// no division runs per thread, and clang can vectorise the loop across
// threads when the kernel body allows it.
template <uint32_t M = MKPY_ATTRS_ALL, typename F>
inline void run_threadgroups(const mkpy_launch *L, F &&fn) {
    mkpy_thread_attrs g_attrs = {};
    if constexpr ((M & MKPY_ATTRS_LAUNCH) != 0) launch_attrs(L, g_attrs);
    for (uint64_t g = L->group_begin; g < L->group_end; g++) {
        uint32_t b[3];
        group_coords(L, g, b);
        if constexpr ((M & MKPY_ATTRS_GROUP) != 0) group_attrs_at(L, b, g_attrs);
        const unsigned ax = mkpy_group_extent(L->grid[0], L->tg[0], b[0]),
                       ay = mkpy_group_extent(L->grid[1], L->tg[1], b[1]),
                       az = mkpy_group_extent(L->grid[2], L->tg[2], b[2]);
        const unsigned ox = b[0] * L->tg[0], oy = b[1] * L->tg[1], oz = b[2] * L->tg[2];
        [[maybe_unused]] unsigned row = 0; // thread_index_in_threadgroup of the row's first thread
        for (unsigned z = 0; z < az; z++)
            for (unsigned y = 0; y < ay; y++, row += ax) {
                // by offset in the row: ox + ax may be 2^32 (a grid near 2^32)
                for (unsigned x = 0; x < ax; x++) {
                    [[maybe_unused]] const unsigned px = ox + x;
                    mkpy_thread_attrs t = g_attrs;
                    [[maybe_unused]] const unsigned index = row + x;
                    if constexpr ((M & MKPY_ATTR_THREAD_POSITION_IN_THREADGROUP) != 0) {
                        t.thread_position_in_threadgroup[0] = px - ox;
                        t.thread_position_in_threadgroup[1] = y;
                        t.thread_position_in_threadgroup[2] = z;
                    }
                    if constexpr ((M & MKPY_ATTR_THREAD_POSITION_IN_GRID) != 0) {
                        t.thread_position_in_grid[0] = px;
                        t.thread_position_in_grid[1] = oy + y;
                        t.thread_position_in_grid[2] = oz + z;
                    }
                    if constexpr ((M & MKPY_ATTR_THREAD_INDEX_IN_THREADGROUP) != 0) t.thread_index_in_threadgroup = index;
                    if constexpr ((M & MKPY_ATTR_SIMDGROUP_INDEX_IN_THREADGROUP) != 0)
                        t.simdgroup_index_in_threadgroup = index / MKPY_SIMD_WIDTH;
                    if constexpr ((M & MKPY_ATTR_THREAD_INDEX_IN_SIMDGROUP) != 0)
                        t.thread_index_in_simdgroup = index % MKPY_SIMD_WIDTH;
                    if constexpr ((M & MKPY_ATTR_QUADGROUP_INDEX_IN_THREADGROUP) != 0)
                        t.quadgroup_index_in_threadgroup = index / 4;
                    if constexpr ((M & MKPY_ATTR_THREAD_INDEX_IN_QUADGROUP) != 0) t.thread_index_in_quadgroup = index % 4;
                    fn(t);
                }
            }
    }
}

} // namespace mkpy

#endif
