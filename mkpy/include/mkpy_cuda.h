// mkpy_cuda.h: the runtime header of a Metal kernel compiled for an NVIDIA GPU
// by NVRTC (csrc/backend/cuda/). It holds what mkpy_metal.h + mkpy_coop.h +
// mkpy_dispatch.h hold for the CPU:
//   - Metal's types and library: mkpy_metal.h itself, shared with the CPU
//     (NVRTC runs with -default-device, so its unannotated functions are
//     device functions; mkpy_cuda_std.h stands in for the system headers
//     NVRTC lacks and renames the Metal names CUDA also declares globally);
//   - the thread attributes, from the launch ABI (mkpy_cuda_launch.h);
//   - barriers, SIMD-group and quad-group functions on warp intrinsics,
//     atomics, simdgroup matrices (this file).
// A threadgroup is a block and a SIMD-group a warp (32 lanes on both): Metal's
// thread_index_in_simdgroup is the CUDA lane, because threads take their Metal
// position from their linear index in the block (one-dimensional in mkpy's
// launches, three-dimensional in MLX's cuda_kernel's: mlx_thread_attrs).
//
// SIMD-group functions work on the lanes active at the call (simd_mask():
// __activemask(), or Metal's active mask where the translation tracks it, in
// kernels with SIMD-group functions in divergent code: the SIMT guards below),
// as the CPU engines do on the lanes at the same call site; reductions and
// prefix sums combine the lanes' values in lane order, exactly as the CPU
// engines do, so float results equal theirs bit for bit.
#ifndef MKPY_CUDA_H
#define MKPY_CUDA_H

#ifndef __CUDACC_RTC__
#error "mkpy_cuda.h is compiled by NVRTC (mkpy's CUDA back-end)"
#endif

// Pieces a kernel may leave out (backend/cuda/parts.c decides from the names
// its text uses; every piece is in without the macros, as in hosted mode):
//   MKPY_CUDA_NO_SIMD      SIMD-group and quad-group functions, votes
//   MKPY_CUDA_NO_BARRIERS  threadgroup_barrier, simdgroup_barrier
//   MKPY_CUDA_NO_ATOMICS   atomic<T> and its functions
//   MKPY_CUDA_NO_MATRIX    simdgroup_matrix
// and mkpy_metal.h's (MKPY_METAL_NO_MATH, MKPY_METAL_NO_MLX,
// MKPY_METAL_SWIZZLES). Each is a region `#ifndef MACRO ... #endif` that
// parts.c reads to learn the piece's names.
#if defined(MKPY_CUDA_NO_SIMD) && !defined(MKPY_CUDA_NO_MATRIX)
#error "simdgroup_matrix needs the SIMD-group functions (MKPY_CUDA_NO_SIMD)"
#endif
#if defined(MKPY_METAL_NO_MATH) && !defined(MKPY_CUDA_NO_SIMD)
#error "the SIMD-group functions need the math functions (MKPY_METAL_NO_MATH)"
#endif

#include "mkpy_metal.h"
#include "mkpy_launch.h"
#include "mkpy_cuda_launch.h"

// The host's words for this module (mkpy_cuda_launch.h): set when the module is loaded.
extern "C" {
__constant__ struct mkpy_cuda_globals mkpy_cuda_g;
}

