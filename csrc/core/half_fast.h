/* float16 <-> float32 conversion of whole runs with the CPU's F16C
 * instructions (vcvtph2ps / vcvtps2ph, 8 lanes) where the CPU has them,
 * chosen at run time; the software conversions of half.h otherwise. Both
 * give the same bits: the exact widening, round-to-nearest-even narrowing,
 * NaN kept quiet with its high payload bits (the tests compare them over
 * every float16 and over float32 edge cases). MKPY_NO_F16C=1 forces the
 * software path (tests run both). */
#ifndef MK_HALF_FAST_H
#define MK_HALF_FAST_H

#include <stdbool.h>
#include <stdint.h>

#include "half.h"

/* Whether the F16C path is used (the CPU has AVX and F16C, and
 * MKPY_NO_F16C is not set, and MKPY_ISA is not baseline). */
bool mk_f16c(void);
/* dst[i] = float(src[i * ss]) for i < n (ss in elements; 0 repeats one). */
void mk_f16_to_f32_run(const mk_f16 *src, int64_t ss, float *dst, int64_t n);
/* dst[i] = half(src[i]) for i < n, dense. */
void mk_f32_to_f16_run(const float *src, mk_f16 *dst, int64_t n);
/* dst[i] = exp(src[i]) for i < n, dense float16: the bits of MLX's exp in
 * float32 rounded to float16 (as the F16C path through the float32 kernel),
 * in one pass. Returns false (nothing done) where the CPU has no AVX2, FMA
 * and F16C or the F16C path is off. */
bool mk_f16_exp_run(const mk_f16 *src, mk_f16 *dst, int64_t n);

#endif
