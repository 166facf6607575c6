// Metal's cooperative features for kernels run by mkpy: barriers, SIMD-group
// and quad-group functions, atomics and threadgroup memory accounting.
//
// Barriers and SIMD-group functions call into mkpy's C runtime (through the
// function table handed to mkpy_kernel_set_api), which runs each GPU thread
// of a threadgroup on its own fiber and switches between them (coop.c). A
// SIMD-group function is an exchange: every active lane deposits its value,
// waits for the others, then computes its own result from all lanes' values.
//
// Every barrier and SIMD-group function captures its call site with
// __builtin_FILE/LINE/COLUMN as default arguments (#line markers make them
// the user's own): lanes exchange values only with lanes at the same call
// site, and divergence errors name the barriers' lines.
//
// Semantics follow the Metal Shading Language Specification, 6.9.2 (SIMD-group
// functions), 6.9.3 (quad-group functions) and 6.15 (atomics).
#ifndef MKPY_COOP_H
#define MKPY_COOP_H

#include <string.h>
#include <type_traits>

#include "mkpy_launch.h"

namespace mkpy {

inline const mkpy_coop_api *api = nullptr;

} // namespace mkpy

// The four points where kernel code meets the cooperative runtime (and a fifth, mkpy_sync_order,
// that only mkpy's compiler pass calls). They are
// named, never-inlined functions so that mkpy's region-splitting engine
// (csrc/backend/cpu/cbs.c) finds them in the kernel's LLVM IR and turns each call
// into a resume point; the fiber engine just calls through them. Declared
// inline, they are emitted only into kernels that call them (a plain kernel
// then does not optimise and generate code for them: 5% of its compile).
extern "C" {
inline __attribute__((noinline, weak, noduplicate, nomerge)) void mkpy_sync_barrier(const char *file, int line, int col) {
    mkpy::api->barrier(file, line, col);
}
inline __attribute__((noinline, weak, noduplicate, nomerge)) void mkpy_sync_simd_barrier(const char *file, int line, int col) {
    mkpy::api->simd_barrier(file, line, col);
}
inline __attribute__((noinline, weak, noduplicate, nomerge)) unsigned char *mkpy_sync_exchange(const void *value, size_t size,
                                                                  uint32_t *mask, uint32_t *lane,
                                                                  const char *file, int line, int col) {
    return mkpy::api->simd_exchange(value, size, mask, lane, file, line, col);
}
inline __attribute__((noinline, weak, noduplicate, nomerge)) void mkpy_sync_threadgroup_alloc(const void *addr, size_t size,
                                                                 const char *file, int line) {
    mkpy::api->threadgroup_alloc(addr, size, file, line);
}
// Never called from kernel code: mkpy's compiler pass puts a call before every point above in a
// kernel built for the fiber engine (or the checker), with the point's rank in the control flow.
__attribute__((noinline, weak, noduplicate, nomerge)) void mkpy_sync_order(int rank, int wait) {
    mkpy::api->order(rank, wait);
}
}

