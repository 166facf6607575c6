/* The CUDA back-end's op evaluators (ops.c is the table). */
#ifndef MKB_OPS_CUDA_H
#define MKB_OPS_CUDA_H

#include "core/array.h"

mk_eval_fn mkb_cuda_op_eval(const mk_prim *p);

/* "matmul" through cuBLAS (cublas.c): float32, float16 and bfloat16 with
 * float accumulation, batches of one stride each (broadcast ones too); other
 * cases go to the op's own evaluator. */
int mkb_cuda_gemm_eval(mk_prim *p, mk_array *const *in, mk_array *const *out);
/* Why cuBLAS cannot be used ("" when it can), for python -m mkpy. */
const char *mkb_cublas_why(void);

#endif
