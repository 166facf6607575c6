// Printing from kernels: Metal's shader logging (MSL 3.2's `os_log`, with
// `os_log_default`) and plain `printf`, which Metal does not have (mkpy
// accepts it with allow_non_metal only, as metal_check.c refuses it).
//
// Included (after the precompiled runtime headers) only by kernels whose
// source or header mentions os_log or printf. Each call formats its message
// with the C library's snprintf and hands it to mkpy's runtime
// (mkpy_coop_api::print) with the calling thread's position; after the launch
// the runtime prints the messages on Python's sys.stdout ordered by
// threadgroup, then thread, then call (csrc/kernel/diag.c).
#ifndef MKPY_LOG_H
#define MKPY_LOG_H

#include <stdio.h>
#include <type_traits>

#include "mkpy_launch.h"

namespace mkpy {

// Where the calling GPU thread is: set before each thread runs by the
// plain loop and the fiber entry (build_program in jit.c); the fiber engine
// corrects the position of a thread resumed after a barrier.
inline thread_local const void *log_launch;
inline thread_local uint64_t log_group;
inline thread_local uint32_t log_thread;

template <class A>
inline void log_at(const void *launch, const A &t) {
    log_launch = launch;
    log_group = t.threadgroup_position_in_grid[0] +
                (uint64_t)t.threadgroups_per_grid[0] *
                    (t.threadgroup_position_in_grid[1] +
                     (uint64_t)t.threadgroups_per_grid[1] * t.threadgroup_position_in_grid[2]);
    log_thread = t.thread_index_in_threadgroup;
}

// Arguments as C's varargs take them: half and bfloat (and any other class
// that converts to float) become double; vectors cannot be printed (print
// their components).
template <class T>
inline auto log_arg(const T &v) {
    if constexpr (std::is_class<T>::value) {
        static_assert(std::is_convertible<T, float>::value,
                      "os_log/printf in a kernel: pass scalars (print a vector's components one by one)");
        return (double)(float)v;
    } else if constexpr (std::is_same<T, float>::value) {
        return (double)v;
    } else {
        return v;
    }
}

#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wformat-security"
#pragma clang diagnostic ignored "-Wformat-nonliteral"
template <class... A>
inline int log_emit(const char *fmt, const A &...a) {
    char buf[1024];
    int n;
    if constexpr (sizeof...(A) == 0)
        n = snprintf(buf, sizeof buf, "%s", fmt);
    else
        n = snprintf(buf, sizeof buf, fmt, log_arg(a)...);
    if (n < 0) return n;
    size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    if (api && api->print) api->print(buf, len, log_launch, log_group, log_thread);
    return n;
}
#pragma clang diagnostic pop

} // namespace mkpy

// MSL 3.2's logger: `os_log_default.log("x = %f", x);`, or a logger of one's
// own, `constant os_log logger("subsystem", "category");`, with log_debug,
// log_info, log_error and log_fault. Every level is printed (as with
// MTL_LOG_LEVEL=MTLLogLevelDebug on a Mac).
struct os_log {
    constexpr os_log() {}
    constexpr os_log(const char *, const char *) {}
    template <class... A>
    void log(const char *fmt, const A &...a) const { mkpy::log_emit(fmt, a...); }
    template <class... A>
    void log_debug(const char *fmt, const A &...a) const { mkpy::log_emit(fmt, a...); }
    template <class... A>
    void log_info(const char *fmt, const A &...a) const { mkpy::log_emit(fmt, a...); }
    template <class... A>
    void log_error(const char *fmt, const A &...a) const { mkpy::log_emit(fmt, a...); }
    template <class... A>
    void log_fault(const char *fmt, const A &...a) const { mkpy::log_emit(fmt, a...); }
};
inline constexpr os_log os_log_default;

// printf: not Metal (refused unless allow_non_metal), printed the same way.
#define printf(...) ::mkpy::log_emit(__VA_ARGS__)

#endif
