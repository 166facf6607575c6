/* Devices and streams, as MLX's (mlx/device.h, mlx/stream.h).
 *
 * mkpy has one back-end, the CPU, which serves both of MLX's device types:
 * `gpu` stands for the Metal device of a Mac (the default device, as there)
 * and `cpu` for MLX's CPU device. What a stream decides is MLX's rules: an
 * op on a GPU stream refuses float64 ("float64 is not supported on the
 * GPU", when its node is made, as MLX's array constructor), the linalg ops
 * MLX runs on the CPU only refuse GPU streams, and a stream can only be
 * evaluated on the thread that made it.
 *
 * A stream is a device type and an index, packed in 32 bits (mk_stream).
 * Indices count up over the process, shared by both device types, as
 * MLX's. Per thread (as MLX's `thread_local` maps):
 *   - the default stream of each device type, made on first use;
 *   - the streams the thread made (new_stream, and its default streams):
 *     only those, plus the thread-unsafe streams (usable anywhere), can be
 *     evaluated on it; another thread's stream raises MLX's RuntimeError
 *     "There is no Stream(gpu, 3) in current thread." when evaluated;
 *   - the stream each thread-local stream (new_thread_local_stream) maps to
 *     on this thread, made on first use;
 *   - a "current stream" override: the stream an op was called with
 *     (stream=...), or the primitive whose transformation rule builds nodes
 *     (transforms.c), for the nodes made meanwhile.
 * The default device is global, as MLX's.
 *
 * Every node records the stream it was made on (mk_array.stream and
 * mk_prim.stream, set by mk_prim_make from mk_current_stream()). */
#ifndef MK_STREAM_H
#define MK_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "error.h"

typedef enum { MK_CPU = 0, MK_GPU = 1 } mk_device_type;

typedef uint32_t mk_stream; /* bit 31: gpu; bits 0-30: the index */
#define MK_STREAM_NONE UINT32_MAX /* no stream (an unset override) */
#define MK_STREAM_MAX_INDEX 0x7ffffffe

static inline mk_stream mk_stream_make(mk_device_type d, uint32_t index) {
    return (d == MK_GPU ? 0x80000000u : 0u) | index;
}
static inline mk_device_type mk_stream_device(mk_stream s) { return (s >> 31) ? MK_GPU : MK_CPU; }
static inline uint32_t mk_stream_index(mk_stream s) { return s & 0x7fffffffu; }
static inline const char *mk_device_name(mk_device_type d) { return d == MK_GPU ? "gpu" : "cpu"; }

/* The global default device (MK_GPU unless set, as on a Mac). */
mk_device_type mk_default_device(void);
void mk_set_default_device(mk_device_type d);

/* This thread's default stream of a device, made on first use. Returns
 * MK_STREAM_NONE after mk_nomem() or when the indices ran out. */
mk_stream mk_default_stream(mk_device_type d);
/* Makes s this thread's default stream for its device. */
void mk_set_default_stream(mk_stream s);
/* A new stream, usable on this thread (new_stream), or on any thread
 * (new_thread_unsafe_stream). MK_STREAM_NONE with the error set on failure. */
mk_stream mk_new_stream(mk_device_type d);
mk_stream mk_new_thread_unsafe_stream(mk_device_type d);

/* Thread-local streams: an index of their own (counted apart from
 * streams'), and per thread the stream each maps to, made on first use. */
int64_t mk_new_thread_local_stream(void);
mk_stream mk_stream_from_thread_local(int64_t tls, mk_device_type d);

/* MLX's clear_streams: destroys the streams this thread made (its default
 * streams too: their values stay its defaults, and evaluating on them
 * raises, as MLX). On the process's main thread, the thread-unsafe GPU
 * streams go as well (MLX's Metal back-end clears its global encoders
 * there). */
void mk_clear_streams(void);

/* Whether nodes on s can be evaluated on this thread. */
bool mk_stream_usable(mk_stream s);
/* 0, or -1 with MLX's RuntimeError when s cannot be evaluated here. */
int mk_stream_check_usable(mk_stream s);

/* The stream nodes made now record: the override, else this thread's
 * default stream of the default device. MK_STREAM_NONE after mk_nomem(). */
mk_stream mk_current_stream(void);
/* Sets the override (MK_STREAM_NONE: none) and returns the previous one, to
 * be restored with another call. */
mk_stream mk_stream_scope(mk_stream s);
/* The override itself (MK_STREAM_NONE: none). */
mk_stream mk_stream_override(void);
/* A binding call that takes stream= (csrc/python/mkpy.h,
 * MKPY_STREAM_BINDING): begin returns the override to restore and opens a
 * call on this thread; end closes it and restores the override, so a
 * stream= override lasts for its call only. mk_stream_in_call() tells
 * whether a call is open (the binding sets an override only inside one). */
mk_stream mk_stream_call_begin(void);
void mk_stream_call_end(mk_stream saved);
bool mk_stream_in_call(void);
/* 1 when the current stream is a GPU stream, 0 for a CPU one, -1 on error. */
int mk_current_stream_is_gpu(void);

/* MLX's float64 rule for a node on stream s: 0, or -1 with MLX's
 * ValueError "float64 is not supported on the GPU". */
static inline int mk_stream_check_dtype(mk_stream s, mk_dtype dt) {
    if (dt == MK_FLOAT64 && s != MK_STREAM_NONE && mk_stream_device(s) == MK_GPU) {
        mk_error_set(MK_ERR_VALUE, "float64 is not supported on the GPU");
        return -1;
    }
    return 0;
}

#endif
