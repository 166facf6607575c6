// Metal's cooperative features for kernels run by mkpy: barriers, SIMD-group
// and quad-group functions, atomics and threadgroup memory accounting.
//
// Barriers and SIMD-group functions call into mkpy's C runtime (through the
// function table handed to mkpy_kernel_set_api), which runs each GPU thread
// of a threadgroup on its own fiber and switches between them. A SIMD-group
// function is an exchange: every active lane deposits its value, waits for
// the others, then computes its own result from all lanes' values.
//
// The call site of a barrier (file and line, which #line markers make the
// user's own) is captured with __builtin_FILE/__builtin_LINE so divergence
// errors can name it.
#ifndef MKPY_COOP_H
#define MKPY_COOP_H

#include <string.h>
#include <type_traits>

#include "mkpy_launch.h"

namespace mkpy {

inline const mkpy_coop_api *api = nullptr;

template <class T>
inline T slot(const unsigned char *slots, unsigned lane) {
    T v;
    memcpy(&v, slots + lane * MKPY_SIMD_SLOT, sizeof(T));
    return v;
}

// Exchanges one value per lane; returns the slots, fills mask and lane.
template <class T>
inline const unsigned char *exchange(const T &v, uint32_t &mask, uint32_t &lane) {
    static_assert(sizeof(T) <= MKPY_SIMD_SLOT, "SIMD-group values are at most 32 bytes");
    return api->simd_exchange(&v, sizeof(T), &mask, &lane);
}

// Reduction over the active lanes in [lo, hi) using op, in lane order.
template <class T, class Op>
inline T reduce(const T &v, unsigned width, Op op) {
    uint32_t mask, lane;
    const unsigned char *s = exchange(v, mask, lane);
    unsigned lo = lane / width * width;
    bool first = true;
    T acc = v;
    for (unsigned i = lo; i < lo + width; i++) {
        if (!(mask >> i & 1u)) continue;
        T x = slot<T>(s, i);
        acc = first ? x : op(acc, x);
        first = false;
    }
    return acc;
}

// Prefix over the active lanes below (exclusive) or up to (inclusive) this one.
template <class T, class Op>
inline T prefix(const T &v, unsigned width, bool inclusive, T identity, Op op) {
    uint32_t mask, lane;
    const unsigned char *s = exchange(v, mask, lane);
    unsigned lo = lane / width * width;
    T acc = identity;
    for (unsigned i = lo; i < lane + (inclusive ? 1u : 0u); i++)
        if (mask >> i & 1u) acc = op(acc, slot<T>(s, i));
    return acc;
}

// Value of lane `src` (within this lane's segment of `width` lanes), or this
// lane's own value when src is outside the segment or inactive.
template <class T>
inline T take(const T &v, unsigned width, int (*pick)(int lane, int seg_lane, int arg, int width), int arg) {
    uint32_t mask, lane;
    const unsigned char *s = exchange(v, mask, lane);
    int lo = (int)(lane / width * width);
    int src = pick((int)lane, (int)lane - lo, arg, (int)width);
    if (src < 0 || src >= (int)width) return v;
    src += lo;
    return (mask >> src & 1u) ? slot<T>(s, (unsigned)src) : v;
}

inline int pick_abs(int, int, int arg, int) { return arg; }
inline int pick_up(int, int l, int d, int) { return l - d; }
inline int pick_down(int, int l, int d, int) { return l + d; }
inline int pick_xor(int, int l, int m, int) { return l ^ m; }
inline int pick_rot_up(int, int l, int d, int w) { return ((l - d) % w + w) % w; }
inline int pick_rot_down(int, int l, int d, int w) { return (l + d) % w; }

// shuffle-and-fill: below delta (up) or past the end (down), take the
// filling value of the lane `width` places away, within segments of `modulo`.
template <class T>
inline T fill(const T &data, const T &filling, int delta, int modulo, bool up) {
    uint32_t mask, lane, m2, l2;
    const unsigned char *sd = exchange(data, mask, lane);
    T mine_d[MKPY_SIMD_WIDTH];
    for (unsigned i = 0; i < MKPY_SIMD_WIDTH; i++)
        if (mask >> i & 1u) mine_d[i] = slot<T>(sd, i);
    const unsigned char *sf = exchange(filling, m2, l2);
    int lo = (int)lane / modulo * modulo, l = (int)lane - lo;
    int src;
    bool from_fill;
    if (up) {
        from_fill = l < delta;
        src = from_fill ? l + modulo - delta : l - delta;
    } else {
        from_fill = l + delta >= modulo;
        src = from_fill ? l + delta - modulo : l + delta;
    }
    src += lo;
    if (src < 0 || src >= MKPY_SIMD_WIDTH || !(mask >> src & 1u)) return data;
    return from_fill ? slot<T>(sf, (unsigned)src) : mine_d[src];
}

struct vote {
    uint64_t v;
    explicit operator uint64_t() const { return v; }
    operator bool() const { return v != 0; }
    bool all() const { return v == 0xffffffffull; }
    bool any() const { return v != 0; }
};

template <class T>
struct is_int_like : std::integral_constant<bool, std::is_integral<T>::value> {};

} // namespace mkpy

