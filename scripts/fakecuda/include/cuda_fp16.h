// fakecuda's host stand-in for CUDA's cuda_fp16.h: __half as clang's _Float16,
// arithmetic through float.
#pragma once
struct __half {
    _Float16 v;
    __half() = default;
    __half(float f) : v((_Float16)f) {}
    __half(double f) : v((_Float16)f) {}
    __half(int f) : v((_Float16)f) {}
    operator float() const { return (float)v; }
};
static inline __half __float2half(float f) { return __half(f); }
static inline float __half2float(__half h) { return (float)h; }