namespace mkpy {

// Every SIMD-group function records its call site: lanes of a SIMD-group
// exchange values only with lanes at the same call site (see coop.c).
#define MKPY_SITE \
    const char *mkpy_file = __builtin_FILE(), int mkpy_line = __builtin_LINE(), int mkpy_col = __builtin_COLUMN()
#define MKPY_AT mkpy_file, mkpy_line, mkpy_col

template <class T>
inline T slot(const unsigned char *slots, unsigned lane) {
    T v;
    memcpy(&v, slots + lane * MKPY_SIMD_SLOT, sizeof(T));
    return v;
}

// Exchanges one value per lane; returns the exchange buffer (the slots first,
// see MKPY_SIMD_BUFFER), fills mask and lane.
template <class T>
inline unsigned char *exchange(const T &v, uint32_t &mask, uint32_t &lane, const char *file, int line, int col) {
    static_assert(sizeof(T) <= MKPY_SIMD_SLOT, "SIMD-group values are at most 32 bytes");
    // values travel by memcpy (Metal's scalars and vectors are plain data;
    // vec has a user-written operator= for swizzles, so it is not formally
    // trivially copyable)
    static_assert(std::is_trivially_destructible<T>::value, "SIMD-group values must be plain data");
    return mkpy_sync_exchange(&v, sizeof(T), &mask, &lane, file, line, col);
}

// Reduction over the active lanes of this lane's segment of `width` lanes,
// in lane order. Every lane released with this one is at the same call site
// (so runs this same reduction): the first to resume computes the segment's
// result and leaves it in the segment's memo slot for the others.
template <class T, class Op>
inline T reduce(const T &v, unsigned width, Op op, const char *file, int line, int col) {
    uint32_t mask, lane;
    unsigned char *s = exchange(v, mask, lane, file, line, col);
    unsigned lo = lane / width * width;
    uint32_t valid;
    memcpy(&valid, s + MKPY_SIMD_MEMO_VALID, sizeof valid);
    if (valid >> lo & 1u) return slot<T>(s + MKPY_SIMD_MEMO, lo);
    const uint32_t seg = width >= 32 ? ~0u : ((1u << width) - 1u) << lo;
    T acc = v;
    if ((mask & seg) == seg) {
        // every lane of the segment active: the same operations in the same
        // order as the loop below, without its per-lane tests
        acc = slot<T>(s, lo);
        for (unsigned i = lo + 1; i < lo + width; i++) acc = op(acc, slot<T>(s, i));
        memcpy(s + MKPY_SIMD_MEMO + lo * MKPY_SIMD_SLOT, &acc, sizeof(T));
        valid |= 1u << lo;
        memcpy(s + MKPY_SIMD_MEMO_VALID, &valid, sizeof valid);
        return acc;
    }
    bool first = true;
    for (unsigned i = lo; i < lo + width; i++) {
        if (!(mask >> i & 1u)) continue;
        T x = slot<T>(s, i);
        acc = first ? x : op(acc, x);
        first = false;
    }
    memcpy(s + MKPY_SIMD_MEMO + lo * MKPY_SIMD_SLOT, &acc, sizeof(T));
    valid |= 1u << lo;
    memcpy(s + MKPY_SIMD_MEMO_VALID, &valid, sizeof valid);
    return acc;
}

// Prefix over the active lanes below (exclusive) or up to (inclusive) this
// one, within its segment of `width` lanes.
template <class T, class Op>
inline T prefix(const T &v, unsigned width, bool inclusive, T identity, Op op, const char *file, int line, int col) {
    uint32_t mask, lane;
    unsigned char *s = exchange(v, mask, lane, file, line, col);
    unsigned lo = lane / width * width;
    T acc = identity;
    for (unsigned i = lo; i < lane + (inclusive ? 1u : 0u); i++)
        if (mask >> i & 1u) acc = op(acc, slot<T>(s, i));
    return acc;
}

// Value of the lane that pick(lane within segment, arg, width) names within
// this lane's segment of `width` lanes. A source outside the segment leaves
// the value unchanged (shuffle_up/down do not wrap); an inactive source is
// undefined in Metal and gives the lane's own value here.
template <class T>
inline T take(const T &v, unsigned width, int (*pick)(int seg_lane, int arg, int width), int arg, const char *file,
              int line, int col) {
    uint32_t mask, lane;
    unsigned char *s = exchange(v, mask, lane, file, line, col);
    int lo = (int)(lane / width * width);
    int src = pick((int)lane - lo, arg, (int)width);
    if (src < 0 || src >= (int)width) return v;
    src += lo;
    return (mask >> src & 1u) ? slot<T>(s, (unsigned)src) : v;
}

inline int pick_abs(int, int arg, int) { return arg; }
inline int pick_up(int l, int d, int) { return l - d; }
inline int pick_down(int l, int d, int) { return l + d; }
inline int pick_xor(int l, int m, int) { return l ^ m; }
inline int pick_rot_up(int l, int d, int w) { return ((l - d) % w + w) % w; }
inline int pick_rot_down(int l, int d, int w) { return (l + d) % w; }

// Shuffle-and-fill within segments of `modulo` lanes: up takes the lane
// `delta` below, and the lanes below delta take `filling` of the upper delta
// lanes of their segment; down takes the lane `delta` above, and the upper
// delta lanes take `filling` of the lower delta lanes.
template <class T>
struct fill_pair {
    T data, filling;
};
template <class T>
inline T fill(const T &data, const T &filling, int delta, int modulo, bool up, const char *file, int line, int col) {
    uint32_t mask, lane;
    int lo = 0, l = 0, src = 0;
    bool from_fill = false;
    auto where = [&] {
        lo = (int)lane / modulo * modulo;
        l = (int)lane - lo;
        if (up) {
            from_fill = l < delta;
            src = lo + (from_fill ? l + modulo - delta : l - delta);
        } else {
            from_fill = l + delta >= modulo;
            src = lo + (from_fill ? l + delta - modulo : l + delta);
        }
    };
    if constexpr (sizeof(fill_pair<T>) <= MKPY_SIMD_SLOT) {
        unsigned char *s = exchange(fill_pair<T>{data, filling}, mask, lane, file, line, col);
        where();
        if (modulo <= 0 || src < 0 || src >= MKPY_SIMD_WIDTH || !(mask >> src & 1u)) return data;
        fill_pair<T> p = slot<fill_pair<T>>(s, (unsigned)src);
        return from_fill ? p.filling : p.data;
    } else {
        uint32_t m2, l2;
        unsigned char *sd = exchange(data, mask, lane, file, line, col);
        where();
        bool ok = modulo > 0 && src >= 0 && src < MKPY_SIMD_WIDTH && (mask >> src & 1u);
        T d = ok ? slot<T>(sd, (unsigned)src) : data;
        unsigned char *sf = exchange(filling, m2, l2, file, line, col);
        if (!ok) return data;
        return from_fill ? slot<T>(sf, (unsigned)src) : d;
    }
}

inline uint32_t active_mask(const char *file, int line, int col, uint32_t &lane) {
    uint32_t mask;
    exchange(char(0), mask, lane, file, line, col);
    return mask;
}

// Bits of the active lanes of a ballot (bit i: lane i of the SIMD-group).
inline uint32_t ballot(bool b, const char *file, int line, int col, uint32_t &mask, uint32_t &lane) {
    unsigned char *s = exchange(b, mask, lane, file, line, col);
    uint32_t v = 0;
    for (unsigned i = 0; i < MKPY_SIMD_WIDTH; i++)
        if ((mask >> i & 1u) && slot<bool>(s, i)) v |= 1u << i;
    return v;
}

} // namespace mkpy

