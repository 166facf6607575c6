/* float16 and bfloat16 scalars: storage types and round-to-nearest-even
 * conversions to and from float. Arithmetic on them is done in float and
 * rounded once, which gives the correctly rounded result for + - * / sqrt. */
#ifndef MK_HALF_H
#define MK_HALF_H

#include <stdint.h>
#include <string.h>

typedef struct { uint16_t bits; } mk_f16;
typedef struct { uint16_t bits; } mk_bf16;

static inline uint32_t mk_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float mk_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float mk_f16_to_f32(mk_f16 h) {
    uint32_t sign = (uint32_t)(h.bits & 0x8000) << 16;
    uint32_t exp = (h.bits >> 10) & 0x1f;
    uint32_t man = h.bits & 0x3ff;
    if (exp == 0x1f) return mk_bits_f32(sign | 0x7f800000u | (man << 13)); /* inf/nan */
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24 */
        float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    return mk_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline mk_f16 mk_f32_to_f16(float f) {
    uint32_t x = mk_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    mk_f16 h;
    if (ax >= 0x7f800000u) { /* inf or nan */
        h.bits = (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? (0x200 | ((ax >> 13) & 0x3ff)) : 0));
        return h;
    }
    if (ax >= 0x477ff000u) { /* rounds to >= 65520: overflow */
        h.bits = (uint16_t)(sign | 0x7c00);
        return h;
    }
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        /* adding 0.5 (2^-1) shifts the value so the float adder rounds it at 2^-24 */
        float r = mk_bits_f32(ax) + 0.5f;
        h.bits = (uint16_t)(sign | (mk_f32_bits(r) - 0x3f000000u));
        return h;
    }
    uint32_t odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + odd; /* rebias exponent (-112 << 23) and round to nearest even */
    h.bits = (uint16_t)(sign | (ax >> 13));
    return h;
}

static inline float mk_bf16_to_f32(mk_bf16 b) { return mk_bits_f32((uint32_t)b.bits << 16); }

static inline mk_bf16 mk_f32_to_bf16(float f) {
    uint32_t x = mk_f32_bits(f);
    mk_bf16 b;
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        b.bits = (uint16_t)((x >> 16) | 0x40); /* quiet nan */
        return b;
    }
    x += 0x7fffu + ((x >> 16) & 1);
    b.bits = (uint16_t)(x >> 16);
    return b;
}

#endif