namespace metal {

// ------------------------------------------------------------ barriers
enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4,
                                  mem_threadgroup_imageblock = 8, mem_object_data = 16 };
inline constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags((unsigned)a | (unsigned)b); }

inline void threadgroup_barrier(mem_flags = mem_flags::mem_none, const char *file = __builtin_FILE(),
                                int line = __builtin_LINE()) {
    ::mkpy::api->barrier(file, line);
}
inline void simdgroup_barrier(mem_flags = mem_flags::mem_none, const char *file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    ::mkpy::api->simd_barrier(file, line);
}

// ---------------------------------------------------- SIMD-group functions
#define MKPY_W MKPY_SIMD_WIDTH
template <class T> inline T simd_sum(T v) { return ::mkpy::reduce(v, MKPY_W, [](T a, T b) { return T(a + b); }); }
template <class T> inline T simd_product(T v) { return ::mkpy::reduce(v, MKPY_W, [](T a, T b) { return T(a * b); }); }
template <class T> inline T simd_min(T v) { return ::mkpy::reduce(v, MKPY_W, [](T a, T b) { return T(min(a, b)); }); }
template <class T> inline T simd_max(T v) { return ::mkpy::reduce(v, MKPY_W, [](T a, T b) { return T(max(a, b)); }); }
template <class T> inline T simd_and(T v) { return ::mkpy::reduce(v, MKPY_W, [](T a, T b) { return T(a & b); }); }
template <class T> inline T simd_or(T v) { return ::mkpy::reduce(v, MKPY_W, [](T a, T b) { return T(a | b); }); }
template <class T> inline T simd_xor(T v) { return ::mkpy::reduce(v, MKPY_W, [](T a, T b) { return T(a ^ b); }); }
template <class T> inline T simd_prefix_inclusive_sum(T v) {
    return ::mkpy::prefix(v, MKPY_W, true, T(0), [](T a, T b) { return T(a + b); });
}
template <class T> inline T simd_prefix_exclusive_sum(T v) {
    return ::mkpy::prefix(v, MKPY_W, false, T(0), [](T a, T b) { return T(a + b); });
}
template <class T> inline T simd_prefix_inclusive_product(T v) {
    return ::mkpy::prefix(v, MKPY_W, true, T(1), [](T a, T b) { return T(a * b); });
}
template <class T> inline T simd_prefix_exclusive_product(T v) {
    return ::mkpy::prefix(v, MKPY_W, false, T(1), [](T a, T b) { return T(a * b); });
}
template <class T> inline T simd_shuffle(T v, unsigned short lane) { return ::mkpy::take(v, MKPY_W, ::mkpy::pick_abs, lane); }
template <class T> inline T simd_broadcast(T v, unsigned short lane) { return ::mkpy::take(v, MKPY_W, ::mkpy::pick_abs, lane); }
template <class T> inline T simd_shuffle_up(T v, unsigned short d) { return ::mkpy::take(v, MKPY_W, ::mkpy::pick_up, d); }
template <class T> inline T simd_shuffle_down(T v, unsigned short d) { return ::mkpy::take(v, MKPY_W, ::mkpy::pick_down, d); }
template <class T> inline T simd_shuffle_xor(T v, unsigned short m) { return ::mkpy::take(v, MKPY_W, ::mkpy::pick_xor, m); }
template <class T> inline T simd_shuffle_rotate_up(T v, unsigned short d) { return ::mkpy::take(v, MKPY_W, ::mkpy::pick_rot_up, d); }
template <class T> inline T simd_shuffle_rotate_down(T v, unsigned short d) { return ::mkpy::take(v, MKPY_W, ::mkpy::pick_rot_down, d); }
template <class T> inline T simd_shuffle_and_fill_up(T data, T filling, unsigned short d, unsigned short modulo = MKPY_W) {
    return ::mkpy::fill(data, filling, d, modulo, true);
}
template <class T> inline T simd_shuffle_and_fill_down(T data, T filling, unsigned short d, unsigned short modulo = MKPY_W) {
    return ::mkpy::fill(data, filling, d, modulo, false);
}
template <class T> inline T simd_broadcast_first(T v) {
    uint32_t mask, lane;
    const unsigned char *s = ::mkpy::exchange(v, mask, lane);
    return ::mkpy::slot<T>(s, (unsigned)__builtin_ctz(mask));
}
inline ::mkpy::vote simd_ballot(bool b) {
    uint32_t mask, lane;
    const unsigned char *s = ::mkpy::exchange(b, mask, lane);
    uint64_t v = 0;
    for (unsigned i = 0; i < MKPY_W; i++)
        if ((mask >> i & 1u) && ::mkpy::slot<bool>(s, i)) v |= 1ull << i;
    return {v};
}
inline ::mkpy::vote simd_active_threads_mask() {
    uint32_t mask, lane;
    ::mkpy::exchange(char(0), mask, lane);
    return {mask};
}
inline bool simd_all(bool b) {
    uint32_t mask, lane;
    const unsigned char *s = ::mkpy::exchange(b, mask, lane);
    for (unsigned i = 0; i < MKPY_W; i++)
        if ((mask >> i & 1u) && !::mkpy::slot<bool>(s, i)) return false;
    return true;
}
inline bool simd_any(bool b) {
    uint32_t mask, lane;
    const unsigned char *s = ::mkpy::exchange(b, mask, lane);
    for (unsigned i = 0; i < MKPY_W; i++)
        if ((mask >> i & 1u) && ::mkpy::slot<bool>(s, i)) return true;
    return false;
}
inline bool simd_is_first() {
    uint32_t mask, lane;
    ::mkpy::exchange(char(0), mask, lane);
    return lane == (uint32_t)__builtin_ctz(mask);
}

