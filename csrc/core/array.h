/* Arrays, buffers and the lazy graph.
 *
 * An mk_array is a node. While unevaluated it points at the primitive (mk_prim)
 * that will produce it; once evaluated it holds a buffer plus a strided view of
 * it (offset and strides in elements, so transpose, slicing and broadcasting
 * are views, as in MLX) and the primitive is dropped, which frees the graph
 * behind it.
 *
 * A primitive may have several outputs (a Metal kernel does). Outputs hold a
 * strong reference to their primitive; the primitive holds weak pointers back,
 * cleared when an output dies, plus each output's dtype and shape, so it can
 * still run when some outputs are gone.
 *
 * Reference counts are atomic: Python threads may drop arrays while another
 * thread evaluates with the GIL released. Freeing is iterative, so a chain of
 * 100,000 unevaluated nodes does not recurse.
 *
 * Threads (array.c, "Threads"): any number of threads may build and evaluate
 * graphs that share nodes. The graph's links (an array's `prim`, a
 * primitive's `inputs`, `outputs`, `state`) change under one lock; an array
 * is evaluated once its `prim` is NULL, read with acquire order, after which
 * its buffer and layout never change. A primitive runs on one thread; others
 * that need it wait for it and see its result or its error. */
#ifndef MK_ARRAY_H
#define MK_ARRAY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "error.h"

#define MK_MAX_NDIM 32

/* A device's memory, as a back-end supplies it (csrc/backend/, design.md
 * "Back-ends"). Each returns 0, or -1 with an error set; alloc returns NULL
 * after setting one. */
typedef struct mk_devmem_ops {
    const char *name; /* "cuda" */
    void *(*alloc)(size_t nbytes);
    void (*free)(void *dev, size_t nbytes);
    int (*download)(void *host, const void *dev, size_t nbytes);
    int (*upload)(void *dev, const void *host, size_t nbytes);
    /* The device's cache of freed blocks (bounded by mk_cache_limit too):
     * its bytes, and freeing its blocks down to at most `target` bytes. */
    int64_t (*cache_bytes)(void);
    void (*cache_trim)(int64_t target);
} mk_devmem_ops;

/* Where a buffer's bytes are valid (mk_buffer.where). */
enum { MK_ON_HOST = 1, MK_ON_DEVICE = 2 };

typedef struct mk_buffer {
    atomic_long refcnt;
    size_t nbytes;
    size_t capacity; /* bytes mapped, for buffers from the cache's size range */
    void *data;      /* host memory; NULL for a device buffer not yet copied down */
    /* When set, the memory belongs to someone else and release() frees it. */
    void (*release)(struct mk_buffer *);
    void *owner;
    /* The device copy, if any (devops says whose), and where the bytes are
     * valid: MK_ON_HOST, MK_ON_DEVICE or both. An evaluated buffer never
     * changes (donation refuses buffers with a device copy), so once both
     * copies are valid they stay equal. */
    void *dev;
    const mk_devmem_ops *devops;
    atomic_uint where;
} mk_buffer;

/* A buffer whose bytes live on a device only (a GPU op's output). Returns
 * NULL with an error set. */
mk_buffer *mk_buffer_device(size_t nbytes, const mk_devmem_ops *ops);
/* A buffer over host memory that someone else owns (an array adopted without
 * a copy, mx.asarray(..., copy=False)): `release` is called (with the buffer,
 * whose `owner` is as given) once the last array lets go of it, and the
 * memory is never recycled into the cache, donated or counted as mkpy's.
 * Its first use on a device takes a device copy (mk_buffer_to_device), which
 * later writes to the owner's memory do not reach. Returns NULL after
 * mk_nomem(), `release` not called. */
mk_buffer *mk_buffer_foreign(void *data, size_t nbytes, void (*release)(mk_buffer *), void *owner);
/* Makes the host copy valid (one copy down, under the buffer's lock).
 * Returns 0, or -1 with an error set. */