namespace mkpy {

// ------------------------------------------------------------ reports
// The first problem found wins the claim and fills the host's report, which
// the host reads after the launch; the thread then exits. Out of line and
// known not to return: a check's branch to it costs the caller nothing more
// (no reconvergence point, nothing saved around a call), so loops with
// barriers keep the shape and registers they have without the check.
// Hosted by MLX's cuda_kernel (mkpy.cuda.metal_kernel) there is no report to fill
// (MLX does not set mkpy_cuda_g): the kernel traps, and MLX raises CUDA's error
// at its next synchronization.
[[noreturn]] __noinline__ void report(unsigned code, unsigned a, unsigned b, unsigned long long group) {
#ifdef MKPY_CUDA_HOSTED
    (void)code, (void)a, (void)b, (void)group;
    __trap();
#endif
    unsigned *claim = (unsigned *)mkpy_cuda_g.claim;
    volatile struct mkpy_cuda_report *r = (volatile struct mkpy_cuda_report *)mkpy_cuda_g.report;
    if (claim && r && atomicCAS(claim, 0u, 1u) == 0u) {
        r->site[0] = a;
        r->site[1] = b;
        r->group = group;
        __threadfence_system();
        r->code = code;
        __threadfence_system();
    }
    asm volatile("exit;");
    __builtin_unreachable();
}

// Barrier divergence (Metal: undefined; the CPU engines: an error naming both
// barriers). Each thread writes its barrier's site into the slot of this
// barrier instance and reads it back after the barrier: a different value
// means threads of the block met at different barriers. Two slots, used in
// turn (each thread keeps its own parity), so that a fast thread's write for
// the next barrier never lands before a slow thread's read of this one.
__shared__ unsigned barrier_slot[2];
__shared__ unsigned char barrier_parity[1024];
// The thread's linear index in its block: threadIdx.x in mkpy's one-dimensional
// blocks; MLX's cuda_kernel launches three-dimensional ones (hosted mode).
inline unsigned block_thread() {
#ifdef MKPY_CUDA_HOSTED
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
#else
    return threadIdx.x;
#endif
}
inline void barrier_init() { barrier_parity[block_thread()] = 0; }
// The block's linear index in its launch (a report's group).
inline unsigned long long block_id() {
    return blockIdx.x + (unsigned long long)gridDim.x * (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
}


inline metal::uint3 u3(const uint32_t v[3]) { return metal::uint3(v[0], v[1], v[2]); }

// The lane of this thread in its warp. A block of mkpy's own launches is
// one-dimensional, but MLX's cuda_kernel launches three-dimensional ones (where
// CUDA numbers the lanes by the linear thread index): the lane register
// serves both.
inline unsigned lane_id() {
    unsigned lane;
    asm("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

// Metal's attributes of the thread at l[3] in threadgroup b[3] of extent a[3] (count threads; its
// linear index `index`), for a dispatch of grid[3] threads in threadgroups of tg[3], ngroups[3] of
// them.
template <uint32_t M = MKPY_ATTRS_ALL>
inline void set_attrs(const uint32_t grid[3], const uint32_t tg[3], const uint32_t ngroups[3], const uint32_t b[3],
                      const uint32_t a[3], const uint32_t l[3], unsigned index, unsigned count,
                      mkpy_thread_attrs &t) {
#define MKPY_SET(bit, field, value)                                                                            \
    if constexpr ((M & (bit)) != 0) t.field = (value)
    for (int d = 0; d < 3; d++) {
        MKPY_SET(MKPY_ATTR_DISPATCH_THREADS_PER_THREADGROUP, dispatch_threads_per_threadgroup[d], tg[d]);
        MKPY_SET(MKPY_ATTR_GRID_ORIGIN, grid_origin[d], 0);
        MKPY_SET(MKPY_ATTR_GRID_SIZE, grid_size[d], grid[d]);
        MKPY_SET(MKPY_ATTR_THREADS_PER_GRID, threads_per_grid[d], grid[d]);
        MKPY_SET(MKPY_ATTR_THREADGROUPS_PER_GRID, threadgroups_per_grid[d], ngroups[d]);
        MKPY_SET(MKPY_ATTR_THREADGROUP_POSITION_IN_GRID, threadgroup_position_in_grid[d], b[d]);
        MKPY_SET(MKPY_ATTR_THREADS_PER_THREADGROUP, threads_per_threadgroup[d], a[d]);
        MKPY_SET(MKPY_ATTR_THREAD_POSITION_IN_THREADGROUP, thread_position_in_threadgroup[d], l[d]);
        MKPY_SET(MKPY_ATTR_THREAD_POSITION_IN_GRID, thread_position_in_grid[d], b[d] * tg[d] + l[d]);
    }
    const unsigned requested = tg[0] * tg[1] * tg[2];
    MKPY_SET(MKPY_ATTR_THREAD_EXECUTION_WIDTH, thread_execution_width, MKPY_SIMD_WIDTH);
    MKPY_SET(MKPY_ATTR_THREADS_PER_SIMDGROUP, threads_per_simdgroup, MKPY_SIMD_WIDTH);
    MKPY_SET(MKPY_ATTR_DISPATCH_SIMDGROUPS_PER_THREADGROUP, dispatch_simdgroups_per_threadgroup,
             (requested + MKPY_SIMD_WIDTH - 1) / MKPY_SIMD_WIDTH);
    MKPY_SET(MKPY_ATTR_DISPATCH_QUADGROUPS_PER_THREADGROUP, dispatch_quadgroups_per_threadgroup, (requested + 3) / 4);
    MKPY_SET(MKPY_ATTR_SIMDGROUPS_PER_THREADGROUP, simdgroups_per_threadgroup, (count + MKPY_SIMD_WIDTH - 1) / MKPY_SIMD_WIDTH);
    MKPY_SET(MKPY_ATTR_QUADGROUPS_PER_THREADGROUP, quadgroups_per_threadgroup, (count + 3) / 4);
    MKPY_SET(MKPY_ATTR_THREAD_INDEX_IN_THREADGROUP, thread_index_in_threadgroup, index);
    MKPY_SET(MKPY_ATTR_SIMDGROUP_INDEX_IN_THREADGROUP, simdgroup_index_in_threadgroup, index / MKPY_SIMD_WIDTH);
    MKPY_SET(MKPY_ATTR_THREAD_INDEX_IN_SIMDGROUP, thread_index_in_simdgroup, index % MKPY_SIMD_WIDTH);
    MKPY_SET(MKPY_ATTR_QUADGROUP_INDEX_IN_THREADGROUP, quadgroup_index_in_threadgroup, index / 4);
    MKPY_SET(MKPY_ATTR_THREAD_INDEX_IN_QUADGROUP, thread_index_in_quadgroup, index % 4);
#undef MKPY_SET
}

// The position in a threadgroup of extent a[3] (count threads) of its thread of linear index
// `index`, x fastest.
inline void group_position(const uint32_t a[3], unsigned count, unsigned index, uint32_t l[3]) {
    l[0] = index, l[1] = 0, l[2] = 0; // a one-row threadgroup needs no division
    if (a[0] != count) l[0] = index % a[0], l[1] = (index / a[0]) % a[1], l[2] = index / (a[0] * a[1]);
}

#ifdef MKPY_CUDA_HOSTED
// Fills Metal's attributes of the thread of linear index `index` in the block
// of threadgroup b[3], for a dispatch of grid[3] threads in threadgroups of
// tg[3] (clamped to the grid, as MLX does), ngroups[3] of them; false for a
// thread past its threadgroup's extent (the grid's edge), which must return
// before the kernel runs.
inline bool thread_attrs(const uint32_t grid[3], const uint32_t tg[3], const uint32_t ngroups[3],
                         const uint32_t b[3], unsigned index, mkpy_thread_attrs &t) {
    uint32_t a[3], l[3];
    unsigned count = 1;
    for (int d = 0; d < 3; d++) count *= a[d] = mkpy_group_extent(grid[d], tg[d], b[d]);
    if (index >= count) return false;
    group_position(a, count, index, l);
    set_attrs(grid, tg, ngroups, b, a, l, index, count, t);
    return true;
}
#endif

// n / d with d's divider from the host (mkpy_cuda_divider): a multiply-high, two adds and two
// shifts where a division is a routine of some twenty instructions.
inline uint32_t fast_div(uint32_t n, uint32_t mul, uint32_t shift) {
    const uint32_t hi = __umulhi(mul, n);
    return (hi + ((n - hi) >> (shift & 0xffu))) >> (shift >> 8);
}

// Metal's attributes of this CUDA thread in mkpy's own launches (the ABI of
// mkpy_cuda_launch.h: a one-dimensional block per threadgroup, the block's
// position in the grid its threadgroup's, less the launch's origin):
// thread_attrs' values. Every kernel's prologue, so without a division: the
// extents and the dividers are picked by selects, and a one-row threadgroup
// skips the dividers. The launch's shape word picks a short path first (a branch
// on a launch constant): whole one-row threadgroups reach the kernel in as many
// instructions as a CUDA kernel's index computation. What the kernel does not
// use is dropped by the compiler; M, the attributes the kernel reads (program.c), keeps it from
// being written at all: NVVM's time on a small kernel halves.
template <uint32_t M = MKPY_ATTRS_ALL>
inline bool cuda_thread_attrs(const mkpy_cuda_launch &L, mkpy_thread_attrs &t) {
    const uint32_t b[3] = {L.origin[0] + blockIdx.x, L.origin[1] + blockIdx.y, L.origin[2] + blockIdx.z};
    const unsigned index = threadIdx.x;
    uint32_t a[3], l[3] = {index, 0, 0};
    // the position in the threadgroup (two divisions in a group of several rows) only when read
    constexpr bool position = (M & (MKPY_ATTR_THREAD_POSITION_IN_THREADGROUP | MKPY_ATTR_THREAD_POSITION_IN_GRID)) != 0;
    if (L.shape == (MKPY_CUDA_WHOLE | MKPY_CUDA_ROW)) {
        // whole one-row threadgroups: every thread of the block is in its group, at x = index
        a[0] = L.tg[0], a[1] = 1, a[2] = 1;
        set_attrs<M>(L.grid, L.tg, L.ngroups, b, a, l, index, a[0], t);
        return true;
    }
    if (L.shape & MKPY_CUDA_WHOLE) {
        // whole threadgroups of several rows: the whole group's dividers, no extents, no early exit
        for (int d = 0; d < 3; d++) a[d] = L.tg[d];
        if constexpr (position) {
            const uint32_t row = fast_div(index, L.div_mul[MKPY_CUDA_DIV_X], L.div_shift[MKPY_CUDA_DIV_X]);
            l[2] = fast_div(index, L.div_mul[MKPY_CUDA_DIV_XY], L.div_shift[MKPY_CUDA_DIV_XY]);
            l[0] = index - row * a[0], l[1] = row - l[2] * a[1];
        }
        set_attrs<M>(L.grid, L.tg, L.ngroups, b, a, l, index, a[0] * a[1] * a[2], t);
        return true;
    }
    if (L.shape & MKPY_CUDA_ROW) {
        // one-row threadgroups, the last one along x partial: its extent, no division
        a[0] = b[0] == L.ngroups[0] - 1 ? L.edge[0] : L.tg[0], a[1] = 1, a[2] = 1;
        if (index >= a[0]) return false;
        set_attrs<M>(L.grid, L.tg, L.ngroups, b, a, l, index, a[0], t);
        return true;
    }
    bool at_edge[3];
    for (int d = 0; d < 3; d++) {
        at_edge[d] = b[d] == L.ngroups[d] - 1;
        a[d] = at_edge[d] ? L.edge[d] : L.tg[d];
    }
    const unsigned count = a[0] * a[1] * a[2];
    if (index >= count) return false;
    if (position && a[0] != count) { // a one-row threadgroup needs no division
        // the dividers by selects on fixed fields (an index computed at run time into the launch's
        // parameters would be a chain of conditional loads)
        const bool ex = at_edge[0], ey = at_edge[1];
        const unsigned X = MKPY_CUDA_DIV_X, XY = MKPY_CUDA_DIV_XY;
        const uint32_t row =
            fast_div(index, ex ? L.div_mul[X + 1] : L.div_mul[X], ex ? L.div_shift[X + 1] : L.div_shift[X]);
        const uint32_t mxy =
            ey ? (ex ? L.div_mul[XY + 3] : L.div_mul[XY + 2]) : (ex ? L.div_mul[XY + 1] : L.div_mul[XY]);
        const uint32_t sxy =
            ey ? (ex ? L.div_shift[XY + 3] : L.div_shift[XY + 2]) : (ex ? L.div_shift[XY + 1] : L.div_shift[XY]);
        l[2] = fast_div(index, mxy, sxy);
        l[0] = index - row * a[0], l[1] = row - l[2] * a[1];
    }
    set_attrs<M>(L.grid, L.tg, L.ngroups, b, a, l, index, count, t);
    return true;
}

#ifdef MKPY_CUDA_HOSTED
// Metal's attributes of this CUDA thread in a launch by MLX's cuda_kernel
// (mkpy.cuda.metal_kernel): a block per threadgroup, blockIdx its position in
// the grid of threadgroups, blockDim the threadgroup clamped to the grid and
// gridDim the threadgroups per grid (MLX's eval_gpu); `grid` is Metal's grid
// in threads, which the launch does not carry (an input array the kernel gets).
// The block's threads take their Metal position from their linear index, as
// in mkpy's launches, so the warps hold the SIMD-groups a Mac would.
inline bool mlx_thread_attrs(const uint32_t *grid, mkpy_thread_attrs &t) {
    const uint32_t g[3] = {grid[0], grid[1], grid[2]};
    const uint32_t tg[3] = {blockDim.x, blockDim.y, blockDim.z};
    const uint32_t n[3] = {gridDim.x, gridDim.y, gridDim.z};
    const uint32_t b[3] = {blockIdx.x, blockIdx.y, blockIdx.z};
    return thread_attrs(g, tg, n, b, block_thread(), t);
}
#endif

// ---- Metal's active mask in divergent code (kernel/simt.c; docs/design.md,
// "Metal's SIMD-group semantics in divergent code"). Under independent thread
// scheduling __activemask() is whatever lanes run together at that instant, so
// kernels with SIMD-group functions in divergent code are rewritten to track
// Metal's mask: the program defines MKPY_SIMT (the launch bound) and the
// translation wraps divergent constructs in the guards below. The current mask
// lives in a per-thread slot of shared memory so that header functions called
// from a branch see their caller's mask.
#ifdef MKPY_SIMT
__shared__ unsigned simt_slot[MKPY_SIMT];
inline unsigned simd_mask() { return simt_slot[block_thread()]; }
inline void simt_set(unsigned m) { simt_slot[block_thread()] = m; }
// The entry point: the warp's lanes (read first thing, when all are converged)
// that passed the threadgroup-extent check are the kernel's first mask.
inline bool simt_begin(unsigned warp, bool ok) {
    const unsigned m = __ballot_sync(warp, ok);
    if (ok) simt_set(m);
    return ok;
}
// A region's join: every lane of the region's entry mask `m` calls it once,
// staying or leaving (break, continue, return: from a guard's destructor);
// the lanes that stay go on with the result. One call site (noinline), so
// lanes arriving by different paths meet at one instruction.
__noinline__ unsigned simt_join(unsigned m, bool stays) { return __ballot_sync(m, stays); }
// The `if` side ends (or is left) before the `else` side starts; the stores of
// one are visible to the other (__syncwarp orders memory among its lanes).
__noinline__ void simt_side(unsigned m) { __syncwarp(m); }

// if (c) A else B  ->  { simt_if<E, X> g((c)); if (g.then()) { A g.then_end(); }
//                        else if (g.other()) B g.stay(); }
// E: there is an else; X: a lane may leave the statement early. Barrier: a
// side calls threadgroup_barrier, so the sides are not ordered (the then side
// waiting in the barrier for the else side's lanes would never let them pass
// the side sync; the barrier check reports the divergence instead).
template <bool HasElse, bool MayLeave, bool Barrier = false> struct simt_if {
    unsigned m, t;
    bool c, done = false, then_done = false;
    explicit simt_if(bool cond) : m(simd_mask()), t(__ballot_sync(m, cond)), c(cond) {}
    bool sides() const { return HasElse && !Barrier && t != 0 && t != m; }
    bool then() {
        if (c) simt_set(t);
        return c;
    }
    void then_end() {
        then_done = true;
        if (sides()) simt_side(m);
    }
    bool other() {
        if (sides()) simt_side(m);
        simt_set(m & ~t);
        return true;
    }
    void stay() {
        done = true;
        simt_set(MayLeave ? simt_join(m, true) : m);
    }
    ~simt_if() {
        if (!MayLeave || done) return;
        if (c && !then_done && sides()) simt_side(m);
        simt_join(m, false);
    }
};
// { simt_loop<R> l; for (init; l.test((cond)); inc) { simt_iter<..> i(l); body i.stay(); } l.stay(); }
// R: a lane may return from inside the loop. Iteration i runs with the lanes
// that stayed in the loop after iteration i - 1 and pass the condition.
template <bool MayReturn> struct simt_loop {
    unsigned entry, cur;
    bool done = false;
    simt_loop() : entry(simd_mask()), cur(entry) {}
    bool test(bool c) {
        const unsigned t = __ballot_sync(cur, c);
        if (c) simt_set(t);
        return c;
    }
    void stay() {
        done = true;
        simt_set(MayReturn ? simt_join(entry, true) : entry);
    }
    ~simt_loop() {
        if (MayReturn && !done) simt_join(entry, false);
    }
};
// One iteration; MayLeave: a lane may break or return from the body.
template <class Loop, bool MayLeave> struct simt_iter {
    Loop &l;
    unsigned m;
    bool stays = false;
    explicit simt_iter(Loop &loop) : l(loop), m(simd_mask()) {}
    void stay() { stays = true; }
    void cont() { stays = true; }
    ~simt_iter() {
        const unsigned live = MayLeave ? simt_join(m, stays) : m;
        if (stays) {
            l.cur = live;
            simt_set(live);
        }
    }
};
// c ? a : b with a SIMD-group function in an arm: the true arm's lanes first.
template <class A, class B>
inline auto simt_select(bool c, A a, B b) -> decltype(true ? a() : b()) {
    const unsigned m = simd_mask(), t = __ballot_sync(m, c);
    if (c) {
        simt_set(t);
        auto r = a();
        if (t != m) simt_side(m);
        simt_set(m);
        return r;
    }
    if (t != 0) simt_side(m);
    simt_set(m & ~t);
    auto r = b();
    simt_set(m);
    return r;
}
#else
inline unsigned simd_mask() { return __activemask(); }
#endif

#ifndef MKPY_CUDA_NO_SIMD
// ---- moving values of any plain type between lanes, 32 bits at a time
template <class T>
inline T shfl(unsigned mask, const T &v, int src) {
    static_assert(sizeof(T) <= 32, "SIMD-group values are at most 32 bytes");
    constexpr int W = (int)((sizeof(T) + 3) / 4);
    uint32_t w[W] = {};
    memcpy(w, &v, sizeof(T));
    for (int i = 0; i < W; i++) w[i] = __shfl_sync(mask, w[i], src);
    T r = v;
    memcpy(&r, w, sizeof(T));
    return r;
}

// Reduction over the active lanes of this lane's segment of `width` lanes,
// in lane order (as the CPU engines: bit for bit the same for floats).
template <class T, class Op>
inline T reduce(const T &v, unsigned width, Op op) {
    const unsigned mask = ::mkpy::simd_mask(), lane = lane_id(), lo = lane / width * width;
    T acc = v;
    bool first = true;
    for (unsigned j = 0; j < width; j++) {
        const unsigned src = lo + j;
        T x = shfl(mask, v, (int)src);
        if (mask >> src & 1u) {
            acc = first ? x : op(acc, x);
            first = false;
        }
    }
    return acc;
}

// Prefix over the active lanes below (exclusive) or up to (inclusive) this one.
template <class T, class Op>
inline T prefix(const T &v, unsigned width, bool inclusive, T identity, Op op) {
    const unsigned mask = ::mkpy::simd_mask(), lane = lane_id(), lo = lane / width * width;
    T acc = identity;
    for (unsigned j = 0; j < width; j++) {
        const unsigned src = lo + j;
        T x = shfl(mask, v, (int)src);
        if ((mask >> src & 1u) && (src < lane || (inclusive && src == lane))) acc = op(acc, x);
    }
    return acc;
}

inline int pick_abs(int, int arg, int) { return arg; }
inline int pick_up(int l, int d, int) { return l - d; }
inline int pick_down(int l, int d, int) { return l + d; }
inline int pick_xor(int l, int m, int) { return l ^ m; }
inline int pick_rot_up(int l, int d, int w) { return ((l - d) % w + w) % w; }
inline int pick_rot_down(int l, int d, int w) { return (l + d) % w; }

// The value of the lane pick() names within this lane's segment; a source
// outside the segment or inactive gives the lane's own value (as the CPU).
template <class T>
inline T take(const T &v, unsigned width, int (*pick)(int, int, int), int arg) {
    const unsigned mask = ::mkpy::simd_mask(), lane = lane_id();
    const int lo = (int)(lane / width * width);
    int src = pick((int)lane - lo, arg, (int)width);
    const bool ok = src >= 0 && src < (int)width && (mask >> (src + lo) & 1u);
    T x = shfl(mask, v, ok ? src + lo : (int)lane);
    return ok ? x : v;
}

template <class T>
inline T fill(const T &data, const T &filling, int delta, int modulo, bool up) {
    const unsigned mask = ::mkpy::simd_mask(), lane = lane_id();
    int src = (int)lane;
    bool from_fill = false;
    if (modulo > 0) {
        const int lo = (int)lane / modulo * modulo, l = (int)lane - lo;
        if (up) {
            from_fill = l < delta;
            src = lo + (from_fill ? l + modulo - delta : l - delta);
        } else {
            from_fill = l + delta >= modulo;
            src = lo + (from_fill ? l + delta - modulo : l + delta);
        }
    }
    const bool ok = modulo > 0 && src >= 0 && src < MKPY_SIMD_WIDTH && (mask >> src & 1u);
    const int s = ok ? src : (int)lane;
    T d = shfl(mask, data, s), f = shfl(mask, filling, s);
    if (!ok) return data;
    return from_fill ? f : d;
}

inline uint32_t seg_bits(unsigned width) { return (uint32_t)((1ull << width) - 1); }
#endif // MKPY_CUDA_NO_SIMD

} // namespace mkpy

namespace metal {

// ------------------------------------------------------------ barriers
enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4,
                                  mem_threadgroup_imageblock = 8, mem_object_data = 16 };
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags((unsigned)a | (unsigned)b); }
inline constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags((unsigned)a & (unsigned)b); }

#ifndef MKPY_CUDA_NO_BARRIERS
// __syncthreads orders the block's shared and global memory accesses, which
// covers every mem_flags; device memory seen by other blocks needs a fence.
inline void threadgroup_barrier(mem_flags f = mem_flags::mem_none) {
    if ((unsigned)(f & mem_flags::mem_device)) __threadfence();
    __syncthreads();
}
// The translation turns `threadgroup_barrier(f)` into `threadgroup_barrier_at(site)(f)`.
struct barrier_call {
    unsigned site;
    inline void operator()(mem_flags f = mem_flags::mem_none) const {
        if ((unsigned)(f & mem_flags::mem_device)) __threadfence();
        const unsigned t = ::mkpy::block_thread(), p = ::mkpy::barrier_parity[t];
        ::mkpy::barrier_slot[p] = site;
        // Not __syncthreads: that is `barrier.sync.aligned`, which requires every
        // thread of a warp to run the same barrier instruction, and a warp split
        // between two sites then hangs. The unaligned form counts threads, so
        // threads at different sites (or exited after a report) still release it.
        asm volatile("barrier.sync 0;" ::: "memory");
        const unsigned seen = ::mkpy::barrier_slot[p];
        ::mkpy::barrier_parity[t] = (unsigned char)(p ^ 1u);
        if (__builtin_expect(seen != site, 0)) ::mkpy::report(MKPY_CUDA_REPORT_BARRIERS, seen, site, ::mkpy::block_id());
    }
};
inline barrier_call threadgroup_barrier_at(unsigned site) { return barrier_call{site}; }
inline void simdgroup_barrier(mem_flags f = mem_flags::mem_none) {
    if ((unsigned)(f & mem_flags::mem_device)) __threadfence();
    __syncwarp(::mkpy::simd_mask());
}
#endif // MKPY_CUDA_NO_BARRIERS

#ifndef MKPY_CUDA_NO_SIMD
// ------------------------------------------------------------ votes
struct simd_vote {
    typedef uint64_t vote_t;
    explicit constexpr simd_vote(vote_t v = 0) : v_(v) {}
    explicit constexpr operator vote_t() const { return v_; }
    constexpr bool all() const { return (v_ & 0xffffffffull) == 0xffffffffull; }
    constexpr bool any() const { return (v_ & 0xffffffffull) != 0; }