namespace metal {

// ------------------------------------------------------------ barriers
enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4,
                                  mem_threadgroup_imageblock = 8, mem_object_data = 16 };
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags((unsigned)a | (unsigned)b); }
inline constexpr mem_flags operator&(mem_flags a, mem_flags b) { return mem_flags((unsigned)a & (unsigned)b); }

inline void threadgroup_barrier(mem_flags = mem_flags::mem_none, const char *file = __builtin_FILE(),
                                int line = __builtin_LINE(), int col = __builtin_COLUMN()) {
    mkpy_sync_barrier(file, line, col);
}
inline void simdgroup_barrier(mem_flags = mem_flags::mem_none, const char *file = __builtin_FILE(),
                              int line = __builtin_LINE(), int col = __builtin_COLUMN()) {
    mkpy_sync_simd_barrier(file, line, col);
}

// ------------------------------------------------------------ votes
// simd_vote / quad_vote as in MSL 6.9.2: an explicit conversion to vote_t,
// bit i for lane i; all() is true when every lane of the (32-wide) group is set.
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
// Semantics: Metal Shading Language Specification, 6.9.2. Every function
// takes part only with the active lanes of the SIMD-group.
#define MKPY_W MKPY_SIMD_WIDTH
#define MKPY_REDUCE(name, width, expr)                                                              \
    template <class T> inline T name(T v, MKPY_SITE) {                                              \
        return ::mkpy::reduce(v, width, [](T a, T b) { return T(expr); }, MKPY_AT);                   \
    }
#define MKPY_PREFIX(name, width, incl, ident, expr)                                                 \
    template <class T> inline T name(T v, MKPY_SITE) {                                              \
        return ::mkpy::prefix(v, width, incl, T(ident), [](T a, T b) { return T(expr); }, MKPY_AT);   \
    }