int mk_buffer_to_host(mk_buffer *b);
/* Makes the device copy valid on `ops`' device (allocating it and copying up
 * once). Returns 0, or -1 with an error set. */
int mk_buffer_to_device(mk_buffer *b, const mk_devmem_ops *ops);
/* mk_data's slow path: mk_buffer_to_host, and on failure a zeroed host copy
 * plus an error kept for this thread (mk_take_device_error), since mk_data's
 * callers cannot fail. */
void mk_buffer_host_slow(mk_buffer *b);
/* The error a failed implicit copy left on this thread: returns true (and
 * sets it as the current error) once, false if none. The evaluator loop and
 * the binding's reads check it. */
bool mk_take_device_error(void);
/* Copies made so far between the host and a device, each way (tests check
 * that a chain of GPU work copies nothing in between). */
void mk_device_copies(int64_t *down, int64_t *up);

/* Buffers of 1 MiB and more are "fenced": their data ends at a page followed
 * by 2 MiB of read-only zero pages (and starts after such a region), so a
 * store just past either end faults; the bytes between the data and those
 * pages (under a page before, under 64 after) are kept zero. */
bool mk_buffer_fenced(const mk_buffer *b);

/* Staging memory for kernel launches, laid out as a fenced buffer: `nbytes`
 * (rounded up to 16) end at a page, the rest of the page before them is zero,
 * read-only zero pages follow. Returns NULL after mk_nomem(). */
char *mk_stage_alloc(size_t nbytes);
void mk_stage_free(char *data, size_t nbytes);
/* The same, when the caller checked that the bytes around the data (the rest
 * of its first page before it, the padding after it) are still zero: the
 * next use of the block then zeroes only what this use's data left. */
void mk_stage_free_clean(char *data, size_t nbytes);

/* Layout flags of an evaluated array. */
enum {
    MK_ROW_CONTIG = 1, /* dense, row-major, starting at offset */
    MK_COL_CONTIG = 2, /* dense, column-major */
    MK_CONTIG = 4,     /* the elements cover one dense range (any order) */
};

typedef struct mk_array mk_array;
typedef struct mk_prim mk_prim;

struct mk_array {
    atomic_long refcnt;
    mk_dtype dtype;
    int ndim;
    int64_t size;
    int64_t shape[MK_MAX_NDIM];
    /* valid once evaluated: */
    mk_buffer *buf;
    int64_t offset;              /* elements */
    int64_t strides[MK_MAX_NDIM]; /* elements; 0 for broadcast dims */
    int flags;
    /* pending while unevaluated (NULL once evaluated; see mk_is_evaluated): */
    _Atomic(mk_prim *) prim;
    int out_index;
    uint32_t stream; /* the mk_stream its node was made on (stream.h); MK_STREAM_NONE if none */
};

/* An operation's evaluator: given evaluated inputs, fill every output
 * (mk_alloc_out or a view of an input). Returns 0, or -1 with mk_error_set. */
typedef int (*mk_eval_fn)(mk_prim *p, mk_array *const *inputs, mk_array *const *outputs);

/* A primitive's transformation rules (csrc/core/transforms.h), built from
 * lazy ops so that they can be differentiated again.
 * vjp: given the cotangent of each output (NULL: zero), sets grads[i] to the
 * cotangent of input i (a new reference, or NULL for zero) for every i with
 * want[i]. jvp: given the tangent of each input (NULL: zero), sets the
 * tangent of each output (NULL: zero). vmap: given inputs with a batch axis
 * each (axes[i], or -1 for none), sets the outputs and their batch axes.
 * All return 0, or -1 with the error set. */
typedef int (*mk_vjp_fn)(mk_prim *p, mk_array *const *cots, const bool *want, mk_array **grads);
typedef int (*mk_jvp_fn)(mk_prim *p, mk_array *const *tans, mk_array **out_tans);
typedef int (*mk_vmap_fn)(mk_prim *p, mk_array *const *inputs, const int *axes, mk_array **outs, int *out_axes);