  private:
    vote_t v_;
};
struct quad_vote {
    typedef unsigned short vote_t;
    explicit constexpr quad_vote(vote_t v = 0) : v_(v) {}
    explicit constexpr operator vote_t() const { return v_; }
    constexpr bool all() const { return (v_ & 0xfu) == 0xfu; }
    constexpr bool any() const { return (v_ & 0xfu) != 0; }

  private:
    vote_t v_;
};

// ---------------------------------------------------- SIMD-group functions
// MSL 6.9.2 / 6.9.3, on the active lanes of the warp.
#define MKPY_REDUCE(name, width, expr) \
    template <class T> inline T name(T v) { return ::mkpy::reduce(v, width, [](T a, T b) { return T(expr); }); }
#define MKPY_PREFIX(name, width, incl, ident, expr)                                                 \
    template <class T> inline T name(T v) {                                                         \
        return ::mkpy::prefix(v, width, incl, T(ident), [](T a, T b) { return T(expr); });         \
    }
#define MKPY_TAKE(name, width, pick) \
    template <class T> inline T name(T v, ushort arg) { return ::mkpy::take(v, width, ::mkpy::pick, arg); }
#define MKPY_GROUP_FUNCTIONS(P, width)                                                              \
    MKPY_REDUCE(P##_sum, width, a + b)                                                              \
    MKPY_REDUCE(P##_product, width, a * b)                                                          \
    MKPY_REDUCE(P##_min, width, min(a, b))                                                          \
    MKPY_REDUCE(P##_max, width, max(a, b))                                                          \
    MKPY_REDUCE(P##_and, width, a & b)                                                              \
    MKPY_REDUCE(P##_or, width, a | b)                                                               \
    MKPY_REDUCE(P##_xor, width, a ^ b)                                                              \
    MKPY_PREFIX(P##_prefix_inclusive_sum, width, true, 0, a + b)                                    \
    MKPY_PREFIX(P##_prefix_exclusive_sum, width, false, 0, a + b)                                   \
    MKPY_PREFIX(P##_prefix_inclusive_product, width, true, 1, a * b)                                \
    MKPY_PREFIX(P##_prefix_exclusive_product, width, false, 1, a * b)                               \
    MKPY_TAKE(P##_shuffle, width, pick_abs)                                                         \
    MKPY_TAKE(P##_broadcast, width, pick_abs)                                                       \
    MKPY_TAKE(P##_shuffle_up, width, pick_up)                                                       \
    MKPY_TAKE(P##_shuffle_down, width, pick_down)                                                   \
    MKPY_TAKE(P##_shuffle_xor, width, pick_xor)                                                     \
    MKPY_TAKE(P##_shuffle_rotate_up, width, pick_rot_up)                                            \
    MKPY_TAKE(P##_shuffle_rotate_down, width, pick_rot_down)                                        \
    template <class T> inline T P##_shuffle_and_fill_up(T data, T filling, ushort delta, ushort modulo) { \
        return ::mkpy::fill(data, filling, delta, modulo, true);                                    \
    }                                                                                               \
    template <class T> inline T P##_shuffle_and_fill_up(T data, T filling, ushort delta) {          \
        return ::mkpy::fill(data, filling, delta, width, true);                                     \
    }                                                                                               \
    template <class T> inline T P##_shuffle_and_fill_down(T data, T filling, ushort delta, ushort modulo) { \
        return ::mkpy::fill(data, filling, delta, modulo, false);                                   \
    }                                                                                               \
    template <class T> inline T P##_shuffle_and_fill_down(T data, T filling, ushort delta) {        \
        return ::mkpy::fill(data, filling, delta, width, false);                                    \
    }                                                                                               \
    template <class T> inline T P##_broadcast_first(T v) {                                          \
        const unsigned mask = ::mkpy::simd_mask(), lane = ::mkpy::lane_id(), lo = lane / width * width;  \
        const uint32_t seg = (mask >> lo) & ::mkpy::seg_bits(width);                                \
        return ::mkpy::shfl(mask, v, (int)(lo + (unsigned)(__ffs(seg) - 1)));                       \
    }                                                                                               \
    inline bool P##_is_first() {                                                                    \
        const unsigned mask = ::mkpy::simd_mask(), lane = ::mkpy::lane_id(), lo = lane / width * width;  \
        return lane == lo + (unsigned)(__ffs((mask >> lo) & ::mkpy::seg_bits(width)) - 1);           \
    }                                                                                               \
    inline bool P##_all(bool b) {                                                                   \
        const unsigned mask = ::mkpy::simd_mask(), v = __ballot_sync(mask, b), lo = ::mkpy::lane_id() / width * width; \
        const uint32_t seg = ::mkpy::seg_bits(width) << lo;                                         \
        return (v & seg) == (mask & seg);                                                           \
    }                                                                                               \
    inline bool P##_any(bool b) {                                                                   \
        const unsigned mask = ::mkpy::simd_mask(), v = __ballot_sync(mask, b), lo = ::mkpy::lane_id() / width * width; \
        return (v >> lo & ::mkpy::seg_bits(width)) != 0;                                            \
    }                                                                                               \
    inline bool P##_is_helper_thread() { return false; }

MKPY_GROUP_FUNCTIONS(simd, MKPY_SIMD_WIDTH)
MKPY_GROUP_FUNCTIONS(quad, 4)

inline simd_vote simd_ballot(bool b) { return simd_vote(__ballot_sync(::mkpy::simd_mask(), b)); }
inline simd_vote simd_active_threads_mask() { return simd_vote(::mkpy::simd_mask()); }
inline quad_vote quad_ballot(bool b) {
    const unsigned v = __ballot_sync(::mkpy::simd_mask(), b);
    return quad_vote((unsigned short)(v >> (::mkpy::lane_id() / 4 * 4) & 0xfu));
}
inline quad_vote quad_active_threads_mask() {
    return quad_vote((unsigned short)(::mkpy::simd_mask() >> (::mkpy::lane_id() / 4 * 4) & 0xfu));
}
#undef MKPY_GROUP_FUNCTIONS
#undef MKPY_REDUCE
#undef MKPY_PREFIX
#undef MKPY_TAKE
#endif // MKPY_CUDA_NO_SIMD

#ifndef MKPY_CUDA_NO_ATOMICS
// ------------------------------------------------------------- atomics
// MSL 6.15: atomic<T> in device or threadgroup memory (CUDA's generic
// addresses reach both), relaxed order as Metal has; the fence's scope picks
// __threadfence_block (threadgroup, SIMD-group) or __threadfence (device).
enum memory_order { memory_order_relaxed, memory_order_seq_cst };
enum thread_scope { thread_scope_thread, thread_scope_simdgroup, thread_scope_threadgroup, thread_scope_device };

template <class T>
struct atomic {
    T value;
};
using atomic_int = atomic<int>;
using atomic_uint = atomic<unsigned int>;
using atomic_float = atomic<float>;
using atomic_bool = atomic<bool>;
using atomic_ulong = atomic<unsigned long>;
using atomic_long = atomic<long>;

template <class T>
struct mkpy_nd {
    using type = T;
};
template <class T>
using mkpy_nd_t = typename mkpy_nd<T>::type;

inline void atomic_thread_fence(mem_flags, memory_order, thread_scope s = thread_scope_device) {
    if (s == thread_scope_device)
        __threadfence();
    else
        __threadfence_block();
}

#endif // MKPY_CUDA_NO_ATOMICS
} // namespace metal

#ifndef MKPY_CUDA_NO_ATOMICS
namespace mkpy {
template <class U, class T>
inline U bits_of(const T &v) {
    U u = 0;
    memcpy(&u, &v, sizeof(T));
    return u;
}
template <class T, class U>
inline T from_bits_of(U u) {
    T v;
    memcpy(&v, &u, sizeof(T));
    return v;
}
// Compare-and-swap of a value of 1, 2, 4 or 8 bytes; on failure `expected`
// gets the value found.
template <class T>
inline bool cas(T *p, T &expected, T desired) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8, "atomic of this size");
    if constexpr (sizeof(T) == 4) {
        const unsigned e = bits_of<unsigned>(expected);
        const unsigned old = atomicCAS((unsigned *)p, e, bits_of<unsigned>(desired));
        if (old == e) return true;
        expected = from_bits_of<T>(old);
        return false;
    } else if constexpr (sizeof(T) == 8) {
        const unsigned long long e = bits_of<unsigned long long>(expected);
        const unsigned long long old = atomicCAS((unsigned long long *)p, e, bits_of<unsigned long long>(desired));
        if (old == e) return true;
        expected = from_bits_of<T>(old);
        return false;
    } else { // within the aligned 32-bit word holding it
        unsigned *word = (unsigned *)((uintptr_t)p & ~(uintptr_t)3);
        const unsigned shift = (unsigned)((uintptr_t)p & 3) * 8, m = (sizeof(T) == 1 ? 0xffu : 0xffffu) << shift;
        const unsigned e = bits_of<unsigned>(expected) << shift, d = bits_of<unsigned>(desired) << shift;
        unsigned old = *(volatile unsigned *)word;
        for (;;) {
            if ((old & m) != e) {
                expected = from_bits_of<T>((old & m) >> shift);
                return false;
            }
            const unsigned seen = atomicCAS(word, old, (old & ~m) | d);
            if (seen == old) return true;
            old = seen;
        }
    }
}
template <class T, class Op>
inline T rmw(T *p, T v, Op op) {
    T old = *(volatile T *)p;
    while (!cas(p, old, T(op(old, v)))) {
    }
    return old;
}
template <class T> struct is_i32 : std::bool_constant<std::is_integral<T>::value && sizeof(T) == 4> {};
template <class T> struct is_i64 : std::bool_constant<std::is_integral<T>::value && sizeof(T) == 8> {};
} // namespace mkpy
#endif // MKPY_CUDA_NO_ATOMICS

namespace metal {
#ifndef MKPY_CUDA_NO_ATOMICS

template <class T> inline T atomic_load_explicit(const volatile atomic<T> *o, memory_order) {
    return *(const volatile T *)&o->value;
}
template <class T> inline void atomic_store_explicit(volatile atomic<T> *o, mkpy_nd_t<T> v, memory_order) {
    *(volatile T *)&o->value = v;
}
template <class T> inline T atomic_exchange_explicit(volatile atomic<T> *o, mkpy_nd_t<T> v, memory_order) {
    T *p = (T *)&o->value;
    if constexpr (sizeof(T) == 4)
        return ::mkpy::from_bits_of<T>(atomicExch((unsigned *)p, ::mkpy::bits_of<unsigned>(v)));
    else if constexpr (sizeof(T) == 8)
        return ::mkpy::from_bits_of<T>(atomicExch((unsigned long long *)p, ::mkpy::bits_of<unsigned long long>(v)));
    else
        return ::mkpy::rmw(p, T(v), [](T, T b) { return b; });
}
template <class T>
inline bool atomic_compare_exchange_weak_explicit(volatile atomic<T> *o, mkpy_nd_t<T> *expected, mkpy_nd_t<T> desired,
                                                  memory_order, memory_order) {
    return ::mkpy::cas((T *)&o->value, *expected, desired);
}
template <class T>
inline bool atomic_compare_exchange_strong_explicit(volatile atomic<T> *o, mkpy_nd_t<T> *expected,
                                                    mkpy_nd_t<T> desired, memory_order, memory_order) {
    return ::mkpy::cas((T *)&o->value, *expected, desired);
}

template <class T, class U> inline T atomic_fetch_add_explicit(volatile atomic<T> *o, U u, memory_order) {
    T v = T(u), *p = (T *)&o->value;
    if constexpr (std::is_same<T, float>::value)
        return atomicAdd(p, v);
    else if constexpr (::mkpy::is_i32<T>::value)
        return (T)atomicAdd((unsigned *)p, (unsigned)v);
    else if constexpr (::mkpy::is_i64<T>::value)
        return (T)atomicAdd((unsigned long long *)p, (unsigned long long)v);
    else
        return ::mkpy::rmw(p, v, [](T a, T b) { return a + b; });
}
template <class T, class U> inline T atomic_fetch_sub_explicit(volatile atomic<T> *o, U u, memory_order) {
    T v = T(u), *p = (T *)&o->value;
    if constexpr (::mkpy::is_i32<T>::value)
        return (T)atomicSub((unsigned *)p, (unsigned)v);
    else if constexpr (::mkpy::is_i64<T>::value)
        return (T)atomicAdd((unsigned long long *)p, (unsigned long long)0 - (unsigned long long)v);
    else
        return ::mkpy::rmw(p, v, [](T a, T b) { return a - b; });
}
#define MKPY_BITOP(name, fn, expr)                                                                         \
    template <class T, class U> inline T atomic_fetch_##name##_explicit(volatile atomic<T> *o, U u, memory_order) { \
        T v = T(u), *p = (T *)&o->value;                                                                    \
        if constexpr (::mkpy::is_i32<T>::value)                                                             \
            return (T)fn((unsigned *)p, (unsigned)v);                                                       \
        else if constexpr (::mkpy::is_i64<T>::value)                                                        \
            return (T)fn((unsigned long long *)p, (unsigned long long)v);                                   \
        else                                                                                                \
            return ::mkpy::rmw(p, v, [](T a, T b) { return T(expr); });                                     \
    }
MKPY_BITOP(and, atomicAnd, a & b)
MKPY_BITOP(or, atomicOr, a | b)
MKPY_BITOP(xor, atomicXor, a ^ b)
#undef MKPY_BITOP
#define MKPY_MINMAX(name, fn, expr)                                                                        \
    template <class T, class U> inline T atomic_fetch_##name##_explicit(volatile atomic<T> *o, U u, memory_order) { \
        T v = T(u), *p = (T *)&o->value;                                                                    \
        if constexpr (::mkpy::is_i32<T>::value && std::is_signed<T>::value)                                 \
            return (T)fn((int *)p, (int)v);                                                                 \
        else if constexpr (::mkpy::is_i32<T>::value)                                                        \
            return (T)fn((unsigned *)p, (unsigned)v);                                                       \
        else if constexpr (::mkpy::is_i64<T>::value && std::is_signed<T>::value)                            \
            return (T)fn((long long *)p, (long long)v);                                                     \
        else if constexpr (::mkpy::is_i64<T>::value)                                                        \
            return (T)fn((unsigned long long *)p, (unsigned long long)v);                                   \
        else                                                                                                \
            return ::mkpy::rmw(p, v, [](T a, T b) { return expr; });                                        \
    }
MKPY_MINMAX(min, atomicMin, b < a ? b : a)
MKPY_MINMAX(max, atomicMax, b > a ? b : a)
#undef MKPY_MINMAX
template <class T, class U> inline void atomic_min_explicit(volatile atomic<T> *o, U u, memory_order m) {
    atomic_fetch_min_explicit(o, u, m);
}
template <class T, class U> inline void atomic_max_explicit(volatile atomic<T> *o, U u, memory_order m) {
    atomic_fetch_max_explicit(o, u, m);
}
#endif // MKPY_CUDA_NO_ATOMICS

#ifndef MKPY_CUDA_NO_MATRIX
// ---------------------------------------------------- simdgroup matrices
// MSL 6.7: an 8x8 matrix spread over the 32 lanes of a warp, two elements
// per lane, in the layout of Apple GPUs (and of mkpy_coop.h). Multiplies
// gather operands with shuffles and accumulate with fmaf in k order, as the
// CPU engines do: float results equal theirs bit for bit. (Tensor cores
// would not: mma.sync's order and rounding inside a k-step are not
// sequential fused multiply-adds.)
template <class T, int Cols, int Rows>
struct simdgroup_matrix;

#endif // MKPY_CUDA_NO_MATRIX
} // namespace metal

#ifndef MKPY_CUDA_NO_MATRIX
namespace mkpy {
inline void simdgroup_coord(unsigned l, unsigned &row, unsigned &col) {
    unsigned q = l / 4;
    row = (q & 4) + (l / 2) % 4;
    col = (q & 2) * 2 + (l % 2) * 2;
}
inline unsigned simdgroup_owner(unsigned row, unsigned col) {
    return (row >> 2 & 1) << 4 | (col >> 2 & 1) << 3 | (row >> 1 & 1) << 2 | (row & 1) << 1 | (col >> 1 & 1);
}
} // namespace mkpy

namespace metal {

template <class T, int Cols, int Rows>
struct simdgroup_matrix {
    static_assert(Cols == 8 && Rows == 8, "mkpy supports the 8x8 simdgroup matrices that Apple GPUs have");
    vec<T, 2> e;
    simdgroup_matrix() = default;
    explicit simdgroup_matrix(T d) {
        unsigned row, col;
        ::mkpy::simdgroup_coord(::mkpy::lane_id(), row, col);
        e[0] = row == col ? d : T(0);
        e[1] = row == col + 1 ? d : T(0);
    }
    vec<T, 2> &thread_elements() { return e; }
    const vec<T, 2> &thread_elements() const { return e; }
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(const T value) {
    simdgroup_matrix<T, Cols, Rows> m;
    m.e[0] = value;
    m.e[1] = value;
    return m;
}

template <class T, class P, int Cols, int Rows>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows> &d, const P *src, ulong elements_per_row = Cols,
                           ulong2 origin = ulong2(0), bool transpose = false) {
    unsigned row, col;
    ::mkpy::simdgroup_coord(::mkpy::lane_id(), row, col);
    for (unsigned j = 0; j < 2; j++) {
        ulong r = transpose ? col + j : row, c = transpose ? row : col + j;
        d.e[j] = T(src[(origin.y + r) * elements_per_row + origin.x + c]);
    }
}
template <class T, class P, int Cols, int Rows>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows> &a, P *dst, ulong elements_per_row = Cols,
                            ulong2 origin = ulong2(0), bool transpose = false) {
    unsigned row, col;
    ::mkpy::simdgroup_coord(::mkpy::lane_id(), row, col);
    for (unsigned j = 0; j < 2; j++) {
        ulong r = transpose ? col + j : row, c = transpose ? row : col + j;
        dst[(origin.y + r) * elements_per_row + origin.x + c] = P(a.e[j]);
    }
}

} // namespace metal

namespace mkpy {
// d = a * b (+ c): each lane takes its row of a and its two columns of b
// from the lanes holding them, and sums the eight products in float.
template <class TD, class TA, class TB, class TC>
inline void simdgroup_mma(::metal::simdgroup_matrix<TD, 8, 8> &d, const ::metal::simdgroup_matrix<TA, 8, 8> &a,
                          const ::metal::simdgroup_matrix<TB, 8, 8> &b, const ::metal::simdgroup_matrix<TC, 8, 8> *c) {
    const unsigned mask = ::mkpy::simd_mask();
    unsigned row, c0;
    simdgroup_coord(lane_id(), row, c0);
    float acc[2] = {c ? float(c->e[0]) : 0.0f, c ? float(c->e[1]) : 0.0f};
    const TA a0 = a.e[0], a1 = a.e[1];
    const TB b0 = b.e[0], b1 = b.e[1];
#pragma unroll
    for (unsigned k = 0; k < 8; k++) {
        const int ka = (int)simdgroup_owner(row, k), kb = (int)simdgroup_owner(k, c0);
        const float x = float(shfl(mask, (k & 1) ? a1 : a0, ka));
        const float y0 = float(shfl(mask, b0, kb)), y1 = float(shfl(mask, b1, kb));
        acc[0] = fmaf(x, y0, acc[0]);
        acc[1] = fmaf(x, y1, acc[1]);
    }
    d.e[0] = TD(acc[0]);
    d.e[1] = TD(acc[1]);
}
} // namespace mkpy

namespace metal {
template <class TD, class TA, class TB, int Cols, int Rows, int K>
inline void simdgroup_multiply(simdgroup_matrix<TD, Cols, Rows> &d, const simdgroup_matrix<TA, K, Rows> &a,
                               const simdgroup_matrix<TB, Cols, K> &b) {
    ::mkpy::simdgroup_mma(d, a, b, (const simdgroup_matrix<TD, 8, 8> *)nullptr);
}
template <class TD, class TA, class TB, class TC, int Cols, int Rows, int K>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, Cols, Rows> &d, const simdgroup_matrix<TA, K, Rows> &a,
                                          const simdgroup_matrix<TB, Cols, K> &b,
                                          const simdgroup_matrix<TC, Cols, Rows> &c) {
    ::mkpy::simdgroup_mma(d, a, b, &c);
}
} // namespace metal
#endif // MKPY_CUDA_NO_MATRIX

#endif