#define MKPY_TAKE(name, width, pick)                                                                \
    template <class T> inline T name(T v, ushort arg, MKPY_SITE) {                                  \
        return ::mkpy::take(v, width, ::mkpy::pick, arg, MKPY_AT);                                  \
    }
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
    template <class T> inline T P##_shuffle_and_fill_up(T data, T filling, ushort delta, ushort modulo, MKPY_SITE) { \
        return ::mkpy::fill(data, filling, delta, modulo, true, MKPY_AT);                           \
    }                                                                                               \
    template <class T> inline T P##_shuffle_and_fill_up(T data, T filling, ushort delta, MKPY_SITE) { \
        return ::mkpy::fill(data, filling, delta, width, true, MKPY_AT);                            \
    }                                                                                               \
    template <class T> inline T P##_shuffle_and_fill_down(T data, T filling, ushort delta, ushort modulo, MKPY_SITE) { \
        return ::mkpy::fill(data, filling, delta, modulo, false, MKPY_AT);                          \
    }                                                                                               \
    template <class T> inline T P##_shuffle_and_fill_down(T data, T filling, ushort delta, MKPY_SITE) { \
        return ::mkpy::fill(data, filling, delta, width, false, MKPY_AT);                           \
    }                                                                                               \
    template <class T> inline T P##_broadcast_first(T v, MKPY_SITE) {                              \
        uint32_t mask, lane;                                                                        \
        unsigned char *s = ::mkpy::exchange(v, mask, lane, MKPY_AT);                          \
        unsigned lo = lane / width * width;                                                         \
        uint32_t seg = (mask >> lo) & (uint32_t)((1ull << width) - 1);                             \
        return ::mkpy::slot<T>(s, lo + (unsigned)__builtin_ctz(seg));                               \
    }                                                                                               \
    inline bool P##_is_first(MKPY_SITE) {                                                           \
        uint32_t lane, mask = ::mkpy::active_mask(MKPY_AT, lane);                                   \
        unsigned lo = lane / width * width;                                                         \
        return lane == lo + (unsigned)__builtin_ctz((mask >> lo) & (uint32_t)((1ull << width) - 1)); \
    }                                                                                               \
    inline bool P##_all(bool b, MKPY_SITE) {                                                        \
        uint32_t mask, lane, v = ::mkpy::ballot(b, MKPY_AT, mask, lane);                            \
        unsigned lo = lane / width * width;                                                         \
        uint32_t seg = (uint32_t)((1ull << width) - 1) << lo;                                       \
        return (v & seg) == (mask & seg);                                                           \
    }                                                                                               \
    inline bool P##_any(bool b, MKPY_SITE) {                                                        \
        uint32_t mask, lane, v = ::mkpy::ballot(b, MKPY_AT, mask, lane);                            \
        unsigned lo = lane / width * width;                                                         \
        return (v >> lo & (uint32_t)((1ull << width) - 1)) != 0;                                    \
    }                                                                                               \
    inline bool P##_is_helper_thread() { return false; } /* no helper threads in compute kernels */

MKPY_GROUP_FUNCTIONS(simd, MKPY_W)
MKPY_GROUP_FUNCTIONS(quad, 4)

inline simd_vote simd_ballot(bool b, MKPY_SITE) {
    uint32_t mask, lane;
    return simd_vote(::mkpy::ballot(b, MKPY_AT, mask, lane));
}
inline simd_vote simd_active_threads_mask(MKPY_SITE) {
    uint32_t lane;
    return simd_vote(::mkpy::active_mask(MKPY_AT, lane));
}
// quad votes: bit k for lane k of the caller's quad
inline quad_vote quad_ballot(bool b, MKPY_SITE) {
    uint32_t mask, lane;
    uint32_t v = ::mkpy::ballot(b, MKPY_AT, mask, lane);
    return quad_vote((unsigned short)(v >> (lane / 4 * 4) & 0xfu));
}
inline quad_vote quad_active_threads_mask(MKPY_SITE) {
    uint32_t lane, mask = ::mkpy::active_mask(MKPY_AT, lane);
    return quad_vote((unsigned short)(mask >> (lane / 4 * 4) & 0xfu));
}
#undef MKPY_GROUP_FUNCTIONS
#undef MKPY_REDUCE
#undef MKPY_PREFIX
#undef MKPY_TAKE
#undef MKPY_W

// ------------------------------------------------------------- atomics
// MSL 6.15: atomic<T> objects in device or threadgroup memory, relaxed order.
// The value arguments are not deduced (Metal's functions are per-type
// overloads, so `atomic_store_explicit(&u, 0, ...)` on an atomic_uint works).
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

