/* Quantisation (ops_quant.c): MLX's affine, mxfp4, mxfp8 and nvfp4 formats,
 * fp8 (e4m3) conversion, and the matrix products over quantised or gathered
 * operands. Every function follows MLX's ops of the same name: arguments,
 * defaults, dtype rules and error wording. */
#ifndef MK_OPS_QUANT_H
#define MK_OPS_QUANT_H

#include "ops.h"

typedef enum { MK_QMODE_AFFINE, MK_QMODE_MXFP4, MK_QMODE_MXFP8, MK_QMODE_NVFP4 } mk_qmode;

/* "affine" ... -> mode; -1 with "[tag] Invalid quantization mode 'x'." */
int mk_qmode_parse(const char *mode, const char *tag);
const char *mk_qmode_name(int mode);

/* group_size / bits < 0: the mode's default. Returns the number of outputs
 * (3 for affine: w, scales, biases; 2 otherwise) or -1. global_scale may be NULL. */
int mk_quantize(mk_array *w, int group_size, int bits, int mode, mk_array *global_scale, mk_array **outs);
/* biases / global_scale may be NULL; dtype < 0: MLX's default. */
mk_array *mk_dequantize(mk_array *w, mk_array *scales, mk_array *biases, int group_size, int bits, int mode,
                        mk_array *global_scale, int dtype);
mk_array *mk_quantized_matmul(mk_array *x, mk_array *w, mk_array *scales, mk_array *biases, bool transpose,
                              int group_size, int bits, int mode);
/* lhs / rhs may be NULL (MLX's defaults). */
mk_array *mk_gather_qmm(mk_array *x, mk_array *w, mk_array *scales, mk_array *biases, mk_array *lhs,
                        mk_array *rhs, bool transpose, int group_size, int bits, int mode, bool sorted);
mk_array *mk_gather_mm(mk_array *a, mk_array *b, mk_array *lhs, mk_array *rhs, bool sorted);
/* The GatherMM node itself (ops_gathermm.c): a, b of one floating dtype and
 * >= 2-D with matching inner dims; lhs, rhs integral of one shape. */
mk_array *mk_gather_mm_node(mk_array *a, mk_array *b, mk_array *lhs, mk_array *rhs, bool left_sorted,
                            bool right_sorted);
mk_array *mk_segmented_mm(mk_array *a, mk_array *b, mk_array *segments);
/* MLX's qqmm: dequantize(quantize(x)) @ dequantize(w).T (w quantized, with
 * scales, or floating); gsx / gsw: nvfp4 global scales or NULL. */
mk_array *mk_qqmm(mk_array *x, mk_array *w, mk_array *scales, int group_size, int bits, int mode, mk_array *gsx,
                  mk_array *gsw);
mk_array *mk_gather_qqmm(mk_array *x, mk_array *w, mk_array *scales, mk_array *lhs, mk_array *rhs, int group_size,
                         int bits, int mode, mk_array *gsx, mk_array *gsw, bool sorted);
mk_array *mk_to_fp8(mk_array *x);
mk_array *mk_from_fp8(mk_array *x, mk_dtype dtype);

/* Scalar conversions, exactly as MLX's CPU back end. */
uint8_t mk_fp8_from_float(float f);
float mk_fp8_to_float(uint8_t b);

#endif