typedef struct mk_opdef {
    const char *name;
    mk_eval_fn eval;
    void (*free_params)(void *params); /* NULL: free() */
    mk_vjp_fn vjp;                     /* NULL: not differentiable (an error) */
    mk_jvp_fn jvp;                     /* NULL: derived from vjp (transforms.c) */
    mk_vmap_fn vmap;                   /* NULL: no batching rule (an error) */
    /* set when no input has a gradient through this op (comparisons, random
     * bits, argsort): the gradient stops here without an error */
    bool nondiff;
    /* mx.compile (core/compile.c). pure: the outputs are determined by the
     * inputs, the output descriptions and the first params_size bytes of params
     * (plain bytes, or NULL params when 0): a replay on inputs of the traced
     * shapes copies the node, and equal nodes merge. copy_params: for other
     * params (pointers), a copy with which a replay re-creates the node (no
     * merging). mlx_name: MLX's name of the primitive into buf (export_to_dot;
     * NULL: name in CamelCase). */
    bool pure;
    size_t params_size;
    void *(*copy_params)(const void *params);
    void (*mlx_name)(const mk_prim *p, char *buf, size_t n);
    /* element-wise ops, views and copies: work in proportion to the output,
     * so a small graph of them runs inline with the GIL held (array.c,
     * small_prim) */
    bool cheap;
    /* the evaluator picks the device itself (metal_kernel: the front end
     * hands the node to its stream's back-end), so the evaluator loop never
     * replaces it with a back-end's */
    bool own_device;
    /* on a GPU stream with a GPU back-end active, the evaluator arms the
     * binding's Ctrl-C handler itself (mk_eval_arm) before work that may be
     * long (a GPU wait past its first polls, a CPU run): mk_eval does not,
     * so that a cached GPU kernel call makes no system call for it */
    bool gpu_arms;
} mk_opdef;

typedef struct {
    mk_dtype dtype;
    int ndim;
    int64_t shape[MK_MAX_NDIM];
} mk_outdesc;

struct mk_prim {
    atomic_long refcnt;
    const mk_opdef *op;
    int ninputs;
    mk_array **inputs; /* strong; released once the primitive has run */
    void *params;      /* op-specific, owned */
    int noutputs;
    mk_outdesc *outdesc;
    mk_array **outputs; /* weak */
    /* eval bookkeeping, under the graph lock (array.c): */
    uint64_t mark;
    int state;       /* MK_PRIM_PENDING, _RUNNING (on one thread), _DONE */
    int waiters;     /* threads waiting for it to leave RUNNING */
    unsigned fails;  /* failed runs so far */
    bool donated;    /* an output took over an input's buffer (mk_donate) */
    mk_errcode err_code; /* the last failure, for the threads that waited */
    char *err_msg;
    uint32_t stream; /* the mk_stream it was made on (stream.h), as MLX's Primitive::stream() */
};

/* --- buffers --- */
mk_buffer *mk_buffer_alloc(size_t nbytes);
/* 0, or -1 with a MemoryError when nbytes exceed the machine's memory (RAM and
 * swap): checked before every buffer allocation. */
int mk_check_alloc(size_t nbytes);
void mk_buffer_incref(mk_buffer *b);
void mk_buffer_decref(mk_buffer *b);
/* Active and peak bytes held by buffers mkpy allocated. */
int64_t mk_memory_active(void);
int64_t mk_memory_peak(void);
void mk_memory_reset_peak(void);
/* The buffer cache (as MLX's allocator): large buffers freed by arrays are
 * kept, up to the cache limit, and reused by later allocations of about the
 * same size, which saves the page faults of fresh memory. */
int64_t mk_cache_memory(void);
/* Sets the limit in bytes (trimming the cache to it); returns the old one. */
int64_t mk_cache_set_limit(int64_t limit);
/* The cache limit (INT64_MAX: none set). */
int64_t mk_cache_limit(void);
void mk_cache_clear(void);