inline void atomic_thread_fence(mem_flags, memory_order, thread_scope = thread_scope_device) {
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

template <class T> inline T atomic_load_explicit(const volatile atomic<T> *o, memory_order) {
    T v;
    __atomic_load((T *)&o->value, &v, __ATOMIC_RELAXED);
    return v;
}
template <class T> inline void atomic_store_explicit(volatile atomic<T> *o, mkpy_nd_t<T> v, memory_order) {
    __atomic_store((T *)&o->value, &v, __ATOMIC_RELAXED);
}
template <class T> inline T atomic_exchange_explicit(volatile atomic<T> *o, mkpy_nd_t<T> v, memory_order) {
    T old;
    __atomic_exchange((T *)&o->value, &v, &old, __ATOMIC_RELAXED);
    return old;
}
template <class T>
inline bool atomic_compare_exchange_weak_explicit(volatile atomic<T> *o, mkpy_nd_t<T> *expected, mkpy_nd_t<T> desired,
                                                  memory_order, memory_order) {
    return __atomic_compare_exchange((T *)&o->value, expected, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
template <class T>
inline bool atomic_compare_exchange_strong_explicit(volatile atomic<T> *o, mkpy_nd_t<T> *expected,
                                                    mkpy_nd_t<T> desired, memory_order, memory_order) {
    return __atomic_compare_exchange((T *)&o->value, expected, &desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
// read-modify-write through a compare-and-swap loop (floats, min/max)
template <class T, class Op> inline T atomic_rmw(volatile atomic<T> *o, T v, Op op) {
    T old = atomic_load_explicit(o, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(o, &old, T(op(old, v)), memory_order_relaxed, memory_order_relaxed)) {
    }
    return old;
}
#define MKPY_RMW(name, builtin, expr)                                                                  \
    template <class T, class U> inline T atomic_fetch_##name##_explicit(volatile atomic<T> *o, U u, memory_order) { \
        T v = T(u);                                                                                    \
        if constexpr (std::is_integral<T>::value && builtin)                                           \
            return __atomic_fetch_##name((T *)&o->value, v, __ATOMIC_RELAXED);                         \
        else                                                                                           \
            return atomic_rmw(o, v, [](T a, T b) { return expr; });                                    \
    }
MKPY_RMW(add, true, a + b)
MKPY_RMW(sub, true, a - b)
MKPY_RMW(and, true, a & b)
MKPY_RMW(or, true, a | b)
MKPY_RMW(xor, true, a ^ b)
MKPY_RMW(min, false, b < a ? b : a)
MKPY_RMW(max, false, b > a ? b : a)
#undef MKPY_RMW
// the non-returning forms (MSL Table 6.26)
template <class T, class U> inline void atomic_min_explicit(volatile atomic<T> *o, U u, memory_order m) {
    atomic_fetch_min_explicit(o, u, m);
}
template <class T, class U> inline void atomic_max_explicit(volatile atomic<T> *o, U u, memory_order m) {
    atomic_fetch_max_explicit(o, u, m);
}

// ---------------------------------------------------- simdgroup matrices
// MSL 6.7: an 8x8 matrix spread over the 32 lanes of a SIMD-group, two
// elements per lane. Lane l holds row (q & 4) + (l / 2) % 4 and columns
// (q & 2) * 2 + (l % 2) * 2 and the next one, where q = l / 4: the layout
// Apple GPUs use and that code reading thread_elements() (MLX's steel GEMMs)
// relies on. Every function must be reached by all lanes of the SIMD-group,
// as in Metal; the multiplies exchange operands through the cooperative
// runtime and accumulate in float.
template <class T, int Cols, int Rows>
struct simdgroup_matrix;

} // namespace metal

namespace mkpy {
// (row, column of the first element) that lane `l` holds
inline void simdgroup_coord(unsigned l, unsigned &row, unsigned &col) {
    unsigned q = l / 4;
    row = (q & 4) + (l / 2) % 4;
    col = (q & 2) * 2 + (l % 2) * 2;
}
// the lane holding element (row, col)
inline unsigned simdgroup_owner(unsigned row, unsigned col) {
    return (row >> 2 & 1) << 4 | (col >> 2 & 1) << 3 | (row >> 1 & 1) << 2 | (row & 1) << 1 | (col >> 1 & 1);
}
inline unsigned simdgroup_lane(const char *file, int line, int col) {
    uint32_t lane;
    active_mask(file, line, col, lane);
    return lane;
}
} // namespace mkpy

namespace metal {

template <class T, int Cols, int Rows>
struct simdgroup_matrix {
    static_assert(Cols == 8 && Rows == 8, "mkpy supports the 8x8 simdgroup matrices that Apple GPUs have");
    vec<T, 2> e;
    simdgroup_matrix() = default;
    // a diagonal matrix holding d on the diagonal and zero elsewhere
    explicit simdgroup_matrix(T d, MKPY_SITE) {
        unsigned row, col;
        ::mkpy::simdgroup_coord(::mkpy::simdgroup_lane(MKPY_AT), row, col);
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

// Element (r, c) of the matrix is src[(origin.y + r) * elements_per_row +
// origin.x + c], or element (c, r) of that block when transposed; the
// origin is (column, row) as in Metal.
template <class T, class P, int Cols, int Rows>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows> &d, const P *src, ulong elements_per_row = Cols,
                           ulong2 origin = ulong2(0), bool transpose = false, MKPY_SITE) {
    unsigned row, col;
    ::mkpy::simdgroup_coord(::mkpy::simdgroup_lane(MKPY_AT), row, col);
    for (unsigned j = 0; j < 2; j++) {
        ulong r = transpose ? col + j : row, c = transpose ? row : col + j;
        d.e[j] = T(src[(origin.y + r) * elements_per_row + origin.x + c]);
    }
}
template <class T, class P, int Cols, int Rows>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows> &a, P *dst, ulong elements_per_row = Cols,
                            ulong2 origin = ulong2(0), bool transpose = false, MKPY_SITE) {
    unsigned row, col;
    ::mkpy::simdgroup_coord(::mkpy::simdgroup_lane(MKPY_AT), row, col);
    for (unsigned j = 0; j < 2; j++) {
        ulong r = transpose ? col + j : row, c = transpose ? row : col + j;
        dst[(origin.y + r) * elements_per_row + origin.x + c] = P(a.e[j]);
    }
}

} // namespace metal

namespace mkpy {
template <class TA, class TB>
struct mma_operands {
    ::metal::vec<TA, 2> a;
    ::metal::vec<TB, 2> b;
};
// d = a * b (+ c): each lane gathers its row of a and its two columns of b
// from the lanes holding them, and sums the eight products in float.
template <class TD, class TA, class TB, class TC>
inline void simdgroup_mma(::metal::simdgroup_matrix<TD, 8, 8> &d, const ::metal::simdgroup_matrix<TA, 8, 8> &a,
                          const ::metal::simdgroup_matrix<TB, 8, 8> &b, const ::metal::simdgroup_matrix<TC, 8, 8> *c,
                          const char *file, int line, int col) {
    uint32_t mask, lane;
    unsigned char *s = exchange(mma_operands<TA, TB>{a.e, b.e}, mask, lane, file, line, col);
    unsigned row, c0;
    simdgroup_coord(lane, row, c0);
    float acc[2] = {c ? float(c->e[0]) : 0.0f, c ? float(c->e[1]) : 0.0f};
    for (unsigned k = 0; k < 8; k++) {
        float x = float(slot<mma_operands<TA, TB>>(s, simdgroup_owner(row, k)).a[k & 1]);
        mma_operands<TA, TB> bk = slot<mma_operands<TA, TB>>(s, simdgroup_owner(k, c0));
        acc[0] = __builtin_fmaf(x, float(bk.b[0]), acc[0]);
        acc[1] = __builtin_fmaf(x, float(bk.b[1]), acc[1]);
    }
    d.e[0] = TD(acc[0]);
    d.e[1] = TD(acc[1]);
}
} // namespace mkpy

namespace metal {
template <class TD, class TA, class TB, int Cols, int Rows, int K>
inline void simdgroup_multiply(simdgroup_matrix<TD, Cols, Rows> &d, const simdgroup_matrix<TA, K, Rows> &a,
                               const simdgroup_matrix<TB, Cols, K> &b, MKPY_SITE) {
    ::mkpy::simdgroup_mma(d, a, b, (const simdgroup_matrix<TD, 8, 8> *)nullptr, MKPY_AT);
}
template <class TD, class TA, class TB, class TC, int Cols, int Rows, int K>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<TD, Cols, Rows> &d, const simdgroup_matrix<TA, K, Rows> &a,
                                          const simdgroup_matrix<TB, Cols, K> &b,
                                          const simdgroup_matrix<TC, Cols, Rows> &c, MKPY_SITE) {
    ::mkpy::simdgroup_mma(d, a, b, &c, MKPY_AT);
}

} // namespace metal

namespace mkpy {
// Threadgroup variables: the translator adds a call after each declaration.
inline void threadgroup_alloc(const void *addr, size_t size, const char *file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    mkpy_sync_threadgroup_alloc(addr, size, file, line);
}
} // namespace mkpy

#endif
