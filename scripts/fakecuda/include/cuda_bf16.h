// fakecuda's host stand-in for CUDA's cuda_bf16.h: __nv_bfloat16 as the top
// 16 bits of a float (rounded to nearest even), arithmetic through float.
#pragma once
#include <cstring>
#include <cstdint>
struct __nv_bfloat16 {
    uint16_t bits;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) {
        uint32_t u;
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) bits = (uint16_t)((u >> 16) | 0x40);
        else bits = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    __nv_bfloat16(double f) : __nv_bfloat16((float)f) {}
    operator float() const {
        uint32_t u = (uint32_t)bits << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
};
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