/* --- arrays --- */
static inline void mk_incref(mk_array *a) { atomic_fetch_add_explicit(&a->refcnt, 1, memory_order_relaxed); }
void mk_decref(mk_array *a);
static inline void mk_xdecref(mk_array *a) { if (a) mk_decref(a); }
/* Evaluated arrays never change again; the acquire pairs with the release
 * that detaches the primitive once the buffer is written (array.c). */
static inline bool mk_is_evaluated(const mk_array *a) {
    return atomic_load_explicit(&((mk_array *)a)->prim, memory_order_acquire) == NULL;
}
/* The array's first element in host memory: the one accessor of CPU code.
 * A buffer that lives on a device only is copied down here, once. */
static inline void *mk_data(const mk_array *a) {
    mk_buffer *b = a->buf;
    if (__builtin_expect(!(atomic_load_explicit(&b->where, memory_order_acquire) & MK_ON_HOST), 0))
        mk_buffer_host_slow(b);
    return (char *)b->data + a->offset * (int64_t)mk_dtype_size(a->dtype);
}
/* Makes an evaluated array's host copy valid: 0, or -1 with the error set.
 * The binding calls it before reading, so that a failed copy raises. */
static inline int mk_host_sync(const mk_array *a) {
    mk_buffer *b = a->buf;
    if (__builtin_expect(!(atomic_load_explicit(&b->where, memory_order_acquire) & MK_ON_HOST), 0))
        return mk_buffer_to_host(b);
    return 0;
}

/* Product of the shape, or -1 with an error if it overflows. */
int64_t mk_shape_size(int ndim, const int64_t *shape);
/* An evaluated array viewing buffer b (its reference is taken over, also on
 * failure) at element strides `strides` from its start. */
mk_array *mk_array_over(mk_buffer *b, mk_dtype dtype, int ndim, const int64_t *shape, const int64_t *strides);
/* An evaluated array of the given shape with fresh row-contiguous storage. */
mk_array *mk_array_empty(mk_dtype dtype, int ndim, const int64_t *shape);
/* A 0-d evaluated array holding one value (bytes in the dtype's layout). */
mk_array *mk_scalar(mk_dtype dtype, const void *value);
mk_array *mk_scalar_f64(mk_dtype dtype, double v); /* converted to dtype */
mk_array *mk_scalar_i64(mk_dtype dtype, int64_t v);

/* Row-major strides (in elements) for a dense array of this shape. */
void mk_row_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Sets row-major strides and flags for a dense array at offset 0. */
void mk_set_row_contiguous(mk_array *a);
/* Recomputes flags from shape and strides. */
void mk_update_flags(mk_array *a);
/* Gives an output fresh row-contiguous storage. Returns 0 or -1. */
int mk_alloc_out(mk_array *out);
/* Buffer donation (as MLX's): while primitive p runs, gives `out` the buffer
 * of its input `in` when nothing else can see that buffer: `in` is held by p
 * alone (no Python object, no other node), the buffer is mkpy's own, dense,
 * starts at the array and is not shared with a view, the element sizes and
 * counts match, and no trace keeps inputs for a transformation. The
 * evaluator then writes the output over the input, element i after reading
 * element i. Returns false (out untouched) otherwise. A run that fails after
 * donating cannot be retried (its input is partly overwritten): later
 * evaluations of it raise. */
bool mk_donate(mk_prim *p, mk_array *out, mk_array *in);
/* mk_donate, else mk_alloc_out. Returns 0 or -1. */
int mk_donate_or_alloc(mk_prim *p, mk_array *out, mk_array *in);
/* mk_donate for a GPU evaluator: the same conditions, except that the
 * buffer's bytes must be valid on the device `ops` (its own device buffer,
 * or mkpy's host memory with a device copy). The output takes the buffer
 * and only its device copy stays valid (the evaluator writes there; a later
 * host read copies down again). */