// ---------------------------------------------------- quad-group functions
template <class T> inline T quad_sum(T v) { return ::mkpy::reduce(v, 4, [](T a, T b) { return T(a + b); }); }
template <class T> inline T quad_product(T v) { return ::mkpy::reduce(v, 4, [](T a, T b) { return T(a * b); }); }
template <class T> inline T quad_min(T v) { return ::mkpy::reduce(v, 4, [](T a, T b) { return T(min(a, b)); }); }
template <class T> inline T quad_max(T v) { return ::mkpy::reduce(v, 4, [](T a, T b) { return T(max(a, b)); }); }
template <class T> inline T quad_and(T v) { return ::mkpy::reduce(v, 4, [](T a, T b) { return T(a & b); }); }
template <class T> inline T quad_or(T v) { return ::mkpy::reduce(v, 4, [](T a, T b) { return T(a | b); }); }
template <class T> inline T quad_xor(T v) { return ::mkpy::reduce(v, 4, [](T a, T b) { return T(a ^ b); }); }
template <class T> inline T quad_prefix_inclusive_sum(T v) {
    return ::mkpy::prefix(v, 4, true, T(0), [](T a, T b) { return T(a + b); });
}
template <class T> inline T quad_prefix_exclusive_sum(T v) {
    return ::mkpy::prefix(v, 4, false, T(0), [](T a, T b) { return T(a + b); });
}
template <class T> inline T quad_prefix_inclusive_product(T v) {
    return ::mkpy::prefix(v, 4, true, T(1), [](T a, T b) { return T(a * b); });
}
template <class T> inline T quad_prefix_exclusive_product(T v) {
    return ::mkpy::prefix(v, 4, false, T(1), [](T a, T b) { return T(a * b); });
}
template <class T> inline T quad_shuffle(T v, unsigned short lane) { return ::mkpy::take(v, 4, ::mkpy::pick_abs, lane); }
template <class T> inline T quad_broadcast(T v, unsigned short lane) { return ::mkpy::take(v, 4, ::mkpy::pick_abs, lane); }
template <class T> inline T quad_shuffle_up(T v, unsigned short d) { return ::mkpy::take(v, 4, ::mkpy::pick_up, d); }
template <class T> inline T quad_shuffle_down(T v, unsigned short d) { return ::mkpy::take(v, 4, ::mkpy::pick_down, d); }
template <class T> inline T quad_shuffle_xor(T v, unsigned short m) { return ::mkpy::take(v, 4, ::mkpy::pick_xor, m); }
template <class T> inline T quad_shuffle_rotate_up(T v, unsigned short d) { return ::mkpy::take(v, 4, ::mkpy::pick_rot_up, d); }
template <class T> inline T quad_shuffle_rotate_down(T v, unsigned short d) { return ::mkpy::take(v, 4, ::mkpy::pick_rot_down, d); }
template <class T> inline T quad_shuffle_and_fill_up(T data, T filling, unsigned short d, unsigned short modulo = 4) {
    return ::mkpy::fill(data, filling, d, modulo, true);
}
template <class T> inline T quad_shuffle_and_fill_down(T data, T filling, unsigned short d, unsigned short modulo = 4) {
    return ::mkpy::fill(data, filling, d, modulo, false);
}
template <class T> inline T quad_broadcast_first(T v) {
    uint32_t mask, lane;
    const unsigned char *s = ::mkpy::exchange(v, mask, lane);
    unsigned q = (mask >> (lane / 4 * 4)) & 0xfu;
    return ::mkpy::slot<T>(s, lane / 4 * 4 + (unsigned)__builtin_ctz(q));
}
inline ::mkpy::vote quad_ballot(bool b) {
    uint32_t mask, lane;
    const unsigned char *s = ::mkpy::exchange(b, mask, lane);
    uint64_t v = 0;
    for (unsigned i = lane / 4 * 4, k = 0; k < 4; i++, k++)
        if ((mask >> i & 1u) && ::mkpy::slot<bool>(s, i)) v |= 1ull << k;
    return {v};
}
inline bool quad_all(bool b) { return (uint64_t)quad_ballot(b) == (uint64_t)quad_ballot(true); }
inline bool quad_any(bool b) { return (uint64_t)quad_ballot(b) != 0; }
#undef MKPY_W

