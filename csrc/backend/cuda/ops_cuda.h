/* The CUDA back-end's op evaluators (ops.c is the table). */
#ifndef MKB_OPS_CUDA_H
#define MKB_OPS_CUDA_H

#include "core/array.h"

mk_eval_fn mkb_cuda_op_eval(const mk_prim *p);

/* "matmul" through cuBLAS (cublas.c): float32, float16 and bfloat16 with
 * float accumulation, batches of one stride each (broadcast ones too); other
 * cases go to the op's own evaluator. */
int mkb_cuda_gemm_eval(mk_prim *p, mk_array *const *in, mk_array *const *out);
int mkb_cuda_segmm_eval(mk_prim *p, mk_array *const *in, mk_array *const *out);
/* Why cuBLAS cannot be used ("" when it can), for python -m mkpy. */
const char *mkb_cublas_why(void);

/* ---- the op kernels (opkern.c; mkpy/include/mkpy_cuda_ops.cuh) ---- */

#include "cuda_api.h"

typedef struct {
    const char *name; /* the opdef's name */
    mk_eval_fn eval;
} mkb_cuda_opentry;
/* NULL-terminated rows of ops.c's table */
extern const mkb_cuda_opentry mkb_cuda_ew_ops[], mkb_cuda_red_ops[];

/* mkpy_cuda_ops.cuh's type name of each dtype (NULL: none, float64) */
extern const char *const mkb_cuda_tname[MK_NDTYPES];
#define MKB_OPK_MAX 4
/* The kernels `names` of the program `body` (lines after the header's
 * #include), compiled for this GPU on first use and kept loaded. Returns 0,
 * or -1 with the error set (NVRTC's log for a compile error). */
int mkb_opkern_get(const char *body, int nent, const char *const *names, CUfunction *out);
/* Compiles body for sm_<sm> (CUBIN malloc'd): the CI's compile check too. */
int mkb_opkern_compile(const char *body, int sm, unsigned char **cubin, size_t *size);
/* Launches f over `work` threads in blocks of `block` (grid capped; the
 * kernels loop). Returns 0 or -1 with the error set. */
int mkb_opkern_launch(CUfunction f, int64_t work, unsigned block, void **params, const char *what);
/* A fresh device buffer for an output (row-contiguous), and an evaluated
 * array's device address (its offset applied; copied up once if needed). */
int mkb_cuda_out(mk_array *o);
/* mkb_cuda_out, or the buffer of the first of the n inputs that may be
 * donated (mk_donate_device; the inputs already have device copies): for an
 * element-wise kernel, which writes element i after reading element i. */
int mkb_cuda_out_donated(mk_prim *p, mk_array *o, mk_array *const *in, int n);
int mkb_cuda_ptr(const mk_array *a, CUdeviceptr *p);

/* The source lines of one kernel named `entry` (ops_ew.c): kind is one of
 * these, op an mk_unary_op or mk_binary_op. Returns the length, or -1 where
 * the GPU has no kernel for the case (the CPU's evaluator runs it). */
enum { MKB_EW_UNARY, MKB_EW_BINARY, MKB_EW_ASTYPE, MKB_EW_COPY, MKB_EW_WHERE };
int mkb_ew_body(char *buf, size_t n, const char *entry, int kind, int op, mk_dtype in, mk_dtype out);
/* The three kernels <prefix>b, <prefix>t, <prefix>p of a reduction
 * (which: MK_REDUCE_*) from dtype in to out (ops_red.c); -1 as above. */
int mkb_red_body(char *buf, size_t n, const char *prefix, int which, mk_dtype in, mk_dtype out);
/* Launches the element-wise kernel `k` of body over ndim/shape, narr
 * operands (0: the output) with these element strides and device addresses,
 * dims merged (core/iter.c), and waits for it (ops_ew.c). */
int mkb_ew_run(const char *body, const char *what, int ndim, const int64_t *shape, int narr,
               const int64_t *const *strides, CUdeviceptr *ptrs);
/* The three kernels <prefix>b, <prefix>t, <prefix>p of argmax (which 0) or
 * argmin (1) over dtype in (ops_red.c); -1 as above. */
int mkb_arg_body(char *buf, size_t n, const char *prefix, int which, mk_dtype in);

/* ---- indexing and data movement (ops_idx.c; mkpy_cuda_idx.cuh) ---- */
extern const mkb_cuda_opentry mkb_cuda_idx_ops[];
#define MKB_IDX_MAXA 4 /* index arrays of a gather or scatter on the GPU */
/* The source of one program (kernel names from prefix k: MKB_IDX_SCATTER_SET
 * defines <k>w and <k>s, the others <k>) for narr index arrays, a scatter op
 * (mk_scatter_op) and dtype t (element size alone for the byte movers).
 * Returns the length, or -1 where the GPU has no kernel for the case. */
enum {
    MKB_IDX_GATHER,
    MKB_IDX_SCATTER_SET,
    MKB_IDX_SCATTER_OP,
    MKB_IDX_PUT_SET,
    MKB_IDX_PUT_OP,
    MKB_IDX_PAD,
    MKB_IDX_FILL,
    MKB_IDX_ARANGE,
    MKB_IDX_SCAN, /* op: an mk_scan_op, t: the input's dtype */
};
int mkb_idx_body(char *buf, size_t n, const char *k, int kind, int narr, int op, mk_dtype t);
/* Hands every body ops_idx.c's evaluators can ask for to add (nk: its
 * kernels). Returns 0, or -1 when add fails or with the error set. */
int mkb_idx_check_kernels(int (*add)(void *g, const char *body, int nk), void *g);

/* mx.fast and the softmax rows (ops_fast.c): the kernels of one node kind
 * for dtypes a (the input's) and b (the output's; norm only), named `entry`
 * (attention: <entry>s, <entry>p, <entry>v). Returns the length, or -1
 * where the GPU has no kernel for the case. */
enum { MKB_FAST_NORM, MKB_FAST_ROPE, MKB_FAST_LASTAX, MKB_FAST_SDPA };
extern const mkb_cuda_opentry mkb_cuda_fast_ops[];
int mkb_fast_body(char *buf, size_t n, const char *entry, int kind, mk_dtype a, mk_dtype b);
/* Adds (through `add`, nk: the kernels in the body) every body those
 * evaluators can ask for: each float dtype, and norm's pairs. 0 or -1. */
int mkb_fast_check_bodies(int (*add)(void *g, const char *body, int nk), void *g);
/* Compiles every op kernel the GPU evaluators can ask for, for sm_<sm>, in
 * a few programs (ops_check.c); *count gets the number of kernels. Returns
 * 0, or -1 with the error set (NVRTC's log). */
int mkb_cuda_check_op_kernels(int sm, int *count);

#endif