bool mk_donate_device(mk_prim *p, mk_array *out, mk_array *in, const mk_devmem_ops *ops);

/* Asynchronous evaluators (communication, core/distributed.c). Inside its
 * evaluator an op calls mk_async_begin(p), hands the token to another
 * thread and returns MK_EVAL_ASYNC; that thread fills the outputs (the
 * evaluator's `outputs`, which stay valid) and calls mk_async_finish(token,
 * 0), or mk_async_finish(token, -1) with the error set on it. Meanwhile the
 * primitive reads as running: mk_eval goes on with the primitives that do
 * not need its outputs, waits before one that does, and returns once it has
 * finished. An evaluator that began and then fails before handing the token
 * over just returns -1. */
#define MK_EVAL_ASYNC 1
typedef struct mk_async mk_async;
mk_async *mk_async_begin(mk_prim *p);
void mk_async_finish(mk_async *a, int rc);

/* Makes out a view of in's buffer with the given offset and strides. */
void mk_set_view(mk_array *out, const mk_array *in, int64_t offset, const int64_t *strides);

/* --- graph --- */
/* Creates a primitive with its outputs. Takes ownership of params (even on
 * failure). Inputs are borrowed (the primitive increfs them). On success
 * returns 0 and fills outs[] with new references. */
int mk_prim_make(const mk_opdef *op, void *params, int ninputs, mk_array *const *inputs, int noutputs,
                 const mk_outdesc *outdesc, mk_array **outs);
/* One-output convenience: returns a new reference or NULL. */
mk_array *mk_node(const mk_opdef *op, void *params, mk_dtype dtype, int ndim, const int64_t *shape,
                  int ninputs, mk_array *const *inputs);

/* Evaluates arrays (and everything they depend on). Thread-safe with respect
 * to Python: call it with the GIL released. Returns 0 or -1. */
int mk_eval(mk_array *const *arrays, int n);

/* Tracing (function transformations): while this thread's trace depth is
 * above 0, evaluated arrays keep their primitive and its inputs, so the
 * graph a transformation walks survives evaluations inside the traced
 * function. */
void mk_trace_push(void);
void mk_trace_pop(void);
bool mk_tracing(void);
static inline int mk_eval1(mk_array *a) { return mk_is_evaluated(a) ? 0 : mk_eval(&a, 1); }
/* mk_eval for a small graph: when what the arrays need is at most 8
 * pending primitives, each an element-wise op, a view or a dense copy of at
 * most 4096 elements (microseconds of work, so the binding keeps the GIL for
 * it), evaluates them and returns 1 (also when there is nothing to do); -1
 * with the error set when one failed; 0, with nothing done, when the graph
 * is not small (or a trace runs): the caller then calls mk_eval. */
int mk_eval_small(mk_array *const *arrays, int n);

/* Called after each primitive is evaluated, when set (the profiler,
 * kernel/diag.c): the op's name, its start and end (CLOCK_MONOTONIC ns) and
 * its first output. */
extern void (*_Atomic mk_op_trace)(const char *op, uint64_t begin_ns, uint64_t end_ns, const mk_array *out0);

/* The evaluator a device back-end has for a primitive on a GPU stream
 * (csrc/backend/backend.c sets it while one is active): the back-end's
 * evaluator, or NULL to run the op's own (CPU) evaluator, whose reads copy
 * the inputs down (mk_data) and whose outputs a later device op copies up. */
extern mk_eval_fn (*_Atomic mk_gpu_evaluator)(const mk_prim *p);

/* Called by mk_eval (without the GIL) before it runs primitives, unless the
 * work is one small element-wise op or GPU work whose evaluators arm it
 * themselves (mk_opdef.gpu_arms): the binding arms its Ctrl-C handler. */
extern void (*_Atomic mk_eval_arm)(void);

#endif