// ------------------------------------------------------------- atomics
enum memory_order { memory_order_relaxed, memory_order_seq_cst };

template <class T>
struct atomic {
    T value;
};
using atomic_int = atomic<int>;
using atomic_uint = atomic<unsigned int>;
using atomic_float = atomic<float>;
using atomic_bool = atomic<bool>;

template <class T> inline T atomic_load_explicit(const volatile atomic<T> *o, memory_order) {
    T v;
    __atomic_load((T *)&o->value, &v, __ATOMIC_RELAXED);
    return v;
}
template <class T> inline void atomic_store_explicit(volatile atomic<T> *o, T v, memory_order) {
    __atomic_store((T *)&o->value, &v, __ATOMIC_RELAXED);
}
template <class T> inline T atomic_exchange_explicit(volatile atomic<T> *o, T v, memory_order) {
    T old;
    __atomic_exchange((T *)&o->value, &v, &old, __ATOMIC_RELAXED);
    return old;
}
template <class T>
inline bool atomic_compare_exchange_weak_explicit(volatile atomic<T> *o, T *expected, T desired, memory_order,
                                                  memory_order) {
    return __atomic_compare_exchange((T *)&o->value, expected, &desired, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
template <class T>
inline bool atomic_compare_exchange_strong_explicit(volatile atomic<T> *o, T *expected, T desired, memory_order,
                                                    memory_order) {
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

} // namespace metal

namespace mkpy {
// Threadgroup variables: the translator adds a call after each declaration.
inline void threadgroup_alloc(const void *addr, size_t size, const char *file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    api->threadgroup_alloc(addr, size, file, line);
}
} // namespace mkpy

#endif
